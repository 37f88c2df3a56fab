"""Speed of one GRPO (or RWR) update step: tokens/s and model-FLOPs utilisation (MFU).

Random weights and a random batch of full-length sequences (the first half is prompt, the
second half response / loss tokens). Times the jitted, donated `step(params, opt_state, batch)`
after compilation and a warm-up, and prints

  model FLOPs per step = 6 * N * tokens + 12 * L * T * (heads * head_dim) * tokens
  (N = matmul params: every weight except the untied input-embedding table, whose lookup is a
  gather; the attention term is the PaLM convention, full T x T, not halved for causality);
  MFU = model FLOPs per step / step time / (peak FLOP/s per device * devices).

Recomputation (remat, the chunked LM head's backward) and the entropy pass are not model FLOPs.
The reference-policy forward that produces `ref_logprobs` is a separate call and is not timed.

Example (one H200; float32 master params, bfloat16 compute):
  python benchmarks/train_step.py --preset qwen2.5-1.5b --seq 2048 --batch 16 --micro_batches 4 \\
      --remat full
CPU demo:
  JAX_PLATFORMS=cpu python benchmarks/train_step.py --preset micro --seq 128 --batch 8 \\
      --dtype float32 --peak_flops measure
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import rl
from genenv_jax.models import ModelConfig, init_params, preset
from genenv_jax.models.config import ATTENTION_KERNELS, REMAT_POLICIES
from genenv_jax.parallel import MeshConfig, make_mesh, mesh_context

H200_PEAK_FLOPS = 788e12  # dense bf16 FLOP/s per device (the project's reference figure for one H200)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="qwen2.5-1.5b", help="model preset (genenv_jax.models.PRESETS)")
    p.add_argument("--layers", type=int, default=None, help="override the number of layers (quick tests)")
    p.add_argument("--seq", type=int, default=2048, help="sequence length (prompt + response)")
    p.add_argument("--batch", type=int, default=16, help="sequences per step (global)")
    p.add_argument("--micro_batches", type=int, default=1, help="gradient-accumulation micro-batches")
    p.add_argument("--remat", default="full", choices=REMAT_POLICIES, help="decoder-layer remat policy")
    p.add_argument("--attention", default="auto", choices=ATTENTION_KERNELS, help="attention kernel")
    p.add_argument("--rule", default="grpo", choices=("grpo", "rwr"))
    p.add_argument("--param_dtype", default="float32", help="stored (master) param dtype")
    p.add_argument("--dtype", default="bfloat16", help="compute dtype")
    p.add_argument("--chunk_size", type=int, default=512, help="LM-head sequence chunk")
    p.add_argument("--mesh", default="data=1,fsdp=-1,tensor=1", help="e.g. data=1,fsdp=4,tensor=2")
    p.add_argument("--steps", type=int, default=5, help="timed steps (the median is reported)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps after compilation")
    p.add_argument("--peak_flops", default=str(H200_PEAK_FLOPS),
                   help="peak FLOP/s per device, or 'measure' (a large matmul in the compute dtype)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def mesh_from_flag(text: str):
    """A mesh from a flag like "data=1,fsdp=-1,tensor=1" (also used by memory.py)."""
    sizes = dict(item.split("=") for item in text.split(","))
    return make_mesh(MeshConfig(**{k: int(v) for k, v in sizes.items()}))


def matmul_params(cfg: ModelConfig) -> int:
    """Params that take part in matmuls: all but the untied input-embedding table (a gather)."""
    embedding = 0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size
    return cfg.num_params() - embedding


def model_flops_per_step(cfg: ModelConfig, batch: int, seq: int) -> tuple[float, str]:
    """6 N tokens + 12 L T (heads * head_dim) tokens, and the formula with the numbers filled in."""
    tokens = batch * seq
    n = matmul_params(cfg)
    attn_width = cfg.num_heads * cfg.head_dim
    dense = 6.0 * n * tokens
    attention = 12.0 * cfg.num_layers * seq * attn_width * tokens
    text = (f"6 * N * tokens + 12 * L * T * (heads*head_dim) * tokens = 6 * {n:,} * {tokens:,} + "
            f"12 * {cfg.num_layers} * {seq} * {attn_width} * {tokens:,} = {dense:.4g} + {attention:.4g} "
            f"= {dense + attention:.4g} FLOPs")
    return dense + attention, text


def measure_peak_flops(dtype, size: int) -> float:
    """Best FLOP/s of a [size, size] x [size, size] matmul on the default device."""
    a = jnp.ones((size, size), dtype)
    b = jnp.ones((size, size), dtype)
    matmul = jax.jit(lambda x, y: x @ y)
    jax.block_until_ready(matmul(a, b))
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        jax.block_until_ready(matmul(a, b))
        best = min(best, time.perf_counter() - t0)
    return 2.0 * size ** 3 / best


def build_step(cfg: ModelConfig, rule: str, mesh, chunk_size: int, micro_batches: int) -> rl.TrainStep:
    """The GRPO or RWR step the benchmarks measure (AdamW at lr 1e-6, default loss options)."""
    optimizer = rl.make_optimizer(rl.OptimizerConfig(learning_rate=1e-6))
    if rule == "grpo":
        return rl.make_grpo_step(cfg, optimizer, rl.GRPOConfig(chunk_size=chunk_size), mesh=mesh,
                                 micro_batches=micro_batches)
    return rl.make_rwr_step(cfg, optimizer, rl.RWRConfig(chunk_size=chunk_size), mesh=mesh,
                            micro_batches=micro_batches)


def random_batch(cfg: ModelConfig, rule: str, batch: int, seq: int, rng: np.random.RandomState) -> dict:
    tokens = rng.randint(0, cfg.vocab_size, (batch, seq)).astype(np.int32)
    prompt = seq // 2
    out = {"tokens": tokens, "attention_mask": np.ones_like(tokens),
           "loss_mask": rl.build_loss_mask([prompt] * batch, [seq - prompt] * batch, seq),
           "ref_logprobs": -rng.uniform(0, 12, (batch, seq)).astype(np.float32)}
    if rule == "grpo":
        out["old_logprobs"] = -rng.uniform(0, 12, (batch, seq)).astype(np.float32)
        out["advantages"] = rng.normal(size=batch).astype(np.float32)
    else:
        out["rewards"] = rng.uniform(size=batch).astype(np.float32)
    return out


def machine_line() -> str:
    devices = jax.devices()
    return (f"{platform.node()} | {platform.platform()} | {os.cpu_count()} CPUs | "
            f"{len(devices)} x {devices[0].device_kind} ({jax.default_backend()}) | jax {jax.__version__}")


def main(argv=None) -> None:
    args = parse_args(argv)
    print("command:", "python " + shlex.join([sys.argv[0]] + (sys.argv[1:] if argv is None else list(argv))))
    print("date:   ", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    print("machine:", machine_line())

    overrides = dict(param_dtype=args.param_dtype, dtype=args.dtype, remat_policy=args.remat,
                     attention=args.attention)
    if args.layers is not None:
        overrides["num_layers"] = args.layers
    cfg = preset(args.preset, **overrides)
    mesh = mesh_from_flag(args.mesh)
    step = build_step(cfg, args.rule, mesh, args.chunk_size, args.micro_batches)
    print(f"model:   {args.preset}{'' if args.layers is None else f' ({args.layers} layers)'}: "
          f"{cfg.num_params():,} params, params {cfg.param_dtype}, compute {cfg.dtype}, remat {cfg.remat_policy}, "
          f"attention {cfg.attention}")
    print(f"step:    {args.rule.upper()}, batch {args.batch} x seq {args.seq} = {args.batch * args.seq:,} tokens, "
          f"{args.micro_batches} micro-batches, LM-head chunk {args.chunk_size}, mesh {dict(mesh.shape)}")

    with mesh_context(mesh):
        params = jax.jit(init_params, static_argnums=0, out_shardings=step.param_shardings)(
            cfg, jax.random.key(args.seed))
    opt_state = step.init_opt_state(params)
    batch = step.place_batch(random_batch(cfg, args.rule, args.batch, args.seq, np.random.RandomState(args.seed)))

    t0 = time.perf_counter()
    compiled = step.lower(params, opt_state, batch).compile()
    print(f"compile: {time.perf_counter() - t0:.1f} s")
    for _ in range(max(args.warmup, 1)):
        params, opt_state, metrics = compiled(params, opt_state, batch)
    jax.block_until_ready(metrics)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        params, opt_state, metrics = compiled(params, opt_state, batch)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - t0)
    step_time = float(np.median(times))

    flops, formula = model_flops_per_step(cfg, args.batch, args.seq)
    if args.peak_flops == "measure":
        peak = measure_peak_flops(cfg.jnp_dtype, 2048 if jax.default_backend() == "cpu" else 8192)
        peak_source = f"measured ({cfg.dtype} matmul)"
    else:
        peak, peak_source = float(args.peak_flops), "from --peak_flops"
    devices = mesh.devices.size
    tokens_per_s = args.batch * args.seq / step_time
    print(f"model FLOPs/step: {formula}")
    print(f"peak:    {peak:.4g} FLOP/s per device ({peak_source}) x {devices} devices")
    print(f"steps:   {', '.join(f'{t * 1e3:.1f}' for t in times)} ms; median {step_time * 1e3:.1f} ms")
    print(f"RESULT   tokens/s {tokens_per_s:,.0f} | model TFLOP/s {flops / step_time / 1e12:.4g} | "
          f"MFU {100 * flops / step_time / (peak * devices):.1f}% | loss {float(metrics['loss']):.4f}")
    stats = jax.devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        print(f"memory:  peak {stats['peak_bytes_in_use'] / 2**30:.2f} GiB on device 0")


if __name__ == "__main__":
    main()

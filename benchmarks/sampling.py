"""Decode speed of the KV-cache sampler against the hardware limit (and optionally HF transformers).

Random weights, random prompts of one length, greedy, stop tokens ignored (every row runs to
--new_tokens). For each batch size it times prefill and the decode program separately and prints

  decode step time measured vs the per-step limit max(bytes read / bandwidth, FLOPs / peak),
  where bytes = params read per step (every weight; the untied input-embedding table only
  gathers B rows, so it is not counted) + the KV cache of the valid context, averaged over the
  decode steps (context P + j at step j), and FLOPs = 2 x matmul params x B + attention.

Example (one H200):
  python benchmarks/sampling.py --preset qwen2.5-7b --batch 1,16,64,256,512 --prompt_len 512 \\
      --new_tokens 256 --dtype bfloat16 --hf
CPU demo:
  JAX_PLATFORMS=cpu python benchmarks/sampling.py --preset micro --batch 1,8 --prompt_len 64 \\
      --new_tokens 32 --dtype float32 --measure_hw
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import shlex
import sys
import time

if "--hf" in sys.argv:  # torch shares the accelerator: JAX must not grab 75% of its memory up front
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from genenv_jax.models import ModelConfig, init_params, param_shardings, preset  # noqa: E402
from genenv_jax.models.config import dtype_from_name  # noqa: E402
from genenv_jax.parallel import MeshConfig, make_mesh  # noqa: E402
from genenv_jax.sampling import Buckets, Sampler  # noqa: E402

H200_BANDWIDTH = 4.24e12  # bytes/s, HBM3e
H200_PEAK_FLOPS = 788e12  # bf16 matmul FLOP/s: the figure, ~80% of the 989e12 dense spec


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="qwen2.5-7b", help="model preset (genenv_jax.models.PRESETS)")
    p.add_argument("--batch", type=_ints, default=[1, 16, 64, 256, 512], help="comma-separated batch sizes")
    p.add_argument("--prompt_len", type=int, default=512)
    p.add_argument("--new_tokens", type=int, default=256)
    p.add_argument("--dtype", default="bfloat16", help="param, compute and KV cache dtype")
    p.add_argument("--mesh", default="data=1,fsdp=-1,tensor=1", help="sampling mesh, e.g. data=1,fsdp=1,tensor=8")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per batch size (the fastest is kept)")
    p.add_argument("--steps_per_sync", type=int, default=None, help="decode steps per loop-exit check")
    p.add_argument("--bandwidth", type=float, default=H200_BANDWIDTH, help="memory bandwidth, bytes/s")
    p.add_argument("--peak_flops", type=float, default=H200_PEAK_FLOPS, help="peak matmul rate, FLOP/s")
    p.add_argument("--measure_hw", action="store_true",
                   help="measure bandwidth (a big read) and peak matmul rate on this device instead")
    p.add_argument("--hf", action="store_true", help="also time HF transformers generate on the same shapes")
    p.add_argument("--hf_attention", default="sdpa", help="HF attn_implementation: sdpa, eager, ...")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _mesh_from_flag(text: str):
    sizes = dict(item.split("=") for item in text.split(","))
    return make_mesh(MeshConfig(**{k: int(v) for k, v in sizes.items()}))


# ----- hardware -----
def _best_time(fn, repeats: int = 5) -> float:
    jax.block_until_ready(fn())  # compile + warm up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def measure_hardware(dtype) -> tuple[float, float]:
    """(read bandwidth bytes/s from a big reduction, FLOP/s from a big square matmul).

    Decode mostly reads (weights, cache), so the bandwidth is a read: a sum over a resident array
    (no output buffer to allocate, which on CPU would time page faults instead of memory).
    """
    cpu = jax.devices()[0].platform == "cpu"
    n_bytes = (512 if cpu else 8192) * 2 ** 20
    x = jax.block_until_ready(jnp.ones((n_bytes // 4,), jnp.float32))
    read = jax.jit(jnp.sum)
    bandwidth = n_bytes / _best_time(lambda: read(x))
    dim = 2048 if cpu else 8192
    a = jnp.ones((dim, dim), dtype)
    matmul = jax.jit(lambda u, v: u @ v)
    flops = 2 * dim ** 3 / _best_time(lambda: matmul(a, a))
    return bandwidth, flops


# ----- the per-step limit -----
def decode_limit(cfg: ModelConfig, batch: int, prompt_len: int, new_tokens: int, bandwidth: float,
                 peak_flops: float) -> dict[str, float]:
    """Lower bound on one decode step's time, at the context length averaged over the steps."""
    itemsize = np.dtype(cfg.jnp_param_dtype).itemsize
    cache_itemsize = np.dtype(cfg.jnp_dtype).itemsize
    embed_table = 0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size
    matmul_params = cfg.num_params() - embed_table  # every weight read once per step
    context = prompt_len + new_tokens / 2  # decode step j attends over prompt_len + j slots
    kv_bytes = batch * context * cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * cache_itemsize
    param_bytes = matmul_params * itemsize
    flops = 2 * batch * matmul_params + 4 * batch * cfg.num_layers * cfg.num_heads * cfg.head_dim * context
    memory_s, compute_s = (param_bytes + kv_bytes) / bandwidth, flops / peak_flops
    return {"param_bytes": param_bytes, "kv_bytes": kv_bytes, "flops": flops, "memory_s": memory_s,
            "compute_s": compute_s, "limit_s": max(memory_s, compute_s)}


# ----- runs -----
def time_ours(sampler: Sampler, params, prompts: list[list[int]], new_tokens: int, repeats: int) -> dict[str, float]:
    best = {"prefill_s": float("inf"), "decode_s": float("inf")}
    for attempt in range(repeats + 1):  # the first run compiles
        batch = sampler.prepare_prompts(prompts, new_tokens)
        t0 = time.perf_counter()
        caches, last = sampler.prefill(params, batch)
        jax.block_until_ready(last)
        t1 = time.perf_counter()
        out = sampler.decode(params, batch, caches, last, max_new_tokens=new_tokens)
        steps = int(out.steps)  # blocks until the loop is done
        jax.block_until_ready(out.tokens)
        t2 = time.perf_counter()
        lengths = np.asarray(out.lengths)[:len(prompts)]
        assert (lengths == new_tokens).all(), f"rows stopped early: {lengths}"
        del out, caches
        if attempt:
            best["prefill_s"] = min(best["prefill_s"], t1 - t0)
            best["decode_s"] = min(best["decode_s"], t2 - t1)
    best["forward_steps"] = steps - 1  # the first token comes from the prefill logits
    return best


def time_hf(cfg: ModelConfig, prompts: np.ndarray, new_tokens: int, repeats: int, attention: str) -> float:
    """Seconds for HF transformers `generate` (greedy, EOS ignored) on the same shapes."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = _hf_model(cfg, device, attention)
    ids = torch.tensor(prompts, device=device)
    kwargs = dict(attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                  do_sample=False, eos_token_id=None, pad_token_id=0)
    best = float("inf")
    with torch.no_grad():
        for attempt in range(repeats + 1):
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(ids, **kwargs)
            if device == "cuda":
                torch.cuda.synchronize()
            if attempt:
                best = min(best, time.perf_counter() - t0)
    assert out.shape[1] == prompts.shape[1] + new_tokens
    return best


@functools.lru_cache(maxsize=1)
def _hf_model(cfg: ModelConfig, device: str, attention: str):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hf_cfg = Qwen2Config(**{k: v for k, v in cfg.to_hf_dict().items() if k not in ("architectures", "torch_dtype")})
    torch_dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[cfg.dtype]
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(hf_cfg, dtype=torch_dtype, attn_implementation=attention)
    return model.eval()


def _host_description() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{platform.node()}, {model}, {os.cpu_count()} CPUs"


def main(argv=None) -> None:
    args = parse_args(argv)
    dtype_from_name(args.dtype)
    print(f"command: {' '.join(shlex.quote(a) for a in [sys.executable, *sys.argv])}")
    print(f"date:    {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")
    print(f"machine: {_host_description()}; jax {jax.__version__}; devices: {jax.devices()} "
          f"({jax.devices()[0].device_kind})")
    cfg = preset(args.preset).replace(param_dtype=args.dtype, dtype=args.dtype)
    bandwidth, peak = args.bandwidth, args.peak_flops
    if args.measure_hw:
        bandwidth, peak = measure_hardware(cfg.jnp_dtype)
        print(f"measured: bandwidth {bandwidth / 1e9:.1f} GB/s, matmul {peak / 1e12:.2f} TFLOP/s ({args.dtype})")
    else:
        print(f"assumed:  bandwidth {bandwidth / 1e9:.1f} GB/s, matmul {peak / 1e12:.2f} TFLOP/s (flags)")

    mesh = _mesh_from_flag(args.mesh)
    shards = mesh.shape["data"] * mesh.shape["fsdp"]
    batches = sorted({-(-b // shards) * shards for b in args.batch})
    sampler = Sampler(cfg, mesh, steps_per_sync=args.steps_per_sync,
                      buckets=Buckets(batch=tuple(batches), prompt=(args.prompt_len,), new_tokens=(args.new_tokens,)))
    print(f"model:   {args.preset} ({cfg.num_params() / 1e9:.3f}B params, {args.dtype}), mesh {dict(mesh.shape)}, "
          f"prompt {args.prompt_len}, new tokens {args.new_tokens}, greedy, EOS ignored, "
          f"steps_per_sync {sampler.steps_per_sync}" + (f"; HF attention {args.hf_attention}" if args.hf else ""))
    init = jax.jit(functools.partial(init_params, cfg), out_shardings=param_shardings(cfg, mesh))
    params = sampler.prepare_params(init(jax.random.key(args.seed)))  # the stacked copy is dropped here

    rng = np.random.default_rng(args.seed)
    header = ("| batch | prefill ms | decode step ms | limit step ms | bound | % of limit | decode tok/s "
              "| limit tok/s | e2e tok/s |" + (" HF e2e tok/s | ours / HF |" if args.hf else ""))
    print()
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for batch in batches:
        prompts = rng.integers(0, cfg.vocab_size, (batch, args.prompt_len), dtype=np.int64)
        ours = time_ours(sampler, params, prompts.tolist(), args.new_tokens, args.repeats)
        limit = decode_limit(cfg, batch, args.prompt_len, args.new_tokens, bandwidth, peak)
        step_s = ours["decode_s"] / ours["forward_steps"]
        decode_tps = batch * (args.new_tokens - 1) / ours["decode_s"]
        e2e_tps = batch * args.new_tokens / (ours["prefill_s"] + ours["decode_s"])
        bound = "memory" if limit["memory_s"] >= limit["compute_s"] else "compute"
        limit_tps = batch / limit["limit_s"]
        row = (f"| {batch} | {ours['prefill_s'] * 1e3:.1f} | {step_s * 1e3:.4g} | {limit['limit_s'] * 1e3:.4g} "
               f"| {bound} | {100 * limit['limit_s'] / step_s:.1f} | {decode_tps:,.0f} | {limit_tps:,.0f} "
               f"| {e2e_tps:,.0f} |")
        if args.hf:
            hf_s = time_hf(cfg, prompts, args.new_tokens, max(1, args.repeats - 1), args.hf_attention)
            hf_tps = batch * args.new_tokens / hf_s
            row += f" {hf_tps:,.0f} | {e2e_tps / hf_tps:.2f} |"
        print(row, flush=True)


if __name__ == "__main__":
    main()

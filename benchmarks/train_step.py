"""Speed of one GRPO (or RWR) update step: tokens/s, model-FLOPs utilisation (MFU) and, with
`--phases`, the time of each pass the step and the loop around it make.

The step is the one the loop runs: full fine-tuning, or LoRA adapters over a frozen base
(`--lora_rank`), on random weights of a preset or on real weights (`--model_dir`). Rows are either
`--seq` tokens long with no padding (half prompt, half response: the original benchmark), or
shaped like the studies' rows: `--prompt_tokens` real prompt tokens left-padded to `--prompt_len`
and `--response_tokens` real response tokens right-padded to `--response_len` (the update batches'
layout, `rl/packing.py`). Times the jitted, donated step after compilation and a warm-up and prints

  model FLOPs per step = c * N_body * T_computed + c * N_head * T_head + 12 * L * S * (heads * head_dim) * T_computed
                         + 6 * N_adapters * T_computed
  c = 4 for a frozen base (a forward, and a backward that forms activation gradients only),
      6 for full fine-tuning (the weight gradients too);
  N_body = matmul params of the decoder layers; N_head = the LM head (V x D, tied or not); the input
  embedding is a gather and not counted;
  T_computed = rows x padded length (every position the layers run on, padding included);
  T_head = positions in the LM-head chunks that hold loss tokens (chunks without any are skipped;
           `rl.logprobs.head_chunks`);
  the attention term is PaLM's convention (full S x S, not halved for causality);
  MFU = model FLOPs per step / step time / (peak FLOP/s per device * devices).

Remat recomputation, the chunked LM head's backward recomputation and the entropy pass are not
model FLOPs. The step's KL reference logprobs (`--kl_coef` > 0) come from a separate forward the
loop runs before each step; `--phases` times it, the forward an old-policy recompute would cost,
the forward and backward alone, the LM head alone and the optimizer update alone.

Real-model LoRA step at the BFCL study's shapes on 2 CPU cores:
  JAX_PLATFORMS=cpu python benchmarks/train_step.py --model_dir qwen2.5-coder-0.5b-instruct \\
      --lora_rank 16 --dtype float32 --remat full --batch 8 --micro_batches 2 --chunk_size 128 \\
      --prompt_tokens 327 --response_tokens 100 --prompt_len 384 --response_len 256 --peak_flops measure --phases
Full fine-tuning on one H200 (float32 master params, bfloat16 compute):
  python benchmarks/train_step.py --preset qwen2.5-1.5b --seq 2048 --batch 16 --micro_batches 4 --remat full
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import rl
from genenv_jax.core.bucketing import length_bucket
from genenv_jax.models import ModelConfig, hidden_states, init_params, preset
from genenv_jax.models.config import ATTENTION_KERNELS, REMAT_POLICIES
from genenv_jax.models.lora import TARGETS, LoRAConfig
from genenv_jax.models.partition import Partition
from genenv_jax.parallel import MeshConfig, make_mesh, mesh_context
from genenv_jax.rl.grpo import grpo_micro_batch_loss
from genenv_jax.rl.lm_head import chunked_token_stats
from genenv_jax.rl.logprobs import head_chunks
from genenv_jax.rl.losses import normalizer, token_count
from genenv_jax.rl.packing import pack_sequences

H200_PEAK_FLOPS = 788e12  # dense bf16 FLOP/s per device (the project's reference figure for one H200)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="qwen2.5-1.5b", help="model preset (genenv_jax.models.PRESETS)")
    p.add_argument("--model_dir", default="", help="real weights: an HF directory, a .gguf file or a model name "
                   "(e.g. qwen2.5-coder-0.5b-instruct); replaces --preset")
    p.add_argument("--layers", type=int, default=None, help="override the number of layers (quick tests)")
    p.add_argument("--seq", type=int, default=2048, help="sequence length (prompt + response) without padding")
    p.add_argument("--prompt_tokens", type=int, default=0, help="real prompt tokens a row (with --response_tokens: "
                   "study-shaped rows, left-padded prompts)")
    p.add_argument("--response_tokens", type=int, default=0, help="real response (loss) tokens a row")
    p.add_argument("--prompt_len", type=int, default=0, help="padded prompt length (default: its length bucket)")
    p.add_argument("--response_len", type=int, default=0, help="padded response length (default: its length bucket)")
    p.add_argument("--batch", type=int, default=16, help="sequences per step (global)")
    p.add_argument("--micro_batches", type=int, default=1, help="gradient-accumulation micro-batches")
    p.add_argument("--remat", default="full", choices=REMAT_POLICIES, help="decoder-layer remat policy")
    p.add_argument("--attention", default="auto", choices=ATTENTION_KERNELS, help="attention kernel")
    p.add_argument("--rule", default="grpo", choices=("grpo", "rwr"))
    p.add_argument("--lora_rank", type=int, default=0, help="LoRA rank (0: full fine-tuning)")
    p.add_argument("--lora_alpha", type=float, default=32.0)
    p.add_argument("--lora_targets", default=",".join(TARGETS), help="comma-separated adapted projections")
    p.add_argument("--kl_coef", type=float, default=0.0, help="GRPO KL coefficient (> 0: reference logprobs)")
    p.add_argument("--param_dtype", default="float32", help="stored (master) param dtype")
    p.add_argument("--dtype", default="bfloat16", help="compute dtype")
    p.add_argument("--chunk_size", type=int, default=512, help="LM-head sequence chunk")
    p.add_argument("--mesh", default="data=1,fsdp=-1,tensor=1", help="e.g. data=1,fsdp=4,tensor=2")
    p.add_argument("--steps", type=int, default=5, help="timed steps (the median is reported)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps after compilation")
    p.add_argument("--phases", action="store_true", help="also time each pass alone (see the docstring)")
    p.add_argument("--peak_flops", default=str(H200_PEAK_FLOPS),
                   help="peak FLOP/s per device, or 'measure' (a large matmul in the compute dtype)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if (args.prompt_tokens > 0) != (args.response_tokens > 0):
        p.error("--prompt_tokens and --response_tokens go together")
    if args.prompt_tokens <= 0 and (args.prompt_len or args.response_len):
        p.error("--prompt_len / --response_len pad study-shaped rows: give --prompt_tokens and --response_tokens")
    return args


def mesh_from_flag(text: str):
    """A mesh from a flag like "data=1,fsdp=-1,tensor=1" (also used by memory.py)."""
    sizes = dict(item.split("=") for item in text.split(","))
    return make_mesh(MeshConfig(**{k: int(v) for k, v in sizes.items()}))


def head_params(cfg: ModelConfig) -> int:
    """Params of the LM head (V x D; the tied embedding table when the head is tied)."""
    return cfg.vocab_size * cfg.hidden_size


def matmul_params(cfg: ModelConfig) -> int:
    """Params that take part in matmuls: all but the untied input-embedding table (a gather)."""
    embedding = 0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size
    return cfg.num_params() - embedding


def body_params(cfg: ModelConfig) -> int:
    """Matmul params of the decoder layers: every param but the embedding table(s) and final norm."""
    tables = head_params(cfg) * (1 if cfg.tie_word_embeddings else 2)
    return cfg.num_params() - tables - cfg.hidden_size


def model_flops_per_step(cfg: ModelConfig, batch: int, seq: int, head_tokens: int | None = None,
                         frozen_base: bool = False, adapter_params: int = 0) -> tuple[float, str]:
    """Model FLOPs of one step (see the module docstring) and the formula with the numbers filled in.
    `head_tokens`: positions the LM head runs on (default: all of them)."""
    tokens = batch * seq
    head_tokens = tokens if head_tokens is None else head_tokens
    c = 4.0 if frozen_base else 6.0
    body, head = body_params(cfg), head_params(cfg)
    attn_width = cfg.num_heads * cfg.head_dim
    dense = c * body * tokens + c * head * head_tokens
    attention = 12.0 * cfg.num_layers * seq * attn_width * tokens
    adapters = 6.0 * adapter_params * tokens
    text = (f"{c:.0f} * N_body * T + {c:.0f} * N_head * T_head + 12 * L * S * (heads*head_dim) * T"
            f"{' + 6 * N_adapters * T' if adapter_params else ''} = {c:.0f} * {body:,} * {tokens:,} + "
            f"{c:.0f} * {head:,} * {head_tokens:,} + 12 * {cfg.num_layers} * {seq} * {attn_width} * {tokens:,}"
            f"{f' + 6 * {adapter_params:,} * {tokens:,}' if adapter_params else ''} = {dense:.4g} + {attention:.4g}"
            f"{f' + {adapters:.4g}' if adapter_params else ''} = {dense + attention + adapters:.4g} FLOPs")
    return dense + attention + adapters, text


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


def build_step(cfg: ModelConfig, rule: str, mesh, chunk_size: int, micro_batches: int,
               partition: Partition | None = None, kl_coef: float = 0.0) -> rl.TrainStep:
    """The GRPO or RWR step the benchmarks measure (AdamW at lr 1e-6, default loss options)."""
    optimizer = rl.make_optimizer(rl.OptimizerConfig(learning_rate=1e-6))
    if rule == "grpo":
        return rl.make_grpo_step(cfg, optimizer, rl.GRPOConfig(chunk_size=chunk_size, kl_coef=kl_coef), mesh=mesh,
                                 micro_batches=micro_batches, partition=partition)
    return rl.make_rwr_step(cfg, optimizer, rl.RWRConfig(chunk_size=chunk_size), mesh=mesh,
                            micro_batches=micro_batches, partition=partition)


def random_batch(cfg: ModelConfig, rule: str, batch: int, seq: int, rng: np.random.RandomState) -> dict:
    """Full-length rows, no padding: the first half prompt, the second half response."""
    tokens = rng.randint(0, cfg.vocab_size, (batch, seq)).astype(np.int32)
    prompt = seq // 2
    out = {"tokens": tokens, "attention_mask": np.ones_like(tokens),
           "loss_mask": rl.build_loss_mask([prompt] * batch, [seq - prompt] * batch, seq)}
    return out | _rule_fields(rule, batch, seq, rng)


def study_batch(cfg: ModelConfig, rule: str, batch: int, prompt_tokens: int, response_tokens: int,
                prompt_len: int, response_len: int, rng: np.random.RandomState) -> dict:
    """Rows laid out as the loop packs them: a left-padded prompt, a right-padded response."""
    prompts = [rng.randint(0, cfg.vocab_size, prompt_tokens).tolist() for _ in range(batch)]
    responses = [rng.randint(0, cfg.vocab_size, response_tokens).tolist() for _ in range(batch)]
    out = pack_sequences(prompts, responses, 0, prompt_len=prompt_len, response_len=response_len)
    return out | _rule_fields(rule, batch, prompt_len + response_len, rng)


def _rule_fields(rule: str, batch: int, seq: int, rng: np.random.RandomState) -> dict:
    out = {"ref_logprobs": -rng.uniform(0, 12, (batch, seq)).astype(np.float32)}
    if rule == "grpo":
        out["old_logprobs"] = -rng.uniform(0, 12, (batch, seq)).astype(np.float32)
        out["advantages"] = rng.normal(size=batch).astype(np.float32)
    else:
        out["rewards"] = rng.uniform(size=batch).astype(np.float32)
    return out


def head_token_count(loss_mask: np.ndarray, chunk_size: int) -> int:
    """Positions of the LM-head chunks that run (`rl.logprobs.head_chunks`: chunks of targets with a loss token)."""
    tokens = jnp.zeros(loss_mask.shape, jnp.int32)
    _, targets, use_chunk, _ = head_chunks(jnp.zeros((*loss_mask.shape, 1)), tokens, jnp.asarray(loss_mask), chunk_size)
    return int(np.asarray(use_chunk).sum()) * targets.shape[1] * targets.shape[2]


def machine_line() -> str:
    devices = jax.devices()
    return (f"{platform.node()} | {platform.platform()} | {os.cpu_count()} CPUs | "
            f"{len(devices)} x {devices[0].device_kind} ({jax.default_backend()}) | jax {jax.__version__}")


def median_time(fn: Callable[[], object], repeats: int) -> tuple[float, list[float]]:
    """Median wall time of `fn()` (blocked on its result) after one untimed call."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), times


def model_and_params(args, mesh) -> tuple[ModelConfig, object, str]:
    """(training config, base params, description): real weights of --model_dir or a random preset."""
    overrides = dict(param_dtype=args.param_dtype, dtype=args.dtype, remat_policy=args.remat,
                     attention=args.attention)
    if args.layers is not None:
        overrides["num_layers"] = args.layers
    if args.model_dir:
        from genenv_jax.data.model_sources import resolve_model_source
        from genenv_jax.models.loading import load_model

        source = resolve_model_source(args.model_dir)
        cfg, params = load_model(source.path, mesh=mesh, dtype=args.param_dtype, remat_policy=args.remat,
                                 **({} if args.layers is None else {"num_layers": args.layers}))
        return cfg.replace(**overrides), params, f"{args.model_dir} (real weights)"
    cfg = preset(args.preset, **overrides)
    from genenv_jax.models import param_shardings
    with mesh_context(mesh):
        params = jax.jit(init_params, static_argnums=0, out_shardings=param_shardings(cfg, mesh))(
            cfg, jax.random.key(args.seed))
    return cfg, params, f"{args.preset}{'' if args.layers is None else f' ({args.layers} layers)'} (random weights)"


def time_phases(args, cfg: ModelConfig, step: rl.TrainStep, trained, frozen, batch, mesh) -> dict[str, float]:
    """Each pass of a step, and of the loop around it, jitted and timed alone (median seconds)."""
    repeats = max(1, min(args.steps, 3))
    partition = step.partition
    logprobs = rl.make_logprobs_fn(cfg, mesh, chunk_size=args.chunk_size, micro_batches=args.micro_batches,
                                   partition=partition)
    reference = frozen if partition.starts_at_frozen else trained  # the frozen base alone, or a full copy
    phases = {"old-policy logprobs (a recompute: the loop uses the sampler's)":
              median_time(lambda: logprobs(frozen, batch, trained), repeats)[0],
              "reference logprobs (kl_coef > 0 only)": median_time(lambda: logprobs(reference, batch), repeats)[0]}

    if args.rule == "grpo":  # the step's own loss on one micro-batch's rows, times the micro-batches
        config = rl.GRPOConfig(chunk_size=args.chunk_size, kl_coef=args.kl_coef)
        rows = batch["tokens"].shape[0] // args.micro_batches
        micro = {k: v[:rows] for k, v in batch.items()}
        full_mask = batch["loss_mask"]

        def loss(trained_tree, frozen_tree):
            model = partition.model(trained_tree, frozen_tree)
            norms = {"norm": normalizer(full_mask, config.aggregation, config.norm_tokens),
                     "tokens": token_count(full_mask)}
            return grpo_micro_batch_loss(cfg, config, model, micro, norms, partition.dropout(micro["tokens"]))[0]

        grad = jax.jit(jax.grad(loss))
        with mesh_context(mesh):
            phases[f"forward and backward ({args.micro_batches} micro-batches, no optimizer)"] = args.micro_batches * \
                median_time(lambda: grad(trained, frozen), repeats)[0]

    model = partition.model(trained, frozen)
    hidden = jax.jit(lambda p, b: hidden_states(cfg, p, b["tokens"], None, b["attention_mask"]))(model, batch)
    head = _head_pass(cfg, args.chunk_size, hidden, batch)
    with mesh_context(mesh):
        phases["LM head forward and backward (chunks with loss tokens)"] = median_time(
            lambda: head(model, hidden), repeats)[0]
    optimizer_update = jax.jit(lambda g, s, p: step.optimizer.update(g, s, p))
    grads = jax.tree.map(lambda x: jnp.full(x.shape, 1e-3, jnp.float32), trained)
    opt_state = step.init_opt_state(trained)
    phases["optimizer update (AdamW on the trained tree)"] = median_time(
        lambda: optimizer_update(grads, opt_state, trained), repeats)[0]
    return phases


def _head_pass(cfg: ModelConfig, chunk_size: int, hidden: jax.Array, batch: dict):
    """A jitted forward + backward of the chunked LM head (rl/lm_head.py) on fixed hidden states."""
    tokens, mask = jnp.asarray(batch["tokens"]), jnp.asarray(batch["loss_mask"])

    def head_loss(params, h):
        chunks, targets, use_chunk, _ = head_chunks(h, tokens, mask, chunk_size)
        logprobs, entropy = chunked_token_stats(cfg, params, chunks, targets, use_chunk, temperature=1.0,
                                                with_entropy=True)
        return jnp.sum(logprobs) + jnp.sum(jax.lax.stop_gradient(entropy))

    grad = jax.jit(jax.grad(head_loss, argnums=1))
    return lambda params, h: grad(params, h)


def main(argv=None) -> None:
    args = parse_args(argv)
    print("command:", "python " + shlex.join([sys.argv[0]] + (sys.argv[1:] if argv is None else list(argv))))
    print("date:   ", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    print("machine:", machine_line())

    mesh = mesh_from_flag(args.mesh)
    cfg, base, description = model_and_params(args, mesh)
    partition = LoRAConfig(rank=args.lora_rank, alpha=args.lora_alpha,
                           targets=tuple(t for t in args.lora_targets.split(",") if t)).partition(cfg)
    step = build_step(cfg, args.rule, mesh, args.chunk_size, args.micro_batches, partition, args.kl_coef)
    adapter_params = partition.trainable_params() if partition.has_frozen else 0
    trained_text = partition.describe() + (" over a frozen base" if partition.has_frozen else "")
    print(f"model:   {description}: {cfg.num_params():,} params, params {cfg.param_dtype}, compute {cfg.dtype}, "
          f"remat {cfg.remat_policy}, attention {cfg.attention}; {trained_text}")

    rng = np.random.RandomState(args.seed)
    if args.prompt_tokens:
        prompt_len = args.prompt_len or length_bucket(args.prompt_tokens)
        response_len = args.response_len or length_bucket(args.response_tokens)
        seq = prompt_len + response_len
        host_batch = study_batch(cfg, args.rule, args.batch, args.prompt_tokens, args.response_tokens, prompt_len,
                                 response_len, rng)
        real = args.batch * (args.prompt_tokens + args.response_tokens)
        shape_text = (f"rows of {args.prompt_tokens} prompt + {args.response_tokens} response tokens padded to "
                      f"{prompt_len} + {response_len}")
    else:
        seq = args.seq
        host_batch = random_batch(cfg, args.rule, args.batch, seq, rng)
        real, shape_text = args.batch * seq, "full-length rows, half prompt, half response"
    computed = args.batch * seq
    loss_tokens = int(host_batch["loss_mask"].sum())
    head_tokens = head_token_count(host_batch["loss_mask"], args.chunk_size)
    if not (args.rule == "grpo" and args.kl_coef > 0):
        host_batch.pop("ref_logprobs")
    print(f"step:    {args.rule.upper()}{f' with KL {args.kl_coef}' if args.kl_coef else ''}, batch {args.batch} x "
          f"seq {seq} ({shape_text}), {args.micro_batches} micro-batches, LM-head chunk {args.chunk_size}, "
          f"mesh {dict(mesh.shape)}")
    print(f"tokens:  computed {computed:,}, real {real:,} (padding {100 * (1 - real / computed):.1f}%), "
          f"loss {loss_tokens:,}, LM head {head_tokens:,}")

    trained = partition.initial_trainable(base, jax.random.key(args.seed + 1), step.param_shardings)
    frozen = partition.frozen_of(base)
    opt_state = step.init_opt_state(trained)
    batch = step.place_batch(host_batch)

    t0 = time.perf_counter()
    compiled = step.lower(trained, opt_state, batch, frozen).compile()
    print(f"compile: {time.perf_counter() - t0:.1f} s")
    with mesh_context(mesh):
        run = lambda p, s: compiled(p, s, batch, frozen)  # noqa: E731
        for _ in range(max(args.warmup, 1)):
            trained, opt_state, metrics = run(trained, opt_state)
        jax.block_until_ready(metrics)
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            trained, opt_state, metrics = run(trained, opt_state)
            jax.block_until_ready(metrics)
            times.append(time.perf_counter() - t0)
    step_time = float(np.median(times))

    flops, formula = model_flops_per_step(cfg, args.batch, seq, head_tokens, frozen_base=partition.has_frozen,
                                          adapter_params=adapter_params)
    if args.peak_flops == "measure":
        peak = measure_peak_flops(cfg.jnp_dtype, 2048 if jax.default_backend() == "cpu" else 8192)
        peak_source = f"measured ({cfg.dtype} matmul)"
    else:
        peak, peak_source = float(args.peak_flops), "from --peak_flops"
    devices = mesh.devices.size
    print(f"model FLOPs/step: {formula}")
    print(f"peak:    {peak:.4g} FLOP/s per device ({peak_source}) x {devices} devices")
    print(f"steps:   {', '.join(f'{t * 1e3:.1f}' for t in times)} ms; median {step_time * 1e3:.1f} ms")
    if args.phases:
        for name, seconds in time_phases(args, cfg, step, trained, frozen, batch, mesh).items():
            print(f"phase:   {name}: {seconds * 1e3:.1f} ms ({100 * seconds / step_time:.0f}% of a step)")
    print(f"RESULT   tokens/s {computed / step_time:,.0f} computed, {real / step_time:,.0f} real | "
          f"ms per loss token {1e3 * step_time / max(loss_tokens, 1):.1f} | model TFLOP/s {flops / step_time / 1e12:.4g} | "
          f"MFU {100 * flops / step_time / (peak * devices):.1f}% | loss {float(metrics['loss']):.4f}")
    stats = jax.devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        print(f"memory:  peak {stats['peak_bytes_in_use'] / 2**30:.2f} GiB on device 0")


if __name__ == "__main__":
    main()

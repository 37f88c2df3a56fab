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
The real Qwen2.5-Coder-0.5B-Instruct (any model source), side by side with HF on the same weights:
  JAX_PLATFORMS=cpu python benchmarks/sampling.py --model_dir qwen2.5-coder-0.5b-instruct --batch 1,8,32 \\
      --prompt_len 256 --new_tokens 32 --dtype float32 --repeats 1 --hf --hf_attention sdpa

Slot use (--slot_use): how busy the decode slots stay on a mix of response lengths. --prompts
prompts (random ids, random lengths in [prompt_len / 4, prompt_len]) get their response lengths
from per-prompt caps, greedy and without stop tokens, so every row ends exactly at its cap: a
--long_fraction of them (chosen at random positions in the queue) at --new_tokens, the rest at a
length drawn uniformly from --short_caps. The sampler uses a cap only to end the row (and to size
the cache window), never to order the queue, so to the scheduler a cap is as unforeseeable as a
stop token. It prints useful tokens (tokens chosen by decode steps; each row's first token comes
from its prefill) over the row-steps the decode steps computed (slot use; sum over segments of
the segment's slot count x its steps), and over decode steps x --slots (fixed slot use, the
figure before the drain could compact), for
  before:  the prompts in batches of --slots, each decoding until its longest row is done, on
           all of its slots (no compaction);
  refill:  one call on --slots slots, finished slots refilled from the queue, no compaction;
  compact: the same call with the default drain: once the queue is empty, the live rows are
           gathered into the smallest slot bucket holding them whenever they fit in half;
and the bound no scheduler can beat with all --slots computed per step: useful tokens / (slots x
max(longest row's steps, useful tokens / slots)). Example (CPU):
  JAX_PLATFORMS=cpu python benchmarks/sampling.py --preset micro --dtype float32 --slot_use \\
      --prompts 1024 --slots 256 --prompt_len 64 --new_tokens 256 --long_fraction 0.1 --short_caps 1,255
"""

from __future__ import annotations

import argparse
import functools
import os
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
from run_header import print_header  # noqa: E402

H200_BANDWIDTH = 4.24e12  # bytes/s, HBM3e
H200_PEAK_FLOPS = 788e12  # bf16 matmul FLOP/s: the figure, ~80% of the 989e12 dense spec


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="qwen2.5-7b", help="model preset (genenv_jax.models.PRESETS)")
    p.add_argument("--model_dir", default=None,
                   help="real weights instead of a random preset: any model source (docs/models.md); HF loads the "
                        "same HF directory")
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
    p.add_argument("--lora_rank", type=int, default=0,
                   help="also time placing the params with rank-R LoRA adapters merged (once per weight update)")
    p.add_argument("--slot_use", action="store_true", help="measure slot use on a response-length mix instead")
    p.add_argument("--prompts", type=int, default=1024, help="--slot_use: prompts in the call")
    p.add_argument("--slots", type=int, default=256, help="--slot_use: decode slots")
    p.add_argument("--long_fraction", type=float, default=0.1, help="--slot_use: rows that run to --new_tokens")
    p.add_argument("--short_caps", type=_ints, default=[1, 255],
                   help="--slot_use: the other rows' lengths, uniform in this inclusive range")
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
    """Best prefill and decode seconds over `repeats` runs (after a compile run), one slot per row.

    prefill_s: the refill program (prefill of every row + first token); decode_s: the decode
    segments plus the window resizes between them (each program waited for, so timed apart)."""
    best = {"prefill_s": float("inf"), "decode_s": float("inf")}
    batch = sampler.prepare_prompts(prompts, new_tokens)
    for attempt in range(repeats + 1):  # the first run compiles
        state, stats, programs = sampler.run(params, batch, timed=True)
        lengths = programs.results(state)["lengths"]
        assert (lengths == new_tokens).all(), f"rows stopped early: {lengths}"
        del state
        if attempt:
            best["prefill_s"] = min(best["prefill_s"], stats.refill_s)
            best["decode_s"] = min(best["decode_s"], stats.decode_s + stats.resize_s)
    best["forward_steps"] = stats.decode_steps  # the first token comes from the prefill logits
    return best


def time_lora_placement(sampler: Sampler, stacked, rank: int, seed: int, repeats: int, batch: int, cache_len: int):
    """Seconds to place the base alone and the base with rank-`rank` adapters merged in (what a
    LoRA policy pays once per weight update before sampling), and one decode step on the merged
    weights against one that applies the adapters inside the step (the alternative: no merge, a
    low-rank matmul pair per projection per token); returns the merged placement."""
    from genenv_jax.models.lora import LoRAConfig, init_adapters

    lora = LoRAConfig(rank=rank, alpha=2.0 * rank)
    adapters = init_adapters(sampler.cfg, lora, jax.random.key(seed + 1))
    adapters = jax.tree.map(lambda a: a + 0.01 if a.ndim else a, adapters)  # B != 0: a real merge

    partition = lora.partition(sampler.cfg)

    def place(with_adapters):
        out = partition.place(sampler, adapters, stacked) if with_adapters else sampler.prepare_params(stacked)
        jax.block_until_ready(jax.tree.leaves(out.tree))
        return out

    base_s = _best_time(lambda: place(False), repeats)
    merged_s = _best_time(lambda: place(True), repeats)
    print(f"placement: base {base_s * 1e3:.0f} ms, base + rank-{rank} adapters merged {merged_s * 1e3:.0f} ms "
          f"(per weight update; decoding the merged weights costs what the base's does)")
    merged = place(True)
    base = place(False)
    applied = _with_layer_adapters(base.tree, adapters)
    step_ms = {name: time_decode_step(sampler.cfg, tree, batch, cache_len, repeats) * 1e3
               for name, tree in (("merged", merged.tree), ("applied", applied), ("merged again", merged.tree))}
    print(f"decode step, batch {batch}, cache {cache_len}: merged weights {step_ms['merged']:.1f} ms "
          f"(again after the applied run: {step_ms['merged again']:.1f} ms), adapters applied in the step "
          f"{step_ms['applied']:.1f} ms ({step_ms['applied'] / min(step_ms['merged'], step_ms['merged again']) - 1:+.1%})")
    return merged


def _with_layer_adapters(tree, adapters):
    """A placed sampler tree (one dict per layer) with layer i's adapter slices laid beside its kernels."""
    layers = []
    for i, layer in enumerate(tree["layers"]):
        found = {block: {k: v[i] for k, v in leaves.items()} for block, leaves in adapters["layers"].items()}
        layers.append({block: {**leaves, **found.get(block, {})} for block, leaves in layer.items()})
    return {**tree, "layers": tuple(layers)}


def time_decode_step(cfg, tree, batch: int, cache_len: int, repeats: int) -> float:
    """Best seconds of one jitted `models.decode.decode_step` over a [batch] row batch with a
    `cache_len` KV cache (the per-token cost of the weights `tree` carries)."""
    from genenv_jax.models.decode import decode_step, new_caches

    caches = new_caches(cfg, (batch,), cache_len)
    tokens = jnp.zeros((batch,), jnp.int32)
    positions = jnp.full((batch,), cache_len // 2, jnp.int32)
    key_mask = jnp.arange(cache_len)[None, :] <= cache_len // 2
    key_mask = jnp.broadcast_to(key_mask, (batch, cache_len))
    step = jax.jit(lambda t, c: decode_step(cfg, t, c, tokens, positions, jnp.int32(cache_len // 2), key_mask))

    def run():
        logits, _ = step(tree, caches)
        jax.block_until_ready(logits)
    run()  # compile
    return _best_time(run, max(repeats, 5))


def length_mix(n: int, cap: int, long_fraction: float, short: tuple[int, int], rng) -> np.ndarray:
    """Response lengths [n]: round(long_fraction * n) rows at random positions get `cap`, the rest a
    length uniform in the inclusive range `short`."""
    lengths = rng.integers(short[0], short[1] + 1, n)
    lengths[rng.permutation(n)[:round(long_fraction * n)]] = cap
    return lengths


def measure_slot_use(args, cfg: ModelConfig, mesh) -> None:
    """Prints slot use before (batches of --slots, no refill), with refill, and with refill and
    the compacting drain."""
    rng = np.random.default_rng(args.seed)
    sampler = Sampler(cfg, mesh, steps_per_sync=args.steps_per_sync)
    fixed = Sampler(cfg, mesh, steps_per_sync=args.steps_per_sync, compact=False)
    init = jax.jit(functools.partial(init_params, cfg), out_shardings=param_shardings(cfg, mesh))
    params = sampler.prepare_params(init(jax.random.key(args.seed)))
    n, slots = args.prompts, args.slots
    prompt_lens = rng.integers(max(1, args.prompt_len // 4), args.prompt_len + 1, n)
    prompts = [rng.integers(0, cfg.vocab_size, k).tolist() for k in prompt_lens]
    caps = length_mix(n, args.new_tokens, args.long_fraction, tuple(args.short_caps), rng)
    useful = int(np.sum(caps - 1))
    bound = useful / (slots * max(int(caps.max()) - 1, -(-useful // slots)))
    print(f"mix:     {n} prompts of {prompt_lens.min()}-{prompt_lens.max()} tokens on {slots} slots; "
          f"response lengths: {args.long_fraction:.0%} at {args.new_tokens}, the rest uniform in "
          f"[{args.short_caps[0]}, {args.short_caps[1]}] (mean {caps.mean():.1f}); greedy, lengths set by "
          f"per-prompt caps; steps_per_sync {sampler.steps_per_sync}")

    def before():
        outs = [fixed.generate(params, prompts[i:i + slots], max_new_tokens=caps[i:i + slots].tolist())
                for i in range(0, n, slots)]
        return outs, [o.stats for o in outs]

    def refill():
        out = fixed.generate(params, prompts, max_new_tokens=caps.tolist(), slots=slots)
        return [out], [out.stats]

    def compact():
        out = sampler.generate(params, prompts, max_new_tokens=caps.tolist(), slots=slots)
        return [out], [out.stats]

    rows = {}
    for name, fn in (("before: batches of slots, no refill", before), ("refill from the queue, no compaction", refill),
                     ("refill + compacting drain", compact)):
        fn()  # compiles
        t0 = time.perf_counter()
        outs, stats = fn()
        wall = time.perf_counter() - t0
        tokens = [row for o in outs for row in o.token_lists()]
        assert [len(row) for row in tokens] == caps.tolist()
        rows[name] = (tokens, stats, wall)
    (before_tokens, *_), *others = rows.values()
    assert all(tokens == before_tokens for tokens, *_ in others), "refill / compaction changed the greedy output"
    print()
    print("| mode | decode steps | useful tokens | tokens / step | row-steps computed | slot use (computed) "
          "| slot use (fixed slots) | slot use while queued | refills | compactions | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, (_, stats, wall) in rows.items():
        steps = sum(st.decode_steps for st in stats)
        tokens = sum(st.useful_tokens for st in stats)
        computed = sum(st.computed_row_steps for st in stats)
        queued_steps = sum(st.queued_decode_steps for st in stats)
        queued = sum(st.queued_useful_tokens for st in stats) / max(queued_steps * slots, 1)
        queued_text = f"{queued:.1%}" if queued_steps else "-"
        print(f"| {name} | {steps} | {tokens:,} | {tokens / steps:.1f} | {computed:,} | {tokens / computed:.1%} "
              f"| {tokens / (steps * slots):.1%} | {queued_text} | {sum(st.refills for st in stats)} "
              f"| {sum(st.compactions for st in stats)} | {wall:.1f} |")
    print(f"\nbound for any scheduler computing all {slots} slots per step on this mix: {bound:.1%} (useful {useful:,} tokens, longest row "
          f"{int(caps.max()) - 1} steps)")


def time_hf(cfg: ModelConfig, prompts: np.ndarray, new_tokens: int, repeats: int, attention: str,
            model_dir: str | None = None) -> tuple[float, float]:
    """Best seconds of HF transformers `generate` (greedy, EOS ignored) on the same shapes: with one
    new token (the prefill and its first token) and with `new_tokens`; decode is their difference."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = _hf_model(cfg, device, attention, model_dir)
    ids = torch.tensor(prompts, device=device)

    def best(tokens: int) -> float:
        kwargs = dict(attention_mask=torch.ones_like(ids), max_new_tokens=tokens, min_new_tokens=tokens,
                      do_sample=False, eos_token_id=None, pad_token_id=0, temperature=None, top_p=None, top_k=None)
        seconds = float("inf")
        with torch.no_grad():
            for attempt in range(repeats + 1):
                if device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = model.generate(ids, **kwargs)
                if device == "cuda":
                    torch.cuda.synchronize()
                if attempt:
                    seconds = min(seconds, time.perf_counter() - t0)
        assert out.shape[1] == prompts.shape[1] + tokens
        return seconds
    return best(1), best(new_tokens)


@functools.lru_cache(maxsize=1)
def _hf_model(cfg: ModelConfig, device: str, attention: str, model_dir: str | None = None):
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch_dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[cfg.dtype]
    if model_dir:
        return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype, attn_implementation=attention).to(
            device).eval()
    hf_cfg = Qwen2Config(**{k: v for k, v in cfg.to_hf_dict().items() if k not in ("architectures", "torch_dtype")})
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(hf_cfg, dtype=torch_dtype, attn_implementation=attention)
    return model.eval()


def main(argv=None) -> None:
    args = parse_args(argv)
    dtype_from_name(args.dtype)
    print_header()
    model_path, name = None, args.preset
    if args.model_dir:
        from genenv_jax.data.model_sources import resolve_model_source
        from genenv_jax.models.loading import model_config

        model_path, name = resolve_model_source(args.model_dir).path, args.model_dir
        cfg = model_config(model_path, param_dtype=args.dtype, dtype=args.dtype)
    else:
        cfg = preset(args.preset).replace(param_dtype=args.dtype, dtype=args.dtype)
    mesh = _mesh_from_flag(args.mesh)
    if args.slot_use:
        print(f"model:   {name} ({cfg.num_params() / 1e9:.6f}B params, {args.dtype}), mesh {dict(mesh.shape)}")
        measure_slot_use(args, cfg, mesh)
        return
    bandwidth, peak = args.bandwidth, args.peak_flops
    if args.measure_hw:
        bandwidth, peak = measure_hardware(cfg.jnp_dtype)
        print(f"measured: bandwidth {bandwidth / 1e9:.1f} GB/s, matmul {peak / 1e12:.2f} TFLOP/s ({args.dtype})")
    else:
        print(f"assumed:  bandwidth {bandwidth / 1e9:.1f} GB/s, matmul {peak / 1e12:.2f} TFLOP/s (flags)")

    shards = mesh.shape["data"] * mesh.shape["fsdp"]
    batches = sorted({-(-b // shards) * shards for b in args.batch})
    # Cache windows: powers of two below new_tokens, then new_tokens (attention reads only the window in use).
    windows = tuple(w for w in (16 << i for i in range(20)) if w < args.new_tokens) + (args.new_tokens,)
    sampler = Sampler(cfg, mesh, steps_per_sync=args.steps_per_sync,
                      buckets=Buckets(batch=tuple(batches), prompt=(args.prompt_len,), new_tokens=windows))
    print(f"model:   {name} ({cfg.num_params() / 1e9:.3f}B params, {args.dtype}), mesh {dict(mesh.shape)}, "
          f"prompt {args.prompt_len}, new tokens {args.new_tokens}, greedy, EOS ignored, "
          f"steps_per_sync {sampler.steps_per_sync}" + (f"; HF attention {args.hf_attention}" if args.hf else ""))
    if model_path:
        from genenv_jax.models.loading import load_model

        stacked = load_model(model_path, mesh=mesh, dtype=args.dtype)[1]
    else:
        init = jax.jit(functools.partial(init_params, cfg), out_shardings=param_shardings(cfg, mesh))
        stacked = init(jax.random.key(args.seed))
    params = sampler.prepare_params(stacked)
    if args.lora_rank:
        params = time_lora_placement(sampler, stacked, args.lora_rank, args.seed, args.repeats, batches[0],
                                     args.prompt_len + args.new_tokens)
    del stacked  # the stacked copy is dropped here

    rng = np.random.default_rng(args.seed)
    header = ("| batch | prefill ms | prefill tok/s | decode step ms | limit step ms | bound | % of limit | decode tok/s "
              "| limit tok/s | e2e tok/s |" + (" HF prefill tok/s | HF decode tok/s | HF e2e tok/s | ours / HF |"
                                                if args.hf else ""))
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
        prefill_tps = batch * args.prompt_len / ours["prefill_s"]
        row = (f"| {batch} | {ours['prefill_s'] * 1e3:.1f} | {prefill_tps:,.0f} | {step_s * 1e3:.4g} "
               f"| {limit['limit_s'] * 1e3:.4g} "
               f"| {bound} | {100 * limit['limit_s'] / step_s:.1f} | {decode_tps:,.0f} | {limit_tps:,.0f} "
               f"| {e2e_tps:,.0f} |")
        if args.hf:
            hf_prefill_s, hf_s = time_hf(cfg, prompts, args.new_tokens, max(1, args.repeats - 1), args.hf_attention,
                                         model_path)
            hf_tps = batch * args.new_tokens / hf_s
            row += (f" {batch * args.prompt_len / hf_prefill_s:,.0f} | "
                    f"{batch * (args.new_tokens - 1) / (hf_s - hf_prefill_s):,.0f} | {hf_tps:,.0f} | "
                    f"{e2e_tps / hf_tps:.2f} |")
        print(row, flush=True)


if __name__ == "__main__":
    main()

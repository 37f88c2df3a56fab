"""Per-device memory of the GRPO / RWR update steps and the sampler, from the compiler alone.

Nothing is materialised: every program is lowered from `jax.ShapeDtypeStruct` inputs that carry
their shardings and compiled for the mesh, and XLA's `compiled.memory_analysis()` is read. On CPU
the mesh is made of `--host_devices` virtual host devices (`--xla_force_host_platform_device_count`),
so a laptop can size a multi-chip run. The figures are XLA's buffer assignment for the CPU backend,
not a TPU's or GPU's: fusion and layout differ, and XLA:CPU computes bfloat16 dynamic-(update-)
slices in float32, so arrays written or read that way (the stacked per-layer activations a
rematerialised layer scan saves, KV caches) get a temporary float32 copy that accelerators do not
make. Sizes of bfloat16 stacks and caches in `temp` are therefore up to 2x too high on CPU.

Columns, per device, in GiB:
  args    parameters, optimizer state, batch (or caches, prompts) passed in;
  output  what the program returns (aliased with donated args where `alias` says so);
  alias   output bytes that reuse donated argument buffers;
  temp    everything the program allocates while it runs (activations, gradients, gathered
          weights, logits, attention scores): the number that grows with sequence length;
  code    generated code;
  peak    args + output - alias + temp: the most the program can hold at once.
The sampler's rows name "decode.py's" attention: the KV-cache decoder picks its own kernel.

The programs are the ones the project runs: `rl.make_grpo_step` / `rl.make_rwr_step` as built by
benchmarks/train_step.py (`build_step`, with a batch of `random_batch`'s keys and shapes), and the
programs of one `Sampler` call (`sampling/programs.py`: the refill that prefills prompts into slots,
and a decode segment at the largest cache window), compiled for abstract params and cache state.
The compile-only measurement is `genenv_jax/tools/memory_plan.py`, which `python -m genenv_jax.tools.tpu_memory`
(per-slice sizing of a run config, docs/plan.md) uses too.

Examples (CPU, 8 host devices; each 7B program compiles in well under a minute):
  JAX_PLATFORMS=cpu python benchmarks/memory.py --preset qwen2.5-7b --seq 2048,4096,9216 \\
      --programs grpo --attention einsum,blockwise --mesh data=1,fsdp=8,tensor=1
  JAX_PLATFORMS=cpu python benchmarks/memory.py --preset qwen2.5-7b --programs sampler \\
      --sampler_batch 512 --prompt_len 4096 --new_tokens 512 --sampler_mesh data=2,fsdp=1,tensor=4
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys
import time

from genenv_jax.tools.memory_plan import ProgramMemory, compile_step, sampler_programs, set_host_device_count


def _list(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="qwen2.5-7b", help="model preset (genenv_jax.models.PRESETS)")
    p.add_argument("--layers", type=int, default=None, help="override the number of layers")
    p.add_argument("--heads", type=int, default=None,
                   help="override query and kv heads (e.g. 1: isolates what does not depend on attention)")
    p.add_argument("--programs", type=_list, default=["grpo"], help="comma list of grpo, rwr, sampler")
    p.add_argument("--attention", type=_list, default=["auto"],
                   help="comma list of attention kernels (auto, einsum, blockwise, splash, cudnn)")
    p.add_argument("--host_devices", type=int, default=8,
                   help="virtual CPU devices (sets --xla_force_host_platform_device_count; CPU only)")
    # update steps
    p.add_argument("--seq", type=lambda t: [int(x) for x in _list(t)], default=[2048],
                   help="comma list of sequence lengths for the update steps")
    p.add_argument("--batch", type=int, default=None, help="global sequences per step (default: one per "
                   "data x fsdp device)")
    p.add_argument("--micro_batches", type=int, default=1)
    p.add_argument("--mesh", default="data=1,fsdp=-1,tensor=1", help="update-step mesh")
    p.add_argument("--remat", default="full", help="decoder-layer remat policy")
    p.add_argument("--param_dtype", default="float32", help="stored (master) param dtype of the steps")
    p.add_argument("--dtype", default="bfloat16", help="compute dtype")
    p.add_argument("--chunk_size", type=int, default=512, help="LM-head sequence chunk")
    # sampler
    p.add_argument("--sampler_mesh", default="data=2,fsdp=1,tensor=4", help="sampler mesh")
    p.add_argument("--sampler_batch", type=int, default=512, help="rows (tasks x rollouts)")
    p.add_argument("--prompt_len", type=int, default=4096)
    p.add_argument("--new_tokens", type=int, default=512)
    p.add_argument("--sampler_param_dtype", default="bfloat16", help="sampler weight and KV-cache dtype")
    p.add_argument("--prefill_chunk_tokens", type=int, default=16384, help="Sampler(prefill_chunk_tokens=)")
    return p.parse_args(argv)


def memory_row(compiled) -> dict[str, float]:
    """The per-device sizes (GiB) of a compiled program, and their peak (see module docstring)."""
    return ProgramMemory.of(compiled).gib()


def step_memory(cfg, rule: str, mesh, batch: int, seq: int, chunk_size: int, micro_batches: int):
    """Compiles the update step for abstract params, optimizer state and batch; returns the compiled program."""
    from train_step import build_step

    return compile_step(build_step(cfg, rule, mesh, chunk_size, micro_batches), rule, batch, seq)


def sampler_memory(cfg, mesh, batch: int, prompt_len: int, new_tokens: int, prefill_chunk_tokens: int) -> dict:
    """{name: compiled} of one `Sampler` call's refill and decode programs (`memory_plan.sampler_programs`)."""
    return sampler_programs(cfg, mesh, batch, prompt_len, new_tokens, prefill_chunk_tokens)


def _print_table(rows: list[dict]) -> None:
    cols = ("args", "output", "alias", "temp", "code", "peak")
    print("| program | attention | shape | mesh | " + " | ".join(f"{c} GiB" for c in cols) + " | compile s |")
    print("|---|---|---|---|" + "---|" * (len(cols) + 1))
    for r in rows:
        print(f"| {r['program']} | {r['attention']} | {r['shape']} | {r['mesh']} | "
              + " | ".join(f"{r[c]:.2f}" for c in cols) + f" | {r['compile_s']:.0f} |")


def main(argv=None) -> None:
    args = parse_args(argv)
    if os.environ.get("JAX_PLATFORMS", "cpu") == "cpu":
        set_host_device_count(args.host_devices, replace=False)  # before JAX's first device query
    from train_step import machine_line, mesh_from_flag

    from genenv_jax.models import preset

    print("command:", "python " + shlex.join([sys.argv[0]] + (sys.argv[1:] if argv is None else list(argv))))
    print("date:   ", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    print("machine:", machine_line())
    overrides = {} if args.layers is None else {"num_layers": args.layers}
    if args.heads is not None:
        overrides.update(num_heads=args.heads, num_kv_heads=args.heads)
    rows = []
    for attention in args.attention:
        for program in [p for p in args.programs if p in ("grpo", "rwr")]:
            cfg = preset(args.preset, param_dtype=args.param_dtype, dtype=args.dtype, remat_policy=args.remat,
                         attention=attention, **overrides)
            mesh = mesh_from_flag(args.mesh)
            batch = args.batch or mesh.shape["data"] * mesh.shape["fsdp"]
            for seq in args.seq:
                t0 = time.perf_counter()
                compiled = step_memory(cfg, program, mesh, batch, seq, args.chunk_size, args.micro_batches)
                rows.append({"program": program.upper(), "attention": attention, "shape": f"{batch} x {seq}",
                             "mesh": args.mesh, "compile_s": time.perf_counter() - t0, **memory_row(compiled)})
                print("row:", rows[-1], flush=True)
    unknown = set(args.programs) - {"grpo", "rwr", "sampler"}
    if unknown:
        raise SystemExit(f"unknown programs {sorted(unknown)}; expected grpo, rwr or sampler")
    if "sampler" in args.programs:  # decode.py picks its own attention: one row per program, not per kernel
        cfg = preset(args.preset, param_dtype=args.sampler_param_dtype, dtype=args.sampler_param_dtype, **overrides)
        mesh = mesh_from_flag(args.sampler_mesh)
        t0 = time.perf_counter()
        compiled_programs = sampler_memory(cfg, mesh, args.sampler_batch, args.prompt_len, args.new_tokens,
                                           args.prefill_chunk_tokens)
        seconds = time.perf_counter() - t0
        shape = f"{args.sampler_batch} x ({args.prompt_len} + {args.new_tokens})"
        for name, compiled in compiled_programs.items():
            rows.append({"program": name, "attention": "decode.py's", "shape": shape, "mesh": args.sampler_mesh,
                         "compile_s": seconds, **memory_row(compiled)})
            print("row:", rows[-1], flush=True)
    print(f"\nmodel: {args.preset}{'' if not overrides else f' {overrides}'}; steps: params {args.param_dtype}, "
          f"compute {args.dtype}, remat {args.remat}, LM-head chunk {args.chunk_size}, "
          f"{args.micro_batches} micro-batches; per-device GiB from compiled.memory_analysis()")
    _print_table(rows)


if __name__ == "__main__":
    main()

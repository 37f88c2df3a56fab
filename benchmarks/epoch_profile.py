"""Where one co-evolution epoch's time goes: phases, compiled programs, compilation, host work.

Runs the main job's loop (`genenv_jax.main`'s flags: `--config`, `--workdir`, `--config.*`) and
profiles the LAST epoch it runs (give `--config.epochs=N` for a fresh run of N epochs; earlier
epochs, the warm-start and the starting held-out evaluation run unprofiled). Timers, not a
tracer: a `jax.profiler` trace of a real-model epoch records every XLA thunk (about 1 GB for one
`bfcl:real` epoch) and slows the epoch it measures. What it reads:

- phases: the loop's own timers (`time/*_s` of metrics.jsonl: generate, rollouts, updates,
  held-out) and the compile seconds inside each (`time/compile_*_s`, from `jax.monitoring`);
- compiled programs: every compile during the epoch by the function it compiled (`jax.monitoring`
  time spans); the simulator's sampler programs (refill = prefill and first token, decode
  segments, cache resizes, compactions), timed by blocking after each (`Sampler.timed`); the
  update steps' wall seconds (`time/*_steps_s`);
- host work and transfers: each phase's wall time outside its timed programs;
- tokens: the update steps' computed positions (rows x padded length) against their real tokens
  and their loss tokens, the sampler's prefill (requested / computed) and decode (row steps
  against kept tokens).

  JAX_PLATFORMS=cpu python benchmarks/epoch_profile.py --config=configs/bfcl.py:real \\
      --config.epochs=1 --config.evaluation.split= --workdir=/tmp/profile-bfcl
"""

from __future__ import annotations

import collections
import datetime
import os
import shlex
import sys
import time
from pathlib import Path

from absl import flags, logging

from genenv_jax import cli

_CONFIG = cli.config_flag()
_WORKDIR = cli.workdir_flag("Run directory of the profiled run (a fresh one, or a run to continue).")
PROGRAM = "epoch_profile"


class _CompileLog:
    """Every backend compile in the process: (start, end, function name)."""

    def __init__(self):
        import jax

        self.spans: list[tuple[float, float, str]] = []
        jax.monitoring.register_event_time_span_listener(self._span)

    def _span(self, event: str, start: float, end: float, **kwargs) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            self.spans.append((start, end, str(kwargs.get("fun_name", "?"))))


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


@cli.command(PROGRAM)
def main(argv):
    if len(argv) > 1:
        cli.die(f"unexpected arguments: {argv[1:]}", PROGRAM)
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # as genenv_jax.main: library info logs drown the tables
    import jax

    from genenv_jax.configs.run_config import RunConfig
    from genenv_jax.loop import CoEvolution
    from genenv_jax.workdir.metrics import read_metrics

    config = RunConfig.from_config_dict(_CONFIG.value, num_devices=jax.device_count())
    workdir = Path(_WORKDIR.value or config.default_workdir())
    compiles = _CompileLog()
    window: dict[str, float] = {}

    class Profiled(CoEvolution):
        def run_epoch(self, state, epoch):
            if epoch != config.epochs - 1:
                return super().run_epoch(state, epoch)
            self.simulator.sampler.timed = True
            window["start"] = time.time()
            try:
                return super().run_epoch(state, epoch)
            finally:
                window["end"] = time.time()
                self.simulator.sampler.timed = False

    print("command:", "python " + shlex.join(sys.argv))
    print("date:   ", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    print("machine:", f"{os.uname().nodename} | {os.cpu_count()} CPUs | {jax.devices()[0].device_kind} | "
          f"jax {jax.__version__}")
    Profiled(config, workdir).run()
    if "start" not in window:
        cli.die(f"no epoch ran (the run in {workdir} had already finished its {config.epochs} epochs)", PROGRAM)
    wall = window["end"] - window["start"]
    row = [r for r in read_metrics(workdir / "metrics.jsonl") if r["epoch"] == config.epochs - 1][-1]

    print(f"\nepoch {row['epoch']}: {wall:.1f} s wall\n")
    print(_row(["phase", "wall s", "of which compiling s"]))
    print(_row(["---", "---:", "---:"]))
    for phase in ("generate", "rollouts", "updates", "heldout"):
        print(_row([phase, f"{row.get(f'time/{phase}_s', 0.0):.1f}", f"{row.get(f'time/compile_{phase}_s', 0.0):.1f}"]))

    epoch_compiles = [(b - a, name) for a, b, name in compiles.spans if window["start"] <= a <= window["end"]]
    if epoch_compiles:
        print(f"\ncompiled during the epoch: {len(epoch_compiles)} programs, {sum(s for s, _ in epoch_compiles):.1f} s")
        by_name: dict[str, list[float]] = collections.defaultdict(list)
        for seconds, name in epoch_compiles:
            by_name[name].append(seconds)
        for name, secs in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
            print(f"  {name}: {len(secs)} x, {sum(secs):.1f} s")

    def per_step(policy: str, key: str) -> float:
        return row.get(f"{policy}/{key}", 0.0) * row.get(f"{policy}/steps", 0)

    print("\n" + _row(["tokens", "computed", "real", "loss", "padding share"]))
    print(_row(["---", "---:", "---:", "---:", "---:"]))
    for policy in ("agent", "simulator"):
        computed, real = per_step(policy, "tokens_computed"), per_step(policy, "tokens_real")
        if computed:
            print(_row([f"{policy} updates ({row[f'{policy}/steps']} steps)", f"{computed:,.0f}", f"{real:,.0f}",
                        f"{per_step(policy, 'tokens'):,.0f}", f"{1 - real / computed:.1%}"]))
    for who, prefix in (("simulator", "simulator/"), ("agent rollouts", "sampler/")):
        requested = row.get(f"{prefix}prefill_requested_tokens")
        if requested:
            print(_row([f"{who} prefill", f"{row.get(f'{prefix}prefill_computed_tokens', 0):,}", f"{requested:,}",
                        "", "(requested: the prompts' tokens; computed: after prefix reuse)"]))
    if row.get("simulator/decode_row_steps"):
        rows, kept = row["simulator/decode_row_steps"], row.get("simulator/decode_tokens", 0)
        print(_row(["simulator decode", f"{rows:,} row steps", f"{kept:,} tokens kept", "",
                    f"{1 - kept / rows:.1%} idle slot steps ({row.get('simulator/decode_steps', 0)} steps)"]))

    print("\n" + _row(["timed programs", "seconds"]))
    print(_row(["---", "---:"]))
    timed = {f"simulator sampler: {p}": row.get(f"time/simulator_{p}_s", 0.0)
             for p in ("refill", "decode", "resize", "compact")}
    timed |= {f"{p} update steps ({row.get(f'{p}/steps', 0)})": row.get(f"time/{p}_steps_s", 0.0)
              for p in ("agent", "simulator")}
    for name, seconds in timed.items():
        print(_row([name, f"{seconds:.1f}"]))
    compile_s = sum(row.get(f"time/compile_{p}_s", 0.0) for p in ("generate", "rollouts", "updates", "heldout"))
    generate_rest = row.get("time/generate_s", 0.0) - sum(v for k, v in timed.items() if k.startswith("simulator"))
    updates_rest = row.get("time/updates_s", 0.0) - sum(v for k, v in timed.items() if "update steps" in k)
    print(f"\ncompiling: {compile_s:.1f} s of the epoch's {wall:.1f} s ({compile_s / wall:.0%}); outside the timed "
          f"programs (host work, transfers, merges, parsing): generate {generate_rest:.1f} s, updates "
          f"{updates_rest:.1f} s. A timed program's seconds include its compile on first use and its "
          "host-to-device inputs.")


if __name__ == "__main__":
    flags.mark_flag_as_required("config")
    cli.run(main, PROGRAM)

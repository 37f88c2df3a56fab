"""Does each GRPO step of the agent move every row the way its advantage says, on a real run?

Copies a run directory (`--run`: its checkpoints, pools and held-out cache) into `--workdir`,
resumes the copy with the run's own saved config for one more epoch, and around each of that
epoch's agent GRPO steps measures every row's response log-probability (summed over its loss
tokens) under the trained weights, before and after the step. To first order a policy-gradient
step raises it where the advantage is positive and lowers it where it is negative; rows of zero
advantage move only through the weights they share with the others. It also reports how far the
sampler's logprobs (kept with the rollouts as the old policy's) are from the trainer's before the
first step, the baseline of the importance ratio. The run itself is not touched.

  JAX_PLATFORMS=cpu python benchmarks/grpo_direction.py \\
      --run=runs/study-calc-real/runs/genenv-a0.5-s0 --workdir=/tmp/grpo-direction \\
      --out=docs/results/grpo_direction_calc_real/summary.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


class _EpochDone(Exception):
    """Raised after the measured epoch: the copy is thrown away, so no further epoch runs."""


class MeasuredAgent:
    """The agent policy with each update step measured; everything else is the policy's own."""

    def __init__(self, policy):
        self._policy = policy
        self.rows: list[dict[str, Any]] = []
        self.steps = 0

    def __getattr__(self, name):
        return getattr(self._policy, name)

    def _logprobs(self, state, placed) -> np.ndarray:  # [B, T], the trainer's (the update's) program
        return np.asarray(self._policy.reference_logprobs(state.frozen, placed, state.params))

    def train(self, state, batch):
        placed = self._policy.update.place_batch(dict(batch))
        before = self._logprobs(state, placed)
        new_state, metrics = self._policy.train(state, batch)
        after = self._logprobs(new_state, placed)
        mask = np.asarray(batch["loss_mask"]) > 0  # [B, T]
        old = np.asarray(batch["old_logprobs"]) if "old_logprobs" in batch else None
        for i, advantage in enumerate(np.asarray(batch["advantages"])):
            m = mask[i]
            if not m.any():
                continue  # a padding row
            self.rows.append({"step": self.steps, "advantage": float(advantage), "tokens": int(m.sum()),
                              "before": float(before[i][m].sum()), "after": float(after[i][m].sum()),
                              "sampler": None if old is None else float(old[i][m].sum())})
        self.steps += 1
        return new_state, metrics


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per sign of the advantage: rows, mean change of the summed logprob, how many rose."""
    out: dict[str, Any] = {}
    delta = np.asarray([r["after"] - r["before"] for r in rows])
    adv = np.asarray([r["advantage"] for r in rows])
    for name, sel in (("positive", adv > 0), ("negative", adv < 0), ("zero", adv == 0)):
        out[name] = {"rows": int(sel.sum()), "mean_change": float(delta[sel].mean()) if sel.any() else None,
                     "rose": int((delta[sel] > 0).sum())}
    informative = adv != 0
    out["correlation"] = (float(np.corrcoef(adv[informative], delta[informative])[0, 1])
                          if informative.sum() > 2 else None)
    first = [r for r in rows if r["step"] == 0 and r["sampler"] is not None]
    out["sampler_vs_trainer_max_abs"] = (max(abs(r["sampler"] - r["before"]) for r in first) if first else None)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a run directory with a checkpoint (not modified)")
    parser.add_argument("--workdir", required=True, help="where the copy runs (must not exist)")
    parser.add_argument("--out", default="", help="also write the summary and every row here (JSON)")
    args = parser.parse_args(argv)
    run, workdir = Path(args.run), Path(args.workdir)
    if not (run / "checkpoints").is_dir():
        parser.error(f"--run={run}: no checkpoints directory")
    if workdir.exists():
        parser.error(f"--workdir={workdir}: exists; give a new directory (the copy is resumed there)")

    import jax
    from ml_collections import ConfigDict

    from genenv_jax.configs.run_config import RunConfig
    from genenv_jax.loop import CoEvolution
    from genenv_jax.workdir.checkpoints import Checkpointer

    with Checkpointer(run / "checkpoints", async_save=False) as ckpt:
        epoch = ckpt.latest_epoch()
        if epoch is None:
            parser.error(f"--run={run}: no complete checkpoint")
        snapshot = ckpt.metadata(epoch)["config"]
    if epoch + 1 >= snapshot["epochs"]:
        parser.error(f"--run={run}: finished ({snapshot['epochs']} epochs); nothing to resume")
    shutil.copytree(run, workdir, ignore=shutil.ignore_patterns("run.lock", "tensorboard", "samples"))
    config = RunConfig.from_config_dict(ConfigDict(snapshot), num_devices=jax.device_count())

    class OneEpoch(CoEvolution):
        def run_epoch(self, state, e):
            raise _EpochDone(super().run_epoch(state, e))

    loop = OneEpoch(config, workdir)
    agent = loop.agent = MeasuredAgent(loop.agent)
    loop.heldout.metrics = lambda weights, e: {}  # the epoch's held-out evaluation measures nothing here
    started = time.time()
    try:
        loop.run()
    except _EpochDone:
        pass
    summary = {"run": str(run), "after_epoch": epoch, "steps": agent.steps,
               "learning_rate": snapshot["agent"]["optimizer"]["learning_rate"], **summarise(agent.rows),
               "command": "python " + " ".join(sys.argv), "seconds": time.time() - started,
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "machine": f"{os.cpu_count()} CPUs, {jax.devices()[0].device_kind}"}
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(summary | {"rows": agent.rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

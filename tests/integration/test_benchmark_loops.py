"""Each benchmark's tiny preset runs the loop end to end from the command line (`python -m
genenv_jax.main --config=configs/NAME.py:tiny`) on its fixture download: simulator generations checked
and counted, agent episodes scored by the benchmark, a GRPO step, metrics written.

One subprocess per benchmark on one CPU device (the suite's 8 virtual devices would only slow
compilation); the session's persistent compilation cache is shared with the subprocesses."""

import json
import subprocess
import sys

import pytest

from tests.support import FIXTURES, REPO, subprocess_env

pytestmark = pytest.mark.slow

# Per benchmark: overrides beyond the shared ones below (each keeps its preset's episode shape).
BENCHMARKS = {
    "api_bank": [],
    # held-out evaluation off: the tiny preset measures it before and after each epoch (the loop's
    # held-out path is domain-agnostic and covered by tests/integration/test_loop.py and the ALFWorld loop test)
    "bamboogle": ["--config.evaluation.split="],
    "travelplanner": [f"--config.domain.options.data_dir={FIXTURES / 'travelplanner' / 'domain'}",
                      "--config.domain.options.max_steps=2", "--config.episodes.max_turns=1",
                      "--config.episodes.max_total_tokens=2304"],
}
# mode=random: the simulator generates but is not updated (its RWR step is domain-agnostic and
# covered by tests/integration/test_loop.py; here it would only add a compile per benchmark).
SHARED_OVERRIDES = ["--config.epochs=1", "--config.mode=random",
                    "--config.warmstart.enabled=False",  # warm-start: tested per domain
                    # one seed and one replayed task per epoch: 2 tasks x 2 rollouts, one GRPO step on 2 tasks
                    "--config.seeds_per_epoch=1", "--config.replay.tasks_per_epoch=1",
                    "--config.agent.train.tasks_per_step=2", "--config.simulator.train.tasks_per_step=1",
                    "--config.agent.sampling.max_new_tokens=8", "--config.simulator.sampling.max_new_tokens=16",
                    "--config.log.progress_bars=False"]


def _run_tiny(name, tmp_path, overrides):
    """`genenv_jax.main` on a benchmark's tiny preset with the shared overrides; its metric rows."""
    workdir = tmp_path / "run"
    env = subprocess_env(GENENV_CACHE=str(tmp_path / "cache"))
    command = [sys.executable, "-m", "genenv_jax.main", f"--config=configs/{name}.py:tiny", f"--workdir={workdir}",
               *SHARED_OVERRIDES, *overrides]
    out = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


# Each benchmark's tiny preset through the command line (~50-100 s each on 2 cores); their domains'
# tasks, tools and scoring are tested in their own files.
@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_tiny_preset_runs_the_loop_from_the_command_line(name, tmp_path):
    workdir = tmp_path / "run"
    rows = _run_tiny(name, tmp_path, BENCHMARKS[name])
    assert [r["epoch"] for r in rows if r["epoch"] >= 0] == [0]   # (-1: held-out before training, if configured)
    row = rows[-1]
    # Every simulator generation is either a task or a rejection with a counted reason.
    assert row["generated"] == sum(v for k, v in row.items() if k.startswith("rejected/")) + row["tasks"]
    assert row["replayed_tasks"] == 1 and row["agent/steps"] == 1 and "agent/loss" in row
    assert row["episodes/turns_mean"] >= 1
    # A GRPO group's identical first prompts are prefilled once (prefix reuse).
    assert 0 < row["sampler/prefill_computed_tokens"] < row["sampler/prefill_requested_tokens"]
    assert row["sampler/prefill_reused_fraction"] > 0.3
    assert row["simulator/prefill_computed_tokens"] <= row["simulator/prefill_requested_tokens"]
    assert (workdir / "checkpoints" / "0").is_dir() and (workdir / "summary.md").is_file()


def _alfworld_installed() -> bool:
    import importlib.util
    return all(importlib.util.find_spec(m) is not None for m in ("alfworld", "fast_downward"))


# GiGPO on the multi-turn benchmarks' tiny presets: per-turn anchor states and token spans from real
# episodes (BFCL's GorillaFileSystem backend; ALFWorld's engine), advantages per token, a GRPO step.
@pytest.mark.parametrize("name", [
    "bfcl_multiturn",
    pytest.param("alfworld", marks=[pytest.mark.skipif(
        not _alfworld_installed(), reason="needs the optional ALFWorld extra: make alfworld")]),
])
def test_multi_turn_tiny_presets_train_with_gigpo(name, tmp_path):
    # One task's group in the step (BFCL's rows hold ~4.1k tokens: the function docs): GiGPO's
    # per-turn credit needs one group, and a second would double the step.
    row = _run_tiny(name, tmp_path, ["--config.evaluation.split=", "--config.agent.train.loss.advantage=gigpo",
                                     "--config.agent.train.tasks_per_epoch=1",
                                     "--config.agent.train.tasks_per_step=1"])[-1]
    assert row["epoch"] == 0 and row["agent/steps"] == 1 and "agent/loss" in row
    assert 0.0 <= row["agent/gigpo_step_adv_nonzero"] <= 1.0 and row["episodes/turns_mean"] >= 1

"""The miniature study: equal agent data per mode (new_tasks_per_epoch), held-out evaluation, the
shared warm-start cache, the study plan, and a 1-epoch smoke run of the study command with its report."""

from __future__ import annotations

import collections
import json
import subprocess
import sys

import jax
import numpy as np
import pytest

from genenv_jax.configs import base
from genenv_jax.configs import study as study_configs
from genenv_jax.domains import Rejection, get_domain
from genenv_jax.loop.context import LoopContext
from genenv_jax.loop.heldout import heldout_tasks
from genenv_jax.loop import epoch_tasks
from genenv_jax.loop.epoch_tasks import agent_tasks
from genenv_jax.loop.tasks import Generation
from genenv_jax.rl.batches import TrainRow
from genenv_jax.loop.warmstart_cache import warmstart_key
from genenv_jax.workdir.metrics import read_metrics
from genenv_jax.configs.run_config import ConfigError, RunConfig
from genenv_jax.study.runner import (StudyRun, check_study, finished_unchanged, plan_runs, portable_snapshot,
                                     run_config, selected_runs)
from tests.support import CONFIGS, subprocess_env


def _context(**overrides) -> LoopContext:
    c = study_configs.get_config().run
    base.apply(c, overrides)
    config = RunConfig.from_config_dict(c, num_devices=jax.device_count())
    domain = get_domain("calc", **config.domain.options)
    return LoopContext(config, domain, None, domain.seeds("train"))


def _generations(ctx: LoopContext, valid: int, invalid: int) -> list[Generation]:
    seeds = ctx.train_seeds
    gens = [Generation(s, "similar", [], [], np.zeros(0), "", s) for s in seeds[:valid]]
    gens += [Generation(s, "similar", [], [], np.zeros(0), "x", Rejection("calc", "bad_expression", "", s.task_id, "x"))
             for s in seeds[valid:valid + invalid]]
    return gens


def test_new_tasks_per_epoch_gives_every_mode_the_same_number_of_tasks():
    def origins(records, origin):
        return [r.task for r in records if r.origin == origin]

    ctx = _context(new_tasks_per_epoch=5)
    records, counts = agent_tasks(ctx, _generations(ctx, valid=8, invalid=2), epoch=0)
    new, top_ups = origins(records, epoch_tasks.GENERATED), origins(records, epoch_tasks.TOP_UP)
    assert len(new) == 5 and top_ups == [] and counts["new_tasks_unused"] == 3
    assert len(origins(records, epoch_tasks.UNUSED)) == 3 and len(origins(records, epoch_tasks.REJECTED)) == 2
    records, counts = agent_tasks(ctx, _generations(ctx, valid=2, invalid=6), epoch=3)
    new, top_ups = origins(records, epoch_tasks.GENERATED), origins(records, epoch_tasks.TOP_UP)
    assert len(new) == 2 and len(top_ups) == 3 and counts["topped_up_tasks"] == 3
    assert all(t in ctx.train_seeds for t in top_ups)
    again, _ = agent_tasks(ctx, _generations(ctx, valid=2, invalid=6), epoch=3)
    assert [t.task_id for t in origins(again, epoch_tasks.TOP_UP)] == [t.task_id for t in top_ups]  # (seed, epoch) decide the draw
    off = _context(new_tasks_per_epoch=0)
    records, _ = agent_tasks(off, _generations(off, valid=8, invalid=2), 0)
    assert len(origins(records, epoch_tasks.GENERATED)) == 8 and origins(records, epoch_tasks.TOP_UP) == []


def test_heldout_tasks_are_a_split_the_loop_does_not_train_on():
    ctx = _context(**{"evaluation.split": "validation", "evaluation.max_per_category": 2})
    tasks = heldout_tasks(ctx)
    assert collections.Counter(t.category for t in tasks) == {f"level_{i}": 2 for i in range(1, 7)}
    assert not {t.task_id for t in tasks} & {t.task_id for t in ctx.train_seeds}
    assert heldout_tasks(_context(**{"evaluation.split": ""})) == []
    with pytest.raises(ValueError, match=r"evaluation.split='train' is the split the loop trains on"):
        heldout_tasks(_context(**{"evaluation.split": "train"}))


def test_warmstart_key_changes_with_what_the_warmstart_reads_only():
    ctx = _context()
    snapshot = ctx.config.snapshot
    rows = [TrainRow([1, 2, 3], [4, 5]), TrainRow([1, 2], [6])]
    key = warmstart_key(snapshot, "agent", 0, rows)
    assert key == warmstart_key(dict(snapshot, mode="static", epochs=99), "agent", 0, rows)
    assert key != warmstart_key(snapshot, "agent", 1, rows)                       # other initial weights
    assert key != warmstart_key(snapshot, "agent", 0, rows[:1])                   # other SFT data
    assert key != warmstart_key(snapshot, "simulator", 0, rows)
    changed = json.loads(json.dumps(snapshot))
    changed["warmstart"]["agent_steps"] += 1
    assert key != warmstart_key(changed, "agent", 0, rows)
    changed = json.loads(json.dumps(snapshot))
    changed["warmstart"]["cache_dir"] = "/elsewhere"
    assert key == warmstart_key(changed, "agent", 0, rows)


def test_study_plan_and_its_checks():
    study = study_configs.get_config()
    runs = plan_runs(study)
    assert len(runs) == 3 * 3 + 2 and len({r.name for r in runs}) == len(runs)  # the sweep on seed 0 only
    assert {(r.mode, r.alpha) for r in runs} == {("genenv", 0.5), ("random", 0.5), ("static", 0.5),
                                                 ("genenv", 0.3), ("genenv", 0.7)}
    assert runs[0] == StudyRun("genenv", 0.5, 0) and runs[0].workdir == "runs/genenv-a0.5-s0"
    for key, value, message in (("modes", ("genenv", "often"), "config.modes"), ("seeds", (0, 0), "config.seeds"),
                                ("sweep_alphas", (1.5,), "config.sweep_alphas"), ("sweep_seeds", (7,), "sweep_seeds")):
        bad = study_configs.get_config()
        bad[key] = value
        with pytest.raises(ConfigError, match=message):
            check_study(bad)
    # --runs: a part of the plan, in plan order; a name outside it is refused with the plan's names
    names = [r.name for r in runs]
    assert selected_runs(runs, ()) == runs
    assert [r.name for r in selected_runs(runs, [names[4], names[1]])] == [names[1], names[4]]
    with pytest.raises(ConfigError, match=r"--runs=genenv-a0.5-s9: genenv-a0.5-s9 not in the plan \(runs: genenv-a0.5-s0,"):
        selected_runs(runs, ["genenv-a0.5-s9"])
    large = study_configs.get_config("large")
    assert large.run.agent.preset == "study-30m" and large.run.epochs > study.run.epochs
    assert len(plan_runs(large)) == 3 * 5


def test_a_finished_run_is_skipped_only_under_the_config_it_finished_with(tmp_path):
    """done.json records the run's config (paths inside the study directory made portable): the same
    config skips the run, more epochs resume it, a changed learning rate is refused in one line
    naming the key, as is a done.json that records no config."""
    study = study_configs.get_config()
    study.tokenizer_vocab_size = 0  # no study tokenizer to train: the run falls back to the model's own
    run = plan_runs(study)[0]

    def snapshot(study_dir, **overrides):
        c = base.apply(run_config(study, run, study_dir), overrides)
        config = RunConfig.from_config_dict(c, num_devices=jax.device_count())
        return portable_snapshot(config.snapshot, study_dir), config.epochs

    done = tmp_path / "a" / run.workdir / "done.json"
    assert not finished_unchanged(done, run.name, *snapshot(tmp_path / "a"))
    saved, epochs = snapshot(tmp_path / "a")
    assert saved["warmstart"]["cache_dir"] == "<study>/warmstart_cache"
    done.parent.mkdir(parents=True)
    done.write_text(json.dumps({"epochs": epochs, "seconds": 1.0, "config": saved}))
    assert finished_unchanged(done, run.name, *snapshot(tmp_path / "moved"))  # the same run, another place
    assert not finished_unchanged(done, run.name, *snapshot(tmp_path / "a", epochs=epochs + 2))  # resumes
    with pytest.raises(ConfigError, match=rf"^run {run.name} finished under another config "
                       r"\(config.agent.optimizer.learning_rate: [0-9.e-]+ -> 0.5\); its results would be "
                       r"reported under this command: use another --workdir or delete "):
        finished_unchanged(done, run.name, *snapshot(tmp_path / "a", **{"agent.optimizer.learning_rate": 0.5}))
    done.write_text(json.dumps({"epochs": epochs, "seconds": 1.0}))
    with pytest.raises(ConfigError, match="finished without a recorded config"):
        finished_unchanged(done, run.name, *snapshot(tmp_path / "a"))


SMOKE_CONFIG = CONFIGS / "study_smoke.py"


@pytest.mark.slow
def test_a_one_epoch_study_runs_with_equal_data_and_writes_its_report(tmp_path):
    """The command line end to end, on one CPU device (a subprocess: the suite's 8 virtual devices
    would only slow compilation), then a rerun that finds every run done."""
    env = subprocess_env()
    command = [sys.executable, "-m", "genenv_jax.study", f"--config={SMOKE_CONFIG}", f"--workdir={tmp_path}"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"study report: {tmp_path}/report/report.md" in out.stdout
    plan = json.loads((tmp_path / "study.json").read_text())
    assert [r["name"] for r in plan["runs"]] == ["genenv-a0.5-s0", "static-a0.5-s0"]
    assert plan["command"].startswith("python -m genenv_jax.study --config=")
    rows = {r["name"]: read_metrics(tmp_path / r["workdir"] / "metrics.jsonl") for r in plan["runs"]}
    for name, (start, epoch0) in rows.items():
        assert start["epoch"] == -1 and epoch0["epoch"] == 0
        # equal agent data: 8 new tasks (topped up if too few parse) x 2 rollouts, 2 GRPO steps
        assert epoch0["agent/episodes"] == 16 and epoch0["agent/steps"] == 2, name
        levels = [k for k in epoch0 if k.startswith("heldout/level_")]
        assert len(levels) == 6 and epoch0["heldout/accuracy"] == pytest.approx(np.mean([epoch0[k] for k in levels]))
        generated = sum(v for k, v in epoch0.items() if k.startswith("category/") and k.endswith("/generated"))
        assert generated == epoch0["tasks"]
    # one warm-start for every run: made by the first, restored (identical) by the other
    first, second = (run_rows[0] for run_rows in rows.values())
    assert first["warmstart/agent_cached"] == 0 and second["warmstart/agent_cached"] == 1
    assert first["heldout/accuracy"] == second["heldout/accuracy"]
    assert rows["static-a0.5-s0"][1]["generated"] is None and rows["genenv-a0.5-s0"][1]["generated"] == 10
    report = (tmp_path / "report" / "report.md").read_text()
    assert "Claim 1 (difficulty alignment)" in report and (tmp_path / "report" / "p_hat.png").is_file()
    # a rerun finds every run done and only rebuilds the report
    mtimes = {n: (tmp_path / f"runs/{n}/metrics.jsonl").stat().st_mtime for n in rows}
    again = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {n: (tmp_path / f"runs/{n}/metrics.jsonl").stat().st_mtime for n in rows} == mtimes


def test_the_command_line_names_a_bad_study_key_in_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "genenv_jax.study", "--config=study", "--config.seeds=(0, 0)",
                          f"--workdir={tmp_path}"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("genenv_jax.study: error: config.seeds=(0, 0)")
    assert not (tmp_path / "runs").exists()
    out = subprocess.run([sys.executable, "-m", "genenv_jax.study", "--config=study", "--runs=static-a0.5-s7",
                          f"--workdir={tmp_path}"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("genenv_jax.study: error: --runs=static-a0.5-s7: "
                                                          "static-a0.5-s7 not in the plan")
    assert not (tmp_path / "runs").exists()


def test_cached_warmstart_trains_once_restores_after_and_rebuilds_a_broken_entry(tmp_path):
    import jax.numpy as jnp

    from genenv_jax.loop.warmstart_cache import cached_warmstart

    calls = []

    def train():
        calls.append(1)
        return {"w": jnp.arange(6, dtype=jnp.float32).reshape(2, 3) * len(calls)}, {"warmstart/agent_loss_last": 0.5}

    target = {"w": jax.ShapeDtypeStruct((2, 3), jnp.float32)}
    params, metrics = cached_warmstart(str(tmp_path), "k1", "agent", target, train)
    assert metrics == {"warmstart/agent_loss_last": 0.5, "warmstart/agent_cached": 0} and len(calls) == 1
    again, metrics = cached_warmstart(str(tmp_path), "k1", "agent", target, train)
    assert len(calls) == 1 and metrics["warmstart/agent_cached"] == 1 and metrics["warmstart/agent_loss_last"] == 0.5
    np.testing.assert_array_equal(np.asarray(again["w"]), np.asarray(params["w"]))
    cached_warmstart(str(tmp_path), "k2", "agent", target, train)  # another key: trained afresh
    assert len(calls) == 2
    damaged = 0
    for f in (tmp_path / "agent-k1").rglob("*"):  # damage the stored arrays: retrained, not trusted
        if f.is_file() and "params" in f.parts and f.stat().st_size > 0 and f.suffix != ".json":
            f.write_bytes(b"\0" * f.stat().st_size)
            damaged += 1
    assert damaged
    rebuilt, metrics = cached_warmstart(str(tmp_path), "k1", "agent", target, train)
    assert len(calls) == 3 and metrics["warmstart/agent_cached"] == 0
    np.testing.assert_array_equal(np.asarray(rebuilt["w"]), np.arange(6).reshape(2, 3) * 3)

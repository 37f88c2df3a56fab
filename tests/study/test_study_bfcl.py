"""The BFCL real-model study's pieces: arms with config overrides, the base model's evaluation
arguments, the per-run report of a one-seed study (held-out intervals from items, paired tests,
simulator rates, grounding examples) and the statistics behind it, against hand computations."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from genenv_jax.configs import study_bfcl
from genenv_jax.configs.run_config import ConfigError, RunConfig
from genenv_jax.study.details import Proportion, mcnemar, simulator_rates, ungrounded_examples
from genenv_jax.study.report import write_report
from genenv_jax.study.results import claims, load_study
from genenv_jax.study.runner import base_evaluation_args, check_study, plan_runs, run_config

LEVELS = ["simple_python", "irrelevance"]


# ----------------------------------------------------------------------------------------------
# The plan
# ----------------------------------------------------------------------------------------------
def test_the_study_plans_its_arms_with_their_overrides(tmp_path):
    study = study_bfcl.get_config()
    runs = plan_runs(study)
    assert [r.name for r in runs] == ["genenv-a0.5-s0", "random-a0.5-s0", "static-a0.5-s0",
                                      "genenv_ungrounded-a0.5-s0"]
    configs = {r.name: RunConfig.from_config_dict(run_config(study, r, tmp_path), num_devices=1)  # the preset is sized for one CPU device
               for r in runs}
    ungrounded = configs["genenv_ungrounded-a0.5-s0"]
    assert ungrounded.mode == "genenv" and ungrounded.domain.options["grounding"] == "record"
    assert ungrounded.evaluation.split == ""
    main = configs["genenv-a0.5-s0"]
    assert main.domain.options.get("grounding", "reject") == "reject" and main.evaluation.split == "test"
    assert main.warmstart.cache_dir == str(tmp_path / "warmstart_cache") and main.tokenizer_dir == ""
    # Equal agent data: only the mode and the arm's overrides differ between the runs.
    snapshots = {name: dict(c.snapshot) for name, c in configs.items()}
    for name, snap in snapshots.items():
        differing = {k for k in snap if snap[k] != snapshots["genenv-a0.5-s0"][k]}
        assert differing <= {"mode", "domain", "evaluation"}, (name, differing)


def test_the_base_evaluation_is_the_evaluation_command_on_the_held_out_set(tmp_path):
    study = study_bfcl.get_config()
    run = plan_runs(study)[0]
    config = RunConfig.from_config_dict(run_config(study, run, tmp_path), num_devices=1)  # the preset is sized for one CPU device
    args = base_evaluation_args(config, tmp_path / "base")
    assert args[:3] == [f"--model_dir={config.agent.model_dir}", "--domain=bfcl", "--split=test"]
    for expected in ("--max_new_tokens=192", "--batch_size=16", "--max_per_category=40", "--sample_seed=0",
                     "--max_turns=1", f"--out={tmp_path / 'base'}"):
        assert expected in args
    assert ('--domain_option=categories=["simple_python", "multiple", "parallel", "parallel_multiple", '
            '"irrelevance"]') in args


def test_bad_arms_are_refused_with_the_key_named(tmp_path):
    study = study_bfcl.get_config()
    study.arms.genenv_ungrounded.mode = "dreamland"
    with pytest.raises(ConfigError, match="config.arms.genenv_ungrounded"):
        check_study(study)
    study = study_bfcl.get_config()
    study.arms.genenv_ungrounded.overrides = (("domain.nothing_here", 1),)
    run = plan_runs(study)[-1]
    with pytest.raises(ConfigError, match="config.arms.genenv_ungrounded.overrides: .*domain.nothing_here"):
        run_config(study, run, tmp_path)


# ----------------------------------------------------------------------------------------------
# Statistics
# ----------------------------------------------------------------------------------------------
def test_wilson_interval_by_hand():
    p = Proportion(83, 200)
    z, phat, n = 1.959964, 83 / 200, 200
    centre = (phat + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert p.interval() == pytest.approx((centre - half, centre + half))
    assert p.fmt() == f"0.415 [{centre - half:.3f}, {centre + half:.3f}] (83/200)"
    assert Proportion(0, 40).interval()[0] == 0.0 and Proportion(0, 0).fmt() == "-"


def test_exact_mcnemar_by_hand():
    a = {f"t{i}": {"reward": 1.0} for i in range(10)}
    b = {f"t{i}": {"reward": float(i >= 8)} for i in range(10)}  # a alone solves 8 items, b none alone
    test = mcnemar(a, b)
    assert (test["n_items"], test["only_first"], test["only_second"]) == (10, 8, 0)
    assert test["p"] == pytest.approx(2 / 2 ** 8)
    assert mcnemar(a, a)["p"] == 1.0
    c = {f"t{i}": {"reward": float(i % 2)} for i in range(10)}  # 5 vs 0... against b: 4 only c, 1 only b
    t = mcnemar(c, b)
    assert (t["only_first"], t["only_second"]) == (4, 1) and t["p"] == pytest.approx(2 * (1 + 5) / 32)


def test_simulator_rates_from_the_counters():
    row = {"generated": 16, "tasks": 5, "rejected/no_json": 2, "rejected/invalid_json": 1,
           "rejected/copied_question": 3, "rejected/ungrounded_answer": 4, "rejected/unsolvable": 1}
    rates = simulator_rates(row)
    assert rates == {"generated": 16, "json": 13, "accepted": 5, "otherwise_accepted": 9, "ungrounded": 4,
                     "json_rate": 13 / 16, "accept_rate": 5 / 16, "ground_rate": 5 / 9}
    recorded = simulator_rates({"generated": 10, "tasks": 6, "flagged/ungrounded_answer": 2})
    assert recorded["otherwise_accepted"] == 6 and recorded["ground_rate"] == 4 / 6
    assert simulator_rates({"generated": None})["json_rate"] is None


# ----------------------------------------------------------------------------------------------
# The report of a one-seed study
# ----------------------------------------------------------------------------------------------
def _items(rewards: dict[str, float]) -> str:
    return "".join(json.dumps({"task_id": t, "category": t.split(":")[0], "reward": r, "response": "",
                               "error_type": None, "prompt_tokens": 1, "response_tokens": 1}) + "\n"
                   for t, r in rewards.items())


def _heldout(solved: int, n: int = 20) -> dict[str, float]:
    cats = LEVELS
    return {f"{cats[i % 2]}:{i}": float(i < solved) for i in range(n)}


def _write_run(root: Path, arm: str, mode: str, solved: list[int], flagged: bool = False) -> dict:
    name = f"{arm}-a0.5-s0"
    work = root / "runs" / name
    (work / "heldout").mkdir(parents=True)
    (work / "samples").mkdir()
    rows = [{"epoch": -1, "heldout/accuracy": solved[0] / 20}]
    for epoch, k in enumerate(solved[1:]):
        rows.append({"epoch": epoch, "heldout/accuracy": k / 20, "p_hat_mean": 0.5, "in_band_fraction": 0.25,
                     "generated": 8, "tasks": 4, "rejected/no_json": 2,
                     f"{'flagged' if flagged else 'rejected'}/ungrounded_answer": 2,
                     "category/simple_python/generated": 3, "category/irrelevance/generated": 1,
                     "agent/episodes": 40, "agent/steps": 3, "time/generate_s": 60.0, "time/rollouts_s": 30.0,
                     "time/updates_s": 200.0, "time/heldout_s": 100.0})
    (work / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for epoch, k in enumerate(solved):
        (work / "heldout" / ("start.jsonl" if epoch == 0 else f"epoch_{epoch - 1:04d}.jsonl")).write_text(
            _items(_heldout(k)))
    task = {"prompt": {"question": [{"role": "user", "content": "Area with base 8?"}]},
            "verifier": {"ground_truth": [{"f": {"base": [9]}}]},
            "metadata": {"flags": ["ungrounded_answer"], "ungrounded": ["call 0 (f).base: none of [9] is stated"]}}
    sample = {"task": task, "agent_rewards": [0.0, 0.0]} if flagged else {
        "rejection": "ungrounded_answer", "detail": "call 0 (f).base: none of [9] is stated", "generation": "x"}
    (work / "samples" / "epoch_0001.jsonl").write_text(json.dumps(sample) + "\n")
    return {"name": name, "mode": mode, "arm": arm, "alpha": 0.5, "seed": 0, "workdir": f"runs/{name}"}


def test_a_one_seed_study_reports_intervals_paired_tests_and_grounding(tmp_path):
    runs = [_write_run(tmp_path, "genenv", "genenv", [10, 12, 18]), _write_run(tmp_path, "random", "random", [10, 11, 12]),
            _write_run(tmp_path, "static", "static", [10, 10, 11]),
            _write_run(tmp_path, "genenv_ungrounded", "genenv", [10, 12, 13], flagged=True)]
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "items.jsonl").write_text(_items(_heldout(4)))
    (tmp_path / "study.json").write_text(json.dumps({"alpha": 0.5, "levels": LEVELS, "epochs": 2, "runs": runs,
                                                     "base": "base", "command": "c", "scale": "bfcl-real",
                                                     "sweep_alphas": []}))
    md = write_report(tmp_path).read_text()
    assert "## The base model (untrained), on the held-out set" in md and Proportion(4, 20).fmt() in md
    assert "### genenv-a0.5-s0 (complete)" in md and Proportion(18, 20).fmt() in md
    # json 6/8, accept 4/8, ground 4/6 (reject: 4 accepted + 2 refused); recorded: 2 of 4 accepted flagged.
    assert "| 0.75 | 0.50 | 0.67 | sp 3, i 1 | 40 | 3 | 60/30/200/100 |" in md
    assert "| genenv_ungrounded-a0.5-s0 | 0 | 8 | 4 | 2 | 0.50 | - |" in md  # no D_env pool in this fixture
    assert "| genenv vs random (epoch 1) | 20 | 6 | 0 |" in md
    assert "Ungrounded tasks genenv_ungrounded-a0.5-s0 accepted" in md and '"Area with base 8?"' in md
    found = {c.name: c for c in claims(load_study(tmp_path))}
    claim2 = found["Claim 2 (data efficiency)"]
    assert claim2.holds is False and "exact McNemar p = 0.0312" in claim2.text  # 18 vs 12: 6-0 split
    assert "genenv 0.900, random 0.600, static 0.550" in claim2.text
    assert "## Alpha sweep" not in md  # planned without a sweep


def test_ungrounded_examples_read_the_samples(tmp_path):
    spec = _write_run(tmp_path, "genenv_ungrounded", "genenv", [1, 2, 3], flagged=True)
    examples = ungrounded_examples(tmp_path / spec["workdir"], [0, 1], 5)
    assert examples == [{"epoch": 1, "question": "Area with base 8?", "ground_truth": [{"f": {"base": [9]}}],
                         "why": "call 0 (f).base: none of [9] is stated", "agent_rewards": [0.0, 0.0]}]


def test_rwr_tasks_counts_the_in_band_generations_and_the_ungrounded_among_them(tmp_path):
    from genenv_jax.study.details import rwr_tasks
    from genenv_jax.workdir.pools import Pool

    flagged = {"metadata": {"flags": ["ungrounded_answer"]}}
    Pool(tmp_path / "pools", "d_env").append_epoch(0, [
        {"task": flagged, "in_band": True}, {"task": {"metadata": {}}, "in_band": True},
        {"task": flagged, "in_band": False}])
    assert rwr_tasks(tmp_path, 0) == {"in_band": 2, "ungrounded_in_band": 1}
    assert rwr_tasks(tmp_path, 1) is None and rwr_tasks(tmp_path / "none", 0) is None

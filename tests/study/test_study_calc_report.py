"""The simulator-aims study's report (genenv_jax.study.calc_report and its parts) on small synthetic
study directories: per-epoch statistics, bootstrap intervals, claims and a byte-for-byte rebuild."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from genenv_jax.study import aim_prompt, calc_report
from genenv_jax.study.aim_claims import decide, find, heldout_epochs, prompt_windows, window
from genenv_jax.study.arm_epochs import PARSE_REASONS, run_data
from genenv_jax.study.bootstrap import bootstrap_difference
from genenv_jax.study.details import Proportion, mcnemar
from genenv_jax.study.results import load_study
from genenv_jax.workdir.pools import Pool
from tests.support import REPO

LEVELS = ["level_1", "level_2", "level_3"]
ALPHA = 0.5


def scored(alpha, levels, p_hats):
    """D_env records of tasks at `levels` with agent success `p_hats` (band 0.25, beta 2); the i-th
    varies a level-2 seed, asked "harder" when i is even, else "similar"."""
    return [{"task": {"category": lv, "task_id": f"t{i}"}, "generation": "", "seed_id": f"calc/train/L2/{i:03d}",
             "difficulty": "similar" if i % 2 else "harder", "p_hat": p, "r_env": math.exp(-2 * (p - alpha) ** 2),
             "in_band": abs(p - alpha) <= 0.25, "weight": None} for i, (lv, p) in enumerate(zip(levels, p_hats))]


def items(solved, n=12):
    """Held-out items: n tasks spread over LEVELS, the first `solved` solved."""
    return "".join(json.dumps({"task_id": f"{LEVELS[i % 3]}:{i}", "category": LEVELS[i % 3], "reward": float(i < solved),
                               "response": "", "error_type": None}) + "\n" for i in range(n))


def write_run(root, arm, mode, alpha, epochs, heldout=None, pool_epochs=None, done=True, sim=None):
    """A run directory. `epochs`: per epoch (accepted levels, scored p_hats, generated, parse failures,
    copies); the scored tasks are the first len(p_hats) accepted ones; heldout {epoch: solved}; the
    D_env pool holds `pool_epochs` (default all); `sim`: extra simulator/* metrics per epoch."""
    name = f"{arm}-a{alpha:g}-s0"
    work = root / "runs" / name
    (work / "heldout").mkdir(parents=True)
    rows = [{"epoch": -1, "heldout/accuracy": 0.5}]
    pool = Pool(work / "pools", "d_env")
    for e, (levels, p_hats, generated, failed, copies) in enumerate(epochs):
        recs = scored(alpha, levels, p_hats)
        row = {"epoch": e, "tasks": len(levels), "generated": None if mode == "static" else generated,
               "new_tasks_unused": len(levels) - len(p_hats), "rejected/bad_expression": failed,
               "rejected/copy_of_seed": copies, "p_hat_mean": float(np.mean(p_hats)),
               "in_band_fraction": float(np.mean([r["in_band"] for r in recs])),
               "r_env_mean": float(np.mean([r["r_env"] for r in recs])),
               "time/generate_s": 60.0, "time/rollouts_s": 30.0, "time/updates_s": 20.0, "time/heldout_s": 10.0}
        row |= {f"category/{lv}/generated": levels.count(lv) for lv in LEVELS if lv in levels}
        if mode == "genenv":
            row |= (sim or {}).get(e) or {"simulator/steps": 1, "simulator/tasks": 3, "simulator/loss": 0.25}
        rows.append(row)
        if pool_epochs is None or e in pool_epochs:
            pool.append_epoch(e, recs)
    (work / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for e, k in (heldout or {}).items():
        (work / "heldout" / ("start.jsonl" if e < 0 else f"epoch_{e:04d}.jsonl")).write_text(items(k))
    if done:
        config = {"epochs": len(epochs), "rollouts_per_task": 4, "curriculum": {"alpha": alpha, "beta": 2.0, "k_min": 0.25},
                  "simulator": {"train": {"objective": "grpo" if arm == "genenv_grpo" else "rwr", "invalid_reward": 0.0,
                                          "loss": {"reward_lambda": 1.0}}}}
        (work / "done.json").write_text(json.dumps({"epochs": len(epochs), "seconds": 1.0, "config": config}))
    return {"name": name, "mode": mode, "arm": arm, "alpha": alpha, "seed": 0, "workdir": f"runs/{name}",
            "overrides": []}


def write_study(root, runs, epochs=8, base=True):
    if base:
        (root / "base").mkdir(parents=True, exist_ok=True)
        (root / "base" / "items.jsonl").write_text(items(3))
    (root / "study.json").write_text(json.dumps({
        "alpha": ALPHA, "levels": LEVELS, "epochs": epochs, "scale": "calc-real", "base": "base" if base else None,
        "command": "python -m genenv_jax.study --config=configs/study_calc_real.py", "sweep_alphas": [0.2, 0.8],
        "runs": runs}))
    return root


def epochs_of(rng, n, level_p, p_hats, count=12):
    """n epochs of `count` accepted tasks each: levels drawn with probabilities `level_p`, p_hat drawn
    from `p_hats`; 20 generations, 4 parse failures, 4 copies."""
    out = []
    for _ in range(n):
        levels = [LEVELS[i] for i in rng.choice(3, size=count, p=level_p)]
        out.append((levels, [float(x) for x in rng.choice(p_hats, size=count)], 20, 4, 4))
    return out


# ----------------------------------------------------------------------------------------------
def test_epoch_statistics_by_hand(tmp_path):
    levels = ["level_1", "level_3", "level_3", "level_2", "level_1"]
    epochs = [(levels, [0.25, 1.0, 0.5, 0.75], 10, 3, 2), (levels[:2], [0.0, 0.5], 8, 0, 6)]
    spec = write_run(tmp_path, "genenv", "genenv", ALPHA, epochs, pool_epochs=[0])
    study = load_study(write_study(tmp_path, [spec], epochs=2))
    d = run_data(study.runs[0], LEVELS)
    s0, s1 = d.epochs[0], d.epochs[1]
    assert (s0.generated, s0.parsed, s0.accepted, s0.level_counts) == (10, 7, 5, (2, 1, 2))
    assert s0.parse_rate == 0.7 and s0.accept_rate == 0.5
    assert s0.mean_level([1, 2, 3]) == pytest.approx((1 + 3 + 3 + 2 + 1) / 5)
    # the pool scores the first four (one left unused): p_hat, |p_hat - 0.5|, band 0.25, R_env = exp(-2 d^2)
    assert s0.source == "pool" and s0.scored == 4
    assert s0.p_hat == pytest.approx(np.mean([0.25, 1.0, 0.5, 0.75]))
    assert s0.gap == pytest.approx(np.mean([0.25, 0.5, 0.0, 0.25]))
    assert s0.in_band == pytest.approx(3 / 4)
    assert s0.r_env == pytest.approx(np.mean([math.exp(-2 * g * g) for g in (0.25, 0.5, 0.0, 0.25)]))
    # epoch 1 has no pool shard: the metrics row's means, no gap, in band rebuilt from its fraction
    assert s1.source == "metrics" and s1.scored == 2 and s1.gap is None
    assert s1.p_hat == pytest.approx(0.25) and s1.in_band == pytest.approx(0.5)
    assert list(d.in_band([0, 1])) == [1.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    assert d.gaps([0, 1]) is None and d.gaps([0]).tolist() == [0.25, 0.5, 0.0, 0.25]
    assert sorted(d.levels([0, 1], LEVELS).tolist()) == [1, 1, 1, 2, 3, 3, 3]
    # epoch 0's scored tasks are levels 1, 3, 3, 2 of level-2 seeds, asked harder / similar in turn
    assert {k: v.tolist() for k, v in d.shifts([0, 1]).items()} == {"harder": [-1.0, 1.0], "similar": [1.0, 0.0]}
    md = calc_report.directions(calc_report.read_inputs(tmp_path))
    assert "| genenv-a0.5-s0 | similar | 2 | +0.500 [+0.000, +1.000] | 0.50 | 0.50 | 0.00 |" in md


def test_a_seed_is_measured_once_its_variants_were_scored(tmp_path):
    # scored() names the i-th task's seed calc/train/L2/{i:03d}, asked harder (even i) or similar (odd i)
    epochs = [(["level_3"] * 2, [0.5] * 2, 4, 0, 0),   # seeds 000, 001: new
              (["level_1"] * 4, [0.5] * 4, 4, 0, 0),   # 000, 001 measured; 002, 003 new
              (["level_2"] * 4, [0.5] * 4, 4, 0, 0),   # no pool shard: from here on unknown
              (["level_2"] * 4, [0.5] * 4, 4, 0, 0)]
    informed = write_run(tmp_path, "genenv", "genenv", ALPHA, epochs, pool_epochs=[0, 1, 3])
    blind = write_run(tmp_path, "genenv_blind", "genenv", ALPHA, epochs[:2]) | {
        "overrides": [["simulator_feedback", "none"]]}
    static = write_run(tmp_path, "static", "static", ALPHA, epochs[:2])
    study = load_study(write_study(tmp_path, [informed, blind, static], epochs=4))
    d = run_data(study.runs[0], LEVELS)
    assert d.scores[0].seed_measured.tolist() == [False, False]
    assert d.scores[1].seed_measured.tolist() == [True, True, False, False]
    assert d.scores[2].seed_measured is None and d.scores[3].seed_measured is None
    # level minus seed level (2): epoch 0's similar task +1, epoch 1's two similar tasks -1 (one measured)
    assert {k: v.tolist() for k, v in d.shifts([0, 1], measured=False).items()} == {
        "harder": [1.0, -1.0], "similar": [1.0, -1.0]}
    assert {k: v.tolist() for k, v in d.shifts([0, 1], measured=True).items()} == {"harder": [-1.0], "similar": [-1.0]}
    assert d.shifts([3], measured=False) == {} and d.shifts([3])["similar"].tolist() == [0.0, 0.0]
    assert prompt_windows([0, 1, 2, 3, 4, 5, 8]) == [[0], [1, 2, 3], [4, 5], [8]]
    inp = calc_report.read_inputs(tmp_path)
    assert aim_prompt.shows_results(inp, informed["name"]) and not aim_prompt.shows_results(inp, blind["name"])
    rows = [r for r in calc_report.unchanged_prompt(inp).splitlines() if r.startswith("| genenv")]
    # informed: only unmeasured seeds' similar tasks (epoch 1: seed 003's); blind: every similar task
    assert rows == ["| genenv-a0.5-s0 | 0.5 | not measured yet | +1.000 [+1.000, +1.000] (1) | -1.000 [-1.000, -1.000] (1) |",
                    "| genenv_blind-a0.5-s0 | 0.5 | nothing (blind) | +1.000 [+1.000, +1.000] (1) | -1.000 [-1.000, -1.000] (2) |"]


def test_static_runs_have_no_generations(tmp_path):
    spec = write_run(tmp_path, "static", "static", ALPHA, [(["level_2"] * 3, [0.5] * 3, 0, 0, 0)])
    s = run_data(load_study(write_study(tmp_path, [spec], epochs=1)).runs[0], LEVELS).epochs[0]
    assert s.generated is None and s.parsed is None and s.parse_rate is None and s.accept_rate is None
    assert s.accepted == 3 and s.level_counts == (0, 3, 0)


def test_parse_reasons_are_calc_rejections():
    from genenv_jax.domains.calc.expressions import REJECTION_REASONS

    assert set(PARSE_REASONS) < set(REJECTION_REASONS)


def test_bootstrap_against_numpy():
    a, b = [1.0] * 30 + [0.0] * 70, [1.0] * 50 + [0.0] * 50
    d = bootstrap_difference(a, b, replicates=2000, seed=3)
    rng = np.random.default_rng(3)  # the same draws, written out
    ra = np.asarray(a)[rng.integers(0, 100, (2000, 100))].mean(1)
    rb = np.asarray(b)[rng.integers(0, 100, (2000, 100))].mean(1)
    assert (d.low, d.high) == tuple(np.percentile(ra - rb, [2.5, 97.5]))
    assert d.value == pytest.approx(-0.2) and d.sign == -1 and (d.n_a, d.n_b) == (100, 100)
    # the normal approximation's half-width 1.96 sqrt(p(1-p)/n + q(1-q)/m), within 10%
    half = 1.96 * math.sqrt(0.3 * 0.7 / 100 + 0.25 / 100)
    assert (d.high - d.low) / 2 == pytest.approx(half, rel=0.1)
    same = bootstrap_difference([0.5] * 4, [0.5] * 9)
    assert (same.low, same.high, same.sign) == (0.0, 0.0, 0) and bootstrap_difference([], [1.0]) is None
    assert bootstrap_difference(a, b).fmt() == bootstrap_difference(a, b).fmt()  # fixed seed


def full_study(root):
    rng = np.random.default_rng(0)
    aim, flat, hard, easy = [0.25, 0.5, 0.75], [0.0, 1.0, 0.5, 1.0], [0.1, 0.2, 0.7], [0.7, 0.2, 0.1]
    runs = [write_run(root, "genenv", "genenv", ALPHA, epochs_of(rng, 8, [1 / 3] * 3, aim),
                      heldout={-1: 6, 3: 8, 7: 11}, sim={2: {"simulator/steps": 0, "simulator/skipped": "no in-band tasks"}}),
            write_run(root, "random", "random", ALPHA, epochs_of(rng, 8, [1 / 3] * 3, flat), heldout={-1: 6, 3: 6, 7: 7}),
            write_run(root, "static", "static", ALPHA, epochs_of(rng, 8, [1 / 3] * 3, flat), heldout={-1: 6, 3: 6, 7: 6}),
            write_run(root, "genenv_grpo", "genenv", ALPHA, epochs_of(rng, 8, hard, aim)),
            write_run(root, "genenv", "genenv", 0.2, epochs_of(rng, 8, hard, aim)),
            write_run(root, "genenv", "genenv", 0.8, epochs_of(rng, 6, easy, aim)),
            {"name": "genenv_blind-a0.5-s0", "mode": "genenv", "arm": "genenv_blind", "alpha": ALPHA, "seed": 0,
             "workdir": "runs/genenv_blind-a0.5-s0", "overrides": [["simulator_feedback", "none"]]}]
    return write_study(root, runs)


def test_claims_decided_from_the_tasks(tmp_path):
    study = load_study(full_study(tmp_path))
    data = [run_data(r, LEVELS) for r in study.runs if r.rows]
    found = {c.name.split(" (")[0]: c for c in decide(study, data)}
    g, r = find(data, "genenv", ALPHA), find(data, "random", ALPHA)
    assert window([g, r]) == [4, 5, 6, 7]
    band = found["Claim 1"].numbers["in_band"]
    assert band["mean_a"] == pytest.approx(g.in_band([4, 5, 6, 7]).mean()) and band["n_a"] == 48
    assert band["mean_a"] == 1.0 and band["low"] > 0 and found["Claim 1"].verdict == "holds"
    # claim 3: alpha 0.8 has 6 epochs, so the window is epochs 2-5 of both
    lo, hi = find(data, "genenv", 0.2), find(data, "genenv", 0.8)
    level = found["Claim 3"].numbers["level"]
    assert found["Claim 3"].numbers["epochs"] == [2, 3, 4, 5]
    assert level["mean_a"] == pytest.approx(lo.levels([2, 3, 4, 5], LEVELS).mean())
    assert level["mean_b"] == pytest.approx(hi.levels([2, 3, 4, 5], LEVELS).mean())
    assert found["Claim 3"].verdict == "holds" and "epochs 2-5" in found["Claim 3"].text
    # claim 2 at epoch 7: genenv 11/12, random 7/12, static 6/12; McNemar on the paired items
    c2 = found["Claim 2"]
    assert c2.numbers["epoch"] == 7 and Proportion(11, 12).fmt() in c2.text
    assert c2.numbers["mcnemar"]["genenv vs random"] == {"n_items": 12, "only_first": 4, "only_second": 0,
                                                         "p": 0.125}
    assert c2.verdict == "does not hold"  # 4-0 is not significant at 5%
    c4 = next(c for n, c in found.items() if n.startswith("Claim 4"))
    assert c4.numbers["level"]["low"] < 0 and "level: genenv_grpo higher" in c4.verdict
    blind = [c for c in decide(study, data) if c.name.startswith("Blind")]
    assert blind[0].verdict == "not run" and "genenv_blind-a0.5" in blind[0].text
    assert blind[1].verdict == "not run" and "random_blind-a0.5" in blind[1].text
    # with only genenv, claims needing other arms say "not run"
    alone = decide(study, [g])
    assert [c.verdict for c in alone[:3]] == ["not run"] * 3 and "random-a0.5" in alone[0].text


def test_heldout_epochs_and_mcnemar_pairing(tmp_path):
    spec = write_run(tmp_path, "genenv", "genenv", ALPHA, [(["level_1"], [0.5], 2, 0, 0)] * 2,
                     heldout={-1: 1, 0: 2, 1: 5})
    work = tmp_path / spec["workdir"]
    assert heldout_epochs(work) == [-1, 0, 1]
    from genenv_jax.study.details import heldout_items
    assert mcnemar(heldout_items(work, 1), heldout_items(work, -1))["only_first"] == 4


def build(study_dir, out_dir):
    return calc_report.write(study_dir, out_dir / "docs" / "report.md", out_dir / "docs" / "images" / "calc",
                             probe_path=study_dir / "probe.json")


def test_the_report_rebuilds_byte_for_byte(tmp_path):
    rng = np.random.default_rng(1)
    spec = write_run(tmp_path / "study", "genenv", "genenv", ALPHA, epochs_of(rng, 8, [0.5, 0.3, 0.2], [0.25, 0.5, 1.0]),
                     heldout={-1: 6, 3: 7, 7: 9})
    study = write_study(tmp_path / "study", [spec, {"name": "random-a0.5-s0", "mode": "random", "arm": "random",
                                                    "alpha": ALPHA, "seed": 0, "workdir": "runs/random-a0.5-s0"}])
    (study / "probe.json").write_text(json.dumps({"generations": 200, "accepted": 155, "temperature": 0.8,
                                                  "rejections": {"bad_expression": 32, "copy_of_seed": 7},
                                                  "accepted_by_category": {"level_1": 13}, "model": "/x/qwen"}))
    md = build(study, tmp_path / "a").read_text()
    assert "1 of 2 planned runs have epochs" in md and "accepted **155 of 200 generations (77.5%)**" in md
    assert "**Claim 1 (the simulator aims: more tasks in band than random): not run.**" in md
    assert "| random-a0.5-s0 | random | 0.5 | - | not run |" in md
    assert "![mean_level](images/calc/mean_level.png)" in md and "{{" not in md
    run = load_study(study).runs[0]
    first = run_data(run, LEVELS).epochs[0]
    assert f"| 0 | 20 | 12 | 0.80 | 0.60 | {first.mean_level([1, 2, 3]):.2f} |" in md
    env = {**os.environ, "PYTHONHASHSEED": "123", "JAX_PLATFORMS": "cpu"}
    code = ("import sys; from pathlib import Path; sys.path.insert(0, 'tests/study'); "
            "from test_study_calc_report import build;"
            f"build(Path({str(study)!r}), Path({str(tmp_path / 'b')!r}))")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=REPO)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert sorted(f.name for f in files) == ["heldout_levels.png", "in_band.png", "mean_level.png", "report.md",
                                             "summary.json"]
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_the_template_must_name_every_section(tmp_path):
    study = full_study(tmp_path)
    template = calc_report.TEMPLATE.read_text().replace("{{movement}}", "{{moves}}")
    (tmp_path / "t.md").write_text(template)
    with pytest.raises(ValueError, match=r"unknown \['moves'\], missing \['movement'\]"):
        calc_report.write(study, tmp_path / "r.md", tmp_path / "img", template=tmp_path / "t.md")
    assert calc_report.main([str(tmp_path / "nothing")]) == 2


def test_the_full_report_shows_each_arm(tmp_path):
    study = full_study(tmp_path)
    md = calc_report.write(study, tmp_path / "r.md", tmp_path / "img").read_text()
    assert "(No probe summary was given to the generator: `--probe`.)" in md
    assert "### static-a0.5-s0" in md and "no generations to count" in md
    assert "| 1 | 1 | 3 | 0.2500 | - |" in md and "| 2 | 0 | - | - | no in-band tasks |" in md
    assert "| base (untrained) | - |" in md
    half = Proportion(2, 4).fmt()  # the start: 6 of 12 solved, 2 of the 4 at each level
    assert (f"the easiest level (level_1) scores {half} and the hardest (level_3) {half}: the span asked for "
            "(at least 0.8 down to at most 0.2) does not hold.") in md
    summary = json.loads((tmp_path / "img" / "summary.json").read_text())
    assert summary["runs"]["static-a0.5-s0"]["0"]["generated"] is None
    assert [c["verdict"] for c in summary["claims"]][:2] == ["holds", "holds"]


ROOT = REPO


@pytest.mark.skipif(not (ROOT / calc_report.KEPT_STUDY / "study.json").is_file(),
                    reason=f"no kept study directory {calc_report.KEPT_STUDY} in this checkout")
def test_the_committed_report_rebuilds_from_the_kept_runs(tmp_path):
    out = tmp_path / calc_report.OUT
    calc_report.write(ROOT / calc_report.KEPT_STUDY, out, tmp_path / calc_report.IMAGES, ROOT / calc_report.KEPT_PROBE)
    assert out.read_bytes() == (ROOT / calc_report.OUT).read_bytes()
    for made in sorted((tmp_path / calc_report.IMAGES).iterdir()):
        assert made.read_bytes() == (ROOT / calc_report.IMAGES / made.name).read_bytes(), made.name


@pytest.mark.skipif(not (ROOT / calc_report.KEPT_STUDY / "study.json").is_file(),
                    reason=f"no kept study directory {calc_report.KEPT_STUDY} in this checkout")
def test_level_success_is_each_epochs_metrics_row():
    """The frontier table against the kept runs' metrics.jsonl read directly."""
    study = ROOT / calc_report.KEPT_STUDY
    md = calc_report.level_success(calc_report.read_inputs(study))
    for run in sorted((study / "runs").iterdir()):
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        for row in (r for r in rows if r["epoch"] >= 0):
            cells = [f"{row[f'category/level_{n}/success']:.2f}" if f"category/level_{n}/success" in row else "-"
                     for n in range(1, 8)]
            assert f"| {row['epoch']} | " + " | ".join(cells) + " |" in md, (run.name, row["epoch"])

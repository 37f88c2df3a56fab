"""The study report: tables, claims, plots and summary.json computed from synthetic metrics files."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from genenv_jax.study.report import main, write_report
from genenv_jax.study.results import claims, load_study, summarize
from tests.support import REPO

LEVELS = ["level_1", "level_2", "level_3"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def row(epoch, p_hat=None, acc=None, gen=None, success=None, in_band=None, episodes=8, steps=2, **extra):
    """One metrics row; gen / success: per-level generated counts / agent success (lists over LEVELS)."""
    r = {"epoch": epoch, "p_hat_mean": p_hat, "heldout/accuracy": acc, "in_band_fraction": in_band,
         "agent/episodes": episodes, "agent/steps": steps, **extra}
    for lv, n in zip(LEVELS, gen or []):
        r[f"category/{lv}/generated"] = n
    for lv, x in zip(LEVELS, success or []):
        r[f"category/{lv}/success"] = x
    return r


def make_study(root, runs, alpha=0.5, epochs=3):
    """Writes study.json and each run's metrics.jsonl (a warm-start row first; rows=None: no file)."""
    specs = []
    for r in runs:
        name = f"{r['mode']}-a{r.get('alpha', alpha)}-s{r['seed']}"
        specs.append({"name": name, "mode": r["mode"], "alpha": r.get("alpha", alpha), "seed": r["seed"],
                      "workdir": f"runs/{name}"})
        workdir = root / "runs" / name
        workdir.mkdir(parents=True)
        if r["rows"] is not None:
            warm = {"epoch": -1, "p_hat_mean": 0.0, "heldout/accuracy": 0.99, "agent/episodes": 1000}
            lines = [warm] + r["rows"]
            (workdir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    study = {"alpha": alpha, "levels": LEVELS, "epochs": epochs, "runs": specs,
             "command": "python -m genenv_jax.study --config=configs/study.py", "scale": "tiny"}
    (root / "study.json").write_text(json.dumps(study))
    return root


def trajectory(mode, seed, p_hats, accs, gens=None, **kw):
    """A run spec whose epochs have the given p_hat / held-out accuracy (and generated counts)."""
    gens = gens or [None] * len(p_hats)
    rows = [row(e, p, a, g) for e, (p, a, g) in enumerate(zip(p_hats, accs, gens))]
    return {"mode": mode, "seed": seed, "rows": rows, **kw}


def md_table(md, heading):
    """The Markdown table under `heading` as a list of {column: cell} dicts."""
    lines = md.split(heading, 1)[1].split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return [dict(zip(table[0], cells)) for cells in table[2:]]


def by_name(found):
    return {c.name.split(" (")[0]: c for c in found}


def test_claim1_difficulty_alignment(tmp_path):
    # alpha 0.5: genenv p_hat 0.8 -> 0.6 is |p_hat - alpha| 0.3 -> 0.1 (ratio 1/3 <= 0.5): holds.
    good = make_study(tmp_path / "good", [
        trajectory("genenv", 0, [0.8, 0.7, 0.6], [0.1, 0.2, 0.3]),
        trajectory("genenv", 1, [0.2, 0.3, 0.4], [0.1, 0.2, 0.3]),  # |-0.3| -> |-0.1|
        trajectory("random", 0, [0.8, 0.8, 0.75], [0.1, 0.1, 0.1])])
    c1 = by_name(claims(load_study(good)))["Claim 1"]
    assert c1.holds is True
    assert "0.30 ± 0.00 at epoch 0 -> 0.10 ± 0.00 at epoch 2, ratio 0.33" in c1.text
    assert "random: 0.30 at epoch 0 -> 0.25 at epoch 2, ratio 0.83" in c1.text  # one seed: no std
    # 0.3 -> 0.2 (ratio 0.67 > 0.5): does not hold.
    bad = make_study(tmp_path / "bad", [trajectory("genenv", 0, [0.8, 0.75, 0.7], [0.1, 0.2, 0.3])])
    c1 = by_name(claims(load_study(bad)))["Claim 1"]
    assert c1.holds is False and "ratio 0.67" in c1.text and "random: no data" in c1.text
    # genenv aligns (0.3 -> 0.0), but random's p_hat reaches alpha as well: the agent's training did it, not
    # the simulator, so the claim does not hold.
    both = make_study(tmp_path / "both", [trajectory("genenv", 0, [0.8, 0.6, 0.5], [0.1, 0.2, 0.3]),
                                          trajectory("random", 0, [0.8, 0.6, 0.5], [0.1, 0.2, 0.3])])
    c1 = by_name(claims(load_study(both)))["Claim 1"]
    assert c1.holds is False and "genenv: 0.30 at epoch 0 -> 0.00 at epoch 2, ratio 0.00" in c1.text
    assert "random: 0.30 at epoch 0 -> 0.00 at epoch 2" in c1.text and "below random's" in c1.text


def test_claim2_data_efficiency_ordering(tmp_path):
    runs = [trajectory(mode, seed, [0.5] * 3, [0.0, 0.0, acc + 0.02 * seed])
            for mode, acc in (("genenv", 0.6), ("random", 0.5), ("static", 0.4)) for seed in (0, 1)]
    c2 = by_name(claims(load_study(make_study(tmp_path / "a", runs))))["Claim 2"]
    assert c2.holds is True
    assert "observed ordering genenv > random > static" in c2.text
    assert "genenv 0.61 ± 0.01" in c2.text and "genenv - random = +0.100 (exceeds" in c2.text
    # random best: the ordering is reported as measured and the claim fails; the gap within one std says so.
    runs = [trajectory("genenv", 0, [0.5] * 3, [0, 0, 0.50]), trajectory("genenv", 1, [0.5] * 3, [0, 0, 0.60]),
            trajectory("random", 0, [0.5] * 3, [0, 0, 0.56]), trajectory("random", 1, [0.5] * 3, [0, 0, 0.56]),
            trajectory("static", 0, [0.5] * 3, [0, 0, 0.40])]
    c2 = by_name(claims(load_study(make_study(tmp_path / "b", runs))))["Claim 2"]
    assert c2.holds is False
    assert "observed ordering random > genenv > static" in c2.text
    assert "genenv - random = -0.010 (within the larger seed std)" in c2.text  # |0.55 - 0.56| < std 0.05
    # the right ordering by less than the seeds' spread: not shown
    runs[2:4] = [trajectory("random", 0, [0.5] * 3, [0, 0, 0.52]), trajectory("random", 1, [0.5] * 3, [0, 0, 0.54])]
    c2 = by_name(claims(load_study(make_study(tmp_path / "d", runs))))["Claim 2"]
    assert c2.holds is False and "observed ordering genenv > random > static" in c2.text
    assert "genenv - random = +0.020 (within the larger seed std)" in c2.text
    # no static runs: undecided, not crashed.
    c2 = by_name(claims(load_study(make_study(tmp_path / "c", runs[:4]))))["Claim 2"]
    assert c2.holds is None and "missing for static" in c2.text


def sweep(levels_by_alpha):
    """genenv runs, one per alpha, whose last epoch generates tasks at the given level counts."""
    return [trajectory("genenv", 0, [0.5, 0.5], [0.1, 0.2], gens=[[1, 1, 1], counts], alpha=a)
            for a, counts in levels_by_alpha.items()]


def test_claim3_alpha_controls_difficulty(tmp_path):
    # mean levels 3.0, 2.0, 1.25 for alpha 0.3, 0.5, 0.7: strictly decreasing.
    study = load_study(make_study(tmp_path / "a", sweep({0.3: [0, 0, 4], 0.5: [1, 2, 1], 0.7: [3, 1, 0]}),
                                  epochs=2))
    c3 = by_name(claims(study))["Claim 3"]
    assert c3.holds is True and "alpha=0.3: 3.00, alpha=0.5: 2.00, alpha=0.7: 1.25" in c3.text
    study = load_study(make_study(tmp_path / "b", sweep({0.3: [1, 2, 1], 0.5: [0, 0, 4], 0.7: [3, 1, 0]}),
                                  epochs=2))
    c3 = by_name(claims(study))["Claim 3"]
    assert c3.holds is False and "alpha=0.3: 2.00, alpha=0.5: 3.00" in c3.text
    c3 = by_name(claims(load_study(make_study(tmp_path / "c", sweep({0.5: [0, 0, 4]}), epochs=2))))["Claim 3"]
    assert c3.holds is None


def test_tables_and_summary_equal_hand_computed_stats(tmp_path):
    runs = [
        {"mode": "genenv", "seed": 0, "rows": [
            row(0, 0.9, 0.2, [4, 0, 0], [0.9, 0, 0], 0.0, episodes=10, steps=1, **{"heldout/level_1": 0.5}),
            row(1, 0.6, 0.4, [0, 2, 2], [0, 0.7, 0.4], 0.5, episodes=10, steps=1, **{"heldout/level_1": 0.8})]},
        {"mode": "genenv", "seed": 1, "rows": [
            row(0, 0.8, 0.3, [2, 2, 0], [1.0, 0.5, 0], 0.25, episodes=20, steps=3, **{"heldout/level_1": 0.6}),
            row(1, 0.7, float("nan"), [0, 0, 4], [0, 0, 0.6], 1.0, episodes=20, steps=3,
                **{"heldout/level_1": 0.9})]},
        {"mode": "static", "seed": 0, "rows": [row(0, 0.5, 0.1), row(1, 0.5, 0.15)]},
    ]
    md = write_report(make_study(tmp_path, runs, epochs=2)).read_text()
    per_epoch = {r["epoch"]: r for r in md_table(md, "per epoch")}
    assert set(per_epoch) == {"0", "1"}  # the warm-start row (epoch -1) is not an epoch
    assert per_epoch["1"]["genenv p_hat"] == "0.65 ± 0.05"  # mean(0.6, 0.7), std ddof=0
    assert per_epoch["0"]["genenv gap"] == "0.35 ± 0.05"  # |0.9-0.5|, |0.8-0.5|
    assert per_epoch["1"]["genenv in-band"] == "0.75 ± 0.25"
    assert per_epoch["1"]["genenv held-out acc"] == "0.40 ± 0.00 (n=1)"  # NaN skipped: one seed
    assert per_epoch["0"]["static p_hat"] == "0.50"  # static has one seed: its mean alone, no std of 0
    final = {r["mode"]: r for r in md_table(md, "## Modes, final")}
    g = final["genenv"]
    assert g["runs complete"] == "2 of 2" and g["held-out level_1"] == "0.85 ± 0.05"
    assert g["gap epoch 0"] == "0.35 ± 0.05" and g["gap last"] == "0.15 ± 0.05"
    assert g["agent episodes (sum, complete runs)"] == "30 ± 10"  # 10 + 10 and 20 + 20 (warm-start 1000 not counted)
    assert g["agent steps (sum, complete runs)"] == "4 ± 2"
    assert final["static"]["held-out acc"] == "0.15"  # one seed
    sweep_rows = md_table(md, "## Alpha sweep")
    assert sweep_rows[0]["alpha"] == "0.5"
    assert sweep_rows[0]["mean level epoch 0"] == "1.25 ± 0.25"  # 1.0 and 1.5
    assert sweep_rows[0]["mean level last"] == "2.75 ± 0.25"  # 2.5 and 3.0
    share = md_table(md, "Share of generated tasks per level")[0]
    assert share["level_2"] == "0.25 ± 0.25" and share["level_3"] == "0.75 ± 0.25"
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    gap = summary["modes"]["genenv"]["final"]["gap_last"]
    assert gap["n"] == 2 and np.isclose(gap["mean"], 0.15) and np.isclose(gap["std"], 0.05)
    success = summary["modes"]["genenv"]["final"]["success_last"]
    assert np.isclose(success["level_3"]["mean"], 0.5) and success["level_1"]["n"] == 2
    assert summary["modes"]["static"]["final"]["share_last"]["level_1"] == {"mean": None, "std": None, "n": 0}
    assert [c["holds"] for c in summary["claims"]] == [True, None, None]  # 0.15 <= 0.5 * 0.35; no random; one alpha


def test_plots_are_png_files_embedded_in_the_report(tmp_path):
    runs = [trajectory(mode, 0, [0.7, 0.6], [0.1, 0.3], gens=[[2, 1, 0], [0, 1, 2]] if mode != "static" else None)
            for mode in ("genenv", "random", "static")]
    md_path = write_report(make_study(tmp_path, runs, epochs=2))
    md = md_path.read_text()
    for name in ("p_hat", "heldout", "difficulty"):
        png = md_path.parent / f"{name}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 1000
        assert f"]({name}.png)" in md
    # one alpha is no sweep: no alpha-sweep plot is drawn or embedded; with a second alpha there is one
    assert not (md_path.parent / "alpha_sweep.png").exists() and "alpha_sweep.png" not in md
    runs.append(trajectory("genenv", 0, [0.5, 0.4], [0.1, 0.2], gens=[[1, 1, 1], [0, 2, 1]], alpha=0.3))
    md_path = write_report(make_study(tmp_path / "sweep", runs, epochs=2))
    assert (md_path.parent / "alpha_sweep.png").read_bytes()[:8] == PNG_MAGIC
    assert "](alpha_sweep.png)" in md_path.read_text()
    assert "runs complete: 3 of 3" in md and "scale: tiny" in md and "--config=configs/study.py" in md


def test_incomplete_runs_are_reported_not_crashed_on(tmp_path):
    runs = [trajectory("genenv", 0, [0.8, 0.7, 0.6], [0.1, 0.2, 0.3]),
            trajectory("genenv", 1, [0.8, 0.7], [0.1, 0.4]),  # 2 of 3 epochs
            {"mode": "genenv", "seed": 2, "rows": None},  # no metrics.jsonl
            {"mode": "random", "seed": 0, "rows": []}]  # only the warm-start row
    md = write_report(make_study(tmp_path, runs)).read_text()
    status = {r["run"]: r["status"] for r in md_table(md, "runs complete")}
    assert status == {"genenv-a0.5-s0": "complete", "genenv-a0.5-s1": "incomplete: 2 of 3 epochs",
                      "genenv-a0.5-s2": "incomplete: no metrics.jsonl (skipped)",
                      "random-a0.5-s0": "incomplete: no completed epoch (skipped)"}
    assert "runs complete: 1 of 4" in md
    final = {r["mode"]: r for r in md_table(md, "## Modes, final")}
    assert final["genenv"]["runs complete"] == "1 of 3"
    assert final["genenv"]["held-out acc"] == "0.30 ± 0.00 (n=1)"  # last epoch 2: only seed 0 got there
    assert final["genenv"]["agent episodes (sum, complete runs)"] == "24 ± 0 (n=1)"  # seed 1's 2 epochs not summed
    assert final["random"]["held-out acc"] == "-"
    assert by_name(claims(load_study(tmp_path)))["Claim 2"].holds is None


def test_cli_missing_study_json(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("genenv_jax.study.report: error: no study.json in ")
    proc = subprocess.run([sys.executable, "-m", "genenv_jax.study.report", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [f"genenv_jax.study.report: error: no study.json in {tmp_path / 'nope'}"]
    (tmp_path / "study.json").write_text('{"runs": []}')  # no "alpha"
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"genenv_jax.study.report: error: {tmp_path}/study.json: missing key 'alpha'\n"


def test_cli_writes_the_report(tmp_path, capsys):
    make_study(tmp_path, [trajectory("genenv", 0, [0.7, 0.6], [0.1, 0.3])], epochs=2)
    assert main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "report" / "report.md")
    assert (tmp_path / "report" / "summary.json").is_file()


@pytest.mark.parametrize("value", [None, "text", True, float("inf")])
def test_non_numbers_are_no_data(tmp_path, value):
    runs = [{"mode": "genenv", "seed": 0, "rows": [row(0, 0.5, value)]}]
    final = summarize(load_study(make_study(tmp_path, runs, epochs=1)))["modes"]["genenv"]["final"]
    assert final["heldout"].n == 0 and final["heldout"].mean is None and final["gap_last"].n == 1


def test_the_kept_bfcl_grounding_arm_rebuilds_its_report_byte_for_byte(tmp_path):
    """docs/results/bfcl_study_grounding_arm is a real study directory (the real model's grounding
    arm): its report, rebuilt from the kept metrics, samples and D_env pool, is the one in the docs."""
    kept = REPO / "docs" / "results" / "bfcl_study_grounding_arm"
    study = shutil.copytree(kept, tmp_path / "study")
    shutil.rmtree(study / "report")
    rebuilt = write_report(study).read_text()
    assert rebuilt == (kept / "report" / "report.md").read_text()
    assert "| genenv_ungrounded-a0.5-s0 | 0 | 12 | 2 | 0 | 0.00 | 1 (0 ungrounded) |" in rebuilt

"""Study report: Markdown + PNG plots computed only from the runs' own metrics.jsonl files.

`write_report(study_dir)` writes report.md, summary.json and four PNGs under <study_dir>/report/
from the statistics of `results.py` (how they are computed is documented there) and the plots of
`plots.py`. CLI: python -m genenv_jax.study.report STUDY_DIR
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Sequence

from genenv_jax.core.errors import ArgumentParser, command
from genenv_jax.study.plots import write_plots
from genenv_jax.study.results import VERDICT, Claim, Stat, Study, claims, groups, last_epoch, load_study, summarize

PROGRAM = "genenv_jax.study.report"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table."""
    return "\n".join(["| " + " | ".join(r) + " |" for r in [header, ["---"] * len(header), *rows]])


def sweep_section(sweep: dict, levels: Sequence[str], last_s: int | None) -> list[str]:
    """The alpha sweep's tables."""
    rows = [[f"{a:g}", f"{v['n_complete']} of {v['n_runs']}"]
            + [v[k].fmt(v["n_runs"]) for k in ("level_first", "level_last", "p_hat_last", "in_band_last")]
            for a, v in sweep.items()]
    return ["", f"## Alpha sweep (genenv runs, last epoch = {last_s})", "",
            _table(["alpha", "runs complete", "mean level epoch 0", "mean level last", "p_hat last",
                    "in-band last"], rows),
            "", f"Share of generated tasks per level, epoch {last_s}:", "",
            _table(["alpha"] + list(levels), [[f"{a:g}"] + [v["share_last"][lv].fmt(v["n_runs"]) for lv in levels]
                                              for a, v in sweep.items()])]


def render_markdown(study: Study, summary: dict, found: list[Claim]) -> str:
    """The report's Markdown text."""
    modes, sweep, levels, spec = summary["modes"], summary["sweep"], study.levels, study.spec
    last_m, last_s, none = summary["last_epoch"]["modes"], summary["last_epoch"]["sweep"], Stat(None, None, 0)
    out = ["# GenEnv study report", "", f"- command: `{spec.get('command', '-')}`; scale: {spec.get('scale', '-')}",
           f"- runs complete: {sum(r.complete for r in study.runs)} of {len(study.runs)}",
           f"- main alpha: {study.alpha:g}; epochs: {spec.get('epochs', '-')}; levels: {', '.join(levels)}",
           "- mean ± std (ddof=0) over seeds (one seed: the value alone); (n=k): only k seeds had data; -: no data; "
           "gap = |p_hat - alpha|", "",
           _table(["run", "mode", "alpha", "seed", "status"],
                  [[r.name, r.mode, f"{r.alpha:g}", str(r.seed), r.status()] for r in study.runs])]
    curves = {"p_hat": "p_hat", "gap": "gap", "in_band": "in-band", "heldout": "held-out acc"}
    epochs = sorted({e for v in modes.values() for e in v["per_epoch"]})
    rows = [[str(e)] + [v["per_epoch"].get(e, {}).get(k, none).fmt(v["n_runs"]) for v in modes.values()
                        for k in curves] for e in epochs]
    out += ["", f"## Modes at alpha = {study.alpha:g}, per epoch", "",
            _table(["epoch"] + [f"{m} {label}" for m in modes for label in curves.values()], rows)]
    rows = [[m, f"{v['n_complete']} of {n}", f["heldout"].fmt(n)] + [f["heldout_levels"][lv].fmt(n) for lv in levels]
            + [f[k].fmt(n) for k in ("gap_first", "gap_last", "in_band_last")]
            + [f[k].fmt(n, 0) for k in ("agent_episodes", "agent_steps")]
            for m, v in modes.items() for f, n in [(v["final"], v["n_runs"])]]
    out += ["", f"## Modes, final (last epoch = {last_m})", "",
            _table(["mode", "runs complete", "held-out acc"] + [f"held-out {lv}" for lv in levels]
                   + ["gap epoch 0", "gap last", "in-band last", "agent episodes (sum, complete runs)",
                      "agent steps (sum, complete runs)"], rows)]
    if spec.get("sweep_alphas", True):  # a study planned without a sweep (`sweep_alphas=()`) has none to show
        out += sweep_section(sweep, levels, last_s)
    if study.runs and all(v["n_runs"] == 1 for v in modes.values()):
        out += render_details(study)
    out += ["", "## Claims as measured", ""] + [f"- **{c.name}: {VERDICT[c.holds]}.** {c.text}" for c in found]
    plots = ("p_hat", "heldout", "difficulty") + (("alpha_sweep",) if len(sweep) >= 2 else ())
    out += ["", "## Plots", ""] + [f"![{n}]({n}.png)" for n in plots]
    return "\n".join(out) + "\n"


def _fmt(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_details(study: Study) -> list[str]:
    """One seed per arm: the base model's evaluation, each run per epoch (held-out accuracy with 95%
    Wilson intervals from its items, the simulator's rates, generated categories, phase times), paired
    tests on the held-out items, and the grounding of generated tasks with examples."""
    from genenv_jax.study.details import (accuracy, heldout_items, mcnemar, read_items, rwr_tasks, simulator_rates,
                                          ungrounded_examples)

    levels, out = study.levels, []
    base = read_items(study.directory / "base" / "items.jsonl") if study.spec.get("base") else None
    if base:
        out += ["", "## The base model (untrained), on the held-out set", "",
                "The evaluation command on the untrained agent (`base/`: results.json holds its config):", "",
                _table(["held-out acc (95% CI)"] + levels,
                       [[accuracy(base).fmt()] + [_fmt(accuracy(base, lv).value) for lv in levels]])]
    short = {lv: "".join(w[0] for w in lv.split("_")) for lv in levels}
    out += ["", "## Each run, per epoch", "",
            "start = after the warm-start, before epoch 0. Rates: json = generations holding a JSON object; "
            "accept = generations that became tasks; ground = grounded share of the generations that passed "
            "every other check (refused or, with grounding recorded, flagged). generated: "
            + ", ".join(f"{v} = {k}" for k, v in short.items()) + "."]
    for run in study.runs:
        rows = []
        for epoch, row in ([(-1, run.start)] if run.start else []) + sorted(run.rows.items()):
            items = heldout_items(run.workdir, epoch)
            rates = simulator_rates(row)
            made = ", ".join(f"{short[lv]} {int(row[k])}" for lv in levels if (k := f"category/{lv}/generated") in row)
            times = "/".join(f"{row[f'time/{k}_s']:.0f}" for k in ("generate", "rollouts", "updates", "heldout")
                             if f"time/{k}_s" in row)
            rows.append(["start" if epoch < 0 else str(epoch),
                         accuracy(items).fmt() if items else _fmt(row.get("heldout/accuracy"), 3)]
                        + [_fmt(accuracy(items, lv).value if items else row.get(f"heldout/{lv}")) for lv in levels]
                        + [_fmt(row.get(k)) for k in ("p_hat_mean", "in_band_fraction")]
                        + [_fmt(rates[k]) for k in ("json_rate", "accept_rate", "ground_rate")]
                        + [made or "-", _fmt(row.get("agent/episodes"), 0), _fmt(row.get("agent/steps"), 0),
                           times or "-"])
        out += ["", f"### {run.name} ({run.status()})", "",
                _table(["epoch", "held-out acc (95% CI)"] + [f"held-out {lv}" for lv in levels]
                       + ["p_hat", "in-band", "json", "accept", "ground", "generated", "agent episodes",
                          "agent steps", "seconds gen/roll/upd/held-out"], rows)]
    main, last = groups(study)[0], last_epoch(groups(study)[0])
    finals = {arm: heldout_items(runs[0].workdir, last) for arm, runs in main.items() if last is not None}
    finals = {arm: items for arm, items in finals.items() if items}
    starts = {arm: heldout_items(runs[0].workdir, -1) for arm, runs in main.items()}
    pairs = [(a, b) for i, a in enumerate(finals) for b in list(finals)[i + 1:]]
    rows = [[f"{a} vs {b} (epoch {last})", *_paired(mcnemar(finals[a], finals[b]))] for a, b in pairs]
    rows += [[f"{a}: epoch {last} vs start", *_paired(mcnemar(finals[a], starts[a]))] for a in finals if starts.get(a)]
    rows += [[f"{a}: epoch {last} vs base", *_paired(mcnemar(finals[a], base))] for a in finals if base]
    if rows:
        out += ["", "## Paired comparisons on the held-out items", "",
                "Exact two-sided McNemar tests: the same items scored twice; only the items one side solves "
                "and the other does not count.", "",
                _table(["comparison", "items", "solved only by the first", "solved only by the second", "p"], rows)]
    rows = []
    for run in study.runs:
        measured = [(e, simulator_rates(row)) for e, row in sorted(run.rows.items())]
        measured = [(e, r) for e, r in measured if r["generated"]]
        for e, r in measured[:1] + measured[1:][-1:]:
            rwr = rwr_tasks(run.workdir, e)
            rows.append([run.name, str(e), str(r["generated"]), str(r["otherwise_accepted"]), str(r["ungrounded"]),
                         _fmt(None if not r["otherwise_accepted"] else r["ungrounded"] / r["otherwise_accepted"]),
                         "-" if rwr is None or run.mode != "genenv" else
                         f"{rwr['in_band']} ({rwr['ungrounded_in_band']} ungrounded)"])
    if rows:
        out += ["", "## Grounding of generated tasks", "",
                "Ungrounded share = generations that passed every other check but state a ground-truth value the "
                "question does not (refused with the check on, accepted and flagged with it recorded), of those "
                "that passed every other check; first and last epoch that generated.", "",
                _table(["run", "epoch", "generated", "otherwise accepted", "ungrounded", "ungrounded share",
                        "RWR trained on (in band)"], rows)]
        for run in study.runs:
            examples = ungrounded_examples(run.workdir, sorted(run.rows), 4)
            if not any(ex["question"] for ex in examples):
                continue
            out += ["", f"Ungrounded tasks {run.name} accepted (newest first, from its samples):", ""]
            out += [f"- epoch {ex['epoch']}: {json.dumps(ex['question'])[:300]} -> "
                    f"`{json.dumps(ex['ground_truth'])[:300]}`; {ex['why'][:300]}; agent rewards {ex['agent_rewards']}"
                    for ex in examples if ex["question"]]
    return out


def _paired(test: dict) -> list[str]:
    return [str(test["n_items"]), str(test["only_first"]), str(test["only_second"]), f"{test['p']:.3g}"]


def write_report(study_dir: str | Path, study: Study | None = None) -> Path:
    """Writes <study_dir>/report/report.md, summary.json and the PNGs; returns the .md path."""
    study = study or load_study(study_dir)
    summary, out_dir = summarize(study), study.directory / "report"
    found = claims(study, summary)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_plots(study, summary, out_dir)
    runs = [{**spec, "epochs_done": len(r.rows), "status": r.status()}
            for spec, r in zip(study.spec.get("runs", []), study.runs)]
    meta = {**study.spec, "levels": study.levels, "runs": runs}
    (out_dir / "summary.json").write_text(json.dumps({"study": meta, **summary, "claims": found},
                                                     default=dataclasses.asdict, indent=1) + "\n")
    (out_dir / "report.md").write_text(render_markdown(study, summary, found))
    return out_dir / "report.md"


@command(PROGRAM)
def main(argv: Sequence[str] | None = None) -> int:
    """CLI: writes the report of STUDY_DIR and prints its path (a missing or malformed study.json: one
    line naming it, exit 2)."""
    parser = ArgumentParser(prog=PROGRAM, description=__doc__.split("\n")[0])
    parser.add_argument("study_dir", help="a study directory holding study.json")
    study_dir = parser.parse_args(argv).study_dir
    print(write_report(study_dir, load_study(study_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

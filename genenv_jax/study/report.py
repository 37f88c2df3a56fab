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
from genenv_jax.study.results import VERDICT, Claim, Stat, Study, claims, load_study, summarize

PROGRAM = "genenv_jax.study.report"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table."""
    return "\n".join(["| " + " | ".join(r) + " |" for r in [header, ["---"] * len(header), *rows]])


def render_markdown(study: Study, summary: dict, found: list[Claim]) -> str:
    """The report's Markdown text."""
    modes, sweep, levels, spec = summary["modes"], summary["sweep"], study.levels, study.spec
    last_m, last_s, none = summary["last_epoch"]["modes"], summary["last_epoch"]["sweep"], Stat(None, None, 0)
    out = ["# GenEnv study report", "", f"- command: `{spec.get('command', '-')}`; scale: {spec.get('scale', '-')}",
           f"- runs complete: {sum(r.complete for r in study.runs)} of {len(study.runs)}",
           f"- main alpha: {study.alpha:g}; epochs: {spec.get('epochs', '-')}; levels: {', '.join(levels)}",
           "- mean ± std (ddof=0) over seeds; (n=k): only k seeds had data; -: no data; gap = |p_hat - alpha|", "",
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
    rows = [[f"{a:g}", f"{v['n_complete']} of {v['n_runs']}"]
            + [v[k].fmt(v["n_runs"]) for k in ("level_first", "level_last", "p_hat_last", "in_band_last")]
            for a, v in sweep.items()]
    out += ["", f"## Alpha sweep (genenv runs, last epoch = {last_s})", "",
            _table(["alpha", "runs complete", "mean level epoch 0", "mean level last", "p_hat last",
                    "in-band last"], rows),
            "", f"Share of generated tasks per level, epoch {last_s}:", "",
            _table(["alpha"] + levels, [[f"{a:g}"] + [v["share_last"][lv].fmt(v["n_runs"]) for lv in levels]
                                        for a, v in sweep.items()])]
    out += ["", "## Claims as measured", ""] + [f"- **{c.name}: {VERDICT[c.holds]}.** {c.text}" for c in found]
    out += ["", "## Plots", ""] + [f"![{n}]({n}.png)" for n in ("p_hat", "heldout", "difficulty", "alpha_sweep")]
    return "\n".join(out) + "\n"


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
    """CLI: writes the report of STUDY_DIR and prints its path (exit 2 on a bad study dir)."""
    parser = ArgumentParser(prog=PROGRAM, description=__doc__.split("\n")[0])
    parser.add_argument("study_dir", help="a study directory holding study.json")
    study_dir = parser.parse_args(argv).study_dir
    try:
        study = load_study(study_dir)  # a missing or malformed study.json: one line, exit 2 (other errors raise)
    except (FileNotFoundError, ValueError, KeyError, TypeError, AttributeError) as e:  # AttributeError: not an object
        why = e if isinstance(e, FileNotFoundError) else f"bad study.json in {study_dir}: {e!r}"
        print(f"{PROGRAM}: error: {why}", file=sys.stderr)
        return 2
    print(write_report(study_dir, study))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Writes docs/reproduction_calc_real.md, the simulator-aims study's report, from a kept study directory.

The prose is a template (templates/reproduction_calc_real.md) whose `{{section}}` lines this
command replaces with tables generated from the runs' files only (study.json, each run's
metrics.jsonl, pools/d_env, heldout/, done.json, base/items.jsonl) and the probe's summary.json;
the plots and a summary.json of every number go to --images. The output is deterministic (no
times or paths of this machine, sorted keys, a fixed bootstrap seed), so it rebuilds byte for byte.

CLI (the committed report, from the repository's root):
    python -m genenv_jax.study.calc_report docs/results/calc_real_study \
        --probe docs/results/probe_calc_real_200/summary.json [--out docs/reproduction_calc_real.md]
        [--images docs/images/calc_real]
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from genenv_jax.core.errors import ArgumentParser, command
from genenv_jax.study.aim_claims import BOOTSTRAP_NOTE, Decided, decide, heldout_epochs, moved
from genenv_jax.study.aim_plots import PLOTS, write_plots
from genenv_jax.study.aim_prompt import planned_overrides, unchanged_prompt
from genenv_jax.study.aim_why import MIN_LEVEL_TASKS, BandSignal, band_signal, reward_grid, weight_ratio
from genenv_jax.study.arm_epochs import (PARSE_REASONS, SIMULATOR_KEYS, RunData, level_numbers, run_data,
                                         simulator_update)
from genenv_jax.study.bootstrap import bootstrap_difference
from genenv_jax.study.details import accuracy, heldout_items, read_items
from genenv_jax.study.report import _fmt, _table
from genenv_jax.study.results import Study, load_study

PROGRAM = "genenv_jax.study.calc_report"
# Where the repository keeps the study's runs and the probe of the untrained simulator, and where the
# report goes (tests/study/test_study_calc_report.py rebuilds the committed report from them byte for byte).
KEPT_STUDY, KEPT_PROBE = "docs/results/calc_real_study", "docs/results/probe_calc_real_200/summary.json"
OUT, IMAGES = "docs/reproduction_calc_real.md", "docs/images/calc_real"
TEMPLATE = Path(__file__).parent / "templates" / "reproduction_calc_real.md"
SETTINGS = ("epochs", "seeds_per_epoch", "variants_per_seed", "rollouts_per_task", "new_tasks_per_epoch",
            "curriculum.alpha", "curriculum.beta", "curriculum.k_min", "simulator_feedback",
            "simulator.train.objective", "simulator.train.tasks_per_epoch", "simulator.train.tasks_per_step",
            "simulator.train.loss.reward_lambda", "simulator.train.loss.weight_norm", "simulator.train.invalid_reward", "simulator.optimizer.learning_rate",
            "simulator.sampling.temperature", "agent.train.tasks_per_epoch", "agent.optimizer.learning_rate",
            "evaluation.every_epochs")
PHASES = ("generate", "rollouts", "updates", "heldout")


@dataclasses.dataclass(frozen=True)
class Inputs:
    """Everything the report is computed from."""

    study: Study
    data: list[RunData]  # the runs with at least one epoch, plan order
    base: dict | None  # the untrained model's held-out items
    probe: dict | None  # the probe's summary.json
    done: dict[str, dict]  # run name -> its done.json
    bands: dict[str, BandSignal]  # run name -> aim_why.band_signal, for runs with per-task records


def read_inputs(study_dir: str | Path, probe: str | Path | None = None) -> Inputs:
    """Reads the study directory (FileNotFoundError without study.json) and the probe summary."""
    study = load_study(study_dir)
    data = [run_data(r, study.levels) for r in study.runs if r.rows]
    base = read_items(study.directory / "base" / "items.jsonl")
    done = {r.name: json.loads((r.workdir / "done.json").read_text()) for r in study.runs
            if (r.workdir / "done.json").is_file()}
    bands = {d.run.name: s for d in data if (s := band_signal(d)) is not None}
    return Inputs(study, data, base, None if probe is None else json.loads(Path(probe).read_text()), done, bands)


def _dig(tree: Mapping[str, Any], dotted: str) -> Any:
    for key in dotted.split("."):
        if not isinstance(tree, Mapping) or key not in tree:
            return None
        tree = tree[key]
    return tree


def coverage(inp: Inputs) -> str:
    """Which runs exist and how far they got; their settings and time per phase."""
    rows, overrides = [], planned_overrides(inp)
    for r in inp.study.runs:
        epochs = sorted(r.rows)
        seconds = {k: sum(row.get(f"time/{k}_s") or 0.0 for row in r.rows.values()) for k in PHASES}
        rows.append([r.name, r.mode, f"{r.alpha:g}", ", ".join(f"{k}={v}" for k, v in overrides.get(r.name, [])) or "-",
                     r.status() if r.rows else "started, no epoch yet" if r.workdir.is_dir() else "not run",
                     "-" if not epochs else f"{epochs[0]}-{epochs[-1]}",
                     ", ".join("start" if e < 0 else str(e) for e in heldout_epochs(r.workdir)) or "-",
                     "-" if not epochs else f"{sum(seconds.values()) / 60:.1f}",
                     "-" if not epochs else "/".join(f"{seconds[k] / 60:.1f}" for k in PHASES)])
    finished = [n for n in inp.done if "config" in inp.done[n]]
    out = [f"**This report covers the runs that exist in the study directory: {len(inp.data)} of "
           f"{len(inp.study.runs)} planned runs have epochs ({sum(r.complete for r in inp.study.runs)} complete, "
           f"{inp.study.spec.get('epochs', '-')} epochs planned each).** Study command: "
           f"`{inp.study.spec.get('command', '-')}`.", "",
           _table(["run", "mode", "alpha", "overrides", "status", "epochs", "held-out evaluations",
                   "minutes (sum of phases)", "minutes generate/rollouts/updates/held-out"], rows)]
    if finished:
        values = {n: {k: _dig(inp.done[n]["config"], k) for k in SETTINGS} for n in finished}
        out += ["", "Settings of the finished runs (their done.json):", "",
                _table(["setting"] + finished, [[k] + [json.dumps(values[n][k]) for n in finished] for k in SETTINGS
                                                 if any(values[n][k] is not None for n in finished)])]
    return "\n".join(out)


def probe(inp: Inputs) -> str:
    """The untrained simulator's parse and accept rates from the probe's summary.json."""
    p = inp.probe
    if p is None:
        return "(No probe summary was given to the generator: `--probe`.)"
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(p.get("rejections", {}).items(), key=lambda kv: (-kv[1], kv[0])))
    levels = ", ".join(f"{k} {v}" for k, v in sorted(p.get("accepted_by_category", {}).items()))
    return (f"The untrained simulator ({Path(str(p.get('model', '-'))).name}, temperature {p.get('temperature', '-')}, "
            f"domain options {json.dumps(p.get('domain_options', {}), sort_keys=True)}) accepted "
            f"**{p['accepted']} of {p['generations']} generations ({p['accepted'] / p['generations']:.1%})**. "
            f"Rejections: {reasons or 'none'}. Accepted tasks by level: {levels or '-'}.")


def claims(found: Sequence[Decided]) -> str:
    return "\n".join([f"- **{c.name}: {c.verdict}.** {c.text}" for c in found] + ["", BOOTSTRAP_NOTE])


def movement(inp: Inputs) -> str:
    """Each run's last epochs against its first: did what the agent sees move at all?"""
    rows = []
    for d in inp.data:
        m = moved(d, inp.study.levels)
        if m is not None:
            rows.append([d.run.name, f"{m['first'][0]}-{m['first'][-1]}", f"{m['last'][0]}-{m['last'][-1]}"]
                        + [f"{x.mean_b:.3f} -> {x.mean_a:.3f}: {x.fmt()}" if x else "-"
                           for x in (m["in_band"], m["level"])])
    if not rows:
        return "(No run has two windows of epochs yet.)"
    return _table(["run", "first epochs", "last epochs", "in-band share: first -> last: last - first [95%]",
                   "mean level: first -> last: last - first [95%]"], rows)


def directions(inp: Inputs) -> str:
    """Per run and direction the simulator was asked for: its scored tasks' level minus their seed's."""
    rows = []
    for d in inp.data:
        for asked, shift in d.shifts(sorted(d.epochs)).items():
            mean = bootstrap_difference(shift, [0.0])
            shares = (np.mean(shift > 0), np.mean(shift == 0), np.mean(shift < 0))
            rows.append([d.run.name, asked, str(len(shift)), mean.fmt()] + [_fmt(float(x)) for x in shares])
    if not rows:
        return "(No scored task with a known seed level yet.)"
    return _table(["run", "asked", "tasks", "mean level - seed level [95%]", "share higher", "share same",
                   "share lower"], rows)


def per_epoch(inp: Inputs) -> str:
    """Per run and epoch: the simulator's output and the scores of the tasks the agent rolled out."""
    numbers, short = level_numbers(inp.study.levels), [f"L{n}" for n in level_numbers(inp.study.levels)]
    out = []
    for d in inp.data:
        rows = [[str(e), "-" if s.generated is None else str(s.generated), str(s.accepted), _fmt(s.parse_rate),
                 _fmt(s.accept_rate), _fmt(s.mean_level(numbers))] + [str(c) for c in s.level_counts]
                + [str(s.topped_up), str(s.scored), _fmt(s.p_hat), _fmt(s.gap), _fmt(s.in_band), _fmt(s.r_env), s.source or "-"]
                for e, s in sorted(d.epochs.items())]
        note = (" Static: its tasks were generated once before epoch 0 and are drawn each epoch, so there are no "
                "generations to count; accepted and the levels are the drawn tasks." if d.run.mode == "static" else "")
        out += [f"### {d.run.name}", "", f"alpha {d.run.alpha:g}.{note}", "",
                _table(["epoch", "generated", "accepted", "parse", "accept", "mean level"] + short
                       + ["topped up", "scored", "p_hat", "abs(p_hat - alpha)", "in-band", "R_env", "from"], rows), ""]
    return "\n".join(out).rstrip()


def level_success(inp: Inputs) -> str:
    """Per run and epoch: the agent's success rate on its rollouts of each level's tasks (the
    metrics' `category/<level>/success`), so where the agent's frontier lies each epoch can be
    read beside what the simulator wrote (levels nobody wrote that epoch are '-')."""
    numbers = level_numbers(inp.study.levels)
    out = []
    for d in inp.data:
        rows = [[str(e)] + [_fmt(row.get(f"category/{level}/success")) for level in inp.study.levels]
                for e, row in sorted(d.run.rows.items()) if e >= 0]
        if rows:
            out += [f"### {d.run.name}", "", _table(["epoch"] + [f"L{n}" for n in numbers], rows), ""]
    return "\n".join(out).rstrip() or "(No run has epochs yet.)"


def simulator_updates(inp: Inputs) -> str:
    """Per run that trains its simulator and epoch: the update's statistics as the loop logged them."""
    out = []
    for d in inp.data:
        updates = {e: u for e, row in sorted(d.run.rows.items()) if (u := simulator_update(row))}
        if not updates:
            continue
        keys = [k for k in SIMULATOR_KEYS if any(k in u for u in updates.values())]
        rows = [[str(e)] + [u[k] if isinstance(u.get(k), str) else _fmt(u.get(k), 0 if k in _COUNTS else 4)
                            for k in keys] for e, u in updates.items()]
        out += [f"### {d.run.name}", "", _table(["epoch"] + [_HEADERS.get(k, k) for k in keys], rows), ""]
    return "\n".join(out).rstrip() or "(No run trained its simulator yet.)"


def why(inp: Inputs) -> str:
    """What decided whether the simulator could aim: per run, how its tasks' rollouts landed and
    where the band lay by level (aim_why.band_signal); per curriculum setting of the finished runs,
    R_env, the band and RWR's weight at every p_hat the rollouts can give (aim_why.reward_grid)."""
    bands = band_table(inp)
    if bands is None:
        return "(No run has per-task records yet.)"
    return "\n".join([
        f"Per run, over every epoch's scored tasks: the share the agent solved in none or all of its rollouts, the "
        f"in-band share, the mean level of in-band tasks minus that of the others, the in-band tasks of each level, "
        f"and the level with the largest in-band share among levels with at least {MIN_LEVEL_TASKS} scored tasks; "
        f"then the simulator's updates over the run.", "", bands, "",
        "R_env, the band and RWR's weight `exp(lambda R_env)` at every p_hat the rollouts can give, for the "
        "settings of the finished runs (their done.json):", "", reward_table(inp)])


def band_table(inp: Inputs) -> str | None:
    """One row per run with per-task records: aim_why.band_signal as a table (None: no such run)."""
    rows = []
    for s in inp.bands.values():
        best = "-" if s.best_level is None else (f"L{s.best_level[0]}: {s.best_level[1] / s.best_level[2]:.2f} "
                                                 f"({s.best_level[1]}/{s.best_level[2]})")
        rows.append([s.run, str(s.scored), _fmt(s.extreme_share), _fmt(s.in_band_share),
                     s.level_gap.fmt() if s.level_gap else "-",
                     ", ".join(f"L{level} {hits}/{count}" for level, (hits, count) in s.by_level.items()), best,
                     str(s.steps) if s.steps else "-", str(s.rows) if s.steps else "-"])
    if not rows:
        return None
    return _table(["run", "scored tasks", "p_hat 0 or 1", "in band", "level: in band - out of band [95%]",
                   "in band / scored, by level", "best level: in-band share", "simulator steps", "simulator rows"],
                  rows)


def reward_table(inp: Inputs) -> str:
    """aim_why.reward_grid for each curriculum setting among the finished runs, with the runs that
    share it, RWR's in-band weight ratio and GRPO's reward for a generation that is not a task."""
    grids: dict[tuple, list[str]] = {}
    for name, done in inp.done.items():
        c = done["config"]
        key = (c["curriculum"]["alpha"], c["curriculum"]["beta"], c["curriculum"]["k_min"], c["rollouts_per_task"],
               c["simulator"]["train"]["loss"]["reward_lambda"], c["simulator"]["train"]["invalid_reward"])
        grids.setdefault(key, []).append(name)
    grid_rows, notes = [], []
    for key in sorted(grids):
        alpha, beta, k_min, _, reward_lambda, invalid = key
        grid = reward_grid(inp.done[grids[key][0]]["config"])
        setting = f"alpha {alpha:g}, beta {beta:g}, k_min {k_min:g}, lambda {reward_lambda:g}"
        grid_rows += [[setting, f"{g.successes} of {g.rollouts}", _fmt(g.p_hat), "yes" if g.in_band else "no",
                       _fmt(g.r_env, 3), _fmt(g.rwr_weight, 3)] for g in grid]
        ratio = weight_ratio(grid)
        notes.append(f"- {setting} ({', '.join(grids[key])}): in band, the largest RWR weight is "
                     f"{'-' if ratio is None else f'{ratio:.3f}'} times the smallest; a generation that is not a "
                     f"task gets GRPO reward {invalid:g}.")
    if not grids:
        return "(No run has finished yet.)"
    return "\n".join([_table(["setting", "successes", "p_hat", "in band", "R_env", "RWR weight"], grid_rows), "",
                      *notes])


_COUNTS = ("steps", "tasks", "groups", "groups_constant")
_HEADERS = {"tasks": "rows (RWR: tasks; GRPO: generations)", "groups_constant": "constant groups", "invalid_share": "invalid share",
            "reward_mean": "mean reward", "weight_min": "RWR weight min", "weight_max": "RWR weight max"}


def rejections(inp: Inputs) -> str:
    """Per run, its generations' rejections by reason, summed over its epochs."""
    reasons = sorted({k.split("/", 1)[1] for d in inp.data for row in d.run.rows.values() for k in row
                      if k.startswith("rejected/")})
    rows = [[d.run.name, str(sum(int(row.get("generated") or 0) for row in d.run.rows.values()))]
            + [str(sum(int(row.get(f"rejected/{k}", 0)) for row in d.run.rows.values())) for k in reasons]
            for d in inp.data if d.run.mode != "static"]
    if not rows:
        return "(No run generated tasks yet.)"
    return (f"Parse failures (the generation is not read as a task): {', '.join(PARSE_REASONS)}; the other reasons "
            "read a task and refuse it.\n\n" + _table(["run", "generated"] + reasons, rows))


def heldout_ends(inp: Inputs) -> dict[str, tuple[dict, dict, int]]:
    """{run name: (items at the start, items at its last evaluation, that epoch)} for the runs with both."""
    out = {}
    for d in inp.data:
        epochs = [e for e in heldout_epochs(d.run.workdir) if e >= 0]
        start = heldout_items(d.run.workdir, -1)
        if epochs and start:
            out[d.run.name] = (start, heldout_items(d.run.workdir, epochs[-1]), epochs[-1])
    return out


def heldout(inp: Inputs) -> str:
    """Held-out accuracy (Wilson 95%) overall and by level: the base model, each run's start and end."""
    levels, rows = inp.study.levels, []
    if inp.base:
        rows.append(["base (untrained)", "-", accuracy(inp.base).fmt()]
                    + [_fmt(accuracy(inp.base, lv).value) for lv in levels])
    for d in inp.data:
        for e in heldout_epochs(d.run.workdir):
            items = heldout_items(d.run.workdir, e)
            rows.append([d.run.name, "start" if e < 0 else str(e), accuracy(items).fmt()]
                        + [_fmt(accuracy(items, lv).value) for lv in levels])
    if not rows:
        return "(No held-out evaluation yet.)"
    return _table(["model", "after epoch", "accuracy [95%] (solved/items)"] + levels, rows) + span_check(inp)


def span_check(inp: Inputs) -> str:
    """Whether the agent's accuracy at the start spans the levels as the issue asks (easiest level
    >= 0.8, hardest <= 0.2), from the first run's held-out items at the start ('' without any)."""
    first = next((d for d in inp.data if heldout_items(d.run.workdir, -1)), None)
    if first is None or not inp.study.levels:
        return ""
    items = heldout_items(first.run.workdir, -1)
    easy, hard = (accuracy(items, inp.study.levels[i]) for i in (0, -1))
    if easy.value is None or hard.value is None:
        return ""
    holds = easy.value >= 0.8 and hard.value <= 0.2
    return (f"\n\nAt the start ({first.run.name}, after the format warm-start) the easiest level "
            f"({inp.study.levels[0]}) scores {easy.fmt()} and the hardest ({inp.study.levels[-1]}) {hard.fmt()}: "
            f"the span asked for (at least 0.8 down to at most 0.2) {'holds' if holds else 'does not hold'}.")


def plots(images: Path, out: Path) -> str:
    rel = Path(os.path.relpath(images, out.parent)).as_posix()
    return "\n\n".join(f"![{name[:-4]}]({rel}/{name})" for name in PLOTS)


def render(inp: Inputs, found: Sequence[Decided], images: Path, out: Path, template: str) -> str:
    """The template with every `{{section}}` line filled; ValueError for an unknown or unused section."""
    sections: dict[str, Callable[[], str]] = {
        "coverage": lambda: coverage(inp), "probe": lambda: probe(inp), "claims": lambda: claims(found),
        "movement": lambda: movement(inp), "directions": lambda: directions(inp),
        "unchanged_prompt": lambda: unchanged_prompt(inp),
        "per_epoch": lambda: per_epoch(inp), "level_success": lambda: level_success(inp),
        "simulator_updates": lambda: simulator_updates(inp), "why": lambda: why(inp), "rejections": lambda: rejections(inp),
        "heldout": lambda: heldout(inp), "plots": lambda: plots(images, out)}
    named = re.findall(r"^\{\{(\w+)\}\}$", template, flags=re.M)
    unknown, unused = sorted(set(named) - set(sections)), sorted(set(sections) - set(named))
    if unknown or unused:
        raise ValueError(f"template sections: unknown {unknown}, missing {unused}")
    return re.sub(r"^\{\{(\w+)\}\}$", lambda m: sections[m.group(1)](), template, flags=re.M)


def summary(inp: Inputs, found: Sequence[Decided]) -> dict:
    """Every number of the report as JSON (sorted keys when written)."""
    numbers = level_numbers(inp.study.levels)
    return {"levels": inp.study.levels, "claims": [dataclasses.asdict(c) for c in found],
            "band": {name: dataclasses.asdict(s) for name, s in inp.bands.items()},
            "runs": {d.run.name: {str(e): {**dataclasses.asdict(s), "mean_level": s.mean_level(numbers),
                                           "parse_rate": s.parse_rate, "accept_rate": s.accept_rate,
                                           "simulator": simulator_update(d.run.rows[e])}
                                  for e, s in sorted(d.epochs.items())} for d in inp.data}}


def write(study_dir: str | Path, out: str | Path, images: str | Path, probe_path: str | Path | None = None,
          template: str | Path = TEMPLATE) -> Path:
    """Writes the report to `out` and its PNGs and summary.json to `images`; returns `out`."""
    out, images = Path(out), Path(images)
    inp = read_inputs(study_dir, probe_path)
    found = decide(inp.study, inp.data)
    text = render(inp, found, images, out, Path(template).read_text(encoding="utf-8"))
    write_plots(inp.data, inp.study.levels, heldout_ends(inp), inp.base, images)
    (images / "summary.json").write_text(json.dumps(summary(inp, found), indent=1, sort_keys=True) + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


@command(PROGRAM, expected=(FileNotFoundError,))
def main(argv: Sequence[str] | None = None) -> int:
    """CLI: writes the report and prints its path."""
    parser = ArgumentParser(prog=PROGRAM, description=__doc__.split("\n")[0])
    parser.add_argument("study_dir", help="a study directory holding study.json (a kept copy of the study's runs)")
    parser.add_argument("--out", default=OUT, help="the Markdown file to write")
    parser.add_argument("--images", default=IMAGES, help="where the PNGs and summary.json go")
    parser.add_argument("--probe", default=None, help="the probe's summary.json (untrained simulator's accept rate)")
    parser.add_argument("--template", default=str(TEMPLATE), help="the prose with {{section}} lines")
    args = parser.parse_args(argv)
    print(write(args.study_dir, args.out, args.images, args.probe, args.template))
    return 0


if __name__ == "__main__":
    sys.exit(main())

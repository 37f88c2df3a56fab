"""What the simulator's prompt showed it and what it wrote: the arms' planned overrides (a blind arm
shows nothing of the agent) and the tasks of a prompt that reads the same every epoch
(calc_report's `unchanged_prompt` section). `inp` is calc_report.Inputs."""

from __future__ import annotations

from typing import Any

from genenv_jax.study.aim_claims import prompt_windows, span
from genenv_jax.study.bootstrap import bootstrap_difference
from genenv_jax.study.report import _table


def planned_overrides(inp: Any) -> dict[str, list[list]]:
    """{run name: its arm's [key, value] overrides} from the study's plan (study.json)."""
    return {spec["name"]: [list(o) for o in spec.get("overrides") or []] for spec in inp.study.spec.get("runs", [])}


def shows_results(inp: Any, run: str) -> bool:
    """Whether `run`'s simulator prompt shows the agent's results (not a blind arm's
    `simulator_feedback=none`), from the study's plan."""
    return ["simulator_feedback", "none"] not in planned_overrides(inp).get(run, [])


def unchanged_prompt(inp: Any) -> str:
    """Per run that writes tasks each epoch: level minus seed level of its tasks asked for a
    "similar" variant of a seed whose prompt stated no result of the agent (a seed not measured
    yet, or any seed in a blind arm), by window of epochs. That prompt reads the same in every epoch
    of a run, and between informed runs differs only in the target alpha it states (a blind arm's
    states no target either), so a change across the windows comes from the simulator's training,
    and a difference at the first epoch from alpha's words alone."""
    windows = prompt_windows(sorted({e for d in inp.data for e in d.epochs}))
    rows = []
    for d in inp.data:
        if d.run.mode == "static":
            continue
        blind = not shows_results(inp, d.run.name)
        cells = []
        for w in windows:
            shift = d.shifts(w, measured=None if blind else False).get("similar")
            cells.append("-" if shift is None
                         else f"{bootstrap_difference(shift, [0.0]).fmt()} ({len(shift)})")
        rows.append([d.run.name, f"{d.run.alpha:g}", "nothing (blind)" if blind else "not measured yet"] + cells)
    if not rows:
        return "(No run wrote tasks yet.)"
    return _table(["run", "alpha", "the prompt's result"] + [span(w) for w in windows], rows)

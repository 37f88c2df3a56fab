"""The claims of the simulator-aims study (issue #46), each decided with an interval from the runs.

- Claim 1: genenv's in-band share against random's over the last WINDOW epochs (and, beside it,
  mean |p_hat - alpha|), bootstrap over tasks.
- Claim 2: end-of-run held-out accuracy of genenv, random and static: Wilson intervals per arm and
  exact McNemar tests over the paired held-out items.
- Claim 3: the mean level of accepted tasks at alpha 0.2 against alpha 0.8 over the last WINDOW
  epochs (lower alpha should mean harder tasks, a higher level), bootstrap over tasks.
- Claim 4: RWR (genenv) against GRPO (genenv_grpo) on in-band share and mean level; the same for
  the blind arms (nothing of the agent in the simulator's prompt) against their informed ones.

"The last WINDOW epochs" are those up to the latest epoch every compared arm has, so a study that
runs in parts compares like with like. An arm that has no run with data makes its claim "not run".
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from genenv_jax.study.arm_epochs import RunData
from genenv_jax.study.bootstrap import REPLICATES, Difference, bootstrap_difference
from genenv_jax.study.details import accuracy, heldout_items, mcnemar
from genenv_jax.study.results import Study
from genenv_jax.workdir.metrics import HELDOUT_DIR, heldout_items_file

WINDOW = 4
SWEEP = (0.2, 0.8)  # claim 3's alphas: the lower one should give the higher level
HELD_OUT_ARMS = ("genenv", "random", "static")
OBJECTIVES = (("genenv", "genenv_grpo"), ("genenv_blind", "genenv"), ("random_blind", "random"))


@dataclasses.dataclass(frozen=True)
class Decided:
    """A claim as it came out: verdict ("holds", "does not hold", "not run", or for a comparison
    without a direction what the interval shows), the sentence saying why, and its numbers."""

    name: str
    verdict: str
    text: str
    numbers: dict[str, Any]


def find(data: Sequence[RunData], arm: str, alpha: float) -> RunData | None:
    """The first run (plan order) of `arm` at `alpha` with at least one epoch."""
    return next((d for d in data if d.run.label == arm and abs(d.run.alpha - alpha) < 1e-9 and d.epochs), None)


def window(runs: Sequence[RunData], size: int = WINDOW) -> list[int]:
    """The last `size` epochs up to the latest epoch every run in `runs` has (fewer when they have fewer)."""
    end = min(d.last() for d in runs)
    return list(range(max(0, end - size + 1), end + 1))


def span(epochs: Sequence[int]) -> str:
    return f"epoch {epochs[0]}" if len(epochs) == 1 else f"epochs {epochs[0]}-{epochs[-1]}"


def prompt_windows(epochs: Sequence[int]) -> list[list[int]]:
    """The first epoch alone (no simulator update yet), then the others by blocks of WINDOW
    (epoch // WINDOW: 1-3, 4-7, 8-11 for WINDOW 4)."""
    if not epochs:
        return []
    blocks: dict[int, list[int]] = {}
    for e in epochs[1:]:
        blocks.setdefault(e // WINDOW, []).append(e)
    return [[epochs[0]]] + list(blocks.values())


def describe(diff: Difference | None, what: str, a: str, b: str) -> str:
    """'in-band share: genenv 0.310 (n=192) - random 0.250 (n=192) = +0.060 [-0.030, +0.150]'."""
    if diff is None:
        return f"{what}: no tasks"
    return (f"{what}: {a} {diff.mean_a:.3f} (n={diff.n_a}) - {b} {diff.mean_b:.3f} (n={diff.n_b}) = {diff.fmt()}")


def direction(diff: Difference | None, a: str, b: str, word: str = "higher") -> str:
    """What the interval shows: '<a> <word>' (above 0), '<b> <word>' (below) or 'no difference resolved'."""
    if diff is None:
        return "no tasks"
    return {1: f"{a} {word}", -1: f"{b} {word}", 0: "no difference resolved"}[diff.sign]


def _numbers(diff: Difference | None) -> dict[str, Any] | None:
    return None if diff is None else {**dataclasses.asdict(diff), "difference": diff.value}


def not_run(name: str, missing: Sequence[str]) -> Decided:
    return Decided(name, "not run", f"No data for {', '.join(missing)}.", {"missing": list(missing)})


def claim_alignment(data: Sequence[RunData], alpha: float) -> Decided:
    """Claim 1: genenv's in-band share over the last epochs is above random's (interval above 0)."""
    name = "Claim 1 (the simulator aims: more tasks in band than random)"
    g, r = find(data, "genenv", alpha), find(data, "random", alpha)
    if g is None or r is None:
        return not_run(name, [f"{a}-a{alpha:g}" for a, d in (("genenv", g), ("random", r)) if d is None])
    epochs = window([g, r])
    band = bootstrap_difference(g.in_band(epochs), r.in_band(epochs))
    ga, ra = g.gaps(epochs), r.gaps(epochs)
    gap = None if ga is None or ra is None else bootstrap_difference(ga, ra)
    verdict = "no data" if band is None else "holds" if band.sign > 0 else "does not hold"
    text = (f"alpha {alpha:g}, {span(epochs)}: {describe(band, 'in-band share', 'genenv', 'random')}"
            f" ({direction(band, 'genenv', 'random')}); {describe(gap, 'mean |p_hat - alpha|', 'genenv', 'random')}"
            f" ({direction(gap, 'random', 'genenv', 'closer to alpha')}). Holds when the in-band interval lies above 0.")
    return Decided(name, verdict, text, {"epochs": epochs, "in_band": _numbers(band), "gap": _numbers(gap)})


def claim_alpha(data: Sequence[RunData], levels: Sequence[str], main_alpha: float) -> Decided:
    """Claim 3: the mean level of accepted tasks at the lower sweep alpha is above the higher one's."""
    name = "Claim 3 (alpha sets difficulty: lower alpha, higher level)"
    low, high = (find(data, "genenv", a) for a in SWEEP)
    if low is None or high is None:
        return not_run(name, [f"genenv-a{a:g}" for a, d in zip(SWEEP, (low, high)) if d is None])
    epochs = window([low, high])
    diff = bootstrap_difference(low.levels(epochs, levels), high.levels(epochs, levels))
    main = find(data, "genenv", main_alpha)
    context = "" if main is None else (
        f" For reference, alpha {main_alpha:g} over the same epochs: mean level "
        f"{main.levels(epochs, levels).mean():.3f} (n={len(main.levels(epochs, levels))}).")
    a, b = (f"alpha {x:g}" for x in SWEEP)
    verdict = "no data" if diff is None else "holds" if diff.sign > 0 else "does not hold"
    text = (f"{span(epochs)}: {describe(diff, 'mean level of accepted tasks', a, b)} ({direction(diff, a, b)})."
            f"{context} Holds when the interval lies above 0.")
    return Decided(name, verdict, text, {"epochs": epochs, "level": _numbers(diff)})


def heldout_epochs(workdir: Path) -> list[int]:
    """The epochs (-1: the start) whose held-out items a run wrote."""
    directory = workdir / HELDOUT_DIR
    found = [-1] if (directory / heldout_items_file(-1)).is_file() else []
    return found + sorted(int(p.stem.split("_")[1]) for p in directory.glob("epoch_*.jsonl"))


def claim_heldout(data: Sequence[RunData], alpha: float) -> Decided:
    """Claim 2: at the latest epoch all three arms were evaluated at, genenv > random > static with
    each step a significant paired difference (exact McNemar p < 0.05)."""
    name = "Claim 2 (held-out accuracy: genenv > random > static)"
    found = {a: find(data, a, alpha) for a in HELD_OUT_ARMS}
    missing = [f"{a}-a{alpha:g}" for a, d in found.items() if d is None]
    if missing:
        return not_run(name, missing)
    common = set.intersection(*(set(heldout_epochs(d.run.workdir)) - {-1} for d in found.values()))
    if not common:
        return not_run(name, ["held-out items after an epoch"])
    end = max(common)
    items = {a: heldout_items(d.run.workdir, end) for a, d in found.items()}
    acc = {a: accuracy(it) for a, it in items.items()}
    tests = {(a, b): mcnemar(items[a], items[b]) for a, b in (("genenv", "random"), ("random", "static"),
                                                              ("genenv", "static"))}
    holds = all(acc[a].value > acc[b].value and tests[a, b]["p"] < 0.05
                for a, b in (("genenv", "random"), ("random", "static")))
    text = (f"after epoch {end}: " + "; ".join(f"{a} {acc[a].fmt()}" for a in HELD_OUT_ARMS) + " (Wilson 95%). "
            + "; ".join(f"{a} vs {b}: only {a} solves {t['only_first']}, only {b} {t['only_second']} of "
                        f"{t['n_items']} items, exact McNemar p = {t['p']:.3g}" for (a, b), t in tests.items())
            + ". Holds when genenv > random > static with each step significant at 5%.")
    numbers = {"epoch": end, "accuracy": {a: {"k": p.k, "n": p.n, "interval": p.interval()} for a, p in acc.items()},
               "mcnemar": {f"{a} vs {b}": t for (a, b), t in tests.items()}}
    return Decided(name, "holds" if holds else "does not hold", text, numbers)


def claim_objectives(data: Sequence[RunData], levels: Sequence[str], alpha: float) -> list[Decided]:
    """Claim 4 and the blind arms: each pair of OBJECTIVES on in-band share and mean level (no
    direction expected: the verdict says which side the intervals show higher)."""
    out = []
    for a, b in OBJECTIVES:
        name = f"{'Claim 4 (RWR against GRPO)' if b == 'genenv_grpo' else 'Blind against informed'}: {a} vs {b}"
        da, db = find(data, a, alpha), find(data, b, alpha)
        if da is None or db is None:
            out.append(not_run(name, [f"{x}-a{alpha:g}" for x, d in ((a, da), (b, db)) if d is None]))
            continue
        epochs = window([da, db])
        band = bootstrap_difference(da.in_band(epochs), db.in_band(epochs))
        level = bootstrap_difference(da.levels(epochs, levels), db.levels(epochs, levels))
        verdict = f"in-band: {direction(band, a, b)}; level: {direction(level, a, b)}"
        text = (f"alpha {alpha:g}, {span(epochs)}: {describe(band, 'in-band share', a, b)}; "
                f"{describe(level, 'mean level of accepted tasks', a, b)}.")
        out.append(Decided(name, verdict, text, {"epochs": epochs, "in_band": _numbers(band),
                                                 "level": _numbers(level)}))
    return out


def decide(study: Study, data: Sequence[RunData]) -> list[Decided]:
    """Every claim, in the report's order (1, 3, 2, then the objective comparisons)."""
    return [claim_alignment(data, study.alpha), claim_alpha(data, study.levels, study.alpha),
            claim_heldout(data, study.alpha), *claim_objectives(data, study.levels, study.alpha)]


def moved(run: RunData, levels: Sequence[str]) -> dict[str, Any] | None:
    """Whether a run's tasks moved: its last WINDOW epochs against its first WINDOW (in-band share
    and mean level, last minus first, bootstrap over tasks); None with fewer than 2 x WINDOW epochs."""
    epochs = sorted(run.epochs)
    if len(epochs) < 2 * WINDOW:
        return None
    first, last = epochs[:WINDOW], epochs[-WINDOW:]
    return {"first": first, "last": last,
            "in_band": bootstrap_difference(run.in_band(last), run.in_band(first)),
            "level": bootstrap_difference(run.levels(last, levels), run.levels(first, levels))}


BOOTSTRAP_NOTE = (f"Intervals: 95% percentile bootstrap, {REPLICATES} resamples of each arm's tasks with "
                  "replacement (fixed seed); held-out: Wilson 95% per arm, exact two-sided McNemar on paired items.")

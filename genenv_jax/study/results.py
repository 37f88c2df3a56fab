"""Study results: the runs' own metrics.jsonl files read into mean ± std statistics and claims.

`load_study(study_dir)` reads <study_dir>/study.json and each run's metrics.jsonl (the warm-start
row, epoch -1, is skipped); `summarize` and `claims` compute every number the report shows. Every
number is a mean ± std (ddof=0) over the seeds with data; a run with a missing or short metrics
file is listed as incomplete and contributes what it has. "Last epoch" is the latest epoch every
compared group (mode, or alpha) has data for.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any, Callable, Sequence


import numpy as np

from genenv_jax.core.errors import read_json_object
from genenv_jax.workdir.metrics import METRICS_FILE, read_metrics

MODES = ("genenv", "random", "static")
VERDICT = {True: "holds", False: "does not hold", None: "no data"}


@dataclasses.dataclass
class Run:
    """One run of the study: its spec from study.json and its metrics rows (epoch >= 0)."""
    name: str
    mode: str
    alpha: float
    seed: int
    workdir: Path
    rows: dict[int, dict]
    expected_epochs: int | None
    arm: str = ""  # the arm's name (the mode unless the study names variants of a mode)
    start: dict | None = None  # the epoch -1 row: after any warm-start, before epoch 0

    @property
    def label(self) -> str:
        return self.arm or self.mode

    @property
    def complete(self) -> bool:
        """True when the run has a row for every epoch of the study (any row if epochs is unknown)."""
        return bool(self.rows) and all(e in self.rows for e in range(self.expected_epochs or 0))

    def status(self) -> str:
        """'complete', or why the run is incomplete."""
        if not self.rows:
            found = (self.workdir / METRICS_FILE).exists()
            return f"incomplete: {'no completed epoch' if found else 'no metrics.jsonl'} (skipped)"
        return "complete" if self.complete else f"incomplete: {len(self.rows)} of {self.expected_epochs} epochs"


@dataclasses.dataclass
class Study:
    """A study directory: study.json's settings and its runs."""
    directory: Path
    alpha: float
    levels: list[str]
    spec: dict  # study.json as read (command, scale, ...)
    runs: list[Run]


@dataclasses.dataclass(frozen=True)
class Stat:
    """Mean and std (ddof=0) over the seeds with data, and how many seeds (n) that is."""
    mean: float | None
    std: float | None
    n: int

    @staticmethod
    def of(values: Sequence[float | None]) -> Stat:
        """The Stat of `values`, None / NaN skipped."""
        xs = [float(v) for v in values if v is not None and math.isfinite(v)]
        return Stat(float(np.mean(xs)), float(np.std(xs, ddof=0)), len(xs)) if xs else Stat(None, None, 0)

    def fmt(self, total: int | None = None, digits: int = 2) -> str:
        """'0.41 ± 0.05' ('-' without data; ' (n=k)' when fewer than `total` seeds; the mean alone when
        `total` is one seed, whose std of 0 would only look like a measured spread)."""
        if self.mean is None:
            return "-"
        n = f" (n={self.n})" if total is not None and self.n < total else ""
        return f"{self.mean:.{digits}f}" if total == 1 else f"{self.mean:.{digits}f} ± {self.std:.{digits}f}{n}"


@dataclasses.dataclass(frozen=True)
class Claim:
    """A claim as measured: holds is None when the data to decide it is missing."""
    name: str
    holds: bool | None
    text: str


def _num(value: Any) -> float | None:
    """`value` as a finite float (None for missing, bool, NaN, strings)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def level_number(level: str, index: int) -> int:
    """The integer after 'level_' in `level` (its 1-based position otherwise)."""
    match = re.search(r"level_(\d+)", level)
    return int(match.group(1)) if match else index + 1


def load_study(study_dir: str | Path) -> Study:
    """Reads study.json and every run's metrics.jsonl; FileNotFoundError without study.json, a
    one-line ValueError naming study.json (and the key) when it is not a study's record."""
    directory = Path(study_dir)
    path = directory / "study.json"
    if not path.is_file():
        raise FileNotFoundError(f"no study.json in {directory}")
    spec = read_json_object(path)
    try:
        alpha = float(spec["alpha"])
        epochs = None if spec.get("epochs") is None else int(spec["epochs"])
        entries = [(r["name"], r["mode"], float(r["alpha"]), int(r.get("seed", 0)), directory / r["workdir"],
                    r.get("arm") or r["mode"]) for r in spec.get("runs", [])]
    except KeyError as e:
        raise ValueError(f"{path}: missing key {e.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as e:  # a value of the wrong type; a run that is not an object
        raise ValueError(f"{path}: not a study's record ({type(e).__name__}: {e})") from None
    runs = []
    for name, mode, run_alpha, seed, workdir, arm in entries:
        every = {row["epoch"]: row for row in read_metrics(workdir / METRICS_FILE)}
        rows = {e: row for e, row in every.items() if e >= 0}
        runs.append(Run(name, mode, run_alpha, seed, workdir, rows, epochs, arm, every.get(-1)))
    levels = list(spec.get("levels") or sorted({k.split("/")[1] for r in runs for row in r.rows.values()
                                                for k in row if re.fullmatch(r"category/[^/]+/generated", k)}))
    return Study(directory, alpha, levels, spec, runs)


Metric = Callable[[Run, dict], float | None]


def key_metric(key: str) -> Metric:
    """The metric reading `key` from a row."""
    return lambda run, row: _num(row.get(key))


def gap_metric(run: Run, row: dict) -> float | None:
    """|p_hat - alpha| of a row (the run's own alpha)."""
    p = _num(row.get("p_hat_mean"))
    return None if p is None else abs(p - run.alpha)


def level_shares(levels: Sequence[str], row: dict) -> list[float] | None:
    """The share of the row's generated tasks per level (None when it generated none)."""
    counts = [_num(row.get(f"category/{lv}/generated")) or 0.0 for lv in levels]
    return [c / sum(counts) for c in counts] if sum(counts) > 0 else None


def level_metric(levels: Sequence[str]) -> Metric:
    """The metric: count-weighted mean generated level number of a row."""
    numbers = [level_number(lv, i) for i, lv in enumerate(levels)]
    return lambda run, row: None if (s := level_shares(levels, row)) is None else float(np.dot(s, numbers))


def share_stats(runs: Sequence[Run], epoch: int | None, levels: Sequence[str]) -> dict[str, Stat]:
    """Per level, the Stat over `runs` of the share of generated tasks at that level at `epoch`."""
    shares = [s for r in runs if epoch in r.rows and (s := level_shares(levels, r.rows[epoch])) is not None]
    return {lv: Stat.of([s[i] for s in shares]) for i, lv in enumerate(levels)}


def at_epoch(runs: Sequence[Run], epoch: int | None, metric: Metric) -> Stat:
    """The Stat over `runs` of `metric` at `epoch`."""
    return Stat.of([metric(r, r.rows[epoch]) for r in runs if epoch is not None and epoch in r.rows])


def total(runs: Sequence[Run], key: str) -> Stat:
    """The Stat over the complete `runs` of the sum over epochs of `key` (a partial sum would mislead)."""
    values = [[x for row in r.rows.values() if (x := _num(row.get(key))) is not None] for r in runs if r.complete]
    return Stat.of([sum(v) if v else None for v in values])


def groups(study: Study) -> tuple[dict[str, list[Run]], dict[float, list[Run]]]:
    """The mode comparison (runs at the main alpha, by mode) and the sweep (genenv runs by alpha)."""
    main = [r for r in study.runs if abs(r.alpha - study.alpha) < 1e-9]
    genenv = [r for r in study.runs if r.label == "genenv"]
    arms = sorted(sorted({r.label for r in main}), key=lambda m: (*MODES, m).index(m))  # genenv, random, static, ...
    return ({m: [r for r in main if r.label == m] for m in arms},
            {a: [r for r in genenv if r.alpha == a] for a in sorted({r.alpha for r in genenv})})


def last_epoch(groups: dict[Any, list[Run]]) -> int | None:
    """The latest epoch every group with data has a row for (None without data)."""
    ends = [max(e for r in runs for e in r.rows) for runs in groups.values() if any(r.rows for r in runs)]
    return min(ends) if ends else None


def summarize(study: Study) -> dict:
    """Every number the tables, plots and claims use (Stats keyed by mode / alpha and metric)."""
    levels = study.levels
    modes, sweep = groups(study)
    last_m, last_s = last_epoch(modes), last_epoch(sweep)
    curves = {"p_hat": key_metric("p_hat_mean"), "gap": gap_metric,
              "in_band": key_metric("in_band_fraction"), "heldout": key_metric("heldout/accuracy")}
    out: dict = {"last_epoch": {"modes": last_m, "sweep": last_s}, "modes": {}, "sweep": {}}

    def per_level(runs: list[Run], key: str) -> dict[str, Stat]:
        """Per level, the Stat of `key` (a format with the level) at the last epoch."""
        return {lv: at_epoch(runs, last_m, key_metric(key.format(lv))) for lv in levels}

    for mode, runs in modes.items():
        epochs = sorted({e for r in runs for e in r.rows})
        out["modes"][mode] = {
            "n_runs": len(runs), "n_complete": sum(r.complete for r in runs),
            "per_epoch": {e: {k: at_epoch(runs, e, m) for k, m in curves.items()} for e in epochs},
            "final": {
                "heldout": at_epoch(runs, last_m, curves["heldout"]),
                "heldout_levels": per_level(runs, "heldout/{}"),
                "gap_first": at_epoch(runs, 0, gap_metric), "gap_last": at_epoch(runs, last_m, gap_metric),
                "in_band_last": at_epoch(runs, last_m, curves["in_band"]),
                "agent_episodes": total(runs, "agent/episodes"), "agent_steps": total(runs, "agent/steps"),
                "share_first": share_stats(runs, 0, levels), "share_last": share_stats(runs, last_m, levels),
                "success_last": per_level(runs, "category/{}/success")}}
    for alpha, runs in sweep.items():
        epochs = sorted({e for r in runs for e in r.rows})
        out["sweep"][alpha] = {
            "n_runs": len(runs), "n_complete": sum(r.complete for r in runs),
            "level_per_epoch": {e: at_epoch(runs, e, level_metric(levels)) for e in epochs},
            "level_first": at_epoch(runs, 0, level_metric(levels)),
            "level_last": at_epoch(runs, last_s, level_metric(levels)),
            "p_hat_last": at_epoch(runs, last_s, curves["p_hat"]),
            "in_band_last": at_epoch(runs, last_s, curves["in_band"]),
            "share_last": share_stats(runs, last_s, levels)}
    return out


def _paired_items(study: Study, epoch: int | None) -> dict[str, dict] | None:
    """{mode: held-out items at `epoch`} of the single run of each mode, or None when any is missing."""
    from genenv_jax.study.details import heldout_items

    if epoch is None:
        return None
    main = groups(study)[0]
    items = {m: heldout_items(main[m][0].workdir, epoch) for m in MODES if len(main.get(m, [])) == 1}
    return items if len(items) == len(MODES) and all(v for v in items.values()) else None


def claims(study: Study, summary: dict | None = None) -> list[Claim]:
    """The three claims, each decided from the measured numbers (None when data is missing)."""
    s = summary or summarize(study)
    last_m, last_s, none = s["last_epoch"]["modes"], s["last_epoch"]["sweep"], Stat(None, None, 0)
    fin = {m: v["final"] for m, v in s["modes"].items()}

    def ratio(mode: str) -> tuple[float | None, str]:
        """Last-epoch / epoch-0 mean |p_hat - alpha| of `mode`, and the text saying so."""
        first, last = (fin.get(mode, {}).get(k, none) for k in ("gap_first", "gap_last"))
        if first.mean is None or last.mean is None:
            return None, f"{mode}: no data"
        r = last.mean / first.mean if first.mean > 0 else (0.0 if last.mean == 0 else math.inf)
        n = s["modes"][mode]["n_runs"]
        return r, f"{mode}: {first.fmt(n)} at epoch 0 -> {last.fmt(n)} at epoch {last_m}, ratio {r:.2f}"

    r1, t1 = ratio("genenv")
    gaps = {m: fin.get(m, {}).get("gap_last", none).mean for m in ("genenv", "random")}
    # The simulator must be what aligns p_hat: random's tasks come from the same agent, so a p_hat that
    # random's run moves as close to alpha is the agent's training, not the simulator's.
    beats_random = gaps["random"] is None or (gaps["genenv"] is not None and gaps["genenv"] < gaps["random"])
    h1 = None if r1 is None else r1 <= 0.5 and beats_random
    t1 = (f"|p_hat - alpha| (alpha={study.alpha:g}) {t1} (needs <= 0.50, and a last-epoch gap below random's); "
          f"for contrast, {ratio('random')[1]}.")
    acc = {m: fin.get(m, {}).get("heldout", none) for m in MODES}
    paired = _paired_items(study, last_m) if all(acc[m].n == 1 for m in MODES) else None
    if any(acc[m].mean is None for m in MODES):
        h2, t2 = None, "held-out accuracy missing for " + ", ".join(m for m in MODES if acc[m].mean is None)
    elif paired is not None:  # one seed per mode: each step of the ordering must be a significant paired difference
        from genenv_jax.study.details import mcnemar

        tests = {p: mcnemar(paired[p[0]], paired[p[1]]) for p in (("genenv", "random"), ("random", "static"))}
        h2 = all(acc[a].mean > acc[b].mean and tests[a, b]["p"] < 0.05 for a, b in tests)
        t2 = (f"epoch {last_m} held-out accuracy (one seed each, {tests['genenv', 'random']['n_items']} items): "
              + ", ".join(f"{m} {acc[m].mean:.3f}" for m in MODES) + "; "
              + "; ".join(f"{a} - {b} = {acc[a].mean - acc[b].mean:+.3f} (items only {a} solves "
                          f"{t['only_first']}, only {b} {t['only_second']}; exact McNemar p = {t['p']:.3g})"
                          for (a, b), t in tests.items())
              + " (needs genenv > random > static, each difference significant at 5% by the paired test)")
    else:
        ranked = sorted(MODES, key=lambda m: -acc[m].mean)
        order = ranked[0] + "".join(f" {'=' if acc[a].mean == acc[b].mean else '>'} {b}"
                                    for a, b in zip(ranked, ranked[1:]))
        pairs = (("genenv", "random"), ("random", "static"))
        clear = {p: acc[p[0]].mean - acc[p[1]].mean > max(acc[p[0]].std, acc[p[1]].std) for p in pairs}
        h2 = all(clear.values())  # each step of the ordering larger than the seed-to-seed spread
        diffs = [f"{a} - {b} = {acc[a].mean - acc[b].mean:+.3f} ("
                 + ("exceeds" if abs(acc[a].mean - acc[b].mean) > max(acc[a].std, acc[b].std) else "within")
                 + " the larger seed std)" for a, b in pairs]
        t2 = (f"epoch {last_m} held-out accuracy: " + ", ".join(f"{m} {acc[m].fmt(s['modes'][m]['n_runs'])}"
                                                                for m in MODES)
              + f"; observed ordering {order}; " + "; ".join(diffs))
    if paired is None:
        t2 += " (needs genenv > random > static, each difference larger than the larger seed std)"
    t2 += "."
    levels = [(a, v["level_last"].mean) for a, v in s["sweep"].items() if v["level_last"].mean is not None]
    h3 = None if len(levels) < 2 else all(x > y for (_, x), (_, y) in zip(levels, levels[1:]))
    shown = ", ".join(f"alpha={a:g}: {x:.2f}" for a, x in levels) or "no data"
    t3 = f"epoch {last_s} mean generated level by alpha: {shown} (needs a strict decrease over >= 2 alphas)."
    return [Claim("Claim 1 (difficulty alignment)", h1, t1), Claim("Claim 2 (data efficiency)", h2, t2),
            Claim("Claim 3 (alpha controls difficulty)", h3, t3)]

"""What one run of a study did each epoch, per task: the simulator's output (generated, parsed,
accepted, the level of every accepted task), the agent's scores of the tasks it rolled out (p_hat,
|p_hat - alpha|, in band, R_env) and the simulator's update.

Read from the run's own files only: metrics.jsonl (counters and update statistics) and its D_env
pool (`pools/d_env`, one record per scored task: `loop.records.d_env_records`). Where an epoch has
no pool shard the scores fall back to the metrics row's means and counts, and say so (`source`).
Levels are numbers (`results.level_number`: "level_3" -> 3); rates are shares in [0, 1].
"""

from __future__ import annotations

import collections
import dataclasses
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from genenv_jax.study.results import Run, _num, level_number

# calc's rejections that mean the generation could not be read as a task at all (domains/calc/
# expressions.py REJECTION_REASONS); the others read a task and refused it (copy, out of range, ...).
PARSE_REASONS = ("too_large", "no_question", "no_functions", "bad_expression", "too_deep")

# The simulator's update statistics an epoch's metrics may hold (RWR: loss, weights; GRPO: pg_loss,
# groups), in table order; a mode that does not train the simulator has none of them.
SIMULATOR_KEYS = ("steps", "tasks", "loss", "pg_loss", "kl", "weight_min", "weight_max", "groups",
                  "groups_constant", "invalid_share", "reward_mean", "skipped")


@dataclasses.dataclass(frozen=True)
class TaskScores:
    """The scored tasks of one epoch: per task (same order in each array) in_band (0/1), p_hat,
    r_env, level number, asked direction, seed level, seed id and whether the seed had been scored
    before; `source` is "pool" (per-task D_env records) or "metrics" (in_band rebuilt from the row's
    in_band_fraction and count; p_hat / r_env / levels then unknown)."""

    in_band: np.ndarray
    p_hat: np.ndarray | None
    r_env: np.ndarray | None
    levels: np.ndarray | None
    source: str
    asked: tuple[str, ...] = ()  # pool: the direction the simulator's prompt asked ("harder", "similar", ...)
    seed_ids: tuple[str, ...] = ()  # pool: the seed each task varies
    # pool: whether the seed's variants were scored in an earlier epoch, so that a prompt showing the
    # agent's results stated a measured success rate for it (`seed_measured`; None: unknown)
    seed_measured: np.ndarray | None = None

    @property
    def seed_levels(self) -> np.ndarray | None:
        """pool: the level of the seed each task varies, read from its id (0: unknown); else None."""
        return np.asarray([seed_level(i) for i in self.seed_ids], np.int64) if self.source == "pool" else None


@dataclasses.dataclass(frozen=True)
class EpochStats:
    """One epoch of one run. generated / parsed are None for a mode that does not generate (static
    draws its tasks from a set generated once); level_counts are the accepted (static: drawn) tasks
    per level, in the study's level order; the score means are over the scored tasks (None: none)."""

    epoch: int
    generated: int | None
    parsed: int | None
    accepted: int
    topped_up: int  # train seeds the loop added for a shortfall of accepted tasks (rolled out, not scored)
    level_counts: tuple[int, ...]
    scored: int
    p_hat: float | None
    gap: float | None
    in_band: float | None
    r_env: float | None
    source: str | None

    @property
    def parse_rate(self) -> float | None:
        return self.parsed / self.generated if self.generated else None

    @property
    def accept_rate(self) -> float | None:
        return self.accepted / self.generated if self.generated else None

    def mean_level(self, numbers: Sequence[int]) -> float | None:
        """The mean level number of the accepted tasks (`numbers`: each level's number)."""
        total = sum(self.level_counts)
        return float(np.dot(self.level_counts, numbers)) / total if total else None


def level_numbers(levels: Sequence[str]) -> list[int]:
    """Each level's number, in order."""
    return [level_number(lv, i) for i, lv in enumerate(levels)]


def accepted_levels(row: Mapping[str, Any], levels: Sequence[str]) -> np.ndarray:
    """One level number per accepted task of a metrics row (from its category/<level>/generated counts)."""
    counts = [int(_num(row.get(f"category/{lv}/generated")) or 0) for lv in levels]
    return np.repeat(np.asarray(level_numbers(levels), np.int64), counts)


def seed_level(seed_id: str) -> int:
    """The level of a calc seed from its id ("calc/train/L3/012" -> 3; 0 when the id has none)."""
    match = re.search(r"/L(\d+)/", seed_id)
    return int(match.group(1)) if match else 0


def d_env_records(workdir: Path) -> dict[int, list[dict]]:
    """{epoch: D_env records} of a run ({} without a readable pool)."""
    from genenv_jax.workdir.pools import Pool

    if not (workdir / "pools" / "d_env").is_dir():
        return {}
    pool = Pool(workdir / "pools", "d_env", writable=False)
    if pool.problem is not None:
        return {}
    return {e: pool.records([e]) for e in pool.epochs}


def task_scores(row: Mapping[str, Any], records: Sequence[dict] | None, levels: Sequence[str]) -> TaskScores | None:
    """The scored tasks of an epoch: from its D_env records when there are any, else rebuilt from
    the metrics row (scored = tasks - new_tasks_unused, in band = round(in_band_fraction x scored));
    None when neither says."""
    if records:
        number = dict(zip(levels, level_numbers(levels)))
        return TaskScores(np.asarray([float(bool(r["in_band"])) for r in records]),
                          np.asarray([float(r["p_hat"]) for r in records]),
                          np.asarray([float(r["r_env"]) for r in records]),
                          np.asarray([number.get(r["task"].get("category"), 0) for r in records], np.int64), "pool",
                          tuple(str(r.get("difficulty")) for r in records),
                          tuple(str(r.get("seed_id")) for r in records))
    share, tasks = _num(row.get("in_band_fraction")), _num(row.get("tasks"))
    if share is None or not tasks:
        return None
    scored = int(tasks) - int(_num(row.get("new_tasks_unused")) or 0)
    k = int(round(share * scored))
    return TaskScores(np.asarray([1.0] * k + [0.0] * (scored - k)), None, None, None, "metrics")


def epoch_stats(run: Run, epoch: int, levels: Sequence[str], scores: TaskScores | None) -> EpochStats:
    """The EpochStats of `run` at `epoch` from its metrics row and that epoch's `task_scores`."""
    row = run.rows[epoch]
    generated = None if row.get("generated") is None else int(row["generated"])
    parsed = None if generated is None else generated - sum(int(row.get(f"rejected/{r}", 0)) for r in PARSE_REASONS)
    counts = tuple(int(_num(row.get(f"category/{lv}/generated")) or 0) for lv in levels)

    def mean(values: np.ndarray | None, key: str | None = None) -> float | None:
        if scores is not None and scores.source == "pool":
            return float(np.mean(values)) if values is not None and len(values) else None
        return None if key is None else _num(row.get(key))

    gap = None if scores is None or scores.p_hat is None else np.abs(scores.p_hat - run.alpha)
    return EpochStats(epoch, generated, parsed, int(_num(row.get("tasks")) or 0),
                      int(_num(row.get("topped_up_tasks")) or 0), counts,
                      0 if scores is None else len(scores.in_band),
                      mean(None if scores is None else scores.p_hat, "p_hat_mean"), mean(gap),
                      mean(None if scores is None else scores.in_band, "in_band_fraction"),
                      mean(None if scores is None else scores.r_env, "r_env_mean"),
                      None if scores is None else scores.source)


@dataclasses.dataclass(frozen=True)
class RunData:
    """A run with its EpochStats and TaskScores by epoch (every epoch it has a metrics row for)."""

    run: Run
    epochs: dict[int, EpochStats]
    scores: dict[int, TaskScores]

    def last(self) -> int | None:
        return max(self.epochs) if self.epochs else None

    def in_band(self, epochs: Sequence[int]) -> np.ndarray:
        """The 0/1 in-band indicator of every scored task of `epochs`."""
        return np.concatenate([np.zeros(0)] + [self.scores[e].in_band for e in epochs if e in self.scores])

    def gaps(self, epochs: Sequence[int]) -> np.ndarray | None:
        """|p_hat - alpha| of every scored task of `epochs` (None when an epoch has no D_env records)."""
        chosen = [self.scores[e] for e in epochs if e in self.scores]
        if not chosen or any(s.p_hat is None for s in chosen):
            return None
        return np.abs(np.concatenate([s.p_hat for s in chosen]) - self.run.alpha)

    def levels(self, epochs: Sequence[int], levels: Sequence[str]) -> np.ndarray:
        """The level number of every accepted task of `epochs`."""
        return np.concatenate([np.zeros(0, np.int64)]
                              + [accepted_levels(self.run.rows[e], levels) for e in epochs if e in self.run.rows])


    def shifts(self, epochs: Sequence[int], measured: bool | None = None) -> dict[str, np.ndarray]:
        """{asked direction: level minus seed level of each scored task of `epochs` whose seed level
        is known}, directions sorted: does the simulator write what its prompt asks for? With
        `measured` True (False), only the tasks whose seed had (had not) been scored before."""
        out: dict[str, list[float]] = collections.defaultdict(list)
        for s in (self.scores[e] for e in epochs if e in self.scores):
            if s.levels is None or s.seed_levels is None or (measured is not None and s.seed_measured is None):
                continue
            keep = np.ones(len(s.levels), bool) if measured is None else s.seed_measured == measured
            for asked, level, seed, kept in zip(s.asked, s.levels, s.seed_levels, keep):
                if level and seed and kept:
                    out[asked].append(float(level - seed))
        return {k: np.asarray(v) for k, v in sorted(out.items())}


def with_seed_measured(scores: Mapping[int, TaskScores]) -> dict[int, TaskScores]:
    """`scores` with each pool epoch's `seed_measured`: whether the task's seed had variants scored in
    an earlier epoch. The loop keeps each seed's recent success from its scored variants
    (`loop/coevolution.py`, `_update_seed_stats`), so this is whether a simulator prompt that shows
    the agent's results stated a rate for the seed, or that it was not measured yet. (The loop also
    counts a topped-up seed's own rollouts, which D_env does not hold; the calc study topped up none.)
    An epoch from the first one without records on (or after a missing epoch) is left unknown (None)."""
    seen: set[str] = set()
    out, known = {}, True
    for expected, e in enumerate(sorted(scores)):
        s = scores[e]
        known = known and e == expected and s.source == "pool"
        out[e] = dataclasses.replace(s, seed_measured=np.asarray([i in seen for i in s.seed_ids], bool)) if known else s
        seen |= set(s.seed_ids)
    return out


def run_data(run: Run, levels: Sequence[str]) -> RunData:
    """`run`'s RunData, read from its metrics rows and D_env pool."""
    records = d_env_records(run.workdir)
    scores = with_seed_measured({e: s for e in sorted(run.rows)
                                 if (s := task_scores(run.rows[e], records.get(e), levels)) is not None})
    return RunData(run, {e: epoch_stats(run, e, levels, scores.get(e)) for e in sorted(run.rows)}, scores)


def simulator_update(row: Mapping[str, Any]) -> dict[str, Any]:
    """The simulator update statistics of a metrics row ({} when the run did not train it): every
    SIMULATOR_KEYS entry present, numbers as floats, `skipped` the loop's reason string."""
    out = {k: row[f"simulator/{k}"] for k in SIMULATOR_KEYS if row.get(f"simulator/{k}") is not None}
    return {k: v if isinstance(v, str) else float(v) for k, v in out.items()}

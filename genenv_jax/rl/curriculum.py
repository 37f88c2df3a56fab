"""Curriculum signals: GenEnv's alpha reward R_env, the difficulty band, the difficulty direction asked
of the simulator, and DreamGym seed selection.

Pure numpy / Python functions of rollout records, so the loop can compute them on the host after
scoring and log or unit-test every number. The formulas (GenEnv and DreamGym papers):

  R_env(p_hat) = exp(-beta * (p_hat - alpha)^2)       (GenEnv, the simulator's reward)
  in band      <=> |p_hat - alpha| <= k_min            (only in-band tasks train the simulator)
  V_tau        = (1/n) * sum_i (r_i - mean r)^2        (DreamGym, seeds that are feasible but unsolved)
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from genenv_jax.core.config_checks import check_fields, setting

Granularity = Literal["variant", "seed_batch"]
GRANULARITIES: tuple[str, ...] = ("variant", "seed_batch")

# |p_hat - alpha| is compared with k_min up to this slack, so p_hat = k/n exactly on the band's edge
# (e.g. 0.4 with alpha 0.3, k_min 0.1) is in band despite float rounding.
BAND_TOLERANCE = 1e-9


def _check_alpha_beta(alpha: float, beta: float) -> None:
    if not (isinstance(alpha, numbers.Real) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha (target success rate) must lie in (0, 1), got {alpha!r}")
    if not (isinstance(beta, numbers.Real) and beta > 0.0 and math.isfinite(beta)):
        raise ValueError(f"beta (R_env sharpness) must be a finite number > 0, got {beta!r}")


def _as_success_rates(p_hat: Any) -> np.ndarray:
    p = np.asarray(p_hat, dtype=np.float64)
    if np.isnan(p).any():
        raise ValueError("p_hat contains NaN (a task with no rollouts?)")
    if ((p < 0.0) | (p > 1.0)).any():
        raise ValueError(f"p_hat must lie in [0, 1], got values in [{p.min()}, {p.max()}]")
    return p


def env_reward(p_hat: Any, alpha: float = 0.5, beta: float = 2.0) -> np.ndarray:
    """R_env = exp(-beta (p_hat - alpha)^2), elementwise; 1.0 at p_hat == alpha.

    Example: env_reward(0.0, alpha=0.5, beta=2.0) == exp(-0.5).
    """
    _check_alpha_beta(alpha, beta)
    p = _as_success_rates(p_hat)
    return np.exp(-beta * np.square(p - alpha))


def in_band(p_hat: Any, alpha: float = 0.5, k_min: float = 0.1) -> np.ndarray:
    """The difficulty filter: True where |p_hat - alpha| <= k_min (elementwise, boolean)."""
    _check_alpha_beta(alpha, 1.0)
    if not (isinstance(k_min, numbers.Real) and k_min >= 0.0):
        raise ValueError(f"k_min (band half-width) must be >= 0, got {k_min!r}")
    p = _as_success_rates(p_hat)
    return np.abs(p - alpha) <= k_min + BAND_TOLERANCE


def reward_variance(rewards: Any) -> float:
    """DreamGym's V = (1/n) sum_i (r_i - mean r)^2 (population variance) of one task's n rewards."""
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    if r.size == 0:
        raise ValueError("reward_variance of an empty reward list")
    if not np.isfinite(r).all():
        raise ValueError(f"rewards must be finite, got {r.tolist()}")
    return float(np.mean(np.square(r - r.mean())))


# ----------------------------------------------------------------------------------------------
# From rollout records to per-task curriculum scores.


def _alpha(value: float) -> str | None:
    """in (0, 1)"""
    return None if isinstance(value, numbers.Real) and 0.0 < value < 1.0 else "must lie in (0, 1)"


def _beta(value: float) -> str | None:
    """a finite number > 0"""
    return None if isinstance(value, numbers.Real) and math.isfinite(value) and value > 0 else \
        "must be a finite number > 0"


def _whole(value: int) -> str | None:
    """an int >= 0"""
    return None if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else "must be an int >= 0"


def _finite(value: float) -> str | None:
    """finite (None: off)"""
    return None if math.isfinite(value) else "must be finite or None"


@dataclasses.dataclass(frozen=True)
class CurriculumConfig:
    """Curriculum hyperparameters, the `curriculum` config section (defaults: the GenEnv paper's);
    each key declared with its doc and rule (`core.config_checks.setting`)."""

    alpha: float = setting(0.5, "the target success rate: R_env = exp(-beta (p_hat - alpha)^2)", check=_alpha)
    beta: float = setting(2.0, "R_env's sharpness", check=_beta)
    k_min: float = setting(0.1, "the band's half-width: tasks with |p_hat - alpha| <= k_min train the simulator; "
                                "where alpha - k_min <= 0 (alpha + k_min >= 1) the tasks the agent never (always) "
                                "solves are in band too", minimum=0)
    granularity: Granularity = setting("variant", "variant (p_hat over each generated task's own rollouts) | "
                                                  "seed_batch (pooled over every variant of a seed in the epoch: "
                                                  "they share its p_hat and weight)", choices=GRANULARITIES)
    success_threshold: float | None = setting(None, "None: p_hat is the mean reward (k/n for binary rewards); a "
                                                    "number: the share of rollouts with reward >= it (graded "
                                                    "rewards such as F1)", check=_finite)
    p_hat_samples: int = setting(0, "0: every rollout of a task counts toward p_hat; k > 0: only its first k (the "
                                    "GenEnv reference: 4 of GRPO's 8)", check=_whole)

    def __post_init__(self):
        check_fields(self)


@dataclasses.dataclass(frozen=True)
class TaskScore:
    """Curriculum numbers for one generated task (a variant)."""

    task_id: str
    seed_id: str
    num_rollouts: int       # this task's own rollouts
    task_success: float     # success rate over this task's own rollouts
    reward_variance: float  # V over this task's own rewards
    p_hat: float            # the estimate R_env uses (task's or its seed batch's, per granularity)
    r_env: float
    in_band: bool


def _field(record: Any, name: str) -> Any:
    if isinstance(record, Mapping):
        if name not in record:
            raise KeyError(f"rollout record has no {name!r} field (keys: {sorted(record)})")
        return record[name]
    if not hasattr(record, name):
        raise KeyError(f"rollout record {type(record).__name__} has no {name!r} attribute")
    return getattr(record, name)


def _rewards_of(record: Any) -> list[float]:
    """A record holds one rollout ('reward') or all of a task's rollouts ('rewards')."""
    has_list = ("rewards" in record) if isinstance(record, Mapping) else hasattr(record, "rewards")
    values = list(_field(record, "rewards")) if has_list else [_field(record, "reward")]
    out = []
    for v in values:
        v = float(v)
        if not math.isfinite(v):
            raise ValueError(f"non-finite reward {v} in record of task {_field(record, 'task_id')!r}")
        out.append(v)
    return out


def group_rewards(records: Iterable[Any], key: str = "task_id") -> dict[str, list[float]]:
    """Rewards grouped by a record field ('task_id' or 'seed_id'), in first-seen order."""
    groups: dict[str, list[float]] = {}
    for record in records:
        groups.setdefault(str(_field(record, key)), []).extend(_rewards_of(record))
    return groups


def success_rate(rewards: Sequence[float], success_threshold: float | None = None) -> float:
    """p_hat of one group: mean reward, or the fraction of rewards >= success_threshold."""
    r = np.asarray(rewards, dtype=np.float64)
    if r.size == 0:
        raise ValueError("success_rate of an empty reward list")
    if success_threshold is None:
        if ((r < 0.0) | (r > 1.0)).any():
            raise ValueError("rewards outside [0, 1] need a success_threshold to define success, "
                             f"got {r.tolist()}")
        return float(r.mean())
    return float(np.mean(r >= success_threshold))


def score_tasks(records: Iterable[Any], config: CurriculumConfig = CurriculumConfig()) -> list[TaskScore]:
    """p_hat, R_env and the band decision for every task in an epoch's rollout records.

    Each record (a mapping or an object) has `task_id`, `seed_id` (the parent seed) and either
    `reward` (one rollout) or `rewards` (the task's n rollouts). Tasks come out in first-seen order.
    """
    records = list(records)
    by_task = group_rewards(records, "task_id")
    if config.p_hat_samples:  # the estimate sees each task's first k rollouts only
        by_task = {t: r[:config.p_hat_samples] for t, r in by_task.items()}
    seed_of: dict[str, str] = {}
    for record in records:
        task_id, seed_id = str(_field(record, "task_id")), str(_field(record, "seed_id"))
        if seed_of.setdefault(task_id, seed_id) != seed_id:
            raise ValueError(f"task {task_id!r} appears with two parent seeds: {seed_of[task_id]!r}, {seed_id!r}")

    task_rate = {t: success_rate(r, config.success_threshold) for t, r in by_task.items()}
    if config.granularity == "seed_batch":
        if config.p_hat_samples:  # pooled from the kept rollouts
            by_seed: dict[str, list[float]] = {}
            for t, r in by_task.items():
                by_seed.setdefault(seed_of[t], []).extend(r)
        else:
            by_seed = group_rewards(records, "seed_id")
        seed_rate = {s: success_rate(r, config.success_threshold) for s, r in by_seed.items()}
        p_hat = {t: seed_rate[seed_of[t]] for t in by_task}
    else:
        p_hat = task_rate

    tasks = list(by_task)
    p = np.array([p_hat[t] for t in tasks], dtype=np.float64)
    r_env = env_reward(p, config.alpha, config.beta)
    band = in_band(p, config.alpha, config.k_min)
    return [TaskScore(task_id=t, seed_id=seed_of[t], num_rollouts=len(by_task[t]), task_success=task_rate[t],
                      reward_variance=reward_variance(by_task[t]), p_hat=float(p[i]), r_env=float(r_env[i]),
                      in_band=bool(band[i]))
            for i, t in enumerate(tasks)]


def seed_variances(records: Iterable[Any]) -> dict[str, float]:
    """V per parent seed over the rewards of all its variants' rollouts (input to select_seeds)."""
    return {seed: reward_variance(r) for seed, r in group_rewards(records, "seed_id").items()}


# ----------------------------------------------------------------------------------------------
# DreamGym-style seed selection.


@dataclasses.dataclass(frozen=True)
class SeedSelection:
    """Chosen seeds, and why each was chosen: 'variance', 'explore' or 'refill' (a repeat)."""

    seed_ids: tuple[str, ...]
    reasons: tuple[str, ...]

    def count(self, reason: str) -> int:
        return sum(r == reason for r in self.reasons)


def select_seeds(seed_ids: Sequence[str], variances: Mapping[str, float], num_seeds: int, *,
                 explore_fraction: float = 0.25, max_synthetic_fraction: float = 1.0,
                 synthetic: Collection[str] = (), min_variance: float = 0.0,
                 rng: np.random.Generator | int = 0) -> SeedSelection:
    """Picks `num_seeds` seeds: the highest reward variance first, plus a share of random ones.

    - round(explore_fraction * num_seeds) slots go to uniformly random seeds (exploration, and
      the only way unseen seeds get tried); the rest go to seeds with variance > min_variance in
      decreasing order (ties broken at random). Slots the variance ranking cannot fill are
      explored too.
    - At most floor(max_synthetic_fraction * num_seeds) of the picks are ids in `synthetic`
      (DreamGym's cap on the share of synthetic tasks per iteration).
    - Picks are distinct; if fewer eligible seeds exist than `num_seeds`, eligible seeds are
      repeated at random ('refill').
    Seeds missing from `variances` are unseen: only exploration picks them.
    """
    if num_seeds < 0:
        raise ValueError(f"num_seeds must be >= 0, got {num_seeds}")
    if not 0.0 <= explore_fraction <= 1.0:
        raise ValueError(f"explore_fraction must lie in [0, 1], got {explore_fraction}")
    if not 0.0 <= max_synthetic_fraction <= 1.0:
        raise ValueError(f"max_synthetic_fraction must lie in [0, 1], got {max_synthetic_fraction}")
    if len(set(seed_ids)) != len(seed_ids):
        raise ValueError("seed_ids contains duplicates")
    unknown = set(variances) - set(seed_ids)
    if unknown:
        raise ValueError(f"variances given for ids that are not candidate seeds: {sorted(unknown)[:5]}")
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    if num_seeds == 0:
        return SeedSelection((), ())

    synthetic = set(synthetic)
    synthetic_cap = math.floor(max_synthetic_fraction * num_seeds + 1e-9)
    eligible = [s for s in seed_ids if s not in synthetic] + ([s for s in seed_ids if s in synthetic]
                                                                if synthetic_cap > 0 else [])
    if not eligible:
        raise ValueError("no eligible seeds: every candidate is synthetic and max_synthetic_fraction "
                         f"allows {synthetic_cap} of {num_seeds}")

    chosen: list[str] = []
    reasons: list[str] = []
    num_synthetic = 0

    def take(seed: str, reason: str) -> bool:
        nonlocal num_synthetic
        if seed in chosen:
            return False
        if seed in synthetic:
            if num_synthetic >= synthetic_cap:
                return False
            num_synthetic += 1
        chosen.append(seed)
        reasons.append(reason)
        return True

    num_explore = round(explore_fraction * num_seeds)
    shuffled = [seed_ids[i] for i in rng.permutation(len(seed_ids))]
    by_variance = sorted((s for s in shuffled if s in variances and variances[s] > min_variance),
                         key=lambda s: -float(variances[s]))  # stable sort keeps the random tie order
    for seed in by_variance:
        if len(chosen) >= num_seeds - num_explore:
            break
        take(seed, "variance")
    for seed in shuffled:
        if len(chosen) >= num_seeds:
            break
        take(seed, "explore")
    # Fewer distinct eligible seeds than slots: repeat eligible ones (respecting the synthetic cap).
    while len(chosen) < num_seeds:
        pool = [s for s in eligible if s not in synthetic or num_synthetic < synthetic_cap]
        if not pool:
            raise ValueError(f"only {len(chosen)} of {num_seeds} seeds can be chosen: the rest are synthetic "
                             f"and max_synthetic_fraction caps them at {synthetic_cap}")
        seed = pool[rng.integers(len(pool))]
        num_synthetic += seed in synthetic
        chosen.append(seed)
        reasons.append("refill")
    return SeedSelection(tuple(chosen), tuple(reasons))


def difficulty_direction(recent_success: Sequence[float], alpha: float = 0.5, band: float = 0.1) -> str:
    """Which way to move a seed's difficulty so the agent's success rate approaches `alpha`: one of
    the domains' DIFFICULTY_DIRECTIONS ("easier", "similar", "harder").

    `recent_success` holds the agent's recent success rates (p_hat) on the seed or its variants;
    above `alpha + band` asks for harder variants, below `alpha - band` for easier ones.
    """
    if not recent_success:
        return "similar"
    p = sum(recent_success) / len(recent_success)
    if p > alpha + band:
        return "harder"
    if p < alpha - band:
        return "easier"
    return "similar"

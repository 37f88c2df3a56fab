"""Why a simulator trained on R_env did or did not aim: what each run's own records say.

Whether RWR can move the simulator's tasks towards the band depends on three things, each read
from a run's files (its D_env records, metrics rows and done.json):

- How the agent's rollouts land. With n rollouts a task's p_hat is k/n. When most tasks score 0 or
  n of n (the agent solves a task always or never), few tasks are in band, whatever is written.
- Whether the band has a place to aim at. The level of in-band tasks against the others', and the
  in-band share of each level: the best level's share is about what a simulator that wrote only
  that level would reach, so it bounds what aiming by level can gain.
- How much the simulator trains on, and how far the reward separates what it trains on: its rows
  and steps, and R_env with RWR's weight exp(lambda R_env) at each p_hat the rollouts can give.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from genenv_jax.rl.curriculum import env_reward, in_band
from genenv_jax.study.arm_epochs import RunData, simulator_update
from genenv_jax.study.bootstrap import Difference, bootstrap_difference

# A level's in-band share counts as a candidate "best level" only with at least this many scored
# tasks of that level in the run, so a level written twice cannot top the table by chance.
MIN_LEVEL_TASKS = 20


@dataclasses.dataclass(frozen=True)
class BandSignal:
    """One run's scored tasks (every epoch with D_env records) seen from the band."""

    run: str
    scored: int
    extreme_share: float  # share of tasks with p_hat 0 or 1: the agent always or never solved them
    in_band_share: float
    level_gap: Difference | None  # mean level in band - mean level out of band, bootstrap over tasks
    by_level: dict[int, tuple[int, int]]  # level -> (in-band tasks, scored tasks)
    best_level: tuple[int, int, int] | None  # (level, in-band tasks, scored tasks) of the best level
    steps: int  # simulator updates over the run (0: its simulator is never trained)
    rows: int  # rows of those updates (RWR: in-band tasks; GRPO: generations)


def band_signal(data: RunData, min_level_tasks: int = MIN_LEVEL_TASKS) -> BandSignal | None:
    """The BandSignal of a run; None when none of its epochs has per-task D_env records."""
    scores = [s for _, s in sorted(data.scores.items()) if s.source == "pool"]
    if not scores:
        return None
    p_hat = np.concatenate([s.p_hat for s in scores])
    band = np.concatenate([s.in_band for s in scores]).astype(bool)
    levels = np.concatenate([s.levels for s in scores])
    by_level = {int(level): (int(band[levels == level].sum()), int((levels == level).sum()))
                for level in np.unique(levels[levels > 0])}
    best = None
    for level, (hits, count) in by_level.items():
        if count >= min_level_tasks and (best is None or hits / count > best[1] / best[2]):
            best = (level, hits, count)
    updates = [simulator_update(row) for row in data.run.rows.values()]
    return BandSignal(data.run.name, len(p_hat), float(np.mean((p_hat == 0) | (p_hat == 1))), float(band.mean()),
                      bootstrap_difference(levels[band], levels[~band]), by_level, best,
                      int(sum(u.get("steps", 0) for u in updates)), int(sum(u.get("tasks", 0) for u in updates)))


@dataclasses.dataclass(frozen=True)
class RewardPoint:
    """One p_hat the rollouts can give (k of n successes) under a run's curriculum settings."""

    successes: int
    rollouts: int
    p_hat: float
    in_band: bool
    r_env: float
    rwr_weight: float  # exp(lambda R_env), before the loss's normalisation over a step's rows


def reward_grid(config: Mapping[str, Any]) -> list[RewardPoint]:
    """R_env, the band and RWR's weight at every p_hat = k/n of a run's effective config (its
    done.json `config`): curriculum alpha / beta / k_min, rollouts_per_task and the simulator's
    loss.reward_lambda."""
    curriculum, n = config["curriculum"], int(config["rollouts_per_task"])
    alpha, beta, k_min = float(curriculum["alpha"]), float(curriculum["beta"]), float(curriculum["k_min"])
    reward_lambda = float(config["simulator"]["train"]["loss"]["reward_lambda"])
    p = np.arange(n + 1) / n
    r_env, band = env_reward(p, alpha, beta), in_band(p, alpha, k_min)
    # the weight of rl.rwr.rwr_weight, computed here in numpy so the report needs no jax
    weight = np.exp(reward_lambda * r_env)
    return [RewardPoint(k, n, float(p[k]), bool(band[k]), float(r_env[k]), float(weight[k])) for k in range(n + 1)]


def weight_ratio(grid: Sequence[RewardPoint]) -> float | None:
    """The largest over the smallest RWR weight among in-band p_hat (None: no p_hat is in band):
    how much more one trained task can count than another after the band has chosen them."""
    weights = [g.rwr_weight for g in grid if g.in_band]
    return max(weights) / min(weights) if weights else None

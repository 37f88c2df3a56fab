"""One record per task of an epoch (`EpochTask`; its agent episodes are a `RolloutGroup`), filled in
stage by stage: where the task came from and the simulator sample behind it (task stage), the
agent's n episodes (rollouts), whether GRPO trains on them (dynamic sampling), and p_hat, R_env and
the band (scoring). The updates, the pools, the samples and the metrics row all read the same list
of records.

Origins, in the order an epoch lists them:
- `generated`: a generation that parsed into a task and that the agent rolls out (the first
  `new_tasks_per_epoch` of them when that is set): its p_hat, R_env and band train the simulator;
- `unused`: a valid generation beyond `new_tasks_per_epoch` (not rolled out);
- `rejected`: a generation the domain rejected (no task; the simulator's GRPO gives it
  `invalid_reward`);
- `top_up`: a training seed making up for too few generated tasks, `replay`: a task replayed from
  the base seeds or D_train, `refill`: dynamic sampling's replacement for an uninformative group.
  These three are rolled out like replayed tasks, outside p_hat and the simulator's update.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

import numpy as np

from genenv_jax.domains.base import Task
from genenv_jax.loop.context import LoopContext
from genenv_jax.episodes import Episode
from genenv_jax.loop.tasks import Counts, Generation, top_up_tasks
from genenv_jax.rl.curriculum import CurriculumConfig, TaskScore, score_tasks, seed_variances
from genenv_jax.rl.registry import Credits

GENERATED, UNUSED, REJECTED = "generated", "unused", "rejected"
TOP_UP, REPLAY, REFILL = "top_up", "replay", "refill"
REPLAYED_ORIGINS = (TOP_UP, REPLAY, REFILL)


@dataclasses.dataclass(frozen=True)
class GroupCredit:
    """One task group's credit (`loop.credit`): the estimator's answer for its n episodes
    (`rl.registry.Credits`: advantages [n], under GiGPO per response token and per turn too) and
    the overlong shaping [n] its rewards took (shaped reward - R_agent, 0 when off)."""

    credits: Credits
    shaping: np.ndarray

    @property
    def advantages(self) -> np.ndarray:
        return self.credits.advantages

    @property
    def token_advantages(self) -> list[np.ndarray] | None:
        return self.credits.token_advantages

    @property
    def informative(self) -> bool:
        """Some episode of the group gets a non-zero advantage (so a policy gradient)."""
        if self.token_advantages is not None:
            return any(bool(np.any(a != 0)) for a in self.token_advantages)
        return bool(np.any(self.advantages != 0))


@dataclasses.dataclass
class RolloutGroup:
    """A task's n agent episodes (one GRPO group)."""

    task: Task
    episodes: list[Episode]
    replayed: bool = False

    @property
    def rewards(self) -> list[float]:
        return [ep.reward for ep in self.episodes]

    @property
    def rewards_differ(self) -> bool:
        """Whether its episodes got unequal rewards (else its GRPO advantages are all zero)."""
        return len(set(self.rewards)) > 1

    @property
    def valid(self) -> list[bool]:
        return [ep.valid for ep in self.episodes]


@dataclasses.dataclass
class EpochTask:
    """One task of the epoch (or one rejected generation) and what the stages found out about it."""

    origin: str
    task: Task | None
    generation: Generation | None = None  # the simulator sample behind it (static draws: an empty one)
    rollouts: RolloutGroup | None = None  # the agent's n episodes (None: not rolled out, or could not start)
    trains_agent: bool = False            # GRPO trains on its rollouts this epoch
    score: TaskScore | None = None        # p_hat, R_env, band: generated tasks that were rolled out
    credit: GroupCredit | None = None     # its rollouts' advantages, computed once (`loop.credit.credit_records`)

    @property
    def replayed(self) -> bool:
        """Rolled out outside p_hat and the simulator's update (top-up, replay, refill)."""
        return self.origin in REPLAYED_ORIGINS

    @property
    def rolls_out(self) -> bool:
        """The agent rolls it out this epoch (refills are rolled out by dynamic sampling)."""
        return self.origin in (GENERATED, TOP_UP, REPLAY)


def agent_tasks(ctx: LoopContext, gens: Sequence[Generation], epoch: int) -> tuple[list[EpochTask], Counts]:
    """The task stage's records: one per generation (`from_generations`), then top-ups for any
    shortfall below `new_tasks_per_epoch` = N > 0 (`top_up_tasks`), and what was counted:
    `new_tasks_unused` (valid tasks beyond N), `topped_up_tasks`."""
    wanted = ctx.config.new_tasks_per_epoch
    records = from_generations(gens, wanted)
    if wanted <= 0:
        return records, Counts()
    new = sum(1 for r in records if r.origin == GENERATED)
    counts = Counts(new_tasks_unused=sum(1 for r in records if r.origin == UNUSED))
    if new < wanted:
        counts["topped_up_tasks"] = wanted - new
        records += replayed(TOP_UP, top_up_tasks(ctx, wanted - new, epoch))
    return records, counts


def from_generations(gens: Sequence[Generation], new_tasks: int) -> list[EpochTask]:
    """The task stage's records, one per generation in order: the first `new_tasks` valid ones (all
    when `new_tasks` <= 0) are `generated`, later valid ones `unused`, the rest `rejected`."""
    out, used = [], 0
    for g in gens:
        if g.task is None:
            out.append(EpochTask(REJECTED, None, g))
        elif new_tasks <= 0 or used < new_tasks:
            used += 1
            out.append(EpochTask(GENERATED, g.task, g))
        else:
            out.append(EpochTask(UNUSED, g.task, g))
    return out


def replayed(origin: str, tasks: Iterable[Task]) -> list[EpochTask]:
    """Records of tasks rolled out outside the curriculum (top-ups, replays, refills)."""
    return [EpochTask(origin, t) for t in tasks]


def with_generation(records: Iterable[EpochTask]) -> list[EpochTask]:
    """The records of the epoch's generations (rejected ones included), in generation order."""
    return [r for r in records if r.generation is not None]


def rolled_out(records: Iterable[EpochTask]) -> list[RolloutGroup]:
    """The rollout groups of the records, in record order (tasks that could not start have none)."""
    return [r.rollouts for r in records if r.rollouts is not None]


def scores_of(records: Iterable[EpochTask]) -> list[TaskScore]:
    """Each distinct score once, in order (generations of one task id share its score)."""
    seen: dict[int, TaskScore] = {}
    for r in records:
        if r.score is not None:
            seen.setdefault(id(r.score), r.score)
    return list(seen.values())


def score_generated(records: Sequence[EpochTask], config: CurriculumConfig
                    ) -> tuple[list[TaskScore], dict[str, float]]:
    """The scoring stage: p_hat, R_env and the band of every generated task the agent rolled out
    (`rl.curriculum.score_tasks`; rollouts of one task id pool into one score), set on each
    generation's record whose task has a score. Returns the scores (one per task id) and each
    seed's reward variance over its variants' rollouts (DreamGym's seed selection)."""
    fresh = [{"task_id": r.task.task_id, "seed_id": r.task.parent_id or r.task.task_id, "rewards": r.rollouts.rewards}
             for r in records if r.rollouts is not None and not r.replayed]
    if not fresh:
        return [], {}
    scores = score_tasks(fresh, config)
    by_task = {s.task_id: s for s in scores}
    for r in records:
        if r.generation is not None and r.task is not None:
            r.score = by_task.get(r.task.task_id)
    return scores, seed_variances(fresh)

"""DAPO's dynamic sampling for the agent's update: groups without signal are dropped from GRPO and
replaced by groups of further tasks, so a step sees only groups that can move the policy.

- **Uninformative** (`dynamic_sampling.filter`): "reward", DAPO's rule, a group whose R_agent are
  all equal (all solved or all failed); "advantage", a group whose every advantage it would train
  on is exactly 0 (under GiGPO a group of equal rewards can still carry step credit, and overlong
  shaping can split equal rewards).
- **Refills**: tasks drawn like replayed ones (base seeds and D_train with the `replay` ratios) and
  rolled out afresh by the same policy, as many tasks per round as groups are missing, for at most
  `max_rounds` rounds, each round with random streams of its own.
- **Budget**: the update trains on at most as many groups as the epoch rolled out before refills,
  so it takes the same number of optimizer steps as without dynamic sampling whenever the refills
  make up the shortfall (fewer when they do not: `dynamic_sampling/shortfall_groups`). The price is
  rollouts: `dynamic_sampling/extra_rollouts` episodes this epoch. Comparisons at equal agent data
  should match `agent/rollouts_total` (or turn this off in every arm).
- The curriculum is untouched: p_hat, R_env and the simulator's RWR see the epoch's generated tasks
  as before; refills are rolled out like replayed tasks, outside them.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Sequence

from genenv_jax.loop import epoch_tasks
from genenv_jax.loop.context import STREAM_REFILL, LoopContext, epoch_seed
from genenv_jax.loop.credit import credit_records
from genenv_jax.loop.epoch_tasks import EpochTask
from genenv_jax.loop.policy import Placement, Policy
from genenv_jax.loop.rollouts import rollouts
from genenv_jax.loop.tasks import replay_tasks
from genenv_jax.workdir.pools import Pool


def informative(ctx: LoopContext, agent: Policy, records: Sequence[EpochTask]) -> list[bool]:
    """Per rolled-out record: does its group carry signal under `dynamic_sampling.filter`? The
    advantage filter credits each record once (`credit_records`); the update reuses that credit."""
    if ctx.config.dynamic_sampling.filter == "reward":
        return [r.rollouts.rewards_differ for r in records]
    credits = credit_records(records, ctx.config.rollouts_per_task, agent.settings.train.loss,
                             agent.settings.sampling.max_new_tokens)
    return [c.informative for c in credits]


@dataclasses.dataclass
class Refills:
    """What dynamic sampling rolled out besides the epoch's tasks: the refill records (written to
    D_train like the others; those GRPO trains on are marked `trains_agent`), its metrics, and the
    refill rollouts' event counts (`EpisodeStats.counts`, summed over rounds)."""

    records: list[EpochTask] = dataclasses.field(default_factory=list)
    metrics: dict = dataclasses.field(default_factory=dict)
    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)


def choose_training_groups(ctx: LoopContext, agent: Policy, weights: Placement, envs, records: Sequence[EpochTask],
                           d_train: Pool, epoch: int) -> Refills:
    """The dynamic-sampling stage: marks the records whose rollouts GRPO trains on (`trains_agent`).
    Without dynamic sampling every rolled-out record, and no refills. With it, the informative ones
    and refills for the rest (see the module docstring). `weights`: the agent's weights as the epoch
    placed them for its rollouts (the refills sample the same copy)."""
    settings = ctx.config.dynamic_sampling
    rolled = [r for r in records if r.rollouts is not None]
    if not settings.enabled or not rolled:
        for r in rolled:
            r.trains_agent = True
        return Refills()
    t0 = time.perf_counter()
    target = len(rolled)
    kept = [r for r, ok in zip(rolled, informative(ctx, agent, rolled)) if ok]
    dropped = target - len(kept)
    refills: list[EpochTask] = []
    counts: collections.Counter = collections.Counter()
    rounds = 0
    while len(kept) < target and rounds < settings.max_rounds:
        rounds += 1
        tasks = replay_tasks(ctx, d_train, epoch, count=target - len(kept),
                             seed=epoch_seed(ctx.config.seed, epoch, STREAM_REFILL * 1000 + rounds))
        new = epoch_tasks.replayed(epoch_tasks.REFILL, tasks)
        stats = rollouts(ctx, agent, weights, envs, new, epoch, refill_round=rounds)
        counts.update(stats.counts)  # (update, not +=: a count of 0 stays a key, as the rollouts report it)
        new = [r for r in new if r.rollouts is not None]
        refills += new
        good = [r for r, ok in zip(new, informative(ctx, agent, new)) if ok]
        dropped += len(new) - len(good)
        kept += good[:target - len(kept)]
    for r in kept:
        r.trains_agent = True
    groups = epoch_tasks.rolled_out(refills)
    extra = sum(len(g.episodes) for g in groups)
    return Refills(refills, {
        "dynamic_sampling/rounds": rounds,
        "dynamic_sampling/dropped_groups": dropped,
        "dynamic_sampling/trained_groups": len(kept),
        "dynamic_sampling/shortfall_groups": target - len(kept),
        "dynamic_sampling/extra_rollouts": extra,
        "dynamic_sampling/refill_success_rate": (sum(r for g in groups for r in g.rewards) / extra) if extra else None,
        "agent/rollouts_total": sum(len(r.rollouts.episodes) for r in rolled) + extra,
        "time/refill_s": time.perf_counter() - t0,
    }, counts)

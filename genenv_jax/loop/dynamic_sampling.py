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
import time
from typing import Sequence

from genenv_jax.loop.context import STREAM_REFILL, LoopContext, epoch_seed
from genenv_jax.loop.credit import group_credits
from genenv_jax.loop.policy import Placement, Policy
from genenv_jax.loop.rollouts import RolloutGroup, rollouts
from genenv_jax.loop.tasks import replay_tasks
from genenv_jax.workdir.pools import Pool


def informative(ctx: LoopContext, agent: Policy, groups: Sequence[RolloutGroup]) -> list[bool]:
    """Per group: does it carry signal under `dynamic_sampling.filter`?"""
    if ctx.config.dynamic_sampling.filter == "reward":
        return [max(g.rewards) != min(g.rewards) for g in groups]
    credits, _ = group_credits(groups, ctx.config.rollouts_per_task, agent.settings.train.loss,
                               agent.settings.sampling.max_new_tokens)
    return [c.informative for c in credits]


def training_groups(ctx: LoopContext, agent: Policy, weights: Placement, envs, groups: Sequence[RolloutGroup],
                    d_train: Pool, epoch: int, counters: collections.Counter,
                    ) -> tuple[list[RolloutGroup], list[RolloutGroup], dict]:
    """(the groups GRPO trains on, the refill groups rolled out, metrics). Without dynamic sampling:
    every group, no refills, no metrics. `weights`: the agent's weights as the epoch placed them
    for its rollouts (the refills sample the same copy)."""
    settings = ctx.config.dynamic_sampling
    if not settings.enabled or not groups:
        return list(groups), [], {}
    t0 = time.perf_counter()
    target = len(groups)
    kept = [g for g, ok in zip(groups, informative(ctx, agent, groups)) if ok]
    dropped = target - len(kept)
    refills: list[RolloutGroup] = []
    rounds = 0
    while len(kept) < target and rounds < settings.max_rounds:
        rounds += 1
        tasks = replay_tasks(ctx, d_train, epoch, count=target - len(kept),
                             seed=epoch_seed(ctx.config.seed, epoch, STREAM_REFILL * 1000 + rounds))
        new, _ = rollouts(ctx, agent, weights, envs, tasks, [True] * len(tasks), epoch, counters, refill_round=rounds)
        refills += new
        good = [g for g, ok in zip(new, informative(ctx, agent, new)) if ok]
        dropped += len(new) - len(good)
        kept += good[:target - len(kept)]
    extra = sum(len(g.episodes) for g in refills)
    return kept, refills, {
        "dynamic_sampling/rounds": rounds,
        "dynamic_sampling/dropped_groups": dropped,
        "dynamic_sampling/trained_groups": len(kept),
        "dynamic_sampling/shortfall_groups": target - len(kept),
        "dynamic_sampling/extra_rollouts": extra,
        "dynamic_sampling/refill_success_rate": (sum(r for g in refills for r in g.rewards) / extra) if extra else None,
        "agent/rollouts_total": sum(len(g.episodes) for g in groups) + extra,
        "time/refill_s": time.perf_counter() - t0,
    }

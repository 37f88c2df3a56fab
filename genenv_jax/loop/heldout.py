"""Held-out accuracy of the agent: greedy, one episode per task of a seed split it never trains on,
overall and per category (`config.evaluation`). Measured after the warm-start and after every epoch,
so curves show what training changed on tasks the loop never saw."""

from __future__ import annotations

import collections

import numpy as np

from genenv_jax.domains.base import Task
from genenv_jax.episodes import run_episodes
from genenv_jax.evaluation import select_tasks
from genenv_jax.loop.context import LoopContext
from genenv_jax.loop.policy import Policy
from genenv_jax.loop.rollouts import episode_caps


def heldout_tasks(ctx: LoopContext) -> list[Task]:
    """The evaluation split's tasks (the first `max_per_category` of each category); [] when off."""
    e = ctx.config.evaluation
    if not e.split:
        return []
    tasks = ctx.domain.seeds(e.split)
    if not tasks:
        raise ValueError(f"config.evaluation.split={e.split!r}: domain {ctx.domain.name!r} has no tasks in that split")
    if e.split == ctx.config.domain.seed_split:
        raise ValueError(f"config.evaluation.split={e.split!r} is the split the loop trains on "
                         "(config.domain.seed_split): held-out accuracy needs another split")
    return select_tasks(tasks, e.max_per_category or None)


class HeldOut:
    """Scores agent params on the fixed held-out tasks with the agent's own sampler (greedy)."""

    def __init__(self, ctx: LoopContext, agent: Policy, environments):
        self.ctx, self.agent, self.environments = ctx, agent, environments
        self.tasks = heldout_tasks(ctx)

    def metrics(self, weights) -> dict[str, float]:
        """`heldout/accuracy` (mean reward) and `heldout/<category>` of the agent's PolicyState (or
        placed SamplerParams); {} when evaluation is off."""
        if not self.tasks:
            return {}
        ctx, s = self.ctx, self.agent.settings.sampling
        placed = self.agent.place(weights)
        caps = episode_caps(ctx, self.agent)

        def greedy(prompts, turn):
            return self.agent.sampler.generate(placed, prompts, max_new_tokens=s.max_new_tokens, temperature=0.0,
                                               stop_tokens=ctx.text.stop_ids, slots=s.batch_size,
                                               retain=caps.max_turns > 1)

        counters: collections.Counter = collections.Counter()
        with ctx.progress(len(self.tasks), "held-out", unit="episode") as bar:
            groups, _ = run_episodes(self.tasks, 1, self.environments, ctx.text, caps, greedy, counters, bar)
        reward = {g[0].task.task_id: g[0].reward for g in groups}  # skipped tasks (prompt too long) score 0
        by_category: dict[str, list[float]] = collections.defaultdict(list)
        for t in self.tasks:
            by_category[t.category].append(reward.get(t.task_id, 0.0))
        out = {"heldout/accuracy": float(np.mean([reward.get(t.task_id, 0.0) for t in self.tasks]))}
        return out | {f"heldout/{c}": float(np.mean(v)) for c, v in sorted(by_category.items())}

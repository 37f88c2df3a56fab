"""The three kinds of update an epoch (or the warm-start) makes, each through `train_steps`:
GRPO on the agent's rollout groups, RWR on the simulator's in-band generations, SFT on seed data."""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np

from genenv_jax.domains.base import DIFFICULTY_DIRECTIONS, Task
from genenv_jax.episodes import Episode
from genenv_jax.loop.credit import credit_metrics, credit_records
from genenv_jax.loop.context import (STREAM_GRPO, STREAM_RWR, STREAM_SIMULATOR_SUBSET, STREAM_UPDATE_SUBSET,
                                     STREAM_WARMSTART_AGENT,
                                     STREAM_WARMSTART_SIMULATOR, LoopContext, epoch_seed)
from genenv_jax.loop.policy import Policy
from genenv_jax.loop.simulator_grpo import update_simulator_grpo
from genenv_jax.loop.epoch_tasks import EpochTask
from genenv_jax.rl import POLICY_LOSSES
from genenv_jax.rl.batches import PolicyState, TrainRow, batch_shape, shuffled_batches, summarise, train_steps


def update_agent(ctx: LoopContext, agent: Policy, state: PolicyState, records: Sequence[EpochTask],
                 epoch: int) -> tuple[PolicyState, dict]:
    """GRPO on the rollout groups of the records marked `trains_agent`: each pass visits every
    group once, `tasks_per_step` groups per step; advantages per `agent.train.loss.advantage`
    (`loop.credit`).

    With `agent.train.tasks_per_epoch` > 0, at most that many groups, a seeded draw that takes the
    groups whose rewards differ first and tops up from the rest (`agent/groups_constant` counts the
    drawn groups of equal rewards). Such a group has zero episode-level advantages: a step of such
    groups alone is the entropy bonus alone, and Adam's first steps are full learning-rate steps
    whatever the gradient's size (the calc study's static arm lost its agent so: a uniform draw of
    8 of 48 groups held no informative one, success 0.60 -> 0.01)."""
    n, u = ctx.config.rollouts_per_task, agent.settings.train
    trained = [r for r in records if r.trains_agent]
    informative = np.array([r.rollouts.rewards_differ for r in trained], bool)
    trained = at_most(trained, u.tasks_per_epoch, ctx.seed(epoch, STREAM_UPDATE_SUBSET), first=informative)
    if not trained:
        return state, {}
    groups = [r.rollouts for r in trained]
    credits = credit_records(trained, n, u.loss, agent.settings.sampling.max_new_tokens)
    rows_of = [[TrainRow(ep.prompt, ep.tokens, float(c.advantages[k]), *_logprobs_and_mask(ep),
                         token_scalars=None if c.token_advantages is None else c.token_advantages[k])
                for k, ep in enumerate(g.episodes)] for g, c in zip(groups, credits)]
    rng = np.random.default_rng(ctx.seed(epoch, STREAM_GRPO))
    steps = []
    for _ in range(u.passes):
        order = rng.permutation(len(groups))
        steps += [[r for i in order[s:s + u.tasks_per_step] for r in rows_of[i]]
                  for s in range(0, len(groups), u.tasks_per_step)]
    longest = max(len(r.response) for rows in rows_of for r in rows)
    shape = batch_shape([r for rows in rows_of for r in rows], u.tasks_per_step * n, agent.rows_multiple,
                        response_len=max(longest, agent.settings.sampling.max_new_tokens))
    state, history = train_steps(agent.train, state, steps, **shape, pad_id=ctx.text.pad_id,
                                 scalar_key="advantages", desc=f"epoch {epoch}: GRPO",
                                 show_progress=ctx.show_progress, pad_per_step=u.pad_per_step)
    constant = sum(not g.rewards_differ for g in groups)
    return state, summarise("agent", history) | credit_metrics(credits, u.loss) | {"agent/groups_constant": constant}


def _logprobs_and_mask(ep: Episode) -> tuple[np.ndarray, np.ndarray | None]:
    """The episode's old logprobs and, when it has observation tokens, its agent-token loss mask."""
    mask, logprobs = ep.response_arrays()
    return logprobs, (None if mask.all() else mask)


def at_most(items: Sequence, count: int, seed: int, first: np.ndarray | None = None) -> list:
    """`items`, or `count` > 0 of them drawn without replacement by `seed` (in their order). With
    `first` (a mask over `items`), the draw takes from the marked items first and tops up from the
    others."""
    if count <= 0 or len(items) <= count:
        return list(items)
    rng = np.random.default_rng(seed)
    if first is None:
        keep = rng.choice(len(items), size=count, replace=False)
    else:
        marked, others = np.flatnonzero(first), np.flatnonzero(~first)
        taken = min(count, marked.size)
        keep = np.concatenate([rng.choice(marked, size=taken, replace=False),
                               rng.choice(others, size=count - taken, replace=False)])
    return [items[i] for i in np.sort(keep)]


def update_simulator(ctx: LoopContext, simulator: Policy, state: PolicyState, records: Sequence[EpochTask],
                     epoch: int) -> tuple[PolicyState, dict]:
    """The simulator's update by `simulator.train.objective` (a registered policy loss) on the
    records of its generations: a grouped one (grpo) on group-relative advantages over each
    prompt's generations (`loop.simulator_grpo`), any other (rwr) on the in-band tasks weighted by
    their R_env (`update_rwr`)."""
    if POLICY_LOSSES.get(ctx.config.simulator_objective.objective).grouped:
        return update_simulator_grpo(ctx, simulator, state, records, epoch)
    return update_rwr(ctx, simulator, state, records, epoch)


def update_rwr(ctx: LoopContext, simulator: Policy, state: PolicyState, records: Sequence[EpochTask],
               epoch: int) -> tuple[PolicyState, dict]:
    """RWR on the generations whose task is in band (at most `simulator.train.tasks_per_epoch`, a
    seeded draw), each weighted by its R_env."""
    chosen = [r for r in records if r.generation is not None and r.score is not None and r.score.in_band
              and r.generation.tokens]
    chosen = at_most(chosen, simulator.settings.train.tasks_per_epoch, ctx.seed(epoch, STREAM_SIMULATOR_SUBSET))
    if not chosen:
        return state, {"simulator/steps": 0, "simulator/skipped": "no in-band tasks"}
    rows = [TrainRow(r.generation.prompt, r.generation.tokens, r.score.r_env) for r in chosen]
    shape = batch_shape(rows, min(simulator.settings.train.tasks_per_step, len(rows)), simulator.rows_multiple,
                        response_len=simulator.settings.sampling.max_new_tokens)
    order = np.random.default_rng(ctx.seed(epoch, STREAM_RWR)).permutation(len(rows))
    per_step = shape["rows"]
    steps = [[rows[i] for i in order[s:s + per_step]] for s in range(0, len(rows), per_step)]
    state, history = train_steps(simulator.train, state, steps, **shape, pad_id=ctx.text.pad_id,
                                 scalar_key="rewards", desc=f"epoch {epoch}: RWR",
                                 show_progress=ctx.show_progress, pad_per_step=simulator.settings.train.pad_per_step)
    return state, summarise("simulator", history) | {"simulator/tasks": len(chosen)}


# ----------------------------------------------------------------------------------------------
# Warm-start
# ----------------------------------------------------------------------------------------------
def warmstart_examples(ctx: LoopContext) -> tuple[list[TrainRow], list[TrainRow]]:
    """(agent, simulator) SFT rows from the first seeds: reference answers and reference generations."""
    w, domain, text = ctx.config.warmstart, ctx.domain, ctx.text
    seeds = ctx.train_seeds[:w.num_seeds or len(ctx.train_seeds)]
    agent = [demonstration_row(ctx, s) for s in seeds]
    target_of = _simulator_targets(ctx, seeds)
    alpha = ctx.config.curriculum.alpha
    encode = text.encode_spelled if w.spell_added_tokens else text.encode
    simulator = [TrainRow(text.prompt(domain.simulator_prompt(s, (), direction, alpha)),
                          encode(target_of[s.task_id]) + [text.end_id])
                 for s in seeds for direction in DIFFICULTY_DIRECTIONS]  # every direction the loop may ask for
    return agent, simulator


def demonstration_row(ctx: LoopContext, task: Task) -> TrainRow:
    """The domain's ideal episode of `task` as one SFT row: its reference agent turns (in the loss)
    with the environment's real observations between them (not in the loss)."""
    text, env = ctx.text, ctx.domain.environment(task)
    encode = text.encode_spelled if ctx.config.warmstart.spell_added_tokens else text.encode
    prompt = text.prompt(env.reset())
    tokens: list[int] = []
    mask: list[float] = []
    for agent_text in ctx.domain.reference_turns(task):
        turn = encode(agent_text) + [text.end_id]
        tokens += turn
        mask += [1.0] * len(turn)
        outcome = env.step(agent_text)
        if outcome.done:
            break
        observation = text.continuation(outcome.observation)
        tokens += observation
        mask += [0.0] * len(observation)
    return TrainRow(prompt, tokens, loss_mask=None if all(mask) else np.asarray(mask, np.float32))


def _simulator_targets(ctx: LoopContext, seeds: Sequence[Task]) -> dict[str, str]:
    """Simulator SFT target per seed: a real sibling task written as a generation.

    "next": the next seed (targets vary); "shortest": the shortest sibling of the same category
    (few, short targets a tiny model learns quickly).
    """
    domain = ctx.domain
    if ctx.config.warmstart.simulator_target == "next":
        return {s.task_id: domain.reference_generation(s, seeds[(i + 1) % len(seeds)]) for i, s in enumerate(seeds)}
    length = {s.task_id: len(domain.reference_generation(s, s)) for s in seeds}
    targets = {}
    for seed in seeds:
        siblings = sorted((s for s in seeds if s.category == seed.category and s.task_id != seed.task_id),
                          key=lambda s: (length[s.task_id], s.task_id))
        targets[seed.task_id] = domain.reference_generation(seed, siblings[0] if siblings else None)
    return targets


def warmstart(ctx: LoopContext, policy: Policy, params, examples: Sequence[TrainRow],
              frozen=None) -> tuple[object, dict]:
    """Supervised warm-start of one policy on its examples; returns the trained part `params` after
    it (over the frozen part `frozen` of the policy's partition) and the first/last loss."""
    w = ctx.config.warmstart
    steps_count = w.agent_steps if policy.name == "agent" else w.simulator_steps
    stream = STREAM_WARMSTART_AGENT if policy.name == "agent" else STREAM_WARMSTART_SIMULATOR
    steps = ([examples[i] for i in picked]
             for picked in shuffled_batches(len(examples), w.batch_size, steps_count,
                                              epoch_seed(ctx.config.init_seed, 0, stream)))
    state, history = train_steps(policy.sft_trainer(), policy.sft_state(params, frozen), steps,
                                 **batch_shape(examples, w.batch_size, policy.rows_multiple), pad_id=ctx.text.pad_id,
                                 scalar_key="rewards", desc=f"warm-start {policy.name}",
                                 show_progress=ctx.show_progress, total=steps_count,
                                 pad_per_step=policy.settings.train.pad_per_step)
    first, last = history[0]["loss"], history[-1]["loss"]
    logging.info("warm-start %s: %d steps, loss %.3f -> %.3f", policy.name, steps_count, first, last)
    return state.params, {f"warmstart/{policy.name}_loss_first": first, f"warmstart/{policy.name}_loss_last": last}

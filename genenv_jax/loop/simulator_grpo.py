"""The simulator trained by GRPO (`simulator.train.objective=grpo`), beside the paper's RWR.

The `variants_per_seed` generations of one simulator prompt form a group (`Generation.group`).
Each generation's reward is R_env(p_hat) of the task it wrote, from the agent's rollouts of that
task; a generation the domain rejected gets `simulator.train.invalid_reward` (default 0), so
writing invalid tasks is penalised relative to its group. A valid generation whose task was not
rolled out (with `new_tasks_per_epoch` > 0, valid tasks beyond the first N) has no reward and is
left out of its group. Advantages are group-relative (`rl.grpo_advantages` with the simulator's
`train.grpo` settings: std normalisation, ddof, eps); a group whose rewards are all equal has zero
advantage everywhere and is left out of the update (with `kl_coef` 0 it would contribute nothing).
The update is the GRPO step (`rl.make_grpo_step`) with the sampler's logprobs as the old policy's,
`simulator.train.tasks_per_step` groups a step, at most `tasks_per_epoch` groups an epoch.
"""

from __future__ import annotations

import collections
from typing import Sequence

import numpy as np

from genenv_jax.loop.context import STREAM_SIMULATOR_GRPO, STREAM_SIMULATOR_SUBSET, LoopContext
from genenv_jax.loop.epoch_tasks import EpochTask
from genenv_jax.loop.policy import Policy
from genenv_jax.loop.tasks import Generation
from genenv_jax.rl import grpo_advantages
from genenv_jax.rl.batches import PolicyState, TrainRow, batch_shape, summarise, train_steps


def generation_rewards(records: Sequence[EpochTask], invalid_reward: float
                       ) -> dict[int, list[tuple[Generation, float]]]:
    """{group: [(generation, reward)]} over the records' generations: R_env of a scored task,
    `invalid_reward` for a rejected generation; a valid generation without a score (not rolled out)
    and an empty one are left out."""
    groups: dict[int, list[tuple[Generation, float]]] = collections.defaultdict(list)
    for r in records:
        g = r.generation
        if g is None or not g.tokens:
            continue
        if g.task is None:
            groups[g.group].append((g, float(invalid_reward)))
        elif r.score is not None:
            groups[g.group].append((g, float(r.score.r_env)))
    return dict(groups)


def group_rows(members: Sequence[tuple[Generation, float]], loss) -> list[TrainRow]:
    """One group's training rows: group-relative advantages (`rl.grpo_advantages`), the sampler's
    logprobs as the old policy's; [] for a group of one or with equal rewards (zero advantage)."""
    rewards = np.asarray([r for _, r in members], np.float32)
    if len(members) < 2 or rewards.max() == rewards.min():
        return []
    ddof = min(loss.std_ddof, len(members) - 1)  # a group of 2 with ddof 1 is still defined
    advantages = np.asarray(grpo_advantages(rewards, len(members), eps=loss.adv_eps, ddof=ddof,
                                            normalize_by_std=loss.normalize_by_std))
    return [TrainRow(g.prompt, g.tokens, float(a), logprobs=np.asarray(g.logprobs, np.float32))
            for (g, _), a in zip(members, advantages)]


def update_simulator_grpo(ctx: LoopContext, simulator: Policy, state: PolicyState, records: Sequence[EpochTask],
                          epoch: int) -> tuple[PolicyState, dict]:
    """GRPO on the simulator's generation groups (see the module docstring)."""
    objective, train = ctx.config.simulator_objective, simulator.settings.train
    groups = generation_rewards(records, objective.invalid_reward)
    scored = [members for _, members in sorted(groups.items())]
    rewards = [r for members in scored for _, r in members]
    metrics = {"simulator/groups": len(scored), "simulator/reward_mean": float(np.mean(rewards)) if rewards else 0.0,
               "simulator/invalid_share": float(np.mean([g.task is None for m in scored for g, _ in m]))
               if rewards else 0.0}
    informative = [rows for rows in (group_rows(m, train.loss) for m in scored) if rows]
    metrics["simulator/groups_constant"] = len(scored) - len(informative)
    if train.tasks_per_epoch > 0 and len(informative) > train.tasks_per_epoch:
        keep = np.sort(np.random.default_rng(ctx.seed(epoch, STREAM_SIMULATOR_SUBSET)).choice(
            len(informative), size=train.tasks_per_epoch, replace=False))
        informative = [informative[i] for i in keep]
    if not informative:
        return state, metrics | {"simulator/steps": 0, "simulator/skipped": "no group with unequal rewards"}
    order = np.random.default_rng(ctx.seed(epoch, STREAM_SIMULATOR_GRPO)).permutation(len(informative))
    per_step = train.tasks_per_step
    steps = [[row for i in order[s:s + per_step] for row in informative[i]] for s in range(0, len(order), per_step)]
    all_rows = [row for rows in informative for row in rows]
    shape = batch_shape(all_rows, per_step * ctx.config.variants_per_seed, simulator.rows_multiple,
                        response_len=simulator.settings.sampling.max_new_tokens)
    state, history = train_steps(simulator.train, state, steps, **shape, pad_id=ctx.text.pad_id,
                                 scalar_key="advantages", desc=f"epoch {epoch}: simulator GRPO",
                                 show_progress=ctx.show_progress, pad_per_step=train.pad_per_step)
    return state, summarise("simulator", history) | metrics | {"simulator/tasks": len(all_rows)}

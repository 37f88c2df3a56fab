"""Credit for the agent's episodes: the reward GRPO sees (with DAPO's overlong shaping) and the
advantages it trains on, from the estimator `agent.train.loss.advantage` names (`rl.registry`):
one per episode (grpo), or per agent turn (gigpo: episode + step advantages over anchor states).

A task group's credit depends on its own episodes only, so each record's is computed once
(`credit_records`) and kept on it: dynamic sampling's advantage filter and the update read the same
answer, and the update's metrics (`credit_metrics`) describe exactly the groups it trains on."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from genenv_jax.episodes import Episode
from genenv_jax.loop.epoch_tasks import EpochTask, GroupCredit, RolloutGroup
from genenv_jax.rl import GRPOConfig
from genenv_jax.rl.advantages import overlong_penalty
from genenv_jax.rl.registry import ADVANTAGE_ESTIMATORS, CreditBatch


def shaped_reward(ep: Episode, loss: GRPOConfig, max_new_tokens: int) -> float:
    """R_agent plus DAPO's overlong penalty on the episode's longest agent turn (0 when off)."""
    return ep.reward + overlong_penalty([t["agent_tokens"] for t in ep.turns], max_new_tokens,
                                        loss.overlong_buffer, loss.overlong_penalty)


def credit_groups(groups: Sequence[RolloutGroup], n: int, loss: GRPOConfig, max_new_tokens: int) -> list[GroupCredit]:
    """Every group's credit, in one call of the estimator `loss.advantage` names."""
    if not groups:
        return []
    estimator = ADVANTAGE_ESTIMATORS.get(loss.advantage)
    episodes = [ep for g in groups for ep in g.episodes]
    rewards = np.asarray([shaped_reward(ep, loss, max_new_tokens) for ep in episodes], np.float64)
    batch = CreditBatch(rewards, n, [ep.states for ep in episodes], [ep.turn_spans() for ep in episodes],
                        [len(ep.tokens) for ep in episodes], [ep.episode_id for ep in episodes])
    credits = estimator.fn(batch, loss)
    shaping = rewards - [ep.reward for ep in episodes]
    return [GroupCredit(credits.group(i, n), shaping[i * n:(i + 1) * n]) for i in range(len(groups))]


def credit_metrics(credits: Sequence[GroupCredit], loss: GRPOConfig) -> dict[str, float]:
    """What to log of the credit of the groups an update trains on: the mean overlong shaping (when
    on) and the estimator's own summary (`AdvantageEstimator.summarise`)."""
    if not credits:
        return {}
    metrics: dict[str, float] = {}
    if loss.overlong_buffer:
        metrics["agent/overlong_penalty_mean"] = float(np.mean(np.concatenate([c.shaping for c in credits])))
    summarise = ADVANTAGE_ESTIMATORS.get(loss.advantage).summarise
    if summarise is not None:
        metrics |= summarise([c.credits for c in credits])
    return metrics


def group_credits(groups: Sequence[RolloutGroup], n: int, loss: GRPOConfig,
                  max_new_tokens: int) -> tuple[list[GroupCredit], dict[str, float]]:
    """Every group's credit (`credit_groups`) and its metrics (`credit_metrics`)."""
    credits = credit_groups(groups, n, loss, max_new_tokens)
    return credits, credit_metrics(credits, loss)


def credit_records(records: Sequence[EpochTask], n: int, loss: GRPOConfig, max_new_tokens: int) -> list[GroupCredit]:
    """Each rolled-out record's group credit, computed once: the records without one get theirs
    in one estimator call and keep it (`EpochTask.credit`)."""
    missing = [r for r in records if r.credit is None]
    for record, credit in zip(missing, credit_groups([r.rollouts for r in missing], n, loss, max_new_tokens)):
        record.credit = credit
    return [r.credit for r in records]

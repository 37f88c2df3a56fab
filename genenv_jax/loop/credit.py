"""Credit for the agent's episodes: the reward GRPO sees (with DAPO's overlong shaping) and the
advantages it trains on, from the estimator `agent.train.loss.advantage` names (`rl.registry`):
one per episode (grpo), or per agent turn (gigpo: episode + step advantages over anchor states)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from genenv_jax.episodes import Episode
from genenv_jax.loop.epoch_tasks import RolloutGroup
from genenv_jax.rl import GRPOConfig
from genenv_jax.rl.advantages import overlong_penalty
from genenv_jax.rl.registry import ADVANTAGE_ESTIMATORS, CreditBatch


@dataclasses.dataclass(frozen=True)
class GroupCredit:
    """One task group's advantages: per episode [n], and under GiGPO per response token of each."""

    advantages: np.ndarray
    token_advantages: list[np.ndarray] | None = None

    @property
    def informative(self) -> bool:
        """Some episode of the group gets a non-zero advantage (so a policy gradient)."""
        if self.token_advantages is not None:
            return any(bool(np.any(a != 0)) for a in self.token_advantages)
        return bool(np.any(self.advantages != 0))


def shaped_reward(ep: Episode, loss: GRPOConfig, max_new_tokens: int) -> float:
    """R_agent plus DAPO's overlong penalty on the episode's longest agent turn (0 when off)."""
    return ep.reward + overlong_penalty([t["agent_tokens"] for t in ep.turns], max_new_tokens,
                                        loss.overlong_buffer, loss.overlong_penalty)


def group_credits(groups: Sequence[RolloutGroup], n: int, loss: GRPOConfig,
                  max_new_tokens: int) -> tuple[list[GroupCredit], dict[str, float]]:
    """Every group's advantages by the estimator `loss.advantage` names (`rl.registry`), and what
    they were made of (metrics)."""
    if not groups:
        return [], {}
    estimator = ADVANTAGE_ESTIMATORS.get(loss.advantage)
    episodes = [ep for g in groups for ep in g.episodes]
    rewards = np.asarray([shaped_reward(ep, loss, max_new_tokens) for ep in episodes], np.float64)
    batch = CreditBatch(rewards, n, [ep.states for ep in episodes], [ep.turn_spans() for ep in episodes],
                        [len(ep.tokens) for ep in episodes], [ep.episode_id for ep in episodes])
    credit = estimator.fn(batch, loss)
    adv = credit.advantages.reshape(len(groups), n)
    metrics: dict[str, float] = {}
    if loss.overlong_buffer:
        metrics["agent/overlong_penalty_mean"] = float(np.mean(rewards - [ep.reward for ep in episodes]))
    per_token = credit.token_advantages
    credits = [GroupCredit(adv[i], None if per_token is None else per_token[i * n:(i + 1) * n])
               for i in range(len(groups))]
    return credits, metrics | credit.metrics

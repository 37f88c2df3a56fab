"""Credit for the agent's episodes: the reward GRPO sees (with DAPO's overlong shaping) and the
advantages it trains on: one per episode (GRPO), or per agent turn (GiGPO's episode + step
advantages over anchor states)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from genenv_jax.episodes import Episode
from genenv_jax.loop.rollouts import RolloutGroup
from genenv_jax.rl import GRPOConfig, grpo_advantages
from genenv_jax.rl.advantages import gigpo_step_advantages, overlong_penalty


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
    """Every group's advantages under `loss.advantage`, and what they were made of (metrics)."""
    if not groups:
        return [], {}
    episodes = [ep for g in groups for ep in g.episodes]
    rewards = np.asarray([shaped_reward(ep, loss, max_new_tokens) for ep in episodes], np.float64)
    adv = np.asarray(grpo_advantages(rewards.astype(np.float32), n, eps=loss.adv_eps, ddof=loss.std_ddof,
                                     normalize_by_std=loss.normalize_by_std), np.float64).reshape(len(groups), n)
    metrics: dict[str, float] = {}
    if loss.overlong_buffer:
        metrics["agent/overlong_penalty_mean"] = float(np.mean(rewards - [ep.reward for ep in episodes]))
    if loss.advantage != "gigpo":
        return [GroupCredit(a) for a in adv], metrics
    for ep in episodes:
        if len(ep.states) != len(ep.turns):
            raise ValueError(f"episode {ep.episode_id} has {len(ep.turns)} turns but {len(ep.states)} anchor "
                             "states: GiGPO needs episodes from `episodes.run_episodes`")
    steps = gigpo_step_advantages(rewards, [ep.states for ep in episodes], n, gamma=loss.gigpo_gamma,
                                  normalize_by_std=loss.normalize_by_std, eps=loss.adv_eps, ddof=loss.std_ddof)
    credits = []
    for i in range(len(groups)):
        per_token = []
        for k in range(n):
            ep, step = episodes[i * n + k], steps[i * n + k]
            values = np.zeros(len(ep.tokens), np.float32)
            for (start, end), a_step in zip(ep.turn_spans(), step):
                values[start:end] = adv[i, k] + loss.gigpo_omega * a_step
            per_token.append(values)
        credits.append(GroupCredit(adv[i], per_token))
    turns = np.concatenate(steps) if steps else np.zeros(0)
    metrics |= {"agent/gigpo_step_adv_nonzero": float(np.mean(turns != 0)) if turns.size else 0.0,
                "agent/gigpo_step_adv_abs_mean": float(np.mean(np.abs(turns))) if turns.size else 0.0}
    return credits, metrics

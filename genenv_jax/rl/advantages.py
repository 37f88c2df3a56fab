"""Advantages beyond one scalar per episode, and reward shaping, on the host in float64 numpy.

- GiGPO's step-level advantages (verl-agent, arXiv 2505.10978): within a task's group of n
  episodes, the agent turns taken from the same state (an *anchor state*: the same observation
  reached by several episodes) form a step group; each turn's discounted return is compared within
  its step group. Combined with the episode-level GRPO advantage as A = A_episode + omega * A_step.
- DAPO's overlong reward shaping: a soft penalty on replies that run into the last `buffer`
  tokens before the length cap.

Episode-level advantages stay `rl.grpo.grpo_advantages`. The two advantage estimators the config
can name (`agent.train.loss.advantage`) register here (`rl.registry`): "grpo" and "gigpo".
"""

from __future__ import annotations

from typing import Any, Hashable, Sequence

import numpy as np

from genenv_jax.rl.grpo import grpo_advantages
from genenv_jax.rl.registry import CreditBatch, Credits, register_advantage


def discounted_returns(reward: float, num_turns: int, gamma: float) -> np.ndarray:
    """[T] discounted return of each turn of an episode whose only reward is `reward` after its last
    turn: G_t = gamma^(T - 1 - t) * reward (the last turn's return is the reward itself)."""
    exponents = np.arange(num_turns - 1, -1, -1, dtype=np.float64)
    return np.power(float(gamma), exponents) * float(reward)


def gigpo_step_advantages(rewards: Sequence[float], states: Sequence[Sequence[Hashable]], num_rollouts: int, *,
                          gamma: float, normalize_by_std: bool = True, eps: float = 1e-6,
                          ddof: int = 1) -> list[np.ndarray]:
    """GiGPO's step-level advantage of every turn of every episode ([T_b] per episode b).

    rewards [B]: each episode's reward (its groups are consecutive runs of `num_rollouts`, as in
    `grpo_advantages`); states[b][t]: the anchor-state key of episode b's turn t (equal keys = the
    same state). Within one group, the turns with equal keys form a step group; a turn's advantage
    is G - mean(G over its step group), divided by (std + eps) (std with `ddof`) when
    `normalize_by_std`. A step group of one turn, or one whose returns are all equal, gets exactly 0.
    """
    if len(rewards) != len(states):
        raise ValueError(f"{len(rewards)} rewards but {len(states)} episodes' states")
    if num_rollouts < 1 or len(rewards) % num_rollouts:
        raise ValueError(f"{len(rewards)} episodes are not a whole number of groups of {num_rollouts}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"GiGPO's discount gamma must be in [0, 1], got {gamma}")
    returns = [discounted_returns(r, len(s), gamma) for r, s in zip(rewards, states)]
    out = [np.zeros(len(s), np.float64) for s in states]
    for start in range(0, len(rewards), num_rollouts):
        members: dict[Hashable, list[tuple[int, int]]] = {}
        for b in range(start, start + num_rollouts):
            for t, key in enumerate(states[b]):
                members.setdefault(key, []).append((b, t))
        for turns in members.values():
            values = np.asarray([returns[b][t] for b, t in turns], np.float64)
            if len(turns) < 2 or values.max() == values.min():
                continue  # no peer to compare with, or nothing to tell apart: exactly 0
            centred = values - values.mean()
            if normalize_by_std:
                if len(turns) <= ddof:
                    continue
                centred = centred / (np.sqrt(np.sum(centred ** 2) / (len(turns) - ddof)) + eps)
            for (b, t), a in zip(turns, centred):
                out[b][t] = a
    return out


def overlong_penalty(turn_lengths: Sequence[int], max_tokens: int, buffer: int, factor: float = 1.0) -> float:
    """DAPO's soft overlong punishment of one episode, <= 0.

    A reply of L tokens with cap L_max and buffer L_cache is penalised
    factor * min(0, (L_max - L_cache - L) / L_cache): 0 up to L_max - L_cache tokens, falling linearly
    to -factor at the cap (DAPO's Eq. 13; a reply is never longer than the cap here, the sampler stops
    it). An episode of several agent turns takes its most overlong turn's penalty (a single-turn
    episode is DAPO's case); `buffer` 0 is off.
    """
    if buffer <= 0 or not turn_lengths:
        return 0.0
    if buffer > max_tokens:
        raise ValueError(f"overlong buffer {buffer} exceeds the reply cap {max_tokens}")
    expected = max_tokens - buffer
    worst = max(int(n) for n in turn_lengths)
    return float(factor) * min(0.0, (expected - worst) / buffer)


@register_advantage("grpo")
def grpo_credit(batch: CreditBatch, loss: Any) -> Credits:
    """GRPO: one group-relative advantage per episode (`grpo_advantages`, float32, with the loss's
    eps, ddof and std normalisation), returned as float64."""
    adv = grpo_advantages(batch.rewards.astype(np.float32), batch.num_rollouts, eps=loss.adv_eps,
                          ddof=loss.std_ddof, normalize_by_std=loss.normalize_by_std)
    return Credits(np.asarray(adv, np.float64))


def gigpo_summary(groups: Sequence[Credits]) -> dict[str, float]:
    """GiGPO's metrics over task groups: the share of agent turns with a non-zero step advantage,
    and the mean |step advantage|."""
    steps = [step for g in groups for step in g.turn_advantages]
    turns = np.concatenate(steps) if steps else np.zeros(0)
    return {"agent/gigpo_step_adv_nonzero": float(np.mean(turns != 0)) if turns.size else 0.0,
            "agent/gigpo_step_adv_abs_mean": float(np.mean(np.abs(turns))) if turns.size else 0.0}


@register_advantage("gigpo", per_turn=True, summarise=gigpo_summary)
def gigpo_credit(batch: CreditBatch, loss: Any) -> Credits:
    """GiGPO: every token of agent turn t of episode i gets A_episode_i + gigpo_omega x A_step_it
    (`gigpo_step_advantages` with discount gigpo_gamma). Needs an anchor state per agent turn."""
    for b, (states, spans) in enumerate(zip(batch.states, batch.turn_spans)):
        if len(states) != len(spans):
            raise ValueError(f"episode {batch.ids[b]} has {len(spans)} turns but {len(states)} anchor "
                             "states: GiGPO needs episodes from `episodes.run_episodes`")
    episode = grpo_credit(batch, loss).advantages
    steps = gigpo_step_advantages(batch.rewards, batch.states, batch.num_rollouts, gamma=loss.gigpo_gamma,
                                  normalize_by_std=loss.normalize_by_std, eps=loss.adv_eps, ddof=loss.std_ddof)
    per_token = []
    for b, step in enumerate(steps):
        values = np.zeros(batch.lengths[b], np.float32)
        for (start, end), a_step in zip(batch.turn_spans[b], step):
            values[start:end] = episode[b] + loss.gigpo_omega * a_step
        per_token.append(values)
    return Credits(episode, per_token, steps)

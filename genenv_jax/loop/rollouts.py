"""The agent's n episodes per task and their rewards R_agent (one GRPO group per task)."""

from __future__ import annotations

from typing import Sequence

from genenv_jax.episodes import EpisodeCaps, EpisodeStats, run_episodes
from genenv_jax.loop.context import STREAM_REFILL, STREAM_ROLLOUTS, LoopContext, epoch_seed
from genenv_jax.loop.epoch_tasks import EpochTask, RolloutGroup
from genenv_jax.loop.policy import Placement, Policy


def episode_caps(ctx: LoopContext, agent: Policy) -> EpisodeCaps:
    s, e = agent.settings.sampling, ctx.config.episodes
    return EpisodeCaps(max_turns=e.max_turns, max_total_tokens=e.max_total_tokens, max_new_tokens=s.max_new_tokens,
                       max_prompt_len=s.max_prompt_len)


def rollout_seed(ctx: LoopContext, epoch: int, turn: int, refill_round: int = 0) -> int:
    """The sampler seed of one turn of an epoch's rollouts (refill round r > 0 of dynamic sampling:
    streams of their own, so refills never repeat the first round's random draws)."""
    if refill_round:
        return epoch_seed(ctx.config.seed, epoch, (STREAM_REFILL * 1000 + refill_round) * 1000 + turn)
    return ctx.seed(epoch, STREAM_ROLLOUTS) if turn == 0 else epoch_seed(ctx.config.seed, epoch,
                                                                         STREAM_ROLLOUTS * 1000 + turn)


def rollouts(ctx: LoopContext, agent: Policy, weights: Placement, envs, records: Sequence[EpochTask], epoch: int,
             refill_round: int = 0) -> EpisodeStats:
    """The rollout stage: `rollouts_per_task` episodes of every record's task, every turn's live
    episodes as one sampler batch; sets each record's `rollouts` (left None for a task that could
    not start) and returns what the episodes cost and met (`EpisodeStats`, its `counts` included).
    `weights`: the agent's weights as the epoch placed them (one copy for every turn and round)."""
    n = ctx.config.rollouts_per_task
    caps = episode_caps(ctx, agent)

    def sample(prompts, turn):  # multi-turn: each turn's sequences stay in the prefix pool for the next
        return agent.sample(weights, prompts, rollout_seed(ctx, epoch, turn, refill_round), ctx.text.stop_ids,
                            retain=caps.max_turns > 1)

    what = f"refill {refill_round}" if refill_round else "agent episodes"
    with ctx.progress(len(records) * n, f"epoch {epoch}: {what}", unit="episode") as bar:
        groups, stats = run_episodes([r.task for r in records], n, envs, ctx.text, caps, sample, bar)
    for episodes in groups:
        record = records[episodes[0].episode_id // n]  # episode ids are task index * n + k
        record.rollouts = RolloutGroup(record.task, episodes, record.replayed)
    return stats

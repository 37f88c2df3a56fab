"""The agent's n rollouts per task and their rewards R_agent (one GRPO group per task)."""

from __future__ import annotations

import collections
import dataclasses
from typing import Sequence

import numpy as np

from genenv_jax import tokenization
from genenv_jax.domains.base import Task
from genenv_jax.loop.context import STREAM_ROLLOUTS, LoopContext
from genenv_jax.loop.policy import Policy
from genenv_jax.sampling import FINISH_STOP


@dataclasses.dataclass
class RolloutGroup:
    """A task's n agent rollouts (one GRPO group)."""

    task: Task
    prompt: list[int]
    responses: list[list[int]]
    logprobs: list[np.ndarray]
    texts: list[str]
    rewards: list[float]
    valid: list[bool]        # ended with a stop token and every tool-call block parsed
    finish_reasons: list[str]
    replayed: bool = False


def _score(ctx: LoopContext, task: Task, text: str, counters: collections.Counter) -> float:
    """R_agent; an unexpected exception in the verifier scores 0 and is counted by type."""
    try:
        return float(ctx.domain.score(task, text))
    except Exception as e:  # noqa: BLE001 - model text must never stop the run
        counters[f"score_exception/{type(e).__name__}"] += 1
        return 0.0


def _valid(text: str, finish_reason: str, counters: collections.Counter) -> bool:
    try:
        return finish_reason == FINISH_STOP and tokenization.parse_tool_calls(text).ok
    except Exception as e:  # noqa: BLE001
        counters[f"tool_call_parse_exception/{type(e).__name__}"] += 1
        return False


def rollouts(ctx: LoopContext, agent: Policy, agent_params, tasks: Sequence[Task], replayed: Sequence[bool],
             epoch: int, counters: collections.Counter) -> list[RolloutGroup]:
    """Samples `rollouts_per_task` responses per task in one batch and scores each."""
    n = ctx.config.rollouts_per_task
    prompts, kept = [], []
    for task, rep in zip(tasks, replayed):
        ids = ctx.text.prompt(ctx.domain.agent_prompt(task))
        if len(ids) > agent.settings.sampling.max_prompt_len:
            counters["agent_prompt_too_long"] += 1
            continue
        prompts.append(ids)
        kept.append((task, rep))
    flat = [p for p in prompts for _ in range(n)]
    with ctx.progress(len(flat), f"epoch {epoch}: agent rollouts") as bar:
        out = agent.sample(agent_params, flat, ctx.seed(epoch, STREAM_ROLLOUTS), ctx.text.stop_ids, bar)
    toks, lps = out.token_lists(), out.logprob_lists()
    groups = []
    for i, ((task, rep), prompt) in enumerate(zip(kept, prompts)):
        rows = range(i * n, (i + 1) * n)
        texts = [ctx.text.decode(toks[j]) for j in rows]
        reasons = [out.finish_reasons[j] for j in rows]
        groups.append(RolloutGroup(
            task, prompt, [toks[j] for j in rows], [lps[j] for j in rows], texts,
            rewards=[_score(ctx, task, t, counters) for t in texts],
            valid=[_valid(t, r, counters) for t, r in zip(texts, reasons)], finish_reasons=reasons, replayed=rep))
    return groups

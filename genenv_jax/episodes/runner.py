"""Batched multi-turn episodes: each turn, the next prompts of all live episodes go to the sampler
as one batch, the environments answer every agent turn, and finished episodes drop out.

An episode's tokens after its first prompt alternate agent turns (sampled, in the loss) and
observations (tool results, user turns: rendered by the chat template, never in the loss), so a
trajectory trains as one sequence with `loss_mask` on the agent's tokens. A single-turn task is
an episode of one turn: there is one rollout path.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import time
from typing import Any, Callable, Sequence

import numpy as np

from genenv_jax.text import tokenization
from genenv_jax.text.chat_text import ChatText
from genenv_jax.domains.base import Message, ScoreResult, StepOutcome, Task, last_assistant_text
from genenv_jax.episodes.environments import EnvFailure
from genenv_jax.domains.requests import Close, Reset, Score, Step
from genenv_jax.sampling import FINISH_STOP, PrefillCounts, SampleOutput

# sample(prompts, turn) -> one SampleOutput row per prompt, in order
SampleFn = Callable[[list[list[int]], int], SampleOutput]
END_DONE = "done"                # the environment ended the episode
END_MAX_TURNS = "max_turns"      # the turn cap
END_MAX_TOKENS = "max_tokens"    # another turn could pass the total-token cap
END_TURN_TOKENS = "turn_tokens"  # an agent turn hit the per-turn cap before the episode was done


@dataclasses.dataclass(frozen=True)
class EpisodeCaps:
    max_turns: int          # agent turns per episode
    max_total_tokens: int   # first prompt + everything after it
    max_new_tokens: int     # per agent turn (the sampler's cap)
    max_prompt_len: int     # a task whose first prompt is longer is skipped


@dataclasses.dataclass
class Episode:
    """One agent attempt at a task, as text (transcript) and as the token sequence it trains on."""

    task: Task
    episode_id: int
    prompt: list[int]                # the first prompt's ids
    transcript: list[Message]        # first-prompt messages, then assistant / tool / user messages
    tokens: list[int] = dataclasses.field(default_factory=list)       # everything after the prompt
    loss_mask: list[float] = dataclasses.field(default_factory=list)  # 1 on agent tokens
    logprobs: list[float] = dataclasses.field(default_factory=list)   # sampler logprobs; 0 off agent tokens
    turns: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    states: list[str] = dataclasses.field(default_factory=list)  # per turn: `state_key` of what it answered
    end_reason: str = ""
    reward: float = 0.0
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def final_text(self) -> str:
        return last_assistant_text(self.transcript)

    @property
    def valid(self) -> bool:
        """Ended by the environment, every agent turn stopped on its own with well-formed tool calls."""
        return self.end_reason == END_DONE and all(t["finish"] == FINISH_STOP and t["calls_ok"] for t in self.turns)

    def turn_spans(self) -> list[tuple[int, int]]:
        """Half-open [start, end) of each agent turn's tokens in `tokens`, in turn order."""
        spans, pos = [], 0
        for turn in self.turns:
            spans.append((pos, pos + turn["agent_tokens"]))
            pos += turn["agent_tokens"] + turn.get("observation_tokens", 0)
        return spans

    def response_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(loss mask, logprobs) over `tokens`, float32."""
        return np.asarray(self.loss_mask, np.float32), np.asarray(self.logprobs, np.float32)


@dataclasses.dataclass
class EpisodeStats:
    """What a batch of episodes cost: sampler and environment time, environment steps, and the
    sampler's prefill tokens over every turn (requested, computed, reused from its prefix pool)."""

    sample_s: float = 0.0
    env_s: float = 0.0
    env_steps: int = 0
    prefill: PrefillCounts = dataclasses.field(default_factory=PrefillCounts)
    # events by name: tasks skipped (`agent_prompt_too_long`, `reset_failed/<reason>`), environment
    # errors (`env_errors/<reason>`), failed scores (`score_failed/<reason>`)
    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def metrics(self, episodes: Sequence[Episode]) -> dict[str, float | int | None]:
        ends = collections.Counter(e.end_reason for e in episodes)
        busy = self.sample_s + self.env_s
        return {
            "episodes/turns_mean": _mean([len(e.turns) for e in episodes]),
            "episodes/tokens_mean": _mean([len(e.prompt) + len(e.tokens) for e in episodes]),
            "episodes/agent_tokens_mean": _mean([sum(e.loss_mask) for e in episodes]),
            **{f"episodes/end/{reason}": count for reason, count in sorted(ends.items())},
            "time/env_wait_share": self.env_s / busy if busy > 0 else None,
            "env_steps_per_s": self.env_steps / self.env_s if self.env_s > 0 else None,
            "sampler/prefill_requested_tokens": self.prefill.requested,
            "sampler/prefill_computed_tokens": self.prefill.computed,
            "sampler/prefill_reused_fraction": self.prefill.reused_fraction,
            "sampler/prefix_unsaved_rows": self.prefill.unsaved,
        }


def state_key(messages: Sequence[Message]) -> str:
    """The anchor-state key of an agent turn: a digest of the messages it answered (the first prompt,
    or the previous turn's observation), equal exactly when their roles and texts are (GiGPO)."""
    text = json.dumps([dict(m) for m in messages], sort_keys=True, ensure_ascii=False)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def _calls_ok(text: str) -> bool:
    return tokenization.parse_tool_calls(text).ok


def _end(ep: Episode, reason: str) -> None:
    ep.end_reason = reason
    last_agent = max((i for i, m in enumerate(ep.loss_mask) if m), default=-1)
    del ep.tokens[last_agent + 1:], ep.loss_mask[last_agent + 1:], ep.logprobs[last_agent + 1:]


def run_episodes(tasks: Sequence[Task], n: int, envs, text: ChatText, caps: EpisodeCaps, sample: SampleFn,
                 progress=None) -> tuple[list[list[Episode]], EpisodeStats]:
    """`n` episodes per task; returns one group of n per task that could start (task order kept).

    `envs` is a LocalEnvironments or WorkerEnvironments. A task whose first prompt is too long
    is skipped (`agent_prompt_too_long`); one whose environment fails to reset is skipped
    (`reset_failed/<reason>`). Every cap that ends an episode is its end reason. What happened on
    the way is counted in the returned stats (`EpisodeStats.counts`).
    """
    stats = EpisodeStats()
    ids = [(t, k) for t in range(len(tasks)) for k in range(n)]
    t0 = time.perf_counter()
    first = envs.call([Reset(i, tasks[t]) for i, (t, _) in enumerate(ids)])
    stats.env_s += time.perf_counter() - t0
    groups: list[list[Episode]] = []
    for t, task in enumerate(tasks):
        answers = first[t * n:(t + 1) * n]
        failure = next((a for a in answers if isinstance(a, EnvFailure)), None)
        prompt = None if failure else text.prompt(answers[0])
        if failure is not None or len(prompt) > caps.max_prompt_len:
            stats.counts[f"reset_failed/{failure.reason}" if failure else "agent_prompt_too_long"] += 1
            envs.call([Close(t * n + k) for k in range(n)])
            continue
        groups.append([Episode(task, t * n + k, list(prompt), [dict(m) for m in answers[k].messages],
                               states=[state_key(answers[k].messages)]) for k in range(n)])
    live = [ep for group in groups for ep in group]
    turn = 0
    while live:
        t0 = time.perf_counter()
        out = sample([ep.prompt + ep.tokens for ep in live], turn)
        stats.sample_s += time.perf_counter() - t0
        if out.stats is not None:
            stats.prefill.add(out.stats.prefill)
        texts = []
        for ep, toks, lps, finish in zip(live, out.token_lists(), out.logprob_lists(), out.finish_reasons):
            agent_text = text.decode(toks)
            texts.append(agent_text)
            ep.tokens += toks
            ep.loss_mask += [1.0] * len(toks)
            ep.logprobs += [float(x) for x in lps]
            ep.transcript.append({"role": "assistant", "content": agent_text})
            ep.turns.append({"agent_tokens": len(toks), "finish": finish, "calls_ok": _calls_ok(agent_text)})
        t0 = time.perf_counter()
        outcomes = envs.call([Step(ep.episode_id, agent_text) for ep, agent_text in zip(live, texts)])
        stats.env_s += time.perf_counter() - t0
        stats.env_steps += len(live)
        before = len(live)
        live = [ep for ep, outcome in zip(live, outcomes) if _apply(ep, outcome, caps, text, stats.counts)]
        if progress is not None:
            progress.update(before - len(live))  # episodes finished this turn
        turn += 1
    _score(groups, envs, stats)
    return groups, stats


def _apply(ep: Episode, outcome: StepOutcome | EnvFailure, caps: EpisodeCaps, text: ChatText,
           counts: collections.Counter) -> bool:
    """Records the environment's answer to the episode's latest turn; True while it goes on."""
    if isinstance(outcome, EnvFailure):
        _end(ep, outcome.reason)
        return False
    for reason, count in outcome.info.get("errors", {}).items():
        counts[f"env_errors/{reason}"] += int(count)
    ep.turns[-1]["info"] = outcome.info
    if outcome.done:
        _end(ep, END_DONE)
        return False
    if ep.turns[-1]["finish"] != FINISH_STOP:
        _end(ep, END_TURN_TOKENS)
        return False
    observation = text.continuation(outcome.observation)
    ep.tokens += observation
    ep.loss_mask += [0.0] * len(observation)
    ep.logprobs += [0.0] * len(observation)
    ep.transcript.extend(dict(m) for m in outcome.observation)
    ep.turns[-1]["observation_tokens"] = len(observation)
    if len(ep.turns) >= caps.max_turns:
        _end(ep, END_MAX_TURNS)
        return False
    if len(ep.prompt) + len(ep.tokens) + caps.max_new_tokens > caps.max_total_tokens:
        _end(ep, END_MAX_TOKENS)
        return False
    ep.states.append(state_key(outcome.observation))  # the next turn answers this observation
    return True


def _score(groups: Sequence[Sequence[Episode]], envs, stats: EpisodeStats) -> None:
    """R_agent of every episode from its environment; a failed score is reward 0, counted."""
    episodes = [ep for group in groups for ep in group]
    t0 = time.perf_counter()
    results = envs.call([Score(ep.episode_id, ep.transcript) for ep in episodes])
    envs.call([Close(ep.episode_id) for ep in episodes])
    stats.env_s += time.perf_counter() - t0
    for ep, result in zip(episodes, results):
        if isinstance(result, ScoreResult):
            ep.reward, ep.details = float(result.reward), dict(result.details)
        else:
            stats.counts[f"score_failed/{result.reason}"] += 1
            ep.reward, ep.details = 0.0, {"error_type": result.reason, "detail": result.detail}

"""A level-3 episode (Plan + Retrieve + Call): the agent works through a requirement with the tool searcher.

Each agent reply with a call is executed on the episode's own API state and its result comes back;
a reply without a call ends the episode (so does the call cap). The score re-executes the
transcript's calls on a fresh state and matches the gold calls in order: each gold call is matched
by the first later predicted call whose result `is_correct` accepts. R_agent is the fraction of
gold calls matched (1.0 = every call of the dialogue reproduced). `scoring` decides how calls run
and which rules judge them ("official": the original's lv3_apis rules; "strict": ours); the score
details also carry the strict fraction (`metric/strict_correct`) when the scoring is official.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from genenv_jax.domains.api_bank import metrics
from genenv_jax.domains.api_bank.calls import ParsedCall, attempted_call, parse_call
from genenv_jax.domains.api_bank.prompts import level3_prompt, observation
from genenv_jax.domains.base import ChatPrompt, Environment, Message, ScoreResult, StepOutcome

DEFAULT_MAX_CALLS = 20


def agent_calls(transcript: Sequence[Message], call_format: str, max_calls: int) -> list[ParsedCall | None]:
    """The calls of a transcript's assistant messages, in order, up to the first reply without one
    (None for a reply that tried to call but could not be read)."""
    calls: list[ParsedCall | None] = []
    for message in transcript:
        if message.get("role") != "assistant" or len(calls) >= max_calls:
            continue
        text = str(message.get("content", ""))
        if not attempted_call(text, call_format):
            break
        calls.append(parse_call(text, call_format))
    return calls


def match_gold(gold_calls: Sequence[Mapping[str, Any]], results: Sequence[tuple[ParsedCall, Any]],
               scoring: str = "strict") -> list[bool]:
    """Per gold call, whether a predicted call at or after the previous match reproduces it (in order)."""
    from genenv_jax.domains.api_bank.correctness import is_correct

    matched, start = [], 0
    for gold in gold_calls:
        expected = metrics.as_result(gold["result"])
        hit = next((j for j in range(start, len(results))
                    if is_correct(expected, results[j][1], scoring, "level-3")), None)
        matched.append(hit is not None)
        if hit is not None:
            start = hit + 1
    return matched


def _matched(init_database_dir: str, gold_calls: Sequence[Mapping[str, Any]], calls: Sequence[ParsedCall | None],
             scoring: str) -> list[bool]:
    bank = metrics.fresh_bank(init_database_dir, "level-3", scoring)
    results = [(c, bank.call(c.name, dict(c.params))) for c in calls if c is not None]
    return match_gold(gold_calls, results, scoring)


def score_dialogue(init_database_dir: str, gold_calls: Sequence[Mapping[str, Any]],
                   calls: Sequence[ParsedCall | None], scoring: str = "strict") -> ScoreResult:
    """Executes `calls` on a fresh state and scores them against the gold calls (module docstring)."""
    matched = _matched(init_database_dir, gold_calls, calls, scoring)
    n = len(gold_calls)
    reward = sum(matched) / n if n else 0.0
    details = {"scoring": scoring, "matched": sum(matched), "gold_calls": n, "calls": len(calls),
               "unreadable_calls": calls.count(None), "matched_per_call": matched,
               "error_type": None if all(matched) else "missed_calls", "metric/correct": reward}
    if scoring == "official":
        strict = _matched(init_database_dir, gold_calls, calls, "strict")
        details.update({"strict_matched": sum(strict), "metric/strict_correct": sum(strict) / n if n else 0.0})
    return ScoreResult(reward, details)


class Level3Environment(Environment):
    """One level-3 dialogue (see the module docstring); never raises on agent text."""

    def __init__(self, task_prompt: Mapping[str, Any], verifier: Mapping[str, Any], init_database_dir: str,
                 call_format: str, max_calls: int = DEFAULT_MAX_CALLS, scoring: str = "strict"):
        self.prompt, self.verifier = task_prompt, verifier
        self.init_database_dir, self.call_format, self.max_calls = init_database_dir, call_format, max_calls
        self.scoring = scoring
        self.bank = metrics.fresh_bank(init_database_dir, "level-3", scoring)
        self.calls = 0
        self.done = False

    def reset(self) -> ChatPrompt:
        return level3_prompt(self.prompt["requirement"], self.prompt["searcher"], self.call_format)

    def step(self, agent_text: str) -> StepOutcome:
        if self.done:
            return StepOutcome(observation=[], done=True, info={"errors": {"step_after_done": 1}})
        if not attempted_call(agent_text, self.call_format):
            self.done = True
            return StepOutcome(observation=[], done=True, info={"end": "reply"})
        self.calls += 1
        call = parse_call(agent_text, self.call_format)
        if call is None:
            text, errors = "The API call could not be read; write it in the requested format.", {"unreadable_call": 1}
        else:
            result = self.bank.call(call.name, dict(call.params))
            text = observation(call.name, call.params, result.output, result.exception, self.call_format)
            errors = {"exception": 1} if result.exception else {}
        if self.calls >= self.max_calls:
            self.done = True
            return StepOutcome(observation=[], done=True, info={"errors": errors, "end": "call_cap"})
        return StepOutcome(observation=[{"role": "tool", "content": text}], done=False, info={"errors": errors})

    def score(self, transcript: Sequence[Message]) -> ScoreResult:
        calls = agent_calls(transcript, self.call_format, self.max_calls)
        return score_dialogue(self.init_database_dir, self.verifier["calls"], calls, self.scoring)


__all__ = ["DEFAULT_MAX_CALLS", "Level3Environment", "agent_calls", "match_gold", "score_dialogue"]

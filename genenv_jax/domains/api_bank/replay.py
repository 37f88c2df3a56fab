"""The gold-call replay: every test call answered with its own gold call, scored as a model's would be.

The figure measures the scorer, not a model: with a faithful evaluator each level-1/2 gold call
reproduces its recorded result, so every miss is a fact about the parser, the APIs or the data
(docs/api_bank.md lists them). Level 3 runs each dialogue's gold calls through the episode.

    python -m genenv_jax.domains.api_bank --data_dir DIR [--call_format official|structured]
        [--scoring official|strict]
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from genenv_jax.domains.base import Task


@dataclasses.dataclass(frozen=True)
class ReplayFigures:
    """Per category: (correct calls, all calls) and the misses as (task_id, api, reason)."""

    call_format: str
    counts: dict[str, tuple[int, int]]
    misses: dict[str, list[tuple[str, str, str]]]
    scoring: str = "strict"

    def lines(self) -> list[str]:
        out = [f"gold-call replay, call_format={self.call_format}, scoring={self.scoring}"]
        for category, (correct, total) in self.counts.items():
            reasons = collections.Counter(f"{api}:{reason}" for _, api, reason in self.misses[category])
            out.append(f"  {category}: {correct}/{total}" + (f"  misses {dict(reasons)}" if reasons else ""))
        return out


def _episode(domain, task: Task) -> tuple[int, int, list[tuple[str, str, str]]]:
    """Runs a level-3 task's reference turns through its environment; (matched, gold calls, misses)."""
    env = domain.environment(task)
    transcript: list[dict[str, Any]] = [*env.reset().messages]
    for text in domain.reference_turns(task):
        transcript.append({"role": "assistant", "content": text})
        outcome = env.step(text)
        transcript += outcome.observation
        if outcome.done:
            break
    details = env.score(transcript).details
    calls = task.verifier["calls"]
    misses = [(task.task_id, c["api_name"], "not_reproduced")
              for c, ok in zip(calls, details["matched_per_call"]) if not ok]
    return details["matched"], details["gold_calls"], misses


def replay_gold(domain, split: str = "test") -> ReplayFigures:
    """The replay figures of `domain`'s call categories on `split` (its call_format decides the parser, its
    scoring how calls run and are judged)."""
    counts: dict[str, list[int]] = {}
    misses: dict[str, list[tuple[str, str, str]]] = {}
    for task in domain.seeds(split):
        if task.category.endswith("-response"):
            continue
        row = counts.setdefault(task.category, [0, 0])
        miss = misses.setdefault(task.category, [])
        if task.category == "level-3":
            matched, total, lost = _episode(domain, task)
            row[0] += matched
            row[1] += total
            miss += lost
            continue
        details = domain.score_details(task, domain.reference_response(task)).details
        row[1] += 1
        if details["correct"]:
            row[0] += 1
        else:
            miss.append((task.task_id, task.verifier["gold"]["api_name"], details["error_type"]))
    return ReplayFigures(domain.call_format, {c: (r[0], r[1]) for c, r in counts.items()}, misses, domain.scoring)


__all__ = ["ReplayFigures", "replay_gold"]

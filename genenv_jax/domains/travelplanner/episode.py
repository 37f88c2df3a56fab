"""TravelPlanner episodes: the plan's score, and the two-stage environment (tools, then the plan).

The score runs the benchmark's evaluator (metrics.evaluate_plan) on the plan read from the agent's
text. Reward "final_pass" is the benchmark's headline (1 when every commonsense and every asked hard
constraint holds); "constraint_fraction" is a shaped alternative for RL: the share of the judged
checks (8 commonsense + the asked hard ones) that pass, 0 for an undelivered plan.
"""

from __future__ import annotations

import collections
import json
from typing import Any, Sequence

from genenv_jax.domains.base import ChatPrompt, Environment, Message, ScoreResult, StepOutcome
from genenv_jax.domains.travelplanner.commonsense import COMMONSENSE_CHECKS
from genenv_jax.domains.travelplanner.database import Database
from genenv_jax.domains.travelplanner.hard import HARD_CHECKS
from genenv_jax.domains.travelplanner.metrics import PlanVerdict, evaluate_plan
from genenv_jax.domains.travelplanner.prompts import read_plan, two_stage_prompt
from genenv_jax.domains.travelplanner.tools import FlightTable, Toolbox
from genenv_jax.text.tokenization import parse_tool_calls

REWARDS = ("final_pass", "constraint_fraction")
DEFAULT_MAX_STEPS = 30  # the official two-stage agent's step cap
# Numeric detail keys per scored plan; the summary sums them over items (see domain.summary).
METRIC_KEYS = ("delivered", "commonsense_passed", "commonsense_judged", "commonsense_pass", "hard_passed",
               "hard_judged", "hard_pass", "final_pass")


def verdict_metrics(verdict: PlanVerdict) -> dict[str, float]:
    """The counts the benchmark's metric table is built from, for one plan."""
    common = [v for v in verdict.commonsense.values() if v is not None]
    hard = [v for v in verdict.hard.values() if v is not None]
    return {"delivered": float(verdict.delivered), "commonsense_passed": float(sum(common)),
            "commonsense_judged": float(len(common)), "commonsense_pass": float(verdict.commonsense_pass),
            "hard_passed": float(sum(hard)), "hard_judged": float(len(hard)), "hard_pass": float(verdict.hard_pass),
            "final_pass": float(verdict.final_pass)}


def _error_type(verdict: PlanVerdict) -> str | None:
    if not verdict.delivered:
        return "not_delivered"
    failed = [f"commonsense:{name}" for name in COMMONSENSE_CHECKS if verdict.commonsense.get(name) is False]
    failed += [f"hard:{name}" for name in HARD_CHECKS if verdict.hard.get(name) is False]
    return failed[0] if failed else None


def score_plan(query, plan: Any, db: Database, reward: str, read_error: str | None = None,
               scoring: str = "official", also: tuple[str, Any] | None = None) -> ScoreResult:
    """The evaluator's verdict on `plan` (None: not delivered) as a reward with its details.

    `also` = (scoring, database): that scoring's counts are added as `metric/<scoring>/<key>` (the
    reward stays the main scoring's), so a report can show both."""
    verdict = evaluate_plan(query, plan, db, scoring)
    metrics = verdict_metrics(verdict)
    if reward == "final_pass":
        value = metrics["final_pass"]
    else:
        judged = metrics["commonsense_judged"] + metrics["hard_judged"]
        value = (metrics["commonsense_passed"] + metrics["hard_passed"]) / judged if verdict.delivered and judged else 0.0
    reasons = dict(verdict.reasons)
    if read_error:
        reasons["delivery"] = read_error
    details = {"reward_kind": reward, "commonsense": verdict.commonsense, "hard": verdict.hard,
               "reasons": {k: str(v)[:300] for k, v in reasons.items()}, "error_type": _error_type(verdict),
               **{f"metric/{k}": v for k, v in metrics.items()}}
    if also is not None:
        other = verdict_metrics(evaluate_plan(query, plan, also[1], also[0]))
        details.update({f"metric/{also[0]}/{k}": v for k, v in other.items()})
    return ScoreResult(float(value), details)


def plan_of_turns(texts: Sequence[str], max_steps: int) -> tuple[Any, str | None, int]:
    """(plan, why none, steps) of a two-stage episode's agent texts: the first reply without a
    tool-call block, within the step cap, is the plan."""
    for step, text in enumerate(texts[:max_steps], start=1):
        if not parse_tool_calls(text).attempted_call:
            plan, error = read_plan(text)
            return plan, error, step
    return None, f"no plan within {max_steps} steps", min(len(texts), max_steps)


class TwoStageEnvironment(Environment):
    """Tool use over the database, then the plan (see the module docstring); never raises on agent text."""

    def __init__(self, prompt: dict[str, Any], query, db: Database, flights: FlightTable, reward: str,
                 max_steps: int = DEFAULT_MAX_STEPS, scoring: str = "official", also: tuple | None = None):
        self.prompt, self.query, self.db, self.reward, self.max_steps = prompt, query, db, reward, max_steps
        self.scoring, self.also = scoring, also
        self.toolbox = Toolbox(db, flights)
        self.steps, self.done = 0, False

    def reset(self) -> ChatPrompt:
        return two_stage_prompt(self.prompt, self.max_steps)

    def step(self, agent_text: str) -> StepOutcome:
        if self.done:
            return StepOutcome(observation=[], done=True, info={"errors": {"step_after_done": 1}})
        self.steps += 1
        parsed = parse_tool_calls(agent_text)
        if not parsed.attempted_call:
            self.done = True
            return StepOutcome(observation=[], done=True, info={"steps": self.steps, "planned": True})
        errors: collections.Counter = collections.Counter()
        observation: list[Message] = []
        broken, calls = {e.index: e for e in parsed.errors}, iter(parsed.calls)
        for index in range(len(parsed.calls) + len(parsed.errors)):  # results in the text's order
            if index in broken:
                code, text = "malformed_call", json.dumps(
                    {"error": f"malformed tool call ({broken[index].reason}): {broken[index].detail}"[:500]})
            else:
                call = next(calls)
                text, code = self.toolbox.call(call.name, call.arguments)
            if code:
                errors[code] += 1
            observation.append({"role": "tool", "content": text})
        info = {"errors": dict(errors), "steps": self.steps, "calls": len(parsed.calls)}
        if self.steps >= self.max_steps:
            self.done = True
            return StepOutcome(observation=[], done=True, info=dict(info, step_cap=True))
        return StepOutcome(observation=observation, done=False, info=info)

    def score(self, transcript: Sequence[Message]) -> ScoreResult:
        texts = [str(m.get("content", "")) for m in transcript if m.get("role") == "assistant"]
        plan, error, steps = plan_of_turns(texts, self.max_steps)
        result = score_plan(self.query, plan, self.db, self.reward, error, self.scoring, self.also)
        return ScoreResult(result.reward, dict(result.details, steps=steps))


__all__ = ["DEFAULT_MAX_STEPS", "METRIC_KEYS", "REWARDS", "TwoStageEnvironment", "plan_of_turns", "score_plan",
           "verdict_metrics"]

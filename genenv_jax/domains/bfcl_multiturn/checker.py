"""BFCL's multi-turn verdict on an episode, computed on executions of our dispatcher.

The official `multi_turn_checker` executes model calls by `eval` of Python strings, so it never
sees model output here. This module is its driver loop re-implemented on `Dispatcher` executions
(fresh model and ground-truth instances, both kept across turns), and the comparisons are the
official functions themselves: `state_checker` (public attributes of every instance equal after
each turn whose ground truth is not empty) and `response_checker` (the turn's ground-truth results
are contained, unordered, in the model's results so far). `verify.py` measures agreement with the
official checker on the shipped ground truths and perturbations of them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import response_checker, state_checker

from genenv_jax.domains.bfcl_multiturn.scenario import Scenario

Call = dict[str, Any]  # {"name": str, "arguments": dict}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The checker's answer: valid, else BFCL's error type, its message, the turn and a short detail."""

    valid: bool
    error_type: str | None = None
    message: str | None = None
    turn: int | None = None
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error_type": self.error_type}
        if not self.valid:
            out.update({"error_message": self.message, "turn": self.turn, **self.detail})
        return out


def _short(items: Sequence[Any], n: int = 3, chars: int = 300) -> list[str]:
    return [str(x)[:chars] for x in list(items)[:n]]


def check_episode(scenario: Scenario, model_turns: Sequence[Sequence[Sequence[Call]]]) -> Verdict:
    """BFCL's verdict on the model's calls: `model_turns[t]` lists turn t's steps, each a list of calls.

    Fewer turns than the task has is BFCL's `multi_turn:force_terminated` (the agent ran out of
    steps, or the episode was cut); a turn with ground-truth calls but no model call is
    `multi_turn:empty_turn_model_response`. Exceptions inside the comparison (e.g. a directory tree
    too deep to compare) are a failed check, `checker_exception:<type>`.
    """
    if len(model_turns) != scenario.n_turns:
        return Verdict(False, "multi_turn:force_terminated",
                       f"the episode has {len(model_turns)} of the task's {scenario.n_turns} turns")
    try:
        return _check(scenario, model_turns)
    except Exception as e:  # noqa: BLE001 - an odd end state fails the check; it never stops a run
        return Verdict(False, f"checker_exception:{type(e).__name__}", str(e)[:300])


def _check(scenario: Scenario, model_turns: Sequence[Sequence[Sequence[Call]]]) -> Verdict:
    model, truth = scenario.execution(), scenario.execution()
    model_results_so_far: list[str] = []
    for turn, truth_calls in enumerate(scenario.ground_truth):
        steps = [step for step in model_turns[turn] if step]  # BFCL drops steps that decode to no call
        model_results_so_far += [model.call(c.get("name"), c.get("arguments")).result for step in steps for c in step]
        truth_results = [truth.call(c["name"], c["arguments"]).result for c in truth_calls]
        if truth_calls and not steps:
            return Verdict(False, "multi_turn:empty_turn_model_response",
                           f"Model response list is empty for turn {turn}", turn)
        if not truth_calls:  # a turn the agent cannot complete (miss_func / miss_param): not checked
            continue
        state = state_checker(model.backends.instances, truth.backends.instances)
        if not state["valid"]:
            return Verdict(False, state["error_type"], state["error_message"], turn,
                           {"differences": sorted(state["details"]["differences"])})
        response = response_checker(model_results_so_far, truth_results, turn)
        if not response["valid"]:
            return Verdict(False, response["error_type"], response["error_message"], turn,
                           {"missing_items": _short(response["details"]["missing_items"])})
    return Verdict(True)

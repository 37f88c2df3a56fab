"""The per-API rule that decides whether a call reproduces the gold call's result, in two scorings.

"official" (`official.py`): API-Bank's original rules, tolerances and bugs included. "strict" (below,
the rules as the paper defines correctness, `is_strict_correct`): most APIs compare input, output and exception. The exceptions to that, as upstream has them:
ToolSearcher compares its output only; GetToday only needs a non-empty output; Calculator ignores
spaces in the formula; RegisterUser and AppointmentRegistration ignore the random token/id they
generate; scene APIs compare scene and device names ignoring case; SearchEngine compares its results
as a sorted list.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, Mapping

SCORINGS = ("official", "strict")
RANDOM_OUTPUT_APIS = frozenset({"RegisterUser", "AppointmentRegistration"})
CASE_INSENSITIVE_APIS = frozenset({"QueryScene", "DeleteScene", "AddScene", "ModifyScene"})
SORTED_OUTPUT_APIS = frozenset({"SearchEngine"})


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _sorted(value: Any) -> Any:
    return sorted(value, key=_canonical) if isinstance(value, list) else value


def _lower(value: Any) -> Any:
    if isinstance(value, str):
        return value.lower()
    if isinstance(value, list):
        return [_lower(v) for v in value]
    if isinstance(value, dict):
        return {_lower(k): _lower(v) for k, v in value.items()}
    return value


def _without_spaces(params: Any) -> Any:
    if isinstance(params, dict):
        return {k: ("".join(v.split()) if isinstance(v, str) else v) for k, v in params.items()}
    return params


def is_correct(gold, predicted, scoring: str = "strict", suite: str = "level-1-2") -> bool:
    """Whether `predicted` (an ApiResult) reproduces `gold` (the recorded result: an ApiResult or its dict)
    under `scoring`'s rule for the API (`suite` picks the level-3 rule set in official scoring)."""
    if scoring == "official":
        from genenv_jax.domains.api_bank import official

        return official.is_correct(gold, predicted, suite)
    if scoring != "strict":
        raise ValueError(f"scoring must be one of {SCORINGS}: got {scoring!r}")
    if isinstance(gold, Mapping):
        gold = SimpleNamespace(**{k: gold.get(k) for k in ("api_name", "input", "output", "exception")})
    return is_strict_correct(gold, predicted)


def is_strict_correct(gold, predicted) -> bool:
    """The strict rule: `predicted` (an ApiResult) reproduces `gold` (the recorded ApiResult).

    A gold result without an api_name (some recorded results omit it) accepts the predicted name."""
    if gold.api_name and predicted.api_name != gold.api_name:
        return False
    name = gold.api_name or predicted.api_name
    if name == "ToolSearcher":
        return gold.output == predicted.output
    if name == "GetToday":
        return predicted.exception is None and bool(predicted.output)
    gold_input, predicted_input = gold.input or {}, predicted.input or {}
    gold_output, predicted_output = gold.output, predicted.output
    if name == "Calculator":
        gold_input, predicted_input = _without_spaces(gold_input), _without_spaces(predicted_input)
    if name in RANDOM_OUTPUT_APIS:
        gold_output, predicted_output = gold_output is not None, predicted_output is not None
    if name in SORTED_OUTPUT_APIS:
        gold_output, predicted_output = _sorted(gold_output), _sorted(predicted_output)
    gold_all = [gold_input, gold_output, gold.exception]
    predicted_all = [predicted_input, predicted_output, predicted.exception]
    if name in CASE_INSENSITIVE_APIS:
        return _lower(gold_all) == _lower(predicted_all)
    return gold_all == predicted_all    # Python equality: 150 == 150.0, as upstream compares


__all__ = ["CASE_INSENSITIVE_APIS", "RANDOM_OUTPUT_APIS", "SCORINGS", "SORTED_OUTPUT_APIS", "is_correct",
           "is_strict_correct"]

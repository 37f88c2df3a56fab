"""API-Bank's headline numbers from the evaluator's per-category table.

api_bank: call accuracy over every evaluated call category, weighted by items (a level-3 item is a
  dialogue scored by the fraction of its gold calls reproduced); level_1 / level_2 / level_3: each
  level's call accuracy; rouge_l: mean ROUGE-L F over the evaluated reply items (and per level).
Under official scoring the call numbers are the original evaluator's verdicts, and the same numbers
under strict scoring follow as strict_api_bank, strict_level_1, ... (from each item's
`metric/strict_correct`, present when the domain scored with scoring="official").
"""

from __future__ import annotations

from typing import Mapping

_CALLS = {"level_1": "level-1-api", "level_2": "level-2-api", "level_3": "level-3"}
_REPLIES = {"rouge_l_level_1": "level-1-response", "rouge_l_level_2": "level-2-response"}


def _pooled(per_category: Mapping[str, Mapping[str, float]], categories) -> float | None:
    rows = [per_category[c] for c in categories if c in per_category and per_category[c]["n"]]
    n = sum(r["n"] for r in rows)
    return sum(r["correct"] for r in rows) / n if n else None


def _strict_rows(per_category: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """The call categories' rows with `correct` from the mean `metric/strict_correct` (where present)."""
    return {c: {"n": row["n"], "correct": row["metric/strict_correct"] * row["n"]}
            for c, row in per_category.items() if c in _CALLS.values() and "metric/strict_correct" in row}


def summarize(per_category: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """The headline numbers (module docstring); a number whose categories were not evaluated is left out."""
    out: dict[str, float] = {}
    calls = [("api_bank", tuple(_CALLS.values())), *[(k, (c,)) for k, c in _CALLS.items()]]
    for key, categories in [*calls, ("rouge_l", tuple(_REPLIES.values())), *[(k, (c,)) for k, c in _REPLIES.items()]]:
        value = _pooled(per_category, categories)
        if value is not None:
            out[key] = value
    strict = _strict_rows(per_category)
    for key, categories in calls:
        value = _pooled(strict, categories)
        if value is not None:
            out[f"strict_{key}"] = value
    return out


__all__ = ["summarize"]

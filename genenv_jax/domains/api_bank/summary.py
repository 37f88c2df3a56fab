"""API-Bank's headline numbers from the evaluator's per-category table.

api_bank: call accuracy over every evaluated call category, weighted by items (a level-3 item is a
  dialogue scored by the fraction of its gold calls reproduced); level_1 / level_2 / level_3: each
  level's call accuracy; rouge_l: mean ROUGE-L F over the evaluated reply items (and per level).
"""

from __future__ import annotations

from typing import Mapping

_CALLS = {"level_1": "level-1-api", "level_2": "level-2-api", "level_3": "level-3"}
_REPLIES = {"rouge_l_level_1": "level-1-response", "rouge_l_level_2": "level-2-response"}


def _pooled(per_category: Mapping[str, Mapping[str, float]], categories) -> float | None:
    rows = [per_category[c] for c in categories if c in per_category and per_category[c]["n"]]
    n = sum(r["n"] for r in rows)
    return sum(r["correct"] for r in rows) / n if n else None


def summarize(per_category: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """The headline numbers (module docstring); a number whose categories were not evaluated is left out."""
    out: dict[str, float] = {}
    for key, categories in [("api_bank", tuple(_CALLS.values())), *[(k, (c,)) for k, c in _CALLS.items()],
                            ("rouge_l", tuple(_REPLIES.values())), *[(k, (c,)) for k, c in _REPLIES.items()]]:
        value = _pooled(per_category, categories)
        if value is not None:
            out[key] = value
    return out


__all__ = ["summarize"]

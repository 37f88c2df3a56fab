"""TravelPlanner's headline numbers from the evaluator's per-category table.

With the score details' `metric/*` means in the rows (an evaluator that averages numeric details),
the benchmark's six rates are rebuilt exactly from the per-item counts; otherwise the final pass
rate comes from the reward when it is "final_pass", and only the mean shaped reward is known when it
is "constraint_fraction".
"""

from __future__ import annotations

from typing import Mapping


def _total(per_category: Mapping[str, Mapping[str, float]], key: str) -> float:
    return sum(row[key] * row["n"] for row in per_category.values())


def summarize(per_category: Mapping[str, Mapping[str, float]], reward: str) -> dict[str, float]:
    """{'final_pass_rate', per-level final pass, and the other rates when the rows carry them}."""
    if not per_category:
        return {}
    n = sum(row["n"] for row in per_category.values())
    out: dict[str, float] = {}
    if all("metric/final_pass" in row for row in per_category.values()):
        judged_c, judged_h = _total(per_category, "metric/commonsense_judged"), _total(per_category, "metric/hard_judged")
        out.update({
            "delivery_rate": _total(per_category, "metric/delivered") / n,
            "commonsense_micro": _total(per_category, "metric/commonsense_passed") / judged_c if judged_c else 0.0,
            "commonsense_macro": _total(per_category, "metric/commonsense_pass") / n,
            "hard_micro": _total(per_category, "metric/hard_passed") / judged_h if judged_h else 0.0,
            "hard_macro": _total(per_category, "metric/hard_pass") / n,
            "final_pass_rate": _total(per_category, "metric/final_pass") / n})
        out.update({f"final_pass_{level}": row["metric/final_pass"] for level, row in per_category.items()})
    elif reward == "final_pass":
        out["final_pass_rate"] = sum(row["correct"] for row in per_category.values()) / n
        out.update({f"final_pass_{level}": row["accuracy"] for level, row in per_category.items()})
    else:
        out["constraint_fraction"] = sum(row["correct"] for row in per_category.values()) / n
        out.update({f"constraint_fraction_{level}": row["accuracy"] for level, row in per_category.items()})
    return out

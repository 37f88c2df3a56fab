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


def _rates(per_category: Mapping[str, Mapping[str, float]], prefix: str, label: str) -> dict[str, float]:
    """The six rates (and per-level final pass) from the `prefix` counts, keys prefixed by `label`."""
    n = sum(row["n"] for row in per_category.values())
    judged_c, judged_h = _total(per_category, f"{prefix}commonsense_judged"), _total(per_category, f"{prefix}hard_judged")
    out = {
        "delivery_rate": _total(per_category, f"{prefix}delivered") / n,
        "commonsense_micro": _total(per_category, f"{prefix}commonsense_passed") / judged_c if judged_c else 0.0,
        "commonsense_macro": _total(per_category, f"{prefix}commonsense_pass") / n,
        "hard_micro": _total(per_category, f"{prefix}hard_passed") / judged_h if judged_h else 0.0,
        "hard_macro": _total(per_category, f"{prefix}hard_pass") / n,
        "final_pass_rate": _total(per_category, f"{prefix}final_pass") / n}
    out.update({f"final_pass_{level}": row[f"{prefix}final_pass"] for level, row in per_category.items()})
    return {f"{label}{key}": value for key, value in out.items()}


def summarize(per_category: Mapping[str, Mapping[str, float]], reward: str, also_scoring: str = "") -> dict[str, float]:
    """{'final_pass_rate', per-level final pass, and the other rates when the rows carry them}; with
    `also_scoring` and its counts in the rows, the same rates of that scoring as '<scoring>_<rate>'."""
    if not per_category:
        return {}
    n = sum(row["n"] for row in per_category.values())
    out: dict[str, float] = {}
    if all("metric/final_pass" in row for row in per_category.values()):
        out.update(_rates(per_category, "metric/", ""))
        if also_scoring and all(f"metric/{also_scoring}/final_pass" in row for row in per_category.values()):
            out.update(_rates(per_category, f"metric/{also_scoring}/", f"{also_scoring}_"))
    elif reward == "final_pass":
        out["final_pass_rate"] = sum(row["correct"] for row in per_category.values()) / n
        out.update({f"final_pass_{level}": row["accuracy"] for level, row in per_category.items()})
    else:
        out["constraint_fraction"] = sum(row["correct"] for row in per_category.values()) / n
        out.update({f"constraint_fraction_{level}": row["accuracy"] for level, row in per_category.items()})
    return out

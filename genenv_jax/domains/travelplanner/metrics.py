"""The TravelPlanner verdict of one plan and the benchmark's metric table (Xie et al., 2024, Sec. 3).

- Delivery rate: plans delivered at all (a non-empty list of day objects, read leniently as the
  official script does: see plans.normalise_plan) / all plans.
- Commonsense micro pass rate: passed commonsense checks / all commonsense checks over all plans
  (8 per plan; an undelivered plan fails all 8). Macro: plans passing all 8 / all plans.
- Hard micro pass rate: passed hard constraints / hard constraints the queries state (budget always,
  the local constraints when present). They are judged only when the plan is complete and within the
  sandbox, as the official evaluator does; otherwise they count as failed. Macro: plans passing all of
  theirs / all plans. A budget that cannot be verified (a flight whose price is unknown: no flights
  CSV and no reference information) counts as not passed, so the figures are lower bounds there;
  the table reports how many there were.
- Final pass rate: plans passing all commonsense AND all hard constraints / all plans.

Two scorings (`SCORINGS`): "official" (the default) reproduces the benchmark's own evaluation code,
quirks included (official_commonsense.py, official_hard.py; its counting rules in `metric_table`),
so the numbers compare with published tables; "strict" follows the paper's definitions
(commonsense.py, hard.py). docs/travelplanner.md lists every difference with an example.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Sequence

from genenv_jax.domains.travelplanner.commonsense import COMMONSENSE_CHECKS, commonsense_results
from genenv_jax.domains.travelplanner.hard import HARD_CHECKS, UNVERIFIED, applicable_hard_checks, hard_results
from genenv_jax.domains.travelplanner.official_commonsense import official_commonsense_results
from genenv_jax.domains.travelplanner.official_hard import official_hard_results
from genenv_jax.domains.travelplanner.plans import PlanError, normalise_plan

SCORINGS = ("official", "strict")


@dataclasses.dataclass(frozen=True)
class PlanVerdict:
    """Per-check outcomes: True/False, or None where a hard constraint is not asked; `reasons` says why
    each failed (or why the plan was not delivered); `unverified` lists the False checks that could not
    be verified rather than failed (a budget with an unknown flight price)."""

    delivered: bool
    commonsense: dict[str, bool | None]
    hard: dict[str, bool | None]
    reasons: dict[str, str] = dataclasses.field(default_factory=dict)
    unverified: tuple[str, ...] = ()
    # Whether the hard constraints were judged (complete and within the sandbox) or just failed.
    hard_judged: bool = False

    @property
    def commonsense_pass(self) -> bool:
        return self.delivered and all(value is not False for value in self.commonsense.values())

    @property
    def hard_pass(self) -> bool:
        return self.delivered and all(value is not False for value in self.hard.values())

    @property
    def final_pass(self) -> bool:
        return self.commonsense_pass and self.hard_pass


def _undelivered(query, reason: str) -> PlanVerdict:
    asked = applicable_hard_checks(query)
    return PlanVerdict(delivered=False, commonsense=dict.fromkeys(COMMONSENSE_CHECKS, False),
                       hard={name: (False if name in asked else None) for name in HARD_CHECKS},
                       reasons={"delivery": reason})


def evaluate_plan(query, plan, db, scoring: str = "official") -> PlanVerdict:
    """Judge one plan (a day list, its JSON text, or None) for `query` against database `db`.

    Strict: delivered = a non-empty list with at least one day object (read leniently, see
    normalise_plan). Official: delivered = any non-empty plan, judged as submitted. `db` should be the
    view of the same name (Database.load(..., view="official") for official scoring).
    """
    if scoring == "official":
        return _official_verdict(query, plan, db)
    if scoring != "strict":
        raise ValueError(f"travelplanner: scoring {scoring!r} not in {SCORINGS}")
    if plan is None or plan == [] or (isinstance(plan, list) and all(day == {} for day in plan)):
        return _undelivered(query, "no plan")
    try:
        days, problems = normalise_plan(plan)
    except PlanError as error:
        return _undelivered(query, str(error))
    common = commonsense_results(query, days, db)
    if problems:
        common["complete_information"] = (False, problems[0])
    reasons = {name: why for name, (ok, why) in common.items() if not ok and why}
    if common["complete_information"][0] and common["within_sandbox"][0]:
        hard = hard_results(query, days, db)
        reasons.update({name: why for name, (ok, why) in hard.items() if ok is False and why})
        hard_values = {name: ok for name, (ok, _) in hard.items()}
        unverified = tuple(name for name, (ok, why) in hard.items()
                           if ok is False and (why or "").startswith(UNVERIFIED))
    else:
        asked = applicable_hard_checks(query)
        hard_values = {name: (False if name in asked else None) for name in HARD_CHECKS}
        reasons["hard"] = "not judged: the plan is incomplete or leaves the sandbox"
        unverified = ()
    return PlanVerdict(delivered=True, commonsense={name: ok for name, (ok, _) in common.items()},
                       hard=hard_values, reasons=reasons, unverified=unverified, hard_judged="hard" not in reasons)


def _official_verdict(query, plan, db) -> PlanVerdict:
    if isinstance(plan, str):
        try:
            plan = json.loads(plan)
        except json.JSONDecodeError as error:
            return _undelivered(query, f"plan is not JSON: {error.msg}")
    if not plan:
        return _undelivered(query, "no plan")
    if not isinstance(plan, list):
        plan = [plan]  # the original indexes whatever it is given; its checks then fail on it
    common = official_commonsense_results(query, plan, db)
    reasons = {name: why for name, (ok, why) in common.items() if ok is False and why}
    if common["complete_information"][0] and common["within_sandbox"][0]:
        hard = official_hard_results(query, plan, db)
        reasons.update({name: why for name, (ok, why) in hard.items() if ok is False and why})
        hard_values = {name: ok for name, (ok, _) in hard.items()}
    else:
        asked = applicable_hard_checks(query)
        hard_values = {name: (False if name in asked else None) for name in HARD_CHECKS}
        reasons["hard"] = "not judged: the plan is incomplete or leaves the sandbox"
    return PlanVerdict(delivered=True, commonsense={name: ok for name, (ok, _) in common.items()},
                       hard=hard_values, reasons=reasons, hard_judged="hard" not in reasons)


def _rate(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def metric_table(verdicts: Sequence[PlanVerdict]) -> dict[str, float]:
    """The six TravelPlanner rates (fractions in [0, 1]) plus the counts they were computed from.

    Either scoring: micro denominators are 8 per plan and every hard constraint the queries state;
    upstream's eval.py divides by the same numbers, fixed per split (validation 1,440 and 420)."""
    plans = len(verdicts)
    common = [value for verdict in verdicts for value in verdict.commonsense.values() if value is not None]
    hard = [value for verdict in verdicts for value in verdict.hard.values() if value is not None]
    common_total, hard_total = len(common), len(hard)
    unverifiable = sum("budget" in verdict.unverified for verdict in verdicts)
    return {
        "delivery_rate": _rate(sum(verdict.delivered for verdict in verdicts), plans),
        "commonsense_micro": _rate(sum(common), common_total),
        "commonsense_macro": _rate(sum(verdict.commonsense_pass for verdict in verdicts), plans),
        "hard_micro": _rate(sum(hard), hard_total),
        "hard_macro": _rate(sum(verdict.hard_pass for verdict in verdicts), plans),
        "final_pass_rate": _rate(sum(verdict.final_pass for verdict in verdicts), plans),
        "plans": float(plans),
        "commonsense_checks": float(common_total),
        "hard_checks": float(hard_total),
        "budget_unverifiable": float(unverifiable),
    }

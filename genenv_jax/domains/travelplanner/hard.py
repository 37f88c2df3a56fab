"""TravelPlanner's 5 hard constraints (Xie et al., 2024, Table 1): budget, room rule, room type,
cuisine, transportation. Budget applies to every query, the others only when the query states them.

Costs follow the benchmark's rules: a flight costs its price per person; self-driving int(km x 0.05)
per car of 5; a taxi int(km) per car of 4; a meal the restaurant's average cost per person; a night
the accommodation's price per room, rooms = ceil(people / maximum occupancy). Attractions are free.
Cuisines count only at restaurants outside the origin city.
"""

from __future__ import annotations

from genenv_jax.domains.travelplanner.database import rooms_needed
from genenv_jax.domains.travelplanner.plans import (
    MEALS, flight_number, is_empty, split_name_city, transport_mode, transport_route)
from genenv_jax.domains.travelplanner.reference import lookup_flight

HARD_CHECKS = ("budget", "room_rule", "room_type", "cuisine", "transportation")
CONSTRAINT_OF_CHECK = {"room_rule": "house rule", "room_type": "room type", "cuisine": "cuisine",
                       "transportation": "transportation"}
# A house rule asked for is broken by the accommodation rule that forbids it.
FORBIDDING_RULE = {"parties": "No parties", "smoking": "No smoking", "children under 10": "No children under 10",
                   "visitors": "No visitors", "pets": "No pets"}
ROOM_TYPE_OK = {"entire room": lambda kind: kind == "Entire home/apt",
                "private room": lambda kind: kind == "Private room",
                "shared room": lambda kind: kind == "Shared room",
                "not shared room": lambda kind: kind != "Shared room"}
Result = tuple["bool | None", "str | None"]
# The reason of a False that means "could not be verified" (a price the data does not give).
UNVERIFIED = "not verifiable: "


def _days(query, plan):
    return plan[: query.days]


def total_cost(query, plan, db) -> tuple[float, int]:
    """(cost of everything priced, number of items without a price: flights the database cannot
    price, accommodations whose CSV price is blank)."""
    people, cost, unpriced = query.people_number, 0.0, 0
    for day in _days(query, plan):
        value = day["transportation"]
        if not is_empty(value):
            mode, route = transport_mode(value), transport_route(value, day["current_city"])
            if mode == "flight" and route:
                status, row = lookup_flight(flight_number(value), route[0], route[1], query, db)
                if row is not None:
                    cost += row["Price"] * people
                elif status == "unverifiable":
                    unpriced += 1
            elif mode in ("self-driving", "taxi") and route:
                per_car = db.ground_cost(mode, *route)
                cost += (per_car or 0) * rooms_needed(people, 5 if mode == "self-driving" else 4)
        for meal in MEALS:
            parsed = None if is_empty(day[meal]) else split_name_city(day[meal])
            row = db.find_restaurant(*parsed) if parsed else None
            cost += row["Average Cost"] * people if row else 0
        parsed = None if is_empty(day["accommodation"]) else split_name_city(day["accommodation"])
        row = db.find_accommodation(*parsed) if parsed else None
        if row is not None and row["price"] is None:
            unpriced += 1
        elif row is not None:
            cost += row["price"] * rooms_needed(people, row["maximum occupancy"])
    return cost, unpriced


def budget(query, plan, db) -> Result:
    """Within budget. When an item has no known price and the priced rest fits, the budget cannot be
    verified: False with an UNVERIFIED reason (a pass must be verified; the metric table counts these)."""
    cost, unpriced = total_cost(query, plan, db)
    if cost > query.budget:
        return False, f"the plan costs at least {cost:.0f}, over the budget of {query.budget}"
    if unpriced:
        return False, (f"{UNVERIFIED}{unpriced} price(s) unknown (a flight with no flights CSV or reference "
                       "information, or an accommodation whose price is blank)")
    return True, None


def _accommodations(query, plan, db):
    for day in _days(query, plan):
        parsed = None if is_empty(day["accommodation"]) else split_name_city(day["accommodation"])
        if parsed:
            yield day, db.find_accommodation(*parsed)


def room_rule(query, plan, db) -> Result:
    wanted = query.local_constraint.get("house rule")
    for day, row in _accommodations(query, plan, db):
        if row is None or FORBIDDING_RULE[wanted] in (row.get("house_rules") or ""):
            return False, f"day {day['days']}: {day['accommodation']!r} does not allow {wanted}"
    return True, None


def room_type(query, plan, db) -> Result:
    wanted = query.local_constraint.get("room type")
    for day, row in _accommodations(query, plan, db):
        if row is None or not ROOM_TYPE_OK[wanted](row["room type"]):
            return False, f"day {day['days']}: {day['accommodation']!r} is not a {wanted}"
    return True, None


def cuisine(query, plan, db) -> Result:
    wanted = query.local_constraint.get("cuisine") or []
    served: set[str] = set()
    for day in _days(query, plan):
        for meal in MEALS:
            parsed = None if is_empty(day[meal]) else split_name_city(day[meal])
            row = db.find_restaurant(*parsed) if parsed else None
            if row is not None and parsed[1] != query.org:
                served.update(part.strip() for part in row["Cuisines"].split(","))
    missing = [kind for kind in wanted if kind not in served]
    return (False, f"no restaurant serves {', '.join(missing)}") if missing else (True, None)


def transportation(query, plan, db) -> Result:
    banned = {"no flight": "flight", "no self-driving": "self-driving"}[query.local_constraint["transportation"]]
    for day in _days(query, plan):
        if not is_empty(day["transportation"]) and transport_mode(day["transportation"]) == banned:
            return False, f"day {day['days']}: uses {banned}, which the query rules out"
    return True, None


_CHECKS = {"budget": budget, "room_rule": room_rule, "room_type": room_type, "cuisine": cuisine,
           "transportation": transportation}


def applicable_hard_checks(query) -> list[str]:
    """Budget always; the local constraints the query states."""
    return [name for name in HARD_CHECKS
            if name == "budget" or query.local_constraint.get(CONSTRAINT_OF_CHECK[name]) is not None]


def hard_results(query, plan, db) -> dict[str, Result]:
    """Every hard check by name: (None, 'not asked') for constraints the query does not state."""
    wanted = applicable_hard_checks(query)
    return {name: _CHECKS[name](query, plan, db) if name in wanted else (None, "not asked")
            for name in HARD_CHECKS}

"""The 5 hard constraints as TravelPlanner's own evaluator decides them (`scoring="official"`).

Judged, as there, only for a delivered plan that passes 'complete information' and 'within sandbox'.
Entries are found by official_reading's substring match, and the FIRST matching row is the one priced
and checked. What differs from hard.py (examples in docs/travelplanner.md):

- cost: a flight is priced by its number's first row; an item found in no row adds nothing; a night
  costs price x ceil(people / maximum occupancy); a car ceil(people / 5) or ceil(people / 4);
- room rule / room type: an accommodation found in no row is not held against the plan;
- cuisine: a wanted cuisine counts when it is a substring of the restaurant's "Cuisines"; a breakfast
  or lunch in the origin city skips the REST OF THAT DAY's meals (the original's `continue`);
- transportation: "Flight" / "Self-driving" are looked for case-sensitively.
"""

from __future__ import annotations

import math

from genenv_jax.domains.travelplanner.hard import FORBIDDING_RULE, HARD_CHECKS
from genenv_jax.domains.travelplanner.official_commonsense import MEALS, Result, guarded
from genenv_jax.domains.travelplanner.official_reading import (
    accommodation_rows, before_parenthesis, flight_number_text, ground_cost, name_and_city, restaurant_rows, transport_route)

ROOM_TYPE_OF = {"shared room": "Shared room", "private room": "Private room", "entire room": "Entire home/apt"}


def _days(query, plan: list) -> list:
    return plan[: query.days]


def _asked(query, key: str):
    return (query.local_constraint or {}).get(key)


def _flight_price(db, value: str, origin: str, destination: str) -> float | None:
    number = flight_number_text(value)
    rows = db.flights(before_parenthesis(origin), before_parenthesis(destination))
    row = next((row for row in rows if row["Flight Number"] == number), None)
    return None if row is None else row["Price"]


def total_cost(query, plan: list, db) -> float:
    people, cost = query.people_number, 0.0
    for day in _days(query, plan):
        value = day["transportation"]
        if value and value != "-":
            origin, destination = transport_route(value, day["current_city"])
            if origin is not None and destination is not None:
                if "flight number" in value.lower():
                    price = _flight_price(db, value, origin, destination)
                    cost += 0.0 if price is None else price * people
                elif "self-driving" in value.lower():
                    cost += ground_cost(db, "self-driving", origin, destination) * math.ceil(people / 5)
                elif "taxi" in value.lower():
                    cost += ground_cost(db, "taxi", origin, destination) * math.ceil(people / 4)
        for meal in MEALS:
            if day[meal] and day[meal] != "-":
                rows = restaurant_rows(db, day[meal])
                cost += rows[0]["Average Cost"] * people if rows else 0.0
        if day["accommodation"] and day["accommodation"] != "-":
            rows = accommodation_rows(db, day["accommodation"])
            if rows:
                cost += rows[0]["price"] * math.ceil(people / rows[0]["maximum occupancy"])
    return cost


def budget(query, plan, db) -> Result:
    cost = total_cost(query, plan, db)
    return (True, None) if cost <= query.budget else (False, f"the plan costs {cost:g}, over {query.budget}")


def _found_accommodations(query, plan, db):
    """(day number, entry, first matching row) of each accommodation the database finds; one it does
    not find is skipped, as the original skips it."""
    for number, day in enumerate(_days(query, plan), start=1):
        if day["accommodation"] and day["accommodation"] != "-":
            rows = accommodation_rows(db, day["accommodation"])
            if rows:
                yield number, day["accommodation"], rows[0]


def room_rule(query, plan, db) -> Result:
    wanted = _asked(query, "house rule")
    if wanted is None:
        return None, None
    for number, entry, row in _found_accommodations(query, plan, db):
        if FORBIDDING_RULE.get(wanted, "\0") in str(row["house_rules"]):
            return False, f"day {number}: {entry!r} does not allow {wanted}"
    return True, None


def room_type(query, plan, db) -> Result:
    wanted = _asked(query, "room type")
    if wanted is None:
        return None, None
    for number, entry, row in _found_accommodations(query, plan, db):
        kind = row["room type"]
        if (kind == "Shared room") if wanted == "not shared room" else (
                wanted in ROOM_TYPE_OF and kind != ROOM_TYPE_OF[wanted]):
            return False, f"day {number}: {entry!r} is not a {wanted}"
    return True, None


def cuisine(query, plan, db) -> Result:
    wanted = _asked(query, "cuisine")
    if not wanted:
        return None, None
    served: set[str] = set()
    for day in _days(query, plan):
        for meal in MEALS:
            if not (day[meal] and day[meal] != "-"):
                continue
            if name_and_city(day[meal])[1] == query.org:
                if meal == "dinner":
                    continue
                break  # the original's `continue` leaves the day's remaining meals unread
            rows = restaurant_rows(db, day[meal])
            if rows:
                served.update(kind for kind in wanted if kind in rows[0]["Cuisines"])
    missing = [kind for kind in wanted if kind not in served]
    return (False, f"the cuisine {missing[0]} is not satisfied") if missing else (True, None)


def transportation(query, plan, db) -> Result:
    banned = _asked(query, "transportation")
    if banned is None:
        return None, None
    label = {"no flight": "Flight", "no self-driving": "Self-driving"}.get(banned)
    for number, day in enumerate(_days(query, plan), start=1):
        if day["transportation"] and day["transportation"] != "-" and label and label in day["transportation"]:
            return False, f"day {number}: the transportation should not be {banned.removeprefix('no ')}"
    return True, None


_CHECKS = {"budget": budget, "room_rule": room_rule, "room_type": room_type, "cuisine": cuisine,
           "transportation": transportation}


def official_hard_results(query, plan: list, db) -> dict[str, Result]:
    """Every hard check by name (HARD_CHECKS order): (None, None) for a constraint not asked."""
    return {name: guarded(_CHECKS[name], query, plan, db) for name in HARD_CHECKS}


__all__ = ["official_hard_results", "total_cost"]

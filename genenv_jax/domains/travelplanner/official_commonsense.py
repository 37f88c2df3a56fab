"""The 8 commonsense checks as TravelPlanner's own evaluator decides them (`scoring="official"`).

Each function reproduces the verdict of the benchmark's check of the same meaning (see
official_reading.py for the source), on the plan exactly as submitted (a list of day objects, no
clean-up). docs/travelplanner.md lists every way these differ from the strict checks in
commonsense.py, with an example each. Where the original raises (a day without 'current_city', a
'from' with no 'to', a 'flight number' without the exact 'Flight Number: ' label), the whole official
run would stop; here that one check fails, with the reason saying so (`guarded`).
"""

from __future__ import annotations

import itertools

from genenv_jax.domains.travelplanner.commonsense import COMMONSENSE_CHECKS
from genenv_jax.domains.travelplanner.official_reading import (
    NOTHING, NOT_NEEDED, accommodation_rows, attraction_rows, before_parenthesis, day_cities, filled,
    flight_number_text, from_to, ground_cost, listed_items, restaurant_rows, route_cities,
    transport_kind)

MEALS = ("breakfast", "lunch", "dinner")
Result = tuple["bool | None", "str | None"]


def _days(query, plan: list) -> list:
    return plan[: query.days]


def _first_city_ok(query, plan: list) -> bool:
    """Day 1, when it is a 'from A to B' day, must leave from the origin (both route checks ask)."""
    first = plan[0]["current_city"] if plan else ""
    return "from" not in first or before_parenthesis(from_to(first)[0]) == query.org


def _valid_sequence(cities: list[str]) -> bool:
    """At least 3 entries; a city never comes back after its run ends, except at the two ends; an
    inner run of a single entry is invalid (each visited city is entered and left)."""
    if len(cities) < 3:
        return False
    seen, index = set(), 0
    for city, run in itertools.groupby(cities):
        length = len(list(run))
        if city in seen and index not in (0, len(cities) - 1):
            return False
        index += length
        if length == 1 and 0 < index - 1 < len(cities) - 1:
            return False
        seen.add(city)
    return True


def reasonable_city_route(query, plan, db) -> Result:
    cities: list[str] = []
    for day in _days(query, plan):
        cities += route_cities(day["current_city"])
    if not _first_city_ok(query, plan):
        return False, f"the first day's city should be {query.org}"
    if cities[0] != cities[-1]:
        return False, "the trip should be a closed circle"
    if not _valid_sequence(cities):
        return False, "the city sequence is invalid"
    for index, city in enumerate(cities):
        if city not in db.city_state:
            return False, f"{city} is not a valid city"
        if index not in (0, len(cities) - 1) and query.days > 3 and db.city_state[city] != query.dest:
            return False, f"{city} is not in {query.dest}"
    return True, None


def diverse_restaurants(query, plan, db) -> Result:
    seen: set[str] = set()
    for number, day in enumerate(_days(query, plan), start=1):
        for meal in MEALS:
            if filled(day, meal):
                if day[meal] in seen:
                    return False, f"day {number}: the {meal} restaurant {day[meal]!r} is repeated"
                seen.add(day[meal])
    return True, None


def diverse_attractions(query, plan, db) -> Result:
    seen: set[str] = set()
    for number, day in enumerate(_days(query, plan), start=1):
        if filled(day, "attraction"):
            for item in listed_items(day["attraction"]):
                if item in seen:
                    return False, f"day {number}: the attraction {item!r} is repeated"
                seen.add(item)
    return True, None


def minimum_nights(query, plan, db) -> Result:
    days = _days(query, plan)
    if any("accommodation" not in day for day in days):
        return False, "no accommodation info"
    for entry, run in itertools.groupby(day["accommodation"] for day in days):
        nights = len(list(run))
        if entry in NOTHING:
            continue
        rows = accommodation_rows(db, entry)
        if len(rows) == 1 and nights < rows[0]["minimum nights"]:
            return False, f"{entry!r} needs {rows[0]['minimum nights']:g} nights, the plan books {nights}"
    return True, None


def non_conflicting_transportation(query, plan, db) -> Result:
    if not (plan[0]["transportation"] and plan[0]["transportation"] != "-"):
        return False, "the transportation in day 1 should not be empty"
    kinds = {transport_kind(plan[0]["transportation"])}
    kinds |= {transport_kind(day["transportation"]) for day in _days(query, plan) if filled(day, "transportation")}
    if {"Self-driving", "Flight"} <= kinds or {"Taxi", "Self-driving"} <= kinds:
        return False, "the transportation is conflicting"
    return True, None


def within_current_city(query, plan, db) -> Result:
    """Each entry must contain one of the day's cities. A stay day's city is a string, so "one of its
    cities" means one of its CHARACTERS: on such a day almost any entry passes."""
    for number, day in enumerate(_days(query, plan), start=1):
        cities = day_cities(day["current_city"])
        if filled(day, "transportation") and any(city not in day["transportation"] for city in cities):
            return False, f"day {number}: the transportation is an invalid city choice"
        entries = [(meal, day[meal]) for meal in MEALS if filled(day, meal)]
        if filled(day, "attraction"):
            entries += [("attraction", item) for item in listed_items(day["attraction"])]
        for key, entry in entries:
            if not any(city in entry for city in cities):
                return False, f"day {number}: the {key} {entry!r} is an invalid city choice"
        if filled(day, "accommodation") and cities[-1] not in day["accommodation"]:
            return False, f"day {number}: the accommodation is an invalid city choice"
    return True, None


def _transport_in_sandbox(db, day: dict) -> bool:
    value = day["transportation"]
    origin, destination = from_to(value)
    if origin is None or destination is None:
        origin, destination = from_to(day["current_city"])
    if "flight number" in value.lower():
        origin, destination = before_parenthesis(origin), before_parenthesis(destination)
        number = flight_number_text(value)
        return any(row["Flight Number"] == number for row in db.flights(origin, destination))
    if "self-driving" in value.lower() or "taxi" in value.lower():
        if origin is None or destination is None:
            origin = destination = "-"
        mode = "self-driving" if "self-driving" in value.lower() else "taxi"
        return ground_cost(db, mode, origin, destination) is not None
    return True  # neither a flight number nor a car: nothing to look up


def within_sandbox(query, plan, db) -> Result:
    for number, day in enumerate(_days(query, plan), start=1):
        if day["transportation"] and day["transportation"] != "-" and not _transport_in_sandbox(db, day):
            return False, f"day {number}: the transportation {day['transportation']!r} is not in the sandbox"
        for meal in MEALS:
            if filled(day, meal) and not restaurant_rows(db, day[meal]):
                return False, f"day {number}: the {meal} {day[meal]!r} is not in the sandbox"
        if filled(day, "attraction"):
            for item in listed_items(day["attraction"]):
                if not attraction_rows(db, item):
                    return False, f"day {number}: the attraction {item!r} is not in the sandbox"
        if filled(day, "accommodation") and not accommodation_rows(db, day["accommodation"]):
            return False, f"day {number}: the accommodation {day['accommodation']!r} is not in the sandbox"
    return True, None


def _visited_count_ok(query, plan) -> bool:
    cities = {city for day in _days(query, plan) for city in route_cities(day["current_city"])}
    return _first_city_ok(query, plan) and len(cities - {query.org}) == query.visiting_city_number


def complete_information(query, plan, db) -> Result:
    days = _days(query, plan)
    if sum(day != {} and day["current_city"] != NOT_NEEDED for day in days) != query.days:
        return False, "invalid days"
    if not _visited_count_ok(query, plan):
        return False, "invalid city number"
    total = 0
    for index, day in enumerate(days):
        n, city = index + 1, day["current_city"]
        for key in ("transportation", "breakfast", "lunch", "dinner", "attraction", "accommodation"):
            if key not in day:
                return False, f"no {key} info"
        if ("from " in city or "to " in city) and day["transportation"] in NOTHING:
            return False, f"no transportation in day {n}"
        if "from " not in city and " to " not in city and day["attraction"] in NOTHING:
            return False, f"no attraction in day {n}"
        if index != query.days - 1 and day["accommodation"] in NOTHING:
            return False, f"no accommodation in day {n}"
        if any(day[meal] in NOTHING for meal in MEALS) and "from " not in city:
            return False, f"no meal in day {n}"
        total += sum(1 for key in day if day[key] and day[key] != "-")  # every key, 'days' included
    if total / (6 * query.days) < 0.5:
        return False, "the absent information is more than 50%"
    return True, None


_CHECKS = {"within_sandbox": within_sandbox, "complete_information": complete_information,
           "within_current_city": within_current_city, "reasonable_city_route": reasonable_city_route,
           "diverse_restaurants": diverse_restaurants, "diverse_attractions": diverse_attractions,
           "non_conflicting_transportation": non_conflicting_transportation, "minimum_nights": minimum_nights}
# What the original raises on a malformed plan: a missing key, a None where text is read, an index
# past the end (an empty route, no 'Flight Number: ' label), a non-dict day, a non-number.
CRASHES = (KeyError, TypeError, IndexError, AttributeError, ValueError)


def guarded(check, query, plan, db) -> Result:
    """`check`'s verdict; a crash of the original becomes a failed check with the reason."""
    try:
        return check(query, plan, db)
    except CRASHES as error:
        return False, f"the official evaluator raises here ({type(error).__name__}: {str(error)[:120]})"


def official_commonsense_results(query, plan: list, db) -> dict[str, Result]:
    """All 8 checks by name (COMMONSENSE_CHECKS order) on the plan as submitted."""
    return {name: guarded(_CHECKS[name], query, plan, db) for name in COMMONSENSE_CHECKS}


__all__ = ["CRASHES", "MEALS", "guarded", "official_commonsense_results"]

"""Single-fault changes of a gold TravelPlanner plan, one per class where the benchmark's own evaluator
(scoring="official") and the strict checks disagree (docs/travelplanner.md, "Official and strict").

Each takes (query, plan, db_all, db_official) and returns (query, changed plan) or None when the plan
offers no place for the fault. Plans are changed as submitted (no clean-up), on deep copies.
"""

from __future__ import annotations

import copy

from genenv_jax.domains.travelplanner.metrics import evaluate_plan
from genenv_jax.domains.travelplanner.plans import current_cities, split_name_city

MEALS = ("breakfast", "lunch", "dinner")


def _meal_slots(plan):
    for index, day in enumerate(plan):
        for meal in MEALS:
            if day.get(meal) not in (None, "", "-") and split_name_city(day[meal]):
                yield index, meal


def truncated_name(query, plan, db_all, db_official):
    """A restaurant named by a prefix of its name (half of its last word cut)."""
    for index, meal in _meal_slots(plan):
        name, _ = split_name_city(plan[index][meal])
        words = name.split()
        if len(words) >= 2 and len(words[-1]) > 2:
            new = copy.deepcopy(plan)
            new[index][meal] = plan[index][meal].replace(name, name[: -(len(words[-1]) // 2)], 1)
            return query, new
    return None


def state_suffix_repeat(query, plan, db_all, db_official):
    """A restaurant chosen again on a later day of its city, written "X, City(State)"."""
    slots = list(_meal_slots(plan))
    for first, first_meal in slots:
        entry = plan[first][first_meal]
        if "(" in entry:
            continue
        name, city = split_name_city(entry)
        for later, later_meal in slots:
            if later > first and city in current_cities(plan[later]["current_city"]) and plan[later][later_meal] != entry:
                new = copy.deepcopy(plan)
                new[later][later_meal] = f"{name}, {city}({db_all.city_state.get(city)})"
                return query, new
    return None


def attraction_unchecked_last(query, plan, db_all, db_official):
    """An attraction list whose last item (no trailing ';') is a place that does not exist."""
    for index, day in enumerate(plan):
        if day.get("attraction") not in (None, "", "-") and len(current_cities(day.get("current_city", ""))) == 1:
            city = current_cities(day["current_city"])[0]
            new = copy.deepcopy(plan)
            new[index]["attraction"] = day["attraction"].rstrip().rstrip(";") + f";Nowhere Memorial Park, {city}"
            return query, new
    return None


def lowercase_name(query, plan, db_all, db_official):
    """A restaurant's name in lower case."""
    for index, meal in _meal_slots(plan):
        name, _ = split_name_city(plan[index][meal])
        if name != name.lower():
            new = copy.deepcopy(plan)
            new[index][meal] = plan[index][meal].replace(name, name.lower(), 1)
            return query, new
    return None


def empty_day1_transport(query, plan, db_all, db_official):
    """No transportation on day 1."""
    new = copy.deepcopy(plan)
    new[0]["transportation"] = "-"
    return query, new


def blank_cell_accommodation(query, plan, db_all, db_official):
    """A stay moved to an accommodation of the same city that has a blank cell (so the official loader
    drops it) and that the strict checks accept in every respect."""
    for day in plan:
        entry = day.get("accommodation")
        if entry in (None, "", "-") or not split_name_city(entry):
            continue
        _, city = split_name_city(entry)
        kept = {row["NAME"] for row in db_official.accommodations(city)}
        for row in db_all.accommodations(city):
            if row["NAME"] in kept or row["price"] is None or row["minimum nights"] is None:
                continue
            new = copy.deepcopy(plan)
            for other in new:
                if other.get("accommodation") == entry:
                    other["accommodation"] = f"{row['NAME']}, {city}"
            if evaluate_plan(query, new, db_all, "strict").final_pass:
                return query, new
    return None


def other_city_attraction(query, plan, db_all, db_official):
    """A stay day's first attraction replaced by one of the origin city (a real place, elsewhere)."""
    for index, day in enumerate(plan):
        if day.get("attraction") not in (None, "", "-") and len(current_cities(day.get("current_city", ""))) == 1:
            for row in db_all.attractions(query.org):
                entry = f"{row['Name']}, {query.org}"
                if ";" in row["Name"] or entry in str(plan):
                    continue
                rest = day["attraction"].split(";", 1)[1] if ";" in day["attraction"] else ""
                new = copy.deepcopy(plan)
                new[index]["attraction"] = f"{entry};{rest}"
                return query, new
    return None


def skipped_travel_day(query, plan, db_all, db_official):
    """A middle travel day "from A to B" written as a stay in B: the route jumps from A to B."""
    for index in range(1, len(plan) - 1):
        day = plan[index]
        if len(current_cities(day.get("current_city", ""))) != 2:
            continue
        if any(day.get(key) in (None, "", "-") for key in (*MEALS, "attraction")):
            continue
        new = copy.deepcopy(plan)
        new[index]["current_city"] = day["current_city"].split(" to ", 1)[1]
        return query, new
    return None


FAULTS = {fault.__name__: fault for fault in (
    truncated_name, state_suffix_repeat, attraction_unchecked_last, lowercase_name, empty_day1_transport,
    blank_cell_accommodation, other_city_attraction, skipped_travel_day)}

"""Does a TravelPlanner query have a plan in the database? The cheapest one of the benchmark's layout.

The search covers the day layout of the benchmark's annotated plans: travel on days 1, 3, 5, ... and
the last day, two nights in each city, one full day there (three meals and an attraction), nothing
booked on travel days beyond the trip and the night. Within that layout it is exact: each city's
cheapest accommodation allowed by the room type / house rule / minimum nights, its cheapest three
distinct restaurants that (over the whole trip) serve every asked cuisine, each leg's cheapest
allowed transport (self-driving for every leg, or flight/taxi per leg), over every ordered choice of
cities. A query is feasible when that plan fits the budget; a rejection names why none exists.
A plan of another layout (three nights in one city) may exist for a rejected query: acceptance is
sound, rejection is with respect to the layout.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from genenv_jax.domains.travelplanner.database import Database, normalise_name, rooms_needed
from genenv_jax.domains.travelplanner.hard import FORBIDDING_RULE, ROOM_TYPE_OK
from genenv_jax.domains.travelplanner.tools import FlightTable, route_legs

NIGHTS_PER_CITY = 2
INFEASIBLE_REASONS = ("unknown_place", "too_few_cities", "no_accommodation", "no_restaurants", "no_attraction",
                      "no_cuisine", "no_transport", "over_budget")


@dataclasses.dataclass(frozen=True)
class Feasibility:
    """The search's answer: the cheapest plan and its cost, or the reason there is none."""

    feasible: bool
    reason: str | None
    detail: str
    plan: list[dict] | None = None
    cost: float | None = None
    cities: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class _Stay:
    accommodation: dict
    stay_cost: float
    meals: dict[int, tuple[float, tuple[dict, ...]]]  # cuisine mask -> (cost, three restaurants)
    attraction: dict


@dataclasses.dataclass(frozen=True)
class _Leg:
    text: str
    cost: float
    mode: str


def _distinct_by_name(rows: list[dict], key: str) -> list[dict]:
    """The rows the evaluator can see: the first of each name (it looks names up first-match)."""
    seen: dict[str, dict] = {}
    for row in rows:
        seen.setdefault(normalise_name(row[key]), row)
    return list(seen.values())


def _accommodation(db: Database, city: str, query) -> tuple[dict, float] | None:
    rule, kind = query.local_constraint.get("house rule"), query.local_constraint.get("room type")
    best = None
    for row in _distinct_by_name(db.accommodations(city), "NAME"):
        if row["price"] is None or (row["minimum nights"] or 0) > NIGHTS_PER_CITY or ";" in row["NAME"]:
            continue
        if kind and not ROOM_TYPE_OK[kind](row["room type"]):
            continue
        if rule and FORBIDDING_RULE[rule] in (row.get("house_rules") or ""):
            continue
        cost = row["price"] * rooms_needed(query.people_number, row["maximum occupancy"]) * NIGHTS_PER_CITY
        if best is None or cost < best[1]:
            best = (row, cost)
    return best


def _meal_options(db: Database, city: str, query, cuisines: list[str]) -> dict[int, tuple[float, tuple]]:
    """For each mask of asked cuisines, the cheapest three distinct restaurants of `city` covering it."""
    by_mask: dict[int, list[dict]] = {}
    for row in _distinct_by_name(db.restaurants(city), "Name"):
        if row["Average Cost"] is None:
            continue
        served = {part.strip() for part in row["Cuisines"].split(",")}
        mask = sum(1 << i for i, cuisine in enumerate(cuisines) if cuisine in served)
        by_mask.setdefault(mask, []).append(row)
    # Three of each exact mask suffice: an optimal triple never needs a fourth of one kind.
    candidates = [row for rows in by_mask.values() for row in sorted(rows, key=lambda r: r["Average Cost"])[:3]]
    masks = {id(row): mask for mask, rows in by_mask.items() for row in rows}
    options: dict[int, tuple[float, tuple]] = {}
    for triple in itertools.combinations(candidates, 3):
        mask = masks[id(triple[0])] | masks[id(triple[1])] | masks[id(triple[2])]
        cost = sum(row["Average Cost"] for row in triple) * query.people_number
        if mask not in options or cost < options[mask][0]:
            options[mask] = (cost, triple)
    return options


def _stay(db: Database, city: str, query, cuisines: list[str]) -> _Stay | str:
    accommodation = _accommodation(db, city, query)
    if accommodation is None:
        return "no_accommodation"
    meals = _meal_options(db, city, query, cuisines)
    if not meals:
        return "no_restaurants"
    attraction = next((row for row in db.attractions(city) if ";" not in row["Name"]), None)
    if attraction is None:
        return "no_attraction"
    return _Stay(accommodation[0], accommodation[1], meals, attraction)


def _legs(db: Database, flights: FlightTable, query, origin: str, destination: str, date: str) -> dict[str, _Leg]:
    """The cheapest allowed leg per family: 'drive' (self-driving) and 'other' (flight or taxi)."""
    banned = query.local_constraint.get("transportation")
    people = query.people_number
    options: dict[str, _Leg] = {}
    if banned != "no self-driving":
        cost = db.ground_cost("self-driving", origin, destination)
        if cost is not None:
            options["drive"] = _Leg(_ground_text("Self-driving", db, origin, destination, cost),
                                    cost * rooms_needed(people, 5), "self-driving")
    other = []
    cost = db.ground_cost("taxi", origin, destination)
    if cost is not None:
        other.append(_Leg(_ground_text("Taxi", db, origin, destination, cost), cost * rooms_needed(people, 4), "taxi"))
    if banned != "no flight":
        for row in flights.flights(origin, destination, date):
            other.append(_Leg(f"Flight Number: {row['Flight Number']}, from {origin} to {destination}, "
                              f"Departure Time: {row['DepTime']}, Arrival Time: {row['ArrTime']}",
                              float(row["Price"]) * people, "flight"))
    if other:
        options["other"] = min(other, key=lambda leg: leg.cost)
    return options


def _ground_text(label: str, db: Database, origin: str, destination: str, cost: int) -> str:
    info = db.distance(origin, destination)
    return (f"{label}, from {origin} to {destination}, Duration: {info['duration']}, "
            f"Distance: {info['distance_km']:g} km, Cost: {cost}")


def candidate_cities(query, db: Database) -> list[str] | str:
    """The cities a trip may visit, or a reason code when the query's places are not TravelPlanner's."""
    if query.org not in db.city_state:
        return "unknown_place"
    if query.visiting_city_number == 1:
        return [query.dest] if query.dest in db.city_state and query.dest != query.org else "unknown_place"
    cities = [city for city in db.cities_of_state(query.dest) if city != query.org]
    if not cities:
        return "unknown_place"
    return cities if len(cities) >= query.visiting_city_number else "too_few_cities"


def search(query, db: Database, flights: FlightTable) -> Feasibility:
    """The cheapest plan of the benchmark's layout for `query`, or why there is none."""
    cities = candidate_cities(query, db)
    if isinstance(cities, str):
        return Feasibility(False, cities, f"{query.org} -> {query.dest}: not a usable TravelPlanner trip")
    cuisines = list(query.local_constraint.get("cuisine") or [])
    full = (1 << len(cuisines)) - 1
    stays, failures = {}, {}
    for city in cities:
        stay = _stay(db, city, query, cuisines)
        (failures if isinstance(stay, str) else stays)[city] = stay
    k = query.visiting_city_number
    if len(stays) < k:
        reason = max(set(failures.values()), key=list(failures.values()).count)
        return Feasibility(False, reason, f"{len(stays)} of the candidate cities can host the trip "
                                          f"({', '.join(f'{c}: {r}' for c, r in sorted(failures.items())[:5])})")
    best: tuple[float, tuple, dict, tuple] | None = None
    leg_options: dict[tuple, dict[str, _Leg]] = {}

    def legs_of(leg: tuple) -> dict[str, _Leg]:
        if leg not in leg_options:
            leg_options[leg] = _legs(db, flights, query, *leg)
        return leg_options[leg]

    seen_cuisine = False  # with a cuisine cover found, best stays None only when no route has transport
    for group in itertools.combinations(sorted(stays), k):
        meals = _cover(stays, group, full)
        if meals is None:
            continue
        seen_cuisine = True
        fixed = sum(stays[c].stay_cost for c in group) + meals[0]
        for route in itertools.permutations(group):
            legs = [legs_of(leg) for leg in route_legs(query, list(route))]
            for family in ("drive", "other"):
                if all(family in options for options in legs):
                    chosen = tuple(options[family] for options in legs)
                    total = fixed + sum(leg.cost for leg in chosen)
                    if best is None or total < best[0]:
                        best = (total, route, dict(zip(group, meals[1])), chosen)
    if best is None:
        reason = "no_cuisine" if not seen_cuisine else "no_transport"
        return Feasibility(False, reason, "no choice of cities serves every asked cuisine" if not seen_cuisine
                           else "no city order has transport for every leg")
    total, route, meals_of, legs = best
    if total > query.budget:
        return Feasibility(False, "over_budget", f"the cheapest plan costs {total:.0f}, over the budget of "
                                                 f"{query.budget}", cost=total, cities=route)
    plan = build_plan(query, route, stays, meals_of, legs)
    return Feasibility(True, None, f"cheapest plan costs {total:.0f} of {query.budget}", plan, total, route)


def _cover(stays: dict[str, _Stay], group: tuple, full: int) -> tuple[float, list[tuple]] | None:
    """The cheapest meals of each city of `group` that together cover every asked cuisine."""
    states: dict[int, tuple[float, list[tuple]]] = {0: (0.0, [])}
    for city in group:
        nxt: dict[int, tuple[float, list[tuple]]] = {}
        for mask, (cost, picks) in states.items():
            for city_mask, (meal_cost, triple) in stays[city].meals.items():
                merged, total = mask | city_mask, cost + meal_cost
                if merged not in nxt or total < nxt[merged][0]:
                    nxt[merged] = (total, picks + [triple])
        states = nxt
    return states.get(full)


def _entry(row: dict[str, Any], key: str, city: str) -> str:
    return f"{row[key]}, {city}"


def build_plan(query, route: tuple, stays: dict[str, _Stay], meals_of: dict, legs: tuple) -> list[dict]:
    """The plan as the 8-key day list: arrive, spend a day, move on; home on the last day."""
    plan, stops = [], [query.org, *route, query.org]
    for index, city in enumerate(route):
        stay, triple = stays[city], meals_of[city]
        plan.append({"days": 2 * index + 1, "current_city": f"from {stops[index]} to {city}",
                     "transportation": legs[index].text, "breakfast": "-", "attraction": "-", "lunch": "-",
                     "dinner": "-", "accommodation": _entry(stay.accommodation, "NAME", city)})
        plan.append({"days": 2 * index + 2, "current_city": city, "transportation": "-",
                     "breakfast": _entry(triple[0], "Name", city),
                     "attraction": _entry(stay.attraction, "Name", city) + ";",
                     "lunch": _entry(triple[1], "Name", city), "dinner": _entry(triple[2], "Name", city),
                     "accommodation": _entry(stay.accommodation, "NAME", city)})
    plan.append({"days": query.days, "current_city": f"from {route[-1]} to {query.org}",
                 "transportation": legs[-1].text, "breakfast": "-", "attraction": "-", "lunch": "-",
                 "dinner": "-", "accommodation": "-"})
    return plan

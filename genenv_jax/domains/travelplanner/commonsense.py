"""TravelPlanner's 8 commonsense constraints (Xie et al., 2024, Table 1), one function each.

Every check reads the first `query.days` days of a plan and returns (passed, reason); the reason names
the day and entry that failed. Written from the paper's definitions, and where the paper is brief,
from the benchmark's evaluation rules:

- within sandbox: every flight, ground trip, restaurant, attraction and accommodation exists in the
  database under the city the entry names ("Name, City"; an entry with extra text such as
  "; Cost: 14" names no known place). A flight the database cannot judge (no flights CSV and no
  reference information) is accepted when well formed between two TravelPlanner cities: it cannot be
  refuted (reference.lookup_flight);
- complete information: the plan covers every day and visits the asked number of cities; travel days
  have transportation, stay days an attraction and three meals, every night but the last an
  accommodation, and at least half of all fields are filled (an empty day-1 transportation fails
  here, not under transportation as in the official script, so one fault fails one check);
- within current city: every activity of a day is in that day's city or cities, the night's
  accommodation in the city the day ends in, and transportation connects the day's cities (checked
  city by city: the official script iterates over the characters of a one-city day's name and so
  misses, e.g., an attraction of another city);
- reasonable city route: the trip starts at the origin, returns to it, moves continuously (each day
  starts where the previous one ended), never comes back to a city it left, and every visited city is
  the destination (one-city trips) or in the destination state;
- diverse restaurants / diverse attractions: none is chosen twice;
- non-conflicting transportation: no self-driving together with a flight or a taxi;
- minimum nights: consecutive nights in an accommodation meet its "minimum nights".
"""

from __future__ import annotations

from genenv_jax.domains.travelplanner.plans import (
    MEALS, attraction_entries, current_cities, flight_number, is_empty, split_name_city, transport_mode,
    transport_route)
from genenv_jax.domains.travelplanner.reference import lookup_flight

COMMONSENSE_CHECKS = ("within_sandbox", "complete_information", "within_current_city", "reasonable_city_route",
                      "diverse_restaurants", "diverse_attractions", "non_conflicting_transportation",
                      "minimum_nights")
Result = tuple[bool, "str | None"]


def _days(query, plan):
    return plan[: query.days]


def within_sandbox(query, plan, db) -> Result:
    for day in _days(query, plan):
        n, value = day["days"], day["transportation"]
        if not is_empty(value):
            mode, route = transport_mode(value), transport_route(value, day["current_city"])
            if mode is None:
                return False, f"day {n}: transportation {value!r} is neither a flight, self-driving nor a taxi"
            if route is None:
                return False, f"day {n}: transportation {value!r} states no 'from A to B' route"
            if mode == "flight":
                number = flight_number(value)
                status, _ = lookup_flight(number, route[0], route[1], query, db)
                if status == "absent" or (status == "unverifiable" and
                                          not (number and all(city in db.city_state for city in route))):
                    return False, (f"day {n}: flight {number or value!r} from {route[0]} to {route[1]} "
                                   "is not in the database")
            elif db.ground_cost(mode, *route) is None:
                return False, f"day {n}: no {mode} route from {route[0]} to {route[1]} in the distance matrix"
        for key, finder in (*((meal, db.find_restaurant) for meal in MEALS),
                            ("accommodation", db.find_accommodation)):
            if not is_empty(day[key]):
                parsed = split_name_city(day[key])
                if parsed is None or finder(*parsed) is None:
                    return False, f"day {n}: {key} {day[key]!r} is not in the database"
        for entry in attraction_entries(day["attraction"]):
            parsed = split_name_city(entry)
            if parsed is None or db.find_attraction(*parsed) is None:
                return False, f"day {n}: attraction {entry!r} is not in the database"
    return True, None


def complete_information(query, plan, db) -> Result:
    """Days and cities as asked; the official absence rules: travel days need transportation, stay days
    an attraction and three meals, every night but the last an accommodation, half the fields filled."""
    if len(plan) < query.days:
        return False, f"the plan covers {len(plan)} of {query.days} days"
    visited = {city for day in _days(query, plan) for city in current_cities(day["current_city"])} - {query.org}
    if len(visited) != query.visiting_city_number:
        return False, f"the plan visits {len(visited)} cities, the query asks for {query.visiting_city_number}"
    filled = 0
    for index, day in enumerate(_days(query, plan)):
        n, travelling = day["days"], len(current_cities(day["current_city"])) == 2
        if is_empty(day["current_city"]):
            return False, f"day {n}: no current city"
        if travelling and is_empty(day["transportation"]):
            return False, f"day {n}: a travel day without transportation"
        if not travelling and is_empty(day["attraction"]):
            return False, f"day {n}: a stay day without an attraction"
        if index != query.days - 1 and is_empty(day["accommodation"]):
            return False, f"day {n}: no accommodation for the night"
        if not travelling and any(is_empty(day[meal]) for meal in MEALS):
            return False, f"day {n}: a stay day with a meal missing"
        filled += sum(not is_empty(str(day[key])) for key in day if key != "days")
    if filled < 0.5 * 6 * query.days:
        return False, f"only {filled} of {6 * query.days} needed fields are filled"
    return True, None


def within_current_city(query, plan, db) -> Result:
    for day in _days(query, plan):
        n, cities = day["days"], current_cities(day["current_city"])
        if not is_empty(day["transportation"]):
            missing = [city for city in cities if city not in day["transportation"]]
            if missing:
                return False, f"day {n}: transportation does not connect {', '.join(cities)}"
        entries = [(meal, day[meal], cities) for meal in MEALS if not is_empty(day[meal])]
        entries += [("attraction", entry, cities) for entry in attraction_entries(day["attraction"])]
        if not is_empty(day["accommodation"]):
            entries.append(("accommodation", day["accommodation"], cities[-1:]))
        for key, entry, allowed in entries:
            parsed = split_name_city(entry)
            if parsed is None or parsed[1] not in allowed:
                return False, f"day {n}: {key} {entry!r} is not in {' or '.join(allowed) or 'the current city'}"
    return True, None


def reasonable_city_route(query, plan, db) -> Result:
    route: list[str] = []
    for day in _days(query, plan):
        cities = current_cities(day["current_city"])
        if not cities:
            return False, f"day {day['days']}: no current city"
        if route and cities[0] != route[-1]:
            return False, f"day {day['days']} starts in {cities[0]} but day {day['days'] - 1} ended in {route[-1]}"
        route.extend(cities)
    if not route or route[0] != query.org:
        return False, f"the trip should start in {query.org}"
    if route[-1] != query.org:
        return False, f"the trip should return to {query.org}"
    blocks = [city for index, city in enumerate(route) if index == 0 or city != route[index - 1]]
    visited = blocks[1:-1]
    if len(set(visited)) != len(visited) or query.org in visited:
        return False, "the trip comes back to a city it already left"
    for city in visited:
        if city not in db.city_state:
            return False, f"{city} is not a TravelPlanner city"
        inside = city == query.dest if query.visiting_city_number == 1 else db.city_state[city] == query.dest
        if not inside:
            return False, f"{city} is not in {query.dest}"
    return True, None


def _no_repeats(query, plan, entries_of, what: str) -> Result:
    seen: set[tuple[str, str]] = set()
    for day in _days(query, plan):
        for entry in entries_of(day):
            parsed = split_name_city(entry)
            key = tuple(part.casefold() for part in parsed) if parsed else (entry.casefold(), "")
            if key in seen:
                return False, f"day {day['days']}: {what} {entry!r} is repeated"
            seen.add(key)
    return True, None


def diverse_restaurants(query, plan, db) -> Result:
    return _no_repeats(query, plan, lambda day: [day[m] for m in MEALS if not is_empty(day[m])], "restaurant")


def diverse_attractions(query, plan, db) -> Result:
    return _no_repeats(query, plan, lambda day: attraction_entries(day["attraction"]), "attraction")


def non_conflicting_transportation(query, plan, db) -> Result:
    modes = {transport_mode(day["transportation"]) for day in _days(query, plan)
             if not is_empty(day["transportation"])}
    for pair in (("self-driving", "flight"), ("self-driving", "taxi")):
        if set(pair) <= modes:
            return False, f"the trip mixes {pair[0]} with {pair[1]}"
    return True, None


def minimum_nights(query, plan, db) -> Result:
    stays: list[list] = []  # [entry, consecutive nights]
    for day in _days(query, plan):
        entry = day["accommodation"]
        if stays and stays[-1][0] == entry:
            stays[-1][1] += 1
        else:
            stays.append([entry, 1])
    for entry, nights in stays:
        parsed = None if is_empty(entry) else split_name_city(entry)
        row = db.find_accommodation(*parsed) if parsed else None
        if row is not None and row["minimum nights"] is not None and nights < row["minimum nights"]:
            return False, f"{entry!r} needs {int(row['minimum nights'])} nights, the plan books {nights}"
    return True, None


_CHECKS = {"within_sandbox": within_sandbox, "complete_information": complete_information,
           "within_current_city": within_current_city, "reasonable_city_route": reasonable_city_route,
           "diverse_restaurants": diverse_restaurants, "diverse_attractions": diverse_attractions,
           "non_conflicting_transportation": non_conflicting_transportation, "minimum_nights": minimum_nights}


def commonsense_results(query, plan, db) -> dict[str, Result]:
    """All 8 checks by name, in COMMONSENSE_CHECKS order."""
    return {name: _CHECKS[name](query, plan, db) for name in COMMONSENSE_CHECKS}

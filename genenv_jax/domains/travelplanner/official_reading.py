"""How the benchmark's own evaluator reads a plan's entries and finds them in the database.

`scoring="official"` reproduces the verdicts of TravelPlanner's evaluation code (OSU-NLP-Group/
TravelPlanner at da7c1d41: evaluation/commonsense_constraint.py, hard_constraint.py, utils/func.py,
tools/*/apis.py), quirks included, so scores compare with published tables. These are its readers,
re-derived from that code's behaviour (not copied), each with the quirk that matters:

- `name_and_city`: "Name, City" split at the last comma; the city loses a "(State)" suffix; an entry
  without a comma reads as ("-", "-"), which matches nothing.
- `before_parenthesis`: the text before the first "(...)", NOT stripped: "Austin (Texas)" -> "Austin ".
- `from_to`: the first "from A to B" (case-sensitive), B running to the next comma.
- `rows_named`: database rows of a city whose name CONTAINS the plan's name, case-sensitively, in file
  order; the first is the one priced ("Giani" finds "Giani's"; an empty name finds every row).
- `transport_kind`: taxi before self-driving before flight, by lower-cased substring.
- `listed_items`: a ';'-separated list without its last item (`split(';')[:-1]`): "A;B" checks only A.
"""

from __future__ import annotations

import re

_NAME_CITY = re.compile(r"(.*?),\s*([^,]+)(\(\w[\w\s]*\))?$")
_BEFORE_PARENTHESIS = re.compile(r"^(.*?)\([^)]*\)")
_FROM_TO = re.compile(r"from\s+(.+?)\s+to\s+([^,]+)(?=[,\s]|$)")
NOTHING = ("", "-")
NOT_NEEDED = "You don't need to fill in the information for this or later days."


def before_parenthesis(text: str) -> str:
    match = _BEFORE_PARENTHESIS.search(text)
    return match.group(1) if match else text


def name_and_city(entry: str) -> tuple[str, str]:
    match = _NAME_CITY.search(entry)
    if not match:
        return "-", "-"
    return match.group(1).strip(), before_parenthesis(match.group(2).strip()).strip()


def from_to(text: str) -> tuple[str | None, str | None]:
    match = _FROM_TO.search(text)
    return (match.group(1), match.group(2)) if match else (None, None)


def filled(day: dict, key: str) -> bool:
    """The evaluator's "this field holds something": present, truthy and not '-'."""
    return key in day and bool(day[key]) and day[key] != "-"


def listed_items(value: str) -> list[str]:
    return value.split(";")[:-1]


def transport_kind(value: str) -> str | None:
    low = value.lower()
    if "taxi" in low:
        return "Taxi"
    if "self-driving" in low:
        return "Self-driving"
    if "flight" in low:
        return "Flight"
    return None


def day_cities(current_city: str) -> list[str] | str:
    """A travel day's [A, B] (parenthesised states dropped, unstripped), or a stay day's city as a
    STRING: the evaluator iterates over it, so a stay day's checks test it character by character.
    A 'from' without a readable 'to' raises TypeError, as the evaluator does."""
    if "from" in current_city:
        origin, destination = from_to(current_city)
        return [before_parenthesis(origin), before_parenthesis(destination)]
    return before_parenthesis(current_city)


def route_cities(current_city: str) -> list[str]:
    """The cities a day contributes to the route: [A, B] for 'from A to B', else [the city]."""
    cities = day_cities(current_city)
    return cities if isinstance(cities, list) else [cities]


def rows_named(rows: list[dict], key: str, name: str) -> list[dict]:
    return [row for row in rows if name in str(row[key])]


def restaurant_rows(db, entry: str) -> list[dict]:
    name, city = name_and_city(entry)
    return rows_named(db.restaurants(city), "Name", name)


def attraction_rows(db, entry: str) -> list[dict]:
    name, city = name_and_city(entry)
    return rows_named(db.attractions(city), "Name", name)


def accommodation_rows(db, entry: str) -> list[dict]:
    name, city = name_and_city(entry)
    return rows_named(db.accommodations(city), "NAME", name)


def flight_number_text(value: str) -> str:
    """The text after 'Flight Number: ' up to the next comma; IndexError when that exact label is
    absent (the evaluator raises there too)."""
    return value.split("Flight Number: ")[1].split(",")[0]


def transport_route(value: str, current_city: str) -> tuple[str | None, str | None]:
    """The transportation entry's own 'from A to B', else the day's."""
    origin, destination = from_to(value)
    if origin is None or destination is None:
        origin, destination = from_to(current_city)
    return origin, destination


def ground_cost(db, mode: str, origin: str, destination: str) -> int | None:
    """The distance matrix's cost of one car ('self-driving' or 'taxi'), None when it has none."""
    return db.ground_cost(mode, before_parenthesis(origin), before_parenthesis(destination))


__all__ = ["NOTHING", "NOT_NEEDED", "accommodation_rows", "attraction_rows", "before_parenthesis", "day_cities",
           "filled", "flight_number_text", "from_to", "ground_cost", "listed_items", "name_and_city",
           "restaurant_rows", "route_cities", "rows_named", "transport_kind", "transport_route"]

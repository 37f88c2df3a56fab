"""TravelPlanner plans: the 8-key day list, its validation, a text parser, and readers of one entry.

A plan is a list of days, each {days, current_city, transportation, breakfast, attraction, lunch,
dinner, accommodation}; entries name places as "Name, City", attractions are ';'-separated and '-'
means "nothing planned". Submission files pad plans with trailing {} entries, which are dropped.
"""

from __future__ import annotations

import json
import re

PLAN_KEYS = ("days", "current_city", "transportation", "breakfast", "attraction", "lunch", "dinner",
             "accommodation")
MEALS = ("breakfast", "lunch", "dinner")
EMPTY = ("", "-")
_TEXT_FIELDS = {"current city": "current_city", "transportation": "transportation", "breakfast": "breakfast",
                "attraction": "attraction", "attractions": "attraction", "lunch": "lunch", "dinner": "dinner",
                "accommodation": "accommodation", "accommodations": "accommodation"}


class PlanError(ValueError):
    """A plan that is not in the submission format (the message names the day and key)."""


def _load(obj) -> list:
    if isinstance(obj, str):
        try:
            obj = json.loads(obj)
        except json.JSONDecodeError as error:
            raise PlanError(f"plan is not JSON: {error.msg} at char {error.pos}") from None
    if not isinstance(obj, list):
        raise PlanError(f"plan must be a list of day objects, got {type(obj).__name__}")
    days = list(obj)
    while days and days[-1] == {}:
        days.pop()
    if not days:
        raise PlanError("plan has no days")
    return days


def validate_plan(obj, collapse_spaces: bool = True) -> list[dict]:
    """The plan as a clean day list (strings stripped, `days` an int), or PlanError naming the key.

    Accepts the list itself or its JSON text; trailing {} padding is dropped; days must be 1..n in order.
    `collapse_spaces=False` keeps inner whitespace as written (annotated plans: the official evaluator
    matches names as written, "shared space.  Great location." with its two spaces).
    """
    clean = []
    for index, day in enumerate(_load(obj), start=1):
        if not isinstance(day, dict):
            raise PlanError(f"plan day {index}: expected an object, got {type(day).__name__}")
        missing = [key for key in PLAN_KEYS if key not in day]
        if missing:
            raise PlanError(f"plan day {index}: missing key {missing[0]!r}")
        try:
            number = int(day["days"])
        except (TypeError, ValueError):
            raise PlanError(f"plan day {index}: key 'days' is not a number: {day['days']!r}") from None
        if number != index:
            raise PlanError(f"plan day {index}: key 'days' is {number}, expected {index}")
        entry = {"days": number}
        for key in PLAN_KEYS[1:]:
            value = "-" if day[key] is None else day[key]
            if not isinstance(value, str):
                raise PlanError(f"plan day {index}: key {key!r} must be a string, got {type(value).__name__}")
            entry[key] = " ".join(value.split()) if collapse_spaces else value.strip()
        clean.append(entry)
    return clean


def normalise_plan(obj) -> tuple[list[dict], list[str]]:
    """The evaluator's lenient reading: (day list, problems). Like the official evaluator it ignores the
    `days` numbering (a 'day' key is common in submissions) and extra keys; objects holding none of the
    plan's fields (e.g. a trailing cost summary) are dropped; a missing field reads as '-' and is listed
    in `problems`, which the completeness check turns into a failure. PlanError if nothing is left."""
    days, problems = [], []
    for day in _load(obj):
        if not isinstance(day, dict) or not any(key in day for key in PLAN_KEYS[1:]):
            continue
        index = len(days) + 1
        entry = {"days": index}
        for key in PLAN_KEYS[1:]:
            value = day.get(key)
            if key not in day:
                problems.append(f"plan day {index}: missing key {key!r}")
            entry[key] = "-" if value is None else " ".join(str(value).split())
        days.append(entry)
    if not days:
        raise PlanError("plan has no day with any of the plan's fields")
    return days, problems


def parse_plan_text(text: str) -> list[dict]:
    """Read "Day 1:\\nCurrent City: ...\\nTransportation: ..." text into a validated day list.

    Markdown emphasis is ignored; a field a day does not state becomes '-' (absent information, which
    the evaluator's completeness check then judges). No "Day N" heading -> PlanError.
    """
    if not isinstance(text, str):
        raise PlanError(f"plan text must be a string, got {type(text).__name__}")
    cleaned = text.replace("**", "").replace("__", "")
    heads = list(re.finditer(r"^[ \t#>*-]*Day\s+(\d+)\s*:?[ \t]*$|^[ \t#>*-]*Day\s+(\d+)\s*:", cleaned,
                             re.M | re.I))
    if not heads:
        raise PlanError("plan text has no 'Day N:' heading")
    days = []
    for number, head in enumerate(heads, start=1):
        end = heads[number].start() if number < len(heads) else len(cleaned)
        day = {"days": number, **{key: "-" for key in PLAN_KEYS[1:]}}
        for line in cleaned[head.end():end].splitlines():
            match = re.match(r"^[ \t*-]*([A-Za-z ]+?)\s*:\s*(.*)$", line)
            if match and match.group(1).strip().lower() in _TEXT_FIELDS:
                value = match.group(2).strip()
                day[_TEXT_FIELDS[match.group(1).strip().lower()]] = value or "-"
        days.append(day)
    return validate_plan(days)


def is_empty(value: str | None) -> bool:
    return value is None or value.strip() in EMPTY


def split_name_city(entry: str) -> tuple[str, str] | None:
    """'Coco Bambu, Rockford' -> ('Coco Bambu', 'Rockford'); the city follows the last comma."""
    name, comma, city = entry.strip().rpartition(",")
    if not comma or not name.strip() or not city.strip():
        return None
    return name.strip(), _before_parenthesis(city.strip())


def _before_parenthesis(text: str) -> str:
    return re.sub(r"\s*\(.*\)\s*$", "", text).strip()


def current_cities(current_city: str) -> list[str]:
    """'from A to B' -> [A, B]; 'A' -> [A] (a trailing '(state)' is dropped)."""
    match = re.match(r"^\s*from\s+(.+?)\s+to\s+(.+?)\s*$", current_city or "", re.I)
    if match:
        return [_before_parenthesis(match.group(1)), _before_parenthesis(match.group(2))]
    return [_before_parenthesis(current_city or "")] if not is_empty(current_city) else []


def attraction_entries(value: str) -> list[str]:
    return [part.strip() for part in (value or "").split(";") if not is_empty(part)]


def transport_mode(value: str) -> str | None:
    """'flight', 'self-driving', 'taxi' or None for an entry that names none of them."""
    low = (value or "").lower()
    if "flight number" in low or re.search(r"\bflight\b", low):
        return "flight"
    if "self-driving" in low or "self driving" in low:
        return "self-driving"
    if "taxi" in low:
        return "taxi"
    return None


def transport_route(value: str, current_city: str) -> tuple[str, str] | None:
    """The (origin, destination) a transportation entry states, else the day's 'from A to B'."""
    match = re.search(r"\bfrom\s+(.+?)\s+to\s+(.+?)(?:,|;|$)", value or "", re.I)
    if match:
        return _before_parenthesis(match.group(1)), _before_parenthesis(match.group(2))
    cities = current_cities(current_city)
    return (cities[0], cities[1]) if len(cities) == 2 else None


def flight_number(value: str) -> str | None:
    match = re.search(r"Flight Number:\s*([A-Za-z]*\d+)", value or "", re.I)
    return match.group(1).upper() if match else None

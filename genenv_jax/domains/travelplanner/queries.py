"""TravelPlanner queries: the structured record and a deterministic parser of the natural-language text.

The official validation/test CSVs carry the structured fields (org, dest, days, ...); the 45 training
queries in our fine-tuning file and the 180 validation plans of postprocess/example_evaluation.jsonl
carry only the text, so `parse_query_text` recovers the same fields from it with rules built on the
closed TravelPlanner gazetteer (places.py) and the benchmark's fixed vocabulary of constraints.
"""

from __future__ import annotations

import ast
import dataclasses
import datetime
import re
from typing import Mapping

from genenv_jax.domains.travelplanner.places import CITY_STATE, STATES

LEVELS = ("easy", "medium", "hard")
HOUSE_RULES = ("parties", "smoking", "children under 10", "visitors", "pets")
ROOM_TYPES = ("entire room", "private room", "shared room", "not shared room")
CUISINES = ("Chinese", "American", "Italian", "Mexican", "Indian", "Mediterranean", "French")
TRANSPORT_RULES = ("no flight", "no self-driving")
CONSTRAINT_KEYS = ("house rule", "cuisine", "room type", "transportation")
# TravelPlanner's fixed trip shapes: 3 days -> 1 city, 5 days -> 2 cities of a state, 7 -> 3.
CITIES_FOR_DAYS = {3: 1, 5: 2, 7: 3}


class QueryParseError(ValueError):
    """A query text or CSV row that cannot be read into a Query (the message is one line)."""


@dataclasses.dataclass(frozen=True)
class Query:
    """One TravelPlanner query; `local_constraint` spells values as the benchmark does (None = absent)."""

    org: str
    dest: str
    days: int
    visiting_city_number: int
    date: tuple[str, ...]
    people_number: int
    budget: int
    local_constraint: dict
    level: str
    text: str
    reference_information: list[dict] | None = None


_MONTHS = {m: i for i, m in enumerate(
    ("January", "February", "March", "April", "May", "June", "July", "August", "September",
     "October", "November", "December"), start=1)}
_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                 "eight": 8, "nine": 9, "ten": 10, "single": 1, "a": 1}
_NUM = r"(\d+|one|two|three|four|five|six|seven|eight|nine|ten)"
_PLACES = sorted(set(CITY_STATE) | set(STATES), key=len, reverse=True)
_PLACE_RE = re.compile(r"(?<![\w.])(" + "|".join(re.escape(p) for p in _PLACES) + r")(?![\w])")
_ORG_CUE = re.compile(r"(from|depart\w*|leav\w*|start\w*|begin\w*|setting off|set off|originat\w*|"
                      r"taking off|take off)( (from|in|at))?\s*$", re.I)


def _number(token: str) -> int:
    token = token.lower()
    return int(token) if token.isdigit() else _NUMBER_WORDS[token]


def _place_mentions(text: str) -> list[tuple[int, str]]:
    return [(m.start(), m.group(1)) for m in _PLACE_RE.finditer(text)]


def _parse_places(text: str, cities: int) -> tuple[str, str]:
    mentions = _place_mentions(text)
    city_mentions = [(pos, name) for pos, name in mentions if name in CITY_STATE]
    if not city_mentions:
        raise QueryParseError(f"query names no TravelPlanner origin city: {text[:80]!r}")
    cued = [(pos, name) for pos, name in city_mentions if _ORG_CUE.search(text[max(0, pos - 20):pos])]
    org_pos, org = (cued or city_mentions)[0]
    wanted = STATES if cities > 1 else CITY_STATE
    rest = [name for pos, name in mentions if name in wanted and (pos, name) != (org_pos, org)]
    rest = [name for name in rest if name != org] or rest
    if not rest:
        kind = "state" if cities > 1 else "city"
        raise QueryParseError(f"query names no destination {kind}: {text[:80]!r}")
    return org, rest[0]


def _parse_dates(text: str) -> list[datetime.date]:
    """All calendar dates in order; a bare day ("the 8th", "and 13th") takes the nearest month."""
    year_match = re.search(r"\b(20\d\d)\b", text)
    year = int(year_match.group(1)) if year_match else 2022
    month_re = "|".join(_MONTHS)
    found: list[tuple[int, int | None, int]] = []  # (position of the day number, month or None, day)
    for m in re.finditer(rf"\b({month_re})\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?!,\d)", text):
        found.append((m.start(2), _MONTHS[m.group(1)], int(m.group(2))))
    for m in re.finditer(rf"\b(\d{{1,2}})(?:st|nd|rd|th)\s+of\s+({month_re})\b", text):
        found.append((m.start(1), _MONTHS[m.group(2)], int(m.group(1))))
    taken = {pos for pos, _, _ in found}
    for m in re.finditer(r"\b(\d{1,2})(?:st|nd|rd|th)\b", text):  # a bare ordinal: "the 8th", "and 13th"
        if m.start(1) not in taken:
            found.append((m.start(1), None, int(m.group(1))))
    found.sort()
    months = [(pos, month) for pos, month, _ in found if month]
    dates = []
    for pos, month, day in found:
        if month is None:
            before = [mo for p, mo in months if p < pos]
            after = [mo for p, mo in months if p > pos]
            month = after[0] if not before and after else (before[-1] if before else None)
        if month is not None:
            try:
                dates.append(datetime.date(year, month, day))
            except ValueError:  # "March 32nd": not a date
                continue
    return dates


def _parse_days(text: str) -> int | None:
    m = re.search(rf"\b{_NUM}[- ]days?\b", text, re.I)
    if m:
        return _number(m.group(1))
    if re.search(r"\b(one[- ])?week(-long)?\b", text, re.I):
        return 7
    return None


def _parse_people(text: str) -> int:
    patterns = (rf"\b(?:group|party) of {_NUM}\b", rf"\b{_NUM} (?:people|persons|person|individuals|"
                r"travell?ers|participants|adults|friends)\b", rf"\bfor {_NUM}\b(?! (?:days?|cities|nights?))")
    for pattern in patterns:
        m = re.search(pattern, text, re.I)
        if m:
            return _number(m.group(1))
    if re.search(r"\b(pair|couple|duo)\b", text, re.I):
        return 2
    return 1  # "solo", "alone", "single person" or no mention: TravelPlanner's easy queries are solo


def _parse_budget(text: str) -> int:
    m = re.search(r"\$\s?(\d[\d,]*)", text)
    if not m:
        raise QueryParseError(f"query states no budget ($): {text[:80]!r}")
    return int(m.group(1).replace(",", ""))


# Ordered (pattern, value) rules: the first pattern found in the lower-cased query text gives the value.
_HOUSE_RULES = ((r"\bchild|\bkids?\b", "children under 10"), (r"\bpets?\b|pet-friendly", "pets"),
                (r"\bpart(y|ies)\b(?! of)", "parties"), (r"\bsmok", "smoking"), (r"\bvisitor", "visitors"))
_ROOM_TYPES = ((r"\bprivate rooms?\b", "private room"),
               (r"\bentire (rooms?|homes?|apartments?|places?)\b", "entire room"),
               (r"non-shared|not shared|neither shared|no shared|not be shared|not a shared", "not shared room"),
               (r"\bshared rooms?\b", "shared room"))
_TRANSPORTATION = ((r"\bflights?\b|\bfly(ing)?\b|flight-based|air travel|\bairlines?\b|\bairplanes?\b|\bplanes?\b",
                    "no flight"),
                   (r"self-driv|self driv|\bdrive ourselves|\bdriving ourselves|\bdrive\b|\bdriving\b",
                    "no self-driving"))


def _first_match(text: str, rules: tuple[tuple[str, str], ...]) -> str | None:
    low = text.lower()
    return next((value for pattern, value in rules if re.search(pattern, low)), None)


def _parse_house_rule(text: str) -> str | None:
    return _first_match(text, _HOUSE_RULES)


def _parse_room_type(text: str) -> str | None:
    return _first_match(text, _ROOM_TYPES)


def _parse_transportation(text: str) -> str | None:
    return _first_match(text, _TRANSPORTATION)


def _parse_cuisines(text: str) -> list[str] | None:
    found = [(text.find(c), c) for c in CUISINES if re.search(rf"\b{c}\b", text)]
    return [c for _, c in sorted(found)] or None


def _level(constraints: dict) -> str:
    count = sum(value is not None for value in constraints.values())
    return LEVELS[min(count, 2)]


def parse_query_text(text: str) -> Query:
    """Read a TravelPlanner query text; raises QueryParseError (one line) when a field cannot be found.

    Dates: the first date found is the start; days come from "N-day"/"a week" or else the date range;
    visiting_city_number from the benchmark's fixed shape (3/5/7 days -> 1/2/3 cities) and, when the
    text states "N cities", must agree with it. Level: easy = no local constraint, medium = one,
    hard = more than one (the benchmark's hard queries carry three).
    """
    if not isinstance(text, str) or not text.strip():
        raise QueryParseError("query text is empty")
    text = " ".join(text.split())
    dates = _parse_dates(text)
    if not dates:
        raise QueryParseError(f"query states no travel dates: {text[:80]!r}")
    days = _parse_days(text)
    if days is None:
        if len(dates) < 2:
            raise QueryParseError(f"query states neither a day count nor an end date: {text[:80]!r}")
        days = (dates[1] - dates[0]).days + 1
    if days not in CITIES_FOR_DAYS:
        raise QueryParseError(f"query asks for {days} days; TravelPlanner trips last 3, 5 or 7: {text[:80]!r}")
    cities = CITIES_FOR_DAYS[days]
    stated = re.search(rf"\b{_NUM} (?:\w+ )?cities\b", text, re.I)
    if stated and _number(stated.group(1)) != cities:
        raise QueryParseError(f"query's {stated.group(0)!r} disagrees with a {days}-day trip: {text[:80]!r}")
    org, dest = _parse_places(text, cities)
    start = dates[0]
    constraints = {"house rule": _parse_house_rule(text), "cuisine": _parse_cuisines(text),
                   "room type": _parse_room_type(text), "transportation": _parse_transportation(text)}
    if re.search(r"no (specific )?preferences", text, re.I):
        constraints = dict.fromkeys(CONSTRAINT_KEYS)
    return Query(org=org, dest=dest, days=days, visiting_city_number=cities,
                 date=tuple((start + datetime.timedelta(days=i)).isoformat() for i in range(days)),
                 people_number=_parse_people(text), budget=_parse_budget(text),
                 local_constraint=constraints, level=_level(constraints), text=text,
                 reference_information=None)


def _literal(value: str, column: str):
    try:
        return ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as error:
        raise QueryParseError(f"column {column!r} is not a Python literal: {type(error).__name__}") from None


def query_from_row(row: Mapping[str, str]) -> Query:
    """Build a Query from the official CSV columns (date, local_constraint and reference_information
    are Python-literal texts, read with ast.literal_eval, never evaluated as code)."""
    missing = [key for key in ("org", "dest", "days", "date", "people_number", "budget", "query")
               if key not in row]
    if missing:
        raise QueryParseError(f"query row lacks column(s) {', '.join(missing)}")
    constraints = row.get("local_constraint") or "{}"
    constraints = _literal(constraints, "local_constraint") if isinstance(constraints, str) else constraints
    if not isinstance(constraints, Mapping):
        raise QueryParseError(f"local_constraint is a {type(constraints).__name__}; expected a dict of constraints "
                              f"({', '.join(CONSTRAINT_KEYS)})")
    constraints = {key: constraints.get(key) for key in CONSTRAINT_KEYS}
    if isinstance(constraints["cuisine"], str):
        constraints["cuisine"] = [constraints["cuisine"]]
    dates = row["date"]
    dates = _literal(dates, "date") if isinstance(dates, str) else dates
    if not isinstance(dates, (list, tuple)):
        raise QueryParseError(f"date is {type(dates).__name__} {dates!r:.80}; expected a list of dates "
                              "('YYYY-MM-DD' texts)")
    reference = row.get("reference_information")
    if isinstance(reference, str) and reference.strip():
        reference = _literal(reference, "reference_information")
    if reference and not isinstance(reference, (list, tuple)):
        raise QueryParseError(f"reference_information is a {type(reference).__name__}; expected a list of "
                              "{Description, Content} entries")
    try:
        days = int(row["days"])
        return Query(org=str(row["org"]), dest=str(row["dest"]), days=days,
                     visiting_city_number=int(row.get("visiting_city_number") or CITIES_FOR_DAYS.get(days, 1)),
                     date=tuple(str(d) for d in dates), people_number=int(row["people_number"]),
                     budget=int(float(row["budget"])), local_constraint=constraints,
                     level=str(row.get("level") or _level(constraints)), text=str(row["query"]),
                     reference_information=list(reference) if reference else None)
    except (TypeError, ValueError) as error:
        raise QueryParseError(f"query row has a malformed number: {error}") from None

"""The simulator's TravelPlanner queries: the JSON it writes, its validation, and the feasibility gate.

A generation is one JSON object: the query text and its structured fields (org, dest, days,
start_date, people_number, budget, local_constraint). It becomes a task only when the fields are
well formed, the text says what the fields say (read back with `queries.parse_query_text`), it is
not the seed itself, and the database holds a plan for it (`feasibility.search`, whose plan the
benchmark's evaluator must pass). Every other outcome is a Rejection reason, counted by the loop.
"""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

from genenv_jax.domains.records import Invalid
from genenv_jax.domains.travelplanner.feasibility import INFEASIBLE_REASONS, Feasibility, search
from genenv_jax.domains.travelplanner.queries import (
    CITIES_FOR_DAYS, CONSTRAINT_KEYS, CUISINES, HOUSE_RULES, LEVELS, ROOM_TYPES, TRANSPORT_RULES, Query,
    QueryParseError, parse_query_text)

REJECTION_REASONS = ("not_json", "bad_field", "text_mismatch", "same_as_seed") + INFEASIBLE_REASONS + (
    "plan_fails_evaluator",)
ALLOWED = {"house rule": HOUSE_RULES, "room type": ROOM_TYPES, "transportation": TRANSPORT_RULES}
MAX_PEOPLE = 8
MAX_BUDGET = 100_000
YEAR = 2022  # the database's flights are of 2022
FIELDS = ("query", "org", "dest", "days", "start_date", "people_number", "budget", "local_constraint")


def level_of(constraints: dict) -> str:
    """easy: no local constraint, medium: one, hard: more (the benchmark's hard queries state three)."""
    return LEVELS[min(sum(v is not None for v in constraints.values()), 2)]


def _json_object(text: str) -> dict:
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)
    body = fenced.group(1) if fenced else text[text.find("{"):text.rfind("}") + 1]
    try:
        value = json.loads(body)
    except json.JSONDecodeError as error:
        raise Invalid("not_json", f"not a JSON object: {error.msg} at char {error.pos}") from None
    if not isinstance(value, dict):
        raise Invalid("not_json", "the generation is not a JSON object")
    return value


def _constraints(value: Any) -> dict:
    if not isinstance(value, dict) or set(value) - set(CONSTRAINT_KEYS):
        raise Invalid("bad_field", f"local_constraint must be an object with keys among {CONSTRAINT_KEYS}")
    out = dict.fromkeys(CONSTRAINT_KEYS)
    for key, allowed in ALLOWED.items():
        if value.get(key) is not None:
            if value[key] not in allowed:
                raise Invalid("bad_field", f"local_constraint {key!r} must be one of {allowed} or null")
            out[key] = value[key]
    cuisine = value.get("cuisine")
    if cuisine is not None:
        if not isinstance(cuisine, list) or not cuisine or not all(c in CUISINES for c in cuisine) or \
                len(set(cuisine)) != len(cuisine):
            raise Invalid("bad_field", f"local_constraint 'cuisine' must be a list of distinct {CUISINES} or null")
        out["cuisine"] = list(cuisine)
    return out


def query_of(fields: dict, city_state: dict[str, str]) -> Query:
    """The Query the structured fields describe (Invalid 'bad_field' when malformed)."""
    missing = [key for key in FIELDS if key not in fields]
    if missing:
        raise Invalid("bad_field", f"missing key(s) {', '.join(missing)}")
    days, people, budget = fields["days"], fields["people_number"], fields["budget"]
    if type(days) is not int or days not in CITIES_FOR_DAYS:
        raise Invalid("bad_field", f"days must be one of {sorted(CITIES_FOR_DAYS)}")
    if type(people) is not int or not 1 <= people <= MAX_PEOPLE:
        raise Invalid("bad_field", f"people_number must be an integer 1..{MAX_PEOPLE}")
    if type(budget) is not int or not 1 <= budget <= MAX_BUDGET:
        raise Invalid("bad_field", f"budget must be an integer 1..{MAX_BUDGET}")
    try:
        start = datetime.date.fromisoformat(str(fields["start_date"]))
    except ValueError:
        raise Invalid("bad_field", "start_date must be YYYY-MM-DD") from None
    if start.year != YEAR or (start + datetime.timedelta(days=days - 1)).year != YEAR:
        raise Invalid("bad_field", f"the trip must fall in {YEAR}")
    org, dest, cities = fields["org"], fields["dest"], CITIES_FOR_DAYS[days]
    if not isinstance(org, str) or org not in city_state:
        raise Invalid("bad_field", f"org {org!r} is not a TravelPlanner city")
    states = set(city_state.values())
    if not isinstance(dest, str) or (dest not in city_state if cities == 1 else dest not in states):
        kind = "city" if cities == 1 else "state"
        raise Invalid("bad_field", f"dest {dest!r} is not a TravelPlanner {kind} (a {days}-day trip "
                                   f"visits {cities} {'city' if cities == 1 else 'cities of a state'})")
    if not isinstance(fields["query"], str) or not fields["query"].strip():
        raise Invalid("bad_field", "query must be the request's text")
    constraints = _constraints(fields["local_constraint"])
    return Query(org=org, dest=dest, days=days, visiting_city_number=cities,
                 date=tuple((start + datetime.timedelta(days=i)).isoformat() for i in range(days)),
                 people_number=people, budget=budget, local_constraint=constraints, level=level_of(constraints),
                 text=" ".join(fields["query"].split()), reference_information=None)


def _same(a: dict, b: dict) -> bool:
    norm = lambda c: {k: (sorted(v) if isinstance(v, list) else v) for k, v in c.items()}  # noqa: E731
    return norm(a) == norm(b)


def check_text(query: Query) -> None:
    """The text must state the fields: parse it back and compare (Invalid 'text_mismatch')."""
    try:
        read = parse_query_text(query.text)
    except QueryParseError as error:
        raise Invalid("text_mismatch", f"the query text cannot be read: {error}") from None
    wrong = [name for name in ("org", "dest", "days", "date", "people_number", "budget")
             if getattr(read, name) != getattr(query, name)]
    if not _same(read.local_constraint, query.local_constraint):
        wrong.append("local_constraint")
    if wrong:
        raise Invalid("text_mismatch", f"the query text does not state the same {', '.join(wrong)} "
                                       f"(read {', '.join(f'{n}={getattr(read, n)!r}' for n in wrong)})")


def as_generation(query: Query) -> str:
    """A query written as the simulator is asked to write it."""
    fields = {"query": query.text, "org": query.org, "dest": query.dest, "days": query.days,
              "start_date": query.date[0], "people_number": query.people_number, "budget": query.budget,
              "local_constraint": dict(query.local_constraint)}
    return "```json\n" + json.dumps(fields, ensure_ascii=False, indent=1) + "\n```"


def validate(text: str, seed: Query, db, flights) -> tuple[Query, Feasibility]:
    """The generated query and its cheapest plan; raises Invalid with the reason otherwise."""
    if not isinstance(text, str) or "{" not in text:
        raise Invalid("not_json", "no JSON object in the generation")
    query = query_of(_json_object(text), db.city_state)
    check_text(query)
    same = ("org", "dest", "days", "date", "people_number", "budget")
    if all(getattr(query, n) == getattr(seed, n) for n in same) and _same(query.local_constraint, seed.local_constraint):
        raise Invalid("same_as_seed", "the generation repeats the seed query")
    found = search(query, db, flights)
    if not found.feasible:
        raise Invalid(found.reason, found.detail)
    return query, found

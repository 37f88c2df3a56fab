"""The simulator's prompt for TravelPlanner: the seed query, the vocabulary, the difficulty asked for."""

from __future__ import annotations

import json
from typing import Sequence

from genenv_jax.domains.base import curriculum_line
from genenv_jax.domains.travelplanner.queries import CUISINES, HOUSE_RULES, ROOM_TYPES, TRANSPORT_RULES, Query

SIMULATOR_SYSTEM = (
    "You write travel-planning requests for an AI travel planner (the TravelPlanner benchmark). Each request "
    "asks for a round trip from an origin city, with dates, a group size, a budget and optional preferences; "
    "it is only used when a plan for it exists in the benchmark's database.")
DIFFICULTY_TEXT = {
    "harder": "Make the new request HARDER than the seed: more preferences (house rule, cuisines, room type, "
              "transportation), a longer trip through more cities, a larger group, or a tighter budget.",
    "easier": "Make the new request EASIER than the seed: fewer or no preferences, a shorter trip, a smaller "
              "group, or a more generous budget.",
    "similar": "Keep the difficulty about the SAME as the seed, with other cities, dates or numbers.",
}


def seed_fields(query: Query) -> dict:
    return {"query": query.text, "org": query.org, "dest": query.dest, "days": query.days,
            "start_date": query.date[0], "people_number": query.people_number, "budget": query.budget,
            "local_constraint": query.local_constraint}


def simulator_messages(seed: Query, recent_success: Sequence[float], difficulty: str, alpha: float,
                       example_cities: Sequence[str], states: Sequence[str]) -> list[dict[str, str]]:
    rate = curriculum_line(recent_success, alpha, difficulty, solver="The planner", doing="solves requests",
                           count=False)
    user = "\n".join([
        "Seed request:", "```json", json.dumps(seed_fields(seed), ensure_ascii=False, indent=1), "```", "",
        rate, DIFFICULTY_TEXT[difficulty], "",
        "Write ONE new request as a JSON object with these keys:",
        "- query: the request in plain English, stating the origin, the destination, the number of days, the "
        "dates (month and day), the number of people, the budget in dollars ($) and every preference;",
        "- org: the origin city; dest: the destination city for a 3-day trip (one city), or a state for a 5-day "
        "(two of its cities) or 7-day (three of its cities) trip;",
        "- days: 3, 5 or 7; start_date: YYYY-MM-DD in 2022 (the database's flights are of March 2022);",
        "- people_number: 1-8; budget: a whole number of dollars for the whole group;",
        "- local_constraint: {\"house rule\": null or one of " + json.dumps(list(HOUSE_RULES)) + ", \"cuisine\": "
        "null or a list from " + json.dumps(list(CUISINES)) + ", \"room type\": null or one of "
        + json.dumps(list(ROOM_TYPES)) + ", \"transportation\": null or one of " + json.dumps(list(TRANSPORT_RULES)) + "}.",
        "Cities must be TravelPlanner cities, for example: " + ", ".join(example_cities) + ".",
        "States: " + ", ".join(states) + ".",
        "", "Reply with the JSON object inside a ```json code block and nothing else."])
    return [{"role": "system", "content": SIMULATOR_SYSTEM}, {"role": "user", "content": user}]

"""The agent's and the simulator's prompts for TravelPlanner, and reading a plan out of agent text.

Sole-planning shows the query with its reference information and asks for the plan as the 8-key
JSON day list; two-stage shows the query and the search tools (`<tool_call>` JSON, tools.TOOL_SCHEMAS)
and takes the agent's first reply without a tool call as its plan. Either way the plan may also be
written in the benchmark's text form ("Day 1:\\nCurrent City: ..."), read by `plans.parse_plan_text`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from genenv_jax.domains.base import ChatPrompt
from genenv_jax.domains.travelplanner.plans import PLAN_KEYS, PlanError, parse_plan_text
from genenv_jax.domains.travelplanner.tools import TOOL_SCHEMAS

PLAN_RULES = (
    "Write the plan as a JSON list with one object per day and exactly these keys: "
    + ", ".join(PLAN_KEYS) + ". `days` is the day number (1, 2, ...). Name every place as \"Name, City\" "
    "exactly as the data spells it; list a day's attractions separated by ';'. `current_city` is the city of "
    "the day, or \"from A to B\" on a day you travel. `transportation` states the flight number "
    "(\"Flight Number: F0123456, from A to B, Departure Time: .., Arrival Time: ..\"), or \"Self-driving, from A "
    "to B, ...\" or \"Taxi, from A to B, ...\". Write '-' where nothing is planned (no accommodation on the last "
    "day, no plans after returning home). Every detail must come from the data; the plan must be complete, "
    "stay within the query's budget and constraints, keep restaurants and attractions distinct, respect "
    "accommodations' minimum nights and house rules, and not mix self-driving with flights or taxis. "
    "Reply with the JSON list inside a ```json code block.")
SOLE_PLANNING_SYSTEM = ("You are a proficient travel planner. Based on the given information and the query, "
                        "write a detailed plan. " + PLAN_RULES)
TWO_STAGE_SYSTEM = (
    "You are a proficient travel planner. Collect the information the query needs with the search tools (call "
    "one with <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>), then write the plan in a reply "
    "without a tool call: that reply ends the episode. You have at most {max_steps} replies. CitySearch lists a "
    "state's cities, FlightSearch a day's flights, GoogleDistanceMatrix driving by self-driving or taxi, and "
    "AccommodationSearch / RestaurantSearch / AttractionSearch a city's options; NotebookWrite keeps your "
    "previous result under a description. Costs: a flight's price per person, a meal's average cost per person, "
    "an accommodation's price per night per room (rooms = people / maximum occupancy, rounded up), self-driving "
    "per car of 5 and taxi per car of 4 people. " + PLAN_RULES)


def render_reference(reference: Any) -> str:
    """Reference information as text: each search's description, then its table (rows as JSON lines)."""
    items = reference.items() if isinstance(reference, dict) else \
        ((entry.get("Description", ""), entry.get("Content", "")) for entry in reference or [] if isinstance(entry, dict))
    blocks = []
    for description, content in items:
        if isinstance(content, list):
            content = "\n".join(json.dumps(row, ensure_ascii=False) for row in content) or "(none)"
        blocks.append(f"{description}:\n{content}")
    return "\n\n".join(blocks)


def sole_planning_prompt(prompt: dict[str, Any]) -> ChatPrompt:
    user = f"Given information:\n{render_reference(prompt['reference_information'])}\n\nQuery: {prompt['query']}"
    return ChatPrompt(messages=[{"role": "system", "content": SOLE_PLANNING_SYSTEM},
                                {"role": "user", "content": user}])


def two_stage_prompt(prompt: dict[str, Any], max_steps: int) -> ChatPrompt:
    return ChatPrompt(messages=[{"role": "system", "content": TWO_STAGE_SYSTEM.replace("{max_steps}", str(max_steps))},
                                {"role": "user", "content": f"Query: {prompt['query']}"}],
                      tools=json.loads(json.dumps(TOOL_SCHEMAS)))


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def read_plan(text: str) -> tuple[list | None, str | None]:
    """(plan, None) from agent text, or (None, why not): a ```json block, a bare JSON list, or the
    'Day N:' text form, tried in that order. The JSON list is returned as written: the evaluator
    reads it leniently (plans.normalise_plan) and judges what is missing. Never raises."""
    if not isinstance(text, str) or not text.strip():
        return None, "empty response"
    candidates = [m.group(1) for m in _FENCE.finditer(text)]
    start, end = text.find("["), text.rfind("]")
    if start != -1 and end > start:
        candidates.append(text[start:end + 1])
    problem = None
    for candidate in candidates:
        try:
            value = json.loads(candidate.strip())
        except json.JSONDecodeError as error:
            problem = problem or f"plan is not JSON: {error.msg} at char {error.pos}"
            continue
        if isinstance(value, list) and any(isinstance(day, dict) and day for day in value):
            return value, None
        problem = problem or "the JSON is not a list of day objects"
    try:
        return parse_plan_text(text), None
    except PlanError as error:
        return None, problem or str(error)


def plan_json(plan: Sequence[dict]) -> str:
    """A plan as the agent is asked to write it."""
    return "```json\n" + json.dumps(list(plan), ensure_ascii=False, indent=1) + "\n```"

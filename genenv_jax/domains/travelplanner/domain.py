"""TravelPlanner as a GenEnv domain: sole-planning or two-stage episodes, simulator queries gated by a
feasibility search over the database, the benchmark's evaluator as the verifier.

Categories are the query levels (easy / medium / hard). `mode`: "sole_planning" (the query and its
reference information, one reply: the plan) or "two_stage" (search tools, then the plan; at most
`max_steps` replies). `reward`: "final_pass" (the benchmark's headline) or "constraint_fraction"
(shaped: the share of checks passed). `scoring`: "official" (the benchmark's own evaluation code,
quirks included, on the rows its loader keeps: the agent's tools and the feasibility search see the
same rows) or "strict" (the paper's definitions, every row). See docs/travelplanner.md.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from pathlib import Path
from typing import Any, Mapping, Sequence

from genenv_jax.core.config_checks import name_list
from genenv_jax.data.prepared import DataMissing, load_records
from genenv_jax.domains.base import (ChatPrompt, Domain, Environment, Invalid, Rejection, ScoreResult,
                                     SingleTurnEnvironment, Task, check_difficulty, next_sibling)
from genenv_jax.domains.travelplanner import data, generation
from genenv_jax.domains.travelplanner.database import Database
from genenv_jax.domains.travelplanner.episode import (DEFAULT_MAX_STEPS, REWARDS, TwoStageEnvironment, plan_of_turns,
                                                      score_plan)
from genenv_jax.domains.travelplanner.feasibility import search
from genenv_jax.domains.travelplanner.metrics import SCORINGS, evaluate_plan
from genenv_jax.domains.travelplanner.plans import current_cities, normalise_plan
from genenv_jax.domains.travelplanner.prompts import plan_json, read_plan, sole_planning_prompt, two_stage_prompt
from genenv_jax.domains.travelplanner.queries import LEVELS
from genenv_jax.domains.travelplanner.simulator_prompt import simulator_messages
from genenv_jax.domains.travelplanner.summary import summarize
from genenv_jax.domains.travelplanner.tools import FlightsView, FlightTable, reference_information, route_legs
from genenv_jax.text.tokenization import render_tool_calls

DOMAIN_NAME = "travelplanner"
MODES = ("sole_planning", "two_stage")


class TravelPlannerDomain(Domain):
    """TravelPlanner; see the module docstring.

    Args:
      data_dir: the download (official layout, or the fine-tuning file alone: 'train' only).
      mode, reward, max_steps: see the module docstring. levels: the categories to serve.
      database_dir: the CSV database ("" -> data_dir/database). cache_dir: prepared-data cache.
      scoring: "official" (default) or "strict", see the module docstring. also_scoring: "" or the
        other scoring, whose counts the score details carry too (`metric/<scoring>/*`; the summary
        then adds `<scoring>_<rate>`), for a report of both.
    """

    name = DOMAIN_NAME
    rejection_reasons = generation.REJECTION_REASONS

    def __init__(self, data_dir: str = "", mode: str = "sole_planning", reward: str = "final_pass",
                 max_steps: int = DEFAULT_MAX_STEPS, levels: Sequence[str] = LEVELS, database_dir: str = "",
                 cache_dir: str = "", scoring: str = "official", also_scoring: str = ""):
        if mode not in MODES:
            raise ValueError(f"travelplanner: mode {mode!r} not in {MODES}")
        if reward not in REWARDS:
            raise ValueError(f"travelplanner: reward {reward!r} not in {REWARDS}")
        levels = name_list(levels, "travelplanner: levels")
        unknown = [level for level in levels if level not in LEVELS]
        if unknown:
            raise ValueError(f"travelplanner: unknown levels {unknown}; expected a subset of {LEVELS}")
        if max_steps < 1:
            raise ValueError("travelplanner: max_steps must be positive")
        if scoring not in SCORINGS:
            raise ValueError(f"travelplanner: scoring {scoring!r} not in {SCORINGS}")
        if also_scoring not in ("", *SCORINGS) or also_scoring == scoring:
            raise ValueError(f"travelplanner: also_scoring {also_scoring!r} must be '' or the other of {SCORINGS}")
        self.scoring, self.also_scoring = scoring, also_scoring
        self.data_dir, self.mode, self.reward, self.max_steps = str(data_dir), mode, reward, int(max_steps)
        self.levels, self.cache_dir = tuple(levels), cache_dir or None
        self._database_dir = database_dir

    # ------------------------------------------------------------------ data
    @property
    def db(self) -> Database:
        """The database in the scoring's view: the official loader's rows, or every row (strict). The
        agent's tools, the feasibility search and the evaluator all read this one."""
        return self.database(self.scoring)

    def database(self, scoring: str) -> Database:
        view = "official" if scoring == "official" else "all"
        if self._database_dir:
            return Database.load(self._database_dir, view)
        if not self.data_dir:
            raise DataMissing(f"travelplanner: no data_dir given ({data.INSTRUCTIONS})")
        return Database.load(Path(self.data_dir).expanduser() / data.DATABASE_DIR, view)

    @functools.cached_property
    def flights(self) -> FlightTable:
        """Flights the tools show: the CSV, else every seed's reference information (all splits)."""
        return FlightTable.from_references(self.db, [t.prompt["reference_information"] for t in self.seeds("all")])

    @property
    def judge_db(self):
        """The database the evaluator reads (flights from `flights` when the download has no CSV)."""
        return self.judge_database(self.scoring)

    def judge_database(self, scoring: str):
        db = self.database(scoring)
        return db if db.has_flights else FlightsView(db, self.flights)

    @property
    def _also(self) -> tuple | None:
        return (self.also_scoring, self.judge_database(self.also_scoring)) if self.also_scoring else None

    def _task(self, record: Mapping[str, Any]) -> Task:
        prompt = {key: record[key] for key in ("org", "dest", "days", "visiting_city_number", "date",
                                               "people_number", "budget", "local_constraint", "level", "query",
                                               "reference_information")}
        return Task(domain=DOMAIN_NAME, task_id=record["task_id"], category=record["level"], prompt=prompt,
                    verifier={"annotated_plan": record["annotated_plan"]},
                    metadata={"split": record["split"], "source": record["source"], "days": record["days"]})

    def load_seeds(self) -> list[Task]:
        if not self.data_dir:
            raise DataMissing(f"travelplanner: no data_dir given ({data.INSTRUCTIONS})")
        return [self._task(r) for split in data.SPLITS
                for r in load_records(data.SOURCE, self.data_dir, split, self.cache_dir)
                if data.is_item(r) and r["level"] in self.levels]

    # ------------------------------------------------------------------ agent side
    def agent_prompt(self, task: Task) -> ChatPrompt:
        if self.mode == "two_stage":
            return two_stage_prompt(task.prompt, self.max_steps)
        return sole_planning_prompt(task.prompt)

    def environment(self, task: Task) -> Environment:
        if self.mode == "two_stage":
            return TwoStageEnvironment(task.prompt, data.record_query(task.prompt), self.judge_db, self.flights,
                                       self.reward, self.max_steps, self.scoring, self._also)
        return SingleTurnEnvironment(self, task)

    def score_details(self, task: Task, response: str) -> ScoreResult:
        """The evaluator's verdict on the plan in `response` (two-stage: the response as the first turn)."""
        if self.mode == "two_stage":
            plan, error, _ = plan_of_turns([response], self.max_steps)
        else:
            plan, error = read_plan(response)
        return score_plan(data.record_query(task.prompt), plan, self.judge_db, self.reward, error, self.scoring,
                          self._also)

    def reference_plan(self, task: Task) -> list[dict]:
        """The gold plan: the annotation, else the feasibility search's cheapest plan."""
        annotated = task.verifier.get("annotated_plan") or task.verifier.get("reference_plan")
        if annotated:
            return annotated
        found = search(data.record_query(task.prompt), self.db, self.flights)
        if not found.feasible:
            raise ValueError(f"travelplanner: {task.task_id} has no annotated plan and no feasible plan ({found.detail})")
        return found.plan

    def reference_response(self, task: Task) -> str:
        return plan_json(self.reference_plan(task))

    def reference_turns(self, task: Task) -> list[str]:
        """Sole-planning: the plan. Two-stage: the searches the plan needs (a city's three per turn,
        then every leg's transport), then the plan."""
        plan = self.reference_plan(task)
        if self.mode != "two_stage":
            return [plan_json(plan)]
        query, (days, _) = data.record_query(task.prompt), normalise_plan(plan)
        route = [c for day in days for c in current_cities(day["current_city"])]
        cities = list(dict.fromkeys(c for c in route if c != query.org))
        turns = [render_tool_calls([{"name": tool, "arguments": {"city": city}} for tool in
                                    ("AccommodationSearch", "RestaurantSearch", "AttractionSearch")]) for city in cities]
        legs = []
        for origin, destination, date in route_legs(query, cities):
            legs.append({"name": "FlightSearch", "arguments": {"departure_city": origin,
                                                               "destination_city": destination, "date": date}})
            legs.append({"name": "GoogleDistanceMatrix", "arguments": {"origin": origin, "destination": destination,
                                                                       "mode": "self-driving"}})
        return turns + ([render_tool_calls(legs)] if legs else []) + [plan_json(plan)]

    def summary(self, per_category: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        return summarize(per_category, self.reward, self.also_scoring)

    # ------------------------------------------------------------------ simulator side
    def simulator_prompt(self, seed: Task, recent_success: Sequence[float] = (), difficulty: str = "similar",
                         alpha: float = 0.5) -> ChatPrompt:
        check_difficulty(difficulty)
        rng = random.Random(seed.task_id)
        cities = sorted(self.db.city_state)
        examples = sorted(rng.sample(cities, min(24, len(cities))))
        states = sorted(set(self.db.city_state.values()))
        return ChatPrompt(messages=simulator_messages(data.record_query(seed.prompt), recent_success, difficulty,
                                                      alpha, examples, states))

    def parse_task(self, text: str, seed: Task, difficulty: str | None = None) -> Task | Rejection:
        """Reads, checks and solves the simulator's query; a Task of its own level or a Rejection."""
        def rejected(reason: str, detail: str) -> Rejection:
            return self.reject(Invalid(reason, detail), seed, text)

        try:
            query, found = generation.validate(text, data.record_query(seed.prompt), self.db, self.flights)
        except Invalid as error:
            return self.reject(error, seed, text)
        if not evaluate_plan(query, found.plan, self.judge_db, self.scoring).final_pass:
            return rejected("plan_fails_evaluator", "the search's plan does not pass the evaluator")
        if query.level not in self.levels:
            return rejected("bad_field", f"level {query.level!r} is not served ({self.levels})")
        reference = reference_information(query, self.db, self.flights, list(found.cities))
        prompt = {"org": query.org, "dest": query.dest, "days": query.days,
                  "visiting_city_number": query.visiting_city_number, "date": list(query.date),
                  "people_number": query.people_number, "budget": query.budget,
                  "local_constraint": query.local_constraint, "level": query.level, "query": query.text,
                  "reference_information": reference}
        digest = hashlib.sha256(json.dumps({k: v for k, v in prompt.items() if k != "reference_information"},
                                           sort_keys=True).encode()).hexdigest()[:16]
        return Task(domain=DOMAIN_NAME, task_id=f"{seed.task_id}~{digest}", category=query.level, prompt=prompt,
                    verifier={"annotated_plan": None, "reference_plan": found.plan, "cheapest_cost": found.cost},
                    parent_id=seed.task_id, difficulty=difficulty,
                    metadata={"source": "simulator", "days": query.days})

    def reference_generation(self, seed: Task, sibling: Task | None = None) -> str:
        """A sibling query of the seed's split (any level) written as the simulator is asked to."""
        def write(task: Task) -> str:
            return generation.as_generation(data.record_query(task.prompt))

        def fits(task: Task) -> bool:
            return task.task_id != seed.task_id and isinstance(self.parse_task(write(task), seed), Task)

        if sibling is not None and fits(sibling):
            return write(sibling)
        try:
            return write(next_sibling(self, seed, fits))
        except ValueError:  # no sibling of the same level: any level of the split will do
            pool = self.seeds(seed.metadata.get("split", "train"))
            start = next((i for i, t in enumerate(pool) if t.task_id == seed.task_id), -1)
            for k in range(1, len(pool) + 1):
                if fits(pool[(start + k) % len(pool)]):
                    return write(pool[(start + k) % len(pool)])
        raise ValueError(f"travelplanner: no query of split {seed.metadata.get('split')!r} can serve as a "
                         f"reference generation for {seed.task_id}")


__all__ = ["DOMAIN_NAME", "MODES", "TravelPlannerDomain"]

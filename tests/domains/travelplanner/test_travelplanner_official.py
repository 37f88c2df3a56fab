"""TravelPlanner's official scoring (the benchmark's own evaluation code, quirks included) next to the
strict one (the paper's definitions).

On the fixtures: every class of difference between the two, as a single fault in each gold plan, fails
exactly the pinned checks in each mode; designed plans pin the rest (crashes of the original, the
cuisine skip, unpriced flights, case-sensitive labels, what counts as delivered), and both modes see
their own rows of the database. On the shared data (skipped when absent): the official verdicts equal
those the original code (OSU-NLP-Group/TravelPlanner da7c1d41, run offline on 2026-12-02) gave on the
same 982 plans, stored in tests/fixtures/travelplanner/original_verdicts.jsonl, and the six rates of
the 180 example validation plans equal its eval.py's.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil

import pytest
from tests.support.travelplanner_faults import FAULTS

from genenv_jax.domains import get_domain
from genenv_jax.domains.travelplanner import evaluate as cli
from genenv_jax.domains.travelplanner.commonsense import COMMONSENSE_CHECKS
from genenv_jax.domains.travelplanner.database import Database, DatabaseError
from genenv_jax.domains.travelplanner.hard import HARD_CHECKS, applicable_hard_checks
from genenv_jax.domains.travelplanner.metrics import evaluate_plan, metric_table
from genenv_jax.domains.travelplanner.queries import parse_query_text, query_from_row
from tests.support import REPO, TESTS

FIXTURES = TESTS / "fixtures" / "travelplanner"
EVAL = FIXTURES / "eval"
SHARED = REPO.parent / "shared" / "benchmarks" / "travelplanner"
needs_shared = pytest.mark.shared_data(SHARED, reason=f"shared TravelPlanner data absent: {SHARED}")
GATING = {"within_sandbox", "complete_information"}
# fault -> (checks it fails under official scoring, under strict scoring); a gating check also fails
# every hard constraint the query asks (they are not judged).
EXPECTED = {
    "truncated_name": (set(), {"within_sandbox"}),
    "state_suffix_repeat": (set(), {"diverse_restaurants"}),
    "attraction_unchecked_last": (set(), {"within_sandbox"}),
    "lowercase_name": ({"within_sandbox"}, set()),
    "empty_day1_transport": ({"complete_information", "non_conflicting_transportation"}, {"complete_information"}),
    "blank_cell_accommodation": ({"within_sandbox"}, set()),
    "other_city_attraction": (set(), {"within_current_city"}),
    "skipped_travel_day": (set(), {"reasonable_city_route", "within_current_city"}),
}


def failed(verdict) -> set[str]:
    return {name for name, ok in {**verdict.commonsense, **verdict.hard}.items() if ok is False}


def expected(query, checks: set[str]) -> set[str]:
    return checks | (set(applicable_hard_checks(query)) if checks & GATING else set())


@pytest.fixture(scope="module")
def fixture_cases():
    queries = [query_from_row(row) for row in cli.read_query_rows(EVAL / "queries.csv")]
    plans = [record["plan"] for record in cli.read_plans(EVAL / "plans.jsonl")]
    judges = {scoring: cli.judge_database(EVAL / "database", scoring, queries) for scoring in ("official", "strict")}
    return queries, plans, judges


def test_each_difference_class_fails_its_pinned_checks_in_each_mode(fixture_cases):
    queries, plans, judges = fixture_cases
    applied = dict.fromkeys(FAULTS, 0)
    for query, plan in zip(queries, plans):
        assert failed(evaluate_plan(query, plan, judges["official"])) == set()
        assert failed(evaluate_plan(query, plan, judges["strict"], "strict")) == set()
        for name, fault in FAULTS.items():
            result = fault(query, plan, judges["strict"], judges["official"])
            if result is None:
                continue
            changed_query, changed = result
            official, strict = EXPECTED[name]
            assert failed(evaluate_plan(changed_query, changed, judges["official"])) == expected(query, official), name
            assert failed(evaluate_plan(changed_query, changed, judges["strict"], "strict")) == expected(
                query, strict), name
            applied[name] += 1
    assert min(applied.values()) >= 3, applied  # every class applies to most of the 5 fixture plans


def _one(fixture_cases, index=0):
    queries, plans, judges = fixture_cases
    return queries[index], copy.deepcopy(plans[index]), judges


def test_a_crash_of_the_original_fails_that_check_only(fixture_cases):
    query, plan, judges = _one(fixture_cases)
    del plan[1]["current_city"]
    verdict = evaluate_plan(query, plan, judges["official"])
    assert "raises here (KeyError" in verdict.reasons["reasonable_city_route"]
    assert verdict.commonsense["diverse_restaurants"] is True  # the checks that never read the key pass
    query, plan, judges = _one(fixture_cases)
    plan[0]["transportation"] = plan[0]["transportation"].replace("Flight Number:", "flight number:")
    verdict = evaluate_plan(query, plan, judges["official"])
    assert "IndexError" in verdict.reasons["within_sandbox"] and verdict.delivered
    assert failed(evaluate_plan(query, plan, judges["strict"], "strict")) == set()  # strict reads it


def test_what_counts_as_delivered(fixture_cases):
    query, _, judges = _one(fixture_cases)
    for plan in (None, [], "not json"):
        assert not evaluate_plan(query, plan, judges["official"]).delivered
    padded = evaluate_plan(query, [{}, {}], judges["official"])  # non-empty: delivered, then judged
    assert padded.delivered and not padded.final_pass
    assert not evaluate_plan(query, [{}, {}], judges["strict"], "strict").delivered


def test_cuisine_reading_skips_a_day_after_an_origin_city_meal(fixture_cases):
    queries, plans, judges = fixture_cases
    query, plan = queries[0], copy.deepcopy(plans[0])
    db = judges["official"]
    stay = next(i for i, day in enumerate(plan) if " to " not in day["current_city"])
    city = plan[stay]["current_city"]
    served = next(r for r in db.restaurants(city) if r["Cuisines"])
    kind = served["Cuisines"].split(",")[0].strip()
    home = next(r for r in db.restaurants(query.org) if kind not in r["Cuisines"])
    for day in plan:
        for meal in ("breakfast", "lunch", "dinner"):
            day[meal] = "-"
    plan[stay]["breakfast"] = f"{home['Name']}, {query.org}"
    plan[stay]["lunch"] = f"{served['Name']}, {city}"
    asking = dataclasses.replace(query, local_constraint={**query.local_constraint, "cuisine": [kind]})
    from genenv_jax.domains.travelplanner import hard, official_hard
    # the origin-city breakfast ends the day's reading there, so the lunch's cuisine is never seen
    assert official_hard.cuisine(asking, plan, db) == (False, f"the cuisine {kind} is not satisfied")
    assert hard.cuisine(asking, plan, judges["strict"]) == (True, None)
    plan[stay]["breakfast"] = "-"
    assert official_hard.cuisine(asking, plan, db) == (True, None)


def test_unpriced_flights_and_case_sensitive_labels(fixture_cases):
    queries, plans, judges = fixture_cases
    index = next(i for i, p in enumerate(plans) if "Flight Number" in p[0]["transportation"])
    query, plan = queries[index], copy.deepcopy(plans[index])
    bare = Database.load(EVAL / "database", "official")  # no flights at all: the flight is not in the sandbox
    assert "within_sandbox" in failed(evaluate_plan(query, plan, bare))
    plan[0]["transportation"] = plan[0]["transportation"].replace("Flight Number", "FLIGHT NUMBER")
    assert evaluate_plan(query, plan, judges["official"]).commonsense["within_sandbox"] is False
    banned = dataclasses.replace(query, local_constraint={**query.local_constraint, "transportation": "no flight"})
    plan = copy.deepcopy(plans[index])
    assert evaluate_plan(banned, plan, judges["official"]).hard["transportation"] is False
    for day in plan:
        if "Flight Number" in day.get("transportation", ""):  # no "Flight Number: " label any more
            origin, destination = day["current_city"].removeprefix("from ").split(" to ")
            day["transportation"] = f"by flight, from {origin} to {destination}"
    lowered = evaluate_plan(banned, plan, judges["official"])
    # nothing to look up (so within the sandbox), free (budget), and no "Flight" (case-sensitive)
    assert lowered.commonsense["within_sandbox"] and lowered.hard["budget"] and lowered.hard["transportation"]
    assert evaluate_plan(banned, plan, judges["strict"], "strict").commonsense["within_sandbox"] is False


def test_views_drop_the_rows_with_a_blank_cell(tmp_path):
    official, every = Database.load(EVAL / "database", "official"), Database.load(EVAL / "database", "all")
    count = lambda db: sum(len(db.accommodations(c)) for c in db.city_state)  # noqa: E731
    assert (count(every), count(official)) == (146, 128)  # pandas' read_csv().dropna() keeps 128 (checked)
    blank = next(r for c in every.city_state for r in every.accommodations(c) if not r["house_rules"])
    assert official.find_accommodation(blank["NAME"], blank["city"]) is None
    with pytest.raises(ValueError, match="view"):
        Database.load(EVAL / "database", "some")
    broken = tmp_path / "database"
    shutil.copytree(EVAL / "database", broken)
    path = broken / "restaurants" / "clean_restaurant_2022.csv"
    path.write_text(path.read_text()[:-40])  # a truncated last row
    with pytest.raises(DatabaseError, match=r"clean_restaurant_2022\.csv:\d+: a short row"):
        Database(broken, "all")


def test_domain_scoring_option_and_both_rates(tmp_path, monkeypatch):
    monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
    domain = get_domain("travelplanner", data_dir=str(FIXTURES / "domain"), also_scoring="strict")
    assert domain.scoring == "official" and domain.db.view == "official"
    task = domain.seeds("train")[0]
    details = domain.score_details(task, domain.reference_response(task)).details
    assert details["metric/final_pass"] == 1.0 and details["metric/strict/final_pass"] == 1.0
    rows = {"easy": {"n": 1, "correct": 1.0, "accuracy": 1.0,
                     **{k: v for k, v in details.items() if k.startswith("metric/")}}}
    summary = domain.summary(rows)
    assert summary["final_pass_rate"] == 1.0 and summary["strict_final_pass_rate"] == 1.0
    assert get_domain("travelplanner", data_dir=str(FIXTURES / "domain"), scoring="strict").db.view == "all"
    with pytest.raises(ValueError, match="scoring"):
        get_domain("travelplanner", data_dir=str(FIXTURES / "domain"), scoring="lenient")


def test_cli_refuses_to_overwrite_its_input_and_prints_both(capsys, tmp_path):
    plans = tmp_path / "plans.jsonl"
    plans.write_text((EVAL / "plans.jsonl").read_text())
    before = plans.read_text()
    assert cli.main(["--data_dir", str(EVAL), "--plans", str(plans), "--queries", str(EVAL / "queries.csv"),
                     "--details", str(plans)]) == 2
    assert "is also an input" in capsys.readouterr().err and plans.read_text() == before
    assert cli.main(["--data_dir", str(EVAL), "--plans", str(plans), "--queries", str(EVAL / "queries.csv"),
                     "--scoring", "both", "--json"]) == 0
    tables = json.loads(capsys.readouterr().out)
    assert tables["official"]["final_pass_rate"] == tables["strict"]["final_pass_rate"] == 1.0


# ----------------------------------------------------------------------------- against the original
VERDICT_KEYS = COMMONSENSE_CHECKS + HARD_CHECKS


def _code(verdict) -> str:
    """13 characters, checks in VERDICT_KEYS order: T / F, or '.' where the original judged nothing
    (no commonsense checks for an undelivered plan, no hard checks when not judged, or not asked)."""
    common = [verdict.commonsense[k] if verdict.delivered else None for k in COMMONSENSE_CHECKS]
    hard = [verdict.hard[k] if verdict.hard_judged else None for k in HARD_CHECKS]
    return "".join({True: "T", False: "F", None: "."}[v] for v in common + hard)


def harness_cases():
    """The 982 plans the original was run on, rebuilt: 45 gold training plans, the 13 perturbation
    kinds of test_travelplanner_eval and the 8 difference classes of travelplanner_faults applied to
    each, and the 180 example validation plans with their parsed queries."""
    from test_travelplanner_eval import PERTURBATIONS

    from genenv_jax.domains.travelplanner import data
    from genenv_jax.domains.travelplanner.tools import FlightsView, FlightTable

    references = [json.loads(line) for line in (SHARED / "database" / "train_ref_info.jsonl").read_text().splitlines()]
    every = Database.load(SHARED / "database", "all")
    official = Database.load(SHARED / "database", "official")
    judge_all = FlightsView(every, FlightTable.from_references(every, references))
    judge = FlightsView(official, FlightTable.from_references(official, references))
    cases = []
    for task in get_domain("travelplanner", data_dir=str(SHARED)).seeds("train"):
        query, gold = data.record_query(task.prompt), task.verifier["annotated_plan"]
        cases.append(("gold", query, gold))
        for perturb in PERTURBATIONS:
            result = perturb(query, copy.deepcopy(gold), judge_all)
            if result is not None:
                cases.append((perturb.__name__, *result))
        for name, fault in FAULTS.items():
            result = fault(query, copy.deepcopy(gold), every, official)
            if result is not None:
                cases.append((name, *result))
    for line in (SHARED / "postprocess" / "example_evaluation.jsonl").read_text().splitlines():
        record = json.loads(line)
        cases.append(("validation", parse_query_text(record["query"]), record["plan"]))
    return cases, judge


@needs_shared
def test_official_verdicts_equal_the_original_code(tmp_path, monkeypatch):
    monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
    stored = [json.loads(line) for line in (FIXTURES / "original_verdicts.jsonl").read_text().splitlines()]
    cases, judge = harness_cases()
    assert [kind for kind, _, _ in cases] == [row["kind"] for row in stored]
    agree = {"gold": [0, 0], "perturbed": [0, 0], "validation": [0, 0]}
    for (kind, query, plan), row in zip(cases, stored):
        ours = _code(evaluate_plan(query, plan, judge))
        group = agree[kind if kind in ("gold", "validation") else "perturbed"]
        group[0] += sum(a == b for a, b in zip(ours, row["verdict"]))
        group[1] += len(VERDICT_KEYS)
    assert agree == {"gold": [585, 585], "perturbed": [9841, 9841], "validation": [2340, 2340]}
    validation = [(query, plan) for kind, query, plan in cases if kind == "validation"]
    table = metric_table([evaluate_plan(query, plan, judge) for query, plan in validation])
    # eval.py on the same queries and plans: 161, 824/1440, 3, 23/420, 4, 1 of 180
    assert {k: round(100 * table[k], 2) for k in ("delivery_rate", "commonsense_micro", "commonsense_macro",
                                                  "hard_micro", "hard_macro", "final_pass_rate")} == {
        "delivery_rate": 89.44, "commonsense_micro": 57.22, "commonsense_macro": 1.67, "hard_micro": 5.48,
        "hard_macro": 2.22, "final_pass_rate": 0.56}


@needs_shared
def test_feasibility_plans_of_all_training_queries_pass_the_official_checks(tmp_path, monkeypatch):
    from genenv_jax.domains.travelplanner import data
    from genenv_jax.domains.travelplanner.feasibility import search

    monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
    domain = get_domain("travelplanner", data_dir=str(SHARED))
    passed = 0
    for task in domain.seeds("train"):
        query = data.record_query(task.prompt)
        found = search(query, domain.db, domain.flights)
        passed += found.feasible and evaluate_plan(query, found.plan, domain.judge_db).final_pass
    assert passed == 45
    gold = [domain.score_details(t, domain.reference_response(t)).reward for t in domain.seeds("train")]
    assert sum(gold) == 45  # train/41's wrong-city attractions pass the original's character test

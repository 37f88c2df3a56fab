"""TravelPlanner as a domain: seeds from the official CSV layout (fixture) and the fine-tuning file
(shared data), sole-planning and two-stage episodes scored by the benchmark's evaluator, the search
tools, the 30-step cap, and the simulator's feasibility gate."""

import json

import pytest

from genenv_jax.domains import Task, get_domain
from genenv_jax.domains.base import Invalid, Rejection
from genenv_jax.domains.travelplanner import data, generation
from genenv_jax.domains.travelplanner.episode import TwoStageEnvironment
from genenv_jax.domains.travelplanner.feasibility import search
from genenv_jax.domains.travelplanner.metrics import evaluate_plan
from genenv_jax.domains.travelplanner.summary import summarize
from genenv_jax.domains.travelplanner.tools import Toolbox
from genenv_jax.text.tokenization import render_tool_call
from tests.support import REPO, TESTS

FIXTURE = TESTS / "fixtures" / "travelplanner" / "domain"
SHARED = REPO.parent / "shared" / "benchmarks" / "travelplanner"
needs_shared = pytest.mark.shared_data(SHARED / "finetuning_data",
                                       reason="needs ../shared/benchmarks/travelplanner (not part of a user's clone)")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def domain(cache):
    return get_domain("travelplanner", data_dir=str(FIXTURE))


def text_form(plan):
    """A plan in the benchmark's 'Day N:' text form."""
    lines = []
    for day in plan:
        lines += [f"Day {day['days']}:", f"Current City: {day['current_city']}",
                  f"Transportation: {day['transportation']}", f"Breakfast: {day['breakfast']}",
                  f"Attraction: {day['attraction']}", f"Lunch: {day['lunch']}", f"Dinner: {day['dinner']}",
                  f"Accommodation: {day['accommodation']}", ""]
    return "\n".join(lines)


def generated(seed_prompt, **changes):
    fields = {"query": seed_prompt["query"], "org": seed_prompt["org"], "dest": seed_prompt["dest"],
              "days": seed_prompt["days"], "start_date": seed_prompt["date"][0],
              "people_number": seed_prompt["people_number"], "budget": seed_prompt["budget"],
              "local_constraint": seed_prompt["local_constraint"]}
    fields.update(changes)
    return "```json\n" + json.dumps(fields) + "\n```"


# ---------------------------------------------------------------- data
def test_official_csv_layout_gives_three_splits(domain):
    train, validation, test = (domain.seeds(s) for s in ("train", "validation", "test"))
    assert [len(train), len(validation), len(test)] == [3, 1, 1]
    assert [t.category for t in train] == ["easy", "medium", "hard"]
    assert all(t.verifier["annotated_plan"] for t in train)
    assert validation[0].verifier["annotated_plan"] is None and validation[0].prompt["days"] == 7
    assert train[1].prompt["local_constraint"]["house rule"] == "smoking" and train[1].prompt["people_number"] == 4
    assert domain.db.has_flights  # the fixture ships a small flights CSV
    # test.csv has the published test columns only: people, budget and constraints come from the text
    assert {k: test[0].prompt[k] for k in ("org", "people_number", "budget", "visiting_city_number", "level")} == {
        "org": "Kansas City", "people_number": 1, "budget": 900, "visiting_city_number": 1, "level": "easy"}
    assert test[0].prompt["reference_information"] and set(test[0].prompt["local_constraint"].values()) == {None}


def test_unreadable_test_rows_are_skipped_with_a_warning(tmp_path, caplog):
    path = tmp_path / "test.csv"
    path.write_text("org,dest,days,date,query,level\nA,B,3,\"['2022-03-01']\",Take me somewhere nice.,easy\n"
                    "Rockford,Denver,3,,\"A 3-day trip from Rockford to Denver from March 1st to March 3rd, 2022, "
                    "for 2 people, budget $900.\",easy\n")
    records = list(data.csv_records(path, "test"))
    assert [(r["task_id"], r["people_number"], r["budget"], r["date"][0]) for r in records] == [
        ("test/1", 2, 900, "2022-03-01")]
    assert "test.csv row 0 skipped" in caplog.text
    with pytest.raises(data.DataMissing, match="row 0"):
        list(data.csv_records(path, "validation"))


def test_annotated_plan_column_forms():
    plan = [{"days": 1, "current_city": "from A to B", "transportation": "-", "breakfast": "-", "attraction": "-",
             "lunch": "-", "dinner": "-", "accommodation": "-"}]
    assert data._plan_or_none(str(plan), "x") == plan
    assert data._plan_or_none(str([{"org": "A"}, plan]), "x") == plan
    assert data._plan_or_none(str([{"org": "A"}, *plan, {}]), "x") == plan
    assert data._plan_or_none("", "x") is None


def test_missing_download_is_one_clear_line(cache, tmp_path):
    (tmp_path / "dl" / "database").mkdir(parents=True)
    d = get_domain("travelplanner", data_dir=str(tmp_path / "dl"))
    with pytest.raises(data.DataMissing, match="neither train.csv nor .*download travelplanner"):
        d.seeds("train")


@needs_shared
def test_shared_finetuning_layout(cache):
    d = get_domain("travelplanner", data_dir=str(SHARED))
    train = d.seeds("train")
    assert len(train) == 45 and d.seeds("validation") == [] and not d.db.has_flights
    assert [sum(t.category == level for t in train) for level in ("easy", "medium", "hard")] == [15, 15, 15]
    assert all(t.prompt["reference_information"] for t in train)


# ---------------------------------------------------------------- sole planning
def test_gold_plans_pass_through_the_domain(domain):
    for task in domain.seeds("train"):
        result = domain.environment(task).score(
            [{"role": "assistant", "content": domain.reference_response(task)}])
        assert result.reward == 1.0, (task.task_id, result.details["reasons"])
        assert result.details["metric/final_pass"] == 1.0 and result.details["error_type"] is None


@needs_shared
def test_shared_gold_plans_pass_except_one_annotation_error(cache):
    d = get_domain("travelplanner", data_dir=str(SHARED), scoring="strict")
    failed = {t.task_id: d.score_details(t, d.reference_response(t)) for t in d.seeds("train")}
    failed = {k: v for k, v in failed.items() if v.reward < 1}
    # train/41's gold plan lists a San Angelo museum on a San Antonio day: a real annotation error.
    assert list(failed) == ["train/41"]
    assert failed["train/41"].details["error_type"] == "commonsense:within_current_city"


def test_text_form_and_fenced_plans_are_read(domain):
    task = domain.seeds("train")[2]
    plan = task.verifier["annotated_plan"]
    assert domain.score(task, "Here is the plan.\n\n" + text_form(plan)) == 1.0
    assert domain.score(task, "Plan:\n```json\n" + json.dumps(plan) + "\n```\nEnjoy!") == 1.0
    bad = domain.score_details(task, "I cannot plan this trip.")
    assert bad.reward == 0.0 and bad.details["error_type"] == "not_delivered"
    assert bad.details["metric/delivered"] == 0.0


def test_constraint_fraction_reward(cache):
    d = get_domain("travelplanner", data_dir=str(FIXTURE), reward="constraint_fraction")
    task = d.seeds("train")[1]  # medium: budget + house rule
    plan = json.loads(json.dumps(task.verifier["annotated_plan"]))
    plan[1]["lunch"] = plan[1]["dinner"]  # a repeated restaurant: diverse_restaurants fails
    result = d.score_details(task, json.dumps(plan))
    assert result.details["commonsense"]["diverse_restaurants"] is False
    judged = result.details["metric/commonsense_judged"] + result.details["metric/hard_judged"]
    assert judged == 10 and result.reward == pytest.approx(9 / 10)
    assert d.score(task, "no plan") == 0.0


# ---------------------------------------------------------------- two-stage
def test_tools_return_database_rows(domain):
    db = domain.db
    box = Toolbox(db, domain.flights)
    rows = json.loads(box.call("AccommodationSearch", {"city": "Rockford"})[0])
    assert [r["NAME"] for r in rows] == [r["NAME"] for r in db.accommodations("Rockford")] and rows
    assert rows[0]["price"] == db.accommodations("Rockford")[0]["price"]
    restaurants = json.loads(box.call("RestaurantSearch", {"city": "Rockford"})[0])
    assert {r["Name"] for r in restaurants} == {r["Name"] for r in db.restaurants("Rockford")}
    assert json.loads(box.call("AttractionSearch", {"city": "Rockford"})[0])[0]["City"] == "Rockford"
    assert json.loads(box.call("CitySearch", {"state": "Louisiana"})[0]) == db.cities_of_state("Louisiana")
    flights = json.loads(box.call("FlightSearch", {"departure_city": "St. Petersburg", "destination_city": "Rockford",
                                                   "date": "2022-03-16"})[0])
    assert [f["Flight Number"] for f in flights] == ["F3573659"] and flights[0]["Price"] == 474
    text, error = box.call("GoogleDistanceMatrix", {"origin": "Grand Forks", "destination": "Minneapolis",
                                                    "mode": "self-driving"})
    km = db.distance("Grand Forks", "Minneapolis")["distance_km"]
    assert error is None and text.endswith(f"cost: {int(km * 0.05)}") and "from Grand Forks to Minneapolis" in text
    assert box.call("FlightSearch", {"departure_city": "A", "destination_city": "B", "date": "2022-03-01"})[0] \
        == "There is no flight from A to B on 2022-03-01."
    assert box.call("NotebookWrite", {"description": "flights"}) == (
        "NotebookWrite succeeded. The current length of notebook is 1.", None)
    assert box.notebook[0]["Content"].startswith("There is no flight")
    assert box.call("Planner", {"query": "x"})[1] == "unknown_tool"
    assert box.call("RestaurantSearch", {"city": 3})[1] == "bad_arguments"
    assert box.call("RestaurantSearch", {"city": "Rockford", "extra": "x"})[1] == "bad_arguments"
    assert box.call("GoogleDistanceMatrix", {"origin": "A", "destination": "B", "mode": "walk"})[1] == "bad_arguments"
    assert Toolbox(db, domain.flights).call("NotebookWrite", {"description": "x"})[1] == "bad_arguments"


def test_two_stage_gold_episode_passes(cache):
    d = get_domain("travelplanner", data_dir=str(FIXTURE), mode="two_stage")
    for task in d.seeds("train"):
        env = d.environment(task)
        prompt = env.reset()
        assert [t["function"]["name"] for t in prompt.tools][:2] == ["CitySearch", "FlightSearch"]
        transcript = list(prompt.messages)
        for turn in d.reference_turns(task):
            transcript.append({"role": "assistant", "content": turn})
            out = env.step(turn)
            transcript += out.observation
            if out.done:
                break
        assert out.done and out.info["planned"]
        tool_text = [m["content"] for m in transcript if m["role"] == "tool"]
        assert any(task.verifier["annotated_plan"][1]["accommodation"].split(",")[0] in t for t in tool_text)
        assert env.score(transcript).reward == 1.0


def test_two_stage_step_cap(domain):
    task = domain.seeds("train")[0]
    env = TwoStageEnvironment(task.prompt, data.record_query(task.prompt), domain.judge_db, domain.flights,
                              "final_pass")
    call = render_tool_call({"name": "CitySearch", "arguments": {"state": "Illinois"}})
    transcript = []
    for step in range(1, 31):
        out = env.step(call)
        transcript.append({"role": "assistant", "content": call})
        assert out.done == (step == 30)
    assert out.info["step_cap"] and env.step("late").info["errors"] == {"step_after_done": 1}
    result = env.score(transcript + [{"role": "assistant", "content": domain.reference_response(task)}])
    assert result.reward == 0.0 and result.details["steps"] == 30
    assert "no plan within 30 steps" in result.details["reasons"]["delivery"]
    broken = TwoStageEnvironment(task.prompt, data.record_query(task.prompt), domain.judge_db, domain.flights,
                                 "final_pass").step("<tool_call>{not json</tool_call>")
    assert not broken.done and broken.info["errors"] == {"malformed_call": 1}


# ---------------------------------------------------------------- simulator
def test_simulator_accepts_a_feasible_query(domain):
    seed = domain.seeds("train")[2]  # Grand Forks -> Minneapolis, 2 people, no flight, parties, entire room
    text = seed.prompt["query"].replace("March 17th to March 19th", "March 20th to March 22nd")
    task = domain.parse_task(generated(seed.prompt, query=text, start_date="2022-03-20"), seed, "similar")
    assert isinstance(task, Task), task
    assert task.category == "hard" and task.parent_id == seed.task_id and task.prompt["date"][0] == "2022-03-20"
    assert task.verifier["cheapest_cost"] <= 1300
    assert [e["Description"] for e in task.prompt["reference_information"]][:3] == [
        "Attractions in Minneapolis", "Restaurants in Minneapolis", "Accommodations in Minneapolis"]
    assert domain.score(task, domain.reference_response(task)) == 1.0
    assert "Flight Number" not in domain.reference_response(task)  # the query rules flights out
    assert json.loads(domain.reference_generation(seed).split("```json\n")[1].split("```")[0])["org"]


@pytest.mark.parametrize("change, reason", [
    ({"budget": 50, "query_budget": "$50"}, "over_budget"),
    ({"start_date": "2022-03-01", "query_dates": ("March 16th to March 18th", "March 1st to March 3rd")},
     "no_transport"),
    ({"local_constraint": {"room type": "shared room"}, "query_suffix": " We want a shared room."},
     "no_accommodation"),
    ({"days": 4}, "bad_field"),
    ({"org": "Atlantis"}, "bad_field"),
    ({"budget": 2500}, "text_mismatch"),
    ({}, "same_as_seed"),
])
def test_simulator_rejections(domain, change, reason):
    seed = domain.seeds("train")[0]  # St. Petersburg -> Rockford: flights only, no road route
    change = dict(change)
    text = seed.prompt["query"]
    if "query_budget" in change:
        text = text.replace("$1,700", change.pop("query_budget"))
    if "query_dates" in change:
        text = text.replace(*change.pop("query_dates"))
    text += change.pop("query_suffix", "")
    result = domain.parse_task(generated(seed.prompt, query=text, **change), seed)
    assert isinstance(result, Rejection) and result.reason == reason, result
    assert result.reason in domain.rejection_reasons


def test_unreadable_generations_are_rejected(domain):
    seed = domain.seeds("train")[0]
    for text in ("", "no json here", "```json\n{\"query\": \n```", "[1, 2]"):
        result = domain.parse_task(text, seed)
        assert isinstance(result, Rejection) and result.reason == "not_json"


def test_simulator_prompt_and_reference_generation(domain):
    seed = domain.seeds("train")[0]
    prompt = domain.simulator_prompt(seed, [0.0, 0.5], "harder", 0.5)
    user = prompt.messages[1]["content"]
    assert "HARDER" in user and "25%" in user and '"org": "St. Petersburg"' in user and "Louisiana" in user
    for sibling in domain.seeds("train")[1:]:
        assert isinstance(domain.parse_task(domain.reference_generation(seed, sibling), seed), Task)


@needs_shared
def test_feasibility_search_solves_every_training_query(cache):
    d = get_domain("travelplanner", data_dir=str(SHARED))
    costs = []
    for task in d.seeds("train"):
        query = data.record_query(task.prompt)
        found = search(query, d.db, d.flights)
        assert found.feasible, (task.task_id, found.detail)
        assert evaluate_plan(query, found.plan, d.judge_db).final_pass
        costs.append(found.cost <= query.budget)
    assert all(costs)


def test_generation_checks_are_pure():
    with pytest.raises(Invalid) as info:
        generation.query_of({"query": "x", "org": "Rockford", "dest": "Texas", "days": 3, "start_date": "2022-03-01",
                             "people_number": 1, "budget": 100, "local_constraint": {}}, {"Rockford": "Illinois"})
    assert info.value.reason == "bad_field" and "not a TravelPlanner city" in info.value.detail
    assert generation.level_of({"house rule": None, "cuisine": ["Chinese"], "room type": None,
                                "transportation": "no flight"}) == "hard"


# ---------------------------------------------------------------- summary
def test_summary_rebuilds_the_metric_table():
    rows = {"easy": {"n": 2, "correct": 1.0, "accuracy": 0.5, "metric/delivered": 1.0, "metric/commonsense_passed": 7.5,
                     "metric/commonsense_judged": 8.0, "metric/commonsense_pass": 0.5, "metric/hard_passed": 1.0,
                     "metric/hard_judged": 1.0, "metric/hard_pass": 1.0, "metric/final_pass": 0.5},
            "hard": {"n": 1, "correct": 0.0, "accuracy": 0.0, "metric/delivered": 0.0, "metric/commonsense_passed": 0.0,
                     "metric/commonsense_judged": 8.0, "metric/commonsense_pass": 0.0, "metric/hard_passed": 0.0,
                     "metric/hard_judged": 4.0, "metric/hard_pass": 0.0, "metric/final_pass": 0.0}}
    table = summarize(rows, "final_pass")
    assert table["delivery_rate"] == pytest.approx(2 / 3) and table["commonsense_micro"] == pytest.approx(15 / 24)
    assert table["hard_micro"] == pytest.approx(2 / 6) and table["final_pass_rate"] == pytest.approx(1 / 3)
    plain = {k: {"n": v["n"], "correct": v["correct"], "accuracy": v["accuracy"]} for k, v in rows.items()}
    assert summarize(plain, "final_pass") == {"final_pass_rate": pytest.approx(1 / 3), "final_pass_easy": 0.5,
                                              "final_pass_hard": 0.0}
    assert "constraint_fraction" in summarize(plain, "constraint_fraction")


def test_evaluation_cli_path_reports_the_six_rates(domain):
    """genenv_jax.evaluation.evaluate (the CLI's path) carries the plans' metric counts to `summary`: a
    stand-in model answers the fixture's training queries with their gold plans, except one it leaves blank
    (undelivered: its 8 commonsense checks and its one hard constraint, the budget, count as failed)."""
    from genenv_jax.text import tokenization
    from genenv_jax.text.chat_text import ChatText
    from genenv_jax.evaluation import evaluate

    tokenizer = tokenization.load_tokenizer()
    text = ChatText(tokenizer, tokenization.pad_id(tokenizer), tokenization.stop_ids(tokenizer),
                    tokenization.im_end_id(tokenizer))
    tasks = domain.seeds("train")
    answers = {tuple(text.prompt(domain.agent_prompt(t))): text.encode(domain.reference_response(t)) for t in tasks[1:]}

    def generate(prompts, max_new_tokens):
        return [answers.get(tuple(p), text.encode("I cannot plan this."))[:max_new_tokens] for p in prompts]

    report = evaluate(domain, tasks, generate, tokenizer, max_new_tokens=4096, max_turns=1, progress=False)
    assert report.per_category["medium"]["metric/delivered"] == 1.0
    assert report.per_category["easy"]["metric/delivered"] == 0.0
    assert report.summary == {"delivery_rate": pytest.approx(2 / 3), "commonsense_micro": pytest.approx(16 / 24),
                              "commonsense_macro": pytest.approx(2 / 3), "hard_micro": pytest.approx(6 / 7),
                              "hard_macro": pytest.approx(2 / 3), "final_pass_rate": pytest.approx(2 / 3),
                              "final_pass_easy": 0.0, "final_pass_medium": 1.0, "final_pass_hard": 1.0}


# The tiny preset's loop, end to end from the command line: tests/integration/test_benchmark_loops.py.

"""API-Bank as a benchmark and a GenEnv domain: the official parser's quirks, the data join, scoring by
replay and execution, the simulator's execution check, the gold-call replay figures on the real data
(skipped without ../shared/benchmarks) and one tiny loop run on the fixture download (slow)."""

import json
from pathlib import Path

import pytest

from genenv_jax.domains.api_bank import data
from genenv_jax.domains.api_bank.calls import (official_text, parse_call, parse_official, parse_structured,
                                               render_call, tool_schema)
from genenv_jax.domains.api_bank.metrics import rouge_l
from genenv_jax.domains.api_bank.summary import summarize
from tests.support import REPO, TESTS

FIXTURES = TESTS / "fixtures" / "api_bank" / "dialogues"
SHARED = REPO.parent / "shared" / "benchmarks" / "api-bank"
needs_shared = pytest.mark.shared_data(SHARED, reason=f"real API-Bank data not at {SHARED}")


# ---------------------------------------------------------------- calls: the official parser's quirks
def test_official_parser_reads_quoted_arguments_and_keeps_every_value_as_text():
    call = parse_official("API-Request: [ModifyRegistration(appointment_id='34567890', new_appointment_date=\"2023-03-26\", "
                          "new_appointment_doctor='Dr. Lee')]")
    assert call.name == "ModifyRegistration"
    assert call.params == {"appointment_id": "34567890", "new_appointment_date": "2023-03-26",
                           "new_appointment_doctor": "Dr. Lee"}
    assert parse_official("[QueryStock(stock_code=AAPL, count=3)]").params == {"stock_code": "AAPL", "count": "3"}


def test_official_parser_quirks_cut_values_at_inner_quotes_and_keep_lists_as_text():
    # A value holding a quote ends at it (the rest of the text is skipped until the next key=...).
    cut = parse_official("[AddAgenda(content='John's party', time='2023-01-01 10:00:00')]")
    assert cut.params == {"content": "John", "time": "2023-01-01 10:00:00"}
    # A quoted list (how the data writes list-valued arguments) is cut at its first inner quote.
    health = parse_official("[RecordHealthData(user_id='12345', health_data='[{'name': 'blood_pressure'}]')]")
    assert health.params["health_data"] == "[{"
    # An unquoted list stays raw text: it can never equal a structured list.
    assert parse_official("[AddMeeting(attendees=['a', 'b'])]").params == {"attendees": "['a', 'b']"}
    # Commas inside a quoted value are fine; the call must sit on one line.
    assert parse_official("[Calculator(formula='1, 2')]").params == {"formula": "1, 2"}
    assert parse_official("[Calculator(\nformula='1+2')]") is None
    assert parse_official("I cannot call anything.") is None


def test_structured_parser_and_rendering_round_trip():
    text = render_call("Calculator", {"formula": "(1+2)*3"}, "structured")
    assert parse_structured(text).to_json() == {"api_name": "Calculator", "param_dict": {"formula": "(1+2)*3"}}
    assert parse_call(official_text("Calculator", {"formula": "2*3"}), "official").params == {"formula": "2*3"}
    assert parse_structured("<tool_call>{not json}</tool_call>") is None
    assert parse_structured("plain reply") is None
    with pytest.raises(ValueError, match="call_format"):
        parse_call("x", "xml")
    schema = tool_schema({"name": "A", "description": "d", "input_parameters": {"n": {"type": "int", "description": "x"}}})
    assert schema["function"]["parameters"]["properties"]["n"]["type"] == "integer"


# ---------------------------------------------------------------- metrics and summary
def test_rouge_l_strips_the_reply_label_and_scores_empty_replies_zero():
    assert rouge_l("Your appointment has been modified.", "AI: Your appointment has been modified.") == 1.0
    assert rouge_l("Your appointment has been modified.", "") == 0.0
    assert 0 < rouge_l("Your appointment has been modified.", "The appointment was modified.") < 1


def test_summary_pools_call_levels_by_items_and_reports_rouge():
    table = {"level-1-api": {"n": 10, "correct": 5.0, "accuracy": 0.5},
             "level-2-api": {"n": 5, "correct": 5.0, "accuracy": 1.0},
             "level-1-response": {"n": 4, "correct": 2.0, "accuracy": 0.5}}
    out = summarize(table)
    assert out == {"api_bank": 10 / 15, "level_1": 0.5, "level_2": 1.0, "rouge_l": 0.5, "rouge_l_level_1": 0.5}


# ---------------------------------------------------------------- data: the official files joined to their dialogues
def _check_join(root: Path):
    items = list(data.test_items(root))
    for it in items:
        end = data.API_INPUT_END if it["kind"] == "api" else data.RESPONSE_INPUT_END
        assert data.render_history(it["history"]) + end == it["input"], it["item_id"]
        if it["kind"] == "api":
            assert official_text(it["gold"]["api_name"], it["gold"]["param_dict"]) == it["expected_output"]
        else:
            assert it["expected"] == it["expected_output"]
    return items


def test_fixture_download_joins_every_test_record_to_its_source_turn():
    items = _check_join(FIXTURES)
    counts = {c: sum(i["category"] == c for i in items) for c in data.CATEGORIES[:4]}
    assert counts == {"level-1-api": 10, "level-1-response": 8, "level-2-api": 6, "level-2-response": 4}
    level3 = list(data.level3_items(FIXTURES))
    assert len(level3) == 2 and all(c["role"] == "API" for d in level3 for c in d["calls"])


@needs_shared
def test_real_data_sizes_and_the_official_texts_are_reproduced_exactly():
    items = _check_join(SHARED)
    counts = {c: sum(i["category"] == c for i in items) for c in data.CATEGORIES[:4]}
    assert counts == {"level-1-api": 399, "level-1-response": 375, "level-2-api": 135, "level-2-response": 103}
    level3 = list(data.level3_items(SHARED))
    assert len(level3) == 50 and sum(len(d["calls"]) for d in level3) == 245


def test_bad_downloads_fail_with_one_line_errors(tmp_path):
    from genenv_jax.data.prepared import DataMissing, check_data_dir

    with pytest.raises(DataMissing, match="level-1-api.json is missing"):
        check_data_dir(data.api_source(), tmp_path)
    (tmp_path / "d.jsonl").write_text('{"role": "User", "text": "hi"}\n{"role": "API"}\n')
    with pytest.raises(DataMissing, match=r"d.jsonl:2 is not a User/AI/API turn"):
        data.read_dialogue(tmp_path / "d.jsonl")


def test_split_of_file_is_stable_and_respects_the_fraction():
    files = [f"F{i}.jsonl" for i in range(400)]
    shares = [data.split_of_file(f, 0.25, "s") for f in files]
    assert shares == [data.split_of_file(f, 0.25, "s") for f in files]
    assert 60 < shares.count("validation") < 140
    assert {data.split_of_file(f, 0.0, "s") for f in files} == {"train"}


# ---------------------------------------------------------------- the domain (needs the API implementations)
@pytest.fixture
def domain(monkeypatch, tmp_path):
    pytest.importorskip("genenv_jax.domains.api_bank.executor", reason="the API implementations are not here")
    from genenv_jax.domains.api_bank import APIBankDomain

    monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
    return APIBankDomain(data_dir=str(FIXTURES), scoring="strict")   # today's checks (official: test_api_bank_official.py)


def _task(domain, split, category, api=None):
    return next(t for t in domain.seeds(split) if t.category == category
                and (api is None or t.verifier.get("gold", {}).get("api_name") == api))


def test_seeds_splits_and_categories(domain):
    test = domain.seeds("test")
    assert {t.category for t in test} == set(data.CATEGORIES)
    assert len(test) == 10 + 8 + 6 + 4 + 2
    train = domain.seeds("train") + domain.seeds("validation")
    assert {t.metadata["split"] for t in train} <= {"train", "validation"} and train
    assert len({t.task_id for t in domain.seeds("all")}) == len(domain.seeds("all"))


def test_call_items_are_scored_by_replay_and_execution(domain):
    task = _task(domain, "test", "level-1-api", "QueryBalance")  # needs the token of an earlier call
    assert domain.score(task, domain.reference_response(task)) == 1.0
    wrong = dict(task.verifier["gold"]["param_dict"], token="not-a-token")
    details = domain.score_details(task, render_call("QueryBalance", wrong, "structured")).details
    assert details["correct"] is False and details["error_type"] in ("exception", "wrong_result")
    assert domain.score_details(task, "I will check that.").details["error_type"] == "no_call"
    assert domain.score(task, "<tool_call>{\"name\": \"__import__\", \"arguments\": {}}</tool_call>") == 0.0


def test_official_format_prompt_is_the_test_files_text_and_scores_its_expected_output(domain):
    from genenv_jax.domains.api_bank import APIBankDomain

    official = APIBankDomain(data_dir=domain.data_dir, call_format="official", scoring="strict")
    task = _task(official, "test", "level-1-api", "Calculator")
    prompt = official.agent_prompt(task)
    assert prompt.tools is None and prompt.messages[0]["content"].endswith(task.prompt["input"])
    assert official.score(task, task.metadata["expected_output"]) == 1.0
    health = _task(official, "test", "level-1-api", "RecordHealthData")  # a quoted list: the parser cuts it
    assert official.score(health, health.metadata["expected_output"]) == 0.0
    assert domain.score(_task(domain, "test", "level-1-api", "RecordHealthData"),
                        domain.reference_response(_task(domain, "test", "level-1-api", "RecordHealthData"))) == 1.0


def test_response_items_are_scored_with_rouge_l(domain):
    task = _task(domain, "test", "level-1-response")
    assert domain.score(task, task.verifier["expected"]) == 1.0
    assert domain.score(task, "") == 0.0


def test_level3_episode_runs_calls_on_its_own_state_and_ends_on_a_reply(domain):
    task = _task(domain, "test", "level-3")
    env = domain.environment(task)
    first = env.reset()
    assert [t["function"]["name"] for t in first.tools] == ["ToolSearcher"]
    outcome = env.step(domain.reference_turns(task)[0])
    assert not outcome.done and outcome.observation[0]["role"] == "tool"
    assert env.step("<tool_call>{broken</tool_call>").info["errors"] == {"unreadable_call": 1}
    assert env.step("All done.").done
    score = env.score([{"role": "assistant", "content": "All done."}])
    assert score.reward == 0.0 and score.details["gold_calls"] == len(task.verifier["calls"])


def test_simulator_tasks_are_accepted_only_when_their_calls_execute(domain):
    seed = _task(domain, "train", "level-1-api", "Calculator")
    assert domain.simulator_prompt(seed, [0.5], "harder").messages[1]["content"].count("Calculator") >= 2
    generated = domain.parse_task(domain.reference_generation(seed), seed, "similar")
    assert generated.category == "level-1-api" and generated.parent_id == seed.task_id
    assert domain.score(generated, domain.reference_response(generated)) == 1.0

    def gen(obj):
        return "```json\n" + json.dumps(obj) + "\n```"

    user = [{"role": "User", "text": "Compute 2 times 21 please."}]
    cases = {
        "no_json": "no task here",
        "missing_field": gen({"dialogue": user}),
        "dialogue_not_user_first": gen({"dialogue": [{"role": "AI", "text": "hi"}],
                                        "expected_call": {"api_name": "Calculator", "param_dict": {"formula": "2*21"}}}),
        "unknown_api": gen({"dialogue": user, "expected_call": {"api_name": "RunShell", "param_dict": {}}}),
        "bad_arguments": gen({"dialogue": user, "expected_call": {"api_name": "Calculator", "param_dict": {"x": "1"}}}),
        "call_exception": gen({"dialogue": user, "expected_call": {"api_name": "QueryBalance",
                                                                   "param_dict": {"token": "nobody"}}}),
        "copied_seed": gen({"dialogue": [{k: v for k, v in t.items() if k != "result"} for t in seed.prompt["history"]],
                            "expected_call": {k: seed.verifier["gold"][k] for k in ("api_name", "param_dict")}}),
    }
    for reason, text in cases.items():
        rejection = domain.parse_task(text, seed)
        assert getattr(rejection, "reason", None) == reason, (reason, rejection)
        assert rejection.reason in domain.rejection_reasons
    reply_seed = _task(domain, "train", "level-1-response")
    assert domain.parse_task(domain.reference_generation(reply_seed), reply_seed).category == "level-1-response"


def test_evaluation_reports_the_headline_numbers_through_summary(domain):
    """The evaluation CLI's path (genenv_jax.evaluation.evaluate) with a stand-in model that answers
    each first prompt with the task's reference (and ends level-3 episodes at once)."""
    from genenv_jax.text import tokenization
    from genenv_jax.text.chat_text import ChatText
    from genenv_jax.evaluation import evaluate

    tokenizer = tokenization.load_tokenizer()
    text = ChatText(tokenizer, tokenization.pad_id(tokenizer), tokenization.stop_ids(tokenizer),
                    tokenization.im_end_id(tokenizer))
    tasks = [t for t in domain.seeds("test") if t.category != "level-2-api"]
    answers = {tuple(text.prompt(domain.agent_prompt(t))): text.encode(domain.reference_response(t)) for t in tasks}
    done = text.encode("Done.")

    def generate(prompts, max_new_tokens):
        return [answers.get(tuple(p), done)[:max_new_tokens] for p in prompts]

    report = evaluate(domain, tasks, generate, tokenizer, max_new_tokens=400, max_turns=3, progress=False)
    assert report.per_category["level-1-api"]["accuracy"] == 1.0
    assert report.per_category["level-1-response"]["accuracy"] == 1.0
    assert report.summary["level_1"] == 1.0 and report.summary["rouge_l"] == 1.0
    level3 = report.per_category["level-3"]
    assert 0 < level3["accuracy"] < 1  # one gold call made (the first), then the episode ended
    assert report.summary["api_bank"] == (10 + level3["correct"]) / (10 + level3["n"])


# ---------------------------------------------------------------- the gold-call replay figures on the real data
# Misses common to both formats (docs/api_bank.md explains each): Dictionary/Translate need the network
# (excluded); the recorded DocumentQA answers ("The question is too difficult to answer.") are not what the
# database answers; CancelTimedSwitch's device 10000025 is not in init_database; one QueryRegistration
# output holds an appointment id that AppointmentRegistration generated at random; the lexical tool
# searcher ranks 10 level-2 keyword queries differently from upstream's embedding model.
COMMON_MISSES = {"level-1-api": {"Dictionary:exception": 5, "Translate:exception": 4, "DocumentQA:wrong_result": 7,
                                 "CancelTimedSwitch:exception": 5, "QueryRegistration:wrong_result": 1},
                 "level-2-api": {"ToolSearcher:wrong_result": 10}, "level-3": {}}
# The official parser also loses every call with a quoted list argument (health_data, attendees, ...).
OFFICIAL_ONLY = {"level-1-api": {"RecordHealthData:exception": 19, "AddMeeting:exception": 3, "ModifyMeeting:exception": 5,
                                 "QueryMeeting:exception": 3, "DeleteMeeting:exception": 1},
                 "level-2-api": {"RecordHealthData:exception": 3, "AddMeeting:exception": 2, "ModifyMeeting:exception": 1,
                                 "QueryMeeting:exception": 2, "DeleteMeeting:exception": 2},
                 "level-3": {"AddMeeting:not_reproduced": 5, "MovieRecommendations:not_reproduced": 5}}
# API-Bank's own evaluator does not replay a dialogue's earlier calls: a call that needs an earlier state
# change (a verification code ForgotPassword sent, a user RegisterUser created and DeleteAccount removed, the
# appointment AppointmentRegistration made) raises on the initial state.
FRESH_STATE_ONLY = {"level-1-api": {"ForgotPassword:exception": 4, "GetUserToken:exception": 2,
                                    "RegisterUser:exception": 1, "QueryRegistration:exception": 1,
                                    "QueryRegistration:wrong_result": -1},
                    "level-2-api": {}, "level-3": {}}


@needs_shared
@pytest.mark.parametrize("call_format, replay_history, expected", [
    ("official", True, {"level-1-api": (346, 399), "level-2-api": (115, 135), "level-3": (235, 245)}),
    ("structured", True, {"level-1-api": (377, 399), "level-2-api": (125, 135), "level-3": (245, 245)}),
    ("official", False, {"level-1-api": (339, 399), "level-2-api": (115, 135), "level-3": (235, 245)}),
])
def test_gold_call_replay_figures(monkeypatch, tmp_path, call_format, replay_history, expected):
    """Every test call answered with its own gold call: the figures of docs/api_bank.md, miss by miss."""
    import collections

    pytest.importorskip("genenv_jax.domains.api_bank.executor", reason="the API implementations are not here")
    from genenv_jax.domains.api_bank import APIBankDomain
    from genenv_jax.domains.api_bank.replay import replay_gold

    monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
    figures = replay_gold(APIBankDomain(data_dir=str(SHARED), call_format=call_format, replay_history=replay_history,
                                        scoring="strict"))
    assert figures.counts == expected, figures.lines()
    for category, misses in figures.misses.items():
        wanted = collections.Counter(COMMON_MISSES[category])
        if call_format == "official":
            wanted.update(OFFICIAL_ONLY[category])
        if not replay_history:
            wanted.update(FRESH_STATE_ONLY[category])
            wanted = +wanted   # drop the QueryRegistration wrong_result that became an exception
        assert collections.Counter(f"{api}:{reason}" for _, api, reason in misses) == wanted, category


# The tiny preset's loop, end to end from the command line: tests/integration/test_benchmark_loops.py.

"""API-Bank's two scorings: "official" (the original evaluator's verdicts, quirks and bugs included) and
"strict" (today's checks). One designed case per difference class, pinned in both scorings, then the
original's counts on the shared data (gold test calls and recorded calls; skipped without it).

The counts were measured against the original code (upstream 483554ea) on 2026-12-02 with a harness
outside the repository (docs/api_bank.md describes it); here they are computed by our code only.
"""

from __future__ import annotations

import collections
import json

import pytest

from genenv_jax.domains.api_bank import official
from genenv_jax.domains.api_bank.correctness import is_correct
from genenv_jax.domains.api_bank.executor import APIBank, ApiResult, calls_from_level3, calls_from_sample, replay_dialogue
from genenv_jax.domains.api_bank.summary import summarize
from tests.support import REPO, TESTS

FIXTURES = TESTS / "fixtures" / "api_bank"
SHARED = REPO.parent / "shared" / "benchmarks" / "api-bank"
needs_shared = pytest.mark.shared_data(SHARED, reason=f"real API-Bank data not at {SHARED}")
JOHN, JANE = "a9s8d7f6g5h4j3k2l1", "o8i7u6y5t4r3e2w1q0"   # tokens in the fixture's Account.json


@pytest.fixture(scope="module")
def initial():
    db = FIXTURES / "apis" / "init_database"
    return {s: APIBank(db, suite="level-1-2", scoring=s) for s in ("official", "strict")}


def verdicts(initial, name, gold_params, params=None, gold=None):
    """{scoring: verdict} for `params` against the recording of `gold_params` (made in that scoring, or
    `gold`, a recorded result dict), each on a fresh state."""
    out = {}
    for scoring, bank in initial.items():
        recorded = gold or bank.copy_initial().call(name, gold_params).to_json()
        result = bank.copy_initial().call(name, gold_params if params is None else params)
        out[scoring] = is_correct(recorded, result, scoring)
    return out


def r(name, inputs, output, exception=None):
    return ApiResult(name, inputs, output, exception)


# ---------------------------------------------------------------- the APIs that behave differently
def test_document_qa_always_too_difficult_in_official(initial):
    args = {"url": "https://www.example.com/article-4.txt", "question": "What are the key features of this software?"}
    assert initial["official"].copy_initial().call("DocumentQA", args).output == "The question is too difficult to answer."
    assert initial["strict"].copy_initial().call("DocumentQA", args).output.startswith("Key features")
    recorded = {"api_name": "DocumentQA", "input": args, "output": "The question is too difficult to answer.",
                "exception": None}   # what the data records
    assert verdicts(initial, "DocumentQA", args, gold=recorded) == {"official": True, "strict": False}


def test_timed_switch_takes_name_only_in_official(initial):
    by_id = {"device_id": "12345", "time": "2023-03-20 07:00:00", "on": "True"}
    refused = initial["official"].copy_initial().call("TimedSwitch", by_id)
    assert refused.refused == "invalid_parameter_name" and refused.output is None
    recorded = {"api_name": "TimedSwitch", "input": {**by_id, "on": True}, "output": "success", "exception": None}
    assert verdicts(initial, "TimedSwitch", by_id, gold=recorded) == {"official": False, "strict": True}
    by_name = {"name": "Light ", "time": "2023-03-20 07:00:00", "on": "True"}
    assert verdicts(initial, "TimedSwitch", {**by_name, "name": "light"}, by_name) == {"official": True, "strict": False}


def test_query_scene_output_case():
    gold = r("QueryScene", {"name": "Morning Routine"}, [{"name": "Light", "description": "d"}])
    mine = r("QueryScene", {"name": "morning routine"}, [{"name": "light", "description": "d"}])
    assert (is_correct(gold, mine, "official"), is_correct(gold, mine, "strict")) == (False, True)
    same = r("QueryScene", {"name": " MORNING ROUTINE "}, [{"name": "Light", "description": "d"}])
    assert is_correct(gold, same, "official")


def test_official_normalises_inputs_before_running(initial):
    stock = {"stock_code": "SQ", "date": "2022-03-14"}
    assert verdicts(initial, "QueryStock", stock, {"stock_code": " sq ", "date": "2022-03-14"}) == \
        {"official": True, "strict": False}
    cancel = {"appointment_id": "12345678"}
    assert verdicts(initial, "CancelRegistration", cancel, {"appointment_id": "12345678 "}) == \
        {"official": True, "strict": False}
    email = {"receiver": "john@example.com", "subject": "s", "content": "c"}
    assert verdicts(initial, "SendEmail", email, {**email, "receiver": "JOHN@EXAMPLE.COM"}) == \
        {"official": False, "strict": False}   # official: the address pattern is lower-case only
    assert initial["official"].copy_initial().call("SendEmail", {**email, "receiver": "JOHN@EXAMPLE.COM"}).exception == \
        "Email address of the receiver is invalid."


# ---------------------------------------------------------------- per-API tolerances of the original rules
def test_content_overlap_and_ignored_token(initial):
    agenda = {"token": JOHN, "content": "Meeting with the client", "time": "2023-03-18 10:00:00", "location": "Office"}
    one_word = {**agenda, "content": "Meeting with the boss"}           # 3 of 5 words shared: > 0.5
    assert verdicts(initial, "AddAgenda", agenda, one_word) == {"official": True, "strict": False}
    two_words = {**agenda, "content": "Lunch with the boss"}            # 2 of 6: < 0.5
    assert verdicts(initial, "AddAgenda", agenda, two_words) == {"official": False, "strict": False}
    other_user = {**agenda, "token": JANE}
    assert verdicts(initial, "AddAgenda", agenda, other_user) == {"official": True, "strict": False}
    reminder = {"token": JOHN, "content": "Call Mom", "time": "2023-03-20 09:00:00"}
    assert verdicts(initial, "AddReminder", reminder, {**reminder, "content": "call mom"}) == \
        {"official": True, "strict": False}                               # the reminder rules lower-case


def test_rule_tolerances_without_execution():
    def both(gold, mine):
        return is_correct(gold, mine, "official"), is_correct(gold, mine, "strict")

    assert both(r("QueryBalance", {"token": "t"}, 1.0), r("QueryBalance", {"token": " t "}, 1.0)) == (True, False)
    assert both(r("Wiki", {"keyword": "a"}, {"url": "u"}), r("Wiki", {"keyword": "b"}, {"url": "u"})) == (True, False)
    assert both(r("PlayMusic", {"music_name": "a"}, "x"), r("PlayMusic", {"music_name": "b"}, "x")) == (True, False)
    assert both(r("Calculator", {"formula": "1+2"}, 3.0), r("Calculator", {"formula": "1 +\t2"}, 3.0)) == (False, True)
    assert both(r("RecordHealthData", {"user_id": "a1", "time": "2023-01-01 10:00:00", "health_data": [1]}, "success"),
                r("RecordHealthData", {"user_id": "A1 ", "time": "2023-01-01 10:00:00", "health_data": [2]},
                  "success")) == (True, False)
    assert both(r("GetToday", None, "2023-03-31"), r("GetToday", None, "2030-01-01")) == (True, True)
    nearby = {"latitude": 1.0, "longitude": 2.0, "distance": 5}
    assert official.is_correct(r("NearbyRestaurants", nearby, ["a"]), r("NearbyRestaurants", nearby, ["b"]), "level-3")


# ---------------------------------------------------------------- the original's bugs, as verdicts
def test_every_successful_delete_meeting_is_wrong_in_official(initial):
    meeting = {"token": JOHN, "meeting_topic": "Sales Meeting", "start_time": "2023-03-20 14:00:00",
               "end_time": "2023-03-20 16:00:00", "location": "Conference Room A", "attendees": ["John Smith"]}
    assert initial["official"].copy_initial().call("DeleteMeeting", meeting).output == "success"
    assert verdicts(initial, "DeleteMeeting", meeting) == {"official": False, "strict": True}
    missing = {**meeting, "meeting_topic": "Nothing", "start_time": "2023-01-01 00:00:00"}
    assert verdicts(initial, "DeleteMeeting", missing) == {"official": True, "strict": True}   # failures compare


def test_padded_integer_is_refused_never_a_crash(initial):
    hotel = {"hotel_name": "Hilton", "check_in_time": "2023-04-01", "check_out_time": "2023-04-02",
             "room_count": "1", "adult_count": "2", "child_count": "0"}
    padded = {**hotel, "room_count": " 1"}
    result = initial["official"].copy_initial().call("BookHotel", padded)
    assert result.refused == "abort:invalid_int" and result.exception.startswith("invalid parameter type")
    assert verdicts(initial, "BookHotel", hotel, padded) == {"official": False, "strict": True}
    for bad in ("-1", "1.0"):
        assert initial["official"].copy_initial().call("BookHotel", {**hotel, "room_count": bad}).refused


def test_list_arguments_stay_raw_text_in_official(initial):
    health = {"user_id": "12345", "time": "2023-04-09 12:00:00",
              "health_data": "[{'name': 'blood_pressure', 'value': '120/80'}]"}
    recorded = {"api_name": "RecordHealthData", "input": {**health, "health_data": [
        {"name": "blood_pressure", "value": "120/80"}]}, "output": "success", "exception": None}
    assert initial["official"].copy_initial().call("RecordHealthData", health).exception == \
        "The health data has invalid format."
    assert verdicts(initial, "RecordHealthData", health, gold=recorded) == {"official": False, "strict": True}
    meeting = {"token": JOHN, "meeting_topic": "Review", "start_time": "2023-05-01 10:00:00",
               "end_time": "2023-05-01 11:00:00", "location": "Room 1", "attendees": "['John', 'Jane']"}
    added = {"api_name": "AddMeeting", "input": {**meeting, "attendees": ["John", "Jane"]}, "output": "success",
             "exception": None}
    assert verdicts(initial, "AddMeeting", meeting, gold=added) == {"official": False, "strict": True}
    as_list = {**meeting, "attendees": ["John", "Jane"]}    # a structured call's real list passes unchanged
    assert verdicts(initial, "AddMeeting", as_list, gold=added) == {"official": True, "strict": True}


def test_rules_that_raise_are_wrong_and_names_must_match():
    assert not is_correct(r("SearchEngine", {"keyword": "k"}, None, "e"), r("SearchEngine", {"keyword": "k"}, None, "e"),
                          "official")                                  # the original's unassigned sorted copy
    assert not official.is_correct(r("HotelAvailability", {"destination": "x", "check_in_date": "a",
                                                           "check_out_date": "b"}, None, "e"),
                                   r("HotelAvailability", {"destination": "x", "check_in_date": "a",
                                                           "check_out_date": "b"}, None, "e"), "level-3")
    agenda = {"token": "t", "content": "a b", "time": "x", "location": "y"}
    unnamed = {"input": agenda, "output": "success", "exception": None}   # a recording without api_name
    assert not is_correct(unnamed, r("AddAgenda", agenda, "success"), "official")
    assert is_correct(unnamed, r("AddAgenda", agenda, "success"), "strict")
    assert not is_correct(r("AddAlarm", {"t": 1}, "ok"), r("QueryAlarm", {"t": 1}, "ok"), "official")
    with pytest.raises(ValueError, match="scoring"):
        is_correct(unnamed, r("AddAgenda", agenda, "success"), "lenient")


# ---------------------------------------------------------------- the domain: default, both verdicts, summary
def test_domain_defaults_to_official_and_reports_the_strict_verdict(monkeypatch, tmp_path):
    from genenv_jax.domains.api_bank import APIBankDomain

    monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
    domain = APIBankDomain(data_dir=str(FIXTURES / "dialogues"))
    assert (domain.scoring, domain.replay_history) == ("official", False)
    assert APIBankDomain(data_dir="x", scoring="strict").replay_history is True
    with pytest.raises(ValueError, match="scoring"):
        APIBankDomain(data_dir="x", scoring="lenient")
    health = next(t for t in domain.seeds("test") if t.verifier.get("gold", {}).get("api_name") == "RecordHealthData")
    details = domain.score_details(health, domain.reference_response(health)).details
    assert (details["correct"], details["strict_correct"]) == (False, True)   # the list argument given as text
    assert (details["metric/correct"], details["metric/strict_correct"]) == (0.0, 1.0)
    table = {"level-1-api": {"n": 4, "correct": 1.0, "metric/strict_correct": 0.75},
             "level-2-api": {"n": 2, "correct": 2.0, "metric/strict_correct": 1.0}}
    summary = summarize(table)
    assert summary["level_1"] == 0.25 and summary["strict_level_1"] == 0.75
    assert summary["api_bank"] == 0.5 and summary["strict_api_bank"] == 5 / 6


# ---------------------------------------------------------------- the original's counts on the real data
EXCLUDED = {"ToolSearcher", "Dictionary", "Translate"}


@needs_shared
def test_recorded_calls_in_official_scoring_give_the_originals_verdicts():
    """Every recorded call replayed in order: the original gives 336/380, 64/74 and 131/131 (ToolSearcher,
    Dictionary and Translate left out); strict gives today's 367/380, 74/74, 131/131."""
    expected = {"official": {"level-1-given-desc": (336, 380), "level-2-toolsearcher": (64, 74), "level-3": (131, 131)},
                "strict": {"level-1-given-desc": (367, 380), "level-2-toolsearcher": (74, 74), "level-3": (131, 131)}}
    official_misses = collections.Counter()
    for scoring, want in expected.items():
        banks = {s: APIBank(SHARED / "init_database", suite=s, scoring=scoring) for s in ("level-1-2", "level-3")}
        for source, counts in want.items():
            if source == "level-3":
                dialogues = [calls_from_level3(d) for d in json.loads((SHARED / "test-data/level-3.json").read_text())]
            else:
                dialogues = [calls_from_sample(p.read_text().splitlines())
                             for p in sorted((SHARED / "lv1-lv2-samples" / source).glob("*.jsonl"))]
            rows = [row for calls in dialogues
                    for row in replay_dialogue(calls, banks["level-3" if source == "level-3" else "level-1-2"]
                                               .copy_initial()) if row.recorded.api_name not in EXCLUDED]
            assert (sum(row.ok for row in rows), len(rows)) == counts, (scoring, source)
            if scoring == "official":
                official_misses.update(row.recorded.api_name for row in rows if not row.ok)
    # list arguments as raw text (RecordHealthData, meetings), DeleteMeeting's bug, device_id, scene output
    # case, CancelTimedSwitch's missing device, QueryRegistration's random id
    assert official_misses == {"RecordHealthData": 22, "ModifyMeeting": 6, "QueryMeeting": 5, "AddMeeting": 4,
                               "DeleteMeeting": 3, "CancelTimedSwitch": 5, "QueryScene": 5, "TimedSwitch": 3,
                               "QueryRegistration": 1}


@needs_shared
@pytest.mark.parametrize("call_format, expected", [
    ("official", {"level-1-api": (338, 399), "level-2-api": (115, 135), "level-3": (235, 245)}),
    ("structured", {"level-1-api": (338, 399), "level-2-api": (115, 135), "level-3": (245, 245)}),
])
def test_gold_test_calls_in_official_scoring(monkeypatch, tmp_path, call_format, expected):
    """Every test call answered with its gold call on a fresh state (the original's protocol). The original
    credits 338 of the 390 comparable level-1 calls and 80 of the 90 level-2 calls that are not ToolSearcher
    searches; our lexical ToolSearcher adds 35 of 45 searches at level 2, Dictionary/Translate 0 of 9."""
    from genenv_jax.domains.api_bank import APIBankDomain
    from genenv_jax.domains.api_bank.replay import replay_gold

    monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
    figures = replay_gold(APIBankDomain(data_dir=str(SHARED), call_format=call_format))
    assert figures.scoring == "official" and figures.counts == expected, figures.lines()
    if call_format == "official":
        level1 = collections.Counter(f"{api}:{why}" for _, api, why in figures.misses["level-1-api"])
        assert level1 == {"RecordHealthData:exception": 19, "ModifyMeeting:wrong_result": 5,
                          "QueryMeeting:wrong_result": 3, "AddMeeting:wrong_result": 3, "DeleteMeeting:wrong_result": 1,
                          "ForgotPassword:exception": 4, "GetUserToken:exception": 2, "RegisterUser:exception": 1,
                          "QueryRegistration:exception": 1, "CancelTimedSwitch:refused": 5, "TimedSwitch:refused": 3,
                          "QueryScene:wrong_result": 5, "Dictionary:exception": 5, "Translate:exception": 4}

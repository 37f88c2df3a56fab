"""API-Bank's original per-API correctness rules (each API class's `check_api_call_correctness` at upstream
483554ea, levels 1-2 in `apis/`, level 3 in `lv3_apis/`), restated for `scoring="official"`.

A rule sees two result dicts {api_name, input, output, exception}: the predicted call's and the gold
call's recording. The rules tolerate what an exact comparison rejects, and some ignore fields:
  - content-like text (AddAgenda, ModifyAgenda, QueryAgenda: `content`; the reminder APIs: `content`
    lower-cased; the meeting APIs: `meeting_topic`) passes when the word sets (split on " ") overlap by
    more than half (|A & B| / |A | B| > 0.5): one changed word of four still passes;
  - several rules ignore the token (the agenda and reminder rules compare content, time and location;
    the delete rules only the output, exception and time), so a call with another user's token passes
    when the outputs agree;
  - stripping, upper/lower case and time/date normalisation per API (QueryBalance strips the token,
    SendEmail lower-cases the receiver, QueryStock upper-cases the code, RecordHealthData the user id);
  - Wiki and PlayMusic ignore the input; GetToday only needs an output; RegisterUser and
    AppointmentRegistration ignore their random outputs; NearbyRestaurants compares the input only.
And their bugs, reproduced as verdicts (never as crashes):
  - DeleteMeeting, when both calls succeed, reads an input `time` its calls never have: a KeyError,
    which the evaluator scores wrong. So every successful DeleteMeeting is wrong;
  - a rule that raises (KeyError, a text method on a non-text value, SearchEngine when both outputs
    are missing, HotelAvailability's output when it is None) is wrong: the original evaluator either
    scores a KeyError wrong or stops its run; we never stop (docs/api_bank.md);
  - a rule that reads the gold's `api_name` fails (KeyError) when the recording lacks one.
The rules copy their inputs first: the originals pop keys from both dicts (the meeting rules drop
`meeting_topic` before comparing the rest), which must not change a recorded gold result here.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any, Callable, Mapping

Result = dict[str, Any]
Rule = Callable[[Result, Result], bool]

_TIME = "%Y-%m-%d %H:%M:%S"
_DATE = "%Y-%m-%d"


class _Unequal:
    """A failed normalisation: the original keeps the exception object, equal only to itself."""

    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = object.__hash__


def _zfill_year(text: str) -> str:
    parts = text.split("-")
    if len(parts) == 3 and len(parts[0]) != 4:
        parts[0] = parts[0].zfill(4)
    return "-".join(parts)


def _normal(text: Any, fmt: str, out_fmt: str | None = None) -> Any:
    """The original's format_check: strip, zero-fill a short year, parse as `fmt`, print as `out_fmt`."""
    try:
        return datetime.datetime.strptime(_zfill_year(text.strip()), fmt).strftime(out_fmt or fmt)
    except ValueError:
        return _Unequal()


def _history_date(text: Any) -> Any:
    """QueryHistoryToday's date filter: %Y-%m-%d or %m-%d, compared as %m-%d."""
    text = _zfill_year(text.strip())
    for fmt in (_DATE, "%m-%d"):
        try:
            return datetime.datetime.strptime(text, fmt).strftime("%m-%d")
        except ValueError:
            continue
    return _Unequal()


def _health_span(user_id: Any, start: Any, end: Any) -> tuple[Any, Any, Any]:
    user = user_id.upper().strip() or None

    def moment(text: Any) -> Any:
        try:
            return datetime.datetime.strptime(_zfill_year(text.strip()), _TIME)
        except ValueError:
            return _Unequal()

    return user, moment(start), moment(end)


def _words_overlap(a: Any, b: Any, lower: bool = False) -> bool:
    """More than half of the union of the two texts' words (split on single spaces) is shared."""
    if lower:
        a, b = a.lower(), b.lower()
    left, right = set(a.split(" ")), set(b.split(" "))
    return len(left & right) / len(left | right) > 0.5


def _same_outcome(r: Result, g: Result) -> bool:
    return r["output"] == g["output"] and r["exception"] == g["exception"]


def exact(r: Result, g: Result) -> bool:
    """input, output and exception all equal (Python equality: 150 == 150.0)."""
    return r["input"] == g["input"] and _same_outcome(r, g)


def _named(rule: Rule) -> Rule:
    """The rule after the original's `assert response['api_name'] == groundtruth['api_name']`."""
    def checked(r: Result, g: Result) -> bool:
        if r["api_name"] != g["api_name"]:
            return False
        return rule(r, g)
    return checked


def _content_rule(key: str, lower: bool, compared: tuple[str, ...]) -> Rule:
    """Agenda/reminder rules: the text overlaps, the `compared` inputs, output and exception are equal."""
    def rule(r: Result, g: Result) -> bool:
        return (_words_overlap(r["input"][key], g["input"][key], lower)
                and all(r["input"][k] == g["input"][k] for k in compared) and _same_outcome(r, g))
    return rule


def _without(inputs: Mapping[str, Any], key: str) -> dict[str, Any]:
    """The inputs less `key` (the original pops it: KeyError when it is absent)."""
    rest = dict(inputs)
    rest.pop(key)
    return rest


def _meeting(r: Result, g: Result) -> bool:
    """The topic overlaps; every other input, the output and the exception are equal."""
    overlap = _words_overlap(r["input"]["meeting_topic"], g["input"]["meeting_topic"])
    return overlap and _without(r["input"], "meeting_topic") == _without(g["input"], "meeting_topic") \
        and _same_outcome(r, g)


def _deleted_at_time(r: Result, g: Result) -> bool:
    """Delete rules: two successes agree when the input `time` agrees (a key DeleteMeeting lacks)."""
    if g["output"] == "success" and r["output"] == "success":
        return r["input"]["time"] == g["input"]["time"]
    return _same_outcome(r, g)


def _random_output(r: Result, g: Result) -> bool:
    """RegisterUser: the token is random; a gold failure must not be a predicted success."""
    if g["output"] is None and r["output"] is not None:
        return False
    return r["input"] == g["input"] and r["exception"] == g["exception"]


def _appointment(r: Result, g: Result) -> bool:
    ri, gi = r["input"], g["input"]
    if ri["patient_name"].strip() != gi["patient_name"].strip():
        return False
    if _normal(ri["date"], _DATE) != _normal(gi["date"], _DATE):
        return False
    if ri["doctor_name"].strip() != gi["doctor_name"].strip():
        return False
    if g["output"] is None and r["output"] is not None:
        return False
    return r["exception"] == g["exception"]


def _modify_registration(r: Result, g: Result) -> bool:
    ri, gi = r["input"], g["input"]

    def fields(inputs: Mapping[str, Any], as_text: bool) -> tuple[Any, Any, Any]:
        ident = (str(inputs["appointment_id"]) if as_text else inputs["appointment_id"]).strip()
        date, doctor = inputs["new_appointment_date"], inputs["new_appointment_doctor"]
        return (ident, _normal(date, _DATE) if date is not None else None,
                doctor.strip() if doctor is not None else None)

    return fields(ri, True) == fields(gi, False) and _same_outcome(r, g)


def _stripped(*keys: str, lower: tuple[str, ...] = ()) -> Rule:
    """The inputs `keys` equal after strip() (and lower() for `lower`), output and exception equal."""
    def norm(inputs: Mapping[str, Any], key: str) -> Any:
        value = inputs[key].strip()
        return value.lower() if key in lower else value

    def rule(r: Result, g: Result) -> bool:
        return all(norm(r["input"], k) == norm(g["input"], k) for k in keys) and _same_outcome(r, g)
    return rule


def _switch(with_on: bool) -> Rule:
    def rule(r: Result, g: Result) -> bool:
        ri, gi = r["input"], g["input"]
        return (ri["name"].strip().lower() == gi["name"].strip().lower()
                and _normal(ri["time"], _TIME) == _normal(gi["time"], _TIME)
                and (not with_on or ri["on"] == gi["on"]) and _same_outcome(r, g))
    return rule


def _record_health(r: Result, g: Result) -> bool:
    ri, gi = r["input"], g["input"]
    return (str(ri["user_id"]).upper().strip() == gi["user_id"].upper().strip()
            and _normal(ri["time"], _TIME) == _normal(gi["time"], _TIME) and _same_outcome(r, g))


def _query_health(r: Result, g: Result) -> bool:
    ri, gi = r["input"], g["input"]
    return (_health_span(ri["user_id"], ri["start_time"], ri["end_time"])
            == _health_span(gi["user_id"], gi["start_time"], gi["end_time"]) and _same_outcome(r, g))


def _stock(r: Result, g: Result) -> bool:
    def norm(inputs: Mapping[str, Any]) -> tuple[Any, Any]:
        code = inputs["stock_code"].upper().strip() or None
        return code, _normal(inputs["date"], _DATE)
    return norm(r["input"]) == norm(g["input"]) and _same_outcome(r, g)


def _history(r: Result, g: Result) -> bool:
    return _history_date(r["input"]["date"]) == _history_date(g["input"]["date"]) and _same_outcome(r, g)


def _symptom(r: Result, g: Result) -> bool:
    """SymptomSearch and EmergencyKnowledge: the symptom stripped and lower-cased; an empty one raises
    in the original's check (EmergencyKnowledge lower-cases an exception object), so it is wrong."""
    def norm(text: Any) -> str:
        text = text.strip().lower()
        if not text:
            raise ValueError("The symptom cannot be empty.")
        return text

    return norm(r["input"]["symptom"]) == norm(g["input"]["symptom"]) and _same_outcome(r, g)


def _query_registration(r: Result, g: Result) -> bool:
    ri, gi = r["input"], g["input"]
    return (ri["patient_name"].strip() == gi["patient_name"].strip()
            and _normal(ri["date"], _DATE) == _normal(gi["date"], _DATE) and _same_outcome(r, g))


def _search_engine(r: Result, g: Result) -> bool:
    if r["api_name"] != g["api_name"] or r["exception"] != g["exception"]:
        return False

    def ranked(output: Any) -> Any:
        return sorted(output, key=lambda d: d["title"] + d["abstract"], reverse=True)

    if r["output"] is None:                  # the original's sorted copy is never assigned: it raises
        raise UnboundLocalError("response_output")
    mine = ranked(r["output"])
    if g["output"] is None:
        raise UnboundLocalError("groundtruth_output")
    return mine == ranked(g["output"])


def _wiki(r: Result, g: Result) -> bool:
    return r["api_name"] == g["api_name"] and _same_outcome(r, g)


def _calculator(r: Result, g: Result) -> bool:
    return (r["input"]["formula"].replace(" ", "") == g["input"]["formula"].replace(" ", "")
            and _same_outcome(r, g))


def _get_today(r: Result, g: Result) -> bool:
    return r["output"] is not None and r["exception"] is None and r["input"] is None


def _query_balance(r: Result, g: Result) -> bool:
    return r["input"]["token"].strip() == g["input"]["token"].strip() and _same_outcome(r, g)


def _email_reminder(r: Result, g: Result) -> bool:
    return _same_outcome(r, g) and _without(r["input"], "content") == _without(g["input"], "content")


def _hotel_availability(r: Result, g: Result) -> bool:
    keys = ("destination", "check_in_date", "check_out_date")
    return (all(r["input"][k] == g["input"][k] for k in keys)
            and r["output"]["hotels"] == g["output"]["hotels"])


def _tax(r: Result, g: Result) -> bool:
    return (r["input"]["salary"] == g["input"]["salary"]
            and r["output"]["salary_after_tax"] == g["output"]["salary_after_tax"] and r["exception"] == g["exception"])


LEVEL_1_2: dict[str, Rule] = {
    **dict.fromkeys(("CheckToken", "GetUserToken", "DeleteAccount", "ModifyPassword", "ForgotPassword", "AddAlarm",
                     "DeleteAlarm", "ModifyAlarm", "QueryAlarm", "OpenBankAccount", "BookHotel", "ImageCaption",
                     "SpeechRecognition", "Dictionary", "Translate"), exact),
    "RegisterUser": _random_output,
    "AddAgenda": _named(_content_rule("content", False, ("time", "location"))),
    "ModifyAgenda": _content_rule("content", False, ("time", "location")),
    "QueryAgenda": _content_rule("content", False, ("time", "location")),
    "DeleteAgenda": _deleted_at_time,
    "AddReminder": _named(_content_rule("content", True, ("time",))),
    "ModifyReminder": _named(_content_rule("content", True, ("time",))),
    "QueryReminder": _content_rule("content", True, ("time",)),
    "DeleteReminder": _deleted_at_time,
    "AddMeeting": _meeting, "ModifyMeeting": _meeting, "QueryMeeting": _meeting,
    "DeleteMeeting": _deleted_at_time,
    "DeleteScene": _stripped("name", lower=("name",)),
    "QueryScene": _stripped("name", lower=("name",)),
    "TimedSwitch": _switch(with_on=True), "CancelTimedSwitch": _switch(with_on=False),
    "RecordHealthData": _record_health, "QueryHealthData": _query_health,
    "AppointmentRegistration": _appointment, "ModifyRegistration": _modify_registration,
    "CancelRegistration": _stripped("appointment_id"),
    "QueryRegistration": _query_registration,
    "QueryBalance": _query_balance, "QueryStock": _stock,
    "SearchEngine": _search_engine, "Wiki": _wiki, "QueryHistoryToday": _history,
    "DocumentQA": _stripped("url", "question"),
    "SendEmail": _stripped("receiver", "subject", "content", lower=("receiver",)),
    "GetToday": _get_today, "Calculator": _calculator,
    "PlayMusic": lambda r, g: r["output"] == g["output"],
    "SymptomSearch": _symptom, "EmergencyKnowledge": _symptom,
    "ToolSearcher": _same_outcome,
}

LEVEL_3: dict[str, Rule] = {
    **dict.fromkeys(("AccountInfo", "ClothingRecommendation", "FlightSearch", "Geocoding", "GetOccupationSalary",
                     "LikeCount", "MovieRecommendations", "OrganizationMembers", "QueryMeeting", "TravelStatus",
                     "UserPosts", "UserWatchedMovies", "UserMoviePreferences"), _named(exact)),
    "GetWeatherForCoordinates": exact,
    "AddMeeting": _meeting, "Calculator": _calculator, "EmailReminder": _named(_email_reminder),
    "HotelAvailability": _named(_hotel_availability), "TaxCalculator": _named(_tax),
    "NearbyRestaurants": _named(lambda r, g: r["input"] == g["input"]),
    "PersonalInfoUpdate": _named(lambda r, g: r["input"] == g["input"] and r["output"] == g["output"]),
    "ToolSearcher": _same_outcome,
}


def _as_dict(result: Any) -> Result:
    """A result (ApiResult or recorded dict) as the original's dict; a missing api_name stays missing."""
    shown = result if isinstance(result, Mapping) else {
        "api_name": result.api_name, "input": result.input, "output": result.output, "exception": result.exception}
    out = {k: copy.deepcopy(shown.get(k)) for k in ("input", "output", "exception")}
    if shown.get("api_name"):
        out["api_name"] = shown["api_name"]
    return out


def _rule(name: str, suite: str, inputs: Any) -> Rule | None:
    """The rule of API `name` in `suite` ("all": level 3's where the name or, for QueryMeeting, its
    parameter `user_name` is level 3's)."""
    if suite == "level-3":
        return LEVEL_3.get(name)
    if suite == "all" and (name not in LEVEL_1_2 or (
            name == "QueryMeeting" and isinstance(inputs, Mapping) and "user_name" in inputs)):
        return LEVEL_3.get(name)
    return LEVEL_1_2.get(name)


def is_correct(gold: Any, predicted: Any, suite: str = "level-1-2") -> bool:
    """The original evaluator's verdict on `predicted` (an ApiResult) against the `gold` recording.

    Wrong when the names differ, when the original would not have run the call (`predicted.refused`),
    when the API has no rule, or when its rule raises (module docstring). `suite` picks the rule set
    ("level-3": the lv3_apis rules, "all": `_rule`; AddMeeting, QueryMeeting and Calculator exist in both)."""
    if getattr(predicted, "refused", None):
        return False
    gold_name = gold.get("api_name") if isinstance(gold, Mapping) else gold.api_name
    if gold_name and predicted.api_name != gold_name:
        return False
    rule = _rule(predicted.api_name, suite, predicted.input)
    if rule is None:
        return False
    response, truth = _as_dict(predicted), _as_dict(gold)
    response["api_name"] = predicted.api_name
    try:
        return bool(rule(response, truth))
    except (KeyError, TypeError, AttributeError, ValueError, IndexError, UnboundLocalError):
        return False


__all__ = ["LEVEL_1_2", "LEVEL_3", "exact", "is_correct"]

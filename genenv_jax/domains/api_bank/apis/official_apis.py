"""The APIs whose original implementation (upstream 483554ea, `apis/*.py`) behaves differently from ours in
a way that changes verdicts, as they run under `scoring="official"` (they replace ours there).

- DocumentQA answers "The question is too difficult to answer." for every question about a known
  document: the original looks the question up among a list of {question, answer} dicts, where a text
  is never found. Its recordings show this answer.
- TimedSwitch and CancelTimedSwitch take the device as `name` only (the recorded dialogues' `device_id=`
  is an undeclared parameter there, refused by `official.bind_official`), lower-case and strip it and
  check the time's format.
- The original normalises some inputs before using them: QueryStock upper-cases and strips the code and
  reads the date with a zero-filled year; QueryRegistration, CancelRegistration and ModifyRegistration
  strip ids and names and normalise dates; QueryHealthData upper-cases the user id, reads both times and
  fails on an empty span; SendEmail strips its fields and checks the receiver against a lower-case-only
  address pattern.
Errors carry the original's messages (they are compared with recorded exceptions).
"""

from __future__ import annotations

import datetime
import re
from typing import Any, Callable

from genenv_jax.domains.api_bank.apis.base import ApiError, ApiSpec, parse_signature

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
DATE_FORMAT = "%Y-%m-%d"
_EMAIL = re.compile(r"^[a-z0-9]+[\._]?[a-z0-9]+[@]\w+[.]\w{2,3}$")

OFFICIAL_APIS: dict[str, dict[str, ApiSpec]] = {"level-1-2": {}, "level-3": {}}


def _official(name: str, signature: str, suite: str = "level-1-2") -> Callable:
    def wrap(handler):
        OFFICIAL_APIS[suite][name] = ApiSpec(name, suite, parse_signature(signature), handler)
        return handler
    return wrap


def _zfill_year(text: str) -> str:
    parts = text.split("-")
    if len(parts) == 3 and len(parts[0]) != 4:
        parts[0] = parts[0].zfill(4)
    return "-".join(parts)


def parse_moment(text: Any, fmt: str = TIME_FORMAT) -> datetime.datetime:
    """The original's format check: strip, zero-fill a short year, read as `fmt`; ApiError with
    strptime's message otherwise."""
    try:
        return datetime.datetime.strptime(_zfill_year(str(text).strip()), fmt)
    except ValueError as error:
        raise ApiError(str(error)) from None


def normal_time(text: Any, fmt: str = TIME_FORMAT) -> str:
    return parse_moment(text, fmt).strftime(fmt)


@_official("DocumentQA", "url:str question:str")
def document_qa(state, url, question):
    """Always "too difficult" for a known document (module docstring)."""
    if not str(question).strip():
        raise ApiError("The question is empty.")
    if str(url).strip() not in state.table("QuestionAnswering"):
        raise ApiError("The document of this url failed to be processed.")
    return "The question is too difficult to answer."


@_official("TimedSwitch", "name:str time:str on:bool")
def timed_switch(state, name, time, on):
    device = str(name).strip().lower()
    if not device:
        raise ApiError("Name cannot be empty.")
    time = normal_time(time)
    switches = state.table("TimeSwitch").setdefault(device, [])
    for switch in switches:
        if switch.get("time") == time:
            switch["on"] = on
            return "success"
    switches.append({"time": time, "on": on})
    return "success"


@_official("CancelTimedSwitch", "name:str time:str")
def cancel_timed_switch(state, name, time):
    device = str(name).strip().lower()
    if not device:
        raise ApiError("name cannot be empty.")
    time = normal_time(time)
    table = state.table("TimeSwitch")
    if device not in table:
        raise ApiError("device name does not exist.")
    index = next((i for i, s in enumerate(table[device]) if s.get("time") == time), None)
    if index is None:
        raise ApiError("time does not exist.")
    table[device].pop(index)
    return "success"


@_official("QueryStock", "stock_code:str date:str")
def query_stock(state, stock_code, date):
    code = str(stock_code).upper().strip()
    if not code:
        raise ApiError("The stock code cannot be empty.")
    day = normal_time(date, DATE_FORMAT)
    stocks = state.table("Stock")
    if code not in stocks:
        raise ApiError("The stock code does not exist.")
    if day not in stocks[code]:
        raise ApiError("The stock price of this date is not maintained.")
    return stocks[code][day]


def _same_day(stored: Any, day: str) -> bool:
    try:
        return normal_time(stored, DATE_FORMAT) == day
    except ApiError:
        return False


@_official("QueryRegistration", "patient_name:str date:str")
def query_registration(state, patient_name, date):
    patient, day = str(patient_name).strip(), normal_time(date, DATE_FORMAT)
    found = {key: dict(record) for key, record in state.table("Appointments").items()
             if record["patient_name"] == patient and _same_day(record["date"], day)}
    if not found:
        raise ApiError("No appointments found.")
    return found


@_official("CancelRegistration", "appointment_id:str")
def cancel_registration(state, appointment_id):
    table, key = state.table("Appointments"), str(appointment_id).strip()
    if key not in table:
        raise ApiError("The appointment ID is incorrect.")
    del table[key]
    return "success"


@_official("ModifyRegistration", "appointment_id:str new_appointment_date:str new_appointment_doctor:str")
def modify_registration(state, appointment_id, new_appointment_date, new_appointment_doctor):
    table, key = state.table("Appointments"), str(appointment_id).strip()
    if key not in table:
        raise ApiError("The appointment ID does not exist.")
    doctor = str(new_appointment_doctor).strip()
    if not doctor:
        raise ApiError("Fail because the doctor name is empty.")
    day = normal_time(new_appointment_date, DATE_FORMAT)
    record = table[key]
    if day == record["date"] and doctor == record["doctor_name"]:
        raise ApiError("Fail because no modification is made.")
    if day == record["date"]:
        raise ApiError("Fail because date is not changed.")
    if doctor == record["doctor_name"]:
        raise ApiError("Fail because doctor is not changed.")
    record.update(date=day, doctor_name=doctor)
    return "success"


@_official("QueryHealthData", "user_id:str start_time:str end_time:str")
def query_health_data(state, user_id, start_time, end_time):
    user = str(user_id).upper().strip()
    if not user:
        raise ApiError("The user id cannot be empty.")
    errors, moments = [], []
    for text in (start_time, end_time):
        try:
            moments.append(parse_moment(text))
        except ApiError as error:
            errors.append(str(error))
    if errors:
        raise ApiError("; ".join(errors))
    start, end = moments
    if start > end:
        raise ApiError("The start time cannot be later than the end time.")
    table = state.table("HealthData")
    if user not in table:
        raise ApiError("The user id does not exist.")
    found = [dict(r) for r in table[user] if start <= datetime.datetime.strptime(r["time"], TIME_FORMAT) <= end]
    if not found:
        raise ApiError("There is no health data in the given time span.")
    return found


@_official("SendEmail", "receiver:str subject:str content:str")
def send_email(state, receiver, subject, content):
    receiver, subject, content = str(receiver).strip(), str(subject).strip(), str(content).strip()
    if not _EMAIL.match(receiver):
        raise ApiError("Email address of the receiver is invalid.")
    if not subject:
        raise ApiError("Subject cannot be empty.")
    if not content:
        raise ApiError("Content cannot be empty.")
    state.session.setdefault("sent_emails", []).append({"receiver": receiver, "subject": subject, "content": content})
    return "success"


__all__ = ["DATE_FORMAT", "OFFICIAL_APIS", "TIME_FORMAT", "normal_time", "parse_moment"]

"""Agenda, alarm and reminder APIs over Agenda.json, Alarm.json and Reminder.json (id -> record).

Records belong to the token's account. Agenda items are found by content (the stored time may be a
date only, so a given time must fall on the same day); reminders by content or time (ModifyReminder
changes either one, as the recorded dialogues do); alarms by time.
"""

from __future__ import annotations

from genenv_jax.domains.api_bank.apis.account import user_for_token
from genenv_jax.domains.api_bank.apis.base import ApiError, register, require_text


def next_id(table: dict) -> str:
    """The id after the largest numeric id of `table` (ids are numeric text)."""
    return str(max((int(k) for k in table if str(k).isdigit()), default=0) + 1)


def same_day_or_time(stored: str, given: str) -> bool:
    """Equal times, or the same day when either side is a bare date."""
    stored, given = str(stored).strip(), str(given).strip()
    return stored == given or ((len(stored) == 10 or len(given) == 10) and stored[:10] == given[:10])


def _owned(table: dict, user: str):
    return [(key, record) for key, record in table.items() if record.get("username") == user]


def _find_agenda(state, token, content, time):
    user = user_for_token(state, token)
    items = [(k, r) for k, r in _owned(state.table("Agenda"), user) if r.get("content") == content]
    if not items:
        raise ApiError(f"You have no agenda about {content}")
    timed = [(k, r) for k, r in items if same_day_or_time(r.get("time", ""), time)]
    if not timed:
        raise ApiError(f"You have no agenda at time : {time}")
    return timed[0]


@register("AddAgenda", "token:str content:str time:str location:str")
def add_agenda(state, token, content, time, location):
    user = user_for_token(state, token)
    require_text(content, "Content should not be null")
    table = state.table("Agenda")
    table[next_id(table)] = {"content": content, "time": time, "location": location, "username": user}
    return "success"


@register("DeleteAgenda", "token:str content:str time:str location:str")
def delete_agenda(state, token, content, time, location):
    user = user_for_token(state, token)
    items = [(k, r) for k, r in _owned(state.table("Agenda"), user) if r.get("content") == content]
    if not items:
        raise ApiError(f"You have no meeting about {content}")
    timed = [k for k, r in items if same_day_or_time(r.get("time", ""), time)]
    if not timed:
        raise ApiError(f"You have no meeting at time : {time}")
    del state.table("Agenda")[timed[0]]
    return "success"


@register("ModifyAgenda", "token:str content:str time:str location:str")
def modify_agenda(state, token, content, time, location):
    user = user_for_token(state, token)
    items = [r for _, r in _owned(state.table("Agenda"), user) if r.get("content") == content]
    if not items:
        raise ApiError(f"You have no agenda about {content}")
    items[0].update(time=time, location=location)
    return "success"


@register("QueryAgenda", "token:str content:str time:str location:str")
def query_agenda(state, token, content, time, location):
    return dict(_find_agenda(state, token, content, time)[1])


def _alarm(state, token, time, message):
    user = user_for_token(state, token)
    found = [(k, r) for k, r in _owned(state.table("Alarm"), user) if r.get("time") == time]
    if not found:
        raise ApiError(message)
    return found[0]


@register("AddAlarm", "token:str time:str")
def add_alarm(state, token, time):
    user = user_for_token(state, token)
    table = state.table("Alarm")
    table[next_id(table)] = {"time": time, "username": user}
    return "success"


@register("DeleteAlarm", "token:str time:str")
def delete_alarm(state, token, time):
    key, _ = _alarm(state, token, time, f"You have no alarm clock at time : {time}")
    del state.table("Alarm")[key]
    return "success"


@register("ModifyAlarm", "token:str from_time:str to_time:str")
def modify_alarm(state, token, from_time, to_time):
    _, record = _alarm(state, token, from_time, f"You have no agenda at time : {from_time}")
    record["time"] = to_time
    return "success"


@register("QueryAlarm", "token:str time:str")
def query_alarm(state, token, time):
    return dict(_alarm(state, token, time, f"You have no alarm clock at time : {time}")[1])


def _reminder(state, token, content, time):
    user = user_for_token(state, token)
    require_text(content, "Content should not be null")
    owned = _owned(state.table("Reminder"), user)
    found = ([(k, r) for k, r in owned if r.get("content") == content and r.get("time") == time]
             or [(k, r) for k, r in owned if r.get("content") == content or r.get("time") == time])
    if not found:
        raise ApiError(f"You have no reminder about {content} or at time : {time}")
    return found[0]


@register("AddReminder", "token:str content:str time:str")
def add_reminder(state, token, content, time):
    user = user_for_token(state, token)
    require_text(content, "Content should not be null")
    table = state.table("Reminder")
    table[next_id(table)] = {"content": content, "time": time, "username": user}
    return "success"


@register("DeleteReminder", "token:str content:str time:str")
def delete_reminder(state, token, content, time):
    key, _ = _reminder(state, token, content, time)
    del state.table("Reminder")[key]
    return "success"


@register("ModifyReminder", "token:str content:str time:str")
def modify_reminder(state, token, content, time):
    _, record = _reminder(state, token, content, time)
    record.update(content=content, time=time)
    return "success"


@register("QueryReminder", "token:str content:str time:str")
def query_reminder(state, token, content, time):
    return dict(_reminder(state, token, content, time)[1])

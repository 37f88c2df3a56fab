"""Meeting reservation APIs over Meeting.json (id -> topic, start/end time, location, attendees, username).

A meeting is found among the token's meetings by topic, else by start time.
"""

from __future__ import annotations

from genenv_jax.domains.api_bank.apis.account import user_for_token
from genenv_jax.domains.api_bank.apis.base import ApiError, register
from genenv_jax.domains.api_bank.apis.schedule import next_id

_SIGNATURE = "token:str meeting_topic:str start_time:str end_time:str location:str attendees:list"


def _find(state, token, meeting_topic, start_time):
    user = user_for_token(state, token)
    if not meeting_topic and not start_time:
        raise ApiError("Meeting Topic and start_time should not be null both")
    owned = [(k, r) for k, r in state.table("Meeting").items() if r.get("username") == user]
    by_topic = [(k, r) for k, r in owned if meeting_topic and r.get("meeting_topic") == meeting_topic]
    if by_topic:
        return by_topic[0]
    by_time = [(k, r) for k, r in owned if start_time and r.get("start_time") == start_time]
    if by_time:
        return by_time[0]
    if meeting_topic:
        raise ApiError(f"You have no meeting about {meeting_topic}")
    raise ApiError(f"You have no meeting at time : {start_time}")


@register("AddMeeting", _SIGNATURE)
def add_meeting(state, token, meeting_topic, start_time, end_time, location, attendees):
    user = user_for_token(state, token)
    if not meeting_topic or not str(meeting_topic).strip():
        raise ApiError("Meeting Topic should not be null")
    table = state.table("Meeting")
    table[next_id(table)] = {"meeting_topic": meeting_topic, "start_time": start_time, "end_time": end_time,
                             "location": location, "attendees": list(attendees), "username": user}
    return "success"


@register("DeleteMeeting", _SIGNATURE)
def delete_meeting(state, token, meeting_topic, start_time, end_time, location, attendees):
    key, _ = _find(state, token, meeting_topic, start_time)
    del state.table("Meeting")[key]
    return "success"


@register("ModifyMeeting", _SIGNATURE)
def modify_meeting(state, token, meeting_topic, start_time, end_time, location, attendees):
    _, record = _find(state, token, meeting_topic, start_time)
    record.update(meeting_topic=meeting_topic, start_time=start_time, end_time=end_time, location=location,
                  attendees=list(attendees))
    return "success"


@register("QueryMeeting", _SIGNATURE)
def query_meeting(state, token, meeting_topic, start_time, end_time, location, attendees):
    return dict(_find(state, token, meeting_topic, start_time)[1])

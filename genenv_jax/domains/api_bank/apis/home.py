"""Smart-home and music APIs over Scenes.json (scene -> devices) and TimeSwitch.json (device -> switches).

Scene names compare ignoring case (the table stores them in lower case). The timed-switch APIs take
the device as `name` (the descriptions) or `device_id` (the recorded dialogues).
"""

from __future__ import annotations

from genenv_jax.domains.api_bank.apis.base import ApiError, register


def _scene_key(state, name):
    if not isinstance(name, str) or not name.strip():
        raise ApiError("Scene name cannot be empty.")
    return next((k for k in state.table("Scenes") if k.lower() == name.strip().lower()), None)


@register("QueryScene", "name:str")
def query_scene(state, name):
    key = _scene_key(state, name)
    if key is None:
        raise ApiError("Scene not found.")
    return [dict(device) for device in state.table("Scenes")[key]]


@register("DeleteScene", "name:str")
def delete_scene(state, name):
    key = _scene_key(state, name)
    if key is None:
        raise ApiError("The scene does not exist.")
    del state.table("Scenes")[key]
    return "success"


def _device(name, device_id) -> str:
    device = name if name is not None else device_id
    if device is None or not str(device).strip():
        raise ApiError("device_id cannot be empty.")
    return str(device)


@register("TimedSwitch", "name?:str device_id?:str time:str on:bool")
def timed_switch(state, time, on, name=None, device_id=None):
    device = _device(name, device_id)
    state.table("TimeSwitch").setdefault(device, []).append({"time": time, "on": on})
    return "success"


@register("CancelTimedSwitch", "name?:str device_id?:str time:str")
def cancel_timed_switch(state, time, name=None, device_id=None):
    device = _device(name, device_id)
    table = state.table("TimeSwitch")
    key = next((k for k in table if k.lower() == device.lower()), None)
    if key is None:
        raise ApiError("device_id does not exist.")
    kept = [switch for switch in table[key] if switch.get("time") != time]
    if len(kept) == len(table[key]):
        raise ApiError("time does not exist.")
    table[key] = kept
    return "success"


@register("PlayMusic", "music_name:str")
def play_music(state, music_name):
    if not music_name.strip():
        raise ApiError("The music name cannot be empty.")
    return f"music://{music_name.strip().lower()}"

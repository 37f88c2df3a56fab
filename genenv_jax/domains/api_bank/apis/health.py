"""Hospital and health APIs over Appointments.json, HealthData.json and Symptom.json."""

from __future__ import annotations

import datetime

from genenv_jax.domains.api_bank.apis.base import ApiError, register

_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


@register("AppointmentRegistration", "patient_name:str date:str doctor_name:str")
def appointment_registration(state, patient_name, date, doctor_name):
    """Returns a new 8-digit appointment id (random upstream; here from the state's seeded random source)."""
    if not str(patient_name).strip() or not str(doctor_name).strip():
        raise ApiError("Patient name or doctor name cannot be empty.")
    table = state.table("Appointments")
    for record in table.values():
        if record["patient_name"] == patient_name and record["date"] == date:
            if record["doctor_name"] == doctor_name:
                raise ApiError("This appointment has already been registered.")
            raise ApiError("This patient has already been registered in this day.")
    appointment_id = f"{state.rng.randrange(10 ** 8):08d}"
    while appointment_id in table:
        appointment_id = f"{state.rng.randrange(10 ** 8):08d}"
    table[appointment_id] = {"patient_name": patient_name, "date": date, "doctor_name": doctor_name}
    return appointment_id


@register("CancelRegistration", "appointment_id:str")
def cancel_registration(state, appointment_id):
    table = state.table("Appointments")
    if appointment_id not in table:
        raise ApiError("The appointment ID is incorrect.")
    del table[appointment_id]
    return "success"


@register("ModifyRegistration", "appointment_id:str new_appointment_date:str new_appointment_doctor:str")
def modify_registration(state, appointment_id, new_appointment_date, new_appointment_doctor):
    table = state.table("Appointments")
    if appointment_id not in table:
        raise ApiError("The appointment ID does not exist.")
    record = table[appointment_id]
    if not new_appointment_doctor:
        raise ApiError("Fail because the doctor name is empty.")
    if record["date"] == new_appointment_date and record["doctor_name"] == new_appointment_doctor:
        raise ApiError("Fail because no modification is made.")
    record.update(date=new_appointment_date, doctor_name=new_appointment_doctor)
    return "success"


@register("QueryRegistration", "patient_name:str date:str")
def query_registration(state, patient_name, date):
    found = {key: dict(record) for key, record in state.table("Appointments").items()
             if record["patient_name"] == patient_name and record["date"] == date}
    if not found:
        raise ApiError("No appointments found.")
    return found


def _valid_health_items(items) -> bool:
    return all(isinstance(item, dict) and set(item) == {"name", "value"} and isinstance(item["name"], str)
               for item in items)


@register("RecordHealthData", "user_id:str time:str health_data:list")
def record_health_data(state, user_id, time, health_data):
    if not str(user_id).strip():
        raise ApiError("The user id cannot be empty.")
    if not health_data:
        raise ApiError("The health data cannot be empty.")
    if not _valid_health_items(health_data):
        raise ApiError("The health data has invalid format.")
    names = [item["name"] for item in health_data]
    if len(set(names)) != len(names):
        raise ApiError("The health data cannot contain duplicate items.")
    record = {"time": time, **{item["name"]: item["value"] for item in health_data}}
    state.table("HealthData").setdefault(user_id, []).append(record)
    return "success"


def _parse_time(text):
    try:
        return datetime.datetime.strptime(str(text).strip(), _TIME_FORMAT)
    except ValueError:
        raise ApiError(f"The time format is invalid (expected {_TIME_FORMAT}): {text}") from None


@register("QueryHealthData", "user_id:str start_time:str end_time:str")
def query_health_data(state, user_id, start_time, end_time):
    """The user's records with start_time <= time <= end_time (user ids compare ignoring case)."""
    if not str(user_id).strip():
        raise ApiError("The user id cannot be empty.")
    start, end = _parse_time(start_time), _parse_time(end_time)
    if start > end:
        raise ApiError("The start time cannot be later than the end time.")
    table = state.table("HealthData")
    key = next((k for k in table if k.lower() == user_id.lower()), None)
    if key is None:
        raise ApiError("The user id does not exist.")
    return [dict(r) for r in table[key] if start <= _parse_time(r["time"]) <= end]


def _symptom_entries(state, symptom):
    if not str(symptom).strip():
        raise ApiError("The symptom cannot be empty.")
    table = state.table("Symptom")
    key = next((k for k in table if k.lower() == symptom.strip().lower()), None)
    if key is None:
        raise ApiError("The symptom does not exist.")
    return table[key]


@register("SymptomSearch", "symptom:str")
def symptom_search(state, symptom):
    return [{"name": e["name"], "description": e["description"]} for e in _symptom_entries(state, symptom)]


@register("EmergencyKnowledge", "symptom:str")
def emergency_knowledge(state, symptom):
    return [{"name": e["name"], "aid": e["aid"]} for e in _symptom_entries(state, symptom)]

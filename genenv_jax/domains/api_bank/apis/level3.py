"""The level-3 (plan + retrieve + call) APIs over `level3_data.json`.

Upstream keeps these tables inside its API classes; here they are derived from the calls recorded
in test-data/level-3.json (see the file's `_source`). Where the recorded calls show a rule rather
than a table (tax, clothing, the fixed restaurant list), the rule is written here and documented.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

from genenv_jax.domains.api_bank.apis.base import ApiError, register

_DATA_FILE = Path(__file__).with_name("level3_data.json")
SUITE = "level-3"


@functools.lru_cache(maxsize=1)
def _initial_data() -> dict:
    return json.loads(_DATA_FILE.read_text(encoding="utf-8"))


def fresh_level3_table() -> dict:
    """A private copy of the level-3 tables (the APIs that write change only their copy)."""
    return copy.deepcopy(_initial_data())


def _lookup(table: dict, key, what: str):
    """`table[key]`, matching text keys ignoring case; ApiError naming `what` when absent."""
    if key in table:
        return table[key]
    found = next((v for k, v in table.items() if isinstance(key, str) and k.lower() == key.strip().lower()), None)
    if found is None:
        raise ApiError(f"{what} not found: {key}")
    return found


def _data(state) -> dict:
    return state.table("level3")


@register("QueryMeeting", "user_name:str", suite=SUITE)
def query_meeting(state, user_name):
    meetings = _data(state)["user_meetings"]
    found = next((v for k, v in meetings.items() if k.lower() == user_name.strip().lower()), [])
    return {"meetings": copy.deepcopy(found)}


@register("AddMeeting", "meeting_topic:str start_time:str end_time:str location:str attendees:list", suite=SUITE)
def add_meeting(state, meeting_topic, start_time, end_time, location, attendees):
    if not meeting_topic.strip():
        raise ApiError("Meeting Topic should not be null")
    _data(state).setdefault("added_meetings", []).append(
        {"meeting_topic": meeting_topic, "start_time": start_time, "end_time": end_time, "location": location,
         "attendees": list(attendees)})
    return "success"


@register("EmailReminder", "content:str time:str location:str recipient:str", suite=SUITE)
def email_reminder(state, content, time, location, recipient):
    if "@" not in recipient:
        raise ApiError("The recipient is not an email address.")
    _data(state).setdefault("sent_reminders", []).append(
        {"content": content, "time": time, "location": location, "recipient": recipient})
    return "success"


@register("Geocoding", "address:str", suite=SUITE)
def geocoding(state, address):
    return dict(_lookup(_data(state)["geocoding"], address, "Address"))


@register("GetWeatherForCoordinates", "latitude:float longitude:float", suite=SUITE)
def weather_for_coordinates(state, latitude, longitude):
    for row in _data(state)["weather"]:
        if abs(row["latitude"] - latitude) < 1e-4 and abs(row["longitude"] - longitude) < 1e-4:
            return {"temperature": row["temperature"], "humidity": row["humidity"], "description": row["description"]}
    raise ApiError(f"No weather data for coordinates ({latitude}, {longitude}).")


@register("ClothingRecommendation", "temperature:float humidity:float weather_conditions:str", suite=SUITE)
def clothing_recommendation(state, temperature, humidity, weather_conditions):
    """By temperature (<10, <20, else), plus a raincoat in rain: the rule the five recorded calls follow."""
    if temperature < 10:
        options = ["Warm coat", "Hat", "Gloves"]
    elif temperature < 20:
        options = ["Light jacket", "Long-sleeved shirt"]
    else:
        options = ["T-shirt", "Shorts"]
    if "rain" in weather_conditions.lower():
        options.append("Raincoat")
    return {"clothing_options": options}


@register("NearbyRestaurants", "latitude:float longitude:float distance:int", suite=SUITE)
def nearby_restaurants(state, latitude, longitude, distance):
    """The recorded calls return the same four restaurants for every location and distance; so does this."""
    if distance <= 0:
        raise ApiError("The distance must be positive.")
    return {"restaurants": copy.deepcopy(_data(state)["restaurants"])}


@register("OrganizationMembers", "organization:str", suite=SUITE)
def organization_members(state, organization):
    return {"members": list(_lookup(_data(state)["organization_members"], organization, "Organization"))}


@register("TravelStatus", "member_name:str", suite=SUITE)
def travel_status(state, member_name):
    return _lookup(_data(state)["travel_status"], member_name, "Member")


@register("UserMoviePreferences", "user_name:str", suite=SUITE)
def user_movie_preferences(state, user_name):
    return {"preferences": list(_lookup(_data(state)["movie_preferences"], user_name, "User"))}


@register("UserWatchedMovies", "user_name:str", suite=SUITE)
def user_watched_movies(state, user_name):
    return list(_lookup(_data(state)["watched_movies"], user_name, "User"))


@register("MovieRecommendations", "preferences:list", suite=SUITE)
def movie_recommendations(state, preferences):
    """Three movies per preferred genre, in the order of the preferences (as recorded: watched ones stay)."""
    genres = _data(state)["genre_movies"]
    movies = [m for genre in preferences for m in _lookup(genres, str(genre), "Genre")]
    return {"recommended_movies": movies}


@register("UserPosts", "user_id:int", suite=SUITE)
def user_posts(state, user_id):
    return {"post_ids": list(_lookup(_data(state)["user_posts"], str(user_id), "User"))}


@register("LikeCount", "post_id:int", suite=SUITE)
def like_count(state, post_id):
    return {"like_count": _lookup(_data(state)["post_likes"], str(post_id), "Post")}


@register("FlightSearch", "source:str destination:str travel_dates:str", suite=SUITE)
def flight_search(state, source, destination, travel_dates):
    flights = [dict(f) for f in _data(state)["flights"] if f["source"] == source and f["destination"] == destination
               and f["departure_date"][:10] == travel_dates.strip()[:10]]
    return {"flights": flights}


@register("HotelAvailability", "destination:str check_in_date:str check_out_date:str", suite=SUITE)
def hotel_availability(state, destination, check_in_date, check_out_date):
    hotels = [dict(h) for h in _data(state)["hotels"] if h["destination"] == destination
              and h["check_in_date"] == check_in_date and h["check_out_date"] == check_out_date]
    return {"hotels": hotels}


@register("GetOccupationSalary", "occupation:str", suite=SUITE)
def occupation_salary(state, occupation):
    return {"salary": _lookup(_data(state)["occupation_salary"], occupation, "Occupation")}


@register("TaxCalculator", "salary:float", suite=SUITE)
def tax_calculator(state, salary):
    """A flat tax (30 %, what every recorded call shows)."""
    if salary < 0:
        raise ApiError("The salary cannot be negative.")
    return {"salary_after_tax": salary * (1 - _data(state)["tax_rate"])}


def _account(state, username, password):
    account = _data(state)["accounts"].get(username)
    if account is None or account["password"] != password:
        raise ApiError("Invalid username or password.")
    return account


@register("AccountInfo", "username:str password:str", suite=SUITE)
def account_info(state, username, password):
    account = _account(state, username, password)
    return {"email": account["email"], "phone": account["phone"]}


@register("PersonalInfoUpdate", "username:str password:str address:str", suite=SUITE)
def personal_info_update(state, username, password, address):
    _account(state, username, password)["address"] = address
    return {"status": "success"}

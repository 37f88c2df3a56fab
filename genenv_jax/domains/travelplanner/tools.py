"""TravelPlanner's search tools over the CSV database, as the two-stage agent calls them.

The official two-stage agent calls CitySearch, FlightSearch, GoogleDistanceMatrix,
AccommodationSearch, RestaurantSearch, AttractionSearch and NotebookWrite (then Planner; here the
agent writes the plan itself). Results are JSON row lists (the database columns) or the official
"no information" sentences. The same outputs, collected for a query's cities and legs, make the
reference information of a generated query (`reference_information`), as the benchmark built its own.

Flights come from the user's flights CSV when the download has it; otherwise from the flights listed
in the seeds' reference information (`FlightTable.from_references`), the only flight data there is.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Mapping

from genenv_jax.domains.travelplanner.database import Database
from genenv_jax.domains.travelplanner.reference import reference_flights

FLIGHT_COLUMNS = ("Flight Number", "Price", "DepTime", "ArrTime", "FlightDate", "OriginCityName", "DestCityName")
ACCOMMODATION_COLUMNS = ("NAME", "price", "room type", "house_rules", "minimum nights", "maximum occupancy",
                         "review rate number", "city")
RESTAURANT_COLUMNS = ("Name", "Average Cost", "Cuisines", "Aggregate Rating", "City")
ATTRACTION_COLUMNS = ("Name", "Latitude", "Longitude", "Address", "Phone", "Website", "City")
DISTANCE_MODES = ("self-driving", "taxi")
# Reason codes of a tool call that did not run to a result (StepOutcome.info["errors"]).
TOOL_ERRORS = ("malformed_call", "unknown_tool", "bad_arguments")


def _string(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


def _tool(name: str, summary: str, **params: dict[str, str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": summary, "parameters": {
        "type": "object", "properties": params, "required": list(params)}}}


TOOL_SCHEMAS = [
    _tool("CitySearch", "The TravelPlanner cities of a US state.", state=_string("a state, e.g. 'Texas'")),
    _tool("FlightSearch", "Flights between two cities on a date.", departure_city=_string("the origin city"),
          destination_city=_string("the destination city"), date=_string("YYYY-MM-DD")),
    _tool("GoogleDistanceMatrix", "Duration, distance and cost of driving between two cities by self-driving "
          "(per car of 5) or taxi (per car of 4).", origin=_string("the origin city"),
          destination=_string("the destination city"), mode=_string("'self-driving' or 'taxi'")),
    _tool("AccommodationSearch", "Accommodations in a city (price per night per room).", city=_string("a city")),
    _tool("RestaurantSearch", "Restaurants in a city (average cost per person).", city=_string("a city")),
    _tool("AttractionSearch", "Attractions in a city.", city=_string("a city")),
    _tool("NotebookWrite", "Saves the result of your previous search in the notebook under a short description.",
          description=_string("a short description of what is saved")),
]
TOOL_NAMES = tuple(t["function"]["name"] for t in TOOL_SCHEMAS)


@dataclasses.dataclass(frozen=True)
class FlightTable:
    """Flights by (origin, destination, date): the database's CSV, else those of reference information."""

    db: Database
    listed: Mapping[tuple[str, str, str], tuple[dict, ...]] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_references(cls, db: Database, references: Iterable[Any]) -> "FlightTable":
        index: dict[tuple[str, str, str], dict[str, dict]] = {}
        if not db.has_flights:
            for reference in references:
                for row in reference_flights(reference) or []:
                    key = (row["OriginCityName"], row["DestCityName"], row["FlightDate"])
                    index.setdefault(key, {})[row["Flight Number"]] = row
        return cls(db, {key: tuple(rows.values()) for key, rows in index.items()})

    def flights(self, org: str, dest: str, date: str | None = None) -> list[dict]:
        if self.db.has_flights:
            return self.db.flights(org, dest, date)
        if date is None:
            return [dict(row) for (o, d, _), rows in self.listed.items() if (o, d) == (org, dest) for row in rows]
        return [dict(row) for row in self.listed.get((org, dest, date), ())]


class FlightsView:
    """The database with `flights` from a FlightTable, for the evaluator: a plan's flight is judged
    against every flight the tools can show (the CSV, else all seeds' reference information), as the
    official evaluator judges it against the whole flights database."""

    def __init__(self, db: Database, table: FlightTable):
        self._db, self._table = db, table

    def __getattr__(self, name: str):
        return getattr(self._db, name)

    @property
    def has_flights(self) -> bool:
        return True

    def flights(self, org: str, dest: str, date: str | None = None) -> list[dict]:
        return self._table.flights(org, dest, date)


def _rows(rows: list[dict], columns: tuple[str, ...]) -> list[dict]:
    return [{column: row.get(column) for column in columns} for row in rows]


def _dump(rows: list[dict]) -> str:
    return json.dumps(rows, ensure_ascii=False)


class Toolbox:
    """One episode's tools: checked arguments, JSON results, and the notebook the agent writes."""

    def __init__(self, db: Database, flights: FlightTable):
        self.db, self.flight_table = db, flights
        self.notebook: list[dict[str, str]] = []
        self._last_result: str | None = None

    def call(self, name: str, arguments: Any) -> tuple[str, str | None]:
        """(observation, error code or None) of one call; never raises on model input."""
        if name not in TOOL_NAMES:
            return json.dumps({"error": f"unknown tool {name!r}; available: {', '.join(TOOL_NAMES)}"}), "unknown_tool"
        schema = next(t["function"]["parameters"] for t in TOOL_SCHEMAS if t["function"]["name"] == name)
        wanted = schema["required"]
        if not isinstance(arguments, dict) or sorted(arguments) != sorted(wanted) or \
                not all(isinstance(arguments[k], str) and arguments[k].strip() for k in wanted):
            return json.dumps({"error": f"{name} takes the string arguments {', '.join(wanted)}"}), "bad_arguments"
        args = {k: " ".join(v.split()) for k, v in arguments.items()}
        if name == "NotebookWrite":
            if self._last_result is None:
                return json.dumps({"error": "NotebookWrite saves the previous search result; search first"}), \
                    "bad_arguments"
            self.notebook.append({"Description": args["description"], "Content": self._last_result})
            return f"NotebookWrite succeeded. The current length of notebook is {len(self.notebook)}.", None
        if name == "GoogleDistanceMatrix" and args["mode"] not in DISTANCE_MODES:
            return json.dumps({"error": f"mode must be one of {', '.join(DISTANCE_MODES)}"}), "bad_arguments"
        result = self.search(name, args)
        self._last_result = result
        return result, None

    def search(self, name: str, args: Mapping[str, str]) -> str:
        """The result text of a search tool with checked arguments (JSON rows or a sentence)."""
        content = self.content(name, args)
        return content if isinstance(content, str) else _dump(content)

    def content(self, name: str, args: Mapping[str, str]) -> list | str:
        """A search's rows (a list), or the official sentence when there are none."""
        if name == "CitySearch":
            cities = self.db.cities_of_state(args["state"])
            return cities if cities else f"There is no city in {args['state']}."
        if name == "FlightSearch":
            rows = self.flight_table.flights(args["departure_city"], args["destination_city"], args["date"])
            return _rows(rows, FLIGHT_COLUMNS) if rows else \
                f"There is no flight from {args['departure_city']} to {args['destination_city']} on {args['date']}."
        if name == "GoogleDistanceMatrix":
            return distance_text(self.db, args["mode"], args["origin"], args["destination"])
        table = {"AccommodationSearch": (self.db.accommodations, ACCOMMODATION_COLUMNS, "accommodation"),
                 "RestaurantSearch": (self.db.restaurants, RESTAURANT_COLUMNS, "restaurant"),
                 "AttractionSearch": (self.db.attractions, ATTRACTION_COLUMNS, "attraction")}
        finder, columns, what = table[name]
        rows = finder(args["city"])
        return _rows(rows, columns) if rows else f"There is no {what} in {args['city']}."


def distance_text(db: Database, mode: str, origin: str, destination: str) -> str:
    """The official sentence: '<mode>, from A to B, duration: D, distance: X km, cost: C'."""
    info, cost = db.distance(origin, destination), db.ground_cost(mode, origin, destination)
    if info is None or cost is None:
        return f"{mode}, from {origin} to {destination}, no valid information."
    return (f"{mode}, from {origin} to {destination}, duration: {info['duration']}, "
            f"distance: {info['distance_km']:g} km, cost: {cost}")


def route_legs(query, cities: list[str]) -> list[tuple[str, str, str]]:
    """(origin, destination, date) of each travel day of the benchmark's day layout: the trip moves on
    days 1, 3, 5, ... (two nights a city) and returns on its last day."""
    stops = [query.org, *cities, query.org]
    return [(stops[i], stops[i + 1], query.date[min(2 * i, query.days - 1)]) for i in range(len(stops) - 1)]


def reference_information(query, db: Database, flights: FlightTable, cities: list[str]) -> list[dict[str, str]]:
    """The searches for a trip through `cities`, as [{'Description', 'Content'}] in the official
    order: attractions, restaurants, accommodations of each city, then each leg's flights,
    self-driving and taxi (the benchmark's reference information covers its annotated route)."""
    toolbox = Toolbox(db, flights)
    entries = []
    for city in cities:
        for tool, label in (("AttractionSearch", "Attractions"), ("RestaurantSearch", "Restaurants"),
                            ("AccommodationSearch", "Accommodations")):
            entries.append({"Description": f"{label} in {city}", "Content": toolbox.content(tool, {"city": city})})
    for origin, destination, date in route_legs(query, cities):
        entries.append({"Description": f"Flight from {origin} to {destination} on {date}",
                        "Content": toolbox.content("FlightSearch", {"departure_city": origin,
                                                                   "destination_city": destination, "date": date})})
        for mode, label in (("self-driving", "Self-driving"), ("taxi", "Taxi")):
            entries.append({"Description": f"{label} from {origin} to {destination}",
                            "Content": distance_text(db, mode, origin, destination)})
    return entries

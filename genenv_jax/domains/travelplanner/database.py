"""The TravelPlanner CSV database: accommodations, attractions, restaurants, distances, cities (flights
when the user's download has the 305 MB flights CSV), read once per directory with the csv module.

Lookups match names exactly after collapsing whitespace and case (the official evaluator's substring
match would accept "Subway" for "Subway Express"; an exact match is the stricter, documented choice;
`official.py` has the official match).

Two views of the same files (`view`):
- "official": the rows the benchmark's own loader keeps. Its tools read each CSV with pandas and
  `dropna()`, which drops every row with a missing cell in any column (762 of the 5,047
  accommodations, e.g. those with a blank "house_rules"). The official evaluator, the agent's tools and
  the simulator's feasibility search must see the same rows, or a plan built from a dropped row is
  judged "not in the sandbox" (`scoring="official"` uses this view).
- "all": every row (a blank cell reads as None or ""), today's strict view (`scoring="strict"`).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import math
import re
import sys
from pathlib import Path
from typing import Iterator, TextIO

ACCOMMODATIONS = "accommodations/clean_accommodations_2022.csv"
ATTRACTIONS = "attractions/attractions.csv"
RESTAURANTS = "restaurants/clean_restaurant_2022.csv"
DISTANCES = "googleDistanceMatrix/distance.csv"
CITY_STATES = "background/citySet_with_states.txt"
FLIGHTS = ("flights/clean_Flights_2022.csv", "flights/clean_flights_2022.csv")
FLIGHT_COLUMNS = ("Flight Number", "Price", "DepTime", "ArrTime", "FlightDate", "OriginCityName", "DestCityName")
VIEWS = ("official", "all")
# The cell texts pandas.read_csv reads as missing by default (its STR_NA_VALUES): a row holding any of
# them in any column is dropped by the official loader's dropna().
PANDAS_NA_TEXTS = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
                             "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})
SELF_DRIVING_COST_PER_KM = 0.05  # the benchmark's GoogleDistanceMatrix tool: cost = int(km * 0.05)
TAXI_COST_PER_KM = 1.0           # taxi: cost = int(km)


class DatabaseError(ValueError):
    """A missing or malformed database file (the message names it)."""


def normalise_name(name: str) -> str:
    """The key names are matched by: whitespace collapsed, case folded."""
    return " ".join(str(name).split()).casefold()


def has_missing_cell(row: dict) -> bool:
    """Whether pandas would read some cell of this csv.DictReader row as missing (NaN)."""
    return any(value is None or (isinstance(value, str) and value in PANDAS_NA_TEXTS) for value in row.values())


def _read_csv(path: Path, required: tuple[str, ...], drop_missing: bool = False) -> list[dict]:
    """Rows of a database CSV as dicts (the unnamed index column dropped). A short row (a truncated
    file) or one with extra cells is an error naming the line; `drop_missing` drops rows with a
    missing cell, as the official loader's dropna() does. A table left without rows (only its
    header, or every row dropped) is an error too: scoring against it would fail every plan and
    report 0% as if it were a result."""
    if not path.is_file():
        raise DatabaseError(f"TravelPlanner database file missing: {path}")
    with _decoded(path) as handle:
        reader = csv.DictReader(handle)
        missing = [column for column in required if column not in (reader.fieldnames or [])]
        if missing:
            raise DatabaseError(f"{path}: missing column(s) {', '.join(missing)}")
        rows = []
        for row in reader:
            if None in row:
                raise DatabaseError(f"{path}:{reader.line_num}: {len(reader.fieldnames) + len(row[None])} cells, "
                                    f"the header has {len(reader.fieldnames)}")
            if any(value is None for value in row.values()):
                raise DatabaseError(f"{path}:{reader.line_num}: a short row (truncated file?): "
                                    f"{sum(value is not None for value in row.values())} of "
                                    f"{len(reader.fieldnames)} cells")
            if drop_missing and has_missing_cell(row):
                continue
            rows.append({key: value for key, value in row.items() if key})
    if not rows:
        cause = "every row has a missing cell, which the official loader drops" if reader.line_num > 1 \
            else "no rows, only a header"
        raise DatabaseError(f"{path}: {cause}; the table cannot be empty")
    return rows


@contextlib.contextmanager
def _decoded(path: Path) -> Iterator[TextIO]:
    """`path` opened as UTF-8 CSV text; a byte that is not UTF-8 is an error naming the file."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            yield handle
    except UnicodeDecodeError as error:
        raise DatabaseError(f"{path}: not UTF-8 text ({error.reason})") from None


def _number(value, path: Path, column: str) -> float | None:
    """A numeric cell; None for an empty one (the CSVs leave a few prices and minimum nights blank)."""
    if value is None or not str(value).strip():
        return None
    try:
        return float(str(value).replace(",", ""))
    except ValueError:
        raise DatabaseError(f"{path}: column {column!r} has a non-number {value!r}") from None


def _by_city(rows: list[dict], city_key: str) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for row in rows:
        grouped.setdefault(row[city_key], []).append(row)
    return grouped


def parse_distance_km(text: str) -> float | None:
    """'1,144 km' -> 1144.0; None when the matrix has no usable distance."""
    match = re.fullmatch(r"\s*([\d,]+(?:\.\d+)?)\s*km\s*", str(text or ""))
    return float(match.group(1).replace(",", "")) if match else None


class Database:
    """Read-only view of one TravelPlanner database directory (cached per resolved path and view)."""

    def __init__(self, database_dir: Path, view: str = "all"):
        if view not in VIEWS:
            raise ValueError(f"travelplanner database: view {view!r} not in {VIEWS}")
        self.root, self.view = Path(database_dir), view
        drop = view == "official"
        acc_path, res_path = self.root / ACCOMMODATIONS, self.root / RESTAURANTS
        accommodations = _read_csv(acc_path, ("NAME", "room type", "price", "minimum nights",
                                              "house_rules", "maximum occupancy", "city"), drop)
        for row in accommodations:
            for column in ("price", "minimum nights", "maximum occupancy"):
                row[column] = _number(row[column], acc_path, column)
        restaurants = _read_csv(res_path, ("Name", "City", "Cuisines", "Average Cost"), drop)
        for row in restaurants:
            row["Average Cost"] = _number(row["Average Cost"], res_path, "Average Cost")
        attractions = _read_csv(self.root / ATTRACTIONS, ("Name", "City"), drop)
        self._accommodations = _by_city(accommodations, "city")
        self._restaurants = _by_city(restaurants, "City")
        self._attractions = _by_city(attractions, "City")
        self._distances: dict[tuple[str, str], dict] = {}
        for row in _read_csv(self.root / DISTANCES, ("origin", "destination", "duration", "distance")):
            self._distances.setdefault((row["origin"], row["destination"]), row)  # the first row, as upstream
        self.city_state: dict[str, str] = {}
        state_file = self.root / CITY_STATES
        if not state_file.is_file():
            raise DatabaseError(f"TravelPlanner database file missing: {state_file}")
        with _decoded(state_file) as handle:
            state_lines = handle.read().splitlines()
        for line in state_lines:
            if line.strip():
                city, _, state = line.partition("\t")
                self.city_state[city.strip()] = state.strip()
        self._flight_path = next((self.root / name for name in FLIGHTS if (self.root / name).is_file()), None)

    @classmethod
    def load(cls, database_dir, view: str = "all") -> "Database":
        """The database in `database_dir` (the folder holding accommodations/, attractions/, ...), in
        `view` "official" (the rows the benchmark's loader keeps) or "all"."""
        return _load_cached(str(Path(database_dir).resolve()), view)

    @property
    def has_flights(self) -> bool:
        return self._flight_path is not None

    @functools.cached_property
    def _flights(self) -> dict[tuple[str, str], list[tuple]]:
        """(origin, destination) -> compact rows; read once, on first use (the full CSV has 3.8 M rows,
        so rows are tuples with interned city, date and time strings rather than dicts)."""
        path, index = self._flight_path, {}
        with _decoded(path) as handle:
            reader = csv.DictReader(handle)
            missing = [column for column in FLIGHT_COLUMNS if column not in (reader.fieldnames or [])]
            if missing:
                raise DatabaseError(f"{path}: missing column(s) {', '.join(missing)}")
            for row in reader:
                if self.view == "official" and has_missing_cell(row):
                    continue
                key = (sys.intern(row["OriginCityName"]), sys.intern(row["DestCityName"]))
                index.setdefault(key, []).append((
                    row["Flight Number"], _number(row["Price"], path, "Price"), sys.intern(row["DepTime"]),
                    sys.intern(row["ArrTime"]), sys.intern(row["FlightDate"])))
        return index

    def flights(self, org: str, dest: str, date: str | None = None) -> list[dict]:
        """Flights from org to dest (on `date` when given); empty when the flights CSV is absent."""
        if not self.has_flights:
            return []
        return [{"Flight Number": number, "Price": price, "DepTime": dep, "ArrTime": arr, "FlightDate": day,
                 "OriginCityName": org, "DestCityName": dest}
                for number, price, dep, arr, day in self._flights.get((org, dest), []) if date in (None, day)]

    def distance(self, org: str, dest: str) -> dict | None:
        """{'origin','destination','duration','distance_km'} or None when the pair is unusable (no row,
        no distance, or a duration counted in days, as the benchmark's evaluator rules)."""
        row = self._distances.get((org, dest))
        if row is None or not row.get("duration") or "day" in row["duration"]:
            return None
        km = parse_distance_km(row.get("distance"))
        if km is None:
            return None
        return {"origin": org, "destination": dest, "duration": row["duration"], "distance_km": km}

    def ground_cost(self, mode: str, org: str, dest: str) -> int | None:
        """Cost of one car for 'self-driving' or 'taxi' between two cities (None when unavailable)."""
        info = self.distance(org, dest)
        if info is None:
            return None
        rate = SELF_DRIVING_COST_PER_KM if mode == "self-driving" else TAXI_COST_PER_KM
        return int(info["distance_km"] * rate)

    def accommodations(self, city: str) -> list[dict]:
        return list(self._accommodations.get(city, []))

    def restaurants(self, city: str) -> list[dict]:
        return list(self._restaurants.get(city, []))

    def attractions(self, city: str) -> list[dict]:
        return list(self._attractions.get(city, []))

    def cities_of_state(self, state: str) -> list[str]:
        return sorted(city for city, city_state in self.city_state.items() if city_state == state)

    def find_accommodation(self, name: str, city: str) -> dict | None:
        return _find(self._accommodations.get(city, []), "NAME", name)

    def find_restaurant(self, name: str, city: str) -> dict | None:
        return _find(self._restaurants.get(city, []), "Name", name)

    def find_attraction(self, name: str, city: str) -> dict | None:
        return _find(self._attractions.get(city, []), "Name", name)


def _find(rows: list[dict], key: str, name: str) -> dict | None:
    wanted = normalise_name(name)
    return next((row for row in rows if normalise_name(row[key]) == wanted), None)


def rooms_needed(people: int, occupancy: float) -> int:
    """Rooms (or cars) for a group: ceil(people / occupancy), at least one."""
    return max(1, math.ceil(people / occupancy)) if occupancy and occupancy > 0 else 1


@functools.lru_cache(maxsize=4)
def _load_cached(resolved_dir: str, view: str) -> Database:
    return Database(Path(resolved_dir), view)

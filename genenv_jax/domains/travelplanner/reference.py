"""Flights named in a query's reference information, the evaluator's flight source when the user's
database has no flights CSV (ours never does: the 305 MB file was never in the repository).

Reference information comes as [{"Description": "Flight from A to B on 2022-03-16", "Content": ...}]
where Content is the pandas table text of the official CSVs, a list of row dicts (our
train_ref_info.jsonl), or a "There is no flight ..." sentence; a {description: content} dict is read too.
"""

from __future__ import annotations

import re

_DESCRIPTION = re.compile(r"^Flight from (.+?) to (.+?) on (\d{4}-\d{2}-\d{2})\s*$")
_TABLE_ROW = re.compile(r"^\s*(F\d+)\s+(\d+(?:\.\d+)?)\s+(\d{1,2}:\d{2})\s+(\d{1,2}:\d{2})\s+.*?"
                        r"\s(\d{4}-\d{2}-\d{2})\s", re.M)


def _entries(reference) -> list[tuple[str, object]]:
    if isinstance(reference, dict):
        return [(str(key), value) for key, value in reference.items()]
    entries = []
    for item in reference or []:
        if isinstance(item, dict) and "Description" in item:
            entries.append((str(item["Description"]), item.get("Content")))
    return entries


def reference_flights(reference) -> list[dict] | None:
    """Every flight listed: {'Flight Number','Price','DepTime','ArrTime','FlightDate','OriginCityName',
    'DestCityName'}; None when the reference information lists no flight search at all."""
    flights, searched = [], False
    for description, content in _entries(reference):
        match = _DESCRIPTION.match(description.strip())
        if not match:
            continue
        searched = True
        origin, destination, date = match.groups()
        if isinstance(content, list):
            for row in content:
                if isinstance(row, dict) and "Flight Number" in row:
                    flights.append({"Flight Number": str(row["Flight Number"]), "Price": float(row["Price"]),
                                    "DepTime": row.get("DepTime"), "ArrTime": row.get("ArrTime"),
                                    "FlightDate": str(row.get("FlightDate", date)),
                                    "OriginCityName": origin, "DestCityName": destination})
        elif isinstance(content, str):
            for number, price, dep, arr, flight_date in _TABLE_ROW.findall(content):
                flights.append({"Flight Number": number, "Price": float(price), "DepTime": dep,
                                "ArrTime": arr, "FlightDate": flight_date, "OriginCityName": origin,
                                "DestCityName": destination})
    return flights if searched else None


def lookup_flight(number: str | None, origin: str, destination: str, query, db) -> tuple[str, dict | None]:
    """('found', row) | ('absent', None) | ('unverifiable', None) for a flight a plan names.

    Source order: the user's flights CSV (number + route, as the official evaluator matches), else the
    query's reference information (number + route), else nothing to check against: 'unverifiable'.
    """
    if not number:
        return "absent", None
    if db.has_flights:
        rows = db.flights(origin, destination)
    else:
        rows = reference_flights(query.reference_information)
        if rows is None:
            return "unverifiable", None
        rows = [row for row in rows if (row["OriginCityName"], row["DestCityName"]) == (origin, destination)]
    row = next((row for row in rows if str(row["Flight Number"]).upper() == number.upper()), None)
    return ("found", row) if row is not None else ("absent", None)

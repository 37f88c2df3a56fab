"""TravelPlanner's downloaded queries as seed records: the official CSVs, or the training file alone.

Official layout (`python -m genenv_jax.data.download travelplanner --dest DIR`): DIR/{train,validation}.csv
with the columns org, dest, days, visiting_city_number, date, people_number, local_constraint, budget,
query, level, reference_information[, annotated_plan], DIR/test.csv with only org, dest, days, date,
query, level, reference_information (the benchmark keeps the test constraints for its leaderboard: the
rest is read from the query text, see `test_query`), and the database under DIR/database.
Without the CSVs, 'train' is read from finetuning_data/std_travelplanner.jsonl (system / user
(reference information + "Query:...") / assistant (the gold plan)), its structured fields recovered
with `queries.parse_query_text`; 'validation' and 'test' are then empty.
"""

from __future__ import annotations

import ast
import csv
import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Any, Iterator

from genenv_jax.data.prepared import BenchmarkSource, DataMissing
from genenv_jax.domains.travelplanner.plans import PlanError, validate_plan
from genenv_jax.domains.travelplanner.queries import Query, QueryParseError, parse_query_text, query_from_row

SOURCE_VERSION = "1.1.0"  # 1.1.0: annotated plans keep their inner whitespace
SPLITS = ("train", "validation", "test")
DATABASE_DIR = "database"
FINETUNING_FILE = "finetuning_data/std_travelplanner.jsonl"
SPLIT_INFO = "split_info"
INSTRUCTIONS = ("download it with `python -m genenv_jax.data.download travelplanner --dest DIR` and pass "
                "data_dir=DIR")


def is_item(record: dict[str, Any]) -> bool:
    """Whether a prepared record is a query (not a split's leading description)."""
    return record.get("kind") != SPLIT_INFO


def query_record(query: Query, split: str, index: int, annotated_plan: list | None, source: str) -> dict[str, Any]:
    """One seed as a JSON record (the Query's fields, its split and index, the gold plan if any)."""
    return {"kind": "query", "task_id": f"{split}/{index}", "split": split, "index": index, "source": source,
            "org": query.org, "dest": query.dest, "days": query.days,
            "visiting_city_number": query.visiting_city_number, "date": list(query.date),
            "people_number": query.people_number, "budget": query.budget,
            "local_constraint": dict(query.local_constraint), "level": query.level, "query": query.text,
            "reference_information": query.reference_information, "annotated_plan": annotated_plan}


def record_query(record: dict[str, Any]) -> Query:
    """The Query of a seed record (or of a task's prompt, which holds the same keys)."""
    return Query(org=record["org"], dest=record["dest"], days=int(record["days"]),
                 visiting_city_number=int(record["visiting_city_number"]), date=tuple(record["date"]),
                 people_number=int(record["people_number"]), budget=int(record["budget"]),
                 local_constraint=dict(record["local_constraint"]), level=record["level"], text=record["query"],
                 reference_information=record.get("reference_information"))


def _plan_or_none(value: Any, where: str) -> list | None:
    if value in (None, "") or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError) as error:
            raise DataMissing(f"travelplanner: {where}: annotated plan is not a Python literal ({error})") from None
    # A leading query dict ([query, days...] or [query, [days]]) is dropped; the day list is kept.
    if isinstance(value, list) and value and isinstance(value[0], dict) and "org" in value[0]:
        value = value[1] if len(value) == 2 and isinstance(value[1], list) else value[1:]
    try:
        return validate_plan(value, collapse_spaces=False) if value is not None else None
    except PlanError as error:
        raise DataMissing(f"travelplanner: {where}: {error}") from None


def test_query(row: dict[str, str]) -> Query:
    """A test-split row's Query: people, budget and local constraints (absent from the published test
    CSV) read from the query text with `parse_query_text`; the row's own columns win where present."""
    parsed = parse_query_text(row.get("query", ""))
    fields = {"org": parsed.org, "dest": parsed.dest, "days": parsed.days,
              "visiting_city_number": parsed.visiting_city_number, "date": list(parsed.date),
              "people_number": parsed.people_number, "budget": parsed.budget,
              "local_constraint": parsed.local_constraint, "level": parsed.level}
    return query_from_row({**fields, **{key: value for key, value in row.items() if value not in (None, "")}})


def csv_records(path: Path, split: str) -> Iterator[dict[str, Any]]:
    """The rows of an official split CSV as seed records. A test row whose text cannot be read is
    skipped with a warning naming it (the test split is never trained on; train/validation rows
    carry their fields and a bad one is an error)."""
    csv.field_size_limit(min(sys.maxsize, 2 ** 31 - 1))  # reference_information cells run to megabytes
    with path.open(newline="", encoding="utf-8") as handle:
        for index, row in enumerate(csv.DictReader(handle)):
            structured = all(key in row for key in ("people_number", "budget"))
            try:
                query = query_from_row(row) if structured or split != "test" else test_query(row)
            except QueryParseError as error:
                if split == "test" and not structured:
                    logging.warning("travelplanner: %s row %d skipped: %s", path, index, error)
                    continue
                raise DataMissing(f"travelplanner: {path} row {index}: {error}") from None
            yield query_record(query, split, index, _plan_or_none(row.get("annotated_plan"), f"{path} row {index}"),
                               "official_csv")


def _reference_of_user_message(text: str, where: str) -> tuple[list, str]:
    head, marker, query_text = text.rpartition("Query:")
    if not marker:
        raise DataMissing(f"travelplanner: {where}: the user message has no 'Query:'")
    try:
        reference = ast.literal_eval(head.strip().removeprefix("Given Information:").strip())
    except (ValueError, SyntaxError) as error:
        raise DataMissing(f"travelplanner: {where}: reference information is not a Python literal ({error})") from None
    if not isinstance(reference, list):
        raise DataMissing(f"travelplanner: {where}: reference information is not a list")
    return reference, query_text.strip()


def finetuning_records(path: Path) -> Iterator[dict[str, Any]]:
    """The 45 training queries of the fine-tuning file as 'train' seed records."""
    for index, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        where = f"{path}:{index + 1}"
        try:
            messages = {m["role"]: m["content"] for m in json.loads(line)["messages"]}
            user, gold = messages["user"], messages["assistant"]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise DataMissing(f"travelplanner: {where}: not a system/user/assistant record ({error})") from None
        reference, text = _reference_of_user_message(user, where)
        try:
            parsed = parse_query_text(text)
        except QueryParseError as error:
            raise DataMissing(f"travelplanner: {where}: {error}") from None
        query = dataclasses.replace(parsed, reference_information=reference)
        yield query_record(query, "train", index, _plan_or_none(gold, where), "finetuning_jsonl")


def layout(root: Path) -> str:
    """'official' (split CSVs present) or 'finetuning' (train from the fine-tuning file only)."""
    if (root / "train.csv").is_file():
        return "official"
    if (root / FINETUNING_FILE).is_file():
        return "finetuning"
    raise DataMissing(f"travelplanner: {root} has neither train.csv nor {FINETUNING_FILE} ({INSTRUCTIONS})")


def examples(root: Path, split: str) -> Iterator[dict[str, Any]]:
    """The split's records, after a leading split-info record (so an empty split still prepares)."""
    kind = layout(root)
    yield {"kind": SPLIT_INFO, "split": split, "layout": kind}
    if kind == "official":
        path = root / f"{split}.csv"
        if path.is_file():
            yield from csv_records(path, split)
    elif split == "train":
        yield from finetuning_records(root / FINETUNING_FILE)


SOURCE = BenchmarkSource(name="travelplanner", version=SOURCE_VERSION, splits=SPLITS, examples=examples,
                         required=(DATABASE_DIR,), instructions=INSTRUCTIONS)

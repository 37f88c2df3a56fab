"""Score TravelPlanner plans and print the benchmark's metric table.

    python -m genenv_jax.domains.travelplanner.evaluate --data_dir DIR --plans FILE.jsonl \\
        [--split validation | --queries validation.csv] [--scoring official|strict|both] \\
        [--details verdicts.jsonl] [--json]

DIR is the TravelPlanner download (`python -m genenv_jax.data.download travelplanner --dest DIR`:
DIR/database and DIR/{train,validation,test}.csv) or the database folder itself. FILE.jsonl holds
submission records {"idx", "query", "plan"}. With --split (DIR/<split>.csv) or --queries (an official
CSV, whose row n is idx n) the structured fields and reference information come from the CSV;
without one each record's query text is parsed (parse_query_text), and flights can only be checked
against a flights CSV in the database (see reference.lookup_flight for the rule applied otherwise).

--scoring official (default) reproduces the benchmark's own evaluation code (metrics.SCORINGS), on the
rows its loader keeps; without the flights CSV its flights are those of every reference information
at hand (the query CSV's and database/train_ref_info.jsonl), each plan's flight checked against all of
them as upstream checks the whole CSV. `strict` is the paper's definitions; `both` prints both tables.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from genenv_jax.core.errors import ArgumentParser, check_output_path, command
from genenv_jax.domains.travelplanner.database import Database
from genenv_jax.domains.travelplanner.metrics import SCORINGS, evaluate_plan, metric_table
from genenv_jax.domains.travelplanner.queries import QueryParseError, parse_query_text, query_from_row
from genenv_jax.domains.travelplanner.tools import FlightsView, FlightTable

TRAIN_REFERENCES = "train_ref_info.jsonl"  # in the database folder: the 45 training queries' reference information

LABELS = (("delivery_rate", "Delivery rate"), ("commonsense_micro", "Commonsense micro pass rate"),
          ("commonsense_macro", "Commonsense macro pass rate"), ("hard_micro", "Hard constraint micro pass rate"),
          ("hard_macro", "Hard constraint macro pass rate"), ("final_pass_rate", "Final pass rate"))


PROGRAM = "python -m genenv_jax.domains.travelplanner.evaluate"


class EvaluationInputError(ValueError):
    """A plans or queries file that cannot be read (the message names file and line)."""


def database_dir(data_dir: Path) -> Path:
    return data_dir / "database" if (data_dir / "database").is_dir() else data_dir


def read_plans(path: Path) -> list[dict]:
    """The submission records of a plans JSONL; an empty, binary or malformed file is an error
    naming the file (and line), never a table of 0 plans."""
    records = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(_lines(handle, path), start=1):
            if not line.strip():
                continue
            record = _json_line(line, path, number)
            if not isinstance(record, dict) or "plan" not in record:
                raise EvaluationInputError(f"{path}:{number}: a record needs a 'plan' key")
            records.append(record)
    if not records:
        raise EvaluationInputError(f"{path}: no plans (one JSON record {{idx, query, plan}} a line)")
    return records


def _json_line(line: str, path: Path, number: int):
    """One JSONL line parsed; malformed JSON, or nesting too deep for the parser (one line of
    millions of `[`), is an error naming the file and line."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        raise EvaluationInputError(f"{path}:{number}: not JSON ({error.msg})") from None
    except RecursionError:
        raise EvaluationInputError(f"{path}:{number}: not JSON (nested too deeply)") from None


def _lines(handle, path: Path):
    """The lines of a text file, a byte that is not UTF-8 being an error naming file and line."""
    number = 0
    try:
        for number, line in enumerate(handle, start=1):
            yield line
    except UnicodeDecodeError as error:
        raise EvaluationInputError(f"{path}:{number + 1}: not UTF-8 text ({error.reason})") from None


def read_query_rows(path: Path) -> list[dict]:
    csv.field_size_limit(sys.maxsize)
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(_lines(handle, path)))


def stored_references(database: Path) -> list:
    """The reference information in database/train_ref_info.jsonl (one JSON object a line), if present."""
    path = database / TRAIN_REFERENCES
    if not path.is_file():
        return []
    references = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            references.append(_json_line(line, path, number))
    return references


def judge_database(database: Path, scoring: str, queries: list):
    """The database a scoring judges against: the official loader's rows with every known flight
    (official), or every row with flights from the CSV or each query's own reference information."""
    if scoring == "strict":
        return Database.load(database, "all")
    db = Database.load(database, "official")
    if db.has_flights:
        return db
    references = [query.reference_information for query in queries if query.reference_information]
    return FlightsView(db, FlightTable.from_references(db, references + stored_references(database)))


def queries_for(records: list[dict], plans_path: Path, queries_path: Path | None) -> list:
    """The Query of each record: from the CSV row idx (1-based) when given, else from its text."""
    rows = read_query_rows(queries_path) if queries_path else None
    queries = []
    for number, record in enumerate(records, start=1):
        where = f"{plans_path}:{number}"
        try:
            if rows is not None:
                idx = record.get("idx", number)
                idx = int(idx) if isinstance(idx, str) and idx.strip().isdigit() else idx  # "3" as 3
                if isinstance(idx, bool) or not isinstance(idx, int) or not 1 <= idx <= len(rows):
                    raise EvaluationInputError(f"{where}: idx {idx!r} is not a row of {queries_path} "
                                               f"(1..{len(rows)})")
                where = f"{queries_path}: row {idx} (for {plans_path}:{number})"
                queries.append(query_from_row(rows[idx - 1]))
            elif not isinstance(record.get("query"), str):
                raise EvaluationInputError(f"{where}: no 'query' text and no --queries file")
            else:
                queries.append(parse_query_text(record["query"]))
        except QueryParseError as error:
            raise EvaluationInputError(f"{where}: {error}") from None
    return queries


def format_table(table: dict[str, float]) -> str:
    lines = [f"{label:<34}{100 * table[key]:6.2f}%" for key, label in LABELS]
    lines.append(f"{'plans':<34}{int(table['plans']):7d}")
    lines.append(f"{'commonsense checks counted':<34}{int(table['commonsense_checks']):7d}")
    lines.append(f"{'hard constraints counted':<34}{int(table['hard_checks']):7d}")
    lines.append(f"{'budgets not verifiable (failed)':<34}{int(table['budget_unverifiable']):7d}")
    return "\n".join(lines)


@command(PROGRAM)
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog=PROGRAM, description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", type=Path, required=True, help="TravelPlanner download (with database/)")
    parser.add_argument("--plans", type=Path, required=True, help="JSONL of {idx, query, plan}")
    queries = parser.add_mutually_exclusive_group()
    queries.add_argument("--split", choices=("train", "validation", "test"), help="read DIR/<split>.csv")
    queries.add_argument("--queries", type=Path, help="an official query CSV (structured queries)")
    parser.add_argument("--scoring", choices=(*SCORINGS, "both"), default="official",
                        help="official: the benchmark's own evaluation code; strict: the paper's definitions")
    parser.add_argument("--details", type=Path, help="write each plan's verdict here (JSONL)")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    args = parser.parse_args(argv)
    if args.split:
        args.queries = args.data_dir / f"{args.split}.csv"
    scorings = SCORINGS if args.scoring == "both" else (args.scoring,)
    if args.details:  # never over the plans, the queries or the benchmark's own database files
        check_output_path(args.details, "--details", directory=False,
                          inputs={"--plans": args.plans, "--queries": args.queries, "--data_dir": args.data_dir})
    records = read_plans(args.plans)
    queries = queries_for(records, args.plans, args.queries)
    judges = {scoring: judge_database(database_dir(args.data_dir), scoring, queries) for scoring in scorings}
    results = {}
    for scoring, db in judges.items():
        verdicts = [evaluate_plan(query, record["plan"], db, scoring) for query, record in zip(queries, records)]
        levels = {level: metric_table([v for q, v in zip(queries, verdicts) if q.level == level])
                  for level in ("easy", "medium", "hard") if any(q.level == level for q in queries)}
        results[scoring] = (verdicts, metric_table(verdicts), levels)
    if args.details:
        with args.details.open("w", encoding="utf-8") as handle:
            for index, record in enumerate(records):
                row = {"idx": record.get("idx")}
                for scoring, (verdicts, _, _) in results.items():
                    verdict = verdicts[index]
                    row[scoring] = {"delivered": verdict.delivered, "commonsense": verdict.commonsense,
                                    "hard": verdict.hard, "reasons": verdict.reasons}
                handle.write(json.dumps(row) + "\n")
    if args.json:
        tables = {scoring: {**table, "by_level": levels} for scoring, (_, table, levels) in results.items()}
        print(json.dumps(tables[scorings[0]] if len(tables) == 1 else tables, indent=2))
        return 0
    for scoring, (_, table, levels) in results.items():
        if len(results) > 1:
            print(f"== scoring: {scoring}")
        print(format_table(table))
        for level, sub in levels.items():
            print(f"{level:<8}{int(sub['plans']):4d} plans  delivery {100 * sub['delivery_rate']:6.2f}%  "
                  f"commonsense macro {100 * sub['commonsense_macro']:6.2f}%  "
                  f"hard macro {100 * sub['hard_macro']:6.2f}%  final {100 * sub['final_pass_rate']:6.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

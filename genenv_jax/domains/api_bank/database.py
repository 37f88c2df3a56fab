"""API-Bank's JSON databases: read once per directory, copied per dialogue so state changes stay private.

`init_database/` holds one JSON file per table (Account.json, Agenda.json, ...). The tables the APIs
write are deep-copied for every `ApiState`; the large read-only ones (ImageCaptioning, Wiki, ...)
are shared. A missing or unreadable file gives a one-line error naming it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import random
from pathlib import Path
from typing import Any, Mapping

# Tables the APIs change: copied per state. Every other table is read only.
MUTABLE_TABLES = ("Account", "Agenda", "Alarm", "Appointments", "Bank", "HealthData", "Hotel", "Meeting",
                  "Reminder", "Scenes", "TimeSwitch")
READ_ONLY_TABLES = ("History", "ImageCaptioning", "QuestionAnswering", "SearchEngine", "SpeechRecognition",
                    "Stock", "Symptom", "Wiki")
REQUIRED_TABLES = MUTABLE_TABLES + READ_ONLY_TABLES
# The date GetToday answers: the one every recorded GetToday call shows (upstream answers the wall clock).
DEFAULT_TODAY = "2023-03-31"


class DatabaseError(ValueError):
    """The init_database directory is missing a table or holds one that is not JSON."""


@functools.lru_cache(maxsize=8)
def load_tables(init_database_dir: str) -> Mapping[str, Any]:
    """All tables of `init_database_dir` by name (cached: treat as read only)."""
    root = Path(init_database_dir)
    if not root.is_dir():
        raise DatabaseError(f"{root}: no such init_database directory (download API-Bank first)")
    tables = {}
    for name in REQUIRED_TABLES:
        path = root / f"{name}.json"
        try:
            tables[name] = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DatabaseError(f"{path}: table missing from init_database") from None
        except json.JSONDecodeError as error:
            raise DatabaseError(f"{path}: not JSON ({error.msg} at line {error.lineno})") from None
    return tables


@dataclasses.dataclass
class ApiState:
    """The mutable world of one dialogue: tables, the tool searcher, the random source and session facts."""

    tables: dict[str, Any]
    today: str = DEFAULT_TODAY
    seed: int = 0
    session: dict[str, Any] = dataclasses.field(default_factory=dict)
    tool_searcher: Any = None
    rng: random.Random = dataclasses.field(init=False)

    def __post_init__(self):
        self.rng = random.Random(self.seed)

    @classmethod
    def fresh(cls, tables: Mapping[str, Any], **kwargs) -> "ApiState":
        """A state over private copies of the mutable tables of `tables` (read-only ones shared)."""
        own = {name: (copy.deepcopy(value) if name in MUTABLE_TABLES else value) for name, value in tables.items()}
        return cls(own, **kwargs)

    def table(self, name: str) -> Any:
        return self.tables[name]

    def username_for_token(self, token: Any) -> str | None:
        """The account whose token is `token`, or None."""
        return next((user for user, info in self.tables["Account"].items() if info.get("token") == token), None)


__all__ = ["ApiState", "DEFAULT_TODAY", "DatabaseError", "MUTABLE_TABLES", "READ_ONLY_TABLES", "load_tables"]

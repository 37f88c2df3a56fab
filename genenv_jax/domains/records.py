"""The records that flow through the co-evolution loop: tasks, rejected generations, an environment
step's answer and a score. Records are frozen, JSON-serialisable dataclasses with a schema version,
so pools written by one version can be read (or refused with a clear error) by another.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from genenv_jax.text.chat_text import Message

SCHEMA_VERSION = 1

# Requested difficulty of a generated variant relative to its seed.
DIFFICULTY_DIRECTIONS = ("easier", "similar", "harder")

def _check_schema(cls_name: str, data: Mapping[str, Any]) -> None:
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ValueError(f"{cls_name}: schema_version {version!r} is not supported (this code reads "
                         f"version {SCHEMA_VERSION})")


def _from_json(cls, data: Mapping[str, Any]):
    if not isinstance(data, Mapping):
        raise TypeError(f"{cls.__name__}.from_json: expected a JSON object, got {type(data).__name__}")
    _check_schema(cls.__name__, data)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{cls.__name__}.from_json: unknown fields {unknown}")
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [n for n in required if n not in data]
    if missing:
        raise ValueError(f"{cls.__name__}.from_json: missing fields {missing}")
    return cls(**dict(data))


class Record:
    """JSON round-trip shared by the record types."""

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self)))

    def dumps(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]):
        return _from_json(cls, data)

    @classmethod
    def loads(cls, text: str):
        return cls.from_json(json.loads(text))


@dataclasses.dataclass(frozen=True)
class Task(Record):
    """A task an agent attempts: what it is shown (`prompt`) and what verifies it (`verifier`).

    `prompt` and `verifier` are domain-defined JSON objects. Seeds have `parent_id=None`;
    a generated variant names the seed it came from and the difficulty direction it was asked for.
    """

    domain: str
    task_id: str
    category: str
    prompt: dict[str, Any]
    verifier: dict[str, Any]
    parent_id: str | None = None
    difficulty: str | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self):
        if not self.task_id:
            raise ValueError("Task.task_id must be non-empty")
        if self.difficulty is not None and self.difficulty not in DIFFICULTY_DIRECTIONS:
            raise ValueError(f"Task.difficulty {self.difficulty!r} not in {DIFFICULTY_DIRECTIONS}")


class Invalid(ValueError):
    """Model text that does not make a valid task: `reason` is a code the domain counts (one of its
    `rejection_reasons`), `detail` says what was wrong. Parsers raise it; `parse_task` turns it into
    a `Rejection` (`Rejection.of`), so model text never ends a run."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclasses.dataclass(frozen=True)
class Rejection(Record):
    """A simulator generation that did not become a task, with a reason code for counting."""

    domain: str
    reason: str
    detail: str
    seed_id: str | None
    raw_text: str
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def of(cls, invalid: "Invalid", domain: str, seed: "Task | None", text: str) -> "Rejection":
        """The rejection of simulator text `text` (a variant of `seed`) for the reason `invalid` gives."""
        return cls(domain=domain, reason=invalid.reason, detail=invalid.detail,
                   seed_id=None if seed is None else seed.task_id, raw_text=text)


@dataclasses.dataclass(frozen=True)
class StepOutcome:
    """The environment's answer to one agent turn.

    observation: the messages the agent sees next (tool results as role "tool", the next user turn
      as role "user"); empty when `done`. info: per-step facts to count, e.g.
      {"errors": {"unknown_method": 1}} for calls the environment refused.
    """

    observation: list[Message]
    done: bool
    info: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not self.done and not self.observation:
            raise ValueError("StepOutcome: an episode that goes on needs an observation")


@dataclasses.dataclass(frozen=True)
class ScoreResult:
    """R_agent in [0, 1] with the verifier's explanation (kept in rollout details and eval reports)."""

    reward: float
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

"""The domain contract and the records that flow through the co-evolution loop.

A domain (one benchmark) supplies seed tasks, the prompts of both policies, the parser/validator
of the simulator's output, the environment step and the agent reward. Records are frozen,
JSON-serialisable dataclasses with a schema version so pools written by one version can be read
(or refused with a clear error) by another.
"""

from __future__ import annotations

import abc
import dataclasses
import json
from typing import Any, Callable, ClassVar, Mapping, Sequence

from genenv_jax.text.chat_text import ChatPrompt, Message

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


class _Record:
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
class Task(_Record):
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

    @property
    def is_seed(self) -> bool:
        return self.parent_id is None


@dataclasses.dataclass(frozen=True)
class Rejection(_Record):
    """A simulator generation that did not become a task, with a reason code for counting."""

    domain: str
    reason: str
    detail: str
    seed_id: str | None
    raw_text: str
    schema_version: int = SCHEMA_VERSION


@dataclasses.dataclass(frozen=True)
class Rollout(_Record):
    """One agent attempt at a task: the transcript (agent turns and observations) and its reward."""

    domain: str
    task_id: str
    transcript: list[Message]
    reward: float
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @property
    def final_response(self) -> str:
        """Content of the last assistant message ('' if there is none)."""
        return last_assistant_text(self.transcript)


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


def difficulty_direction(recent_success: Sequence[float], alpha: float = 0.5, band: float = 0.1) -> str:
    """Which way to move a seed's difficulty so the agent's success rate approaches `alpha`.

    `recent_success` holds the agent's recent success rates (p_hat) on the seed or its variants;
    above `alpha + band` asks for harder variants, below `alpha - band` for easier ones.
    """
    if not recent_success:
        return "similar"
    p = sum(recent_success) / len(recent_success)
    if p > alpha + band:
        return "harder"
    if p < alpha - band:
        return "easier"
    return "similar"


SPLITS = ("train", "validation", "test")


def split_of(tasks: Sequence[Task], split: str) -> list[Task]:
    """The tasks whose `metadata["split"]` is `split` ('all': every task), in their order."""
    if split == "all":
        return list(tasks)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS + ('all',)}")
    return [t for t in tasks if t.metadata["split"] == split]


def next_sibling(domain: "Domain", seed: Task, fits: Callable[[Task], bool]) -> Task:
    """The next task after `seed` in its split and category (cyclically) for which `fits` holds:
    a real task to write as a reference generation. Keeping the split means warm-start data never
    shows the simulator an evaluation item."""
    split = seed.metadata.get("split", "train")
    pool = [t for t in domain.seeds(split) if t.category == seed.category]
    start = next((i for i, t in enumerate(pool) if t.task_id == seed.task_id), -1)
    for k in range(1, len(pool) + 1):
        candidate = pool[(start + k) % len(pool)]
        if fits(candidate):
            return candidate
    raise ValueError(f"no task in split {split!r} of category {seed.category!r} can serve as a "
                     f"reference generation for {seed.task_id}")


class Environment(abc.ABC):
    """One episode's environment state. It lives in one process (the loop's, or an environment
    worker's) from `reset` to `score` and is never pickled: pools keep the task and the transcript."""

    @abc.abstractmethod
    def reset(self) -> ChatPrompt:
        """The agent's first prompt (messages and tool schemas)."""

    @abc.abstractmethod
    def step(self, agent_text: str) -> StepOutcome:
        """Applies one agent turn (model text: parse it, never execute it) and answers."""

    @abc.abstractmethod
    def score(self, transcript: Sequence[Message]) -> ScoreResult:
        """R_agent of the whole episode (end state and/or transcript), with the verifier's details."""


class SingleTurnEnvironment(Environment):
    """A task answered in one agent turn and scored on that response (the default episode)."""

    def __init__(self, domain: "Domain", task: Task):
        self.domain, self.task = domain, task

    def reset(self) -> ChatPrompt:
        return self.domain.agent_prompt(self.task)

    def step(self, agent_text: str) -> StepOutcome:
        return StepOutcome(observation=[], done=True)

    def score(self, transcript: Sequence[Message]) -> ScoreResult:
        return self.domain.score_details(self.task, last_assistant_text(transcript))


def last_assistant_text(transcript: Sequence[Message]) -> str:
    """Content of the last assistant message ('' if there is none)."""
    for message in reversed(transcript):
        if message.get("role") == "assistant":
            return str(message.get("content", ""))
    return ""


class Domain(abc.ABC):
    """A benchmark as the co-evolution loop and the evaluator see it.

    Every method that reads model text (`parse_task`, `score_details`) must return a Rejection or
    a zero reward for text it cannot read, never raise: generation is replayed exactly on resume,
    so an exception would stop the run at the same epoch every time.
    """

    name: ClassVar[str]
    rejection_reasons: ClassVar[tuple[str, ...]]

    @abc.abstractmethod
    def seeds(self, split: str) -> list[Task]:
        """Seed tasks of a split ('train', 'validation', 'test' or 'all')."""

    @abc.abstractmethod
    def simulator_prompt(self, seed: Task, recent_success: Sequence[float] = (), difficulty: str = "similar",
                         alpha: float = 0.5) -> ChatPrompt:
        """Prompt asking the simulator for one new variant of `seed`, `difficulty` relative to it.

        The caller owns the curriculum: it picks `difficulty` (one of DIFFICULTY_DIRECTIONS, e.g.
        `difficulty_direction(recent_success, alpha, k_min)`) and passes its target success rate
        `alpha`; `recent_success` is the agent's recent success rates on this seed, for the prompt
        to show. The domain only phrases them.
        """

    @abc.abstractmethod
    def parse_task(self, text: str, seed: Task, difficulty: str | None = None) -> Task | Rejection:
        """Reads and validates a simulator generation; a Rejection carries a reason code."""

    @abc.abstractmethod
    def agent_prompt(self, task: Task) -> ChatPrompt:
        """The agent's first prompt for a task."""

    def environment(self, task: Task) -> Environment:
        """A fresh environment for one episode of `task`. Single-turn domains keep this default
        (one agent turn, scored by `score_details`); multi-turn domains return their own."""
        return SingleTurnEnvironment(self, task)

    @abc.abstractmethod
    def score_details(self, task: Task, response: str) -> ScoreResult:
        """R_agent of a single-turn response, with the verifier's explanation."""

    def score(self, task: Task, response: str) -> float:
        """R_agent in [0, 1] of a single-turn response."""
        return self.score_details(task, response).reward

    @abc.abstractmethod
    def reference_response(self, task: Task) -> str:
        """An ideal assistant response for the task (its ground truth), for SFT warm-start data."""

    def reference_turns(self, task: Task) -> list[str]:
        """The agent texts of an ideal episode (SFT warm-start demonstrations): one turn by default;
        multi-turn domains list every agent turn, and the environment supplies the observations."""
        return [self.reference_response(task)]

    @abc.abstractmethod
    def reference_generation(self, seed: Task, sibling: Task | None = None) -> str:
        """An ideal simulator output for `seed` (SFT warm-start data): a real task written in the
        format `simulator_prompt` asks for, which `parse_task(text, seed)` accepts.

        `sibling` is the task to write; when it is None or unsuitable (another category, the
        same question) the domain picks one itself from the seed's split.
        """

"""The domain contract: what a benchmark supplies to the co-evolution loop and the evaluator.

A domain (one benchmark) supplies seed tasks, the prompts of both policies, the parser/validator
of the simulator's output, the environment step and the agent reward; optionally its evaluation
summary and DreamGym support. The records it exchanges with the loop are in `records.py`
(re-exported here); the shared reading of simulator JSON is in `generation.py`.
"""

from __future__ import annotations

import abc
from typing import Callable, ClassVar, Mapping, Sequence

import numpy as np

from genenv_jax.domains.experience import DomainSupport
from genenv_jax.domains.records import (DIFFICULTY_DIRECTIONS, SCHEMA_VERSION, Invalid, Record, Rejection, ScoreResult,
                                        StepOutcome, Task)
from genenv_jax.text.chat_text import ChatPrompt, Message

__all__ = ["DIFFICULTY_DIRECTIONS", "SCHEMA_VERSION", "ChatPrompt", "Domain", "Environment", "Invalid", "Message",
           "Record", "Rejection", "SPLITS", "ScoreResult", "SingleTurnEnvironment", "StepOutcome", "Task",
           "check_difficulty", "curriculum_line", "last_assistant_text", "next_sibling", "split_of"]


def check_difficulty(difficulty: str) -> None:
    """A ValueError unless `difficulty` is one of DIFFICULTY_DIRECTIONS (the caller's curriculum picks it)."""
    if difficulty not in DIFFICULTY_DIRECTIONS:
        raise ValueError(f"difficulty {difficulty!r} not in {DIFFICULTY_DIRECTIONS}")


def curriculum_line(recent_success: Sequence[float], alpha: float, difficulty: str, *, solver: str = "The agent",
                    doing: str = "solves tasks", count: bool = True) -> str:
    """The simulator prompt's sentence on the curriculum: the solver's recent success on the seed
    against the target `alpha` (after checking `difficulty`). The domain adds its own guidance for
    the difficulty it was asked for.

    "The agent currently solves tasks like this one 75% of the time (last 4 measurements); the target is 50%."
    ("(last n measurements)" only with `count`), or, before any measurement,
    "The agent's success rate on this seed has not been measured yet; the target is 50%."
    """
    check_difficulty(difficulty)
    if not recent_success:
        return f"{solver}'s success rate on this seed has not been measured yet; the target is {alpha:.0%}."
    rate = sum(recent_success) / len(recent_success)
    measured = f" (last {len(recent_success)} measurements)" if count else ""
    return f"{solver} currently {doing} like this one {rate:.0%} of the time{measured}; the target is {alpha:.0%}."


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

    def seeds(self, split: str) -> list[Task]:
        """Seed tasks of a split ('train', 'validation', 'test' or 'all'), in a fixed order. Built once
        by `load_seeds` and cached on the domain."""
        cached = self.__dict__.get("_seed_cache")
        if cached is None:
            cached = self.__dict__["_seed_cache"] = list(self.load_seeds())
        return split_of(cached, split)

    def load_seeds(self) -> list[Task]:
        """Every seed task, each with `metadata["split"]`; `seeds` calls it once. A domain implements
        this (or overrides `seeds` itself)."""
        raise NotImplementedError(f"{type(self).__name__} implements neither load_seeds() nor seeds()")

    def reject(self, invalid: Invalid, seed: Task | None, text: str) -> Rejection:
        """The Rejection of simulator text `text` for `invalid`'s reason (one of `rejection_reasons`)."""
        if invalid.reason not in self.rejection_reasons:
            raise ValueError(f"{self.name}: rejection reason {invalid.reason!r} is not in its rejection_reasons")
        return Rejection.of(invalid, self.name, seed, text)

    @abc.abstractmethod
    def simulator_prompt(self, seed: Task, recent_success: Sequence[float] = (), difficulty: str = "similar",
                         alpha: float = 0.5) -> ChatPrompt:
        """Prompt asking the simulator for one new variant of `seed`, `difficulty` relative to it.

        The caller owns the curriculum: it picks `difficulty` (one of DIFFICULTY_DIRECTIONS, e.g.
        `rl.curriculum.difficulty_direction(recent_success, alpha, k_min)`) and passes its target
        success rate `alpha`; `recent_success` is the agent's recent success rates on this seed, for
        the prompt to show, or None when the run shows the simulator nothing of the agent
        (`config.simulator_feedback=none`, difficulty "similar"). The domain only phrases them
        (`curriculum_line`).
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

    def summary(self, per_category: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        """The evaluation's aggregates of {category: {"n", "correct", "accuracy", ...}}. Default: the
        unweighted mean of category accuracies and the item-weighted (micro) accuracy; a benchmark
        overrides it to report its own published aggregates."""
        if not per_category:
            return {}
        n = sum(r["n"] for r in per_category.values())
        return {"overall": float(np.mean([r["accuracy"] for r in per_category.values()])),
                "overall_micro": sum(r["correct"] for r in per_category.values()) / n}

    def prepare_environments(self) -> None:
        """One-time set-up an environment host runs before its first request, outside the requests'
        time limits (episodes/limits.py): e.g. loading or building a retrieval index. Default: none."""

    def dreamgym(self) -> DomainSupport | None:
        """DreamGym's pieces for this domain (`domains/experience.py`), or None (the default) when an
        experience model cannot stand in for its environment. May raise a ConfigError naming an
        option that rules it out."""
        return None

    @abc.abstractmethod
    def reference_generation(self, seed: Task, sibling: Task | None = None) -> str:
        """An ideal simulator output for `seed` (SFT warm-start data): a real task written in the
        format `simulator_prompt` asks for, which `parse_task(text, seed)` accepts.

        `sibling` is the task to write; when it is None or unsuitable (another category, the
        same question) the domain picks one itself from the seed's split.
        """

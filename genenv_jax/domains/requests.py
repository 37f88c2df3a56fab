"""What an environment host is asked (the `Environment` protocol of `domains.base`, batched by
episode id), one typed record per request: start an episode's environment on a task, step it with
the agent's reply, score its transcript, close it. Hosts (in this process, in worker processes,
DreamGym's experience model) answer a batch of them in order; the records cross process pipes, so
they hold only picklable data.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Sequence, Union

from genenv_jax.domains.base import Task


@dataclasses.dataclass(frozen=True)
class Reset:
    """Start `episode`'s environment on `task`; answered with its first prompt (or a failure)."""

    episode: int
    task: Task
    op: ClassVar[str] = "reset"


@dataclasses.dataclass(frozen=True)
class Step:
    """Send the agent's reply `text` to `episode`'s environment; answered with a `StepOutcome`."""

    episode: int
    text: str
    op: ClassVar[str] = "step"


@dataclasses.dataclass(frozen=True)
class Score:
    """Score `episode`'s whole `transcript`; answered with a `ScoreResult`."""

    episode: int
    transcript: Sequence[Any]
    op: ClassVar[str] = "score"


@dataclasses.dataclass(frozen=True)
class Close:
    """Drop `episode`'s environment; answered with None."""

    episode: int
    op: ClassVar[str] = "close"


Request = Union[Reset, Step, Score, Close]


def own_copy(task: Task) -> Task:
    """The task an environment gets: its own copy, rebuilt from the task's JSON (what a task file
    holds), so that no environment shares or mutates the loop's task, whatever host it runs in."""
    return Task.from_json(task.to_json())

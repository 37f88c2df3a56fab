"""What one multi-turn task's episode needs, read from its `Task`: the user turns, the involved
classes and their initial configuration, which function docs are shown from the start and which
are revealed at a later turn (miss_func), and the ground-truth calls per turn."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from genenv_jax.domains.base import Task
from genenv_jax.domains.bfcl_multiturn import data
from genenv_jax.domains.bfcl_multiturn.dispatch import Backends, Dispatcher


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A task's episode ingredients (read-only views of the task's JSON)."""

    category: str
    question: list[list[dict[str, Any]]]
    involved_classes: list[str]
    initial_config: dict[str, Any]
    revealed: dict[int, list[str]]            # turn index -> function names revealed at that turn
    ground_truth: list[list[dict[str, Any]]]  # per turn: [{"name", "arguments"}]

    @classmethod
    def of(cls, task: Task) -> "Scenario":
        return cls(category=task.category, question=task.prompt["question"],
                   involved_classes=list(task.prompt["involved_classes"]),
                   initial_config=task.verifier["initial_config"],
                   revealed=data.reveal_schedule(task.prompt.get("missed_function", {})),
                   ground_truth=task.verifier["ground_truth"])

    @property
    def n_turns(self) -> int:
        return len(self.question)

    @property
    def hidden(self) -> list[str]:
        """Function names held out at the start (revealed later)."""
        return [n for names in self.revealed.values() for n in names]

    def initial_docs(self) -> list[dict[str, Any]]:
        """The function docs the agent is shown at the start."""
        return data.docs_shown(self.involved_classes, self.hidden)

    def revealed_docs(self, turn: int) -> list[dict[str, Any]]:
        """The docs that become available at `turn` (empty for most turns)."""
        return data.docs_named(self.involved_classes, self.revealed.get(turn, []))

    def user_messages(self, turn: int) -> list[dict[str, Any]]:
        """The user turn's messages as the dataset has them ([] for a turn that reveals functions)."""
        return copy.deepcopy(self.question[turn])

    def backends(self) -> Backends:
        """Fresh backend instances for one execution of the scenario."""
        return Backends(self.involved_classes, self.initial_config, data.is_long_context(self.category))

    def execution(self) -> Dispatcher:
        """A dispatcher on fresh backend instances: one execution of the scenario."""
        return Dispatcher(self.backends())

"""One environment step as a record: what the experience model learns to predict and what the
replay buffer stores and retrieves.

A transition is (task, history, state, action) -> (reasoning, next state, reward, done). States are
the environment's own text without the list of available commands (ALFWorld: the engine's
feedback), so a model can predict them and exact match is meaningful. `reasoning` is derived from
the engine (the facts that changed, why an action failed), standing in for the teacher LLM's
annotations of the paper. `source` says where it came from: expert, random, agent (real engine) or
synthetic (the experience model's own prediction)."""

from __future__ import annotations

import dataclasses
from typing import Any

from genenv_jax.domains.base import _Record

SOURCES = ("expert", "random", "agent", "synthetic")
REAL_SOURCES = ("expert", "random", "agent")


@dataclasses.dataclass(frozen=True)
class Transition(_Record):
    """One step: `history` holds the earlier [state, action] pairs of the episode, oldest first."""

    domain: str
    task_id: str
    task: str                      # the instruction the agent is given ("put a clean mug in the coffeemachine")
    history: list[list[str]]       # [[state_0, action_0], ..., [state_{t-1}, action_{t-1}]]
    state: str                     # s_t
    action: str                    # a_t (the command as parsed from the agent's reply)
    next_state: str                # s_{t+1}
    reward: float                  # r_{t+1}: 1.0 only on the step that completes the task
    done: bool                     # the episode ended with this step (won, or a failure state)
    valid: bool                    # ALFWorld: admissible in s_t; BFCL: every call ran without an error
    reasoning: str                 # why s_t, a_t lead to s_{t+1} (engine-derived for real transitions)
    source: str                    # one of SOURCES
    step: int = 0                  # t
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    schema_version: int = 1

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"Transition.source {self.source!r} not in {SOURCES}")
        if any(not isinstance(pair, (list, tuple)) or len(pair) != 2 for pair in self.history):
            raise ValueError("Transition.history must be a list of [state, action] pairs")

    @property
    def real(self) -> bool:
        return self.source in REAL_SOURCES

"""DreamGym's domain-side contract: what a domain supplies so an experience model can stand in for
its environment (`Domain.dreamgym()` returns a `DomainSupport`).

`Transition`: one environment step as a record, what the experience model learns to predict and
what the replay buffer stores and retrieves.

A transition is (task, history, state, action) -> (reasoning, next state, reward, done). States are
the environment's own text without the list of available commands (ALFWorld: the engine's
feedback), so a model can predict them and exact match is meaningful. `reasoning` is derived from
the engine (the facts that changed, why an action failed), standing in for the teacher LLM's
annotations of the paper. `source` says where it came from: expert, random, agent (real engine) or
synthetic (the experience model's own prediction).

`Move`, `SyntheticEpisode`, `SyntheticAdapter`: how agent replies become steps of a synthetic
episode (`dreamgym.environments.SyntheticEnvironments` runs them). `OfflineSettings`: the offline
real transitions collected per training seed."""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable, Protocol, Sequence

from genenv_jax.domains.records import Record, Task
from genenv_jax.text.chat_text import ChatPrompt, Message

SOURCES = ("expert", "random", "agent", "synthetic")
REAL_SOURCES = ("expert", "random", "agent")


@dataclasses.dataclass(frozen=True)
class Transition(Record):
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


@dataclasses.dataclass(frozen=True)
class Move:
    """What one agent reply asks of the environment.

    `action` is the step as the experience model sees it (None: the reply names no action the
    domain can read, a failure state with reason `failure`). `scripted` is (next state, messages)
    when the domain answers the step itself without the model. `rewarded` False: the predicted
    reward of this step is ignored (recorded as 0); `final` True: the episode ends after this step,
    its predicted reward being the outcome.
    """

    action: str | None
    scripted: tuple[str, list[Message]] | None = None
    rewarded: bool = True
    final: bool = False
    failure: str = "invalid_action"


class SyntheticEpisode(Protocol):
    """One episode's domain side: its first prompt and state, and how agent replies become steps."""

    first: ChatPrompt        # the agent's first prompt (the real environment's own)
    state: str               # the first state as the experience model sees it
    task_text: str           # the task as the experience model sees it
    max_steps: int           # predicted and scripted steps before the episode ends

    def move(self, agent_text: str) -> Move:
        """The step an agent reply asks for (called once per reply, in order)."""

    def observation(self, next_state: str) -> list[Message] | None:
        """The messages the agent is shown for a predicted state; None when the domain cannot show
        it (e.g. not one tool result per call): a failure state."""


class SyntheticAdapter(Protocol):
    """What a domain supplies for synthetic episodes."""

    def start(self, task: Task) -> SyntheticEpisode:
        """A fresh episode of `task`."""


@dataclasses.dataclass(frozen=True)
class OfflineSettings:
    """Offline data per training seed: the expert episode and `random_per_task` random (ALFWorld:
    random commands, inadmissible with probability `invalid_prob`) or perturbed (BFCL multi-turn:
    each turn's calls perturbed with probability `invalid_prob`) episodes of at most `random_steps`
    agent replies. `rng_key` seeds the draws (the loop: `run_rng_key(config.seed)`)."""

    random_per_task: int
    random_steps: int
    invalid_prob: float
    rng_key: str

    def rng(self) -> random.Random:
        return random.Random(self.rng_key)


@dataclasses.dataclass(frozen=True)
class DomainSupport:
    """What `Domain.dreamgym()` returns. Each callable takes the domain first: `adapter(domain)` makes
    synthetic episodes; `offline(domain, seeds, settings)` plays the training seeds' real offline
    transitions; `episode(domain, task, transcript)` replays an agent episode as real transitions."""

    adapter: Callable[[Any], SyntheticAdapter]
    offline: Callable[[Any, Sequence[Task], OfflineSettings], list[Transition]]
    episode: Callable[[Any, Task, Sequence[Message]], list[Transition]]
    environment: str   # the experience model's system prompt: "You are the environment of <environment>."

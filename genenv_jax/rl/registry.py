"""Variants by name: the advantage estimators and the policy losses (update rules) the config can pick.

A new variant is one function and one decorator line; the config then accepts its name (the allowed
values of `agent.train.loss.advantage` and `simulator.train.objective` are read from here when a
config is checked) and the loop uses it, with no other edit:

    @register_advantage("my_estimator")
    def my_credit(batch: CreditBatch, config) -> Credits: ...

    @register_policy_loss("my_loss", config=MyLossConfig, grouped=True)
    def make_my_step(cfg, optimizer, config, *, mesh=None, micro_batches=1, partition=None) -> TrainStep: ...

The built-in ones register where they are defined (`rl.advantages`: grpo, gigpo; `rl.grpo` and
`rl.rwr`: the grpo and rwr losses); importing `genenv_jax.rl` registers them all. An unknown name
fails in one line that lists the registered ones. See docs/rl.md, "Adding a variant".
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Generic, Hashable, Iterator, Sequence, TypeVar

import numpy as np

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind, in registration order. Names are unique: registering a taken
    name is an error (a variant is never replaced by accident)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        if not name or not isinstance(name, str):
            raise ValueError(f"a {self.kind} is registered under a non-empty string name, got {name!r}")
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def remove(self, name: str) -> None:
        """Forgets `name` (tests register a variant for their own duration)."""
        self.get(name)
        del self._entries[name]

    def get(self, name: str) -> T:
        if name not in self._entries:
            raise ValueError(self.problem(name))
        return self._entries[name]

    def problem(self, name: Any) -> str | None:
        """None when `name` is registered, else the one line that says so and lists the names."""
        if isinstance(name, str) and name in self._entries:
            return None
        return f"unknown {self.kind} {name!r} (registered: {', '.join(self._entries)})"

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._entries))

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()!r})"


# ----------------------------------------------------------------------------------------------
# Advantage estimators: the agent's credit, on the host in numpy
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CreditBatch:
    """What an estimator sees of B = G x n episodes (G task groups of n rollouts, each group's
    episodes consecutive). Plain arrays and keys, so `rl` needs no episode type.

    rewards [B] float64: each episode's reward (R_agent with any overlong shaping);
    states[b][t]: the anchor-state key of episode b's agent turn t (equal keys: the same state);
    turn_spans[b][t]: the [start, end) response tokens of episode b's agent turn t;
    lengths[b]: episode b's response tokens; ids[b]: its episode id (for errors).
    """

    rewards: np.ndarray
    num_rollouts: int
    states: Sequence[Sequence[Hashable]]
    turn_spans: Sequence[Sequence[tuple[int, int]]]
    lengths: Sequence[int]
    ids: Sequence[str]


@dataclasses.dataclass(frozen=True)
class Credits:
    """An estimator's answer: advantages [B] float64 per episode; `token_advantages` [B] float32
    arrays over each episode's response tokens when the estimator credits tokens apart (else None:
    every token of an episode takes its episode's advantage); `turn_advantages` [B] arrays of each
    agent turn's own term (GiGPO's step advantages), what its `summarise` reads. Every field is per
    episode, so `group(g, n)` is task group g's own answer."""

    advantages: np.ndarray
    token_advantages: list[np.ndarray] | None = None
    turn_advantages: list[np.ndarray] | None = None

    def group(self, g: int, n: int) -> Credits:
        """Task group g's episodes (n per group) of this answer."""
        def part(x):
            return None if x is None else x[g * n:(g + 1) * n]
        return Credits(self.advantages[g * n:(g + 1) * n], part(self.token_advantages), part(self.turn_advantages))


@dataclasses.dataclass(frozen=True)
class AdvantageEstimator:
    """A registered estimator: `fn(batch, loss_config) -> Credits`. `per_turn`: it gives each agent
    turn its own advantage (so a loss needing one advantage per sequence, GSPO's, cannot use it).
    `summarise(groups) -> metrics`: what to log of the groups a step trains on, from their
    `Credits` (one per task group), so the metrics describe exactly those groups however the
    credits were computed (dynamic sampling credits every rolled-out group once, the update trains
    on a draw of them)."""

    name: str
    fn: Callable[[CreditBatch, Any], Credits]
    per_turn: bool = False
    summarise: Callable[[Sequence[Credits]], dict[str, float]] | None = None


@dataclasses.dataclass(frozen=True)
class PolicyLoss:
    """A registered update rule. `make_step(cfg, optimizer, config, *, mesh, micro_batches, partition)`
    builds its jitted step (`rl.step.TrainStep`); `config` is its loss section's dataclass (which
    has `needs_reference`, `chunk_size` and `temperature`); `grouped`: it trains on group-relative
    advantages, so its rows per step are tasks x group size and a policy's group must hold >= 2."""

    name: str
    make_step: Callable[..., Any]
    config: type
    grouped: bool


ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")
POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss")


def register_advantage(name: str, *, per_turn: bool = False,
                       summarise: Callable[[Sequence[Credits]], dict[str, float]] | None = None,
                       ) -> Callable[[Callable], Callable]:
    """Decorator: registers `fn(batch: CreditBatch, loss_config) -> Credits` as estimator `name`,
    with its optional metrics `summarise` (`AdvantageEstimator`)."""
    def register(fn: Callable) -> Callable:
        ADVANTAGE_ESTIMATORS.add(name, AdvantageEstimator(name, fn, per_turn, summarise))
        return fn
    return register


def register_policy_loss(name: str, *, config: type, grouped: bool) -> Callable[[Callable], Callable]:
    """Decorator: registers a step builder as update rule `name` with its loss `config` class."""
    def register(make_step: Callable) -> Callable:
        POLICY_LOSSES.add(name, PolicyLoss(name, make_step, config, grouped))
        return make_step
    return register

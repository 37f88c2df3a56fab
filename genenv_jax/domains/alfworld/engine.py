"""TextWorld's PDDL engine with ALFWorld's name wrapper: load a game, play commands, read `won`.

`verify` is the generation-time check every game passes before it becomes a task: the engine loads
it, the task is not already won, and the stored walkthrough reaches `won` on its last command and
not before, within the step cap and the time cap.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Mapping

import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
from textworld.envs.pddl import PddlEnv
from textworld.logic import Proposition

VERIFY_REASONS = ("engine_error", "already_won", "unsolvable", "too_long", "expert_timeout")

Fact = tuple[str, ...]  # ('inreceptacle', 'mug 1', 'countertop 1'): predicate, then the demangled names


def fact_tuple(fact: Proposition) -> Fact:
    """An engine fact with the names the text prints: the predicate (lower case, as the PDDL
    translator writes it) and its arguments as AlfredDemangler names them ('mug 1', 'loc 3')."""
    return (fact.name.lower(), *(arg.name.strip().lower() for arg in fact.arguments))


class Game:
    """One running game: `reset()` -> first observation; `step(command)` -> (feedback, won).

    `want_facts=True` also keeps `facts`, the PDDL facts of the current state as `fact_tuple`s
    (off by default: the other callers need only `won` and the admissible commands)."""

    def __init__(self, game: Mapping[str, Any] | str, want_walkthrough: bool = False, want_facts: bool = False):
        extras = ["walkthrough"] if want_walkthrough else []
        infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=want_facts, extras=extras)
        self.env = AlfredDemangler(PddlEnv(infos))
        self.env.load(dict(game) if isinstance(game, Mapping) else game)
        self.want_facts = want_facts
        self.won = False
        self.admissible: list[str] = []
        self.facts: frozenset[Fact] = frozenset()
        self.walkthrough: list[str] | None = None

    def reset(self) -> str:
        state = self.env.reset()
        self._read(state)
        self.walkthrough = state.get("extra.walkthrough")
        return state.feedback

    def step(self, command: str) -> str:
        state, _, _ = self.env.step(command)
        self._read(state)
        return state.feedback

    def _read(self, state) -> None:
        self.won, self.admissible = bool(state["won"]), list(state["admissible_commands"])
        if self.want_facts:
            self.facts = frozenset(map(fact_tuple, state["facts"]))

    def close(self) -> None:
        self.env.close()


@dataclasses.dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""         # one of VERIFY_REASONS when not ok
    detail: str = ""
    intro: str = ""          # the game's first observation (the agent's first prompt)
    seconds: float = 0.0


def verify(game: Mapping[str, Any], max_steps: int = 50, time_limit_s: float = 120.0) -> Verdict:
    """Replays `game['walkthrough']` on the engine (see the module docstring)."""
    start = time.monotonic()
    commands = list(game.get("walkthrough") or [])
    if len(commands) > max_steps:
        return Verdict(False, "too_long", f"walkthrough has {len(commands)} steps; the cap is {max_steps}")
    try:
        engine = Game(game)
        intro = engine.reset()
    except Exception as e:  # noqa: BLE001 - the engine refusing a problem is a verdict, not a crash
        return Verdict(False, "engine_error", f"{type(e).__name__}: {e}"[:300], seconds=time.monotonic() - start)
    if engine.won:
        return Verdict(False, "already_won", "the goal holds before any move", intro)
    if not commands:
        return Verdict(False, "unsolvable", "the expert found no walkthrough", intro)
    for i, command in enumerate(commands):
        if command not in engine.admissible:
            return Verdict(False, "unsolvable", f"step {i + 1} {command!r} is not admissible", intro)
        engine.step(command)
        if time.monotonic() - start > time_limit_s:
            return Verdict(False, "expert_timeout", f"over {time_limit_s:.0f} s at step {i + 1}", intro)
        if engine.won != (i == len(commands) - 1):
            return Verdict(False, "unsolvable", f"won={engine.won} after step {i + 1} of {len(commands)}", intro)
    return Verdict(True, intro=intro, seconds=time.monotonic() - start)


def planner_walkthrough(game: Mapping[str, Any]) -> list[str]:
    """Fast Downward's plan for a game (its stored walkthrough ignored): an independent expert, slow
    on large scenes (up to minutes for a pick-two in a big kitchen), used to cross-check ours."""
    engine = Game({k: v for k, v in game.items() if k != "walkthrough"}, want_walkthrough=True)
    engine.reset()
    return list(engine.walkthrough or [])

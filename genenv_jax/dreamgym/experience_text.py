"""The experience model's text interface: the prompt it reads (task, history, retrieved real
transitions, the current state and the agent's action), the reply it is trained to write
(reasoning, next state, reward) and the parser that reads that reply back.

Reply format, one field per block so a tiny model can learn it and a parser can check it:

    Reasoning: <why the action leads where it does>     (absent when reasoning is ablated)
    Next state: <the environment's text after the action>
    Reward: <0 or 1>

The loss covers the whole reply: the paper trains on the reasoning and the next state; the one-line
reward is part of the state the environment reports here (it is what ends an episode), so it is
learned with them.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

from genenv_jax.domains.base import ChatPrompt
from genenv_jax.domains.experience import Transition

GAME = "a text game that an agent plays"


def system_text(environment: str = GAME, reasoning: bool = True) -> str:
    """The experience model's instructions for standing in for `environment`."""
    head = (f"You are the environment of {environment}. Given the agent's task, the episode so far, similar real "
            "transitions, the current state and the agent's action, ")
    if reasoning:
        return head + ("predict what the environment does: first reason about the action's effect, then write the "
                       "next state exactly as the environment would print it, then the reward (1 only when this "
                       "action completes the task, else 0).")
    return head + ("write the next state exactly as the environment would print it, then the reward (1 only when "
                   "this action completes the task, else 0).")


SYSTEM = system_text(GAME, True)
SYSTEM_NO_REASONING = system_text(GAME, False)

_REPLY = re.compile(r"^(?:Reasoning:[ \t]*(?P<reasoning>.*?)\n)?Next state:[ \t]*(?P<state>.*?)\nReward:[ \t]*"
                    r"(?P<reward>[01])\s*$", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class PromptSettings:
    """What the prompt shows: `max_history` latest steps, the demos, whether a reasoning is asked for."""

    max_history: int = 4
    reasoning: bool = True
    max_state_chars: int = 600   # a very long state (a room's full description) is cut from its middle
    max_demo_state_chars: int = 240  # a demo's (and a history step's) state: shorter, context only
    environment: str = GAME          # what the model stands in for (the domain's description)


@dataclasses.dataclass(frozen=True)
class Prediction:
    """A parsed reply; `ok` False when the reply does not follow the format (a failure state)."""

    ok: bool
    next_state: str = ""
    reward: float = 0.0
    reasoning: str = ""
    error: str = ""


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    half = (limit - 5) // 2
    return f"{text[:half]} ... {text[len(text) - half:]}"


def _demo_block(i: int, demo: Transition, s: PromptSettings) -> str:
    return (f"Example {i}:\nState: {_clip(demo.state, s.max_demo_state_chars)}\nAction: {demo.action or '(none)'}\n"
            f"Next state: {_clip(demo.next_state, s.max_state_chars)}\nReward: {int(demo.reward >= 0.5)}")


def prompt(task: str, history: Sequence[Sequence[str]], state: str, action: str, demos: Sequence[Transition],
           settings: PromptSettings = PromptSettings()) -> ChatPrompt:
    """The experience model's chat prompt for one step (see the module docstring)."""
    s = settings
    parts = [f"Task: {task.strip()}"]
    if demos:
        parts.append("Similar real transitions:\n" + "\n\n".join(_demo_block(i + 1, d, s) for i, d in enumerate(demos)))
    shown = list(history)[-s.max_history:] if s.max_history > 0 else []
    if shown:
        skipped = len(history) - len(shown)
        lines = [f"({skipped} earlier steps not shown)"] if skipped else []
        lines += [f"State: {_clip(st, s.max_demo_state_chars)}\nAction: {a or '(none)'}" for st, a in shown]
        parts.append("Episode so far:\n" + "\n".join(lines))
    parts.append(f"Current state: {_clip(state, s.max_state_chars)}\nAction: {action or '(none)'}")
    return ChatPrompt(messages=[{"role": "system", "content": system_text(s.environment, s.reasoning)},
                                {"role": "user", "content": "\n\n".join(parts)}])


def transition_prompt(t: Transition, demos: Sequence[Transition], settings: PromptSettings = PromptSettings()
                      ) -> ChatPrompt:
    return prompt(t.task, t.history, t.state, t.action, demos, settings)


def target(t: Transition, settings: PromptSettings = PromptSettings()) -> str:
    """The reply the experience model is trained to write for `t`."""
    head = f"Reasoning: {' '.join(t.reasoning.split())}\n" if settings.reasoning else ""
    return f"{head}Next state: {t.next_state.strip()}\nReward: {int(t.reward >= 0.5)}"


def parse(reply: str) -> Prediction:
    """Reads a reply written in the target format; anything else is a failure (`ok` False)."""
    match = _REPLY.match(reply.strip())
    if match is None:
        return Prediction(ok=False, error="unparseable")
    next_state = match.group("state").strip()
    if not next_state:
        return Prediction(ok=False, error="empty_state")
    return Prediction(ok=True, next_state=next_state, reward=float(match.group("reward")),
                      reasoning=(match.group("reasoning") or "").strip())

"""One ALFWorld episode: the agent's text in, one command parsed out, the engine's text back.

The agent may think before acting (ReAct style); its command is the last line starting with
"Action:" (or ">"), or the whole reply when it is a single line. A reply with no command changes
nothing ("Nothing happens.", as the engine answers an unknown command) and still costs a step. The
episode ends when the engine reports `won` or after `max_steps` steps; R_agent is `won`.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from genenv_jax.domains.base import ChatPrompt, Environment, Message, ScoreResult, StepOutcome, Task
from genenv_jax.domains.alfworld.engine import Game

SYSTEM = (
    "You are an agent in a household (ALFWorld, a text game). Each turn you see what happened and the "
    "commands you can use now. You may think first; then end your reply with exactly one line "
    "`Action: <command>`, using one of the listed commands. Solve the task in as few steps as you can.")
NOTHING = "Nothing happens."
ADMISSIBLE_MODES = ("every_turn", "first_turn", "never")
COMMANDS_SUFFIX = "\nAvailable commands: "  # what observation_text appends before the command list
_ACTION = re.compile(r"^\s*(?:action\s*:|>)\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def parse_action(text: str) -> str | None:
    """The command in an agent reply (see the module docstring), lower-case, or None."""
    found = _ACTION.findall(text)
    if found:
        command = found[-1]
    else:
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        if len(lines) != 1:
            return None
        command = lines[0]
    command = command.strip().strip("`").strip().rstrip(".").strip().lower()
    return " ".join(command.split()) or None


def observation_text(feedback: str, admissible: Sequence[str], show: bool) -> str:
    text = feedback.strip()
    if show:
        text += COMMANDS_SUFFIX + ", ".join(c for c in admissible if c != "help")
    return text


class ALFWorldEnvironment(Environment):
    """An episode of one game (a game.tw-pddl JSON) on the real engine; never raises on agent text."""

    def __init__(self, task: Task, game: Mapping[str, Any], max_steps: int = 50, admissible: str = "every_turn"):
        if admissible not in ADMISSIBLE_MODES:
            raise ValueError(f"admissible={admissible!r}; expected one of {ADMISSIBLE_MODES}")
        self.task, self.game_json, self.max_steps, self.admissible = task, game, max_steps, admissible
        self.game: Game | None = None
        self.steps = self.no_action = self.inadmissible = 0

    def reset(self) -> ChatPrompt:
        self.game = Game(self.game_json)
        intro = self.game.reset()
        text = observation_text(intro, self.game.admissible, self.admissible != "never")
        return ChatPrompt(messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}])

    def step(self, agent_text: str) -> StepOutcome:
        if self.game is None:
            raise RuntimeError("step() before reset()")
        if self.game.won or self.steps >= self.max_steps:
            return StepOutcome(observation=[], done=True, info={"errors": {"step_after_done": 1}})
        self.steps += 1
        command = parse_action(agent_text)
        errors: dict[str, int] = {}
        if command is None:
            self.no_action += 1
            errors["no_action"] = 1
            feedback = NOTHING
        else:
            if command not in self.game.admissible:
                self.inadmissible += 1
                errors["inadmissible"] = 1
            feedback = self.game.step(command)
        info = {"errors": errors, "command": command, "won": self.game.won}
        if self.game.won or self.steps >= self.max_steps:
            return StepOutcome(observation=[], done=True, info=info)
        text = observation_text(feedback, self.game.admissible, self.admissible == "every_turn")
        return StepOutcome(observation=[{"role": "user", "content": text}], done=False, info=info)

    def score(self, transcript: Sequence[Message]) -> ScoreResult:
        """1.0 when the engine reported `won` (replays the transcript's actions when this environment
        has not played them, e.g. scoring a stored rollout)."""
        if self.game is None:
            self.reset()
            for message in transcript:
                if message.get("role") == "assistant" and not self.game.won and self.steps < self.max_steps:
                    self.step(str(message.get("content", "")))
        won = bool(self.game.won)
        return ScoreResult(float(won), {"won": won, "steps": self.steps, "task_type": self.task.category,
                                        "no_action": self.no_action, "inadmissible": self.inadmissible})

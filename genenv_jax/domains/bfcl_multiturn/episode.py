"""A BFCL multi-turn episode: user turns one at a time, tool calls executed on the episode's own
backends, the official verdict at the end.

Within a user turn the agent may make several steps of tool calls; each step's results come back
as "tool" messages. A reply with no `<tool_call>` block ends the turn and the environment sends
the next user turn (a miss_func turn that reveals held-out functions sends their docs with BFCL's
"I have updated some more functions..." message instead). After the last turn the episode is done;
after more than BFCL's MAXIMUM_STEP_LIMIT steps in one turn it is force-quit, as BFCL does, which
fails it unless that was the last turn.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from typing import Any, Sequence

from bfcl_eval.constants.default_prompts import (
    DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING, MAXIMUM_STEP_LIMIT)

from genenv_jax.domains.base import ChatPrompt, Environment, Message, ScoreResult, StepOutcome, Task
from genenv_jax.domains.bfcl_multiturn.checker import Call, check_episode
from genenv_jax.domains.bfcl_multiturn.dispatch import CallOutcome
from genenv_jax.domains.bfcl_multiturn.scenario import Scenario
from genenv_jax.text.tokenization import ParseResult, ToolCallError, parse_tool_calls

# BFCL appends this to every Python function description in its prompts (bfcl_eval.utils); the
# docs revealed at a miss_func turn go out without it, as in BFCL.
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."


def hinted(docs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Function docs with BFCL's Python hint appended to each description (copies)."""
    out = json.loads(json.dumps(list(docs)))
    for d in out:
        d["description"] = d.get("description", "") + PYTHON_HINT
    return out


def reveal_message(docs: Sequence[dict[str, Any]]) -> Message:
    """BFCL's user message of a turn that adds held-out functions (docs as JSON)."""
    content = DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(functions=json.dumps(list(docs)))
    return {"role": "user", "content": content}


def _blocks_in_order(parsed: ParseResult) -> list[Any]:
    """The response's tool-call blocks in text order: ToolCall or ToolCallError."""
    errors = {e.index: e for e in parsed.errors}
    calls = iter(parsed.calls)
    total = len(parsed.calls) + len(parsed.errors)
    return [errors[i] if i in errors else next(calls) for i in range(total)]


def user_turn(scenario: Scenario, turn: int) -> list[Message]:
    """The messages that open `turn` (BFCL's reveal message at a turn that adds functions)."""
    if turn in scenario.revealed:
        return [reveal_message(scenario.revealed_docs(turn))]
    return scenario.user_messages(turn)


@dataclasses.dataclass
class TurnTracker:
    """Where an episode stands given the agent's texts so far: the calls of each turn's steps."""

    n_turns: int
    turns: list[list[list[Call]]] = dataclasses.field(default_factory=lambda: [[]])
    steps_in_turn: int = 0
    done: bool = False
    force_quit: bool = False

    @property
    def turn(self) -> int:
        return len(self.turns) - 1

    def add(self, parsed: ParseResult) -> bool:
        """Records one agent text; returns True when it ended the user turn (no tool-call block)."""
        if self.done:
            raise ValueError("the episode is over")
        if not parsed.attempted_call:
            if self.turn + 1 == self.n_turns:
                self.done = True
            else:
                self.turns.append([])
                self.steps_in_turn = 0
            return True
        self.turns[-1].append([c.to_json() for c in parsed.calls])
        self.steps_in_turn += 1
        if self.steps_in_turn > MAXIMUM_STEP_LIMIT:
            self.done = self.force_quit = True
        return False


def model_turns(transcript: Sequence[Message], n_turns: int) -> tuple[list[list[list[Call]]], bool]:
    """(calls per turn and step, force_quit) read from a transcript's assistant messages.

    Only assistant messages matter: the episode is a function of the agent's texts.
    """
    tracker = TurnTracker(n_turns)
    for message in transcript:
        if message.get("role") == "assistant" and not tracker.done:
            tracker.add(parse_tool_calls(str(message.get("content", ""))))
    return tracker.turns, tracker.force_quit


def score_turns(scenario: Scenario, turns: Sequence[Sequence[Sequence[Call]]], force_quit: bool = False) -> ScoreResult:
    """1.0 / 0.0 from the official comparison of the turns' calls against the ground truth."""
    verdict = check_episode(scenario, turns)
    details = verdict.to_details()
    details.update({"turns": len(turns), "steps": sum(len(t) for t in turns),
                    "calls": sum(len(s) for t in turns for s in t), "force_quit": force_quit})
    return ScoreResult(float(verdict.valid), details)


class MultiTurnEnvironment(Environment):
    """One episode of a BFCL multi-turn task (see the module docstring); never raises on agent text."""

    def __init__(self, task: Task):
        self.task = task
        self.scenario = Scenario.of(task)
        self.dispatcher = self.scenario.execution()
        self.tracker = TurnTracker(self.scenario.n_turns)

    def reset(self) -> ChatPrompt:
        """The first user turn with the initially shown function docs as tools."""
        return ChatPrompt(messages=user_turn(self.scenario, 0), tools=hinted(self.scenario.initial_docs()) or None)

    def step(self, agent_text: str) -> StepOutcome:
        """Tool results for a reply with calls; the next user turn (or done) for a reply without."""
        if self.tracker.done:
            return StepOutcome(observation=[], done=True, info={"errors": {"step_after_done": 1}})
        parsed = parse_tool_calls(agent_text)
        outcomes = self._execute(parsed) if parsed.attempted_call else []
        turn_of_text = self.tracker.turn
        ended_turn = self.tracker.add(parsed)
        errors = collections.Counter(o.error for o in outcomes if o.error)
        info: dict[str, Any] = {"errors": dict(errors), "turn": turn_of_text,
                                "calls": sum(o.error != "malformed_call" for o in outcomes)}
        if self.tracker.done:
            info["force_quit"] = self.tracker.force_quit
            return StepOutcome(observation=[], done=True, info=info)
        if ended_turn:
            turn = self.tracker.turn
            if turn in self.scenario.revealed:
                info["new_tools"] = self.scenario.revealed_docs(turn)
            return StepOutcome(observation=user_turn(self.scenario, turn), done=False, info=info)
        return StepOutcome(observation=[{"role": "tool", "content": o.observation} for o in outcomes],
                           done=False, info=info)

    def _execute(self, parsed: ParseResult) -> list[CallOutcome]:
        outcomes = []
        for block in _blocks_in_order(parsed):
            if isinstance(block, ToolCallError):
                text = json.dumps({"error": f"malformed tool call ({block.reason}): {block.detail}"[:500]})
                outcomes.append(CallOutcome(name="", result=text, observation=text, error="malformed_call"))
            else:
                outcomes.append(self.dispatcher.call(block.name, block.arguments))
        return outcomes

    def score(self, transcript: Sequence[Message]) -> ScoreResult:
        """The official verdict on the transcript's agent turns, re-executed on fresh backends."""
        turns, force_quit = model_turns(transcript, self.scenario.n_turns)
        return score_turns(self.scenario, turns, force_quit)

"""BFCL multi-turn's side of DreamGym's synthetic episodes. The experience model predicts only what
the backends would answer: the results of the agent's calls (one line per call) and, when the
agent ends the last user turn, the episode's outcome. The user turns come from the task itself,
as in a real episode (`episode.MultiTurnEnvironment`); so do the first prompt and its tools.

A reply with a malformed `<tool_call>` block is an invalid action (a failure state, reward 0); so
is going past BFCL's step limit within a turn (a real episode is force-quit there). A prediction
with not one result line per call cannot be shown as tool results: a failure state too.
"""

from __future__ import annotations

import dataclasses

from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT

from genenv_jax.domains.base import ChatPrompt, Domain, Message, Task
from genenv_jax.domains.experience import DomainSupport, Move, OfflineSettings
from genenv_jax.domains.bfcl_multiturn.episode import TurnTracker, user_turn
from genenv_jax.domains.bfcl_multiturn import transitions
from genenv_jax.domains.bfcl_multiturn.experience_text import (END_TURN, ENVIRONMENT, action_text, result_lines,
                                                               task_text, user_state)
from genenv_jax.domains.bfcl_multiturn.scenario import Scenario
from genenv_jax.text.tokenization import parse_tool_calls


@dataclasses.dataclass
class BFCLSyntheticEpisode:
    """A `domains.experience.SyntheticEpisode` for one multi-turn task (see the module docstring)."""

    first: ChatPrompt
    state: str
    task_text: str
    max_steps: int
    scenario: Scenario
    tracker: TurnTracker
    calls: int = 0                      # calls of the step being predicted

    def move(self, agent_text: str) -> Move:
        parsed = parse_tool_calls(agent_text)
        if parsed.errors:
            return Move(action=None, failure="invalid_action")
        self.tracker.add(parsed)
        if parsed.attempted_call:
            if self.tracker.force_quit:
                return Move(action=None, failure="step_limit")
            self.calls = len(parsed.calls)
            return Move(action=action_text([c.to_json() for c in parsed.calls]), rewarded=False)
        if self.tracker.done:
            return Move(action=END_TURN, final=True)
        turn = self.tracker.turn
        return Move(action=END_TURN, scripted=(user_state(self.scenario, turn), user_turn(self.scenario, turn)))

    def observation(self, next_state: str) -> list[Message] | None:
        lines = result_lines(next_state)
        if len(lines) != self.calls:
            return None
        return [{"role": "tool", "content": line} for line in lines]


class BFCLMultiTurnSynthetic:
    """A `domains.experience.SyntheticAdapter` for BFCL multi-turn tasks."""

    def __init__(self, domain: Domain):
        self.domain = domain

    def start(self, task: Task) -> BFCLSyntheticEpisode:
        scenario = Scenario.of(task)
        first = self.domain.agent_prompt(task)
        # every turn may take BFCL's step limit, plus the reply that ends it
        return BFCLSyntheticEpisode(first=first, state=user_state(scenario, 0), task_text=task_text(scenario),
                                    max_steps=scenario.n_turns * (MAXIMUM_STEP_LIMIT + 1), scenario=scenario,
                                    tracker=TurnTracker(scenario.n_turns))


def dreamgym_support() -> DomainSupport:
    """BFCL multi-turn's DreamGym pieces (`BFCLMultiTurnDomain.dreamgym`)."""
    def offline(domain, tasks, s: OfflineSettings):
        return transitions.collect(domain, tasks, random_per_task=s.random_per_task, rng=s.rng(),
                                   max_replies=s.random_steps, perturb_prob=s.invalid_prob)

    def episode(domain, task, transcript):
        return transitions.episode_transitions(task, transcript, source="agent")

    return DomainSupport(adapter=BFCLMultiTurnSynthetic, offline=offline, episode=episode, environment=ENVIRONMENT)

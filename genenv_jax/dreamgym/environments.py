"""Synthetic environments: the experience model answers the agent's steps in place of the real
environment, behind the interface the episode runner already uses (`call` with reset / step /
score / close requests), so synthetic rollouts are batched exactly like real ones.

Per DreamGym: the episode starts from the task's real initial state; each agent action goes to
the experience model with the episode's history and retrieved real transitions, and its predicted
next state is the agent's next observation. An action the domain cannot read, or a reply of the
experience model that does not parse (or that the domain cannot show), is a failure state: the
episode ends with reward 0. The reward is outcome-only: 1 when the model predicts the task
complete on a step whose reward counts (which ends the episode). A domain may also answer a step
itself (`Move.scripted`: BFCL's next user turn comes from the task, not from the model). Every
predicted step is kept as a synthetic transition for the replay buffer.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from genenv_jax.domains.base import ScoreResult, StepOutcome, Task
from genenv_jax.domains.requests import Close, Request, Reset, Score, Step, own_copy
from genenv_jax.dreamgym.predictor import Predictor, Query
from genenv_jax.domains.experience import Move, SyntheticAdapter, SyntheticEpisode, Transition


@dataclasses.dataclass
class _Episode:
    task: Task
    domain: SyntheticEpisode
    state: str
    history: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    steps: int = 0
    reward: float = 0.0
    failure: str = ""
    done: bool = False


class SyntheticEnvironments:
    """Episodes answered by `predictor` (see the module docstring). `seed(value)` sets the sampling
    seed stream (the loop sets it per epoch, so a resumed epoch samples as the original did)."""

    def __init__(self, adapter: SyntheticAdapter, predictor: Predictor, domain_name: str = ""):
        self.adapter, self.predictor, self.domain_name = adapter, predictor, domain_name
        self._episodes: dict[int, _Episode] = {}
        self._seed, self._calls = 0, 0
        self.transitions: list[Transition] = []   # synthetic steps since the last `take_transitions`
        self.counts: dict[str, int] = {}

    def seed(self, value: int) -> None:
        self._seed, self._calls = int(value), 0

    def take_transitions(self) -> list[Transition]:
        out, self.transitions = self.transitions, []
        return out

    def call(self, requests: Sequence[Request]) -> list[Any]:
        answers: list[Any] = [None] * len(requests)
        steps = []
        for i, request in enumerate(requests):
            match request:
                case Reset(episode, task):
                    task = own_copy(task)
                    domain_episode = self.adapter.start(task)
                    self._episodes[episode] = _Episode(task, domain_episode, domain_episode.state)
                    answers[i] = domain_episode.first
                case Step():
                    steps.append(i)
                case Score(episode):
                    answers[i] = self._score(self._episodes[episode])
                case Close(episode):
                    self._episodes.pop(episode, None)
                case _:
                    raise TypeError(f"not an environment request: {request!r}")
        if steps:
            outcomes = self._step([(requests[i].episode, requests[i].text) for i in steps])
            for i, outcome in zip(steps, outcomes):
                answers[i] = outcome
        return answers

    def close(self) -> None:
        self._episodes.clear()

    # ------------------------------------------------------------------ steps
    def _step(self, requests: Sequence[tuple[int, str]]) -> list[StepOutcome]:
        outcomes: list[StepOutcome | None] = [None] * len(requests)
        asked: list[tuple[int, _Episode, Move]] = []
        for i, (episode, agent_text) in enumerate(requests):
            ep = self._episodes[episode]
            if ep.done:
                outcomes[i] = StepOutcome(observation=[], done=True, info={"errors": {"step_after_done": 1}})
                continue
            move = ep.domain.move(agent_text)
            if move.action is None:
                outcomes[i] = self._fail(ep, move.failure, None)
            elif move.scripted is not None:
                outcomes[i] = self._scripted(ep, move)
            else:
                asked.append((i, ep, move))
        queries = [Query(ep.domain.task_text, tuple(ep.history), ep.state, move.action) for _, ep, move in asked]
        predictions, counts = self.predictor.predict(queries, self._seed * 1_000_003 + self._calls)
        self._calls += 1
        for key, value in counts.items():
            self.counts[key] = self.counts.get(key, 0) + value
        for (i, ep, move), prediction in zip(asked, predictions):
            outcomes[i] = self._predicted(ep, move, prediction)
        return outcomes

    def _scripted(self, ep: _Episode, move: Move) -> StepOutcome:
        """The domain's own answer: no prediction, no transition; the episode goes on."""
        next_state, messages = move.scripted
        self._advance(ep, move.action, next_state)
        info = {"errors": {}, "command": move.action, "won": False}
        if ep.steps >= ep.domain.max_steps:
            ep.done = True
            return StepOutcome(observation=[], done=True, info=info)
        return StepOutcome(observation=messages, done=False, info=info)

    def _predicted(self, ep: _Episode, move: Move, prediction) -> StepOutcome:
        if not prediction.ok:
            return self._fail(ep, f"experience_{prediction.error}", move.action)
        reward = prediction.reward if move.rewarded else 0.0
        ends = move.final or reward >= 0.5 or ep.steps + 1 >= ep.domain.max_steps
        messages = [] if ends else ep.domain.observation(prediction.next_state)
        if messages is None:
            self.counts["experience/unusable_state"] = self.counts.get("experience/unusable_state", 0) + 1
            return self._fail(ep, "experience_unusable_state", move.action)
        self.transitions.append(Transition(
            domain=self.domain_name, task_id=ep.task.task_id, task=ep.domain.task_text,
            history=[list(pair) for pair in ep.history], state=ep.state, action=move.action,
            next_state=prediction.next_state, reward=reward, done=ends, valid=True,
            reasoning=prediction.reasoning, source="synthetic", step=ep.steps))
        self._advance(ep, move.action, prediction.next_state)
        info = {"errors": {}, "command": move.action, "won": reward >= 0.5}
        if ends:
            ep.reward, ep.done = reward, True
            return StepOutcome(observation=[], done=True, info=info)
        return StepOutcome(observation=messages, done=False, info=info)

    @staticmethod
    def _advance(ep: _Episode, action: str, next_state: str) -> None:
        ep.history.append((ep.state, action))
        ep.state, ep.steps = next_state, ep.steps + 1

    @staticmethod
    def _fail(ep: _Episode, reason: str, action: str | None) -> StepOutcome:
        """A failure state: the episode ends with reward 0 (the reason is counted by the runner)."""
        ep.done, ep.reward, ep.failure = True, 0.0, reason
        ep.steps += 1
        return StepOutcome(observation=[], done=True, info={"errors": {reason: 1}, "command": action, "won": False})

    @staticmethod
    def _score(ep: _Episode) -> ScoreResult:
        won = ep.reward >= 0.5
        return ScoreResult(float(won), {"won": won, "steps": ep.steps, "task_type": ep.task.category,
                                        "synthetic": True, "failure": ep.failure})

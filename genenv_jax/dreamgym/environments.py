"""Synthetic environments: the experience model answers the agent's steps in place of the real
environment, behind the interface the episode runner already uses (`call` with reset / step /
score / close requests), so synthetic rollouts are batched exactly like real ones.

Per DreamGym: the episode starts from the task's real initial state; each agent action goes to
the experience model with the episode's history and retrieved real transitions, and its predicted
next state is the agent's next observation. An action the domain cannot read, or a reply of the
experience model that does not parse, is a failure state: the episode ends with reward 0. The
reward is outcome-only: 1 when the model predicts the task complete (which ends the episode).
Every predicted step is kept as a synthetic transition for the replay buffer.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Sequence

from genenv_jax.domains.base import ChatPrompt, Message, ScoreResult, StepOutcome, Task
from genenv_jax.dreamgym.predictor import Predictor, Query
from genenv_jax.dreamgym.transitions import Transition


class SyntheticAdapter(Protocol):
    """What a domain supplies for synthetic episodes."""

    max_steps: int

    def start(self, task: Task) -> tuple[ChatPrompt, str, str]:
        """(the agent's first prompt, the first state as the experience model sees it, the task text)."""

    def action(self, agent_text: str) -> str | None:
        """The command in an agent reply, or None when there is none (a failure state)."""

    def observation(self, next_state: str) -> list[Message]:
        """The messages the agent is shown for a predicted state."""


@dataclasses.dataclass
class _Episode:
    task: Task
    task_text: str
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

    def call(self, requests: Sequence[tuple[str, int, Any]]) -> list[Any]:
        answers: list[Any] = [None] * len(requests)
        steps = []
        for i, (op, episode, payload) in enumerate(requests):
            if op == "reset":
                task = Task.from_json(payload)
                first, state, task_text = self.adapter.start(task)
                self._episodes[episode] = _Episode(task, task_text, state)
                answers[i] = first
            elif op == "step":
                steps.append(i)
            elif op == "score":
                answers[i] = self._score(self._episodes[episode])
            elif op == "close":
                self._episodes.pop(episode, None)
            else:
                raise ValueError(f"unknown environment request {op!r}")
        if steps:
            outcomes = self._step([(requests[i][1], requests[i][2]) for i in steps])
            for i, outcome in zip(steps, outcomes):
                answers[i] = outcome
        return answers

    def close(self) -> None:
        self._episodes.clear()

    # ------------------------------------------------------------------ steps
    def _step(self, requests: Sequence[tuple[int, str]]) -> list[StepOutcome]:
        outcomes: list[StepOutcome | None] = [None] * len(requests)
        asked: list[tuple[int, _Episode, str]] = []
        for i, (episode, agent_text) in enumerate(requests):
            ep = self._episodes[episode]
            if ep.done:
                outcomes[i] = StepOutcome(observation=[], done=True, info={"errors": {"step_after_done": 1}})
                continue
            action = self.adapter.action(agent_text)
            if action is None:
                outcomes[i] = self._fail(ep, "invalid_action", None)
            else:
                asked.append((i, ep, action))
        queries = [Query(ep.task_text, tuple(ep.history), ep.state, action) for _, ep, action in asked]
        predictions, counts = self.predictor.predict(queries, self._seed * 1_000_003 + self._calls)
        self._calls += 1
        for key, value in counts.items():
            self.counts[key] = self.counts.get(key, 0) + value
        for (i, ep, action), prediction in zip(asked, predictions):
            if not prediction.ok:
                outcomes[i] = self._fail(ep, f"experience_{prediction.error}", action)
                continue
            self.transitions.append(Transition(
                domain=self.domain_name, task_id=ep.task.task_id, task=ep.task_text,
                history=[list(pair) for pair in ep.history], state=ep.state, action=action,
                next_state=prediction.next_state, reward=prediction.reward, done=prediction.reward >= 0.5,
                valid=True, reasoning=prediction.reasoning, source="synthetic", step=ep.steps))
            ep.history.append((ep.state, action))
            ep.state, ep.steps = prediction.next_state, ep.steps + 1
            info = {"errors": {}, "command": action, "won": prediction.reward >= 0.5}
            if prediction.reward >= 0.5 or ep.steps >= self.adapter.max_steps:
                ep.reward, ep.done = prediction.reward, True
                outcomes[i] = StepOutcome(observation=[], done=True, info=info)
            else:
                outcomes[i] = StepOutcome(observation=self.adapter.observation(prediction.next_state), done=False,
                                          info=info)
        return outcomes

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

"""Real ALFWorld transitions for DreamGym's experience model, played on the real engine.

A state is the engine's own text (the intro at reset, then each step's feedback) without the
"Available commands: ..." list the agent is shown (`episode.observation_text`); each state's
admissible commands are kept in `metadata["admissible"]`. Each step's reasoning comes from the
engine's facts (`reasoning.step_reasoning`).

Collectors: `expert_transitions` (the walkthrough), `random_transitions` (random admissible commands
mixed with inadmissible ones), `episode_transitions` (an agent transcript replayed) and `collect`.
"""

from __future__ import annotations

import random
import re
from typing import Any, Callable, Mapping, Protocol, Sequence

from genenv_jax.domains.alfworld.engine import Game
from genenv_jax.domains.alfworld.episode import NOTHING, parse_action
from genenv_jax.domains.alfworld.reasoning import inadmissible_command, step_reasoning
from genenv_jax.domains.base import ChatPrompt, Message, Task
from genenv_jax.domains.experience import Transition

_TASK_LINE = re.compile(r"Your task is to:\s*(.+?)\.?\s*$", re.MULTILINE)




class ALFWorldGames(Protocol):
    """What the collectors use of `ALFWorldDomain` (structural, so this module does not import it)."""

    name: str
    max_steps: int

    def game_json(self, task: Task) -> Any: ...

    def reference_turns(self, task: Task) -> list[str]: ...

    def agent_prompt(self, task: Task) -> ChatPrompt: ...


# ------------------------------------------------------------------------ playing episodes
Chooser = Callable[[int, Game], "str | None"]  # step t, the game -> the command ("" unparseable), None: stop


def _open(domain: ALFWorldGames, task: Task) -> Game:
    if task.domain != domain.name:
        raise ValueError(f"task {task.task_id} is a {task.domain!r} task, not an ALFWorld one")
    return Game(domain.game_json(task), want_facts=True)


def _play(task: Task, game: Game, choose: Chooser, source: str, max_steps: int,
          observed: Callable[[int, str], None] | None = None) -> list[Transition]:
    """One episode from reset: commands from `choose` until it stops, the engine reports `won`, or
    `max_steps`. An empty command (an unparseable reply) leaves the engine alone and reads as
    "Nothing happens.", as `ALFWorldEnvironment` does. `observed(t, next_state)` sees each answer."""
    if max_steps < 1:
        raise ValueError(f"max_steps={max_steps}: an episode needs at least one step")
    state = game.reset().strip()
    instruction = task.prompt.get("task") or _task_line(state)
    history: list[list[str]] = []
    out: list[Transition] = []
    for t in range(max_steps):
        action = choose(t, game)
        if action is None:
            break
        before, admissible = game.facts, list(game.admissible)
        next_state = game.step(action).strip() if action else NOTHING
        if observed is not None:
            observed(t, next_state)
        done = game.won or t == max_steps - 1
        out.append(Transition(
            domain=task.domain, task_id=task.task_id, task=instruction, history=[list(p) for p in history],
            state=state, action=action, next_state=next_state, reward=1.0 if game.won else 0.0, done=done,
            valid=action in admissible, source=source, step=t,
            reasoning=step_reasoning(before, game.facts, action, admissible, next_state, game.won, instruction),
            metadata={"admissible": admissible, "task_type": task.category}))
        if done:
            break
        history.append([state, action])
        state = next_state
    return out


def _task_line(intro: str) -> str:
    match = _TASK_LINE.search(intro)
    return match.group(1) if match else ""


def _expert(domain: ALFWorldGames, task: Task, game: Game) -> list[Transition]:
    commands = [parse_action(turn) or "" for turn in domain.reference_turns(task)]
    if not commands:
        raise ValueError(f"task {task.task_id} has no walkthrough")
    out = _play(task, game, lambda t, _: commands[t] if t < len(commands) else None, "expert",
                max(domain.max_steps, len(commands)))
    if not out[-1].reward or len(out) != len(commands):
        raise ValueError(f"task {task.task_id}: its walkthrough reaches won={bool(out[-1].reward)} after "
                         f"{len(out)} of {len(commands)} commands")
    return out


def expert_transitions(domain: ALFWorldGames, task: Task) -> list[Transition]:
    """The task's walkthrough (`domain.reference_turns`) played on the engine; it must win at its
    last command (a ValueError names the task otherwise)."""
    game = _open(domain, task)
    try:
        return _expert(domain, task, game)
    finally:
        game.close()


def _random(task: Task, game: Game, rng: random.Random, steps: int, invalid_prob: float) -> list[Transition]:
    seen: set[str] = set()

    def choose(t: int, game: Game) -> str:
        seen.update(game.admissible)
        if rng.random() < invalid_prob:
            return inadmissible_command(game.facts, game.admissible, seen, rng)
        return rng.choice([c for c in game.admissible if c != "help"])

    return _play(task, game, choose, "random", steps)


def random_transitions(domain: ALFWorldGames, task: Task, rng: random.Random, steps: int,
                       invalid_prob: float) -> list[Transition]:
    """`steps` random admissible commands ('help' aside), each replaced with probability
    `invalid_prob` by an inadmissible one (`inadmissible_command`); stops early if the engine says won."""
    _check_random(rng, steps, invalid_prob)
    game = _open(domain, task)
    try:
        return _random(task, game, rng, steps, invalid_prob)
    finally:
        game.close()


def _check_random(rng: random.Random, steps: int, invalid_prob: float) -> None:
    if not isinstance(rng, random.Random):
        raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
    if steps < 1:
        raise ValueError(f"steps={steps}: a random episode needs at least one step")
    if not 0.0 <= invalid_prob <= 1.0:
        raise ValueError(f"invalid_prob={invalid_prob} is not a probability in [0, 1]")


def episode_transitions(domain: ALFWorldGames, task: Task, transcript: Sequence[Message], source: str = "agent",
                        check: bool = True) -> list[Transition]:
    """An agent episode's transcript (system, user, assistant, user, ... messages) replayed on the
    engine: one transition per assistant message (commands by `parse_action`; an unparseable reply
    is the action "") until won or `domain.max_steps`. With `check`, each observation in the
    transcript must start with the engine's answer (a ValueError says where it does not); pass
    check=False for a transcript whose observations came from elsewhere (the experience model)."""
    replies, answers = [], []
    for i, message in enumerate(transcript):
        if not isinstance(message, Mapping):
            raise TypeError(f"transcript[{i}] is a {type(message).__name__}, not a chat message")
        if message.get("role") == "assistant":
            replies.append(str(message.get("content", "")))
            after = transcript[i + 1] if i + 1 < len(transcript) else None
            answers.append(str(after.get("content", "")) if after and after.get("role") == "user" else None)
    first = next((str(m.get("content", "")) for m in transcript if m.get("role") == "user"), None)
    game = _open(domain, task)

    def choose(t: int, game: Game) -> str | None:
        return (parse_action(replies[t]) or "") if t < len(replies) else None

    def compare(t: int, next_state: str) -> None:
        if check and answers[t] is not None and not answers[t].startswith(next_state):
            raise ValueError(f"task {task.task_id}: the transcript's observation after reply {t} reads "
                             f"{answers[t][:80]!r}; the engine answers {next_state[:80]!r}")

    try:
        out = _play(task, game, choose, source, domain.max_steps, compare)
    finally:
        game.close()
    if check and out and first is not None and not first.startswith(out[0].state):
        raise ValueError(f"task {task.task_id}: the transcript's first observation is not this game's intro")
    return out


def collect(domain: ALFWorldGames, tasks: Sequence[Task], *, random_per_task: int, rng: random.Random,
            random_steps: int = 20, invalid_prob: float = 0.1) -> list[Transition]:
    """Expert transitions and `random_per_task` random episodes (`random_steps` steps each) of every
    task, in task order; the same rng seed gives the same transitions. One engine load per task."""
    _check_random(rng, random_steps, invalid_prob)
    if random_per_task < 0:
        raise ValueError(f"random_per_task={random_per_task} must be >= 0")
    out: list[Transition] = []
    for task in tasks:
        game = _open(domain, task)
        try:
            out += _expert(domain, task, game)
            for _ in range(random_per_task):
                out += _random(task, game, rng, random_steps, invalid_prob)
        finally:
            game.close()
    return out


__all__ = ["collect", "episode_transitions", "expert_transitions", "random_transitions"]

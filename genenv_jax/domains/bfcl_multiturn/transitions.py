"""Real BFCL multi-turn transitions for DreamGym's experience model, executed on the backends.

An episode is played through `MultiTurnEnvironment` (the agent's real environment). Each agent
reply with calls is a transition: state (the user turn or the previous results), action (the
calls), next state (their results), reward 0. A reply without calls ends the user turn: the next
user turn comes from the task, so it is not a transition (it stays in the history); after the last
turn it is the episode's final transition, next state EPISODE_OVER, reward BFCL's verdict (1 when
the official checker accepts the episode). Texts: `experience_text`.

The reasoning is derived from the execution, standing in for the paper's teacher LLM: which calls
ran, which failed and why (the backend's own error text), which backend attributes changed; for
the final step, the checker's verdict (its error type and message).

Collectors: `expert_transitions` (the ground-truth calls), `perturbed_transitions` (ground-truth
calls with one argument changed, a function swapped, a call dropped or a turn skipped, still run on
the real backends), `episode_transitions` (an agent transcript replayed) and `collect`.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any, Sequence

from genenv_jax.domains.base import Message, Task
from genenv_jax.domains.bfcl_multiturn import data
from genenv_jax.domains.bfcl_multiturn.backend_limits import same_state
from genenv_jax.domains.bfcl_multiturn.episode import MultiTurnEnvironment
from genenv_jax.domains.bfcl_multiturn.experience_text import (END_TURN, EPISODE_OVER, action_text, call_line,
                                                               results_state, task_text, user_state)
from genenv_jax.domains.experience import Transition
from genenv_jax.text.tokenization import parse_tool_calls, render_tool_calls

PERTURBATIONS = ("argument", "function", "drop", "skip_turn")
MAX_REASON_CHARS = 160


def _error_text(result: str) -> str | None:
    """The error a result reports (`{"error": ...}`, BFCL's convention), else None."""
    try:
        value = json.loads(result)
    except ValueError:
        return None
    if isinstance(value, dict) and "error" in value:
        return " ".join(str(value["error"]).split())[:MAX_REASON_CHARS]
    return None


def call_reasoning(calls: Sequence[dict[str, Any]], results: Sequence[str], changed: Sequence[str]) -> str:
    """Why these calls gave these results: per call, ran or failed (and why); what changed."""
    parts = []
    for call, result in zip(calls, results):
        error = _error_text(result)
        parts.append(f"{call['name']} fails: {error}" if error else f"{call['name']} runs and returns its result")
    tail = f"Changed: {', '.join(changed)}." if changed else "No backend state changes."
    return "; ".join(parts) + ". " + tail


def verdict_reasoning(details: dict[str, Any], n_turns: int) -> str:
    """Why the episode's outcome is what it is, from the checker's verdict."""
    if details.get("error_type") is None:
        return f"All {n_turns} requests were done as asked: the backends and results match the ground truth."
    turn = details.get("turn")
    where = f"turn {turn + 1}" if isinstance(turn, int) else "the episode"
    message = " ".join(str(details.get("error_message", "")).split())[:MAX_REASON_CHARS]
    return f"Not done as asked ({where}): {details['error_type']}: {message}"


def play(task: Task, texts: Sequence[str], source: str) -> list[Transition]:
    """The transitions of the agent replies `texts` played from reset (see the module docstring);
    replies after the episode ends are ignored."""
    env = MultiTurnEnvironment(task)
    env.reset()
    scenario = env.scenario
    task_str, state = task_text(scenario), user_state(scenario, 0)
    history: list[list[str]] = []
    transcript: list[Message] = []
    out: list[Transition] = []

    def add(action: str, next_state: str, reward: float, done: bool, valid: bool, reasoning: str, turn: int):
        out.append(Transition(domain=task.domain, task_id=task.task_id, task=task_str, history=[list(p) for p in history],
                              state=state, action=action, next_state=next_state, reward=reward, done=done,
                              valid=valid, reasoning=reasoning, source=source, step=len(history),
                              metadata={"turn": turn, "category": task.category}))

    before = env.dispatcher.backends.public_state()  # only call steps change it
    for text in texts:
        parsed = parse_tool_calls(text)
        turn = env.tracker.turn
        outcome = env.step(text)
        transcript.append({"role": "assistant", "content": text})
        calls = [c.to_json() for c in parsed.calls] + [{"name": "(malformed call)"}] * len(parsed.errors)
        action = action_text(calls) if parsed.attempted_call else END_TURN
        if outcome.done:
            verdict = env.score(transcript)
            add(action, EPISODE_OVER, verdict.reward, True, not outcome.info["errors"],
                verdict_reasoning(verdict.details, scenario.n_turns), turn)
            break
        if parsed.attempted_call:
            results = [str(m["content"]) for m in outcome.observation]
            after = env.dispatcher.backends.public_state()
            changed = [f"{c}.{k}" for c in after for k in after[c] if not same_state(before[c].get(k), after[c][k])]
            before = after
            next_state = results_state(results)
            valid = not outcome.info["errors"] and not any(_error_text(r) for r in results)
            add(action, next_state, 0.0, False, valid, call_reasoning(calls, results, changed), turn)
        else:
            next_state = user_state(scenario, env.tracker.turn)
        history.append([state, action])
        state = next_state
    return out


def expert_transitions(domain, task: Task) -> list[Transition]:
    """The ideal episode: each turn's ground-truth calls in one step, then a reply ending the turn."""
    return play(task, domain.reference_turns(task), "expert")


def _other_value(value: Any, rng: random.Random) -> Any:
    """A plausible wrong value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.choice((-1, 1)) * rng.randint(1, 9)
    if isinstance(value, float):
        return round(value * rng.choice((0.5, 2.0)) + 1.0, 2)
    if isinstance(value, str):
        return value[:-1] if len(value) > 1 and rng.random() < 0.5 else value + rng.choice(("_2", "s", ".txt"))
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    return value


def _perturb(calls: list[dict[str, Any]], kind: str, functions: Sequence[str], rng: random.Random
             ) -> list[dict[str, Any]]:
    calls = copy.deepcopy(calls)
    i = rng.randrange(len(calls))
    if kind == "argument" and calls[i].get("arguments"):
        key = rng.choice(sorted(calls[i]["arguments"]))
        calls[i]["arguments"][key] = _other_value(calls[i]["arguments"][key], rng)
    elif kind == "function" and len(functions) > 1:
        calls[i]["name"] = rng.choice([f for f in functions if f != calls[i]["name"]])
    elif kind == "drop":
        del calls[i]
    return calls


def perturbed_texts(task: Task, rng: random.Random, prob: float) -> list[str]:
    """Agent replies following the ground truth, each turn's calls perturbed with probability `prob`
    (one of PERTURBATIONS: an argument value changed, a function swapped for another of the task's,
    a call dropped, the turn's calls skipped); turns without ground-truth calls get a refusal."""
    functions = [f for c in task.prompt["involved_classes"] for f in data.function_names(c)]
    texts = []
    for calls in task.verifier["ground_truth"]:
        if calls and rng.random() < prob:
            kind = rng.choice(PERTURBATIONS)
            calls = [] if kind == "skip_turn" else _perturb(calls, kind, functions, rng)
        texts += [render_tool_calls(calls), "Done."] if calls else ["I cannot do this."]
    return texts


def perturbed_transitions(task: Task, rng: random.Random, prob: float, max_replies: int) -> list[Transition]:
    """One perturbed episode (`perturbed_texts`), at most `max_replies` agent replies."""
    return play(task, perturbed_texts(task, rng, prob)[:max_replies], "random")


def episode_transitions(task: Task, transcript: Sequence[Message], source: str = "agent") -> list[Transition]:
    """An agent transcript's transitions, its replies replayed on fresh backends."""
    return play(task, [str(m.get("content", "")) for m in transcript if m.get("role") == "assistant"], source)


def collect(domain, tasks: Sequence[Task], random_per_task: int, rng: random.Random, max_replies: int,
            perturb_prob: float) -> list[Transition]:
    """Per task: the expert episode, then `random_per_task` perturbed ones."""
    out: list[Transition] = []
    for task in tasks:
        out += expert_transitions(domain, task)
        for _ in range(random_per_task):
            out += perturbed_transitions(task, rng, perturb_prob, max_replies)
    return out


__all__ = ["END_TURN", "EPISODE_OVER", "call_line", "call_reasoning", "collect", "episode_transitions",
           "expert_transitions", "perturbed_texts", "perturbed_transitions", "play", "verdict_reasoning"]

"""Agreement of our verdicts with BFCL's official multi-turn checker, on shipped data only.

The official checker `eval`s call strings, so it is run here only on the shipped ground-truth
strings and on calls written from dataset values (`python_call`: a checked identifier and plain
JSON literals written with `repr`, as BFCL's own `convert_to_function_call` writes decoded calls),
never on model text. Each task is replayed with its ground truth as the agent's turns, and with
perturbations of it: a wrong argument value, a dropped call, an extra state-changing call, and an
extra call of a function no class has (our refusal against the official executor's NameError).
Our verdict comes from the episode path (texts -> environment -> `score`); agreement counts equal
valid/invalid verdicts.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import decimal
import functools
import hashlib
import itertools
from typing import Any, Iterator, Sequence

import mpmath
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker as official
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from bfcl_eval.eval_checker.multi_turn_eval.func_source_code import long_context

from genenv_jax.domains.base import Message, Task
from genenv_jax.domains.bfcl_multiturn import data
from genenv_jax.domains.bfcl_multiturn.dispatch import plain_json_problem
from genenv_jax.domains.bfcl_multiturn.domain import DONE_TEXT, BFCLMultiTurnDomain
from genenv_jax.text.tokenization import render_tool_calls

Turns = list[list[dict[str, Any]]]  # per user turn: the calls the agent makes (in one step)
PERTURBATIONS = ("wrong_value", "dropped_call", "extra_call", "unknown_call")
UNKNOWN_CALL = {"name": "genenv_no_such_function", "arguments": {"path": "."}}
# An extra call that changes the state of each class (when its preconditions hold, e.g. a login).
EXTRA_CALLS = {
    "GorillaFileSystem": {"name": "touch", "arguments": {"file_name": "genenv_extra.txt"}},
    "VehicleControlAPI": {"name": "set_navigation", "arguments": {"destination": "Genenv Extra Street"}},
    "TwitterAPI": {"name": "follow_user", "arguments": {"username_to_follow": "genenv_extra"}},
    "MessageAPI": {"name": "add_contact", "arguments": {"user_name": "genenv_extra"}},
    "TicketAPI": {"name": "create_ticket", "arguments": {"title": "genenv extra"}},
    "TradingBot": {"name": "fund_account", "arguments": {"amount": 1.0}},
    "TravelAPI": {"name": "set_budget_limit", "arguments": {"access_token": "genenv", "budget_limit": 1.0}},
}
_runs = itertools.count()


def python_call(call: dict[str, Any]) -> str:
    """A dataset-derived JSON call as BFCL's decoded-call string `name(k=repr(v), ...)`."""
    name, arguments = call["name"], call["arguments"]
    if (not (isinstance(name, str) and name.isidentifier()) or plain_json_problem(arguments) is not None
            or not all(k.isidentifier() for k in arguments)):
        raise ValueError(f"not a plain call: {str(call)[:200]}")
    return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"


@functools.lru_cache(maxsize=1)
def _long_context_snapshot() -> dict[str, Any]:
    """BFCL's long-context extension data as first seen (our backends never write into it)."""
    return {k: copy.deepcopy(v) for k, v in vars(long_context).items() if k.isupper()}


@contextlib.contextmanager
def _pristine_bfcl_globals() -> Iterator[None]:
    """Official runs write into BFCL's long-context module data and executor globals (and MathAPI
    into decimal / mpmath precision); put all of it back afterwards."""
    snapshot = _long_context_snapshot()
    executor_names = set(vars(multi_turn_utils))
    dps = mpmath.mp.dps
    try:
        with decimal.localcontext():
            yield
    finally:
        for k, saved in snapshot.items():
            current = getattr(long_context, k)
            if current != saved and isinstance(current, dict):
                current.clear()
                current.update(copy.deepcopy(saved))
            elif current != saved and isinstance(current, list):
                current[:] = copy.deepcopy(saved)
        for k in set(vars(multi_turn_utils)) - executor_names:
            delattr(multi_turn_utils, k)
        mpmath.mp.dps = dps


def official_valid(task: Task, turns: Turns, truth_source: Sequence[Sequence[str]]) -> tuple[bool, str | None]:
    """The official checker's (valid, error_type) for the agent calling `turns` (one step per turn)."""
    model = [[[python_call(c) for c in calls]] if calls else [] for calls in turns]
    entry = {"id": task.task_id, "initial_config": copy.deepcopy(task.verifier["initial_config"]),
             "involved_classes": list(task.prompt["involved_classes"])}
    with _pristine_bfcl_globals():
        result = official.multi_turn_checker(model, [list(t) for t in truth_source], entry, task.category,
                                             f"genenv_verify_{next(_runs)}")
    return bool(result["valid"]), result.get("error_type")


def episode_texts(task: Task, turns: Turns) -> list[str]:
    """The agent texts that make `turns` an episode: per turn, its calls in one step, then a closing reply."""
    texts = []
    for calls in turns:
        texts += [render_tool_calls(calls), DONE_TEXT] if calls else [DONE_TEXT]
    return texts


def run_episode(domain: BFCLMultiTurnDomain, task: Task, texts: Sequence[str]) -> tuple[list[Message], list[Any]]:
    """(transcript, step outcomes) of an episode whose agent says `texts` (it stops when done)."""
    env = domain.environment(task)
    transcript: list[Message] = list(env.reset().messages)
    outcomes = []
    for text in texts:
        transcript.append({"role": "assistant", "content": text})
        outcome = env.step(text)
        outcomes.append(outcome)
        if outcome.done:
            break
        transcript.extend(outcome.observation)
    return transcript, outcomes


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + (1 if isinstance(value, int) else 1.5)
    if isinstance(value, str):
        return value + "_x" if value else "x"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    return {**value, "x": 1} if isinstance(value, dict) else "x"


def perturb(task: Task, kind: str) -> Turns | None:
    """The ground truth with one deterministic change of `kind`; None when the task has no place for it."""
    turns = copy.deepcopy(task.verifier["ground_truth"])
    slots = [(t, i) for t, calls in enumerate(turns) for i in range(len(calls))]
    if not slots:
        return None
    pick = int(hashlib.sha256(f"{task.task_id}/{kind}".encode()).hexdigest(), 16)
    if kind == "wrong_value":
        with_args = [(t, i) for t, i in slots if turns[t][i]["arguments"]]
        if not with_args:
            return None
        t, i = with_args[pick % len(with_args)]
        args = turns[t][i]["arguments"]
        key = sorted(args)[pick // 7 % len(args)]
        args[key] = _changed(args[key])
    elif kind == "dropped_call":
        t, i = slots[pick % len(slots)]
        del turns[t][i]
    elif kind == "extra_call":
        owner = next((c for c in task.prompt["involved_classes"] if c in EXTRA_CALLS), None)
        if owner is None:
            return None
        last = max(t for t, _ in slots)
        turns[last].append(copy.deepcopy(EXTRA_CALLS[owner]))
    elif kind == "unknown_call":
        t, i = slots[pick % len(slots)]
        turns[t].insert(i, copy.deepcopy(UNKNOWN_CALL))
    else:
        raise ValueError(f"unknown perturbation {kind!r}; expected one of {PERTURBATIONS}")
    return turns


@dataclasses.dataclass
class Agreement:
    """Counts per case ("replay" or a perturbation): n, ours valid, official valid, agreeing, and the disagreements."""

    n: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    ours_valid: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    official_valid: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    agree: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    disagreements: list[tuple[str, str, Any, Any]] = dataclasses.field(default_factory=list)
    replay_failures: list[tuple[str, Any]] = dataclasses.field(default_factory=list)

    def add(self, case: str, task_id: str, ours: Any, theirs: tuple[bool, str | None]) -> None:
        self.n[case] += 1
        self.ours_valid[case] += ours.reward == 1.0
        self.official_valid[case] += theirs[0]
        if (ours.reward == 1.0) == theirs[0]:
            self.agree[case] += 1
        else:
            self.disagreements.append((case, task_id, ours.details.get("error_type"), theirs[1]))
        if case == "replay" and ours.reward != 1.0:
            self.replay_failures.append((task_id, ours.details.get("error_type")))


def check_tasks(domain: BFCLMultiTurnDomain, tasks: Sequence[Task], cases: Sequence[str] = ("replay",) + PERTURBATIONS
                ) -> Agreement:
    """Replays and perturbs shipped tasks, scoring each with our environment and the official checker."""
    sources = {e.id: e.ground_truth_source for c in {t.category for t in tasks} for e in data.load_category(c)}
    report = Agreement()
    for task in tasks:
        for case in cases:
            turns = task.verifier["ground_truth"] if case == "replay" else perturb(task, case)
            if turns is None:
                continue
            transcript, _ = run_episode(domain, task, episode_texts(task, turns))
            ours = domain.environment(task).score(transcript)
            report.add(case, task.task_id, ours, official_valid(task, turns, sources[task.task_id]))
    return report

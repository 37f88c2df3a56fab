"""Simulator-written multi-turn tasks: their JSON format, and the checks a generation must pass.

A generation is one JSON object (in a ```json fence) in BFCL's multi-turn format, with the ground
truth as JSON calls instead of Python strings:
  {"involved_classes": [...], "initial_config": {class: scenario}, "question": [turn, ...],
   "missed_function": {"turn": [names]} (miss_func only), "ground_truth": [[{"name", "arguments"}], ...]}
A turn is a list of user messages (or one string); a miss_func reveal turn is []. The ground truth
must run through our dispatcher on fresh backends without a refused call, an exception or an
error result, and change state or return something the official check compares.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from genenv_jax.domains.base import Invalid, Task
from genenv_jax.domains.bfcl_multiturn import data
from genenv_jax.domains.bfcl_multiturn.checker import check_episode
from genenv_jax.domains.bfcl_multiturn.dispatch import Dispatcher
from genenv_jax.domains.bfcl_multiturn.scenario import Scenario

MAX_TURNS = 10            # user turns (shipped: at most 8)
MAX_CALLS_PER_TURN = 40   # ground-truth calls in one turn (shipped: at most 34)
MAX_CLASSES = 4           # involved classes (shipped: at most 2)

# Reason codes of a rejected generation, in the order the checks run.
REJECTION_REASONS = (
    "no_json",              # no JSON object in the text
    "too_large",            # the JSON value is longer than json_text.MAX_JSON_CHARS characters
    "too_deep",             # the JSON value nests deeper than json_text.MAX_JSON_DEPTH levels
    "invalid_json",         # a JSON block that does not parse
    "invalid_unicode",      # a JSON string holds a lone UTF-16 surrogate
    "not_an_object",        # top-level JSON is not an object
    "missing_field",        # involved_classes / initial_config / question / ground_truth (/ missed_function) absent
    "unknown_class",        # involved_classes is not a list of 1..MAX_CLASSES distinct BFCL multi-turn classes
    "bad_question",         # question is not 1..MAX_TURNS turns of non-empty user messages (reveal turns: [])
    "copied_question",      # the same user turns as the seed
    "bad_initial_config",   # initial_config is not {BFCL class: object}
    "bad_missed_function",  # miss_func: no valid reveal schedule, or one outside miss_func; a held-out
                            # function called before its reveal turn
    "bad_ground_truth",     # not one list of {"name", "arguments"} calls per turn (<= MAX_CALLS_PER_TURN),
                            # or the category's shape (miss_param: a turn without calls before the last)
    "unknown_function",     # a ground-truth call names no function of the involved classes
    "bad_arguments",        # the dispatcher refuses a ground-truth call's arguments
    "ground_truth_error",   # the scenario does not load, a ground-truth call raises or returns an error,
                            # or the ground truth does not pass the checker against itself
    "no_effect",            # no ground-truth call changes state or returns anything the checker compares
)


def task_json(task: Task) -> dict[str, Any]:
    """A task in the generation format (what the simulator is shown and asked to write)."""
    out: dict[str, Any] = {"involved_classes": task.prompt["involved_classes"],
                           "initial_config": task.verifier["initial_config"],
                           "question": task.prompt["question"]}
    if task.prompt.get("missed_function"):
        out["missed_function"] = task.prompt["missed_function"]
    out["ground_truth"] = task.verifier["ground_truth"]
    return out


def as_generation(task: Task) -> str:
    """A task written as the simulator is asked to write one: the JSON in a fenced block."""
    return "```json\n" + json.dumps(task_json(task), ensure_ascii=False) + "\n```"


def _classes(value: Any) -> list[str]:
    if (not isinstance(value, list) or not 1 <= len(value) <= MAX_CLASSES or len(set(map(str, value))) != len(value)
            or not all(isinstance(c, str) and c in data.CLASSES for c in value)):
        raise Invalid("unknown_class", f"involved_classes must list 1..{MAX_CLASSES} distinct names of "
                                       f"{list(data.CLASSES)}; got {str(value)[:200]}")
    return list(value)


def _turn(value: Any, index: int) -> list[dict[str, str]]:
    if isinstance(value, str):
        value = [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise Invalid("bad_question", f"turn {index} is a {type(value).__name__}, not a list of messages")
    for m in value:
        if (not isinstance(m, dict) or m.get("role") != "user" or not isinstance(m.get("content"), str)
                or not m["content"].strip() or set(m) - {"role", "content"}):
            raise Invalid("bad_question", f"turn {index}: each message must be {{\"role\": \"user\", "
                                          f"\"content\": non-empty text}}; got {str(m)[:200]}")
    return [{"role": "user", "content": m["content"]} for m in value]


def normalize_question(value: Any) -> list[list[dict[str, str]]]:
    """The user turns as lists of {"role": "user", "content"} messages (a string turn is one message)."""
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_TURNS:
        raise Invalid("bad_question", f"question must be a list of 1..{MAX_TURNS} turns")
    return [_turn(t, i) for i, t in enumerate(value)]


def _initial_config(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(k in data.CLASSES and isinstance(v, dict) for k, v in value.items()):
        shown = sorted(map(str, value))[:10] if isinstance(value, dict) else type(value).__name__
        raise Invalid("bad_initial_config", f"initial_config must map BFCL classes to objects; got {shown}")
    return value


def _missed_function(value: Any, category: str, question: list, classes: list[str]) -> dict[str, list[str]]:
    if category != "multi_turn_miss_func":
        if value:
            raise Invalid("bad_missed_function", f"missed_function belongs to multi_turn_miss_func, not {category}")
        if any(not turn for turn in question):
            raise Invalid("bad_question", "every turn needs a user message outside multi_turn_miss_func")
        return {}
    names = set().union(*(data.function_names(c) for c in classes))
    ok = isinstance(value, dict) and value and all(
        isinstance(k, str) and k.isdigit() and 1 <= int(k) < len(question) and isinstance(v, list) and v
        and all(isinstance(n, str) and n in names for n in v) for k, v in value.items())
    if not ok:
        raise Invalid("bad_missed_function", "missed_function must map turn indices (1..turns-1, as strings) to "
                                             "functions of the involved classes")
    if any((str(i) in value) != (not turn) for i, turn in enumerate(question)):
        raise Invalid("bad_missed_function",
                      "exactly the turns named in missed_function must be [] (no user message)")
    return {k: list(v) for k, v in value.items()}


def _ground_truth(value: Any, n_turns: int, category: str) -> list[list[dict[str, Any]]]:
    if not isinstance(value, list) or len(value) != n_turns:
        raise Invalid("bad_ground_truth", f"ground_truth must be a list of {n_turns} turns of calls")
    for i, turn in enumerate(value):
        if not isinstance(turn, list) or len(turn) > MAX_CALLS_PER_TURN or not all(
                isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("arguments", {}), dict)
                and not set(c) - {"name", "arguments"} for c in turn):
            raise Invalid("bad_ground_truth", f"turn {i}: at most {MAX_CALLS_PER_TURN} calls "
                                              f"{{\"name\": text, \"arguments\": {{...}}}}")
    if category == "multi_turn_miss_param" and not any(not turn for turn in value[:-1]):
        raise Invalid("bad_ground_truth", "multi_turn_miss_param needs a turn without calls (a missing "
                                          "parameter) before the last turn, which supplies it")
    return [[{"name": c["name"], "arguments": c.get("arguments", {})} for c in turn] for turn in value]


def _is_error_result(text: str) -> bool:
    """A backend's error answer: `{"error": ...}`, or a text / one-item list starting with "Error"."""
    if text.startswith("Error") or text.startswith("['Error"):
        return True
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and "error" in value


def replay_ground_truth(scenario: Scenario) -> None:
    """Runs the ground truth through the dispatcher; raises Invalid on a refusal, an error or no effect."""
    try:
        _replay(scenario)
    except Invalid:
        raise
    except Exception as e:  # noqa: BLE001 - BFCL's backends cannot run this scenario (e.g. its config)
        raise Invalid("ground_truth_error", f"{type(e).__name__}: {str(e)[:200]}") from None


def _replay(scenario: Scenario) -> None:
    dispatcher = Dispatcher(scenario.backends())
    hidden_until = {n: t for t, names in scenario.revealed.items() for n in names}
    effect = False
    for turn, calls in enumerate(scenario.ground_truth):
        for call in calls:
            if hidden_until.get(call["name"], 0) > turn:
                raise Invalid("bad_missed_function", f"turn {turn} calls {call['name']!r} before its reveal turn")
            before = dispatcher.backends.public_state()
            outcome = dispatcher.call(call["name"], call["arguments"])
            if outcome.error in ("unknown_function", "bad_arguments"):
                raise Invalid(outcome.error, f"turn {turn}: {outcome.observation[:300]}")
            if outcome.error is not None or _is_error_result(outcome.result):
                raise Invalid("ground_truth_error", f"turn {turn}, {call['name']}: {outcome.result[:300]}")
            effect = (effect or outcome.result not in ("None", "", "{}", "[]")
                      or dispatcher.backends.public_state() != before)
    if not effect:
        raise Invalid("no_effect", "no ground-truth call changes state or returns a result the checker compares")
    verdict = check_episode(scenario, [[list(calls)] for calls in scenario.ground_truth])
    if not verdict.valid:
        raise Invalid("ground_truth_error",
                      f"the ground truth fails the checker against itself: {verdict.error_type}")


def validate(obj: Any, category: str, seed_question: Sequence[Any]) -> dict[str, Any]:
    """A generation's JSON as task fields {prompt, verifier}; raises Invalid."""
    if not isinstance(obj, dict):
        raise Invalid("not_an_object", f"top-level JSON is a {type(obj).__name__}")
    required = ["involved_classes", "initial_config", "question", "ground_truth"]
    if category == "multi_turn_miss_func":
        required.append("missed_function")
    missing = [k for k in required if k not in obj]
    if missing:
        raise Invalid("missing_field", f"missing {missing}; keys are {sorted(obj)[:20]}")
    classes = _classes(obj["involved_classes"])
    question = normalize_question(obj["question"])
    if question == normalize_question(list(seed_question)):
        raise Invalid("copied_question", "the user turns repeat the seed's")
    initial_config = _initial_config(obj["initial_config"])
    missed = _missed_function(obj.get("missed_function"), category, question, classes)
    ground_truth = _ground_truth(obj["ground_truth"], len(question), category)
    prompt = {"question": question, "involved_classes": classes, "missed_function": missed}
    verifier = {"initial_config": initial_config, "ground_truth": ground_truth}
    replay_ground_truth(Scenario(category=category, question=question, involved_classes=classes,
                                 initial_config=initial_config, revealed=data.reveal_schedule(missed),
                                 ground_truth=ground_truth))
    return {"prompt": json.loads(json.dumps(prompt)), "verifier": json.loads(json.dumps(verifier))}


def signature_lines(class_name: str) -> list[str]:
    """One line per function of a class: `name(param: type, opt: type = default)  # what it does`."""
    lines = []
    for doc in data.function_docs(class_name):
        params = doc["parameters"]
        required = set(params.get("required", []))
        args = [f"{p}: {spec.get('type', 'any')}" + ("" if p in required else f" = {json.dumps(spec.get('default'))}")
                for p, spec in params.get("properties", {}).items()]
        what = doc.get("description", "").split("Tool description:")[-1].strip().split(". ")[0]
        lines.append(f"{doc['name']}({', '.join(args)})  # {what[:120]}")
    return lines


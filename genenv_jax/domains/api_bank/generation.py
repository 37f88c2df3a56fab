"""The simulator's task format for API-Bank and its validation by execution.

A generated task is a JSON object: `dialogue` (User/AI turns and earlier API turns
{"role": "API", "api_name", "param_dict"}) and either `expected_call` {"api_name", "param_dict"}
(api categories) or `expected_reply` (response categories, whose dialogue ends with an API turn).
It is accepted only if every call in it, replayed in order from the initial database, executes
without an exception; the recorded results are the executions', never the simulator's text.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from genenv_jax.domains.api_bank import metrics
from genenv_jax.domains.generation import JSON_REASONS, extract_json_object
from genenv_jax.domains.records import Invalid

MAX_TURNS = 24
MAX_TEXT_CHARS = 2000
MAX_VALUE_CHARS = 1000

REJECTION_REASONS = JSON_REASONS + (  # the JSON reader's codes, then ours
    "not_an_object",            # the JSON value is not an object
    "missing_field",            # dialogue / expected_call / expected_reply absent
    "bad_dialogue",             # a turn that is not a User/AI/API turn, an empty or over-long text, too many turns
    "dialogue_not_user_first",  # the dialogue does not open with the user
    "unknown_api",              # an API the bank does not have
    "excluded_api",             # an API left out of generated tasks (EXCLUDED_APIS: needs the network)
    "bad_arguments",            # arguments not an object of scalar values, or names the API does not take
    "history_call_exception",   # an earlier call of the dialogue raises when replayed
    "call_exception",           # the expected call raises an exception on the replayed state
    "api_not_retrieved",        # level 2: the expected API was neither the tool searcher nor found by it
    "reply_without_call",       # a response task whose dialogue does not end with an API turn
    "empty_reply",              # a response task with an empty expected reply
    "copied_seed",              # the same dialogue and target as the seed
)


def _check_call(obj: Any, bank, where: str) -> dict[str, Any]:
    from genenv_jax.domains.api_bank.executor import EXCLUDED_APIS

    if not isinstance(obj, Mapping) or not isinstance(obj.get("api_name"), str):
        raise Invalid("bad_dialogue", f"{where}: a call needs api_name and param_dict")
    name, params = obj["api_name"], obj.get("param_dict", {})
    if name not in bank.names():
        raise Invalid("unknown_api", f"{where}: no API named {name!r}")
    if name in EXCLUDED_APIS:
        raise Invalid("excluded_api", f"{where}: {name} is not used in generated tasks")
    if not isinstance(params, Mapping) or not all(
            isinstance(v, (str, int, float, bool)) and len(str(v)) <= MAX_VALUE_CHARS for v in params.values()):
        raise Invalid("bad_arguments", f"{where}: param_dict must map names to short scalar values")
    known = set((bank.describe(name).get("input_parameters") or {}))
    unknown = sorted(set(params) - known)
    if unknown:
        raise Invalid("bad_arguments", f"{where}: {name} takes no {unknown}")
    return {"role": "API", "api_name": name, "param_dict": dict(params)}


def _check_dialogue(turns: Any, bank) -> list[dict[str, Any]]:
    if not isinstance(turns, list) or not turns or len(turns) > MAX_TURNS:
        raise Invalid("bad_dialogue", f"dialogue must be a list of 1 to {MAX_TURNS} turns")
    out = []
    for n, turn in enumerate(turns):
        role = turn.get("role") if isinstance(turn, Mapping) else None
        if role == "API":
            out.append(_check_call(turn, bank, f"dialogue[{n}]"))
        elif role in ("User", "AI") and isinstance(turn.get("text"), str) \
                and 0 < len(turn["text"].strip()) <= MAX_TEXT_CHARS:
            out.append({"role": role, "text": turn["text"].strip()})
        else:
            raise Invalid("bad_dialogue", f"dialogue[{n}] is not a User/AI turn with text or an API turn")
    if out[0]["role"] != "User":
        raise Invalid("dialogue_not_user_first", "the dialogue must open with a User turn")
    return out


def _execute(history: list[dict[str, Any]], bank) -> list[dict[str, Any]]:
    """The history with each API turn's result recorded from its execution on `bank`."""
    out = []
    for n, turn in enumerate(history):
        if turn["role"] == "API":
            result = bank.call(turn["api_name"], dict(turn["param_dict"]))
            if result.exception:
                raise Invalid("history_call_exception", f"dialogue[{n}] {turn['api_name']}: {result.exception}")
            turn = dict(turn, result=result.to_json())
        out.append(turn)
    return out


def _retrieved(history: Sequence[Mapping[str, Any]], name: str) -> bool:
    return any(t["role"] == "API" and t["api_name"] == "ToolSearcher"
               and f'"{name}"' in json.dumps(t["result"].get("output"), ensure_ascii=False) for t in history)


def validate(text: str, kind: str, level: int, init_database_dir: str,
             seed_target: Mapping[str, Any], scoring: str = "strict") -> dict[str, Any]:
    """Reads and executes a generation; returns {"history", "gold"} or {"history", "expected"}.

    `seed_target` is the seed's {"history", "gold"/"expected"} (a copy of it is rejected). The calls run
    as `scoring` runs them, so the recorded results are the ones its scores compare with. Raises Invalid.
    """
    obj = extract_json_object(text)
    if not isinstance(obj, Mapping):
        raise Invalid("not_an_object", f"expected a JSON object, got {type(obj).__name__}")
    target_key = "expected_call" if kind == "api" else "expected_reply"
    missing = [k for k in ("dialogue", target_key) if k not in obj]
    if missing:
        raise Invalid("missing_field", f"missing {missing}")
    bank = metrics.fresh_bank(init_database_dir, "level-1-2", scoring)
    history = _check_dialogue(obj["dialogue"], bank)
    if kind == "api":
        call = _check_call(obj[target_key], bank, target_key)
        history = _execute(history, bank)
        result = bank.call(call["api_name"], dict(call["param_dict"]))
        if result.exception:
            raise Invalid("call_exception", f"{call['api_name']}: {result.exception}")
        if level == 2 and call["api_name"] != "ToolSearcher" and not _retrieved(history, call["api_name"]):
            raise Invalid("api_not_retrieved", f"{call['api_name']} was not found by a ToolSearcher call first")
        fields = {"history": history, "gold": dict(call, result=result.to_json())}
    else:
        reply = obj[target_key]
        if history[-1]["role"] != "API":
            raise Invalid("reply_without_call", "a response task's dialogue must end with an API turn")
        if not isinstance(reply, str) or not reply.strip():
            raise Invalid("empty_reply", "expected_reply must be non-empty text")
        fields = {"history": _execute(history, bank), "expected": reply.strip()[:MAX_TEXT_CHARS]}
    if _strip(fields) == _strip(seed_target):
        raise Invalid("copied_seed", "the generation repeats the seed")
    return fields


def _strip(fields: Mapping[str, Any]) -> Any:
    """A task's dialogue and target without recorded results (to compare with the seed)."""
    def turn(t):
        return {k: v for k, v in t.items() if k != "result"}
    return ([turn(t) for t in fields.get("history", [])],
            turn(fields["gold"]) if "gold" in fields else fields.get("expected"))


def as_generation(history: Sequence[Mapping[str, Any]], gold: Mapping[str, Any] | None,
                  expected: str | None) -> str:
    """A task written as the simulator is asked to write one (JSON in a fenced block, results left out)."""
    turns = [{k: v for k, v in t.items() if k != "result"} for t in history]
    obj: dict[str, Any] = {"dialogue": turns}
    if gold is not None:
        obj["expected_call"] = {"api_name": gold["api_name"], "param_dict": gold["param_dict"]}
    else:
        obj["expected_reply"] = expected
    return "```json\n" + json.dumps(obj, ensure_ascii=False) + "\n```"


__all__ = ["REJECTION_REASONS", "as_generation", "validate"]

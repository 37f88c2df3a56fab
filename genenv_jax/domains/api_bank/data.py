"""API-Bank's downloaded data as scored items: one record per scored API call, AI reply or level-3 dialogue.

Reads the official layout (`test-data/`, `lv1-lv2-samples/`, `init_database/`) of a user's download.
Test items are the official test files; each is joined to its source dialogue (the k-th API turn of
`file`, where k is the number of earlier "API-Request:" in its input) for the structured call, its
recorded result and the earlier calls to replay. Train and validation items are built the same way
from every call turn of the source dialogues, split by dialogue (see `split_of_file`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterator

from genenv_jax.data.prepared import BenchmarkSource, DataMissing

SOURCE_VERSION = "1.0.0"
LEVEL_DIRS = {1: "lv1-lv2-samples/level-1-given-desc", 2: "lv1-lv2-samples/level-2-toolsearcher"}
TEST_FILES = {("level-1", "api"): "test-data/level-1-api.json", ("level-1", "response"): "test-data/level-1-response.json",
              ("level-2", "api"): "test-data/level-2-api.json", ("level-2", "response"): "test-data/level-2-response.json"}
LEVEL3_FILE = "test-data/level-3.json"
CATEGORIES = ("level-1-api", "level-1-response", "level-2-api", "level-2-response", "level-3")
API_CATEGORIES = ("level-1-api", "level-2-api", "level-3")
RESPONSE_CATEGORIES = ("level-1-response", "level-2-response")
DEFAULT_VALIDATION_FRACTION = 0.1
DEFAULT_SPLIT_SALT = "api_bank-v1"
INSTRUCTIONS = "download it with `python -m genenv_jax.data.download api_bank --dest DIR` and pass data_dir=DIR"

# The official prompt headers (test-data's `instruction` up to "API descriptions:"), used for items
# built from source dialogues so they read like the test items.
API_INSTRUCTION = (
    "\nGenerate an API request in the format of [ApiName(key1='value1', key2='value2', ...)] based on the previous "
    "dialogue context.\nThe current year is 2023.\nInput: \nUser: User's utterence\nAI: AI's response\n\n"
    "Expected output:\nAPI-Request: [ApiName(key1='value1', key2='value2', ...)]\n\nAPI descriptions:\n")
RESPONSE_INSTRUCTION = (
    "\nGenerate a response as an AI assistant based on the previous dialogue context and API request.\n"
    "The current year is 2023.\nInput: \nUser: User's utterence\nAI: AI's response\n"
    "API-Request: [ApiName(key1='value1', key2='value2', ...)]\n\nExpected output:\nAI: AI's response\n\n"
    "API descriptions:\n")
API_INPUT_END = "Generate API Request:\n"
RESPONSE_INPUT_END = "Generate AI Response:\n"


SPLIT_INFO = "split_info"


def is_item(record: dict[str, Any]) -> bool:
    """Whether a prepared record is a scored item (not a split's leading description)."""
    return record.get("kind") != SPLIT_INFO


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise DataMissing(f"api_bank: cannot read {path}: {e}") from None


def read_dialogue(path: Path) -> list[dict[str, Any]]:
    """A source dialogue: User/AI turns {"role", "text"} and API turns {"role", "api_name", "param_dict", "result"}."""
    turns = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            turn = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataMissing(f"api_bank: {path}:{n} is not JSON ({e.msg})") from None
        role = turn.get("role")
        if role in ("User", "AI") and isinstance(turn.get("text"), str):
            turns.append({"role": role, "text": turn["text"]})
        elif role == "API" and isinstance(turn.get("param_dict"), dict) and isinstance(turn.get("result"), dict):
            turns.append({"role": "API", "api_name": turn["api_name"], "param_dict": turn["param_dict"],
                          "result": turn["result"]})
        else:
            raise DataMissing(f"api_bank: {path}:{n} is not a User/AI/API turn")
    return turns


def render_call_text(name: str, params: dict[str, Any]) -> str:
    """The official call text `[Name(k='v', ...)]` (values as Python-quoted text, as the test files write them)."""
    return f"[{name}(" + ", ".join(f"{k}='{v}'" for k, v in params.items()) + ")]"


def render_output(output: Any) -> str:
    """A result's output as the test files show it after '->' (Python's text of the value)."""
    return output if isinstance(output, str) else str(output)


def render_history(history: list[dict[str, Any]]) -> str:
    """The official `input` text of a dialogue prefix (before the 'Generate ...' line)."""
    lines = []
    for turn in history:
        if turn["role"] == "API":
            lines.append("API-Request: " + render_call_text(turn["api_name"], turn["param_dict"]) + "->"
                         + render_output(turn["result"].get("output")))
        else:
            lines.append(f"{turn['role']}: {turn['text']}")
    return "".join(line + "\n" for line in lines)


def descriptions_of(instruction: str) -> list[dict[str, Any]]:
    """The API descriptions listed (one JSON object a line) after "API descriptions:" in an instruction."""
    _, _, tail = instruction.partition("API descriptions:")
    return [json.loads(line) for line in tail.splitlines() if line.strip().startswith("{")]


def split_of_file(file: str, validation_fraction: float, salt: str) -> str:
    """'train' or 'validation' for a source dialogue, stable across machines (hash of salt and file name)."""
    digest = hashlib.sha256(f"{salt}\0{file}".encode()).digest()
    return "validation" if int.from_bytes(digest[:8], "big") / 2 ** 64 < validation_fraction else "train"


def _api_indices(turns: list[dict[str, Any]]) -> list[int]:
    return [i for i, t in enumerate(turns) if t["role"] == "API"]


def _item(level: int, kind: str, file: str, source_id: int, history: list[dict[str, Any]],
          apis: list[dict[str, Any]], instruction: str, input_text: str, target: dict[str, Any],
          expected_output: str, split: str) -> dict[str, Any]:
    category = f"level-{level}-{kind}"
    return {"item_id": f"{category}/{file}#{source_id}", "category": category, "level": level, "kind": kind,
            "file": file, "source_id": source_id, "split": split, "history": history, "apis": apis,
            "instruction": instruction, "input": input_text, "expected_output": expected_output, **target}


def test_items(root: Path) -> Iterator[dict[str, Any]]:
    """The official level-1/2 test records joined to their source dialogues, in file order."""
    for (level_name, kind), rel in TEST_FILES.items():
        level = int(level_name[-1])
        dialogues: dict[str, list[dict[str, Any]]] = {}
        for n, rec in enumerate(_read_json(root / rel)):
            try:
                file, source_id, text = rec["file"], int(rec["id"]), rec["input"]
                instruction, expected = rec["instruction"], rec["expected_output"]
            except (KeyError, TypeError, ValueError) as e:
                raise DataMissing(f"api_bank: {root / rel} record {n} lacks {e}") from None
            if file not in dialogues:
                dialogues[file] = read_dialogue(root / LEVEL_DIRS[level] / file)
            turns = dialogues[file]
            calls_before = text.count("API-Request:")
            api_at = _api_indices(turns)
            if kind == "api":
                if calls_before >= len(api_at):
                    raise DataMissing(f"api_bank: {rel} record {n} ({file}) has no API turn {calls_before}")
                at = api_at[calls_before]
                target = {"gold": turns[at]}
            else:
                at = api_at[calls_before - 1] + 1
                if calls_before < 1 or at >= len(turns) or turns[at]["role"] != "AI":
                    raise DataMissing(f"api_bank: {rel} record {n} ({file}) has no AI reply after its last call")
                target = {"expected": turns[at]["text"]}
            yield _item(level, kind, file, source_id, turns[:at], descriptions_of(instruction), instruction, text,
                        target, expected, "test")


def _test_descriptions(root: Path) -> dict[str, dict[str, Any]]:
    """Every API description the level-1/2 test files show, by name."""
    return {d["name"]: d for (_, kind), rel in TEST_FILES.items() if kind == "api"
            for rec in _read_json(root / rel) for d in descriptions_of(rec.get("instruction", ""))}


def dialogue_items(root: Path, split: str, validation_fraction: float, salt: str,
                   describe, unscoreable: tuple[str, ...] = ()) -> Iterator[dict[str, Any]]:
    """Items of every call turn (and the AI reply after it) of the source dialogues in `split`.

    `describe(name)` gives an API's description (level 1 shows the dialogue's APIs, level 2 only
    the tool searcher's, as the test files do). Calls to `unscoreable` APIs (not implemented here)
    give no call item: no answer could be scored correct; the replies after them are kept.
    """
    for level, rel in LEVEL_DIRS.items():
        for path in sorted((root / rel).glob("*.jsonl")):
            if split_of_file(path.name, validation_fraction, salt) != split:
                continue
            turns = read_dialogue(path)
            names = sorted({t["api_name"] for t in turns if t["role"] == "API"}) if level == 1 else ["ToolSearcher"]
            apis = [describe(name) for name in names]
            api_lines = "".join(json.dumps(a, ensure_ascii=False) + "\n" for a in apis).rstrip("\n")
            source_id = 0
            for at in _api_indices(turns):
                history = turns[:at]
                if turns[at]["api_name"] not in unscoreable:
                    yield _item(level, "api", path.name, source_id, history, apis, API_INSTRUCTION + api_lines,
                                render_history(history) + API_INPUT_END, {"gold": turns[at]},
                                "API-Request: " + render_call_text(turns[at]["api_name"], turns[at]["param_dict"]),
                                split)
                source_id += 1
                if at + 1 < len(turns) and turns[at + 1]["role"] == "AI":
                    history = turns[:at + 1]
                    yield _item(level, "response", path.name, source_id, history, apis,
                                RESPONSE_INSTRUCTION + api_lines, render_history(history) + RESPONSE_INPUT_END,
                                {"expected": turns[at + 1]["text"]}, turns[at + 1]["text"], split)
                    source_id += 1


def level3_items(root: Path) -> Iterator[dict[str, Any]]:
    """The 50 level-3 dialogues: a requirement, the gold calls (with recorded results), the gold reply."""
    for n, rec in enumerate(_read_json(root / LEVEL3_FILE)):
        try:
            calls = [{"role": "API", "api_name": c["api_name"], "param_dict": c["input"], "result": c["output"]}
                     for c in rec["apis"]]
            requirement, response = rec["requirement"].strip(), rec["response"]
        except (KeyError, TypeError) as e:
            raise DataMissing(f"api_bank: {root / LEVEL3_FILE} record {n} lacks {e}") from None
        yield {"item_id": f"level-3/{n}", "category": "level-3", "level": 3, "kind": "dialogue", "file": LEVEL3_FILE,
               "source_id": n, "split": "test", "requirement": requirement, "calls": calls,
               "expected_output": response}


def api_source(validation_fraction: float = DEFAULT_VALIDATION_FRACTION,
               salt: str = DEFAULT_SPLIT_SALT) -> BenchmarkSource:
    """The TFDS source named "api_bank" (its version covers the split settings)."""
    def examples(root: Path, split: str) -> Iterator[dict[str, Any]]:
        # A split's first record describes it (TFDS refuses an empty split; a small download can
        # leave 'validation' without dialogues). Readers skip it (`is_item`).
        yield {"kind": SPLIT_INFO, "split": split, "validation_fraction": validation_fraction, "salt": salt}
        if split == "test":
            yield from test_items(root)
            yield from level3_items(root)
            return
        from genenv_jax.domains.api_bank.executor import EXCLUDED_APIS, APIBank

        bank, shown = APIBank(root / "init_database"), _test_descriptions(root)

        def describe(name: str) -> dict[str, Any]:
            if name in bank.names():
                return bank.describe(name)
            if name in shown:  # an API not implemented here (EXCLUDED_APIS): as the test files describe it
                return shown[name]
            raise DataMissing(f"api_bank: no description of API {name!r} (used in {LEVEL_DIRS})")

        yield from dialogue_items(root, split, validation_fraction, salt, describe, tuple(EXCLUDED_APIS))

    tag = hashlib.sha256(f"{validation_fraction}\0{salt}".encode()).hexdigest()[:6]
    name = "api_bank" if (validation_fraction, salt) == (DEFAULT_VALIDATION_FRACTION, DEFAULT_SPLIT_SALT) \
        else f"api_bank_{tag}"
    return BenchmarkSource(name=name, version=SOURCE_VERSION, splits=("train", "validation", "test"),
                           examples=examples, instructions=INSTRUCTIONS,
                           required=(*TEST_FILES.values(), LEVEL3_FILE, *LEVEL_DIRS.values(), "init_database"))


__all__ = ["API_CATEGORIES", "CATEGORIES", "RESPONSE_CATEGORIES", "api_source", "descriptions_of", "read_dialogue",
           "render_call_text", "render_history", "split_of_file", "test_items", "dialogue_items", "level3_items"]

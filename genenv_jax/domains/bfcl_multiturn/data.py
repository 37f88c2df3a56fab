"""BFCL v4 multi-turn data shipped in `bfcl-eval`: entries, function docs, backend classes, the split.

Ground-truth calls ship as Python call strings (`cd(folder='document')`, `sort('a.pdf')`); they are
dataset text, read once here with `ast` (literals only, never evaluated) into JSON calls
`{"name", "arguments"}` with positional arguments named from the backend method's signature.
The four categories share 200 scenarios (`multi_turn_base_7`, `multi_turn_miss_func_7`, ... are
one scenario), so the split assigns a scenario index to one side for every category at once.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import hashlib
import importlib
import importlib.resources
import inspect
import json
from typing import Any, Mapping, Sequence

from bfcl_eval.constants.category_mapping import VERSION_PREFIX
from bfcl_eval.constants.executable_backend_config import (
    CLASS_FILE_PATH_MAPPING, MULTI_TURN_FUNC_DOC_FILE_MAPPING, STATELESS_CLASSES)

from genenv_jax.domains.bfcl.data import SPLITS, SplitFractions, data_file, read_jsonl

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
# The backends of BFCL's multi-turn suite (web search and memory backends belong to other categories).
CLASSES = ("GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI", "TradingBot", "TravelAPI",
           "VehicleControlAPI")
STATELESS = frozenset(STATELESS_CLASSES)
DEFAULT_SPLIT_SALT = "genenv-bfcl-multiturn-split-v1"


def is_long_context(category: str) -> bool:
    """Whether backends load BFCL's long-context extensions (as the official executor decides)."""
    return "long_context" in category or "composite" in category


@functools.lru_cache(maxsize=None)
def backend_class(class_name: str) -> type:
    """The executable backend class BFCL ships for one of CLASSES."""
    if class_name not in CLASSES:
        raise ValueError(f"unknown BFCL multi-turn class {class_name!r}; expected one of {CLASSES}")
    return getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)


@functools.lru_cache(maxsize=None)
def _function_docs_cached(class_name: str) -> tuple[str, ...]:
    if class_name not in CLASSES:
        raise ValueError(f"unknown BFCL multi-turn class {class_name!r}; expected one of {CLASSES}")
    docs = read_jsonl(data_file("multi_turn_func_doc", MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]))
    return tuple(json.dumps(d, ensure_ascii=False) for d in docs)


def function_docs(class_name: str) -> list[dict[str, Any]]:
    """The function docs BFCL shows for one backend class (fresh copies, file order)."""
    return [json.loads(d) for d in _function_docs_cached(class_name)]


@functools.lru_cache(maxsize=None)
def function_names(class_name: str) -> frozenset[str]:
    """The names of the functions BFCL documents for one backend class."""
    return frozenset(json.loads(d)["name"] for d in _function_docs_cached(class_name))


@functools.lru_cache(maxsize=None)
def parameter_types(class_name: str) -> dict[str, dict[str, str]]:
    """{function: {parameter: declared type}} from one class's docs (do not mutate)."""
    return {d["name"]: {p: spec.get("type", "any") for p, spec in d["parameters"].get("properties", {}).items()}
            for d in function_docs(class_name)}


def owner_of(name: str, involved_classes: Sequence[str]) -> str | None:
    """The involved class whose docs list function `name` (the last one, as BFCL's executor maps names)."""
    owner = None
    for class_name in involved_classes:
        if name in function_names(class_name):
            owner = class_name
    return owner


def call_from_source(source: str, involved_classes: Sequence[str]) -> dict[str, Any]:
    """One shipped ground-truth call string as `{"name", "arguments"}` (dataset text, parsed, not run).

    Positional arguments get their parameter names from the backend method's signature.
    Raises ValueError for anything but `name(literal, ..., key=literal, ...)`.
    """
    node = ast.parse(source.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain call: {source!r}")
    name = node.func.id
    owner = owner_of(name, involved_classes)
    if owner is None:
        raise ValueError(f"{name!r} is not a function of {list(involved_classes)}")
    params = [p for p in inspect.signature(getattr(backend_class(owner), name)).parameters if p != "self"]
    if len(node.args) > len(params):
        raise ValueError(f"{source!r}: {len(node.args)} positional arguments for {params}")
    arguments = {params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    for keyword in node.keywords:
        if keyword.arg is None or keyword.arg in arguments:
            raise ValueError(f"{source!r}: bad or repeated keyword")
        arguments[keyword.arg] = ast.literal_eval(keyword.value)
    # JSON round trip: the calls are stored and compared as JSON data.
    return {"name": name, "arguments": json.loads(json.dumps(arguments))}


@dataclasses.dataclass(frozen=True)
class MultiTurnEntry:
    """One shipped multi-turn item, ground truth as JSON calls per user turn."""

    id: str
    category: str
    scenario: int                                # the index shared by the four categories
    question: list[list[dict[str, Any]]]         # user turns; a turn that reveals functions is []
    initial_config: dict[str, Any]               # {class name: backend scenario}
    involved_classes: list[str]
    missed_function: dict[str, list[str]]        # {turn index: function names revealed at that turn}
    ground_truth: list[list[dict[str, Any]]]     # per turn: [{"name", "arguments"}]
    ground_truth_source: list[list[str]]         # the shipped call strings (dataset text)


@functools.lru_cache(maxsize=None)
def _load_category_cached(category: str) -> tuple[MultiTurnEntry, ...]:
    if category not in CATEGORIES:
        raise ValueError(f"unknown BFCL multi-turn category {category!r}; expected one of {CATEGORIES}")
    name = f"{VERSION_PREFIX}_{category}.json"
    answers = {a["id"]: a["ground_truth"] for a in read_jsonl(data_file("possible_answer", name))}
    entries = []
    for p in read_jsonl(data_file(name)):
        if p["id"] not in answers:
            raise ValueError(f"{name}: {p['id']} has no possible answer")
        source = answers[p["id"]]
        if len(source) != len(p["question"]):
            raise ValueError(f"{name}: {p['id']} has {len(p['question'])} turns and {len(source)} answer turns")
        classes = list(p["involved_classes"])
        entries.append(MultiTurnEntry(
            id=p["id"], category=category, scenario=int(p["id"].rsplit("_", 1)[1]), question=p["question"],
            initial_config=p.get("initial_config", {}), involved_classes=classes,
            missed_function={str(k): list(v) for k, v in p.get("missed_function", {}).items()},
            ground_truth=[[call_from_source(s, classes) for s in turn] for turn in source],
            ground_truth_source=source))
    return tuple(entries)


def load_category(category: str) -> list[MultiTurnEntry]:
    """Every shipped entry of one category, in file order (cached: deep-copy before mutating)."""
    return list(_load_category_cached(category))


def assign_splits(entries: Sequence[MultiTurnEntry], fractions: SplitFractions = SplitFractions(),
                  salt: str = DEFAULT_SPLIT_SALT) -> dict[str, str]:
    """Maps entry id -> split; a scenario's entries in every category land on the same side.

    Scenario indices are ordered by SHA-256 of (salt, index) and filled into train, then
    validation, then test until each holds its fraction of the scenarios.
    """
    scenarios = sorted({e.scenario for e in entries},
                       key=lambda s: hashlib.sha256(f"{salt}\x00multi_turn/{s}".encode()).hexdigest())
    n = len(scenarios)
    n_train, n_val = round(n * fractions.train), round(n * fractions.validation)
    side = {s: "train" if i < n_train else "validation" if i < n_train + n_val else "test"
            for i, s in enumerate(scenarios)}
    return {e.id: side[e.scenario] for e in entries}


def docs_shown(involved_classes: Sequence[str], hidden: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The function docs of the involved classes in BFCL's order, less the `hidden` names."""
    hidden = set(hidden)
    return [d for c in involved_classes for d in function_docs(c) if d["name"] not in hidden]


def docs_named(involved_classes: Sequence[str], names: Sequence[str]) -> list[dict[str, Any]]:
    """The docs of the given function names, in the order named (held-out functions revealed later)."""
    by_name = {d["name"]: d for d in docs_shown(involved_classes)}
    return [copy.deepcopy(by_name[n]) for n in names if n in by_name]


def reveal_schedule(missed_function: Mapping[str, Sequence[str]]) -> dict[int, list[str]]:
    """{turn index: names revealed at that turn}, from a task's `missed_function` (string keys)."""
    return {int(k): list(v) for k, v in missed_function.items()}


__all__ = ["CATEGORIES", "CLASSES", "SPLITS", "STATELESS", "MultiTurnEntry", "assign_splits", "backend_class",
           "call_from_source", "docs_named", "docs_shown", "function_docs", "function_names", "is_long_context",
           "load_category", "owner_of", "parameter_types", "reveal_schedule"]

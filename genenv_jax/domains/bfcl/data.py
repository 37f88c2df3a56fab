"""BFCL v4 single-turn data shipped in `bfcl-eval`, and its deterministic train/validation/test split.

Read through importlib.resources, so it works from a wheel as well as a source tree. The split
is stratified by category and keyed by a SHA-256 of the id (never Python's salted `hash`), so it
is the same on every run and machine. Live entries are split by function-set group (the middle
number of `live_multiple_12-3-4`): entries of one group share their tools and often near-identical
questions, and keeping a group on one side stops training from seeing evaluation items.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.resources
import json
from typing import Any, Mapping

from bfcl_eval.constants.category_mapping import VERSION_PREFIX

from genenv_jax.domains.base import SPLITS  # noqa: F401  (re-exported: the seeds split three ways)

NON_LIVE_AST_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple")
LIVE_AST_CATEGORIES = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
IRRELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance")
CATEGORIES = NON_LIVE_AST_CATEGORIES + LIVE_AST_CATEGORIES + IRRELEVANCE_CATEGORIES
DEFAULT_SPLIT_SALT = "genenv-bfcl-split-v1"


@dataclasses.dataclass(frozen=True)
class BFCLEntry:
    """One single-turn BFCL item: the question turn, its function docs and possible answers."""

    id: str
    category: str
    question: list[dict[str, Any]]      # the (single) turn's messages
    functions: list[dict[str, Any]]     # BFCL function docs (parameters of type "dict")
    ground_truth: list[dict[str, Any]]  # [{func_name: {param: [acceptable values]}}]; [] for irrelevance


@dataclasses.dataclass(frozen=True)
class SplitFractions:
    """Fractions of each category's items in train / validation / test (they must sum to 1)."""

    train: float = 0.7
    validation: float = 0.1
    test: float = 0.2

    def __post_init__(self):
        values = (self.train, self.validation, self.test)
        if any(v < 0 for v in values) or abs(sum(values) - 1.0) > 1e-9:
            raise ValueError(f"SplitFractions must be non-negative and sum to 1, got {values}")

    @classmethod
    def of(cls, value: "SplitFractions | Mapping[str, float]") -> "SplitFractions":
        """`value` as SplitFractions: itself, or a {"train", "validation", "test"} mapping as a config,
        a `--domain_option` or an evaluation report's recorded `domain_options` write it."""
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping) or set(value) - {"train", "validation", "test"}:
            raise ValueError(f"split_fractions {value!r}: expected a mapping of train / validation / test fractions")
        return cls(**value)


def data_file(*parts: str):
    """A file of the installed bfcl_eval package's data directory."""
    node = importlib.resources.files("bfcl_eval").joinpath("data")
    for part in parts:
        node = node.joinpath(part)
    return node


def read_jsonl(node) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, one per non-empty line."""
    with node.open("r", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@functools.lru_cache(maxsize=None)
def _load_category_cached(category: str) -> tuple[BFCLEntry, ...]:
    if category not in CATEGORIES:
        raise ValueError(f"unknown BFCL category {category!r}; expected one of {CATEGORIES}")
    name = f"{VERSION_PREFIX}_{category}.json"
    prompts = read_jsonl(data_file(name))
    answers: dict[str, list] = {}
    if category not in IRRELEVANCE_CATEGORIES:
        answers = {a["id"]: a["ground_truth"] for a in read_jsonl(data_file("possible_answer", name))}
    entries = []
    for p in prompts:
        if len(p["question"]) != 1:
            raise ValueError(f"{name}: {p['id']} has {len(p['question'])} turns; single-turn expected")
        if category not in IRRELEVANCE_CATEGORIES and p["id"] not in answers:
            raise ValueError(f"{name}: {p['id']} has no possible answer")
        entries.append(BFCLEntry(id=p["id"], category=category, question=p["question"][0],
                                 functions=p["function"], ground_truth=answers.get(p["id"], [])))
    return tuple(entries)


def load_category(category: str) -> list[BFCLEntry]:
    """Every shipped entry of one category, in file order (cached; do not mutate the entries)."""
    return list(_load_category_cached(category))


def split_unit(entry_id: str, category: str) -> str:
    """The unit the split assigns as a whole: the function-set group for live entries, else the id."""
    if category.startswith("live_"):
        suffix = entry_id[len(category) + 1:]  # "12-3-4"
        parts = suffix.split("-")
        if len(parts) == 3:
            return f"{category}/group-{parts[1]}"
    return entry_id


def _unit_rank(salt: str, unit: str) -> str:
    return hashlib.sha256(f"{salt}\x00{unit}".encode("utf-8")).hexdigest()


def assign_splits(entries: list[BFCLEntry], fractions: SplitFractions = SplitFractions(),
                  salt: str = DEFAULT_SPLIT_SALT) -> dict[str, str]:
    """Maps entry id -> split, stratified by category.

    Within a category, split units are ordered by SHA-256 of (salt, unit) and filled into train,
    then validation, then test until each holds its fraction of the category's items.
    """
    by_category: dict[str, dict[str, list[str]]] = {}
    for e in entries:
        by_category.setdefault(e.category, {}).setdefault(split_unit(e.id, e.category), []).append(e.id)
    assignment: dict[str, str] = {}
    for category, units in by_category.items():
        n = sum(len(ids) for ids in units.values())
        n_train = round(n * fractions.train)
        n_val = round(n * fractions.validation)
        targets = (("train", n_train), ("validation", n_train + n_val), ("test", n))
        filled, stage = 0, 0
        for unit in sorted(units, key=lambda u: _unit_rank(salt, u)):
            while stage < len(targets) - 1 and filled >= targets[stage][1]:
                stage += 1
            for entry_id in units[unit]:
                assignment[entry_id] = targets[stage][0]
            filled += len(units[unit])
    return assignment


def split_digest(assignment: Mapping[str, str]) -> str:
    """SHA-256 of the sorted (id, split) pairs: one string that pins a split."""
    text = "\n".join(f"{k}\t{assignment[k]}" for k in sorted(assignment))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()

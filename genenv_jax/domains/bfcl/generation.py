"""The BFCL simulator's output format: a task written as BFCL JSON in a ``` fenced block (read back
by `domains.generation.extract_json_object`)."""

from __future__ import annotations

import json
from typing import Any

from genenv_jax.domains.base import Task
from genenv_jax.domains.generation import extract_json_object

__all__ = ["as_generation", "extract_json_object", "seed_json", "task_as_generation"]


def seed_json(task: Task) -> str:
    question = task.prompt["question"]
    shown_question: Any = question[0]["content"] if len(question) == 1 else question
    return json.dumps({"question": shown_question, "function": task.prompt["functions"],
                       "ground_truth": task.verifier["ground_truth"]}, ensure_ascii=False)


def as_generation(task: Task) -> str:
    """A task written as the simulator is asked to write one: BFCL JSON in a fenced block."""
    return "```json\n" + seed_json(task) + "\n```"


def task_as_generation(task: Task) -> str:
    """A task re-serialised the way the simulator is asked to write one (for tests and fixtures)."""
    return "```json\n" + json.dumps({"question": task.prompt["question"], "function": task.prompt["functions"],
                                     "ground_truth": task.verifier["ground_truth"]}, ensure_ascii=False) + "\n```"

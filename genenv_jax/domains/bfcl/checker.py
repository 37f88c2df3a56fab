"""Adapter around BFCL's official AST checker (`bfcl_eval.eval_checker.ast_eval.ast_checker`).

Why a stub: `ast_checker.py` imports `bfcl_eval.constants.model_config` only to read one flag
(`underscore_to_dot`: whether a model's API rewrote "." in function names to "_"). That module
imports every provider SDK BFCL supports (openai, anthropic, mistral, cohere, google-genai, ...),
several GB we do not install (`pip install --no-deps bfcl-eval`). We import the checker with a
small stand-in module in `sys.modules` whose mapping answers `underscore_to_dot=False` for our
model (Qwen's chat template keeps dotted names verbatim), then restore `sys.modules`, so the
stand-in never leaks to other importers (`official.import_with_stand_ins`). The checker's own code
is used unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import types
from typing import Any, Mapping, Sequence

from genenv_jax.core.json_text import MAX_JSON_DEPTH, json_nesting_depth
from genenv_jax.domains.bfcl.official import MODEL_CONFIG_MODULE, import_with_stand_ins, model_config_stand_in
from genenv_jax.text.tokenization import ToolCall

_CHECKER_MODULE = "bfcl_eval.eval_checker.ast_eval.ast_checker"
MODEL_NAME = "genenv_jax"  # the name we pass to the checker; any name maps to underscore_to_dot=False


@functools.lru_cache(maxsize=1)
def official_checker_module() -> types.ModuleType:
    """BFCL's `ast_checker` module, imported against the stand-in model-config module."""
    return import_with_stand_ins(_CHECKER_MODULE, {MODEL_CONFIG_MODULE: model_config_stand_in()})


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The official checker's verdict on one model output."""

    valid: bool
    error_type: str | None = None
    errors: list[Any] = dataclasses.field(default_factory=list)


def to_model_output(calls: Sequence[ToolCall | Mapping[str, Any]]) -> list[dict[str, dict[str, Any]]]:
    """Calls in the checker's decoded form: `[{func_name: {param: value}}, ...]`."""
    out = []
    for c in calls:
        name, args = (c.name, c.arguments) if isinstance(c, ToolCall) else (c["name"], c["arguments"])
        out.append({name: copy.deepcopy(dict(args))})
    return out


def _too_deep_input(functions: Sequence[Mapping[str, Any]], calls: Sequence[ToolCall | Mapping[str, Any]],
                    ground_truth: Sequence[Mapping[str, Any]]) -> str | None:
    """Which input ("functions", "calls" or "ground_truth") nests too deep for the checker, if any."""
    call_arguments = [c.arguments if isinstance(c, ToolCall) else c.get("arguments") for c in calls]
    for what, value in (("functions", functions), ("calls", call_arguments), ("ground_truth", ground_truth)):
        if json_nesting_depth(list(value)) > MAX_JSON_DEPTH:
            return what
    return None


def check_calls(functions: Sequence[Mapping[str, Any]], calls: Sequence[ToolCall | Mapping[str, Any]],
                ground_truth: Sequence[Mapping[str, Any]], category: str) -> CheckResult:
    """Runs `ast_checker` (Python semantics) on parsed calls against BFCL possible answers.

    `category` picks the checker mode as BFCL does: names containing "parallel" match calls in
    any order, "multiple" expects one call among several functions, others one call. The checker
    recurses on nested values, so inputs nested deeper than MAX_JSON_DEPTH are refused before it
    runs (`error_type = "too_deep"`); an exception inside it (it assumes well-formed docs) counts
    as invalid, with its type (`checker_exception:<type>`), and never propagates.
    """
    too_deep = _too_deep_input(functions, calls, ground_truth)
    if too_deep is not None:
        return CheckResult(False, "too_deep", [f"{too_deep} nest deeper than {MAX_JSON_DEPTH} levels; "
                                               "not passed to the official checker"])
    module = official_checker_module()
    language = importlib.import_module("bfcl_eval.constants.enums").Language.PYTHON
    try:
        result = module.ast_checker(copy.deepcopy(list(functions)), to_model_output(calls),
                                    copy.deepcopy(list(ground_truth)), language, category, MODEL_NAME)
    except Exception as e:  # noqa: BLE001 - the checker's failure on odd input is a failed check
        return CheckResult(False, f"checker_exception:{type(e).__name__}", [str(e)[:500]])
    if result.get("valid"):
        return CheckResult(True)
    return CheckResult(False, result.get("error_type"), list(result.get("error", [])))

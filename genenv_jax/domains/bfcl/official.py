"""BFCL's own code, imported from the installed bfcl-eval, whose dependencies we do not install.

Why stand-ins: bfcl-eval is installed `--no-deps` (its dependencies are every provider SDK BFCL
supports, several GB). The modules whose code we run unchanged import a few packages only for
paths we never take:
- `model_handler.utils` (the prompting-mode system prompt and BFCL's AST decoder) imports
  `tenacity` for its API retry decorator, and the Java and JavaScript call parsers, which need
  `tree_sitter` (we decode Python calls only);
- the Qwen handler classes (`model_handler.local_inference.qwen_fc` / `qwen`, which the tests call
  to check our prompts and decoding against) import `openai` for the client their constructor
  builds, and `overrides` for method decorators;
- `eval_checker.ast_eval.ast_checker` imports `constants.model_config` for one flag (checker.py).

`import_with_stand_ins` imports a module with stand-in modules in `sys.modules` for those names,
then takes the stand-ins and every module bound to them back out and restores what was there, so
no other importer ever sees a stand-in. A stand-in function raises if it is ever called.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Callable, Mapping, Sequence

UTILS_MODULE = "bfcl_eval.model_handler.utils"
_PARSERS = "bfcl_eval.model_handler.parser"
_HANDLERS = "bfcl_eval.model_handler"


def _refusing(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{name} is a genenv_jax stand-in (its package is not installed); "
                                  "BFCL's Python path never calls it")
    refuse.__name__ = name.rpartition(".")[2]
    return refuse


def stand_in(module_name: str, **attributes: Any) -> types.ModuleType:
    """A module named `module_name` holding `attributes` (a str value: a refusing function of that name)."""
    module = types.ModuleType(module_name)
    module.__doc__ = "genenv_jax stand-in (genenv_jax/domains/bfcl/official.py)"
    for key, value in attributes.items():
        setattr(module, key, _refusing(f"{module_name}.{key}") if value is None else value)
    return module


def _utils_stand_ins() -> dict[str, types.ModuleType]:
    """What `model_handler.utils` imports but never uses on the Python path."""
    return {
        "tenacity": stand_in("tenacity", retry=None, retry_if_exception_message=None,
                             retry_if_exception_type=None, wait_random_exponential=None),
        f"{_PARSERS}.java_parser": stand_in(f"{_PARSERS}.java_parser", parse_java_function_call=None),
        f"{_PARSERS}.js_parser": stand_in(f"{_PARSERS}.js_parser", parse_javascript_function_call=None),
    }


def _handler_stand_ins() -> dict[str, types.ModuleType]:
    """`_utils_stand_ins` plus what the handler classes import for serving (never used to format or decode)."""
    return _utils_stand_ins() | {
        "openai": stand_in("openai", OpenAI=None),
        "overrides": stand_in("overrides", override=lambda f: f, final=lambda f: f,
                              EnforceOverrides=type("EnforceOverrides", (), {})),
    }


def import_with_stand_ins(name: str, stand_ins: Mapping[str, types.ModuleType],
                          bound: Sequence[str] = ()) -> types.ModuleType:
    """Module `name`, imported with `stand_ins` in `sys.modules`; afterwards `name`, the stand-ins and
    the modules in `bound` (those that import a stand-in on the way) are out of `sys.modules` again,
    and whatever was there before, and each parent package's attribute, is put back."""
    names = [*stand_ins, name, *bound]
    saved = {n: sys.modules.pop(n) for n in names if n in sys.modules}
    bindings = {}  # each name's attribute on its parent package, where both exist now
    for n in names:
        parent_name, _, child = n.rpartition(".")
        if parent_name in sys.modules and hasattr(sys.modules[parent_name], child):
            bindings[n] = getattr(sys.modules[parent_name], child)
    sys.modules.update(stand_ins)
    try:
        module = importlib.import_module(name)
    finally:
        for n in names:
            sys.modules.pop(n, None)
        sys.modules.update(saved)
        for n in names:  # the import binds each module it loads on its parent package: undo that
            parent_name, _, child = n.rpartition(".")
            parent = sys.modules.get(parent_name)
            if parent is None:
                continue
            if n in bindings:
                setattr(parent, child, bindings[n])
            elif hasattr(parent, child):
                delattr(parent, child)
    return module


_UTILS: list[types.ModuleType] = []


def handler_utils() -> types.ModuleType:
    """`bfcl_eval.model_handler.utils`: the prompting system prompt and `default_decode_ast_prompting`."""
    if not _UTILS:
        _UTILS.append(import_with_stand_ins(UTILS_MODULE, _utils_stand_ins()))
    return _UTILS[0]


_HANDLER_MODULES = {"QwenFCHandler": f"{_HANDLERS}.local_inference.qwen_fc",
                    "QwenHandler": f"{_HANDLERS}.local_inference.qwen"}
_HANDLER_CHAIN = (UTILS_MODULE, f"{_HANDLERS}.base_handler", f"{_HANDLERS}.local_inference.base_oss_handler")


def handler(class_name: str) -> Any:
    """An instance of bfcl-eval's `QwenFCHandler` or `QwenHandler`, built without its constructor
    (which opens an OpenAI client to a local server): `_format_prompt`, `decode_ast`,
    `_pre_query_processing_prompting`, `_extract_tool_calls` need no attribute it sets."""
    if class_name not in _HANDLER_MODULES:
        raise ValueError(f"handler {class_name!r}: expected one of {sorted(_HANDLER_MODULES)}")
    module = import_with_stand_ins(_HANDLER_MODULES[class_name], _handler_stand_ins(), _HANDLER_CHAIN)
    cls = getattr(module, class_name)
    return cls.__new__(cls)


MODEL_CONFIG_MODULE = "bfcl_eval.constants.model_config"


class _ModelConfigMapping(dict):
    """MODEL_CONFIG_MAPPING stand-in: every model keeps dotted function names (no '.' -> '_')."""

    def __missing__(self, key: str) -> Any:
        return types.SimpleNamespace(model_name=key, underscore_to_dot=False)


def model_config_stand_in() -> types.ModuleType:
    """bfcl-eval's `constants.model_config` with a MODEL_CONFIG_MAPPING that knows every model
    (the real one imports every vendor's client)."""
    return stand_in(MODEL_CONFIG_MODULE, MODEL_CONFIG_MAPPING=_ModelConfigMapping())


def eval_runner() -> types.ModuleType:
    """bfcl-eval's `eval_checker.eval_runner` (its `_evaluate_single_ast_entry` and
    `_evaluate_single_relevance_entry` judge one reply exactly as BFCL's scorer does); the tests
    compare our verdicts with it. Its model-config import gets checker.py's stand-in."""
    bound = (*_HANDLER_CHAIN, "bfcl_eval.eval_checker.ast_eval.ast_checker", "bfcl_eval.eval_checker.eval_runner_helper")
    return import_with_stand_ins("bfcl_eval.eval_checker.eval_runner",
                                 _handler_stand_ins() | {MODEL_CONFIG_MODULE: model_config_stand_in()}, bound)

"""Executes JSON tool calls on one episode's BFCL backend instances, refusing anything off the list.

BFCL's own executor turns each call into a Python string and `eval`s it; model text never goes
near that here. A call runs only when its name is a function the task's docs list for one of its
involved classes (a public method, looked up by name in that table: no dunders, attribute chains
or builtins), its arguments bind to the method's signature and are plain JSON within `json_text`'s
limits, and no known unbounded computation is asked for (`COST_LIMITS`, numbers-only MathAPI). Anything else, and any
exception inside the backend, becomes an error observation with a reason code. As in BFCL, a
miss_func function is callable before its docs are shown (BFCL's executor maps every method of the
involved classes). Results are written as BFCL's executor writes them, so the official response
check compares the same strings.
"""

from __future__ import annotations

import copy
import dataclasses
import decimal
import inspect
import json
import math
from typing import Any, Mapping, Sequence

import mpmath

from genenv_jax.core.bounded_text import bound_text
from genenv_jax.domains.bfcl_multiturn.backend_limits import FILE_SYSTEM, guarded_call
from genenv_jax.domains.bfcl_multiturn.data import STATELESS, backend_class, function_names, parameter_types
from genenv_jax.core.json_text import MAX_JSON_CHARS, MAX_JSON_DEPTH

# Reason codes of a call that did not run to a result (counted in StepOutcome.info["errors"]).
CALL_ERRORS = (
    "malformed_call",     # a <tool_call> block that is not a call (tokenization.TOOL_CALL_ERRORS)
    "unknown_function",   # not a function of an involved class (dunders, chains, builtins included)
    "bad_arguments",      # arguments that do not bind, are not plain JSON, or ask for unbounded work
    "backend_exception",  # the backend method raised
)

# (class, method, parameter) -> the largest magnitude accepted. These parameters drive work with no
# bound of their own: mpmath / decimal precision, the power of ten an integer is rounded to.
# Shipped tasks stay far below.
COST_LIMITS = {
    ("MathAPI", "logarithm", "precision"): 1000,
    ("MathAPI", "square_root", "precision"): 1000,
    ("MathAPI", "round_number", "decimal_places"): 1000,
}
MAX_POWER_RESULT_BITS = 1 << 20  # MathAPI.power on two integers: |exponent| x bits of |base|
# Classes whose number parameters (declared float / integer / array of numbers) must hold JSON
# numbers: MathAPI's arithmetic on a string or a list (multiply("x", 10**9)) builds gigabytes, and
# TravelAPI.compute_exchange_rate multiplies `value` by up to 110 before float() (a 5.8 MB string
# became a 634 MB error text). No shipped ground truth passes them anything else.
NUMBERS_ONLY = frozenset({"MathAPI", "TravelAPI"})
MAX_ERROR_CHARS = 2000  # a backend exception's text in the result and observation (cut with a marker)


@dataclasses.dataclass(frozen=True)
class CallOutcome:
    """One call's result as BFCL's executor writes it (`result`, what the checker compares), what
    the agent is shown (`observation`), and the reason code when it did not run (`error`)."""

    name: str
    result: str
    observation: str
    error: str | None = None


def refusal(name: str, reason: str, detail: str) -> CallOutcome:
    """A call that did not run: the agent sees `{"error": detail}` (BFCL's error convention)."""
    text = json.dumps({"error": detail}, ensure_ascii=False)
    return CallOutcome(name=name, result=text, observation=text, error=reason)


def format_result(value: Any) -> str:
    """A backend return value as BFCL's executor writes it: strings as is, dicts as JSON, else str()."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except Exception:  # noqa: BLE001 - as the executor: values JSON cannot write fall back to str
            return str(value)
    return str(value)


def plain_json_problem(value: Any) -> str | None:
    """Why `value` is not plain JSON data within the limits (None when it is); iterative, no recursion."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"nested deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(item, float) and not math.isfinite(item):
            return "a number that is not finite"
        if isinstance(item, dict):
            if any(not isinstance(k, str) for k in item):
                return "an object key that is not a string"
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif item is not None and not isinstance(item, (str, int, float, bool)):
            return f"a value of type {type(item).__name__}"
    if len(json.dumps(value, ensure_ascii=False)) > MAX_JSON_CHARS:
        return f"arguments longer than {MAX_JSON_CHARS} characters"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float))


def _cost_problem(class_name: str, name: str, arguments: Mapping[str, Any]) -> str | None:
    """Why a call would ask the backend for unbounded work (None when it would not)."""
    if class_name in NUMBERS_ONLY:
        declared = parameter_types(class_name)[name]
        for param, value in arguments.items():
            kind = declared.get(param)
            if kind in ("float", "integer") and not _is_number(value):
                return f"{param} must be a number"
            if kind == "array" and not (isinstance(value, list) and all(map(_is_number, value))):
                return f"{param} must be a list of numbers"
    for param, value in arguments.items():
        limit = COST_LIMITS.get((class_name, name, param))
        if limit is not None and isinstance(value, (int, float)) and abs(value) > limit:
            return f"{param}={value!r} is above this environment's limit of {limit}"
    if (class_name, name) == ("MathAPI", "power"):
        base, exponent = arguments.get("base"), arguments.get("exponent")
        if isinstance(base, int) and isinstance(exponent, int):
            if abs(exponent) * max(1, abs(int(base)).bit_length()) > MAX_POWER_RESULT_BITS:
                return f"an integer power of more than {MAX_POWER_RESULT_BITS} bits"
    return None


class Backends:
    """The backend instances of one episode, one per involved class, loaded from the initial config.

    Loaded as BFCL's executor does (`_load_scenario(deepcopy(config), long_context=...)`, none for
    stateless classes), then deep-copied: long-context loading shares BFCL's module-level
    extension data, and an episode must never write into data another episode reads.
    """

    def __init__(self, involved_classes: Sequence[str], initial_config: Mapping[str, Any], long_context: bool):
        self.instances: dict[str, Any] = {}
        for class_name in involved_classes:
            instance = backend_class(class_name)()
            if class_name not in STATELESS:
                instance._load_scenario(copy.deepcopy(initial_config.get(class_name, {})), long_context=long_context)
            self.instances[class_name] = copy.deepcopy(instance)

    def public_state(self) -> dict[str, dict[str, Any]]:
        """{class: {attribute: value}} of the attributes the official state check compares (a copy)."""
        return {c: copy.deepcopy({k: v for k, v in vars(i).items() if not k.startswith("_")})
                for c, i in self.instances.items()}


class Dispatcher:
    """Runs calls on `backends`: only the functions the involved classes' docs list may run."""

    def __init__(self, backends: Backends):
        self.backends = backends
        self.owner: dict[str, str] = {}  # function name -> class (the last involved class listing it, as BFCL maps)
        for class_name in backends.instances:
            self.owner.update(dict.fromkeys(function_names(class_name), class_name))

    def _method(self, name: Any) -> tuple[str, Any] | None:
        """(class, bound method) for a listed public method name, else None."""
        if not isinstance(name, str) or name not in self.owner or not name.isidentifier() or name.startswith("_"):
            return None
        class_name = self.owner[name]
        function = inspect.getattr_static(backend_class(class_name), name, None)
        if not inspect.isfunction(function):
            return None
        return class_name, getattr(self.backends.instances[class_name], name)

    def call(self, name: Any, arguments: Any) -> CallOutcome:
        """Runs one call, or refuses it; never raises for any name or arguments."""
        shown = name if isinstance(name, str) else repr(name)
        found = self._method(name)
        if found is None:
            return refusal(shown[:200], "unknown_function",
                           f"{shown[:200]!r} is not one of the available functions")
        class_name, method = found
        if not isinstance(arguments, dict):
            return refusal(name, "bad_arguments", f"arguments must be a JSON object, got {type(arguments).__name__}")
        problem = plain_json_problem(arguments)
        if problem is None:
            try:
                inspect.signature(method).bind(**arguments)
            except TypeError as e:
                problem = str(e)
        problem = problem or _cost_problem(class_name, name, arguments)
        if problem is not None:
            return refusal(name, "bad_arguments", f"{name}: {problem}")
        if class_name == FILE_SYSTEM:
            outcome, refused = guarded_call(self.backends.instances[class_name], name,
                                            lambda: self._run(name, method, copy.deepcopy(arguments)))
            return outcome if refused is None else refusal(name, "bad_arguments", refused)
        return self._run(name, method, copy.deepcopy(arguments))

    @staticmethod
    def _run(name: str, method: Any, arguments: dict[str, Any]) -> CallOutcome:
        # MathAPI sets the process-wide decimal precision and mpmath.mp.dps; both are restored after
        # the call, and the result is written first (an mpf's repr depends on mp.dps).
        saved_dps = mpmath.mp.dps
        try:
            with decimal.localcontext():
                result = format_result(method(**arguments))
            return CallOutcome(name=name, result=result, observation=result)
        except Exception as e:  # noqa: BLE001 - a backend failure is the agent's error observation
            text = bound_text(f"Error during execution: {e}", MAX_ERROR_CHARS)
            return CallOutcome(name=name, result=text, observation=json.dumps({"error": text}, ensure_ascii=False),
                               error="backend_exception")
        finally:
            mpmath.mp.dps = saved_dps

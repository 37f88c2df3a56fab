"""The API registry: typed parameter signatures, the upstream-style argument conversion, descriptions.

Every API is a plain function `handler(state, **params)` registered with its parameter signature.
Two suites exist: "level-1-2" (the APIs over `init_database/`) and "level-3" (the planning APIs,
whose data lives in `level3_data.json`); two names (AddMeeting, QueryMeeting) have a variant in each.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
from pathlib import Path
from typing import Any, Callable, Mapping

SUITES = ("level-1-2", "level-3")
_DESCRIPTIONS_FILE = Path(__file__).with_name("descriptions.json")


class ApiError(Exception):
    """An API's own failure: its text is the recorded `exception` of the call."""


@dataclasses.dataclass(frozen=True)
class Param:
    """One input parameter: its name, declared type ("str", "int", "float", "bool", "list", "dict") and need."""

    name: str
    type: str
    required: bool = True


@dataclasses.dataclass(frozen=True)
class ApiSpec:
    """A registered API: name, suite, parameter signature and the function that runs it."""

    name: str
    suite: str
    params: tuple[Param, ...]
    handler: Callable[..., Any]

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


REGISTRY: dict[str, dict[str, ApiSpec]] = {suite: {} for suite in SUITES}


def parse_signature(signature: str) -> tuple[Param, ...]:
    """'token:str content:str time?:str' -> Params (a '?' after the name marks an optional one)."""
    params = []
    for item in signature.split():
        name, _, type_ = item.partition(":")
        optional = name.endswith("?")
        params.append(Param(name.rstrip("?"), type_ or "str", not optional))
    return tuple(params)


def register(name: str, signature: str = "", suite: str = "level-1-2"):
    """Decorator: registers `handler(state, **params)` as API `name` of `suite`."""
    def wrap(handler):
        if name in REGISTRY[suite]:
            raise ValueError(f"API {name} registered twice in suite {suite}")
        REGISTRY[suite][name] = ApiSpec(name, suite, parse_signature(signature), handler)
        return handler
    return wrap


def convert(value: Any, type_: str) -> Any:
    """Converts a text argument to the declared type, as upstream does (only text is converted).

    Raises ValueError with a short reason when the text does not read as that type."""
    if type_ == "str":
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError("expected text")
        return value if isinstance(value, str) else str(value)
    if not isinstance(value, str):
        checks = {"int": (int,), "float": (int, float), "bool": (bool,), "list": (list, tuple), "dict": (dict,)}
        if type_ in checks and (not isinstance(value, checks[type_]) or (type_ != "bool" and isinstance(value, bool))):
            raise ValueError(f"expected {type_}")
        if type_ == "float" and isinstance(value, int):
            return float(value)              # as upstream: a float parameter reads 130000 as 130000.0
        return list(value) if isinstance(value, tuple) else value
    text = value.strip()
    if type_ == "int":
        return int(text)
    if type_ == "float":
        return float(text)
    if type_ == "bool":
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ValueError("expected True or False")
    if type_ in ("list", "dict"):
        try:
            parsed = ast.literal_eval(text)   # a Python literal only: never eval
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            try:
                parsed = json.loads(text)     # JSON spellings (true, null) too
            except (ValueError, RecursionError) as error:
                raise ValueError(f"not a {type_} literal") from error
        if not isinstance(parsed, list if type_ == "list" else dict):
            raise ValueError(f"expected {type_}")
        return parsed
    return value


def bind(spec: ApiSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """The converted arguments of a call, or ApiError naming the missing/unexpected/mistyped parameter."""
    unexpected = [key for key in params if spec.param(key) is None]
    if unexpected:
        raise ApiError(f"Unexpected parameter(s) for {spec.name}: {', '.join(map(str, unexpected))}.")
    missing = [p.name for p in spec.params if p.required and p.name not in params]
    if missing:
        raise ApiError(f"Missing required parameter(s) for {spec.name}: {', '.join(missing)}.")
    bound = {}
    for key, value in params.items():
        declared = spec.param(key).type
        try:
            bound[key] = convert(value, declared)
        except (ValueError, TypeError) as error:
            raise ApiError(f"Parameter {key} of {spec.name} must be {declared} ({error}): got {value!r}.") from None
    return bound


def fits(spec: ApiSpec, params: Mapping[str, Any]) -> bool:
    """Whether `params` names exactly the parameters `spec` accepts (all required ones present)."""
    return all(spec.param(k) is not None for k in params) and all(
        p.name in params for p in spec.params if p.required)


@functools.lru_cache(maxsize=1)
def _descriptions() -> dict[str, Any]:
    return json.loads(_DESCRIPTIONS_FILE.read_text(encoding="utf-8"))


def description(name: str, suite: str, for_searcher: bool = False) -> dict[str, Any] | None:
    """The API's description dict as the data shows it (module docstring of descriptions.json's `_source`).

    `for_searcher`: the text the level-2 tool searcher returns where it differs from the prompts' text."""
    table = _descriptions()
    if suite == "level-3":
        found = table["level-3"].get(name)
    else:
        found = (table["searcher"].get(name) if for_searcher else None) or table["given"].get(name)
    return json.loads(json.dumps(found)) if found is not None else None


def require_text(value: Any, message: str) -> str:
    """`value` if it is non-empty text, else ApiError(message)."""
    if not isinstance(value, str) or not value.strip():
        raise ApiError(message)
    return value


__all__ = ["ApiError", "ApiSpec", "Param", "REGISTRY", "SUITES", "bind", "convert", "description", "fits",
           "parse_signature", "register", "require_text"]

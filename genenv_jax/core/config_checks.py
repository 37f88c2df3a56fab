"""Validation helpers for config sections: unknown keys, wrong types and out-of-range values raise
errors that name the offending key or option (the run config's `ConfigError`, one line). A leaf
module: it imports nothing from the package."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Mapping, Sequence


class ConfigError(ValueError):
    """A config value is invalid; the message is one line naming the key."""


def dataclass_kwargs(cls: type, section: Mapping[str, Any], what: str | None = None) -> dict[str, Any]:
    """A config section (dict or ConfigDict) as kwargs of dataclass `cls`; unknown keys raise, named.

    `what` names the section in the error (default: the class name), e.g.
    `unknown optimizer config keys ['lr']; known: [...]`.
    """
    values = dict(section)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise KeyError(f"unknown {what or cls.__name__} keys {unknown}; known: {sorted(known)}")
    return values


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    """Raises a ValueError naming the option when `value` is not one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name} {value!r} not in {tuple(choices)}")


def to_dict(config: Any) -> dict[str, Any]:
    """A ConfigDict (or nested mapping) as plain nested dicts."""
    if hasattr(config, "to_dict"):
        return config.to_dict()
    return {k: to_dict(v) if isinstance(v, Mapping) else v for k, v in dict(config).items()}


def failure(path: str, value: Any, problem: str) -> ConfigError:
    """The one-line error for `config.<path>=<value>`."""
    return ConfigError(f"config.{path}={value!r}: {problem}")


def check_type(path: str, value: Any, annotation: Any) -> Any:
    """Checks (and mildly coerces: int -> float) one value against a field annotation."""
    if typing.get_origin(annotation) is typing.Literal:
        annotation = str
    options = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
        else (annotation,)
    if value is None:
        if type(None) in options:
            return None
        raise failure(path, value, "must be set")
    for option in options:
        if option is bool and isinstance(value, bool):
            return value
        if option is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if option is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise failure(path, value, "must be a finite number")
            return float(value)
        if option is str and isinstance(value, str):
            return value
    names = "/".join(getattr(o, "__name__", str(o)) for o in options if o is not type(None))
    raise failure(path, value, f"must be {names}")


def section(cls: type, tree: Mapping[str, Any], path: str, *, skip: tuple[str, ...] = (),
             extra: Mapping[str, Any] | None = None) -> Any:
    """`cls(**tree)` with unknown keys, wrong types and the class's own checks reported by key path."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    if not isinstance(tree, Mapping):
        raise failure(path, tree, "must be a section (a dict of keys)")
    settable = set(fields) - set(skip)
    unknown = sorted(set(tree) - settable)
    if unknown:
        raise ConfigError(f"config.{path}: unknown key {unknown[0]!r} (known: {', '.join(sorted(settable))})")
    kwargs = dict(extra or {})
    for name, field in fields.items():
        if name in kwargs or name in skip:
            continue
        if name not in tree:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ConfigError(f"config.{path}.{name}: missing")
            continue
        kwargs[name] = check_type(f"{path}.{name}", tree[name], hints[name])
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"config.{path}: {e}") from None


def check_positive(path: str, value: int, minimum: int = 1) -> None:
    if value < minimum:
        raise failure(path, value, f"must be >= {minimum}")


def check_in(path: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise failure(path, value, f"expected one of {', '.join(choices)}")


def check_fraction(path: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise failure(path, value, "must lie in [0, 1]")

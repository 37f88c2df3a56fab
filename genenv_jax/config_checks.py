"""Validation helpers for config sections: unknown keys and out-of-range choices raise errors that
name the offending key or option. A leaf module: it imports nothing from the package."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence


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

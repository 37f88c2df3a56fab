"""Config sections declared once, as dataclasses, and validated from a config tree.

A field declared with `setting(default, doc, choices=..., minimum=..., ...)` carries its default,
its one-line doc and its allowed values; `section(cls, tree, path)` reads a tree into the class and
reports unknown keys, wrong types and values outside the declaration with one line that names the
full key (`ConfigError`: `config.agent.train.loss.clip_high=-1.0: must be >= 0`); `defaults(cls)`
is the tree of declared defaults (what configs/base.py builds its ConfigDict from). A section built
directly (`GRPOConfig(clip_high=-1)`) checks the same declarations with `check_fields` in its
`__post_init__`; a rule over several keys raises `KeyProblem` naming the key it reports, which
`section` names by its full path. A leaf module: it imports nothing from the package."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Callable, Mapping, Sequence


class ConfigError(ValueError):
    """A config value is invalid; the message is one line naming the key."""


class KeyProblem(ValueError):
    """A section's value that breaks a rule, raised by the section itself (`check_fields`, or a rule
    over several keys in its `__post_init__`): `key` is the field's name, so that `section` can
    report it under the key's full path; on its own it reads `GRPOConfig.clip_high=-1.0: must be >= 0`."""

    def __init__(self, owner: Any, key: str, problem: str):
        self.key, self.value, self.problem = key, getattr(owner, key), problem
        super().__init__(f"{type(owner).__name__}.{key}={self.value!r}: {problem}")


def setting(default: Any = dataclasses.MISSING, doc: str = "", *, choices: Sequence[Any] | None = None,
            minimum: float | None = None, fraction: bool = False, check: Callable[[Any], str | None] | None = None,
            factory: Callable[[], Any] | None = None, in_tree: bool = True) -> Any:
    """A declared config key: its default (or `factory` for a mutable one), a one-line `doc`, and
    what values are allowed: one of `choices`, at least `minimum`, within [0, 1] (`fraction`), or
    `check(value)` returning the problem (None when fine). `in_tree` False: a field the run config
    derives or a preset sets, absent from the default tree."""
    metadata = {"doc": doc, "choices": None if choices is None else tuple(choices), "minimum": minimum,
                "fraction": fraction, "check": check, "in_tree": in_tree}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Placeholder:
    """A default of None for a key of type `kind` (a ConfigDict placeholder, so overrides type-check)."""

    kind: type


def defaults(cls: type, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The tree of `cls`'s declared defaults: nested dataclass defaults as sub-trees, a None default
    of an optional type as a `Placeholder`, fields declared `in_tree=False` left out. `overrides`
    ({"key": value} or {"section.key": value}) replace defaults."""
    hints = typing.get_type_hints(cls)
    tree: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if not field.metadata.get("in_tree", True):
            continue
        if field.default is not dataclasses.MISSING:
            value = field.default
        elif dataclasses.is_dataclass(field.default_factory):  # a nested section: its own declarations
            tree[field.name] = defaults(field.default_factory)
            continue
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            continue
        if value is None:
            kinds = [t for t in typing.get_args(hints[field.name]) if t is not type(None)]
            value = Placeholder(kinds[0]) if len(kinds) == 1 and isinstance(kinds[0], type) else None
        tree[field.name] = value
    for key, value in (overrides or {}).items():
        tree = _override(tree, key, value)
    return tree


def _override(tree: Mapping[str, Any], key: str, value: Any) -> dict[str, Any]:
    """`tree` with the value at dotted `key` replaced."""
    head, _, rest = key.partition(".")
    return {**tree, head: _override(tree[head], rest, value) if rest else value}


def declared_problem(value: Any, metadata: Mapping[str, Any]) -> str | None:
    """What is wrong with `value` by the rules a `setting` declares, checked in a fixed order
    (choices, minimum, fraction, check), or None. None itself passes: an optional key's type allows
    it, which `check_type` checks."""
    if value is None:
        return None
    if metadata.get("choices") is not None and value not in metadata["choices"]:
        return f"expected one of {', '.join(map(str, metadata['choices']))}"
    if metadata.get("minimum") is not None and value < metadata["minimum"]:
        return f"must be >= {metadata['minimum']}"
    if metadata.get("fraction") and not 0.0 <= value <= 1.0:
        return "must lie in [0, 1]"
    if metadata.get("check") is not None:
        return metadata["check"](value) or None
    return None


def check_declared(path: str, value: Any, metadata: Mapping[str, Any]) -> None:
    """Raises the one-line `ConfigError` for `config.<path>` when `value` breaks its declared rules."""
    problem = declared_problem(value, metadata)
    if problem:
        raise failure(path, value, problem)


def positive(value: float) -> str | None:
    """> 0"""
    return None if value > 0 else "must be > 0"


def check_fields(owner: Any) -> None:
    """A section's own check of its declared rules (call it from `__post_init__`), so a section built
    directly is held to the rules `section` checks on a config tree; raises `KeyProblem`."""
    for field in dataclasses.fields(owner):
        problem = declared_problem(getattr(owner, field.name), field.metadata)
        if problem:
            raise KeyProblem(owner, field.name, problem)


def rule_text(metadata: Mapping[str, Any]) -> str:
    """The declared rules of a key in words, for docs/config.md: its choices, minimum, [0, 1], and a
    `check` function's docstring (each check states its rule there)."""
    parts = []
    if metadata.get("choices") is not None:
        parts.append("one of " + ", ".join(map(str, metadata["choices"])))
    if metadata.get("minimum") is not None:
        parts.append(f">= {metadata['minimum']}")
    if metadata.get("fraction"):
        parts.append("in [0, 1]")
    if metadata.get("check") is not None:
        parts.append(" ".join((metadata["check"].__doc__ or metadata["check"].__name__).split()))
    return "; ".join(parts)


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


def name_list(value: Any, key: str) -> tuple[str, ...]:
    """A list-valued option (categories, levels, task types) as a tuple of names: a list or tuple of
    strings as given, a string as its comma-separated parts ("simple_python" -> ("simple_python",),
    "a,b" -> ("a", "b")): never split into characters, as iterating a string would. Anything else
    is a ValueError naming `key`."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"{key}={value!r}: expected a list of names or a comma-separated string")


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
    if typing.get_origin(annotation) is tuple:  # tuple[T, ...]: a list, a tuple or "a,b,c"
        (item, *_) = typing.get_args(annotation)
        if isinstance(value, str):
            value = (value,)
        if item is str and isinstance(value, (list, tuple)):  # `--config.x=a,b` arrives as ("a,b",)
            value = [part.strip() for v in value for part in (v.split(",") if isinstance(v, str) else [v])
                     if not isinstance(part, str) or part.strip()]
        if not isinstance(value, (list, tuple)):
            raise failure(path, value, f"must be a list of {getattr(item, '__name__', item)}")
        return tuple(check_type(f"{path}[{i}]", v, item) for i, v in enumerate(value))
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
    """`cls(**tree)` with unknown keys, wrong types and the class's own checks reported by key path.
    A field whose default is a nested section (`setting(factory=SomeSection)`) is read from its
    sub-tree the same way, unless `extra` gives it or `skip` leaves it out."""
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
        if dataclasses.is_dataclass(field.default_factory):  # a nested section
            kwargs[name] = section(field.default_factory, tree.get(name, {}), f"{path}.{name}")
            continue
        if name not in tree:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ConfigError(f"config.{path}.{name}: missing")
            continue
        kwargs[name] = check_type(f"{path}.{name}", tree[name], hints[name])
        check_declared(f"{path}.{name}", kwargs[name], field.metadata)
    try:
        return cls(**kwargs)
    except KeyProblem as e:
        raise failure(f"{path}.{e.key}", e.value, e.problem) from None
    except (ValueError, TypeError) as e:
        raise ConfigError(f"config.{path}: {e}") from None

"""docs/config.md, generated: every key of the run config with its type, default, rule and doc, read
from the declarations (`core.config_checks.setting`) that validate it.

    python -m genenv_jax.tools.config_docs --out docs/config.md     # or without --out: the page on stdout

The keys are those of the default run config (`configs.run_config.run_defaults`, what
`configs.base.get_config()` holds); each is matched to the dataclass field that declares it, so the
page cannot drift from the schema: tests/tools/test_config_docs.py renders it again and fails when
docs/config.md differs, and fails when a key of the tree has no declaration or no doc.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from typing import Any, Mapping, Sequence

from genenv_jax.configs.base import FREE_FORM  # the domain's own keys: one leaf
from genenv_jax.configs.experience_settings import REMOVED_EXPERIENCE_KEYS, ExperienceSettings
from genenv_jax.configs.run_config import RunConfig, run_defaults
from genenv_jax.configs.settings import POLICY_RULES, PolicySettings, SimulatorObjectiveSettings, loss_class
from genenv_jax.core.config_checks import Placeholder, rule_text
from genenv_jax.core.errors import command
from genenv_jax.rl import POLICY_LOSSES
from genenv_jax.tools.api_docs import write_page

PROGRAM = "python -m genenv_jax.tools.config_docs"

@dataclasses.dataclass(frozen=True)
class Declared:
    """One leaf of the run config and the field that declares it."""

    key: str          # dotted, e.g. "agent.train.loss.clip_high"
    section: str      # the dotted section it belongs to ("" for a top-level key)
    owner: type       # the dataclass that declares it
    kind: str         # its type, as written in the declaration
    default: Any      # its default in the run config (a policy's own, e.g. the simulator's learning rate)
    rule: str         # its allowed values in words ('' when any value of its type is)
    doc: str


def sections() -> dict[str, type]:
    """Every section of the run config ("" the top, "agent.train." ...) and the dataclass whose fields
    are its keys: the nested sections of each class, a policy's loss section by its update rule, and
    the simulator's loss section of each other registered rule (`simulator.train.grpo`)."""
    found: dict[str, type] = {}

    def nested(prefix: str, cls: type) -> None:
        found[prefix] = cls
        for field in dataclasses.fields(cls):
            if field.metadata.get("in_tree", True) and dataclasses.is_dataclass(field.default_factory):
                nested(f"{prefix}{field.name}.", field.default_factory)

    nested("", RunConfig)
    for name in ("agent", "simulator"):
        nested(f"{name}.", PolicySettings)
        found[f"{name}.train.loss."] = loss_class(POLICY_RULES[name])
    for rule in POLICY_LOSSES:
        if rule != POLICY_RULES["simulator"]:
            found[f"simulator.train.{rule}."] = loss_class(rule)
    nested("experience.", ExperienceSettings)
    return found


# Keys whose declaration is not in their section's class: the simulator's objective keys sit in its
# `train` section, and `share_agent_init` is a run-level setting written under `simulator`.
ELSEWHERE = {"simulator.share_agent_init": RunConfig, "simulator.train.objective": SimulatorObjectiveSettings,
             "simulator.train.invalid_reward": SimulatorObjectiveSettings}


def leaves(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The default tree's leaves by dotted key (a free-form section such as domain.options is one leaf)."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and f"{prefix}{key}" not in FREE_FORM:
            out |= leaves(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def declarations() -> list[Declared]:
    """Every leaf of the default run config, in the tree's order, with its declaration. A leaf no
    field declares is a LookupError naming it."""
    owners = sections()
    out = []
    for key, default in leaves(run_defaults()).items():
        prefix, _, name = key.rpartition(".")
        section = f"{prefix}." if prefix else ""
        owner = ELSEWHERE.get(key) or owners.get(section)
        fields = {f.name: f for f in dataclasses.fields(owner)} if owner else {}
        if name not in fields:
            raise LookupError(f"config.{key} has no declaration (no field {name!r} in the section's dataclass)")
        field = fields[name]
        out.append(Declared(key=key, section=prefix, owner=owner, kind=type_name(typing.get_type_hints(owner)[name]),
                            default=None if isinstance(default, Placeholder) else default,
                            rule=rule_text(field.metadata), doc=field.metadata.get("doc", "")))
    return out


def type_name(annotation: Any) -> str:
    """`float | None`, `tuple[str, ...]`, `str` (a Literal's values are its rule): as the declaration reads."""
    if typing.get_origin(annotation) is typing.Literal:
        return "str"
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("NoneType", "None")


def value_text(value: Any) -> str:
    """A default as it is written on the command line (`--config.key=...`)."""
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    if isinstance(value, str):
        return repr(value) if not value else value
    return repr(value)


def item(d: Declared) -> str:
    """One key's line: `key` (type, default; rule): doc."""
    rule = f"; {d.rule}" if d.rule else ""
    return f"- `{d.key}` ({d.kind}, default `{value_text(d.default)}`{rule}): {d.doc}"


def render() -> str:
    """The whole page, as docs/config.md holds it."""
    declared = declarations()
    lines = [
        "# Config reference",
        "",
        "Generated by `python -m genenv_jax.tools.config_docs --out docs/config.md` from the declarations",
        "(`core.config_checks.setting`: each key's default, one-line doc and allowed values); do not edit it",
        "by hand (`tests/tools/test_config_docs.py` fails when it is stale). How configs, presets and overrides",
        "work: [coevolve.md](coevolve.md#config).",
        "",
        f"{len(declared)} keys. Any of them is set with `--config.<key>=<value>` (a list as `a,b`). Every value is",
        "checked before any work starts; a bad one stops the run with one line that names the full key, e.g.",
        "`config.agent.train.loss.clip_high=-1.0: must be >= 0`. A policy's `train.loss` has no `temperature`:",
        "it is the policy's `sampling.temperature`.",
        "",
        "The experience model's section (`experience`, mode=dreamgym) holds only the keys it reads. Until",
        f"2026-12 it copied a whole policy section; its {len(REMOVED_EXPERIENCE_KEYS)} other keys (optimizer, loss,",
        "batching and LoRA keys) were read by nothing and are gone. A config that still sets one is refused",
        "saying so; a run saved with them resumes, their saved values ignored.",
        "",
    ]
    by_section: dict[str, list[Declared]] = {}
    for d in declared:
        by_section.setdefault(d.section, []).append(d)
    for section, keys in by_section.items():
        lines += [f"## `{section}`" if section else "## Top-level keys", ""]
        owners = sorted({f"`{d.owner.__module__}.{d.owner.__qualname__}`" for d in keys})
        lines += [f"Declared in {', '.join(owners)}.", ""]
        lines += [item(d) for d in keys] + [""]
    return "\n".join(lines).rstrip("\n") + "\n"


@command(PROGRAM)
def main(argv: Sequence[str] | None = None) -> int:
    """Writes the page to `--out` or prints it; the same command line as `api_docs`."""
    return write_page(argv, PROGRAM, __doc__.split("\n")[0], render)


if __name__ == "__main__":
    sys.exit(main())

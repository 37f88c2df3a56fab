"""The command-line pieces shared by the absl commands (`genenv_jax.main`, the study, the TPU memory
planner, the DreamGym comparison): the `--config` and `--workdir` flags, a parser that turns config
errors into one line, and `die` / `one_line` (from `core.errors`).

Flags are defined on first request, so a command lists only the flags it asks for (and importing
two commands in one process does not define a flag twice)."""

from __future__ import annotations

from typing import Sequence

from absl import flags
from ml_collections import config_flags

from genenv_jax.core.errors import die, one_line

__all__ = ["command_line_parser", "config_flag", "die", "one_line", "resolve_config_argument", "workdir_flag"]

_DEFINED: dict[str, flags.FlagHolder] = {}


def config_flag() -> flags.FlagHolder:
    """`--config`: a config file (`configs/bfcl.py:tiny`) or a packaged config name (`bfcl:tiny`)."""
    if "config" not in _DEFINED:
        _DEFINED["config"] = config_flags.DEFINE_config_file(
            "config", None, "Config file or packaged config name, e.g. configs/bfcl.py:tiny or bfcl:tiny.",
            lock_config=True)
    return _DEFINED["config"]


def workdir_flag(help_text: str) -> flags.FlagHolder:
    """`--workdir`, with the command's own help text (the first command to ask defines it)."""
    if "workdir" not in _DEFINED:
        _DEFINED["workdir"] = flags.DEFINE_string("workdir", None, help_text)
    return _DEFINED["workdir"]


def resolve_config_argument(argv: Sequence[str]) -> list[str]:
    """Rewrites `--config=NAME[:preset]` to the packaged config's file when NAME is not a file path."""
    from genenv_jax.configs import config_path

    out = []
    for arg in argv:
        if arg.startswith("--config="):
            value = arg[len("--config="):]
            name, sep, preset = value.partition(":")
            path = config_path(name)
            if path is not None and not name.endswith(".py"):
                arg = f"--config={path}{sep}{preset}"
        out.append(arg)
    return out


def command_line_parser(program: str = "genenv_jax"):
    """An absl flags parser for `program` that turns config errors (unknown key, bad file, bad
    value) into one line `<program>: error: ...` and exit status 2."""
    def parse(argv: list[str]) -> list[str]:
        try:
            return flags.FLAGS(resolve_config_argument(argv))
        except flags.Error as e:
            die(f"bad command line: {one_line(e)}", program)
        except (AttributeError, KeyError) as e:  # ml_collections: an override names a key the config lacks
            key = str(e).strip("\"'")
            die(f"unknown config key {key!r} in an override (run with --config=... only to see the valid keys "
                "in the config file)", program)
        except (FileNotFoundError, ImportError, ValueError, TypeError) as e:
            die(f"cannot load the config: {one_line(e)}", program)
    return parse

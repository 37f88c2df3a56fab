"""The command-line pieces shared by the absl commands (`genenv_jax.main`, the study, the TPU memory
planner, the DreamGym experience fit and comparison): the `--config` and `--workdir` flags, a parser
that turns config and flag errors into one line, `run` (absl's `app.run` with that parser), and
`command` / `die` / `one_line` (from `core.errors`, which the argparse commands use directly).

Flags are defined on first request, so a command lists only the flags it asks for (and importing
two commands in one process does not define a flag twice)."""

from __future__ import annotations

import contextlib
import os
import traceback
from typing import Callable, Iterator, Sequence

from absl import flags
from ml_collections import config_flags

from genenv_jax.core import absl_flags
from genenv_jax.core.absl_flags import parse_flags
from genenv_jax.core.errors import (CommandError, check_output_outside, check_output_path, command, die, error_text, is_storage_error,
                                    one_line)

__all__ = ["CommandError", "check_output_outside", "check_output_path", "command", "command_line_parser", "config_flag", "die", "error_text", "is_storage_error",
           "no_empty_directory_left", "one_line", "resolve_config_argument", "run", "workdir_flag"]

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


def _joined_config_argument(argv: Sequence[str]) -> list[str]:
    """`--config VALUE` (two arguments, which absl accepts) as `--config=VALUE`, so the packaged
    name is resolved and the `--config.x=` overrides that follow apply to it."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in ("--config", "-config") and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out.append(f"--config={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def resolve_config_argument(argv: Sequence[str]) -> list[str]:
    """Rewrites `--config=NAME[:preset]` (or `--config NAME[:preset]`) to the packaged config's file
    when NAME is not a file path."""
    out = []
    for arg in _joined_config_argument(argv):
        if arg.startswith("--config="):
            value = arg[len("--config="):]
            name, sep, preset = value.partition(":")
            if name.endswith(".py"):  # a file: no need to import the packaged configs
                out.append(arg)
                continue
            from genenv_jax.configs import config_path

            path = config_path(name)
            if path is not None:
                arg = f"--config={path}{sep}{preset}"
        out.append(arg)
    return out


def _config_file(argv: Sequence[str]) -> str | None:
    """The file part of the (resolved) `--config=FILE[:preset]` argument, if one is given."""
    return next((a[len("--config="):].partition(":")[0] for a in argv if a.startswith("--config=")), None)


def check_config_file(path: str | None, program: str) -> None:
    """Refuses a `--config` file that is missing or is a directory, before absl tries to load it
    (ml_collections would report either only on first use, as an opaque I/O error)."""
    if path is None:
        return
    if not os.path.exists(path):
        die(f"--config {path}: no such file (a config file, e.g. configs/bfcl.py:tiny, or a packaged "
            "name, e.g. bfcl:tiny)", program)
    if os.path.isdir(path):
        die(f"--config {path}: is a directory, not a config file (e.g. configs/bfcl.py)", program)


def _config_frame(error: BaseException, path: str) -> str | None:
    """`FILE:LINE` of the deepest traceback frame in the config file `path` (None: the error did
    not come from the config's own code, so it is a bug and keeps its traceback)."""
    real = os.path.realpath(path)
    if isinstance(error, SyntaxError) and (error.filename is None or os.path.realpath(error.filename) == real):
        return f"{path}:{error.lineno}" if error.lineno else path  # None: a null byte, found before any line
    frames = [f for f in traceback.extract_tb(error.__traceback__) if os.path.realpath(f.filename) == real]
    return f"{path}:{frames[-1].lineno}" if frames else None


def explain_config_error(error: BaseException, path: str | None) -> str | None:
    """The one-line cause of an error raised while absl parses the flags with `--config=path`: a
    config file that lacks `get_config`, returns None or raises while loading (named with its
    line), an override naming a key the config lacks. None: not a config cause."""
    text = str(error)
    if path is not None and "--config must have a value other than None" in text:
        return f"--config {path}: get_config() returned None (a missing return statement?)"
    if path is not None and "Error whilst parsing config file" in text:  # get_config raised ValueError / TypeError
        return f"cannot load the config: {path}: {one_line(error)}"
    if isinstance(error, flags.Error):
        return None
    if isinstance(error, AttributeError) and path is not None and getattr(error, "name", None) == "get_config":
        return f"--config {path}: defines no get_config() function"
    where = _config_frame(error, path) if path is not None else None
    if where is not None:  # raised by the config file's own code (a KeyError in get_config included)
        return f"cannot load the config: {where}: {type(error).__name__}: {one_line(error)}"
    if isinstance(error, (AttributeError, KeyError)):  # ml_collections: an override names a key the config lacks
        return (f"unknown config key {text.strip(chr(34) + chr(39))!r} in an override (run with --config=... "
                "only to see the valid keys in the config file)")
    return None


def _check_loaded_config(argv: Sequence[str], program: str) -> None:
    """After parsing: a config that failed to load (ml_collections defers that error to first use)
    or whose `get_config` returned None is refused now, not inside the command's work."""
    path = _config_file(argv)
    if path is None or "config" not in _DEFINED:
        return
    value = _DEFINED["config"].value
    if value is None:
        die(f"--config {path}: get_config() returned None (a missing return statement?)", program)
    try:
        hasattr(value, "keys")  # ml_collections' stand-in for a config that failed raises here
    except OSError as e:
        die(f"cannot load the config: {error_text(e.__cause__ or e)}", program)


def command_line_parser(program: str = "genenv_jax") -> Callable[[list[str]], list[str]]:
    """An absl flags parser for `program` that turns flag and config errors (unknown key, missing or
    broken file, bad value) into one line `<program>: error: ...` with exit status 2, and lets
    `--help` / `--helpfull` exit 0."""
    def parse(argv: list[str]) -> list[str]:
        argv = resolve_config_argument(argv)
        path = _config_file(argv)
        check_config_file(path, program)
        rest = parse_flags(argv, program, lambda e: explain_config_error(e, path))
        _check_loaded_config(argv, program)
        return rest
    return parse


def run(main: Callable, program: str, parser: Callable[[list[str]], list[str]] | None = None) -> None:
    """absl's `app.run(main)` with the one-line parser (`command_line_parser(program)` unless given)."""
    absl_flags.run(main, program, parser or command_line_parser(program))


@contextlib.contextmanager
def no_empty_directory_left(path: str | os.PathLike) -> Iterator[None]:
    """Removes the local directory `path` again when the block fails and leaves it empty having
    created it (a run refused while it sets up leaves nothing behind); a failure after the first
    file is written keeps the directory, to resume from."""
    text = os.fspath(path)
    created = "://" not in text and not os.path.lexists(text)
    try:
        yield
    except BaseException:
        if created and os.path.isdir(text) and not os.listdir(text):
            os.rmdir(text)
        raise

"""How every command ends on an expected failure: one line `<program>: error: <cause>` on stderr and
exit status 2 (a traceback is for bugs, not for a bad path or value).

Expected failures (`EXPECTED_ERRORS`, plus the classes a command adds) are what a careless or hostile
input can cause: an `OSError` (a missing, unreadable, occupied or read-only path, a full disk), a
`ValueError` (a bad flag value, malformed or truncated data: JSON, CSV, UTF-8; the project's own data
and config errors derive from it) and a `CommandError` (an argument a command refuses). Anything else
(`TypeError`, `KeyError`, `AttributeError`, ...) is a bug and keeps its traceback; so does an expected
error when `GENENV_JAX_TRACEBACK=1` is set, to see where it came from.

Stdlib only: `tpu/tpu.py` and `tpu/slurm.py` run where only Python and gcloud are installed.
"""

from __future__ import annotations

import argparse
import errno
import functools
import json
import os
import sys
from typing import Callable, Mapping, NoReturn, Sequence


class CommandError(ValueError):
    """An argument or input a command refuses before (or instead of) doing its work; the text is the
    whole cause, naming the flag or the file (and line)."""


EXPECTED_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError)

# errno values whose cause is the storage, not the path: only these get a storage hint.
_STORAGE_HINTS = {errno.ENOSPC: "disk full?", errno.EDQUOT: "disk quota exceeded?",
                  errno.EROFS: "a read-only file system"}


def one_line(e: BaseException) -> str:
    """The last line of an exception's text (the cause, without a multi-line preamble), or its type name."""
    text = str(e).strip().splitlines()
    return (text[-1] if text else type(e).__name__).strip()


def is_storage_error(e: BaseException) -> bool:
    """True for an OSError whose cause is the storage (full disk, quota, read-only file system),
    not the path it names."""
    return isinstance(e, OSError) and e.errno in _STORAGE_HINTS


def error_text(e: BaseException) -> str:
    """The one-line cause of an expected error: an OSError as `<path>: <reason>` (with a storage
    hint only when its errno is about storage), anything else as `one_line`."""
    if isinstance(e, OSError) and e.strerror:
        where = f"{e.filename}: " if e.filename is not None else ""
        hint = _STORAGE_HINTS.get(e.errno)
        return f"{where}{e.strerror.lower()}" + (f" ({hint})" if hint else "")
    return one_line(e)


def die(message: str, program: str = "genenv_jax") -> NoReturn:
    """Prints `<program>: error: <message>` to stderr and exits with status 2."""
    print(f"{program}: error: {message}", file=sys.stderr)
    sys.exit(2)


def command(program: str, expected: Sequence[type[BaseException]] = ()) -> Callable[[Callable], Callable]:
    """Decorates a command's `main`: an expected error (`EXPECTED_ERRORS` and `expected`) raised
    anywhere inside it is printed as one line `<program>: error: <cause>` and `main` returns 2, so
    the same function serves `sys.exit(main())`, absl's `app.run` and in-process tests."""
    caught = (*EXPECTED_ERRORS, *expected)

    def decorate(main: Callable) -> Callable:
        @functools.wraps(main)
        def guarded(*args, **kwargs):
            try:
                return main(*args, **kwargs)
            except caught as e:
                if os.environ.get("GENENV_JAX_TRACEBACK") == "1":
                    raise
                print(f"{program}: error: {error_text(e)}", file=sys.stderr)
                return 2
        return guarded
    return decorate


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the shared error line: a usage error prints `<prog>: error: <message> (see
    --help)` alone (no usage block) and exits 2; `--help` prints the help and exits 0, as argparse does."""

    def error(self, message: str) -> NoReturn:
        die(f"{one_line(Exception(message))} (see --help)", self.prog)

    def _check_value(self, action: argparse.Action, value) -> None:
        """A value outside `choices`, in the same words on every Python: 3.12.8+ and 3.13.1+ print
        the choices unquoted and later versions may add a suggestion; this line is the same on all."""
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(map(repr, action.choices))
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from {choices})")


class Once(argparse.Action):
    """`action=Once`: an option that may be given at most once. argparse keeps the last of two
    (`--workdir a --workdir b` runs in b); a launcher that prints commands for a remote machine
    must not guess which one was meant."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = f"_once_{self.dest}"
        if getattr(namespace, seen, False):
            parser.error(f"{option_string} given twice ({getattr(namespace, self.dest)!r} and {values!r}); "
                         "give it once")
        setattr(namespace, seen, True)
        setattr(namespace, self.dest, values)


def check_not_empty(namespace: argparse.Namespace, flags: Sequence[str]) -> None:
    """Refuses a given flag whose value is empty or blank (`--zone ""` would reach gcloud, `--remote_dir ""`
    a `cd ''` on every worker); None (not given) is left to the flag's default or `required`."""
    for flag in flags:
        value = getattr(namespace, flag, None)
        if isinstance(value, str) and not value.strip():
            raise CommandError(f"--{flag} is empty; give a value")


def _nearest_existing(path: str) -> str:
    """`path` itself or its nearest ancestor that exists (where a new output would be created)."""
    while not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def check_output_outside(path: str | os.PathLike, flag: str,
                         inputs: Mapping[str, str | os.PathLike | None]) -> None:
    """Refuses, before any work, an output path that equals or lies inside one of `inputs` ({label:
    path}; None: not given): writing there would replace an input's files (a `--details` file
    inside the benchmark's database) or be deleted with it (an `--out` inside a run's checkpoints,
    which rotation removes). Paths are compared resolved, so a symlink or `..` does not hide an
    input; `gs://` paths are compared as text."""
    text = os.fspath(path)
    real = _resolved(text)
    for label, given in inputs.items():
        if given is None or os.fspath(given) == "":
            continue
        source = _resolved(os.fspath(given))
        if real == source:
            raise CommandError(f"{flag} {text} is also an input ({label} {os.fspath(given)}); give another path")
        if real.startswith(source.rstrip("/") + "/"):
            raise CommandError(f"{flag} {text} lies inside an input ({label} {os.fspath(given)}); "
                               "give a path outside it")


def _resolved(path: str) -> str:
    """A local path resolved through symlinks and `..`; a URL (`gs://...`) with its trailing slash dropped."""
    return path.rstrip("/") if "://" in path else os.path.realpath(path)


def check_output_path(path: str | os.PathLike, flag: str, *, directory: bool,
                      inputs: Mapping[str, str | os.PathLike | None] | None = None) -> None:
    """Refuses, before any work, an output path that equals or lies inside one of `inputs` ({label:
    path}, `check_output_outside`) or (a local one; `gs://` ones are the storage's to check) is taken
    by the wrong kind of entry (a file where a directory goes or the reverse), or lies under a file
    or a directory that cannot be written: a failure found only after the work would lose it."""
    text = os.fspath(path)
    check_output_outside(text, flag, inputs or {})
    if "://" in text:
        return
    real = os.path.realpath(text)
    if os.path.isdir(real) != directory and os.path.exists(real):
        raise CommandError(f"{flag} {text}: " + ("exists and is not a directory" if directory
                                                 else "is a directory, expected a file path"))
    base = _nearest_existing(real if directory else os.path.dirname(real))
    if not os.path.isdir(base):
        raise CommandError(f"{flag} {text}: {base} is not a directory")
    if not os.access(base, os.W_OK):
        raise CommandError(f"{flag} {text}: {base} is not writable")


def read_json_object(path: str | os.PathLike) -> dict:
    """The JSON object a user's file holds, or one line naming the file: a missing or unreadable file
    is its OSError (`<path>: <reason>`, `error_text`); bytes that are not UTF-8, text that is not
    JSON and a value that is not an object are a ValueError."""
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{os.fspath(path)}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{os.fspath(path)}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise ValueError(f"{os.fspath(path)}: not JSON (nested too deeply)") from None
    if not isinstance(value, dict):
        raise ValueError(f"{os.fspath(path)}: expected a JSON object, not {type(value).__name__}")
    return value


def check_at_least(value: int | float | None, flag: str, low: int | float) -> None:
    """Refuses a numeric flag below `low` (None: not given, accepted)."""
    if value is not None and not value >= low:
        raise CommandError(f"{flag}={value}: must be >= {low}")


def check_within(value: float, flag: str, low: float, high: float) -> None:
    """Refuses a numeric flag outside [low, high] (NaN included)."""
    if not low <= value <= high:
        raise CommandError(f"{flag}={value}: must lie in [{low}, {high}]")


def check_input_directory(path: str | os.PathLike, flag: str, hint: str = "") -> None:
    """Refuses an input directory flag whose path is missing or not a directory, naming the flag (and
    `hint`, how to get the directory) before the command reads anything under it."""
    if not os.path.isdir(path):
        problem = "not a directory" if os.path.exists(path) else "no such directory"
        raise CommandError(f"{flag} {path}: {problem}" + (f" ({hint})" if hint else ""))

"""absl's flag parsing and `app.run` with the shared error line (`core.errors`): `--help` and
`--helpfull` exit 0 (absl exits 1), a bad flag is one line `<program>: error: ...` with exit status
2 (absl prints a preamble and a hint over three lines, exit 1), and a command's own causes (a broken
config file) can be named by an `explain` hook. Used by every absl command; `genenv_jax.cli` adds
the `--config` handling."""

from __future__ import annotations

import contextlib
import logging as std_logging
import re
from typing import Callable

from absl import app, flags
from absl import logging as absl_logging

from genenv_jax.core.errors import die, one_line

# absl's help flags print the help and exit 1; a command asked for its help has not failed.
HELP_FLAGS = ("-?", "-h", "--help", "--helpshort", "--helpfull", "--helpxml")

# absl's text for a flag marked required and not given
_REQUIRED = re.compile(r"Flag (--\w+) must have a value other than None")
# absl's texts for a value its parser refused and for a flag nobody defined
_BAD_VALUE = re.compile(r"^flag (--[\w.]+=.*?): (.*)$")
_UNKNOWN = re.compile(r"^Unknown command line flag '([\w.]+)'")
# the parsers' reasons in words (Python's own texts quote the literal the flag already shows)
_REASONS = (("invalid literal for int()", "expected an integer"),
            ("could not convert string to float", "expected a number"))


def _flag_problem(error: flags.Error) -> str:
    """absl's flag error as `--name=value: problem` (or `--name: no such flag`), else its own text."""
    text = one_line(error)
    if (unknown := _UNKNOWN.match(text)) is not None:
        return f"--{unknown.group(1)}: no such flag (see --help)"
    if (bad := _BAD_VALUE.match(text)) is not None:
        reason = next((words for start, words in _REASONS if bad.group(2).startswith(start)), bad.group(2))
        return f"{bad.group(1)}: {reason}"
    return f"bad command line: {text}"

Explain = Callable[[BaseException], "str | None"]


class _BelowError(std_logging.Filter):
    def filter(self, record: std_logging.LogRecord) -> bool:
        return record.levelno >= std_logging.ERROR


@contextlib.contextmanager
def _no_absl_warnings():
    """Drops absl log records below ERROR while the flags are parsed: ml_collections logs a warning
    for a `get_config` returning None (which the parser reports itself), and absl would print it
    with a 'logging before flag parsing' preamble: three lines for one cause."""
    logger = absl_logging.get_absl_logger()
    drop = _BelowError()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def parse_flags(argv: list[str], program: str, explain: Explain | None = None) -> list[str]:
    """`flags.FLAGS(argv)` with each failure as one line. `explain(error)` names a cause the
    command knows (None: a flag error is `--name=value: problem`, any other error is re-raised,
    a bug keeping its traceback)."""
    try:
        with _no_absl_warnings():
            return flags.FLAGS(argv)
    except SystemExit as e:  # only absl's help flags exit while parsing
        asked = any(a.split("=")[0] in HELP_FLAGS for a in argv)
        raise SystemExit(0 if e.code == 1 and asked else e.code) from None
    except Exception as e:  # noqa: BLE001 - named below, or re-raised
        message = explain(e) if explain is not None else None
        required = _REQUIRED.search(str(e)) if isinstance(e, flags.IllegalFlagValueError) else None
        if message is None and required is not None:  # absl: "flag --x=None: Flag --x must have a value ..."
            message = f"{required.group(1)} is required; give a value (see --help)"
        if message is None and isinstance(e, flags.Error):
            message = _flag_problem(e)
        if message is None:
            raise
        die(message, program)


def flags_parser(program: str, explain: Explain | None = None) -> Callable[[list[str]], list[str]]:
    """An `app.run` flags parser for `program` (see `parse_flags`)."""
    return lambda argv: parse_flags(list(argv), program, explain)


def run(main: Callable, program: str, parser: Callable[[list[str]], list[str]] | None = None) -> None:
    """absl's `app.run(main)` with the one-line parser (`flags_parser(program)` unless given)."""
    app.run(main, flags_parser=parser or flags_parser(program))

"""How every command ends on an expected failure: one line `<program>: error: <cause>` on stderr and
exit status 2 (a traceback is for bugs, not for a bad path or value)."""

from __future__ import annotations

import sys
from typing import NoReturn


def one_line(e: BaseException) -> str:
    """The last line of an exception's text (the cause, without a multi-line preamble), or its type name."""
    text = str(e).strip().splitlines()
    return (text[-1] if text else type(e).__name__).strip()


def die(message: str, program: str = "genenv_jax") -> NoReturn:
    """Prints `<program>: error: <message>` to stderr and exits with status 2."""
    print(f"{program}: error: {message}", file=sys.stderr)
    sys.exit(2)

"""Checkpoint failures as one line: the innermost cause of an Orbax / TensorStore error, Orbax's
own tracebacks filtered out of the logs, and the coroutine leftovers a failed read reports."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
from collections.abc import Iterator

_MAX_CAUSE_CHARS = 300


def _innermost(error: BaseException) -> BaseException:
    """The deepest exception in `error`'s cause chain (Orbax wraps TensorStore's real reason)."""
    seen = {id(error)}
    while True:
        nxt = error.__cause__ or error.__context__
        if nxt is None or id(nxt) in seen:
            return error
        seen.add(id(nxt))
        error = nxt


def one_line_cause(error: BaseException) -> str:
    """A short single-line description of why `error` happened (type and first line of the cause)."""
    cause = _innermost(error)
    text = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    for noise in (" [tensorstore_spec=", " See full TensorStore details"):
        text = text.split(noise)[0]
    text = f"{type(cause).__name__}: {text}" if text else type(cause).__name__
    return text if len(text) <= _MAX_CAUSE_CHARS else text[:_MAX_CAUSE_CHARS - 3] + "..."


class _DropOrbaxTracebacks(logging.Filter):
    """Drops Orbax's own ERROR records that carry a traceback (hundreds of lines per failure);
    the same failure reaches the caller as one CheckpointError line."""

    def filter(self, record: logging.LogRecord) -> bool:
        from_orbax = f"{os.sep}orbax{os.sep}" in (record.pathname or "")
        return not (from_orbax and record.levelno >= logging.ERROR and record.exc_info)


_ORBAX_FILTER = _DropOrbaxTracebacks()


def install_orbax_log_filter() -> None:
    """Orbax logs through absl, i.e. the Python logger 'absl'; filter it once."""
    for name in ("absl", "orbax"):
        logger = logging.getLogger(name)
        if _ORBAX_FILTER not in logger.filters:
            logger.addFilter(_ORBAX_FILTER)


@contextlib.contextmanager
def quiet_orbax_leftovers() -> Iterator[None]:
    """Swallows the 'Exception ignored in: <coroutine ...>' reports that a failed Orbax read leaves
    behind (one per pending array read); collected here so they fire while the hook is set."""
    previous = sys.unraisablehook

    def hook(unraisable):
        code = getattr(unraisable.object, "cr_code", None)
        if code is not None and f"{os.sep}orbax{os.sep}" in code.co_filename:
            logging.debug("checkpoint: ignored leftover Orbax coroutine error: %s", unraisable.exc_value)
            return
        previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        gc.collect()
        sys.unraisablehook = previous

"""Seconds this process has spent compiling XLA programs, counted as JAX reports them
(`jax.monitoring`'s backend-compile event, which a persistent-cache hit also reports, briefly), so
a loop can say how much of a phase was compilation rather than running."""

from __future__ import annotations

import threading

_BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_lock = threading.Lock()
_totals = {"seconds": 0.0, "programs": 0}
_installed = False


def _listen(event: str, duration: float, **_: object) -> None:
    if event == _BACKEND_COMPILE_EVENT:
        with _lock:
            _totals["seconds"] += duration
            _totals["programs"] += 1


def compile_totals() -> tuple[float, int]:
    """(seconds, programs) compiled in this process since the first call (the listener starts then)."""
    global _installed
    import jax

    with _lock:
        if not _installed:
            jax.monitoring.register_event_duration_secs_listener(_listen)
            _installed = True
        return _totals["seconds"], _totals["programs"]

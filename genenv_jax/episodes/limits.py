"""Limits on every environment request, so that nothing a model writes can stall or sink a run.

An environment runs model text: a reply can ask a backend for exponential work, loop, or return a
gigantic observation (docs/reliability.md, "Environment limits", measures the cases). Each request
(reset, step, score, close, DreamGym's replay of an episode) therefore runs under

- a wall-clock limit (`step_timeout_s`; `score_timeout_s` for score and replay): a SIGALRM timer
  raises `EnvTimeout` inside the environment's Python code, which ends that episode only
  (`env_timeout`). A worker process that does not come back within the limit plus `KILL_GRACE_S`
  (a hang in C code, or a signal ignored) is killed and replaced;
- a bound on each observation message (`max_observation_chars`): longer texts are cut, with a
  marker saying how much, before they reach the transcript or cross a process boundary;
- in worker processes, a cap on the address space (`worker_memory_mb`): exhaustion raises
  MemoryError inside the environment (`env_memory`) instead of waking the kernel's OOM killer, which
  could pick the trainer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
from typing import Any, Iterator

from genenv_jax.core.bounded_text import bound_text
from genenv_jax.domains.base import StepOutcome

KILL_GRACE_S = 5.0  # a worker gets this long past the limit to come back before it is killed
SCORE_OPS = ("score",)


class EnvTimeout(BaseException):
    """Raised inside an environment when its request ran past the limit. A BaseException, so that
    an environment's own `except Exception` cannot swallow it."""


@dataclasses.dataclass(frozen=True)
class EnvLimits:
    """The limits of one environment host (config: the `episodes.*` keys of the same names)."""

    step_timeout_s: float = 60.0
    score_timeout_s: float = 300.0
    max_observation_chars: int = 65536
    worker_memory_mb: int = 8192

    def seconds(self, op: str) -> float:
        return self.score_timeout_s if op in SCORE_OPS else self.step_timeout_s

    def __post_init__(self):
        for name in ("step_timeout_s", "score_timeout_s", "max_observation_chars", "worker_memory_mb"):
            if getattr(self, name) < 0:
                raise ValueError(f"environment limit {name} must be >= 0 (0: no limit), got {getattr(self, name)}")


NO_LIMITS = EnvLimits(0, 0, 0, 0)


def _raise_timeout(signum, frame):
    raise EnvTimeout()


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[bool]:
    """Raises EnvTimeout in this block after `seconds` (0: no limit); yields whether the limit is
    armed. Only the main thread can take SIGALRM: elsewhere the block runs unlimited. A timer
    already running (a test harness's) that would fire sooner is left alone; one that would fire
    later is put back, less the time spent here, when the block ends."""
    outer, _ = signal.getitimer(signal.ITIMER_REAL)
    if seconds <= 0 or threading.current_thread() is not threading.main_thread() or 0 < outer <= seconds:
        yield False
        return
    previous = signal.signal(signal.SIGALRM, _raise_timeout)
    start = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer > 0:
            signal.setitimer(signal.ITIMER_REAL, max(1e-3, outer - (time.monotonic() - start)))


def bound_answer(answer: Any, limit: int) -> Any:
    """A step's outcome with each observation message's text bounded (other answers unchanged)."""
    if not isinstance(answer, StepOutcome) or limit <= 0:
        return answer
    messages = []
    for message in answer.observation:
        content = message.get("content")
        messages.append({**message, "content": bound_text(content, limit)} if isinstance(content, str) else message)
    return dataclasses.replace(answer, observation=messages)


def cap_address_space(megabytes: int) -> None:
    """Caps this process's address space (a worker calls it at start; 0: no cap)."""
    if megabytes > 0:
        import resource

        limit = megabytes << 20
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


__all__ = ["EnvLimits", "EnvTimeout", "KILL_GRACE_S", "NO_LIMITS", "bound_answer",
           "cap_address_space", "time_limit"]

"""One run per workdir: an exclusive lock file (`<workdir>/run.lock`) held open for the whole run.

The lock is an `fcntl.flock` on the open file, so the kernel releases it when the holding process
dies however it dies (SIGKILL, OOM, a lost node): a killed run never blocks the next one. The
file also records who holds it (pid, host, start time), which a second run quotes in its refusal
and which tells a run taking over a lock that a killed run left behind. On a multi-host run only
process 0 takes the lock. The workdir must be on a filesystem whose locks the hosts that might
share it all see (local disk; NFSv4 maps flock onto its own locks).
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

LOCK_NAME = "run.lock"


class WorkdirLockedError(RuntimeError):
    """Another live run holds the workdir (one line: who, where, since when, what to do)."""


def _holder_info() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "since_unix": time.time()}


def _read_holder(fd: int) -> dict[str, Any] | None:
    """The holder recorded in the lock file, or None if it is empty or unreadable."""
    os.lseek(fd, 0, os.SEEK_SET)
    data = b""
    while chunk := os.read(fd, 4096):
        data += chunk
    try:
        info = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return info if isinstance(info, dict) else None


def _describe(info: dict[str, Any] | None) -> str:
    if not info:
        return "another run (its pid and host are not recorded yet)"
    return f"pid {info.get('pid')} on host {info.get('host')} since {info.get('since')}"


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class WorkdirLock:
    """Context manager holding `<workdir>/run.lock` exclusively; WorkdirLockedError if a live run has it.

    with WorkdirLock(workdir):
        run(...)
    """

    def __init__(self, workdir: str | os.PathLike):
        self.workdir = Path(workdir)
        self.path = self.workdir / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Takes the lock, records this process in it and logs a takeover from a killed run."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this WorkdirLock")
        self.workdir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read_holder(fd)
            os.close(fd)
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            raise WorkdirLockedError(f"workdir {self.workdir} is in use by {_describe(holder)}; "
                                     f"stop that run or use another --workdir") from None
        previous = _read_holder(fd)
        if previous:
            self._log_takeover(previous)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder_info()).encode("utf-8"), 0)
        os.fsync(fd)
        self._fd = fd

    def _log_takeover(self, previous: dict[str, Any]) -> None:
        """The file names a holder but its lock was free: that run ended without releasing it."""
        same_host = previous.get("host") == socket.gethostname()
        if same_host and _pid_alive(previous.get("pid")) and previous.get("pid") != os.getpid():
            why = "its pid is alive but it no longer holds the lock (pid reused, or it closed the lock)"
        elif same_host:
            why = "that process is gone (killed or crashed)"
        else:
            why = "that run is gone, or the filesystem does not share locks across hosts"
        logging.warning("workdir %s: taking over the lock left by %s; %s", self.workdir, _describe(previous), why)

    def release(self) -> None:
        """Clears the holder record (so the next run logs no takeover) and drops the lock.
        The file itself stays: deleting it would let two runs lock different files."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> "WorkdirLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

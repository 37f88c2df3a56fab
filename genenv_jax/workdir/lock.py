"""One run per workdir: an exclusive lock file (`<workdir>/run.lock`) held open for the whole run.

The lock is an `fcntl.flock` on the open file, so the kernel releases it when the holding process
dies however it dies (SIGKILL, OOM, a lost node): a killed run never blocks the next one. The
file also records who holds it (pid, host, start time), which a second run quotes in its refusal
and which tells a run taking over a lock that a killed run left behind. On a multi-host run only
process 0 takes the lock. The workdir must be on a filesystem whose locks the hosts that might
share it all see (local disk; NFSv4 maps flock onto its own locks).

A gs:// workdir has no flock: there the lock is the object `run.lock` itself (`_ObjectLock`),
written only with generation preconditions. It is created only if absent, refreshed by its holder
every HEARTBEAT_S, and taken over only when it is released (empty), its holder was a process of
this machine's current boot that is gone, or it was not refreshed for STALE_AFTER_S (a killed or
preempted run), so a killed run blocks the next one for at most STALE_AFTER_S.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import threading
import time
from typing import Any

from genenv_jax.workdir import storage

LOCK_NAME = "run.lock"
HEARTBEAT_S = 60.0  # how often the holder of a gs:// lock refreshes it
STALE_AFTER_S = 600.0  # a gs:// lock not refreshed for this long was left by a run that is gone


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


def _log_takeover(workdir: Any, previous: dict[str, Any], why: str | None = None) -> None:
    """The lock names a holder but was free (or stale): that run ended without releasing it."""
    logging.warning("workdir %s: taking over the lock left by %s; %s", workdir, _describe(previous),
                    why or _why_flock_was_free(previous))


def _why_flock_was_free(previous: dict[str, Any]) -> str:
    same_host = previous.get("host") == socket.gethostname()
    if same_host and _pid_alive(previous.get("pid")) and previous.get("pid") != os.getpid():
        return "its pid is alive but it no longer holds the lock (pid reused, or it closed the lock)"
    if same_host:
        return "that process is gone (killed or crashed)"
    return "that run is gone, or the filesystem does not share locks across hosts"


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
        self.workdir = storage.as_path(workdir)
        self.path = self.workdir / LOCK_NAME
        self._fd: int | None = None
        self._object = _ObjectLock(self.workdir, self.path) if storage.is_remote(self.workdir) else None

    @property
    def held(self) -> bool:
        return self._object.held if self._object is not None else self._fd is not None

    def acquire(self) -> None:
        """Takes the lock, records this process in it and logs a takeover from a killed run."""
        if self._object is not None:
            self._object.acquire()
            return
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
            _log_takeover(self.workdir, previous)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder_info()).encode("utf-8"), 0)
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        """Clears the holder record (so the next run logs no takeover) and drops the lock.
        The file itself stays: deleting it would let two runs lock different files."""
        if self._object is not None:
            self._object.release()
            return
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


def _boot_id() -> str | None:
    """This machine's current boot (Linux), so that a recorded pid is only judged on the machine
    and boot that ran it (hostnames can repeat across containers and recreated VMs)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


class _ObjectLock:
    """`run.lock` of a gs:// workdir as a GCS object (see the module docstring). Every write has a
    generation precondition, so of two runs racing for it exactly one wins."""

    def __init__(self, workdir: Any, path: Any):
        self.workdir, self.path = workdir, path
        self._bucket, self._key = storage.bucket_and_key(path)
        self._blob = None
        self._generation: int | None = None  # of the object this process last wrote while holding it
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> bool:
        return self._generation is not None

    def _object(self):
        if self._blob is None:
            from google.cloud import storage as gcs  # a gcsfs dependency; only gs:// workdirs need it

            self._blob = gcs.Client(project=None).bucket(self._bucket).blob(self._key)
        return self._blob

    @contextlib.contextmanager
    def _errors(self, doing: str):
        """Turns a Cloud Storage or credentials error into one OSError line naming the lock object."""
        from google.api_core.exceptions import GoogleAPIError
        from google.auth.exceptions import GoogleAuthError

        try:
            yield
        except (GoogleAPIError, GoogleAuthError) as e:
            cause = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise OSError(f"{self.path}: cannot {doing} the lock object ({type(e).__name__}: {cause})") from None

    def _write(self, payload: bytes, generation: int) -> int | None:
        """Uploads `payload` if the object is at `generation` (0: absent); its new generation, or None."""
        from google.api_core.exceptions import PreconditionFailed

        with self._errors("write"):
            blob = self._object()
            try:
                blob.upload_from_string(payload, content_type="application/json", if_generation_match=generation)
            except PreconditionFailed:
                return None
            return blob.generation

    def acquire(self) -> None:
        """Creates the lock object, or takes over a released or stale one; WorkdirLockedError if a
        live run holds it. Then refreshes it every HEARTBEAT_S in a daemon thread."""
        if self.held:
            raise RuntimeError(f"{self.path} is already held by this WorkdirLock")
        payload = json.dumps({**_holder_info(), "boot_id": _boot_id()}).encode("utf-8")
        generation = self._write(payload, 0)
        if generation is None:
            generation = self._take_over(payload)
        self._generation = generation
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._heartbeat, args=(payload,), name="genenv-workdir-lock",
                                        daemon=True)
        self._thread.start()

    def _take_over(self, payload: bytes) -> int:
        """The generation written over a released or stale lock; WorkdirLockedError otherwise."""
        from google.api_core.exceptions import NotFound, PreconditionFailed

        taken = WorkdirLockedError(f"workdir {self.workdir} was just locked by another run; "
                                   f"stop that run or use another --workdir")
        with self._errors("read"):
            current = self._object().bucket.get_blob(self._key)
            try:
                data = b"" if current is None else current.download_as_bytes(if_generation_match=current.generation)
            except (NotFound, PreconditionFailed):
                raise taken from None
        holder = _parse_holder(data)
        if holder:
            age = time.time() - current.updated.timestamp()
            why = self._gone(holder, age)
            if why is None:
                raise WorkdirLockedError(f"workdir {self.workdir} is in use by {_describe(holder)} (its lock "
                                         f"{self.path} was refreshed {age:.0f} s ago); stop that run or use "
                                         f"another --workdir") from None
            _log_takeover(self.workdir, holder, why)
        generation = self._write(payload, 0 if current is None else current.generation)
        if generation is None:
            raise taken
        return generation

    @staticmethod
    def _gone(holder: dict[str, Any], age: float) -> str | None:
        """Why the run that holds the lock is gone, or None if it may be alive."""
        boot = _boot_id()
        same_boot = boot is not None and holder.get("boot_id") == boot and holder.get("host") == socket.gethostname()
        if same_boot and not _pid_alive(holder.get("pid")):
            return "that process is gone (killed or crashed)"
        if age > STALE_AFTER_S:
            return f"it was not refreshed for {age:.0f} s (killed, crashed or preempted)"
        return None

    def _heartbeat(self, payload: bytes) -> None:
        """Rewrites the lock every HEARTBEAT_S while held, so other runs see this one is alive."""
        while not self._stop.wait(HEARTBEAT_S):
            with self._mutex:
                if self._generation is None:
                    return
                try:
                    generation = self._write(payload, self._generation)
                except Exception as e:  # noqa: BLE001 - a network error: try again at the next beat
                    logging.warning("workdir %s: could not refresh the lock %s (%s); retrying", self.workdir,
                                    self.path, e)
                    continue
                if generation is None:
                    logging.error("workdir %s: lost the lock %s to another run (not refreshed for over %d s?)",
                                  self.workdir, self.path, STALE_AFTER_S)
                    self._generation = None
                    return
                self._generation = generation

    def release(self) -> None:
        """Stops the heartbeat and empties the object (a released lock), if this run still holds it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._mutex:
            generation, self._generation = self._generation, None
        if generation is None:
            return
        try:  # a failure here must not mask how the run ended; the lock then goes stale
            released = self._write(b"", generation) is not None
        except OSError as e:
            logging.warning("workdir %s: %s; the next run takes the lock over once it is stale", self.workdir, e)
            return
        if not released:
            logging.warning("workdir %s: the lock %s was taken over by another run before this one released it",
                            self.workdir, self.path)


def _parse_holder(data: bytes) -> dict[str, Any] | None:
    """The holder recorded in lock data, or None if it is empty (released) or unreadable."""
    try:
        info = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return info if isinstance(info, dict) and info else None

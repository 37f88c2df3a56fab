"""POSIX helpers for files that must survive a crash whole: write to a temp name, fsync, rename,
fsync the directory (pools, manifests, metrics). Local paths only: `genenv_jax.workdir.storage` picks
these for local paths and single object uploads for gs://."""

from __future__ import annotations

import os
from pathlib import Path

TMP_PREFIX = ".tmp."


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temp_name(path: Path) -> Path:
    """The temp file `path` is written under before the rename (`.tmp.<name>.<pid>`, beside it)."""
    return path.with_name(f"{TMP_PREFIX}{path.name}.{os.getpid()}")


def write_bytes_atomic(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Replaces `path` by `data` so that readers see the old or the new file, never half
    (fsync=False skips the fsyncs: atomic against readers, not against a power cut)."""
    path = Path(path)
    tmp = temp_name(path)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)

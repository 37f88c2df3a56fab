"""Coordination between the processes of a multi-host run (one JAX process per host).

Every process runs the same loop on the same data: the same tasks, seeds and batches, with
sampling and updates over the global mesh. Process 0 is the one writer of files (pools, metrics,
samples, plots) and the one that steps environments; what it computes on the host that others
need is broadcast (`broadcast_object`). With one process every helper is a no-op or a pass-through.
"""

from __future__ import annotations

import hashlib
import pickle
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from genenv_jax.core.bucketing import next_power_of_two


def is_multiprocess() -> bool:
    return jax.process_count() > 1


def is_writer() -> bool:
    """True on the process that writes the run's files (process 0)."""
    return jax.process_index() == 0


def barrier(name: str) -> None:
    """Waits until every process reaches the barrier `name` (a no-op with one process)."""
    if is_multiprocess():
        multihost_utils.sync_global_devices(f"genenv:{name}")


def broadcast_bytes(payload: bytes | None) -> bytes:
    """Process 0's `payload` on every process (others pass None).

    The length goes first, then the bytes padded to a power of two, so a run compiles one
    broadcast program per size class rather than one per payload.
    """
    if not is_multiprocess():
        assert payload is not None, "process 0 must pass the payload"
        return payload
    writer = is_writer()
    length = int(multihost_utils.broadcast_one_to_all(np.int64(len(payload) if writer else 0)))
    buffer = np.zeros((max(1024, next_power_of_two(length)),), np.uint8)
    if writer:
        buffer[:length] = np.frombuffer(payload, np.uint8)
    return np.asarray(multihost_utils.broadcast_one_to_all(buffer))[:length].tobytes()


def broadcast_object(obj: Any) -> Any:
    """Process 0's `obj` (plain data: dataclasses, dicts, lists, strings, numbers) on every process.

    Pickle is safe here: the bytes are ones process 0 of this run produced, over the runtime's own
    channel; model text inside is carried as strings and never evaluated.
    """
    if not is_multiprocess():
        return obj
    return pickle.loads(broadcast_bytes(pickle.dumps(obj) if is_writer() else None))


def check_same_on_all(name: str, data: bytes) -> None:
    """Raises if `data` differs between processes (a digest is all-gathered): host-side results
    that must agree (the epoch's tasks, rewards, counts) are checked before they steer an update."""
    if not is_multiprocess():
        return
    digest = np.frombuffer(hashlib.sha256(data).digest(), np.uint8)
    digests = np.asarray(multihost_utils.process_allgather(digest))  # [P, 32]
    differing = [p for p in range(digests.shape[0]) if not np.array_equal(digests[p], digests[0])]
    if differing:
        raise RuntimeError(f"{name} differs between processes (process 0 vs {differing}); the processes "
                           "diverged (different code, data or config on some host?)")

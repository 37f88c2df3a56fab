"""The loop's pools on one or many processes: process 0 writes them, every other process opens
them read-only and reloads after process 0 has committed, so all read the same records back.
(On a pod the workdir must be storage every host sees, like the checkpoints: a shared filesystem or
gs://, where each process reads the shards through its own local cache, `genenv_jax.workdir.storage`.)"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping, Sequence

from genenv_jax.parallel import barrier, is_writer
from genenv_jax.workdir.pools import Pool


def open_pools(root: str | os.PathLike, names: Sequence[str]) -> dict[str, Pool]:
    """The named pools under `root`: writable on process 0, read-only elsewhere."""
    return {name: Pool(root, name, writable=is_writer()) for name in names}


def writable(pools: Mapping[str, Pool]) -> dict[str, Pool]:
    """The pools this process may change (all on process 0, none elsewhere): what resume rolls back."""
    return dict(pools) if is_writer() else {}


def sync(pools: Mapping[str, Pool], name: str) -> None:
    """After process 0 changed pools (commit, roll-back): every process waits, the others reload."""
    barrier(name)
    if not is_writer():
        for pool in pools.values():
            pool.reload()


def append_epoch(pools: Mapping[str, Pool], epoch: int, records: Mapping[str, Iterable[Any]]) -> None:
    """Commits each named pool's records as its shard of `epoch` (process 0), then syncs."""
    if is_writer():
        for name, rows in records.items():
            pools[name].append_epoch(epoch, rows)
    sync(pools, f"pools-epoch-{epoch}")

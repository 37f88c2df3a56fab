"""Mixing base / historical / new data with Grain: weighted sampling over pool data sources
(D_train's shards, base seeds), reshuffled every pass, as the replay of the loop draws it."""

from __future__ import annotations

import itertools
import logging
import math
import numbers
import sys
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Union

import grain
import numpy as np


Source = Union[grain.sources.RandomAccessDataSource, Sequence[Any]]


def effective_ratios(sources: Mapping[str, Source], ratios: Mapping[str, float]) -> dict[str, float]:
    """Normalised mixing weights after dropping components that are empty or have ratio 0."""
    if set(sources) != set(ratios):
        raise ValueError(f"ratios name {sorted(ratios)} but sources are {sorted(sources)}")
    for name, r in ratios.items():
        if not (isinstance(r, numbers.Real) and math.isfinite(r) and r >= 0):
            raise ValueError(f"mixing ratio of {name!r} must be a finite number >= 0, got {r!r}")
    used = {n: float(ratios[n]) for n in sources if ratios[n] > 0 and len(sources[n]) > 0}
    if not used:
        raise ValueError(f"nothing to sample: every source is empty or has ratio 0 "
                         f"(sizes {({n: len(s) for n, s in sources.items()})}, ratios {dict(ratios)})")
    for name in sources:
        if ratios[name] > 0 and name not in used:
            logging.info("mixing: source %r is empty; its ratio %.3g goes to the others", name, ratios[name])
    total = sum(used.values())
    return {n: r / total for n, r in used.items()}


def _component_seed(seed: int, name: str) -> int:
    return int(np.random.SeedSequence([seed & 0xFFFFFFFF, zlib.crc32(name.encode())]).generate_state(1)[0])


class EpochShuffleMapDataset(grain.MapDataset):
    """Grain MapDataset: a seeded full permutation of its parent, a fresh one per pass (index // len).

    Same contract as `MapDataset.shuffle(seed)` followed by `.repeat()`, but it draws each pass's
    permutation with numpy (O(n) memory, cached per pass) instead of Grain's per-index
    `index_shuffle`, which costs ~35 ms / n per element and so crawls on the small sources
    (tens of seeds) a pool often starts with.
    """

    def __init__(self, parent: grain.MapDataset, seed: int):
        super().__init__(parent)
        if len(parent) == 0:
            raise ValueError("cannot shuffle an empty dataset")
        self._seed = int(seed)
        self._cache: dict[int, np.ndarray] = {}  # a few recent passes; plain dict so it pickles

    def _permutation(self, epoch: int) -> np.ndarray:
        perm = self._cache.get(epoch)
        if perm is None:
            perm = np.random.default_rng([self._seed, epoch]).permutation(len(self._parent))
            if len(self._cache) >= 4:
                self._cache.pop(next(iter(self._cache)), None)
            self._cache[epoch] = perm
        return perm

    def __len__(self) -> int:
        return sys.maxsize  # endless: pass k is the k-th permutation

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        epoch, position = divmod(int(index), len(self._parent))
        return self._parent[int(self._permutation(epoch)[position])]

    def __str__(self) -> str:
        return f"EpochShuffleMapDataset(seed={self._seed})"


def mixed_dataset(sources: Mapping[str, Source], ratios: Mapping[str, float], batch_size: int,
                  seed: int) -> grain.MapDataset:
    """An endless Grain MapDataset of batches (lists of records) mixing `sources` at `ratios`.

    Each source is shuffled with its own seed (derived from `seed` and its name) and repeated
    with a fresh shuffle per pass, so a small source (e.g. this epoch's new data) is oversampled
    to keep its share. Grain's mix interleaves the sources deterministically at the given
    proportions, so every window of batches holds them at the configured ratios.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    weights = effective_ratios(sources, ratios)
    parts = [EpochShuffleMapDataset(grain.MapDataset.source(sources[n]), _component_seed(seed, n))
             for n in weights]
    mixed = parts[0] if len(parts) == 1 else grain.MapDataset.mix(parts, list(weights.values()))
    return mixed.batch(batch_size, batch_fn=list)


def mixed_batches(sources: Mapping[str, Source], ratios: Mapping[str, float], batch_size: int, seed: int,
                  num_batches: int | None = None) -> Iterator[list[Any]]:
    """Deterministic iterator of `num_batches` batches (None: endless), each a list of records.

    Example: mixed_batches({"base": base_pool.data_source(), "historical": d_train.data_source(range(e)),
    "new": d_train.data_source(e)}, {"base": 0.2, "historical": 0.3, "new": 0.5}, 64, seed=epoch).
    The same sources, ratios and seed give the same batches; derive `seed` from the run seed and
    the epoch to get a fresh order per epoch that a resumed run reproduces.
    """
    dataset = mixed_dataset(sources, ratios, batch_size, seed)  # validates now, not at first next()
    if num_batches is not None and num_batches < 0:
        raise ValueError(f"num_batches must be >= 0 or None, got {num_batches}")
    indices = itertools.count() if num_batches is None else range(num_batches)
    return (dataset[i] for i in indices)

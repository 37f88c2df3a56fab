"""D_train / D_env: append-only pools of JSON records in ArrayRecord shards, read through Grain.

One shard per epoch per pool, committed atomically: the shard is written under a temporary name,
fsynced and renamed, then `manifest.json` (the list of committed shards) is replaced the same way.
Only shards listed in the manifest exist for readers; anything else in the pool directory (a
crash's leftovers) is deleted when the pool is opened for writing. So a crash at any point loses
at most the epoch being written. `truncate_to(epoch)` drops later epochs on resume.

Layout: <root>/<name>/manifest.json, <root>/<name>/epoch_00003.array_record, ...
Each ArrayRecord entry is the UTF-8 JSON of {"v": SCHEMA_VERSION, "epoch": e, "record": {...}};
readers get the record dict back.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import math
import numbers
import os
import re
import sys
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Union

import grain
import numpy as np
from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
# group_size:1 makes every record independently readable, which Grain's random access requires.
WRITER_OPTIONS = "group_size:1"
_SHARD_RE = re.compile(r"^epoch_(\d{5,})\.array_record$")
_TMP_PREFIX = ".tmp."

Epochs = Union[int, Iterable[int], None]


def shard_name(epoch: int) -> str:
    return f"epoch_{epoch:05d}.array_record"


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
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


def write_json_atomic(path: Path, obj: Any) -> None:
    """Replaces `path` by the JSON of `obj` so that readers see the old or the new file, never half."""
    path = Path(path)
    tmp = path.with_name(f"{_TMP_PREFIX}{path.name}.{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _record_to_dict(record: Any) -> dict:
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return dataclasses.asdict(record)
    if isinstance(record, Mapping):
        return dict(record)
    raise TypeError(f"pool records must be mappings or dataclass instances, got {type(record).__name__}")


def encode_record(record: Any, epoch: int) -> bytes:
    """The bytes stored for one record."""
    record = _record_to_dict(record)
    try:
        text = json.dumps({"v": SCHEMA_VERSION, "epoch": epoch, "record": record},
                          ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise ValueError(f"record is not JSON-serialisable (NaN/inf or a non-JSON type): {e}") from e
    return text.encode("utf-8")


def decode_record(data: bytes) -> dict:
    """The record dict stored by `encode_record`."""
    envelope = json.loads(data)
    if envelope.get("v") != SCHEMA_VERSION:
        raise ValueError(f"pool record schema version {envelope.get('v')!r}; this code reads {SCHEMA_VERSION}")
    return envelope["record"]


@dataclasses.dataclass(frozen=True)
class Shard:
    """A committed shard: one epoch of one pool."""

    epoch: int
    file: str  # name inside the pool directory
    num_records: int
    num_bytes: int


class JsonRecordSource:
    """Grain RandomAccessDataSource of decoded record dicts over committed ArrayRecord shards."""

    def __init__(self, paths: Sequence[str | os.PathLike]):
        self._paths = [str(p) for p in paths]
        self._source = grain.sources.ArrayRecordDataSource(self._paths) if self._paths else None

    @property
    def paths(self) -> list[str]:
        return list(self._paths)

    def __len__(self) -> int:
        return 0 if self._source is None else len(self._source)

    def __getitem__(self, index: int) -> dict:
        if self._source is None:
            raise IndexError(f"index {index} out of range for an empty pool source")
        return decode_record(self._source[index])

    def __getitems__(self, indices: Sequence[int]) -> list[dict]:
        if self._source is None:
            raise IndexError("indices out of range for an empty pool source")
        return [decode_record(b) for b in self._source.__getitems__(list(indices))]

    def __repr__(self) -> str:
        return f"JsonRecordSource({len(self)} records in {len(self._paths)} shards)"


class Pool:
    """An append-only pool of JSON records, one ArrayRecord shard per epoch.

    Write from one process only (on multi-host runs, process 0); other processes may open it with
    writable=False and `reload()` to see new commits. The directory must be on a POSIX filesystem
    with atomic rename (local disk, NFS, a persistent disk; not an object-store FUSE mount).
    """

    def __init__(self, root: str | os.PathLike, name: str, *, writable: bool = True):
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"pool name must be a plain directory name, got {name!r}")
        self.name = name
        self.dir = Path(root) / name
        self.writable = writable
        if writable:
            self.dir.mkdir(parents=True, exist_ok=True)
        self._shards: list[Shard] = []
        self.reload()
        if writable:
            self._remove_uncommitted()

    # -- manifest ------------------------------------------------------------------------------

    def reload(self) -> None:
        """Re-reads the manifest (a missing manifest is an empty pool) and checks the shards."""
        path = self.dir / MANIFEST_NAME
        if not path.exists():
            self._shards = []
            return
        manifest = json.loads(path.read_text(encoding="utf-8"))
        self._shards = self._shards_from_manifest(manifest)
        for shard in self._shards:
            file = self.dir / shard.file
            if not file.exists():
                raise FileNotFoundError(f"pool {self.name!r}: committed shard {file} is missing")
            if file.stat().st_size != shard.num_bytes:
                raise ValueError(f"pool {self.name!r}: shard {file} has {file.stat().st_size} bytes, "
                                 f"the manifest says {shard.num_bytes} (corrupted or replaced)")

    def _shards_from_manifest(self, manifest: Mapping[str, Any]) -> list[Shard]:
        if manifest.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"pool {self.name!r}: manifest schema version {manifest.get('schema_version')!r}, "
                             f"this code reads {SCHEMA_VERSION}")
        if manifest.get("pool") != self.name:
            raise ValueError(f"manifest in {self.dir} belongs to pool {manifest.get('pool')!r}, not {self.name!r}")
        return [Shard(**s) for s in manifest["shards"]]

    @property
    def manifest(self) -> dict:
        """The committed state as JSON-able data (saved in checkpoints)."""
        return {"schema_version": SCHEMA_VERSION, "pool": self.name,
                "shards": [dataclasses.asdict(s) for s in self._shards]}

    @property
    def shards(self) -> list[Shard]:
        return list(self._shards)

    @property
    def epochs(self) -> list[int]:
        return [s.epoch for s in self._shards]

    @property
    def last_epoch(self) -> int | None:
        return self._shards[-1].epoch if self._shards else None

    def _commit(self, shards: list[Shard]) -> None:
        manifest = {"schema_version": SCHEMA_VERSION, "pool": self.name,
                    "shards": [dataclasses.asdict(s) for s in shards]}
        write_json_atomic(self.dir / MANIFEST_NAME, manifest)
        self._shards = shards

    def _remove_uncommitted(self) -> None:
        committed = {s.file for s in self._shards}
        for entry in self.dir.iterdir():
            if entry.name == MANIFEST_NAME or entry.name in committed:
                continue
            if entry.name.startswith(_TMP_PREFIX) or _SHARD_RE.match(entry.name):
                logging.warning("pool %s: removing uncommitted file %s (left by an interrupted write)",
                                self.name, entry)
                entry.unlink()
            else:
                logging.warning("pool %s: leaving unknown file %s alone", self.name, entry)

    def _require_writable(self) -> None:
        if not self.writable:
            raise PermissionError(f"pool {self.name!r} was opened with writable=False")

    # -- writing -------------------------------------------------------------------------------

    def append_epoch(self, epoch: int, records: Iterable[Any]) -> Path:
        """Commits `records` (mappings or dataclasses) as the shard of `epoch`; returns its path.

        `epoch` must be greater than every committed epoch. An empty list commits an empty shard
        (the epoch happened; it produced nothing).
        """
        self._require_writable()
        if not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        epoch = int(epoch)
        if self._shards and epoch <= self._shards[-1].epoch:
            raise ValueError(f"pool {self.name!r} already holds epoch {self._shards[-1].epoch}; epochs must "
                             f"increase (got {epoch}); use truncate_to() to roll back first")
        encoded = [encode_record(r, epoch) for r in records]  # fail before touching the disk

        final = self.dir / shard_name(epoch)
        tmp = self.dir / f"{_TMP_PREFIX}{final.name}.{os.getpid()}"
        writer = ArrayRecordWriter(str(tmp), WRITER_OPTIONS)
        try:
            for data in encoded:
                writer.write(data)
            if not writer.ok():
                raise OSError(f"pool {self.name!r}: ArrayRecord writer failed on {tmp}")
        finally:
            writer.close()
        _fsync_file(tmp)
        os.replace(tmp, final)
        _fsync_dir(self.dir)
        shard = Shard(epoch=epoch, file=final.name, num_records=len(encoded), num_bytes=final.stat().st_size)
        self._commit(self._shards + [shard])
        return final

    def truncate_to(self, epoch: int) -> list[int]:
        """Drops the shards of epochs > `epoch` (epoch=-1 empties the pool); returns the dropped epochs.

        Used on resume when a pool was committed for an epoch whose checkpoint was not.
        """
        self._require_writable()
        keep = [s for s in self._shards if s.epoch <= epoch]
        dropped = [s for s in self._shards if s.epoch > epoch]
        if dropped:
            self._commit(keep)  # commit first: a crash now leaves only orphans, removed on open
            for shard in dropped:
                (self.dir / shard.file).unlink(missing_ok=True)
            _fsync_dir(self.dir)
        return [s.epoch for s in dropped]

    # -- reading -------------------------------------------------------------------------------

    def _select(self, epochs: Epochs) -> list[Shard]:
        if epochs is None:
            return list(self._shards)
        wanted = {int(epochs)} if isinstance(epochs, (int, np.integer)) else {int(e) for e in epochs}
        return [s for s in self._shards if s.epoch in wanted]

    def shard_paths(self, epochs: Epochs = None) -> list[Path]:
        """Paths of the committed shards of `epochs` (None: all). Epochs not committed are skipped."""
        return [self.dir / s.file for s in self._select(epochs)]

    def num_records(self, epochs: Epochs = None) -> int:
        return sum(s.num_records for s in self._select(epochs))

    def records(self, epochs: Epochs = None) -> list[dict]:
        """All committed records of `epochs` (None: all), in epoch then write order."""
        out = []
        for shard in self._select(epochs):
            reader = ArrayRecordReader(str(self.dir / shard.file))
            try:
                out.extend(decode_record(b) for b in reader.read_all())
            finally:
                reader.close()
        return out

    def data_source(self, epochs: Epochs = None) -> JsonRecordSource:
        """A Grain random-access source of the committed records of `epochs` (None: all)."""
        return JsonRecordSource([p for p, s in zip(self.shard_paths(epochs), self._select(epochs))
                                 if s.num_records])

    def __repr__(self) -> str:
        return f"Pool({self.name!r}, epochs={self.epochs}, records={self.num_records()})"


# ----------------------------------------------------------------------------------------------
# Mixing base / historical / new data with Grain.

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

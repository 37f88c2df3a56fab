"""D_train / D_env: append-only pools of JSON records in ArrayRecord shards, read through Grain.

One shard per epoch per pool, committed atomically: the shard is written under a temporary name,
fsynced and renamed, then `manifest.json` (the list of committed shards) is replaced the same way.
On a gs:// root each is one object upload instead (atomic on GCS); shards are staged and read
through a local cache, since ArrayRecord and Grain read local files (`genenv_jax.workdir.storage`).
Only shards listed in the manifest exist for readers. Opening a pool deletes nothing: leftovers
of a crash (and epochs past the checkpoint) are deleted only by `roll_back_to(manifest)`, which
`checkpointing.resume` calls with the checkpoint's manifest, so a shard a checkpoint lists is
never deleted and a lost or corrupt manifest.json is restored from the checkpoint. A crash at any
point loses at most the epoch being written.

Layout: <root>/<name>/manifest.json, <root>/<name>/epoch_00003.array_record, ...
Each ArrayRecord entry is the UTF-8 JSON of {"v": SCHEMA_VERSION, "epoch": e, "record": {...}};
readers get the record dict back.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Union

import grain
import numpy as np
from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

from genenv_jax.workdir import storage
from genenv_jax.workdir.atomic_files import fsync_dir, fsync_file
from genenv_jax.workdir.storage import AnyPath, write_json_atomic

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
# group_size:1 makes every record independently readable, which Grain's random access requires.
WRITER_OPTIONS = "group_size:1"
_SHARD_RE = re.compile(r"^epoch_(\d{5,})\.array_record$")
_TMP_PREFIX = ".tmp."

Epochs = Union[int, Iterable[int], None]


def shard_name(epoch: int) -> str:
    return f"epoch_{epoch:05d}.array_record"


def _manifest_json(pool: str, shards: Sequence["Shard"]) -> dict:
    return {"schema_version": SCHEMA_VERSION, "pool": pool, "shards": [dataclasses.asdict(s) for s in shards]}


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


class _MalformedManifest(Exception):
    """A manifest that parses as JSON but is not one (a corrupt file, not a foreign pool)."""


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


class PoolError(ValueError):
    """A pool's committed state is unknown or does not fit a checkpoint (one line naming the pool)."""


class Pool:
    """An append-only pool of JSON records, one ArrayRecord shard per epoch.

    Write from one process only (on multi-host runs, process 0); other processes may open it with
    writable=False and `reload()` to see new commits. The directory must be on a POSIX filesystem
    with atomic rename (local disk, NFS, a persistent disk; not an object-store FUSE mount), or a
    gs:// URL (objects written by single uploads; shards read through a local cache).

    Opening a pool never deletes anything. If its committed state cannot be trusted (manifest
    missing while shards exist, unreadable manifest, a committed shard missing or resized),
    `problem` says why and every access raises PoolError until `roll_back_to` commits a
    checkpoint's manifest (`checkpointing.resume` does), which is also what removes leftovers.
    """

    def __init__(self, root: str | os.PathLike, name: str, *, writable: bool = True):
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"pool name must be a plain directory name, got {name!r}")
        self.name = name
        self.dir = storage.as_path(root) / name
        self.writable = writable
        if writable:
            storage.makedirs(self.dir)
        self._shards: list[Shard] = []
        self.problem: str | None = None
        self.reload()

    # -- manifest ------------------------------------------------------------------------------

    @property
    def manifest_path(self) -> AnyPath:
        return self.dir / MANIFEST_NAME

    def reload(self) -> None:
        """Re-reads the manifest and checks the committed shards; sets `problem` (logged) if they
        cannot be trusted. A missing manifest with no shard files is an empty pool."""
        self._shards, self.problem = self._read_committed()
        if self.problem is not None:
            logging.warning("pool %s: %s", self.name, self.problem)

    def _read_committed(self) -> tuple[list[Shard], str | None]:
        path = self.manifest_path
        if not path.exists():
            on_disk = self._shard_files()
            if on_disk:
                return [], (f"{path} is missing but {self.dir} holds {len(on_disk)} shard files; nothing was deleted; "
                            f"resuming from a checkpoint restores the manifest")
            return [], None
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            return [], f"{path} is unreadable ({type(e).__name__}: {e}); resuming from a checkpoint restores it"
        try:
            shards = self._shards_from_manifest(manifest, str(path))
        except _MalformedManifest as e:
            return [], f"{e}; resuming from a checkpoint restores it"
        return shards, self._shards_problem(shards, "the manifest")

    def _shards_from_manifest(self, manifest: Any, source: str) -> list[Shard]:
        """The shards a manifest lists. PoolError if it belongs to another pool or schema;
        _MalformedManifest if it is not a manifest at all."""
        if not isinstance(manifest, Mapping) or not isinstance(manifest.get("shards"), list):
            raise _MalformedManifest(f"{source} is not a pool manifest (no list of shards)")
        if manifest.get("schema_version") != SCHEMA_VERSION:
            raise PoolError(f"pool {self.name!r}: {source} has manifest schema version "
                            f"{manifest.get('schema_version')!r}, this code reads {SCHEMA_VERSION}")
        if manifest.get("pool") != self.name:
            raise PoolError(f"{source} belongs to pool {manifest.get('pool')!r}, not {self.name!r} ({self.dir})")
        try:
            return [Shard(**s) for s in manifest["shards"]]
        except TypeError as e:
            raise _MalformedManifest(f"{source} lists a malformed shard ({e})") from None

    def _shards_problem(self, shards: Sequence[Shard], listed_by: str) -> str | None:
        """Why the files of `shards` are not the committed ones (missing or another size), or None."""
        for shard in shards:
            file = self.dir / shard.file
            size = storage.file_size(file)
            if size is None:
                return f"shard {file} listed by {listed_by} is missing"
            if size != shard.num_bytes:
                return f"shard {file} has {size} bytes, {listed_by} says {shard.num_bytes} (corrupted or replaced)"
        return None

    def _shard_files(self) -> list[str]:
        return [name for name in storage.listdir(self.dir) if _SHARD_RE.match(name)]

    def _committed(self) -> list[Shard]:
        """The committed shards; PoolError while `problem` is set."""
        if self.problem is not None:
            raise PoolError(f"pool {self.name!r}: {self.problem}")
        return self._shards

    @property
    def manifest(self) -> dict:
        """The committed state as JSON-able data (saved in checkpoints)."""
        return _manifest_json(self.name, self._committed())

    @property
    def shards(self) -> list[Shard]:
        return list(self._committed())

    @property
    def epochs(self) -> list[int]:
        return [s.epoch for s in self._committed()]

    @property
    def last_epoch(self) -> int | None:
        shards = self._committed()
        return shards[-1].epoch if shards else None

    def _commit(self, shards: list[Shard]) -> None:
        write_json_atomic(self.manifest_path, _manifest_json(self.name, shards))
        self._shards = shards
        self.problem = None

    def _require_writable(self) -> None:
        if not self.writable:
            raise PermissionError(f"pool {self.name!r} was opened with writable=False")

    # -- rolling back to a checkpoint ---------------------------------------------------------

    def check_roll_back(self, manifest: Mapping[str, Any] | None) -> list[Shard]:
        """The shards `roll_back_to(manifest)` would commit; PoolError (nothing touched) if a shard
        the manifest lists is missing or resized, or if this pool's own readable manifest
        disagrees with it on the epochs both list (the pool belongs to another run)."""
        if manifest is None:
            return []
        try:
            target = self._shards_from_manifest(manifest, "the checkpoint's manifest")
        except _MalformedManifest as e:
            raise PoolError(f"pool {self.name!r}: {e}") from None
        problem = self._shards_problem(target, "the checkpoint's manifest")
        if problem is not None:
            raise PoolError(f"pool {self.name!r}: {problem}; refusing to resume (committed data would be lost)")
        common = min(len(self._shards), len(target))
        if self._shards[:common] != target[:common]:
            raise PoolError(f"pool {self.name!r} in {self.dir} does not match the checkpoint: pool has epochs "
                            f"{[s.epoch for s in self._shards]}, checkpoint recorded {[s.epoch for s in target]}")
        return target

    def roll_back_to(self, manifest: Mapping[str, Any] | None) -> list[int]:
        """Commits `manifest` (a checkpoint's; None: no checkpoint, so nothing is committed) and then
        deletes every shard and temp file it does not list; returns the epochs of deleted shards.

        The only call that deletes data the pool did not write in this process: `checkpointing.resume`
        makes it with the checkpoint's manifest in hand. A shard the manifest lists is never deleted.
        """
        self._require_writable()
        target = self.check_roll_back(manifest)
        if self.problem is not None or not self.manifest_path.exists() or self._shards != target:
            self._commit(target)  # commit first: a crash now leaves only files the next roll-back removes
        return self._remove_files_not_in(target)

    def _remove_files_not_in(self, shards: Sequence[Shard]) -> list[int]:
        listed = {s.file for s in shards}
        dropped = []
        for name in storage.listdir(self.dir):
            if name == MANIFEST_NAME or name in listed:
                continue
            match = _SHARD_RE.match(name)
            if match or name.startswith(_TMP_PREFIX):
                logging.debug("pool %s: removing uncommitted file %s", self.name, self.dir / name)
                storage.unlink(self.dir / name)
                if match:
                    dropped.append(int(match.group(1)))
            else:
                logging.warning("pool %s: leaving unknown file %s alone", self.name, self.dir / name)
        self._sync_dir()
        return dropped

    def _sync_dir(self) -> None:
        if not storage.is_remote(self.dir):
            fsync_dir(self.dir)

    # -- writing -------------------------------------------------------------------------------

    def append_epoch(self, epoch: int, records: Iterable[Any]) -> AnyPath:
        """Commits `records` (mappings or dataclasses) as the shard of `epoch`; returns its path.

        `epoch` must be greater than every committed epoch. An empty list commits an empty shard
        (the epoch happened; it produced nothing).
        """
        self._require_writable()
        committed = self._committed()
        if not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        epoch = int(epoch)
        if committed and epoch <= committed[-1].epoch:
            raise ValueError(f"pool {self.name!r} already holds epoch {committed[-1].epoch}; epochs must "
                             f"increase (got {epoch}); use truncate_to() to roll back first")
        encoded = [encode_record(r, epoch) for r in records]  # fail before touching the disk

        final = self.dir / shard_name(epoch)
        if storage.is_remote(final):
            with storage.staged_upload(final) as tmp:  # one object upload: atomic on GCS
                num_bytes = self._write_shard(tmp, encoded)
        else:
            tmp = self.dir / f"{_TMP_PREFIX}{final.name}.{os.getpid()}"
            self._write_shard(tmp, encoded)
            fsync_file(tmp)
            os.replace(tmp, final)
            fsync_dir(self.dir)
            num_bytes = final.stat().st_size
        shard = Shard(epoch=epoch, file=final.name, num_records=len(encoded), num_bytes=num_bytes)
        self._commit(committed + [shard])
        return final

    def _write_shard(self, path: Path, encoded: Sequence[bytes]) -> int:
        """Writes the ArrayRecord file `path` (local); returns its size in bytes."""
        writer = ArrayRecordWriter(str(path), WRITER_OPTIONS)
        try:
            for data in encoded:
                writer.write(data)
            if not writer.ok():
                raise OSError(f"pool {self.name!r}: ArrayRecord writer failed on {path}")
        finally:
            writer.close()
        return path.stat().st_size

    def truncate_to(self, epoch: int) -> list[int]:
        """Drops the committed shards of epochs > `epoch` (epoch=-1 empties the pool); returns them."""
        self._require_writable()
        committed = self._committed()
        keep = [s for s in committed if s.epoch <= epoch]
        dropped = [s for s in committed if s.epoch > epoch]
        if dropped:
            self._commit(keep)  # commit first: a crash now leaves only orphans, removed on resume
            for shard in dropped:
                storage.unlink(self.dir / shard.file, missing_ok=True)
            self._sync_dir()
        return [s.epoch for s in dropped]

    # -- reading -------------------------------------------------------------------------------

    def _select(self, epochs: Epochs) -> list[Shard]:
        committed = self._committed()
        if epochs is None:
            return list(committed)
        wanted = {int(epochs)} if isinstance(epochs, (int, np.integer)) else {int(e) for e in epochs}
        return [s for s in committed if s.epoch in wanted]

    def shard_paths(self, epochs: Epochs = None) -> list[AnyPath]:
        """Paths of the committed shards of `epochs` (None: all). Epochs not committed are skipped."""
        return [self.dir / s.file for s in self._select(epochs)]

    def num_records(self, epochs: Epochs = None) -> int:
        return sum(s.num_records for s in self._select(epochs))

    def records(self, epochs: Epochs = None) -> list[dict]:
        """All committed records of `epochs` (None: all), in epoch then write order."""
        out = []
        for shard in self._select(epochs):
            reader = ArrayRecordReader(storage.local_copy(self.dir / shard.file))
            try:
                out.extend(decode_record(b) for b in reader.read_all())
            finally:
                reader.close()
        return out

    def data_source(self, epochs: Epochs = None) -> JsonRecordSource:
        """A Grain random-access source of the committed records of `epochs` (None: all); gs:// shards
        are read from the local cache."""
        shards = self._select(epochs)
        return JsonRecordSource([storage.local_copy(self.dir / s.file) for s in shards if s.num_records])

    def __repr__(self) -> str:
        if self.problem is not None:
            return f"Pool({self.name!r}, problem={self.problem!r})"
        return f"Pool({self.name!r}, epochs={self.epochs}, records={self.num_records()})"

"""TensorBoard event files that always equal the committed metrics rows (no TensorFlow, no thread).

tensorboardX's SummaryWriter queues events for a background thread, and its `flush()` does not
write the queue: a killed run lost the scalars still queued, and a resumed run started a second
file beside the first, so re-run epochs appeared twice. `EventLog` instead:

- writes each metrics row as one Event record (all its scalars in one Summary), appended and
  fsynced by the caller, so a row is on disk when `add` returns; a record cut by a kill fails its
  length or CRC check, and readers (TensorBoard's included) stop before it;
- on opening, rebuilds the directory from the rows it is given (metrics.jsonl, the source of
  truth, already truncated to the resumed checkpoint): one fresh file, renamed into place whole,
  then every other event file removed. Duplicates, losses and the rows of uncommitted epochs vanish;
  each step keeps the wall time its old events recorded.

The files use the TFRecord framing (little-endian length, masked CRC-32C of the length and of the
data) and tensorboardX's Event protos, so TensorBoard reads them as it reads tensorboardX's own.
"""

from __future__ import annotations

import collections
import os
import socket
import struct
import time
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from tensorboardX.proto import event_pb2
from tensorboardX.record_writer import masked_crc32c
from tensorboardX.summary import scalar as scalar_summary

from genenv_jax.workdir import storage
from genenv_jax.workdir.atomic_files import TMP_PREFIX, fsync_dir

FILE_MARKER = "tfevents"  # TensorBoard reads every file whose name contains it
FILE_VERSION = "brain.Event:2"
Scalars = Mapping[str, float]


# -- the record format ------------------------------------------------------------------------


def encode_record(data: bytes) -> bytes:
    """`data` framed as one TFRecord: length, its masked CRC, the data, its masked CRC."""
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


def iter_records(data: bytes) -> Iterator[bytes]:
    """The records of a TFRecord byte string, up to the first one that is cut short or fails its
    CRC (the tail a kill in the middle of an append leaves)."""
    offset = 0
    while offset + 12 <= len(data):
        header = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        end = offset + 12 + length + 4
        if struct.unpack("<I", data[offset + 8:offset + 12])[0] != masked_crc32c(header) or end > len(data):
            return
        body = data[offset + 12:end - 4]
        if struct.unpack("<I", data[end - 4:end])[0] != masked_crc32c(body):
            return
        yield body
        offset = end


def version_record(wall_time: float) -> bytes:
    """The record every event file starts with (TensorBoard checks the file version)."""
    return encode_record(event_pb2.Event(wall_time=wall_time, file_version=FILE_VERSION).SerializeToString())


def scalars_record(step: int, scalars: Scalars, wall_time: float) -> bytes:
    """One Event holding all `scalars` of `step` (tags cleaned as tensorboardX's add_scalar does)."""
    event = event_pb2.Event(wall_time=wall_time, step=step)
    for tag, value in scalars.items():
        event.summary.value.extend(scalar_summary(tag, value).value)
    return encode_record(event.SerializeToString())


def read_events(data: bytes) -> list[event_pb2.Event]:
    """The events of one event file's bytes, up to a cut or corrupt record."""
    return [event_pb2.Event.FromString(record) for record in iter_records(data)]


# -- the files of a directory -----------------------------------------------------------------


def is_event_file(name: str) -> bool:
    return FILE_MARKER in name


def event_files(directory: storage.AnyPath) -> list[storage.AnyPath]:
    """The event files under `directory`, in name order (the order TensorBoard reads them in)."""
    return [directory / name for name in storage.listdir(directory) if is_event_file(name)]


def read_scalars(directory: str | os.PathLike) -> dict[tuple[str, int], list[float]]:
    """(tag, step) -> every value the event files of `directory` hold for it, in file order: what
    TensorBoard would plot (a pair with two values is a duplicate)."""
    points: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    for path in event_files(storage.as_path(directory)):
        for event in read_events(storage.read_bytes(path)):
            for value in event.summary.value:
                points[(value.tag, event.step)].append(value.simple_value)
    return dict(points)


def _wall_times(paths: Sequence[storage.AnyPath]) -> dict[int, float]:
    """step -> the wall time of its last scalars event in `paths` (unreadable files are skipped:
    the times are cosmetic, the values come from metrics.jsonl)."""
    times: dict[int, float] = {}
    for path in paths:
        try:
            events = read_events(storage.read_bytes(path))
        except Exception:  # noqa: BLE001 - any damage: the rebuilt events take the current time
            continue
        times.update({event.step: event.wall_time for event in events if event.HasField("summary")})
    return times


def _new_file_name(now: float) -> str:
    """A name that sorts after every earlier file of this directory (time first, like tensorboardX's)."""
    return f"events.out.{FILE_MARKER}.{int(now):010d}.{socket.gethostname()}.{os.getpid()}.genenv"


def _write_whole(path: storage.AnyPath, data: bytes) -> None:
    """Replaces `path` by `data` at once. Locally through a temp name without the marker, so
    TensorBoard never reads a half-written or abandoned copy; on GCS one object upload."""
    if storage.is_remote(path):
        storage.write_atomic(path, data)
        return
    tmp = Path(path).with_name(f"{TMP_PREFIX}genenv-events.{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(Path(path).parent)


def _remove_all_but(directory: storage.AnyPath, keep: str) -> None:
    """Removes every event file but `keep`, and the temp files of rebuilds a kill interrupted."""
    for name in storage.listdir(directory):
        if name != keep and (is_event_file(name) or name.startswith(f"{TMP_PREFIX}genenv-events.")):
            storage.unlink(directory / name, missing_ok=True)


class EventLog:
    """The scalars of a run's committed metrics rows, as one event file in `directory`."""

    def __init__(self, directory: str | os.PathLike, rows: Sequence[tuple[int, Scalars]]):
        self.directory = storage.as_path(directory)
        self.path: storage.AnyPath | None = None
        self.steps: set[int] = set()
        self._data = b""  # the file's bytes, kept for gs:// (objects are rewritten whole, not appended)
        self.rebuild(rows)

    def rebuild(self, rows: Sequence[tuple[int, Scalars]]) -> None:
        """Makes the directory hold exactly `rows`: a fresh file written whole and renamed into
        place, then the old files removed (a kill in between leaves a duplicate that the next
        rebuild removes; `rows`, from metrics.jsonl, is never lost)."""
        storage.makedirs(self.directory)
        now = time.time()
        old_times = _wall_times(event_files(self.directory))
        data = version_record(now) + b"".join(
            scalars_record(step, scalars, old_times.get(step, now)) for step, scalars in rows if scalars)
        name = _new_file_name(now)
        _write_whole(self.directory / name, data)
        _remove_all_but(self.directory, keep=name)
        self.path, self.steps = self.directory / name, {step for step, _ in rows}
        self._data = data if storage.is_remote(self.directory) else b""

    def add(self, step: int, scalars: Scalars) -> None:
        """Appends the row of a step the file does not hold yet; durable when this returns."""
        if step in self.steps:
            raise ValueError(f"step {step} is already in {self.path}: rebuild instead")
        self.steps.add(step)
        if not scalars:
            return
        record = scalars_record(step, scalars, time.time())
        if storage.is_remote(self.path):
            self._data += record
            storage.write_atomic(self.path, self._data)
            return
        with open(self.path, "ab") as f:
            f.write(record)
            f.flush()
            os.fsync(f.fileno())

"""Orbax checkpoints of named array trees plus caller JSON, one per epoch, verified on restore.

A checkpoint of epoch e holds whatever the caller passes to `Checkpointer.save`: named array
items (params, optimizer states, ...) and a JSON `meta` that must include the pools' manifests
("pool_manifests"). The loop owns its state type; this module only stores and verifies items.

Integrity: `save` records a content digest and the shape / dtype of every leaf (computed on the
devices, independent of sharding); `restore` recomputes the digests of the restored arrays and
refuses a checkpoint whose values differ or are not finite. `resume` restores the newest
checkpoint that passes, sets broken ones aside, and rolls the pools back to the one it uses.

Order of writes in an epoch: pools commit (pools.py), then `save`. So after a crash the pools may
be one epoch ahead of the newest checkpoint, never behind; `resume` truncates them back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from genenv_jax.workdir import storage
from genenv_jax.workdir.checkpoint_digests import (LeafRecord, abstract_tree, json_digest, leaf_records, path_name,
                                                   shape_and_dtype)
from genenv_jax.workdir.checkpoint_errors import install_orbax_log_filter, one_line_cause, quiet_orbax_leftovers
from genenv_jax.workdir.pools import Pool
from genenv_jax.workdir.storage import AnyPath

PyTree = Any
CHECKPOINT_SCHEMA_VERSION = 2
META_ITEM = "meta"  # the JSON item; array items may not use this name


class CheckpointError(RuntimeError):
    """A checkpoint could not be written, read or verified; the message is one line naming it."""


class CheckpointMismatchError(CheckpointError):
    """The caller's targets do not fit a checkpoint (other shapes / dtypes / leaves): a caller error,
    so `resume` refuses at once instead of falling back to an older checkpoint."""


@dataclasses.dataclass(frozen=True)
class Restored:
    """One restored checkpoint: its epoch, the array items asked for and held, and the caller's JSON."""

    epoch: int
    arrays: dict[str, PyTree]
    meta: dict[str, Any]


# ----------------------------------------------------------------------------------------------
# The checkpointer.


class Checkpointer:
    """Keeps the last `max_to_keep` epoch checkpoints under `directory` (an Orbax CheckpointManager).

    async_save=True (default) returns from `save` once the arrays are copied off the devices and
    writes in a background thread, overlapping the next epoch; a failure of that write surfaces as
    a one-line CheckpointError at the next `save`, `wait_until_finished` or `close`. A checkpoint
    becomes visible (latest_epoch) only once fully written, so a crash mid-write leaves the
    previous one as the latest. Every process of a multi-host run must call `save` and `restore*`.
    """

    def __init__(self, directory: str | os.PathLike, *, max_to_keep: int | None = 3, async_save: bool = True):
        if max_to_keep is not None and (not isinstance(max_to_keep, int) or max_to_keep < 1):
            raise ValueError(f"keep must be >= 1 (checkpoints to keep), or None to keep all; got {max_to_keep!r}")
        install_orbax_log_filter()
        self.directory = storage.absolute(directory)  # Orbax writes gs:// itself (TensorStore, epath)
        self.async_save = async_save
        self._pending_epoch: int | None = None
        options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, enable_async_checkpointing=async_save,
                                               create=True, cleanup_tmp_directories=True)
        try:
            self._manager = ocp.CheckpointManager(self.directory, options=options)
        except Exception as e:  # noqa: BLE001 - e.g. an unwritable directory
            raise CheckpointError(f"cannot open checkpoint directory {self.directory}: {one_line_cause(e)}") from None

    # -- saving --------------------------------------------------------------------------------

    def save(self, epoch: int, arrays: Mapping[str, PyTree | None], meta: Mapping[str, Any]) -> None:
        """Saves `arrays` (None items skipped) and the JSON `meta` as epoch `epoch`.

        Refuses (CheckpointError, nothing written) a non-finite float in any item, so every
        checkpoint on disk is one that restores. Returns before the write ends if async_save.
        """
        if not isinstance(epoch, (int, np.integer)) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError(f"checkpoint epoch must be an int >= 0, got {epoch!r}")
        epoch = int(epoch)
        items = {name: tree for name, tree in arrays.items() if tree is not None}
        if META_ITEM in items:
            raise ValueError(f"{META_ITEM!r} is reserved for the checkpoint's JSON; rename that array item")
        self.wait_until_finished()  # surfaces a failed previous write before starting another
        records = {name: leaf_records(tree) for name, tree in items.items()}
        self._refuse_nonfinite(epoch, records)
        stored_meta = self._stored_meta(epoch, records, meta)
        args = {name: ocp.args.StandardSave(tree) for name, tree in items.items()}
        args[META_ITEM] = ocp.args.JsonSave(stored_meta)
        try:
            self._manager.save(epoch, args=ocp.args.Composite(**args), force=True)
        except Exception as e:  # noqa: BLE001 - Orbax / TensorStore / OS errors alike
            logging.debug("checkpoint save of epoch %d failed", epoch, exc_info=True)
            raise CheckpointError(f"checkpoint of epoch {epoch} in {self.directory} was not written: "
                                  f"{one_line_cause(e)}") from None
        self._pending_epoch = epoch
        if not self.async_save:
            self.wait_until_finished()

    def _refuse_nonfinite(self, epoch: int, records: Mapping[str, Mapping[str, LeafRecord]]) -> None:
        for name, leaves in records.items():
            for path, record in leaves.items():
                if record.nonfinite:
                    raise CheckpointError(f"refusing to save epoch {epoch} to {self.directory}: item {name} leaf "
                                          f"{path} holds {record.nonfinite} non-finite values")

    @staticmethod
    def _stored_meta(epoch: int, records: Mapping[str, Mapping[str, LeafRecord]],
                     meta: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON item: the caller's meta plus what verification needs (leaf digests, meta digest)."""
        try:  # stored exactly as it will read back (tuples become lists, keys strings)
            meta = json.loads(json.dumps(dict(meta), allow_nan=False))
        except (TypeError, ValueError) as e:
            raise ValueError(f"checkpoint meta of epoch {epoch} is not JSON (NaN/inf or a non-JSON type): {e}") from e
        items = {name: {path: r.to_json() for path, r in leaves.items()} for name, leaves in records.items()}
        payload = {"epoch": epoch, "meta": meta, "items": items}
        return {"schema_version": CHECKPOINT_SCHEMA_VERSION, **payload, "digest": json_digest(payload)}

    def wait_until_finished(self) -> None:
        """Blocks until the pending async save is on disk; CheckpointError (one line) if it failed."""
        epoch, self._pending_epoch = self._pending_epoch, None
        try:
            self._manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001 - raised from Orbax's background thread
            logging.debug("background checkpoint write failed", exc_info=True)
            which = "a checkpoint" if epoch is None else f"checkpoint of epoch {epoch}"
            raise CheckpointError(f"{which} in {self.directory} was not written: {one_line_cause(e)}") from None

    # -- reading -------------------------------------------------------------------------------

    def latest_epoch(self) -> int | None:
        return self._manager.latest_step()

    def all_epochs(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def finished_epoch(self) -> int | None:
        """The newest epoch whose checkpoint is wholly on disk: `latest_epoch` less a save still being
        written in the background (a kill now would resume from the one before). The experiment
        trackers take rows up to it (`workdir.metrics.MetricsWriter`)."""
        epochs = self.all_epochs()
        in_progress = getattr(self._manager, "is_saving_in_progress", lambda: True)
        if self._pending_epoch is not None and in_progress():
            epochs = [epoch for epoch in epochs if epoch != self._pending_epoch]
        return epochs[-1] if epochs else None

    def _require_epoch(self, epoch: int) -> None:
        if epoch not in self._manager.all_steps():
            raise CheckpointError(f"no checkpoint of epoch {epoch} in {self.directory} (have {self.all_epochs()})")

    def _stored(self, epoch: int) -> dict[str, Any]:
        """The JSON item of `epoch`, checked against its own digest."""
        self._require_epoch(epoch)
        with self._orbax_errors(epoch):
            stored = self._manager.restore(epoch, args=ocp.args.Composite(**{META_ITEM: ocp.args.JsonRestore()}))
        stored = stored[META_ITEM]
        where = f"checkpoint of epoch {epoch} in {self.directory}"
        version = stored.get("schema_version") if isinstance(stored, dict) else None
        if isinstance(version, int) and version != CHECKPOINT_SCHEMA_VERSION:  # another code version wrote it
            raise CheckpointMismatchError(f"{where} has checkpoint schema {version}; this code reads "
                                          f"{CHECKPOINT_SCHEMA_VERSION} (resume it with the code that wrote it, "
                                          f"or use another --workdir)")
        if version is None:
            raise CheckpointError(f"{where} is corrupt: its JSON item is not a checkpoint record")
        payload = {key: stored.get(key) for key in ("epoch", "meta", "items")}
        if stored.get("epoch") != epoch or json_digest(payload) != stored.get("digest"):
            raise CheckpointError(f"{where} is corrupt: its JSON does not match its recorded digest")
        return stored

    def metadata(self, epoch: int) -> dict[str, Any]:
        """The caller's saved meta plus "saved_items" (the array item names the checkpoint holds)."""
        stored = self._stored(epoch)
        return {**stored["meta"], "saved_items": sorted(stored["items"])}

    def restore(self, epoch: int, targets: Mapping[str, PyTree]) -> Restored:
        """The checkpoint of `epoch`: each item of `targets` that it holds, placed like the target
        (ShapeDtypeStructs with shardings, or arrays), verified against the saved digests."""
        stored = self._stored(epoch)
        wanted = {name: target for name, target in targets.items() if name in stored["items"]}
        for name, target in wanted.items():
            self._check_target(epoch, name, target, stored["items"][name])
        arrays = {}
        if wanted:
            args = {name: ocp.args.StandardRestore(abstract_tree(t)) for name, t in wanted.items()}
            with self._orbax_errors(epoch):
                arrays = dict(self._manager.restore(epoch, args=ocp.args.Composite(**args)))
        for name, tree in arrays.items():
            self._verify(epoch, name, tree, stored["items"][name])
        return Restored(epoch=epoch, arrays=arrays, meta=stored["meta"])

    def restore_item(self, epoch: int, name: str, target: PyTree) -> PyTree:
        """One array item (e.g. "agent_params") of a checkpoint, placed like `target` and verified."""
        restored = self.restore(epoch, {name: target})
        if name not in restored.arrays:
            raise CheckpointError(f"checkpoint of epoch {epoch} in {self.directory} holds no item {name!r} "
                                  f"(it has {self.metadata(epoch)['saved_items']})")
        return restored.arrays[name]

    @contextlib.contextmanager
    def _orbax_errors(self, epoch: int) -> Iterator[None]:
        """Turns anything Orbax raises while reading `epoch` into one CheckpointError line."""
        error = None
        with quiet_orbax_leftovers():
            try:
                yield
            except CheckpointError:
                raise
            except Exception as e:  # noqa: BLE001 - TensorStore / JSON / OS errors alike
                logging.debug("reading checkpoint %d failed", epoch, exc_info=True)
                error = CheckpointError(f"checkpoint of epoch {epoch} in {self.directory} does not restore: "
                                        f"{one_line_cause(e)}")
        if error is not None:
            raise error

    def _check_target(self, epoch: int, name: str, target: PyTree, saved: Mapping[str, Any]) -> None:
        """Raises CheckpointMismatchError if `target`'s leaves differ from the saved ones in name,
        shape or dtype (before reading anything: such a checkpoint is not broken, the caller is)."""
        leaves = {path_name(p): leaf for p, leaf in jax.tree_util.tree_flatten_with_path(target)[0]}
        where = f"checkpoint of epoch {epoch} in {self.directory}, item {name}"
        if set(leaves) != set(saved):
            missing, extra = sorted(set(saved) - set(leaves)), sorted(set(leaves) - set(saved))
            raise CheckpointMismatchError(f"{where}: the target's leaves differ (checkpoint only: {missing[:3]}, "
                                          f"target only: {extra[:3]})")
        for path, leaf in leaves.items():
            shape, dtype = shape_and_dtype(leaf)
            want = (tuple(saved[path]["shape"]), saved[path]["dtype"])
            if (shape, dtype) != want:
                raise CheckpointMismatchError(f"{where}: leaf {path} is {want[1]}{list(want[0])} in the checkpoint "
                                              f"but {dtype}{list(shape)} in the target")

    def _verify(self, epoch: int, name: str, tree: PyTree, saved: Mapping[str, Any]) -> None:
        """Raises CheckpointError if a restored leaf's digest differs from the saved one or a value
        is not finite (corruption that still decodes, e.g. flipped bytes in an uncompressed chunk)."""
        where = f"checkpoint of epoch {epoch} in {self.directory} is corrupt: item {name} leaf"
        for path, record in leaf_records(tree).items():
            if record.digest != saved[path]["digest"]:
                raise CheckpointError(f"{where} {path} does not match its saved checksum")
            if record.nonfinite:
                raise CheckpointError(f"{where} {path} holds {record.nonfinite} non-finite values")

    # -- housekeeping --------------------------------------------------------------------------

    def set_aside(self, epoch: int) -> AnyPath:
        """Moves a broken checkpoint out of the directory (to <directory>-broken/) so the run can
        write that epoch again; returns where it went. Only process 0 moves (on GCS: copies, then
        deletes); all processes reload."""
        self._require_epoch(epoch)
        dest = storage.as_path(f"{self.directory}-broken") / f"epoch_{epoch}.{time.strftime('%Y%m%d-%H%M%S')}"
        if jax.process_index() == 0:
            storage.makedirs(dest.parent)
            storage.move(storage.as_path(self.directory) / str(epoch), dest)
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices(f"genenv_set_aside_{epoch}")
        self._manager.reload()
        return dest

    def close(self) -> None:
        """Waits for the pending save (CheckpointError if it failed) and releases the manager."""
        try:
            self.wait_until_finished()
        finally:
            self._manager.close()

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # an exception is already on its way: report a failed write without masking it
            self.close()
        except CheckpointError as e:
            logging.error("%s", e)


# ----------------------------------------------------------------------------------------------
# Resume.


def _pool_manifests(restored: Restored, pools: Mapping[str, Pool], where: str) -> dict[str, Any]:
    manifests = restored.meta.get("pool_manifests")
    if pools and not isinstance(manifests, Mapping):
        raise CheckpointMismatchError(f"{where} saved no pool_manifests in its meta")
    missing = sorted(set(pools) - set(manifests or {}))
    if missing:
        raise CheckpointMismatchError(f"{where} has no manifest for pool {missing[0]!r} (it has {sorted(manifests)})")
    return {name: manifests[name] for name in pools}


def _roll_back_pools(pools: Mapping[str, Pool], manifests: Mapping[str, Any] | None, epoch: int) -> None:
    """Commits each pool to the checkpoint's manifest (None: no checkpoint, nothing committed) and
    deletes only the shards that manifest does not list. Checks every pool before touching any."""
    targets = {name: None if manifests is None else manifests[name] for name in pools}
    for name, pool in pools.items():
        pool.check_roll_back(targets[name])
    for name, pool in pools.items():
        problem = pool.problem
        dropped = pool.roll_back_to(targets[name])
        if problem is not None and targets[name] is not None:
            logging.warning("resume: pool %s: restored its manifest from the checkpoint of epoch %d (%s)",
                            name, epoch, problem)
        if dropped:
            logging.warning("resume: pool %s: dropped epochs %s past the checkpoint of epoch %d",
                            name, dropped, epoch)


def resume(checkpointer: Checkpointer, targets: Mapping[str, PyTree], pools: Mapping[str, Pool]) -> Restored | None:
    """Restores the newest checkpoint that restores and verifies, and rolls `pools` back to it.

    None means there is no checkpoint at all: every pool is emptied (nothing was committed with a
    checkpoint). A broken newer checkpoint is logged (one line), moved aside and skipped. If every
    checkpoint is broken: CheckpointError naming the directory, with nothing touched. Pass the
    pools on process 0 only (the one writer); other processes pass {}.
    """
    epochs = checkpointer.all_epochs()
    if not epochs:
        _roll_back_pools(pools, None, -1)
        return None
    broken: list[tuple[int, str]] = []
    for epoch in reversed(epochs):
        try:
            restored = checkpointer.restore(epoch, targets)
            manifests = _pool_manifests(restored, pools, f"checkpoint of epoch {epoch} in {checkpointer.directory}")
        except CheckpointMismatchError:
            raise
        except CheckpointError as e:
            broken.append((epoch, str(e)))
            continue
        _roll_back_pools(pools, manifests, epoch)
        for bad_epoch, why in broken:
            moved = checkpointer.set_aside(bad_epoch)
            logging.warning("resume: %s; moved it to %s and resuming from the checkpoint of epoch %d",
                            why, moved, epoch)
        return restored
    causes = "; ".join(f"epoch {e}: {why.split(': ', 1)[-1]}" for e, why in broken)
    raise CheckpointError(f"no checkpoint in {checkpointer.directory} restores ({causes})")

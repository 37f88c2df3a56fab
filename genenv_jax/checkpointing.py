"""Orbax checkpoints of the co-evolution state, one per epoch, and resume with the pools rolled back.

A checkpoint of epoch e holds everything needed to run epoch e+1 as an uninterrupted run would:
agent and simulator params, their optimizer states, (optionally) the reference params, the RNG
key, the epoch, the pools' manifests, the config snapshot and free-form JSON from the loop. Arrays
restore straight into the shardings of the abstract state you pass (any mesh), never via one host.

Order of writes in an epoch: pools commit (pools.py), then `save`. So after a crash the pools may
be one epoch ahead of the newest checkpoint, never behind; `resume` truncates them back.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from genenv_jax.pools import Pool

PyTree = Any
CHECKPOINT_SCHEMA_VERSION = 1
_ARRAY_ITEMS = ("agent_params", "env_params", "agent_opt_state", "env_opt_state")


@dataclasses.dataclass
class CoevolveState:
    """The loop's state after epoch `epoch` completed (the next epoch to run is epoch + 1).

    reference_params: the frozen KL references (e.g. {"agent": ..., "env": ...}), or None when
      they are exactly the initial params that the loop rebuilds deterministically from the
      config (the same HF directory or init seed). None avoids storing a third and fourth copy
      of the weights in every checkpoint; save them only if they cannot be rebuilt.
    rng: a typed key (jax.random.key) or a raw uint32 key (jax.random.PRNGKey); stored as key data.
    pool_manifests: {pool name: Pool.manifest} as committed for this epoch.
    config: a JSON snapshot of the run's config. extra: any other JSON the loop needs on resume
      (e.g. per-seed reward variances for seed selection).
    """

    epoch: int
    agent_params: PyTree
    env_params: PyTree
    agent_opt_state: PyTree
    env_opt_state: PyTree
    rng: jax.Array
    pool_manifests: dict[str, Any] = dataclasses.field(default_factory=dict)
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    reference_params: PyTree | None = None


def _is_typed_key(x: Any) -> bool:
    return jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _host_key_data(rng: jax.Array) -> np.ndarray:
    """The RNG key's raw uint32 data on this host (the key is replicated, so any shard is all of it)."""
    data = jax.random.key_data(rng) if _is_typed_key(rng) else rng
    if isinstance(data, jax.Array) and not data.is_fully_addressable:
        data = data.addressable_data(0)
    return np.asarray(data)


def abstract_tree(tree: PyTree) -> PyTree:
    """ShapeDtypeStructs (with each array's sharding) for a tree of arrays: a restore target."""
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def abstract_state(state: CoevolveState) -> CoevolveState:
    """A restore target shaped and sharded like `state` (JSON fields are ignored on restore)."""
    return dataclasses.replace(
        state, **{name: abstract_tree(getattr(state, name)) for name in _ARRAY_ITEMS},
        reference_params=None if state.reference_params is None else abstract_tree(state.reference_params),
        rng=jax.ShapeDtypeStruct(state.rng.shape, state.rng.dtype))


class Checkpointer:
    """Keeps the last `max_to_keep` epoch checkpoints under `directory` (an Orbax CheckpointManager).

    async_save=True (default) returns from `save` once the arrays are copied off the devices
    and writes in a background thread, overlapping the next epoch; call `wait_until_finished()`
    before reading the checkpoint from elsewhere (and `close()` at the end, which waits). A
    checkpoint becomes visible (latest_epoch) only once fully written, so a crash mid-write
    leaves the previous one as the latest. async_save=False makes `save` block until written.
    Every process of a multi-host run must call `save` and `restore*`.
    """

    def __init__(self, directory: str | os.PathLike, *, max_to_keep: int | None = 3, async_save: bool = True):
        if max_to_keep is not None and max_to_keep < 1:
            raise ValueError(f"max_to_keep must be >= 1 or None (keep all), got {max_to_keep}")
        self.directory = os.path.abspath(os.fspath(directory))
        self.async_save = async_save
        options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, enable_async_checkpointing=async_save,
                                               create=True, cleanup_tmp_directories=True)
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    # -- saving --------------------------------------------------------------------------------

    def save(self, state: CoevolveState, *, force: bool = True) -> None:
        """Saves `state` as step `state.epoch` (returns before the write ends if async_save)."""
        if not isinstance(state.epoch, (int, np.integer)) or state.epoch < 0:
            raise ValueError(f"state.epoch must be an int >= 0, got {state.epoch!r}")
        rng = state.rng
        typed = _is_typed_key(rng)
        key_data = _host_key_data(rng)
        meta = {"schema_version": CHECKPOINT_SCHEMA_VERSION, "epoch": int(state.epoch),
                "rng_impl": str(jax.random.key_impl(rng)) if typed else None,
                "references_saved": state.reference_params is not None,
                "pool_manifests": state.pool_manifests, "config": state.config, "extra": state.extra}
        items = {name: ocp.args.StandardSave(getattr(state, name)) for name in _ARRAY_ITEMS}
        items["rng"] = ocp.args.StandardSave({"key_data": key_data})
        items["meta"] = ocp.args.JsonSave(meta)
        if state.reference_params is not None:
            items["reference_params"] = ocp.args.StandardSave(state.reference_params)
        self._manager.save(int(state.epoch), args=ocp.args.Composite(**items), force=force)
        if not self.async_save:
            self._manager.wait_until_finished()

    def wait_until_finished(self) -> None:
        """Blocks until every pending async save is on disk."""
        self._manager.wait_until_finished()

    # -- restoring -----------------------------------------------------------------------------

    def latest_epoch(self) -> int | None:
        return self._manager.latest_step()

    def all_epochs(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def restore(self, epoch: int, target: CoevolveState) -> CoevolveState:
        """The checkpoint of `epoch`, its arrays placed like `target`'s (ShapeDtypeStructs with shardings
        or concrete arrays); `target`'s epoch / JSON fields are ignored."""
        if epoch not in self._manager.all_steps():
            raise FileNotFoundError(f"no checkpoint of epoch {epoch} in {self.directory} "
                                    f"(have {self.all_epochs()})")
        meta = self._manager.restore(epoch, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
        if meta.get("schema_version") != CHECKPOINT_SCHEMA_VERSION:
            raise ValueError(f"checkpoint {epoch} has schema version {meta.get('schema_version')!r}; "
                             f"this code reads {CHECKPOINT_SCHEMA_VERSION}")
        wants_refs = target.reference_params is not None
        if wants_refs and not meta["references_saved"]:
            raise ValueError(f"checkpoint {epoch} holds no reference params (they were the initial params); "
                             "rebuild them from the config and pass reference_params=None in the target")

        rng_target = target.rng
        typed = _is_typed_key(rng_target)
        if typed != (meta["rng_impl"] is not None):
            raise ValueError(f"checkpoint {epoch} stores a {'typed' if meta['rng_impl'] else 'raw uint32'} "
                             f"RNG key but the target's rng is {'typed' if typed else 'raw'}")
        key_data_shape = jax.eval_shape(jax.random.key_data, rng_target) if typed else rng_target
        items = {name: ocp.args.StandardRestore(abstract_tree(getattr(target, name))) for name in _ARRAY_ITEMS}
        items["rng"] = ocp.args.StandardRestore(
            {"key_data": np.zeros(key_data_shape.shape, key_data_shape.dtype)})
        if wants_refs:
            items["reference_params"] = ocp.args.StandardRestore(abstract_tree(target.reference_params))
        restored = self._manager.restore(epoch, args=ocp.args.Composite(**items))

        key_data = jnp.asarray(restored["rng"]["key_data"])
        rng = jax.random.wrap_key_data(key_data, impl=meta["rng_impl"]) if typed else key_data
        return CoevolveState(
            epoch=int(meta["epoch"]), **{name: restored[name] for name in _ARRAY_ITEMS}, rng=rng,
            pool_manifests=meta["pool_manifests"], config=meta["config"], extra=meta["extra"],
            reference_params=restored["reference_params"] if wants_refs else None)

    def metadata(self, epoch: int) -> dict[str, Any]:
        """The JSON side of a checkpoint: epoch, config snapshot, pool manifests, extra."""
        if epoch not in self._manager.all_steps():
            raise FileNotFoundError(f"no checkpoint of epoch {epoch} in {self.directory} (have {self.all_epochs()})")
        return self._manager.restore(epoch, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]

    def restore_item(self, epoch: int, name: str, target: PyTree) -> PyTree:
        """One array item (e.g. "agent_params") of a checkpoint, placed like `target`."""
        if name not in _ARRAY_ITEMS:
            raise KeyError(f"unknown checkpoint item {name!r}; expected one of {_ARRAY_ITEMS}")
        self.metadata(epoch)  # existence + a readable checkpoint
        args = ocp.args.Composite(**{name: ocp.args.StandardRestore(abstract_tree(target))})
        return self._manager.restore(epoch, args=args)[name]

    def restore_latest(self, target: CoevolveState) -> CoevolveState | None:
        """The newest complete checkpoint restored like `restore`, or None if there is none."""
        epoch = self.latest_epoch()
        return None if epoch is None else self.restore(epoch, target)

    def close(self) -> None:
        """Waits for pending saves and releases the manager."""
        self._manager.wait_until_finished()
        self._manager.close()

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def resume(checkpointer: Checkpointer, target: CoevolveState, pools: Mapping[str, Pool]) -> CoevolveState | None:
    """Restores the newest checkpoint and rolls `pools` back to it; None means start from scratch.

    Pools hold one shard per epoch and commit before the checkpoint, so a crash between the two
    leaves a pool ahead of the checkpoint: its later shards are dropped here. With no checkpoint
    every pool is emptied. Afterwards each pool's manifest must equal the one the checkpoint
    recorded (a mismatch means the pool directory does not belong to this run: an error).
    """
    state = checkpointer.restore_latest(target)
    last_epoch = -1 if state is None else state.epoch
    for name, pool in pools.items():
        dropped = pool.truncate_to(last_epoch)
        if dropped:
            logging.warning("resume: pool %s had epochs %s past the last checkpoint (epoch %d); dropped them",
                            name, dropped, last_epoch)
        if state is None:
            continue
        if name not in state.pool_manifests:
            raise ValueError(f"checkpoint of epoch {state.epoch} has no manifest for pool {name!r} "
                             f"(it has {sorted(state.pool_manifests)})")
        if pool.manifest != state.pool_manifests[name]:
            raise ValueError(f"pool {name!r} in {pool.dir} does not match the checkpoint of epoch {state.epoch}: "
                             f"pool has epochs {pool.epochs}, checkpoint recorded "
                             f"{[s['epoch'] for s in state.pool_manifests[name]['shards']]}")
    return state

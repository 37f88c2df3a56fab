"""Small array helpers shared by the sampler, the update steps, checkpoint restore and HF export:
abstract (shape, dtype, sharding) trees, host gathers, and micro-batch splitting."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from genenv_jax.parallel.mesh import BATCH_AXES


def abstract_like(tree: Any, shardings: Any = None) -> Any:
    """ShapeDtypeStructs of `tree`'s leaves (arrays or ShapeDtypeStructs) carrying `shardings`
    (a matching tree; None: no sharding). Restore targets and AOT-compile arguments."""
    if shardings is None:
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tree)
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings)


def to_host(x: Any) -> np.ndarray:
    """The whole (global) value of an array as numpy, on every process.

    An array that spans other hosts is all-gathered (a collective: every process must call this
    with the same array); a local one is only copied to the host.
    """
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))


def split_micro_batches(x: jax.Array, micro_batches: int, mesh: Mesh | None = None) -> jax.Array:
    """[B, ...] -> [M, B/M, ...]; micro-batch m takes rows m, m+M, m+2M, ... (call inside jit).

    Interleaving keeps every micro-batch spread evenly over the devices that hold the batch
    (each device's contiguous block of rows contributes to every micro-batch), so no data moves;
    with a mesh, the rows of each micro-batch are constrained to stay over data x fsdp.
    """
    size = x.shape[0]
    if size % micro_batches:
        raise ValueError(f"batch size {size} is not divisible by micro_batches {micro_batches}")
    x = x.reshape(size // micro_batches, micro_batches, *x.shape[1:]).swapaxes(0, 1)
    if mesh is not None:
        x = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(None, BATCH_AXES)))
    return x

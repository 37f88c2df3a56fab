"""The mesh a traced function runs under, and which of its axes can split a dimension: for code that
shards by hand (`shard_map` kernels, the vocabulary-parallel LM head) rather than by logical names."""

from __future__ import annotations

import math

import jax


def active_mesh():
    """The abstract mesh of the surrounding `jax.set_mesh` / `parallel.mesh_context`, or None."""
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh is None or mesh.empty else mesh


def dividing_axes(mesh, axes: tuple[str, ...], dim: int) -> tuple[str, ...]:
    """The mesh axes of `axes` (in order, size > 1) whose product divides `dim`."""
    sizes = dict(mesh.shape)
    chosen: list[str] = []
    for axis in axes:
        size = sizes.get(axis, 1)
        if size > 1 and dim % (math.prod(sizes[a] for a in chosen) * size) == 0:
            chosen.append(axis)
    return tuple(chosen)

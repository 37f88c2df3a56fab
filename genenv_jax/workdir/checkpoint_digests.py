"""Checkpoint leaf digests: layout-independent content checksums of array leaves, computed on the
devices (two 32-bit integer sums over hashed words and positions), plus shape, dtype and the count
of non-finite values. A checkpoint saved on one device verifies when restored onto any mesh."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

PyTree = Any



def _fmix32(h: jax.Array) -> jax.Array:
    """MurmurHash3's 32-bit finaliser: a bijection on uint32 that spreads every input bit."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def _as_words(x: jax.Array) -> jax.Array:
    """The raw bits of `x` as a uint32 array (one word per 1-4 byte element, two per 8-byte one)."""
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        x = jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint32)
    unsigned = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}[x.dtype.itemsize]
    return jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32)


def _positions(shape: tuple[int, ...]) -> jax.Array:
    """Each element's row-major flat index (mod 2^32), built from iotas so it shards like the data."""
    index = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        index = index + jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * jnp.uint32(stride & 0xFFFFFFFF)
        stride *= shape[axis]
    return index


@jax.jit
def _leaf_check(x: jax.Array) -> jax.Array:
    """uint32[3]: (digest lane 0, digest lane 1, number of non-finite values) of one leaf.

    Each lane is sum_i fmix(word_i ^ fmix(i ^ seed)) mod 2^32: integer sums do not depend on the
    reduction order, so the digest is the same for any sharding, mesh or host count, and a change
    of any single word always changes it (fmix and xor are bijections).
    """
    words = _as_words(x)
    position = _positions(words.shape)
    lanes = [jnp.sum(_fmix32(words ^ _fmix32(position ^ jnp.uint32(seed))), dtype=jnp.uint32)
             for seed in (0x9E3779B9, 0x7F4A7C15)]
    floating = jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(x.dtype, jnp.complexfloating)
    nonfinite = jnp.sum(~jnp.isfinite(x), dtype=jnp.uint32) if floating else jnp.uint32(0)
    return jnp.stack([lanes[0], lanes[1], nonfinite])


def _to_host(x: jax.Array) -> np.ndarray:
    """A small replicated device array on this host (on multi-host runs, from this host's copy)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        x = x.addressable_data(0)
    return np.asarray(x)


def path_name(path: tuple) -> str:
    """A leaf path as 'a/b/0', the same for dicts, namedtuples and dataclasses holding the same names."""
    parts = []
    for key in path:
        for attr in ("key", "name", "idx"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
        else:
            parts.append(str(key))
    return "/".join(parts) or "<root>"


@dataclasses.dataclass(frozen=True)
class LeafRecord:
    """What `save` records per leaf: shape, dtype, content digest and non-finite count."""

    shape: tuple[int, ...]
    dtype: str
    digest: str
    nonfinite: int

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "digest": self.digest}


def _leaf_value(leaf: Any) -> jax.Array:
    return leaf if isinstance(leaf, jax.Array) else jnp.asarray(leaf)


def shape_and_dtype(leaf: Any) -> tuple[tuple[int, ...], str]:
    """A leaf's (shape, dtype name) as JAX holds it (numpy float64 becomes float32 without x64)."""
    if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
        leaf = jnp.asarray(leaf)
    dtype = leaf.dtype
    if not jnp.issubdtype(dtype, jax.dtypes.prng_key):
        dtype = jax.dtypes.canonicalize_dtype(dtype)
    return tuple(int(d) for d in leaf.shape), str(dtype)


def leaf_records(tree: PyTree) -> dict[str, LeafRecord]:
    """{leaf path: LeafRecord} for every leaf of `tree` (one small jitted reduction per leaf)."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    checks = [_leaf_check(_leaf_value(leaf)) for _, leaf in leaves]  # all dispatched before the first fetch
    records = {}
    for (path, leaf), check in zip(leaves, checks):
        lane0, lane1, nonfinite = (int(v) for v in _to_host(check))
        shape, dtype = shape_and_dtype(leaf)
        records[path_name(path)] = LeafRecord(shape=shape, dtype=dtype, digest=f"{lane0:08x}{lane1:08x}",
                                               nonfinite=nonfinite)
    return records


def json_digest(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def tree_digest(tree: PyTree) -> str:
    """16 hex digits over every leaf's path, shape, dtype and content digest (`leaf_records`): the
    identity of a whole tree, e.g. the frozen base a LoRA run's adapters were trained on. Computed
    where the arrays live, the same for any sharding, mesh or host count."""
    return json_digest({path: record.to_json() for path, record in leaf_records(tree).items()})[:16]


def _abstract_leaf(leaf: Any) -> Any:
    if isinstance(leaf, jax.Array):  # keeps typed PRNG key dtypes, which Orbax's helper turns into uint32
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding)
    return leaf if isinstance(leaf, jax.ShapeDtypeStruct) else ocp.utils.to_shape_dtype_struct(leaf)


def abstract_tree(tree: PyTree) -> PyTree:
    """ShapeDtypeStructs (with each array's sharding) for a tree of arrays: a restore target."""
    return jax.tree.map(_abstract_leaf, tree)

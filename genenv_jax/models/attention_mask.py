"""The masks attention kernels take, and the finite mask value they share.

A mask is either a dense bool array [B, T, S] (True: query t may see key s), which any length of
queries and keys can use (the KV-cache decoder's kind), or a `PaddedCausalMask`, the structured
mask of causal self-attention over padded rows: it never materialises a [T, S] array, lets the
blockwise kernel skip blocks, and becomes segment ids (splash) or sequence lengths (cudnn).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

MASK_VALUE = -1e30  # finite, so a fully masked (padding) row gives a uniform softmax, not NaN


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PaddedCausalMask:
    """Causal self-attention over padded rows: query t sees key s iff s <= t and key s is valid.

    key_valid [B, S] bool (False on padding); queries and keys are the same positions (T == S).
    Each row's valid tokens are expected to form one contiguous run (left and/or right padding,
    as `loop.packing` and the sampler lay rows out); only the cudnn kernel relies on that.
    """

    key_valid: jax.Array

    def dense(self) -> jax.Array:
        """The equivalent [B, T, T] bool mask."""
        length = self.key_valid.shape[1]
        causal = jnp.arange(length)[None, :] <= jnp.arange(length)[:, None]  # [T, S]
        return causal[None] & self.key_valid[:, None, :].astype(bool)


Mask = Any  # a dense [B, T, S] bool array or a PaddedCausalMask


def dense_mask(mask: Mask) -> jax.Array:
    """[B, T, S] bool from either mask form."""
    return mask.dense() if isinstance(mask, PaddedCausalMask) else mask.astype(bool)


def pad_axis(x: jax.Array, axis: int, size: int, value: Any = 0) -> jax.Array:
    """x with `axis` padded at the end up to `size` (kernels that work on whole blocks or tiles)."""
    if x.shape[axis] == size:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, widths, constant_values=value)

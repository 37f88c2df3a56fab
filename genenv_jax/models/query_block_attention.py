"""Causal attention as a few dense query blocks, each over the key prefix it can see: the CPU kernel.

Query block [i0, i1) of a causal row sees keys [0, i1) only, so the blocks' scores cover about
half of the [T, S] square that `einsum_attention` computes and masks, with no loop: the blocks are
a static Python unroll, each one batched matmul over (batch, kv head) with the G query heads of a
kv head and the block's rows as one axis, so every matmul has long rows and a contiguous
contraction. Why not the blockwise kernel on CPU: its `fori_loop` over dynamically sliced key
blocks runs several times slower on XLA's CPU backend than the same FLOPs as static matmuls
(measured on the real 0.5B at 4 x 640 tokens, forward and backward: blockwise 957 ms a layer,
einsum 357 ms, this 139 ms; docs/benchmarks.md). Memory: the float32 probabilities of all blocks,
about half of einsum's [B, K, G, T, S], are kept for the backward pass (autodiff, no custom rule),
so `attention.resolve_kernel_name` chooses blockwise instead when they would be large.

A dense mask (the KV-cache decoder's kind, or any non-causal mask) is one block over all keys.
Numerics are einsum's: float32 scores and softmax, probabilities in v's dtype; on query rows with
at least one visible key the two agree to float rounding (a row's sum runs over fewer masked
zeros). A row with no visible key (padding) averages the keys its block visited, never NaN.

Shape letters: B batch, T queries, S keys, K kv heads, G query heads per kv head, H head dim,
M = G x (a block's rows).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from genenv_jax.core.bucketing import round_up
from genenv_jax.models.attention_mask import MASK_VALUE, Mask, PaddedCausalMask, dense_mask

MIN_BLOCK_Q = 128  # query rows per block at least (shorter blocks starve the matmuls)
MAX_BLOCKS = 16    # at most this many blocks (the unrolled program grows with their number)


def query_block_size(length: int, block_q: int | None = None) -> int:
    """Rows per query block for `length` queries: `block_q`, else MIN_BLOCK_Q or more, so that at
    most MAX_BLOCKS blocks cover the sequence (a multiple of MIN_BLOCK_Q)."""
    if block_q is not None:
        if block_q < 1:
            raise ValueError(f"block_q must be >= 1, got {block_q}")
        return block_q
    return max(MIN_BLOCK_Q, round_up(-(-length // MAX_BLOCKS), MIN_BLOCK_Q))


def dense_attention(q: jax.Array, k: jax.Array, v: jax.Array, visible: jax.Array) -> jax.Array:
    """Dense attention of q [B, K, G, n, H] over k, v [B, K, s, H] under visible [B, n, s] -> [B, K, G, n, H]:
    float32 scores and softmax, probabilities in v's dtype (`attention.einsum_attention`'s maths)."""
    batch, kv_heads, groups, rows, head_dim = q.shape
    scores = jnp.einsum("bkmh,bksh->bkms", q.reshape(batch, kv_heads, groups * rows, head_dim), k,
                        preferred_element_type=jnp.float32) * head_dim ** -0.5  # [B, K, M, s]
    scores = scores.reshape(batch, kv_heads, groups, rows, -1)
    scores = jnp.where(visible[:, None, None], scores, MASK_VALUE)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype).reshape(batch, kv_heads, groups * rows, -1)
    out = jnp.einsum("bkms,bksh->bkmh", probs, v)  # [B, K, M, H]
    return out.reshape(batch, kv_heads, groups, rows, head_dim)


def query_block_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: Mask, *,
                          block_q: int | None = None) -> jax.Array:
    """q [B, T, K, G, H], k/v [B, K, S, H] -> [B, K, G, T, H] (see the module docstring).

    With a `PaddedCausalMask` the queries go in blocks of `query_block_size(T, block_q)` rows, each
    over the keys up to its last row; with a dense mask, one block over all keys.
    """
    qt = q.transpose(0, 2, 3, 1, 4)  # [B, K, G, T, H]
    if not isinstance(mask, PaddedCausalMask):
        return dense_attention(qt, k, v, dense_mask(mask))
    length = q.shape[1]
    size = query_block_size(length, block_q)
    key_valid = mask.key_valid.astype(bool)  # [B, S]
    outs = []
    for start in range(0, length, size):
        stop = min(start + size, length)
        causal = jnp.arange(stop)[None, :] <= jnp.arange(start, stop)[:, None]  # [n, s]
        visible = causal[None] & key_valid[:, None, :stop]  # [B, n, s]
        outs.append(dense_attention(qt[:, :, :, start:stop], k[:, :, :stop], v[:, :, :stop], visible))
    return outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=3)

"""Memory-efficient attention in plain JAX: online softmax over key/value blocks, linear memory in
sequence length in the forward and the backward pass, causal blocks above the diagonal skipped.

The forward pass maps over query blocks; each visits the key blocks it needs (all of them, or up to
the diagonal for a `PaddedCausalMask`) in a `fori_loop`, keeping a running max, sum and float32
accumulator, and returns the output and the per-row log-sum-exp. A `jax.custom_vjp` saves only
q, k, v, the output and the log-sum-exp; its backward pass (FlashAttention-2 style) scans over key
blocks, recomputes the probabilities of each query block that visits it from the log-sum-exp,
accumulates dk and dv per key block and dq in one float32 buffer. The float32 [B, K, G, bq, bk]
scores of one block pair are the only quadratic-in-block buffer. Scores are masked to the finite
`MASK_VALUE`, so a row with no visible key averages the keys it visited instead of giving NaN.

Shape letters: B batch, T queries, S keys, K kv heads, G query heads per kv head, H head dim,
bq / bk query / key block sizes.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax.models.attention_mask import MASK_VALUE, Mask, PaddedCausalMask, pad_axis

DEFAULT_BLOCK_Q = 512  # query rows per block
DEFAULT_BLOCK_KV = 512  # keys per block


class _Blocks(NamedTuple):
    """Static block layout of one blockwise call (hashable: a `custom_vjp` nondiff argument)."""

    q: int  # query rows per block
    kv: int  # keys per block
    causal: bool  # PaddedCausalMask: skip key blocks above the diagonal


def _block_mask(mask: Mask, blocks: _Blocks, i: jax.Array, j: jax.Array) -> jax.Array:
    """[B, bq, bk] bool: the mask of query block i against key block j."""
    if isinstance(mask, PaddedCausalMask):
        rows = i * blocks.q + jnp.arange(blocks.q)  # [bq]
        cols = j * blocks.kv + jnp.arange(blocks.kv)  # [bk]
        valid = jax.lax.dynamic_slice_in_dim(mask.key_valid, j * blocks.kv, blocks.kv, axis=1)  # [B, bk]
        return (cols[None, :] <= rows[:, None])[None] & valid[:, None, :]
    rows = jax.lax.dynamic_slice_in_dim(mask, i * blocks.q, blocks.q, axis=1)
    return jax.lax.dynamic_slice_in_dim(rows, j * blocks.kv, blocks.kv, axis=2)


def _kv_blocks_needed(blocks: _Blocks, num_kv_blocks: int, i: jax.Array) -> jax.Array:
    """Key blocks [0, n) that query block i has to visit (causal: up to the diagonal)."""
    if not blocks.causal:
        return jnp.int32(num_kv_blocks)
    return jnp.minimum(num_kv_blocks, ((i + 1) * blocks.q + blocks.kv - 1) // blocks.kv)


def _first_q_block(blocks: _Blocks, j: jax.Array) -> jax.Array:
    """The first query block that visits key block j (the inverse of `_kv_blocks_needed`)."""
    return (j * blocks.kv) // blocks.q if blocks.causal else jnp.int32(0)


def _scores(q_blk: jax.Array, k_blk: jax.Array, block_mask: jax.Array) -> jax.Array:
    """Masked float32 scores [B, K, G, bq, bk] of q [B, bq, K, G, H] against k [B, K, bk, H]."""
    scale = q_blk.shape[-1] ** -0.5
    s = jnp.einsum("bqkgh,bksh->bkgqs", q_blk, k_blk, preferred_element_type=jnp.float32) * scale
    return jnp.where(block_mask[:, None, None], s, MASK_VALUE)


def _blockwise_forward(blocks: _Blocks, q, k, v, mask) -> tuple[jax.Array, jax.Array]:
    """Online-softmax forward: out [B, K, G, T, H] (v's dtype) and log-sum-exp [B, K, G, T] float32."""
    batch, length, kv_heads, groups, head_dim = q.shape
    num_q, num_kv = length // blocks.q, k.shape[2] // blocks.kv

    def q_block(i):
        q_blk = jax.lax.dynamic_slice_in_dim(q, i * blocks.q, blocks.q, axis=1)  # [B, bq, K, G, H]

        def kv_step(j, carry):
            acc, row_max, row_sum = carry  # [B, K, G, bq, H], [B, K, G, bq] x 2
            k_blk = jax.lax.dynamic_slice_in_dim(k, j * blocks.kv, blocks.kv, axis=2)  # [B, K, bk, H]
            v_blk = jax.lax.dynamic_slice_in_dim(v, j * blocks.kv, blocks.kv, axis=2)
            s = _scores(q_blk, k_blk, _block_mask(mask, blocks, i, j))  # [B, K, G, bq, bk]
            new_max = jnp.maximum(row_max, jnp.max(s, axis=-1))
            correction = jnp.exp(row_max - new_max)
            p = jnp.exp(s - new_max[..., None])
            row_sum = correction * row_sum + jnp.sum(p, axis=-1)
            pv = jnp.einsum("bkgqs,bksh->bkgqh", p.astype(v.dtype), v_blk, preferred_element_type=jnp.float32)
            return correction[..., None] * acc + pv, new_max, row_sum

        stats = (batch, kv_heads, groups, blocks.q)
        init = (jnp.zeros((*stats, head_dim), jnp.float32), jnp.full(stats, MASK_VALUE, jnp.float32),
                jnp.zeros(stats, jnp.float32))
        acc, row_max, row_sum = jax.lax.fori_loop(0, _kv_blocks_needed(blocks, num_kv, i), kv_step, init)
        # row_sum >= 1: the row's largest score contributes exp(0).
        return (acc / row_sum[..., None]).astype(v.dtype), row_max + jnp.log(row_sum)

    out, lse = jax.lax.map(q_block, jnp.arange(num_q))  # [nq, B, K, G, bq, H], [nq, B, K, G, bq]
    out = jnp.moveaxis(out, 0, 3).reshape(batch, kv_heads, groups, length, head_dim)
    lse = jnp.moveaxis(lse, 0, 3).reshape(batch, kv_heads, groups, length)
    return out, lse


def _blockwise_backward(blocks: _Blocks, residuals, d_out):
    """FlashAttention-2 backward: per key block, recompute each visiting query block's probabilities
    from the saved log-sum-exp; dk, dv accumulate per key block, dq in one float32 buffer."""
    q, k, v, mask, out, lse = residuals
    batch, length, kv_heads, groups, head_dim = q.shape
    num_q, num_kv = length // blocks.q, k.shape[2] // blocks.kv
    scale = head_dim ** -0.5
    d_out = d_out.astype(v.dtype)
    delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)  # [B, K, G, T]

    def kv_block(dq, j):
        k_blk = jax.lax.dynamic_slice_in_dim(k, j * blocks.kv, blocks.kv, axis=2)  # [B, K, bk, H]
        v_blk = jax.lax.dynamic_slice_in_dim(v, j * blocks.kv, blocks.kv, axis=2)

        def q_step(i, carry):
            dq, dk, dv = carry
            start = i * blocks.q
            q_blk = jax.lax.dynamic_slice_in_dim(q, start, blocks.q, axis=1)  # [B, bq, K, G, H]
            do_blk = jax.lax.dynamic_slice_in_dim(d_out, start, blocks.q, axis=3)  # [B, K, G, bq, H]
            lse_blk = jax.lax.dynamic_slice_in_dim(lse, start, blocks.q, axis=3)  # [B, K, G, bq]
            delta_blk = jax.lax.dynamic_slice_in_dim(delta, start, blocks.q, axis=3)
            block_mask = _block_mask(mask, blocks, i, j)
            p = jnp.exp(_scores(q_blk, k_blk, block_mask) - lse_blk[..., None])  # [B, K, G, bq, bk]
            dv = dv + jnp.einsum("bkgqs,bkgqh->bksh", p.astype(v.dtype), do_blk, preferred_element_type=jnp.float32)
            dp = jnp.einsum("bkgqh,bksh->bkgqs", do_blk, v_blk, preferred_element_type=jnp.float32)
            ds = jnp.where(block_mask[:, None, None], p * (dp - delta_blk[..., None]), 0.0) * scale
            ds = ds.astype(q.dtype)
            dq_blk = jnp.einsum("bkgqs,bksh->bqkgh", ds, k_blk, preferred_element_type=jnp.float32)
            dq = jax.lax.dynamic_update_slice_in_dim(
                dq, jax.lax.dynamic_slice_in_dim(dq, start, blocks.q, axis=1) + dq_blk, start, axis=1)
            dk = dk + jnp.einsum("bkgqs,bqkgh->bksh", ds, q_blk, preferred_element_type=jnp.float32)
            return dq, dk, dv

        zeros = jnp.zeros((batch, kv_heads, blocks.kv, head_dim), jnp.float32)
        dq, dk, dv = jax.lax.fori_loop(_first_q_block(blocks, j), num_q, q_step, (dq, zeros, zeros))
        return dq, (dk, dv)

    dq, (dk, dv) = jax.lax.scan(kv_block, jnp.zeros(q.shape, jnp.float32), jnp.arange(num_kv))
    dk = jnp.moveaxis(dk, 0, 2).reshape(k.shape)  # [nk, B, K, bk, H] -> [B, K, S, H]
    dv = jnp.moveaxis(dv, 0, 2).reshape(v.shape)
    d_mask = jax.tree.map(lambda m: np.zeros(m.shape, jax.dtypes.float0), mask)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), d_mask


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _blockwise(blocks: _Blocks, q, k, v, mask):
    return _blockwise_forward(blocks, q, k, v, mask)[0]


def _blockwise_fwd(blocks, q, k, v, mask):
    out, lse = _blockwise_forward(blocks, q, k, v, mask)
    return out, (q, k, v, mask, out, lse)


_blockwise.defvjp(_blockwise_fwd, _blockwise_backward)


def blockwise_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: Mask, *,
                        block_q: int = DEFAULT_BLOCK_Q, block_kv: int = DEFAULT_BLOCK_KV) -> jax.Array:
    """Memory-efficient attention in plain JAX: q [B, T, K, G, H], k/v [B, K, S, H] -> [B, K, G, T, H].

    Queries go in blocks of `block_q`, keys in blocks of `block_kv` (each clipped to the sequence;
    sequences are padded to whole blocks, padded keys masked, padded queries dropped). Peak extra
    memory is one float32 [B, K, G, block_q, block_kv] score block plus linear-size buffers, in the
    backward pass too. With a `PaddedCausalMask`, key blocks above the diagonal are skipped.
    """
    length, keys = q.shape[1], k.shape[2]
    causal = isinstance(mask, PaddedCausalMask)
    if causal and length != keys:
        raise ValueError(f"PaddedCausalMask needs as many queries as keys, got {length} and {keys}")
    bq, bk = min(block_q, length), min(block_kv, keys)
    t_pad, s_pad = -(-length // bq) * bq, -(-keys // bk) * bk
    q = pad_axis(q, 1, t_pad)
    k, v = pad_axis(k, 2, s_pad), pad_axis(v, 2, s_pad)
    if causal:
        mask = PaddedCausalMask(pad_axis(mask.key_valid.astype(bool), 1, s_pad, False))
    else:
        mask = pad_axis(pad_axis(mask.astype(bool), 1, t_pad, False), 2, s_pad, False)
    out = _blockwise(_Blocks(bq, bk, causal), q, k, v, mask)
    return out[:, :, :, :length]

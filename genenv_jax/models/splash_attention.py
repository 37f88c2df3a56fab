"""TPU attention: the Pallas splash-attention kernel (`jax.experimental.pallas.ops.tpu`), per
device under `shard_map`, with padding as segment ids.

Splash works on one example's [heads, T, H] arrays with a static causal mask and handles grouped
kv heads itself; `splash_attention` vmaps it over rows and, under an active mesh, runs it per
device in `shard_map` (rows over data / fsdp, kv heads and their query heads over tensor, each only
where it divides). Sequences are padded to a multiple of 128 (the smallest tile); q is pre-scaled,
as splash does not scale. Off TPU the kernel runs in Pallas interpret mode: correct, slow, tests only.

Shape letters: B batch, T length, K kv heads, G query heads per kv head, N = K * G, H head dim.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from genenv_jax.models.attention_mask import Mask, PaddedCausalMask, pad_axis
from genenv_jax.models.mesh_axes import active_mesh, dividing_axes
from genenv_jax.parallel import BATCH_AXES

SPLASH_BLOCK = 512  # largest tile; sequences are padded to a multiple of 128


def shard_map_specs(mesh, batch: int, kv_heads: int, batch_axes: tuple[str, ...] = BATCH_AXES,
                    head_axes: tuple[str, ...] = ("tensor",)) -> tuple[P, P, P, P]:
    """PartitionSpecs (q [B, N, T, H], k/v [B, K, S, H], segment ids [B, T], out [B, N, T, H]) of a
    per-device attention call: rows over the batch axes and kv heads (with their query heads) over
    the head axes, each only where it divides the dimension; sequence and head dim unsplit."""
    rows = dividing_axes(mesh, batch_axes, batch) or None
    heads = dividing_axes(mesh, head_axes, kv_heads) or None
    return P(rows, heads, None, None), P(rows, heads, None, None), P(rows, None), P(rows, heads, None, None)


def splash_block(length: int) -> int:
    """The splash tile for a sequence padded to `length` (a multiple of 128): the largest of
    512, 256, 128 that divides it."""
    return next(b for b in (SPLASH_BLOCK, 256, 128) if length % b == 0)


@functools.lru_cache(maxsize=32)
def _splash_kernel(heads: int, length: int, interpret: bool):
    """A splash-attention kernel for [heads, length, H] queries under a causal mask (cached: building
    the mask info is numpy work at trace time). Built under `ensure_compile_time_eval`, so the mask
    arrays it holds are concrete even when the first call comes inside a trace: a cached kernel is
    reused by later traces, where a tracer of the first would have leaked."""
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    block = splash_block(length)
    sizes = splash.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
                              block_kv_dkv=block, block_kv_dkv_compute=block, block_q_dq=block,
                              block_kv_dq=block)
    mask = splash.MultiHeadMask([splash.CausalMask((length, length)) for _ in range(heads)])
    with jax.ensure_compile_time_eval():
        return splash.make_splash_mha(mask, block_sizes=sizes, head_shards=1, q_seq_shards=1, interpret=interpret)


def splash_segment_ids(key_valid: jax.Array) -> jax.Array:
    """Segment ids [B, T] int32: 1 on real tokens, 0 on padding. A real query sees only real keys;
    a padding query sees the padding keys before it (always itself), so no row is empty."""
    return key_valid.astype(jnp.int32)


def splash_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: Mask, *,
                     interpret: bool | None = None) -> jax.Array:
    """Pallas splash attention: q [B, T, K, G, H], k/v [B, K, T, H], `PaddedCausalMask` -> [B, K, G, T, H].

    The sequence is padded to a multiple of 128 (padded keys get the padding segment id). Under an
    active mesh the kernel runs per device in `shard_map` (`shard_map_specs`); q is pre-scaled by
    1 / sqrt(H) (splash does not scale). `interpret` defaults to True off TPU.
    """
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    if not isinstance(mask, PaddedCausalMask):
        raise ValueError("splash_attention needs a PaddedCausalMask (causal self-attention with padding)")
    batch, length, kv_heads, groups, head_dim = q.shape
    if k.shape[2] != length:
        raise ValueError(f"splash_attention needs as many queries as keys, got {length} and {k.shape[2]}")
    interpret = jax.default_backend() != "tpu" if interpret is None else interpret
    padded = -(-length // 128) * 128
    q = (q.astype(jnp.float32) * head_dim ** -0.5).astype(q.dtype)
    q = pad_axis(q.reshape(batch, length, kv_heads * groups, head_dim).transpose(0, 2, 1, 3), 2, padded)
    k, v = pad_axis(k, 2, padded), pad_axis(v, 2, padded)  # [B, K, T', H]
    segments = pad_axis(splash_segment_ids(mask.key_valid), 1, padded)  # [B, T']

    def per_device(q, k, v, segments):  # local shapes
        kernel = _splash_kernel(q.shape[1], padded, bool(interpret))
        one = lambda q, k, v, s: kernel(q, k, v, segment_ids=splash.SegmentIds(q=s, kv=s))  # noqa: E731
        return jax.vmap(one)(q, k, v, segments)  # [B, N, T', H]

    mesh = active_mesh()
    if mesh is None:
        out = per_device(q, k, v, segments)
    else:
        q_spec, kv_spec, seg_spec, out_spec = shard_map_specs(mesh, batch, kv_heads)
        out = jax.shard_map(per_device, mesh=mesh, in_specs=(q_spec, kv_spec, kv_spec, seg_spec),
                            out_specs=out_spec, check_vma=False)(q, k, v, segments)
    out = out[:, :, :length].astype(v.dtype)  # [B, N, T, H]
    return out.reshape(batch, kv_heads, groups, length, head_dim)

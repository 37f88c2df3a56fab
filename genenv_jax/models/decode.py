"""The Qwen2 decoder with a KV cache: prefill of left-padded prompts, then one token per step.

Same layer maths as the training forward (`primitives.decoder_layer`); only the keys a query
sees differ. The cache layout, and why:
- one K and one V buffer per layer, `[B, K, S, H]` (S = cache slots), in the compute dtype. Every
  layer owns its buffers, so a decode step writes one token per layer with an in-place
  `dynamic_update_slice` of a while-loop carry and reads each layer's cache once (one stacked
  cache threaded through a layer scan would rewrite each layer's whole slice per step);
- kv heads come before slots, so decode attention is a batched matmul over (batch, kv head)
  straight off the cache, with no transposed copy;
- the layers are unrolled over unstacked weights (`unstack_layers`): no step slices the stacked
  weights, and the whole step is one program without per-layer dynamic slicing.

Slots: row b holds one sequence; its left-padded prompt fills slots [0, P) and its generated
tokens follow from slot P on, so every row may be at its own step (`decode_step` takes one write
slot per row). The sampler sizes S = P + W with W the bucketed window its rows need so far
(`resize_caches`), so attention reads only the range in use, and refills a finished row with a
new prompt by writing that prompt's prefill into the row's slots [0, P) (`write_prompt_rows`);
the row's older slots past P stay behind, masked, until the new sequence overwrites them.

Shape letters: B batch, P prompt length, S cache slots, D hidden, K kv heads, H head dim,
V vocabulary, R rows (per prefill chunk, or refilled), C chunks.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from genenv_jax.models import primitives
from genenv_jax.models.config import ModelConfig
from genenv_jax.models.params import Params
from genenv_jax.models.primitives import Constrain, no_constraint

LayerCache = tuple[jax.Array, jax.Array]  # (k, v), each [B, K, S, H]
Caches = tuple[LayerCache, ...]  # one per layer
CACHE_AXES = ("batch", "kv_heads", None, None)  # logical axes of one [B, K, S, H] buffer


def unstack_layers(params: Params) -> Params:
    """Model params with `layers` split into a tuple of per-layer trees (leading axis removed)."""
    stacked = params["layers"]
    num_layers = jax.tree.leaves(stacked)[0].shape[0]
    layers = tuple(jax.tree.map(lambda a, i=i: a[i], stacked) for i in range(num_layers))
    return {**{k: v for k, v in params.items() if k != "layers"}, "layers": layers}


def new_caches(cfg: ModelConfig, shape_prefix: tuple[int, ...], cache_len: int,
               constrain: Constrain = no_constraint, logical_prefix: tuple[str | None, ...] = ("batch",),
               ) -> Caches:
    """Zeroed per-layer caches [*shape_prefix, K, S, H] in the compute dtype."""
    shape = (*shape_prefix, cfg.num_kv_heads, cache_len, cfg.head_dim)
    logical = (*logical_prefix, "kv_heads", None, None)
    zeros = lambda: constrain(jnp.zeros(shape, cfg.jnp_dtype), logical)  # noqa: E731
    return tuple((zeros(), zeros()) for _ in range(cfg.num_layers))


def _final_logits(cfg: ModelConfig, params: Params, x: jax.Array) -> jax.Array:
    """float32 logits [B, V] of the last position of x [B, T, D]."""
    return primitives.lm_logits(cfg, params, primitives.rms_norm(cfg, params["final_norm"], x[:, -1]))


def prefill(cfg: ModelConfig, params: Params, tokens: jax.Array, prompt_mask: jax.Array, cache_len: int,
            rows_per_chunk: int, constrain: Constrain = no_constraint) -> tuple[Caches, jax.Array]:
    """Runs left-padded prompts [B, P] and fills cache slots [0, P); `params` from `unstack_layers`.

    `extend` of empty caches [B, K, cache_len, H] by the whole prompt: returns the per-layer
    caches and the float32 logits [B, V] of the last prompt slot (every prompt ends there: left
    padding).
    """
    caches = new_caches(cfg, (tokens.shape[0],), cache_len, constrain)
    positions = primitives.default_positions(tokens, prompt_mask)  # [B, P]
    context = jnp.zeros((tokens.shape[0], cache_len), bool)
    return extend(cfg, params, caches, tokens, prompt_mask, positions, 0, context, rows_per_chunk, constrain)


def extend(cfg: ModelConfig, params: Params, caches: Caches, tokens: jax.Array, valid: jax.Array,
           positions: jax.Array, start: int, context: jax.Array, rows_per_chunk: int,
           constrain: Constrain = no_constraint) -> tuple[Caches, jax.Array]:
    """Runs a chunk of new tokens [B, T] for rows whose earlier tokens' keys are already cached.

    caches [B, K, S, H] per layer; `context` [B, S] marks the cached slots the chunk may attend
    to (a reused prefix; all False for a fresh prompt). Chunk token t of row b is written at cache
    slot start + t where valid[b, t] (left-padded chunks: invalid slots keep what they held, so a
    prefix may sit below the chunk's real tokens) and attends to the context slots and the chunk's
    valid slots up to its own. positions [B, T]: each token's position in its sequence (the
    prefix's length onwards). `params` from `unstack_layers`.

    Rows go through in chunks of `rows_per_chunk` (a `lax.scan`) to bound the [R, N, T, S]
    attention scores; chunk c holds rows b = r * C + c, so a batch sharded in contiguous blocks
    stays local to its devices. Returns the updated caches and the float32 logits [B, V] of chunk
    slot T - 1 (every row's last token: left padding).
    """
    batch, length = tokens.shape
    rows = rows_per_chunk
    if batch % rows:
        raise ValueError(f"batch {batch} is not a multiple of rows_per_chunk {rows}")
    chunks = batch // rows
    cache_len = caches[0][0].shape[2]
    chunk_slot = jnp.arange(cache_len) - start  # [S]: the chunk token each cache slot holds, if any
    in_chunk = (chunk_slot >= 0) & (chunk_slot < length)

    def by_chunk(a):  # [B, ...] -> [C, R, ...]
        return a.reshape(rows, chunks, *a.shape[1:]).swapaxes(0, 1)

    def chunk_body(_, xs):
        layer_caches, tok, pos, ok, seen = xs  # tok/pos/ok [R, T], seen [R, S], caches [R, K, S, H]
        x = primitives.embed_tokens(cfg, params, tok)  # [R, T, D]
        cos, sin = primitives.rope_angles(pos, cfg.head_dim, cfg.rope_theta)
        slot_ok = in_chunk[None, :] & jnp.take(ok, jnp.clip(chunk_slot, 0, length - 1), axis=1)  # [R, S]
        causal = chunk_slot[None, :] <= jnp.arange(length)[:, None]  # [T, S]
        mask = seen[:, None, :] | (slot_ok[:, None, :] & causal[None])  # [R, T, S]
        keep = ok[:, None, :, None]  # [R, 1, T, 1]

        def attend(cache, q, k, v):  # k, v [R, K, T, H] go to slots [start, start + T) where valid
            stored = tuple(
                jax.lax.dynamic_update_slice(
                    buf, jnp.where(keep, new.astype(buf.dtype), buf[:, :, start:start + length]), (0, 0, start, 0))
                for buf, new in zip(cache, (k, v)))
            return primitives.grouped_query_attention(q, *(b.astype(q.dtype) for b in stored), mask), stored

        updated = []
        for layer, cache in zip(params["layers"], layer_caches):
            x, cache = primitives.decoder_layer(cfg, layer, x, cos, sin, functools.partial(attend, cache), constrain)
            updated.append(cache)
        return None, (tuple(updated), _final_logits(cfg, params, x))

    xs = (jax.tree.map(by_chunk, caches), by_chunk(tokens), by_chunk(positions), by_chunk(valid.astype(bool)),
          by_chunk(context.astype(bool)))
    _, (caches, last_logits) = jax.lax.scan(chunk_body, None, xs)  # caches [C, R, K, S, H], logits [C, R, V]
    unchunk = lambda a: a.swapaxes(0, 1).reshape(batch, *a.shape[2:])  # noqa: E731
    caches = tuple(tuple(constrain(unchunk(a), CACHE_AXES) for a in layer) for layer in caches)
    return caches, constrain(unchunk(last_logits), ("batch", "vocab"))


def write_prompt_rows(caches: Caches, prompt_caches: Caches, rows: jax.Array, prompt_len: int | None = None) -> Caches:
    """Caches [B, K, S, H] with rows[r]'s prompt slots [P - T, P) replaced by prompt_caches
    [R, K, T, H] row r (a prefill's caches with cache_len T <= P, left-padded prompts: they end at
    slot P; P defaults to T). A row index >= B is dropped (padding of the refill)."""
    width = prompt_caches[0][0].shape[2]
    start = (width if prompt_len is None else prompt_len) - width
    return tuple(tuple(buf.at[rows, :, start:start + width].set(new.astype(buf.dtype), mode="drop")
                       for buf, new in zip(layer, new_layer))
                 for layer, new_layer in zip(caches, prompt_caches))


def resize_caches(caches: Caches, cache_len: int) -> Caches:
    """Caches [B, K, S, H] -> [B, K, cache_len, H]: slots cut from the end, or zero slots appended."""
    def resize(buf):
        extra = cache_len - buf.shape[2]
        return buf[:, :, :cache_len] if extra <= 0 else jnp.pad(buf, ((0, 0), (0, 0), (0, extra), (0, 0)))
    return jax.tree.map(resize, caches)


def _write_slot(buf: jax.Array, new: jax.Array, slot: jax.Array) -> jax.Array:
    """buf [B, K, S, H] with new [B, K, 1, H] written at `slot`: one slot for all rows ([]), or one
    per row ([B], an index past the end clamps to the last slot)."""
    new = new.astype(buf.dtype)
    if slot.ndim == 0:
        return jax.lax.dynamic_update_slice(buf, new, (0, 0, slot, 0))
    write_row = lambda b, n, s: jax.lax.dynamic_update_slice(b, n, (0, s, 0))  # noqa: E731
    return jax.vmap(write_row)(buf, new, slot)  # a batched scatter; the cache stays sharded by row


def decode_step(cfg: ModelConfig, params: Params, caches: Caches, tokens: jax.Array, positions: jax.Array,
                slot: jax.Array, key_mask: jax.Array, constrain: Constrain = no_constraint,
                ) -> tuple[jax.Array, Caches]:
    """One token per row: tokens/positions [B] written at cache `slot` ([] for every row, or [B]
    one per row); key_mask [B, S] marks the slots each row may attend to (the new slot included).
    Returns float32 logits [B, V] and the updated caches. `params` from `unstack_layers`."""
    x = primitives.embed_tokens(cfg, params, tokens[:, None])  # [B, 1, D]
    cos, sin = primitives.rope_angles(positions[:, None], cfg.head_dim, cfg.rope_theta)
    mask = key_mask[:, None, :]  # [B, 1, S]
    slot = jnp.asarray(slot)

    def attend(cache, q, k, v):  # k, v [B, K, 1, H] go to `slot`; the query attends over the cache
        k_cache, v_cache = (_write_slot(buf, new, slot) for buf, new in zip(cache, (k, v)))
        out = primitives.grouped_query_attention(q, k_cache.astype(q.dtype), v_cache.astype(q.dtype), mask)
        return out, (k_cache, v_cache)

    updated = []
    for layer, cache in zip(params["layers"], caches):
        x, cache = primitives.decoder_layer(cfg, layer, x, cos, sin, functools.partial(attend, cache), constrain)
        updated.append(cache)
    return constrain(_final_logits(cfg, params, x), ("batch", "vocab")), tuple(updated)

"""The Qwen2 decoder for sampling: per-layer KV caches laid out [B, K, S, H], written in place.

Same math and param names as `genenv_jax.models.qwen2` (its RMSNorm, MLP and RoPE are reused),
arranged for decoding speed rather than for training:
- every layer owns its K and V cache buffers, so a decode step writes one token per layer with an
  in-place dynamic_update_slice of a while-loop carry and reads each layer's cache once (one
  stacked cache threaded through a layer scan would rewrite each layer's whole slice per step);
- kv heads come before cache slots, so decode attention is a batched matmul over (batch, kv head)
  straight off the cache, with no transposed copy;
- layer weights are unstacked once (`unstack_layers`), so no step slices the stacked weights and
  the layers are unrolled (one program, no per-layer dynamic slicing).

Shape letters: B batch, T query length, S cache slots, D hidden, N query heads, K kv heads,
G query heads per kv head, H head dim, V vocabulary, R rows per prefill chunk, C chunks.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from genenv_jax.models.config import ModelConfig
from genenv_jax.models.qwen2 import MLP, RMSNorm, apply_rope, default_positions, rope_angles

Params = Any
LayerCache = tuple[jax.Array, jax.Array]  # (k, v), each [B, K, S, H]
Caches = tuple[LayerCache, ...]  # one per layer
Constrain = Callable[[jax.Array, tuple[str | None, ...]], jax.Array]

_MASK_VALUE = -1e30  # as in the model: a fully masked row gives a uniform softmax, not NaN


def _no_constraint(x: jax.Array, logical: tuple[str | None, ...]) -> jax.Array:
    del logical
    return x


def unstack_layers(params: Params) -> Params:
    """Model params with `layers` split into a tuple of per-layer trees (leading axis removed)."""
    stacked = params["layers"]
    num_layers = jax.tree.leaves(stacked)[0].shape[0]
    layers = tuple(jax.tree.map(lambda a, i=i: a[i], stacked) for i in range(num_layers))
    return {**{k: v for k, v in params.items() if k != "layers"}, "layers": layers}


def _embed(cfg: ModelConfig, params: Params, tokens: jax.Array) -> jax.Array:
    return jnp.take(params["embed"]["embedding"], tokens, axis=0).astype(cfg.jnp_dtype)


def logits(cfg: ModelConfig, params: Params, hidden: jax.Array) -> jax.Array:
    """float32 logits [..., V] from final-normed hidden states [..., D] (tied or untied head)."""
    dt = cfg.jnp_dtype
    if cfg.tie_word_embeddings:
        return jnp.einsum("...d,vd->...v", hidden, params["embed"]["embedding"].astype(dt),
                          preferred_element_type=jnp.float32)
    return jnp.einsum("...d,dv->...v", hidden, params["lm_head"].astype(dt),
                      preferred_element_type=jnp.float32)


def _rms_norm(cfg: ModelConfig, norm_params: Params, x: jax.Array) -> jax.Array:
    return RMSNorm(cfg).apply({"params": norm_params}, x)


def _project_qkv(cfg: ModelConfig, p: Params, x: jax.Array, cos: jax.Array, sin: jax.Array):
    """x [B, T, D] -> q [B, T, N, H] and k, v [B, K, T, H] (RoPE applied to q and k)."""
    dt = cfg.jnp_dtype
    q = jnp.einsum("btd,dnh->btnh", x, p["q_kernel"].astype(dt)) + p["q_bias"].astype(dt)
    k = jnp.einsum("btd,dkh->btkh", x, p["k_kernel"].astype(dt)) + p["k_bias"].astype(dt)
    v = jnp.einsum("btd,dkh->btkh", x, p["v_kernel"].astype(dt)) + p["v_bias"].astype(dt)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    return q, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)


def attend(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """Grouped-query attention: q [B, T, N, H], k/v [B, K, S, H], mask [B, T, S] -> [B, K, G, T, H].

    The output stays in the matmul's natural (batch, kv head) major order; `_attention_out`
    contracts it with the output kernel as is, so no step transposes a weight to match it.
    """
    b, t, n, h = q.shape
    kv_heads = k.shape[1]
    q = q.reshape(b, t, kv_heads, n // kv_heads, h)  # [B, T, K, G, H]
    scores = jnp.einsum("btkgh,bksh->bkgts", q, k, preferred_element_type=jnp.float32) * (h ** -0.5)
    scores = jnp.where(mask[:, None, None, :, :], scores, _MASK_VALUE)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)  # [B, K, G, T, S]
    return jnp.einsum("bkgts,bksh->bkgth", probs, v)


def _attention_out(cfg: ModelConfig, p: Params, out: jax.Array) -> jax.Array:
    """out [B, K, G, T, H] -> [B, T, D]; the kernel [N, H, D] is viewed as [K, G, H, D] (no copy)."""
    kernel = p["o_kernel"].astype(cfg.jnp_dtype)
    batch, kv_heads, groups, t, _ = out.shape
    if t == 1:  # decode: a plain [B, N*H] @ [N*H, D] matmul, which no backend answers by copying the weight
        return (out.reshape(batch, -1) @ kernel.reshape(-1, kernel.shape[-1]))[:, None, :]
    return jnp.einsum("bkgth,kghd->btd", out, kernel.reshape(kv_heads, groups, *kernel.shape[1:]))


def _mlp_block(cfg: ModelConfig, p: Params, x: jax.Array) -> jax.Array:
    return x + MLP(cfg).apply({"params": p["mlp"]}, _rms_norm(cfg, p["post_attn_norm"], x))


def new_caches(cfg: ModelConfig, shape_prefix: tuple[int, ...], cache_len: int,
               constrain: Constrain = _no_constraint, logical_prefix: tuple[str | None, ...] = ("batch",),
               ) -> Caches:
    """Zeroed per-layer caches [*shape_prefix, K, S, H] in the compute dtype."""
    shape = (*shape_prefix, cfg.num_kv_heads, cache_len, cfg.head_dim)
    logical = (*logical_prefix, "kv_heads", None, None)
    zeros = lambda: constrain(jnp.zeros(shape, cfg.jnp_dtype), logical)  # noqa: E731
    return tuple((zeros(), zeros()) for _ in range(cfg.num_layers))


def prefill(cfg: ModelConfig, params: Params, tokens: jax.Array, prompt_mask: jax.Array, cache_len: int,
            rows_per_chunk: int, constrain: Constrain = _no_constraint) -> tuple[Caches, jax.Array]:
    """Runs left-padded prompts [B, P] and fills cache slots [0, P).

    Rows go through in chunks of `rows_per_chunk` (a `lax.scan`) to bound the [R, N, P, P]
    attention scores; chunk c holds rows b = r * C + c, so a batch sharded in contiguous blocks
    stays local to its devices. Returns per-layer caches [B, K, cache_len, H] and the float32
    logits [B, V] of the last prompt slot (every prompt ends there: left padding).
    """
    batch, prompt_len = tokens.shape
    rows = rows_per_chunk
    if batch % rows:
        raise ValueError(f"batch {batch} is not a multiple of rows_per_chunk {rows}")
    chunks = batch // rows
    positions = default_positions(tokens, prompt_mask)  # [B, P]
    causal = jnp.tril(jnp.ones((prompt_len, prompt_len), bool))  # [P, P]

    def by_chunk(a):  # [B, ...] -> [C, R, ...]
        return a.reshape(rows, chunks, *a.shape[1:]).swapaxes(0, 1)

    def chunk_body(caches, xs):
        c, tok, pos, valid = xs  # tok/pos/valid [R, P]
        x = constrain(_embed(cfg, params, tok), ("batch", None, None))  # [R, P, D]
        cos, sin = rope_angles(pos, cfg.head_dim, cfg.rope_theta)
        mask = causal[None] & valid[:, None, :]  # [R, P, P]
        updated = []
        for p, (k_cache, v_cache) in zip(params["layers"], caches):
            q, k, v = _project_qkv(cfg, p["attn"], _rms_norm(cfg, p["input_norm"], x), cos, sin)
            start = (0, c, 0, 0, 0)
            k_cache = jax.lax.dynamic_update_slice(k_cache, k[:, None].astype(k_cache.dtype), start)
            v_cache = jax.lax.dynamic_update_slice(v_cache, v[:, None].astype(v_cache.dtype), start)
            updated.append((k_cache, v_cache))
            x = x + _attention_out(cfg, p["attn"], attend(q, k, v, mask))
            x = constrain(_mlp_block(cfg, p, x), ("batch", None, None))
        last = _rms_norm(cfg, params["final_norm"], x[:, -1])  # [R, D]
        return tuple(updated), logits(cfg, params, last)

    caches = new_caches(cfg, (rows, chunks), cache_len, constrain, ("batch", None))  # [R, C, K, S, H]
    xs = (jnp.arange(chunks), by_chunk(tokens), by_chunk(positions), by_chunk(prompt_mask.astype(bool)))
    caches, last_logits = jax.lax.scan(chunk_body, caches, xs)  # last_logits [C, R, V]
    caches = tuple(tuple(constrain(a.reshape(batch, *a.shape[2:]), ("batch", "kv_heads", None, None))
                         for a in layer) for layer in caches)
    last_logits = last_logits.swapaxes(0, 1).reshape(batch, -1)  # [B, V]
    return caches, constrain(last_logits, ("batch", "vocab"))


def decode_step(cfg: ModelConfig, params: Params, caches: Caches, tokens: jax.Array, positions: jax.Array,
                slot: jax.Array, key_mask: jax.Array, constrain: Constrain = _no_constraint,
                ) -> tuple[jax.Array, Caches]:
    """One token per row: tokens/positions [B] written at cache `slot`; key_mask [B, S] marks the
    slots each row may attend to. Returns float32 logits [B, V] and the updated caches."""
    x = constrain(_embed(cfg, params, tokens[:, None]), ("batch", None, None))  # [B, 1, D]
    cos, sin = rope_angles(positions[:, None], cfg.head_dim, cfg.rope_theta)
    mask = key_mask[:, None, :]  # [B, 1, S]
    updated = []
    for p, (k_cache, v_cache) in zip(params["layers"], caches):
        q, k, v = _project_qkv(cfg, p["attn"], _rms_norm(cfg, p["input_norm"], x), cos, sin)
        k_cache = jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), (0, 0, slot, 0))
        v_cache = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), (0, 0, slot, 0))
        updated.append((k_cache, v_cache))
        out = attend(q, k_cache.astype(q.dtype), v_cache.astype(q.dtype), mask)
        x = x + _attention_out(cfg, p["attn"], out)
        x = constrain(_mlp_block(cfg, p, x), ("batch", None, None))
    hidden = _rms_norm(cfg, params["final_norm"], x[:, 0])  # [B, D]
    return constrain(logits(cfg, params, hidden), ("batch", "vocab")), tuple(updated)

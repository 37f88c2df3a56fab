"""The Qwen2 maths, once: pure functions over the param tree, shared by the training forward
(`qwen2.py`), the KV-cache prefill and the cached decode step (`decode.py`).

Numerics: weights are cast to the compute dtype `cfg.dtype` for the matmuls; norm statistics,
RoPE angles, attention softmax and logits are float32 whatever that dtype.

Shape letters: B batch, T query length, S key length, D hidden, N query heads, K kv heads,
G query heads per kv head, H head dim, F MLP width, V vocabulary.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from genenv_jax.models.attention import AttentionKernel, Mask, PaddedCausalMask, einsum_attention
from genenv_jax.models import lora
from genenv_jax.models.config import ModelConfig

Params = Any
# constrain(x, logical axis names) -> x with a sharding constraint (or x unchanged).
Constrain = Callable[[jax.Array, tuple[str | None, ...]], jax.Array]
ACTIVATION_AXES = ("activation_batch", "activation_length", "activation_embed")  # x [B, T, D]
MLP_ACTIVATION_AXES = ("activation_batch", "activation_length", "activation_mlp")  # [B, T, F]


def no_constraint(x: jax.Array, logical: tuple[str | None, ...]) -> jax.Array:
    """A `Constrain` that leaves arrays unconstrained (single device, or XLA's own choice)."""
    del logical
    return x


def embed_tokens(cfg: ModelConfig, params: Params, tokens: jax.Array) -> jax.Array:
    """Token embeddings [..., D] in the compute dtype for token ids [...]."""
    return jnp.take(params["embed"]["embedding"], tokens, axis=0).astype(cfg.jnp_dtype)


def rms_norm(cfg: ModelConfig, norm_params: Params, x: jax.Array) -> jax.Array:
    """Root-mean-square norm over the last axis, statistics in float32 (as HF Qwen2RMSNorm)."""
    dt = cfg.jnp_dtype
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + cfg.rms_norm_eps)
    return norm_params["scale"].astype(dt) * x32.astype(dt)


def default_positions(tokens: jax.Array, attention_mask: jax.Array | None) -> jax.Array:
    """Positions [B, T]: 0..T-1, or counted over valid tokens when a mask is given (left padding)."""
    if attention_mask is None:
        return jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    return jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=1) - 1, 0)


def rope_angles(positions: jax.Array, head_dim: int, theta: float) -> tuple[jax.Array, jax.Array]:
    """cos/sin of rotary angles for integer positions [B, T] -> two [B, T, 1, H] float32 arrays."""
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))  # [H/2]
    angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, H/2]
    angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]  # [B, T, 1, H]
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotates [B, T, heads, H] by the angles (rotate-half convention, as HF Qwen2)."""
    x32 = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    return (x32 * cos + rotated * sin).astype(x.dtype)




def adapted(cfg: ModelConfig, block: Params, target: str, y: jax.Array, x: jax.Array,
            dropout: Params | None) -> jax.Array:
    """y, the projection of x by `target`'s kernel in `block`, plus the low-rank delta of the adapter
    the block carries for it (models/lora.py; none: y as it is). `dropout`: the training forward's
    dropout of this layer's block, or None."""
    return y + lora.projection_delta(cfg, block, target, x, dropout)


def project_qkv(cfg: ModelConfig, attn: Params, x: jax.Array, cos: jax.Array, sin: jax.Array,
                dropout: Params | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """x [B, T, D] -> q [B, T, N, H] and k, v [B, K, T, H] (projections with bias; RoPE on q, k).

    k and v come kv-head-major, the layout of the KV cache and of `grouped_query_attention`.
    """
    dt = cfg.jnp_dtype
    q = adapted(cfg, attn, "q", jnp.einsum("btd,dnh->btnh", x, attn["q_kernel"].astype(dt)) + attn["q_bias"].astype(dt),
                x, dropout)
    k = adapted(cfg, attn, "k", jnp.einsum("btd,dkh->btkh", x, attn["k_kernel"].astype(dt)) + attn["k_bias"].astype(dt),
                x, dropout)
    v = adapted(cfg, attn, "v", jnp.einsum("btd,dkh->btkh", x, attn["v_kernel"].astype(dt)) + attn["v_bias"].astype(dt),
                x, dropout)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    return q, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)


def causal_mask(key_valid: jax.Array) -> jax.Array:
    """[B, T, T] bool: query t sees keys s <= t that are valid (key_valid [B, T], False on padding)."""
    return PaddedCausalMask(key_valid).dense()


def grouped_query_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: Mask,
                            kernel: AttentionKernel = einsum_attention) -> jax.Array:
    """Grouped-query attention: q [B, T, N, H], k/v [B, K, S, H] -> [B, K, G, T, H].

    `mask` is a dense [B, T, S] bool array or an `attention.PaddedCausalMask`; `kernel` one of
    `attention.KERNELS` (or `attention.kernel_for(cfg.attention)`), the einsum reference by default.
    Query head n = k * G + g shares kv head k. The output stays in the (batch, kv head) major
    order of the matmuls; `attention_output` contracts it as is.
    """
    batch, length, heads, head_dim = q.shape
    kv_heads = k.shape[1]
    q = q.reshape(batch, length, kv_heads, heads // kv_heads, head_dim)  # [B, T, K, G, H]
    return kernel(q, k, v, mask)


def attention_output(cfg: ModelConfig, attn: Params, out: jax.Array, dropout: Params | None = None) -> jax.Array:
    """out [B, K, G, T, H] -> [B, T, D]; the kernel [N, H, D] is viewed as [K, G, H, D] (no copy)."""
    kernel = attn["o_kernel"].astype(cfg.jnp_dtype)
    batch, kv_heads, groups, length, head_dim = out.shape
    if length == 1:  # decode: a plain [B, N*H] @ [N*H, D] matmul, which no backend answers by copying the weight
        y = (out.reshape(batch, -1) @ kernel.reshape(-1, kernel.shape[-1]))[:, None, :]
    else:
        y = jnp.einsum("bkgth,kghd->btd", out, kernel.reshape(kv_heads, groups, *kernel.shape[1:]))
    return y + lora.output_delta(cfg, attn, out, dropout)  # the o adapter's delta, if the tree carries one


def mlp(cfg: ModelConfig, mlp_params: Params, x: jax.Array, constrain: Constrain = no_constraint,
        dropout: Params | None = None) -> jax.Array:
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x)); x [B, T, D] -> [B, T, D]."""
    dt = cfg.jnp_dtype
    gate = adapted(cfg, mlp_params, "gate", jnp.einsum("btd,df->btf", x, mlp_params["gate_kernel"].astype(dt)), x, dropout)
    up = adapted(cfg, mlp_params, "up", jnp.einsum("btd,df->btf", x, mlp_params["up_kernel"].astype(dt)), x, dropout)
    hidden = constrain(jax.nn.silu(gate) * up, MLP_ACTIVATION_AXES)  # [B, T, F]
    return adapted(cfg, mlp_params, "down", jnp.einsum("btf,fd->btd", hidden, mlp_params["down_kernel"].astype(dt)),
                   hidden, dropout)


# feed_forward(cfg, mlp params, x [B, T, D], constrain, dropout) -> [B, T, D]: `mlp` or an equivalent
# schedule of it.
FeedForward = Callable[[ModelConfig, Params, jax.Array, Constrain, Any], jax.Array]


def decoder_layer(cfg: ModelConfig, layer: Params, x: jax.Array, cos: jax.Array, sin: jax.Array,
                  attend: Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, Any]],
                  constrain: Constrain = no_constraint, feed_forward: FeedForward = mlp,
                  dropout: Params | None = None) -> tuple[jax.Array, Any]:
    """One pre-norm block: x + attention(norm(x)), then + mlp(norm(x)); x [B, T, D].

    `attend(q [B, T, N, H], k, v [B, K, T, H]) -> (out [B, K, G, T, H], aux)` decides which keys
    the queries see: the sequence itself (training, prefill) or a KV cache the new k, v are written
    into (decoding), whose updated buffers come back as `aux`. `feed_forward` computes the MLP (the
    training forward runs it over sequence chunks). `dropout`: this layer's training dropout by
    block ({"attn" | "mlp": ...}, `models.partition`), None in every other forward. Returns (x, aux).
    """
    dropout = dropout or {}
    x = constrain(x, ACTIVATION_AXES)
    q, k, v = project_qkv(cfg, layer["attn"], rms_norm(cfg, layer["input_norm"], x), cos, sin, dropout.get("attn"))
    out, aux = attend(q, k, v)
    x = x + attention_output(cfg, layer["attn"], out, dropout.get("attn"))
    x = x + feed_forward(cfg, layer["mlp"], rms_norm(cfg, layer["post_attn_norm"], x), constrain, dropout.get("mlp"))
    return x, aux


def lm_logits(cfg: ModelConfig, params: Params, hidden: jax.Array) -> jax.Array:
    """float32 logits [..., V] from final-normed hidden states [..., D] (tied or untied head)."""
    dt = cfg.jnp_dtype
    if cfg.tie_word_embeddings:
        return jnp.einsum("...d,vd->...v", hidden, params["embed"]["embedding"].astype(dt),
                          preferred_element_type=jnp.float32)
    return jnp.einsum("...d,dv->...v", hidden, params["lm_head"].astype(dt), preferred_element_type=jnp.float32)

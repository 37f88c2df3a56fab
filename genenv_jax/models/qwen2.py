"""Qwen2-architecture decoder in Flax linen, exposed through a small functional API.

Params are a plain pytree whose decoder layers are stacked on a leading `layers` axis; the
layers run under `nn.scan` (or fully unrolled when `cfg.scan_layers` is False), with optional
rematerialisation. Norms, softmax and logits are float32 whatever the compute dtype.

Shape letters: B batch, T query length, S key length, D hidden, N query heads,
K kv heads, G query heads per kv head, H head dim, F MLP width, V vocabulary, L layers.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from genenv_jax.models.config import ModelConfig

Params = Any

_MASK_VALUE = -1e30  # finite, so a fully masked (padding) row gives a uniform softmax, not NaN


def _param(module: nn.Module, name: str, init, shape: tuple[int, ...], axes: tuple[str, ...]):
    return module.param(name, nn.with_logical_partitioning(init, axes), shape,
                        module.cfg.jnp_param_dtype)


class RMSNorm(nn.Module):
    """Root-mean-square norm, statistics in float32 (as HF Qwen2RMSNorm)."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        scale = _param(self, "scale", nn.initializers.ones, (x.shape[-1],), ("norm",))
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.cfg.rms_norm_eps)
        return scale.astype(self.cfg.jnp_dtype) * x32.astype(self.cfg.jnp_dtype)


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


def attend(q: jax.Array, k: jax.Array, v: jax.Array, key_valid: jax.Array) -> jax.Array:
    """Grouped-query causal self-attention (the sampler has its own cached decoder).

    q [B, T, N, H]; k, v [B, T, K, H]; key_valid [B, T] bool (False on padding). Returns [B, T, N, H].
    """
    b, t, n, h = q.shape
    kv_heads = k.shape[2]
    q = q.reshape(b, t, kv_heads, n // kv_heads, h)  # [B, T, K, G, H]
    scores = jnp.einsum("btkgh,bskh->bkgts", q, k, preferred_element_type=jnp.float32)
    scores = scores * (h ** -0.5)
    causal = jnp.arange(t)[None, :] <= jnp.arange(t)[:, None]  # [T, S]
    mask = causal[None, :, :] & key_valid[:, None, :]  # [B, T, S]
    scores = jnp.where(mask[:, None, None, :, :], scores, _MASK_VALUE)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)  # [B, K, G, T, S]
    out = jnp.einsum("bkgts,bskh->btkgh", probs, v)
    return out.reshape(b, t, n, h)


class Attention(nn.Module):
    """Qwen2 self-attention: q/k/v projections with bias, RoPE, GQA, output projection."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, x, cos, sin, key_valid):
        cfg = self.cfg
        d, n, k, h = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        init = nn.initializers.normal(0.02)
        wq = _param(self, "q_kernel", init, (d, n, h), ("embed", "q_heads", "head_dim"))
        bq = _param(self, "q_bias", nn.initializers.zeros, (n, h), ("q_heads", "head_dim"))
        wk = _param(self, "k_kernel", init, (d, k, h), ("embed", "kv_heads", "head_dim"))
        bk = _param(self, "k_bias", nn.initializers.zeros, (k, h), ("kv_heads", "head_dim"))
        wv = _param(self, "v_kernel", init, (d, k, h), ("embed", "kv_heads", "head_dim"))
        bv = _param(self, "v_bias", nn.initializers.zeros, (k, h), ("kv_heads", "head_dim"))
        wo = _param(self, "o_kernel", init, (n, h, d), ("q_heads", "head_dim", "embed"))
        dt = cfg.jnp_dtype

        q = jnp.einsum("btd,dnh->btnh", x, wq.astype(dt)) + bq.astype(dt)  # [B, T, N, H]
        key = jnp.einsum("btd,dkh->btkh", x, wk.astype(dt)) + bk.astype(dt)  # [B, T, K, H]
        val = jnp.einsum("btd,dkh->btkh", x, wv.astype(dt)) + bv.astype(dt)  # [B, T, K, H]
        q, key = apply_rope(q, cos, sin), apply_rope(key, cos, sin)
        out = attend(q, key, val, key_valid)
        return jnp.einsum("btnh,nhd->btd", out, wo.astype(dt))  # [B, T, D]


class MLP(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, x):
        cfg, dt = self.cfg, self.cfg.jnp_dtype
        init = nn.initializers.normal(0.02)
        d, f = cfg.hidden_size, cfg.intermediate_size
        gate = _param(self, "gate_kernel", init, (d, f), ("embed", "mlp"))
        up = _param(self, "up_kernel", init, (d, f), ("embed", "mlp"))
        down = _param(self, "down_kernel", init, (f, d), ("mlp", "embed"))
        g = jnp.einsum("btd,df->btf", x, gate.astype(dt))
        u = jnp.einsum("btd,df->btf", x, up.astype(dt))
        hidden = nn.with_logical_constraint(jax.nn.silu(g) * u,
                                            ("activation_batch", "activation_length", "activation_mlp"))
        return jnp.einsum("btf,fd->btd", hidden, down.astype(dt))


class DecoderLayer(nn.Module):
    """Pre-norm attention + MLP block; scanned over layers with the hidden state as carry."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, x, cos, sin, key_valid):
        x = nn.with_logical_constraint(x, ("activation_batch", "activation_length", "activation_embed"))
        x = x + Attention(self.cfg, name="attn")(RMSNorm(self.cfg, name="input_norm")(x), cos, sin, key_valid)
        x = x + MLP(self.cfg, name="mlp")(RMSNorm(self.cfg, name="post_attn_norm")(x))
        return x, None


def _layer_stack(cfg: ModelConfig):
    layer_cls = DecoderLayer
    if cfg.remat_policy != "none":
        policy = None if cfg.remat_policy == "full" else getattr(jax.checkpoint_policies, cfg.remat_policy)
        layer_cls = nn.remat(DecoderLayer, policy=policy, prevent_cse=False)
    return nn.scan(
        layer_cls,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        in_axes=(nn.broadcast, nn.broadcast, nn.broadcast),
        length=cfg.num_layers,
        unroll=1 if cfg.scan_layers else cfg.num_layers,
        metadata_params={nn.PARTITION_NAME: "layers"},
    )


class Qwen2(nn.Module):
    """Embedding -> stacked decoder layers -> final norm (-> LM head via `logits`)."""

    cfg: ModelConfig

    def setup(self):
        cfg = self.cfg
        self.embed = nn.Embed(cfg.vocab_size, cfg.hidden_size, dtype=cfg.jnp_dtype,
                              param_dtype=cfg.jnp_param_dtype,
                              embedding_init=nn.with_logical_partitioning(
                                  nn.initializers.normal(0.02), ("vocab", "embed")))
        self.layers = _layer_stack(cfg)(cfg)
        self.final_norm = RMSNorm(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = self.param(
                "lm_head", nn.with_logical_partitioning(nn.initializers.normal(0.02), ("embed", "vocab")),
                (cfg.hidden_size, cfg.vocab_size), cfg.jnp_param_dtype)

    def __call__(self, tokens, positions, key_valid):
        """Final-normed hidden states [B, T, D]."""
        cos, sin = rope_angles(positions, self.cfg.head_dim, self.cfg.rope_theta)
        x = self.embed(tokens)  # [B, T, D]
        x, _ = self.layers(x, cos, sin, key_valid)
        return self.final_norm(x)

    def logits(self, hidden: jax.Array) -> jax.Array:
        """float32 logits [..., V] from final hidden states [..., D]."""
        if self.cfg.tie_word_embeddings:
            w = self.embed.embedding.astype(self.cfg.jnp_dtype)
            return jnp.einsum("...d,vd->...v", hidden, w, preferred_element_type=jnp.float32)
        w = self.lm_head.astype(self.cfg.jnp_dtype)
        return jnp.einsum("...d,dv->...v", hidden, w, preferred_element_type=jnp.float32)


@functools.lru_cache(maxsize=None)
def module(cfg: ModelConfig) -> Qwen2:
    """The linen module for a config (cached: configs are hashable)."""
    return Qwen2(cfg)


def default_positions(tokens: jax.Array, attention_mask: jax.Array | None) -> jax.Array:
    """Positions [B, T]: 0..T-1, or counted over valid tokens when a mask is given (left padding)."""
    if attention_mask is None:
        return jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    return jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=1) - 1, 0)


def _boxed_init(cfg: ModelConfig, rng: jax.Array):
    dummy = jnp.zeros((1, 1), jnp.int32)
    return module(cfg).init(rng, dummy, dummy, jnp.ones((1, 1), bool))["params"]


@functools.partial(jax.jit, static_argnums=0)
def init_params(cfg: ModelConfig, rng: jax.Array) -> Params:
    """Random params (normal(0.02) weights, unit norms, zero biases) as a plain pytree (jitted:
    wrap in `jax.jit(..., out_shardings=...)` to create them sharded)."""
    return nn.unbox(_boxed_init(cfg, rng))


def param_logical_axes(cfg: ModelConfig) -> Params:
    """PartitionSpecs of logical axis names, one per param (same tree as `init_params`)."""
    abstract = jax.eval_shape(functools.partial(_boxed_init, cfg), jax.random.key(0))
    return nn.get_partition_spec(abstract)


def param_shapes(cfg: ModelConfig) -> Params:
    """ShapeDtypeStructs of the params, without allocating them."""
    return jax.eval_shape(functools.partial(init_params, cfg), jax.random.key(0))


@functools.partial(jax.jit, static_argnums=0)
def hidden_states(cfg: ModelConfig, params: Params, tokens: jax.Array, positions: jax.Array | None = None,
                  attention_mask: jax.Array | None = None) -> jax.Array:
    """Final-normed hidden states [B, T, D] in the compute dtype."""
    positions = default_positions(tokens, attention_mask) if positions is None else positions
    key_valid = jnp.ones(tokens.shape, bool) if attention_mask is None else attention_mask.astype(bool)
    return module(cfg).apply({"params": params}, tokens, positions, key_valid)


@functools.partial(jax.jit, static_argnums=0)
def logits_from_hidden(cfg: ModelConfig, params: Params, hidden: jax.Array) -> jax.Array:
    """float32 logits [..., V] for hidden states [..., D] (chunk callers slice `hidden`)."""
    return module(cfg).apply({"params": params}, hidden, method=Qwen2.logits)


@functools.partial(jax.jit, static_argnums=0)
def forward(cfg: ModelConfig, params: Params, tokens: jax.Array, positions: jax.Array | None = None,
            attention_mask: jax.Array | None = None) -> jax.Array:
    """Logits [B, T, V] (float32) for tokens [B, T].

    `attention_mask` [B, T] marks real tokens (1) and padding (0); without explicit `positions`
    they are counted over real tokens, so left-padded prompts get the positions they would have alone.
    """
    return logits_from_hidden(cfg, params, hidden_states(cfg, params, tokens, positions, attention_mask))

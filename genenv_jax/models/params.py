"""The param tree of a Qwen2 decoder: its layout, random init and logical partitioning axes.

Flax linen declares the params (and only declares them: the maths is in `primitives.py`), which
gives the init its random streams and every param its logical axis names. The layout, which HF
load/save and checkpoints rely on:

    embed.embedding [V, D]
    layers.attn.{q,k,v}_kernel [L, D, heads, H], layers.attn.{q,k,v}_bias [L, heads, H],
    layers.attn.o_kernel [L, N, H, D], layers.mlp.{gate,up}_kernel [L, D, F],
    layers.mlp.down_kernel [L, F, D], layers.{input_norm,post_attn_norm}.scale [L, D]
    final_norm.scale [D], lm_head [D, V] (untied configs only)

Decoder layers are stacked on a leading `layers` axis (logical name "layers").
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from genenv_jax.models.config import ModelConfig

Params = Any


def _param(module: nn.Module, name: str, init, shape: tuple[int, ...], axes: tuple[str, ...]):
    return module.param(name, nn.with_logical_partitioning(init, axes), shape, module.cfg.jnp_param_dtype)


class _NormParams(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self):
        _param(self, "scale", nn.initializers.ones, (self.cfg.hidden_size,), ("norm",))


class _AttentionParams(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self):
        d, n, k, h = self.cfg.hidden_size, self.cfg.num_heads, self.cfg.num_kv_heads, self.cfg.head_dim
        init, zeros = nn.initializers.normal(0.02), nn.initializers.zeros
        _param(self, "q_kernel", init, (d, n, h), ("embed", "q_heads", "head_dim"))
        _param(self, "q_bias", zeros, (n, h), ("q_heads", "head_dim"))
        _param(self, "k_kernel", init, (d, k, h), ("embed", "kv_heads", "head_dim"))
        _param(self, "k_bias", zeros, (k, h), ("kv_heads", "head_dim"))
        _param(self, "v_kernel", init, (d, k, h), ("embed", "kv_heads", "head_dim"))
        _param(self, "v_bias", zeros, (k, h), ("kv_heads", "head_dim"))
        _param(self, "o_kernel", init, (n, h, d), ("q_heads", "head_dim", "embed"))


class _MLPParams(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self):
        d, f = self.cfg.hidden_size, self.cfg.intermediate_size
        init = nn.initializers.normal(0.02)
        _param(self, "gate_kernel", init, (d, f), ("embed", "mlp"))
        _param(self, "up_kernel", init, (d, f), ("embed", "mlp"))
        _param(self, "down_kernel", init, (f, d), ("mlp", "embed"))


class _LayerParams(nn.Module):
    """One decoder layer's params; scanned so the layers stack on a leading axis."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, carry, _):
        _NormParams(self.cfg, name="input_norm")()
        _AttentionParams(self.cfg, name="attn")()
        _NormParams(self.cfg, name="post_attn_norm")()
        _MLPParams(self.cfg, name="mlp")()
        return carry, None


class _ModelParams(nn.Module):
    cfg: ModelConfig

    def setup(self):
        cfg = self.cfg
        self.embed = nn.Embed(cfg.vocab_size, cfg.hidden_size, param_dtype=cfg.jnp_param_dtype,
                              embedding_init=nn.with_logical_partitioning(
                                  nn.initializers.normal(0.02), ("vocab", "embed")))
        self.layers = nn.scan(_LayerParams, variable_axes={"params": 0}, split_rngs={"params": True},
                              in_axes=nn.broadcast, length=cfg.num_layers,
                              metadata_params={nn.PARTITION_NAME: "layers"})(cfg)
        self.final_norm = _NormParams(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = _param(self, "lm_head", nn.initializers.normal(0.02), (cfg.hidden_size, cfg.vocab_size),
                                  ("embed", "vocab"))

    def __call__(self):
        self.embed(jnp.zeros((1,), jnp.int32))
        self.layers(jnp.zeros(()), None)
        self.final_norm()


def _boxed_init(cfg: ModelConfig, rng: jax.Array) -> Params:
    return _ModelParams(cfg).init(rng)["params"]


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

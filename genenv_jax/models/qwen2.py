"""The Qwen2 decoder over whole sequences (training, scoring): embed -> stacked layers -> norm -> LM head.

The layers run as a `jax.lax.scan` over the stacked layer params (fully unrolled when
`cfg.scan_layers` is False), each under `jax.checkpoint` with `cfg.remat_policy`. Activations
carry logical sharding constraints that take effect under `parallel.mesh_context`. The per-layer
maths is `primitives.decoder_layer`, the same function the KV-cache decoder runs.

Shape letters: B batch, T length, D hidden, V vocabulary.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from genenv_jax.models import primitives
from genenv_jax.models.config import ModelConfig
from genenv_jax.models.params import Params


def _logical_constraint(x: jax.Array, logical: tuple[str | None, ...]) -> jax.Array:
    """Flax's logical constraint: applies the rules and mesh of the active `mesh_context`, else nothing."""
    return nn.with_logical_constraint(x, logical)


def _layer_stack(cfg: ModelConfig, layers: Params, x: jax.Array, cos: jax.Array, sin: jax.Array,
                 key_valid: jax.Array) -> jax.Array:
    """All decoder layers over x [B, T, D]; causal self-attention over the valid keys."""

    def layer(x, layer_params):
        mask = primitives.causal_mask(key_valid)  # [B, T, T], fused into the score masking

        def attend(q, k, v):
            return primitives.grouped_query_attention(q, k, v, mask), None

        return primitives.decoder_layer(cfg, layer_params, x, cos, sin, attend, _logical_constraint)

    if cfg.remat_policy != "none":
        policy = None if cfg.remat_policy == "full" else getattr(jax.checkpoint_policies, cfg.remat_policy)
        layer = jax.checkpoint(layer, policy=policy, prevent_cse=False)
    x, _ = jax.lax.scan(layer, x, layers, unroll=1 if cfg.scan_layers else cfg.num_layers)
    return x


@functools.partial(jax.jit, static_argnums=0)
def hidden_states(cfg: ModelConfig, params: Params, tokens: jax.Array, positions: jax.Array | None = None,
                  attention_mask: jax.Array | None = None) -> jax.Array:
    """Final-normed hidden states [B, T, D] in the compute dtype."""
    positions = primitives.default_positions(tokens, attention_mask) if positions is None else positions
    key_valid = jnp.ones(tokens.shape, bool) if attention_mask is None else attention_mask.astype(bool)
    cos, sin = primitives.rope_angles(positions, cfg.head_dim, cfg.rope_theta)
    x = primitives.embed_tokens(cfg, params, tokens)  # [B, T, D]
    x = _layer_stack(cfg, params["layers"], x, cos, sin, key_valid)
    return primitives.rms_norm(cfg, params["final_norm"], x)


@functools.partial(jax.jit, static_argnums=0)
def logits_from_hidden(cfg: ModelConfig, params: Params, hidden: jax.Array) -> jax.Array:
    """float32 logits [..., V] for hidden states [..., D] (chunk callers slice `hidden`)."""
    return primitives.lm_logits(cfg, params, hidden)


@functools.partial(jax.jit, static_argnums=0)
def forward(cfg: ModelConfig, params: Params, tokens: jax.Array, positions: jax.Array | None = None,
            attention_mask: jax.Array | None = None) -> jax.Array:
    """Logits [B, T, V] (float32) for tokens [B, T].

    `attention_mask` [B, T] marks real tokens (1) and padding (0); without explicit `positions`
    they are counted over real tokens, so left-padded prompts get the positions they would have alone.
    """
    return logits_from_hidden(cfg, params, hidden_states(cfg, params, tokens, positions, attention_mask))

"""The Qwen2 decoder over whole sequences (training, scoring): embed -> stacked layers -> norm -> LM head.

The layers run as a `jax.lax.scan` over the stacked layer params (fully unrolled when
`cfg.scan_layers` is False), each under `jax.checkpoint` with `cfg.remat_policy`. Activations
carry logical sharding constraints that take effect under `parallel.mesh_context`. The per-layer
maths is `primitives.decoder_layer`, the same function the KV-cache decoder runs; here attention
uses the kernel `cfg.attention` names (`attention.py`) with a structured causal + padding mask, and
the MLP runs over sequence chunks (`MLP_CHUNK_TOKENS`) so long sequences keep its [B, T, F]
activations out of memory.

Shape letters: B batch, T length, D hidden, V vocabulary.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from genenv_jax.models import attention, primitives
from genenv_jax.models.partition import fold_dropout
from genenv_jax.models.config import ModelConfig
from genenv_jax.models.params import Params


def _logical_constraint(x: jax.Array, logical: tuple[str | None, ...]) -> jax.Array:
    """Flax's logical constraint: applies the rules and mesh of the active `mesh_context`, else nothing."""
    return nn.with_logical_constraint(x, logical)


MLP_CHUNK_TOKENS = 2048  # sequence chunk of the training forward's MLP


def _remat(cfg: ModelConfig, fn, prevent_cse: bool = False):
    """fn under `jax.checkpoint` with `cfg.remat_policy` ("full": save nothing)."""
    policy = None if cfg.remat_policy == "full" else getattr(jax.checkpoint_policies, cfg.remat_policy)
    return jax.checkpoint(fn, policy=policy, prevent_cse=prevent_cse)


def _sequence_chunked_mlp(cfg: ModelConfig, mlp_params: Params, x: jax.Array,
                          constrain: primitives.Constrain, dropout: Params | None = None) -> jax.Array:
    """`primitives.mlp` over chunks of about MLP_CHUNK_TOKENS positions, each rematerialised with the
    layer's policy, so the backward pass holds one chunk's [B, chunk, F] activations (F = 5.3 D for
    Qwen2.5-7B) rather than [B, T, F]. Weights are cast (and, under FSDP, gathered) once for all
    chunks. One pass without remat (`remat_policy="none"` saves every chunk anyway). x [B, T, D];
    `dropout` (training only) draws its own mask per chunk."""
    batch, length, hidden = x.shape
    if length <= MLP_CHUNK_TOKENS or cfg.remat_policy == "none":
        return primitives.mlp(cfg, mlp_params, x, constrain, dropout)
    num_chunks = -(-length // MLP_CHUNK_TOKENS)
    chunk = -(-length // num_chunks)
    padded = num_chunks * chunk
    weights = {name: constrain(w.astype(cfg.jnp_dtype), ("mlp", None) if name == "down_kernel" else (None, "mlp"))
               if name.endswith("_kernel") else w.astype(cfg.jnp_dtype)  # adapter leaves (models/lora.py): cast only
               for name, w in mlp_params.items()}
    xs = jnp.pad(x, ((0, 0), (0, padded - length), (0, 0))).reshape(batch, num_chunks, chunk, hidden)
    # prevent_cse=True inside this map: measured 0.9 GiB less temporary memory than False for the
    # 7B GRPO step at 9,216 tokens (compile-only, CPU).
    run = _remat(cfg, lambda w, xc, d: primitives.mlp(cfg, w, xc, constrain, d), prevent_cse=True)
    if dropout is not None:  # a training step's dropout: a mask per chunk
        out = jax.lax.map(lambda ixc: run(weights, ixc[1], fold_dropout(dropout, ixc[0])),
                          (jnp.arange(num_chunks), xs.swapaxes(0, 1)))  # [n, B, chunk, D]
    else:
        out = jax.lax.map(lambda xc: run(weights, xc, None), xs.swapaxes(0, 1))  # [n, B, chunk, D]
    return out.swapaxes(0, 1).reshape(batch, padded, hidden)[:, :length]


def _layer_stack(cfg: ModelConfig, layers: Params, x: jax.Array, cos: jax.Array, sin: jax.Array,
                 key_valid: jax.Array, dropout: Params | None = None) -> jax.Array:
    """All decoder layers over x [B, T, D]; causal self-attention over the valid keys, with the
    kernel `cfg.attention` names (`attention.kernel_for`). `dropout` (stacked on the layers axis
    like `layers`) is scanned beside them."""
    kernel = attention.kernel_for(cfg.attention)

    def layer(x, scanned):
        layer_params, layer_dropout = scanned
        mask = attention.PaddedCausalMask(key_valid)  # structured: no [B, T, T] array

        def attend(q, k, v):
            return primitives.grouped_query_attention(q, k, v, mask, kernel), None

        return primitives.decoder_layer(cfg, layer_params, x, cos, sin, attend, _logical_constraint,
                                        _sequence_chunked_mlp, layer_dropout)

    if cfg.remat_policy != "none":
        layer = _remat(cfg, layer)
    x, _ = jax.lax.scan(layer, x, (layers, dropout), unroll=1 if cfg.scan_layers else cfg.num_layers)
    return x


@functools.partial(jax.jit, static_argnums=0)
def hidden_states(cfg: ModelConfig, params: Params, tokens: jax.Array, positions: jax.Array | None = None,
                  attention_mask: jax.Array | None = None, dropout: Params | None = None) -> jax.Array:
    """Final-normed hidden states [B, T, D] in the compute dtype. `dropout`: a training step's
    dropout (`models.partition.Partition.dropout`), None for the model as it is."""
    positions = primitives.default_positions(tokens, attention_mask) if positions is None else positions
    key_valid = jnp.ones(tokens.shape, bool) if attention_mask is None else attention_mask.astype(bool)
    cos, sin = primitives.rope_angles(positions, cfg.head_dim, cfg.rope_theta)
    # Rows gathered split along D, as the table is under FSDP, then moved to batch-split activations:
    # the backward scatter-add then builds the table's gradient D-sharded, not as a full [V, D]
    # float32 array on every device.
    x = _logical_constraint(primitives.embed_tokens(cfg, params, tokens), (None, None, "embed"))  # [B, T, D]
    x = _logical_constraint(x, primitives.ACTIVATION_AXES)
    x = _layer_stack(cfg, params["layers"], x, cos, sin, key_valid, dropout)
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

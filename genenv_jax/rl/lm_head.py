"""Per-token log p(target) and entropy from final hidden states: the LM head run over chunks of the
sequence, with its vocabulary split over the devices.

Why this shape (per device, Qwen2.5-7B: V = 152,064, D = 3,584, float32 master params):
- chunks: only one float32 [B, C, V] block of logits exists at a time, forward and backward (the
  chunk function is rematerialised inside a `lax.scan`);
- vocabulary-parallel: under a mesh the head weight is resharded once per step so each device holds
  V / n columns of it (all of D), every device sees every row of a chunk (the [B, C, D] hidden
  chunk is gathered: small), and the softmax statistics are summed across devices. The FSDP
  alternative gathers the whole weight for every chunk: a 1 GiB bfloat16 copy, and a 2 GiB float32
  full-size gradient per device before it is reduce-scattered;
- the skip of chunks without needed positions (`lax.cond`) is inside the rematerialised function:
  outside it, the cond's residuals (the head weight among them) became per-chunk scan outputs, one
  stacked copy of the weight shard per chunk (4.6 GiB at 9,216 tokens for 7B on 8 devices).

Shape letters: B batch, C chunk, D hidden, V vocabulary, n chunks.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from genenv_jax.models import ModelConfig
from genenv_jax.models.mesh_axes import active_mesh, dividing_axes
from genenv_jax.models.primitives import lm_logits
from genenv_jax.parallel import MESH_AXES

Params = Any


def vocab_axes(mesh, vocab_size: int) -> tuple[str, ...]:
    """Mesh axes (data, fsdp, tensor order, size > 1) whose product divides the vocabulary."""
    return dividing_axes(mesh, MESH_AXES, vocab_size)


def _constrain(x: jax.Array, spec: P | None) -> jax.Array:
    return x if spec is None else jax.lax.with_sharding_constraint(x, spec)


def head_params(cfg: ModelConfig, params: Params) -> Params:
    """The params `lm_logits` reads (the tied embedding or the untied head), vocabulary-sharded
    over every mesh axis that divides it when a mesh is active (one reshard per step)."""
    mesh = active_mesh()
    axes = () if mesh is None else vocab_axes(mesh, cfg.vocab_size)
    if cfg.tie_word_embeddings:
        table = params["embed"]["embedding"]  # [V, D]
        return {"embed": {"embedding": _constrain(table, P(axes, None) if axes else None)}}
    return {"lm_head": _constrain(params["lm_head"], P(None, axes) if axes else None)}  # [D, V]


def _chunk_stats(cfg: ModelConfig, head: Params, hidden: jax.Array, targets: jax.Array, temperature: float,
                 with_entropy: bool) -> tuple[jax.Array, jax.Array]:
    """log p(target) and entropy for one chunk: hidden [B, C, D], targets [B, C] -> two [B, C] float32."""
    mesh = active_mesh()
    axes = () if mesh is None else vocab_axes(mesh, cfg.vocab_size)
    if axes:
        hidden = _constrain(hidden, P(None, None, None))  # every row of the chunk on every device
    logits = lm_logits(cfg, head, hidden)  # [B, C, V] float32
    logits = _constrain(logits, P(None, None, axes) if axes else None)
    if temperature != 1.0:
        logits = logits / temperature
    lse = jax.nn.logsumexp(logits, axis=-1)  # [B, C]
    vocab = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
    target_logit = jnp.sum(jnp.where(vocab == targets[..., None], logits, 0.0), axis=-1)  # no gather over V
    if not with_entropy:
        return target_logit - lse, jnp.zeros_like(lse)
    probs = jnp.exp(logits - lse[..., None])  # [B, C, V]
    return target_logit - lse, lse - jnp.sum(probs * logits, axis=-1)


def _chunk_or_zeros(cfg: ModelConfig, temperature: float, with_entropy: bool, head: Params, hidden: jax.Array,
                    targets: jax.Array, use: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`_chunk_stats`, or zeros when `use` is False (a chunk with no needed position)."""
    zeros = jnp.zeros(targets.shape, jnp.float32)
    return jax.lax.cond(use, lambda: _chunk_stats(cfg, head, hidden, targets, temperature, with_entropy),
                        lambda: (zeros, zeros))


def chunked_token_stats(cfg: ModelConfig, params: Params, hidden: jax.Array, targets: jax.Array,
                        use_chunk: jax.Array, *, temperature: float, with_entropy: bool,
                        ) -> tuple[jax.Array, jax.Array]:
    """Per-chunk log p(target) and entropy: hidden [n, B, C, D], targets [n, B, C], use_chunk [n]
    bool -> two [n, B, C] float32 (zeros for chunks not used; entropy zeros unless asked).

    Rematerialised: the backward pass recomputes each chunk's logits instead of storing them.
    """
    stats = jax.checkpoint(functools.partial(_chunk_or_zeros, cfg, temperature, with_entropy))
    head = head_params(cfg, params)

    def body(carry, chunk_in):
        h, t, use = chunk_in
        return carry, stats(head, h, t, use)

    _, (logprobs, entropy) = jax.lax.scan(body, None, (hidden, targets, use_chunk))
    return logprobs, entropy

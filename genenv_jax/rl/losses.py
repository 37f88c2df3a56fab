"""Shared loss pieces: masked aggregation over tokens / sequences and per-token KL estimators.

Aggregations take explicit normalisers so a batch split into micro-batches sums to exactly the
full-batch value: each micro-batch divides by the *whole batch's* token or sequence count.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from genenv_jax.core.config_checks import check_choice

AGGREGATIONS = ("token_mean", "seq_mean_token_mean")
# Dr. GRPO's: each sequence's token sum over a constant length L (`norm_tokens`), averaged over sequences.
SUM_NORM = "seq_mean_token_sum_norm"
KL_ESTIMATORS = ("k1", "k2", "k3")

# exp() argument bound for the k3 estimator (keeps a huge log-ratio from overflowing to inf).
_K3_LOG_RATIO_BOUND = 20.0


def token_count(mask: jax.Array) -> jax.Array:
    """Number of masked-in tokens (float32 scalar)."""
    return jnp.sum(mask.astype(jnp.float32))


def sequence_count(mask: jax.Array) -> jax.Array:
    """Number of rows with at least one masked-in token (float32 scalar)."""
    return jnp.sum((jnp.sum(mask, axis=-1) > 0).astype(jnp.float32))


def normalizer(mask: jax.Array, mode: str, norm_tokens: int | None = None) -> jax.Array:
    """The denominator `aggregate` uses in `mode`, computed over `mask` [B, T]: the token count,
    the sequence count, or (SUM_NORM) the sequence count x the constant `norm_tokens`."""
    if mode == SUM_NORM:
        if not norm_tokens:
            raise ValueError(f"aggregation {SUM_NORM} needs norm_tokens (the constant length L), got {norm_tokens}")
        return sequence_count(mask) * float(norm_tokens)
    check_choice("aggregation", mode, AGGREGATIONS)
    return token_count(mask) if mode == "token_mean" else sequence_count(mask)


def aggregate(values: jax.Array, mask: jax.Array, mode: str, norm: jax.Array | None = None) -> jax.Array:
    """Masked mean of per-token `values` [B, T].

    token_mean: sum over all masked tokens / `norm` (default: their count).
    seq_mean_token_mean: each row's token mean, summed over rows / `norm` (default: rows with
      at least one token; empty rows contribute 0).
    seq_mean_token_sum_norm (Dr. GRPO): the sum over all masked tokens / `norm` (rows x L; pass it).
    A zero normaliser (no tokens at all) gives 0, not NaN.
    """
    if mode != SUM_NORM:
        check_choice("aggregation", mode, AGGREGATIONS)
    mask = mask.astype(jnp.float32)
    norm = normalizer(mask, mode) if norm is None else norm
    if mode in ("token_mean", SUM_NORM):
        total = jnp.sum(values * mask)
    else:
        per_row = jnp.sum(values * mask, axis=-1) / jnp.maximum(jnp.sum(mask, axis=-1), 1.0)  # [B]
        total = jnp.sum(per_row)
    return total / jnp.maximum(norm, 1.0)


def kl_penalty(logprobs: jax.Array, ref_logprobs: jax.Array, estimator: str = "k3",
               clamp: float | None = 10.0) -> jax.Array:
    """Per-token estimate of KL(pi || pi_ref) from log-probs of tokens sampled from (near) pi.

    k1: log pi - log pi_ref (unbiased, high variance, can be negative).
    k2: 0.5 * (log pi - log pi_ref)^2.
    k3: exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1 (unbiased, non-negative, "low variance").
    `clamp` bounds the per-token estimate to [-clamp, clamp] (None: no bound); for k3 the
    log-ratio is also bounded to +-20 before exp so it cannot overflow.
    """
    check_choice("kl_estimator", estimator, KL_ESTIMATORS)
    log_ratio = logprobs - ref_logprobs
    if estimator == "k1":
        kl = log_ratio
    elif estimator == "k2":
        kl = 0.5 * jnp.square(log_ratio)
    else:
        ref_over_pi = jnp.clip(-log_ratio, -_K3_LOG_RATIO_BOUND, _K3_LOG_RATIO_BOUND)
        kl = jnp.exp(ref_over_pi) - ref_over_pi - 1.0
    if clamp is not None:
        kl = jnp.clip(kl, -clamp, clamp)
    return kl

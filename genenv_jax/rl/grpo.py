"""GRPO for the agent: group-relative advantages, the clipped-surrogate loss, the update step.

Batch layout (all rows of one task's n rollouts are contiguous: rows [g*n, (g+1)*n)):
  tokens [B, T] int, attention_mask [B, T], loss_mask [B, T] (response tokens the agent wrote),
  old_logprobs [B, T] (from the sampler, or recomputed), advantages [B] (`grpo_advantages`),
  ref_logprobs [B, T] (frozen reference policy, `logprobs.make_logprobs_fn`; needed when
  kl_coef > 0), optional positions [B, T].
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from genenv_jax.core.config_checks import check_choice
from genenv_jax.models import ModelConfig
from genenv_jax.models.lora import LoRAConfig
from genenv_jax.rl.logprobs import token_logprobs
from genenv_jax.rl.losses import (AGGREGATIONS, KL_ESTIMATORS, SUM_NORM, aggregate, kl_penalty, normalizer,
                                  token_count)
from genenv_jax.rl.registry import ADVANTAGE_ESTIMATORS, register_policy_loss
from genenv_jax.rl.step import TrainStep, build_train_step

# Where the importance ratio lives: per token (PPO / GRPO), per sequence (GSPO: the length-normalised
# log-ratio of the whole response), or GSPO-token (the sequence ratio's value, each token's gradient).
RATIO_LEVELS = ("token", "sequence", "sequence_token")
GSPO_LOG_RATIO_CAP = 10.0  # GSPO-token's log-ratio cap (veRL's clamp before exp)


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
    """GRPO loss and advantage options. Defaults follow the GenEnv reference config.

    clip_low / clip_high: the ratio is clipped to [1 - clip_low, 1 + clip_high].
    kl_coef, kl_estimator ("k1" | "k2" | "k3"), kl_clamp: KL-to-reference loss term.
    entropy_coef: weight of the entropy bonus (subtracted from the loss).
    aggregation: "token_mean" (all response tokens of the batch weigh the same),
      "seq_mean_token_mean" (each sequence's token mean, averaged over sequences) or
      "seq_mean_token_sum_norm" (Dr. GRPO: each sequence's token sum / `norm_tokens`, averaged).
    norm_tokens: Dr. GRPO's constant length L (the run config sets 0 to the policy's max_new_tokens).
    dual_clip: veRL's clip_ratio_c (dual-clip PPO): for A < 0 a token's loss is at most
      dual_clip * |A|, however large its ratio; None: off.
    importance_sampling_level: "token" (PPO's per-token ratio), "sequence" (GSPO's sequence
      ratio exp(mean_t log r_t), clipped per sequence) or "sequence_token" (GSPO-token); both
      GSPO levels aggregate per sequence (aggregation "seq_mean_token_mean").
    advantage: a registered estimator (`rl.registry`): "grpo" (one group-relative advantage per episode)
      or "gigpo" (GiGPO: that advantage plus `gigpo_omega` x each agent turn's step advantage over its
      anchor state, discount `gigpo_gamma`).
    overlong_buffer / overlong_penalty: DAPO's soft overlong punishment: a reply within the last
      `overlong_buffer` tokens before the reply cap loses up to `overlong_penalty` reward (0: off).
    temperature: the sampling temperature; logits are divided by it, as the sampler did.
    chunk_size: sequence chunk of the LM head (bounds the float32 [B, chunk, V] logits).
    adv_eps, std_ddof, normalize_by_std: advantages (r - mean) / (std + adv_eps) per group.
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 1e-3
    kl_estimator: str = "k3"
    kl_clamp: float | None = 10.0
    entropy_coef: float = 1e-3
    aggregation: str = "token_mean"
    temperature: float = 1.0
    chunk_size: int = 512
    adv_eps: float = 1e-6
    std_ddof: int = 1
    normalize_by_std: bool = True
    norm_tokens: int = 0
    dual_clip: float | None = None
    importance_sampling_level: str = "token"
    advantage: str = "grpo"
    gigpo_gamma: float = 0.95
    gigpo_omega: float = 1.0
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0

    def __post_init__(self):
        check_choice("GRPOConfig.aggregation", self.aggregation, AGGREGATIONS + (SUM_NORM,))
        check_choice("GRPOConfig.importance_sampling_level", self.importance_sampling_level, RATIO_LEVELS)
        if self.importance_sampling_level != "token" and self.aggregation != "seq_mean_token_mean":
            raise ValueError(f"GRPOConfig.importance_sampling_level={self.importance_sampling_level!r} (GSPO) "
                             "aggregates per sequence: set aggregation='seq_mean_token_mean'")
        # Estimators are registered by name (`rl.registry`; the built-in ones in `rl.advantages`).
        check_choice("GRPOConfig.advantage", self.advantage, ADVANTAGE_ESTIMATORS.names())
        if ADVANTAGE_ESTIMATORS.get(self.advantage).per_turn and self.importance_sampling_level == "sequence":
            raise ValueError(f"GRPOConfig.advantage={self.advantage!r} gives each agent turn its own advantage; GSPO's "
                             "sequence-level ratio needs one per sequence: use importance_sampling_level="
                             "'sequence_token' (GSPO-token) or 'token'")
        if not 0.0 <= self.gigpo_gamma <= 1.0:
            raise ValueError(f"GRPOConfig.gigpo_gamma must be in [0, 1], got {self.gigpo_gamma}")
        if self.gigpo_omega < 0:
            raise ValueError(f"GRPOConfig.gigpo_omega must be >= 0, got {self.gigpo_omega}")
        if self.overlong_buffer < 0 or self.overlong_penalty < 0:
            raise ValueError(f"GRPOConfig.overlong_buffer and overlong_penalty must be >= 0, got "
                             f"{self.overlong_buffer}, {self.overlong_penalty}")
        if self.dual_clip is not None and not self.dual_clip > 1.0:
            raise ValueError(f"GRPOConfig.dual_clip must be > 1 (veRL's clip_ratio_c, 3 there) or None, "
                             f"got {self.dual_clip}")
        if self.norm_tokens < 0:
            raise ValueError(f"GRPOConfig.norm_tokens must be >= 0, got {self.norm_tokens}")
        check_choice("GRPOConfig.kl_estimator", self.kl_estimator, KL_ESTIMATORS)
        if self.clip_low < 0 or self.clip_high < 0:
            raise ValueError(f"GRPOConfig clip ranges must be >= 0, got {self.clip_low}, {self.clip_high}")
        if self.clip_low >= 1:
            raise ValueError(f"GRPOConfig.clip_low must be < 1, got {self.clip_low}")
        if self.kl_coef < 0:
            raise ValueError(f"GRPOConfig.kl_coef must be >= 0, got {self.kl_coef}")
        if self.temperature <= 0:
            raise ValueError(f"GRPOConfig.temperature must be > 0, got {self.temperature}")

    @property
    def needs_reference(self) -> bool:
        """The loss has a KL term toward the frozen reference policy (its batch needs ref_logprobs)."""
        return self.kl_coef > 0


def grpo_advantages(rewards: jax.Array, num_rollouts: int, *, eps: float = 1e-6, ddof: int = 1,
                    normalize_by_std: bool = True) -> jax.Array:
    """Group-relative advantages [B] from rewards [B], groups = consecutive runs of `num_rollouts`.

    A_i = (r_i - mean_g) / (std_g + eps) (std with `ddof`), or r_i - mean_g without std
    normalisation. A group whose rewards are all equal gets exactly zero advantage.
    """
    rewards = jnp.asarray(rewards, jnp.float32)
    if rewards.ndim != 1:
        raise ValueError(f"rewards must be [batch], got shape {rewards.shape}")
    if num_rollouts < 1 or rewards.shape[0] % num_rollouts:
        raise ValueError(f"batch of {rewards.shape[0]} rewards is not a whole number of groups of "
                         f"num_rollouts={num_rollouts}")
    if normalize_by_std and not 0 <= ddof < num_rollouts:
        raise ValueError(f"std ddof={ddof} needs num_rollouts > ddof, got num_rollouts={num_rollouts}")
    groups = rewards.reshape(-1, num_rollouts)  # [G, n]
    centred = groups - jnp.mean(groups, axis=1, keepdims=True)
    if normalize_by_std:
        std = jnp.sqrt(jnp.sum(jnp.square(centred), axis=1, keepdims=True) / (num_rollouts - ddof))
        centred = centred / (std + eps)
    constant = jnp.max(groups, axis=1, keepdims=True) == jnp.min(groups, axis=1, keepdims=True)
    return jnp.where(constant, 0.0, centred).reshape(-1)


def grpo_loss(logprobs: jax.Array, old_logprobs: jax.Array, advantages: jax.Array, loss_mask: jax.Array,
              config: GRPOConfig, ref_logprobs: jax.Array | None = None, entropy: jax.Array | None = None,
              norm: jax.Array | None = None, num_tokens: jax.Array | None = None,
              ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Clipped-surrogate loss + kl_coef * KL - entropy_coef * entropy, aggregated over the mask.

    logprobs / old_logprobs / ref_logprobs / entropy / loss_mask: [B, T]; advantages [B] (one per
    sequence) or [B, T]. `norm` is the aggregation's normaliser and `num_tokens` the token count,
    both over the whole batch (defaults: from `loss_mask`); pass them when this is a micro-batch.
    Returns (loss, metrics) with pg_loss, kl, entropy, clip_frac, tokens.
    """
    mask = loss_mask.astype(jnp.float32)
    mode = config.aggregation
    norm = normalizer(mask, mode, config.norm_tokens) if norm is None else norm
    num_tokens = token_count(mask) if num_tokens is None else num_tokens
    if config.importance_sampling_level == "sequence" and advantages.ndim != 1:
        raise ValueError("GSPO's sequence-level ratio needs one advantage per sequence ([B]); "
                         "use importance_sampling_level='sequence_token' for per-token advantages")
    adv = advantages[:, None] if advantages.ndim == 1 else advantages  # [B, 1] or [B, T]

    ratio = importance_ratio(logprobs, old_logprobs, mask, config.importance_sampling_level)  # [B, T]
    unclipped = -adv * ratio
    clipped = -adv * jnp.clip(ratio, 1.0 - config.clip_low, 1.0 + config.clip_high)
    pg_per_token = jnp.maximum(unclipped, clipped)
    metrics = {}
    if config.dual_clip is not None:  # A < 0: the loss is capped at dual_clip * |A|
        cap = -adv * config.dual_clip
        capped = (adv < 0) & (pg_per_token > cap)
        metrics["clip_frac_lower"] = jnp.sum(capped * mask) / jnp.maximum(num_tokens, 1.0)
        pg_per_token = jnp.where(adv < 0, jnp.minimum(pg_per_token, cap), pg_per_token)
    pg_loss = aggregate(pg_per_token, mask, mode, norm)
    clip_frac = jnp.sum((clipped > unclipped) * mask) / jnp.maximum(num_tokens, 1.0)
    loss = pg_loss
    metrics |= {"pg_loss": pg_loss, "clip_frac": clip_frac, "tokens": token_count(mask)}

    if config.kl_coef > 0:
        if ref_logprobs is None:
            raise ValueError(f"GRPO kl_coef={config.kl_coef} needs ref_logprobs")
        kl = aggregate(kl_penalty(logprobs, ref_logprobs, config.kl_estimator, config.kl_clamp), mask, mode, norm)
        loss = loss + config.kl_coef * kl
        metrics["kl"] = kl
    if entropy is not None:
        mean_entropy = aggregate(entropy, mask, mode, norm)
        if config.entropy_coef:
            loss = loss - config.entropy_coef * mean_entropy
        metrics["entropy"] = mean_entropy
    elif config.entropy_coef:
        raise ValueError(f"GRPO entropy_coef={config.entropy_coef} needs per-token entropy")
    metrics["loss"] = loss
    return loss, metrics


def importance_ratio(logprobs: jax.Array, old_logprobs: jax.Array, mask: jax.Array, level: str) -> jax.Array:
    """[B, T] importance ratios at `level` (RATIO_LEVELS). GSPO's sequence ratio is
    s_i = exp(sum_t m_t (log p_t - log p_old_t) / sum_t m_t); GSPO-token's takes its value with each
    token's own gradient, exp(sg[log s_i] + log p_t - sg[log p_t]), log capped at 10 (veRL)."""
    log_ratio = logprobs - old_logprobs
    if level == "token":
        return jnp.exp(log_ratio)
    lengths = jnp.maximum(jnp.sum(mask, axis=-1, keepdims=True), 1.0)
    sequence = jnp.sum(log_ratio * mask, axis=-1, keepdims=True) / lengths  # [B, 1]
    if level == "sequence":
        return jnp.broadcast_to(jnp.exp(sequence), log_ratio.shape)
    per_token = jax.lax.stop_gradient(sequence) + logprobs - jax.lax.stop_gradient(logprobs)
    return jnp.exp(jnp.minimum(per_token, GSPO_LOG_RATIO_CAP))


def grpo_micro_batch_loss(cfg: ModelConfig, config: GRPOConfig, params: Any, batch: dict[str, jax.Array],
                          norms: dict[str, jax.Array]) -> tuple[jax.Array, dict[str, jax.Array]]:
    """GRPO loss of one micro-batch under `params`, normalised by whole-batch `norms`."""
    logprobs, entropy = token_logprobs(cfg, params, batch["tokens"], batch.get("attention_mask"),
                                       batch.get("positions"), chunk_size=config.chunk_size,
                                       temperature=config.temperature, with_entropy=True,
                                       needed=batch["loss_mask"])
    if not config.entropy_coef:
        entropy = jax.lax.stop_gradient(entropy)  # a metric only: no backward pass through it
    return grpo_loss(logprobs, batch["old_logprobs"], batch["advantages"], batch["loss_mask"], config,
                     ref_logprobs=batch.get("ref_logprobs"), entropy=entropy, norm=norms["norm"],
                     num_tokens=norms["tokens"])


@register_policy_loss("grpo", config=GRPOConfig, grouped=True)
def make_grpo_step(cfg: ModelConfig, optimizer: optax.GradientTransformation, config: GRPOConfig | None = None,
                   mesh: Mesh | None = None, micro_batches: int = 1, rules: Any = None,
                   donate: bool = True, lora: LoRAConfig | None = None) -> TrainStep:
    """The jitted GRPO `step(params, opt_state, batch) -> (params, opt_state, metrics)` (with `lora`:
    `step(adapters, opt_state, batch, base)`, see `rl.step`).

    Metrics: loss, pg_loss, kl (when kl_coef > 0), entropy, clip_frac, tokens, grad_norm
    (before clipping), learning_rate.
    """
    config = GRPOConfig() if config is None else config
    required = ("tokens", "loss_mask", "old_logprobs", "advantages")
    if config.kl_coef > 0:
        required += ("ref_logprobs",)

    def prepare(batch):
        mask = batch["loss_mask"]
        norms = {"norm": normalizer(mask, config.aggregation, config.norm_tokens), "tokens": token_count(mask)}
        return batch, norms, {}

    def loss_fn(params, micro_batch, norms):
        return grpo_micro_batch_loss(cfg, config, params, micro_batch, norms)

    return build_train_step(cfg, optimizer, loss_fn, prepare, required, mesh=mesh, micro_batches=micro_batches,
                            rules=rules, donate=donate, rule="GRPO", lora=lora)

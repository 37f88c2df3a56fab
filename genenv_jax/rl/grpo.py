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

from genenv_jax.core.config_checks import KeyProblem, check_fields, positive, setting
from genenv_jax.models import ModelConfig
from genenv_jax.models.partition import Partition
from genenv_jax.rl.logprobs import token_logprobs
from genenv_jax.rl.losses import (AGGREGATIONS, KL_ESTIMATORS, SUM_NORM, aggregate, kl_penalty, normalizer,
                                  token_count)
from genenv_jax.rl.registry import ADVANTAGE_ESTIMATORS, register_policy_loss
from genenv_jax.rl.step import TrainStep, build_train_step

# Where the importance ratio lives: per token (PPO / GRPO), per sequence (GSPO: the length-normalised
# log-ratio of the whole response), or GSPO-token (the sequence ratio's value, each token's gradient).
RATIO_LEVELS = ("token", "sequence", "sequence_token")
GSPO_LOG_RATIO_CAP = 10.0  # GSPO-token's log-ratio cap (veRL's clamp before exp)


def _clip_low(value: float) -> str | None:
    """in [0, 1)"""
    return None if 0 <= value < 1 else "must lie in [0, 1)"


def _dual_clip(value: float) -> str | None:
    """> 1 (None: off)"""
    return None if value > 1 else "must be > 1 (veRL's clip_ratio_c, 3 there) or None"


def _registered_estimator(value: str) -> str | None:
    """a registered advantage estimator (`rl.registry`; grpo, gigpo built in)"""
    names = ADVANTAGE_ESTIMATORS.names()
    return None if value in names else f"expected one of {', '.join(names)}"


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
    """GRPO loss and advantage options, the `train.loss` config section of the agent (and
    `simulator.train.grpo`); each key declared with its doc and rule (`core.config_checks.setting`).
    Defaults follow the GenEnv reference config.

    The ratio is clipped to [1 - clip_low, 1 + clip_high]. Aggregations: "token_mean" (all response
    tokens of the batch weigh the same), "seq_mean_token_mean" (each sequence's token mean,
    averaged over sequences), "seq_mean_token_sum_norm" (Dr. GRPO: each sequence's token sum /
    `norm_tokens`, averaged). Importance-sampling levels: "token" (PPO's per-token ratio),
    "sequence" (GSPO's sequence ratio exp(mean_t log r_t), clipped per sequence) or
    "sequence_token" (GSPO-token); both GSPO levels aggregate per sequence. Advantages are
    (r - mean) / (std + adv_eps) per group; "gigpo" adds `gigpo_omega` x each agent turn's step
    advantage over its anchor state (discount `gigpo_gamma`).
    """

    clip_low: float = setting(0.2, "the ratio's lower clip is 1 - clip_low", check=_clip_low)
    clip_high: float = setting(0.2, "the ratio's upper clip is 1 + clip_high", minimum=0)
    kl_coef: float = setting(1e-3, "weight of the KL-to-reference term (0: no reference model)", minimum=0)
    kl_estimator: str = setting("k3", "the KL estimator", choices=KL_ESTIMATORS)
    kl_clamp: float | None = setting(10.0, "per-token KL estimates are clamped to this magnitude (None: no clamp)")
    entropy_coef: float = setting(1e-3, "weight of the entropy bonus (subtracted from the loss)")
    aggregation: str = setting("token_mean", "token_mean | seq_mean_token_mean | seq_mean_token_sum_norm "
                                             "(Dr. GRPO)", choices=AGGREGATIONS + (SUM_NORM,))
    temperature: float = setting(1.0, "logits are divided by it, as the sampler did (the run config sets the "
                                      "policy's sampling temperature)", check=positive, in_tree=False)
    chunk_size: int = setting(512, "sequence chunk of the LM head (bounds the float32 [B, chunk, V] logits)",
                              minimum=1)
    adv_eps: float = setting(1e-6, "added to a group's reward std before dividing")
    std_ddof: int = setting(1, "delta degrees of freedom of the group's reward std")
    normalize_by_std: bool = setting(True, "divide advantages by the group's reward std")
    norm_tokens: int = setting(0, "Dr. GRPO's constant length L (0: the policy's sampling.max_new_tokens)",
                               minimum=0)
    dual_clip: float | None = setting(None, "veRL's clip_ratio_c (dual-clip PPO): for A < 0 a token's loss is at "
                                            "most dual_clip x |A|; None: off", check=_dual_clip)
    importance_sampling_level: str = setting("token", "token (PPO) | sequence (GSPO) | sequence_token "
                                                      "(GSPO-token)", choices=RATIO_LEVELS)
    advantage: str = setting("grpo", "grpo (one group-relative advantage per episode) | gigpo (plus a step "
                                     "advantage per agent turn) | another registered estimator",
                             check=_registered_estimator)
    gigpo_gamma: float = setting(0.95, "gigpo: discount of the step returns", fraction=True)
    gigpo_omega: float = setting(1.0, "gigpo: weight of the step advantage", minimum=0)
    overlong_buffer: int = setting(0, "DAPO's soft overlong punishment: a reply within this many tokens of the "
                                      "reply cap loses up to overlong_penalty reward (0: off)", minimum=0)
    overlong_penalty: float = setting(1.0, "the most reward the overlong punishment takes", minimum=0)

    def __post_init__(self):
        check_fields(self)
        if self.importance_sampling_level != "token" and self.aggregation != "seq_mean_token_mean":
            raise KeyProblem(self, "importance_sampling_level", "GSPO aggregates per sequence: set "
                                                                "aggregation='seq_mean_token_mean'")
        if ADVANTAGE_ESTIMATORS.get(self.advantage).per_turn and self.importance_sampling_level == "sequence":
            raise KeyProblem(self, "importance_sampling_level", f"advantage {self.advantage!r} gives each agent "
                             "turn its own advantage; GSPO's sequence-level ratio needs one per sequence: use "
                             "'sequence_token' (GSPO-token) or 'token'")

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
                          norms: dict[str, jax.Array], dropout: Any = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """GRPO loss of one micro-batch under `params` (and the forward's `dropout`), normalised by
    whole-batch `norms`."""
    logprobs, entropy = token_logprobs(cfg, params, batch["tokens"], batch.get("attention_mask"),
                                       batch.get("positions"), chunk_size=config.chunk_size,
                                       temperature=config.temperature, with_entropy=True,
                                       needed=batch["loss_mask"], dropout=dropout)
    if not config.entropy_coef:
        entropy = jax.lax.stop_gradient(entropy)  # a metric only: no backward pass through it
    return grpo_loss(logprobs, batch["old_logprobs"], batch["advantages"], batch["loss_mask"], config,
                     ref_logprobs=batch.get("ref_logprobs"), entropy=entropy, norm=norms["norm"],
                     num_tokens=norms["tokens"])


@register_policy_loss("grpo", config=GRPOConfig, grouped=True)
def make_grpo_step(cfg: ModelConfig, optimizer: optax.GradientTransformation, config: GRPOConfig | None = None,
                   mesh: Mesh | None = None, micro_batches: int = 1, rules: Any = None,
                   donate: bool = True, partition: Partition | None = None) -> TrainStep:
    """The jitted GRPO `step(trainable, opt_state, batch, frozen) -> (trainable, opt_state, metrics)`
    of `partition` (default: full fine-tuning, where `frozen` may be left out; see `rl.step`).

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

    def loss_fn(params, micro_batch, norms, dropout):
        return grpo_micro_batch_loss(cfg, config, params, micro_batch, norms, dropout)

    return build_train_step(cfg, optimizer, loss_fn, prepare, required, mesh=mesh, micro_batches=micro_batches,
                            rules=rules, donate=donate, rule="GRPO", partition=partition)

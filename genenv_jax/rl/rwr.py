"""Reward-weighted regression for the environment simulator: weighted NLL + KL to its start.

Each generated task (a row) is weighted by w = exp(lambda * R_env) (`rwr_weight`) and trained
on with the simulator's negative log-likelihood of the task text it wrote; a KL penalty toward
the initial simulator keeps generations well-formed and diverse, and an optional KL threshold
skips or scales the update when the simulator has drifted too far.

Batch layout: tokens [B, T] int, attention_mask [B, T], loss_mask [B, T] (the generated task
text), rewards [B] (R_env of each task), ref_logprobs [B, T] (initial simulator params through
`logprobs.make_logprobs_fn`; needed when kl_coef > 0 or a threshold is set), optional positions.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from genenv_jax.core.config_checks import check_choice, check_fields, positive, setting
from genenv_jax.models import ModelConfig
from genenv_jax.models.partition import Partition
from genenv_jax.rl.optim import OptimizerConfig, make_optimizer
from genenv_jax.rl.logprobs import token_logprobs
from genenv_jax.rl.losses import AGGREGATIONS, KL_ESTIMATORS, aggregate, kl_penalty, normalizer, token_count
from genenv_jax.rl.registry import register_policy_loss
from genenv_jax.rl.step import TrainStep, build_train_step

WEIGHT_NORMS = ("none", "mean", "softmax")
THRESHOLD_MODES = ("skip", "scale")


@dataclasses.dataclass(frozen=True)
class RWRConfig:
    """RWR options, the `train.loss` config section of a policy trained by RWR (the simulator);
    each key declared with its doc and rule (`core.config_checks.setting`).

    weight_norm "mean" is w / mean w over the batch's rows (i.e. B x softmax): the average weight is
    1, so the learning rate means what it means for plain SFT; "softmax" (w / sum w) makes the loss
    ~B times smaller. With a `kl_threshold`, when the measured KL (same estimator, token mean, before
    this update) exceeds it, "skip" leaves params and optimizer state unchanged and "scale"
    multiplies the update by kl_threshold / KL.
    """

    reward_lambda: float = setting(1.0, "a task's weight is exp(reward_lambda x R_env) (GenEnv: 1.0)")
    weight_norm: str = setting("mean", "none (raw weights) | mean (weights / their batch mean) | softmax "
                                       "(weights / their batch sum)", choices=WEIGHT_NORMS)
    aggregation: str = setting("token_mean", "how the weighted per-token NLL is averaged", choices=AGGREGATIONS)
    kl_coef: float = setting(0.1, "weight of the KL penalty toward the initial simulator", minimum=0)
    kl_estimator: str = setting("k3", "the KL estimator", choices=KL_ESTIMATORS)
    kl_clamp: float | None = setting(10.0, "per-token KL estimates are clamped to this magnitude (None: no clamp)")
    kl_threshold: float | None = setting(None, "skip or scale an update whose measured KL exceeds this (None: off)",
                                         check=positive)
    kl_threshold_mode: str = setting("skip", "skip | scale: what a KL over kl_threshold does", choices=THRESHOLD_MODES)
    temperature: float = setting(1.0, "logits are divided by it, as the sampler did (the run config sets the "
                                      "policy's sampling temperature)", check=positive, in_tree=False)
    chunk_size: int = setting(512, "sequence chunk of the LM head (bounds the float32 [B, chunk, V] logits)",
                              minimum=1)

    def __post_init__(self):
        check_fields(self)

    @property
    def needs_reference(self) -> bool:
        return self.kl_coef > 0 or self.kl_threshold is not None


def rwr_weight(r_env: Any, reward_lambda: Any) -> Any:
    """The RWR weight exp(reward_lambda * r_env), elementwise.

    Python floats / numpy arrays give float64 numpy (host side, e.g. for pool records); jax arrays,
    traced ones included, give a jax array (inside jit).
    """
    if isinstance(r_env, jax.Array) or isinstance(reward_lambda, jax.Array):
        return jnp.exp(reward_lambda * r_env)
    return np.exp(np.float64(reward_lambda) * np.asarray(r_env, np.float64))


def rwr_weights(rewards: jax.Array, reward_lambda: float = 1.0, weight_norm: str = "mean",
                valid: jax.Array | None = None) -> jax.Array:
    """Per-row weights [B] from R_env rewards [B]: `rwr_weight`, normalised over valid rows.

    `valid` [B] bool marks rows that count (e.g. rows with any loss token); invalid rows get 0.
    Normalisation is done relative to the largest weight (a softmax), so a large lambda * R does
    not overflow.
    """
    check_choice("weight_norm", weight_norm, WEIGHT_NORMS)
    rewards = jnp.asarray(rewards, jnp.float32)
    if rewards.ndim != 1:
        raise ValueError(f"rewards must be [batch], got shape {rewards.shape}")
    valid = jnp.ones(rewards.shape, bool) if valid is None else valid.astype(bool)
    if weight_norm == "none":
        return jnp.where(valid, rwr_weight(rewards, reward_lambda), 0.0)
    # exp(lambda (R - R_peak)) = w / w_peak <= 1, with R_peak the valid reward of the largest weight;
    # an all-invalid batch gives all zeros rather than NaN.
    peak_row = jnp.argmax(jnp.where(valid, reward_lambda * rewards, -jnp.inf))
    unnorm = jnp.where(valid, rwr_weight(rewards - rewards[peak_row], reward_lambda), 0.0)
    softmax = unnorm / jnp.maximum(jnp.sum(unnorm), jnp.finfo(jnp.float32).tiny)
    if weight_norm == "softmax":
        return softmax
    return softmax * jnp.sum(valid.astype(jnp.float32))


def weight_stats(weights: jax.Array, valid: jax.Array) -> dict[str, jax.Array]:
    """Mean / min / max of the weights over valid rows and the effective sample size (sum w)^2 / sum w^2.

    All are 0 when no row is valid (never inf / NaN)."""
    valid = valid.astype(bool)
    any_valid = jnp.any(valid)
    count = jnp.maximum(jnp.sum(valid.astype(jnp.float32)), 1.0)
    total = jnp.sum(jnp.where(valid, weights, 0.0))
    return {
        "weight_mean": total / count,
        "weight_min": jnp.where(any_valid, jnp.min(jnp.where(valid, weights, jnp.inf)), 0.0),
        "weight_max": jnp.where(any_valid, jnp.max(jnp.where(valid, weights, -jnp.inf)), 0.0),
        "weight_ess": jnp.square(total) / jnp.maximum(jnp.sum(jnp.square(jnp.where(valid, weights, 0.0))),
                                                     jnp.finfo(jnp.float32).tiny),
    }


def rwr_loss(logprobs: jax.Array, weights: jax.Array, loss_mask: jax.Array, config: RWRConfig,
             ref_logprobs: jax.Array | None = None, norm: jax.Array | None = None,
             num_tokens: jax.Array | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """aggregate(w_row * -log p) + kl_coef * aggregate(KL to initial), over the loss mask.

    logprobs / ref_logprobs / loss_mask: [B, T]; weights [B] (`rwr_weights`). `norm` and
    `num_tokens` are whole-batch normalisers (defaults: from `loss_mask`). Metrics: loss,
    weighted_nll, nll (unweighted, token mean), kl (token mean), tokens.
    """
    mask = loss_mask.astype(jnp.float32)
    mode = config.aggregation
    norm = normalizer(mask, mode) if norm is None else norm
    num_tokens = token_count(mask) if num_tokens is None else num_tokens
    nll = -logprobs  # [B, T]
    weighted_nll = aggregate(weights[:, None] * nll, mask, mode, norm)
    loss = weighted_nll
    metrics = {"weighted_nll": weighted_nll, "tokens": token_count(mask),
               "nll": jnp.sum(nll * mask) / jnp.maximum(num_tokens, 1.0)}
    if config.needs_reference:
        if ref_logprobs is None:
            raise ValueError("RWR with kl_coef > 0 or kl_threshold needs ref_logprobs")
        per_token_kl = kl_penalty(logprobs, ref_logprobs, config.kl_estimator, config.kl_clamp)
        if config.kl_coef > 0:
            loss = loss + config.kl_coef * aggregate(per_token_kl, mask, mode, norm)
        # Reported (and thresholded) as a token mean whatever the aggregation mode.
        metrics["kl"] = jnp.sum(per_token_kl * mask) / jnp.maximum(num_tokens, 1.0)
    metrics["loss"] = loss
    return loss, metrics


def _threshold_gate(threshold: float, mode: str):
    """gate(metrics) -> (apply?, scale) for the KL threshold; records whether it fired."""
    def gate(metrics):
        fired = metrics["kl"] > threshold
        if mode == "skip":
            applied, scale = jnp.logical_not(fired), jnp.float32(1.0)
        else:
            applied = jnp.bool_(True)
            scale = jnp.where(fired, threshold / jnp.maximum(metrics["kl"], threshold), 1.0)
        metrics["kl_threshold_fired"] = fired.astype(jnp.float32)
        metrics["update_scale"] = jnp.where(applied, scale, 0.0).astype(jnp.float32)
        return applied, scale
    return gate


@register_policy_loss("rwr", config=RWRConfig, grouped=False)
def make_rwr_step(cfg: ModelConfig, optimizer: optax.GradientTransformation, config: RWRConfig | None = None,
                  mesh: Mesh | None = None, micro_batches: int = 1, rules: Any = None,
                  donate: bool = True, partition: Partition | None = None) -> TrainStep:
    """The jitted RWR `step(trainable, opt_state, batch, frozen) -> (trainable, opt_state, metrics)`
    of `partition` (default: full fine-tuning, where `frozen` may be left out; see `rl.step`).

    Weights are normalised over the whole batch before it is split into micro-batches. Metrics:
    loss, weighted_nll, nll, kl, tokens, grad_norm, learning_rate, weight_mean/min/max/ess,
    kl_threshold_fired (1.0 / 0.0) and update_scale (0 when skipped).
    """
    config = RWRConfig() if config is None else config
    required = ("tokens", "loss_mask", "rewards")
    if config.needs_reference:
        required += ("ref_logprobs",)

    def prepare(batch):
        mask = batch["loss_mask"]
        valid = jnp.sum(mask, axis=-1) > 0
        weights = rwr_weights(batch.pop("rewards"), config.reward_lambda, config.weight_norm, valid)
        batch["weights"] = weights
        norms = {"norm": normalizer(mask, config.aggregation), "tokens": token_count(mask)}
        direct = weight_stats(weights, valid)
        if config.kl_threshold is None:
            direct.update(kl_threshold_fired=jnp.float32(0.0), update_scale=jnp.float32(1.0))
        return batch, norms, direct

    def loss_fn(params, micro_batch, norms, dropout):
        logprobs, _ = token_logprobs(cfg, params, micro_batch["tokens"], micro_batch.get("attention_mask"),
                                     micro_batch.get("positions"), chunk_size=config.chunk_size,
                                     temperature=config.temperature, needed=micro_batch["loss_mask"],
                                     dropout=dropout)
        return rwr_loss(logprobs, micro_batch["weights"], micro_batch["loss_mask"], config,
                        ref_logprobs=micro_batch.get("ref_logprobs"), norm=norms["norm"],
                        num_tokens=norms["tokens"])

    gate = None if config.kl_threshold is None else _threshold_gate(config.kl_threshold, config.kl_threshold_mode)
    return build_train_step(cfg, optimizer, loss_fn, prepare, required, gate=gate, mesh=mesh,
                            micro_batches=micro_batches, rules=rules, donate=donate, rule="RWR", partition=partition)


def make_sft_step(cfg: ModelConfig, learning_rate: float, chunk_size: int = 512, mesh: Mesh | None = None,
                  micro_batches: int = 1, partition: Partition | None = None) -> TrainStep:
    """Supervised fine-tuning (the warm-starts, the experience model): RWR with unit weights
    (reward_lambda 0, no normalisation) and no KL, under AdamW without weight decay and with the
    gradient clipped at 1. The one SFT recipe of the package (of `partition`'s trainable part)."""
    optimizer = make_optimizer(OptimizerConfig(learning_rate=learning_rate, weight_decay=0.0, grad_clip=1.0))
    loss = RWRConfig(reward_lambda=0.0, weight_norm="none", kl_coef=0.0, chunk_size=chunk_size)
    return make_rwr_step(cfg, optimizer, loss, mesh=mesh, micro_batches=micro_batches, partition=partition)

"""The experience model's config section (`config.experience`, mode=dreamgym), declared once: only
the keys it reads. The experience model is trained fully, by SFT on real transitions
(`rl.make_sft_step`, which takes a learning rate and an LM-head chunk), and samples like a policy;
so its section holds its weights' keys, its sampling, and three SFT keys.

Until 2026-12 it copied a whole policy section, whose optimizer, loss, batching and LoRA keys were
read by nothing; `REMOVED_EXPERIENCE_KEYS` records them, so that runs saved with them resume
(`loop.persistence`, `loop.experience`) and a config that still sets one is refused saying why.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from genenv_jax.configs.settings import POLICY_RULES, ModelSettings, PolicySettings, SamplingSettings, TrainSettings
from genenv_jax.core.config_checks import ConfigError, positive, section, setting
from genenv_jax.models.lora import LoRAConfig
from genenv_jax.rl import OptimizerConfig, RWRConfig


@dataclasses.dataclass(frozen=True)
class ExperienceOptimizerSettings:
    """`experience.optimizer`: the SFT's optimizer is fixed but for its learning rate."""

    learning_rate: float = setting(1e-5, "the SFT's learning rate (AdamW without weight decay, gradients clipped "
                                         "at 1: rl.make_sft_step)", check=positive)


@dataclasses.dataclass(frozen=True)
class ExperienceLossSettings:
    """`experience.train.loss`: the SFT's loss (unit-weight NLL) has one setting, its LM-head chunk."""

    chunk_size: int = setting(512, "sequence chunk of the LM head in the SFT step", minimum=1)


@dataclasses.dataclass(frozen=True)
class ExperienceTrainSettings:
    """`experience.train`: how an SFT step is split (its batch is `dreamgym.sft_batch_size`)."""

    micro_batches: int = setting(1, "gradient accumulation within an SFT step", minimum=1)
    loss: ExperienceLossSettings = setting(factory=ExperienceLossSettings)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExperienceSettings(ModelSettings):
    """The experience model's section (`config.experience`): its weights, its sampling, and the few
    keys of its SFT (the number of steps and the batch are `dreamgym.sft_steps` / `sft_batch_size`).
    It trains fully, never by LoRA, and has no update rule of its own, so it has no loss or
    optimizer keys beyond these. The loop builds it as a policy (`policy()`)."""

    sampling: SamplingSettings = setting(factory=SamplingSettings)
    optimizer: ExperienceOptimizerSettings = setting(factory=ExperienceOptimizerSettings)
    train: ExperienceTrainSettings = setting(factory=ExperienceTrainSettings)

    def policy(self) -> PolicySettings:
        """These settings as the PolicySettings the loop builds a policy from (its optimizer, loss
        and adapters at their defaults: its SFT step reads none of them)."""
        model = {f.name: getattr(self, f.name) for f in dataclasses.fields(ModelSettings)}
        loss = RWRConfig(chunk_size=self.train.loss.chunk_size, temperature=self.sampling.temperature)
        return PolicySettings(name="experience", rule=POLICY_RULES["experience"], sampling=self.sampling,
                              optimizer=OptimizerConfig(learning_rate=self.optimizer.learning_rate),
                              train=TrainSettings(micro_batches=self.train.micro_batches, loss=loss),
                              lora=LoRAConfig(), **model)


# The keys the experience section had until 2026-12, when it copied a whole policy section: read by
# nothing (its SFT takes only the learning rate and the chunk size; LoRA was refused). Each with the
# value every preset gave it. A run saved with them resumes: `loop.persistence` ignores them, and
# `loop.experience` fills them in when it digests the section, so the cached experience weights of
# such a run are found again.
REMOVED_EXPERIENCE_KEYS: Mapping[str, Any] = {
    **{f"optimizer.{key}": value for key, value in (
        ("schedule", "constant"), ("warmup_steps", 0), ("total_steps", None), ("end_lr_factor", 0.0),
        ("weight_decay", 0.01), ("b1", 0.9), ("b2", 0.999), ("eps", 1e-8), ("grad_clip", 1.0),
        ("decay_norms_and_biases", True))},
    **{f"train.loss.{key}": value for key, value in (
        ("reward_lambda", 1.0), ("weight_norm", "mean"), ("aggregation", "token_mean"), ("kl_coef", 0.1),
        ("kl_estimator", "k3"), ("kl_clamp", 10.0), ("kl_threshold", None), ("kl_threshold_mode", "skip"))},
    "train.tasks_per_step": 16, "train.passes": 1, "train.pad_per_step": False, "train.tasks_per_epoch": 0,
    "lora.rank": 0, "lora.alpha": 16.0, "lora.targets": ("q", "k", "v", "o", "gate", "up", "down"), "lora.dropout": 0.0,
}


def removed_keys(tree: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys of an experience section that it no longer has (`REMOVED_EXPERIENCE_KEYS`)."""
    found = []
    for key, value in tree.items():
        if isinstance(value, Mapping):
            found += removed_keys(value, f"{prefix}{key}.")
        elif f"{prefix}{key}" in REMOVED_EXPERIENCE_KEYS:
            found.append(f"{prefix}{key}")
    return found


def without_removed_keys(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """An experience section without the keys it no longer has (`REMOVED_EXPERIENCE_KEYS`), as a run
    saved before they went holds them; a sub-section left empty (`lora`) goes too."""
    out = {}
    for key, value in tree.items():
        dotted = prefix + key
        if dotted in REMOVED_EXPERIENCE_KEYS:
            continue
        if isinstance(value, Mapping):
            value = without_removed_keys(value, dotted + ".")
            if not value and any(k.startswith(dotted + ".") for k in REMOVED_EXPERIENCE_KEYS):
                continue
        out[key] = value
    return out


def experience_section(tree: Mapping[str, Any]) -> ExperienceSettings:
    """The experience section of a config tree, checked (`core.config_checks.section`); a key it no
    longer has is refused saying why."""
    removed = removed_keys(tree)
    if removed:
        raise ConfigError(f"config.experience.{removed[0]}: the experience model has no such key since 2026-12 (read "
                          "by nothing: it trains fully, by SFT, reading only optimizer.learning_rate and "
                          "train.loss.chunk_size); drop it")
    return section(ExperienceSettings, tree, "experience")

"""The run config's sections, declared once: each key's default, one-line doc and allowed values
(`core.config_checks.setting`). `run_config.RunConfig` assembles them and checks what involves
several keys; `configs/base.py` builds the default ConfigDict from these declarations.

A policy's defaults that differ between the agent, the simulator and the experience model are in
`POLICY_DEFAULTS`; its update rule's loss section comes from `rl.GRPOConfig` / `rl.RWRConfig`, its
optimizer from `rl.OptimizerConfig`. The experience model has its own small section
(`experience_settings.ExperienceSettings`): only the keys it reads. docs/config.md lists every key
(`python -m genenv_jax.tools.config_docs`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from genenv_jax.core.config_checks import KeyProblem, positive, setting
from genenv_jax.domains.base import SPLITS
from genenv_jax.episodes.limits import EnvLimits
from genenv_jax.models import ModelConfig, preset
from genenv_jax.models.config import ATTENTION_KERNELS, REMAT_POLICIES
from genenv_jax.models.lora import LoRAConfig
from genenv_jax.models.partition import Partition
from genenv_jax.models.loading import model_config as source_model_config
from genenv_jax.rl import POLICY_LOSSES, GRPOConfig, OptimizerConfig, RWRConfig
from genenv_jax.workdir.trackers import DEFAULT_TRACKERS, trackers_problem

DTYPES = ("float32", "bfloat16", "float16")
SEED_ORDERS = ("file", "shortest", "interleaved")
SEED_STRATEGIES = ("variance", "uniform")
SIMULATOR_TARGETS = ("next", "shortest")
DYNAMIC_SAMPLING_FILTERS = ("reward", "advantage")


def _registered_loss(value: str) -> str | None:
    """a registered policy loss (`rl.registry`; rwr, grpo built in)"""
    # read when checked, so a loss registered after this module was imported is accepted too
    return None if value in POLICY_LOSSES else f"expected one of {', '.join(POLICY_LOSSES.names())}"


def _positive_open(value: float) -> str | None:
    """> 0"""
    return None if value > 0 else "must be > 0 (training samples; the loss uses it too)"


def _top_p(value: float) -> str | None:
    """in (0, 1]"""
    return None if 0 < value <= 1 else "must lie in (0, 1]"


def _prefix_tokens(value: int) -> str | None:
    """>= 0, a multiple of 16"""
    return None if value >= 0 and value % 16 == 0 else "must be >= 0 and a multiple of 16"


def _evaluation_split(value: str) -> str | None:
    """'' or a seed split"""
    return None if not value or value in SPLITS else f"must be '' (off) or one of {', '.join(SPLITS)}"


# ----------------------------------------------------------------------------------------------
# A policy (agent, simulator, experience model)
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SamplingSettings:
    """How a policy samples; `temperature` is also the temperature of its loss's logprobs."""

    temperature: float = setting(1.0, "sampling temperature (also the loss's)", check=_positive_open)
    top_k: int = setting(0, "0: off", minimum=0)
    top_p: float = setting(1.0, "1.0: off", check=_top_p)
    max_new_tokens: int = setting(512, "tokens per reply (per agent turn)", minimum=1)
    max_prompt_len: int = setting(4096, "longer prompts are skipped and counted", minimum=1)
    batch_size: int = setting(64, "decode slots: every prompt of a call is queued and finished slots are refilled",
                              minimum=1)
    prefix_cache_tokens: int = setting(65536, "tokens of keys/values the sampler keeps to skip prefills of shared "
                                              "prompt prefixes and of earlier turns (0: off; docs/sampling.md)",
                                       check=_prefix_tokens)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainSettings:
    """A policy's update: its batching and its loss (GRPO for the agent, RWR otherwise)."""

    tasks_per_step: int = setting(16, "tasks per optimizer step (agent: x rollouts_per_task rows)", minimum=1)
    micro_batches: int = setting(1, "gradient accumulation within a step", minimum=1)
    passes: int = setting(1, "passes over the epoch's data (the agent's PPO epochs)", minimum=1)
    tasks_per_epoch: int = setting(0, "0: the update uses every task of the epoch it may train on; > 0: at most "
                                      "this many, a seeded draw (equal update data whatever the simulator wrote; "
                                      "the agent's draw takes the groups whose rewards differ first)",
                                   minimum=0)
    pad_per_step: bool = setting(False, "pad each step's prompts and responses to their own length buckets "
                                        "instead of the epoch's longest (fewer padded tokens, one compiled step "
                                        "per pair of buckets)")
    loss: GRPOConfig | RWRConfig = setting(in_tree=False)  # the rule's loss, read by run_config


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """A model's weights and layout: the keys every LLM section has (agent, simulator, experience)."""

    model_dir: str = setting("", "a .gguf file, an HF checkpoint dir, a model name or a hub id; '' -> random init "
                                 "of `preset`")
    preset: str = setting("qwen2.5-7b", "models.preset name (random init, or the layout when model_dir is '')")
    allow_random_init: bool = setting(False, "random weights for a preset over 100M params must be asked for")
    param_dtype: str = setting("bfloat16", "sampling copy; training keeps float32 master params", choices=DTYPES)
    dtype: str = setting("bfloat16", "compute dtype", choices=DTYPES)
    remat_policy: str = setting("dots_with_no_batch_dims_saveable", "activation checkpointing", choices=REMAT_POLICIES)
    scan_layers: bool = setting(True, "scan over layers (one compiled layer)")
    attention: str = setting("auto", "auto (splash on TPU, cuDNN on GPU, else blockwise) | einsum | blockwise | ...",
                             choices=ATTENTION_KERNELS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PolicySettings(ModelSettings):
    """One trained LLM: weights, sampling, optimizer, update rule ('grpo' agent, 'rwr' simulator)."""

    name: str = setting(in_tree=False)
    rule: str = setting(in_tree=False)
    sampling: SamplingSettings = setting(factory=SamplingSettings)
    optimizer: OptimizerConfig = setting(factory=OptimizerConfig)
    train: TrainSettings = setting(factory=TrainSettings)
    lora: LoRAConfig = setting(factory=LoRAConfig)

    def model_config(self) -> ModelConfig:
        """The training config: the configured compute dtype and layout, and float32 master params
        under full fine-tuning; with LoRA (`lora.rank` > 0) the frozen base stays in `param_dtype`
        (it is never updated, so nothing rounds away) and the deltas take `lora.scale`."""
        lora = self.lora.enabled
        layout = dict(param_dtype=self.param_dtype if lora else "float32", dtype=self.dtype,
                      remat_policy=self.remat_policy, scan_layers=self.scan_layers, attention=self.attention,
                      lora_scale=self.lora.scale)
        if self.model_dir:
            return source_model_config(self.model_dir, **layout)
        return preset(self.preset, **layout)

    def partition(self, cfg: ModelConfig | None = None) -> Partition:
        """What this policy trains (`models.partition`): everything, or with LoRA (`lora.rank` > 0)
        adapters over a frozen base; of `cfg`, `model_config()` by default."""
        return self.lora.partition(self.model_config() if cfg is None else cfg)


# How the policies' defaults differ (everything else: the declarations above). The agent (GRPO,
# batch 64 tasks, PPO mini-batch 16, lr 1e-6) and the simulator (RWR on in-band generated tasks, KL
# to its initial weights) follow the paper; the experience model (mode=dreamgym, `experience_settings`)
# is trained by SFT on real transitions only, and its "" model source means the agent's.
POLICY_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "agent": {"sampling.max_new_tokens": 512, "optimizer.learning_rate": 1e-6, "train.tasks_per_step": 16},
    "simulator": {"sampling.max_new_tokens": 1024, "optimizer.learning_rate": 5e-7, "train.tasks_per_step": 64},
    "experience": {"preset": "", "sampling.temperature": 0.3, "sampling.max_new_tokens": 256,
                   "sampling.max_prompt_len": 2048},
}
POLICY_RULES = {"agent": "grpo", "simulator": "rwr", "experience": "rwr"}


def loss_class(rule: str) -> type:
    """The loss section's dataclass of update rule `rule` (a registered policy loss)."""
    return POLICY_LOSSES.get(rule).config


# ----------------------------------------------------------------------------------------------
# The loop's sections
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class DomainSettings:
    """The benchmark and which of its seeds the loop uses."""

    name: str = setting("", "a registered domain (genenv_jax.domains.DOMAINS)")
    options: Mapping[str, Any] = setting(factory=dict, doc="keyword args of the domain's constructor")
    seed_split: str = setting("train", "the seeds' split")
    max_seeds: int = setting(0, "0: every seed of the split", minimum=0)
    seed_order: str = setting("file", "file | shortest (shortest prompt + answer first; for tiny CPU runs) | "
                                      "interleaved (categories in turn, each in a fixed order by a hash of the task "
                                      "id: any first N seeds cover every category)", choices=SEED_ORDERS)


@dataclasses.dataclass(frozen=True)
class SeedSelectionSettings:
    strategy: str = setting("variance", "variance (DreamGym: rollout-reward variance) | uniform",
                            choices=SEED_STRATEGIES)
    explore_fraction: float = setting(0.25, "share of seeds drawn uniformly even under `variance`", fraction=True)


@dataclasses.dataclass(frozen=True)
class ReplaySettings:
    tasks_per_epoch: int = setting(0, "tasks replayed from D_train / base seeds each epoch", minimum=0)
    base_ratio: float = setting(0.5, "share drawn from the base seeds", minimum=0)
    historical_ratio: float = setting(0.5, "share drawn from earlier epochs' tasks", minimum=0)


@dataclasses.dataclass(frozen=True)
class DynamicSamplingSettings:
    """DAPO's dynamic sampling for the agent's GRPO update (`loop.dynamic_sampling`): groups that
    carry no signal are left out of the update and replaced by groups of further tasks, drawn from
    the base seeds and D_train (the `replay` ratios) and rolled out afresh, in at most `max_rounds`
    refill rounds; every extra rollout is counted (`dynamic_sampling/extra_rollouts`)."""

    enabled: bool = setting(False, "drop uninformative groups from GRPO and refill them")
    filter: str = setting("reward", "reward (DAPO: a group's rewards are all equal) | advantage (every "
                          "advantage it would train on is 0: GiGPO step credit and overlong shaping count)",
                          choices=DYNAMIC_SAMPLING_FILTERS)
    max_rounds: int = setting(3, "refill rounds at most (each rolls out as many tasks as groups are missing)",
                              minimum=0)


@dataclasses.dataclass(frozen=True)
class WarmstartSettings:
    """Optional supervised warm-start on seed data (needed for tiny random models to emit parseable text)."""

    enabled: bool = setting(False, "SFT both policies on seed data before the first epoch")
    agent_steps: int = setting(0, "the agent's SFT steps (0: the agent starts as it is)", minimum=0)
    simulator_steps: int = setting(0, "the simulator's SFT steps (0: the simulator starts as it is)", minimum=0)
    batch_size: int = setting(8, "SFT rows per step", minimum=1)
    learning_rate: float = setting(1e-3, "SFT learning rate", check=positive)
    num_seeds: int = setting(0, "0: every training seed", minimum=0)
    simulator_target: str = setting("next", "next | shortest: which sibling task each seed's SFT target shows",
                                    choices=SIMULATOR_TARGETS)
    spell_added_tokens: bool = setting(False, "SFT targets write added tokens (Qwen's <tool_call>) with the ordinary "
                                              "tokens that spell them: the same text, for models whose added-token "
                                              "output rows are untrained (docs/coevolve.md)")
    cache_dir: str = setting("", "'' off; else warm-started weights are kept there and reused by every run with "
                                 "the same models, warm-start settings, data and seed")


@dataclasses.dataclass(frozen=True)
class EvaluationSettings:
    """Held-out accuracy of the agent after the warm-start and every epoch (greedy, one episode per task)."""

    split: str = setting("", "'' -> off; else a seed split the agent never trains on", check=_evaluation_split)
    max_per_category: int = setting(0, "0 -> every task of the split", minimum=0)
    sample_seed: int = setting(-1, "-1: the first max_per_category tasks of each category; else a seeded sample "
                                   "of them (the evaluation command's --sample_seed: the same tasks)", minimum=-1)
    every_epochs: int = setting(1, "score after every this many epochs (and after the last one)", minimum=1)


@dataclasses.dataclass(frozen=True)
class SimulatorObjectiveSettings:
    """How the simulator learns from R_env (`config.simulator.train.objective` and its neighbours):
    RWR, the paper's, or GRPO over the generations of one prompt (`loop.simulator_update`)."""

    objective: str = setting("rwr", "rwr: reward-weighted regression on the in-band tasks, weights "
                                    "exp(lambda R_env) (the paper) | grpo: the variants_per_seed generations of a "
                                    "prompt form a group, each rewarded with its task's R_env, group-relative "
                                    "advantages, the GRPO step of simulator.train.grpo, a section of its own (its "
                                    "chunk_size too: train.loss.chunk_size does not reach it; any registered policy "
                                    "loss: rl.registry)", check=_registered_loss)
    invalid_reward: float = setting(0.0, "grpo: the reward of a generation that is rejected or not rolled out")


@dataclasses.dataclass(frozen=True)
class EpisodeSettings:
    """Caps of one agent episode (the per-turn cap is the agent's sampling.max_new_tokens) and the
    environment worker processes (0: environments step in the loop's process)."""

    max_turns: int = setting(8, "agent turns per episode", minimum=1)
    max_total_tokens: int = setting(9000, "first prompt + all turns and observations (the paper's 9,000)")
    env_workers: int = setting(0, "environment worker processes (0: step in the loop's process)", minimum=0)
    # Limits on every environment request (episodes/limits.py; defaults and why: docs/reliability.md).
    step_timeout_s: float = setting(60.0, "wall-clock limit of a reset or step, seconds (0: none)", minimum=0)
    score_timeout_s: float = setting(300.0, "wall-clock limit of a score or replay, seconds (0: none)", minimum=0)
    max_observation_chars: int = setting(65536, "observation messages are cut to this many characters (0: no cut)",
                                         minimum=0)
    env_memory_mb: int = setting(8192, "address-space cap of an environment worker, MB (0: none)", minimum=0)

    def limits(self) -> EnvLimits:
        """The environment hosts' EnvLimits."""
        return EnvLimits(self.step_timeout_s, self.score_timeout_s, self.max_observation_chars, self.env_memory_mb)


@dataclasses.dataclass(frozen=True)
class CheckpointSettings:
    keep: int = setting(3, "checkpoints kept", minimum=1)
    every_epochs: int = setting(1, "a checkpoint every this many epochs", minimum=1)


@dataclasses.dataclass(frozen=True)
class LogSettings:
    """What a run writes beside its checkpoints; `trackers`: where each epoch's metrics row goes
    (docs/trackers.md). A tracker whose package is missing is refused here, before any work."""

    samples_per_epoch: int = setting(16, "sampled episodes written per epoch", minimum=0)
    progress_bars: bool = setting(True, "tqdm bars on a terminal")
    trackers: tuple[str, ...] = setting(DEFAULT_TRACKERS, "jsonl (metrics.jsonl, the record: required) | "
                                        "tensorboard | wandb (offline, <workdir>/wandb) | mlflow "
                                        "(log.mlflow_tracking_uri); e.g. jsonl,tensorboard,wandb,mlflow")
    wandb_project: str = setting("genenv_jax", "the W&B project of the offline run (where `wandb sync` uploads it)")
    mlflow_tracking_uri: str = setting("", "'' -> sqlite:///<workdir>/mlflow.db; else an MLflow tracking URI (a "
                                           "shared sqlite file, a tracking server)")
    mlflow_experiment: str = setting("genenv_jax", "the MLflow experiment the run is logged under")

    def __post_init__(self):
        problem = trackers_problem(self.trackers, self.mlflow_tracking_uri)
        if problem:
            raise KeyProblem(self, "trackers", problem)

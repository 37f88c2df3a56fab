"""The one config tree shared by every benchmark; benchmark files override parts of it.

Sections map onto the dataclasses that validate them: `grpo` -> rl.GRPOConfig, `rwr` ->
rl.RWRConfig, `*_optimizer` -> rl.OptimizerConfig, `curriculum` -> curriculum.CurriculumConfig.
Defaults are the GenEnv paper's and its reference code's hyperparameters (PAPERS.md).
"""

from ml_collections import config_dict
from ml_collections.config_dict import ConfigDict, placeholder


def model_config(preset: str = "qwen2.5-7b", model_dir: str = "") -> ConfigDict:
    """Where a policy's weights come from: an HF model dir, or a preset with random weights."""
    return ConfigDict({
        "model_dir": model_dir,  # HF checkpoint (config.json + safetensors); "" -> random init of `preset`
        "preset": preset,
        "param_dtype": "bfloat16",
        "dtype": "bfloat16",
        "remat_policy": "dots_with_no_batch_dims_saveable",
        "scan_layers": True,
    })


def sampling_config(temperature: float, max_new_tokens: int, max_prompt_len: int) -> ConfigDict:
    return ConfigDict({
        "temperature": temperature,
        "top_k": 0,          # 0: off
        "top_p": 1.0,        # 1.0: off
        "max_new_tokens": max_new_tokens,
        "max_prompt_len": max_prompt_len,  # longer prompts are skipped and counted
        "batch_size": 64,    # rows per sampler call (the sampler buckets lengths)
    })


def optimizer_config(learning_rate: float) -> ConfigDict:
    return ConfigDict({
        "learning_rate": learning_rate, "schedule": "constant", "warmup_steps": 0,
        "total_steps": placeholder(int), "end_lr_factor": 0.0, "weight_decay": 0.01,
        "b1": 0.9, "b2": 0.999, "eps": 1e-8, "grad_clip": 1.0, "decay_norms_and_biases": True,
    })


def get_config() -> ConfigDict:
    c = ConfigDict()
    c.seed = 0
    c.mode = "genenv"          # genenv | random (simulator never updated) | static (variants generated once)
    c.epochs = 10
    c.mesh = ConfigDict({"data": 1, "fsdp": -1, "tensor": 1})

    c.agent = model_config()
    c.simulator = model_config()
    c.simulator.share_agent_init = True   # start from the agent's initial weights (the paper's setup)
    c.tokenizer_dir = ""                  # "" -> the agent's model_dir, else the bundled Qwen2.5 tokenizer

    c.domain = ConfigDict({
        "name": "",              # a registered domain (genenv_jax.domains.DOMAINS)
        "options": ConfigDict(),  # keyword args of the domain's constructor
        "seed_split": "train",
        "max_seeds": 0,           # 0: every seed of the split
        "seed_order": "file",     # file | shortest (shortest prompt + answer first; for tiny CPU runs)
    })

    # Per epoch: seeds -> variants -> n agent rollouts per variant.
    c.curriculum = ConfigDict({
        "alpha": 0.5, "beta": 2.0, "k_min": 0.1,
        "granularity": "variant",           # variant | seed_batch
        "success_threshold": placeholder(float),
    })
    c.seeds_per_epoch = 64
    c.variants_per_seed = 1
    c.seed_selection = ConfigDict({
        "strategy": "variance",             # variance (DreamGym-style, after epoch 0) | uniform
        "explore_fraction": 0.25,           # share of seeds drawn uniformly even under `variance`
    })
    c.static_variants_per_seed = 6          # mode=static: variants generated once, up front (paper: 6x)

    c.simulator_sampling = sampling_config(temperature=1.0, max_new_tokens=1024, max_prompt_len=4096)
    c.agent_sampling = sampling_config(temperature=1.0, max_new_tokens=512, max_prompt_len=4096)
    c.rollouts_per_task = 8

    # Agent: GRPO on this epoch's rollouts plus replayed tasks from D_train (rolled out afresh).
    c.grpo = ConfigDict({
        "clip_low": 0.2, "clip_high": 0.2, "kl_coef": 1e-3, "kl_estimator": "k3", "kl_clamp": 10.0,
        "entropy_coef": 1e-3, "aggregation": "token_mean", "temperature": 1.0, "chunk_size": 512,
        "adv_eps": 1e-6, "std_ddof": 1, "normalize_by_std": True,
    })
    c.grpo_tasks_per_step = 16              # PPO mini-batch (tasks; x rollouts_per_task sequences)
    c.grpo_epochs = 1
    c.grpo_micro_batches = 1                # gradient accumulation within a step
    c.agent_optimizer = optimizer_config(1e-6)
    c.replay = ConfigDict({
        "tasks_per_epoch": 0,               # tasks replayed from D_train / base seeds each epoch
        "base_ratio": 0.5, "historical_ratio": 0.5,
    })

    # Simulator: reward-weighted regression on in-band generated tasks, KL to its initial weights.
    c.rwr = ConfigDict({
        "reward_lambda": 1.0, "weight_norm": "mean", "aggregation": "token_mean", "kl_coef": 0.1,
        "kl_estimator": "k3", "kl_clamp": 10.0, "kl_threshold": placeholder(float),
        "kl_threshold_mode": "skip", "temperature": 1.0, "chunk_size": 512,
    })
    c.rwr_tasks_per_step = 64
    c.rwr_micro_batches = 1
    c.simulator_optimizer = optimizer_config(5e-7)

    # Optional supervised warm-start on seed data (needed for tiny random models to emit parseable text).
    c.warmstart = ConfigDict({
        "enabled": False, "agent_steps": 0, "simulator_steps": 0, "batch_size": 8, "learning_rate": 1e-3,
        "num_seeds": 0,                 # 0: every training seed
        "simulator_target": "next",   # next | shortest: which sibling task each seed's SFT target shows
    })

    c.checkpoint = ConfigDict({"keep": 3, "every_epochs": 1})
    c.log = ConfigDict({"samples_per_epoch": 16, "progress_bars": True})
    return c


def lock(c: ConfigDict) -> ConfigDict:
    c.lock()  # unknown keys in overrides become errors
    return c


__all__ = ["get_config", "model_config", "sampling_config", "optimizer_config", "lock", "config_dict"]

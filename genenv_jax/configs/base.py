"""The one config tree shared by every benchmark; benchmark configs override parts of it.

`genenv_jax.run_config.RunConfig.from_config_dict` validates this tree once, at the edge, and turns it
into frozen dataclasses; nothing inside the loop reads the ConfigDict. Defaults are the GenEnv
paper's and its reference code's hyperparameters (docs/coevolve.md lists them with their source).
"""

from typing import Callable

from ml_collections import ConfigDict
from ml_collections.config_dict import placeholder


def sampling_config(temperature: float, max_new_tokens: int, max_prompt_len: int) -> ConfigDict:
    """How a policy samples; `temperature` is also the temperature of its loss's logprobs."""
    return ConfigDict({
        "temperature": temperature,
        "top_k": 0,          # 0: off
        "top_p": 1.0,        # 1.0: off
        "max_new_tokens": max_new_tokens,
        "max_prompt_len": max_prompt_len,  # longer prompts are skipped and counted
        "batch_size": 64,    # decode slots: every prompt of a call is queued and finished slots are refilled
    })


def optimizer_config(learning_rate: float) -> ConfigDict:
    return ConfigDict({
        "learning_rate": learning_rate, "schedule": "constant", "warmup_steps": 0,
        "total_steps": placeholder(int), "end_lr_factor": 0.0, "weight_decay": 0.01,
        "b1": 0.9, "b2": 0.999, "eps": 1e-8, "grad_clip": 1.0, "decay_norms_and_biases": True,
    })


def policy_config(*, temperature: float, max_new_tokens: int, max_prompt_len: int, learning_rate: float,
                  tasks_per_step: int, loss: ConfigDict) -> ConfigDict:
    """One trained LLM: where its weights come from, how it samples, its optimizer and update."""
    return ConfigDict({
        "model_dir": "",     # HF checkpoint (config.json + safetensors); "" -> random init of `preset`
        "preset": "qwen2.5-7b",
        "allow_random_init": False,  # random weights for a preset over 100M params must be asked for
        "param_dtype": "bfloat16",   # sampling copy; training keeps float32 master params
        "dtype": "bfloat16",         # compute dtype
        "remat_policy": "dots_with_no_batch_dims_saveable",
        "scan_layers": True,
        "attention": "auto",         # auto (splash on TPU, cuDNN on GPU, else blockwise) | einsum | blockwise | ...
        "sampling": sampling_config(temperature, max_new_tokens, max_prompt_len),
        "optimizer": optimizer_config(learning_rate),
        "train": ConfigDict({
            "tasks_per_step": tasks_per_step,  # tasks per optimizer step (agent: x rollouts_per_task rows)
            "micro_batches": 1,                # gradient accumulation within a step
            "passes": 1,                       # passes over the epoch's data (the agent's PPO epochs)
            "loss": loss,
        }),
    })


def grpo_loss() -> ConfigDict:
    """rl.GRPOConfig without temperature (the agent's sampling temperature is used)."""
    return ConfigDict({
        "clip_low": 0.2, "clip_high": 0.2, "kl_coef": 1e-3, "kl_estimator": "k3", "kl_clamp": 10.0,
        "entropy_coef": 1e-3, "aggregation": "token_mean", "chunk_size": 512,
        "adv_eps": 1e-6, "std_ddof": 1, "normalize_by_std": True,
    })


def rwr_loss() -> ConfigDict:
    """rl.RWRConfig without temperature (the simulator's sampling temperature is used)."""
    return ConfigDict({
        "reward_lambda": 1.0, "weight_norm": "mean", "aggregation": "token_mean", "kl_coef": 0.1,
        "kl_estimator": "k3", "kl_clamp": 10.0, "kl_threshold": placeholder(float),
        "kl_threshold_mode": "skip", "chunk_size": 512,
    })


def dreamgym_config() -> ConfigDict:
    """mode=dreamgym: synthetic rollouts through the experience model, the replay buffer it retrieves
    from, the variance curriculum's generated-task cap and the sim-to-real schedule (docs/dreamgym.md)."""
    return ConfigDict({
        "synthetic_epochs": -1,         # the first N epochs roll out on the experience model, the rest on
                                        # the real environment (sim-to-real); -1: every epoch; 0: real only
        "task_generation": True,        # the simulator writes variants of the highest-variance seeds
        "generated_task_share": 0.5,    # cap: at most this share of an epoch's tasks are generated
        "top_k": 3,                     # real transitions retrieved into each prompt (0: no retrieval)
        "retrieve_real_only": True,     # retrieve offline / real transitions only (synthetic ones are kept)
        "reasoning": True,              # the experience model reasons before predicting the next state
        "max_history": 4,               # earlier (state, action) steps shown to the experience model
        "grow_replay": True,            # add each epoch's transitions to the buffer: a synthetic epoch's
                                        # predictions, a real epoch's agent episodes (replayed, real)
        "offline_random_per_task": 2,   # offline data per training seed: the expert episode and this many
        "offline_random_steps": 12,     # random episodes of at most this many agent replies; ALFWorld:
        "offline_invalid_prob": 0.15,   # this share of inadmissible commands; BFCL multi-turn: each
                                        # turn's ground-truth calls perturbed with this probability
        "sft_steps": 300,               # the experience model's SFT on the offline transitions
        "sft_batch_size": 8,
    })


def get_config() -> ConfigDict:
    c = ConfigDict()
    c.seed = 0
    c.init_seed = -1           # seed of the initial weights and the warm-start; -1: `seed` (runs that share
                               # it start from the same model and differ only in what the loop samples)
    c.mode = "genenv"          # genenv | random (simulator never updated) | static (variants generated once)
                               # | dreamgym (the agent learns on an experience model's synthetic episodes)
    c.epochs = 10
    c.mesh = ConfigDict({"data": 1, "fsdp": -1, "tensor": 1})
    c.allow_config_change = False  # resuming with changed settings that alter the run's meaning

    # Agent: GRPO on this epoch's rollouts (batch 64 tasks, PPO mini-batch 16, lr 1e-6).
    c.agent = policy_config(temperature=1.0, max_new_tokens=512, max_prompt_len=4096, learning_rate=1e-6,
                            tasks_per_step=16, loss=grpo_loss())
    # Simulator: reward-weighted regression on in-band generated tasks, KL to its initial weights.
    c.simulator = policy_config(temperature=1.0, max_new_tokens=1024, max_prompt_len=4096, learning_rate=5e-7,
                                tasks_per_step=64, loss=rwr_loss())
    c.simulator.share_agent_init = True   # start from the agent's initial weights (the paper's setup)
    c.tokenizer_dir = ""                  # "" -> the agent's model_dir, else the bundled Qwen2.5 tokenizer
    # mode=dreamgym only: the experience model (DreamGym) that answers the agent's actions in place of
    # the environment. Its model source ("" model_dir and preset) defaults to the agent's; it is
    # trained by SFT on real transitions (learning_rate, `dreamgym.sft_*`), never by RL.
    c.experience = policy_config(temperature=0.3, max_new_tokens=256, max_prompt_len=2048, learning_rate=1e-5,
                                 tasks_per_step=16, loss=rwr_loss())
    c.experience.preset = ""
    c.dreamgym = dreamgym_config()

    c.domain = ConfigDict({
        "name": "",              # a registered domain (genenv_jax.domains.DOMAINS)
        "options": ConfigDict(),  # keyword args of the domain's constructor
        "seed_split": "train",
        "max_seeds": 0,           # 0: every seed of the split
        "seed_order": "file",     # file | shortest (shortest prompt + answer first; for tiny CPU runs)
    })

    # Per epoch: seeds -> variants -> n agent rollouts per variant. alpha / k_min also steer the
    # difficulty the simulator is asked for.
    c.curriculum = ConfigDict({
        "alpha": 0.5, "beta": 2.0, "k_min": 0.1,
        "granularity": "variant",           # variant | seed_batch
        "success_threshold": placeholder(float),
    })
    c.seeds_per_epoch = 64
    c.variants_per_seed = 1
    c.rollouts_per_task = 8
    # 0: the agent rolls out every valid new task. > 0: exactly this many new tasks per epoch (the
    # first valid ones; too few are topped up with training seeds, rolled out like replayed tasks),
    # so modes that parse different shares of their generations still give the agent equal data.
    c.new_tasks_per_epoch = 0
    c.seed_selection = ConfigDict({
        "strategy": "variance",             # variance (DreamGym: rollout-reward variance) | uniform
        "explore_fraction": 0.25,           # share of seeds drawn uniformly even under `variance`
    })
    c.static_variants_per_seed = 6          # mode=static: variants generated once, up front (paper: 6x)
    c.replay = ConfigDict({
        "tasks_per_epoch": 0,               # tasks replayed from D_train / base seeds each epoch
        "base_ratio": 0.5, "historical_ratio": 0.5,
    })

    # Agent episodes: one turn for single-turn domains; multi-turn domains step until done or a cap.
    c.episodes = ConfigDict({
        "max_turns": 8,               # agent turns per episode
        "max_total_tokens": 9000,     # first prompt + all turns and observations (the paper's 9,000)
        "env_workers": 0,             # environment worker processes (0: step in the loop's process)
    })

    # Optional supervised warm-start on seed data (needed for tiny random models to emit parseable text).
    c.warmstart = ConfigDict({
        "enabled": False, "agent_steps": 0, "simulator_steps": 0, "batch_size": 8, "learning_rate": 1e-3,
        "num_seeds": 0,                 # 0: every training seed
        "simulator_target": "next",     # next | shortest: which sibling task each seed's SFT target shows
        "cache_dir": "",                # "" off; else warm-started weights are kept there and reused by
                                        # every run with the same models, warm-start settings, data and seed
    })

    # Held-out accuracy of the agent after the warm-start and every epoch: greedy, one episode per
    # task of a seed split the agent never trains on ("" off).
    c.evaluation = ConfigDict({"split": "", "max_per_category": 0})

    c.checkpoint = ConfigDict({"keep": 3, "every_epochs": 1})
    c.log = ConfigDict({"samples_per_epoch": 16, "progress_bars": True})
    return c


def tiny_models(c: ConfigDict) -> None:
    """CPU presets: both policies random `tiny` Qwen2 models in float32, no remat, 64-token LM-head
    chunks (chunks of prompt only are skipped)."""
    for model in (c.agent, c.simulator, c.experience):
        model.preset = "tiny" if model is not c.experience else model.preset  # "": the agent's
        model.param_dtype = "float32"
        model.dtype = "float32"
        model.remat_policy = "none"
        model.train.loss.chunk_size = 64


def with_preset(c: ConfigDict, preset: str, tiny: Callable[[ConfigDict], None]) -> ConfigDict:
    """Applies a benchmark config's preset: '7b' (Qwen2.5-7B agent and simulator) or 'tiny' (`tiny`)."""
    c.preset_name = preset
    if preset == "7b":
        c.agent.preset = "qwen2.5-7b"
        c.simulator.preset = "qwen2.5-7b"
    elif preset == "tiny":
        tiny(c)
    else:
        raise ValueError(f"unknown {c.domain.name} preset {preset!r}; expected '7b' or 'tiny'")
    return c


def tiny_episode_schedule(c: ConfigDict) -> None:
    """The multi-turn CPU presets' loop: random tiny models, 2 epochs of 2 seeds x 1 variant x 2
    rollouts (p_hat in {0, .5, 1}, so k_min 0.5 lets every task into the band), 2 replayed tasks,
    a supervised warm-start (its steps and batch are the preset's), small checkpoints and logs."""
    tiny_models(c)
    c.epochs = 2
    c.curriculum.k_min = 0.5
    c.seeds_per_epoch = 2
    c.variants_per_seed = 1
    c.rollouts_per_task = 2
    c.agent.train.tasks_per_step = 2
    c.simulator.train.tasks_per_step = 2
    c.replay.tasks_per_epoch = 2
    c.agent.optimizer.learning_rate = 1e-4
    c.simulator.optimizer.learning_rate = 1e-5
    c.warmstart.enabled = True
    c.warmstart.learning_rate = 3e-3
    c.log.samples_per_epoch = 2
    c.checkpoint.keep = 2

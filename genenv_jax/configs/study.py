"""The miniature reproduction study (`python -m genenv_jax.study --config=configs/study.py`).

`run` is a full run config (the calc domain, `study-1m` models over the study's own SentencePiece
tokenizer, a warm-start shared by every run); the study runs it once per (mode, alpha, seed) with
only `mode`, `curriculum.alpha` and `seed` changed. Every mode rolls out exactly `new_tasks_per_epoch` new tasks
x `rollouts_per_task` episodes and makes the same agent steps per epoch (equal agent data).

Presets (`--scale`, or `configs/study.py:large`): `small` (default, 11 runs) fits 2 CPU cores in
20 minutes; `large` is the same study with ~30x larger models (`study-30m`), more data per epoch,
more epochs and the alpha sweep on every seed (15 runs), for a GPU or TPU.
"""

from ml_collections import ConfigDict

from genenv_jax.configs import base

SCALES = ("small", "large")


def get_config(scale: str = "small") -> ConfigDict:
    if scale not in SCALES:
        raise ValueError(f"unknown study scale {scale!r}; expected one of {SCALES}")
    c = ConfigDict()
    c.scale = scale
    c.modes = ("genenv", "random", "static")  # compared at `alpha`
    c.alpha = 0.5
    c.sweep_alphas = (0.3, 0.7)               # genenv runs at these alphas too (the sweep includes `alpha`)
    c.seeds = (0, 1, 2)
    c.sweep_seeds = (0,) if scale == "small" else (0, 1, 2)  # seeds of the sweep's extra alphas (20-minute budget)
    c.tokenizer_vocab_size = 512
    c.run = run_config(scale)
    return c


# The run every study run starts from (only mode, curriculum.alpha and seed change between runs).
CALC = {
    "domain.name": "calc",
    "domain.options": {"prompt_style": "compact", "complete_functions": True,
                       "per_level": {"train": 150, "validation": 8, "test": 16}},
    "evaluation.split": "test",   # 16 tasks per level
    **{f"{model}.{key}": value for model in ("agent", "simulator") for key, value in {
        "preset": "study-1m", "param_dtype": "float32", "dtype": "float32", "remat_policy": "none",
        "scan_layers": False, "train.loss.chunk_size": 128}.items()},
    "epochs": 5,
    "init_seed": 0,               # every run starts from the same warm-started models (made once)
    "curriculum.k_min": 0.2,      # with 6 rollouts, p_hat 2/6..4/6 is in band around 0.5
    "seed_selection.strategy": "uniform",  # the simulator alone decides what the agent sees
    "seeds_per_epoch": 40,
    "new_tasks_per_epoch": 32,
    "rollouts_per_task": 6,
    "static_variants_per_seed": 6,
    "agent.train.tasks_per_step": 8,      # 4 GRPO steps of 48 episodes per epoch
    "simulator.train.tasks_per_step": 8,
    "agent.sampling.temperature": 1.0, "agent.sampling.max_new_tokens": 32, "agent.sampling.max_prompt_len": 128,
    "agent.sampling.batch_size": 256,
    "simulator.sampling.temperature": 0.7, "simulator.sampling.max_new_tokens": 48,
    "simulator.sampling.max_prompt_len": 128, "simulator.sampling.batch_size": 64,
    "episodes.max_turns": 1,
    "episodes.max_total_tokens": 512,
    "agent.optimizer.learning_rate": 3e-4,
    "simulator.optimizer.learning_rate": 5e-4,
    "agent.train.loss.kl_coef": 0.0,
    "warmstart.enabled": True, "warmstart.agent_steps": 900, "warmstart.simulator_steps": 250,
    "warmstart.batch_size": 16, "warmstart.learning_rate": 3e-3,
    "checkpoint.keep": 1,
    "log.samples_per_epoch": 8,
}
LARGE = {
    "agent.preset": "study-30m", "simulator.preset": "study-30m",
    "epochs": 20,
    "seeds_per_epoch": 80,
    "new_tasks_per_epoch": 64,
    "agent.train.tasks_per_step": 16,
    "warmstart.agent_steps": 2000, "warmstart.simulator_steps": 1000, "warmstart.batch_size": 32,
    "warmstart.learning_rate": 1e-3,
}
RUN_PRESETS = {"study-small": (), "study-large": (LARGE,)}


def run_config(scale: str) -> ConfigDict:
    return base.build("study", CALC, RUN_PRESETS, f"study-{scale}")

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


def run_config(scale: str) -> ConfigDict:
    c = base.get_config()
    c.preset_name = f"study-{scale}"
    c.domain.name = "calc"
    c.domain.options = ConfigDict({"prompt_style": "compact", "complete_functions": True,
                                   "per_level": {"train": 150, "validation": 8, "test": 16}})
    c.evaluation.split = "test"   # 16 tasks per level
    for model in (c.agent, c.simulator):
        model.preset = "study-1m"
        model.param_dtype = "float32"
        model.dtype = "float32"
        model.remat_policy = "none"
        model.scan_layers = False
        model.train.loss.chunk_size = 128
    c.epochs = 5
    c.init_seed = 0               # every run starts from the same warm-started models (made once)
    c.curriculum.k_min = 0.2      # with 6 rollouts, p_hat 2/6..4/6 is in band around 0.5
    c.seed_selection.strategy = "uniform"  # the simulator alone decides what the agent sees
    c.seeds_per_epoch = 40
    c.new_tasks_per_epoch = 32
    c.rollouts_per_task = 6
    c.static_variants_per_seed = 6
    c.agent.train.tasks_per_step = 8      # 4 GRPO steps of 48 episodes per epoch
    c.simulator.train.tasks_per_step = 8
    c.agent.sampling.update(temperature=1.0, max_new_tokens=32, max_prompt_len=128, batch_size=256)
    c.simulator.sampling.update(temperature=0.7, max_new_tokens=48, max_prompt_len=128, batch_size=64)
    c.episodes.max_turns = 1
    c.episodes.max_total_tokens = 512
    c.agent.optimizer.learning_rate = 3e-4
    c.simulator.optimizer.learning_rate = 5e-4
    c.agent.train.loss.kl_coef = 0.0
    c.warmstart.update(enabled=True, agent_steps=900, simulator_steps=250, batch_size=16, learning_rate=3e-3)
    c.checkpoint.keep = 1
    c.log.samples_per_epoch = 8
    if scale == "large":
        for model in (c.agent, c.simulator):
            model.preset = "study-30m"
        c.epochs = 20
        c.seeds_per_epoch = 80
        c.new_tasks_per_epoch = 64
        c.agent.train.tasks_per_step = 16
        c.warmstart.update(agent_steps=2000, simulator_steps=1000, batch_size=32, learning_rate=1e-3)
    return c

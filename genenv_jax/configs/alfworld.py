"""GenEnv on ALFWorld's real engine: `--config=configs/alfworld.py[:7b|:tiny]` (or `--config=alfworld:tiny`).
Needs the optional extra (`pip install -e '.[alfworld]'`, or `make alfworld`).

`7b` (default): Qwen2.5-7B-Instruct agent and simulator (point `--config.agent.model_dir` at the HF
checkpoint), the paper's hyperparameters, ALFWorld's 50-step episodes. Seeds are the generated
game set (600 train, 140 valid_seen, 134 valid_unseen games, built and verified once into
~/.cache/genenv_jax/alfworld) unless `--config.domain.options.data_dir` points at the official
`json_2.1.1` download; held-out success is measured on valid_unseen ('test').
`tiny`: random tiny Qwen2 models with the real Qwen tokenizer, 18 generated games, 10-step
episodes, a short warm-start on expert walkthroughs and sampled games, 2 epochs: the whole loop on
the real engine on a CPU in minutes.
`dreamgym`: `tiny` in mode=dreamgym (docs/dreamgym.md): an experience model fitted on the train
games' real transitions answers the agent in the first epoch, the real engine in the second
(sim-to-real); held-out success is measured on the real engine.
"""

from ml_collections import ConfigDict

from genenv_jax.configs import base

ALFWORLD = {
    "domain.name": "alfworld",
    "domain.options": {
        "data_dir": "",                 # "" -> generated games; else ALFWorld's data dir (json_2.1.1)
        "games": {"train": 600, "validation": 140, "test": 134},
        "max_steps": 50,                # ALFWorld's step cap
        "admissible": "every_turn",     # list the available commands after every observation
        "cache_dir": "",                # "" -> $GENENV_CACHE/alfworld or ~/.cache/genenv_jax/alfworld
    },
    # A 50-step episode with the command list after each observation reaches ~15-20k tokens; the
    # agent's first prompt is ~300-700 tokens (the largest kitchens list ~47 receptacles).
    "episodes.max_turns": 50,
    "episodes.max_total_tokens": 20480,
    "episodes.env_workers": 8,          # engine resets take 0.2-2.7 s: step games in parallel
    "agent.sampling.max_new_tokens": 256,   # a ReAct thought and one action
    "agent.sampling.max_prompt_len": 2048,
    "simulator.sampling.max_new_tokens": 768,   # a spec with placements is ~150-400 tokens
    "simulator.sampling.max_prompt_len": 2048,
    "evaluation.split": "test",         # valid_unseen
}

# CPU run in minutes (see the module docstring). The budget buys the machinery end to end
# (engine-verified simulator games, multi-turn episodes in worker processes, GRPO on trajectories,
# held-out success per task type), not learning.
TINY = {
    "domain.options.games": {"train": 6, "validation": 6, "test": 6},
    "domain.options.max_steps": 10,     # walkthroughs here are 3-9 steps
    "agent.sampling.max_new_tokens": 24, "agent.sampling.max_prompt_len": 1024, "agent.sampling.temperature": 0.7,
    "episodes.max_turns": 10,
    "episodes.max_total_tokens": 4096,
    "episodes.env_workers": 2,
    "simulator.sampling.max_new_tokens": 320, "simulator.sampling.max_prompt_len": 1024,
    "simulator.sampling.temperature": 0.5,
    "warmstart.agent_steps": 16,
    "warmstart.simulator_steps": 16,
    "warmstart.batch_size": 2,
    "evaluation.max_per_category": 1,   # one valid_unseen game per task type
}

# `tiny` in mode=dreamgym: 1 synthetic epoch then 1 real one, a short experience-model SFT,
# commands listed on the first turn only (what synthetic episodes can show).
DREAMGYM = {
    "mode": "dreamgym",
    "domain.options.admissible": "first_turn",
    "replay.tasks_per_epoch": 0,        # the curriculum chooses every task (seeds + capped variants)
    "seeds_per_epoch": 4,
    "agent.train.tasks_per_step": 4,
    "experience.sampling.max_new_tokens": 96, "experience.sampling.max_prompt_len": 1024,
    "experience.sampling.temperature": 0.3,
    "experience.optimizer.learning_rate": 3e-3,
    "experience.train.loss.chunk_size": 64,
    "dreamgym.synthetic_epochs": 1, "dreamgym.offline_random_per_task": 1, "dreamgym.offline_random_steps": 6,
    "dreamgym.sft_steps": 16, "dreamgym.sft_batch_size": 4, "dreamgym.max_history": 2, "dreamgym.top_k": 2,
}

PRESETS = {"7b": (base.QWEN_7B,), "tiny": (base.TINY_EPISODES, TINY),
           "dreamgym": (base.TINY_EPISODES, TINY, DREAMGYM)}


def get_config(preset: str = "7b") -> ConfigDict:
    return base.build("alfworld", ALFWORLD, PRESETS, preset)

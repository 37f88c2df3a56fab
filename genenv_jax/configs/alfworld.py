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


def get_config(preset: str = "7b") -> ConfigDict:
    c = base.get_config()
    c.domain.name = "alfworld"
    c.domain.options = ConfigDict({
        "data_dir": "",                 # "" -> generated games; else ALFWorld's data dir (json_2.1.1)
        "games": ConfigDict({"train": 600, "validation": 140, "test": 134}),
        "max_steps": 50,                # ALFWorld's step cap
        "admissible": "every_turn",     # list the available commands after every observation
        "cache_dir": "",                # "" -> $GENENV_CACHE/alfworld or ~/.cache/genenv_jax/alfworld
    })
    # A 50-step episode with the command list after each observation reaches ~15-20k tokens; the
    # agent's first prompt is ~300-700 tokens (the largest kitchens list ~47 receptacles).
    c.episodes.max_turns = 50
    c.episodes.max_total_tokens = 20480
    c.episodes.env_workers = 8          # engine resets take 0.2-2.7 s: step games in parallel
    c.agent.sampling.max_new_tokens = 256   # a ReAct thought and one action
    c.agent.sampling.max_prompt_len = 2048
    c.simulator.sampling.max_new_tokens = 768   # a spec with placements is ~150-400 tokens
    c.simulator.sampling.max_prompt_len = 2048
    c.evaluation.split = "test"         # valid_unseen
    if preset == "dreamgym":
        c = base.with_preset(c, "tiny", tiny)
        dreamgym_tiny(c)
        c.preset_name = preset
        return c
    return base.with_preset(c, preset, tiny)


def tiny(c: ConfigDict) -> None:
    """CPU run in minutes (see the module docstring). The budget buys the machinery end to end
    (engine-verified simulator games, multi-turn episodes in worker processes, GRPO on
    trajectories, held-out success per task type), not learning."""
    base.tiny_episode_schedule(c)
    c.domain.options.games = ConfigDict({"train": 6, "validation": 6, "test": 6})
    c.domain.options.max_steps = 10     # walkthroughs here are 3-9 steps
    c.agent.sampling.update(max_new_tokens=24, max_prompt_len=1024, temperature=0.7)
    c.episodes.max_turns = 10
    c.episodes.max_total_tokens = 4096
    c.episodes.env_workers = 2
    c.simulator.sampling.update(max_new_tokens=320, max_prompt_len=1024, temperature=0.5)
    c.warmstart.agent_steps = 16
    c.warmstart.simulator_steps = 16
    c.warmstart.batch_size = 2
    c.evaluation.max_per_category = 1   # one valid_unseen game per task type


def dreamgym_tiny(c: ConfigDict) -> None:
    """`tiny` in mode=dreamgym: 1 synthetic epoch then 1 real one, a short experience-model SFT,
    commands listed on the first turn only (what synthetic episodes can show)."""
    c.mode = "dreamgym"
    c.domain.options.admissible = "first_turn"
    c.replay.tasks_per_epoch = 0        # the curriculum chooses every task (seeds + capped variants)
    c.seeds_per_epoch = 4
    c.agent.train.tasks_per_step = 4
    c.experience.sampling.update(max_new_tokens=96, max_prompt_len=1024, temperature=0.3)
    c.experience.optimizer.learning_rate = 3e-3
    c.experience.train.loss.chunk_size = 64
    c.dreamgym.update(synthetic_epochs=1, offline_random_per_task=1, offline_random_steps=6, sft_steps=16,
                      sft_batch_size=4, max_history=2, top_k=2)

"""GenEnv on BFCL's multi-turn categories: `--config=configs/bfcl_multiturn.py[:7b|:tiny]` (or
`--config=bfcl_multiturn:tiny`).

`7b` (default): Qwen2.5-7B-Instruct agent and simulator (point `--config.agent.model_dir` at the
HF checkpoint), the paper's hyperparameters, episode caps sized for BFCL's multi-turn tasks (first
prompts reach 7.6k tokens with the function docs; an ideal episode has up to 15 agent turns).
`tiny`: a random tiny Qwen2 with the real Qwen tokenizer, the 4 shortest multi_turn_base training
seeds (one backend class each, ~3.5k-token first prompts), a supervised warm-start on reference
episodes and sibling tasks, 2 epochs.
"""

from ml_collections import ConfigDict

from genenv_jax.configs import base
from genenv_jax.domains.bfcl_multiturn.data import CATEGORIES


def get_config(preset: str = "7b") -> ConfigDict:
    c = base.get_config()
    c.preset_name = preset
    c.domain.name = "bfcl_multiturn"
    c.domain.options = ConfigDict({"categories": CATEGORIES})
    # Agent: first prompts up to 7,566 tokens (long_context observations can add tens of thousands:
    # such episodes end at the cap); 15 agent turns in the longest ideal episode, plus retries.
    c.agent.sampling.max_prompt_len = 8192
    c.episodes.max_turns = 24
    c.episodes.max_total_tokens = 16384
    # Simulator: prompts up to 2,950 tokens, shipped tasks written as generations up to 1,848.
    c.simulator.sampling.max_new_tokens = 2048
    if preset == "7b":
        c.agent.preset = "qwen2.5-7b"
        c.simulator.preset = "qwen2.5-7b"
    elif preset == "tiny":
        tiny(c)
    else:
        raise ValueError(f"unknown bfcl_multiturn preset {preset!r}; expected '7b' or 'tiny'")
    return c


def tiny(c: ConfigDict) -> None:
    """CPU demo: random tiny model, real tokenizer, 4 short multi_turn_base seeds, warm-start, 2 epochs."""
    base.tiny_models(c)
    c.epochs = 2
    c.curriculum.k_min = 0.25
    c.domain.options.categories = ("multi_turn_base",)
    c.domain.max_seeds = 4
    c.domain.seed_order = "shortest"   # multi_turn_base_25, _38, _3, _9: GorillaFileSystem, 2-4 user turns
    c.seeds_per_epoch = 4
    c.variants_per_seed = 1
    c.rollouts_per_task = 4
    c.agent.train.tasks_per_step = 4
    c.simulator.train.tasks_per_step = 4
    # Their reference agent turns are at most 95 tokens, first prompts ~3.6k, ideal episodes < 4k.
    c.agent.sampling.update(max_new_tokens=128, max_prompt_len=4096, temperature=0.7)
    c.episodes.max_turns = 10
    c.episodes.max_total_tokens = 5120
    # Simulator prompts ~1.1k tokens; the reference generations (sibling tasks) 261-364 tokens.
    c.simulator.sampling.update(max_new_tokens=448, max_prompt_len=2048, temperature=0.5)
    c.replay.tasks_per_epoch = 4
    c.agent.optimizer.learning_rate = 1e-4
    c.simulator.optimizer.learning_rate = 1e-5
    c.warmstart.enabled = True
    c.warmstart.agent_steps = 100
    c.warmstart.simulator_steps = 120
    c.warmstart.batch_size = 2
    c.warmstart.learning_rate = 3e-3
    c.warmstart.simulator_target = "shortest"
    c.log.samples_per_epoch = 4
    c.checkpoint.keep = 2

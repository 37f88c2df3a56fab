"""GenEnv on BFCL's multi-turn categories: `--config=configs/bfcl_multiturn.py[:7b|:tiny]` (or
`--config=bfcl_multiturn:tiny`).

`7b` (default): Qwen2.5-7B-Instruct agent and simulator (point `--config.agent.model_dir` at the
HF checkpoint), the paper's hyperparameters, episode caps sized for BFCL's multi-turn tasks (first
prompts reach 7.6k tokens with the function docs; an ideal episode has up to 15 agent turns).
`tiny`: a random tiny Qwen2 with the real Qwen tokenizer, the 2 shortest multi_turn_base training
seeds (~3.6k-token first prompts), a short supervised warm-start on reference episodes and sibling
tasks, 2 epochs: the multi-turn machinery end to end on a CPU in minutes.
`dreamgym`: `tiny` in mode=dreamgym (docs/dreamgym.md): an experience model fitted on the seeds'
real transitions (ground-truth and perturbed calls run on the backends) predicts the tool results
and the outcome in the first epoch; the real backends answer in the second (sim-to-real).
"""

from ml_collections import ConfigDict

from genenv_jax.configs import base
from genenv_jax.domains.bfcl_multiturn.data import CATEGORIES

BFCL_MULTITURN = {
    "domain.name": "bfcl_multiturn",
    "domain.options": {"categories": CATEGORIES},
    # Agent: first prompts up to 7,566 tokens (long_context observations can add tens of thousands:
    # such episodes end at the cap); 15 agent turns in the longest ideal episode, plus retries.
    "agent.sampling.max_prompt_len": 8192,
    "episodes.max_turns": 24,
    "episodes.max_total_tokens": 16384,
    # Simulator: prompts up to 2,950 tokens, shipped tasks written as generations up to 1,848.
    "simulator.sampling.max_new_tokens": 2048,
    # DreamGym's experience model: prompts (task with the initial backend states, demos, history)
    # ~1-2k tokens; a reply (reasoning, one result line per call, reward) up to ~400.
    "experience.sampling.max_new_tokens": 512, "experience.sampling.max_prompt_len": 3072,
    "dreamgym.offline_random_steps": 32,    # BFCL: the most agent replies of a perturbed episode
}

# CPU run in minutes: random tiny models, real tokenizer, the 2 shortest multi_turn_base seeds, a
# short warm-start on their reference episodes and sibling tasks, 2 epochs of 2 rollouts.
#
# Every first prompt carries BFCL's function docs (~3.6k tokens), so each agent turn prefills ~4k
# tokens and each training row holds ~4.6k: a warm-start step of one such row costs ~2 s on 2 CPU
# cores. The budget therefore buys the machinery end to end (multi-turn episodes through the
# official backends, GRPO on trajectories, pools), not learning: after 24 steps the simulator does
# not yet write parseable tasks, so the agent trains on the replayed seeds (raise
# `warmstart.simulator_steps`: the single-turn BFCL demo needs 120 steps for a 10M model to write
# parseable tasks; how many these longer multi-turn tasks need is not measured).
TINY = {
    "domain.options.categories": ("multi_turn_base",),
    "domain.max_seeds": 2,
    "domain.seed_order": "shortest",   # multi_turn_base_25 and _38: GorillaFileSystem, 2-3 user turns
    # Their reference agent turns are at most 95 tokens, first prompts ~3.6k, ideal episodes < 4k.
    "agent.sampling.max_new_tokens": 96, "agent.sampling.max_prompt_len": 4096, "agent.sampling.temperature": 0.7,
    "episodes.max_turns": 4,
    "episodes.max_total_tokens": 4608,
    # Simulator prompts ~1.1k tokens; the reference generations (sibling tasks) 261-364 tokens.
    "simulator.sampling.max_new_tokens": 384, "simulator.sampling.max_prompt_len": 2048,
    "simulator.sampling.temperature": 0.5,
    "warmstart.agent_steps": 24,
    "warmstart.simulator_steps": 24,
    "warmstart.batch_size": 1,
    "warmstart.simulator_target": "shortest",
}

# `tiny` in mode=dreamgym: 1 synthetic epoch then 1 real one, a short experience-model SFT on each
# seed's expert episode and 2 perturbed ones.
DREAMGYM = {
    "mode": "dreamgym",
    "replay.tasks_per_epoch": 0,        # the curriculum chooses every task (seeds + capped variants)
    "experience.sampling.max_new_tokens": 160, "experience.sampling.max_prompt_len": 2048,
    "experience.sampling.temperature": 0.3,
    "experience.optimizer.learning_rate": 3e-3,
    "experience.train.loss.chunk_size": 64,
    "dreamgym.synthetic_epochs": 1, "dreamgym.offline_random_per_task": 2, "dreamgym.offline_invalid_prob": 0.5,
    "dreamgym.sft_steps": 16, "dreamgym.sft_batch_size": 2, "dreamgym.max_history": 2, "dreamgym.top_k": 2,
}

PRESETS = {"7b": (base.QWEN_7B,), "tiny": (base.TINY_EPISODES, TINY),
           "dreamgym": (base.TINY_EPISODES, TINY, DREAMGYM)}


def get_config(preset: str = "7b") -> ConfigDict:
    return base.build("bfcl_multiturn", BFCL_MULTITURN, PRESETS, preset)

"""GenEnv on TravelPlanner: `--config=configs/travelplanner.py[:7b|:7b_two_stage|:tiny]` (or
`--config=travelplanner:tiny`). See docs/travelplanner.md.

Needs the download (`python -m genenv_jax.data.download travelplanner --dest DIR`, then
`--config.domain.options.data_dir=DIR`): seeds are the 45 training queries ('train'), held-out final
pass is measured on the 180 validation queries ('validation'; the 1000 test queries have no public
answers and are scored by the benchmark's leaderboard).

`7b` (default): Qwen2.5-7B-Instruct agent and simulator (point `--config.agent.model_dir` at the HF
checkpoint), the paper's hyperparameters, sole-planning (query + reference information -> the plan),
reward = final pass. The measured prompts (Qwen tokenizer, the 45 training queries): 3,306-13,846
tokens (median 6,781); gold plans up to 1,102 tokens as the JSON the agent is asked for.
`7b_two_stage`: the same with the search tools: up to 30 replies, first prompt <= 1,214 tokens,
gold-search episodes 6,292-21,001 tokens.
`tiny`: random tiny Qwen2 models with the real Qwen tokenizer, two-stage episodes (their first
prompt is ~1.2k tokens; sole-planning prompts of 3-14k tokens are too long for a CPU minute) on the
shared benchmark copy when present, else the fixture download shipped with the tests.
"""

from pathlib import Path

from ml_collections import ConfigDict

from genenv_jax.configs import base
from genenv_jax.domains.travelplanner.queries import LEVELS

REPO = Path(__file__).resolve().parents[2]
FIXTURE_DIR = REPO / "tests" / "fixtures" / "travelplanner" / "domain"
SHARED_DIR = REPO.parent / "shared" / "benchmarks" / "travelplanner"
MAX_STEPS = 30  # two-stage: the official agent's step cap

TRAVELPLANNER = {
    "domain.name": "travelplanner",
    "domain.options": {
        "data_dir": "",                 # the download directory (official layout); required
        "mode": "sole_planning",        # sole_planning | two_stage
        "reward": "final_pass",         # final_pass (the headline) | constraint_fraction (shaped)
        "max_steps": MAX_STEPS,
        "levels": LEVELS,
        "database_dir": "",             # "" -> data_dir/database
        "cache_dir": "",                # "" -> $GENENV_CACHE/tfds
    },
    "episodes.max_turns": 1,
    "episodes.max_total_tokens": 16384 + 1536,
    "agent.sampling.max_prompt_len": 16384,   # the longest training prompt is 13,846 tokens
    "agent.sampling.max_new_tokens": 1536,    # the longest gold plan is 1,102 tokens
    "simulator.sampling.max_prompt_len": 2048,  # the simulator's prompts are <= ~900 tokens
    "simulator.sampling.max_new_tokens": 384,   # a query's JSON is <= ~180 tokens
    "evaluation.split": "validation",
}

# Search tools, then the plan: 30 replies, tool results accumulate in the episode.
TWO_STAGE = {
    "domain.options.mode": "two_stage",
    "episodes.max_turns": MAX_STEPS,
    "episodes.max_total_tokens": 32768,
    "agent.sampling.max_prompt_len": 2048,    # the first prompt (system, tools, query) is <= 1,214 tokens
}

# CPU run in minutes: random tiny models, two-stage episodes of a few turns, a short warm-start on
# gold search-and-plan episodes and sibling queries. The budget buys the machinery end to end
# (feasibility-checked simulator queries, tool episodes, the evaluator's reward, GRPO), not learning.
TINY = {
    "domain.options.data_dir": str(SHARED_DIR if (SHARED_DIR / "database").is_dir() else FIXTURE_DIR),
    **TWO_STAGE,
    "domain.seed_order": "shortest",
    "domain.options.max_steps": 4,
    "episodes.max_turns": 4,
    "episodes.max_total_tokens": 4096,
    "agent.sampling.max_new_tokens": 64, "agent.sampling.max_prompt_len": 2048, "agent.sampling.temperature": 0.7,
    "simulator.sampling.max_new_tokens": 256, "simulator.sampling.max_prompt_len": 2048,
    "simulator.sampling.temperature": 0.5,
    "warmstart.agent_steps": 8,
    "warmstart.simulator_steps": 8,
    "warmstart.batch_size": 1,
    "evaluation.split": "",
}

PRESETS = {"7b": (base.QWEN_7B,), "7b_two_stage": (base.QWEN_7B, TWO_STAGE),
           "tiny": (base.TINY_EPISODES, TINY)}


def get_config(preset: str = "7b") -> ConfigDict:
    return base.build("travelplanner", TRAVELPLANNER, PRESETS, preset)

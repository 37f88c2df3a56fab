"""GenEnv on API-Bank: `--config=configs/api_bank.py[:7b|:tiny]` (or `--config=api_bank:tiny`).

Needs the download (`python -m genenv_jax.data.download api_bank --dest DIR`, then
`--config.domain.options.data_dir=DIR`). Seeds ('train') are the call turns and replies of
API-Bank's source dialogues outside the validation dialogues; held-out accuracy is measured on the
official test files ('test': levels 1-2 calls and replies, level-3 dialogues). See docs/api_bank.md.

`7b` (default): Qwen2.5-7B-Instruct agent and simulator (point `--config.agent.model_dir` at the HF
checkpoint), the paper's hyperparameters, calls as `<tool_call>` JSON ("structured"; set
`domain.options.call_format=official` for API-Bank's bracket text).
`tiny`: random tiny Qwen2 models with the real Qwen tokenizer, the fixture download shipped with the
tests (a few dialogues, tests/fixtures/api_bank/dialogues) unless data_dir is given, 2 epochs: the whole loop
(execution-verified simulator tasks, replay-scored calls) on a CPU in minutes.
"""

from pathlib import Path

from ml_collections import ConfigDict

from genenv_jax.configs import base
from genenv_jax.domains.api_bank.data import CATEGORIES

FIXTURE_DIR = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "api_bank" / "dialogues"

API_BANK = {
    "domain.name": "api_bank",
    "domain.options": {
        "data_dir": "",                 # the download directory (official layout); required
        "call_format": "structured",    # structured (<tool_call> JSON) | official ([Name(k='v')] text)
        "categories": CATEGORIES,
        "validation_fraction": 0.1,     # share of source dialogues held out as 'validation'
        "split_salt": "api_bank-v1",
        "cache_dir": "",                # "" -> $GENENV_CACHE/tfds
        "max_level3_calls": 20,         # a level-3 episode's call cap (gold dialogues make 2-9 calls)
        "replay_history": True,         # False: API-Bank's evaluator (fresh state, earlier calls not replayed)
    },
    # Level-1/2 prompts: the dialogue so far and 1-5 API descriptions (under 2k tokens); a level-3
    # episode adds one call and its result (tool descriptions from the searcher) per turn.
    "agent.sampling.max_prompt_len": 4096,
    "agent.sampling.max_new_tokens": 256,   # one call or one reply
    "episodes.max_turns": 20,
    "episodes.max_total_tokens": 9000,
    "simulator.sampling.max_new_tokens": 1024,  # a dialogue of up to 24 turns and its target
    "evaluation.split": "test",
}

# CPU run in minutes on the fixture download: random tiny models, level-1 calls and replies, a
# short warm-start on reference calls and sibling tasks. The budget buys the machinery end to end
# (execution-verified tasks, replay scoring, GRPO, pools), not learning.
TINY = {
    "domain.options.data_dir": str(FIXTURE_DIR),
    "domain.options.categories": ("level-1-api", "level-1-response"),
    "domain.options.validation_fraction": 0.0,
    "domain.seed_order": "shortest",
    "agent.sampling.max_new_tokens": 64, "agent.sampling.max_prompt_len": 2048, "agent.sampling.temperature": 0.7,
    "episodes.max_turns": 1,
    "episodes.max_total_tokens": 2304,
    "simulator.sampling.max_new_tokens": 256, "simulator.sampling.max_prompt_len": 2048,
    "simulator.sampling.temperature": 0.5,
    "warmstart.agent_steps": 8,
    "warmstart.simulator_steps": 8,
    "warmstart.batch_size": 1,
    "evaluation.split": "",
}

PRESETS = {"7b": (base.QWEN_7B,), "tiny": (base.TINY_EPISODES, TINY)}


def get_config(preset: str = "7b") -> ConfigDict:
    return base.build("api_bank", API_BANK, PRESETS, preset)

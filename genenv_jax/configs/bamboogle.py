"""GenEnv on Bamboogle with search: `--config=configs/bamboogle.py[:7b|:tiny]` (or `--config=bamboogle:tiny`).

`7b` needs `--config.domain.options.data_dir`: the directory `python -m genenv_jax.data.download
bamboogle --dest DIR` fills (test.jsonl; with `--include_corpus` also wiki-18.jsonl.gz). The default
"" stops at startup with that command in a one-line error: Bamboogle ships with no data.

`7b` (default): Qwen2.5-7B-Instruct agent and simulator (point `--config.agent.model_dir` at the HF
checkpoint), the paper's hyperparameters, Search-R1's episode (top-3 passages, up to 4 searches).
Retrieval: `--config.domain.options.retrieval_url=http://HOST:8000/retrieve` (a Search-R1 retrieval
server over wiki-18, the setup Search-R1 and GenEnv report), or BM25 over data_dir/wiki-18.jsonl.gz
built once into $GENENV_CACHE/bamboogle. Seeds: the hash split's 'train' (68 of the 125 questions);
held-out EM after each epoch on its 'test' (22). The official number is EM on all 125 with the
evaluation CLI and `split_mode=all_test` (docs/bamboogle.md).
`tiny`: random tiny Qwen2 models with the real Qwen tokenizer on the fixture download shipped with the
tests (tests/fixtures/bamboogle: 6 questions with hops and a 60-passage wiki-18-format corpus indexed
with BM25) unless data_dir is given: the whole loop on a CPU in minutes.
"""

from pathlib import Path

from ml_collections import ConfigDict

from genenv_jax.configs import base

FIXTURE_DIR = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "bamboogle"

BAMBOOGLE = {
    "domain.name": "bamboogle",
    "domain.options": {
        "data_dir": "",          # the Bamboogle download (required; "" -> a one-line error with the command)
        "retrieval_url": "",     # a Search-R1 /retrieve endpoint; "" -> BM25 over `corpus`
        "corpus": "",            # wiki-18-format JSONL(.gz); "" -> data_dir/wiki-18.jsonl[.gz]
        "topk": 3,               # passages per search (Search-R1)
        "max_searches": 4,
        "max_turns": 6,          # 4 searches + the answer + one malformed reply
        "split_mode": "hash",    # hash: by id, 68/35/22 train/validation/test of 125; all_test: all in 'test'
        "cache_dir": "",         # BM25 index; "" -> $GENENV_CACHE/bamboogle
    },
    # 4 searches x 3 passages of ~100-150 words each: ~2.5k tokens of information, plus the turns.
    "episodes.max_turns": 6,
    "episodes.max_total_tokens": 8192,
    "agent.sampling.max_new_tokens": 500,   # Search-R1's per-turn response length
    "agent.sampling.max_prompt_len": 1024,
    "simulator.sampling.max_new_tokens": 512,   # a question with 2-3 hops is ~80-200 tokens
    "simulator.sampling.max_prompt_len": 2048,
    "evaluation.split": "test",
}

# CPU run in minutes on the fixture download: machinery end to end (BM25-checked simulator
# questions, multi-turn search episodes, GRPO, held-out EM on the fixture's 'test' questions), not
# learning. 64 tokens per agent turn hold a reference search turn; 3 turns: two searches, the answer.
TINY = {
    "domain.options.data_dir": str(FIXTURE_DIR),
    "domain.options.max_searches": 2, "domain.options.max_turns": 3,
    "episodes.max_turns": 3,
    "episodes.max_total_tokens": 2048,
    "agent.sampling.max_new_tokens": 64, "agent.sampling.max_prompt_len": 512, "agent.sampling.temperature": 0.7,
    "simulator.sampling.max_new_tokens": 160, "simulator.sampling.max_prompt_len": 1024,
    "simulator.sampling.temperature": 0.5,
    "warmstart.agent_steps": 8,
    "warmstart.simulator_steps": 8,
    "warmstart.batch_size": 2,
}

PRESETS = {"7b": (base.QWEN_7B,), "tiny": (base.TINY_EPISODES, TINY)}


def get_config(preset: str = "7b") -> ConfigDict:
    return base.build("bamboogle", BAMBOOGLE, PRESETS, preset)

"""GenEnv on BFCL (function calling): `--config=configs/bfcl.py[:7b|:tiny]` (or `--config=bfcl:tiny`).

`7b` (default): the paper's setup: Qwen2.5-7B-Instruct agent and simulator (point
`--config.agent.model_dir` at the HF checkpoint), hyperparameters from the paper.
`tiny`: a random tiny Qwen2 with the real Qwen tokenizer, a few short seeds, a supervised
warm-start so it emits parseable text, 2 epochs; runs on a laptop CPU in minutes.
"""

from ml_collections import ConfigDict

from genenv_jax.configs import base
from genenv_jax.domains.bfcl_data import CATEGORIES


def get_config(preset: str = "7b") -> ConfigDict:
    c = base.get_config()
    c.domain.name = "bfcl"
    c.domain.options = ConfigDict({"categories": CATEGORIES, "validation": "strict"})
    return base.with_preset(c, preset, tiny)


def tiny(c: ConfigDict) -> None:
    """CPU demo: random tiny model, real tokenizer, 6 short simple_python seeds, warm-start, 2 epochs."""
    base.tiny_models(c)
    c.epochs = 2
    c.curriculum.k_min = 0.25      # 4 rollouts give p_hat in {0, .25, .5, .75, 1}: a band wide enough to train RWR
    c.domain.options.categories = ("simple_python",)
    c.domain.max_seeds = 6
    c.domain.seed_order = "shortest"
    c.seeds_per_epoch = 6
    c.variants_per_seed = 1
    c.rollouts_per_task = 4
    c.agent.train.tasks_per_step = 6
    c.simulator.train.tasks_per_step = 8
    c.agent.sampling.update(max_new_tokens=64, max_prompt_len=1024, temperature=0.7)
    c.simulator.sampling.update(max_new_tokens=320, max_prompt_len=2048, temperature=0.5)
    c.replay.tasks_per_epoch = 6   # the base seeds, rolled out afresh next to the generated tasks
    c.agent.optimizer.learning_rate = 1e-4
    c.simulator.optimizer.learning_rate = 1e-5
    c.warmstart.enabled = True
    # One category and the shortest sibling as every simulator target: a 10M-parameter random model
    # learns to write a parseable task in ~120 steps (several distinct targets need far more).
    c.warmstart.agent_steps = 100
    c.warmstart.simulator_steps = 120
    c.warmstart.batch_size = 3
    c.warmstart.learning_rate = 3e-3
    c.warmstart.simulator_target = "shortest"
    c.log.samples_per_epoch = 6
    c.checkpoint.keep = 2

"""GenEnv on BFCL with the real Qwen2.5-Coder-0.5B-Instruct (`python -m genenv_jax.study
--config=configs/study_bfcl.py`; docs/reproduction_bfcl.md).

`run` is the `bfcl:real` preset (LoRA agent and simulator over one frozen base, the agent
warm-started on the reply format, 200 held-out test tasks). The study runs it once per arm with
only `mode` (and an arm's overrides) changed, all from one warm-start and at equal agent data:
genenv, random and static, and `genenv_ungrounded`, genenv with BFCL's grounding check recorded
rather than applied (it measures what the simulator writes, and whether RWR moves it, without the
check; its held-out evaluation is off to fit the budget). Before the runs, the evaluation command
scores the untrained model on the same held-out set (`base/`).
"""

from ml_collections import ConfigDict

from genenv_jax.configs import bfcl

SCALES = ("bfcl-real",)


def get_config(scale: str = "bfcl-real") -> ConfigDict:
    if scale not in SCALES:
        raise ValueError(f"unknown BFCL study scale {scale!r}; expected one of {SCALES}")
    c = ConfigDict()
    c.scale = scale
    c.modes = ("genenv", "random", "static")
    c.alpha = 0.5
    c.sweep_alphas = ()
    c.seeds = (0,)
    c.sweep_seeds = ()
    c.tokenizer_vocab_size = 0   # the model's own tokenizer
    c.base_evaluation = True
    c.arms = {"genenv_ungrounded": {"mode": "genenv", "overrides": (("domain.options.grounding", "record"),
                                                                    ("evaluation.split", ""))}}
    c.run = bfcl.get_config("real")
    return c

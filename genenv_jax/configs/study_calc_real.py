"""Does the simulator learn to aim? GenEnv on calc with the real Qwen2.5-Coder-0.5B-Instruct
(`python -m genenv_jax.study --config=configs/study_calc_real.py`; docs/reproduction_calc_real.md).

`run` is the `calc:real` preset: LoRA agent and simulator over one frozen base, the agent
warm-started on the reply format only, the simulator untrained (it writes tasks from its prior
with the `instruct` prompt). The study runs it once per arm with only the mode, alpha and an arm's
overrides changed, all from one warm-start and at equal agent data (the same number of new tasks,
rollouts and GRPO rows every epoch):
- genenv, random and static at alpha 0.5 (the simulator trained by RWR, as the paper);
- genenv at alpha 0.2 and 0.8 (`sweep_alphas`): lower alpha should mean harder tasks;
- `genenv_grpo`: genenv at 0.5 with the simulator trained by GRPO over each prompt's generations
  (`simulator.train.objective=grpo`) on the same generations per epoch;
- `genenv_blind` and `random_blind`: nothing of the agent in the simulator's prompt
  (`simulator_feedback=none`), so any aiming comes from training alone.
Before the runs the evaluation command scores the untrained model on the held-out set (`base/`):
the agent's accuracy per level before the format warm-start; each run's epoch -1 row is after it.
The arms can run over several sessions: `--runs=genenv-a0.5-s0,random-a0.5-s0`.
"""

from ml_collections import ConfigDict

from genenv_jax.configs import calc

SCALES = ("calc-real",)
BLIND = (("simulator_feedback", "none"),)


def get_config(scale: str = "calc-real") -> ConfigDict:
    if scale not in SCALES:
        raise ValueError(f"unknown calc study scale {scale!r}; expected one of {SCALES}")
    c = ConfigDict()
    c.scale = scale
    c.modes = ("genenv", "random", "static")
    c.alpha = 0.5
    c.sweep_alphas = (0.2, 0.8)
    c.seeds = (0,)
    c.sweep_seeds = (0,)
    c.tokenizer_vocab_size = 0   # the model's own tokenizer
    c.base_evaluation = True
    c.arms = {
        # GRPO's unit is a group (one prompt's 4 generations): 2 groups = 8 rows, RWR's 8 tasks at most,
        # in one micro-batch (8 rows divide over up to 8 devices). Its loss section `train.grpo` has
        # its own LM-head chunk (default 512), which the preset's `train.loss.chunk_size=128` does not
        # reach: at 512 the [8, 832] step holds 13.3 GiB of temporaries (compile-only, XLA:CPU), and
        # the first try of this arm was killed for memory at its first simulator step (24.4 GB); at
        # the agent's 128, 4.2 GiB.
        "genenv_grpo": {"mode": "genenv", "overrides": (("simulator.train.objective", "grpo"),
                                                        ("simulator.train.tasks_per_epoch", 2),
                                                        ("simulator.train.tasks_per_step", 2),
                                                        ("simulator.train.micro_batches", 1),
                                                        ("simulator.train.grpo.chunk_size", 128))},
        "genenv_blind": {"mode": "genenv", "overrides": BLIND},
        "random_blind": {"mode": "random", "overrides": BLIND},
    }
    c.run = calc.get_config("real")
    return c

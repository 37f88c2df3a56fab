"""GenEnv on `calc`, tool-call arithmetic with a verifier that computes the answer itself
(docs/study_domain.md): `--config=configs/calc.py:real` (or `--config=calc:real`).

`real`: the real Qwen2.5-Coder-0.5B-Instruct as agent and simulator, rank-16 LoRA over one frozen
base, sized for about an hour a run of 12 epochs on 2 CPU cores (a target the study missed: its
arms took 64-99 minutes, docs/reproduction_calc_real.md; each run's metrics.jsonl holds its
measured phases, `time/*_s`): the simulator writes 4 variants of each of 20 seeds an
epoch (a GRPO group per seed with `simulator.train.objective=grpo`), 48 new tasks are rolled out 4
times each for their p_hat (topped up from seeds if fewer parse), the agent trains on 8 of them
(32 rows, the same in every mode), the simulator's RWR on at most 8 in-band tasks, and the held-out
set (406 test tasks, 58 per level of 7) is scored greedy at the start, every 4 epochs and at the end.
The agent is warm-started on the reply format only (`<tool_call>` spelled with ordinary tokens,
as `bfcl:real`); the simulator writes tasks from its prior (`prompt_style=instruct`).
`tiny`: the same loop on a random tiny Qwen2 with the real tokenizer, for tests and the CPU demo of
the objectives.
"""

from ml_collections import ConfigDict

from genenv_jax.configs import base

CALC = {"domain.name": "calc", "domain.options": {"prompt_style": "instruct", "complete_functions": True}}
# After the format warm-start the real agent solves 100% of level 1 and 21% of level 6 (402 held-out
# items): a seventh level (six operations) puts the hardest below a fifth.

REAL_CPU = {
    **base.CODER_LORA,
    "epochs": 12,
    "domain.options.num_levels": 7,
    "domain.options.per_level": {"train": 60, "validation": 10, "test": 58},  # 406 held-out tasks
    "domain.seed_order": "interleaved",
    "seed_selection.strategy": "uniform",  # the simulator alone decides what the agent sees
    "seeds_per_epoch": 20,
    "variants_per_seed": 4,                # the simulator's GRPO group: 4 generations of one prompt
    "rollouts_per_task": 4,                # p_hat in {0, .25, .5, .75, 1}
    "new_tasks_per_epoch": 48,             # every mode rolls out 48 new tasks (topped up from seeds)
    "curriculum.k_min": 0.25,
    "agent.train.tasks_per_epoch": 8,      # 32 GRPO rows an epoch in every mode
    "agent.train.tasks_per_step": 4, "agent.train.micro_batches": 2, "agent.train.pad_per_step": True,
    "agent.train.loss.kl_coef": 0.0,
    "simulator.train.tasks_per_step": 16, "simulator.train.micro_batches": 2, "simulator.train.pad_per_step": True,
    "simulator.train.tasks_per_epoch": 8,  # RWR: at most 8 in-band tasks an epoch (one step)
    "agent.sampling.temperature": 1.0, "agent.sampling.max_new_tokens": 48, "agent.sampling.max_prompt_len": 512,
    "agent.sampling.batch_size": 128,      # 192 rollouts in two waves: decode matmuls of 128 rows run ~1.5x
                                           # the FLOP/s of 32 on this CPU
    "simulator.sampling.temperature": 0.8, "simulator.sampling.max_new_tokens": 64,
    "simulator.sampling.max_prompt_len": 768, "simulator.sampling.batch_size": 40,
    "agent.optimizer.learning_rate": 5e-5,
    "simulator.optimizer.learning_rate": 1e-4,  # LoRA's usual rate: one step an epoch must be able to move it
    "episodes.max_turns": 1,
    "episodes.max_total_tokens": 1024,
    "warmstart.enabled": True,
    "warmstart.agent_steps": 16,
    "warmstart.simulator_steps": 0,
    "warmstart.batch_size": 4,
    "warmstart.learning_rate": 1e-4,
    "warmstart.num_seeds": 64,
    "warmstart.spell_added_tokens": True,
    "evaluation.split": "test",
    "evaluation.every_epochs": 4,
    "log.samples_per_epoch": 16,
    "checkpoint.keep": 1,
}

# A random tiny Qwen2 with the real tokenizer: the loop's pieces at CPU-test speed.
TINY = {
    **base.TINY_MODELS,
    "epochs": 2,
    "domain.options.per_level": {"train": 4, "validation": 1, "test": 2},
    "seeds_per_epoch": 4,
    "variants_per_seed": 2,
    "rollouts_per_task": 2,
    "curriculum.k_min": 0.5,
    "agent.train.tasks_per_step": 2,
    "simulator.train.tasks_per_step": 2,
    "agent.sampling.max_new_tokens": 24, "agent.sampling.max_prompt_len": 512,
    "simulator.sampling.max_new_tokens": 24, "simulator.sampling.max_prompt_len": 768,
    "agent.optimizer.learning_rate": 1e-4,
    "simulator.optimizer.learning_rate": 1e-4,
    "episodes.max_turns": 1,
    "episodes.max_total_tokens": 1024,
    "checkpoint.keep": 1,
}

PRESETS = {"real": (REAL_CPU,), "tiny": (TINY,)}


def get_config(preset: str = "real") -> ConfigDict:
    return base.build("calc", CALC, PRESETS, preset)

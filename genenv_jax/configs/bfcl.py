"""GenEnv on BFCL (function calling): `--config=configs/bfcl.py[:7b|:tiny]` (or `--config=bfcl:tiny`).

`7b` (default): the paper's setup: Qwen2.5-7B-Instruct agent and simulator (point
`--config.agent.model_dir` at the HF checkpoint), hyperparameters from the paper.
`tiny`: a random tiny Qwen2 with the real Qwen tokenizer, a few short seeds, a supervised
warm-start so it emits parseable text, 2 epochs; runs on a laptop CPU in minutes.
`coder_lora`: the real Qwen2.5-Coder-0.5B-Instruct as agent and simulator, LoRA rank 16 over one
shared frozen base, epochs sized for a 2-core, 24 GiB CPU machine (about ten minutes an epoch,
docs/benchmarks.md); no warm-start: the pretrained model writes calls and tasks as it is.
`real`: the real Qwen2.5-Coder-0.5B-Instruct with LoRA on the BFCL non-live AST categories and
irrelevance, sized for 2 CPU cores (docs/reproduction_bfcl.md): the agent warm-started on the
`<tool_call>` format, the simulator as it is, held-out accuracy on 200 test tasks after the
warm-start and every epoch; the preset of the BFCL study (`configs/study_bfcl.py`).
`reference`: `7b` with every loss and sampling value of the GenEnv reference code
(Gen-Verse/GenEnv at d5db29f; docs/rl.md "The reference preset" gives each value's file and line):
dual-clip 3 (inherited from veRL), p_hat from 4 of each task's 8 rollouts, the simulator sampling
at temperature 1.0 up to 8,192 tokens.
"""

from ml_collections import ConfigDict

from genenv_jax.configs import base
from genenv_jax.domains.bfcl.data import CATEGORIES

BFCL = {"domain.name": "bfcl", "domain.options": {"categories": CATEGORIES, "validation": "strict"}}

# CPU demo: random tiny model, real tokenizer, 6 short simple_python seeds, warm-start, 2 epochs.
TINY = {
    **base.TINY_MODELS,
    "epochs": 2,
    "curriculum.k_min": 0.25,      # 4 rollouts give p_hat in {0, .25, .5, .75, 1}: a band wide enough to train RWR
    "domain.options.categories": ("simple_python",),
    "domain.max_seeds": 6,
    "domain.seed_order": "shortest",
    "seeds_per_epoch": 6,
    "variants_per_seed": 1,
    "rollouts_per_task": 4,
    "agent.train.tasks_per_step": 6,
    "simulator.train.tasks_per_step": 8,
    "agent.sampling.max_new_tokens": 64, "agent.sampling.max_prompt_len": 1024, "agent.sampling.temperature": 0.7,
    "simulator.sampling.max_new_tokens": 320, "simulator.sampling.max_prompt_len": 2048,
    "simulator.sampling.temperature": 0.5,
    "replay.tasks_per_epoch": 6,   # the base seeds, rolled out afresh next to the generated tasks
    "agent.optimizer.learning_rate": 1e-4,
    "simulator.optimizer.learning_rate": 1e-5,
    "warmstart.enabled": True,
    # One category and the shortest sibling as every simulator target: a 10M-parameter random model
    # learns to write a parseable task in ~120 steps (several distinct targets need far more).
    "warmstart.agent_steps": 100,
    "warmstart.simulator_steps": 120,
    "warmstart.batch_size": 3,
    "warmstart.learning_rate": 3e-3,
    "warmstart.simulator_target": "shortest",
    "log.samples_per_epoch": 6,
    "checkpoint.keep": 2,
}

# The real 0.5B model with LoRA on a CPU: 8 short simple_python seeds x 1 variant and 4 replayed
# seeds, 4 rollouts each, GRPO steps of 16 rows (4 micro-batches), RWR on the in-band tasks.
# Sampling at 0.7 (the paper's 1.0 makes a 0.5B model's JSON fall apart).
CODER_LORA_CPU = {
    **base.CODER_LORA,
    "epochs": 2,
    "curriculum.k_min": 0.25,      # 4 rollouts give p_hat in {0, .25, .5, .75, 1}
    "domain.options.categories": ("simple_python",),
    "domain.max_seeds": 16,
    "domain.seed_order": "shortest",
    "seeds_per_epoch": 8,
    "variants_per_seed": 1,
    "rollouts_per_task": 4,
    "agent.train.tasks_per_step": 4, "agent.train.micro_batches": 4,
    "simulator.train.tasks_per_step": 4, "simulator.train.micro_batches": 4,
    "agent.sampling.max_new_tokens": 128, "agent.sampling.max_prompt_len": 1024, "agent.sampling.batch_size": 16,
    "agent.sampling.temperature": 0.7,
    "simulator.sampling.max_new_tokens": 512, "simulator.sampling.max_prompt_len": 2048,
    "simulator.sampling.batch_size": 8, "simulator.sampling.temperature": 0.7,
    "replay.tasks_per_epoch": 4,   # base seeds rolled out next to the generated tasks
    "agent.optimizer.learning_rate": 2e-5,
    "simulator.optimizer.learning_rate": 1e-5,
    "log.samples_per_epoch": 8,
    "checkpoint.keep": 2,
}

# The real 0.5B model on the paper's BFCL categories (non-live AST + irrelevance), one epoch in 17-21
# minutes on 2 CPU cores, 6.7-8.3 of them the held-out evaluation (docs/benchmarks.md gives the
# measured phases; training a row costs ~20 ms a token here, so every size below is small):
# - 12 seeds an epoch, drawn uniformly from every category's train split, one variant each; the
#   first 4 valid variants are the epoch's new tasks (train seeds top up a shortfall: equal agent
#   data in every mode), 4 rollouts each, no replay: 2 GRPO steps of 8 rows, each step's prompts
#   padded to their own length bucket; no KL term (the reference forward would cost a fifth of each
#   step, and 6 LoRA steps stay near the base).
# - Agent warm-start: 24 SFT steps of 2 rows on 48 train seeds (interleaved: every category),
#   rank-16 LoRA, lr 1e-4, the targets' `<tool_call>` tags spelled with ordinary tokens: this
#   model's output rows for Qwen's added tokens are untrained (one norm for all of them), so the
#   `<tool_call>` token is 24 nats less likely than `<` and LoRA cannot lift it; warm-started on it,
#   the agent answered every held-out task with the no-call sentence (docs/reproduction_bfcl.md). The base model answers in fenced JSON, never in the `<tool_call>` blocks BFCL's FC
#   checker reads, so every rollout of the base scores 0 and GRPO gets no signal (docs/bfcl.md); the
#   warm-start teaches the format. The simulator is not warm-started: it writes BFCL JSON as it is.
# - Held-out: 40 test tasks a category (200), seeded as `--sample_seed=0` of the evaluation command,
#   greedy, 192 new tokens, 16 decode slots (the command's `--batch_size`).
REAL_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
REAL_CPU = {
    **CODER_LORA_CPU,  # its LoRA models, sampling temperatures and slots
    "epochs": 3,
    "domain.options.categories": REAL_CATEGORIES,
    "domain.max_seeds": 0,
    "domain.seed_order": "interleaved",
    "seed_selection.strategy": "uniform",
    "seeds_per_epoch": 12,
    "new_tasks_per_epoch": 4,
    "static_variants_per_seed": 1,
    "replay.tasks_per_epoch": 0,
    "agent.train.tasks_per_step": 2, "agent.train.micro_batches": 2, "agent.train.pad_per_step": True,
    "agent.train.loss.kl_coef": 0.0,
    "simulator.train.pad_per_step": True,
    "agent.sampling.max_new_tokens": 192, "agent.sampling.max_prompt_len": 1536,
    "simulator.sampling.max_new_tokens": 640, "simulator.sampling.max_prompt_len": 3072,
    "simulator.sampling.batch_size": 16,
    "agent.optimizer.learning_rate": 3e-5,
    "simulator.optimizer.learning_rate": 5e-5,
    "episodes.max_turns": 1,
    "warmstart.enabled": True,
    "warmstart.agent_steps": 24,
    "warmstart.simulator_steps": 0,
    "warmstart.batch_size": 2,
    "warmstart.learning_rate": 1e-4,
    "warmstart.num_seeds": 48,
    "warmstart.spell_added_tokens": True,
    "evaluation.split": "test",
    "evaluation.max_per_category": 40,
    "evaluation.sample_seed": 0,
    "log.samples_per_epoch": 12,
    "checkpoint.keep": 1,
}

# The GenEnv reference code's values (configs/genenv_config.yaml, scripts/run_genenv.sh and
# genenv/trainer/genenv_trainer.py of Gen-Verse/GenEnv at d5db29f); the defaults already equal most
# of them, they are restated here so the preset stays the reference's if a default moves.
REFERENCE = {
    **{f"agent.train.loss.{k}": v for k, v in {
        "clip_low": 0.2, "clip_high": 0.2,               # actor.clip_ratio 0.2 (yaml 61; clip_ratio_low/high -1: unset)
        "dual_clip": 3.0,                                # veRL's clip_ratio_c default 3.0 (the yaml does not set it)
        "kl_coef": 1e-3, "kl_estimator": "k3", "kl_clamp": 10.0,  # use_kl_loss, kl_loss_coef 0.001, low_var_kl (yaml 66-68)
        "entropy_coef": 1e-3,                            # entropy_coeff 0.001 (yaml 65)
        "aggregation": "token_mean",                     # use_token_level_loss True (yaml 64)
        "advantage": "grpo", "normalize_by_std": True, "std_ddof": 1, "adv_eps": 1e-6,  # adv_estimator grpo (yaml 186)
        "importance_sampling_level": "token"}.items()},
    "agent.optimizer.learning_rate": 1e-6,               # optim.lr (yaml 73)
    "agent.optimizer.schedule": "constant", "agent.optimizer.warmup_steps": 0,  # warmup_style constant, ratio 0 (74-76)
    "agent.optimizer.grad_clip": 1.0,                    # grad_clip (yaml 60)
    "agent.train.tasks_per_step": 16,                    # ppo_mini_batch_size 16 (yaml 56)
    "agent.train.passes": 1,                             # ppo_epochs 1 (yaml 69)
    "agent.sampling.temperature": 1.0, "agent.sampling.top_k": 0, "agent.sampling.top_p": 1.0,  # rollout (98-102)
    "agent.sampling.max_new_tokens": 512,                # max_response_length (yaml 35)
    "agent.sampling.max_prompt_len": 4096,               # max_prompt_length (yaml 34)
    "rollouts_per_task": 8,                              # rollout.n 8 (yaml 119)
    "curriculum.p_hat_samples": 4,                       # genenv.num_generations_per_prompt 4 (yaml 17)
    "curriculum.alpha": 0.5, "curriculum.beta": 2.0,     # genenv.alpha, beta (yaml 18-19)
    "seeds_per_epoch": 64,                               # train_batch_size 64 (yaml 36)
    "simulator.sampling.temperature": 1.0,               # SamplingParams(temperature=1.0) (genenv_trainer.py 91)
    "simulator.sampling.max_new_tokens": 8192,           # generate(..., max_tokens=8192) (genenv_trainer.py 378)
    "epochs": 20,                                        # trainer.total_epochs (yaml 199)
}

PRESETS = {"7b": (base.QWEN_7B,), "tiny": (TINY,), "coder_lora": (CODER_LORA_CPU,), "real": (REAL_CPU,),
           "reference": (base.QWEN_7B, REFERENCE)}


def get_config(preset: str = "7b") -> ConfigDict:
    return base.build("bfcl", BFCL, PRESETS, preset)

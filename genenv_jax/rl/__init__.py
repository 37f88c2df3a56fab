"""Learning rules: per-token logprobs and masks, GRPO (agent), RWR (simulator), SFT, the optimizer;
the shared update batches (`batches`, `packing`) and the curriculum's numbers (`curriculum`).
Advantage estimators and policy losses are registered by name (`registry`); importing this
package registers the built-in ones (`advantages`: grpo, gigpo; `grpo`, `rwr`: their losses)."""

from genenv_jax.rl.grpo import GRPOConfig, grpo_advantages, grpo_loss, make_grpo_step
from genenv_jax.rl import advantages as _advantages  # noqa: F401  (registers the grpo and gigpo estimators)
from genenv_jax.rl.logprobs import build_loss_mask, make_logprobs_fn, token_logprobs
from genenv_jax.rl.losses import AGGREGATIONS, KL_ESTIMATORS, aggregate, kl_penalty
from genenv_jax.rl.optim import (OptimizerConfig, current_learning_rate, init_opt_state, make_optimizer,
                                 make_schedule, opt_state_shardings)
from genenv_jax.rl.rwr import RWRConfig, make_rwr_step, make_sft_step, rwr_loss, rwr_weight, rwr_weights
from genenv_jax.rl.registry import (ADVANTAGE_ESTIMATORS, POLICY_LOSSES, register_advantage,
                                    register_policy_loss)
from genenv_jax.rl.step import TrainStep, build_train_step

__all__ = [
    "ADVANTAGE_ESTIMATORS", "AGGREGATIONS", "KL_ESTIMATORS", "GRPOConfig", "OptimizerConfig", "POLICY_LOSSES",
    "RWRConfig", "TrainStep", "aggregate", "build_loss_mask", "build_train_step", "current_learning_rate",
    "grpo_advantages", "grpo_loss", "init_opt_state", "kl_penalty", "make_grpo_step", "make_logprobs_fn",
    "make_optimizer", "make_rwr_step", "make_schedule", "make_sft_step", "opt_state_shardings", "register_advantage",
    "register_policy_loss", "rwr_loss", "rwr_weight", "rwr_weights", "token_logprobs",
]

"""AdamW with global-norm clipping and a learning-rate schedule, built from a small config.

The optimizer state is always float32 (see `init_opt_state`); `opt_state_shardings` gives the
state the same shardings as the params it mirrors, so an FSDP-sharded model has an FSDP-sharded
optimizer.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from genenv_jax.core.config_checks import KeyProblem, check_fields, dataclass_kwargs, positive, setting

SCHEDULES = ("constant", "cosine", "linear")

# Param-tree leaf names that are not matrices: RMSNorm scales and attention biases.
_NO_DECAY_NAMES = ("scale", "bias")


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """AdamW + clipping + schedule, a policy's `optimizer` config section. Defaults are the GenEnv
    agent's (lr 1e-6 constant, clip 1.0). Each key is declared with its doc and rule
    (`core.config_checks.setting`); a decaying schedule also needs total_steps > warmup_steps."""

    learning_rate: float = setting(1e-6, "peak learning rate (after warmup)", check=positive)
    schedule: str = setting("constant", "constant (after warmup) | cosine | linear: decay from learning_rate to "
                                        "learning_rate x end_lr_factor at total_steps", choices=SCHEDULES)
    warmup_steps: int = setting(0, "linear warmup from 0 over this many steps", minimum=0)
    total_steps: int | None = setting(None, "the step a decaying schedule ends at (required by cosine and linear)")
    end_lr_factor: float = setting(0.0, "a decaying schedule's final learning rate, as a share of learning_rate")
    weight_decay: float = setting(0.01, "AdamW's decoupled weight decay")
    b1: float = setting(0.9, "AdamW's first-moment decay")
    b2: float = setting(0.999, "AdamW's second-moment decay")
    eps: float = setting(1e-8, "AdamW's epsilon")
    grad_clip: float | None = setting(1.0, "max global gradient norm; 0 or None: no clipping", minimum=0)
    decay_norms_and_biases: bool = setting(True, "False: weight decay skips RMSNorm scales and biases")

    def __post_init__(self):
        check_fields(self)
        if self.schedule != "constant" and (self.total_steps is None or self.total_steps <= self.warmup_steps):
            raise KeyProblem(self, "total_steps", f"schedule {self.schedule!r} needs total_steps > warmup_steps "
                                                  f"({self.warmup_steps})")

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> "OptimizerConfig":
        """From a dict or ml_collections ConfigDict; unknown keys are an error naming them."""
        return cls(**dataclass_kwargs(cls, config, "optimizer config"))


def make_schedule(config: OptimizerConfig) -> optax.Schedule:
    """Learning rate as a function of the step: linear warmup, then constant / cosine / linear."""
    peak, warmup = config.learning_rate, config.warmup_steps
    if config.schedule == "constant":
        if warmup == 0:
            return optax.constant_schedule(peak)
        return optax.join_schedules(
            [optax.linear_schedule(0.0, peak, warmup), optax.constant_schedule(peak)], [warmup])
    end = peak * config.end_lr_factor
    if config.schedule == "cosine":
        return optax.warmup_cosine_decay_schedule(0.0, peak, warmup, config.total_steps, end)
    decay = optax.linear_schedule(peak, end, config.total_steps - warmup)
    if warmup == 0:
        return decay
    return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), decay], [warmup])


def _decay_mask(params: Any) -> Any:
    """True for leaves that get weight decay: everything except norm scales and biases."""
    def decays(path, _):
        name = str(getattr(path[-1], "key", path[-1]))
        return not any(name == n or name.endswith("_" + n) for n in _NO_DECAY_NAMES)
    return jax.tree_util.tree_map_with_path(decays, params)


def make_optimizer(config: OptimizerConfig | Mapping[str, Any] | None = None) -> optax.GradientTransformation:
    """clip_by_global_norm -> AdamW(schedule); the current learning rate is kept in the state.

    The AdamW hyperparameters are injected (`optax.inject_hyperparams`), so
    `current_learning_rate(opt_state)` reads the rate used by the latest update.
    """
    if config is None:
        config = OptimizerConfig()
    elif not isinstance(config, OptimizerConfig):
        config = OptimizerConfig.from_dict(config)
    adamw = optax.inject_hyperparams(optax.adamw, static_args=("mask", "mu_dtype", "nesterov"))(
        learning_rate=make_schedule(config), b1=config.b1, b2=config.b2, eps=config.eps,
        weight_decay=config.weight_decay, mu_dtype=jnp.float32,
        mask=None if config.decay_norms_and_biases else _decay_mask)
    if config.grad_clip:
        return optax.chain(optax.clip_by_global_norm(config.grad_clip), adamw)
    return optax.chain(optax.identity(), adamw)


def current_learning_rate(opt_state: Any) -> jax.Array | None:
    """The learning rate an `optax.inject_hyperparams` state holds (that of the latest update, for
    `make_optimizer`'s AdamW); None for an optimizer without one."""
    return optax.tree.get(opt_state, "learning_rate", filtering=_in_hyperparams)


def _in_hyperparams(path: tuple, _: Any) -> bool:
    """An injected hyperparameter's value, not the schedule state kept under the same name."""
    return len(path) > 1 and getattr(path[-2], "name", None) == "hyperparams"


def to_float32(tree: Any) -> Any:
    """Casts floating leaves to float32 (integer leaves are left as they are)."""
    return jax.tree.map(lambda x: x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x,
                        tree)


def opt_state_shardings(optimizer: optax.GradientTransformation, param_shardings: Any,
                        param_shapes: Any, mesh: Mesh) -> Any:
    """Shardings for `optimizer`'s state: per-param moments as their param, scalars replicated."""
    state_shapes = jax.eval_shape(lambda p: optimizer.init(to_float32(p)), param_shapes)
    replicated = NamedSharding(mesh, P())
    return optax.tree_map_params(optimizer, lambda _, sharding: sharding, state_shapes, param_shardings,
                                 transform_non_params=lambda _: replicated)


def init_opt_state(optimizer: optax.GradientTransformation, params: Any,
                   shardings: Any | None = None) -> Any:
    """Optimizer state in float32 whatever the param dtype, placed on `shardings` when given."""
    def init(p: Any) -> Any:
        return optimizer.init(to_float32(p))

    if shardings is None:
        return jax.jit(init)(params)
    return jax.jit(init, out_shardings=shardings)(params)

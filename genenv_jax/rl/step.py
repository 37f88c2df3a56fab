"""The update-step machinery GRPO and RWR share: micro-batched gradients, optimizer, shardings.

`build_train_step` turns a per-micro-batch loss into one jitted
`step(params, opt_state, batch) -> (params, opt_state, metrics)` with explicit in/out shardings
(params by `models.param_shardings`, the batch over data x fsdp), donated params and optimizer
state, and gradient accumulation over micro-batches with `lax.scan`.

The weights come as a `models.partition.Partition`'s pair, `step(trainable, opt_state, batch,
frozen)`, the same step for every partition: full fine-tuning trains the whole tree with the empty
frozen part `{}`; LoRA trains the adapters over the frozen base. The loss sees
`partition.model(trainable, frozen)`, the gradient is taken with respect to the trainable part
alone (a frozen part's is never formed), the optimizer state exists for it only, and the frozen
part is neither donated nor returned. The forward's dropout is `partition.dropout(tokens)` (LoRA's
adapter dropout; masks keyed by the micro-batch's tokens, so the step stays a pure function of its
inputs), passed to the loss beside the weights. A micro-batch with no loss token (empty rows
filling the batch to its row count) is skipped (`lax.cond`): every loss term is masked, so it would
add exactly zero.

Precision: gradients are accumulated in float32 and the optimizer state is float32. The update is
added to the params in float32 and cast back to the params' dtype. Keep float32 master params
(`cfg.replace(param_dtype="float32")`, compute dtype bfloat16) when the learning rate is small:
a 1e-6 step on a bfloat16 weight of magnitude ~0.02 is below bfloat16 resolution and is lost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from genenv_jax.models import ModelConfig, shard_params
from genenv_jax.models.partition import Partition
from genenv_jax.parallel import BATCH_AXES, abstract_like, mesh_context, shard_batch, split_micro_batches
from genenv_jax.rl.optim import current_learning_rate, init_opt_state, opt_state_shardings, to_float32

Params = Any
Batch = Mapping[str, jax.Array]
Metrics = dict[str, jax.Array]
# loss_fn(params, micro_batch, normalisers, dropout) -> (loss, additive metrics): the metrics of the
# micro-batches are summed, so each must already be divided by a whole-batch normaliser; `dropout`
# is the forward's (`Partition.dropout`, None for none).
LossFn = Callable[[Params, Batch, Mapping[str, jax.Array], Any], tuple[jax.Array, Metrics]]
# prepare(full batch) -> (batch to split, whole-batch normalisers, metrics reported as they are)
PrepareFn = Callable[[Batch], tuple[Batch, Mapping[str, jax.Array], Metrics]]
# gate(summed metrics) -> (apply the update?, factor on the update)
GateFn = Callable[[Metrics], tuple[jax.Array, jax.Array]]


@dataclasses.dataclass(frozen=True)
class TrainStep:
    """A jitted update step and the shardings it expects. Call it like the function it wraps.

    Without a mesh, `param_shardings` and `opt_shardings` are None (the default device).
    """

    fn: Callable[..., tuple[Params, Any, Metrics]]
    cfg: ModelConfig
    optimizer: optax.GradientTransformation
    mesh: Mesh | None
    param_shardings: Any
    opt_shardings: Any
    rules: Any = None
    partition: Partition | None = None  # what `params` (trainable) and `frozen` are; None: full fine-tuning
    frozen_shardings: Any = None        # the frozen part's shardings (with a mesh)
    frozen_structure: Any = None        # the frozen part's tree structure (checked on each call)

    def __post_init__(self):
        if self.partition is None:
            object.__setattr__(self, "partition", Partition(self.cfg))
        if self.frozen_structure is None:
            object.__setattr__(self, "frozen_structure", jax.tree.structure(self.partition.frozen_shapes()))

    def _context(self):
        if self.mesh is None:
            return contextlib.nullcontext()
        return mesh_context(self.mesh, self.rules)

    def __call__(self, params: Params, opt_state: Any, batch: Batch, frozen: Params | None = None,
                 ) -> tuple[Params, Any, Metrics]:
        with self._context():
            return self.fn(params, opt_state, batch, *self._frozen(frozen))

    def lower(self, params: Params, opt_state: Any, batch: Batch, frozen: Params | None = None):
        """`jax.jit(...).lower` of the step (for cost analysis / compile timing)."""
        with self._context():
            return self.fn.lower(params, opt_state, batch, *self._frozen(frozen))

    def _frozen(self, frozen: Params | None) -> tuple:
        """The step's fourth argument: the frozen part (`{}` for a partition without one), checked
        to be the partition's tree so that no other tree is silently ignored."""
        if frozen is None:
            if self.partition.has_frozen:
                raise ValueError(f"this step ({self.partition.describe()}) needs the frozen base: "
                                 "step(trainable, opt_state, batch, frozen)")
            return ({},)
        if jax.tree.structure(frozen) != self.frozen_structure:
            wanted = "the frozen base's param tree" if self.partition.has_frozen else "no frozen params ({})"
            raise ValueError(f"this step ({self.partition.describe()}) takes {wanted} as its fourth argument; "
                             f"got a tree of {len(jax.tree.leaves(frozen))} leaves")
        return (frozen,)

    def place_params(self, params: Params) -> Params:
        """Puts params on this step's param shardings (no-op placement without a mesh)."""
        return params if self.mesh is None else shard_params(params, self.param_shardings)

    def place_batch(self, batch: Batch) -> Batch:
        """Puts a host batch on the mesh, batch axis over data x fsdp."""
        return jax.device_put(dict(batch)) if self.mesh is None else shard_batch(dict(batch), self.mesh)

    def init_opt_state(self, params: Params) -> Any:
        """Float32 optimizer state for `params`, sharded like them."""
        return init_opt_state(self.optimizer, params, self.opt_shardings)

    def trained_shapes(self) -> Params:
        """ShapeDtypeStructs of what this step trains (the partition's trainable part)."""
        return self.partition.trainable_shapes()

    def abstract_params(self) -> Params:
        """ShapeDtypeStructs of the trained tree with this step's shardings (e.g. a checkpoint restore target)."""
        return abstract_like(self.trained_shapes(), self.param_shardings)

    def abstract_opt_state(self) -> Any:
        """ShapeDtypeStructs of the float32 optimizer state with this step's shardings."""
        shapes = jax.eval_shape(lambda p: self.optimizer.init(to_float32(p)), self.trained_shapes())
        return abstract_like(shapes, self.opt_shardings)


def check_batch(batch: Batch, required: tuple[str, ...], micro_batches: int, batch_devices: int,
                rule: str) -> int:
    """Validates keys and leading dimensions; returns the batch size."""
    missing = [k for k in required if k not in batch]
    if missing:
        raise KeyError(f"{rule} batch is missing {missing}; it has {sorted(batch)}")
    sizes = {k: (v.shape[0] if v.ndim else None) for k, v in batch.items()}
    if None in sizes.values():
        raise ValueError(f"{rule} batch fields must have a leading batch axis; scalars: "
                         f"{[k for k, s in sizes.items() if s is None]}")
    size = batch["tokens"].shape[0]
    wrong = {k: s for k, s in sizes.items() if s != size}
    if wrong:
        raise ValueError(f"{rule} batch fields disagree on batch size {size} (tokens): {wrong}")
    if size % (micro_batches * batch_devices):
        raise ValueError(f"{rule} batch size {size} is not divisible by micro_batches ({micro_batches}) "
                         f"x data*fsdp devices ({batch_devices})")
    return size


def build_train_step(cfg: ModelConfig, optimizer: optax.GradientTransformation, loss_fn: LossFn,
                     prepare: PrepareFn, required_keys: tuple[str, ...], *, gate: GateFn | None = None,
                     mesh: Mesh | None = None, micro_batches: int = 1, rules: Any = None,
                     donate: bool = True, rule: str = "train_step", partition: Partition | None = None) -> TrainStep:
    """Builds the jitted, sharded, micro-batched step around `loss_fn` (see module docstring).

    With `mesh=None` the step runs on the default device without sharding annotations.
    `gate`, when given, decides inside the jitted step (no host sync) whether the optimizer
    update is applied and by which factor it is scaled; a skipped update leaves params and
    optimizer state unchanged.
    """
    if micro_batches < 1:
        raise ValueError(f"micro_batches must be >= 1, got {micro_batches}")
    partition = Partition(cfg) if partition is None else partition
    trained = partition.trainable_shapes()
    if any(s.dtype != jnp.float32 for s in jax.tree.leaves(trained)):
        logging.warning("%s: params are %s; updates much smaller than the weights (small learning "
                        "rates) are rounded away. Prefer float32 master params.", rule, cfg.param_dtype)
    batch_devices = 1 if mesh is None else math.prod(mesh.shape[a] for a in BATCH_AXES)
    if mesh is None:
        p_shardings = o_shardings = f_shardings = None
    else:
        p_shardings = partition.trainable_shardings(mesh, rules)
        o_shardings = opt_state_shardings(optimizer, p_shardings, trained, mesh)
        f_shardings = partition.frozen_shardings(mesh, rules)

    def constrain_like_params(tree):
        return tree if mesh is None else jax.lax.with_sharding_constraint(tree, p_shardings)

    def trained_loss(params, micro_batch, norms, frozen):  # the gradient is the trainable part's alone
        model = partition.model(params, frozen)
        return loss_fn(model, micro_batch, norms, partition.dropout(micro_batch["tokens"]))
    grad_fn = jax.value_and_grad(trained_loss, has_aux=True)

    def step(params, opt_state, batch, frozen):
        batch = dict(batch)
        check_batch(batch, required_keys, micro_batches, batch_devices, rule)
        batch, norms, direct_metrics = prepare(batch)
        micro = jax.tree.map(lambda x: split_micro_batches(x, micro_batches, mesh), batch)

        def add_micro_batch(grad_sum, micro_batch):
            (_, metrics), grads = grad_fn(params, micro_batch, norms, frozen)
            grads = constrain_like_params(to_float32(grads))
            return jax.tree.map(jnp.add, grad_sum, grads), metrics

        def accumulate(grad_sum, micro_batch):
            if "loss_mask" not in micro_batch:
                return add_micro_batch(grad_sum, micro_batch)
            # A micro-batch without loss tokens (rows padding the batch to its row count) adds exactly
            # nothing, loss and metrics included (every term is masked): skip its forward and backward.
            skipped_metrics = jax.tree.map(lambda m: jnp.zeros(m.shape, m.dtype),
                                           jax.eval_shape(add_micro_batch, grad_sum, micro_batch)[1])
            return jax.lax.cond(jnp.any(micro_batch["loss_mask"] > 0), add_micro_batch,
                                lambda g, _: (g, skipped_metrics), grad_sum, micro_batch)

        zeros = constrain_like_params(jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params))
        if micro_batches == 1:  # no loop: a smaller program that compiles faster
            grads, metrics = accumulate(zeros, jax.tree.map(lambda x: x[0], micro))
        else:
            grads, metrics = jax.lax.scan(accumulate, zeros, micro)
            metrics = {k: jnp.sum(v, axis=0) for k, v in metrics.items()}  # [M] -> whole batch

        def apply_update(scale):
            updates, new_opt_state = optimizer.update(grads, opt_state, to_float32(params))
            new_params = jax.tree.map(lambda p, u: (p.astype(jnp.float32) + scale * u).astype(p.dtype),
                                      params, updates)
            return constrain_like_params(new_params), new_opt_state

        if gate is None:
            new_params, new_opt_state = apply_update(jnp.float32(1.0))
        else:
            applied, scale = gate(metrics)
            new_params, new_opt_state = jax.lax.cond(
                applied, lambda: apply_update(scale), lambda: (params, opt_state))
        metrics["grad_norm"] = optax.tree.norm(grads)
        learning_rate = current_learning_rate(new_opt_state)
        if learning_rate is not None:
            metrics["learning_rate"] = jnp.asarray(learning_rate, jnp.float32)
        metrics.update(direct_metrics)
        return new_params, new_opt_state, metrics

    donate_argnums = (0, 1) if donate else ()  # never the frozen part: the sampler and the KL reference share it
    if mesh is None:
        fn = jax.jit(step, donate_argnums=donate_argnums)
    else:
        batch_prefix = NamedSharding(mesh, P(BATCH_AXES))  # every batch leaf: rows over data x fsdp
        replicated = NamedSharding(mesh, P())
        fn = jax.jit(step, in_shardings=(p_shardings, o_shardings, batch_prefix, f_shardings),
                     out_shardings=(p_shardings, o_shardings, replicated), donate_argnums=donate_argnums)
    return TrainStep(fn=fn, cfg=cfg, optimizer=optimizer, mesh=mesh, param_shardings=p_shardings,
                     opt_shardings=o_shardings, rules=rules, partition=partition, frozen_shardings=f_shardings,
                     frozen_structure=jax.tree.structure(partition.frozen_shapes()))

"""One trained LLM of the loop (agent or simulator): its weights, sampler, update step, KL reference.

Training keeps float32 master params (small learning rates such as 1e-6 would round away in
bfloat16); the sampler casts them to `param_dtype` (bfloat16 by default) when it places them.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Mapping

import jax
import numpy as np
from jax.sharding import Mesh

from genenv_jax import sharding
from genenv_jax.models import ModelConfig, init_params, load_hf, preset
from genenv_jax.rl import (GRPOConfig, OptimizerConfig, RWRConfig, TrainStep, make_grpo_step, make_logprobs_fn,
                           make_optimizer, make_rwr_step)
from genenv_jax.rl.losses import dataclass_kwargs
from genenv_jax.sampling import SampleOutput, Sampler

Params = Any


def _overrides(model: Mapping[str, Any]) -> dict[str, Any]:
    return dict(param_dtype="float32", dtype=model["dtype"], remat_policy=model["remat_policy"],
                scan_layers=model["scan_layers"])


def model_config(model: Mapping[str, Any]) -> ModelConfig:
    """The training config (float32 master params) of a `configs.base.model_config` section."""
    if model["model_dir"]:
        return ModelConfig.from_hf(model["model_dir"], **_overrides(model))
    return preset(model["preset"], **_overrides(model))


def initial_params(model: Mapping[str, Any], mesh: Mesh, init_seed: int) -> Params:
    """Float32 params on the mesh: the HF checkpoint in `model_dir`, or a random init of `preset`."""
    if model["model_dir"]:
        # `load_hf`'s `dtype` is the storage dtype; the compute dtype does not change what is loaded.
        layout = {k: v for k, v in _overrides(model).items() if k not in ("param_dtype", "dtype")}
        _, params = load_hf(model["model_dir"], mesh=mesh, dtype="float32", **layout)
        return params
    cfg = model_config(model)
    init = jax.jit(init_params, static_argnums=0, out_shardings=sharding.param_shardings(cfg, mesh))
    return init(cfg, jax.random.key(init_seed))


@dataclasses.dataclass
class Policy:
    """Compiled pieces around one model config; params live outside (in the loop's state)."""

    name: str
    cfg: ModelConfig              # training config (float32 params)
    sampler: Sampler              # samples with cfg.param_dtype -> sampling dtype
    update: TrainStep             # GRPO (agent) or RWR (simulator)
    sft: TrainStep                # plain NLL (RWR with unit weights, no KL) for the warm-start
    reference_logprobs: Callable  # jitted fn(ref_params, batch) -> [B, T]
    temperature: float
    rows_multiple: int            # batch rows must be a multiple of this (micro-batches x data devices)
    needs_reference: bool         # the loss has a KL term toward the frozen reference params

    def train(self, params: Params, opt_state: Any, reference_params: Params, batch: Mapping[str, np.ndarray]):
        """One update on a host batch (reference logprobs added when the loss needs them);
        returns (params, opt_state, metrics as floats). `params` and `opt_state` are donated."""
        placed = self.update.place_batch(dict(batch))
        if self.needs_reference:
            placed["ref_logprobs"] = self.reference_logprobs(reference_params, placed)
        params, opt_state, metrics = self.update(params, opt_state, placed)
        return params, opt_state, {k: float(v) for k, v in metrics.items()}

    def sample(self, params: Params, prompts: list[list[int]], sampling: Mapping[str, Any], seed: int,
               stop_tokens: tuple[int, ...], progress=None) -> SampleOutput:
        """Samples every prompt, `sampling.batch_size` rows per sampler call; results in prompt order."""
        placed = self.sampler.prepare_params(params)
        chunk = int(sampling["batch_size"])
        outs = []
        for i, start in enumerate(range(0, len(prompts), chunk)):
            part = prompts[start:start + chunk]
            outs.append(self.sampler.generate(
                placed, part, max_new_tokens=int(sampling["max_new_tokens"]),
                temperature=float(sampling["temperature"]), top_k=int(sampling["top_k"]),
                top_p=float(sampling["top_p"]), seed=seed * 100_003 + i, stop_tokens=stop_tokens))
            if progress is not None:
                progress.update(len(part))
        del placed
        return _concat_outputs(outs, int(sampling["max_new_tokens"]))


def _concat_outputs(outs: list[SampleOutput], width: int) -> SampleOutput:
    if not outs:
        empty = np.zeros((0, width))
        return SampleOutput(tokens=empty.astype(np.int32), logprobs=empty.astype(np.float32),
                            lengths=np.zeros((0,), np.int32), finish_reasons=())
    return SampleOutput(tokens=np.concatenate([o.tokens for o in outs]),
                        logprobs=np.concatenate([o.logprobs for o in outs]),
                        lengths=np.concatenate([o.lengths for o in outs]),
                        finish_reasons=tuple(r for o in outs for r in o.finish_reasons))


def make_policy(name: str, cfg: ModelConfig, sampler: Sampler, mesh: Mesh, *, rule: str,
                loss: Mapping[str, Any], optimizer: Mapping[str, Any], micro_batches: int,
                warmstart_lr: float) -> Policy:
    """Builds the jitted update / warm-start / reference-logprob functions around `sampler`."""
    opt = make_optimizer(OptimizerConfig.from_dict(optimizer))
    if rule == "grpo":
        loss_cfg = GRPOConfig(**dataclass_kwargs(GRPOConfig, loss))
        update = make_grpo_step(cfg, opt, loss_cfg, mesh=mesh, micro_batches=micro_batches)
        needs_reference = loss_cfg.kl_coef > 0
    elif rule == "rwr":
        loss_cfg = RWRConfig(**dataclass_kwargs(RWRConfig, loss))
        update = make_rwr_step(cfg, opt, loss_cfg, mesh=mesh, micro_batches=micro_batches)
        needs_reference = loss_cfg.needs_reference
    else:
        raise ValueError(f"unknown update rule {rule!r}")
    sft_cfg = RWRConfig(reward_lambda=0.0, weight_norm="none", kl_coef=0.0, chunk_size=loss_cfg.chunk_size)
    sft_opt = make_optimizer(OptimizerConfig(learning_rate=warmstart_lr, weight_decay=0.0, grad_clip=1.0))
    sft = make_rwr_step(cfg, sft_opt, sft_cfg, mesh=mesh, micro_batches=micro_batches)
    reference = make_logprobs_fn(cfg, mesh, chunk_size=loss_cfg.chunk_size, temperature=loss_cfg.temperature,
                                 micro_batches=micro_batches)
    batch_devices = int(np.prod([mesh.shape[a] for a in sharding.BATCH_AXES]))
    logging.info("%s: %s, %.1fM params, update rule %s", name, cfg, cfg.num_params() / 1e6, rule)
    return Policy(name=name, cfg=cfg, sampler=sampler, update=update, sft=sft, reference_logprobs=reference,
                  temperature=loss_cfg.temperature, rows_multiple=micro_batches * batch_devices,
                  needs_reference=needs_reference)


def copy_params(params: Params) -> Params:
    """An independent on-device copy (update steps donate their inputs, so shared buffers must be copied)."""
    return jax.tree.map(lambda x: x.copy(), params)

"""One trained LLM of the loop (agent or simulator): builds its compiled pieces and owns the
lifecycle of its state (initial weights, abstract shapes for restore, train, warm-start SFT, sample),
and `Placement`, its weights placed for sampling once per weights version.

What the policy trains is its `partition` (`models.partition`, from the config's `lora` section):
the trainable part is `PolicyState.params`, the frozen part `PolicyState.frozen`, and every piece
here (the update, the warm-start SFT, the reference logprobs, the sampler's placement) takes the
pair the same way. Full fine-tuning keeps float32 master params (small learning rates such as 1e-6
would round away in bfloat16) and an empty frozen part; the sampler casts them to the policy's
`param_dtype` (bfloat16 by default) when it places them. With LoRA the trainable part is float32
adapters over a frozen base held in `param_dtype`; the sampler places the base with the adapters
merged in, and the KL reference of a run that was not warm-started is the frozen base alone, so no
reference copy of the base exists.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh
from tqdm.auto import tqdm

from genenv_jax.models import ModelConfig
from genenv_jax.models.loading import initial_params
from genenv_jax.models.partition import Partition
from genenv_jax.parallel import BATCH_AXES
from genenv_jax.rl.batches import PolicyState, TrainFn, float_metrics, step_trainer
from genenv_jax.rl.rwr import make_sft_step
from genenv_jax.rl import POLICY_LOSSES, TrainStep, make_logprobs_fn, make_optimizer
from genenv_jax.configs.run_config import PolicySettings
from genenv_jax.sampling import SampleOutput, Sampler, SamplerParams

Params = Any
TRAINABLE_INIT_STREAM = 0x10AA  # folded into a policy's init seed for a fresh trainable part (LoRA's A)


def copy_params(params: Params) -> Params:
    """An independent on-device copy (update steps donate their inputs, so shared buffers must be copied)."""
    return jax.tree.map(lambda x: x.copy(), params)


@dataclasses.dataclass
class Policy:
    """Compiled pieces around one model config; its arrays live in a `PolicyState` the loop holds."""

    settings: PolicySettings
    cfg: ModelConfig              # training config (float32 params; under LoRA the base's param_dtype)
    partition: Partition          # what the policy trains: its weights as (trainable, frozen)
    mesh: Mesh
    sampler: Sampler              # samples with the policy's param_dtype
    update: TrainStep             # its rule's step: GRPO (agent) or RWR (simulator), `rl.registry`
    sft_step: TrainStep | None    # plain NLL (RWR with unit weights, no KL) for the warm-start
    reference_logprobs: Callable  # jitted fn(frozen, batch, reference) -> [B, T]
    rows_multiple: int            # batch rows must be a multiple of this (micro-batches x data devices)
    needs_reference: bool         # the loss has a KL term toward the frozen reference params

    @property
    def name(self) -> str:
        return self.settings.name

    # ----- state lifecycle -----
    def initial_params(self, init_seed: int) -> Params:
        """The model weights the policy starts from, in the training config's dtype (float32; the
        frozen base's param_dtype under LoRA) on the mesh: the checkpoint `model_dir` resolved to
        (an HF directory or a GGUF file), or a random init of the preset."""
        s = self.settings
        if not s.model_dir and self.cfg.num_params() >= 1e8:
            tqdm.write(f"{self.name}: initialising random {self.cfg.num_params() / 1e9:.1f}B-parameter "
                       f"weights of preset {s.preset} (allow_random_init); this takes a while on CPU")
        return initial_params(self.cfg, self.mesh, model_dir=s.model_dir, seed=init_seed)

    def initial_trained(self, weights: Params, init_seed: int) -> Params:
        """What the policy trains at the start, given its initial model `weights` (full fine-tuning:
        the weights; LoRA: fresh adapters, A uniform and B = 0, so the model starts at its base)."""
        key = jax.random.fold_in(jax.random.key(init_seed), TRAINABLE_INIT_STREAM)
        return self.partition.initial_trainable(weights, key, self.update.param_shardings)

    def frozen_of(self, weights: Params) -> Params:
        """The frozen part of the initial model `weights` (`{}` under full fine-tuning)."""
        return self.partition.frozen_of(weights)

    def new_state(self, params: Params, frozen: Params, warm_started: bool = False) -> PolicyState:
        """Fresh optimizer state and the KL anchor: a copy of the trained `params`, or, when the
        untrained part leaves the frozen model as it is and nothing was warm-started, the frozen
        part alone (reference None; LoRA's base)."""
        reference = None if (self.partition.starts_at_frozen and not warm_started) else copy_params(params)
        return PolicyState(params=params, opt_state=self.update.init_opt_state(params), reference=reference,
                           frozen=frozen)

    def abstract_state(self, with_reference: bool) -> PolicyState:
        """ShapeDtypeStructs with shardings: the restore target of this policy's checkpoint items
        (the trainable part; a frozen part is rebuilt from the config, never checkpointed)."""
        params = self.update.abstract_params()
        return PolicyState(params=params, opt_state=self.update.abstract_opt_state(),
                           reference=params if with_reference else None)

    # ----- updates -----
    def train(self, state: PolicyState, batch: Mapping[str, np.ndarray]) -> tuple[PolicyState, dict[str, float]]:
        """One update on a host batch (reference logprobs added when the loss needs them)."""
        placed = self.update.place_batch(dict(batch))
        if self.needs_reference:
            placed["ref_logprobs"] = self.reference_logprobs(state.frozen, placed, state.reference)
        params, opt_state, metrics = self.update(state.params, state.opt_state, placed, state.frozen)
        return state.replace(params=params, opt_state=opt_state), float_metrics(metrics, f"{self.name} update")

    def sft_trainer(self) -> TrainFn:
        """A `train`-like function for warm-start SFT; its optimizer state lives only during warm-start."""
        if self.sft_step is None:
            raise RuntimeError(f"{self.name}: built without a warm-start step")
        return step_trainer(self.sft_step, f"{self.name} warm-start")

    def sft_state(self, params: Params, frozen: Params | None = None) -> PolicyState:
        """A warm-start state of the trained part `params` over `frozen` (None: no frozen part)."""
        return PolicyState(params=params, opt_state=self.sft_step.init_opt_state(params),
                           frozen={} if frozen is None else frozen)

    # ----- sampling -----
    def place(self, state: PolicyState) -> SamplerParams:
        """The sampler's copy of a policy state's model (`Partition.place`: a cast, or LoRA's adapters
        merged into the base): a full pass over the model, so the epoch does it once per weights
        version (`Placement`) and every sampler call of that version shares the copy."""
        return self.partition.place(self.sampler, state.params, state.frozen)

    def sample(self, weights: Placement, prompts: Sequence[Sequence[int]], seed: int,
               stop_tokens: Sequence[int], progress=None, retain: bool = False) -> SampleOutput:
        """Samples every prompt in one sampler call on `sampling.batch_size` slots (finished slots are
        refilled from the queue); results in prompt order. `weights` are placed on the first call
        that has prompts. `retain`: keep the sequences in the sampler's prefix pool for the next
        turn (multi-turn episodes)."""
        s = self.settings.sampling
        if not prompts:
            return _empty_output(s.max_new_tokens)
        out = self.sampler.generate(weights.params, prompts, max_new_tokens=s.max_new_tokens,
                                    temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, seed=seed,
                                    stop_tokens=stop_tokens, slots=s.batch_size, retain=retain)
        if progress is not None:
            progress.update(len(prompts))
        return out


class Placement:
    """One policy state placed for sampling, on first use and at most once (`Policy.place`).

    The epoch makes one per policy and weights version and hands it to every stage that samples
    those weights (the simulator's generation; the agent's rollouts and refills; the held-out
    evaluation of the updated agent), so they share one sampler copy (one LoRA merge), and a stage
    that samples nothing places nothing (static mode after its first epoch, a held-out cache hit).
    As a context manager it drops the copy on exit, so it is not held through the updates."""

    def __init__(self, policy: Policy, state: PolicyState):
        self.policy, self._state = policy, state
        self._params: SamplerParams | None = None

    @property
    def params(self) -> SamplerParams:
        if self._state is None:
            raise RuntimeError(f"{self.policy.name}: sampling weights used after their placement was released")
        if self._params is None:
            self._params = self.policy.place(self._state)
        return self._params

    def release(self) -> None:
        """Drops the placed copy (and the state it was placed from); `params` refuses from now on."""
        self._state = self._params = None

    def __enter__(self) -> Placement:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _empty_output(width: int) -> SampleOutput:
    empty = np.zeros((0, width))
    return SampleOutput(tokens=empty.astype(np.int32), logprobs=empty.astype(np.float32),
                        lengths=np.zeros((0,), np.int32), finish_reasons=())


def build_policy(settings: PolicySettings, mesh: Mesh, sampler: Sampler, *,
                 warmstart_lr: float | None) -> Policy:
    """Builds the jitted update / warm-start / reference-logprob functions of one policy."""
    cfg = settings.model_config()
    train_settings = settings.train
    loss = train_settings.loss
    opt = make_optimizer(settings.optimizer)
    micro, partition = train_settings.micro_batches, settings.partition(cfg)
    make_step = POLICY_LOSSES.get(settings.rule).make_step  # the update rule, by name (`rl.registry`)
    update = make_step(cfg, opt, loss, mesh=mesh, micro_batches=micro, partition=partition)
    needs_reference = loss.needs_reference
    sft = None
    if warmstart_lr is not None:
        sft = make_sft_step(cfg, warmstart_lr, chunk_size=loss.chunk_size, mesh=mesh, micro_batches=micro,
                            partition=partition)
    reference = make_logprobs_fn(cfg, mesh, chunk_size=loss.chunk_size, temperature=loss.temperature,
                                 micro_batches=micro, partition=partition)
    batch_devices = math.prod(mesh.shape[a] for a in BATCH_AXES)
    logging.info("%s: %s, %.1fM params, %s, update rule %s", settings.name, cfg, cfg.num_params() / 1e6,
                 partition.describe(), settings.rule)
    return Policy(settings=settings, cfg=cfg, partition=partition, mesh=mesh, sampler=sampler, update=update,
                  sft_step=sft, reference_logprobs=reference, rows_multiple=micro * batch_devices,
                  needs_reference=needs_reference)

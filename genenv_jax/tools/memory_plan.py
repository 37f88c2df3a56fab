"""Compile-only per-device memory of the programs a run executes: the GRPO / RWR update steps, the
sampler's refill and decode programs, and the resident state (params, optimizer state).

Nothing is materialised: every program is lowered from `jax.ShapeDtypeStruct` inputs that carry
their shardings, compiled for the mesh, and XLA's `compiled.memory_analysis()` is read. On CPU the
mesh is made of virtual host devices (`--xla_force_host_platform_device_count`, see
`set_host_device_count`), so a laptop can size a multi-chip run. Shared by `genenv_jax.tools.tpu_memory` (the
per-slice sizing command) and `benchmarks/memory.py` (the memory benchmark).

The figures are XLA's buffer assignment for the backend that compiled them. For XLA:CPU they are
not a TPU's or GPU's: fusion and layout differ, and XLA:CPU computes bfloat16 dynamic-(update-)
slices in float32, so arrays written or read that way (the stacked per-layer activations a
rematerialised layer scan saves, KV caches) get a temporary float32 copy that accelerators do not
make. Sizes of bfloat16 stacks and caches in `temp` are therefore up to 2x too high on CPU; the
same holds for weights an FSDP-sharded sampler gathers (docs/plan.md).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import os
import re
from typing import Any

import jax
import numpy as np

from genenv_jax.core.bucketing import length_bucket, next_power_of_two, round_up
from genenv_jax.domains import DOMAINS, Domain
from genenv_jax.rl.packing import padded_row_count
from genenv_jax.models import param_shapes, param_shardings
from genenv_jax.models.decode import unstack_layers
from genenv_jax.parallel import MeshConfig, abstract_like, batch_sharding, make_mesh
from genenv_jax.rl import POLICY_LOSSES, TrainStep, make_optimizer
from genenv_jax.configs.run_config import PolicySettings, RunConfig
from genenv_jax.sampling import Buckets, Sampler
from genenv_jax.sampling.buckets import bucket_size
from genenv_jax.sampling.inputs import PromptBatch, SamplerParams
from genenv_jax.sampling.programs import CallPrograms
from genenv_jax.sampling.refill import SelectOptions

GIB = 2 ** 30
_COUNT_FLAG = "--xla_force_host_platform_device_count"


def set_host_device_count(count: int, *, replace: bool = True) -> None:
    """Asks XLA:CPU for `count` virtual devices (XLA_FLAGS); effective only before JAX's first
    device query in this process. `replace=False` keeps a count already in XLA_FLAGS."""
    flags = os.environ.get("XLA_FLAGS", "")
    if _COUNT_FLAG in flags and not replace:
        return
    flags = re.sub(rf"{_COUNT_FLAG}=\S*", "", flags)
    os.environ["XLA_FLAGS"] = f"{flags} {_COUNT_FLAG}={int(count)}".strip()


@dataclasses.dataclass(frozen=True)
class ProgramMemory:
    """Per-device bytes of one compiled program (XLA's `memory_analysis()`).

    args: params, optimizer state, batch (or caches, prompts) passed in; output: what it returns;
    alias: output bytes that reuse donated argument buffers; temp: everything allocated while it
    runs (activations, gradients, gathered weights, logits, attention scores); code: generated code.
    """

    args: int
    output: int
    alias: int
    temp: int
    code: int

    @classmethod
    def of(cls, compiled: Any) -> "ProgramMemory":
        """Reads a compiled program's memory analysis."""
        m = compiled.memory_analysis()
        return cls(args=m.argument_size_in_bytes, output=m.output_size_in_bytes, alias=m.alias_size_in_bytes,
                   temp=m.temp_size_in_bytes, code=m.generated_code_size_in_bytes)

    @property
    def peak(self) -> int:
        """args + output - alias + temp: the most the program can hold at once."""
        return self.args + self.output - self.alias + self.temp

    def gib(self) -> dict[str, float]:
        """{column: GiB} for args, output, alias, temp, code and peak (benchmark table rows)."""
        sizes = dataclasses.asdict(self) | {"peak": self.peak}
        return {k: v / GIB for k, v in sizes.items()}


def bytes_per_device(tree: Any) -> int:
    """Bytes one device holds of a tree of sharded `ShapeDtypeStruct`s (the largest shard of each)."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        shape = leaf.shape if leaf.sharding is None else leaf.sharding.shard_shape(leaf.shape)
        total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
    return total


# ------------------------------------------------------------------------------------------------
# Update steps
# ------------------------------------------------------------------------------------------------
def abstract_step_batch(rule: str, rows: int, seq: int, mesh) -> dict[str, jax.ShapeDtypeStruct]:
    """The batch an update step takes, as sharded ShapeDtypeStructs (rows over data x fsdp): the
    keys `benchmarks/train_step.random_batch` and the loop's packing produce."""
    per_token = {"tokens": np.int32, "attention_mask": np.int32, "loss_mask": np.float32,
                 "ref_logprobs": np.float32}  # each [rows, seq]
    per_row = {"advantages": np.float32} if rule == "grpo" else {"rewards": np.float32}  # each [rows]
    if rule == "grpo":
        per_token["old_logprobs"] = np.float32
    batch = {k: jax.ShapeDtypeStruct((rows, seq), d, sharding=batch_sharding(mesh, 2)) for k, d in per_token.items()}
    batch |= {k: jax.ShapeDtypeStruct((rows,), d, sharding=batch_sharding(mesh, 1)) for k, d in per_row.items()}
    return batch


def abstract_base(step: TrainStep) -> Any:
    """The frozen part a step takes (ShapeDtypeStructs in its dtype and shardings; `{}` for none)."""
    return abstract_like(step.partition.frozen_shapes(), step.frozen_shardings)


def compile_step(step: TrainStep, rule: str, rows: int, seq: int) -> Any:
    """Compiles `step` for its abstract trainable and frozen parts, optimizer state and a
    [rows, seq] batch."""
    batch = abstract_step_batch(rule, rows, seq, step.mesh)
    return step.lower(step.abstract_params(), step.abstract_opt_state(), batch, abstract_base(step)).compile()


def step_state_bytes(step: TrainStep) -> tuple[int, int, int]:
    """(trainable part, optimizer state, frozen part) bytes per device, in the step's dtypes and
    shardings (frozen 0 under full fine-tuning)."""
    return (bytes_per_device(step.abstract_params()), bytes_per_device(step.abstract_opt_state()),
            bytes_per_device(abstract_base(step)))


# ------------------------------------------------------------------------------------------------
# Sampler
# ------------------------------------------------------------------------------------------------
class CompileOnlyPrograms(dict):
    """Stands in for a `Sampler`'s table of compiled programs (`Sampler._programs`): programs are
    compiled and stored as usual, but a lookup returns a stand-in that answers with the program's
    output shapes instead of running it, so a whole call is sized without device memory."""

    def __getitem__(self, key):
        program = super().__getitem__(key)
        return lambda *args: program.out_info

    def by_kind(self) -> dict:
        """{program kind (the key's first field): compiled program}."""
        return {key[0]: dict.__getitem__(self, key) for key in self}


def sampler_programs(cfg, mesh, batch: int, prompt_len: int, new_tokens: int,
                     prefill_chunk_tokens: int = 16384) -> dict[str, Any]:
    """Compiles the programs of one `Sampler` call that starts `batch` prompts in `batch` slots (the
    refill program: prefill into the slots) and decodes them with the cache window at its largest
    (`new_tokens`); returns {"prefill (refill)": compiled, "decode": compiled}. Params (in
    `cfg.param_dtype`) and the decode state stay abstract."""
    sampler = Sampler(cfg, mesh, prefill_chunk_tokens=prefill_chunk_tokens,
                      buckets=Buckets(batch=(batch,), prompt=(prompt_len,), new_tokens=(new_tokens,)))
    programs = sampler._programs = CompileOnlyPrograms()
    shapes = jax.eval_shape(unstack_layers, param_shapes(cfg))
    tree = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, cfg.jnp_param_dtype, sharding=sh), shapes,
                        sampler.param_shardings)
    prompts = PromptBatch(tokens=np.zeros((batch, prompt_len), np.int32), mask=np.ones((batch, prompt_len), bool),
                          lengths=np.full(batch, prompt_len, np.int32), caps=np.full(batch, new_tokens, np.int32),
                          new_tokens_bucket=new_tokens)
    call = CallPrograms(sampler, SamplerParams(tree, cfg, mesh), prompts, slots=batch,
                        select=SelectOptions(greedy=False, top_k=0, use_top_p=False),
                        stop_ids=np.full(4, -1, np.int32),
                        scalars=(np.uint32(0), np.uint32(0), np.float32(1.0), np.float32(1.0)))
    state = call.start(new_tokens)
    state = call.refill(state, np.arange(batch), np.arange(batch))
    call.decode(state, refill_at=batch)
    compiled = programs.by_kind()
    return {"prefill (refill)": compiled["refill"], "decode": compiled["decode"]}


def sampler_memory(cfg, mesh, batch: int, prompt_len: int, new_tokens: int,
                   prefill_chunk_tokens: int = 16384) -> ProgramMemory:
    """The larger-peak program of one sampler call (`sampler_programs`), as ProgramMemory."""
    rows = [ProgramMemory.of(c) for c in sampler_programs(cfg, mesh, batch, prompt_len, new_tokens,
                                                          prefill_chunk_tokens).values()]
    return max(rows, key=lambda m: m.peak)


# ------------------------------------------------------------------------------------------------
# A run config's plan: both policies' resident arrays and programs on one mesh
# ------------------------------------------------------------------------------------------------
class PlanError(ValueError):
    """A plan cannot be made (unknown slice, too few devices); the message is one line."""


@dataclasses.dataclass(frozen=True)
class Knobs:
    """The per-policy settings the search may change (`--config.<policy>.` flags)."""

    micro_batches: int
    remat_policy: str
    slots: int  # sampling.batch_size

    def flags(self, name: str, base: "Knobs") -> list[str]:
        """`--config.` flags for the settings that differ from `base`."""
        keys = {"micro_batches": "train.micro_batches", "remat_policy": "remat_policy", "slots": "sampling.batch_size"}
        return [f"--config.{name}.{keys[k]}={getattr(self, k)}" for k in keys if getattr(self, k) != getattr(base, k)]


@dataclasses.dataclass(frozen=True)
class PolicyMemory:
    """One policy's per-chip bytes: resident arrays, and its update step and sampler call."""

    name: str
    rule: str
    knobs: Knobs
    master: int          # float32 trained tree: the params, or the LoRA adapters
    reference: int       # float32 KL anchor (0 without a KL term; LoRA: 0, or the warm-started adapters)
    optimizer: int       # float32 AdamW moments (+ counters) of the trained tree
    sampling_copy: int   # params in param_dtype (LoRA: merged), held during the policy's sampler calls
    step_shape: tuple[int, int]          # update batch [rows, seq]
    sampler_shape: tuple[int, int, int]  # (slots, prompt bucket, new-token bucket)
    step: ProgramMemory
    sampler: ProgramMemory
    base: int = 0        # LoRA: the frozen base in param_dtype (an argument of the update step)
    prefix_pool: int = 0  # the sampler's prefix pool (keys/values kept between prefills), during sampling

    @property
    def state(self) -> int:
        """What the run holds of this policy between phases."""
        return self.master + self.reference + self.optimizer + self.base


@dataclasses.dataclass(frozen=True)
class Plan:
    """The measured plan of one (mesh, agent knobs, simulator knobs) on a slice."""

    mesh: tuple[int, int, int]  # (data, fsdp, tensor)
    agent: PolicyMemory
    simulator: PolicyMemory
    budget: int
    shared_base: int = 0  # LoRA base bytes both policies count but the run holds once

    @property
    def held(self) -> int:
        """Both policies' state, a shared base once: what the run holds between phases."""
        return self.agent.state + self.simulator.state - self.shared_base

    def phases(self) -> list[tuple[str, int]]:
        """(phase, bytes per chip held at once): each update with the other policy's state, each
        sampler call with both states (its args hold the sampling copy and the KV cache). A shared
        LoRA base is counted once: it is among the update step's arguments."""
        a, s, shared = self.agent, self.simulator, self.shared_base
        return [("agent update: simulator state + agent reference + GRPO step peak",
                 s.state - shared + a.reference + a.step.peak),
                ("simulator update: agent state + simulator reference + RWR step peak",
                 a.state - shared + s.reference + s.step.peak),
                ("agent sampling: both states + prefix pool + sampler peak", self.held + a.prefix_pool + a.sampler.peak),
                ("simulator sampling: both states + prefix pool + sampler peak",
                 self.held + s.prefix_pool + s.sampler.peak)]

    @property
    def peak(self) -> int:
        """The largest phase: what the chips must hold."""
        return max(b for _, b in self.phases())

    @property
    def fits(self) -> bool:
        """Whether the largest phase is within the budget (HBM less the headroom)."""
        return self.peak <= self.budget


# ------------------------------------------------------------------------------------------------
# Shapes the config allows (the loop's packing and the sampler's buckets, at their largest)
# ------------------------------------------------------------------------------------------------
def _multi_turn(domain_name: str) -> bool:
    """Whether the domain's episodes can take several turns (it overrides `Domain.environment`)."""
    module, cls = DOMAINS[domain_name].split(":")
    return getattr(importlib.import_module(module), cls).environment is not Domain.environment


def update_shape(run: RunConfig, policy: PolicySettings, batch_shards: int, micro_batches: int) -> tuple[int, int]:
    """[rows, seq] of the policy's update batch: tasks_per_step (x rollouts for GRPO) rows padded to
    data x fsdp x micro-batches; prompt and response buckets at the longest the config allows."""
    s = policy.sampling
    rows = policy.train.tasks_per_step * (run.rollouts_per_task if POLICY_LOSSES.get(policy.rule).grouped else 1)
    rows = padded_row_count(rows, batch_shards * micro_batches)
    seq = length_bucket(s.max_prompt_len) + length_bucket(s.max_new_tokens)
    if policy.rule == "grpo" and run.episodes.max_turns > 1 and _multi_turn(run.domain.name):
        total = run.episodes.max_total_tokens  # first prompt + turns + observations, in one row
        seq = max(length_bucket(p) + length_bucket(max(total - p, s.max_new_tokens))
                  for p in range(1, s.max_prompt_len + 1))
    return rows, seq


def sampler_shape(run: RunConfig, policy: PolicySettings, batch_shards: int, slots: int) -> tuple[int, int, int]:
    """(slots, prompt bucket, new-token bucket) of the policy's largest sampler call."""
    s = policy.sampling
    prompt = s.max_prompt_len
    if policy.rule == "grpo" and run.episodes.max_turns > 1 and _multi_turn(run.domain.name):
        prompt = max(prompt, run.episodes.max_total_tokens - s.max_new_tokens)  # later turns' prompts
    return (round_up(next_power_of_two(slots), batch_shards), bucket_size(prompt, None, 16, "prompt", length_bucket),
            bucket_size(s.max_new_tokens, None, 16, "new tokens"))


# ------------------------------------------------------------------------------------------------
# Measuring (compiles are cached: the search re-measures only what changed)
# ------------------------------------------------------------------------------------------------
class Measurer:
    """Compiles a run's programs on the first `chips` JAX devices and sizes them per device."""

    def __init__(self, run: RunConfig, chips: int):
        if jax.device_count() < chips:
            raise PlanError(f"JAX has {jax.device_count()} devices in this process and the slice has {chips} "
                            "chips; run the plan in a fresh process (it sets the virtual CPU device count)")
        self.run, self.devices = run, jax.devices()[:chips]

    @functools.lru_cache(maxsize=None)
    def mesh(self, shape: tuple[int, int, int]):
        """The (data, fsdp, tensor) mesh over this slice's devices."""
        return make_mesh(MeshConfig(*shape), devices=self.devices)

    def policy(self, name: str) -> PolicySettings:
        """The run's PolicySettings of "agent" or "simulator"."""
        return getattr(self.run, name)

    def shares_base(self) -> bool:
        """Whether the loop holds one frozen base for both policies (`RunConfig.shares_frozen_base`)."""
        return self.run.shares_frozen_base()

    @functools.lru_cache(maxsize=None)
    def train_step(self, name: str, mesh: tuple[int, int, int], micro_batches: int, remat_policy: str) -> TrainStep:
        """The policy's update step as `loop.policy.build_policy` makes it. Attention "auto" is
        measured as blockwise: on the accelerator "auto" is a linear-memory kernel (splash, cudnn),
        which blockwise stands for on the CPU that compiles the plan (CPU's own "auto" choice,
        query_blocks, holds quadratic probabilities)."""
        p = self.policy(name)
        cfg = p.model_config().replace(remat_policy=remat_policy)
        if cfg.attention == "auto":
            cfg = cfg.replace(attention="blockwise")
        make = POLICY_LOSSES.get(p.rule).make_step
        return make(cfg, make_optimizer(p.optimizer), p.train.loss, mesh=self.mesh(mesh), micro_batches=micro_batches,
                    partition=p.partition(cfg))

    @functools.lru_cache(maxsize=None)
    def step(self, name: str, mesh: tuple[int, int, int], micro_batches: int, remat_policy: str,
             shape: tuple[int, int]) -> ProgramMemory:
        """The update step compiled for a [rows, seq] batch."""
        step = self.train_step(name, mesh, micro_batches, remat_policy)
        return ProgramMemory.of(compile_step(step, self.policy(name).rule, *shape))

    @functools.lru_cache(maxsize=None)
    def sampler(self, cfg, mesh: tuple[int, int, int], shape: tuple[int, int, int]) -> ProgramMemory:
        """One sampler call at (slots, prompt, new tokens); shared by policies of one model config."""
        return sampler_memory(cfg, self.mesh(mesh), *shape)

    def measure(self, name: str, mesh: tuple[int, int, int], knobs: Knobs, with_programs: bool = True) -> PolicyMemory:
        """PolicyMemory of one policy; `with_programs=False` sizes the resident arrays only (no compile)."""
        p, shards = self.policy(name), mesh[0] * mesh[1]
        step = self.train_step(name, mesh, knobs.micro_batches, knobs.remat_policy)
        master, optimizer, base = step_state_bytes(step)
        loss = p.train.loss
        needs_reference = loss.needs_reference
        if step.partition.starts_at_frozen and not self.run.warmstart.enabled:
            needs_reference = False  # the KL anchor is the frozen part alone (LoRA's base): no copy
        sampler_cfg = p.model_config().replace(param_dtype=p.param_dtype)  # as CoEvolution builds its Sampler
        copy = bytes_per_device(abstract_like(param_shapes(sampler_cfg), param_shardings(sampler_cfg, self.mesh(mesh))))
        step_shape = update_shape(self.run, p, shards, knobs.micro_batches)
        s_shape = sampler_shape(self.run, p, shards, knobs.slots)
        none = ProgramMemory(0, 0, 0, 0, 0)
        return PolicyMemory(
            name=name, rule=p.rule, knobs=knobs, master=master, reference=master if needs_reference else 0,
            optimizer=optimizer, sampling_copy=copy, step_shape=step_shape, sampler_shape=s_shape, base=base,
            prefix_pool=prefix_pool_bytes(sampler_cfg, p.sampling.prefix_cache_tokens, mesh[2]),
            step=self.step(name, mesh, knobs.micro_batches, knobs.remat_policy, step_shape) if with_programs else none,
            sampler=self.sampler(sampler_cfg, mesh, s_shape) if with_programs else none)


def prefix_pool_bytes(cfg, tokens: int, tensor: int) -> int:
    """Per-chip bytes of a prefix pool of `tokens` (`sampling/prefix_cache.py`): per layer a K and a V
    buffer [tokens, kv heads, head dim] in the compute dtype, kv heads split over `tensor` where they
    divide, replicated over data and fsdp."""
    heads = cfg.num_kv_heads // tensor if cfg.num_kv_heads % tensor == 0 else cfg.num_kv_heads
    return tokens * cfg.num_layers * 2 * heads * cfg.head_dim * np.dtype(cfg.jnp_dtype).itemsize


def config_knobs(policy: PolicySettings) -> Knobs:
    """The knobs a policy's settings name (the plan's starting point)."""
    return Knobs(policy.train.micro_batches, policy.remat_policy, policy.sampling.batch_size)


def build_plan(measurer: Measurer, mesh: tuple[int, int, int], agent: Knobs, simulator: Knobs, budget: int,
               with_programs: bool = True) -> Plan:
    """Both policies measured on one mesh (`with_programs=False`: resident arrays only)."""
    a = measurer.measure("agent", mesh, agent, with_programs)
    s = measurer.measure("simulator", mesh, simulator, with_programs)
    return Plan(mesh, a, s, budget, shared_base=a.base if measurer.shares_base() else 0)

"""`Sampler`: batched generation over B decode slots with a KV cache, for one model config and
one mesh. Programs are compiled ahead of time per bucketed shape and reused across calls.

Flow of one `generate` call: the prompts (lists of token ids) are left-padded into a bucketed
[n, P] host array and queued. The scheduler (`scheduler.py`) starts up to B of them in free slots
(`refill.py`: prefill, write their caches into the slots' prompt range, first token from the
prefill logits), then runs decode segments (`decode_loop.py`: a `lax.while_loop` feeding one token
per running slot per step), and whenever enough slots have finished it refills them from the
queue, until every prompt is done; once the queue is empty it gathers the live rows into fewer
slots as rows finish (`compact`). Each slot runs at its own step; the cache holds P + W slots,
with W the bucketed window the running slots need. Results are written on the device by prompt
index (`slot_state.py`) and come to the host once, at the end.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import weakref
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from genenv_jax.core.bucketing import length_bucket, next_power_of_two, round_up
from genenv_jax.models import ModelConfig, param_shardings
from genenv_jax.parallel import BATCH_AXES, MeshConfig, logical_to_spec, make_mesh
from genenv_jax.sampling.buckets import Buckets, bucket_size
from genenv_jax.sampling.inputs import PromptBatch, SamplerParams
from genenv_jax.sampling.prefix_cache import PrefixCache, PrefixCacheConfig
from genenv_jax.sampling.programs import CallPrograms
from genenv_jax.sampling.refill import SelectOptions
from genenv_jax.sampling.scheduler import SlotStats, run_queue
from genenv_jax.sampling.slot_state import DecodeState
from genenv_jax.sampling.token_selection import SamplingParams
from genenv_jax.sampling.validation import (check_param_tree, validate_caps, validate_prompts,
                                            validate_stop_tokens)

# (fn(layer, extra layer) -> layer, extra stacked on the layers axis): `Sampler.prepare_params`'s per-layer update
LayerUpdate = tuple[Callable[[Any, Any], Any], Any]
FINISH_STOP = "stop"
FINISH_LENGTH = "length"


@dataclasses.dataclass(frozen=True)
class SampleOutput:
    """Generated continuations, one row per prompt, in prompt order.

    tokens [n, T] int32 and logprobs [n, T] float32 (T: max_new_tokens, the largest one when
    prompts have their own caps) hold each row's first `lengths[i]` entries, then `pad_id` / 0.
    logprobs are log_softmax(logits / temperature) of the sampled token (plain log_softmax for
    greedy). finish_reasons: "stop" (a stop token was sampled; it is included unless
    include_stop_token=False) or "length" (the prompt's max_new_tokens reached). `stats`: how the
    call used its slots (None for outputs not made by a `Sampler`, e.g. concatenated ones).
    """

    tokens: np.ndarray
    logprobs: np.ndarray
    lengths: np.ndarray
    finish_reasons: tuple[str, ...]
    stats: SlotStats | None = None

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]], finish_reasons: Sequence[str] | None = None) -> "SampleOutput":
        """Token rows made outside a sampler (scripted replies, other decoders) as an output: padded
        with 0, logprobs 0; every row "stop" unless `finish_reasons` says otherwise."""
        width = max([len(r) for r in rows] + [1])
        tokens = np.zeros((len(rows), width), np.int32)
        for i, r in enumerate(rows):
            tokens[i, :len(r)] = r
        reasons = tuple(finish_reasons) if finish_reasons is not None else (FINISH_STOP,) * len(rows)
        return cls(tokens=tokens, logprobs=np.zeros(tokens.shape, np.float32),
                   lengths=np.asarray([len(r) for r in rows], np.int32), finish_reasons=reasons)

    def closed(self, end_id: int) -> "SampleOutput":
        """The output with every row cut by its cap ("length") ended by `end_id` (logprob 0) and
        counted as stopped: how a reply cut short is closed so the conversation renders on (the
        evaluation's episodes, the rollout benchmark's random-weight agents)."""
        cut = [i for i, r in enumerate(self.finish_reasons) if r != FINISH_STOP]
        width = self.tokens.shape[1] + (1 if cut else 0)
        tokens = np.zeros((len(self.lengths), width), np.int32)
        logprobs = np.zeros(tokens.shape, np.float32)
        tokens[:, :self.tokens.shape[1]], logprobs[:, :self.tokens.shape[1]] = self.tokens, self.logprobs
        lengths = self.lengths.copy()
        tokens[cut, lengths[cut]] = end_id
        lengths[cut] += 1
        return dataclasses.replace(self, tokens=tokens, logprobs=logprobs, lengths=lengths,
                                   finish_reasons=(FINISH_STOP,) * len(lengths))

    def token_lists(self) -> list[list[int]]:
        return [row[:n].tolist() for row, n in zip(self.tokens, self.lengths)]

    def logprob_lists(self) -> list[np.ndarray]:
        return [row[:n] for row, n in zip(self.logprobs, self.lengths)]


class Sampler:
    """Batched generation for one model config on one mesh, with compiled programs reused.

    Params: `prepare_params` places a model param tree (from any mesh, or host arrays) for this
    sampler: layers unstacked, weights cast to `cfg.param_dtype`, batch over data x fsdp and heads
    / mlp / vocab over tensor. `generate` accepts raw params too (it then prepares them per call).

    Slots: `generate(..., slots=B)` decodes at most B prompts at a time and starts the next queued
    prompt in a slot as soon as enough slots are free (`refill_rows` of them, default B // 16), so a
    mix of short and long responses keeps the slots busy; without `slots`, every prompt gets a slot
    (one batch, nothing to refill). The cache window W (generated slots attended to) follows the
    running rows' steps, bucketed like max_new_tokens (`Buckets.new_tokens`), so attention reads only
    the range in use. See `scheduler.py` for why refills happen between loop segments. Once the
    queue is empty (`compact`, default on), the live rows are gathered into the smallest slot
    bucket that holds them whenever they fit in half the current slots, so the drain's decode steps
    compute only the rows still running (at most 2x their count, never below data x fsdp rows).

    Shapes are bucketed (`Buckets`: powers of two by default). Programs are compiled ahead of time
    on first use of their shape key and kept by it (`compiled_programs`, `programs.py`) rather than
    left to `jax.jit`'s cache, because: their in/out shardings depend on the bucketed shapes (a mesh
    axis is dropped where it does not divide a dimension), so one `jax.jit` with fixed shardings
    cannot serve every bucket; an input that does not match a program's shapes or shardings is an
    error, never a silent recompile; and the keys show which buckets a run compiled.

    `prefill_chunk_tokens` bounds the prompt tokens per prefill chunk (memory of the [R, N, P, P]
    scores); `steps_per_sync` decode steps run between loop-exit checks (a GPU while loop copies
    its predicate to the host each iteration; default 8 on GPU, 1 elsewhere), at the cost of up
    to steps_per_sync - 1 steps past a segment's end.
    """

    def __init__(self, cfg: ModelConfig, mesh: Mesh | None = None, *, buckets: Buckets | None = None,
                 prefill_chunk_tokens: int = 16384, steps_per_sync: int | None = None, pad_id: int = 0,
                 refill_rows: int | None = None, compact: bool = True,
                 prefix_cache: PrefixCacheConfig | None = PrefixCacheConfig()):
        self.cfg = cfg
        self.mesh = make_mesh() if mesh is None else mesh
        self.buckets = Buckets() if buckets is None else buckets
        if prefill_chunk_tokens < 1:
            raise ValueError(f"prefill_chunk_tokens must be >= 1, got {prefill_chunk_tokens}")
        self.prefill_chunk_tokens = int(prefill_chunk_tokens)
        if steps_per_sync is None:
            steps_per_sync = 8 if self.mesh.devices.flat[0].platform in ("gpu", "cuda", "rocm") else 1
        if steps_per_sync < 1:
            raise ValueError(f"steps_per_sync must be >= 1, got {steps_per_sync}")
        self.steps_per_sync = int(steps_per_sync)
        if not 0 <= pad_id < cfg.vocab_size:
            raise ValueError(f"pad_id {pad_id} is outside the vocabulary [0, {cfg.vocab_size})")
        self.pad_id = int(pad_id)
        if refill_rows is not None and (not isinstance(refill_rows, int) or refill_rows < 1):
            raise ValueError(f"refill_rows must be an int >= 1, got {refill_rows!r}")
        self.refill_rows = refill_rows
        self.compact = bool(compact)
        self.prefix_cache = prefix_cache if prefix_cache is not None and prefix_cache.enabled else None
        self._pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # SamplerParams -> PrefixCache
        self.batch_shards = math.prod(self.mesh.shape[a] for a in BATCH_AXES)
        self._programs: dict[tuple, Any] = {}
        self.timed = False  # generate() blocks after each program and records its seconds (profiling)

        stacked = param_shardings(cfg, self.mesh)
        layer = jax.tree.map(lambda s: NamedSharding(self.mesh, P(*s.spec[1:])), stacked["layers"])
        self.param_shardings = {**{k: v for k, v in stacked.items() if k != "layers"},
                                 "layers": (layer,) * cfg.num_layers}
        dtype = cfg.jnp_param_dtype
        self._take_layer = jax.jit(lambda layers, i: jax.tree.map(lambda a: a[i].astype(dtype), layers))

        self._updated_layers: dict[Callable, Any] = {}  # layer update -> its jitted per-layer program

    # ----- placement -----
    @property
    def compiled_programs(self) -> tuple[tuple, ...]:
        """Keys of the compiled programs held by this sampler (`programs.py` lists their forms)."""
        return tuple(self._programs)

    def sharding(self, logical: tuple[str | None, ...], shape: tuple[int, ...]) -> NamedSharding:
        return NamedSharding(self.mesh, logical_to_spec(logical, shape, self.mesh))

    def constrain(self, x: jax.Array, logical: tuple[str | None, ...]) -> jax.Array:
        return jax.lax.with_sharding_constraint(x, self.sharding(logical, x.shape))

    def replicated(self) -> NamedSharding:
        return NamedSharding(self.mesh, P())

    def put(self, host: np.ndarray, logical: tuple[str | None, ...]) -> jax.Array:
        """Host array (the same on every process) -> global array on the mesh."""
        host = np.asarray(host)
        return jax.make_array_from_callback(host.shape, self.sharding(logical, host.shape), lambda i: host[i])

    def compiled(self, key: tuple, build):
        """The program compiled for `key`; on first use `build()` gives (fn, abstract args, in
        shardings, out shardings, donated arg numbers) and it is compiled ahead of time."""
        if key not in self._programs:
            fn, args, in_shardings, out_shardings, donate = build()
            jitted = jax.jit(fn, in_shardings=in_shardings, out_shardings=out_shardings, donate_argnums=donate)
            self._programs[key] = jitted.lower(*args).compile()
        return self._programs[key]

    def prefix_pool(self, params: SamplerParams) -> PrefixCache | None:
        """The prefix pool of these placed params (None with reuse off): created empty on first use,
        dropped with the params (keys of other weights would be wrong)."""
        if self.prefix_cache is None:
            return None
        if params not in self._pools:
            self._pools[params] = PrefixCache(self.prefix_cache)
        return self._pools[params]

    def new_pool(self, tokens: int):
        """Zeroed pool buffers, per layer (k, v) [F, K, H] in the compute dtype, kv heads over tensor."""
        cfg = self.cfg
        shape = (tokens, cfg.num_kv_heads, cfg.head_dim)
        sharding = self.sharding((None, "kv_heads", None), shape)
        zeros = jax.jit(lambda: jnp.zeros(shape, cfg.jnp_dtype), out_shardings=sharding)
        return tuple((zeros(), zeros()) for _ in range(cfg.num_layers))

    def prepare_params(self, params: Any, layer_update: LayerUpdate | None = None) -> SamplerParams:
        """Places model params for this sampler (reshards from another mesh; one layer at a time,
        so the extra memory is the placed copy plus one layer). With `layer_update` (fn, stacked
        extra) each layer i is placed as fn(layer i, extra i): a partition's trained part folded
        into its frozen base (`models.partition`: LoRA places W + scale * A @ B, so decoding costs
        what the base's does); call it again after each update of the extra."""
        if layer_update is not None:
            return self._prepare_updated(params, *layer_update)
        dtype = self.cfg.jnp_param_dtype
        if isinstance(params, SamplerParams):
            if params.cfg == self.cfg and params.mesh == self.mesh:
                return params
            if jax.tree.structure(params.tree) != jax.tree.structure(self.param_shardings):
                raise ValueError("SamplerParams were prepared for a config with another layout")
            tree = jax.tree.map(lambda a, s: jax.device_put(a.astype(dtype), s), params.tree, self.param_shardings)
            return SamplerParams(tree, self.cfg, self.mesh)
        check_param_tree(self.cfg, params)
        on_device = all(isinstance(a, jax.Array) for a in jax.tree.leaves(params["layers"]))

        def layer(i):  # sliced where the params live: on their devices, or on the host
            if on_device:
                return self._take_layer(params["layers"], i)
            return jax.tree.map(lambda a: np.asarray(a[i]).astype(dtype), params["layers"])

        layers = tuple(jax.device_put(layer(i), self.param_shardings["layers"][i])
                       for i in range(self.cfg.num_layers))
        rest = {k: jax.tree.map(lambda a, s: jax.device_put(jnp.asarray(a).astype(dtype), s), v,
                                self.param_shardings[k])
                for k, v in params.items() if k != "layers"}
        return SamplerParams({**rest, "layers": layers}, self.cfg, self.mesh)

    def _prepare_updated(self, params: Any, update: Callable, extra_layers: Any) -> SamplerParams:
        """`prepare_params` with each layer updated by `update` as it is placed (one compiled program
        per update function for every layer and every weight version)."""
        check_param_tree(self.cfg, params)
        dtype = self.cfg.jnp_param_dtype
        if update not in self._updated_layers:
            def updated_layer(layers, extra, i):  # layer i of the stacked params, updated
                take = functools.partial(jax.tree.map, lambda a: a[i])
                return jax.tree.map(lambda a: a.astype(dtype), update(take(layers), take(extra)))
            self._updated_layers[update] = jax.jit(updated_layer)
        program = self._updated_layers[update]
        layers = tuple(jax.device_put(program(params["layers"], extra_layers, i), self.param_shardings["layers"][i])
                       for i in range(self.cfg.num_layers))
        rest = {k: jax.tree.map(lambda a, s: jax.device_put(jnp.asarray(a).astype(dtype), s), v,
                                self.param_shardings[k])
                for k, v in params.items() if k != "layers"}
        return SamplerParams({**rest, "layers": layers}, self.cfg, self.mesh)

    def prepare_prompts(self, prompts: Sequence[Sequence[int]], max_new_tokens: int | Sequence[int]) -> PromptBatch:
        """Left-pads prompts into a bucketed [n, P] host array; max_new_tokens is one cap for every
        prompt or one per prompt."""
        rows = validate_prompts(prompts, self.cfg.vocab_size)
        caps = validate_caps(max_new_tokens, len(rows))
        b = self.buckets
        prompt_len = bucket_size(max(len(r) for r in rows), b.prompt, b.min_prompt, "prompt length", length_bucket)
        new_tokens = bucket_size(int(caps.max()), b.new_tokens, b.min_new_tokens, "max_new_tokens")
        tokens = np.full((len(rows), prompt_len), self.pad_id, np.int32)
        mask = np.zeros((len(rows), prompt_len), bool)
        for i, row in enumerate(rows):
            tokens[i, prompt_len - len(row):] = row
            mask[i, prompt_len - len(row):] = True
        return PromptBatch(tokens=tokens, mask=mask, lengths=np.array([len(r) for r in rows], np.int32), caps=caps,
                           new_tokens_bucket=new_tokens)

    def num_slots(self, num_prompts: int, slots: int | None) -> int:
        """B: `slots` (default: one per prompt), no more than the prompts, bucketed and rounded up to
        a multiple of data x fsdp."""
        if slots is not None and (not isinstance(slots, (int, np.integer)) or slots < 1):
            raise ValueError(f"slots must be an int >= 1, got {slots!r}")
        wanted = num_prompts if slots is None else min(int(slots), num_prompts)
        b = self.buckets
        return round_up(bucket_size(wanted, b.batch, b.min_batch, "batch size"), self.batch_shards)

    # ----- running -----
    def run(self, params: SamplerParams, batch: PromptBatch, *, slots: int | None = None,
            sampling: SamplingParams = SamplingParams(), seed: int = 0, stop_tokens: Sequence[int] = (),
            timed: bool = False, retain: bool = False) -> tuple[DecodeState, SlotStats, CallPrograms]:
        """Decodes every prompt of `batch` on `slots` slots (see `generate`). Returns the final device
        state (results by prompt index, bucketed), the slot stats (with per-program seconds, blocking
        after each program, when `timed`) and the call's programs (`results` reads the outputs)."""
        if not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        seed = int(seed) % 2 ** 64  # any int; its low and high 32 bits seed the key
        stops = validate_stop_tokens(stop_tokens, self.cfg.vocab_size)
        stop_ids = np.full((max(4, next_power_of_two(len(stops))),), -1, np.int32)  # -1 never matches
        stop_ids[:len(stops)] = stops
        greedy = sampling.greedy
        top_k, use_top_p = (0, False) if greedy else (sampling.top_k, sampling.top_p < 1.0)
        scalars = (np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32),
                   np.float32(sampling.temperature or 1.0),  # unused when greedy
                   np.float32(sampling.top_p))
        num_slots = self.num_slots(batch.num_rows, slots)
        programs = CallPrograms(self, params, batch, slots=num_slots, stop_ids=stop_ids, scalars=scalars,
                                select=SelectOptions(greedy=greedy, top_k=top_k, use_top_p=use_top_p),
                                cache=self.prefix_pool(params), retain=retain)
        refill_rows = self.refill_rows or max(1, num_slots // 16)
        b = self.buckets
        window_bucket = functools.partial(bucket_size, buckets=b.new_tokens, minimum=b.min_new_tokens,
                                          what="window")
        state, stats = run_queue(programs, batch.caps, slots=num_slots, refill_rows=refill_rows,
                                 steps_per_sync=self.steps_per_sync, bucket=window_bucket,
                                 refill_bucket=programs.refill_bucket, compact=self.compact, timed=timed)
        stats.prefill = programs.counts
        return state, stats, programs

    # ----- public entry points -----
    def generate(self, params: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int | Sequence[int],
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                 stop_tokens: Sequence[int] = (), include_stop_token: bool = True,
                 slots: int | None = None, retain: bool = False) -> SampleOutput:
        """Generates a continuation for every prompt (a list of token ids). See `SampleOutput`.

        max_new_tokens: one cap, or one per prompt. slots: how many prompts decode at once (default:
        all of them); with fewer slots than prompts, finished slots are refilled from the queue.
        A prompt's tokens do not depend on `slots` (greedy: the same computation; sampled: each
        prompt draws from its own stream, keyed by the seed and its index in `prompts`).
        retain: keep each prompt + response in the params' prefix pool, so a later call whose
        prompts extend them (the next turn of an episode) prefills only what was added.
        """
        sampling_params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
        params = self.prepare_params(params)
        batch = self.prepare_prompts(prompts, max_new_tokens)
        state, stats, programs = self.run(params, batch, slots=slots, sampling=sampling_params, seed=seed,
                                          stop_tokens=stop_tokens, retain=retain, timed=self.timed)
        out = programs.results(state)
        del state  # the cache buffers go with it
        width = int(batch.caps.max())
        tokens, logprobs = out["tokens"][:, :width].copy(), out["logprobs"][:, :width].copy()
        lengths, stopped = out["lengths"].copy(), out["stopped"]
        if not include_stop_token:
            rows = np.nonzero(stopped)[0]
            lengths[rows] -= 1
            tokens[rows, lengths[rows]] = self.pad_id
            logprobs[rows, lengths[rows]] = 0.0
        reasons = tuple(FINISH_STOP if s else FINISH_LENGTH for s in stopped)
        return SampleOutput(tokens=tokens, logprobs=logprobs, lengths=lengths, finish_reasons=reasons, stats=stats)


@functools.lru_cache(maxsize=8)
def shared_sampler(cfg: ModelConfig, mesh: Mesh, pad_id: int = 0) -> Sampler:
    """One `Sampler` per (cfg, mesh, pad_id) for the process, so one-call users share its compiled
    programs (`generate`, the evaluation's GenerateFn)."""
    return Sampler(cfg, mesh, pad_id=pad_id)


def params_mesh(params: Any) -> Mesh:
    """The mesh params live on: their NamedSharding's mesh, else a one-device mesh on their device
    (the default device for host arrays)."""
    if isinstance(params, SamplerParams):
        return params.mesh
    leaves = jax.tree.leaves(params)
    leaf = leaves[0] if leaves else None
    if isinstance(leaf, jax.Array) and isinstance(leaf.sharding, NamedSharding):
        return leaf.sharding.mesh
    devices = list(leaf.devices()) if isinstance(leaf, jax.Array) else jax.devices()[:1]
    if len(devices) == 1:
        return make_mesh(MeshConfig(data=1, fsdp=1, tensor=1), devices=devices)
    return make_mesh(devices=devices)


def generate(cfg: ModelConfig, params: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
             mesh: Mesh | None = None, pad_id: int = 0, **kwargs: Any) -> SampleOutput:
    """One-call generation: `Sampler(cfg, mesh).generate(params, prompts, ...)`, with the sampler
    (and so its compiled programs) kept for later calls with the same cfg and mesh.

    `mesh` defaults to the one the params live on (`params_mesh`). Keyword args are those of
    `Sampler.generate` (temperature, top_k, top_p, seed, stop_tokens, include_stop_token, slots).
    """
    mesh = params_mesh(params) if mesh is None else mesh
    return shared_sampler(cfg, mesh, pad_id).generate(params, prompts, max_new_tokens=max_new_tokens, **kwargs)

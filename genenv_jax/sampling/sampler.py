"""`Sampler`: jitted prefill + on-device decode loop over a donated KV cache, for one model config
and one mesh. Programs are compiled ahead of time per bucketed shape and reused across calls.

Flow of one `generate` call: prompts (lists of token ids) are left-padded into bucketed [B, P]
arrays on the mesh; `prefill` fills cache slots [0, P) and returns the last slot's logits; `decode`
samples the first token from them and then runs a `lax.while_loop` that feeds one token per row per
step, writing cache slot P + i - 1, until every row has hit a stop token or max_new_tokens
(`decode_loop.py`). Only the final [B, G] token / logprob arrays come back to the host.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from genenv_jax.bucketing import next_power_of_two, round_up
from genenv_jax.models import ModelConfig, param_shardings
from genenv_jax.models.decode import CACHE_AXES, Caches, prefill
from genenv_jax.parallel import BATCH_AXES, MeshConfig, abstract_like, logical_to_spec, make_mesh, to_host
from genenv_jax.sampling.buckets import Buckets, bucket_size, rows_per_chunk
from genenv_jax.sampling.decode_loop import DecodeState, LoopOptions, decode_loop
from genenv_jax.sampling.token_selection import SamplingParams
from genenv_jax.sampling.validation import check_param_tree, validate_prompts, validate_stop_tokens

FINISH_STOP = "stop"
FINISH_LENGTH = "length"


@dataclasses.dataclass(frozen=True)
class SampleOutput:
    """Generated continuations, one row per prompt, in prompt order.

    tokens [n, max_new_tokens] int32 and logprobs [n, max_new_tokens] float32 hold each row's
    first `lengths[i]` entries, then `pad_id` / 0. logprobs are log_softmax(logits / temperature)
    of the sampled token (plain log_softmax for greedy). finish_reasons: "stop" (a stop token was
    sampled; it is included unless include_stop_token=False) or "length" (max_new_tokens reached).
    """

    tokens: np.ndarray
    logprobs: np.ndarray
    lengths: np.ndarray
    finish_reasons: tuple[str, ...]

    def token_lists(self) -> list[list[int]]:
        return [row[:n].tolist() for row, n in zip(self.tokens, self.lengths)]

    def logprob_lists(self) -> list[np.ndarray]:
        return [row[:n] for row, n in zip(self.logprobs, self.lengths)]


@dataclasses.dataclass(frozen=True, eq=False)
class SamplerParams:
    """Params placed for one sampler: layers unstacked, in its mesh's shardings and param dtype."""

    tree: Any
    cfg: ModelConfig
    mesh: Mesh


@dataclasses.dataclass(frozen=True)
class PromptBatch:
    """Prompts left-padded to bucketed shapes and placed on the mesh (batch over data x fsdp)."""

    tokens: jax.Array  # [B, P] int32
    mask: jax.Array  # [B, P] bool, True on real prompt tokens
    lengths: jax.Array  # [B] int32 prompt lengths
    active: jax.Array  # [B] bool, False on rows that only pad the batch to its bucket
    num_rows: int  # real prompts (the first num_rows rows)
    new_tokens_bucket: int  # G: cache slots reserved for generation


class Sampler:
    """Batched generation for one model config on one mesh, with compiled programs reused.

    Params: `prepare_params` places a model param tree (from any mesh, or host arrays) for this
    sampler: layers unstacked, weights cast to `cfg.param_dtype`, batch over data x fsdp and heads
    / mlp / vocab over tensor. `generate` accepts raw params too (it then prepares them per call).

    Shapes are bucketed (`Buckets`: powers of two by default). The prefill and decode programs are
    compiled ahead of time, on first use of a (batch, prompt, new-token bucket, sampling mode) key,
    and kept by that key (`compiled_programs`) rather than left to `jax.jit`'s cache, because:
    their in/out shardings depend on the bucketed shapes (a mesh axis is dropped where it does not
    divide a dimension), so one `jax.jit` with fixed shardings cannot serve every bucket; an input
    that does not match a program's shapes or shardings is an error, never a silent recompile; and
    the keys show which buckets a run compiled.

    `prefill_chunk_tokens` bounds the prompt tokens per prefill chunk (memory of the [R, N, P, P]
    scores); `steps_per_sync` decode steps run between loop-exit checks (a GPU while loop copies
    its predicate to the host each iteration; default 8 on GPU, 1 elsewhere), at the cost of up
    to steps_per_sync - 1 wasted steps once every row has finished.
    """

    def __init__(self, cfg: ModelConfig, mesh: Mesh | None = None, *, buckets: Buckets | None = None,
                 prefill_chunk_tokens: int = 16384, steps_per_sync: int | None = None, pad_id: int = 0):
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
        self.batch_shards = math.prod(self.mesh.shape[a] for a in BATCH_AXES)
        self._programs: dict[tuple, Any] = {}

        stacked = param_shardings(cfg, self.mesh)
        layer = jax.tree.map(lambda s: NamedSharding(self.mesh, P(*s.spec[1:])), stacked["layers"])
        self._param_shardings = {**{k: v for k, v in stacked.items() if k != "layers"},
                                 "layers": (layer,) * cfg.num_layers}
        dtype = cfg.jnp_param_dtype
        self._take_layer = jax.jit(lambda layers, i: jax.tree.map(lambda a: a[i].astype(dtype), layers))

    # ----- placement -----
    @property
    def compiled_programs(self) -> tuple[tuple, ...]:
        """Keys of the compiled prefill / decode programs held by this sampler."""
        return tuple(self._programs)

    def _sharding(self, logical: tuple[str | None, ...], shape: tuple[int, ...]) -> NamedSharding:
        return NamedSharding(self.mesh, logical_to_spec(logical, shape, self.mesh))

    def _constrain(self, x: jax.Array, logical: tuple[str | None, ...]) -> jax.Array:
        return jax.lax.with_sharding_constraint(x, self._sharding(logical, x.shape))

    def _replicated(self) -> NamedSharding:
        return NamedSharding(self.mesh, P())

    def _put(self, host: np.ndarray, logical: tuple[str | None, ...]) -> jax.Array:
        """Host array (the same on every process) -> global array on the mesh."""
        host = np.asarray(host)
        return jax.make_array_from_callback(host.shape, self._sharding(logical, host.shape), lambda i: host[i])

    def prepare_params(self, params: Any) -> SamplerParams:
        """Places model params for this sampler (reshards from another mesh; one layer at a time,
        so the extra memory is the placed copy plus one layer)."""
        dtype = self.cfg.jnp_param_dtype
        if isinstance(params, SamplerParams):
            if params.cfg == self.cfg and params.mesh == self.mesh:
                return params
            if jax.tree.structure(params.tree) != jax.tree.structure(self._param_shardings):
                raise ValueError("SamplerParams were prepared for a config with another layout")
            tree = jax.tree.map(lambda a, s: jax.device_put(a.astype(dtype), s), params.tree, self._param_shardings)
            return SamplerParams(tree, self.cfg, self.mesh)
        check_param_tree(self.cfg, params)
        on_device = all(isinstance(a, jax.Array) for a in jax.tree.leaves(params["layers"]))

        def layer(i):  # sliced where the params live: on their devices, or on the host
            if on_device:
                return self._take_layer(params["layers"], i)
            return jax.tree.map(lambda a: np.asarray(a[i]).astype(dtype), params["layers"])

        layers = tuple(jax.device_put(layer(i), self._param_shardings["layers"][i])
                       for i in range(self.cfg.num_layers))
        rest = {k: jax.tree.map(lambda a, s: jax.device_put(jnp.asarray(a).astype(dtype), s), v,
                                self._param_shardings[k])
                for k, v in params.items() if k != "layers"}
        return SamplerParams({**rest, "layers": layers}, self.cfg, self.mesh)

    def prepare_prompts(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> PromptBatch:
        """Left-pads prompts into bucketed [B, P] arrays on the mesh (B a multiple of data x fsdp)."""
        if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        rows = validate_prompts(prompts, self.cfg.vocab_size)
        b = self.buckets
        batch = round_up(bucket_size(len(rows), b.batch, b.min_batch, "batch size"), self.batch_shards)
        prompt_len = bucket_size(max(len(r) for r in rows), b.prompt, b.min_prompt, "prompt length")
        new_tokens = bucket_size(int(max_new_tokens), b.new_tokens, b.min_new_tokens, "max_new_tokens")
        tokens = np.full((batch, prompt_len), self.pad_id, np.int32)
        mask = np.zeros((batch, prompt_len), bool)
        lengths = np.zeros((batch,), np.int32)
        for i, row in enumerate(rows):
            tokens[i, prompt_len - len(row):] = row
            mask[i, prompt_len - len(row):] = True
            lengths[i] = len(row)
        return PromptBatch(tokens=self._put(tokens, ("batch", None)), mask=self._put(mask, ("batch", None)),
                           lengths=self._put(lengths, ("batch",)),
                           active=self._put(np.arange(batch) < len(rows), ("batch",)),
                           num_rows=len(rows), new_tokens_bucket=new_tokens)

    # ----- programs -----
    def _cache_shardings(self, batch: int, cache_len: int):
        shape = (batch, self.cfg.num_kv_heads, cache_len, self.cfg.head_dim)
        s = self._sharding(CACHE_AXES, shape)
        return tuple((s, s) for _ in range(self.cfg.num_layers)), shape

    def _compile(self, key: tuple, fn, args: tuple, in_shardings, out_shardings, donate=()):
        if key not in self._programs:
            jitted = jax.jit(fn, in_shardings=in_shardings, out_shardings=out_shardings, donate_argnums=donate)
            self._programs[key] = jitted.lower(*args).compile()
        return self._programs[key]

    def _prefill_program(self, params: SamplerParams, batch: PromptBatch):
        b, p = batch.tokens.shape
        cache_len = p + batch.new_tokens_bucket
        rows = rows_per_chunk(b, p, self.batch_shards, self.prefill_chunk_tokens)
        cache_sh, _ = self._cache_shardings(b, cache_len)
        logits_sh = self._sharding(("batch", "vocab"), (b, self.cfg.vocab_size))
        fn = functools.partial(prefill, self.cfg, cache_len=cache_len, rows_per_chunk=rows,
                               constrain=self._constrain)
        args = (abstract_like(params.tree, self._param_shardings), batch.tokens, batch.mask)
        return self._compile(("prefill", b, p, cache_len, rows), fn, args,
                             (self._param_shardings, batch.tokens.sharding, batch.mask.sharding),
                             (cache_sh, logits_sh))

    def prefill(self, params: SamplerParams, batch: PromptBatch) -> tuple[Caches, jax.Array]:
        """Fills cache slots [0, P); returns (per-layer caches [B, K, P + G, H], last logits [B, V])."""
        return self._prefill_program(params, batch)(params.tree, batch.tokens, batch.mask)

    def _decode_program(self, params: SamplerParams, batch: PromptBatch, num_stop_ids: int, greedy: bool,
                        top_k: int, use_top_p: bool):
        b, p = batch.tokens.shape
        g = batch.new_tokens_bucket
        cache_sh, cache_shape = self._cache_shardings(b, p + g)
        logits_sh = self._sharding(("batch", "vocab"), (b, self.cfg.vocab_size))
        rep, row_sh = self._replicated(), self._sharding(("batch",), (b,))
        out_sh = self._sharding(("batch", None), (b, g))
        options = LoopOptions(steps_per_sync=self.steps_per_sync, pad_id=self.pad_id, greedy=greedy, top_k=top_k,
                              use_top_p=use_top_p)
        fn = functools.partial(decode_loop, self.cfg, self._constrain, options)
        scalar = lambda dtype: jax.ShapeDtypeStruct((), dtype, sharding=rep)  # noqa: E731
        args = (abstract_like(params.tree, self._param_shardings),
                jax.tree.map(lambda s: jax.ShapeDtypeStruct(cache_shape, self.cfg.jnp_dtype, sharding=s), cache_sh),
                jax.ShapeDtypeStruct((b, self.cfg.vocab_size), jnp.float32, sharding=logits_sh),
                batch.mask, batch.lengths, batch.active,
                jax.ShapeDtypeStruct((num_stop_ids,), jnp.int32, sharding=rep),
                scalar(jnp.int32), scalar(jnp.uint32), scalar(jnp.uint32), scalar(jnp.float32), scalar(jnp.float32))
        in_shardings = (self._param_shardings, cache_sh, logits_sh, batch.mask.sharding, row_sh, row_sh,
                        *([rep] * 6))
        out_shardings = DecodeState(steps=rep, caches=cache_sh, last_tokens=row_sh, tokens=out_sh, logprobs=out_sh,
                                    lengths=row_sh, stopped=row_sh, done=row_sh)
        return self._compile(("decode", b, p, g, num_stop_ids, greedy, top_k, use_top_p), fn, args,
                             in_shardings, out_shardings, donate=(1,))

    def decode(self, params: SamplerParams, batch: PromptBatch, caches: Caches,
               last_logits: jax.Array, *, max_new_tokens: int, sampling: SamplingParams = SamplingParams(),
               seed: int = 0, stop_tokens: Sequence[int] = ()) -> DecodeState:
        """Samples up to max_new_tokens per row on device; `caches` are donated (updated in place).

        Returns the loop's final `DecodeState` (device arrays): tokens [B, G], logprobs [B, G],
        lengths [B], stopped [B], steps (tokens generated per row, loop overrun included) and the
        final caches (the same buffers).
        """
        if not isinstance(max_new_tokens, (int, np.integer)) or not 1 <= max_new_tokens <= batch.new_tokens_bucket:
            raise ValueError(f"max_new_tokens must be an int in [1, {batch.new_tokens_bucket}], got {max_new_tokens!r}")
        if not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        seed = int(seed) % 2 ** 64  # any int; its low and high 32 bits seed the key
        stops = validate_stop_tokens(stop_tokens, self.cfg.vocab_size)
        stop_ids = np.full((max(4, next_power_of_two(len(stops))),), -1, np.int32)  # -1 never matches
        stop_ids[:len(stops)] = stops
        greedy = sampling.greedy
        top_k, use_top_p = (0, False) if greedy else (sampling.top_k, sampling.top_p < 1.0)
        program = self._decode_program(params, batch, len(stop_ids), greedy, top_k, use_top_p)
        scalars = (np.int32(max_new_tokens), np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32),
                   np.float32(sampling.temperature or 1.0),  # unused when greedy
                   np.float32(sampling.top_p))
        put = functools.partial(jax.device_put, device=self._replicated())
        return program(params.tree, caches, last_logits, batch.mask, batch.lengths, batch.active, put(stop_ids),
                       *map(put, scalars))

    # ----- public entry points -----
    def generate(self, params: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                 stop_tokens: Sequence[int] = (), include_stop_token: bool = True) -> SampleOutput:
        """Generates a continuation for every prompt (a list of token ids). See `SampleOutput`."""
        sampling_params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
        params = self.prepare_params(params)
        batch = self.prepare_prompts(prompts, max_new_tokens)
        caches, last_logits = self.prefill(params, batch)
        out = self.decode(params, batch, caches, last_logits, max_new_tokens=max_new_tokens,
                          sampling=sampling_params, seed=seed, stop_tokens=stop_tokens)
        del caches  # donated to decode
        n = batch.num_rows
        tokens = to_host(out.tokens)[:n, :max_new_tokens].copy()
        logprobs = to_host(out.logprobs)[:n, :max_new_tokens].copy()
        lengths = to_host(out.lengths)[:n].copy()
        stopped = to_host(out.stopped)[:n]
        del out  # the cache buffers go with it
        if not include_stop_token:
            rows = np.nonzero(stopped)[0]
            lengths[rows] -= 1
            tokens[rows, lengths[rows]] = self.pad_id
            logprobs[rows, lengths[rows]] = 0.0
        reasons = tuple(FINISH_STOP if s else FINISH_LENGTH for s in stopped)
        return SampleOutput(tokens=tokens, logprobs=logprobs, lengths=lengths, finish_reasons=reasons)


@functools.lru_cache(maxsize=8)
def _shared_sampler(cfg: ModelConfig, mesh: Mesh, pad_id: int) -> Sampler:
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
    `Sampler.generate` (temperature, top_k, top_p, seed, stop_tokens, include_stop_token).
    """
    mesh = params_mesh(params) if mesh is None else mesh
    return _shared_sampler(cfg, mesh, pad_id).generate(params, prompts, max_new_tokens=max_new_tokens, **kwargs)

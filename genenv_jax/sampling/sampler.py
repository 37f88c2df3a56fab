"""`Sampler`: jitted prefill + on-device decode loop over a donated KV cache, for one model config
and one mesh. Compiled programs are kept per bucketed shape and reused across calls.

Flow of one `generate` call: prompts (lists of token ids) are left-padded into bucketed [B, P]
arrays on the mesh; `prefill` fills cache slots [0, P) and returns the last slot's logits; `decode`
samples the first token from them and then runs a `lax.while_loop` that feeds one token per row per
step, writing cache slot P + i - 1, until every row has hit a stop token or max_new_tokens. Only the
final [B, G] token / logprob arrays come back to the host.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from genenv_jax import sharding
from genenv_jax.models.config import ModelConfig
from genenv_jax.models.qwen2 import param_shapes
from genenv_jax.sampling import cached_decoder
from genenv_jax.sampling.buckets import Buckets, bucket_size, next_power_of_two, round_up, rows_per_chunk
from genenv_jax.sampling.token_selection import SamplingParams, select_tokens

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


@functools.lru_cache(maxsize=16)
def _expected_param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    return {jax.tree_util.keystr(k): v.shape for k, v in jax.tree_util.tree_leaves_with_path(param_shapes(cfg))}


def _check_param_tree(cfg: ModelConfig, params: Any) -> None:
    """Raises a ValueError naming the first param whose path or shape does not fit `cfg`."""
    want = _expected_param_shapes(cfg)
    try:
        got = {jax.tree_util.keystr(k): tuple(np.shape(v)) for k, v in jax.tree_util.tree_leaves_with_path(params)}
    except Exception as e:  # noqa: BLE001 - any non-tree input
        raise ValueError(f"params must be the model's param tree: {e}") from None
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    if missing or extra:
        raise ValueError(f"params do not match the config: missing {missing[:5]}, unexpected {extra[:5]}")
    for path, shape in want.items():
        if got[path] != shape:
            raise ValueError(f"param {path} has shape {got[path]}, the config needs {shape}")


def _validate_prompts(prompts: Sequence[Sequence[int]], vocab_size: int) -> list[np.ndarray]:
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, (list, tuple, np.ndarray)):
        raise TypeError(f"prompts must be a list of token-id lists, got {type(prompts).__name__}")
    if len(prompts) == 0:
        raise ValueError("prompts is empty")
    rows = []
    for i, prompt in enumerate(prompts):
        row = np.asarray(prompt)
        if row.ndim != 1 or row.size == 0:
            raise ValueError(f"prompt {i} must be a non-empty 1-D list of token ids, got shape {row.shape}")
        if row.dtype.kind not in "iu":
            raise TypeError(f"prompt {i} must hold integer token ids, got dtype {row.dtype}")
        if row.min() < 0 or row.max() >= vocab_size:
            raise ValueError(f"prompt {i} has token ids outside [0, {vocab_size}): "
                             f"min {row.min()}, max {row.max()}")
        rows.append(row.astype(np.int32))
    return rows


def _validate_stop_tokens(stop_tokens: Sequence[int], vocab_size: int) -> list[int]:
    ids = [int(t) for t in np.asarray(list(stop_tokens), dtype=np.int64).reshape(-1)]
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"stop_tokens {bad} are outside the vocabulary [0, {vocab_size})")
    return ids


def _to_host(x: jax.Array) -> np.ndarray:
    if x.is_fully_addressable:
        return np.asarray(jax.device_get(x))
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def _abstract(tree: Any, shardings: Any) -> Any:
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings)


class Sampler:
    """Batched generation for one model config on one mesh, with compiled programs reused.

    Params: `prepare_params` places a model param tree (from any mesh, or host arrays) for this
    sampler: layers unstacked, weights cast to `cfg.param_dtype`, batch over data x fsdp and heads
    / mlp / vocab over tensor. `generate` accepts raw params too (it then prepares them per call).

    Shapes are bucketed (`Buckets`: powers of two by default); programs are compiled on first use
    per (batch, prompt, new-token bucket, sampling mode) and kept in `compiled_programs`.

    `prefill_chunk_tokens` bounds the prompt tokens per prefill chunk (memory of the [R, N, P, P]
    scores); `steps_per_sync` decode steps run between loop-exit checks (a GPU while loop copies
    its predicate to the host each iteration; default 8 on GPU, 1 elsewhere), at the cost of up
    to steps_per_sync - 1 wasted steps once every row has finished.
    """

    def __init__(self, cfg: ModelConfig, mesh: Mesh | None = None, *, buckets: Buckets | None = None,
                 prefill_chunk_tokens: int = 16384, steps_per_sync: int | None = None, pad_id: int = 0):
        self.cfg = cfg
        self.mesh = sharding.make_mesh() if mesh is None else mesh
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
        self.batch_shards = math.prod(self.mesh.shape[a] for a in sharding.BATCH_AXES)
        self._programs: dict[tuple, Any] = {}

        stacked = sharding.param_shardings(cfg, self.mesh)
        layer = jax.tree.map(lambda s: NamedSharding(self.mesh, P(*s.spec[1:])), stacked["layers"])
        self._param_shardings = {**{k: v for k, v in stacked.items() if k != "layers"},
                                 "layers": (layer,) * cfg.num_layers}
        dtype = cfg.jnp_param_dtype
        self._take_layer = jax.jit(lambda layers, i: jax.tree.map(lambda a: a[i].astype(dtype), layers))
        self._teacher_forced = jax.jit(functools.partial(_teacher_forced, cfg, self._constrain))

    # ----- placement -----
    @property
    def compiled_programs(self) -> tuple[tuple, ...]:
        """Keys of the compiled prefill / decode programs held by this sampler."""
        return tuple(self._programs)

    def _sharding(self, logical: tuple[str | None, ...], shape: tuple[int, ...]) -> NamedSharding:
        return NamedSharding(self.mesh, sharding.logical_to_spec(logical, shape, self.mesh))

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
        _check_param_tree(self.cfg, params)
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
        rows = _validate_prompts(prompts, self.cfg.vocab_size)
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
        s = self._sharding(("batch", "kv_heads", None, None), shape)
        return tuple((s, s) for _ in range(self.cfg.num_layers)), shape

    def _compile(self, key: tuple, fn, args: tuple, in_shardings, out_shardings, donate=()):
        if key not in self._programs:
            jitted = jax.jit(fn, in_shardings=in_shardings, out_shardings=out_shardings, donate_argnums=donate)
            with sharding.mesh_context(self.mesh):
                self._programs[key] = jitted.lower(*args).compile()
        return self._programs[key]

    def _prefill_program(self, params: SamplerParams, batch: PromptBatch):
        b, p = batch.tokens.shape
        cache_len = p + batch.new_tokens_bucket
        rows = rows_per_chunk(b, p, self.batch_shards, self.prefill_chunk_tokens)
        cache_sh, _ = self._cache_shardings(b, cache_len)
        logits_sh = self._sharding(("batch", "vocab"), (b, self.cfg.vocab_size))
        fn = functools.partial(cached_decoder.prefill, self.cfg, cache_len=cache_len, rows_per_chunk=rows,
                               constrain=self._constrain)
        args = (_abstract(params.tree, self._param_shardings), batch.tokens, batch.mask)
        return self._compile(("prefill", b, p, cache_len, rows), fn, args,
                             (self._param_shardings, batch.tokens.sharding, batch.mask.sharding),
                             (cache_sh, logits_sh))

    def prefill(self, params: SamplerParams, batch: PromptBatch) -> tuple[cached_decoder.Caches, jax.Array]:
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
        fn = functools.partial(_decode_loop, self.cfg, self._constrain, self.steps_per_sync, self.pad_id,
                               greedy, top_k, use_top_p)
        scalar = lambda dtype: jax.ShapeDtypeStruct((), dtype, sharding=rep)  # noqa: E731
        args = (_abstract(params.tree, self._param_shardings),
                jax.tree.map(lambda s: jax.ShapeDtypeStruct(cache_shape, self.cfg.jnp_dtype, sharding=s), cache_sh),
                jax.ShapeDtypeStruct((b, self.cfg.vocab_size), jnp.float32, sharding=logits_sh),
                batch.mask, batch.lengths, batch.active,
                jax.ShapeDtypeStruct((num_stop_ids,), jnp.int32, sharding=rep),
                scalar(jnp.int32), scalar(jnp.uint32), scalar(jnp.uint32), scalar(jnp.float32), scalar(jnp.float32))
        in_shardings = (self._param_shardings, cache_sh, logits_sh, batch.mask.sharding, row_sh, row_sh,
                        *([rep] * 6))
        out_shardings = {"tokens": out_sh, "logprobs": out_sh, "lengths": row_sh, "stopped": row_sh,
                         "steps": rep, "caches": cache_sh}
        return self._compile(("decode", b, p, g, num_stop_ids, greedy, top_k, use_top_p), fn, args,
                             in_shardings, out_shardings, donate=(1,))

    def decode(self, params: SamplerParams, batch: PromptBatch, caches: cached_decoder.Caches,
               last_logits: jax.Array, *, max_new_tokens: int, sampling: SamplingParams = SamplingParams(),
               seed: int = 0, stop_tokens: Sequence[int] = ()) -> dict[str, jax.Array]:
        """Samples up to max_new_tokens per row on device; `caches` are donated (updated in place).

        Returns device arrays: tokens [B, G], logprobs [B, G], lengths [B], stopped [B], steps
        (tokens generated per row, loop overrun included) and the final caches (the same buffers).
        """
        if not isinstance(max_new_tokens, (int, np.integer)) or not 1 <= max_new_tokens <= batch.new_tokens_bucket:
            raise ValueError(f"max_new_tokens must be an int in [1, {batch.new_tokens_bucket}], got {max_new_tokens!r}")
        if not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        seed = int(seed) % 2 ** 64  # any int; its low and high 32 bits seed the key
        stops = _validate_stop_tokens(stop_tokens, self.cfg.vocab_size)
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
        del caches, out["caches"]  # donated to decode; drop the returned buffers now
        n = batch.num_rows
        tokens = _to_host(out["tokens"])[:n, :max_new_tokens].copy()
        logprobs = _to_host(out["logprobs"])[:n, :max_new_tokens].copy()
        lengths = _to_host(out["lengths"])[:n].copy()
        stopped = _to_host(out["stopped"])[:n]
        if not include_stop_token:
            rows = np.nonzero(stopped)[0]
            lengths[rows] -= 1
            tokens[rows, lengths[rows]] = self.pad_id
            logprobs[rows, lengths[rows]] = 0.0
        reasons = tuple(FINISH_STOP if s else FINISH_LENGTH for s in stopped)
        return SampleOutput(tokens=tokens, logprobs=logprobs, lengths=lengths, finish_reasons=reasons)

    def teacher_forced_logits(self, params: Any, prompts: Sequence[Sequence[int]],
                              continuations: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Logits [len(continuation_i), V] predicting each continuation token, computed through the
        sampler's own prefill and cached decode steps (the path `generate` uses). For tests."""
        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        conts = _validate_prompts(continuations, self.cfg.vocab_size)
        longest = max(len(c) for c in conts)
        params = self.prepare_params(params)
        batch = self.prepare_prompts(prompts, longest)
        forced = np.full((batch.tokens.shape[0], longest), self.pad_id, np.int32)
        for i, c in enumerate(conts):
            forced[i, :len(c)] = c
        caches, last_logits = self.prefill(params, batch)
        with sharding.mesh_context(self.mesh):
            out = self._teacher_forced(params.tree, caches, last_logits, batch.mask, batch.lengths, self._put(forced, ("batch", None)))
        host = _to_host(out)
        return [host[i, :len(c)] for i, c in enumerate(conts)]


def _step_inputs(i: jax.Array, prompt_mask: jax.Array, prompt_lengths: jax.Array, cache_len: int):
    """For the step that feeds generated token i - 1: its cache slot, positions [B], key mask [B, S]."""
    prompt_len = prompt_mask.shape[1]
    slot = prompt_len + i - 1
    slots = jnp.arange(cache_len)
    in_prompt = jnp.pad(prompt_mask, ((0, 0), (0, cache_len - prompt_len)))  # [B, S]
    key_mask = in_prompt | ((slots >= prompt_len) & (slots <= slot))[None, :]
    return slot, prompt_lengths + i - 1, key_mask


def _decode_loop(cfg: ModelConfig, constrain, steps_per_sync: int, pad_id: int, greedy: bool, top_k: int,
                 use_top_p: bool, params, caches, last_logits, prompt_mask, prompt_lengths, active, stop_ids,
                 max_new_tokens, seed_low, seed_high, temperature, top_p) -> dict[str, jax.Array]:
    """The decode program: first token from the prefill logits, then a while loop of decode steps."""
    batch = prompt_mask.shape[0]
    cache_len = caches[0][0].shape[2]
    width = cache_len - prompt_mask.shape[1]  # G
    key = jax.random.fold_in(jax.random.key(seed_low), seed_high)
    row_keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.arange(batch))
    select = functools.partial(select_tokens, row_keys=row_keys, temperature=temperature, top_p=top_p,
                               greedy=greedy, top_k=top_k, use_top_p=use_top_p)

    def record(state, i, tokens, logprobs):
        done = state["done"]
        is_stop = jnp.any(tokens[:, None] == stop_ids[None, :], axis=-1)
        return {
            **state,
            "last": tokens,
            "tokens": jax.lax.dynamic_update_slice(state["tokens"], jnp.where(done, pad_id, tokens)[:, None], (0, i)),
            "logprobs": jax.lax.dynamic_update_slice(state["logprobs"], jnp.where(done, 0.0, logprobs)[:, None],
                                                     (0, i)),
            "lengths": state["lengths"] + (~done).astype(jnp.int32),
            "stopped": state["stopped"] | (~done & is_stop),
            "done": done | is_stop | (i + 1 >= max_new_tokens),
            "i": i + 1,
        }

    def one_step(_, state):
        slot, positions, key_mask = _step_inputs(state["i"], prompt_mask, prompt_lengths, cache_len)
        # Past the last bucket slot (only in the overrun after every row is done) the write clamps.
        logits, new_caches = cached_decoder.decode_step(cfg, params, state["caches"], state["last"], positions,
                                                        slot, key_mask, constrain)
        tokens, logprobs = select(logits, step=state["i"])
        return record({**state, "caches": new_caches}, state["i"], tokens, logprobs)

    # Output columns get steps_per_sync - 1 spare slots for the overrun of the last block.
    state = {
        "i": jnp.int32(0), "caches": caches, "last": jnp.zeros((batch,), jnp.int32),
        "tokens": jnp.full((batch, width + steps_per_sync), pad_id, jnp.int32),
        "logprobs": jnp.zeros((batch, width + steps_per_sync), jnp.float32),
        "lengths": jnp.zeros((batch,), jnp.int32), "stopped": jnp.zeros((batch,), bool), "done": ~active,
    }
    tokens, logprobs = select(last_logits, step=jnp.int32(0))
    state = record(state, jnp.int32(0), tokens, logprobs)
    state = jax.lax.while_loop(
        lambda s: (s["i"] < max_new_tokens) & ~jnp.all(s["done"]),
        lambda s: jax.lax.fori_loop(0, steps_per_sync, one_step, s),
        state)
    return {"tokens": state["tokens"][:, :width], "logprobs": state["logprobs"][:, :width],
            "lengths": state["lengths"], "stopped": state["stopped"], "steps": state["i"],
            "caches": state["caches"]}


def _teacher_forced(cfg: ModelConfig, constrain, params, caches, last_logits, prompt_mask, prompt_lengths,
                    forced) -> jax.Array:
    """Logits [B, T, V]: the prefill's, then those after feeding forced[:, j] for j < T - 1."""
    cache_len = caches[0][0].shape[2]

    def step(caches, xs):
        i, tokens = xs
        slot, positions, key_mask = _step_inputs(i, prompt_mask, prompt_lengths, cache_len)
        logits, caches = cached_decoder.decode_step(cfg, params, caches, tokens, positions, slot, key_mask,
                                                    constrain)
        return caches, logits

    steps = forced.shape[1] - 1
    _, later = jax.lax.scan(step, caches, (jnp.arange(1, steps + 1), forced[:, :steps].T))
    return jnp.concatenate([last_logits[:, None], later.swapaxes(0, 1)], axis=1)


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
        return sharding.make_mesh(sharding.MeshConfig(data=1, fsdp=1, tensor=1), devices=devices)
    return sharding.make_mesh(devices=devices)


def generate(cfg: ModelConfig, params: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
             mesh: Mesh | None = None, pad_id: int = 0, **kwargs: Any) -> SampleOutput:
    """One-call generation: `Sampler(cfg, mesh).generate(params, prompts, ...)`, with the sampler
    (and so its compiled programs) kept for later calls with the same cfg and mesh.

    `mesh` defaults to the one the params live on (`params_mesh`). Keyword args are those of
    `Sampler.generate` (temperature, top_k, top_p, seed, stop_tokens, include_stop_token).
    """
    mesh = params_mesh(params) if mesh is None else mesh
    return _shared_sampler(cfg, mesh, pad_id).generate(params, prompts, max_new_tokens=max_new_tokens, **kwargs)

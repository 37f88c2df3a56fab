"""The compiled device programs of one `Sampler.generate` call, bound to its params, prompts and
sampling settings: the `scheduler.SlotPrograms` the host scheduler drives.

Each program is compiled ahead of time on first use of its shape key and kept by the sampler
(`Sampler.compiled_programs`):
  ("start", B, P, W, N, G)                                   empty state
  ("refill", R, B, P, W, N, G, rows per chunk, stops, mode, T, F)  prefill R prompts into free slots
                                                             (T: the remainders' bucket after reused
                                                             prefixes, F the pool size; 0, 0 without)
  ("fill", R, P, T, F, rows per chunk)                       prefill R shared prefixes into the pool
  ("store", R, B, P, W, F)                                   copy R finished slot rows into the pool
  ("decode", B, P, W, N, G, stops, mode)                     one decode segment
  ("resize", B, P, W, W', N, G)                              cut / grow the window
  ("compact", B, B', P, W, N, G)                             gather the live slots into B' < B
with B slots (the call's slot count, or a smaller bucket once the queue is empty and `compact`
has moved the live rows into fewer slots), P prompt bucket, W window, N prompts (bucketed), G new-token bucket, R refilled rows
(bucketed), mode the token-choice options. `refill` and `decode` take the state donated (updated
in place); `resize` and `compact` make a new one (its caches change shape); `fill` and `store`
take the prefix pool donated (`prefix_cache.py`).
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
import numpy as np

from genenv_jax.core.bucketing import length_bucket, next_power_of_two, round_up
from genenv_jax.models.decode import CACHE_AXES
from genenv_jax.parallel import abstract_like, to_host
from genenv_jax.sampling.buckets import bucket_size, rows_per_chunk
from genenv_jax.sampling.decode_loop import LoopOptions, decode_segment
from genenv_jax.sampling.inputs import PromptBatch, SamplerParams
from genenv_jax.sampling.prefix_cache import PrefillCounts, PrefixCache, Reuse
from genenv_jax.sampling.refill import PoolPrefix, SelectOptions, fill_entries, refill, store_slots
from genenv_jax.sampling.slot_state import DecodeState, compact_slots, empty_state, resize_window


class CallPrograms:
    """Programs for one call: `slots` B slots over `batch`'s prompts, with fixed sampling settings.

    `sampler` is the `Sampler` (not imported here: it imports this module) whose placement helpers
    (`sharding`, `put`, `constrain`, ...) and program cache (`compiled`) these use.

    `stop_ids` [n] int32 (-1 never matches); `scalars` = (seed low, seed high, temperature, top_p)
    as numpy scalars; `select` the token-choice options. `cache`: the params' prefix pool (None:
    no reuse); `retain`: store every finished row's sequence in it for later calls.
    """

    def __init__(self, sampler: Any, params: SamplerParams, batch: PromptBatch, *, slots: int,
                 select: SelectOptions, stop_ids: np.ndarray, scalars: tuple, cache: PrefixCache | None = None,
                 retain: bool = False):
        self.s, self.params, self.batch, self.select = sampler, params, batch, select
        self.cache, self.retain = cache, retain and cache is not None
        self.slots = slots
        self.prompt_len = batch.tokens.shape[1]
        self.num_prompts = next_power_of_two(batch.num_rows)  # N: results rows, bucketed
        self.new_tokens = batch.new_tokens_bucket
        rep = sampler.replicated()
        put = functools.partial(jax.device_put, device=rep)
        self.stop_ids = put(stop_ids)
        self.scalars = tuple(map(put, scalars))
        self._scalar_specs = tuple(jax.ShapeDtypeStruct((), np.asarray(x).dtype, sharding=rep) for x in scalars)
        self.prompts = [batch.tokens[i, self.prompt_len - n:] for i, n in enumerate(batch.lengths)]
        self.counts = PrefillCounts(requested=int(batch.lengths.sum()), computed=int(batch.lengths.sum()))
        self.reuses: list[Reuse] = [Reuse(None, 0)] * batch.num_rows
        if self.cache is not None:
            self._plan()

    # ----- shapes -----
    def _dims(self, window: int, slots: int | None = None) -> tuple[int, ...]:
        return (self.slots if slots is None else slots, self.prompt_len, window, self.num_prompts, self.new_tokens)

    def _state_specs(self, window: int, slots: int | None = None) -> tuple[DecodeState, DecodeState]:
        """(abstract state, its shardings) for a window and slot count (default: the call's B):
        slots over the batch axes, results replicated."""
        b, p, w, n, g = self._dims(window, slots)
        cfg, s = self.s.cfg, self.s
        cache_shape = (b, cfg.num_kv_heads, p + w, cfg.head_dim)
        cache_sh = s.sharding(CACHE_AXES, cache_shape)
        row, rep = s.sharding(("batch",), (b,)), s.replicated()
        shardings = DecodeState(
            caches=tuple((cache_sh, cache_sh) for _ in range(cfg.num_layers)),
            prompt_mask=s.sharding(("batch", None), (b, p)), prompt_lengths=row, prompt_ids=row, caps=row,
            steps=row, last_tokens=row, done=row, tokens=rep, logprobs=rep, lengths=rep, stopped=rep,
            decode_steps=rep)
        shapes = jax.eval_shape(self._empty_fn(window, b))
        abstract = jax.tree.map(lambda a, sh: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh), shapes, shardings)
        return abstract, shardings

    def refill_bucket(self, count: int) -> int:
        """R for a refill of `count` prompts, and B' for `count` live rows compacted: a power of
        two, rounded up to a multiple of data x fsdp, at most B."""
        return min(self.slots, round_up(next_power_of_two(count), self.s.batch_shards))

    def _params_spec(self):
        return abstract_like(self.params.tree, self.s.param_shardings)

    # ----- programs (scheduler.SlotPrograms) -----
    def _empty_fn(self, window: int, slots: int | None = None):
        b, p, w, n, g = self._dims(window, slots)
        return functools.partial(empty_state, self.s.cfg, self.s.constrain, slots=b, prompt_len=p, window=w,
                                 num_prompts=n, new_tokens=g, pad_id=self.s.pad_id)

    def start(self, window: int) -> DecodeState:
        def build():
            return self._empty_fn(window), (), (), self._state_specs(window)[1], ()
        return self.s.compiled(("start",) + self._dims(window), build)()

    def refill(self, state: DecodeState, prompt_ids: np.ndarray, slots: np.ndarray) -> DecodeState:
        """Starts prompts `prompt_ids` in slots `slots` (host int arrays of one length)."""
        s, batch, window, num_slots = self.s, self.batch, state.window, state.done.shape[0]
        p = self.prompt_len
        rows = min(num_slots, self.refill_bucket(len(prompt_ids)))  # R
        pad = rows - len(prompt_ids)
        fill = lambda a, v: np.concatenate([a[prompt_ids], np.full((pad, *a.shape[1:]), v, a.dtype)])  # noqa: E731
        reuses = [self.reuses[i] for i in prompt_ids]
        prefix, remainder = None, 0
        if any(r.length for r in reuses):
            for r in reuses:
                self.cache.unpin(r)
            index = np.full((rows, p), -1, np.int64)
            for row, (i, r) in enumerate(zip(prompt_ids, reuses)):
                if r.length:
                    begin = p - int(batch.lengths[i])
                    index[row, begin:begin + r.length] = self.cache.token_index(r.entry, 0, r.length)
            longest = max(int(batch.lengths[i]) - r.length for i, r in zip(prompt_ids, reuses))
            remainder = min(p, bucket_size(longest, None, s.buckets.min_prompt, "prompt remainder", length_bucket))
            reused = np.array([r.length for r in reuses] + [0] * pad, np.int32)
            prefix = (index.astype(np.int32), reused)
        tokens, mask = fill(batch.tokens, s.pad_id), fill(batch.mask, False)
        if prefix is not None:  # the remainder: the last T columns, after each row's reused prefix
            tokens = tokens[:, p - remainder:]
            starts = p - fill(batch.lengths, 0) + prefix[1]  # [R]: first computed prompt slot
            mask = mask[:, p - remainder:] & (np.arange(p - remainder, p)[None, :] >= starts[:, None])
        else:  # the last T columns: the bucket of this refill's longest prompt, not the call's
            longest = max(int(batch.lengths[i]) for i in prompt_ids)
            remainder = min(p, bucket_size(longest, None, s.buckets.min_prompt, "prompt", length_bucket))
            tokens, mask = tokens[:, p - remainder:], mask[:, p - remainder:]
        host = (tokens, mask, fill(batch.mask, False), fill(batch.lengths, 0),
                np.concatenate([slots, np.full(pad, num_slots)]).astype(np.int32),
                np.concatenate([prompt_ids, np.full(pad, self.num_prompts)]).astype(np.int32),
                fill(batch.caps, 1))
        logical = (("batch", None),) * 3 + (("batch",),) * 4
        args = tuple(s.put(a, axes) for a, axes in zip(host, logical))
        pool_arg = ()
        if prefix is not None:
            pool_arg = (PoolPrefix(self.cache.pool, s.put(prefix[0], ("batch", None)), s.put(prefix[1], ("batch",))),)
        chunk = rows_per_chunk(rows, max(remainder, 1), s.batch_shards, s.prefill_chunk_tokens)

        def build():
            abstract, shardings = self._state_specs(window, num_slots)
            fn = functools.partial(refill, s.cfg, s.constrain, self.select, chunk)
            extra = tuple(abstract_like(a, jax.tree.map(lambda x: x.sharding, a)) for a in pool_arg)
            in_sh = (s.param_shardings, shardings, *(a.sharding for a in args), self.stop_ids.sharding,
                     *(x.sharding for x in self._scalar_specs), *(jax.tree.map(lambda x: x.sharding, a) for a in pool_arg))
            return (fn, (self._params_spec(), abstract, *args, self.stop_ids, *self._scalar_specs, *extra), in_sh,
                    shardings, (1,))
        pool_size = self.cache.capacity if prefix is not None else 0
        key = ("refill", rows, *self._dims(window, num_slots), chunk, len(self.stop_ids), self.select, remainder,
               pool_size)
        return s.compiled(key, build)(self.params.tree, state, *args, self.stop_ids, *self.scalars, *pool_arg)

    # ----- the prefix pool -----
    def _plan(self) -> None:
        """Creates the call's shared prefixes in the pool, then fixes each prompt's reuse."""
        cache = self.cache
        cache.begin_call()
        planned = cache.plan_shared(self.prompts)
        if cache.pool is None and (planned or self.retain):  # allocated once something will be kept
            cache.pool = self.s.new_pool(cache.capacity)
        for wave in sorted({x.wave for x in planned}):
            self._fill([x for x in planned if x.wave == wave])
        self.reuses = [cache.reuse(prompt) for prompt in self.prompts]
        c = cache.counts
        self.counts = PrefillCounts(requested=c.requested, computed=c.computed, reused=c.reused, created=c.created)

    def _fill(self, entries: Sequence[Any]) -> None:
        """Prefills shared prefixes (`prefix_cache.SharedPrefix`) into the pool, one program call."""
        s, cache = self.s, self.cache
        p = length_bucket(max(len(x.tokens) for x in entries))
        p = max(p, s.buckets.min_prompt)
        rows = round_up(next_power_of_two(len(entries)), s.batch_shards)
        longest = max(len(x.tokens) - x.source.length for x in entries)
        remainder = min(p, bucket_size(longest, None, s.buckets.min_prompt, "prefix remainder", length_bucket))
        tokens = np.full((rows, remainder), s.pad_id, np.int32)
        mask = np.zeros((rows, remainder), bool)
        index = np.full((rows, p), -1, np.int64)
        target = np.full((rows, p), cache.capacity, np.int64)
        reused = np.zeros(rows, np.int32)
        for row, x in enumerate(entries):
            n, c = len(x.tokens), x.source.length
            tokens[row, remainder - (n - c):], mask[row, remainder - (n - c):] = x.tokens[c:], True
            if c:
                index[row, p - n:p - n + c] = cache.token_index(x.source.entry, 0, c)
            target[row, p - n + x.first:] = cache.token_index(x.entry, x.first, n)  # shared pages stay
            reused[row] = c
        host = (tokens, mask, index.astype(np.int32), reused, target.astype(np.int32))
        logical = (("batch", None),) * 3 + (("batch",), ("batch", None))
        args = tuple(s.put(a, axes) for a, axes in zip(host, logical))
        chunk = rows_per_chunk(rows, remainder, s.batch_shards, s.prefill_chunk_tokens)
        pool_sh = jax.tree.map(lambda x: x.sharding, cache.pool)

        def build():
            fn = functools.partial(fill_entries, s.cfg, s.constrain, chunk)
            return (fn, (self._params_spec(), abstract_like(cache.pool, pool_sh), *args),
                    (s.param_shardings, pool_sh, *(a.sharding for a in args)), pool_sh, (1,))
        key = ("fill", rows, p, remainder, cache.capacity, chunk)
        cache.pool = s.compiled(key, build)(self.params.tree, cache.pool, *args)

    def retire(self, state: DecodeState, slots: np.ndarray, prompt_ids: np.ndarray, steps: np.ndarray) -> None:
        """Stores finished rows (slots [R], their prompts and generated counts) in the pool, when
        retaining: their prompt and every generated token but the last (the one without keys)."""
        if not self.retain or not len(slots):
            return
        s, cache, window, num_slots = self.s, self.cache, state.window, state.done.shape[0]
        p, width = self.prompt_len, self.prompt_len + window
        plans = []
        for slot, i, n in zip(slots, prompt_ids, steps):
            target = cache.store_target(int(i), self.prompts[i], self.reuses[i], int(n))
            if target is not None:
                plans.append((int(slot), int(i), int(n), *target))
        if not plans:
            return
        rows = min(num_slots, self.refill_bucket(len(plans)))
        index = np.full((rows, width), cache.capacity, np.int64)
        slot_rows = np.full(rows, 0, np.int32)
        for row, (slot, i, n, entry, first) in enumerate(plans):
            length = int(self.batch.lengths[i]) + n - 1
            begin = p - int(self.batch.lengths[i])  # the row's token 0
            index[row, begin + first:begin + length] = cache.token_index(entry, first, length)
            slot_rows[row] = slot
        rows_arg = s.put(slot_rows, ("batch",))
        index_arg = s.put(index.astype(np.int32), ("batch", None))
        pool_sh = jax.tree.map(lambda x: x.sharding, cache.pool)

        def build():
            abstract, shardings = self._state_specs(window, num_slots)
            return (store_slots, (abstract_like(cache.pool, pool_sh), abstract.caches, rows_arg, index_arg),
                    (pool_sh, shardings.caches, rows_arg.sharding, index_arg.sharding), pool_sh, (0,))
        key = ("store", rows, num_slots, p, window, cache.capacity)
        cache.pool = s.compiled(key, build)(cache.pool, state.caches, rows_arg, index_arg)

    def decode(self, state: DecodeState, refill_at: int) -> DecodeState:
        s, window, slots = self.s, state.window, state.done.shape[0]
        refill_at = jax.device_put(np.int32(refill_at), s.replicated())

        def build():
            abstract, shardings = self._state_specs(window, slots)
            options = LoopOptions(steps_per_sync=s.steps_per_sync, select=self.select)
            fn = functools.partial(decode_segment, s.cfg, s.constrain, options)
            args = (self._params_spec(), abstract, self.stop_ids, refill_at, *self._scalar_specs)
            return fn, args, (s.param_shardings, shardings, *([s.replicated()] * (len(args) - 2))), shardings, (1,)
        key = ("decode", *self._dims(window, slots), len(self.stop_ids), self.select)
        return s.compiled(key, build)(self.params.tree, state, self.stop_ids, refill_at, *self.scalars)

    def resize(self, state: DecodeState, window: int) -> DecodeState:
        old, slots = state.window, state.done.shape[0]

        def build():
            old_abstract, old_sh = self._state_specs(old, slots)
            # Not donated: the caches change shape, so their buffers could not be reused anyway.
            return (functools.partial(resize_window, window=window), (old_abstract,), (old_sh,),
                    self._state_specs(window, slots)[1], ())
        key = ("resize", slots, self.prompt_len, old, window, self.num_prompts, self.new_tokens)
        return self.s.compiled(key, build)(state)

    def compact(self, state: DecodeState, rows: np.ndarray) -> DecodeState:
        """The state on len(rows) slots: slot i takes slot rows[i] (host int array) of `state`."""
        s, window, old = self.s, state.window, state.done.shape[0]
        new = len(rows)
        rows = s.put(np.asarray(rows, np.int32), ("batch",))

        def build():
            old_abstract, old_sh = self._state_specs(window, old)
            return (compact_slots, (old_abstract, rows), (old_sh, rows.sharding),
                    self._state_specs(window, new)[1], ())
        key = ("compact", old, new, self.prompt_len, window, self.num_prompts, self.new_tokens)
        return s.compiled(key, build)(state, rows)

    def poll(self, state: DecodeState) -> tuple[np.ndarray, np.ndarray, int]:
        """(done [B], steps [B], decode steps so far) on the host: the one read per segment (B: the
        state's current slot count)."""
        return to_host(state.done).copy(), to_host(state.steps).copy(), int(to_host(state.decode_steps))

    def results(self, state: DecodeState) -> dict[str, Any]:
        """The call's results on the host: tokens / logprobs [n, G], lengths / stopped [n]."""
        n = self.batch.num_rows
        out = {"tokens": to_host(state.tokens)[:n], "logprobs": to_host(state.logprobs)[:n],
               "lengths": to_host(state.lengths)[:n], "stopped": to_host(state.stopped)[:n]}
        if self.cache is not None:
            self.cache.finish(self.prompts, out["tokens"])
            self.counts.stored, self.counts.unsaved = self.cache.counts.stored, self.cache.counts.unsaved
            self.counts.evicted = self.cache.counts.evicted
        return out

"""The compiled device programs of one `Sampler.generate` call, bound to its params, prompts and
sampling settings: the `scheduler.SlotPrograms` the host scheduler drives.

Each program is compiled ahead of time on first use of its shape key and kept by the sampler
(`Sampler.compiled_programs`):
  ("start", B, P, W, N, G)                                   empty state
  ("refill", R, B, P, W, N, G, rows per chunk, stops, mode)  prefill R prompts into free slots
  ("decode", B, P, W, N, G, stops, mode)                     one decode segment
  ("resize", B, P, W, W', N, G)                              cut / grow the window
  ("compact", B, B', P, W, N, G)                             gather the live slots into B' < B
with B slots (the call's slot count, or a smaller bucket once the queue is empty and `compact`
has moved the live rows into fewer slots), P prompt bucket, W window, N prompts (bucketed), G new-token bucket, R refilled rows
(bucketed), mode the token-choice options. `refill` and `decode` take the state donated (updated
in place); `resize` and `compact` make a new one (its caches change shape).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

from genenv_jax.core.bucketing import next_power_of_two, round_up
from genenv_jax.models.decode import CACHE_AXES
from genenv_jax.parallel import abstract_like, to_host
from genenv_jax.sampling.buckets import rows_per_chunk
from genenv_jax.sampling.decode_loop import LoopOptions, decode_segment
from genenv_jax.sampling.inputs import PromptBatch, SamplerParams
from genenv_jax.sampling.refill import SelectOptions, refill
from genenv_jax.sampling.slot_state import DecodeState, compact_slots, empty_state, resize_window


class CallPrograms:
    """Programs for one call: `slots` B slots over `batch`'s prompts, with fixed sampling settings.

    `sampler` is the `Sampler` (not imported here: it imports this module) whose placement helpers
    (`sharding`, `put`, `constrain`, ...) and program cache (`compiled`) these use.

    `stop_ids` [n] int32 (-1 never matches); `scalars` = (seed low, seed high, temperature, top_p)
    as numpy scalars; `select` the token-choice options.
    """

    def __init__(self, sampler: Any, params: SamplerParams, batch: PromptBatch, *, slots: int,
                 select: SelectOptions, stop_ids: np.ndarray, scalars: tuple):
        self.s, self.params, self.batch, self.select = sampler, params, batch, select
        self.slots = slots
        self.prompt_len = batch.tokens.shape[1]
        self.num_prompts = next_power_of_two(batch.num_rows)  # N: results rows, bucketed
        self.new_tokens = batch.new_tokens_bucket
        rep = sampler.replicated()
        put = functools.partial(jax.device_put, device=rep)
        self.stop_ids = put(stop_ids)
        self.scalars = tuple(map(put, scalars))
        self._scalar_specs = tuple(jax.ShapeDtypeStruct((), np.asarray(x).dtype, sharding=rep) for x in scalars)

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
        rows = min(num_slots, self.refill_bucket(len(prompt_ids)))  # R
        pad = rows - len(prompt_ids)
        fill = lambda a, v: np.concatenate([a[prompt_ids], np.full((pad, *a.shape[1:]), v, a.dtype)])  # noqa: E731
        host = (fill(batch.tokens, s.pad_id), fill(batch.mask, False), fill(batch.lengths, 0),
                np.concatenate([slots, np.full(pad, num_slots)]).astype(np.int32),
                np.concatenate([prompt_ids, np.full(pad, self.num_prompts)]).astype(np.int32),
                fill(batch.caps, 1))
        logical = (("batch", None), ("batch", None), ("batch",), ("batch",), ("batch",), ("batch",))
        args = tuple(s.put(a, axes) for a, axes in zip(host, logical))
        chunk = rows_per_chunk(rows, self.prompt_len, s.batch_shards, s.prefill_chunk_tokens)

        def build():
            abstract, shardings = self._state_specs(window, num_slots)
            fn = functools.partial(refill, s.cfg, s.constrain, self.select, chunk)
            in_sh = (s.param_shardings, shardings, *(a.sharding for a in args), self.stop_ids.sharding,
                     *(x.sharding for x in self._scalar_specs))
            return (fn, (self._params_spec(), abstract, *args, self.stop_ids, *self._scalar_specs), in_sh,
                    shardings, (1,))
        key = ("refill", rows, *self._dims(window, num_slots), chunk, len(self.stop_ids), self.select)
        return s.compiled(key, build)(self.params.tree, state, *args, self.stop_ids, *self.scalars)

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
        return {"tokens": to_host(state.tokens)[:n], "logprobs": to_host(state.logprobs)[:n],
                "lengths": to_host(state.lengths)[:n], "stopped": to_host(state.stopped)[:n]}

"""The host side of continuous batching: which queued prompt starts in which free slot, and when.

A call's prompts form a FIFO queue. The scheduler alternates compiled device programs:
  refill  - start queued prompts in the free slots (prefill + first token),
  decode  - a segment of decode steps (`decode_loop.decode_segment`), which returns once
            `refill_at` slots are free, the window is full, or nothing runs,
  resize  - cut or grow the cache window W before a segment that needs another size,
  compact - once the queue is empty, gather the live rows into a smaller slot bucket whenever
            they fit in half the current slots, so the drain computes only about the live rows,
  retire  - after each segment, hand the rows that finished in it to the prefix pool (when the
            call retains its sequences: `prefix_cache.py`) before a refill or compaction drops them,
and reads back only the slots' `done` / `steps` vectors between them (one small transfer per
segment). Refilling between segments rather than inside the device loop keeps every program's
shapes static: the prefill of R rows and the window W are compile-time sizes of their programs
(bucketed), so a segment attends over exactly the window its rows need and a refill prefills only
as many rows as are free (rounded up to a bucket), with no `lax.cond` over cache-sized operands in
the decode loop. The cost is one host round trip per segment, small next to a segment's decode
steps, and slots that finish while a segment waits for `refill_at` free slots idle until it ends.
The queue order is the prompts' order: nothing is known about a response's length before it ends.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Protocol

import jax
import numpy as np

from genenv_jax.sampling.prefix_cache import PrefillCounts


@dataclasses.dataclass
class SlotStats:
    """How a call used its slots. `useful_tokens` counts tokens chosen by decode steps for real
    prompts (each prompt's first token comes from its prefill and is not counted).
    `computed_row_steps` sums, over decode segments, the segment's slot count x its decode steps:
    the rows the decode steps actually computed, fewer than decode_steps x slots once the drain has
    compacted the live rows into smaller slot buckets (`slot_counts`: each slot count used, in
    order). `slot_use` = useful_tokens / computed_row_steps, 1.0 when every computed row produced a
    kept token; `fixed_slot_use` = useful_tokens / (decode_steps x slots), the same figure as if
    every step computed all `slots` (the measure before compaction existed). `queued_*` cover the
    decode steps run while prompts were still waiting for a slot (all `slots` computed); the rest is
    the drain at the end of the call. Timings (seconds, only when timed) include waiting for each
    program to finish."""

    slots: int
    decode_steps: int = 0
    useful_tokens: int = 0
    computed_row_steps: int = 0
    queued_decode_steps: int = 0
    queued_useful_tokens: int = 0
    segments: int = 0
    refills: int = 0
    refilled_rows: int = 0
    resizes: int = 0
    compactions: int = 0
    windows: tuple[int, ...] = ()
    slot_counts: tuple[int, ...] = ()
    refill_s: float = 0.0
    decode_s: float = 0.0
    resize_s: float = 0.0
    compact_s: float = 0.0
    prefill: PrefillCounts = dataclasses.field(default_factory=PrefillCounts)

    @property
    def slot_use(self) -> float:
        return self.useful_tokens / max(self.computed_row_steps, 1)

    @property
    def fixed_slot_use(self) -> float:
        return self.useful_tokens / max(self.decode_steps * self.slots, 1)

    @property
    def queued_slot_use(self) -> float:
        return self.queued_useful_tokens / max(self.queued_decode_steps * self.slots, 1)


class SlotPrograms(Protocol):
    """The device programs the scheduler drives (`Sampler` binds them to params and a call)."""

    def start(self, window: int) -> Any: ...
    def refill(self, state: Any, prompt_ids: np.ndarray, slots: np.ndarray) -> Any: ...
    def decode(self, state: Any, refill_at: int) -> Any: ...
    def resize(self, state: Any, window: int) -> Any: ...
    def compact(self, state: Any, rows: np.ndarray) -> Any: ...  # slot i <- slot rows[i]
    def retire(self, state: Any, slots: np.ndarray, prompt_ids: np.ndarray, steps: np.ndarray) -> None: ...
    def poll(self, state: Any) -> tuple[np.ndarray, np.ndarray, int]: ...  # done [B], steps [B], decode steps


def choose_window(current: int | None, need: int, bucket: Callable[[int], int]) -> int:
    """The window for the next segment: the bucket of `need` when growing (or starting); when the
    rows need less, shrink only to the bucket of 2 x need, and only if that halves the window at
    least, so a window does not flip back and forth between two sizes."""
    if current is None or need > current:
        return bucket(need)
    if 4 * need > current:  # bucket(2 * need) >= 2 * need could not halve it
        return current
    smaller = bucket(2 * need)
    return smaller if 2 * smaller <= current else current


def rows_to_start(free: int, queued: int, refill_bucket: Callable[[int], int]) -> int:
    """How many queued prompts to start in `free` slots: all of them if they fit; otherwise the
    largest count that fills a refill bucket exactly (a padding row of a refill costs a whole
    prompt's prefill, while a slot left free waits only until the next refill), or every free slot
    when no bucket fits."""
    if queued <= free:
        return queued
    return next((t for t in range(free, 0, -1) if refill_bucket(t) == t), free)


def shrink_fit(slots: int, slot_bucket: Callable[[int], int]) -> int:
    """The most live rows whose slot bucket is at most half of `slots` (0: none, `slots` is the
    smallest bucket): the drain compacts once no more rows than this run."""
    return next((live for live in range(slots // 2, 0, -1) if slot_bucket(live) <= slots // 2), 0)


def run_queue(programs: SlotPrograms, caps: np.ndarray, *, slots: int, refill_rows: int, steps_per_sync: int,
              bucket: Callable[[int], int], refill_bucket: Callable[[int], int], compact: bool = True,
              timed: bool = False) -> tuple[Any, SlotStats]:
    """Runs prompts 0..n-1 (caps [n]: each prompt's max_new_tokens) through `slots` slots; returns
    the final device state and the stats. A segment ends for a refill once `refill_rows` slots are
    free (or as many as prompts still queue). With the queue empty (the drain) and `compact`, a
    segment ends once the live rows fit in a slot bucket of half the current slots, and they are
    gathered into the smallest bucket that holds them (`refill_bucket` of their count), so later
    decode steps compute only that many rows; without `compact` the drain runs until every slot is
    free. `bucket` rounds a window up, `refill_bucket` a refill's row count (the refill program's R)
    and a compacted slot count.
    """
    n = len(caps)
    stats, clock = SlotStats(slots=slots, slot_counts=(slots,)), _Clock(timed)
    done, steps, slot_caps = np.ones(slots, bool), np.zeros(slots, np.int64), np.zeros(slots, np.int64)
    slot_prompt = np.zeros(slots, np.int64)
    started, state, window, current = 0, None, None, slots
    while True:
        # Start queued prompts in free slots (on the host side first: the window must fit them).
        free = np.nonzero(done)[0]
        take = rows_to_start(len(free), n - started, refill_bucket)
        starting, prompt_ids = free[:take], np.arange(started, started + take)
        done[starting], steps[starting], slot_caps[starting] = False, 1, caps[prompt_ids]
        slot_prompt[starting] = prompt_ids
        new_window = choose_window(window, _window_need(steps, slot_caps, ~done, steps_per_sync), bucket)
        if state is None:
            state = programs.start(new_window)
        elif new_window != window:
            state = clock.time("resize_s", stats, programs.resize, state, new_window)
            stats.resizes += 1
        if new_window != window:
            stats.windows += (new_window,)
        window = new_window
        if take:
            state = clock.time("refill_s", stats, programs.refill, state, prompt_ids, starting)
            started += take
            stats.refills, stats.refilled_rows = stats.refills + 1, stats.refilled_rows + take
        queued = n - started
        fit = shrink_fit(current, refill_bucket) if compact and not queued else 0
        live = np.nonzero(~done)[0]
        if fit and len(live) <= fit:  # the drain: gather the live rows into a smaller slot bucket
            current = refill_bucket(len(live))
            keep = np.concatenate([live, np.nonzero(done)[0][:current - len(live)]])
            state = clock.time("compact_s", stats, programs.compact, state, keep)
            done, steps, slot_caps, slot_prompt = done[keep], steps[keep], slot_caps[keep], slot_prompt[keep]
            stats.compactions, stats.slot_counts = stats.compactions + 1, stats.slot_counts + (current,)
            fit = shrink_fit(current, refill_bucket)
        # Decode until enough slots are free for the next refill (at least one more than now), or,
        # in the drain, until the live rows fit a smaller slot bucket (or every slot is free).
        if queued:
            refill_at = max(min(refill_rows, queued), len(free) - take + 1)
        else:
            refill_at = current - fit if fit else current + 1
        state = clock.time("decode_s", stats, programs.decode, state, refill_at)
        stats.segments += 1
        ran, before = ~done, steps
        done, steps, decode_steps = programs.poll(state)
        tokens = int(np.sum((steps.astype(np.int64) - before)[ran]))
        if queued:
            stats.queued_decode_steps += decode_steps - stats.decode_steps
            stats.queued_useful_tokens += tokens
        stats.computed_row_steps += (decode_steps - stats.decode_steps) * current
        stats.decode_steps, stats.useful_tokens = decode_steps, stats.useful_tokens + tokens
        steps = steps.astype(np.int64)
        finished = np.nonzero(ran & done)[0]
        programs.retire(state, finished, slot_prompt[finished], steps[finished])
        if started == n and done.all():
            return state, stats


def _window_need(steps: np.ndarray, caps: np.ndarray, running: np.ndarray, steps_per_sync: int) -> int:
    """The window every running slot needs for one more block of steps (`decode_loop.fits_window`)."""
    return int(np.max(np.minimum(steps[running] + steps_per_sync, caps[running]) - 1, initial=1))


class _Clock:
    """Times a program call (waiting for its result) when enabled; otherwise just calls it."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def time(self, field: str, stats: SlotStats, fn: Callable, *args) -> Any:
        if not self.enabled:
            return fn(*args)
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        setattr(stats, field, getattr(stats, field) + time.perf_counter() - t0)
        return out

"""Prefix reuse: the keys and values of token sequences the sampler has already computed, kept on the
device between prefills so no prefix is prefilled twice for the same weights.

Two kinds of entries share one pool:
- **shared prefixes of a call**: before a call's first refill, every prompt that shares a leading
  run of tokens with another prompt of the call, long enough that the prompts after the first
  save at least `min_shared_tokens` prefill tokens by it (a GRPO group's
  identical prompts; tasks with one long system prompt and tool list) has that run prefilled once
  (`plan_shared`). Runs nest: a run shared by many prompts is computed first, the longer runs of
  fewer prompts extend it;
- **retained sequences** (`generate(..., retain=True)`, the episode runner between turns): when a
  row finishes, its prompt and the generated tokens whose keys exist (all but the last) are stored,
  so the next turn of that episode prefills only the tokens added since (the last agent token,
  the observation, the template).

A prompt reuses the entry sharing the longest leading run of token ids with it, up to its last
token (the prefill must compute at least one token, for the first sampled token's logits), and
prefills the rest. Reuse is by exact token ids only: where a chat template re-renders history
differently, the match ends at the first differing token and the prefill starts there. An entry
holds the keys of these weights only: the pool belongs to one `SamplerParams` (placed again after
an update, the params come with an empty pool).

The pool: per layer one K and one V buffer [F, K, H] (F = `tokens` capacity, in the compute dtype),
handed out in pages of `page_tokens`; an entry is a list of pages, addressed per token, so entries
of any length share it without padding, and an entry made from a reused prefix shares that
prefix's whole pages with its source instead of copying them (a GRPO group's episodes hold their
common first prompt once; a page is freed with the last entry holding it). Prompts copy their prefix out of it into their slot
(a gather of the prefix's keys, no FLOPs); finished rows copy their sequence into it (a scatter).

Eviction (when a new entry needs pages and none are free): entries not used, created or stored in
the current call go first, least recently used first. Entries touched in this call are never
evicted by it (they belong to live episodes or to this call's shared prefixes), so with more live
episodes than fit, the episodes that hold an entry keep it from turn to turn and the others
prefill in full (`unsaved` counts them) instead of every episode evicting the next one's. A row
whose sequence extends the entry it reused, with no other prompt of the call still waiting on
that entry, grows it in place (new pages for the new tokens only): an episode keeps one entry
across its turns.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class PrefixCacheConfig:
    """`Sampler(prefix_cache=...)`. tokens: pool capacity (memory: tokens x layers x 2 x kv heads x
    head dim x the compute dtype's bytes; 65536 tokens of Qwen2.5-0.5B in float32 are 1.6 GB,
    allocated on first use); 0 turns reuse off. page_tokens: allocation unit. min_shared_tokens:
    a run shared between a call's prompts gets an entry of its own when it saves the prompts after
    the first at least this many prefill tokens."""

    tokens: int = 65536
    page_tokens: int = 16
    min_shared_tokens: int = 8

    def __post_init__(self):
        for name in ("tokens", "page_tokens", "min_shared_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < (0 if name == "tokens" else 1):
                raise ValueError(f"PrefixCacheConfig.{name} must be an int >= {0 if name == 'tokens' else 1}, "
                                 f"got {value!r}")
        if self.tokens % self.page_tokens:
            raise ValueError(f"PrefixCacheConfig.tokens ({self.tokens}) must be a multiple of page_tokens "
                             f"({self.page_tokens})")

    @property
    def enabled(self) -> bool:
        return self.tokens > 0


@dataclasses.dataclass
class PrefillCounts:
    """Prefill tokens of one sampler call: `requested` (prompt tokens of every row), `computed`
    (tokens run through the model: each row's unmatched remainder, plus the shared prefixes this
    call created), `reused` (prompt tokens copied from the pool instead). `created` shared-prefix
    entries, `stored` rows kept for later calls, `unsaved` rows that could not be kept (the pool
    full of entries this call uses: a forced full prefill next time), `evicted` entries."""

    requested: int = 0
    computed: int = 0
    reused: int = 0
    created: int = 0
    stored: int = 0
    unsaved: int = 0
    evicted: int = 0

    def add(self, other: "PrefillCounts") -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    @property
    def reused_fraction(self) -> float | None:
        return self.reused / self.requested if self.requested else None


@dataclasses.dataclass
class _Entry:
    tokens: np.ndarray  # int32 ids whose keys the entry holds (for a row stored this call: its prompt until `finish`)
    pages: list[int]
    last_use: int  # the call that last used, created or stored it
    length: int  # tokens held (== len(tokens) once known)


@dataclasses.dataclass(frozen=True)
class Reuse:
    """How one prompt starts: `length` leading tokens copied from `entry` (None: nothing reused)."""

    entry: int | None
    length: int


@dataclasses.dataclass(frozen=True)
class SharedPrefix:
    """A shared prefix to prefill into the pool: `tokens`, of which the first `source.length` come
    from `source.entry`; written to entry `entry` from token `first` on (the pages before it are the
    source's, shared). `wave`: created after the waves before it (its source may be one of theirs)."""

    tokens: np.ndarray
    source: Reuse
    entry: int
    wave: int
    first: int = 0  # tokens already in place: whole pages shared with the source entry


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common leading run of two int arrays."""
    m = min(len(a), len(b))
    if m == 0:
        return 0
    differ = np.flatnonzero(a[:m] != b[:m])
    return int(differ[0]) if len(differ) else m


class PrefixCache:
    """The host index of one pool (see the module doc); the device buffers are `pool` (set and
    replaced by the sampler's programs). Each sampler call: `begin_call`, `plan_shared`, `reuse`
    per prompt, `store_target` per finished row (when retaining), `finish` with the results."""

    def __init__(self, config: PrefixCacheConfig):
        self.config = config
        self.capacity = config.tokens
        self.pool = None  # per layer (k, v) [F, K, H], allocated by the sampler on first use
        self.entries: dict[int, _Entry] = {}
        self.free_pages = list(range(config.tokens // config.page_tokens))[::-1]
        self.page_refs = np.zeros(config.tokens // config.page_tokens, np.int32)  # entries holding each page
        self.call = 0
        self._next_id = 0
        self._pins: dict[int, int] = {}  # entry -> prompts of this call still waiting to copy from it
        self._pending: dict[int, tuple[int, int]] = {}  # entry -> (prompt id, generated tokens) to fill in
        self.counts = PrefillCounts()

    # ----- addressing -----
    def token_index(self, entry: int, start: int, stop: int) -> np.ndarray:
        """Flat pool indices [stop - start] of an entry's tokens start..stop-1."""
        pages, size = self.entries[entry].pages, self.config.page_tokens
        i = np.arange(start, stop)
        return np.asarray(pages, np.int64)[i // size] * size + i % size

    # ----- one call -----
    def begin_call(self) -> None:
        self.call += 1
        self._pins.clear()
        self._pending.clear()
        self.counts = PrefillCounts()

    def longest_match(self, tokens: np.ndarray, limit: int) -> Reuse:
        """The entry sharing the longest leading run with `tokens`, capped at `limit` tokens."""
        best = Reuse(None, 0)
        for key, entry in self.entries.items():
            if key in self._pending:
                continue  # stored this call: its tokens are known only at `finish`
            n = min(common_prefix(entry.tokens, tokens), limit)
            if n > best.length:
                best = Reuse(key, n)
        return best

    def plan_shared(self, prompts: Sequence[np.ndarray]) -> list[SharedPrefix]:
        """The shared prefixes of a call's prompts to create before its refills (module doc), in
        creation order. A prompt that occurs more than once shares all but its last token."""
        distinct: dict[bytes, np.ndarray] = {}
        counts: dict[bytes, int] = {}
        for p in prompts:
            key = p.tobytes()
            distinct.setdefault(key, p)
            counts[key] = counts.get(key, 0) + 1
        order = sorted(distinct, key=lambda k: distinct[k].tolist())
        runs: dict[bytes, tuple[np.ndarray, int]] = {}  # run -> (tokens, prompts of the call starting with it)
        for i, key in enumerate(order):
            p = distinct[key]
            # Its own run if it repeats (all but its last token), and the longest run it shares with
            # another prompt (with a neighbour in sorted order).
            neighbours = max([min(common_prefix(p, distinct[order[j]]), len(p) - 1)
                              for j in (i - 1, i + 1) if 0 <= j < len(order)], default=0)
            for shared in {len(p) - 1 if counts[key] > 1 else 0, neighbours}:
                if shared < self.config.min_shared_tokens or p[:shared].tobytes() in runs:
                    continue
                lo = hi = i  # the prompts starting with this run are neighbours of p in sorted order
                while lo > 0 and common_prefix(distinct[order[lo - 1]], p) >= shared:
                    lo -= 1
                while hi + 1 < len(order) and common_prefix(distinct[order[hi + 1]], p) >= shared:
                    hi += 1
                runs[p[:shared].tobytes()] = (p[:shared], sum(counts[order[j]] for j in range(lo, hi + 1)))
        planned: list[SharedPrefix] = []
        waves: dict[int, int] = {}
        for run, users in sorted(runs.values(), key=lambda x: len(x[0])):
            source = self.longest_match(run, len(run))
            # Worth an entry when the prompts after the first save at least min_shared_tokens.
            if (users - 1) * (len(run) - source.length) < self.config.min_shared_tokens:
                continue
            if source.entry is not None:
                self._pin(source.entry)  # not evicted by the allocations that follow
            allocated = self._allocate(len(run), run, source)
            if allocated is None:
                continue
            entry, first = allocated
            wave = waves.get(source.entry, -1) + 1
            waves[entry] = wave
            planned.append(SharedPrefix(tokens=run, source=source, entry=entry, wave=wave, first=first))
            self.counts.created += 1
            self.counts.computed += len(run) - source.length
        self._pins.clear()
        return planned

    def reuse(self, prompt: np.ndarray) -> Reuse:
        """How `prompt` starts (at most all but its last token from the pool); pins the entry until
        the prompt is refilled (`unpin`)."""
        found = self.longest_match(prompt, len(prompt) - 1)
        self.counts.requested += len(prompt)
        self.counts.reused += found.length
        self.counts.computed += len(prompt) - found.length
        if found.entry is not None:
            self._pin(found.entry)
            self.entries[found.entry].last_use = self.call
        return found

    def unpin(self, reuse: Reuse) -> None:
        if reuse.entry is not None:
            self._pins[reuse.entry] -= 1

    def store_target(self, prompt_id: int, prompt: np.ndarray, reuse: Reuse, generated: int,
                     ) -> tuple[int, int] | None:
        """Where a finished row's sequence (its prompt, then `generated` tokens, of which all but the
        last have keys) goes: (entry, first token to write), or None when it cannot be kept. The
        entry's token ids are filled in by `finish`."""
        length = len(prompt) + generated - 1
        source = self.entries.get(reuse.entry) if reuse.entry is not None else None
        if (source is not None and reuse.length == source.length and not self._pins.get(reuse.entry)
                and reuse.entry not in self._pending):
            extra = self._pages_for(length) - len(source.pages)
            if self._free(extra):
                source.pages += self._take_pages(extra)
                source.length, source.last_use = length, self.call
                self._pending[reuse.entry] = (prompt_id, generated)
                self.counts.stored += 1
                return reuse.entry, reuse.length
        allocated = self._allocate(length, prompt, reuse)
        if allocated is None:
            self.counts.unsaved += 1
            return None
        self._pending[allocated[0]] = (prompt_id, generated)
        self.counts.stored += 1
        return allocated

    def finish(self, prompts: Sequence[np.ndarray], tokens: np.ndarray) -> None:
        """Fills in the token ids of the rows stored this call (tokens [n, G]: the call's results)."""
        for entry, (prompt_id, generated) in self._pending.items():
            ids = np.concatenate([prompts[prompt_id], tokens[prompt_id, :generated - 1]]).astype(np.int32)
            self.entries[entry].tokens = ids
        self._pending.clear()
        self._pins.clear()

    # ----- allocation -----
    def _pin(self, entry: int) -> None:
        self._pins[entry] = self._pins.get(entry, 0) + 1

    def _pages_for(self, length: int) -> int:
        return -(-length // self.config.page_tokens)

    def _free(self, pages: int) -> bool:
        """Frees pages by evicting entries untouched this call (least recently used first); True
        when `pages` pages are free. A page shared by several entries is freed with its last one."""
        if pages > len(self.free_pages):
            idle = sorted((e.last_use, key) for key, e in self.entries.items()
                          if e.last_use < self.call and not self._pins.get(key) and key not in self._pending)
            for _, key in idle:
                if pages <= len(self.free_pages):
                    break
                for page in self.entries.pop(key).pages:
                    self.page_refs[page] -= 1
                    if not self.page_refs[page]:
                        self.free_pages.append(page)
                self.counts.evicted += 1
        return pages <= len(self.free_pages)

    def _take_pages(self, count: int) -> list[int]:
        taken = [self.free_pages.pop() for _ in range(count)]
        self.page_refs[taken] += 1
        return taken

    def _allocate(self, length: int, tokens: np.ndarray, source: Reuse = Reuse(None, 0)) -> tuple[int, int] | None:
        """A new entry for `length` tokens: (its key, the first token to write). The whole pages of
        `source`'s reused prefix are shared with it instead of copied (a GRPO group's episodes hold
        their common first prompt once)."""
        shared: list[int] = []
        if source.entry is not None and source.entry in self.entries:
            shared = self.entries[source.entry].pages[:min(source.length, length) // self.config.page_tokens]
        self.page_refs[shared] += 1  # held while evicting, so the source's eviction keeps them
        if not self._free(self._pages_for(length) - len(shared)):
            self.page_refs[shared] -= 1
            return None
        key, self._next_id = self._next_id, self._next_id + 1
        self.entries[key] = _Entry(tokens=np.asarray(tokens[:length], np.int32),
                                   pages=shared + self._take_pages(self._pages_for(length) - len(shared)),
                                   last_use=self.call, length=length)
        return key, len(shared) * self.config.page_tokens

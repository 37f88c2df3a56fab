"""Shape buckets for the sampler: batch, prompt and generation lengths are rounded up to a few
sizes so a long run compiles a handful of programs instead of one per call."""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from genenv_jax.core.bucketing import next_power_of_two


def bucket_size(n: int, buckets: Sequence[int] | None, minimum: int, what: str,
                ladder: Callable[[int], int] = next_power_of_two) -> int:
    """`n` rounded up to the smallest bucket (default: the next rung of `ladder`, at least `minimum`)."""
    if n < 1:
        raise ValueError(f"{what} must be >= 1, got {n}")
    if buckets is None:
        return max(int(minimum), ladder(n))
    fitting = [b for b in sorted(buckets) if b >= n]
    if not fitting:
        raise ValueError(f"{what} {n} exceeds the largest bucket {max(buckets)}; add a bigger bucket")
    return fitting[0]


def rows_per_chunk(batch: int, prompt_len: int, shards: int, chunk_tokens: int) -> int:
    """Rows per prefill chunk: a divisor of `batch` that is a multiple of `shards` (so every device
    keeps work), as large as fits `chunk_tokens` prompt tokens."""
    target = max(shards, chunk_tokens // max(prompt_len, 1))
    choices = [r for r in range(shards, batch + 1, shards) if batch % r == 0 and r <= target]
    return max(choices) if choices else batch


@dataclasses.dataclass(frozen=True)
class Buckets:
    """Allowed padded sizes. `None` means powers of two for batch and generation lengths and
    `bucketing.length_bucket` (powers of two and, from 384 up, 1.5x powers of two) for prompt
    lengths, no smaller than the `min_*` value.

    The batch bucket is further rounded up to a multiple of the mesh's data x fsdp size.
    """

    batch: tuple[int, ...] | None = None
    prompt: tuple[int, ...] | None = None
    new_tokens: tuple[int, ...] | None = None
    min_batch: int = 1
    min_prompt: int = 16
    min_new_tokens: int = 16

    def __post_init__(self):
        for name in ("batch", "prompt", "new_tokens"):
            values = getattr(self, name)
            if values is not None:
                if not values or any(int(v) < 1 for v in values):
                    raise ValueError(f"Buckets.{name} must be a non-empty list of positive sizes, got {values}")
                object.__setattr__(self, name, tuple(sorted(int(v) for v in values)))

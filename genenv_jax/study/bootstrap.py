"""The difference of two arms' means with a percentile bootstrap interval over their tasks.

Each arm's tasks are resampled with replacement on their own (the arms' tasks are independent
draws, not pairs), `REPLICATES` times from one fixed seed, so a report rebuilds byte for byte.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

REPLICATES = 10_000
SEED = 0


@dataclasses.dataclass(frozen=True)
class Difference:
    """mean(a) - mean(b) with its 95% percentile bootstrap interval [low, high]; n_a, n_b tasks."""

    mean_a: float
    mean_b: float
    n_a: int
    n_b: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.mean_a - self.mean_b

    @property
    def sign(self) -> int:
        """+1 when the whole interval is above 0, -1 when below, 0 when it holds 0 (not resolved)."""
        return 1 if self.low > 0 else -1 if self.high < 0 else 0

    def fmt(self, digits: int = 3) -> str:
        """'+0.062 [-0.031, +0.150]'."""
        return f"{self.value:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}]"


def bootstrap_difference(a: Sequence[float], b: Sequence[float], replicates: int = REPLICATES,
                         seed: int = SEED) -> Difference | None:
    """The Difference of the means of `a` and `b` (None when either is empty): each replicate
    resamples len(a) of `a` and len(b) of `b` with replacement; the interval is the 2.5th and
    97.5th percentiles (numpy's linear interpolation) of the replicates' differences."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not len(a) or not len(b):
        return None
    rng = np.random.default_rng(seed)
    means_a = a[rng.integers(0, len(a), size=(replicates, len(a)))].mean(axis=1)
    means_b = b[rng.integers(0, len(b), size=(replicates, len(b)))].mean(axis=1)
    low, high = np.percentile(means_a - means_b, [2.5, 97.5])
    return Difference(float(a.mean()), float(b.mean()), len(a), len(b), float(low), float(high))

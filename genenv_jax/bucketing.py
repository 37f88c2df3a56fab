"""Integer rounding for padded shapes: powers of two and multiples. A leaf module, shared by the
sampler's shape buckets and the update batches' packing."""

from __future__ import annotations


def next_power_of_two(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(int(n) - 1, 0).bit_length()


def round_up(n: int, multiple: int) -> int:
    """Smallest multiple of `multiple` that is >= n."""
    return -(-int(n) // int(multiple)) * int(multiple)

"""Integer rounding for padded shapes: powers of two, sequence-length buckets and multiples. A leaf
module, shared by the sampler's shape buckets and the update batches' packing."""

from __future__ import annotations


def next_power_of_two(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(int(n) - 1, 0).bit_length()


def round_up(n: int, multiple: int) -> int:
    """Smallest multiple of `multiple` that is >= n."""
    return -(-int(n) // int(multiple)) * int(multiple)


def length_bucket(n: int, minimum: int = 16) -> int:
    """Padded length for n tokens, at least `minimum`: powers of two, and from 256 up also three
    halves of a power of two (384, 768, 1536, ...), so padding costs at most a third of a row
    rather than a half while every bucket stays a multiple of 128."""
    n = max(int(n), 1)
    power = next_power_of_two(n)
    three_halves = 3 * power // 4
    return max(int(minimum), three_halves if power >= 512 and n <= three_halves else power)

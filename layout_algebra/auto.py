"""A default register layout for a tile and a thread count: `auto_local_spatial`.

When a kernel author only fixes how many threads share a tile, a sensible layout spreads the
threads over the innermost dimensions first (neighbouring threads hold neighbouring elements, which
coalesces global accesses) and keeps the rest of each dimension in registers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral

from layout_algebra.errors import LayoutError
from layout_algebra.register import RegisterLayout, local, replicate, spatial


def auto_local_spatial(num_threads: int, shape: Sequence[int]) -> RegisterLayout:
    """``replicate(r).local(*rest).spatial(*threads)`` for `num_threads` threads over `shape`.

    Walking the dimensions from last to first, dimension d gets ``threads[d] = gcd(remaining,
    shape[d])`` threads, where `remaining` starts at `num_threads` and is divided by each
    ``threads[d]``; ``rest[d] = shape[d] // threads[d]``; the ``r = remaining`` threads left over
    at the end replicate the tile (threads t and t + k * prod(threads) hold the same data).

    Examples: ``auto_local_spatial(128, [64, 32])`` is ``local(16, 1).spatial(4, 32)``;
    ``auto_local_spatial(64, [4, 4])`` is ``replicate(4).spatial(4, 4)``.
    """
    if isinstance(num_threads, bool) or not isinstance(num_threads, Integral) or num_threads < 1:
        raise LayoutError(
            f"auto_local_spatial: num_threads must be a positive integer, got {num_threads!r}"
        )
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise LayoutError(
            f"auto_local_spatial: shape must be a sequence of positive integers, got {shape!r}"
        )
    for k, extent in enumerate(shape):
        if isinstance(extent, bool) or not isinstance(extent, Integral) or extent < 1:
            raise LayoutError(
                f"auto_local_spatial: shape[{k}] = {extent!r} must be a positive integer"
            )
    remaining = int(num_threads)
    threads = [1] * len(shape)
    for dim in reversed(range(len(shape))):
        threads[dim] = math.gcd(remaining, int(shape[dim]))
        remaining //= threads[dim]
    rest = [int(extent) // count for extent, count in zip(shape, threads)]
    return replicate(remaining) * local(*rest) * spatial(*threads)

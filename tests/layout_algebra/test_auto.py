"""Tests of `auto_local_spatial`: the default layout of a tile over a number of threads."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from layout_algebra import (
    LayoutError,
    RegisterLayout,
    auto_local_spatial,
    local,
    replicate,
    spatial,
)


@pytest.mark.parametrize(
    ("num_threads", "shape", "expected"),
    [
        # the contract's example: 32 threads along the row, 4 down the columns
        (128, [64, 32], local(16, 1).spatial(4, 32)),
        (32, [16, 8], local(4, 1).spatial(4, 8)),
        # more threads than elements: the rest replicate the tile, as a leading factor
        (64, [4, 4], replicate(4).spatial(4, 4)),
        # gcd, not division: 3 threads go to the 9, the remaining 2 to the 4
        (6, [4, 9], local(2, 3).spatial(2, 3)),
        # one thread holds everything
        (1, [3, 5], local(3, 5)),
        # a rank-0 tile only replicates
        (5, [], replicate(5)),
        # threads that fit nowhere: gcd(4, 3) = 1, so all 4 replicate
        (4, [3], replicate(4).local(3)),
    ],
)
def test_auto_local_spatial_table(num_threads: int, shape, expected: RegisterLayout) -> None:
    assert auto_local_spatial(num_threads, shape) == expected


def test_auto_local_spatial_leftover_threads_are_the_most_significant() -> None:
    layout = auto_local_spatial(64, [4, 4])
    assert layout.owners((1, 2)) == [(6, 0), (22, 0), (38, 0), (54, 0)]


@pytest.mark.parametrize(
    ("num_threads", "shape", "match"),
    [
        (0, [4], "num_threads must be a positive integer, got 0"),
        (2.0, [4], "num_threads must be a positive integer, got 2.0"),
        (4, [4, 0], r"shape\[1\] = 0 must be a positive integer"),
        (4, 4, "shape must be a sequence"),
    ],
)
def test_auto_local_spatial_rejects_bad_arguments(num_threads, shape, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        auto_local_spatial(num_threads, shape)


@given(st.integers(1, 512), st.lists(st.integers(1, 64), max_size=3))
def test_auto_local_spatial_uses_every_thread_and_covers_the_tile(
    num_threads: int, shape: list[int]
) -> None:
    layout = auto_local_spatial(num_threads, shape)
    assert layout.num_threads == num_threads
    assert layout.shape == tuple(shape)
    assert layout.num_threads * layout.local_size == layout.num_elements * layout.replication


@given(st.integers(1, 512), st.lists(st.integers(1, 64), min_size=1, max_size=3))
def test_auto_local_spatial_gives_the_innermost_dimension_gcd_threads(
    num_threads: int, shape: list[int]
) -> None:
    layout = auto_local_spatial(num_threads, shape)
    innermost = math.gcd(num_threads, shape[-1])
    # thread t (below the innermost count) holds element t of the first row, in register 0
    for t in range(innermost):
        assert layout.map(t, 0) == (0,) * (len(shape) - 1) + (t,)
    # and those threads are the innermost spatial factor
    innermost_factor = spatial(*(1,) * (len(shape) - 1), innermost)
    assert (layout / innermost_factor) * innermost_factor == layout

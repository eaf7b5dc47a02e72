"""Tests of `reduce`: the layout of a reduction's result."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from layout_algebra import (
    LayoutError,
    RegisterLayout,
    column_spatial,
    local,
    reduce,
    register_layout,
    replicate,
    spatial,
)
from layout_algebra import testing as strategies

MMA_C = local(2, 1).spatial(8, 4).local(1, 2)


def test_reduce_worked_example() -> None:
    # reduce(spatial(3,4), [0]): element j is held by threads j, j + 4, j + 8.
    reduced = reduce(spatial(3, 4), [0])
    assert reduced == register_layout((4,), (4,), (-3, 0), ())
    assert reduced == replicate(3).spatial(4)
    for j in range(4):
        assert reduced.owners((j,)) == [(j, 0), (j + 4, 0), (j + 8, 0)]


@pytest.mark.parametrize(
    ("layout", "dims", "keepdims", "expected"),
    [
        # row sums of the mma accumulator: each row held by the four threads of its quad
        (MMA_C, [1], False, local(2).spatial(8).replicate(4)),
        # column sums: the 8 groups become an 8-fold replication in the middle of the threads
        (MMA_C, [0], False, replicate(8).spatial(4).local(2)),
        # keepdims keeps an extent-1 dimension, same function
        (MMA_C, [1], True, local(2, 1).spatial(8, 1).replicate(4)),
        # a reduced local mode disappears: each thread folds its registers
        (local(4, 1).spatial(1, 8), [0], False, spatial(8)),
        # reducing everything leaves a rank-0 replication over all threads
        (spatial(2, 4), [0, 1], False, replicate(8)),
        # a negative dimension counts from the end; an int is one dimension
        (column_spatial(2, 3), -1, False, replicate(3).spatial(2)),
        # no dimension: the layout itself
        (MMA_C, [], False, MMA_C),
    ],
)
def test_reduce_table(
    layout: RegisterLayout, dims, keepdims: bool, expected: RegisterLayout
) -> None:
    assert reduce(layout, dims, keepdims=keepdims) == expected
    assert layout.reduce(dims, keepdims) == expected


def test_reduce_row_sums_owners() -> None:
    # Row 9 of the accumulator lives in register 2 or 3 of threads 4..7; its sum in register 1.
    assert reduce(MMA_C, 1).owners((9,)) == [(4, 1), (5, 1), (6, 1), (7, 1)]


@pytest.mark.parametrize(
    ("dims", "match"),
    [
        ([0, 0], "appears twice"),
        ([2], "out of range for rank 2"),
        ([-3], "out of range for rank 2"),
        (["0"], "must be an integer"),
        ("0", "must be an integer or a sequence"),
    ],
)
def test_reduce_rejects_bad_dims(dims, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        reduce(MMA_C, dims)


def test_reduce_rejects_a_non_bool_keepdims() -> None:
    with pytest.raises(LayoutError, match="keepdims must be a bool"):
        reduce(MMA_C, [0], keepdims=1)


def drop(coord: tuple[int, ...], dims: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    """`coord` with the reduced dimensions removed (or set to 0 with keepdims)."""
    if keepdims:
        return tuple(0 if d in dims else c for d, c in enumerate(coord))
    return tuple(c for d, c in enumerate(coord) if d not in dims)


@st.composite
def reductions(draw: st.DrawFn) -> tuple[RegisterLayout, tuple[int, ...], bool]:
    layout = draw(st.one_of(strategies.register_layouts(), strategies.arbitrary_register_layouts()))
    dims = draw(st.lists(st.integers(0, layout.rank - 1), unique=True))
    return layout, tuple(dims), draw(st.booleans())


@given(reductions())
def test_each_thread_holds_the_projections_of_its_elements(case: tuple) -> None:
    layout, dims, keepdims = case
    reduced = reduce(layout, dims, keepdims=keepdims)
    assert reduced.num_threads == layout.num_threads
    for t in range(layout.num_threads):
        expected = {drop(layout.map(t, i), dims, keepdims) for i in range(layout.local_size)}
        held = [reduced.map(t, j) for j in range(reduced.local_size)]
        assert len(set(held)) == len(held)
        assert set(held) == expected


@given(reductions())
def test_reduce_moves_spatial_sizes_into_replication(case: tuple) -> None:
    layout, dims, keepdims = case
    reduced = reduce(layout, dims, keepdims=keepdims)
    reduced_spatial = 1
    reduced_local = 1
    for entry, size in zip(layout.spatial_modes, layout.spatial_sizes):
        if entry >= 0 and layout.mode_dims[entry] in dims:
            reduced_spatial *= size
    for entry, size in zip(layout.local_modes, layout.local_sizes):
        if layout.mode_dims[entry] in dims:
            reduced_local *= size
    assert reduced.replication == layout.replication * reduced_spatial
    assert reduced.local_size * reduced_local == layout.local_size

"""Tests of the shape transforms: permute, reshape, flatten, squeeze, unsqueeze, concat.

Besides literal tables and the re-indexing post-conditions, `reshape` and `concat` are checked
differentially against `layout_from_table`, which finds a layout for any table that has one: the
transforms must succeed exactly when the brute-force table of their result is a layout.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from layout_algebra import (
    LayoutError,
    RegisterLayout,
    column_local,
    column_spatial,
    concat,
    flatten,
    layout_from_table,
    local,
    permute,
    replicate,
    reshape,
    spatial,
    squeeze,
    unsqueeze,
)
from layout_algebra import testing as strategies

MMA_A = column_local(2, 2).spatial(8, 4).local(1, 2)
MMA_C = local(2, 1).spatial(8, 4).local(1, 2)
layouts = st.one_of(strategies.register_layouts(), strategies.arbitrary_register_layouts())


def layout_of_table(table: np.ndarray, shape: tuple[int, ...]) -> RegisterLayout | None:
    """The layout with this table, or None when there is none."""
    try:
        return layout_from_table(table, shape)
    except LayoutError:
        return None


# --------------------------------------------------------------------------------------------
# permute
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "dims", "expected"),
    [
        # transposing swaps row-major and column-major factors
        (spatial(2, 4).local(2, 1), (1, 0), column_spatial(4, 2).local(1, 2)),
        # the transposed mma accumulator: each thread holds a 2 x 2 block transposed
        (MMA_C, (1, 0), local(1, 2).column_spatial(4, 8).local(2, 1)),
        # negative dimensions count from the end
        (local(2, 3, 4), (-1, 0, 1), local(1, 2, 3) * local(4, 1, 1)),
        # the identity permutation
        (MMA_C, (0, 1), MMA_C),
    ],
)
def test_permute_table(layout: RegisterLayout, dims, expected: RegisterLayout) -> None:
    assert permute(layout, dims) == expected
    assert layout.permute(*dims) == expected


@given(layouts, st.data())
def test_permute_reorders_coordinates(layout: RegisterLayout, data: st.DataObject) -> None:
    dims = data.draw(st.permutations(range(layout.rank)))
    permuted = permute(layout, dims)
    table = layout.table()
    assert (permuted.table() == table[..., list(dims)]).all()
    inverse = [dims.index(d) for d in range(layout.rank)]
    assert permute(permuted, inverse) == layout


# --------------------------------------------------------------------------------------------
# reshape, flatten, squeeze, unsqueeze
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "shape", "expected"),
    [
        # one thread holds all six elements row-major either way: the modes fuse across dims
        (local(2, 3), (3, 2), local(3, 2)),
        # six threads in row-major order either way
        (spatial(2, 3), (3, 2), spatial(3, 2)),
        # the 8 x 2 mma-like tile flattened
        (spatial(4, 2).local(1, 2), (16,), spatial(8).local(2)),
        # -1 is inferred
        (MMA_C, (-1, 4), local(2, 1).spatial(16, 2).local(1, 2)),
        (MMA_C, -1, local(2).spatial(32).local(2)),
        # splitting a mode: rows of 16 split in 4 x 4
        (MMA_C, (4, 4, 8), local(2, 1, 1).spatial(2, 4, 4).local(1, 1, 2)),
    ],
)
def test_reshape_table(layout: RegisterLayout, shape, expected: RegisterLayout) -> None:
    assert reshape(layout, shape) == expected


def test_reshape_fluent_forms() -> None:
    assert MMA_C.reshape(128) == MMA_C.reshape((128,)) == reshape(MMA_C, [128])


@pytest.mark.parametrize(
    ("layout", "shape"),
    [
        # thread 1 holds flat element 3 = (1, 1): one thread step moves along two dimensions
        (column_spatial(2, 3), (3, 2)),
        # registers 0, 1 hold rows 0, 1 of column 0: flat 0 and 3, which (3, 2) puts in two dims
        (column_local(2, 3), (3, 2)),
        # a replication between two modes keeps them from fusing
        (spatial(2).replicate(2).spatial(3), (3, 2)),
    ],
)
def test_reshape_raises_when_no_layout_exists(layout: RegisterLayout, shape) -> None:
    with pytest.raises(LayoutError, match="no common refinement"):
        reshape(layout, shape)


def ravel(table: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Row-major flat indices of a table's coordinates."""
    if not shape:
        return np.zeros(table.shape[:2], dtype=np.int64)
    return np.ravel_multi_index(tuple(np.moveaxis(table, -1, 0)), shape)


def unravel(flat: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The table of coordinates of row-major flat indices."""
    if not shape:
        return np.zeros(flat.shape + (0,), dtype=np.int64)
    return np.stack(np.unravel_index(flat, shape), axis=-1)


@st.composite
def factorizations(draw: st.DrawFn, n: int) -> tuple[int, ...]:
    """A random shape of rank 1 to 3 (extents may be 1) with n elements."""
    shape = []
    remaining = n
    for _ in range(draw(st.integers(0, 2))):
        divisors = [d for d in range(1, remaining + 1) if remaining % d == 0]
        extent = draw(st.sampled_from(divisors))
        shape.append(extent)
        remaining //= extent
    shape.append(remaining)
    return tuple(draw(st.permutations(shape)))


@given(layouts, st.data())
def test_reshape_exists_exactly_when_the_reshaped_table_is_a_layout(
    layout: RegisterLayout, data: st.DataObject
) -> None:
    shape = data.draw(factorizations(layout.num_elements))
    expected = layout_of_table(unravel(ravel(layout.table(), layout.shape), shape), shape)
    try:
        result = reshape(layout, shape)
    except LayoutError:
        result = None
    assert result == expected


def flat_digits(layout: RegisterLayout) -> list[list[int]]:
    """The digits of the row-major flat index, outermost first, each as the sizes of its modes.

    The flat index is the row-major number of all modes in order (dimension 0's first); modes m
    and m + 1 form one digit when m + 1 directly follows m in the spatial or the local list
    (then they are one digit of t or of i)."""
    position = {
        entry: (which, k)
        for which, entries in enumerate((layout.spatial_modes, layout.local_modes))
        for k, entry in enumerate(entries)
        if entry >= 0
    }
    digits: list[list[int]] = []
    for m, size in enumerate(layout.mode_shape):
        if digits and position[m] == (position[m - 1][0], position[m - 1][1] + 1):
            digits[-1].append(size)
        else:
            digits.append([size])
    return digits


@st.composite
def digit_aligned_shapes(draw: st.DrawFn, layout: RegisterLayout) -> tuple[int, ...]:
    """A shape whose extents are runs of consecutive flat-index digits of `layout`, each digit
    possibly split in two (preferably not where its modes meet), with some extents of 1: every
    extent is then a run of digits of t and i, so the reshape always exists."""
    sizes: list[int] = []
    for modes in flat_digits(layout):
        size = math.prod(modes)
        meets = {math.prod(modes[k:]) for k in range(len(modes))}
        inner = [d for d in range(2, size) if size % d == 0]
        inner = [d for d in inner if d not in meets] or inner
        if inner and draw(st.booleans()):
            split = draw(st.sampled_from(inner))
            sizes += [size // split, split]
        else:
            sizes.append(size)
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(sizes) - 1)), max_size=2)))
    bounds = [0, *(c for c in cuts if c < len(sizes)), len(sizes)]
    shape = [math.prod(sizes[lo:hi]) for lo, hi in itertools.pairwise(bounds)]
    for _ in range(draw(st.integers(0, 1))):
        shape.insert(draw(st.integers(0, len(shape))), 1)
    return tuple(shape)


def test_flat_digits_table() -> None:
    # local(2, 3): modes 0 (rows) and 1 (columns) follow each other in the local list: one
    # digit, which is why (3, 2) is reachable; column_local(2, 3) lists them the other way.
    assert flat_digits(local(2, 3)) == [[2, 3]]
    assert flat_digits(column_local(2, 3)) == [[2], [3]]
    assert flat_digits(spatial(2).replicate(2).spatial(3)) == [[2], [3]]
    # the mma accumulator: flat = 8 * row + col = 64 * i0 + 2 * t + i1, t = 4 * (row % 8) + col // 2
    assert flat_digits(MMA_C) == [[2], [8, 4], [2]]


@given(layouts, st.data())
def test_reshape_keeps_the_flat_index_and_round_trips(
    layout: RegisterLayout, data: st.DataObject
) -> None:
    # Admissible by construction: a reshape to digit-aligned extents always exists.
    shape = data.draw(digit_aligned_shapes(layout))
    result = reshape(layout, shape)
    assert result.shape == shape
    assert (ravel(result.table(), shape) == ravel(layout.table(), layout.shape)).all()
    assert reshape(result, layout.shape) == layout


@pytest.mark.parametrize(
    ("layout", "start", "end", "expected"),
    [
        (spatial(2, 4).local(2, 1), 0, -1, spatial(2).local(2).spatial(4)),
        (local(2, 3, 4), 1, 2, local(2, 12)),
        (local(2, 3, 4), 0, 1, local(6, 4)),
        (MMA_C, 1, 1, MMA_C),
        # a rank-0 layout flattens to one element, as in PyTorch
        (replicate(4), 0, -1, replicate(4) * local(1)),
    ],
)
def test_flatten_table(layout: RegisterLayout, start: int, end: int, expected) -> None:
    assert flatten(layout, start, end) == expected
    assert layout.flatten(start, end) == expected


@given(layouts)
def test_flatten_always_exists_and_keeps_the_flat_index(layout: RegisterLayout) -> None:
    flat = flatten(layout)
    assert flat.shape == (layout.num_elements,)
    assert (flat.table()[..., 0] == ravel(layout.table(), layout.shape)).all()


@pytest.mark.parametrize(
    ("layout", "dims", "expected"),
    [
        (local(1, 4), None, local(4)),
        (spatial(1, 4, 1).local(2, 1, 1), None, spatial(1, 4).local(2, 1)),
        (local(1, 4, 1), 0, local(4, 1)),
        (local(1, 4, 1), [0, -1], local(4)),
        (local(4), None, local(4)),
    ],
)
def test_squeeze_table(layout: RegisterLayout, dims, expected: RegisterLayout) -> None:
    assert squeeze(layout, dims) == expected
    assert layout.squeeze(dims) == expected


@pytest.mark.parametrize(
    ("layout", "dim", "expected"),
    [
        (local(4), 0, local(1, 4)),
        (local(4), 1, local(4, 1)),
        (local(4), -1, local(4, 1)),
        (MMA_C, 1, local(2, 1, 1).spatial(8, 1, 4).local(1, 1, 2)),
        (replicate(2), 0, replicate(2) * local(1)),
    ],
)
def test_unsqueeze_table(layout: RegisterLayout, dim: int, expected: RegisterLayout) -> None:
    assert unsqueeze(layout, dim) == expected
    assert layout.unsqueeze(dim) == expected


@given(layouts, st.data())
def test_squeeze_undoes_unsqueeze(layout: RegisterLayout, data: st.DataObject) -> None:
    dim = data.draw(st.integers(0, layout.rank))
    grown = unsqueeze(layout, dim)
    assert grown.shape == layout.shape[:dim] + (1,) + layout.shape[dim:]
    assert (np.delete(grown.table(), dim, axis=-1) == layout.table()).all()
    assert squeeze(grown, dim) == layout


# --------------------------------------------------------------------------------------------
# concat
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "dim", "expected"),
    [
        # two mma accumulators side by side are the A operand of the next mma (16 x 16)
        (MMA_C, MMA_C, 1, MMA_A),
        # two accumulators stacked: registers 4..7 hold rows 16..31
        (MMA_C, MMA_C, 0, local(4, 1).spatial(8, 4).local(1, 2)),
        # tiles of different extents held the same way per block of 4 rows
        (local(2).spatial(4), local(3).spatial(4), 0, local(5).spatial(4)),
        # replicated tiles concatenate too
        (spatial(4).replicate(2), spatial(4).replicate(2), 0, local(2).spatial(4).replicate(2)),
    ],
)
def test_concat_table(a: RegisterLayout, b: RegisterLayout, dim: int, expected) -> None:
    assert concat(a, b, dim) == expected
    assert a.concat(b, dim) == expected


def test_concat_of_mma_accumulators_register_by_register() -> None:
    both = concat(MMA_C, MMA_C, 1)
    for t in range(32):
        for i in range(4):
            row, col = MMA_C.map(t, i)
            assert both.map(t, i) == (row, col)
            assert both.map(t, 4 + i) == (row, col + 8)


@pytest.mark.parametrize(
    ("a", "b", "dim", "match"),
    [
        (spatial(4), local(4), 0, "a has 4 threads but b has 1"),
        (local(2, 4), local(2, 3), 0, "differ in dimension 1"),
        (local(2), local(2, 1), 0, "a has rank 1 but b has rank 2"),
        (local(2), local(2), 1, "out of range for rank 1"),
        # b's threads hold consecutive pairs, a's threads hold elements 4 apart
        (local(2).spatial(4), spatial(4).local(2), 0, "not the same layout stacked"),
    ],
)
def test_concat_rejects_mismatched_operands(a, b, dim: int, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        concat(a, b, dim)


def concatenated_table(a: RegisterLayout, b: RegisterLayout, dim: int) -> np.ndarray:
    """The postcondition of `concat`, written out: a's registers, then b's shifted along dim."""
    shifted = b.table().copy()
    shifted[..., dim] += a.shape[dim]
    return np.concatenate([a.table(), shifted], axis=1)


@st.composite
def stacked_pairs(draw: st.DrawFn) -> tuple[RegisterLayout, RegisterLayout, int]:
    """local(p along dim) * k and local(q along dim) * k for a random k."""
    common = draw(strategies.register_layouts(max_rank=2))
    dim = draw(st.integers(0, common.rank - 1))
    p, q = draw(st.integers(1, 3)), draw(st.integers(1, 3))

    def stack(n: int) -> RegisterLayout:
        return local(*(n if d == dim else 1 for d in range(common.rank))) * common

    return stack(p), stack(q), dim


@given(stacked_pairs())
def test_concat_of_stacked_layouts_meets_its_postcondition(case: tuple) -> None:
    a, b, dim = case
    result = concat(a, b, dim)
    assert result.num_threads == a.num_threads
    assert result.local_size == a.local_size + b.local_size
    assert (result.table() == concatenated_table(a, b, dim)).all()


@st.composite
def same_thread_pairs(draw: st.DrawFn) -> tuple[RegisterLayout, RegisterLayout, int]:
    """An arbitrary layout a, and a layout b of a's thread count with a's extents outside one
    dimension: ``replicate(r) * local(rest) * spatial(split)`` (or column_spatial)."""
    a = draw(strategies.arbitrary_register_layouts(max_rank=2))
    dim = draw(st.integers(0, a.rank - 1))
    extent = draw(st.integers(1, 4))
    shape = tuple(extent if d == dim else n for d, n in enumerate(a.shape))
    divisors = [[k for k in range(1, n + 1) if n % k == 0] for n in shape]
    splits = [s for s in itertools.product(*divisors) if a.num_threads % math.prod(s) == 0]
    split = draw(st.sampled_from(splits))
    order = draw(st.sampled_from([spatial, column_spatial]))
    b = (
        replicate(a.num_threads // math.prod(split))
        * local(*(n // k for n, k in zip(shape, split)))
        * order(*split)
    )
    return a, b, dim


@given(st.one_of(stacked_pairs(), same_thread_pairs()))
def test_concat_exists_exactly_when_the_concatenated_table_is_a_layout(case: tuple) -> None:
    a, b, dim = case
    shape = tuple(n + (b.shape[d] if d == dim else 0) for d, n in enumerate(a.shape))
    expected = layout_of_table(concatenated_table(a, b, dim), shape)
    try:
        result = concat(a, b, dim)
    except LayoutError:
        result = None
    assert result == expected

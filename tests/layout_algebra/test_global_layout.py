"""Tests of global-memory layouts: concrete and symbolic strides, offsets, binding."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from layout_algebra import (
    GlobalLayout,
    LayoutError,
    const,
    evaluate,
    global_row_major,
    var,
)

M = var("M", 1, 4096)
K = var("K", 1, 4096)


def test_row_major_offsets() -> None:
    layout = global_row_major(4, 8)
    assert layout.strides == (8, 1)
    assert layout.offset((2, 3)) == 19
    assert (layout.size, layout.num_elements, layout.rank) == (32, 32, 2)
    assert not layout.is_symbolic


def test_row_major_three_dimensions() -> None:
    layout = global_row_major(2, 3, 4)
    assert layout.strides == (12, 4, 1)
    assert layout.offset((1, 2, 3)) == 23


def test_symbolic_row_major() -> None:
    layout = global_row_major(64, K)
    assert layout.strides == (K, 1)
    assert layout.is_symbolic
    assert layout.free_vars() == frozenset({"K"})
    assert repr(layout.offset((2, 5))) == "2 * K + 5"
    assert evaluate(layout.size, {"K": 10}) == 640
    assert evaluate(layout.num_elements, {"K": 10}) == 640


def test_symbolic_shape_and_strides() -> None:
    layout = GlobalLayout((M, K), (K * 2, 1))
    row, column = var("row", 0, 4095), var("column", 0, 4095)
    offset = layout.offset((row, column))
    assert evaluate(offset, {"K": 7, "row": 3, "column": 4}) == 3 * 14 + 4
    assert evaluate(layout.size, {"M": 3, "K": 7}) == 2 * 14 + 6 + 1


def test_bind() -> None:
    layout = global_row_major(M, K).bind({"M": 16, "K": 32})
    assert layout == GlobalLayout((16, 32), (32, 1))
    assert layout.offset((2, 5)) == 69
    assert global_row_major(64, K).bind({"K": 32, "unused": 1}).offset((2, 5)) == 69


def test_constant_expressions_are_stored_as_ints() -> None:
    layout = GlobalLayout((const(4), 8), (8, const(1)))
    assert layout == global_row_major(4, 8)
    assert all(isinstance(x, int) for x in layout.shape + layout.strides)


def test_offset_on_arrays() -> None:
    layout = GlobalLayout((3, 4), (10, 2))
    rows, columns = np.arange(3)[:, None], np.arange(4)[None, :]
    expected = [[10 * r + 2 * c for c in range(4)] for r in range(3)]
    assert layout.offset((rows, columns)).tolist() == expected


def test_offset_with_symbolic_extent_skips_the_upper_check() -> None:
    # the extent M is only known at run time; the offset still needs a non-negative coordinate
    layout = GlobalLayout((M, 8), (8, 1))
    assert layout.offset((1000, 2)) == 8002
    with pytest.raises(LayoutError, match=r"coord \(-1, 2\) is outside shape"):
        layout.offset((-1, 2))


def test_equality_and_hash() -> None:
    assert global_row_major(64, K) == GlobalLayout((64, K), (K, 1))
    assert hash(global_row_major(64, K)) == hash(GlobalLayout((64, K), (K, 1)))
    assert global_row_major(64, K) != GlobalLayout((64, K), (K * 2, 1))


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (((4, 0), (1, 1)), r"shape\[1\] must be >= 1, got 0"),
        (((4, 4), (-1, 1)), r"strides\[0\] must be >= 0, got -1"),
        (((4, 4), (1,)), r"strides \(1,\) has 1 entries, shape \(4, 4\) has 2"),
        (((4, 2.0), (1, 1)), r"shape\[1\] must be an int or an Expr, got 2.0"),
        ((4, (1,)), "shape must be a tuple of ints or Exprs"),
    ],
)
def test_global_layout_invalid(args: tuple, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        GlobalLayout(*args)


@pytest.mark.parametrize(
    ("layout", "coord", "match"),
    [
        (global_row_major(4, 8), (4, 0), r"coord \(4, 0\) is outside shape \(4, 8\) in dim 0"),
        (global_row_major(4, 8), (1,), r"coord \(1,\) has rank 1, expected 2"),
        (global_row_major(4, 8), "ab", "coord must be a sequence of 2 indices"),
        (global_row_major(4, 8), (1.5, 0), r"coord\[0\] must be an int, an integer array"),
        (global_row_major(4, 8), (np.array([0, 4]), 0), r"holds values in \[0, 4\], outside"),
        (global_row_major(4, 8), (np.array([0.5]), 0), r"coord\[0\] must be an integer array"),
        (global_row_major(4, K), (np.array([0, 1]), 0), r"stride K is symbolic; bind"),
        (global_row_major(4, 8), (np.array([0, 1]), var("c", 0, 7)), "mixes NumPy arrays"),
    ],
)
def test_offset_invalid(layout: GlobalLayout, coord: object, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        layout.offset(coord)


def test_bind_invalid() -> None:
    with pytest.raises(LayoutError, match=r"bind needs values for \['K'\], got \['M'\]"):
        global_row_major(M, K).bind({"M": 4})
    with pytest.raises(LayoutError, match=r"strides\[0\] must be >= 0, got -3"):
        GlobalLayout((4, 4), (K - 4, 1)).bind({"K": 1})


@st.composite
def symbolic_layouts(draw: st.DrawFn) -> tuple[GlobalLayout, dict[str, int]]:
    """A rank 1-3 layout whose strides mix ints with small expressions in K and M, and values
    for K and M."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    choices = st.sampled_from(["int", "K", "M", "K*M", "K+int"])
    strides = []
    for _ in range(rank):
        kind = draw(choices)
        number = draw(st.integers(0, 9))
        strides.append({"int": number, "K": K, "M": M, "K*M": K * M, "K+int": K + number}[kind])
    env = {"K": draw(st.integers(1, 50)), "M": draw(st.integers(1, 50))}
    return GlobalLayout(shape, tuple(strides)), env


@given(symbolic_layouts())
def test_offset_is_sum_of_coordinate_times_stride(case: tuple[GlobalLayout, dict]) -> None:
    layout, env = case
    concrete = layout.bind(env)
    strides = [evaluate(s, env) for s in layout.strides]
    for coord in itertools.product(*(range(n) for n in layout.shape)):
        expected = sum(c * s for c, s in zip(coord, strides))
        assert evaluate(layout.offset(coord), env) == expected
        assert concrete.offset(coord) == expected
    coords = np.indices(layout.shape)
    assert concrete.offset(tuple(coords)).max() + 1 == concrete.size == evaluate(layout.size, env)

"""Tests of `divide` (`A / B`, the C with C * B == A) and `left_divide` (B * C == A)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from layout_algebra import (
    LayoutError,
    RegisterLayout,
    column_local,
    divide,
    left_divide,
    local,
    replicate,
    spatial,
)
from layout_algebra import testing as strategies

MMA_C = local(2, 1).spatial(8, 4).local(1, 2)


def padded(layout: RegisterLayout, rank: int) -> RegisterLayout:
    """`layout` with leading extent-1 dimensions up to `rank`, as a product pads it."""
    return local(*(1,) * rank) * layout


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # a mode of a is split to match b: 8 = 2 * 4
        (spatial(8), spatial(4), spatial(2)),
        # the mma accumulator without its innermost register pair
        (MMA_C, local(1, 2), local(2, 1).spatial(8, 4)),
        # the mma accumulator over the warp's threads leaves the register blocks
        (MMA_C, spatial(8, 4).local(1, 2), local(2, 1)),
        # a replication is split like a mode: 6 = 3 * 2
        (spatial(4).replicate(6), replicate(2), spatial(4).replicate(3)),
        # A of the mma over one ldmatrix matrix: the four matrices, column-major
        (
            column_local(2, 2).spatial(8, 4).local(1, 2),
            spatial(8, 4).local(1, 2),
            column_local(2, 2),
        ),
        # dividing by oneself leaves the unit layout
        (MMA_C, MMA_C, local(1, 1)),
    ],
)
def test_divide_table(a: RegisterLayout, b: RegisterLayout, expected: RegisterLayout) -> None:
    assert a / b == expected
    assert divide(a, b) * b == a


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (spatial(8), spatial(4), spatial(2)),
        (MMA_C, local(2, 1), spatial(8, 4).local(1, 2)),
        (MMA_C, local(2, 1).spatial(8, 4), local(1, 2)),
        (replicate(6).spatial(4), replicate(2), replicate(3).spatial(4)),
    ],
)
def test_left_divide_table(a: RegisterLayout, b: RegisterLayout, expected: RegisterLayout) -> None:
    assert left_divide(a, b) == expected
    assert b * left_divide(a, b) == a


@pytest.mark.parametrize(
    ("operation", "a", "b", "match"),
    [
        # a's local list does not end with the innermost part of dimension 0
        (divide, local(2).spatial(4), local(2), "local modes of .* are not the last"),
        # the extents do not divide
        (divide, spatial(6), spatial(4), "not divisible"),
        # b's thread structure is not the tail of a's
        (
            divide,
            spatial(2, 4),
            column_local(1, 1).spatial(2, 1),
            "spatial modes of .* are not the last",
        ),
        # b's local mode is not the outermost of a's dimension 0
        (left_divide, spatial(4).local(2), local(2), "not the first"),
        # a product with a rank-2 divisor has rank 2, so it never equals a rank-1 layout
        (divide, local(1), local(1, 1), "rank 2 > dividend rank 1"),
        (left_divide, spatial(4), local(1, 4), "rank 2 > dividend rank 1"),
    ],
)
def test_impossible_divisions_raise(operation, a, b, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        operation(a, b)


layouts = st.one_of(strategies.register_layouts(), strategies.arbitrary_register_layouts())


@given(layouts, layouts)
def test_product_then_divide_gives_back_the_left_factor(
    a: RegisterLayout, b: RegisterLayout
) -> None:
    c = a * b
    assert c / b == padded(a, c.rank)


@given(layouts, layouts)
def test_product_then_left_divide_gives_back_the_right_factor(
    a: RegisterLayout, b: RegisterLayout
) -> None:
    c = a * b
    assert left_divide(c, a) == padded(b, c.rank)


@given(strategies.arbitrary_register_layouts(), strategies.register_layouts(max_factors=1))
def test_divide_is_sound_whenever_it_succeeds(a: RegisterLayout, b: RegisterLayout) -> None:
    try:
        quotient = a / b
    except LayoutError:
        return
    assert quotient * b == a

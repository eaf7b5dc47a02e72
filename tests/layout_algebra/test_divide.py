"""Tests of `divide` (`A / B`, the C with C * B == A) and `left_divide` (B * C == A).

Besides literal tables, the properties draw divisors that are products of several primitives of
one rank (several modes per dimension) and compare both operations with a brute-force quotient
computed in this file from the definition of the product, so an impossible division that
returns a wrong quotient fails as surely as a possible one that raises.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layout_algebra import (
    LayoutError,
    RegisterLayout,
    column_local,
    column_spatial,
    divide,
    layout_from_table,
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
        # a divisor with a local and a spatial mode in one dimension: a's 16 threads split 4 * 4
        (spatial(4).local(2).spatial(4), local(2).spatial(4), spatial(4)),
        # local(2).spatial(16) is local(2).spatial(4) * spatial(4): its inner 4 threads divide off
        (local(2).spatial(16), spatial(4), local(2).spatial(4)),
        # two modes per dimension in both operands
        (spatial(2, 2).local(2, 2).spatial(2, 2), local(2, 2).spatial(2, 2), spatial(2, 2)),
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
        # local(2).spatial(16) is local(2).spatial(4) * spatial(4): the outer factor divides off
        (local(2).spatial(16), local(2).spatial(4), spatial(4)),
        (spatial(2, 2).local(2, 2).spatial(2, 2), spatial(2, 2).local(2, 2), spatial(2, 2)),
    ],
)
def test_left_divide_table(a: RegisterLayout, b: RegisterLayout, expected: RegisterLayout) -> None:
    assert left_divide(a, b) == expected
    assert b * left_divide(a, b) == a


@pytest.mark.parametrize(
    ("operation", "a", "b", "match"),
    [
        # a's local list does not end with the innermost part of dimension 0
        (
            divide,
            local(2).spatial(4),
            local(2),
            r"local modes of .* are not the last local modes of .*, so no layout c satisfies "
            r"c \* b == a",
        ),
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
        (
            left_divide,
            spatial(4).local(2),
            local(2),
            r"local modes of .* are not the first local modes of .*, so no layout c satisfies "
            r"b \* c == a",
        ),
        # a product with a rank-2 divisor has rank 2, so it never equals a rank-1 layout
        (
            divide,
            local(1),
            local(1, 1),
            r"rank 2 > dividend rank 1, and a product with it has rank >= 2, so no layout c "
            r"satisfies c \* b == a",
        ),
        (left_divide, spatial(4), local(1, 4), r"rank 2 > dividend rank 1, .* b \* c == a"),
        # c * local(2).spatial(4) holds element 4 in register 1 of thread 0 (x = 8c + 4i + t),
        # local(2).spatial(16) holds element 16 there (x = 16i + t)
        (divide, local(2).spatial(16), local(2).spatial(4), "local modes of .* are not the last"),
        # spatial(4) * c makes the two top bits of x a thread digit (x = 8t' + ...); in a the top
        # bit is the register (x = 16i + t)
        (left_divide, local(2).spatial(16), spatial(4), "not match the outermost part"),
        # (x = 4t' + 2i + t): a register digit sits between the thread digits of spatial(4)
        (divide, spatial(2).local(2).spatial(2), spatial(4), "not match the innermost part"),
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


# --------------------------------------------------------------------------------------------
# Products of several primitives of one rank, and a brute-force quotient
# --------------------------------------------------------------------------------------------

PRIMITIVES = (local, spatial, column_local, column_spatial)


@st.composite
def factor_lists(draw: st.DrawFn, rank: int, budget: list[int], count: tuple[int, int]) -> list:
    """`count` (min, max) primitive factors of rank `rank` (sizes 2..4, some replicates),
    spending `budget[0]` (the product of all sizes drawn; sizes become 1 when it runs out) so
    every table stays small."""

    def size(low: int = 2) -> int:
        value = draw(st.integers(low, max(low, min(4, budget[0])))) if budget[0] >= low else 1
        budget[0] //= value
        return value

    factors = []
    for _ in range(draw(st.integers(*count))):
        if budget[0] >= 2 and draw(st.integers(0, 5)) == 0:
            factors.append(replicate(size()))
        else:
            factors.append(draw(st.sampled_from(PRIMITIVES))(*(size() for _ in range(rank))))
    return factors


def product_of(factors: list, rank: int) -> RegisterLayout:
    layout = local(*(1,) * rank)
    for factor in factors:
        layout = layout * factor
    return layout


@st.composite
def quotient_cases(draw: st.DrawFn, shuffle: bool) -> tuple[RegisterLayout, ...]:
    """(c, b, c * b, b * c) for products c (1 or 2 factors) and b (2 or 3 factors) of one rank;
    with `shuffle`, the last two are products of a random order of all the factors instead, so
    a quotient may or may not exist."""
    rank = draw(st.integers(1, 2))
    budget = [strategies.MAX_CELLS]
    b_factors = draw(factor_lists(rank, budget, (2, 3)))
    c_factors = draw(factor_lists(rank, budget, (1, 2)))
    if shuffle:
        orders = [draw(st.permutations(c_factors + b_factors)) for _ in range(2)]
    else:
        orders = [c_factors + b_factors, b_factors + c_factors]
    return (product_of(c_factors, rank), product_of(b_factors, rank)) + tuple(
        product_of(order, rank) for order in orders
    )


def reference_table(layout: RegisterLayout, rank: int) -> np.ndarray:
    """[num_threads, local_size, rank] coordinates from the definition (`testing.reference_map`
    on the layout's fields), padded with leading zero coordinates to `rank`."""
    fields = (layout.shape, layout.mode_shape, layout.spatial_modes, layout.local_modes)
    threads, size = strategies.reference_sizes(fields)
    table = np.zeros((threads, size, rank), dtype=np.int64)
    for t in range(threads):
        for i in range(size):
            coords = strategies.reference_map(fields, t, i)
            table[t, i, rank - len(coords) :] = coords
    return table


def brute_force_quotient(a: RegisterLayout, b: RegisterLayout, inner: bool) -> np.ndarray | None:
    """The table of the c with c * b == a (`inner`) or b * c == a, or None when there is none.

    From the product's closed form, (c * b)(t, i) = c(t // Tb, i // Lb) * shape_b + b(t % Tb,
    i % Lb) and (b * c)(t, i) = b(t // Tc, i // Lc) * shape_c + c(t % Tc, i % Lc); with
    b(0, 0) = 0 this fixes c's table from a's, and c exists iff that table is a layout's table
    (asked of `layout_from_table`) and the closed form gives back all of a.
    """
    if b.rank > a.rank:
        return None
    rank = a.rank
    table_a, table_b = reference_table(a, rank), reference_table(b, rank)
    shape_b = np.array((1,) * (rank - b.rank) + b.shape)
    (threads_a, size_a, _), (threads_b, size_b, _) = table_a.shape, table_b.shape
    if threads_a % threads_b or size_a % size_b or np.any(np.array(a.shape) % shape_b):
        return None
    threads_c, size_c, shape_c = threads_a // threads_b, size_a // size_b, a.shape // shape_b
    t, i = np.indices((threads_a, size_a))
    if inner:
        scaled = table_a[::threads_b, ::size_b]
        if np.any(scaled % shape_b):
            return None
        table_c = scaled // shape_b
        rebuilt = (
            table_c[t // threads_b, i // size_b] * shape_b + table_b[t % threads_b, i % size_b]
        )
    else:
        table_c = table_a[:threads_c, :size_c]
        rebuilt = (
            table_b[t // threads_c, i // size_c] * shape_c + table_c[t % threads_c, i % size_c]
        )
    if not np.array_equal(rebuilt, table_a):
        return None
    try:
        layout_from_table(table_c, tuple(int(x) for x in shape_c))
    except LayoutError:
        return None
    return table_c


@pytest.mark.parametrize(
    ("a", "b", "inner", "exists"),
    [
        (local(2).spatial(16), local(2).spatial(4), True, False),
        (local(2).spatial(16), local(2).spatial(4), False, True),
        (local(2).spatial(16), spatial(4), True, True),
        (local(2).spatial(16), spatial(4), False, False),
        (spatial(4).replicate(6), replicate(2), True, True),
        (spatial(4), replicate(2), True, False),
    ],
)
def test_brute_force_quotient_table(a, b, inner: bool, exists: bool) -> None:
    """The oracle itself, on cases worked out by hand in `test_divide_table` and above."""
    assert (brute_force_quotient(a, b, inner) is not None) == exists


@settings(max_examples=40)
@given(quotient_cases(shuffle=False))
def test_division_of_a_product_of_several_factors_gives_back_the_other_factor(case) -> None:
    c, b, c_times_b, b_times_c = case
    # Precondition: the cases are admissible, by construction and by the brute-force oracle.
    assert brute_force_quotient(c_times_b, b, inner=True) is not None
    assert brute_force_quotient(b_times_c, b, inner=False) is not None
    quotient = divide(c_times_b, b)
    assert quotient * b == c_times_b
    assert quotient == c
    np.testing.assert_array_equal(reference_table(quotient, c.rank), reference_table(c, c.rank))
    quotient = left_divide(b_times_c, b)
    assert b * quotient == b_times_c
    assert quotient == c
    np.testing.assert_array_equal(reference_table(quotient, c.rank), reference_table(c, c.rank))


@settings(max_examples=80)
@given(quotient_cases(shuffle=True), st.booleans())
def test_division_agrees_with_the_brute_force_quotient(case, inner: bool) -> None:
    """Sound and complete: a quotient is returned exactly when one exists, and it is that one.

    Both outcomes are checked against the oracle, so neither can pass vacuously (of the drawn
    cases, about 60% have no quotient and 40% have one)."""
    _, b, c_times_b, b_times_c = case
    a = c_times_b if inner else b_times_c
    operation = divide if inner else left_divide
    expected = brute_force_quotient(a, b, inner)
    if expected is None:
        with pytest.raises(LayoutError, match=f"^{operation.__name__}: "):
            operation(a, b)
        return
    quotient = operation(a, b)
    assert (quotient * b if inner else b * quotient) == a
    np.testing.assert_array_equal(reference_table(quotient, a.rank), expected)

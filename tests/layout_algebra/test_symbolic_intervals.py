"""Interval analysis and simplification of `layout_algebra.symbolic` on the cases that mix signs.

`Expr.bounds()` promises bounds that hold every value an expression takes while each variable
stays within its bounds; the bitwise operators act on two's complement integers there (Python's
semantics), so the interval of `a & b` with a negative operand may reach below 0. The oracle is
brute force: every pair of operand values of small intervals, evaluated by Python. `simplify`
promises the same value; it is checked against evaluating the original expression.
"""

from __future__ import annotations

import operator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from layout_algebra.symbolic import simplify, var

BITWISE = {"&": operator.and_, "|": operator.or_, "^": operator.xor}


def value_range(op: str, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    """The least and greatest value of `x op y` over every x in a, y in b (inclusive)."""
    values = [BITWISE[op](x, y) for x in range(a[0], a[1] + 1) for y in range(b[0], b[1] + 1)]
    return min(values), max(values)


def symbolic_bounds(op: str, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    x, y = var("x", *a), var("y", *b)
    return BITWISE[op](x, y).bounds()


@pytest.mark.parametrize(
    ("op", "a", "b", "least", "greatest"),
    [
        # -4 & -1 == -4 (all bits of -4), -1 & 3 == 3: a negative left side keeps the sign bit.
        ("&", (-4, -1), (-1, 3), -4, 3),
        # The same with the sides exchanged.
        ("&", (-1, 3), (-4, -1), -4, 3),
        # Both straddle 0: -2 & -1 == -2, 3 & -1 == 3.
        ("&", (-2, 3), (-1, 2), -2, 3),
        # One side non-negative: the result keeps only bits of 5, so 0 <= a & b <= 5.
        ("&", (0, 5), (-3, 2), 0, 5),
        # -8 | 0 == -8, 7 | 0 == 7; -1 ^ 3 == -4, 3 ^ 0 == 3.
        ("|", (-8, 7), (0, 0), -8, 7),
        ("^", (-1, 3), (0, 3), -4, 3),
    ],
)
def test_bitwise_bounds_of_mixed_signs_hold_the_extreme_values(
    op: str, a: tuple[int, int], b: tuple[int, int], least: int, greatest: int
) -> None:
    assert value_range(op, a, b) == (least, greatest)
    lo, hi = symbolic_bounds(op, a, b)
    assert lo <= least and greatest <= hi


@st.composite
def intervals(draw: st.DrawFn, straddling: bool) -> tuple[int, int]:
    """A small interval of ints; with `straddling`, one holding a negative value and 0."""
    if straddling:
        return draw(st.integers(-9, -1)), draw(st.integers(0, 9))
    lo = draw(st.integers(-9, 9))
    return lo, draw(st.integers(lo, 9))


@given(st.sampled_from(sorted(BITWISE)), intervals(straddling=False), intervals(straddling=True))
def test_bitwise_bounds_hold_every_value(op: str, a: tuple[int, int], b: tuple[int, int]) -> None:
    for left, right in ((a, b), (b, a)):
        least, greatest = value_range(op, left, right)
        lo, hi = symbolic_bounds(op, left, right)
        assert lo <= least and greatest <= hi, (op, left, right, (lo, hi))


def test_simplify_keeps_the_constant_when_it_folds_quotient_and_remainder() -> None:
    # (x // 4) * 4 + 5 + x % 4 == x + 5: the recombination must carry the 5 along.
    x = var("x", -50, 50)
    expression = (x // 4) * 4 + 5 + x % 4
    simplified = simplify(expression)
    assert simplified == x + 5
    for value in range(-50, 51):
        assert simplified.evaluate({"x": value}) == expression.evaluate({"x": value}) == value + 5


@given(
    st.integers(2, 9),
    st.integers(-20, 20),
    st.integers(-3, 3).filter(bool),
    st.permutations(range(3)),
)
def test_simplify_of_quotient_remainder_sums_keeps_the_value(
    modulus: int, constant: int, scale: int, order: list[int]
) -> None:
    x = var("x", -30, 30)
    parts = [(x // modulus) * (modulus * scale), (x % modulus) * scale, constant]
    expression = parts[order[0]] + parts[order[1]] + parts[order[2]]
    simplified = simplify(expression)
    assert simplified == simplify(x * scale + constant)
    for value in range(-30, 31):
        env = {"x": value}
        assert simplified.evaluate(env) == expression.evaluate(env) == scale * value + constant

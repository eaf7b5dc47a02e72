"""The integer translation of a shift by a bounded symbolic count (`proofs.encode`).

``a << k`` is a * 2**k and ``a >> k`` is floor(a / 2**k): a case split over every count the
bounds allow (a negative count raises in Python, so only counts from max(lo, 0) matter). Each
count is checked against the value written by hand, the count 0 (no shift) included.
"""

from __future__ import annotations

import pytest
import z3

from layout_algebra import Expr, var
from proofs import to_z3


def value_of(expr: Expr, **values: int) -> int:
    """Z3's value of `expr` with each variable replaced by the given constant."""
    term = to_z3(expr, {name: z3.IntVal(v) for name, v in values.items()})
    result = z3.simplify(term)
    assert z3.is_int_value(result), result
    return result.as_long()


u = var("u", 0, 63)


@pytest.mark.parametrize(
    ("lo", "hi"),
    [
        (0, 4),  # counts from zero
        (-2, 4),  # a negative lower bound: counts 0 .. 4 are the ones that evaluate
        (0, 0),  # the only count is zero
    ],
)
@pytest.mark.parametrize(
    ("op", "a", "expected"),
    [
        ("<<", 3, [3, 6, 12, 24, 48]),  # 3 * 2**k
        (">>", 45, [45, 22, 11, 5, 2]),  # floor(45 / 2**k)
    ],
)
def test_shift_by_every_count_in_its_bounds(
    lo: int, hi: int, op: str, a: int, expected: list[int]
) -> None:
    count = var("s", lo, hi)
    expr = u << count if op == "<<" else u >> count
    for k in range(0, hi + 1):
        assert value_of(expr, u=a, s=k) == expected[k], (op, a, k)


def test_shift_by_zero_is_proved_the_identity() -> None:
    count = var("s", 0, 3)
    term, operand = to_z3(u << count), to_z3(u)
    solver = z3.Solver()
    solver.add(to_z3(count) == 0, operand >= 0, operand <= 63, term != operand)
    assert solver.check() == z3.unsat

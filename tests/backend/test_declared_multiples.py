"""The int parameters declared multiples, as the lowering reads them (`backend.lower.context`).

`declared_multiple_params` picks the parameters the lowering may write as ``m * q``,
`declared_multiples` gives those products over their quotient variables, and
`with_declared_multiples` substitutes them into an expression and simplifies it, so that the
divisibility the declaration promises is visible to `known_divisor` (vector widths, bulk-copy
strides). Exact tables of each, and a property: the substituted expression takes, at every
quotient q, the value the original takes at ``m * q``.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from backend.lower.context import (
    RESERVED_PREFIX,
    declared_multiple_params,
    declared_multiples,
    quotient,
    with_declared_multiples,
)
from ir.builder import ProgramBuilder
from ir.program import Program
from ir.specialize import specialize
from layout_algebra.symbolic import Expr, known_divisor, simplify, var


def parameters_program() -> Program:
    """A program of four int parameters: n a multiple of 8, k of any value, c a compile-time
    constant multiple of 4, w a multiple of 2 from 1 (its quotient then starts at 1)."""
    with ProgramBuilder("declared_multiples", 32) as b:
        b.int_param("n", 0, 4096, multiple_of=8)
        b.int_param("k", 0, 4096)
        b.int_param("c", 0, 64, multiple_of=4, constant=True)
        b.int_param("w", 1, 65, multiple_of=2)
    return b.program()


PROGRAM = parameters_program()
MULTIPLES = declared_multiples(PROGRAM)
N, K, W = var("n", 0, 4096), var("k", 0, 4096), var("w", 1, 65)
Q_N = var(f"{RESERVED_PREFIX}q_n", 0, 512)
Q_W = var(f"{RESERVED_PREFIX}q_w", 1, 32)


def test_the_parameters_declared_multiples_of_more_than_one_and_not_specialised():
    assert [p.name for p in declared_multiple_params(PROGRAM)] == ["n", "c", "w"]
    # Specialised, c's value is in the body: it is no longer a parameter to write as m * q.
    specialised = specialize(PROGRAM, {"c": 16})
    assert [p.name for p in declared_multiple_params(specialised)] == ["n", "w"]


def test_each_multiple_is_its_declared_factor_times_a_bounded_quotient():
    assert sorted(MULTIPLES) == ["c", "n", "w"]
    n, c, w = (p for p in PROGRAM.params if p.name in MULTIPLES)
    assert (quotient(n).lo, quotient(n).hi) == (0, 512)
    assert (quotient(c).lo, quotient(c).hi) == (0, 16)
    # w in [1, 65] and even: w = 2 q with q in [1, 32] (the bounds rounded inwards).
    assert (quotient(w).lo, quotient(w).hi) == (1, 32)
    assert MULTIPLES["n"] == 8 * Q_N
    assert MULTIPLES["w"] == 2 * Q_W


def test_substituted_expressions_table():
    table: list[tuple[Expr | int, Expr | int, int]] = [
        # (expression, expected, its known divisor)
        (N % 8, 0, 0),
        (N - (N // 8) * 8, 0, 0),
        ((N // 2) * 4, 16 * Q_N, 16),
        ((N + 4) // 4, 2 * Q_N + 1, 1),
        (N * 2 + 6, 16 * Q_N + 6, 2),
        (W * N, 16 * Q_W * Q_N, 16),
        (N + K, 8 * Q_N + K, 1),
        (K * 4, K * 4, 4),  # no declared multiple in it: as it was
    ]
    for expr, expected, divisor in table:
        result = with_declared_multiples(expr, MULTIPLES)
        assert isinstance(result, Expr)
        assert result == simplify(expected), (expr, result)
        assert known_divisor(result) == divisor, (expr, result)
    # An int is not an expression to substitute into.
    assert with_declared_multiples(7, MULTIPLES) == 7
    assert type(with_declared_multiples(7, MULTIPLES)) is int


def _expressions() -> st.SearchStrategy[Expr]:
    leaves = st.sampled_from([N, K, W]) | st.integers(0, 40).map(simplify)
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.tuples(inner, inner).map(lambda p: p[0] + p[1]),
            st.tuples(inner, inner).map(lambda p: p[0] - p[1]),
            st.tuples(inner, st.integers(1, 12)).map(lambda p: p[0] * p[1]),
            st.tuples(inner, st.integers(1, 16)).map(lambda p: p[0] // p[1]),
            st.tuples(inner, st.integers(1, 16)).map(lambda p: p[0] % p[1]),
        ),
        max_leaves=6,
    )


@settings(max_examples=150, deadline=None)
@given(_expressions(), st.integers(0, 512), st.integers(1, 32), st.integers(0, 4096))
def test_substitution_keeps_every_value(expr, q_n, q_w, k):
    result = with_declared_multiples(expr, MULTIPLES)
    quotients = {f"{RESERVED_PREFIX}q_n": q_n, f"{RESERVED_PREFIX}q_w": q_w, "k": k}
    assert result.evaluate(quotients) == expr.evaluate({"n": 8 * q_n, "w": 2 * q_w, "k": k})
    assert result.free_vars() <= set(quotients)

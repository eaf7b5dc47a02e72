"""Literal tables of the symbolic integer type `layout_algebra.symbolic.Expr`: construction and
folding, evaluation, errors, substitution, bounds, simplification, the C text, sympy and known
divisors (the properties over random trees are in test_symbolic_properties.py).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import sympy

from layout_algebra.errors import LayoutError
from layout_algebra.symbolic import (
    Expr,
    as_expr,
    const,
    evaluate,
    known_divisor,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    select,
    simplify,
    var,
)

# Variables of the literal tables.
T = var("t", 0, 127)
I = var("i", 0, 3)
N = var("n")
M = var("m")
P = var("p", 1, None)
Q = var("q", None, -1)
A = var("a", 0, 4095)


def swizzle(x: Expr | int, bits: int, base: int, shift: int) -> Expr | int:
    """CuTe's Swizzle<bits, base, shift> of x, written with Python's operators."""
    return x ^ ((x & (((1 << bits) - 1) << (base + shift))) >> shift)


U = var("u", 0, None)


# ------------------------------------------------------------------------------ construction

CONSTRUCTION_TABLE = [
    (N + 0, "n"),
    (0 + N, "n"),
    (N - 0, "n"),
    (N * 1, "n"),
    (1 * N, "n"),
    (N * 0, "0"),
    (N // 1, "n"),
    (N % 1, "0"),
    (N // -1, "-n"),
    (const(7) // 2, "3"),
    (const(-7) // 2, "-4"),  # floor, not truncation
    (const(-7) % 3, "2"),  # the sign of the divisor
    (const(7) % -3, "-2"),
    (N // 0, "n // 0"),  # left for evaluation to reject
    (const(3) // 0, "const(3) // 0"),
    ((N + 2) + 3, "n + 5"),
    ((N + 2) - 5, "n - 3"),
    ((N - 2) + 2, "n"),
    ((N * 2) * 3, "n * 6"),
    (-(0 - N), "n"),
    (N - (-N), "n + n"),
    (3 - N, "3 - n"),
    (N * -3, "n * (-3)"),
    (-(N * 2), "-(n * 2)"),
    (T // 4 * 2 + I, "(t // 4) * 2 + i"),
    (T // 4 // 8, "t // 4 // 8"),
    (N - (T - I), "n - (t - i)"),
    ((N + 1) * 2, "(n + 1) * 2"),
    (minimum(N, N), "n"),
    (maximum(3, 5), "5"),
    (minimum(N, 3), "minimum(n, 3)"),
    (const(3) < 4, "1"),
    (const(4) < 4, "0"),
    (N < 4, "n < 4"),
    (4 < N, "n > 4"),  # Python reflects the comparison
    (const(4) < N, "const(4) < n"),
    ((N < 3) + 1, "(n < 3) + 1"),
    (N.eq(3), "n.eq(3)"),
    (const(3).eq(N), "const(3).eq(n)"),
    ((N + 1).ne(3), "(n + 1).ne(3)"),
    (logical_and(0, N < 3), "0"),
    (logical_and(1, N < 3), "n < 3"),
    (logical_and(N, 2), "n.ne(0)"),  # a nonzero constant leaves the truth of the other side
    (logical_or(N < 3, 5), "1"),
    (logical_or(N < 3, T > 4), "logical_or(n < 3, t > 4)"),
    (logical_not(N < 3), "n >= 3"),
    (logical_not(logical_not(N)), "n.ne(0)"),
    (logical_not(N), "logical_not(n)"),
    (select(1, N, T), "n"),
    (select(0, N, T), "t"),
    (select(N < 0, T, T), "t"),
    (select(N < 0, -N, N), "select(n < 0, -n, n)"),
    (N ^ 0, "n"),
    (0 ^ N, "n"),
    (N & 0, "0"),
    (0 & N, "0"),
    (N | 0, "n"),
    (0 | N, "n"),
    (N << 0, "n"),
    (N >> 0, "n"),
    (0 << N, "0"),
    (0 >> N, "0"),
    (N ^ N, "0"),
    (N & N, "n"),
    (N | N, "n"),
    (const(12) ^ 10, "6"),
    (const(12) & 10, "8"),
    (const(12) | 10, "14"),
    (const(3) << 4, "48"),
    (const(100) >> 3, "12"),
    (const(-7) >> 1, "-4"),  # Python's shift rounds down
    (const(1) << -1, "const(1) << (-1)"),  # a negative count is left for evaluation to reject
    ((N << 2) << 3, "n << 5"),
    ((N >> 2) >> 3, "n >> 5"),
    ((N << 2) >> 3, "n << 2 >> 3"),  # opposite shifts do not cancel: low bits are lost
    (2 << N, "2 << n"),  # a reflected operator keeps the order
    (np.int64(3) ^ N, "3 ^ n"),
    (swizzle(N, 3, 3, 4), "n ^ (n & 896) >> 4"),  # Python: >> binds tighter than & and ^
    ((N | M) & T, "(n | m) & t"),
    (N | M & T, "n | m & t"),
    ((N ^ M) ^ T, "n ^ m ^ t"),
    (N ^ (M ^ T), "n ^ (m ^ t)"),
    (N + M << 2, "n + m << 2"),
    ((N < 3) & (M > 1), "(n < 3) & (m > 1)"),  # unlike C, & binds tighter than <
    ((N & M) < 3, "n & m < 3"),
    (-N & 3, "-n & 3"),
    (3 & -N, "3 & (-n)"),
]


@pytest.mark.parametrize(("expression", "text"), CONSTRUCTION_TABLE)
def test_construction_folds_constants_and_identities(expression: Expr, text: str) -> None:
    assert repr(expression) == text
    assert str(expression) == text


def test_numpy_integers_combine_with_expressions() -> None:
    assert np.int64(3) + N == 3 + N
    assert isinstance(np.int32(2) * N, Expr)
    assert (N < np.int64(4)) == (N < 4)
    assert (np.int64(4) > N) == (N < 4)


def test_structural_equality_and_hash_make_dictionary_keys() -> None:
    table = {T // 4 * 2 + I: "offset"}
    assert table[var("t", 0, 127) // 4 * 2 + var("i", 0, 3)] == "offset"
    assert N + 1 == N + 1
    assert N + 1 != N + 2
    assert var("n", 0, 3) != N  # bounds are part of the structure
    assert const(3) == 3
    assert hash(const(3)) == hash(3)
    assert N != 3


def test_symbolic_equality_is_a_method_not_double_equals() -> None:
    assert isinstance(N.eq(M), Expr)
    assert (N == M) is False
    assert evaluate(N.eq(M), {"n": 2, "m": 2}) is True
    assert evaluate(N.ne(M), {"n": 2, "m": 2}) is False


def test_fields_of_nodes() -> None:
    node = select(T < 4, T, 4 - T)
    assert node.op == "select"
    assert node.args == (T < 4, T, 4 - T)
    assert (T.name, T.lo, T.hi, T.value, T.args) == ("t", 0, 127, None, ())
    assert (const(5).op, const(5).value, const(5).name) == ("const", 5, None)
    assert T.is_const is False and const(5).is_const is True
    assert (T < 4).is_boolean is True and (T + 4).is_boolean is False


def test_direct_construction_builds_without_folding() -> None:
    node = Expr("+", (N, const(0)))
    assert repr(node) == "n + 0"
    assert node != N
    assert evaluate(node, {"n": 7}) == 7
    assert Expr("var", name="v", lo=0, hi=3).bounds() == (0, 3)


def test_constants_convert_to_int_and_symbols_do_not() -> None:
    assert int(const(7)) == 7
    assert list(range(const(3))) == [0, 1, 2]
    assert bool(const(0)) is False and bool(const(2)) is True


def test_expressions_are_immutable_and_copy_to_themselves() -> None:
    with pytest.raises(AttributeError, match="Expr is immutable: cannot set 'op'"):
        N.op = "const"
    expression = T // 4 + I
    assert copy.copy(expression) is expression
    assert copy.deepcopy(expression) is expression


# -------------------------------------------------------------------------------- evaluation

EVALUATION_TABLE = [
    (N // 3, {"n": -7}, -3),  # floor division rounds towards minus infinity
    (N % 3, {"n": -7}, 2),  # the remainder takes the divisor's sign
    (N % -3, {"n": 7}, -2),
    (N // -3, {"n": 7}, -3),
    (N // M, {"n": -7, "m": -2}, 3),
    (T // 4 * 2 + I, {"t": 13, "i": 2}, 8),
    (minimum(N, M), {"n": -1, "m": 4}, -1),
    (maximum(N, M), {"n": -1, "m": 4}, 4),
    (N < M, {"n": 1, "m": 4}, True),
    (N >= M, {"n": 1, "m": 4}, False),
    ((N < M) * 5, {"n": 1, "m": 4}, 5),
    (logical_and(N, M), {"n": 3, "m": 0}, False),
    (logical_or(N, M), {"n": 3, "m": 0}, True),
    (logical_not(N), {"n": 0}, True),
    (select(N, T, I), {"n": -2, "t": 5, "i": 1}, 5),  # any nonzero condition is true
    (select(N < 0, -N, N), {"n": -9}, 9),
    (select(N.ne(0), 12 // N, -1), {"n": 0}, -1),  # only the chosen side is evaluated
    (logical_and(N.ne(0), (12 // N).eq(4)), {"n": 0}, False),  # && reads its right side lazily
    (N * N * N, {"n": 10**20}, 10**60),  # exact, no overflow
    (swizzle(N, 3, 3, 4), {"n": 0x12345678}, 0x12345658),  # DESIGN's example of Swizzle(3,3,4)
    (swizzle(N, 2, 4, 3), {"n": 0b1100110000}, 0b1100010000),  # bits 7..8 flip bits 4..5
    (N ^ M, {"n": 0b1100, "m": 0b1010}, 0b0110),
    (N & M, {"n": 0b1100, "m": 0b1010}, 0b1000),
    (N | M, {"n": 0b1100, "m": 0b1010}, 0b1110),
    (N << M, {"n": 3, "m": 70}, 3 << 70),  # exact
    (N >> M, {"n": 1000, "m": 3}, 125),
    ((N < 3) | (M < 3), {"n": 1, "m": 5}, 1),  # truth values combine as the ints 0 and 1
    (N & M, {"n": -6, "m": 7}, 2),  # outside the domain: Python's two's complement
    (N >> 1, {"n": -7}, -4),  # ... and Python's rounding down
]


@pytest.mark.parametrize(("expression", "env", "expected"), EVALUATION_TABLE)
def test_evaluate_table(expression: Expr, env: dict[str, int], expected: int) -> None:
    result = evaluate(expression, env)
    assert result == expected
    assert type(result) is type(expected)
    assert expression.evaluate(env) == expected


def test_evaluate_accepts_numpy_scalars_and_returns_python_ints() -> None:
    result = evaluate(N * 3, {"n": np.int16(-5)})
    assert result == -15 and type(result) is int
    assert evaluate(7, {}) == 7


def test_evaluate_broadcasts_arrays() -> None:
    env = {"t": np.arange(4), "i": np.array([[0], [1]])}
    result = evaluate(T // 2 + I, env)
    assert result.dtype == np.int64
    np.testing.assert_array_equal(result, [[0, 0, 1, 1], [1, 1, 2, 2]])
    comparison = evaluate(T < 2, env)
    assert comparison.dtype == np.bool_
    np.testing.assert_array_equal(comparison, [[True, True, False, False]] * 2)
    np.testing.assert_array_equal(evaluate(const(5), env), np.full((2, 4), 5))
    np.testing.assert_array_equal(evaluate(T * 2, {"t": np.arange(3), "n": 1}), [0, 2, 4])


def test_evaluate_on_arrays_keeps_floor_semantics_and_guards_select() -> None:
    n = np.array([-7, -3, 0, 4, 9])
    np.testing.assert_array_equal(evaluate(N // 2, {"n": n}), [-4, -2, 0, 2, 4])
    np.testing.assert_array_equal(evaluate(N % 2, {"n": n}), [1, 1, 0, 0, 1])
    guarded = select(N.ne(0), 12 // N, -1)
    np.testing.assert_array_equal(evaluate(guarded, {"n": n}), [-2, -4, -1, 3, 1])
    summed = evaluate((N < 0) + (N < 5), {"n": n})  # truth values add as integers
    np.testing.assert_array_equal(summed, [2, 2, 1, 1, 0])


def test_evaluate_bitwise_operators_on_arrays() -> None:
    addresses = np.arange(0, 1 << 14, 37)
    expected = [swizzle(int(address), 3, 3, 4) for address in addresses]
    result = evaluate(swizzle(A, 3, 3, 4), {"a": addresses})
    assert result.dtype == np.int64
    np.testing.assert_array_equal(result, expected)
    shifted = evaluate((N << M) | (N >> M), {"n": np.array([5, 96]), "m": np.array([1, 4])})
    np.testing.assert_array_equal(shifted, [10 | 2, 1536 | 6])


def test_evaluate_rejects_negative_shift_counts() -> None:
    with pytest.raises(LayoutError, match=r"negative shift count -2 in n << m; expected a count"):
        evaluate(N << M, {"n": 1, "m": -2})
    with pytest.raises(LayoutError, match=r"negative shift count -1 in const\(1\) >> \(-1\)"):
        evaluate(const(1) >> -1, {})


def test_evaluate_rejects_missing_variables() -> None:
    with pytest.raises(LayoutError, match=r"no value for variable\(s\) \['t'\]"):
        evaluate(N + T, {"n": 1})
    with pytest.raises(LayoutError, match=r"the environment binds \['n'\]"):
        (N + T).evaluate({"n": 1})


def test_evaluate_rejects_values_of_other_types() -> None:
    with pytest.raises(TypeError, match="variable 'n' is bound to 1.5 of type float"):
        evaluate(N, {"n": 1.5})
    with pytest.raises(TypeError, match="variable 'n' is bound to an array of dtype float64"):
        evaluate(N, {"n": np.array([1.5])})


def test_evaluate_rejects_division_by_zero_on_ints() -> None:
    with pytest.raises(ZeroDivisionError, match=r"division by zero in n // m"):
        evaluate(N // M, {"n": 1, "m": 0})
    with pytest.raises(ZeroDivisionError, match=r"division by zero in n % 0"):
        evaluate(N % 0, {"n": 1})


# ------------------------------------------------------------------------------------ errors


def test_as_expr_and_const_reject_other_kinds() -> None:
    assert as_expr(N) is N
    assert as_expr(np.int8(4)) == const(4)
    assert as_expr(True) == const(1)
    with pytest.raises(TypeError, match="expected an int or an Expr, got 1.5 of type float"):
        as_expr(1.5)
    with pytest.raises(TypeError, match="expected an integer, got '3' of type str"):
        const("3")
    with pytest.raises(TypeError, match="expected an int or an Expr, got None"):
        N.eq(None)


def test_operators_reject_other_kinds() -> None:
    with pytest.raises(TypeError, match="unsupported operand"):
        N + 1.5
    with pytest.raises(TypeError, match="floor division only: use `//`, not `/`"):
        N / 2
    with pytest.raises(TypeError, match="unsupported operand"):
        np.arange(3) * N


def test_symbols_have_no_python_truth_value() -> None:
    with pytest.raises(TypeError, match="the truth value of the symbolic expression n < 3"):
        bool(N < 3)
    with pytest.raises(TypeError, match="truth value of the symbolic expression"):
        min(N, M)
    with pytest.raises(TypeError, match="cannot convert the symbolic expression n to int"):
        int(N)
    with pytest.raises(TypeError, match="cannot convert the symbolic expression n"):
        range(N)


def test_var_rejects_bad_names_and_bounds() -> None:
    with pytest.raises(LayoutError, match="variable name '2x' is not a C identifier"):
        var("2x")
    with pytest.raises(TypeError, match="a variable name must be a str, got 3"):
        var(3)
    with pytest.raises(LayoutError, match="variable 'x' has empty bounds: lo=3 > hi=1"):
        var("x", 3, 1)
    with pytest.raises(TypeError, match=r"bound lo=0.5 of variable 'x' must be an int"):
        var("x", 0.5)


def test_direct_construction_validates_nodes() -> None:
    with pytest.raises(LayoutError, match="unknown expression operator 'pow'"):
        Expr("pow", (N, M))
    with pytest.raises(LayoutError, match="operator '\\+' takes 2 operands, got 1"):
        Expr("+", (N,))
    with pytest.raises(TypeError, match="operand 3 of '\\+' is a int, expected an Expr"):
        Expr("+", (N, 3))
    with pytest.raises(LayoutError, match="only constants have a value, got 3 on '\\*'"):
        Expr("*", (N, M), value=3)
    with pytest.raises(LayoutError, match="only variables have a name and bounds"):
        Expr("const", value=3, name="c")


# ---------------------------------------------------------------------- variables, substitution


def test_free_vars_and_variables() -> None:
    expression = select(N < M, T // 4, N + I)
    assert expression.free_vars() == frozenset({"n", "m", "t", "i"})
    assert expression.variables() == (N, M, T, I)
    assert const(3).free_vars() == frozenset()


SUBSTITUTION_TABLE = [
    (N * 4 + T, {"n": 2}, "8 + t"),
    (N * 4 + T, {"n": 2, "t": 5}, "13"),
    (T // 4 * 2 + I, {"t": N + 8}, "((n + 8) // 4) * 2 + i"),
    (select(N < 0, T, I), {"n": -1}, "t"),  # the condition folds, and so does the select
    (N + M, {"q": 1}, "n + m"),  # names that do not occur change nothing
]


@pytest.mark.parametrize(("expression", "mapping", "text"), SUBSTITUTION_TABLE)
def test_substitute_table(expression: Expr, mapping: dict[str, Any], text: str) -> None:
    assert repr(expression.substitute(mapping)) == text


# ---------------------------------------------------------------------------------- bounds

BOUNDS_TABLE = [
    (T // 4 * 2 + I, (0, 65)),
    ((T - 64) // 8, (-8, 7)),
    (N, (None, None)),
    (N % 4, (0, 3)),
    (N % -4, (-3, 0)),
    (N % Q, (None, 0)),
    (T % P, (0, 127)),
    (T % 200, (0, 127)),
    (N // P, (None, None)),
    (T // P, (0, 127)),
    (T // Q, (-127, 0)),
    (T // (I - 1), (-127, 127)),  # the divisor -1, 1 or 2: zero is no divisor
    (T * -2, (-254, 0)),
    (P * Q, (None, -1)),
    (minimum(T, N), (None, 127)),
    (maximum(T, N), (0, None)),
    (T < 128, (1, 1)),
    (T < 100, (0, 1)),
    (T.eq(-1), (0, 0)),
    (logical_and(T >= 0, P > 0), (1, 1)),
    (logical_or(N < 0, Q < 0), (1, 1)),
    (select(N < 0, T, I), (0, 127)),
    (select(Q < 0, T, N), (0, 127)),
    (T & I, (0, 3)),
    (T & 96, (0, 96)),
    (T | I, (0, 127)),  # within the bits of 127
    (T | 200, (200, 255)),  # at least each side, at most the sum and the bits of 255
    (I | 8, (8, 11)),
    (T ^ 200, (0, 255)),
    (I ^ var("j", 0, 1), (0, 3)),
    (T ^ P, (0, None)),
    (T << 2, (0, 508)),
    (T >> 3, (0, 15)),
    (T << I, (0, 1016)),
    (T >> I, (0, 127)),
    (T >> N, (0, 127)),  # only non-negative counts count
    (P << I, (1, None)),
    (Q >> 1, (None, -1)),
    (var("a", -9, 9) << I, (-72, 72)),
    (N & T, (0, 127)),  # one side non-negative: some of its bits
    (N | T, (None, None)),
    (var("a", -4, 3) ^ var("b", -2, 5), (-8, 7)),  # two's complement of 4 bits
    (var("a", -4, 3) | var("b", -2, 5), (-8, 7)),
    (swizzle(A, 3, 3, 4), (0, 4095)),
]


@pytest.mark.parametrize(("expression", "expected"), BOUNDS_TABLE)
def test_bounds_table(expression: Expr, expected: tuple[int | None, int | None]) -> None:
    assert expression.bounds() == expected


# ---------------------------------------------------------------------------- simplification

SIMPLIFY_TABLE = [
    ((N // 4) // 8, "n // 32"),
    ((N * 4) // 4, "n"),
    ((N * 4) % 4, "0"),
    ((N % 32) % 8, "n % 8"),
    (var("y", 0, 9) % 16, "y"),  # 0 <= y < 16
    (var("y", 0, 9) // 16, "0"),
    (var("y", 16, 20) % 16, "y - 16"),  # one multiple of 16 below every value
    (T // 32 * 32 + T % 32, "t"),
    ((T // 4 % 8) * 4 + T % 4 + T // 32 * 32, "t"),  # a mixed-radix decode re-encoded
    ((N * 4 + I) // 4, "n"),
    ((N * 4 + I) % 4, "i"),
    ((N * 2) % 4, "(n % 2) * 2"),
    ((N * 6) // 4, "(n * 3) // 2"),
    ((N + 5) // 4, "(n + 1) // 4 + 1"),
    (N - N, "0"),
    (N * 3 + 2 * N, "n * 5"),
    (-N + M, "m - n"),
    (N * 3 * M * 2, "n * m * 6"),
    ((T // 4) * 2 + I - (T // 4) * 2, "i"),
    ((T % 8) // 8, "0"),
    (minimum(var("y", 0, 9), 20), "y"),
    (maximum(T, T + 1), "t + 1"),
    (T < 128, "1"),
    (N + 1 > N, "1"),
    (select(T >= 0, N, M), "n"),
    (N // -4, "n // (-4)"),  # negative divisors are left alone
    (N // M, "n // m"),
    (T >> 3, "t // 8"),  # non-negative: shifts take part in the division rewrites
    (N >> 3, "n >> 3"),  # of unknown sign: kept, so the C text stays a shift
    (N << 2, "n * 4"),
    ((N << 2) + N * 4, "n * 8"),
    ((T * 8 + I) >> 3, "t"),
    (T & 7, "t % 8"),  # a low mask is a remainder
    (T & 48, "((t // 16) % 4) * 16"),  # a contiguous mask picks a field
    (T & 96, "(t // 32) * 32"),  # ... here the top field of t
    (var("y", 0, 9) & 15, "y"),
    ((N * 16) | I, "n * 16 + i"),  # no common bit: | and ^ are +, & is 0
    (I ^ (N * 16), "n * 16 + i"),
    ((N * 16 + 32) & I, "0"),
    ((N * 16) | T, "n * 16 | t"),  # t may reach bit 4
    (swizzle(A, 3, 3, 4), "a ^ ((a // 128) % 8) * 8"),
    (swizzle(N, 3, 3, 4), "n ^ (n & 896) // 16"),
    (N ^ M, "n ^ m"),
    (N >> M, "n >> m"),
    # A constant whose bits the rest of a sum cannot have leaves an exclusive or: a swizzled
    # tile's unrolled steps then share `p ^ b`, each one operation (or an offset) past it.
    (
        ((T % 8) * 128 + (T // 8 % 2) * 8 + 16) ^ ((T % 8) * 8),
        "(t % 8) * 128 + ((t // 8) % 2) * 8 ^ (t % 8) * 8 ^ 16",
    ),
    (((T % 8) * 128 + 1024) ^ A, "(t % 8) * 128 ^ a ^ 1024"),
    (((T % 8) * 128 + 4) ^ ((T % 8) * 8), "(t % 8) * 136 + 4"),  # b lacks bit 2: an offset
    (((T % 8) * 8 + 16) ^ ((T % 8) * 8), "(t % 8) * 8 + 16 ^ (t % 8) * 8"),  # may carry: kept
    ((N * 128 + 16) ^ T, "n * 128 + 16 ^ t"),  # n of unknown sign: kept
]


@pytest.mark.parametrize(("expression", "text"), SIMPLIFY_TABLE)
def test_simplify_table(expression: Expr, text: str) -> None:
    assert repr(simplify(expression)) == text


# ---------------------------------------------------------------------------------- C text

C_TEXT_TABLE = [
    (T // 32, "t >> 5"),  # non-negative by a power of two: a shift
    (T % 32, "t & 31"),  # ... and a mask
    (T // 3, "t / 3"),  # non-negative by positive: C's operators agree with Python's
    (T % 3, "t % 3"),
    (T // P, "t / p"),
    (T % P, "t % p"),
    (N // 4, "n / 4 - (n % 4 < 0)"),  # a dividend of unknown sign
    (N % 4, "(n % 4 + 4) % 4"),
    (N // P, "n / p - (n % p < 0)"),
    (T // Q, "t / q - (t % q > 0)"),  # a negative divisor
    (N // M, "(n - (n % m + m) % m) / m"),  # a divisor of unknown sign
    (N % M, "(n % m + m) % m"),
    ((N + 1) // 4, "(n + 1) / 4 - ((n + 1) % 4 < 0)"),
    ((N // 4) * 4, "(n / 4 - (n % 4 < 0)) * 4"),
    ((N % 4) * 2, "((n % 4 + 4) % 4) * 2"),
    (T // 4 * 2 + I, "(t >> 2) * 2 + i"),
    ((T + 1) // 2, "(t + 1) >> 1"),
    ((T // 2) % 4, "(t >> 1) & 3"),
    (N - (T - I), "n - (t - i)"),
    (N * -3, "n * (-3)"),
    (-(N * 2), "-(n * 2)"),
    ((N < 3) + 1, "(n < 3) + 1"),
    (N.eq(3), "n == 3"),
    ((N < 3).eq(M > 1), "(n < 3) == (m > 1)"),
    (minimum(T, 100), "(t < 100 ? t : 100)"),
    (maximum(N, 0), "(n > 0 ? n : 0)"),
    (select(N < 0, -N, N), "(n < 0 ? -n : n)"),
    (logical_and(N < 0, T > 4), "n < 0 && t > 4"),
    (logical_or(logical_and(N, M), T), "(n && m) || t"),
    (logical_not(N), "!n"),
    (logical_not(N + M), "!(n + m)"),
    (swizzle(N, 3, 3, 4), "n ^ ((n & 896) >> 4)"),
    (N ^ M, "n ^ m"),
    (N | M ^ T, "n | (m ^ t)"),  # & ^ | are parenthesised as operands, whatever their order
    ((N & M) | T, "(n & m) | t"),
    ((N & M) + 1, "(n & m) + 1"),
    ((N & M) < 3, "(n & m) < 3"),  # in C, & binds looser than <
    ((N & M).eq(M), "(n & m) == m"),
    (N & (M < 3), "n & (m < 3)"),
    (logical_and(N & 1, M), "(n & 1) && m"),
    (select(N & 1, M, T), "((n & 1) ? m : t)"),
    (minimum(N ^ M, 3), "((n ^ m) < 3 ? (n ^ m) : 3)"),
    (logical_not(N | M), "!(n | m)"),
    (-(N ^ M), "-(n ^ m)"),
    (N >> 2, "n >> 2"),
    ((N + 1) << 2, "(n + 1) << 2"),
    ((N << 2) + 1, "(n << 2) + 1"),
    ((N << 2) * 3, "(n << 2) * 3"),
    ((N << 2) >> M, "(n << 2) >> m"),
    ((N >> 2) < 3, "n >> 2 < 3"),  # shifts bind tighter than comparisons in C too
    (N & -3, "n & (-3)"),
    (-N & 3, "(-n) & 3"),
    ((T % 32) * 2, "(t & 31) * 2"),  # a remainder printed as a mask
    (logical_and(T % 32, N), "(t & 31) && n"),
]


@pytest.mark.parametrize(("expression", "text"), C_TEXT_TABLE)
def test_to_c_table(expression: Expr, text: str) -> None:
    assert expression.to_c() == text


# ------------------------------------------------------------------------------------- sympy


def test_to_sympy_and_latex() -> None:
    n = sympy.Symbol("n", integer=True)
    t = sympy.Symbol("t", integer=True, nonnegative=True)
    assert (N // 4).to_sympy() == sympy.floor(n / 4)
    assert (T % 4 + N).to_sympy() == sympy.Mod(t, 4) + n
    assert minimum(N, 3).to_sympy() == sympy.Min(n, 3)
    assert (N < 3).to_sympy() == sympy.Lt(n, 3)
    assert ((N < 3) + 1).to_sympy() == sympy.Piecewise((1, n < 3), (0, True)) + 1
    assert select(N, 1, 2).to_sympy() == sympy.Piecewise((1, sympy.Ne(n, 0)), (2, True))
    assert (N // 4)._repr_latex_() == r"$\left\lfloor{\frac{n}{4}}\right\rfloor$"


def test_to_sympy_of_bitwise_operators() -> None:
    n = sympy.Symbol("n", integer=True)
    m = sympy.Symbol("m", integer=True)
    assert (N << 3).to_sympy() == 8 * n
    assert (N << M).to_sympy() == n * 2**m
    assert (N >> M).to_sympy() == sympy.floor(n / 2**m)
    xor = (N ^ M).to_sympy()
    assert xor.func.__name__ == "bitwise_xor" and xor.args == (n, m)
    assert xor.subs({n: 12, m: 10}) == 6
    assert (N & M).to_sympy().subs({n: 12, m: 10}) == 8
    assert (N | M).to_sympy().subs({n: 12, m: 10}) == 14
    assert swizzle(N, 3, 3, 4).to_sympy().subs(n, 0x12345678) == 0x12345658
    assert (N ^ (M & 7))._repr_latex_() == r"$\left(n \oplus \left(m \mathbin{\&} 7\right)\right)$"


# ---------------------------------------------------------------------------- known divisors

KNOWN_DIVISOR_TABLE = [
    (0, 0),
    (-12, 12),
    (const(0), 0),
    (N, 1),
    (T, 1),
    (Expr("*", (N, const(0))), 0),
    (N * 8, 8),
    (N * 8 + 12, 4),
    (N * 6 + M * 9, 3),
    (N * 6 - 4, 2),
    (-(N * 6), 6),
    (N * 6 * (M * 4), 24),
    (N << 3, 8),
    ((N * 3) << 2, 12),
    (N << M, 1),
    ((N * 4) << M, 4),
    ((N * 24) >> 3, 3),
    (Expr(">>", (N * 24, const(4))), 1),
    (Expr("//", (N * 24, const(4))), 6),
    (Expr("//", (N * 24, const(16))), 1),
    (Expr("//", (N * 40, const(16))), 1),
    (Expr(">>", (N * 40, const(4))), 1),
    (Expr(">>", (N * 40, const(0))), 40),
    (N // 8, 1),
    (Expr("//", (N * 8, M * 4)), 1),
    ((N * 8) % 12, 4),
    (N % 8, 1),
    ((N * 16) % (M * 24), 8),
    (minimum(N * 6, 9), 3),
    (maximum(N * 4, M * 10), 2),
    (select(N < 3, N * 8, M * 12), 4),
    (select(N * 8, 1, 0), 1),
    ((N * 8) & M, 8),
    ((N * 8) & (M * 12), 8),
    ((N * 8) | (M * 12), 4),
    ((N * 24) ^ 4, 4),
    (Expr("^", (const(0), N * 12)), 12),
    (swizzle(U * 8, 3, 3, 3), 8),
    (N * 8 < 16, 1),
    (logical_and(N * 8, M * 8), 1),
]


@pytest.mark.parametrize(("expression", "divisor"), KNOWN_DIVISOR_TABLE)
def test_known_divisor_table(expression: Expr | int, divisor: int) -> None:
    assert known_divisor(expression) == divisor

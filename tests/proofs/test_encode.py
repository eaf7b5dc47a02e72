"""Tests of the translation of symbolic integers to Z3 (`proofs.encode`).

Literal values check each operator, with Python's floor division where Z3's own division
differs; a property evaluates random expression trees both ways (Python ints and Z3's simplifier
on constants); solver queries prove the division translation over all bounded operands; a
differential query per random bitwise tree over bounded symbolic variables shows that the integer
translation and the whole-query bit-vector translation both equal brute-force evaluation.
"""

from __future__ import annotations

from typing import Any

import pytest
import z3
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from layout_algebra import (
    Expr,
    LayoutError,
    const,
    evaluate,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    select,
    var,
)
from proofs import Encoder, EncodingError, to_z3
from proofs.encode import ModularPlan, bitvector_width, has_bitwise, modular_bitvector_plan

RLIMIT = 2_000_000

x = var("x", -8, 8)
y = var("y", -8, 8)
u = var("u", 0, 15)
w = var("w", 0, 15)
n = var("n")


def value_of(expr: Expr, **values: int) -> int:
    """Z3's value of `expr` with each variable replaced by the given constant."""
    term = to_z3(expr, {name: z3.IntVal(v) for name, v in values.items()})
    result = z3.simplify(term)
    assert z3.is_int_value(result), result
    return result.as_long()


def defined_at(expr: Expr, **values: int) -> bool:
    """Z3's verdict on whether evaluating `expr` raises nothing at the given values."""
    encoder = Encoder({name: z3.IntVal(v) for name, v in values.items()})
    return z3.is_true(z3.simplify(encoder.defined(expr)))


# --------------------------------------------------------------------------------------------
# Literal values, operator by operator
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "values", "expected"),
    [
        (x + y * 3, {"x": 2, "y": -4}, -10),
        (x - y, {"x": -3, "y": 5}, -8),
        (x // 4, {"x": -7}, -2),  # floor, not truncation
        (x % 4, {"x": -7}, 1),
        (x // -4, {"x": 7}, -2),  # a negative constant divisor rounds toward -inf too
        (x % -4, {"x": 7}, -1),  # and the remainder takes the divisor's sign
        (x // y, {"x": 7, "y": -2}, -4),
        (x % y, {"x": 7, "y": -2}, -1),
        (x // y, {"x": -7, "y": 2}, -4),
        (x % y, {"x": -7, "y": -2}, -1),
        (minimum(x, y), {"x": 3, "y": -1}, -1),
        (maximum(x, y), {"x": 3, "y": -1}, 3),
        (select(x < y, x, y * 10), {"x": 3, "y": 1}, 10),
        (x < y, {"x": 1, "y": 2}, 1),  # a comparison used as a number is 1 or 0
        (x.eq(y) + x.ne(y) * 2, {"x": 4, "y": 4}, 1),
        (logical_and(x, y) + logical_or(x, 0) * 2, {"x": 3, "y": 0}, 2),
        (logical_not(x) * 5, {"x": 0}, 5),
        (u ^ w, {"u": 12, "w": 10}, 6),
        (u & w, {"u": 12, "w": 10}, 8),
        (u | w, {"u": 12, "w": 10}, 14),
        (u ^ ((u & 24) >> 3), {"u": 9}, 8),  # a swizzle-like formula
        (u << 3, {"u": 5}, 40),
        (x >> 1, {"x": -7}, -4),  # Python's >> rounds down
        (u << var("s", 0, 4), {"u": 3, "s": 4}, 48),
        (u >> var("s", 0, 4), {"u": 15, "s": 2}, 3),
    ],
)
def test_translation_has_pythons_value(expr: Expr, values: dict[str, int], expected: int) -> None:
    assert evaluate(expr, values) == expected
    assert value_of(expr, **values) == expected


@pytest.mark.parametrize(
    ("dividend", "divisor", "euclidean", "floor"),
    [
        (7, 2, 3, 3),
        (-7, 2, -4, -4),  # positive divisor: Euclidean == floor
        (7, -2, -3, -4),  # negative divisor: they differ
        (-7, -2, 4, 3),
    ],
)
def test_z3_division_is_euclidean_and_the_translation_is_floor(
    dividend: int, divisor: int, euclidean: int, floor: int
) -> None:
    raw = z3.simplify(z3.IntVal(dividend) / z3.IntVal(divisor)).as_long()
    assert raw == euclidean
    assert dividend // divisor == floor
    assert value_of(x // y, x=dividend, y=divisor) == floor
    assert value_of(x // divisor, x=dividend) == floor


def test_floor_division_translation_is_proved_for_all_bounded_operands() -> None:
    a, b = var("a", -1000, 1000), var("b", -1000, 1000)
    encoder = Encoder()
    q, r = encoder.term(a // b), encoder.term(a % b)
    za, zb = encoder.term(a), encoder.term(b)
    python_floor = z3.And(
        za == zb * q + r,
        z3.If(zb > 0, z3.And(r >= 0, r < zb), z3.And(r <= 0, r > zb)),
    )
    solver = z3.Solver()
    solver.set("rlimit", RLIMIT)
    solver.add(*encoder.bounds(), zb != 0, z3.Not(python_floor))
    assert solver.check() == z3.unsat


def test_positive_divisor_needs_no_rewrite() -> None:
    a, b = z3.Ints("a b")
    solver = z3.Solver()
    solver.set("rlimit", RLIMIT)
    # Z3's a / b for b > 0 is the floor: b * q <= a < b * (q + 1).
    q = a / b
    solver.add(b > 0, z3.Not(z3.And(b * q <= a, a < b * (q + 1))))
    assert solver.check() == z3.unsat


# --------------------------------------------------------------------------------------------
# Definedness, bounds, errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "values", "defined"),
    [
        (x // y, {"x": 3, "y": 0}, False),
        (x // y, {"x": 3, "y": 1}, True),
        (select(y.ne(0), x // y, 0), {"x": 3, "y": 0}, True),  # the branch is not taken
        (select(y.eq(0), x // y, 0), {"x": 3, "y": 0}, False),
        (logical_and(y, x // y), {"x": 3, "y": 0}, True),  # && reads its right side lazily
        (logical_or(y.eq(0), x % y), {"x": 3, "y": 0}, True),
        (u << var("s", -2, 2), {"u": 3, "s": -1}, False),  # a negative shift count raises
    ],
)
def test_defined_follows_pythons_evaluation(
    expr: Expr, values: dict[str, int], defined: bool
) -> None:
    assert defined_at(expr, **values) is defined
    if not defined:
        with pytest.raises((ZeroDivisionError, LayoutError)):
            evaluate(expr, values)


def test_an_expression_without_divisors_or_shifts_is_defined_without_terms() -> None:
    """`defined` builds no condition for nodes that cannot raise: an address's sums, products,
    minima and comparisons give the literal True (no term in the query); a divisor inside
    gives its own condition alone."""
    encoder = Encoder()
    assert z3.is_true(encoder.defined(minimum(x + y * 3, 7) < select(y, x, 2)))
    condition = encoder.defined(minimum(x + 1, 7) + (x // y) * 2)
    assert z3.eq(condition, encoder.term(y) != 0)


def test_encoder_collects_declared_bounds() -> None:
    encoder = Encoder()
    encoder.term(x + u * n)
    assert sorted(str(c) for c in encoder.bounds()) == ["u <= 15", "u >= 0", "x <= 8", "x >= -8"]
    assert sorted(encoder.variables) == ["n", "u", "x"]


def test_env_terms_are_used_and_their_context_kept() -> None:
    context = z3.Context()
    t = z3.Int("thread", context)
    term = to_z3(var("t") * 2 + 1, {"t": t})
    assert term.ctx == context
    assert str(term) == "thread*2 + 1"


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (n & 3, r"operand n of '&' in n & 3 has bounds \(None, None\)"),
        (x ^ u, r"operand x of '\^' in x \^ u has bounds \(-8, 8\); the bitwise translation"),
        (u << n, r"shift count n of u << n has bounds \(None, None\)"),
        (u << var("s", 0, 100), r"expected finite bounds spanning at most 65 values"),
    ],
)
def test_untranslatable_expressions_raise(expr: Expr, message: str) -> None:
    with pytest.raises(EncodingError, match=message):
        to_z3(expr)


# --------------------------------------------------------------------------------------------
# Whole-query bit-vectors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exprs", "width"),
    [
        ([u ^ w], 6),  # every node within [0, 15]: 4 bits, a sign bit and one spare
        ([u * 16 + w], 10),  # the sum reaches 255
        ([u ^ w, u << 4], 10),
        ([u // (w + 1)], 7),  # the divisor w + 1 reaches 16
        ([u // w], None),  # the divisor may be 0
        ([x ^ 1], None),  # x may be negative
        ([(u ^ 1) - 8], None),  # so may the difference
        ([n & 1], None),  # n is unbounded
    ],
)
def test_bitvector_width(exprs: list[Expr], width: int | None) -> None:
    assert bitvector_width(exprs) == width


@pytest.mark.parametrize(
    ("exprs", "plan"),
    [
        ([u ^ w], ModularPlan(6, ())),  # as `bitvector_width`
        ([(u - 8) + w ^ 1], ModularPlan(8, ((u - 8) + w,))),  # the XOR reads the sum unsigned
        ([((u - 8) * 3 + 24) ^ w], ModularPlan(8, ())),  # u - 8 wraps; only the sum is read
        ([(u - 8) % 4], ModularPlan(6, (u - 8,))),  # the remainder reads u - 8 unsigned
        ([minimum(u - 8, w) < 2], ModularPlan(6, ())),  # signed comparisons read it exactly
        ([minimum(u - 8, w) ^ 1], ModularPlan(6, (minimum(u - 8, w),))),
        ([select(u - 8 < 0, u - 8, w) & 7], ModularPlan(6, (select(u - 8 < 0, u - 8, w),))),
        ([u - 20], ModularPlan(7, ())),  # a root needs only its magnitude: -20 .. -5
        ([u // w], None),  # the divisor may be 0
        ([x ^ 1], None),  # a variable's declared range reaches below zero
        ([n & 1], None),  # n is unbounded
    ],
)
def test_modular_bitvector_plan(exprs: list[Expr], plan: ModularPlan | None) -> None:
    assert modular_bitvector_plan(exprs) == plan


def test_has_bitwise() -> None:
    assert has_bitwise([x + 1, (u + 1) * 2 | 1])
    assert not has_bitwise([x + 1, u << 2, select(x < 0, u, w)])


def test_bitvector_encoder_rejects_nodes_outside_its_width() -> None:
    encoder = Encoder(width=4)
    with pytest.raises(EncodingError, match=r"u \* 2 has bounds \(0, 30\), outside \[0, 2\*\*3\)"):
        encoder.term(u * 2)


# --------------------------------------------------------------------------------------------
# Property: random trees, evaluated by Python and by Z3
# --------------------------------------------------------------------------------------------

LEAVES = st.one_of(st.sampled_from([x, y]), st.integers(-5, 5).map(const))
BITWISE_LEAVES = st.one_of(st.sampled_from([u, w]), st.integers(0, 15).map(const))


def _combine(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    binary = st.sampled_from(
        [
            lambda a, b: a + b,
            lambda a, b: a - b,
            lambda a, b: a * b,
            lambda a, b: a // b,
            lambda a, b: a % b,
            minimum,
            maximum,
            lambda a, b: a < b,
            lambda a, b: a >= b,
            lambda a, b: a.eq(b),
            logical_and,
            logical_or,
        ]
    )
    return st.one_of(
        st.builds(lambda f, a, b: f(a, b), binary, children, children),
        st.builds(select, children, children, children),
        st.builds(logical_not, children),
    )


def _combine_bitwise(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    binary = st.sampled_from(
        [
            lambda a, b: a ^ b,
            lambda a, b: a & b,
            lambda a, b: a | b,
            lambda a, b: a + b,
            lambda a, b: a * b,
            lambda a, b: a // (b + 1),
            lambda a, b: a % (b + 1),
        ]
    )
    shifts = st.builds(
        lambda a, k, left: a << k if left else a >> k, children, st.integers(0, 3), st.booleans()
    )
    return st.one_of(st.builds(lambda f, a, b: f(a, b), binary, children, children), shifts)


TREES = st.recursive(LEAVES, _combine, max_leaves=8)
BITWISE_TREES = st.recursive(BITWISE_LEAVES, _combine_bitwise, max_leaves=6)
SMALL = st.integers(-8, 8)
NIBBLE = st.integers(0, 15)


def _python_value(expr: Expr, env: dict[str, int]) -> Any:
    try:
        return int(evaluate(expr, env))
    except (ZeroDivisionError, LayoutError):
        return None


@given(TREES, SMALL, SMALL)
def test_translation_agrees_with_python_on_random_trees(expr: Expr, a: int, b: int) -> None:
    expected = _python_value(expr, {"x": a, "y": b})
    assert defined_at(expr, x=a, y=b) is (expected is not None)
    if expected is not None:
        assert value_of(expr, x=a, y=b) == expected


@given(BITWISE_TREES, NIBBLE, NIBBLE)
def test_bitwise_translation_agrees_with_python_on_random_trees(expr: Expr, a: int, b: int) -> None:
    expected = int(evaluate(expr, {"u": a, "w": b}))
    assert value_of(expr, u=a, w=b) == expected


@given(BITWISE_TREES, NIBBLE, NIBBLE)
def test_whole_bitvector_translation_agrees_with_python_on_random_trees(
    expr: Expr, a: int, b: int
) -> None:
    width = bitvector_width([expr])
    assert width is not None
    env = {"u": z3.BitVecVal(a, width), "w": z3.BitVecVal(b, width)}
    term = z3.simplify(Encoder(env, width=width).term(expr))
    assert term.as_long() == evaluate(expr, {"u": a, "w": b})


# --------------------------------------------------------------------------------------------
# Differential: the two translations of a query, against brute force
# --------------------------------------------------------------------------------------------


def _combine_ordered(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    """Bitwise trees with min, max and a select on a comparison (signed in bit-vectors)."""
    return st.one_of(
        _combine_bitwise(children),
        st.builds(minimum, children, children),
        st.builds(maximum, children, children),
        st.builds(lambda a, b, c, d: select(a < b, c, d), children, children, children, children),
    )


ORDERED_BITWISE_TREES = st.recursive(BITWISE_LEAVES, _combine_ordered, max_leaves=6)
BITWISE_ROOTED_TREES = st.builds(
    lambda f, a, b: f(a, b),
    st.sampled_from([lambda a, b: a ^ b, lambda a, b: a & b, lambda a, b: a | b]),
    ORDERED_BITWISE_TREES,
    ORDERED_BITWISE_TREES,
).filter(lambda expr: has_bitwise([expr]))


def _differs_from_table(expr: Expr, width: int | None, table: dict[tuple[int, int], int]) -> Any:
    """Z3's answer to "some u, w within their bounds where the translation of `expr` (integer
    terms for width None, else bit-vectors) differs from the `table` of Python's values"."""
    encoder = Encoder(ctx=z3.Context(), width=width)
    term, term_u, term_w = (encoder.term(e) for e in (expr, u, w))
    solver = z3.Solver(ctx=encoder.context)
    solver.set("rlimit", RLIMIT)
    solver.add(*encoder.bounds())
    solver.add(
        z3.Or(*(z3.And(term_u == a, term_w == b, term != value) for (a, b), value in table.items()))
    )
    return solver.check()


@settings(max_examples=20)
@given(BITWISE_ROOTED_TREES)
def test_bitvector_and_integer_translations_agree_with_brute_force(expr: Expr) -> None:
    """Over symbolic u, w in [0, 15] with their bounds asserted, as a query does, neither the
    integer translation nor the whole-query bit-vector one differs from Python's value at any
    of the 256 points: the two encodings of a query agree."""
    table = {(a, b): int(evaluate(expr, {"u": a, "w": b})) for a in range(16) for b in range(16)}
    width = bitvector_width([expr, u, w])
    assert width is not None
    assert _differs_from_table(expr, None, table) == z3.unsat
    assert _differs_from_table(expr, width, table) == z3.unsat


# --------------------------------------------------------------------------------------------
# Property: the modular bit-vector translation
# --------------------------------------------------------------------------------------------


def _combine_signed(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    """Ordered bitwise trees with differences, whose values may be negative."""
    return st.one_of(
        _combine_ordered(children),
        st.builds(lambda a, b: a - b, children, children),
        st.builds(lambda a, k: a - k, children, st.integers(1, 20)),
    )


SIGNED_TREES = st.recursive(BITWISE_LEAVES, _combine_signed, max_leaves=6)


@settings(max_examples=200)
@given(SIGNED_TREES, NIBBLE, NIBBLE)
def test_modular_translation_agrees_with_python_where_its_signed_nodes_are_not_negative(
    expr: Expr, a: int, b: int
) -> None:
    """At every point where the plan's `signed` nodes are non-negative (what a caller proves
    first), the modular bit-vector term has Python's value, read as a signed number."""
    plan = modular_bitvector_plan([expr])
    if plan is None:
        return
    env = {"u": a, "w": b}
    if any(evaluate(node, env) < 0 for node in plan.signed):
        return
    expected = _python_value(expr, env)
    assume(expected is not None)
    values = {"u": z3.BitVecVal(a, plan.width), "w": z3.BitVecVal(b, plan.width)}
    term = z3.simplify(Encoder(values, width=plan.width, modular=True).term(expr))
    assert term.as_signed_long() == expected

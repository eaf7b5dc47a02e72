"""Properties of the symbolic integer type over random expression trees, and differential checks.

Hypothesis properties over random trees (depth <= 4, small ranges including negatives, bitwise
nodes over non-negative operands and shift counts in [0, 3]) compare evaluation with Python's own
arithmetic, array evaluation with int evaluation, simplification with the original, and check
that every value is a multiple of `known_divisor`; differential checks compare with sympy and with
the C text compiled by the host C compiler (the literal tables are in test_symbolic.py).
"""

from __future__ import annotations

import operator
import pickle
import random
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

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
    simplification,
    simplify,
    var,
)


def swizzle(x: Expr | int, bits: int, base: int, shift: int) -> Expr | int:
    """CuTe's Swizzle<bits, base, shift> of x, written with Python's operators."""
    return x ^ ((x & (((1 << bits) - 1) << (base + shift))) >> shift)


# Variables of the random trees, and the ranges their values are drawn from (within the bounds).
X = var("x", -5, 5)
Y = var("y", 0, 9)
Z = var("z")
W = var("w", 1, 4)
U = var("u", 0, None)
K = var("k", 0, 3)
TREE_VARIABLES = (X, Y, Z, W)
NONNEGATIVE_VARIABLES = (Y, W, U, K)
TREE_RANGES = {"x": (-5, 5), "y": (0, 9), "z": (-6, 6), "w": (1, 4), "u": (0, 9), "k": (0, 3)}

Reference = Callable[[Mapping[str, int]], Any]

# name: (arity, build the Expr, Python reference given env and the operands' references).
TREE_OPERATIONS: dict[str, tuple[int, Callable[..., Expr], Callable[..., Any]]] = {
    "+": (2, operator.add, lambda env, f, g: f(env) + g(env)),
    "-": (2, operator.sub, lambda env, f, g: f(env) - g(env)),
    "*": (2, operator.mul, lambda env, f, g: f(env) * g(env)),
    "//": (2, operator.floordiv, lambda env, f, g: f(env) // g(env)),
    "%": (2, operator.mod, lambda env, f, g: f(env) % g(env)),
    "min": (2, minimum, lambda env, f, g: min(f(env), g(env))),
    "max": (2, maximum, lambda env, f, g: max(f(env), g(env))),
    "<": (2, operator.lt, lambda env, f, g: f(env) < g(env)),
    "<=": (2, operator.le, lambda env, f, g: f(env) <= g(env)),
    ">": (2, operator.gt, lambda env, f, g: f(env) > g(env)),
    ">=": (2, operator.ge, lambda env, f, g: f(env) >= g(env)),
    "eq": (2, lambda a, b: a.eq(b), lambda env, f, g: f(env) == g(env)),
    "ne": (2, lambda a, b: a.ne(b), lambda env, f, g: f(env) != g(env)),
    "and": (2, logical_and, lambda env, f, g: bool(f(env)) and bool(g(env))),
    "or": (2, logical_or, lambda env, f, g: bool(f(env)) or bool(g(env))),
    "neg": (1, operator.neg, lambda env, f: -f(env)),
    "not": (1, logical_not, lambda env, f: not f(env)),
    "select": (3, select, lambda env, c, f, g: f(env) if c(env) else g(env)),
    # Bitwise operations take non-negative operands; a shift count is reduced into [0, 3].
    "&": (2, operator.and_, lambda env, f, g: f(env) & g(env)),
    "|": (2, operator.or_, lambda env, f, g: f(env) | g(env)),
    "^": (2, operator.xor, lambda env, f, g: f(env) ^ g(env)),
    "<<": (2, lambda a, b: a << (b % 4), lambda env, f, g: f(env) << (g(env) % 4)),
    ">>": (2, lambda a, b: a >> (b % 4), lambda env, f, g: f(env) >> (g(env) % 4)),
}
OPERATION_NAMES = tuple(TREE_OPERATIONS)
BITWISE_NAMES = frozenset({"&", "|", "^", "<<", ">>"})
# The operations that give non-negative values (or truth values) on non-negative operands.
NONNEGATIVE_NAMES = tuple(name for name in OPERATION_NAMES if name not in ("-", "neg"))


def random_tree(
    integer: Callable[[int, int], int], depth: int, nonnegative: bool = False
) -> tuple[Expr, Reference]:
    """A random expression of at most `depth` levels and its Python reference function.

    `integer(lo, hi)` draws an int in [lo, hi] (hypothesis's draw or random.randint). A
    `nonnegative` tree takes non-negative values only (leaves in [0, 9], no subtraction); the
    operands of bitwise operations are such trees. Values are at most 9**16 in absolute value.
    """
    kind = integer(0, 5) if depth > 0 else integer(0, 1)
    if kind == 0:
        variables = NONNEGATIVE_VARIABLES if nonnegative else TREE_VARIABLES
        variable = variables[integer(0, len(variables) - 1)]
        return variable, lambda env: env[variable.name]
    if kind == 1:
        value = integer(0, 9) if nonnegative else integer(-6, 6)
        return const(value), lambda env: value
    names = NONNEGATIVE_NAMES if nonnegative else OPERATION_NAMES
    name = names[integer(0, len(names) - 1)]
    arity, build, reference = TREE_OPERATIONS[name]
    operands = [
        random_tree(integer, depth - 1, nonnegative or name in BITWISE_NAMES) for _ in range(arity)
    ]
    expressions = [expression for expression, _ in operands]
    references = [function for _, function in operands]
    return build(*expressions), lambda env: reference(env, *references)


def random_environment(integer: Callable[[int, int], int]) -> dict[str, int]:
    """Values of the tree variables, each within its bounds."""
    return {name: integer(lo, hi) for name, (lo, hi) in TREE_RANGES.items()}


@st.composite
def trees(draw: st.DrawFn) -> tuple[Expr, Reference]:
    return random_tree(lambda lo, hi: draw(st.integers(lo, hi)), 4)


@st.composite
def environments(draw: st.DrawFn) -> dict[str, int]:
    return random_environment(lambda lo, hi: draw(st.integers(lo, hi)))


def outcome(function: Callable[[Mapping[str, int]], Any], env: Mapping[str, int]) -> Any:
    """function(env), or the ZeroDivisionError class when it divides by zero."""
    try:
        return function(env)
    except ZeroDivisionError:
        return ZeroDivisionError


# ---------------------------------------------------------------------------------- properties


@settings(max_examples=200)
@given(trees(), environments())
def test_evaluate_on_ints_equals_python_arithmetic(
    tree: tuple[Expr, Reference], env: dict[str, int]
) -> None:
    expression, reference = tree
    expected = outcome(reference, env)
    actual = outcome(expression.evaluate, env)
    if (
        expected is not ZeroDivisionError
    ):  # folding may drop an operand dividing by zero: n // 0 * 0
        assert actual == expected
    assert actual is ZeroDivisionError or type(actual) in (int, bool)


@given(trees(), st.lists(environments(), min_size=1, max_size=12))
def test_evaluate_on_arrays_equals_elementwise_evaluation(
    tree: tuple[Expr, Reference], envs: list[dict[str, int]]
) -> None:
    expression, _ = tree
    arrays = {name: np.array([env[name] for env in envs]) for name in TREE_RANGES}
    result = evaluate(expression, arrays)
    assert result.shape == (len(envs),)
    assert result.dtype in (np.int64, np.bool_)
    for index, env in enumerate(envs):
        expected = outcome(expression.evaluate, env)
        if expected is not ZeroDivisionError:
            assert result[index] == expected


@settings(max_examples=200)
@given(trees(), environments())
def test_substituting_every_variable_folds_to_the_value(
    tree: tuple[Expr, Reference], env: dict[str, int]
) -> None:
    expression, _ = tree
    expected = outcome(expression.evaluate, env)
    if expected is not ZeroDivisionError:
        assert expression.substitute(env) == const(int(expected))


@settings(max_examples=200)
@given(trees(), environments())
def test_simplify_preserves_meaning(tree: tuple[Expr, Reference], env: dict[str, int]) -> None:
    expression, _ = tree
    expected = outcome(expression.evaluate, env)
    if expected is not ZeroDivisionError:
        assert simplify(expression).evaluate(env) == expected


@settings(max_examples=200)
@given(trees())
def test_simplify_is_idempotent(tree: tuple[Expr, Reference]) -> None:
    once = simplify(tree[0])
    assert simplify(once) == once


@settings(max_examples=200)
@given(trees())
def test_simplify_remembers_by_structure_what_a_fresh_start_gives(
    tree: tuple[Expr, Reference],
) -> None:
    """`simplify` keeps what it simplified by structure (`simplification._SIMPLIFIED`): a copy
    of the tree built afresh (other nodes, the same structure) gets the result the tree got,
    which is what a simplification without anything remembered gives."""
    expression = tree[0]
    remembered = simplify(expression)
    copy = pickle.loads(pickle.dumps(expression))
    assert copy is not expression or not expression.args
    assert simplify(copy) == remembered
    simplification._SIMPLIFIED.clear()
    assert simplify(copy) == remembered


def test_simplify_remembers_variables_with_their_bounds(monkeypatch) -> None:
    """Nodes that differ only in a variable's bounds are different keys; what is remembered
    stays under `SIMPLIFIED_LIMIT` nodes (it starts afresh when full)."""
    narrow, wide = var("v", 0, 3), var("v", 0, 7)
    assert simplify(narrow // 4) == const(0)
    assert simplify(wide // 4) == wide // 4
    assert simplify(narrow // 4) == const(0)
    monkeypatch.setattr(simplification, "SIMPLIFIED_LIMIT", 5)
    simplification._SIMPLIFIED.clear()
    for shift in range(40):
        assert simplify((wide + shift) // 8 * 8 + (wide + shift) % 8) == wide + shift
        assert len(simplification._SIMPLIFIED) <= 5


@settings(max_examples=200)
@given(trees(), environments())
def test_bounds_contain_every_value(tree: tuple[Expr, Reference], env: dict[str, int]) -> None:
    expression, _ = tree
    value = outcome(expression.evaluate, env)
    if value is not ZeroDivisionError:
        lo, hi = expression.bounds()
        assert lo is None or lo <= value
        assert hi is None or value <= hi


SCALES = (1, 2, 3, 4, 6, 8, 16)


def scaled_tree(integer: Callable[[int, int], int], depth: int, nonnegative: bool = False) -> Expr:
    """A random expression like `random_tree`'s whose leaves are multiplied by a random scale
    from SCALES, so that its subexpressions have divisors other than 1."""
    kind = integer(0, 5) if depth > 0 else integer(0, 1)
    scale = SCALES[integer(0, len(SCALES) - 1)]
    if kind == 0:
        variables = NONNEGATIVE_VARIABLES if nonnegative else TREE_VARIABLES
        return variables[integer(0, len(variables) - 1)] * scale
    if kind == 1:
        return const(scale * (integer(0, 9) if nonnegative else integer(-6, 6)))
    names = NONNEGATIVE_NAMES if nonnegative else OPERATION_NAMES
    name = names[integer(0, len(names) - 1)]
    arity, build, _ = TREE_OPERATIONS[name]
    nonnegative_operands = nonnegative or name in BITWISE_NAMES
    return build(*(scaled_tree(integer, depth - 1, nonnegative_operands) for _ in range(arity)))


@st.composite
def scaled_trees(draw: st.DrawFn) -> Expr:
    return scaled_tree(lambda lo, hi: draw(st.integers(lo, hi)), 4)


@settings(max_examples=300)
@given(scaled_trees(), environments())
def test_every_value_is_a_multiple_of_the_known_divisor(
    expression: Expr, env: dict[str, int]
) -> None:
    value = outcome(expression.evaluate, env)
    assume(value is not ZeroDivisionError)
    divisor = known_divisor(expression)
    if divisor == 0:
        assert value == 0
    else:
        assert value % divisor == 0


def test_known_divisor_divides_the_values_of_many_random_trees() -> None:
    # Hypothesis draws small values (often 0, a multiple of everything); uniform draws do not.
    generator = random.Random(20261130)
    for _ in range(3000):
        expression = scaled_tree(generator.randint, 4)
        divisor = known_divisor(expression)
        for _ in range(3):
            value = outcome(expression.evaluate, random_environment(generator.randint))
            if value is not ZeroDivisionError:
                assert value % divisor == 0 if divisor else value == 0, (expression, divisor)


PYTHON_BITWISE = {
    "&": operator.and_,
    "|": operator.or_,
    "^": operator.xor,
    "<<": operator.lshift,
    ">>": operator.rshift,
}


@given(
    st.sampled_from(tuple(PYTHON_BITWISE)),
    st.tuples(st.integers(-40, 40), st.integers(0, 30)),
    st.tuples(st.integers(-40, 40), st.integers(0, 30)),
)
def test_bitwise_bounds_contain_every_value_for_operands_of_any_sign(
    op: str, left: tuple[int, int], right: tuple[int, int]
) -> None:
    (a_lo, a_width), (b_lo, b_width) = left, right
    if op in ("<<", ">>"):
        b_lo, b_width = abs(b_lo) % 10, b_width % 10  # shift counts are non-negative
    a, b = var("a", a_lo, a_lo + a_width), var("b", b_lo, b_lo + b_width)
    lo, hi = Expr(op, (a, b)).bounds()
    values = [
        PYTHON_BITWISE[op](x, y) for x in range(a.lo, a.hi + 1) for y in range(b.lo, b.hi + 1)
    ]
    assert lo is not None and lo <= min(values)
    assert hi is not None and max(values) <= hi


@given(trees())
def test_repr_rebuilds_the_same_tree(tree: tuple[Expr, Reference]) -> None:
    namespace = {variable.name: variable for variable in TREE_VARIABLES + NONNEGATIVE_VARIABLES}
    namespace.update(
        const=const,
        minimum=minimum,
        maximum=maximum,
        select=select,
        logical_and=logical_and,
        logical_or=logical_or,
        logical_not=logical_not,
    )
    expression = tree[0]
    assert as_expr(eval(repr(expression), namespace)) == expression


@given(trees())
def test_pickle_round_trip_keeps_equality_and_hash(tree: tuple[Expr, Reference]) -> None:
    expression = tree[0]
    restored = pickle.loads(pickle.dumps(expression))
    assert restored == expression
    assert hash(restored) == hash(expression)


# --------------------------------------------------------------------------------- differential


@settings(max_examples=30)
@given(trees(), environments())
def test_to_sympy_agrees_with_evaluate(tree: tuple[Expr, Reference], env: dict[str, int]) -> None:
    expression, _ = tree
    expected = outcome(expression.evaluate, env)
    if expected is ZeroDivisionError:
        return
    converted = expression.to_sympy()
    values = {symbol: env[symbol.name] for symbol in converted.free_symbols}
    result = converted.subs(values)
    if expression.is_boolean:
        assert bool(result) == expected
    else:
        assert result == expected


def tree_arguments(env: dict[str, int]) -> str:
    """The C arguments of an environment: the tree variables' values, as `long long`."""
    return ", ".join(str(env[name]) for name in TREE_RANGES)


def test_c_text_computes_what_evaluate_computes(
    run_c_expressions: Callable[..., list[int]],
) -> None:
    generator = random.Random(20240611)
    cases: list[tuple[str, dict[str, int]]] = []
    expected: list[int] = []
    for _ in range(100):
        bits, base, shift = (
            generator.randint(1, 4),
            generator.randint(0, 4),
            generator.randint(1, 5),
        )
        expression = swizzle(U, bits, base, shift)
        env = {**random_environment(generator.randint), "u": generator.randint(0, 1 << 24)}
        for printed in (expression, simplify(expression)):
            cases.append((printed.to_c(), env))
            expected.append(swizzle(env["u"], bits, base, shift))
    while len(cases) < 2000:
        expression, _ = random_tree(generator.randint, 4)
        for _ in range(4):
            env = random_environment(generator.randint)
            value = outcome(expression.evaluate, env)
            if value is ZeroDivisionError:
                continue
            for printed in (expression, simplify(expression)):
                cases.append((printed.to_c(), env))
                expected.append(int(value))
    parameters = ", ".join(f"long long {name}" for name in TREE_RANGES)
    values = run_c_expressions(cases, parameters, tree_arguments, flags=("-O0", "-std=c99"))
    assert values == expected


@st.composite
def _xor_past_a_constant(draw: st.DrawFn) -> tuple[Expr, dict[str, int]]:
    """`(sum of terms + c) ^ b` over bounded variables, with the variables' values: the terms
    2**s * x (x in [0, hi]) at random shifts, so their bits may or may not meet c's or each
    other's, and b a bounded variable or a term."""
    terms, env = [], {}
    for index in range(draw(st.integers(1, 3))):
        hi = draw(st.integers(0, 15))
        name = f"x{index}"
        terms.append(var(name, 0, hi) * (1 << draw(st.integers(0, 10))))
        env[name] = draw(st.integers(0, hi))
    b_hi = draw(st.integers(0, 4095))
    env["b"] = draw(st.integers(0, b_hi))
    other = var("b", 0, b_hi) * (1 << draw(st.integers(0, 4)))
    constant = draw(st.integers(1, 4096))
    return (sum(terms[1:], terms[0]) + constant) ^ other, env


@given(_xor_past_a_constant())
@settings(max_examples=300, deadline=None)
def test_a_constant_taken_out_of_an_exclusive_or_keeps_the_value(
    case: tuple[Expr, dict[str, int]],
) -> None:
    """The rewrite of `(p + c) ^ b` into `(p ^ b) ^ c` or `(p ^ b) + c` (only where p cannot
    have c's bits) against the expression as written, at the drawn values."""
    expression, env = case
    assert evaluate(simplify(expression), env) == evaluate(expression, env)

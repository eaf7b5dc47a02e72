"""The C text of the lowering's scalar expressions (`backend.lower.context.c_text`): int where
every value fits a C int, 64-bit where one may not, and cast back to int where a value fits
again.

Exact: the text of expressions a kernel prints (a tile count over an unbounded row count, an
address, a guard) and the counter type of loops. Property (hypothesis): an expression whose
sub-expressions all fit prints as `Expr.to_c`, and a 64-bit one whose value fits starts with the
int cast. Differential: random expressions over variables up to the C int range, printed by
`c_text`, compiled by the host C compiler (wrapping signed overflow, so a sub-expression computed
in the wrong width gives a wrong value) and run at values at and between their bounds, against
`Expr.evaluate`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.cuda_codegen import MIXED_MIN_MAX_SOURCE
from backend.lower.context import WIDE_PREFIX, c_text, fits_int, is_wide, loop_counter_type
from layout_algebra.symbolic import Expr, as_expr, maximum, minimum, printing, select, var
from layout_algebra.symbolic.printing import CONDITIONAL_EXTREMUM_LIMIT

C_INT_MAX = 2**31 - 1
VARIABLES = {
    "m": (1, C_INT_MAX),
    "s": (-(2**31), C_INT_MAX),
    "b": (0, 2**20),
    "t": (0, 127),
    "q": (0, 63),
}
SYMBOLS = {name: var(name, lo, hi) for name, (lo, hi) in VARIABLES.items()}
M, S, B, T, Q = (SYMBOLS[name] for name in "msbtq")

# name: (arity, build the Expr from its operands)
OPERATIONS: dict[str, tuple[int, Callable[..., Expr]]] = {
    "+": (2, lambda a, b: a + b),
    "-": (2, lambda a, b: a - b),
    "*": (2, lambda a, b: a * b),
    "//": (2, lambda a, b: a // b),
    "%": (2, lambda a, b: a % b),
    "min": (2, minimum),
    "max": (2, maximum),
    "<": (2, lambda a, b: a < b),
    "eq": (2, lambda a, b: a.eq(b)),
    "select": (3, select),
    "neg": (1, lambda a: -a),
    ">>": (1, lambda a: maximum(a, 0) >> 3),
    "<<": (1, lambda a: maximum(minimum(a, 1 << 20), 0) << 4),
}


def random_expression(generator: random.Random, depth: int) -> Expr:
    """A random expression of at most `depth` levels over `SYMBOLS` and small constants."""
    if depth == 0 or generator.random() < 0.25:
        if generator.random() < 0.6:
            return SYMBOLS[generator.choice(tuple(VARIABLES))]
        return as_expr(generator.choice([1, 2, 3, 48, 63, 64, 264, 4096, -5, 1 << 20]))
    arity, build = OPERATIONS[generator.choice(tuple(OPERATIONS))]
    return build(*(random_expression(generator, depth - 1) for _ in range(arity)))


def environment(generator: random.Random) -> dict[str, int]:
    """Values of the variables: each at a bound, next to one, or anywhere between."""
    values = {}
    for name, (lo, hi) in VARIABLES.items():
        values[name] = generator.choice([lo, hi, lo + 1, hi - 1, generator.randint(lo, hi)])
    return values


def value_or_none(expr: Expr, env: dict[str, int]) -> int | None:
    """The value of `expr`, or None when it divides by zero or a sub-expression leaves the
    64-bit range (where C itself has no answer)."""
    try:
        for node in expr.nodes():
            if abs(int(node.evaluate(env))) >= 2**63 - 1:
                return None
        return int(expr.evaluate(env))
    except ZeroDivisionError:
        return None


def int_arguments(env: dict[str, int]) -> str:
    """The C arguments of an environment: each variable as an int."""
    return ", ".join(f"(int){env[name]}LL" for name in VARIABLES)


INT_PARAMETERS = ", ".join(f"int {name}" for name in VARIABLES)
WIDE_COPIES = " ".join(f"const long long {WIDE_PREFIX}{name} = {name};" for name in VARIABLES)
"""The variables' 64-bit copies, declared as the kernels declare them."""


C_FLAGS = ("-x", "c++", "-std=c++17", "-O0", "-fwrapv", "-Wno-unused-variable")
"""Signed overflow wraps, so a sub-expression computed in the wrong width gives a wrong value;
C++, so that min and max resolve among overloads as CUDA's do (`CUDA_MIN_MAX`)."""

CUDA_MIN_MAX = (
    """\
#define __device__
#define __forceinline__ inline
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
"""
    + MIXED_MIN_MAX_SOURCE
)
"""min and max as a kernel has them: CUDA's overloads for one operand type (int, long long)
and the kernel's own for an int and a long long (`MIXED_MIN_MAX_SOURCE`): an operand pair of
another type is ambiguous and does not compile, and each result has its operands' width."""


# ---------------------------------------------------------------------------------------- exact


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        # Every value fits: the int text of Expr.to_c.
        (T * 16 + Q, "t * 16 + q"),
        # m + 63 may leave the int range, the tile count does not: cast back at once, so the
        # product with 48 (which fits) is an int product.
        ((M + 63) // 64 * 48, "(int)((la_w_m + 63) >> 6) * 48"),
        # An address: 64-bit from the first operation that may not fit.
        (B * 4096 + T * 16, "la_w_b * 4096 + t * 16"),
        # A loop bound over a 64-bit intermediate, clamped into [0, 63]: an int again.
        (
            minimum(maximum(B * 4096 - Q * 64, 0), 63),
            "(int)(((la_w_b * 4096 - q * 64 > 0 ? la_w_b * 4096 - q * 64 : 0) < 63 ? "
            "(la_w_b * 4096 - q * 64 > 0 ? la_w_b * 4096 - q * 64 : 0) : 63))",
        ),
        # A guard: a comparison is an int in C, and needs no cast.
        (B * 4096 + T < M, "la_w_b * 4096 + t < m"),
        # Two ints whose product may not fit: the first operand widened.
        ((T + Q) * M, "(long long)(t + q) * m"),
        # A variable that may leave the range is its 64-bit copy.
        (var("x", 0, 2**40) + 1, "la_w_x + 1"),
    ],
)
def test_c_text(expr: Expr, text: str) -> None:
    assert c_text(expr) == text


@pytest.mark.parametrize(
    ("values", "kind"),
    [
        ((Q, as_expr(0), as_expr(64)), "int"),
        # The bounds are computed in 64 bits but their values fit: an int counter.
        ((Q, minimum(maximum(B * 4096 - Q, 0), 63), as_expr(64)), "int"),
        ((var("k", 0, 2**40), as_expr(0), var("n", 1, 2**40)), "long long"),
        ((Q, as_expr(0), B * 4096), "long long"),
    ],
)
def test_loop_counter_type(values: tuple[Expr, ...], kind: str) -> None:
    assert loop_counter_type(*values) == kind


# ------------------------------------------------------------------------------------ property


def test_long_operands_print_min_and_max_as_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the limit, CUDA's functions: here a 64-bit operand beside an int (the kernel's own
    overload), the int result cast back."""
    monkeypatch.setattr(printing, "CONDITIONAL_EXTREMUM_LIMIT", 0)
    text = "(int)(min(max(la_w_b * 4096 - q * 64, 0), 63))"
    assert c_text(minimum(maximum(B * 4096 - Q * 64, 0), 63)) == text
    assert minimum(T, 100).to_c() == "min(t, 100)"


def test_nested_clamps_print_in_linear_size() -> None:
    """Twelve levels, each clamping the last into bounds of the row count (as the stream-K
    schedule's tile and share indices do): the text grows by a bounded amount a level, where
    conditionals would double it at each."""
    expr, sizes = M, []
    for level in range(12):
        expr = minimum(maximum(expr * 3 - B, 0), M // (level + 2) + T)
        sizes.append(len(c_text(expr)))
    # (The first levels' operands are short enough for conditionals.)
    growth = [after - before for before, after in zip(sizes[2:], sizes[3:])]
    assert max(growth) < 120 and sizes[-1] < 2000, sizes


@settings(max_examples=200, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 5))
def test_int_expressions_print_as_themselves_and_fitting_wide_ones_are_cast(
    generator: random.Random, depth: int
) -> None:
    expr = random_expression(generator, depth)
    text = c_text(expr)
    if not is_wide(expr):
        assert text == expr.to_c()
    elif fits_int(expr) and not expr.is_boolean and any(not fits_int(a) for a in expr.args):
        # The root fits but reads a 64-bit operand: cast back at the root. (A root whose
        # operands all fit reads them as ints, any cast back made below it.)
        assert text.startswith("(int)(")
    else:
        # Some operation is computed in 64 bits: it reads a variable's 64-bit copy, a cast
        # operand, or a constant outside the int range (which C types as 64-bit itself).
        assert "la_w_" in text or "(long long)" in text or _has_wide_constant(expr)


def _has_wide_constant(expr: Expr) -> bool:
    if expr.op == "const":
        return not fits_int(expr)
    return any(_has_wide_constant(arg) for arg in expr.args)


# -------------------------------------------------------------------------------- differential


@pytest.mark.parametrize("limit", [CONDITIONAL_EXTREMUM_LIMIT, 0], ids=["as-printed", "calls"])
def test_c_text_computes_what_evaluate_computes(
    run_c_expressions: Callable[..., list[int]], monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    """Also with every min and max printed as a call (limit 0), whose two operands' widths
    must pick one of the overloads a kernel has (`CUDA_MIN_MAX`)."""
    monkeypatch.setattr(printing, "CONDITIONAL_EXTREMUM_LIMIT", limit)
    generator = random.Random(20261203)
    cases: list[tuple[str, dict[str, int]]] = []
    expected: list[int] = []
    wide = expressions = 0
    while len(cases) < 3000:
        expr = random_expression(generator, generator.randint(1, 5))
        wide += is_wide(expr)
        expressions += 1
        text = c_text(expr)
        for _ in range(4):
            env = environment(generator)
            value = value_or_none(expr, env)
            if value is not None:
                cases.append((text, env))
                expected.append(value)
    # Most expressions need 64 bits somewhere, so the widths are what is tested.
    assert wide > expressions // 5
    values = run_c_expressions(
        cases, INT_PARAMETERS, int_arguments, WIDE_COPIES, C_FLAGS, CUDA_MIN_MAX
    )
    assert values == expected

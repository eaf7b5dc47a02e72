"""The folding constructors: every operator node is built here.

Each constructor folds constants and cheap identities as it builds (`x + 0`, `x * 1`, `x * 0`,
`x // 1`, `x % 1`, `x ^ 0`, `x & 0`, `x | 0`, `x << 0`, `x >> 0`, nested constant offsets, scales
and shifts, a select with a constant condition, ...), so that a formula applied to plain ints stays
small. `FOLDS` maps every operator to its constructor: Python's operators on `Expr` and
`substitute` build through it, the rest of the package through `build`. `minimum`, `maximum`,
`select`, `logical_and`, `logical_or` and `logical_not` construct the operators that Python has
no syntax for. What an operator computes on constants comes from its record (`operators.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from types import MappingProxyType

from layout_algebra.symbolic.expr import (
    ONE,
    ZERO,
    Expr,
    ExprLike,
    as_expr,
    const,
    is_constant,
    is_negation,
    raw_node,
)
from layout_algebra.symbolic.operators import OPERATORS


def offset(base: Expr, amount: int) -> Expr:
    """`base + amount` with the constant on the right: `base - |amount|` when it is negative."""
    if amount == 0:
        return base
    if amount > 0:
        return raw_node("+", (base, const(amount)))
    return raw_node("-", (base, const(-amount)))


def _constant_offset(node: Expr) -> tuple[Expr, int] | None:
    """(base, k) when `node` is `base + k` or `base - k` with k constant (k negated for `-`)."""
    if node.op in ("+", "-") and is_constant(node.args[1]) and not is_negation(node):
        sign = 1 if node.op == "+" else -1
        return node.args[0], sign * node.args[1].value
    return None


def _add(a: Expr, b: Expr) -> Expr:
    """`a + b`, folding constants, `x + 0`, `0 + x`, `(x + c1) + c2` and `a + (-x)`."""
    if a.op == "const" and b.op == "const":
        return const(a.value + b.value)
    if is_constant(a, 0):
        return b
    if b.op == "const":
        split = _constant_offset(a)
        if split is not None:
            return offset(split[0], split[1] + b.value)
        return offset(a, b.value)
    if is_negation(b):
        return _sub(a, b.args[1])
    return raw_node("+", (a, b))


def _sub(a: Expr, b: Expr) -> Expr:
    """`a - b`, folding constants, `x - 0`, `(x + c1) - c2`, `-(-x)` and `a - (-x)`."""
    if a.op == "const" and b.op == "const":
        return const(a.value - b.value)
    if b.op == "const":
        return _add(a, const(-b.value))
    if is_negation(b):
        return b.args[1] if is_constant(a, 0) else _add(a, b.args[1])
    return raw_node("-", (a, b))


def _mul(a: Expr, b: Expr) -> Expr:
    """`a * b`, folding constants, `x * 0`, `x * 1` (either side) and `(x * c1) * c2`."""
    if a.op == "const" and b.op == "const":
        return const(a.value * b.value)
    if is_constant(a, 0) or is_constant(b, 0):
        return ZERO
    if is_constant(a, 1):
        return b
    if is_constant(b, 1):
        return a
    if b.op == "const" and a.op == "*" and is_constant(a.args[1]):
        return _mul(a.args[0], const(a.args[1].value * b.value))
    return raw_node("*", (a, b))


def _floordiv(a: Expr, b: Expr) -> Expr:
    """`a // b`, folding constants (nonzero divisor), `x // 1` and `x // -1`."""
    if a.op == "const" and b.op == "const" and b.value != 0:
        return const(a.value // b.value)
    if is_constant(b, 1):
        return a
    if is_constant(b, -1):
        return _sub(ZERO, a)
    return raw_node("//", (a, b))


def _mod(a: Expr, b: Expr) -> Expr:
    """`a % b`, folding constants (nonzero divisor) and `x % 1`, `x % -1`."""
    if a.op == "const" and b.op == "const" and b.value != 0:
        return const(a.value % b.value)
    if is_constant(b, 1) or is_constant(b, -1):
        return ZERO
    return raw_node("%", (a, b))


def _extremum(op: str, a: Expr, b: Expr) -> Expr:
    """`min(a, b)` or `max(a, b)` (`op` names which), folding constants and `min(x, x)`."""
    if a.op == "const" and b.op == "const":
        return const(OPERATORS[op].integer(a.value, b.value))
    if a == b:
        return a
    return raw_node(op, (a, b))


def _bitand(a: Expr, b: Expr) -> Expr:
    """`a & b`, folding constants, `x & 0`, `0 & x` and `x & x`."""
    if a.op == "const" and b.op == "const":
        return const(a.value & b.value)
    if is_constant(a, 0) or is_constant(b, 0):
        return ZERO
    return a if a == b else raw_node("&", (a, b))


def _bitor(a: Expr, b: Expr) -> Expr:
    """`a | b`, folding constants, `x | 0`, `0 | x` and `x | x`."""
    if a.op == "const" and b.op == "const":
        return const(a.value | b.value)
    if is_constant(b, 0) or a == b:
        return a
    return b if is_constant(a, 0) else raw_node("|", (a, b))


def _bitxor(a: Expr, b: Expr) -> Expr:
    """`a ^ b`, folding constants, `x ^ 0`, `0 ^ x` and `x ^ x`."""
    if a.op == "const" and b.op == "const":
        return const(a.value ^ b.value)
    if is_constant(b, 0):
        return a
    if is_constant(a, 0):
        return b
    return ZERO if a == b else raw_node("^", (a, b))


def _shift(op: str, a: Expr, b: Expr) -> Expr:
    """`a << b` or `a >> b`, folding constants (non-negative count), `x << 0`, `0 << x` and
    `(x << c1) << c2` into `x << (c1 + c2)` for non-negative constants c1, c2 (the same for >>)."""
    count = b.value if b.op == "const" else None
    if count is not None and count < 0:
        return raw_node(op, (a, b))
    if a.op == "const" and count is not None:
        return const(OPERATORS[op].integer(a.value, count))
    if count == 0 or is_constant(a, 0):
        return a
    if count is not None and a.op == op and is_constant(a.args[1]) and a.args[1].value >= 0:
        return raw_node(op, (a.args[0], const(a.args[1].value + count)))
    return raw_node(op, (a, b))


def _compare(op: str, a: Expr, b: Expr) -> Expr:
    """The comparison `a op b`, folded to the constant 0 or 1 when both sides are constants."""
    if a.op == "const" and b.op == "const":
        return const(int(OPERATORS[op].integer(a.value, b.value)))
    return raw_node(op, (a, b))


def _truth(node: Expr) -> Expr:
    """`node` as a truth value: itself when it is one already, else `node != 0`."""
    if node.is_boolean or (node.op == "const" and node.value in (0, 1)):
        return node
    return _compare("!=", node, ZERO)


def _and(a: Expr, b: Expr) -> Expr:
    """`a && b`, folding a constant side."""
    if a.op == "const":
        return _truth(b) if a.value != 0 else ZERO
    if b.op == "const":
        return _truth(a) if b.value != 0 else ZERO
    return raw_node("and", (a, b))


def _or(a: Expr, b: Expr) -> Expr:
    """`a || b`, folding a constant side."""
    if a.op == "const":
        return ONE if a.value != 0 else _truth(b)
    if b.op == "const":
        return ONE if b.value != 0 else _truth(a)
    return raw_node("or", (a, b))


def _not(a: Expr) -> Expr:
    """`!a`, folding constants, double negation and negated comparisons."""
    if a.op == "const":
        return const(int(a.value == 0))
    if a.op == "not":
        return _truth(a.args[0])
    negation = OPERATORS[a.op].negation
    if negation is not None:
        return raw_node(negation, a.args)
    return raw_node("not", (a,))


def _select(cond: Expr, if_true: Expr, if_false: Expr) -> Expr:
    """`if_true if cond != 0 else if_false`, folding a constant condition and equal branches."""
    if cond.op == "const":
        return if_true if cond.value != 0 else if_false
    if if_true == if_false:
        return if_true
    return raw_node("select", (cond, if_true, if_false))


FOLDS: Mapping[str, Callable[..., Expr]] = MappingProxyType(
    {
        "+": _add,
        "-": _sub,
        "*": _mul,
        "//": _floordiv,
        "%": _mod,
        "&": _bitand,
        "|": _bitor,
        "^": _bitxor,
        "and": _and,
        "or": _or,
        "not": _not,
        "select": _select,
        **{op: functools.partial(_extremum, op) for op in ("min", "max")},
        **{op: functools.partial(_shift, op) for op in ("<<", ">>")},
        **{
            op: functools.partial(_compare, op)
            for op, record in OPERATORS.items()
            if record.is_comparison
        },
    }
)
"""The folding constructor of every operator that has operands (read-only). The rules are code
that builds `Expr` nodes, so they live here, above `expr.py`, and not in the `Operator` records
below it."""


def build(op: str, args: tuple[Expr, ...]) -> Expr:
    """The node `op` applied to `args`, through the folding constructor of `op`."""
    return FOLDS[op](*args)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    """`min(a, b)` as an expression."""
    return _extremum("min", as_expr(a), as_expr(b))


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    """`max(a, b)` as an expression."""
    return _extremum("max", as_expr(a), as_expr(b))


def select(cond: ExprLike, if_true: ExprLike, if_false: ExprLike) -> Expr:
    """`if_true` where `cond` is nonzero, else `if_false`; only the chosen side is evaluated."""
    return _select(as_expr(cond), as_expr(if_true), as_expr(if_false))


def logical_and(a: ExprLike, b: ExprLike) -> Expr:
    """1 when both `a` and `b` are nonzero, else 0 (C's `&&`: `b` is read only when `a` is true)."""
    return _and(as_expr(a), as_expr(b))


def logical_or(a: ExprLike, b: ExprLike) -> Expr:
    """1 when `a` or `b` is nonzero, else 0 (C's `||`: `b` is read only when `a` is false)."""
    return _or(as_expr(a), as_expr(b))


def logical_not(a: ExprLike) -> Expr:
    """1 when `a` is zero, else 0."""
    return _not(as_expr(a))

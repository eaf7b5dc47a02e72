"""Interval analysis: inclusive bounds of an expression's value from its variables' bounds.

`interval_of` computes a node's interval once and caches it on the node; `Expr.bounds()` reads it
through `bounds`. Intervals are pairs of ints, with the float infinities for an unbounded side.
The bounds are sound for every evaluation on ints in which each variable lies within its bounds,
no division by zero happens and no shift count is negative; they need not be tight.
`simplify` and the C printer decide comparisons and signs with them.
"""

from __future__ import annotations

import math

from layout_algebra.symbolic.expr import Expr
from layout_algebra.symbolic.operators import OPERATORS

Interval = tuple[int | float, int | float]
"""Inclusive bounds, ints or the float infinities for an unbounded side."""

UNBOUNDED: Interval = (-math.inf, math.inf)


def interval_of(node: Expr) -> Interval:
    """The node's interval, computed once and cached on the node."""
    if node._interval is None:
        object.__setattr__(node, "_interval", _interval(node))
    return node._interval


def bounds(expr: Expr) -> tuple[int | None, int | None]:
    """`Expr.bounds()`: the interval of `expr` with None for an unbounded side."""
    lo, hi = interval_of(expr)
    return (None if lo == -math.inf else lo, None if hi == math.inf else hi)


def _extended_add(a: int | float, b: int | float) -> int | float:
    """a + b where either may be an infinity (never both of opposite signs)."""
    if isinstance(a, float):
        return a
    if isinstance(b, float):
        return b
    return a + b


def _extended_mul(a: int | float, b: int | float) -> int | float:
    """a * b where either may be an infinity, with 0 * inf = 0 (the bound of a product set)."""
    if a == 0 or b == 0:
        return 0
    if isinstance(a, float) or isinstance(b, float):
        return math.inf if (a > 0) == (b > 0) else -math.inf
    return a * b


def _negate(interval: Interval) -> Interval:
    """The interval of `-x`."""
    return (-interval[1], -interval[0])


def _union(parts: list[Interval]) -> Interval:
    """The smallest interval holding every part; unbounded when there is none."""
    if not parts:
        return UNBOUNDED
    return (min(part[0] for part in parts), max(part[1] for part in parts))


def _divisor_parts(divisor: Interval) -> tuple[Interval | None, Interval | None]:
    """The positive and negative parts of a divisor interval (zero excluded), or None."""
    lo, hi = divisor
    positive = (max(lo, 1), hi) if hi >= 1 else None
    negative = (lo, min(hi, -1)) if lo <= -1 else None
    return positive, negative


def _floordiv_positive(a: Interval, b: Interval) -> Interval:
    """Interval of a // b for b >= 1: monotone in a, and in b with the direction of a's sign."""

    def corner(x: int | float, y: int | float) -> int | float:
        if isinstance(x, float):
            return x
        if isinstance(y, float):
            return 0 if x >= 0 else -1
        return x // y

    lo = corner(a[0], b[1]) if a[0] >= 0 else corner(a[0], b[0])
    hi = corner(a[1], b[0]) if a[1] >= 0 else corner(a[1], b[1])
    return lo, hi


def _mod_positive(a: Interval, b: Interval) -> Interval:
    """Interval of a % b for b >= 1."""
    if a[0] >= 0 and a[1] < b[0]:
        return a
    top = _extended_add(b[1], -1)
    if a[0] >= 0:
        top = min(a[1], top)
    return 0, top


def _interval_division(op: str, a: Interval, b: Interval) -> Interval:
    """Interval of a // b or a % b over the nonzero divisors; a negative divisor reduces to a
    positive one, as a // b == (-a) // (-b) and a % b == -((-a) % (-b))."""
    on_positive = _floordiv_positive if op == "//" else _mod_positive
    positive, negative = _divisor_parts(b)
    parts = []
    if positive is not None:
        parts.append(on_positive(a, positive))
    if negative is not None:
        flipped = on_positive(_negate(a), _negate(negative))
        parts.append(flipped if op == "//" else _negate(flipped))
    return _union(parts)


_BOUNDS_SHIFT_LIMIT = 1024
"""Interval analysis widens shift counts above this to infinity, so bounds stay small numbers."""


def _power_of_two_interval(count: Interval) -> Interval | None:
    """An interval holding 2**b for every non-negative b in `count`; None when there is none."""
    if count[1] < 0:
        return None
    low = min(max(count[0], 0), _BOUNDS_SHIFT_LIMIT)
    high = math.inf if count[1] > _BOUNDS_SHIFT_LIMIT else 1 << count[1]
    return 1 << low, high


def _interval_shift(op: str, a: Interval, count: Interval) -> Interval:
    """Interval of a << b (a * 2**b) or a >> b (a // 2**b) over the non-negative counts b."""
    scale = _power_of_two_interval(count)
    if scale is None:
        return UNBOUNDED
    if op == "<<":
        products = [_extended_mul(x, y) for x in a for y in scale]
        return min(products), max(products)
    return _floordiv_positive(a, scale)


def _twos_complement_range(a: Interval, b: Interval) -> Interval:
    """[-2**n, 2**n - 1] for the least n holding both intervals; & | ^ of its values stay in it."""
    ends = (*a, *b)
    if any(isinstance(end, float) for end in ends):
        return UNBOUNDED
    width = max((end if end >= 0 else ~end).bit_length() for end in ends)
    return -(1 << width), (1 << width) - 1


def _interval_bitwise(op: str, a: Interval, b: Interval) -> Interval:
    """Interval of a & b, a | b or a ^ b."""
    if a[0] >= 0 and b[0] >= 0:
        # Both non-negative: a & b <= min(a, b), max(a, b) <= a | b, a ^ b <= a | b <= a + b, and
        # neither | nor ^ sets a bit above the highest bit of max(a, b).
        if op == "&":
            return 0, min(a[1], b[1])
        top = _extended_add(a[1], b[1])
        if not isinstance(top, float):
            top = min(top, (1 << max(a[1], b[1]).bit_length()) - 1)
        return (max(a[0], b[0]) if op == "|" else 0), top
    if op == "&" and max(a[0], b[0]) >= 0:
        # One side non-negative: the result keeps some of that side's bits.
        return 0, a[1] if a[0] >= 0 else b[1]
    # Some side may be negative: two's complement numbers of n + 1 bits.
    return _twos_complement_range(a, b)


def decide_comparison(op: str, a: Interval, b: Interval) -> bool | None:
    """The truth of `x op y` for every x in a and y in b, or None when it depends on them."""
    if op == "<":
        return True if a[1] < b[0] else False if a[0] >= b[1] else None
    if op == "<=":
        return True if a[1] <= b[0] else False if a[0] > b[1] else None
    if op == ">":
        return decide_comparison("<", b, a)
    if op == ">=":
        return decide_comparison("<=", b, a)
    equal = None
    if a[0] == a[1] == b[0] == b[1]:
        equal = True
    elif a[1] < b[0] or b[1] < a[0]:
        equal = False
    if equal is None or op == "==":
        return equal
    return not equal


def decide_truth(interval: Interval) -> bool | None:
    """True when every value of the interval is nonzero, False when it is {0}, else None."""
    if interval[0] > 0 or interval[1] < 0:
        return True
    if interval[0] == interval[1] == 0:
        return False
    return None


def _truth_interval(truth: bool | None) -> Interval:
    """(1, 1), (0, 0) or (0, 1) for a known true, known false or unknown truth value."""
    if truth is None:
        return (0, 1)
    return (1, 1) if truth else (0, 0)


def _interval(node: Expr) -> Interval:
    """Interval analysis of one node from its operands' cached intervals."""
    op = node.op
    if op == "const":
        return (node.value, node.value)
    if op == "var":
        return (
            -math.inf if node.lo is None else node.lo,
            math.inf if node.hi is None else node.hi,
        )
    args = [interval_of(arg) for arg in node.args]
    if op == "not":
        truth = decide_truth(args[0])
        return _truth_interval(None if truth is None else not truth)
    if op == "select":
        truth = decide_truth(args[0])
        if truth is None:
            return _union([args[1], args[2]])
        return args[1] if truth else args[2]
    a, b = args
    kind = OPERATORS[op].kind
    if op == "+":
        return _extended_add(a[0], b[0]), _extended_add(a[1], b[1])
    if op == "-":
        return _extended_add(a[0], -b[1]), _extended_add(a[1], -b[0])
    if op == "*":
        products = [_extended_mul(x, y) for x in a for y in b]
        return min(products), max(products)
    if kind == "division":
        return _interval_division(op, a, b)
    if kind == "shift":
        return _interval_shift(op, a, b)
    if kind == "bitwise":
        return _interval_bitwise(op, a, b)
    if kind == "extremum":
        # min and max are monotone in both operands.
        extremum = OPERATORS[op].integer
        return extremum(a[0], b[0]), extremum(a[1], b[1])
    if kind == "comparison":
        return _truth_interval(decide_comparison(op, a, b))
    truths = (decide_truth(a), decide_truth(b))
    if op == "and":
        if False in truths:
            return _truth_interval(False)
        return _truth_interval(True if truths == (True, True) else None)
    if True in truths:
        return _truth_interval(True)
    return _truth_interval(False if truths == (False, False) else None)

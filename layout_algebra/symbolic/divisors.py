"""Known divisors: `known_divisor` reads off an expression's structure a number that divides every
value the expression takes, whatever the values of its variables (the backend's lowering and the
access maps use it to prove addresses and strides aligned).
"""

from __future__ import annotations

import math

from layout_algebra.symbolic.expr import Expr, ExprLike, as_expr


def _two_power(divisor: int) -> int:
    """The largest power of two dividing a positive `divisor`."""
    return divisor & -divisor


def _divisor(node: Expr, memo: dict[int, int]) -> int:
    """The known divisor of one node (memoised per node), by the rules of `known_divisor`."""
    done = memo.get(id(node))
    if done is not None:
        return done
    op = node.op
    if op == "const":
        result = abs(node.value)
    elif op in ("+", "-", "%", "min", "max"):
        result = math.gcd(_divisor(node.args[0], memo), _divisor(node.args[1], memo))
    elif op == "*":
        result = _divisor(node.args[0], memo) * _divisor(node.args[1], memo)
    elif op == "select":
        result = math.gcd(_divisor(node.args[1], memo), _divisor(node.args[2], memo))
    elif op == "<<":
        a, count = node.args
        shift = count.value if count.is_const and count.value > 0 else 0
        result = _divisor(a, memo) << shift
    elif op in (">>", "//"):
        a, b = node.args
        dividend = _divisor(a, memo)
        if b.is_const and b.value >= (0 if op == ">>" else 1):
            step = 1 << b.value if op == ">>" else b.value
            result = dividend // step if dividend % step == 0 else 1
        else:
            result = 1
    elif op == "&":
        a, b = (_divisor(arg, memo) for arg in node.args)
        result = 0 if a == 0 or b == 0 else max(_two_power(a), _two_power(b))
    elif op in ("|", "^"):
        a, b = (_divisor(arg, memo) for arg in node.args)
        result = b if a == 0 else a if b == 0 else min(_two_power(a), _two_power(b))
    else:
        result = 1
    memo[id(node)] = result
    return result


def known_divisor(expr: ExprLike) -> int:
    """The largest d read off `expr`'s structure such that every value it takes is a multiple of d.

    Sound for every value of the variables (their bounds are not used): each value `expr` can
    take (where it does not divide by zero or shift by a negative count) is a multiple of the
    result. The result is 0 exactly when `expr` is known to be 0 (an int 0, a constant 0, a
    product with a factor known to be 0, ...), and otherwise positive. Not complete: the rules
    below only, with d(e) the known divisor of e and v2(n) the largest power of two dividing
    n > 0:

    - an int or a constant: its absolute value; a variable: 1;
    - `a * b`: d(a) * d(b); `a << c` for a constant c: d(a) * 2**c (for a symbolic count, d(a));
    - `a + b`, `a - b`, `a % b`, `min`, `max`: gcd(d(a), d(b)); `select(c, a, b)`: gcd(d(a), d(b));
    - `a // c` for a constant c > 0 dividing d(a): d(a) // c; `a >> c` for a constant c >= 0 with
      2**c dividing d(a): d(a) // 2**c; otherwise 1;
    - `a & b`: 0 if d(a) or d(b) is 0, else max(v2(d(a)), v2(d(b))) (the low zero bits of either
      operand are zero in the result); `a | b`, `a ^ b`: d(b) if d(a) is 0, d(a) if d(b) is 0,
      else min(v2(d(a)), v2(d(b)));
    - comparisons, `and`, `or`, `not`: 1.

    Example: `known_divisor(var("k") * 8 + 12)` is 4 and `known_divisor(var("k") << 3)` is 8.
    """
    return _divisor(as_expr(expr), {})

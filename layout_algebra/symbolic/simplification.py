"""Simplification: `simplify` rewrites an expression into a simpler one with the same value.

Sums and constant multiples are collected into linear combinations (`_Linear`), floor division and
modulo by positive constants are split along them, and interval analysis (`bounds.py`) decides
comparisons, min, max and select and pins nodes to constants. The rewrites build through Python's
operators on `Expr`, so every result is folded as it is built.
"""

from __future__ import annotations

import math

from layout_algebra.symbolic.bounds import bounds, decide_comparison, decide_truth, interval_of
from layout_algebra.symbolic.expr import ZERO, Expr, ExprLike, as_expr, const, is_constant
from layout_algebra.symbolic.folding import build, offset
from layout_algebra.symbolic.operators import OPERATORS


class _Linear:
    """A linear combination `sum(coefficient * term) + constant` of non-linear atoms."""

    __slots__ = ("terms", "constant")

    def __init__(self, terms: dict[Expr, int] | None = None, constant: int = 0) -> None:
        self.terms: dict[Expr, int] = dict(terms or {})
        self.constant = constant

    def plus(self, other: _Linear, scale: int = 1) -> _Linear:
        """self + scale * other."""
        result = _Linear(self.terms, self.constant + scale * other.constant)
        for term, coefficient in other.terms.items():
            result.terms[term] = result.terms.get(term, 0) + scale * coefficient
        result.terms = {term: c for term, c in result.terms.items() if c != 0}
        return result

    def scaled(self, factor: int) -> _Linear:
        """factor * self."""
        return _Linear().plus(self, factor)

    def single_term(self) -> tuple[Expr, int] | None:
        """(term, coefficient) when the combination is one term with no constant."""
        if self.constant == 0 and len(self.terms) == 1:
            return next(iter(self.terms.items()))
        return None


def _linear(node: Expr) -> _Linear:
    """The linear combination that `node` spells with +, - and multiplication by constants."""
    if node.op == "const":
        return _Linear(constant=node.value)
    if node.op == "+":
        return _linear(node.args[0]).plus(_linear(node.args[1]))
    if node.op == "-":
        return _linear(node.args[0]).plus(_linear(node.args[1]), -1)
    if node.op == "*" and is_constant(node.args[0]):
        return _linear(node.args[1]).scaled(node.args[0].value)
    if node.op == "*" and is_constant(node.args[1]):
        return _linear(node.args[0]).scaled(node.args[1].value)
    return _Linear({node: 1})


def _from_linear(linear: _Linear) -> Expr:
    """The expression of a linear combination: positive terms first, then negative, then k."""
    ordered = sorted(linear.terms.items(), key=lambda item: item[1] < 0)
    result: Expr | None = None
    for term, coefficient in ordered:
        magnitude = term if abs(coefficient) == 1 else term * abs(coefficient)
        if result is None:
            result = magnitude if coefficient > 0 else -magnitude
        elif coefficient > 0:
            result = result + magnitude
        else:
            result = result - magnitude
    if result is None:
        return const(linear.constant)
    return offset(result, linear.constant)


def _recombine(linear: _Linear) -> _Linear:
    """Fold `(y // m) * m * c + (y % m) * c` back into `y * c` wherever both terms occur."""
    changed = True
    while changed:
        changed = False
        for term, coefficient in linear.terms.items():
            if term.op != "%" or not is_constant(term.args[1]) or term.args[1].value <= 0:
                continue
            dividend, modulus = term.args[0], term.args[1].value
            quotient = _simplify_floordiv(dividend, modulus)
            if _linear(quotient).single_term() != (quotient, 1):
                continue
            if linear.terms.get(quotient) != coefficient * modulus:
                continue
            rest = _Linear({t: c for t, c in linear.terms.items() if t != term and t != quotient})
            rest.constant = linear.constant
            linear = rest.plus(_linear(dividend), coefficient)
            changed = True
            break
    return linear


def _split_by(linear: _Linear, divisor: int) -> tuple[_Linear, _Linear]:
    """(q, r) with linear == divisor * q + r: q takes the terms divisible by `divisor`."""
    quotient, remainder = _Linear(), _Linear()
    for term, coefficient in linear.terms.items():
        if coefficient % divisor == 0:
            quotient.terms[term] = coefficient // divisor
        else:
            remainder.terms[term] = coefficient
    quotient.constant, remainder.constant = divmod(linear.constant, divisor)
    return quotient, remainder


def _common_factor(linear: _Linear, divisor: int) -> int:
    """gcd of the divisor, the constant and every coefficient."""
    return math.gcd(divisor, linear.constant, *linear.terms.values())


def _exact_quotient(linear: _Linear, factor: int) -> _Linear:
    """linear / factor, for a factor dividing every coefficient and the constant."""
    return _Linear({t: c // factor for t, c in linear.terms.items()}, linear.constant // factor)


def _simplify_floordiv(dividend: Expr, divisor: int) -> Expr:
    """`dividend // divisor` for a positive constant divisor and a simplified dividend.

    (d*q + r) // d == q + r // d; then r and d lose their common factor, and r // d becomes a
    constant where r's bounds lie within one multiple of d, or `y // (a*d)` when r is `y // a`.
    """
    quotient, remainder = _split_by(_linear(dividend), divisor)
    factor = _common_factor(remainder, divisor)
    remainder = _exact_quotient(remainder, factor)
    divisor //= factor
    if divisor == 1:
        return _from_linear(_recombine(quotient.plus(remainder)))
    rest = _from_linear(remainder)
    lo, hi = bounds(rest)
    if lo is not None and hi is not None and lo // divisor == hi // divisor:
        part = const(lo // divisor)
    elif rest.op == "//" and is_constant(rest.args[1]) and rest.args[1].value > 0:
        part = _simplify_floordiv(rest.args[0], rest.args[1].value * divisor)
    else:
        part = rest // divisor
    return _from_linear(_recombine(quotient.plus(_linear(part))))


def _simplify_mod(dividend: Expr, modulus: int) -> Expr:
    """`dividend % modulus` for a positive constant modulus and a simplified dividend.

    (m*q + r) % m == r % m; then (g*r') % (g*m') == g * (r' % m'); r % m becomes r - k*m where
    r's bounds lie within [k*m, (k+1)*m), and `(y % (a*m)) % m` becomes `y % m`.
    """
    _, remainder = _split_by(_linear(dividend), modulus)
    factor = _common_factor(remainder, modulus)
    remainder = _exact_quotient(remainder, factor)
    modulus //= factor
    if modulus == 1:
        return ZERO
    rest = _from_linear(remainder)
    lo, hi = bounds(rest)
    if lo is not None and hi is not None and lo // modulus == hi // modulus:
        part = _linear(rest).plus(_Linear(constant=-(lo // modulus) * modulus))
    elif (
        rest.op == "%"
        and is_constant(rest.args[1])
        and rest.args[1].value > 0
        and rest.args[1].value % modulus == 0
    ):
        part = _linear(_simplify_mod(rest.args[0], modulus))
    else:
        part = _Linear({rest % modulus: 1})
    return _from_linear(part.scaled(factor))


def _difference(a: Expr, b: Expr) -> Expr:
    """The simplified linear form of a - b."""
    return _from_linear(_recombine(_linear(a).plus(_linear(b), -1)))


_LARGEST_SIMPLIFIED_SHIFT = 62
"""`simplify` turns shifts by a constant up to this into arithmetic (2**c stays within int64)."""


def _low_zero_bits(linear: _Linear) -> int | None:
    """The largest k with 2**k dividing every coefficient and the constant; None for zero."""
    factor = math.gcd(linear.constant, *linear.terms.values())
    return None if factor == 0 else (factor & -factor).bit_length() - 1


def _possible_bits(linear: _Linear) -> int | None:
    """A mask of every bit the value of `linear` (no constant) can have set, or None when the
    analysis cannot tell: each term c * x with c > 0 and x in [0, hi] sets bits only from c's
    lowest set bit up to the bit length of c * hi, and when no two terms' masks meet the sum
    has no carries, so its bits are their union."""
    union = 0
    for term, coefficient in linear.terms.items():
        lo, hi = interval_of(term)
        if coefficient <= 0 or lo < 0 or not isinstance(hi, int):
            return None
        low = (coefficient & -coefficient).bit_length() - 1
        mask = ((1 << (coefficient * hi).bit_length()) - 1) >> low << low
        if mask & union:
            return None
        union |= mask
    return union


def _xor_past_constant(a: Expr, b: Expr) -> Expr | None:
    """`(p + c) ^ b` with c a positive constant whose bits p cannot have rewritten as
    `(p ^ b) ^ c`, or as `(p ^ b) + c` where b cannot have c's bits either: c leaves the
    exclusive or, so that the part `p ^ b` is the same for every c (one register for a
    swizzled tile's unrolled steps, each then one operation or an immediate offset), else
    None."""
    for x, y in ((a, b), (b, a)):
        linear = _linear(x)
        if linear.constant <= 0 or not linear.terms:
            continue
        rest = _Linear(linear.terms)
        bits = _possible_bits(rest)
        if bits is None or bits & linear.constant:
            continue
        inner = _from_linear(rest)
        part = _simplify_bitwise("^", inner, y)
        if part is None:
            part = build("^", (inner, y))
        other = _linear(y)
        other_bits = _possible_bits(other) if other.constant == 0 else None
        if other_bits is not None and not other_bits & linear.constant:
            return offset(part, linear.constant)
        return build("^", (part, const(linear.constant)))
    return None


def _simplify_bitwise(op: str, a: Expr, b: Expr) -> Expr | None:
    """`a & b`, `a | b` or `a ^ b` of simplified operands rewritten into arithmetic, or None.

    Where one side is a multiple of 2**k (by its linear form) and the other lies in [0, 2**k),
    they share no bit: `&` is 0, `|` and `^` are the sum. A contiguous mask c = (2**w - 1) * 2**s
    picks a field: `x & c` is `((x // 2**s) % 2**w) * 2**s`, rewritten only for x >= 0 (where
    the C text of the field stays a shift and a mask).
    """
    for x, y in ((a, b), (b, a)):
        k = _low_zero_bits(_linear(x))
        lo, hi = interval_of(y)
        if k is not None and lo >= 0 and hi < 1 << k:
            return ZERO if op == "&" else _from_linear(_recombine(_linear(x).plus(_linear(y))))
        if op == "&" and is_constant(y) and y.value > 0 and interval_of(x)[0] >= 0:
            shift = (y.value & -y.value).bit_length() - 1
            width = (y.value >> shift).bit_length()
            if y.value >> shift == (1 << width) - 1:
                field = _simplify_mod(_simplify_floordiv(x, 1 << shift), 1 << width)
                return _from_linear(_recombine(_linear(field).scaled(1 << shift)))
    if op == "^":
        return _xor_past_constant(a, b)
    return None


def _simplify_node(node: Expr, memo: dict[int, Expr]) -> Expr:
    """One node's rewriting, its operands simplified first."""
    op = node.op
    kind = OPERATORS[op].kind
    args = tuple(_simplify(arg, memo) for arg in node.args)
    if op in ("+", "-"):
        sign = 1 if op == "+" else -1
        return _from_linear(_recombine(_linear(args[0]).plus(_linear(args[1]), sign)))
    if op == "*":
        a, b = _linear(args[0]), _linear(args[1])
        if not b.terms:
            return _from_linear(_recombine(a.scaled(b.constant)))
        if not a.terms:
            return _from_linear(_recombine(b.scaled(a.constant)))
        single_a, single_b = a.single_term(), b.single_term()
        if single_a is not None and single_b is not None:
            product = single_a[0] * single_b[0]
            return _from_linear(_Linear({product: single_a[1] * single_b[1]}))
        return args[0] * args[1]
    if kind == "division" and is_constant(args[1]) and args[1].value > 0:
        if op == "//":
            return _simplify_floordiv(args[0], args[1].value)
        return _simplify_mod(args[0], args[1].value)
    if kind == "shift" and is_constant(args[1]) and 0 < args[1].value <= _LARGEST_SIMPLIFIED_SHIFT:
        scale = 1 << args[1].value
        if op == "<<":
            return _from_linear(_recombine(_linear(args[0]).scaled(scale)))
        if interval_of(args[0])[0] >= 0:
            return _simplify_floordiv(args[0], scale)
    if kind == "bitwise":
        rewritten = _simplify_bitwise(op, args[0], args[1])
        if rewritten is not None:
            return rewritten
    if kind == "extremum":
        difference = interval_of(_difference(args[0], args[1]))
        if difference[1] <= 0:
            return args[0] if op == "min" else args[1]
        if difference[0] >= 0:
            return args[1] if op == "min" else args[0]
    if kind == "comparison":
        truth = decide_comparison(op, interval_of(_difference(args[0], args[1])), (0, 0))
        if truth is not None:
            return const(int(truth))
    if op == "select":
        truth = decide_truth(interval_of(args[0]))
        if truth is not None:
            return args[1] if truth else args[2]
    return build(op, args)


SIMPLIFIED_LIMIT = 1 << 17
"""How many simplified nodes `_SIMPLIFIED` keeps before it starts afresh."""

_SIMPLIFIED: dict[Expr, Expr] = {}
"""Every node simplified so far (up to `SIMPLIFIED_LIMIT`), by structure, with its result. A
node's simplification depends on its structure alone (variables carry their bounds), and a
lowering asks for the same few nodes over and over: 16 thousand distinct nodes among 290
thousand simplified in lowering 40 of the tests' decode, prefill and matmul kernels."""


def _simplify(node: Expr, memo: dict[int, Expr]) -> Expr:
    """Simplify one node (memoised in the call by identity, across calls by structure), then
    replace it by a constant when its bounds pin it."""
    if not node.args:
        return node
    done = memo.get(id(node))
    if done is None:
        done = _SIMPLIFIED.get(node)
        if done is None:
            done = _simplify_node(node, memo)
            lo, hi = bounds(done)
            if done.op != "const" and lo is not None and lo == hi:
                done = const(lo)
            if len(_SIMPLIFIED) >= SIMPLIFIED_LIMIT:
                _SIMPLIFIED.clear()
            _SIMPLIFIED[node] = done
        memo[id(node)] = done
    return done


def simplify(expr: ExprLike) -> Expr:
    """A simpler expression with the same value whenever every variable lies within its bounds.

    Rewrites (c, d, m positive constants): sums and constant multiples are collected into a
    linear combination (like terms merge, x - x is 0); `(y // m) * m + y % m` is y;
    `(d*q + r) // d` is `q + r // d` and `(m*q + r) % m` is `r % m`, where r keeps the terms
    whose coefficients d (or m) does not divide and a constant in [0, d); common factors cancel
    (`(2x) // 4` is `x // 2`); `(x // c) // d` is `x // (c*d)`; `(x % (c*d)) % c` is `x % c`;
    `x // d` is the constant k and `x % d` is `x - k*d` where x's bounds lie in [k*d, (k+1)*d);
    min, max, comparisons and select are decided where the bounds of a - b or of the condition
    decide them; `x << c` is `x * 2**c` and, for x >= 0, `x >> c` is `x // 2**c` (0 < c <= 62)
    and `x & m` for a contiguous mask m = (2**w - 1) * 2**s is `((x // 2**s) % 2**w) * 2**s`,
    so that they take part in the rewrites of `//` and `%`; `a & b` is 0 and `a | b`, `a ^ b`
    are `a + b` where a is a multiple of 2**k (every coefficient and the constant of its sum)
    and b lies in [0, 2**k); `(p + c) ^ b`, c a positive constant whose bits the sum p (of
    non-negative terms whose bits do not meet) cannot have, is `(p ^ b) ^ c`, or `(p ^ b) + c`
    where b cannot have them either (a swizzled tile's unrolled steps then share `p ^ b`);
    other bitwise nodes stay, their operands simplified; any node whose
    bounds are a single value becomes that constant. Where the original divides by zero the
    result may have a value. Results are remembered across calls, by the node's structure.
    """
    return _simplify(as_expr(expr), {})

"""Translation of the project's symbolic integers (`layout_algebra.symbolic.Expr`) to Z3 terms.

The translation is exact: on every assignment of the variables where Python's evaluation
(`layout_algebra.evaluate` on ints) raises nothing, the Z3 term has the value Python computes.

    Expr                      Z3 (integer theory unless stated)
    var, const                Int(name), IntVal(value)
    a + b, a - b, a * b       the same
    a // c, a % c (c > 0)     a / c, a % c: Z3's division is Euclidean (0 <= a % c < |c|),
                              which for a positive divisor is Python's floor division
    a // c, a % c (c < 0)     (-a) / (-c), and a - c * that: Python's floor, rounding toward -inf
    a // b, a % b             If(b > 0, a / b, (-a) / (-b)), and a - b * that
    min, max, select          If
    comparisons, and, or, not Bool terms (as numbers: If(cond, 1, 0))
    a << c, a >> c (c const)  a * 2**c, a / 2**c (Python's >> rounds down, as Z3's / by 2**c)
    a << b, a >> b            a chain of If over the bounded shift count b
    a & b, a | b, a ^ b       through bit-vectors: BV2Int(op(Int2BV(a, w), Int2BV(b, w))), the
                              width w the bit length of the larger operand bound

Bitwise operators need operands whose interval bounds (`Expr.bounds()`, from the variables'
declared bounds) are finite and non-negative: then w bits hold them exactly. Anything else raises
`EncodingError`. A symbolic shift count needs finite bounds (at most 65 values).

Where Python raises (a zero divisor, a negative shift count) the term has some value; `defined`
gives the condition under which no such error happens, respecting the laziness of select, and
and or (only the branch taken must be defined).

Whole queries in bit-vectors. Int2BV / BV2Int make Z3 slow (a swizzle's bijectivity over 64K
offsets takes it tens of seconds), so a query whose expressions have bitwise operators is better
translated to bit-vectors throughout, which is exact when every sub-expression is bounded:
`bitvector_width(exprs)` gives a width w such that every sub-expression's interval lies in
``[0, 2**(w-1))`` (non-negative, with a spare top bit so that Z3's signed comparisons agree with
the unsigned values) and every divisor is at least 1, or None when there is none. An `Encoder`
made with that `width` translates variables to ``BitVec``, ``+ - *`` to the modular operations
(which never wrap under those bounds), ``//``, ``%`` to ``UDiv``, ``URem``, shifts and bitwise
operators to their bit-vector forms; the terms compare with Python's ``<``, ``==``, ... as
integer terms do.

Variables are identified by name, as in `evaluate`. `to_z3(expr, env)` is the one-call form:
`env` maps names to Z3 terms; any other variable becomes ``z3.Int(name)``. The `Encoder` class
shares one variable table across several expressions and also collects each variable's declared
bounds (`Encoder.bounds()`), which every query must assert for the bitwise translation to be
exact, and reads a model's values of the variables back as ints (`Encoder.values(model)`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Any

import z3

from layout_algebra.symbolic import Expr, ExprLike, as_expr
from proofs.errors import EncodingError

MAX_SHIFT_CASES = 65
"""The most values a symbolic shift count may take (one If branch each)."""

_COMPARISONS = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}
_LOGICAL = frozenset({"and", "or", "not"})
_BITWISE = {
    "&": lambda a, b: a & b,
    "|": lambda a, b: a | b,
    "^": lambda a, b: a ^ b,
}


class Encoder:
    """Translates `Expr`s to Z3 terms over one shared table of variables, in one Z3 context.

    `variables` maps each variable name met so far to its Z3 term (those of `env` first).
    `context` is the Z3 context of every term made: `ctx` when given, else that of `env`'s
    terms, else Z3's main context (a fresh context per query keeps the solver's work, and so
    its resource count, independent of earlier queries). `width`: None for integer terms, or
    the bit-vector width of a whole-query bit-vector translation (see the module docstring;
    take it from `bitvector_width`; a node whose bounds do not fit raises EncodingError).
    `modular`: with `width`, the translation of a `ModularPlan` of that width, which checks no
    node's bounds (the plan did, and its caller proves the plan's `signed` nodes non-negative).
    Results are memoised per node, so shared subtrees are translated once.
    """

    def __init__(
        self,
        env: Mapping[str, Any] | None = None,
        ctx: z3.Context | None = None,
        width: int | None = None,
        modular: bool = False,
    ) -> None:
        self.variables: dict[str, Any] = dict(env or {})
        if ctx is None:
            ctx = next((term.ctx for term in self.variables.values()), None) or z3.main_ctx()
        self.context = ctx
        self.width = width
        self.modular = modular and width is not None
        self._declared: dict[str, list[tuple[int | None, int | None]]] = {}
        self._terms: dict[int, tuple[Expr, Any]] = {}
        self._defined: dict[int, tuple[Expr, Any]] = {}

    # ------------------------------------------------------------------------------------------
    # Public interface
    # ------------------------------------------------------------------------------------------

    def term(self, expr: ExprLike) -> z3.ArithRef:
        """The Z3 term of `expr`, an integer (a bit-vector with `width`); a truth value gives
        1 or 0."""
        node = as_expr(expr)
        if node.is_boolean:
            return z3.If(self.truth(node), self._int(1), self._int(0))
        return self._number(node)

    def truth(self, expr: ExprLike) -> z3.BoolRef:
        """The Z3 Bool "`expr` is nonzero" (a comparison or logical node directly)."""
        node = as_expr(expr)
        if node.op in _COMPARISONS:
            a, b = (self.term(arg) for arg in node.args)
            return _COMPARISONS[node.op](a, b)
        if node.op == "and":
            return z3.And(self.truth(node.args[0]), self.truth(node.args[1]))
        if node.op == "or":
            return z3.Or(self.truth(node.args[0]), self.truth(node.args[1]))
        if node.op == "not":
            return z3.Not(self.truth(node.args[0]))
        return self._number(node) != 0

    def defined(self, expr: ExprLike) -> z3.BoolRef:
        """The condition under which evaluating `expr` on ints raises no error: every divisor
        it reaches is nonzero and every shift count it reaches is non-negative. The branch of a
        select not taken, and the right side of and / or when not read, are not reached."""
        return self._holding(self._definedness(as_expr(expr)))

    def _definedness(self, node: Expr) -> z3.BoolRef | None:
        """`defined` of `node`, or None where nothing in it can raise (no divisor or shift
        count reached): most address expressions, so their queries carry no trivial terms."""
        done = self._defined.get(id(node))
        if done is not None:
            return done[1]
        if node.op in ("var", "const"):
            return None
        reached = [self._definedness(arg) for arg in node.args]
        if node.op == "select" and (reached[1] is not None or reached[2] is not None):
            cond = self.truth(node.args[0])
            result = z3.And(
                self._holding(reached[0]),
                z3.Implies(cond, self._holding(reached[1])),
                z3.Implies(z3.Not(cond), self._holding(reached[2])),
            )
        elif node.op == "and" and reached[1] is not None:
            result = z3.And(
                self._holding(reached[0]), z3.Implies(self.truth(node.args[0]), reached[1])
            )
        elif node.op == "or" and reached[1] is not None:
            result = z3.And(
                self._holding(reached[0]),
                z3.Implies(z3.Not(self.truth(node.args[0])), reached[1]),
            )
        else:
            own = [part for part in reached if part is not None]
            if node.op in ("//", "%"):
                own.append(self.term(node.args[1]) != 0)
            elif node.op in ("<<", ">>"):
                own.append(self.term(node.args[1]) >= 0)
            result = None if not own else own[0] if len(own) == 1 else z3.And(*own)
        self._defined[id(node)] = (node, result)
        return result

    def _holding(self, condition: z3.BoolRef | None) -> z3.BoolRef:
        """`condition`, or True for None (`_definedness`'s "nothing can raise")."""
        return z3.BoolVal(True, self.context) if condition is None else condition

    def bounds(self) -> list[z3.BoolRef]:
        """``lo <= v <= hi`` for every declared bound of every variable met so far."""
        constraints = []
        for name, declared in self._declared.items():
            v = self.variables[name]
            for lo, hi in declared:
                if lo is not None:
                    constraints.append(v >= lo)
                if hi is not None:
                    constraints.append(v <= hi)
        return constraints

    def values(self, model: z3.ModelRef) -> dict[str, int]:
        """The value in `model` (of a query over this encoder's terms) of every variable met so
        far, by name; a variable the model leaves free gets Z3's default value."""
        return {
            name: model.eval(term, model_completion=True).as_long()
            for name, term in self.variables.items()
        }

    # ------------------------------------------------------------------------------------------
    # Numbers
    # ------------------------------------------------------------------------------------------

    def _int(self, value: int) -> z3.ArithRef:
        if self.width is not None:
            return z3.BitVecVal(value, self.width, self.context)
        return z3.IntVal(value, self.context)

    def _number(self, node: Expr) -> z3.ArithRef:
        done = self._terms.get(id(node))
        if done is not None:
            return done[1]
        if self.width is not None and not self.modular:
            lo, hi = node.bounds()
            if lo is None or hi is None or lo < 0 or hi.bit_length() >= self.width:
                raise EncodingError(
                    f"{node!r} has bounds {(lo, hi)}, outside [0, 2**{self.width - 1}) of the "
                    f"{self.width}-bit translation"
                )
        result = self._translate(node)
        self._terms[id(node)] = (node, result)
        return result

    def _variable(self, node: Expr) -> z3.ArithRef:
        declared = self._declared.setdefault(node.name, [])
        if (node.lo, node.hi) != (None, None) and (node.lo, node.hi) not in declared:
            declared.append((node.lo, node.hi))
        if node.name not in self.variables:
            if self.width is not None:
                self.variables[node.name] = z3.BitVec(node.name, self.width, self.context)
            else:
                self.variables[node.name] = z3.Int(node.name, self.context)
        return self.variables[node.name]

    def _translate(self, node: Expr) -> z3.ArithRef:
        """The term of `node`: in integer theory, or with `width` in the whole-query bit-vector
        forms (`_number` has checked the node's bounds)."""
        op = node.op
        if op == "var":
            return self._variable(node)
        if op == "const":
            return self._int(node.value)
        if op == "select":
            cond = self.truth(node.args[0])
            return z3.If(cond, self.term(node.args[1]), self.term(node.args[2]))
        if op in _COMPARISONS or op in _LOGICAL:
            return z3.If(self.truth(node), self._int(1), self._int(0))
        a, b = (self.term(arg) for arg in node.args)
        if op == "min":
            return z3.If(a <= b, a, b)
        if op == "max":
            return z3.If(a >= b, a, b)
        if self.width is not None:
            return _BITVECTOR[op](a, b)
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op in ("//", "%"):
            quotient = _floor_division(a, b, node.args[1])
            return quotient if op == "//" else a - b * quotient
        if op in ("<<", ">>"):
            return self._shift(node, a, b)
        return self._bitwise(node, a, b)

    def _shift(self, node: Expr, a: z3.ArithRef, count: z3.ArithRef) -> z3.ArithRef:
        """`a << count` as a * 2**count, `a >> count` as a / 2**count (floor)."""

        def shifted(k: int) -> z3.ArithRef:
            return a * (1 << k) if node.op == "<<" else a / (1 << k)

        if node.args[1].is_const:
            return shifted(max(node.args[1].value, 0))
        lo, hi = node.args[1].bounds()
        if lo is None or hi is None or hi - max(lo, 0) >= MAX_SHIFT_CASES:
            raise EncodingError(
                f"shift count {node.args[1]!r} of {node!r} has bounds {(lo, hi)}; expected "
                f"finite bounds spanning at most {MAX_SHIFT_CASES} values"
            )
        result = shifted(max(hi, 0))
        for k in range(max(hi, 0) - 1, max(lo, 0) - 1, -1):
            result = z3.If(count == k, shifted(k), result)
        return result

    def _bitwise(self, node: Expr, a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
        """`a & b`, `a | b`, `a ^ b` through bit-vectors wide enough for both operands."""
        width = 1
        for operand in node.args:
            lo, hi = operand.bounds()
            if lo is None or hi is None or lo < 0:
                raise EncodingError(
                    f"operand {operand!r} of {node.op!r} in {node!r} has bounds {(lo, hi)}; the "
                    "bitwise translation needs finite, non-negative bounds"
                )
            width = max(width, hi.bit_length())
        bits = _BITWISE[node.op](z3.Int2BV(a, width), z3.Int2BV(b, width))
        return z3.BV2Int(bits)


_BITVECTOR = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": z3.UDiv,
    "%": z3.URem,
    "<<": lambda a, b: a << b,
    ">>": z3.LShR,
    **_BITWISE,
}


def has_bitwise(exprs: Iterable[ExprLike]) -> bool:
    """Whether any of the trees has a `&`, `|` or `^` node."""
    return any(node.op in _BITWISE for expr in exprs for node in as_expr(expr).nodes())


def bitvector_width(exprs: Iterable[ExprLike]) -> int | None:
    """A width for the exact whole-query bit-vector translation of `exprs`, or None.

    The width is two more than the bit length of the largest upper bound of any sub-expression
    (one spare bit, so signed comparisons agree, and one for a ``limit + 1`` a query may form).
    None when a sub-expression's interval (from the variables' declared bounds) may be negative
    or is unbounded, or a divisor of ``//`` or ``%`` may be below 1.
    """
    largest = 0
    for node in chain.from_iterable(as_expr(expr).nodes() for expr in exprs):
        lo, hi = node.bounds()
        if lo is None or hi is None or lo < 0:
            return None
        if node.op in ("//", "%") and node.args[1].bounds()[0] < 1:
            return None
        largest = max(largest, hi)
    return largest.bit_length() + 2


_MODULAR = frozenset({"+", "-", "*"})
"""The operators whose bit-vector forms agree with the integers modulo ``2**w`` whatever the
signs of their operands."""

_UNSIGNED = frozenset({"//", "%", ">>", *_BITWISE})
"""The operators whose bit-vector forms read their operands as unsigned numbers."""


@dataclass(frozen=True)
class ModularPlan:
    """A whole-query bit-vector translation of width `width` that allows negative values
    (`modular_bitvector_plan`). It is exact at every point where each of `signed`, the
    operands of unsigned operators whose intervals reach below zero, is non-negative: the
    caller proves that first (in the integer theory), and only then reads an unsat query as a
    proof."""

    width: int
    signed: tuple[Expr, ...]


def modular_bitvector_plan(exprs: Iterable[ExprLike]) -> ModularPlan | None:
    """A `ModularPlan` for the truth-valued or integer roots `exprs`, or None.

    Bit-vector ``+ - *`` and ``<<`` agree with the integers modulo ``2**w`` whatever the signs
    of their operands, and a select's branches keep that agreement, so only the values other
    operators read must be exact. Signed comparisons (Z3's ``<`` on bit-vectors, as in min
    and max) and equality read a value exactly where it lies in ``[-2**(w-1), 2**(w-1))``: so
    the roots, the variables and the operands of comparisons, min, max, and a select's
    condition need finite bounds, and the width is two bits above the largest magnitude. The
    unsigned operators (divisions, remainders, ``>>``, the bitwise ones) and a shift's count
    need their operands non-negative too: those whose intervals reach below zero are the
    plan's `signed`. None where a bound needed is missing, a divisor may be below 1, or a
    variable's declared range reaches below zero.
    """
    roots = [as_expr(expr) for expr in exprs]
    bounded: dict[int, Expr] = {id(root): root for root in roots}
    unsigned: dict[int, Expr] = {}
    for node in chain.from_iterable(root.nodes() for root in roots):
        if node.op in _MODULAR or node.op in ("var", "const"):
            if node.op == "var":
                bounded[id(node)] = node
            continue
        if node.op == "<<":
            unsigned[id(node.args[1])] = node.args[1]
        elif node.op == "select":
            bounded[id(node.args[0])] = node.args[0]
        elif node.op in _UNSIGNED:
            unsigned.update((id(arg), arg) for arg in node.args)
        else:
            bounded.update((id(arg), arg) for arg in node.args)
        if node.op in ("//", "%") and (node.args[1].bounds()[0] or 0) < 1:
            return None
    largest, signed = 0, []
    for node in {**bounded, **unsigned}.values():
        lo, hi = node.bounds()
        if lo is None or hi is None or (node.op == "var" and lo < 0):
            return None
        if lo < 0 and id(node) in unsigned:
            signed.append(node)
        largest = max(largest, hi, -lo)
    return ModularPlan(largest.bit_length() + 2, tuple(signed))


def _floor_division(a: z3.ArithRef, b: z3.ArithRef, divisor: Expr) -> z3.ArithRef:
    """Python's `a // b` in Z3, whose `/` is Euclidean (equal to floor for b > 0)."""
    if divisor.is_const and divisor.value > 0:
        return a / b
    if divisor.is_const and divisor.value < 0:
        return (-a) / (-b)
    return z3.If(b > 0, a / b, (-a) / (-b))


def to_z3(
    expr: ExprLike, env: Mapping[str, Any] | None = None, ctx: z3.Context | None = None
) -> z3.ArithRef:
    """The integer Z3 term of `expr`, exact wherever Python's evaluation raises nothing.

    `env` maps variable names to Z3 integer terms; every other variable becomes
    ``z3.Int(name)``, in the context `ctx` (default: that of `env`'s terms, else Z3's main
    context). A truth-valued expression gives If(cond, 1, 0). The caller asserts the
    variables' ranges: for an expression with `& | ^`, at least the declared bounds of its
    variables (use `Encoder` and its `bounds()` to collect them). Raises EncodingError outside
    the translatable fragment (see the module docstring).
    """
    return Encoder(env, ctx).term(expr)

"""Printers of expressions: C source text, Python-like text (`repr`), sympy objects and LaTeX.

Each printer spells an operator as its `Operator` record says (`c_text`, `python_text`, `sympy`,
`latex`) and parenthesises by the records' precedences. A printed form is a `_Printed` triple:
the text, the precedence of its outermost operator, and that operator (empty for an atom). The C
text keeps Python's floor semantics of `//` and `%` (guarded where interval analysis cannot prove
the operands non-negative); the backend prints it into CUDA sources, so it must stay stable.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from layout_algebra.symbolic.bounds import interval_of
from layout_algebra.symbolic.expr import Expr, is_constant, is_negation
from layout_algebra.symbolic.operators import (
    ADDITIVE,
    ATOM,
    C_BITWISE,
    LOGICAL_AND,
    LOGICAL_OR,
    MULTIPLICATIVE,
    OPERATORS,
    RELATIONAL,
    SHIFT,
    UNARY,
    Operator,
)

CONDITIONAL_EXTREMUM_LIMIT = 300
"""The most characters of min's or max's two operands (in C) that print as a conditional
``(a < b ? a : b)``; longer ones print as CUDA's function ``min(a, b)``, which names each
operand once, where the conditional would double the text at every level of nested clamps
(the kernels' clamped tile and split indices over a row count)."""

_Printed = tuple[str, int, str]
"""Text, the precedence of its outermost operator, and that operator (empty for an atom)."""

_OperatorPrinter = Callable[[Expr, Operator, list[_Printed]], _Printed]
"""A printer of one operator node, given its record and its operands' printed forms."""


def to_c(expr: Expr, atoms: Mapping[Expr, str] | None = None) -> str:
    """`Expr.to_c()`: the expression as C source text (see the method for the rules).

    `atoms` maps sub-expressions to C text printed in their place as a whole operand (it must
    be a primary expression, such as a name, a call or a parenthesised cast): how the backend
    prints parts of an expression in another C type (`backend.lower.context.c_text`)."""
    return _print(expr, _c_operator, {}, atoms or {})[0]


def to_python(expr: Expr) -> str:
    """`repr(expr)`: Python-like text that rebuilds the expression from the package's names."""
    return _print(expr, _python_operator, {})[0]


def to_sympy(expr: Expr) -> Any:
    """`Expr.to_sympy()`: the expression as a sympy object (see the method for the rules)."""
    return _to_sympy(expr, expr.is_boolean, {})


def to_latex(expr: Expr) -> str:
    """The LaTeX of `to_sympy(expr)` between dollar signs, for notebooks."""
    import sympy

    return f"${sympy.latex(to_sympy(expr))}$"


# ------------------------------------------------------------------------ parentheses


def _wrap(printed: _Printed, needs_parentheses: bool) -> str:
    """The text, in parentheses when asked."""
    return f"({printed[0]})" if needs_parentheses else printed[0]


def _left(printed: _Printed, precedence: int, operator_text: str) -> str:
    """A left operand: parenthesised below the parent's precedence, or when a different
    operator of the same multiplicative precedence (so `(a / b) * c` reads unambiguously)."""
    text, inner, inner_operator = printed
    mixed = inner == precedence == MULTIPLICATIVE and inner_operator != operator_text
    return _wrap(printed, inner < precedence or mixed)


def _right(printed: _Printed, precedence: int) -> str:
    """A right operand: parenthesised at or below the parent's precedence, and when unary."""
    return _wrap(printed, printed[1] <= precedence or printed[1] == UNARY)


def _leaf(node: Expr) -> _Printed:
    """A variable's name or a constant's digits (the same in C and Python)."""
    if node.op == "var":
        return node.name, ATOM, ""
    return str(node.value), ATOM if node.value >= 0 else UNARY, ""


def _print(
    node: Expr,
    print_operator: _OperatorPrinter,
    memo: dict[int, _Printed],
    atoms: Mapping[Expr, str] | None = None,
) -> _Printed:
    """The printed form of a node (memoised per node): its text in `atoms`, a leaf, unary minus
    (`0 - x`), or what `print_operator(node, record, operands)` makes of the operands' printed
    forms."""
    done = memo.get(id(node))
    if done is None and atoms and node in atoms:
        done = memo[id(node)] = (atoms[node], ATOM, "")
    if done is None:
        args = [_print(arg, print_operator, memo, atoms) for arg in node.args]
        if not args:
            done = _leaf(node)
        elif is_negation(node):
            done = (f"-{_wrap(args[1], args[1][1] != ATOM)}", UNARY, "-")
        else:
            done = print_operator(node, OPERATORS[node.op], args)
        memo[id(node)] = done
    return done


# ---------------------------------------------------------------------------------------- C


def _power_of_two(value: int) -> int | None:
    """k when value == 2**k (value >= 2), else None."""
    if value >= 2 and value & (value - 1) == 0:
        return value.bit_length() - 1
    return None


def _c_division(node: Expr, a: _Printed, b: _Printed) -> _Printed:
    """`//` or `%` in C with Python's floor semantics, plain where the bounds allow it."""
    dividend, divisor = interval_of(node.args[0]), interval_of(node.args[1])
    record = OPERATORS[node.op]
    is_floordiv = node.op == "//"
    if dividend[0] >= 0 and divisor[0] >= 1:
        # Non-negative by positive: C's operators agree with Python's; a power of two divisor
        # prints as a shift or a mask.
        shift = _power_of_two(node.args[1].value) if is_constant(node.args[1]) else None
        if shift is not None and is_floordiv:
            return f"{_wrap(a, a[1] != ATOM)} >> {shift}", SHIFT, ">>"
        if shift is not None:
            return f"{_wrap(a, a[1] != ATOM)} & {node.args[1].value - 1}", C_BITWISE, "&"
        text, precedence = record.c_text, record.c_precedence
        return f"{_left(a, precedence, text)} {text} {_right(b, precedence)}", precedence, text
    # Otherwise a pure expression: C's `/` truncates and its `%` takes the dividend's sign.
    x = _wrap(a, a[1] < UNARY)
    y = _wrap(b, b[1] != ATOM)
    floor_mod = f"({x} % {y} + {y}) % {y}"
    if not is_floordiv:
        return floor_mod, MULTIPLICATIVE, "%"
    if divisor[0] >= 1:
        return f"{x} / {y} - ({x} % {y} < 0)", ADDITIVE, "-"
    if divisor[1] <= -1:
        return f"{x} / {y} - ({x} % {y} > 0)", ADDITIVE, "-"
    return f"({x} - {floor_mod}) / {y}", MULTIPLICATIVE, "/"


def _c_operator(node: Expr, record: Operator, args: list[_Printed]) -> _Printed:
    """C text of an operator node from its operands' C text."""
    kind, text, precedence = record.kind, record.c_text, record.c_precedence
    if node.op == "not":
        return f"{text}{_wrap(args[0], args[0][1] != ATOM)}", precedence, text
    if kind == "division":
        return _c_division(node, args[0], args[1])
    if kind == "extremum":
        x, y = (_wrap(arg, arg[1] <= RELATIONAL) for arg in args)
        if len(x) + len(y) <= CONDITIONAL_EXTREMUM_LIMIT:
            # A conditional on the relation, (a < b ? a : b), naming each operand twice.
            relation = "<" if node.op == "min" else ">"
            return f"({x} {relation} {y} ? {x} : {y})", precedence, ""
        # CUDA's function, naming each once (overloaded per integer type: both operands of one).
        return f"{text}({args[0][0]}, {args[1][0]})", ATOM, ""
    if kind == "select":
        cond, x, y = (_wrap(arg, arg[1] <= LOGICAL_OR) for arg in args)
        return f"({cond} ? {x} : {y})", precedence, ""
    if kind == "comparison":
        x, y = (_wrap(arg, arg[1] <= RELATIONAL) for arg in args)
    elif kind == "logical":
        x, y = (_wrap(arg, arg[1] <= LOGICAL_AND) for arg in args)
    elif kind in ("bitwise", "shift"):
        # Every operand that is not an atom is parenthesised, whatever C's rule would allow.
        x, y = (_wrap(arg, arg[1] != ATOM) for arg in args)
    else:
        x, y = _left(args[0], precedence, text), _right(args[1], precedence)
    return f"{x} {text} {y}", precedence, text


# ----------------------------------------------------------------------------------- Python


def _python_operator(node: Expr, record: Operator, args: list[_Printed]) -> _Printed:
    """Python-like text of an operator node, which rebuilds it from the package's names."""
    kind, text, precedence = record.kind, record.python_text, record.python_precedence
    left = node.args[0]
    # A constant left operand is spelled const(c), where a bare int would not rebuild the node:
    # Python reflects `c < x` to `x > c`, an int has no method eq, and `c // 0` raises at once.
    constant = f"const({left.value})" if left.op == "const" else None
    if kind in ("extremum", "select", "logical"):
        # A function of the package: minimum(a, b), select(c, a, b), logical_not(a), ...
        return f"{text}({', '.join(arg[0] for arg in args)})", precedence, ""
    if kind == "comparison" and text.isidentifier():
        # `==` and `!=` as the methods eq and ne: Python's `==` is structural equality.
        x = constant or _wrap(args[0], args[0][1] != ATOM)
        return f"{x}.{text}({args[1][0]})", precedence, ""
    if kind == "comparison":
        x = constant or _wrap(args[0], args[0][1] <= precedence)
        return f"{x} {text} {_wrap(args[1], args[1][1] <= precedence)}", precedence, text
    x, y = _left(args[0], precedence, text), _right(args[1], precedence)
    if constant is not None and node.args[1].op == "const":
        # Two constants: only a division by the constant 0 stays unfolded.
        x = constant
    return f"{x} {text} {y}", precedence, text


# ------------------------------------------------------------------------------------ sympy


@functools.cache
def _sympy_bitwise(op: str) -> Any:
    """The sympy function class of `&`, `|` or `^` (one class per operator, made on first use),
    named by the record's `sympy`, evaluating on two integers with its `integer` function and
    printing in LaTeX as the infix operator `latex`."""
    import sympy

    record = OPERATORS[op]

    def evaluate_integers(cls: Any, a: Any, b: Any) -> Any:
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(record.integer(int(a), int(b)))
        return None

    def latex(self: Any, printer: Any) -> str:
        x, y = (printer._print(arg) for arg in self.args)
        return rf"\left({x} {record.latex} {y}\right)"

    namespace = {"nargs": 2, "eval": classmethod(evaluate_integers), "_latex": latex}
    return type(record.sympy, (sympy.Function,), namespace)


def _sympy_number(node: Expr, memo: dict[tuple[int, bool], Any]) -> Any:
    """The sympy form of a node that is a number by its operator (not a truth value)."""
    import sympy

    op, record = node.op, OPERATORS[node.op]
    if op == "var":
        assumptions = {"integer": True}
        if node.lo is not None and node.lo >= 0:
            assumptions["nonnegative"] = True
        return sympy.Symbol(node.name, **assumptions)
    if op == "const":
        return sympy.Integer(node.value)
    if op == "select":
        cond = _to_sympy(node.args[0], True, memo)
        x, y = (_to_sympy(arg, False, memo) for arg in node.args[1:])
        return sympy.Piecewise((x, cond), (y, True))
    x, y = (_to_sympy(arg, False, memo) for arg in node.args)
    if record.kind == "bitwise":
        return _sympy_bitwise(op)(x, y)
    if record.sympy is not None:
        return getattr(sympy, record.sympy)(x, y)
    if record.kind == "arithmetic":
        # `+ - *` are Python's operators, which sympy overloads.
        return record.integer(x, y)
    # The others are formulas of sympy's arithmetic.
    if op == "//":
        return sympy.floor(x / y)
    if op == "<<":
        return x * 2**y
    return sympy.floor(x / 2**y)


def _to_sympy(node: Expr, as_truth: bool, memo: dict[tuple[int, bool], Any]) -> Any:
    """The sympy form of a node: a Boolean when `as_truth`, else a number."""
    import sympy

    key = (id(node), as_truth)
    if key in memo:
        return memo[key]
    record = OPERATORS[node.op]
    if record.is_boolean:
        # A relation of numbers, or And, Or, Not of truth values.
        operands = (_to_sympy(arg, not record.is_comparison, memo) for arg in node.args)
        truth = getattr(sympy, record.sympy)(*operands)
        result = truth if as_truth else sympy.Piecewise((1, truth), (0, True))
    else:
        number = _sympy_number(node, memo)
        result = sympy.Ne(number, 0) if as_truth else number
    memo[key] = result
    return result

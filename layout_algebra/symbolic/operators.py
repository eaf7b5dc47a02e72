"""The operator records: one frozen `Operator` per value of `Expr.op`, in the table `OPERATORS`.

A record holds every fact about one operator that the facets of the package read: its arity and
kind, its value on Python ints and on NumPy arrays, the negation of a comparison, and how the C,
Python and sympy printers spell it. Folding, evaluation, interval analysis, simplification and the
printers look operators up here rather than keeping tables of their own. Two of the records:

    field               OPERATORS["//"]        OPERATORS["=="]
    arity, kind         2, "division"          2, "comparison"
    integer, array      operator.floordiv,     operator.eq,
                        np.floor_divide        np.equal
    C text, precedence  "/", MULTIPLICATIVE    "==", EQUALITY
    Python text, prec.  "//", MULTIPLICATIVE   "eq", ATOM (printed `a.eq(b)`)
    negation, sympy     None, None (a formula) "!=", "Eq"

Precedences are ints, a higher number binding tighter. C ranks `&`, `^`, `|` below the comparisons
while Python ranks them above; the C printer gives them the lowest precedence, `C_BITWISE`, so
that they are parenthesised wherever they are an operand and no reader has to recall the rule.

This module is the base of the package: it imports nothing from it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

# Precedences of the printed forms; a higher number binds tighter.
ATOM = 100
"""A name, a non-negative literal, a call or a parenthesised form: never needs parentheses."""
UNARY = 90
"""Unary minus, C's `!`, and a negative literal."""
MULTIPLICATIVE = 80
ADDITIVE = 70
SHIFT = 60
RELATIONAL = 50
"""`<`, `<=`, `>`, `>=` in C and every comparison in Python."""
EQUALITY = 40
"""C's `==` and `!=`, which bind looser than its other comparisons."""
LOGICAL_AND = 20
LOGICAL_OR = 10
C_BITWISE = 5
"""C's `&`, `^`, `|`, printed with the lowest precedence (see the module docstring)."""
_PYTHON_BITAND = 58
_PYTHON_BITXOR = 56
_PYTHON_BITOR = 54
"""Python ranks `&` above `^` above `|`, all between the shifts and the comparisons."""

Kind = Literal[
    "leaf",
    "arithmetic",
    "division",
    "extremum",
    "bitwise",
    "shift",
    "comparison",
    "logical",
    "select",
]
"""The family of an operator; the facets split their cases by kind:

- leaf: `var`, `const`; arithmetic: `+ - *`; division: `// %` (Python's floor semantics);
- extremum: `min`, `max`; bitwise: `& | ^`; shift: `<< >>`;
- comparison: `< <= > >= == !=`; logical: `and`, `or`, `not`; select: `select`.
"""


Function = Callable[..., Any]
"""An operator's value on ints or on arrays, as a function of its operands' values."""


def _where(cond: Any, if_true: Any, if_false: Any) -> Any:
    """`select` on arrays: `if_true` where `cond` is nonzero, else `if_false` (both evaluated)."""
    return np.where(cond != 0, if_true, if_false)


@dataclass(frozen=True)
class Operator:
    """What one value of `Expr.op` means, and how every facet of the package spells it.

    Fields:
    - `symbol`: the value of `Expr.op` (the key of `OPERATORS`);
    - `arity`: the number of operands (0 for leaves);
    - `kind`: the operator's family (see `Kind`);
    - `integer`: the value on Python ints of the operands (a bool for comparisons and `not`);
      None for leaves and for `select`, `and`, `or`, which evaluation on ints reads lazily (only
      the operands that the first one asks for);
    - `array`: the value on NumPy int64 arrays, elementwise (bool arrays for truth values);
      None for leaves;
    - `c_text`, `c_precedence`: the C spelling of the operator and the precedence of its printed
      form; for `min` and `max`, the name of CUDA's function, printed for long operands (else
      a conditional on their relation, `printing.CONDITIONAL_EXTREMUM_LIMIT`); for `//`
      and `%`, the C operator of the plain form, printed only where the operands allow it;
    - `python_text`, `python_precedence`: the spelling in `repr`, which rebuilds the expression
      from the package's names: an infix operator, a function (`minimum`, `select`, ...) or, for
      `==` and `!=`, the method `eq` or `ne` (Python's `==` is structural equality);
    - `negation`: for a comparison, the comparison that is true exactly when it is false;
    - `sympy`: the sympy function the operator becomes, by name: a name in sympy (`Lt`, `Mod`,
      `Min`, `And`, ...) or, for `&`, `|`, `^`, the name of the function class that the printer
      makes; None where the printer writes a formula (`a - b`, `floor(a / b)`, a `Piecewise`);
    - `latex`: for `&`, `|`, `^`, the LaTeX symbol of the infix operator.
    """

    symbol: str
    arity: int
    kind: Kind
    integer: Function | None = None
    array: Function | None = None
    c_text: str | None = None
    c_precedence: int = ATOM
    python_text: str | None = None
    python_precedence: int = ATOM
    negation: str | None = None
    sympy: str | None = None
    latex: str | None = None

    @property
    def is_comparison(self) -> bool:
        """True for `<`, `<=`, `>`, `>=`, `==`, `!=`."""
        return self.kind == "comparison"

    @property
    def is_boolean(self) -> bool:
        """True when the operator gives a truth value: a comparison, `and`, `or`, `not`."""
        return self.kind in ("comparison", "logical")


# The records, family by family: each helper fills in what its family shares.


def _infix(
    symbol: str, kind: Kind, integer: Function, array: Function, level: int, **facts: Any
) -> Operator:
    """A binary operator written infix in C and in Python, at precedence `level` in both (`//` is
    C's `/`); `facts` gives the other fields."""
    c_text = "/" if symbol == "//" else symbol
    return Operator(symbol, 2, kind, integer, array, c_text, level, symbol, level, **facts)


def _bitwise(
    symbol: str, integer: Function, array: Function, python_level: int, sympy: str, latex: str
) -> Operator:
    """`&`, `|` or `^`: at `C_BITWISE` in C (see the module docstring) and at `python_level` in
    Python; in sympy the function class named `sympy`, printed in LaTeX as `latex`."""
    record = _infix(symbol, "bitwise", integer, array, C_BITWISE, sympy=sympy, latex=latex)
    return replace(record, python_precedence=python_level)


def _comparison(
    symbol: str, integer: Function, array: Function, negation: str, sympy: str
) -> Operator:
    """A comparison. `==` and `!=` bind looser than the others in C, and Python spells them as
    the methods `eq` and `ne` (its `==` is structural equality)."""
    record = _infix(
        symbol, "comparison", integer, array, RELATIONAL, negation=negation, sympy=sympy
    )
    method = {"==": "eq", "!=": "ne"}.get(symbol)
    if method is None:
        return record
    return replace(record, c_precedence=EQUALITY, python_text=method, python_precedence=ATOM)


_RECORDS = (
    Operator("var", 0, "leaf"),
    Operator("const", 0, "leaf"),
    _infix("+", "arithmetic", operator.add, np.add, ADDITIVE),
    _infix("-", "arithmetic", operator.sub, np.subtract, ADDITIVE),
    _infix("*", "arithmetic", operator.mul, np.multiply, MULTIPLICATIVE),
    _infix("//", "division", operator.floordiv, np.floor_divide, MULTIPLICATIVE),
    _infix("%", "division", operator.mod, np.mod, MULTIPLICATIVE, sympy="Mod"),
    Operator("min", 2, "extremum", min, np.minimum, "min", python_text="minimum", sympy="Min"),
    Operator("max", 2, "extremum", max, np.maximum, "max", python_text="maximum", sympy="Max"),
    _bitwise("&", operator.and_, np.bitwise_and, _PYTHON_BITAND, "bitwise_and", r"\mathbin{\&}"),
    _bitwise("|", operator.or_, np.bitwise_or, _PYTHON_BITOR, "bitwise_or", r"\mathbin{|}"),
    _bitwise("^", operator.xor, np.bitwise_xor, _PYTHON_BITXOR, "bitwise_xor", r"\oplus"),
    _infix("<<", "shift", operator.lshift, np.left_shift, SHIFT),
    _infix(">>", "shift", operator.rshift, np.right_shift, SHIFT),
    _comparison("<", operator.lt, np.less, ">=", "Lt"),
    _comparison("<=", operator.le, np.less_equal, ">", "Le"),
    _comparison(">", operator.gt, np.greater, "<=", "Gt"),
    _comparison(">=", operator.ge, np.greater_equal, "<", "Ge"),
    _comparison("==", operator.eq, np.equal, "!=", "Eq"),
    _comparison("!=", operator.ne, np.not_equal, "==", "Ne"),
    Operator(
        "and", 2, "logical", None, np.logical_and, "&&", LOGICAL_AND, "logical_and", sympy="And"
    ),
    Operator("or", 2, "logical", None, np.logical_or, "||", LOGICAL_OR, "logical_or", sympy="Or"),
    Operator(
        "not", 1, "logical", operator.not_, np.logical_not, "!", UNARY, "logical_not", sympy="Not"
    ),
    Operator("select", 3, "select", None, _where, python_text="select"),
)

OPERATORS: Mapping[str, Operator] = MappingProxyType({record.symbol: record for record in _RECORDS})
"""Every value `Expr.op` can take, mapped to its record (read-only)."""

"""Symbolic integers: the one expression type for every integer formula of the project.

Extents and strides of global layouts, the tile IR's scalar expressions, `FunctionLayout` formulas
run under the solver and the backend's address expressions are all `Expr` trees. An `Expr` is an
immutable node: `op` names the operation, `args` holds the operands, and leaves carry a `name`
(variables, with optional inclusive bounds `lo`, `hi`) or a `value` (constants).

    op                               args                      meaning
    "var", "const"                   ()                        a named integer / a literal
    "+", "-", "*"                    (a, b)                    exact integer arithmetic
    "//", "%"                        (a, b)                    Python's floor division and modulo
    "min", "max"                     (a, b)
    "&", "|", "^"                    (a, b)                    bitwise and, or, xor (a, b >= 0)
    "<<", ">>"                       (a, b)                    a * 2**b, a // 2**b (a, b >= 0)
    "<", "<=", ">", ">=", "==", "!="  (a, b)                    1 when true, 0 when false
    "and", "or"                      (a, b)                    C's `&&` / `||`: nonzero is true
    "not"                            (a,)
    "select"                         (cond, if_true, if_false) `if_true if cond != 0 else if_false`

A worked example, with `t = var("t", 0, 127)`, `i = var("i", 0, 3)` and `n = var("n")`:

    expression          repr                to_c()                    bounds()
    t // 4 * 2 + i      (t // 4) * 2 + i    (t >> 2) * 2 + i          (0, 65)
    n // 4              n // 4              n / 4 - (n % 4 < 0)       (None, None)
    n % 4               n % 4               (n % 4 + 4) % 4           (0, 3)
    minimum(t, 100)     minimum(t, 100)     (t < 100 ? t : 100)       (0, 100)
    t ^ (t & 24) >> 3   t ^ (t & 24) >> 3   t ^ ((t & 24) >> 3)       (0, 127)

Python's operators build trees: `+ - * // % & | ^ << >>` and unary `-` take an `Expr` or an int
on either side, `< <= > >=` give boolean trees, and symbolic equality is the method `a.eq(b)` /
`a.ne(b)`, because `==` and `hash` are structural, so that expressions can be dictionary keys.
Construction folds constants and applies cheap identities (`x + 0`, `x * 1`, `x * 0`, `x // 1`,
`x % 1`, `x ^ 0`, `x & 0`, `x | 0`, `x << 0`, `x >> 0`, nested constant offsets, scales and
shifts), so that a formula applied to plain ints stays small; `simplify` does the stronger,
bound-aware rewriting. Truth-testing a non-constant expression raises `TypeError`, so a Python
`if` on a symbol cannot slip into a formula.

The bitwise operators serve XOR swizzles of shared-memory addresses (CuTe's `Swizzle<B,M,S>` is
`x ^ ((x & (((1 << B) - 1) << (M + S))) >> S)`). They are defined on non-negative operands and
shift counts, where every evaluation (Python ints, NumPy int64 arrays without overflow, the C text)
agrees: `&`, `|`, `^` act on the binary digits, `a << b` is `a * 2**b` and `a >> b` is `a // 2**b`.
Beyond that domain, evaluation on ints follows Python (two's complement for negative operands,
`>>` rounding down, a negative shift count raises `LayoutError`) and interval analysis stays sound,
while array evaluation and the C text are unspecified.

An expression evaluates on Python ints (exact) or NumPy integer arrays (broadcast, int64), prints
as a C expression whose `/` and `%` keep Python's floor semantics (guarded where interval analysis
cannot prove the operands non-negative), and converts to sympy for display. The proofs package
translates trees to Z3 by walking `op`, `args`, `name`, `value`, `lo` and `hi`.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from layout_algebra.errors import LayoutError

OPERATORS: frozenset[str] = frozenset(
    {
        "var",
        "const",
        "+",
        "-",
        "*",
        "//",
        "%",
        "min",
        "max",
        "&",
        "|",
        "^",
        "<<",
        ">>",
        "<",
        "<=",
        ">",
        ">=",
        "==",
        "!=",
        "and",
        "or",
        "not",
        "select",
    }
)
"""Every value `Expr.op` can take."""

_COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
_NEGATED_COMPARISON = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
_BOOLEAN_OPS = frozenset(_COMPARISONS) | {"and", "or", "not"}
_ARITY = {"var": 0, "const": 0, "not": 1, "select": 3}


class Expr:
    """An immutable symbolic integer expression node.

    Fields: `op` (one of `OPERATORS`), `args` (the operand nodes; empty for leaves; `select`'s
    are `(cond, if_true, if_false)`), `name` (variables only), `value` (constants only; truth
    values are the constants 0 and 1), and `lo`, `hi` (variables only: inclusive bounds, `None`
    for an unbounded side). `==` and `hash` compare structure (an int compares equal to its
    constant); symbolic comparison is `eq`, `ne`, `<`, `<=`, `>`, `>=`.

    Direct construction `Expr(op, args, name=..., value=..., lo=..., hi=...)` validates the node
    and builds it as given, without folding; the free functions (`var`, `const`, `minimum`, ...)
    and the operators fold constants and cheap identities.
    """

    __slots__ = ("op", "args", "name", "value", "lo", "hi", "_hash", "_interval", "_free_vars")
    __array_ufunc__ = None

    op: str
    args: tuple[Expr, ...]
    name: str | None
    value: int | None
    lo: int | None
    hi: int | None

    def __init__(
        self,
        op: str,
        args: tuple[Expr, ...] = (),
        *,
        name: str | None = None,
        value: int | None = None,
        lo: int | None = None,
        hi: int | None = None,
    ) -> None:
        if op not in OPERATORS:
            raise LayoutError(
                f"unknown expression operator {op!r}; expected one of {sorted(OPERATORS)}"
            )
        args = tuple(args)
        for arg in args:
            if not isinstance(arg, Expr):
                raise TypeError(
                    f"operand {arg!r} of {op!r} is a {type(arg).__name__}, expected an Expr"
                )
        arity = _ARITY.get(op, 2)
        if len(args) != arity:
            raise LayoutError(f"operator {op!r} takes {arity} operands, got {len(args)}")
        if op == "var":
            _check_var_fields(name, lo, hi)
            if value is not None:
                raise LayoutError(f"variable {name!r} cannot have a value, got {value!r}")
            lo = None if lo is None else int(lo)
            hi = None if hi is None else int(hi)
        elif op == "const":
            value = _int_value(value)
        if op != "var" and (name is not None or lo is not None or hi is not None):
            raise LayoutError(f"only variables have a name and bounds, got them on {op!r}")
        if op != "const" and value is not None:
            raise LayoutError(f"only constants have a value, got {value!r} on {op!r}")
        _set_fields(self, op, args, name, value, lo, hi)

    # ----------------------------------------------------------------------------------- identity

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"Expr is immutable: cannot set {key!r}")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"Expr is immutable: cannot delete {key!r}")

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (int, np.integer)):
            other = const(other)
        if not isinstance(other, Expr):
            return NotImplemented
        return _same_structure(self, other)

    def __reduce__(self) -> tuple[Callable[..., Expr], tuple[Any, ...]]:
        return _raw, (self.op, self.args, self.name, self.value, self.lo, self.hi)

    def __copy__(self) -> Expr:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> Expr:
        return self

    @property
    def is_const(self) -> bool:
        """True for a constant leaf."""
        return self.op == "const"

    @property
    def is_boolean(self) -> bool:
        """True when the node is a truth value by its operator (a comparison, and, or, not)."""
        return self.op in _BOOLEAN_OPS

    def __bool__(self) -> bool:
        if self.op == "const":
            return self.value != 0
        raise TypeError(
            f"the truth value of the symbolic expression {self!r} is not known; "
            "use select, minimum, maximum or logical_and instead of Python's if, min, max or and"
        )

    def __int__(self) -> int:
        if self.op == "const":
            return self.value
        raise TypeError(f"cannot convert the symbolic expression {self!r} to int")

    __index__ = __int__

    # ---------------------------------------------------------------------------------- operators

    def __add__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _add(self, other)

    def __radd__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _add(other, self)

    def __sub__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _sub(self, other)

    def __rsub__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _sub(other, self)

    def __mul__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _mul(self, other)

    def __rmul__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _mul(other, self)

    def __floordiv__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _floordiv(self, other)

    def __rfloordiv__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _floordiv(other, self)

    def __mod__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _mod(self, other)

    def __rmod__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _mod(other, self)

    def __and__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _bitand(self, other)

    def __rand__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _bitand(other, self)

    def __or__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _bitor(self, other)

    def __ror__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _bitor(other, self)

    def __xor__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _bitxor(self, other)

    def __rxor__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _bitxor(other, self)

    def __lshift__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _lshift(self, other)

    def __rlshift__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _lshift(other, self)

    def __rshift__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _rshift(self, other)

    def __rrshift__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _rshift(other, self)

    def __truediv__(self, other: object) -> Expr:
        raise TypeError(
            f"symbolic integers have floor division only: use `//`, not `/`, on {self!r}"
        )

    def __rtruediv__(self, other: object) -> Expr:
        raise TypeError(
            f"symbolic integers have floor division only: use `//`, not `/`, on {self!r}"
        )

    def __neg__(self) -> Expr:
        return _sub(_ZERO, self)

    def __pos__(self) -> Expr:
        return self

    def __lt__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _compare("<", self, other)

    def __le__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _compare("<=", self, other)

    def __gt__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _compare(">", self, other)

    def __ge__(self, other: ExprLike) -> Expr:
        other = _operand(other)
        return NotImplemented if other is None else _compare(">=", self, other)

    def eq(self, other: ExprLike) -> Expr:
        """The truth value `self == other` as an expression (1 or 0 once evaluated)."""
        return _compare("==", self, as_expr(other))

    def ne(self, other: ExprLike) -> Expr:
        """The truth value `self != other` as an expression (1 or 0 once evaluated)."""
        return _compare("!=", self, as_expr(other))

    # ---------------------------------------------------------------------------------- analysis

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        """`evaluate(self, env)`: the value under `env` (see the module function)."""
        return evaluate(self, env)

    def free_vars(self) -> frozenset[str]:
        """The names of the variables the expression reads."""
        if self._free_vars is None:
            if self.op == "var":
                names = frozenset({self.name})
            else:
                names = frozenset().union(*(arg.free_vars() for arg in self.args))
            object.__setattr__(self, "_free_vars", names)
        return self._free_vars

    def nodes(self) -> Iterator[Expr]:
        """Every node of the tree once (a shared subtree once), parents before their operands,
        operands left to right."""
        return _walk(self)

    def variables(self) -> tuple[Expr, ...]:
        """The distinct variable nodes (with their bounds), in order of first appearance."""
        found: dict[Expr, None] = {}
        for node in self.nodes():
            if node.op == "var":
                found.setdefault(node)
        return tuple(found)

    def substitute(self, mapping: Mapping[str, ExprLike]) -> Expr:
        """Replace every variable whose name is a key of `mapping` by its value, folding again.

        Values are expressions or ints; names absent from `mapping` stay variables.
        Example: `(x * 4 + y).substitute({"x": 2})` is `8 + y`.
        """
        replacements = {name: as_expr(value) for name, value in mapping.items()}
        memo: dict[int, Expr] = {}

        def rebuild(node: Expr) -> Expr:
            if node.op == "var":
                return replacements.get(node.name, node)
            if not node.args:
                return node
            done = memo.get(id(node))
            if done is None:
                args = tuple(rebuild(arg) for arg in node.args)
                unchanged = all(new is old for new, old in zip(args, node.args))
                done = node if unchanged else _build(node.op, args)
                memo[id(node)] = done
            return done

        return rebuild(self)

    def bounds(self) -> tuple[int | None, int | None]:
        """Inclusive bounds (lo, hi) of the value by interval analysis; None for an unbounded side.

        Variables contribute their declared bounds. The bounds are sound for every evaluation on
        ints in which each variable lies within its bounds, no division by zero happens and no
        shift count is negative; they need not be tight. Truth values have bounds within (0, 1).
        """
        lo, hi = _interval_of(self)
        return (None if lo == -math.inf else lo, None if hi == math.inf else hi)

    # ---------------------------------------------------------------------------------- printing

    def to_c(self) -> str:
        """The expression as C source text with the same value as `evaluate` on ints.

        Variables print as their names. `//` and `%` print as C's `/` and `%` only where interval
        analysis proves the dividend non-negative and the divisor positive (a constant power of
        two divisor then prints as a shift or a mask); elsewhere they print as a guarded pure
        expression with Python's floor semantics, e.g. `x // 4` with `x` of unknown sign is
        `x / 4 - (x % 4 < 0)`. min and max print as `(a < b ? a : b)`, select as `?:`,
        logical operators as `&&`, `||`, `!`, comparisons as C comparisons (which give 0 or 1).
        `& | ^ << >>` print as themselves, with every operand that is not a name or a
        non-negative constant in parentheses, and `&`, `^`, `|` in parentheses wherever they are
        an operand (C ranks them below the comparisons); they mean what `evaluate` computes for
        non-negative operands and shift counts below the width of the C type. The text assumes
        no arithmetic overflow in the C type of the variables; a shift's type is that of its left
        operand, so a constant shifted left, as in `1 << n`, is a C `int`.
        """
        return _to_c(self, {})[0]

    def to_sympy(self) -> Any:
        """The expression as a sympy object, for display and LaTeX.

        Variables become integer `Symbol`s (non-negative where `lo >= 0`), `//` becomes
        `floor(a / b)`, `%` `Mod`, min and max `Min` and `Max`, comparisons relations, logical
        operators `And`, `Or`, `Not`, and select a `Piecewise`. A truth value used as a number
        becomes `Piecewise((1, cond), (0, True))`; a number used as a truth value `Ne(n, 0)`.
        `a << b` becomes `a * 2**b` and `a >> b` `floor(a / 2**b)`; `&`, `|`, `^` become the
        functions `bitwise_and`, `bitwise_or`, `bitwise_xor`, which evaluate on two integers
        (Python's operators) and print in LaTeX as infix operators.
        """
        return _to_sympy(self, self.is_boolean, {})

    def _repr_latex_(self) -> str:
        import sympy

        return f"${sympy.latex(self.to_sympy())}$"

    def __repr__(self) -> str:
        return _to_python(self, {})[0]

    __str__ = __repr__


ExprLike = Expr | int | np.integer
"""What every function of this module accepts where an integer expression is expected."""


# -------------------------------------------------------------------------------- construction


def _set_fields(
    node: Expr,
    op: str,
    args: tuple[Expr, ...],
    name: str | None,
    value: int | None,
    lo: int | None,
    hi: int | None,
) -> None:
    """Fill a fresh node's slots; the hash of a constant is its value's, as `==` requires."""
    fields = {"op": op, "args": args, "name": name, "value": value, "lo": lo, "hi": hi}
    for key, field in fields.items():
        object.__setattr__(node, key, field)
    digest = hash(value) if op == "const" else hash((op, args, name, lo, hi))
    object.__setattr__(node, "_hash", digest)
    object.__setattr__(node, "_interval", None)
    object.__setattr__(node, "_free_vars", None)


def _raw(
    op: str,
    args: tuple[Expr, ...] = (),
    name: str | None = None,
    value: int | None = None,
    lo: int | None = None,
    hi: int | None = None,
) -> Expr:
    """A node built as given, without validation or folding (internal fast path)."""
    node = object.__new__(Expr)
    _set_fields(node, op, args, name, value, lo, hi)
    return node


def _int_value(value: object) -> int:
    """`value` as a Python int when it is an int, bool or NumPy integer; TypeError otherwise."""
    if isinstance(value, (int, np.integer, np.bool_)):
        return int(value)
    raise TypeError(f"expected an integer, got {value!r} of type {type(value).__name__}")


def _check_var_fields(name: object, lo: object, hi: object) -> None:
    """Validate a variable's name (an ASCII identifier, printed as is in C) and its bounds."""
    if not isinstance(name, str):
        raise TypeError(
            f"a variable name must be a str, got {name!r} of type {type(name).__name__}"
        )
    if not (name.isascii() and name.isidentifier()):
        raise LayoutError(f"variable name {name!r} is not a C identifier")
    for side, bound in (("lo", lo), ("hi", hi)):
        if bound is not None and not isinstance(bound, (int, np.integer)):
            raise TypeError(f"bound {side}={bound!r} of variable {name!r} must be an int or None")
    if lo is not None and hi is not None and lo > hi:
        raise LayoutError(f"variable {name!r} has empty bounds: lo={lo} > hi={hi}")


def var(name: str, lo: int | None = None, hi: int | None = None) -> Expr:
    """A variable named `name` (a C identifier) with optional inclusive bounds `lo <= v <= hi`.

    The bounds are what interval analysis, `simplify` and `to_c` may assume; `evaluate` does not
    check them. Variables are identified by name: `substitute` and `evaluate` look names up.
    """
    _check_var_fields(name, lo, hi)
    return _raw(
        "var",
        name=name,
        lo=None if lo is None else int(lo),
        hi=None if hi is None else int(hi),
    )


def const(value: int) -> Expr:
    """The constant `value` (an int, bool or NumPy integer; anything else raises TypeError)."""
    return _raw("const", value=_int_value(value))


def as_expr(x: ExprLike) -> Expr:
    """`x` unchanged when it is an Expr, `const(x)` for an int or NumPy integer; else TypeError."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, (int, np.integer, np.bool_)):
        return _raw("const", value=int(x))
    raise TypeError(f"expected an int or an Expr, got {x!r} of type {type(x).__name__}")


def _operand(x: object) -> Expr | None:
    """`as_expr(x)` for an operator's other operand, None (so Python says NotImplemented) else."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, (int, np.integer, np.bool_)):
        return _raw("const", value=int(x))
    return None


_ZERO = _raw("const", value=0)
_ONE = _raw("const", value=1)


def _is_const(node: Expr, value: int | None = None) -> bool:
    """True when `node` is a constant (equal to `value` when one is given)."""
    return node.op == "const" and (value is None or node.value == value)


def _is_negation(node: Expr) -> bool:
    """True for `0 - x`, the form unary minus takes."""
    return node.op == "-" and _is_const(node.args[0], 0)


def _offset(base: Expr, amount: int) -> Expr:
    """`base + amount` with the constant on the right: `base - |amount|` when it is negative."""
    if amount == 0:
        return base
    if amount > 0:
        return _raw("+", (base, const(amount)))
    return _raw("-", (base, const(-amount)))


def _constant_offset(node: Expr) -> tuple[Expr, int] | None:
    """(base, k) when `node` is `base + k` or `base - k` with k constant (k negated for `-`)."""
    if node.op in ("+", "-") and _is_const(node.args[1]) and not _is_negation(node):
        sign = 1 if node.op == "+" else -1
        return node.args[0], sign * node.args[1].value
    return None


def _add(a: Expr, b: Expr) -> Expr:
    """`a + b`, folding constants, `x + 0`, `0 + x`, `(x + c1) + c2` and `a + (-x)`."""
    if a.op == "const" and b.op == "const":
        return const(a.value + b.value)
    if _is_const(a, 0):
        return b
    if b.op == "const":
        split = _constant_offset(a)
        if split is not None:
            return _offset(split[0], split[1] + b.value)
        return _offset(a, b.value)
    if _is_negation(b):
        return _sub(a, b.args[1])
    return _raw("+", (a, b))


def _sub(a: Expr, b: Expr) -> Expr:
    """`a - b`, folding constants, `x - 0`, `(x + c1) - c2`, `-(-x)` and `a - (-x)`."""
    if a.op == "const" and b.op == "const":
        return const(a.value - b.value)
    if b.op == "const":
        return _add(a, const(-b.value))
    if _is_negation(b):
        return b.args[1] if _is_const(a, 0) else _add(a, b.args[1])
    return _raw("-", (a, b))


def _mul(a: Expr, b: Expr) -> Expr:
    """`a * b`, folding constants, `x * 0`, `x * 1` (either side) and `(x * c1) * c2`."""
    if a.op == "const" and b.op == "const":
        return const(a.value * b.value)
    if _is_const(a, 0) or _is_const(b, 0):
        return _ZERO
    if _is_const(a, 1):
        return b
    if _is_const(b, 1):
        return a
    if b.op == "const" and a.op == "*" and _is_const(a.args[1]):
        return _mul(a.args[0], const(a.args[1].value * b.value))
    return _raw("*", (a, b))


def _floordiv(a: Expr, b: Expr) -> Expr:
    """`a // b`, folding constants (nonzero divisor), `x // 1` and `x // -1`."""
    if a.op == "const" and b.op == "const" and b.value != 0:
        return const(a.value // b.value)
    if _is_const(b, 1):
        return a
    if _is_const(b, -1):
        return _sub(_ZERO, a)
    return _raw("//", (a, b))


def _mod(a: Expr, b: Expr) -> Expr:
    """`a % b`, folding constants (nonzero divisor) and `x % 1`, `x % -1`."""
    if a.op == "const" and b.op == "const" and b.value != 0:
        return const(a.value % b.value)
    if _is_const(b, 1) or _is_const(b, -1):
        return _ZERO
    return _raw("%", (a, b))


def _min(a: Expr, b: Expr) -> Expr:
    """`min(a, b)`, folding constants and `min(x, x)`."""
    if a.op == "const" and b.op == "const":
        return const(min(a.value, b.value))
    if a == b:
        return a
    return _raw("min", (a, b))


def _max(a: Expr, b: Expr) -> Expr:
    """`max(a, b)`, folding constants and `max(x, x)`."""
    if a.op == "const" and b.op == "const":
        return const(max(a.value, b.value))
    if a == b:
        return a
    return _raw("max", (a, b))


def _bitand(a: Expr, b: Expr) -> Expr:
    """`a & b`, folding constants, `x & 0`, `0 & x` and `x & x`."""
    if a.op == "const" and b.op == "const":
        return const(a.value & b.value)
    if _is_const(a, 0) or _is_const(b, 0):
        return _ZERO
    if a == b:
        return a
    return _raw("&", (a, b))


def _bitor(a: Expr, b: Expr) -> Expr:
    """`a | b`, folding constants, `x | 0`, `0 | x` and `x | x`."""
    if a.op == "const" and b.op == "const":
        return const(a.value | b.value)
    if _is_const(b, 0) or a == b:
        return a
    if _is_const(a, 0):
        return b
    return _raw("|", (a, b))


def _bitxor(a: Expr, b: Expr) -> Expr:
    """`a ^ b`, folding constants, `x ^ 0`, `0 ^ x` and `x ^ x`."""
    if a.op == "const" and b.op == "const":
        return const(a.value ^ b.value)
    if _is_const(b, 0):
        return a
    if _is_const(a, 0):
        return b
    if a == b:
        return _ZERO
    return _raw("^", (a, b))


def _shift(op: str, a: Expr, b: Expr) -> Expr:
    """`a << b` or `a >> b`, folding constants (non-negative count), `x << 0`, `0 << x` and
    `(x << c1) << c2` into `x << (c1 + c2)` for non-negative constants c1, c2 (the same for >>)."""
    count = b.value if b.op == "const" else None
    if count is not None and count < 0:
        return _raw(op, (a, b))
    if a.op == "const" and count is not None:
        return const(a.value << count if op == "<<" else a.value >> count)
    if count == 0 or _is_const(a, 0):
        return a
    if count is not None and a.op == op and _is_const(a.args[1]) and a.args[1].value >= 0:
        return _raw(op, (a.args[0], const(a.args[1].value + count)))
    return _raw(op, (a, b))


def _lshift(a: Expr, b: Expr) -> Expr:
    """`a << b` (see `_shift`)."""
    return _shift("<<", a, b)


def _rshift(a: Expr, b: Expr) -> Expr:
    """`a >> b` (see `_shift`)."""
    return _shift(">>", a, b)


def _compare(op: str, a: Expr, b: Expr) -> Expr:
    """The comparison `a op b`, folded to the constant 0 or 1 when both sides are constants."""
    if a.op == "const" and b.op == "const":
        return const(int(_COMPARISONS[op](a.value, b.value)))
    return _raw(op, (a, b))


def _truth(node: Expr) -> Expr:
    """`node` as a truth value: itself when it is one already, else `node != 0`."""
    if node.is_boolean or (node.op == "const" and node.value in (0, 1)):
        return node
    return _compare("!=", node, _ZERO)


def _and(a: Expr, b: Expr) -> Expr:
    """`a && b`, folding a constant side."""
    if a.op == "const":
        return _truth(b) if a.value != 0 else _ZERO
    if b.op == "const":
        return _truth(a) if b.value != 0 else _ZERO
    return _raw("and", (a, b))


def _or(a: Expr, b: Expr) -> Expr:
    """`a || b`, folding a constant side."""
    if a.op == "const":
        return _ONE if a.value != 0 else _truth(b)
    if b.op == "const":
        return _ONE if b.value != 0 else _truth(a)
    return _raw("or", (a, b))


def _not(a: Expr) -> Expr:
    """`!a`, folding constants, double negation and negated comparisons."""
    if a.op == "const":
        return const(int(a.value == 0))
    if a.op == "not":
        return _truth(a.args[0])
    if a.op in _COMPARISONS:
        return _raw(_NEGATED_COMPARISON[a.op], a.args)
    return _raw("not", (a,))


def _select(cond: Expr, if_true: Expr, if_false: Expr) -> Expr:
    """`if_true if cond != 0 else if_false`, folding a constant condition and equal branches."""
    if cond.op == "const":
        return if_true if cond.value != 0 else if_false
    if if_true == if_false:
        return if_true
    return _raw("select", (cond, if_true, if_false))


_BUILDERS: dict[str, Callable[..., Expr]] = {
    "+": _add,
    "-": _sub,
    "*": _mul,
    "//": _floordiv,
    "%": _mod,
    "min": _min,
    "max": _max,
    "&": _bitand,
    "|": _bitor,
    "^": _bitxor,
    "<<": _lshift,
    ">>": _rshift,
    "and": _and,
    "or": _or,
    "not": _not,
    "select": _select,
}


def _build(op: str, args: tuple[Expr, ...]) -> Expr:
    """The folding constructor of `op` applied to `args`."""
    if op in _COMPARISONS:
        return _compare(op, *args)
    return _BUILDERS[op](*args)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    """`min(a, b)` as an expression."""
    return _min(as_expr(a), as_expr(b))


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    """`max(a, b)` as an expression."""
    return _max(as_expr(a), as_expr(b))


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


# ---------------------------------------------------------------------------------- structure


def _same_structure(a: Expr, b: Expr) -> bool:
    """Structural equality of two trees (identical operators, leaves and operands)."""
    if a is b:
        return True
    if a._hash != b._hash or a.op != b.op or len(a.args) != len(b.args):
        return False
    if (a.name, a.value, a.lo, a.hi) != (b.name, b.value, b.lo, b.hi):
        return False
    return all(_same_structure(x, y) for x, y in zip(a.args, b.args))


def _walk(root: Expr) -> Iterator[Expr]:
    """Every node of the tree once (shared subtrees once), parents before their operands."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(reversed(node.args))


# ---------------------------------------------------------------------------------- evaluation


def evaluate(expr: ExprLike, env: Mapping[str, Any]) -> Any:
    """The value of `expr` when each variable takes the value `env[name]`.

    `env` maps variable names to ints (Python, bool or NumPy scalars) or NumPy integer arrays.
    With ints only, the result is an exact Python int (a bool for a comparison or a logical
    operator), `//` and `%` follow Python's floor semantics, select, and and or read only the
    side they need, and a division by zero raises ZeroDivisionError; `& | ^ << >>` are Python's
    (two's complement on negative operands, `>>` rounding down) and a negative shift count raises
    LayoutError. When any value of `env` is an array, the result is an array of the broadcast
    shape of all arrays in `env`: int64 (bool for a comparison or a logical operator), with
    NumPy's floor semantics (the same as Python's), int64 wrap-around, both sides of select
    evaluated (`np.where`), and 0 where a divisor is 0; the bitwise operators are NumPy's, equal
    to Python's for non-negative operands, shift counts below 63 and results that fit in int64.
    Bounds of variables are not checked. A variable missing from `env` raises LayoutError
    naming it; a value of another type raises TypeError.
    """
    expr = as_expr(expr)
    missing = expr.free_vars() - env.keys()
    if missing:
        raise LayoutError(
            f"no value for variable(s) {sorted(missing)} of {expr!r}; "
            f"the environment binds {sorted(env)}"
        )
    arrays = [value for value in env.values() if isinstance(value, np.ndarray)]
    values = {name: _env_value(name, env[name], bool(arrays)) for name in expr.free_vars()}
    if not arrays:
        return _evaluate_ints(expr, values, {})
    shape = np.broadcast_shapes(*(array.shape for array in arrays))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        result = np.asarray(_evaluate_arrays(expr, values, {}))
    if result.dtype != np.bool_:
        result = result.astype(np.int64)
    return np.array(np.broadcast_to(result, shape))


def _env_value(name: str, value: object, array_mode: bool) -> Any:
    """The value bound to `name`, checked: a Python int, or an int64 array in array mode."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iub":
            raise TypeError(
                f"variable {name!r} is bound to an array of dtype {value.dtype}, expected integers"
            )
        return value.astype(np.int64)
    if isinstance(value, (int, np.integer, np.bool_)):
        return np.int64(value) if array_mode else int(value)
    raise TypeError(
        f"variable {name!r} is bound to {value!r} of type {type(value).__name__}, "
        "expected an int or a NumPy integer array"
    )


def _evaluate_ints(node: Expr, values: dict[str, int], memo: dict[int, Any]) -> Any:
    """Exact evaluation on Python ints, lazy in select, and and or."""
    key = id(node)
    if key in memo:
        return memo[key]
    op = node.op
    if op == "var":
        result = values[node.name]
    elif op == "const":
        result = node.value
    elif op == "select":
        cond = _evaluate_ints(node.args[0], values, memo)
        result = _evaluate_ints(node.args[1 if cond else 2], values, memo)
    elif op == "and":
        result = bool(_evaluate_ints(node.args[0], values, memo)) and bool(
            _evaluate_ints(node.args[1], values, memo)
        )
    elif op == "or":
        result = bool(_evaluate_ints(node.args[0], values, memo)) or bool(
            _evaluate_ints(node.args[1], values, memo)
        )
    elif op == "not":
        result = not _evaluate_ints(node.args[0], values, memo)
    else:
        a = _evaluate_ints(node.args[0], values, memo)
        b = _evaluate_ints(node.args[1], values, memo)
        if op in _COMPARISONS:
            result = _COMPARISONS[op](a, b)
        elif op in ("//", "%") and b == 0:
            raise ZeroDivisionError(f"division by zero in {node!r}")
        elif op in ("<<", ">>") and b < 0:
            raise LayoutError(f"negative shift count {b} in {node!r}; expected a count >= 0")
        else:
            result = int(_INT_ARITHMETIC[op](a, b))
    memo[key] = result
    return result


_INT_ARITHMETIC: dict[str, Callable[[int, int], int]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "//": operator.floordiv,
    "%": operator.mod,
    "min": min,
    "max": max,
    "&": operator.and_,
    "|": operator.or_,
    "^": operator.xor,
    "<<": operator.lshift,
    ">>": operator.rshift,
}

_ARRAY_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "//": np.floor_divide,
    "%": np.mod,
    "min": np.minimum,
    "max": np.maximum,
    "&": np.bitwise_and,
    "|": np.bitwise_or,
    "^": np.bitwise_xor,
    "<<": np.left_shift,
    ">>": np.right_shift,
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
    "==": np.equal,
    "!=": np.not_equal,
    "and": np.logical_and,
    "or": np.logical_or,
}


def _evaluate_arrays(node: Expr, values: dict[str, Any], memo: dict[int, Any]) -> Any:
    """Elementwise evaluation on int64 arrays (truth values as bool arrays)."""
    key = id(node)
    if key in memo:
        return memo[key]
    op = node.op
    if op == "var":
        result = values[node.name]
    elif op == "const":
        result = np.int64(node.value)
    else:
        args = [np.asarray(_evaluate_arrays(arg, values, memo)) for arg in node.args]
        args = [arg.astype(np.int64) if arg.dtype == np.bool_ else arg for arg in args]
        if op == "select":
            result = np.where(args[0] != 0, args[1], args[2])
        elif op == "not":
            result = np.logical_not(args[0])
        else:
            result = _ARRAY_ARITHMETIC[op](args[0], args[1])
    memo[key] = result
    return result


# ----------------------------------------------------------------------------- interval analysis

_Interval = tuple[int | float, int | float]
"""Inclusive bounds, ints or the float infinities for an unbounded side."""

_UNBOUNDED: _Interval = (-math.inf, math.inf)


def _interval_of(node: Expr) -> _Interval:
    """The node's interval, computed once and cached on the node."""
    if node._interval is None:
        object.__setattr__(node, "_interval", _interval(node))
    return node._interval


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


def _negate(interval: _Interval) -> _Interval:
    """The interval of `-x`."""
    return (-interval[1], -interval[0])


def _union(parts: list[_Interval]) -> _Interval:
    """The smallest interval holding every part; unbounded when there is none."""
    if not parts:
        return _UNBOUNDED
    return (min(part[0] for part in parts), max(part[1] for part in parts))


def _divisor_parts(divisor: _Interval) -> tuple[_Interval | None, _Interval | None]:
    """The positive and negative parts of a divisor interval (zero excluded), or None."""
    lo, hi = divisor
    positive = (max(lo, 1), hi) if hi >= 1 else None
    negative = (lo, min(hi, -1)) if lo <= -1 else None
    return positive, negative


def _floordiv_positive(a: _Interval, b: _Interval) -> _Interval:
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


def _mod_positive(a: _Interval, b: _Interval) -> _Interval:
    """Interval of a % b for b >= 1."""
    if a[0] >= 0 and a[1] < b[0]:
        return a
    top = _extended_add(b[1], -1)
    if a[0] >= 0:
        top = min(a[1], top)
    return 0, top


def _interval_floordiv(a: _Interval, b: _Interval) -> _Interval:
    """Interval of a // b over the nonzero divisors (a // b == (-a) // (-b))."""
    positive, negative = _divisor_parts(b)
    parts = []
    if positive is not None:
        parts.append(_floordiv_positive(a, positive))
    if negative is not None:
        parts.append(_floordiv_positive(_negate(a), _negate(negative)))
    return _union(parts)


def _interval_mod(a: _Interval, b: _Interval) -> _Interval:
    """Interval of a % b over the nonzero divisors (a % b == -((-a) % (-b)))."""
    positive, negative = _divisor_parts(b)
    parts = []
    if positive is not None:
        parts.append(_mod_positive(a, positive))
    if negative is not None:
        parts.append(_negate(_mod_positive(_negate(a), _negate(negative))))
    return _union(parts)


_BOUNDS_SHIFT_LIMIT = 1024
"""Interval analysis widens shift counts above this to infinity, so bounds stay small numbers."""


def _power_of_two_interval(count: _Interval) -> _Interval | None:
    """An interval holding 2**b for every non-negative b in `count`; None when there is none."""
    if count[1] < 0:
        return None
    low = min(max(count[0], 0), _BOUNDS_SHIFT_LIMIT)
    high = math.inf if count[1] > _BOUNDS_SHIFT_LIMIT else 1 << count[1]
    return 1 << low, high


def _interval_shift(op: str, a: _Interval, count: _Interval) -> _Interval:
    """Interval of a << b (a * 2**b) or a >> b (a // 2**b) over the non-negative counts b."""
    scale = _power_of_two_interval(count)
    if scale is None:
        return _UNBOUNDED
    if op == "<<":
        products = [_extended_mul(x, y) for x in a for y in scale]
        return min(products), max(products)
    return _floordiv_positive(a, scale)


def _twos_complement_range(a: _Interval, b: _Interval) -> _Interval:
    """[-2**n, 2**n - 1] for the least n holding both intervals; & | ^ of its values stay in it."""
    ends = (*a, *b)
    if any(isinstance(end, float) for end in ends):
        return _UNBOUNDED
    width = max((end if end >= 0 else ~end).bit_length() for end in ends)
    return -(1 << width), (1 << width) - 1


def _interval_bitwise(op: str, a: _Interval, b: _Interval) -> _Interval:
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


def _decide_comparison(op: str, a: _Interval, b: _Interval) -> bool | None:
    """The truth of `x op y` for every x in a and y in b, or None when it depends on them."""
    if op == "<":
        return True if a[1] < b[0] else False if a[0] >= b[1] else None
    if op == "<=":
        return True if a[1] <= b[0] else False if a[0] > b[1] else None
    if op == ">":
        return _decide_comparison("<", b, a)
    if op == ">=":
        return _decide_comparison("<=", b, a)
    equal = None
    if a[0] == a[1] == b[0] == b[1]:
        equal = True
    elif a[1] < b[0] or b[1] < a[0]:
        equal = False
    if equal is None or op == "==":
        return equal
    return not equal


def _decide_truth(interval: _Interval) -> bool | None:
    """True when every value of the interval is nonzero, False when it is {0}, else None."""
    if interval[0] > 0 or interval[1] < 0:
        return True
    if interval[0] == interval[1] == 0:
        return False
    return None


def _truth_interval(truth: bool | None) -> _Interval:
    """(1, 1), (0, 0) or (0, 1) for a known true, known false or unknown truth value."""
    if truth is None:
        return (0, 1)
    return (1, 1) if truth else (0, 0)


def _interval(node: Expr) -> _Interval:
    """Interval analysis of one node from its operands' cached intervals."""
    op = node.op
    if op == "const":
        return (node.value, node.value)
    if op == "var":
        return (
            -math.inf if node.lo is None else node.lo,
            math.inf if node.hi is None else node.hi,
        )
    args = [_interval_of(arg) for arg in node.args]
    if op == "not":
        truth = _decide_truth(args[0])
        return _truth_interval(None if truth is None else not truth)
    if op == "select":
        truth = _decide_truth(args[0])
        if truth is None:
            return _union([args[1], args[2]])
        return args[1] if truth else args[2]
    a, b = args
    if op == "+":
        return _extended_add(a[0], b[0]), _extended_add(a[1], b[1])
    if op == "-":
        return _extended_add(a[0], -b[1]), _extended_add(a[1], -b[0])
    if op == "*":
        products = [_extended_mul(x, y) for x in a for y in b]
        return min(products), max(products)
    if op == "//":
        return _interval_floordiv(a, b)
    if op == "%":
        return _interval_mod(a, b)
    if op in ("<<", ">>"):
        return _interval_shift(op, a, b)
    if op in ("&", "|", "^"):
        return _interval_bitwise(op, a, b)
    if op == "min":
        return min(a[0], b[0]), min(a[1], b[1])
    if op == "max":
        return max(a[0], b[0]), max(a[1], b[1])
    if op in _COMPARISONS:
        return _truth_interval(_decide_comparison(op, a, b))
    truths = (_decide_truth(a), _decide_truth(b))
    if op == "and":
        if False in truths:
            return _truth_interval(False)
        return _truth_interval(True if truths == (True, True) else None)
    if True in truths:
        return _truth_interval(True)
    return _truth_interval(False if truths == (False, False) else None)


# -------------------------------------------------------------------------------- simplification


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
    if node.op == "*" and _is_const(node.args[0]):
        return _linear(node.args[1]).scaled(node.args[0].value)
    if node.op == "*" and _is_const(node.args[1]):
        return _linear(node.args[0]).scaled(node.args[1].value)
    return _Linear({node: 1})


def _from_linear(linear: _Linear) -> Expr:
    """The expression of a linear combination: positive terms first, then negative, then k."""
    ordered = sorted(linear.terms.items(), key=lambda item: item[1] < 0)
    result: Expr | None = None
    for term, coefficient in ordered:
        magnitude = term if abs(coefficient) == 1 else _mul(term, const(abs(coefficient)))
        if result is None:
            result = magnitude if coefficient > 0 else _sub(_ZERO, magnitude)
        elif coefficient > 0:
            result = _add(result, magnitude)
        else:
            result = _sub(result, magnitude)
    if result is None:
        return const(linear.constant)
    return _offset(result, linear.constant)


def _recombine(linear: _Linear) -> _Linear:
    """Fold `(y // m) * m * c + (y % m) * c` back into `y * c` wherever both terms occur."""
    changed = True
    while changed:
        changed = False
        for term, coefficient in linear.terms.items():
            if term.op != "%" or not _is_const(term.args[1]) or term.args[1].value <= 0:
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
    lo, hi = rest.bounds()
    if lo is not None and hi is not None and lo // divisor == hi // divisor:
        part = const(lo // divisor)
    elif rest.op == "//" and _is_const(rest.args[1]) and rest.args[1].value > 0:
        part = _simplify_floordiv(rest.args[0], rest.args[1].value * divisor)
    else:
        part = _floordiv(rest, const(divisor))
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
        return _ZERO
    rest = _from_linear(remainder)
    lo, hi = rest.bounds()
    if lo is not None and hi is not None and lo // modulus == hi // modulus:
        part = _linear(rest).plus(_Linear(constant=-(lo // modulus) * modulus))
    elif (
        rest.op == "%"
        and _is_const(rest.args[1])
        and rest.args[1].value > 0
        and rest.args[1].value % modulus == 0
    ):
        part = _linear(_simplify_mod(rest.args[0], modulus))
    else:
        part = _Linear({_mod(rest, const(modulus)): 1})
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


def _simplify_bitwise(op: str, a: Expr, b: Expr) -> Expr | None:
    """`a & b`, `a | b` or `a ^ b` of simplified operands rewritten into arithmetic, or None.

    Where one side is a multiple of 2**k (by its linear form) and the other lies in [0, 2**k),
    they share no bit: `&` is 0, `|` and `^` are the sum. A contiguous mask c = (2**w - 1) * 2**s
    picks a field: `x & c` is `((x // 2**s) % 2**w) * 2**s`, rewritten only for x >= 0 (where
    the C text of the field stays a shift and a mask).
    """
    for x, y in ((a, b), (b, a)):
        k = _low_zero_bits(_linear(x))
        lo, hi = _interval_of(y)
        if k is not None and lo >= 0 and hi < 1 << k:
            return _ZERO if op == "&" else _from_linear(_recombine(_linear(x).plus(_linear(y))))
        if op == "&" and _is_const(y) and y.value > 0 and _interval_of(x)[0] >= 0:
            shift = (y.value & -y.value).bit_length() - 1
            width = (y.value >> shift).bit_length()
            if y.value >> shift == (1 << width) - 1:
                field = _simplify_mod(_simplify_floordiv(x, 1 << shift), 1 << width)
                return _from_linear(_recombine(_linear(field).scaled(1 << shift)))
    return None


def _simplify_node(node: Expr, memo: dict[int, Expr]) -> Expr:
    """One node's rewriting, its operands simplified first."""
    op = node.op
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
            product = _mul(single_a[0], single_b[0])
            return _from_linear(_Linear({product: single_a[1] * single_b[1]}))
        return _mul(*args)
    if op in ("//", "%") and _is_const(args[1]) and args[1].value > 0:
        if op == "//":
            return _simplify_floordiv(args[0], args[1].value)
        return _simplify_mod(args[0], args[1].value)
    if op in ("<<", ">>") and _is_const(args[1]) and 0 < args[1].value <= _LARGEST_SIMPLIFIED_SHIFT:
        scale = 1 << args[1].value
        if op == "<<":
            return _from_linear(_recombine(_linear(args[0]).scaled(scale)))
        if _interval_of(args[0])[0] >= 0:
            return _simplify_floordiv(args[0], scale)
    if op in ("&", "|", "^"):
        rewritten = _simplify_bitwise(op, args[0], args[1])
        if rewritten is not None:
            return rewritten
    if op in ("min", "max"):
        difference = _interval_of(_difference(args[0], args[1]))
        if difference[1] <= 0:
            return args[0] if op == "min" else args[1]
        if difference[0] >= 0:
            return args[1] if op == "min" else args[0]
    if op in _COMPARISONS:
        truth = _decide_comparison(op, _interval_of(_difference(args[0], args[1])), (0, 0))
        if truth is not None:
            return const(int(truth))
    if op == "select":
        truth = _decide_truth(_interval_of(args[0]))
        if truth is not None:
            return args[1] if truth else args[2]
    return _build(op, args)


def _simplify(node: Expr, memo: dict[int, Expr]) -> Expr:
    """Simplify one node (memoised), then replace it by a constant when its bounds pin it."""
    if not node.args:
        return node
    done = memo.get(id(node))
    if done is None:
        done = _simplify_node(node, memo)
        lo, hi = done.bounds()
        if done.op != "const" and lo is not None and lo == hi:
            done = const(lo)
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
    and b lies in [0, 2**k); other bitwise nodes stay, their operands simplified; any node whose
    bounds are a single value becomes that constant. Where the original divides by zero the
    result may have a value.
    """
    return _simplify(as_expr(expr), {})


# ------------------------------------------------------------------------------- known divisors


def _two_power(divisor: int) -> int:
    """The largest power of two dividing a positive `divisor`."""
    return divisor & -divisor


def _divisor(node: Expr, memo: dict[int, int]) -> int:
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


# ------------------------------------------------------------------------------- printing: C

# Operator precedences of the C and Python printers; a higher number binds tighter.
_ATOM = 100
_UNARY = 90
_MUL = 80
_ADD = 70
_SHIFT = 60
_REL = 50
_EQ = 40
_AND = 20
_OR = 10
_BITWISE = 5
"""C's `&`, `^`, `|` bind between `==` and `&&`, below the comparisons; printed with this lowest
precedence, they are parenthesised wherever they are an operand, so no reader has to recall it."""
_C_OPERATORS = {"+": "+", "-": "-", "*": "*", "and": "&&", "or": "||"}
_C_PRECEDENCE = {"+": _ADD, "-": _ADD, "*": _MUL, "and": _AND, "or": _OR}

_Printed = tuple[str, int, str]
"""Text, the precedence of its outermost operator, and that operator (empty for an atom)."""


def _wrap(printed: _Printed, needs_parentheses: bool) -> str:
    """The text, in parentheses when asked."""
    return f"({printed[0]})" if needs_parentheses else printed[0]


def _left(printed: _Printed, precedence: int, operator_text: str) -> str:
    """A left operand: parenthesised below the parent's precedence, or when a different
    operator of the same multiplicative precedence (so `(a / b) * c` reads unambiguously)."""
    text, inner, inner_operator = printed
    mixed = inner == precedence == _MUL and inner_operator != operator_text
    return _wrap(printed, inner < precedence or mixed)


def _right(printed: _Printed, precedence: int) -> str:
    """A right operand: parenthesised at or below the parent's precedence, and when unary."""
    return _wrap(printed, printed[1] <= precedence or printed[1] == _UNARY)


def _power_of_two(value: int) -> int | None:
    """k when value == 2**k (value >= 2), else None."""
    if value >= 2 and value & (value - 1) == 0:
        return value.bit_length() - 1
    return None


def _c_division(node: Expr, a: _Printed, b: _Printed) -> _Printed:
    """`//` or `%` in C with Python's floor semantics, plain where the bounds allow it."""
    dividend, divisor = _interval_of(node.args[0]), _interval_of(node.args[1])
    is_floordiv = node.op == "//"
    c_operator = "/" if is_floordiv else "%"
    if dividend[0] >= 0 and divisor[0] >= 1:
        shift = _power_of_two(node.args[1].value) if _is_const(node.args[1]) else None
        if shift is not None and is_floordiv:
            return f"{_wrap(a, a[1] != _ATOM)} >> {shift}", _SHIFT, ">>"
        if shift is not None:
            return f"{_wrap(a, a[1] != _ATOM)} & {node.args[1].value - 1}", _BITWISE, "&"
        return f"{_left(a, _MUL, c_operator)} {c_operator} {_right(b, _MUL)}", _MUL, c_operator
    x = _wrap(a, a[1] < _UNARY)
    y = _wrap(b, b[1] != _ATOM)
    floor_mod = f"({x} % {y} + {y}) % {y}"
    if not is_floordiv:
        return floor_mod, _MUL, "%"
    if divisor[0] >= 1:
        return f"{x} / {y} - ({x} % {y} < 0)", _ADD, "-"
    if divisor[1] <= -1:
        return f"{x} / {y} - ({x} % {y} > 0)", _ADD, "-"
    return f"({x} - {floor_mod}) / {y}", _MUL, "/"


def _to_c(node: Expr, memo: dict[int, _Printed]) -> _Printed:
    """C text of a node (memoised per node)."""
    done = memo.get(id(node))
    if done is not None:
        return done
    op = node.op
    args = [_to_c(arg, memo) for arg in node.args]
    if op == "var":
        result = (node.name, _ATOM, "")
    elif op == "const":
        result = (str(node.value), _ATOM if node.value >= 0 else _UNARY, "")
    elif _is_negation(node):
        result = (f"-{_wrap(args[1], args[1][1] != _ATOM)}", _UNARY, "-")
    elif op == "not":
        result = (f"!{_wrap(args[0], args[0][1] != _ATOM)}", _UNARY, "!")
    elif op in ("//", "%"):
        result = _c_division(node, args[0], args[1])
    elif op in ("min", "max"):
        x, y = (_wrap(arg, arg[1] <= _REL) for arg in args)
        relation = "<" if op == "min" else ">"
        result = (f"({x} {relation} {y} ? {x} : {y})", _ATOM, "")
    elif op == "select":
        cond, x, y = (_wrap(arg, arg[1] <= _OR) for arg in args)
        result = (f"({cond} ? {x} : {y})", _ATOM, "")
    elif op in _COMPARISONS:
        precedence = _REL if op in ("<", "<=", ">", ">=") else _EQ
        x, y = (_wrap(arg, arg[1] <= _REL) for arg in args)
        result = (f"{x} {op} {y}", precedence, op)
    elif op in ("and", "or"):
        x, y = (_wrap(arg, arg[1] <= _AND) for arg in args)
        result = (f"{x} {_C_OPERATORS[op]} {y}", _C_PRECEDENCE[op], _C_OPERATORS[op])
    elif op in ("&", "|", "^", "<<", ">>"):
        x, y = (_wrap(arg, arg[1] != _ATOM) for arg in args)
        precedence = _SHIFT if op in ("<<", ">>") else _BITWISE
        result = (f"{x} {op} {y}", precedence, op)
    else:
        precedence, text = _C_PRECEDENCE[op], _C_OPERATORS[op]
        x, y = _left(args[0], precedence, text), _right(args[1], precedence)
        result = (f"{x} {text} {y}", precedence, text)
    memo[id(node)] = result
    return result


# -------------------------------------------------------------------------- printing: Python

_PY_CMP = 50
_PY_PRECEDENCE = {
    "+": _ADD,
    "-": _ADD,
    "*": _MUL,
    "//": _MUL,
    "%": _MUL,
    "<<": _SHIFT,
    ">>": _SHIFT,
    "&": 58,
    "^": 56,
    "|": 54,
}
"""Python's binary operators; unlike C's, `&`, `^`, `|` bind tighter than the comparisons."""
_PY_FUNCTIONS = {
    "min": "minimum",
    "max": "maximum",
    "select": "select",
    "and": "logical_and",
    "or": "logical_or",
    "not": "logical_not",
}


def _to_python(node: Expr, memo: dict[int, _Printed]) -> _Printed:
    """Python-like text of a node (memoised per node) that rebuilds it from this module's names."""
    done = memo.get(id(node))
    if done is not None:
        return done
    op = node.op
    args = [_to_python(arg, memo) for arg in node.args]
    if op == "var":
        result = (node.name, _ATOM, "")
    elif op == "const":
        result = (str(node.value), _ATOM if node.value >= 0 else _UNARY, "")
    elif _is_negation(node):
        result = (f"-{_wrap(args[1], args[1][1] < _ATOM)}", _UNARY, "-")
    elif op in _PY_FUNCTIONS:
        result = (f"{_PY_FUNCTIONS[op]}({', '.join(arg[0] for arg in args)})", _ATOM, "")
    elif op in ("==", "!="):
        left = node.args[0]
        if left.op == "const":
            receiver = f"const({left.value})"
        else:
            receiver = _wrap(args[0], args[0][1] != _ATOM)
        method = "eq" if op == "==" else "ne"
        result = (f"{receiver}.{method}({args[1][0]})", _ATOM, "")
    elif op in _COMPARISONS:
        # A constant on the left is spelled const(c): Python would reflect `c < x` to `x > c`.
        left = node.args[0]
        x = f"const({left.value})" if left.op == "const" else _wrap(args[0], args[0][1] <= _PY_CMP)
        y = _wrap(args[1], args[1][1] <= _PY_CMP)
        result = (f"{x} {op} {y}", _PY_CMP, op)
    else:
        precedence = _PY_PRECEDENCE[op]
        x, y = _left(args[0], precedence, op), _right(args[1], precedence)
        if all(arg.op == "const" for arg in node.args):
            # Only a division by the constant 0 stays unfolded; Python ints would raise at once.
            x = f"const({node.args[0].value})"
        result = (f"{x} {op} {y}", precedence, op)
    memo[id(node)] = result
    return result


# --------------------------------------------------------------------------- printing: sympy

_SYMPY_BITWISE: dict[str, tuple[str, Callable[[int, int], int], str]] = {
    "&": ("bitwise_and", operator.and_, r"\mathbin{\&}"),
    "|": ("bitwise_or", operator.or_, r"\mathbin{|}"),
    "^": ("bitwise_xor", operator.xor, r"\oplus"),
}
"""Per bitwise operator: the sympy function's name, its value on two ints, its LaTeX symbol."""


@functools.cache
def _sympy_bitwise(op: str) -> Any:
    """The sympy function class of `&`, `|` or `^` (one class per operator, made on first use)."""
    import sympy

    name, function, symbol = _SYMPY_BITWISE[op]

    def evaluate_integers(cls: Any, a: Any, b: Any) -> Any:
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(function(int(a), int(b)))
        return None

    def latex(self: Any, printer: Any) -> str:
        x, y = (printer._print(arg) for arg in self.args)
        return rf"\left({x} {symbol} {y}\right)"

    namespace = {"nargs": 2, "eval": classmethod(evaluate_integers), "_latex": latex}
    return type(name, (sympy.Function,), namespace)


def _to_sympy(node: Expr, as_truth: bool, memo: dict[tuple[int, bool], Any]) -> Any:
    """The sympy form of a node: a Boolean when `as_truth`, else a number."""
    import sympy

    key = (id(node), as_truth)
    if key in memo:
        return memo[key]
    op = node.op
    if op in _BOOLEAN_OPS:
        if op in _COMPARISONS:
            relation = {
                "<": sympy.Lt,
                "<=": sympy.Le,
                ">": sympy.Gt,
                ">=": sympy.Ge,
                "==": sympy.Eq,
                "!=": sympy.Ne,
            }[op]
            truth = relation(*(_to_sympy(arg, False, memo) for arg in node.args))
        else:
            logic = {"and": sympy.And, "or": sympy.Or, "not": sympy.Not}[op]
            truth = logic(*(_to_sympy(arg, True, memo) for arg in node.args))
        result = truth if as_truth else sympy.Piecewise((1, truth), (0, True))
    else:
        if op == "var":
            assumptions = {"integer": True}
            if node.lo is not None and node.lo >= 0:
                assumptions["nonnegative"] = True
            number = sympy.Symbol(node.name, **assumptions)
        elif op == "const":
            number = sympy.Integer(node.value)
        elif op == "select":
            cond = _to_sympy(node.args[0], True, memo)
            x, y = (_to_sympy(arg, False, memo) for arg in node.args[1:])
            number = sympy.Piecewise((x, cond), (y, True))
        else:
            x, y = (_to_sympy(arg, False, memo) for arg in node.args)
            number = {
                "+": lambda: x + y,
                "-": lambda: x - y,
                "*": lambda: x * y,
                "//": lambda: sympy.floor(x / y),
                "%": lambda: sympy.Mod(x, y),
                "min": lambda: sympy.Min(x, y),
                "max": lambda: sympy.Max(x, y),
                "<<": lambda: x * 2**y,
                ">>": lambda: sympy.floor(x / 2**y),
                "&": lambda: _sympy_bitwise("&")(x, y),
                "|": lambda: _sympy_bitwise("|")(x, y),
                "^": lambda: _sympy_bitwise("^")(x, y),
            }[op]()
        result = sympy.Ne(number, 0) if as_truth else number
    memo[key] = result
    return result

"""The expression node `Expr` and its leaves: variables (`var`) and constants (`const`, `as_expr`).

An `Expr` is immutable, compares and hashes by structure, and carries the methods of every facet:
Python's operators and `substitute` build through the folding constructors (`folding.py`),
`evaluate` evaluates (`evaluation.py`), `bounds` bounds (`bounds.py`), and `to_c`, `to_sympy` and
`repr` print (`printing.py`). Those modules build on this one, so the methods import them when
called (the folding constructors once, through `_fold`); at import, this module reads only the
operator records (`operators.py`). `Expr.nodes()` is the package's one walk over a tree.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from layout_algebra.errors import LayoutError
from layout_algebra.symbolic.operators import OPERATORS


@functools.cache
def _fold(op: str) -> Callable[..., Expr]:
    """The folding constructor of `op` (from `folding.py`, which builds on this module and is
    therefore imported at the first call)."""
    from layout_algebra.symbolic.folding import FOLDS

    return FOLDS[op]


def _operator_method(symbol: str, reflected: bool = False) -> Callable[[Expr, object], Expr]:
    """Python's operator for `symbol` as an `Expr` method: `self op other`, or `other op self`
    when `reflected`. The other operand may be an Expr, an int or a NumPy integer; anything else
    gives NotImplemented, so that Python tries the other operand's method."""

    def method(self: Expr, other: object) -> Expr:
        operand = _operand(other)
        if operand is None:
            return NotImplemented
        return _fold(symbol)(operand, self) if reflected else _fold(symbol)(self, operand)

    return method


def _operator_methods(symbol: str) -> tuple[Callable[[Expr, object], Expr], ...]:
    """The method of Python's operator for `symbol` and its reflected method."""
    return _operator_method(symbol), _operator_method(symbol, reflected=True)


class Expr:
    """An immutable symbolic integer expression node.

    Fields: `op` (a key of `OPERATORS`), `args` (the operand nodes; empty for leaves; `select`'s
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
        record = OPERATORS.get(op)
        if record is None:
            raise LayoutError(
                f"unknown expression operator {op!r}; expected one of {sorted(OPERATORS)}"
            )
        args = tuple(args)
        for arg in args:
            if not isinstance(arg, Expr):
                raise TypeError(
                    f"operand {arg!r} of {op!r} is a {type(arg).__name__}, expected an Expr"
                )
        if len(args) != record.arity:
            raise LayoutError(f"operator {op!r} takes {record.arity} operands, got {len(args)}")
        if op == "var":
            _check_var_fields(name, lo, hi)
            if value is not None:
                raise LayoutError(f"variable {name!r} cannot have a value, got {value!r}")
            lo, hi = _optional_int(lo), _optional_int(hi)
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
        return _node, (self.op, self.args, self.name, self.value, self.lo, self.hi)

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
        return OPERATORS[self.op].is_boolean

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

    __add__, __radd__ = _operator_methods("+")
    __sub__, __rsub__ = _operator_methods("-")
    __mul__, __rmul__ = _operator_methods("*")
    __floordiv__, __rfloordiv__ = _operator_methods("//")
    __mod__, __rmod__ = _operator_methods("%")
    __and__, __rand__ = _operator_methods("&")
    __or__, __ror__ = _operator_methods("|")
    __xor__, __rxor__ = _operator_methods("^")
    __lshift__, __rlshift__ = _operator_methods("<<")
    __rshift__, __rrshift__ = _operator_methods(">>")
    # Python reflects `c < x` to `x > c` itself, so comparisons need no reflected method.
    __lt__ = _operator_method("<")
    __le__ = _operator_method("<=")
    __gt__ = _operator_method(">")
    __ge__ = _operator_method(">=")

    def __truediv__(self, other: object) -> Expr:
        raise TypeError(
            f"symbolic integers have floor division only: use `//`, not `/`, on {self!r}"
        )

    __rtruediv__ = __truediv__

    def __neg__(self) -> Expr:
        return _fold("-")(ZERO, self)

    def __pos__(self) -> Expr:
        return self

    def eq(self, other: ExprLike) -> Expr:
        """The truth value `self == other` as an expression (1 or 0 once evaluated)."""
        return _fold("==")(self, as_expr(other))

    def ne(self, other: ExprLike) -> Expr:
        """The truth value `self != other` as an expression (1 or 0 once evaluated)."""
        return _fold("!=")(self, as_expr(other))

    # ----------------------------------------------------------------------------------- analysis

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        """`evaluate(self, env)`: the value under `env` (see `layout_algebra.symbolic.evaluate`)."""
        from layout_algebra.symbolic.evaluation import evaluate

        return evaluate(self, env)

    def free_vars(self) -> frozenset[str]:
        """The names of the variables the expression reads."""
        if self._free_vars is None:
            names = frozenset(node.name for node in self.nodes() if node.op == "var")
            object.__setattr__(self, "_free_vars", names)
        return self._free_vars

    def nodes(self) -> Iterator[Expr]:
        """Every node of the tree once (a shared subtree once), parents before their operands,
        operands left to right."""
        seen: set[int] = set()
        stack = [self]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            yield node
            stack.extend(reversed(node.args))

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
                done = node if unchanged else _fold(node.op)(*args)
                memo[id(node)] = done
            return done

        return rebuild(self)

    def bounds(self) -> tuple[int | None, int | None]:
        """Inclusive bounds (lo, hi) of the value by interval analysis; None for an unbounded side.

        Variables contribute their declared bounds. The bounds are sound for every evaluation on
        ints in which each variable lies within its bounds, no division by zero happens and no
        shift count is negative; they need not be tight. Truth values have bounds within (0, 1).
        """
        from layout_algebra.symbolic.bounds import bounds

        return bounds(self)

    # ----------------------------------------------------------------------------------- printing

    def to_c(self) -> str:
        """The expression as C source text with the same value as `evaluate` on ints.

        Variables print as their names. `//` and `%` print as C's `/` and `%` only where interval
        analysis proves the dividend non-negative and the divisor positive (a constant power of
        two divisor then prints as a shift or a mask); elsewhere they print as a guarded pure
        expression with Python's floor semantics, e.g. `x // 4` with `x` of unknown sign is
        `x / 4 - (x % 4 < 0)`. min and max print as `(a < b ? a : b)`, or, where the operands'
        text is long, as CUDA's functions `min(a, b)` and `max(a, b)` (overloaded per integer
        type, so both operands must have one; the conditional would name each twice, and
        nested clamps would double the text at each level), select as `?:`,
        logical operators as `&&`, `||`, `!`, comparisons as C comparisons (which give 0 or 1).
        `& | ^ << >>` print as themselves, with every operand that is not a name or a
        non-negative constant in parentheses, and `&`, `^`, `|` in parentheses wherever they are
        an operand (C ranks them below the comparisons); they mean what `evaluate` computes for
        non-negative operands and shift counts below the width of the C type. The text assumes
        no arithmetic overflow in the C type of the variables; a shift's type is that of its left
        operand, so a constant shifted left, as in `1 << n`, is a C `int`.
        """
        from layout_algebra.symbolic.printing import to_c

        return to_c(self)

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
        from layout_algebra.symbolic.printing import to_sympy

        return to_sympy(self)

    def _repr_latex_(self) -> str:
        from layout_algebra.symbolic.printing import to_latex

        return to_latex(self)

    def __repr__(self) -> str:
        from layout_algebra.symbolic.printing import to_python

        return to_python(self)

    __str__ = __repr__


ExprLike = Expr | int | np.integer
"""What every function of this package accepts where an integer expression is expected."""


# ------------------------------------------------------------------------------------- leaves


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
    _SET_OP(node, op)
    _SET_ARGS(node, args)
    _SET_NAME(node, name)
    _SET_VALUE(node, value)
    _SET_LO(node, lo)
    _SET_HI(node, hi)
    _SET_HASH(node, hash(value) if op == "const" else hash((op, args, name, lo, hi)))
    _SET_INTERVAL(node, None)
    _SET_FREE_VARS(node, None)


# The slots' own setters: they fill a node without `Expr.__setattr__`, which refuses (nodes are
# immutable once built), and faster than ``object.__setattr__`` by name (a lowering builds
# hundreds of thousands of nodes).
(
    _SET_OP,
    _SET_ARGS,
    _SET_NAME,
    _SET_VALUE,
    _SET_LO,
    _SET_HI,
    _SET_HASH,
    _SET_INTERVAL,
    _SET_FREE_VARS,
) = (vars(Expr)[slot].__set__ for slot in Expr.__slots__)


def raw_node(op: str, args: tuple[Expr, ...]) -> Expr:
    """An operator node built as given, without validation or folding (the package's fast path)."""
    node = object.__new__(Expr)
    _set_fields(node, op, args, None, None, None, None)
    return node


def _node(*fields: Any) -> Expr:
    """A node from its fields (op, args, name, value, lo, hi) as given: leaves, and unpickling."""
    node = object.__new__(Expr)
    _set_fields(node, *fields)
    return node


def _constant(value: int) -> Expr:
    """The constant leaf of a Python int."""
    return _node("const", (), None, value, None, None)


def _int_value(value: object) -> int:
    """`value` as a Python int when it is an int, bool or NumPy integer; TypeError otherwise."""
    if isinstance(value, (int, np.integer, np.bool_)):
        return int(value)
    raise TypeError(f"expected an integer, got {value!r} of type {type(value).__name__}")


def _optional_int(bound: int | None) -> int | None:
    """A variable's bound as a Python int, or None (unbounded)."""
    return None if bound is None else int(bound)


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
    return _node("var", (), name, None, _optional_int(lo), _optional_int(hi))


def const(value: int) -> Expr:
    """The constant `value` (an int, bool or NumPy integer; anything else raises TypeError)."""
    return _constant(_int_value(value))


def as_expr(x: ExprLike) -> Expr:
    """`x` unchanged when it is an Expr, `const(x)` for an int or NumPy integer; else TypeError."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, (int, np.integer, np.bool_)):
        return _constant(int(x))
    raise TypeError(f"expected an int or an Expr, got {x!r} of type {type(x).__name__}")


def _operand(x: object) -> Expr | None:
    """`as_expr(x)` for an operator's other operand, None (so Python says NotImplemented) else."""
    if isinstance(x, Expr):
        return x
    return as_expr(x) if isinstance(x, (int, np.integer, np.bool_)) else None


ZERO = _constant(0)
"""The constant 0 that folding returns (one shared node)."""
ONE = _constant(1)
"""The constant 1 that folding returns (one shared node)."""


# ---------------------------------------------------------------------------------- structure


def is_constant(node: Expr, value: int | None = None) -> bool:
    """True when `node` is a constant (equal to `value` when one is given)."""
    return node.op == "const" and (value is None or node.value == value)


def is_negation(node: Expr) -> bool:
    """True for `0 - x`, the form unary minus takes."""
    return node.op == "-" and is_constant(node.args[0], 0)


def _same_structure(a: Expr, b: Expr) -> bool:
    """Structural equality of two trees (identical operators, leaves and operands)."""
    if a is b:
        return True
    if a._hash != b._hash or a.op != b.op or len(a.args) != len(b.args):
        return False
    if (a.name, a.value, a.lo, a.hi) != (b.name, b.value, b.lo, b.hi):
        return False
    return all(_same_structure(x, y) for x, y in zip(a.args, b.args))

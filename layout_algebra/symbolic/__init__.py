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

Each operator has one record, `OPERATORS[op]` (an `Operator`): its arity and kind, its value on
ints and on NumPy arrays, and its spellings in C, in Python and in sympy.

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
translates trees to Z3 by walking `op`, `args`, `name`, `value`, `lo` and `hi` (`Expr.nodes()`
visits every node once, parents first).

The package, one facet per module (each imports only those above it in this list; the methods of
`Expr` that hand over to a facet import its module inside the method):

    operators.py       the `Operator` records and the table `OPERATORS`
    expr.py            the node `Expr`, its leaves (`var`, `const`, `as_expr`), `nodes()`
    folding.py         the folding constructors (`minimum`, `maximum`, `select`, `logical_*`)
    evaluation.py      `evaluate` on ints and NumPy arrays
    bounds.py          interval analysis (`Expr.bounds()`)
    simplification.py  `simplify`
    divisors.py        `known_divisor`
    printing.py        C text, `repr`, sympy and LaTeX

This module only re-exports the public names.
"""

from layout_algebra.symbolic.divisors import known_divisor
from layout_algebra.symbolic.evaluation import evaluate
from layout_algebra.symbolic.expr import Expr, ExprLike, as_expr, const, var
from layout_algebra.symbolic.folding import (
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    select,
)
from layout_algebra.symbolic.operators import OPERATORS, Operator
from layout_algebra.symbolic.simplification import simplify

__all__ = [
    # operators.py
    "OPERATORS",
    "Operator",
    # expr.py
    "Expr",
    "ExprLike",
    "var",
    "const",
    "as_expr",
    # folding.py
    "minimum",
    "maximum",
    "select",
    "logical_and",
    "logical_or",
    "logical_not",
    # evaluation.py, simplification.py, divisors.py
    "evaluate",
    "simplify",
    "known_divisor",
]

"""Evaluation of expressions on Python ints (exact) and on NumPy integer arrays (elementwise).

Both evaluators apply each operator's function from its `Operator` record (`integer` on ints,
`array` on arrays); on ints, `select`, `and` and `or` read only the operands they need, as C does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from layout_algebra.errors import LayoutError
from layout_algebra.symbolic.expr import Expr, ExprLike, as_expr
from layout_algebra.symbolic.operators import OPERATORS


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
    elif op in ("and", "or"):
        # C's && and ||: the left side decides when it is false for `and`, true for `or`.
        left = bool(_evaluate_ints(node.args[0], values, memo))
        if left == (op == "or"):
            result = left
        else:
            result = bool(_evaluate_ints(node.args[1], values, memo))
    else:
        record = OPERATORS[op]
        operands = [_evaluate_ints(arg, values, memo) for arg in node.args]
        if record.kind == "division" and operands[1] == 0:
            raise ZeroDivisionError(f"division by zero in {node!r}")
        if record.kind == "shift" and operands[1] < 0:
            raise LayoutError(
                f"negative shift count {operands[1]} in {node!r}; expected a count >= 0"
            )
        result = record.integer(*operands)
        if not record.is_boolean:
            result = int(result)
    memo[key] = result
    return result


def _evaluate_arrays(node: Expr, values: dict[str, Any], memo: dict[int, Any]) -> Any:
    """Elementwise evaluation on int64 arrays (truth values as bool arrays)."""
    done = memo.get(id(node))
    if done is not None:
        return done
    if not node.args:
        result = values[node.name] if node.op == "var" else np.int64(node.value)
    else:
        # Truth values take part in arithmetic as the ints 0 and 1.
        args = [np.asarray(_evaluate_arrays(arg, values, memo)) for arg in node.args]
        args = [arg.astype(np.int64) if arg.dtype == np.bool_ else arg for arg in args]
        result = OPERATORS[node.op].array(*args)
    memo[id(node)] = result
    return result

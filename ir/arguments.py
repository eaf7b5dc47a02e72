"""The one argument binder and grid check that the interpreter and the kernel launch share.

A program (or kernel) takes its arguments positionally in parameter order, by name, or both;
`bind_arguments` matches them to the parameter names and refuses too many, unknown, repeated or
missing ones. A grid is a positive int or 1 to 3 positive ints within the hardware's limits
(`MAX_GRID`: x < 2^31, y and z < 2^16), which `check_grid` pads to (x, y, z). A program may
declare its grid (`ir.Program.grid`, expressions over its int parameters): `launch_grid` then
computes it from the int arguments when none is given, and refuses a given grid that differs.
All raise the caller's own error type (`ir.InterpreterError` for `run_reference`,
`backend.LaunchError` for a kernel call), so each side keeps its exception while the rules live
here once.

    bind_arguments("vector_add", ["n", "x"], (4,), {"x": x}, InterpreterError)  # {"n": 4, "x": x}
    check_grid((8, 2), InterpreterError)                                         # (8, 2, 1)
    launch_grid("f", None, (n // 256, const(1), const(1)), {"n": 1024}, LaunchError)  # (4, 1, 1)
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence

import numpy as np

from layout_algebra.symbolic import Expr, evaluate

MAX_GRID = (2**31 - 1, 2**16 - 1, 2**16 - 1)
"""The largest grid the hardware launches: x, y and z block counts."""


def bind_arguments(
    callee: str,
    names: Sequence[str],
    args: Sequence[object],
    kwargs: Mapping[str, object],
    error: type[Exception],
) -> dict[str, object]:
    """Map each of `names` (the parameters of `callee`, in order) to its argument.

    Raises `error` naming `callee` for more positional arguments than parameters, an unknown
    name, an argument given both by position and by name, or a missing argument.
    """
    if len(args) > len(names):
        raise error(
            f"{callee} takes {len(names)} arguments ({', '.join(names)}); got {len(args)} "
            "positional arguments"
        )
    bound = dict(zip(names, args))
    for name, value in kwargs.items():
        if name not in names:
            raise error(
                f"{callee} has no parameter {name!r}; its parameters are {', '.join(names)}"
            )
        if name in bound:
            raise error(f"{callee}: argument {name!r} given both by position and by name")
        bound[name] = value
    missing = [name for name in names if name not in bound]
    if missing:
        raise error(f"{callee}: missing arguments {', '.join(missing)}")
    return bound


def check_grid(grid: object, error: type[Exception]) -> tuple[int, int, int]:
    """`grid` as (x, y, z): a positive int is (grid, 1, 1); a tuple or list of 1 to 3 positive
    ints is padded with 1s. Raises `error` for anything else or a dimension past `MAX_GRID`."""
    expected = (
        "expected a positive int or a tuple of 1 to 3 positive ints "
        f"(x <= {MAX_GRID[0]}, y and z <= {MAX_GRID[1]})"
    )
    dimensions = grid if isinstance(grid, tuple | list) else (grid,)
    if not 1 <= len(dimensions) <= 3:
        raise error(f"grid {grid!r} has {len(dimensions)} dimensions; {expected}")
    sizes = []
    for axis, (value, limit) in enumerate(zip(dimensions, MAX_GRID)):
        if isinstance(value, bool | np.bool_):
            raise error(f"grid {grid!r}: dimension {axis} is a bool; {expected}")
        try:
            size = operator.index(value)
        except TypeError:
            raise error(f"grid {grid!r}: dimension {axis} is not an integer; {expected}") from None
        if not 1 <= size <= limit:
            raise error(f"grid {grid!r}: dimension {axis} is {size}; {expected}")
        sizes.append(size)
    padded = (*sizes, 1, 1)
    return padded[0], padded[1], padded[2]


def grid_text(grid: Sequence[Expr | int]) -> str:
    """A declared grid as text, e.g. ``(n // 256, (m + 15) // 16, 8)``."""
    return "(" + ", ".join(repr(extent) for extent in grid) + ")"


def launch_grid(
    callee: str,
    grid: object,
    declared: Sequence[Expr] | None,
    ints: Mapping[str, int],
    error: type[Exception],
) -> tuple[int, int, int]:
    """The (x, y, z) grid `callee` is launched on, given `grid` (None: not given) and the grid
    it declares (`declared`, expressions over the int arguments `ints`; None: not declared).

    Without a declared grid, `grid` is required and checked (`check_grid`). With one, the
    declared extents are evaluated on `ints`, and `grid` may be omitted or must equal them.
    Raises `error` naming the given and the declared grid for a mismatch, naming the declared
    grid and the int arguments for an extent below 1 or past `MAX_GRID` (or one that divides by
    zero), and for a missing grid where none is declared.
    """
    if declared is None:
        if grid is None:
            raise error(f"{callee} declares no grid; give the grid to launch on: grid=...")
        return check_grid(grid, error)
    arguments = ", ".join(f"{name}={value}" for name, value in ints.items())
    where = f"with {arguments}" if arguments else "without int arguments"
    try:
        values = tuple(int(evaluate(extent, ints)) for extent in declared)
    except ZeroDivisionError:
        raise error(
            f"{callee} declares the grid {grid_text(declared)}, which divides by zero {where}"
        ) from None
    for axis, (value, limit) in enumerate(zip(values, MAX_GRID)):
        if not 1 <= value <= limit:
            raise error(
                f"{callee} declares the grid {grid_text(declared)}, which is {values} {where}: "
                f"dimension {axis} is {value}, expected 1 <= extent <= {limit}"
            )
    expected = (values[0], values[1], values[2])
    if grid is None:
        return expected
    sizes = check_grid(grid, error)
    if sizes != expected:
        raise error(
            f"{callee}: grid {sizes} differs from the grid it declares, {grid_text(declared)} = "
            f"{expected} {where}"
        )
    return sizes

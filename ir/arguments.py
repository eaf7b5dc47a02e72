"""The one argument binder, storage rule and grid check that the interpreter and the launch share.

A program (or kernel) takes its arguments positionally in parameter order, by name, or both;
`bind_arguments` matches them to the parameter names and refuses too many, unknown, repeated or
missing ones. A grid is a positive int or 1 to 3 positive ints within the hardware's limits
(`MAX_GRID`: x < 2^31, y and z < 2^16), which `check_grid` pads to (x, y, z). A program may
declare its grid (`ir.Program.grid`, expressions over its int parameters): `launch_grid` then
computes it from the int arguments when none is given, and refuses a given grid that differs.

An array argument's raw bytes are the dense bitstream of its parameter's elements, so its
storage dtype (the element type of the NumPy array or torch tensor, named as NumPy, ml_dtypes and
PyTorch name it) must say how those bytes are meant. `storage_dtypes(D)` is the rule, for a
parameter of data type D with b bits per element; an argument may be:

- an array of D's own type, one element per item: float16 (f16), bfloat16 (bf16), float32
  (f32), float8_e4m3fn (f8e4m3), float8_e5m2 (f8e5m2), float8_e3m4 (f8e3m4), int8 (i8),
  uint8 (u8), int32 (i32);
- an array of integers of exactly b bits, uint<b> or int<b> (b = 8, 16 or 32), each item one
  element's code (its bit pattern: uint16 or int16 codes for f16 and bf16, uint32 for f32);
- an array of bytes, uint8 or int8, holding the bitstream itself: the one form for sub-byte
  types (`ir.dtypes.pack` writes it), and accepted for every type.

Everything else is refused: a float type other than D's own (float32 for an f16 parameter,
float16 for bf16, float64 for anything, float8_e4m3fnuz for f8e4m3), integers of another width
(int64, int32 for f16), bool, and the one-item-per-element ml_dtypes types of sub-byte formats
(int4, float4_e2m1fn: their bytes are no dense bitstream), as well as multi-byte items stored
big-endian. `check_storage` raises for a storage dtype outside the accepted ones, naming the
parameter, the storage dtype given and those expected; the interpreter checks NumPy arrays with
it (`numpy_storage_name`), the kernel launch checks tensors with it against the storage dtypes
`backend.lower` derived from `storage_dtypes` (`backend.kernel.KernelArrayParam`).

All raise the caller's own error type (`ir.InterpreterError` for `run_reference`,
`backend.LaunchError` for a kernel call), so each side keeps its exception while the rules live
here once.

    bind_arguments("vector_add", ["n", "x"], (4,), {"x": x}, InterpreterError)  # {"n": 4, "x": x}
    check_grid((8, 2), InterpreterError)                                         # (8, 2, 1)
    launch_grid("f", None, (n // 256, const(1), const(1)), {"n": 1024}, LaunchError)  # (4, 1, 1)
    storage_dtypes(f16)   # ('float16', 'uint16', 'int16', 'uint8', 'int8')
    check_storage("x", "float32", storage_dtypes(f16), f16, InterpreterError)  # raises
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence

import numpy as np

from ir.dtypes import DataType
from layout_algebra.symbolic import Expr, evaluate

MAX_GRID = (2**31 - 1, 2**16 - 1, 2**16 - 1)
"""The largest grid the hardware launches: x, y and z block counts."""

STORAGE_DTYPE_BITS: Mapping[str, int] = {
    "bool": 8,
    "int8": 8,
    "uint8": 8,
    "int16": 16,
    "uint16": 16,
    "int32": 32,
    "uint32": 32,
    "int64": 64,
    "uint64": 64,
    "float16": 16,
    "bfloat16": 16,
    "float32": 32,
    "float64": 64,
    "float8_e3m4": 8,
    "float8_e4m3": 8,
    "float8_e4m3fn": 8,
    "float8_e4m3fnuz": 8,
    "float8_e5m2": 8,
    "float8_e5m2fnuz": 8,
    "float8_e8m0fnu": 8,
}
"""The storage dtypes an array argument of a kernel may have at all (names as in NumPy, ml_dtypes
and PyTorch), with their bits per item."""

BYTE_STORAGE = ("uint8", "int8")
"""The storage dtypes whose items are the bytes of a bitstream."""


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


def storage_dtypes(dtype: DataType) -> tuple[str, ...]:
    """The storage dtypes an array argument for a parameter of data type `dtype` may have (see
    the module docstring): its own type where NumPy, ml_dtypes and PyTorch name one of its width,
    then unsigned and signed integers of its width (codes), then bytes (the bitstream).

        storage_dtypes(bf16)  # ('bfloat16', 'uint16', 'int16', 'uint8', 'int8')
        storage_dtypes(u4)    # ('uint8', 'int8')
    """
    accepted = []
    if STORAGE_DTYPE_BITS.get(dtype.long_name) == dtype.nbits:
        accepted.append(dtype.long_name)
    if dtype.nbits in (8, 16, 32):
        accepted += [f"uint{dtype.nbits}", f"int{dtype.nbits}"]
    accepted += BYTE_STORAGE
    return tuple(dict.fromkeys(accepted))


def numpy_storage_name(dtype: np.dtype) -> str:
    """The storage dtype name of a NumPy dtype, as `check_storage` takes it: its name
    (``float16``, ``bfloat16`` for ml_dtypes' type), or ``big-endian >f2`` for items of more
    than one byte stored big-endian (the bitstream is little-endian, so never accepted)."""
    if dtype.itemsize > 1 and dtype.str.startswith(">"):
        return f"big-endian {dtype.str}"
    return dtype.name


def check_storage(
    name: str,
    storage: str,
    accepted: Sequence[str],
    element: DataType | int,
    error: type[Exception],
) -> None:
    """Raise `error` unless the storage dtype `storage` of argument `name` is one of `accepted`,
    naming the argument, `storage`, the accepted ones and the parameter's `element` type (a
    `DataType`, or a width in bits where the kernel knows no more)."""
    if storage in accepted:
        return
    if isinstance(element, DataType):
        what = (
            f"{element} elements (an array of its own type, its codes in integers of its "
            "width, or the bytes of its bitstream: ir.dtypes.pack)"
        )
    else:
        what = f"{element}-bit elements"
    raise error(
        f"argument {name!r} has storage dtype {storage}; expected one of {', '.join(accepted)} "
        f"for {what}"
    )

"""Hypothesis strategies for random valid tile programs, with their inputs and expected outputs.

Importable by any test suite (the backend's GPU differential tests use them): each drawn
`ProgramCase` holds a verified program, its arguments (fresh copies on demand), the grid, and the
expected contents of its output array computed with NumPy directly on the global arrays, so a
run of the program (by `ir.run_reference` or on the GPU) can be checked against it.

Strategies:
- `register_layouts(num_threads, rank)`: random register layouts (spatial, local and
  replication modes in random orders, extents that need not be powers of two).
- `elementwise_cases()`: masked loads of tiles that do not divide the tensor, a chain of
  elementwise operations (same-layout operands, a broadcast column, Python constants, a
  comparison feeding `where`), an optional cast, and a masked store into a row-padded output
  whose padding must stay untouched.
- `reduction_cases()`: a masked load, `reduce` over one dimension with sum, max or min.
- `shared_round_trip_cases()`: global -> registers -> shared (optionally by `copy_async`) ->
  registers in another layout -> global, with the barriers and waits it needs.
- `program_cases()`: any of the above.

All arrays are uint8 buffers holding the dense bitstream of their elements.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.elementwise import (
    UNARY_OPS,
    apply_binary,
    apply_unary,
    kind_of,
    round_values,
    to_values,
)
from ir.program import Program
from layout_algebra.auto import auto_local_spatial
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import RegisterLayout, local, register_layout, replicate
from layout_algebra.shared import shared_row_major

CASE_DTYPES: tuple[DataType, ...] = (
    dtypes.u1,
    dtypes.u4,
    dtypes.u8,
    dtypes.i3,
    dtypes.i8,
    dtypes.i32,
    dtypes.f4e2m1,
    dtypes.f6e3m2,
    dtypes.f8e4m3,
    dtypes.f8e5m2,
    dtypes.f16,
    dtypes.bf16,
    dtypes.f32,
)
"""The element types random programs draw from: every width class and float class."""

_CHAIN_INT_BINARY = ("add", "sub", "mul", "max", "min", "and", "or", "xor")
_CHAIN_FLOAT_BINARY = ("add", "sub", "mul", "div", "max", "min")
_COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")


@dataclass(frozen=True)
class ProgramCase:
    """A random program with its inputs and the expected contents of its output.

    Fields: `program`; `arguments` (in parameter order; arrays hold the initial contents, use
    `fresh_arguments` to get copies to run on); `grid`; `output` (the index in `arguments` of
    the array holding the result) with `output_dtype` and `output_count` (its elements);
    `expected` (the expected codes of every output element, padding included) and `tolerance`
    (None: codes must be identical; else a float64 array of per-element absolute tolerances on
    the values, with NaN where NaN is expected); `exact_on_gpu` (every operation is bit-exact on
    the GPU, so a GPU run must equal `ir.run_reference` bit for bit); `description`.
    """

    program: Program
    arguments: tuple[Any, ...]
    grid: tuple[int, ...]
    output: int
    output_dtype: DataType
    output_count: int
    expected: np.ndarray
    tolerance: np.ndarray | None = None
    exact_on_gpu: bool = True
    description: str = field(default="")

    def fresh_arguments(self) -> list[Any]:
        """Copies of the arguments (arrays copied, ints as they are)."""
        return [a.copy() if isinstance(a, np.ndarray) else a for a in self.arguments]

    def output_codes(self, buffer: np.ndarray) -> np.ndarray:
        """The codes of the output elements held in `buffer` (a uint8 bitstream)."""
        return dtypes.unpack(
            np.ascontiguousarray(buffer).view(np.uint8).ravel(),
            self.output_dtype,
            self.output_count,
        ).astype(np.int64)

    def check(self, buffer: np.ndarray) -> None:
        """Raise AssertionError unless `buffer` holds the expected output."""
        actual = self.output_codes(buffer)
        if self.tolerance is None:
            bad = np.flatnonzero(actual != self.expected)
            if bad.size:
                k = int(bad[0])
                raise AssertionError(
                    f"{self.description}: {bad.size} output codes differ; first at element {k}: "
                    f"got {actual[k]}, expected {self.expected[k]}"
                )
            return
        got = self.output_dtype.decode(actual).astype(np.float64)
        want = self.output_dtype.decode(self.expected).astype(np.float64)
        nan_ok = np.isnan(got) == np.isnan(want)
        with np.errstate(invalid="ignore"):
            close = (got == want) | (np.abs(got - want) <= self.tolerance)
        bad = np.flatnonzero(~(nan_ok & (close | np.isnan(want))))
        if bad.size:
            k = int(bad[0])
            raise AssertionError(
                f"{self.description}: {bad.size} output values out of tolerance; first at "
                f"element {k}: got {got[k]}, expected {want[k]} +- {self.tolerance[k]}"
            )


# ------------------------------------------------------------------------------------ layouts


def _split_power_of_two(draw: Callable[..., Any], total_bits: int) -> list[int]:
    """A random list of powers of two (each >= 2) multiplying to 2**total_bits."""
    parts: list[int] = []
    while total_bits > 0:
        bits = draw(st.integers(1, total_bits))
        parts.append(1 << bits)
        total_bits -= bits
    return parts


@st.composite
def register_layouts(
    draw: Callable[..., Any], num_threads: int, rank: int = 2, max_local: int = 8
) -> RegisterLayout:
    """A random layout of `num_threads` (a power of two) threads and the given rank.

    The spatial modes split the thread count (some may be replication), the local modes hold at
    most `max_local` elements per thread (sizes 2, 3 or 4); every mode goes to a random
    dimension, and the modes of a dimension and both lists come in random orders.
    """
    spatial = [
        (size, draw(st.booleans()) and draw(st.booleans()))
        for size in _split_power_of_two(draw, num_threads.bit_length() - 1)
    ]
    local_sizes: list[int] = []
    while True:
        size = draw(st.sampled_from((0, 2, 3, 4)))
        if size == 0 or math.prod(local_sizes) * size > max_local:
            break
        local_sizes.append(size)
    modes = [(size, "spatial") for size, replicated in spatial if not replicated]
    modes += [(size, "local") for size in local_sizes]
    dims = [draw(st.integers(0, rank - 1)) for _ in modes]
    order: list[int] = []
    for dim in range(rank):
        members = [m for m, d in enumerate(dims) if d == dim]
        order += draw(st.permutations(members)) if members else []
    position = {mode: k for k, mode in enumerate(order)}
    mode_shape = [modes[m][0] for m in order]
    shape = [math.prod(modes[m][0] for m in range(len(modes)) if dims[m] == d) for d in range(rank)]
    spatial_entries = [position[m] for m, (_, kind) in enumerate(modes) if kind == "spatial"]
    spatial_entries += [-size for size, replicated in spatial if replicated]
    local_entries = [position[m] for m, (_, kind) in enumerate(modes) if kind == "local"]
    return register_layout(
        shape,
        mode_shape,
        draw(st.permutations(spatial_entries)),
        draw(st.permutations(local_entries)),
    )


# ----------------------------------------------------------------------------------- helpers


def _random_codes(draw: Callable[..., Any], dtype: DataType, count: int) -> np.ndarray:
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    return rng.integers(0, 1 << dtype.nbits, size=count, dtype=np.int64)


def _grid_and_tensor(
    draw: Callable[..., Any], tile: tuple[int, int]
) -> tuple[tuple[int, int], tuple[int, int], int]:
    """(grid (x, y), tensor shape (m, n), row padding) for a 2-D tile, often not dividing."""
    blocks_x, blocks_y = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    m = draw(st.integers(max(1, (blocks_y - 1) * tile[0] + 1), blocks_y * tile[0]))
    n = draw(st.integers(max(1, (blocks_x - 1) * tile[1] + 1), blocks_x * tile[1]))
    return (blocks_x, blocks_y), (m, n), draw(st.integers(0, 3))


def _store_expected(
    initial: np.ndarray, values: np.ndarray, dtype: DataType, padding: int
) -> np.ndarray:
    """The output codes after storing `values` (m, n) into rows of n + padding elements."""
    m, n = values.shape
    expected = initial.copy().reshape(m, n + padding)
    expected[:, :n] = dtype.encode(values).astype(np.int64)
    return expected.ravel()


def _threads(draw: Callable[..., Any]) -> int:
    return draw(st.sampled_from((4, 8, 32, 64)))


# ------------------------------------------------------------------------------- elementwise


def _chain_constant(draw: Callable[..., Any], dtype: DataType) -> int | float:
    if dtype.is_float:
        return draw(st.sampled_from((0.5, -1.5, 2.0, 3.0)))
    return draw(st.integers(max(dtype.min, -3), min(dtype.max, 3)))


@st.composite
def elementwise_cases(draw: Callable[..., Any]) -> ProgramCase:
    """A masked elementwise chain over random dtypes and layouts (see the module docstring)."""
    num_threads = _threads(draw)
    layout = draw(register_layouts(num_threads, 2))
    dtype = draw(st.sampled_from(CASE_DTYPES))
    out_dtype = draw(st.sampled_from((dtype, *CASE_DTYPES)))
    tile = layout.shape
    (grid_x, grid_y), (m, n), padding = _grid_and_tensor(draw, tile)
    kind = kind_of(dtype)
    steps = draw(st.integers(1, 3))
    column_layout = reduce_layout(layout, [1], keepdims=True)
    x_codes = _random_codes(draw, dtype, m * n)
    y_codes = _random_codes(draw, dtype, m * n)
    z_codes = _random_codes(draw, dtype, m)
    out_initial = _random_codes(draw, out_dtype, m * (n + padding))
    x_values = to_values(dtype, x_codes).reshape(m, n)
    y_values = to_values(dtype, y_codes).reshape(m, n)
    z_values = to_values(dtype, z_codes).reshape(m, 1)
    exact = True
    names: list[str] = []
    with ProgramBuilder("elementwise", num_threads) as b:
        rows, cols = b.int_param("m"), b.int_param("n")
        x, y, z = (b.array_param(name, dtype) for name in ("x", "y", "z"))
        out = b.array_param("out", out_dtype)
        view = GlobalLayout((rows, cols), (cols, 1))
        origin = [b.block_y * tile[0], b.block_x * tile[1]]
        current = b.load_global(b.global_view(x, dtype, view), origin, layout)
        other = b.load_global(b.global_view(y, dtype, view), origin, layout)
        column = b.load_global(
            b.global_view(z, dtype, GlobalLayout((rows, 1), (1, 1))),
            [b.block_y * tile[0], 0],
            column_layout,
        )
        value = x_values
        for _ in range(steps):
            step = draw(st.sampled_from(("unary", "binary", "column", "constant", "where")))
            if step == "unary":
                op = draw(st.sampled_from([o for o in UNARY_OPS if kind in UNARY_OPS[o].kinds]))
                exact &= UNARY_OPS[op].exact
                current, value = b.unary(op, current), apply_unary(op, dtype, value)
            elif step == "where":
                op = draw(st.sampled_from(_COMPARISONS))
                cond = apply_binary(op, dtype, value, y_values)
                current = b.where(b.binary(op, current, other), current, other)
                value = np.where(cond != 0, value, y_values)
            else:
                ops = _CHAIN_FLOAT_BINARY if dtype.is_float else _CHAIN_INT_BINARY
                op = draw(st.sampled_from(ops))
                if step == "binary":
                    current, value = (
                        b.binary(op, current, other),
                        apply_binary(op, dtype, value, y_values),
                    )
                elif step == "column":
                    current, value = (
                        b.binary(op, current, column),
                        apply_binary(op, dtype, value, z_values),
                    )
                else:
                    constant = _chain_constant(draw, dtype)
                    constant_value = to_values(dtype, dtype.encode(np.array([constant])))
                    current = b.binary(op, current, constant)
                    value = apply_binary(op, dtype, value, constant_value.reshape(1, 1))
            names.append(f"{step}:{op}")
        if out_dtype != dtype:
            current = b.cast(current, out_dtype)
            value = to_values(out_dtype, out_dtype.encode(value))
            names.append(f"cast:{out_dtype}")
        out_view = b.global_view(out, out_dtype, GlobalLayout((rows, cols), (cols + padding, 1)))
        b.store_global(out_view, current, origin)
    expected = _store_expected(out_initial, value, out_dtype, padding)
    arguments = (
        m,
        n,
        dtypes.pack(x_codes, dtype),
        dtypes.pack(y_codes, dtype),
        dtypes.pack(z_codes, dtype),
        dtypes.pack(out_initial, out_dtype),
    )
    return ProgramCase(
        program=b.program(),
        arguments=arguments,
        grid=(grid_x, grid_y),
        output=5,
        output_dtype=out_dtype,
        output_count=m * (n + padding),
        expected=expected,
        exact_on_gpu=exact,
        description=f"{dtype} {layout!r} {' '.join(names)}",
    )


# --------------------------------------------------------------------------------- reductions


@st.composite
def reduction_cases(draw: Callable[..., Any]) -> ProgramCase:
    """A masked tile reduced over one dimension; the result stored as a (m, 1) or (1, n) view.

    Elements outside the tensor read 0 and take part in the reduction. Float sums are checked
    within f32 rounding of the float64 sum (their order is the interpreter's); everything else
    exactly, with -0 and +0 equal for float max and min.
    """
    num_threads = _threads(draw)
    layout = draw(register_layouts(num_threads, 2))
    dtype = draw(st.sampled_from(CASE_DTYPES))
    reduction = draw(st.sampled_from(("sum", "max", "min")))
    dim = draw(st.integers(0, 1))
    tile = layout.shape
    m = draw(st.integers(1, tile[0]))
    n = draw(st.integers(1, tile[1]))
    codes = _random_codes(draw, dtype, m * n)
    if reduction == "sum" and dtype.is_float:
        # Keep float sums away from overflow, whose point depends on the summation order.
        magnitudes = np.abs(dtype.decode(codes))
        codes = np.where(np.isfinite(magnitudes) & (magnitudes < 2.0**20), codes, 0)
    padded = np.zeros(tile, dtype=np.float64 if dtype.is_float else np.int64)
    padded[:m, :n] = to_values(dtype, codes).reshape(m, n)
    out_count = tile[1 - dim]
    out_initial = _random_codes(draw, dtype, out_count)
    with ProgramBuilder("reduction", num_threads) as b:
        rows, cols = b.int_param("m"), b.int_param("n")
        x = b.array_param("x", dtype)
        out = b.array_param("out", dtype)
        tensor = b.load_global(
            b.global_view(x, dtype, GlobalLayout((rows, cols), (cols, 1))), [0, 0], layout
        )
        result = b.reduce(tensor, dim, reduction, keepdim=True)
        out_shape = (1, tile[1]) if dim == 0 else (tile[0], 1)
        out_view = b.global_view(out, dtype, GlobalLayout(out_shape, (out_shape[1], 1)))
        b.store_global(out_view, result, [0, 0])
    tolerance = None
    if reduction == "sum":
        total = padded.sum(axis=dim)
    elif dtype.is_float:
        with np.errstate(invalid="ignore"):
            reducer = np.fmax if reduction == "max" else np.fmin
            total = reducer.reduce(padded, axis=dim)
        tolerance = np.zeros(out_count)
    else:
        total = padded.max(axis=dim) if reduction == "max" else padded.min(axis=dim)
    if reduction == "sum" and dtype.is_float:
        # f32 accumulation error, then one rounding to the type (saturating formats included).
        accumulation = np.abs(padded).sum(axis=dim) * 2.0**-23 * padded.shape[dim]
        rounding = np.abs(total) * 2.0**-dtype.mantissa_bits + dtype.smallest_subnormal
        tolerance = accumulation + rounding
    if dtype.is_float:
        expected = dtype.encode(total.astype(np.float32))
    else:
        expected = dtype.encode(round_values(dtype, total))
    return ProgramCase(
        program=b.program(),
        arguments=(m, n, dtypes.pack(codes, dtype), dtypes.pack(out_initial, dtype)),
        grid=(1,),
        output=3,
        output_dtype=dtype,
        output_count=out_count,
        expected=expected.astype(np.int64),
        tolerance=tolerance,
        exact_on_gpu=True,
        description=f"{dtype} {layout!r} reduce_{reduction} dim={dim}",
    )


# ------------------------------------------------------------------------------ shared memory


@st.composite
def shared_round_trip_cases(draw: Callable[..., Any]) -> ProgramCase:
    """Global -> shared -> registers in another layout -> global, for one masked tile.

    The tile reaches shared memory either through registers (`store_shared`) or by
    `copy_async` (+ commit and wait); a `sync` precedes the read back.
    """
    num_threads = _threads(draw)
    first = draw(register_layouts(num_threads, 2))
    second = draw(
        st.sampled_from(
            (
                first,
                auto_local_spatial(num_threads, first.shape),
                local(*first.shape) * replicate(num_threads),
            )
        )
    )
    dtype = draw(st.sampled_from(CASE_DTYPES))
    asynchronous = draw(st.booleans())
    tile = first.shape
    m = draw(st.integers(1, tile[0]))
    n = draw(st.integers(1, tile[1]))
    codes = _random_codes(draw, dtype, m * n)
    out_initial = _random_codes(draw, dtype, m * n)
    with ProgramBuilder("shared_round_trip", num_threads) as b:
        rows, cols = b.int_param("m"), b.int_param("n")
        x = b.array_param("x", dtype)
        out = b.array_param("out", dtype)
        view = GlobalLayout((rows, cols), (cols, 1))
        buffer = b.shared_tensor(dtype, shared_row_major(*tile))
        source = b.global_view(x, dtype, view)
        if asynchronous:
            b.copy_async(buffer, source, [0, 0], layout=draw(st.sampled_from((None, first))))
            b.copy_async_commit()
            b.copy_async_wait(0)
        else:
            b.store_shared(buffer, b.load_global(source, [0, 0], first))
        b.sync()
        b.store_global(b.global_view(out, dtype, view), b.load_shared(buffer, second), [0, 0])
    values = to_values(dtype, codes).reshape(m, n)
    return ProgramCase(
        program=b.program(),
        arguments=(m, n, dtypes.pack(codes, dtype), dtypes.pack(out_initial, dtype)),
        grid=(1,),
        output=3,
        output_dtype=dtype,
        output_count=m * n,
        expected=_store_expected(out_initial, values, dtype, 0),
        description=f"{dtype} {first!r} -> {second!r} async={asynchronous}",
    )


def program_cases() -> st.SearchStrategy[ProgramCase]:
    """Any of the strategies of this module."""
    return st.one_of(elementwise_cases(), reduction_cases(), shared_round_trip_cases())


__all__ = [
    "CASE_DTYPES",
    "ProgramCase",
    "elementwise_cases",
    "program_cases",
    "reduction_cases",
    "register_layouts",
    "shared_round_trip_cases",
]

"""What every random-program strategy shares: `ProgramCase`, the element types, random register
layouts and the helpers that draw codes, grids and expected stores."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from ir import dtypes
from ir.dtypes import DataType
from ir.program import Program
from ir.values import IntParam
from layout_algebra.register import RegisterLayout, register_layout

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


def codes_match(dtype: DataType, actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Per element, whether the `actual` code of `dtype` counts as the `expected` one (the
    interpreter's) in a differential test.

    The contract's rule: the codes are equal, or the expected code is the type's quiet NaN of
    either sign (what the interpreter's casts and arithmetic give: their NaN payload is
    unspecified, so another implementation's NaN of the same sign matches it) and the actual
    one is a NaN of that sign. Any other NaN code was moved, not computed, and must arrive bit
    for bit. (A program that moves an input's quiet NaN is checked by sign only.)
    """
    actual = np.asarray(actual, dtype=np.int64)
    expected = np.asarray(expected, dtype=np.int64)
    same = actual == expected
    if dtype.is_float and dtype.has_nan:
        sign = dtype.nbits - 1
        computed = np.isin(expected, dtype.encode(np.array([np.nan, -np.nan], dtype=np.float32)))
        same |= computed & np.isnan(dtype.decode(actual)) & ((actual >> sign) == (expected >> sign))
    return same


@dataclass(frozen=True)
class ProgramCase:
    """A random program with its inputs and the expected contents of its output.

    Fields: `program`; `arguments` (in parameter order; arrays hold the initial contents, use
    `fresh_arguments` to get copies to run on); `grid`; `output` (the index in `arguments` of
    the array holding the result) with `output_dtype` and `output_count` (its elements);
    `expected` (the expected codes of every output element, padding included) and `tolerance`
    (None: codes must be identical; else a float64 array of per-element absolute tolerances on
    the values, with NaN where NaN is expected); `exact_on_gpu` (every operation is bit-exact on
    the GPU, so a GPU run must equal `ir.run_reference` bit for bit); `description`. The
    program's compile-time constant parameters take their arguments as values (`constants`).
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

    @property
    def constants(self) -> dict[str, int]:
        """The values of the program's compile-time constant parameters (their arguments), to
        compile it with: ``backend.compile(case.program, arch, constants=case.constants)``."""
        return {
            param.name: int(argument)
            for param, argument in zip(self.program.params, self.arguments)
            if isinstance(param, IntParam) and param.constant
        }

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
        matching = codes_match(self.output_dtype, actual, self.expected)
        if self.tolerance is None:
            bad = np.flatnonzero(~matching)
            if bad.size:
                k = int(bad[0])
                raise AssertionError(
                    f"{self.description}: {bad.size} output codes differ; first at element {k}: "
                    f"got {actual[k]}, expected {self.expected[k]}"
                )
            return
        with np.errstate(invalid="ignore"):
            got = self.output_dtype.decode(actual).astype(np.float64)
            want = self.output_dtype.decode(self.expected).astype(np.float64)
            close = ~np.isnan(got) & ~np.isnan(want) & (np.abs(got - want) <= self.tolerance)
        bad = np.flatnonzero(~(matching | close))
        if bad.size:
            k = int(bad[0])
            raise AssertionError(
                f"{self.description}: {bad.size} output values out of tolerance; first at "
                f"element {k}: got {got[k]}, expected {want[k]} +- {self.tolerance[k]}"
            )


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


def code_bit_offsets(layout: RegisterLayout, nbits: int) -> np.ndarray:
    """For each element of a tile in `layout` (its shape), the bit offset of its code in its
    thread's bitstream: its local index times `nbits` (what a biased cast's bias depends on,
    `ir.dtypes.magic_bias`)."""
    offsets = np.zeros(layout.shape, dtype=np.int64)
    for thread in layout.table():
        for index, coords in enumerate(thread):
            offsets[tuple(coords)] = index * nbits
    return offsets


def random_codes(draw: Callable[..., Any], dtype: DataType, count: int) -> np.ndarray:
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    return rng.integers(0, 1 << dtype.nbits, size=count, dtype=np.int64)


def grid_and_tensor(
    draw: Callable[..., Any], tile: tuple[int, int]
) -> tuple[tuple[int, int], tuple[int, int], int]:
    """(grid (x, y), tensor shape (m, n), row padding) for a 2-D tile, often not dividing."""
    blocks_x, blocks_y = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    m = draw(st.integers(max(1, (blocks_y - 1) * tile[0] + 1), blocks_y * tile[0]))
    n = draw(st.integers(max(1, (blocks_x - 1) * tile[1] + 1), blocks_x * tile[1]))
    return (blocks_x, blocks_y), (m, n), draw(st.integers(0, 3))


def store_expected(
    initial: np.ndarray, values: np.ndarray, dtype: DataType, padding: int
) -> np.ndarray:
    """The output codes after storing `values` (m, n) into rows of n + padding elements."""
    m, n = values.shape
    expected = initial.copy().reshape(m, n + padding)
    expected[:, :n] = dtype.encode(values).astype(np.int64)
    return expected.ravel()


def flush_f32_subnormals(values: np.ndarray) -> np.ndarray:
    """`values` (float32 or float64) with every one below f32's smallest normal in magnitude,
    zero aside, replaced by a zero of its sign: what the GPU's f32 add in global memory does
    to its operands and result."""
    values = np.asarray(values)
    tiny = (values != 0) & (np.abs(values) < np.finfo(np.float32).tiny)
    return np.where(tiny, np.copysign(0.0, values), values).astype(values.dtype)


def combine_expected(
    initial: np.ndarray, values: np.ndarray, dtype: DataType, padding: int
) -> np.ndarray:
    """The output codes after a combining store (``combine="add"``) adds `values` (m, n), one
    add per element, into rows of n + padding elements of codes `initial`: the sum in float64
    rounded once to the type (float64 keeps enough bits that this is the correctly rounded
    sum), a NaN the positive quiet NaN, f32 subnormals of either operand and of the result
    flushed to zero of their sign; i32 wrapping."""
    m, n = values.shape
    expected = initial.copy().reshape(m, n + padding)
    before = dtype.decode(expected[:, :n])
    if not dtype.is_float:
        total = (before.astype(np.int64) + values.astype(np.int64) + 2**31) % 2**32 - 2**31
        expected[:, :n] = dtype.encode(total).astype(np.int64)
        return expected.ravel()

    def flushed(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return flush_f32_subnormals(x) if dtype == dtypes.f32 else x

    with np.errstate(all="ignore"):
        total = flushed(flushed(before) + flushed(values))
    codes = dtype.encode(total).astype(np.int64)
    if dtype == dtypes.f32:  # a sum rounded up or down into the subnormals is flushed too
        codes = dtype.encode(flushed(dtype.decode(codes))).astype(np.int64)
    positive_nan = int(dtype.encode(np.array([np.nan], dtype=np.float32))[0]) & ~(
        1 << (dtype.nbits - 1)
    )
    expected[:, :n] = np.where(np.isnan(total), positive_nan, codes)
    return expected.ravel()


def draw_threads(draw: Callable[..., Any]) -> int:
    return draw(st.sampled_from((4, 8, 32, 64)))


CHAIN_INT_BINARY = ("add", "sub", "mul", "max", "min", "and", "or", "xor")


CHAIN_FLOAT_BINARY = ("add", "sub", "mul", "div", "max", "min")


def chain_constant(draw: Callable[..., Any], dtype: DataType) -> int | float:
    if dtype.is_float:
        return draw(st.sampled_from((0.5, -1.5, 2.0, 3.0)))
    return draw(st.integers(max(dtype.min, -3), min(dtype.max, 3)))


def draw_constants(draw: Callable[..., Any], names: Sequence[str]) -> frozenset[str]:
    """The int parameters among `names` that a case declares compile-time constants
    (``int_param(name, constant=True)``): none in about two cases of three, else a random
    non-empty subset."""
    if not names or draw(st.integers(0, 2)) > 0:
        return frozenset()
    return frozenset(draw(st.sets(st.sampled_from(tuple(names)), min_size=1)))

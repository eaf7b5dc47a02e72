"""Feature programs of the backend's tests: each written to exercise one part of the lowering
(copies, swizzles, reductions, replicated operands, views, integer ops, shared bytes, control
flow, transcendentals, tensor cores, fast casts, thread groups, prefetches, combining stores),
with random inputs and a grid.

Not a test module: test_lower_emulated.py loads it by path and runs every program under the CPU
emulation, and the GPU tests run them on the device (both through `FEATURES` there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from backend.tensor_core import mma_operand_layouts
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.program import Program
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import local, replicate, spatial
from layout_algebra.shared import shared_row_major, shared_row_major_swizzle

EMULATED_ARCH = "sm_90a"
"""The architecture the emulated programs that use it are lowered for (the fast-conversion
feature's `emulated_arch`, and the examples in test_lower_emulated.py)."""


def _random_codes(rng: np.random.Generator, dtype: DataType, count: int) -> np.ndarray:
    if dtype.is_float:
        values = rng.normal(0.0, 2.0, count).astype(np.float32)
        return dtype.encode(values)
    return rng.integers(0, 1 << dtype.nbits, count).astype(np.int64)


def packed_codes(rng: np.random.Generator, dtype: DataType, count: int) -> np.ndarray:
    """A 16-byte aligned uint8 buffer holding `count` random codes of `dtype`, padded to a
    multiple of 16 bytes."""
    stream = dtypes.pack(_random_codes(rng, dtype, count), dtype)
    padded = np.zeros(-(-max(stream.size, 1) // 16) * 16, dtype=np.uint8)
    padded[: stream.size] = stream
    return padded


@dataclass(frozen=True)
class FeatureCase:
    """A program written to exercise one part of the lowering, with inputs and a grid.

    `exact`: every operation is bit-exact on the GPU (else compare within a tolerance).
    `emulated_arch`: the architecture to lower for when emulated (None: none).
    """

    name: str
    program: Program
    arguments: tuple[Any, ...]
    grid: tuple[int, ...]
    exact: bool = True
    emulated_arch: str | None = None

    def fresh_arguments(self) -> list[Any]:
        """Copies of the arguments (arrays copied)."""
        return [a.copy() if isinstance(a, np.ndarray) else a for a in self.arguments]


def _copy_tiles(rng: np.random.Generator) -> FeatureCase:
    """copy_async of 16-byte vectors (row stride k8 * 8) into swizzled two-stage shared memory,
    rows and columns partly out of bounds, read back in another layout."""
    with ProgramBuilder("copy_tiles", 128) as b:
        m, n, k8 = b.int_param("m"), b.int_param("n"), b.int_param("chunks")
        x, y = b.array_param("x", dtypes.f16), b.array_param("y", dtypes.f16)
        layout = GlobalLayout((m, n), (k8 * 8, 1))
        source, target = b.global_view(x, dtypes.f16, layout), b.global_view(y, dtypes.f16, layout)
        buffer = b.shared_tensor(dtypes.f16, shared_row_major_swizzle(2, 32, 64, element_bits=16))
        with b.for_range(2) as stage:
            origin = [b.block_y * 64 + stage * 32, b.block_x * 64]
            b.copy_async(buffer, source, origin, [stage, 0, 0])
        b.copy_async_commit()
        b.copy_async_wait(0)
        b.sync()
        with b.for_range(2) as stage:
            tile = b.load_shared(buffer, spatial(32, 4).local(1, 16), [stage, 0, 0])
            b.store_global(target, tile, [b.block_y * 64 + stage * 32, b.block_x * 64])
    m, n, k8 = 100, 100, 13
    x_codes = packed_codes(rng, dtypes.f16, m * k8 * 8)
    y_codes = packed_codes(rng, dtypes.f16, m * k8 * 8)
    return FeatureCase("copy_tiles", b.program(), (m, n, k8, x_codes, y_codes), (2, 2))


def _swizzle_slices(rng: np.random.Generator) -> FeatureCase:
    """Slices of a swizzled shared tile at loop offsets, 8-byte vectors, a loop-carried sum."""
    with ProgramBuilder("swizzle_slices", 128) as b:
        x, y = b.array_param("x", dtypes.f16), b.array_param("y", dtypes.f32)
        source = b.global_view(x, dtypes.f16, GlobalLayout((32, 64), (64, 1)))
        target = b.global_view(y, dtypes.f32, GlobalLayout((32, 16), (16, 1)))
        buffer = b.shared_tensor(dtypes.f16, shared_row_major_swizzle(32, 64, element_bits=16))
        b.store_shared(buffer, b.load_global(source, [0, 0], spatial(32, 4).local(1, 16)))
        b.sync()
        slice_layout = spatial(32, 4).local(1, 4)
        total = b.register_tensor(dtypes.f32, slice_layout, 0.0)
        with b.for_range(0, 64, 16) as column:
            part = b.cast(b.load_shared(buffer, slice_layout, [0, column]), dtypes.f32)
            b.assign(total, b.add(total, part))
        b.store_global(target, total, [0, 0])
    arguments = (packed_codes(rng, dtypes.f16, 32 * 64), packed_codes(rng, dtypes.f32, 32 * 16))
    return FeatureCase("swizzle_slices", b.program(), arguments, (1,))


def _reductions(rng: np.random.Generator) -> FeatureCase:
    """Reductions over lanes (shuffles) and across warps (shared scratch), several dtypes."""
    layout = spatial(2, 64).local(2, 2)
    outputs = []
    with ProgramBuilder("reductions", 128) as b:
        for dtype, reduction, dim in (
            (dtypes.f32, "sum", 1),
            (dtypes.f32, "sum", 0),
            (dtypes.f16, "max", 1),
            (dtypes.i8, "min", 0),
            (dtypes.u4, "sum", 1),
            (dtypes.bf16, "min", 1),
        ):
            x = b.array_param(f"x{len(outputs)}", dtype)
            y = b.array_param(f"y{len(outputs)}", dtype)
            tile = b.load_global(
                b.global_view(x, dtype, GlobalLayout((4, 128), (128, 1))), [0, 0], layout
            )
            result = b.reduce(tile, dim, reduction, keepdim=True)
            shape = (1, 128) if dim == 0 else (4, 1)
            b.store_global(
                b.global_view(y, dtype, GlobalLayout(shape, (shape[1], 1))), result, [0, 0]
            )
            outputs.append((dtype, shape))
        warp_tile = spatial(4, 32).local(1, 3)
        z = b.array_param("z", dtypes.f32)
        w = b.array_param("w", dtypes.f32)
        tile = b.load_global(
            b.global_view(z, dtypes.f32, GlobalLayout((4, 96), (96, 1))), [0, 0], warp_tile
        )
        row_sum = b.reduce(tile, 1, "sum")
        b.store_global(b.global_view(w, dtypes.f32, GlobalLayout((4,), (1,))), row_sum, [0])
    arguments: list[Any] = []
    for dtype, shape in outputs:
        arguments += [
            packed_codes(rng, dtype, 4 * 128),
            packed_codes(rng, dtype, shape[0] * shape[1]),
        ]
    arguments += [packed_codes(rng, dtypes.f32, 4 * 96), packed_codes(rng, dtypes.f32, 4)]
    return FeatureCase("reductions", b.program(), tuple(arguments), (1,))


def _replicated_operands(rng: np.random.Generator) -> FeatureCase:
    """A dot and a broadcast whose operands every thread holds whole: register indices that
    depend on the thread."""
    with ProgramBuilder("replicated_operands", 32) as b:
        a, w, r, y = (
            b.array_param(name, dtype)
            for name, dtype in (
                ("a", dtypes.bf16),
                ("w", dtypes.bf16),
                ("r", dtypes.f32),
                ("y", dtypes.f32),
            )
        )
        a_tile = b.load_global(
            b.global_view(a, dtypes.bf16, GlobalLayout((8, 4), (4, 1))),
            [0, 0],
            replicate(32) * local(8, 4),
        )
        w_tile = b.load_global(
            b.global_view(w, dtypes.bf16, GlobalLayout((4, 16), (16, 1))),
            [0, 0],
            replicate(32) * local(4, 16),
        )
        row = b.load_global(
            b.global_view(r, dtypes.f32, GlobalLayout((1, 16), (16, 1))),
            [0, 0],
            replicate(32) * local(1, 16),
        )
        accumulator = b.register_tensor(dtypes.f32, spatial(8, 4).local(1, 4), 0.5)
        product = b.dot(a_tile, w_tile, accumulator)
        result = b.add(product, row)
        b.store_global(b.global_view(y, dtypes.f32, GlobalLayout((8, 16), (16, 1))), result, [0, 0])
    arguments = (
        packed_codes(rng, dtypes.bf16, 32),
        packed_codes(rng, dtypes.bf16, 64),
        packed_codes(rng, dtypes.f32, 16),
        packed_codes(rng, dtypes.f32, 128),
    )
    return FeatureCase("replicated_operands", b.program(), arguments, (1,))


def _views(rng: np.random.Generator) -> FeatureCase:
    """Register views: bytes as f4e2m1 pairs, f16 as bytes, i32 as f32 bits, f6e3m2 from
    three bytes."""
    with ProgramBuilder("views", 32) as b:
        p, q, r, s = (
            b.array_param(name, dtype)
            for name, dtype in (
                ("p", dtypes.u8),
                ("q", dtypes.f16),
                ("r", dtypes.i32),
                ("s", dtypes.u8),
            )
        )
        o1, o2, o3, o4 = (
            b.array_param(name, dtype)
            for name, dtype in (
                ("o1", dtypes.f32),
                ("o2", dtypes.u8),
                ("o3", dtypes.f32),
                ("o4", dtypes.f16),
            )
        )
        raw = b.load_global(
            b.global_view(p, dtypes.u8, GlobalLayout((64,), (1,))), [0], spatial(32).local(2)
        )
        pairs = b.view(raw, dtypes.f4e2m1, spatial(32).local(4))
        b.store_global(
            b.global_view(o1, dtypes.f32, GlobalLayout((128,), (1,))),
            b.cast(pairs, dtypes.f32),
            [0],
        )
        halves = b.load_global(
            b.global_view(q, dtypes.f16, GlobalLayout((32, 4), (4, 1))),
            [0, 0],
            spatial(32, 1).local(1, 4),
        )
        as_bytes = b.view(halves, dtypes.u8, spatial(32, 1).local(1, 8))
        b.store_global(
            b.global_view(o2, dtypes.u8, GlobalLayout((32, 8), (8, 1))), as_bytes, [0, 0]
        )
        ints = b.load_global(
            b.global_view(r, dtypes.i32, GlobalLayout((32,), (1,))), [0], spatial(32)
        )
        b.store_global(
            b.global_view(o3, dtypes.f32, GlobalLayout((32,), (1,))),
            b.view(ints, dtypes.f32, spatial(32)),
            [0],
        )
        triple = b.load_global(
            b.global_view(s, dtypes.u8, GlobalLayout((96,), (1,))), [0], spatial(32).local(3)
        )
        sixes = b.view(triple, dtypes.f6e3m2, spatial(32).local(4))
        b.store_global(
            b.global_view(o4, dtypes.f16, GlobalLayout((128,), (1,))),
            b.cast(sixes, dtypes.f16),
            [0],
        )
    ints = rng.integers(-(2**31), 2**31, 32).astype(np.int32).view(np.uint8).copy()
    arguments = (
        packed_codes(rng, dtypes.u8, 64),
        packed_codes(rng, dtypes.f16, 128),
        ints,
        packed_codes(rng, dtypes.u8, 96),
        packed_codes(rng, dtypes.f32, 128),
        packed_codes(rng, dtypes.u8, 256),
        packed_codes(rng, dtypes.f32, 32),
        packed_codes(rng, dtypes.f16, 128),
    )
    return FeatureCase("views", b.program(), arguments, (1,))


def _integer_ops(rng: np.random.Generator) -> FeatureCase:
    """Floor division and modulo (divisors made odd, so nonzero), shifts by in-range amounts,
    negation, absolute value and inversion on i8, u4 and i32."""
    with ProgramBuilder("integer_ops", 32) as b:
        layout = spatial(8, 4).local(1, 2)
        results = []
        for index, dtype in enumerate((dtypes.i8, dtypes.u4, dtypes.i32, dtypes.i3)):
            x = b.array_param(f"x{index}", dtype)
            y = b.array_param(f"y{index}", dtype)
            out = b.array_param(f"out{index}", dtypes.i32)
            shape = GlobalLayout((8, 8), (8, 1))
            a = b.load_global(b.global_view(x, dtype, shape), [0, 0], layout)
            d = b.or_(b.load_global(b.global_view(y, dtype, shape), [0, 0], layout), 1)
            shift = b.and_(d, min(dtype.nbits, 32) - 1 if dtype.nbits in (8, 32) else 1)
            terms = [
                b.div(a, d),
                b.mod(a, d),
                b.shl(a, shift),
                b.shr(a, shift),
                b.neg(a),
                b.abs(a),
                b.invert(a),
                b.mul(a, d),
                b.sub(a, d),
            ]
            total = b.cast(terms[0], dtypes.i32)
            for term in terms[1:]:
                total = b.xor(b.mul(total, 3), b.cast(term, dtypes.i32))
            b.store_global(b.global_view(out, dtypes.i32, shape), total, [0, 0])
            results.append(dtype)
    arguments: list[Any] = []
    for dtype in results:
        arguments += [
            packed_codes(rng, dtype, 64),
            packed_codes(rng, dtype, 64),
            packed_codes(rng, dtypes.i32, 64),
        ]
    return FeatureCase("integer_ops", b.program(), tuple(arguments), (1,))


def _shared_bytes(rng: np.random.Generator) -> FeatureCase:
    """Sub-byte elements of neighbouring threads in one byte (u4, u2) or across bytes
    (f6e3m2), stored to global and shared memory, with replicas that must not double-store."""
    with ProgramBuilder("shared_bytes", 64) as b:
        n = b.int_param("n")
        arrays = [
            (b.array_param(f"x{k}", t), b.array_param(f"y{k}", t), t)
            for k, t in enumerate((dtypes.u4, dtypes.f6e3m2, dtypes.u2))
        ]
        for x, y, dtype in arrays:
            view_x = b.global_view(x, dtype, GlobalLayout((n,), (1,)))
            view_y = b.global_view(y, dtype, GlobalLayout((n,), (1,)))
            values = b.load_global(view_x, [b.block_x * 32], replicate(2) * spatial(32))
            buffer = b.shared_tensor(dtype, shared_row_major(32))
            b.store_shared(buffer, values)
            b.sync()
            back = b.load_shared(buffer, spatial(32) * replicate(2))
            b.store_global(view_y, back, [b.block_x * 32])
            b.sync()
    n = 75
    arguments: list[Any] = [n]
    for _, _, dtype in arrays:
        arguments += [packed_codes(rng, dtype, n), packed_codes(rng, dtype, n)]
    return FeatureCase("shared_bytes", b.program(), tuple(arguments), (3,))


def _sub_byte_copy_edges(rng: np.random.Generator) -> FeatureCase:
    """copy_async of one row of sub-byte elements by the default copy layout, the row ending
    inside a byte (the vector at the edge reads a prefix that is not whole bytes), read back
    masked and whole: the tile's elements past the row must be zero."""
    row_dtypes = (dtypes.u1, dtypes.u2, dtypes.u3, dtypes.f4e2m1, dtypes.u6)
    lengths = (61, 59, 57, 45, 37)
    with ProgramBuilder("sub_byte_copy_edges", 64) as b:
        params = []
        for k, dtype in enumerate(row_dtypes):
            n = b.int_param(f"n{k}")
            x, y, z = (b.array_param(f"{name}{k}", dtype) for name in "xyz")
            params.append((n, x, y, z, dtype))
        for n, x, y, z, dtype in params:
            row = GlobalLayout((1, n), (n, 1))
            buffer = b.shared_tensor(dtype, shared_row_major(1, 64))
            b.copy_async(buffer, b.global_view(x, dtype, row), [0, 0])
            b.copy_async_commit()
            b.copy_async_wait(0)
            b.sync()
            tile = b.load_shared(buffer, spatial(1, 64))
            b.store_global(b.global_view(y, dtype, row), tile, [0, 0])
            whole = GlobalLayout((1, 64), (64, 1))
            b.store_global(b.global_view(z, dtype, whole), tile, [0, 0])
            b.sync()
    arguments: list[Any] = []
    for dtype, n in zip(row_dtypes, lengths):
        arguments += [
            n,
            packed_codes(rng, dtype, n),
            packed_codes(rng, dtype, n),
            packed_codes(rng, dtype, 64),
        ]
    return FeatureCase("sub_byte_copy_edges", b.program(), tuple(arguments), (1,))


def _scaled_casts(rng: np.random.Generator) -> FeatureCase:
    """Scaled casts by the generic conversion path, NaN codes included (whose sign a scaled cast
    keeps, as any cast between floats): every f8e4m3 code to f16 times 2^-3, and f16 codes
    (every code across the grid's blocks) to f32 times 2^20."""
    sources = ((dtypes.f8e4m3, dtypes.f16, -3), (dtypes.f16, dtypes.f32, 20))
    with ProgramBuilder("scaled_casts", 128) as b:
        params = [
            (b.array_param(f"x{j}", src), b.array_param(f"y{j}", dst), src, dst, exponent)
            for j, (src, dst, exponent) in enumerate(sources)
        ]
        for x, y, src, dst, exponent in params:
            n = 1 << src.nbits
            view_x = b.global_view(x, src, GlobalLayout((n,), (1,)))
            view_y = b.global_view(y, dst, GlobalLayout((n,), (1,)))
            codes = b.load_global(view_x, [b.block_x * 256], spatial(128).local(2))
            b.store_global(view_y, b.cast(codes, dst, exponent=exponent), [b.block_x * 256])
    arguments: list[Any] = []
    for src, dst, _ in sources:
        n = 1 << src.nbits
        codes = rng.permutation(n)
        arguments += [dtypes.pack(codes, src), np.zeros(n * dst.nbits // 8, np.uint8)]
    return FeatureCase("scaled_casts", b.program(), tuple(arguments), ((1 << 16) // 256,))


def _control_flow(rng: np.random.Generator) -> FeatureCase:
    """A runtime loop with a loop-carried accumulator and an if on the loop variable."""
    with ProgramBuilder("control_flow", 64) as b:
        steps = b.int_param("steps", 0, 16)
        x, y = b.array_param("x", dtypes.f8e4m3), b.array_param("y", dtypes.f32)
        source = b.global_view(x, dtypes.f8e4m3, GlobalLayout((steps, 256), (256, 1)))
        layout = spatial(64).local(4)
        total = b.register_tensor(dtypes.f32, layout, 1.0)
        with b.for_range(steps) as step:
            values = b.cast(b.load_global(source, [step, 0], layout), dtypes.f32)
            b.assign(total, b.add(total, values))
            with b.if_((step % 3).eq(1)):
                b.assign(total, b.mul(total, 0.5))
        b.store_global(b.global_view(y, dtypes.f32, GlobalLayout((256,), (1,))), total, [0])
    arguments = (7, packed_codes(rng, dtypes.f8e4m3, 7 * 256), packed_codes(rng, dtypes.f32, 256))
    return FeatureCase("control_flow", b.program(), arguments, (1,))


def _transcendentals(rng: np.random.Generator) -> FeatureCase:
    """Every unary float operation on f32, the inexact ones compared within a tolerance."""
    with ProgramBuilder("transcendentals", 32) as b:
        x = b.array_param("x", dtypes.f32)
        source = b.global_view(x, dtypes.f32, GlobalLayout((128,), (1,)))
        value = b.abs(b.load_global(source, [0], spatial(32).local(4)))
        for index, op in enumerate(
            ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "tanh", "neg")
        ):
            y = b.array_param(f"y{index}", dtypes.f32)
            b.store_global(
                b.global_view(y, dtypes.f32, GlobalLayout((128,), (1,))), b.unary(op, value), [0]
            )
    arguments = (
        packed_codes(rng, dtypes.f32, 128),
        *(packed_codes(rng, dtypes.f32, 128) for _ in range(9)),
    )
    return FeatureCase("transcendentals", b.program(), arguments, (1,), exact=False)


def _tensor_cores(rng: np.random.Generator) -> FeatureCase:
    """A dot in the layouts of ``mma.m16n8k16`` fed by loads ``ldmatrix`` can do: with an
    architecture the lowering uses tensor cores (equal within rounding), without one the SIMT
    dot and plain loads (bit-exact)."""
    a_layout, b_layout, c_layout = mma_operand_layouts(2, 2, 64, 64, 16)
    with ProgramBuilder("tensor_cores", 128) as b:
        x, w = b.array_param("x", dtypes.f16), b.array_param("w", dtypes.f16)
        y = b.array_param("y", dtypes.f32)
        x_shared = b.shared_tensor(dtypes.f16, shared_row_major_swizzle(64, 32, element_bits=16))
        w_shared = b.shared_tensor(dtypes.f16, shared_row_major_swizzle(32, 64, element_bits=16))
        x_view = b.global_view(x, dtypes.f16, GlobalLayout((64, 32), (32, 1)))
        w_view = b.global_view(w, dtypes.f16, GlobalLayout((32, 64), (64, 1)))
        b.store_shared(x_shared, b.load_global(x_view, [0, 0], spatial(32, 4).local(2, 8)))
        b.store_shared(w_shared, b.load_global(w_view, [0, 0], spatial(16, 8).local(2, 8)))
        b.sync()
        total = b.register_tensor(dtypes.f32, c_layout, 0.25)
        with b.for_range(0, 32, 16) as k:
            a_tile = b.load_shared(x_shared, a_layout, [0, k])
            b_tile = b.load_shared(w_shared, b_layout, [k, 0])
            b.assign(total, b.dot(a_tile, b_tile, total))
        b.store_global(b.global_view(y, dtypes.f32, GlobalLayout((64, 64), (64, 1))), total, [0, 0])
    arguments = (
        packed_codes(rng, dtypes.f16, 64 * 32),
        packed_codes(rng, dtypes.f16, 32 * 64),
        packed_codes(rng, dtypes.f32, 64 * 64),
    )
    return FeatureCase("tensor_cores", b.program(), arguments, (1,))


def _fast_casts(rng: np.random.Generator) -> FeatureCase:
    """Source types of `backend.fast_conversions` (integers of every width, sub-byte floats)
    cast to f16 and bf16, in the codes' order and into another order of each thread's elements
    (column-major: the conversion gathers its pairs from across the words)."""
    names = ("u1", "i2", "u3", "i4", "u5", "i6", "u7", "u8", "i8", "f4e2m1", "f6e3m2", "f3e1m1")
    arguments: list[Any] = []
    with ProgramBuilder("fast_casts", 32) as b:
        layout = spatial(32, 1).local(2, 8)
        reordered = spatial(32, 1).column_local(2, 8)
        view = GlobalLayout((64, 8), (8, 1))
        for src in map(dtypes.from_name, names):
            x = b.array_param(f"x_{src.name}", src)
            codes = b.load_global(b.global_view(x, src, view), [0, 0], layout)
            arguments.append(packed_codes(rng, src, 64 * 8))
            for dst in (dtypes.f16, dtypes.bf16):
                for order, out_layout in (("", layout), ("_t", reordered)):
                    y = b.array_param(f"y_{src.name}_{dst.name}{order}", dst)
                    converted = b.cast(codes, dst, out_layout)
                    b.store_global(b.global_view(y, dst, view), converted, [0, 0])
                    arguments.append(packed_codes(rng, dst, 64 * 8))
    return FeatureCase(
        "fast_casts", b.program(), tuple(arguments), (1,), emulated_arch=EMULATED_ARCH
    )


def _ticket_views(b: ProgramBuilder, parts: int, width: int, counters: int):
    """The parameters x, partial (f32, `parts` rows of `width`), counters (`counters` i32)
    and y (f32, one row) of a ticketed sum over a grid of `parts` blocks, and their views."""
    x, partial = b.array_param("x", dtypes.f32), b.array_param("partial", dtypes.f32)
    counter, y = b.array_param("counters", dtypes.i32), b.array_param("y", dtypes.f32)
    b.grid(parts)
    rows = GlobalLayout((parts, width), (width, 1))
    return (
        b.global_view(x, dtypes.f32, rows),
        b.global_view(partial, dtypes.f32, rows),
        b.global_view(counter, dtypes.i32, GlobalLayout((counters,), (1,))),
        b.global_view(y, dtypes.f32, GlobalLayout((1, width), (width, 1))),
    )


def _ticket_arguments(rng: np.random.Generator, parts: int, width: int) -> tuple:
    """Arguments of `_ticket_views`' parameters: x random, the parts and counters zero."""
    return (
        packed_codes(rng, dtypes.f32, parts * width),
        np.zeros(parts * width * 4, dtype=np.uint8),
        np.zeros(16, dtype=np.uint8),
        packed_codes(rng, dtypes.f32, width),
    )


def _ticketed_sum(rng: np.random.Generator) -> FeatureCase:
    """Blocks store partial results; the block whose `atomic_add` ticket comes last adds every
    block's partial in block order, stores the sum and resets the counter (the fused split-k
    sum of the decode kernel)."""
    parts, width = 5, 256
    with ProgramBuilder("ticketed_sum", 64) as b:
        x_view, parts_view, counter_view, y_view = _ticket_views(b, parts, width, 1)
        layout = spatial(1, 64).local(1, 4)
        mine = b.load_global(x_view, [b.block_x, 0], layout)
        b.store_global(parts_view, b.mul(mine, mine), [b.block_x, 0])
        ticket = b.atomic_add(counter_view, [0])
        with b.if_(ticket.eq(parts - 1)):
            every = b.load_global(parts_view, [0, 0], local(parts, 1) * layout)
            total = b.reduce(every, 0, "sum", keepdim=True)
            b.store_global(y_view, total, [0, 0])
            zero = b.register_tensor(dtypes.i32, replicate(64).reshape(1), 0)
            b.store_global(counter_view, zero, [0])
    arguments = _ticket_arguments(rng, parts, width)
    return FeatureCase("ticketed_sum", b.program(), arguments, (parts,))


def _nan_moves(rng: np.random.Generator) -> FeatureCase:
    """Every NaN code of f16 (and every code of f8e5m2) through the moves, which keep codes
    bit for bit (the contract's first NaN class): a shared-memory round trip, copy_async, a
    view as bytes, where, neg and abs (sign-bit operations on the code)."""
    threads = 128
    inputs = {}
    for dtype in (dtypes.f16, dtypes.f8e5m2):
        codes = np.arange(1 << dtype.nbits)
        nans = codes[np.isnan(dtype.decode(codes))]
        count = -(-(1 << dtype.nbits if dtype.nbits == 8 else nans.size) // 1024) * 1024
        chosen = codes if dtype.nbits == 8 else nans
        filled = np.resize(rng.permutation(chosen), count)
        inputs[dtype] = (count, dtypes.pack(filled, dtype))
    with ProgramBuilder("nan_moves", threads) as b:
        condition = None
        for dtype, (count, _) in inputs.items():
            x = b.array_param(f"x_{dtype.name}", dtype)
            outs = [
                b.array_param(f"{name}_{dtype.name}", dtype)
                for name in ("shared", "async", "where", "neg", "abs")
            ]
            raw = b.array_param(f"bytes_{dtype.name}", dtypes.u8)
            line = GlobalLayout((count,), (1,))
            layout = spatial(threads).local(count // threads)
            source = b.global_view(x, dtype, line)
            values = b.load_global(source, [0], layout)
            staged = b.shared_tensor(dtype, shared_row_major(count))
            b.store_shared(staged, values)
            copied = b.shared_tensor(dtype, shared_row_major(count))
            b.copy_async(copied, source, [0])
            b.copy_async_commit()
            b.copy_async_wait(0)
            b.sync()
            condition = b.register_tensor(dtypes.u1, layout, 1)
            results = (
                b.load_shared(staged, layout),
                b.load_shared(copied, layout),
                b.where(condition, values, b.neg(values)),
                b.neg(values),
                b.abs(values),
            )
            for out, result in zip(outs, results):
                b.store_global(b.global_view(out, dtype, line), result, [0])
            size = count * dtype.nbits // 8
            as_bytes = b.view(values, dtypes.u8, spatial(threads).local(size // threads))
            b.store_global(
                b.global_view(raw, dtypes.u8, GlobalLayout((size,), (1,))), as_bytes, [0]
            )
    arguments = []
    for dtype, (count, stream) in inputs.items():
        arguments.append(stream)
        arguments += [np.zeros_like(stream) for _ in range(5)]
        arguments.append(np.zeros(count * dtype.nbits // 8, dtype=np.uint8))
    return FeatureCase("nan_moves", b.program(), tuple(arguments), (1,))


def _nan_casts(rng: np.random.Generator) -> FeatureCase:
    """Every code of f16 and bf16 cast to f32 twice: once stored (the cast keeps a NaN's sign,
    the contract's second class), once only multiplied by f32 (a NaN product is a positive
    NaN whatever NaN the cast gave: the lowering may widen it with the bare hardware
    conversion)."""
    threads, per_thread, count = 128, 4, 1 << 16
    block = threads * per_thread
    layout = spatial(threads).local(per_thread)
    line = GlobalLayout((count,), (1,))
    arguments: list[Any] = []
    with ProgramBuilder("nan_casts", threads) as b:
        for dtype in (dtypes.f16, dtypes.bf16):
            x = b.array_param(f"x_{dtype.name}", dtype)
            y = b.array_param(f"y_{dtype.name}", dtypes.f32)
            kept = b.array_param(f"cast_{dtype.name}", dtypes.f32)
            product = b.array_param(f"product_{dtype.name}", dtypes.f32)
            origin = [b.block_x * block]
            values = b.load_global(b.global_view(x, dtype, line), origin, layout)
            factors = b.load_global(b.global_view(y, dtypes.f32, line), origin, layout)
            b.store_global(
                b.global_view(kept, dtypes.f32, line), b.cast(values, dtypes.f32), origin
            )
            scaled = b.mul(b.cast(values, dtypes.f32), factors)
            b.store_global(b.global_view(product, dtypes.f32, line), scaled, origin)
            codes = rng.permutation(count)
            factor_codes = dtypes.f32.encode(rng.uniform(-2, 2, count).astype(np.float32))
            arguments += [dtypes.pack(codes, dtype), dtypes.pack(factor_codes, dtypes.f32)]
            arguments += [np.zeros(count * 4, dtype=np.uint8) for _ in range(2)]
    return FeatureCase("nan_casts", b.program(), tuple(arguments), (count // block,))


def _nan_reductions(rng: np.random.Generator) -> FeatureCase:
    """reduce_max, reduce_sum and reduce_min of f8e5m2 and f16 tiles whose codes include NaNs
    of both signs: max and sum over a dimension of one element (nothing to combine), min over
    one of four. A reduction is arithmetic (the contract's third class), so every NaN it gives
    is the positive quiet NaN, the lone element's included, which a bare decode and encode
    would pass on with its sign."""
    threads, rows = 32, 64
    shapes = {"max": (rows, 1), "sum": (rows, 1), "min": (rows, 4)}
    arguments: list[Any] = []
    with ProgramBuilder("nan_reductions", threads) as b:
        for dtype in (dtypes.f8e5m2, dtypes.f16):
            for reduction, shape in shapes.items():
                x = b.array_param(f"x_{reduction}_{dtype.name}", dtype)
                out = b.array_param(f"out_{reduction}_{dtype.name}", dtype)
                layout = local(2, 1).spatial(threads, 1).local(1, shape[1])
                view = GlobalLayout(shape, (shape[1], 1))
                tile = b.load_global(b.global_view(x, dtype, view), [0, 0], layout)
                result = b.reduce(tile, 1, reduction, keepdim=True)
                b.store_global(
                    b.global_view(out, dtype, GlobalLayout((rows, 1), (1, 1))), result, [0, 0]
                )
                codes = _random_codes(rng, dtype, rows * shape[1])
                top = 1 << (dtype.nbits - 1)
                nans = (top - 1, 2 * top - 1, top - 2, 2 * top - 2)  # +-NaN, two payloads each
                codes[::3] = np.resize(nans, codes[::3].size)
                arguments += [
                    dtypes.pack(codes, dtype),
                    np.zeros(rows * dtype.nbits // 8, np.uint8),
                ]
    return FeatureCase("nan_reductions", b.program(), tuple(arguments), (1,))


FMA_EDGE_CASES = (
    # (a, b, c): a double rounding through float64 would get the first wrong (the exact sum
    # lies just below a float32 midpoint that float64 rounds onto); an exact tie; signed
    # zeros; inf * 0 (NaN); an overflow; a product below float32's range that the sum keeps.
    (2.0**-24 * (1 + 2.0**-23), 1 - 2.0**-23, 1 + 2.0**-23),
    (1 + 2.0**-12, 1 + 2.0**-12, -(2.0**-11)),
    (-1.0, 0.0, -0.0),
    (-1.0, 0.0, 0.0),
    (float("inf"), 0.0, 1.0),
    (2.0**127, 2.0, 0.0),
    (2.0**-100, 2.0**-100, 2.0**-149),
)


def _fused_multiply_add(rng: np.random.Generator) -> FeatureCase:
    """``fma(a, b, c)`` on f32: the edge cases of `FMA_EDGE_CASES`, then random triples over a
    wide range of magnitudes, rounded once (bit-exact on the host and the GPU)."""
    count = 256
    edges = np.array(FMA_EDGE_CASES, dtype=np.float32)
    values = (rng.standard_normal((count, 3)) * 2.0 ** rng.integers(-30, 30, (count, 3))).astype(
        np.float32
    )
    values[: len(edges)] = edges
    line = GlobalLayout((count,), (1,))
    with ProgramBuilder("fused_multiply_add", 64) as b:
        params = [b.array_param(name, dtypes.f32) for name in ("a", "b", "c", "out")]
        layout = spatial(64).local(count // 64)
        a, b_, c = (
            b.load_global(b.global_view(x, dtypes.f32, line), [0], layout) for x in params[:3]
        )
        b.store_global(b.global_view(params[3], dtypes.f32, line), b.fma(a, b_, c), [0])
    arguments = tuple(
        dtypes.pack(dtypes.f32.encode(values[:, j]), dtypes.f32) for j in range(3)
    ) + (np.zeros(4 * count, dtype=np.uint8),)
    return FeatureCase("fused_multiply_add", b.program(), arguments, (1,))


def _thread_groups(rng: np.random.Generator) -> FeatureCase:
    """Thread groups: a group of two warps stores a tile to shared memory, a block barrier hands
    it on, and two nested groups of two warps each reduce it across their warps at the same
    time (each group its own scratch and named barrier), one of them also bulk-copying a tile
    of its own and waiting for it, the other passing its own barrier before its store."""
    f32, f16 = dtypes.f32, dtypes.f16
    with ProgramBuilder("thread_groups", 192) as b:
        x = b.global_view(b.array_param("x", f32), f32, GlobalLayout((4, 128), (128, 1)))
        sums = b.global_view(b.array_param("sums", f32), f32, GlobalLayout((4,), (1,)))
        peaks = b.global_view(b.array_param("peaks", f32), f32, GlobalLayout((128,), (1,)))
        z = b.global_view(b.array_param("z", f16), f16, GlobalLayout((16, 32), (32, 1)))
        w = b.global_view(b.array_param("w", f16), f16, GlobalLayout((32,), (1,)))
        tile = b.shared_tensor(f32, shared_row_major(4, 128))
        ring = b.shared_tensor(f16, shared_row_major(16, 32))
        with b.thread_group(0, 64):
            values = b.load_global(x, [0, 0], spatial(1, 64).local(4, 2))
            b.store_shared(tile, b.mul(values, 2.0), [0, 0])
        b.sync()
        with b.thread_group(64, 128):
            with b.thread_group(0, 64):
                rows = b.load_shared(tile, spatial(1, 64).local(4, 2), [0, 0])
                b.store_global(sums, b.reduce(rows, 1, "sum"), [0])
                b.copy_bulk(ring, z, [0, 0], [0, 0])
                b.copy_bulk_wait(ring, [0, 0], shape=(16, 32))
                codes = b.load_shared(ring, spatial(2, 32).local(8, 1), [0, 0])
                b.store_global(w, b.reduce(codes, 0, "max"), [0])
            with b.thread_group(64, 64):
                columns = b.load_shared(tile, spatial(4, 16).local(1, 8), [0, 0])
                peak = b.reduce(columns, 0, "max")
                b.sync()
                b.store_global(peaks, b.add(peak, 1.0), [0])
    arguments = (
        packed_codes(rng, f32, 4 * 128),
        packed_codes(rng, f32, 4),
        packed_codes(rng, f32, 128),
        packed_codes(rng, f16, 16 * 32),
        packed_codes(rng, f16, 32),
    )
    return FeatureCase("thread_groups", b.program(), arguments, (1,))


def _register_budgets(rng: np.random.Generator) -> FeatureCase:
    """A warp-specialised tail with register budgets: the block stages a tile in shared memory
    and passes a barrier; then, to the end, two warpgroups run their own loops (a thread
    group each, its budget set first on sm_90a: 232 registers for the first, 24 for the
    second, of the 128 a thread that two blocks an SM leave): the first sums the tile's rows
    into an accumulator held across its loop's bodies, the second takes a running maximum
    under its own barrier."""
    f32 = dtypes.f32
    rows_layout = spatial(1, 128).local(4, 1)
    with ProgramBuilder("register_budgets", 256) as b:
        b.min_blocks_per_sm(2)
        x = b.global_view(b.array_param("x", f32), f32, GlobalLayout((12, 128), (128, 1)))
        sums = b.global_view(b.array_param("sums", f32), f32, GlobalLayout((128,), (1,)))
        peaks = b.global_view(b.array_param("peaks", f32), f32, GlobalLayout((4, 128), (128, 1)))
        tile = b.shared_tensor(f32, shared_row_major(12, 128))
        b.store_shared(tile, b.load_global(x, [0, 0], spatial(2, 128).local(6, 1)), [0, 0])
        b.sync()
        with b.thread_group(0, 128, registers=232):
            total = b.register_tensor(f32, reduce_layout(rows_layout, [0]), 0.0)
        with b.thread_group(128, 128, registers=24):
            peak = b.register_tensor(f32, rows_layout, -1.0)
        with b.for_range(3) as step:
            with b.thread_group(0, 128, registers=232):
                rows = b.load_shared(tile, rows_layout, [step * 4, 0])
                b.assign(total, b.add(total, b.reduce(rows, 0, "sum")))
            with b.thread_group(128, 128, registers=24):
                rows = b.load_shared(tile, rows_layout, [step * 4, 0])
                b.sync()
                b.assign(peak, b.maximum(peak, rows))
        with b.thread_group(0, 128, registers=232):
            b.store_global(sums, total, [0])
        with b.thread_group(128, 128, registers=24):
            b.store_global(peaks, peak, [0, 0])
    arguments = (
        packed_codes(rng, f32, 12 * 128),
        packed_codes(rng, f32, 128),
        packed_codes(rng, f32, 4 * 128),
    )
    return FeatureCase(
        "register_budgets", b.program(), arguments, (1,), emulated_arch=EMULATED_ARCH
    )


def _group_tickets(rng: np.random.Generator) -> FeatureCase:
    """The ticketed sum in two thread groups at the same time: in each of 3 blocks, each of two
    warpgroups stores its part of a row and takes a ticket on its own counter (`atomic_add` in
    a group: under the group's barrier, through a slot of the group's); the group whose
    ticket comes last adds the 3 parts in block order, stores the sum and resets its counter.
    The groups run to the end of the kernel, so it is warp-specialised."""
    parts, width = 3, 256
    layout = spatial(1, 128)
    with ProgramBuilder("group_tickets", 256) as b:
        x_view, parts_view, counter_view, y_view = _ticket_views(b, parts, width, 2)
        for group in range(2):
            column = 128 * group
            with b.thread_group(column, 128):
                mine = b.load_global(x_view, [b.block_x, column], layout)
                b.store_global(parts_view, b.add(mine, float(group)), [b.block_x, column])
                ticket = b.atomic_add(counter_view, [group])
                with b.if_(ticket.eq(parts - 1)):
                    total = b.load_global(parts_view, [0, column], layout)
                    with b.for_range(1, parts) as part:
                        term = b.load_global(parts_view, [part, column], layout)
                        b.assign(total, b.add(total, term))
                    b.store_global(y_view, total, [0, column])
                    zero = b.register_tensor(dtypes.i32, replicate(128).reshape(1), 0)
                    b.store_global(counter_view, zero, [group])
    return FeatureCase("group_tickets", b.program(), _ticket_arguments(rng, parts, width), (parts,))


def _many_tickets(rng: np.random.Generator) -> FeatureCase:
    """The ticketed sum over many blocks (twice an H100's or H200's SMs): each of 264 blocks
    of 128 threads (four warps) stores a 16-byte vector a thread, its last store right before its
    ticket, and the last block adds the 264 parts in block order, one a step of a loop. Every
    warp's stores must be visible to the last block through the one thread's ticket
    (`cuda_codegen.TICKET_SOURCE`), not only the stores of the ticket's own warp."""
    parts, width = 264, 512
    layout = spatial(1, 128).local(1, 4)
    with ProgramBuilder("many_tickets", 128) as b:
        x_view, parts_view, counter_view, y_view = _ticket_views(b, parts, width, 1)
        mine = b.load_global(x_view, [b.block_x, 0], layout)
        b.store_global(parts_view, b.fma(mine, mine, mine), [b.block_x, 0])
        ticket = b.atomic_add(counter_view, [0])
        with b.if_(ticket.eq(parts - 1)):
            total = b.load_global(parts_view, [0, 0], layout)
            with b.for_range(1, parts) as part:
                b.assign(total, b.add(total, b.load_global(parts_view, [part, 0], layout)))
            b.store_global(y_view, total, [0, 0])
            zero = b.register_tensor(dtypes.i32, replicate(128).reshape(1), 0)
            b.store_global(counter_view, zero, [0])
    return FeatureCase("many_tickets", b.program(), _ticket_arguments(rng, parts, width), (parts,))


def _paired_half_casts(rng: np.random.Generator) -> FeatureCase:
    """f32 -> f16 casts of 32 values a thread (16 output words, each one paired conversion):
    magnitudes from below f16's subnormals to past its overflow, and a NaN of either sign with
    a random payload in about one value of 64, which the paired conversion must give the
    canonical code with its sign (the hardware's own NaN is positive)."""
    threads, per_thread = 64, 32
    count = threads * per_thread
    values = rng.standard_normal(count) * 2.0 ** rng.integers(-30, 20, count)
    codes = dtypes.f32.encode(values.astype(np.float32)).astype(np.int64)
    nan = rng.random(count) < 1 / 64
    payloads = rng.integers(1, 1 << 23, count)
    signs = rng.integers(0, 2, count) << 31
    codes[nan] = signs[nan] | 0x7F800000 | payloads[nan]
    line = GlobalLayout((count,), (1,))
    with ProgramBuilder("paired_half_casts", threads) as b:
        x = b.array_param("x", dtypes.f32)
        out = b.array_param("out", dtypes.f16)
        values_in = b.load_global(
            b.global_view(x, dtypes.f32, line), [0], spatial(threads).local(per_thread)
        )
        b.store_global(b.global_view(out, dtypes.f16, line), b.cast(values_in, dtypes.f16), [0])
    arguments = (dtypes.pack(codes, dtypes.f32), np.zeros(2 * count, dtype=np.uint8))
    return FeatureCase("paired_half_casts", b.program(), arguments, (1,))


def _prefetches(rng: np.random.Generator) -> FeatureCase:
    """`prefetch_global` ahead of the loads of three tiles that overhang their tensors: f32 rows
    (16-byte vectors, one bounds check a vector), u4 codes read element by element (sub-byte
    prefetches of the byte holding each code) and f16 columns of a column-major view (2-byte
    elements one at a time); the rows into L1, the codes and the columns into L2. All three
    are prefetched first, then each is copied to its output unchanged."""
    rows, cols = 6, 40
    with ProgramBuilder("prefetches", 64) as b:
        m = b.int_param("m")
        params = [
            b.array_param(name, dtype)
            for name, dtype in (("x", dtypes.f32), ("codes", dtypes.u4), ("h", dtypes.f16))
        ]
        outputs = [b.array_param(f"out_{param.name}", param.dtype) for param in params]
        b.grid(2)
        rows_at = [b.block_x * 4, 0]
        tiles = (  # (layout of the tile, view, origin)
            (local(2, 1).spatial(2, 32).local(1, 4), GlobalLayout((m, 128), (128, 1)), rows_at),
            (spatial(4, 16).local(1, 3), GlobalLayout((m, cols), (cols, 1)), rows_at),
            (
                spatial(16, 4).local(1, 2),
                GlobalLayout((m * 4, 8), (1, rows * 4)),
                [b.block_x * 16, 0],
            ),
        )
        for param, level, (layout, view, origin) in zip(params, ("L1", "L2", "L2"), tiles):
            tensor = b.global_view(param, param.dtype, view)
            b.prefetch_global(tensor, origin, layout, level=level)
        for param, out, (layout, view, origin) in zip(params, outputs, tiles):
            values = b.load_global(b.global_view(param, param.dtype, view), origin, layout)
            b.store_global(b.global_view(out, out.dtype, view), values, origin)
    arguments = (
        rows,
        packed_codes(rng, dtypes.f32, rows * 128),
        packed_codes(rng, dtypes.u4, rows * cols),
        packed_codes(rng, dtypes.f16, rows * 4 * 8),
        np.zeros(rows * 128 * 4, dtype=np.uint8),
        np.zeros(rows * cols // 2, dtype=np.uint8),
        np.zeros(rows * 4 * 8 * 2, dtype=np.uint8),
    )
    return FeatureCase("prefetches", b.program(), arguments, (2,))


COMBINE_EDGE_CODES = {
    # Codes whose one add gives the same bits in any order: subnormals (f32 flushes them to
    # zero of their sign, f16 and bf16 keep them), signed zeros, infinities, NaNs of both
    # signs, the smallest normal, one.
    dtypes.f32: (
        *(0x00000001, 0x80000001, 0x007FFFFF, 0x80000000, 0x7F800000),
        *(0xFF800000, 0x7FC00001, 0xFFC00000, 0x00800000, 0x3F800000),
    ),
    dtypes.f16: (0x0001, 0x8001, 0x03FF, 0x8000, 0x7C00, 0xFC00, 0x7E01, 0xFE00, 0x0400, 0x3C00),
    dtypes.bf16: (0x0001, 0x8001, 0x007F, 0x8000, 0x7F80, 0xFF80, 0x7FC1, 0xFFC0, 0x0080, 0x3F80),
}
"""Per float type of `_combining_stores`, the codes it adds once to one another."""


def _combining_stores(rng: np.random.Generator) -> FeatureCase:
    """`store_global(..., combine="add")` from four blocks of 64 threads, for i32, f32, f16 and
    bf16, in ways whose results are the same bits in any order of the adds: every block adds
    its row of x into one row `sum` through a layout replicated four times (each element added
    once; i32 codes at random, which wrap, floats small integers, whose sums are exact), eight
    consecutive elements a thread (the floats' 16-byte vector adds); each block adds its row of
    y into its own row of `own`, once, two elements a thread (for the floats, every third
    element of `own` one of the codes of `COMBINE_EDGE_CODES`, every other element of y one of
    half of them: positive subnormals, infinity and NaN, the smallest normal); and every
    element of i32's x added into one element, `total`, through a view of stride 0."""
    blocks, width, threads = 4, 128, 64
    replicated = (spatial(1, threads // 4) * replicate(4)).local(1, 4 * width // threads)
    dense = spatial(1, threads).local(1, width // threads)
    rows = GlobalLayout((blocks, width), (width, 1))
    arguments: list[Any] = []
    with ProgramBuilder("combining_stores", threads) as b:
        b.grid(blocks)
        for dtype in (dtypes.i32, dtypes.f32, dtypes.f16, dtypes.bf16):
            x, y, total_row, own = (
                b.array_param(f"{name}_{dtype.name}", dtype) for name in ("x", "y", "sum", "own")
            )
            x_view = b.global_view(x, dtype, rows)
            row = b.load_global(x_view, [b.block_x, 0], replicated)
            row_view = b.global_view(total_row, dtype, GlobalLayout((1, width), (width, 1)))
            b.store_global(row_view, row, [0, 0], combine="add")
            mine = b.load_global(b.global_view(y, dtype, rows), [b.block_x, 0], dense)
            b.store_global(b.global_view(own, dtype, rows), mine, [b.block_x, 0], combine="add")
            if dtype == dtypes.i32:
                every = b.load_global(x_view, [b.block_x, 0], dense)
                one = b.global_view(
                    b.array_param("total_i32", dtype), dtype, GlobalLayout((1, width), (0, 0))
                )
                b.store_global(one, every, [0, 0], combine="add")
                codes = [_random_codes(rng, dtype, n) for n in (blocks * width,) * 2 + (width,)]
                codes.append(_random_codes(rng, dtype, blocks * width))
                codes.append(_random_codes(rng, dtype, 1))
            else:
                edges = np.resize(COMBINE_EDGE_CODES[dtype], blocks * width)
                y_codes = _random_codes(rng, dtype, blocks * width)
                y_codes[::2] = edges[::2]
                own_codes = _random_codes(rng, dtype, blocks * width)
                own_codes[::3] = np.resize(edges[::-1], own_codes[::3].size)
                small = [rng.integers(-8, 9, n).astype(np.float32) for n in (blocks * width, width)]
                codes = [dtype.encode(small[0]), y_codes, dtype.encode(small[1]), own_codes]
            arguments += [dtypes.pack(c, dtype) for c in codes]
    return FeatureCase("combining_stores", b.program(), tuple(arguments), (blocks,))


COMBINING_RUNS = {dtypes.f32: 4, dtypes.f16: 8, dtypes.bf16: 8}
"""Per type of `_combining_runs`, the elements of a thread's run: 16 bytes, one vector add."""


def _combining_runs(rng: np.random.Generator) -> FeatureCase:
    """Vector combining adds that meet the tensor's end: for each type of `COMBINING_RUNS`,
    four blocks of 16 threads add their row of x into one row `sum` of n = 16 * run - 3
    elements, a run of consecutive elements a thread. Inside the row a run is one vector add;
    the last thread's run is added element by element, its three elements past n not at all
    (the sum's buffer holds 16 * run elements: the last three must stay as they were). Small
    integers, whose sums are exact in any order of the adds."""
    blocks, threads = 4, 16
    arguments: list[Any] = []
    with ProgramBuilder("combining_runs", threads) as b:
        b.grid(blocks)
        for dtype, run in COMBINING_RUNS.items():
            width = threads * run
            n = b.int_param(f"n_{dtype.name}")
            x = b.array_param(f"x_{dtype.name}", dtype)
            total = b.array_param(f"sum_{dtype.name}", dtype)
            rows = b.global_view(x, dtype, GlobalLayout((blocks, width), (width, 1)))
            row = b.load_global(rows, [b.block_x, 0], spatial(1, threads).local(1, run))
            view = b.global_view(total, dtype, GlobalLayout((1, n), (n, 1)))
            b.store_global(view, row, [0, 0], combine="add")
            small = [rng.integers(-8, 9, k).astype(np.float32) for k in (blocks * width, width)]
            arguments += [width - 3, *(dtypes.pack(dtype.encode(v), dtype) for v in small)]
    return FeatureCase("combining_runs", b.program(), tuple(arguments), (blocks,))


def feature_cases() -> list[FeatureCase]:
    """Every feature program with fixed random inputs."""
    rng = np.random.default_rng(17)
    makers = (
        _copy_tiles,
        _swizzle_slices,
        _reductions,
        _replicated_operands,
        _views,
        _integer_ops,
        _shared_bytes,
        _sub_byte_copy_edges,
        _scaled_casts,
        _control_flow,
        _transcendentals,
        _tensor_cores,
        _fast_casts,
        _ticketed_sum,
        _nan_moves,
        _nan_casts,
        _nan_reductions,
        _fused_multiply_add,
        _thread_groups,
        _register_budgets,
        _group_tickets,
        _paired_half_casts,
        _prefetches,
        _combining_stores,
        _combining_runs,
        _many_tickets,
    )
    return [make(rng) for make in makers]

"""Random programs of register computation and control flow: views, dots over k loops (SIMT,
staged and tensor-core layouts), and loops with `assign` and ifs."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.elementwise import (
    apply_binary,
    fused_multiply_add,
    to_values,
)
from ir.errors import VerificationError
from ir.examples.matmul import (
    mma_dot_layouts,
    simt_dot_layouts,
    warp_grid,
    wgmma_b_buffer,
    wgmma_dot_layouts,
)
from ir.testing.cases import (
    CASE_DTYPES,
    CHAIN_FLOAT_BINARY,
    CHAIN_INT_BINARY,
    ProgramCase,
    chain_constant,
    draw_constants,
    draw_threads,
    grid_and_tensor,
    random_codes,
    register_layouts,
    store_expected,
)
from layout_algebra.auto import auto_local_spatial
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.hardware import WARP_SIZE
from layout_algebra.register import RegisterLayout, local, replicate
from layout_algebra.shared import (
    SharedLayout,
    shared_row_major,
    shared_row_major_swizzle,
)
from layout_algebra.symbolic import Expr


def _view_pairs() -> tuple[tuple[DataType, int, DataType, int], ...]:
    """(source type, count, target type, count) for every ordered pair of case types whose
    widths' least common multiple `bits` is at most 32; `count` elements of each fill `bits`."""
    pairs = []
    for source in CASE_DTYPES:
        for target in CASE_DTYPES:
            bits = math.lcm(source.nbits, target.nbits)
            if bits <= 32:
                pairs.append((source, bits // source.nbits, target, bits // target.nbits))
    return tuple(pairs)


_VIEW_PAIRS = _view_pairs()


def _canonical(dtype: DataType, codes: np.ndarray) -> np.ndarray:
    """The codes that registers loaded with `codes` hold (NaNs of floats narrower than f32 lose
    their payload; everything else is kept)."""
    return dtype.encode(to_values(dtype, codes)).astype(np.int64)


def _padded(values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """`values` in the leading corner of a zero array of `shape` (what masked loads read)."""
    padded = np.zeros(shape, dtype=values.dtype)
    padded[tuple(slice(0, extent) for extent in values.shape)] = values
    return padded


def _split_elements(layout: RegisterLayout, count: int) -> RegisterLayout:
    """``layout * local(1, count)``: each element becomes `count` neighbours along the last
    dimension, held by its thread at consecutive local indices (the new index fastest)."""
    return layout if count == 1 else layout * local(1, count)


@st.composite
def view_cases(draw: Callable[..., Any]) -> ProgramCase:
    """A masked tile loaded, `view`-ed as another type and stored with row padding.

    With a random base layout L and a pair (source, c_s, target, c_t) of `_VIEW_PAIRS`, the
    tile is loaded in ``L * local(1, c_s)`` and viewed in ``L * local(1, c_t)``: each base
    element's bits are c_s source codes, re-split into c_t target codes, so threads that
    replicate an element keep equal bits. The expected output packs each thread's codes in
    local order into the LSB-first bitstream (`dtypes.pack`), unpacks it as the target type and
    places the codes by the target layout; elements outside the tensor read 0.
    """
    num_threads = draw_threads(draw)
    source, source_count, target, target_count = draw(st.sampled_from(_VIEW_PAIRS))
    base = draw(
        register_layouts(num_threads, 2, max_local=max(1, 16 // max(source_count, target_count)))
    )
    source_layout = _split_elements(base, source_count)
    target_layout = _split_elements(base, target_count)
    rows, source_cols = source_layout.shape
    target_cols = target_layout.shape[1]
    grid_x, grid_y = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    m = draw(st.integers((grid_y - 1) * rows + 1, grid_y * rows))
    n_source = draw(st.integers((grid_x - 1) * source_cols + 1, grid_x * source_cols))
    n_target = draw(st.integers((grid_x - 1) * target_cols + 1, grid_x * target_cols))
    padding = draw(st.integers(0, 3))
    x_codes = _canonical(source, random_codes(draw, source, m * n_source))
    out_initial = random_codes(draw, target, m * (n_target + padding))
    constant_names = draw_constants(draw, ("m", "n_source", "n_target"))
    with ProgramBuilder("view", num_threads) as b:
        m_var, source_var, target_var = (
            b.int_param(name, constant=name in constant_names)
            for name in ("m", "n_source", "n_target")
        )
        x = b.array_param("x", source)
        out = b.array_param("out", target)
        x_view = b.global_view(x, source, GlobalLayout((m_var, source_var), (source_var, 1)))
        out_view = b.global_view(
            out, target, GlobalLayout((m_var, target_var), (target_var + padding, 1))
        )
        tile = b.load_global(x_view, [b.block_y * rows, b.block_x * source_cols], source_layout)
        viewed = b.view(tile, target, target_layout)
        b.store_global(out_view, viewed, [b.block_y * rows, b.block_x * target_cols])
    source_codes = _padded(x_codes.reshape(m, n_source), (grid_y * rows, grid_x * source_cols))
    target_codes = np.zeros((grid_y * rows, grid_x * target_cols), dtype=np.int64)
    source_table, target_table = source_layout.table(), target_layout.table()
    for block_y in range(grid_y):
        for block_x in range(grid_x):
            source_tile = source_codes[
                block_y * rows : (block_y + 1) * rows,
                block_x * source_cols : (block_x + 1) * source_cols,
            ]
            target_tile = target_codes[
                block_y * rows : (block_y + 1) * rows,
                block_x * target_cols : (block_x + 1) * target_cols,
            ]
            # Every thread holds the same number of bits, so thread t's bits are the t-th
            # equal segment of the stream of all threads' codes in (thread, local) order.
            held = source_tile[source_table[..., 0], source_table[..., 1]]
            stream = dtypes.pack(held, source)
            resplit = dtypes.unpack(stream, target, target_table.shape[0] * target_table.shape[1])
            target_tile[target_table[..., 0], target_table[..., 1]] = resplit.reshape(
                target_table.shape[:2]
            )
    values = to_values(target, target_codes[:m, :n_target])
    return ProgramCase(
        program=b.program(),
        arguments=(
            m,
            n_source,
            n_target,
            dtypes.pack(x_codes, source),
            dtypes.pack(out_initial, target),
        ),
        grid=(grid_x, grid_y),
        output=4,
        output_dtype=target,
        output_count=m * (n_target + padding),
        expected=store_expected(out_initial, values, target, padding),
        description=f"view {source} {source_layout!r} -> {target} {target_layout!r}",
    )


_UNROLLS = (1, 2, 3, 4)
"""The unroll counts random loops draw (`ForRange.unroll`)."""


_DOT_MODES = ("simt", "tensor_cores", "warp", "warpgroup")
"""How `dot_cases` lays out its operands (see its docstring)."""


_MMA_TOLERANCE = 2.0**-18
"""Tolerance of a tensor-core dot relative to |c| + sum_k |a b|: the tensor core adds the 16
products of a k step in its own order and precision, a few units of f32 rounding."""


def _operand_layouts(num_threads: int, shape: tuple[int, int]) -> tuple[RegisterLayout, ...]:
    """Layouts of a (rows, cols) dot operand: threads spread over the columns first, over the
    rows first, or every thread holding the whole tile."""
    rows, cols = shape
    return (
        auto_local_spatial(num_threads, shape),
        auto_local_spatial(num_threads, (cols, rows)).permute(1, 0),
        local(rows, cols) * replicate(num_threads),
    )


def _dot_operand_codes(draw: Callable[..., Any], dtype: DataType, count: int) -> np.ndarray:
    """Finite codes of `dtype`: small integers (every sum exact in any order), normal values, or
    normal values scaled by 2^-12 .. 2^12 (f16 subnormals, large exponents)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(("integers", "normal", "scaled")))
    if kind == "integers":
        values = rng.integers(-4, 5, count).astype(np.float64)
    elif kind == "normal":
        values = rng.standard_normal(count)
    else:
        values = rng.standard_normal(count) * np.exp2(rng.integers(-12, 13, count))
    return dtype.encode(values.astype(np.float32)).astype(np.int64)


def _draw_dot_layouts(
    draw: Callable[..., Any], mode: str
) -> tuple[int, int, RegisterLayout, RegisterLayout, RegisterLayout]:
    """(num_threads, inner_k, a, b, c layouts) of one dot of `mode`."""
    if mode == "simt":
        num_threads = draw(st.sampled_from((4, 8, 32, 64)))
        block_n = draw(st.sampled_from((8, 16)))
        block_m = num_threads // (block_n // 8) * draw(st.integers(1, 2))
        inner_k = draw(st.sampled_from((1, 2, 4, 8)))
        return (num_threads, inner_k, *simt_dot_layouts(num_threads, block_m, block_n, inner_k))
    if mode == "tensor_cores":
        num_threads = draw(st.sampled_from((WARP_SIZE, 2 * WARP_SIZE)))
        warps_m, warps_n = warp_grid(num_threads // WARP_SIZE)
        block_m = 16 * warps_m * draw(st.integers(1, 2))
        block_n = 8 * warps_n * draw(st.integers(1, 2))
        return (num_threads, 16, *mma_dot_layouts(num_threads, block_m, block_n, 16))
    if mode == "warpgroup":
        num_threads = draw(st.sampled_from((128, 256)))
        block_m = 64 * (num_threads // 128)
        block_n = draw(st.sampled_from((8, 16, 32, 64, 128)))
        inner_k = draw(st.sampled_from((16, 32, 64)))
        return (num_threads, inner_k, *wgmma_dot_layouts(num_threads, block_m, block_n, inner_k))
    # Case "warp": one warp (or fewer threads), so any operand layouts are warp-collective.
    num_threads = draw(st.sampled_from((4, 8, WARP_SIZE)))
    c_layout = draw(register_layouts(num_threads, 2, max_local=4))
    block_m, block_n = c_layout.shape
    inner_k = draw(st.integers(1, 8))
    a_layout = draw(st.sampled_from(_operand_layouts(num_threads, (block_m, inner_k))))
    b_layout = draw(st.sampled_from(_operand_layouts(num_threads, (inner_k, block_n))))
    return num_threads, inner_k, a_layout, b_layout, c_layout


def _dot_buffers(
    mode: str, stages: tuple[int, ...], block_m: int, block_n: int, inner_k: int
) -> tuple[SharedLayout, SharedLayout]:
    """The shared buffers of a staged dot's operands: row-major, or for "warpgroup" the
    swizzled ones whose tiles wgmma descriptors read (B as `ir.examples.matmul.wgmma_b_buffer`
    lays it out)."""
    if mode != "warpgroup":
        return shared_row_major(*stages, block_m, inner_k), shared_row_major(
            *stages, inner_k, block_n
        )
    a_buffer = shared_row_major_swizzle(*stages, block_m, inner_k, element_bits=16)
    return a_buffer, wgmma_b_buffer(inner_k, block_n, *stages)


@st.composite
def dot_cases(draw: Callable[..., Any], modes: tuple[str, ...] = _DOT_MODES) -> ProgramCase:
    """``out = a @ b + c`` over a masked k loop of one to three dots, f16 or bf16 operands, f32.

    Layouts (`mode`, one of `modes`, all four by default): "simt"
    (`ir.examples.matmul.simt_dot_layouts`: every thread holds what it combines),
    "tensor_cores" (`mma_dot_layouts`, 32 or 64 threads: a tensor-core lowering may run them on
    ``mma.sync``, so `tolerance` is set and `exact_on_gpu` is False), "warp" (a random c layout
    of at most 32 threads, operands spread over the warp by `_operand_layouts`, k <= 8: a SIMT
    lowering stages them) or "warpgroup" (`wgmma_dot_layouts`, 128 or 256 threads, always
    through swizzled shared buffers: on sm_90a the lowering may run them as ``wgmma``, so
    `tolerance` is set; a is sometimes read from global memory straight into its registers,
    which wgmma takes as its register operand). The accumulator starts as a
    `register_tensor` constant or is loaded from `c`; the k tiles run in a `for_range` with
    `assign` (unroll 1 to 4, its stop a constant or ``ceil(k / inner_k)`` of the runtime k) or
    are written out in Python; operands come straight from global memory or through shared
    memory (store, sync, load in the dot's layout, sync), into one buffer or into one of two
    chosen by the stage index ``tile % 2`` (which an unrolled lowering makes a constant).
    Elements outside the tensors read 0.
    Expected: in float32, acc = c, then acc = acc + a[:, k] * b[k, :] for k in order (each
    product exact), which a SIMT lowering reproduces bit for bit.
    """
    unknown = set(modes) - set(_DOT_MODES)
    if not modes or unknown:
        raise VerificationError(f"dot_cases: modes {modes!r}; expected some of {_DOT_MODES}")
    mode = draw(st.sampled_from(modes))
    num_threads, inner_k, a_layout, b_layout, c_layout = _draw_dot_layouts(draw, mode)
    operand = draw(st.sampled_from((dtypes.f16, dtypes.bf16)))
    f32 = dtypes.f32
    block_m, block_n = c_layout.shape
    looped = draw(st.sampled_from((True, False)))
    unroll = draw(st.sampled_from(_UNROLLS)) if looped else 1
    steps = draw(st.integers(1, 3 if unroll == 1 else 2 * unroll + 1))
    runtime_steps = looped and draw(st.booleans())
    staged = mode == "warpgroup" or draw(st.booleans())
    # A warpgroup dot may take a from registers (read from global memory) and b from shared.
    a_in_registers = mode == "warpgroup" and draw(st.booleans())
    buffers = draw(st.sampled_from((1, 2))) if staged else 1
    init = draw(st.sampled_from((None, 0.0, 0.5, -1.25)))
    epilogue = draw(st.booleans())  # out = fma(acc, 0.5, acc)
    (grid_x, grid_y), (m, n), padding = grid_and_tensor(draw, (block_m, block_n))
    k = draw(st.integers((steps - 1) * inner_k + 1, steps * inner_k))
    a_codes = _dot_operand_codes(draw, operand, m * k)
    b_codes = _dot_operand_codes(draw, operand, k * n)
    c_codes = _dot_operand_codes(draw, f32, m * n)
    out_initial = random_codes(draw, f32, m * (n + padding))
    constant_names = draw_constants(draw, ("m", "n", "k"))
    with ProgramBuilder("dot", num_threads) as b:
        rows, cols, depth = (
            b.int_param(name, constant=name in constant_names) for name in ("m", "n", "k")
        )
        a_param, b_param = b.array_param("a", operand), b.array_param("b", operand)
        c_param, out = b.array_param("c", f32), b.array_param("out", f32)
        a_view = b.global_view(a_param, operand, GlobalLayout((rows, depth), (depth, 1)))
        b_view = b.global_view(b_param, operand, GlobalLayout((depth, cols), (cols, 1)))
        row0, col0 = b.block_y * block_m, b.block_x * block_n
        if init is None:
            c_view = b.global_view(c_param, f32, GlobalLayout((rows, cols), (cols, 1)))
            accumulator = b.load_global(c_view, [row0, col0], c_layout)
        else:
            accumulator = b.register_tensor(f32, c_layout, init)
        if staged:
            stages = (buffers,) if buffers > 1 else ()
            a_buffer, b_buffer = _dot_buffers(mode, stages, block_m, block_n, inner_k)
            a_shared = b.shared_tensor(operand, a_buffer)
            b_shared = b.shared_tensor(operand, b_buffer)

        def dot_step(tile: Expr | int, partial: Any) -> Any:
            """Emit the dot of k tile `tile` into `partial`; returns its result."""
            a_origin, b_origin = [row0, tile * inner_k], [tile * inner_k, col0]
            if not staged:
                a_tile = b.load_global(a_view, a_origin, a_layout)
                b_tile = b.load_global(b_view, b_origin, b_layout)
                return b.dot(a_tile, b_tile, partial)
            stage = [tile % buffers] if buffers > 1 else []
            operands = [
                (a_shared, a_view, a_origin, (block_m, inner_k)),
                (b_shared, b_view, b_origin, (inner_k, block_n)),
            ]
            for shared, view, origin, tile_shape in operands[a_in_registers:]:
                spread = auto_local_spatial(num_threads, tile_shape)
                b.store_shared(shared, b.load_global(view, origin, spread), [*stage, 0, 0])
            b.sync()
            if a_in_registers:
                a_tile = b.load_global(a_view, a_origin, a_layout)
            else:
                a_tile = b.load_shared(a_shared, a_layout, [*stage, 0, 0])
            result = b.dot(a_tile, b.load_shared(b_shared, b_layout, [*stage, 0, 0]), partial)
            b.sync()
            return result

        if looped:
            stop = (depth + inner_k - 1) // inner_k if runtime_steps else steps
            with b.for_range(0, stop, 1, unroll) as tile:
                b.assign(accumulator, dot_step(tile, accumulator))
        else:
            for tile in range(steps):
                accumulator = dot_step(tile, accumulator)
        if epilogue:
            accumulator = b.fma(accumulator, 0.5, accumulator)
        out_view = b.global_view(out, f32, GlobalLayout((rows, cols), (cols + padding, 1)))
        b.store_global(out_view, accumulator, [row0, col0])
    shape_m, shape_n, shape_k = grid_y * block_m, grid_x * block_n, steps * inner_k
    a_values = _padded(to_values(operand, a_codes).reshape(m, k), (shape_m, shape_k))
    b_values = _padded(to_values(operand, b_codes).reshape(k, n), (shape_k, shape_n))
    if init is None:
        c_values = _padded(to_values(f32, c_codes).reshape(m, n), (shape_m, shape_n))
    else:
        c_values = np.full((shape_m, shape_n), init, dtype=np.float32)
    accumulated = c_values.copy()
    magnitude = np.abs(c_values).astype(np.float64)
    for j in range(shape_k):
        product = a_values[:, j : j + 1] * b_values[j : j + 1, :]
        accumulated = accumulated + product
        magnitude += np.abs(product)
    if epilogue:
        accumulated = fused_multiply_add(accumulated, np.float32(0.5), accumulated)
        magnitude *= 2.0  # the sum's error grows by 1.5 and the fma rounds once more
    tolerance = None
    if mode in ("tensor_cores", "warpgroup"):
        tolerance = _padded(magnitude[:m, :n] * _MMA_TOLERANCE, (m, n + padding)).ravel()
    return ProgramCase(
        program=b.program(),
        arguments=(
            m,
            n,
            k,
            dtypes.pack(a_codes, operand),
            dtypes.pack(b_codes, operand),
            dtypes.pack(c_codes, f32),
            dtypes.pack(out_initial, f32),
        ),
        grid=(grid_x, grid_y),
        output=6,
        output_dtype=f32,
        output_count=m * (n + padding),
        expected=store_expected(out_initial, accumulated[:m, :n], f32, padding),
        tolerance=tolerance,
        exact_on_gpu=mode not in ("tensor_cores", "warpgroup"),
        description=(
            f"dot {mode} {operand} {a_layout!r} @ {b_layout!r} + {c_layout!r} k={k} "
            f"steps={steps}{'=ceil(k/inner_k)' if runtime_steps else ''} looped={looped} "
            f"unroll={unroll} staged={staged} buffers={buffers} init={init} fma={epilogue}"
            f"{' a_in_registers' if a_in_registers else ''}"
        ),
    )


_LOOP_CONDITIONS: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("t % 2 < 1", lambda t: t % 2 < 1),
    ("t < 2", lambda t: t < 2),
    ("t >= 2", lambda t: t >= 2),
    ("t % 3 < 1", lambda t: t % 3 < 1),
)
"""Conditions on the loop variable t: (text, function of an int or an `Expr`)."""


_BLOCK_CONDITIONS: tuple[tuple[str, Callable[[Any, Any], Any]], ...] = (
    ("block_x < 1", lambda x, y: x < 1),
    ("block_y >= 1", lambda x, y: y >= 1),
    ("(block_x + block_y) % 2 < 1", lambda x, y: (x + y) % 2 < 1),
)
"""Conditions on the block index (x, y): (text, function of ints or `Expr`s)."""


@st.composite
def loop_cases(draw: Callable[..., Any]) -> ProgramCase:
    """A loop-carried accumulator over `count` tiles: ``acc = register_tensor(init)``, then for
    t in range(start, stop, step, unroll): ``acc = op(acc, x[t, tile])`` (`assign`), and, if a
    condition on t holds (`if_`), ``acc = op2(acc, constant)``; the tile is stored only by
    blocks whose index meets a condition (`if_`), the others leave the output as it was.

    `stop` is `count` as a constant or as a runtime int parameter (0 runs no iteration), which
    may be declared a multiple of ``unroll * step`` when it is one and start is 0 (then the
    lowering knows the trip count is a multiple of `unroll`). `unroll` is 1 to 4, and `count`
    goes up to ``2 * unroll + 1``, so trip counts are and are not multiples of it; half the
    loops are `rolled` (a hint to the compiler, no change of meaning).
    Expected: the same recurrence on the global arrays with `ir.elementwise.apply_binary`.
    """
    num_threads = draw_threads(draw)
    layout = draw(register_layouts(num_threads, 2))
    dtype = draw(st.sampled_from(CASE_DTYPES))
    tile = layout.shape
    (grid_x, grid_y), (m, n), padding = grid_and_tensor(draw, tile)
    unroll = draw(st.sampled_from(_UNROLLS))
    rolled = draw(st.booleans())  # the C loop under ``#pragma unroll 1``
    count = draw(st.integers(0, max(4, 2 * unroll + 1)))
    runtime_stop = draw(st.booleans())
    start, step = draw(st.integers(0, 1)), draw(st.integers(1, 2))
    group = unroll * step
    multiple = group if runtime_stop and start == 0 and count % group == 0 else 1
    multiple = multiple if draw(st.booleans()) else 1
    ops = CHAIN_FLOAT_BINARY if dtype.is_float else CHAIN_INT_BINARY
    op, extra_op = draw(st.sampled_from(ops)), draw(st.sampled_from(ops))
    init, constant = chain_constant(draw, dtype), chain_constant(draw, dtype)
    loop_condition = draw(st.sampled_from((None, *_LOOP_CONDITIONS)))
    block_condition = draw(st.sampled_from((None, *_BLOCK_CONDITIONS)))
    tiles = max(count, 1)
    x_codes = random_codes(draw, dtype, tiles * m * n)
    out_initial = random_codes(draw, dtype, m * (n + padding))
    constant_names = draw_constants(draw, ("count", "m", "n") if runtime_stop else ("m", "n"))
    with ProgramBuilder("loop", num_threads) as b:
        if runtime_stop:
            stop = b.int_param("count", 0, tiles, multiple, constant="count" in constant_names)
        else:
            stop = count
        rows = b.int_param("m", constant="m" in constant_names)
        cols = b.int_param("n", constant="n" in constant_names)
        x, out = b.array_param("x", dtype), b.array_param("out", dtype)
        x_view = b.global_view(x, dtype, GlobalLayout((tiles, rows, cols), (rows * cols, cols, 1)))
        origin = [b.block_y * tile[0], b.block_x * tile[1]]
        accumulator = b.register_tensor(dtype, layout, init)
        with b.for_range(start, stop, step, unroll, rolled=rolled) as t:
            values = b.load_global(x_view, [t, *origin], layout)
            b.assign(accumulator, b.binary(op, accumulator, values))
            if loop_condition is not None:
                with b.if_(loop_condition[1](t)):
                    b.assign(accumulator, b.binary(extra_op, accumulator, constant))
        out_view = b.global_view(out, dtype, GlobalLayout((rows, cols), (cols + padding, 1)))
        if block_condition is None:
            b.store_global(out_view, accumulator, origin)
        else:
            with b.if_(block_condition[1](b.block_x, b.block_y)):
                b.store_global(out_view, accumulator, origin)
    shape = (grid_y * tile[0], grid_x * tile[1])
    x_values = _padded(to_values(dtype, x_codes).reshape(tiles, m, n), (tiles, *shape))
    init_value = to_values(dtype, dtype.encode(np.array([init])))
    constant_value = to_values(dtype, dtype.encode(np.array([constant])))
    accumulated = np.broadcast_to(init_value, shape)
    for t in range(start, count, step):
        accumulated = apply_binary(op, dtype, accumulated, x_values[t])
        if loop_condition is not None and loop_condition[1](t):
            accumulated = apply_binary(extra_op, dtype, accumulated, constant_value)
    expected = out_initial.reshape(m, n + padding).copy()
    stored = dtype.encode(accumulated[:m, :n]).astype(np.int64)
    for block_y in range(grid_y):
        for block_x in range(grid_x):
            if block_condition is None or block_condition[1](block_x, block_y):
                rows_slice = slice(block_y * tile[0], min((block_y + 1) * tile[0], m))
                cols_slice = slice(block_x * tile[1], min((block_x + 1) * tile[1], n))
                expected[rows_slice, cols_slice] = stored[rows_slice, cols_slice]
    arguments = (m, n, dtypes.pack(x_codes, dtype), dtypes.pack(out_initial, dtype))
    if runtime_stop:
        arguments = (count, *arguments)
    return ProgramCase(
        program=b.program(),
        arguments=arguments,
        grid=(grid_x, grid_y),
        output=len(arguments) - 1,
        output_dtype=dtype,
        output_count=m * (n + padding),
        expected=expected.ravel(),
        description=(
            f"loop {dtype} {layout!r} range({start}, {count}{'=param' if runtime_stop else ''}"
            f"{f' multiple_of={multiple}' if multiple > 1 else ''}, {step}, unroll={unroll}"
            f"{', rolled' if rolled else ''}) "
            f"{op}, if {loop_condition and loop_condition[0]}: {extra_op} {constant}; "
            f"store if {block_condition and block_condition[0]}"
        ),
    )

"""Random programs of memory and elementwise work: elementwise chains with casts, reductions, and
round trips through shared memory (with `copy_async`), and tiles handed from one thread group to
another through shared memory. An elementwise chain may be a link of a
chain of kernels (`ProgramBuilder.programmatic_launch`, its first load before `wait_prior_grid`,
and the next link let start at entry or before the store, `launch_dependents`); its store into
a type added in memory may be a combining store (``combine="add"``)."""

from __future__ import annotations

from collections.abc import Callable
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
    fused_multiply_add,
    kind_of,
    round_values,
    to_values,
)
from ir.instructions import COMBINE_DTYPES, PREFETCH_LEVELS
from ir.program import Program
from ir.testing.cases import (
    CASE_DTYPES,
    CHAIN_FLOAT_BINARY,
    CHAIN_INT_BINARY,
    ProgramCase,
    chain_constant,
    combine_expected,
    draw_constants,
    draw_threads,
    grid_and_tensor,
    random_codes,
    register_layouts,
    store_expected,
)
from layout_algebra.auto import auto_local_spatial
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import local, replicate
from layout_algebra.shared import shared_row_major

_COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")


@st.composite
def elementwise_cases(draw: Callable[..., Any]) -> ProgramCase:
    """A masked elementwise chain over random dtypes and layouts, x's tile maybe prefetched
    first, its result stored or, into i32, f16, bf16 or f32, maybe added (see the module
    docstring)."""
    num_threads = draw_threads(draw)
    layout = draw(register_layouts(num_threads, 2))
    dtype = draw(st.sampled_from(CASE_DTYPES))
    out_dtype = draw(st.sampled_from((dtype, *CASE_DTYPES)))
    tile = layout.shape
    (grid_x, grid_y), (m, n), padding = grid_and_tensor(draw, tile)
    kind = kind_of(dtype)
    steps = draw(st.integers(1, 3))
    column_layout = reduce_layout(layout, [1], keepdims=True)
    x_codes = random_codes(draw, dtype, m * n)
    y_codes = random_codes(draw, dtype, m * n)
    z_codes = random_codes(draw, dtype, m)
    out_initial = random_codes(draw, out_dtype, m * (n + padding))
    x_values = to_values(dtype, x_codes).reshape(m, n)
    y_values = to_values(dtype, y_codes).reshape(m, n)
    z_values = to_values(dtype, z_codes).reshape(m, 1)
    exact = True
    names: list[str] = []
    constant_names = draw_constants(draw, ("m", "n"))
    # A link of a chain: x is read before waiting for the prior grid (nothing writes it).
    chained = draw(st.booleans())
    signal = chained and draw(st.booleans())
    with ProgramBuilder("elementwise", num_threads) as b:
        if chained:
            b.programmatic_launch()
        rows = b.int_param("m", constant="m" in constant_names)
        cols = b.int_param("n", constant="n" in constant_names)
        x, y, z = (b.array_param(name, dtype) for name in ("x", "y", "z"))
        out = b.array_param("out", out_dtype)
        view = GlobalLayout((rows, cols), (cols, 1))
        origin = [b.block_y * tile[0], b.block_x * tile[1]]
        x_view = b.global_view(x, dtype, view)
        if draw(st.booleans()):
            # A hint ahead of the load, in the load's layout or another one of the tile's.
            hint = draw(st.sampled_from((layout, auto_local_spatial(num_threads, tile))))
            b.prefetch_global(x_view, origin, hint, level=draw(st.sampled_from(PREFETCH_LEVELS)))
        current = b.load_global(x_view, origin, layout)
        if chained:
            b.wait_prior_grid()
        other = b.load_global(b.global_view(y, dtype, view), origin, layout)
        column = b.load_global(
            b.global_view(z, dtype, GlobalLayout((rows, 1), (1, 1))),
            [b.block_y * tile[0], 0],
            column_layout,
        )
        value = x_values
        kinds = ("unary", "binary", "column", "constant", "where")
        for _ in range(steps):
            step = draw(st.sampled_from(kinds + (("fma",) if dtype == dtypes.f32 else ())))
            if step == "fma":
                op = "fma"
                current = b.fma(current, other, column)
                value = fused_multiply_add(value, y_values, z_values)
            elif step == "unary":
                op = draw(st.sampled_from([o for o in UNARY_OPS if kind in UNARY_OPS[o].kinds]))
                exact &= UNARY_OPS[op].exact
                current, value = b.unary(op, current), apply_unary(op, dtype, value)
            elif step == "where":
                op = draw(st.sampled_from(_COMPARISONS))
                cond = apply_binary(op, dtype, value, y_values)
                current = b.where(b.binary(op, current, other), current, other)
                value = np.where(cond != 0, value, y_values)
            else:
                ops = CHAIN_FLOAT_BINARY if dtype.is_float else CHAIN_INT_BINARY
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
                    constant = chain_constant(draw, dtype)
                    constant_value = to_values(dtype, dtype.encode(np.array([constant])))
                    current = b.binary(op, current, constant)
                    value = apply_binary(op, dtype, value, constant_value.reshape(1, 1))
            names.append(f"{step}:{op}")
        if out_dtype != dtype:
            current = b.cast(current, out_dtype)
            value = to_values(out_dtype, out_dtype.encode(value))
            names.append(f"cast:{out_dtype}")
        out_view = b.global_view(out, out_dtype, GlobalLayout((rows, cols), (cols + padding, 1)))
        if signal:
            b.launch_dependents()
        # Into a type added in memory, the store may add instead (one add per element).
        combine = out_dtype.name in COMBINE_DTYPES and draw(st.booleans())
        b.store_global(out_view, current, origin, combine="add" if combine else None)
        if combine:
            names.append("combine:add")
    ending = combine_expected if combine else store_expected
    expected = ending(out_initial, value, out_dtype, padding)
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


@st.composite
def reduction_cases(draw: Callable[..., Any]) -> ProgramCase:
    """A masked tile reduced over one dimension; the result stored as a (m, 1) or (1, n) view.

    Elements outside the tensor read the load's fill value (0 for sums; 0, the type's min or its
    max for max and min) and take part in the reduction. Float sums are checked
    within f32 rounding of the float64 sum (their order is the interpreter's); everything else
    exactly, with -0 and +0 equal for float max and min.
    """
    num_threads = draw_threads(draw)
    layout = draw(register_layouts(num_threads, 2))
    dtype = draw(st.sampled_from(CASE_DTYPES))
    reduction = draw(st.sampled_from(("sum", "max", "min")))
    dim = draw(st.integers(0, 1))
    tile = layout.shape
    m = draw(st.integers(1, tile[0]))
    n = draw(st.integers(1, tile[1]))
    codes = random_codes(draw, dtype, m * n)
    if reduction == "sum" and dtype.is_float:
        # Keep float sums away from overflow, whose point depends on the summation order.
        magnitudes = np.abs(dtype.decode(codes))
        codes = np.where(np.isfinite(magnitudes) & (magnitudes < 2.0**20), codes, 0)
    # max and min read the elements outside the tensor as a fill value (0, or the type's
    # extreme values, so that a partial tile of negative numbers has its own maximum).
    fill = 0
    if reduction != "sum":
        fill = draw(st.sampled_from((0, dtype.min, dtype.max)))
    fill_value = to_values(dtype, dtype.encode(np.array([fill])))[0]
    padded = np.full(tile, fill_value, dtype=np.float64 if dtype.is_float else np.int64)
    with np.errstate(invalid="ignore"):  # a signalling f32 NaN raises the flag as it widens
        padded[:m, :n] = dtype.decode(codes).reshape(m, n)
    out_count = tile[1 - dim]
    out_initial = random_codes(draw, dtype, out_count)
    constant_names = draw_constants(draw, ("m", "n"))
    with ProgramBuilder("reduction", num_threads) as b:
        rows = b.int_param("m", constant="m" in constant_names)
        cols = b.int_param("n", constant="n" in constant_names)
        x = b.array_param("x", dtype)
        out = b.array_param("out", dtype)
        tensor = b.load_global(
            b.global_view(x, dtype, GlobalLayout((rows, cols), (cols, 1))), [0, 0], layout, fill
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
        description=f"{dtype} {layout!r} reduce_{reduction} dim={dim} fill={fill!r}",
    )


def _tile_copy_case(
    program: Program,
    dtype: DataType,
    codes: np.ndarray,
    out_initial: np.ndarray,
    shape: tuple[int, int],
    text: str,
    grid: tuple[int, ...] = (1,),
) -> ProgramCase:
    """The case of a program ``(m, n, x, out)`` that copies the (m, n) codes of x to out (every
    block of `grid` the same codes)."""
    m, n = shape
    return ProgramCase(
        program=program,
        arguments=(m, n, dtypes.pack(codes, dtype), dtypes.pack(out_initial, dtype)),
        grid=grid,
        output=3,
        output_dtype=dtype,
        output_count=m * n,
        expected=store_expected(out_initial, to_values(dtype, codes).reshape(m, n), dtype, 0),
        description=text,
    )


@st.composite
def shared_round_trip_cases(draw: Callable[..., Any]) -> ProgramCase:
    """Global -> shared -> registers in another layout -> global, for one masked tile.

    The tile reaches shared memory through registers (`store_shared`), by `copy_async` (+
    commit and wait) or by `copy_bulk` (+ its wait); a `sync` precedes the read back. In the
    "bulk_released" form the bulk-copied tile is read back and stored once, released
    (`copy_bulk_release`) and copied again, so the read back stores the same values twice; it
    may run as two blocks in a cluster (`ProgramBuilder.cluster`), both copying the same tile
    (on sm_90a each issuing half of each copy into both, where the tile's rows split), both
    storing it. In
    the "reused" form (half the register round trips) the tile goes through registers into a
    first shared tensor, back into registers, and after a `sync` into a second one that reuses
    the first's memory (`shared_tensor(..., reuse=...)`), from which it is read back.
    """
    num_threads = draw_threads(draw)
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
    how = draw(st.sampled_from(("registers", "async", "bulk", "bulk_released")))
    if how == "registers" and draw(st.booleans()):
        how = "reused"
    clustered = how == "bulk_released" and draw(st.booleans())
    tile = first.shape
    m = draw(st.integers(1, tile[0]))
    n = draw(st.integers(1, tile[1]))
    # In a cluster, rows of whole 16-byte runs where the type allows: the tile is then a box
    # of a tensor map on sm_90a, and its copies are shared where its rows split in two.
    run = 128 // dtype.nbits if dtype.nbits in (8, 16, 32) else 0
    aligned = clustered and run > 0 and tile[1] % run == 0
    if aligned:
        n = tile[1]
    codes = random_codes(draw, dtype, m * n)
    out_initial = random_codes(draw, dtype, m * n)
    constant_names = draw_constants(draw, ("m", "n"))
    with ProgramBuilder("shared_round_trip", num_threads) as b:
        rows = b.int_param("m", constant="m" in constant_names)
        cols = b.int_param("n", constant="n" in constant_names, multiple_of=run if aligned else 1)
        x = b.array_param("x", dtype)
        out = b.array_param("out", dtype)
        view = GlobalLayout((rows, cols), (cols, 1))
        if clustered:
            b.grid(2)
            b.cluster(2)
        buffer = b.shared_tensor(dtype, shared_row_major(*tile))
        source = b.global_view(x, dtype, view)
        if how == "async":
            b.copy_async(buffer, source, [0, 0], layout=draw(st.sampled_from((None, first))))
            b.copy_async_commit()
            b.copy_async_wait(0)
        elif how == "bulk":
            b.copy_bulk(buffer, source, [0, 0])
            b.copy_bulk_wait(buffer)
        elif how == "bulk_released":
            b.copy_bulk(buffer, source, [0, 0])
            b.copy_bulk_wait(buffer)
            b.store_global(b.global_view(out, dtype, view), b.load_shared(buffer, second), [0, 0])
            b.copy_bulk_release(buffer)
            b.copy_bulk(buffer, source, [0, 0])
            b.copy_bulk_wait(buffer)
        elif how == "reused":
            b.store_shared(buffer, b.load_global(source, [0, 0], first))
            b.sync()
            held = b.load_shared(buffer, first)
            b.sync()
            buffer = b.shared_tensor(dtype, shared_row_major(*tile), [buffer])
            b.store_shared(buffer, held)
        else:
            b.store_shared(buffer, b.load_global(source, [0, 0], first))
        b.sync()
        b.store_global(b.global_view(out, dtype, view), b.load_shared(buffer, second), [0, 0])
    text = f"{dtype} {first!r} -> {second!r} by {how}" + (" in a cluster" if clustered else "")
    grid = (2,) if clustered else (1,)
    return _tile_copy_case(b.program(), dtype, codes, out_initial, (m, n), text, grid)


@st.composite
def thread_group_cases(draw: Callable[..., Any]) -> ProgramCase:
    """A tile handed from one thread group to another: the block's warps split in two groups,
    the producer group puts a masked tile into shared memory (through its registers, or by
    `copy_bulk` and its wait), a `sync` of the block, and the consumer group reads it in a
    layout of its own threads and stores it."""
    # Groups of 1, 2 or 4 warps (the random layouts' thread counts are powers of two).
    low_warps, high_warps = draw(st.sampled_from((1, 2, 4))), draw(st.sampled_from((1, 2, 4)))
    warps = low_warps + high_warps
    low, high = (0, 32 * low_warps), (32 * low_warps, 32 * high_warps)
    producer, consumer = (low, high) if draw(st.booleans()) else (high, low)
    first = draw(register_layouts(producer[1], 2))
    tile = first.shape
    second = draw(
        st.sampled_from(
            (auto_local_spatial(consumer[1], tile), local(*tile) * replicate(consumer[1]))
        )
    )
    dtype = draw(st.sampled_from(CASE_DTYPES))
    how = draw(st.sampled_from(("registers", "bulk")))
    m = draw(st.integers(1, tile[0]))
    n = draw(st.integers(1, tile[1]))
    codes = random_codes(draw, dtype, m * n)
    out_initial = random_codes(draw, dtype, m * n)
    with ProgramBuilder("thread_group_handoff", 32 * warps) as b:
        rows = b.int_param("m")
        cols = b.int_param("n")
        x = b.array_param("x", dtype)
        out = b.array_param("out", dtype)
        view = GlobalLayout((rows, cols), (cols, 1))
        buffer = b.shared_tensor(dtype, shared_row_major(*tile))
        source = b.global_view(x, dtype, view)
        with b.thread_group(*producer):
            if how == "bulk":
                b.copy_bulk(buffer, source, [0, 0])
                b.copy_bulk_wait(buffer)
            else:
                b.store_shared(buffer, b.load_global(source, [0, 0], first))
        b.sync()
        with b.thread_group(*consumer):
            b.store_global(b.global_view(out, dtype, view), b.load_shared(buffer, second), [0, 0])
    description = f"{dtype} threads {producer} {first!r} -> {consumer} {second!r} by {how}"
    return _tile_copy_case(b.program(), dtype, codes, out_initial, (m, n), description)


@st.composite
def ticket_cases(draw: Callable[..., Any]) -> ProgramCase:
    """Split work with an `atomic_add` ticket: each of G blocks (grid (gx, gy)) stores the
    column sums of its own rows of x as one row of a workspace, takes a ticket on a counter,
    and the block whose ticket is G - 1 (the last) loads every block's row (maybe after a
    loop prefetching the rows of blocks 1 to G - 1), adds them in block order, stores the sum
    and resets the counter.

    Integers sum exactly (wrapping in the type); f32 partial sums are exact small integers
    first (codes below 2^10), so every order gives the same bits. The counter must be zero
    again after the launch; the output is the sum row.
    """
    num_threads = draw(st.sampled_from((32, 64)))
    dtype = draw(st.sampled_from((dtypes.i32, dtypes.u8, dtypes.i8, dtypes.f32)))
    row_layout = draw(register_layouts(num_threads, 2))
    rows_per_block, cols = row_layout.shape
    gx, gy = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    blocks = gx * gy
    count = blocks * rows_per_block * cols
    if dtype == dtypes.f32:
        values = draw(st.lists(st.integers(-512, 512), min_size=count, max_size=count))
        codes = dtype.encode(np.array(values, dtype=np.float32)).astype(np.int64)
    else:
        codes = random_codes(draw, dtype, count)
    values = to_values(dtype, codes).reshape(blocks, rows_per_block, cols)
    kind = np.float64 if dtype.is_float else np.int64
    total = values.astype(kind).sum(axis=(0, 1))
    expected = dtype.encode(total if dtype.is_float else round_values(dtype, total))
    out_initial = random_codes(draw, dtype, cols)
    prefetch = draw(st.booleans())
    with ProgramBuilder("ticketed", num_threads) as b:
        x = b.array_param("x", dtype)
        workspace = b.array_param("workspace", dtype)
        counter = b.array_param("counter", dtypes.i32)
        out = b.array_param("out", dtype)
        b.grid(gx, gy)
        block = b.block_y * gx + b.block_x
        x_view = b.global_view(x, dtype, GlobalLayout((blocks * rows_per_block, cols), (cols, 1)))
        work_view = b.global_view(workspace, dtype, GlobalLayout((blocks, cols), (cols, 1)))
        counter_view = b.global_view(counter, dtypes.i32, GlobalLayout((1,), (1,)))
        mine = b.load_global(x_view, [block * rows_per_block, 0], row_layout)
        partial = b.reduce(mine, 0, "sum", keepdim=True)
        b.store_global(work_view, partial, [block, 0])
        ticket = b.atomic_add(counter_view, [0], 1)
        with b.if_(ticket.eq(blocks - 1)):
            every_layout = local(blocks, 1) * reduce_layout(row_layout, [0], keepdims=True)
            if prefetch:
                # The other blocks' rows, one at a time, before the load of them all.
                one_row = reduce_layout(row_layout, [0], keepdims=True)
                with b.for_range(1, blocks) as other:
                    b.prefetch_global(work_view, [other, 0], one_row)
            every = b.load_global(work_view, [0, 0], every_layout)
            b.store_global(
                b.global_view(out, dtype, GlobalLayout((1, cols), (cols, 1))),
                b.reduce(every, 0, "sum", keepdim=True),
                [0, 0],
            )
            zero = b.register_tensor(dtypes.i32, replicate(num_threads).reshape(1), 0)
            b.store_global(counter_view, zero, [0])
    return ProgramCase(
        program=b.program(),
        arguments=(
            dtypes.pack(codes, dtype),
            np.zeros(-(-blocks * cols * dtype.nbits // 8), dtype=np.uint8),
            np.zeros(4, dtype=np.uint8),
            dtypes.pack(out_initial, dtype),
        ),
        grid=(gx, gy),
        output=3,
        output_dtype=dtype,
        output_count=cols,
        expected=expected.astype(np.int64),
        description=f"{dtype} {row_layout!r} ticketed sum over {blocks} blocks",
    )

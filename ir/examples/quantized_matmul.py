"""W-A16 quantized matmul: f16 activations times low-bit weights with per-group f16 scales.

C (m, n) = A (m, k) @ (W * S), where W (k, n) holds `weight_dtype` codes (any of u1..u8,
i1..i8, the sub-byte floats such as f4e2m1 or f6e3m2) packed row-major as one dense bitstream,
and S (ceil(k / group_size), n) holds f16 scales: the dequantized weight is
``f16(f32(W[kk, j]) * f32(S[kk // group_size, j]))``. A and C are row-major f16; the dot
accumulates in f32 and C is rounded to f16.

Per k-tile of BK rows, each block:

    copy_async the (BM, BK) activation tile into shared memory, commit
    load the (BK, BN) weight tile as bytes: thread-chunks of `b` bytes = 8 weights of b bits
    view the bytes as `weight_dtype` (8 weights per chunk), cast to f16
    load the (1, BN) scale row of the k-tile's group, replicated over the rows' threads
    multiply (broadcast over the BK rows), store the f16 tile into shared memory
    wait for the copy, sync, run the dot over the tile in `inner_k` slices, sync

The dot's operand layouts are the SIMT ones by default (bit-exact against the interpreter on the
GPU) or, with ``tensor_cores=True``, the warp-collective mma fragment layouts of
`ir.examples.matmul.mma_dot_layouts` (within mma rounding of the interpreter).

Requirements: `n` and `k` multiples of 8 at run time, declared so (``multiple_of=8``, checked by
the interpreter and at launch): every weight row then starts on a byte, and every activation row
and every row of weight bytes starts 16-byte aligned, so the activation tile is copied with
16-byte ``cp.async`` and each thread loads its weight bytes as one vector; and `group_size` a
multiple of `block_k` (one scale row per k-tile). Launch with
``grid = (ceil(n / BN), ceil(m / BM))``.
"""

from __future__ import annotations

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.examples.matmul import (
    COLUMNS_PER_THREAD,
    accumulate_tiles,
    check_overlap_dot,
    default_inner_k,
    dot_layouts,
    ring_loop,
    wgmma_b_buffer,
)
from ir.program import Program
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import RegisterLayout, local
from layout_algebra.shared import shared_row_major, shared_row_major_swizzle
from layout_algebra.symbolic import Expr, ExprLike, simplify

WEIGHTS_PER_CHUNK = 8
"""Weights each thread views out of one chunk of `nbits` bytes (8 weights of b bits = b bytes)."""


def weight_layouts(
    weight_dtype: DataType, num_threads: int, block_k: int, block_n: int
) -> tuple[RegisterLayout, RegisterLayout]:
    """(byte layout, weight layout) of a (block_k, block_n) weight tile.

    With TN = block_n // 8 thread columns, TM = num_threads // TN thread rows and R = block_k //
    TM rows per thread, the weights are ``local(R, 1).spatial(TM, TN).local(1, 8)`` and their
    bytes ``local(R, 1).spatial(TM, TN).local(1, b)``: each thread's b bytes of a row are
    exactly its 8 weights, so a `view` turns one into the other. Raises VerificationError when
    the sizes do not divide that way.
    """
    thread_cols = block_n // WEIGHTS_PER_CHUNK
    if block_n % WEIGHTS_PER_CHUNK or num_threads % thread_cols:
        raise VerificationError(
            f"block_n {block_n} must be a multiple of {WEIGHTS_PER_CHUNK} whose chunks "
            f"({thread_cols}) divide num_threads {num_threads}"
        )
    thread_rows = num_threads // thread_cols
    if block_k % thread_rows:
        raise VerificationError(f"block_k {block_k} must be a multiple of {thread_rows}")
    rows = block_k // thread_rows
    grid = local(rows, 1).spatial(thread_rows, thread_cols)
    return grid.local(1, weight_dtype.nbits), grid.local(1, WEIGHTS_PER_CHUNK)


def quantized_matmul(
    weight_dtype: DataType = dtypes.u4,
    group_size: int = 128,
    num_threads: int = 128,
    block_m: int = 64,
    block_n: int = 64,
    block_k: int = 32,
    inner_k: int | None = None,
    tensor_cores: bool = False,
    *,
    stages: int = 1,
    swizzle: bool = False,
    wgmma: bool = False,
    overlap_dot: bool = False,
) -> Program:
    """The program ``quantized_matmul(m, n, k, a, w, scales, c)`` (see the module docstring).

    `w` is an array parameter of `weight_dtype` (the packed (k, n) codes), `scales` of f16.
    `tensor_cores` picks the dot's layouts (`ir.examples.matmul.dot_layouts`); `inner_k` None
    means `ir.examples.matmul.default_inner_k(tensor_cores)`.

    `stages` 1 is the loop of the module docstring, each k-tile loaded, dequantized and
    multiplied in turn. With S >= 2 stages the loads run ahead: the activation tiles through a
    ring of S shared stages (the first S - 1 copied before the loop, k-tile kt + S - 1 while kt
    is computed), the weight bytes of the next k-tile loaded into registers while this one's
    are dequantized into one of two shared weight buffers, one barrier after the stores and
    one after the dot. `swizzle` XOR-swizzles the shared buffers' 16-byte chunks per row, so
    the tensor cores' ldmatrix reads meet no bank conflict.

    `wgmma` builds the warpgroup form for M-tiled batches: the dot's layouts of
    `ir.examples.matmul.wgmma_dot_layouts` (warpgroups stacked along M, one dot per k-tile:
    `inner_k` defaults to `block_k`), the activation ring swizzled and the dequantized weights
    stored into 64-column swizzled panels (`ir.examples.matmul.wgmma_b_buffer`), so that on
    sm_90a the dot reads both tiles through wgmma descriptors (`backend.wgmma`); it implies
    `tensor_cores` and `swizzle` and needs a ring (stages >= 2).

    `overlap_dot` arranges the ring so that a k-tile's dot may still run while the next
    k-tiles are loaded and dequantized (as `ir.examples.matmul.ring_loop` does): activation
    k-tiles run S - 2 ahead, copied after the dot; the weight bytes and the scale row of the
    next k-tile are loaded into registers while this one's are dequantized into one of three
    shared weight buffers; one barrier per k-tile. On sm_90a the lowering keeps each wgmma dot
    in flight into the next iteration (`backend.wgmma_pipeline`). It needs at least 3 stages.

    Raises VerificationError for a weight type wider than 8 bits, a group size that is not a
    multiple of `block_k`, tile sizes that do not fit the layouts, `stages` not an int from
    1 to 8, or `swizzle` not a bool (True needs a ring).
    """
    if not isinstance(wgmma, bool) or (wgmma and stages == 1):
        raise VerificationError(
            f"quantized_matmul: wgmma={wgmma!r} with stages={stages}; expected a bool, True "
            "only with a ring (stages >= 2)"
        )
    if wgmma:
        tensor_cores, swizzle = True, True
        inner_k = block_k if inner_k is None else inner_k
    if isinstance(stages, bool) or not isinstance(stages, int) or not 1 <= stages <= 8:
        raise VerificationError(f"quantized_matmul: stages={stages!r}; expected an int from 1 to 8")
    check_overlap_dot("quantized_matmul", overlap_dot, stages)
    if not isinstance(swizzle, bool) or (swizzle and stages == 1):
        raise VerificationError(
            f"quantized_matmul: swizzle={swizzle!r} with stages={stages}; expected a bool, "
            "True only with a ring (stages >= 2)"
        )
    if inner_k is None:
        inner_k = default_inner_k(tensor_cores)
    if weight_dtype.nbits > 8:
        raise VerificationError(f"weight_dtype must have at most 8 bits, got {weight_dtype}")
    if group_size % block_k:
        raise VerificationError(f"group_size {group_size} must be a multiple of {block_k}")
    if block_k % inner_k:
        raise VerificationError(f"inner_k {inner_k} must divide block_k {block_k}")
    if block_n % COLUMNS_PER_THREAD:
        raise VerificationError(f"block_n {block_n} must be a multiple of {COLUMNS_PER_THREAD}")
    a_layout, b_layout, c_layout = dot_layouts(
        num_threads, block_m, block_n, inner_k, tensor_cores, wgmma
    )
    byte_layout, weight_layout = weight_layouts(weight_dtype, num_threads, block_k, block_n)
    scale_layout = reduce_layout(weight_layout, [0], keepdims=True)
    bits = weight_dtype.nbits
    f16, f32 = dtypes.f16, dtypes.f32
    with ProgramBuilder("quantized_matmul", num_threads) as bld:
        m = bld.int_param("m")
        n = bld.int_param("n", multiple_of=WEIGHTS_PER_CHUNK)
        k = bld.int_param("k", multiple_of=WEIGHTS_PER_CHUNK)
        a = bld.array_param("a", f16)
        w = bld.array_param("w", weight_dtype)
        scales = bld.array_param("scales", f16)
        c = bld.array_param("c", f16)
        row_bytes = simplify(n * bits // 8)
        groups = (k + group_size - 1) // group_size
        a_view = bld.global_view(a, f16, GlobalLayout((m, k), (k, 1)))
        w_bytes = bld.global_view(w, dtypes.u8, GlobalLayout((k, row_bytes), (row_bytes, 1)))
        s_view = bld.global_view(scales, f16, GlobalLayout((groups, n), (n, 1)))
        c_view = bld.global_view(c, f16, GlobalLayout((m, n), (n, 1)))
        row0, col0 = bld.block_y * block_m, bld.block_x * block_n
        accumulator = bld.register_tensor(f32, c_layout, 0.0)
        if stages > 1:
            buffer = shared_row_major_swizzle if swizzle else shared_row_major
            options = {"element_bits": 16} if swizzle else {}
            a_ring = bld.shared_tensor(f16, buffer(stages, block_m, block_k, **options))
            buffers = 3 if overlap_dot else 2
            if wgmma:
                w_pair = bld.shared_tensor(f16, wgmma_b_buffer(block_k, block_n, buffers))
            else:
                w_pair = bld.shared_tensor(f16, buffer(buffers, block_k, block_n, **options))
            tiles = (k + block_k - 1) // block_k
            w_column = bld.block_x * (block_n * bits // 8)

            def prefetch(tile, stage):
                bld.copy_async(a_ring, a_view, [row0, tile * block_k], [stage, 0, 0])

            raw = None
            scale = None

            def load_weights(tile: ExprLike) -> None:
                """The k-tile's weight bytes (and, in the overlapped order, its scale row)
                into registers, ahead of their dequantization."""
                nonlocal raw, scale
                row = tile * block_k
                fresh = bld.load_global(w_bytes, [row, w_column], byte_layout)
                if raw is None:
                    raw = fresh
                else:
                    bld.assign(raw, fresh)
                if overlap_dot:
                    row_scale = bld.load_global(s_view, [row // group_size, col0], scale_layout)
                    if scale is None:
                        scale = row_scale
                    else:
                        bld.assign(scale, row_scale)

            def prepare(kt: Expr) -> None:
                """Dequantize k-tile kt's weights into its shared buffer; load the next's."""
                codes = bld.view(raw, weight_dtype, weight_layout)
                tile_scale = scale
                if not overlap_dot:
                    group_row = kt * block_k // group_size
                    tile_scale = bld.load_global(s_view, [group_row, col0], scale_layout)
                dequantized = bld.mul(bld.cast(codes, f16), tile_scale)
                bld.store_shared(w_pair, dequantized, [kt % buffers, 0, 0])
                with bld.if_(kt + 1 < tiles):
                    load_weights(kt + 1)

            def multiply(kt: Expr) -> None:
                a, b = (a_ring, a_layout, kt % stages), (w_pair, b_layout, kt % buffers)
                accumulate_tiles(bld, accumulator, a, b, block_k, inner_k)

            ring_loop(
                bld,
                stages,
                tiles,
                prefetch,
                multiply,
                overlap_dot,
                prepare,
                lambda: load_weights(0),
            )
            bld.store_global(c_view, bld.cast(accumulator, f16), [row0, col0])
            return bld.program()
        a_shared = bld.shared_tensor(f16, shared_row_major(block_m, block_k))
        w_shared = bld.shared_tensor(f16, shared_row_major(block_k, block_n))
        with bld.for_range((k + block_k - 1) // block_k) as kt:
            k0 = kt * block_k
            bld.copy_async(a_shared, a_view, [row0, k0])
            bld.copy_async_commit()
            raw = bld.load_global(w_bytes, [k0, bld.block_x * (block_n * bits // 8)], byte_layout)
            codes = bld.view(raw, weight_dtype, weight_layout)
            scale = bld.load_global(s_view, [k0 // group_size, col0], scale_layout)
            bld.store_shared(w_shared, bld.mul(bld.cast(codes, f16), scale))
            bld.copy_async_wait(0)
            bld.sync()
            with bld.for_range(0, block_k, inner_k) as kk:
                a_tile = bld.load_shared(a_shared, a_layout, [0, kk])
                w_tile = bld.load_shared(w_shared, b_layout, [kk, 0])
                bld.assign(accumulator, bld.dot(a_tile, w_tile, accumulator))
            bld.sync()
        bld.store_global(c_view, bld.cast(accumulator, f16), [row0, col0])
    return bld.program()

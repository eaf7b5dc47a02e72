"""Tiled f16 matmul with shared memory, `copy_async` double buffering and a SIMT dot.

C (m, n) = A (m, k) @ B (k, n), all row-major f16, accumulated in f32. Block (x, y) computes
the tile C[y*BM : (y+1)*BM, x*BN : (x+1)*BN]:

    prefetch k-tile 0 of A and B into stage 0 of two-stage shared buffers
    for kt in range(ceil(k / BK)):
        if kt + 1 < tiles: prefetch k-tile kt + 1 into stage (kt + 1) % 2
        commit; wait until at most 1 group is pending (k-tile kt has landed); sync
        for kk in range(0, BK, inner_k):   acc = dot(A_s[stage, :, kk:kk+inner_k],
                                                     B_s[stage, kk:kk+inner_k, :], acc)
        sync                                # before the next prefetch overwrites this stage
    C tile = f16(acc)

The SIMT dot layouts (`simt_dot_layouts`): thread (i, j) of a TM x TN grid holds an RM x 8
block of the accumulator; A's slice is held as whole rows replicated over the TN threads of a
thread row, B's as whole columns replicated over the TM threads of a thread column, so every
thread holds exactly the data it combines. Launch with ``grid = (ceil(n / BN), ceil(m / BM))``.
"""

from __future__ import annotations

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import VerificationError
from ir.program import Program
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import RegisterLayout, replicate, spatial
from layout_algebra.shared import shared_row_major

COLUMNS_PER_THREAD = 8
"""Accumulator columns per thread: 8 f16 outputs make one 16-byte store."""


def simt_dot_layouts(
    num_threads: int, block_m: int, block_n: int, inner_k: int
) -> tuple[RegisterLayout, RegisterLayout, RegisterLayout]:
    """(a, b, c) layouts for a SIMT `dot` of (block_m, inner_k) @ (inner_k, block_n).

    With TN = block_n // 8 thread columns, TM = num_threads // TN thread rows and RM =
    block_m // TM rows per thread: ``c = spatial(TM, TN).local(RM, 8)``,
    ``a = spatial(TM, 1).replicate(TN).local(RM, inner_k)`` and
    ``b = replicate(TM).spatial(1, TN).local(inner_k, 8)``. Raises VerificationError when the
    sizes do not divide that way.
    """
    thread_cols = block_n // COLUMNS_PER_THREAD
    if block_n % COLUMNS_PER_THREAD or thread_cols == 0 or num_threads % thread_cols:
        raise VerificationError(
            f"block_n {block_n} must be a multiple of {COLUMNS_PER_THREAD} whose thread columns "
            f"({thread_cols}) divide num_threads {num_threads}"
        )
    thread_rows = num_threads // thread_cols
    if block_m % thread_rows:
        raise VerificationError(
            f"block_m {block_m} must be a multiple of the {thread_rows} thread rows"
        )
    rows = block_m // thread_rows
    c = spatial(thread_rows, thread_cols).local(rows, COLUMNS_PER_THREAD)
    a = (spatial(thread_rows, 1) * replicate(thread_cols)).local(rows, inner_k)
    b = (replicate(thread_rows) * spatial(1, thread_cols)).local(inner_k, COLUMNS_PER_THREAD)
    return a, b, c


def matmul(
    num_threads: int = 128,
    block_m: int = 64,
    block_n: int = 64,
    block_k: int = 32,
    inner_k: int = 8,
) -> Program:
    """The program ``matmul(m, n, k, a, b, c)``: c = f16(a @ b) with f32 accumulation.

    The accumulation order is the dot's (k increasing), so the result is bit-exact against
    `ir.run_reference` on the GPU's SIMT path. Raises VerificationError when the tile sizes do
    not fit the layouts (`simt_dot_layouts`) or `inner_k` does not divide `block_k`.
    """
    if block_k % inner_k:
        raise VerificationError(f"inner_k {inner_k} must divide block_k {block_k}")
    a_layout, b_layout, c_layout = simt_dot_layouts(num_threads, block_m, block_n, inner_k)
    f16, f32 = dtypes.f16, dtypes.f32
    with ProgramBuilder("matmul", num_threads) as bld:
        m, n, k = bld.int_param("m"), bld.int_param("n"), bld.int_param("k")
        a, b, c = (bld.array_param(name, f16) for name in ("a", "b", "c"))
        a_view = bld.global_view(a, f16, GlobalLayout((m, k), (k, 1)))
        b_view = bld.global_view(b, f16, GlobalLayout((k, n), (n, 1)))
        c_view = bld.global_view(c, f16, GlobalLayout((m, n), (n, 1)))
        a_shared = bld.shared_tensor(f16, shared_row_major(2, block_m, block_k))
        b_shared = bld.shared_tensor(f16, shared_row_major(2, block_k, block_n))
        row0, col0 = bld.block_y * block_m, bld.block_x * block_n
        tiles = (k + block_k - 1) // block_k
        accumulator = bld.register_tensor(f32, c_layout, 0.0)
        bld.copy_async(a_shared, a_view, [row0, 0], [0, 0, 0])
        bld.copy_async(b_shared, b_view, [0, col0], [0, 0, 0])
        bld.copy_async_commit()
        with bld.for_range(tiles) as kt:
            stage = kt % 2
            with bld.if_(kt + 1 < tiles):
                next_stage = (kt + 1) % 2
                bld.copy_async(a_shared, a_view, [row0, (kt + 1) * block_k], [next_stage, 0, 0])
                bld.copy_async(b_shared, b_view, [(kt + 1) * block_k, col0], [next_stage, 0, 0])
            bld.copy_async_commit()
            bld.copy_async_wait(1)
            bld.sync()
            with bld.for_range(0, block_k, inner_k) as kk:
                a_tile = bld.load_shared(a_shared, a_layout, [stage, 0, kk])
                b_tile = bld.load_shared(b_shared, b_layout, [stage, kk, 0])
                bld.assign(accumulator, bld.dot(a_tile, b_tile, accumulator))
            bld.sync()
        bld.store_global(c_view, bld.cast(accumulator, f16), [row0, col0])
    return bld.program()

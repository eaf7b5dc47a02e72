"""Tiled f16 matmul with shared memory, `copy_async` double buffering and a SIMT or mma dot.

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

Three choices of the dot's operand layouts (`dot_layouts`, or `wgmma_dot_layouts`):

- SIMT (`simt_dot_layouts`, the default): thread (i, j) of a TM x TN grid holds an RM x 8 block
  of the accumulator; A's slice is held as whole rows replicated over the TN threads of a thread
  row, B's as whole columns replicated over the TM threads of a thread column, so every thread
  holds exactly the data it combines. The result is bit-exact against the interpreter.
- Tensor cores (`mma_dot_layouts`, ``tensor_cores=True``): a grid of warps, each accumulating
  whole 16 x 8 tiles in the PTX m16n8k16 fragment layouts; a warp's 32 threads hold the A and B
  fragments collectively (`ir.instructions.Dot` is warp-collective). An mma lowering rounds
  differently from the interpreter's sequential sum: compare within a tolerance.
- Warpgroups (`wgmma_dot_layouts`, ``wgmma=True``): warpgroups of 128 threads stacked along M,
  each accumulating 64-row tiles in the ``wgmma`` accumulator fragment, one dot per k-tile, the
  stages in the swizzled shared layouts whose tiles ``wgmma`` descriptors read; on sm_90a the
  dot runs as ``wgmma.mma_async`` straight from shared memory (`backend.wgmma`), elsewhere as
  ``mma.sync``. Compared within a tolerance as well.

Requirements: `n` and `k` multiples of 8 at run time (``ROW_MULTIPLE``, declared with
``multiple_of``, so checked by the interpreter and at launch): every row of A and B then starts
16-byte aligned and the tiles are copied with 16-byte ``cp.async``. Launch with
``grid = (ceil(n / BN), ceil(m / BM))``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import VerificationError
from ir.program import Program
from ir.values import RegisterTensor, SharedTensor
from layout_algebra.fragments import fragment, wgmma_fragment
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.hardware import WARP_SIZE
from layout_algebra.register import RegisterLayout, local, replicate, spatial
from layout_algebra.shared import (
    SharedLayout,
    shared_product,
    shared_row_major,
    shared_row_major_swizzle,
)
from layout_algebra.symbolic import Expr, ExprLike, minimum

COLUMNS_PER_THREAD = 8
"""Accumulator columns per thread: 8 f16 outputs make one 16-byte store."""

SIMT_INNER_K = 8
"""The default k slice of one SIMT dot."""

ROW_MULTIPLE = 8
"""What `n` and `k` must be multiples of: 8 f16 elements make 16 bytes, so rows stay aligned."""

MMA_M, MMA_N, MMA_K = 16, 8, 16
"""The tile (M, N, K) of one ``mma.sync`` m16n8k16; MMA_K is also the default k slice of one
tensor-core dot."""

WARPGROUP_SIZE, WGMMA_M = 128, 64
"""Threads of a warpgroup, and the rows (M) of one ``wgmma`` accumulator tile."""

PANEL_BYTES = 128
"""Row bytes of one swizzled panel of the wgmma example's B buffers (the 128-byte swizzle)."""


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


def warp_grid(num_warps: int) -> tuple[int, int]:
    """(warps_m, warps_n) with warps_m * warps_n = num_warps, as square as divisors allow.

    warps_m is the largest divisor of num_warps not above its square root: 1 -> (1, 1), 2 ->
    (1, 2), 4 -> (2, 2), 8 -> (2, 4). Raises VerificationError for num_warps < 1.
    """
    if isinstance(num_warps, bool) or not isinstance(num_warps, int) or num_warps < 1:
        raise VerificationError(f"num_warps must be a positive int, got {num_warps!r}")
    warps_m = max(d for d in range(1, math.isqrt(num_warps) + 1) if num_warps % d == 0)
    return warps_m, num_warps // warps_m


def mma_dot_layouts(
    num_threads: int, block_m: int, block_n: int, inner_k: int
) -> tuple[RegisterLayout, RegisterLayout, RegisterLayout]:
    """(a, b, c) tensor-core layouts for a `dot` of (block_m, inner_k) @ (inner_k, block_n).

    With F_A (16 x 16), F_B (16 x 8), F_C (16 x 8) the m16n8k16 fragments of
    `layout_algebra.fragments`, (WM, WN) = `warp_grid(num_threads // 32)`, RM = block_m / (16
    WM), RN = block_n / (8 WN) and KS = inner_k / 16: ``c = spatial(WM, WN).local(RM, RN) *
    F_C`` (warp w = wm * WN + wn accumulates rows [wm * block_m / WM, ...) and columns [wn *
    block_n / WN, ...) as RM x RN tiles of 16 x 8), ``a = spatial(WM, 1).replicate(WN).local(RM,
    KS) * F_A`` and ``b = replicate(WM).spatial(1, WN).local(KS, RN) * F_B``: the operand
    layouts a tensor-core lowering takes (``mma.sync`` per 16 x 8 x 16 tile, k steps in order).
    Raises VerificationError when num_threads is not a multiple of 32 or the sizes do not
    split into whole mma tiles per warp.
    """
    if num_threads < WARP_SIZE or num_threads % WARP_SIZE:
        raise VerificationError(
            f"num_threads {num_threads} must be a positive multiple of {WARP_SIZE} for mma"
        )
    warps_m, warps_n = warp_grid(num_threads // WARP_SIZE)
    if block_m % (MMA_M * warps_m) or block_n % (MMA_N * warps_n) or inner_k % MMA_K:
        raise VerificationError(
            f"block ({block_m}, {block_n}) with inner_k {inner_k} must split into {warps_m} x "
            f"{warps_n} warps of whole {MMA_M} x {MMA_N} x {MMA_K} mma tiles"
        )
    rows, cols = block_m // (MMA_M * warps_m), block_n // (MMA_N * warps_n)
    steps = inner_k // MMA_K
    fragment_a = fragment("mma.m16n8k16.a").layout
    fragment_b = fragment("mma.m16n8k16.b").layout
    fragment_c = fragment("mma.m16n8k16.c").layout
    c = spatial(warps_m, warps_n).local(rows, cols) * fragment_c
    a = (spatial(warps_m, 1) * replicate(warps_n)).local(rows, steps) * fragment_a
    b = (replicate(warps_m) * spatial(1, warps_n)).local(steps, cols) * fragment_b
    return a, b, c


def wgmma_dot_layouts(
    num_threads: int, block_m: int, block_n: int, inner_k: int
) -> tuple[RegisterLayout, RegisterLayout, RegisterLayout]:
    """(a, b, c) warpgroup layouts for a `dot` of (block_m, inner_k) @ (inner_k, block_n).

    With G = num_threads / 128 warpgroups stacked along M, RM = block_m / (64 G), KS = inner_k
    / 16, F_D the ``wgmma.m64n{block_n}k16`` accumulator fragment and F_A its register-A
    fragment (`layout_algebra.fragments.wgmma_fragment`): ``c = spatial(G, 1).local(RM, 1) *
    F_D``, ``a = spatial(G, 1).local(RM, KS) * F_A`` and ``b = replicate(4 G).local(KS,
    block_n / 8) * F_B`` (every warp holds all of b, in m16n8k16 B fragments). On sm_90a a dot
    of these layouts whose a and b come straight from swizzled shared tiles runs as
    ``wgmma.mma_async`` reading both from shared memory (`backend.wgmma`); elsewhere, or with
    ``wgmma=False``, c and a divide by the mma.sync fragments too, so it runs as ``mma.sync``.
    Raises VerificationError when num_threads is not a multiple of 128, block_m not of 64 G,
    block_n not a multiple of 8 up to 256, or inner_k not of 16.
    """
    if num_threads < WARPGROUP_SIZE or num_threads % WARPGROUP_SIZE:
        raise VerificationError(
            f"num_threads {num_threads} must be a positive multiple of {WARPGROUP_SIZE} for wgmma"
        )
    groups = num_threads // WARPGROUP_SIZE
    if block_m % (WGMMA_M * groups) or block_n % MMA_N or not 0 < block_n <= 256:
        raise VerificationError(
            f"block ({block_m}, {block_n}) must split into {groups} warpgroups of whole "
            f"{WGMMA_M}-row tiles, with block_n a multiple of {MMA_N} up to 256"
        )
    if inner_k % MMA_K or inner_k < MMA_K:
        raise VerificationError(f"inner_k {inner_k} must be a positive multiple of {MMA_K}")
    rows, steps = block_m // (WGMMA_M * groups), inner_k // MMA_K
    c = spatial(groups, 1).local(rows, 1) * wgmma_fragment("d", block_n).layout
    a = spatial(groups, 1).local(rows, steps) * wgmma_fragment("a").layout
    b = replicate(groups * WARPGROUP_SIZE // WARP_SIZE).local(steps, block_n // MMA_N)
    b = b * fragment("mma.m16n8k16.b").layout
    return a, b, c


def wgmma_b_buffer(block_k: int, block_n: int, stages: int | None = None) -> SharedLayout:
    """A (block_k, block_n) f16 B tile, or `stages` of them (a leading dimension), as wgmma
    descriptors read them best: in swizzled panels of 64 columns (`PANEL_BYTES`, each a
    contiguous (block_k, 64) block with the 128-byte swizzle), or one swizzled row-major tile
    when block_n is not a whole number of panels."""
    lead = () if stages is None else (stages,)
    panel = PANEL_BYTES // 2
    if block_n % panel:
        return shared_row_major_swizzle(*lead, block_k, block_n, element_bits=16)
    panels = shared_row_major(*lead, 1, block_n // panel)
    return shared_product(panels, shared_row_major_swizzle(block_k, panel, element_bits=16))


def row_store_layout(num_threads: int, block_m: int, block_n: int) -> RegisterLayout:
    """A (block_m, block_n) f16 tile in 16-byte runs along its rows: `COLUMNS_PER_THREAD`
    consecutive elements a thread, a row's runs on consecutive threads, so that a warp's
    stores are whole rows: ``local(P, 1).spatial(R, T).local(1, 8)`` with T = block_n / 8
    threads a row, R = num_threads / T rows a pass and P = block_m / R passes. Raises
    VerificationError when the sizes do not divide that way."""
    runs = block_n // COLUMNS_PER_THREAD
    if block_n % COLUMNS_PER_THREAD or runs == 0 or num_threads % runs:
        raise VerificationError(
            f"block_n {block_n} must be a multiple of {COLUMNS_PER_THREAD} whose runs ({runs}) "
            f"divide num_threads {num_threads}"
        )
    rows = num_threads // runs
    if block_m % rows:
        raise VerificationError(f"block_m {block_m} must be a multiple of the {rows} rows a pass")
    return local(block_m // rows, 1).spatial(rows, runs).local(1, COLUMNS_PER_THREAD)


def dot_layouts(
    num_threads: int,
    block_m: int,
    block_n: int,
    inner_k: int,
    tensor_cores: bool,
    wgmma: bool = False,
) -> tuple[RegisterLayout, RegisterLayout, RegisterLayout]:
    """(a, b, c): `wgmma_dot_layouts` when `wgmma`, else `mma_dot_layouts` when
    `tensor_cores`, else `simt_dot_layouts`."""
    if wgmma:
        return wgmma_dot_layouts(num_threads, block_m, block_n, inner_k)
    choose = mma_dot_layouts if tensor_cores else simt_dot_layouts
    return choose(num_threads, block_m, block_n, inner_k)


def default_inner_k(tensor_cores: bool) -> int:
    """The k slice of one dot when none is given: MMA_K (16) for tensor cores, else 8."""
    return MMA_K if tensor_cores else SIMT_INNER_K


def fill_ring(
    bld: ProgramBuilder,
    stages: int,
    tiles: Expr,
    prefetch: Callable[[ExprLike, int], None],
    commit: bool = True,
) -> None:
    """Before the k loop of a ring of `stages` shared stages: ``prefetch(t, t)`` copies k-tile
    t into stage t for t < stages - 1 (those of them below `tiles`), each committed as its own
    group (unless not `commit`: bulk copies, waited for by tile), so that in the loop k-tile
    kt's group is complete once at most stages - 1 later groups are pending."""
    for ahead in range(stages - 1):
        if ahead == 0:
            prefetch(0, 0)
        else:
            with bld.if_(tiles > ahead):
                prefetch(ahead, ahead)
        if commit:
            bld.copy_async_commit()


def check_overlap_dot(example: str, overlap_dot: object, stages: int) -> None:
    """Raise VerificationError unless `overlap_dot` is a bool, True only with 3 or more
    stages (`ring_loop`)."""
    if not isinstance(overlap_dot, bool) or (overlap_dot and stages < 3):
        raise VerificationError(
            f"{example}: overlap_dot={overlap_dot!r} with stages={stages!r}; expected a bool, "
            "True only with at least 3 stages"
        )


def accumulate_tiles(
    bld: ProgramBuilder,
    accumulator: RegisterTensor,
    a: tuple[SharedTensor, RegisterLayout, ExprLike],
    b: tuple[SharedTensor, RegisterLayout, ExprLike],
    block_k: int,
    inner_k: int,
) -> None:
    """``accumulator += A @ B`` over one k-tile in `inner_k` slices: `a` and `b` are (shared
    ring, operand layout, stage); A's stage is (block_m, block_k), B's (block_k, block_n)."""
    (a_ring, a_layout, a_stage), (b_ring, b_layout, b_stage) = a, b
    with bld.for_range(0, block_k, inner_k) as kk:
        a_tile = bld.load_shared(a_ring, a_layout, [a_stage, 0, kk])
        b_tile = bld.load_shared(b_ring, b_layout, [b_stage, kk, 0])
        bld.assign(accumulator, bld.dot(a_tile, b_tile, accumulator))


def ring_loop(
    bld: ProgramBuilder,
    stages: int,
    tiles: Expr,
    prefetch: Callable[[ExprLike, ExprLike], None],
    multiply: Callable[[Expr], None],
    overlap_dot: bool = False,
    prepare: Callable[[Expr], None] | None = None,
    prologue: Callable[[], None] | None = None,
    wait_tile: Callable[[Expr], None] | None = None,
) -> None:
    """The k loop over a ring of `stages` shared stages: ``prefetch(t, stage)`` issues the
    copies of k-tile t into a stage, ``multiply(kt)`` the dot of k-tile kt (in stage
    kt % stages), and ``prepare(kt)``, when given, what k-tile kt needs in shared memory
    besides the copies (stored before the barrier that precedes the dot); ``prologue()`` runs
    after the first copies, before the loop.

    Plain: k-tile kt + S - 1 is copied at the top of iteration kt, into the stage that kt - 1
    used; then `prepare`; a barrier after the copies have landed and another after the dot,
    before the next copy overwrites its stage. With `overlap_dot`: `prepare` first; k-tiles
    run S - 2 ahead, copied after the dot into the stage of kt - 2, with one barrier, before
    the dot. Every thread is then past the dots of kt - 1 when kt + S - 2 is copied, and a dot
    that keeps running after it is issued (wgmma, `backend.wgmma_pipeline`) has two stages to
    itself.

    With `wait_tile` (bulk copies, `copy_bulk`): ``wait_tile(kt)`` waits for k-tile kt's
    copies, which every thread then sees, instead of copy groups; the barrier before the dot
    stays where it orders something else (`prepare`'s stores, or the copy after the dot)."""
    ahead = stages - 2 if overlap_dot else stages - 1
    bulk = wait_tile is not None
    fill_ring(bld, ahead + 1, tiles, prefetch, commit=not bulk)
    if prologue is not None:
        prologue()
    with bld.for_range(tiles) as kt:
        if overlap_dot:
            if prepare is not None:
                prepare(kt)
            if bulk:
                wait_tile(kt)
            else:
                bld.copy_async_wait(ahead - 1)
            bld.sync()
            multiply(kt)
            with bld.if_(kt + ahead < tiles):
                prefetch(kt + ahead, (kt + ahead) % stages)
            if not bulk:
                bld.copy_async_commit()
        else:
            with bld.if_(kt + ahead < tiles):
                prefetch(kt + ahead, (kt + ahead) % stages)
            if not bulk:
                # One group per k-tile, empty ones included: k-tile kt's group is complete
                # when at most stages - 1 later ones are pending.
                bld.copy_async_commit()
            if prepare is not None:
                prepare(kt)
            if bulk:
                wait_tile(kt)
            else:
                bld.copy_async_wait(ahead)
            if not bulk or prepare is not None:
                bld.sync()
            multiply(kt)
            # Every thread is past its reads of this stage before a later copy into it.
            bld.sync()


def grouped_tile(
    bld: ProgramBuilder,
    m: Expr,
    n: Expr,
    block_m: int,
    block_n: int,
    group_m: int,
    block: Expr | None = None,
) -> tuple[Expr, Expr]:
    """(tile row, tile column) of output tile number `block` (None: this block's number
    ``y * tiles_n + x`` in the launch grid) when tiles are taken in groups of `group_m` tile
    rows (`matmul`'s `group_m`): number b takes, in group g = b // (group_m * tiles_n), whose r
    rows start at g * group_m, the tile (g * group_m + i % r, i // r) with i = b % (group_m *
    tiles_n). With no groups (1) and no `block`, block (x, y) takes tile (y, x)."""
    tiles_m, tiles_n = (m + block_m - 1) // block_m, (n + block_n - 1) // block_n
    if block is None:
        if group_m == 1:
            return bld.block_y, bld.block_x
        block = bld.block_y * tiles_n + bld.block_x
    if group_m == 1:
        return block // tiles_n, block % tiles_n
    per_group = group_m * tiles_n
    first = block // per_group * group_m
    rows = minimum(tiles_m - first, group_m)
    within = block % per_group
    return first + within % rows, within // rows


def matmul(
    num_threads: int = 128,
    block_m: int = 64,
    block_n: int = 64,
    block_k: int = 32,
    inner_k: int | None = None,
    tensor_cores: bool = False,
    *,
    stages: int = 2,
    swizzle: bool = False,
    wgmma: bool = False,
    overlap_dot: bool = False,
    bulk: bool = False,
    group_m: int = 1,
    producer: bool = False,
    persistent: int = 0,
    staged_store: bool = False,
) -> Program:
    """The program ``matmul(m, n, k, a, b, c)``: c = f16(a @ b) with f32 accumulation.

    `tensor_cores` picks the dot's layouts (`dot_layouts`); `inner_k` None means
    `default_inner_k(tensor_cores)`. The accumulation order is the dot's (k increasing), so
    with SIMT layouts the result is bit-exact against `ir.run_reference` on the GPU; with
    tensor-core layouts the GPU result is within mma rounding of it. `stages` k-tiles are in
    flight in a ring of shared buffers (2: the double buffering of the module docstring; with
    S stages the first S - 1 are copied before the loop and k-tile kt + S - 1 while kt is
    computed); `swizzle` XOR-swizzles the buffers' 16-byte chunks per row
    (`shared_row_major_swizzle`), so that the tensor cores' ldmatrix reads of 8 rows meet no
    bank conflict. Raises VerificationError when the tile sizes do not fit the layouts,
    `inner_k` does not divide `block_k`, `stages` is not an int from 2 to 8, or `swizzle` not
    a bool.

    `wgmma` builds the warpgroup form (`wgmma_dot_layouts`, one dot per k-tile: `inner_k`
    defaults to `block_k`): A's stages swizzled row-major, B's stored as swizzled panels of 64
    columns (`PANEL_BYTES`, each a contiguous (block_k, 64) block), the shared layouts whose
    tiles ``wgmma`` descriptors read; it implies `tensor_cores` and `swizzle`.

    `overlap_dot` orders the ring so that a k-tile's dot may still run while later k-tiles
    load (`ring_loop`): k-tile kt + S - 2 is copied after kt's dot, into the stage the dot of
    kt - 2 read, and the loop has one barrier, before the dot. The program means the same; on
    sm_90a the lowering then keeps each wgmma dot in flight into the next iteration
    (`backend.wgmma_pipeline`). It needs at least 3 stages.

    `bulk` copies the tiles by `copy_bulk` (on sm_90 a TMA bulk tensor copy per tile, or per
    64-column panel of the wgmma form's B, where the swizzled stage is a box of a tensor map;
    `backend.bulk_copy`) and waits for each k-tile's tiles by `copy_bulk_wait`, with no copy
    groups; in the plain ring the barrier before the dot then goes, as every thread sees a
    bulk copy once it has waited.

    `group_m` orders the output tiles in groups of `group_m` tile rows: the blocks, numbered
    row by row over the launch grid, take the tiles of a group column by column, so that the
    blocks running at once share their B tiles as well as their A rows in the L2 cache (1:
    block (x, y) takes tile (x, y)). The grid is the same.

    `producer` adds a producer warp to the block (threads `num_threads` up, a `thread_group`
    of its own; the `num_threads` consumers are another): it alone issues the bulk copies,
    stages - 1 k-tiles ahead (stages - 2 with `overlap_dot`), held back only by the consumers'
    releases (`copy_bulk_release`) of the stages their dots are past, and no barrier of the
    whole block is left in the loop. On sm_90a each group then runs its own loop
    (`backend.lower.warp_classes`). It needs `wgmma` and `bulk`.

    `persistent` (0: one block per output tile) launches that many blocks, or one per tile if
    there are fewer: the program declares the grid ``(min(tiles, persistent), 1)``, and block x
    computes the tiles x, x + persistent, ... in the order `group_m` gives. With `producer`,
    the producer warp copies the next tile's first k-tiles while the consumers finish and
    store the last one.

    `staged_store` writes C's tile through a shared tile (swizzled row-major, a barrier on
    each side) and stores it from there in 16-byte runs along its rows (`row_store_layout`),
    whole rows a warp, instead of from the dot's accumulator layout, whose threads hold pairs
    of columns. With one tile a block the shared tile reuses the ring's memory
    (`ir.shared_reuse`); persistent blocks and the producer form need the memory of one more C
    tile.
    """
    if isinstance(group_m, bool) or not isinstance(group_m, int) or group_m < 1:
        raise VerificationError(f"matmul: group_m={group_m!r}; expected an int >= 1")
    for name, value in (("wgmma", wgmma), ("bulk", bulk)):
        if not isinstance(value, bool):
            raise VerificationError(f"matmul: {name}={value!r}; expected True or False")
    check_overlap_dot("matmul", overlap_dot, stages)
    if not isinstance(producer, bool) or (producer and not (wgmma and bulk)):
        raise VerificationError(
            f"matmul: producer={producer!r} with wgmma={wgmma!r}, bulk={bulk!r}; expected a "
            "bool, True only with wgmma and bulk"
        )
    if isinstance(persistent, bool) or not isinstance(persistent, int) or persistent < 0:
        raise VerificationError(f"matmul: persistent={persistent!r}; expected an int >= 0")
    if not isinstance(staged_store, bool):
        raise VerificationError(f"matmul: staged_store={staged_store!r}; expected True or False")
    if wgmma:
        tensor_cores, swizzle = True, True
        inner_k = block_k if inner_k is None else inner_k
    if inner_k is None:
        inner_k = default_inner_k(tensor_cores)
    if block_k % inner_k:
        raise VerificationError(f"inner_k {inner_k} must divide block_k {block_k}")
    if isinstance(stages, bool) or not isinstance(stages, int) or not 2 <= stages <= 8:
        raise VerificationError(f"matmul: stages={stages!r}; expected an int from 2 to 8")
    if not isinstance(swizzle, bool):
        raise VerificationError(f"matmul: swizzle={swizzle!r}; expected True or False")
    a_layout, b_layout, c_layout = dot_layouts(
        num_threads, block_m, block_n, inner_k, tensor_cores, wgmma
    )
    f16, f32 = dtypes.f16, dtypes.f32
    threads = num_threads + (WARP_SIZE if producer else 0)
    with ProgramBuilder("matmul", threads) as bld:
        m = bld.int_param("m")
        n = bld.int_param("n", multiple_of=ROW_MULTIPLE)
        k = bld.int_param("k", multiple_of=ROW_MULTIPLE)
        a, b, c = (bld.array_param(name, f16) for name in ("a", "b", "c"))
        a_view = bld.global_view(a, f16, GlobalLayout((m, k), (k, 1)))
        b_view = bld.global_view(b, f16, GlobalLayout((k, n), (n, 1)))
        c_view = bld.global_view(c, f16, GlobalLayout((m, n), (n, 1)))
        buffer = shared_row_major_swizzle if swizzle else shared_row_major
        options = {"element_bits": 16} if swizzle else {}
        a_shared = bld.shared_tensor(f16, buffer(stages, block_m, block_k, **options))
        if wgmma:
            b_buffer = wgmma_b_buffer(block_k, block_n, stages)
        else:
            b_buffer = buffer(stages, block_k, block_n, **options)
        b_shared = bld.shared_tensor(f16, b_buffer)
        if staged_store:
            store_layout = row_store_layout(num_threads, block_m, block_n)
            # One tile a block: C's tile takes the ring's memory, which it no longer needs.
            reuse = () if persistent or producer else (a_shared, b_shared)
            c_shared = bld.shared_tensor(
                f16, shared_row_major_swizzle(block_m, block_n, element_bits=16), reuse
            )
        tiles = (k + block_k - 1) // block_k

        # The wgmma form's B stage is made of 64-column panels: a bulk copy each.
        panel = PANEL_BYTES // 2
        b_columns = panel if wgmma and block_n % panel == 0 else block_n

        def compute_tile(tile_m: Expr, tile_n: Expr) -> None:
            """C's output tile (tile_m, tile_n): its k loop over the ring, then its store."""
            row0, col0 = tile_m * block_m, tile_n * block_n

            def prefetch(tile, stage):
                if not bulk:
                    bld.copy_async(a_shared, a_view, [row0, tile * block_k], [stage, 0, 0])
                    bld.copy_async(b_shared, b_view, [tile * block_k, col0], [stage, 0, 0])
                    return
                bld.copy_bulk(a_shared, a_view, [row0, tile * block_k], [stage, 0, 0])
                for first in range(0, block_n, b_columns):
                    bld.copy_bulk(
                        b_shared,
                        b_view,
                        [tile * block_k, col0 + first],
                        [stage, 0, first],
                        shape=(block_k, b_columns),
                    )

            if producer:
                produced_tile(prefetch, row0, col0)
                return
            accumulator = bld.register_tensor(f32, c_layout, 0.0)
            ring_loop(
                bld,
                stages,
                tiles,
                prefetch,
                lambda kt: multiply(accumulator, kt),
                overlap_dot,
                wait_tile=wait_tile if bulk else None,
            )
            store_tile(accumulator, row0, col0)
            if persistent:
                # Every thread is past its reads of the ring before the next tile's copies.
                bld.sync()

        def multiply(accumulator: RegisterTensor, kt: Expr) -> None:
            """``accumulator += A @ B`` over k-tile kt's stage of the ring."""
            stage = kt % stages
            a, b = (a_shared, a_layout, stage), (b_shared, b_layout, stage)
            accumulate_tiles(bld, accumulator, a, b, block_k, inner_k)

        def wait_tile(kt: Expr) -> None:
            stage = kt % stages
            bld.copy_bulk_wait(a_shared, [stage, 0, 0])
            bld.copy_bulk_wait(b_shared, [stage, 0, 0], shape=(block_k, block_n))

        def release(stage: Expr) -> None:
            bld.copy_bulk_release(a_shared, [stage, 0, 0], shape=(block_m, block_k))
            bld.copy_bulk_release(b_shared, [stage, 0, 0], shape=(block_k, block_n))

        def produced_tile(prefetch: Callable[[ExprLike, ExprLike], None], row0, col0) -> None:
            """The producer form of `compute_tile`: the producer warp copies the k-tiles
            ahead, held back only by the releases; the consumers wait, multiply, release
            each stage once their dots are past it, and store."""
            ahead = stages - 2 if overlap_dot else stages - 1
            with producer_warp():
                fill_ring(bld, ahead + 1, tiles, prefetch, commit=False)
            with consumers():
                accumulator = bld.register_tensor(f32, c_layout, 0.0)
            with bld.for_range(tiles) as kt:
                with producer_warp(), bld.if_(kt + ahead < tiles):
                    prefetch(kt + ahead, (kt + ahead) % stages)
                with consumers():
                    wait_tile(kt)
                    multiply(accumulator, kt)
                    if not overlap_dot:
                        release(kt % stages)
                    else:
                        # The dot of the k-tile before may have run into this one; every
                        # thread is past it now (this one's may still run).
                        with bld.if_(kt > 0):
                            release((kt - 1) % stages)
            with consumers():
                if overlap_dot and persistent:
                    # The last k-tile's stage, which no later k-tile releases: the next
                    # tile's copies fill it.
                    release((tiles - 1) % stages)
                store_tile(accumulator, row0, col0)

        def store_tile(accumulator: RegisterTensor, row0: Expr, col0: Expr) -> None:
            """C's tile at (row0, col0) = f16(accumulator): straight from the accumulator's
            layout, or through `c_shared` in whole rows (`staged_store`)."""
            result = bld.cast(accumulator, f16)
            if staged_store:
                # A barrier on each side: every thread is past its reads of the last tile
                # (persistent blocks), and every thread's part has landed.
                bld.sync()
                bld.store_shared(c_shared, result)
                bld.sync()
                result = bld.load_shared(c_shared, store_layout)
            bld.store_global(c_view, result, [row0, col0])

        def consumers() -> contextlib.AbstractContextManager[None]:
            return bld.thread_group(0, num_threads)

        def producer_warp() -> contextlib.AbstractContextManager[None]:
            return bld.thread_group(num_threads, WARP_SIZE)

        if not persistent:
            compute_tile(*grouped_tile(bld, m, n, block_m, block_n, group_m))
        else:
            count = ((m + block_m - 1) // block_m) * ((n + block_n - 1) // block_n)
            bld.grid(minimum(count, persistent))
            with bld.for_range((count - bld.block_x + persistent - 1) // persistent) as i:
                number = bld.block_x + i * persistent
                compute_tile(*grouped_tile(bld, m, n, block_m, block_n, group_m, number))
    return bld.program()

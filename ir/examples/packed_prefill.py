"""What the two prefill programs of the packed weights share: the activation ring they read
A^T from, its bulk copies, the register ring of packed words and scale rows, and the checks of
their common configuration fields.

`ir.examples.wgmma_dequant_matmul` multiplies the dequantized weights from registers,
`ir.examples.staged_dequant_matmul` stages them in shared memory; both compute C^T = W^T A^T
with a (BK, block_m) tile of A^T as the ``wgmma`` B operand, copied into `transposed_ring`
k-tiles ahead, and both hold the packed words and scale rows of the next `depth` k-tiles in
registers (`RegisterRing`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.examples.packed_weights import (
    UNIT_K,
    UNIT_LANES,
    check_int_fields,
    packed_operands,
    packed_views,
    tile_ahead,
)
from ir.examples.split_sum import add_parts_last, sum_layout
from ir.values import GlobalTensor, RegisterTensor, SharedTensor
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import RegisterLayout
from layout_algebra.shared import SharedLayout, row_swizzle
from layout_algebra.symbolic import Expr, minimum

WARPGROUP_WARPS = 4
"""Warps of a warpgroup: one ``wgmma`` instruction's 64 rows come 16 from each."""
MAX_BLOCK_M = 256
"""The widest ``wgmma`` N side: the most rows of A per block."""
PANEL_K = 64
"""Values of k per row of the activation ring: 128 bytes of 16-bit values, the widest swizzled
row a ``wgmma`` descriptor and a TMA box take."""


class PrefillTile:
    """What the prefill programs' configurations compute alike from their fields
    (``warpgroups``, ``units_k``, ``block_m``, ``split``, and the ``block_n`` each defines):
    the warps of a block, the k-tile, the launch grid and the output tiles."""

    warpgroups: int
    units_k: int
    block_m: int
    block_n: int
    split: int = 1
    """Blocks along k (grid z) that each compute a part of an output tile: 1 where the
    configuration has no such field."""

    @property
    def warps(self) -> int:
        return WARPGROUP_WARPS * self.warpgroups

    @property
    def block_k(self) -> int:
        return UNIT_K * self.units_k

    def grid(self, m: int, n: int) -> tuple[int, int, int]:
        """The launch grid for C of shape (m, n)."""
        return (n // self.block_n, -(-m // self.block_m), self.split)

    def tiles(self, m: int, n: int) -> int:
        """Output tiles of C of shape (m, n): the counters a split-k sum needs."""
        return (n // self.block_n) * -(-m // self.block_m)


def check_prefill_fields(
    program: str, config: Any, positive: tuple[str, ...], least_stages: int
) -> None:
    """Raise VerificationError naming the first of `config`'s fields out of range: `positive`
    ints >= 1, ``min_blocks_per_sm`` >= 0, ``stages`` from `least_stages` to 8, ``block_m`` a
    multiple of 8 up to `MAX_BLOCK_M`, ``warpgroups`` at most 8 (1024 threads)."""
    check_int_fields(program, config, positive, 1)
    check_int_fields(program, config, ("min_blocks_per_sm",), 0)
    stages = config.stages
    if isinstance(stages, bool) or not isinstance(stages, int) or not least_stages <= stages <= 8:
        raise VerificationError(
            f"{program}: stages={stages!r}; expected an int from {least_stages} to 8"
        )
    if config.block_m % 8 or config.block_m > MAX_BLOCK_M:
        raise VerificationError(
            f"{program}: block_m={config.block_m}; expected a multiple of 8 up to "
            f"{MAX_BLOCK_M} (wgmma's N side)"
        )
    if config.warpgroups * WARPGROUP_WARPS * UNIT_LANES > 1024:
        raise VerificationError(f"{program}: warpgroups={config.warpgroups}; a block has at most 8")


def transposed_ring(stages: int, block_k: int, block_m: int) -> SharedLayout:
    """`stages` (block_k, block_m) tiles of A^T in K-major panels of at most `PANEL_K` values of
    k: in a stage, panel p holds k in [p PANEL_K, (p + 1) PANEL_K) for every token, each token's
    values of it one row, 16-byte chunks XOR-swizzled by the row
    (`layout_algebra.shared.row_swizzle` of 16-bit rows of min(block_k, PANEL_K)): element (s,
    kk, t) at ``s block_m block_k + (kk // P) block_m P + swizzle(t P + kk % P)``, P the panel
    width. That is the layout a ``wgmma`` descriptor reads for B (the 128-byte mode at P = 64),
    and one TMA box per panel writes it."""
    panel = min(block_k, PANEL_K)
    if block_k % panel:
        raise VerificationError(
            f"transposed_ring: block_k={block_k}; expected a multiple of {PANEL_K} or at most it"
        )
    shape = (stages, block_k, block_m)
    modes = (stages, block_k // panel, panel, block_m)
    strides = (block_m * block_k, block_m * panel, 1, panel)
    return SharedLayout(shape, modes, strides, row_swizzle(panel, 16))


@dataclass(frozen=True)
class PrefillTensors:
    """What `declare_prefill` declared: the int parameters `m`, `n`, `k`; `tiles`, the
    k-tiles of the block's part of k, from k-tile `tile0`; the views of A^T, of the packed
    words, scale rows and zero-point rows (None without), of C^T; the activation ring; the
    block's first row of A and column of N; and with a split, the views of the split-k sum
    (`SplitSum`; None without)."""

    m: Expr
    n: Expr
    k: Expr
    tiles: Expr
    tile0: Expr | int
    a_columns: GlobalTensor
    packed_view: GlobalTensor
    scale_view: GlobalTensor
    zero_view: GlobalTensor | None
    c_columns: GlobalTensor
    ring: SharedTensor
    row0: Expr
    col0: Expr
    split_sum: SplitSum | None

    def rows(self, b: ProgramBuilder, group: Any, layout: RegisterLayout) -> list[RegisterTensor]:
        """Row `group` of the scale view, then of the zero-point view (if any), from the
        block's first column, in `layout`."""
        views = [self.scale_view] + ([] if self.zero_view is None else [self.zero_view])
        return [b.load_global(view, [group, self.col0], layout) for view in views]

    def copy_ahead(self, b: ProgramBuilder, first: Any, d: int) -> None:
        """Copy k-tile ``first + d`` of A^T, where it exists, into its stage of the ring."""
        stage = (first + d) % self.ring.layout.shape[0]
        tile_ahead(
            b,
            first,
            d,
            self.tiles,
            lambda t: copy_activations(
                b, self.ring, self.a_columns, self.tile0 + t, stage, self.row0
            ),
        )

    def store(self, b: ProgramBuilder, result: RegisterTensor, act: DataType) -> None:
        """Store `result`, the block's f32 (block_n, block_m) tile of C^T: as `act` into C
        without a split; else into the block's slot of the partial sums, the last of the
        tile's blocks adding them up into C (`ir.examples.split_sum`)."""
        if self.split_sum is None:
            b.store_global(self.c_columns, b.cast(result, act), [self.col0, self.row0])
            return
        sums = self.split_sum
        b.store_global(sums.part_columns, result, [b.block_z, self.col0, self.row0])
        block_n, block_m = result.layout.shape
        add_parts_last(
            b,
            parts=sums.parts,
            out=sums.out,
            counters=sums.counters,
            tile=b.block_y * sums.tiles_n + b.block_x,
            origin=(self.row0, self.col0),
            count=sums.count,
            layout=sum_layout(block_m, block_n, b.num_threads),
            out_dtype=act,
        )


@dataclass(frozen=True)
class SplitSum:
    """The views a split prefill program's fused split-k sum uses: `part_columns` the (count,
    n, m) f32 partial sums as C^T tiles (where blocks store their parts), `parts` the same
    memory as (count, m, n), `out` C as (m, n), `counters` the (tiles,) i32 tile counters;
    `count` parts a tile, `tiles_n` tiles along N."""

    part_columns: GlobalTensor
    parts: GlobalTensor
    out: GlobalTensor
    counters: GlobalTensor
    count: int
    tiles_n: Expr


def declare_prefill(
    b: ProgramBuilder,
    config: Any,
    activation_dtype: DataType,
    nbits: int,
    group_size: int,
    zero_points: bool,
) -> PrefillTensors:
    """The parameters ``qmm(m, n, k, a, packed, scales, [zeros,] c)`` of a prefill program of
    `config` (its ``block_m``, ``block_n``, ``block_k``, ``stages``, ``min_blocks_per_sm``,
    ``split``), with ``split`` > 1 ``qmm(m, n, k, a, packed, scales, [zeros,] partial,
    counters, c)`` (an f32 (split, m, n) workspace and `PrefillTile.tiles` i32 counters, zero
    before the launch and left zero after it); its grid ``(n // block_n, ceil(m / block_m),
    split)``, block z taking the z-th of `split` equal parts of k; the views it reads and
    writes (A and C transposed) and its activation ring."""
    act, block_m, block_n, block_k, split = (
        activation_dtype,
        config.block_m,
        config.block_n,
        config.block_k,
        config.split,
    )
    if config.min_blocks_per_sm:
        b.min_blocks_per_sm(config.min_blocks_per_sm)
    m = b.int_param("m", lo=1)
    n = b.int_param("n", lo=block_n, multiple_of=block_n, constant=True)
    k = b.int_param("k", lo=block_k * split, multiple_of=block_k * split, constant=True)
    operands = packed_operands(b, act, zero_points)
    if split > 1:
        partial = b.array_param("partial", dtypes.f32)
        counters = b.array_param("counters", dtypes.i32)
    c = b.array_param("c", act)
    tiles_n, tiles_m = n // block_n, (m + block_m - 1) // block_m
    if split > 1:
        b.grid(tiles_n, tiles_m, split)
    else:
        b.grid(tiles_n, tiles_m)
    a_columns = b.global_view(operands[0], act, GlobalLayout((k, m), (1, k)))  # A^T
    packed_view, scale_view, zero_view = packed_views(b, operands, nbits, n, k, group_size)
    c_columns = b.global_view(c, act, GlobalLayout((n, m), (1, n)))  # C^T
    split_sum = None
    if split > 1:
        split_sum = SplitSum(
            b.global_view(partial, dtypes.f32, GlobalLayout((split, n, m), (m * n, 1, n))),
            b.global_view(partial, dtypes.f32, GlobalLayout((split, m, n), (m * n, n, 1))),
            b.global_view(c, act, GlobalLayout((m, n), (n, 1))),
            b.global_view(counters, dtypes.i32, GlobalLayout((tiles_n * tiles_m,), (1,))),
            split,
            tiles_n,
        )
    ring = b.shared_tensor(act, transposed_ring(config.stages, block_k, block_m))
    row0, col0 = b.block_y * block_m, b.block_x * block_n
    tiles = k // (block_k * split)
    return PrefillTensors(
        m,
        n,
        k,
        tiles,
        b.block_z * tiles if split > 1 else 0,
        a_columns,
        packed_view,
        scale_view,
        zero_view,
        c_columns,
        ring,
        row0,
        col0,
        split_sum,
    )


def copy_activations(
    b: ProgramBuilder,
    ring: SharedTensor,
    a_columns: GlobalTensor,
    tile: Any,
    stage: Any,
    row0: Any,
) -> None:
    """Bulk-copy k-tile `tile` of A^T (`a_columns`, the (k, m) view), rows of A from `row0`,
    into `stage` of `ring` (`transposed_ring`): one copy per panel of k."""
    _, block_k, block_m = ring.layout.shape
    panel = min(block_k, PANEL_K)
    for first in range(0, block_k, panel):
        b.copy_bulk(
            ring,
            a_columns,
            [tile * block_k + first, row0],
            [stage, first, 0],
            shape=(panel, block_m),
        )


class RegisterRing:
    """The packed operands of the next `depth` k-tiles held in registers: `fetch(tile)` loads
    a k-tile's list of tensors (its packed words, then its group's scale row and zero points),
    issued `depth` k-tiles before `current` holds them. Made before the k loop (the first
    `depth` k-tiles' loads); `advance(tile)` at the top of the loop body moves k-tile `tile`
    into `current` and loads k-tile ``tile + depth``."""

    def __init__(
        self,
        b: ProgramBuilder,
        fetch: Callable[[Any], Sequence[RegisterTensor]],
        tiles: Any,
        depth: int,
    ):
        self.b, self.fetch, self.tiles, self.depth = b, fetch, tiles, depth
        self.in_flight = [list(fetch(minimum(d, tiles - 1))) for d in range(depth)]
        self.current = [b.register_tensor(x.dtype, x.layout, 0) for x in self.in_flight[0]]

    def _refill(self, slot: Sequence[RegisterTensor], fetched: Sequence[RegisterTensor]) -> None:
        for held, value in zip(slot, fetched):
            self.b.assign(held, value)

    def advance(self, tile: Any) -> list[RegisterTensor]:
        """In the k loop's body: k-tile `tile`'s tensors into `current` (returned), and the
        loads of k-tile ``tile + depth`` where it exists."""
        self._refill(self.current, self.in_flight[0])
        for d in range(self.depth - 1):
            self._refill(self.in_flight[d], self.in_flight[d + 1])
        last = self.in_flight[self.depth - 1]
        tile_ahead(
            self.b, tile, self.depth, self.tiles, lambda t: self._refill(last, self.fetch(t))
        )
        return self.current

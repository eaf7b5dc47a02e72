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

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from ir import dtypes
from ir.builder import INT_PARAM_LIMIT, ProgramBuilder
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
from ir.examples.split_sum import add_parts_in_fragments, fragment_parts_view
from ir.examples.split_tail import split_tail_blocks, split_tail_part, split_tiles
from ir.examples.stream_k import (
    stream_k_blocks,
    stream_k_prefix,
    stream_k_segments,
    stream_k_slots,
)
from ir.values import GlobalTensor, RegisterTensor, SharedTensor
from ir.verifier import MAX_CLUSTER_BLOCKS
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import RegisterLayout, local
from layout_algebra.shared import SharedLayout, row_swizzle
from layout_algebra.symbolic import Expr, maximum, minimum

WARPGROUP_WARPS = 4
"""Warps of a warpgroup: one ``wgmma`` instruction's 64 rows come 16 from each."""
MAX_BLOCK_M = 256
"""The widest ``wgmma`` N side: the most rows of A per block."""
PANEL_K = 64
"""Values of k per row of the activation ring: 128 bytes of 16-bit values, the widest swizzled
row a ``wgmma`` descriptor and a TMA box take."""


class PrefillTile:
    """What the prefill programs' configurations compute alike from their fields
    (``warpgroups``, ``units_k``, ``block_m``, ``split``, ``stream_k``, and the ``block_n``
    each defines): the warps of a block, the k-tile, the launch grid, the output tiles and the
    partial-sum slots."""

    warpgroups: int
    units_k: int
    block_m: int
    block_n: int
    split: int = 1
    """Blocks along k (grid z) that each compute a part of an output tile: 1 where the
    configuration has no such field."""
    stream_k: int = 0
    """Persistent blocks sharing every tile's k-tiles (`ir.examples.stream_k`): 0 (none) where
    the configuration has no such field."""
    stream_k_tail: bool = False
    """With `stream_k` S: the tiles before the last one to two waves of S are computed whole,
    one block each, and only the rest shared (`ir.examples.stream_k.stream_k_prefix`): False
    where the configuration has no such field."""
    persistent: int = 0
    """Persistent blocks computing whole tiles in turn (`persistent_tiles`): 0 (none) where
    the configuration has no such field."""
    staged_store: bool = False
    """C's tile written through a shared tile and stored from there in 16-byte runs along C's
    rows (`PrefillTensors.store`): False where the configuration has no such field."""
    group_m: int = 1
    """Tile rows a group of the launch grid takes, rows first (`PrefillTile.grid`): 1 (row by
    row) where the configuration has no such field."""
    tail_wave: int = 0
    """With `split` P > 1: the blocks of a wave, S; only the tiles past the last whole wave of
    S are split, each into at most P parts (`ir.examples.split_tail`): 0 (every tile split)
    where the configuration has no such field."""
    cluster_n: int = 1
    """Neighbouring column tiles of one row tile launched as a cluster
    (`ProgramBuilder.cluster`), which share each activation tile's bulk copy: 1 (no cluster)
    where the configuration has no such field."""

    @property
    def warps(self) -> int:
        return WARPGROUP_WARPS * self.warpgroups

    @property
    def block_k(self) -> int:
        return UNIT_K * self.units_k

    @property
    def granule(self) -> int:
        """The run of k-tiles a stream-K share or a tail tile's part is counted in
        (`ir.examples.stream_k`, `ir.examples.split_tail`): the k loop's unroll count, so that
        each loop over a share runs whole groups of copies (1 without stream-K or a split
        tail, or where the configuration has no ``unroll``)."""
        return getattr(self, "unroll", 1) if self.stream_k or self.tail_wave else 1

    def grid(self, m: int, n: int, k: int | None = None) -> tuple[int, int, int]:
        """The launch grid for C of shape (m, n) (with `stream_k`, for K = `k`, required)."""
        if self.stream_k:
            if k is None:
                raise VerificationError(f"{type(self).__name__}.grid: a stream_k grid needs k")
            blocks = min(self.stream_k, self.shared_iterations(m, n, k) // self.granule)
            return (self.prefix_tiles(m, n) + blocks, 1, 1)
        if self.persistent:
            return (min(self.persistent, self.tiles(m, n)), 1, 1)
        if self.tail_wave:
            return (int(split_tail_blocks(self.tiles(m, n), self.tail_wave, self.split)), 1, 1)
        tiles_m = -(-m // self.block_m)
        if self.group_m > 1:
            return grouped_grid(tiles_m, n // self.block_n, self.group_m)
        return (n // self.block_n, tiles_m, self.split)

    def tiles(self, m: int, n: int) -> int:
        """Output tiles of C of shape (m, n): the counters a split-k sum needs."""
        return (n // self.block_n) * -(-m // self.block_m)

    def iterations(self, m: int, n: int, k: int) -> int:
        """W: k-tile iterations of all output tiles of C (m, n) for K = `k`."""
        return self.tiles(m, n) * (k // self.block_k)

    def prefix_tiles(self, m: int, n: int) -> int:
        """D, the tiles of C (m, n) a `stream_k_tail` launch computes whole first (else 0)."""
        if not (self.stream_k and self.stream_k_tail):
            return 0
        return int(stream_k_prefix(self.tiles(m, n), self.stream_k))

    def shared_iterations(self, m: int, n: int, k: int) -> int:
        """The k-tile iterations of the tiles whose k-tiles blocks share (past the prefix)."""
        return (self.tiles(m, n) - self.prefix_tiles(m, n)) * (k // self.block_k)

    def partial_slots(self, m: int, n: int, k: int) -> int:
        """The slots of partial sums a launch for C (m, n) and K = `k` takes, each a part of
        every shared output tile (`partial_shape`): `split` slots with a split,
        `ir.examples.stream_k.stream_k_slots` with `stream_k`, else 0 (no workspace)."""
        if self.stream_k:
            work, granule = self.shared_iterations(m, n, k), self.granule
            blocks = min(self.stream_k, work // granule)
            return stream_k_slots(k // self.block_k, work, blocks, granule)
        return self.split if self.split > 1 else 0

    def partial_shape(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        """The f32 workspace a launch for C (m, n) and K = `k` takes, as (slots, tiles,
        block_n * block_m): a whole tile's part per slot and shared output tile (every tile,
        those past the prefix with `stream_k_tail`, or the split tail's with `tail_wave`, at
        least one; rows past m included), in the order of the accumulator registers
        (`ir.examples.split_sum.fragment_parts_view`); slots 0 without a split or stream-K."""
        shared = self.tiles(m, n) - self.prefix_tiles(m, n)
        if self.tail_wave:
            shared = max(int(split_tiles(shared, self.tail_wave, self.split)), 1)
        return (self.partial_slots(m, n, k), shared, self.block_n * self.block_m)


def check_prefill_fields(
    program: str, config: Any, positive: tuple[str, ...], least_stages: int
) -> None:
    """Raise VerificationError naming the first of `config`'s fields out of range: `positive`
    ints >= 1, ``min_blocks_per_sm`` >= 0, ``stages`` from `least_stages` to 8, ``block_m`` a
    multiple of 8 up to `MAX_BLOCK_M`, ``warpgroups`` at most 8 (1024 threads)."""
    check_int_fields(program, config, positive, 1)
    check_int_fields(
        program, config, ("min_blocks_per_sm", "stream_k", "persistent", "tail_wave"), 0
    )
    check_int_fields(program, config, ("group_m",), 1)
    if config.group_m > 1 and (config.split != 1 or config.stream_k or config.persistent):
        raise VerificationError(
            f"{program}: group_m={config.group_m} with split={config.split}, "
            f"stream_k={config.stream_k}, persistent={config.persistent}; groups of tile rows "
            "order a launch of one block a tile, so they require split 1, no stream-K and no "
            "persistent blocks"
        )
    if not isinstance(config.stream_k_tail, bool) or (config.stream_k_tail and not config.stream_k):
        raise VerificationError(
            f"{program}: stream_k_tail={config.stream_k_tail!r} with "
            f"stream_k={config.stream_k}; expected a bool, True only with stream_k"
        )
    if config.tail_wave and (config.split == 1 or config.stream_k or config.persistent):
        raise VerificationError(
            f"{program}: tail_wave={config.tail_wave} with split={config.split}, "
            f"stream_k={config.stream_k}, persistent={config.persistent}; a split tail splits "
            "the last wave's tiles in up to split parts, so it requires split > 1, no stream-K "
            "and no persistent blocks"
        )
    check_int_fields(program, config, ("cluster_n",), 1)
    clustered = config.cluster_n
    if clustered > MAX_CLUSTER_BLOCKS:
        raise VerificationError(
            f"{program}: cluster_n={clustered}; expected at most {MAX_CLUSTER_BLOCKS} (the blocks "
            "of a portable cluster)"
        )
    released = getattr(config, "release", False)
    if clustered > 1 and (config.stream_k or config.persistent or config.tail_wave or not released):
        raise VerificationError(
            f"{program}: cluster_n={clustered} with stream_k={config.stream_k}, "
            f"persistent={config.persistent}, tail_wave={config.tail_wave}, "
            f"release={released}; a cluster shares the activation tiles of the column "
            "tiles of one row tile, whose blocks hand the ring's stages back by releases, so it "
            "requires release and a grid of one block a tile or a split"
        )
    if config.stream_k and config.split != 1:
        raise VerificationError(
            f"{program}: stream_k={config.stream_k} with split={config.split}; stream-K "
            "shares the k-tiles of every tile itself, so it requires split 1"
        )
    if config.persistent and (config.split != 1 or config.stream_k):
        raise VerificationError(
            f"{program}: persistent={config.persistent} with split={config.split}, "
            f"stream_k={config.stream_k}; persistent blocks compute whole tiles, so they "
            "require split 1 and no stream-K"
        )
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
    staged = config.staged_store
    threads = config.warpgroups * WARPGROUP_WARPS * UNIT_LANES
    runs = config.block_n // RUN_ELEMENTS
    if not isinstance(staged, bool) or (
        staged and (threads % runs or config.block_m % (threads // runs))
    ):
        raise VerificationError(
            f"{program}: staged_store={staged!r} with block_n={config.block_n}, "
            f"block_m={config.block_m}; expected a bool, True only where the {threads} "
            f"consumer threads cover whole rows of {runs} runs of {RUN_ELEMENTS} columns"
        )


SPLIT_TAIL_MAX_ROWS = 2**24
"""The most rows of A a launch with a split tail (`PrefillTile.tail_wave`) takes: its tile count
and schedule stay within 32 bits for any N."""
RUN_ELEMENTS = 8
"""Columns of C a thread stores at once from a staged tile: 16 bytes of 16-bit values."""


def staging_layout(block_n: int, block_m: int, element_bits: int) -> SharedLayout:
    """The shared (block_n, block_m) tile of C^T a staged store writes: C's orientation, each
    row of C (a column of C^T) contiguous, with the XOR swizzle of `block_n`-element rows
    (`layout_algebra.shared.row_swizzle`), so that the accumulator's writes (two rows of C a
    thread, eight threads along a row) and the 16-byte reads along C's rows meet no bank
    conflict."""
    swizzle = row_swizzle(block_n, element_bits)
    return SharedLayout((block_n, block_m), (block_n, block_m), (1, block_n), swizzle)


def run_layout(threads: int, block_n: int, block_m: int) -> RegisterLayout:
    """A (block_n, block_m) tile of C^T in runs of `RUN_ELEMENTS` along its first dimension
    (C's rows): ``local(1, P).column_spatial(T, R).local(8, 1)``, T = block_n / 8 threads a
    column, R = threads / T columns a pass, P = block_m / R passes; a warp stores whole
    16-byte-aligned runs of one row of C."""
    runs = block_n // RUN_ELEMENTS
    rows = threads // runs
    return local(1, block_m // rows).column_spatial(runs, rows).local(RUN_ELEMENTS, 1)


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
class TilePart:
    """The part of an output tile a block computes, for the fused sum: `tile` the tile's index
    among those whose parts the launch sums (row-major over the tile grid; with
    `PrefillTile.stream_k_tail`, counted from the first shared tile), where its parts and its
    counter are; `slot` the block's slot among the tile's parts, `count` the parts (an int
    with a split of k; with stream-K an expression, 1 for a tile the block computes whole)."""

    tile: Expr
    slot: Expr
    count: Expr | int


@dataclass(frozen=True)
class PrefillTensors:
    """What `declare_prefill` declared: the int parameters `m`, `n`, `k`; the k loop's range
    ``[first, end)`` and `tile0`, such that index i of the loop is k-tile ``tile0 + i`` of K
    (with a split, the loop counts the block's part of k from 0; with stream-K it runs over
    the segment's k-tiles of K); the output tile's column block `tile_n`, its first row of A
    `row0` and first column of N `col0`; the views of A^T, of the packed words, scale rows and
    zero-point rows (None without), of C^T; the activation ring; with a split or stream-K, the
    views of the fused sum (`SplitSum`) and the tile's part (`TilePart`), else None; with
    stream-K, the launch's `StreamKLaunch`, with persistent blocks its `PersistentLaunch`,
    whose `segments` give these per segment or tile (the tile fields are then those of the
    block's grid position, unused)."""

    m: Expr
    n: Expr
    k: Expr
    first: Expr | int
    end: Expr
    tile0: Expr | int
    tile_n: Expr
    row0: Expr
    col0: Expr
    a_columns: GlobalTensor
    packed_view: GlobalTensor
    scale_view: GlobalTensor
    zero_view: GlobalTensor | None
    c_columns: GlobalTensor
    ring: SharedTensor
    split_sum: SplitSum | None
    part: TilePart | None
    stream: StreamKLaunch | PersistentLaunch | None
    staging: SharedTensor | None = None

    def rows(self, b: ProgramBuilder, group: Any, layout: RegisterLayout) -> list[RegisterTensor]:
        """Row `group` of the scale view, then of the zero-point view (if any), from the
        block's first column, in `layout`."""
        views = [self.scale_view] + ([] if self.zero_view is None else [self.zero_view])
        return [b.load_global(view, [group, self.col0], layout) for view in views]

    def stage(self, tile: Any, d: int = 0) -> Any:
        """The ring stage of the k loop's index ``tile + d``: that k-tile's index (in its
        output tile's k) modulo the stages. A stream-K block's next segment starts at whatever
        stage its first k-tile falls on (the ring's barriers keep their phases per stage, so
        the order of stages is free), and a stage written in the loop variable alone lets the
        lowering prove a dot in flight reads no stage a copy refills
        (`backend.wgmma_pipeline`)."""
        stages = self.ring.layout.shape[0]
        return (tile + d) % stages

    def copy_ahead(self, b: ProgramBuilder, tile: Any, d: int) -> None:
        """Copy the k-tile of the k loop's index ``tile + d`` of A^T, where the index is
        before `end`, into its stage of the ring."""
        stage = self.stage(tile, d)
        tile_ahead(
            b,
            tile,
            d,
            self.end,
            lambda t: copy_activations(
                b, self.ring, self.a_columns, self.tile0 + t, stage, self.row0
            ),
        )

    def store(self, b: ProgramBuilder, result: RegisterTensor, act: DataType) -> None:
        """Store `result`, the block's f32 (block_n, block_m) tile of C^T: as `act` into C
        when the block computes the whole tile; else into the block's slot of the partial sums,
        the last of the tile's blocks adding them up into C (`ir.examples.split_sum`)."""
        part = self.part
        if part is None:
            self._store_whole(b, result, act)
        elif isinstance(part.count, int):
            self._store_part(b, result, act, part)
        else:
            if self.staging is not None and self.stream is None:
                # A split tail's staging tile takes the ring's memory (`ir.shared_reuse`): the
                # storing threads' barrier past their last reads of the ring stands before the
                # branch that writes it.
                b.sync()
            with b.if_(part.count.eq(1)):
                self._store_whole(b, result, act)
            with b.if_(part.count > 1):
                self._store_part(b, result, act, part)

    def _store_whole(
        self, b: ProgramBuilder, result: RegisterTensor, act: DataType, column: int = 0
    ) -> None:
        """Store `result` (f32, C^T's rows from `col0`, its columns from ``row0 + column``) as
        `act` into C, through the staging tile where the program has one and `result` is the
        whole tile."""
        value = b.cast(result, act)
        if self.staging is not None and value.layout.shape == self.staging.layout.shape:
            # Through the staging tile, a barrier of the storing threads on each side: every
            # one is past its reads of the last tile's (stream-K), and every part has landed.
            block_n, block_m = value.layout.shape
            b.sync()
            b.store_shared(self.staging, value)
            b.sync()
            value = b.load_shared(self.staging, run_layout(b.threads, block_n, block_m))
        b.store_global(self.c_columns, value, [self.col0, self.row0 + column])

    def _store_part(
        self, b: ProgramBuilder, result: RegisterTensor, act: DataType, part: TilePart
    ) -> None:
        sums = self.split_sum
        assert sums is not None
        add_parts_in_fragments(
            b,
            parts=sums.parts,
            counters=sums.counters,
            tile=part.tile,
            slot=part.slot,
            count=part.count,
            value=result,
            store=lambda piece, i: self._store_whole(b, piece, act, i * piece.layout.shape[1]),
        )

    @contextmanager
    def segments(self, b: ProgramBuilder) -> Iterator[PrefillTensors]:
        """With stream-K: a loop over the block's segments (`ir.examples.stream_k`), its body
        run with these tensors for each segment's tile, k-tiles and part; with persistent
        blocks, a loop over the block's whole tiles (`persistent_tiles`)."""
        launch = self.stream
        assert launch is not None
        if isinstance(launch, PersistentLaunch):
            with persistent_tiles(b, launch.tiles_n * launch.tiles_m, launch.blocks) as tile:
                tile_m, tile_n = tile // launch.tiles_n, tile % launch.tiles_n
                yield replace(
                    self,
                    tile_n=tile_n,
                    row0=tile_m * launch.block_m,
                    col0=tile_n * launch.block_n,
                )
            return
        schedule = stream_k_segments(
            b,
            tiles=launch.tiles_n * launch.tiles_m,
            k_tiles=launch.k_tiles,
            work=launch.work,
            blocks=launch.blocks,
            granule=launch.granule,
            prefix=launch.prefix,
            slots=None if isinstance(launch.prefix, int) else launch.slots,
        )
        with schedule as segment:
            tile_m, tile_n = segment.tile // launch.tiles_n, segment.tile % launch.tiles_n
            yield replace(
                self,
                first=segment.first,
                end=segment.end,
                tile_n=tile_n,
                row0=tile_m * launch.block_m,
                col0=tile_n * launch.block_n,
                part=TilePart(segment.shared, segment.slot, segment.count),
            )


@dataclass(frozen=True)
class SplitSum:
    """The views a prefill program's fused sum uses: `parts` the f32 partial sums, each
    tile's in the order of the consumer threads' accumulator registers
    (`ir.examples.split_sum.fragment_parts_view`), `counters` the (tiles,) i32 tile
    counters."""

    parts: GlobalTensor
    counters: GlobalTensor


@dataclass(frozen=True)
class StreamKLaunch:
    """A stream-K launch's shape: `tiles_n` x `tiles_m` output tiles of `block_n` x `block_m`,
    `k_tiles` k-tiles each, the first `prefix` computed whole by a block each
    (`ir.examples.stream_k.stream_k_prefix`; 0: none), `work` iterations of the others,
    `blocks` persistent blocks sharing them in runs of `granule` k-tiles, in `slots` slots of
    partial sums."""

    tiles_n: Expr
    tiles_m: Expr
    block_n: int
    block_m: int
    k_tiles: Expr
    work: Expr
    blocks: Expr
    granule: int
    prefix: Expr | int = 0
    slots: Expr | int = 0


@dataclass(frozen=True)
class PersistentLaunch:
    """A launch of persistent blocks: `tiles_n` x `tiles_m` output tiles of `block_n` x
    `block_m`, `blocks` blocks each computing whole tiles in turn (`persistent_tiles`)."""

    tiles_n: Expr
    tiles_m: Expr
    block_n: int
    block_m: int
    blocks: Expr


def grouped_grid(tiles_m: Any, tiles_n: Any, group_m: int) -> tuple[Any, Any, Any]:
    """The launch grid that takes a (`tiles_m`, `tiles_n`) tile grid in groups of `group_m`
    tile rows, rows first within a group: block (x, y, z) computes tile (z * group_m + x, y),
    ``(min(group_m, tiles_m), tiles_n, ceil(tiles_m / group_m))`` blocks (a last group of
    fewer rows leaves blocks past the last tile row, whose rows of A and C lie past m). The
    hardware starts blocks x first, so a wave of blocks shares group_m tile rows of A and the
    weights of few column tiles, which stay in L2 while the group's rows pass over them; the
    order costs the kernel no division, as numbering the tiles in software would."""
    return minimum(group_m, tiles_m), tiles_n, (tiles_m + group_m - 1) // group_m


@contextmanager
def persistent_tiles(b: ProgramBuilder, tiles: Any, blocks: Any) -> Iterator[Expr]:
    """In a program launched on `blocks` (G <= `tiles`) blocks along x: a loop over the output
    tiles ``x, x + G, x + 2 G, ...`` below `tiles` (row-major over the tile grid), its body run
    with each tile's index (written clamped below `tiles`, so that its bound shows). The tiles
    in flight at once are the G neighbours a launch of one block per tile would run together,
    so they share the activations' rows and the weights' columns in L2 as it would."""
    g = b.block_x
    with b.for_range((tiles - 1 - g) // blocks + 1) as i:
        yield minimum(g + i * blocks, tiles - 1)


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
    ``split``, ``stream_k``), with ``split`` > 1 or ``stream_k`` ``qmm(m, n, k, a, packed,
    scales, [zeros,] partial, counters, c)`` (an f32 workspace of `PrefillTile.partial_shape`
    and `PrefillTile.tiles` i32 counters, zero before the launch and left zero after it); its
    grid: ``(n // block_n, ceil(m / block_m), split)``, block z taking the z-th of `split`
    equal parts of k, with ``tail_wave`` the whole tiles then the tail's parts
    (`ir.examples.split_tail`), or with stream-K ``min(stream_k, W / granule)`` persistent
    blocks; the views it reads and writes (A and C transposed) and its activation ring."""
    act, block_m, block_n, block_k, split = (
        activation_dtype,
        config.block_m,
        config.block_n,
        config.block_k,
        config.split,
    )
    if config.min_blocks_per_sm:
        b.min_blocks_per_sm(config.min_blocks_per_sm)
    if config.tail_wave:
        # The schedule's divisions by the tail's part count, computed once: ptxas computes them
        # again in the k loop otherwise (the staged 128 x 256 tile's i4 loop: 453 instructions
        # against 403, NVRTC 13.5).
        b.hoist_invariants()
    # A split tail's schedule multiplies the tile count: at most SPLIT_TAIL_MAX_ROWS rows keep
    # it, and every value derived from it, within 32 bits (printed as ints, not 64-bit values).
    m = b.int_param("m", lo=1, hi=SPLIT_TAIL_MAX_ROWS if config.tail_wave else INT_PARAM_LIMIT)
    # n in whole clusters of column tiles.
    n_unit = block_n * config.cluster_n
    n = b.int_param("n", lo=n_unit, multiple_of=n_unit, constant=True)
    # k in whole parts of a split, or whole runs of a stream-K share (`PrefillTile.granule`).
    k_unit = block_k * split * config.granule
    k = b.int_param("k", lo=k_unit, multiple_of=k_unit, constant=True)
    operands = packed_operands(b, act, zero_points)
    fused = split > 1 or config.stream_k > 0
    if fused:
        partial = b.array_param("partial", dtypes.f32)
        counters = b.array_param("counters", dtypes.i32)
    c = b.array_param("c", act)
    tiles_n, tiles_m = n // block_n, (m + block_m - 1) // block_m
    k_tiles = k // block_k
    stream = None
    shared_tiles = tiles_n * tiles_m
    if config.stream_k:
        prefix = stream_k_prefix(shared_tiles, config.stream_k) if config.stream_k_tail else 0
        shared_tiles = shared_tiles - prefix
        work = shared_tiles * k_tiles
        granule = config.granule
        blocks = stream_k_blocks(config.stream_k, work, granule)
        slots = stream_k_slots(k_tiles, work, blocks, granule)
        stream = StreamKLaunch(
            tiles_n, tiles_m, block_n, block_m, k_tiles, work, blocks, granule, prefix, slots
        )
        b.grid(prefix + blocks)
    elif config.tail_wave:
        # Whole tiles, then the last partial wave's tiles in parts (`ir.examples.split_tail`).
        tiles_all = tiles_n * tiles_m
        slots, shared_tiles = split, maximum(split_tiles(tiles_all, config.tail_wave, split), 1)
        b.grid(split_tail_blocks(tiles_all, config.tail_wave, split))
        tail = split_tail_part(
            b.block_x, tiles_all, config.tail_wave, split, k_tiles, config.granule
        )
    elif split > 1:
        slots = split
        b.grid(tiles_n, tiles_m, split)
    elif config.persistent:
        blocks = minimum(config.persistent, tiles_n * tiles_m)
        stream = PersistentLaunch(tiles_n, tiles_m, block_n, block_m, blocks)
        b.grid(blocks)
    elif config.group_m > 1:
        b.grid(*grouped_grid(tiles_m, tiles_n, config.group_m))
    else:
        b.grid(tiles_n, tiles_m)
    if config.cluster_n > 1:
        # Column tiles of one row tile: along y in groups of tile rows, else along x.
        if config.group_m > 1:
            b.cluster(1, config.cluster_n)
        else:
            b.cluster(config.cluster_n)
    a_columns = b.global_view(operands[0], act, GlobalLayout((k, m), (1, k)))  # A^T
    packed_view, scale_view, zero_view = packed_views(b, operands, nbits, n, k, group_size)
    c_columns = b.global_view(c, act, GlobalLayout((n, m), (1, n)))  # C^T
    split_sum = part = None
    if fused:
        threads = UNIT_LANES * config.warps
        split_sum = SplitSum(
            fragment_parts_view(
                b, partial, slots, shared_tiles, block_n * block_m // threads, threads
            ),
            b.global_view(counters, dtypes.i32, GlobalLayout((tiles_n * tiles_m,), (1,))),
        )
    if config.tail_wave:
        part = TilePart(tail.shared, tail.slot, tail.count)
    elif split > 1:
        part = TilePart(b.block_y * tiles_n + b.block_x, b.block_z, split)
    ring = b.shared_tensor(act, transposed_ring(config.stages, block_k, block_m))
    staging = None
    if config.staged_store:
        # A block of one tile stages C in the ring's memory, once the storing threads' barrier
        # has passed their last reads of it (`ir.shared_reuse`); a block of several tiles keeps
        # the ring across them.
        reuse = () if stream is not None else (ring,)
        staging = b.shared_tensor(act, staging_layout(block_n, block_m, act.nbits), reuse)
    tile_m, tile_n = b.block_y, b.block_x
    if config.group_m > 1:
        tile_m, tile_n = b.block_z * config.group_m + b.block_x, b.block_y
    # The k loop's range [first, end) and its k-tile origin tile0: a split's part counts from
    # 0, a tail tile's part runs over its own k-tiles of the tile's.
    first, tiles = 0, k // (block_k * split)
    tile0 = b.block_z * tiles if split > 1 else 0
    if config.tail_wave:
        tile_m, tile_n = tail.tile // tiles_n, tail.tile % tiles_n
        first, tiles, tile0 = tail.first, tail.end, 0
    row0, col0 = tile_m * block_m, tile_n * block_n
    return PrefillTensors(
        m,
        n,
        k,
        first,
        tiles,
        tile0,
        tile_n,
        row0,
        col0,
        a_columns,
        packed_view,
        scale_view,
        zero_view,
        c_columns,
        ring,
        split_sum,
        part,
        stream,
        staging,
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
    issued `depth` k-tiles before `current` holds them. Made before the k loop over the
    k-tiles ``[first, end)`` (the first `depth` k-tiles' loads); `advance(tile)` at the top of
    the loop body moves k-tile `tile` into `current` and loads k-tile ``tile + depth``.

    `in_place` (depth 1): `current` is the only copy. `advance` returns it as it is, and
    `refill(tile)`, called once the body has read all of k-tile `tile`'s tensors, loads k-tile
    ``tile + 1`` into the same tensors: one k-tile's registers instead of two, and no register
    copies, whose reads of words still loading stall a warp where the loop body moves them."""

    def __init__(
        self,
        b: ProgramBuilder,
        fetch: Callable[[Any], Sequence[RegisterTensor]],
        first: Any,
        end: Any,
        depth: int,
        in_place: bool = False,
    ):
        if in_place and depth != 1:
            raise VerificationError(
                f"RegisterRing: in_place with depth={depth}; expected depth 1 (the next "
                "k-tile's loads take the current k-tile's registers)"
            )
        self.b, self.fetch, self.end, self.depth = b, fetch, end, depth
        self.in_place = in_place
        self.in_flight = [list(fetch(minimum(first + d, end - 1))) for d in range(depth)]
        if in_place:
            self.current = self.in_flight[0]
        else:
            self.current = [b.register_tensor(x.dtype, x.layout, 0) for x in self.in_flight[0]]

    def _refill(self, slot: Sequence[RegisterTensor], fetched: Sequence[RegisterTensor]) -> None:
        for held, value in zip(slot, fetched):
            self.b.assign(held, value)

    def advance(self, tile: Any) -> list[RegisterTensor]:
        """In the k loop's body: k-tile `tile`'s tensors into `current` (returned), and the
        loads of k-tile ``tile + depth`` where it is before `end` (`in_place`: `current` as it
        is; `refill` loads)."""
        if self.in_place:
            return self.current
        self._refill(self.current, self.in_flight[0])
        for d in range(self.depth - 1):
            self._refill(self.in_flight[d], self.in_flight[d + 1])
        last = self.in_flight[self.depth - 1]
        tile_ahead(self.b, tile, self.depth, self.end, lambda t: self._refill(last, self.fetch(t)))
        return self.current

    def refill(self, tile: Any) -> None:
        """With `in_place`, after the body's last read of k-tile `tile`'s tensors: the loads of
        k-tile ``tile + 1`` into them, where it is before `end`. Nothing otherwise."""
        if self.in_place:
            current = self.current
            tile_ahead(self.b, tile, 1, self.end, lambda t: self._refill(current, self.fetch(t)))

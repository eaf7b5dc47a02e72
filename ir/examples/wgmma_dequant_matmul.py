"""W-A16 quantized matmul for large batches (prefill): packed weights dequantized in registers
into Hopper's warpgroup tensor cores.

C (m, n) = A (m, k) @ (W * S), as `ir.examples.quantized_matmul` defines it, with W and S packed
as for `ir.examples.register_dequant_matmul` (`ir.examples.packed_weights`): the same packed
tensors serve both programs. The dot computes C^T = W^T A^T: the dequantized weights are the
``wgmma`` A operand, from registers (N on the instruction's 64-row side), and a (block_m, BK)
tile of A is its B operand, read from shared memory by descriptors (block_m tokens on its N
side, up to 256). Per block, for each k-tile:

    copy_bulk the activation tile k-tile stages - 1 ahead into a ring of `stages` shared
    stages (`transposed_ring`: each token's values of a 64-wide panel of k contiguous, wgmma's
    K-major B; on sm_90 one TMA copy per panel, of the transposed global view A^T)
    take this k-tile's packed words and its group's packed scale row (and zero points) from
    the register ring of `depth` k-tiles, and load those of the k-tile `depth` ahead
    view the words as `weight_dtype`, cast to the activation type in mma A-fragment order
    (`register_dequant_matmul.transposed_weight_layout`), subtract the zero points, multiply by
    the group's scales
    view the weights in the warpgroup A layout (a renaming of rows, below), wait for the
    activation tile, dot, sync (every thread is past its reads of the stage before the next
    copy into it; with `release`, a release of the stage instead); with `split_dot`, one k16
    step at a time from the casts to the dot
    then C^T viewed back in the decode's accumulator order, cast, stored; with `split`, the
    f32 partial sums stored in the block's slot instead, in the accumulator's register order,
    and the last block of the tile adds the slots in order, a piece of its registers at a
    time, each piece cast and stored into C (`ir.examples.split_sum.add_parts_in_fragments`)

**The renaming.** A unit of the packed format is 64 columns of W for one warp: a lane holds four
m16 A fragments of W^T, rows 16 j .. 16 j + 15 of its warp's 64 (j = 0 .. 3). A ``wgmma``
instruction takes 64 rows from the four warps of a warpgroup, 16 from each. So warp w' of
warpgroup g feeds its fragment j to the instruction of row block j: the block's weights are
named in the warpgroup layout (`weight_layout`), where thread (g, w') register block j holds the
rows ``256 u g + 64 j + 16 w'`` (u = `units_n`), while its registers hold W^T's rows ``64 u
(4 g + w') + 16 j``. The `view` between the two layouts moves no data; it renames W^T's rows by
that permutation, which the dot carries into the rows of C^T, and the `view` of the accumulator
into `register_dequant_matmul.transposed_accumulator_layout` renames them back. The program
still means C = A (W * S): the interpreter runs the renamed dot, and the GPU's result is its
within the tensor cores' rounding.

**The fragment tile** (`warp_columns` 16): the four warps of a warpgroup load the same unit,
warp w' only the words of its A fragment (columns 16 w' .. 16 w' + 15 of the unit,
`packed_weights.fragment_tile_layouts`), so the cast gives the warpgroup register-A layout with
W^T's rows in their own order, and no renaming is needed on either side of the dot. With
`units_n` u a warpgroup shares u neighbouring units, each warp one A fragment of each, and
issues ``wgmma`` for u blocks of 64 rows of W^T: for the same accumulators, a tile u times as
wide and 1 / u as tall reads each activation tile for u times the columns (fewer bytes a
multiply from L2) but dequantizes each weight for 1 / u the rows.

Tile: ``block_n = 256 * units_n * warpgroups`` columns of N (the fragment tile: ``64 *
units_n * warpgroups``), `block_m` rows of M (a multiple of 8 up to 256), ``BK = 16 * units_k``.
Registers per thread: ``2 * units_n * block_m`` f32 accumulators (128 at the default 64 rows;
the fragment tile ``units_n * block_m / 2``) besides the weights. `n` and `k` are compile-time
constants and the program declares its grid ``(n // block_n, ceil(m / block_m), split)`` (with
`stream_k`, ``min(stream_k, W / unroll)`` blocks; with `persistent`, ``min(persistent, T)`` for
the T output tiles); `k` a multiple of BK * split (with `stream_k`, of BK * unroll: the shares
are runs of `unroll` k-tiles, `PrefillTile.granule`) and `group_size` of BK (one scale row per
k-tile); rows of A past m read zeros and rows of C past m are not written. With `split` > 1 or
`stream_k` the parameters are ``qmm(m, n, k, a, packed, scales, [zeros,] partial, counters,
c)``: `partial` an f32 workspace of `PrefillTile.partial_shape` (each slot a part of every
whole tile), `counters` one i32 per output tile (`PrefillTile.tiles`), zero before the launch
and left zero after it.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.examples.matmul import wgmma_dot_layouts
from ir.examples.packed_prefill import (
    PANEL_K,
    PrefillTile,
    RegisterRing,
    check_prefill_fields,
    declare_prefill,
)
from ir.examples.packed_weights import (
    FRAGMENT_COLUMNS,
    FRAGMENT_WIDTHS,
    UNIT_K,
    UNIT_LANES,
    UNIT_N,
    cast_codes,
    check_group_size,
    checked_arguments,
    fragment_tile_layouts,
    program_name,
    tile_layouts,
    unit_scale_layout,
)
from ir.examples.register_dequant_matmul import (
    transposed_accumulator_layout,
    transposed_weight_layout,
)
from ir.program import Program
from layout_algebra.hardware import (
    MAX_REGISTER_BUDGET,
    MIN_REGISTER_BUDGET,
    WARP_SIZE,
    WARPGROUP_SIZE,
    register_cap,
)
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import spatial

PROGRAM = "wgmma_dequant_matmul"
"""The program's name in its error messages."""


@dataclass(frozen=True)
class WgmmaDequantConfig(PrefillTile):
    """The tile parameters of `wgmma_dequant_matmul`.

    `warpgroups` per block (each owns 256 * `units_n` columns of N: its four warps one unit of
    64 columns each per `units_n`; with `warp_columns` 16, the fragment tile of the module's
    header, 64 * `units_n`, the four warps sharing each unit); `units_k` k16 steps per k-tile;
    `block_m` rows of A per block (the instruction's N side); `stages` shared stages of the
    activation ring (copied stages - 1 k-tiles ahead); `depth` k-tiles of packed weights in
    flight in registers; `unroll` copies of the loop body per generated iteration;
    `min_blocks_per_sm` the occupancy asked of the compiler (0: none). `overlap_dot` orders the
    loop so that a k-tile's dot may still run while the next k-tile's weights are dequantized:
    the activations stages - 2 k-tiles ahead, copied after the dot into the stage the dot of
    two k-tiles back read, one barrier per k-tile, before the dot (at least 3 stages). On
    sm_90a the lowering keeps each wgmma running into the next k-tile where the loop is
    unrolled into whole groups (`unroll` >= 2 dividing K / BK): each copy's dequantized weights
    are registers of their own (`backend.wgmma_pipeline.in_flight_copies`). `split_dot` loads,
    dequantizes and multiplies the k-tile one k16 step at a time, a dot per step into the same
    accumulator: on sm_90a the steps' wgmma calls form one chain
    (`backend.wgmma_pipeline.dot_chains`), so each step's dequantization runs while the tensor
    cores work on the steps before, and only the k-tile's last step is waited for.
    `panel_waits` writes the k-tile as one dot per ``PANEL_K``-deep panel of the activation
    stage (each panel is a bulk copy of its own) and has each dot wait for its own panel alone:
    the k-tile's first dot starts while its later panels still land, and on sm_90a the panels'
    wgmma form one chain as `split_dot`'s steps do. Requires block_k a multiple of ``PANEL_K``
    of at least two panels.
    `refill_in_place` loads the next k-tile's packed words and scale rows into the registers
    of the current k-tile once its dequantization has read them, before its dots
    (`packed_prefill.RegisterRing`, ``in_place``): one k-tile's registers instead of two, and
    none of the register copies by which a ring of registers moves its k-tiles along, whose
    reads of words still in flight stall the warp. Requires depth 1 and no `split_dot` (the
    whole k-tile is dequantized before its dots).
    `split` blocks along k (grid z) each compute the product over one of `split` equal parts
    of k; the last of a tile's blocks to finish adds the parts in order
    (`ir.examples.split_sum`), so a shape with fewer tiles than the GPU has block slots
    keeps every SM busy.
    `tail_wave` (0: none; with `split` P > 1) S, the blocks of a wave: only the tiles past the
    last whole wave of S (R = T mod S of the T tiles) are split, each into ``min(P, S // R)``
    parts, so the last wave runs short blocks in most of its slots rather than R long ones;
    the tiles before are computed whole, one block each (`ir.examples.split_tail`: a 1-D
    grid, no block crossing a tile). A block of a whole tile stages C in the ring's memory as
    an unsplit launch does.
    `stream_k` (0: none): persistent blocks, ``min(stream_k, W / unroll)`` of them for the W
    k-tile iterations of all output tiles, each taking an equal share in tile order, counted
    in runs of `unroll` k-tiles (so each segment's loop runs whole groups of its copies)
    (`ir.examples.stream_k`): the k loop runs once per tile the share touches, on that tile's
    k-tiles of it; a tile one block covers is stored by it, the others go through the same
    ordered fused sum as a split, their parts in k order (`PrefillTile.partial_slots`
    slots). So a layer whose tiles leave a partial wave keeps every block slot busy to the
    end (with ``min_blocks_per_sm`` B, ask for B times the SMs). Requires split 1.
    `stream_k_tail` (with `stream_k` S): the data-parallel and stream-K hybrid. The tiles
    before the last one to two waves of S (``max(T // S - 1, 0) S`` of them,
    `ir.examples.stream_k.stream_k_prefix`) are computed whole, one block each, ahead of the
    S blocks that share the rest; the workspace holds the shared tiles' parts alone.
    `persistent` (0: none): persistent blocks, ``min(persistent, T)`` of them for the T output
    tiles, block g computing whole tiles g, g + G, g + 2 G, ... in turn
    (`packed_prefill.persistent_tiles`: the tiles in flight at once are neighbours, as in a
    launch of one block a tile), with no partial sums; with a producer, its copies of a
    tile's first k-tiles wait only for the releases of the tile before, so they run while
    the consumers store it. Requires split 1 and no stream-K.
    `release` ends a k-tile with a release of its ring stage (`copy_bulk_release`) instead of
    a block barrier: on sm_90a no warp waits for the others there; only the thread that
    issues the next copy into the stage waits, for the warps still reading it. With
    `overlap_dot` as well, a k-tile releases the stage of the k-tile before it instead,
    whose dot the lowering may have kept running into this one
    (`backend.wgmma_pipeline`: the release follows this k-tile's ``wait_group 1``).
    `producer` adds a producer warp to the block (threads ``128 * warpgroups`` up, a
    `thread_group` of its own): it alone issues the activation copies, stages - 1 k-tiles
    ahead, held back only by the releases of the consumer warpgroups (a `thread_group` of the
    other threads), which load and dequantize the weights, wait, multiply, release and store.
    With `split` or `stream_k`, the consumers also add the parts (their `atomic_add` ticket is
    the group's); with `stream_k`, each segment's copies wait for the releases of the segment
    before, with no block barrier between segments, so the whole loop over segments is warp
    specialised. Requires `release`.
    `producer_registers` (0: none) makes the producer a whole warpgroup that keeps that many
    registers a thread (a multiple of 8 from 24 to 256) and gives the rest of the block's to
    the consumers (`ThreadGroup.registers`; `consumer_registers`): on sm_90a a producer warp
    of its own would hold a processing block's registers that the consumers need (with
    `min_blocks_per_sm` 2, 160 threads leave 168 registers a thread, 256 threads with budgets
    232 to the consumers). Requires `producer`.
    `staged_store` writes the f16 (or bf16) tile of C through a shared tile
    (`packed_prefill.staging_layout`) and stores it from there in 16-byte runs along C's rows
    (`packed_prefill.run_layout`), instead of two-byte stores from the accumulator, whose
    threads hold pairs of C's rows; the consumer threads must cover whole rows of the tile.
    A block of one tile (no `stream_k`, no `persistent`) puts that tile in the ring's memory
    (`ir.shared_reuse`), so the staged store needs no shared memory beyond the ring's; blocks
    of several tiles give it memory of its own.
    `group_m` (1: none) launches the tiles in groups of `group_m` tile rows, rows first within
    a group (`packed_prefill.grouped_grid`: block (x, y, z) computes tile (z * group_m + x,
    y)): a wave of blocks then reads the weights of fewer column tiles, which stay in L2
    while the group's rows of A pass over them, where row by row each wave reads every
    column's. Requires split 1, no stream-K and no persistent blocks.
    `cluster_n` (1: none) launches the blocks in clusters of `cluster_n` neighbouring column
    tiles of one row tile (`ProgramBuilder.cluster`; n a multiple of ``block_n * cluster_n``):
    their blocks copy the same activation tiles, so on sm_90a each block issues a
    ``1 / cluster_n`` part of each copy into every block of the cluster (TMA multicast,
    `backend.bulk_copy`) and the activations leave L2 once per cluster instead of once per
    block. Requires `release`, no stream-K, no persistent blocks and no split tail.
    """

    warpgroups: int = 1
    units_n: int = 1
    units_k: int = 4
    block_m: int = 64
    stages: int = 4
    depth: int = 1
    unroll: int = 1
    min_blocks_per_sm: int = 0
    overlap_dot: bool = False
    split_dot: bool = False
    panel_waits: bool = False
    refill_in_place: bool = False
    split: int = 1
    tail_wave: int = 0
    stream_k: int = 0
    stream_k_tail: bool = False
    persistent: int = 0
    release: bool = False
    producer: bool = False
    producer_registers: int = 0
    staged_store: bool = False
    warp_columns: int = UNIT_N
    group_m: int = 1
    cluster_n: int = 1

    @property
    def block_n(self) -> int:
        if self.warp_columns == FRAGMENT_COLUMNS:
            return UNIT_N * self.warpgroups * self.units_n
        return UNIT_N * self.warps * self.units_n

    def check(self, group_size: int) -> None:
        """Raise VerificationError naming the first field (or `group_size`) out of range."""
        fields = ("warpgroups", "units_n", "units_k", "block_m", "depth", "unroll", "split")
        check_prefill_fields(PROGRAM, self, fields, 2)
        stages = self.stages
        if not isinstance(self.split_dot, bool):
            raise VerificationError(f"{PROGRAM}: split_dot={self.split_dot!r}; expected a bool")
        if not isinstance(self.release, bool):
            raise VerificationError(f"{PROGRAM}: release={self.release!r}; expected a bool")
        panels, rest = divmod(self.block_k, PANEL_K)
        if not isinstance(self.panel_waits, bool) or (self.panel_waits and (rest or panels < 2)):
            raise VerificationError(
                f"{PROGRAM}: panel_waits={self.panel_waits!r} with block_k={self.block_k}; "
                f"expected a bool, True only with block_k a multiple of {PANEL_K} of at least "
                "two panels"
            )
        if not isinstance(self.refill_in_place, bool) or (
            self.refill_in_place and (self.depth != 1 or self.split_dot)
        ):
            raise VerificationError(
                f"{PROGRAM}: refill_in_place={self.refill_in_place!r} with depth={self.depth}, "
                f"split_dot={self.split_dot}; expected a bool, True only with depth 1 and no "
                "split_dot"
            )
        if not isinstance(self.producer, bool) or (self.producer and not self.release):
            raise VerificationError(
                f"{PROGRAM}: producer={self.producer!r} with release={self.release!r}; "
                "expected a bool, True only with release"
            )
        budget = self.producer_registers
        if (
            isinstance(budget, bool)
            or not isinstance(budget, int)
            or (
                budget
                and not (self.producer and MIN_REGISTER_BUDGET <= budget <= MAX_REGISTER_BUDGET)
            )
            or budget % 8
        ):
            raise VerificationError(
                f"{PROGRAM}: producer_registers={budget!r} with producer={self.producer!r}; "
                f"expected 0, or with producer a multiple of 8 from {MIN_REGISTER_BUDGET} to "
                f"{MAX_REGISTER_BUDGET}"
            )
        if not isinstance(self.overlap_dot, bool) or (self.overlap_dot and stages < 3):
            raise VerificationError(
                f"{PROGRAM}: overlap_dot={self.overlap_dot!r} with stages={stages}; expected a "
                "bool, True only with at least 3 stages"
            )
        columns = self.warp_columns
        if columns not in (UNIT_N, FRAGMENT_COLUMNS):
            raise VerificationError(
                f"{PROGRAM}: warp_columns={columns!r}; expected {UNIT_N} or {FRAGMENT_COLUMNS}"
            )
        check_group_size(PROGRAM, group_size, self.block_k)


def consumer_registers(threads: int, min_blocks_per_sm: int, producer_registers: int) -> int:
    """The register budget of the consumer threads of a block of `threads` threads whose
    last warpgroup, the producer, keeps `producer_registers`: the registers the launch bounds
    give the block (`layout_algebra.hardware.register_cap`) less the producer's, shared by the
    consumers, in units of 8, at most `MAX_REGISTER_BUDGET`. Example: 256 threads, 2 blocks an
    SM (128 a thread), a producer keeping 24: 232."""
    pool = threads * register_cap(threads, min_blocks_per_sm or None)
    share = (pool - WARPGROUP_SIZE * producer_registers) // (threads - WARPGROUP_SIZE)
    return min(MAX_REGISTER_BUDGET, share // 8 * 8)


def wgmma_dequant_matmul(
    weight_dtype: DataType = dtypes.i4,
    group_size: int = 128,
    config: WgmmaDequantConfig | None = None,
    *,
    activation_dtype: DataType = dtypes.f16,
    zero_points: bool = False,
) -> Program:
    """The program ``qmm(m, n, k, a, packed, scales, [zeros,] [partial, counters,] c)`` for
    `config` (None: the default `WgmmaDequantConfig`), the parameters of
    `register_dequant_matmul` with its fused split-k sum: `a`, the scales, the zero points and
    `c` of `activation_dtype` (f16 or bf16), `packed` the i32 weights of
    `ir.examples.packed_weights.pack_weights`, the scales (and zero points) of `pack_scales`,
    `partial` and `counters` with ``config.split`` > 1 or ``config.stream_k`` only. With
    `zero_points` the dequantized weight is ``(W - Z) * S``."""
    config, weight_dtype = checked_arguments(
        PROGRAM,
        config,
        WgmmaDequantConfig,
        lambda checked: checked.check(group_size),
        weight_dtype,
        activation_dtype,
        zero_points,
    )
    act, f32 = activation_dtype, dtypes.f32
    nbits, warps = weight_dtype.nbits, config.warps
    units_k, units_n = config.units_k, config.units_n
    block_m, block_n, block_k = config.block_m, config.block_n, config.block_k
    stages, depth = config.stages, config.depth
    # The k-tile's dot in `steps` dots of `step_units` k16 units each.
    if config.split_dot:
        steps = units_k
    else:
        steps = block_k // PANEL_K if config.panel_waits else 1
    step_units = units_k // steps
    step_k = UNIT_K * step_units
    # The activations a wait covers: the whole stage, or one panel (a bulk copy of its own).
    waited_k = PANEL_K if config.panel_waits else block_k
    weight_layout, activation_layout, c_layout = wgmma_dot_layouts(
        UNIT_LANES * warps, block_n, block_m, step_k
    )
    if config.warp_columns == FRAGMENT_COLUMNS:
        if nbits not in FRAGMENT_WIDTHS:
            raise VerificationError(
                f"{PROGRAM}: warp_columns={FRAGMENT_COLUMNS} with {weight_dtype.name} weights; "
                f"expected weights of {' or '.join(map(str, FRAGMENT_WIDTHS))} bits"
            )
        # A warp's A fragment of its warpgroup's unit: the cast gives the warpgroup's register-A
        # layout itself, with W^T's rows in their own order (no renaming before or after).
        code_layout, word_layout, scale_load = fragment_tile_layouts(
            nbits, config.warpgroups, step_units, units_n
        )
        decoded_layout, stored_layout = weight_layout, c_layout
    else:
        code_layout, word_layout = tile_layouts(nbits, warps, step_units, units_n)
        decoded_layout = transposed_weight_layout(warps, step_units, units_n)
        stored_layout = transposed_accumulator_layout(warps, units_n, block_m // 8)
        scale_load = spatial(1, warps).local(1, units_n) * unit_scale_layout()
    code_layout = code_layout.permute(1, 0)  # the codes named as W^T
    scale_layouts = (scale_load, reduce_layout(decoded_layout, [1], keepdims=True))
    row_words = UNIT_LANES * nbits
    name = program_name(PROGRAM, weight_dtype, act, zero_points)
    consumers = UNIT_LANES * warps
    producers = WARPGROUP_SIZE if config.producer_registers else WARP_SIZE
    threads = consumers + (producers if config.producer else 0)
    budgets = (None, None)
    if config.producer_registers:
        budgets = (
            consumer_registers(threads, config.min_blocks_per_sm, config.producer_registers),
            config.producer_registers,
        )
    with ProgramBuilder(name, threads) as b:
        declared = declare_prefill(b, config, act, nbits, group_size, zero_points)
        tiles_per_group = group_size // block_k

        def only(
            start: int, count: int, registers: int | None
        ) -> contextlib.AbstractContextManager[None]:
            """A body of threads start .. start + count - 1 alone where the block has a producer
            (a thread group, with its register budget), else of the block."""
            if not config.producer:
                return contextlib.nullcontext()
            return b.thread_group(start, count, registers)

        # The consumer warpgroups, and the producer of the activation copies.
        consumer = functools.partial(only, 0, consumers, budgets[0])
        producer = functools.partial(only, consumers, producers, budgets[1])

        def product(tensors):
            """The f32 (block_n, block_m) tile of C^T of `tensors`' output tile over its
            k-tiles, in the accumulator layout."""
            word_col0 = tensors.tile_n * (block_n // UNIT_N * row_words)

            def fetch(tile):
                """The packed words (per step) of the k-tile of loop index `tile`, then its
                group's packed scale row (and zero-point row)."""
                k_tile = tensors.tile0 + tile
                words = [
                    b.load_global(
                        tensors.packed_view,
                        [k_tile * units_k + j * step_units, word_col0],
                        word_layout,
                    )
                    for j in range(steps)
                ]
                return [*words, *tensors.rows(b, k_tile // tiles_per_group, scale_layouts[0])]

            # Activation k-tiles in flight: stages - 1, or stages - 2 with the dot left running
            # (the copy then follows the dot, into the stage of the dot two k-tiles back).
            ahead = stages - 2 if config.overlap_dot else stages - 1
            with producer():
                for d in range(ahead):
                    tensors.copy_ahead(b, tensors.first, d)
            with consumer():
                registers = RegisterRing(
                    b, fetch, tensors.first, tensors.end, depth, config.refill_in_place
                )
                acc = b.register_tensor(f32, c_layout, 0.0)
            # The copy after the dot (overlap_dot) is the consumers' own; a producer's comes
            # first, its stage released an iteration before.
            copy_first = config.producer or not config.overlap_dot
            with b.for_range(tensors.first, tensors.end, unroll=config.unroll) as tile:
                if copy_first:
                    with producer():
                        tensors.copy_ahead(b, tile, ahead)
                with consumer():
                    consume(tensors, tile, registers, acc)
                    if not copy_first:
                        tensors.copy_ahead(b, tile, ahead)
            with consumer():
                if config.release and config.overlap_dot and declared.stream is not None:
                    # The last k-tile's stage, which no later k-tile of the segment releases:
                    # the next segment's copies fill it.
                    last = tensors.stage(tensors.end, -1)
                    b.copy_bulk_release(tensors.ring, [last, 0, 0], shape=(block_k, block_m))
                return b.view(acc, f32, stored_layout)

        def consume(tensors, tile, registers, acc) -> None:
            """One k-tile in the consumer warps: its weights (from `registers`, the
            `RegisterRing`: packed words per step, then the scale and zero-point rows)
            dequantized, the activations waited for, the dots into `acc`, and the stage handed
            back (a sync, or a release)."""
            current = registers.advance(tile)
            stage = tensors.stage(tile)
            scale, *zero = (b.view(row, act, scale_layouts[1]) for row in current[steps:])

            def dequantized(j):
                weights = cast_codes(b, current[j], weight_dtype, act, code_layout, decoded_layout)
                if zero_points:
                    weights = b.sub(weights, zero[0])
                weights = b.mul(weights, scale)
                if decoded_layout != weight_layout:
                    return b.view(weights, act, weight_layout)
                return weights

            # The panels' dots wait for their own panels only; their weights are all
            # dequantized first, so no dot's A registers are written while another runs (on
            # sm_90a ptxas would serialise the chain). split_dot dequantizes step by step.
            # In place, the next k-tile's loads follow the last read of this one's, before the
            # dots (and the wait for the dot before, which the lowering puts after them).
            ahead_of_dots = (config.panel_waits or config.refill_in_place) and not config.split_dot
            decoded = [dequantized(j) for j in range(steps)] if ahead_of_dots else []
            registers.refill(tile)
            for j in range(steps):
                renamed = decoded[j] if ahead_of_dots else dequantized(j)
                if j * step_k % waited_k == 0:
                    # The stage, or with panel_waits this step's panel alone (the later ones
                    # may still be landing).
                    b.copy_bulk_wait(
                        tensors.ring, [stage, j * step_k, 0], shape=(waited_k, block_m)
                    )
                if j == 0 and config.overlap_dot and not config.release:
                    # Every thread is past its reads of the stage the copy after the dot fills.
                    b.sync()
                activations = b.load_shared(tensors.ring, activation_layout, [stage, j * step_k, 0])
                b.assign(acc, b.dot(renamed, activations, acc))
            if config.release and config.overlap_dot:
                # Every thread is past its reads of the previous k-tile's stage (its dot may
                # have run into this k-tile; this one's may still run): its next copy may start.
                with b.if_(tile > tensors.first):
                    previous = tensors.stage(tile, -1)
                    b.copy_bulk_release(tensors.ring, [previous, 0, 0], shape=(block_k, block_m))
            elif config.release:
                # Every thread is past its reads of this stage: the next copy into it may start.
                b.copy_bulk_release(tensors.ring, [stage, 0, 0], shape=(block_k, block_m))
            elif not config.overlap_dot:
                # Every thread is past its reads of this stage before the next copy into it.
                b.sync()

        if declared.stream is None:
            result = product(declared)
            with consumer():
                declared.store(b, result, act)
        else:
            with declared.segments(b) as tensors:
                result = product(tensors)
                with consumer():
                    tensors.store(b, result, act)
                if not config.producer:
                    # The next segment's first copies fill stages this one's last dots read
                    # (a producer's wait for the consumers' releases of them instead).
                    b.sync()
    return b.program()

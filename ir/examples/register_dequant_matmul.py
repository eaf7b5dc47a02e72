"""W-A16 quantized matmul for small batches (decoding): weights dequantized in registers.

C (m, n) = A (m, k) @ (W * S), as `ir.examples.quantized_matmul` defines it (W the (k, n)
codes of `weight_dtype`, S the (ceil(k / group_size), n) f16 scales, the dequantized weight
``f16(f32(W) * f32(S))``), but W and S come packed (`ir.examples.packed_weights`:
`pack_weights`, `pack_scales`): each thread's 16-byte loads (at 4 bits) are whole mma B
fragments, and its scales for them one 16-byte vector. For M <= 16 the time is streaming the
weights, so the program keeps them out of shared memory:

    prologue: load the first `depth` k-tiles of packed words into a register ring;
              copy_async the first (16, BK) activation tile into shared stage 0
    for each k-tile (unrolled `unroll` times, so stage indices are constants):
        rotate the ring and load the k-tile `depth` ahead; copy_async the next activation tile
        (with `stages` S: copy_async the weight words and the activation tile S - 1 k-tiles
        ahead into a ring of S shared stages instead, wait for this k-tile's, and load its
        words from shared memory; each thread copies the very words it loads, so the weights
        need no barrier, and their bytes in flight no registers)
        view the current words as `weight_dtype` in the packed order, cast to f16 in the
        B-fragment order,
        subtract the zero-point row (with zero points), multiply by the (1, BN) scale row of
        the k-tile's group (loaded as 16-byte vectors of packed scales, viewed in the weights'
        scale layout)
        wait for the activation tile, sync, load it in the A-fragment layout, dot, sync (the
        second barrier also keeps the compiler from interleaving the unrolled k-tiles, which
        took the i2 kernel from 106 to 254 registers a thread when it was moved); with
        `release`, the ring's activation tiles are bulk copies waited for on their barriers
        and released after the load instead (no barrier of the block), and with
        `bulk_weights` the weight words too
        (with `late_scale`, the weights are not scaled; the dot starts from zero and its
        product, times the group's scale row as f32 in C's layout, is added to C in one fma;
        a float weight type is then cast scaled by ``2^(bias - B)``, its bits placed under the
        half's exponent with no correcting multiply, and the scale row by ``2^(B - bias)``:
        `weight_exponent`)
    store C (split == 1), or the f32 partial sums of this block's k range (split > 1); then
    the block whose `atomic_add` ticket on its tile's counter comes last adds the split's
    partial sums in order and stores C (`fused_sum`, the default), or `split_k_sum` does in a
    second launch

With `stream_k`, that body (prologue, k loop) runs inside a loop over the tiles whose k-tile
iterations the block owns, on each tile's part of its even share of all tiles' iterations; a
tile owned whole is stored, a shared one goes through the same ordered fused sum, its parts in
k order.

Layouts (W warps, each owning `units_n` units of 64 columns; KS = `units_k` k16 steps per
k-tile): weights `spatial(1, W).local(KS, units_n) * (local(1, 8) * F_B)`
(`packed_weights.tile_value_layout`), their codes the same elements in the packed order and
their words `spatial(1, W).local(KS, units_n) * spatial(1, 32).local(1, b)`
(`packed_weights.tile_layouts`),
activations `(spatial(1, 1) * replicate(W)).local(MB, KS) * F_A` (every warp holds the whole
BM-row tile), C `spatial(1, W).local(MB, 8 * units_n) * F_C`, with MB = `units_m` m16 blocks.
The block tile is BM x BN with BM = 16 * MB (8 * MB with `weights_as_a`, whose layouts are
the transposed ones of `transposed_weight_layout` and its siblings), BN = 64 * W * units_n and
BK = 16 * KS.

`n` and `k` are compile-time constants (``backend.compile(program, constants={"n": ..., "k":
...})``; a kernel is compiled per weight shape, as for a layer), and the program declares its
grid, ``(n // BN, ceil(m / BM), split)`` (a launch may leave it out): with the block indices and
the trip count bounded, every weight and scale address is shown in bounds, so the loop carries
no bounds checks (the indices under the prefetch guards are written clamped to the range's last
tile, which they equal there, so that their bounds show it too). Requirements: `k` a multiple
of BK * split and `group_size` of BK (one scale row per k-tile), `n` a multiple of BN. Rows of A
past m read zeros and rows of C past m are not written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.examples.matmul import wgmma_dot_layouts
from ir.examples.packed_prefill import RegisterRing, transposed_ring
from ir.examples.packed_prefill import copy_activations as bulk_copy_activations
from ir.examples.packed_weights import (
    UNIT_K,
    UNIT_LANES,
    UNIT_N,
    cast_codes,
    check_group_size,
    check_int_fields,
    checked_arguments,
    packed_operands,
    packed_views,
    program_name,
    tile_ahead,
    tile_layouts,
    tile_value_layout,
    unit_accumulator_scale_layouts,
    unit_scale_layout,
    weight_ring_layout,
)
from ir.examples.split_sum import add_parts_combined, add_parts_last, sum_layout
from ir.examples.stream_k import stream_k_blocks, stream_k_segments, stream_k_slots
from ir.program import Program
from layout_algebra.fragments import fragment
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.hardware import WARPGROUP_SIZE
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import RegisterLayout, local, replicate, spatial
from layout_algebra.shared import SharedLayout, shared_row_major_swizzle
from layout_algebra.symbolic import minimum
from layout_algebra.tma_box import MAX_BOX_EXTENT

PROGRAM = "register_dequant_matmul"
"""The program's name in its error messages."""
BLOCK_M = 16
"""Rows of A and C per row block: one mma m16 tile (`DequantConfig.units_m` per block)."""
BLOCK_M_WEIGHTS_AS_A = 8
"""Rows of A and C per row block with `DequantConfig.weights_as_a`: one mma n8 tile."""


@dataclass(frozen=True)
class DequantConfig:
    """The tile parameters of `register_dequant_matmul`.

    `warps` per block; `units_n` units of 64 columns per warp; `units_k` k16 steps per k-tile;
    `depth` k-tiles of weights in flight in registers; `split` blocks along k (grid z); `unroll`
    copies of the loop body per generated iteration (2 makes the activation stage a constant);
    `fused_sum`: with split > 1, the last block of each output tile adds the partial sums up in
    the same launch (an `atomic_add` ticket per tile), else `split_k_sum` does in a second
    launch. Both add the partial sums in split order: the results are the same bits.
    `late_scale`: multiply each k-tile's product by its group's scales instead of the weights
    (requires one k-tile per group, 16 * units_k == group_size): the dot takes the unscaled
    weights into a zero f32 accumulator, and the scale row, as f32 in C's layout, multiplies
    that before it is added to C. Two f32 operations per accumulator element and k-tile
    replace a half multiply per pair of weights (per lane and unit, at a k-tile of 128: 64
    against 128), at the cost of a second accumulator's registers.
    `weights_as_a`: the dot computes C^T = W^T A^T, the weights the mma's A operand (16 of N
    per m16 block) and 8 rows of A its B operand (`block_m` 8 instead of 16). A thread's B
    fragments of two neighbouring n8 blocks are one A fragment of W^T (the same register
    pairs in another order), so the weights need no data movement; per weight the block
    issues half the mma instructions and holds half the accumulators, and per 8 rows of A
    it reads all the weights once. For small batches (the tuner: buckets within 8 rows).
    `units_m`: row blocks of the mma per block (m16 blocks, or n8 blocks of A^T with
    `weights_as_a`): each warp's dequantized weights feed `units_m` mma instructions, so a
    block of ``block_m`` rows decodes its weights once (for batches past one row block).
    `min_blocks_per_sm`: the occupancy the program asks the compiler for
    (`ProgramBuilder.min_blocks_per_sm`; 0: none), which caps the registers per thread.
    `stream_k`: persistent blocks (0: none): the grid is ``min(stream_k, W)`` blocks for the
    W = tiles * (K / block_k) k-tile iterations of all output tiles, block g taking the
    iterations ``[g W // G, (g + 1) W // G)`` in tile order, so the work is spread evenly
    however the tiles fall into waves (stream-K). A tile whose iterations one block covers is
    stored by it; otherwise each block stores its segment's f32 partial sums in slot ``g -
    first block of the tile`` and the block that takes the tile's last ticket adds them in k
    order (`stream_k_slots` slots; a fused sum, so requires split 1 and `fused_sum`).
    `programmatic_launch`: the kernel is a link of a chain of layers
    (`ProgramBuilder.programmatic_launch`): it loads its first k-tiles of weights, which no
    earlier kernel writes, then waits for the kernel before it (whose output may be its
    activations) before reading anything else (with `stream_k`, it waits first).
    `late_trigger` (with `programmatic_launch`): the kernel lets the next link start after its
    k loop (`ProgramBuilder.launch_dependents`; with `stream_k`, after its tile loop) instead
    of at its entry, so that the next kernel's blocks take the SMs as this one's leave them
    rather than waiting on them through its tail.
    `magic_bias` (with `late_scale`, integer weights, no zero points): the weights are cast
    with their magic numbers' biases kept (``cast(..., biased=True)``, `ir.dtypes.magic_bias`:
    the cast is bit placement alone, no fma per pair of weights), and each k-tile's product has
    the product of the activations with the negated biases (the cast of zero codes, the same
    tile every k-tile) added to it before the scale: a second dot per k-tile (tensor-core work
    where the decode loop has room; its units' operands are the same, so the compiler issues
    it once) and an add per accumulator element, in place of half the cast's instructions.
    The f32 sums then carry the biases (up to 2^M times the group's activations) and round
    with them: results within the tensor-core tolerance, not the exact path's bits.
    `stages`: 0, the weights go through the register ring of `depth` k-tiles and the
    activations through two shared stages; S >= 2 (with depth 1), both go through a ring of S
    shared stages, copied S - 1 k-tiles ahead by `copy_async`. Each thread copies the weight
    words it later loads (`copy_async` with the words' register layout), so they are visible
    to it after the wait without a barrier: the bytes in flight per block are S - 1 k-tiles
    of weights, held in shared memory rather than registers.
    `release` (with `stages`): the ring's activation tiles are bulk copies (`copy_bulk`, a TMA
    box per 64 values of k on sm_90, into `packed_prefill.transposed_ring`), each waited for
    on its barrier (`copy_bulk_wait`) and handed back to the next copy into its stage by a
    release (`copy_bulk_release`) once the warps have read it: the k loop has no block
    barrier, so a block's warps run apart by up to S - 2 k-tiles instead of meeting twice a
    k-tile.
    `bulk_weights` (with `release`): the weights' words are bulk copies too, one TMA box per up
    to 256 words of a k-tile's rows, issued by one thread instead of each thread's own
    `copy_async` of its words, waited for and released like the activations: the loop issues
    no copy instruction but that thread's.
    `refill_in_place` (the register ring of depth 1): the k-tile goes one k16 step at a time
    after the activations' barrier, each step's words cast, then loaded again with the next
    k-tile's words of that step, then multiplied (a chain of dots in k order, the same sums):
    one k-tile's words in registers instead of two, one step's weights at a time, and none of
    the register copies by which the ring moves a k-tile along. With `magic_bias` the biases'
    product is a chain of one dot a step (a step's negated biases, the same every step).
    `prefetch_parts` (with the fused sum of split > 1 or stream-K): the block that adds a
    tile's parts first prefetches every part after the first into L1 (`prefetch_global`), so
    that the loop adding them, which waits for each part's load before the next, might find
    them near instead of paying a round trip to L2 for each (no registers: the parts are added
    one at a time as before, in slot order, the same bits). Off by default: measured on the
    H200 it was slower at all 18 split decode points tried, by up to 2.3 us
    (`benchmarks/results/quantized_matmul_decode_prefetch_parts.*`).
    `combine_parts` (with the fused sum of split > 1 or stream-K): each block adds its part
    into one f32 (m, n) sum by a combining store (``store_global(..., combine="add")``, one
    ``red.global.add.f32`` per element) instead of storing it in a slot of its own, and the
    block that takes the tile's last ticket loads that sum once (not one part per block,
    each a round trip to L2 after the last), stores C and stores zeros back, so the workspace
    is one (m, n) tile, zero between launches. The adds land in no fixed order: C is within
    the tensor-core tolerance, not the same bits launch to launch (the ticketed slots stay the
    default, the deterministic form).
    `prefetch_distance` D (0: none): each thread asks for its words of k-tile t + D to be
    brought into L2 (`prefetch_global` at level L2) while the block works on k-tile t, and
    for those of the k-tiles up to first + D - 1 at the start of its range, so that DRAM has
    D k-tiles of every resident block's weights requested, not only the ring's, and the
    ring's loads wait on L2 rather than on DRAM. A hint: no registers and no value change.
    D must be more than the k-tiles the ring already loads ahead (`ring_lead`). Off by
    default: measured on an H100 it was slower at all 21 points tried (13 decode layers'
    recorded configurations, D = 3 and 6 at M = 1 where valid, D = 4 at M = 16), the more so
    the larger D (i8 28672 x 8192, M = 1: 83.2 us, 98.4 at D = 3,
    144.8 at D = 6; `benchmarks/results/quantized_matmul_decode_l2_prefetch_*_h100.*`).
    `parts_batch` B (with the fused sum's slots: split > 1 or stream-K, not `combine_parts`):
    the block that adds a tile's parts loads them B at a time (`split_sum.add_parts_last`'s
    `batch`: each step of a loop the compiler keeps rolled issues B parts' loads, then adds
    them in slot order), about (count - 1) / B round trips to L2 after the k loop instead of
    count - 1, for B parts' registers there; the same adds in the same order, so the same
    bits (1: one part at a time). Measured on an H100 at M = 1 with B = 4: 0.9 to 1.9 us
    faster at split 8 and 16, and at M = 16 with B = 2 0.3 to 1.0 us faster at split 8
    (`benchmarks/results/quantized_matmul_decode_parts_batch_*h100.*`; the search space takes
    4 in 8-row blocks and 2 in 16-row ones, `decode_matmul.PARTS_BATCH_BY_ROWS`).
    `rows_ahead` R (0: none): the group rows a k-tile reads (its scales, and its zero points)
    come through a register ring of their own (`packed_prefill.RegisterRing`, depth R): k-tile
    t + R's rows are loaded at the top of k-tile t's iteration, so their loads have R whole
    iterations to arrive instead of the part of one iteration between a row's load and its
    first use (with the late scale, after the k-tile's dot). R rows' registers more (four a
    thread at 16-bit scales with the late scale). Off by default; the search space offers it
    in blocks of 16 rows (`decode_matmul.ROWS_AHEAD`). In a profile of the recorded
    configurations on an H100 (Nsight Compute, i2 8192 x 57344) 28 % of the warps' stall
    samples at M = 1 and 10 % at M = 16 were the scale's conversion waiting for its load;
    measured there with R = 1, M = 16 was up to 10 % faster (i3 8192 x 57344: 90.9 to 83.5 us,
    91.8 to 82.7 in another run) and M = 1 level or slower, up to 20 % for i4, whose registers
    grew past 128
    (`benchmarks/results/quantized_matmul_decode_rows_ahead_*_h100.*`).
    `warpgroup_dot` (with `weights_as_a`, a shared ring of `stages`, whole warpgroups, no
    `refill_in_place` and no `magic_bias`): each k-tile's product is the warpgroups' ``wgmma``
    on sm_90a, a chain of one dot a k16 step into one accumulator, two steps' dots running at
    once (`ProgramBuilder.wgmma_chain_window`): each step's words loaded from the ring and
    cast, the dequantized weights the instruction's A operand from registers and the step's
    tile of the stage of A^T its B, read where it lies (`backend.wgmma`; elsewhere the same
    dots run as mma.sync). The activations' ring is A^T in the layout a wgmma descriptor reads
    (`transposed_ring`): bulk-copied and released after the chain with `release`, else copied
    by each thread in runs along k (`k_runs_layout`) behind the block barriers. W^T's rows are
    renamed for the dot (a view, no data movement): each warp holds 64 rows as four m16
    blocks, and the instruction wants the four warps of a warpgroup to hold the four m16
    blocks of one 64-row tile, so the warpgroup's tile j is made of block j of each of its
    warps, and C^T's rows are named back after the chain. A warp issues one instruction per
    64 x 16 x 16 product instead of two mma.sync, and no ldmatrix loads of the activations.
    Measured on an H100 at M = 16 with the released ring: 10 to 20 % slower than the recorded
    kernels, the released ring's own cost most of it
    (`benchmarks/results/quantized_matmul_decode_warpgroup_dot_m16*_h100.*`).
    """

    warps: int = 4
    units_n: int = 1
    units_k: int = 4
    depth: int = 1
    split: int = 1
    unroll: int = 2
    fused_sum: bool = True
    late_scale: bool = False
    weights_as_a: bool = False
    units_m: int = 1
    min_blocks_per_sm: int = 0
    stream_k: int = 0
    programmatic_launch: bool = False
    late_trigger: bool = False
    stages: int = 0
    magic_bias: bool = False
    release: bool = False
    bulk_weights: bool = False
    refill_in_place: bool = False
    prefetch_parts: bool = False
    prefetch_distance: int = 0
    combine_parts: bool = False
    parts_batch: int = 1
    rows_ahead: int = 0
    warpgroup_dot: bool = False

    @property
    def ring_lead(self) -> int:
        """The k-tiles of weights the ring loads ahead of the one in use: `depth` in the
        register ring, S - 1 in a shared ring of S `stages`."""
        return self.stages - 1 if self.stages else self.depth

    @property
    def block_m(self) -> int:
        """Rows of A and C per block: `units_m` times the mma's M side (16), or its N side
        (8) with `weights_as_a`."""
        return (BLOCK_M_WEIGHTS_AS_A if self.weights_as_a else BLOCK_M) * self.units_m

    @property
    def block_n(self) -> int:
        return UNIT_N * self.warps * self.units_n

    @property
    def block_k(self) -> int:
        return UNIT_K * self.units_k

    def grid(self, m: int, n: int, k: int | None = None) -> tuple[int, int, int]:
        """The launch grid for C of shape (m, n) (with `stream_k`, for K = `k`, required)."""
        if self.stream_k:
            if k is None:
                raise VerificationError("DequantConfig.grid: a stream_k grid needs k")
            return (min(self.stream_k, self.iterations(m, n, k)), 1, 1)
        return (n // self.block_n, -(-m // self.block_m), self.split)

    def iterations(self, m: int, n: int, k: int) -> int:
        """W: k-tile iterations of all output tiles of C (m, n) for K = `k`."""
        return self.tiles(m, n) * (k // self.block_k)

    def stream_k_slots(self, m: int, n: int, k: int) -> int:
        """Partial-sum slots a `stream_k` launch needs (the most blocks one tile's iterations
        can span): ``(K / block_k - 1) // (W // G) + 2``, G its grid's blocks."""
        work = self.iterations(m, n, k)
        return stream_k_slots(k // self.block_k, work, min(self.stream_k, work))

    def tiles(self, m: int, n: int) -> int:
        """Output tiles of C of shape (m, n): the counters a fused split-k sum needs."""
        return (n // self.block_n) * -(-m // self.block_m)


def activation_layout(warps: int, units_k: int, units_m: int = 1) -> RegisterLayout:
    """The (16 * units_m, 16 * units_k) A tile in mma A fragments, replicated over the `warps`
    warps."""
    fragments = fragment("mma.m16n8k16.a").layout
    return (spatial(1, 1) * replicate(warps)).local(units_m, units_k) * fragments


def accumulator_layout(warps: int, units_n: int, units_m: int = 1) -> RegisterLayout:
    """The (16 * units_m, 64 * warps * units_n) C tile in mma C fragments, warp w owning its
    columns."""
    return spatial(1, warps).local(units_m, 8 * units_n) * fragment("mma.m16n8k16.c").layout


def transposed_weight_layout(warps: int, units_k: int, units_n: int) -> RegisterLayout:
    """W^T's (64 * warps * units_n, 16 * units_k) tile in mma A fragments (`weights_as_a`):
    warp w owns its 64 * units_n rows (the weights' columns) as four m16 blocks per unit, for
    every k step; each thread holds the elements of `tile_value_layout`, reordered."""
    return spatial(warps, 1).local(4 * units_n, units_k) * fragment("mma.m16n8k16.a").layout


def transposed_activation_layout(warps: int, units_k: int, units_m: int = 1) -> RegisterLayout:
    """A^T's (16 * units_k, 8 * units_m) tile in mma B fragments, replicated over the `warps`
    warps."""
    fragments = fragment("mma.m16n8k16.b").layout
    return (spatial(1, 1) * replicate(warps)).local(units_k, units_m) * fragments


def transposed_accumulator_layout(warps: int, units_n: int, units_m: int = 1) -> RegisterLayout:
    """C^T's (64 * warps * units_n, 8 * units_m) tile in mma C fragments, warp w owning its
    rows."""
    return spatial(warps, 1).local(4 * units_n, units_m) * fragment("mma.m16n8k16.c").layout


def k_runs_layout(threads: int, block_k: int, block_m: int) -> RegisterLayout | None:
    """A (block_k, block_m) tile of A^T over `threads` threads, each holding a run of
    consecutive values of k of one row of A (16 bytes of f16 at 16 rows of four warps): the
    copies of such a tile into `transposed_ring` from A (whose rows are contiguous along k)
    move whole vectors. None when the tile does not split so (the copy's own layout then)."""
    run, rest = divmod(block_k * block_m, threads)
    if rest or not run or block_k % run:
        return None
    return spatial(block_k // run, block_m).local(run, 1)


def panelled_rows(stages: int, rows: int, columns: int, panel: int) -> SharedLayout:
    """`stages` (rows, columns) tiles, each in panels of `panel` columns whose rows lie
    contiguous: element (s, r, c) at ``s rows columns + (c // panel) rows panel + r panel + c %
    panel``, the layout one bulk copy per panel writes (a box's rows are dense)."""
    modes = (stages, rows, columns // panel, panel)
    strides = (rows * columns, panel, rows * panel, 1)
    return SharedLayout((stages, rows, columns), modes, strides)


def _check_config(group_size: int, config: DequantConfig) -> None:
    positive = ("warps", "units_n", "units_k", "units_m", "depth", "split", "unroll", "parts_batch")
    check_int_fields(PROGRAM, config, positive, 1)
    check_int_fields(
        PROGRAM,
        config,
        ("min_blocks_per_sm", "stream_k", "stages", "prefetch_distance", "rows_ahead"),
        0,
    )
    if config.stream_k and (config.split != 1 or not config.fused_sum):
        raise VerificationError(
            f"register_dequant_matmul: stream_k={config.stream_k} with split={config.split} "
            f"and fused_sum={config.fused_sum}; stream-K requires split 1 and the fused sum"
        )
    flags = ("fused_sum", "late_scale", "weights_as_a", "programmatic_launch", "late_trigger")
    others = (
        "magic_bias",
        "release",
        "bulk_weights",
        "refill_in_place",
        "prefetch_parts",
        "combine_parts",
        "warpgroup_dot",
    )
    for name in (*flags, *others):
        value = getattr(config, name)
        if not isinstance(value, bool):
            raise VerificationError(
                f"register_dequant_matmul: {name}={value!r}; expected True or False"
            )
    if config.stages == 1 or (config.stages and config.depth != 1):
        raise VerificationError(
            f"register_dequant_matmul: stages={config.stages} with depth={config.depth}; a "
            "shared ring needs at least 2 stages and takes the place of the register ring "
            "(depth 1)"
        )
    if config.refill_in_place and (config.stages or config.depth != 1):
        raise VerificationError(
            f"register_dequant_matmul: refill_in_place=True with stages={config.stages}, "
            f"depth={config.depth}; the words are refilled in place in the register ring of "
            "depth 1 (stages 0)"
        )
    lead = config.ring_lead
    if config.prefetch_distance and config.prefetch_distance <= lead:
        raise VerificationError(
            f"register_dequant_matmul: prefetch_distance={config.prefetch_distance} with "
            f"depth={config.depth} and stages={config.stages}; the ring already loads "
            f"{lead} k-tile(s) ahead, so the distance must be more than {lead}"
        )
    if config.combine_parts and not (config.fused_sum and (config.split > 1 or config.stream_k)):
        raise VerificationError(
            f"register_dequant_matmul: combine_parts=True with split={config.split}, "
            f"stream_k={config.stream_k} and fused_sum={config.fused_sum}; the parts are "
            "added in the fused sum of split > 1 or stream-K"
        )
    if config.parts_batch > 1 and (
        config.combine_parts or not (config.fused_sum and (config.split > 1 or config.stream_k))
    ):
        raise VerificationError(
            f"register_dequant_matmul: parts_batch={config.parts_batch} with split="
            f"{config.split}, stream_k={config.stream_k}, fused_sum={config.fused_sum} and "
            f"combine_parts={config.combine_parts}; the parts are loaded in batches by the "
            "fused sum's slots (split > 1 or stream-K, without combine_parts)"
        )
    if config.combine_parts and config.prefetch_parts:
        raise VerificationError(
            "register_dequant_matmul: combine_parts=True with prefetch_parts=True; the "
            "combined parts are one sum, with no parts to prefetch"
        )
    if config.release and not config.stages:
        raise VerificationError(
            "register_dequant_matmul: release=True with stages=0; the releases hand back the "
            "stages of a shared ring (stages >= 2)"
        )
    if config.bulk_weights and not config.release:
        raise VerificationError(
            "register_dequant_matmul: bulk_weights=True without release; the weights' bulk "
            "copies share the released ring"
        )
    if config.late_trigger is True and not config.programmatic_launch:
        raise VerificationError(
            "register_dequant_matmul: late_trigger=True without programmatic_launch; the "
            "trigger belongs to a link of a chain"
        )
    if config.warpgroup_dot and not (
        config.weights_as_a
        and config.stages
        and not config.refill_in_place
        and config.warps % (WARPGROUP_SIZE // UNIT_LANES) == 0
    ):
        raise VerificationError(
            f"register_dequant_matmul: warpgroup_dot=True with warps={config.warps}, "
            f"weights_as_a={config.weights_as_a}, stages={config.stages} and "
            f"refill_in_place={config.refill_in_place}; the warpgroup's dot takes the weights "
            "as A from registers, each step's words from the shared ring: it requires "
            "weights_as_a, a shared ring (stages >= 2), no refill_in_place and whole "
            "warpgroups (warps a multiple of 4)"
        )
    if config.warps * UNIT_LANES > 1024:
        raise VerificationError(
            f"register_dequant_matmul: warps={config.warps}; a block has at most 32 warps"
        )
    check_group_size(PROGRAM, group_size, config.block_k)
    if config.magic_bias and config.warpgroup_dot:
        raise VerificationError(
            "register_dequant_matmul: magic_bias=True with warpgroup_dot=True; the biases' "
            "product would be a second chain of warpgroup dots a k-tile"
        )
    if config.magic_bias and not config.late_scale:
        raise VerificationError(
            "register_dequant_matmul: magic_bias=True without late_scale; the biases cancel "
            "in each k-tile's own accumulator, which the late scale provides"
        )
    if config.late_scale and group_size != config.block_k:
        raise VerificationError(
            f"register_dequant_matmul: late_scale with group_size={group_size} and a k-tile of "
            f"{config.block_k} (16 * units_k); it requires the k-tile to be the group"
        )


def register_dequant_matmul(
    weight_dtype: DataType = dtypes.i4,
    group_size: int = 128,
    config: DequantConfig | None = None,
    *,
    activation_dtype: DataType = dtypes.f16,
    zero_points: bool = False,
) -> Program:
    """The program ``qmm(m, n, k, a, packed, scales, [zeros,] [partial, counters,] c)`` for
    `config` (a `DequantConfig`; None: the default one).

    `a`, the scales, the zero points and C are `activation_dtype` (f16 or bf16). `c` is the
    (m, n) output, except with ``config.split > 1`` and not ``config.fused_sum``: then it is
    f32 (split, m, n) partial sums for `split_k_sum`. With split > 1 and `fused_sum`,
    `partial` is an f32 (split, m, n) workspace and `counters` ``config.tiles(m, n)`` i32
    counters that must be 0 before the first launch (each launch leaves them 0); with
    `combine_parts`, `partial` is one f32 (m, n) sum that must be 0 before the first launch
    too (each launch leaves it 0). With
    `zero_points` the dequantized weight is ``(W - Z) * S``, Z the (groups, n) zero points
    packed like the scales: the subtraction of two integer-valued codes is exact, so it equals
    the code of ``f32(W - Z) * f32(S)`` rounded once.
    """
    config, weight_dtype = checked_arguments(
        PROGRAM,
        config,
        DequantConfig,
        lambda checked: _check_config(group_size, checked),
        weight_dtype,
        activation_dtype,
        zero_points,
    )
    act, f32, i32 = activation_dtype, dtypes.f32, dtypes.i32
    if config.magic_bias:
        error = dtypes.magic_bias_error(weight_dtype, act)
        if zero_points or error is not None:
            raise VerificationError(
                f"register_dequant_matmul: magic_bias with {weight_dtype} weights, {act} "
                f"activations and zero_points={zero_points}: "
                f"{error or 'the biases cancel in the products only without zero points'}"
            )
    # With the late scale (no zero points), a float's bias moves from its cast to the scales.
    late_float = config.late_scale and not zero_points
    exponent = weight_exponent(weight_dtype, act) if late_float else 0
    nbits = weight_dtype.nbits
    warps, split, depth = config.warps, config.split, config.depth
    block_m, block_n, block_k = config.block_m, config.block_n, config.block_k
    transposed = config.weights_as_a
    code_layout, word_layout = tile_layouts(nbits, warps, config.units_k, config.units_n)
    if transposed:
        # C^T = W^T A^T: the codes named as W^T (a view) are cast straight into A fragments.
        code_layout = code_layout.permute(1, 0)
        weight_layout = transposed_weight_layout(warps, config.units_k, config.units_n)
        a_layout = transposed_activation_layout(warps, config.units_k, config.units_m)
        c_layout = transposed_accumulator_layout(warps, config.units_n, config.units_m)
    else:
        weight_layout = tile_value_layout(warps, config.units_k, config.units_n)
        a_layout = activation_layout(warps, config.units_k, config.units_m)
        c_layout = accumulator_layout(warps, config.units_n, config.units_m)
    warpgroup_layouts = None
    if config.warpgroup_dot:
        # The warpgroups' dot of W^T's (block_n, block_k) tile by A^T's (block_k, block_m).
        warpgroup_layouts = wgmma_dot_layouts(UNIT_LANES * warps, block_n, block_m, UNIT_K)
    # One k16 step's layouts (`refill_in_place`).
    step_code_layout, step_word_layout = tile_layouts(nbits, warps, 1, config.units_n)
    if transposed:
        step_code_layout = step_code_layout.permute(1, 0)
        step_weight_layout = transposed_weight_layout(warps, 1, config.units_n)
        step_a_layout = transposed_activation_layout(warps, 1, config.units_m)
    else:
        step_weight_layout = tile_value_layout(warps, 1, config.units_n)
        step_a_layout = activation_layout(warps, 1, config.units_m)
    # The dimension of the k steps (weights) and of the rows of A (C), along which one
    # weight column's scale is constant.
    k_dim = 1 if transposed else 0
    # A row of packed scales (or zero points) as loaded and as viewed: for the weights (B's
    # fragment columns), or for C's fragments (columns 2q, 2q + 1 of each n8 fragment; C^T's
    # fragments hold the B fragments' columns, in their order).
    warp_units = spatial(1, warps).local(1, config.units_n)
    weight_row_layouts = (
        warp_units * unit_scale_layout(),
        reduce_layout(weight_layout, [k_dim], keepdims=True),
    )
    step_row_layouts = (weight_row_layouts[0], reduce_layout(step_weight_layout, [k_dim], True))
    c_row_layout = reduce_layout(c_layout, [k_dim], keepdims=True)
    if transposed:
        accumulator_row_layouts = (warp_units * unit_scale_layout(), c_row_layout)
    else:
        unit_load, unit_view = unit_accumulator_scale_layouts()
        accumulator_row_layouts = (warp_units * unit_load, warp_units * unit_view)
    row_words = UNIT_LANES * nbits
    name = program_name(PROGRAM, weight_dtype, act, zero_points)
    with ProgramBuilder(name, UNIT_LANES * warps) as b:
        if config.min_blocks_per_sm:
            b.min_blocks_per_sm(config.min_blocks_per_sm)
        if config.programmatic_launch:
            b.programmatic_launch()
        if config.warpgroup_dot:
            # Two steps' dots at once: one step's weights cast beside the tensor cores' work
            # on the step before, and two steps' A registers, not the k-tile's.
            b.wgmma_chain_window(2)
        m = b.int_param("m", lo=1)
        n = b.int_param("n", lo=block_n, multiple_of=block_n, constant=True)
        k = b.int_param("k", lo=block_k * split, multiple_of=block_k * split, constant=True)
        operands = packed_operands(b, act, zero_points)
        a = operands[0]
        stream = config.stream_k > 0
        fused = (split > 1 or stream) and config.fused_sum
        partial = b.array_param("partial", f32) if fused else None
        counters = b.array_param("counters", i32) if fused else None
        c = b.array_param("c", f32 if split > 1 and not fused else act)
        tiles_n, tiles_m = n // block_n, (m + block_m - 1) // block_m
        k_tiles = k // block_k
        work = tiles_n * tiles_m * k_tiles
        blocks = stream_k_blocks(config.stream_k, work) if stream else None
        if stream:
            b.grid(blocks)
        else:
            b.grid(tiles_n, tiles_m, split)
        a_view = b.global_view(a, act, GlobalLayout((m, k), (k, 1)))
        packed_view, scale_view, zero_view = packed_views(b, operands, nbits, n, k, group_size)
        stages = config.stages
        if config.release or config.warpgroup_dot:
            # A^T in k-major panels, the layout a wgmma descriptor reads: bulk-copied (one TMA
            # box a panel) and released a k-tile at a time, or for the warpgroups' dot by
            # cp.async and barriers.
            a_shared = b.shared_tensor(act, transposed_ring(max(stages, 2), block_k, block_m))
            a_columns = b.global_view(a, act, GlobalLayout((k, m), (1, k)))
        else:
            a_shared = b.shared_tensor(
                act, shared_row_major_swizzle(max(stages, 2), block_m, block_k, element_bits=16)
            )
        tiles_per_group = group_size // block_k
        word_cols = warps * config.units_n * row_words
        # The weights' shared ring: each thread's words of a k-tile, as it loads them
        # (`weight_ring_layout`); bulk-copied, in panels of a box's width (a box writes its
        # rows densely).
        weight_box = math.gcd(word_cols, MAX_BOX_EXTENT)
        w_tile = (config.units_k, word_cols)
        w_shared = None
        if config.bulk_weights:
            w_shared = b.shared_tensor(i32, panelled_rows(stages, *w_tile, weight_box))
        elif stages:
            w_shared = b.shared_tensor(
                i32, weight_ring_layout(stages, nbits, warps, config.units_k, config.units_n)
            )

        def weight_words(tile, word_col0):
            return b.load_global(packed_view, [tile * config.units_k, word_col0], word_layout)

        def step_words(tile, j, word_col0):
            """Step j's words of k-tile `tile` (`refill_in_place`)."""
            return b.load_global(
                packed_view, [tile * config.units_k + j, word_col0], step_word_layout
            )

        def copy_weights(tile, stage, word_col0):
            row = tile * config.units_k
            if not config.bulk_weights:
                b.copy_async(
                    w_shared, packed_view, [row, word_col0], [stage, 0, 0], layout=word_layout
                )
                return
            for first in range(0, word_cols, weight_box):
                b.copy_bulk(
                    w_shared, packed_view, [row, word_col0 + first], [stage, 0, first],
                    shape=(config.units_k, weight_box),
                )  # fmt: skip

        def ahead_of(first, d, end, copy):
            tile_ahead(b, first, d, end, copy)

        def prefetch_weights(tile, word_col0):
            b.prefetch_global(
                packed_view, [tile * config.units_k, word_col0], word_layout, level="L2"
            )

        # The packed rows of a group as the k loop reads them: the scales for the accumulators
        # (late scale) or for the weights, the zero points for the weights.
        scale_row_load = (accumulator_row_layouts if config.late_scale else weight_row_layouts)[0]

        def group_rows(tile, col0):
            """The scale row (then the zero-point row) of k-tile `tile`'s group, from column
            `col0`, as loaded (`rows_ahead`'s ring)."""
            group = tile // tiles_per_group
            rows = [b.load_global(scale_view, [group, col0], scale_row_load)]
            if zero_points:
                rows.append(b.load_global(zero_view, [group, col0], weight_row_layouts[0]))
            return rows

        def accumulate(first, end, tile_m, tile_n):
            """The f32 product of row block `tile_m` and column block `tile_n` of C over the
            k-tiles [first, end) of K (at least one), in C's layout."""
            row0, col0, word_col0 = tile_m * block_m, tile_n * block_n, tile_n * word_cols
            acc = b.register_tensor(f32, c_layout, 0.0)
            zero = b.register_tensor(f32, c_layout, 0.0) if config.late_scale else None
            in_place = config.refill_in_place
            if config.magic_bias:
                # Each weight's bias, negated: the biased cast of zero codes (constants), in
                # the layouts of a k-tile or, refilled in place, of one k16 step.
                bias_layouts = (
                    (step_code_layout, step_weight_layout)
                    if in_place
                    else (code_layout, weight_layout)
                )
                zero_codes = b.register_tensor(weight_dtype, bias_layouts[0], 0)
                biases = b.cast(zero_codes, act, bias_layouts[1], biased=True)
                negated_biases = b.neg(biases)

            def copy_activations(tile, stage):
                if config.release:
                    bulk_copy_activations(b, a_shared, a_columns, tile, stage, row0)
                elif config.warpgroup_dot:
                    runs = k_runs_layout(UNIT_LANES * warps, block_k, block_m)
                    b.copy_async(
                        a_shared, a_columns, [tile * block_k, row0], [stage, 0, 0], layout=runs
                    )
                else:
                    b.copy_async(a_shared, a_view, [row0, tile * block_k], [stage, 0, 0])

            def ring_stage(tile):
                """The shared stage of k-tile `tile`: counted from the range's first k-tile
                where the unrolled copies make it a constant, else the k-tile's own index
                modulo the stages (any numbering the ring keeps will do; counted from `first`,
                a stream-K segment's start, the k loop would compute that division again every
                k-tile: SASS, 1201 instructions for two k-tiles instead of 1030)."""
                if config.unroll % stages == 0:
                    return (tile - first) % stages
                return tile % stages

            if stages:
                ring = []
                for d in range(stages - 1):
                    ahead_of(
                        first, d, end,
                        lambda t, d=d: copy_weights(t, ring_stage(first + d), word_col0),
                    )  # fmt: skip
            elif in_place:
                # The current k-tile's words, by step: each step's registers take the next
                # k-tile's words of that step once its cast has read them.
                ring = [step_words(first, j, word_col0) for j in range(config.units_k)]
            else:
                ring = [weight_words(minimum(first + d, end - 1), word_col0) for d in range(depth)]
            if not in_place:
                current = b.register_tensor(i32, word_layout, 0)
            # The k-tiles past the ring's up to the prefetch distance, into L2.
            for d in range(config.ring_lead, config.prefetch_distance):
                ahead_of(first, d, end, lambda t: prefetch_weights(t, word_col0))
            if config.programmatic_launch and not stream:
                # The weights above overlap the end of the kernel before; the activations,
                # scales, partial sums and counters below may be what it writes.
                b.wait_prior_grid()
            # Group d of the prologue holds k-tile first + d's activations (the first one all
            # its weights too): a k-tile's data is complete once its group is. (Released, the
            # activations are bulk copies with barriers of their own: the groups hold only the
            # weights, none at all with `bulk_weights`.)
            for d in range(max(stages - 1, 1)):
                stage_d = ring_stage(first + d) if stages else d
                ahead_of(first, d, end, lambda t, s=stage_d: copy_activations(t, s))
                if not config.bulk_weights:
                    b.copy_async_commit()
            # The group rows' ring: after the wait above (the kernel before may write them).
            row_ring = None
            if config.rows_ahead:
                row_ring = RegisterRing(
                    b, lambda t: group_rows(t, col0), first, end, config.rows_ahead
                )
            with b.for_range(first, end, unroll=config.unroll) as tile:
                if config.prefetch_distance:
                    ahead_of(
                        tile, config.prefetch_distance, end,
                        lambda t: prefetch_weights(t, word_col0),
                    )  # fmt: skip
                if stages:
                    stage = ring_stage(tile)

                    def copy_ahead(t):
                        ahead_stage = ring_stage(tile + stages - 1)
                        copy_weights(t, ahead_stage, word_col0)
                        copy_activations(t, ahead_stage)

                    ahead_of(tile, stages - 1, end, copy_ahead)
                    # (The warpgroups' dot loads each step's words where it casts them.)
                    whole = not config.warpgroup_dot
                    if config.bulk_weights:
                        b.copy_bulk_wait(w_shared, [stage, 0, 0], w_tile)
                        if whole:
                            b.assign(current, b.load_shared(w_shared, word_layout, [stage, 0, 0]))
                            b.copy_bulk_release(w_shared, [stage, 0, 0], w_tile)
                    else:
                        b.copy_async_commit()
                        b.copy_async_wait(stages - 1)
                        # This thread's own words: visible to it after the wait, no barrier.
                        if whole:
                            b.assign(current, b.load_shared(w_shared, word_layout, [stage, 0, 0]))
                else:
                    stage = (tile - first) % 2
                    if not in_place:
                        b.assign(current, ring[0])
                        for d in range(depth - 1):
                            b.assign(ring[d], ring[d + 1])
                        # (The weights' guard also keeps the compiler from hoisting the loads
                        # of the unrolled k-tiles: it costs copies of the ring, not twice the
                        # registers.)
                        ahead_of(
                            tile, depth, end,
                            lambda t: b.assign(ring[depth - 1], weight_words(t, word_col0)),
                        )  # fmt: skip
                    ahead_of(tile, 1, end, lambda t: copy_activations(t, 1 - stage))
                    b.copy_async_commit()
                group = minimum(tile, end - 1) // tiles_per_group  # tile <= end - 1: its bound
                ring_rows = row_ring.advance(tile) if row_ring else None

                def group_row(view, layouts):
                    if ring_rows is None:
                        packed_row = b.load_global(view, [group, col0], layouts[0])
                    else:
                        # The ring loads each row in the one layout its reads load it in.
                        packed_row = ring_rows[0] if view is scale_view else ring_rows[1]
                        assert packed_row.layout == layouts[0]
                    return b.view(packed_row, act, layouts[1])

                def dequantized(words, layouts, rows=None):
                    """The weights of `words` (the codes in `layouts`: code, weight and row
                    layouts), cast, less the zero points, times the scales unless late: the
                    group's rows given as (zero points, scales), or loaded here."""
                    weights = cast_codes(
                        b,
                        words,
                        weight_dtype,
                        act,
                        layouts[0],
                        layouts[1],
                        exponent=exponent,
                        biased=config.magic_bias,
                    )
                    if zero_points:
                        zeros = group_row(zero_view, layouts[2]) if rows is None else rows[0]
                        weights = b.sub(weights, zeros)
                    if not config.late_scale:
                        scales = group_row(scale_view, layouts[2]) if rows is None else rows[1]
                        weights = b.mul(weights, scales)
                    return weights

                if not in_place and not config.warpgroup_dot:
                    weights = dequantized(current, (code_layout, weight_layout, weight_row_layouts))
                if not stages:
                    b.copy_async_wait(1)
                if config.release:
                    a_tile = ([stage, 0, 0], (block_k, block_m))
                    b.copy_bulk_wait(a_shared, *a_tile)
                    # The ring holds A^T: loaded as such, named as A where the dot wants A
                    # (the warpgroups' dot reads each step's tile itself).
                    if config.warpgroup_dot:
                        activations = None
                    elif transposed:
                        activations = b.load_shared(a_shared, a_layout, [stage, 0, 0])
                    else:
                        loaded = b.load_shared(a_shared, a_layout.permute(1, 0), [stage, 0, 0])
                        activations = b.view(loaded, act, a_layout)
                    if not config.warpgroup_dot:
                        # This warp is past its reads of the stage: the next copy into it may
                        # start. (A warpgroup's dot reads the stage itself: released after it.)
                        b.copy_bulk_release(a_shared, *a_tile)
                elif in_place:
                    b.sync()
                    steps = []
                    for j in range(config.units_k):
                        # Step j's (BM, 16) tile of A (A^T named as loaded, as below).
                        if transposed:
                            loaded = b.load_shared(
                                a_shared, step_a_layout.permute(1, 0), [stage, 0, j * UNIT_K]
                            )
                            steps.append(b.view(loaded, act, step_a_layout))
                        else:
                            steps.append(
                                b.load_shared(a_shared, step_a_layout, [stage, 0, j * UNIT_K])
                            )
                elif config.warpgroup_dot:
                    b.sync()  # the stage's activations, copied by every thread, are complete
                    activations = None
                else:
                    b.sync()
                    if transposed:
                        # The (BM, BK) tile as loaded (ldmatrix rows are rows of A), named A^T.
                        loaded = b.load_shared(a_shared, a_layout.permute(1, 0), [stage, 0, 0])
                        activations = b.view(loaded, act, a_layout)
                    else:
                        activations = b.load_shared(a_shared, a_layout, [stage, 0, 0])

                def product(w, c_in, a_tile=None):
                    a_tile = activations if a_tile is None else a_tile
                    if transposed:
                        return b.dot(w, a_tile, c_in)
                    return b.dot(a_tile, w, c_in)

                def warpgroup_product(c_in=None):
                    """The k-tile's product (plus `c_in`, if given) by the warpgroups' dot, a
                    chain of one dot a k16 step into one accumulator: each step's words loaded
                    from the ring and cast, W^T's rows renamed so that each warpgroup's four
                    warps hold the four m16 blocks of a 64-row tile (a view, the same
                    registers), the step's activations read where they lie (a tile the tensor
                    cores read has no other reader), and C^T's rows named back."""
                    renamed_c = warpgroup_layouts[2]
                    total = b.register_tensor(f32, renamed_c, 0.0)
                    if c_in is not None:
                        b.assign(total, b.view(c_in, f32, renamed_c))
                    layouts = (step_code_layout, step_weight_layout, step_row_layouts)
                    rows = (
                        group_row(zero_view, step_row_layouts) if zero_points else None,
                        None if config.late_scale else group_row(scale_view, step_row_layouts),
                    )
                    for j in range(config.units_k):
                        words = b.load_shared(w_shared, step_word_layout, [stage, j, 0])
                        step_weights = dequantized(words, layouts, rows)
                        step_a = b.load_shared(a_shared, step_a_layout, [stage, j * UNIT_K, 0])
                        renamed = b.view(step_weights, act, warpgroup_layouts[0])
                        b.assign(total, b.dot(renamed, step_a, total))
                    if config.bulk_weights:
                        b.copy_bulk_release(w_shared, [stage, 0, 0], w_tile)
                    return b.view(total, f32, c_layout)

                def stepped_product(c_in):
                    """The k-tile's product from `c_in`, step by step: each step's words cast,
                    refilled with the next k-tile's, then multiplied into the chain. The next
                    k-tile is clamped to the range's last, unguarded (the last k-tile loads
                    its own words again, which nothing reads): guarded one by one, the steps'
                    loads did not share their address arithmetic (SASS: 6 to 11 % more
                    instructions in the loop)."""
                    layouts = (step_code_layout, step_weight_layout, step_row_layouts)
                    # The group's rows, loaded once for the steps.
                    rows = (
                        group_row(zero_view, step_row_layouts) if zero_points else None,
                        None if config.late_scale else group_row(scale_view, step_row_layouts),
                    )
                    for j in range(config.units_k):
                        step_weights = dequantized(ring[j], layouts, rows)
                        b.assign(ring[j], step_words(minimum(tile + 1, end - 1), j, word_col0))
                        c_in = product(step_weights, c_in, steps[j])
                    return c_in

                if config.late_scale:
                    row = group_row(scale_view, accumulator_row_layouts)
                    scale = b.cast(row, f32, c_row_layout, exponent=-exponent)
                    if config.warpgroup_dot:
                        products = warpgroup_product()
                    elif in_place:
                        products = stepped_product(zero)
                    else:
                        products = product(weights, zero)
                    if config.magic_bias:
                        # The biases' product, negated, from a chain of its own (started from
                        # it, the weights' chain would wait on it: twice the mma latency).
                        if in_place:
                            biased = zero
                            for j in range(config.units_k):
                                biased = product(negated_biases, biased, steps[j])
                        else:
                            biased = product(negated_biases, zero)
                        products = b.add(products, biased)
                    b.assign(acc, b.fma(products, scale, acc))
                elif config.warpgroup_dot:
                    b.assign(acc, warpgroup_product(acc))
                elif in_place:
                    b.assign(acc, stepped_product(acc))
                else:
                    b.assign(acc, product(weights, acc))
                if config.warpgroup_dot and config.release:
                    # Every warpgroup's dots are done with the stage.
                    b.copy_bulk_release(a_shared, *a_tile)
                if not config.release:
                    # Every thread is past its reads of this stage before the next tile's copy
                    # into it.
                    b.sync()
            return acc

        def c_tile(param, dtype, parts=None):
            """C (m, n), or `parts` of them, as a view of C's tiles: C^T with `transposed`."""
            shape, strides = ((n, m), (1, n)) if transposed else ((m, n), (n, 1))
            if parts is not None:
                shape, strides = (parts, *shape), (m * n, *strides)
            return b.global_view(param, dtype, GlobalLayout(shape, strides))

        def origin(row0, col0):
            return [col0, row0] if transposed else [row0, col0]

        def combine(acc, row0, col0, slot, count, slots):
            """Store this block's partial sums of the tile at (row0, col0) in `slot` of
            `slots` (with `combine_parts`, add them into the one sum); the block that adds the
            tile's counter last (count - 1 before it) adds the count parts in slot order (or
            loads the sum), stores C and resets the counter (and the sum) for the next
            launch."""
            tile_sum = {  # what the block with the tile's last ticket needs
                "out": b.global_view(c, act, GlobalLayout((m, n), (n, 1))),
                "counters": b.global_view(counters, i32, GlobalLayout((tiles_n * tiles_m,), (1,))),
                "tile": (row0 // block_m) * tiles_n + col0 // block_n,
                "origin": (row0, col0),
                "count": count,
                "layout": sum_layout(block_m, block_n, UNIT_LANES * warps),
                "out_dtype": act,
            }
            if config.combine_parts:
                b.store_global(c_tile(partial, f32), acc, origin(row0, col0), combine="add")
                total = b.global_view(partial, f32, GlobalLayout((m, n), (n, 1)))
                add_parts_combined(b, total=total, **tile_sum)
                return
            b.store_global(c_tile(partial, f32, slots), acc, [slot, *origin(row0, col0)])
            parts = b.global_view(partial, f32, GlobalLayout((slots, m, n), (m * n, n, 1)))
            add_parts_last(
                b,
                parts=parts,
                prefetch=config.prefetch_parts,
                batch=config.parts_batch,
                **tile_sum,
            )

        if not stream:
            tiles_per_split = k_tiles // split
            first = b.block_z * tiles_per_split
            row0, col0 = b.block_y * block_m, b.block_x * block_n
            acc = accumulate(first, first + tiles_per_split, b.block_y, b.block_x)
            if config.late_trigger:
                b.launch_dependents()
            if split == 1:
                b.store_global(c_tile(c, act), b.cast(acc, act), origin(row0, col0))
            elif not fused:
                b.store_global(c_tile(c, f32, split), acc, [b.block_z, *origin(row0, col0)])
            else:
                combine(acc, row0, col0, b.block_z, split, split)
            return b.program()
        # Stream-K (`ir.examples.stream_k`): the k loop per segment of the block's share.
        slots = stream_k_slots(k_tiles, work, blocks)
        if config.programmatic_launch:
            b.wait_prior_grid()  # before the tile loop: the wait belongs to the top level
        segments = stream_k_segments(
            b, tiles=tiles_n * tiles_m, k_tiles=k_tiles, work=work, blocks=blocks
        )
        with segments as segment:
            tile_m, tile_n = segment.tile // tiles_n, segment.tile % tiles_n
            row0, col0 = tile_m * block_m, tile_n * block_n
            acc = accumulate(segment.first, segment.end, tile_m, tile_n)
            with b.if_(segment.count.eq(1)):
                b.store_global(c_tile(c, act), b.cast(acc, act), origin(row0, col0))
            with b.if_(segment.count > 1):
                combine(acc, row0, col0, segment.slot, segment.count, slots)
        if config.late_trigger:
            b.launch_dependents()
    return b.program()


def weight_exponent(weight_dtype: DataType, activation_dtype: DataType) -> int:
    """The exponent of the weights' scaled cast with the late scale: for a float type without
    infinities or NaNs, its bias minus the activation type's (f16: 15), when that scaled cast
    is exact (`ir.dtypes.scaled_conversion_error`), so that the conversion only places bits
    (`backend.fast_conversions.fma_free_exponent`); else 0. The late scale multiplies by
    ``2^-exponent`` in f32, where every scale times it is exact, so C is the same bits."""
    if not weight_dtype.is_float or weight_dtype.has_inf or weight_dtype.has_nan:
        return 0
    exponent = weight_dtype.bias - activation_dtype.bias
    if dtypes.scaled_conversion_error(weight_dtype, activation_dtype, exponent) is not None:
        return 0
    if dtypes.scaled_conversion_error(activation_dtype, dtypes.f32, -exponent) is not None:
        return 0
    return exponent


SUM_COLUMNS_PER_THREAD = 4
"""Consecutive outputs each thread of `split_k_sum` adds up (one 16-byte f32 vector)."""


def split_k_sum(split: int, threads: int = 128, *, out_dtype: DataType = dtypes.f16) -> Program:
    """``split_k_sum(mn, partial, c)``: c[j] = out_dtype(partial[0, j] + ... + partial[split-1,
    j]) (f32 sums in order), the second launch of a split-k `register_dequant_matmul` with
    ``mn = m * n``; `out_dtype` f16 or bf16; `threads` an int from 1 to 1024. It declares its
    grid, ``ceil(mn / (threads * 4))``. Raises VerificationError for anything else."""
    if isinstance(split, bool) or not isinstance(split, int) or split < 2:
        raise VerificationError(f"split_k_sum: split={split!r}; expected an int >= 2")
    if out_dtype not in (dtypes.f16, dtypes.bf16):
        raise VerificationError(f"split_k_sum: out_dtype={out_dtype!r}; expected f16 or bf16")
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 1024:
        raise VerificationError(f"split_k_sum: threads={threads!r}; expected an int from 1 to 1024")
    width = threads * SUM_COLUMNS_PER_THREAD
    layout = local(split, 1).spatial(1, threads).local(1, SUM_COLUMNS_PER_THREAD)
    suffix = "" if out_dtype == dtypes.f16 else f"_{out_dtype.name}"
    with ProgramBuilder(f"split_k_sum_{split}{suffix}", threads) as b:
        count = b.int_param("mn", lo=1)
        partial = b.array_param("partial", dtypes.f32)
        c = b.array_param("c", out_dtype)
        b.grid((count + width - 1) // width)
        parts = b.global_view(partial, dtypes.f32, GlobalLayout((split, count), (count, 1)))
        out = b.global_view(c, out_dtype, GlobalLayout((1, count), (count, 1)))
        tile = b.load_global(parts, [0, b.block_x * width], layout)
        total = b.reduce(tile, 0, "sum", keepdim=True)
        b.store_global(out, b.cast(total, out_dtype), [0, b.block_x * width])
    return b.program()

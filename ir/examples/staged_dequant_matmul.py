"""W-A16 quantized matmul for large batches (prefill): packed weights dequantized by every warp
of the block into a shared tile, which Hopper's warpgroup tensor cores read beside the
activations.

C (m, n) = A (m, k) @ (W * S), with W and S packed as for `ir.examples.register_dequant_matmul`
(`ir.examples.packed_weights`), like `ir.examples.wgmma_dequant_matmul`, which takes the
dequantized weights straight from registers as wgmma's A operand. There a thread dequantizes
the rows it multiplies, so a block's 256 rows of W^T are dequantized by one warpgroup per 64
tokens, and its single warp per scheduler issues the dequantization at one instruction every
few cycles while the tensor cores wait. Here the dequantization and the multiplication are
decoupled through shared memory: every warp of the block dequantizes a share of the k-tile's
units (the packed format's k16 x n64 pieces) and stores them as W^T into one of `BUFFERS`
K-major swizzled tiles; after one barrier each warpgroup's ``wgmma`` reads its 64-row slice of
that tile and the block's (BK, block_m) activation tile, both by descriptors, for up to 256
tokens. A weight is dequantized once per block_m tokens instead of once per 64, by four
warps per scheduler instead of one. Measured on the H200 it is nonetheless slower than the
register form at every benchmark shape (benchmarks/results/quantized_matmul_notes.md, "Prefill,
fifth part"): each warpgroup reads the whole activation tile from shared memory, whose
bandwidth the k-tile then outlasts. Per block, for each k-tile:

    take this k-tile's packed words (a warp's units) and its group's scale row (and zero
    points) from the register ring of `depth` k-tiles, and load those of the k-tile `depth`
    ahead
    view the words as the weight type, cast to the activation type (W^T's mma A-fragment
    order), subtract the zero points, multiply by the scales, store into the k-tile's buffer
    wait for the activation tile, sync (the stored weights visible to the tensor cores, and
    every thread past the dot that read the stage the copy after the dot fills)
    dot of the two shared tiles into the accumulator, then copy the activations of the
    k-tile `stages` - 2 ahead
    after the loop: C^T cast and stored

On sm_90a the dot runs as ``wgmma`` with both operands in shared memory and stays in flight
into the next k-tile (`backend.wgmma_pipeline.in_flight_dot`): the next k-tile's weights go
to another buffer, which is why there are three (the dot two k-tiles back may still run in
another warpgroup when a warp stores), and the activations come by TMA (`transposed_ring`).

Tile: ``block_n = 64 * units_n`` columns of N (64 * units_n / warpgroups rows of W^T per
warpgroup, a multiple of 64), ``BK = 16 * units_k``, `block_m` rows of M (a multiple of 8 up
to 256). The units_k x units_n units of a k-tile are shared by the warps as a grid of
``k_warps`` x (warps / k_warps) warps (`dequant_grid`). Accumulators per thread: ``block_n *
block_m / threads`` f32. `n` and `k` are compile-time constants and the program declares its
grid ``(n // block_n, ceil(m / block_m))``; `k` a multiple of BK and `group_size` of BK; rows
of A past m read zeros and rows of C past m are not written.
"""

from __future__ import annotations

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
    UNIT_LANES,
    UNIT_N,
    cast_codes,
    check_group_size,
    checked_arguments,
    program_name,
    unit_element_layout,
    unit_scale_layout,
    unit_word_layout,
)
from ir.program import Program
from layout_algebra.fragments import fragment
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import RegisterLayout, replicate, spatial
from layout_algebra.shared import SharedLayout, shared_row_major_swizzle

PROGRAM = "staged_dequant_matmul"
"""The program's name in its error messages."""
BUFFERS = 3
"""Shared weight tiles: the one being written, and the two the dots of the last two k-tiles
may still read while the dot stays in flight."""


@dataclass(frozen=True)
class StagedDequantConfig(PrefillTile):
    """The tile parameters of `staged_dequant_matmul`.

    `warpgroups` per block (all dequantize, then each multiplies its slice of W^T's rows);
    `units_n` units of 64 columns of N per block; `units_k` k16 steps per k-tile; `block_m`
    rows of A per block (the instruction's N side); `stages` shared stages of the activation
    ring (copied stages - 2 k-tiles ahead, after the dot: at least 3); `depth` k-tiles of
    packed weights in flight in registers; `k_warps` the warps along k of the grid that
    shares a k-tile's units (`dequant_grid`); `min_blocks_per_sm` the occupancy asked of the
    compiler (0: none).
    """

    warpgroups: int = 4
    units_n: int = 4
    units_k: int = 4
    block_m: int = 128
    stages: int = 4
    depth: int = 2
    k_warps: int = 4
    min_blocks_per_sm: int = 0

    @property
    def block_n(self) -> int:
        return UNIT_N * self.units_n

    def check(self, group_size: int) -> None:
        """Raise VerificationError naming the first field (or `group_size`) out of range."""
        fields = ("warpgroups", "units_n", "units_k", "block_m", "depth", "k_warps")
        check_prefill_fields(PROGRAM, self, fields, 3)
        if self.units_n % self.warpgroups:
            raise VerificationError(
                f"{PROGRAM}: units_n={self.units_n} with warpgroups={self.warpgroups}; "
                "expected a multiple of warpgroups (each warpgroup's rows a multiple of 64)"
            )
        dequant_grid(self)
        if self.block_k > PANEL_K and self.block_k % PANEL_K:
            raise VerificationError(
                f"{PROGRAM}: units_k={self.units_k}; expected at most 4 or a multiple of 4 "
                "(whole 64-wide panels of k)"
            )
        check_group_size(PROGRAM, group_size, self.block_k)


def dequant_grid(config: StagedDequantConfig) -> tuple[int, int, int, int]:
    """``(k_warps, n_warps, units_k per warp, units_n per warp)``: the block's warps as a
    k_warps x n_warps grid over a k-tile's units_k x units_n units, each warp a block of the
    units. Raises VerificationError when `k_warps` does not divide the warps and units_k, or
    the n_warps left do not divide units_n."""
    warps, k_warps = config.warps, config.k_warps
    n_warps = warps // k_warps if warps % k_warps == 0 else 0
    if not n_warps or config.units_k % k_warps or config.units_n % n_warps:
        raise VerificationError(
            f"{PROGRAM}: k_warps={k_warps} with {warps} warps, units_k={config.units_k} and "
            f"units_n={config.units_n}; expected k_warps to divide the warps and units_k, and "
            "the warps / k_warps left to divide units_n"
        )
    return k_warps, n_warps, config.units_k // k_warps, config.units_n // n_warps


def staged_layouts(
    nbits: int, config: StagedDequantConfig
) -> tuple[RegisterLayout, RegisterLayout, RegisterLayout, RegisterLayout]:
    """(word layout, code layout, decoded layout, scale-row layout) of a k-tile's units over
    the dequantization grid: the packed words as a (units_k, units_n 32 b) block of the packed
    tensor; the codes named as W^T (block_n, BK) in packed order; the same elements in mma A
    fragment order (what the cast produces); the (1, block_n) packed scale row, each warp
    reading its columns' scales (replicated over the grid's k warps)."""
    k_warps, n_warps, units_k, units_n = dequant_grid(config)
    grid = spatial(k_warps, n_warps).local(units_k, units_n)
    words = grid * unit_word_layout(nbits)
    codes = (grid * unit_element_layout(nbits)).permute(1, 0)
    # W^T in A fragments: built over (k, n), so that warp (i, j) of the grid keeps the units
    # it loaded, then named as (n, k).
    transposed_a = fragment("mma.m16n8k16.a").layout.permute(1, 0)
    by_k = spatial(k_warps, n_warps).local(units_k, 4 * units_n) * transposed_a
    scales = replicate(k_warps).spatial(1, n_warps).local(1, units_n) * unit_scale_layout()
    return words, codes, by_k.permute(1, 0), scales


def weight_buffers(block_n: int, block_k: int) -> SharedLayout:
    """`BUFFERS` (block_n, block_k) tiles of W^T, K-major: rows of N, each row's values of k
    contiguous in 128-byte rows XOR-swizzled by the row (``wgmma``'s K-major A layout, the
    128-byte mode at BK = 64)."""
    return shared_row_major_swizzle(BUFFERS, block_n, block_k, element_bits=16)


def staged_dequant_matmul(
    weight_dtype: DataType = dtypes.i4,
    group_size: int = 128,
    config: StagedDequantConfig | None = None,
    *,
    activation_dtype: DataType = dtypes.f16,
    zero_points: bool = False,
) -> Program:
    """The program ``qmm(m, n, k, a, packed, scales, [zeros,] c)`` for `config` (None: the
    default `StagedDequantConfig`), with the parameters of
    `ir.examples.wgmma_dequant_matmul.wgmma_dequant_matmul`. With `zero_points` the
    dequantized weight is ``(W - Z) * S``."""
    config, weight_dtype = checked_arguments(
        PROGRAM,
        config,
        StagedDequantConfig,
        lambda checked: checked.check(group_size),
        weight_dtype,
        activation_dtype,
        zero_points,
    )
    act, f32 = activation_dtype, dtypes.f32
    nbits, threads = weight_dtype.nbits, UNIT_LANES * config.warps
    block_m, block_n, block_k = config.block_m, config.block_n, config.block_k
    stages, depth = config.stages, config.depth
    word_layout, code_layout, decoded_layout, scale_layout = staged_layouts(nbits, config)
    scale_view_layout = reduce_layout(decoded_layout, [1], keepdims=True)
    weight_layout, activation_layout, c_layout = wgmma_dot_layouts(
        threads, block_n, block_m, block_k
    )
    row_words = UNIT_LANES * nbits
    name = program_name(PROGRAM, weight_dtype, act, zero_points)
    with ProgramBuilder(name, threads) as b:
        tensors = declare_prefill(b, config, act, nbits, group_size, zero_points)
        buffers = b.shared_tensor(act, weight_buffers(block_n, block_k))
        word_col0 = b.block_x * (config.units_n * row_words)
        tiles_per_group = group_size // block_k

        def fetch(tile):
            """The packed words of the k-tile of loop index `tile`, then its group's packed
            scale row (and zero-point row)."""
            k_tile = tensors.tile0 + tile
            words = b.load_global(
                tensors.packed_view, [k_tile * config.units_k, word_col0], word_layout
            )
            group = k_tile // tiles_per_group
            return [words, *tensors.rows(b, group, scale_layout)]

        # Activations stages - 2 k-tiles ahead: the copy follows the dot, into the stage the
        # dot of two k-tiles back read.
        ahead = stages - 2
        for d in range(ahead):
            tensors.copy_ahead(b, tensors.first, d)
        registers = RegisterRing(b, fetch, tensors.first, tensors.end, depth)
        acc = b.register_tensor(f32, c_layout, 0.0)
        with b.for_range(tensors.first, tensors.end) as tile:
            stage, buffer = tensors.stage(tile), tile % BUFFERS
            current = registers.advance(tile)
            weights = cast_codes(b, current[0], weight_dtype, act, code_layout, decoded_layout)
            scale, *zero = (b.view(row, act, scale_view_layout) for row in current[1:])
            if zero_points:
                weights = b.sub(weights, zero[0])
            b.store_shared(buffers, b.mul(weights, scale), [buffer, 0, 0])
            b.copy_bulk_wait(tensors.ring, [stage, 0, 0], shape=(block_k, block_m))
            # The weights stored are visible to every warpgroup's dot; every thread is past
            # the dot that read the stage the copy after this k-tile's dot fills.
            b.sync()
            activations = b.load_shared(tensors.ring, activation_layout, [stage, 0, 0])
            staged = b.load_shared(buffers, weight_layout, [buffer, 0, 0])
            b.assign(acc, b.dot(staged, activations, acc))
            tensors.copy_ahead(b, tile, ahead)
        tensors.store(b, acc, act)
    return b.program()

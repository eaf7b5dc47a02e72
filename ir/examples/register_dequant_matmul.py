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
        view the current words as `weight_dtype` in the B-fragment layout, cast to f16,
        multiply by the (1, BN) scale row of the k-tile's group (loaded as 16-byte vectors of
        packed scales, viewed in the weights' scale layout)
        wait for the activation tile, sync, load it in the A-fragment layout, dot, sync
    store C (split == 1), or the f32 partial sums of this block's k range (split > 1) that
    `split_k_sum` adds up in a second launch

Layouts (W warps, each owning `units_n` units of 64 columns; KS = `units_k` k16 steps per
k-tile): weights `spatial(1, W).local(KS, units_n) * (local(1, 8) * F_B)`, their words
`spatial(1, W).local(KS, units_n) * spatial(1, 32).local(1, b)` (`packed_weights.tile_layouts`),
activations `(spatial(1, 1) * replicate(W)).local(1, KS) * F_A` (every warp holds the whole
16-row tile), C `spatial(1, W).local(1, 8 * units_n) * F_C`. The block tile is 16 x BN with
BN = 64 * W * units_n and BK = 16 * KS.

`n` and `k` are compile-time constants (``backend.compile(program, constants={"n": ..., "k":
...})``; a kernel is compiled per weight shape, as for a layer), and the program declares its
grid, ``(n // BN, ceil(m / 16), split)`` (a launch may leave it out): with the block indices and
the trip count bounded, every weight and scale address is shown in bounds, so the loop carries
no bounds checks (the indices under the prefetch guards are written clamped to the range's last
tile, which they equal there, so that their bounds show it too). Requirements: `k` a multiple
of BK * split and `group_size` of BK (one scale row per k-tile), `n` a multiple of BN. Rows of A
past m read zeros and rows of C past m are not written.
"""

from __future__ import annotations

from dataclasses import dataclass

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.examples.packed_weights import (
    UNIT_K,
    UNIT_LANES,
    UNIT_N,
    check_weight_dtype,
    tile_layouts,
    unit_scale_layout,
)
from ir.program import Program
from layout_algebra.fragments import fragment
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import RegisterLayout, local, replicate, spatial
from layout_algebra.shared import shared_row_major_swizzle
from layout_algebra.symbolic import minimum

BLOCK_M = 16
"""Rows of A and C per block: one mma m16 tile."""


@dataclass(frozen=True)
class DequantConfig:
    """The tile parameters of `register_dequant_matmul`.

    `warps` per block; `units_n` units of 64 columns per warp; `units_k` k16 steps per k-tile;
    `depth` k-tiles of weights in flight in registers; `split` blocks along k (grid z); `unroll`
    copies of the loop body per generated iteration (2 makes the activation stage a constant).
    """

    warps: int = 4
    units_n: int = 1
    units_k: int = 4
    depth: int = 1
    split: int = 1
    unroll: int = 2

    @property
    def block_n(self) -> int:
        return UNIT_N * self.warps * self.units_n

    @property
    def block_k(self) -> int:
        return UNIT_K * self.units_k

    def grid(self, m: int, n: int) -> tuple[int, int, int]:
        """The launch grid for C of shape (m, n)."""
        return (n // self.block_n, -(-m // BLOCK_M), self.split)


def activation_layout(warps: int, units_k: int) -> RegisterLayout:
    """The (16, 16 * units_k) A tile in mma A fragments, replicated over the `warps` warps."""
    return (spatial(1, 1) * replicate(warps)).local(1, units_k) * fragment("mma.m16n8k16.a").layout


def accumulator_layout(warps: int, units_n: int) -> RegisterLayout:
    """The (16, 64 * warps * units_n) C tile in mma C fragments, warp w owning its columns."""
    return spatial(1, warps).local(1, 8 * units_n) * fragment("mma.m16n8k16.c").layout


def _check_config(group_size: int, config: DequantConfig) -> None:
    for name in ("warps", "units_n", "units_k", "depth", "split", "unroll"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise VerificationError(
                f"register_dequant_matmul: {name}={value!r}; expected an int >= 1"
            )
    if config.warps * UNIT_LANES > 1024:
        raise VerificationError(
            f"register_dequant_matmul: warps={config.warps}; a block has at most 32 warps"
        )
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise VerificationError(
            f"register_dequant_matmul: group_size={group_size!r}; expected a positive int"
        )
    if group_size % config.block_k:
        raise VerificationError(
            f"register_dequant_matmul: group_size={group_size} is not a multiple of the k-tile "
            f"{config.block_k} (16 * units_k); one scale row per k-tile is required"
        )


def register_dequant_matmul(
    weight_dtype: DataType = dtypes.i4,
    group_size: int = 128,
    config: DequantConfig | None = None,
) -> Program:
    """The program ``qmm(m, n, k, a, packed, scales, c)``; `c` is f16 (m, n) when
    ``config.split == 1``, else f32 (split, m, n) partial sums for `split_k_sum`."""
    config = config or DequantConfig()
    weight_dtype = check_weight_dtype(weight_dtype)
    _check_config(group_size, config)
    f16, f32, i32 = dtypes.f16, dtypes.f32, dtypes.i32
    nbits = weight_dtype.nbits
    warps, split, depth = config.warps, config.split, config.depth
    block_n, block_k = config.block_n, config.block_k
    weight_layout, word_layout = tile_layouts(nbits, warps, config.units_k, config.units_n)
    a_layout = activation_layout(warps, config.units_k)
    c_layout = accumulator_layout(warps, config.units_n)
    scale_layout = reduce_layout(weight_layout, [0], keepdims=True)
    packed_scale_layout = spatial(1, warps).local(1, config.units_n) * unit_scale_layout()
    row_words = UNIT_LANES * nbits
    name = f"register_dequant_matmul_{weight_dtype.name}"
    with ProgramBuilder(name, UNIT_LANES * warps) as b:
        m = b.int_param("m", lo=1)
        n = b.int_param("n", lo=block_n, multiple_of=block_n, constant=True)
        k = b.int_param("k", lo=block_k * split, multiple_of=block_k * split, constant=True)
        a = b.array_param("a", f16)
        packed = b.array_param("packed", i32)
        scales = b.array_param("scales", f16)
        c = b.array_param("c", f32 if split > 1 else f16)
        b.grid(n // block_n, (m + BLOCK_M - 1) // BLOCK_M, split)
        words_per_row = (n // UNIT_N) * row_words
        a_view = b.global_view(a, f16, GlobalLayout((m, k), (k, 1)))
        packed_view = b.global_view(
            packed, i32, GlobalLayout((k // UNIT_K, words_per_row), (words_per_row, 1))
        )
        groups = (k + group_size - 1) // group_size
        scale_view = b.global_view(scales, f16, GlobalLayout((groups, n), (n, 1)))
        a_shared = b.shared_tensor(
            f16, shared_row_major_swizzle(2, BLOCK_M, block_k, element_bits=16)
        )
        tiles_per_split = (k // block_k) // split
        tiles_per_group = group_size // block_k
        first = b.block_z * tiles_per_split
        end = first + tiles_per_split
        row0, col0 = b.block_y * BLOCK_M, b.block_x * block_n
        word_col0 = b.block_x * (warps * config.units_n * row_words)

        def weight_words(tile):
            return b.load_global(packed_view, [tile * config.units_k, word_col0], word_layout)

        acc = b.register_tensor(f32, c_layout, 0.0)
        ring = [weight_words(first + d) for d in range(depth)]
        current = b.register_tensor(i32, word_layout, 0)
        b.copy_async(a_shared, a_view, [row0, first * block_k], [0, 0, 0])
        b.copy_async_commit()
        with b.for_range(first, end, unroll=config.unroll) as tile:
            stage = (tile - first) % 2
            b.assign(current, ring[0])
            for d in range(depth - 1):
                b.assign(ring[d], ring[d + 1])
            # Under each guard the index equals its clamp to the last tile of the range; written
            # clamped, its bound shows the access in bounds, so it needs no bounds check.
            with b.if_(tile + depth < end):
                b.assign(ring[depth - 1], weight_words(minimum(tile + depth, end - 1)))
            with b.if_(tile + 1 < end):
                ahead = minimum(tile + 1, end - 1)
                b.copy_async(a_shared, a_view, [row0, ahead * block_k], [1 - stage, 0, 0])
            b.copy_async_commit()
            weights = b.cast(b.view(current, weight_dtype, weight_layout), f16)
            group = minimum(tile, end - 1) // tiles_per_group  # tile <= end - 1: its bound
            scale = b.view(
                b.load_global(scale_view, [group, col0], packed_scale_layout),
                f16,
                scale_layout,
            )
            weights = b.mul(weights, scale)
            b.copy_async_wait(1)
            b.sync()
            activations = b.load_shared(a_shared, a_layout, [stage, 0, 0])
            b.assign(acc, b.dot(activations, weights, acc))
            b.sync()
        if split > 1:
            c_view = b.global_view(c, f32, GlobalLayout((split, m, n), (m * n, n, 1)))
            b.store_global(c_view, acc, [b.block_z, row0, col0])
        else:
            c_view = b.global_view(c, f16, GlobalLayout((m, n), (n, 1)))
            b.store_global(c_view, b.cast(acc, f16), [row0, col0])
    return b.program()


SUM_COLUMNS_PER_THREAD = 4
"""Consecutive outputs each thread of `split_k_sum` adds up (one 16-byte f32 vector)."""


def split_k_sum(split: int, threads: int = 128) -> Program:
    """``split_k_sum(mn, partial, c)``: c[j] = f16(partial[0, j] + ... + partial[split-1, j])
    (f32 sums in order), the second launch of a split-k `register_dequant_matmul` with
    ``mn = m * n``. It declares its grid, ``ceil(mn / (threads * 4))``."""
    if isinstance(split, bool) or not isinstance(split, int) or split < 2:
        raise VerificationError(f"split_k_sum: split={split!r}; expected an int >= 2")
    width = threads * SUM_COLUMNS_PER_THREAD
    layout = local(split, 1).spatial(1, threads).local(1, SUM_COLUMNS_PER_THREAD)
    with ProgramBuilder(f"split_k_sum_{split}", threads) as b:
        count = b.int_param("mn", lo=1)
        partial = b.array_param("partial", dtypes.f32)
        c = b.array_param("c", dtypes.f16)
        b.grid((count + width - 1) // width)
        parts = b.global_view(partial, dtypes.f32, GlobalLayout((split, count), (count, 1)))
        out = b.global_view(c, dtypes.f16, GlobalLayout((1, count), (count, 1)))
        tile = b.load_global(parts, [0, b.block_x * width], layout)
        total = b.reduce(tile, 0, "sum", keepdim=True)
        b.store_global(out, b.cast(total, dtypes.f16), [0, b.block_x * width])
    return b.program()

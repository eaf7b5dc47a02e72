"""`ir.examples.register_dequant_matmul` and `split_k_sum` in the interpreter, and their lowering.

The kernel (with `split_k_sum` for split > 1) against two NumPy references: bit for bit against
the sequential formula the interpreter's `dot` defines (each split's k range summed in order in
f32, the partial sums added in order, then f16), and within the rounding of f16 against the f64
product of the dequantized weights. Cases cover weight types of 1 to 8 bits, every tile
parameter, m below, at and above one 16-row tile, and partial scale groups; a hypothesis
property draws further valid combinations. Then the errors, and the CUDA lowering at a decoding
layer's shape: what the k loop does and does not contain, and NVRTC compiling it (no GPU).
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.fast_conversions import fma_free_exponent
from backend.lower import lower
from backend.nvrtc import compile_cuda, cubin_kernels
from ir import dtypes, run_reference
from ir.dtypes import DataType
from ir.errors import InterpreterError, VerificationError
from ir.examples.packed_weights import (
    pack_scales,
    pack_weights,
    stored_offset,
    tile_layouts,
    tile_value_layout,
)
from ir.examples.register_dequant_matmul import (
    DequantConfig,
    accumulator_layout,
    activation_layout,
    k_runs_layout,
    register_dequant_matmul,
    split_k_sum,
    transposed_accumulator_layout,
    transposed_activation_layout,
    transposed_weight_layout,
    weight_exponent,
)
from ir.instructions import Binary, Cast, ForRange, If, LaunchDependents, LoadGlobal, PrefetchGlobal
from ir.program import Program, walk
from ir.testing.quantized_problems import (
    F16_WEIGHT_DTYPES,
    SENTINEL,
    TAIL,
    check_stream_k_program,
    combined_sum,
    late_scaled_partials,
    magic_bias_tile,
    make_problem,
    ordered_sum,
    sequential_partials,
    stream_k_parts,
    with_tail,
    zero_point_problem,
)
from layout_algebra.fragments import fragment
from layout_algebra.register import replicate, spatial


def run_split_k_sum(partials: np.ndarray, threads: int = 128) -> np.ndarray:
    """`split_k_sum` on flat (split, mn) f32 partial sums; returns the f16 (mn,) sums."""
    split, mn = partials.shape
    c = with_tail(mn, np.float16)
    grid = -(-mn // (threads * 4))
    run_reference(split_k_sum(split, threads), mn, partials, c, grid=grid)
    np.testing.assert_array_equal(c[mn:], SENTINEL)
    return c[:mn]


def run_dequant(
    dtype: DataType, group_size: int, config: DequantConfig, m: int, n: int, k: int, seed: int
) -> None:
    """Run the kernel (and `split_k_sum`, or the fused sum) in the interpreter and check it
    against both references; the outputs' tails stay untouched and the counters end at 0.
    A stream-K configuration is checked by `run_stream_k`."""
    if config.stream_k:
        run_stream_k(dtype, group_size, config, m, n, k, seed)
        return
    problem = make_problem(dtype, group_size, m, n, k, seed)
    packed, _ = pack_weights(problem.codes, dtype)
    program = register_dequant_matmul(dtype, group_size, config)
    split = config.split
    fused = split > 1 and config.fused_sum
    names = ["m", "n", "k", "a", "packed", "scales"]
    names += ["partial", "counters", "c"] if fused else ["c"]
    assert [p.name for p in program.params] == names
    scales = pack_scales(problem.scales)
    biases = magic_biases(dtype, config, k, n) if config.magic_bias else None
    if config.late_scale:
        values = dtype.decode(problem.codes).astype(np.float16)
        partials = late_scaled_partials(
            problem.a, values, problem.scales, group_size, split, biases
        )
    else:
        partials = sequential_partials(problem.a, problem.dequantized, split)
    if fused:
        slots = 1 if config.combine_parts else split
        partial = with_tail(slots * m * n, np.float32)
        if config.combine_parts:  # one sum, zero before the launch
            partial[: m * n] = 0
        counters = np.zeros(config.tiles(m, n) + TAIL, dtype=np.int32)
        c = with_tail(m * n, np.float16)
        arguments = [problem.a, packed, scales, partial, counters, c]
        run_reference(program, m, n, k, *arguments, grid=config.grid(m, n))
        np.testing.assert_array_equal(partial[slots * m * n :], SENTINEL)
        np.testing.assert_array_equal(counters, 0)
        np.testing.assert_array_equal(c[m * n :], SENTINEL)
        out = c[: m * n].reshape(m, n)
        if config.combine_parts:  # added in block order (z last), then left zero
            np.testing.assert_array_equal(partial[: m * n].view(np.uint32), 0)
            np.testing.assert_array_equal(
                out.view(np.uint16), combined_sum(partials).view(np.uint16)
            )
        else:
            got = partial[: split * m * n].reshape(split, m, n)
            np.testing.assert_array_equal(got.view(np.uint32), np.stack(partials).view(np.uint32))
            np.testing.assert_array_equal(
                out.view(np.uint16), ordered_sum(partials).view(np.uint16)
            )
    else:
        c = with_tail(split * m * n, np.float32 if split > 1 else np.float16)
        run_reference(program, m, n, k, problem.a, packed, scales, c, grid=config.grid(m, n))
        np.testing.assert_array_equal(c[split * m * n :], SENTINEL)
        if split > 1:
            got = c[: split * m * n].reshape(split, m, n)
            np.testing.assert_array_equal(got.view(np.uint32), np.stack(partials).view(np.uint32))
            out = run_split_k_sum(got.reshape(split, m * n)).reshape(m, n)
        else:
            out = c[: m * n].reshape(m, n)
        np.testing.assert_array_equal(out.view(np.uint16), ordered_sum(partials).view(np.uint16))
    # The formula is the product: f16 rounding of each weight and of the output, f32 sums.
    weights = dtype.decode(problem.codes).astype(np.float64)
    scales = np.repeat(problem.scales.astype(np.float64), group_size, axis=0)[:k]
    reference = problem.a.astype(np.float64) @ (weights * scales)
    magnitude = np.abs(problem.a.astype(np.float64)) @ np.abs(weights * scales)
    if biases is not None:
        # The f32 sums carry the biases: each of a group's additions rounds at their size.
        carried = np.abs(problem.a.astype(np.float64)) @ (np.abs(weights + biases) * scales)
        magnitude = magnitude + 2.0**-13 * group_size * carried
    error = np.abs(out.astype(np.float64) - reference)
    assert np.all(error <= 2.0**-10 * magnitude + 2.0**-10 * np.abs(reference) + 2.0**-20)


def magic_biases(dtype: DataType, config: DequantConfig, k: int, n: int) -> np.ndarray:
    """The (k, n) biases a `magic_bias` kernel's weights keep: its tile's, repeated."""
    code_layout, _ = tile_layouts(dtype.nbits, config.warps, config.units_k, config.units_n)
    tile = magic_bias_tile(dtype, dtypes.f16, code_layout)
    return np.tile(tile, (k // tile.shape[0], n // tile.shape[1]))


# ------------------------------------------------------------------------------ stream-K


def run_stream_k(
    dtype: DataType, group_size: int, config: DequantConfig, m: int, n: int, k: int, seed: int
) -> None:
    """Run the stream-K kernel in the interpreter: each tile is the f16 of its segments' f32
    partial sums (each a sum in k order from zero, scaled per group with `late_scale`) added
    in block order, bit for bit; the workspace's tail and the counters end untouched and 0."""
    program = register_dequant_matmul(dtype, group_size, config)
    slots = config.stream_k_slots(m, n, k)
    check_stream_k_program(program, config, dtype, group_size, (m, n, k), seed, slots)


@pytest.mark.parametrize(
    ("stream_k", "m", "n", "k", "grid", "slots"),
    [
        (528, 1, 57344, 8192, (528, 1, 1), 4),  # 224 tiles of 128 k-tiles: 54 or 55 each
        (1000, 1, 256, 256, (4, 1, 1), 5),  # W = 1 tile * 4 k-tiles: one each
        (3, 17, 256, 1024, (3, 1, 1), 3),
    ],
)
def test_stream_k_grid_and_slots_table(
    stream_k: int, m: int, n: int, k: int, grid: tuple[int, int, int], slots: int
) -> None:
    config = DequantConfig(stream_k=stream_k)
    assert config.grid(m, n, k) == grid
    assert config.stream_k_slots(m, n, k) == slots


@given(
    stream_k=st.integers(1, 64),
    row_tiles=st.integers(1, 3),
    column_tiles=st.integers(1, 4),
    k_tiles=st.integers(1, 9),
)
@settings(max_examples=200)
def test_stream_k_parts_cover_each_tile_in_order_within_the_slots(
    stream_k: int, row_tiles: int, column_tiles: int, k_tiles: int
) -> None:
    config = DequantConfig(warps=1, stream_k=stream_k)
    m, n, k = 16 * row_tiles, 64 * column_tiles, config.block_k * k_tiles
    segments = stream_k_parts(config, m, n, k)
    for ranges in segments:
        assert [r for span in ranges for r in span] == list(range(k_tiles))
        assert 1 <= len(ranges) <= config.stream_k_slots(m, n, k)


def test_stream_k_requires_one_split_and_the_fused_sum() -> None:
    for config in (DequantConfig(stream_k=4, split=2), DequantConfig(stream_k=4, fused_sum=False)):
        with pytest.raises(VerificationError, match="stream-K requires split 1 and the fused sum"):
            register_dequant_matmul(dtypes.i4, 128, config)
    with pytest.raises(VerificationError, match=r"stream_k=-1; expected an int >= 0"):
        register_dequant_matmul(dtypes.i4, 128, DequantConfig(stream_k=-1))
    with pytest.raises(VerificationError, match="a stream_k grid needs k"):
        DequantConfig(stream_k=4).grid(1, 256)


# ------------------------------------------------------------------------------ interpreter

CASES = [
    # (weight type, group size, config, m, column blocks, k-tiles per split)
    (dtypes.i4, 128, DequantConfig(), 1, 2, 2),  # the default: two k-tiles per scale group
    (dtypes.u4, 64, DequantConfig(split=2, depth=2), 5, 1, 3),  # odd trip count, unroll 2
    (dtypes.u4, 64, DequantConfig(split=2, depth=2, fused_sum=False), 5, 1, 3),  # two launches
    (dtypes.i8, 64, DequantConfig(warps=1, units_k=1, split=4, depth=2), 16, 2, 3),
    (dtypes.u3, 64, DequantConfig(warps=2, units_n=2, units_k=2, unroll=1), 17, 1, 3),
    (dtypes.i2, 128, DequantConfig(warps=1, units_k=8, split=2, unroll=1), 17, 2, 2),
    (dtypes.f4e2m1, 128, DequantConfig(warps=2, units_n=2), 5, 1, 3),  # a partial last group
    (dtypes.f6e3m2, 64, DequantConfig(warps=1, depth=2, split=4, unroll=1), 16, 2, 2),
    (dtypes.u1, 128, DequantConfig(units_k=8, depth=2), 1, 1, 3),
    (dtypes.f8e4m3, 128, DequantConfig(warps=2, units_k=2, split=2), 17, 2, 3),
    (dtypes.i4, 128, DequantConfig(units_n=2, depth=3), 16, 1, 2),  # depth past the k range
    (dtypes.u4, 64, DequantConfig(warps=1, split=2, depth=3), 1, 1, 1),  # one k-tile per split
    (dtypes.i4, 64, DequantConfig(units_n=2, units_k=2, depth=2, split=4), 17, 1, 3),
    (dtypes.i3, 64, DequantConfig(warps=1, units_k=2, split=4, fused_sum=False), 17, 2, 2),
    (dtypes.i1, 64, DequantConfig(warps=1, units_k=2, unroll=1), 5, 1, 4),
    (dtypes.f8e5m2, 128, DequantConfig(warps=2, units_k=4), 1, 1, 2),
    # The scales applied to each k-tile's product (the k-tile is the group).
    (dtypes.i2, 128, DequantConfig(warps=1, units_k=8, split=2, late_scale=True), 17, 1, 2),
    (dtypes.u4, 64, DequantConfig(units_k=4, depth=2, late_scale=True), 5, 1, 3),
    (dtypes.f4e2m1, 32, DequantConfig(warps=2, units_n=2, units_k=2, late_scale=True), 16, 1, 3),
    (
        dtypes.i8,
        128,
        DequantConfig(warps=1, units_k=8, units_m=2, late_scale=True, weights_as_a=True),
        16,
        1,
        2,
    ),
    # A float's bias moved from its cast to the scales (weight_exponent).
    (dtypes.f6e3m2, 64, DequantConfig(warps=1, units_k=4, late_scale=True), 5, 2, 2),
    # C^T = W^T A^T, 8 rows of A per block: m of one, several and a partial row block.
    (dtypes.i4, 128, DequantConfig(weights_as_a=True), 1, 2, 2),
    (
        dtypes.i2,
        128,
        DequantConfig(units_k=8, split=2, late_scale=True, weights_as_a=True),
        5,
        1,
        2,
    ),
    (dtypes.u4, 64, DequantConfig(split=2, depth=2, fused_sum=False, weights_as_a=True), 8, 1, 3),
    (dtypes.u3, 64, DequantConfig(warps=2, units_n=2, units_k=2, weights_as_a=True), 17, 1, 3),
    (dtypes.f6e3m2, 64, DequantConfig(warps=1, depth=2, split=4, weights_as_a=True), 11, 2, 2),
    # Several row blocks per block: each dequantized weight fragment feeds units_m mma.
    (dtypes.i4, 128, DequantConfig(units_m=2), 40, 1, 2),
    (dtypes.i4, 64, DequantConfig(units_m=4, units_k=2, split=2, depth=2), 70, 1, 2),
    (dtypes.i2, 128, DequantConfig(units_m=2, units_k=8, split=2, late_scale=True), 33, 1, 1),
    (
        dtypes.u4,
        64,
        DequantConfig(units_m=2, split=2, fused_sum=False, weights_as_a=True),
        20,
        1,
        2,
    ),
    (
        dtypes.u3,
        64,
        DequantConfig(warps=2, units_m=3, units_k=2, weights_as_a=True),
        17,
        1,
        2,
    ),
    # Stream-K: persistent blocks over all tiles' k-tiles (split 1; checked by run_stream_k).
    (dtypes.i4, 64, DequantConfig(warps=1, stream_k=3), 1, 2, 4),  # 8 iterations on 3 blocks
    (dtypes.i4, 64, DequantConfig(warps=1, stream_k=5, depth=2), 17, 2, 3),  # two row tiles
    (dtypes.u3, 64, DequantConfig(warps=1, units_k=2, stream_k=7, unroll=1), 5, 1, 5),
    (dtypes.i2, 128, DequantConfig(warps=1, units_k=8, late_scale=True, stream_k=3), 3, 2, 2),
    (dtypes.i4, 64, DequantConfig(weights_as_a=True, warps=1, stream_k=4), 9, 1, 3),
    (dtypes.f4e2m1, 64, DequantConfig(warps=1, stream_k=100), 1, 2, 3),  # G capped at W = 6
    (dtypes.u4, 64, DequantConfig(warps=1, stream_k=2), 1, 2, 4),  # every tile one block's
    (dtypes.i8, 64, DequantConfig(warps=1, units_k=1, stream_k=5, units_m=2), 20, 1, 5),
    # A shared ring of S stages for the weights and the activations, S - 1 k-tiles ahead:
    # fewer k-tiles than stages, an odd trip count, stages not dividing the unroll.
    (dtypes.i4, 128, DequantConfig(stages=3), 1, 2, 4),
    (dtypes.i2, 128, DequantConfig(units_k=8, stages=4, late_scale=True, split=2), 5, 1, 2),
    (dtypes.u3, 64, DequantConfig(warps=2, units_k=2, stages=3, unroll=1), 17, 1, 5),
    (dtypes.i8, 64, DequantConfig(warps=1, units_k=2, stages=2, split=2), 16, 2, 3),
    (dtypes.f4e2m1, 64, DequantConfig(weights_as_a=True, stages=4, units_m=2), 9, 1, 6),
    (dtypes.i4, 64, DequantConfig(warps=1, stages=3, stream_k=5), 17, 2, 3),
    (dtypes.u1, 128, DequantConfig(units_k=8, stages=5), 1, 1, 1),
    # The search space's ringed stream-K form at 16 rows: two 8-row blocks, two stages, the
    # late scale; 6 k-tiles on 3 blocks, the middle block's crossing from one tile to the next.
    (
        dtypes.i4,
        128,
        DequantConfig(
            warps=1,
            units_k=8,
            late_scale=True,
            weights_as_a=True,
            units_m=2,
            stages=2,
            unroll=2,
            stream_k=3,
        ),
        16,
        2,
        3,
    ),
    # The fused sum's parts loaded in batches: 3 + 3 and one alone, 2 + 2 + 2 + 1, stream-K's
    # tiles of 2 to 3 parts (a batch or none, and the rest alone), two 8-row blocks with a
    # shared ring (the search space's M = 16 form): 2 and one alone.
    (dtypes.i4, 64, DequantConfig(warps=1, split=8, parts_batch=3), 5, 1, 1),
    (
        dtypes.i2,
        128,
        DequantConfig(units_k=8, split=8, late_scale=True, weights_as_a=True, parts_batch=2),
        9,
        1,
        1,
    ),
    (dtypes.i4, 64, DequantConfig(warps=1, stream_k=5, parts_batch=2), 17, 2, 3),
    (
        dtypes.i4,
        64,
        DequantConfig(weights_as_a=True, units_m=2, stages=3, split=4, parts_batch=2),
        13,
        1,
        2,
    ),
    # The ring's activations bulk-copied and released (no block barrier in the k loop): two
    # panels a k-tile, a k-tile of one 64-byte panel, laps of the ring, split and stream-K.
    (dtypes.i4, 128, DequantConfig(units_k=8, stages=3, late_scale=True, release=True), 5, 1, 7),
    (dtypes.i2, 32, DequantConfig(warps=2, units_k=2, stages=2, release=True, split=2), 17, 1, 3),
    (
        dtypes.f4e2m1,
        64,
        DequantConfig(weights_as_a=True, units_m=2, stages=4, release=True, unroll=1),
        9,
        1,
        6,
    ),
    (dtypes.i4, 64, DequantConfig(warps=1, stages=3, release=True, stream_k=5), 17, 2, 3),
    # ... and the weights' words bulk-copied too (boxes of 256, 128 and 32 words).
    (dtypes.i4, 128, DequantConfig(units_k=8, stages=4, release=True, bulk_weights=True), 9, 1, 6),
    (
        dtypes.i3,
        128,
        DequantConfig(units_k=8, stages=3, late_scale=True, release=True, bulk_weights=True),
        1,
        2,
        4,
    ),
    (
        dtypes.u1,
        64,
        DequantConfig(warps=1, units_k=4, stages=2, release=True, bulk_weights=True, split=2),
        16,
        1,
        3,
    ),
    # The magic numbers' biases kept by the cast, taken out by a dot from their negation.
    (dtypes.i4, 128, DequantConfig(units_k=8, late_scale=True, magic_bias=True), 5, 1, 2),
    (
        dtypes.i2,
        128,
        DequantConfig(
            warps=1, units_k=8, late_scale=True, magic_bias=True, weights_as_a=True, units_m=2
        ),
        9,
        1,
        2,
    ),
    (dtypes.u8, 64, DequantConfig(warps=2, units_k=4, late_scale=True, magic_bias=True), 3, 1, 2),
    (dtypes.u3, 32, DequantConfig(warps=1, units_k=2, late_scale=True, magic_bias=True), 17, 1, 3),
    # Each step's words refilled in place with the next k-tile's: plain and late-scaled, the
    # weights as A with two row blocks, a split (the last k-tile of a part refills nothing),
    # unrolled and not, stream-K (a ring per segment).
    (dtypes.i4, 128, DequantConfig(refill_in_place=True), 1, 2, 2),
    (dtypes.u4, 64, DequantConfig(units_k=4, late_scale=True, refill_in_place=True), 5, 1, 3),
    (
        dtypes.i2,
        128,
        DequantConfig(
            warps=2, units_k=8, late_scale=True, weights_as_a=True, units_m=2, refill_in_place=True
        ),
        9,
        1,
        2,
    ),
    (dtypes.i8, 64, DequantConfig(warps=1, units_k=2, split=2, refill_in_place=True), 16, 2, 3),
    (dtypes.u3, 64, DequantConfig(warps=2, units_k=2, unroll=1, refill_in_place=True), 17, 1, 3),
    (dtypes.i4, 64, DequantConfig(warps=1, units_k=4, stream_k=3, refill_in_place=True), 5, 2, 3),
    # Refilled in place with the biases kept: one dot of a step's negated biases a step, in
    # the 16-row tiling, and the weights as A with two row blocks and a split.
    (
        dtypes.i4,
        128,
        DequantConfig(warps=2, units_k=8, late_scale=True, magic_bias=True, refill_in_place=True),
        16,
        1,
        2,
    ),
    (
        dtypes.u2,
        64,
        DequantConfig(
            warps=1,
            units_k=4,
            split=2,
            late_scale=True,
            magic_bias=True,
            weights_as_a=True,
            units_m=2,
            refill_in_place=True,
        ),
        11,
        2,
        2,
    ),
    # The weights prefetched into L2 a distance ahead: past the register ring (a split whose
    # parts are shorter than the distance), past the shared ring, refilled in place, stream-K.
    (dtypes.i4, 128, DequantConfig(depth=2, prefetch_distance=4), 1, 1, 6),
    (dtypes.i2, 64, DequantConfig(warps=2, split=2, prefetch_distance=3), 3, 2, 2),
    (dtypes.u3, 64, DequantConfig(warps=1, stages=3, prefetch_distance=5), 17, 1, 4),
    (dtypes.i8, 64, DequantConfig(warps=1, refill_in_place=True, prefetch_distance=2), 2, 1, 3),
    (dtypes.i4, 64, DequantConfig(warps=1, stream_k=3, prefetch_distance=2), 5, 2, 3),
    # The parts added into one sum by combining stores: a split of the register ring, the
    # weights as A with two row blocks and the biases kept, a shared ring, stream-K.
    (dtypes.i4, 64, DequantConfig(warps=1, split=4, combine_parts=True), 3, 2, 2),
    (
        dtypes.u2,
        64,
        DequantConfig(
            warps=1,
            units_k=4,
            split=2,
            late_scale=True,
            magic_bias=True,
            weights_as_a=True,
            units_m=2,
            combine_parts=True,
        ),
        11,
        2,
        2,
    ),
    (dtypes.u3, 64, DequantConfig(warps=1, stages=3, split=2, combine_parts=True), 17, 1, 3),
    (dtypes.i8, 64, DequantConfig(warps=1, stream_k=3, combine_parts=True), 5, 2, 3),
    # The group rows through a ring of their own: groups of four k-tiles with the weights'
    # scales, the late scale with the weights as A (deeper than the range of a split's part),
    # the biases kept, a shared ring, refilled in place, stream-K.
    (dtypes.i4, 128, DequantConfig(warps=1, units_k=2, rows_ahead=1), 3, 1, 5),
    (
        dtypes.i2,
        64,
        DequantConfig(
            warps=2, units_k=4, split=2, late_scale=True, weights_as_a=True, rows_ahead=3
        ),
        9,
        1,
        2,
    ),
    (
        dtypes.u2,
        64,
        DequantConfig(
            warps=1, units_k=4, late_scale=True, magic_bias=True, weights_as_a=True, rows_ahead=2
        ),
        1,
        2,
        4,
    ),
    (dtypes.u3, 64, DequantConfig(warps=1, stages=3, rows_ahead=1), 17, 1, 4),
    (dtypes.i8, 64, DequantConfig(warps=1, refill_in_place=True, rows_ahead=1), 2, 1, 3),
    (dtypes.f4e2m1, 64, DequantConfig(warps=1, stream_k=3, rows_ahead=2), 5, 2, 3),
    # The warpgroups' dot: the late scale at 16 rows with the weights bulk-copied, the plain
    # dot of a split with the barrier ring, stream-K over two warpgroups.
    (
        dtypes.i4,
        128,
        DequantConfig(
            units_k=8,
            late_scale=True,
            weights_as_a=True,
            units_m=2,
            stages=3,
            release=True,
            bulk_weights=True,
            warpgroup_dot=True,
        ),
        13,
        1,
        3,
    ),
    (
        dtypes.u3,
        64,
        DequantConfig(units_k=2, weights_as_a=True, split=2, stages=2, warpgroup_dot=True),
        5,
        2,
        2,
    ),
    (
        dtypes.i2,
        128,
        DequantConfig(
            warps=8,
            units_k=8,
            late_scale=True,
            weights_as_a=True,
            stages=2,
            stream_k=3,
            release=True,
            warpgroup_dot=True,
        ),
        3,
        1,
        4,
    ),
]


@pytest.mark.parametrize(
    ("dtype", "group_size", "config", "m", "column_blocks", "tiles"),
    CASES,
    ids=[f"{c[0]}-g{c[1]}-m{c[3]}-{i}" for i, c in enumerate(CASES)],
)
def test_register_dequant_matmul_equals_numpy(
    dtype: DataType,
    group_size: int,
    config: DequantConfig,
    m: int,
    column_blocks: int,
    tiles: int,
) -> None:
    n = config.block_n * column_blocks
    k = config.block_k * config.split * tiles
    run_dequant(dtype, group_size, config, m, n, k, seed=len(CASES) + m + n + k)


ZERO_POINT_CASES = [
    # (weight type, activation type, zero points, config, m)
    (dtypes.u4, dtypes.f16, True, DequantConfig(warps=1, split=2), 3),
    (dtypes.u4, dtypes.bf16, True, DequantConfig(warps=1), 17),
    (dtypes.u2, dtypes.bf16, True, DequantConfig(warps=1, units_k=4, unroll=1), 1),
    (dtypes.i8, dtypes.bf16, False, DequantConfig(warps=1, units_k=2, split=2), 5),
    (dtypes.f4e2m1, dtypes.bf16, False, DequantConfig(warps=2, units_k=2), 16),
    (dtypes.u3, dtypes.f16, True, DequantConfig(warps=1, units_k=2, depth=2), 2),
    (dtypes.u4, dtypes.bf16, True, DequantConfig(warps=1, units_k=4, late_scale=True), 5),
    (dtypes.i2, dtypes.f16, False, DequantConfig(warps=2, units_k=4, late_scale=True), 3),
    (dtypes.u4, dtypes.bf16, True, DequantConfig(warps=1, units_k=4, weights_as_a=True), 7),
    (dtypes.u2, dtypes.f16, True, DequantConfig(units_k=4, late_scale=True, weights_as_a=True), 2),
    (dtypes.u4, dtypes.bf16, True, DequantConfig(warps=1, units_k=2, stages=3), 4),
    (dtypes.u4, dtypes.bf16, True, DequantConfig(warps=1, units_k=4, refill_in_place=True), 6),
    # The zero points' rows through the rows' ring, with the weights' scales and the late one.
    (dtypes.u4, dtypes.f16, True, DequantConfig(warps=1, units_k=2, rows_ahead=2), 3),
    (
        dtypes.u3,
        dtypes.bf16,
        True,
        DequantConfig(warps=1, units_k=4, late_scale=True, weights_as_a=True, rows_ahead=1),
        9,
    ),
]


@pytest.mark.parametrize(
    ("weight", "activation", "zero_points", "config", "m"),
    ZERO_POINT_CASES,
    ids=[f"{c[0]}-{c[1]}{'-zp' if c[2] else ''}" for c in ZERO_POINT_CASES],
)
def test_zero_points_and_bf16_activations_equal_numpy(
    weight: DataType, activation: DataType, zero_points: bool, config: DequantConfig, m: int
) -> None:
    """C = A @ act((W - Z) * S) with the f32 sums in k order, every code and output exact."""
    rng = np.random.default_rng(weight.nbits * 7 + m)
    group_size, n = 64, config.block_n
    k = config.block_k * config.split * max(2, group_size // config.block_k)
    problem = zero_point_problem(weight, activation, zero_points, (m, n, k), group_size, rng)
    program = register_dequant_matmul(
        weight, group_size, config, activation_dtype=activation, zero_points=zero_points
    )
    split = config.split
    workspace = ["partial", "counters"] if split > 1 else []
    names = ["m", "n", "k", "a", "packed", "scales"] + (["zeros"] if zero_points else [])
    assert [p.name for p in program.params] == names + workspace + ["c"]
    c = np.zeros(m * n, dtype=np.uint16)
    arguments = [m, n, k, *problem.arguments()]
    partial = np.zeros(split * m * n, dtype=np.float32)
    counters = np.zeros(config.tiles(m, n), dtype=np.int32)
    arguments += [partial, counters] if split > 1 else []
    run_reference(program, *arguments, c, grid=config.grid(m, n))
    if config.late_scale:
        group_scales = activation.decode(problem.scales).astype(np.float32)
        partials = late_scaled_partials(problem.a, problem.shifted, group_scales, group_size, split)
    else:
        partials = sequential_partials(problem.a, problem.dequantized, split)
    total = partials[0]
    for part in partials[1:]:
        total = total + part
    if split > 1:
        np.testing.assert_array_equal(partial.reshape(split, m, n), np.stack(partials))
        np.testing.assert_array_equal(counters, 0)
    np.testing.assert_array_equal(c.reshape(m, n), activation.encode(total))


def test_activation_dtype_and_zero_points_are_checked() -> None:
    with pytest.raises(VerificationError, match="activation_dtype=f32; expected f16 or bf16"):
        register_dequant_matmul(dtypes.i4, activation_dtype=dtypes.f32)
    with pytest.raises(VerificationError, match="zero_points=1; expected True or False"):
        register_dequant_matmul(dtypes.u4, zero_points=1)
    with pytest.raises(VerificationError, match="out_dtype=f32; expected f16 or bf16"):
        split_k_sum(2, out_dtype=dtypes.f32)


@st.composite
def dequant_problems(draw: st.DrawFn) -> tuple[DataType, int, DequantConfig, int, int, int]:
    """A weight type of exact f16 values, a valid config (the biases kept, a shared ring, the
    words refilled in place or stream-K, where they apply) and group size, and a small shape."""
    config = DequantConfig(
        warps=draw(st.sampled_from([1, 2, 4])),
        units_n=draw(st.sampled_from([1, 2])),
        units_k=draw(st.sampled_from([1, 2, 4, 8])),
        depth=draw(st.integers(1, 3)),
        split=draw(st.sampled_from([1, 2, 4])),
        unroll=draw(st.sampled_from([1, 2])),
        fused_sum=draw(st.booleans()),
        late_scale=draw(st.booleans()),
        weights_as_a=draw(st.booleans()),
        units_m=draw(st.sampled_from([1, 2, 3])),
    )
    stages = draw(st.sampled_from([0, 0, 2, 3, 4]))
    if stages:  # the shared ring takes the register ring's place
        config = replace(config, stages=stages, depth=1)
    elif config.depth == 1 and draw(st.booleans()):
        config = replace(config, refill_in_place=True)
    if draw(st.booleans()):  # L2 prefetches past the ring's lead
        config = replace(config, prefetch_distance=config.ring_lead + draw(st.integers(1, 3)))
    config = replace(config, rows_ahead=draw(st.sampled_from([0, 0, 1, 2])))  # the rows' ring
    stream_k = draw(st.sampled_from([0, 0, 2, 5, 11]))
    if stream_k:  # stream-K: split 1 and the fused sum
        config = replace(config, split=1, fused_sum=True, stream_k=stream_k)
    if config.fused_sum and (config.split > 1 or stream_k):  # one sum by combining stores
        config = replace(config, combine_parts=draw(st.booleans()))
        if not config.combine_parts:  # or the slots' parts loaded in batches
            config = replace(config, parts_batch=draw(st.sampled_from([1, 2, 3])))
    dtype = draw(st.sampled_from(F16_WEIGHT_DTYPES))
    # The biases kept (not with stream-K, whose check here has no biases).
    if config.late_scale and not stream_k and dtypes.magic_bias_error(dtype, dtypes.f16) is None:
        config = replace(config, magic_bias=draw(st.booleans()))
    # The warpgroups' dot, where it applies: a shared ring (released or not), the weights as
    # A of whole warpgroups.
    if config.stages and config.weights_as_a and config.warps == 4 and draw(st.booleans()):
        warpgroup = not config.magic_bias and draw(st.booleans())
        config = replace(config, release=draw(st.booleans()), warpgroup_dot=warpgroup)
    group_size = config.block_k * (1 if config.late_scale else draw(st.sampled_from([1, 2])))
    m = draw(st.integers(1, 33))
    n = config.block_n * draw(st.integers(1, 2))
    k = config.block_k * config.split * draw(st.integers(1, 3))
    return dtype, group_size, config, m, n, k


@settings(max_examples=20, deadline=None)
@given(problem=dequant_problems(), seed=st.integers(0, 2**32 - 1))
def test_any_valid_config_equals_numpy(
    problem: tuple[DataType, int, DequantConfig, int, int, int], seed: int
) -> None:
    run_dequant(*problem, seed=seed)


@pytest.mark.parametrize(("split", "mn", "threads"), [(2, 1000, 128), (3, 512, 128), (4, 77, 32)])
def test_split_k_sum_adds_in_order(split: int, mn: int, threads: int) -> None:
    rng = np.random.default_rng(split)
    partials = (rng.standard_normal((split, mn)) * 10.0 ** rng.integers(-3, 4, (split, mn))).astype(
        np.float32
    )
    out = run_split_k_sum(partials, threads)
    np.testing.assert_array_equal(out.view(np.uint16), ordered_sum(list(partials)).view(np.uint16))


def test_grid_covers_c_in_16_row_tiles() -> None:
    assert DequantConfig().grid(1, 12288) == (48, 1, 1)
    assert DequantConfig(warps=2, units_n=2, split=4).grid(17, 1024) == (4, 2, 4)
    assert (DequantConfig().block_n, DequantConfig().block_k) == (256, 64)


def test_grid_covers_c_in_8_row_tiles_with_the_weights_as_a() -> None:
    config = DequantConfig(warps=2, units_n=2, split=4, weights_as_a=True)
    assert config.grid(17, 1024) == (4, 3, 4) and config.block_m == 8
    assert DequantConfig(weights_as_a=True).grid(8, 12288) == (48, 1, 1)


@pytest.mark.parametrize(("warps", "units_k", "units_n"), [(1, 1, 1), (4, 8, 1), (2, 2, 2)])
def test_transposed_weights_are_each_threads_own_weights(
    warps: int, units_k: int, units_n: int
) -> None:
    """W^T's A fragments hold in every thread exactly the elements the weights' B fragments
    hold there, transposed (a cast between them moves no data), and each register pair of
    an A fragment is a register pair of a B fragment, in the same order (the pairs a fast
    conversion writes)."""
    weights = tile_value_layout(warps, units_k, units_n).table()
    transposed = transposed_weight_layout(warps, units_k, units_n).table()[..., ::-1]
    assert weights.shape == transposed.shape
    for thread in range(warps * 32):
        mine = weights[thread]
        assert sorted(map(tuple, mine)) == sorted(map(tuple, transposed[thread]))
        pairs = {tuple(map(tuple, mine[i : i + 2])) for i in range(0, len(mine), 2)}
        assert {
            tuple(map(tuple, transposed[thread][i : i + 2])) for i in range(0, len(mine), 2)
        } == pairs


def test_row_blocks_multiply_the_block_rows() -> None:
    assert DequantConfig(units_m=4).block_m == 64
    assert DequantConfig(units_m=3, weights_as_a=True).block_m == 24
    assert DequantConfig(units_m=4).grid(257, 1024) == (4, 5, 1)
    f_a, f_b, f_c = (fragment(f"mma.m16n8k16.{x}").layout for x in "abc")
    assert activation_layout(2, 4, 3) == (spatial(1, 1) * replicate(2)).local(3, 4) * f_a
    assert accumulator_layout(4, 1, 2) == spatial(1, 4).local(2, 8) * f_c
    assert accumulator_layout(4, 1, 2).shape == (32, 256)
    assert transposed_activation_layout(2, 4, 3).shape == (64, 24)
    assert transposed_accumulator_layout(4, 1, 2) == spatial(4, 1).local(4, 2) * f_c


def test_transposed_layouts_are_the_mma_fragments() -> None:
    f_a, f_b, f_c = (fragment(f"mma.m16n8k16.{x}").layout for x in "abc")
    assert transposed_weight_layout(2, 4, 1) == spatial(2, 1).local(4, 4) * f_a
    a = transposed_activation_layout(2, 4)
    assert a == (spatial(1, 1) * replicate(2)).local(4, 1) * f_b
    assert (a.shape, a.num_threads) == ((64, 8), 64)
    c = transposed_accumulator_layout(4, 2)
    assert c == spatial(4, 1).local(8, 1) * f_c
    assert (c.shape, c.num_threads) == ((512, 8), 128)
    # Thread 32 (warp 1, lane 0) holds rows 128 and 136 of C^T (columns of C), for A's rows 0, 1.
    assert [tuple(x) for x in c.table()[32, :4]] == [(128, 0), (128, 1), (136, 0), (136, 1)]


@pytest.mark.parametrize(
    ("threads", "block_k", "block_m", "run"),
    [(128, 128, 16, 16), (128, 128, 8, 8), (256, 128, 8, 4), (64, 64, 16, 16), (128, 16, 8, 1)],
)
def test_k_runs_layout_gives_each_thread_a_run_along_k(
    threads: int, block_k: int, block_m: int, run: int
) -> None:
    """Each thread of the (block_k, block_m) A^T tile copy holds `run` consecutive values of
    k of one row of A, in register order, and the threads cover the tile once."""
    layout = k_runs_layout(threads, block_k, block_m)
    assert layout is not None and layout.shape == (block_k, block_m)
    table = layout.table()
    assert table.shape == (threads, run, 2)
    for held in table:
        assert len({int(m) for m in held[:, 1]}) == 1
        assert [int(k) for k in held[:, 0]] == list(range(held[0, 0], held[0, 0] + run))
    assert len({(int(k), int(m)) for k, m in table.reshape(-1, 2)}) == block_k * block_m


@pytest.mark.parametrize(
    ("threads", "block_k", "block_m"), [(128, 16, 24), (256, 16, 8), (96, 128, 8)]
)
def test_k_runs_layout_is_none_where_the_tile_does_not_split_so(
    threads: int, block_k: int, block_m: int
) -> None:
    assert k_runs_layout(threads, block_k, block_m) is None


def test_activation_and_accumulator_layouts_are_the_mma_fragments() -> None:
    f_a, f_c = (fragment(f"mma.m16n8k16.{x}").layout for x in "ac")
    a = activation_layout(2, 4)
    assert a == (spatial(1, 1) * replicate(2)).local(1, 4) * f_a
    assert (a.shape, a.num_threads) == ((16, 64), 64)
    c = accumulator_layout(4, 2)
    assert c == spatial(1, 4).local(1, 16) * f_c
    assert (c.shape, c.num_threads) == ((16, 512), 128)
    # Thread 32 (warp 1, lane 0) holds c[0, 128], c[0, 129], c[8, 128], c[8, 129] first.
    assert [tuple(x) for x in c.table()[32, :4]] == [(0, 128), (0, 129), (8, 128), (8, 129)]


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (DequantConfig(warps=0), "warps=0; expected an int >= 1"),
        (DequantConfig(units_n=True), "units_n=True; expected an int >= 1"),
        (DequantConfig(units_k=0), "units_k=0; expected an int >= 1"),
        (DequantConfig(depth=-1), "depth=-1; expected an int >= 1"),
        (DequantConfig(split=2.0), r"split=2\.0; expected an int >= 1"),
        (DequantConfig(unroll=False), "unroll=False; expected an int >= 1"),
        (DequantConfig(warps=33), "warps=33; a block has at most 32 warps"),
        (DequantConfig(late_scale=1), "late_scale=1; expected True or False"),
        (DequantConfig(weights_as_a=None), "weights_as_a=None; expected True or False"),
        (DequantConfig(units_m=0), "units_m=0; expected an int >= 1"),
        (DequantConfig(stages=-2), "stages=-2; expected an int >= 0"),
        (DequantConfig(stages=1), "stages=1 with depth=1; a shared ring needs at least 2"),
        (DequantConfig(stages=3, depth=2), "stages=3 with depth=2; .* register ring"),
        (DequantConfig(release=True), "release=True with stages=0; the releases hand back"),
        (DequantConfig(stages=3, release=1), "release=1; expected True or False"),
        (DequantConfig(stages=3, bulk_weights=True), "bulk_weights=True without release"),
        (DequantConfig(units_k=1, late_scale=True), "late_scale with group_size=128 and a k-tile"),
        (DequantConfig(refill_in_place=1), "refill_in_place=1; expected True or False"),
        (DequantConfig(prefetch_parts="yes"), "prefetch_parts='yes'; expected True or False"),
        (DequantConfig(prefetch_distance=-1), "prefetch_distance=-1; expected an int >= 0"),
        (DequantConfig(rows_ahead=-1), "rows_ahead=-1; expected an int >= 0"),
        (DequantConfig(rows_ahead=True), "rows_ahead=True; expected an int >= 0"),
        (
            DequantConfig(depth=2, prefetch_distance=2),
            r"prefetch_distance=2 with depth=2 and stages=0; the ring already loads 2 k-tile",
        ),
        (
            DequantConfig(stages=4, prefetch_distance=3),
            "prefetch_distance=3 with depth=1 and stages=4; .* the distance must be more than 3",
        ),
        (
            DequantConfig(depth=2, refill_in_place=True),
            "refill_in_place=True with stages=0, depth=2; the words are refilled in place",
        ),
        (
            DequantConfig(stages=3, refill_in_place=True),
            "refill_in_place=True with stages=3, depth=1",
        ),
        (DequantConfig(split=2, combine_parts=0), "combine_parts=0; expected True or False"),
        (
            DequantConfig(combine_parts=True),
            "combine_parts=True with split=1, stream_k=0 and fused_sum=True; the parts are",
        ),
        (
            DequantConfig(split=2, fused_sum=False, combine_parts=True),
            "combine_parts=True with split=2, stream_k=0 and fused_sum=False",
        ),
        (
            DequantConfig(split=2, combine_parts=True, prefetch_parts=True),
            "combine_parts=True with prefetch_parts=True; the combined parts are one sum",
        ),
        (DequantConfig(split=2, parts_batch=0), "parts_batch=0; expected an int >= 1"),
        (
            DequantConfig(parts_batch=2),
            "parts_batch=2 with split=1, stream_k=0, fused_sum=True and combine_parts=False; "
            "the parts are loaded in batches",
        ),
        (
            DequantConfig(split=4, fused_sum=False, parts_batch=2),
            "parts_batch=2 with split=4, stream_k=0, fused_sum=False",
        ),
        (
            DequantConfig(split=4, combine_parts=True, parts_batch=2),
            "parts_batch=2 with split=4, .* combine_parts=True",
        ),
        (DequantConfig(warpgroup_dot=1), "warpgroup_dot=1; expected True or False"),
        (
            DequantConfig(stages=3, release=True, warpgroup_dot=True),
            "warpgroup_dot=True with warps=4, weights_as_a=False, stages=3 .* requires "
            "weights_as_a",
        ),
        (
            DequantConfig(weights_as_a=True, warpgroup_dot=True),
            "warpgroup_dot=True with warps=4, weights_as_a=True, stages=0",
        ),
        (
            DequantConfig(warps=2, weights_as_a=True, stages=3, release=True, warpgroup_dot=True),
            "warpgroup_dot=True with warps=2, .* whole warpgroups",
        ),
        (
            DequantConfig(
                units_k=8,
                late_scale=True,
                magic_bias=True,
                weights_as_a=True,
                stages=3,
                release=True,
                warpgroup_dot=True,
            ),
            "magic_bias=True with warpgroup_dot=True; the biases' product would be",
        ),
    ],
    ids=str,
)
def test_bad_config_is_refused(config: DequantConfig, message: str) -> None:
    with pytest.raises(VerificationError, match=f"register_dequant_matmul: {message}"):
        register_dequant_matmul(dtypes.i4, 128, config)


@pytest.mark.parametrize(
    ("config", "prefetches"),
    [
        (DequantConfig(split=4), 0),
        (DequantConfig(split=4, prefetch_parts=True), 1),
        (DequantConfig(split=4, fused_sum=False, prefetch_parts=True), 0),
        (DequantConfig(prefetch_parts=True), 0),
        (DequantConfig(stream_k=132, prefetch_parts=True), 1),
    ],
    ids=str,
)
def test_the_fused_sum_prefetches_its_parts(config: DequantConfig, prefetches: int) -> None:
    """With ``prefetch_parts``, a fused sum of parts (split k or stream-K) prefetches them in
    one loop; an unsplit kernel or a sum in a second launch has nothing to prefetch, and the
    default (measured slower) prefetches nothing."""
    program = register_dequant_matmul(dtypes.i4, 128, config)
    loops = [
        i
        for i in program.walk()
        if isinstance(i, ForRange) and any(isinstance(j, PrefetchGlobal) for j in i.body)
    ]
    assert len(loops) == prefetches
    assert sum(isinstance(i, PrefetchGlobal) for i in program.walk()) == prefetches


@pytest.mark.parametrize(
    ("config", "steps", "singles"),
    [
        (DequantConfig(split=16), None, 15),
        (DequantConfig(split=16, parts_batch=4), 3, 3),  # slots 1-12 four a step, 13-15
        (DequantConfig(split=16, parts_batch=5), 3, 0),
        (DequantConfig(split=8, parts_batch=8), None, 7),  # no whole batch of the 7
        (DequantConfig(split=8, parts_batch=7), 1, 0),
    ],
    ids=str,
)
def test_the_fused_sum_loads_its_parts_in_rolled_batches(
    config: DequantConfig, steps: int | None, singles: int
) -> None:
    """With ``parts_batch`` B, the last block's sum loads the parts after slot 0 B at a time
    in a loop kept rolled (B loads, then their B adds), the rest one at a time in the loop
    after it (that the sum is the parts' in slot order, bit for bit: `CASES`)."""
    program = register_dequant_matmul(dtypes.i4, 128, config)
    [*_, last] = [i for i in program.walk() if isinstance(i, If)]  # the last ticket's body
    loops = [i for i in last.body if isinstance(i, ForRange)]
    batched = [loop for loop in loops if loop.rolled]
    if steps is None:
        assert batched == []
    else:
        [loop] = batched
        assert (loop.start.value, loop.stop.value) == (0, steps)
        loads = [i for i in loop.body if isinstance(i, LoadGlobal)]
        adds = [i for i in loop.body if isinstance(i, Binary)]
        assert len(loads) == len(adds) == config.parts_batch
        assert all(add.op == "add" for add in adds)
        last_load = max(i for i, x in enumerate(loop.body) if isinstance(x, LoadGlobal))
        assert last_load < min(i for i, x in enumerate(loop.body) if isinstance(x, Binary))
    [rest] = [loop for loop in loops if not loop.rolled]
    assert rest.stop.value - rest.start.value == singles


@pytest.mark.parametrize(
    ("config", "lead"),
    [(DequantConfig(), 1), (DequantConfig(depth=3), 3), (DequantConfig(stages=4), 3)],
    ids=str,
)
def test_the_ring_s_lead_is_its_depth_or_all_but_one_stage(config: DequantConfig, lead: int):
    assert config.ring_lead == lead


@pytest.mark.parametrize(
    ("config", "before", "in_loop"),
    [
        (DequantConfig(), 0, 0),
        (DequantConfig(prefetch_distance=4), 3, 1),  # k-tiles first + 1, 2, 3
        (DequantConfig(depth=2, prefetch_distance=3, unroll=1), 1, 1),
        (DequantConfig(stages=3, prefetch_distance=3), 1, 1),
    ],
    ids=str,
)
def test_the_weights_are_prefetched_into_l2_a_distance_ahead(
    config: DequantConfig, before: int, in_loop: int
) -> None:
    """The k-tiles from the ring's lead up to the distance before the k loop, one in its
    body (tile + distance), all of the packed words at level L2."""
    program = register_dequant_matmul(dtypes.i4, 128, config)
    [loop] = [i for i in program.body if isinstance(i, ForRange)]
    prefetches = [i for i in program.walk() if isinstance(i, PrefetchGlobal)]
    inside = [i for i in walk(loop.body) if isinstance(i, PrefetchGlobal)]
    assert (len(prefetches) - len(inside), len(inside)) == (before, in_loop)
    assert all(p.level == "L2" and p.src.name == "g1" for p in prefetches)


@pytest.mark.parametrize(
    ("group_size", "config", "tile"),
    [(96, DequantConfig(), 64), (32, DequantConfig(), 64), (64, DequantConfig(units_k=8), 128)],
    ids=str,
)
def test_group_size_not_a_multiple_of_the_k_tile_is_refused(
    group_size: int, config: DequantConfig, tile: int
) -> None:
    message = f"group_size={group_size} is not a multiple of the k-tile {tile} \\(16 \\* units_k\\)"
    with pytest.raises(VerificationError, match=message):
        register_dequant_matmul(dtypes.i4, group_size, config)


@pytest.mark.parametrize("group_size", [0, -64, 64.0, True])
def test_group_size_not_positive_is_refused(group_size: int) -> None:
    with pytest.raises(VerificationError, match=re.escape(f"group_size={group_size!r}")):
        register_dequant_matmul(dtypes.i4, group_size, DequantConfig())


@pytest.mark.parametrize("dtype", [dtypes.f16, dtypes.i32], ids=str)
def test_bad_weight_dtype_is_refused(dtype: DataType) -> None:
    with pytest.raises(VerificationError, match=f"packed weights: {dtype} is not a weight type"):
        register_dequant_matmul(dtype)


@pytest.mark.parametrize("split", [1, 0, True, 2.0], ids=repr)
def test_split_k_sum_of_fewer_than_two_parts_is_refused(split: object) -> None:
    message = re.escape(f"split_k_sum: split={split!r}; expected an int >= 2")
    with pytest.raises(VerificationError, match=message):
        split_k_sum(split)


@pytest.mark.parametrize(
    ("n", "k", "message"),
    [
        (320, 128, "argument n=320 is not a multiple of 256"),
        (256, 192, "argument k=192 is not a multiple of 128"),  # 64 * split
        (0, 128, r"argument n=0 is outside its bounds \[256, "),
    ],
)
def test_shape_off_the_tile_grid_is_refused_at_run_time(n: int, k: int, message: str) -> None:
    program = register_dequant_matmul(dtypes.i4, 128, DequantConfig(split=2, fused_sum=False))
    a, c = np.zeros(k, np.float16), np.zeros(2 * max(n, 1), np.float32)
    packed, scales = np.zeros(k * n, np.int32), np.zeros(n * 2, np.float16)
    with pytest.raises(InterpreterError, match=message):
        run_reference(program, 1, n, k, a, packed, scales, c, grid=(1, 1, 2))


# ------------------------------------------------------------------------------ lowering

LAYER = {"n": 12288, "k": 4096}
"""A decoding layer's weight shape: the constants the kernel is compiled for."""


def loop_and_after(source: str) -> str:
    """The kernel's text from its first ``for (`` line on: the k loop and the epilogue."""
    kernel = source[source.index('extern "C" __global__') :]
    return kernel[kernel.index("for (") :]


@pytest.fixture(scope="module")
def i4_source() -> str:
    program = register_dequant_matmul(dtypes.i4, 128, DequantConfig())
    return lower(program, "sm_90a", constants=LAYER).source


@pytest.mark.parametrize("generic", ["la_decode_float(", "la_encode_float(", "la_load_bits("])
def test_decode_loop_has_no_generic_conversion(i4_source: str, generic: str) -> None:
    assert generic not in loop_and_after(i4_source)


def test_decode_loop_loads_weights_as_unmasked_16_byte_vectors(i4_source: str) -> None:
    (view,) = re.findall(r"// (\w+) = global_view\(packed, i32,", i4_source)
    lines = loop_and_after(i4_source).splitlines()
    loads = [n for n, line in enumerate(lines) if f"*(const uint4*)({view} + " in line]
    # One 16-byte load per k16 row of the k-tile (units_k = 4) per unrolled copy (unroll = 2).
    assert len(loads) == 8
    # n and k constants and the declared grid: no comparison against the packed tensor's
    # extents (256 rows of k16, 24576 words per row) anywhere in the loop.
    text = loop_and_after(i4_source)
    assert "< 24576" not in text and "< 256)" not in text and "< 256 " not in text


DECODE_LOOP_CASES = (
    [
        (dtypes.i4, DequantConfig(), dtypes.f16, False),
        (dtypes.i4, DequantConfig(split=8, depth=2), dtypes.f16, False),
        (dtypes.u4, DequantConfig(), dtypes.bf16, True),
        (dtypes.i8, DequantConfig(units_k=2), dtypes.bf16, False),
        (dtypes.f4e2m1, DequantConfig(), dtypes.f16, False),
    ]
    + [
        (
            dtypes.from_name(f"{kind}{bits}"),
            DequantConfig(units_k=8 if bits < 4 else 4),
            dtypes.f16,
            False,
        )
        for bits in (1, 2, 3, 5, 6, 7, 8)
        for kind in "ui"
    ]
    + [
        (dtypes.i2, DequantConfig(units_k=8, late_scale=True), dtypes.f16, False),
        (dtypes.u4, DequantConfig(units_k=8, late_scale=True), dtypes.bf16, True),
        (
            dtypes.i2,
            DequantConfig(units_k=8, late_scale=True, weights_as_a=True),
            dtypes.f16,
            False,
        ),
        (dtypes.u4, DequantConfig(units_k=4, weights_as_a=True), dtypes.bf16, True),
        (dtypes.i8, DequantConfig(units_k=2, split=2, weights_as_a=True), dtypes.f16, False),
        (dtypes.i4, DequantConfig(units_k=4, units_m=4), dtypes.f16, False),
        (dtypes.u4, DequantConfig(units_k=8, units_m=2, late_scale=True), dtypes.bf16, True),
        (dtypes.i3, DequantConfig(units_k=8, units_m=2, weights_as_a=True), dtypes.f16, False),
    ]
)


@pytest.mark.parametrize(
    ("weight", "config", "activation", "zero_points"),
    DECODE_LOOP_CASES,
    ids=[f"{w}-{a}{'-zp' if z else ''}-{c}" for w, c, a, z in DECODE_LOOP_CASES],
)
def test_decode_loop_takes_no_generic_path(
    weight: DataType, config: DequantConfig, activation: DataType, zero_points: bool
) -> None:
    """The lowering report: inside the k loop, no instruction is lowered element by element or
    through the software float codec, at every width, in f16 and bf16, with zero points."""
    program = register_dequant_matmul(
        weight, 128, config, activation_dtype=activation, zero_points=zero_points
    )
    kernel = lower(program, "sm_90a", constants=LAYER)
    assert [step.describe() for step in kernel.report.generic_in_loops()] == []
    in_loop = {path.name for step in kernel.report if step.loop_depth for path in step.paths}
    # i8 codes are stored offset binary: cast as the u8 patterns they are.
    cast = dtypes.u8 if stored_offset(weight) else weight
    expected = {"load 16 B", f"fast {cast} -> {activation}", "ldmatrix", "mma.m16n8k16"}
    # The scales multiply the weights in pairs, or (late_scale) the f32 products in an fma.
    expected.add("f32 fma" if config.late_scale else f"paired {activation} mul")
    assert expected <= in_loop


STAGED_CASES = [
    # (weight type, config, bytes of one cp.async of a thread's words per k16 row)
    (dtypes.i2, DequantConfig(units_k=8, late_scale=True, weights_as_a=True, stages=3), 8),
    (dtypes.i3, DequantConfig(units_k=8, late_scale=True, stages=4), 4),
    (dtypes.i4, DequantConfig(units_k=8, late_scale=True, split=8, stages=4, unroll=4), 16),
    (dtypes.f4e2m1, DequantConfig(units_k=8, late_scale=True, stages=2), 16),
    (dtypes.i8, DequantConfig(warps=2, units_k=2, weights_as_a=True, stages=3), 16),
]


@pytest.mark.parametrize(
    ("weight", "config", "vector_bytes"),
    STAGED_CASES,
    ids=[f"{w}-stages{c.stages}" for w, c, _ in STAGED_CASES],
)
def test_shared_ring_copies_the_weights_ahead_with_cp_async(
    weight: DataType, config: DequantConfig, vector_bytes: int
) -> None:
    """With `stages`, the k loop reads no weight from global memory itself: each thread's words
    arrive by ``cp.async`` of 4 to 16 bytes (a 12-byte i3 run as three 4-byte copies, not
    element by element), unchecked, and nothing in the loop takes a generic path."""
    program = register_dequant_matmul(weight, 128, config)
    kernel = lower(program, "sm_90a", constants=LAYER)
    assert [step.describe() for step in kernel.report.generic_in_loops()] == []
    (view,) = re.findall(r"// (\w+) = global_view\(packed, i32,", kernel.source)
    loop = loop_and_after(kernel.source)
    assert f"*(const uint4*)({view} + " not in loop and f"*(const uint2*)({view} + " not in loop
    copies = re.findall(rf"la_cp_async_(\w+)\(\w+ \+ \([^;]*\), {view} \+ ", loop)
    # Every k16 row of every unrolled copy of the body: units_k rows of nbits words each.
    words = config.units_k * weight.nbits * config.unroll
    assert copies == [str(vector_bytes)] * (words * 4 // vector_bytes)


@pytest.mark.parametrize("weight", [dtypes.i2, dtypes.i4, dtypes.u3])
def test_stream_k_k_loop_takes_no_generic_path_and_no_bounds_check(weight: DataType) -> None:
    """Inside the stream-K tile loop, the k loop's loads, copies and conversions are the fast
    paths of the plain kernel, none of them bounds-checked: the tile's k-tile range is written
    so that its bounds show it within K. (The other loop at that depth, the sum of a tile's
    partial sums, checks its 16-byte loads, as the split-k kernel's does.)"""
    config = DequantConfig(units_k=8, late_scale=True, weights_as_a=True, stream_k=528)
    kernel = lower(register_dequant_matmul(weight, 128, config), "sm_90a", constants=LAYER)
    inner = [step for step in kernel.report if step.loop_depth >= 2]
    assert inner
    described = [step.describe() for step in inner]
    assert not [d for d in described if "generic" in d], described
    checked = {d for d in described if "checked" in d}
    assert checked == {"load 16 B x 4, bounds checked per vector x 16"}
    in_loop = {path.name for step in inner for path in step.paths}
    assert {"load 8 B" if weight == dtypes.i2 else "load 16 B", "ldmatrix"} <= in_loop
    assert {"mma.m16n8k16", "f32 fma", f"fast {weight} -> f16"} <= in_loop


def test_a_chained_decode_kernel_prefetches_its_weights_before_the_wait() -> None:
    """With `programmatic_launch` the kernel triggers the next link at entry, loads its first
    k-tile of weights, waits for the prior grid, and only then copies activations."""
    config = DequantConfig(units_k=8, late_scale=True, split=2, programmatic_launch=True)
    kernel = lower(register_dequant_matmul(dtypes.i4, 128, config), "sm_90a", constants=LAYER)
    assert kernel.programmatic_launch
    body = kernel.source[kernel.source.index('extern "C" __global__') :]
    trigger = body.index("la_launch_dependents();")
    first_weights = body.index("load_global(g1")
    wait = body.index("la_wait_prior_grid();")
    first_copy = body.index("la_cp_async")
    assert trigger < first_weights < wait < first_copy
    with pytest.raises(VerificationError, match="programmatic_launch=1; expected True or False"):
        register_dequant_matmul(dtypes.i4, 128, DequantConfig(programmatic_launch=1))


@pytest.mark.parametrize(
    ("weight", "config", "zero_points", "exponent"),
    [
        (dtypes.f4e2m1, DequantConfig(units_k=8, late_scale=True), False, -14),
        (dtypes.f6e3m2, DequantConfig(units_k=8, late_scale=True), False, -12),
        (dtypes.f4e2m1, DequantConfig(units_k=8), False, 0),  # scales on the weights
        (dtypes.i4, DequantConfig(units_k=8, late_scale=True), False, 0),
        (dtypes.f8e4m3, DequantConfig(units_k=8, late_scale=True), False, 0),  # has NaNs
        (dtypes.f4e2m1, DequantConfig(units_k=8, late_scale=True), True, 0),  # zero points
    ],
)
def test_a_late_scaled_float_moves_its_bias_to_the_scales(
    weight: DataType, config: DequantConfig, zero_points: bool, exponent: int
) -> None:
    """With the late scale a float's cast is scaled by 2^(bias - 15) and the scale row's by
    the opposite; the lowered cast then places bits with no fma (`fma_free_exponent`)."""
    program = register_dequant_matmul(weight, 128, config, zero_points=zero_points)
    assert {i.exponent for i in program.walk() if isinstance(i, Cast)} == {0, exponent, -exponent}
    if exponent:
        assert weight_exponent(weight, dtypes.f16) == fma_free_exponent(weight, dtypes.f16)
        assert weight_exponent(weight, dtypes.bf16) == 0  # 2^(bias - 127) is out of range


@pytest.mark.parametrize("stream_k", [0, 5])
def test_a_late_trigger_signals_the_next_link_after_the_k_loop(stream_k: int) -> None:
    """With `late_trigger` the one trigger comes after the k loop (after the tile loop with
    stream-K), at the program's top level, and the kernel still matches both references in
    the interpreter."""
    base = DequantConfig(units_k=8, late_scale=True, programmatic_launch=True, stream_k=stream_k)
    late = replace(base, late_trigger=True)
    program = register_dequant_matmul(dtypes.i4, 128, late)
    signals = [i for i in program.walk() if isinstance(i, LaunchDependents)]
    assert len(signals) == 1 and signals[0] in program.body
    loops = [i for i, instruction in enumerate(program.body) if isinstance(instruction, ForRange)]
    assert loops[-1] < program.body.index(signals[0])
    body = lower(program, "sm_90a", constants=LAYER).source
    body = body[body.index('extern "C" __global__') :]
    assert body.count("la_launch_dependents();") == 1
    assert body.index("la_wait_prior_grid();") < body.index("la_launch_dependents();")
    run_dequant(dtypes.i4, 128, late, 3, 256, 512, seed=11)
    with pytest.raises(VerificationError, match="late_trigger=True without programmatic_launch"):
        register_dequant_matmul(dtypes.i4, 128, DequantConfig(late_trigger=True))
    with pytest.raises(VerificationError, match="late_trigger=1; expected True or False"):
        register_dequant_matmul(dtypes.i4, 128, DequantConfig(late_trigger=1))


def test_decode_loop_reads_the_magic_words_from_constant_memory(i4_source: str) -> None:
    """The LOP3s of the i4 decoder take their mask as the immediate and the magic word from
    the kernel's constant table, declared once before the kernel."""
    declaration = r"__constant__ unsigned int la_constants\[(\d+)\] = \{([^}]*)\};"
    (table,) = re.findall(declaration, i4_source)
    assert int(table[0]) == len(table[1].split(",")) and "0x64086408u" in table[1]
    loop = loop_and_after(i4_source)
    assert re.search(r"& 0x000F000Fu\) \^ la_constants\[\d+\]\)", loop)
    assert "0x64086408u" not in loop


@pytest.mark.parametrize(
    "call",
    ["la_fma_f16x2(", "la_hmul2_f16(", "la_mma_m16n8k16_f16(", "la_ldmatrix_x4("],
)
def test_decode_loop_uses_the_fast_paths(i4_source: str, call: str) -> None:
    assert call in loop_and_after(i4_source)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize(
    "program",
    [
        register_dequant_matmul(dtypes.i4, 128, DequantConfig()),
        register_dequant_matmul(dtypes.i4, 128, DequantConfig(split=2, depth=2)),
        split_k_sum(2),
    ],
    ids=["i4", "i4_split2", "split_k_sum2"],
)
def test_kernel_compiles_with_nvrtc(program: Program, arch: str) -> None:
    constants = LAYER if program.name.startswith("register") else None
    lowered = lower(program, arch, constants=constants)
    assert "--fmad=false" in lowered.options
    module = compile_cuda(lowered.source, arch, lowered.options)
    assert cubin_kernels(module.cubin) == (program.name,)

"""`ir.examples.wgmma_dequant_matmul` in the interpreter, its renaming of rows, and its lowering.

- Differential against NumPy: bit for bit against the sequential formula the interpreter's
  `dot` defines (the f32 sums in k order, then one rounding), for weight types of 1 to 8 bits,
  f16 and bf16 activations with and without zero points, rows of A below, at and past one
  block, several k-tiles per scale group; a hypothesis property draws further configurations.
- Exact tables and a proof: the renaming `view` between the decode's A-fragment order and the
  warpgroup layout is the row permutation the module docstring states (by table, and by the
  solver, which refutes the unpermuted claim), and back for C^T.
- The lowering on sm_90a: one ``wgmma`` plan with A from registers and the activations read by
  K-major descriptors, every claim of it proved; the activations by TMA in 64-wide panels, in
  one swizzle mode for every stage; NVRTC compiles the kernel (no GPU needed). The wgmma waits
  for itself, but in the overlapped order unrolled twice, where it stays in flight: the PTX
  then writes no A word of a copy while its wgmma may still read it (a check that finds the
  violations of the loop written once), and a copy without a plan waits for the others.
  The GPU runs are in tests/backend/test_gpu_wgmma_dequant.py and gpu_examples_main.
- Errors: every bad configuration field, group size and weight type names itself.
"""

from __future__ import annotations

import importlib
import re
import warnings
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import backend
from backend.bulk_copy import BulkTensorPlan
from backend.cache import CubinCache
from backend.errors import PerformanceWarning
from backend.lower import lower
from backend.nvrtc import compile_cuda, cubin_registers
from backend.wgmma import PROXY_FENCE, WAIT_ALL, WgmmaPlan, plan_wgmma
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.errors import SpecializationError, VerificationError
from ir.examples.matmul import grouped_tile, wgmma_dot_layouts
from ir.examples.packed_prefill import grouped_grid, transposed_ring
from ir.examples.packed_weights import FRAGMENT_COLUMNS, FRAGMENT_WIDTHS
from ir.examples.register_dequant_matmul import (
    transposed_accumulator_layout,
    transposed_weight_layout,
)
from ir.examples.wgmma_dequant_matmul import (
    WgmmaDequantConfig,
    consumer_registers,
    wgmma_dequant_matmul,
)
from ir.instructions import Assign, Dot, ForRange, LoadGlobal, ThreadGroup
from ir.program import walk as walk_body
from ir.specialize import specialize
from ir.testing.quantized_problems import (
    F16_WEIGHT_DTYPES,
    check_prefill_program,
    check_stream_k_program,
    check_zero_point_program,
    stream_k_parts,
)
from layout_algebra.function_layout import FunctionLayout
from layout_algebra.hardware import register_cap
from layout_algebra.symbolic import const, evaluate
from proofs import check_equivalent
from proofs.lowering_validation import validate_lowering


def run_prefill(
    dtype: DataType, group_size: int, config: WgmmaDequantConfig, m: int, n: int, k: int, seed: int
) -> None:
    """Run the program in the interpreter: C bit for bit the sequential f32 formula of the
    dequantized weights, and nothing past C written."""
    program = wgmma_dequant_matmul(dtype, group_size, config)
    check_prefill_program(program, config, dtype, group_size, (m, n, k), seed)


PRODUCER_IN_FLIGHT = WgmmaDequantConfig(
    block_m=8,
    units_k=2,
    stages=4,
    unroll=2,
    overlap_dot=True,
    release=True,
    producer=True,
    producer_registers=24,
)
"""A small tile with a producer warpgroup and the dot in flight, unrolled twice: the cases
below run it with persistent blocks, stream-K and the hybrid."""
WIDE_STAGED = replace(
    PRODUCER_IN_FLIGHT,
    warpgroups=2,
    units_n=2,
    units_k=4,
    block_m=24,
    stages=3,
    refill_in_place=True,
    staged_store=True,
    warp_columns=16,
)
"""That tile with two fragment units a warpgroup in each of two warpgroups, refilled in place
and C staged (QuantizedLinear's tile twice as wide, 24 rows)."""

CASES = [
    # (weight type, group size, config, m, column blocks, k-tiles)
    (dtypes.i4, 64, WgmmaDequantConfig(block_m=16, units_k=2, stages=3), 20, 1, 5),
    (dtypes.u4, 32, WgmmaDequantConfig(block_m=8, units_k=2, stages=2, depth=2), 8, 2, 3),
    (dtypes.i8, 64, WgmmaDequantConfig(block_m=24, stages=4, unroll=2), 7, 1, 4),
    (dtypes.u3, 128, WgmmaDequantConfig(block_m=8, units_k=8, stages=2), 9, 1, 2),
    (dtypes.i2, 64, WgmmaDequantConfig(block_m=16, units_n=2, stages=3), 31, 1, 3),
    (dtypes.u1, 32, WgmmaDequantConfig(block_m=8, units_k=2, warpgroups=2), 3, 1, 2),
    (dtypes.f4e2m1, 64, WgmmaDequantConfig(block_m=32, stages=5, depth=3), 33, 1, 6),
    (dtypes.u5, 32, WgmmaDequantConfig(block_m=8, units_k=2, stages=4, depth=2), 9, 1, 4),
    (dtypes.i4, 64, WgmmaDequantConfig(block_m=16, stages=3, overlap_dot=True), 17, 1, 5),
    (dtypes.u3, 32, WgmmaDequantConfig(units_k=2, stages=4, unroll=2, overlap_dot=True), 9, 1, 6),
    (dtypes.i4, 64, WgmmaDequantConfig(block_m=16, stages=3, split_dot=True), 18, 1, 3),
    (dtypes.u6, 64, WgmmaDequantConfig(units_k=2, stages=4, depth=2, split_dot=True), 5, 1, 4),
    # Each stage released to its next copy instead of a barrier: fewer k-tiles than stages,
    # several laps of the ring, a chain of dots, two warpgroups.
    (dtypes.i4, 64, WgmmaDequantConfig(block_m=16, stages=3, release=True), 18, 1, 2),
    (dtypes.u3, 32, WgmmaDequantConfig(units_k=2, stages=2, unroll=2, release=True), 9, 1, 7),
    (dtypes.i8, 64, WgmmaDequantConfig(block_m=8, split_dot=True, release=True), 5, 1, 6),
    (dtypes.u4, 32, WgmmaDequantConfig(block_m=8, units_k=2, warpgroups=2, release=True), 3, 1, 5),
    # A producer warp issues the copies, held back by the consumers' releases alone: fewer
    # k-tiles than stages, several laps, a chain of dots, two consumer warpgroups.
    (dtypes.i4, 64, WgmmaDequantConfig(block_m=16, stages=3, release=True, producer=True), 9, 1, 2),
    (
        dtypes.u3,
        32,
        WgmmaDequantConfig(units_k=2, stages=2, unroll=2, release=True, producer=True),
        9,
        1,
        7,
    ),
    (
        dtypes.i8,
        64,
        WgmmaDequantConfig(block_m=8, split_dot=True, depth=2, release=True, producer=True),
        5,
        1,
        6,
    ),
    (
        dtypes.u4,
        32,
        WgmmaDequantConfig(block_m=8, units_k=2, warpgroups=2, release=True, producer=True),
        3,
        1,
        5,
    ),
    # A producer warpgroup with a register budget: the consumers' budget the rest.
    (
        dtypes.i4,
        64,
        WgmmaDequantConfig(
            block_m=16, stages=3, release=True, producer=True, producer_registers=24
        ),
        9,
        1,
        2,
    ),
    # A producer warpgroup with k split: the consumers add the parts (the group's ticket).
    (
        dtypes.i4,
        64,
        WgmmaDequantConfig(
            block_m=16, stages=3, split=2, release=True, producer=True, producer_registers=24
        ),
        9,
        2,
        6,
    ),
    (
        dtypes.u4,
        32,
        WgmmaDequantConfig(block_m=8, units_k=2, split=3, release=True, producer=True),
        20,
        1,
        9,
    ),
    # The fragment tile's parts summed in two pieces of 32 registers (64 a thread), the second
    # row tile past m.
    (
        dtypes.i8,
        64,
        WgmmaDequantConfig(block_m=128, units_k=2, split=2, warp_columns=16),
        130,
        1,
        4,
    ),
    # The release with the dot in flight: each k-tile releases the stage of the one before
    # (with and without a producer warpgroup, a chain of dots, several laps of the ring).
    (
        dtypes.i4,
        64,
        WgmmaDequantConfig(block_m=16, stages=3, unroll=2, release=True, overlap_dot=True),
        9,
        1,
        6,
    ),
    (
        dtypes.u4,
        32,
        WgmmaDequantConfig(
            units_k=2,
            stages=4,
            unroll=2,
            split_dot=True,
            release=True,
            overlap_dot=True,
            producer=True,
            producer_registers=24,
        ),
        9,
        1,
        8,
    ),
    # C staged through a shared tile and stored in whole rows (alone, with a producer
    # warpgroup, with a partial last tile of rows).
    (dtypes.i4, 64, WgmmaDequantConfig(block_m=16, stages=3, staged_store=True), 20, 2, 3),
    (
        dtypes.u4,
        32,
        WgmmaDequantConfig(
            units_k=2,
            stages=4,
            release=True,
            producer=True,
            producer_registers=24,
            staged_store=True,
        ),
        9,
        1,
        4,
    ),
    # Each warp one A fragment of its warpgroup's unit (64 columns a warpgroup, up to 256 rows):
    # alone, two warpgroups with a producer warp, the dot in flight, a chain of dots with the
    # staged store, a split (stream-K: `STREAM_K_CASES`).
    (dtypes.i4, 64, WgmmaDequantConfig(block_m=16, units_k=2, stages=3, warp_columns=16), 20, 2, 5),
    (dtypes.i8, 64, WgmmaDequantConfig(block_m=24, stages=4, unroll=2, warp_columns=16), 7, 1, 4),
    (dtypes.f4e2m1, 64, WgmmaDequantConfig(block_m=8, units_k=2, warp_columns=16), 9, 1, 3),
    (
        dtypes.u4,
        32,
        WgmmaDequantConfig(
            block_m=8, units_k=2, warpgroups=2, release=True, producer=True, warp_columns=16
        ),
        3,
        2,
        5,
    ),
    (
        dtypes.u8,
        64,
        WgmmaDequantConfig(
            block_m=40, stages=3, unroll=2, overlap_dot=True, release=True, warp_columns=16
        ),
        41,
        1,
        6,
    ),
    (
        dtypes.i4,
        64,
        WgmmaDequantConfig(
            block_m=32, units_k=2, stages=3, split_dot=True, staged_store=True, warp_columns=16
        ),
        40,
        1,
        3,
    ),
    (dtypes.i8, 64, WgmmaDequantConfig(block_m=16, units_k=2, split=2, warp_columns=16), 20, 2, 6),
    # Each warp one A fragment of each of its warpgroup's units (64 * units_n columns a
    # warpgroup): two units, three, then two in each of two warpgroups with a producer
    # warpgroup, the dot in flight, refilled in place and C staged (QuantizedLinear's tile
    # twice as wide).
    (
        dtypes.i4,
        64,
        WgmmaDequantConfig(block_m=16, units_k=2, warp_columns=16, units_n=2),
        20,
        2,
        3,
    ),
    (dtypes.f4e2m1, 64, WgmmaDequantConfig(block_m=8, warp_columns=16, units_n=3), 9, 1, 2),
    (dtypes.i8, 64, WIDE_STAGED, 30, 1, 4),
    # The form of Humming's sm_90 tile (256 columns by 176 rows, 64-deep k-tiles in four
    # stages, the dot waited for), in clusters of two column tiles sharing the activations and
    # groups of two tile rows: two row tiles, the second partial.
    *(
        (
            weight,
            64,
            replace(
                WIDE_STAGED,
                block_m=176,
                stages=4,
                overlap_dot=False,
                cluster_n=2,
                group_m=2,
            ),
            180,
            2,
            2,
        )
        for weight in (dtypes.i4, dtypes.i8)
    ),
    # k split over grid z: 3 k-tiles a part, so the second part starts inside a group of 2.
    (dtypes.i4, 64, WgmmaDequantConfig(block_m=16, units_k=2, stages=3, split=2), 20, 2, 6),
    (dtypes.u2, 32, WgmmaDequantConfig(block_m=8, units_k=2, depth=2, split=3), 9, 1, 3),
    (
        dtypes.i8,
        64,
        WgmmaDequantConfig(
            block_m=8, units_k=2, stages=4, unroll=2, overlap_dot=True, split_dot=True, split=2
        ),
        11,
        1,
        8,
    ),
    # Persistent blocks computing whole tiles in turn: fewer blocks than tiles, the last row
    # tile partial.
    (dtypes.i4, 64, WgmmaDequantConfig(block_m=16, units_k=2, stages=3, persistent=3), 40, 2, 3),
    # A producer warpgroup copying the next tile's first k-tiles while the consumers store,
    # the dot in flight.
    (
        dtypes.u3,
        32,
        replace(PRODUCER_IN_FLIGHT, persistent=2),
        20,
        2,
        4,
    ),
    # Groups of tile rows in the launch grid: 3 tile rows in groups of 2 (the second group's
    # blocks past the last row compute nothing that lands), and the fragment tile with C
    # staged in 4 rows in groups of 2, the last tile row partial.
    (dtypes.i4, 64, WgmmaDequantConfig(block_m=16, units_k=2, stages=3, group_m=2), 40, 2, 3),
    (
        dtypes.i8,
        64,
        WgmmaDequantConfig(
            block_m=16, units_k=2, stages=3, warp_columns=16, staged_store=True, group_m=2
        ),
        50,
        2,
        3,
    ),
    (dtypes.u4, 32, replace(PRODUCER_IN_FLIGHT, group_m=3), 20, 3, 4),
    # Each 64-deep panel of the activations waited for alone, its own dot: a 128-deep k-tile
    # in two dots, plain and with a producer warpgroup and the dot in flight.
    (
        dtypes.i4,
        128,
        WgmmaDequantConfig(block_m=16, units_k=8, stages=3, panel_waits=True),
        20,
        1,
        3,
    ),
    (dtypes.i8, 128, replace(PRODUCER_IN_FLIGHT, units_k=8, panel_waits=True), 12, 2, 4),
    # The next k-tile's words loaded into the current one's registers: plain, with the
    # producer warpgroup and the dot in flight over laps of the ring, with panel waits, in
    # persistent blocks, and with a split (stream-K: `STREAM_K_CASES`).
    (dtypes.i4, 64, WgmmaDequantConfig(block_m=16, stages=3, refill_in_place=True), 20, 1, 5),
    (dtypes.u3, 32, replace(PRODUCER_IN_FLIGHT, refill_in_place=True), 9, 1, 8),
    (
        dtypes.i8,
        128,
        replace(PRODUCER_IN_FLIGHT, units_k=8, panel_waits=True, refill_in_place=True),
        12,
        2,
        4,
    ),
    (dtypes.u4, 32, replace(PRODUCER_IN_FLIGHT, persistent=2, refill_in_place=True), 20, 2, 4),
    (
        dtypes.i4,
        64,
        WgmmaDequantConfig(block_m=16, units_k=2, stages=3, split=2, refill_in_place=True),
        20,
        2,
        6,
    ),
    # Three consumer warpgroups of fragment columns (192 columns a block) with a producer
    # warpgroup, the dot in flight and C staged, the last row tile partial; and without a
    # producer, the dot waited for.
    (
        dtypes.i4,
        64,
        replace(PRODUCER_IN_FLIGHT, warpgroups=3, warp_columns=16, block_m=16, staged_store=True),
        20,
        2,
        4,
    ),
    (
        dtypes.i8,
        64,
        WgmmaDequantConfig(
            warpgroups=3, warp_columns=16, block_m=32, units_k=2, stages=3, staged_store=True
        ),
        30,
        1,
        3,
    ),
    # The fragment tile, C staged, more blocks asked for than tiles.
    (
        dtypes.i8,
        64,
        WgmmaDequantConfig(
            block_m=64, units_k=2, stages=3, warp_columns=16, persistent=9, staged_store=True
        ),
        70,
        3,
        2,
    ),
]


@pytest.mark.parametrize(
    ("dtype", "group_size", "config", "m", "column_blocks", "tiles"),
    CASES,
    ids=[f"{c[0]}-g{c[1]}-m{c[3]}-{i}" for i, c in enumerate(CASES)],
)
def test_wgmma_dequant_matmul_equals_numpy(
    dtype: DataType,
    group_size: int,
    config: WgmmaDequantConfig,
    m: int,
    column_blocks: int,
    tiles: int,
) -> None:
    n, k = config.block_n * column_blocks, config.block_k * tiles
    run_prefill(dtype, group_size, config, m, n, k, seed=m + n + k)


@pytest.mark.parametrize(
    ("weight", "activation", "zero_points", "split"),
    [
        (dtypes.u4, dtypes.bf16, True, 1),
        (dtypes.u2, dtypes.f16, True, 1),
        (dtypes.i8, dtypes.bf16, False, 1),
        (dtypes.u4, dtypes.bf16, True, 2),
    ],
    ids=str,
)
def test_zero_points_and_bf16_activations_equal_numpy(
    weight: DataType, activation: DataType, zero_points: bool, split: int
) -> None:
    """C = A @ act((W - Z) * S) with the f32 sums in k order (per part of k, added in order),
    every code and output exact."""
    config = WgmmaDequantConfig(block_m=16, units_k=2, stages=3, split=split)
    group_size, m, n, k = 64, 19, config.block_n, 128
    program = wgmma_dequant_matmul(
        weight, group_size, config, activation_dtype=activation, zero_points=zero_points
    )
    check_zero_point_program(
        program, config, weight, activation, zero_points, (m, n, k), group_size, weight.nbits
    )


STREAM_K_CASES = [
    # (weight type, group size, config, m, column blocks, k-tiles): tiles shared by blocks.
    (dtypes.i4, 64, WgmmaDequantConfig(block_m=16, units_k=2, stages=3, stream_k=5), 20, 2, 5),
    (dtypes.u3, 128, WgmmaDequantConfig(block_m=8, units_k=4, stages=4, stream_k=3), 9, 1, 8),
    (dtypes.u4, 32, WgmmaDequantConfig(units_k=2, stream_k=3, warp_columns=16), 9, 3, 4),
    (
        dtypes.i4,
        64,
        WgmmaDequantConfig(block_m=128, units_k=2, stream_k=3, warp_columns=16),
        130,
        1,
        4,
    ),
    # The tiles one block covers stored through the staging tile, the others summed.
    (
        dtypes.i4,
        64,
        WgmmaDequantConfig(block_m=16, units_k=2, stages=3, stream_k=5, staged_store=True),
        20,
        2,
        5,
    ),
    # Stages released: a block's segments share the ring's free barriers, lap after lap.
    (dtypes.i4, 64, WgmmaDequantConfig(block_m=8, units_k=2, stream_k=3, release=True), 9, 2, 7),
    # The next k-tile's words loaded into the current one's registers, a ring per segment.
    (
        dtypes.i4,
        64,
        WgmmaDequantConfig(block_m=8, units_k=2, stream_k=3, refill_in_place=True),
        9,
        2,
        7,
    ),
    (
        dtypes.u4,
        32,
        WgmmaDequantConfig(
            block_m=8,
            units_k=2,
            stages=4,
            depth=2,
            unroll=2,
            overlap_dot=True,
            split_dot=True,
            stream_k=3,
        ),
        9,
        1,
        8,
    ),  # fmt: skip
    # A producer warp (and a producer warpgroup) copying each segment's activations, held
    # back only by the consumers' releases; the consumers store or add the parts.
    (
        dtypes.i4,
        64,
        WgmmaDequantConfig(block_m=8, units_k=2, stream_k=3, release=True, producer=True),
        9,
        2,
        7,
    ),
    (
        dtypes.u4,
        32,
        replace(PRODUCER_IN_FLIGHT, stream_k=3),
        9,
        1,
        8,
    ),
    # The dot in flight with a release, without a producer: a segment's last stage released.
    # (Unrolled twice, the shares count runs of two k-tiles: K_T even.)
    (
        dtypes.i4,
        64,
        WgmmaDequantConfig(
            block_m=8, units_k=2, stages=3, unroll=2, overlap_dot=True, stream_k=4, release=True
        ),
        9,
        1,
        8,
    ),
    # The hybrid (stream_k_tail): 8 tiles on 3 blocks' waves, the first 3 whole, one block
    # each, the other 5 shared by 3 blocks (a partial row tile among them); with a producer
    # warpgroup and the dot in flight, unrolled twice; 2 tiles on 3, all shared.
    (
        dtypes.i4,
        64,
        WgmmaDequantConfig(block_m=8, units_k=2, stages=3, stream_k=3, stream_k_tail=True),
        30,
        2,
        5,
    ),
    (
        dtypes.u4,
        32,
        replace(PRODUCER_IN_FLIGHT, stream_k=3, stream_k_tail=True),
        28,
        2,
        6,
    ),
    (
        dtypes.i4,
        64,
        WgmmaDequantConfig(block_m=8, units_k=2, stream_k=3, stream_k_tail=True),
        9,
        1,
        4,
    ),
    # More blocks than iterations: one k-tile each, every tile in K_T parts.
    (dtypes.i2, 64, WgmmaDequantConfig(block_m=8, units_k=4, stages=2, stream_k=99), 5, 1, 3),
    # As many blocks as tiles' worth: each tile whole in one block, stored without the sum.
    (dtypes.i8, 64, WgmmaDequantConfig(block_m=8, units_k=4, stages=3, stream_k=1000), 16, 2, 1),
]


SPLIT_TAIL_CASES = [
    # (weight type, group size, config, m, column blocks, k-tiles): the last partial wave's
    # tiles split along k (`tail_wave`). 8 tiles on waves of 6: 6 whole, 2 in halves (the last
    # row tile partial); 4 tiles on waves of 13, unrolled twice: every tile in 3 parts.
    (
        dtypes.i4,
        64,
        WgmmaDequantConfig(block_m=8, units_k=2, stages=3, split=2, tail_wave=6),
        30,
        2,
        4,
    ),
    (
        dtypes.i4,
        64,
        WgmmaDequantConfig(block_m=8, units_k=2, stages=3, unroll=2, split=3, tail_wave=13),
        12,
        2,
        6,
    ),
    # A producer warpgroup, the dot in flight, C staged in the ring's memory by the blocks of
    # whole tiles: 5 tiles on waves of 4, the fifth in halves.
    (
        dtypes.i8,
        64,
        replace(
            PRODUCER_IN_FLIGHT,
            warp_columns=16,
            block_m=16,
            staged_store=True,
            refill_in_place=True,
            split=2,
            tail_wave=4,
        ),
        70,
        1,
        4,
    ),
]


@pytest.mark.parametrize(
    ("dtype", "group_size", "config", "m", "column_blocks", "tiles"),
    STREAM_K_CASES + SPLIT_TAIL_CASES,
    ids=[f"{c[0]}-g{c[1]}-m{c[3]}-{i}" for i, c in enumerate(STREAM_K_CASES + SPLIT_TAIL_CASES)],
)
def test_shared_tiles_equal_the_sum_of_their_parts_in_k_order(
    dtype: DataType,
    group_size: int,
    config: WgmmaDequantConfig,
    m: int,
    column_blocks: int,
    tiles: int,
) -> None:
    n, k = config.block_n * column_blocks, config.block_k * tiles
    program = wgmma_dequant_matmul(dtype, group_size, config)
    slots = config.partial_slots(m, n, k)
    check_stream_k_program(program, config, dtype, group_size, (m, n, k), m + n + k, slots)


@pytest.mark.parametrize(
    ("stream_k", "m", "n", "k", "grid", "slots"),
    [
        (264, 256, 12288, 4096, (264, 1, 1), 3),  # 192 tiles of 64 k-tiles: 46 or 47 each
        (264, 256, 8192, 8192, (264, 1, 1), 4),  # 128 tiles of 128: 62 or 63 each
        (1000, 8, 256, 256, (4, 1, 1), 5),  # W = 1 tile * 4 k-tiles: one each
        (3, 65, 512, 1024, (3, 1, 1), 2),  # 4 tiles of 16: 21 or 22 each
    ],
)
def test_stream_k_grid_and_slots_table(
    stream_k: int, m: int, n: int, k: int, grid: tuple[int, int, int], slots: int
) -> None:
    config = WgmmaDequantConfig(stream_k=stream_k)
    assert config.grid(m, n, k) == grid
    assert config.partial_slots(m, n, k) == slots
    assert WgmmaDequantConfig(split=3).partial_slots(m, n, k) == 3
    assert WgmmaDequantConfig().partial_slots(m, n, k) == 0


@pytest.mark.parametrize(
    ("m", "n", "k", "prefix", "grid", "shape"),
    [
        # 448 tiles of 64 k-tiles on 132: 264 whole, 184 shared by 132 blocks (89 or 90 each).
        (256, 57344, 8192, 264, (396, 1, 1), (2, 184, 32768)),
        # 1536 tiles of 32 on 132: 1320 whole, 216 shared (52 or 53 k-tiles each).
        (4096, 12288, 4096, 1320, (1452, 1, 1), (2, 216, 32768)),
        # 96 tiles, fewer than two waves: none whole, the plain stream-K launch.
        (256, 12288, 4096, 0, (132, 1, 1), (3, 96, 32768)),
        # 264 tiles, two waves exactly: one whole, one shared, a block a tile (no parts summed
        # but the workspace's slots, which a launch counts as stream-K's do).
        (256, 33792, 4096, 132, (264, 1, 1), (2, 132, 32768)),
    ],
)
def test_stream_k_tail_grid_and_workspace_table(
    m: int, n: int, k: int, prefix: int, grid: tuple[int, int, int], shape: tuple[int, ...]
) -> None:
    """The 128 x 256 tile's hybrid launches at the benchmark's layers: D whole tiles first,
    132 blocks sharing the rest, the workspace for the shared tiles alone."""
    config = WgmmaDequantConfig(
        warpgroups=2, units_k=8, block_m=256, warp_columns=16, stream_k=132, stream_k_tail=True
    )
    assert config.prefix_tiles(m, n) == prefix
    assert config.grid(m, n, k) == grid
    assert config.partial_shape(m, n, k) == shape


@pytest.mark.parametrize(
    ("m", "n", "grid", "shape"),
    [
        # 448 tiles on 132: 396 whole, the last 52 in halves (104 blocks).
        (256, 57344, (500, 1, 1), (2, 52, 32768)),
        # 96 tiles, more than half a wave: every tile whole (the workspace's one tile unused).
        (256, 12288, (96, 1, 1), (2, 1, 32768)),
        # 64 tiles: every tile in halves, as a split in two.
        (256, 8192, (128, 1, 1), (2, 64, 32768)),
        # 7168 tiles: the last 40 in halves.
        (4096, 57344, (7208, 1, 1), (2, 40, 32768)),
    ],
)
def test_split_tail_grid_and_workspace_table(
    m: int, n: int, grid: tuple[int, int, int], shape: tuple[int, ...]
) -> None:
    """The batch paths' split-tail tile (`BATCH_PATHS[12]`) at the benchmark's layers."""
    config = WgmmaDequantConfig(
        warpgroups=2, units_k=8, block_m=256, warp_columns=16, unroll=2, split=2, tail_wave=132
    )
    assert config.granule == 2
    assert config.grid(m, n, 8192) == grid
    assert config.partial_shape(m, n, 8192) == shape


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tail_wave": 132}, "tail_wave=132 with split=1, stream_k=0, persistent=0; a split"),
        ({"tail_wave": 4, "split": 2, "stream_k": 4}, "tail_wave=4 with split=2, stream_k=4"),
        ({"tail_wave": 4, "split": 2, "persistent": 4}, "persistent=4; a split tail"),
        ({"tail_wave": -1, "split": 2}, "tail_wave=-1"),
        ({"tail_wave": 4, "split": 2, "group_m": 2}, "group_m=2 with split=2"),
    ],
)
def test_a_split_tail_s_fields_are_checked(fields: dict, message: str) -> None:
    with pytest.raises(VerificationError, match=re.escape(message)):
        wgmma_dequant_matmul(dtypes.i4, 128, WgmmaDequantConfig(**fields))


def test_a_split_tail_takes_at_most_2_to_the_24_rows() -> None:
    """Its schedule stays within 32 bits: the kernel's m is bounded (every other prefill
    kernel's is not)."""
    config = WgmmaDequantConfig(block_m=8, units_k=2, stages=3, split=2, tail_wave=6)
    for program, hi in [
        (wgmma_dequant_matmul(dtypes.i4, 64, config), 2**24),
        (wgmma_dequant_matmul(dtypes.i4, 64, replace(config, tail_wave=0)), 2**31 - 1),
    ]:
        (m,) = [p for p in program.params if p.name == "m"]
        assert m.var.bounds() == (1, hi)


def test_stream_k_tail_requires_stream_k() -> None:
    with pytest.raises(VerificationError, match="stream_k_tail=True with stream_k=0; expected"):
        wgmma_dequant_matmul(dtypes.i4, 128, WgmmaDequantConfig(stream_k_tail=True))
    with pytest.raises(VerificationError, match="stream_k_tail=1 with stream_k=3; expected"):
        wgmma_dequant_matmul(dtypes.i4, 128, WgmmaDequantConfig(stream_k=3, stream_k_tail=1))


@pytest.mark.parametrize(
    ("config", "m", "n", "grid"),
    [
        # 128 x 256 tiles: 1536 of them, then 96.
        (WgmmaDequantConfig(warp_columns=16, warpgroups=2, block_m=256, persistent=132), 4096,
         12288, (132, 1, 1)),
        (WgmmaDequantConfig(warp_columns=16, warpgroups=2, block_m=256, persistent=132), 256,
         12288, (96, 1, 1)),
        # One 256 x 64 tile for two blocks asked for.
        (WgmmaDequantConfig(persistent=2), 9, 256, (1, 1, 1)),
    ],
)  # fmt: skip
def test_persistent_grid_table(
    config: WgmmaDequantConfig, m: int, n: int, grid: tuple[int, ...]
) -> None:
    """min(persistent, tiles) blocks, no workspace."""
    assert config.grid(m, n) == grid
    assert config.partial_slots(m, n, 1024) == 0


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"persistent": 4, "split": 2}, "persistent=4 with split=2"),
        ({"persistent": 4, "stream_k": 3}, "persistent=4 with split=1, stream_k=3"),
        ({"persistent": -1}, "persistent"),
        ({"units_k": 4, "panel_waits": True}, "panel_waits=True with block_k=64"),
        ({"units_k": 8, "panel_waits": 1}, "panel_waits=1 with block_k=128"),
        ({"depth": 2, "refill_in_place": True}, "refill_in_place=True with depth=2"),
        (
            {"split_dot": True, "refill_in_place": True},
            "refill_in_place=True with depth=1, split_dot=True",
        ),
        ({"refill_in_place": 1}, "refill_in_place=1"),
        ({"group_m": 2, "split": 2}, "group_m=2 with split=2"),
        ({"group_m": 2, "stream_k": 3}, "group_m=2 with split=1, stream_k=3"),
        ({"group_m": 4, "persistent": 2}, "group_m=4 with split=1, stream_k=0, persistent=2"),
        ({"group_m": 0}, "group_m=0; expected an int >= 1"),
        ({"group_m": True}, "group_m=True; expected an int >= 1"),
    ],
)
def test_option_combinations_refused(fields: dict, words: str) -> None:
    """Persistent blocks with a split or stream-K, panel waits without two 64-deep panels,
    the refill in place with a ring deeper than one k-tile or a split dot, groups of tile
    rows with a split, stream-K or persistent blocks, and values of the wrong kind: each
    refused with the fields named."""
    with pytest.raises(VerificationError, match=re.escape(words)):
        wgmma_dequant_matmul(dtypes.i4, 64, WgmmaDequantConfig(**fields))


def _register_copies(program) -> list[tuple[str, str]]:
    """(destination, source) of each assignment of one register tensor to another in the
    program's k loops (the loops that hold a dot)."""
    loops = [
        i
        for i in program.walk()
        if isinstance(i, ForRange) and any(isinstance(j, Dot) for j in walk_body(i.body))
    ]
    return [
        (i.dst.name, i.src.name)
        for loop in loops
        for i in walk_body(loop.body)
        if isinstance(i, Assign)
    ]


def test_refill_in_place_loads_into_the_current_registers() -> None:
    """With `refill_in_place` the k loop copies no register tensor but the loads' results
    (into the tensors that held the k-tile just dequantized) and the dot's (into the
    accumulator); the register ring of depth 1 moves the k-tile ahead into the current one
    first."""
    config = WgmmaDequantConfig(block_m=16, units_k=8, stages=3, unroll=2, overlap_dot=True)
    ring = _register_copies(wgmma_dequant_matmul(dtypes.i8, 128, config))
    in_place = wgmma_dequant_matmul(dtypes.i8, 128, replace(config, refill_in_place=True))
    loaded = {i.out.name for i in in_place.walk() if isinstance(i, LoadGlobal)}
    dots = {i.out.name for i in in_place.walk() if isinstance(i, Dot)}
    copies = _register_copies(in_place)
    # A k-tile is two tensors (its packed words, its scale row): the ring also copies each
    # from the k-tile ahead into the current one.
    assert len(ring) == len(copies) + 2
    assert all(src in loaded | dots for _, src in copies)
    assert sum(src in loaded for _, src in copies) == 2
    assert not all(src in loaded | dots for _, src in ring)


@pytest.mark.parametrize(
    ("group_m", "m", "n", "grid"),
    [
        # 16 tile rows of 256 and 96 column tiles, in two groups of 8 rows.
        (8, 4096, 12288, (8, 96, 2)),
        # 16 rows in one group; one row of tiles, in a group of one.
        (16, 4096, 12288, (16, 96, 1)),
        (8, 256, 12288, (1, 96, 1)),
        # 5 rows in groups of 4: the second group's blocks past the fifth row idle.
        (4, 1200, 57344, (4, 448, 2)),
    ],
)
def test_grouped_grid_table(group_m: int, m: int, n: int, grid: tuple[int, ...]) -> None:
    config = WgmmaDequantConfig(warp_columns=16, warpgroups=2, block_m=256, group_m=group_m)
    assert config.grid(m, n) == grid
    assert config.partial_slots(m, n, 1024) == 0


@given(tiles_m=st.integers(1, 40), tiles_n=st.integers(1, 12), group_m=st.integers(1, 9))
@settings(max_examples=200)
def test_grouped_grid_takes_the_tiles_in_grouped_tile_order(
    tiles_m: int, tiles_n: int, group_m: int
) -> None:
    """Block (x, y, z) computes tile (z * group_m + x, y); in the order the hardware starts
    blocks (x first, then y, then z), the tiles below the last row are each tile once, in the
    order of the f16 matmul's software numbering (`ir.examples.matmul.grouped_tile`)."""
    gx, gy, gz = grouped_grid(tiles_m, tiles_n, group_m)
    started = [
        (z * group_m + x, y)
        for z in range(gz)
        for y in range(gy)
        for x in range(gx)
        if z * group_m + x < tiles_m
    ]
    builder = ProgramBuilder("order", 32)
    numbered = []
    for number in range(tiles_m * tiles_n):
        row, column = grouped_tile(
            builder, const(tiles_m * 8), const(tiles_n * 8), 8, 8, group_m, const(number)
        )
        numbered.append((int(evaluate(row, {})), int(evaluate(column, {}))))
    assert started == numbered
    # Blocks past the last row: fewer than a group's rows for each column tile.
    assert gx * gy * gz - len(started) < group_m * tiles_n


@given(
    stream_k=st.integers(1, 300),
    row_tiles=st.integers(1, 5),
    column_tiles=st.integers(1, 6),
    runs=st.integers(1, 35),
    unroll=st.sampled_from([1, 2, 4]),
)
@settings(max_examples=200)
def test_stream_k_parts_cover_each_tile_within_the_slots(
    stream_k: int, row_tiles: int, column_tiles: int, runs: int, unroll: int
) -> None:
    """Every tile's parts are its k-tiles in order, no more of them than the slots, each a
    whole number of runs of the unroll count (the granule), so that a segment's loop runs
    whole groups of its copies; the grid has one block per share."""
    config = WgmmaDequantConfig(block_m=16, stream_k=stream_k, unroll=unroll)
    k_tiles = runs * unroll
    m, n, k = 16 * row_tiles, config.block_n * column_tiles, config.block_k * k_tiles
    assert config.granule == unroll
    assert config.grid(m, n, k) == (min(stream_k, config.tiles(m, n) * runs), 1, 1)
    for ranges in stream_k_parts(config, m, n, k):
        assert [r for span in ranges for r in span] == list(range(k_tiles))
        assert 1 <= len(ranges) <= config.partial_slots(m, n, k)
        assert all(span.start % unroll == 0 and len(span) % unroll == 0 for span in ranges)


def test_stream_k_needs_whole_runs_of_the_unroll_count() -> None:
    """With stream-K unrolled twice, K is a multiple of two k-tiles (the granule); without
    stream-K the granule is 1."""
    config = WgmmaDequantConfig(block_m=16, stream_k=4, unroll=2)
    program = wgmma_dequant_matmul(dtypes.i4, 64, config)
    with pytest.raises(SpecializationError, match="k"):
        specialize(program, {"n": config.block_n, "k": 3 * config.block_k})
    specialize(program, {"n": config.block_n, "k": 4 * config.block_k})
    assert WgmmaDequantConfig(unroll=2).granule == 1


@st.composite
def prefill_problems(draw: st.DrawFn) -> tuple[DataType, int, WgmmaDequantConfig, int, int, int]:
    """A weight type of exact f16 values, a valid configuration and group size, a small shape."""
    config = WgmmaDequantConfig(
        warpgroups=draw(st.sampled_from([1, 1, 2, 3])),
        units_n=draw(st.sampled_from([1, 1, 2])),
        units_k=draw(st.sampled_from([1, 2, 4])),
        block_m=8 * draw(st.integers(1, 5)),
        stages=draw(st.integers(2, 5)),
        depth=draw(st.integers(1, 3)),
        unroll=draw(st.sampled_from([1, 2])),
    )
    if config.stages >= 3 and draw(st.booleans()):
        config = replace(config, overlap_dot=True)
    fragment_widths = [d for d in F16_WEIGHT_DTYPES if d.nbits in FRAGMENT_WIDTHS]
    fragments = draw(st.booleans())
    if fragments:
        config = replace(config, warp_columns=FRAGMENT_COLUMNS)
    split = draw(st.sampled_from([1, 1, 2, 3]))
    config = replace(config, split_dot=draw(st.booleans()), split=split)
    if config.depth == 1 and not config.split_dot and draw(st.booleans()):
        config = replace(config, refill_in_place=True)
    group_size = config.block_k * draw(st.sampled_from([1, 2]))
    m = draw(st.integers(1, 2 * config.block_m + 1))
    k = config.block_k * split * draw(st.integers(1, 4 // split + 1))
    weights = fragment_widths if fragments else F16_WEIGHT_DTYPES
    return draw(st.sampled_from(weights)), group_size, config, m, config.block_n, k


@settings(max_examples=10, deadline=None)
@given(problem=prefill_problems(), seed=st.integers(0, 2**32 - 1))
def test_any_valid_config_equals_numpy(
    problem: tuple[DataType, int, WgmmaDequantConfig, int, int, int], seed: int
) -> None:
    run_prefill(*problem, seed=seed)


# ------------------------------------------------------------------------------ the renaming


@pytest.mark.parametrize(("warpgroups", "units_n"), [(1, 1), (1, 2), (2, 1)])
def test_the_weight_view_renames_rows_by_the_stated_permutation(
    warpgroups: int, units_n: int
) -> None:
    """Register i of thread t holds W^T's row ``64 u (4 g + w') + 16 j + r`` in the decode's
    order and the warpgroup layout names it ``256 u g + 64 j + 16 w' + r``; columns stay."""
    units_k, warps = 2, 4 * warpgroups
    decoded = transposed_weight_layout(warps, units_k, units_n).table()
    block_n = 256 * units_n * warpgroups
    renamed = wgmma_dot_layouts(32 * warps, block_n, 8, 16 * units_k)[0].table()
    assert decoded.shape == renamed.shape
    np.testing.assert_array_equal(decoded[..., 1], renamed[..., 1])
    group, within = np.divmod(decoded[..., 0], 256 * units_n)
    warp, rest = np.divmod(within, 64 * units_n)
    block, row = np.divmod(rest, 16)
    want = 256 * units_n * group + 64 * block + 16 * warp + row
    np.testing.assert_array_equal(renamed[..., 0], want)


def renamed_rows(decoded, units_n: int) -> FunctionLayout:
    """`decoded` with each row r = 64 u (4 g + w') + 16 j + r0 moved to 256 u g + 64 j + 16 w' +
    r0 (u = `units_n`): the permutation the module docstring states, as a formula."""
    block = 64 * units_n

    def rows(t, i):
        r, column = decoded.map(t, i)
        group, warp = r // (4 * block), (r // block) % 4
        return (4 * block * group + 64 * ((r % block) // 16) + 16 * warp + r % 16, column)

    return FunctionLayout(decoded.shape, decoded.num_threads, decoded.local_size, rows)


@pytest.mark.parametrize(("warpgroups", "units_n"), [(1, 1), (1, 2), (2, 1)])
def test_the_renaming_is_proved_the_stated_permutation(warpgroups: int, units_n: int) -> None:
    """The same claim for the solver: the warpgroup layout equals the decode's order with its
    rows permuted; without the permutation the solver finds a register they disagree on."""
    decoded = transposed_weight_layout(4 * warpgroups, 2, units_n)
    renamed = wgmma_dot_layouts(128 * warpgroups, 256 * units_n * warpgroups, 8, 32)[0]
    assert check_equivalent(renamed_rows(decoded, units_n), renamed).holds is True
    refuted = check_equivalent(decoded, renamed)
    assert refuted.holds is False and refuted.counterexample is not None


def test_the_accumulator_view_renames_the_rows_back() -> None:
    """The accumulator's rows renamed by the same permutation: C^T's rows in the decode's
    accumulator order are the true columns of C."""
    warps, units_n, block_m = 4, 1, 24
    accumulator = wgmma_dot_layouts(128, 256, block_m, 64)[2].table()
    stored = transposed_accumulator_layout(warps, units_n, block_m // 8).table()
    np.testing.assert_array_equal(accumulator[..., 1], stored[..., 1])
    warp, rest = np.divmod(stored[..., 0], 64)
    block, row = np.divmod(rest, 16)
    np.testing.assert_array_equal(accumulator[..., 0], 64 * block + 16 * warp + row)


def test_transposed_ring_table() -> None:
    """Token t's 64 values of a stage are one 128-byte row, at 64 t; its 16-byte chunk c lies
    at chunk c XOR (t % 8) of the row (token 3: chunks 0, 1, 7 at 3, 2, 4)."""
    layout = transposed_ring(2, 64, 16)
    assert layout.shape == (2, 64, 16)
    assert layout.offset((1, 0, 0)) == 1024
    offsets = [layout.offset((0, kk, 3)) for kk in (0, 1, 8, 63)]
    assert offsets == [192 + 24, 192 + 25, 192 + 16, 192 + 32 + 7]


# ------------------------------------------------------------------------------ lowering

LAYER = {"n": 12288, "k": 4096}


@pytest.fixture(scope="module")
def kernel():
    return lower(
        wgmma_dequant_matmul(dtypes.i4, 128, WgmmaDequantConfig()), "sm_90a", constants=LAYER
    )


def test_the_dot_runs_as_wgmma_with_a_from_registers(kernel) -> None:
    (plan,) = [plan for plan in kernel.plans if isinstance(plan, WgmmaPlan)]
    assert plan.a_descriptors is None and plan.n == 64
    assert plan.k_steps * plan.blocks == 16
    b = plan.b_descriptors.descriptor
    assert (b.major, b.swizzle, b.stride_byte_offset) == ("k", "128B", 1024)
    calls = kernel.source.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16")
    assert calls == 16
    for claim in plan.claims():
        assert check_equivalent(claim.emitted, claim.required).holds, claim.name


@pytest.mark.parametrize(
    ("config", "swizzle", "copies"),
    [
        (WgmmaDequantConfig(), "128B", 1),
        (WgmmaDequantConfig(units_k=8, block_m=24, stages=2), "128B", 2),
        # 32-byte rows of 8 tokens: the first stage matches the 128-byte mode as well, the
        # others only the 32-byte one, which the plan takes for all.
        (WgmmaDequantConfig(units_k=1, block_m=8, stages=6), "32B", 1),
    ],
    ids=str,
)
def test_the_activations_come_by_tma_in_panels(
    config: WgmmaDequantConfig, swizzle: str, copies: int
) -> None:
    """One TMA box per 64-wide panel of k of each stage, k innermost, one swizzle mode."""
    lowered = lower(wgmma_dequant_matmul(dtypes.i4, 128, config), "sm_90a", constants=LAYER)
    (plan,) = [plan for plan in lowered.plans if isinstance(plan, BulkTensorPlan)]
    assert (plan.box.swizzle, plan.box.order, len(plan.slots)) == (swizzle, (1, 0), copies)
    assert plan.stages == (config.stages,)
    assert any(isinstance(plan, WgmmaPlan) for plan in lowered.plans)


@pytest.mark.parametrize(
    ("unroll", "overlap", "in_flight", "split"),
    [
        (1, True, False, False),
        (2, False, False, False),
        (2, True, True, False),
        (1, True, False, True),
        (2, False, False, True),
        (2, True, True, True),
    ],
)
def test_the_dot_stays_in_flight_only_in_the_unrolled_overlapped_loop(
    unroll: int, overlap: bool, in_flight: bool, split: bool
) -> None:
    """A from registers: in the loop written once the wgmma waits for itself (``wait_group 0``
    after each k-tile), and in the plain order too (its copy at the top of a k-tile fills the
    stage the dot before still reads); unrolled twice (whole groups: K / BK even) in the
    overlapped order each copy's dot runs on into the next copy (``wait_group 1``), with one
    ``wait_group 0`` after the loop. Split into a chain of two k16 links (`split_dot`), the
    same: a commit per link, the chain's wait after its last link or, in flight, after the
    next copy's first."""
    config = WgmmaDequantConfig(units_k=2, unroll=unroll, overlap_dot=overlap, split_dot=split)
    lowered = lower(wgmma_dequant_matmul(dtypes.i4, 128, config), "sm_90a", constants=LAYER)
    kernel_text = lowered.source.split('extern "C"')[1]
    links = 2 if split else 1
    assert kernel_text.count("la_wgmma_commit();") == unroll * links
    waits = kernel_text.count("la_wgmma_wait();")
    assert kernel_text.count("la_wgmma_wait_prior();") == (unroll if in_flight else 0)
    assert waits == (1 if in_flight else unroll)


def _ptx(source: str) -> list[str]:
    from cuda.bindings import nvrtc

    from backend.nvrtc import nvrtc_options

    options = [option.encode() for option in nvrtc_options("sm_90a")]
    _, program = nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], [])
    (status,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
    assert status == nvrtc.nvrtcResult.NVRTC_SUCCESS
    _, size = nvrtc.nvrtcGetPTXSize(program)
    text = b" " * size
    nvrtc.nvrtcGetPTX(program, text)
    return text.decode().splitlines()


def _writes_in_flight(lines: list[str], copies: int) -> list[tuple[int, str]]:
    """(line, register) of every write of a register that a wgmma may still read: the loop
    body holds `copies` copies, each the wgmma calls of a dot (or of a chain of dots, with no
    wait between them) and a ``wait_group`` after the first of them. The calls of copy c are
    complete at the first wait after copy c + 1's first call (for the last copy, copy 0's
    wait of the next iteration), so their A words are busy from copy c's first call to there,
    cyclically over the loop: a word from the first call reading it (a chain's later links'
    words are written after its first link is issued)."""
    calls = [i for i, line in enumerate(lines) if "wgmma.mma_async" in line]
    waits = [i for i, line in enumerate(lines) if "wgmma.wait_group" in line]
    size = len(calls) // copies
    groups = [calls[c * size : (c + 1) * size] for c in range(copies)]
    wait_after = [min(w for w in waits if w > group[0]) for group in groups]
    found = []
    for c, group in enumerate(groups):
        first_read: dict[str, int] = {}  # each A word: the first call of the copy reading it
        for call in group:
            words = re.search(r"\}, \{([^}]*)\}, %rd", lines[call]).group(1).split(", ")
            for word in words:
                first_read.setdefault(word, call)
        for i, line in enumerate(lines):
            written = re.match(r"\s*\{?\s*[a-z][\w.]*\s+(%r\d+)\s*,", line)
            if not written or written.group(1) not in first_read:
                continue
            start = first_read[written.group(1)]
            if c + 1 < copies:
                busy = start <= i <= wait_after[c + 1]
            else:
                busy = not wait_after[0] < i < start
            if busy:
                found.append((i, written.group(1)))
    return found


def test_no_register_a_wgmma_in_flight_reads_a_register_written_after_it() -> None:
    """The PTX of the kernel unrolled twice: no register A word of a copy's wgmma calls is
    written while they may still read it. Read as one copy (the loop written once, the dot
    in flight), the same PTX would break the rule everywhere: the check can fail."""
    config = WgmmaDequantConfig(units_k=2, unroll=2, overlap_dot=True)
    lowered = lower(wgmma_dequant_matmul(dtypes.i4, 128, config), "sm_90a", constants=LAYER)
    assert "la_wgmma_wait_prior();" in lowered.source
    lines = _ptx(lowered.source)
    assert _writes_in_flight(lines, 2) == []
    assert len(_writes_in_flight(lines, 1)) >= 16


def _writes_in_a_chain(lines: list[str], links: int) -> list[tuple[int, str]]:
    """(line, register) of every write of a register A word that a chained wgmma call may
    still read. The calls come in chains of `links` links, each link a group of calls; a
    link's A words are busy from the link's first call to the ``wait_group`` after the
    chain. Read as one link, a chain's words are all busy from its first call, so the later
    links' dequantization (between the calls and the wait) counts as writes in flight."""
    calls = [i for i, line in enumerate(lines) if "wgmma.mma_async" in line]
    waits = [i for i, line in enumerate(lines) if "wgmma.wait_group" in line]
    size = len(calls) // links
    found = []
    for first in range(0, len(calls), size * links):
        chain = calls[first : first + size * links]
        busy_from: dict[str, int] = {}  # register -> the first call of the link reading it
        for start in range(0, len(chain), size):
            for call in chain[start : start + size]:
                words = re.search(r"\}, \{([^}]*)\}, %rd", lines[call]).group(1).split(", ")
                for word in words:
                    busy_from.setdefault(word, chain[start])
        end = min(w for w in waits if w > chain[-1])
        for i in range(chain[0] + 1, end):
            written = re.match(r"\s*\{?\s*[a-z][\w.]*\s+(%r\d+)\s*,", lines[i])
            if written and busy_from.get(written.group(1), end) < i:
                found.append((i, written.group(1)))
    return found


def test_no_chained_wgmma_reads_a_register_written_after_it() -> None:
    """The PTX of the k-tile split into a chain of four k16 links: no A word of a link is
    written between its calls and the chain's wait. Read as one link (all four links' words
    busy from the first call), the same PTX breaks the rule: the next links' dequantization
    writes their words there, so the check can fail."""
    config = WgmmaDequantConfig(split_dot=True)
    lowered = lower(wgmma_dequant_matmul(dtypes.i4, 128, config), "sm_90a", constants=LAYER)
    lines = _ptx(lowered.source)
    waits = [line for line in lines if "wgmma.wait_group" in line]
    assert len(waits) == 1 and waits[0].strip().endswith("0;")
    assert _writes_in_a_chain(lines, 4) == []
    assert len(_writes_in_a_chain(lines, 1)) >= 16


@pytest.mark.parametrize("split", [1, 2])
def test_a_chain_stays_in_flight_into_the_next_copy(split: int) -> None:
    """The k-tile split into a chain of two k16 links, unrolled twice in the overlapped order:
    each copy's chain runs on into the next copy, whose first link completes it (``wait_group
    1``), one ``wait_group 0`` after the loop. In the PTX no A word of a chain is written
    while its calls may still read it; read as one copy, the same PTX breaks that rule. The
    same with k split over two blocks (each block's k-tiles offset by its part)."""
    config = WgmmaDequantConfig(units_k=2, unroll=2, overlap_dot=True, split_dot=True, split=split)
    lowered = lower(wgmma_dequant_matmul(dtypes.i4, 128, config), "sm_90a", constants=LAYER)
    loop = lowered.source.split('extern "C"')[1]
    assert loop.count("la_wgmma_commit();") == 4
    assert loop.count("la_wgmma_wait_prior();") == 2 and loop.count("la_wgmma_wait();") == 1
    lines = _ptx(lowered.source)
    assert _writes_in_flight(lines, 2) == []
    assert len(_writes_in_flight(lines, 1)) >= 16


def _innermost_loop(source: str, head: str) -> str:
    """The text of the kernel's loop whose header starts with `head`, to its closing brace."""
    kernel_text = source.split('extern "C"')[1]
    start = kernel_text.index(head)
    depth, end = 0, start
    for end in range(kernel_text.index("{", start), len(kernel_text)):
        depth += {"{": 1, "}": -1}.get(kernel_text[end], 0)
        if depth == 0:
            break
    return kernel_text[start : end + 1]


def _k_loop(source: str) -> str:
    """The text of the kernel's k loop, from its ``for`` to its closing brace."""
    return _innermost_loop(source, "for (int k0 = 0;")


@pytest.mark.parametrize(
    "config",
    [
        WgmmaDequantConfig(block_m=64, min_blocks_per_sm=2),
        WgmmaDequantConfig(
            block_m=56, unroll=2, overlap_dot=True, split_dot=True, min_blocks_per_sm=2
        ),
    ],
    ids=["waited", "chain-in-flight"],
)
def test_a_split_kernel_runs_the_same_k_loop_on_its_part_of_k(config: WgmmaDequantConfig) -> None:
    """Split in two along k, the kernel's k loop covers half the k-tiles and, besides the
    offset of its k-tiles by the block's part, the same statements: no bounds check added,
    the same wgmma calls and waits. After it, each block stores its f32 part and takes one
    ticket on its tile's counter; the unsplit kernel stores C and takes none."""
    whole = lower(wgmma_dequant_matmul(dtypes.i4, 128, config), "sm_90a", constants=LAYER)
    split = replace(config, split=2)
    halves = lower(wgmma_dequant_matmul(dtypes.i4, 128, split), "sm_90a", constants=LAYER)
    loops = [_k_loop(lowered.source) for lowered in (whole, halves)]
    trips = 4096 // config.block_k
    assert f"k0 < {trips};" in loops[0] and f"k0 < {trips // 2};" in loops[1]
    for text in ("if (", "la_wgmma_wait", "wgmma.mma_async", "la_tma_load_2d", "__syncthreads"):
        assert loops[0].count(text) == loops[1].count(text), text
    assert "block_z" not in loops[0] and "block_z * 32" in loops[1]
    assert "la_ticket_add(&" not in whole.source
    assert halves.source.split('extern "C"')[1].count("la_ticket_add(&") == 1
    compile_cuda(halves.source, "sm_90a")


def test_a_stream_k_kernel_runs_the_same_k_loop_per_segment() -> None:
    """With stream-K, the k loop sits in the loop over the block's tiles and runs from the
    segment's first k-tile to its last: the same statements as the unsplit kernel's (no
    bounds check added, the same wgmma calls, waits, copies and barriers). After it, a tile
    the block owns whole is stored, a shared one goes through one ticket; the kernel
    compiles."""
    config = WgmmaDequantConfig(block_m=64, min_blocks_per_sm=2)
    whole = lower(wgmma_dequant_matmul(dtypes.i4, 128, config), "sm_90a", constants=LAYER)
    streamed = replace(config, stream_k=264)
    segments = lower(wgmma_dequant_matmul(dtypes.i4, 128, streamed), "sm_90a", constants=LAYER)
    loops = [
        _innermost_loop(whole.source, "for (int k0 = 0;"),
        _innermost_loop(segments.source, "for (int k1 ="),
    ]
    for text in ("if (", "la_wgmma_wait", "wgmma.mma_async", "la_tma_load_2d", "__syncthreads"):
        assert loops[0].count(text) == loops[1].count(text), text
    kernel_text = segments.source.split('extern "C"')[1]
    assert kernel_text.count("la_ticket_add(&") == 1
    compile_cuda(segments.source, "sm_90a")


def test_a_stream_k_producer_kernel_runs_its_segments_per_warp_class() -> None:
    """Stream-K with the producer warpgroup: the loop over the block's segments holds thread
    groups only, so each class of warps runs it on its own path (the consumers with 232
    registers, the producer with 24), with no block barrier after the barriers' set-up; the
    consumers' loop holds one ticket (`la_ticket_add`); NVRTC takes it."""
    config = WgmmaDequantConfig(
        min_blocks_per_sm=2, stream_k=264, release=True, producer=True, producer_registers=24
    )
    lowered = lower(wgmma_dequant_matmul(dtypes.i4, 128, config), "sm_90a", constants=LAYER)
    kernel_text = lowered.source.split('extern "C"')[1]
    assert "warp-specialised: 2 classes of warps" in kernel_text
    consumers, producer = kernel_text.split("la_registers_decrease<24>();")
    assert "la_registers_increase<232>();" in consumers
    segment_loop = re.compile(r"for \(int k0 = .*block_x")
    assert len(segment_loop.findall(consumers)) == len(segment_loop.findall(producer)) == 1
    assert kernel_text.count("__syncthreads();") == 1
    assert consumers.count("la_ticket_add(&") == 1 and "la_ticket_add(&" not in producer
    assert "la_tma_load_2d" in producer and "la_tma_load_2d" not in consumers
    compile_cuda(lowered.source, "sm_90a", lowered.options)


def test_a_copy_without_a_plan_waits_for_the_copies_before_it(monkeypatch) -> None:
    """Should one copy's dot find no wgmma plan (it then runs on mma.sync), it first waits for
    every wgmma still in flight: the copy before it wrote its registers expecting that wait."""
    compute = importlib.import_module("backend.lower.compute")
    calls = []

    def every_other(*args, **kwargs):
        calls.append(1)
        return None if len(calls) % 2 == 0 else plan_wgmma(*args, **kwargs)

    monkeypatch.setattr(compute, "plan_wgmma", every_other)
    config = WgmmaDequantConfig(units_k=2, unroll=2, overlap_dot=True)
    lowered = lower(wgmma_dequant_matmul(dtypes.i4, 128, config), "sm_90a", constants=LAYER)
    loop = lowered.source.split('extern "C"')[1]
    assert loop.count(WAIT_ALL) == 1
    assert loop.count("la_wgmma_wait_prior();") == 1
    assert loop.index("la_wgmma_wait_prior();") < loop.index(WAIT_ALL)


def test_tiles_filled_by_tma_alone_need_no_proxy_fence(kernel) -> None:
    """The activations reach the tensor cores' shared tiles by TMA (async-proxy writes, seen
    after their barrier's wait): no ``fence.proxy.async``. Copied by the threads
    (``cp.async``, without TMA) they need one before the barrier of the copies' wait, and
    none at the dot or the closing barrier, with nothing written since
    (`backend.proxy_fences`)."""
    assert PROXY_FENCE not in kernel.source.split('extern "C"')[1]
    program = wgmma_dequant_matmul(dtypes.i4, 128, WgmmaDequantConfig())
    threads_copy = lower(program, "sm_90a", constants=LAYER, tma=False).source
    lines = [line.strip() for line in threads_copy.split('extern "C"')[1].splitlines()]
    fence = lines.index(PROXY_FENCE)
    assert lines.count(PROXY_FENCE) == 1
    assert lines[fence - 1] == "la_cp_async_wait<0>();" and lines[fence + 1] == "__syncthreads();"


def test_a_producer_warp_issues_the_copies_and_the_consumers_the_wgmma() -> None:
    """With `producer`: 160 threads a block; every copy by TMA from the producer warp (its own
    warp's condition), the dots as wgmma in the consumer warpgroup (threads 0 .. 127, a hardware
    warpgroup), each free barrier counting the consumers' four warps; no block barrier in the
    k loop; NVRTC takes it and the lowering's claims are proved."""
    config = WgmmaDequantConfig(release=True, producer=True, min_blocks_per_sm=2)
    lowered = lower(
        wgmma_dequant_matmul(dtypes.i4, 128, config), "sm_90a", constants={"n": 512, "k": 512}
    )
    assert lowered.block_threads == 160
    assert any(isinstance(plan, WgmmaPlan) for plan in lowered.plans)
    assert re.search(r"la_mbarrier_init\(&la_free_\w+\[la_i\], 4u\);", lowered.source)
    assert "if ((unsigned)(la_warp" in lowered.source
    assert "< 4u)" in lowered.source and "- 4) < 1u)" in lowered.source
    assert lowered.source.count("__syncthreads();") == 1  # the barriers' initialisation
    assert compile_cuda(lowered.source, "sm_90a", lowered.options).cubin
    report = validate_lowering(lowered)
    assert report.holds is True, (report.failures[:1], report.unknown[:1])


@pytest.mark.parametrize(
    ("warpgroups", "min_blocks", "producer", "consumers", "threads"),
    [(1, 2, 24, 232, 256), (1, 2, 40, 216, 256), (2, 1, 40, 232, 384), (2, 1, 24, 240, 384)],
)
def test_a_producer_warpgroup_gives_its_registers_to_the_consumers(
    warpgroups: int, min_blocks: int, producer: int, consumers: int, threads: int
) -> None:
    """With `producer_registers`: a producer warpgroup (threads 128 W up) keeping that budget,
    the consumer warpgroups the rest of the registers that the launch bounds give (128 a
    thread for 256 threads at two blocks an SM, 168 for 384 at one), in units of 8; the
    kernel is warp-specialised, each class setting its budget first; NVRTC takes it with the
    registers the budgets divide, and the lowering's claims are proved (one warpgroup)."""
    config = WgmmaDequantConfig(
        warpgroups=warpgroups,
        min_blocks_per_sm=min_blocks,
        release=True,
        producer=True,
        producer_registers=producer,
    )
    assert consumer_registers(threads, min_blocks, producer) == consumers
    program = wgmma_dequant_matmul(dtypes.i4, 128, config)
    assert program.num_threads == threads
    groups = {
        (group.start, group.threads, group.registers)
        for group in program.walk()
        if isinstance(group, ThreadGroup)
    }
    assert groups == {(0, threads - 128, consumers), (threads - 128, 128, producer)}
    lowered = lower(program, "sm_90a", constants={"n": 512 * warpgroups, "k": 512})
    source = lowered.source
    assert lowered.register_budget == register_cap(threads, min_blocks)
    assert "warp-specialised: 2 classes of warps" in source
    assert f"la_registers_increase<{consumers}>();" in source
    assert f"la_registers_decrease<{producer}>();" in source
    # On sm_90 (no ``a``: no setmaxnreg) the budgets are requests the kernel does without.
    plain = lower(program, "sm_90", constants={"n": 512 * warpgroups, "k": 512})
    assert plain.register_budget is None and "la_registers_" not in plain.source
    if producer == 24:
        cubin = compile_cuda(source, "sm_90a", lowered.options).cubin
        assert cubin_registers(cubin) == {program.name: lowered.register_budget}
    if (warpgroups, producer) == (1, 24):
        report = validate_lowering(lowered)
        assert report.holds is True, (report.failures[:1], report.unknown[:1])


def test_a_producer_kernel_with_split_k_takes_the_group_s_ticket() -> None:
    """With `producer` and `split`: the consumer warpgroup adds the parts after its ticket,
    which it takes under its own named barrier through a slot of its own (not the block's
    ``__syncthreads``, which the producer warpgroup never reaches); NVRTC takes it and the
    lowering's claims are proved."""
    config = WgmmaDequantConfig(
        release=True, producer=True, producer_registers=24, min_blocks_per_sm=2, split=2
    )
    program = wgmma_dequant_matmul(dtypes.i4, 128, config)
    lowered = lower(program, "sm_90a", constants={"n": 512, "k": 1024})
    body = lowered.source[lowered.source.index('extern "C"') :]
    # In the consumers' class (the first), between two barriers of their 128 threads, the
    # old value read after the second from a slot of the consumers' own.
    consumers = body[: body.index("else if")]
    assert "la_ticket_add(&" not in body[len(consumers) :]
    atomic = consumers.index("la_ticket_add(&")
    barrier = re.findall(r"la_group_barrier\((\d+), 128\);", consumers)
    assert barrier and len(set(barrier)) == 1
    before = consumers.rindex(f"la_group_barrier({barrier[0]}, 128);", 0, atomic)
    after = consumers.index(f"la_group_barrier({barrier[0]}, 128);", atomic)
    slot = re.search(r"(\*\(int\*\)\(la_smem \+ \d+\)) = ", consumers[before : atomic + 200])
    assert slot and f"= {slot.group(1)};" in consumers[after : after + 200]
    assert body.count("__syncthreads();") == 1  # the barriers' initialisation only
    assert compile_cuda(lowered.source, "sm_90a", lowered.options).cubin
    report = validate_lowering(lowered)
    assert report.holds is True, (report.failures[:1], report.unknown[:1])


def test_a_kernel_whose_wgmma_ptxas_serialises_warns(tmp_path) -> None:
    """The producer warpgroup with the dot in flight over k-tiles of 4 steps: two copies'
    dequantized weights do not fit the consumers' 232 registers, and ptxas runs the wgmma one
    after another (measured 93.7 against 63.5 us at 4096 x 12288, M = 256). The compile says
    so, as a `PerformanceWarning` and in `performance_losses`, from NVRTC and from the cache
    alike; with 2 steps a k-tile it fits, and nothing is said."""
    config = WgmmaDequantConfig(
        min_blocks_per_sm=2,
        unroll=2,
        release=True,
        overlap_dot=True,
        producer=True,
        producer_registers=24,
    )
    constants = {"n": 512, "k": 512}
    cache = CubinCache(tmp_path)
    for _ in range(2):  # compiled, then from the cache
        with pytest.warns(PerformanceWarning, match="wgmma.mma_async instructions are serial"):
            kernel = backend.compile(
                wgmma_dequant_matmul(dtypes.i4, 128, config), "sm_90a", constants=constants,
                cache=cache,
            )  # fmt: skip
        assert [loss.split()[0] for loss in kernel.performance_losses] == ["(C7512)"]
    fitting = replace(config, units_k=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        kernel = backend.compile(
            wgmma_dequant_matmul(dtypes.i4, 128, fitting), "sm_90a", constants=constants,
            cache=cache,
        )  # fmt: skip
    assert kernel.performance_losses == ()


@pytest.mark.parametrize("producer", [False, True])
def test_a_release_after_the_next_dot_keeps_the_dot_in_flight(producer: bool) -> None:
    """`release` with `overlap_dot` (the loop unrolled twice): each k-tile's dot stays running
    into the next (``wait_group 1`` in each copy, ``wait_group 0`` once after the loop), and
    each copy releases the stage of the k-tile before it only after its ``wait_group 1``; with
    a producer warpgroup too. Without `overlap_dot` a k-tile releases its own stage and its dot
    is waited for. NVRTC takes the kernels and the lowering's claims are proved."""
    options = {"producer": True, "producer_registers": 24} if producer else {}
    config = WgmmaDequantConfig(
        min_blocks_per_sm=2, unroll=2, release=True, overlap_dot=True, **options
    )
    lowered = lower(wgmma_dequant_matmul(dtypes.i4, 128, config), "sm_90a", constants=LAYER)
    body = lowered.source.split('extern "C"')[1]
    copies = body.split("// copy ")[1:3]
    assert len(copies) == 2
    for copy in copies:
        assert copy.count("la_wgmma_wait_prior();") == 1
        assert copy.index("la_wgmma_wait_prior();") < copy.index("la_mbarrier_arrive(&la_free_")
        assert "la_wgmma_wait();" not in copy.split("// copy_bulk_release")[0]
    assert compile_cuda(lowered.source, "sm_90a", lowered.options).cubin
    report = validate_lowering(lowered)
    assert report.holds is True, (report.failures[:1], report.unknown[:1])
    waited = replace(config, overlap_dot=False)
    source = lower(wgmma_dequant_matmul(dtypes.i4, 128, waited), "sm_90a", constants=LAYER).source
    assert "la_wgmma_wait_prior();" not in source.split('extern "C"')[1]
    if not producer:
        # Without TMA the copies are cp.async and each release a block barrier, placed where
        # the release is: after the copy's wait_group 1 still.
        program = wgmma_dequant_matmul(dtypes.i4, 128, config)
        threads_copy = lower(program, "sm_90a", constants=LAYER, tma=False)
        body = threads_copy.source.split('extern "C"')[1]
        for copy in body.split("// copy ")[1:3]:
            release = copy.index("// copy_bulk_release")
            assert copy.index("la_wgmma_wait_prior();") < release
            assert "__syncthreads();" in copy[release:]
        assert compile_cuda(threads_copy.source, "sm_90a", threads_copy.options).cubin


def test_the_kernel_compiles_for_sm_90a(kernel) -> None:
    compile_cuda(kernel.source, "sm_90a")


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (WgmmaDequantConfig(warpgroups=0), "warpgroups=0; expected an int >= 1"),
        (WgmmaDequantConfig(units_n=True), "units_n=True; expected an int >= 1"),
        (WgmmaDequantConfig(units_k=0), "units_k=0; expected an int >= 1"),
        (WgmmaDequantConfig(depth=1.0), r"depth=1\.0; expected an int >= 1"),
        (WgmmaDequantConfig(stages=1), "stages=1; expected an int from 2 to 8"),
        (WgmmaDequantConfig(stages=9), "stages=9; expected an int from 2 to 8"),
        (WgmmaDequantConfig(min_blocks_per_sm=-1), "min_blocks_per_sm=-1; expected an int >= 0"),
        (WgmmaDequantConfig(block_m=12), "block_m=12; expected a multiple of 8 up to 256"),
        (WgmmaDequantConfig(block_m=264), "block_m=264; expected a multiple of 8 up to 256"),
        (WgmmaDequantConfig(warpgroups=9), "warpgroups=9; a block has at most 8"),
        (WgmmaDequantConfig(overlap_dot=1), "overlap_dot=1 with stages=4; expected a bool"),
        (WgmmaDequantConfig(split_dot="yes"), "split_dot='yes'; expected a bool"),
        (WgmmaDequantConfig(release=1), "release=1; expected a bool"),
        (WgmmaDequantConfig(split=0), "split=0; expected an int >= 1"),
        (
            WgmmaDequantConfig(producer=True),
            "producer=True with release=False; expected a bool, True only with release",
        ),
        (
            WgmmaDequantConfig(producer=1, release=True),
            "producer=1 with release=True; expected a bool",
        ),
        (
            WgmmaDequantConfig(producer_registers=24),
            "producer_registers=24 with producer=False; expected 0, or with producer a "
            "multiple of 8 from 24 to 256",
        ),
        (
            WgmmaDequantConfig(release=True, producer=True, producer_registers=20),
            "producer_registers=20 with producer=True",
        ),
        (
            WgmmaDequantConfig(release=True, producer=True, producer_registers=True),
            "producer_registers=True with producer=True",
        ),
        (WgmmaDequantConfig(stream_k=-1), "stream_k=-1; expected an int >= 0"),
        (
            WgmmaDequantConfig(stream_k=8, split=2),
            "stream_k=8 with split=2; stream-K .* requires split 1",
        ),
        (
            WgmmaDequantConfig(stages=2, overlap_dot=True),
            "overlap_dot=True with stages=2; .* at least 3 stages",
        ),
        (
            WgmmaDequantConfig(staged_store=1),
            "staged_store=1 with block_n=256, block_m=64; expected a bool",
        ),
        (
            WgmmaDequantConfig(units_n=8, staged_store=True),
            "staged_store=True with block_n=2048, .* the 128 consumer threads cover whole rows "
            "of 256 runs of 8 columns",
        ),
        (WgmmaDequantConfig(warp_columns=32), "warp_columns=32; expected 64 or 16"),
        (WgmmaDequantConfig(warp_columns=True), "warp_columns=True; expected 64 or 16"),
    ],
    ids=str,
)
def test_bad_config_is_refused(config: WgmmaDequantConfig, message: str) -> None:
    with pytest.raises(VerificationError, match=f"wgmma_dequant_matmul: {message}"):
        wgmma_dequant_matmul(dtypes.i4, 128, config)


@pytest.mark.parametrize("group_size", [0, 96, 64.0, True])
def test_bad_group_size_is_refused(group_size: object) -> None:
    with pytest.raises(VerificationError, match=re.escape(f"group_size={group_size!r}")):
        wgmma_dequant_matmul(dtypes.i4, group_size, replace(WgmmaDequantConfig(), units_k=4))


@pytest.mark.parametrize("dtype", [dtypes.f16, dtypes.i32], ids=str)
def test_bad_weight_dtype_is_refused(dtype: DataType) -> None:
    with pytest.raises(VerificationError, match=f"packed weights: {dtype} is not a weight type"):
        wgmma_dequant_matmul(dtype)


@pytest.mark.parametrize("dtype", [dtypes.u3, dtypes.i2, dtypes.f6e3m2], ids=str)
def test_a_fragment_tile_of_other_widths_is_refused(dtype: DataType) -> None:
    """Each warp's A fragment must be whole words of the packed lane: 4- and 8-bit weights."""
    with pytest.raises(VerificationError, match=f"warp_columns=16 with {dtype} weights"):
        wgmma_dequant_matmul(dtype, 128, WgmmaDequantConfig(warp_columns=16))


@pytest.mark.parametrize(
    ("config", "block_n", "accumulators"),
    [
        (WgmmaDequantConfig(), 256, 128),
        (WgmmaDequantConfig(warp_columns=16, block_m=256), 64, 128),
        (WgmmaDequantConfig(warp_columns=16, warpgroups=2, block_m=128), 128, 64),
    ],
    ids=str,
)
def test_fragment_tiles_cover_64_columns_a_warpgroup(
    config: WgmmaDequantConfig, block_n: int, accumulators: int
) -> None:
    """The block's columns, and each consumer thread's f32 accumulators in the program's dots
    (the fragment tile: block_m / 2, so 256 rows fit the 64-row tile's 128)."""
    assert config.block_n == block_n
    program = wgmma_dequant_matmul(dtypes.i4, 128, config)
    dots = [i for i in program.walk() if isinstance(i, Dot)]
    assert dots and {dot.c.layout.local_size for dot in dots} == {accumulators}
    assert {dot.c.layout.shape for dot in dots} == {(block_n, config.block_m)}


def test_a_stream_k_grid_needs_k() -> None:
    with pytest.raises(VerificationError, match="WgmmaDequantConfig.grid: a stream_k grid needs k"):
        WgmmaDequantConfig(stream_k=4).grid(1, 256)


def test_a_config_of_another_kind_is_refused() -> None:
    with pytest.raises(VerificationError, match="expected a WgmmaDequantConfig or None"):
        wgmma_dequant_matmul(dtypes.i4, 128, {"block_m": 64})  # type: ignore[arg-type]


def test_panel_waits_wait_for_each_panel_on_its_own_barrier() -> None:
    """With `panel_waits`, the 128-deep k-tile's two panels have a barrier each (the ring's
    bulk copies are no longer completed per stage) and each of the k-tile's two dots waits for
    its own panel just before it: twice the barrier waits and commits of the k-tile written as
    one dot, the same ``wait_group 1`` per k-tile, the dot still in flight into the next
    k-tile, and no register A word written while a wgmma may still read it (the PTX)."""
    base = WgmmaDequantConfig(units_k=8, stages=3, unroll=2, overlap_dot=True, release=True)
    texts = {}
    for panel_waits in (False, True):
        config = replace(base, panel_waits=panel_waits)
        lowered = lower(wgmma_dequant_matmul(dtypes.i8, 128, config), "sm_90a", constants=LAYER)
        (plan,) = [plan for plan in lowered.plans if isinstance(plan, BulkTensorPlan)]
        assert (len(plan.slots), plan.per_stage) == (2, not panel_waits)
        texts[panel_waits] = lowered.source
    for panel_waits, source in texts.items():
        loop = source.split('extern "C"')[1]
        links = 2 if panel_waits else 1
        assert loop.count("la_mbarrier_wait(&la_bar_s0[") == 2 * links
        assert loop.count("la_wgmma_commit();") == 2 * links
        assert loop.count("la_wgmma_wait_prior();") == 2
    assert _writes_in_flight(_ptx(texts[True]), 2) == []

"""Each example program against a plain NumPy formula (bit-exact where the order is fixed)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import dtypes
from ir.errors import VerificationError
from ir.examples.matmul import (
    matmul,
    mma_dot_layouts,
    row_store_layout,
    simt_dot_layouts,
    warp_grid,
)
from ir.examples.quantized_matmul import quantized_matmul, weight_layouts
from ir.examples.softmax import row_softmax
from ir.examples.vector_add import vector_add
from ir.instructions import Dot, ForRange, If, Instruction
from ir.interpreter import run_reference
from ir.placement import dot_is_thread_local
from ir.program import Program
from ir.verifier import verify
from layout_algebra.fragments import fragment
from layout_algebra.register import replicate, spatial


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def test_vector_add_f16_equals_numpy_f16():
    rng = np.random.default_rng(1)
    n = 2500
    x, y = (rng.standard_normal(n).astype(np.float16) * 100 for _ in range(2))
    z = np.full(n + 3, 7, dtype=np.float16)  # three elements past n must stay untouched
    run_reference(vector_add(), n, x, y, z, grid=ceil_div(n, 1024))
    np.testing.assert_array_equal(z[:n].view(np.uint16), (x + y).view(np.uint16))
    np.testing.assert_array_equal(z[n:], 7)


def test_vector_add_u4_wraps_modulo_16():
    rng = np.random.default_rng(2)
    n = 300
    x, y = rng.integers(0, 16, n), rng.integers(0, 16, n)
    z = np.zeros(n // 2, dtype=np.uint8)
    program = vector_add(dtypes.u4, num_threads=32, tile_size=256)
    run_reference(program, n, dtypes.pack(x, dtypes.u4), dtypes.pack(y, dtypes.u4), z, grid=2)
    np.testing.assert_array_equal(dtypes.unpack(z, dtypes.u4, n), (x + y) % 16)


def test_row_softmax_equals_numpy_within_f16_rounding():
    rng = np.random.default_rng(3)
    m, n = 10, 64
    x = (rng.standard_normal((m, n)) * 3).astype(np.float16)
    y = np.zeros_like(x)
    run_reference(row_softmax(n), m, x, y, grid=ceil_div(m, 4))
    exponentials = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    expected = exponentials / exponentials.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(y.astype(np.float64), expected, rtol=2e-3, atol=1e-6)


def sequential_f32_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """acc = f32(acc + a[:, k] * b[k, :]) for k in order, as `dot` defines it; then f16."""
    accumulator = np.zeros((a.shape[0], b.shape[1]), dtype=np.float32)
    for k in range(a.shape[1]):
        accumulator = accumulator + a[:, k : k + 1].astype(np.float32) * b[k].astype(np.float32)
    return accumulator.astype(np.float16)


def dots(body: tuple[Instruction, ...]) -> list[Dot]:
    """Every `Dot` of a program body, loop and if bodies included."""
    found = []
    for instruction in body:
        if isinstance(instruction, Dot):
            found.append(instruction)
        elif isinstance(instruction, (ForRange, If)):
            found += dots(instruction.body)
    return found


def only_dot(program: Program) -> Dot:
    (dot,) = dots(program.body)
    return dot


RINGS = [
    {},
    {"stages": 3},
    {"stages": 4, "swizzle": True},
    {"stages": 3, "wgmma": True},
    {"stages": 3, "overlap_dot": True},
    {"stages": 4, "wgmma": True, "overlap_dot": True},
    {"stages": 3, "bulk": True},
    {"stages": 4, "wgmma": True, "overlap_dot": True, "bulk": True, "group_m": 2},
    {"group_m": 3},
    {"stages": 4, "wgmma": True, "overlap_dot": True, "bulk": True, "producer": True},
    {"stages": 3, "wgmma": True, "bulk": True, "producer": True, "persistent": 3, "group_m": 2},
    {
        "stages": 4,
        "wgmma": True,
        "overlap_dot": True,
        "bulk": True,
        "producer": True,
        "persistent": 2,
    },
    {"stages": 3, "overlap_dot": True, "persistent": 2},
    {"stages": 3, "bulk": True, "persistent": 3},
    {"stages": 3, "staged_store": True},
    {"stages": 4, "wgmma": True, "overlap_dot": True, "bulk": True, "staged_store": True},
    {"stages": 3, "wgmma": True, "bulk": True, "producer": True, "staged_store": True},
    {"stages": 3, "bulk": True, "persistent": 3, "staged_store": True},
]
"""Shared-stage options of the matmul examples: the double buffer, rings of 3 and 4, the
warpgroup form (its dot in wgmma layouts, one per 32-deep k-tile, B in swizzled panels), the
rings ordered for a dot in flight (copies after the dot, S - 2 ahead), rings filled by bulk
copies, tiles taken in groups of tile rows (one group past the two tile rows here), a
producer warp issuing the copies against the consumers' releases, persistent blocks
looping over the four tiles (fewer blocks than tiles, with and without a producer), and C
staged through shared memory (in the ring's memory, and in its own)."""


@pytest.mark.parametrize("ring", RINGS, ids=str)
@pytest.mark.parametrize("tensor_cores", [False, True], ids=["simt", "mma"])
def test_matmul_is_bit_exact_against_the_sequential_formula(tensor_cores, ring):
    rng = np.random.default_rng(4)
    m, n, k = 70, 72, 88  # none a multiple of the 64 x 64 x 32 tile; n, k multiples of 8
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = np.zeros((m, n), dtype=np.float16)
    program = matmul(tensor_cores=tensor_cores, **ring)
    grid = None if ring.get("persistent") else (ceil_div(n, 64), ceil_div(m, 64))
    run_reference(program, m, n, k, a, b, c, grid=grid)
    np.testing.assert_array_equal(c.view(np.uint16), sequential_f32_matmul(a, b).view(np.uint16))
    reference = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), reference, rtol=2e-3, atol=2e-2)


@settings(max_examples=25, deadline=None)
@given(
    tiles_m=st.integers(1, 4),
    tiles_n=st.integers(1, 4),
    persistent=st.integers(1, 7),
    group_m=st.integers(1, 3),
    producer=st.booleans(),
)
def test_persistent_blocks_compute_every_tile(tiles_m, tiles_n, persistent, group_m, producer):
    """However many persistent blocks there are (fewer than the tiles, as many, more) and in
    whatever group order, the blocks between them compute every output tile: C (filled with
    NaN before) equals the sequential formula everywhere, the partial last tile row and column
    included; and the program declares min(persistent, tiles) blocks (the interpreter refuses
    a launch on any other grid)."""
    rng = np.random.default_rng(tiles_m * 100 + tiles_n * 10 + persistent)
    m, n, k = 64 * tiles_m - 6, 64 * tiles_n - 8, 48
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = np.full((m, n), np.nan, dtype=np.float16)
    options = {"wgmma": True, "bulk": True, "producer": True} if producer else {}
    program = matmul(stages=3, persistent=persistent, group_m=group_m, **options)
    grid = (min(persistent, tiles_m * tiles_n), 1)
    run_reference(program, m, n, k, a, b, c, grid=grid)
    np.testing.assert_array_equal(c.view(np.uint16), sequential_f32_matmul(a, b).view(np.uint16))


WEIGHT_DTYPES = [
    dtypes.u1,
    dtypes.u2,
    dtypes.u4,
    dtypes.u8,
    dtypes.i3,
    dtypes.i4,
    dtypes.i8,
    dtypes.f4e2m1,
    dtypes.f6e3m2,
    dtypes.f8e4m3,
]


@pytest.mark.parametrize(
    ("weight_dtype", "tensor_cores", "ring"),
    [(dtype, False, {}) for dtype in WEIGHT_DTYPES]
    + [(dtypes.u4, True, {}), (dtypes.f4e2m1, True, {})]
    + [(dtypes.i3, False, {"stages": 2}), (dtypes.u4, True, {"stages": 3, "swizzle": True})]
    + [(dtypes.i4, True, {"stages": 3, "wgmma": True})]
    + [(dtypes.u4, False, {"stages": 3, "overlap_dot": True})]
    + [(dtypes.i4, True, {"stages": 4, "wgmma": True, "overlap_dot": True})],
    ids=str,
)
def test_quantized_matmul_against_dequantize_then_matmul(weight_dtype, tensor_cores, ring):
    rng = np.random.default_rng(weight_dtype.nbits)
    m, n, k, group = 33, 72, 72, 32
    a = rng.standard_normal((m, k)).astype(np.float16)
    codes = rng.integers(0, 1 << weight_dtype.nbits, (k, n))
    if weight_dtype.has_nan:
        codes = np.where(np.isnan(weight_dtype.decode(codes)), 0, codes)
    scales = (rng.random((ceil_div(k, group), n)) + 0.25).astype(np.float16)
    c = np.zeros((m, n), dtype=np.float16)
    program = quantized_matmul(weight_dtype, group_size=group, tensor_cores=tensor_cores, **ring)
    weights = dtypes.pack(codes, weight_dtype)
    run_reference(program, m, n, k, a, weights, scales, c, grid=(ceil_div(n, 64), 1))
    weight_values = weight_dtype.decode(codes).astype(np.float64)
    group_scales = np.repeat(scales.astype(np.float64), group, axis=0)[:k]
    reference = a.astype(np.float64) @ (weight_values * group_scales)
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(weight_values * group_scales)
    # f16 rounding of each dequantized weight and of the output, f32 accumulation.
    assert np.all(np.abs(c - reference) <= 2.0**-10 * magnitude + 2.0**-10 * np.abs(reference))
    dequantized = (weight_values * group_scales).astype(np.float32).astype(np.float16)
    np.testing.assert_array_equal(
        c.view(np.uint16), sequential_f32_matmul(a, dequantized).view(np.uint16)
    )


def test_simt_dot_layouts_hold_what_the_dot_combines():
    a, b, c = simt_dot_layouts(128, 64, 64, 8)
    assert (a.shape, b.shape, c.shape) == ((64, 8), (8, 64), (64, 64))
    # Thread 9 = (row 1, column 1) holds c rows 4..7, columns 8..15, and exactly those rows of a
    # and columns of b.
    assert {tuple(x) for x in c.table()[9]} == {(r, q) for r in range(4, 8) for q in range(8, 16)}
    assert {x[0] for x in a.table()[9]} == set(range(4, 8))
    assert {x[1] for x in b.table()[9]} == set(range(8, 16))


@pytest.mark.parametrize(("warps", "grid"), [(1, (1, 1)), (2, (1, 2)), (4, (2, 2)), (8, (2, 4))])
def test_warp_grid(warps, grid):
    assert warp_grid(warps) == grid


def test_mma_dot_layouts_literal():
    # 4 warps as 2 x 2 over a 64 x 64 accumulator, k slice 32: each warp 2 x 4 tiles of 16 x 8
    # and 2 k steps of 16.
    f_a, f_b, f_c = (fragment(f"mma.m16n8k16.{x}").layout for x in "abc")
    a, b, c = mma_dot_layouts(128, 64, 64, 32)
    assert c == spatial(2, 2).local(2, 4) * f_c
    assert a == (spatial(2, 1) * replicate(2)).local(2, 2) * f_a
    assert b == (replicate(2) * spatial(1, 2)).local(2, 4) * f_b
    assert (a.shape, b.shape, c.shape) == ((64, 32), (32, 64), (64, 64))
    # Thread 0 (warp 0, lane 0) holds c[0, 0], c[0, 1], c[8, 0], c[8, 1] of its first tile.
    assert [tuple(x) for x in c.table()[0, :4]] == [(0, 0), (0, 1), (8, 0), (8, 1)]


@pytest.mark.parametrize(
    "program",
    [matmul(tensor_cores=True), quantized_matmul(dtypes.u4, tensor_cores=True)],
    ids=["matmul", "quantized_matmul"],
)
def test_mma_examples_verify_with_a_warp_collective_dot(program):
    assert verify(program) is program
    assert not dot_is_thread_local(only_dot(program))


@pytest.mark.parametrize("program", [matmul(), quantized_matmul()], ids=["matmul", "q_matmul"])
def test_simt_examples_have_a_thread_local_dot(program):
    assert dot_is_thread_local(only_dot(program))


def test_weight_layouts_put_one_chunk_of_bytes_under_eight_weights():
    byte_layout, weight_layout = weight_layouts(dtypes.i3, 128, 32, 64)
    assert byte_layout.shape == (32, 24) and weight_layout.shape == (32, 64)
    assert byte_layout.local_size * 8 == weight_layout.local_size * 3


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: vector_add(tile_size=1000), "tile_size 1000 must be a multiple of num_threads"),
        (lambda: row_softmax(n_cols=0), "n_cols 0 must be a positive int"),
        (lambda: row_softmax(num_threads=48), "num_threads 48 must be a multiple of 32"),
        (lambda: matmul(inner_k=5), "inner_k 5 must divide block_k 32"),
        (
            lambda: matmul(stages=2, overlap_dot=True),
            "matmul: overlap_dot=True with stages=2; expected a bool, True only with at least 3",
        ),
        (
            lambda: quantized_matmul(stages=3, overlap_dot="yes"),
            "quantized_matmul: overlap_dot='yes' with stages=3; expected a bool",
        ),
        (lambda: matmul(block_n=60), "block_n 60 must be a multiple of 8"),
        (lambda: matmul(block_m=24), "block_m 24 must be a multiple of the 16 thread rows"),
        (lambda: quantized_matmul(group_size=48), "group_size 48 must be a multiple of 32"),
        (lambda: quantized_matmul(dtypes.f16), "at most 8 bits, got f16"),
        (lambda: quantized_matmul(block_k=8), "block_k 8 must be a multiple of 16"),
        (lambda: matmul(stages=1), "matmul: stages=1; expected an int from 2 to 8"),
        (lambda: quantized_matmul(stages=9), "quantized_matmul: stages=9; expected an int from"),
        (lambda: matmul(swizzle=1), "matmul: swizzle=1; expected True or False"),
        (lambda: matmul(group_m=0), "matmul: group_m=0; expected an int >= 1"),
        (
            lambda: matmul(stages=3, wgmma=True, producer=True),
            "matmul: producer=True with wgmma=True, bulk=False; expected a bool, True only",
        ),
        (
            lambda: matmul(bulk=True, producer=1),
            "matmul: producer=1 with wgmma=False, bulk=True; expected a bool",
        ),
        (lambda: matmul(persistent=-1), r"matmul: persistent=-1; expected an int >= 0"),
        (lambda: matmul(persistent=True), r"matmul: persistent=True; expected an int >= 0"),
        (lambda: matmul(staged_store=1), "matmul: staged_store=1; expected True or False"),
        (
            lambda: row_store_layout(128, 64, 24),
            r"block_n 24 must be a multiple of 8 whose runs \(3\) divide num_threads 128",
        ),
        (
            lambda: row_store_layout(256, 4, 256),
            "block_m 4 must be a multiple of the 8 rows a pass",
        ),
        (
            lambda: quantized_matmul(swizzle=True),
            "quantized_matmul: swizzle=True with stages=1; expected a bool, True only with a ring",
        ),
        (
            lambda: matmul(num_threads=48, tensor_cores=True),
            "num_threads 48 must be a positive multiple of 32 for mma",
        ),
        (
            lambda: matmul(tensor_cores=True, inner_k=8),
            r"block \(64, 64\) with inner_k 8 must split into 2 x 2 warps of whole 16 x 8 x 16",
        ),
        (
            lambda: quantized_matmul(block_m=16, tensor_cores=True),
            r"block \(16, 64\) with inner_k 16 must split into 2 x 2 warps",
        ),
    ],
)
def test_example_parameter_errors(build, message):
    with pytest.raises(VerificationError, match=message):
        build()


@pytest.mark.parametrize(
    ("threads", "block", "table"),
    [
        # (thread, register) -> (row, column): 8 columns a thread, whole rows a warp.
        (256, (128, 256), {(0, 0): (0, 0), (0, 7): (0, 7), (1, 0): (0, 8), (32, 0): (1, 0)}),
        (256, (128, 256), {(0, 8): (8, 0), (255, 127): (127, 255)}),
        (128, (64, 64), {(8, 0): (1, 0), (0, 8): (16, 0), (127, 31): (63, 63)}),
    ],
)
def test_row_store_layout_table(threads, block, table):
    layout = row_store_layout(threads, *block)
    assert layout.shape == block and layout.num_threads == threads
    assert {key: layout.map(*key) for key in table} == table


@pytest.mark.parametrize("n_cols", [1, 48, 100])
def test_softmax_of_rows_of_any_length(n_cols: int) -> None:
    """Rows that are not a multiple of 32 long: the tile's columns past the row read -inf, so
    neither the max nor the sum sees them (a row of negative numbers included)."""
    rng = np.random.default_rng(n_cols)
    m = 5
    x = (-rng.uniform(1, 4, (m, n_cols))).astype(np.float16)
    y = np.zeros((m, n_cols), np.float16)
    run_reference(row_softmax(n_cols), m, x, y, grid=2)
    values = x.astype(np.float64)
    expected = np.exp(values - values.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(y.astype(np.float64), expected, rtol=2e-3, atol=1e-4)

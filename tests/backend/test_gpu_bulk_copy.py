"""Bulk copies on the GPU (marked `gpu`): TMA copies against the interpreter, bit for bit.

Rings of shared stages filled by `copy_bulk` and read back by every thread after
`copy_bulk_wait`, for 8-, 16- and 32-bit elements, with and without a swizzle, whole stages and
64-column slots, at row counts that leave a partial last tile (the tensor map fills zeros); on an
sm_90 GPU each copy must have become a bulk tensor copy (the kernel has tensor maps); each
launch (two row counts) encodes its own map. A ring of A^T tiles (test_bulk_copy.py's
`transposed_ring`: a permuted view, its box k innermost, over 3 stages and 2 blocks of partial
tokens and k) gives NumPy's transpose; test_bulk_copy.py lowers and proves it and compiles it
for sm_90a without a GPU. The matmul example's bulk forms run through `gpu_examples_main` (the
differential test and the sanitizers).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import backend
from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.examples.matmul import wgmma_b_buffer
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial
from layout_algebra.shared import shared_row_major, shared_row_major_swizzle

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

ROWS = 32

if "bulk_copy_tests" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "bulk_copy_tests", Path(__file__).with_name("test_bulk_copy.py")
    )
    sys.modules["bulk_copy_tests"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["bulk_copy_tests"])
bulk_copy_tests = sys.modules["bulk_copy_tests"]


def ring(dtype, columns: int, layout, slot: int, release: bool = False, rows: int = ROWS):
    """Copies row tile t of x (m, columns) into stage t % 2, in `slot`-column copies, waits,
    and stores the stage to y through a layout of whole rows per thread (`rows` threads), then
    a barrier, or with `release` a release of the stage."""
    with ProgramBuilder("bulk_ring", rows) as b:
        m = b.int_param("m")
        shape = GlobalLayout((m, columns), (columns, 1))
        x = b.global_view(b.array_param("x", dtype), dtype, shape)
        y = b.global_view(b.array_param("y", dtype), dtype, shape)
        buffer = b.shared_tensor(dtype, layout)
        with b.for_range((m + rows - 1) // rows) as t:
            stage = t % 2
            for first in range(0, columns, slot):
                b.copy_bulk(buffer, x, [t * rows, first], [stage, 0, first], shape=(rows, slot))
            b.copy_bulk_wait(buffer, [stage, 0, 0], shape=(rows, columns))
            tile = b.load_shared(buffer, spatial(rows, 1).local(1, columns), [stage, 0, 0])
            b.store_global(y, tile, [t * rows, 0])
            if release:
                b.copy_bulk_release(buffer, [stage, 0, 0], shape=(rows, columns))
            else:
                b.sync()
    return b.program()


CASES = {
    "f16-128B-swizzle": (
        dtypes.f16,
        64,
        shared_row_major_swizzle(2, ROWS, 64, element_bits=16),
        64,
    ),
    "f16-64-column-slots": (dtypes.f16, 128, wgmma_b_buffer(ROWS, 128, 2), 64),
    "u8-no-swizzle": (dtypes.u8, 64, shared_row_major(2, ROWS, 64), 64),
    "f32-64B-swizzle": (dtypes.f32, 16, shared_row_major_swizzle(2, ROWS, 16, element_bits=32), 16),
}


def _compiled(program):
    """`program` compiled for this GPU, with tensor maps exactly where it is an sm_90."""
    kernel = backend.compile(program)
    major, _ = torch.cuda.get_device_capability()
    assert (len(kernel.lowered.tensor_maps) > 0) == (major >= 9)
    return kernel


def _interpreter_and_gpu(program, kernel, ints: tuple[int, ...], x: np.ndarray, grid: int):
    """y of ``program(*ints, x, y)`` (y zeros; unsigned codes) from the interpreter and from
    the GPU."""
    expected = np.zeros_like(x)
    run_reference(program, *ints, x, expected, grid=grid)
    signed = {1: np.uint8, 2: np.int16, 4: np.int32}[x.itemsize]  # torch's storage types
    device_x = torch.from_numpy(x.view(signed)).cuda()
    device_y = torch.zeros_like(device_x)
    kernel(*ints, device_x, device_y, grid=grid)
    torch.cuda.synchronize()
    return expected, device_y.cpu().numpy().view(x.dtype)


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_bulk_ring_matches_the_interpreter_bit_for_bit(case: str) -> None:
    dtype, columns, layout, slot = CASES[case]
    program = ring(dtype, columns, layout, slot)
    kernel = _compiled(program)
    numpy_type = {8: np.uint8, 16: np.uint16, 32: np.uint32}[dtype.nbits]
    for m in (3 * ROWS + 5, ROWS - 7):
        rng = np.random.default_rng(m)
        x = rng.integers(0, 1 << dtype.nbits, m * columns, dtype=np.int64).astype(numpy_type)
        expected, got = _interpreter_and_gpu(program, kernel, (m,), x, 1)
        np.testing.assert_array_equal(expected, x)
        np.testing.assert_array_equal(got, expected)


RELEASED_CASES = {
    # One arrival per warp; 64-column slots, two free barriers a stage.
    "warps": (dtypes.f16, 128, wgmma_b_buffer(ROWS, 128, 2), 64, ROWS),
    # 48 threads, not whole warps: every thread arrives.
    "threads": (dtypes.u8, 64, shared_row_major(2, 48, 64), 64, 48),
}


def _check_laps(program, dtype, columns: int, rows: int) -> None:
    """A ring program copying x (m, columns) to y on the GPU and in the interpreter, for m of
    3 and 41 tiles of `rows` rows and a few (each a copy of x)."""
    kernel = _compiled(program)
    numpy_type = {8: np.uint8, 16: np.uint16}[dtype.nbits]
    for m in (3 * rows + 5, 41 * rows + 1):
        rng = np.random.default_rng(m)
        x = rng.integers(0, 1 << dtype.nbits, m * columns, dtype=np.int64).astype(numpy_type)
        expected, got = _interpreter_and_gpu(program, kernel, (m,), x, 1)
        np.testing.assert_array_equal(expected, x)
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("case", list(RELEASED_CASES), ids=list(RELEASED_CASES))
def test_a_released_ring_matches_the_interpreter_bit_for_bit(case: str) -> None:
    """Stages released to their next copies, over 2 to 21 laps of the ring's free barriers."""
    dtype, columns, layout, slot, rows = RELEASED_CASES[case]
    program = ring(dtype, columns, layout, slot, release=True, rows=rows)
    _check_laps(program, dtype, columns, rows)


PRODUCER_CASES = {
    # A producer warp two tiles ahead of one consumer warp, 128-byte swizzled f16 stages.
    "f16-3-stages": (dtypes.f16, 64, 3, 32),
    # One tile ahead of two consumer warps (two arrivals a free barrier), u8 rows.
    "u8-2-stages": (dtypes.u8, 64, 2, 64),
}


@pytest.mark.parametrize("case", list(PRODUCER_CASES), ids=list(PRODUCER_CASES))
def test_a_producer_warp_ring_matches_the_interpreter_bit_for_bit(case: str) -> None:
    """`thread_group`s: a producer warp's bulk copies run ahead of their consumers, held back
    by the consumers' releases alone (test_bulk_copy.py's `producer_ring`), over up to 41
    laps of the ring."""
    dtype, columns, stages, rows = PRODUCER_CASES[case]
    layout = (
        shared_row_major_swizzle(stages, rows, columns, element_bits=16)
        if dtype.nbits == 16
        else shared_row_major(stages, rows, columns)
    )
    program = bulk_copy_tests.producer_ring(dtype, layout, columns, stages, rows)
    major, _ = torch.cuda.get_device_capability()
    if major < 9:
        pytest.skip("bulk copies between thread groups need TMA (sm_90)")
    _check_laps(program, dtype, columns, rows)


def test_transposed_ring_matches_the_interpreter_bit_for_bit() -> None:
    program = bulk_copy_tests.transposed_ring()
    kernel = _compiled(program)
    for m, k in bulk_copy_tests.TRANSPOSED_SIZES:
        _, _, x, _ = bulk_copy_tests.transposed_arguments(m, k)
        expected, got = _interpreter_and_gpu(program, kernel, (m, k), x, -(-m // 64))
        np.testing.assert_array_equal(expected.reshape(k, m), x.reshape(m, k).T)
        np.testing.assert_array_equal(got, expected)

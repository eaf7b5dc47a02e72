"""A reduction whose reduced threads lie in different warps, used by every thread afterwards,
run through the CPU emulation of `tests/backend/test_lower_emulated.py` (g++ against a CUDA
shim).

The tile is (4, 128) float32 spread by ``spatial(2, 64).local(2, 2)``: threads t and t + 64
hold the two halves of each column, so the column sums combine two warps through shared
scratch. Subtracting the sums from the tile makes every thread's copy of the sum visible, not
only the one of the thread that stores a replicated result. The inputs are small integers, so
every sum is exact and the expected output is written directly with NumPy.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from backend.lower import lower
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.interpreter import run_reference
from ir.program import Program
from layout_algebra import GlobalLayout, spatial

_spec = importlib.util.spec_from_file_location(
    "lower_emulated", Path(__file__).parent / "test_lower_emulated.py"
)
emulated = importlib.util.module_from_spec(_spec)
sys.modules["lower_emulated"] = emulated
_spec.loader.exec_module(emulated)

ROWS, COLUMNS = 4, 128


def centred_columns(reduction: str) -> Program:
    """y = x - reduce(x, dim 0) (kept as a row and broadcast), for a (4, 128) float32 x."""
    layout = spatial(2, 64).local(2, 2)
    with ProgramBuilder("centre", layout.num_threads) as b:
        x, y = b.array_param("x", dtypes.f32), b.array_param("y", dtypes.f32)
        view = GlobalLayout((ROWS, COLUMNS), (COLUMNS, 1))
        tile = b.load_global(b.global_view(x, dtypes.f32, view), [0, 0], layout)
        reduced = b.reduce(tile, 0, reduction, keepdim=True)
        b.store_global(b.global_view(y, dtypes.f32, view), b.sub(tile, reduced), [0, 0])
    return b.program()


REDUCTIONS = {
    "sum": lambda x: x.sum(axis=0, keepdims=True),
    "max": lambda x: x.max(axis=0, keepdims=True),
    "min": lambda x: x.min(axis=0, keepdims=True),
}


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory, cxx_compiler: str):
    kernels = [lower(centred_columns(name), emulated.EMULATED_ARCH) for name in REDUCTIONS]
    return emulated._emulator(kernels, tmp_path_factory, cxx_compiler)


def test_the_reduction_goes_through_shared_scratch() -> None:
    kernel = lower(centred_columns("sum"), emulated.EMULATED_ARCH)
    assert kernel.shared_bytes > 0
    assert "__syncthreads();" in kernel.source


@pytest.mark.parametrize("index", range(len(REDUCTIONS)), ids=list(REDUCTIONS))
def test_every_thread_sees_the_cross_warp_result(emulator, index: int) -> None:
    name, reduce = list(REDUCTIONS.items())[index]
    rng = np.random.default_rng(index)
    x = rng.integers(-8, 9, (ROWS, COLUMNS)).astype(np.float32)
    expected = x - reduce(x)
    reference = np.zeros_like(x)
    run_reference(centred_columns(name), x.copy(), reference)
    np.testing.assert_array_equal(reference, expected)
    actual = np.zeros_like(x)
    emulator.run(index, [x.copy(), actual], (1,))
    np.testing.assert_array_equal(actual, expected)

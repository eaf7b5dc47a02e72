"""Bulk copies shared by the blocks of a cluster, on the GPU (marked `gpu`).

test_cluster_copies.py's producer ring in clusters of two blocks along x (each block issues one
32-row half of every 64-row tile into both blocks' rings, TMA multicast; the free barriers count
both blocks' consumer warps) against the interpreter bit for bit, over many laps of the ring; and
the prefill program's 128 x 256 tile with `cluster_n` 2 (plain, in groups of tile rows, with k
split in two) against the interpreter within the tensor cores' rounding, as
test_gpu_wgmma_dequant.py runs its other forms. Every kernel here must have shared its copies.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import backend
from ir import dtypes, run_reference
from ir.examples.wgmma_dequant_matmul import wgmma_dequant_matmul

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def _load(name: str, file: str):
    """A sibling test module, loaded once under `name` (the tests are not a package)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(file))
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


cluster_tests = _load("cluster_copies_tests", "test_cluster_copies.py")
prefill_tests = _load("gpu_wgmma_dequant_tests", "test_gpu_wgmma_dequant.py")


@pytest.mark.parametrize(("stages", "tiles"), [(2, 1), (2, 17), (3, 40)])
def test_a_shared_ring_matches_the_interpreter(stages: int, tiles: int) -> None:
    program = cluster_tests.clustered_ring(stages=stages)
    kernel = backend.compile(program)
    assert "la_tma_multicast_2d(s0" in kernel.source
    rows = 64 * 3 * 2 * 64
    x = np.random.default_rng(tiles).integers(0, 2**14, (rows, 64)).astype(np.uint16)
    # Rows no block writes keep what they held.
    expected = np.full_like(x, 0xBC00)
    y = torch.from_numpy(expected.view(np.int16)).cuda().view(torch.float16)
    run_reference(program, tiles, x, expected)
    device_x = torch.from_numpy(x.view(np.int16)).cuda().view(torch.float16)
    kernel(tiles, device_x, y)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(y.view(torch.int16).cpu().numpy().view(np.uint16), expected)


@pytest.mark.parametrize(
    ("fields", "k_tiles"),
    [
        ({"cluster_n": 2, "staged_store": True, "depth": 1, "refill_in_place": True}, 24),
        ({"cluster_n": 2, "staged_store": True, "group_m": 4}, 6),
        ({"cluster_n": 2, "split": 2}, 12),
        (
            {"cluster_n": 2, "staged_store": True, "depth": 1, "refill_in_place": True}
            | {"units_n": 2, "block_m": 128, "units_k": 4, "stages": 4},
            12,
        ),
    ],
    ids=["staged-refilled", "grouped", "split", "wide-staged-refilled"],
)
def test_the_clustered_prefill_tile_matches_the_interpreter(fields, k_tiles: int) -> None:
    """Two row tiles (the second partial) by four column tiles, two clusters of two a row."""
    config = replace(prefill_tests.BATCH_TILE, **fields)
    n, k = 4 * config.block_n, k_tiles * config.block_k
    m = config.block_m + 37
    program = wgmma_dequant_matmul(dtypes.i4, prefill_tests.GROUP_SIZE, config)
    kernel = backend.compile(program, constants={"n": n, "k": k})
    assert "la_tma_multicast_2d(s" in kernel.source
    failure = prefill_tests._run(
        program, kernel, config, dtypes.i4, dtypes.f16, False, 3, k=k, m=m, n=n
    )
    assert failure is None, failure

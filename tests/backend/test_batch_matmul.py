"""`backend.batch_matmul`: the paths above the decode rows and their tuned choice, without a GPU.

- Exact tables: the tile program of each path (the dequantization kernel, the prefill matmul
  with its configuration) and the launches it takes.
- Tuning: the fastest path wins (a fake measure, NVRTC compiling for sm_90a); a warm second
  tuning measures nothing and builds the recorded choice; a path that does not fit the problem
  (the prefill kernel's 64-deep k-tiles at group size 32) is pruned, and dequantize-then-matmul
  remains.
- The split prefill kernel's launch: its workspace (the f32 parts and the tile counters,
  zeroed once and reused, regrown for more tiles) and its parameters.
- Errors: a path of another kind, or with a field no configuration has, names itself.
The GPU runs (results against torch, `QuantizedLinear` above the decode rows) are in
tests/backend/test_gpu_quantized_linear.py.
"""

from __future__ import annotations

import pytest

from backend.autotune import PRUNING_ERRORS
from backend.batch_matmul import (
    BATCH_PATHS,
    DEQUANTIZE,
    BatchMatmul,
    batch_paths,
    batch_program,
    split_workspace,
)
from backend.cache import RecordStore
from backend.decode_matmul import DecodeProblem, TileCounters
from ir import dtypes
from ir.errors import SpecializationError, VerificationError
from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig

PROBLEM = DecodeProblem(dtypes.i4, 128, 256, 256)
"""A small layer: K = 256 (two groups), N = 256 (one column block)."""


def test_each_path_is_its_program() -> None:
    dequantize = batch_program(PROBLEM, DEQUANTIZE)
    assert dequantize.name == "dequantize_i4_weights"
    prefill = batch_program(PROBLEM, BATCH_PATHS[1])
    assert prefill.name.startswith("wgmma_dequant_matmul")
    assert [p.name for p in prefill.params] == ["m", "n", "k", "a", "packed", "scales", "c"]
    assert {p.name: p.value for p in prefill.params if p.name in ("n", "k")} == {
        "n": 256,
        "k": 256,
    }


def _tune(tmp_path, times: dict[int, float], problem: DecodeProblem = PROBLEM):
    """Tune `problem` at M = 256 for sm_90a with a fake measure: `times` by a path's index in
    `BATCH_PATHS`; returns the operation and the indices measured."""
    measured = []

    def measure(operation: BatchMatmul) -> float:
        index = BATCH_PATHS.index(operation.path)
        measured.append(index)
        return times[index]

    operation = BatchMatmul.tuned(
        problem,
        256,
        measure=measure,
        store=RecordStore(tmp_path),
        arch="sm_90a",
        gpu_name="a test GPU",
        progress=False,
    )
    return operation, measured


TIMES = {0: 80.0, 1: 70.0, 2: 68.0, 3: 65.0, 4: 66.0, 5: 67.0, 6: 69.0, 7: 71.0, 8: 72.0}
TIMES.update({9: 73.0, 10: 74.0, 11: 75.0, 12: 76.0, 13: 77.0})
"""Measured times by path: the 128 x 256 tile with 128-deep k-tiles fastest."""
COLUMNS_192 = [7]
"""The path of 192 x 128 tiles: N = 256 is not a multiple of its columns, so it is pruned at
`PROBLEM`."""
SPLIT_TAIL = [12]
"""The path whose last partial wave is split in two: its parts are whole runs of two 128-deep
k-tiles, so K = 256 (`PROBLEM`'s) does not fit it and it is pruned there."""


def test_the_fastest_path_wins_and_a_warm_tuning_measures_nothing(tmp_path) -> None:
    operation, measured = _tune(tmp_path, TIMES)
    pruned = COLUMNS_192 + SPLIT_TAIL
    assert sorted(measured) == [i for i in range(len(BATCH_PATHS)) if i not in pruned]
    assert operation.path == dict(BATCH_PATHS[3]) and operation.launches == 1
    assert operation.prefill.warp_columns == 16 and operation.prefill.block_n == 128
    assert operation.kernel.program.num_threads == 384  # two consumer warpgroups, a producer
    assert operation.tuning is not None and not operation.tuning.from_cache
    again, measured = _tune(tmp_path, {})  # a measure would fail: none is asked
    assert measured == [] and again.path == operation.path and again.tuning.from_cache


def test_the_64_row_producer_warpgroup_wins_where_it_is_faster(tmp_path) -> None:
    operation, _ = _tune(tmp_path, {**TIMES, 1: 63.0})
    assert operation.path == dict(BATCH_PATHS[1]) and operation.launches == 1
    assert operation.prefill.producer_registers == 24
    assert operation.kernel.program.num_threads == 256


@pytest.mark.parametrize(("index", "block_n"), [(2, 256), (4, 128), (10, 128)])
def test_a_split_kernel_wins_where_it_is_faster(tmp_path, index: int, block_n: int) -> None:
    operation, _ = _tune(tmp_path, {**TIMES, index: 60.0})
    assert operation.path == dict(BATCH_PATHS[index]) and operation.prefill.split == 2
    assert operation.prefill.refill_in_place == (index == 10)
    assert operation.prefill.producer_registers == 24 and operation.prefill.block_n == block_n
    assert [p.name for p in operation.kernel.program.params][-3:] == ["partial", "counters", "c"]


def test_the_staged_store_wins_where_it_is_faster(tmp_path) -> None:
    operation, _ = _tune(tmp_path, {**TIMES, 5: 60.0})
    assert operation.path == dict(BATCH_PATHS[5]) and operation.prefill.staged_store


@pytest.mark.parametrize(
    ("index", "n", "tile", "threads", "in_place"),
    [
        (6, 256, (128, 128), 384, False),
        (7, 384, (192, 128), 512, True),
        (8, 256, (128, 256), 384, True),
        (9, 256, (128, 128), 384, True),
        (11, 256, (128, 256), 384, True),
    ],
)
def test_a_later_tile_wins_where_it_is_faster(
    tmp_path, index: int, n: int, tile: tuple[int, int], threads: int, in_place: bool
) -> None:
    """The 128 x 128 tile (two consumer warpgroups), the 192 x 128 tile (three), the staged
    128 x 256 tile with its weights refilled in place, the 128 x 128 tile refilled in place
    and the staged refilled tile launched in groups of 4 tile rows, all with C staged and
    128-deep k-tiles; the 192-column one is measured where it divides N (384), pruned where
    it does not (256)."""
    problem = DecodeProblem(dtypes.i4, 128, 256, n)
    operation, measured = _tune(tmp_path, {**TIMES, index: 60.0}, problem)
    assert operation.path == dict(BATCH_PATHS[index])
    config = operation.prefill
    assert (config.block_n, config.block_m, config.block_k) == (*tile, 128)
    assert config.staged_store and config.overlap_dot
    assert config.refill_in_place == in_place and config.depth == (1 if in_place else 2)
    assert config.group_m == (4 if index == 11 else 1)
    assert operation.kernel.program.num_threads == threads  # the consumers and a producer
    assert set(COLUMNS_192).issubset(measured) == (n % 192 == 0)


def test_the_split_tail_wins_where_it_is_faster(tmp_path) -> None:
    """The staged refilled 128 x 256 tile with its last partial wave split in two, on waves of
    the H200's 132 SMs (the tuner's default without a GPU), K = 512 (two runs of two
    k-tiles); measured beside every other path that fits."""
    problem = DecodeProblem(dtypes.i4, 128, 512, 256)
    operation, measured = _tune(tmp_path, {**TIMES, 12: 60.0}, problem)
    assert operation.path == dict(BATCH_PATHS[12]) and 12 in measured
    config = operation.prefill
    assert (config.split, config.tail_wave, config.granule) == (2, 132, 2)
    assert config.staged_store and config.refill_in_place and config.block_n == 128
    program = operation.kernel.program
    assert program.hoist_invariants
    assert [p.name for p in program.params][-3:] == ["partial", "counters", "c"]


def test_the_split_tail_s_wave_is_the_gpu_s() -> None:
    """`batch_paths`: the split-tail path's wave is the SMs asked for, every other path as in
    `BATCH_PATHS`; a count that is not a positive int is refused."""
    paths = batch_paths(114)
    assert [i for i, p in enumerate(paths) if p != BATCH_PATHS[i]] == SPLIT_TAIL
    assert paths[12] == {**BATCH_PATHS[12], "tail_wave": 114}
    assert batch_paths() == BATCH_PATHS
    for bad in (0, -3, 1.5, True):
        with pytest.raises(VerificationError, match=f"sm_count={bad!r}; expected an int >= 1"):
            batch_paths(bad)


def test_dequantize_then_matmul_wins_where_it_is_faster(tmp_path) -> None:
    operation, _ = _tune(tmp_path, {**TIMES, 0: 50.0})
    assert operation.path == DEQUANTIZE and operation.launches == 2
    assert operation.prefill is None


def test_a_path_that_does_not_fit_is_pruned(tmp_path) -> None:
    """Group size 32: the prefill kernel's k-tiles of 64 would span two groups."""
    problem = DecodeProblem(dtypes.i4, 32, 256, 256)
    with pytest.raises(VerificationError, match="group_size=32"):
        batch_program(problem, BATCH_PATHS[1])
    operation, measured = _tune(tmp_path, {0: 90.0}, problem)
    assert measured == [0] and operation.path == DEQUANTIZE
    statuses = sorted(trial.status for trial in operation.tuning.trials)
    assert statuses == ["measured"] + ["pruned"] * (len(BATCH_PATHS) - 1)


@pytest.mark.parametrize(
    ("weight", "group_size", "pruned"),
    [
        (dtypes.u3, 128, [3, 4, 5, 6, *COLUMNS_192, 8, 9, 10, 11, *SPLIT_TAIL, 13]),
        (dtypes.i8, 64, [3, 4, 5, 6, *COLUMNS_192, 8, 9, 10, 11, *SPLIT_TAIL, 13]),
        (dtypes.u4, 128, COLUMNS_192 + SPLIT_TAIL),
    ],
    ids=str,
)
def test_the_fragment_tiles_are_pruned_where_they_do_not_fit(
    weight, group_size: int, pruned: list[int]
) -> None:
    """Those tiles take 4- and 8-bit weights; their 128-deep k-tiles groups of 128; N a
    multiple of their columns. The tuner prunes a path whose program `batch_program` refuses
    (`test_the_fastest_path_wins_and_a_warm_tuning_measures_nothing` runs a whole tuning with
    its pruned paths), so the refusals are checked here without compiling the others."""
    problem = DecodeProblem(weight, group_size, 256, 256)
    refused = []
    for index, path in enumerate(batch_paths()):
        try:
            batch_program(problem, path)
        except PRUNING_ERRORS:
            refused.append(index)
    assert refused == pruned


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ({"path": "cublas"}, "expected {'path': 'dequantize'}"),
        ({"path": "dequantize", "block_m": 64}, "expected {'path': 'dequantize'}"),
        ({"path": "prefill", "tiles": 3}, "unexpected keyword argument 'tiles'"),
        ({"path": "prefill", "block_m": 12}, "block_m=12"),
    ],
    ids=str,
)
def test_a_bad_path_is_refused(path, message) -> None:
    with pytest.raises(VerificationError, match=message):
        batch_program(PROBLEM, path)


def test_a_split_path_takes_the_parts_and_the_counters_before_c() -> None:
    program = batch_program(PROBLEM, {"path": "prefill", "block_m": 64, "split": 2})
    names = [p.name for p in program.params]
    assert names == ["m", "n", "k", "a", "packed", "scales", "partial", "counters", "c"]
    # K = 256 is four k-tiles: eight parts do not fit it (the tuner prunes such a path).
    with pytest.raises(SpecializationError, match="constant k .* = 256 is outside"):
        batch_program(PROBLEM, {"path": "prefill", "block_m": 64, "split": 8})


def test_the_split_workspace_and_its_counters() -> None:
    """Without a split no workspace; with one, f32 parts of whole tiles (slots, tiles,
    block_n * block_m: the 100 rows take two 64-row tiles) and one zeroed counter per output
    tile, the counters one buffer per device, reused while large enough; with stream-K, the
    configuration's partial-sum slots."""
    torch = pytest.importorskip("torch")
    counters = TileCounters()
    assert split_workspace(WgmmaDequantConfig(), 100, 512, 1024, "cpu", counters) == ()
    streamed = WgmmaDequantConfig(block_m=64, stream_k=5)
    partial, tiles = split_workspace(streamed, 100, 512, 1024, "cpu", counters)
    # 4 tiles of 16 k-tiles shared by 5 blocks of 12 or 13: (16 - 1) // 12 + 2 slots.
    assert partial.shape == (3, 4, 256 * 64) and tiles.shape == (4,)
    config = WgmmaDequantConfig(block_m=64, split=3)
    partial, tiles = split_workspace(config, 100, 512, 1536, "cpu", counters)
    assert partial.shape == (3, 4, 256 * 64) and partial.dtype == torch.float32
    assert tiles.shape == (config.tiles(100, 512),) == (4,) and tiles.dtype == torch.int32
    assert not tiles.any()
    fewer = counters(3, "cpu")
    assert fewer.data_ptr() == tiles.data_ptr() and fewer.shape == (3,)
    more = counters(9, "cpu")
    assert more.shape == (9,) and not more.any()
    assert counters(4, "cpu").data_ptr() == more.data_ptr()

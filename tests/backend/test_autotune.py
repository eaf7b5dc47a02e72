"""The autotuner (`backend.autotune`) and the decode matmul's tuning (`backend.decode_matmul`),
without a GPU.

- exact tables: the M buckets, the decode tuning key, the search space's tile choices;
- properties: buckets are monotone and two per octave; every candidate of the search space
  meets the program's requirements and the byte window, for random shapes;
- the autotuner on fake construct / build / measure functions: pruning, the minimum, ties,
  failures, parallel builds, the warm cache (nothing measured), records refused and re-tuned;
- `DecodeMatmul.tuned` end to end with a fake measure, compiling with NVRTC for sm_90a;
- the modules import without torch.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import warnings
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.autotune import (
    MEASURE_ATTEMPTS,
    RECORD_FORMAT,
    CandidatePruned,
    MBucket,
    TuningError,
    autotune,
    m_bucket,
    space_digest,
)
from backend.cache import RecordStore, record_key
from backend.decode_matmul import (
    IN_FLIGHT_BYTES,
    MAX_UNITS_M,
    NAMESPACE,
    PARTS_BATCH_BY_ROWS,
    PARTS_BATCH_TWINS,
    PARTS_TWIN_MAX_SPLIT,
    RESIDENT_WARPS,
    RING_SHARED_BYTES,
    RING_STAGES,
    ROWS_AHEAD,
    STREAM_RING_STAGES,
    DecodeMatmul,
    DecodeProblem,
    biased_cast_saves,
    decode_programs,
    decode_search_space,
    decode_tuning_key,
    depth_choices,
    fit_rows,
    parts_twin_base,
    row_tilings,
    split_choices,
    stream_k_residencies,
    stream_ring_depths,
    units_k_choices,
    with_batched_parts,
    with_parts_batch_twin,
)
from backend.errors import CompilationError, LaunchError, TimingError
from backend.nvrtc import cubin_registers, cubin_static_shared
from backend.occupancy import resident_blocks
from ir import dtypes
from ir.dtypes import DataType
from ir.errors import SpecializationError, VerificationError
from ir.examples.packed_weights import weight_ring_thread_words
from ir.examples.register_dequant_matmul import DequantConfig, register_dequant_matmul

REPOSITORY = Path(__file__).resolve().parents[2]
KEY = {"gpu": "Fake GPU", "arch": "sm_90a", "k": 4096}
SPACE = [{"tile": tile, "depth": depth} for tile in (16, 32, 64) for depth in (1, 2)]


class FakeTuning:
    """construct / build / measure stand-ins that count their calls. `times` maps (tile, depth)
    to the microseconds `measure` returns; `prune` the candidates construct refuses."""

    def __init__(self, times: dict[tuple[int, int], float], prune: frozenset = frozenset()):
        self.times, self.prune = times, prune
        self.constructed: list[tuple[int, int]] = []
        self.built: list[tuple[int, int]] = []
        self.measured: list[tuple[int, int]] = []
        self.measure_threads: set[int] = set()
        self._lock = threading.Lock()

    @staticmethod
    def name(candidate: dict) -> tuple[int, int]:
        return (candidate["tile"], candidate["depth"])

    def construct(self, candidate: dict) -> str:
        self.constructed.append(self.name(candidate))
        if self.name(candidate) in self.prune:
            raise VerificationError(f"tile {candidate['tile']} does not fit")
        return f"program {self.name(candidate)}"

    def build(self, candidate: dict, program: str) -> tuple[str, tuple[int, int]]:
        assert program == f"program {self.name(candidate)}"
        with self._lock:
            self.built.append(self.name(candidate))
        return ("kernel", self.name(candidate))

    def measure(self, built: tuple[str, tuple[int, int]]) -> float:
        self.measured.append(built[1])
        self.measure_threads.add(threading.get_ident())
        return self.times[built[1]]

    def tune(self, store: RecordStore, space: list[dict] | None = None, **options):
        return autotune(
            "fake/1",
            KEY,
            SPACE if space is None else space,
            construct=self.construct,
            build=self.build,
            measure=self.measure,
            store=store,
            progress=options.pop("progress", False),
            **options,
        )


def _times(**overrides: float) -> dict[tuple[int, int], float]:
    """Every candidate of SPACE at 50 us except the overrides, named like t32d1=12.0."""
    times = {FakeTuning.name(c): 50.0 for c in SPACE}
    for name, value in overrides.items():
        tile, depth = name[1:].split("d")
        times[int(tile), int(depth)] = value
    return times


# -- M buckets ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("m", "lo", "hi"),
    [
        (1, 1, 2),
        (2, 2, 3),
        (3, 3, 4),
        (4, 4, 6),
        (5, 4, 6),
        (6, 6, 8),
        (7, 6, 8),
        (8, 8, 12),
        (11, 8, 12),
        (12, 12, 16),
        (15, 12, 16),
        (16, 16, 24),
        (23, 16, 24),
        (24, 24, 32),
        (255, 192, 256),
        (256, 256, 384),
        (4096, 4096, 6144),
        (6143, 4096, 6144),
        (6144, 6144, 8192),
    ],
)
def test_m_bucket_table(m: int, lo: int, hi: int) -> None:
    assert m_bucket(m) == MBucket(lo, hi)


@pytest.mark.parametrize("m", [0, -3, 1.0, True, "16", None])
def test_m_bucket_refuses_what_is_not_a_batch(m: object) -> None:
    with pytest.raises(TuningError, match=r"batch m=.*; expected an int >= 1"):
        m_bucket(m)


@given(st.integers(1, 1 << 20), st.integers(1, 1 << 20))
@settings(max_examples=200)
def test_m_bucket_is_monotone_and_holds_its_batch(first: int, second: int) -> None:
    low, high = sorted((first, second))
    assert m_bucket(low).lo <= m_bucket(high).lo
    bucket = m_bucket(high)
    assert high in bucket
    assert bucket.hi - 1 < 1.5 * bucket.lo or bucket == MBucket(1, 2)
    assert m_bucket(bucket.lo) == bucket == m_bucket(bucket.hi - 1)


@pytest.mark.parametrize(
    ("bucket", "m", "inside"),
    [
        (MBucket(16, 24), 15, False),
        (MBucket(16, 24), 16, True),
        (MBucket(16, 24), 23, True),
        (MBucket(16, 24), 24, False),
        (MBucket(16, 24), 16.0, False),
        (MBucket(16, 24), "16", False),
        (MBucket(1, 2), 1, True),
        (MBucket(1, 2), 2, False),
        (MBucket(1, 2), True, False),
    ],
)
def test_m_bucket_holds_the_ints_from_lo_up_to_hi(bucket: MBucket, m: object, inside: bool):
    assert (m in bucket) is inside


@pytest.mark.parametrize("octave", range(1, 16))
def test_m_bucket_two_per_octave(octave: int) -> None:
    start = 1 << octave
    buckets = {m_bucket(m) for m in range(start, 2 * start)}
    assert sorted(buckets, key=lambda b: b.lo) == [
        MBucket(start, start + start // 2),
        MBucket(start + start // 2, 2 * start),
    ]


# -- the decode tuning key and search space -----------------------------------------------------


def test_decode_tuning_key_table() -> None:
    problem = DecodeProblem(dtypes.i4, 128, 4096, 12288, dtypes.bf16, zero_points=True)
    assert decode_tuning_key(problem, 20, gpu_name="NVIDIA H200", arch="sm_90a") == {
        "gpu": "NVIDIA H200",
        "arch": "sm_90a",
        "weight_dtype": "i4",
        "activation_dtype": "bf16",
        "zero_points": True,
        "group_size": 128,
        "k": 4096,
        "n": 12288,
        "m_bucket": 16,
    }


def test_decode_tuning_key_separates_every_field() -> None:
    base = DecodeProblem(dtypes.i4, 128, 4096, 12288)
    variants = [
        (base, 1, "NVIDIA H200", "sm_90a"),
        (base, 1, "NVIDIA H100 80GB HBM3", "sm_90a"),
        (base, 1, "NVIDIA H200", "sm_80"),
        (DecodeProblem(dtypes.u4, 128, 4096, 12288), 1, "NVIDIA H200", "sm_90a"),
        (DecodeProblem(dtypes.i4, 128, 4096, 12288, dtypes.bf16), 1, "NVIDIA H200", "sm_90a"),
        (DecodeProblem(dtypes.i4, 128, 4096, 12288, zero_points=True), 1, "NVIDIA H200", "sm_90a"),
        (DecodeProblem(dtypes.i4, 64, 4096, 12288), 1, "NVIDIA H200", "sm_90a"),
        (DecodeProblem(dtypes.i4, 128, 8192, 12288), 1, "NVIDIA H200", "sm_90a"),
        (DecodeProblem(dtypes.i4, 128, 4096, 8192), 1, "NVIDIA H200", "sm_90a"),
        (base, 2, "NVIDIA H200", "sm_90a"),
    ]
    keys = [
        record_key(NAMESPACE, decode_tuning_key(p, m, gpu_name=gpu, arch=arch))
        for p, m, gpu, arch in variants
    ]
    assert len(set(keys)) == len(keys)
    # Batches of one bucket share a key.
    same = [decode_tuning_key(base, m, gpu_name="g", arch="sm_90a") for m in (16, 17, 23)]
    assert same[0] == same[1] == same[2]


@pytest.mark.parametrize(
    ("nbits", "group_size", "expected"),
    [
        (8, 128, (2, 4, 8)),  # 128 * u * 8 bytes per warp: 2 and 4 KiB; the group's 8 KiB
        (7, 128, (4, 8)),  # the group's k-tile, within twice the window's top
        (6, 128, (4, 8)),
        (5, 128, (4, 8)),
        (4, 128, (4, 8)),
        (3, 128, (8,)),
        (2, 128, (8,)),  # 16 would make a k-tile of 256 rows: two groups
        (1, 128, (8,)),  # below the window: the largest that fits the group
        (2, 256, (8, 16)),
        (1, 512, (16, 32)),
        (4, 32, (2,)),  # the group size allows no more
        (8, 16, (1,)),
        (8, 256, (2, 4)),  # the group's k-tile would be 4 times the window's top
        (7, 256, (4,)),  # the group's k-tile would be 4 times the window's top
        (4, 256, (4, 8, 16)),
        (4, 96, (2,)),  # a group of 6 k16 steps: no power of two
    ],
)
def test_units_k_choices_table(nbits: int, group_size: int, expected: tuple[int, ...]) -> None:
    assert units_k_choices(nbits, 8192, group_size) == expected


@pytest.mark.parametrize(
    ("nbits", "units_k", "expected"),
    [(8, 2, (1, 2)), (8, 4, (1,)), (4, 4, (1, 2)), (4, 8, (1,)), (3, 8, (1,)), (1, 8, (1, 2))],
)
def test_depth_choices_table(nbits: int, units_k: int, expected: tuple[int, ...]) -> None:
    assert depth_choices(nbits, units_k) == expected


@pytest.mark.parametrize(
    ("blocks", "k", "block_k", "warps", "expected"),
    [
        (48, 4096, 64, 4, (4, 8, 16)),  # 192 .. 768 blocks; 32 would leave 2 k-tiles a block
        (96, 4096, 64, 2, (2, 4, 8, 16)),
        (24, 4096, 128, 8, (8,)),  # 16 would leave 2 k-tiles a block
        (64, 28672, 64, 2, (4, 8, 16, 32, 64)),  # 64 * 64 blocks: within 8 full waves
        (448, 8192, 64, 4, (1, 2, 4, 8)),  # 16: 7168 blocks, more than 8 waves of 528
        (8, 1024, 128, 4, (2,)),  # never covers the SMs: the largest split that fits
        (5000, 4096, 64, 4, (1,)),  # already more than 8 waves
        (33, 4096, 64, 4, (4, 8, 16)),  # 4: 132 blocks, one an SM, covers them
        (264, 4096, 64, 4, (1, 2, 4, 8, 16)),  # 16: 4224 blocks, 8 waves of 528 exactly
        (132, 4096, 64, 32, (1, 2, 4, 8)),  # blocks of 32 warps: a wave is one an SM
    ],
)
def test_split_choices_table(
    blocks: int, k: int, block_k: int, warps: int, expected: tuple[int, ...]
) -> None:
    assert split_choices(blocks, k, block_k, warps) == expected


def test_decode_search_space_table() -> None:
    space = decode_search_space(dtypes.i4, 1024, 2048, 1)
    # units_k = 8 makes the k-tile the group (128): with and without the late scale, and with
    # it the magic numbers' biases kept (i4's biased cast is the cheaper). The 2048 / 64 w
    # tiles never fill whole waves of 132 SMs: a stream-K point each, one wave of persistent
    # blocks at 16 warps an SM.
    fields = [(c.warps, c.units_k, c.split, c.depth, c.late_scale, c.magic_bias) for c in space]
    streams = [(c.stream_k, c.min_blocks_per_sm) for c in space]
    assert list(zip(fields, streams)) == [
        ((2, 4, 4, 1, False, False), (0, 0)),
        ((2, 4, 4, 2, False, False), (0, 0)),
        ((2, 4, 1, 1, False, False), (1056, 8)),
        ((2, 8, 2, 1, False, False), (0, 0)),
        ((2, 8, 2, 1, True, False), (0, 0)),
        ((2, 8, 2, 1, True, True), (0, 0)),
        ((2, 8, 1, 1, True, False), (1056, 8)),
        ((4, 4, 4, 1, False, False), (0, 0)),
        ((4, 4, 4, 2, False, False), (0, 0)),
        ((4, 4, 1, 1, False, False), (528, 4)),
        ((4, 8, 2, 1, False, False), (0, 0)),
        ((4, 8, 2, 1, True, False), (0, 0)),
        ((4, 8, 2, 1, True, True), (0, 0)),
        ((4, 8, 1, 1, True, False), (528, 4)),
        ((8, 4, 4, 1, False, False), (0, 0)),
        ((8, 4, 4, 2, False, False), (0, 0)),
        ((8, 4, 1, 1, False, False), (264, 2)),
        ((8, 8, 2, 1, False, False), (0, 0)),
        ((8, 8, 2, 1, True, False), (0, 0)),
        ((8, 8, 2, 1, True, True), (0, 0)),
        ((8, 8, 1, 1, True, False), (264, 2)),
    ]
    assert {(c.units_n, c.unroll, c.weights_as_a) for c in space} == {(1, 2, True)}
    assert not any(c.refill_in_place for c in space)


@pytest.mark.parametrize(
    ("warps", "block_m", "expected"),
    [
        (4, 8, (4,)),  # 8-row blocks (M = 1): the byte model's 16 warps an SM alone
        (2, 8, (8,)),
        (4, 16, (4, 3)),  # 16-row blocks: also three quarters, 12 warps an SM
        (2, 16, (8, 6)),
        (8, 16, (2, 1)),
        (4, 32, (4, 3)),
        (1, 64, (16, 12)),
        (16, 16, (1,)),  # one block an SM already: nothing less
        (32, 8, (1,)),  # more warps than the byte model's: still one block an SM
    ],
)
def test_stream_k_residencies_table(warps: int, block_m: int, expected: tuple[int, ...]) -> None:
    assert stream_k_residencies(warps, block_m) == expected


@pytest.mark.parametrize(("warps", "block_m"), [(0, 16), (4, 0), (True, 16), (4, 16.0), ("4", 8)])
def test_stream_k_residencies_refuses_what_is_no_count(warps: object, block_m: object) -> None:
    with pytest.raises(TuningError, match=r"stream_k_residencies: (warps|block_m)="):
        stream_k_residencies(warps, block_m)  # type: ignore[arg-type]


def test_decode_search_space_stream_k_points_at_16_rows() -> None:
    """At M = 16 both row tilings (two 8-row blocks with the weights as A, one 16-row block)
    take a stream-K point at the byte model's occupancy and one at three quarters of it, for
    each warp count and k-tile size (2048 / 64 w tiles never fill a wave of 132 SMs), each
    then once more with a shared ring of two stages (i4's rings all fit), and again with the
    deepest ring up to four stages that the resident blocks' rings fit, where that is more
    (a stage: 512 * units_k * (warps + 1) bytes; 224 KB for the rings of an SM)."""
    space = decode_search_space(dtypes.i4, 1024, 2048, 16)
    streams = [
        (c.weights_as_a, c.units_m, c.warps, c.units_k, c.stream_k, c.min_blocks_per_sm, c.stages)
        for c in space
        if c.stream_k
    ]
    # (warps, units_k, resident) -> the rings' stages after the point without one.
    rings = {
        (2, 4, 8): (2, 4),  # 6 KB a stage: 8 blocks of 4 stages take 192 KB
        (2, 4, 6): (2, 4),
        (2, 8, 8): (2,),  # 12 KB: 8 blocks of 3 stages would take 288 KB
        (2, 8, 6): (2, 3),
        (4, 4, 4): (2, 4),
        (4, 4, 3): (2, 4),
        (4, 8, 4): (2,),  # 20 KB: 4 blocks of 3 stages would take 240 KB
        (4, 8, 3): (2, 3),
        (8, 4, 2): (2, 4),
        (8, 4, 1): (2, 4),
        (8, 8, 2): (2, 3),  # 36 KB
        (8, 8, 1): (2, 4),
    }
    expected = [
        (as_a, units_m, warps, units_k, 132 * resident, resident, stages)
        for as_a, units_m in ((True, 2), (False, 1))
        for warps, residents in ((2, (8, 6)), (4, (4, 3)), (8, (2, 1)))
        for units_k in (4, 8)
        for resident in residents
        for stages in (0, *rings[warps, units_k, resident])
    ]
    assert streams == expected
    # Each as the program requires: split 1, the fused sum, depth 1, the late scale where the
    # k-tile is the group; every ring unrolled twice.
    for config in (c for c in space if c.stream_k):
        assert (config.split, config.fused_sum, config.depth) == (1, True, 1)
        assert config.unroll == 2
        assert config.late_scale == (config.units_k == 8)


@pytest.mark.parametrize(
    ("resident", "stage_bytes", "depths"),
    [
        (4, 20480, (2,)),  # i4's 16-row block of 4 warps: 80 KB a stage of the SM
        (3, 20480, (2, 3)),  # the recorded kernel's 96 KB in flight, in one even wave
        (2, 20480, (2, 4)),  # 5 would fit; four is the most offered
        (2, 69632, ()),  # i8's 8-warp block: not even two stages fit
        (1, 229376, ()),
        (1, 114688, (2,)),
    ],
)
def test_stream_ring_depths(resident: int, stage_bytes: int, depths: tuple[int, ...]) -> None:
    assert stream_ring_depths(resident, stage_bytes) == depths


def stream_ring_stages(config: DequantConfig, dtype: DataType) -> list[int]:
    """The stages of the rings that `config`'s resident blocks fit in two blocks'
    `RING_SHARED_BYTES` (each stage: the k-tile's packed weights, each thread's padded as
    `weight_ring_thread_words` says, and f16 activations), of two and of the most up to
    `RING_STAGES`."""
    thread_words = weight_ring_thread_words(dtype.nbits, config.units_k, config.units_n)
    stage = config.warps * 32 * thread_words * 4 + config.block_m * config.block_k * 2
    fits = [
        stages
        for stages in range(STREAM_RING_STAGES, RING_STAGES + 1)
        if config.min_blocks_per_sm * stages * stage <= 2 * RING_SHARED_BYTES
    ]
    return fits[:1] + fits[-1:] if len(fits) > 1 else fits


@pytest.mark.parametrize("weight", ["i2", "i4", "i8", "u3"])
@pytest.mark.parametrize("m", [1, 8, 16, 64, 256])
@pytest.mark.parametrize("shape", [(4096, 12288), (8192, 57344)])
def test_ringed_stream_k_points_follow_their_twins_within_the_shared_budget(
    weight: str, m: int, shape: tuple[int, int]
) -> None:
    """In blocks of 16 rows or more, each stream-K point is followed by the same with shared
    rings (unrolled twice) of two stages and of the most up to four, exactly where its
    resident blocks' rings fit (i8's 8-warp blocks at two an SM do not); no 8-row block has
    one."""
    dtype = dtypes.from_name(weight)
    space = decode_search_space(dtype, *shape, m)
    streams = [c for c in space if c.stream_k and not c.stages]
    expected = []
    for config in streams:
        expected.append(config)
        if config.block_m >= 16:
            expected += [
                replace(config, stages=stages, unroll=STREAM_RING_STAGES)
                for stages in stream_ring_stages(config, dtype)
            ]
    assert [c for c in space if c.stream_k] == expected
    if m < 8:
        assert expected == streams


@given(
    weight=st.sampled_from(["i2", "i3", "i4", "i8", "f4e2m1"]),
    m=st.integers(1, 64),
    k=st.sampled_from([1024, 4096, 8192]),
    n=st.sampled_from([2048, 12288, 57344]),
    sm_count=st.integers(1, 200),
)
@settings(max_examples=30, deadline=None)
def test_stream_k_points_take_one_wave_at_a_listed_occupancy(
    weight: str, m: int, k: int, n: int, sm_count: int
) -> None:
    """Every stream-K point of any space is one wave of `sm_count` SMs at an occupancy of
    `stream_k_residencies` (at most the byte model's warps an SM), where the tiles at that
    occupancy leave a partial wave; no other point asks the compiler for an occupancy."""
    space = decode_search_space(dtypes.from_name(weight), k, n, m, sm_count=sm_count)
    for config in space:
        if not config.stream_k:
            assert config.min_blocks_per_sm == 0
            continue
        resident = config.min_blocks_per_sm
        assert resident in stream_k_residencies(config.warps, config.block_m)
        assert config.stream_k == sm_count * resident
        assert resident * config.warps <= max(RESIDENT_WARPS, config.warps)
        tiles = (n // (64 * config.warps)) * -(-m // config.block_m)
        assert tiles % config.stream_k


@pytest.mark.parametrize(
    ("m", "tilings"),
    [(1, [(True, 1)]), (3, [(True, 1)]), (7, [(True, 1)]), (8, [(True, 1), (False, 1)])]
    + [(11, [(True, 1), (False, 1)]), (12, [(True, 2), (False, 1)])]
    + [(16, [(True, 2), (False, 1)]), (23, [(True, 2), (False, 1)])]
    + [(24, [(True, 3), (False, 2)]), (32, [(True, 4), (False, 2)]), (48, [(False, 3)])]
    + [(64, [(False, 4)]), (256, [(False, 4)]), (4096, [(False, 4)])],
)
def test_row_tilings_cover_the_bucket_s_smallest_batch(
    m: int, tilings: list[tuple[bool, int]]
) -> None:
    """Buckets [1, 2) .. [6, 8) are at most 8 rows: C^T = W^T A^T, 8 rows of A per block; from
    [8, 12) on, both forms with the row blocks that hold the bucket's smallest batch (the one
    a tuning measures), the 8-row form up to 32 rows, the 16-row form up to 64."""
    assert list(row_tilings(m)) == tilings
    space = decode_search_space(dtypes.i4, 1024, 2048, m)
    assert sorted({(c.weights_as_a, c.units_m) for c in space}) == sorted(tilings)
    lo = m_bucket(m).lo
    assert all(c.grid(lo, 2048, 1024)[1] == 1 for c in space if c.units_m < MAX_UNITS_M)


@pytest.mark.parametrize(
    ("config", "m", "units_m"),
    [
        (DequantConfig(weights_as_a=True), 1, 1),
        (DequantConfig(weights_as_a=True), 8, 1),
        (DequantConfig(weights_as_a=True), 9, 2),
        (DequantConfig(weights_as_a=True, units_m=2), 20, 3),
        (DequantConfig(weights_as_a=True, units_m=2), 32, 4),
        (DequantConfig(weights_as_a=True, units_m=2), 33, 2),  # would take 5: left as it is
        (DequantConfig(units_m=2), 17, 2),
        (DequantConfig(), 17, 2),
        (DequantConfig(units_m=4), 4096, 4),
        (DequantConfig(units_m=3), 20, 3),  # 48 rows hold the 20 already
    ],
)
def test_fit_rows_table(config: DequantConfig, m: int, units_m: int) -> None:
    assert fit_rows(config, m) == replace(config, units_m=units_m)


@given(m=st.integers(1, 4096), weights_as_a=st.booleans(), units_m=st.integers(1, MAX_UNITS_M))
@settings(max_examples=100)
def test_fit_rows_holds_the_batch_in_one_row_of_blocks_when_it_can(
    m: int, weights_as_a: bool, units_m: int
) -> None:
    config = DequantConfig(weights_as_a=weights_as_a, units_m=units_m)
    fitted = fit_rows(config, m)
    assert replace(fitted, units_m=units_m) == config and fitted.units_m >= units_m
    assert fitted.grid(m, 64)[1] == 1 or fitted.units_m == units_m
    if fitted.units_m > units_m:  # the fewest row blocks that hold m
        assert fitted.block_m >= m > replace(fitted, units_m=fitted.units_m - 1).block_m


@pytest.mark.parametrize("m", [0, -1, 2.0, True])
def test_fit_rows_refuses_a_batch_that_is_not_a_positive_int(m: object) -> None:
    with pytest.raises(TuningError, match=f"m={m!r}"):
        fit_rows(DequantConfig(), m)  # type: ignore[arg-type]


@pytest.mark.parametrize("weight", ["i4", "i8"])
@pytest.mark.parametrize("m", [1, 16, 256, 4096])
@pytest.mark.parametrize("shape", [(4096, 12288), (8192, 8192), (8192, 57344), (28672, 8192)])
def test_decode_search_space_is_a_few_dozen_at_benchmark_points(
    weight: str, m: int, shape: tuple[int, int]
) -> None:
    space = decode_search_space(dtypes.from_name(weight), *shape, m)
    # At most 170 a row tiling: the widest layer's i8 space at M = 16 is 332 with the parts'
    # twins and the ringed stream-K points, two depths each (compiled in parallel, each timed
    # in about 5 ms on the device).
    assert 6 <= len(space) <= 170 * len(row_tilings(m))


@pytest.mark.parametrize("weight", ["i2", "i4", "i8", "u3"])
@pytest.mark.parametrize("m", [1, 7, 8, 16, 256])
def test_shared_ring_candidates_are_blocks_of_16_rows_within_the_shared_budget(
    weight: str, m: int
) -> None:
    """Each point of a block of 16 rows or more once more with the shared ring (RING_STAGES
    stages, unrolled as often, depth 1, the late scale where the point has it), where the ring
    fits `RING_SHARED_BYTES`; none for the buckets below 8 rows (8-row blocks only). (The
    stream-K points' rings: `test_ringed_stream_k_points_...`.)"""
    dtype = dtypes.from_name(weight)
    space = decode_search_space(dtype, 8192, 8192, m)
    rings = [c for c in space if c.stages and not c.stream_k]
    plain = [c for c in space if not c.stages]
    if m < 8:
        assert rings == []
        return
    assert rings
    for config in rings:
        assert (config.stages, config.unroll, config.depth) == (RING_STAGES, RING_STAGES, 1)
        assert config.block_m >= 16
        weight_bytes = config.block_n * config.block_k * dtype.nbits // 8
        assert RING_STAGES * (weight_bytes + config.block_m * config.block_k * 2) <= (
            RING_SHARED_BYTES
        )
        twin = replace(config, stages=0, unroll=2)
        assert twin in plain


@pytest.mark.parametrize("weight", ["i2", "i3", "i8", "f4e2m1"])
@pytest.mark.parametrize("m", [1, 7, 8, 16, 24, 256])
@pytest.mark.parametrize("shape", [(4096, 12288), (28672, 8192)])
def test_rows_ahead_twins_are_the_late_scale_points_of_16_row_blocks(
    weight: str, m: int, shape: tuple[int, int]
) -> None:
    """Exactly the late-scale points in blocks of 16 rows (of either ring, not stream-K) come
    once more with the rows' ring `ROWS_AHEAD` deep, each right after its twin; nothing else
    asks for it (none in 8-row blocks, none in blocks of more rows)."""
    space = decode_search_space(dtypes.from_name(weight), *shape, m)
    ahead = [c for c in space if c.rows_ahead]
    assert all(c.rows_ahead == ROWS_AHEAD for c in ahead)
    twins_of = [
        replace(c, rows_ahead=ROWS_AHEAD)
        for c in space
        if not c.rows_ahead
        and c.late_scale
        and c.block_m == 16
        and not (c.stream_k or c.magic_bias or c.combine_parts)
        and parts_twin_base(c) is None
    ]
    assert ahead == twins_of
    assert all(space[space.index(c) - 1] == replace(c, rows_ahead=0) for c in ahead)
    sixteen = [t for t in row_tilings(m) if (8 if t[0] else 16) * t[1] == 16]
    assert bool(ahead) == bool(sixteen) == (8 <= m < 24)  # buckets [8, 12) to [16, 24)


@pytest.mark.parametrize(
    ("weight", "activation", "saves"),
    [
        ("i2", dtypes.f16, True),
        ("i4", dtypes.f16, True),
        ("u3", dtypes.f16, False),
        ("i7", dtypes.f16, False),
        ("u5", dtypes.f16, False),
        ("i8", dtypes.f16, True),
        ("i8", dtypes.bf16, False),
        ("f4e2m1", dtypes.f16, False),
    ],
)
def test_magic_bias_twins_where_the_biased_cast_is_cheaper(
    weight: str, activation: DataType, saves: bool
) -> None:
    """At a batch of one row block of 8 rows, each late-scale point once more with the biases
    kept, where the biased cast saves instructions; none in the 16-row tilings."""
    dtype = dtypes.from_name(weight)
    assert biased_cast_saves(dtype, activation) is saves
    problem_space = decode_search_space(dtype, 4096, 12288, 1)
    if activation == dtypes.f16:
        twins = [c for c in problem_space if c.magic_bias]
        lates = [c for c in problem_space if c.late_scale and not c.magic_bias and not c.stages]
        lates = [c for c in lates if not c.stream_k]
        assert twins == ([replace(c, magic_bias=True) for c in lates] if saves else [])
    sixteen = decode_search_space(dtype, 4096, 12288, 16)
    assert not any(c.magic_bias for c in sixteen if not c.weights_as_a or c.units_m > 1)


@pytest.mark.parametrize("weight", ["i2", "i3", "i4", "i8", "f4e2m1"])
@pytest.mark.parametrize("m", [1, 4, 16])
def test_combined_parts_only_when_results_may_vary(weight: str, m: int) -> None:
    """By default no candidate adds its parts in a varying order; with deterministic=False,
    each split or stream-K point of every row tiling comes again with `combine_parts`, and
    every such twin builds a valid program."""
    dtype = dtypes.from_name(weight)
    fixed = decode_search_space(dtype, 28672, 8192, m)
    assert not any(c.combine_parts for c in fixed)
    varying = decode_search_space(dtype, 28672, 8192, m, deterministic=False)
    twins = [c for c in varying if c.combine_parts]
    parted = [c for c in fixed if c.split > 1 or c.stream_k]
    # The parts' twins (four a step) have none: their base's is the same point.
    based = [c for c in parted if parts_twin_base(c) is None]
    assert twins == [replace(c, combine_parts=True, parts_batch=1) for c in based]
    assert [c for c in varying if not c.combine_parts] == fixed
    assert any(not c.weights_as_a for c in twins) is (m > 8)
    assert twins
    for twin in twins:
        register_dequant_matmul(dtype, 128, twin)


@pytest.mark.parametrize("weight", ["i2", "i3", "i8"])
@pytest.mark.parametrize("m", [1, 4, 8, 16, 32])
@pytest.mark.parametrize("shape", [(8192, 8192), (28672, 8192)])
def test_parts_are_loaded_in_batches_by_the_splits_of_8_and_16_row_blocks(
    weight: str, m: int, shape: tuple[int, int]
) -> None:
    """The split points (the shared ring's too) of 8-row blocks that split more than 4 ways
    load their parts 4 at a time, those of 16-row blocks (one of 16 rows, or two of 8 with
    the weights as A) that split more than 2 ways 2 at a time (measured faster at M = 1 and
    16), every other point one at a time (the parts of larger blocks take more registers);
    with deterministic=False the combining twins have no slots to batch. The parts' twins
    (four a step at 16 rows) are apart."""
    assert PARTS_BATCH_BY_ROWS == {8: 4, 16: 2}
    dtype = dtypes.from_name(weight)
    rows_batched = set()
    for config in decode_search_space(dtype, *shape, m, deterministic=False):
        if parts_twin_base(config) is not None:
            continue
        rows = config.block_m
        batch = {8: 4, 16: 2}.get(rows, 1)
        batched = config.split > batch and not config.combine_parts
        assert config.parts_batch == (batch if batched else 1), config
        if config.parts_batch > 1:
            rows_batched.add(rows)
    # Below 9 rows the one 8-row block's tiling is offered; 16 rows are a block of their own
    # from 9 rows on, and no tiling of 32 rows has a block of 8 or 16.
    assert rows_batched == {1: {8}, 4: {8}, 8: {8, 16}, 16: {16}, 32: set()}[m]


@pytest.mark.parametrize(
    ("config", "batch"),
    [
        (DequantConfig(weights_as_a=True, split=8), 4),  # one 8-row block
        (DequantConfig(weights_as_a=True, split=4), 1),  # 3 parts after slot 0: no batch of 4
        (DequantConfig(weights_as_a=True, split=16, units_m=2), 2),  # two 8-row blocks
        (DequantConfig(split=4, stages=4, unroll=4), 2),  # a 16-row block with a ring
        (DequantConfig(split=2), 1),  # one part after slot 0
        (DequantConfig(split=8, units_m=2), 1),  # 32 rows
        (DequantConfig(split=8, combine_parts=True), 1),  # no slots: combining stores
        (DequantConfig(split=8, fused_sum=False), 1),  # a second launch sums the parts
        (DequantConfig(weights_as_a=True, stream_k=100), 1),  # stream-K keeps one at a time
        (DequantConfig(weights_as_a=True, split=8, parts_batch=7), 4),  # the rule's, not 7
        (DequantConfig(split=2, parts_batch=2), 1),
    ],
)
def test_with_batched_parts_is_the_search_spaces_rule(config: DequantConfig, batch: int) -> None:
    """`with_batched_parts` sets the parts a step by the block's rows where the fused sum has
    more slots than that, and changes no other field; every configuration it gives builds."""
    batched = with_batched_parts(config)
    assert batched == replace(config, parts_batch=batch)
    assert with_batched_parts(batched) == batched
    register_dequant_matmul(dtypes.i4, 128, batched)


@pytest.mark.parametrize("weight", ["i2", "i3", "i4", "i8", "f4e2m1"])
@pytest.mark.parametrize("m", [1, 8, 16, 24, 256])
@pytest.mark.parametrize("shape", [(4096, 12288), (8192, 8192), (28672, 8192)])
def test_parts_twins_are_the_16_row_split_points_of_two_parts_a_step(
    weight: str, m: int, shape: tuple[int, int]
) -> None:
    """Exactly the points in blocks of 16 rows that load two parts a step over a split of 8
    (more than the twin's 4, at most `PARTS_TWIN_MAX_SPLIT`), without the rows' ring, come
    once more with four parts a step, each after its base and its base's rows-ahead twin;
    `parts_twin_base` names the base of each twin and of nothing else."""
    space = decode_search_space(dtypes.from_name(weight), *shape, m)
    twins = [c for c in space if parts_twin_base(c) is not None]
    bases = [
        c
        for c in space
        if c.block_m == 16 and c.parts_batch == 2 and 4 < c.split <= 8 and not c.rows_ahead
    ]
    assert [parts_twin_base(c) for c in twins] == bases
    assert all(c.parts_batch == PARTS_BATCH_TWINS[16] == 4 for c in twins)
    for twin in twins:
        base = space.index(parts_twin_base(twin))
        assert space[base + 1 : space.index(twin)] in (
            [],
            [replace(space[base], rows_ahead=ROWS_AHEAD)],
        )
    assert all(parts_twin_base(c) is None for c in space if c not in twins)
    assert all(with_parts_batch_twin(c) == [c, replace(c, parts_batch=4)] for c in bases)
    assert bool(twins) == (8 <= m < 24 and any(c.split == 8 for c in bases))


@pytest.mark.parametrize(
    ("config", "twinned"),
    [
        (DequantConfig(split=8, parts_batch=2), True),
        (DequantConfig(split=8, parts_batch=2, weights_as_a=True, units_m=2), True),
        (DequantConfig(split=8, parts_batch=2, stages=4, unroll=4), True),  # the shared ring
        (DequantConfig(split=4, parts_batch=2), False),  # no more parts than the twin's 4
        (DequantConfig(split=16, parts_batch=2), False),  # past PARTS_TWIN_MAX_SPLIT
        (DequantConfig(split=8, parts_batch=2, rows_ahead=1), False),  # the rows' ring
        (DequantConfig(split=8, parts_batch=1, combine_parts=True), False),  # no slots
        (DequantConfig(split=8, parts_batch=4, weights_as_a=True), False),  # 8-row blocks
        (DequantConfig(split=8, parts_batch=2, units_m=2), False),  # 32 rows
    ],
)
def test_with_parts_batch_twin_table(config: DequantConfig, twinned: bool) -> None:
    """The twin is the same point with four parts a step, which `with_batched_parts` keeps,
    and it builds; `parts_twin_base` undoes it."""
    points = with_parts_batch_twin(config)
    assert PARTS_TWIN_MAX_SPLIT == 8
    if not twinned:
        assert points == [config] and parts_twin_base(config) is None
        return
    base, twin = points
    assert (base, twin) == (config, replace(config, parts_batch=4))
    assert parts_twin_base(twin) == config and parts_twin_base(config) is None
    assert with_batched_parts(twin) == twin
    register_dequant_matmul(dtypes.i4, 128, twin)


def test_with_batched_parts_refuses_what_is_no_configuration() -> None:
    with pytest.raises(TuningError, match=r"config is dict; expected a DequantConfig"):
        with_batched_parts({"split": 8})


@pytest.mark.parametrize("weight", ["i2", "i4", "f4e2m1"])
@pytest.mark.parametrize("m", [1, 16])
def test_every_point_of_the_space_follows_the_batched_parts_rule(weight: str, m: int) -> None:
    """The search space's points, the combining twins included, are their own
    `with_batched_parts`: one rule for the tuner and for the recorded configurations the
    benchmark's --batched-parts updates."""
    dtype = dtypes.from_name(weight)
    for config in decode_search_space(dtype, 8192, 8192, m, deterministic=False):
        assert with_batched_parts(config) == config, config


@pytest.mark.parametrize("weight", ["i2", "i4", "u4", "i8", "f4e2m1"])
@pytest.mark.parametrize("m", [1, 8, 16, 256])
def test_refill_in_place_is_a_field_not_a_candidate(weight: str, m: int) -> None:
    """The refill in place was measured level or slower than the recorded points (with the
    biases kept too), so no candidate of any tiling has it; the field still builds a valid
    program from each late-scale point of depth 1, which is how it is tried by hand."""
    dtype = dtypes.from_name(weight)
    space = decode_search_space(dtype, 4096, 12288, m)
    assert not any(c.refill_in_place for c in space)
    late = next(c for c in space if c.late_scale and c.depth == 1 and not c.stages)
    register_dequant_matmul(dtype, 128, replace(late, refill_in_place=True))


def test_compact_search_space_table() -> None:
    """4 warps, depth 1, the late scale: the k-tile sizes and splits of the full space."""
    space = decode_search_space(dtypes.i4, 1024, 2048, 1, compact=True)
    assert [(c.warps, c.units_k, c.split, c.depth, c.late_scale) for c in space] == [
        (4, 4, 4, 1, False),
        (4, 8, 2, 1, True),
    ]
    sixteen = decode_search_space(dtypes.i4, 1024, 2048, 16, compact=True)
    assert {(c.weights_as_a, c.units_m) for c in sixteen} == {(False, 1)}


@given(
    nbits=st.integers(1, 8),
    k_units=st.integers(1, 256),
    n_units=st.integers(1, 256),
    m=st.integers(1, 4096),
)
@settings(max_examples=60)
def test_compact_search_space_is_a_part_of_the_full_one(
    nbits: int, k_units: int, n_units: int, m: int
) -> None:
    weight = dtypes.from_name(f"i{nbits}")
    full = decode_search_space(weight, 16 * k_units, 64 * n_units, m, group_size=128)
    compact = decode_search_space(weight, 16 * k_units, 64 * n_units, m, compact=True)
    assert compact and set(compact) <= set(full)
    assert len({(c.warps, c.depth, c.weights_as_a, c.units_m) for c in compact}) == 1


@given(
    nbits=st.integers(1, 8),
    k_units=st.integers(1, 2048),
    n_units=st.integers(1, 1024),
    group_log=st.integers(4, 9),
    m=st.integers(1, 8192),
    sm_count=st.sampled_from([108, 132, 144]),
)
@settings(max_examples=150)
def test_every_candidate_meets_the_program_requirements(
    nbits: int, k_units: int, n_units: int, group_log: int, m: int, sm_count: int
) -> None:
    k, n, group_size = 16 * k_units, 64 * n_units, 1 << group_log
    weight = dtypes.from_name(f"u{nbits}")
    space = decode_search_space(weight, k, n, m, group_size=group_size, sm_count=sm_count)
    assert space
    assert len(set(space)) == len(space)
    for config in space:
        assert group_size % (16 * config.units_k) == 0
        assert k % (16 * config.units_k * config.split) == 0
        assert n % (64 * config.warps * config.units_n) == 0
        # The byte window: never above it; below it only where the group or K forbids more.
        tile_bytes = 16 * 128 * config.units_k * nbits
        group_tile = 16 * config.units_k == group_size and config.depth == 1
        assert tile_bytes * config.depth <= IN_FLIGHT_BYTES[1] or (
            group_tile and tile_bytes <= 2 * IN_FLIGHT_BYTES[1]
        )
        larger = 2 * config.units_k
        if tile_bytes < IN_FLIGHT_BYTES[0]:
            assert group_size % (16 * larger) or k % (16 * larger)


def test_search_space_candidates_construct() -> None:
    """Every candidate of one space builds its programs (f16 and bf16 with zero points)."""
    for problem in (
        DecodeProblem(dtypes.i4, 128, 1024, 2048),
        DecodeProblem(dtypes.u2, 128, 1024, 2048, dtypes.bf16, zero_points=True),
    ):
        space = decode_search_space(
            problem.weight_dtype,
            problem.k,
            problem.n,
            1,
            activation_dtype=problem.activation_dtype,
            zero_points=problem.zero_points,
        )
        assert any(c.magic_bias for c in space) is not problem.zero_points
        for config in space:
            programs = decode_programs(problem, config)
            assert (programs.reduce is None) == (config.split == 1 or config.fused_sum)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((dtypes.i4, 128, 1000, 2048), r"k=1000; expected a positive multiple of 16"),
        ((dtypes.i4, 128, 1024, 2000), r"n=2000; expected a positive multiple of 64"),
        ((dtypes.i4, 100, 1024, 2048), r"group_size=100; expected a positive multiple of 16"),
        ((dtypes.i4, 128, 1024, 2048, dtypes.f32), r"activation_dtype=f32; expected f16 or bf16"),
        ((dtypes.i4, 128, 1024, 2048, dtypes.f16, 1), r"zero_points=1; expected True or False"),
        ((dtypes.i32, 128, 1024, 2048), r"i32 is not a weight type"),
    ],
)
def test_decode_problem_refuses_bad_fields(arguments: tuple, message: str) -> None:
    with pytest.raises(VerificationError, match=message):
        DecodeProblem(*arguments)


def test_decode_programs_raise_for_a_config_that_does_not_fit() -> None:
    problem = DecodeProblem(dtypes.i4, 128, 1024, 2048)
    with pytest.raises(SpecializationError, match=r"constant k .* = 1024 is outside"):
        decode_programs(problem, DequantConfig(units_k=8, split=16))
    with pytest.raises(VerificationError, match=r"group_size=128 is not a multiple of the k-tile"):
        decode_programs(problem, DequantConfig(units_k=16))


# -- the autotuner on fakes ---------------------------------------------------------------------


def test_the_fastest_candidate_wins(tmp_path: Path) -> None:
    fake = FakeTuning(_times(t32d2=7.5, t64d1=9.0))
    result = fake.tune(RecordStore(tmp_path))
    assert result.choice == {"tile": 32, "depth": 2}
    assert result.built == ("kernel", (32, 2))
    assert (result.from_cache, result.us) == (False, 7.5)
    assert [t.status for t in result.trials] == ["measured"] * len(SPACE)
    assert fake.measured == [FakeTuning.name(c) for c in SPACE]  # in order, each once


def test_pruned_candidates_are_never_built_or_measured(tmp_path: Path) -> None:
    fake = FakeTuning(_times(t16d1=1.0, t64d2=3.0), prune=frozenset({(16, 1), (16, 2)}))
    result = fake.tune(RecordStore(tmp_path))
    assert result.choice == {"tile": 64, "depth": 2}
    assert (16, 1) not in fake.built and (16, 1) not in fake.measured
    assert [t.status for t in result.trials][:2] == ["pruned", "pruned"]
    assert "tile 16 does not fit" in result.trials[0].detail
    assert sorted(fake.built) == sorted(FakeTuning.name(c) for c in SPACE[2:])


@pytest.mark.parametrize("step", ["build", "measure"])
def test_a_candidate_found_not_worth_measuring_is_pruned_without_a_warning(
    tmp_path: Path, step: str
) -> None:
    """A build or measure that raises `CandidatePruned` prunes its candidate: a "pruned"
    trial with the reason, no warning, counted with construct's refusals in the summary, and
    the choice stored (nothing went unmeasured)."""
    fake = FakeTuning(_times(t16d1=1.0, t32d1=2.0), prune=frozenset({(64, 2)}))
    inner = getattr(fake, step)

    def refusing(*arguments: object) -> object:
        named = arguments[-1][1] if step == "measure" else FakeTuning.name(arguments[0])
        if named == (16, 1):
            raise CandidatePruned("its grid takes 2 waves, its base's 1")
        return inner(*arguments)

    setattr(fake, step, refusing)
    stream = io.StringIO()
    store = RecordStore(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = fake.tune(store, progress=stream)
    assert result.choice == {"tile": 32, "depth": 1}
    first = result.trials[0]
    assert (first.candidate, first.status, first.us) == ({"tile": 16, "depth": 1}, "pruned", None)
    assert first.detail == "its grid takes 2 waves, its base's 1"
    assert [t.status for t in result.trials].count("pruned") == 2
    assert (16, 1) not in fake.measured
    assert "2 pruned, 0 failed" in stream.getvalue()
    assert fake.tune(store).from_cache  # stored


def test_specialization_errors_prune_too(tmp_path: Path) -> None:
    def construct(candidate: dict) -> dict:
        if candidate["tile"] == 64:
            raise SpecializationError("constant k = 16 is outside the parameter's bounds")
        return candidate

    result = autotune(
        "fake/1",
        KEY,
        SPACE,
        construct=construct,
        build=lambda candidate, program: candidate,
        measure=lambda built: 100.0 - built["tile"],
        store=RecordStore(tmp_path),
        progress=False,
    )
    assert result.choice == {"tile": 32, "depth": 1}
    assert [t.status for t in result.trials].count("pruned") == 2


def test_ties_go_to_the_earlier_candidate(tmp_path: Path) -> None:
    times = _times(t32d1=5.0, t64d2=5.0)
    assert FakeTuning(times).tune(RecordStore(tmp_path / "a")).choice == {"tile": 32, "depth": 1}
    reverse = list(reversed(SPACE))
    chosen = FakeTuning(times).tune(RecordStore(tmp_path / "b"), space=reverse).choice
    assert chosen == {"tile": 64, "depth": 2}
    again = FakeTuning(times).tune(RecordStore(tmp_path / "c")).choice
    assert again == {"tile": 32, "depth": 1}


def test_a_warm_cache_measures_nothing(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    first = FakeTuning(_times(t16d2=4.0)).tune(store)
    warm = FakeTuning(_times(t16d2=99.0, t64d1=1.0))  # different times: must not be asked
    second = warm.tune(store)
    assert warm.measured == [] and warm.built == [(16, 2)] and warm.constructed == [(16, 2)]
    assert (second.choice, second.built, second.us) == (first.choice, ("kernel", (16, 2)), 4.0)
    assert (second.from_cache, second.trials) == (True, ())


def test_the_record_holds_key_space_choice_and_trials(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    FakeTuning(_times(t64d1=2.0), prune=frozenset({(16, 1)})).tune(store)
    record = store.load(record_key("fake/1", {"key": KEY, "space": space_digest(SPACE)}))
    assert record is not None
    assert {name: record[name] for name in ("format", "namespace", "key", "space", "choice")} == {
        "format": RECORD_FORMAT,
        "namespace": "fake/1",
        "key": KEY,
        "space": space_digest(SPACE),
        "choice": {"tile": 64, "depth": 1},
    }
    assert record["us"] == 2.0
    assert record["trials"][0]["status"] == "pruned"
    assert record["trials"][4] == {
        "candidate": {"tile": 64, "depth": 1},
        "status": "measured",
        "us": 2.0,
        "detail": "",
    }


def test_a_new_search_space_is_tuned_again(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    FakeTuning(_times(t16d1=1.0)).tune(store)
    fake = FakeTuning(_times(t16d1=1.0, t32d2=3.0))
    result = fake.tune(store, space=SPACE[1:])
    assert not result.from_cache and len(fake.measured) == len(SPACE) - 1
    assert result.choice == {"tile": 32, "depth": 2}


def _record_path(store: RecordStore) -> Path:
    return store.entry_path(record_key("fake/1", {"key": KEY, "space": space_digest(SPACE)}))


def _flip_a_byte(path: Path, store: RecordStore) -> None:
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01
    path.write_bytes(bytes(data))


def _record_of_another_key(path: Path, store: RecordStore) -> None:
    other = record_key("fake/1", {"key": {**KEY, "k": 8192}, "space": space_digest(SPACE)})
    store.store(other, json.loads(json.dumps(store.load(record_key_of(path)))))
    path.write_bytes(store.entry_path(other).read_bytes())


def _symlink_to_a_valid_record(path: Path, store: RecordStore) -> None:
    elsewhere = path.parent.parent / "elsewhere.record"
    elsewhere.write_bytes(path.read_bytes())
    elsewhere.chmod(0o600)
    path.unlink()
    path.symlink_to(elsewhere)


def _group_readable(path: Path, store: RecordStore) -> None:
    path.chmod(0o640)


def _stale_choice(path: Path, store: RecordStore) -> None:
    record = store.load(record_key_of(path))
    store.store(record_key_of(path), {**record, "choice": {"tile": 128, "depth": 1}})


def _other_namespace(path: Path, store: RecordStore) -> None:
    record = store.load(record_key_of(path))
    store.store(record_key_of(path), {**record, "namespace": "fake/2"})


def _other_space(path: Path, store: RecordStore) -> None:
    record = store.load(record_key_of(path))
    store.store(record_key_of(path), {**record, "space": space_digest(SPACE[1:])})


def _other_format(path: Path, store: RecordStore) -> None:
    record = store.load(record_key_of(path))
    store.store(record_key_of(path), {**record, "format": RECORD_FORMAT + 1})


def _with_time_text(path: Path, store: RecordStore, us_text: str) -> None:
    """Rewrite the record at `path` with `us_text` as the JSON text of its time: a number that
    `store` never writes, so the entry is written by the store's own entry writer (its hash
    checks pass)."""
    record = store.load(record_key_of(path))
    text = json.dumps({**record, "us": 0}, separators=(",", ":"))
    text = text.replace('"us":0', f'"us":{us_text}')
    store._store_content(record_key_of(path), text.encode("ascii"))


def _time_past_floats(path: Path, store: RecordStore) -> None:
    _with_time_text(path, store, "1e400")  # read as inf


def _time_an_int_past_floats(path: Path, store: RecordStore) -> None:
    _with_time_text(path, store, "1" + "0" * 400)  # an int float() cannot take


def record_key_of(path: Path) -> str:
    return path.name.removesuffix(".record")


@pytest.mark.parametrize(
    "spoil",
    [
        _flip_a_byte,
        _record_of_another_key,
        _symlink_to_a_valid_record,
        _group_readable,
        _stale_choice,
        _other_namespace,
        _other_space,
        _other_format,
        _time_past_floats,
        _time_an_int_past_floats,
    ],
    ids=lambda spoil: spoil.__name__.strip("_"),
)
def test_a_bad_record_is_tuned_again_and_replaced(tmp_path: Path, spoil) -> None:
    store = RecordStore(tmp_path / "cache")
    FakeTuning(_times(t16d2=4.0)).tune(store)
    path = _record_path(store)
    spoil(path, store)
    retune = FakeTuning(_times(t32d1=2.0))
    result = retune.tune(store)
    assert not result.from_cache and len(retune.measured) == len(SPACE)
    assert result.choice == {"tile": 32, "depth": 1}
    assert path.is_file() and not path.is_symlink()
    warm = FakeTuning(_times())
    assert warm.tune(store).choice == {"tile": 32, "depth": 1} and warm.measured == []


def test_a_recorded_choice_that_no_longer_builds_is_tuned_again(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    FakeTuning(_times(t16d2=4.0)).tune(store)
    fake = FakeTuning(_times(t32d1=3.0), prune=frozenset({(16, 2)}))
    result = fake.tune(store)
    assert not result.from_cache and result.choice == {"tile": 32, "depth": 1}


def test_builds_run_in_parallel(tmp_path: Path) -> None:
    """Three builds wait for each other at a barrier: serial builds would break it."""
    barrier = threading.Barrier(3, timeout=20)
    threads: set[int] = set()
    space = SPACE[:3]

    def build(candidate: dict, program: dict) -> dict:
        threads.add(threading.get_ident())
        barrier.wait()
        return candidate

    measured_in: set[int] = set()

    def measure(built: dict) -> float:
        measured_in.add(threading.get_ident())
        return float(built["tile"] + built["depth"])

    result = autotune(
        "fake/1",
        KEY,
        space,
        construct=lambda candidate: candidate,
        build=build,
        measure=measure,
        store=RecordStore(tmp_path),
        workers=3,
        progress=False,
    )
    assert result.choice == {"tile": 16, "depth": 1}
    assert len(threads) == 3 and threading.get_ident() not in threads
    assert measured_in == {threading.get_ident()}


def test_failed_candidates_are_reported_and_never_chosen(tmp_path: Path) -> None:
    def build(candidate: dict, program: dict) -> dict:
        if candidate == {"tile": 16, "depth": 1}:
            raise CompilationError("NVRTC: too many resources")
        return candidate

    def measure(built: dict) -> float:
        if built == {"tile": 16, "depth": 2}:
            raise TuningError("relative error 3.1e-01 against torch")
        if built == {"tile": 32, "depth": 1}:
            raise LaunchError("block_threads 256 exceeds the 128 threads per block")
        if built == {"tile": 32, "depth": 2}:
            return float("nan")
        return float(built["tile"])

    with pytest.warns(RuntimeWarning, match=r"4 candidates failed: .*too many resources"):
        result = autotune(
            "fake/1",
            KEY,
            SPACE,
            construct=lambda candidate: candidate,
            build=build,
            measure=measure,
            store=RecordStore(tmp_path),
            progress=False,
        )
    assert result.choice == {"tile": 64, "depth": 1}
    assert [t.status for t in result.trials] == ["failed"] * 4 + ["measured"] * 2
    assert "CompilationError: NVRTC" in result.trials[0].detail
    assert "measure gave nan" in result.trials[3].detail


def test_a_time_of_zero_is_measured_and_a_negative_one_fails(tmp_path: Path) -> None:
    fake = FakeTuning(_times(t16d2=0.0, t32d1=-0.5, t64d1=2.0))
    with pytest.warns(RuntimeWarning, match=r"1 candidates failed: tile=32 depth=1: measure gave"):
        result = fake.tune(RecordStore(tmp_path))
    assert (result.choice, result.us) == ({"tile": 16, "depth": 2}, 0.0)
    assert [t.status for t in result.trials] == ["measured"] * 2 + ["failed"] + ["measured"] * 3
    assert "measure gave -0.5; expected a finite time >= 0 in us" in result.trials[2].detail


def _busy_host_tuning(store: RecordStore, refusals: dict[tuple[int, int], int], times):
    """A tuning of SPACE whose measure refuses each candidate's first `refusals[c]` attempts
    with `TimingError` (a busy host), then gives `times[c]`; returns the result and the
    attempts made per candidate."""
    attempts: dict[tuple[int, int], int] = {}

    def measure(built: dict) -> float:
        name = FakeTuning.name(built)
        attempts[name] = attempts.get(name, 0) + 1
        if attempts[name] <= refusals.get(name, 0):
            raise TimingError("median_us: queuing one run took up to 152239 us on the host")
        return times[name]

    result = autotune(
        "fake/1",
        KEY,
        SPACE,
        construct=lambda candidate: candidate,
        build=lambda candidate, program: candidate,
        measure=measure,
        store=store,
        progress=False,
    )
    return result, attempts


def test_a_measurement_refused_on_a_busy_host_is_tried_again(tmp_path: Path) -> None:
    """Refused twice, the fastest candidate is measured at the third attempt: chosen, no
    failure, the record stored (a warm tuning measures nothing)."""
    assert issubclass(TimingError, LaunchError) and MEASURE_ATTEMPTS == 3
    store = RecordStore(tmp_path)
    result, attempts = _busy_host_tuning(store, {(16, 1): 2}, _times(t16d1=1.0))
    assert result.choice == {"tile": 16, "depth": 1} and result.us == 1.0
    assert attempts[16, 1] == 3 and set(attempts.values()) == {1, 3}
    assert [t.status for t in result.trials] == ["measured"] * 6
    warm, attempts = _busy_host_tuning(store, {}, _times())
    assert warm.from_cache and warm.choice == result.choice and attempts == {}


def test_a_candidate_never_measured_leaves_the_choice_unstored(tmp_path: Path) -> None:
    """Refused at every attempt, the fastest candidate fails and the next is chosen, but that
    choice is not stored: the next tuning measures again (and, the host quiet, finds it)."""
    store = RecordStore(tmp_path)
    with pytest.warns(RuntimeWarning, match=r"1 candidates failed: .*the choice is not stored"):
        result, attempts = _busy_host_tuning(store, {(16, 1): 9}, _times(t16d1=1.0, t32d2=2.0))
    assert result.choice == {"tile": 32, "depth": 2} and not result.from_cache
    assert attempts[16, 1] == MEASURE_ATTEMPTS
    assert "TimingError: median_us" in result.trials[0].detail
    again, attempts = _busy_host_tuning(store, {}, _times(t16d1=1.0, t32d2=2.0))
    assert not again.from_cache and len(attempts) == 6
    assert again.choice == {"tile": 16, "depth": 1}


@settings(max_examples=40, deadline=None)
@given(
    refusals=st.lists(st.integers(0, MEASURE_ATTEMPTS + 1), min_size=6, max_size=6),
    times=st.lists(st.integers(1, 9), min_size=6, max_size=6),
)
def test_busy_host_refusals_choose_the_fastest_measured_and_store_only_complete_tunings(
    tmp_path_factory: pytest.TempPathFactory, refusals: list[int], times: list[int]
) -> None:
    """For any refusals per candidate: the choice is the fastest (first of equals) of the
    candidates refused fewer than MEASURE_ATTEMPTS times; the record is stored exactly when
    every candidate was measured; no tuning at all when none was."""
    names = [FakeTuning.name(c) for c in SPACE]
    store = RecordStore(tmp_path_factory.mktemp("records"))
    measurable = [i for i in range(6) if refusals[i] < MEASURE_ATTEMPTS]
    refused = dict(zip(names, refusals, strict=True))
    timed = {name: float(t) for name, t in zip(names, times, strict=True)}
    if not measurable:
        with pytest.raises(TuningError, match="none of the 6 candidates could be measured"):
            _busy_host_tuning(store, refused, timed)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result, attempts = _busy_host_tuning(store, refused, timed)
    fastest = min(measurable, key=lambda i: (times[i], i))
    assert result.choice == SPACE[fastest]
    assert attempts == {n: min(r, MEASURE_ATTEMPTS - 1) + 1 for n, r in refused.items()}
    stored = len(measurable) == 6
    warm, attempts = _busy_host_tuning(store, {}, timed)
    assert warm.from_cache == stored and (attempts == {}) == stored


def test_no_measurable_candidate_is_an_error(tmp_path: Path) -> None:
    def build(candidate: dict, program: dict) -> dict:
        raise CompilationError(f"tile {candidate['tile']} does not compile")

    with pytest.raises(TuningError, match=r"none of the 6 candidates could be measured .*tile 16"):
        autotune(
            "fake/1",
            KEY,
            SPACE,
            construct=lambda candidate: candidate,
            build=build,
            measure=lambda built: 1.0,
            store=RecordStore(tmp_path),
            progress=False,
        )
    assert list(tmp_path.iterdir()) == []


def test_a_bug_in_a_measure_propagates(tmp_path: Path) -> None:
    def measure(built: dict) -> float:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.raises(RuntimeError, match="illegal memory access"):
        autotune(
            "fake/1",
            KEY,
            SPACE,
            construct=lambda candidate: candidate,
            build=lambda candidate, program: candidate,
            measure=measure,
            store=RecordStore(tmp_path),
            progress=False,
        )


@pytest.mark.parametrize(
    ("namespace", "key", "space", "message"),
    [
        ("fake/1", KEY, [], r"an empty search space"),
        ("fake/1", KEY, [{"tile": 1}, {"tile": 1}], r'candidates \{"tile":1\} appear twice'),
        (
            "fake/1",
            KEY,
            [{"tile": 1, "depth": 2}, {"depth": 2, "tile": 1}],
            r'candidates \{"depth":2,"tile":1\} appear twice',
        ),
        ("fake/1", KEY, [{"tile": [1, 2]}], r"tile=\[1, 2\]; expected a str, int, bool"),
        ("fake/1", KEY, [{"tile": float("inf")}], r"tile=inf; expected a str, int, bool"),
        ("fake/1", KEY, [{"tile": 2**63}], r"tile is an int of 64 bits; expected"),
        ("fake/1", KEY, [{"tile": -(2**63) - 1}], r"tile is an int of 64 bits; expected"),
        ("fake/1", KEY, {"tile": 1}, r"search space .*; expected a sequence of candidates"),
        ("fake/1", {"k": (1, 2)}, SPACE, r"tuning key .*k=\(1, 2\)"),
        ("fake/1", {3: "x"}, SPACE, r"key 3 is not a str"),
        ("", KEY, SPACE, r"tuning namespace ''; expected a non-empty string"),
    ],
)
def test_malformed_tunings_are_refused(
    tmp_path: Path, namespace: str, key: object, space: object, message: str
) -> None:
    with pytest.raises(TuningError, match=message):
        autotune(
            namespace,
            key,
            space,
            construct=lambda candidate: candidate,
            build=lambda candidate, program: candidate,
            measure=lambda built: 1.0,
            store=RecordStore(tmp_path),
        )


def test_progress_summary_on_a_cold_tuning_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = io.StringIO()
    store = RecordStore(tmp_path)
    FakeTuning(_times(t16d2=4.0), prune=frozenset({(64, 2)})).tune(store, progress=stream)
    summary = stream.getvalue().strip().splitlines()[-1]
    assert summary.startswith("tuned fake/1 gpu=Fake GPU arch=sm_90a k=4096: 6 candidates, ")
    assert "1 pruned, 0 failed; best 4.00 us with tile=16 depth=2" in summary
    FakeTuning(_times()).tune(store, progress=True)
    assert capsys.readouterr().err == ""  # warm: no display
    FakeTuning(_times()).tune(RecordStore(tmp_path / "other"), progress=True)
    assert "tuned fake/1" in capsys.readouterr().err
    FakeTuning(_times()).tune(RecordStore(tmp_path / "quiet"), progress=False)
    assert capsys.readouterr().err == ""


def test_a_refused_record_store_warns_and_still_returns(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def refuse(source: object, target: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("backend.cache.os.replace", refuse)
    with pytest.warns(RuntimeWarning, match=r"could not store the tuning .*No space left"):
        result = FakeTuning(_times(t16d1=1.0)).tune(RecordStore(tmp_path))
    assert result.choice == {"tile": 16, "depth": 1}


# -- DecodeMatmul.tuned, compiled for sm_90a without a GPU --------------------------------------


def test_decode_matmul_tuned_end_to_end_without_a_gpu(tmp_path: Path) -> None:
    """Nine candidates (3-bit weights: one k-tile size, the group, depth 1, without the late
    scale, with it, and a stream-K point, for each warp count; no biases kept, which 3 bits
    compile longer), compiled with NVRTC; a fake measure that prefers 4 warps, the late scale
    and split-k to stream-K; then a warm lookup that measures nothing."""
    problem = DecodeProblem(dtypes.i3, 128, 1024, 2048)
    measured: list[DequantConfig] = []

    def measure(operation: DecodeMatmul) -> float:
        measured.append(operation.config)
        late = 1.0 if operation.config.late_scale else 0.0
        stream = 0.5 if operation.config.stream_k else 0.0
        return {2: 30.0, 4: 10.0, 8: 20.0}[operation.config.warps] - late + stream

    options = {"gpu_name": "Fake GPU", "sm_count": 132, "arch": "sm_90a", "progress": False}
    store = RecordStore(tmp_path)
    cold = DecodeMatmul.tuned(problem, 1, measure=measure, store=store, **options)
    space = decode_search_space(dtypes.i3, 1024, 2048, 1)
    assert measured == space and len(space) == 9
    # A fused sum, the scales applied to the products.
    assert cold.config == DequantConfig(
        warps=4, units_k=8, split=2, depth=1, late_scale=True, weights_as_a=True
    )
    assert (cold.launches, cold.arch, cold.tuning.from_cache) == (1, "sm_90a", False)
    assert cold.matmul_kernel.constants == {"n": 2048, "k": 1024}
    warm = DecodeMatmul.tuned(problem, 1, measure=measure, store=store, **options)
    assert len(measured) == 9
    assert warm.config == cold.config and warm.tuning.from_cache
    key = decode_tuning_key(problem, 1, gpu_name="Fake GPU", arch="sm_90a")
    entry = record_key(NAMESPACE, {"key": key, "space": space_digest([asdict(c) for c in space])})
    assert store.load(entry)["choice"] == asdict(cold.config)


@pytest.mark.parametrize(("twin_waves", "status"), [(2, "pruned"), (1, "measured")])
def test_the_tuner_measures_a_parts_twin_only_where_its_grid_keeps_its_waves(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, twin_waves: int, status: str
) -> None:
    """A space of a split-8 point in a 16-row block, its twin with four parts a step, and a
    split-4 point, compiled with NVRTC: where the twin's grid takes more waves than its
    base's (as `DecodeMatmul.whole_waves` gives them, here stood in for) the twin is pruned
    unmeasured, else measured and, being fastest, chosen."""
    problem = DecodeProblem(dtypes.i3, 128, 4096, 2048)
    base = DequantConfig(warps=4, units_k=8, split=8, late_scale=True, parts_batch=2)
    twin, other = replace(base, parts_batch=4), replace(base, split=4, parts_batch=2)
    assert parts_twin_base(twin) == base
    space = [base, twin, other]
    monkeypatch.setattr(
        "backend.decode_matmul.decode_search_space", lambda *arguments, **options: space
    )
    waves_asked: list[tuple[DequantConfig, int, int]] = []

    def whole_waves(operation: DecodeMatmul, m: int, sm_count: int) -> int:
        waves_asked.append((operation.config, m, sm_count))
        return twin_waves if operation.config == twin else 1

    monkeypatch.setattr(DecodeMatmul, "whole_waves", whole_waves)
    measured: list[DequantConfig] = []

    def measure(operation: DecodeMatmul) -> float:
        measured.append(operation.config)
        return {base: 20.0, twin: 10.0, other: 30.0}[operation.config]

    options = {"gpu_name": "Fake GPU", "sm_count": 132, "arch": "sm_90a", "progress": False}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chosen = DecodeMatmul.tuned(
            problem, 16, measure=measure, store=RecordStore(tmp_path), **options
        )
    assert [t.status for t in chosen.tuning.trials] == ["measured", status, "measured"]
    assert waves_asked == [(c, 16, 132) for c in space]
    if status == "pruned":
        assert measured == [base, other] and chosen.config == base
        assert chosen.tuning.trials[1].detail == (
            "its grid takes 2 waves on 132 SMs, its base's (parts_batch=2) 1"
        )
    else:
        assert measured == space and chosen.config == twin


def test_whole_waves_of_a_compiled_decode_matmul_are_its_grid_over_its_residency() -> None:
    """The waves of the matmul launch, from the CUBIN's registers and shared bytes: the grid
    (N / 256 column tiles, a row of blocks, the split) over the blocks an SM holds times the
    SMs, a partial wave counted whole."""
    problem = DecodeProblem(dtypes.i3, 128, 4096, 2048)
    config = DequantConfig(warps=4, units_k=8, split=8, late_scale=True, parts_batch=2)
    operation = DecodeMatmul(problem, config, arch="sm_90a")
    kernel = operation.matmul_kernel.kernel
    registers = cubin_registers(kernel.cubin)[kernel.entry]
    shared = cubin_static_shared(kernel.cubin)[kernel.entry] + kernel.shared_bytes
    resident = resident_blocks(registers, 128, shared).blocks
    assert resident == kernel.residency().blocks >= 1
    grid = 8 * 1 * 8  # column tiles, rows of blocks, split
    enough = -(-grid // resident)  # the fewest SMs that take the grid in one wave
    for sm_count, waves in ((1, enough), (enough, 1), (enough - 1, 2), (132, 1)):
        assert operation.whole_waves(16, sm_count) == waves
    assert operation.whole_waves(16 * 200, 1) == -(-grid * 200 // resident)
    for bad in (0, -1, True):
        with pytest.raises(LaunchError, match=f"m={bad!r}"):
            operation.whole_waves(bad, 132)
    with pytest.raises(LaunchError, match="sm_count=0"):
        operation.whole_waves(16, 0)


def test_decode_matmul_tuned_fits_the_bucket_s_choice_to_the_batch(tmp_path: Path) -> None:
    """The bucket [8, 12) is tuned at 8 rows; a fake measure prefers the 8-row form, so 8 rows
    take one 8-row block and 11 rows the same choice with two (decoding the weights once);
    the record is the bucket's, measured once."""
    problem = DecodeProblem(dtypes.i3, 128, 1024, 2048)
    measured: list[DequantConfig] = []

    def measure(operation: DecodeMatmul) -> float:
        measured.append(operation.config)
        return 1.0 if operation.config.weights_as_a else 2.0

    options = {"gpu_name": "Fake GPU", "sm_count": 132, "arch": "sm_90a", "progress": False}
    store = RecordStore(tmp_path)
    eight = DecodeMatmul.tuned(problem, 8, measure=measure, store=store, **options)
    # 39: the 16-row form's stream-K points at three quarters of the byte model's occupancy
    # (one a warp count), its eleven stream-K points with shared rings (six of two stages,
    # five deeper), and its late-scale points with the rows' ring among them (five). The
    # 3-bit words' ring pads each thread's words (`weight_ring_thread_words`), so the 8-warp
    # block's split ring of four stages no longer fits, nor its twin with the rows' ring.
    assert measured == decode_search_space(dtypes.i3, 1024, 2048, 8) and len(measured) == 39
    assert (eight.config.weights_as_a, eight.config.units_m) == (True, 1)
    eleven = DecodeMatmul.tuned(problem, 11, measure=measure, store=store, **options)
    assert len(measured) == 39 and eleven.tuning.from_cache
    assert eleven.config == replace(eight.config, units_m=2)
    assert eleven.tuning.choice == asdict(eight.config)


def test_the_modules_import_without_torch() -> None:
    script = (
        "import sys\n"
        "sys.modules['torch'] = None  # any import of torch fails\n"
        "import backend.autotune, backend.decode_matmul, backend.timing\n"
        "print('imported')\n"
    )
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPOSITORY), os.environ.get("PYTHONPATH", "")]),
    }
    completed = subprocess.run(
        [sys.executable, "-c", script],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "imported"


def test_prepare_gets_every_constructed_candidate_once_and_only_when_cold(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    batches: list[list[str]] = []
    cold = FakeTuning(_times(t32d2=3.0), prune=frozenset({(16, 1)}))
    cold.tune(store, prepare=batches.append)
    expected = [f"program {FakeTuning.name(c)}" for c in SPACE if FakeTuning.name(c) != (16, 1)]
    assert batches == [expected]
    warm = FakeTuning(_times(t32d2=3.0))
    warm.tune(store, prepare=batches.append)
    assert len(batches) == 1 and warm.built == [(32, 2)]

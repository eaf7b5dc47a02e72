"""The prefill forms of the packed-weight matmul on the GPU (marked `gpu`):
`ir.examples.wgmma_dequant_matmul` (the dequantized weights as wgmma's register operand) and
`ir.examples.staged_dequant_matmul` (the dequantized weights staged in shared memory).

For every weight type (u1..u8, i1..i8, f4e2m1, f6e3m2), in a rotation of configurations of each
program (warpgroups, units, k-tile, rows per block, stages, register depth; for the register
form unroll, the overlapped order whose wgmma stays in flight when unrolled, the k-tile's dot
split into a chain of k16 steps; for the staged form the grid of warps over a k-tile's units),
and for bf16 activations with zero points: the kernel against `ir.run_reference` within the
tensor cores' rounding (wgmma sums each k16 step in its own order), rows of A past m left
unwritten; with k split over grid z or over stream-K's persistent blocks, the tile counters
left zero and a second launch the same bits; loops of 48 k-tiles, which the compiler does not
unroll whole. On sm_90a the dots run as ``wgmma`` (the staged form's from two shared tiles, in
flight into the next k-tile) and the activations come by TMA; one case of each is compiled
without TMA (``tma=False``: the ``cp.async`` fallback of the bulk copies) and one without wgmma
(``wgmma=False``: ``mma.sync``), so the paths the lowering may take all run.

Kernels compile in a thread pool first (NVRTC needs no GPU), then run.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest

import backend
from backend.batch_matmul import BATCH_PATHS, prefill_config
from ir import dtypes, run_reference
from ir.dtypes import DataType
from ir.examples.packed_weights import pack_scales, pack_weights
from ir.examples.staged_dequant_matmul import StagedDequantConfig, staged_dequant_matmul
from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig, wgmma_dequant_matmul
from ir.testing.quantized_problems import launch_workspace

pytestmark = pytest.mark.gpu

WEIGHT_TYPES = [
    *(dtypes.from_name(f"u{bits}") for bits in range(1, 9)),
    *(dtypes.from_name(f"i{bits}") for bits in range(1, 9)),
    dtypes.f4e2m1,
    dtypes.f6e3m2,
]
CONFIGS = [
    WgmmaDequantConfig(),
    WgmmaDequantConfig(block_m=32, stages=3, depth=2),
    WgmmaDequantConfig(block_m=16, units_k=2, stages=2, unroll=2),
    WgmmaDequantConfig(block_m=80, units_k=4, stages=4, min_blocks_per_sm=1),
    WgmmaDequantConfig(warpgroups=2, block_m=64, stages=5),
    WgmmaDequantConfig(units_n=2, block_m=24, units_k=8, stages=2),
    WgmmaDequantConfig(block_m=96, units_k=4, stages=3),
    WgmmaDequantConfig(block_m=8, units_k=1, stages=6, depth=3, unroll=3),
    WgmmaDequantConfig(block_m=64, stages=4, min_blocks_per_sm=2),
    WgmmaDequantConfig(block_m=40, units_k=2, stages=3, depth=2),
    WgmmaDequantConfig(warpgroups=2, block_m=16, stages=5),
    # Unrolled twice in the overlapped order: each copy's wgmma stays in flight.
    WgmmaDequantConfig(units_k=2, stages=4, unroll=2, overlap_dot=True, min_blocks_per_sm=2),
    WgmmaDequantConfig(block_m=24, units_k=4, stages=3, unroll=2, overlap_dot=True),
    WgmmaDequantConfig(
        warpgroups=2, block_m=32, units_k=1, stages=5, depth=2, unroll=2, overlap_dot=True
    ),
    # The k-tile's dot in k16 steps: one chain of wgmma groups, waited for once.
    WgmmaDequantConfig(stages=4, min_blocks_per_sm=2, split_dot=True),
    WgmmaDequantConfig(warpgroups=2, block_m=24, units_k=8, stages=3, depth=2, split_dot=True),
    WgmmaDequantConfig(block_m=16, units_k=2, stages=4, unroll=2, overlap_dot=True, split_dot=True),
    WgmmaDequantConfig(units_k=4, unroll=2, overlap_dot=True, split_dot=True, min_blocks_per_sm=2),
    # k split over grid z, the parts added by the tile's last block.
    WgmmaDequantConfig(block_m=64, stages=4, min_blocks_per_sm=2, split=2),
    WgmmaDequantConfig(block_m=24, units_k=2, stages=3, depth=2, split=4),
    WgmmaDequantConfig(
        block_m=56,
        units_k=4,
        unroll=2,
        overlap_dot=True,
        split_dot=True,
        min_blocks_per_sm=2,
        split=2,
    ),
    # Stream-K: 3 persistent blocks for 2 tiles of 4 k-tiles, each tile in two parts.
    WgmmaDequantConfig(block_m=64, stages=4, min_blocks_per_sm=2, stream_k=3),
    # Ring stages released to their next copies instead of a barrier per k-tile.
    WgmmaDequantConfig(stages=4, min_blocks_per_sm=2, release=True),
    WgmmaDequantConfig(block_m=56, stages=3, unroll=2, split_dot=True, release=True),
    WgmmaDequantConfig(warpgroups=2, block_m=24, units_k=2, stages=2, split=2, release=True),
    WgmmaDequantConfig(block_m=64, stages=4, min_blocks_per_sm=2, stream_k=3, release=True),
    # A producer warp issues the copies (thread groups): one consumer warpgroup, and two.
    WgmmaDequantConfig(stages=4, min_blocks_per_sm=2, release=True, producer=True),
    WgmmaDequantConfig(warpgroups=2, block_m=24, units_k=2, stages=2, release=True, producer=True),
    # A producer warpgroup keeping 24 registers, the consumers the rest (setmaxnreg).
    WgmmaDequantConfig(
        stages=4, min_blocks_per_sm=2, release=True, producer=True, producer_registers=24
    ),
    WgmmaDequantConfig(
        warpgroups=2,
        block_m=56,
        min_blocks_per_sm=1,
        release=True,
        producer=True,
        producer_registers=40,
    ),
    # The producer warpgroup with k split in two: the consumers add the parts.
    WgmmaDequantConfig(
        stages=4, min_blocks_per_sm=2, split=2, release=True, producer=True, producer_registers=24
    ),
    # Stream-K with the producer warpgroup (the segments' loop warp-specialised), and with the
    # dot in flight as well.
    WgmmaDequantConfig(
        min_blocks_per_sm=2, stream_k=5, release=True, producer=True, producer_registers=24
    ),
    WgmmaDequantConfig(
        units_k=2,
        unroll=2,
        min_blocks_per_sm=2,
        stream_k=7,
        release=True,
        overlap_dot=True,
        producer=True,
        producer_registers=24,
    ),
    # Each k-tile releases the stage of the one before, its dot kept running into the next
    # (wgmma in flight with a release): without a producer, and with a producer warpgroup
    # and a chain of dots.
    WgmmaDequantConfig(min_blocks_per_sm=2, unroll=2, release=True, overlap_dot=True),
    WgmmaDequantConfig(
        block_m=56,
        unroll=2,
        split_dot=True,
        min_blocks_per_sm=2,
        release=True,
        overlap_dot=True,
        producer=True,
        producer_registers=24,
    ),
    # The same with the k-tile's dot as a chain of steps, the loop unrolled twice.
    WgmmaDequantConfig(
        block_m=56,
        unroll=2,
        split_dot=True,
        min_blocks_per_sm=2,
        release=True,
        producer=True,
        producer_registers=24,
    ),
]
GROUP_SIZE = 128
SENTINEL = -7.0
"""What C holds before the launch: rows past m must keep it."""


def _torch():
    return pytest.importorskip("torch")


def _device(array: np.ndarray, dtype: DataType | None = None):
    """A NumPy array as a CUDA tensor (uint16 codes as `dtype`, f16 by default)."""
    torch = _torch()
    if array.dtype == np.uint16:
        tensor = torch.from_numpy(np.ascontiguousarray(array.view(np.int16))).cuda()
        return tensor.view(torch.bfloat16 if dtype == dtypes.bf16 else torch.float16)
    return torch.from_numpy(np.ascontiguousarray(array)).cuda()


def _k(config: WgmmaDequantConfig) -> int:
    """The K of a case: two groups, or whole k-tiles past them."""
    return math.lcm(GROUP_SIZE, config.block_k) * 2


def _run(
    program, kernel, config, weight, activation, zero_points, seed, k=None, m=None, n=None
) -> str | None:
    """Run one case on the GPU and in the interpreter (K = `k`, default `_k`; one column
    block and a partial second row block unless `n` and `m` say otherwise); a failure's
    description, or None."""
    torch = _torch()
    rng = np.random.default_rng(seed)
    n = config.block_n if n is None else n
    k = _k(config) if k is None else k
    m = config.block_m + 1 + seed % 13 if m is None else m
    groups = k // GROUP_SIZE
    a = activation.encode(rng.uniform(-1, 1, (m, k)))
    packed, _ = pack_weights(rng.integers(0, 1 << weight.nbits, (k, n)), weight)
    scales = rng.uniform(0.5, 1.5, (groups, n)) / 2 ** (weight.nbits - 1)
    extras = [activation.encode(scales)]
    if zero_points:
        extras.append(activation.encode(rng.integers(0, 1 << weight.nbits, (groups, n))))
    extras = [pack_scales(x) for x in extras]
    grid = config.grid(m, n, k)
    expected = np.zeros((m, n), dtype=np.uint16)
    args = [m, n, k, a, packed.view(np.uint8).reshape(-1), *extras]
    # With a split or stream-K: the f32 parts and the zeroed tile counters.
    workspace = launch_workspace(program, config, m, n, k)
    run_reference(program, *args, *workspace, expected, grid=grid)
    out = _device(activation.encode(np.full((m + 1, n), SENTINEL)), activation)
    device_args = [m, n, k, _device(a, activation), _device(packed)]
    device_args += [_device(x, activation) for x in extras]
    device_args += [_device(x) for x in workspace]
    kernel(*device_args, out, grid=grid)
    torch.cuda.synchronize()
    result = out.float().cpu().numpy().astype(np.float64)
    if not np.all(result[m] == SENTINEL):
        return f"{weight} {config}: a row past m was written"
    if workspace:
        if device_args[-1].count_nonzero().item():
            return f"{weight} {config}: a tile counter was left nonzero"
        # The parts are added in slot order whichever block comes last: the same bits again.
        again = torch.empty_like(out)
        kernel(*device_args, again, grid=grid)
        if not torch.equal(again[:m].view(torch.int16), out[:m].view(torch.int16)):
            return f"{weight} {config}: a second launch gave other bits"
    want = activation.decode(expected).astype(np.float64)
    error = float(np.abs(result[:m] - want).max()) / max(1.0, float(np.abs(want).max()))
    tolerance = 2e-3 if activation == dtypes.f16 else 1.6e-2
    return None if error < tolerance else f"{weight} {activation} {config}: error {error:.2e}"


STAGED_CONFIGS = [
    StagedDequantConfig(),
    StagedDequantConfig(block_m=64, stages=3, depth=1),
    StagedDequantConfig(warpgroups=2, units_n=4, k_warps=2, block_m=96, stages=5),
    StagedDequantConfig(warpgroups=1, units_n=1, k_warps=4, block_m=40, depth=3),
    StagedDequantConfig(warpgroups=2, units_n=2, units_k=8, k_warps=8, block_m=16),
    StagedDequantConfig(units_n=8, k_warps=2, block_m=64, min_blocks_per_sm=1),
    StagedDequantConfig(warpgroups=1, units_n=2, units_k=2, k_warps=2, block_m=8, stages=6),
]

FORMS = {
    "register": (wgmma_dequant_matmul, CONFIGS),
    "staged": (staged_dequant_matmul, STAGED_CONFIGS),
}
"""Each prefill form: its program and its rotation of configurations."""
ACTIVATION_CONFIGS = {
    "register": WgmmaDequantConfig(block_m=32, stages=3),
    "staged": StagedDequantConfig(block_m=64),
}
LONG_CONFIGS = [
    ("register", WgmmaDequantConfig(min_blocks_per_sm=2)),
    ("register", WgmmaDequantConfig(block_m=32, stages=3, depth=2)),
    ("register", WgmmaDequantConfig(units_k=2, unroll=2, overlap_dot=True, min_blocks_per_sm=2)),
    (
        "register",
        WgmmaDequantConfig(units_k=1, stages=6, unroll=2, overlap_dot=True, min_blocks_per_sm=2),
    ),
    ("register", WgmmaDequantConfig(min_blocks_per_sm=2, split_dot=True)),
    ("register", WgmmaDequantConfig(units_k=8, stages=3, unroll=2, split_dot=True)),
    # The chain of each copy in flight into the next copy.
    ("register", WgmmaDequantConfig(units_k=2, unroll=2, overlap_dot=True, split_dot=True)),
    (
        "register",
        WgmmaDequantConfig(
            units_k=4, block_m=56, unroll=2, overlap_dot=True, split_dot=True, min_blocks_per_sm=2
        ),
    ),
    ("register", WgmmaDequantConfig(block_m=64, stages=4, min_blocks_per_sm=2, split=4)),
    (
        "register",
        WgmmaDequantConfig(
            units_k=4, block_m=56, unroll=2, overlap_dot=True, split_dot=True, split=2
        ),
    ),
    ("register", WgmmaDequantConfig(block_m=64, stages=4, min_blocks_per_sm=2, stream_k=5)),
    (
        "register",
        WgmmaDequantConfig(
            units_k=4, block_m=56, unroll=2, overlap_dot=True, split_dot=True, stream_k=7
        ),
    ),
    # Ring stages released to their next copies: 12 laps of the ring's free barriers.
    ("register", WgmmaDequantConfig(min_blocks_per_sm=2, release=True)),
    (
        "register",
        WgmmaDequantConfig(block_m=56, unroll=2, split_dot=True, min_blocks_per_sm=2, release=True),
    ),
    ("register", WgmmaDequantConfig(stages=3, min_blocks_per_sm=2, stream_k=5, release=True)),
    # The copies from a producer warp, 12 laps of the ring ahead of the consumer warpgroup.
    ("register", WgmmaDequantConfig(min_blocks_per_sm=2, release=True, producer=True)),
    (
        "register",
        WgmmaDequantConfig(min_blocks_per_sm=2, release=True, producer=True, producer_registers=24),
    ),
    ("staged", StagedDequantConfig()),
    ("staged", STAGED_CONFIGS[2]),
]
"""(form, configuration) of the 48 k-tile runs."""


@pytest.mark.parametrize("form", FORMS)
def test_every_type_matches_the_interpreter(form: str) -> None:
    build_program, configs = FORMS[form]
    count = max(len(WEIGHT_TYPES), len(configs))
    jobs = [
        (WEIGHT_TYPES[i % len(WEIGHT_TYPES)], configs[i % len(configs)], {}) for i in range(count)
    ]
    # The bulk copies' cp.async fallback, and mma.sync in place of wgmma, on one case each.
    jobs += [(dtypes.i4, configs[1], {"tma": False}), (dtypes.u4, configs[3], {"wgmma": False})]

    def build(job):
        weight, config, options = job
        program = build_program(weight, GROUP_SIZE, config)
        constants = {"n": config.block_n, "k": _k(config)}
        return program, backend.compile(program, constants=constants, **options)

    with ThreadPoolExecutor(8) as pool:
        built = list(pool.map(build, jobs))
    failures = []
    for seed, ((weight, config, _), (program, kernel)) in enumerate(zip(jobs, built)):
        failure = _run(program, kernel, config, weight, dtypes.f16, False, seed)
        if failure:
            failures.append(failure)
    assert not failures, failures


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("weight", "activation", "zero_points"),
    [
        (dtypes.u4, dtypes.bf16, True),
        (dtypes.i8, dtypes.bf16, False),
        (dtypes.u3, dtypes.f16, True),
    ],
    ids=str,
)
def test_activation_types_and_zero_points_match_the_interpreter(
    form: str, weight: DataType, activation: DataType, zero_points: bool
) -> None:
    config = ACTIVATION_CONFIGS[form]
    program = FORMS[form][0](
        weight, GROUP_SIZE, config, activation_dtype=activation, zero_points=zero_points
    )
    kernel = backend.compile(program, constants={"n": config.block_n, "k": _k(config)})
    failure = _run(program, kernel, config, weight, activation, zero_points, weight.nbits)
    assert failure is None, failure


IN_FLIGHT_FRAGMENTS = WgmmaDequantConfig(
    block_m=256,
    stages=4,
    unroll=2,
    min_blocks_per_sm=1,
    overlap_dot=True,
    release=True,
    producer=True,
    producer_registers=24,
    warp_columns=16,
)
"""The prefill benchmark's tile of fragments for one warpgroup: 256 rows, a producer
warpgroup, the dot in flight (the cases below vary it)."""
BATCH_TILE = replace(IN_FLIGHT_FRAGMENTS, warpgroups=2, units_k=8, stages=3, depth=2)
"""QuantizedLinear's 128 x 256 tile: two consumer warpgroups, 128-deep k-tiles in three
stages, two k-tiles of weights in flight."""

FRAGMENT_CASES = [
    # (weight type, activation type, zero points, config, k-tiles): each warp one A fragment
    # of its warpgroup's unit. The prefill benchmark's tile (256 rows, a producer warpgroup),
    # the dot in flight, two warpgroups with a chain of dots, a split, stream-K, the staged
    # store; 48 k-tiles where the ring laps many times.
    (
        dtypes.i4,
        dtypes.f16,
        False,
        replace(IN_FLIGHT_FRAGMENTS, unroll=1, overlap_dot=False),
        48,
    ),
    (
        dtypes.i8,
        dtypes.f16,
        False,
        IN_FLIGHT_FRAGMENTS,
        48,
    ),
    (
        dtypes.u4,
        dtypes.bf16,
        True,
        WgmmaDequantConfig(warpgroups=2, block_m=128, stages=3, split_dot=True, warp_columns=16),
        6,
    ),
    (
        dtypes.u8,
        dtypes.f16,
        True,
        WgmmaDequantConfig(block_m=64, stages=4, split=2, warp_columns=16),
        8,
    ),
    (
        dtypes.i4,
        dtypes.f16,
        False,
        WgmmaDequantConfig(block_m=128, stages=4, stream_k=3, release=True, warp_columns=16),
        10,
    ),
    (
        dtypes.i4,
        dtypes.f16,
        False,
        replace(IN_FLIGHT_FRAGMENTS, block_m=128, min_blocks_per_sm=2, staged_store=True),
        48,
    ),
    # QuantizedLinear's 128 x 256 tile with 128-deep k-tiles: C staged in the ring's memory
    # (its three stages leave no room for a tile of its own) after the consumers' barrier.
    (
        dtypes.i4,
        dtypes.f16,
        False,
        replace(IN_FLIGHT_FRAGMENTS, warpgroups=2, units_k=8, stages=3, depth=2, staged_store=True),
        6,
    ),
    # That tile twice as wide (two units a warpgroup: 256 columns, 64-deep k-tiles in four
    # stages), refilled in place, C staged, at both widths: 128 rows with the dot in flight,
    # and Humming's sm_90 shape, 176 rows with the dot waited for.
    *(
        (
            weight,
            dtypes.f16,
            False,
            replace(
                IN_FLIGHT_FRAGMENTS,
                warpgroups=2,
                units_n=2,
                block_m=block_m,
                overlap_dot=overlap_dot,
                refill_in_place=True,
                staged_store=True,
            ),
            12,
        )
        for block_m, overlap_dot in ((128, True), (176, False))
        for weight in (dtypes.i4, dtypes.i8)
    ),
    # One persistent block for both row tiles: the producer copies the second tile's first
    # k-tiles while the consumers store the first.
    (
        dtypes.i4,
        dtypes.f16,
        False,
        replace(
            IN_FLIGHT_FRAGMENTS, block_m=64, min_blocks_per_sm=0, staged_store=True, persistent=1
        ),
        8,
    ),
]


@pytest.mark.parametrize(
    ("weight", "activation", "zero_points", "config", "tiles"), FRAGMENT_CASES, ids=str
)
def test_fragment_columns_match_the_interpreter(
    weight: DataType,
    activation: DataType,
    zero_points: bool,
    config: WgmmaDequantConfig,
    tiles: int,
) -> None:
    k = tiles * config.block_k
    program = wgmma_dequant_matmul(
        weight, GROUP_SIZE, config, activation_dtype=activation, zero_points=zero_points
    )
    kernel = backend.compile(program, constants={"n": config.block_n, "k": k})
    failure = _run(program, kernel, config, weight, activation, zero_points, tiles, k=k)
    assert failure is None, failure


@pytest.mark.parametrize(("form", "config"), LONG_CONFIGS, ids=str)
def test_a_long_k_loop_matches_the_interpreter(form: str, config) -> None:
    """48 k-tiles: a loop the compiler does not unroll whole, the rings (and the staged form's
    three weight buffers) wrapping many times."""
    k = 48 * config.block_k
    program = FORMS[form][0](dtypes.i4, GROUP_SIZE, config)
    kernel = backend.compile(program, constants={"n": config.block_n, "k": k})
    failure = _run(program, kernel, config, dtypes.i4, dtypes.f16, False, 5, k=k)
    assert failure is None, failure


@pytest.mark.parametrize("group_m", [2, 4])
def test_grouped_tile_rows_match_the_interpreter(group_m: int) -> None:
    """The staged 128 x 256 tile launched in groups of tile rows (`grouped_grid`) over 5 row
    blocks (the last partial) and 3 column blocks: in groups of 2, the third group's block past
    the fifth row idles; in groups of 4, the second group's three do."""
    config = replace(BATCH_TILE, staged_store=True, group_m=group_m)
    n, k = 3 * config.block_n, 6 * config.block_k
    m = 4 * config.block_m + 5
    grid = config.grid(m, n, k)
    assert grid == (group_m, 3, -(-5 // group_m))
    program = wgmma_dequant_matmul(dtypes.i8, GROUP_SIZE, config)
    kernel = backend.compile(program, constants={"n": n, "k": k})
    failure = _run(program, kernel, config, dtypes.i8, dtypes.f16, False, 5, k=k, m=m, n=n)
    assert failure is None, failure


@pytest.mark.parametrize("staged_store", [False, True])
def test_panel_waits_match_the_interpreter(staged_store: bool) -> None:
    """The 128 x 256 tile (producer warpgroup, dot in flight) with each 64-deep activation
    panel waited for on its own barrier before its own dot, over 3 row blocks (the last
    partial) and 2 column blocks, C stored plain and staged."""
    config = replace(BATCH_TILE, staged_store=staged_store, panel_waits=True)
    n, k = 2 * config.block_n, 6 * config.block_k
    m = 2 * config.block_m + 9
    program = wgmma_dequant_matmul(dtypes.i8, GROUP_SIZE, config)
    kernel = backend.compile(program, constants={"n": n, "k": k})
    failure = _run(program, kernel, config, dtypes.i8, dtypes.f16, False, 7, k=k, m=m, n=n)
    assert failure is None, failure


@pytest.mark.parametrize("weight", [dtypes.i4, dtypes.i8], ids=str)
@pytest.mark.parametrize("path", [6, 7, 8, 9, 10, 11, 12])
def test_later_batch_tiles_match_the_interpreter(path: int, weight: DataType) -> None:
    """QuantizedLinear's later tiles (`backend.batch_matmul.BATCH_PATHS[6:]`: 128 x 128 with
    two consumer warpgroups, 192 x 128 with three, 128 x 256, the last two with the weights
    refilled in place; 128 x 128 refilled in place; 128 x 256 refilled in place with k split in
    two, with the grid in groups of 4 tile rows, and with its last partial wave split in two
    (here every tile: 6 tiles on 132 SMs)), C staged in the ring's memory (not the split),
    over 3 row blocks (the last partial) and 2 column blocks."""
    config = prefill_config(BATCH_PATHS[path])
    # (A split tail's parts are whole runs of the unroll count: k a multiple of 4 k-tiles.)
    n, k = 2 * config.block_n, (8 if config.tail_wave else 6) * config.block_k
    m = 2 * config.block_m + 9
    program = wgmma_dequant_matmul(weight, GROUP_SIZE, config)
    kernel = backend.compile(program, constants={"n": n, "k": k})
    failure = _run(program, kernel, config, weight, dtypes.f16, False, 5, k=k, m=m, n=n)
    assert failure is None, failure


@pytest.mark.parametrize("weight", [dtypes.i4, dtypes.i8], ids=str)
def test_the_split_tail_matches_the_interpreter(weight: DataType) -> None:
    """QuantizedLinear's split-tail tile (`BATCH_PATHS[12]`) on waves of 4 blocks over 3 row
    blocks (the last partial) and 3 column blocks: 8 tiles whole, C staged in the ring's
    memory, the ninth in two halves summed in k order; the same bits on a second launch."""
    config = replace(prefill_config(BATCH_PATHS[12]), tail_wave=4)
    n, k = 3 * config.block_n, 8 * config.block_k
    m = 2 * config.block_m + 9
    assert config.grid(m, n, k) == (10, 1, 1) and config.partial_shape(m, n, k)[:2] == (2, 1)
    program = wgmma_dequant_matmul(weight, GROUP_SIZE, config)
    kernel = backend.compile(program, constants={"n": n, "k": k})
    failure = _run(program, kernel, config, weight, dtypes.f16, False, 7, k=k, m=m, n=n)
    assert failure is None, failure


@pytest.mark.parametrize(
    "config",
    [
        WgmmaDequantConfig(block_m=16, stages=3, stream_k=4, stream_k_tail=True),
        replace(BATCH_TILE, stream_k=4, stream_k_tail=True),
    ],
    ids=["64-column-tile", "128x256-tile"],
)
def test_the_stream_k_tail_matches_the_interpreter(config: WgmmaDequantConfig) -> None:
    """The data-parallel and stream-K hybrid over 9 row blocks (the last partial) and two
    column blocks: 18 tiles on waves of 4, the first 12 whole, one block each, the last 6
    shared by 4 blocks; the same bits on a second launch."""
    n, k = 2 * config.block_n, 6 * config.block_k
    m = 8 * config.block_m + 5
    assert config.prefix_tiles(m, n) == 12 and config.grid(m, n, k) == (16, 1, 1)
    program = wgmma_dequant_matmul(dtypes.i4, GROUP_SIZE, config)
    kernel = backend.compile(program, constants={"n": n, "k": k})
    failure = _run(program, kernel, config, dtypes.i4, dtypes.f16, False, 3, k=k, m=m, n=n)
    assert failure is None, failure

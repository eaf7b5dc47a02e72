"""Proofs about the packed weight format and the lowering of the kernels that read it.

The unit layouts of `ir.examples.packed_weights` and the kernel tiles built from them are
bijections onto their tiles (every weight, every word, held exactly once), proved with z3 and
cross-checked by enumerating the whole domain; layouts that are not bijections are refuted,
with the solver's counterexample re-evaluated here. Then `validate_lowering` proves every
address and every tensor-core claim of the decode kernel, `split_k_sum` and the packing
program at a decoding layer's shape, and of the prefill kernel with stream-K.
"""

from __future__ import annotations

import itertools
import json
import pickle
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from backend.batch_matmul import BATCH_PATHS, prefill_config
from backend.decode_matmul import decode_search_space
from backend.lower import lower
from ir import dtypes
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.examples.matmul import wgmma_dot_layouts
from ir.examples.packed_weights import (
    fragment_tile_layouts,
    pack_weights_program,
    scale_permutation,
    tile_layouts,
    unit_element_layout,
    unit_word_layout,
)
from ir.examples.register_dequant_matmul import (
    DequantConfig,
    register_dequant_matmul,
    split_k_sum,
)
from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig, wgmma_dequant_matmul
from layout_algebra.function_layout import FunctionLayout
from layout_algebra.register import replicate, spatial
from proofs import check_bijective, check_injective
from proofs.lowering_validation import validate_lowering

RLIMIT = 20_000_000
TIMEOUT = 60.0
LIMITS = {"timeout": TIMEOUT, "rlimit": RLIMIT}
LAYER = {"n": 12288, "k": 4096}
"""A decoding layer's weight shape: the constants the kernel is lowered for."""


def brute_bijective(layout: Any) -> bool:
    """Whether `layout.map` hits every coordinate of its shape exactly once, by enumeration."""
    images = Counter(
        layout.map(t, i) for t in range(layout.num_threads) for i in range(layout.local_size)
    )
    coordinates = set(itertools.product(*(range(extent) for extent in layout.shape)))
    return set(images) == coordinates and all(count == 1 for count in images.values())


def assert_bijection(layout: Any) -> None:
    result = check_bijective(layout, **LIMITS)
    assert result.holds is True, result.reason
    assert result.counterexample is None
    assert brute_bijective(layout)


# ------------------------------------------------------------------------------ bijections


@pytest.mark.parametrize("nbits", [None, *range(1, 9)])
def test_unit_element_layout_is_a_bijection(nbits: int | None) -> None:
    """The fragment order and the packed order of every width."""
    layout = unit_element_layout(nbits)
    assert (layout.shape, layout.num_threads, layout.local_size) == ((16, 64), 32, 32)
    assert_bijection(layout)


@pytest.mark.parametrize("nbits", range(1, 9))
def test_unit_word_layout_is_a_bijection(nbits: int) -> None:
    layout = unit_word_layout(nbits)
    assert (layout.shape, layout.num_threads, layout.local_size) == ((1, 32 * nbits), 32, nbits)
    assert_bijection(layout)


@pytest.mark.parametrize(
    ("nbits", "warps", "units_k", "units_n"),
    [
        (4, 1, 1, 1),  # one unit
        (4, 4, 4, 1),  # the default decode tile
        (3, 2, 2, 2),
        (1, 1, 8, 1),
        (8, 4, 4, 2),
        (6, 2, 1, 2),
    ],
)
def test_tile_layouts_are_bijections_that_view_into_each_other(
    nbits: int, warps: int, units_k: int, units_n: int
) -> None:
    weights, words = tile_layouts(nbits, warps, units_k, units_n)
    assert weights.shape == (16 * units_k, 64 * warps * units_n)
    assert words.shape == (units_k, 32 * nbits * warps * units_n)
    assert weights.num_threads == words.num_threads == 32 * warps
    # A thread's weights are exactly the bits of its words.
    assert weights.local_size * nbits == words.local_size * 32
    assert_bijection(weights)
    assert_bijection(words)


@pytest.mark.parametrize(
    ("nbits", "warpgroups", "units_k", "units_n"),
    [
        (4, 1, 1, 1),
        (4, 2, 4, 1),
        (8, 1, 2, 1),
        (8, 2, 1, 1),
        (4, 1, 2, 2),
        (8, 2, 1, 2),
        (4, 2, 1, 3),
    ],
)
def test_fragment_tile_layouts_are_bijections_that_view_into_each_other(
    nbits: int, warpgroups: int, units_k: int, units_n: int
) -> None:
    """Each warp one A fragment of each of its warpgroup's units: the codes and the words
    bijections that view into each other, each thread's codes those of its fragments in the
    packed order (the unit's lane at the fragment's words; by k16 step, then unit), the same
    elements a thread of the ``wgmma`` register-A layout of the warpgroup's 64 * units_n rows
    holds, and the scales the columns of its rows."""
    codes, words, scales = fragment_tile_layouts(nbits, warpgroups, units_k, units_n)
    threads, units = 128 * warpgroups, warpgroups * units_n
    assert codes.shape == (16 * units_k, 64 * units)
    assert words.shape == (units_k, 32 * nbits * units)
    assert codes.num_threads == words.num_threads == scales.num_threads == threads
    assert codes.local_size * nbits == words.local_size * 32
    assert_bijection(codes)
    assert_bijection(words)
    unit = unit_element_layout(nbits)
    a, _, _ = wgmma_dot_layouts(threads, 64 * units, 8, 16 * units_k)
    permutation = scale_permutation()
    for t in range(threads):
        group, warp, lane = t // 128, t // 32 % 4, t % 32
        held = [codes.map(t, i) for i in range(codes.local_size)]
        assert held == [
            (16 * s + k, 64 * (units_n * group + u) + n)
            for s in range(units_k)
            for u in range(units_n)
            for k, n in (unit.map(lane, 8 * warp + c) for c in range(8))
        ]
        assert [words.map(t, i) for i in range(words.local_size)] == [
            (s, 32 * nbits * (units_n * group + u) + nbits * lane + nbits // 4 * warp + w)
            for s in range(units_k)
            for u in range(units_n)
            for w in range(nbits // 4)
        ]
        assert sorted((n, k) for k, n in held) == sorted(a.map(t, i) for i in range(a.local_size))
        rows = sorted({a.map(t, i)[0] for i in range(a.local_size)})
        read = [scales.map(t, i)[1] for i in range(scales.local_size)]
        assert sorted(64 * (c // 64) + permutation[c % 64] for c in read) == rows


@pytest.mark.parametrize("nbits", [1, 2, 3, 5, 6, 7])
def test_fragment_tile_layouts_refuse_split_fragments(nbits: int) -> None:
    """At these widths a fragment's codes do not fill whole words of their own."""
    with pytest.raises(VerificationError, match=f"{nbits}-bit weights; expected one of"):
        fragment_tile_layouts(nbits, 1, 1)


# ------------------------------------------------------------------------------ refutations


def test_replicated_unit_is_refuted() -> None:
    # Two warps holding the same unit: 2048 (thread, register) pairs for 1024 weights.
    layout = (spatial(1, 1) * replicate(2)) * unit_element_layout()
    assert layout.num_threads == 64
    result = check_bijective(layout, **LIMITS)
    assert result.holds is False
    assert not brute_bijective(layout)
    injective = check_injective(layout, **LIMITS)
    assert injective.holds is False
    first, second = injective.counterexample["first"], injective.counterexample["second"]
    image = injective.counterexample["image"]
    assert layout.map(first["t"], first["i"]) == image == layout.map(second["t"], second["i"])
    assert (first["t"], first["i"]) != (second["t"], second["i"])


def test_fragment_with_a_wrong_column_is_refuted() -> None:
    # The unit's formula with n = (lane // 4) % 4 instead of lane // 4: as many points as
    # weights, but lanes l and l + 16 collide and columns 4..7 of each fragment are empty.
    def wrong(lane: int, i: int) -> tuple[int, int]:
        fragment, register = i // 4, i % 4
        k = 2 * (lane % 4) + register % 2 + 8 * (register // 2)
        return k, 8 * fragment + (lane // 4) % 4

    layout = FunctionLayout((16, 64), 32, 32, wrong, name="wrong_unit")
    result = check_bijective(layout, **LIMITS)
    assert result.holds is False
    assert not brute_bijective(layout)
    first, second = result.counterexample["first"], result.counterexample["second"]
    assert layout.map(first["t"], first["i"]) == result.counterexample["image"]
    assert layout.map(second["t"], second["i"]) == result.counterexample["image"]


# ------------------------------------------------------------------------------ lowering


def assert_fully_proved(kernel: Any, rlimit: int = RLIMIT, timeout: float = TIMEOUT) -> Any:
    """Every access and every plan claim of `kernel` proved (none refuted, none unknown)."""
    report = validate_lowering(kernel, timeout=timeout, rlimit=rlimit)
    assert report.holds is True, (report.failures[:1], report.unknown[:1])
    assert report.results
    proved = [r for _, r in report.results + report.plan_results if r.holds is True]
    assert len(proved) == len(report.results) + len(report.plan_results)
    return report


RELEASED_RING = DequantConfig(
    units_k=8, late_scale=True, weights_as_a=True, stages=3, release=True, bulk_weights=True
)
"""The decode kernel's ring of bulk copies handed back by releases (activations and weights)."""


REFILLED = DequantConfig(
    units_k=8, split=2, late_scale=True, weights_as_a=True, refill_in_place=True
)
"""The decode kernel with each step's words refilled in place (the next k-tile's loads
clamped to the last k-tile of a part, unguarded)."""


BATCHED_PARTS = DequantConfig(units_k=8, split=8, late_scale=True, weights_as_a=True, parts_batch=3)
"""The decode kernel whose fused sum loads its parts three a step of a rolled loop (slots 1-6),
then slot 7 alone."""


@pytest.mark.parametrize(
    "config",
    [DequantConfig(), DequantConfig(split=2, depth=2), RELEASED_RING, REFILLED, BATCHED_PARTS],
    ids=["default", "split2_depth2", "released_ring", "refilled_in_place", "batched_parts"],
)
def test_decode_kernel_lowering_validates(config: DequantConfig) -> None:
    """Every access and claim of the decode kernel proved: the mma operands, the ldmatrix
    reads, with the released ring each bulk copy's box (activations and weights), and with
    the refill in place each step's loads of the next k-tile within the weights."""
    program = register_dequant_matmul(dtypes.i4, 128, config)
    report = assert_fully_proved(lower(program, "sm_90a", constants=LAYER))
    names = [claim.name for claim, _ in report.plan_results]
    assert {"mma operand a", "mma operand b", "mma accumulator c"} <= set(names)
    assert any(name.startswith("ldmatrix") for name in names)
    if config.bulk_weights:  # 3 stages of 2 activation panels and 2 boxes of 256 words
        assert len({name for name in names if name.startswith("bulk copy of")}) == 12


WARPGROUP_DOT = DequantConfig(
    units_k=8, late_scale=True, weights_as_a=True, stages=3, release=True, warpgroup_dot=True
)
"""The decode kernel whose k-tiles multiply by the warpgroup's wgmma, the weights' rows renamed
into its register-A layout and the released stage read where it lies."""


@pytest.mark.parametrize("release", [True, False], ids=["released", "barriers"])
def test_warpgroup_dot_decode_kernel_lowering_validates(release: bool) -> None:
    """Every access and claim of the decode kernel with the warpgroups' dot proved: the wgmma
    descriptors of each stage at every ring position, the weights' registers as the
    instruction's A fragments and its accumulators as C's layout, and the copies (bulk
    copies, or each thread's cp.async runs along k)."""
    config = replace(WARPGROUP_DOT, release=release)
    program = register_dequant_matmul(dtypes.i4, 128, config)
    report = assert_fully_proved(lower(program, "sm_90a", constants=LAYER))
    names = {claim.name for claim, _ in report.plan_results}
    assert any(name.startswith("wgmma") for name in names), names
    assert not any(name.startswith("mma operand") for name in names), names


PLAN_RLIMIT = 200_000_000
"""Resource units of a plan claim of the 16-row decode tiles: their mma operands are maps of
128 threads times 512 registers, which take Z3 about 30 million units (a few seconds)."""


def ringed_stream_k() -> DequantConfig:
    """The decode search space's point at M = 16 on `LAYER` in 16-row blocks of four warps,
    units of 8 k-steps and the late scale, with a shared ring of two stages and stream-K over
    528 blocks (four an SM)."""
    space = decode_search_space(dtypes.i4, LAYER["k"], LAYER["n"], 16)
    return next(
        config
        for config in space
        if (config.warps, config.units_k, config.units_m, config.stages) == (4, 8, 2, 2)
        and config.stream_k == 528
        and config.late_scale
    )


FRESH_PROCESS_VALIDATION = """
import json, pickle, sys
from proofs.lowering_validation import validate_lowering
kernel, limits = pickle.load(sys.stdin.buffer)
report = validate_lowering(kernel, **limits)
unproved = [f"{getattr(item, 'name', item)!r:.300}: {result.reason}"
            for item, result in report.failures + report.unknown]
print(json.dumps({"holds": report.holds, "accesses": len(report.results),
                  "claims": sorted({claim.name for claim, _ in report.plan_results}),
                  "unproved": unproved[:2]}))
"""
"""`validate_lowering` of a pickled (kernel, limits) in a child process, summarised as JSON."""


def validated_in_a_fresh_process(kernel: Any, **limits: Any) -> dict[str, Any]:
    """The summary of `validate_lowering(kernel, **limits)` run in a new Python process.

    Z3's effort on one query depends on the process's history (`proofs.lowering_validation`):
    the partial sums' loads of the stream-K decode kernel take under 0.3 million resource
    units in a fresh process, but one took over 20 million in a test worker that had proved
    other files' kernels first. In a fresh process the figures measured hold."""
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_VALIDATION],
        input=pickle.dumps((kernel, limits)),
        capture_output=True,
        check=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    return json.loads(done.stdout)


def test_stream_k_decode_kernel_lowering_validates() -> None:
    """Every access and claim of the ringed stream-K decode kernel proved for any m: the
    activations' ring stages counted from each segment's first k-tile and the tiles' parts
    and counters, through the rewriting retry where the direct queries give up."""
    program = register_dequant_matmul(dtypes.i4, 128, ringed_stream_k())
    kernel = lower(program, "sm_90a", constants=LAYER)
    limits = {"timeout": TIMEOUT, "rlimit": RLIMIT, "plan_rlimit": PLAN_RLIMIT}
    summary = validated_in_a_fresh_process(kernel, **limits)
    assert summary["holds"] is True, summary["unproved"]
    assert summary["accesses"] == 213
    assert {"mma operand a", "mma operand b"} <= set(summary["claims"])


def test_stream_k_prefill_kernel_lowering_validates() -> None:
    """The prefill kernel with stream-K: the loop over a block's tiles, each tile's k-tiles
    from the segment's first, the bulk copies and wgmma operands of its k loop, every access
    and claim proved."""
    prefill_config = WgmmaDequantConfig(block_m=64, min_blocks_per_sm=2, stream_k=264)
    prefill = wgmma_dequant_matmul(dtypes.i4, 128, prefill_config)
    report = assert_fully_proved(lower(prefill, "sm_90a", constants={"n": 512, "k": 1024}))
    assert any(claim.name.startswith("wgmma") for claim, _ in report.plan_results)


def test_fragment_prefill_kernel_lowering_validates() -> None:
    """QuantizedLinear's 128 x 256 prefill tile (each warp one A fragment, two consumer
    warpgroups, a producer warpgroup, the dot in flight): every access and claim proved,
    wgmma's among them."""
    config = prefill_config(BATCH_PATHS[3])
    prefill = wgmma_dequant_matmul(dtypes.i8, 128, config)
    report = assert_fully_proved(lower(prefill, "sm_90a", constants={"n": 256, "k": 1024}))
    assert any(claim.name.startswith("wgmma") for claim, _ in report.plan_results)


def test_staged_fragment_tile_lowering_validates() -> None:
    """The 128 x 256 tile with C staged in its ring's memory (QuantizedLinear's staged path):
    every access (the staging tile's 16-byte reads where the ring lies) and claim proved,
    wgmma's among them and the transposed stmatrix stores of the staging tile's writes."""
    config = prefill_config(BATCH_PATHS[5])
    assert config.staged_store
    prefill = wgmma_dequant_matmul(dtypes.i4, 128, config)
    report = assert_fully_proved(lower(prefill, "sm_90a", constants={"n": 256, "k": 1024}))
    names = [claim.name for claim, _ in report.plan_results]
    assert any(name.startswith("wgmma") for name in names)
    assert sum(name.startswith("stmatrix.sync.aligned.m8n8.x4.trans") for name in names) == 16


@pytest.mark.parametrize(
    ("index", "weight", "n", "stmatrix"),
    [(6, dtypes.i8, 256, 8), (7, dtypes.i4, 384, 8), (8, dtypes.i8, 256, 16)]
    + [(9, dtypes.i4, 256, 8), (11, dtypes.i8, 256, 16), (13, dtypes.i4, 256, 16)],
)
def test_later_fragment_tiles_lowering_validates(
    index: int, weight: Any, n: int, stmatrix: int
) -> None:
    """The later tiles of QuantizedLinear's batch paths, C staged in the ring's memory: 128 x
    128 (two consumer warpgroups), 192 x 128 (three, consumer budgets of 160 registers, the
    weights refilled in place), 128 x 256 refilled in place, 128 x 128 refilled in place,
    128 x 256 refilled in place with the grid in groups of 4 tile rows, and that in clusters of
    two blocks sharing the activation copies by multicast: every access and claim
    proved, wgmma's among them and each consumer thread's transposed stmatrix stores of its
    rows of the staging tile."""
    config = prefill_config(BATCH_PATHS[index])
    assert config.staged_store and config.block_k == 128
    prefill = wgmma_dequant_matmul(weight, 128, config)
    report = assert_fully_proved(lower(prefill, "sm_90a", constants={"n": n, "k": 1024}))
    names = [claim.name for claim, _ in report.plan_results]
    assert any(name.startswith("wgmma") for name in names)
    assert sum(name.startswith("stmatrix.sync.aligned.m8n8.x4.trans") for name in names) == stmatrix


@pytest.mark.parametrize(
    ("weight", "fields"),
    [
        # 256 columns by 128 rows, the dot in flight.
        (dtypes.i8, {"block_m": 128}),
        # Humming's sm_90 shape: 256 columns by 176 rows, the dot waited for, in clusters of
        # two blocks and groups of two tile rows.
        (
            dtypes.i4,
            {"block_m": 176, "overlap_dot": False, "cluster_n": 2, "group_m": 2},
        ),
    ],
    ids=["128-rows", "176-rows-clusters"],
)
def test_wide_fragment_tile_lowering_validates(weight: DataType, fields: dict) -> None:
    """The staged tile twice as wide (two units a warpgroup: 256 columns, 64-deep k-tiles in
    four stages, refilled in place, a producer warpgroup) at `fields`' rows: every access and
    claim proved, wgmma's and the staging tile's stmatrix stores among them."""
    config = replace(
        prefill_config(BATCH_PATHS[3]),
        units_n=2,
        units_k=4,
        stages=4,
        depth=1,
        refill_in_place=True,
        staged_store=True,
        **fields,
    )
    assert config.block_n == 256
    prefill = wgmma_dequant_matmul(weight, 128, config)
    report = assert_fully_proved(lower(prefill, "sm_90a", constants={"n": 512, "k": 512}))
    names = [claim.name for claim, _ in report.plan_results]
    assert any(name.startswith("wgmma") for name in names)
    assert any(name.startswith("stmatrix.sync.aligned.m8n8.x4.trans") for name in names)


def test_panel_waits_fragment_tile_lowering_validates() -> None:
    """The staged 128 x 256 tile with each 64-deep activation panel waited for alone before
    its own dot: every access and claim proved, the wgmma chain's among them."""
    config = replace(prefill_config(BATCH_PATHS[5]), panel_waits=True)
    prefill = wgmma_dequant_matmul(dtypes.i8, 128, config)
    report = assert_fully_proved(lower(prefill, "sm_90a", constants={"n": 256, "k": 1024}))
    assert any(claim.name.startswith("wgmma") for claim, _ in report.plan_results)


def test_grouped_staged_fragment_tile_lowering_validates() -> None:
    """The staged 128 x 256 tile launched in groups of 8 tile rows (block (x, y, z) computing
    tile (8 z + x, y)), for any m: every access (A's rows and C's stores from the grouped
    origin, past m in a last group's idle blocks) and claim proved, wgmma's among them."""
    config = replace(prefill_config(BATCH_PATHS[5]), group_m=8)
    prefill = wgmma_dequant_matmul(dtypes.i8, 128, config)
    report = assert_fully_proved(lower(prefill, "sm_90a", constants={"n": 256, "k": 1024}))
    assert any(claim.name.startswith("wgmma") for claim, _ in report.plan_results)


def test_persistent_fragment_tile_lowering_validates() -> None:
    """The 128 x 256 tile in persistent blocks (whole tiles in turn, the producer running
    into the next tile): every access and claim proved, wgmma's among them."""
    config = replace(prefill_config(BATCH_PATHS[3]), persistent=132)
    prefill = wgmma_dequant_matmul(dtypes.i4, 128, config)
    report = assert_fully_proved(lower(prefill, "sm_90a", constants={"n": 256, "k": 2048}))
    assert any(claim.name.startswith("wgmma") for claim, _ in report.plan_results)


@pytest.mark.parametrize("form", ["split", "refilled split", "stream_k"])
def test_fragment_tile_parts_lowering_validates(form: str) -> None:
    """The 128 x 256 tile with its parts summed in the accumulator's register order
    (`ir.examples.split_sum.add_parts_in_fragments`): QuantizedLinear's split paths (a ring of
    registers, and refilled in place), and stream-K in runs of the unroll count with the dot
    in flight; every access (the parts' 16-byte vectors, the pieces' stores into C) and claim
    proved, wgmma's among them."""
    if form != "stream_k":
        config = prefill_config(BATCH_PATHS[4 if form == "split" else 10])
        assert config.split == 2 and config.refill_in_place == (form != "split")
    else:
        config = replace(prefill_config(BATCH_PATHS[3]), stream_k=132)
    prefill = wgmma_dequant_matmul(dtypes.i4, 128, config)
    report = assert_fully_proved(lower(prefill, "sm_90a", constants={"n": 256, "k": 2048}))
    assert any(claim.name.startswith("wgmma") for claim, _ in report.plan_results)


HYBRID_RLIMIT = 200_000_000
"""Z3 resource units an access of the hybrid schedule may use: its k-tile ranges are piecewise
in the block's index (whole tiles below D, shares above), and one access (of 52) needs about
ten times `RLIMIT` (a few seconds)."""
HYBRID_TIMEOUT = 120.0
"""Seconds an access of the hybrid schedule may take: far above what `HYBRID_RLIMIT` allows,
so that the resource limit, the same on every machine, bounds the proof, not a loaded
machine's clock (with the default 10 s, one access timed out in a run on two busy cores)."""


def test_stream_k_tail_lowering_validates() -> None:
    """The data-parallel and stream-K hybrid (`stream_k_tail`: whole tiles one a block, then
    the shared tail) on a small tile, for any m: every access (the clamped segment ranges, the
    slots and shared-tile indices of the parts) and claim proved."""
    config = WgmmaDequantConfig(block_m=8, units_k=2, stream_k=3, stream_k_tail=True)
    kernel = lower(
        wgmma_dequant_matmul(dtypes.i4, 64, config), "sm_90a", constants={"n": 256, "k": 512}
    )
    report = validate_lowering(kernel, timeout=HYBRID_TIMEOUT, rlimit=HYBRID_RLIMIT)
    assert report.holds is True, (report.failures[:1], report.unknown[:1])
    assert len(report.results) == 52


def test_split_tail_lowering_validates() -> None:
    """The last partial wave's tiles split along k (`tail_wave`; the batch paths' form on a
    small fragment tile: a producer warpgroup, the dot in flight, the weights refilled in place,
    C staged in the ring's memory by the blocks of whole tiles), for any m: every access (the
    parts' k-tile ranges, slots and tail indices, the staged and the summed stores) and claim
    proved, wgmma's and stmatrix's among them. Each query takes under 1.5 million resource
    units in a fresh process, but one of its loads took over 20 million in a test worker that
    had proved other kernels before (`proofs.lowering_validation`: Z3's effort depends on the
    process's history), so it has `HYBRID_RLIMIT`."""
    config = replace(
        prefill_config(BATCH_PATHS[12]), warpgroups=1, block_m=16, units_k=2, tail_wave=4
    )
    program = wgmma_dequant_matmul(dtypes.i4, 64, config)
    kernel = lower(program, "sm_90a", constants={"n": 128, "k": 512})
    report = assert_fully_proved(kernel, rlimit=HYBRID_RLIMIT, timeout=HYBRID_TIMEOUT)
    names = [claim.name for claim, _ in report.plan_results]
    assert any(name.startswith("wgmma") for name in names)
    assert any(name.startswith("stmatrix") for name in names)


def test_split_k_sum_lowering_validates() -> None:
    assert_fully_proved(lower(split_k_sum(2), "sm_90a"))


def test_pack_weights_program_lowering_validates() -> None:
    assert_fully_proved(lower(pack_weights_program(dtypes.i4), "sm_90a"))

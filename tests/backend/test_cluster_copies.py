"""Clusters of blocks (`ir.Program.cluster`) and the bulk copies their blocks share.

A program launched in clusters means what it means without them; where every block of a
cluster copies the same tiles into a released shared tensor (`backend.bulk_copy.shared_copies`),
the sm_90a lowering has each block issue one part of each copy into every block's shared memory
(TMA multicast). Checked here: the cluster's refusals (builder and verifier), which tensors'
copies are shared (exact cases), the parts' boxes (a table, and each one proved by the solver
with the kernel's other claims; a wrong part refuted), the generated protocol (the cluster's
attribute, its barrier after the barriers' initialisation and before the exit, free barriers
counting every block's warps, remote arrivals, the parts' addresses and coordinates, NVRTC
taking it), the interpreter's result (hypothesis), and the prefill program's
`cluster_n`. The GPU runs are in `test_gpu_cluster_copies.py`.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.bulk_copy import plan_bulk_copies, shared_copies
from backend.errors import CompilationError
from backend.lower import lower
from backend.lower.context import lowering_bulk_copies
from backend.nvrtc import compile_cuda
from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.errors import VerificationError
from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig, wgmma_dequant_matmul
from ir.specialize import specialize
from ir.testing import shared_round_trip_cases
from ir.verifier import verify
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import local, spatial
from layout_algebra.shared import shared_row_major, shared_row_major_swizzle
from layout_algebra.tma_box import TmaBox
from proofs import check_equivalent
from proofs.lowering_validation import validate_lowering

F16 = dtypes.f16
ROWS, COLUMNS = 64, 64


def clustered_ring(
    cluster: tuple[int, int, int] | None = (2, 1, 1),
    stages: int = 2,
    source_row: str = "y",
    guard_x: bool = False,
    release: bool = True,
):
    """A producer warp (threads 0 .. 31) and a consumer warp: block (x, y) copies row tile t
    of x into stage t % `stages` of a ring, `stages` - 1 tiles ahead, from the rows ``64 (tiles
    * block_y + t)`` (`source_row` "x": block_x's instead); the consumers store it into the
    block's own slab of y and release the stage (with `release`, else a barrier of the
    block). The grid is (2, 3); `guard_x` puts the loop's copies under
    an if that reads block_x."""
    with ProgramBuilder("clustered_ring", 64) as b:
        tiles = b.int_param("tiles", lo=1, hi=64)
        rows = 64 * 3 * 2 * 64
        x = b.global_view(b.array_param("x", F16), F16, GlobalLayout((rows, COLUMNS), (COLUMNS, 1)))
        y = b.global_view(b.array_param("y", F16), F16, GlobalLayout((rows, COLUMNS), (COLUMNS, 1)))
        b.grid(2, 3)
        if cluster is not None:
            b.cluster(*cluster)
        ring = b.shared_tensor(
            F16, shared_row_major_swizzle(stages, ROWS, COLUMNS, element_bits=16)
        )
        block = b.block_x if source_row == "x" else b.block_y
        origin = block * tiles * ROWS
        out = (b.block_y * 2 + b.block_x) * tiles * ROWS
        with b.thread_group(0, 32):
            for ahead in range(stages - 1):
                with b.if_(ahead < tiles):
                    b.copy_bulk(ring, x, [origin + ahead * ROWS, 0], [ahead, 0, 0])
        with b.for_range(tiles) as t:
            with b.thread_group(0, 32):
                later = t + stages - 1
                condition = later < tiles
                if guard_x:
                    condition = (later < tiles) & (b.block_x < 2)
                with b.if_(condition):
                    b.copy_bulk(ring, x, [origin + later * ROWS, 0], [later % stages, 0, 0])
            with b.thread_group(32, 32):
                stage = t % stages
                b.copy_bulk_wait(ring, [stage, 0, 0], shape=(ROWS, COLUMNS))
                tile = b.load_shared(ring, spatial(32, 1).local(2, COLUMNS), [stage, 0, 0])
                b.store_global(y, tile, [out + t * ROWS, 0])
                if release:
                    b.copy_bulk_release(ring, [stage, 0, 0], shape=(ROWS, COLUMNS))
            if not release:
                b.sync()
    return b.program()


# -- the cluster's refusals -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grid", "cluster", "message"),
    [
        ((3, 1, 1), (2, 1, 1), "grid extent x = 3 .* not known to be a multiple of .* 2 along x"),
        ((4, 2, 1), (1, 4, 1), "grid extent y = 2 .* multiple of the cluster's extent 4 along y"),
        ((8, 2, 1), (4, 2, 2), r"has 16 blocks; expected at most 8"),
        ((4, 1, 1), (0, 1, 1), r"is \(0, 1, 1\); expected three ints of at least 1"),
        ((4, 1, 1), (2.0, 1, 1), r"is \(2.0, 1, 1\); expected three ints"),
        ((4, 1, 1), (True, 1, 1), r"is \(True, 1, 1\); expected three ints"),
        (None, (2, 1, 1), "declares the cluster .* but no grid"),
    ],
)
def test_a_cluster_the_grid_cannot_take_is_refused(grid, cluster, message) -> None:
    b = ProgramBuilder("p", 32)
    if grid is not None:
        b.grid(*grid)
    with pytest.raises(VerificationError, match=message):
        b.cluster(*cluster)
        verify(b.program())


def test_a_cluster_is_declared_once_and_printed() -> None:
    b = ProgramBuilder("p", 32)
    n = b.int_param("n", lo=256, multiple_of=256)
    b.grid(n // 128, 2)
    b.cluster(2, 2)
    with pytest.raises(VerificationError, match=r"cluster declared twice: .* \(2, 2, 1\)"):
        b.cluster(2)
    program = verify(b.program())
    assert program.cluster == (2, 2, 1) and program.cluster_blocks == 4
    assert "cluster 2 x 2 x 1" in str(program).splitlines()[:4]
    # n // 128 is even only because n is a declared multiple of 256.
    b = ProgramBuilder("p", 32)
    n = b.int_param("n", lo=128, multiple_of=128)
    b.grid(n // 128)
    b.cluster(2)
    with pytest.raises(VerificationError, match="n // 128 .* not known to be a multiple"):
        verify(b.program())


# -- which copies a cluster shares --------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "shared"),
    [
        ({}, True),  # the source reads block_y; the cluster spans x
        ({"cluster": (1, 3, 1)}, False),  # a cluster along y: the source reads block_y
        ({"source_row": "x"}, False),  # every block of the cluster copies other rows
        ({"source_row": "x", "cluster": (1, 3, 1)}, True),
        ({"guard_x": True}, False),  # the copies' if reads block_x
        ({"cluster": (1, 1, 1)}, False),  # a cluster of one block shares nothing
        ({"cluster": None}, False),
    ],
)
def test_copies_are_shared_where_no_index_the_cluster_spans_reaches_them(kwargs, shared) -> None:
    assert shared_copies(clustered_ring(**kwargs)) == ({"s0"} if shared else set())


def test_a_shared_copy_is_cut_into_one_part_a_block() -> None:
    """Two stages of a 64 x 64 swizzled tile (8 KB): each copy's parts are its two 32-row
    halves, 4 KB apart, in the copy's own 128B swizzle; the tensor map names the half box."""
    copies = plan_bulk_copies(clustered_ring(), "sm_90a")
    plan = copies.tensors["s0"]
    assert (plan.multicast, plan.split_dim, plan.part_extent, plan.part_bytes) == (2, 0, 32, 4096)
    assert plan.box == TmaBox((64, 64), "128B", 16, 0, (0, 1))
    table = [(origin, part.extents, part.start, part.swizzle) for origin, part in plan.parts]
    assert table == [
        ((0, 0, 0), (32, 64), 0, "128B"),
        ((0, 32, 0), (32, 64), 4096, "128B"),
        ((1, 0, 0), (32, 64), 8192, "128B"),
        ((1, 32, 0), (32, 64), 12288, "128B"),
    ]
    assert plan.copy_box == plan.parts[0][1]
    (use,) = copies.maps
    assert use.box.extents == (32, 64)


@pytest.mark.parametrize(
    "program",
    [
        clustered_ring(release=False),  # no releases: no block knows the others are done
        clustered_ring(cluster=(1, 3, 1)),
    ],
    ids=["barrier-ring", "not-shared"],
)
def test_copies_stay_whole_where_they_cannot_be_shared(program) -> None:
    (plan,) = plan_bulk_copies(program, "sm_90a").tensors.values()
    assert plan.multicast == 1 and plan.parts == ()
    assert plan.copy_box == plan.box


def test_a_box_whose_outer_extent_does_not_cut_stays_whole() -> None:
    """Three blocks of a cluster along y copy the same tiles, but cannot share a 64-row box."""
    program = verify(clustered_ring(cluster=(1, 3, 1), source_row="x"))
    assert shared_copies(program) == {"s0"}
    (plan,) = plan_bulk_copies(program, "sm_90a").tensors.values()
    assert plan.multicast == 1 and plan.parts == ()


# -- the generated protocol ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def clustered_kernel():
    return lower(clustered_ring(stages=3), "sm_90a")


def test_the_kernel_is_a_cluster_whose_blocks_copy_their_parts_into_every_block(
    clustered_kernel,
) -> None:
    source = clustered_kernel.source
    assert re.search(
        r'extern "C" __global__ void __cluster_dims__\(2, 1, 1\) __launch_bounds__', source
    )
    body = source[source.index('extern "C"') :]
    # Every block's barriers are ready before any part or arrival reaches them; no block
    # exits while another may still arrive on its free barriers.
    init = body.index("la_mbarrier_init_fence();")
    assert body.index("la_cluster_sync_aligned();") > init
    assert body.rstrip().endswith("la_cluster_sync();\n}")
    # A free barrier counts the consumer warp of both blocks.
    assert "la_mbarrier_init(&la_free_s0[la_i], 2u);" in body
    # Each copy: the whole tile expected on the block's own barrier, its part issued at
    # 4096 bytes a rank and 32 rows a rank into both blocks (mask 3).
    copies = re.findall(
        r"la_mbarrier_expect\(&la_bar_s0\[(.*)\], (\d+)u\);\n\s*"
        r"const unsigned (\w+) = la_cluster_rank\(\);\n\s*"
        r"la_tma_multicast_2d\(s0 \+ \(0 \+ \((.*)\) \* 8192\) \+ (\w+) \* 4096u, &la_tmap0, "
        r"&la_bar_s0\[(.*)\], \(unsigned short\)3u, \(int\)\(0\), \(int\)\((.*)\) \+ \(int\)(\w+) "
        r"\* 32\);",
        body,
    )
    assert len(copies) == 3  # the two copies ahead, then the loop's
    for barrier, nbytes, rank, stage, rank_again, barrier_again, _, rank_last in copies:
        assert nbytes == "8192" and barrier == barrier_again == f"({stage}) * 1 + 0"
        assert rank == rank_again == rank_last
    # The ring is read by the threads (generic proxy): the fence covers the cluster's memory.
    assert body.count("la_proxy_fence_cluster();") == 3 and "la_proxy_fence_shared();" not in body
    # The producer waits on its own free barrier; a release arrives on both blocks' barriers.
    assert body.count("la_mbarrier_wait(&la_free_s0[") == 3
    assert re.search(
        r"if \(\(la_thread & 31\) == 0\) \{\n\s*for \(unsigned la_rank = 0; la_rank < 2u; "
        r"\+\+la_rank\) \{\n\s*"
        r"la_mbarrier_arrive_remote\(&la_free_s0\[\(k0 % 3\) \* 1 \+ 0\], la_rank\);",
        body,
    )
    assert compile_cuda(source, "sm_90a", clustered_kernel.options).cubin


def test_the_parts_are_proved_with_the_kernel_s_accesses(clustered_kernel) -> None:
    report = validate_lowering(clustered_kernel)
    parts = [claim for claim, _ in report.plan_results if "shared bulk copy part" in claim.name]
    assert len(parts) == 6  # three stages, two parts each
    assert report.holds is True, (report.failures[:1], report.unknown[:1])


def test_a_part_placed_at_the_other_block_s_half_is_refuted() -> None:
    (plan,) = plan_bulk_copies(clustered_ring(), "sm_90a").tensors.values()
    (origin, first), (_, second) = plan.parts[:2]
    emitted, required = second.claim(plan.tensor.layout, origin, plan.dims)
    assert check_equivalent(emitted, required).holds is False
    emitted, required = first.claim(plan.tensor.layout, origin, plan.dims)
    assert check_equivalent(emitted, required).holds is True


def rows_copy(cluster: tuple[int, int, int] | None):
    """Block x copies rows 32 x .. 32 x + 31 of x to y, one row a thread, in a grid of 4."""
    with ProgramBuilder("rows_copy", 32) as b:
        shape = GlobalLayout((128, 8), (8, 1))
        x = b.global_view(b.array_param("x", F16), F16, shape)
        y = b.global_view(b.array_param("y", F16), F16, shape)
        b.grid(4)
        if cluster is not None:
            b.cluster(*cluster)
        rows = b.load_global(x, [b.block_x * 32, 0], spatial(32, 1).local(1, 8))
        b.store_global(y, rows, [b.block_x * 32, 0])
    return b.program()


def test_before_sm_90_the_cluster_is_left_out() -> None:
    """sm_80 has no clusters: the kernel is the one without. From sm_90 on a program with no
    shared copies is launched as a cluster and nothing else changes."""
    assert lower(rows_copy((2, 1, 1)), "sm_80").source == lower(rows_copy(None), "sm_80").source
    clustered = lower(rows_copy((4, 1, 1)), "sm_90a").source
    plain = lower(rows_copy(None), "sm_90a").source
    assert clustered.replace("__cluster_dims__(4, 1, 1) ", "") == plain != clustered
    assert "la_cluster" not in clustered
    # Nor does a producer ring lower on sm_80 with a cluster any more than without one.
    with pytest.raises(CompilationError, match="issued by other threads than wait for them"):
        lower(clustered_ring(), "sm_80")
    x = np.arange(128 * 8, dtype=np.uint16).reshape(128, 8)
    y = np.zeros_like(x)
    run_reference(rows_copy((2, 1, 1)), x, y)
    np.testing.assert_array_equal(y, x)


def test_a_cluster_that_shares_nothing_launches_as_a_cluster_alone() -> None:
    source = lower(clustered_ring(cluster=(1, 3, 1)), "sm_90a").source
    assert "__cluster_dims__(1, 3, 1)" in source
    assert "la_cluster_sync" not in source and "la_tma_multicast" not in source
    assert "la_mbarrier_init(&la_free_s0[la_i], 1u);" in source


# -- the interpreter ---------------------------------------------------------------------------


@settings(max_examples=8, deadline=None)
@given(
    tiles=st.integers(1, 5),
    stages=st.integers(2, 3),
    source_row=st.sampled_from(("x", "y")),
    seed=st.integers(0, 2**16),
)
def test_a_clustered_ring_computes_what_it_says(tiles, stages, source_row, seed) -> None:
    """In the interpreter, block (x, y) of the clustered ring stores the tiles of x from row
    ``64 tiles b`` (b its block_y, or block_x) into its own slab, and nothing else changes;
    the GPU tests compare the kernel with this."""
    rows = 64 * 3 * 2 * 64
    x = np.random.default_rng(seed).integers(0, 2**14, (rows, COLUMNS)).astype(np.uint16)
    y = np.full_like(x, 0xBC00)
    expected = y.copy()
    run = tiles * ROWS
    for block_y in range(3):
        for block_x in range(2):
            source = (block_y if source_row == "y" else block_x) * run
            out = (block_y * 2 + block_x) * run
            expected[out : out + run] = x[source : source + run]
    cluster = (2, 1, 1) if source_row == "y" else (1, 3, 1)
    run_reference(
        clustered_ring(cluster=cluster, stages=stages, source_row=source_row), tiles, x, y
    )
    np.testing.assert_array_equal(y, expected)


# -- the prefill program's cluster_n -----------------------------------------------------------

STAGED = WgmmaDequantConfig(
    warp_columns=16, warpgroups=2, block_m=256, min_blocks_per_sm=1, unroll=2, overlap_dot=True,
    release=True, producer=True, producer_registers=24, units_k=8, stages=3, depth=1,
    refill_in_place=True, staged_store=True,
)  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "cluster"),
    [({"cluster_n": 2}, (2, 1, 1)), ({"cluster_n": 2, "group_m": 4}, (1, 2, 1))],
)
def test_cluster_n_shares_the_activation_tiles_of_a_row_tile(fields, cluster) -> None:
    program = wgmma_dequant_matmul(dtypes.i4, 128, dataclasses.replace(STAGED, **fields))
    assert program.cluster == cluster
    assert program.param("n").multiple_of == 256
    layer = specialize(program, {"n": 12288, "k": 4096})
    (plan,) = plan_bulk_copies(layer, "sm_90a").tensors.values()
    assert (plan.multicast, plan.part_extent, plan.part_bytes) == (2, 128, 16384)
    assert len(plan.parts) == 3 * 2 * 2  # stages, panels, parts


def test_cluster_n_shares_the_activation_tiles_of_the_wide_fragment_tile() -> None:
    """The staged tile two units a warpgroup wide (256 columns by 128 rows, 64-deep k-tiles in
    four stages) in clusters of two: n a multiple of the cluster's 512 columns, and each
    stage's one 64-deep panel of 128 rows (16 KB) issued in two parts of 64 rows (8 KB)."""
    config = dataclasses.replace(STAGED, cluster_n=2, units_n=2, block_m=128, units_k=4, stages=4)
    program = wgmma_dequant_matmul(dtypes.i8, 128, config)
    assert program.cluster == (2, 1, 1)
    assert program.param("n").multiple_of == 512
    layer = specialize(program, {"n": 12288, "k": 4096})
    (plan,) = plan_bulk_copies(layer, "sm_90a").tensors.values()
    assert (plan.multicast, plan.part_extent, plan.part_bytes) == (2, 64, 8192)
    assert len(plan.parts) == 4 * 1 * 2  # stages, panels, parts


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cluster_n": 9}, "cluster_n=9; expected at most 8"),
        ({"cluster_n": 0}, "cluster_n=0; expected an int >= 1"),
        ({"cluster_n": True}, "cluster_n=True; expected an int"),
        ({"cluster_n": 2, "release": False, "producer": False, "producer_registers": 0},
         "cluster_n=2 .* release=False; .* requires release"),
        ({"cluster_n": 2, "persistent": 132, "staged_store": False},
         "cluster_n=2 .* persistent=132"),
    ],
)  # fmt: skip
def test_cluster_n_out_of_range_is_refused(fields, message) -> None:
    with pytest.raises(VerificationError, match=message):
        wgmma_dequant_matmul(dtypes.i4, 128, dataclasses.replace(STAGED, **fields))


@pytest.mark.parametrize(
    "config",
    [
        WgmmaDequantConfig(
            block_m=32, units_k=4, stages=3, warp_columns=16, release=True, producer=True,
            staged_store=True, cluster_n=2,
        ),
        WgmmaDequantConfig(
            block_m=32, units_k=8, stages=3, warp_columns=16, release=True, producer=True,
            overlap_dot=True, unroll=2, group_m=2, cluster_n=2,
        ),
        WgmmaDequantConfig(
            block_m=32, units_k=4, stages=3, warp_columns=16, units_n=2, release=True,
            producer=True, staged_store=True, cluster_n=2,
        ),
    ],
    ids=["staged", "grouped-in-flight", "wide-staged"],
)  # fmt: skip
def test_a_clustered_prefill_kernel_compiles_and_is_proved(config) -> None:
    """Small tiles of the prefill program in clusters of two (the last with two units a
    warpgroup): every copy of the activations is shared (two 16-row parts of each 64-deep
    panel), NVRTC takes the kernel, and every claim, the parts' boxes among them, is proved."""
    lowered = lower(
        wgmma_dequant_matmul(dtypes.i4, 128, config), "sm_90a", constants={"n": 256, "k": 512}
    )
    assert lowered.source.count("la_tma_multicast_2d(s") == lowered.source.count("// copy_bulk(")
    assert compile_cuda(lowered.source, "sm_90a", lowered.options).cubin
    report = validate_lowering(lowered)
    assert sum("shared bulk copy part" in claim.name for claim, _ in report.plan_results) > 0
    assert report.holds is True, (report.failures[:1], report.unknown[:1])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(shared_round_trip_cases().filter(lambda case: case.program.cluster is not None))
def test_random_clustered_round_trips_run_and_are_proved_on_sm_90a(case) -> None:
    """The random generator's bulk round trips in a cluster of two blocks: the interpreter's
    result is the copy, and the sm_90a lowering (each copy shared where its tile qualifies as
    a box and its rows split in two) is proved, parts and all."""
    output = case.fresh_arguments()
    run_reference(case.program, *output, grid=case.grid)
    case.check(output[case.output])
    kernel = lower(case.program, "sm_90a", constants=case.constants)
    program = specialize(case.program, case.constants)
    # The lowering's own plan: its strides' divisors read with the int parameters declared
    # multiples (a plain `plan_bulk_copies` may find no TMA box where the lowering does).
    (plan,) = lowering_bulk_copies(program, "sm_90a").tensors.values() or (None,)
    report = validate_lowering(kernel)
    parts = [claim for claim, _ in report.plan_results if "shared bulk copy part" in claim.name]
    assert len(parts) == (2 if plan is not None and plan.multicast == 2 else 0)
    assert ("la_tma_multicast" in kernel.source) == bool(parts)
    assert report.holds is True, (report.failures[:1], report.unknown[:1])


def test_a_single_element_copy_of_a_clustered_round_trip_is_proved() -> None:
    """Found by the random round trips: one f32 copied by one of four threads in clusters of two
    goes through ``cp.async`` (no TMA box of one element), printed as ``g0 + (0)``; the
    proof's text check reads that operand form for a single element as for a vector, and the
    copy's lines sit under their ``if (la_thread == 0)``."""
    with ProgramBuilder("single_element_round_trip", 4) as b:
        x, out = b.array_param("x", dtypes.f32), b.array_param("out", dtypes.f32)
        view = GlobalLayout((1, 1), (1, 1))
        b.grid(2)
        b.cluster(2)
        buffer = b.shared_tensor(dtypes.f32, shared_row_major(1, 1))
        source = b.global_view(x, dtypes.f32, view)
        b.copy_bulk(buffer, source, [0, 0])
        b.copy_bulk_wait(buffer)
        b.store_global(
            b.global_view(out, dtypes.f32, view),
            b.load_shared(buffer, local(1, 1).replicate(4)),
            [0, 0],
        )
    kernel = lower(b.program(), "sm_90a")
    assert "la_cp_async_4(s0 + (0), g0 + (0));" in kernel.source
    report = validate_lowering(kernel)
    assert report.holds is True, (report.failures[:1], report.unknown[:1])

"""`backend.bulk_copy`: which bulk copies become TMA copies, the code written for them and for
the fallback, their proofs, and the tensor maps a launch encodes (with a fake driver).

A permuted view - A^T of a row-major A, its unit stride along dimension 0 - is copied with its
box in order (1, 0): the plan, the TMA coordinates (k first), the proofs, the map a launch
encodes; its fallback copies 16-byte vectors along k; the interpreter, and the fallback's
kernel under the CPU emulation (test_lower_emulated.py), give NumPy's transpose.
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from backend.bulk_copy import TMA_FENCE_MARK, plan_bulk_copies, unit_stride_order
from backend.device import KernelResources, LoadedFunction
from backend.errors import CompilationError, LaunchError
from backend.kernel import Kernel, KernelArrayParam, KernelIntParam, KernelTensorMapParam
from backend.lower import lower
from backend.lower.memory import default_copy_layout
from backend.nvrtc import compile_cuda
from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.examples.matmul import matmul
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.interop import to_cute
from layout_algebra.register import spatial
from layout_algebra.shared import (
    SharedLayout,
    row_swizzle,
    shared_row_major,
    shared_row_major_swizzle,
)
from layout_algebra.symbolic import var
from layout_algebra.tma_box import TmaBox
from proofs.lowering_validation import validate_lowering

F16 = dtypes.f16


def ring_program(
    dtype=F16,
    layout=None,
    columns: int = 64,
    slot_columns: int | None = None,
    wait_offset: int = 0,
    trailing=None,
    release: bool = False,
):
    """Copies k-tile t of x (m, columns) into stage t % 2 of a (2, 32, columns) ring and back
    out to y, one row per thread, then a barrier (with `release`, a release of the stage);
    `slot_columns` splits each copy into column slots."""
    slot = columns if slot_columns is None else slot_columns
    if layout is None:
        layout = shared_row_major_swizzle(2, 32, columns, element_bits=dtype.nbits)
    with ProgramBuilder("ring", 32) as b:
        m = b.int_param("m")
        x = b.global_view(
            b.array_param("x", dtype), dtype, GlobalLayout((m, columns), (columns, 1))
        )
        y = b.global_view(
            b.array_param("y", dtype), dtype, GlobalLayout((m, columns), (columns, 1))
        )
        ring = b.shared_tensor(dtype, layout)
        tiles = (m + 31) // 32
        with b.for_range(tiles) as t:
            stage = t % 2
            for first in range(0, columns, slot):
                where = [stage, 0, first] if trailing is None else [stage, 0, trailing]
                b.copy_bulk(ring, x, [t * 32, first], where, shape=(32, slot))
            b.copy_bulk_wait(ring, [stage, 0, wait_offset], shape=(32, columns - wait_offset))
            tile = b.load_shared(ring, spatial(32, 1).local(1, columns), [stage, 0, 0])
            b.store_global(y, tile, [t * 32, 0])
            if release:
                b.copy_bulk_release(ring, [stage, 0, 0], shape=(32, columns))
            else:
                b.sync()
    return b.program()


def producer_ring(dtype=F16, layout=None, columns: int = 64, stages: int = 2, rows: int = 32):
    """A producer warp (threads 0 .. 31) and a consumer group (the next `rows` threads, one row
    each): the producer bulk-copies row tile t of x (m, columns) into stage t % `stages` of a
    ring `stages` - 1 tiles ahead of the consumers, who wait for it, store it to y and release
    the stage; the producer waits only for those releases (`thread_group`)."""
    if layout is None:
        layout = shared_row_major_swizzle(stages, rows, columns, element_bits=dtype.nbits)
    with ProgramBuilder("producer_ring", 32 + rows) as b:
        m = b.int_param("m")
        shape = GlobalLayout((m, columns), (columns, 1))
        x = b.global_view(b.array_param("x", dtype), dtype, shape)
        y = b.global_view(b.array_param("y", dtype), dtype, shape)
        ring = b.shared_tensor(dtype, layout)
        tiles = (m + rows - 1) // rows
        with b.thread_group(0, 32):
            for ahead in range(stages - 1):
                with b.if_(ahead < tiles):
                    b.copy_bulk(ring, x, [ahead * rows, 0], [ahead, 0, 0])
        with b.for_range(tiles) as t:
            with b.thread_group(0, 32):
                later = t + stages - 1
                with b.if_(later < tiles):
                    b.copy_bulk(ring, x, [later * rows, 0], [later % stages, 0, 0])
            with b.thread_group(32, rows):
                stage = t % stages
                b.copy_bulk_wait(ring, [stage, 0, 0], shape=(rows, columns))
                tile = b.load_shared(ring, spatial(rows, 1).local(1, columns), [stage, 0, 0])
                b.store_global(y, tile, [t * rows, 0])
                b.copy_bulk_release(ring, [stage, 0, 0], shape=(rows, columns))
    return b.program()


@pytest.mark.parametrize("stages", [2, 3])
def test_a_producer_warp_ring_copies_the_tensor_in_the_interpreter(stages: int) -> None:
    m = 5 * 32 + 7
    x = (np.arange(m * 64) % 65521).astype(np.uint16)
    y = np.zeros_like(x)
    run_reference(producer_ring(stages=stages), m, x, y)
    np.testing.assert_array_equal(y, x)


def test_a_producer_warp_ring_waits_for_the_consumers_releases() -> None:
    """On sm_90a: every copy from the producer warp as TMA, each free barrier counting the
    consumers' warps, the producer's wait on it under its own warp's condition."""
    kernel = lower(producer_ring(stages=3, rows=64), "sm_90a")
    assert "la_mbarrier_init(&la_free_s0[la_i], 2u);" in kernel.source
    # The helper's definition, the prologue's two copies and the loop's.
    assert kernel.source.count("la_tma_load_2d(") == 4
    assert kernel.source.count("__syncthreads();") == 1  # the barriers' initialisation only
    module = compile_cuda(kernel.source, "sm_90a", kernel.options)
    assert module.cubin
    validation = validate_lowering(kernel)
    assert any("bulk copy" in claim.name for claim, _ in validation.plan_results)
    assert all(result.holds is True for _, result in validation.plan_results)
    assert all(result.holds is True for _, result in validation.results)


TILE_K = TILE_M = 64
STAGES = 3


def transposed_ring(multiple: int = 8):
    """A^T tiles: x (m, k) row-major seen as x^T (k, m), ``GlobalLayout((k, m), (1, k))``;
    block b copies k-tile t of its 64 tokens into stage t % 3 of a ring of K-major tiles,
    ``(s, k, t)`` at ``s * 4096 + swizzle(64 t + k)`` (each token's 64 k values one 128-byte
    row), waits, and stores the tile to y = x^T (k, m) row-major. `multiple`: what k is
    declared a multiple of (8 keeps x's rows 16-byte aligned)."""
    ring_layout = SharedLayout(
        (STAGES, TILE_K, TILE_M),
        (STAGES, TILE_K, TILE_M),
        (TILE_M * TILE_K, 1, TILE_K),
        row_swizzle(TILE_K, 16),
    )
    with ProgramBuilder("transposed_ring", 128) as b:
        m = b.int_param("m")
        k = b.int_param("k", multiple_of=multiple)
        x = b.global_view(b.array_param("x", F16), F16, GlobalLayout((k, m), (1, k)))
        y = b.global_view(b.array_param("y", F16), F16, GlobalLayout((k, m), (m, 1)))
        b.grid((m + TILE_M - 1) // TILE_M)
        ring = b.shared_tensor(F16, ring_layout)
        with b.for_range((k + TILE_K - 1) // TILE_K) as t:
            stage = t % STAGES
            tokens = b.block_x * TILE_M
            b.copy_bulk(ring, x, [t * TILE_K, tokens], [stage, 0, 0], shape=(TILE_K, TILE_M))
            b.copy_bulk_wait(ring, [stage, 0, 0])
            tile = b.load_shared(ring, spatial(64, 2).local(1, 32), [stage, 0, 0])
            b.store_global(y, tile, [t * TILE_K, tokens])
            b.sync()
    return b.program()


def transposed_arguments(m: int, k: int, seed: int = 0) -> list:
    """(m, k, x, y) of `transposed_ring`: x random f16 codes (m, k) row-major, y zeros."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 1 << 16, m * k, dtype=np.int64).astype(np.uint16)
    return [m, k, x, np.zeros_like(x)]


# Rows of a partial last block and a partial last k-tile; 5 k-tiles wrap the 3 stages.
TRANSPOSED_SIZES = ((100, 264), (57, 72))


def test_a_swizzled_ring_is_planned_with_one_barrier_per_stage() -> None:
    bulk = plan_bulk_copies(ring_program(), "sm_90a")
    (plan,) = bulk.tensors.values()
    assert (plan.box.extents, plan.box.swizzle, plan.stages, plan.stage_bytes) == (
        (32, 64),
        "128B",
        (2,),
        4096,
    )
    assert (plan.slots, plan.slot_starts, plan.count) == (((0, 0),), (0,), 2)
    (use,) = bulk.maps
    assert (use.name, use.source.name) == ("la_tmap0", "g0")


def test_column_slots_share_their_stage_barrier_where_every_wait_names_whole_stages() -> None:
    program = ring_program(columns=128, layout=_panels(2, 32, 128), slot_columns=64)
    (plan,) = plan_bulk_copies(program, "sm_90a").tensors.values()
    assert plan.slots == ((0, 0), (0, 64)) and plan.per_stage
    assert (plan.count, plan.arrivals) == (2, 2)  # a barrier a stage, an arrival a slot
    assert (plan.barrier("s", 1), plan.phase_bit("s", 1)) == ("(s)", "(s) * 2 + 1")
    assert plan.covered((0, 0), (32, 128)) == (0, 1)
    assert plan.slot_starts == (0, 4096) and plan.stage_bytes == 8192
    assert not plan.released
    (plan,) = plan_bulk_copies(_panel_ring(release=True), "sm_90a").tensors.values()
    assert plan.released and plan.per_stage and plan.count == 2


def test_column_slots_get_a_barrier_each_where_a_wait_names_one_slot() -> None:
    program = ring_program(columns=128, layout=_panels(2, 32, 128), slot_columns=64, wait_offset=64)
    (plan,) = plan_bulk_copies(program, "sm_90a").tensors.values()
    assert plan.slots == ((0, 0), (0, 64)) and not plan.per_stage
    assert (plan.count, plan.arrivals) == (4, 1)
    assert (plan.barrier("s", 1), plan.phase_bit("s", 1)) == ("(s) * 2 + 1", "(s) * 2 + 1")
    source = lower(program, "sm_90a").source
    assert "la_mbarrier_init(&la_bar_s0[la_i], 1u);" in source
    loop = source[source.index("for (int k0") :]
    # The wait names the second panel alone: one wait, on that slot's barrier.
    assert loop.count("la_mbarrier_wait(&la_bar_s0[") == 1
    assert "const unsigned la_barrier1 = (unsigned)((k0 & 1) * 2 + 1);" in loop


def test_a_stage_barrier_is_waited_for_once_and_counts_each_slots_copy() -> None:
    program = ring_program(columns=128, layout=_panels(2, 32, 128), slot_columns=64)
    source = lower(program, "sm_90a").source
    assert "__shared__ unsigned long long la_bar_s0[2];" in source
    assert "la_mbarrier_init(&la_bar_s0[la_i], 2u);" in source
    loop = source[source.index("for (int k0") :]
    assert loop.count("la_mbarrier_wait(&la_bar_s0[") == 1
    expects = re.findall(r"la_mbarrier_expect\(&la_bar_s0\[(.*)\], 4096u\);", loop)
    assert len(expects) == 2 and len(set(expects)) == 1  # both copies on the stage's barrier


def _panel_ring(release: bool = False):
    """`ring_program` of 128 columns in two 64-column panels, a copy per panel."""
    return ring_program(columns=128, layout=_panels(2, 32, 128), slot_columns=64, release=release)


def _panels(stages: int, rows: int, columns: int):
    """A ring whose stages are 64-column panels of the 128-byte swizzle (`wgmma_b_buffer`)."""
    from ir.examples.matmul import wgmma_b_buffer

    return wgmma_b_buffer(rows, columns, stages)


@pytest.mark.parametrize(
    ("program", "why"),
    [
        (ring_program(dtype=dtypes.u4, columns=128), "4-bit elements have no tensor-map type"),
        # A 256-byte swizzled row is no TMA swizzle mode's.
        (ring_program(columns=128), "the layout is no box's"),
        (
            ring_program(columns=128, layout=_panels(2, 32, 128), slot_columns=64, wait_offset=32),
            "a wait that is not a union of slots",
        ),
        (
            ring_program(layout=shared_row_major(2, 32, 64), trailing=var("m", lo=0, hi=0)),
            "a trailing offset that is not a constant",
        ),
    ],
    ids=["u4", "256B-rows", "partial-wait", "dynamic-slot"],
)
def test_copies_that_do_not_qualify_fall_back(program, why: str) -> None:
    assert plan_bulk_copies(program, "sm_90a").tensors == {}, why
    kernel = lower(program, "sm_90a")
    body = kernel.source[kernel.source.index('extern "C"') :]
    assert "la_tma_load" not in kernel.source and kernel.tensor_maps == ()
    assert "la_cp_async_16(" in body and "la_mbarrier" not in body


@pytest.mark.parametrize(
    ("strides", "order"),
    [
        ((var("k"), 1), (0, 1)),  # row-major: the identity
        ((1, var("k")), (1, 0)),  # A^T of a row-major A: k innermost
        ((var("a"), 1, var("b")), (0, 2, 1)),  # the others keep their order
        ((1, 1), (0, 1)),  # two unit strides: the last is the innermost
        ((var("k"), 2), None),  # no unit stride: no box
    ],
)
def test_unit_stride_order_table(strides, order) -> None:
    assert unit_stride_order(strides) == order


def test_a_transposed_ring_is_planned_k_innermost() -> None:
    """Planned by the lowering, which knows k a multiple of 8 (x's rows whole 16 bytes)."""
    (plan,) = lower(transposed_ring(), "sm_90a").plans
    assert plan.box == TmaBox((64, 64), "128B", 16, 0, (1, 0))
    assert (plan.stages, plan.stage_bytes, plan.slots, plan.count) == ((3,), 8192, ((0, 0),), 3)


def test_a_transposed_view_of_unaligned_rows_falls_back() -> None:
    """k a multiple of 4 only: x's rows, dimension 1's stride (the one that is not 1), may
    not be whole 16-byte chunks."""
    kernel = lower(transposed_ring(multiple=4), "sm_90a")
    assert kernel.plans == () and kernel.tensor_maps == ()


def test_the_transposed_copy_passes_the_k_coordinate_first() -> None:
    kernel = lower(transposed_ring(), "sm_90a")
    (call,) = re.findall(r"la_tma_load_2d\((.*)\);", kernel.source)
    loop = re.search(r"for \(int (k\d+) = 0;", kernel.source).group(1)
    assert call.endswith(f"(int)({loop} * 64), (int)(block_x * 64)")
    (tensor_map,) = kernel.tensor_maps
    assert (repr(tensor_map.shape), repr(tensor_map.strides)) == ("(k, m)", "(1, k)")
    assert (tensor_map.box, tensor_map.swizzle, tensor_map.order) == ((64, 64), "128B", (1, 0))


def test_the_transposed_copy_falls_back_to_16_byte_vectors_along_k() -> None:
    """Without TMA each thread copies 8 consecutive k (16 bytes, contiguous in x and in the
    ring's rows) of 4 tokens; runs along the last dimension would be 2-byte elements."""
    layout = default_copy_layout((64, 64), 16, 128, (1, 0))
    # (k, t): thread bits 0-2 step k by 8, bits 3-6 step t; registers 0-7 are k + 0..7, and
    # their blocks of 8 step t by 16.
    assert to_cute(layout) == "((8,16),(8,4)):((8,64),(1,1024))"
    assert layout == default_copy_layout((64, 64), 16, 128).permute(1, 0)
    for arch, options in (("sm_80", {}), ("sm_90a", {"tma": False})):
        kernel = lower(transposed_ring(), arch, **options)
        body = kernel.source[kernel.source.index('extern "C"') :]
        assert body.count("la_cp_async_16(") == 4 and "la_tma_load" not in body
        # (y's rows of m elements are stored element by element: m is any int.)
        generic = [step.describe() for step in kernel.report.generic_in_loops()]
        assert not [step for step in generic if "copy" in step]


@pytest.mark.parametrize(("m", "k"), TRANSPOSED_SIZES)
def test_the_transposed_ring_in_the_interpreter_is_the_transpose(m: int, k: int) -> None:
    arguments = transposed_arguments(m, k)
    run_reference(transposed_ring(), *arguments, grid=-(-m // 64))
    np.testing.assert_array_equal(arguments[3].reshape(k, m), arguments[2].reshape(m, k).T)


@pytest.fixture(scope="module")
def emulation():
    """test_lower_emulated.py, loaded by path (its CPU emulation of generated kernels)."""
    if "lower_emulated" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "lower_emulated", Path(__file__).with_name("test_lower_emulated.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["lower_emulated"] = module
        spec.loader.exec_module(module)
    return sys.modules["lower_emulated"]


def test_the_transposed_fallback_matches_the_interpreter_emulated(
    emulation, tmp_path_factory: pytest.TempPathFactory, cxx_compiler: str
) -> None:
    """The cp.async fallback's kernel (TMA has no host emulation) under the CPU emulation:
    bit for bit the interpreter's transpose."""
    program = transposed_ring()
    emulator = emulation._emulator(
        [lower(program, "sm_90a", tma=False)], tmp_path_factory, cxx_compiler
    )
    for m, k in TRANSPOSED_SIZES:
        expected = transposed_arguments(m, k)
        run_reference(program, *expected, grid=-(-m // 64))
        actual = transposed_arguments(m, k)
        emulator.run(0, actual, (-(-m // 64),))
        np.testing.assert_array_equal(actual[3], expected[3])


def test_no_tma_before_sm_90() -> None:
    assert plan_bulk_copies(ring_program(), "sm_80").tensors == {}
    assert plan_bulk_copies(ring_program(), None).tensors == {}


def test_the_kernel_issues_one_copy_from_thread_0_and_waits_on_the_stage_parity() -> None:
    kernel = lower(ring_program(), "sm_90a")
    source = kernel.source
    assert "const __grid_constant__ la_tensor_map la_tmap0)" in source
    assert "__shared__ unsigned long long la_bar_s0[2];" in source
    copy = re.search(
        r"if \(la_thread == 0\) \{\n(.*?)\n\s*\}", source[source.index("for (") :], re.S
    )
    assert copy is not None
    lines = [line.strip() for line in copy.group(1).splitlines()]
    assert lines[0] == "la_proxy_fence_shared();"
    assert lines[1].startswith("la_mbarrier_expect(&la_bar_s0[(") and lines[1].endswith("4096u);")
    assert lines[2].startswith("la_tma_load_2d(s0 + (0 + (")
    assert "la_phases_s0 ^= 1u << " in source
    assert "la_cp_async" not in source[source.index('extern "C"') :]
    (tensor_map,) = kernel.tensor_maps
    fields = (tensor_map.name, tensor_map.array, tensor_map.element_bits, tensor_map.strides)
    assert fields == ("la_tmap0", "x", 16, (64, 1))
    assert (repr(tensor_map.shape), tensor_map.box, tensor_map.swizzle) == (
        "(m, 64)",
        (32, 64),
        "128B",
    )
    assert [step.describe() for step in kernel.report.generic_in_loops()] == []


def test_a_released_ring_waits_on_free_barriers_instead_of_a_block_barrier() -> None:
    """Two 64-column slots a stage, released whole, one warp: the stage's free barrier counts
    one arrival; before each slot's copy warp 0's lanes wait on it, under a condition read
    through a shuffle (warp-uniform to the compiler), with a parity from all ones kept per slot
    that every thread flips per wait; then the copy's thread fences and issues; the release is
    one __syncwarp and lane 0's one arrival on the stage's free barrier; the loop has no
    __syncthreads."""
    source = lower(_panel_ring(release=True), "sm_90a").source
    assert "__shared__ unsigned long long la_free_s0[2];" in source
    assert "unsigned la_free_phases_s0 = ~0u;" in source
    assert "la_mbarrier_init(&la_free_s0[la_i], 1u);" in source
    loop = source[source.index("for (int k0") :]
    assert "__syncthreads();" not in loop
    waits = re.findall(
        r"const unsigned (\w+) = \(unsigned\)\((.*)\);\n\s*"
        r"const unsigned (\w+) = \(unsigned\)\((.*)\);\n\s*"
        r"if \(__shfl_sync\(0xffffffffu, la_thread / 32, 0\) == 0\) \{\n\s*(.*)\n\s*\}\n"
        r"\s*(.*)\n\s*if \(la_thread == 0\) \{\n\s*(.*)\n",
        loop,
    )
    assert len(waits) == 2
    for slot, (index, barrier, bit, phase_bit, wait, flip, first) in enumerate(waits):
        assert (barrier, phase_bit) == ("(k0 & 1)", f"(k0 & 1) * 2 + {slot}")
        parity = f"(la_free_phases_s0 >> {bit}) & 1u"
        assert wait == f"la_mbarrier_wait(&la_free_s0[{index}], {parity});"
        assert flip == f"la_free_phases_s0 ^= 1u << {bit};"
        assert first == "la_proxy_fence_shared();"
    assert loop.count("__syncwarp();") == 1
    arrivals = re.findall(
        r"if \(\(la_thread & 31\) == 0\) la_mbarrier_arrive\(&la_free_s0\[\(k0 & 1\)\]\);", loop
    )
    assert len(arrivals) == 1


def test_a_release_without_bulk_tensor_copies_is_a_block_barrier() -> None:
    source = lower(ring_program(release=True), "sm_80").source
    loop = source[source.index("for (int k0") :]
    assert "la_free" not in source and "la_mbarrier" not in loop
    assert loop.count("__syncthreads();") == 2  # the wait's barrier, and the release's


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize(
    "program",
    [
        ring_program(),
        _panel_ring(release=True),
        matmul(256, 128, 128, 64, wgmma=True, stages=4, overlap_dot=True, bulk=True),
        transposed_ring(),
    ],
    ids=["ring", "released-ring", "wgmma-matmul", "transposed-ring"],
)
def test_bulk_kernels_compile_and_their_boxes_are_proved(program, arch: str) -> None:
    kernel = lower(program, arch)
    module = compile_cuda(kernel.source, arch, kernel.options)
    assert module.cubin
    validation = validate_lowering(kernel)
    bulk = [
        (claim, result) for claim, result in validation.plan_results if "bulk copy" in claim.name
    ]
    assert (len(bulk) > 0) == (arch == "sm_90a")
    assert all(result.holds is True for _, result in bulk)
    assert all(result.holds is True for _, result in validation.results)


def test_the_producer_matmul_is_proved_on_sm_90a_and_refused_without_tma() -> None:
    """The f16 matmul whose producer warp issues the copies (persistent, grouped): on sm_90a
    its boxes and every access are proved; on sm_80, where a bulk copy is the block's own
    ``cp.async`` and no other warp could wait for it, the lowering refuses it by name."""
    program = matmul(
        256, 128, 128, 64, wgmma=True, stages=4, overlap_dot=True, bulk=True, producer=True,
        persistent=3, group_m=2,
    )  # fmt: skip
    kernel = lower(program, "sm_90a")
    assert compile_cuda(kernel.source, "sm_90a", kernel.options).cubin
    # The tile origin's grouped order is a deeper term: a resource limit with room for it.
    validation = validate_lowering(kernel, rlimit=20_000_000)
    assert sum("bulk copy" in claim.name for claim, _ in validation.plan_results) > 0
    assert validation.holds is True
    with pytest.raises(CompilationError, match="issued by other threads than wait for them"):
        lower(program, "sm_80")


def test_a_wrong_box_is_refuted() -> None:
    """Stage 0's box (its start) claimed for stage 1: the solver finds an element it misplaces."""
    from proofs import check_equivalent

    (plan,) = plan_bulk_copies(ring_program(), "sm_90a").tensors.values()
    emitted, required = plan.box.claim(plan.tensor.layout, (1, 0, 0), plan.dims)
    assert not np.array_equal(emitted.table(), required.table())
    assert check_equivalent(emitted, required).holds is False


# -- the launch ----------------------------------------------------------------------------------

TENSOR_MAP = KernelTensorMapParam("la_tmap0", "x", 16, (var("m"), 64), (64, 1), (32, 64), "128B")


def test_tensor_map_arguments_table() -> None:
    assert TENSOR_MAP.arguments({"m": 100}) == {
        "rank": 2,
        "global_dim": (64, 100),
        "global_strides": (128,),
        "box_dim": (64, 32),
        "element_strides": (1, 1),
        "swizzle": "128B",
    }


def test_a_stride_the_driver_refuses_is_a_launch_error() -> None:
    odd = KernelTensorMapParam("la_tmap0", "x", 16, (var("m"), 60), (60, 1), (32, 64), "128B")
    with pytest.raises(
        LaunchError, match="tensor map la_tmap0 of argument 'x' with m=4.*stride 120"
    ):
        odd.arguments({"m": 4})


@dataclass
class MapDevice:
    """A driver stand-in that hands out allocations, encodes maps as their arguments' hash and
    records every launch's tensor-map words (kernel parameter `map_index`)."""

    encoded: list[tuple[int, int, dict]] = field(default_factory=list)
    launched: list[list[int]] = field(default_factory=list)
    next_address: int = 0x7F00_0000_0000
    map_index: int = 3

    def allocate(self, nbytes: int) -> int:
        address, self.next_address = self.next_address, self.next_address + nbytes + 256
        return address

    def current_ordinal(self) -> int:
        return 0

    def pointer_ordinal(self, address: int) -> int | None:
        return 0

    def load(self, ordinal, cubin, entry, dynamic_shared_bytes):
        return LoadedFunction(ordinal, "handle", KernelResources(32, 0, 0, 1024))

    def encode_tensor_map(self, address, element_bits, arguments):
        self.encoded.append((address, element_bits, dict(arguments)))
        return [address & 0xFFFF, element_bits] + [len(self.encoded)] * 14

    def launch(self, function, grid, block, shared, stream, parameters, waits, programmatic=False):
        pointers = (ctypes.c_void_p * (self.map_index + 1)).from_address(parameters)
        words = (ctypes.c_uint64 * 16).from_address(pointers[self.map_index])
        self.launched.append(list(words))


class FakeArray:
    def __init__(self, address: int, count: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (count,),
            "typestr": "<f2",
            "data": (address, False),
            "strides": None,
            "version": 3,
            "stream": None,
        }


def ring_kernel(device: MapDevice, arrays: tuple[str, ...] = ("x", "y")) -> Kernel:
    """A kernel of the ring's signature (m and `arrays`) whose launch encodes `TENSOR_MAP`."""
    params = (KernelIntParam("m"), *(KernelArrayParam(a, 16, var("m") * 64) for a in arrays))
    return Kernel(
        source="",
        cubin=b"",
        arch="sm_90a",
        entry="ring",
        params=params,
        block_threads=32,
        device=device,
        tensor_maps=(TENSOR_MAP,),
    )


def test_a_launch_encodes_each_map_once_per_address_and_shape() -> None:
    device = MapDevice()
    kernel = ring_kernel(device)
    x, y = device.allocate(200 * 128), device.allocate(200 * 128)
    kernel(100, FakeArray(x, 6400), FakeArray(y, 6400), grid=1)
    kernel(100, FakeArray(x, 6400), FakeArray(y, 6400), grid=1)
    assert len(device.encoded) == 1
    assert device.encoded[0][:2] == (x, 16)
    assert device.encoded[0][2]["global_dim"] == (64, 100)
    kernel(200, FakeArray(x, 12800), FakeArray(y, 12800), grid=1)
    other = device.allocate(200 * 128)
    kernel(100, FakeArray(other, 6400), FakeArray(y, 6400), grid=1)
    assert [entry[2]["global_dim"] for entry in device.encoded] == [(64, 100), (64, 200), (64, 100)]
    assert [words[2] for words in device.launched] == [1, 1, 2, 3]
    assert device.launched[-1][:2] == [other & 0xFFFF, 16]


def test_a_launch_encodes_the_transposed_map_in_tma_order() -> None:
    """The lowered transposed ring's signature (m, k, x, y, then its map): at m=100, k=264 the
    map is x^T's extents and row stride k innermost first, and the box (64 k, 64 tokens)."""
    lowered = lower(transposed_ring(), "sm_90a")
    device = MapDevice(map_index=4)
    signature = ("entry", "params", "block_threads", "shared_bytes", "grid", "tensor_maps")
    kernel = Kernel(
        source="",
        cubin=b"",
        arch="sm_90a",
        device=device,
        **{name: getattr(lowered, name) for name in signature},
    )
    m, k = 100, 264
    x, y = device.allocate(2 * m * k), device.allocate(2 * m * k)
    kernel(m, k, FakeArray(x, m * k), FakeArray(y, m * k))
    assert device.encoded == [
        (
            x,
            16,
            {
                "rank": 2,
                "global_dim": (264, 100),
                "global_strides": (528,),
                "box_dim": (64, 64),
                "element_strides": (1, 1),
                "swizzle": "128B",
            },
        )
    ]
    assert device.launched[0][:3] == [x & 0xFFFF, 16, 1]


def test_the_encoded_maps_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Launches on ever new addresses re-encode, and the cache starts over past its bound."""
    import backend.kernel

    monkeypatch.setattr(backend.kernel, "MAX_ENCODED_MAPS", 2)
    device = MapDevice()
    kernel = ring_kernel(device, ("x",))
    device.launch = lambda *args, **kwargs: None  # no tensor-map words to read back here
    addresses = [device.allocate(100 * 128) for _ in range(3)]
    for address in [*addresses, addresses[0], addresses[2]]:
        kernel(100, FakeArray(address, 6400), grid=1)
    # The third address clears the first two; the first comes back encoded again; the third
    # is still cached.
    assert [entry[0] for entry in device.encoded] == [*addresses, addresses[0]]
    assert len(kernel._encoded) == 2


def test_a_tensor_map_of_no_array_parameter_is_refused() -> None:
    with pytest.raises(LaunchError, match="is not a KernelTensorMapParam of one of its array"):
        Kernel(
            source="",
            cubin=b"",
            arch="sm_90a",
            entry="ring",
            params=(KernelIntParam("m"),),
            block_threads=32,
            device=MapDevice(),
            tensor_maps=(TENSOR_MAP,),
        )


@pytest.mark.parametrize(
    ("options", "fences"),
    [
        ({"wgmma": True}, 0),  # written by TMA, read by wgmma: the async proxy alone
        ({"wgmma": True, "producer": True}, 0),
        ({"wgmma": False}, 15),  # read by ldmatrix: a fence before each of the 15 copies
    ],
    ids=["wgmma", "producer", "mma-sync"],
)
def test_a_copy_fences_the_async_proxy_only_where_threads_touch_its_tensor(options, fences):
    """Before a bulk tensor copy, thread 0 fences the async proxy only where the generic proxy
    touches the tensor (`backend.bulk_copy.async_only`): the f16 matmul's rings, written by TMA
    and read by wgmma descriptors, need none; lowered to mma.sync, whose ldmatrix reads are the
    threads' own, every copy has its fence (the fill's 2 k-tiles and the loop's 1, 5 boxes a
    k-tile: A's and B's four panels)."""
    wgmma = options.pop("wgmma")
    program = matmul(
        256, 128, 256, 64, stages=4, overlap_dot=True, bulk=True, wgmma=True, **options
    )
    source = lower(program, "sm_90a", wgmma=wgmma).source.split('extern "C"')[1]
    assert source.count("la_proxy_fence_shared();") == fences
    assert source.count("la_tma_load_2d(") == 15
    assert TMA_FENCE_MARK not in source


def test_a_released_tile_is_read_before_its_release() -> None:
    """The decode kernel releases its activation stage right after loading it, before the
    dot: the load may not be written at the dot (as the lowering writes loads a dot may take
    as wgmma descriptors), or the next bulk copy into the stage could land before it. Every
    warp's ldmatrix reads come before its arrival on the stage's free barrier."""
    from ir.examples.register_dequant_matmul import DequantConfig, register_dequant_matmul

    config = DequantConfig(units_k=8, weights_as_a=True, stages=3, release=True)
    program = register_dequant_matmul(dtypes.i4, 128, config)
    source = lower(program, "sm_90a", constants={"n": 512, "k": 1024}).source
    body = source.split('extern "C"')[1]
    releases = [match.start() for match in re.finditer(r"la_mbarrier_arrive\(&la_free_", body)]
    reads = [match.start() for match in re.finditer(r"la_ldmatrix_x\d", body)]
    assert releases and reads
    for release in releases:  # the reads of its k-tile lie between the last release and it
        previous = max([0] + [r for r in releases if r < release])
        assert any(previous < read < release for read in reads)

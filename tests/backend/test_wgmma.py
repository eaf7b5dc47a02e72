"""`backend.wgmma`: which dots run as ``wgmma.mma_async`` on sm_90a, and that what it prints is
proved.

- Exact tables: the descriptors the f16 matmul example's warpgroup form gets (K-major 128-byte
  swizzled A, M/N-major 128-byte swizzled B panels), its instruction width and call count, the
  fence before every barrier, the deferred loads that leave no trace in the source.
- Proofs: every descriptor claim and the accumulator claim hold (z3 / brute force through
  `proofs.check_equivalent`); a wrong descriptor is refuted.
- Fallbacks, the same program elsewhere: sm_80, or ``wgmma=False`` on sm_90a, runs it on
  ``mma.sync`` with ldmatrix loads; an a load read twice or overwritten before the dot stays,
  and wgmma takes a from its registers; a b load read twice, or a B buffer whose rows no
  descriptor reads, keeps the dot on mma.sync with its loads.
- Random warpgroup dots (`ir.testing.dot_cases`): every plan they get is proved; unrolled
  loops keep wgmma in each copy of their body.
- Differential: the warpgroup programs in the interpreter equal a float64 matmul within the
  f32 accumulation's rounding (the GPU runs: gpu_examples_main's matmul cases and
  test_gpu_wgmma.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.compile import compile as compile_program
from backend.lower import lower
from backend.wgmma import (
    PROXY_FENCE,
    PROXY_FENCE_MARK,
    WGMMA_SOURCE,
    WgmmaPlan,
    shared_operand_dots,
)
from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.examples.matmul import matmul, wgmma_dot_layouts
from ir.program import Program
from ir.testing.compute_cases import dot_cases
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.shared import shared_row_major, shared_row_major_swizzle
from proofs import check_equivalent
from proofs.lowering_validation import validate_lowering

WARPGROUP_FORMS = {
    # name: (options of ir.examples.matmul, instruction width, calls per dot)
    "2 warpgroups 128x128x64": (
        {"num_threads": 256, "block_m": 128, "block_n": 128, "block_k": 64, "stages": 3},
        128,
        4,
    ),
    "1 warpgroup 64x64x64": ({"block_k": 64}, 64, 4),
    "1 warpgroup 128x256x64": (
        {"block_m": 128, "block_n": 256, "block_k": 64, "stages": 2},
        256,
        8,
    ),
}


def _plans(program: Program, arch: str = "sm_90a", **options: object) -> list[object]:
    return list(lower(program, arch, **options).plans)


@pytest.mark.parametrize("name", WARPGROUP_FORMS)
def test_matmul_warpgroup_form_runs_as_wgmma(name: str) -> None:
    options, width, calls = WARPGROUP_FORMS[name]
    kernel = lower(matmul(wgmma=True, **options), "sm_90a")
    (plan,) = kernel.plans
    assert isinstance(plan, WgmmaPlan)
    assert plan.n == width and plan.k_steps * plan.blocks == calls
    a, b = plan.a_descriptors.descriptor, plan.b_descriptors.descriptor
    assert (a.major, a.swizzle, a.stride_byte_offset) == ("k", "128B", 1024)
    assert (b.major, b.swizzle, b.stride_byte_offset) == ("mn", "128B", 1024)
    # B's 64-column panels of (64 k x 64 n) f16 lie 8 KiB apart; one panel leaves the field
    # unused (one 16-byte unit).
    assert b.leading_byte_offset == (8192 if width > 64 else 16)
    assert (plan.a_descriptors.transposed, plan.b_descriptors.transposed) == (0, 1)
    source = kernel.source
    assert source.count(f"wgmma.mma_async.sync.aligned.m64n{width}k16.f32.f16.f16") == calls
    assert "la_ldmatrix_x4(" not in source.split('extern "C"')[1]  # loads never written
    lines = [line.strip() for line in source.splitlines()]
    # The barrier after the copies' wait is fenced; the one closing the k-tile, with nothing
    # written since that fence, is not (`backend.proxy_fences`).
    barriers = [i for i, line in enumerate(lines) if line == "__syncthreads();"]
    assert [lines[i - 1] == PROXY_FENCE for i in barriers] == [True, False]
    assert "la_cp_async_wait<" in lines[barriers[0] - 3]
    assert "__align__(1024)" in source
    loads = [step for step in kernel.report if type(step.instruction).__name__ == "LoadShared"]
    assert [[path.name for path in step.paths] for step in loads] == [
        ["read by wgmma descriptors"]
    ] * 2


def test_every_claim_of_a_wgmma_plan_holds() -> None:
    options, _, _ = WARPGROUP_FORMS["2 warpgroups 128x128x64"]
    (plan,) = _plans(matmul(wgmma=True, **options))
    claims = plan.claims()
    names = {claim.name.split(" at ")[0] for claim in claims}
    assert names == {"wgmma descriptor a", "wgmma descriptor b", "wgmma accumulator c"}
    for claim in claims:
        result = check_equivalent(claim.emitted, claim.required)
        assert result.holds, (claim.name, result.reason)


def test_a_wrong_descriptor_is_refuted() -> None:
    options, _, _ = WARPGROUP_FORMS["1 warpgroup 64x64x64"]
    (plan,) = _plans(matmul(wgmma=True, **options))
    origin, descriptor = plan.b_descriptors.checked[0]
    wrong = dataclasses.replace(descriptor, stride_byte_offset=descriptor.stride_byte_offset * 2)
    emitted, required = wrong.claim(plan.b.tensor.layout, origin, plan.b.dims)
    result = check_equivalent(emitted, required)
    assert not result.holds and result.counterexample is not None


@pytest.mark.parametrize(("arch", "options"), [("sm_80", {}), ("sm_90a", {"wgmma": False})])
def test_the_same_program_runs_on_mma_sync_elsewhere(arch: str, options: dict) -> None:
    program = matmul(wgmma=True, **WARPGROUP_FORMS["1 warpgroup 64x64x64"][0])
    kernel = lower(program, arch, **options)
    assert [type(plan).__name__ for plan in kernel.plans][-1] == "MmaPlan"
    assert "wgmma" not in kernel.source and PROXY_FENCE not in kernel.source
    assert PROXY_FENCE_MARK not in kernel.source


def _shared_dot(
    b_layout_of: str = "panel",
    read_twice: bool = False,
    store_between: bool = False,
    b_read_twice: bool = False,
    sync_between: bool = False,
) -> Program:
    """One warpgroup: (64 x 64) @ (64 x 64) from shared tiles copied in, the result stored.
    `b_layout_of` "panel" (one 128-byte swizzled panel, readable by a descriptor) or "plain"
    (unswizzled 128-byte rows: no descriptor reads them with a swizzle, and not as interleaved
    either); `read_twice` stores the loaded a back after the dot (a second reader of its
    registers), `b_read_twice` the same for b; `store_between` stores into a's tile between
    its load and the dot; `sync_between` puts a barrier of the block there."""
    f16, f32 = dtypes.f16, dtypes.f32
    a_layout, b_layout, c_layout = wgmma_dot_layouts(128, 64, 64, 64)
    with ProgramBuilder("shared_dot", 128) as bld:
        a, b, c = (
            bld.array_param(name, dtype) for name, dtype in (("a", f16), ("b", f16), ("c", f32))
        )
        a_view = bld.global_view(a, f16, GlobalLayout((64, 64), (64, 1)))
        b_view = bld.global_view(b, f16, GlobalLayout((64, 64), (64, 1)))
        c_view = bld.global_view(c, f32, GlobalLayout((64, 64), (64, 1)))
        a_shared = bld.shared_tensor(f16, shared_row_major_swizzle(64, 64, element_bits=16))
        b_buffer = (
            shared_row_major_swizzle(64, 64, element_bits=16)
            if b_layout_of == "panel"
            else shared_row_major(64, 64)
        )
        b_shared = bld.shared_tensor(f16, b_buffer)
        bld.copy_async(a_shared, a_view, [0, 0])
        bld.copy_async(b_shared, b_view, [0, 0])
        bld.copy_async_commit()
        bld.copy_async_wait(0)
        bld.sync()
        a_tile = bld.load_shared(a_shared, a_layout, [0, 0])
        b_tile = bld.load_shared(b_shared, b_layout, [0, 0])
        if store_between:
            bld.store_shared(a_shared, a_tile, [0, 0])
        if sync_between:
            bld.sync()
        acc = bld.register_tensor(f32, c_layout, 0.0)
        out = bld.dot(a_tile, b_tile, acc)
        if read_twice:
            bld.store_shared(a_shared, a_tile, [0, 0])
        if b_read_twice:
            bld.store_shared(b_shared, b_tile, [0, 0])
        bld.store_global(c_view, out, [0, 0])
    return bld.program()


def test_a_dot_of_shared_tiles_runs_as_wgmma() -> None:
    program = _shared_dot()
    assert len(shared_operand_dots(program)) == 1
    (plan,) = _plans(program)
    assert isinstance(plan, WgmmaPlan) and plan.n == 64


@pytest.mark.parametrize("change", ["read_twice", "store_between"])
def test_an_a_load_read_elsewhere_or_overwritten_is_kept_and_a_comes_from_registers(
    change: str,
) -> None:
    """a's load stays (its registers are read again, or its tile is overwritten before the
    dot); b is still read where it lies, and A goes to wgmma from a's registers."""
    program = _shared_dot(**{change: True})
    ((a_load, b_load),) = shared_operand_dots(program).values()
    assert a_load is None and b_load is not None
    kernel = lower(program, "sm_90a")
    (plan,) = [plan for plan in kernel.plans if isinstance(plan, WgmmaPlan)]
    assert plan.a is None and plan.a_descriptors is None
    assert plan.a_blocks == ((0,), (1,), (2,), (3,))  # k step s reads a's block s
    assert kernel.source.count("m64n64k16.f32.f16.f16 {%0,") == 4
    for claim in plan.claims():
        assert check_equivalent(claim.emitted, claim.required).holds, claim.name


def test_a_b_load_read_elsewhere_keeps_the_dot_off_wgmma() -> None:
    program = _shared_dot(b_read_twice=True)
    assert shared_operand_dots(program) == {}
    assert not any(isinstance(plan, WgmmaPlan) for plan in _plans(program))


def test_a_barrier_between_the_loads_and_the_dot_keeps_both_loads_in_place() -> None:
    """Past a barrier another thread may write the tiles: loads written at the dot (as its
    descriptors or its ldmatrix) could read that write, so neither load is deferred."""
    program = _shared_dot(sync_between=True)
    assert shared_operand_dots(program) == {}
    source = lower(program, "sm_90a").source.split('extern "C"')[1]
    barrier = source.rindex("__syncthreads();")  # the one between the loads and the dot
    assert 0 < source.rindex("la_ldmatrix") < barrier < source.index("mma")


def test_a_b_tile_no_descriptor_reads_falls_back_with_its_loads() -> None:
    program = _shared_dot(b_layout_of="plain")
    assert len(shared_operand_dots(program)) == 1  # a candidate, but no descriptor fits
    kernel = lower(program, "sm_90a")
    assert [type(plan).__name__ for plan in kernel.plans][-1] == "MmaPlan"
    assert "wgmma.mma_async" not in kernel.source


def test_the_warpgroup_matmul_in_the_interpreter_is_a_matmul() -> None:
    rng = np.random.default_rng(7)
    m, n, k = 70, 72, 80
    program = matmul(wgmma=True, block_k=64)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float16)
    run_reference(program, m, n, k, a.ravel(), b.ravel(), c.ravel(), grid=(2, 2))
    got = c.reshape(m, n)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(got.astype(np.float64) - want).max() < 2e-2


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_warpgroup_dots_have_proved_plans(data: st.DataObject) -> None:
    """Random warpgroup dots (`ir.testing.dot_cases`, mode "warpgroup": 32-, 64- and 128-byte
    swizzles and unswizzled panels, 8 to 128 columns): whatever plan the lowering makes, each
    of its claims holds."""
    case = data.draw(dot_cases(modes=("warpgroup",)))
    kernel = lower(case.program, "sm_90a", constants=case.constants)
    for plan in kernel.plans:
        if isinstance(plan, WgmmaPlan):
            for claim in plan.claims():
                result = check_equivalent(claim.emitted, claim.required)
                assert result.holds, (case.description, claim.name, result.reason)


def test_a_wgmma_kernel_validates_whole() -> None:
    """`proofs.validate_lowering` of the warpgroup matmul: every printed address (the copies
    into the swizzled stages) and every claim of its plan."""
    program = matmul(wgmma=True, **WARPGROUP_FORMS["1 warpgroup 64x64x64"][0])
    validation = validate_lowering(lower(program, "sm_90a"), rlimit=2_000_000)
    assert validation.holds
    assert any("wgmma" in claim.name for claim, _ in validation.plan_results)


def _ring_dot(unroll: int) -> Program:
    """One warpgroup, a k loop (unrolled `unroll` times) over 64-deep tiles copied into a ring
    of two swizzled stages, each tile's dot reading both stages' tiles."""
    f16, f32 = dtypes.f16, dtypes.f32
    a_layout, b_layout, c_layout = wgmma_dot_layouts(128, 64, 64, 64)
    with ProgramBuilder("ring_dot", 128) as bld:
        k = bld.int_param("k", multiple_of=64)
        a, b, c = (bld.array_param(name, t) for name, t in (("a", f16), ("b", f16), ("c", f32)))
        a_view = bld.global_view(a, f16, GlobalLayout((64, k), (k, 1)))
        b_view = bld.global_view(b, f16, GlobalLayout((k, 64), (64, 1)))
        c_view = bld.global_view(c, f32, GlobalLayout((64, 64), (64, 1)))
        a_ring = bld.shared_tensor(f16, shared_row_major_swizzle(2, 64, 64, element_bits=16))
        b_ring = bld.shared_tensor(f16, shared_row_major_swizzle(2, 64, 64, element_bits=16))
        acc = bld.register_tensor(f32, c_layout, 0.0)
        with bld.for_range(0, k // 64, 1, unroll) as kt:
            stage = kt % 2
            bld.copy_async(a_ring, a_view, [0, kt * 64], [stage, 0, 0])
            bld.copy_async(b_ring, b_view, [kt * 64, 0], [stage, 0, 0])
            bld.copy_async_commit()
            bld.copy_async_wait(0)
            bld.sync()
            a_tile = bld.load_shared(a_ring, a_layout, [stage, 0, 0])
            b_tile = bld.load_shared(b_ring, b_layout, [stage, 0, 0])
            bld.assign(acc, bld.dot(a_tile, b_tile, acc))
            bld.sync()
        bld.store_global(c_view, acc, [0, 0])
    return bld.program()


@pytest.mark.parametrize("unroll", [1, 2])
def test_the_copies_of_an_unrolled_loop_run_as_wgmma(unroll: int) -> None:
    kernel = lower(_ring_dot(unroll), "sm_90a")
    plans = [plan for plan in kernel.plans if isinstance(plan, WgmmaPlan)]
    # Unrolled twice: the two copies of the body and the loop for a remainder.
    assert len(plans) == (1 if unroll == 1 else 3)
    assert not any(type(plan).__name__ == "LdmatrixPlan" for plan in kernel.plans)
    for plan in plans:
        for claim in plan.claims():
            assert check_equivalent(claim.emitted, claim.required).holds, claim.name


def test_the_ring_dot_in_the_interpreter_is_a_matmul() -> None:
    rng = np.random.default_rng(3)
    k = 192
    a = rng.uniform(-1, 1, (64, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, 64)).astype(np.float16)
    c = np.zeros((64, 64), np.float32)
    run_reference(_ring_dot(2), k, a.ravel(), b.ravel(), c.ravel(), grid=1)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(c.astype(np.float64) - want).max() < 1e-3


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_warpgroup_dots_compile_for_sm_90a(data: st.DataObject) -> None:
    """NVRTC (ptxas included) takes the wgmma code of random warpgroup dots: every instruction
    width, swizzle mode and A from shared memory or registers that the plans make."""
    case = data.draw(dot_cases(modes=("warpgroup",)))
    kernel = compile_program(case.program, "sm_90a", constants=case.constants)
    assert kernel.cubin


def test_an_advanced_descriptor_is_the_descriptor_of_the_advanced_address(run_c) -> None:
    """`la_wgmma_advance` (a call's descriptor from the first call's, one add on the low word)
    against `la_wgmma_descriptor` of the moved address, compiled from the emitted source by the
    host compiler: every 16-byte-aligned shared address below 2^18 (the field's 14 bits), with
    offsets forward and back that keep the address in range, for the fields of the example's
    descriptors and all-ones fields. Prints 1 per mismatch and the number of cases."""
    source = WGMMA_SOURCE.replace("__device__ __forceinline__", "static inline")
    # The two descriptor functions, as the kernels have them (the rest is device assembly).
    functions = source[: source.index("static inline void la_wgmma_fence")]
    program = f"""
#include <stdio.h>
{functions}
int main(void) {{
    const unsigned long long fields[2] = {{0x4000004000010000ull, 0xC000FFFF3FFF0000ull}};
    const int offsets[8] = {{0, 1, 2, 6, 2048, 2054, -2, -2048}};
    long long cases = 0, bad = 0;
    for (int f = 0; f < 2; ++f)
        for (unsigned int address = 0; address < (1u << 18); address += 16)
            for (int i = 0; i < 8; ++i) {{
                long long moved = (long long)address + 16LL * offsets[i];
                if (moved < 0 || moved >= (1LL << 18)) continue;
                ++cases;
                unsigned long long base = la_wgmma_descriptor(address, fields[f]);
                if (la_wgmma_advance(base, offsets[i])
                    != la_wgmma_descriptor((unsigned int)moved, fields[f])) ++bad;
            }}
    printf("%lld\\n%lld\\n", bad, cases);
    return 0;
}}
"""
    bad, cases = run_c(program)
    offsets = (0, 1, 2, 6, 2048, 2054, -2, -2048)
    assert bad == 0 and cases == 2 * sum((1 << 14) - abs(offset) for offset in offsets)

"""`backend.occupancy`: blocks an SM holds and a grid's waves, and the CUBIN's static shared bytes.

- An exact table of resident blocks (the decode kernels' register counts among the rows, with
  the resource or resources that bind; three rows where the registers' and the shared
  memory's allocation units decide the count), and of waves.
- Properties (hypothesis): more registers, threads or shared memory never let an SM hold more
  blocks; the blocks held fit every limit; one block more would break a limit that the result
  names.
- Bad values raise `LaunchError` naming them.
- `cubin_static_shared` reads a kernel's static shared bytes from its CUBIN (0 without any).
- `layout_algebra.hardware.register_cap` (the lowering's register budgets) against ptxas: a
  kernel that wants every register it can get is given the cap by NVRTC (no GPU needed); and
  a block at the cap for `min_blocks` is one that many of fit an SM (`resident_blocks`).
- On the GPU (marked `gpu`): the driver's count (`Kernel.resident_blocks`,
  cuOccupancyMaxActiveBlocksPerMultiprocessor) equals `resident_blocks` of the kernel's
  resources for decode kernels of several shapes: register-bound, shared-bound, both.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import backend
from backend.compile import compile_lowered, lower_all
from backend.errors import CompilationError, LaunchError
from backend.nvrtc import compile_cuda, cubin_kernels, cubin_registers, cubin_static_shared
from backend.occupancy import (
    SM_90,
    Residency,
    SmLimits,
    resident_blocks,
    waves,
    whole_waves,
)
from ir import dtypes
from ir.examples.register_dequant_matmul import DequantConfig, register_dequant_matmul
from ir.examples.vector_add import vector_add
from layout_algebra.hardware import register_cap

RESIDENT = [
    # registers, threads, shared bytes -> blocks, what binds
    (161, 128, 0, 3, ("registers",)),
    (186, 128, 0, 2, ("registers",)),
    (255, 128, 0, 2, ("registers",)),
    (158, 64, 0, 6, ("registers",)),
    (188, 64, 0, 4, ("registers",)),
    (184, 64, 0, 4, ("registers",)),
    (175, 128, 82960, 2, ("registers", "shared memory")),
    (32, 128, 0, 16, ("registers", "warps")),
    (0, 32, 0, 32, ("blocks",)),
    (64, 1024, 0, 1, ("registers",)),
    (32, 32, 100 * 1024, 2, ("shared memory",)),
    (32, 33, 0, 32, ("registers", "warps", "blocks")),
    (40, 256, 48 * 1024, 4, ("shared memory",)),
    (255, 32, 227 * 1024, 1, ("shared memory",)),
    # A warp's registers in units of 256: 36 a thread is 1152 a warp, given 1280, so a file
    # holds 12 warps (14 in units of 128), 48 an SM, six blocks of eight warps.
    (36, 256, 0, 6, ("registers",)),
    # A block's shared bytes (with the 1 KiB the system keeps) in units of 128: 45576 + 1024 =
    # 46600 is given 46720, and 228 KiB holds four of those where it would hold five unrounded.
    (0, 32, 45576, 4, ("shared memory",)),
    # 6272 + 1024 = 7296 is a whole unit of 128 (57 of them) and 228 KiB holds 32 exactly: in
    # units of 256 it would be given 7424, 31 an SM.
    (0, 32, 6272, 32, ("shared memory", "blocks")),
]


@pytest.mark.parametrize(("registers", "threads", "shared", "blocks", "binding"), RESIDENT)
def test_resident_blocks_table(registers, threads, shared, blocks, binding):
    assert resident_blocks(registers, threads, shared) == Residency(blocks, binding)


def test_a_smaller_sm_holds_fewer():
    half = SmLimits(registers=32768, shared_bytes=100 * 1024, warps=32, blocks=16)
    assert resident_blocks(161, 128, 0, half).blocks == 1
    assert resident_blocks(32, 64, 0, half) == Residency(16, ("registers", "warps", "blocks"))


WAVES = [
    (384, 3, 132, 384 / 396),
    (384, 2, 132, 384 / 264),
    (768, 6, 132, 768 / 792),
    (256, 2, 132, 256 / 264),
    (1, 1, 1, 1.0),
]


@pytest.mark.parametrize(("grid", "per_sm", "sms", "expected"), WAVES)
def test_waves_table(grid, per_sm, sms, expected):
    assert waves(grid, per_sm, sms) == pytest.approx(expected)
    assert (waves(grid, per_sm, sms) <= 1) == (grid <= per_sm * sms)


@pytest.mark.parametrize(
    ("grid", "per_sm", "sms", "expected"),
    [(384, 3, 132, 1), (384, 2, 132, 2), (396, 3, 132, 1), (397, 3, 132, 2), (1, 1, 1, 1)],
)
def test_whole_waves_table(grid, per_sm, sms, expected):
    assert whole_waves(grid, per_sm, sms) == expected


@given(st.integers(1, 10**6), st.integers(1, 64), st.integers(1, 200))
@settings(max_examples=200)
def test_whole_waves_are_the_waves_rounded_up(grid, per_sm, sms):
    count = whole_waves(grid, per_sm, sms)
    assert count == math.ceil(waves(grid, per_sm, sms) - 1e-12)
    assert (count - 1) * per_sm * sms < grid <= count * per_sm * sms


registers_strategy = st.integers(0, SM_90.max_registers_per_thread)
threads_strategy = st.integers(1, SM_90.max_threads_per_block)
shared_strategy = st.integers(0, SM_90.max_shared_per_block)


def _over_limits(registers: int, threads: int, shared: int, blocks: int) -> set[str]:
    """The limits of `SM_90` that `blocks` blocks of such a kernel break."""
    warps = math.ceil(threads / 32)
    over = set()
    if registers:
        warp_registers = math.ceil(registers * 32 / SM_90.register_unit) * SM_90.register_unit
        # Each register file holds whole warps; the SM's warps spread over its files.
        busiest_file = math.ceil(blocks * warps / SM_90.sub_partitions)
        if busiest_file * warp_registers > SM_90.registers // SM_90.sub_partitions:
            over.add("registers")
    block_shared = math.ceil((shared + SM_90.reserved_shared_bytes) / SM_90.shared_unit)
    if blocks * block_shared * SM_90.shared_unit > SM_90.shared_bytes:
        over.add("shared memory")
    if blocks * warps > SM_90.warps:
        over.add("warps")
    if blocks > SM_90.blocks:
        over.add("blocks")
    return over


@settings(max_examples=300, deadline=None)
@given(registers_strategy, threads_strategy, shared_strategy)
def test_the_blocks_fit_and_one_more_does_not(registers, threads, shared):
    result = resident_blocks(registers, threads, shared)
    assert result.blocks >= 0 and result.limited_by
    assert not _over_limits(registers, threads, shared, result.blocks)
    assert _over_limits(registers, threads, shared, result.blocks + 1) == set(result.limited_by)


@settings(max_examples=200, deadline=None)
@given(registers_strategy, registers_strategy, threads_strategy, shared_strategy)
def test_more_registers_never_hold_more_blocks(a, b, threads, shared):
    low, high = sorted((a, b))
    if low == 0:
        low = 1  # 0 registers: a kernel that declares none has no register bound at all
    high = max(high, low)
    assert (
        resident_blocks(high, threads, shared).blocks
        <= resident_blocks(low, threads, shared).blocks
    )


@settings(max_examples=200, deadline=None)
@given(registers_strategy, threads_strategy, threads_strategy, shared_strategy, shared_strategy)
def test_more_threads_or_shared_never_hold_more_blocks(registers, t1, t2, s1, s2):
    few, many = sorted((t1, t2))
    little, much = sorted((s1, s2))
    assert (
        resident_blocks(registers, many, much).blocks
        <= resident_blocks(registers, few, little).blocks
    )


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: resident_blocks(-1, 128), "registers_per_thread=-1"),
        (lambda: resident_blocks(256, 128), "registers_per_thread=256"),
        (lambda: resident_blocks(32, 0), "block_threads=0"),
        (lambda: resident_blocks(32, 1025), "block_threads=1025"),
        (lambda: resident_blocks(32, 128, 228 * 1024), "shared_bytes=233472"),
        (lambda: resident_blocks(32.0, 128), "registers_per_thread=32.0"),
        (lambda: resident_blocks(True, 128), "registers_per_thread=True"),
        (lambda: waves(0, 1, 132), "grid_blocks=0"),
        (lambda: waves(10, 0, 132), "blocks_per_sm=0"),
        (lambda: waves(10, 1, "132"), "sm_count='132'"),
        (lambda: whole_waves(0, 1, 132), "grid_blocks=0"),
        (lambda: whole_waves(10, 1, 0), "sm_count=0"),
    ],
)
def test_bad_values_are_named(call, named):
    with pytest.raises(LaunchError, match=named.replace("(", r"\(")):
        call()


def _register_hungry_kernel(threads: int, blocks: int) -> str:
    """CUDA source of a kernel with launch bounds (threads, blocks) that keeps 200 floats live
    across a loop: it wants more registers than any cap below about 200, so ptxas gives it the
    cap."""
    live = range(200)
    return "\n".join(
        [
            f'extern "C" __global__ void __launch_bounds__({threads}, {blocks}) '
            "hungry(float* x, int n) {",
            "  int t = threadIdx.x + blockIdx.x * blockDim.x;",
            *(f"  float a{i} = x[t + {i}];" for i in live),
            "  for (int j = 0; j < n; ++j) {",
            *(f"    a{i} = a{i} * a{(i + 1) % 200} + 1.0f;" for i in live),
            "  }",
            "  x[t] = " + " + ".join(f"a{i}" for i in live) + ";",
            "}",
        ]
    )


@pytest.mark.parametrize(
    ("threads", "blocks"), [(128, 3), (128, 4), (160, 2), (384, 1), (64, 5), (256, 2), (1024, 1)]
)
def test_register_cap_is_what_ptxas_gives_the_launch_bounds(threads: int, blocks: int) -> None:
    """A differential check of `layout_algebra.hardware.register_cap` (which the lowering's
    register budgets use) against NVRTC, no GPU needed."""
    module = compile_cuda(_register_hungry_kernel(threads, blocks), "sm_90a")
    assert cubin_registers(module.cubin) == {"hungry": register_cap(threads, blocks)}


@given(st.integers(1, 1024), st.integers(1, 32))
@settings(max_examples=200, deadline=None)
def test_blocks_at_the_register_cap_fit_as_many_as_asked(threads: int, blocks: int) -> None:
    asked = min(blocks, SM_90.warps // math.ceil(threads / 32), SM_90.blocks)
    cap = register_cap(threads, asked)
    assert resident_blocks(cap, threads).blocks >= asked


def _compiled(config: DequantConfig, k: int = 8192, n: int = 8192):
    program = register_dequant_matmul(dtypes.i4, 128, config)
    (lowered,) = lower_all([(program, {"k": k, "n": n})], "sm_90a")
    return compile_lowered(program, lowered, "sm_90a").kernel


def test_static_shared_bytes_from_the_cubin():
    # What the driver reported on an H100 for these kernels (CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES):
    # none for a kernel without shared memory, none for the decode kernel whose shared memory
    # is all dynamic (its CUBIN section is the reserved window alone), and 1 KB for the
    # released ring, whose barriers are static (its section 2 KB).
    plain = backend.compile(vector_add(), arch="sm_90a")
    assert cubin_static_shared(plain.cubin) == dict.fromkeys(cubin_kernels(plain.cubin), 0)
    dynamic_only = _compiled(DequantConfig())
    assert cubin_static_shared(dynamic_only.cubin) == {dynamic_only.entry: 0}
    released = _compiled(DequantConfig(units_k=8, stages=4, unroll=4, release=True))
    assert cubin_static_shared(released.cubin) == {released.entry: 1024}
    assert (released.static_shared_bytes, dynamic_only.static_shared_bytes) == (1024, 0)


def test_a_kernels_residency_is_read_from_its_cubin():
    """`Kernel.residency` without a GPU: the rules of `resident_blocks` on the CUBIN's
    registers and static shared bytes with the block's threads and dynamic shared bytes."""
    for config in GPU_CONFIGS[:3] + [DequantConfig(units_k=8, stages=4, unroll=4, release=True)]:
        kernel = _compiled(config)
        shared = cubin_static_shared(kernel.cubin)[kernel.entry] + kernel.shared_bytes
        registers = cubin_registers(kernel.cubin)[kernel.entry]
        expected = resident_blocks(registers, kernel.block_threads, shared)
        assert kernel.residency() == expected and expected.blocks >= 1
        half = SmLimits(registers=32768, shared_bytes=114 * 1024)
        assert kernel.residency(half) == resident_blocks(
            registers, kernel.block_threads, shared, half
        )
    plain = backend.compile(vector_add(), arch="sm_90a").kernel
    assert (
        plain.residency().blocks
        == resident_blocks(cubin_registers(plain.cubin)[plain.entry], plain.block_threads).blocks
    )


def test_a_residency_without_a_register_count_is_refused(monkeypatch):
    kernel = backend.compile(vector_add(), arch="sm_90a").kernel
    monkeypatch.setattr("backend.kernel.cubin_registers", lambda cubin: {})
    with pytest.raises(CompilationError, match="no register count"):
        kernel.residency()


def test_static_shared_of_a_malformed_cubin_is_refused():
    with pytest.raises(CompilationError, match="CUBIN"):
        cubin_static_shared(b"not an elf at all" * 4)


GPU_CONFIGS = [
    DequantConfig(),
    DequantConfig(warps=2, units_k=8, split=8, late_scale=True),
    DequantConfig(warps=4, units_k=8, split=8, late_scale=True, weights_as_a=True, units_m=2),
    DequantConfig(units_k=8, stages=4, unroll=4, late_scale=True, weights_as_a=True, units_m=2),
    DequantConfig(units_k=8, stages=4, unroll=4, release=True),
    DequantConfig(warps=8, units_k=4, split=4),
]


@pytest.mark.gpu
def test_resident_blocks_match_the_driver():
    with ThreadPoolExecutor() as pool:
        kernels = list(pool.map(_compiled, GPU_CONFIGS))
    for config, kernel in zip(GPU_CONFIGS, kernels, strict=True):
        resources = kernel.resources
        ours = resident_blocks(
            resources.registers_per_thread,
            kernel.block_threads,
            resources.static_shared_bytes + kernel.shared_bytes,
        )
        assert kernel.resident_blocks() == ours.blocks, (config, resources, ours)
        assert kernel.residency() == ours, (config, resources, ours)
        assert resources.static_shared_bytes == cubin_static_shared(kernel.cubin)[kernel.entry]

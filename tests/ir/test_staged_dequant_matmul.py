"""`ir.examples.staged_dequant_matmul` in the interpreter, its layouts, and its lowering.

- Differential against NumPy: bit for bit against the sequential formula the interpreter's
  `dot` defines, for weight types of 1 to 8 bits, f16 and bf16 activations with and without
  zero points, rows of A below, at and past one block, grids of warps over a k-tile's units;
  a hypothesis property draws further configurations.
- Exact tables: the dequantization grid of every small configuration; the decoded layout of a
  grid one warp deep in k holds, thread by thread, the elements of the register form's
  (`register_dequant_matmul.transposed_weight_layout`), and each warp's units are those it
  loads.
- The lowering on sm_90a: one ``wgmma`` plan reading both operands from shared memory, kept in
  flight into the next k-tile, activations by TMA, proxy fences (the threads store the
  weights); NVRTC compiles the kernel. The GPU runs are in
  tests/backend/test_gpu_wgmma_dequant.py.
- Errors: every bad configuration field and grid names itself.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from backend.bulk_copy import BulkTensorPlan
from backend.lower import lower
from backend.nvrtc import compile_cuda
from backend.wgmma import PROXY_FENCE, WgmmaPlan
from ir import dtypes
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.examples.register_dequant_matmul import transposed_weight_layout
from ir.examples.staged_dequant_matmul import (
    BUFFERS,
    StagedDequantConfig,
    dequant_grid,
    staged_dequant_matmul,
    staged_layouts,
)
from ir.testing.quantized_problems import (
    F16_WEIGHT_DTYPES,
    check_prefill_program,
    check_zero_point_program,
)
from ir.verifier import verify

LAYER = {"n": 12288, "k": 4096}


def run_staged(
    dtype: DataType, group_size: int, config: StagedDequantConfig, m: int, k: int, seed: int
) -> None:
    """Run the program on one column block in the interpreter: C bit for bit the sequential
    f32 formula of the dequantized weights, nothing past C written."""
    program = staged_dequant_matmul(dtype, group_size, config)
    shape = (m, config.block_n, k)
    check_prefill_program(program, config, dtype, group_size, shape, seed)


CASES = [
    # (weight type, group size, config, m, k-tiles)
    (dtypes.i4, 64, StagedDequantConfig(warpgroups=1, units_n=1, block_m=16, stages=3), 20, 3),
    (dtypes.u3, 64, StagedDequantConfig(warpgroups=2, units_n=2, block_m=24, depth=1), 30, 2),
    (dtypes.i8, 128, StagedDequantConfig(warpgroups=2, units_n=4, k_warps=2, block_m=8), 7, 4),
    (dtypes.u1, 64, StagedDequantConfig(warpgroups=1, units_n=2, units_k=2, k_warps=2), 5, 2),
    (dtypes.f4e2m1, 64, StagedDequantConfig(warpgroups=1, units_n=1, block_m=32, depth=3), 33, 3),
]


@pytest.mark.parametrize(
    ("dtype", "group_size", "config", "m", "tiles"),
    CASES,
    ids=[f"{c[0]}-g{c[1]}-m{c[3]}-{i}" for i, c in enumerate(CASES)],
)
def test_staged_dequant_matmul_equals_numpy(
    dtype: DataType, group_size: int, config: StagedDequantConfig, m: int, tiles: int
) -> None:
    run_staged(dtype, group_size, config, m, config.block_k * tiles, seed=m + tiles)


@pytest.mark.parametrize(
    ("weight", "activation"), [(dtypes.u4, dtypes.bf16), (dtypes.u2, dtypes.f16)], ids=str
)
def test_zero_points_and_bf16_activations_equal_numpy(
    weight: DataType, activation: DataType
) -> None:
    """C = A @ act((W - Z) * S) with the f32 sums in k order, every code and output exact."""
    config = StagedDequantConfig(warpgroups=1, units_n=1, block_m=16)
    group_size, m, n, k = 64, 19, config.block_n, 128
    program = staged_dequant_matmul(
        weight, group_size, config, activation_dtype=activation, zero_points=True
    )
    check_zero_point_program(
        program, config, weight, activation, True, (m, n, k), group_size, weight.nbits
    )


@st.composite
def staged_problems(draw: st.DrawFn) -> tuple[DataType, int, StagedDequantConfig, int, int]:
    """A weight type of exact f16 values, a valid configuration and group size, a small shape."""
    warpgroups = draw(st.sampled_from([1, 2]))
    units_n = warpgroups * draw(st.sampled_from([1, 2]))
    warps = 4 * warpgroups
    grids = [kw for kw in (1, 2, 4, 8) if warps % kw == 0 and units_n % (warps // kw) == 0]
    k_warps = draw(st.sampled_from(grids))
    config = StagedDequantConfig(
        warpgroups=warpgroups,
        units_n=units_n,
        units_k=k_warps * draw(st.sampled_from([1, 2])) if k_warps <= 4 else 8,
        block_m=8 * draw(st.integers(1, 4)),
        stages=draw(st.integers(3, 5)),
        depth=draw(st.integers(1, 3)),
        k_warps=k_warps,
    )
    # Within the shared memory a block may take (the verifier refuses more, by name).
    buffers = BUFFERS * config.block_n * config.block_k
    assume(2 * (buffers + config.stages * config.block_k * config.block_m) <= 200 * 1024)
    group_size = config.block_k * draw(st.sampled_from([1, 2]))
    m = draw(st.integers(1, 2 * config.block_m + 1))
    k = config.block_k * draw(st.integers(1, 3))
    return draw(st.sampled_from(F16_WEIGHT_DTYPES)), group_size, config, m, k


@settings(max_examples=8, deadline=None)
@given(problem=staged_problems(), seed=st.integers(0, 2**32 - 1))
def test_any_valid_config_equals_numpy(
    problem: tuple[DataType, int, StagedDequantConfig, int, int], seed: int
) -> None:
    run_staged(*problem, seed=seed)


# ------------------------------------------------------------------------------ layouts


@pytest.mark.parametrize(
    ("config", "grid"),
    [
        (StagedDequantConfig(), (4, 4, 1, 1)),
        (StagedDequantConfig(units_n=8, k_warps=2), (2, 8, 2, 1)),
        (StagedDequantConfig(warpgroups=2, units_n=2, units_k=8, k_warps=8), (8, 1, 1, 2)),
        (StagedDequantConfig(warpgroups=1, units_n=4, k_warps=1), (1, 4, 4, 1)),
    ],
    ids=str,
)
def test_dequant_grid_table(config: StagedDequantConfig, grid: tuple[int, int, int, int]) -> None:
    assert dequant_grid(config) == grid


def _elements_by_thread(layout) -> list[set[tuple[int, ...]]]:
    table = layout.table()
    return [set(map(tuple, table[t])) for t in range(table.shape[0])]


def test_a_grid_one_warp_deep_decodes_as_the_register_form() -> None:
    """k_warps = 1: every thread holds the elements the register form's A fragments give it."""
    config = StagedDequantConfig(warpgroups=1, units_n=4, k_warps=1)
    _, codes, decoded, _ = staged_layouts(4, config)
    register_form = transposed_weight_layout(4, config.units_k, 1)
    assert _elements_by_thread(decoded) == _elements_by_thread(register_form)
    assert _elements_by_thread(decoded) == _elements_by_thread(codes)


def test_each_warp_decodes_the_units_it_loads() -> None:
    """A 4 x 4 grid: warp (i, j) holds the codes and the decoded weights of unit (i, j) alone
    (k16 rows 16 i .. 16 i + 15 of W, columns 64 j .. 64 j + 63), and the two name the same
    elements in every thread."""
    _, codes, decoded, _ = staged_layouts(4, StagedDequantConfig())
    decoded_sets, code_sets = _elements_by_thread(decoded), _elements_by_thread(codes)
    assert decoded_sets == code_sets
    for thread, elements in enumerate(decoded_sets):
        warp = thread // 32
        rows = {n // 64 for n, _ in elements}  # W^T rows: W's columns
        ks = {kk // 16 for _, kk in elements}
        assert rows == {warp % 4} and ks == {warp // 4}


# ------------------------------------------------------------------------------ lowering


@pytest.fixture(scope="module")
def kernel():
    return lower(
        staged_dequant_matmul(dtypes.i4, 128, StagedDequantConfig()), "sm_90a", constants=LAYER
    )


def test_both_operands_reach_wgmma_from_shared_memory(kernel) -> None:
    (plan,) = [plan for plan in kernel.plans if isinstance(plan, WgmmaPlan)]
    assert plan.a_descriptors is not None and plan.n == 128
    a, b = plan.a_descriptors.descriptor, plan.b_descriptors.descriptor
    assert (a.major, a.swizzle, b.major, b.swizzle) == ("k", "128B", "k", "128B")
    assert any(isinstance(plan, BulkTensorPlan) for plan in kernel.plans)


def test_the_dot_stays_in_flight_and_the_stores_are_fenced(kernel) -> None:
    """The dot runs on into the next k-tile (``wait_group 1``, one ``wait_group 0`` after the
    loop); the threads store the weights the tensor cores read, so the k-tile's barrier
    after the store is preceded by a proxy fence. The dot after that barrier needs none of
    its own: nothing is written between (`backend.proxy_fences`)."""
    text = kernel.source.split('extern "C"')[1]
    assert text.count("la_wgmma_wait_prior();") == 1 and text.count("la_wgmma_wait();") == 1
    lines = [line.strip() for line in text.splitlines()]
    fence = lines.index(PROXY_FENCE)
    assert text.count(PROXY_FENCE) == 1 and lines[fence + 1] == "__syncthreads();"
    assert lines.index("// store_shared(s1, r12, [k0 % 3, 0, 0])") < fence


def test_the_kernel_compiles_for_sm_90a(kernel) -> None:
    log = compile_cuda(kernel.source, "sm_90a", ["--ptxas-options=-v"]).log
    assert " 0 bytes spill stores" in log and "C751" not in log


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (StagedDequantConfig(warpgroups=0), "warpgroups=0; expected an int >= 1"),
        (StagedDequantConfig(k_warps=True), "k_warps=True; expected an int >= 1"),
        (StagedDequantConfig(stages=2), "stages=2; expected an int from 3 to 8"),
        (StagedDequantConfig(block_m=12), "block_m=12; expected a multiple of 8 up to 256"),
        (StagedDequantConfig(units_n=6), "units_n=6 with warpgroups=4; expected a multiple"),
        (StagedDequantConfig(k_warps=3), "k_warps=3 with 16 warps, units_k=4 and units_n=4"),
        (StagedDequantConfig(k_warps=8), "k_warps=8 with 16 warps, units_k=4 and units_n=4"),
        (StagedDequantConfig(warpgroups=9, units_n=9), "warpgroups=9; a block has at most 8"),
        (
            StagedDequantConfig(units_k=6, k_warps=2, units_n=8),
            "units_k=6; expected at most 4 or a multiple of 4",
        ),
    ],
    ids=str,
)
def test_bad_config_is_refused(config: StagedDequantConfig, message: str) -> None:
    with pytest.raises(VerificationError, match=message):
        staged_dequant_matmul(dtypes.i4, 128, config)


def test_too_much_shared_memory_is_refused() -> None:
    """Three 256 x 128 weight tiles and four stages of 256 rows: past the 227 KiB a block may
    have."""
    program = staged_dequant_matmul(dtypes.i4, 128, StagedDequantConfig(units_k=8, block_m=256))
    with pytest.raises(VerificationError, match="shared memory past the limit"):
        verify(program)


def test_a_config_of_another_kind_is_refused() -> None:
    with pytest.raises(VerificationError, match="expected a StagedDequantConfig or None"):
        staged_dequant_matmul(dtypes.i4, 128, {"block_m": 64})  # type: ignore[arg-type]

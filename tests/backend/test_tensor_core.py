"""The tensor-core plans: mma.sync m16n8k16 for `dot`, ldmatrix for `load_shared` and stmatrix for
`store_shared`.

Literal tables pin the plans of worked examples (calls, repeat layouts, instruction lists, the
printed C); the claims of every plan are proved with Z3 (`proofs.check_equivalent`) and checked
by brute force (hypothesis over warp grids and repeat counts), and a corrupted plan is refuted
with a counterexample; stmatrix plans are also run by the PTX rule in NumPy against the generic
store; the emitted C compiles with NVRTC for sm_80 and sm_90a; on a GPU, harness kernels run the
emitted ldmatrix, stmatrix and mma code and are compared with the layouts' tables (bit for bit)
and with a float64 matmul (within the tensor core's rounding).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proofs
from backend.errors import ArchitectureError
from backend.nvrtc import compile_cuda, cubin_kernels
from backend.tensor_core import (
    STMATRIX_SOURCE,
    TENSOR_CORE_SOURCE,
    LdmatrixPlan,
    MmaCall,
    MmaPlan,
    StmatrixPlan,
    arch_number,
    emit_ldmatrix,
    emit_mma,
    emit_stmatrix,
    mma_operand_layouts,
    plan_ldmatrix,
    plan_mma,
    plan_mma_layouts,
    plan_stmatrix,
)
from ir import dtypes
from ir.examples.matmul import simt_dot_layouts
from ir.examples.packed_prefill import staging_layout
from ir.instructions import Dot
from ir.values import RegisterTensor
from layout_algebra import (
    LayoutError,
    local,
    replicate,
    shared_column_major,
    shared_row_major,
    shared_row_major_swizzle,
    spatial,
    var,
)
from layout_algebra.fragments import fragment, wgmma_fragment

RLIMIT = 50_000_000
TIMEOUT = 60.0

F_A = fragment("mma.m16n8k16.a").layout
F_B = fragment("mma.m16n8k16.b").layout
F_C = fragment("mma.m16n8k16.c").layout


def _plan(warps_m: int, warps_n: int, m: int, n: int, k: int, dtype=dtypes.f16) -> MmaPlan:
    plan = plan_mma_layouts(dtype, *mma_operand_layouts(warps_m, warps_n, m, n, k), "sm_80")
    assert plan is not None
    return plan


def _proved(claim: proofs.ProofResult) -> bool:
    return claim.holds is True


# ------------------------------------------------------------------------------------------------
# mma: literal plans
# ------------------------------------------------------------------------------------------------


def test_plan_mma_single_warp_single_tile() -> None:
    plan = _plan(1, 1, 16, 8, 16)
    assert plan.calls == (MmaCall(a_block=0, b_block=0, c_block=0, k_step=0),)
    assert plan.instruction == "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
    assert (plan.a_repeats, plan.b_repeats, plan.c_repeats) == (local(1, 1),) * 3


def test_plan_mma_two_by_two_warps() -> None:
    plan = _plan(2, 2, 64, 64, 32, dtypes.bf16)
    assert plan.instruction == "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
    assert plan.a_repeats == spatial(2, 1) * replicate(2) * local(2, 2)
    assert plan.b_repeats == replicate(2) * spatial(1, 2) * local(2, 4)
    assert plan.c_repeats == spatial(2, 2).local(2, 4)
    assert (plan.k_steps, plan.c_blocks) == (2, 8)
    # k step 0 for the 8 accumulator blocks (A block = row * 2 + step, B block = step * 4 + col),
    # then k step 1.
    expected = [(2 * (c // 4), c % 4, c, 0) for c in range(8)]
    expected += [(2 * (c // 4) + 1, 4 + c % 4, c, 1) for c in range(8)]
    assert [(x.a_block, x.b_block, x.c_block, x.k_step) for x in plan.calls] == expected


def test_mma_operand_layouts_literal() -> None:
    a, b, c = mma_operand_layouts(2, 1, 32, 8, 16)
    assert c == spatial(2, 1) * F_C
    assert a == spatial(2, 1) * F_A
    assert b == replicate(2) * F_B


def test_emit_mma_literal() -> None:
    plan = _plan(1, 1, 16, 8, 16)
    assert emit_mma(plan, "a", "b", "c", "d") == (
        "d[0] = c[0];\nd[1] = c[1];\nd[2] = c[2];\nd[3] = c[3];\n"
        "la_mma_m16n8k16_f16(d[0], d[1], d[2], d[3], a[0], a[1], a[2], a[3], b[0], b[1]);\n"
    )
    assert emit_mma(plan, "a", "b", "acc", "acc").startswith("la_mma_m16n8k16_f16(acc[0]")


def test_plan_mma_from_dot_instruction() -> None:
    a, b, c = mma_operand_layouts(1, 2, 16, 16, 32)
    dot = Dot(
        out=RegisterTensor("d", dtypes.f32, c),
        a=RegisterTensor("x", dtypes.bf16, a),
        b=RegisterTensor("y", dtypes.bf16, b),
        c=RegisterTensor("z", dtypes.f32, c),
    )
    plan = plan_mma(dot, "sm_90a")
    assert plan is not None and plan.dtype == dtypes.bf16 and len(plan.calls) == 2


def test_plan_mma_declines() -> None:
    a, b, c = mma_operand_layouts(2, 2, 64, 64, 32)
    # SIMT layouts: every thread holds whole rows and columns, no fragment divides them.
    assert plan_mma_layouts(dtypes.f16, *simt_dot_layouts(128, 64, 64, 16), "sm_80") is None
    # sm_75 has no m16n8k16 with f16 inputs; f32 inputs have no such mma.
    assert plan_mma_layouts(dtypes.f16, a, b, c, "sm_75") is None
    assert plan_mma_layouts(dtypes.f32, a, b, c, "sm_80") is None
    # Warps that accumulate N blocks whose B columns other warps hold: warp grid transposed.
    b_swapped = (spatial(1, 2) * replicate(2) * local(2, 4)) * F_B
    assert plan_mma_layouts(dtypes.f16, a, b_swapped, c, "sm_80") is None
    # An accumulator that is not made of whole 16 x 8 fragments.
    assert plan_mma_layouts(dtypes.f16, a, b, spatial(8, 16).local(8, 4), "sm_80") is None


def test_arch_number() -> None:
    assert (arch_number("sm_80"), arch_number("sm_90a"), arch_number("sm_100f")) == (80, 90, 100)
    with pytest.raises(ArchitectureError, match="'compute_80' is not of the form sm_XX"):
        arch_number("compute_80")


def test_mma_operand_layouts_rejects_sizes() -> None:
    with pytest.raises(LayoutError, match=r"block \(48, 64, 32\) must split into 2 x 2 warps"):
        mma_operand_layouts(2, 2, 48, 64, 32)
    with pytest.raises(LayoutError, match="warps_m must be a positive int, got 0"):
        mma_operand_layouts(0, 2, 64, 64, 32)


# ------------------------------------------------------------------------------------------------
# mma: claims
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 1, 16, 8, 16), (2, 2, 64, 64, 32)])
def test_mma_claims_proved(shape: tuple[int, int, int, int, int]) -> None:
    for claim in _plan(*shape).claims():
        result = proofs.check_equivalent(
            claim.emitted, claim.required, timeout=TIMEOUT, rlimit=RLIMIT
        )
        assert _proved(result), (claim.name, result.reason)


@pytest.mark.parametrize(
    ("field", "value", "claim_index"),
    [
        ("a_block", 1, 0),  # call 3 reads the A block of the other k step
        ("b_block", 2, 1),  # call 3 reads the B block of another N block
        ("c_block", 7, 0),  # call 3 accumulates into a block of another M block
    ],
)
def test_mma_claims_refute_a_wrong_register(field: str, value: int, claim_index: int) -> None:
    plan = _plan(2, 2, 64, 64, 32)
    calls = list(plan.calls)
    calls[3] = dataclasses.replace(calls[3], **{field: value})
    wrong = dataclasses.replace(plan, calls=tuple(calls))
    claim = wrong.claims()[claim_index]
    result = proofs.check_equivalent(claim.emitted, claim.required, timeout=TIMEOUT, rlimit=RLIMIT)
    assert result.holds is False
    t, p = result.counterexample["t"], result.counterexample["i"]
    registers = 8 if claim_index == 0 else 4
    assert p // registers == 3
    assert claim.emitted.map(t, p) != claim.required.map(t, p)


@settings(max_examples=25)
@given(
    warps_m=st.sampled_from([1, 2, 4]),
    warps_n=st.sampled_from([1, 2]),
    rows=st.integers(1, 2),
    cols=st.integers(1, 3),
    steps=st.integers(1, 3),
)
def test_mma_claims_hold_by_brute_force(
    warps_m: int, warps_n: int, rows: int, cols: int, steps: int
) -> None:
    plan = _plan(warps_m, warps_n, 16 * warps_m * rows, 8 * warps_n * cols, 16 * steps)
    for claim in plan.claims():
        assert np.array_equal(claim.emitted.table(), claim.required.table()), claim.name
    # Every accumulator block meets every k step once, in increasing order.
    for block in range(plan.c_blocks):
        assert [x.k_step for x in plan.calls if x.c_block == block] == list(range(steps))
    assert plan.a_repeats * F_A == plan.a_layout
    assert plan.c_repeats * F_C == plan.c_layout


# ------------------------------------------------------------------------------------------------
# ldmatrix
# ------------------------------------------------------------------------------------------------


def _instructions(plan: LdmatrixPlan | None) -> list[tuple[int, int, bool]]:
    assert plan is not None
    return [(x.first_pair, x.count, x.transpose) for x in plan.instructions]


def test_plan_ldmatrix_literal_single_tile() -> None:
    a, b, _ = mma_operand_layouts(1, 1, 16, 8, 16)
    plan_a = plan_ldmatrix(shared_row_major(16, 16), a, dtypes.f16)
    assert _instructions(plan_a) == [(0, 4, False)]
    # Lane l gives row l % 8 of matrix l // 8: matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15).
    address = plan_a.instructions[0].row_address
    t = np.arange(32)
    assert np.array_equal(
        address.evaluate({"t": t}), (t % 8 + 8 * (t // 8 % 2)) * 16 + 8 * (t // 16)
    )
    plan_b = plan_ldmatrix(shared_row_major(16, 8), b, dtypes.f16)
    assert _instructions(plan_b) == [(0, 2, True)]
    assert emit_ldmatrix(plan_b, "s", "r", "tid") == (
        "{\n"
        "    unsigned int la_r0, la_r1;\n"
        "    la_ldmatrix_x2_trans(la_r0, la_r1, s + (((tid & 7) >> 1) * 16 + (tid & 1) * 8 + "
        "((tid >> 3) & 1) * 64));\n"
        "    r[0] = la_r0;\n"
        "    r[1] = la_r1;\n"
        "}\n"
    )


@pytest.mark.parametrize(
    ("shared", "expected"),
    [
        (shared_row_major(64, 32), [(0, 4, False), (4, 4, False), (8, 4, False), (12, 4, False)]),
        (shared_row_major(64, 40), [(0, 4, False), (4, 4, False), (8, 4, False), (12, 4, False)]),
        (
            shared_row_major_swizzle(64, 32, element_bits=16),
            [(0, 4, False), (4, 4, False), (8, 4, False), (12, 4, False)],
        ),
        # Column-major A: rows of k are contiguous, so the transposed form applies.
        (shared_column_major(64, 32), [(0, 4, True), (4, 4, True), (8, 4, True), (12, 4, True)]),
    ],
)
def test_plan_ldmatrix_operand_a(shared, expected: list[tuple[int, int, bool]]) -> None:
    a, _, _ = mma_operand_layouts(2, 2, 64, 64, 32)
    assert _instructions(plan_ldmatrix(shared, a, dtypes.f16)) == expected


@pytest.mark.parametrize("planner", [plan_ldmatrix, plan_stmatrix])
def test_plan_ldmatrix_and_stmatrix_decline(planner) -> None:
    """The same tiles that ldmatrix cannot load, stmatrix cannot store."""
    a, _, _ = mma_operand_layouts(2, 2, 64, 64, 32)
    # Rows of 36 f16 are 72 bytes: row starts are not 16-byte aligned.
    assert planner(shared_row_major(64, 36), a, dtypes.f16) is None
    # 32-bit elements: ldmatrix and stmatrix move 16-bit ones.
    assert planner(shared_row_major(64, 32), a, dtypes.f32) is None
    # The SIMT operand layout: each thread's pairs are not spread as 8 x 8 matrices.
    simt_a, _, _ = simt_dot_layouts(128, 64, 64, 16)
    assert planner(shared_row_major(64, 16), simt_a, dtypes.f16) is None
    kk = var("kk", 0, 31)
    with pytest.raises(LayoutError, match=r"values\['k'\] = range\(0, 2\): expected a non-empty"):
        planner(shared_row_major(64, 32), a, dtypes.f16, [kk, 0], {"k": range(2)})


def test_plan_ldmatrix_offsets_need_their_values() -> None:
    _, b, _ = mma_operand_layouts(2, 2, 64, 64, 16)
    kk = var("kk", 0, 31)
    shared = shared_row_major_swizzle(32, 64, element_bits=16)
    # Over the bounds alone, kk = 17 puts the 16-row tile past the 32 rows.
    assert plan_ldmatrix(shared, b, dtypes.f16, [kk, 0]) is None
    plan = plan_ldmatrix(shared, b, dtypes.f16, [kk, 0], {"kk": range(0, 32, 16)})
    assert _instructions(plan) == [(0, 4, True), (4, 4, True)]
    assert plan.instructions[0].row_address.free_vars() == {"t", "kk"}
    with pytest.raises(LayoutError, match=r"values\['k'\] = range\(0, 2\): expected a non-empty"):
        plan_ldmatrix(shared, b, dtypes.f16, [kk, 0], {"k": range(2)})


def test_ldmatrix_claims_proved() -> None:
    a, b, _ = mma_operand_layouts(2, 2, 64, 64, 16)
    kk = var("kk", 0, 31)
    plans = [
        plan_ldmatrix(shared_row_major(64, 40), a, dtypes.f16),
        plan_ldmatrix(shared_row_major(32, 64), b, dtypes.f16, [kk, 0], {"kk": range(0, 32, 16)}),
    ]
    for plan in plans:
        for claim in plan.claims():
            result = proofs.check_equivalent(
                claim.emitted, claim.required, timeout=TIMEOUT, rlimit=RLIMIT
            )
            assert _proved(result), (claim.name, result.reason)


def test_ldmatrix_swizzled_claims_hold_by_brute_force() -> None:
    _, b, _ = mma_operand_layouts(2, 2, 64, 64, 16)
    kk = var("kk", 0, 31)
    shared = shared_row_major_swizzle(32, 64, element_bits=16)
    plan = plan_ldmatrix(shared, b, dtypes.f16, [kk, 0], {"kk": range(0, 32, 16)})
    for claim in plan.claims():
        for index in range(2):
            emitted = claim.emitted.bind({"kk_index": index}).table()
            required = claim.required.bind({"kk_index": index}).table()
            assert np.array_equal(emitted, required), (claim.name, index)


def test_ldmatrix_claims_refute_a_wrong_address() -> None:
    a, _, _ = mma_operand_layouts(1, 1, 16, 16, 16)
    plan = plan_ldmatrix(shared_row_major(16, 16), a, dtypes.f16)
    wrong_instruction = dataclasses.replace(
        plan.instructions[0], row_address=plan.instructions[0].row_address + 8
    )
    wrong = dataclasses.replace(plan, instructions=(wrong_instruction,))
    (claim,) = wrong.claims()
    result = proofs.check_equivalent(claim.emitted, claim.required, timeout=TIMEOUT, rlimit=RLIMIT)
    assert result.holds is False
    assert result.counterexample["a"] == result.counterexample["b"] + 8


# ------------------------------------------------------------------------------------------------
# stmatrix
# ------------------------------------------------------------------------------------------------


def _stmatrix_image(plan, size: int) -> np.ndarray:
    """The shared memory (`size` elements, -1 where nothing is written) after every thread runs
    the plan's stmatrix instructions by the PTX rule, thread t's element i holding the code
    ``t * local_size + i``: lane 8m + r gives row r of matrix m, register m of lane l goes to
    row l // 4, columns 2 (l % 4) and + 1 (.trans: rows 2 (l % 4) and + 1 of column l // 4)."""
    layout = plan.register_layout
    threads = np.arange(layout.num_threads)
    memory = np.full(size, -1, dtype=np.int64)
    for instruction in plan.instructions:
        rows = np.broadcast_to(instruction.row_address.evaluate({"t": threads}), threads.shape)
        for t in threads:
            warp, lane = divmod(int(t), 32)
            for m in range(instruction.count):
                for h in range(2):
                    if instruction.transpose:
                        offset = rows[32 * warp + 8 * m + 2 * (lane % 4) + h] + lane // 4
                    else:
                        offset = rows[32 * warp + 8 * m + lane // 4] + 2 * (lane % 4) + h
                    element = 2 * (instruction.first_pair + m) + h
                    memory[offset] = t * layout.local_size + element
    return memory


def _generic_image(shared, layout, size: int) -> np.ndarray:
    """The same memory after the generic store: element i of thread t at its shared offset."""
    table = layout.table()
    offsets = np.asarray(shared.offset(tuple(table[..., d] for d in range(layout.rank))))
    memory = np.full(size, -1, dtype=np.int64)
    codes = np.arange(layout.num_threads)[:, None] * layout.local_size + np.arange(
        layout.local_size
    )
    memory[np.broadcast_to(offsets, codes.shape).ravel()] = codes.ravel()
    return memory


def test_plan_stmatrix_literal_accumulator() -> None:
    _, _, c = mma_operand_layouts(1, 1, 16, 8, 16)
    # Row-major C: each register pair is two columns of one row, a plain matrix.
    plan = plan_stmatrix(shared_row_major(16, 8), c, dtypes.f16)
    assert isinstance(plan, StmatrixPlan)
    assert [(x.first_pair, x.count, x.transpose, x.store) for x in plan.instructions] == [
        (0, 2, False, True)
    ]
    assert plan.instructions[0].name == "stmatrix.sync.aligned.m8n8.x2.shared.b16"
    assert emit_stmatrix(plan, "s", "r", "tid") == (
        "la_stmatrix_x2(s + ((tid & 7) * 8 + ((tid >> 3) & 1) * 64), r[0], r[1]);\n"
    )
    # Column-major C (C^T's rows contiguous, as a staged C^T tile is): the transposed form.
    plan_t = plan_stmatrix(shared_column_major(16, 8), c, dtypes.f16)
    assert [(x.first_pair, x.count, x.transpose) for x in plan_t.instructions] == [(0, 2, True)]
    assert [claim.name for claim in plan_t.claims()] == [
        "stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 into register pairs 0..1"
    ]


@settings(max_examples=25, deadline=None)
@given(
    warps_m=st.sampled_from([1, 2, 4]),
    warps_n=st.sampled_from([1, 2]),
    repeat_m=st.integers(1, 2),
    repeat_n=st.integers(1, 3),
    shared=st.sampled_from(["row", "column", "swizzle"]),
)
def test_stmatrix_plans_write_what_the_generic_store_writes(
    warps_m: int, warps_n: int, repeat_m: int, repeat_n: int, shared: str
) -> None:
    """Run by the PTX rule, a stmatrix plan of an mma accumulator tile writes every element
    where the generic store writes it, and nothing else; a plan exists for each of these
    tiles, plain where C's rows are contiguous and transposed where its columns are."""
    m, n = 16 * warps_m * repeat_m, 8 * warps_n * repeat_n * 2
    _, _, c = mma_operand_layouts(warps_m, warps_n, m, n, 16)
    layout = {
        "row": shared_row_major(m, n),
        "column": shared_column_major(m, n),
        "swizzle": shared_row_major_swizzle(m, n, element_bits=16),
    }[shared]
    plan = plan_stmatrix(layout, c, dtypes.f16)
    assert plan is not None
    assert all(x.transpose == (shared == "column") for x in plan.instructions)
    assert np.array_equal(_stmatrix_image(plan, m * n), _generic_image(layout, c, m * n))


def test_stmatrix_of_the_staged_wgmma_tile() -> None:
    """The prefill kernel's staged store: a warpgroup's m64n64 wgmma accumulator, cast to f16,
    into the swizzled C^T staging tile (C's rows contiguous) - transposed x4 stmatrix, right by
    the PTX rule and proved with Z3."""
    d = wgmma_fragment("d", 64).layout
    shared = staging_layout(64, 64, 16)
    plan = plan_stmatrix(shared, d, dtypes.f16)
    assert [(x.count, x.transpose) for x in plan.instructions] == [(4, True)] * 4
    assert np.array_equal(_stmatrix_image(plan, 64 * 64), _generic_image(shared, d, 64 * 64))
    for claim in plan.claims():
        result = proofs.check_equivalent(
            claim.emitted, claim.required, timeout=TIMEOUT, rlimit=RLIMIT
        )
        assert _proved(result), (claim.name, result.reason)


def test_stmatrix_claims_refute_a_wrong_direction() -> None:
    """A plan whose instructions store plain matrices where the tile wants them transposed
    writes elsewhere: its claim is refuted with a counterexample."""
    _, _, c = mma_operand_layouts(1, 1, 16, 8, 16)
    plan = plan_stmatrix(shared_column_major(16, 8), c, dtypes.f16)
    wrong = dataclasses.replace(
        plan,
        instructions=tuple(dataclasses.replace(x, transpose=False) for x in plan.instructions),
    )
    (claim,) = wrong.claims()
    result = proofs.check_equivalent(claim.emitted, claim.required, timeout=TIMEOUT, rlimit=RLIMIT)
    assert result.holds is False
    assert result.counterexample["a"] != result.counterexample["b"]


# ------------------------------------------------------------------------------------------------
# Emitted C: NVRTC, and the GPU
# ------------------------------------------------------------------------------------------------

_SHAPE = (2, 2, 64, 64, 32)
_THREADS = 128


def _harness(dtype: dtypes.DataType) -> tuple[str, MmaPlan, LdmatrixPlan, LdmatrixPlan]:
    """A kernel of one block: A (64 x 32) and B (32 x 64) codes go to shared memory at the
    offsets the host gives (swizzled A, row-major B), ldmatrix loads them into the mma operand
    layouts, the mma plan accumulates into C (float32 bits), and the registers are written out
    (thread-major) for comparison."""
    plan = _plan(*_SHAPE, dtype)
    load_a = plan_ldmatrix(shared_row_major_swizzle(64, 32, element_bits=16), plan.a_layout, dtype)
    load_b = plan_ldmatrix(shared_row_major(32, 64), plan.b_layout, dtype)
    a_size, b_size = plan.a_layout.local_size, plan.b_layout.local_size
    c_size = plan.c_layout.local_size
    source = (
        TENSOR_CORE_SOURCE
        + f"""
extern "C" __global__ void __launch_bounds__({_THREADS}) harness(
    const unsigned short* a, const unsigned short* b, const int* a_offsets,
    const int* b_offsets, unsigned int* c, unsigned int* a_registers,
    unsigned int* b_registers)
{{
    __shared__ __align__(16) unsigned short a_shared[64 * 32];
    __shared__ __align__(16) unsigned short b_shared[32 * 64];
    const int tid = threadIdx.x;
    for (int e = tid; e < 64 * 32; e += {_THREADS}) {{
        a_shared[a_offsets[e]] = a[e];
        b_shared[b_offsets[e]] = b[e];
    }}
    __syncthreads();
    unsigned int ra[{a_size // 2}], rb[{b_size // 2}];  /* two 16-bit codes per word */
    unsigned int acc[{c_size}];
    for (int i = 0; i < {c_size}; ++i) {{
        acc[i] = c[tid * {c_size} + i];
    }}
{emit_ldmatrix(load_a, "a_shared", "ra", "tid")}
{emit_ldmatrix(load_b, "b_shared", "rb", "tid")}
{emit_mma(plan, "ra", "rb", "acc", "acc")}
    for (int i = 0; i < {c_size}; ++i) {{
        c[tid * {c_size} + i] = acc[i];
    }}
    for (int i = 0; i < {a_size // 2}; ++i) {{
        a_registers[tid * {a_size // 2} + i] = ra[i];
    }}
    for (int i = 0; i < {b_size // 2}; ++i) {{
        b_registers[tid * {b_size // 2} + i] = rb[i];
    }}
}}
"""
    )
    return source, plan, load_a, load_b


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", [dtypes.f16, dtypes.bf16])
def test_emitted_code_compiles_with_nvrtc(arch: str, dtype: dtypes.DataType) -> None:
    source = _harness(dtype)[0]
    assert cubin_kernels(compile_cuda(source, arch).cubin) == ("harness",)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [dtypes.f16, dtypes.bf16])
def test_gpu_ldmatrix_and_mma_match_the_layouts(dtype: dtypes.DataType) -> None:
    torch = pytest.importorskip("torch")
    from backend.kernel import KernelArrayParam, build_kernel

    source, plan, load_a, load_b = _harness(dtype)
    a_size, b_size = plan.a_layout.local_size, plan.b_layout.local_size
    c_size = plan.c_layout.local_size
    params = (
        KernelArrayParam("a", 16, 64 * 32),
        KernelArrayParam("b", 16, 32 * 64),
        KernelArrayParam("a_offsets", 32, 64 * 32),
        KernelArrayParam("b_offsets", 32, 32 * 64),
        KernelArrayParam("c", 32, _THREADS * c_size),
        KernelArrayParam("a_registers", 32, _THREADS * a_size // 2),
        KernelArrayParam("b_registers", 32, _THREADS * b_size // 2),
    )
    kernel = build_kernel(source, "harness", params, block_threads=_THREADS)
    rng = np.random.default_rng(3)
    a_values = rng.uniform(-2, 2, (64, 32)).astype(np.float32)
    b_values = rng.uniform(-2, 2, (32, 64)).astype(np.float32)
    c_values = rng.uniform(-2, 2, (64, 64)).astype(np.float32)
    a_codes, b_codes = dtype.encode(a_values.ravel()), dtype.encode(b_values.ravel())
    a_exact = dtype.decode(a_codes).reshape(64, 32).astype(np.float64)
    b_exact = dtype.decode(b_codes).reshape(32, 64).astype(np.float64)
    c_table, a_table, b_table = (
        plan.c_layout.table(),
        plan.a_layout.table(),
        plan.b_layout.table(),
    )
    c_registers = c_values[c_table[..., 0], c_table[..., 1]]

    def device(array: np.ndarray, torch_dtype: object) -> object:
        return torch.from_numpy(np.ascontiguousarray(array)).to("cuda").view(torch_dtype)

    a_offsets = load_a.shared_layout.table().astype(np.int32).ravel()
    b_offsets = load_b.shared_layout.table().astype(np.int32).ravel()
    c = device(c_registers.view(np.int32).ravel(), torch.int32)
    a_registers = torch.zeros(_THREADS * a_size // 2, dtype=torch.int32, device="cuda")
    b_registers = torch.zeros(_THREADS * b_size // 2, dtype=torch.int32, device="cuda")
    kernel(
        device(a_codes.astype(np.uint16).view(np.int16), torch.int16),
        device(b_codes.astype(np.uint16).view(np.int16), torch.int16),
        device(a_offsets, torch.int32),
        device(b_offsets, torch.int32),
        c,
        a_registers,
        b_registers,
        grid=1,
    )
    a_loaded = a_registers.cpu().numpy().view(np.uint16).reshape(_THREADS, a_size)
    b_loaded = b_registers.cpu().numpy().view(np.uint16).reshape(_THREADS, b_size)
    a_grid = a_codes.astype(np.uint16).reshape(64, 32)
    b_grid = b_codes.astype(np.uint16).reshape(32, 64)
    assert np.array_equal(a_loaded, a_grid[a_table[..., 0], a_table[..., 1]])
    assert np.array_equal(b_loaded, b_grid[b_table[..., 0], b_table[..., 1]])
    result = c.cpu().numpy().view(np.float32).reshape(_THREADS, c_size).astype(np.float64)
    expected = (a_exact @ b_exact + c_values)[c_table[..., 0], c_table[..., 1]]
    # Products are exact; the tensor core adds 16 of them (|a b| <= 4) and the accumulator in
    # its own order, truncating alignment bits: a few float32 ulps of 2^7 per k step.
    np.testing.assert_allclose(result, expected, rtol=0, atol=1e-3)


def _stmatrix_harness() -> tuple[str, StmatrixPlan, int]:
    """A kernel of one warpgroup storing its m64n64 wgmma accumulator codes (thread t's word
    w from ``words[t * 32 + w]``) into the swizzled C^T staging tile by the emitted stmatrix
    plan, then copying the tile out (0xFFFF where nothing was written); the plan; the tile's
    size."""
    layout = wgmma_fragment("d", 64).layout
    plan = plan_stmatrix(staging_layout(64, 64, 16), layout, dtypes.f16)
    words, size = layout.local_size // 2, 64 * 64
    source = (
        STMATRIX_SOURCE
        + f"""
extern "C" __global__ void __launch_bounds__(128) stmatrix_harness(
    const unsigned int* words, unsigned short* out)
{{
    __shared__ __align__(16) unsigned short tile[{size}];
    const int tid = threadIdx.x;
    for (int e = tid; e < {size}; e += 128) {{
        tile[e] = 0xFFFF;
    }}
    __syncthreads();
    unsigned int r[{words}];
    for (int i = 0; i < {words}; ++i) {{
        r[i] = words[tid * {words} + i];
    }}
{emit_stmatrix(plan, "tile", "r", "tid")}
    __syncthreads();
    for (int e = tid; e < {size}; e += 128) {{
        out[e] = tile[e];
    }}
}}
"""
    )
    return source, plan, size


def test_emitted_stmatrix_compiles_with_nvrtc() -> None:
    source = _stmatrix_harness()[0]
    assert cubin_kernels(compile_cuda(source, "sm_90a").cubin) == ("stmatrix_harness",)


@pytest.mark.gpu
def test_gpu_stmatrix_writes_the_layouts_offsets() -> None:
    """On the GPU, the emitted transposed x4 stmatrix writes each register's two codes where
    the shared layout puts those elements, bit for bit, and nothing else."""
    torch = pytest.importorskip("torch")
    from backend.kernel import KernelArrayParam, build_kernel

    source, plan, size = _stmatrix_harness()
    layout = plan.register_layout
    params = (
        KernelArrayParam("words", 32, 128 * layout.local_size // 2),
        KernelArrayParam("out", 16, size),
    )
    kernel = build_kernel(source, "stmatrix_harness", params, block_threads=128)
    codes = np.arange(128 * layout.local_size, dtype=np.uint32).astype(np.uint16)
    words = torch.from_numpy(codes.view(np.int32).copy()).to("cuda")
    out = torch.zeros(size, dtype=torch.int16, device="cuda")
    kernel(words, out, grid=1)
    written = out.cpu().numpy().view(np.uint16).astype(np.int64)
    expected = _generic_image(plan.shared_layout, layout, size)
    assert np.array_equal(np.where(written == 0xFFFF, -1, written), expected)

"""Lowering details as literal checks on the emitted source and on the recorded accesses.

Vector widths chosen for each element width, alignment and stride; masks and their absence; the
sub-byte atomic path; replica guards; shuffles versus shared scratch in reductions; cp.async;
swizzled addresses; the launch signature; the helpers of `backend.lower` and
`backend.cuda_codegen`; and the errors. The generated code is executed in
test_lower_emulated.py and compiled in test_compile.py.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings

from backend.cuda_codegen import CodeWriter, pack_expression, unpack_expressions
from backend.errors import CompilationError
from backend.kernel import KernelArrayParam, KernelIntParam
from backend.lower import lower
from backend.lower.context import is_wide, local_index_expression, primary_condition
from backend.lower.memory import default_copy_layout
from backend.tensor_core import mma_operand_layouts
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.examples.vector_add import vector_add
from ir.instructions import CopyAsync, LoadGlobal, LoadShared, StoreGlobal, StoreShared
from ir.program import Program
from ir.specialize import specialize
from ir.testing import program_cases
from layout_algebra import (
    GlobalLayout,
    RegisterLayout,
    SharedLayout,
    local,
    replicate,
    shared_column_major,
    shared_row_major,
    shared_row_major_swizzle,
    spatial,
    var,
)
from layout_algebra.register import pad_layout

THREAD = var("la_thread", 0, 127)


def _copy_program(
    dtype: DataType,
    layout: RegisterLayout,
    stride: object = None,
    column_scale: int | None = None,
) -> Program:
    """Load a (rows, columns) tile of `dtype` with `layout` and store it back, in a view of
    rows of `stride(chunks)` elements (default: rows of the tile's columns, or of 4096 when the
    tile sits at column ``block_x * column_scale``)."""
    rows, columns = layout.shape
    with ProgramBuilder("copy", layout.num_threads) as b:
        m = b.int_param("m")
        chunks = b.int_param("chunks")
        x, y = b.array_param("x", dtype), b.array_param("y", dtype)
        row = columns if column_scale is None else 4096
        row_stride = row if stride is None else stride(chunks)
        view = GlobalLayout((m, row), (row_stride, 1))
        origin = [0, 0 if column_scale is None else b.block_x * column_scale]
        tile = b.load_global(b.global_view(x, dtype, view), origin, layout)
        b.store_global(b.global_view(y, dtype, view), tile, origin)
    return b.program()


def _width(program: Program, kind: type) -> int:
    """The vector width of the accesses of the `kind` instruction (the widest: element
    accesses are the fallback of vectors not wholly in bounds)."""
    kernel = lower(program)
    return max(a.width for a in kernel.accesses if isinstance(a.instruction, kind))


# ------------------------------------------------------------------------------ vector widths


@pytest.mark.parametrize(
    ("dtype", "layout", "width"),
    [
        (dtypes.f16, spatial(32, 1).local(1, 8), 8),  # 16 bytes
        (dtypes.f32, spatial(32, 1).local(1, 8), 4),  # 16 bytes: two vectors
        (dtypes.f16, spatial(32, 1).local(1, 2), 2),  # 4 bytes, all a thread has
        (dtypes.u4, spatial(32, 1).local(1, 8), 8),  # 4 bytes of eight 4-bit codes
        (dtypes.u4, spatial(32, 1).local(1, 2), 2),  # one byte
        (dtypes.u1, spatial(32, 1).local(1, 16), 16),  # two bytes of bits
        (dtypes.f6e3m2, spatial(32, 1).local(1, 4), 1),  # 3 bytes: no power-of-two vector
        (dtypes.i3, spatial(32, 1).local(1, 8), 1),  # 3 bytes
        (dtypes.f16, spatial(32, 1).local(2, 8), 8),  # two rows: a vector per row
        (dtypes.f16, local(8, 1).spatial(1, 32), 1),  # a thread's registers 32 apart
    ],
)
def test_vector_width_table(dtype: DataType, layout: RegisterLayout, width: int) -> None:
    program = _copy_program(dtype, layout)
    assert _width(program, LoadGlobal) == width
    assert _width(program, StoreGlobal) == width


@pytest.mark.parametrize(
    ("stride", "column_scale", "width"),
    [
        (lambda chunks: chunks * 8, None, 8),  # a row stride known to be a multiple of 8
        (lambda chunks: chunks * 4, None, 4),  # only of 4: 8-byte vectors
        (lambda chunks: chunks, None, 1),  # nothing known about the stride: element by element
        (None, 1000, 8),  # the tile at a multiple of 1000 columns: 16-byte aligned
        (None, 6, 2),  # at a multiple of 6 columns: 4-byte aligned
        (None, 4, 4),  # at a multiple of 4 columns: 8-byte aligned
    ],
)
def test_vector_width_follows_stride_and_origin_divisibility(
    stride: object, column_scale: int | None, width: int
) -> None:
    program = _copy_program(dtypes.f16, spatial(32, 1).local(1, 8), stride, column_scale)
    assert _width(program, LoadGlobal) == width


def test_vector_add_source_has_a_16_byte_load_under_a_tail_mask() -> None:
    source = lower(vector_add()).source
    assert "if (la_w_block_x * 1024 + la_thread * 8 + 7 < n) {" in source
    assert (
        "const uint4 la_v1 = *(const uint4*)(g0 + (la_w_block_x * 2048 + la_thread * 16));"
        in source
    )
    # A thread's eight f16 elements are four words: the vector's words as they are.
    assert "r0[0] = la_v1.x;" in source and "r0[3] = la_v1.w;" in source
    # The tail: element by element into the high half of word 3, each under its own check.
    assert (
        "r0[3] = (r0[3] & 0xFFFFu) | ((la_u32)((la_w_block_x * 1024 + la_thread * 8 + 7 "
        "< n ? (la_u32)((const unsigned short*)g0)[la_w_block_x * 1024 + la_thread * 8 "
        "+ 7] : 0u)) << 16);" in source
    )
    assert "*(uint4*)(g2 + (la_w_block_x * 2048 + la_thread * 16)) = make_uint4(" in source


def test_vector_add_accesses_table() -> None:
    accesses = lower(vector_add()).accesses
    first = accesses[0]
    assert (first.local_index, first.width, first.unit_bits) == (0, 8, 8)
    assert repr(first.expr) == "block_x * 2048 + la_thread * 16"
    assert repr(first.mask) == "block_x * 1024 + la_thread * 8 + 7 < n"
    second = accesses[1]
    assert (second.local_index, second.width, second.unit_bits) == (0, 1, 16)
    assert repr(second.expr) == "block_x * 1024 + la_thread * 8"
    # Per load or store: one vector access and its eight-element fallback.
    assert len(accesses) == 3 * 9


def test_tile_inside_a_concrete_tensor_has_no_mask() -> None:
    with ProgramBuilder("inside", 32) as b:
        x = b.array_param("x", dtypes.f16)
        view = b.global_view(x, dtypes.f16, GlobalLayout((64, 64), (64, 1)))
        b.store_global(view, b.load_global(view, [32, 0], spatial(32, 1).local(1, 8)), [32, 0])
    kernel = lower(b.program())
    assert all(repr(a.mask) == "1" for a in kernel.accesses)
    assert "if (" not in kernel.source.split("__launch_bounds__")[1]


def test_tile_outside_a_concrete_tensor_is_zero_and_unstored() -> None:
    with ProgramBuilder("outside", 32) as b:
        x = b.array_param("x", dtypes.f16)
        view = b.global_view(x, dtypes.f16, GlobalLayout((64, 64), (64, 1)))
        b.store_global(view, b.load_global(view, [64, 0], spatial(32, 1).local(1, 8)), [64, 0])
    kernel = lower(b.program())
    assert kernel.accesses == ()
    assert "r0[3] = (r0[3] & 0xFFFFu) | ((la_u32)(0u) << 16);" in kernel.source


# --------------------------------------------------------------------- sub-byte and replicas


def test_sub_byte_elements_sharing_bytes_are_stored_with_atomics() -> None:
    with ProgramBuilder("nibbles", 64) as b:
        x, y = b.array_param("x", dtypes.u4), b.array_param("y", dtypes.u4)
        layout = GlobalLayout((64,), (1,))
        tile = b.load_global(b.global_view(x, dtypes.u4, layout), [0], spatial(64))
        b.store_global(b.global_view(y, dtypes.u4, layout), tile, [0])
    source = lower(b.program()).source
    assert "r0[0] = (r0[0] & 0xFFFFFFF0u) | (la_u32)(la_load_bits(g0, la_thread * 4, 4));" in source
    assert "la_store_bits(g1, la_thread * 4, (r0[0] & 0xFu), 4);" in source


def test_replicated_store_is_guarded_by_the_primary_replica() -> None:
    with ProgramBuilder("replicas", 64) as b:
        x, y = b.array_param("x", dtypes.f32), b.array_param("y", dtypes.f32)
        layout = GlobalLayout((32,), (1,))
        tile = b.load_global(b.global_view(x, dtypes.f32, layout), [0], replicate(2) * spatial(32))
        b.store_global(b.global_view(y, dtypes.f32, layout), tile, [0])
    source = lower(b.program()).source
    assert "if (la_thread >> 5 == 0) {" in source


@pytest.mark.parametrize(
    ("layout", "condition"),
    [
        (replicate(2) * spatial(32), "(la_thread // 32).eq(0)"),
        (spatial(4) * replicate(8), "(la_thread % 8).eq(0)"),
        (spatial(2) * replicate(4) * spatial(4), "((la_thread // 4) % 4).eq(0)"),
    ],
)
def test_primary_condition_table(layout: RegisterLayout, condition: str) -> None:
    thread = var("la_thread", 0, layout.num_threads - 1)
    assert repr(primary_condition(layout, thread)) == condition


def test_primary_condition_without_replication_is_none() -> None:
    assert primary_condition(spatial(4).local(2), var("la_thread", 0, 3)) is None


# ------------------------------------------------------------------------------- reductions


def _reduce_program(layout: RegisterLayout, dim: int) -> Program:
    with ProgramBuilder("reduce", layout.num_threads) as b:
        x, y = b.array_param("x", dtypes.f32), b.array_param("y", dtypes.f32)
        rows, columns = layout.shape
        tile = b.load_global(
            b.global_view(x, dtypes.f32, GlobalLayout(layout.shape, (columns, 1))), [0, 0], layout
        )
        result = b.reduce(tile, dim, "sum", keepdim=True)
        shape = (1, columns) if dim == 0 else (rows, 1)
        b.store_global(
            b.global_view(y, dtypes.f32, GlobalLayout(shape, (shape[1], 1))), result, [0, 0]
        )
    return b.program()


def test_reduction_over_lanes_uses_shuffles_in_digit_order() -> None:
    kernel = lower(_reduce_program(spatial(4, 32).local(1, 2), 1))
    assert kernel.shared_bytes == 0
    source = kernel.source
    assert "__syncthreads" not in source
    assert "const float la_s4_0_31 = __shfl_sync(la_warp_mask, la_p2[0], la_lane3 + 31);" in source
    assert "la_p2[0] = la_fadd(la_fadd(" in source


def test_reduction_across_warps_goes_through_shared_scratch() -> None:
    kernel = lower(_reduce_program(spatial(2, 64).local(2, 2), 0))
    assert kernel.shared_bytes == 4 * 2 * 128
    source = kernel.source
    assert "float* const la_scratch4 = (float*)(la_smem + 0);" in source
    assert "la_p3[0] = la_fadd(la_p3[0], la_scratch4[0 + la_base5 + 64]);" in source
    assert source.count("__syncthreads();") == 2


def test_a_reduction_of_lone_elements_still_makes_its_nan_positive() -> None:
    """Over a dimension of one element each thread has nothing to combine: the element goes
    through ``la_arithmetic_nan`` (a reduction's NaN is the positive quiet one, not the
    element's), where a dimension of two combines by ``la_fadd`` and needs no wrapper."""
    lone = lower(_reduce_program(spatial(32, 1).local(1, 1), 1)).source
    assert "la_p1[0] = la_arithmetic_nan(la_bits_to_float(r0[0]));" in lone
    pair = lower(_reduce_program(spatial(32, 1).local(1, 2), 1)).source
    assert "la_arithmetic_nan" not in pair.split("reduce_sum(")[1]
    assert "la_p2[0] = la_fadd(la_p2[0], la_bits_to_float(r0[1]));" in pair


# --------------------------------------------------------------------- shared memory, copies


def test_aligned_copy_async_uses_16_byte_cp_async() -> None:
    with ProgramBuilder("stage", 128) as b:
        chunks = b.int_param("chunks")
        x = b.array_param("x", dtypes.f16)
        view = b.global_view(x, dtypes.f16, GlobalLayout((64, chunks * 8), (chunks * 8, 1)))
        buffer = b.shared_tensor(dtypes.f16, shared_row_major_swizzle(64, 64, element_bits=16))
        b.copy_async(buffer, view, [0, b.block_x * 64])
        b.copy_async_commit()
        b.copy_async_wait(0)
    kernel = lower(b.program())
    assert kernel.shared_bytes == 64 * 64 * 2
    source = kernel.source
    assert "la_cp_async_16(s0 + (" in source
    assert " ^ " in source  # the swizzle, printed as an XOR
    assert "la_cp_async_commit();" in source
    assert "la_cp_async_wait<0>();" in source


def test_copy_async_at_the_tensor_end_zero_fills_with_src_size() -> None:
    with ProgramBuilder("edge", 32) as b:
        n, chunks = b.int_param("n"), b.int_param("chunks")
        x = b.array_param("x", dtypes.f16)
        view = b.global_view(x, dtypes.f16, GlobalLayout((8, n), (chunks * 8, 1)))
        buffer = b.shared_tensor(dtypes.f16, shared_row_major(8, 32))
        b.copy_async(buffer, view, [0, b.block_x * 32])
    kernel = lower(b.program())
    source = kernel.source
    assert "if (la_w_block_x * 32 + (la_thread & 3) * 8 + 7 < n) {" in source
    assert "la_cp_async_16(s0 + (la_thread * 16), g0 + (" in source
    assert "la_cp_async_zfill_16(s0 + (la_thread * 16), (la_count1 > 0 ? g0 + (" in source
    (filled,) = [a for a in kernel.accesses if a.count is not None]
    assert repr(filled.count) == ("maximum(0, minimum(8, n - block_x * 32 - (la_thread % 4) * 8))")


def test_unaligned_copy_async_copies_synchronously() -> None:
    with ProgramBuilder("stage", 32) as b:
        columns = b.int_param("columns")
        x = b.array_param("x", dtypes.f16)
        view = b.global_view(x, dtypes.f16, GlobalLayout((8, columns), (columns, 1)))
        buffer = b.shared_tensor(dtypes.f16, shared_row_major(8, 32))
        b.copy_async(buffer, view, [0, 0])
    source = lower(b.program()).source
    assert "la_cp_async_" not in source.split("__launch_bounds__")[1]
    assert "((unsigned short*)s0)[" in source


@pytest.mark.parametrize(
    ("shape", "bits", "threads", "layout"),
    [
        ((64, 32), 16, 128, "local(2,1).spatial(32,4).local(1,8)"),
        ((3, 5), 8, 32, "local(3,5).replicate(32)"),
        ((8, 64), 4, 64, "replicate(4).spatial(8,2).local(1,32)"),
        ((4, 6), 6, 8, "local(3).spatial(4,2)"),
    ],
)
def test_default_copy_layout_table(
    shape: tuple[int, ...], bits: int, threads: int, layout: str
) -> None:
    assert repr(default_copy_layout(shape, bits, threads)) == layout


# ----------------------------------------------------------------------------- tensor cores


def _tensor_core_program() -> Program:
    """A 64 x 64 x 16 dot in the mma layouts of 4 warps, fed from swizzled shared tiles."""
    a_layout, b_layout, c_layout = mma_operand_layouts(2, 2, 64, 64, 16)
    with ProgramBuilder("mma", 128) as b:
        x = b.array_param("x", dtypes.f16)
        x_shared = b.shared_tensor(dtypes.f16, shared_row_major_swizzle(64, 16, element_bits=16))
        w_shared = b.shared_tensor(dtypes.f16, shared_row_major_swizzle(16, 64, element_bits=16))
        total = b.register_tensor(dtypes.f32, c_layout, 0.0)
        product = b.dot(b.load_shared(x_shared, a_layout), b.load_shared(w_shared, b_layout), total)
        b.store_global(
            b.global_view(x, dtypes.f32, GlobalLayout((64, 64), (64, 1))), product, [0, 0]
        )
    return b.program()


def test_tensor_cores_are_used_from_sm_80_on() -> None:
    kernel = lower(_tensor_core_program(), "sm_90a")
    assert [type(plan).__name__ for plan in kernel.plans] == [
        "LdmatrixPlan",
        "LdmatrixPlan",
        "MmaPlan",
    ]
    assert "la_mma_m16n8k16_f16(r3[0], r3[1], r3[2], r3[3], r1[0], r1[1], r1[2], r1[3]" in (
        kernel.source
    )
    assert "la_ldmatrix_x4(la_r0, la_r1, la_r2, la_r3, ((unsigned short*)s0) + (" in kernel.source
    assert "la_ldmatrix_x4_trans(" in kernel.source


def _tile_store_program(layout: RegisterLayout, shared: SharedLayout) -> Program:
    """An f16 tile in `layout`, loaded from global memory and stored to `shared`."""
    rows, cols = layout.shape
    with ProgramBuilder("stage", layout.num_threads) as b:
        x = b.array_param("x", dtypes.f16)
        view = b.global_view(x, dtypes.f16, GlobalLayout((rows, cols), (cols, 1)))
        b.store_shared(b.shared_tensor(dtypes.f16, shared), b.load_global(view, [0, 0], layout))
    return b.program()


@pytest.mark.parametrize(
    ("arch", "shared", "instruction"),
    [
        ("sm_90a", shared_row_major(16, 16), "la_stmatrix_x2("),
        ("sm_90a", shared_column_major(16, 16), "la_stmatrix_x2_trans("),
        ("sm_80", shared_column_major(16, 16), None),
        (None, shared_column_major(16, 16), None),
    ],
)
def test_accumulator_stores_to_shared_memory_use_stmatrix_from_sm_90_on(
    arch: str | None, shared: SharedLayout, instruction: str | None
) -> None:
    """An mma accumulator tile (pairs of C's columns a thread) stored to shared memory: one x2
    stmatrix a warp on sm_90 - plain into row-major C, transposed into column-major C - where
    the generic store writes 4-byte pairs (row-major) or 2-byte elements (column-major)."""
    _, _, c = mma_operand_layouts(1, 2, 16, 16, 16)
    kernel = lower(_tile_store_program(c, shared), arch)
    body = kernel.source.split("__launch_bounds__")[1]
    names = [type(plan).__name__ for plan in kernel.plans]
    if instruction is None:
        assert "StmatrixPlan" not in names
        assert "la_stmatrix" not in body
    else:
        assert names == ["StmatrixPlan"]
        assert body.count(instruction) == 1
        paths = [path.name for step in kernel.report.steps for path in step.paths]
        assert "stmatrix" in paths


def test_stmatrix_is_not_taken_where_it_saves_nothing_or_threads_share_elements() -> None:
    """A lone 8 x 8 matrix (one x1 stmatrix, or one 4-byte store a thread: no saving) and an
    accumulator tile held by two warps (two threads an element, which the generic store
    writes from one of them) keep the generic store."""
    lone = spatial(8, 4).local(1, 2)
    assert lower(_tile_store_program(lone, shared_row_major(8, 8)), "sm_90a").plans == ()
    _, _, c = mma_operand_layouts(1, 1, 16, 8, 16)
    replicated = replicate(2) * c
    kernel = lower(_tile_store_program(replicated, shared_column_major(16, 8)), "sm_90a")
    assert kernel.plans == ()
    assert "if (" in kernel.source.split("store_shared")[1]


@pytest.mark.parametrize("arch", [None, "sm_75"])
def test_without_tensor_cores_a_warp_collective_dot_is_staged_through_shared_memory(
    arch: str | None,
) -> None:
    kernel = lower(_tensor_core_program(), arch)
    assert kernel.plans == ()
    assert "la_mma" not in kernel.source.split("__launch_bounds__")[1]
    assert "float* const la_sa9 = (float*)(la_smem + 4096);" in kernel.source
    assert kernel.shared_bytes == 2 * 64 * 16 * 2 + 4 * (64 * 16 + 16 * 64)


def test_declared_divisors_give_vector_accesses_in_the_quantized_matmul() -> None:
    from ir.examples.quantized_matmul import quantized_matmul

    kernel = lower(quantized_matmul(dtypes.i4, 128, tensor_cores=True), "sm_90a")
    ints = {p.name: p.multiple_of for p in kernel.params if isinstance(p, KernelIntParam)}
    assert ints == {"m": 1, "n": 8, "k": 8}
    a_copy = (
        "la_cp_async_16(s0 + (la_thread * 16), g0 + ((la_w_block_y * 64 + (la_thread >> 2))"
        " * k * 2 + la_w_k0 * 64 + (la_thread & 3) * 16));"
    )
    assert a_copy in kernel.source
    weight_load = (
        "const unsigned int la_v3 = *(const unsigned int*)(g1 + ((long long)(k0 * 32 + "
        "(la_thread >> 3)) * (n >> 1) + la_w_block_x * 32 + (la_thread & 7) * 4));"
    )
    assert weight_load in kernel.source
    global_copies = [
        access
        for access in kernel.accesses
        if isinstance(access.instruction, CopyAsync) and isinstance(access.memory, GlobalLayout)
    ]
    assert {access.width for access in global_copies} == {8}
    assert all((var("k", 0, 2**31 - 1) % 8).eq(0) in a.assumptions for a in global_copies)


def test_without_a_divisor_the_activation_rows_copy_element_by_element() -> None:
    with ProgramBuilder("rows", 32) as b:
        k = b.int_param("k")
        a = b.array_param("a", dtypes.f16)
        view = b.global_view(a, dtypes.f16, GlobalLayout((4, k), (k, 1)))
        b.copy_async(b.shared_tensor(dtypes.f16, shared_row_major(4, 64)), view, [0, 0])
    kernel = lower(b.program())
    assert {access.width for access in kernel.accesses} == {1}
    assert "la_cp_async" not in kernel.source.split("__launch_bounds__")[1]


def test_thread_local_dot_stays_simt() -> None:
    from ir.examples.matmul import matmul

    kernel = lower(matmul(), "sm_90a")
    assert not any(type(plan).__name__ == "MmaPlan" for plan in kernel.plans)
    assert "= la_fadd(la_acc" in kernel.source


# ------------------------------------------------------------------------------- signature


def test_vector_add_signature() -> None:
    kernel = lower(vector_add())
    assert kernel.entry == "vector_add"
    assert kernel.block_threads == 128
    n = var("n", 0, 2**31 - 1)
    assert kernel.params == (
        KernelIntParam("n", 32, True, 0, 2**31 - 1),
        KernelArrayParam("x", 16, n, dtype=dtypes.f16),
        KernelArrayParam("y", 16, n, dtype=dtypes.f16),
        KernelArrayParam("z", 16, n, dtype=dtypes.f16),
    )
    assert 'extern "C" __global__ void __launch_bounds__(128) vector_add(' in kernel.source
    assert "--fmad=false" in kernel.options


def test_array_size_is_the_largest_view() -> None:
    with ProgramBuilder("views", 32) as b:
        n = b.int_param("n")
        x = b.array_param("x", dtypes.u4)
        b.global_view(x, dtypes.u4, GlobalLayout((n,), (1,)))
        b.global_view(x, dtypes.u8, GlobalLayout((n, 3), (4, 1)))
    (_, param) = lower(b.program()).params
    assert param.count({"n": 10}) == 2 * (9 * 4 + 3)  # bytes of the u8 view, in nibbles
    assert param.count({"n": 0}) == 0


# -------------------------------------------------------------------------------- helpers


def test_pad_layout_adds_leading_unit_dimensions() -> None:
    padded = pad_layout(spatial(4).local(2), 3)
    assert padded.shape == (1, 1, 8)
    assert padded.map(3, 1) == (0, 0, 7)
    assert pad_layout(spatial(4), 1) == spatial(4)


def test_local_index_expression_of_the_mma_accumulator() -> None:
    layout = local(2, 1).spatial(8, 4).local(1, 2)
    row, column = var("r", 0, 15), var("c", 0, 7)
    index = local_index_expression(layout, [row, column])
    for t in range(layout.num_threads):
        for i in range(layout.local_size):
            r, c = layout.map(t, i)
            assert index.evaluate({"r": r, "c": c}) == i


@pytest.mark.parametrize(
    ("expr", "wide"),
    [
        (THREAD * 8 + 7, False),
        (var("n", 0, 2**31 - 1) + 1, True),
        (var("k", 0, 100) * var("m", 0, 100), False),
        (var("k") * 2, True),
    ],
)
def test_is_wide_table(expr: object, wide: bool) -> None:
    assert is_wide(expr) is wide


def test_code_writer_indents_blocks() -> None:
    writer = CodeWriter()
    with writer.block("if (x)"):
        writer.line("y = 1;")
        with writer.block():
            writer.comment("nested\nbody")
    assert writer.text() == "if (x) {\n    y = 1;\n    {\n        // nested body\n    }\n}\n"


def test_unpack_and_pack_table() -> None:
    assert unpack_expressions("v", 4, 16) == [
        "((la_u32)v & 0xFFFFu)",
        "(((la_u32)v >> 16) & 0xFFFFu)",
    ]
    assert unpack_expressions("v", 8, 32) == ["v.x", "v.y"]
    assert unpack_expressions("v", 1, 4) == ["((la_u32)v & 0xFu)", "(((la_u32)v >> 4) & 0xFu)"]
    assert pack_expression(["a", "b"], 1, 4) == "(unsigned char)((la_u32)a | ((la_u32)b << 4))"
    assert pack_expression(["a", "b"], 8, 32) == "make_uint2((la_u32)a, (la_u32)b)"


# --------------------------------------------------------------------------------- errors


def test_reserved_parameter_name_is_refused() -> None:
    with ProgramBuilder("copy", 32) as b:
        b.int_param("la_count")
    with pytest.raises(CompilationError, match="parameter name 'la_count'.*reserves"):
        lower(b.program())


def test_reserved_program_name_is_refused() -> None:
    with ProgramBuilder("la_kernel", 32) as b:
        b.int_param("n")
    with pytest.raises(CompilationError, match="program name 'la_kernel'"):
        lower(b.program())


def test_view_sized_by_a_loop_variable_is_refused() -> None:
    with ProgramBuilder("loop_view", 32) as b:
        x = b.array_param("x", dtypes.f32)
        with b.for_range(4) as k:
            b.global_view(x, dtypes.f32, GlobalLayout((k + 1,), (1,)))
    with pytest.raises(CompilationError, match=r"view g0 read \['k0'\]"):
        lower(b.program())


def test_int_parameter_wider_than_a_c_int_is_refused() -> None:
    with ProgramBuilder("wide", 32) as b:
        b.int_param("n", 0, 2**40)
    with pytest.raises(CompilationError, match=r"int parameter n has bounds \[0, 1099511627776\]"):
        lower(b.program())


def test_ill_formed_program_is_refused_by_the_verifier() -> None:
    with ProgramBuilder("bad", 32, check=False) as b:
        x = b.array_param("x", dtypes.f32)
        view = b.global_view(x, dtypes.f16, GlobalLayout((32,), (1,)))
        tile = b.load_global(view, [0], spatial(32))
        b.store_global(b.global_view(x, dtypes.f32, GlobalLayout((32,), (1,))), tile, [0])
    with pytest.raises(VerificationError, match="dtype mismatch"):
        lower(b.program())


# ----------------------------------------------------------------------------- properties


@settings(max_examples=25)
@given(program_cases())
def test_every_register_of_a_memory_access_is_addressed(case: object) -> None:
    kernel = lower(case.program, constants=case.constants)
    moved: dict[int, list[int]] = {}
    instructions = {}
    for access in kernel.accesses:
        instructions[id(access.instruction)] = access.instruction
        moved.setdefault(id(access.instruction), []).extend(
            range(access.local_index, access.local_index + access.width)
        )
        assert access.width * access.element_bits <= 128
    if case.constants:
        # A constant shape can put a register outside the tensor for every thread: it is then
        # zero (a load) or skipped (a store) without an address (see the test above).
        return
    for key, registers in moved.items():
        instruction = instructions[key]
        if isinstance(instruction, (LoadGlobal, LoadShared)):
            size = instruction.out.layout.local_size
        elif isinstance(instruction, (StoreGlobal, StoreShared)):
            size = instruction.src.layout.local_size
        else:
            continue
        assert set(registers) == set(range(size))


# ------------------------------------------------------------------ element stores, paired casts


def _column_major_store(n: int | None) -> str:
    """The source of a program that casts an f32 (16, 32) tile to f16 and stores it into a
    column-major view, rows `n` apart (a thread's 2 x 2 elements: consecutive registers `n`
    elements apart, so stored one by one); `n` a compile-time constant, or a runtime int."""
    with ProgramBuilder("column_store", 128) as b:
        stride = b.int_param("n", lo=16, constant=n is not None)
        x, y = b.array_param("x", dtypes.f32), b.array_param("y", dtypes.f16)
        source = b.global_view(x, dtypes.f32, GlobalLayout((16, 32), (32, 1)))
        values = b.load_global(source, [0, 0], spatial(8, 16).local(2, 2))
        columns = b.global_view(y, dtypes.f16, GlobalLayout((16, 32), (1, stride)))
        b.store_global(columns, b.cast(values, dtypes.f16), [0, 0])
    program = b.program()
    if n is not None:
        program = specialize(program, {"n": n})
    return lower(program, "sm_90a").source.split('extern "C"')[1]


def test_element_stores_go_through_one_base_pointer() -> None:
    """With a constant stride, each register's element lies at a constant index from the
    thread's first: one base pointer, then the indices 0, n, 1, n + 1 (element (r, c) of the
    thread's 2 x 2 at r + c n), each store under its own bounds check."""
    source = _column_major_store(48)
    declarations = re.findall(r"unsigned short\* const (la_base\d+) = ", source)
    assert len(declarations) == 1
    indices = re.findall(rf"{declarations[0]}\[(\d+)\] = ", source)
    assert indices == ["0", "48", "1", "49"]


def test_element_stores_of_a_runtime_stride_address_each_element() -> None:
    """A runtime stride leaves the registers' distances symbolic: no base pointer, each
    store its own address."""
    source = _column_major_store(None)
    assert "la_base" not in source
    assert source.count("((unsigned short*)") == 4


def test_f32_to_f16_casts_in_pairs() -> None:
    """An f32 -> f16 cast writes each output word from two values, one paired conversion; an
    odd count keeps the per-element path."""
    source = _column_major_store(48)
    assert source.count("la_encode_f16x2(") == 2
    assert "la_encode_f16(" not in source
    with ProgramBuilder("odd_cast", 32) as b:
        x, y = b.array_param("x", dtypes.f32), b.array_param("y", dtypes.f16)
        layout = spatial(32).local(3)
        values = b.load_global(b.global_view(x, dtypes.f32, GlobalLayout((96,), (1,))), [0], layout)
        b.store_global(
            b.global_view(y, dtypes.f16, GlobalLayout((96,), (1,))), b.cast(values, dtypes.f16), [0]
        )
    odd = lower(b.program(), "sm_90a").source.split('extern "C"')[1]
    assert "la_encode_f16x2(" not in odd and odd.count("la_encode_f16(") == 3

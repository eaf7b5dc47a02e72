"""The verifier: every kind of ill-formed program is rejected with a message naming it."""

from __future__ import annotations

import dataclasses

import pytest

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import VerificationError
from ir.examples.matmul import matmul
from ir.examples.quantized_matmul import quantized_matmul
from ir.examples.softmax import row_softmax
from ir.examples.vector_add import vector_add
from ir.instructions import (
    Binary,
    Cast,
    CopyAsync,
    CopyAsyncWait,
    Dot,
    ForRange,
    GlobalView,
    If,
    LoadShared,
    Reduce,
    SharedTensorAlloc,
    StoreShared,
    Unary,
    Where,
)
from ir.program import Program
from ir.values import ArrayParam, GlobalTensor, RegisterTensor, SharedTensor
from ir.verifier import verify
from layout_algebra.fragments import fragment
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import column_spatial, local, replicate, spatial
from layout_algebra.shared import shared_row_major
from layout_algebra.symbolic import const, var

F16, F32 = dtypes.f16, dtypes.f32


def unchecked(threads: int = 4) -> ProgramBuilder:
    return ProgramBuilder("bad", threads, check=False)


def rejects(builder: ProgramBuilder, message: str, **options: int) -> None:
    with pytest.raises(VerificationError, match=message):
        verify(builder.program(), **options)


@pytest.mark.parametrize(
    "program", [vector_add(), row_softmax(), matmul(), quantized_matmul(dtypes.f6e3m2, 32)]
)
def test_examples_verify(program):
    assert verify(program) is program


def test_thread_count_mismatch():
    b = unchecked(8)
    b.register_tensor(F16, spatial(4))
    rejects(b, "thread count mismatch: result r0 has a layout of 4 threads, the program has 8")


def test_binary_dtype_mismatch_names_the_instruction():
    b = unchecked()
    b.add(b.register_tensor(F16, spatial(4)), b.register_tensor(F32, spatial(4)))
    rejects(b, r"add: dtype mismatch: lhs is f16, rhs is f32\n    in: r2: f16\[4\]")


@pytest.mark.parametrize(("op", "dtype"), [("exp", dtypes.i8), ("invert", F16)])
def test_unary_op_kind_mismatch(op, dtype):
    b = unchecked()
    b.unary(op, b.register_tensor(dtype, spatial(4)))
    rejects(b, f"dtype mismatch: {op} does not apply to {dtype}")


def test_bit_operations_need_integers():
    b = unchecked()
    x = b.register_tensor(F16, spatial(4))
    b.xor(x, x)
    rejects(b, "xor does not apply to f16")


def test_result_shape_must_be_the_broadcast_shape():
    b = unchecked()
    x = b.register_tensor(F16, spatial(4))
    b._emit(Binary("add", RegisterTensor("r9", F16, spatial(4).local(2)), x, x))
    rejects(b, r"shape mismatch: result shape \(8,\), broadcast shape \(4,\)")


def test_a_thread_combining_data_it_does_not_hold():
    b = unchecked(2)
    b.add(b.register_tensor(F16, spatial(2).local(2)), b.register_tensor(F16, local(2).spatial(2)))
    rejects(b, r"thread 0 combines rhs r1 element \(1,\) \(for result element \(1,\)\)")


def test_broadcast_operand_must_be_replicated_where_read():
    b = unchecked()
    tile = b.register_tensor(F16, spatial(2, 2))
    column = b.register_tensor(F16, spatial(2, 1).replicate(2).local(1, 1))
    b.mul(tile, column)
    assert verify(b.program())
    b = unchecked()
    tile = b.register_tensor(F16, spatial(2, 2))
    b.mul(tile, b.register_tensor(F16, (replicate(2) * spatial(2, 1))))
    rejects(b, "thread 1 combines rhs r1 element")


def test_where_needs_a_u1_condition():
    b = unchecked()
    x = b.register_tensor(F16, spatial(4))
    b.where(x, x, x)
    rejects(b, "where: dtype mismatch: cond is f16, expected u1")


def test_cast_reads_only_elements_its_threads_hold():
    b = unchecked()
    x = b.register_tensor(F16, spatial(4))
    b._emit(Cast(RegisterTensor("r5", F32, spatial(2).local(2).replicate(2)), x))
    rejects(
        b,
        r"cast: thread 0 combines operand r0 element \(1,\) \(for result element \(1,\)\) that "
        "it does not hold",
    )


def test_cast_of_another_shape_is_rejected():
    b = unchecked()
    x = b.register_tensor(F16, spatial(4))
    b._emit(Cast(RegisterTensor("r5", F32, spatial(4).local(2)), x))
    rejects(b, r"cast: shape mismatch: operand shape \(4,\), result shape \(8,\)")


def test_cast_may_reorder_each_threads_elements():
    b = ProgramBuilder("reorder", 4)
    x = b.register_tensor(F16, spatial(4).local(2, 3))
    y = b.cast(x, F32, spatial(4).column_local(2, 3))
    assert y.layout == spatial(4).column_local(2, 3)
    verify(b.program())


def test_view_with_unequal_bits_per_thread():
    b = unchecked()
    b.view(b.register_tensor(dtypes.u8, spatial(4).local(3)), dtypes.u4, spatial(4).local(4))
    rejects(b, "unequal bits per thread: r0 holds 3 x 8 = 24 bits per thread, the result 4 x 4")


def test_reduce_layout_and_dim():
    b = unchecked()
    x = b.register_tensor(F32, spatial(2, 2))
    b._emit(Reduce(RegisterTensor("r7", F32, spatial(2).replicate(2)), x, 0, "sum", False))
    rejects(b, "layout mismatch: result layout spatial")
    b = unchecked()
    x = b.register_tensor(F32, spatial(4))
    b._emit(Reduce(RegisterTensor("r7", F32, replicate(4)), x, 3, "sum", False))
    rejects(b, r"dim 3 is not a dimension of r0 \(4,\)")


def dot_operands(b, a_dtype=F16, b_dtype=F16, c_dtype=F32, a_layout=None, k=3):
    a = b.register_tensor(a_dtype, a_layout or (spatial(2, 1) * replicate(2)).local(1, k))
    w = b.register_tensor(b_dtype, (replicate(2) * spatial(1, 2)).local(3, 1))
    c = b.register_tensor(c_dtype, spatial(2, 2))
    return a, w, c


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, None),
        ({"a_dtype": F32, "b_dtype": F32}, "a is f32, expected f16 or bf16"),
        ({"b_dtype": dtypes.bf16}, "dtype mismatch: a is f16, b is bf16"),
        ({"c_dtype": F16}, "dtype mismatch: c is f16, f32 accumulator is f32"),
        ({"k": 2}, r"shape mismatch: a \(2, 2\) @ b \(3, 2\) \+ c \(2, 2\)"),
        # Rows of a replicated over the innermost thread bit: still every thread's own rows.
        ({"a_layout": spatial(2, 1).local(1, 3).replicate(2)}, None),
        # Rows of a on the wrong threads (thread 1 holds row 1, its c elements are in row 0):
        # fine, the 4 threads are one warp and dot gathers within a warp.
        ({"a_layout": replicate(2) * spatial(2, 1).local(1, 3)}, None),
    ],
)
def test_dot_checks(options, message):
    b = unchecked()
    b.dot(*dot_operands(b, **options))
    if message is None:
        assert verify(b.program())
    else:
        rejects(b, message)


def test_dot_operands_spread_over_one_warp_verify():
    # Each of 4 threads holds one element of a, b and c (all spatial(2, 2)); no thread holds a
    # row of a and a column of b, but the warp (all 4 threads) holds everything.
    b = unchecked()
    a, w, c = (b.register_tensor(dtype, spatial(2, 2)) for dtype in (F16, F16, F32))
    b.dot(a, w, c)
    assert verify(b.program())


def test_dot_on_mma_fragments_verifies():
    # One warp, one mma.m16n8k16: a (16, 16), b (16, 8), c (16, 8) in the PTX fragment layouts.
    b = unchecked(32)
    a, w, c = (
        b.register_tensor(dtype, fragment(f"mma.m16n8k16.{role}").layout)
        for dtype, role in ((F16, "a"), (F16, "b"), (F32, "c"))
    )
    b.dot(a, w, c)
    assert verify(b.program())


def test_dot_rejects_a_warp_lacking_an_operand_element():
    # 64 threads: warp w holds c rows 4w .. 4w + 3, but a keeps rows {0, 1, 4, 5} in warp 0 and
    # {2, 3, 6, 7} in warp 1. Thread 16 (warp 0) holds c[2, 0] and no thread of warp 0 holds
    # a[2, 0].
    b = unchecked(64)
    a = b.register_tensor(F16, local(2, 1) * spatial(4, 4).replicate(4))
    w = b.register_tensor(F16, replicate(2) * spatial(4, 8))
    c = b.register_tensor(F32, spatial(2, 1) * spatial(4, 8))
    b.dot(a, w, c)
    rejects(
        b,
        r"dot: warp 0 \(threads 0\.\.31\) combines a r0 element \(2, 0\) \(for c element "
        r"\(2, 0\)\) that none of its threads holds\n"
        r"    in: r3: f32\[8, 8\] spatial\(8,8\) = dot\(r0, r1, r2\)",
    )


def test_dot_rejects_a_partial_warp_lacking_an_operand_element():
    # 48 threads, so warp 1 is threads 32..47. Threads 24..47 hold c row 1 (all 8 columns)
    # and b columns 4..7 only: warp 1 lacks b[:, 0:4] (warp 0 holds them, in threads 0..23).
    b = unchecked(48)
    a = b.register_tensor(F16, replicate(48).local(2, 2))
    w = b.register_tensor(F16, spatial(1, 2).replicate(24).local(2, 4))
    c = b.register_tensor(F32, spatial(2, 1).replicate(24).local(1, 8))
    b.dot(a, w, c)
    rejects(
        b, r"warp 1 \(threads 32\.\.47\) combines b r1 element \(0, 0\) \(for c element \(1, 0\)\)"
    )


def test_assign_needs_equal_dtype_and_layout():
    b = unchecked()
    b.assign(b.register_tensor(F16, spatial(4)), b.register_tensor(F32, spatial(4)))
    rejects(b, "assign: dtype mismatch: destination is f16, source is f32")
    b = unchecked()
    b.assign(
        b.register_tensor(F16, spatial(4)), b.register_tensor(F16, spatial(2).local(2).replicate(2))
    )
    rejects(b, "assign: layout mismatch: destination spatial")


def global_view(b, dtype=F16, shape=(8,)):
    x = b.array_param("x", dtype)
    return b.global_view(x, dtype, GlobalLayout(shape, (1,) * len(shape)))


def test_global_offsets_and_ranks():
    b = unchecked()
    b.load_global(global_view(b), [0, 0], spatial(4))
    rejects(b, "offsets has 2 entries, the memory tensor has rank 1")
    b = unchecked()
    b.load_global(global_view(b), [0], spatial(4, 1))
    rejects(b, r"rank mismatch: register tile r0 \(4, 1\) has more dimensions than global")
    b = unchecked()
    b.store_global(global_view(b), b.register_tensor(F32, spatial(4)), [0])
    rejects(b, "store_global: dtype mismatch: destination is f16, source is f32")


def test_shared_tiles_must_fit():
    b = unchecked()
    s = b.shared_tensor(F16, shared_row_major(4, 4))
    b.load_shared(s, spatial(4).local(2), [0, 3])
    rejects(b, r"the tile \(1, 8\) at offset 3 overruns shared tensor s0 \(4, 4\) in dimension 1")
    b = unchecked()
    s = b.shared_tensor(F16, shared_row_major(4))
    b.store_shared(s, b.register_tensor(F16, spatial(4, 1)))
    rejects(b, "rank mismatch: the tile")


def test_copy_async_checks():
    b = unchecked()
    s = b.shared_tensor(F16, shared_row_major(2, 4))
    b.copy_async(s, global_view(b), [0], layout=spatial(4).local(2))
    rejects(b, r"shape mismatch: the tile \(1, 8\) at offset 0 overruns")
    b = unchecked()
    s = b.shared_tensor(F32, shared_row_major(8))
    b.copy_async(s, global_view(b), [0])
    rejects(b, "copy_async: dtype mismatch: destination is f32, source is f16")
    b = unchecked()
    s = b.shared_tensor(F16, shared_row_major(8))
    b.copy_async(s, global_view(b), [0], layout=spatial(2).local(4))
    rejects(b, "thread count mismatch: the copy layout has 2 threads")


def test_copy_async_wait_count():
    b = unchecked()
    b._emit(CopyAsyncWait(-1))
    rejects(b, "pending must be an int >= 0, got -1")


def test_a_tensor_defined_in_a_loop_is_not_visible_after_it():
    b = unchecked()
    with b.for_range(2):
        inner = b.register_tensor(F16, spatial(4))
    b.neg(inner)
    rejects(b, "neg: r0 is used outside the scope that defines it")


def test_scalars_read_only_visible_variables():
    b = unchecked()
    view = global_view(b)
    with b.for_range(2) as k:
        pass
    b.load_global(view, [k], spatial(4))
    rejects(b, r"scalar k0 reads \['k0'\], which are not parameters")
    b = unchecked()
    b._emit(If(var("mystery"), ()))
    rejects(b, r"reads \['mystery'\]")


def test_global_view_of_a_foreign_parameter():
    b = unchecked()
    b.global_view(ArrayParam("elsewhere", F16), F16, GlobalLayout((4,), (1,)))
    rejects(b, "elsewhere is not a parameter of the program")


def test_a_name_defined_twice():
    b = unchecked()
    b.register_tensor(F16, spatial(4))
    program = b.program()
    twice = dataclasses.replace(program, body=program.body * 2)
    with pytest.raises(VerificationError, match="the name r0 is defined twice"):
        verify(twice)


def test_shared_memory_limit_is_settable():
    b = unchecked()
    b.shared_tensor(dtypes.u4, shared_row_major(100, 20))  # 1000 bytes, 1008 aligned
    b.shared_tensor(F32, shared_row_major(4))  # 16 bytes
    assert verify(b.program(), shared_memory_limit=1024)
    rejects(
        b,
        "shared memory past the limit: the program's shared tensors take 1024 bytes, the "
        "limit is 1023",
        shared_memory_limit=1023,
    )


def test_default_shared_memory_limit_is_227_kib():
    b = unchecked()
    b.shared_tensor(F16, shared_row_major(227 * 512 + 1))
    rejects(b, "limit is 232448")


def test_not_a_program_or_instruction():
    with pytest.raises(VerificationError, match="verify expects a Program"):
        verify("program")
    bogus = Program("bad", 4, (), ("nop",))
    with pytest.raises(VerificationError, match="not an instruction of the tile IR: 'nop'"):
        verify(bogus)


def test_parameter_names_must_be_unique_in_a_program():
    x = ArrayParam("x", F16)
    with pytest.raises(VerificationError, match="parameter name x is used twice"):
        verify(Program("bad", 4, (x, ArrayParam("x", F32)), ()))


X4 = RegisterTensor("x", F16, spatial(4))
C4 = RegisterTensor("c", F32, spatial(4))
PARAM = ArrayParam("p", F16)
VIEW = GlobalTensor("g", F16, GlobalLayout((8,), (1,)), PARAM)
SHARED = SharedTensor("s", F16, shared_row_major(8))


def out(dtype=F16, layout=None, name="o"):
    return RegisterTensor(name, dtype, layout or spatial(4))


@pytest.mark.parametrize(
    ("instruction", "message"),
    [
        (Unary("neg", out(), "x"), "operand must be a RegisterTensor, got 'x'"),
        (Unary("neg", out(), RegisterTensor("y", "f16", spatial(4))), "has dtype 'f16'"),
        (Unary("neg", out(), RegisterTensor("y", F16, "L")), "has layout 'L'"),
        (Unary("cube", out(), X4), "unknown unary op 'cube'"),
        (Unary("neg", out(F32), X4), "dtype mismatch: operand is f16, result is f32"),
        (Unary("neg", out(layout=local(4).replicate(4)), X4), "layout mismatch: the result"),
        (Binary("pow", out(), X4, X4), "unknown binary op 'pow'"),
        (Binary("lt", out(), X4, X4), "dtype mismatch: expected result is u1, result is f16"),
        (
            Where(
                out(),
                RegisterTensor("k", dtypes.u1, spatial(4)),
                X4,
                out(layout=spatial(2).local(3).replicate(2), name="y"),
            ),
            r"shape mismatch: cond \(4,\), x \(4,\), y \(6,\) do not broadcast",
        ),
        (Reduce(out(layout=replicate(4)), X4, 0, "mean", False), "unknown reduction 'mean'"),
        (Reduce(out(F32, replicate(4)), X4, 0, "sum", False), "operand is f16, result is f32"),
        (
            Dot(out(F32), RegisterTensor("a", F16, spatial(4)), X4, C4),
            r"rank mismatch: a \(4,\), b \(4,\), c \(4,\)",
        ),
        (
            Dot(
                out(F32, spatial(2, 2)),
                RegisterTensor("a", F16, spatial(2, 1).replicate(2)),
                RegisterTensor("b", F16, replicate(2) * spatial(1, 2)),
                RegisterTensor("c2", F32, column_spatial(2, 2)),
            ),
            "layout mismatch: the result layout differs from c's",
        ),
        (SharedTensorAlloc(SharedTensor("s", "f16", shared_row_major(4))), "dtype 'f16' is not"),
        (SharedTensorAlloc(SharedTensor("s", F16, "row major")), "must be a SharedTensor with a"),
        (GlobalView(VIEW, ArrayParam("q", F16)), "is not the view's array parameter"),
        (GlobalView(GlobalTensor("g", "f16", GlobalLayout((8,), (1,)), PARAM), PARAM), "dtype"),
        (LoadShared(out(dtypes.u8), SHARED, (const(0),)), "source is f16, result is u8"),
        (LoadShared(out(), SHARED, [const(0)]), "offsets must be a tuple of Exprs"),
        (StoreShared(SHARED, X4, ()), "offsets has 0 entries, the memory tensor has rank 1"),
        (
            CopyAsync(SHARED, VIEW, (), (const(0),), (8,), None),
            "src_offsets has 0 entries",
        ),
        (
            CopyAsync(SHARED, VIEW, (const(0),), (const(0),), (8,), "auto"),
            "layout must be a RegisterLayout or None, got 'auto'",
        ),
        (
            CopyAsync(SHARED, VIEW, (const(0),), (const(0),), (1, 8), None),
            r"rank mismatch: the tile \(1, 8\) has rank 2, the source 1",
        ),
        (
            CopyAsync(SHARED, VIEW, (const(0),), (const(0),), (8,), spatial(4)),
            r"shape mismatch: layout \(4,\), tile \(8,\)",
        ),
        (ForRange(var("i"), const(0), const(4), 0, ()), "step must be a positive int, got 0"),
        (ForRange(var("i"), 0, const(4), 1, ()), "the loop variable and bounds must be Exprs"),
        (If(True, ()), "the condition must be an Expr, got True"),
    ],
)
def test_malformed_instructions(instruction, message):
    program = Program("bad", 4, (PARAM,), (instruction,))
    with pytest.raises(VerificationError, match=message):
        verify(program)


def test_a_parameter_that_is_not_a_parameter():
    with pytest.raises(VerificationError, match="parameter 'n' is not an IntParam or ArrayParam"):
        verify(Program("bad", 4, ("n",), ()))

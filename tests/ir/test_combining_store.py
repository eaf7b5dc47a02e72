"""Combining stores, ``store_global(..., combine="add")``: what the interpreter adds, in tables,
properties and refusals.

A combining store adds each element of its tile once (replicas once) to memory, atomically and in
no fixed order; the interpreter adds in thread order, block after block, each add rounded into
the type as the GPU's ``red.global.add`` rounds it (f32 flushing subnormals, f16 and bf16 keeping
them, a NaN positive).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.interpreter import run_reference
from ir.printer import format_instruction
from ir.verifier import verify
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import replicate, spatial


def rows_into_one(dtype: DataType, blocks: int, width: int = 4, copies: int = 2):
    """Block x adds row x of `src` (blocks, width) into `out` (width,), through a layout of
    `width` threads replicated `copies` times."""
    with ProgramBuilder("rows_into_one", width * copies) as b:
        src = b.global_view(
            b.array_param("src", dtype), dtype, GlobalLayout((blocks, width), (width, 1))
        )
        out = b.global_view(
            b.array_param("out", dtype), dtype, GlobalLayout((1, width), (width, 1))
        )
        layout = spatial(1, width) * replicate(copies)
        b.store_global(out, b.load_global(src, [b.block_x, 0], layout), [0, 0], combine="add")
    return b.program()


def all_into_one(dtype: DataType, threads: int):
    """Every thread adds its element of `src` (threads,) into element 0 of `out`, through a
    view of stride 0."""
    with ProgramBuilder("all_into_one", threads) as b:
        src = b.global_view(b.array_param("src", dtype), dtype, GlobalLayout((threads,), (1,)))
        out = b.global_view(b.array_param("out", dtype), dtype, GlobalLayout((threads,), (0,)))
        b.store_global(out, b.load_global(src, [0], spatial(threads)), [0], combine="add")
    return b.program()


def add_codes(dtype: DataType, initial: list[int], addends: list[int]) -> list[int]:
    """The codes of `out` after one block adds `addends` (codes) to `initial` elementwise."""
    program = rows_into_one(dtype, 1, width=len(initial), copies=1)
    out = dtypes.pack(np.array(initial), dtype)
    run_reference(program, dtypes.pack(np.array(addends), dtype), out)
    return [int(c) for c in dtypes.unpack(out, dtype, len(initial))]


def test_three_blocks_add_their_rows_replicas_once():
    src = np.arange(12, dtype=np.int32)
    out = np.full(4, 100, dtype=np.int32)
    run_reference(rows_into_one(dtypes.i32, 3), src, out, grid=3)
    np.testing.assert_array_equal(out, [112, 115, 118, 121])


def test_i32_adds_wrap():
    out = np.array([2**31 - 1, -(2**31), 5], dtype=np.int32)
    run_reference(rows_into_one(dtypes.i32, 1, 3, 1), np.array([1, -1, -7], np.int32), out)
    np.testing.assert_array_equal(out, [-(2**31), 2**31 - 1, -2])


def test_each_add_rounds_in_turn():
    """f16 2048 + 1 is a tie that rounds to 2048 (even); two adds of 1 in turn leave 2048,
    where their sum of 2 would make 2050."""
    ones = dtypes.f16.encode(np.array([2048.0, 1.0, 1.0], dtype=np.float32))
    out = dtypes.pack(ones[:1], dtypes.f16)
    run_reference(all_into_one(dtypes.f16, 2), dtypes.pack(ones[1:], dtypes.f16), out)
    assert dtypes.f16.decode(dtypes.unpack(out, dtypes.f16, 1))[0] == 2048.0


@pytest.mark.parametrize(
    ("dtype", "initial", "addend", "result"),
    [
        # f32 flushes subnormal operands and results to zero of their sign.
        (dtypes.f32, 0x00000000, 0x00000001, 0x00000000),
        (dtypes.f32, 0x3F800000, 0x00000001, 0x3F800000),
        (dtypes.f32, 0x00000001, 0x00000001, 0x00000000),
        (dtypes.f32, 0x00800001, 0x80800000, 0x00000000),  # 2^-149: flushed to +0
        (dtypes.f32, 0x80800001, 0x00800000, 0x80000000),  # -2^-149: flushed to -0
        (dtypes.f32, 0x80000000, 0x80000001, 0x80000000),  # -0 + (-0 flushed)
        (dtypes.f32, 0x7F800000, 0xFF800000, 0x7FC00000),  # inf - inf: the positive NaN
        (dtypes.f32, 0xFFC00001, 0x3F800000, 0x7FC00000),  # a NaN operand: the positive NaN
        (dtypes.f32, 0x7F7FFFFF, 0x7F7FFFFF, 0x7F800000),  # overflow
        # f16 and bf16 keep subnormals.
        (dtypes.f16, 0x0001, 0x0001, 0x0002),
        (dtypes.f16, 0x8001, 0x0001, 0x0000),
        (dtypes.f16, 0xFE00, 0x3C00, 0x7E00),
        (dtypes.bf16, 0x0001, 0x0001, 0x0002),
        (dtypes.bf16, 0x7F80, 0xFF80, 0x7FC0),
        (dtypes.bf16, 0x3F80, 0x3B80, 0x3F80),  # 1 + 2^-8: a tie, to even
    ],
)
def test_one_add_table(dtype, initial, addend, result):
    assert add_codes(dtype, [initial], [addend]) == [result]


def test_adds_through_a_view_of_stride_zero_all_arrive():
    src = np.arange(1, 33, dtype=np.int32)
    out = np.array([1000], dtype=np.int32)
    run_reference(all_into_one(dtypes.i32, 32), src, out)
    assert out[0] == 1000 + 32 * 33 // 2


def test_elements_outside_the_view_are_skipped():
    """A tile overhanging its view adds nothing past the view's end."""
    with ProgramBuilder("overhang", 8) as b:
        n = b.int_param("n")
        src = b.global_view(b.array_param("src", dtypes.i32), dtypes.i32, GlobalLayout((8,), (1,)))
        out = b.global_view(b.array_param("out", dtypes.i32), dtypes.i32, GlobalLayout((n,), (1,)))
        b.store_global(out, b.load_global(src, [0], spatial(8)), [0], combine="add")
    out = np.full(8, 7, dtype=np.int32)
    run_reference(b.program(), 5, np.ones(8, dtype=np.int32), out)
    np.testing.assert_array_equal(out, [8, 8, 8, 8, 8, 7, 7, 7])


@settings(max_examples=25, deadline=None)
@given(
    blocks=st.integers(1, 5),
    data=st.data(),
)
def test_integer_adds_are_the_wrapped_sum(blocks, data):
    rows = data.draw(
        st.lists(st.integers(-(2**31), 2**31 - 1), min_size=4 * blocks, max_size=4 * blocks)
    )
    initial = data.draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=4, max_size=4))
    out = np.array(initial, dtype=np.int32)
    run_reference(
        rows_into_one(dtypes.i32, blocks), np.array(rows, dtype=np.int32), out, grid=blocks
    )
    total = np.array(initial, np.int64) + np.array(rows, np.int64).reshape(blocks, 4).sum(axis=0)
    np.testing.assert_array_equal(out, ((total + 2**31) % 2**32 - 2**31).astype(np.int32))


@settings(max_examples=25, deadline=None)
@given(
    dtype=st.sampled_from((dtypes.f16, dtypes.bf16, dtypes.f32)),
    blocks=st.integers(1, 5),
    data=st.data(),
)
def test_small_integer_float_adds_are_exact(dtype, blocks, data):
    """Sums of small integers are exact in every order: the result is their sum."""
    values = st.integers(-16, 16)
    rows = data.draw(st.lists(values, min_size=4 * blocks, max_size=4 * blocks))
    initial = data.draw(st.lists(values, min_size=4, max_size=4))
    out = dtypes.pack(dtype.encode(np.array(initial, np.float32)), dtype)
    src = dtypes.pack(dtype.encode(np.array(rows, np.float32)), dtype)
    run_reference(rows_into_one(dtype, blocks), src, out, grid=blocks)
    total = np.array(initial) + np.array(rows).reshape(blocks, 4).sum(axis=0)
    np.testing.assert_array_equal(dtype.decode(dtypes.unpack(out, dtype, 4)), total)


def test_the_printer_shows_the_combine():
    program = rows_into_one(dtypes.f32, 2)
    store = [i for i in program.walk() if i.op == "store_global"][0]
    assert format_instruction(store).endswith("store_global(g1, r0, [0, 0], combine='add')")


@pytest.mark.parametrize(
    ("dtype", "combine", "message"),
    [
        (dtypes.f32, "max", r"combine='max'; expected None \(a plain store\) or one of \('add',\)"),
        (dtypes.i32, 1, r"combine=1; expected None \(a plain store\) or one of \('add',\)"),
        (dtypes.f16, "ADD", r"combine='ADD'; expected None \(a plain store\) or one of"),
        (
            dtypes.u8,
            "add",
            r"combine='add' into g1 of dtype u8; expected one of i32, f16, bf16, f32",
        ),
        (
            dtypes.f8e4m3,
            "add",
            r"combine='add' into g1 of dtype f8e4m3; expected one of i32, f16, bf16, f32",
        ),
    ],
)
def test_the_verifier_refuses_other_combines(dtype, combine, message):
    with pytest.raises(VerificationError, match=message):
        with ProgramBuilder("refused", 4) as b:
            src = b.global_view(b.array_param("src", dtype), dtype, GlobalLayout((4,), (1,)))
            out = b.global_view(b.array_param("out", dtype), dtype, GlobalLayout((4,), (1,)))
            b.store_global(out, b.load_global(src, [0], spatial(4)), [0], combine=combine)
        verify(b.program())

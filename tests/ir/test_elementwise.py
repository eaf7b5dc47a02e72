"""The elementwise operation table: literal results, the rounding rule, and NumPy / ml_dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ir import dtypes
from ir.elementwise import (
    BINARY_OPS,
    UNARY_OPS,
    apply_binary,
    apply_unary,
    broadcast_shapes,
    result_dtype,
    round_values,
)
from ir.errors import InterpreterError


def ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def floats(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


@pytest.mark.parametrize(
    ("op", "dtype", "x", "y", "expected"),
    [
        ("add", dtypes.u4, (15, 7), (1, 9), (0, 0)),  # wraps modulo 16
        ("add", dtypes.i4, (7, -8), (1, -1), (-8, 7)),  # two's complement wrap
        ("sub", dtypes.u8, (0,), (1,), (255,)),
        ("mul", dtypes.i8, (16, -16), (8, 9), (-128, 112)),  # -144 wraps to 112
        ("div", dtypes.i8, (-7, 7, -7), (2, -2, -2), (-4, -4, 3)),  # floor, not truncation
        ("mod", dtypes.i8, (-7, 7, -7), (2, -2, -2), (1, -1, -1)),  # sign of the divisor
        ("div", dtypes.i8, (-128,), (-1,), (-128,)),  # 128 wraps
        ("max", dtypes.i3, (-4, 3), (2, -1), (2, 3)),
        ("min", dtypes.u2, (3, 0), (1, 2), (1, 0)),
        ("and", dtypes.i4, (-1, 6), (5, 3), (5, 2)),
        ("or", dtypes.u4, (8,), (1,), (9,)),
        ("xor", dtypes.i4, (-1,), (1,), (-2,)),
        ("shl", dtypes.u4, (3, 1), (2, 3), (12, 8)),
        ("shl", dtypes.i4, (3,), (2,), (-4,)),  # 12 wraps to -4
        ("shr", dtypes.i4, (-8, 7), (1, 2), (-4, 1)),  # arithmetic when signed
        ("lt", dtypes.i8, (1, 2), (2, 2), (1, 0)),
        ("eq", dtypes.u1, (0, 1), (0, 0), (1, 0)),
    ],
)
def test_binary_integer_table(op, dtype, x, y, expected):
    np.testing.assert_array_equal(apply_binary(op, dtype, ints(*x), ints(*y)), ints(*expected))


@pytest.mark.parametrize(
    ("op", "dtype", "x", "expected"),
    [
        ("neg", dtypes.i4, (-8, 3), (-8, -3)),  # -(-8) wraps
        ("abs", dtypes.i8, (-128, -5), (-128, 5)),
        ("invert", dtypes.u4, (0, 5), (15, 10)),
        ("invert", dtypes.i4, (0, -1), (-1, 0)),
    ],
)
def test_unary_integer_table(op, dtype, x, expected):
    np.testing.assert_array_equal(apply_unary(op, dtype, ints(*x)), ints(*expected))


@pytest.mark.parametrize(
    ("op", "a", "b", "expected"),
    [
        ("max", np.nan, 1.0, 1.0),  # a NaN operand loses
        ("max", 1.0, np.nan, 1.0),
        ("min", np.nan, -2.0, -2.0),
        ("min", -2.0, np.nan, -2.0),
        ("max", -0.0, 0.0, -0.0),  # equal: the first operand
        ("max", 0.0, -0.0, 0.0),
        ("min", -0.0, 0.0, -0.0),
        ("min", 0.0, -0.0, 0.0),
    ],
)
def test_float_max_min_case_split(op, a, b, expected):
    result = apply_binary(op, dtypes.f32, floats(a), floats(b))
    assert result.view(np.uint32)[0] == floats(expected).view(np.uint32)[0]


def test_float_max_of_two_nans_is_nan():
    assert np.isnan(apply_binary("max", dtypes.f16, floats(np.nan), floats(np.nan))[0])


def test_comparisons_with_nan_follow_ieee():
    nan, one = floats(np.nan), floats(1.0)
    results = {op: int(apply_binary(op, dtypes.f16, nan, one)[0]) for op in ("lt", "eq", "ne")}
    assert results == {"lt": 0, "eq": 0, "ne": 1}


@pytest.mark.parametrize(
    ("dtype", "op", "x", "y", "expected"),
    [
        (dtypes.f4e2m1, "add", 4.0, 1.0, 4.0),  # 5 rounds to even: 4
        (dtypes.f4e2m1, "add", 4.0, 2.0, 6.0),
        (dtypes.f4e2m1, "mul", 6.0, 6.0, 6.0),  # saturates to max
        (dtypes.f4e2m1, "div", 1.0, 0.0, 6.0),  # +inf saturates in a format without inf
        (dtypes.f8e4m3, "mul", 448.0, 2.0, np.nan),  # e4m3fn overflows to NaN
        (dtypes.f8e5m2, "mul", 57344.0, 2.0, np.inf),  # IEEE-like overflows to inf
        (dtypes.f16, "div", 1.0, 3.0, float(np.float16(1 / 3))),
    ],
)
def test_float_results_round_through_the_codec(dtype, op, x, y, expected):
    result = float(apply_binary(op, dtype, floats(x), floats(y))[0])
    assert result == expected or (np.isnan(expected) and np.isnan(result))


def test_integer_division_by_zero_is_an_error():
    with pytest.raises(InterpreterError, match="integer div by zero"):
        apply_binary("div", dtypes.i8, ints(1), ints(0))
    with pytest.raises(InterpreterError, match="integer mod by zero"):
        apply_binary("mod", dtypes.u4, ints(1), ints(0))


@pytest.mark.parametrize("amount", [-1, 4])
def test_shift_out_of_range_is_an_error(amount):
    with pytest.raises(InterpreterError, match=rf"shl by {amount}.*\[0, 4\)"):
        apply_binary("shl", dtypes.u4, ints(1), ints(amount))


def test_comparisons_give_u1_and_others_keep_the_dtype():
    assert result_dtype("lt", dtypes.f16) == dtypes.u1
    assert result_dtype("add", dtypes.f16) == dtypes.f16


def test_op_table_marks_exactly_the_transcendental_ops_inexact():
    inexact = {name for name, op in {**UNARY_OPS, **BINARY_OPS}.items() if not op.exact}
    assert inexact == {"exp", "exp2", "log", "log2", "rsqrt", "sigmoid", "tanh"}


@pytest.mark.parametrize(
    ("shapes", "expected"),
    [
        (((4, 8), (4, 1)), (4, 8)),
        (((4, 8), ()), (4, 8)),
        (((8,), (4, 1)), (4, 8)),
        (((4, 8), (8, 1)), None),
    ],
)
def test_broadcast_shapes_table(shapes, expected):
    assert broadcast_shapes(*shapes) == expected


f16_values = st.floats(width=16, allow_nan=True, allow_infinity=True)


@given(st.lists(st.tuples(f16_values, f16_values), min_size=1, max_size=20))
def test_f16_arithmetic_equals_numpy_native_f16(pairs):
    x = np.array([p[0] for p in pairs], dtype=np.float16)
    y = np.array([p[1] for p in pairs], dtype=np.float16)
    with np.errstate(all="ignore"):
        native = {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y}
    for op, expected in native.items():
        ours = apply_binary(op, dtypes.f16, x.astype(np.float32), y.astype(np.float32))
        ours = ours.astype(np.float16)
        same = (ours.view(np.uint16) == expected.view(np.uint16)) | (
            np.isnan(ours) & np.isnan(expected)
        )
        assert same.all(), (op, x, y, ours, expected)


bf16_values = st.floats(width=32, allow_nan=False, allow_infinity=False).map(
    lambda v: float(np.float32(v).astype(ml_dtypes.bfloat16))
)


@given(st.lists(st.tuples(bf16_values, bf16_values), min_size=1, max_size=20))
def test_bf16_add_equals_ml_dtypes_single_rounding(pairs):
    x = np.array([p[0] for p in pairs], dtype=np.float32)
    y = np.array([p[1] for p in pairs], dtype=np.float32)
    with np.errstate(all="ignore"):
        expected = (x.astype(np.float64) + y.astype(np.float64)).astype(ml_dtypes.bfloat16)
        ours = apply_binary("add", dtypes.bf16, x, y).astype(ml_dtypes.bfloat16)
    # f32 then bf16 double rounding equals a single rounding of the exact sum (24 >= 2*8+2).
    assert (ours.view(np.uint16) == expected.view(np.uint16)).all()


@given(st.integers(-(2**40), 2**40), st.sampled_from([dtypes.i3, dtypes.u5, dtypes.i32, dtypes.u8]))
def test_round_values_wraps_like_two_complement(value, dtype):
    wrapped = int(round_values(dtype, ints(value))[0])
    assert (wrapped - value) % (1 << dtype.nbits) == 0
    assert dtype.min <= wrapped <= dtype.max

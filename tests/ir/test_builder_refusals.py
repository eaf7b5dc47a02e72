"""What the builder refuses with VerificationError: constants that do not fit their dtype, a
Python bool as an `if_` condition, and iterating `for_range` instead of entering it."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import VerificationError
from ir.instructions import ForRange, If
from ir.interpreter import run_reference
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial

INF, NAN = math.inf, math.nan

# ------------------------------------------------------------------------- constants

OUT_OF_RANGE = [
    (dtypes.u8, -1, "-1 is outside the range of u8; expected an integer in 0..255"),
    (dtypes.u8, 256, "256 is outside the range of u8; expected an integer in 0..255"),
    (dtypes.u1, 2, "2 is outside the range of u1; expected an integer in 0..1"),
    (dtypes.i1, 1, "1 is outside the range of i1; expected an integer in -1..0"),
    (dtypes.i4, 1000, "1000 is outside the range of i4; expected an integer in -8..7"),
    (dtypes.i4, -9, "-9 is outside the range of i4; expected an integer in -8..7"),
    (dtypes.i4, 8.0, "8.0 is outside the range of i4; expected an integer in -8..7"),
    (
        dtypes.i32,
        2**31,
        "2147483648 is outside the range of i32; expected an integer in -2147483648..2147483647",
    ),
    (dtypes.u4, 0.5, "0.5 is not an integer; u4 holds the integers 0..15"),
    (dtypes.i8, -2.25, "-2.25 is not an integer; i8 holds the integers -128..127"),
    (dtypes.i32, INF, "inf is not an integer; i32 holds the integers -2147483648..2147483647"),
    (dtypes.u8, NAN, "nan is not an integer; u8 holds the integers 0..255"),
    (
        dtypes.f16,
        1e10,
        "10000000000.0 is beyond the largest finite value of f16; expected a value in "
        "-65504.0..65504.0",
    ),
    (
        dtypes.f16,
        -65536,
        "-65536 is beyond the largest finite value of f16; expected a value in -65504.0..65504.0",
    ),
    (
        dtypes.f4e2m1,
        6.5,
        "6.5 is beyond the largest finite value of f4e2m1; expected a value in -6.0..6.0",
    ),
    (
        dtypes.f8e4m3,
        -500.0,
        "-500.0 is beyond the largest finite value of f8e4m3; expected a value in -448.0..448.0",
    ),
    (
        dtypes.f32,
        1e39,
        "1e+39 is beyond the largest finite value of f32; expected a value in "
        "-3.4028234663852886e+38..3.4028234663852886e+38",
    ),
    (dtypes.f4e2m1, INF, "inf: f4e2m1 has no infinity; expected a finite value in -6.0..6.0"),
    (
        dtypes.f8e4m3,
        -INF,
        "-inf: f8e4m3 has no infinity; expected a finite value in -448.0..448.0",
    ),
    (dtypes.f6e3m2, NAN, "nan: f6e3m2 has no NaN; expected a finite value in -28.0..28.0"),
]


@pytest.mark.parametrize(("dtype", "value", "message"), OUT_OF_RANGE)
def test_register_tensor_refuses_a_constant_that_does_not_fit(dtype, value, message):
    b = ProgramBuilder("p", 4)
    with pytest.raises(VerificationError) as info:
        b.register_tensor(dtype, spatial(4), value)
    assert str(info.value) == f"register_tensor init {message}"


@pytest.mark.parametrize(("dtype", "value", "message"), OUT_OF_RANGE)
@pytest.mark.parametrize("side", [0, 1])
def test_an_elementwise_constant_operand_must_fit(dtype, value, message, side):
    b = ProgramBuilder("p", 4)
    x = b.register_tensor(dtype, spatial(4))
    operands = (value, x) if side == 0 else (x, value)
    with pytest.raises(VerificationError) as info:
        b.add(*operands)
    rest = message[len(repr(value)) :]
    assert str(info.value) == f"the constant {value!r} (operand {side} of add){rest}"


def test_where_refuses_a_constant_that_does_not_fit():
    b = ProgramBuilder("p", 4)
    cond = b.register_tensor(dtypes.u1, spatial(4), 1)
    x = b.register_tensor(dtypes.i3, spatial(4))
    with pytest.raises(VerificationError) as info:
        b.where(cond, x, 4)
    assert str(info.value) == (
        "the constant 4 (operand 1 of where) is outside the range of i3; "
        "expected an integer in -4..3"
    )


ACCEPTED = [
    (dtypes.u8, 255),
    (dtypes.u8, 0.0),
    (dtypes.i1, -1),
    (dtypes.i4, -8),
    (dtypes.i4, 7.0),
    (dtypes.f16, 65504.0),
    (dtypes.f16, -65504),
    (dtypes.f16, INF),
    (dtypes.f16, NAN),
    (dtypes.f8e4m3, NAN),
    (dtypes.f8e4m3, 448),
    (dtypes.f4e2m1, -6.0),
    (dtypes.f4e2m1, 0.3),
    (dtypes.bf16, -INF),
]


@pytest.mark.parametrize(("dtype", "value"), ACCEPTED)
def test_constants_that_fit_are_accepted(dtype, value):
    b = ProgramBuilder("p", 4)
    x = b.register_tensor(dtype, spatial(4), value)
    b.add(x, value)
    b.add(value, x)


def _stored_constant(dtype: dtypes.DataType, value: int | float) -> np.ndarray:
    """The values the interpreter stores from ``register_tensor(dtype, spatial(4), value)``."""
    with ProgramBuilder("constant", 4) as b:
        out = b.array_param("out", dtype)
        view = b.global_view(out, dtype, GlobalLayout((4,), (1,)))
        b.store_global(view, b.register_tensor(dtype, spatial(4), value), [0])
    buffer = np.zeros(dtypes.packed_nbytes(4, dtype), dtype=np.uint8)
    run_reference(b.program(), buffer)
    return dtype.decode(dtypes.unpack(buffer, dtype, 4))


@st.composite
def fitting_constants(draw):
    dtype = draw(st.sampled_from(dtypes.all_dtypes()))
    if not dtype.is_float:
        integer = st.integers(dtype.min, dtype.max)
        return dtype, draw(st.one_of(integer, integer.map(float)))
    finite = st.floats(dtype.min, dtype.max, allow_nan=False, allow_infinity=False)
    choices = [finite, st.integers(math.ceil(dtype.min), math.floor(dtype.max))]
    if dtype.has_inf:
        choices.append(st.sampled_from((INF, -INF)))
    if dtype.has_nan:
        choices.append(st.just(NAN))
    return dtype, draw(st.one_of(*choices))


@settings(max_examples=60, deadline=None)
@given(fitting_constants())
def test_a_fitting_constant_is_accepted_and_round_trips(case):
    dtype, value = case
    expected = dtype.decode(dtype.encode(np.array([value])))
    np.testing.assert_array_equal(_stored_constant(dtype, value), np.repeat(expected, 4))


# ------------------------------------------------------------------------- if_ conditions


def test_if_refuses_the_bool_of_structural_equality():
    b = ProgramBuilder("p", 4)
    with b.for_range(4) as k:
        with pytest.raises(VerificationError) as info:
            with b.if_(k == 2):
                pass
        assert str(info.value) == (
            "if_ condition is the Python bool False (== and != on scalar expressions compare "
            "them structurally); write k.eq(2) or k.ne(2) for the comparison"
        )
        with b.if_(k.eq(2)):
            b.register_tensor(dtypes.i8, spatial(4), 1)
    (loop,) = b.program().body
    assert isinstance(loop, ForRange)
    (branch,) = loop.body
    assert isinstance(branch, If) and len(branch.body) == 1


@pytest.mark.parametrize(
    ("cond", "kind"), [(True, "Python"), (False, "Python"), (np.bool_(True), "NumPy")]
)
def test_if_refuses_any_bool(cond, kind):
    b = ProgramBuilder("p", 4)
    with pytest.raises(
        VerificationError, match=re.escape(f"if_ condition is the {kind} bool {cond!r}")
    ):
        with b.if_(cond):
            pass


@pytest.mark.parametrize(
    ("cond", "shown"), [(1.0, "1.0 of type float"), ("k", "'k' of type str"), (None, "None")]
)
def test_if_refuses_a_condition_that_is_not_a_scalar(cond, shown):
    b = ProgramBuilder("p", 4)
    with pytest.raises(VerificationError) as info:
        with b.if_(cond):
            pass
    assert str(info.value).startswith(
        "if_ condition must be a scalar Expr (such as k < n or k.eq(2)) or an int, got "
    )
    assert shown in str(info.value)


@pytest.mark.parametrize("cond", [0, 1, np.int64(3)])
def test_if_still_takes_an_int(cond):
    b = ProgramBuilder("p", 4)
    with b.if_(cond):
        pass
    (branch,) = b.program().body
    assert isinstance(branch, If)


# ------------------------------------------------------------------------- for_range


@pytest.mark.parametrize(
    ("args", "call"),
    [((4,), "for_range(4)"), ((0, 8), "for_range(0, 8)"), ((1, 9, 2), "for_range(1, 9)")],
)
def test_iterating_for_range_is_refused(args, call):
    b = ProgramBuilder("p", 4)
    with pytest.raises(VerificationError) as info:
        for _ in b.for_range(*args):
            pass
    assert str(info.value) == (
        f"{call} is a context manager, not an iterable: write `with b.{call} as k:` and put "
        "the loop body inside the with block"
    )
    assert b.program().body == ()


def test_for_range_with_still_builds_the_loop():
    b = ProgramBuilder("p", 4)
    with b.for_range(0, 8, 2, unroll=2) as k:
        b.register_tensor(dtypes.i8, spatial(4), 1)
    (loop,) = b.program().body
    assert isinstance(loop, ForRange) and loop.var == k
    assert (loop.step, loop.unroll, len(loop.body)) == (2, 2, 1)

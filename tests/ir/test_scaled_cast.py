"""Scaled casts: `ProgramBuilder.cast(x, dtype, exponent=e)` converts and multiplies by 2**e,
exactly (`ir.dtypes.scaled_conversion_error`, `ir.dtypes.convert_scaled`).

Exact: the refusals with their messages (builder, verifier, dtypes), the printed form, the
interpreter's codes for f4e2m1 scaled by its bias. Properties: the exactness check agrees with
a brute-force search of the target's value set, and `convert_scaled` to f16 agrees with
NumPy's own float16 on every code of every scaled conversion it accepts (an outside reference).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.dtypes import DataType, DtypeError
from ir.errors import VerificationError
from ir.instructions import Cast
from ir.verifier import verify
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial

SMALL_TYPES = [
    dtypes.from_name(name)
    for name in ("u2", "i2", "u4", "i4", "u8", "i8", "f4e2m1", "f6e3m2", "f6e2m3", "f8e4m3")
] + [dtypes.f8e5m2, dtypes.f16, dtypes.bf16]
FLOAT_TARGETS = (dtypes.f16, dtypes.bf16, dtypes.f32)


def scaling(src: DataType, dst: DataType, exponent: int):
    """y[i] = cast(x[i]) * 2**exponent over 32 elements."""
    with ProgramBuilder("scaled", 32) as b:
        x = b.array_param("x", src)
        y = b.array_param("y", dst)
        view_x = b.global_view(x, src, GlobalLayout((32,), (1,)))
        view_y = b.global_view(y, dst, GlobalLayout((32,), (1,)))
        loaded = b.load_global(view_x, [0], spatial(32))
        b.store_global(view_y, b.cast(loaded, dst, exponent=exponent), [0])
    return b.program()


def test_f4e2m1_scaled_by_its_bias_is_the_placed_bits() -> None:
    """f4e2m1's values times 2**-14 as f16: the magnitude bits under f16's exponent, the sign
    on top (what the fast conversion places before its fma)."""
    codes = np.arange(16)
    got = dtypes.convert_scaled(codes, dtypes.f4e2m1, dtypes.f16, -14)
    placed = (codes & 7) << 9 | (codes >> 3) << 15
    np.testing.assert_array_equal(got, placed)
    program = scaling(dtypes.f4e2m1, dtypes.f16, -14)
    x = dtypes.pack(np.concatenate([codes, codes]), dtypes.f4e2m1)
    y = np.zeros(64, np.uint8)
    run_reference(program, x, y)
    np.testing.assert_array_equal(y.view(np.uint16), np.concatenate([placed, placed]))


def test_the_exponent_is_printed_when_it_is_not_zero() -> None:
    text = str(scaling(dtypes.f4e2m1, dtypes.f16, -14))
    assert "= cast(r0, exponent=-14)" in text
    assert "= cast(r0)" in str(scaling(dtypes.f4e2m1, dtypes.f16, 0))


@pytest.mark.parametrize(
    ("src", "dst", "exponent", "message"),
    [
        (dtypes.f16, dtypes.f16, 14, r"f16 code 0x4400 \(4.0\) times 2\*\*14 is 65536.0, not a"),
        (dtypes.i4, dtypes.i8, 1, "a scaled conversion gives a float type, not i8"),
        (dtypes.f32, dtypes.f32, 1, "takes types of at most 16 bits, not f32"),
        (dtypes.u4, dtypes.f16, 65, r"exponent 65 is outside \[-64, 64\]"),
        (dtypes.u4, dtypes.f16, True, "the exponent must be an int, got True"),
        (dtypes.u4, dtypes.f16, [1], r"the exponent must be an int, got \[1\]"),
        (dtypes.u8, dtypes.f16, -25, r"u8 code 0x1 \(1.0\) times 2\*\*-25"),
    ],
)
def test_inexact_scaled_casts_are_refused(
    src: DataType, dst: DataType, exponent: object, message: str
) -> None:
    assert dtypes.scaled_conversion_error(src, dst, exponent) is not None
    with pytest.raises(VerificationError, match=message):
        scaling(src, dst, exponent)
    if isinstance(exponent, int) and not isinstance(exponent, bool):
        with pytest.raises(DtypeError, match="no exact conversion"):
            dtypes.convert_scaled([0], src, dst, exponent)


def test_the_verifier_checks_a_cast_built_by_hand() -> None:
    program = scaling(dtypes.f4e2m1, dtypes.f16, -14)
    cast = next(i for i in program.body if isinstance(i, Cast))
    body = tuple(dataclasses.replace(i, exponent=30) if i is cast else i for i in program.body)
    with pytest.raises(
        VerificationError, match=r"scaled cast: f4e2m1 code 0x1 \(0.5\) times 2\*\*30"
    ):
        verify(dataclasses.replace(program, body=body))


def _values(dtype: DataType) -> set[float]:
    """Every finite value of `dtype` (brute force over its codes)."""
    values = dtype.decode(np.arange(1 << dtype.nbits)).astype(np.float64)
    return set(values[np.isfinite(values)].tolist())


_TARGET_VALUES = {dtype: _values(dtype) for dtype in (dtypes.f16, dtypes.bf16)}


@settings(max_examples=60, deadline=None)
@given(
    src=st.sampled_from([t for t in SMALL_TYPES if t.nbits <= 8]),
    dst=st.sampled_from((dtypes.f16, dtypes.bf16)),
    exponent=st.integers(-30, 30),
)
def test_the_exactness_check_agrees_with_brute_force(
    src: DataType, dst: DataType, exponent: int
) -> None:
    scaled = {value * 2.0**exponent for value in _values(src)}
    exact = scaled <= _TARGET_VALUES[dst]
    assert (dtypes.scaled_conversion_error(src, dst, exponent) is None) is exact


@settings(max_examples=60, deadline=None)
@given(src=st.sampled_from(SMALL_TYPES), exponent=st.integers(-24, 24))
def test_scaled_conversions_to_f16_agree_with_numpy(src: DataType, exponent: int) -> None:
    """Where the scaled conversion is exact, its f16 codes are NumPy's float16 of the scaled
    values (NaNs compared as NaNs of the same sign)."""
    if dtypes.scaled_conversion_error(src, dtypes.f16, exponent) is not None:
        return
    codes = np.arange(1 << src.nbits)
    got = dtypes.convert_scaled(codes, src, dtypes.f16, exponent).astype(np.uint16)
    values = src.decode(codes).astype(np.float64) * 2.0**exponent
    with np.errstate(over="ignore"):  # infinities stay infinities
        want = values.astype(np.float16).view(np.uint16)
    nan = np.isnan(values)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    np.testing.assert_array_equal(got[nan] >> 15, np.signbit(values[nan]).astype(np.uint16))
    assert np.all((got[nan] & 0x7C00) == 0x7C00) and np.all(got[nan] & 0x3FF)


@pytest.mark.parametrize("dst", FLOAT_TARGETS)
def test_exponent_zero_is_the_plain_conversion(dst: DataType) -> None:
    codes = np.arange(256)
    np.testing.assert_array_equal(
        dtypes.convert_scaled(codes, dtypes.f8e4m3, dst, 0),
        dtypes.convert(codes, dtypes.f8e4m3, dst),
    )

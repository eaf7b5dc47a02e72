"""The data types of ir.dtypes: their attributes, names and validation.

Literal tables of attributes, the set of types derived from the contract's grammar, name lookup,
and a differential check of the numeric limits against ml_dtypes' and NumPy's finfo / iinfo.
"""

from __future__ import annotations

import dataclasses
import re

import ml_dtypes
import numpy as np
import pytest

from ir import dtypes
from ir.dtypes import DataType, DtypeError

FLOATS = [dtype for dtype in dtypes.all_dtypes() if dtype.is_float]
INTEGERS = [dtype for dtype in dtypes.all_dtypes() if not dtype.is_float]

# name, long_name, nbits, exponent_bits, mantissa_bits, bias, max, smallest_subnormal, inf, nan
FLOAT_TABLE = [
    ("f3e1m1", "float3_e1m1fn", 3, 1, 1, 0, 3.0, 1.0, False, False),
    ("f3e2m0", "float3_e2m0fn", 3, 2, 0, 1, 4.0, 1.0, False, False),
    ("f4e2m1", "float4_e2m1fn", 4, 2, 1, 1, 6.0, 0.5, False, False),
    ("f4e3m0", "float4_e3m0fn", 4, 3, 0, 3, 16.0, 0.25, False, False),
    ("f5e2m2", "float5_e2m2fn", 5, 2, 2, 1, 7.0, 0.25, False, False),
    ("f6e2m3", "float6_e2m3fn", 6, 2, 3, 1, 7.5, 0.125, False, False),
    ("f6e3m2", "float6_e3m2fn", 6, 3, 2, 3, 28.0, 0.0625, False, False),
    ("f6e5m0", "float6_e5m0fn", 6, 5, 0, 15, 65536.0, 2.0**-14, False, False),
    ("f7e3m3", "float7_e3m3fn", 7, 3, 3, 3, 30.0, 2.0**-5, False, False),
    ("f7e6m0", "float7_e6m0fn", 7, 6, 0, 31, 2.0**32, 2.0**-30, False, False),
    ("f8e1m6", "float8_e1m6fn", 8, 1, 6, 0, 3.96875, 2.0**-5, False, False),
    ("f8e3m4", "float8_e3m4", 8, 3, 4, 3, 15.5, 2.0**-6, True, True),
    ("f8e4m3", "float8_e4m3fn", 8, 4, 3, 7, 448.0, 2.0**-9, False, True),
    ("f8e5m2", "float8_e5m2", 8, 5, 2, 15, 57344.0, 2.0**-16, True, True),
    ("f8e7m0", "float8_e7m0fn", 8, 7, 0, 63, 2.0**64, 2.0**-62, False, False),
    ("f16", "float16", 16, 5, 10, 15, 65504.0, 2.0**-24, True, True),
    ("bf16", "bfloat16", 16, 8, 7, 127, (2 - 2.0**-7) * 2.0**127, 2.0**-133, True, True),
    ("f32", "float32", 32, 8, 23, 127, (2 - 2.0**-23) * 2.0**127, 2.0**-149, True, True),
]

# name, long_name, nbits, is_signed, min, max, code dtype
INTEGER_TABLE = [
    ("i1", "int1", 1, True, -1, 0, np.uint8),
    ("u1", "uint1", 1, False, 0, 1, np.uint8),
    ("i3", "int3", 3, True, -4, 3, np.uint8),
    ("u4", "uint4", 4, False, 0, 15, np.uint8),
    ("i8", "int8", 8, True, -128, 127, np.uint8),
    ("u8", "uint8", 8, False, 0, 255, np.uint8),
    ("i32", "int32", 32, True, -(2**31), 2**31 - 1, np.uint32),
]


@pytest.mark.parametrize(
    "name, long_name, nbits, e_bits, m_bits, bias, largest, subnormal, inf, nan", FLOAT_TABLE
)
def test_float_attributes_table(
    name: str,
    long_name: str,
    nbits: int,
    e_bits: int,
    m_bits: int,
    bias: int,
    largest: float,
    subnormal: float,
    inf: bool,
    nan: bool,
) -> None:
    dtype = getattr(dtypes, name)
    assert (dtype.name, dtype.long_name, dtype.nbits) == (name, long_name, nbits)
    assert (dtype.exponent_bits, dtype.mantissa_bits, dtype.bias) == (e_bits, m_bits, bias)
    assert (dtype.max, dtype.min, dtype.smallest_subnormal) == (largest, -largest, subnormal)
    assert (dtype.has_inf, dtype.has_nan, dtype.is_float, dtype.is_signed) == (inf, nan, True, True)
    assert dtype.smallest_normal == 2.0 ** (1 - bias)


@pytest.mark.parametrize("name, long_name, nbits, signed, lowest, highest, code", INTEGER_TABLE)
def test_integer_attributes_table(
    name: str, long_name: str, nbits: int, signed: bool, lowest: int, highest: int, code: type
) -> None:
    dtype = getattr(dtypes, name)
    assert (dtype.name, dtype.long_name, dtype.nbits, dtype.is_signed) == (
        name,
        long_name,
        nbits,
        signed,
    )
    assert (dtype.min, dtype.max, dtype.code_dtype) == (lowest, highest, np.dtype(code))
    assert not dtype.is_float and not dtype.has_inf and not dtype.has_nan
    assert (dtype.exponent_bits, dtype.mantissa_bits, dtype.bias) == (None, None, None)
    assert (dtype.smallest_normal, dtype.smallest_subnormal) == (None, None)


def test_all_dtypes_is_the_contract_grammar() -> None:
    expected = {f"i{n}" for n in range(1, 9)} | {f"u{n}" for n in range(1, 9)}
    expected |= {"i32", "f16", "bf16", "f32"}
    expected |= {
        f"f{1 + e + m}e{e}m{m}" for e in range(1, 8) for m in range(0, 7) if 3 <= 1 + e + m <= 8
    }
    names = [dtype.name for dtype in dtypes.all_dtypes()]
    assert len(names) == len(set(names)) == 47
    assert set(names) == expected
    assert "f8e3m4" in names


@pytest.mark.parametrize("dtype", dtypes.all_dtypes(), ids=str)
def test_module_attribute_is_the_type(dtype: DataType) -> None:
    assert getattr(dtypes, dtype.name) is dtype
    assert repr(dtype) == str(dtype) == dtype.name
    assert dtype.name in dtypes.__all__


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_fields_match_the_name(dtype: DataType) -> None:
    match = re.fullmatch(r"f(\d)e(\d)m(\d)", dtype.name)
    if match is None:
        assert dtype.name in ("f16", "bf16", "f32")
        return
    nbits, e_bits, m_bits = map(int, match.groups())
    assert (dtype.nbits, dtype.exponent_bits, dtype.mantissa_bits) == (nbits, e_bits, m_bits)
    assert dtype.bias == 2 ** (e_bits - 1) - 1
    assert dtype.code_dtype == np.uint8


def test_special_value_classes() -> None:
    with_inf = {dtype.name for dtype in FLOATS if dtype.has_inf}
    with_nan = {dtype.name for dtype in FLOATS if dtype.has_nan}
    assert with_inf == {"f8e5m2", "f8e3m4", "f16", "bf16", "f32"}
    assert with_nan == with_inf | {"f8e4m3"}


@pytest.mark.parametrize(
    "name, expected",
    [
        ("u4", dtypes.u4),
        ("uint4", dtypes.u4),
        ("int3", dtypes.i3),
        ("i1", dtypes.i1),
        ("int32", dtypes.i32),
        ("f6e3m2", dtypes.f6e3m2),
        ("float6_e3m2", dtypes.f6e3m2),
        ("float6_e3m2fn", dtypes.f6e3m2),
        ("float6_e2m3fn", dtypes.f6e2m3),
        ("float8_e4m3fn", dtypes.f8e4m3),
        ("f8e4m3", dtypes.f8e4m3),
        ("float8_e5m2", dtypes.f8e5m2),
        ("float8_e3m4", dtypes.f8e3m4),
        ("float4_e2m1fn", dtypes.f4e2m1),
        ("float4_e2m1", dtypes.f4e2m1),
        ("float8_e2m5fn", dtypes.f8e2m5),
        ("float16", dtypes.f16),
        ("bfloat16", dtypes.bf16),
        ("bf16", dtypes.bf16),
        ("float32", dtypes.f32),
    ],
)
def test_from_name_table(name: str, expected: DataType) -> None:
    assert dtypes.from_name(name) is expected


@pytest.mark.parametrize("dtype", dtypes.all_dtypes(), ids=str)
def test_from_name_round_trips_both_names(dtype: DataType) -> None:
    assert dtypes.from_name(dtype.name) is dtype
    assert dtypes.from_name(dtype.long_name) is dtype


def test_from_name_rejects_ambiguous_float8_e4m3() -> None:
    with pytest.raises(DtypeError, match=r"'float8_e4m3' is ambiguous.*'float8_e4m3fn'"):
        dtypes.from_name("float8_e4m3")


@pytest.mark.parametrize(
    "name", ["u9", "int16", "float8_e5m2fn", "float8_e3m4fn", "f9e4m4", "f2e1m0", "U4", ""]
)
def test_from_name_rejects_unknown_names(name: str) -> None:
    with pytest.raises(DtypeError, match=rf"unknown data type name '{name}'.*'uint4'"):
        dtypes.from_name(name)


def test_from_name_rejects_non_strings() -> None:
    with pytest.raises(DtypeError, match=r"must be a string, got 4"):
        dtypes.from_name(4)


def test_dtype_error_is_a_value_error() -> None:
    assert issubclass(DtypeError, ValueError)


def test_types_are_frozen_and_hashable() -> None:
    rebuilt = DataType(nbits=4, is_float=True, is_signed=True, exponent_bits=2, mantissa_bits=1)
    assert rebuilt == dtypes.f4e2m1 and hash(rebuilt) == hash(dtypes.f4e2m1)
    assert len({dtypes.u4, dtypes.i4, dtypes.u4, dtypes.f4e2m1, rebuilt}) == 3
    assert dtypes.u4 != dtypes.i4 and dtypes.f16 != dtypes.bf16
    with pytest.raises(dataclasses.FrozenInstanceError, match="nbits"):
        dtypes.u4.nbits = 5


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(nbits=9, is_float=False, is_signed=True), r"1 to 8 bits .* got nbits=9"),
        (dict(nbits=32, is_float=False, is_signed=False), r"got nbits=32"),
        (dict(nbits=True, is_float=False, is_signed=True), r"got nbits=True"),
        (
            dict(nbits=4, is_float=False, is_signed=True, exponent_bits=2, mantissa_bits=1),
            r"exponent_bits=None and mantissa_bits=None, got 2 and 1",
        ),
        (
            dict(nbits=8, is_float=True, is_signed=True, exponent_bits=4, mantissa_bits=4),
            r"nbits == 1 \+ exponent_bits \+ mantissa_bits, got nbits=8",
        ),
        (
            dict(nbits=4, is_float=True, is_signed=False, exponent_bits=2, mantissa_bits=1),
            r"is_signed=False",
        ),
        (
            dict(nbits=9, is_float=True, is_signed=True, exponent_bits=4, mantissa_bits=4),
            r"no float type has 4 exponent and 4 mantissa bits",
        ),
        (
            dict(nbits=3, is_float=True, is_signed=True, exponent_bits=0, mantissa_bits=2),
            r"no float type has 0 exponent and 2 mantissa bits",
        ),
    ],
)
def test_direct_construction_validates(fields: dict, message: str) -> None:
    with pytest.raises(DtypeError, match=message):
        DataType(**fields)


ML_FLOATS = [
    ("f8e4m3", ml_dtypes.float8_e4m3fn),
    ("f8e5m2", ml_dtypes.float8_e5m2),
    ("f8e3m4", ml_dtypes.float8_e3m4),
    ("f6e2m3", ml_dtypes.float6_e2m3fn),
    ("f6e3m2", ml_dtypes.float6_e3m2fn),
    ("f4e2m1", ml_dtypes.float4_e2m1fn),
    ("bf16", ml_dtypes.bfloat16),
    ("f16", np.float16),
    ("f32", np.float32),
]


@pytest.mark.parametrize("name, reference", ML_FLOATS)
def test_float_limits_match_finfo(name: str, reference: type) -> None:
    dtype, info = getattr(dtypes, name), ml_dtypes.finfo(reference)
    assert (dtype.min, dtype.max) == (float(info.min), float(info.max))
    assert dtype.smallest_normal == float(info.smallest_normal)
    assert dtype.smallest_subnormal == float(info.smallest_subnormal)
    assert (dtype.nbits, dtype.exponent_bits, dtype.mantissa_bits) == (
        info.bits,
        info.nexp,
        info.nmant,
    )


ML_INTEGERS = [
    ("i1", ml_dtypes.int1),
    ("u1", ml_dtypes.uint1),
    ("i2", ml_dtypes.int2),
    ("u2", ml_dtypes.uint2),
    ("i4", ml_dtypes.int4),
    ("u4", ml_dtypes.uint4),
    ("i8", np.int8),
    ("u8", np.uint8),
    ("i32", np.int32),
]


@pytest.mark.parametrize("name, reference", ML_INTEGERS)
def test_integer_limits_match_iinfo(name: str, reference: type) -> None:
    dtype, info = getattr(dtypes, name), ml_dtypes.iinfo(reference)
    assert (dtype.min, dtype.max, dtype.nbits) == (int(info.min), int(info.max), info.bits)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_limits_are_the_values_of_their_codes(dtype: DataType) -> None:
    assert float(dtype.decode(1)) == dtype.smallest_subnormal
    assert float(dtype.decode(1 << dtype.mantissa_bits)) == dtype.smallest_normal
    if dtype.nbits <= 16:
        values = dtype.decode(np.arange(1 << dtype.nbits))
        finite = values[np.isfinite(values)]
        assert (float(finite.max()), float(finite.min())) == (dtype.max, dtype.min)

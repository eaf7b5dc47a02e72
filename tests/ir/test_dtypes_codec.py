"""Encoding, decoding and conversion of ir.dtypes.

Three kinds of check side by side:
- literal tables of codes and values taken from the format definitions (OCP MX, IEEE 754);
- an exact reference written here with `fractions.Fraction`, independent of the implementation:
  it decodes every code from its fields and encodes a value by searching the nearest code of the
  format's grid, ties to the even code, then applying the class rules of the contract;
- ml_dtypes (and NumPy for float16) bit pattern for bit pattern, for the formats they have.
Plus hypothesis properties (monotonicity, sign symmetry, exact widening) and a speed check.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
import time
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ir import dtypes
from ir.dtypes import DataType, DtypeError

# ---------------------------------------------------------------------------------------------
# The exact reference. Format classes and field widths are written out from the contract.

IEEE_LIKE = {"f8e5m2", "f8e3m4", "f16", "bf16", "f32"}
NAN_ONLY = {"f8e4m3"}
WIDE_FIELDS = {"f16": (5, 10), "bf16": (8, 7), "f32": (8, 23)}


def reference_fields(name: str) -> tuple[int, int, int]:
    """(nbits, exponent bits, mantissa bits) of a float type, read from its name."""
    if name in WIDE_FIELDS:
        e_bits, m_bits = WIDE_FIELDS[name]
        return 1 + e_bits + m_bits, e_bits, m_bits
    nbits, e_bits, m_bits = map(int, re.fullmatch(r"f(\d)e(\d)m(\d)", name).groups())
    return nbits, e_bits, m_bits


def unbounded_value(name: str, magnitude_code: int) -> Fraction:
    """The value of a sign-less code read as if every exponent field were an ordinary binade."""
    _, e_bits, m_bits = reference_fields(name)
    bias = 2 ** (e_bits - 1) - 1
    exponent, mantissa = magnitude_code >> m_bits, magnitude_code % 2**m_bits
    if exponent == 0:
        return Fraction(mantissa, 2**m_bits) * Fraction(2) ** (1 - bias)
    return (1 + Fraction(mantissa, 2**m_bits)) * Fraction(2) ** (exponent - bias)


def reference_value(name: str, code: int) -> tuple[str, bool, Fraction | None]:
    """(kind, negative, magnitude) of a float code; kind is 'finite', 'inf' or 'nan'."""
    nbits, e_bits, m_bits = reference_fields(name)
    negative = code >> (nbits - 1) == 1
    magnitude_code = code % 2 ** (nbits - 1)
    exponent, mantissa = magnitude_code >> m_bits, magnitude_code % 2**m_bits
    if name in IEEE_LIKE and exponent == 2**e_bits - 1:
        return ("inf" if mantissa == 0 else "nan"), negative, None
    if name in NAN_ONLY and magnitude_code == 2 ** (nbits - 1) - 1:
        return "nan", negative, None
    return "finite", negative, unbounded_value(name, magnitude_code)


@functools.cache
def reference_grid(name: str) -> tuple[list[Fraction], list[int]]:
    """The non-negative finite values in increasing order with their codes, then one more entry:
    the value and code just past the largest finite one (the overflow target)."""
    nbits = reference_fields(name)[0]
    codes = [c for c in range(2 ** (nbits - 1)) if reference_value(name, c)[0] == "finite"]
    values = [reference_value(name, c)[2] for c in codes]
    assert all(a < b for a, b in zip(values, values[1:], strict=False))
    beyond = codes[-1] + 1
    return values + [unbounded_value(name, beyond)], codes + [beyond]


def reference_encode(name: str, x: float) -> int:
    """The code of float32 value `x` in float type `name`, by the contract's rules."""
    nbits, e_bits, m_bits = reference_fields(name)
    sign = 2 ** (nbits - 1) if math.copysign(1.0, x) < 0 else 0
    all_ones = 2 ** (nbits - 1) - 1
    inf_code = (2**e_bits - 1) * 2**m_bits
    if math.isnan(x):
        if name in IEEE_LIKE:
            return sign | inf_code | 2 ** (m_bits - 1)
        if name in NAN_ONLY:
            return sign | all_ones
        return 2 ** (nbits - 1) - sign
    values, codes = reference_grid(name)
    if math.isinf(x) or Fraction(abs(x)) > values[-1]:
        code = codes[-1]
    else:
        magnitude = Fraction(abs(x))
        k = bisect.bisect_left(values, magnitude)
        if values[k] == magnitude:
            code = codes[k]
        else:
            below, above = magnitude - values[k - 1], values[k] - magnitude
            if below != above:
                code = codes[k - 1] if below < above else codes[k]
            else:
                code = codes[k - 1] if codes[k - 1] % 2 == 0 else codes[k]
    if code == codes[-1]:
        if name in IEEE_LIKE:
            code = inf_code
        elif name in NAN_ONLY:
            code = all_ones
        else:
            code = codes[-2]
    return sign | code


def reference_float32_bits(name: str, code: int) -> int:
    """The float32 bit pattern `decode` must give for a code: exact value, quiet NaN with sign."""
    kind, negative, magnitude = reference_value(name, code)
    sign = 0x8000_0000 if negative else 0
    if kind == "nan":
        return sign | 0x7FC0_0000
    if kind == "inf":
        return sign | 0x7F80_0000
    as_float32 = np.float32(float(magnitude))
    assert Fraction(float(as_float32)) == magnitude
    return sign | int(as_float32.view(np.uint32))


def reference_integer_code(dtype: DataType, x: float | int) -> int:
    """The code of `x` in an integer type: round half to even, saturate, NaN to 0."""
    bits, signed = dtype.nbits, dtype.is_signed
    lowest, highest = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    if isinstance(x, float) and math.isnan(x):
        value = 0
    elif isinstance(x, float) and math.isinf(x):
        value = highest if x > 0 else lowest
    else:
        value = min(max(round(Fraction(x)), lowest), highest)
    return value % 2**bits


# ---------------------------------------------------------------------------------------------
# Input sets, built from a format's values (taken from the reference or from ml_dtypes).

SPECIAL_BITS = [
    0x0000_0000,  # +0
    0x8000_0000,  # -0
    0x7F80_0000,  # +inf
    0xFF80_0000,  # -inf
    0x7FC0_0000,  # +NaN
    0xFFC0_0000,  # -NaN
    0x7FA0_0001,  # signalling NaN with a payload
    0xFFFF_FFFF,  # -NaN with every payload bit
    0x7F7F_FFFF,  # largest float32
    0x0000_0001,  # smallest float32 subnormal
    0x0080_0000,  # smallest float32 normal
]


def boundary_inputs(values: np.ndarray, beyond: float) -> np.ndarray:
    """float32 inputs at and around a format's values: every value, every halfway point (to the
    overflow target `beyond` too), their float32 neighbours one ulp away, both signs, specials."""
    points = np.append(np.asarray(values, dtype=np.float64), beyond)
    halfway = (points[:-1] + points[1:]) / 2
    with np.errstate(over="ignore"):
        base = np.concatenate([points, halfway]).astype(np.float32)
    base = base[np.isfinite(base)]
    around = [base, np.nextafter(base, np.float32(np.inf)), np.nextafter(base, np.float32(0))]
    magnitudes = np.concatenate(around)
    specials = np.array(SPECIAL_BITS, dtype=np.uint32).view(np.float32)
    return np.concatenate([magnitudes, -magnitudes, specials])


def random_inputs(rng: np.random.Generator, count: int, low: int, high: int) -> np.ndarray:
    """float32 inputs: a quarter with random bit patterns (NaNs with payloads included), the rest
    with a random sign and mantissa and an unbiased exponent in [low, high]."""
    any_bits = rng.integers(0, 2**32, size=count // 4, dtype=np.uint64).astype(np.uint32)
    rest = count - count // 4
    exponents = np.clip(rng.integers(low, high + 1, size=rest) + 127, 0, 254).astype(np.uint32)
    mantissas = rng.integers(0, 2**23, size=rest).astype(np.uint32)
    signs = rng.integers(0, 2, size=rest).astype(np.uint32)
    in_range = (signs << 31) | (exponents << 23) | mantissas
    return np.concatenate([any_bits, in_range]).view(np.float32)


def reference_inputs(dtype: DataType, rng: np.random.Generator, sample: int) -> np.ndarray:
    """Boundary inputs of a float type from the reference grid, keeping at most `sample` grid
    points besides the lowest and highest 40 (so 16-bit formats stay affordable)."""
    values, _ = reference_grid(dtype.name)
    finite = np.array([float(v) for v in values[:-1]])
    if finite.size > sample + 80:
        middle = rng.choice(np.arange(40, finite.size - 40), size=sample, replace=False)
        keep = np.concatenate(
            [np.arange(40), np.sort(middle), np.arange(finite.size - 40, finite.size)]
        )
        finite = finite[keep]
    return boundary_inputs(finite, float(values[-1]))


def exponent_range(dtype: DataType) -> tuple[int, int]:
    """Unbiased float32 exponents from a little below the smallest subnormal to past the max."""
    return math.floor(math.log2(dtype.smallest_subnormal)) - 3, math.ceil(math.log2(dtype.max)) + 2


def as_bits(values: np.ndarray) -> np.ndarray:
    """The float32 bit patterns of an array."""
    return np.asarray(values, dtype=np.float32).view(np.uint32)


SMALL_FLOATS = [dtype for dtype in dtypes.all_dtypes() if dtype.is_float and dtype.nbits <= 8]
NARROW_FLOATS = [dtype for dtype in dtypes.all_dtypes() if dtype.is_float and dtype.nbits <= 16]
SMALL_TYPES = [dtype for dtype in dtypes.all_dtypes() if dtype.nbits <= 8]
INTEGERS = [dtype for dtype in dtypes.all_dtypes() if not dtype.is_float]

ML_FLOATS = {
    "f8e4m3": ml_dtypes.float8_e4m3fn,
    "f8e5m2": ml_dtypes.float8_e5m2,
    "f8e3m4": ml_dtypes.float8_e3m4,
    "f6e2m3": ml_dtypes.float6_e2m3fn,
    "f6e3m2": ml_dtypes.float6_e3m2fn,
    "f4e2m1": ml_dtypes.float4_e2m1fn,
    "bf16": ml_dtypes.bfloat16,
}
# Formats no outside library has: the random sets go against the exact reference instead.
NOT_IN_ML_DTYPES = [dtype for dtype in NARROW_FLOATS if dtype.name not in {*ML_FLOATS, "f16"}]

# ---------------------------------------------------------------------------------------------
# Literal tables.


def test_f4e2m1_decode_table() -> None:
    expected = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    values = dtypes.f4e2m1.decode(np.arange(16, dtype=np.uint8))
    assert values.dtype == np.float32
    assert values.tolist() == expected + [-v for v in expected]
    assert np.signbit(values[8])


@pytest.mark.parametrize(
    "name, value, code",
    [
        ("f4e2m1", 0.25, 0x0),  # halfway 0 / 0.5: even code 0
        ("f4e2m1", 0.26, 0x1),
        ("f4e2m1", -0.25, 0x8),  # rounds to zero, keeps its sign
        ("f4e2m1", 2.5, 0x4),  # halfway 2 / 3: even code 4 (2.0)
        ("f4e2m1", 5.0, 0x6),  # halfway 4 / 6: even code 6 (4.0)
        ("f4e2m1", 7.0, 0x7),  # past max: saturates
        ("f4e2m1", -np.inf, 0xF),
        ("f4e2m1", np.nan, 0x8),  # +NaN -> -0, as ml_dtypes
        ("f4e2m1", -np.nan, 0x0),  # -NaN -> +0
        ("f3e1m1", 0.5, 0b000),  # values 0, 1, 2, 3
        ("f3e1m1", 1.5, 0b010),
        ("f3e1m1", 2.5, 0b010),
        ("f3e1m1", 3.5, 0b011),
        ("f3e1m1", -1.0, 0b101),
        ("f3e2m0", 3.0, 0b010),  # values 0, 1, 2, 4: halfway 2 / 4 is code 2
        ("f3e2m0", 3.01, 0b011),
        ("f6e3m2", 28.0, 0x1F),
        ("f6e3m2", 1e30, 0x1F),
        ("f6e3m2", 0.0625, 0x01),
        ("f8e4m3", 1.0, 0x38),
        ("f8e4m3", -2.0, 0xC0),
        ("f8e4m3", 448.0, 0x7E),
        ("f8e4m3", 464.0, 0x7E),  # halfway 448 / 480 ties to 448
        ("f8e4m3", 464.0001, 0x7F),  # past the boundary: NaN
        ("f8e4m3", np.inf, 0x7F),
        ("f8e4m3", -np.inf, 0xFF),
        ("f8e4m3", -np.nan, 0xFF),
        ("f8e4m3", 2.0**-9, 0x01),
        ("f8e4m3", 2.0**-10, 0x00),
        ("f8e4m3", -(2.0**-10), 0x80),
        ("f8e4m3", 1.5 * 2.0**-10, 0x01),
        ("f8e5m2", 1.75, 0x3F),
        ("f8e5m2", 1.875, 0x40),  # halfway 1.75 / 2.0: even code 0x40
        ("f8e5m2", 57344.0, 0x7B),
        ("f8e5m2", 61439.0, 0x7B),
        ("f8e5m2", 61440.0, 0x7C),  # halfway to 65536: overflows to inf
        ("f8e5m2", -np.inf, 0xFC),
        ("f8e5m2", np.nan, 0x7E),
        ("f8e5m2", 2.0**-16, 0x01),
        ("f8e5m2", -(2.0**-17), 0x80),
        ("f8e3m4", 1.0, 0x30),
        ("f8e3m4", 15.74, 0x6F),
        ("f8e3m4", 15.75, 0x70),
        ("f8e3m4", -np.nan, 0xF8),
        ("f16", 1.0, 0x3C00),
        ("f16", 65519.0, 0x7BFF),
        ("f16", 65520.0, 0x7C00),
        ("f16", 2.0**-24, 0x0001),
        ("f16", np.nan, 0x7E00),
        ("bf16", 1.0, 0x3F80),
        ("bf16", 1.00390625, 0x3F80),  # halfway: even
        ("bf16", 1.01171875, 0x3F82),  # 1 + 3 * 2^-8: halfway, rounds up to even
        ("bf16", 3.4028234663852886e38, 0x7F80),
        ("bf16", -np.nan, 0xFFC0),
        ("f32", 0.1, 0x3DCCCCCD),  # float64 input converts to float32 first
        ("f32", 1e40, 0x7F800000),
        ("f32", -0.0, 0x80000000),
    ],
)
def test_float_encode_table(name: str, value: float, code: int) -> None:
    dtype = getattr(dtypes, name)
    assert int(dtype.encode(value)) == code
    assert dtype.encode([value]).dtype == dtype.code_dtype


@pytest.mark.parametrize(
    "name, value, code",
    [
        ("i4", 2.5, 0b0010),  # half to even
        ("i4", 3.5, 0b0100),
        ("i4", -2.5, 0b1110),
        ("i4", 7.5, 0b0111),  # rounds to 8, saturates to 7
        ("i4", -9, 0b1000),
        ("i4", np.nan, 0),
        ("i4", np.inf, 0b0111),
        ("i4", -np.inf, 0b1000),
        ("u4", -1, 0),
        ("u4", 16, 15),
        ("u4", 0.5, 0),
        ("u4", 1.5, 2),
        ("i1", -0.6, 1),
        ("i1", 0.6, 0),
        ("u1", True, 1),
        ("i8", -128, 0x80),
        ("u8", np.uint64(2**64 - 1), 0xFF),
        ("i32", -(2**63), 0x8000_0000),
        ("i32", 2.0**40, 0x7FFF_FFFF),
        ("i32", 16777217.0, 16777217),  # float64 input rounds directly, no float32 step
        ("i32", -1, 0xFFFF_FFFF),
    ],
)
def test_integer_encode_table(name: str, value: float, code: int) -> None:
    dtype = getattr(dtypes, name)
    assert int(dtype.encode(value)) == code


def test_integer_decode_table() -> None:
    assert dtypes.i4.decode(np.arange(16)).tolist() == list(range(8)) + list(range(-8, 0))
    assert dtypes.u3.decode([0, 5, 7]).tolist() == [0, 5, 7]
    assert dtypes.i1.decode([0, 1]).tolist() == [0, -1]
    decoded = dtypes.i32.decode(np.array([0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF], np.uint32))
    assert decoded.tolist() == [2**31 - 1, -(2**31), -1] and decoded.dtype == np.int64


@pytest.mark.parametrize(
    "codes, src, dst, expected",
    [
        ([0x7F, 0xFF], "f8e4m3", "f4e2m1", [0x8, 0x0]),  # NaN -> zero of the other sign
        ([0x7C, 0xFC], "f8e5m2", "f8e4m3", [0x7F, 0xFF]),  # inf -> NaN
        ([0x7C, 0x7B], "f8e5m2", "f6e3m2", [0x1F, 0x1F]),  # inf and 57344 saturate
        # 448, 1.5, then the halfway points 1.125 and 1.375, which tie to even
        ([0x7E, 0x3C, 0x39, 0x3B], "f8e4m3", "f8e5m2", [0x5F, 0x3E, 0x3C, 0x3E]),
        ([0x7, 0x3], "f4e2m1", "u2", [3, 2]),  # 6 saturates, 1.5 rounds to 2
        ([0x9, 0x19, 0x15], "f5e2m2", "i4", [2, 0xE, 0xF]),  # 2.5 -> 2, -2.5 -> -2, -1.25 -> -1
        ([0x7F, 0xFF], "f8e4m3", "i8", [0, 0]),  # NaN -> 0
        ([0x7C], "f8e5m2", "i8", [0x7F]),  # inf saturates
        ([0x80, 0x7F], "i8", "u4", [0, 15]),
        ([0x7F, 0x80], "i8", "i4", [0x7, 0x8]),
        ([255], "u8", "f4e2m1", [0x7]),
        ([16777217], "i32", "f32", [0x4B80_0000]),  # rounds to 16777216 in float32
        ([16777217], "i32", "bf16", [0x4B80]),
        ([0x3C00], "f16", "f8e5m2", [0x3C]),
        ([0x3C01], "f16", "f8e5m2", [0x3C]),
        ([0x7E01], "f16", "f16", [0x7E01]),  # the same type is the identity, payload kept
    ],
)
def test_convert_table(codes: list[int], src: str, dst: str, expected: list[int]) -> None:
    result = dtypes.convert(codes, dtypes.from_name(src), dtypes.from_name(dst))
    assert result.tolist() == expected
    assert result.dtype == dtypes.from_name(dst).code_dtype


def test_f32_codes_are_the_float32_bits() -> None:
    bits = np.array(SPECIAL_BITS + [0x3F80_0000, 0xC049_0FDB], dtype=np.uint32)
    values = bits.view(np.float32)
    assert np.array_equal(dtypes.f32.encode(values), bits)
    assert np.array_equal(as_bits(dtypes.f32.decode(bits)), bits)


# ---------------------------------------------------------------------------------------------
# Against the exact reference.


@pytest.mark.parametrize("dtype", NARROW_FLOATS, ids=str)
def test_decode_every_code_matches_reference(dtype: DataType) -> None:
    codes = np.arange(2**dtype.nbits)
    expected = [reference_float32_bits(dtype.name, code) for code in codes.tolist()]
    assert as_bits(dtype.decode(codes)).tolist() == expected


@pytest.mark.parametrize("dtype", NARROW_FLOATS, ids=str)
def test_encode_boundary_inputs_match_reference(dtype: DataType) -> None:
    rng = np.random.default_rng(dtype.nbits)
    inputs = reference_inputs(dtype, rng, sample=400)
    inputs = np.concatenate([inputs, random_inputs(rng, 2000, *exponent_range(dtype))])
    expected = [reference_encode(dtype.name, x) for x in inputs.tolist()]
    assert dtype.encode(inputs).tolist() == expected


@pytest.mark.parametrize("dtype", NOT_IN_ML_DTYPES, ids=str)
def test_encode_random_inputs_match_reference(dtype: DataType) -> None:
    rng = np.random.default_rng(100 + dtype.nbits)
    inputs = random_inputs(rng, 15_000, *exponent_range(dtype))
    expected = [reference_encode(dtype.name, x) for x in inputs.tolist()]
    assert dtype.encode(inputs).tolist() == expected


@pytest.mark.parametrize("dtype", SMALL_FLOATS, ids=str)
def test_encode_of_decode_is_identity_except_nan(dtype: DataType) -> None:
    codes = np.arange(2**dtype.nbits, dtype=np.uint8)
    values = dtype.decode(codes)
    keep = ~np.isnan(values)
    assert np.array_equal(dtype.encode(values[keep]), codes[keep])


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_integer_encode_matches_reference(dtype: DataType) -> None:
    span = 2.0 ** min(dtype.nbits, 34)
    halves = np.arange(-span - 3, span + 3, 0.5) if dtype.nbits <= 8 else np.array([])
    rng = np.random.default_rng(dtype.nbits)
    random_floats = rng.uniform(-2 * span, 2 * span, size=500)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e300, -1e300])
    floats = np.concatenate([halves, random_floats, random_floats.round() + 0.5, specials])
    expected = [reference_integer_code(dtype, x) for x in floats.tolist()]
    assert dtype.encode(floats).tolist() == expected
    with np.errstate(over="ignore"):
        floats32 = floats.astype(np.float32)
    expected = [reference_integer_code(dtype, x) for x in floats32.tolist()]
    assert dtype.encode(floats32).tolist() == expected
    integers = np.concatenate([np.arange(-300, 300), rng.integers(-(2**62), 2**62, size=200)])
    expected = [reference_integer_code(dtype, x) for x in integers.tolist()]
    assert dtype.encode(integers).tolist() == expected


def reference_source_value(src: DataType, code: int) -> float | int:
    """What a code of `src` stands for: a float32 value (as a Python float) or an int."""
    if not src.is_float:
        return code - 2**src.nbits if src.is_signed and code >> (src.nbits - 1) else code
    bits = code if src.name == "f32" else reference_float32_bits(src.name, code)
    return float(np.uint32(bits).view(np.float32))


@functools.cache
def reference_encode_bits(name: str, bits: int) -> int:
    """`reference_encode` of the float32 with bit pattern `bits`, memoised by bits (not by value,
    which would confuse -0 and +0): conversions between small types meet few distinct values."""
    return reference_encode(name, float(np.uint32(bits).view(np.float32)))


def reference_convert(src: DataType, dst: DataType, code: int) -> int:
    """The contract's conversion of one code: integers and floats meet through float32."""
    value = reference_source_value(src, code)
    if not dst.is_float:
        return reference_integer_code(dst, value)
    return reference_encode_bits(dst.name, int(np.float32(value).view(np.uint32)))


@pytest.mark.parametrize("src", SMALL_TYPES, ids=str)
def test_convert_every_code_of_small_types_matches_reference(src: DataType) -> None:
    codes = list(range(2**src.nbits))
    for dst in SMALL_TYPES:
        if dst != src:
            expected = [reference_convert(src, dst, code) for code in codes]
            assert dtypes.convert(codes, src, dst).tolist() == expected, dst


@pytest.mark.parametrize("src", ["f16", "bf16", "f32", "i32"])
def test_convert_from_wide_types_matches_reference(src: str) -> None:
    source = dtypes.from_name(src)
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 2**source.nbits, size=300, dtype=np.uint64).astype(np.uint32)
    for dst in [dtype for dtype in SMALL_TYPES + [dtypes.f16, dtypes.bf16] if dtype != source]:
        expected = [reference_convert(source, dst, code) for code in codes.tolist()]
        assert dtypes.convert(codes, source, dst).tolist() == expected, dst


@pytest.mark.parametrize("dtype", NARROW_FLOATS + INTEGERS, ids=str)
def test_convert_to_the_same_type_is_identity(dtype: DataType) -> None:
    codes = np.arange(min(2**dtype.nbits, 2**16), dtype=np.uint32)
    assert np.array_equal(dtypes.convert(codes, dtype, dtype), codes)


# ---------------------------------------------------------------------------------------------
# Against ml_dtypes and NumPy.


def ml_inputs(dtype: DataType, reference: type, count: int) -> np.ndarray:
    """At least `count` float32 inputs built from the values ml_dtypes gives for every code (the
    overflow target is max plus the top binade's ulp: these formats have mantissa bits)."""
    codes = np.arange(2**dtype.nbits, dtype=dtype.code_dtype)
    with np.errstate(invalid="ignore"):
        values = codes.view(reference).astype(np.float32).astype(np.float64)
    finite = np.unique(np.abs(values[np.isfinite(values)]))
    beyond = 2 * finite[-1] - finite[-2]
    boundary = boundary_inputs(finite, beyond)
    rng = np.random.default_rng(dtype.nbits)
    random = random_inputs(rng, max(count - boundary.size, 0), *exponent_range(dtype))
    return np.concatenate([boundary, random])


@pytest.mark.parametrize("name", sorted(ML_FLOATS))
def test_encode_matches_ml_dtypes(name: str) -> None:
    dtype, reference = getattr(dtypes, name), ML_FLOATS[name]
    inputs = ml_inputs(dtype, reference, 200_000)
    assert inputs.size >= 200_000
    with np.errstate(over="ignore", invalid="ignore"):
        expected = inputs.astype(reference).view(dtype.code_dtype)
    assert np.array_equal(dtype.encode(inputs), expected)


@pytest.mark.parametrize("name", sorted(ML_FLOATS))
def test_decode_every_code_matches_ml_dtypes(name: str) -> None:
    dtype, reference = getattr(dtypes, name), ML_FLOATS[name]
    codes = np.arange(2**dtype.nbits, dtype=dtype.code_dtype)
    expected = codes.view(reference).astype(np.float32)
    values = dtype.decode(codes)
    is_nan = np.isnan(expected)
    assert np.array_equal(np.isnan(values), is_nan)
    assert np.array_equal(np.signbit(values), np.signbit(expected))
    assert np.array_equal(as_bits(values)[~is_nan], as_bits(expected)[~is_nan])


def test_f16_matches_numpy() -> None:
    codes = np.arange(2**16, dtype=np.uint16)
    expected_values = codes.view(np.float16).astype(np.float32)
    values = dtypes.f16.decode(codes)
    finite = ~np.isnan(expected_values)
    assert np.array_equal(as_bits(values)[finite], as_bits(expected_values)[finite])
    inputs = ml_inputs(dtypes.f16, np.float16, 200_000)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = inputs.astype(np.float16).view(np.uint16)
    encoded = dtypes.f16.encode(inputs)
    is_nan = np.isnan(inputs)
    # NumPy keeps NaN payload bits; the contract drops them.
    assert np.array_equal(encoded[~is_nan], expected[~is_nan])
    assert np.array_equal(encoded[is_nan], (expected[is_nan] & 0x8000) | 0x7E00)


ML_INTEGERS = {
    "i1": ml_dtypes.int1,
    "u1": ml_dtypes.uint1,
    "i2": ml_dtypes.int2,
    "u2": ml_dtypes.uint2,
    "i4": ml_dtypes.int4,
    "u4": ml_dtypes.uint4,
    "i8": np.int8,
    "u8": np.uint8,
}


@pytest.mark.parametrize("name", sorted(ML_INTEGERS))
def test_integer_codes_match_ml_dtypes(name: str) -> None:
    dtype, reference = getattr(dtypes, name), ML_INTEGERS[name]
    codes = np.arange(2**dtype.nbits, dtype=np.uint8)
    values = codes.view(reference).astype(np.int64)
    assert np.array_equal(dtype.decode(codes), values)
    assert np.array_equal(dtype.encode(values), codes)
    assert np.array_equal(dtype.encode(values.astype(np.float32)), codes)


def test_convert_between_ml_dtypes_formats_matches_ml_dtypes() -> None:
    for src_name, src_type in ML_FLOATS.items():
        src = getattr(dtypes, src_name)
        codes = np.arange(2**src.nbits, dtype=src.code_dtype)
        for dst_name, dst_type in ML_FLOATS.items():
            if dst_name == src_name:
                continue
            dst = getattr(dtypes, dst_name)
            with np.errstate(over="ignore", invalid="ignore"):
                expected = codes.view(src_type).astype(np.float32).astype(dst_type)
            result = dtypes.convert(codes, src, dst)
            assert np.array_equal(result, expected.view(dst.code_dtype)), (src, dst)


# ---------------------------------------------------------------------------------------------
# Properties.

finite_float32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@given(dtype=st.sampled_from(NARROW_FLOATS), x=finite_float32, y=finite_float32)
def test_encode_is_monotone(dtype: DataType, x: float, y: float) -> None:
    """Monotone over the values a type keeps; an input past its finite range may encode as NaN
    (a type without infinities: e4m3's 465 is), which orders with nothing."""
    low, high = sorted([x, y])
    decoded = dtype.decode(dtype.encode(np.array([low, high], dtype=np.float32)))
    for value, source in zip(decoded, (low, high)):
        if math.isnan(value):
            assert source > dtype.max or source < dtype.min, (source, dtype)
    if not np.isnan(decoded).any():
        assert decoded[0] <= decoded[1]


@given(dtype=st.sampled_from(NARROW_FLOATS + INTEGERS), x=finite_float32)
def test_encode_rounds_to_a_nearest_value(dtype: DataType, x: float) -> None:
    code = int(dtype.encode(np.float32(x)))
    value = float(dtype.decode(code))
    if x > dtype.max or x < dtype.min:
        assert not math.isfinite(value) or value == (dtype.max if x > 0 else dtype.min)
        return
    for neighbour in (code - 1, code + 1):
        if 0 <= neighbour < 2**dtype.nbits:
            other = float(dtype.decode(neighbour))
            assert math.isnan(other) or abs(value - x) <= abs(other - x)


@given(dtype=st.sampled_from(NARROW_FLOATS), x=finite_float32)
def test_encode_of_negation_flips_the_sign_bit(dtype: DataType, x: float) -> None:
    codes = dtype.encode(np.array([x, -x], dtype=np.float32)).astype(np.int64)
    assert codes[0] ^ codes[1] == 1 << (dtype.nbits - 1)


WIDENINGS = [
    ("f4e2m1", "f6e2m3"),
    ("f4e2m1", "f8e4m3"),
    ("f6e3m2", "f8e5m2"),
    ("f3e1m1", "u2"),
    ("f8e4m3", "f16"),
    ("f8e5m2", "f16"),
    ("f8e3m4", "bf16"),
    ("f16", "f32"),
    ("bf16", "f32"),
    ("i4", "i8"),
    ("u8", "i32"),
    ("i8", "f16"),
]


@pytest.mark.parametrize("narrow, wide", WIDENINGS)
@given(data=st.data())
def test_widening_is_exact_and_narrowing_undoes_it(
    narrow: str, wide: str, data: st.DataObject
) -> None:
    src, dst = dtypes.from_name(narrow), dtypes.from_name(wide)
    codes = np.array(data.draw(st.lists(st.integers(0, 2**src.nbits - 1), min_size=1, max_size=64)))
    values = src.decode(codes)
    keep = ~np.isnan(values) & ~((values < 0) & (dst.min == 0))
    codes, values = codes[keep], values[keep]
    widened = dtypes.convert(codes, src, dst)
    assert np.array_equal(dst.decode(widened), values)
    back = dtypes.convert(widened, dst, src)
    assert np.array_equal(src.decode(back), values)


# ---------------------------------------------------------------------------------------------
# Shapes, errors and speed.


def test_shapes_and_result_dtypes() -> None:
    grid = np.linspace(-4, 4, 12, dtype=np.float32).reshape(3, 4)
    for dtype, code_type, value_type in [
        (dtypes.f4e2m1, np.uint8, np.float32),
        (dtypes.bf16, np.uint16, np.float32),
        (dtypes.f32, np.uint32, np.float32),
        (dtypes.i3, np.uint8, np.int64),
        (dtypes.i32, np.uint32, np.int64),
    ]:
        codes = dtype.encode(grid)
        assert codes.shape == (3, 4) and codes.dtype == code_type
        values = dtype.decode(codes)
        assert values.shape == (3, 4) and values.dtype == value_type
    assert dtypes.f8e4m3.encode(1.0).shape == ()
    assert dtypes.u4.decode(np.array([], dtype=np.uint8)).shape == (0,)


def test_decode_rejects_bad_codes() -> None:
    with pytest.raises(DtypeError, match=r"code 16 is not a bit pattern of u4.*\[0, 15\]"):
        dtypes.u4.decode([1, 16])
    with pytest.raises(DtypeError, match=r"code -1 is not a bit pattern of f4e2m1"):
        dtypes.f4e2m1.decode(np.array([-1, 2]))
    with pytest.raises(DtypeError, match=r"codes of f16 must be an integer array.*float64"):
        dtypes.f16.decode([1.0])
    with pytest.raises(DtypeError, match=r"code 256 is not a bit pattern of f8e4m3"):
        dtypes.f8e4m3.decode(np.array([256], dtype=np.uint16))


def test_encode_rejects_non_numeric_values() -> None:
    with pytest.raises(DtypeError, match=r"values to encode as u4 must be .* dtype <U1"):
        dtypes.u4.encode(["a"])
    with pytest.raises(DtypeError, match=r"values to encode as f16 must be .* complex128"):
        dtypes.f16.encode([1j])


def test_convert_rejects_non_types_and_bad_codes() -> None:
    with pytest.raises(DtypeError, match=r"the destination type must be a DataType.*'u4'"):
        dtypes.convert([1], dtypes.u8, "u4")
    with pytest.raises(DtypeError, match=r"the source type must be a DataType.*None"):
        dtypes.convert([1], None, dtypes.u4)
    with pytest.raises(DtypeError, match=r"code 8 is not a bit pattern of u3"):
        dtypes.convert([8], dtypes.u3, dtypes.u3)


@pytest.mark.parametrize("dtype", [dtypes.f4e2m1, dtypes.f8e4m3, dtypes.bf16, dtypes.i4], ids=str)
def test_a_million_values_encode_and_decode_well_under_a_second(dtype: DataType) -> None:
    values = np.random.default_rng(0).standard_normal(1_000_000).astype(np.float32)
    start = time.perf_counter()
    codes = dtype.encode(values)
    dtype.decode(codes)
    assert time.perf_counter() - start < 1.0

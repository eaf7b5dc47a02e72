"""Low-precision data types of the tile IR: their formats, exact codecs, conversions and storage.

A data type says how a value is written as a *code*, the unsigned integer holding its bit pattern.
The IR works on codes (that is what registers and memory hold); NumPy values appear only at the
edges, through `DataType.encode` (values -> codes) and `DataType.decode` (codes -> values).

Integers: ``i1..i8``, ``i32`` (two's complement) and ``u1..u8``. Floats: ``f16``, ``bf16``, ``f32``
and every ``fXeYmZ`` with X = 1 + Y + Z bits, 3 <= X <= 8, Y >= 1 exponent and Z >= 0 mantissa bits.
A float code is ``sign | exponent field e | mantissa field m`` (sign most significant) and, with
bias ``B = 2^(Y-1) - 1``, means::

    e == 0:   (-1)^sign * m / 2^Z * 2^(1 - B)          (zero and the subnormals)
    e > 0:    (-1)^sign * (1 + m / 2^Z) * 2^(e - B)    (the normals)

except for the special codes of three classes of format:

    ============  ===========================  =============================================
    class         formats                      special codes
    ============  ===========================  =============================================
    IEEE-like     f8e5m2, f8e3m4, f16, bf16,   e all ones: m == 0 is +-inf, m != 0 is NaN
                  f32
    NaN only      f8e4m3 (e4m3fn)              e and m all ones is NaN; no inf
    finite        every other fXeYmZ           none: the all-ones exponent is a binade
    ============  ===========================  =============================================

Worked example, ``f4e2m1`` (ml_dtypes' ``float4_e2m1fn``, bias 1): the eight non-negative codes
0b0000 .. 0b0111 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; code 0b1011 is -1.5.

Conversion from float32 rounds once to nearest, ties to the even code, and then applies the class's
rule for what does not fit (bit-identical to ml_dtypes' ``astype`` from float32)::

    class       overflow and +-inf     NaN                       values rounding to zero
    finite      saturate to +-max      +NaN -> -0, -NaN -> +0    keep their sign
    NaN only    NaN of the same sign   NaN of the same sign      keep their sign
    IEEE-like   +-inf                  NaN of the same sign      keep their sign

Every other input converts to float32 first (so float64 values are rounded twice). Integers
convert from floats by rounding half to even and saturating, NaN giving 0, and from integers by
saturating. Storage is a dense bitstream, element k in bits [k*b, (k+1)*b), least significant bit
first (`pack`, `unpack`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

_FLOAT32_EXPONENT_BIAS = 127
_FLOAT32_MANTISSA_BITS = 23
_FLOAT32_INF_BITS = 0x7F80_0000
_FLOAT32_QUIET_NAN_BITS = 0x7FC0_0000

# (exponent bits, mantissa bits) of the floats whose all-ones exponent holds inf and NaN.
_IEEE_LIKE = frozenset({(5, 2), (3, 4), (5, 10), (8, 7), (8, 23)})
# (exponent bits, mantissa bits) of the floats whose one special code, all ones, is NaN.
_NAN_ONLY = frozenset({(4, 3)})
# Floats wider than a byte, by (exponent bits, mantissa bits), and their short and long names.
_WIDE_FLOATS = {
    (5, 10): ("f16", "float16"),
    (8, 7): ("bf16", "bfloat16"),
    (8, 23): ("f32", "float32"),
}


class DtypeError(ValueError):
    """An invalid data type, data type name, code or value array."""


@dataclass(frozen=True, repr=False)
class DataType:
    """One data type of the contract: an integer or a float format.

    Construct through the module-level names (`u4`, `f6e3m2`, ...) or `from_name`; direct
    construction validates that the fields describe one of the contract's types.

    Fields (equality and hash): `nbits`, `is_float`, `is_signed`, `exponent_bits` and
    `mantissa_bits` (None for integers). Derived attributes:

    - `name`: the short name (``"u4"``, ``"f6e3m2"``, ``"bf16"``); `repr` and `str` print it.
    - `long_name`: the ml_dtypes-style name (``"uint4"``, ``"float6_e3m2fn"``, ``"bfloat16"``).
    - `bias`: the exponent bias (None for integers).
    - `has_inf`, `has_nan`: whether the format has infinities / NaNs.
    - `min`, `max`: the most negative and the largest finite value (Python int or float).
    - `smallest_normal`, `smallest_subnormal`: the smallest positive normal value and the smallest
      positive value, 2^(1 - bias) and 2^(1 - bias - mantissa_bits); they are equal when
      `mantissa_bits` is 0 (no subnormals). None for integers.
    - `code_dtype`: the NumPy dtype of codes: uint8 up to 8 bits, uint16, uint32.
    """

    nbits: int
    is_float: bool
    is_signed: bool
    exponent_bits: int | None = None
    mantissa_bits: int | None = None
    name: str = field(init=False, compare=False)
    long_name: str = field(init=False, compare=False)
    bias: int | None = field(init=False, compare=False)
    has_inf: bool = field(init=False, compare=False)
    has_nan: bool = field(init=False, compare=False)
    min: int | float = field(init=False, compare=False)
    max: int | float = field(init=False, compare=False)
    smallest_normal: float | None = field(init=False, compare=False)
    smallest_subnormal: float | None = field(init=False, compare=False)
    code_dtype: np.dtype = field(init=False, compare=False)

    def __post_init__(self) -> None:
        """Validate the fields and fill in the derived attributes."""
        if self.is_float:
            self._init_float()
        else:
            self._init_integer()
        width = 8 if self.nbits <= 8 else self.nbits
        object.__setattr__(self, "code_dtype", np.dtype(f"uint{width}"))

    def _init_integer(self) -> None:
        """Check and derive the attributes of `i1..i8`, `i32` and `u1..u8`."""
        nbits = self.nbits
        if not _is_int(nbits) or not (1 <= nbits <= 8 or (nbits == 32 and self.is_signed)):
            raise DtypeError(
                f"an integer type has 1 to 8 bits (or 32 when signed), got nbits={nbits!r}"
            )
        if self.exponent_bits is not None or self.mantissa_bits is not None:
            raise DtypeError(
                "an integer type has exponent_bits=None and mantissa_bits=None, got "
                f"{self.exponent_bits!r} and {self.mantissa_bits!r}"
            )
        prefix = "i" if self.is_signed else "u"
        derived = {
            "name": f"{prefix}{nbits}",
            "long_name": f"{'int' if self.is_signed else 'uint'}{nbits}",
            "bias": None,
            "has_inf": False,
            "has_nan": False,
            "min": -(1 << (nbits - 1)) if self.is_signed else 0,
            "max": (1 << (nbits - 1)) - 1 if self.is_signed else (1 << nbits) - 1,
            "smallest_normal": None,
            "smallest_subnormal": None,
        }
        for key, value in derived.items():
            object.__setattr__(self, key, value)

    def _init_float(self) -> None:
        """Check and derive the attributes of `f16`, `bf16`, `f32` and the `fXeYmZ` formats."""
        nbits, e_bits, m_bits = self.nbits, self.exponent_bits, self.mantissa_bits
        fields_ok = _is_int(nbits) and _is_int(e_bits) and _is_int(m_bits)
        small_ok = fields_ok and 3 <= nbits <= 8 and e_bits >= 1 and m_bits >= 0
        if not fields_ok or nbits != 1 + e_bits + m_bits or not self.is_signed:
            raise DtypeError(
                "a float type is signed with nbits == 1 + exponent_bits + mantissa_bits, got "
                f"nbits={nbits!r}, exponent_bits={e_bits!r}, mantissa_bits={m_bits!r}, "
                f"is_signed={self.is_signed!r}"
            )
        if not small_ok and (e_bits, m_bits) not in _WIDE_FLOATS:
            raise DtypeError(
                f"no float type has {e_bits} exponent and {m_bits} mantissa bits: expected 3 to 8 "
                "bits with at least one exponent bit, or f16 (5, 10), bf16 (8, 7), f32 (8, 23)"
            )
        has_inf = (e_bits, m_bits) in _IEEE_LIKE
        has_nan = has_inf or (e_bits, m_bits) in _NAN_ONLY
        bias = (1 << (e_bits - 1)) - 1
        if (e_bits, m_bits) in _WIDE_FLOATS:
            name, long_name = _WIDE_FLOATS[e_bits, m_bits]
        else:
            name = f"f{nbits}e{e_bits}m{m_bits}"
            long_name = f"float{nbits}_e{e_bits}m{m_bits}" + ("" if has_inf else "fn")
        # The largest finite code: all ones, less the NaN code (NaN only) or the all-ones
        # exponent (IEEE-like).
        max_code = (1 << (nbits - 1)) - 1
        if has_inf:
            max_code -= 1 << m_bits
        elif has_nan:
            max_code -= 1
        max_exponent = (max_code >> m_bits) - bias
        max_significand = (1 << m_bits) + (max_code & ((1 << m_bits) - 1))
        largest = float(max_significand * 2.0 ** (max_exponent - m_bits))
        derived = {
            "name": name,
            "long_name": long_name,
            "bias": bias,
            "has_inf": has_inf,
            "has_nan": has_nan,
            "min": -largest,
            "max": largest,
            "smallest_normal": 2.0 ** (1 - bias),
            "smallest_subnormal": 2.0 ** (1 - bias - m_bits),
        }
        for key, value in derived.items():
            object.__setattr__(self, key, value)

    def __repr__(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name

    def encode(self, values: ArrayLike) -> np.ndarray:
        """Return the codes of `values` in this type, an array of `code_dtype` of the same shape.

        Floats: the values convert to float32 (NumPy's rounding), then round once to nearest with
        ties to the even code and follow the class rules of the module docstring for overflow,
        inf, NaN and signed zero; f32 keeps the float32 bits unchanged. Integers: float values
        round half to even (in float64, without a float32 step) and saturate to [min, max], NaN
        gives 0; integer values saturate. Codes are two's complement for signed integers, e.g.
        ``i4.encode([-1, 9.5]) == [0b1111, 0b0111]`` and ``f4e2m1.encode([0.25, 7.0]) == [0, 7]``.

        Raises DtypeError when `values` is not numeric (bool, integer or real float).
        """
        array = np.asarray(values)
        if array.dtype.kind not in "biuf":
            raise DtypeError(
                f"values to encode as {self.name} must be booleans, integers or real floats, "
                f"got an array of dtype {array.dtype}"
            )
        if not self.is_float:
            return _encode_integer(self, array)
        with np.errstate(over="ignore", invalid="ignore"):
            as_float32 = array.astype(np.float32)
        if self.nbits == 32:
            return as_float32.view(np.uint32).copy()
        return _encode_float32(self, as_float32)

    def decode(self, codes: ArrayLike) -> np.ndarray:
        """Return the values of `codes`, an array of the same shape.

        Float types give float32 (every value of every float type is exact in float32; a NaN code
        gives the quiet NaN 0x7FC00000 with the code's sign, except f32, whose codes are the
        float32 bits unchanged). Integer types give int64 (signed codes are two's complement).

        Raises DtypeError when `codes` is not an integer array with every element in
        [0, 2^nbits).
        """
        array = _checked_codes(self, codes)
        if self.nbits == 32:
            bits = array.astype(np.uint32)
            return bits.view(np.float32) if self.is_float else bits.view(np.int32).astype(np.int64)
        return _decode_table(self)[array]


def _is_int(value: Any) -> bool:
    """Whether `value` is an int (and not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _integer(nbits: int, signed: bool) -> DataType:
    """The integer type of `nbits` bits."""
    return DataType(nbits=nbits, is_float=False, is_signed=signed)


def _float(exponent_bits: int, mantissa_bits: int) -> DataType:
    """The float type with the given field widths and a sign bit."""
    return DataType(
        nbits=1 + exponent_bits + mantissa_bits,
        is_float=True,
        is_signed=True,
        exponent_bits=exponent_bits,
        mantissa_bits=mantissa_bits,
    )


i1, i2, i3, i4 = _integer(1, True), _integer(2, True), _integer(3, True), _integer(4, True)
i5, i6, i7, i8 = _integer(5, True), _integer(6, True), _integer(7, True), _integer(8, True)
i32 = _integer(32, True)
u1, u2, u3, u4 = _integer(1, False), _integer(2, False), _integer(3, False), _integer(4, False)
u5, u6, u7, u8 = _integer(5, False), _integer(6, False), _integer(7, False), _integer(8, False)

f3e1m1, f3e2m0 = _float(1, 1), _float(2, 0)
f4e1m2, f4e2m1, f4e3m0 = _float(1, 2), _float(2, 1), _float(3, 0)
f5e1m3, f5e2m2, f5e3m1, f5e4m0 = _float(1, 3), _float(2, 2), _float(3, 1), _float(4, 0)
f6e1m4, f6e2m3, f6e3m2 = _float(1, 4), _float(2, 3), _float(3, 2)
f6e4m1, f6e5m0 = _float(4, 1), _float(5, 0)
f7e1m5, f7e2m4, f7e3m3 = _float(1, 5), _float(2, 4), _float(3, 3)
f7e4m2, f7e5m1, f7e6m0 = _float(4, 2), _float(5, 1), _float(6, 0)
f8e1m6, f8e2m5, f8e3m4, f8e4m3 = _float(1, 6), _float(2, 5), _float(3, 4), _float(4, 3)
f8e5m2, f8e6m1, f8e7m0 = _float(5, 2), _float(6, 1), _float(7, 0)
f16, bf16, f32 = _float(5, 10), _float(8, 7), _float(8, 23)

_ALL = (
    (i1, i2, i3, i4, i5, i6, i7, i8, i32, u1, u2, u3, u4, u5, u6, u7, u8)
    + (f3e1m1, f3e2m0, f4e1m2, f4e2m1, f4e3m0, f5e1m3, f5e2m2, f5e3m1, f5e4m0)
    + (f6e1m4, f6e2m3, f6e3m2, f6e4m1, f6e5m0, f7e1m5, f7e2m4, f7e3m3, f7e4m2, f7e5m1, f7e6m0)
    + (f8e1m6, f8e2m5, f8e3m4, f8e4m3, f8e5m2, f8e6m1, f8e7m0, f16, bf16, f32)
)


def all_dtypes() -> tuple[DataType, ...]:
    """Every data type of the contract: signed integers, unsigned integers, then floats by width.

    The floats of 3 to 8 bits come in order of width, then of exponent bits; f16, bf16 and f32
    come last.
    """
    return _ALL


def _names() -> dict[str, DataType]:
    """Every accepted name: short and long names, and the long names without a final 'fn'."""
    names: dict[str, DataType] = {}
    for dtype in _ALL:
        names[dtype.name] = dtype
        names[dtype.long_name] = dtype
        if dtype.long_name.endswith("fn"):
            names[dtype.long_name[: -len("fn")]] = dtype
    # ml_dtypes' float8_e4m3 is an IEEE-like type with inf: the short form is not our e4m3fn.
    del names["float8_e4m3"]
    return names


_BY_NAME = _names()


def from_name(name: str) -> DataType:
    """Return the data type called `name`.

    Accepted: every short name (``"u4"``, ``"i3"``, ``"f6e3m2"``, ``"f16"``, ``"bf16"``, ``"f32"``,
    ``"i32"``) and every long name (``"uint4"``, ``"int3"``, ``"float6_e3m2"``,
    ``"float6_e3m2fn"``, ``"float8_e4m3fn"``, ``"float8_e5m2"``, ``"float4_e2m1fn"``,
    ``"float16"``, ``"bfloat16"``, ``"float32"``, ``"int32"``); the ``fn`` suffix is optional on
    formats without inf, and wrong on formats with inf.

    Raises DtypeError for anything else, in particular for ``"float8_e4m3"``, which is ambiguous
    (ml_dtypes uses it for an IEEE-like type; ours is e4m3fn).
    """
    if not isinstance(name, str):
        raise DtypeError(f"a data type name must be a string, got {name!r}")
    if name == "float8_e4m3":
        raise DtypeError(
            "'float8_e4m3' is ambiguous: ml_dtypes uses it for an IEEE-like type with inf; "
            "the contract's f8e4m3 is e4m3fn, accepted as 'f8e4m3' or 'float8_e4m3fn'"
        )
    if name not in _BY_NAME:
        raise DtypeError(
            f"unknown data type name {name!r}: expected a short name such as 'u4', 'i3', 'f6e3m2', "
            "'f16', 'bf16', 'f32', 'i32' or a long name such as 'uint4', 'int3', 'float6_e3m2', "
            "'float8_e4m3fn', 'float8_e5m2', 'bfloat16' (every type is listed by all_dtypes())"
        )
    return _BY_NAME[name]


def _checked_codes(dtype: DataType, codes: ArrayLike) -> np.ndarray:
    """Return `codes` as an integer array after checking every element is in [0, 2^nbits).

    An empty array of any dtype (e.g. from an empty list) is accepted as empty codes.
    """
    array = np.asarray(codes)
    if array.size == 0:
        return array.astype(dtype.code_dtype)
    if array.dtype.kind not in "ui":
        raise DtypeError(
            f"codes of {dtype.name} must be an integer array, got an array of dtype {array.dtype}"
        )
    fits_by_dtype = array.dtype.kind == "u" and array.dtype.itemsize * 8 <= dtype.nbits
    if not fits_by_dtype:
        lowest, highest = int(array.min()), int(array.max())
        if lowest < 0 or highest >= 1 << dtype.nbits:
            bad = lowest if lowest < 0 else highest
            raise DtypeError(
                f"code {bad} is not a bit pattern of {dtype.name}: expected codes in "
                f"[0, {(1 << dtype.nbits) - 1}]"
            )
    return array


@functools.cache
def _decode_table(dtype: DataType) -> np.ndarray:
    """The values of all 2^nbits codes of `dtype` (at most 16 bits), as a read-only array."""
    codes = np.arange(1 << dtype.nbits, dtype=np.int64)
    sign = codes >> (dtype.nbits - 1)
    if not dtype.is_float:
        table = codes - (sign << dtype.nbits) if dtype.is_signed else codes
        table.setflags(write=False)
        return table
    m_bits, e_bits = dtype.mantissa_bits, dtype.exponent_bits
    exponent_field = (codes >> m_bits) & ((1 << e_bits) - 1)
    mantissa_field = codes & ((1 << m_bits) - 1)
    is_subnormal = exponent_field == 0
    # Case: subnormal, m * 2^(1 - B - M). Case: normal, (2^M + m) * 2^(e - B - M).
    significand = np.where(is_subnormal, mantissa_field, mantissa_field + (1 << m_bits))
    exponent = np.where(is_subnormal, 1, exponent_field) - dtype.bias - m_bits
    magnitude = np.ldexp(significand.astype(np.float64), exponent.astype(np.int32))
    all_ones_exponent = exponent_field == (1 << e_bits) - 1
    if dtype.has_inf:
        is_nan = all_ones_exponent & (mantissa_field != 0)
        magnitude = np.where(all_ones_exponent & (mantissa_field == 0), np.inf, magnitude)
    elif dtype.has_nan:
        is_nan = all_ones_exponent & (mantissa_field == (1 << m_bits) - 1)
    else:
        is_nan = np.zeros(codes.shape, dtype=bool)
    # A NaN code's formula value may exceed float32's range: zero it before the cast.
    magnitude = np.where(is_nan, 0.0, magnitude)
    bits = np.where(sign == 1, -magnitude, magnitude).astype(np.float32).view(np.uint32)
    bits = np.where(is_nan, (sign << 31) | _FLOAT32_QUIET_NAN_BITS, bits).astype(np.uint32)
    table = bits.view(np.float32)
    table.setflags(write=False)
    return table


def _encode_float32(dtype: DataType, values: np.ndarray) -> np.ndarray:
    """Round float32 `values` to a float `dtype` of at most 16 bits; return its codes."""
    m_bits, bias, nbits = dtype.mantissa_bits, dtype.bias, dtype.nbits
    bits = values.view(np.uint32).astype(np.int64)
    sign = bits >> 31
    magnitude = bits & 0x7FFF_FFFF
    min_normal_exponent = 1 - bias
    # Case: the normal range. Round the float32 bit pattern to m_bits mantissa bits, ties to
    # even: add half an ulp less one, plus the kept lowest bit. A carry out of the mantissa
    # bumps the exponent, which is the correct result. Then rebias the exponent.
    shift = _FLOAT32_MANTISSA_BITS - m_bits
    rounded = magnitude + ((1 << (shift - 1)) - 1) + ((magnitude >> shift) & 1)
    code = (rounded >> shift) - ((_FLOAT32_EXPONENT_BIAS - bias) << m_bits)
    # Case: below the smallest normal. The code is the value in units of the smallest
    # subnormal, rounded half to even (exact in float64); 2^m_bits is the smallest normal.
    is_subnormal = magnitude < ((_FLOAT32_EXPONENT_BIAS + min_normal_exponent) << 23)
    tiny = np.where(is_subnormal, np.abs(values), np.float32(0)).astype(np.float64)
    subnormal_code = np.rint(np.ldexp(tiny, m_bits - min_normal_exponent)).astype(np.int64)
    code = np.where(is_subnormal, subnormal_code, code)
    # What does not fit: inf and overflow give codes above the largest finite one.
    all_ones = (1 << (nbits - 1)) - 1
    is_nan = magnitude > _FLOAT32_INF_BITS
    sign_bit = sign << (nbits - 1)
    if dtype.has_inf:
        # Case: IEEE-like. Overflow is inf; NaN is the quiet NaN; both keep the sign.
        inf_code = ((1 << dtype.exponent_bits) - 1) << m_bits
        code = np.where(code >= inf_code, inf_code, code)
        code = np.where(is_nan, inf_code | (1 << (m_bits - 1)), code) | sign_bit
    elif dtype.has_nan:
        # Case: NaN only. Overflow, inf and NaN are the all-ones NaN code with the sign.
        code = np.where(is_nan | (code >= all_ones), all_ones, code) | sign_bit
    else:
        # Case: finite. Overflow and inf saturate; NaN is a zero of the opposite sign.
        code = np.minimum(code, all_ones) | sign_bit
        code = np.where(is_nan, (1 - sign) << (nbits - 1), code)
    return code.astype(dtype.code_dtype)


def _encode_integer(dtype: DataType, values: np.ndarray) -> np.ndarray:
    """Round and saturate numeric `values` to the integer `dtype`; return its codes."""
    if values.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            rounded = np.rint(values.astype(np.float64))
        rounded = np.where(np.isnan(rounded), 0.0, rounded)
        integers = np.clip(rounded, dtype.min, dtype.max).astype(np.int64)
    else:
        if values.dtype == np.uint64:
            values = np.minimum(values, np.uint64(dtype.max))
        integers = np.clip(values.astype(np.int64), dtype.min, dtype.max)
    return (integers & ((1 << dtype.nbits) - 1)).astype(dtype.code_dtype)


def _check_dtype(dtype: Any, role: str) -> DataType:
    """Return `dtype` when it is a DataType, else raise DtypeError naming `role`."""
    if not isinstance(dtype, DataType):
        raise DtypeError(f"{role} must be a DataType such as ir.dtypes.u4, got {dtype!r}")
    return dtype


def convert(codes: ArrayLike, src: DataType, dst: DataType) -> np.ndarray:
    """Convert `codes` of type `src` to codes of type `dst` (an array of `dst.code_dtype`).

    The same type is the identity. Otherwise the result is ``dst.encode(src.decode(codes))``:
    float -> float goes through float32 and rounds once to nearest even with the class rules of
    `dst`; float -> integer rounds half to even, saturates and maps NaN to 0; integer -> integer
    saturates; integer -> float converts to float32 first (round to nearest even), then to `dst`.
    E.g. ``convert([0x7F], f8e4m3, f4e2m1) == [0x8]`` (NaN to -0) and
    ``convert([0b0111], f4e2m1, u2) == [3]`` (6 saturates).

    Raises DtypeError when `src` or `dst` is not a DataType or a code is not a bit pattern of
    `src`.
    """
    src = _check_dtype(src, "the source type")
    dst = _check_dtype(dst, "the destination type")
    if src == dst:
        return _checked_codes(src, codes).astype(src.code_dtype)
    return dst.encode(src.decode(codes))


MAX_SCALE_EXPONENT = 64
"""The largest |exponent| of a scaled conversion (`convert_scaled`)."""
MAX_SCALED_SOURCE_BITS = 16
"""The widest source type of a scaled conversion: every code is checked, so at most 2^16."""


def scaled_conversion_error(src: DataType, dst: DataType, exponent: object) -> str | None:
    """Why converting `src` codes to `dst` times ``2**exponent`` is not exact, or None when it
    is: `dst` a float type, `src` of at most `MAX_SCALED_SOURCE_BITS` bits, `exponent` an int
    of magnitude at most `MAX_SCALE_EXPONENT`, and every finite value of `src` times
    ``2**exponent`` a finite value of `dst`. Exponent 0 is a plain conversion: never an error.
    Raises DtypeError when `src` or `dst` is not a DataType.
    """
    src = _check_dtype(src, "the source type")
    dst = _check_dtype(dst, "the destination type")
    if isinstance(exponent, bool) or not isinstance(exponent, int):
        return f"the exponent must be an int, got {exponent!r}"
    if exponent == 0:
        return None
    return _scaled_conversion_error(src, dst, exponent)


@functools.lru_cache(maxsize=256)
def _scaled_conversion_error(src: DataType, dst: DataType, exponent: int) -> str | None:
    """`scaled_conversion_error` of a nonzero int exponent (every code checked, cached)."""
    if abs(exponent) > MAX_SCALE_EXPONENT:
        return f"exponent {exponent} is outside [-{MAX_SCALE_EXPONENT}, {MAX_SCALE_EXPONENT}]"
    if not dst.is_float:
        return f"a scaled conversion gives a float type, not {dst.name}"
    if src.nbits > MAX_SCALED_SOURCE_BITS:
        return (
            f"a scaled conversion takes types of at most {MAX_SCALED_SOURCE_BITS} bits, "
            f"not {src.name}"
        )
    codes = np.arange(1 << src.nbits, dtype=np.int64)
    values = src.decode(codes).astype(np.float64)
    finite = np.isfinite(values)
    scaled = values[finite] * 2.0**exponent
    with np.errstate(over="ignore", invalid="ignore"):
        back = dst.decode(dst.encode(scaled)).astype(np.float64)
    bad = np.flatnonzero(back != scaled)
    if bad.size:
        code = int(codes[finite][bad[0]])
        return (
            f"{src.name} code 0x{code:X} ({float(values[finite][bad[0]])!r}) times "
            f"2**{exponent} is {float(scaled[bad[0]])!r}, not a value of {dst.name}"
        )
    return None


def convert_scaled(codes: ArrayLike, src: DataType, dst: DataType, exponent: int) -> np.ndarray:
    """`convert` of `codes` from `src` to `dst` with the values times ``2**exponent``: exact
    (`scaled_conversion_error` must be None); NaNs and infinities convert as in `convert`.

    Raises DtypeError when the scaled conversion is not exact, or as `convert` does.
    """
    error = scaled_conversion_error(src, dst, exponent)
    if error is not None:
        raise DtypeError(f"no exact conversion from {src} to {dst} times 2**{exponent}: {error}")
    if exponent == 0:
        return convert(codes, src, dst)
    values = src.decode(codes).astype(np.float64) * 2.0**exponent
    return dst.encode(values)


MAGIC_BIAS_TARGETS = ("f16", "bf16")
"""The types a biased cast (`magic_bias`) converts to: their magic numbers are exact."""


def magic_bias_error(src: DataType, dst: DataType) -> str | None:
    """Why a cast of `src` codes to `dst` cannot keep the magic number's bias
    (`magic_bias`), or None when it can: `src` an integer type of at most as many bits as
    `dst` has mantissa bits, `dst` f16 or bf16. Raises DtypeError when either is not a
    DataType."""
    src = _check_dtype(src, "the source type")
    dst = _check_dtype(dst, "the destination type")
    if dst.name not in MAGIC_BIAS_TARGETS:
        return f"a biased cast gives f16 or bf16, not {dst.name}"
    if src.is_float:
        return f"a biased cast takes integer codes, not {src.name}"
    if src.nbits > dst.mantissa_bits:
        return (
            f"{src.name} has {src.nbits} bits, more than {dst.name}'s "
            f"{dst.mantissa_bits} mantissa bits hold under a magic number"
        )
    return None


def magic_field_period(src: DataType, dst: DataType) -> int:
    """The period g of the bit positions of a biased cast's fields: a code at bit offset o of
    its thread's bitstream is placed at bit ``p = o mod g`` of its 16-bit half, g the largest
    power of two up to 16 for which every such p leaves the code below the mantissa's top
    (``g - gcd(b, g) <= M - b``, b the code's bits, M the mantissa's). Raises DtypeError where
    `magic_bias_error` names a reason."""
    error = magic_bias_error(src, dst)
    if error is not None:
        raise DtypeError(f"no biased cast from {src} to {dst}: {error}")
    room = dst.mantissa_bits - src.nbits
    return next(g for g in (16, 8, 4, 2, 1) if g - math.gcd(src.nbits, g) <= room)


def magic_bias(src: DataType, dst: DataType, bit_offset: int) -> int:
    """The bias a biased cast (`ir.builder.ProgramBuilder.cast` with ``biased=True``) leaves
    in the value of the `src` code at bit `bit_offset` of its thread's bitstream.

    The cast ORs the code's field into a magic number's mantissa at bit
    ``p = bit_offset mod magic_field_period(src, dst)`` of its half, the magic number being
    ``2^(M - p)`` (M mantissa bits), whose mantissa's unit is then 1: the half holds
    ``2^(M - p) + u`` exactly, u the code as unsigned (a signed code's top bit flipped,
    ``u = n + 2^(b - 1)``). So the biased value is the code's value plus
    ``2^(M - p) + 2^(b - 1) * signed``, the number returned; nothing is left to subtract per
    weight, and a matmul can take the bias out once per row of activations
    (``sum_k bias_k * a_k``). Raises DtypeError where `magic_bias_error` names a reason or
    `bit_offset` is not a non-negative int."""
    if not _is_int(bit_offset) or bit_offset < 0:
        raise DtypeError(f"a bit offset must be a non-negative int, got {bit_offset!r}")
    return int(magic_biases(src, dst, np.array([bit_offset]))[0])


def magic_biases(src: DataType, dst: DataType, bit_offsets: ArrayLike) -> np.ndarray:
    """`magic_bias` of every offset of the int array `bit_offsets` (float64, same shape).
    Raises DtypeError as `magic_bias` does."""
    period = magic_field_period(src, dst)
    offsets = np.asarray(bit_offsets)
    if offsets.dtype.kind not in "iu" or (offsets < 0).any():
        raise DtypeError(f"bit offsets must be non-negative ints, got {bit_offsets!r}")
    sign = 1 << (src.nbits - 1) if src.is_signed else 0
    return 2.0 ** (dst.mantissa_bits - offsets % period) + sign


def convert_biased(
    codes: ArrayLike, src: DataType, dst: DataType, bit_offsets: ArrayLike
) -> np.ndarray:
    """`dst` codes of the values of `codes` plus `magic_biases` at their `bit_offsets`
    (broadcast against `codes`): exact. Raises DtypeError as `magic_bias` and `convert` do."""
    bias = magic_biases(src, dst, bit_offsets)
    return dst.encode(src.decode(codes).astype(np.float64) + bias)


def packed_nbytes(count: int, dtype: DataType) -> int:
    """The bytes taken by `count` elements of `dtype` in the dense bitstream: ceil(count*b/8)."""
    dtype = _check_dtype(dtype, "the element type")
    if not _is_int(count) or count < 0:
        raise DtypeError(f"an element count must be a non-negative int, got {count!r}")
    return (count * dtype.nbits + 7) // 8


def pack(codes: ArrayLike, dtype: DataType) -> np.ndarray:
    """Pack `codes` of `dtype` (taken in C order) into the dense LSB-first bitstream.

    Element k occupies bits [k*b, (k+1)*b) of the stream, bit j of the stream being bit j % 8 of
    byte j // 8; the last byte is padded with zero bits. Types of 16 and 32 bits are therefore
    stored little-endian. E.g. ``pack([1, 2, 3], u4) == [0x21, 0x03]``.

    Returns a new uint8 array of `packed_nbytes(codes.size, dtype)` bytes. Raises DtypeError when
    a code is not a bit pattern of `dtype`.
    """
    dtype = _check_dtype(dtype, "the element type")
    flat = _checked_codes(dtype, codes).astype(dtype.code_dtype).ravel()
    if dtype.nbits % 8 == 0:
        # Case: whole bytes, the little-endian bytes of each element.
        return flat.astype(dtype.code_dtype.newbyteorder("<")).view(np.uint8).copy()
    # Case: sub-byte. Expand each element to its b lowest bits, then pack the bit stream.
    element_bits = np.unpackbits(flat[:, None], axis=1, bitorder="little")[:, : dtype.nbits]
    return np.packbits(element_bits.ravel(), bitorder="little")


def unpack(buffer: ArrayLike | bytes, dtype: DataType, count: int) -> np.ndarray:
    """Read `count` codes of `dtype` from the dense LSB-first bitstream in `buffer`.

    The inverse of `pack`: element k is bits [k*b, (k+1)*b) of the stream. `buffer` is a 1-D uint8
    array or a bytes-like object holding at least `packed_nbytes(count, dtype)` bytes; bytes past
    them are ignored. Returns a new 1-D array of `dtype.code_dtype`, e.g.
    ``unpack([0x21, 0x03], u4, 3) == [1, 2, 3]``.

    Raises DtypeError when the buffer is not 1-D uint8 or is too short, or `count` is negative.
    """
    dtype = _check_dtype(dtype, "the element type")
    if isinstance(buffer, (bytes, bytearray, memoryview)):
        data = np.frombuffer(buffer, dtype=np.uint8)
    else:
        data = np.asarray(buffer)
    if data.dtype != np.uint8 or data.ndim != 1:
        raise DtypeError(
            "a packed buffer must be a 1-D uint8 array or bytes, got an array of dtype "
            f"{data.dtype} and shape {data.shape}"
        )
    size = packed_nbytes(count, dtype)
    if data.size < size:
        raise DtypeError(
            f"{count} elements of {dtype.name} take {size} bytes, the buffer holds {data.size}"
        )
    stream = np.ascontiguousarray(data[:size])
    if dtype.nbits % 8 == 0:
        # Case: whole bytes, little-endian.
        return stream.view(dtype.code_dtype.newbyteorder("<")).astype(dtype.code_dtype)
    # Case: sub-byte. Cut the bit stream into rows of b bits and pack each row into a byte.
    element_bits = np.unpackbits(stream, bitorder="little", count=count * dtype.nbits)
    rows = element_bits.reshape(count, dtype.nbits)
    return np.packbits(rows, axis=1, bitorder="little").reshape(count)


def _decimal(value: float) -> str:
    """A format value in decimal: exact when that takes at most 24 characters, else the shortest
    float repr that reads back to it, marked with ≈ (every format value is a dyadic rational)."""
    exact = str(Decimal(value)).replace("E", "e")
    return exact if len(exact) <= 24 else f"≈ {value!r}"


def _dyadic(value: float) -> str:
    """A non-negative format value written exactly as ``odd significand × 2^exponent`` (or
    ``2^exponent`` when the significand is 1)."""
    numerator, denominator = value.as_integer_ratio()
    if numerator == 0:
        return "0"
    exponent = 1 - denominator.bit_length()
    while numerator % 2 == 0:
        numerator //= 2
        exponent += 1
    return f"2^{exponent}" if numerator == 1 else f"{numerator} × 2^{exponent}"


def float_formats_markdown() -> str:
    """A Markdown document describing every float type and listing every sub-byte float's values.

    It opens with a summary table of all float types (widths, bias, max, smallest values,
    specials), then gives, for each float of fewer than 8 bits, one row per non-negative code:
    the code in binary with its fields separated (sign, exponent, mantissa), in hex, and its
    value in decimal and exactly as ``odd significand × 2^exponent``. The negative codes are the
    same with the sign bit set. This text is the content of the project's docs/float_formats.md.
    """
    floats = [dtype for dtype in _ALL if dtype.is_float]
    lines = [
        "# Float formats",
        "",
        "Generated by `ir.dtypes.float_formats_markdown()`; do not edit by hand.",
        "",
        "A code is `sign | exponent e | mantissa m`. With bias B = 2^(E-1) - 1, e = 0 means",
        "m / 2^M × 2^(1-B) (zero and subnormals) and e > 0 means (1 + m / 2^M) × 2^(e-B). Formats",
        "with inf use the all-ones exponent for inf (m = 0) and NaN (m ≠ 0); f8e4m3 (e4m3fn) has",
        "one NaN, all ones, and no inf; every other format of at most 8 bits has neither.",
        "",
        "| type | long name | bits | E | M | bias | max | max (exact) | smallest normal "
        "| smallest subnormal | inf | NaN |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dtype in floats:
        lines.append(
            f"| {dtype.name} | {dtype.long_name} | {dtype.nbits} | {dtype.exponent_bits} "
            f"| {dtype.mantissa_bits} | {dtype.bias} | {_decimal(dtype.max)} "
            f"| {_dyadic(dtype.max)} | {_dyadic(dtype.smallest_normal)} "
            f"| {_dyadic(dtype.smallest_subnormal)} "
            f"| {'yes' if dtype.has_inf else 'no'} | {'yes' if dtype.has_nan else 'no'} |"
        )
    for dtype in floats:
        if dtype.nbits >= 8:
            continue
        e_bits, m_bits = dtype.exponent_bits, dtype.mantissa_bits
        lines += [
            "",
            f"## {dtype.name} ({dtype.long_name})",
            "",
            f"Bias {dtype.bias}, max {_decimal(dtype.max)}, no inf, no NaN. Negative codes: set "
            f"bit {dtype.nbits - 1}.",
            "",
            "| code (s e m) | hex | value | exact |",
            "|---|---|---|---|",
        ]
        positive_codes = np.arange(1 << (dtype.nbits - 1))
        values = dtype.decode(positive_codes)
        for code, value in zip(positive_codes.tolist(), values.tolist(), strict=True):
            mantissa = f" {code & ((1 << m_bits) - 1):0{m_bits}b}" if m_bits else ""
            fields = f"0 {code >> m_bits:0{e_bits}b}{mantissa}"
            lines.append(f"| `{fields}` | 0x{code:02x} | {_decimal(value)} | {_dyadic(value)} |")
    return "\n".join(lines) + "\n"


__all__ = [
    "DataType",
    "DtypeError",
    "all_dtypes",
    "convert",
    "float_formats_markdown",
    "from_name",
    "pack",
    "packed_nbytes",
    "unpack",
] + [dtype.name for dtype in _ALL]

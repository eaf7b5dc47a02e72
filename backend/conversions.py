"""CUDA device code for every data type conversion of the contract, exact to the last bit.

Registers hold *codes* (the bit patterns of `ir.dtypes`); computing decodes them to a *value*
(a C `float` for float types, a C `int` for integer types), and results are encoded back.
`CONVERSION_SOURCE` defines the C functions that do it, and the functions of this module print
the C expressions that call them for given types:

    decode_expression(f4e2m1, "c")          la_decode_float(c, 2, 1, 0)        code -> float value
    encode_expression(f8e4m3, "v")          la_encode_float(v, 4, 3, 1)        float value -> code
    encode_expression(u4, "v")              la_float_to_int_code(v, 4, 0)      round, saturate
    convert_expression(i3, f16, "c")        la_encode_f16((float)(la_decode_int(c, 3, 1)))

The rules are section 4 of the contract, as `ir.dtypes` implements them: a float code decodes to
its exact float32 value (a NaN code to the quiet NaN 0x7FC00000 with the code's sign); float32
encodes by rounding once to nearest even, then by the class rule for what does not fit (finite
formats saturate and turn NaN into a zero of the opposite sign, f8e4m3 overflows to NaN,
IEEE-like formats to inf); integers come from floats by rounding half to even and saturating,
NaN giving 0, from integers by saturating; integers become floats through float32. Every other
conversion is decode then encode, through float32.

The generic functions are written once, parameterised by the exponent and mantissa widths and the
special-value class; at a call site the widths are constants, so NVCC folds them away. The source
is plain C with a few macros: it compiles as CUDA device code under NVRTC and as host C under a C
compiler, which is how the tests check it, bit for bit, against `ir.dtypes` on every code and on
many float32 inputs, without a GPU. Only f32 -> f16 and f32 -> bf16 take a different road on the
device: the hardware's round-to-nearest conversions (`__float2half_rn`, `__float2bfloat16_rn`),
which give the contract's result except for NaN, whose code is fixed in front of them, and f16 ->
f32 the hardware's exact conversion, whose NaN gets its sign back (`la_decode_f16`; bf16 -> f32 is
a shift everywhere).
"""

from __future__ import annotations

from ir import dtypes
from ir.dtypes import DataType

FINITE = 0
"""Special-value class of formats with neither inf nor NaN (all-ones exponent: a binade)."""
NAN_ONLY = 1
"""Special-value class of f8e4m3 (e4m3fn): one NaN code per sign (all ones), no inf."""
IEEE_LIKE = 2
"""Special-value class of f8e5m2, f8e3m4, f16, bf16, f32: all-ones exponent for inf, NaN."""

CONVERSION_SOURCE = r"""
/* ---- data type conversions (exact; see backend/conversions.py) ---- */
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define LA_DEVICE_CODE 1
#define LA_FN static __device__ __forceinline__
#else
#include <math.h>
#include <string.h>
#define LA_FN static inline
#endif

typedef unsigned int la_u32;

#define LA_FINITE 0
#define LA_NAN_ONLY 1
#define LA_IEEE_LIKE 2

/* The float32 whose bit pattern is `bits`, and back. */
LA_FN float la_bits_to_float(la_u32 bits)
{
#ifdef LA_DEVICE_CODE
    return __uint_as_float(bits);
#else
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
#endif
}

LA_FN la_u32 la_float_to_bits(float value)
{
#ifdef LA_DEVICE_CODE
    return __float_as_uint(value);
#else
    la_u32 bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
#endif
}

/* The exact float32 value of `code` in the float format with `e_bits` exponent bits,
   `m_bits` mantissa bits and special-value class `special` (not f32 itself). */
LA_FN float la_decode_float(la_u32 code, int e_bits, int m_bits, int special)
{
    const la_u32 sign = (code >> (e_bits + m_bits)) & 1u;
    const la_u32 exponent = (code >> m_bits) & ((1u << e_bits) - 1u);
    const la_u32 mantissa = code & ((1u << m_bits) - 1u);
    const la_u32 exponent_ones = (1u << e_bits) - 1u;
    const int bias = (1 << (e_bits - 1)) - 1;
    la_u32 bits;
    if (special == LA_IEEE_LIKE && exponent == exponent_ones) {
        /* Case: inf (mantissa 0) or NaN (the quiet NaN, payload dropped). */
        bits = mantissa != 0u ? 0x7FC00000u : 0x7F800000u;
    } else if (special == LA_NAN_ONLY && exponent == exponent_ones
               && mantissa == (1u << m_bits) - 1u) {
        /* Case: the one NaN code of e4m3fn. */
        bits = 0x7FC00000u;
    } else if (exponent != 0u) {
        /* Case: normal; rebias the exponent, widen the mantissa. */
        bits = ((exponent + (la_u32)(127 - bias)) << 23) | (mantissa << (23 - m_bits));
    } else if (e_bits == 8) {
        /* Case: zero or subnormal of an 8-bit-exponent format: a float32 subnormal. */
        bits = mantissa << (23 - m_bits);
    } else {
        /* Case: zero or subnormal, m * 2^(1 - bias - m_bits): exact float32 arithmetic. */
        bits = la_float_to_bits(
            (float)mantissa * la_bits_to_float((la_u32)(128 - bias - m_bits) << 23));
    }
    return la_bits_to_float(bits | (sign << 31));
}

/* The code of float32 `value` in the float format (e_bits, m_bits, special), not f32: round
   once to nearest even, then the class rule for overflow, inf and NaN. */
LA_FN la_u32 la_encode_float(float value, int e_bits, int m_bits, int special)
{
    const int nbits = 1 + e_bits + m_bits;
    const int bias = (1 << (e_bits - 1)) - 1;
    const la_u32 bits = la_float_to_bits(value);
    const la_u32 sign = bits >> 31;
    const la_u32 magnitude = bits & 0x7FFFFFFFu;
    const la_u32 sign_bit = sign << (nbits - 1);
    const la_u32 largest = (1u << (nbits - 1)) - 1u;
    const int shift = 23 - m_bits;
    la_u32 code;
    if (magnitude > 0x7F800000u) {
        /* Case: NaN. */
        if (special == LA_IEEE_LIKE) {
            return sign_bit | (((1u << e_bits) - 1u) << m_bits) | (1u << (m_bits - 1));
        }
        if (special == LA_NAN_ONLY) {
            return sign_bit | largest;
        }
        return (sign ^ 1u) << (nbits - 1);
    }
    if (e_bits < 8 && magnitude < ((la_u32)(128 - bias) << 23)) {
        /* Case: below the smallest normal. The code is the value in units of the smallest
           subnormal (an exact scaling), rounded half to even; 2^m_bits is the smallest normal. */
        const float scaled = la_bits_to_float(magnitude)
                             * la_bits_to_float((la_u32)(126 + m_bits + bias) << 23);
        code = (la_u32)rintf(scaled);
    } else {
        /* Case: the normal range. Round the float32 pattern to m_bits mantissa bits, ties to
           even; a carry into the exponent is the right result. Then rebias. */
        const la_u32 rounded = magnitude + ((1u << (shift - 1)) - 1u) + ((magnitude >> shift) & 1u);
        code = (rounded >> shift) - ((la_u32)(127 - bias) << m_bits);
    }
    if (special == LA_IEEE_LIKE) {
        /* Overflow and inf are inf. */
        const la_u32 inf_code = ((1u << e_bits) - 1u) << m_bits;
        return sign_bit | (code > inf_code ? inf_code : code);
    }
    if (special == LA_NAN_ONLY) {
        /* Overflow and inf are NaN (the all-ones code). */
        return sign_bit | (code > largest ? largest : code);
    }
    /* Finite formats: overflow and inf saturate to max. */
    return sign_bit | (code > largest ? largest : code);
}

/* f16 -> f32 and bf16 -> f32: on the device the hardware conversion (exact), which makes every
   NaN positive, so a NaN code gets the canonical quiet NaN with its own sign back. */
LA_FN float la_decode_f16(la_u32 code)
{
#ifdef LA_DEVICE_CODE
    const float value = __half2float(__ushort_as_half((unsigned short)code));
    return value == value ? value : la_bits_to_float(((code & 0x8000u) << 16) | 0x7FC00000u);
#else
    return la_decode_float(code, 5, 10, LA_IEEE_LIKE);
#endif
}

LA_FN float la_decode_bf16(la_u32 code)
{
    const float value = la_bits_to_float(code << 16);
    return value == value ? value : la_bits_to_float(((code & 0x8000u) << 16) | 0x7FC00000u);
}

/* A value times a power of two `scale` for a scaled cast (exact there, as the verifier checked
   every code): a NaN is passed on unchanged, since the device's multiply would make it the
   positive canonical NaN and a cast keeps a NaN's sign. */
LA_FN float la_scale_exact(float value, float scale)
{
    return value == value ? value * scale : value;
}

/* f16 -> f32 where no instruction can tell one NaN from another (`nan_blind_tensors`): the
   hardware conversion alone, whose NaNs are all positive. */
LA_FN float la_widen_f16(la_u32 code)
{
#ifdef LA_DEVICE_CODE
    return __half2float(__ushort_as_half((unsigned short)code));
#else
    return la_decode_float(code, 5, 10, LA_IEEE_LIKE);
#endif
}

/* f32 -> f16 and f32 -> bf16: the hardware rounds to nearest even with overflow to inf, as the
   contract does; only NaN needs its canonical code (sign kept, payload dropped). */
LA_FN la_u32 la_encode_f16(float value)
{
#ifdef LA_DEVICE_CODE
    if (value != value) {
        return ((la_float_to_bits(value) >> 16) & 0x8000u) | 0x7E00u;
    }
    return __half_as_ushort(__float2half_rn(value));
#else
    return la_encode_float(value, 5, 10, LA_IEEE_LIKE);
#endif
}

/* Two f32 values, as bit patterns, to the word of their f16 codes (`low`'s in bits 0..15),
   as la_encode_f16 gives them: from sm_80 one paired conversion, then each NaN half (the
   hardware's is positive) given the canonical code with its input's sign. */
LA_FN la_u32 la_encode_f16x2(la_u32 low, la_u32 high)
{
#if defined(LA_DEVICE_CODE) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const __half2 pair = __floats2half2_rn(__uint_as_float(low), __uint_as_float(high));
    const la_u32 packed = *(const la_u32*)&pair;
    const la_u32 nan = __hneu2_mask(pair, pair);  /* 0xFFFF in each NaN half */
    const la_u32 canonical = (__byte_perm(low, high, 0x7632) & 0x80008000u) | 0x7E007E00u;
    return (packed & ~nan) | (canonical & nan);
#else
    return la_encode_f16(la_bits_to_float(low)) | (la_encode_f16(la_bits_to_float(high)) << 16);
#endif
}

LA_FN la_u32 la_encode_bf16(float value)
{
#ifdef LA_DEVICE_CODE
    if (value != value) {
        return ((la_float_to_bits(value) >> 16) & 0x8000u) | 0x7FC0u;
    }
    return __bfloat16_as_ushort(__float2bfloat16_rn(value));
#else
    return la_encode_float(value, 8, 7, LA_IEEE_LIKE);
#endif
}

/* The value of an integer code of `nbits` bits (two's complement when `is_signed`). */
LA_FN int la_decode_int(la_u32 code, int nbits, int is_signed)
{
    if (nbits == 32) {
        return (int)code;
    }
    if (is_signed) {
        return (int)(code << (32 - nbits)) >> (32 - nbits);
    }
    return (int)code;
}

/* The code of integer `value` saturated to the `nbits`-bit integer type. */
LA_FN la_u32 la_saturate_int_code(int value, int nbits, int is_signed)
{
    if (nbits == 32) {
        return (la_u32)value;
    }
    {
        const int low = is_signed ? -(1 << (nbits - 1)) : 0;
        const int high = is_signed ? (1 << (nbits - 1)) - 1 : (1 << nbits) - 1;
        const int clamped = value < low ? low : (value > high ? high : value);
        return (la_u32)clamped & ((1u << nbits) - 1u);
    }
}

/* The code of float `value` in the `nbits`-bit integer type: round half to even, saturate,
   NaN gives 0. */
LA_FN la_u32 la_float_to_int_code(float value, int nbits, int is_signed)
{
    const float low = is_signed ? -(float)(1u << (nbits - 1)) : 0.0f;
    const float high = is_signed ? (float)((1u << (nbits - 1)) - 1u) : (float)((1u << nbits) - 1u);
    const la_u32 mask = nbits == 32 ? 0xFFFFFFFFu : (1u << nbits) - 1u;
    float rounded;
    if (value != value) {
        return 0u;
    }
    rounded = rintf(value);
    if (rounded <= low) {
        /* The code of min: the sign bit alone (signed), 0 (unsigned). */
        return is_signed ? 1u << (nbits - 1) : 0u;
    }
    if (rounded >= high) {
        /* The code of max: every bit below the sign bit (signed), every bit (unsigned). */
        return is_signed ? (1u << (nbits - 1)) - 1u : (1u << nbits) - 1u;
    }
    return (la_u32)(int)rounded & mask;
}
"""


def float_class(dtype: DataType) -> int:
    """The special-value class of a float type: `FINITE`, `NAN_ONLY` or `IEEE_LIKE`."""
    if dtype.has_inf:
        return IEEE_LIKE
    return NAN_ONLY if dtype.has_nan else FINITE


def value_type(dtype: DataType) -> str:
    """The C type of `dtype`'s values while computing: ``float`` or ``int``."""
    return "float" if dtype.is_float else "int"


def decode_expression(dtype: DataType, code: str, nan_blind: bool = False) -> str:
    """The C expression of the value (`value_type`) of the code held by C expression `code`.

    f32 codes are float32 bits; other floats decode exactly to float32; integers sign-extend
    (signed) or zero-extend (unsigned) to `int`. `nan_blind`: the value only feeds operations
    that make every NaN the same (`backend.lower.context.nan_blind_tensors`), so an f16 or
    bf16 NaN may decode to any NaN: the bare hardware conversion, with no sign restored.
    """
    if dtype == dtypes.f32:
        return f"la_bits_to_float({code})"
    if dtype == dtypes.f16:
        return f"la_widen_f16({code})" if nan_blind else f"la_decode_f16({code})"
    if dtype == dtypes.bf16:
        if nan_blind:
            return f"la_bits_to_float(({code}) << 16)"
        return f"la_decode_bf16({code})"
    if dtype.is_float:
        return (
            f"la_decode_float({code}, {dtype.exponent_bits}, {dtype.mantissa_bits}, "
            f"{float_class(dtype)})"
        )
    return f"la_decode_int({code}, {dtype.nbits}, {int(dtype.is_signed)})"


def encode_expression(dtype: DataType, value: str, value_is_float: bool = True) -> str:
    """The C expression of the code of `dtype` for the value held by C expression `value`.

    `value` is a C `float` when `value_is_float`, else a C `int`. Floats round once to nearest
    even with the class rules; integers from floats round half to even and saturate (NaN gives
    0); integers from integers saturate; integers become floats through float32 (round to
    nearest even). The result is an unsigned C integer holding the code in its low bits.
    """
    if dtype.is_float:
        if not value_is_float:
            value = f"(float)({value})"
        if dtype == dtypes.f32:
            return f"la_float_to_bits({value})"
        if dtype == dtypes.f16:
            return f"la_encode_f16({value})"
        if dtype == dtypes.bf16:
            return f"la_encode_bf16({value})"
        return (
            f"la_encode_float({value}, {dtype.exponent_bits}, {dtype.mantissa_bits}, "
            f"{float_class(dtype)})"
        )
    if value_is_float:
        return f"la_float_to_int_code({value}, {dtype.nbits}, {int(dtype.is_signed)})"
    return f"la_saturate_int_code({value}, {dtype.nbits}, {int(dtype.is_signed)})"


def convert_expression(
    src: DataType, dst: DataType, code: str, nan_blind: bool = False, exponent: int = 0
) -> str:
    """The C expression of `dtypes.convert(code, src, dst)` for the `src` code in C `code`.

    The same type is the identity; otherwise decode to the value, then encode it
    (`encode_expression`), exactly as `ir.dtypes.convert` defines it, except for the NaNs of a
    `nan_blind` result (`decode_expression`). With `exponent`, `dtypes.convert_scaled`: the
    value times ``2**exponent`` in float32 before it is encoded (``la_scale_exact``: exact, as
    the verifier checked for every code, float32 holding every value of a type of at most 16
    bits scaled so; a NaN passed on with its sign).
    """
    if exponent:
        value = decode_expression(src, code, nan_blind)
        if not src.is_float:
            value = f"(float)({value})"
        return encode_expression(dst, f"la_scale_exact({value}, {float.hex(2.0**exponent)}f)")
    if src == dst:
        return f"({code})"
    return encode_expression(dst, decode_expression(src, code, nan_blind), src.is_float)

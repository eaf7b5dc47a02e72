"""Fast conversions of packed low-bit codes to f16 and bf16: magic-number bit tricks.

A 32-bit word of the dense bitstream holds ``32 / b`` codes of a b-bit type, code k in bits
``[k b, (k + 1) b)``. Each conversion here is a device function that turns one such word into
``16 / b`` words of results, word k holding the f16 or bf16 codes of elements 2k (bits 0-15) and
2k + 1 (bits 16-31), exactly as `ir.dtypes.convert` gives them. The tricks, per pair of
elements:

- b = 2 or 4, integers -> f16: ``prmt`` copies the byte holding the pair into both halves of a
  word, one LOP3 keeps each element's field (at its bit offset s in the byte) and ORs in the
  exponent of 1024 (``0x6400``), so each half is the f16 value ``1024 + 2^s u``; one
  ``fma.rn.f16x2`` by ``2^-s`` minus ``1024 / 2^s`` gives u. Signed types flip the field's top
  bit in the same LOP3 (``u = n + 2^(b-1)``) and subtract ``2^(b-1)`` more.
- b = 2 or 4, integers -> bf16: the same with ``0x4300`` (128), whose 7 mantissa bits must hold
  the field: a field reaching past bit 6 is shifted right first.
- b = 8 -> f16: ``prmt`` puts bytes 2k and 2k + 1 in the low bytes of the halves; ``0x6400`` and
  the fma as above (``1024 + u < 2048`` is exact).
- b = 8 -> bf16 (whose 8 significant bits cannot hold ``128 + u``): ``prmt`` builds the float32
  ``2^23 + u`` (``0x4B0000uu``), one ``sub.f32`` of ``2^23`` (plus the sign bias) gives the exact
  float n, and a last ``prmt`` keeps the upper halves of two floats, which are their bf16 codes.
- f4e2m1: ``prmt`` isolates the byte; shifts place each element's exponent-and-mantissa bits
  under the f16 (bf16) mantissa's top bits and its sign in bit 15, giving the value times
  ``2^-14`` (``2^-126``) as an f16 (bf16) number, normal or subnormal; one fma by ``2^14``
  (``2^126``) plus ``-0`` scales it back and keeps signed zeros.

Every arithmetic step is exact (its result is representable), so rounding never happens and the
results equal the contract's. The functions are plain C over four primitives: ``la_prmt(a, b,
selector)`` (CUDA's ``__byte_perm``), ``la_fma_f16x2(a, b, c)``, ``la_fma_bf16x2(a, b, c)`` (PTX
``fma.rn`` on two 16-bit lanes of 32-bit words) and ``la_sub_f32(a, b)`` (float32 subtraction on
bit patterns); `FAST_CONVERSION_PRIMITIVES` defines them for the device. A test defines them on
the host, with checks that each arithmetic step is exact, compiles the same function bodies with
a C compiler and compares them with `ir.dtypes.convert` on every code in every position.

    conversion = fast_conversion(dtypes.u4, dtypes.f16)
    conversion.function             # "la_fast_u4_to_f16"
    conversion.elements_per_word    # 8: writes out[0..3]
    conversion.call("w", "h")       # "la_fast_u4_to_f16(w, h);"
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ir import dtypes
from ir.dtypes import DataType

FAST_CONVERSION_PRIMITIVES = r"""
/* ---- fast conversions: device primitives (see backend/fast_conversions.py) ---- */
#define LA_FAST_FN __device__ __forceinline__

/* The bytes of {b, a} (a: 0-3, b: 4-7) picked by the nibbles of `selector`. */
LA_FAST_FN unsigned int la_prmt(unsigned int a, unsigned int b, unsigned int selector)
{
    return __byte_perm(a, b, selector);
}

/* a * b + c on two f16 lanes, rounded once to nearest even. */
LA_FAST_FN unsigned int la_fma_f16x2(unsigned int a, unsigned int b, unsigned int c)
{
    unsigned int d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* a * b + c on two bf16 lanes, rounded once to nearest even (sm_80 and newer). */
LA_FAST_FN unsigned int la_fma_bf16x2(unsigned int a, unsigned int b, unsigned int c)
{
    unsigned int d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* a - b on float32 bit patterns, rounded to nearest even. */
LA_FAST_FN unsigned int la_sub_f32(unsigned int a, unsigned int b)
{
    return __float_as_uint(__fsub_rn(__uint_as_float(a), __uint_as_float(b)));
}
"""
"""Device definitions of the primitives (and of the ``LA_FAST_FN`` qualifier) that every
`FastConversion.source` calls; include it once before them."""

_MAGIC_VALUE = {dtypes.f16: 1024, dtypes.bf16: 128}
"""Per target, the power of two whose ulp is 1: its code has an all-zero mantissa, so ORing a
field u into the mantissa gives the value ``magic + u``."""
_MANTISSA_BITS = {dtypes.f16: 10, dtypes.bf16: 7}


def _code(dtype: DataType, value: float) -> int:
    """The code of `value` (exactly representable) in f16 or bf16."""
    return int(dtype.encode(np.array([value], dtype=np.float32))[0])


def _pair(dtype: DataType, low: float, high: float) -> str:
    """A C literal of the 32-bit word holding the codes of `low` and `high`."""
    return f"0x{_code(dtype, low) | _code(dtype, high) << 16:08X}u"


def _byte_selector(low_byte: int, high_byte: int) -> str:
    """The prmt selector putting byte `low_byte` of the word in byte 0, `high_byte` in byte 2
    and zeros (byte 4, from a zero second operand) in bytes 1 and 3."""
    return f"0x{4 << 12 | high_byte << 8 | 4 << 4 | low_byte:04X}u"


@dataclass(frozen=True)
class FastConversion:
    """A device function converting one packed word of `src` codes to `dst` codes.

    `function` is its C name, called as ``function(word, out)`` with `word` an ``unsigned int``
    holding `elements_per_word` codes (element k in bits ``[k b, (k + 1) b)``) and `out` an
    ``unsigned int`` array of `output_words` entries: ``out[k]`` gets the `dst` codes of
    elements 2k (bits 0-15) and 2k + 1 (bits 16-31). `source` is its C definition (requires
    `FAST_CONVERSION_PRIMITIVES` before it).
    """

    src: DataType
    dst: DataType
    function: str
    elements_per_word: int
    source: str

    @property
    def output_words(self) -> int:
        """Words the function writes: one per pair of elements."""
        return self.elements_per_word // 2

    def call(self, word: str, out: str) -> str:
        """The C statement converting the word in C expression `word` into the array `out`."""
        return f"{self.function}({word}, {out});"


def _function(name: str, body: list[str]) -> str:
    lines = [f"LA_FAST_FN void {name}(unsigned int word, unsigned int* out)", "{"]
    lines += ["    " + line for line in body]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _small_integer_body(src: DataType, dst: DataType) -> list[str]:
    """b = 2, 4 or 8 bits, integer -> f16 or bf16 by the 0x6400 / 0x4300 magic (not 8 -> bf16)."""
    bits = src.nbits
    field = (1 << bits) - 1
    sign = 1 << (bits - 1) if src.is_signed else 0
    room = _MANTISSA_BITS[dst]
    magic_code = _code(dst, _MAGIC_VALUE[dst])
    body = ["unsigned int y;"]
    previous = None
    for k in range(32 // bits // 2):
        low_bit, high_bit = 2 * k * bits, (2 * k + 1) * bits
        if bits == 8:
            selector = _byte_selector(low_bit // 8, high_bit // 8)
            offsets = (0, 16)
        else:
            selector = _byte_selector(low_bit // 8, low_bit // 8)
            offsets = (low_bit % 8, 16 + high_bit % 8)
        if selector != previous:
            body.append(f"y = la_prmt(word, 0u, {selector});")
            previous = selector
        # Shift a field right when it would reach past the mantissa (bf16: 7 bits).
        shifts = [max(0, offset % 16 + bits - room) for offset in offsets]
        positions = [offset - shift for offset, shift in zip(offsets, shifts)]
        terms = []
        for shift in sorted(set(shifts)):
            mask = sum(field << p for p, s in zip(positions, shifts) if s == shift)
            source = f"(y >> {shift})" if shift else "y"
            terms.append(f"({source} & 0x{mask:08X}u)")
        magic = sum((magic_code | sign << (p % 16)) << (16 * (p // 16)) for p in positions)
        scales = [2.0 ** -(p % 16) for p in positions]
        biases = [-_MAGIC_VALUE[dst] * scale - sign for scale in scales]
        fields = terms[0] if len(terms) == 1 else f"({' | '.join(terms)})"
        fma = "la_fma_f16x2" if dst == dtypes.f16 else "la_fma_bf16x2"
        body.append(
            f"out[{k}] = {fma}({fields} ^ 0x{magic:08X}u, {_pair(dst, *scales)}, "
            f"{_pair(dst, *biases)});"
        )
    return body


def _byte_to_bf16_body(src: DataType) -> list[str]:
    """u8 / i8 -> bf16 through the float32 2^23 magic."""
    bias = 128 if src.is_signed else 0
    source = "word ^ 0x80808080u" if src.is_signed else "word"
    subtrahend = np.array([2.0**23 + bias], dtype=np.float32).view(np.uint32)[0]
    body = [f"const unsigned int codes = {source};", "unsigned int low, high;"]
    for k in range(2):
        for name, byte in (("low", 2 * k), ("high", 2 * k + 1)):
            body.append(
                f"{name} = la_sub_f32(la_prmt(codes, 0x4B000000u, 0x{0x7440 | byte:04X}u), "
                f"0x{int(subtrahend):08X}u);"
            )
        body.append(f"out[{k}] = la_prmt(low, high, 0x7632u);")
    return body


def _e2m1_body(dst: DataType) -> list[str]:
    """f4e2m1 -> f16 / bf16: place the bits, then scale by 2^14 / 2^126."""
    # Exponent-and-mantissa bits (a nibble's bits 0-2) go to the top 3 bits under the
    # exponent's lowest bits; the sign (bit 3) to bit 15 of each half.
    under = _MANTISSA_BITS[dst] - 1
    low_shift, high_shift = under, under + 16 - 4
    magnitude_mask = 0x7 << under | 0x7 << (under + 16)
    scale = 2.0**14 if dst == dtypes.f16 else 2.0**126
    fma = "la_fma_f16x2" if dst == dtypes.f16 else "la_fma_bf16x2"
    body = ["unsigned int b, magnitude, sign;"]
    for k in range(4):
        body.append(f"b = la_prmt(word, 0u, 0x444{k}u);")
        body.append(
            f"magnitude = ((b << {low_shift}) | (b << {high_shift})) & 0x{magnitude_mask:08X}u;"
        )
        body.append("sign = ((b << 12) | (b << 24)) & 0x80008000u;")
        body.append(
            f"out[{k}] = {fma}(magnitude | sign, {_pair(dst, scale, scale)}, "
            f"{_pair(dst, -0.0, -0.0)});"
        )
    return body


def _build() -> dict[tuple[DataType, DataType], FastConversion]:
    conversions = {}
    sources = [dtypes.u2, dtypes.i2, dtypes.u4, dtypes.i4, dtypes.u8, dtypes.i8, dtypes.f4e2m1]
    for src in sources:
        for dst in (dtypes.f16, dtypes.bf16):
            if src == dtypes.f4e2m1:
                body = _e2m1_body(dst)
            elif src.nbits == 8 and dst == dtypes.bf16:
                body = _byte_to_bf16_body(src)
            else:
                body = _small_integer_body(src, dst)
            name = f"la_fast_{src.name}_to_{dst.name}"
            conversions[src, dst] = FastConversion(
                src, dst, name, 32 // src.nbits, _function(name, body)
            )
    return conversions


FAST_CONVERSIONS: dict[tuple[DataType, DataType], FastConversion] = _build()
"""Every fast conversion by (src, dst): u2, i2, u4, i4, u8, i8 and f4e2m1 to f16 and bf16."""


def fast_conversion(src: DataType, dst: DataType) -> FastConversion | None:
    """The fast conversion of packed `src` words to `dst` codes, or None when there is none
    (then the generic per-element conversion of `backend.conversions` applies)."""
    return FAST_CONVERSIONS.get((src, dst))

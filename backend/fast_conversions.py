"""Fast conversions of packed low-bit codes to f16 and bf16, synthesized from where the codes lie.

A cast of a register tensor of b-bit codes (its words hold each thread's bitstream, element k
in bits ``[k b, (k + 1) b)``) to f16 or bf16 writes each output word, the 16-bit codes of
output elements 2j and 2j + 1, from two input elements, wherever they lie in the input's
bitstream (`plan_conversion` takes, for every output element, the input element it converts).
A conversion is planned once per cast, at lowering time, from that list:

- *Fields* (integers, b <= 7 for bf16, b <= 7 or 8 for f16): each output half is the magic
  number ``2^M`` (1024 for f16, 128 for bf16; M mantissa bits) with the element's field ORed
  into its mantissa at some bit p, ``2^M + 2^p u``; one ``fma.rn`` by ``2^-p`` minus
  ``2^(M-p)`` gives u (signed types: the field's top bit flipped in the same operation,
  ``u = n + 2^(b-1)``, and ``2^(b-1)`` more subtracted). The planner picks, per element, a
  32-bit *window* of the bitstream (an input word, free, or a funnel shift of two neighbouring
  words, one instruction, shared by every field that uses it) in which the field lands at an
  allowed p of its half. A window whose used bits all lie in its upper word is rendered as
  that word shifted left, which ptxas may issue as an integer multiply on the FMA pipe instead
  of a shift on the logic pipe that the masks keep busy (the f4e2m1 decode loop: 441 shifts
  beside 528 LOP3 on that pipe before, 69 after). When both fields of an output word lie in
  one window, the word costs one LOP3 (mask, magic and sign flips at once: ``(window & mask)
  ^ magic``) and one fma: about one instruction per weight at every width, which is why the
  packed weights (`ir.examples.packed_weights`) order each lane's codes so that the two
  elements of an output word lie 16 bits apart.
- *Floats* without infinities or NaNs (f4e2m1, f6e3m2, ...; exponent bits <= 4 for f16, <= 7
  for bf16): the magnitude bits go under the target's exponent (mantissa aligned with the
  target's top mantissa bits) and the sign to bit 15 of the half, giving the value times
  ``2^(bias - B)`` (B the target's bias), normal or subnormal; one fma by ``2^(B - bias)``
  plus ``-0`` scales it back and keeps signed zeros. Two windows per output word at most
  (magnitudes and signs sit at different distances).
- *Bytes to f16* (u8, i8): one ``prmt`` puts the two bytes under ``0x64`` exponent bytes
  (``1024 + u``), one fma subtracts 1024 (signed: the input word's sign bits flipped first).
- *Biased* (`ir.dtypes.magic_bias`, integers to f16 or bf16): each field goes to the one bit
  p its bias names, ORed into the magic number ``2^(M - p)`` whose mantissa's unit is then 1;
  the half is ``2^(M - p) + u``, the code's value plus its bias, with no fma. Bytes to f16:
  the ``prmt`` alone.
- *Bytes to bf16*: bf16's 8 significant bits cannot hold ``128 + u``: ``prmt`` builds the
  float32 ``2^23 + u``, one ``sub.f32`` gives the exact value, a last ``prmt`` joins the upper
  halves of two floats (their bf16 codes).

Every arithmetic step is exact (its result is representable), so no rounding happens and the
results equal `ir.dtypes.convert`'s. Generated code is plain C over five primitives,
``la_prmt(a, b, selector)`` (CUDA's ``__byte_perm``), ``la_shf_r(low, high, shift)`` (the low
32 bits of ``(high:low) >> shift``, CUDA's ``__funnelshift_r``), ``la_fma_f16x2`` and
``la_fma_bf16x2`` (PTX ``fma.rn`` on the two 16-bit lanes of 32-bit words) and ``la_sub_f32``
(float32 subtraction on bit patterns); `FAST_CONVERSION_PRIMITIVES` defines them for the
device. A test defines them on the host with exactness checks, compiles plans for many orders
with a C compiler and compares them with `ir.dtypes.convert` on every code in every position.

A LOP3 has room for one 32-bit immediate: `render` takes a `constant` callback for the magic
words, so that a kernel reads them from constant memory (`backend.lower` keeps a table per
kernel) and the mask stays the immediate. With both as immediates the compiler rebuilds the
mask in a register before every LOP3, a move per output word (measured in the decode matmul's
loop: a fifth of its instructions at 2 bits). The same holds for an fma's multiplier whose two
halves differ (fields at different positions of their halves, as 3, 5, 6 and 7 bits have:
16 bits apart is no multiple of the width): an HFMA2 takes only its addend as a 32-bit
immediate, so such a multiplier comes from the constant table too (decode loops at 3 to 7 bits:
8 to 15 % fewer instructions in SASS). And for the bytes' ``prmt``: with the exponent bytes
``0x64646464`` as its immediate, the compiler moves the selector into a register before each
one; from the table, the selector is the immediate (SASS of the i8 decode loop at M = 1: about
190 such moves in two k-tiles gone, 15 % fewer instructions; the i8 prefill loop 10 %).

    plan = plan_conversion(dtypes.u4, dtypes.f16, sources=list(range(8)), input_size=8)
    plan.instructions                        # estimated instructions for the whole cast
    plan.render(lambda w: f"x[{w}]", lambda j: f"y[{j}]", "t")   # C statements
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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

/* The low 32 bits of the 64-bit (high:low) shifted right by `shift` (0-31). */
LA_FAST_FN unsigned int la_shf_r(unsigned int low, unsigned int high, unsigned int shift)
{
    return __funnelshift_r(low, high, shift);
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
"""Device definitions of the primitives the rendered conversions call (and of the
``LA_FAST_FN`` qualifier); include it once before them."""

WORD_BITS = 32
_MAGIC_VALUE = {dtypes.f16: 1024, dtypes.bf16: 128}
"""Per target, the power of two whose ulp is 1: its code has an all-zero mantissa, so ORing a
field u into the mantissa at bit p gives the value ``magic + 2^p u``."""
_MANTISSA_BITS = {dtypes.f16: 10, dtypes.bf16: 7}
_EXPONENT_BIAS = {dtypes.f16: 15, dtypes.bf16: 127}
_MAX_FLOAT_EXPONENT_BITS = {dtypes.f16: 4, dtypes.bf16: 7}
"""Exponent bits of the widest source float whose every value, placed under the target's
exponent, is a finite normal or subnormal target number."""
_FMA = {dtypes.f16: "la_fma_f16x2", dtypes.bf16: "la_fma_bf16x2"}


class _Inexact(Exception):
    """A constant of a plan is not a value of its type (a scaled conversion past its range)."""


def _code(dtype: DataType, value: float) -> int:
    """The code of `value` in f16 or bf16; `_Inexact` when it is not exactly a value."""
    code = int(dtype.encode(np.array([value], dtype=np.float64))[0])
    if float(dtype.decode(np.array([code]))[0]) != value:
        raise _Inexact(f"{value!r} is not a value of {dtype}")
    return code


def _pair(dtype: DataType, low: float, high: float) -> int:
    """The 32-bit word holding the codes of `low` (bits 0-15) and `high` (bits 16-31)."""
    return _code(dtype, low) | _code(dtype, high) << 16


def _hex(value: int) -> str:
    return f"0x{value:08X}u"


def conversion_kind(src: DataType, dst: DataType) -> str | None:
    """How `plan_conversion` converts `src` codes to `dst`: "fields", "float", "bytes_f16",
    "bytes_bf16", or None when it has no fast conversion (then the generic per-element path of
    `backend.conversions` applies)."""
    if dst not in _MAGIC_VALUE or src.nbits > 8:
        return None
    if src.is_float:
        finite = not (src.has_inf or src.has_nan)
        fits = src.exponent_bits <= _MAX_FLOAT_EXPONENT_BITS[dst]
        return "float" if finite and fits else None
    if src.nbits == 8:
        return "bytes_f16" if dst == dtypes.f16 else "bytes_bf16"
    return "fields" if src.nbits <= _MANTISSA_BITS[dst] else None


def fma_free_exponent(src: DataType, dst: DataType) -> int | None:
    """The exponent of a scaled cast (`ir.builder.ProgramBuilder.cast`) from `src` to `dst`
    whose fast conversion needs no fma: for the float kind, the source's bias minus the
    target's (the placed bits are then the scaled value), when that scaled cast is exact; else
    None."""
    if conversion_kind(src, dst) != "float":
        return None
    exponent = src.bias - dst.bias
    return None if dtypes.scaled_conversion_error(src, dst, exponent) else exponent


@dataclass(frozen=True)
class _Piece:
    """Bits [src, src + length) of the input go to bit `dest` of the output word; `dest` may be
    anywhere in [dest_lo, dest_hi] (integer fields choose their position p)."""

    src: int
    length: int
    dest_lo: int
    dest_hi: int

    @property
    def windows(self) -> range:
        """Window offsets r (bits [r, r + 32) of the input) that hold the piece in place."""
        return range(self.src - self.dest_hi, self.src - self.dest_lo + 1)


@dataclass(frozen=True)
class _Word:
    """One output word: `terms` ((window offset, mask), ...) XORed together with `magic`, then
    ``fma(t, scale, bias)`` unless `fma` is None; or a byte path (`prmt`, see `_render_word`)."""

    terms: tuple[tuple[int, int], ...] = ()
    magic: int = 0
    fma: tuple[int, int] | None = None
    prmt: tuple[int, int, int] | None = None
    """(word a, word b, selector) of a byte permutation, for the byte kinds."""
    bf16_bytes: tuple[tuple[int, int], tuple[int, int]] | None = None
    """((word, byte), (word, byte)) of the two elements, for bytes to bf16."""


@dataclass(frozen=True)
class ConversionPlan:
    """The planned conversion of one cast: `render` prints it; `instructions` estimates what it
    executes per thread (LOP3, shifts, prmt, fma and sub; constants are free, but a LOP3 takes
    one: an output word that joins terms of two windows with a magic number takes a LOP3 more,
    as ptxas issues it: 42 LOP3 a unit in the SASS of the 3-bit biased cast, 40 estimated)."""

    src: DataType
    dst: DataType
    kind: str
    input_words: int
    windows: tuple[int, ...]
    """Unaligned window offsets, each computed once (one shift)."""
    words: tuple[_Word, ...]
    flipped_words: tuple[int, ...]
    """Input words whose byte sign bits are flipped once (signed byte kinds)."""

    @property
    def instructions(self) -> int:
        count = len(self.windows) + len(self.flipped_words)
        for word in self.words:
            if self.kind in ("fields", "float"):
                # A LOP3 takes one constant: terms joined with a magic number take one more.
                joined = len(word.terms) > 1 and word.magic != 0
                count += max(1, len(word.terms)) + joined + (word.fma is not None)
            elif self.kind == "bytes_f16":
                joined = word.prmt is not None and word.prmt[0] != word.prmt[1]
                count += 1 + joined + (word.fma is not None)
            else:
                count += 5
        return count

    def render(
        self,
        word: Callable[[int], str],
        out: Callable[[int], str],
        prefix: str,
        constant: Callable[[int], str] | None = None,
    ) -> list[str]:
        """C statements computing every output word: `word(i)` is the C text of input word i,
        `out(j)` an lvalue for output word j, `prefix` a unique stem for temporaries,
        `constant(value)` the C operand of a 32-bit magic word, or of an fma multiplier whose
        halves differ (None: the literal)."""
        magic = _hex if constant is None else constant
        lines = []
        used = self.window_bits()
        window_names = {}
        for index, offset in enumerate(self.windows):
            name = f"{prefix}_w{index}"
            lines.append(f"const unsigned int {name} = {self._window(offset, used[offset], word)};")
            window_names[offset] = name
        flipped = {}
        for w in self.flipped_words:
            name = f"{prefix}_s{w}"
            lines.append(f"const unsigned int {name} = {word(w)} ^ 0x80808080u;")
            flipped[w] = name

        def source(offset: int) -> str:
            if offset in window_names:
                return window_names[offset]
            return word(offset // WORD_BITS)

        def byte_word(w: int) -> str:
            return flipped.get(w, word(w))

        for j, planned in enumerate(self.words):
            lines.append(f"{out(j)} = {self._word(planned, source, byte_word, magic)};")
        return lines

    def window_bits(self) -> dict[int, int]:
        """For each unaligned window offset, the bits of the window that some output word
        takes (the union of its terms' masks)."""
        used = dict.fromkeys(self.windows, 0)
        for planned in self.words:
            for offset, mask in planned.terms:
                if offset in used:
                    used[offset] |= mask
        return used

    def _window(self, offset: int, used: int, word: Callable[[int], str]) -> str:
        """The C text of the window at `offset`, of which the output words take the bits
        `used`: the upper word shifted left where those bits all lie in it (see the module
        header), else a funnel shift of the two words (a right shift of the lower word alone
        compiles to the same one instruction, and changed the i2 decode loop's schedule for the
        worse: 578 -> 657 instructions in SASS), or the last word shifted right."""
        low, shift = divmod(offset, WORD_BITS)
        high = low + 1
        from_high = used >> (WORD_BITS - shift) << (WORD_BITS - shift) == used
        if low < 0 or (from_high and high < self.input_words):
            return f"({word(high)} << {WORD_BITS - shift})"
        if high >= self.input_words:
            return f"({word(low)} >> {shift})"
        return f"la_shf_r({word(low)}, {word(high)}, {shift}u)"

    def _word(
        self,
        planned: _Word,
        source: Callable[[int], str],
        byte_word: Callable[[int], str],
        magic: Callable[[int], str],
    ) -> str:
        fma = _FMA[self.dst]
        if self.kind == "bytes_bf16":
            halves = []
            bias = 128 if self.src.is_signed else 0
            subtrahend = int(np.array([2.0**23 + bias], dtype=np.float32).view(np.uint32)[0])
            for w, byte in planned.bf16_bytes:
                built = f"la_prmt({byte_word(w)}, 0x4B000000u, 0x{0x7440 | byte:04X}u)"
                halves.append(f"la_sub_f32({built}, {_hex(subtrahend)})")
            return f"la_prmt({halves[0]}, {halves[1]}, 0x7632u)"
        if self.kind == "bytes_f16":
            a, b, selector = planned.prmt
            if a == b:
                value = f"la_prmt({byte_word(a)}, {magic(0x64646464)}, 0x{selector:04X}u)"
            else:
                joined = f"la_prmt({byte_word(a)}, {byte_word(b)}, 0x{selector:04X}u)"
                value = f"(({joined} & 0x00FF00FFu) ^ {magic(0x64006400)})"
        else:
            parts = [f"({source(offset)} & {_hex(mask)})" for offset, mask in planned.terms]
            if planned.magic:
                parts.append(magic(planned.magic))
            value = parts[0] if len(parts) == 1 else "(" + " ^ ".join(parts) + ")"
        if planned.fma is None:
            return value
        scale, bias = planned.fma
        # HFMA2 takes a 32-bit immediate for its addend, but a multiplier whose two halves
        # differ only from a register or the constant bank: from the constant table, or the
        # compiler rebuilds it in a register before every use.
        multiplier = _hex(scale) if scale >> 16 == scale & 0xFFFF else magic(scale)
        return f"{fma}({value}, {multiplier}, {_hex(bias)})"


def _choose_windows(
    pairs: list[list[_Piece]], input_words: int
) -> tuple[list[list[int]], list[int]]:
    """A window offset for every piece (per pair, in order) and the unaligned windows used.

    Aligned windows (whole input words) are free, an unaligned one costs one shift, and
    every distinct window of an output word one LOP3. Greedy: a pair whose pieces share a free
    window takes it; the pairs left that fit one window take the window that serves most of
    them, in turn; pieces of pairs that fit no single window take a free window or, in turn,
    the one that serves most of them.
    """
    aligned = {WORD_BITS * w for w in range(input_words)}
    chosen: list[int] = []

    def free(offsets: Sequence[int]) -> int | None:
        candidates = [r for r in offsets if r in aligned or r in chosen]
        return min(candidates, key=lambda r: (r not in aligned, r)) if candidates else None

    def common(pieces: list[_Piece]) -> range:
        lo = max(p.windows.start for p in pieces)
        hi = min(p.windows.stop for p in pieces)
        return range(lo, max(lo, hi))

    assignment: list[list[int | None]] = [[None] * len(pieces) for pieces in pairs]

    def cover(items: list[tuple[int, range]], place: Callable[[int, int], None]) -> None:
        pending = []
        for item, offsets in items:
            r = free(offsets)
            if r is None:
                pending.append((item, offsets))
            else:
                place(item, r)
        while pending:
            counts: dict[int, int] = {}
            for _, offsets in pending:
                for r in offsets:
                    counts[r] = counts.get(r, 0) + 1
            best = min(counts, key=lambda r: (-counts[r], r % 8 != 0, r))
            chosen.append(best)
            remaining = []
            for item, offsets in pending:
                if best in offsets:
                    place(item, best)
                else:
                    remaining.append((item, offsets))
            pending = remaining

    def place_pair(index: int, r: int) -> None:
        assignment[index] = [r] * len(pairs[index])

    whole = [(i, common(pieces)) for i, pieces in enumerate(pairs) if len(common(pieces))]
    cover(whole, place_pair)
    loose = [
        (i * 8 + k, piece.windows)
        for i, pieces in enumerate(pairs)
        if assignment[i][0] is None
        for k, piece in enumerate(pieces)
    ]

    def place_piece(item: int, r: int) -> None:
        assignment[item // 8][item % 8] = r

    cover(loose, place_piece)
    return [[int(r) for r in row] for row in assignment], sorted(
        r for r in chosen if r not in aligned
    )


def _field_pieces(
    src: DataType, dst: DataType, sources: Sequence[int], j: int, biased: bool
) -> list[_Piece]:
    bits = src.nbits
    if biased:
        # Each field at the one bit its magic number's bias names (`ir.dtypes.magic_bias`).
        period = dtypes.magic_field_period(src, dst)
        pieces = []
        for h in range(2):
            start = sources[2 * j + h] * bits
            at = 16 * h + start % period
            pieces.append(_Piece(start, bits, at, at))
        return pieces
    if src.is_float:
        place = _MANTISSA_BITS[dst] - src.mantissa_bits
        pieces = []
        for h in range(2):
            start = sources[2 * j + h] * bits
            pieces.append(_Piece(start, bits - 1, 16 * h + place, 16 * h + place))
            pieces.append(_Piece(start + bits - 1, 1, 16 * h + 15, 16 * h + 15))
        return pieces
    room = _MANTISSA_BITS[dst] - bits
    return [_Piece(sources[2 * j + h] * bits, bits, 16 * h, 16 * h + room) for h in range(2)]


def _field_word(
    src: DataType,
    dst: DataType,
    pieces: list[_Piece],
    offsets: list[int],
    exponent: int,
    biased: bool,
) -> _Word:
    masks: dict[int, int] = {}
    positions = []
    for piece, r in zip(pieces, offsets):
        at = piece.src - r
        masks[r] = masks.get(r, 0) | ((1 << piece.length) - 1) << at
        positions.append(at)
    terms = tuple(sorted(masks.items()))
    if src.is_float:
        scale = 2.0 ** (_EXPONENT_BIAS[dst] - src.bias + exponent)
        if scale == 1.0:
            return _Word(terms, 0, None)  # the placed bits are the result, signed zeros too
        return _Word(terms, 0, (_pair(dst, scale, scale), _pair(dst, -0.0, -0.0)))
    bits = src.nbits
    sign = 1 << (bits - 1) if src.is_signed else 0
    if biased:
        # The magic number 2^(M - p) puts the field's unit at 1: 2^(M - p) + u is the
        # biased value, nothing to subtract.
        magic = 0
        for h, at in enumerate(positions):
            p = at - 16 * h
            code = _code(dst, 2.0 ** (_MANTISSA_BITS[dst] - p))
            magic |= (code | sign << p) << (16 * h)
        return _Word(terms, magic, None)
    magic_code = _code(dst, _MAGIC_VALUE[dst])
    magic = 0
    scales, biases = [], []
    for h, at in enumerate(positions):
        p = at - 16 * h
        magic |= (magic_code | sign << p) << (16 * h)
        scales.append(2.0 ** (exponent - p))
        biases.append((-_MAGIC_VALUE[dst] * 2.0**-p - sign) * 2.0**exponent)
    return _Word(terms, magic, (_pair(dst, *scales), _pair(dst, *biases)))


def plan_conversion(
    src: DataType,
    dst: DataType,
    sources: Sequence[int],
    input_size: int,
    exponent: int = 0,
    biased: bool = False,
) -> ConversionPlan | None:
    """The fast conversion of a cast whose output element j converts input element
    ``sources[j]`` (input elements are b-bit codes in a bitstream of `input_size` elements),
    the values times ``2**exponent`` (a scaled cast, exact: `ir.dtypes.convert_scaled`), or
    with `biased` plus their magic numbers' biases (`ir.dtypes.magic_bias`); None when
    `conversion_kind` has none, the output count is odd, or a scaled conversion's constants
    are not values of the target (bytes to bf16 take no exponent), or a biased cast is not
    available (`ir.dtypes.magic_bias_error`, or an exponent with it).

    The exponent only changes the final fma's constants; a float whose exponent makes its
    multiplier 1 needs no fma at all (``exponent = bias - B``), nor does a biased cast: its
    fields are placed at the bit their bias names and ORed into their magic numbers, one
    LOP3 a word (bytes: one ``prmt``)."""
    kind = conversion_kind(src, dst)
    if kind is None or len(sources) % 2 or not sources:
        return None
    if exponent and (kind == "bytes_bf16" or dtypes.scaled_conversion_error(src, dst, exponent)):
        return None
    if biased and (exponent or dtypes.magic_bias_error(src, dst) is not None):
        return None
    try:
        return _plan(src, dst, kind, sources, input_size, exponent, biased)
    except _Inexact:
        return None


def _plan(
    src: DataType,
    dst: DataType,
    kind: str,
    sources: Sequence[int],
    input_size: int,
    exponent: int,
    biased: bool,
) -> ConversionPlan:
    bits = src.nbits
    input_words = -(-input_size * bits // WORD_BITS)
    count = len(sources) // 2
    if kind in ("fields", "float"):
        pairs = [_field_pieces(src, dst, sources, j, biased) for j in range(count)]
        offsets, windows = _choose_windows(pairs, input_words)
        words = tuple(
            _field_word(src, dst, pairs[j], offsets[j], exponent, biased) for j in range(count)
        )
        return ConversionPlan(src, dst, kind, input_words, tuple(windows), words, ())
    located = [divmod(sources[j] * bits, WORD_BITS) for j in range(len(sources))]
    flipped = sorted({w for w, _ in located}) if src.is_signed else []
    words = []
    for j in range(count):
        (wa, at_a), (wb, at_b) = located[2 * j], located[2 * j + 1]
        ba, bb = at_a // 8, at_b // 8
        if kind == "bytes_bf16":
            words.append(_Word(bf16_bytes=((wa, ba), (wb, bb))))
            continue
        if wa == wb:
            selector = 4 << 12 | bb << 8 | 4 << 4 | ba
        else:
            selector = ba << 12 | (4 + bb) << 8 | ba << 4 | ba
        bias = -(_MAGIC_VALUE[dst] + (128 if src.is_signed else 0)) * 2.0**exponent
        scale = 2.0**exponent
        fma = None if biased else (_pair(dst, scale, scale), _pair(dst, bias, bias))
        words.append(_Word(fma=fma, prmt=(wa, wb, selector)))
    return ConversionPlan(src, dst, kind, input_words, (), tuple(words), tuple(flipped))

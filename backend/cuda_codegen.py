"""Pieces of CUDA C++ that the lowering assembles: a code writer, types, packing and op formulas.

Register tensors live in per-thread arrays of 32-bit words holding their bitstream of *codes*
(`backend.lower.registers`); every index into them is a compile-time constant, so NVCC keeps
them in registers. Memory moves whole vectors of 1 to 16
bytes (`VECTOR_TYPES`): `unpack_expressions` cuts a loaded vector into element codes and
`pack_expression` builds one from codes, both following the dense LSB-first bitstream of the
contract (element k in bits [k*b, (k+1)*b) of the little-endian vector).

Elementwise operations compute on values (`backend.conversions.value_type`): float types in
float32 with the round-to-nearest intrinsics (`__fadd_rn` ...), which NVCC never contracts into a
fused multiply-add, so each operation rounds exactly as the reference interpreter's NumPy float32
operation does; f16 and bf16 add, subtract and multiply on codes with the native `_rn`
instructions (`la_hmul_f16` ...), which round the same way; a NaN result is positive
(`la_arithmetic_nan`: the contract's arithmetic class). Integer types compute in 32-bit two's
complement, wrapped to the type's width at the end, with floor division and modulo
(`la_floordiv`, `la_floormod`). `OPERATION_SOURCE` defines those and the memory helpers:
element-by-element loads of sub-byte elements (`la_load_bits`) and stores that change only the
element's own bits with atomic AND/OR on the containing 32-bit words (`la_store_bits`), so that
threads sharing a byte keep each other's elements. It is plain CUDA C++ without inline PTX; the
PTX (``cp.async`` and its groups) lives apart in `ASYNC_COPY_SOURCE`, the prefetches' in
`PREFETCH_SOURCE`, the combining stores' (``red.global.add``) in `COMBINE_SOURCE` and the
`atomic_add` tickets' (``atom.acq_rel.gpu``) in `TICKET_SOURCE`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from ir.dtypes import DataType
from ir.instructions import COMBINE_DTYPES

VECTOR_TYPES: dict[int, str] = {
    1: "unsigned char",
    2: "unsigned short",
    4: "unsigned int",
    8: "uint2",
    16: "uint4",
}
"""The C type of a vector access of each size in bytes."""

_VECTOR_WORDS = {8: ("x", "y"), 16: ("x", "y", "z", "w")}

MIXED_MIN_MAX_SOURCE = r"""
/* min and max of an int and a 64-bit integer: index expressions print min and max as calls
   (`Expr.to_c`) and mix the two widths, where CUDA declares them for one operand type. */
static __device__ __forceinline__ long long min(long long a, int b) { return a < b ? a : b; }
static __device__ __forceinline__ long long min(int a, long long b) { return a < b ? a : b; }
static __device__ __forceinline__ long long max(long long a, int b) { return a > b ? a : b; }
static __device__ __forceinline__ long long max(int a, long long b) { return a > b ? a : b; }
"""
"""The overloads of `min` and `max` that CUDA lacks and the lowering's C text needs (`c_text`
widens one operand of an operation, so the two of a min may be an int and a long long)."""

OPERATION_SOURCE = (
    MIXED_MIN_MAX_SOURCE
    + r"""
/* ---- operation and memory helpers (see backend/cuda_codegen.py) ---- */

/* A float32 result of the contract's arithmetic class: a NaN is the positive quiet NaN. The
   device's float32 add, subtract and multiply already give a positive NaN (0x7FFFFFFF); a host's
   may not (x86 keeps an operand's payload and sign), nor may a multi-instruction sequence. */
static __device__ __forceinline__ float la_arithmetic_nan(float result)
{
    return result == result ? result : la_bits_to_float(0x7FC00000u);
}

static __device__ __forceinline__ float la_hardware_nan(float result)
{
#ifdef LA_DEVICE_CODE
    return result;
#else
    return la_arithmetic_nan(result);
#endif
}

/* Float arithmetic rounded to nearest even, never contracted (the `_rn` intrinsics). */
static __device__ __forceinline__ float la_fadd(float a, float b)
{
    return la_hardware_nan(__fadd_rn(a, b));
}

static __device__ __forceinline__ float la_fsub(float a, float b)
{
    return la_hardware_nan(__fsub_rn(a, b));
}

static __device__ __forceinline__ float la_fmul(float a, float b)
{
    return la_hardware_nan(__fmul_rn(a, b));
}

/* a * b + c rounded once: the IR's fma. */
static __device__ __forceinline__ float la_ffma(float a, float b, float c)
{
    return la_hardware_nan(__fmaf_rn(a, b, c));
}

static __device__ __forceinline__ float la_fdiv(float a, float b)
{
    return la_arithmetic_nan(__fdiv_rn(a, b));
}

static __device__ __forceinline__ float la_fsqrt(float a)
{
    return la_arithmetic_nan(__fsqrt_rn(a));
}

/* Float max and min with the IR's rules: a NaN first operand loses, signed zeros keep the
   first operand when equal; a NaN result is the positive quiet NaN. */
static __device__ __forceinline__ float la_fmax(float a, float b)
{
    return la_arithmetic_nan((a < b || a != a) ? b : a);
}

static __device__ __forceinline__ float la_fmin(float a, float b)
{
    return la_arithmetic_nan((b < a || a != a) ? b : a);
}

/* f16 and bf16 add, subtract and multiply on codes. On the device: the native correctly rounded
   instructions (the `_rn` forms, never fused into an FMA), whose NaN is positive. Elsewhere:
   through float32, which gives the same code (float32 has at least 2p + 2 significand bits, so
   the double rounding is innocuous). */
#ifdef LA_DEVICE_CODE
#define LA_HALF_OPERATION(name, intrinsic, to_type, from_type, decode, encode, f32_op) \
    static __device__ __forceinline__ la_u32 name(la_u32 a, la_u32 b)                       \
    {                                                                                      \
        return from_type(intrinsic(to_type((unsigned short)a), to_type((unsigned short)b))); \
    }
#else
#define LA_HALF_OPERATION(name, intrinsic, to_type, from_type, decode, encode, f32_op) \
    static __device__ __forceinline__ la_u32 name(la_u32 a, la_u32 b)                       \
    {                                                                                      \
        return encode(f32_op(decode(a), decode(b)));                                       \
    }
#endif
LA_HALF_OPERATION(la_hadd_f16, __hadd_rn, __ushort_as_half, __half_as_ushort,
                  la_decode_f16, la_encode_f16, la_fadd)
LA_HALF_OPERATION(la_hsub_f16, __hsub_rn, __ushort_as_half, __half_as_ushort,
                  la_decode_f16, la_encode_f16, la_fsub)
LA_HALF_OPERATION(la_hmul_f16, __hmul_rn, __ushort_as_half, __half_as_ushort,
                  la_decode_f16, la_encode_f16, la_fmul)
LA_HALF_OPERATION(la_hadd_bf16, __hadd_rn, __ushort_as_bfloat16,
                  __bfloat16_as_ushort, la_decode_bf16, la_encode_bf16, la_fadd)
LA_HALF_OPERATION(la_hsub_bf16, __hsub_rn, __ushort_as_bfloat16,
                  __bfloat16_as_ushort, la_decode_bf16, la_encode_bf16, la_fsub)
LA_HALF_OPERATION(la_hmul_bf16, __hmul_rn, __ushort_as_bfloat16,
                  __bfloat16_as_ushort, la_decode_bf16, la_encode_bf16, la_fmul)
#undef LA_HALF_OPERATION

/* The same on two elements in one 32-bit word (the paired `*2_rn` instructions; register tensors
   hold their codes as words, so a pair of f16 or bf16 elements is one operand). */
#ifdef LA_DEVICE_CODE
#define LA_HALF2_OPERATION(name, pair, intrinsic, single)                                  \
    static __device__ __forceinline__ la_u32 name(la_u32 a, la_u32 b)                      \
    {                                                                                      \
        const pair result = intrinsic(*(const pair*)&a, *(const pair*)&b);                 \
        return *(const la_u32*)&result;                                                    \
    }
#else
#define LA_HALF2_OPERATION(name, pair, intrinsic, single)                                  \
    static __device__ __forceinline__ la_u32 name(la_u32 a, la_u32 b)                      \
    {                                                                                      \
        return single(a & 0xFFFFu, b & 0xFFFFu) | (single(a >> 16, b >> 16) << 16);          \
    }
#endif
LA_HALF2_OPERATION(la_hadd2_f16, __half2, __hadd2_rn, la_hadd_f16)
LA_HALF2_OPERATION(la_hsub2_f16, __half2, __hsub2_rn, la_hsub_f16)
LA_HALF2_OPERATION(la_hmul2_f16, __half2, __hmul2_rn, la_hmul_f16)
LA_HALF2_OPERATION(la_hadd2_bf16, __nv_bfloat162, __hadd2_rn, la_hadd_bf16)
LA_HALF2_OPERATION(la_hsub2_bf16, __nv_bfloat162, __hsub2_rn, la_hsub_bf16)
LA_HALF2_OPERATION(la_hmul2_bf16, __nv_bfloat162, __hmul2_rn, la_hmul_bf16)
#undef LA_HALF2_OPERATION

/* Integer absolute value (wrapping: the most negative int stays itself), max and min. */
static __device__ __forceinline__ int la_iabs(int a)
{
    return a < 0 ? (int)(0u - (la_u32)a) : a;
}

static __device__ __forceinline__ int la_imax(int a, int b)
{
    return a < b ? b : a;
}

static __device__ __forceinline__ int la_imin(int a, int b)
{
    return b < a ? b : a;
}

/* Python's floor division and modulo on 32-bit ints (computed in 64 bits: INT_MIN / -1). */
static __device__ __forceinline__ int la_floordiv(int a, int b)
{
    long long quotient = (long long)a / b;
    if (quotient * b != a && ((a < 0) != (b < 0))) {
        quotient -= 1;
    }
    return (int)quotient;
}

static __device__ __forceinline__ int la_floormod(int a, int b)
{
    long long remainder = (long long)a % b;
    if (remainder != 0 && ((remainder < 0) != (b < 0))) {
        remainder += b;
    }
    return (int)remainder;
}

/* The code of the `nbits`-bit element at bit `bit` of the bitstream at `base` (one or two
   bytes read; never a byte past the element). */
static __device__ __forceinline__ la_u32 la_load_bits(const unsigned char* base, long long bit,
                                                      int nbits)
{
    const long long byte = bit >> 3;
    const int shift = (int)(bit & 7);
    la_u32 window = base[byte];
    if (shift + nbits > 8) {
        window |= (la_u32)base[byte + 1] << 8;
    }
    return (window >> shift) & ((1u << nbits) - 1u);
}

/* Write `code` as the `nbits`-bit element at bit `bit` of the bitstream at `base` (4-byte
   aligned), changing no other bit: atomic AND then OR on the 32-bit words holding it. */
static __device__ __forceinline__ void la_store_bits(unsigned char* base, long long bit,
                                                     la_u32 code, int nbits)
{
    unsigned int* word = (unsigned int*)base + (bit >> 5);
    const int shift = (int)(bit & 31);
    const la_u32 mask = (1u << nbits) - 1u;
    code &= mask;
    atomicAnd(word, ~(mask << shift));
    atomicOr(word, code << shift);
    if (shift + nbits > 32) {
        atomicAnd(word + 1, ~(mask >> (32 - shift)));
        atomicOr(word + 1, code >> (32 - shift));
    }
}
"""
)


PREFETCH_SOURCE = r"""
/* ---- prefetches of global memory (`prefetch_global`; see backend/cuda_codegen.py) ---- */

/* Ask for the line holding the byte at `global` to be brought into L1 (a hint). */
static __device__ __forceinline__ void la_prefetch_l1(const void* global)
{
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(global));
}

/* The same into L2 alone. */
static __device__ __forceinline__ void la_prefetch_l2(const void* global)
{
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(global));
}

/* The same for the element whose first bit is bit `bit` of the bitstream at `base`. */
static __device__ __forceinline__ void la_prefetch_l1_bits(const unsigned char* base, long long bit)
{
    la_prefetch_l1(base + (bit >> 3));
}

static __device__ __forceinline__ void la_prefetch_l2_bits(const unsigned char* base, long long bit)
{
    la_prefetch_l2(base + (bit >> 3));
}
"""
"""The helpers of `prefetch_global`, in a kernel that has one: inline PTX ``prefetch.global.L1``
or ``prefetch.global.L2`` per address, whole-byte elements and vectors by their address,
sub-byte elements by the byte holding their first bit."""


TICKET_SOURCE = r"""
/* ---- the tickets of `atomic_add` (see backend/cuda_codegen.py) ---- */

/* Add `value` to the int at `word` at GPU scope and return the old value: a release of what
   the calling thread's block (made visible to it by the barrier before) wrote, and an acquire
   of what the blocks whose adds came earlier released, for the block after the barrier that
   follows. */
static __device__ __forceinline__ int la_ticket_add(int* word, int value)
{
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n"
                 : "=r"(old)
                 : "l"(word), "r"(value)
                 : "memory");
    return old;
}
"""
"""`la_ticket_add`, the one atomic of an `atomic_add` (sm_70 and later): one thread of the block
(or thread group) adds, between two barriers of it. The PTX memory model makes this the release
and acquire the instruction promises to the whole block: the barrier before orders every
thread's earlier stores before the add at CTA scope, the add's release is cumulative over them
(causality order is transitive), and the barrier after orders the add's acquire before every
thread's later loads. The same pattern as the semaphores of CUTLASS's serial split-k and
stream-K (a barrier, then one thread's release or acquire at GPU scope): no other thread
fences."""


_SCALAR_COMBINE_SOURCE = r"""
/* ---- combining stores (`store_global(..., combine="add")`; see backend/cuda_codegen.py) ---- */

/* Add the element `code` to the element at `element` in global memory, atomically (a `red`:
   nothing is returned, so the thread does not wait for it). f32 flushes subnormal inputs and
   results to zero (the PTX ISA's f32 add in global memory); f16 and bf16 keep them (.noftz). */
static __device__ __forceinline__ void la_red_add_i32(la_u32* element, la_u32 code)
{
    asm volatile("red.global.add.u32 [%0], %1;\n" ::"l"(element), "r"(code) : "memory");
}

static __device__ __forceinline__ void la_red_add_f32(la_u32* element, la_u32 code)
{
    asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(element), "f"(la_bits_to_float(code))
                 : "memory");
}

static __device__ __forceinline__ void la_red_add_f16(unsigned short* element, la_u32 code)
{
    asm volatile("red.global.add.noftz.f16 [%0], %1;\n" ::"l"(element), "h"((unsigned short)code)
                 : "memory");
}

/* bf16 adds in memory from sm_90; before, a compare-and-swap loop on the element with the
   correctly rounded bf16 add. */
static __device__ __forceinline__ void la_red_add_bf16(unsigned short* element, la_u32 code)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.noftz.bf16 [%0], %1;\n" ::"l"(element), "h"((unsigned short)code)
                 : "memory");
#else
    unsigned short seen = *(volatile unsigned short*)element, expected;
    do {
        expected = seen;
        seen = atomicCAS(element, expected, (unsigned short)la_hadd_bf16(expected, code));
    } while (seen != expected);
#endif
}
"""


VECTOR_COMBINE_DTYPES = ("f32", "f16", "bf16")
"""The types whose combining stores add a run of elements with one vector ``red.global.add``
(sm_90; the 32-bit integers have no vector form)."""
VECTOR_COMBINE_WIDTHS = {"f32": (2, 4), "f16": (2, 4, 8), "bf16": (2, 4, 8)}
"""The run lengths (elements, 8 to 16 bytes; 4 for a pair of halves) of each type's vector
adds."""


def combine_helper(dtype: str, width: int = 1) -> str:
    """The C name of the helper that adds one `dtype` element (`width` 1, any type of
    `ir.instructions.COMBINE_DTYPES`) or a run of `width` consecutive ones at once."""
    if width == 1 and dtype in COMBINE_DTYPES:
        return f"la_red_add_{dtype}"
    if width not in VECTOR_COMBINE_WIDTHS.get(dtype, ()):
        raise ValueError(f"no combining add of {width} {dtype} elements")
    return f"la_red_add_{dtype}_v{width}"


def _vector_combine_function(dtype: str, width: int) -> str:
    """C text of `combine_helper(dtype, width)`: the run's 32-bit words (a pair of
    halves a word, the lower half first) added by one ``red.global.add`` with a vector operand
    from sm_90 (or a packed one for a single pair of halves); before sm_90 by the packed f16
    pair's red word by word, or the single elements' helpers in order (f32, bf16)."""
    words = width if dtype == "f32" else width // 2
    names = [f"w{q}" for q in range(words)]
    if dtype == "f32":
        form = f"v{width}.f32"
        operands = [f'"f"(la_bits_to_float({name}))' for name in names]
        fallback = [f"la_red_add_f32((la_u32*)address + {q}, w{q});" for q in range(words)]
    else:
        form = f"noftz.{dtype}x2" if words == 1 else f"noftz.v{words}.{dtype}x2"
        operands = [f'"r"({name})' for name in names]
        if dtype == "f16":
            fallback = [f"la_red_add_f16_v2((la_u32*)address + {q}, w{q});" for q in range(words)]
        else:
            fallback = [
                f"la_red_add_bf16((unsigned short*)address + {2 * q + h}, w{q}"
                + (" & 0xffffu);" if h == 0 else " >> 16);")
                for q in range(words)
                for h in range(2)
            ]
    registers = ", ".join(f"%{q + 1}" for q in range(words))
    vector = registers if words == 1 else "{" + registers + "}"
    red = [
        f'    asm volatile("red.global.add.{form} [%0], {vector};\\n"',
        f'                 ::"l"(address), {", ".join(operands)}',
        '                 : "memory");',
    ]
    parameters = ", ".join(f"la_u32 {name}" for name in names)
    lines = [
        f"static __device__ __forceinline__ void {combine_helper(dtype, width)}("
        f"void* address, {parameters})",
        "{",
    ]
    if dtype == "f16" and words == 1:
        lines += red  # the packed f16 pair's red exists from sm_60
    else:
        lines += ["#if __CUDA_ARCH__ >= 900", *red, "#else"]
        lines += [f"    {line}" for line in fallback]
        lines.append("#endif")
    lines.append("}")
    return "\n".join(lines)


COMBINE_SOURCE = (
    _SCALAR_COMBINE_SOURCE
    + "\n/* Add a run of consecutive elements, their 32-bit words in order, atomically element by\n"
    "   element: one vector red from sm_90 (f32 flushing as above). */\n"
    + "\n\n".join(
        _vector_combine_function(dtype, width)
        for dtype in VECTOR_COMBINE_DTYPES
        for width in VECTOR_COMBINE_WIDTHS[dtype]
    )
    + "\n"
)
"""The helpers of a combining `store_global`, in a kernel that has one: one inline PTX
``red.global.add`` per element (``.u32`` for i32, whose wrapping add is the same bits; bf16 from
sm_90, a compare-and-swap loop before), and one per run of f32, f16 or bf16 elements
(`combine_helper`)."""


ASYNC_COPY_SOURCE = r"""
/* ---- asynchronous copies global -> shared (sm_80+; see backend/cuda_codegen.py) ---- */

/* Copy 4, 8 or 16 bytes; 16-byte copies bypass L1 (.cg). */
static __device__ __forceinline__ void la_cp_async_16(void* shared, const void* global)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global)
                 : "memory");
}

static __device__ __forceinline__ void la_cp_async_8(void* shared, const void* global)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(address), "l"(global)
                 : "memory");
}

static __device__ __forceinline__ void la_cp_async_4(void* shared, const void* global)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(address), "l"(global)
                 : "memory");
}

/* Copy `bytes` (0 to 16) of a 16-byte vector and zero-fill the rest (the PTX src-size). */
static __device__ __forceinline__ void la_cp_async_zfill_16(void* shared, const void* global,
                                                            int bytes)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global),
                 "r"(bytes)
                 : "memory");
}

static __device__ __forceinline__ void la_cp_async_zfill_8(void* shared, const void* global,
                                                           int bytes)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(address), "l"(global),
                 "r"(bytes)
                 : "memory");
}

static __device__ __forceinline__ void la_cp_async_zfill_4(void* shared, const void* global,
                                                           int bytes)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(address), "l"(global),
                 "r"(bytes)
                 : "memory");
}

/* Close the group of copies issued since the last commit. */
static __device__ __forceinline__ void la_cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Wait until at most `pending` committed groups are still in flight. */
template <int pending>
static __device__ __forceinline__ void la_cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}
"""


class CodeWriter:
    """Lines of C++ with block indentation (four spaces a level).

    ``with writer.block("if (x)"):`` writes ``if (x) {``, indents what the body writes, then
    ``}``. `text()` is the whole source.
    """

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._depth = 0

    def line(self, text: str = "") -> None:
        """Append one line at the current indentation (an empty line when `text` is empty)."""
        self._lines.append("    " * self._depth + text if text else "")

    def lines(self, text: str) -> None:
        """Append every line of a multi-line `text` at the current indentation."""
        for item in text.strip("\n").split("\n"):
            self.line(item)

    def comment(self, text: str) -> None:
        """Append a `//` comment (newlines in `text` become spaces)."""
        self.line("// " + " ".join(text.split()))

    @contextlib.contextmanager
    def block(self, header: str = "") -> Iterator[None]:
        """Write ``header {`` (a bare ``{`` without a header), the indented body, then ``}``."""
        self.line(f"{header} {{" if header else "{")
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            self.line("}")

    def position(self) -> int:
        """Where the next line goes, for `insert`."""
        return len(self._lines)

    def insert(self, position: int, text: str) -> None:
        """Insert the lines of `text` (unindented) before the line at `position`: something
        the code after it turns out to need, such as a table of constants."""
        self._lines[position:position] = text.strip("\n").split("\n")

    def text(self) -> str:
        """The source written so far, newline-terminated."""
        return "\n".join(self._lines) + "\n"


def code_mask(dtype: DataType) -> str:
    """The C literal of the mask of a `dtype` code's bits, e.g. ``0xFu`` for 4 bits."""
    return f"0x{(1 << dtype.nbits) - 1:X}u"


def unpack_expressions(vector: str, vector_bytes: int, element_bits: int) -> list[str]:
    """The code of every element in the vector variable `vector` of `vector_bytes` bytes.

    Element k is bits [k*b, (k+1)*b) of the little-endian vector (b = `element_bits`, a divisor
    of 32 or 32 itself, with b dividing 8 * `vector_bytes`).
    """
    count = vector_bytes * 8 // element_bits
    mask = f"0x{(1 << element_bits) - 1:X}u"
    words = _VECTOR_WORDS.get(vector_bytes, ("",))
    result = []
    for k in range(count):
        bit = k * element_bits
        word = words[bit // 32]
        source = f"{vector}.{word}" if word else f"(la_u32){vector}"
        shift = bit % 32
        shifted = f"({source} >> {shift})" if shift else source
        result.append(shifted if element_bits == 32 else f"({shifted} & {mask})")
    return result


def pack_expression(codes: Sequence[str], vector_bytes: int, element_bits: int) -> str:
    """The C value of a vector of `vector_bytes` bytes holding the element `codes` in order.

    Each code must already fit in `element_bits` bits (register codes do).
    """
    words: list[list[str]] = [[] for _ in range(max(1, vector_bytes // 4))]
    for k, code in enumerate(codes):
        bit = k * element_bits
        shift = bit % 32
        words[bit // 32].append(f"((la_u32){code} << {shift})" if shift else f"(la_u32){code}")
    joined = [" | ".join(parts) for parts in words]
    if vector_bytes == 16:
        return f"make_uint4({', '.join(joined)})"
    if vector_bytes == 8:
        return f"make_uint2({', '.join(joined)})"
    return f"({VECTOR_TYPES[vector_bytes]})({joined[0]})"


HALF_OPERATIONS = {"add": "la_hadd", "sub": "la_hsub", "mul": "la_hmul"}
"""f16 and bf16 operations done on codes by the native `_rn` instructions (the helper's prefix)."""


def half_binary_code(op: str, dtype: DataType, x: str, y: str) -> str | None:
    """The C code of f16 or bf16 `op` on the codes `x`, `y` by the native correctly rounded
    instruction (`la_hmul_f16` ...), or None when `op` and `dtype` have none."""
    if op not in HALF_OPERATIONS or dtype.name not in ("f16", "bf16"):
        return None
    return f"{HALF_OPERATIONS[op]}_{dtype.name}({x}, {y})"


def half_pair_code(op: str, dtype: DataType, x: str, y: str) -> str | None:
    """The C word of f16 or bf16 `op` on two elements at once: `x` and `y` are words holding
    two codes each (the paired `_rn` instruction, `la_hmul2_f16` ...); None when `op` and `dtype`
    have none."""
    if op not in HALF_OPERATIONS or dtype.name not in ("f16", "bf16"):
        return None
    return f"{HALF_OPERATIONS[op]}2_{dtype.name}({x}, {y})"


def sign_code(op: str, dtype: DataType, x: str) -> str | None:
    """The C code of float `neg` or `abs` on the code `x`: the sign bit flipped or cleared, so a
    NaN keeps its code (a move, in the contract's NaN classes); None for other operations."""
    if not dtype.is_float or op not in ("neg", "abs"):
        return None
    sign = 1 << (dtype.nbits - 1)
    if op == "neg":
        return f"((la_u32)({x}) ^ 0x{sign:X}u)"
    return f"((la_u32)({x}) & 0x{sign - 1:X}u)"


def unary_value(op: str, dtype: DataType, x: str) -> str:
    """The C value (float or int, `value_type`) of elementwise `op` on the value `x` of `dtype`,
    before rounding or wrapping into `dtype` (`ir.elementwise` gives the meaning)."""
    if dtype.is_float:
        formulas = {
            "exp": f"expf({x})",
            "exp2": f"exp2f({x})",
            "log": f"logf({x})",
            "log2": f"log2f({x})",
            "sqrt": f"la_fsqrt({x})",
            "rsqrt": f"la_fdiv(1.0f, la_fsqrt({x}))",
            "sigmoid": f"la_fdiv(1.0f, la_fadd(1.0f, expf(-({x}))))",
            "tanh": f"tanhf({x})",
        }
        return formulas[op]
    formulas = {
        "neg": f"(int)(0u - (la_u32)({x}))",
        "abs": f"la_iabs({x})",
        "invert": f"(~({x}))",
    }
    return formulas[op]


def binary_value(op: str, dtype: DataType, x: str, y: str) -> str:
    """The C value of elementwise `op` on values `x`, `y` of `dtype`, before rounding or
    wrapping into the result type; comparisons give an int, 0 or 1."""
    comparisons = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
    if op in comparisons:
        return f"(int)(({x}) {comparisons[op]} ({y}))"
    if dtype.is_float:
        formulas = {
            "add": f"la_fadd({x}, {y})",
            "sub": f"la_fsub({x}, {y})",
            "mul": f"la_fmul({x}, {y})",
            "div": f"la_fdiv({x}, {y})",
            "max": f"la_fmax({x}, {y})",
            "min": f"la_fmin({x}, {y})",
        }
        return formulas[op]
    formulas = {
        "add": f"(int)((la_u32)({x}) + (la_u32)({y}))",
        "sub": f"(int)((la_u32)({x}) - (la_u32)({y}))",
        "mul": f"(int)((la_u32)({x}) * (la_u32)({y}))",
        "div": f"la_floordiv({x}, {y})",
        "mod": f"la_floormod({x}, {y})",
        "max": f"la_imax({x}, {y})",
        "min": f"la_imin({x}, {y})",
        "and": f"(({x}) & ({y}))",
        "or": f"(({x}) | ({y}))",
        "xor": f"(({x}) ^ ({y}))",
        "shl": f"(int)((la_u32)({x}) << ({y}))",
        "shr": f"(({x}) >> ({y}))",
    }
    return formulas[op]


def wrap_expression(dtype: DataType, value: str) -> str:
    """The code of integer `dtype` for the int `value` wrapped to its width (two's complement),
    as integer operations do."""
    if dtype.nbits == 32:
        return f"(la_u32)({value})"
    return f"((la_u32)({value}) & {code_mask(dtype)})"


PROGRAMMATIC_LAUNCH_ARCH = 90
"""Programmatic dependent launch (``griddepcontrol``) exists from sm_90 on."""
CLUSTER_ARCH = 90
"""The first architecture that launches blocks in clusters (`ir.Program.cluster`); before it a
program's cluster is left out of the launch, which changes nothing it computes."""

GROUP_BARRIER_SOURCE = r"""
/* ---- barriers of thread groups (see backend/cuda_codegen.py) ---- */

/* A barrier of the `threads` threads (whole warps) of one thread group: named barrier `id`
   (1 to 15; 0 is __syncthreads'), which orders their shared-memory accesses. */
static __device__ __forceinline__ void la_group_barrier(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
"""
"""`la_group_barrier`: the `sync` of a `thread_group` (PTX ``bar.sync`` on a named barrier)."""

REGISTER_BUDGET_SOURCE = r"""
/* ---- register budgets of warpgroups (sm_90a; see backend/lower/warp_classes.py) ---- */

/* The calling warpgroup's per-thread register count raised to N (waiting until the block's
   pool has them) or lowered to N (giving them back); all its warps call it together. */
template <unsigned N> static __device__ __forceinline__ void la_registers_increase()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <unsigned N> static __device__ __forceinline__ void la_registers_decrease()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
"""
"""The ``setmaxnreg`` calls of a warp-specialised kernel whose warpgroups ask for register
budgets (`ir.instructions.ThreadGroup.registers`)."""

PROGRAMMATIC_LAUNCH_SOURCE = r"""
/* ---- a link of a chain of kernels (programmatic dependent launch, sm_90+) ---- */
/* The kernel after this one on the stream may start (it waits for this one's memory). */
static __device__ __forceinline__ void la_launch_dependents()
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* Wait until the kernels before this one have completed and their writes are visible. */
static __device__ __forceinline__ void la_wait_prior_grid()
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
}
"""
"""The device functions of a program with `ir.Program.programmatic_launch` on sm_90 and newer."""

PLAIN_LAUNCH_SOURCE = r"""
/* ---- a link of a chain of kernels, launched one after the other (before sm_90) ---- */
static __device__ __forceinline__ void la_launch_dependents() {}
static __device__ __forceinline__ void la_wait_prior_grid() {}
"""
"""The same functions where kernels are launched one after the other: nothing to do."""

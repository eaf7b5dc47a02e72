"""The planned fast conversions against `ir.dtypes.convert`, bit for bit, in any element order.

`backend.fast_conversions` plans a cast from where each output's code lies in the input words;
the rendered statements are plain C over five primitives. Here the primitives are defined on the
host: `la_prmt` from the PTX definition of ``prmt`` (byte i of the result is byte ``selector
nibble i`` of {b, a}), `la_shf_r` as a 64-bit shift, the fused multiply-adds and the float32
subtraction in double precision, with a check that each result is exactly representable in its
format (then the GPU's single rounding gives the same code); a step that is not exact sets a
flag and fails the run. gcc compiles the plans of every supported type, to f16 and bf16, in
several element orders (the natural order, the packed-weight order of the width, a random
permutation, and a short input read with repeats), and runs each over inputs holding every code
in every position and random bitstreams; the results must equal ``convert`` of the gathered
codes. The device source is compiled with NVRTC for sm_80 and sm_90a, and a GPU test runs it.
"""

from __future__ import annotations

import itertools
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.fast_conversions import (
    FAST_CONVERSION_PRIMITIVES,
    ConversionPlan,
    conversion_kind,
    fma_free_exponent,
    plan_conversion,
)
from backend.nvrtc import compile_cuda, cubin_kernels
from ir import dtypes
from ir.dtypes import DataType
from ir.examples.packed_weights import LANE_DIGITS, LANE_ORDERS, packed_lane_order

MAX_INPUT_WORDS = 8
MAX_OUTPUT_WORDS = 16
SOURCE_TYPES = [dtypes.from_name(f"{kind}{bits}") for bits in range(1, 9) for kind in "ui"] + [
    dtypes.from_name(name)
    for name in ("f3e1m1", "f4e2m1", "f4e1m2", "f5e2m2", "f6e3m2", "f6e2m3", "f7e4m2", "f8e1m6")
]
"""Every source type with a fast conversion to f16 (and to bf16)."""
UNSUPPORTED = [
    (dtypes.f8e4m3, dtypes.f16),  # NaN codes
    (dtypes.f8e5m2, dtypes.f16),  # infinities and NaNs
    (dtypes.f7e5m1, dtypes.f16),  # 5 exponent bits: its largest values would become f16 inf
    (dtypes.f8e6m1, dtypes.f16),
    (dtypes.u8, dtypes.f32),  # only f16 and bf16 targets
    (dtypes.i32, dtypes.f16),
]


def digit_order_sources(order: tuple[str, ...]) -> list[int]:
    """`packed_order` for a lane order given as a permutation of `LANE_DIGITS`."""
    sources = []
    for i in range(32):
        bits = {digit: (i >> (4 - k)) & 1 for k, digit in enumerate(LANE_DIGITS)}
        index = 0
        for digit in order:
            index = 2 * index + bits[digit]
        sources.append(index)
    return sources


@dataclass(frozen=True)
class Case:
    src: DataType
    dst: DataType
    order: str
    sources: tuple[int, ...]
    input_size: int
    exponent: int = 0
    biased: bool = False

    @property
    def plan(self) -> ConversionPlan:
        plan = plan_conversion(
            self.src, self.dst, self.sources, self.input_size, self.exponent, self.biased
        )
        assert plan is not None
        return plan

    @property
    def name(self) -> str:
        scaled = f"-times-2^{self.exponent}" if self.exponent else ""
        return f"{self.src}-{self.dst}-{self.order}{scaled}{'-biased' * self.biased}"


def _cases() -> list[Case]:
    rng = np.random.default_rng(11)
    cases = []
    for src, dst in itertools.product(SOURCE_TYPES, (dtypes.f16, dtypes.bf16)):
        if conversion_kind(src, dst) is None:
            continue
        elements = 32
        orders = {
            "natural": (list(range(elements)), elements),
            "packed": (packed_lane_order(src.nbits), 32),
            "random": (list(rng.permutation(elements)), elements),
            # 11 elements, read 12 times with repeats: a partial last word, shared windows.
            "short": (list(rng.integers(0, 11, 12)), 11),
        }
        for order, (sources, size) in orders.items():
            cases.append(Case(src, dst, order, tuple(int(s) for s in sources), size))
        # Scaled casts in the packed order: the float's fma-free exponent, and 2^-3 where
        # exact (it changes an integer path's fma constants).
        sources, size = orders["packed"]
        for exponent in {fma_free_exponent(src, dst), -3} - {None}:
            if plan_conversion(src, dst, sources, size, exponent) is not None:
                cases.append(Case(src, dst, "packed", tuple(sources), size, exponent))
        # Biased casts (the magic number's bias kept) in every order, where available.
        if dtypes.magic_bias_error(src, dst) is None:
            for order, (sources, size) in orders.items():
                biased = Case(src, dst, order, tuple(int(s) for s in sources), size, biased=True)
                cases.append(biased)
    return cases


CASES = _cases()


def test_every_source_type_has_cases_for_both_targets() -> None:
    covered = {(case.src, case.dst) for case in CASES}
    expected = {(src, dst) for src in SOURCE_TYPES for dst in (dtypes.f16, dtypes.bf16)}
    # Floats of 5 or more exponent bits fit only bf16; none is in SOURCE_TYPES.
    assert covered == expected


@pytest.mark.parametrize(("src", "dst"), UNSUPPORTED)
def test_no_fast_conversion(src: DataType, dst: DataType) -> None:
    assert conversion_kind(src, dst) is None
    assert plan_conversion(src, dst, [0, 1], 2) is None


def test_odd_or_empty_output_has_no_plan() -> None:
    assert plan_conversion(dtypes.u4, dtypes.f16, [0, 1, 2], 3) is None
    assert plan_conversion(dtypes.u4, dtypes.f16, [], 3) is None


_HOST_PRIMITIVES = r"""
#include <math.h>
#include <stdio.h>
#include <string.h>

#define LA_FAST_FN static

static int la_inexact = 0;

static unsigned int la_shf_r(unsigned int low, unsigned int high, unsigned int shift)
{
    const unsigned long long joined = ((unsigned long long)high << 32) | low;
    if (shift > 31u) {
        la_inexact = 1;
    }
    return (unsigned int)(joined >> (shift & 31u));
}

static unsigned int la_prmt(unsigned int a, unsigned int b, unsigned int selector)
{
    const unsigned long long bytes = ((unsigned long long)b << 32) | a;
    unsigned int result = 0u;
    int k;
    for (k = 0; k < 4; k++) {
        const unsigned int pick = (selector >> (4 * k)) & 7u;
        result |= (unsigned int)((bytes >> (8 * pick)) & 0xFFu) << (8 * k);
    }
    return result;
}

/* The value of a 16-bit float code with e_bits exponent and m_bits mantissa bits. */
static double la_value(unsigned int code, int e_bits, int m_bits)
{
    const int bias = (1 << (e_bits - 1)) - 1;
    const unsigned int exponent = (code >> m_bits) & ((1u << e_bits) - 1u);
    const unsigned int mantissa = code & ((1u << m_bits) - 1u);
    double value;
    if (exponent == (1u << e_bits) - 1u) {
        la_inexact = 1;
        return 0.0;
    }
    if (exponent == 0u) {
        value = ldexp((double)mantissa, 1 - bias - m_bits);
    } else {
        value = ldexp((double)(mantissa | (1u << m_bits)), (int)exponent - bias - m_bits);
    }
    return (code >> 15) ? -value : value;
}

/* The code of `value`, which must be exactly representable (else the flag is set). */
static unsigned int la_code(double value, int e_bits, int m_bits)
{
    const int bias = (1 << (e_bits - 1)) - 1;
    const unsigned int sign = signbit(value) ? 1u : 0u;
    const double magnitude = fabs(value);
    int exponent, quantum;
    double scaled;
    if (magnitude == 0.0) {
        return sign << 15;
    }
    frexp(magnitude, &exponent);
    exponent -= 1;
    quantum = exponent < 1 - bias ? 1 - bias : exponent;
    scaled = ldexp(magnitude, m_bits - quantum);
    if (scaled != floor(scaled) || exponent > bias) {
        la_inexact = 1;
        return 0u;
    }
    return (sign << 15) | ((unsigned int)(exponent < 1 - bias ? 0 : exponent + bias) << m_bits)
           | ((unsigned int)scaled & ((1u << m_bits) - 1u));
}

static unsigned int la_fma_lanes(unsigned int a, unsigned int b, unsigned int c, int e_bits,
                                 int m_bits)
{
    unsigned int result = 0u;
    int lane;
    for (lane = 0; lane < 2; lane++) {
        const int shift = 16 * lane;
        const double x = la_value((a >> shift) & 0xFFFFu, e_bits, m_bits);
        const double y = la_value((b >> shift) & 0xFFFFu, e_bits, m_bits);
        const double z = la_value((c >> shift) & 0xFFFFu, e_bits, m_bits);
        result |= la_code(fma(x, y, z), e_bits, m_bits) << shift;
    }
    return result;
}

static unsigned int la_fma_f16x2(unsigned int a, unsigned int b, unsigned int c)
{
    return la_fma_lanes(a, b, c, 5, 10);
}

static unsigned int la_fma_bf16x2(unsigned int a, unsigned int b, unsigned int c)
{
    return la_fma_lanes(a, b, c, 8, 7);
}

static unsigned int la_sub_f32(unsigned int a, unsigned int b)
{
    float x, y, difference;
    double exact;
    unsigned int bits;
    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    exact = (double)x - (double)y;
    difference = (float)exact;
    if ((double)difference != exact) {
        la_inexact = 1;
    }
    memcpy(&bits, &difference, sizeof bits);
    return bits;
}
"""


_HOST_MAIN = r"""
int main(void)
{
    unsigned int header[3];
    while (fread(header, sizeof header, 1, stdin) == 1) {
        const la_job job = jobs[header[0]];
        unsigned int k, in[MAX_INPUT_WORDS], out[MAX_OUTPUT_WORDS];
        for (k = 0; k < header[1]; k++) {
            memset(in, 0, sizeof in);
            if (fread(in, sizeof in[0], header[2], stdin) != header[2]) {
                return 2;
            }
            memset(out, 0, sizeof out);
            job(in, out);
            fwrite(out, sizeof out, 1, stdout);
        }
    }
    return la_inexact ? 3 : 0;
}
"""


def _function(case: Case, name: str, qualifier: str) -> str:
    lines = case.plan.render(lambda w: f"in[{w}]", lambda j: f"out[{j}]", "t")
    body = "\n".join("    " + line for line in lines)
    return f"{qualifier} void {name}(const unsigned int* in, unsigned int* out)\n{{\n{body}\n}}\n"


def _inputs(case: Case) -> np.ndarray:
    """(count, input words) bitstreams: every code in every element, a code sequence
    shifted by one per element, and random words."""
    bits, size = case.src.nbits, case.input_size
    codes = np.arange(1 << bits)
    rows = [np.full(size, c) for c in codes]
    rows += [(c + np.arange(size) * 5) % (1 << bits) for c in codes]
    streams = [dtypes.pack(np.array(row), dtypes.from_name(f"u{bits}")) for row in rows]
    words = case.plan.input_words
    padded = [np.frombuffer(bytes(s) + bytes(4 * words - len(s)), dtype="<u4") for s in streams]
    random = np.random.default_rng(bits * 31 + size).integers(0, 1 << 32, (256, words))
    return np.concatenate([np.stack(padded), random.astype(np.uint32)])


def _expected(case: Case, inputs: np.ndarray) -> np.ndarray:
    """Unpack the codes LSB first, gather them, convert, pack pairs into 32-bit words."""
    bits = case.src.nbits
    stream = np.unpackbits(inputs.astype("<u4").view(np.uint8), axis=1, bitorder="little")
    positions = np.arange(case.input_size)[:, None] * bits + np.arange(bits)
    codes = (stream[:, positions] << np.arange(bits)).sum(axis=2)
    gathered = codes[:, list(case.sources)]
    if case.biased:
        offsets = np.broadcast_to(np.array(case.sources) * bits, gathered.shape)
        converted = dtypes.convert_biased(gathered, case.src, case.dst, offsets).ravel()
    else:
        converted = dtypes.convert_scaled(gathered.ravel(), case.src, case.dst, case.exponent)
    converted = converted.astype(np.uint32)
    converted = converted.reshape(gathered.shape)
    return converted[:, 0::2] | converted[:, 1::2] << 16


@pytest.fixture(scope="module")
def host_results(
    tmp_path_factory: pytest.TempPathFactory, c_compiler: str
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every case run on the host: name -> (inputs, outputs)."""
    directory: Path = tmp_path_factory.mktemp("fast_conversions")
    source, binary = directory / "fast.c", directory / "fast"
    program = [
        f"#define MAX_INPUT_WORDS {MAX_INPUT_WORDS}",
        f"#define MAX_OUTPUT_WORDS {MAX_OUTPUT_WORDS}",
    ]
    program.append(_HOST_PRIMITIVES)
    program.append("typedef void (*la_job)(const unsigned int*, unsigned int*);")
    program += [_function(case, f"job{k}", "static") for k, case in enumerate(CASES)]
    table = ", ".join(f"job{k}" for k in range(len(CASES)))
    program.append(f"static const la_job jobs[] = {{{table}}};")
    program.append(_HOST_MAIN)
    source.write_text("\n".join(program))
    build = subprocess.run(
        [c_compiler, "-O1", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsanitize=undefined"]
        + ["-fno-sanitize-recover=all", "-o", str(binary), str(source), "-lm"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    all_inputs = [_inputs(case) for case in CASES]
    stdin = b"".join(
        np.array([k, len(inputs), inputs.shape[1]], dtype="<u4").tobytes()
        + inputs.astype("<u4").tobytes()
        for k, inputs in enumerate(all_inputs)
    )
    run = subprocess.run([str(binary)], input=stdin, capture_output=True, check=False)
    assert run.returncode == 0, f"exit {run.returncode} (3: an inexact step) {run.stderr!r}"
    outputs = np.frombuffer(run.stdout, dtype="<u4")
    results, at = {}, 0
    for case, inputs in zip(CASES, all_inputs):
        block = outputs[at : at + len(inputs) * MAX_OUTPUT_WORDS].reshape(len(inputs), -1)
        at += len(inputs) * MAX_OUTPUT_WORDS
        results[case.name] = (inputs, block[:, : len(case.sources) // 2])
    return results


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_host_conversion_matches_convert_on_every_code(
    case: Case, host_results: dict[str, tuple[np.ndarray, np.ndarray]]
) -> None:
    inputs, actual = host_results[case.name]
    expected = _expected(case, inputs)
    mismatch = np.argwhere(actual != expected)
    assert mismatch.size == 0, (
        f"input {[hex(int(w)) for w in inputs[mismatch[0][0]]]}, out[{mismatch[0][1]}]: "
        f"0x{int(actual[tuple(mismatch[0])]):08X}, expected "
        f"0x{int(expected[tuple(mismatch[0])]):08X}"
    )


def test_scaled_cases_cover_every_float_and_an_integer_path() -> None:
    scaled = {(case.src, case.dst) for case in CASES if case.exponent}
    for src in SOURCE_TYPES:
        if src.is_float:
            assert (src, dtypes.f16) in scaled, src
    assert (dtypes.i4, dtypes.f16) in scaled and (dtypes.u8, dtypes.f16) in scaled


@pytest.mark.parametrize("src", [dtypes.f4e2m1, dtypes.f6e3m2, dtypes.f3e1m1])
def test_a_float_scaled_by_its_bias_needs_no_fma(src: DataType) -> None:
    """`fma_free_exponent`: the placed bits are the scaled value, one fma per word fewer."""
    exponent = fma_free_exponent(src, dtypes.f16)
    assert exponent == src.bias - 15
    sources = packed_lane_order(src.nbits)
    plain = plan_conversion(src, dtypes.f16, sources, 32)
    scaled = plan_conversion(src, dtypes.f16, sources, 32, exponent)
    assert plain is not None and scaled is not None
    assert scaled.instructions == plain.instructions - len(sources) // 2
    text = "\n".join(scaled.render(lambda w: f"x[{w}]", lambda j: f"y[{j}]", "t"))
    assert "la_fma" not in text
    assert plan_conversion(src, dtypes.f16, sources, 32, exponent - 40) is None  # inexact
    assert fma_free_exponent(dtypes.i4, dtypes.f16) is None


def test_bytes_to_bf16_take_no_exponent() -> None:
    assert plan_conversion(dtypes.u8, dtypes.bf16, [0, 1], 2, -3) is None
    assert plan_conversion(dtypes.u8, dtypes.bf16, [0, 1], 2) is not None


def test_interleaved_i4_to_f16_is_one_lop3_and_one_fma_per_pair() -> None:
    """The exact text at 4 bits in Marlin's order 0 4 1 5 2 6 3 7: one shift for the word's
    upper byte pairs, then a mask-and-magic and an fma per output word."""
    plan = plan_conversion(dtypes.i4, dtypes.f16, [0, 4, 1, 5, 2, 6, 3, 7], 8)
    assert plan.render(lambda w: f"x[{w}]", lambda j: f"y[{j}]", "t") == [
        "const unsigned int t_w0 = (x[0] >> 8);",
        "y[0] = la_fma_f16x2(((x[0] & 0x000F000Fu) ^ 0x64086408u), 0x3C003C00u, 0xE408E408u);",
        "y[1] = la_fma_f16x2(((x[0] & 0x00F000F0u) ^ 0x64806480u), 0x2C002C00u, 0xD480D480u);",
        "y[2] = la_fma_f16x2(((t_w0 & 0x000F000Fu) ^ 0x64086408u), 0x3C003C00u, 0xE408E408u);",
        "y[3] = la_fma_f16x2(((t_w0 & 0x00F000F0u) ^ 0x64806480u), 0x2C002C00u, 0xD480D480u);",
    ]
    assert plan.instructions == 9


def test_a_float_window_inside_one_word_is_that_word_shifted() -> None:
    """f4e2m1 in the packed order over two words: a window whose taken bits lie in its higher
    word is that word shifted left (which may issue as an integer multiply, off the logic pipe
    the masks use), not a funnel shift of two words; a right shift within the lower word stays
    a funnel shift but for the last word. Each output word masks its sign window and its
    magnitude window (two LOP3)."""
    sources = packed_lane_order(4)[:16]
    exponent = fma_free_exponent(dtypes.f4e2m1, dtypes.f16)
    plan = plan_conversion(dtypes.f4e2m1, dtypes.f16, sources, 16, exponent)
    lines = plan.render(lambda w: f"x[{w}]", lambda j: f"y[{j}]", "t")
    shifts = [(w, s) for w in (0, 1) for s in ("<< 12", "<< 9", "<< 8", "<< 5", "<< 4", "<< 1")]
    windows = [f"(x[{w}] {s})" for w, s in shifts[:6]] + ["la_shf_r(x[0], x[1], 3u)"]
    windows += [f"(x[{w}] {s})" for w, s in shifts[6:]] + ["(x[1] >> 3)"]
    assert lines[:14] == [f"const unsigned int t_w{i} = {text};" for i, text in enumerate(windows)]
    assert lines[14] == "y[0] = ((t_w0 & 0x80008000u) ^ (t_w1 & 0x0E000E00u));"
    assert lines[17] == "y[3] = ((x[0] & 0x80008000u) ^ (t_w6 & 0x0E000E00u));"
    assert lines[21] == "y[7] = ((x[1] & 0x80008000u) ^ (t_w13 & 0x0E000E00u));"
    assert sum("la_shf_r" in line for line in lines) == 1
    assert plan.instructions == 30


_WINDOW_LINE = re.compile(r"const unsigned int t_w(\d+) = (.*);")


def _evaluate_window(text: str, words: list[int]) -> int:
    """The value of a rendered window's C text (a shift of one word or `la_shf_r` of two) on
    32-bit input `words`."""

    def la_shf_r(low: int, high: int, shift: int) -> int:
        return ((high << 32 | low) >> shift) & 0xFFFFFFFF

    expression = re.sub(r"(\d)u\b", r"\1", text)
    return eval(expression, {"la_shf_r": la_shf_r, "x": words}) & 0xFFFFFFFF  # noqa: S307


@settings(max_examples=150, deadline=None)
@given(
    src=st.sampled_from(SOURCE_TYPES),
    dst=st.sampled_from([dtypes.f16, dtypes.bf16]),
    data=st.data(),
)
def test_each_window_holds_the_bits_its_words_take(
    src: DataType, dst: DataType, data: st.DataObject
) -> None:
    """Any order: every window's rendered text, evaluated on random words, equals the
    bitstream shifted by its offset on the bits the output words take from it; a window whose
    taken bits all lie in its higher word is that word shifted left."""
    size = data.draw(st.integers(2, 40), label="input_size")
    count = data.draw(st.integers(1, 12), label="pairs")
    sources = data.draw(st.lists(st.integers(0, size - 1), min_size=2 * count, max_size=2 * count))
    plan = plan_conversion(src, dst, sources, size)
    if plan is None or not plan.windows:
        return
    words = data.draw(
        st.lists(st.integers(0, 2**32 - 1), min_size=plan.input_words, max_size=plan.input_words)
    )
    stream = sum(word << (32 * w) for w, word in enumerate(words))
    used = plan.window_bits()
    lines = plan.render(lambda w: f"x[{w}]", lambda j: f"y[{j}]", "t")
    for line in lines[: len(plan.windows)]:
        index, text = _WINDOW_LINE.fullmatch(line).groups()
        offset = plan.windows[int(index)]
        exact = (stream >> offset if offset >= 0 else stream << -offset) & 0xFFFFFFFF
        taken = used[offset]
        assert taken, f"window {offset} is rendered but no output word takes a bit of it"
        assert _evaluate_window(text, words) & taken == exact & taken, line
        from_lower_word = taken & ((1 << (32 - offset % 32)) - 1)
        if offset % 32 and not from_lower_word:
            assert re.fullmatch(r"\(x\[\d+\] << \d+\)", text), f"{line}: not a left shift"


def test_magic_words_come_from_the_constant_callback() -> None:
    """With `constant`, every magic word is its operand (the mask stays the LOP3 immediate);
    the rest of the text is unchanged."""
    plan = plan_conversion(dtypes.i4, dtypes.f16, [0, 4, 1, 5, 2, 6, 3, 7], 8)
    asked = []

    def constant(value: int) -> str:
        asked.append(value)
        return f"K{value:08X}"

    lines = plan.render(lambda w: f"x[{w}]", lambda j: f"y[{j}]", "t", constant)
    assert lines[1] == (
        "y[0] = la_fma_f16x2(((x[0] & 0x000F000Fu) ^ K64086408), 0x3C003C00u, 0xE408E408u);"
    )
    assert asked == [0x64086408, 0x64806480, 0x64086408, 0x64806480]
    literal = plan.render(lambda w: f"x[{w}]", lambda j: f"y[{j}]", "t")
    for value in set(asked):
        lines = [line.replace(f"K{value:08X}", f"0x{value:08X}u") for line in lines]
    assert lines == literal
    joined = plan_conversion(dtypes.u8, dtypes.f16, [0, 4, 1, 5], 8)
    text = "\n".join(joined.render(lambda w: f"x[{w}]", lambda j: f"y[{j}]", "t", constant))
    assert "^ K64006400)" in text and "0x64006400u" not in text


def test_a_multiplier_of_two_positions_comes_from_the_constant_callback() -> None:
    """5-bit fields 16 bits apart cannot sit at one position of both halves: the fma's
    multiplier differs per half, so it is a constant-table operand like the magic words (an
    HFMA2 takes only its addend as a 32-bit immediate); a multiplier of equal halves stays a
    literal."""
    plan = plan_conversion(dtypes.u5, dtypes.f16, [0, 4, 1, 5, 2, 6, 3, 7], 8)
    asked: list[int] = []

    def constant(value: int) -> str:
        asked.append(value)
        return f"K{value:08X}"

    lines = plan.render(lambda w: f"x[{w}]", lambda j: f"y[{j}]", "t", constant)
    multipliers = set()
    for line in lines:
        if "la_fma_f16x2(" in line:
            multiplier = line.rsplit(", ", 2)[1]
            multipliers.add(multiplier)
            if multiplier.startswith("K"):
                value = int(multiplier[1:], 16)
                assert value >> 16 != value & 0xFFFF and value in asked
            else:
                value = int(multiplier.removesuffix("u"), 16)
                assert value >> 16 == value & 0xFFFF
    assert any(m.startswith("K") for m in multipliers)
    literal = plan.render(lambda w: f"x[{w}]", lambda j: f"y[{j}]", "t")
    for value in set(asked):
        lines = [line.replace(f"K{value:08X}", f"0x{value:08X}u") for line in lines]
    assert lines == literal


def test_bytes_to_f16_is_one_prmt_and_one_fma_per_pair() -> None:
    plan = plan_conversion(dtypes.u8, dtypes.f16, [0, 1, 2, 3], 4)
    assert plan.render(lambda w: f"x[{w}]", lambda j: f"y[{j}]", "t") == [
        "y[0] = la_fma_f16x2(la_prmt(x[0], 0x64646464u, 0x4140u), 0x3C003C00u, 0xE400E400u);",
        "y[1] = la_fma_f16x2(la_prmt(x[0], 0x64646464u, 0x4342u), 0x3C003C00u, 0xE400E400u);",
    ]
    # With a constant table, the exponent bytes come from it and the selector stays the
    # literal: ptxas then encodes the selector as the prmt's immediate and keeps the exponent
    # bytes in one register, instead of moving a selector into a register before each prmt.
    table = plan.render(lambda w: f"x[{w}]", lambda j: f"y[{j}]", "t", lambda v: f"K{v:08X}")
    assert table == [
        "y[0] = la_fma_f16x2(la_prmt(x[0], K64646464, 0x4140u), 0x3C003C00u, 0xE400E400u);",
        "y[1] = la_fma_f16x2(la_prmt(x[0], K64646464, 0x4342u), 0x3C003C00u, 0xE400E400u);",
    ]


# Instructions per 32 weights (one unit lane) in the packed order, f16 and bf16: the cost the
# benchmarks' decoders pay, next to the budget of about one instruction per weight per bit.
PACKED_COSTS = {
    "u1": (33, 35),
    "u2": (34, 38),
    "u3": (40, 48),
    "u4": (36, 44),
    "u5": (47, 82),
    "u6": (48, 94),
    "u7": (47, 95),
    "u8": (32, 80),
    "i8": (40, 88),
    "f4e2m1": (76, 76),
}


# The same with the magic numbers' biases kept (`ir.dtypes.magic_bias`): placement alone.
# Bytes to bf16 have no biased cast (8 bits do not fit under bf16's magic number).
PACKED_BIASED_COSTS = {
    "u1": (17, 19),
    "u2": (18, 22),
    "u3": (49, 62),
    "u4": (20, 28),
    "i4": (20, 28),
    "u5": (65, 70),
    "u6": (70, 78),
    "u7": (53, 79),
    "u8": (16, None),
    "i8": (24, None),
}


@pytest.mark.parametrize(
    ("name", "biased", "costs"),
    [(name, False, costs) for name, costs in PACKED_COSTS.items()]
    + [(name, True, costs) for name, costs in PACKED_BIASED_COSTS.items()],
)
def test_packed_order_costs(name: str, biased: bool, costs: tuple[int, int | None]) -> None:
    src = dtypes.from_name(name)
    sources = packed_lane_order(src.nbits)
    plans = [
        plan_conversion(src, dst, sources, 32, biased=biased) for dst in (dtypes.f16, dtypes.bf16)
    ]
    assert tuple(None if plan is None else plan.instructions for plan in plans) == costs


@pytest.mark.parametrize("nbits", range(1, 9))
def test_lane_order_is_the_cheapest_digit_order(nbits: int) -> None:
    """`LANE_ORDERS[b]` costs the least (f16 plus bf16) of the 120 orders of the lane digits,
    and equals `packed_order`'s sources."""
    src = dtypes.from_name(f"u{nbits}")

    def cost(order: tuple[str, ...]) -> int:
        sources = digit_order_sources(order)
        return sum(
            plan_conversion(src, dst, sources, 32).instructions for dst in (dtypes.f16, dtypes.bf16)
        )

    assert digit_order_sources(LANE_ORDERS[nbits]) == packed_lane_order(nbits)
    assert cost(LANE_ORDERS[nbits]) == min(
        cost(order) for order in itertools.permutations(LANE_DIGITS)
    )


def _device_source() -> str:
    """Every case behind the device primitives, and a kernel applying job `job` to each input."""
    functions = "\n".join(_function(case, f"job{k}", "__device__") for k, case in enumerate(CASES))
    cases = "\n".join(f"        case {k}: job{k}(in, out); break;" for k in range(len(CASES)))
    kernel = f"""
extern "C" __global__ void __launch_bounds__(128) fast_convert(
    const unsigned int* inputs, unsigned int* results, int count, int job)
{{
    const int index = blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= count) {{
        return;
    }}
    const unsigned int* in = inputs + index * {MAX_INPUT_WORDS};
    unsigned int out[{MAX_OUTPUT_WORDS}] = {{0u}};
    switch (job) {{
{cases}
    }}
    for (int k = 0; k < {MAX_OUTPUT_WORDS}; ++k) {{
        results[index * {MAX_OUTPUT_WORDS} + k] = out[k];
    }}
}}
"""
    return FAST_CONVERSION_PRIMITIVES + functions + kernel


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_device_source_compiles_with_nvrtc(arch: str) -> None:
    module = compile_cuda(_device_source(), arch)
    assert cubin_kernels(module.cubin) == ("fast_convert",)


@pytest.mark.gpu
def test_gpu_conversion_matches_convert_on_every_code() -> None:
    torch = pytest.importorskip("torch")
    from backend.kernel import KernelArrayParam, KernelIntParam, build_kernel
    from layout_algebra.symbolic import var

    count = var("count")
    kernel = build_kernel(
        _device_source(),
        "fast_convert",
        (
            KernelArrayParam("inputs", 32, count * MAX_INPUT_WORDS),
            KernelArrayParam("results", 32, count * MAX_OUTPUT_WORDS),
            KernelIntParam("count"),
            KernelIntParam("job"),
        ),
        block_threads=128,
    )
    for job, case in enumerate(CASES):
        inputs = _inputs(case)
        padded = np.zeros((len(inputs), MAX_INPUT_WORDS), dtype=np.uint32)
        padded[:, : inputs.shape[1]] = inputs
        device_inputs = torch.from_numpy(padded.view(np.int32).ravel()).cuda()
        results = torch.empty(len(inputs) * MAX_OUTPUT_WORDS, dtype=torch.int32, device="cuda")
        kernel(device_inputs, results, len(inputs), job, grid=-(-len(inputs) // 128))
        actual = results.cpu().numpy().view(np.uint32).reshape(len(inputs), MAX_OUTPUT_WORDS)
        expected = _expected(case, inputs)
        assert np.array_equal(actual[:, : len(case.sources) // 2], expected), case.name

"""The packed-word bit-trick conversions against `ir.dtypes.convert`, bit for bit.

The function bodies of `backend.fast_conversions` are plain C over four primitives. Here the
primitives are defined on the host: `la_prmt` from the PTX definition of ``prmt`` (byte i of
the result is byte ``selector nibble i`` of {b, a}), the fused multiply-adds and the float32
subtraction in double precision, with a check that each result is exactly representable in its
format (then the GPU's single rounding gives the same code); a step that is not exact sets a
flag and fails the run. gcc compiles every conversion into one program, which converts every
word ``x | x << 16`` (all 65536 values of 16 bits: every code in every position, every pair of
neighbouring codes) and random words; the results must equal ``convert`` of the unpacked codes.
The device source is compiled with NVRTC for sm_80 and sm_90a, and a GPU test runs it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from backend.fast_conversions import (
    FAST_CONVERSION_PRIMITIVES,
    FAST_CONVERSIONS,
    FastConversion,
    fast_conversion,
)
from backend.nvrtc import compile_cuda, cubin_kernels
from ir import dtypes

CONVERSIONS = list(FAST_CONVERSIONS.values())
MAX_OUTPUT_WORDS = 8

# Literal tables: a word of codes 0, 1, 2, ... (or a signed pattern) and its expected output.
LITERALS = [
    # u4 0..7 -> f16 0, 1, ..., 7
    (dtypes.u4, dtypes.f16, 0x76543210, [0x3C000000, 0x42004000, 0x45004400, 0x47004600]),
    # i4 -1, -2, -8, 7, 0, 1, -3, 3 -> f16
    (dtypes.i4, dtypes.f16, 0x3D1078EF, [0xC000BC00, 0x4700C800, 0x3C000000, 0x4200C200]),
    # u8 0, 255, 128, 1 -> bf16 0, 255, 128, 1
    (dtypes.u8, dtypes.bf16, 0x0180FF00, [0x437F0000, 0x3F804300]),
    # i8 -128, -1, 127, 0 -> f16
    (dtypes.i8, dtypes.f16, 0x007FFF80, [0xBC00D800, 0x000057F0]),
    # f4e2m1 +0, 0.5, 6, -6, -0, -0.5, 1.5, 3 -> bf16
    (dtypes.f4e2m1, dtypes.bf16, 0x5398F710, [0x3F000000, 0xC0C040C0, 0xBF008000, 0x40403FC0]),
    # u2 0, 1, 2, 3 (then zeros) -> f16
    (dtypes.u2, dtypes.f16, 0x000000E4, [0x3C000000, 0x42004000, 0, 0, 0, 0, 0, 0]),
]

_HOST_PRIMITIVES = r"""
#include <math.h>
#include <stdio.h>
#include <string.h>

#define LA_FAST_FN static

static int la_inexact = 0;

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
typedef void (*la_job)(unsigned int, unsigned int*);

int main(void)
{
    unsigned int header[2];
    while (fread(header, sizeof header, 1, stdin) == 1) {
        const la_job job = jobs[header[0]];
        unsigned int k, word, out[8];
        for (k = 0; k < header[1]; k++) {
            if (fread(&word, sizeof word, 1, stdin) != 1) {
                return 2;
            }
            memset(out, 0, sizeof out);
            job(word, out);
            fwrite(out, sizeof out, 1, stdout);
        }
    }
    return la_inexact ? 3 : 0;
}
"""


def _words() -> np.ndarray:
    """Every 16-bit pattern in both halves, random words, then the words of `LITERALS`."""
    low = np.arange(1 << 16, dtype=np.uint32)
    random = np.random.default_rng(7).integers(0, 1 << 32, 4096, dtype=np.uint64)
    literal = np.array([word for _, _, word, _ in LITERALS], dtype=np.uint32)
    return np.concatenate([low | low << 16, random.astype(np.uint32), literal])


def _expected(conversion: FastConversion, words: np.ndarray) -> np.ndarray:
    """The reference: unpack the codes LSB first, convert, pack pairs into 32-bit words."""
    bits = conversion.src.nbits
    count = conversion.elements_per_word
    shifts = np.arange(count, dtype=np.uint32) * bits
    codes = (words[:, None] >> shifts) & ((1 << bits) - 1)
    converted = dtypes.convert(codes.ravel(), conversion.src, conversion.dst)
    converted = converted.astype(np.uint32).reshape(len(words), count)
    return converted[:, 0::2] | converted[:, 1::2] << 16


@pytest.fixture(scope="module")
def host_results(
    tmp_path_factory: pytest.TempPathFactory, c_compiler: str
) -> dict[str, np.ndarray]:
    """Every conversion run on the host over `_words()`: name -> [words, output_words]."""
    directory: Path = tmp_path_factory.mktemp("fast_conversions")
    source = directory / "fast.c"
    binary = directory / "fast"
    table = ", ".join(conversion.function for conversion in CONVERSIONS)
    program = [_HOST_PRIMITIVES]
    program += [conversion.source for conversion in CONVERSIONS]
    program.append(f"static void (*const jobs[])(unsigned int, unsigned int*) = {{{table}}};")
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
    words = _words()
    stdin = b"".join(
        np.array([k, len(words)], dtype="<u4").tobytes() + words.astype("<u4").tobytes()
        for k in range(len(CONVERSIONS))
    )
    run = subprocess.run([str(binary)], input=stdin, capture_output=True, check=False)
    assert run.returncode == 0, f"exit {run.returncode} (3: an inexact step) {run.stderr!r}"
    outputs = np.frombuffer(run.stdout, dtype="<u4").reshape(
        len(CONVERSIONS), len(words), MAX_OUTPUT_WORDS
    )
    return {
        conversion.function: outputs[k, :, : conversion.output_words]
        for k, conversion in enumerate(CONVERSIONS)
    }


@pytest.mark.parametrize("conversion", CONVERSIONS, ids=lambda c: c.function)
def test_host_conversion_matches_convert_on_every_code(
    conversion: FastConversion, host_results: dict[str, np.ndarray]
) -> None:
    words = _words()
    expected = _expected(conversion, words)
    actual = host_results[conversion.function]
    mismatch = np.argwhere(actual != expected)
    assert mismatch.size == 0, (
        f"word 0x{int(words[mismatch[0][0]]):08X}, out[{mismatch[0][1]}]: "
        f"0x{int(actual[tuple(mismatch[0])]):08X}, expected "
        f"0x{int(expected[tuple(mismatch[0])]):08X}"
    )


@pytest.mark.parametrize(("src", "dst", "word", "expected"), LITERALS)
def test_host_conversion_literal_word(
    src: dtypes.DataType,
    dst: dtypes.DataType,
    word: int,
    expected: list[int],
    host_results: dict[str, np.ndarray],
) -> None:
    conversion = fast_conversion(src, dst)
    assert conversion is not None
    position = int(np.flatnonzero(_words() == word)[0])
    assert host_results[conversion.function][position].tolist() == expected


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (dtypes.u3, dtypes.f16),  # 3-bit codes straddle words: no packed trick
        (dtypes.u4, dtypes.f32),  # only 16-bit targets
        (dtypes.f8e4m3, dtypes.f16),  # NaN codes need the generic path
    ],
)
def test_fast_conversion_absent(src: dtypes.DataType, dst: dtypes.DataType) -> None:
    assert fast_conversion(src, dst) is None


def test_fast_conversion_fields() -> None:
    conversion = fast_conversion(dtypes.u4, dtypes.f16)
    assert conversion is not None
    assert (conversion.function, conversion.elements_per_word, conversion.output_words) == (
        "la_fast_u4_to_f16",
        8,
        4,
    )
    assert conversion.call("w", "h") == "la_fast_u4_to_f16(w, h);"
    assert conversion.source.startswith("LA_FAST_FN void la_fast_u4_to_f16(")
    assert fast_conversion(dtypes.i2, dtypes.bf16).elements_per_word == 16


def _device_source() -> str:
    """Every conversion behind the device primitives, and a kernel applying job `job` to each
    word of an array."""
    cases = "\n".join(
        f"        case {k}: {conversion.call('words[index]', 'out')} break;"
        for k, conversion in enumerate(CONVERSIONS)
    )
    kernel = f"""
extern "C" __global__ void __launch_bounds__(128) fast_convert(
    const unsigned int* words, unsigned int* results, int count, int job)
{{
    const int index = blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= count) {{
        return;
    }}
    unsigned int out[{MAX_OUTPUT_WORDS}] = {{0u}};
    switch (job) {{
{cases}
    }}
    for (int k = 0; k < {MAX_OUTPUT_WORDS}; ++k) {{
        results[index * {MAX_OUTPUT_WORDS} + k] = out[k];
    }}
}}
"""
    return FAST_CONVERSION_PRIMITIVES + "\n".join(c.source for c in CONVERSIONS) + kernel


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
            KernelArrayParam("words", 32, count),
            KernelArrayParam("results", 32, count * MAX_OUTPUT_WORDS),
            KernelIntParam("count"),
            KernelIntParam("job"),
        ),
        block_threads=128,
    )
    words = _words()
    device_words = torch.from_numpy(words.view(np.int32)).cuda()
    results = torch.empty(len(words) * MAX_OUTPUT_WORDS, dtype=torch.int32, device="cuda")
    for job, conversion in enumerate(CONVERSIONS):
        kernel(device_words, results, len(words), job, grid=-(-len(words) // 128))
        actual = results.cpu().numpy().view(np.uint32).reshape(len(words), MAX_OUTPUT_WORDS)
        expected = _expected(conversion, words)
        assert np.array_equal(actual[:, : conversion.output_words], expected), conversion.function

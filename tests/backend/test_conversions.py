"""The device conversion functions, compiled as host C with gcc, against `ir.dtypes` bit for bit.

`backend.conversions.CONVERSION_SOURCE` is plain C that also compiles on the host; one program
holds a job per (source, destination) pair of types, each job the C expression that
`convert_expression` prints for that pair. The tests feed it every code of every type up to 16
bits and about 100k float32 inputs (specials, every rounding boundary of every format, random
bit patterns), and compare with `ir.dtypes.convert` and with ml_dtypes. The program is built
with UndefinedBehaviorSanitizer, so an overflowing shift or signed overflow fails the run.

On the device, f32 -> f16 and f32 -> bf16 use the hardware conversion with a NaN fix instead of
the generic code checked here; the GPU differential tests cover that path.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.conversions import (
    CONVERSION_SOURCE,
    convert_expression,
    decode_expression,
    encode_expression,
)
from ir import dtypes
from ir.dtypes import DataType

TYPES = dtypes.all_dtypes()
JOBS = [(src, dst) for src in TYPES for dst in TYPES]
JOB_INDEX = {pair: k for k, pair in enumerate(JOBS)}

_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    la_u32 header[2];
    while (fread(header, sizeof header, 1, stdin) == 1) {
        const la_job job = jobs[header[0]];
        const la_u32 count = header[1];
        la_u32 *data = (la_u32 *)malloc(count * sizeof(la_u32) + 1);
        la_u32 k;
        if (data == NULL || fread(data, sizeof(la_u32), count, stdin) != count) {
            return 2;
        }
        for (k = 0; k < count; k++) {
            data[k] = job(data[k]);
        }
        fwrite(data, sizeof(la_u32), count, stdout);
        free(data);
    }
    return 0;
}
"""

Runner = Callable[[Sequence[tuple[DataType, DataType, np.ndarray]]], list[np.ndarray]]


def _program() -> str:
    lines = [CONVERSION_SOURCE]
    for k, (src, dst) in enumerate(JOBS):
        expression = convert_expression(src, dst, "x")
        lines.append(f"static la_u32 job_{k}(la_u32 x) {{ return (la_u32)({expression}); }}")
    lines.append("typedef la_u32 (*la_job)(la_u32);")
    lines.append(
        "static const la_job jobs[] = {" + ", ".join(f"job_{k}" for k in range(len(JOBS))) + "};"
    )
    lines.append(_MAIN)
    return "\n".join(lines)


@pytest.fixture(scope="module")
def run_conversions(tmp_path_factory: pytest.TempPathFactory, c_compiler: str) -> Runner:
    """Compile the conversion program once; return a function running a batch of jobs.

    A batch is a list of (src, dst, codes); the result is the list of converted codes (uint32),
    all computed by one run of the program.
    """
    directory: Path = tmp_path_factory.mktemp("conversions")
    source = directory / "conversions.c"
    binary = directory / "conversions"
    source.write_text(_program())
    build = subprocess.run(
        [
            c_compiler,
            "-O0",
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsanitize=undefined",
            "-fno-sanitize-recover=all",
            "-o",
            str(binary),
            str(source),
            "-lm",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr

    def run(batch: Sequence[tuple[DataType, DataType, np.ndarray]]) -> list[np.ndarray]:
        chunks = []
        for src, dst, codes in batch:
            codes = np.asarray(codes, dtype=np.uint32)
            chunks.append(np.array([JOB_INDEX[src, dst], codes.size], dtype="<u4").tobytes())
            chunks.append(codes.astype("<u4").tobytes())
        result = subprocess.run(
            [str(binary)], input=b"".join(chunks), capture_output=True, check=False
        )
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        output = np.frombuffer(result.stdout, dtype="<u4")
        pieces, start = [], 0
        for _, _, codes in batch:
            size = np.asarray(codes).size
            pieces.append(output[start : start + size].astype(np.uint32))
            start += size
        assert start == output.size
        return pieces

    return run


def _every_code(dtype: DataType) -> np.ndarray:
    return np.arange(1 << dtype.nbits, dtype=np.uint32)


def _float32_inputs() -> np.ndarray:
    """Specials, every value and rounding boundary of the small formats (and a sample of f16's
    and bf16's), each +-1 ulp, and random bit patterns: about 100k float32 bit patterns."""
    rng = np.random.default_rng(7)
    specials = np.array(
        [0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 3.4028235e38, -3.4028235e38, 1e-45, 1.1754944e-38],
        dtype=np.float32,
    ).view(np.uint32)
    nans = np.array(
        [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FA00000],
        dtype=np.uint32,
    )
    targeted = []
    for dtype in TYPES:
        if not dtype.is_float or dtype.nbits == 32:
            continue
        values = dtype.decode(_every_code(dtype)).astype(np.float64)
        finite = np.unique(np.abs(values[np.isfinite(values)]))
        beyond = finite[-1] + (finite[-1] - finite[-2])
        points = np.concatenate([finite, (finite[:-1] + finite[1:]) / 2, [beyond, 2 * beyond]])
        if points.size > 4000:
            points = rng.choice(points, 4000, replace=False)
        points32 = points.astype(np.float32)
        near = [points32, np.nextafter(points32, np.float32(np.inf))]
        near.append(np.nextafter(points32, np.float32(0)))
        both = np.concatenate(near)
        targeted += [both, -both]
    random_bits = rng.integers(0, 2**32, 40_000, dtype=np.uint64).astype(np.uint32)
    small = rng.normal(0.0, 4.0, 20_000).astype(np.float32).view(np.uint32)
    pieces = [specials, nans, random_bits, small]
    pieces += [np.asarray(t, dtype=np.float32).view(np.uint32) for t in targeted]
    return np.unique(np.concatenate(pieces))


def _int32_inputs() -> np.ndarray:
    """Every small int, powers of two and their neighbours, the extremes, and random ints, as
    int32 codes (uint32 bit patterns)."""
    rng = np.random.default_rng(11)
    powers = np.array([2**k for k in range(31)], dtype=np.int64)
    values = np.concatenate(
        [
            np.arange(-300, 301),
            powers,
            powers - 1,
            powers + 1,
            -powers,
            -powers - 1,
            [-(2**31), 2**31 - 1, 2**24 + 1, 2**24 + 3, -(2**24) - 1],
            rng.integers(-(2**31), 2**31, 20_000),
        ]
    )
    values = values[(values >= -(2**31)) & (values < 2**31)]
    return np.unique(values).astype(np.int64).astype(np.int32).view(np.uint32)


FLOAT32_INPUTS = _float32_inputs()
INT32_INPUTS = _int32_inputs()


def _source_codes(dtype: DataType) -> np.ndarray:
    if dtype == dtypes.f32:
        return FLOAT32_INPUTS
    if dtype == dtypes.i32:
        return INT32_INPUTS
    return _every_code(dtype)


def _assert_same(
    src: DataType, dst: DataType, codes: np.ndarray, got: np.ndarray, expected: np.ndarray
) -> None:
    bad = np.flatnonzero(got != expected.astype(np.uint32))
    if bad.size:
        shown = ", ".join(
            f"{int(codes[k]):#x} -> {int(got[k]):#x} (expected {int(expected[k]):#x})"
            for k in bad[:5]
        )
        pytest.fail(f"{src} -> {dst}: {bad.size} of {codes.size} codes differ: {shown}")


# ------------------------------------------------------------------------------------- tables


@pytest.mark.parametrize(
    ("dtype", "value", "code"),
    [
        (dtypes.f4e2m1, 5.0, 0b0110),  # tie between 4 and 6: the even code, 4
        (dtypes.f4e2m1, 0.25, 0b0000),  # tie between 0 and 0.5: +0
        (dtypes.f4e2m1, -0.1, 0b1000),  # rounds to zero, keeps the sign
        (dtypes.f4e2m1, 100.0, 0b0111),  # saturates to max 6
        (dtypes.f4e2m1, float("nan"), 0b1000),  # +NaN gives -0 (as ml_dtypes)
        (dtypes.f4e2m1, float("-inf"), 0b1111),  # -inf saturates to -6
        (dtypes.f8e4m3, 448.0, 0x7E),  # max
        (dtypes.f8e4m3, 464.0, 0x7E),  # the tie between max and the NaN code: even, max
        (dtypes.f8e4m3, 465.0, 0x7F),  # past the rounding boundary of max: NaN
        (dtypes.f8e4m3, float("-inf"), 0xFF),  # -inf: NaN with the sign
        (dtypes.f8e5m2, 1e6, 0x7C),  # overflow: inf
        (dtypes.f8e5m2, float("-nan"), 0xFE),  # NaN keeps its sign, quiet payload
        (dtypes.f6e3m2, 2.0**-4, 0b000001),  # bias 3: the smallest subnormal, 2^-2 / 4
        (dtypes.f6e3m2, 3 * 2.0**-5, 0b000010),  # tie between subnormals 1 and 2: even, 2
        (dtypes.f16, 65520.0, 0x7C00),  # halfway past max: inf
        (dtypes.bf16, 1.00390625, 0x3F80),  # tie: even mantissa
        (dtypes.u4, -3.5, 0),  # saturates at 0
        (dtypes.u4, 2.5, 2),  # half to even
        (dtypes.i4, 7.5, 7),  # saturates at max
        (dtypes.i4, -8.5, 0b1000),  # -8
        (dtypes.i32, 3e9, 0x7FFFFFFF),
        (dtypes.i32, float("nan"), 0),
    ],
)
def test_encode_float32_table(
    run_conversions: Runner, dtype: DataType, value: float, code: int
) -> None:
    bits = np.array([value], dtype=np.float32).view(np.uint32)
    (got,) = run_conversions([(dtypes.f32, dtype, bits)])
    assert int(got[0]) == code


def test_expressions_table() -> None:
    assert decode_expression(dtypes.f4e2m1, "c") == "la_decode_float(c, 2, 1, 0)"
    assert decode_expression(dtypes.i3, "c") == "la_decode_int(c, 3, 1)"
    assert encode_expression(dtypes.f8e4m3, "v") == "la_encode_float(v, 4, 3, 1)"
    assert encode_expression(dtypes.u4, "v") == "la_float_to_int_code(v, 4, 0)"
    assert (
        encode_expression(dtypes.u4, "v", value_is_float=False) == "la_saturate_int_code(v, 4, 0)"
    )
    assert convert_expression(dtypes.f16, dtypes.f16, "c") == "(c)"
    assert convert_expression(dtypes.i3, dtypes.f16, "c") == (
        "la_encode_f16((float)(la_decode_int(c, 3, 1)))"
    )
    # A scaled cast multiplies through la_scale_exact, which passes a NaN on with its sign (a
    # bare device multiply would make it positive).
    assert convert_expression(dtypes.f8e4m3, dtypes.f16, "c", exponent=-3) == (
        "la_encode_f16(la_scale_exact(la_decode_float(c, 4, 3, 1), 0x1.0000000000000p-3f))"
    )
    assert convert_expression(dtypes.i3, dtypes.f32, "c", exponent=2) == (
        "la_float_to_bits(la_scale_exact((float)(la_decode_int(c, 3, 1)), 0x1.0000000000000p+2f))"
    )


# ------------------------------------------------------------------------------ differential


def test_decode_every_code_matches_dtypes(run_conversions: Runner) -> None:
    sources = [t for t in TYPES if t.nbits <= 16]
    batch = [(src, dtypes.f32, _every_code(src)) for src in sources]
    for (src, dst, codes), got in zip(batch, run_conversions(batch)):
        _assert_same(src, dst, codes, got, dtypes.convert(codes, src, dst))


def test_encode_float32_inputs_matches_dtypes(run_conversions: Runner) -> None:
    batch = [(dtypes.f32, dst, FLOAT32_INPUTS) for dst in TYPES]
    for (src, dst, codes), got in zip(batch, run_conversions(batch)):
        _assert_same(src, dst, codes, got, dtypes.convert(codes, src, dst))


def test_convert_every_pair_matches_dtypes(run_conversions: Runner) -> None:
    batch = [(src, dst, _source_codes(src)) for src, dst in JOBS if src != dtypes.f32]
    for (src, dst, codes), got in zip(batch, run_conversions(batch)):
        _assert_same(src, dst, codes, got, dtypes.convert(codes, src, dst))


ML_DTYPES = {
    dtypes.f8e4m3: ml_dtypes.float8_e4m3fn,
    dtypes.f8e5m2: ml_dtypes.float8_e5m2,
    dtypes.f8e3m4: ml_dtypes.float8_e3m4,
    dtypes.f6e2m3: ml_dtypes.float6_e2m3fn,
    dtypes.f6e3m2: ml_dtypes.float6_e3m2fn,
    dtypes.f4e2m1: ml_dtypes.float4_e2m1fn,
    dtypes.bf16: ml_dtypes.bfloat16,
    dtypes.f16: np.float16,
}


def test_encode_matches_ml_dtypes(run_conversions: Runner) -> None:
    # NumPy's float16 keeps NaN payload bits, which the contract drops (checked against
    # ir.dtypes above); NaN inputs are left out of this comparison for every format.
    values = FLOAT32_INPUTS.view(np.float32)
    numbers = FLOAT32_INPUTS[~np.isnan(values)]
    batch = [(dtypes.f32, dst, numbers) for dst in ML_DTYPES]
    for (_, dst, codes), got in zip(batch, run_conversions(batch)):
        with np.errstate(over="ignore", invalid="ignore"):
            reference = codes.view(np.float32).astype(ML_DTYPES[dst])
        width = np.uint16 if dst.nbits == 16 else np.uint8
        expected = reference.view(width).astype(np.uint32)
        _assert_same(dtypes.f32, dst, codes, got, expected)


# -------------------------------------------------------------------------------- properties


@settings(max_examples=15)
@given(
    st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=1, max_size=50),
    st.sampled_from([t for t in TYPES if t.is_float and t.nbits <= 16]),
)
def test_encode_after_decode_after_encode_is_encode(
    run_conversions: Runner, values: list[float], dtype: DataType
) -> None:
    bits = np.array(values, dtype=np.float32).view(np.uint32)
    (codes,) = run_conversions([(dtypes.f32, dtype, bits)])
    (decoded,) = run_conversions([(dtype, dtypes.f32, codes)])
    (again,) = run_conversions([(dtypes.f32, dtype, decoded)])
    np.testing.assert_array_equal(again, codes)

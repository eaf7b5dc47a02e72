"""f16 and bf16 arithmetic: the native instructions the lowering uses give the contract's codes.

The contract computes a float operation in float32 and rounds the result into the type; for f16
and bf16 `+ - * /` and `sqrt` that equals the correctly rounded operation (float32 has at least
2p + 2 significand bits), so the backend lowers add, subtract and multiply to the native `_rn`
instructions on codes and the rest through the hardware conversions. A NaN result is the
positive quiet NaN (the arithmetic class); `neg` and `abs` act on the sign bit of the code.

Three kinds of check:
- exact tables of the interpreter's codes for chosen pairs (ties, overflow, subnormals, NaN);
- a hypothesis property: the interpreter against ml_dtypes rounding the float64 result (another
  precision, another library);
- on the GPU, every pair of codes (2^32 per operation and type) through the lowering's own C
  formulas (`backend.lower.compute.binary_code`) against the float64 operation rounded once by the
  hardware (`cvt.rn` from f64), NaN results checked to be NaN and positive, and the paired
  instruction on (a, b) and (b, a) in one word against the single-element one (marked `gpu`).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.conversions import CONVERSION_SOURCE
from backend.cuda_codegen import OPERATION_SOURCE, half_pair_code
from backend.lower import lower
from backend.lower.compute import binary_code, unary_code
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.elementwise import apply_binary, apply_unary, to_values
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial

HALF_TYPES = (dtypes.f16, dtypes.bf16)
NUMPY_TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
ARITHMETIC = ("add", "sub", "mul", "div")
FLOAT64_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


def interpreter_code(op: str, dtype: DataType, a: int, b: int | None = None) -> int:
    """The code the reference interpreter gives for `op` on codes `a` (and `b`)."""
    x = to_values(dtype, np.array([a]))
    if b is None:
        result = apply_unary(op, dtype, x)
    else:
        result = apply_binary(op, dtype, x, to_values(dtype, np.array([b])))
    return int(dtype.encode(result)[0])


# -- exact tables --------------------------------------------------------------------------------

F16_TABLE = [
    # 1 + 2^-11 is a tie between 1 and 1 + 2^-10: to even (1).
    ("add", 0x3C00, 0x1000, 0x3C00),
    # 1 + 3 * 2^-11: a tie to even upwards (1 + 2^-9).
    ("add", 0x3C01, 0x1000, 0x3C02),
    ("sub", 0x3C00, 0x3C00, 0x0000),  # x - x is +0
    ("mul", 0x7BFF, 0x4000, 0x7C00),  # max * 2 overflows to inf
    ("mul", 0x0001, 0x3800, 0x0000),  # the smallest subnormal / 2 ties to even: +0
    ("mul", 0x0003, 0x3800, 0x0002),  # 3 * 2^-25 ties to even: 2 * 2^-24
    ("mul", 0x8000, 0x3C00, 0x8000),  # -0 * 1 = -0
    ("div", 0x3C00, 0x4200, 0x3555),  # 1 / 3
    ("div", 0x0000, 0x0000, 0x7E00),  # 0 / 0: the positive quiet NaN
    ("add", 0xFE01, 0x3C00, 0x7E00),  # a negative NaN operand: still the positive NaN
    ("sub", 0x7C00, 0x7C00, 0x7E00),  # inf - inf
    ("max", 0xFE00, 0xFE00, 0x7E00),  # max of two negative NaNs: positive
    ("max", 0x8000, 0x0000, 0x8000),  # max(-0, +0) keeps the first operand
]

BF16_TABLE = [
    ("add", 0x3F80, 0x3B80, 0x3F80),  # 1 + 2^-8 ties to 1
    ("mul", 0x7F7F, 0x4000, 0x7F80),  # max * 2 overflows to inf
    ("div", 0x3F80, 0x4040, 0x3EAB),  # 1 / 3
    ("mul", 0xFFC1, 0x3F80, 0x7FC0),  # a negative NaN operand: the positive NaN
]


@pytest.mark.parametrize(("op", "a", "b", "expected"), F16_TABLE)
def test_f16_interpreter_table(op: str, a: int, b: int, expected: int) -> None:
    assert interpreter_code(op, dtypes.f16, a, b) == expected


@pytest.mark.parametrize(("op", "a", "b", "expected"), BF16_TABLE)
def test_bf16_interpreter_table(op: str, a: int, b: int, expected: int) -> None:
    assert interpreter_code(op, dtypes.bf16, a, b) == expected


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=str)
def test_neg_and_abs_keep_a_nan_sign(dtype: DataType) -> None:
    nan = 0x7E00 if dtype == dtypes.f16 else 0x7FC0
    assert interpreter_code("neg", dtype, nan) == nan | 0x8000
    assert interpreter_code("abs", dtype, nan | 0x8000) == nan
    assert interpreter_code("sqrt", dtype, 0xBC00 if dtype == dtypes.f16 else 0xBF80) == nan


# -- the interpreter against ml_dtypes -----------------------------------------------------------


def _reference(op: str, dtype: DataType, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`op` in float64 rounded once into `dtype` by NumPy / ml_dtypes; NaN results positive."""
    x = dtype.decode(a).astype(np.float64)
    y = dtype.decode(b).astype(np.float64)
    with np.errstate(all="ignore"):
        result = FLOAT64_OPS[op](x, y)
        result = np.where(np.isnan(result), np.float64(np.nan), result)
        rounded = result.astype(NUMPY_TYPES[dtype.name])
    return rounded.view(np.uint16).astype(np.int64)


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(HALF_TYPES),
    op=st.sampled_from(ARITHMETIC),
    pairs=st.lists(st.tuples(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF)), min_size=1),
)
def test_interpreter_matches_float64_rounded_once(
    dtype: DataType, op: str, pairs: list[tuple[int, int]]
) -> None:
    a = np.array([p[0] for p in pairs], dtype=np.int64)
    b = np.array([p[1] for p in pairs], dtype=np.int64)
    got = dtype.encode(apply_binary(op, dtype, to_values(dtype, a), to_values(dtype, b)))
    np.testing.assert_array_equal(got.astype(np.int64), _reference(op, dtype, a, b))


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=str)
@pytest.mark.parametrize("op", ARITHMETIC)
def test_interpreter_matches_float64_on_a_sweep(dtype: DataType, op: str) -> None:
    # Every code against a stride of codes: signs, zeros, subnormals, normals, inf and NaN.
    a = np.repeat(np.arange(0, 0x10000, 7, dtype=np.int64), 3)
    b = (a * 40503 + 12345) % 0x10000
    got = dtype.encode(apply_binary(op, dtype, to_values(dtype, a), to_values(dtype, b)))
    np.testing.assert_array_equal(got.astype(np.int64), _reference(op, dtype, a, b))


# -- the lowering's choice -----------------------------------------------------------------------


def _binary_program(dtype: DataType, op: str):
    with ProgramBuilder("half_op", 32) as builder:
        n = builder.int_param("n", multiple_of=64)
        x = builder.array_param("x", dtype)
        y = builder.array_param("y", dtype)
        layout = spatial(32).local(2)
        view = builder.global_view(x, dtype, GlobalLayout((n,), (1,)))
        other = builder.global_view(y, dtype, GlobalLayout((n,), (1,)))
        a = builder.load_global(view, [builder.block_x * 64], layout)
        b = builder.load_global(other, [builder.block_x * 64], layout)
        builder.store_global(view, builder.binary(op, a, b), [builder.block_x * 64])
    return builder.program()


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=str)
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_lowering_uses_the_native_paired_instruction(dtype: DataType, op: str) -> None:
    source = lower(_binary_program(dtype, op), "sm_90a").source
    body = source[source.index('extern "C"') :]
    # Two elements of one thread sit in one word: the paired instruction on whole words.
    assert f"r2[0] = la_h{op}2_{dtype.name}(r0[0], r1[0]);" in body
    assert "la_decode_float(" not in body and "la_encode_float(" not in body


def test_division_goes_through_the_hardware_conversions() -> None:
    source = lower(_binary_program(dtypes.f16, "div"), "sm_90a").source
    body = source[source.index('extern "C"') :]
    assert "la_encode_f16(la_fdiv(la_decode_f16(" in body


def test_neg_and_abs_act_on_codes() -> None:
    assert unary_code("neg", dtypes.f16, "c") == "((la_u32)(c) ^ 0x8000u)"
    assert unary_code("abs", dtypes.f8e4m3, "c") == "((la_u32)(c) & 0x7Fu)"
    assert unary_code("neg", dtypes.f32, "c") == "((la_u32)(c) ^ 0x80000000u)"


# -- every pair on the GPU -----------------------------------------------------------------------

COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
GPU_BINARY = (*ARITHMETIC, "max", "min", *COMPARISONS)
DOUBLE_FORMULAS = {
    "add": "__dadd_rn(x, y)",
    "sub": "__dsub_rn(x, y)",
    "mul": "__dmul_rn(x, y)",
    "div": "__ddiv_rn(x, y)",
    "max": "((x < y || x != x) ? y : x)",
    "min": "((y < x || x != x) ? y : x)",
    "lt": "(double)(x < y)",
    "le": "(double)(x <= y)",
    "gt": "(double)(x > y)",
    "ge": "(double)(x >= y)",
    "eq": "(double)(x == y)",
    "ne": "(double)(x != y)",
}


def _exhaustive_source() -> tuple[str, list[str]]:
    """One CUDA source with a checking kernel per (type, operation), and their names."""
    lines = [
        "#include <cuda_fp16.h>",
        "#include <cuda_bf16.h>",
        CONVERSION_SOURCE,
        OPERATION_SOURCE,
        """
/* The f16 or bf16 code of a float64 value rounded once; comparisons give 0 or 1 as the u1 code. */
static __device__ unsigned la_test_round(double value, int bf16)
{
    return bf16 ? __bfloat16_as_ushort(__double2bfloat16(value))
                : __half_as_ushort(__double2half(value));
}

static __device__ void la_test_record(unsigned long long* result, unsigned pair)
{
    if (atomicAdd(result, 1ull) == 0ull) {
        result[1] = pair;
    }
}
""",
    ]
    names = []
    # A control that must fail everywhere but at exact products: the native add checked
    # against the float64 product (so the harness can report mismatches).
    names.append("check_control")
    lines.append(f"""
extern "C" __global__ void check_control(unsigned long long* result)
{{
    const la_u32 a = blockIdx.x;
    for (la_u32 b = threadIdx.x; b < 65536u; b += blockDim.x) {{
        const la_u32 got = ({binary_code("add", dtypes.f16, "a", "b")}) & 0xFFFFu;
        const double r = __dmul_rn((double)la_decode_f16(a), (double)la_decode_f16(b));
        if (r == r && got != la_test_round(r, 0)) {{
            la_test_record(result, (a << 16) | b);
        }}
    }}
}}""")
    for dtype in HALF_TYPES:
        bf16 = int(dtype == dtypes.bf16)
        decode = "la_decode_bf16" if bf16 else "la_decode_f16"
        for op in GPU_BINARY:
            name = f"check_{dtype.name}_{op}"
            names.append(name)
            comparison = op in COMPARISONS
            want = "(unsigned)r" if comparison else f"la_test_round(r, {bf16})"
            pair = half_pair_code(op, dtype, "(a | (b << 16))", "(b | (a << 16))")
            # The paired instruction on (a, b) and (b, a) in one word: both halves as the
            # single-element formula gives them.
            swapped = binary_code(op, dtype, "b", "a")
            pair_check = (
                "true" if pair is None else f"({pair}) == (got | ((({swapped}) & 0xFFFFu) << 16))"
            )
            nan_rule = (
                "false" if comparison else f"(got >> 15) == 0u && {decode}(got) != {decode}(got)"
            )
            lines.append(f"""
extern "C" __global__ void {name}(unsigned long long* result)
{{
    const la_u32 a = blockIdx.x;
    for (la_u32 b = threadIdx.x; b < 65536u; b += blockDim.x) {{
        const la_u32 got = ({binary_code(op, dtype, "a", "b")}) & 0xFFFFu;
        const double x = (double){decode}(a), y = (double){decode}(b);
        const double r = {DOUBLE_FORMULAS[op]};
        const bool nan_ok = {nan_rule};
        const bool ok = r != r ? nan_ok : got == {want};
        if (!ok || !({pair_check})) {{
            la_test_record(result, (a << 16) | b);
        }}
    }}
}}""")
        for op in ("neg", "abs", "sqrt"):
            name = f"check_{dtype.name}_{op}"
            names.append(name)
            formula = {
                "neg": "(la_u32)(a ^ 0x8000u)",
                "abs": "(la_u32)(a & 0x7FFFu)",
                "sqrt": f"la_test_round(__dsqrt_rn((double){decode}(a)), {bf16})",
            }[op]
            nan_rule = (
                "true" if op != "sqrt" else f"(got >> 15) == 0u && {decode}(got) != {decode}(got)"
            )
            lines.append(f"""
extern "C" __global__ void {name}(unsigned long long* result)
{{
    const la_u32 a = blockIdx.x * blockDim.x + threadIdx.x;
    const la_u32 got = ({unary_code(op, dtype, "a")}) & 0xFFFFu;
    const la_u32 want = {formula};
    const bool sqrt_nan = {"true" if op == "sqrt" else "false"} && {decode}(want) != {decode}(want);
    const bool ok = sqrt_nan ? ({nan_rule}) : got == want;
    if (!ok) {{
        la_test_record(result, a);
    }}
}}""")
    return "\n".join(lines), names


@pytest.mark.gpu
def test_every_pair_matches_the_correctly_rounded_result_on_gpu() -> None:
    import torch

    from backend.kernel import KernelArrayParam, build_kernel

    source, names = _exhaustive_source()
    params = [KernelArrayParam("result", 64, 2)]
    failures = []
    for name in names:
        kernel = build_kernel(source, name, params, 256, options=("--fmad=false",))
        result = torch.zeros(2, dtype=torch.int64, device="cuda")
        unary = name.rsplit("_", 1)[1] in ("neg", "abs", "sqrt")
        kernel(result, grid=256 if unary else 65536)
        count, first = (int(v) for v in result.cpu())
        if name == "check_control":
            # Most pairs differ; the harness must see it.
            assert count > 2**31, f"the control found only {count} mismatches"
        elif count:
            failures.append(f"{name}: {count} mismatches, first at {first:#x}")
    assert not failures, failures


def test_exhaustive_checks_compile_for_both_architectures() -> None:
    from backend.nvrtc import compile_cuda

    source, names = _exhaustive_source()
    assert len(names) == 2 * (len(GPU_BINARY) + 3) + 1
    for arch in ("sm_80", "sm_90a"):
        assert compile_cuda(source, arch, ("--fmad=false",)).cubin

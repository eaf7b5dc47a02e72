"""Casts whose NaNs nothing can tell apart: `backend.lower.context.nan_blind_tensors` and the
bare hardware widening it allows.

- The table: a tensor read only by add, sub, mul, div or fma is blind; one also stored, assigned,
  compared, reduced or viewed is not.
- The source: an f16 -> f32 cast that only feeds a multiply calls ``la_widen_f16`` (bf16: a
  shift), the same cast stored keeps ``la_decode_f16`` (which restores a NaN's sign); the
  late-scale decode kernel widens its scales the cheap way.
- The host emulation of the widening is the exact decode (so emulated runs stay bit-exact);
  the GPU run of the ``nan_casts`` feature program checks the device side.
"""

from __future__ import annotations

import re

import pytest

from backend.lower import lower
from backend.lower.context import nan_blind_tensors
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.examples.register_dequant_matmul import DequantConfig, register_dequant_matmul
from ir.program import Program
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial

LAYOUT = spatial(32).local(2)
LINE = GlobalLayout((64,), (1,))


def _program(use: str, source: dtypes.DataType = dtypes.f16) -> tuple[Program, str]:
    """A program casting x (`source`) to f32 and using the result as `use` says; the name of
    the cast's result."""
    with ProgramBuilder(f"nan_blind_{use}", 32) as b:
        x = b.array_param("x", source)
        y = b.array_param("y", dtypes.f32)
        out = b.array_param("out", dtypes.f32)
        values = b.load_global(b.global_view(x, source, LINE), [0], LAYOUT)
        factors = b.load_global(b.global_view(y, dtypes.f32, LINE), [0], LAYOUT)
        wide = b.cast(values, dtypes.f32)
        target = b.global_view(out, dtypes.f32, LINE)
        if use in ("add", "sub", "mul", "div"):
            result = b.binary(use, wide, factors)
        elif use == "fma":
            result = b.fma(wide, factors, factors)
        elif use == "maximum":
            result = b.maximum(wide, factors)
        elif use == "compare":
            result = b.where(b.lt(wide, factors), factors, wide)
        elif use == "assign":
            b.assign(factors, wide)
            result = factors
        elif use == "view":
            result = b.view(wide, dtypes.f32, LAYOUT)
        elif use == "mul_and_store":
            b.store_global(target, wide, [0])
            result = b.mul(wide, factors)
        else:
            result = wide
        b.store_global(target, result, [0])
    return b.program(), wide.name


@pytest.mark.parametrize(
    ("use", "blind"),
    [
        ("add", True),
        ("sub", True),
        ("mul", True),
        ("div", True),
        ("fma", True),
        ("maximum", False),
        ("compare", False),
        ("assign", False),
        ("view", False),
        ("mul_and_store", False),
        ("store", False),
    ],
)
def test_nan_blind_tensors_table(use: str, blind: bool) -> None:
    program, name = _program(use)
    assert (name in nan_blind_tensors(program)) is blind


def test_loaded_operands_that_are_stored_are_not_blind() -> None:
    program, _ = _program("mul")
    names = nan_blind_tensors(program)
    # x's tile is read by the cast (not an arithmetic op); the product is stored.
    assert not any(name.startswith(("x", "out")) for name in names)


def _cast_calls(program: Program) -> str:
    return lower(program, "sm_90a").source.split("__global__", 1)[1]


def test_a_cast_only_multiplied_widens_with_the_hardware_alone() -> None:
    body = _cast_calls(_program("mul")[0])
    assert "la_widen_f16(" in body and "la_decode_f16(" not in body


def test_a_cast_also_stored_restores_the_nan_sign() -> None:
    body = _cast_calls(_program("mul_and_store")[0])
    assert "la_decode_f16(" in body and "la_widen_f16(" not in body


def test_a_bf16_cast_only_multiplied_is_a_shift() -> None:
    body = _cast_calls(_program("mul", dtypes.bf16)[0])
    assert "la_decode_bf16(" not in body
    assert re.search(r"la_bits_to_float\(\(.*\) << 16\)", body)


def test_late_scale_decode_kernel_widens_its_scales_with_the_hardware_alone() -> None:
    config = DequantConfig(units_k=8, late_scale=True, weights_as_a=True)
    program = register_dequant_matmul(dtypes.i2, 128, config)
    source = lower(program, "sm_90a", constants={"n": 4096, "k": 4096}).source
    body = source.split("__global__", 1)[1]
    assert "la_widen_f16(" in body and "la_decode_f16(" not in body


def test_host_widening_is_the_exact_decode() -> None:
    """Emulated on the host (no LA_DEVICE_CODE), la_widen_f16 is la_decode_f16's host branch."""
    from backend.conversions import CONVERSION_SOURCE

    widen = CONVERSION_SOURCE.split("LA_FN float la_widen_f16", 1)[1].split("}", 1)[0]
    assert "#else\n    return la_decode_float(code, 5, 10, LA_IEEE_LIKE);" in widen

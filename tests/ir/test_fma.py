"""`fma`: a * b + c on f32 rounded once (`ir.instructions.Fma`, `ir.elementwise.
fused_multiply_add`).

- Exact table: a case float64 double rounding gets wrong, an exact tie, signed zeros, NaN,
  overflow at the boundary, a product below float32's range.
- Property: random float32 triples (every magnitude, subnormals, infinities, NaNs) against the
  exact rational value rounded to nearest even by hand (`fractions`).
- The builder and verifier: broadcasting like `binary`, only f32, a clear error otherwise; the
  interpreter runs it; the lowering calls the hardware fma.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.lower import lower
from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.elementwise import fused_multiply_add
from ir.errors import VerificationError
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import spatial

F32_MAX = float(np.finfo(np.float32).max)


def _bits(value: float) -> int:
    return int(np.array(value, dtype=np.float32).view(np.uint32))


def _exact(a: float, b: float, c: float) -> np.float32:
    """a * b + c rounded once to float32, from the exact rational value (IEEE rules for
    infinities, NaN and signed zeros)."""
    with np.errstate(all="ignore"):
        wide = np.float64(a) * np.float64(b) + np.float64(c)  # exact for finite float32s
        if not all(np.isfinite([a, b, c])):
            return np.float32(wide)  # IEEE's infinities and NaNs
    value = Fraction(a) * Fraction(b) + Fraction(c)
    if value == 0:
        return np.float32(wide)  # the sign of an exact zero: IEEE's rule, as float64 has it
    limit = Fraction(2) ** 128 - Fraction(2) ** 103  # halfway past the largest float32
    if abs(value) >= limit:
        return np.float32(np.inf if value > 0 else -np.inf)
    with np.errstate(all="ignore"):
        guess = np.float32(float(value))
        candidates = [guess, np.nextafter(guess, np.float32(np.inf))]
        candidates.append(np.nextafter(guess, np.float32(-np.inf)))

    def distance(x: np.float32) -> tuple[Fraction, int]:
        if not np.isfinite(x):
            return Fraction(2) ** 300, 0
        return abs(Fraction(float(x)) - value), _bits(float(x)) & 1

    return min(candidates, key=distance)


EDGES = [
    # (a, b, c, expected bits): through float64 the first would round to 1 + 2^-22.
    (2.0**-24 * (1 + 2.0**-23), 1 - 2.0**-23, 1 + 2.0**-23, _bits(1 + 2.0**-23)),
    (1 + 2.0**-12, 1 + 2.0**-12, -(2.0**-11), _bits(1.0)),  # an exact tie: to even
    (-1.0, 0.0, -0.0, 0x80000000),
    (-1.0, 0.0, 0.0, 0x00000000),
    (float("inf"), 0.0, 1.0, 0x7FC00000),  # the positive quiet NaN
    (float("-inf"), 1.0, float("inf"), 0x7FC00000),
    (2.0**127, 2.0, 0.0, 0x7F800000),
    (F32_MAX, 1.0, F32_MAX * 2.0**-25, _bits(F32_MAX)),  # below the overflow midpoint
    (2.0**-100, 2.0**-100, 2.0**-149, 1),  # the product vanishes into the sum's rounding
]


@pytest.mark.parametrize(("a", "b", "c", "bits"), EDGES)
def test_edge_cases(a: float, b: float, c: float, bits: int) -> None:
    arrays = (np.array([x], dtype=np.float32) for x in (a, b, c))
    result = fused_multiply_add(*arrays)
    assert int(result.view(np.uint32)[0]) == bits
    assert int(np.array(_exact(a, b, c)).view(np.uint32)) & 0x7FFFFFFF == bits & 0x7FFFFFFF


def test_double_rounding_through_float64_would_differ() -> None:
    a, b, c = EDGES[0][:3]
    naive = np.float32(np.float64(np.float32(a)) * np.float64(np.float32(b)) + np.float32(c))
    assert _bits(float(naive)) != EDGES[0][3]


finite_or_not = st.floats(width=32, allow_nan=True, allow_infinity=True)
scaled = st.builds(
    lambda m, e: float(np.float32(min(max(m * 2.0**e, -F32_MAX), F32_MAX))),
    st.floats(-2.0, 2.0, width=32),
    st.integers(-150, 127),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(finite_or_not, scaled), scaled, scaled), min_size=1))
def test_rounds_the_exact_value_once(triples: list[tuple[float, float, float]]) -> None:
    a, b, c = (np.array(column, dtype=np.float32) for column in zip(*triples))
    result = fused_multiply_add(a, b, c)
    for k, (x, y, z) in enumerate(triples):
        want = _exact(float(np.float32(x)), float(np.float32(y)), float(np.float32(z)))
        if np.isnan(want):
            assert int(result.view(np.uint32)[k]) == 0x7FC00000
        else:
            assert result.view(np.uint32)[k] == np.array(want).view(np.uint32), (x, y, z)


def _program(dtype: dtypes.DataType = dtypes.f32, broadcast: bool = False):
    layout = spatial(8, 4).local(1, 2)
    with ProgramBuilder("fma", 32) as b:
        x, y, z, out = (b.array_param(name, dtype) for name in ("x", "y", "z", "out"))
        view = GlobalLayout((8, 8), (8, 1))
        a = b.load_global(b.global_view(x, dtype, view), [0, 0], layout)
        bb = b.load_global(b.global_view(y, dtype, view), [0, 0], layout)
        if broadcast:
            column = reduce_layout(layout, [1], keepdims=True)
            c = b.load_global(b.global_view(z, dtype, GlobalLayout((8, 1), (1, 1))), [0, 0], column)
        else:
            c = b.load_global(b.global_view(z, dtype, view), [0, 0], layout)
        b.store_global(b.global_view(out, dtype, view), b.fma(a, bb, c), [0, 0])
    return b.program()


@pytest.mark.parametrize("broadcast", [False, True])
def test_interpreter_runs_fma_with_broadcasting(broadcast: bool) -> None:
    rng = np.random.default_rng(5)
    x, y = (rng.standard_normal((8, 8)).astype(np.float32) for _ in range(2))
    z = rng.standard_normal((8, 1) if broadcast else (8, 8)).astype(np.float32)
    out = np.zeros((8, 8), dtype=np.float32)
    run_reference(_program(broadcast=broadcast), x, y, z, out, grid=1)
    expected = fused_multiply_add(x, y, z)
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))


def test_fma_prints_and_lowers_to_the_hardware_fma() -> None:
    program = _program()
    assert "= fma(" in str(program)
    source = lower(program, "sm_90a").source.split("__global__", 1)[1]
    assert "la_ffma(" in source


@pytest.mark.parametrize("dtype", [dtypes.f16, dtypes.i32], ids=str)
def test_fma_of_another_type_is_refused(dtype: dtypes.DataType) -> None:
    with pytest.raises(VerificationError, match=f"fma applies to f32, not {dtype}"):
        _program(dtype)


def test_fma_of_shapes_that_do_not_broadcast_is_refused() -> None:
    with ProgramBuilder("fma_shapes", 32) as b:
        x = b.register_tensor(dtypes.f32, spatial(32).local(2), 1.0)
        y = b.register_tensor(dtypes.f32, spatial(32).local(4), 1.0)
        with pytest.raises(VerificationError, match=r"fma: the operand shapes \(64,\), \(128,\)"):
            b.fma(x, y, x)

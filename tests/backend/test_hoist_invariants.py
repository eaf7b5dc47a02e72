"""Block-invariant values computed once (`lower(..., hoist_invariants=True)`): which parts of an
expression are hoisted, that the hoisted expression still evaluates to the same value, that the
lowering's claims are still proved, that the kernel compiles where ptxas no longer serialises
its wgmma, and that without the switch no kernel changes. The CPU emulation runs the hoisted
stream-K and grouped kernels bit for bit (test_lower_emulated.py)."""

from __future__ import annotations

import re
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import backend
from backend.errors import PerformanceWarning
from backend.lower import lower
from backend.lower.context import LoweringContext, invariant_declaration
from ir.examples.matmul import matmul
from ir.program import BLOCK_INDICES
from layout_algebra.symbolic import Expr, evaluate, minimum, var
from proofs.lowering_validation import validate_access, validate_lowering
from proofs.printed_source import PrintedSource

BLOCK_X, BLOCK_Y, _ = BLOCK_INDICES
M = var("m", 1, 2**20)
N = var("n", 1, 2**20)
THREAD = var("la_thread", 0, 255)
LOOP = var("k0", 0, 1000)
TILES_N = (N + 63) // 64


def grouped_matmul(group_m: int = 8) -> object:
    """The f16 matmul of 128 x 256 tiles on TMA and wgmma, its dot in flight, the tiles taken in
    groups of `group_m` tile rows (their origin divides by the runtime tile count)."""
    return matmul(
        256,
        128,
        256,
        64,
        tensor_cores=True,
        stages=4,
        swizzle=True,
        wgmma=True,
        overlap_dot=True,
        bulk=True,
        group_m=group_m,
    )


def context() -> LoweringContext:
    return LoweringContext(matmul(), "sm_90a", hoist_invariants=True)


def test_hoisting_table() -> None:
    """What is hoisted: the largest block-invariant part that divides by a runtime value; not a
    division by a constant, nor a part reading the thread or a loop, nor a condition itself;
    the same expression twice is one variable."""
    ctx = context()
    grouped_row = BLOCK_Y * TILES_N + BLOCK_X
    origin = (grouped_row // (2 * TILES_N)) * 128
    assert ctx.hoist_invariants(BLOCK_X * 64) == BLOCK_X * 64
    assert ctx.hoist_invariants(N // 4) == N // 4
    first = ctx.hoist_invariants(origin)
    assert (first.op, first.name) == ("var", "la_inv0")
    assert first.bounds() == origin.bounds()
    address = ctx.hoist_invariants(origin + THREAD * 2 + LOOP * 64)
    assert address.free_vars() == {"la_inv0", "la_thread", "k0"}
    assert len(ctx.invariants) == 1
    condition = ctx.hoist_invariants(origin < M)
    assert condition.op == origin.__lt__(M).op and condition.free_vars() == {"la_inv0", "m"}
    column = ctx.hoist_invariants(grouped_row % minimum(M // 128 + 1, 2))
    assert (column.op, column.name) == ("var", "la_inv1")
    declarations = [invariant_declaration(v, d) for d, v in ctx.invariants]
    assert declarations[0].startswith("const long long la_w_la_inv0 = ")
    assert declarations[1].startswith("const int la_inv1 = ")


def _expressions() -> st.SearchStrategy[Expr]:
    leaves = st.sampled_from([BLOCK_X, BLOCK_Y, M, N, THREAD, LOOP]) | st.integers(1, 9).map(
        lambda value: Expr("const", value=value)
    )

    def extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        pair = st.tuples(children, children)
        return st.one_of(
            pair.map(lambda p: p[0] + p[1]),
            pair.map(lambda p: p[0] * p[1]),
            pair.map(lambda p: p[0] // (p[1] % 7 + 1)),
            pair.map(lambda p: p[0] % (p[1] % 5 + 1)),
            pair.map(lambda p: minimum(p[0], p[1])),
        )

    return st.recursive(leaves, extend, max_leaves=8)


@settings(max_examples=60, deadline=None)
@given(
    expr=_expressions(),
    values=st.fixed_dictionaries(
        {
            "block_x": st.integers(0, 300),
            "block_y": st.integers(0, 300),
            "m": st.integers(1, 5000),
            "n": st.integers(1, 5000),
            "la_thread": st.integers(0, 255),
            "k0": st.integers(0, 1000),
        }
    ),
)
def test_a_hoisted_expression_keeps_its_value(expr: Expr, values: dict[str, int]) -> None:
    """Each hoisted variable stands for its expression: substituted back, the hoisted form
    evaluates to the original's value, and every variable reads only block indices and int
    parameters."""
    ctx = context()
    hoisted = ctx.hoist_invariants(expr)
    definitions = {variable.name: original for original, variable in ctx.invariants}
    for original in definitions.values():
        assert original.free_vars() <= {"block_x", "block_y", "m", "n"}
    environment = dict(values)
    environment.update({name: evaluate(original, values) for name, original in definitions.items()})
    assert evaluate(hoisted, environment) == evaluate(expr, values)


def test_without_the_switch_nothing_is_hoisted() -> None:
    plain = lower(grouped_matmul(), "sm_90a")
    assert "la_inv" not in plain.source
    hoisted = lower(grouped_matmul(), "sm_90a", hoist_invariants=True)
    body = hoisted.source.split('extern "C"')[1]
    declarations = [line for line in body.splitlines() if "la_inv" in line and "const " in line]
    assert len(declarations) == 8  # the tile's row origin, its column origins, the epilogue's
    first_use = body.index("la_tma_load_2d(")
    assert all(body.index(line) < first_use for line in declarations)
    assert body.index("la_warp_mask =") < body.index(declarations[0])


def test_the_hoisted_kernel_s_claims_are_proved_as_the_plain_kernel_s() -> None:
    """Every access of the hoisted kernel gets the plain kernel's verdict (one store's proof
    runs past the solver's limit in both); its text is checked through the hoisted variables,
    and an address whose variable's declaration is gone fails its text claim."""
    plain = validate_lowering(lower(grouped_matmul(2), "sm_90a"))
    lowered = lower(grouped_matmul(2), "sm_90a", hoist_invariants=True)
    hoisted = validate_lowering(lowered)
    assert [r.holds for _, r in hoisted.results] == [r.holds for _, r in plain.results]
    assert not hoisted.failures and len(hoisted.unknown) == len(plain.unknown) == 1
    printed = PrintedSource.of(lowered.source, lowered.invariants)
    reading = [access for access in lowered.accesses if "la_inv" in printed.c(access.expr)]
    assert reading  # the epilogue's stores (the copies' coordinates are TMA's, not accesses)
    name = re.search(r"la_inv\d+", printed.c(reading[0].expr)).group(0)
    declaration = next(line for line in lowered.source.splitlines() if f"{name} = " in line)
    tampered = PrintedSource.of(lowered.source.replace(declaration + "\n", ""), lowered.invariants)
    result = validate_access(reading[0], tampered)
    assert result.holds is False and "never computes" in result.reason


def test_ptxas_keeps_the_grouped_matmul_s_wgmma_in_flight_once_hoisted(tmp_path) -> None:
    """ptxas serialises the wgmma of the grouped matmul whose tile origin is written at every
    use (its note C7515), and not once the origin is computed at the kernel's start."""
    cache = backend.CubinCache(tmp_path)
    with pytest.warns(PerformanceWarning, match="C7515"):
        backend.compile(grouped_matmul(), "sm_90a", cache=cache)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        kernel = backend.compile(grouped_matmul(), "sm_90a", cache=cache, hoist_invariants=True)
    assert kernel.performance_losses == ()

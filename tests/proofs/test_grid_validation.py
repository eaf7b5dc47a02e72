"""Validation of kernels whose programs declare their launch grid (`ProgramBuilder.grid`).

The accesses of such a kernel are proved against the specialised instructions, whose block
indices the grid bounds, under the facts ``block_x < x`` of its extents that are not
constants. Exact: every access of a grid-declaring program is proved, with and without
compile-time constants; the facts are among the assumptions and the proof rests on them (a
mask of 1 is proved with the fact ``block_x < n // 128`` and refuted without it); the bound
that a constant extent gives the block index is what makes a dropped bounds check correct (the
same access with block_x unbounded is refuted, with a block past the grid as counterexample).
"""

from __future__ import annotations

import dataclasses

import pytest

from backend.lower import Access, lower
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.program import BLOCK_INDICES, Program
from layout_algebra import GlobalLayout, as_expr, spatial
from proofs.lowering_validation import validate_access, validate_lowering

RLIMIT = 2_000_000


def doubled(constant: bool) -> Program:
    """y[i] = x[i] + x[i] for i < n, 128 f32 elements per block, grid n // 128 declared."""
    with ProgramBuilder("doubled", 32) as b:
        n = b.int_param("n", 128, 2**20, multiple_of=128, constant=constant)
        x = b.array_param("x", dtypes.f32)
        y = b.array_param("y", dtypes.f32)
        b.grid(n // 128)
        tile = spatial(32).local(4)
        source = b.global_view(x, dtypes.f32, GlobalLayout((n,), (1,)))
        target = b.global_view(y, dtypes.f32, GlobalLayout((n,), (1,)))
        values = b.load_global(source, [b.block_x * 128], tile)
        b.store_global(target, b.add(values, values), [b.block_x * 128])
    return b.program()


def rows() -> Program:
    """y = x + 1 over an (m, n) i32 matrix, (4, 32) per block, grid (n // 32, (m + 3) // 4)."""
    with ProgramBuilder("rows", 32) as b:
        m = b.int_param("m", 0, 2**16)
        n = b.int_param("n", 32, 4096, multiple_of=32, constant=True)
        x = b.array_param("x", dtypes.i32)
        y = b.array_param("y", dtypes.i32)
        b.grid(n // 32, (m + 3) // 4)
        layout = GlobalLayout((m, n), (n, 1))
        source = b.global_view(x, dtypes.i32, layout)
        target = b.global_view(y, dtypes.i32, layout)
        origin = [b.block_y * 4, b.block_x * 32]
        tile = b.load_global(source, origin, spatial(4, 8).local(1, 4))
        b.store_global(target, b.add(tile, 1), origin)
    return b.program()


@pytest.mark.parametrize(
    ("program", "constants"),
    [(doubled(True), {"n": 1024}), (doubled(False), None), (rows(), {"n": 256})],
    ids=["constant n", "n", "rows"],
)
def test_every_access_of_a_grid_program_is_proved(
    program: Program, constants: dict[str, int] | None
) -> None:
    lowered = lower(program, constants=constants)
    report = validate_lowering(lowered, rlimit=RLIMIT)
    assert report.holds is True, (report.failures[:1], report.unknown[:1])


def _vector(lowered: object) -> Access:
    """The first vector access (the 16-byte load) of a lowered kernel."""
    return next(access for access in lowered.accesses if access.width == 4)


def test_the_grid_fact_is_an_assumption_the_proof_rests_on() -> None:
    vector = _vector(lower(doubled(False)))
    (fact,) = [f for f in vector.assumptions if "block_x" in f.free_vars()]
    assert repr(fact) == "block_x < n // 128"
    always = dataclasses.replace(vector, mask=as_expr(1))
    assert validate_access(always, rlimit=RLIMIT).holds is True
    without = dataclasses.replace(
        always, assumptions=tuple(f for f in always.assumptions if f is not fact)
    )
    result = validate_access(without, rlimit=RLIMIT)
    assert result.holds is False
    assert result.counterexample["claim"] == "mask"


def test_a_dropped_bounds_check_needs_the_grid_bound() -> None:
    vector = _vector(lower(doubled(True), constants={"n": 1024}))
    assert vector.mask == as_expr(1)
    (block_x,) = [v for v in vector.instruction.scalars()[0].variables() if v.name == "block_x"]
    assert (block_x.lo, block_x.hi) == (0, 7)
    unbounded = {"block_x": BLOCK_INDICES[0]}
    mutated = dataclasses.replace(
        vector,
        instruction=vector.instruction.map_scalars(lambda e: e.substitute(unbounded)),
        origin=tuple(o.substitute(unbounded) for o in vector.origin),
        expr=vector.expr.substitute(unbounded),
    )
    result = validate_access(mutated, rlimit=RLIMIT)
    assert result.holds is False
    assert result.counterexample["claim"] == "mask"
    assert result.counterexample["variables"]["block_x"] >= 8

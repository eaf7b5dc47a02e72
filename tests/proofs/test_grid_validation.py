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
from ir.program import BLOCK_INDICES, Program
from ir.testing.grid_programs import doubled, rows
from layout_algebra import as_expr
from proofs.lowering_validation import validate_access, validate_lowering

RLIMIT = 2_000_000


@pytest.mark.parametrize(
    ("program", "constants"),
    [(doubled(constant=True), {"n": 1024}), (doubled(constant=False), None), (rows(), {"n": 256})],
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
    vector = _vector(lower(doubled(constant=False)))
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
    vector = _vector(lower(doubled(constant=True), constants={"n": 1024}))
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

"""Divisibility facts an access is validated under (`proofs.lowering_validation`).

A fact ``v % m == 0`` with m a positive constant is handed to the solver as ``v == m * q``;
any other fact is used as it stands. The access is matmul's 16-byte load of A, whose
alignment rests on its declared fact ``k % 8 == 0`` (k the row length): with the fact
replaced by ``k % m == 0`` for a variable m, m = 2 and k = 2 satisfy it, and row 1 then starts
4 bytes past a 16-byte boundary, so the alignment claim must be refuted.
"""

from __future__ import annotations

import dataclasses

import pytest

from backend.lower import Access, lower
from ir.examples.matmul import matmul
from layout_algebra import Expr, GlobalLayout, evaluate, var
from proofs.lowering_validation import validate_access

RLIMIT = 20_000_000
"""Z3 resource units for each access. 2 million suffice from a fresh context, but what a
refutation takes depends on the terms earlier proofs left in the shared context (the
counterexample's thread changes with them), and 2 million once ran out in the whole suite."""
K = var("k", 0, 2**31 - 1)
M = var("m", 1, 64)


def a_row_load() -> Access:
    """The first 16-byte global load of matmul whose address reads k."""
    return next(
        a
        for a in lower(matmul()).accesses
        if a.width == 8 and isinstance(a.memory, GlobalLayout) and "k" in a.expr.free_vars()
    )


def with_facts(access: Access, *facts: Expr) -> Access:
    """`access` with its fact ``k % 8 == 0`` replaced by `facts`."""
    kept = tuple(f for f in access.assumptions if f != (K % 8).eq(0))
    assert len(kept) == len(access.assumptions) - 1
    return dataclasses.replace(access, assumptions=kept + facts)


def test_constant_divisor_fact_proves_the_alignment() -> None:
    assert validate_access(a_row_load(), rlimit=RLIMIT).holds is True


@pytest.mark.parametrize(
    "facts",
    [
        ((K % M).eq(0),),  # any m in [1, 64]
        ((K % M).eq(0), M.eq(4)),  # m = 4: rows 8 bytes apart from 16-byte boundaries
    ],
    ids=["m free", "m = 4"],
)
def test_symbolic_divisor_fact_is_used_as_it_stands(facts: tuple[Expr, ...]) -> None:
    result = validate_access(with_facts(a_row_load(), *facts), rlimit=RLIMIT)
    assert result.holds is False
    example = result.counterexample
    assert example["claim"] == "alignment"
    values = example["variables"]
    assert all(evaluate(fact, values) for fact in facts)
    assert values["k"] % 8 != 0

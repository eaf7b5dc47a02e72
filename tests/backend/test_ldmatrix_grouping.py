"""How `plan_ldmatrix` groups a thread's register pairs into ldmatrix instructions.

PTX's ``ldmatrix.sync.aligned.m8n8.x{1,2,4}.b16`` loads 1, 2 or 4 8x8 matrices of 16-bit
elements, one 32-bit register (a pair of elements) per matrix per thread. The plan walks the
pairs in order and takes the longest run of pairs of one form (plain or transposed), capped at
4, as one x4, x2 or x1 instruction; a run of 3 is an x2 followed by an x1.

The register layouts are the ldmatrix fragment: thread t holds elements (t // 4, 2 * (t % 4))
and (t // 4, 2 * (t % 4) + 1) of each 8x8 matrix (`spatial(8, 4).local(1, 2)`), stacked
`local(m, 1)` times down the rows.
"""

from __future__ import annotations

import pytest

from backend.tensor_core import plan_ldmatrix
from ir import dtypes
from layout_algebra import local, spatial
from layout_algebra.shared import shared_column_major, shared_row_major

FRAGMENT = spatial(8, 4).local(1, 2)


@pytest.mark.parametrize(
    ("shared", "layout", "expected"),
    [
        # One matrix: one pair per thread, one x1.
        (shared_row_major(8, 8), FRAGMENT, [(0, 1, False)]),
        # One matrix in a column-major tensor: the transposed x1.
        (shared_column_major(8, 8), FRAGMENT, [(0, 1, True)]),
        # Two matrices: one x2.
        (shared_row_major(16, 8), local(2, 1).spatial(8, 4).local(1, 2), [(0, 2, False)]),
        # Three matrices: an x2 then an x1 for the last pair.
        (
            shared_row_major(24, 8),
            local(3, 1).spatial(8, 4).local(1, 2),
            [(0, 2, False), (2, 1, False)],
        ),
        # Four matrices: one x4.
        (shared_row_major(32, 8), local(4, 1).spatial(8, 4).local(1, 2), [(0, 4, False)]),
    ],
)
def test_pairs_are_grouped_into_x4_x2_x1(shared, layout, expected) -> None:
    plan = plan_ldmatrix(shared, layout, dtypes.f16)
    assert plan is not None
    got = [(i.first_pair, i.count, i.transpose) for i in plan.instructions]
    assert got == expected

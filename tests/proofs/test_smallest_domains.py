"""The smallest legal inputs of the proofs, and domains that end at their last element.

- `check_permutation` with width 0: the range [0, 2**0) = {0}; x -> x permutes it, x -> x ^ 1
  sends 0 to 1, outside it.
- `check_rows_conflict_free` on a two-row (2, 8) layout of 16-bit elements (one 16-byte chunk
  per row) whose rows are 9 elements apart: row 0's chunk starts at 0 and is aligned, the last
  row's starts at 9, not a multiple of 8, so only the last row breaks the claim.
- The layout laws with max_size 1: every size is 1, each layout a single point, and both sides
  of each law are that point, so the law holds.
"""

from __future__ import annotations

import pytest

from layout_algebra import LayoutError, SharedLayout, var
from proofs.errors import ProofError
from proofs.laws import prove_product_associative
from proofs.swizzle import check_permutation, check_rows_conflict_free

RLIMIT = 5_000_000
TIMEOUT = 60.0

x = var("x", 0, 0)


@pytest.mark.parametrize(
    ("expr", "permutes"),
    [
        (x, True),  # the identity of {0}
        (x * 2, True),  # 0 -> 0
        (x + 1, False),  # 0 -> 1, outside the range
        (x ^ 1, False),  # 0 -> 1, outside the range
    ],
    ids=repr,
)
def test_permutation_of_width_zero(expr, permutes: bool) -> None:
    result = check_permutation(expr, "x", 0, rlimit=RLIMIT, timeout=TIMEOUT)
    assert result.holds is permutes
    if not permutes:
        assert result.counterexample == {"x": 0, "y": 0, "image_x": 1, "image_y": 1}


def test_negative_width_is_refused() -> None:
    with pytest.raises(LayoutError, match="width must be a non-negative int, got -1"):
        check_permutation(x, "x", -1)


@pytest.mark.parametrize(
    ("row_stride", "holds"),
    [
        (8, True),  # compact rows: both chunks aligned, bank groups 0 and 1
        (9, False),  # the last row's chunk starts at element 9
    ],
)
def test_conflict_in_the_last_row_only(row_stride: int, holds: bool) -> None:
    layout = SharedLayout((2, 8), (2, 8), (row_stride, 1))
    result = check_rows_conflict_free(layout, 16, rlimit=RLIMIT, timeout=TIMEOUT)
    assert result.holds is holds
    if not holds:
        assert result.counterexample == {"row": 1, "column": 0, "offset": 9, "chunk_start": 9}


def test_laws_with_every_size_one() -> None:
    result = prove_product_associative(max_size=1, timeout=TIMEOUT)
    assert result.holds is True
    assert result.reason == "(A * B) * C == A * (B * C) for every size in [1, 1]"


@pytest.mark.parametrize("max_size", [0, -3, True, 1.5])
def test_laws_refuse_a_max_size_below_one(max_size: object) -> None:
    with pytest.raises(ProofError, match="max_size must be a positive int"):
        prove_product_associative(max_size=max_size)

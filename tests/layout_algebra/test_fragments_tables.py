"""Whole fragment tables of `layout_algebra.fragments`, pinned by the PTX ISA's figures.

The ISA draws each fragment as a grid whose cell (row, col) names the lane and the register that
hold it (``T5:b1``: lane 5, element b1). Each table here is that figure typed out; the test draws
the same grid from the fragment's `ptx` formula and from its algebraic `layout` and compares
every cell. (The proofs package shows `ptx` and `layout` agree; this pins both to the ISA.)
"""

from __future__ import annotations

import pytest

from layout_algebra.fragments import fragment

# PTX ISA, "Matrix fragments for mma.m16n8k8", figure "MMA .m16n8k8 fragment layout for matrix B
# with .f16/.bf16 type": 8 x 8 (K x N); row = threadID_in_group * 2 + (i & 1), col = groupID.
MMA_M16N8K8_B = [
    "T0:b0 T4:b0 T8:b0 T12:b0 T16:b0 T20:b0 T24:b0 T28:b0",
    "T0:b1 T4:b1 T8:b1 T12:b1 T16:b1 T20:b1 T24:b1 T28:b1",
    "T1:b0 T5:b0 T9:b0 T13:b0 T17:b0 T21:b0 T25:b0 T29:b0",
    "T1:b1 T5:b1 T9:b1 T13:b1 T17:b1 T21:b1 T25:b1 T29:b1",
    "T2:b0 T6:b0 T10:b0 T14:b0 T18:b0 T22:b0 T26:b0 T30:b0",
    "T2:b1 T6:b1 T10:b1 T14:b1 T18:b1 T22:b1 T26:b1 T30:b1",
    "T3:b0 T7:b0 T11:b0 T15:b0 T19:b0 T23:b0 T27:b0 T31:b0",
    "T3:b1 T7:b1 T11:b1 T15:b1 T19:b1 T23:b1 T27:b1 T31:b1",
]


def isa_cells(figure: list[str]) -> dict[tuple[int, int], str]:
    """The cells of a figure typed as lines of space-separated ``T<lane>:<register>`` labels."""
    return {
        (row, col): label
        for row, line in enumerate(figure)
        for col, label in enumerate(line.split(" "))
    }


def drawn_cells(name: str, letter: str, use_formula: bool) -> dict[tuple[int, int], str]:
    """The fragment drawn as the ISA draws it, from its `ptx` formula or its algebraic `layout`:
    each (row, col) it maps to, with the ``T<lane>:<letter><i>`` labels landing there."""
    frag = fragment(name)
    source = frag.ptx if use_formula else frag.layout
    cells: dict[tuple[int, int], list[str]] = {}
    for t in range(32):
        for i in range(source.local_size):
            row, col = (int(x) for x in source.map(t, i))
            cells.setdefault((row, col), []).append(f"T{t}:{letter}{i}")
    return {coord: "/".join(labels) for coord, labels in cells.items()}


@pytest.mark.parametrize("use_formula", [True, False], ids=["ptx", "layout"])
def test_mma_m16n8k8_b_matches_the_isa_figure(use_formula: bool) -> None:
    assert fragment("mma.m16n8k8.b").ptx.shape == (8, 8)
    assert drawn_cells("mma.m16n8k8.b", "b", use_formula) == isa_cells(MMA_M16N8K8_B)


def test_mma_m16n8k8_b_is_the_transposed_ldmatrix_x1() -> None:
    # ldmatrix.x1.trans hands each lane rows (laneid % 4) * 2 and + 1 of column laneid >> 2:
    # the B fragment's elements, which is how a K x N row-major B tile reaches the mma.
    b = fragment("mma.m16n8k8.b").ptx.table()
    trans = fragment("ldmatrix.x1.trans").ptx.table()
    assert b.tolist() == trans.tolist()

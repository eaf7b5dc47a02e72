"""Tests of the hardware fragment layouts: the PTX ISA's formulas proved equal to their algebra.

Each fragment's `FunctionLayout` (transcribed from the PTX ISA) is proved equivalent to its
product of primitives by Z3, compared with it by brute force and by recovering the register
layout from the formula's table, and pinned by literal registers of single threads (as the ISA's
figures draw them) and by CUTLASS's accumulator layout.
"""

from __future__ import annotations

import numpy as np
import pytest

from layout_algebra import (
    LayoutError,
    column_local,
    from_cute,
    layout_from_table,
    local,
    spatial,
    to_cute,
)
from layout_algebra.fragments import FRAGMENTS, Fragment, fragment, wgmma_fragment
from layout_algebra.function_layout import FunctionLayout
from proofs import check_bijective, check_equivalent

RLIMIT = 5_000_000
TIMEOUT = 60.0

ALL = list(FRAGMENTS.values())


@pytest.mark.parametrize("frag", ALL, ids=lambda f: f.name)
def test_ptx_formula_is_proved_equal_to_its_algebraic_form(frag: Fragment) -> None:
    result = check_equivalent(frag.ptx, frag.layout, timeout=TIMEOUT, rlimit=RLIMIT)
    assert result.holds is True, result.reason
    assert np.array_equal(frag.ptx.table(), frag.layout.table())


@pytest.mark.parametrize("frag", ALL, ids=lambda f: f.name)
def test_algebraic_form_is_recovered_from_the_formulas_table(frag: Fragment) -> None:
    assert layout_from_table(frag.ptx.table(), frag.ptx.shape) == frag.layout


@pytest.mark.parametrize("frag", ALL, ids=lambda f: f.name)
def test_every_element_is_held_once(frag: Fragment) -> None:
    assert check_bijective(frag.ptx, timeout=TIMEOUT, rlimit=RLIMIT).holds is True
    assert frag.ptx.num_threads == (128 if frag.name.startswith("wgmma") else 32)


@pytest.mark.parametrize(
    ("name", "shape", "local_size"),
    [
        ("mma.m16n8k16.a", (16, 16), 8),
        ("mma.m16n8k16.b", (16, 8), 4),
        ("mma.m16n8k16.c", (16, 8), 4),
        ("mma.m16n8k8.a", (16, 8), 4),
        ("mma.m16n8k8.b", (8, 8), 2),
        ("mma.m16n8k8.c", (16, 8), 4),
        ("ldmatrix.x1", (8, 8), 2),
        ("ldmatrix.x2.trans", (16, 8), 4),
        ("ldmatrix.x4", (32, 8), 8),
        ("stmatrix.x4.trans", (32, 8), 8),
        ("wgmma.m64nNk16.a", (64, 16), 8),
        ("wgmma.m64n8k16.d", (64, 8), 4),
        ("wgmma.m64n256k16.d", (64, 256), 128),
    ],
)
def test_sizes(name: str, shape: tuple[int, int], local_size: int) -> None:
    assert fragment(name).ptx.shape == fragment(name).layout.shape == shape
    assert fragment(name).ptx.local_size == local_size


@pytest.mark.parametrize(
    ("name", "thread", "registers"),
    [
        # a0..a7 of lane 6: groupID 1, threadID_in_group 2
        ("mma.m16n8k16.a", 6, [(1, 4), (1, 5), (9, 4), (9, 5), (1, 12), (1, 13), (9, 12), (9, 13)]),
        ("mma.m16n8k16.b", 5, [(2, 1), (3, 1), (10, 1), (11, 1)]),  # b0..b3 of lane 5
        ("mma.m16n8k16.c", 0, [(0, 0), (0, 1), (8, 0), (8, 1)]),  # c0..c3 of lane 0
        ("mma.m16n8k16.c", 31, [(7, 6), (7, 7), (15, 6), (15, 7)]),
        ("mma.m16n8k8.a", 9, [(2, 2), (2, 3), (10, 2), (10, 3)]),
        ("mma.m16n8k8.b", 7, [(6, 1), (7, 1)]),
        ("ldmatrix.x1", 5, [(1, 2), (1, 3)]),  # row laneid >> 2, columns 2 * (laneid % 4) + 0, 1
        ("ldmatrix.x1.trans", 5, [(2, 1), (3, 1)]),  # the same matrix read transposed
        ("ldmatrix.x4", 0, [(0, 0), (0, 1), (8, 0), (8, 1), (16, 0), (16, 1), (24, 0), (24, 1)]),
        ("ldmatrix.x2.trans", 31, [(6, 7), (7, 7), (14, 7), (15, 7)]),
        ("stmatrix.x1", 5, [(1, 2), (1, 3)]),
        ("stmatrix.x1.trans", 5, [(2, 1), (3, 1)]),
        # Thread 70 of the warpgroup: warp 2 (rows 32 ..), lane 6 (groupID 1, threadID 2).
        (
            "wgmma.m64nNk16.a",
            70,
            [(33, 4), (33, 5), (41, 4), (41, 5), (33, 12), (33, 13), (41, 12), (41, 13)],
        ),
        # Thread 33: warp 1 (rows 16 ..), lane 1 (groupID 0, threadID 1); d4..d7 columns 8 ...
        (
            "wgmma.m64n16k16.d",
            33,
            [(16, 2), (16, 3), (24, 2), (24, 3), (16, 10), (16, 11), (24, 10), (24, 11)],
        ),
    ],
)
def test_registers_of_one_thread(name: str, thread: int, registers: list[tuple[int, int]]) -> None:
    frag = fragment(name)
    assert [frag.ptx.map(thread, i) for i in range(frag.ptx.local_size)] == registers
    assert [frag.layout.map(thread, i) for i in range(frag.layout.local_size)] == registers


def test_accumulator_is_cutlass_sm80_16x8_row() -> None:
    assert fragment("mma.m16n8k16.c").layout == local(2, 1).spatial(8, 4).local(1, 2)
    assert to_cute(fragment("mma.m16n8k16.c").layout) == "((4,8),(2,2)):((32,1),(16,8))"


def test_mma_a_is_ldmatrix_x4_with_its_matrices_placed_in_column_major_blocks() -> None:
    # ldmatrix.x4 stacks matrices 0..3 along the rows; mma's A wants matrix j at block
    # (j % 2, j // 2) of the 16 x 16 tile: the same registers, the rows permuted.
    x4, a = fragment("ldmatrix.x4").ptx, fragment("mma.m16n8k16.a").ptx
    placed = FunctionLayout(
        (16, 16),
        32,
        8,
        lambda t, i: (x4.map(t, i)[0] % 8 + 8 * (i // 2 % 2), x4.map(t, i)[1] + 8 * (i // 4)),
    )
    assert check_equivalent(placed, a, timeout=TIMEOUT, rlimit=RLIMIT).holds is True
    assert fragment("mma.m16n8k16.a").layout == column_local(2, 2).spatial(8, 4).local(1, 2)


def test_a_mistranscribed_fragment_is_refuted() -> None:
    # B with b1 and b2 exchanged (the +8 taken from i & 1): a plausible misreading of the ISA.
    wrong = FunctionLayout((16, 8), 32, 4, lambda t, i: (t % 4 * 2 + i // 2 + 8 * (i % 2), t // 4))
    assert check_bijective(wrong, timeout=TIMEOUT, rlimit=RLIMIT).holds is True
    result = check_equivalent(
        wrong, fragment("mma.m16n8k16.b").layout, timeout=TIMEOUT, rlimit=RLIMIT
    )
    assert result.holds is False
    t, i = result.counterexample["t"], result.counterexample["i"]
    assert result.counterexample["a"] == wrong.map(t, i)
    assert result.counterexample["b"] == fragment("mma.m16n8k16.b").layout.map(t, i)
    assert result.counterexample["a"] != result.counterexample["b"]


def test_spatial_primitive_is_not_a_fragment() -> None:
    other = spatial(16, 2).local(1, 4)
    result = check_equivalent(other, fragment("mma.m16n8k16.c").ptx, timeout=TIMEOUT, rlimit=RLIMIT)
    assert result.holds is False


def test_unknown_fragment_names_raise() -> None:
    with pytest.raises(LayoutError, match=r"unknown fragment 'mma.m16n8k32.a'; expected one of"):
        fragment("mma.m16n8k32.a")


def test_every_wgmma_accumulator_width_equals_its_algebraic_form() -> None:
    """N from 8 to 256 in steps of 8, by brute force (FRAGMENTS holds four of them, proved)."""
    for n in range(8, 257, 8):
        frag = wgmma_fragment("d", n)
        assert np.array_equal(frag.ptx.table(), frag.layout.table()), n
        assert frag.layout == spatial(4, 1).local(1, n // 8) * fragment("mma.m16n8k16.c").layout


@pytest.mark.parametrize(
    ("kind", "n", "match"),
    [
        ("b", 8, "kind 'b'; expected 'a' or 'd'"),
        ("d", 4, "n=4; expected a multiple of 8 from 8 to 256"),
        ("d", 264, "n=264"),
        ("d", True, "n=True"),
    ],
)
def test_bad_wgmma_fragments_are_refused(kind: str, n: object, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        wgmma_fragment(kind, n)


@pytest.mark.parametrize("n", [8, 16, 64, 256])
def test_wgmma_fragments_are_cutlass_sm90_layouts(n: int) -> None:
    """CUTLASS's SM90 GMMA register layouts, as its CuTe source writes them (over the
    column-major index of the 64 x N tile): CLayout_64xN = ((4,8,4),(2,2,N/8)) :
    ((128,1,16),(64,8,512)), and ALayout_64x16 the same with N = 16."""
    expected = f"((4,8,4),(2,2,{n // 8})):((128,1,16),(64,8,512))"
    if n == 8:
        expected = "((4,8,4),(2,2)):((128,1,16),(64,8))"  # one column block: no third value mode
    assert to_cute(wgmma_fragment("d", n).layout) == expected
    assert from_cute("((4,8,4),(2,2,2)):((128,1,16),(64,8,512))", (64, 16)) == (
        wgmma_fragment("a").layout
    )

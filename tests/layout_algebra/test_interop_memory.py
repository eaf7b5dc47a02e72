"""CuTe memory layouts: `to_cute` / `from_cute_memory` for shared and global layouts, swizzled
ones included, and the line between them and thread-value layouts.

Exact tables of texts as CuTe prints them (``Sw<B,M,S> o _0 o (_8,_64):(_64,_1)``) against the
layouts written by hand; a property over random shared layouts (round trip, and every offset
against an evaluator of CuTe's rule written here); the same offsets against pycute (CUTLASS's
Python CuTe, `nvidia-cutlass`), which the CI installs; a proof that an imported swizzled layout
is the algebra's own; and the refusals.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layout_algebra import from_cute, from_cute_memory, to_cute, to_cute_memory
from layout_algebra.errors import LayoutError
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial
from layout_algebra.shared import (
    SharedLayout,
    Swizzle,
    shared_column_major,
    shared_row_major,
    shared_row_major_swizzle,
)

# ------------------------------------------------------------------------------ exact tables

MEMORY_CASES = [
    ("64:1", shared_row_major(64)),
    ("(8,64):(64,1)", shared_row_major(8, 64)),
    ("(8,64):(1,8)", shared_column_major(8, 64)),
    # The f16 128-byte swizzle atom (8 rows of 64 halves), the 64-byte one, and the 8-bit one.
    ("Sw<3,3,3> o 0 o (8,64):(64,1)", shared_row_major_swizzle(8, 64, element_bits=16)),
    ("Sw<2,3,3> o 0 o (8,32):(32,1)", shared_row_major_swizzle(8, 32, element_bits=16)),
    ("Sw<3,4,3> o 0 o (8,128):(128,1)", shared_row_major_swizzle(8, 128, element_bits=8)),
    # Rows in blocks of 8 with the blocks after the columns: a K-major tile of two atoms.
    ("((8,2),64):((64,1024),1)", SharedLayout((16, 64), (2, 8, 64), (1024, 64, 1))),
    ("(4,(2,8)):(2,(1,8))", SharedLayout((4, 16), (4, 8, 2), (2, 8, 1))),
]


@pytest.mark.parametrize(("text", "layout"), MEMORY_CASES, ids=[c[0] for c in MEMORY_CASES])
def test_to_cute_writes_memory_layouts_as_cute_prints_them(text: str, layout: SharedLayout) -> None:
    assert to_cute(layout) == text == to_cute_memory(layout)
    assert from_cute_memory(text, layout.shape) == layout


def test_cute_static_integers_and_the_offset_may_be_written() -> None:
    expected = shared_row_major_swizzle(8, 64, element_bits=16)
    for text in (
        "Sw<3,3,3> o _0 o (_8,_64):(_64,_1)",
        "Sw<3,3,3> o (8,64):(64,1)",
        " Sw< 3, 3, 3 > o 0 o ( 8 , 64 ) : ( 64 , 1 ) ",
    ):
        assert from_cute_memory(text, (8, 64)) == expected


def test_merged_modes_read_as_the_canonical_layout() -> None:
    # (8,2):(64,512) on 16 rows of 64 is plain row-major: the two digits read as one.
    assert from_cute_memory("((8,2),64):((64,512),1)", (16, 64)) == shared_row_major(16, 64)


def test_global_layouts_print_their_shape_and_strides() -> None:
    assert to_cute(GlobalLayout((4096, 8192), (8192, 1))) == "(4096,8192):(8192,1)"
    assert to_cute(GlobalLayout((12,), (3,))) == "12:3"


def test_a_thread_value_layout_of_the_tiles_extents_prints_its_thread_mode_as_a_tuple() -> None:
    # 4 threads of 8 values on a (4, 8) tile: as two bare modes it would read as memory.
    layout = spatial(4, 1).local(1, 8)
    text = to_cute(layout)
    assert text == "((4),8):((1),4)"
    assert from_cute(text, (4, 8)) == layout
    assert from_cute("(4,8):(1,4)", (4, 8), thread_value=True) == layout


# ------------------------------------------------------------------------------ properties


def cute_offsets(text_sizes: list[list[int]], text_strides: list[list[int]], swizzle, shape):
    """Every offset of a CuTe memory layout by CuTe's rule, written out here: each coordinate
    splits into its mode's sub-modes fastest first, the digits times the strides add up, and
    the swizzle (B, M, S) XORs bits [M + S, M + S + B) into bits [M, M + B)."""
    table = np.zeros(shape, dtype=np.int64)
    for coord in itertools.product(*(range(n) for n in shape)):
        offset = 0
        for value, sizes, strides in zip(coord, text_sizes, text_strides):
            for size, stride in zip(sizes, strides):
                offset += (value % size) * stride
                value //= size
        if swizzle is not None:
            bits, base, shift = swizzle
            offset ^= ((offset >> (base + shift)) & ((1 << bits) - 1)) << base
        table[coord] = offset
    return table


@st.composite
def shared_layouts(draw: st.DrawFn) -> tuple[SharedLayout, list[list[int]], list[list[int]]]:
    """A random shared layout (1 to 3 dimensions, each split into 1 to 3 sub-modes fastest
    first with strides from 0 to 40, maybe a swizzle), with its CuTe sub-mode lists."""
    rank = draw(st.integers(1, 3))
    sizes = [draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)) for _ in range(rank)]
    strides = [[draw(st.integers(0, 40)) for _ in dim] for dim in sizes]
    shape = tuple(math.prod(dim) for dim in sizes)
    swizzle = None
    if draw(st.booleans()):
        bits = draw(st.integers(1, 3))
        swizzle = Swizzle(bits, draw(st.integers(0, 3)), draw(st.integers(bits, 4)))
    mode_shape = [n for dim in sizes for n in reversed(dim)]
    mode_strides = [s for dim in strides for s in reversed(dim)]
    layout = SharedLayout(shape, tuple(mode_shape), tuple(mode_strides), swizzle)
    return layout, sizes, strides


@settings(max_examples=60, deadline=None)
@given(drawn=shared_layouts())
def test_round_trip_and_offsets_by_cutes_rule(drawn) -> None:
    layout, sizes, strides = drawn
    text = to_cute(layout)
    assert from_cute_memory(text, layout.shape) == layout
    swizzle = None if layout.swizzle is None else tuple(vars(layout.swizzle).values())
    np.testing.assert_array_equal(
        cute_offsets(sizes, strides, swizzle, layout.shape), layout.table()
    )


@settings(max_examples=60, deadline=None)
@given(drawn=shared_layouts())
def test_offsets_equal_pycute(drawn) -> None:
    pycute = pytest.importorskip("pycute")
    layout, _, _ = drawn
    text = to_cute(layout)
    core = text.split(" o ")[-1]
    shape_text, stride_text = core.split(":")
    cute = pycute.Layout(eval(shape_text), eval(stride_text))  # literal int tuples only
    if layout.swizzle is not None:
        s = layout.swizzle
        cute = pycute.ComposedLayout(pycute.Swizzle(s.bits, s.base, s.shift), 0, cute)
    for coord in itertools.product(*(range(n) for n in layout.shape)):
        argument = coord[0] if len(coord) == 1 else coord
        assert cute(argument) == layout.offset(coord), (text, coord)


def test_an_imported_swizzled_layout_is_proved_equal_to_the_algebras() -> None:
    from proofs import check_equivalent

    imported = from_cute_memory("Sw<3,3,3> o _0 o (_8,_64):(_64,_1)", (8, 64))
    assert check_equivalent(imported, shared_row_major_swizzle(8, 64, element_bits=16)).holds
    other = from_cute_memory("Sw<2,3,3> o _0 o (_8,_64):(_64,_1)", (8, 64))
    result = check_equivalent(other, shared_row_major_swizzle(8, 64, element_bits=16))
    assert not result.holds and result.counterexample is not None


# ------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("text", "shape", "match"),
    [
        ("((4,8),(2,2)):((32,1),(16,8))", (16, 8), "mode 0 holds 32 elements.*from_cute reads"),
        ("(8,64):(64,1)", (8, 64, 1), "2 top-level modes; the tile .* has 3 dimensions"),
        ("(8,64):(-64,1)", (8, 64), "non-negative strides"),
        ("Sw<3,3,3> o 16 o (8,64):(64,1)", (8, 64), "offset 16"),
        ("Sw<3,3,-3> o 0 o (8,64):(64,1)", (8, 64), "negative shifts are not supported"),
        ("Sw<3,3,2> o 0 o (8,64):(64,1)", (8, 64), "shift 2 is smaller than its bits 3"),
        ("Sw<3,3,3> o 0 o", (8, 64), "CuTe layout"),
        ("(8,64)", (8, 64), "exactly one ':'"),
        ("(8,64):(64,1)", (8, 0), r"shape\[1\] must be >= 1"),
    ],
)
def test_from_cute_memory_refuses(text: str, shape: tuple[int, ...], match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        from_cute_memory(text, shape)


def test_to_cute_refuses_what_it_cannot_write() -> None:
    from layout_algebra.symbolic import var

    with pytest.raises(LayoutError, match="symbolic extents or strides"):
        to_cute(GlobalLayout((var("n"), 4), (4, 1)))
    with pytest.raises(LayoutError, match="expects a SharedLayout or GlobalLayout"):
        to_cute_memory(spatial(4))
    with pytest.raises(LayoutError, match="thread_value=1; expected True or False"):
        from_cute("(4,8):(1,4)", (4, 8), thread_value=1)

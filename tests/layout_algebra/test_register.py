"""Tests of `RegisterLayout`: primitives, fields, `map`, `owners`, `table` and the canonical form.

Literal tables pin the meaning down (the primitives, the mma m16n8k16 fragments of the PTX ISA,
CUTLASS's SM80_16x8_Row accumulator, ldmatrix); properties check it over random layouts; the
canonical form is checked against `map` evaluated straight from the definition on raw fields.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from layout_algebra import (
    RegisterLayout,
    column_local,
    column_spatial,
    local,
    register_layout,
    replicate,
    spatial,
)
from layout_algebra import testing as strategies

# The mma.m16n8k16 fragments (f16 / bf16 inputs, f32 accumulator) as products of primitives.
MMA_A = column_local(2, 2).spatial(8, 4).local(1, 2)  # 16 x 16, a0..a7
MMA_B = local(2, 1).column_spatial(4, 8).local(2, 1)  # 16 x 8, b0..b3
MMA_C = local(2, 1).spatial(8, 4).local(1, 2)  # 16 x 8, c0..c3
LDMATRIX_X1 = spatial(8, 4).local(1, 2)  # one 8 x 8 matrix of 16-bit elements


def table_of(layout: RegisterLayout) -> list[list[tuple[int, ...]]]:
    """`layout`'s table as nested lists of coordinate tuples, for literal comparisons."""
    return [[tuple(int(c) for c in cell) for cell in row] for row in layout.table()]


# --------------------------------------------------------------------------------------------
# Primitives: literal tables
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        # one thread, row-major registers
        (local(2, 3), [[(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]]),
        # one thread, column-major registers
        (column_local(2, 3), [[(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]]),
        # one element per thread, row-major threads
        (spatial(2, 3), [[(0, 0)], [(0, 1)], [(0, 2)], [(1, 0)], [(1, 1)], [(1, 2)]]),
        # one element per thread, column-major threads
        (column_spatial(2, 3), [[(0, 0)], [(1, 0)], [(0, 1)], [(1, 1)], [(0, 2)], [(1, 2)]]),
        # three threads holding the same empty tile
        (replicate(3), [[()], [()], [()]]),
    ],
)
def test_primitive_tables(layout: RegisterLayout, expected: list) -> None:
    assert table_of(layout) == expected


def test_primitive_accepts_one_sequence() -> None:
    assert local((2, 3)) == local(2, 3)
    assert spatial([4]) == spatial(4)


@pytest.mark.parametrize(
    ("layout", "fields"),
    [
        # the worked example of the contract
        (spatial(2, 4) * local(2, 1), ((4, 4), (2, 2, 4), (0, 2), (1,))),
        # the mma accumulator: dim 0 = (2 local, 8 spatial), dim 1 = (4 spatial, 2 local)
        (MMA_C, ((16, 8), (2, 8, 4, 2), (1, 2), (0, 3))),
        # column_spatial lists dimension 1's mode first
        (column_spatial(2, 3), ((2, 3), (2, 3), (1, 0), ())),
        # size-1 extents have no modes
        (local(1, 4, 1), ((1, 4, 1), (4,), (), (0,))),
        # replication keeps its place among the spatial entries
        (replicate(2).spatial(4).replicate(3), ((4,), (4,), (-2, 0, -3), ())),
        # a rank-0 layout of one thread
        (replicate(1), ((), (), (), ())),
    ],
)
def test_fields(layout: RegisterLayout, fields: tuple) -> None:
    assert (layout.shape, layout.mode_shape, layout.spatial_modes, layout.local_modes) == fields


def test_sizes_of_the_mma_accumulator() -> None:
    assert MMA_C.rank == 2
    assert MMA_C.mode_dims == (0, 0, 1, 1)
    assert MMA_C.spatial_sizes == (8, 4)
    assert MMA_C.local_sizes == (2, 2)
    assert (MMA_C.num_threads, MMA_C.local_size, MMA_C.replication) == (32, 4, 1)
    assert MMA_C.num_elements == 128


def test_sizes_with_replication() -> None:
    layout = replicate(2).spatial(4).replicate(3).local(2)
    assert layout.spatial_sizes == (2, 4, 3)
    assert (layout.num_threads, layout.local_size, layout.replication) == (24, 2, 6)


# --------------------------------------------------------------------------------------------
# Hardware fragment layouts, straight from the PTX ISA and CUTLASS
# --------------------------------------------------------------------------------------------


def ptx_mma_a(t: int, i: int) -> tuple[int, int]:
    """PTX ISA, mma.m16n8k16 .f16 A fragment: a0..a7 of lane t."""
    group, thread_in_group = t // 4, t % 4
    row = group + 8 * ((i // 2) % 2)
    col = thread_in_group * 2 + i % 2 + 8 * (i // 4)
    return row, col


def ptx_mma_b(t: int, i: int) -> tuple[int, int]:
    """PTX ISA, mma.m16n8k16 .f16 B fragment: b0..b3 of lane t."""
    group, thread_in_group = t // 4, t % 4
    return thread_in_group * 2 + i % 2 + 8 * (i // 2), group


def ptx_mma_c(t: int, i: int) -> tuple[int, int]:
    """PTX ISA, mma.m16n8k16 .f32 C/D fragment: c0..c3 of lane t."""
    group, thread_in_group = t // 4, t % 4
    return group + 8 * (i // 2), thread_in_group * 2 + i % 2


@pytest.mark.parametrize(
    ("layout", "formula", "shape", "local_size"),
    [
        (MMA_A, ptx_mma_a, (16, 16), 8),
        (MMA_B, ptx_mma_b, (16, 8), 4),
        (MMA_C, ptx_mma_c, (16, 8), 4),
    ],
    ids=["A", "B", "C"],
)
def test_mma_m16n8k16_fragments_match_the_ptx_isa(
    layout: RegisterLayout, formula, shape: tuple[int, int], local_size: int
) -> None:
    assert layout.shape == shape
    assert (layout.num_threads, layout.local_size) == (32, local_size)
    for t in range(32):
        for i in range(local_size):
            assert layout.map(t, i) == formula(t, i)


@pytest.mark.parametrize(
    ("layout", "thread", "expected"),
    [
        (MMA_C, 0, [(0, 0), (0, 1), (8, 0), (8, 1)]),
        (MMA_C, 5, [(1, 2), (1, 3), (9, 2), (9, 3)]),
        (MMA_C, 31, [(7, 6), (7, 7), (15, 6), (15, 7)]),
        (MMA_A, 0, [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)]),
        (MMA_A, 6, [(1, 4), (1, 5), (9, 4), (9, 5), (1, 12), (1, 13), (9, 12), (9, 13)]),
        (MMA_B, 0, [(0, 0), (1, 0), (8, 0), (9, 0)]),
        (MMA_B, 5, [(2, 1), (3, 1), (10, 1), (11, 1)]),
        (LDMATRIX_X1, 5, [(1, 2), (1, 3)]),
    ],
)
def test_fragment_registers_of_one_thread(
    layout: RegisterLayout, thread: int, expected: list[tuple[int, int]]
) -> None:
    assert table_of(layout)[thread] == expected


def cute_tv_coordinate(t: int, i: int) -> tuple[int, int]:
    """CUTLASS's SM80_16x8_Row, the layout ((4,8),(2,2)):((32,1),(16,8)) of a 16 x 8 tile.

    Sub-modes are listed fastest first; the codomain is the column-major index m + 16 * n.
    """
    thread_digits = (t % 4, t // 4)
    value_digits = (i % 2, i // 2)
    index = sum(d * s for d, s in zip(thread_digits, (32, 1)))
    index += sum(d * s for d, s in zip(value_digits, (16, 8)))
    return index % 16, index // 16


def test_mma_accumulator_matches_cutlass_sm80_16x8_row() -> None:
    # Explicit coordinates of a few threads, read off the CuTe layout by hand.
    assert [cute_tv_coordinate(0, i) for i in range(4)] == [(0, 0), (0, 1), (8, 0), (8, 1)]
    assert [cute_tv_coordinate(7, i) for i in range(4)] == [(1, 6), (1, 7), (9, 6), (9, 7)]
    assert [cute_tv_coordinate(30, i) for i in range(4)] == [(7, 4), (7, 5), (15, 4), (15, 5)]
    for t in range(32):
        for i in range(4):
            assert MMA_C.map(t, i) == cute_tv_coordinate(t, i)


def test_ldmatrix_x4_is_four_x1_matrices_in_column_major_order() -> None:
    # ldmatrix.x4: register j of a thread holds its element of matrix j; for the A operand the
    # four 8x8 matrices tile 16x16 column-major (rows 0-7 then 8-15 of columns 0-7, then 8-15).
    x4 = column_local(2, 2) * LDMATRIX_X1
    for t in range(32):
        for j in range(4):
            for half in range(2):
                row, col = LDMATRIX_X1.map(t, half)
                expected = (row + 8 * (j % 2), col + 8 * (j // 2))
                assert x4.map(t, 2 * j + half) == expected
    assert x4 == MMA_A


# --------------------------------------------------------------------------------------------
# map, owners, table
# --------------------------------------------------------------------------------------------


def test_map_is_vectorised() -> None:
    t = np.arange(32)[:, None]
    i = np.arange(4)[None, :]
    rows, cols = MMA_C.map(t, i)
    assert rows.shape == cols.shape == (32, 4)
    assert rows[5].tolist() == [1, 1, 9, 9]
    assert cols[5].tolist() == [2, 3, 2, 3]


def test_owners_of_a_replicated_element() -> None:
    layout = replicate(2).spatial(4).replicate(3)
    assert layout.owners((1,)) == [(3, 0), (4, 0), (5, 0), (15, 0), (16, 0), (17, 0)]


def test_owners_of_the_mma_accumulator() -> None:
    assert MMA_C.owners((9, 3)) == [(5, 3)]


def test_layouts_are_hashable_values() -> None:
    assert {spatial(2, 4) * local(2, 1), spatial(2, 4).local(2, 1)} == {spatial(2, 4).local(2, 1)}
    assert local(4) == local(2) * local(2)
    assert hash(local(4)) == hash(local(2) * local(2))
    assert spatial(2) * local(2) != local(2) * spatial(2)


# --------------------------------------------------------------------------------------------
# Properties over random layouts
# --------------------------------------------------------------------------------------------

layouts = st.one_of(strategies.register_layouts(), strategies.arbitrary_register_layouts())


@given(layouts)
def test_every_pair_maps_inside_the_shape(layout: RegisterLayout) -> None:
    table = layout.table()
    assert table.shape == (layout.num_threads, layout.local_size, layout.rank)
    assert (table >= 0).all()
    assert (table < np.array(layout.shape, dtype=np.int64)).all()


@given(layouts)
def test_every_element_has_replication_many_owners(layout: RegisterLayout) -> None:
    for coord in np.ndindex(*layout.shape):
        owners = layout.owners(coord)
        assert len(owners) == layout.replication
        for t, i in owners:
            assert layout.map(t, i) == coord


@given(layouts.filter(lambda layout: layout.replication == 1))
def test_non_replicated_layouts_are_bijective(layout: RegisterLayout) -> None:
    assert layout.num_threads * layout.local_size == layout.num_elements
    flat = {tuple(cell) for row in layout.table() for cell in row}
    assert len(flat) == layout.num_elements


@given(layouts)
def test_vectorised_map_matches_scalar_map(layout: RegisterLayout) -> None:
    table = layout.table()
    for t in range(layout.num_threads):
        for i in range(layout.local_size):
            assert layout.map(t, i) == tuple(int(c) for c in table[t, i])


@given(strategies.layout_fields())
def test_canonical_form_keeps_the_table(fields: strategies.Fields) -> None:
    layout = register_layout(*fields)
    threads, size = strategies.reference_sizes(fields)
    assert (layout.num_threads, layout.local_size) == (threads, size)
    for t in range(threads):
        for i in range(size):
            assert layout.map(t, i) == strategies.reference_map(fields, t, i)


@given(strategies.layout_fields())
def test_canonical_form_is_a_fixed_point(fields: strategies.Fields) -> None:
    layout = register_layout(*fields)
    again = register_layout(
        layout.shape, layout.mode_shape, layout.spatial_modes, layout.local_modes
    )
    assert again.mode_shape == layout.mode_shape
    assert again.spatial_modes == layout.spatial_modes
    assert again.local_modes == layout.local_modes
    assert 1 not in layout.mode_shape


@st.composite
def layout_pairs(draw: st.DrawFn) -> tuple[strategies.Fields, strategies.Fields]:
    """Two field tuples that usually denote the same function (one refines the other), and
    sometimes two unrelated layouts or two orderings of the same modes."""
    fields = draw(strategies.layout_fields())
    shape, mode_shape, spatial_modes, local_modes = fields
    reordered = (shape, mode_shape, tuple(reversed(spatial_modes)), local_modes)
    other = draw(
        st.one_of(
            strategies.refinements(fields),
            strategies.refinements(reordered),
            strategies.layout_fields(),
        )
    )
    return fields, other


@given(layout_pairs())
def test_equal_exactly_when_the_tables_agree(pair: tuple) -> None:
    a, b = (register_layout(*fields) for fields in pair)
    table_a, table_b = a.table(), b.table()
    same_function = (
        a.shape == b.shape and table_a.shape == table_b.shape and (table_a == table_b).all()
    )
    assert (a == b) == same_function
    if a == b:
        assert hash(a) == hash(b)

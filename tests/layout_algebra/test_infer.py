"""Tests of `layout_from_table`: recovering a register layout from its table of coordinates."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layout_algebra import (
    LayoutError,
    RegisterLayout,
    column_local,
    layout_from_table,
    local,
    register_layout,
    replicate,
    spatial,
)
from layout_algebra import testing as strategies


@st.composite
def register_layouts(draw: st.DrawFn) -> RegisterLayout:
    """Any register layout of rank 0-3 with at most 6 modes of size 2-4 and some replication."""
    rank = draw(st.integers(0, 3))
    mode_shape: list[int] = []
    shape = []
    for _ in range(rank):
        modes = draw(st.lists(st.integers(2, 4), max_size=2))
        mode_shape += modes
        shape.append(math.prod(modes))
    order = draw(st.permutations(range(len(mode_shape))))
    cut = draw(st.integers(0, len(order)))
    spatial_modes = list(order[:cut])
    for _ in range(draw(st.integers(0, 2))):
        spatial_modes.insert(draw(st.integers(0, len(spatial_modes))), -draw(st.integers(2, 3)))
    return register_layout(shape, mode_shape, spatial_modes, order[cut:])


# --------------------------------------------------------------------------------------------
# Literal tables
# --------------------------------------------------------------------------------------------


def test_layout_from_table_worked_example() -> None:
    # spatial(2,4) * local(2,1): map(t, i) = (2*(t//4) + i, t % 4), written out by hand.
    table = [[(2 * (t // 4) + i, t % 4) for i in range(2)] for t in range(8)]
    assert layout_from_table(table, (4, 4)) == spatial(2, 4) * local(2, 1)


def test_layout_from_table_replication() -> None:
    # Threads 2k and 2k+1 hold element k: replication is the least significant thread digit.
    table = [[(t // 2,)] for t in range(8)]
    assert layout_from_table(table, (4,)) == spatial(4).replicate(2)


def test_layout_from_table_column_major_registers() -> None:
    # One thread, registers walking dimension 0 fastest.
    table = [[(i % 3, i // 3) for i in range(6)]]
    assert layout_from_table(table, (3, 2)) == column_local(3, 2)


def test_layout_from_table_rank0() -> None:
    table = np.zeros((4, 1, 0), dtype=np.int64)
    assert layout_from_table(table, ()) == replicate(4)


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "shape", "match"),
    [
        # origin not held by (0, 0)
        ([[(1,)], [(0,)]], (2,), r"table\[0, 0\] = \(1,\)"),
        # a register holds the same element twice
        ([[(0,), (0,)], [(1,), (1,)]], (2,), "register digit 0 .* step zero"),
        # a diagonal step
        ([[(0, 0)], [(1, 1)]], (2, 2), r"step \(1, 1\)"),
        # a gap: strides 1 and 4 in an extent of 8 elements
        ([[(t % 2 + 4 * (t // 2),)] for t in range(4)], (8,), "stride 4 .* needs 2"),
        # a partial cover
        ([[(0,)], [(1,)]], (4,), "cover 2 of its 4 elements"),
        # a digit run that does not divide the thread count
        ([[(t if t < 2 else 0,)] for t in range(3)], (2,), "does not divide"),
        # digits 1 (thread) and 2 (register), but thread 1's register 1 holds 1, not 3
        ([[(0,), (2,)], [(1,), (1,)]], (4,), r"not f\(t, 0\) \+ f\(0, i\)"),
        # outside the tile
        ([[(0,)], [(5,)]], (4,), "outside the tile"),
        # wrong rank of coordinates
        ([[(0, 0)]], (4,), r"shape \[num_threads, local_size, 1\]"),
        # not integers
        ([[(0.5,)]], (4,), "must hold integers"),
        # bad shape
        ([[(0,)]], (0,), r"shape\[0\] must be >= 1"),
    ],
)
def test_layout_from_table_rejects(table: object, shape: tuple[int, ...], match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        layout_from_table(table, shape)


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------


@given(register_layouts())
def test_layout_from_table_inverts_table(layout: RegisterLayout) -> None:
    assert layout_from_table(layout.table(), layout.shape) == layout


def reference_table(fields: strategies.Fields) -> np.ndarray:
    """[num_threads, local_size, rank] from the definition (`testing.reference_map`)."""
    threads, size = strategies.reference_sizes(fields)
    table = [[strategies.reference_map(fields, t, i) for i in range(size)] for t in range(threads)]
    return np.array(table, dtype=np.int64).reshape(threads, size, len(fields[0]))


@settings(max_examples=40)
@given(strategies.layout_fields(), st.data(), st.randoms(use_true_random=False))
def test_layout_from_table_finds_reordered_digits_and_is_sound_on_shuffles(
    fields: strategies.Fields, data: st.DataObject, rng
) -> None:
    # Admissible by construction: the same modes with the spatial and the local list each in
    # another order is the table of a register layout, so layout_from_table must find it.
    shape, mode_shape, spatial_modes, local_modes = fields
    reordered = (
        shape,
        mode_shape,
        tuple(data.draw(st.permutations(spatial_modes))),
        tuple(data.draw(st.permutations(local_modes))),
    )
    table = reference_table(reordered)
    found = layout_from_table(table, shape)
    np.testing.assert_array_equal(found.table(), table)
    assert found == register_layout(*reordered)
    # Shuffling the (t, i) entries usually leaves the register layouts; whatever is returned
    # must still have exactly the shuffled table.
    flat = table.reshape(-1, len(shape))
    order = list(range(len(flat)))
    rng.shuffle(order)
    shuffled = flat[order].reshape(table.shape)
    try:
        found = layout_from_table(shuffled, shape)
    except LayoutError:
        return
    np.testing.assert_array_equal(found.table(), shuffled)


# --------------------------------------------------------------------------------------------
# Differential: against the brute-force set of all register layouts of tiny tiles
# --------------------------------------------------------------------------------------------


def _ordered_factorizations(n: int) -> list[tuple[int, ...]]:
    """Every way to write n as an ordered product of factors >= 2."""
    if n == 1:
        return [()]
    return [
        (f,) + rest
        for f in range(2, n + 1)
        if n % f == 0
        for rest in _ordered_factorizations(n // f)
    ]


def _all_layouts(shape: tuple[int, ...], num_threads: int, local_size: int) -> set[RegisterLayout]:
    """Every register layout of `shape` with that thread count and local size, by enumeration."""
    found = set()
    for splits in itertools.product(*(_ordered_factorizations(e) for e in shape)):
        mode_shape = [m for split in splits for m in split]
        modes = range(len(mode_shape))
        for mask in itertools.product((False, True), repeat=len(mode_shape)):
            spatial_set = [m for m in modes if mask[m]]
            local_set = [m for m in modes if not mask[m]]
            if math.prod(mode_shape[m] for m in local_set) != local_size:
                continue
            covered = math.prod(mode_shape[m] for m in spatial_set)
            if num_threads % covered:
                continue
            for replication in _ordered_factorizations(num_threads // covered):
                for spatial_order in itertools.permutations(
                    spatial_set + [-r for r in replication]
                ):
                    for local_order in itertools.permutations(local_set):
                        found.add(register_layout(shape, mode_shape, spatial_order, local_order))
    return found


@pytest.mark.parametrize(
    ("shape", "num_threads", "local_size"),
    [
        ((4,), 1, 4),
        ((4,), 2, 2),
        ((4,), 4, 1),
        ((2, 2), 2, 2),
        ((2, 2), 4, 1),
        ((2,), 4, 1),
        ((2,), 2, 2),
        ((3,), 3, 1),
        ((3,), 1, 3),
    ],
)
def test_layout_from_table_matches_brute_force(
    shape: tuple[int, ...], num_threads: int, local_size: int
) -> None:
    layouts = {
        layout.table().tobytes(): layout for layout in _all_layouts(shape, num_threads, local_size)
    }
    elements = list(np.ndindex(*shape))
    size = num_threads * local_size
    accepted = 0
    for images in itertools.product(range(len(elements)), repeat=size):
        table = np.array([elements[k] for k in images], dtype=np.int64).reshape(
            num_threads, local_size, len(shape)
        )
        expected = layouts.get(table.tobytes())
        if expected is None:
            with pytest.raises(LayoutError, match="."):
                layout_from_table(table, shape)
        else:
            assert layout_from_table(table, shape) == expected
            accepted += 1
    assert accepted == len(layouts) > 0

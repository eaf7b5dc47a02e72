"""Tests of `FunctionLayout`: a layout given by a formula that runs on ints, arrays and Exprs.

Literal tables pin the meaning of `map`, `table` and `owners`; a property checks that a formula
gives the same table on ints, on arrays and through `Expr`s; a differential check compares
FunctionLayouts written from a register layout's definition with the `RegisterLayout` itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given

from layout_algebra import LayoutError, RegisterLayout, evaluate, local, select, spatial, var
from layout_algebra import testing as strategies
from layout_algebra.function_layout import FunctionLayout


def accumulator(t: Any, i: Any) -> tuple[Any, Any]:
    """The mma m16n8 accumulator as the PTX ISA writes it."""
    return t // 4 + 8 * (i // 2), t % 4 * 2 + i % 2


MMA_C = FunctionLayout((16, 8), 32, 4, accumulator)


# --------------------------------------------------------------------------------------------
# Construction
# --------------------------------------------------------------------------------------------


def test_fields_and_sizes() -> None:
    assert MMA_C.shape == (16, 8)
    assert (MMA_C.num_threads, MMA_C.local_size, MMA_C.rank, MMA_C.num_elements) == (
        32,
        4,
        2,
        128,
    )
    assert MMA_C.name == "accumulator"
    assert repr(MMA_C) == (
        "FunctionLayout(shape=(16, 8), num_threads=32, local_size=4, fn=accumulator)"
    )


def test_name_overrides_the_formula_name() -> None:
    layout = FunctionLayout((4,), 4, 1, lambda t, i: (t,), name="identity")
    assert repr(layout) == "FunctionLayout(shape=(4,), num_threads=4, local_size=1, fn=identity)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (((0, 4), 4, 1, accumulator), r"shape\[0\] must be >= 1, got 0"),
        (((4.0,), 4, 1, accumulator), r"shape\[0\] must be an integer, got 4.0"),
        (("ab", 4, 1, accumulator), r"shape must be a tuple of integers, got 'ab'"),
        (((4,), 0, 1, accumulator), r"num_threads must be >= 1, got 0"),
        (((4,), 4, True, accumulator), r"local_size must be an integer, got True"),
        (((4,), 4, 1, "t + i"), r"fn must be a callable fn\(t, i\) -> coordinates, got 't \+ i'"),
    ],
)
def test_construction_rejects_bad_arguments(args: tuple, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        FunctionLayout(*args)


def test_layouts_are_immutable() -> None:
    with pytest.raises(AttributeError, match="FunctionLayout is immutable: cannot set 'shape'"):
        MMA_C.shape = (8, 16)


def test_equality_is_identity() -> None:
    twin = FunctionLayout((16, 8), 32, 4, accumulator)
    assert MMA_C == MMA_C
    assert MMA_C != twin
    assert len({MMA_C, twin}) == 2


# --------------------------------------------------------------------------------------------
# map, table, owners: literal values
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("t", "i", "expected"),
    [
        (0, 0, (0, 0)),  # c0 of lane 0
        (0, 3, (8, 1)),  # c3 of lane 0: row groupID + 8, col 1
        (5, 2, (9, 2)),  # lane 5: groupID 1, threadID_in_group 1
        (31, 1, (7, 7)),
    ],
)
def test_map_on_ints(t: int, i: int, expected: tuple[int, int]) -> None:
    assert MMA_C.map(t, i) == expected
    assert all(type(c) is int for c in MMA_C.map(np.int64(t), np.int32(i)))


def test_constant_exprs_count_as_ints() -> None:
    halves = FunctionLayout((2,), 4, 1, lambda t, i: (select(t < 2, 0, 1),))
    assert [halves.map(t, 0) for t in range(4)] == [(0,), (0,), (1,), (1,)]


def test_map_on_arrays_broadcasts() -> None:
    rows, cols = MMA_C.map(np.array([[0], [5]]), np.arange(4))
    assert rows.tolist() == [[0, 0, 8, 8], [1, 1, 9, 9]]
    assert cols.tolist() == [[0, 1, 0, 1], [2, 3, 2, 3]]
    assert rows.dtype == np.int64


def test_map_on_arrays_broadcasts_constant_coordinates() -> None:
    layout = FunctionLayout((1, 4), 4, 1, lambda t, i: (0, t))
    rows, cols = layout.map(np.arange(4), np.zeros(4, dtype=np.int32))
    assert rows.tolist() == [0, 0, 0, 0]
    assert cols.tolist() == [0, 1, 2, 3]


def test_map_on_exprs_returns_the_formula() -> None:
    t, i = var("t", 0, 31), var("i", 0, 3)
    row, col = MMA_C.map(t, i)
    assert repr(row) == "t // 4 + 8 * (i // 2)"
    assert evaluate(col, {"t": 13, "i": 3}) == 3


@pytest.mark.parametrize(
    ("t", "i", "message"),
    [
        (32, 0, r"thread 32 is out of range \[0, 32\)"),
        (-1, 0, r"thread -1 is out of range \[0, 32\)"),
        (0, 4, r"local index 4 is out of range \[0, 4\)"),
        (np.arange(33), 0, r"threads out of range \[0, 32\): min 0, max 32"),
        (0, np.array([-1, 0]), r"local indices out of range \[0, 4\): min -1, max 0"),
        (np.array([0.5]), 0, r"map expects integer threads and local indices"),
    ],
)
def test_map_rejects_out_of_range_indices(t: object, i: object, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        MMA_C.map(t, i)


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (lambda t, i: t, r"must return a sequence of 1 coordinates, got 0"),
        (lambda t, i: (t, i), r"returned 2 coordinates, expected 1 \(shape \(4,\)\)"),
        (lambda t, i: (t / 2,), r"gave coordinate 0 = 0.0, expected an int"),
    ],
)
def test_map_rejects_malformed_formulas(fn: object, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        FunctionLayout((4,), 4, 1, fn).map(0, 0)


def test_map_rejects_float_coordinates_on_arrays() -> None:
    layout = FunctionLayout((4,), 4, 1, lambda t, i: (t / 2,), name="half")
    with pytest.raises(LayoutError, match=r"half\(t, i\) gave coordinate 0 of dtype float64"):
        layout.table()


def test_formulas_may_update_their_arguments_in_place() -> None:
    def halve(t: Any, i: Any) -> tuple[Any]:
        t //= 2  # on a broadcast view this would halve shared memory once per register
        return (t,)

    layout = FunctionLayout((4,), 8, 2, halve)
    assert layout.table()[..., 0].tolist() == [[t // 2, t // 2] for t in range(8)]


def test_table_of_a_small_layout() -> None:
    layout = FunctionLayout((2, 3), 3, 2, lambda t, i: (i, t))
    assert layout.table().tolist() == [
        [[0, 0], [1, 0]],
        [[0, 1], [1, 1]],
        [[0, 2], [1, 2]],
    ]


def test_table_rejects_images_outside_the_shape() -> None:
    shifted = FunctionLayout((4,), 4, 2, lambda t, i: (t + i,), name="shifted")
    with pytest.raises(
        LayoutError,
        match=r"fn=shifted\) maps thread 3, register 1 to \(4,\), outside shape \(4,\)",
    ):
        shifted.table()


def test_table_of_rank_zero() -> None:
    layout = FunctionLayout((), 4, 1, lambda t, i: ())
    assert layout.table().shape == (4, 1, 0)


@pytest.mark.parametrize(
    ("coord", "expected"),
    [
        ((0, 0), [(0, 0)]),
        ((9, 3), [(5, 3)]),
        ((15, 6), [(31, 2)]),
    ],
)
def test_owners(coord: tuple[int, int], expected: list[tuple[int, int]]) -> None:
    assert MMA_C.owners(coord) == expected


def test_owners_of_a_replicated_and_of_an_unheld_element() -> None:
    halves = FunctionLayout((4,), 4, 1, lambda t, i: (t // 2,))
    assert halves.owners((1,)) == [(2, 0), (3, 0)]
    assert halves.owners((3,)) == []


@pytest.mark.parametrize(
    ("coord", "message"),
    [
        ((16, 0), r"coord \(16, 0\) is outside shape \(16, 8\) in dim 0"),
        ((0,), r"coord \(0,\) must be 2 integers"),
        ("ab", r"coord must be a tuple of 2 integers, got 'ab'"),
    ],
)
def test_owners_rejects_bad_coordinates(coord: object, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        MMA_C.owners(coord)


# --------------------------------------------------------------------------------------------
# Properties and differential checks
# --------------------------------------------------------------------------------------------


def definition_formula(fields: tuple) -> Callable[[Any, Any], tuple[Any, ...]]:
    """The map of raw register-layout fields, as `RegisterLayout` defines it, as a formula on t
    and i: digits of t and i in mixed radix, each the value of its mode, coordinates row-major."""
    shape, mode_shape, spatial_modes, local_modes = fields

    def fn(t: Any, i: Any) -> tuple[Any, ...]:
        digits = [0] * len(mode_shape)
        for index, entries in ((t, spatial_modes), (i, local_modes)):
            divisor = 1
            for entry in reversed(entries):
                size = -entry if entry < 0 else mode_shape[entry]
                if entry >= 0:
                    digits[entry] = index // divisor % size
                divisor *= size
        coords = []
        position = 0
        for extent in shape:
            coord, covered = 0, 1
            while covered < extent:
                coord = coord * mode_shape[position] + digits[position]
                covered *= mode_shape[position]
                position += 1
            coords.append(coord)
        return tuple(coords)

    return fn


@given(strategies.layout_fields())
def test_formula_gives_one_table_on_ints_arrays_and_exprs(fields: tuple) -> None:
    threads, registers = strategies.reference_sizes(fields)
    layout = FunctionLayout(fields[0], threads, registers, definition_formula(fields))
    table = layout.table()
    t, i = var("t", 0, threads - 1), var("i", 0, registers - 1)
    symbolic = layout.map(t, i)
    for thread in range(threads):
        for register in range(registers):
            expected = strategies.reference_map(fields, thread, register)
            assert layout.map(thread, register) == expected
            assert tuple(table[thread, register]) == expected
            env = {"t": thread, "i": register}
            assert tuple(evaluate(c, env) for c in symbolic) == expected


@given(strategies.register_layouts())
def test_function_layout_of_a_register_layout_has_its_table_and_owners(
    layout: RegisterLayout,
) -> None:
    wrapped = FunctionLayout(layout.shape, layout.num_threads, layout.local_size, layout.map)
    assert np.array_equal(wrapped.table(), layout.table())
    for coord in np.ndindex(*layout.shape):
        assert wrapped.owners(coord) == layout.owners(coord)
    assert wrapped.num_elements == math.prod(layout.shape)


def test_register_layout_product_against_its_closed_form() -> None:
    a, b = spatial(2, 4), local(2, 1)
    closed_form = FunctionLayout(
        (4, 4),
        8,
        2,
        lambda t, i: tuple(
            x * extent + y
            for x, y, extent in zip(
                a.map(t // b.num_threads, i // b.local_size),
                b.map(t % b.num_threads, i % b.local_size),
                b.shape,
            )
        ),
    )
    assert np.array_equal(closed_form.table(), (a * b).table())


def test_a_layout_of_a_module_level_formula_pickles() -> None:
    import pickle

    layout = FunctionLayout((16, 8), 32, 4, accumulator, name="acc")
    copy = pickle.loads(pickle.dumps(layout))
    assert (copy.shape, copy.num_threads, copy.local_size, copy.name) == ((16, 8), 32, 4, "acc")
    np.testing.assert_array_equal(copy.table(), layout.table())

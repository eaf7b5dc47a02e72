"""Tests of the text forms of register layouts: `repr` (a rebuilding expression) and the grid."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import layout_algebra
from layout_algebra import (
    RegisterLayout,
    column_local,
    column_spatial,
    local,
    parse_layout,
    reduce,
    register_layout,
    replicate,
    spatial,
)
from layout_algebra import testing as strategies

PUBLIC_NAMES = {name: getattr(layout_algebra, name) for name in layout_algebra.__all__}
layouts = st.one_of(strategies.register_layouts(), strategies.arbitrary_register_layouts())


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        (spatial(2, 4) * local(2, 1), "spatial(2,4).local(2,1)"),
        (local(2, 1) * spatial(8, 4) * local(1, 2), "local(2,1).spatial(8,4).local(1,2)"),
        (
            column_local(2, 2) * spatial(8, 4) * local(1, 2),
            "column_local(2,2).spatial(8,4).local(1,2)",
        ),
        (reduce(spatial(3, 4), [0]), "replicate(3).spatial(4)"),
        (spatial(4) * replicate(2), "spatial(4).replicate(2)"),
        (local(3) * local(2), "local(6)"),
        (column_spatial(2, 3), "column_spatial(2,3)"),
        (replicate(4), "replicate(4)"),
        # a bit reversal of 4 threads is no product of primitives
        (
            register_layout((4,), (2, 2), (1, 0), ()),
            "register_layout(shape=(4,), mode_shape=(2, 2), spatial_modes=(1, 0), local_modes=())",
        ),
    ],
)
def test_repr_table(layout: RegisterLayout, expected: str) -> None:
    assert repr(layout) == expected


def test_str_is_the_grid_of_the_worked_example() -> None:
    assert str(spatial(2, 4).local(2, 1)) == (
        "0:0 1:0 2:0 3:0\n0:1 1:1 2:1 3:1\n4:0 5:0 6:0 7:0\n4:1 5:1 6:1 7:1"
    )


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        # rank 1: one row
        (spatial(2).local(2), "0:0 0:1 1:0 1:1"),
        # replicated cells list every owner
        (spatial(2).replicate(2), "0:0|1:0 2:0|3:0"),
        # rank 0: one cell per thread, no register
        (replicate(2), "[0:- | 1:-]"),
        # rank 3: one grid per leading index
        (local(2, 1, 2), "[0, :, :]\n0:0 0:1\n\n[1, :, :]\n0:2 0:3"),
        # columns are right-aligned to the widest cell
        (spatial(1, 11), " 0:0  1:0  2:0  3:0  4:0  5:0  6:0  7:0  8:0  9:0 10:0"),
    ],
)
def test_grid_table(layout: RegisterLayout, expected: str) -> None:
    assert str(layout) == expected


def test_show_prints_the_grid(capsys: pytest.CaptureFixture[str]) -> None:
    spatial(2).local(2).show()
    assert capsys.readouterr().out == "0:0 0:1 1:0 1:1\n"


@given(layouts)
def test_repr_round_trips_through_eval_with_the_public_names(layout: RegisterLayout) -> None:
    assert eval(repr(layout), dict(PUBLIC_NAMES)) == layout


@given(layouts)
def test_repr_round_trips_through_the_expression_parser(layout: RegisterLayout) -> None:
    assert parse_layout(repr(layout)) == layout


@given(strategies.register_layouts())
def test_repr_of_a_product_of_primitives_is_a_chain(layout: RegisterLayout) -> None:
    assert not repr(layout).startswith("register_layout(")

"""Tests of the Kronecker product `A * B` (`product`) and its fluent forms."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from layout_algebra import (
    RegisterLayout,
    column_local,
    local,
    product,
    register_layout,
    replicate,
    spatial,
)
from layout_algebra import testing as strategies


def test_product_worked_example() -> None:
    # spatial(2,4) * local(2,1): shape (4,4), (t, i) -> (2 * (t // 4) + i, t % 4).
    layout = spatial(2, 4) * local(2, 1)
    assert layout.shape == (4, 4)
    assert (layout.num_threads, layout.local_size) == (8, 2)
    for t in range(8):
        for i in range(2):
            assert layout.map(t, i) == (2 * (t // 4) + i, t % 4)


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        # the mma accumulator built by the operator and by the fluent chain
        (local(2, 1) * spatial(8, 4) * local(1, 2), local(2, 1).spatial(8, 4).local(1, 2)),
        # a rank-1 left factor is padded with a leading 1: local(2) acts on dimension 1
        (
            local(2) * spatial(2, 2),
            register_layout((2, 4), (2, 2, 2), (0, 2), (1,)),
        ),
        # modes adjacent in a dimension and in one list merge: local(2) * local(3) == local(6)
        (local(2) * local(3), local(6)),
        # a trailing replicate makes neighbouring threads hold the same element
        (spatial(4) * replicate(2), register_layout((4,), (4,), (0, -2), ())),
        # a leading replicate repeats the whole tile on the upper half of the threads
        (replicate(2) * spatial(4), register_layout((4,), (4,), (-2, 0), ())),
        # two replications merge
        (replicate(2) * replicate(3), replicate(6)),
        # column_local(2,2) lists dimension 1's mode before dimension 0's
        (local(1, 2) * local(2, 1), column_local(2, 2)),
    ],
)
def test_product_table(layout: RegisterLayout, expected: RegisterLayout) -> None:
    assert layout == expected


def test_product_owners_of_replicated_layouts() -> None:
    assert (spatial(4) * replicate(2)).owners((1,)) == [(2, 0), (3, 0)]
    assert (replicate(2) * spatial(4)).owners((1,)) == [(1, 0), (5, 0)]


def test_product_is_not_commutative() -> None:
    assert spatial(2) * local(2) != local(2) * spatial(2)
    assert (spatial(2) * local(2)).map(1, 0) == (2,)
    assert (local(2) * spatial(2)).map(1, 0) == (1,)


def test_fluent_forms_are_products() -> None:
    base = spatial(2, 2)
    assert base.local(1, 2) == product(base, local(1, 2))
    assert base.spatial(2, 1) == base * spatial(2, 1)
    assert base.column_local(2, 2) == base * column_local(2, 2)
    assert base.replicate(3) == base * replicate(3)


@given(strategies.register_layouts(), strategies.register_layouts())
def test_closed_form_of_the_product_against_map(a: RegisterLayout, b: RegisterLayout) -> None:
    c = a * b
    rank = c.rank
    b_shape = (1,) * (rank - b.rank) + b.shape
    assert c.shape == tuple(x * y for x, y in zip((1,) * (rank - a.rank) + a.shape, b_shape))
    assert (c.num_threads, c.local_size) == (
        a.num_threads * b.num_threads,
        a.local_size * b.local_size,
    )
    t = np.arange(c.num_threads)[:, None]
    i = np.arange(c.local_size)[None, :]
    outer = a.map(t // b.num_threads, i // b.local_size)
    inner = b.map(t % b.num_threads, i % b.local_size)
    outer = (0,) * (rank - a.rank) + outer
    inner = (0,) * (rank - b.rank) + inner
    table = c.table()
    for dim in range(rank):
        assert (table[..., dim] == outer[dim] * b_shape[dim] + inner[dim]).all()


@given(
    strategies.register_layouts(max_factors=2),
    strategies.register_layouts(max_factors=2),
    strategies.register_layouts(max_factors=2),
)
def test_product_is_associative(a: RegisterLayout, b: RegisterLayout, c: RegisterLayout) -> None:
    assert (a * b) * c == a * (b * c)


@given(strategies.arbitrary_register_layouts())
def test_unit_layouts_are_identities_of_the_same_rank(layout: RegisterLayout) -> None:
    unit = local(*(1,) * layout.rank)
    assert layout * unit == layout
    assert unit * layout == layout
    assert replicate(1) * layout == layout

"""Where operands live in registers: literal tables, and a brute-force cross-check via owners."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir.placement import (
    broadcast_gather,
    dot_gather,
    first_owner,
    inverse_table,
    reduce_plan,
)
from ir.testing import register_layouts
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import local, register_layout, replicate, spatial


def test_inverse_table_of_spatial_local():
    # spatial(2).local(2): thread t holds elements 2t, 2t+1 at local 0, 1.
    expected = [[0, 1, -1, -1], [-1, -1, 0, 1]]
    np.testing.assert_array_equal(inverse_table(spatial(2).local(2)), expected)


def test_first_owner_points_replicas_at_thread_zero():
    layout = spatial(2) * replicate(2)  # threads 0, 1 hold element 0; threads 2, 3 element 1
    np.testing.assert_array_equal(first_owner(layout), [[0], [0], [2], [2]])


def test_broadcast_gather_of_a_reduced_column():
    # x (2, 4) = spatial(2, 2).local(1, 2); y = reduce(x, [1], keepdims): y[m, 0] per thread.
    x = spatial(2, 2).local(1, 2)
    y = reduce_layout(x, [1], keepdims=True)
    np.testing.assert_array_equal(broadcast_gather(x, y), np.zeros((4, 2), dtype=np.int64))


def test_broadcast_gather_marks_data_a_thread_lacks():
    # Result spatial(2).local(2) reads x[k] from local(2).spatial(2) (thread t holds k = t, t+2).
    gather = broadcast_gather(spatial(2).local(2), local(2).spatial(2))
    np.testing.assert_array_equal(gather, [[0, -1], [-1, 1]])


def test_broadcast_gather_of_a_rank_zero_constant():
    np.testing.assert_array_equal(broadcast_gather(spatial(4), replicate(4)), np.zeros((4, 1)))


def test_dot_gather_of_the_simt_layouts():
    c = spatial(2, 2)  # thread t holds c[t // 2, t % 2]
    a = (spatial(2, 1) * replicate(2)).local(1, 3)  # rows, replicated over the column threads
    b = (replicate(2) * spatial(1, 2)).local(3, 1)  # columns, replicated over the row threads
    ga, gb = dot_gather(c, a, b)
    np.testing.assert_array_equal(ga, np.broadcast_to([0, 1, 2], (4, 1, 3)))
    np.testing.assert_array_equal(gb, np.broadcast_to([0, 1, 2], (4, 1, 3)))


def test_reduce_plan_orders_locals_then_spatial_modes_least_significant_first():
    # shape (8,): modes (2, 2, 2); thread t = 2 * digit(mode 1) + digit(mode 0); local = mode 2.
    layout = register_layout((8,), (2, 2, 2), (1, 0), (2,))
    local_order, steps = reduce_plan(layout, 0, reduce_layout(layout, [0]))
    np.testing.assert_array_equal(local_order, np.broadcast_to([[0, 1]], (4, 1, 2)))
    assert steps == ((1, 2), (2, 2))  # mode 0 (divisor 1) first, then mode 1 (divisor 2)


def test_reduce_plan_keeps_the_other_dimension():
    layout = spatial(2, 2).local(2, 1)  # reduce rows: locals (0, 1) fold; thread row mode next
    local_order, steps = reduce_plan(layout, 0, reduce_layout(layout, [0], keepdims=True))
    np.testing.assert_array_equal(local_order, np.broadcast_to([[[0, 1]]], (4, 1, 2)))
    assert steps == ((2, 2),)


@settings(max_examples=40)
@given(st.data())
def test_broadcast_gather_agrees_with_owners(data):
    layout = data.draw(register_layouts(8, 2))
    column = reduce_layout(layout, [1], keepdims=True)
    gather = broadcast_gather(layout, column)
    table = layout.table()
    for t in range(layout.num_threads):
        for i in range(layout.local_size):
            row = int(table[t, i, 0])
            owners = dict(column.owners((row, 0)))
            assert gather[t, i] == owners.get(t, -1)


@pytest.mark.parametrize("dim", [0, 1])
@settings(max_examples=20)
@given(data=st.data())
def test_reduce_plan_covers_every_held_element_once(dim, data):
    layout = data.draw(register_layouts(8, 2))
    result = reduce_layout(layout, [dim])
    local_order, _ = reduce_plan(layout, dim, result)
    table = layout.table()
    result_table = result.table()
    for t in range(layout.num_threads):
        assert sorted(local_order[t].ravel().tolist()) == list(range(layout.local_size))
        for j in range(result.local_size):
            kept = {tuple(np.delete(table[t, i], dim)) for i in local_order[t, j]}
            assert kept == {tuple(result_table[t, j])}

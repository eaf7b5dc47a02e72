"""Where operands live in registers: literal tables, and brute-force cross-checks via owners."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import dtypes
from ir.instructions import Dot
from ir.placement import (
    broadcast_gather,
    dot_gather,
    dot_is_thread_local,
    dot_warp_gather,
    first_owner,
    inverse_table,
    reduce_plan,
    warp_inverse_table,
)
from ir.testing import register_layouts
from ir.values import RegisterTensor
from layout_algebra.fragments import fragment
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import RegisterLayout, local, register_layout, replicate, spatial


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


def test_warp_inverse_table_splits_threads_into_warps_of_32():
    # spatial(40): warp 0 = threads 0..31 hold elements 0..31, warp 1 = threads 32..39 the rest.
    table = warp_inverse_table(spatial(40))
    np.testing.assert_array_equal(table[:, 30:34], [[30, 31, -1, -1], [-1, -1, 32, 33]])


def test_warp_inverse_table_picks_the_first_holder():
    # replicate(2) * spatial(2).local(2): threads t and t + 2 hold elements 2t, 2t + 1; one warp.
    layout = replicate(2) * spatial(2).local(2)
    np.testing.assert_array_equal(warp_inverse_table(layout), [[0, 1, 2, 3]])


def test_dot_warp_gather_of_spread_operands():
    # One warp of 4 threads, each holding one element of a, b and c (all spatial(2, 2)): thread t
    # needs a[t // 2, :] (threads 2(t // 2), 2(t // 2) + 1) and b[:, t % 2] (threads t % 2, t % 2
    # + 2), which the warp holds but thread t alone does not.
    layout = spatial(2, 2)
    ga, gb = dot_warp_gather(layout, layout, layout)
    np.testing.assert_array_equal(ga[:, 0], [[0, 1], [0, 1], [2, 3], [2, 3]])
    np.testing.assert_array_equal(gb[:, 0], [[0, 2], [1, 3], [0, 2], [1, 3]])
    local_a, local_b = dot_gather(layout, layout, layout)
    np.testing.assert_array_equal(local_a[:, 0], [[0, -1], [-1, 0], [0, -1], [-1, 0]])
    np.testing.assert_array_equal(local_b[:, 0], [[0, -1], [0, -1], [-1, 0], [-1, 0]])


def test_dot_warp_gather_marks_what_a_warp_lacks():
    # 64 threads; c = spatial(2, 1) * spatial(4, 8): warp w holds c rows 4w .. 4w + 3 (threads
    # 8r .. 8r + 7 row r). a = local(2, 1) * spatial(4, 4).replicate(4) puts rows {0, 1, 4, 5}
    # in warp 0 and {2, 3, 6, 7} in warp 1: warp 0 lacks rows 2, 3 (threads 16..31), warp 1
    # rows 4, 5 (threads 32..47), for every k.
    c = spatial(2, 1) * spatial(4, 8)
    a = local(2, 1) * spatial(4, 4).replicate(4)
    b = replicate(2) * spatial(4, 8)
    ga, gb = dot_warp_gather(c, a, b)
    missing = {(int(t), int(i), int(k)) for t, i, k in np.argwhere(ga < 0)}
    assert missing == {(t, 0, k) for t in range(16, 48) for k in range(4)}
    assert (gb >= 0).all()


def _dot(a: RegisterLayout, b: RegisterLayout, c: RegisterLayout) -> Dot:
    f16, f32 = dtypes.f16, dtypes.f32
    return Dot(
        RegisterTensor("d", f32, c),
        RegisterTensor("x", f16, a),
        RegisterTensor("y", f16, b),
        RegisterTensor("z", f32, c),
    )


def test_dot_is_thread_local():
    # The SIMT layouts: rows of a replicated over thread columns, columns of b over thread rows.
    simt_a = (spatial(2, 1) * replicate(2)).local(1, 3)
    simt_b = (replicate(2) * spatial(1, 2)).local(3, 1)
    assert dot_is_thread_local(_dot(simt_a, simt_b, spatial(2, 2)))
    # Spread over the warp: not thread-local.
    assert not dot_is_thread_local(_dot(spatial(2, 2), spatial(2, 2), spatial(2, 2)))
    # One mma.m16n8k16 of one warp: the PTX fragments are shared by the warp's 32 threads.
    a, b, c = (fragment(f"mma.m16n8k16.{x}").layout for x in "abc")
    assert not dot_is_thread_local(_dot(a, b, c))
    ga, gb = dot_warp_gather(c, a, b)
    assert (ga >= 0).all() and (gb >= 0).all()


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


@settings(max_examples=30)
@given(st.data())
def test_warp_inverse_table_agrees_with_owners(data):
    layout = data.draw(register_layouts(64, 2))
    table = warp_inverse_table(layout)
    size = layout.local_size
    for flat, coord in enumerate(np.ndindex(*layout.shape)):
        owners = sorted(layout.owners(coord))
        for warp in range(2):
            held = [t * size + i for t, i in owners if t // 32 == warp]
            assert table[warp, flat] == (held[0] if held else -1)


def _all_twos(draw, shape: tuple[int, ...], threads: int) -> RegisterLayout:
    """A random layout of `shape` (powers of two) over `threads`: every mode 2, each spatial
    or local, in random orders, threads left over as replication."""
    modes = [dim for dim, extent in enumerate(shape) for _ in range(extent.bit_length() - 1)]
    thread_bits = threads.bit_length() - 1
    kinds = [draw(st.booleans()) for _ in modes]
    while sum(kinds) > thread_bits:
        kinds[kinds.index(True)] = False
    spatial_entries = [m for m, is_spatial in enumerate(kinds) if is_spatial]
    spatial_entries += [-2] * (thread_bits - len(spatial_entries))
    local_entries = [m for m, is_spatial in enumerate(kinds) if not is_spatial]
    return register_layout(
        shape,
        (2,) * len(modes),
        draw(st.permutations(spatial_entries)),
        draw(st.permutations(local_entries)),
    )


@settings(max_examples=40)
@given(st.data())
def test_dot_warp_gather_finds_a_holder_in_the_warp_exactly_when_one_exists(data):
    m, k, n = 4, 4, 4
    a = _all_twos(data.draw, (m, k), 64)
    b = _all_twos(data.draw, (k, n), 64)
    c = _all_twos(data.draw, (m, n), 64)
    ga, gb = dot_warp_gather(c, a, b)
    # first[layout][warp][coord]: the smallest flat position of a holder in that warp, or -1.
    first = {}
    for name, layout in (("a", a), ("b", b)):
        first[name] = [{}, {}]
        for coord in np.ndindex(*layout.shape):
            for warp in range(2):
                held = [
                    u * layout.local_size + j for u, j in layout.owners(coord) if u // 32 == warp
                ]
                first[name][warp][coord] = min(held) if held else -1
    c_table = c.table()
    for t in range(64):
        for i in range(c.local_size):
            row, col = (int(x) for x in c_table[t, i])
            for kk in range(k):
                assert ga[t, i, kk] == first["a"][t // 32][(row, kk)]
                assert gb[t, i, kk] == first["b"][t // 32][(kk, col)]

"""`layout_algebra.linear`: Triton linear layouts with XOR bases.

Triton's swizzled shared encoding is defined by ``phase = (row // perPhase) % maxPhase`` and the
column's ``vec``-element chunk XORed with the phase; the bases it implies are written out here
from that definition (not from the code under test) and literally for two common encodings,
then compared with the algebra's swizzled layouts both ways. A property round-trips random
swizzled layouts; distributed layouts with XOR bases become FunctionLayouts that `proofs`
compares; bad bases are refused.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layout_algebra import local
from layout_algebra.errors import LayoutError
from layout_algebra.linear import linear_function_layout, linear_to_shared, shared_to_linear
from layout_algebra.shared import (
    SharedLayout,
    Swizzle,
    shared_column_major,
    shared_row_major,
    shared_row_major_swizzle,
)


def triton_swizzled_bases(rows: int, cols: int, vec: int, per_phase: int, max_phase: int):
    """Offset bases of Triton's swizzled shared encoding (row-major, order [1, 0]) from its
    definition: the element at (row, col) is stored at row * cols + (col ^ phase * vec) with
    phase = (row // per_phase) % max_phase, so offset bit b holds the coordinate below."""
    bases = [(0, 1 << b) for b in range(cols.bit_length() - 1)]
    for b in range(rows.bit_length() - 1):
        row = 1 << b
        phase = (row // per_phase) % max_phase
        bases.append((row, (phase * vec) % cols))
    return bases


LITERAL = [
    # f16, 128-byte rows: vec 8, perPhase 1, maxPhase 8.
    (
        shared_row_major_swizzle(8, 64, element_bits=16),
        [(0, 1), (0, 2), (0, 4), (0, 8), (0, 16), (0, 32), (1, 8), (2, 16), (4, 32)],
    ),
    # f16, 64-byte rows: vec 8, perPhase 2, maxPhase 4.
    (
        shared_row_major_swizzle(8, 32, element_bits=16),
        [(0, 1), (0, 2), (0, 4), (0, 8), (0, 16), (1, 0), (2, 8), (4, 16)],
    ),
    (shared_row_major(4, 8), [(0, 1), (0, 2), (0, 4), (1, 0), (2, 0)]),
    (shared_column_major(4, 8), [(1, 0), (2, 0), (0, 1), (0, 2), (0, 4)]),
]


@pytest.mark.parametrize(("layout", "bases"), LITERAL, ids=repr)
def test_literal_bases_both_ways(layout: SharedLayout, bases) -> None:
    assert shared_to_linear(layout) == {"offset": bases}
    assert linear_to_shared({"offset": bases}, layout.shape) == layout


@pytest.mark.parametrize(
    ("rows", "cols", "element_bits", "vec", "per_phase", "max_phase"),
    [(8, 64, 16, 8, 1, 8), (8, 32, 16, 8, 2, 4), (16, 128, 8, 16, 1, 8), (8, 32, 32, 4, 1, 8)],
)
def test_tritons_definition_is_the_algebras_swizzle(
    rows: int, cols: int, element_bits: int, vec: int, per_phase: int, max_phase: int
) -> None:
    bases = triton_swizzled_bases(rows, cols, vec, per_phase, max_phase)
    ours = shared_row_major_swizzle(rows, cols, element_bits=element_bits)
    assert shared_to_linear(ours) == {"offset": bases}
    assert linear_to_shared({"offset": bases}, (rows, cols)) == ours


@st.composite
def swizzled_layouts(draw: st.DrawFn) -> SharedLayout:
    shape = (1 << draw(st.integers(0, 4)), 1 << draw(st.integers(0, 5)))
    base = shared_row_major(*shape) if draw(st.booleans()) else shared_column_major(*shape)
    width = (shape[0] * shape[1]).bit_length() - 1
    swizzle = None
    if width >= 2 and draw(st.booleans()):
        bits = draw(st.integers(1, width // 2))
        shift = draw(st.integers(bits, width - bits))
        swizzle = Swizzle(bits, draw(st.integers(0, width - bits - shift)), shift)
    return SharedLayout(base.shape, base.mode_shape, base.mode_strides, swizzle)


@settings(max_examples=60, deadline=None)
@given(layout=swizzled_layouts())
def test_round_trip_keeps_every_offset(layout: SharedLayout) -> None:
    bases = shared_to_linear(layout)
    # Offset bit b's basis is where offset 2**b lives.
    for b, basis in enumerate(bases["offset"]):
        assert layout.offset(basis) == 1 << b
    back = linear_to_shared(bases, layout.shape)
    np.testing.assert_array_equal(back.table(), layout.table())


# ------------------------------------------------------------------------------ distributed


def xor_map(bases: dict, t: int, i: int) -> tuple[int, ...]:
    """Triton's meaning, evaluated directly: XOR of the bases of the set bits."""
    result = [0, 0]
    thread_bases = bases.get("lane", []) + bases.get("warp", [])
    for source, entries in ((t, thread_bases), (i, bases.get("register", []))):
        for b, basis in enumerate(entries):
            if source >> b & 1:
                result = [r ^ c for r, c in zip(result, basis)]
    return tuple(result)


ACCUMULATOR = {
    "register": [(0, 1), (8, 0)],
    "lane": [(0, 2), (0, 4), (1, 0), (2, 0), (4, 0)],
    "warp": [],
}
XOR_LANES = dict(ACCUMULATOR, lane=[(0, 2), (0, 4), (1, 2), (2, 4), (4, 0)])
"""The accumulator with lanes 4 and 8 also flipping column bits: no register layout has it."""


def test_distributed_bases_become_a_function_layout_that_proofs_compare() -> None:
    from proofs import check_equivalent

    accumulator = linear_function_layout(ACCUMULATOR, (16, 8))
    assert check_equivalent(accumulator, local(2, 1).spatial(8, 4).local(1, 2)).holds
    swizzled = linear_function_layout(XOR_LANES, (16, 8))
    table = swizzled.table()
    for t in range(32):
        for i in range(4):
            assert tuple(table[t, i]) == xor_map(XOR_LANES, t, i)
    refuted = check_equivalent(swizzled, local(2, 1).spatial(8, 4).local(1, 2))
    assert not refuted.holds
    point = refuted.counterexample
    assert xor_map(XOR_LANES, point["t"], point["i"]) == tuple(point["a"])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: linear_to_shared({"offset": [(0, 1), (0, 2)]}, (4, 8)), "2 offset bases"),
        (
            lambda: linear_to_shared({"offset": [(0, 1), (0, 1), (0, 4), (1, 0), (2, 0)]}, (4, 8)),
            "do not reach every element once",
        ),
        (lambda: linear_to_shared({"offset": [(0, 9)]}, (1, 2)), "inside the tile"),
        (lambda: linear_to_shared({"offset": []}, (3, 4)), "powers of two"),
        (lambda: linear_to_shared({"lane": []}, (2, 2)), "\\['lane'\\] are not among 'offset'"),
        (lambda: linear_to_shared([(0, 1)], (1, 2)), "must be a mapping"),
        (lambda: shared_to_linear(shared_row_major(3, 4)), "powers of two"),
        (lambda: shared_to_linear(SharedLayout((2, 2), (2, 2), (4, 1))), "not a bijection"),
        (lambda: shared_to_linear(local(2)), "expects a SharedLayout"),
        (lambda: shared_to_linear(shared_row_major(4096, 1024)), "at most 2097152"),
        (lambda: linear_to_shared({"offset": []}, (4096, 1024)), "at most 2097152"),
        (lambda: linear_function_layout({"register": [(0, 3)]}, (1, 2)), "inside the tile"),
    ],
)
def test_bad_bases_are_refused(call, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        call()

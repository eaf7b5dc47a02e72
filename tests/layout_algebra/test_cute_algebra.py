"""`layout_algebra.cute`: CuTe's layout algebra on CuTe layouts.

Three kinds of check: the worked examples of CuTe's documentation (literal layouts, not derived
from the code under test); properties of each operation's meaning on random layouts (the
composed function is A after B, the complement fills what A leaves out, the right inverse
undoes A, ...); and pycute (CUTLASS's own Python CuTe) on the same random layouts, result for
result, where the two may differ only by our refusing inputs that CuTe's preconditions exclude
(pycute then returns a layout that is not the operation's result, which the test shows). Last,
`proofs` on CuTe layouts through `shared_layout`.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layout_algebra.cute import (
    CuteLayout,
    coalesce,
    complement,
    composition,
    logical_divide,
    logical_product,
    make_layout,
    parse,
    right_inverse,
    zipped_divide,
)
from layout_algebra.errors import LayoutError
from layout_algebra.shared import shared_row_major

# ------------------------------------------------------------------------------ exact tables

DOCUMENTED = [
    # CuTe's layout algebra documentation, worked examples.
    (lambda: composition(parse("(6,2):(8,2)"), parse("(4,3):(3,1)")), "((2,2),3):((24,2),8)"),
    (lambda: complement(parse("4:1"), 24), "6:4"),
    (lambda: complement(parse("6:4"), 24), "4:1"),
    (lambda: complement(parse("4:2"), 24), "(2,3):(1,8)"),
    (lambda: coalesce(parse("(2,(1,6)):(1,(6,2))")), "12:1"),
    (lambda: logical_divide(parse("(4,2,3):(2,1,8)"), parse("4:2")), "((2,2),(2,3)):((4,1),(2,8))"),
    (lambda: logical_product(parse("(2,2):(4,1)"), parse("6:1")), "((2,2),(2,3)):((4,1),(2,8))"),
    (lambda: right_inverse(parse("(2,4):(4,1)")), "(4,2):(2,1)"),
    (
        lambda: zipped_divide(parse("(12,32):(32,1)"), (parse("3:1"), parse("8:1"))),
        "((3,8),(4,4)):((32,1),(96,8))",
    ),
]


@pytest.mark.parametrize(("operation", "expected"), DOCUMENTED, ids=[d[1] for d in DOCUMENTED])
def test_documented_examples(operation, expected: str) -> None:
    assert str(operation()) == expected


def test_layout_text_calls_and_sizes() -> None:
    layout = parse("(_4, (_2, _2)) : (_2, (_1, _8))")
    assert str(layout) == "(4,(2,2)):(2,(1,8))" and repr(layout) == "parse('(4,(2,2)):(2,(1,8))')"
    assert (layout.size, layout.cosize, layout.rank) == (16, 16, 2)
    assert parse("(4096,4096):(4096,1)").cosize == 1 << 24  # in closed form, no table
    assert parse("(4,2):(-1,4)").cosize == 5
    assert layout.table() == [0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15]
    assert str(layout[1]) == "(2,2):(1,8)" and str(make_layout(layout[1], layout[0])) == (
        "((2,2),4):((1,8),2)"
    )


# ------------------------------------------------------------------------------ strategies

SIZES = st.sampled_from([1, 2, 2, 3, 4, 4, 8])


def nested(leaf: st.SearchStrategy) -> st.SearchStrategy:
    return st.recursive(
        leaf, lambda inner: st.lists(inner, min_size=1, max_size=3).map(tuple), max_leaves=5
    )


def compact_strides(shape) -> object:
    """Column-major strides for `shape`: the layout is a bijection onto [0, size)."""
    step = [1]

    def build(value):
        if isinstance(value, int):
            stride = step[0]
            step[0] *= value
            return stride
        return tuple(build(item) for item in value)

    return build(shape)


def any_strides(draw: st.DrawFn, shape) -> object:
    if isinstance(shape, int):
        return draw(st.sampled_from([0, 1, 1, 2, 3, 4, 8, 16]))
    return tuple(any_strides(draw, item) for item in shape)


@st.composite
def layouts(draw: st.DrawFn, compact: bool | None = None) -> CuteLayout:
    """A CuTe layout of nested sizes; compact (a bijection) or with any strides."""
    shape = draw(nested(SIZES))
    if compact is None:
        compact = draw(st.booleans())
    stride = compact_strides(shape) if compact else any_strides(draw, shape)
    return CuteLayout(shape, stride)


def injective(layout: CuteLayout) -> bool:
    table = layout.table()
    return len(set(table)) == len(table)


# ------------------------------------------------------------------------------ properties

PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(layout=layouts())
def test_coalesce_keeps_the_function_with_no_mergeable_modes(layout: CuteLayout) -> None:
    result = coalesce(layout)
    assert result.same_function(layout)
    leaves = list(result.flat())
    assert all(n > 1 for n, _ in leaves) or leaves == [(1, 0)]
    assert all(a[0] * a[1] != b[1] for a, b in zip(leaves, leaves[1:]))


@PROPERTY
@given(a=layouts(), b=layouts())
def test_composition_is_a_after_b(a: CuteLayout, b: CuteLayout) -> None:
    if max(b.table()) >= a.size:
        return  # b reaches past a's domain
    try:
        result = composition(a, b)
    except LayoutError as error:
        assert "composition:" in str(error)
        return
    assert result.size == b.size
    assert result.table() == [a(b(i)) for i in range(b.size)]


@PROPERTY
@given(a=layouts(compact=True), factor=st.sampled_from([1, 2, 3, 4]))
def test_complement_fills_what_the_layout_leaves_out(a: CuteLayout, factor: int) -> None:
    cotarget = a.cosize * factor
    rest = complement(a, cotarget)
    both = make_layout(a, rest)
    assert injective(both)
    assert both.size >= cotarget and rest.table() == sorted(rest.table())


@PROPERTY
@given(layout=layouts())
def test_right_inverse_undoes_the_layout(layout: CuteLayout) -> None:
    inverse = right_inverse(layout)
    assert [layout(inverse(i)) for i in range(inverse.size)] == list(range(inverse.size))
    if injective(layout) and sorted(layout.table()) == list(range(layout.size)):
        assert inverse.size == layout.size  # a bijection is fully inverted


@PROPERTY
@given(a=layouts(compact=True), tile=st.sampled_from([1, 2, 4]), step=st.sampled_from([1, 2]))
def test_logical_divide_is_a_composed_with_the_tile_and_its_complement(
    a: CuteLayout, tile: int, step: int
) -> None:
    tiler = CuteLayout(tile, step)
    if tile * step > a.size or a.size % (tile * step):
        return
    result = logical_divide(a, tiler)
    arrangement = make_layout(tiler, complement(tiler, a.size))
    assert result.table() == [a(arrangement(i)) for i in range(arrangement.size)]
    assert str(zipped_divide(a, tiler)) == str(result)  # one tiler: the same layout


@PROPERTY
@given(a=layouts(compact=True), b=layouts(compact=True))
def test_logical_product_repeats_a(a: CuteLayout, b: CuteLayout) -> None:
    result = logical_product(a, b)
    assert str(result[0]) == str(a) and result.size == a.size * b.size
    assert injective(result)


# ------------------------------------------------------------------------------ pycute


def _normal(value):
    """Nested tuples with 1-tuples unwrapped (pycute wraps a single layout as CuTe does)."""
    if isinstance(value, tuple):
        return _normal(value[0]) if len(value) == 1 else tuple(_normal(v) for v in value)
    return value


def _same(ours: CuteLayout, theirs) -> bool:
    return _normal(ours.shape) == _normal(theirs.shape) and _normal(ours.stride) == _normal(
        theirs.stride
    )


def _theirs(pycute, layout: CuteLayout):
    return pycute.Layout(layout.shape, layout.stride)


def _table(layout) -> list[int]:
    return [layout(i) for i in range(math.prod(_flat(layout.shape)))]


def _flat(value) -> list[int]:
    return [value] if isinstance(value, int) else [x for v in value for x in _flat(v)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    a=layouts(),
    b=layouts(),
    cotarget=st.sampled_from([1, 16, 64, 256]),
    tile=st.sampled_from([1, 2, 4]),
)
def test_every_operation_equals_pycute(
    a: CuteLayout, b: CuteLayout, cotarget: int, tile: int
) -> None:
    pycute = pytest.importorskip("pycute")
    ta, tb = _theirs(pycute, a), _theirs(pycute, b)
    assert _same(coalesce(a), pycute.coalesce(ta))
    assert _same(right_inverse(a), pycute.right_inverse(ta))
    try:
        ours = complement(a, cotarget)
    except LayoutError:
        # Overlapping modes (CuTe requires none): pycute's answer has an empty mode.
        assert 0 in _flat(pycute.complement(ta, cotarget).shape)
    else:
        assert _same(ours, pycute.complement(ta, cotarget))
    try:
        ours = composition(a, b)
    except LayoutError:
        # A size that a's modes cannot supply at b's stride: pycute's layout is not a after b.
        try:
            theirs = pycute.composition(ta, tb)
        except AssertionError:
            theirs = None  # pycute refuses it too
        if theirs is not None and max(b.table()) < a.size:
            assert (
                _table(theirs) != [a(b(i)) for i in range(b.size)]
                or math.prod(_flat(theirs.shape)) != b.size
            )
    else:
        assert _same(ours, pycute.composition(ta, tb))
    tiler = CuteLayout(tile, 1)
    if a.size % tile == 0 and all(d >= 0 for _, d in a.flat()):
        for ours_op, theirs_op in (
            (logical_divide, pycute.logical_divide),
            (zipped_divide, pycute.zipped_divide),
        ):
            try:
                ours = ours_op(a, tiler)
            except LayoutError:
                continue
            assert _same(ours, theirs_op(ta, _theirs(pycute, tiler)))
    compact_a = CuteLayout(a.shape, compact_strides(a.shape))
    compact_b = CuteLayout(b.shape, compact_strides(b.shape))
    assert _same(
        logical_product(compact_a, compact_b),
        pycute.logical_product(_theirs(pycute, compact_a), _theirs(pycute, compact_b)),
    )


# ------------------------------------------------------------------------------ proofs


def test_proofs_compare_cute_layouts_with_the_algebras() -> None:
    from proofs import check_equivalent

    # Row-major 8 x 64 written the CuTe way, as a function of its index, against ours.
    cute_rows = parse("(64,8):(1,64)").shared_layout()
    assert check_equivalent(cute_rows, shared_row_major(512)).holds
    divided = logical_divide(parse("(4,8):(8,1)"), parse("2:1"))
    assert check_equivalent(divided.shared_layout(), coalesce(divided).shared_layout()).holds
    refuted = check_equivalent(parse("(2,4):(4,1)").shared_layout(), shared_row_major(8))
    assert not refuted.holds and refuted.counterexample is not None


# ------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: CuteLayout((2, 3), 1), "different nesting"),
        (lambda: CuteLayout(0, 1), "sizes must be >= 1"),
        (lambda: CuteLayout(True, 1), "is a bool"),
        (lambda: CuteLayout((), ()), "a non-empty tuple"),
        (lambda: CuteLayout(1 << 41, 1), "size or offsets past"),
        (lambda: parse("(4,2):(1)"), "different nesting"),
        (lambda: parse("4:1")(4), r"index 4 outside \[0, 4\)"),
        (lambda: parse("4:1")[2], "no mode 2 of 1"),
        (lambda: composition(parse("(4,4):(1,8)"), parse("3:3")), "does not divide"),
        (lambda: composition(parse("4:1"), parse("2:-1")), "negative"),
        (lambda: composition("4:1", parse("2:1")), "is not a CuteLayout"),
        (lambda: composition(parse("4:1"), (parse("2:1"), parse("2:1"))), "the tiler has 2 modes"),
        (lambda: complement(parse("(4,2):(1,2)"), 16), "modes overlap"),
        (lambda: complement(parse("4:1"), 0), "cotarget 0"),
        (lambda: complement(parse("4:-1"), 8), "negative strides"),
        (
            lambda: logical_divide(parse("8:1"), (parse("2:1"), parse("2:1"))),
            "the tiler has 2 modes",
        ),
        (
            lambda: zipped_divide(parse("8:1"), (parse("2:1"), parse("2:1"))),
            "the tiler has 2 modes",
        ),
        (lambda: make_layout(), "at least one layout"),
        (lambda: parse("4:-1").shared_layout(), "negative strides"),
        (lambda: parse("(8192,8192):(8192,1)").table(), "67108864 entries, more than"),
    ],
)
def test_bad_input_is_a_layout_error(make, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        make()

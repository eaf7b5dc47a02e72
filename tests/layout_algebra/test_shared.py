"""Tests of shared-memory layouts: `Swizzle`, `SharedLayout`, its constructors and product."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from layout_algebra import (
    LayoutError,
    SharedLayout,
    Swizzle,
    evaluate,
    row_swizzle,
    shared_column_major,
    shared_product,
    shared_row_major,
    shared_row_major_swizzle,
    shared_strides,
    var,
)

# ----------------------------------------------------------------------------------------------
# Swizzle: literal values
# ----------------------------------------------------------------------------------------------


def test_swizzle_cute_example() -> None:
    # bits 7..9 of 0x...678 (0b110_0111_1000) are 0b100; XORed into bits 3..5 (0b111) -> 0b011
    assert Swizzle(3, 3, 4)(0x12345678) == 0x12345658


@pytest.mark.parametrize(
    ("swizzle", "expected"),
    [
        # bit 1 flips bit 0
        (Swizzle(1, 0, 1), [0, 1, 3, 2]),
        # bit 2 flips bit 0; bit 1 passes through
        (Swizzle(1, 0, 2), [0, 1, 2, 3, 5, 4, 7, 6]),
        # bits 2, 3 flip bits 0, 1
        (Swizzle(2, 0, 2), [0, 1, 2, 3, 5, 4, 7, 6, 10, 11, 8, 9, 15, 14, 13, 12]),
        # bit 3 flips bit 1 (base 1); bits 0 and 2 pass through
        (Swizzle(1, 1, 2), [0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 8, 9, 14, 15, 12, 13]),
        # identity
        (Swizzle(0, 2, 3), list(range(8))),
    ],
)
def test_swizzle_table(swizzle: Swizzle, expected: list[int]) -> None:
    assert [swizzle(x) for x in range(len(expected))] == expected
    assert swizzle(np.arange(len(expected))).tolist() == expected


def test_swizzle_fields() -> None:
    swizzle = Swizzle(3, 4, 3)
    assert (swizzle.width, swizzle.mask, swizzle.is_identity) == (10, 0b1110000000, False)
    assert Swizzle(0, 4, 3).is_identity
    assert repr(swizzle) == "Swizzle(3, 4, 3)"
    assert swizzle == Swizzle(3, 4, 3) and hash(swizzle) == hash(Swizzle(3, 4, 3))


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((3, 3, 2), "shift 2 is smaller than its bits 3"),
        ((-1, 3, 3), "swizzle bits must be >= 0"),
        ((1, -1, 3), "swizzle base must be >= 0"),
        ((1, 2, 1.5), "swizzle shift must be an integer"),
        ((True, 2, 3), "swizzle bits must be an integer"),
    ],
)
def test_swizzle_invalid(args: tuple, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        Swizzle(*args)


def test_swizzle_invalid_inputs() -> None:
    with pytest.raises(LayoutError, match="non-negative, got -3"):
        Swizzle(1, 0, 1)(-3)
    with pytest.raises(LayoutError, match="non-negative, got minimum -1"):
        Swizzle(1, 0, 1)(np.array([0, -1]))
    with pytest.raises(LayoutError, match="integer array, got dtype float64"):
        Swizzle(1, 0, 1)(np.array([0.5]))
    with pytest.raises(LayoutError, match="expects an int, an integer array or an Expr"):
        Swizzle(1, 0, 1)("7")


# ----------------------------------------------------------------------------------------------
# Swizzle: properties
# ----------------------------------------------------------------------------------------------

swizzles = st.integers(0, 3).flatmap(
    lambda bits: st.builds(Swizzle, st.just(bits), st.integers(0, 3), st.integers(bits, bits + 3))
)


@given(swizzles)
def test_swizzle_is_a_bijection_on_its_width(swizzle: Swizzle) -> None:
    block = np.arange(1 << swizzle.width)
    assert sorted(swizzle(block).tolist()) == block.tolist()


@given(swizzles, st.integers(0, 1 << 20))
def test_swizzle_is_its_own_inverse(swizzle: Swizzle, x: int) -> None:
    assert swizzle(swizzle(x)) == x


@given(swizzles, st.integers(0, 1 << 20))
def test_swizzle_keeps_the_bits_above_its_width(swizzle: Swizzle, x: int) -> None:
    assert swizzle(x) >> swizzle.width == x >> swizzle.width


@given(swizzles, st.integers(0, 1 << 20))
def test_swizzle_matches_the_bit_formula(swizzle: Swizzle, x: int) -> None:
    # written bit by bit: bit base+k flips when bit base+shift+k is set
    bits = [(x >> p) & 1 for p in range(32)]
    for k in range(swizzle.bits):
        bits[swizzle.base + k] ^= bits[swizzle.base + swizzle.shift + k]
    assert swizzle(x) == sum(bit << p for p, bit in enumerate(bits))


# ----------------------------------------------------------------------------------------------
# SharedLayout: literal values
# ----------------------------------------------------------------------------------------------


def test_row_major_offsets() -> None:
    layout = shared_row_major(4, 8)
    assert layout.offset((2, 3)) == 19
    assert layout.table().tolist() == np.arange(32).reshape(4, 8).tolist()
    assert (layout.size, layout.num_elements, layout.rank) == (32, 32, 2)


def test_column_major_offsets() -> None:
    layout = shared_column_major(4, 8)
    assert layout.offset((2, 3)) == 14
    assert layout.table().tolist() == np.arange(32).reshape(8, 4).T.tolist()
    assert layout.mode_strides == (1, 4)


def test_swizzled_offset_worked_example() -> None:
    layout = SharedLayout((4, 8), (4, 8), (8, 1), Swizzle(1, 0, 4))
    assert layout.offset((2, 3)) == 18
    # rows 2 and 3 (offsets 16..31) have bit 4 set: their even and odd columns swap
    assert layout.table()[2].tolist() == [17, 16, 19, 18, 21, 20, 23, 22]


def test_strided_layout_with_padding() -> None:
    layout = shared_strides((4, 4), (5, 1))  # rows padded to 5 elements
    assert layout.table().tolist() == [
        [0, 1, 2, 3],
        [5, 6, 7, 8],
        [10, 11, 12, 13],
        [15, 16, 17, 18],
    ]
    assert (layout.size, layout.num_elements) == (19, 16)


def test_modes_split_a_dimension() -> None:
    # dimension 0 of extent 8 split into (2, 4): the outer digit strides 1, the inner 2
    layout = SharedLayout((8,), (2, 4), (1, 2))
    assert layout.table().tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert layout.mode_dims == (0, 0)


def test_broadcast_stride_zero() -> None:
    layout = shared_strides((3, 4), (0, 1))
    assert layout.table().tolist() == [[0, 1, 2, 3]] * 3
    assert layout.size == 4


@pytest.mark.parametrize(
    ("fields", "canonical"),
    [
        # size-1 modes dropped
        (((4, 1), (1, 4, 1), (9, 1, 7)), ((4,), (1,))),
        # (4, 4) with strides (4, 1) reads as one mode of 16
        (((16,), (4, 4), (4, 1)), ((16,), (1,))),
        # stride 0 modes merge too
        (((8,), (2, 4), (0, 0)), ((8,), (0,))),
        # not mergeable: the outer stride is not 4 * 1
        (((16,), (4, 4), (8, 1)), ((4, 4), (8, 1))),
        # not mergeable across dimensions
        (((4, 4), (4, 4), (4, 1)), ((4, 4), (4, 1))),
    ],
)
def test_canonical_form(fields: tuple, canonical: tuple) -> None:
    layout = SharedLayout(*fields)
    assert (layout.mode_shape, layout.mode_strides) == canonical


def test_identity_swizzle_is_dropped() -> None:
    assert SharedLayout((8,), (8,), (1,), Swizzle(0, 3, 3)).swizzle is None
    assert SharedLayout((8,), (8,), (1,), Swizzle(0, 3, 3)) == shared_row_major(8)


def test_equality_and_hash() -> None:
    assert SharedLayout((16,), (4, 4), (4, 1)) == shared_row_major(16)
    assert hash(SharedLayout((16,), (4, 4), (4, 1))) == hash(shared_row_major(16))
    assert shared_row_major(4, 4) != shared_column_major(4, 4)
    assert shared_row_major(8, 8) != SharedLayout((8, 8), (8, 8), (8, 1), Swizzle(1, 0, 3))


def test_rank_zero_layout() -> None:
    layout = SharedLayout((), (), ())
    assert (layout.offset(()), layout.size, layout.num_elements) == (0, 1, 1)


@pytest.mark.parametrize(
    "layout",
    [
        shared_row_major(4, 8),
        shared_column_major(2, 3, 4),
        shared_row_major_swizzle(8, 64, element_bits=16),
        shared_strides((4, 4), (5, 1)),
        SharedLayout((8, 8), (2, 4, 8), (4, 16, 1), Swizzle(2, 1, 3)),
    ],
)
def test_repr_rebuilds(layout: SharedLayout) -> None:
    namespace = {
        "SharedLayout": SharedLayout,
        "Swizzle": Swizzle,
        "shared_row_major": shared_row_major,
        "shared_column_major": shared_column_major,
        "shared_row_major_swizzle": shared_row_major_swizzle,
    }
    assert eval(repr(layout), namespace) == layout


def test_repr_names_the_constructor() -> None:
    assert repr(shared_row_major(4, 8)) == "shared_row_major(4, 8)"
    assert repr(shared_row_major_swizzle(8, 64, element_bits=16)) == (
        "shared_row_major_swizzle(8, 64, element_bits=16)"
    )


# ----------------------------------------------------------------------------------------------
# SharedLayout: offsets on arrays and expressions
# ----------------------------------------------------------------------------------------------


def test_offset_on_arrays_broadcasts() -> None:
    layout = shared_row_major_swizzle(8, 64, element_bits=16)
    rows = np.arange(8)[:, None]
    columns = np.arange(64)[None, :]
    expected = [[layout.offset((r, c)) for c in range(64)] for r in range(8)]
    assert layout.offset((rows, columns)).tolist() == expected


def test_offset_on_expressions_without_swizzle() -> None:
    r, c = var("r", 0, 3), var("c", 0, 7)
    assert repr(shared_row_major(4, 8).offset((r, c))) == "r * 8 + c"
    x = var("x", 0, 15)
    layout = SharedLayout((16,), (4, 4), (1, 4))
    assert repr(layout.offset((x,))) == "x // 4 + (x % 4) * 4"
    assert [evaluate(layout.offset((x,)), {"x": v}) for v in range(16)] == layout.table().tolist()


def test_offset_on_expressions_with_swizzle() -> None:
    layout = shared_row_major_swizzle(16, 64, element_bits=16)
    r, c = var("r", 0, 15), var("c", 0, 63)
    expression = layout.offset((r, c))
    rows, columns = np.meshgrid(np.arange(16), np.arange(64), indexing="ij")
    assert evaluate(expression, {"r": rows, "c": columns}).tolist() == layout.table().tolist()


def test_offset_mixes_ints_and_expressions() -> None:
    c = var("c", 0, 7)
    assert evaluate(shared_row_major(4, 8).offset((2, c)), {"c": 5}) == 21


@pytest.mark.parametrize(
    ("coord", "match"),
    [
        ((4, 0), r"coord \(4, 0\) is outside shape \(4, 8\) in dim 0"),
        ((0, -1), r"coord \(0, -1\) is outside shape \(4, 8\) in dim 1"),
        ((1,), r"coord \(1,\) has rank 1, expected 2"),
        (5, "coord must be a sequence of 2 indices"),
        ((1.0, 2), r"coord\[0\] must be an int, an integer array or an Expr"),
        ((np.array([0, 8]), 0), r"coord\[0\] holds values in \[0, 8\], outside \[0, 4\)"),
        ((np.array([0.5]), 0), r"coord\[0\] must be an integer array"),
        ((np.array([0, 1]), var("c", 0, 7)), "mixes NumPy arrays and Exprs"),
    ],
)
def test_offset_invalid(coord: object, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        shared_row_major(4, 8).offset(coord)


# ----------------------------------------------------------------------------------------------
# SharedLayout: construction errors
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (((4, 4), (4, 4), (4, -1)), r"mode_strides\[1\] must be >= 0, got -1"),
        (((4, 4), (4, 4), (4,)), r"mode_strides \(4,\) has 1 entries, but mode_shape"),
        (((4, 4), (4, 2), (2, 1)), "multiplies to 8, but shape"),
        (((4, 4), (2, 8), (8, 1)), r"does not split shape \(4, 4\)"),
        (((0, 4), (4,), (1,)), r"shape\[0\] must be >= 1, got 0"),
        (((4,), (4,), (1,), (3, 3, 3)), "swizzle must be a Swizzle or None"),
        ((4, (4,), (1,)), "shape must be a tuple of integers"),
    ],
)
def test_shared_layout_invalid(args: tuple, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        SharedLayout(*args)


def test_constructor_errors() -> None:
    with pytest.raises(LayoutError, match=r"strides \(1,\) has rank 1, shape \(4, 4\) has 2"):
        shared_strides((4, 4), (1,))
    with pytest.raises(LayoutError, match=r"shared_row_major shape\[1\] must be >= 1, got 0"):
        shared_row_major(4, 0)


# ----------------------------------------------------------------------------------------------
# SharedLayout: properties against a reference built from raw fields
# ----------------------------------------------------------------------------------------------


@st.composite
def raw_fields(draw: st.DrawFn, swizzled: bool = True, max_rank: int = 3) -> tuple:
    """Raw, often non-canonical fields: 1 to `max_rank` dimensions, each split into 0-3 modes of
    size 1-4, strides 0-20, an optional swizzle."""
    shape, mode_shape = [], []
    for _ in range(draw(st.integers(1, max_rank))):
        modes = draw(st.lists(st.integers(1, 4), max_size=3))
        mode_shape += modes
        shape.append(math.prod(modes))
    num_modes = len(mode_shape)
    strides = draw(st.lists(st.integers(0, 20), min_size=num_modes, max_size=num_modes))
    swizzle = draw(st.none() | swizzles) if swizzled else None
    return tuple(shape), tuple(mode_shape), tuple(strides), swizzle


def reference_offset(fields: tuple, coord: tuple[int, ...]) -> int:
    """The offset straight from the definition: split each coordinate over its dimension's
    modes (outermost first), sum digit * stride, then apply the swizzle bit by bit."""
    shape, mode_shape, strides, swizzle = fields
    total = 0
    position = 0
    for extent, c in zip(shape, coord):
        modes = []
        covered = 1
        while covered < extent or (position < len(mode_shape) and mode_shape[position] == 1):
            modes.append(position)
            covered *= mode_shape[position]
            position += 1
        for m in reversed(modes):
            total += (c % mode_shape[m]) * strides[m]
            c //= mode_shape[m]
    if swizzle is not None:
        for k in range(swizzle.bits):
            if total >> (swizzle.base + swizzle.shift + k) & 1:
                total ^= 1 << (swizzle.base + k)
    return total


@given(raw_fields())
def test_offset_is_digit_sum_then_swizzle(fields: tuple) -> None:
    layout = SharedLayout(*fields)
    table = layout.table()
    for coord in itertools.product(*(range(n) for n in layout.shape)):
        assert table[coord] == reference_offset(fields, coord) == layout.offset(coord)


@given(raw_fields())
def test_size_is_largest_offset_plus_one(fields: tuple) -> None:
    layout = SharedLayout(*fields)
    coords = itertools.product(*(range(n) for n in layout.shape))
    assert layout.size == max(reference_offset(fields, coord) for coord in coords) + 1


@st.composite
def same_shape_pairs(draw: st.DrawFn) -> tuple[SharedLayout, SharedLayout]:
    """Two unswizzled layouts of one small shape with small strides, so that equal tables
    happen often (merged and split modes, stride-0 modes)."""
    shape = draw(st.sampled_from([(4,), (8,), (2, 4), (4, 2)]))

    def layout() -> SharedLayout:
        mode_shape = []
        for extent in shape:
            split = draw(st.sampled_from([d for d in (1, 2, 4) if extent % d == 0]))
            mode_shape += [extent // split, split]
        strides = draw(
            st.lists(st.integers(0, 4), min_size=len(mode_shape), max_size=len(mode_shape))
        )
        return SharedLayout(shape, tuple(mode_shape), tuple(strides))

    return layout(), layout()


@given(same_shape_pairs())
def test_equal_exactly_when_same_offsets(pair: tuple[SharedLayout, SharedLayout]) -> None:
    a, b = pair
    assert (a == b) == np.array_equal(a.table(), b.table())


# ----------------------------------------------------------------------------------------------
# Product
# ----------------------------------------------------------------------------------------------


def test_product_literal() -> None:
    # four row-major 2x4 blocks of 8 elements, the blocks placed column-major
    layout = shared_column_major(2, 2) * shared_row_major(2, 4)
    assert layout.table().tolist() == [
        [0, 1, 2, 3, 16, 17, 18, 19],
        [4, 5, 6, 7, 20, 21, 22, 23],
        [8, 9, 10, 11, 24, 25, 26, 27],
        [12, 13, 14, 15, 28, 29, 30, 31],
    ]
    assert layout == shared_product(shared_column_major(2, 2), shared_row_major(2, 4))


def test_product_pads_ranks() -> None:
    layout = shared_row_major(3) * shared_row_major(2, 2)
    assert layout.shape == (2, 6)
    assert layout.offset((1, 5)) == 2 * 4 + 3


def test_product_of_row_major_tiles_with_a_swizzled_atom() -> None:
    atom = shared_row_major_swizzle(8, 64, element_bits=16)
    layout = shared_row_major(2, 2) * atom
    assert layout.shape == (16, 128)
    assert layout.swizzle == Swizzle(3, 3, 3)
    for r, c in itertools.product(range(16), range(128)):
        block = 2 * (r // 8) + c // 64
        assert layout.offset((r, c)) == 512 * block + atom.offset((r % 8, c % 64))


def test_product_with_a_swizzled_left_operand() -> None:
    outer = SharedLayout((4, 4), (4, 4), (4, 1), Swizzle(1, 0, 2))
    layout = outer * shared_row_major(2, 2)
    assert layout.swizzle == Swizzle(1, 2, 2)
    for r, c in itertools.product(range(8), range(8)):
        assert layout.offset((r, c)) == outer.offset((r // 2, c // 2)) * 4 + 2 * (r % 2) + c % 2


@st.composite
def product_operands(draw: st.DrawFn) -> tuple[SharedLayout, SharedLayout]:
    a = SharedLayout(*draw(raw_fields(swizzled=False, max_rank=2)))
    b = SharedLayout(*draw(raw_fields(swizzled=False, max_rank=2)))
    return a, b


@given(product_operands())
def test_product_is_blocked(operands: tuple[SharedLayout, SharedLayout]) -> None:
    a, b = operands
    layout = a * b
    rank = max(a.rank, b.rank)
    a_shape = (1,) * (rank - a.rank) + a.shape
    b_shape = (1,) * (rank - b.rank) + b.shape
    assert layout.shape == tuple(x * y for x, y in zip(a_shape, b_shape))
    coords = np.indices(layout.shape)
    outer = tuple(c // n for c, n in zip(coords, b_shape))[rank - a.rank :]
    inner = tuple(c % n for c, n in zip(coords, b_shape))[rank - b.rank :]
    expected = a.table()[outer] * b.size + b.table()[inner]
    assert layout.table().tolist() == expected.tolist()


def test_product_errors() -> None:
    swizzled = SharedLayout((8,), (8,), (1,), Swizzle(1, 0, 2))
    with pytest.raises(LayoutError, match="product of two swizzled layouts"):
        swizzled * swizzled
    padded = SharedLayout((6,), (6,), (1,), Swizzle(1, 0, 2))
    with pytest.raises(LayoutError, match="size 6 is not a multiple of 2\\*\\*3"):
        shared_row_major(2) * padded
    with pytest.raises(LayoutError, match="right operand's size 3 is not a power of two"):
        swizzled * shared_row_major(3)
    with pytest.raises(LayoutError, match="product's right operand must be a SharedLayout"):
        shared_product(swizzled, 3)


# ----------------------------------------------------------------------------------------------
# Row-major swizzle for 16-byte row accesses
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("element_bits", "row_elements", "expected"),
    [
        (16, 64, Swizzle(3, 3, 3)),  # 128-byte f16 rows: CUTLASS's Swizzle<3,3,3> atom
        (16, 32, Swizzle(2, 3, 3)),  # 64-byte rows: Swizzle<2,3,3>
        (16, 16, Swizzle(1, 3, 3)),  # 32-byte rows: Swizzle<1,3,3>
        (16, 8, Swizzle(0, 3, 3)),  # 16-byte rows: 8 rows fill the 32 banks already
        (16, 128, Swizzle(3, 3, 4)),  # 256-byte rows: the row index starts at bit 7
        (16, 192, Swizzle(3, 3, 3)),  # 384-byte rows: 24 chunks, 3 times an odd number
        (8, 128, Swizzle(3, 4, 3)),  # 16 bytes are 16 elements
        (32, 32, Swizzle(3, 2, 3)),
        (4, 256, Swizzle(3, 5, 3)),  # 32 four-bit elements per 16-byte chunk
        (128, 8, Swizzle(3, 0, 3)),
    ],
)
def test_row_swizzle_table(element_bits: int, row_elements: int, expected: Swizzle) -> None:
    assert row_swizzle(row_elements, element_bits) == expected
    layout = shared_row_major_swizzle(8, row_elements, element_bits=element_bits)
    assert layout.swizzle == (None if expected.is_identity else expected)
    assert layout.mode_strides == shared_row_major(8, row_elements).mode_strides


@pytest.mark.parametrize(
    ("shape", "element_bits", "match"),
    [
        ((8, 60), 16, "a row of 60 elements of 16 bits is 120 bytes, expected a multiple of 16"),
        ((8, 64), 6, "element_bits 6 is not a power of two <= 128"),
        ((8, 64), 256, "element_bits 256 is not a power of two <= 128"),
        ((8, 64), 0, "element_bits must be >= 1"),
        ((), 16, "needs at least one dimension"),
    ],
)
def test_row_major_swizzle_invalid(shape: tuple, element_bits: int, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        shared_row_major_swizzle(*shape, element_bits=element_bits)


def bank_groups_of_column(table: np.ndarray, rows: range, column: int, element_bits: int) -> set:
    """The 16-byte bank groups ((byte address // 16) % 8) of one 16-byte column over `rows`."""
    return {int(table[r, column]) * element_bits // 8 // 16 % 8 for r in rows}


@pytest.mark.parametrize("element_bits", [4, 8, 16, 32])
@pytest.mark.parametrize("chunks", [1, 2, 3, 4, 6, 8, 12, 16, 24, 32])
def test_row_major_swizzle_is_conflict_free(element_bits: int, chunks: int) -> None:
    chunk = 128 // element_bits
    rows = 24
    layout = shared_row_major_swizzle(2, rows // 2, chunks * chunk, element_bits=element_bits)
    table = layout.table().reshape(rows, chunks * chunk)
    # a bijection onto [0, num_elements) that keeps each row's elements in the row
    assert sorted(table.ravel().tolist()) == list(range(layout.num_elements))
    assert all(set(table[r] // (chunks * chunk)) == {r} for r in range(rows))
    for r, v in itertools.product(range(rows), range(chunks)):
        start = table[r, v * chunk]
        # each 16-byte chunk stays contiguous and 16-byte aligned
        assert table[r, v * chunk : (v + 1) * chunk].tolist() == list(range(start, start + chunk))
        assert start % chunk == 0
    for first, v in itertools.product(range(rows - 7), range(chunks)):
        groups = bank_groups_of_column(table, range(first, first + 8), v * chunk, element_bits)
        assert len(groups) == 8


def test_a_layout_pickles_the_same_before_and_after_its_size_is_asked() -> None:
    """The cached `size` is not part of the pickled state (`backend.compile`'s memo keys on a
    program's pickle), and a layout unpickled computes it again."""
    import pickle

    layout = shared_row_major_swizzle(64, 64, element_bits=16)
    before = pickle.dumps(layout)
    size = layout.size
    assert pickle.dumps(layout) == before
    again = pickle.loads(before)
    assert again == layout and again.size == size

"""Tests of CuTe and linear-layout interop: `to_cute`, `from_cute`, `to_linear_layout`,
`from_linear_layout`.

Both sides are evaluated on every (thread, register) by evaluators written here: CuTe text is read
with `ast.literal_eval` and evaluated colexicographically; a linear layout is evaluated as the XOR
of the bases of the set input bits. Published layouts (CUTLASS's SM80 MMA thread-value layouts,
Triton's MMA linear layouts) are literal expected values.
"""

from __future__ import annotations

import ast
import functools
import itertools
import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layout_algebra import (
    LayoutError,
    RegisterLayout,
    column_local,
    column_spatial,
    from_cute,
    from_linear_layout,
    local,
    register_layout,
    replicate,
    spatial,
    to_cute,
    to_linear_layout,
)

# --------------------------------------------------------------------------------------------
# Independent evaluators
# --------------------------------------------------------------------------------------------


def _flat(value: object) -> list[int]:
    return [value] if isinstance(value, int) else [x for item in value for x in _flat(item)]


def cute_table(text: str, shape: tuple[int, ...]) -> np.ndarray:
    """[num_threads, local_size, rank] coordinates of a CuTe TV layout on a column-major tile."""
    layout_shape, layout_stride = (
        ast.literal_eval(half.replace("_", "")) for half in text.split(":")
    )
    (thread_sizes, value_sizes), (thread_strides, value_strides) = (
        [_flat(layout_shape[0]), _flat(layout_shape[1])],
        [_flat(layout_stride[0]), _flat(layout_stride[1])],
    )

    def index(x: int, sizes: list[int], strides: list[int]) -> int:
        total = 0
        for size, stride in zip(sizes, strides):
            total += (x % size) * stride
            x //= size
        return total

    table = np.zeros((math.prod(thread_sizes), math.prod(value_sizes), len(shape)), dtype=np.int64)
    for t in range(table.shape[0]):
        for i in range(table.shape[1]):
            flat = index(t, thread_sizes, thread_strides) + index(i, value_sizes, value_strides)
            for d, extent in enumerate(shape):
                table[t, i, d] = flat % extent
                flat //= extent
    return table


def xor_table(bases: dict, shape: tuple[int, ...]) -> np.ndarray:
    """[num_threads, local_size, rank] coordinates of a linear layout: XOR of set bits' bases."""
    registers = [tuple(b) for b in bases.get("register", [])]
    threads = [tuple(b) for b in bases.get("lane", [])] + [tuple(b) for b in bases.get("warp", [])]
    table = np.zeros((2 ** len(threads), 2 ** len(registers), len(shape)), dtype=np.int64)
    for t in range(table.shape[0]):
        for i in range(table.shape[1]):
            coord = [0] * len(shape)
            for bits, chosen in ((t, threads), (i, registers)):
                for k, basis in enumerate(chosen):
                    if bits >> k & 1:
                        coord = [c ^ b for c, b in zip(coord, basis)]
            table[t, i] = coord
    return table


@st.composite
def register_layouts(draw: st.DrawFn, power_of_two: bool = False) -> RegisterLayout:
    """Any register layout of rank 0-3 with at most 6 modes and some replication."""
    sizes = st.sampled_from([2, 4]) if power_of_two else st.integers(2, 4)
    rank = draw(st.integers(0, 3))
    mode_shape: list[int] = []
    shape = []
    for _ in range(rank):
        modes = draw(st.lists(sizes, max_size=2))
        mode_shape += modes
        shape.append(math.prod(modes))
    order = draw(st.permutations(range(len(mode_shape))))
    cut = draw(st.integers(0, len(order)))
    spatial_modes = list(order[:cut])
    for _ in range(draw(st.integers(0, 2))):
        spatial_modes.insert(draw(st.integers(0, len(spatial_modes))), -draw(sizes))
    return register_layout(shape, mode_shape, spatial_modes, order[cut:])


# --------------------------------------------------------------------------------------------
# CuTe: literal expected values
# --------------------------------------------------------------------------------------------

# CUTLASS include/cute/atom/mma_traits_sm80.hpp. A is (T32,V8) -> (M16,K16), B is
# (T32,V4) -> (N8,K16), C is (T32,V4) -> (M16,N8), each codomain column-major.
SM80_16x8_ROW = "((4,8),(2,2)):((32,1),(16,8))"
SM80_16x8x16_A = "((4,8),(2,2,2)):((32,1),(16,8,128))"
SM80_16x8x16_B = "((4,8),(2,2)):((16,1),(8,64))"
SM80_8x8_ROW = "((4,8),2):((16,1),8)"

CUTE_CASES = [
    # (layout, tile shape, CuTe text)
    # mma m16n8 accumulator (SM80_16x8_Row)
    (local(2, 1).spatial(8, 4).local(1, 2), SM80_16x8_ROW),
    # mma m16n8k16 A operand: a0,a1 | a2,a3 (rows +8) | a4..a7 (columns +8)
    (column_local(2, 2).spatial(8, 4).local(1, 2), SM80_16x8x16_A),
    # mma m16n8k16 B operand, as (n, k): b0,b1 | b2,b3 (k +8)
    (local(1, 2).spatial(8, 4).local(1, 2), SM80_16x8x16_B),
    # mma m8n8 accumulator (SM80_8x8_Row)
    (spatial(8, 4).local(1, 2), SM80_8x8_ROW),
    # one thread per element, row-major: dimension 1 is the fastest thread sub-mode
    (spatial(4, 8), "((8,4),1):((4,1),0)"),
    # column-major threads: dimension 0 is the fastest thread sub-mode
    (column_spatial(4, 8), "((4,8),1):((1,4),0)"),
    # one thread holds everything
    (local(4, 4), "(1,(4,4)):(0,(4,1))"),
    # replication is stride 0
    (spatial(4).replicate(2), "((2,4),1):((0,1),0)"),
    (replicate(4), "(4,1):(0,0)"),
    # a rank-1 layout with values inside threads
    (spatial(4).local(2), "(4,2):(2,1)"),
]


@pytest.mark.parametrize(("layout", "text"), CUTE_CASES)
def test_to_cute_literal(layout: RegisterLayout, text: str) -> None:
    assert to_cute(layout) == text


@pytest.mark.parametrize(("layout", "text"), CUTE_CASES)
def test_from_cute_literal(layout: RegisterLayout, text: str) -> None:
    assert from_cute(text, layout.shape) == layout
    np.testing.assert_array_equal(cute_table(text, layout.shape), layout.table())


def test_from_cute_mma_accumulator_owner() -> None:
    # Thread 0 holds (0,0),(0,1),(8,0),(8,1) in the m16n8 accumulator.
    layout = from_cute(SM80_16x8_ROW, (16, 8))
    assert [layout.map(0, i) for i in range(4)] == [(0, 0), (0, 1), (8, 0), (8, 1)]


def test_from_cute_static_integers_and_spaces() -> None:
    text = "((_4, _8), (_2, _2)) : ((_32, _1), (_16, _8))"
    assert from_cute(text, (16, 8)) == local(2, 1).spatial(8, 4).local(1, 2)


def test_from_cute_splits_a_mode_across_dimensions() -> None:
    # 32 threads with stride 1 on a (4, 8) tile walk dimension 0, then dimension 1.
    assert from_cute("(32,1):(1,0)", (4, 8)) == column_spatial(4, 8)


@pytest.mark.parametrize(
    ("text", "shape", "match"),
    [
        ("(4,2):(1,5)", (8,), "to index 8, outside the 8 elements"),
        ("(4,2):(1,-4)", (8,), "to index -4, outside"),
        ("(4,2):(1,4)", (4, 4), "cover 2 of its 4 elements"),
        ("(4,2):(1,0)", (4,), "register digit 0 .* step zero"),
        ("((2),4):((2),1)", (2, 4), "stride 1 where the mixed-radix split needs 2"),
        # Memory layouts: the tile's extents as two bare modes, or a swizzle composed in front.
        ("(8,64):(64,1)", (8, 64), "exactly the extents of tile \\(8, 64\\).*from_cute_memory"),
        ("Sw<3,3,3> o 0 o (8,64):(64,1)", (8, 64), "composes a swizzle .* from_cute_memory"),
        ("64:1", (64,), "two top-level modes .* from_cute_memory reads those"),
        ("(4,2:(1,4)", (8,), "expected ',' or '\\)'"),
        ("(4,2):((1,2),4)", (8,), "different nesting"),
        ("4:1", (4,), "two top-level modes"),
        ("(4,2,1):(1,4,0)", (8,), "two top-level modes"),
        ("(4,2)", (8,), "exactly one ':'"),
        ("(4,0):(1,4)", (8,), "sizes \\[0\\] must be positive"),
        ("(4,2):(1,4)x", (8,), "unexpected text 'x'"),
        ("(4,2):(1,4)", (0,), r"shape\[0\] must be >= 1"),
    ],
)
def test_from_cute_rejects(text: str, shape: tuple[int, ...], match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        from_cute(text, shape)


def test_to_cute_rejects_non_layout() -> None:
    with pytest.raises(LayoutError, match="expects a RegisterLayout"):
        to_cute("spatial(4)")


# --------------------------------------------------------------------------------------------
# CuTe: properties
# --------------------------------------------------------------------------------------------


@given(register_layouts())
def test_to_cute_evaluates_to_map(layout: RegisterLayout) -> None:
    np.testing.assert_array_equal(cute_table(to_cute(layout), layout.shape), layout.table())


@given(register_layouts())
def test_from_cute_inverts_to_cute(layout: RegisterLayout) -> None:
    assert from_cute(to_cute(layout), layout.shape) == layout


def _tuple_text(values: Sequence[int]) -> str:
    return f"({','.join(str(v) for v in values)})"


@given(register_layouts(), st.data())
def test_from_cute_accepts_refined_modes(layout: RegisterLayout, data: st.DataObject) -> None:
    # Split sub-modes (size a*b, stride s -> sizes (a, b), strides (s, a*s)) and add size-1
    # sub-modes of any stride: the function is unchanged, so from_cute must find the layout.
    shape_text, stride_text = to_cute(layout).split(":")
    modes = []
    for sizes, strides in zip(*(ast.literal_eval(half) for half in (shape_text, stride_text))):
        sizes, strides = _flat(sizes), _flat(strides)
        refined_sizes, refined_strides = [], []
        for size, stride in zip(sizes, strides):
            factors = [f for f in range(2, size) if size % f == 0]
            if factors and data.draw(st.booleans()):
                inner = data.draw(st.sampled_from(factors))
                refined_sizes += [inner, size // inner]
                refined_strides += [stride, inner * stride]
            else:
                refined_sizes.append(size)
                refined_strides.append(stride)
            if data.draw(st.booleans()):
                refined_sizes.append(1)
                refined_strides.append(data.draw(st.integers(0, 50)))
        modes.append((_tuple_text(refined_sizes), _tuple_text(refined_strides)))
    text = f"({modes[0][0]},{modes[1][0]}):({modes[0][1]},{modes[1][1]})"
    assert from_cute(text, layout.shape) == layout


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


@functools.cache
def _all_tables(shape: tuple[int, ...], num_threads: int, local_size: int) -> frozenset[bytes]:
    """The tables of every register layout of `shape` with that thread count and local size."""
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
                entries = spatial_set + [-r for r in replication]
                for spatial_order in itertools.permutations(entries):
                    for local_order in itertools.permutations(local_set):
                        layout = register_layout(shape, mode_shape, spatial_order, local_order)
                        found.add(layout.table().tobytes())
    return frozenset(found)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


MODE_SIZES = st.sampled_from([(1,), (2,), (3,), (4,), (2, 2), (2, 1), (1, 2)])


@settings(max_examples=100)
@given(MODE_SIZES, MODE_SIZES, st.data())
def test_from_cute_matches_brute_force(
    thread_sizes: tuple[int, ...], value_sizes: tuple[int, ...], data: st.DataObject
) -> None:
    # Arbitrary small CuTe layouts: from_cute succeeds exactly when the function is the table of
    # some register layout (found by enumerating them all), and then gives that function. The
    # tile holds num_threads * local_size / r elements for a replication r dividing num_threads.
    num_threads, local_size = math.prod(thread_sizes), math.prod(value_sizes)
    replication = data.draw(st.sampled_from(_divisors(num_threads)))
    num_elements = num_threads * local_size // replication
    rows = data.draw(st.sampled_from(_divisors(num_elements)))
    shape = (num_elements,) if rows == 1 else (rows, num_elements // rows)
    strides = st.integers(0, 8)
    thread_strides = tuple(data.draw(strides) for _ in thread_sizes)
    value_strides = tuple(data.draw(strides) for _ in value_sizes)
    text = (
        f"({_tuple_text(thread_sizes)},{_tuple_text(value_sizes)}):"
        f"({_tuple_text(thread_strides)},{_tuple_text(value_strides)})"
    )
    table = cute_table(text, shape)
    top = sum(
        (s - 1) * d for s, d in zip(thread_sizes + value_sizes, thread_strides + value_strides)
    )
    is_layout = top < math.prod(shape) and table.tobytes() in _all_tables(
        shape, num_threads, local_size
    )
    if is_layout:
        np.testing.assert_array_equal(from_cute(text, shape).table(), table)
    else:
        with pytest.raises(LayoutError, match="CuTe layout"):
            from_cute(text, shape)


# --------------------------------------------------------------------------------------------
# Linear layouts: literal expected values (Triton's LinearLayoutConversionsTest.cpp)
# --------------------------------------------------------------------------------------------

LANES_MMA = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]]
TRITON_CASES = [
    # (layout, Triton's bases); Triton also lists an empty "block" input.
    # mma v2 accumulator, one m16n8 tile
    (
        local(2, 1).spatial(8, 4).local(1, 2),
        {"register": [[0, 1], [8, 0]], "lane": LANES_MMA, "warp": [], "block": []},
    ),
    # MMAv2_32x32: one warp repeats the m16n8 tile 2 x 4 times
    (
        local(2, 4).local(2, 1).spatial(8, 4).local(1, 2),
        {
            "register": [[0, 1], [8, 0], [0, 8], [0, 16], [16, 0]],
            "lane": LANES_MMA,
            "warp": [],
            "block": [],
        },
    ),
    # MMAv2_ExtendDim2: a 16 x 128 tile
    (
        local(1, 16).local(2, 1).spatial(8, 4).local(1, 2),
        {
            "register": [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32], [0, 64]],
            "lane": LANES_MMA,
            "warp": [],
            "block": [],
        },
    ),
    # MMAv3_64x16: four warps down dimension 0
    (
        spatial(4, 1).local(1, 2).local(2, 1).spatial(8, 4).local(1, 2),
        {
            "register": [[0, 1], [8, 0], [0, 8]],
            "lane": LANES_MMA,
            "warp": [[16, 0], [32, 0]],
            "block": [],
        },
    ),
    # MMAv3_4x2Warps on 64 x 32: the eighth warp bit is a replication
    (
        replicate(2).spatial(4, 1).local(1, 4).local(2, 1).spatial(8, 4).local(1, 2),
        {
            "register": [[0, 1], [8, 0], [0, 8], [0, 16]],
            "lane": LANES_MMA,
            "warp": [[16, 0], [32, 0], [0, 0]],
            "block": [],
        },
    ),
]


def _as_tuples(bases: dict) -> dict:
    return {k: [tuple(b) for b in v] for k, v in bases.items() if k != "block"}


def test_triton_simple_blocked_has_no_warp_split_below_32_threads() -> None:
    # Triton pads lanes to 5 bits; with 16 threads ours has 4 lane bases and no warp bases.
    assert to_linear_layout(spatial(16)) == {
        "register": [],
        "lane": [(1,), (2,), (4,), (8,)],
        "warp": [],
    }


@pytest.mark.parametrize(("layout", "bases"), TRITON_CASES)
def test_to_linear_layout_triton_mma(layout: RegisterLayout, bases: dict) -> None:
    assert to_linear_layout(layout) == _as_tuples(bases)


@pytest.mark.parametrize(("layout", "bases"), TRITON_CASES)
def test_from_linear_layout_triton_mma(layout: RegisterLayout, bases: dict) -> None:
    assert from_linear_layout(bases, layout.shape) == layout
    np.testing.assert_array_equal(xor_table(bases, layout.shape), layout.table())


def test_from_linear_layout_wider_lanes() -> None:
    # AMD-style 64-lane warps: the thread index is lane + 64 * warp.
    bases = {"register": [], "lane": [[1], [2], [4], [8], [16], [32]], "warp": [[64]]}
    assert from_linear_layout(bases, (128,)) == spatial(128)


@pytest.mark.parametrize(
    ("bases", "shape", "match"),
    [
        ({"register": [[1, 1]]}, (2, 2), r"not a single bit of one dimension"),
        ({"register": [[3]]}, (4,), r"not a single bit"),
        ({"register": [[1]], "lane": [[1]]}, (2,), "both set bit 0 of dimension 0"),
        ({"register": [[1]]}, (4,), "sets bit 1 of dimension 0"),
        ({"register": [[0]], "lane": [[1]]}, (2,), r"register\[0\] is zero"),
        ({"register": [[4]]}, (4,), "outside the tile"),
        ({"register": [[1]], "ctas": []}, (2,), r"\['ctas'\] are not among"),
        ({"register": [[1]], "block": [[0]]}, (2,), "span several thread blocks"),
        ({"register": [[1, 0]]}, (2,), "expected 1 non-negative integer coordinates"),
        ({"register": [[-1]]}, (2,), "expected 1 non-negative integer coordinates"),
        ({"register": "x"}, (2,), "must be a list"),
        ([[1]], (2,), "must be a mapping"),
        ({"register": [[1]]}, (6,), r"shape\[0\] = 6: a linear layout needs powers of two"),
    ],
)
def test_from_linear_layout_rejects(bases: object, shape: tuple[int, ...], match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        from_linear_layout(bases, shape)


@pytest.mark.parametrize(
    ("layout", "match"),
    [
        (spatial(3), r"sizes \[3\]"),
        (spatial(4).replicate(3), r"sizes \[3\]"),
        (local(2, 6), r"sizes \[6\]"),
    ],
)
def test_to_linear_layout_rejects_non_power_of_two(layout: RegisterLayout, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        to_linear_layout(layout)


# --------------------------------------------------------------------------------------------
# Linear layouts: properties
# --------------------------------------------------------------------------------------------


@given(register_layouts(power_of_two=True))
def test_to_linear_layout_xor_evaluates_to_map(layout: RegisterLayout) -> None:
    bases = to_linear_layout(layout)
    assert len(bases["lane"]) == min(5, layout.num_threads.bit_length() - 1)
    np.testing.assert_array_equal(xor_table(bases, layout.shape), layout.table())


@given(register_layouts(power_of_two=True))
def test_from_linear_layout_inverts_to_linear_layout(layout: RegisterLayout) -> None:
    assert from_linear_layout(to_linear_layout(layout), layout.shape) == layout


@given(
    st.lists(st.sampled_from([1, 2, 4]), min_size=0, max_size=3),
    st.integers(0, 2),
    st.data(),
)
def test_from_linear_layout_accepts_any_bit_permutation(
    shape: list[int], zeros: int, data: st.DataObject
) -> None:
    # Deal the tile's bits (in any order) to register and thread inputs, with zero thread bases
    # for replication: every such linear layout is a register layout with that XOR function.
    bits = [
        tuple(1 << b if d == dim else 0 for d in range(len(shape)))
        for dim, extent in enumerate(shape)
        for b in range(extent.bit_length() - 1)
    ]
    bits = data.draw(st.permutations(bits))
    cut = data.draw(st.integers(0, len(bits)))
    threads = list(bits[cut:])
    for _ in range(zeros):
        threads.insert(data.draw(st.integers(0, len(threads))), (0,) * len(shape))
    bases = {"register": list(bits[:cut]), "lane": threads[:5], "warp": threads[5:]}
    layout = from_linear_layout(bases, tuple(shape))
    np.testing.assert_array_equal(layout.table(), xor_table(bases, tuple(shape)))
    assert to_linear_layout(layout) == bases


@st.composite
def bases_4x4(draw: st.DrawFn) -> tuple[list, list]:
    """(register, lane) bases on a (4, 4) tile: the tile's four bits dealt in any order, with
    zero lane bases for replication, then, for about half the draws, one change that usually
    breaks it (a basis replaced by any pair up to (4, 4), one dropped, one repeated)."""
    bits = list(draw(st.permutations([(0, 1), (0, 2), (1, 0), (2, 0)])))
    cut = draw(st.integers(0, 4))
    registers, lanes = bits[:cut], bits[cut:]
    for _ in range(draw(st.integers(0, 1))):
        lanes.insert(draw(st.integers(0, len(lanes))), (0, 0))
    change = draw(st.sampled_from(["none", "none", "replace", "drop", "repeat"]))
    target = draw(st.sampled_from([bases for bases in (registers, lanes) if bases]))
    k = draw(st.integers(0, len(target) - 1))
    if change == "replace":
        target[k] = draw(st.tuples(st.integers(0, 4), st.integers(0, 4)))
    elif change == "drop":
        del target[k]
    elif change == "repeat":
        target.insert(k, target[k])
    return registers, lanes


@settings(max_examples=100)
@given(bases_4x4())
def test_from_linear_layout_matches_brute_force(case: tuple[list, list]) -> None:
    # Accepted exactly when the XOR function is the table of some register layout of the (4, 4)
    # tile (found by enumerating them all), and then with that function.
    registers, lanes = case
    bases = {"register": registers, "lane": lanes}
    table = xor_table(bases, (4, 4))
    threads, size = table.shape[:2]
    is_layout = (
        threads * size % 16 == 0
        and bool((table < 4).all())
        and table.tobytes() in _all_tables((4, 4), threads, size)
    )
    if is_layout:
        np.testing.assert_array_equal(from_linear_layout(bases, (4, 4)).table(), table)
    else:
        with pytest.raises(LayoutError, match="linear layout"):
            from_linear_layout(bases, (4, 4))

"""TMA boxes (`layout_algebra.tma_box`): the tensor-map box and swizzle that write a tile of a
shared layout, and the tensor map's arguments.

- Exact tables: swizzled row-major tiles of 128-, 64- and 32-byte rows get the 128B, 64B and
  32B modes; a ring's stages get their starts; unswizzled rows get "none"; a padded row, a
  box past 256 and a stage off the swizzle's repeat get None; the arguments of a row-major
  weight tensor; a ring of A^T tiles (each token's k values one 128-byte row) gets the box in
  order (1, 0), its byte offsets and the arguments of the permuted view.
- Properties: any box (rank 1 to 3, any allowed mode and width, any order) written as a shared
  layout at any aligned stage is given back, its byte offsets the layout's, and the solver
  proves the claim.
- Differential: the solver against the brute-force table (a wrong mode, or a wrong order, is
  refuted with a counterexample where the tables differ).
- Bad input is a LayoutError naming the value.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layout_algebra.errors import LayoutError
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.shared import (
    SharedLayout,
    Swizzle,
    row_swizzle,
    shared_row_major,
    shared_row_major_swizzle,
)
from layout_algebra.symbolic import var
from layout_algebra.tma_box import TmaBox, derive_box
from proofs import check_equivalent

PROOF_TIMEOUT = 20.0


@pytest.mark.parametrize(
    ("bits", "columns", "mode"),
    [(16, 64, "128B"), (16, 32, "64B"), (16, 16, "32B"), (8, 128, "128B"), (32, 16, "64B")],
)
def test_swizzled_row_major_tiles(bits: int, columns: int, mode: str) -> None:
    layout = shared_row_major_swizzle(64, columns, element_bits=bits)
    box = derive_box(layout, bits)
    assert box == TmaBox((64, columns), mode, bits, 0)
    assert box.nbytes == 64 * columns * bits // 8
    assert check_equivalent(*box.claim(layout, (0, 0), (0, 1)), PROOF_TIMEOUT).holds


def test_ring_stages_start_one_stage_apart() -> None:
    layout = shared_row_major_swizzle(3, 128, 64, element_bits=16)
    starts = [derive_box(layout, 16, (stage, 0, 0), (1, 2)).start for stage in range(3)]
    assert starts == [0, 16384, 32768]


def test_three_dimensional_box() -> None:
    """A (2, 8, 64) f16 tile swizzled over its 16 rows of 128 bytes is one 3-D box."""
    layout = shared_row_major_swizzle(2, 8, 64, element_bits=16)
    box = derive_box(layout, 16)
    assert box == TmaBox((2, 8, 64), "128B", 16, 0)
    assert check_equivalent(*box.claim(layout, (0, 0, 0), (0, 1, 2)), PROOF_TIMEOUT).holds


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        (shared_row_major(64, 64), TmaBox((64, 64), "none", 16, 0)),
        (shared_row_major(64, 256), TmaBox((64, 256), "none", 16, 0)),
        (shared_row_major(64, 68), None),  # rows of 136 bytes: not whole 16-byte chunks
        (shared_row_major(64, 512), None),  # a box extent past 256
        # Columns first in memory: the box writes rows contiguously, the layout does not.
        (SharedLayout((64, 64), (64, 64), (1, 64)), None),
    ],
    ids=["plain", "wide", "padded", "too-wide", "column-major"],
)
def test_unswizzled_and_impossible_tiles(layout: SharedLayout, expected: TmaBox | None) -> None:
    assert derive_box(layout, 16) == expected


def test_a_stage_off_the_swizzle_repeat_has_no_box() -> None:
    """A ring of 4-row stages of 64 f16 (512 bytes) with the 128B swizzle (a 1 KiB repeat):
    stage 1 starts mid-repeat, its rows 4..7 XORed by 4..7 where a box at a 128-byte aligned
    address would XOR by 0..3 - no box; stage 2 starts on a repeat - a box."""
    layout = shared_row_major_swizzle(4, 4, 64, element_bits=16)
    assert derive_box(layout, 16, (1, 0, 0), (1, 2)) is None
    assert derive_box(layout, 16, (2, 0, 0), (1, 2)) == TmaBox((4, 64), "128B", 16, 1024)
    assert derive_box(layout, 16) == TmaBox((4, 4, 64), "128B", 16, 0)


def test_a_wrong_mode_is_refuted_with_a_counterexample() -> None:
    layout = shared_row_major_swizzle(64, 64, element_bits=16)
    wrong = TmaBox((64, 64), "none", 16, 0)
    result = check_equivalent(*wrong.claim(layout, (0, 0), (0, 1)), PROOF_TIMEOUT)
    assert not result.holds
    r, c = result.counterexample["coord"]
    assert wrong.byte_offset(r, c) != 2 * layout.offset((r, c))


def test_tensor_map_arguments_of_a_weight_tensor() -> None:
    box = TmaBox((64, 64), "128B", 16, 0)
    arguments = box.tensor_map_arguments(GlobalLayout((4096, 12288), (12288, 1)))
    assert arguments == {
        "rank": 2,
        "global_dim": (12288, 4096),
        "global_strides": (24576,),
        "box_dim": (64, 64),
        "element_strides": (1, 1),
        "swizzle": "128B",
    }
    staged = TmaBox((2, 8, 64), "128B", 8, 0).tensor_map_arguments(
        GlobalLayout((4, 64, 4096), (64 * 4096, 4096, 1))
    )
    assert staged["global_strides"] == (4096, 64 * 4096)
    assert staged["box_dim"] == (64, 8, 2)


# A ring of 3 stages of A^T tiles (k, t) of 64 x 64 f16: (s, k, t) at s*4096 + swizzle(64 t + k),
# each token's 64 k values one 128-byte row (a K-major wgmma operand).
TRANSPOSED_RING = SharedLayout((3, 64, 64), (3, 64, 64), (4096, 1, 64), row_swizzle(64, 16))


def test_a_transposed_tile_is_a_box_with_k_innermost() -> None:
    for stage in range(3):
        box = derive_box(TRANSPOSED_RING, 16, (stage, 0, 0), (1, 2), order=(1, 0))
        assert box == TmaBox((64, 64), "128B", 16, 8192 * stage, (1, 0))
        assert check_equivalent(
            *box.claim(TRANSPOSED_RING, (stage, 0, 0), (1, 2)), PROOF_TIMEOUT
        ).holds
    # In the identity order t would be innermost, each k a row; the layout's rows are tokens.
    assert derive_box(TRANSPOSED_RING, 16, (0, 0, 0), (1, 2)) is None


@pytest.mark.parametrize(
    ("k", "t", "offset"),
    [
        (0, 0, 8192),  # stage 1's first byte
        (1, 0, 8194),  # k is contiguous
        (8, 0, 8208),  # the next 16-byte chunk of token 0's row
        (0, 1, 8192 + 144),  # token 1's row, 128 bytes on, its chunk 0 XORed to chunk 1
        (8, 1, 8192 + 128),  # its chunk 1 XORed to chunk 0
        (63, 7, 8192 + 7 * 128 + 126 - 7 * 16),  # the last element of the 1 KiB repeat
    ],
)
def test_transposed_byte_offsets(k: int, t: int, offset: int) -> None:
    box = TmaBox((64, 64), "128B", 16, 8192, (1, 0))
    assert box.byte_offset(k, t) == offset == 2 * TRANSPOSED_RING.offset((1, k, t))


def test_a_wrong_order_is_refuted_with_a_counterexample() -> None:
    """The right mode and start in the layout's order: the solver finds a misplaced element."""
    wrong = TmaBox((64, 64), "128B", 16, 0)
    result = check_equivalent(*wrong.claim(TRANSPOSED_RING, (0, 0, 0), (1, 2)), PROOF_TIMEOUT)
    assert result.holds is False
    k, t = result.counterexample["coord"]
    assert wrong.byte_offset(k, t) != 2 * TRANSPOSED_RING.offset((0, k, t))


def test_tensor_map_arguments_of_a_permuted_view() -> None:
    """A^T of a row-major A (m=300, k=4096), tiles of 64 k by 128 tokens: TMA order is (k, m)
    and the box (64, 128), k innermost."""
    box = TmaBox((64, 128), "128B", 16, 0, (1, 0))
    assert box.tensor_map_arguments(GlobalLayout((4096, 300), (1, 4096))) == {
        "rank": 2,
        "global_dim": (4096, 300),
        "global_strides": (8192,),
        "box_dim": (64, 128),
        "element_strides": (1, 1),
        "swizzle": "128B",
    }
    # Rank 3, the unit stride in the middle: TMA order (1, 2, 0).
    staged = TmaBox((2, 64, 8), "128B", 16, 0, (0, 2, 1)).tensor_map_arguments(
        GlobalLayout((4, 64, 256), (64 * 256, 1, 64))
    )
    assert (staged["global_dim"], staged["global_strides"], staged["box_dim"]) == (
        (64, 256, 4),
        (128, 32768),
        (64, 8, 2),
    )


# ------------------------------------------------------------------------------ properties


@st.composite
def boxes(draw: st.DrawFn) -> tuple[TmaBox, int]:
    """A box in any order that obeys the map's rules, and the stage index it is written at."""
    bits = draw(st.sampled_from([8, 16, 32, 64]))
    esz = bits // 8
    mode = draw(st.sampled_from(["none", "32B", "64B", "128B"]))
    if mode != "none" and esz > 16:
        mode = "none"
    span = 16 << {"none": 3, "32B": 1, "64B": 2, "128B": 3}[mode]
    inner = draw(st.sampled_from([b for b in (16, 32, 64, 128) if b <= span])) // esz
    outer = draw(st.lists(st.sampled_from([1, 2, 4, 8, 16]), min_size=0, max_size=2))
    order = draw(st.permutations(range(len(outer) + 1)))
    # The box's extents outermost first, then placed in the layout's order.
    in_box_order = (*outer, inner)
    extents = [0] * len(order)
    for position, dim in enumerate(order):
        extents[dim] = in_box_order[position]
    stage = draw(st.integers(0, 2))
    return TmaBox(tuple(extents), mode, bits, 0, tuple(order)), stage


@settings(max_examples=60, deadline=None)
@given(boxes())
def test_any_box_in_any_order_written_as_a_layout_is_given_back(
    case: tuple[TmaBox, int],
) -> None:
    box, stage = case
    esz = box.element_bits // 8
    bits = {"none": 0, "32B": 1, "64B": 2, "128B": 3}[box.swizzle]
    swizzle = Swizzle(bits, 4 - int(math.log2(esz)), 3) if bits else None
    # A ring of 3 stages of the box, each rounded up to the box's alignment; within a stage
    # the box's dimensions row-major in its order.
    stage_elements = -(-box.nbytes // box.alignment) * box.alignment // esz
    strides = [0] * len(box.extents)
    step = 1
    for dim in reversed(box.order):
        strides[dim], step = step, step * box.extents[dim]
    layout = SharedLayout((3, *box.extents), (3, *box.extents), (stage_elements, *strides), swizzle)
    origin = (stage,) + (0,) * len(box.extents)
    dims = tuple(range(1, len(box.extents) + 1))
    found = derive_box(layout, box.element_bits, origin, dims, order=box.order)
    assert found is not None
    assert found.order == box.order
    assert found.start == stage * stage_elements * esz
    # Where the layout holds each element, in bytes (the solver's claim, by enumeration).
    index = np.indices(box.extents, dtype=np.int64)
    held = esz * layout.offset((np.full(index.shape[1:], stage), *index))
    np.testing.assert_array_equal(found.table(), held)
    assert check_equivalent(*found.claim(layout, origin, dims), PROOF_TIMEOUT).holds


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (((), "none", 16, 0), r"extents=\(\); expected 1 to 5"),
        (((1, 1, 1, 1, 1, 8), "none", 16, 0), "expected 1 to 5"),
        (((512, 64), "none", 16, 0), "extent 512 is past 256"),
        (((64, 4), "none", 16, 0), "innermost extent 4 is 8 bytes"),
        (((64, 128), "128B", 16, 0), "256 bytes, past the 128B swizzle's row of 128"),
        (((64, 64), "128B", 16, 512), "start=512; expected a multiple of 1024"),
        (((64, 64), "none", 16, 16), "start=16; expected a multiple of 128"),
        (((64, 64), "16B", 16, 0), "swizzle='16B'"),
        (((64, 64), "none", 4, 0), "element_bits=4"),
        # The innermost extent is the one along order[-1].
        (((4, 64), "none", 16, 0, (1, 0)), "innermost extent 4 is 8 bytes"),
        (((64, 64), "none", 16, 0, (0, 0)), r"order=\(0, 0\); expected a permutation of \(0, 1\)"),
        (((64, 64), "none", 16, 0, (0, 1, 2)), r"order=\(0, 1, 2\)"),
        (((64, 64), "none", 16, 0, (1,)), r"order=\(1,\)"),
        (((64, 64), "none", 16, 0, (1.0, 0)), r"order=\(1.0, 0\)"),
        (((64, 64), "none", 16, 0, (True, False)), r"order=\(True, False\)"),
        (((64, 64), "none", 16, 0, "10"), "order='10'"),
    ],
)
def test_bad_boxes_are_refused(fields: tuple, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        TmaBox(*fields)


@pytest.mark.parametrize(
    ("global_layout", "message"),
    [
        (GlobalLayout((64, 100), (100, 1)), "global stride 200 bytes"),
        (GlobalLayout((64, 64), (1, 64)), "innermost global stride is 64"),
        (GlobalLayout((64, var("K", 1)), (var("K", 1), 1)), "is symbolic; bind it first"),
        (GlobalLayout((4, 64, 64), (4096, 64, 1)), "rank 3, the box 2"),
        ("64:1", "is not a GlobalLayout"),
    ],
)
def test_bad_global_tensors_are_refused(global_layout: object, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        TmaBox((64, 64), "128B", 16, 0).tensor_map_arguments(global_layout)


@pytest.mark.parametrize(
    ("global_layout", "message"),
    [
        # The box's innermost dimension is 0: its stride must be 1, the other's whole chunks.
        (GlobalLayout((64, 64), (64, 1)), r"innermost global stride is 64 \(dimension 0\)"),
        (GlobalLayout((100, 64), (1, 100)), "global stride 200 bytes"),
    ],
)
def test_bad_global_tensors_of_a_permuted_box_are_refused(
    global_layout: GlobalLayout, message: str
) -> None:
    with pytest.raises(LayoutError, match=message):
        TmaBox((64, 64), "128B", 16, 0, (1, 0)).tensor_map_arguments(global_layout)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((shared_row_major(64, 64), 12), "element_bits=12"),
        ((shared_row_major(64, 64), 16, (0, 0), (2,)), r"dims=\(2,\)"),
        ((shared_row_major(64, 64), 16, (0, 0), (0, 0)), "different dimensions"),
        ((shared_row_major(64, 64), 16, (8, 0), (0, 1)), "leaves the layout's extent 64"),
        ((shared_row_major(64, 64), 16, (0, 0), ()), "expected 1 to 5 dimensions"),
        (("64:1", 16), "is not a SharedLayout"),
        ((shared_row_major(64, 64), 16, (0, 0), (0, 1), (64, 64), (2, 0)), r"order=\(2, 0\)"),
        ((shared_row_major(64, 64), 16, (0, 0), (0, 1), (64, 64), None, ["16B"]), "'16B'"),
    ],
)
def test_bad_derivations_are_refused(arguments: tuple, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        derive_box(*arguments)


def test_a_small_tile_matches_several_modes_and_modes_picks_one() -> None:
    """Eight 32-byte rows (256 bytes) with the 32-byte swizzle: the 128-byte mode's XOR of
    address bits 7 to 9 into 4 to 6 is the 32-byte mode's on bit 7 alone there, so the first
    stage matches both (the widest is found first); the second stage, 256 bytes on, only the
    32-byte mode. `modes` restricts the search to the one mode both stages share."""
    layout = SharedLayout((2, 8, 16), (2, 8, 16), (128, 16, 1), row_swizzle(16, 16))
    first = derive_box(layout, 16, (0, 0, 0), (1, 2))
    second = derive_box(layout, 16, (1, 0, 0), (1, 2))
    assert (first.swizzle, second.swizzle) == ("128B", "32B")
    assert derive_box(layout, 16, (0, 0, 0), (1, 2), modes=["32B"]).swizzle == "32B"
    assert derive_box(layout, 16, (1, 0, 0), (1, 2), modes=["128B", "64B"]) is None

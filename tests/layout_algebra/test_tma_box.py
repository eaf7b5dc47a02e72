"""TMA boxes (`layout_algebra.tma_box`): the tensor-map box and swizzle that write a tile of a
shared layout, and the tensor map's arguments.

- Exact tables: swizzled row-major tiles of 128-, 64- and 32-byte rows get the 128B, 64B and
  32B modes; a ring's stages get their starts; unswizzled rows get "none"; a padded row, a
  box past 256 and a stage off the swizzle's repeat get None; the arguments of a row-major
  weight tensor.
- Properties: any box (rank 1 to 3, any allowed mode and width) written as a shared layout at
  any aligned stage is given back, and the solver proves the claim.
- Differential: the solver against the brute-force table (a wrong mode is refuted with a
  counterexample where the tables differ).
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
from layout_algebra.shared import SharedLayout, Swizzle, shared_row_major, shared_row_major_swizzle
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


# ------------------------------------------------------------------------------ properties


@st.composite
def boxes(draw: st.DrawFn) -> tuple[TmaBox, int]:
    """A box that obeys the map's rules, and the stage index it is written at."""
    bits = draw(st.sampled_from([8, 16, 32, 64]))
    esz = bits // 8
    mode = draw(st.sampled_from(["none", "32B", "64B", "128B"]))
    if mode != "none" and esz > 16:
        mode = "none"
    span = 16 << {"none": 3, "32B": 1, "64B": 2, "128B": 3}[mode]
    inner = draw(st.sampled_from([b for b in (16, 32, 64, 128) if b <= span])) // esz
    outer = draw(st.lists(st.sampled_from([1, 2, 4, 8, 16]), min_size=0, max_size=2))
    extents = (*outer, inner)
    stage = draw(st.integers(0, 2))
    return TmaBox(extents, mode, bits, 0), stage


@settings(max_examples=40, deadline=None)
@given(boxes())
def test_any_box_written_as_a_layout_is_given_back(case: tuple[TmaBox, int]) -> None:
    box, stage = case
    esz = box.element_bits // 8
    bits = {"none": 0, "32B": 1, "64B": 2, "128B": 3}[box.swizzle]
    swizzle = Swizzle(bits, 4 - int(math.log2(esz)), 3) if bits else None
    # A ring of 3 stages of the box, each rounded up to the box's alignment.
    stage_elements = -(-box.nbytes // box.alignment) * box.alignment // esz
    inner = shared_row_major(*box.extents)
    layout = SharedLayout(
        (3, *box.extents),
        (3, *inner.mode_shape),
        (stage_elements, *inner.mode_strides),
        swizzle,
    )
    origin = (stage,) + (0,) * len(box.extents)
    dims = tuple(range(1, len(box.extents) + 1))
    found = derive_box(layout, box.element_bits, origin, dims)
    assert found is not None
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
    ("arguments", "message"),
    [
        ((shared_row_major(64, 64), 12), "element_bits=12"),
        ((shared_row_major(64, 64), 16, (0, 0), (2,)), r"dims=\(2,\)"),
        ((shared_row_major(64, 64), 16, (0, 0), (0, 0)), "different dimensions"),
        ((shared_row_major(64, 64), 16, (8, 0), (0, 1)), "leaves the layout's extent 64"),
        ((shared_row_major(64, 64), 16, (0, 0), ()), "expected 1 to 5 dimensions"),
        (("64:1", 16), "is not a SharedLayout"),
    ],
)
def test_bad_derivations_are_refused(arguments: tuple, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        derive_box(*arguments)

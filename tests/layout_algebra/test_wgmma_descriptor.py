"""wgmma shared-memory matrix descriptors (`layout_algebra.wgmma_descriptor`).

- Exact tables: the PTX ISA's worked examples (K-major without swizzle and with 32B for tf32,
  MN-major without swizzle, 32B and 64B for bf16) give their LBO, SBO and encodings; the
  library's swizzled row-major tiles give the 128B/64B/32B K-major and MN-major descriptors,
  one per k step.
- Properties: a tile of any canonical layout (random major-ness, swizzle, element width,
  repeats and strides) gets back the descriptor it was built from, and the solver proves the
  claim; a layout no descriptor reads gives None.
- Differential: the descriptor's address function against the PTX's canonical CuTe layout
  evaluated by `layout_algebra.cute`, then the byte swizzle; the derivation's brute-force check
  against the solver (a wrong SBO is refuted with a counterexample).
- Bad input is a LayoutError naming the value.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layout_algebra import cute
from layout_algebra.errors import LayoutError
from layout_algebra.interop import from_cute_memory
from layout_algebra.shared import Swizzle, shared_row_major, shared_row_major_swizzle
from layout_algebra.wgmma_descriptor import WgmmaDescriptor, derive_descriptor
from proofs import check_equivalent

PROOF_TIMEOUT = 20.0


def _fields(word: int) -> tuple[int, int, int, int]:
    """(start >> 4, LBO >> 4, SBO >> 4, swizzle code) of a descriptor word."""
    mask = (1 << 14) - 1
    return word & mask, word >> 16 & mask, word >> 32 & mask, word >> 62


# (CuTe text of the PTX example, tile shape, element bits, rows, major, swizzle, LBO, SBO)
PTX_EXAMPLES = [
    ("((8,2),(4,4)):((4,32),(1,64))", (16, 16), 32, 16, "k", "none", 256, 128),
    ("Sw<1,2,3> o ((8,2),(4,4)):((8,64),(1,4))", (16, 16), 32, 16, "k", "32B", 16, 256),
    ("((8,1,2),(8,2)):((1,8,64),(8,128))", (16, 16), 16, 16, "mn", "none", 256, 128),
    ("Sw<1,3,3> o ((8,2,2),(8,2)):((1,8,128),(16,256))", (32, 16), 16, 32, "mn", "32B", 256, 512),
    ("Sw<2,3,3> o ((8,4,2),(8,2)):((1,8,256),(32,512))", (64, 16), 16, 64, "mn", "64B", 512, 1024),
]


@pytest.mark.parametrize(
    ("text", "shape", "bits", "rows", "major", "swizzle", "lbo", "sbo"), PTX_EXAMPLES
)
def test_ptx_examples(
    text: str, shape: tuple, bits: int, rows: int, major: str, swizzle: str, lbo: int, sbo: int
) -> None:
    """The PTX's swizzles are on byte addresses (Swizzle<B,4,3>); on the element offsets of a
    b-bit type they are Swizzle(B, 4 - log2(b / 8), 3), as written here."""
    layout = from_cute_memory(text, shape)
    found = derive_descriptor(layout, bits, (0, 0), (0, 1), rows)
    assert found == WgmmaDescriptor(major, swizzle, 0, lbo, sbo, bits, rows)
    code = {"none": 0, "128B": 1, "64B": 2, "32B": 3}[swizzle]
    assert _fields(found.encode()) == (0, lbo >> 4, sbo >> 4, code)


def test_ptx_example_second_k_step_moves_the_start() -> None:
    """K-major tf32 without swizzle: the second k8 step starts LBO * 2 bytes on (the 8x2 chunk
    tile's third chunk column); with 32B swizzle, one 32-byte row further."""
    plain = from_cute_memory("((8,2),(4,4)):((4,32),(1,64))", (16, 16))
    assert derive_descriptor(plain, 32, (0, 8), (0, 1), 16).start == 512
    swizzled = from_cute_memory("Sw<1,2,3> o ((8,2),(4,4)):((8,64),(1,4))", (16, 16))
    assert derive_descriptor(swizzled, 32, (0, 8), (0, 1), 16).start == 32


@pytest.mark.parametrize(
    ("bits", "row_bytes", "swizzle"),
    [(16, 128, "128B"), (16, 64, "64B"), (16, 32, "32B"), (8, 128, "128B"), (32, 64, "64B")],
)
def test_swizzled_row_major_tiles_are_k_major(bits: int, row_bytes: int, swizzle: str) -> None:
    """A (64, K) row-major swizzled tile (K a row of `row_bytes`): one descriptor per 32-byte
    k step, SBO eight rows, start moving 32 bytes a step; the claims prove."""
    columns = row_bytes * 8 // bits
    layout = shared_row_major_swizzle(64, columns, element_bits=bits)
    k = 256 // bits
    for step in range(row_bytes // 32):
        found = derive_descriptor(layout, bits, (0, step * k), (0, 1), 64)
        assert found == WgmmaDescriptor("k", swizzle, 32 * step, 16, 8 * row_bytes, bits, 64)
        assert check_equivalent(*found.claim(layout, (0, step * k), (0, 1)), PROOF_TIMEOUT).holds


def test_swizzled_row_major_b_tile_is_mn_major() -> None:
    """B as a (K, N) row-major f16 tile with 128-byte rows of N: MN-major, 128B swizzle, for an
    instruction of N = 64 (one swizzle row of N) at each k16 step: SBO is 8 rows of K."""
    layout = shared_row_major_swizzle(64, 64, element_bits=16)
    for step in range(4):
        found = derive_descriptor(layout, 16, (16 * step, 0), (1, 0), 64)
        assert found == WgmmaDescriptor("mn", "128B", 2048 * step, 16, 1024, 16, 64)
        claim = found.claim(layout, (16 * step, 0), (1, 0))
        assert check_equivalent(*claim, PROOF_TIMEOUT).holds


def test_staged_layout_takes_a_full_origin() -> None:
    """A (stages, 64, 64) f16 ring: stage 1's tile starts one stage (8 KiB) on."""
    layout = shared_row_major_swizzle(2, 64, 64, element_bits=16)
    found = derive_descriptor(layout, 16, (1, 0, 16), (1, 2), 64)
    assert found == WgmmaDescriptor("k", "128B", 8192 + 32, 16, 1024, 16, 64)
    assert found.alignment == 1024


def test_a_layout_no_descriptor_reads_gives_none() -> None:
    """Unswizzled row-major rows of 128 bytes: K-major without swizzle wants 16-byte rows in a
    core matrix, the 128B mode wants the XOR."""
    assert derive_descriptor(shared_row_major(64, 64), 16, (0, 0), (0, 1), 64) is None
    # A padded row (136 bytes) breaks every mode too.
    assert derive_descriptor(shared_row_major(64, 68), 16, (0, 0), (0, 1), 64) is None


def test_a_wrong_descriptor_is_refuted_with_a_counterexample() -> None:
    layout = shared_row_major_swizzle(64, 64, element_bits=16)
    found = derive_descriptor(layout, 16, (0, 0), (0, 1), 64)
    wrong = WgmmaDescriptor("k", "128B", 0, 16, found.stride_byte_offset + 16, 16, 64)
    result = check_equivalent(*wrong.claim(layout, (0, 0), (0, 1)), PROOF_TIMEOUT)
    assert not result.holds and result.counterexample is not None
    r, c = result.counterexample["coord"]
    assert wrong.byte_offset(r, c) != found.byte_offset(r, c)


# ------------------------------------------------------------------------------ differential


def _canonical_text(descriptor: WgmmaDescriptor) -> tuple[str, int]:
    """The PTX's canonical CuTe layout of `descriptor`'s tile in elements (its table's LBO and
    SBO divided by the element's bytes), and the number of rows it spans (the tile's)."""
    t, esz = descriptor.chunk_elements, descriptor.element_bits // 8
    lbo, sbo = descriptor.leading_byte_offset // esz, descriptor.stride_byte_offset // esz
    s = 1 << descriptor.swizzle_bits
    m = descriptor.rows
    if descriptor.major == "k":
        if descriptor.swizzle == "none":
            return f"((8,{m // 8}),({t},2)):(({t},{sbo}),(1,{lbo}))", m
        return f"((8,{m // 8}),({t},2)):(({s * t},{sbo}),(1,{t}))", m
    if descriptor.swizzle == "none":
        return f"(({t},1,{m // t}),(8,{2 * t // 8})):((1,{t},{sbo}),({t},{lbo}))", m
    return f"(({t},{s},{m // (t * s)}),(8,{2 * t // 8})):((1,{t},{lbo}),({s * t},{sbo}))", m


@st.composite
def descriptors(draw: st.DrawFn) -> WgmmaDescriptor:
    """A descriptor whose tile's elements never overlap: the blocks the canonical layout
    repeats (a core matrix of 128 bytes, or 8 chunk rows of a swizzled one) are placed by LBO
    and SBO as an inner and an outer grid, the outer one possibly with gaps."""
    bits = draw(st.sampled_from([8, 16, 32]))
    t = 128 // bits
    major = draw(st.sampled_from(["k", "mn"]))
    swizzle = draw(st.sampled_from(["none", "32B", "64B", "128B"]))
    s = 1 << {"none": 0, "32B": 1, "64B": 2, "128B": 3}[swizzle]
    if major == "mn" and 2 * t < 8:  # tf32 MN-major: a k8 tile is one 8-chunk column
        major = "k"
    # Rows: whole repeats of the canonical layout (T * s rows MN-major), multiples of 8.
    unit = math.lcm(8, t * s) if major == "mn" else 8
    rows = unit * draw(st.integers(1, max(1, 64 // unit)))
    block = 128 * s  # bytes of one repeated block
    gap = draw(st.integers(1, 3))
    if major == "k" and swizzle != "none":
        lbo, sbo = 16, block * gap  # LBO unused; SBO steps over 8-row blocks
    else:
        # The two grids: SBO over row blocks, LBO over column blocks (K-major: 2 chunks;
        # MN-major: 2T / 8 eight-column groups).
        row_blocks = rows // (8 if major == "k" else t * s)
        column_blocks = 2 if major == "k" else max(1, 2 * t // 8)
        if draw(st.booleans()):
            sbo, lbo = block, block * row_blocks * gap
        else:
            lbo, sbo = block, block * column_blocks * gap
        if major == "mn" and swizzle != "none":
            lbo, sbo = sbo, lbo  # swizzled MN-major: LBO steps rows, SBO columns
    start = 16 * draw(st.integers(0, 64))
    return WgmmaDescriptor(major, swizzle, start, lbo, sbo, bits, rows)


@settings(max_examples=60, deadline=None)
@given(descriptors())
def test_address_function_is_the_ptx_canonical_layout(descriptor: WgmmaDescriptor) -> None:
    """Element (r, c) at CuTe's index r + rows * c of the canonical layout, in bytes, plus the
    start, then Swizzle<B, 4, 3> on the byte address."""
    text, rows = _canonical_text(descriptor)
    layout = cute.parse(text)
    esz = descriptor.element_bits // 8
    swizzle = Swizzle(descriptor.swizzle_bits, 4, 3)
    expected = np.array(
        [
            [
                swizzle(descriptor.start + esz * layout(r + rows * c))
                for c in range(layout.size // rows)
            ]
            for r in range(rows)
        ]
    )
    np.testing.assert_array_equal(descriptor.table(), expected)


@settings(max_examples=25, deadline=None)
@given(descriptors())
def test_a_canonical_tile_gives_back_its_descriptor(descriptor: WgmmaDescriptor) -> None:
    """Write the descriptor's address function as a shared layout (its bytes, in elements, as
    a table-shaped layout with the element swizzle); derive; the result reads every element
    the same way and the solver proves it."""
    descriptor = dataclasses.replace(descriptor, start=0)
    esz = descriptor.element_bits // 8
    table = descriptor.table()
    assert len(np.unique(table)) == table.size  # the generator's grids never overlap
    layout = _layout_of(table // esz, descriptor)
    found = derive_descriptor(layout, descriptor.element_bits, (0, 0), (0, 1), descriptor.rows)
    assert found is not None
    np.testing.assert_array_equal(found.table(), table)
    assert check_equivalent(*found.claim(layout, (0, 0), (0, 1)), PROOF_TIMEOUT).holds


def _layout_of(elements: np.ndarray, descriptor: WgmmaDescriptor):
    """The shared layout whose offsets are `elements`: the canonical CuTe text with the
    swizzle on element offsets (a descriptor starting at 0)."""
    text, _ = _canonical_text(descriptor)
    esz = descriptor.element_bits // 8
    bits = descriptor.swizzle_bits
    base = 4 - (esz.bit_length() - 1)
    prefix = f"Sw<{bits},{base},3> o " if bits else ""
    layout = from_cute_memory(prefix + text, elements.shape)
    np.testing.assert_array_equal(layout.table(), elements)
    return layout


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((shared_row_major(64, 64), 4, (0, 0), (0, 1), 64), "element_bits=4; expected 8, 16"),
        ((shared_row_major(64, 64), 16, (0, 0), (0, 1), 12), "rows=12; expected a multiple of 8"),
        ((shared_row_major(64, 64), 16, (0, 0), (0, 1), 512), "rows=512"),
        ((shared_row_major(64, 64), 16, (0, 0), (1, 1), 64), r"dims=\(1, 1\)"),
        ((shared_row_major(64, 64), 16, (0,), (0, 1), 64), "origin .* has 1 entries"),
        ((shared_row_major(64, 64), 16, (8, 0), (0, 1), 64), "leaves the layout's extent 64"),
        (("64:1", 16, (0, 0), (0, 1), 64), "is not a SharedLayout"),
    ],
)
def test_bad_arguments_are_refused(arguments: tuple, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        derive_descriptor(*arguments)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (("row", "none", 0, 16, 16, 16, 64), "major='row'"),
        (("k", "16B", 0, 16, 16, 16, 64), "swizzle='16B'"),
        (("k", "none", 8, 16, 16, 16, 64), "start=8; expected a multiple of 16"),
        (("k", "none", 0, 1 << 18, 16, 16, 64), "leading_byte_offset=262144"),
    ],
)
def test_bad_descriptor_fields_are_refused(fields: tuple, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        WgmmaDescriptor(*fields)


def test_encode_refuses_a_misaligned_base() -> None:
    descriptor = WgmmaDescriptor("k", "128B", 0, 16, 1024, 16, 64)
    with pytest.raises(LayoutError, match="base_address=512 is not a multiple of 1024"):
        descriptor.encode(512)
    assert _fields(descriptor.encode(2048)) == (128, 1, 64, 1)

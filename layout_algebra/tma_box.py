"""TMA boxes: the tensor-map box and swizzle with which Hopper's bulk tensor copy writes a tile
of a shared layout, derived from the layout and stated as a proof obligation.

A tiled tensor map (the driver's ``cuTensorMapEncodeTiled``) describes a global tensor of rank
r <= 5 and a *box*; ``cp.async.bulk.tensor`` copies the box at given global coordinates into
shared memory at a 128-byte aligned address A, where the box's elements lie densely in
row-major order (the tensor map's dimension 0, the innermost, fastest), their byte offsets
then XORed by the map's swizzle mode (`swizzle_modes`), elements outside the tensor filled with
zeros. A `TmaBox` keeps its extents (e_1, ..., e_r) and coordinates in the layout's (the
tile's) order, outermost first, and an `order` (o_1, ..., o_r), a permutation of the tile's
dimensions naming the box's dimensions outermost first (default the identity), so element x
is written at::

    A + swizzle(esz * (((x_o1 e_o2 + x_o2) e_o3 + ...) e_or + x_or))

A tile of a permuted view is a box in another order. The activations A (m, k) row-major seen
as A^T, ``GlobalLayout((k, m), (1, k))``, have their unit stride along dimension 0, so a
(64, 64) f16 tile (k, t) of them is a box of order (1, 0): k innermost, each token's 64 values
one 128-byte row, swizzled by the 128B mode exactly as ``SharedLayout((64, 64), (64, 64),
(1, 64), row_swizzle(64, 16))`` places them (a K-major wgmma operand of A^T).

Rules of the map this module keeps: every box extent at most 256; the innermost extent (along
dimension ``order[-1]``) a multiple of 16 bytes, and in a swizzled mode at most the mode's row
(32, 64 or 128 bytes). The XOR acts on absolute addresses, so A must be a multiple of the mode's
repeat as well.

`derive_box(layout, element_bits, origin, dims, extents, order)` finds the box of the tile of
`layout` that spans `extents` (default: the whole extents) of `dims` at `origin` (a stage of a
ring: dims (1, 2) of a (stages, rows, columns) layout at origin (s, 0, 0)) in `order`: the box
extents are those extents, the start the tile's first byte before the layout's swizzle, and
the mode the first, widest first, whose address function equals the layout's at every element
of the box (or None).
`TmaBox.claim(...)` states that equality for `proofs.check_equivalent`;
`TmaBox.tensor_map_arguments(global_layout)` gives the map's arguments for a global tensor of
the tile's dimensions whose stride along ``order[-1]`` is 1 (TMA order: dimension 0 innermost,
following `order`), checked against the driver's rules, for the launch to encode.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from layout_algebra.errors import LayoutError
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.shared import SharedLayout
from layout_algebra.swizzle_modes import (
    CHUNK_BYTES,
    SWIZZLE_BITS,
    ByteMap,
    byte_swizzle,
    check_mode,
    check_tile,
    layout_bytes,
    repeat_bytes,
    unswizzled,
)
from layout_algebra.validation import check_int, is_int

MAX_RANK = 5
"""Dimensions of a tensor map."""
MAX_BOX_EXTENT = 256
"""The largest box extent along any dimension."""
SHARED_ALIGNMENT = 128
"""Bytes the shared-memory address of a bulk tensor copy must be a multiple of."""
MAX_GLOBAL_EXTENT = 1 << 32
"""The largest global extent a tensor map describes."""
GLOBAL_STRIDE_LIMIT = 1 << 40
"""Global strides (bytes) must be below this, and multiples of 16."""
ELEMENT_BITS = (8, 16, 32, 64)
"""Element widths of the tensor map data types this module names."""
MAX_BOX_ELEMENTS = 1 << 20
"""Boxes whose elements `derive_box` compares one by one are at most this large."""


@dataclass(frozen=True)
class TmaBox:
    """A box of `extents` (the layout's order, outermost first) of `element_bits`-bit elements
    written at byte `start` of the allocation with `swizzle`; `order` lists the box's
    dimensions (indices into `extents`) outermost first, a permutation (None: the identity,
    which the field then holds). See the module docstring."""

    extents: tuple[int, ...]
    swizzle: str
    element_bits: int
    start: int
    order: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        extents = tuple(self.extents) if isinstance(self.extents, Sequence) else None
        if not extents or len(extents) > MAX_RANK:
            raise LayoutError(
                f"TMA box: extents={self.extents!r}; expected 1 to {MAX_RANK} extents"
            )
        for extent in extents:
            if check_int(extent, "TMA box extent", 1) > MAX_BOX_EXTENT:
                raise LayoutError(f"TMA box: extent {extent} is past {MAX_BOX_EXTENT}")
        object.__setattr__(self, "extents", extents)
        order = _check_order(self.order, len(extents))
        object.__setattr__(self, "order", order)
        check_mode(self.swizzle, "TMA box")
        _check_element_bits(self.element_bits)
        innermost = extents[order[-1]]
        inner = innermost * self.element_bits // 8
        if inner % CHUNK_BYTES:
            raise LayoutError(
                f"TMA box: the innermost extent {innermost} is {inner} bytes; expected a "
                "multiple of 16"
            )
        span = CHUNK_BYTES << SWIZZLE_BITS[self.swizzle]
        if self.swizzle != "none" and inner > span:
            raise LayoutError(
                f"TMA box: the innermost extent is {inner} bytes, past the {self.swizzle} "
                f"swizzle's row of {span} bytes"
            )
        start = check_int(self.start, "TMA box start", 0)
        if start % self.alignment:
            raise LayoutError(
                f"TMA box: start={start}; expected a multiple of {self.alignment} bytes (the "
                f"copy's 128 and the {self.swizzle} swizzle's repeat)"
            )

    @property
    def alignment(self) -> int:
        """Bytes the box's address must be a multiple of: 128, or the swizzle's repeat."""
        return max(SHARED_ALIGNMENT, repeat_bytes(self.swizzle))

    @property
    def nbytes(self) -> int:
        """Bytes the copy writes (the transaction count an mbarrier waits for)."""
        return math.prod(self.extents) * self.element_bits // 8

    def byte_offset(self, *coord: Any) -> Any:
        """The byte offset (from the allocation) the copy writes box element `coord` at (ints,
        NumPy arrays or `Expr`s, the layout's order), placed row-major in the box's `order`."""
        dense: Any = 0
        for dim in self.order:
            dense = dense * self.extents[dim] + coord[dim]
        return self.start + byte_swizzle(self.swizzle)(dense * (self.element_bits // 8))

    def table(self) -> np.ndarray:
        """Every byte offset as an int64 array of shape `extents`."""
        return ByteMap("box", self.extents, self.byte_offset).table()

    def claim(
        self, layout: SharedLayout, origin: Sequence[int], dims: Sequence[int]
    ) -> tuple[ByteMap, ByteMap]:
        """``(emitted, required)``: where the copy writes each box element and where `layout`
        holds it (`derive_box`'s arguments); `proofs.check_equivalent` of the two decides
        whether the box is right."""
        required = layout_bytes(layout, self.element_bits, origin, dims)
        return (
            ByteMap("emitted", self.extents, self.byte_offset),
            ByteMap("required", self.extents, required),
        )

    def tensor_map_arguments(self, global_layout: GlobalLayout) -> dict[str, Any]:
        """The arguments of ``cuTensorMapEncodeTiled`` (but the data type and address) for a
        global tensor `global_layout` of the box's dimensions (the layout's order) whose
        dimension ``order[-1]`` has stride 1: ``rank``, ``global_dim`` and ``box_dim`` (TMA
        order: the box's dimensions innermost first, ``order`` reversed), ``global_strides``
        (bytes, TMA dimensions 1 .. rank - 1), ``element_strides`` (all 1), ``swizzle`` (the
        mode's name). Raises LayoutError where the driver's rules are not met (symbolic
        extents must be bound first)."""
        if not isinstance(global_layout, GlobalLayout):
            raise LayoutError(f"TMA tensor map: {global_layout!r} is not a GlobalLayout")
        if global_layout.rank != len(self.extents):
            raise LayoutError(
                f"TMA tensor map: the global tensor has rank {global_layout.rank}, the box "
                f"{len(self.extents)}"
            )
        esz = self.element_bits // 8
        for what, values in (("shape", global_layout.shape), ("strides", global_layout.strides)):
            if not all(is_int(v) for v in values):
                raise LayoutError(
                    f"TMA tensor map: the global {what} {values} is symbolic; bind it first"
                )
        # TMA order: the box's innermost dimension first.
        tma_order = tuple(reversed(self.order))
        shape = tuple(global_layout.shape[d] for d in tma_order)
        strides = tuple(global_layout.strides[d] for d in tma_order)
        if strides[0] != 1:
            raise LayoutError(
                f"TMA tensor map: the innermost global stride is {strides[0]} (dimension "
                f"{tma_order[0]}); expected 1"
            )
        for extent in shape:
            if extent > MAX_GLOBAL_EXTENT:
                raise LayoutError(f"TMA tensor map: global extent {extent} is past 2^32")
        byte_strides = tuple(s * esz for s in strides[1:])
        for stride in byte_strides:
            if stride % CHUNK_BYTES or stride >= GLOBAL_STRIDE_LIMIT or stride == 0:
                raise LayoutError(
                    f"TMA tensor map: global stride {stride} bytes; expected a positive "
                    "multiple of 16 below 2^40"
                )
        return {
            "rank": len(shape),
            "global_dim": shape,
            "global_strides": byte_strides,
            "box_dim": tuple(self.extents[d] for d in tma_order),
            "element_strides": (1,) * len(shape),
            "swizzle": self.swizzle,
        }


def _check_element_bits(element_bits: object) -> int:
    if isinstance(element_bits, bool) or element_bits not in ELEMENT_BITS:
        raise LayoutError(f"TMA box: element_bits={element_bits!r}; expected 8, 16, 32 or 64")
    return int(element_bits)


def _check_order(order: object, rank: int) -> tuple[int, ...]:
    """`order` as a tuple when it is a permutation of ``range(rank)`` (None: the identity);
    LayoutError naming it otherwise."""
    if order is None:
        return tuple(range(rank))
    entries = tuple(order) if isinstance(order, Sequence) and not isinstance(order, str) else ()
    if not (all(is_int(d) for d in entries) and sorted(entries) == list(range(rank))):
        raise LayoutError(
            f"TMA box: order={order!r}; expected a permutation of {tuple(range(rank))}"
        )
    return tuple(int(d) for d in entries)


def derive_box(
    layout: SharedLayout,
    element_bits: int,
    origin: Sequence[int] | None = None,
    dims: Sequence[int] | None = None,
    extents: Sequence[int] | None = None,
    order: Sequence[int] | None = None,
    modes: Sequence[str] | None = None,
) -> TmaBox | None:
    """The box in `order` (the tile's dimensions, indices into `dims`, outermost first;
    default: the identity) that writes the tile of `layout` spanning `extents` (default: the
    whole extents) of `dims` (default: every dimension) at `origin` (a full coordinate;
    default: the layout's first element), or
    None when no swizzle mode writes it as the layout places it or the tile breaks a rule of
    the map (a box extent past 256, an innermost extent not a multiple of 16 bytes, a start
    not 128-byte aligned). The result's address function equals the layout's on every
    element of the box (checked on all of them; `TmaBox.claim` states it for the solver).
    `modes` names the swizzle modes tried, in order (default: every mode, widest first): a
    small tile may match several, and the tiles of one tensor map need one they all match.
    Raises LayoutError for arguments that name no such tile.
    """
    element_bits = _check_element_bits(element_bits)
    modes = tuple(SWIZZLE_BITS) if modes is None else tuple(modes)
    for mode in modes:
        check_mode(mode, "TMA box")
    if not isinstance(layout, SharedLayout):
        raise LayoutError(f"TMA box: {layout!r} is not a SharedLayout")
    dims = tuple(range(layout.rank)) if dims is None else tuple(dims)
    origin = (0,) * layout.rank if origin is None else tuple(origin)
    if not 1 <= len(dims) <= MAX_RANK:
        raise LayoutError(f"TMA box: dims={dims!r}; expected 1 to {MAX_RANK} dimensions")
    if extents is None:
        extents = tuple(layout.shape[d] if is_int(d) and 0 <= d < layout.rank else 0 for d in dims)
    extents = tuple(extents)
    corner = check_tile(layout, origin, dims, extents, "TMA box")
    order = _check_order(order, len(dims))
    if math.prod(extents) > MAX_BOX_ELEMENTS:
        raise LayoutError(
            f"TMA box: {math.prod(extents)} elements; at most {MAX_BOX_ELEMENTS} are compared"
        )
    start = layout_bytes(unswizzled(layout), element_bits, corner, dims)(*(0,) * len(dims))
    wanted = ByteMap("layout", extents, layout_bytes(layout, element_bits, corner, dims)).table()
    for swizzle in modes:
        try:
            box = TmaBox(extents, swizzle, element_bits, start, order)
        except LayoutError:
            continue  # this mode's rules exclude the tile
        if (box.table() == wanted).all():
            return box
    return None

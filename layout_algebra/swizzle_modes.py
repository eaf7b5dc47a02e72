"""The hardware's swizzle modes of shared memory, and byte maps over tiles, for the units that
read or write swizzled tiles by themselves: Hopper's wgmma descriptors and TMA tensor maps.

Both name one of four modes: "none", "32B", "64B" or "128B". A swizzled mode XORs the bits
[4, 4 + B) of a shared-memory byte address (the 16-byte chunk within a row of 2^B chunks) with
the bits [7, 7 + B) (the row within 8 such rows): CuTe's ``Swizzle<B, 4, 3>`` on byte
addresses, B = 1, 2, 3 for 32B, 64B, 128B. On the element offsets of a b-bit type that is
``Swizzle(B, 4 - log2(b / 8), 3)``: for 16-bit elements ``Swizzle(3, 3, 3)``, what
`shared.shared_row_major_swizzle` gives a tile of 128-byte rows. The unit applies the XOR to
absolute addresses; it equals the XOR on offsets within an allocation exactly when the
allocation starts at a multiple of the pattern's repeat, ``2 ** (7 + B)`` bytes
(`repeat_bytes`).

`ByteMap` is a memory map (coordinates -> byte offset) in the protocol `proofs.symbolic_map`
reads, and `layout_bytes` the byte offsets a shared layout gives the elements of a tile of it:
a unit's address function and the layout's, compared by `proofs.check_equivalent`, are the
proof obligation of every such choice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from layout_algebra.errors import LayoutError
from layout_algebra.shared import SharedLayout, Swizzle
from layout_algebra.validation import check_int

SWIZZLE_BITS = {"128B": 3, "64B": 2, "32B": 1, "none": 0}
"""Mode name -> B, the address bits it XORs; widest first (the order units try them in)."""
CHUNK_BYTES = 16
"""Bytes of the chunk a swizzle moves as a whole."""


def check_mode(mode: object, what: str) -> str:
    """`mode` if it names a swizzle mode, else LayoutError naming it and `what` it was for."""
    if not isinstance(mode, str) or mode not in SWIZZLE_BITS:
        raise LayoutError(
            f"{what}: swizzle={mode!r}; expected one of {', '.join(map(repr, SWIZZLE_BITS))}"
        )
    return mode


def byte_swizzle(mode: str) -> Swizzle:
    """The XOR of `mode` on byte addresses: ``Swizzle(B, 4, 3)`` (the identity for "none")."""
    return Swizzle(SWIZZLE_BITS[mode], 4, 3)


def repeat_bytes(mode: str) -> int:
    """Bytes after which `mode`'s pattern repeats: ``2 ** (7 + B)``, 16 for "none"."""
    bits = SWIZZLE_BITS[mode]
    return 1 << (7 + bits) if bits else CHUNK_BYTES


@dataclass(frozen=True)
class ByteMap:
    """A memory map over a tile of `shape`: ``offset(coord)`` is `function` of the coordinates
    (ints, NumPy arrays or `Expr`s), a byte offset; `name` says whose map it is."""

    name: str
    shape: tuple[int, ...]
    function: Callable[..., Any]

    def offset(self, coord: Sequence[Any]) -> Any:
        return self.function(*coord)

    def table(self) -> np.ndarray:
        """Every byte offset as an int64 array of `shape`."""
        return np.asarray(self.function(*np.indices(self.shape, dtype=np.int64)), dtype=np.int64)


def check_tile(
    layout: SharedLayout,
    origin: Sequence[int],
    dims: Sequence[int],
    extents: Sequence[int],
    what: str,
) -> tuple[int, ...]:
    """The checked origin of a tile of `extents` along the layout dimensions `dims` (distinct)
    at `origin` (a full coordinate); LayoutError naming what does not fit."""
    if not isinstance(layout, SharedLayout):
        raise LayoutError(f"{what}: {layout!r} is not a SharedLayout")
    dims = tuple(dims)
    if (
        len(dims) != len(extents)
        or len(set(dims)) != len(dims)
        or any(isinstance(d, bool) or d not in range(layout.rank) for d in dims)
    ):
        raise LayoutError(
            f"{what}: dims={dims!r}; expected {len(extents)} different dimensions of the "
            f"rank-{layout.rank} layout"
        )
    corner = tuple(check_int(o, f"{what} origin entry", 0) for o in origin)
    if len(corner) != layout.rank:
        raise LayoutError(
            f"{what}: origin {tuple(origin)} has {len(corner)} entries; the layout has rank "
            f"{layout.rank}"
        )
    for dim, extent in zip(dims, extents):
        if corner[dim] + extent > layout.shape[dim]:
            raise LayoutError(
                f"{what}: the tile of {extent} along dimension {dim} from {corner[dim]} leaves "
                f"the layout's extent {layout.shape[dim]}"
            )
    return corner


def layout_bytes(
    layout: SharedLayout, element_bits: int, origin: Sequence[int], dims: Sequence[int]
) -> Callable[..., Any]:
    """The function (x_0, x_1, ...) -> the byte offset `layout` gives the tile element with
    coordinate x_j along dimension ``dims[j]``, from `origin` (whole-byte elements)."""
    esz = element_bits // 8

    def offset(*tile_coord: Any) -> Any:
        coord: list[Any] = list(origin)
        for dim, x in zip(dims, tile_coord):
            coord[dim] = coord[dim] + x
        return layout.offset(tuple(coord)) * esz

    return offset


def unswizzled(layout: SharedLayout) -> SharedLayout:
    """`layout` without its swizzle: the offsets a unit's start and strides are read from."""
    return SharedLayout(layout.shape, layout.mode_shape, layout.mode_strides)

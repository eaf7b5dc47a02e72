"""Triton linear layouts with XOR bases: swizzled shared layouts and distributed layouts that no
register layout of the algebra describes.

A linear layout maps input bits to coordinates over GF(2): each input (``"offset"`` for a shared
layout; ``"register"``, ``"lane"``, ``"warp"`` for a distributed one) has one *basis* per bit,
least significant first, a tuple of coordinates (dimension 0 first), and an input value maps to
the XOR of the bases of its set bits (XORed over the inputs). A basis may set several bits (in
one dimension or several): that is how a swizzle reads, ``(1, 8)`` for "offset bit 6 moves one
row down and flips column bit 3". `layout_algebra.interop.from_linear_layout` reads the bases
that a `RegisterLayout` has (one bit each); this module takes any:

- `shared_to_linear(layout)`: a `SharedLayout` (swizzled or not) whose offsets are a bijection
  onto ``[0, size)`` of power-of-two extents, as Triton's ``offset -> (dim0, dim1, ...)`` bases;
- `linear_to_shared(bases, shape)`: the inverse, a `SharedLayout` with the swizzle and the strides
  the bases imply (LayoutError when no shared layout of the algebra has them);
- `linear_function_layout(bases, shape)`: register/lane/warp bases as a `FunctionLayout`
  (integer ``+ * // %`` only: each output bit is a parity), which `proofs` compares with any
  layout of the algebra.

Example: Triton's swizzled shared encoding of an (8, 64) f16 tile with ``vec=8, perPhase=1,
maxPhase=8`` (column chunk XOR row) has offset bases ``[(0,1), (0,2), (0,4), (0,8), (0,16),
(0,32), (1,8), (2,16), (4,32)]``, which is ``shared_row_major_swizzle(8, 64, element_bits=16)``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from layout_algebra.errors import LayoutError
from layout_algebra.function_layout import FunctionLayout
from layout_algebra.interop import check_basis_lists
from layout_algebra.shared import SharedLayout, Swizzle
from layout_algebra.validation import check_int_tuple

Bases = list[tuple[int, ...]]

MAX_SWIZZLE_SEARCH_BIT = 16
"""`linear_to_shared` looks for swizzles whose bits lie below this bit."""
MAX_TILE = 1 << 21
"""The largest tile (elements) the shared conversions take: a shared-memory tile of 1-bit
elements in 228 KB is below it."""


def _check_size(tile: tuple[int, ...], what: str) -> int:
    size = math.prod(tile)
    if size > MAX_TILE:
        raise LayoutError(f"{what}: a tile of {size} elements; expected at most {MAX_TILE}")
    return size


def _log2(value: int, what: str) -> int:
    if value < 1 or value & (value - 1):
        raise LayoutError(f"{what} = {value}: a linear layout needs powers of two")
    return value.bit_length() - 1


def _check_tile(shape: Sequence[int]) -> tuple[int, ...]:
    tile = check_int_tuple(shape, "shape")
    for d, extent in enumerate(tile):
        _log2(extent, f"shape[{d}]")
    return tile


def _check_bases(bases: Any, names: Sequence[str], tile: tuple[int, ...]) -> dict[str, Bases]:
    """`bases` as int tuples per input of `names` (`interop.check_basis_lists`), each basis
    inside the tile (every coordinate below its extent, a power of two: XOR stays inside)."""
    checked = check_basis_lists(bases, names, len(tile))
    for name, entries in checked.items():
        for k, entry in enumerate(entries):
            if any(c >= extent for c, extent in zip(entry, tile)):
                raise LayoutError(
                    f"linear layout {name}[{k}] = {entry!r}: expected coordinates inside the "
                    f"tile {tile}"
                )
    return checked


def _xor_table(bases: Bases, rank: int) -> np.ndarray:
    """(2**len(bases), rank) coordinates: row v is the XOR of the bases of v's set bits."""
    table = np.zeros((1, rank), dtype=np.int64)
    for basis in bases:
        table = np.concatenate([table, table ^ np.array(basis, dtype=np.int64)])
    return table


# -- shared layouts -------------------------------------------------------------------------------


def shared_to_linear(layout: SharedLayout) -> dict[str, Bases]:
    """Triton's ``{"offset": bases}`` of a shared layout: basis b is the coordinate stored at
    offset ``2**b``. Requires power-of-two extents and offsets that are a bijection onto
    ``[0, size)`` that XOR-combines (every offset's coordinate the XOR of its bits' bases);
    LayoutError otherwise."""
    if not isinstance(layout, SharedLayout):
        raise LayoutError(f"shared_to_linear expects a SharedLayout, got {layout!r}")
    tile = _check_tile(layout.shape)
    size = _check_size(tile, "shared_to_linear")
    table = layout.table()
    where = np.full(size, -1, dtype=np.int64)
    flat = table.reshape(-1)
    if flat.max() >= size or np.any(np.bincount(flat, minlength=size) != 1):
        raise LayoutError(f"shared_to_linear: {layout!r} is not a bijection onto [0, {size})")
    where[flat] = np.arange(size)
    coords = np.stack(np.unravel_index(where, tile), axis=-1)
    bases = [tuple(int(c) for c in coords[1 << b]) for b in range(size.bit_length() - 1)]
    if not np.array_equal(_xor_table(bases, len(tile)), coords):
        raise LayoutError(
            f"shared_to_linear: the offsets of {layout!r} do not combine by XOR (no linear layout)"
        )
    return {"offset": bases}


def linear_to_shared(
    bases: Mapping[str, Sequence[Sequence[int]]], shape: Sequence[int]
) -> SharedLayout:
    """The `SharedLayout` with Triton's ``{"offset": bases}`` on a tile of `shape`: the layout
    whose offset of the XOR of bases is the offset's value. The swizzle (at most one, as in
    CuTe) and the strides are found from the bases: for each candidate `Swizzle` whose bits lie
    below `MAX_SWIZZLE_SEARCH_BIT`, undoing it must leave every coordinate bit a fixed offset
    bit. Raises LayoutError for bases that are not one per offset bit of the tile, that do not
    cover it once, or that no swizzled power-of-two-strided layout has."""
    tile = _check_tile(shape)
    checked = _check_bases(bases, ["offset"], tile)["offset"]
    size = _check_size(tile, "linear_to_shared")
    if len(checked) != size.bit_length() - 1:
        raise LayoutError(
            f"linear layout: {len(checked)} offset bases for a tile of {size} elements; "
            f"expected {size.bit_length() - 1}, one per offset bit"
        )
    coords = _xor_table(checked, len(tile))
    index = np.ravel_multi_index(tuple(coords.T), tile)
    if np.any(np.bincount(index, minlength=size) != 1):
        raise LayoutError("linear layout: the offset bases do not reach every element once")
    offsets = np.empty(size, dtype=np.int64)
    offsets[index] = np.arange(size)
    offsets = offsets.reshape(tile)
    width = size.bit_length() - 1
    for swizzle in _swizzle_candidates(min(width, MAX_SWIZZLE_SEARCH_BIT)):
        linear = offsets if swizzle is None else swizzle(offsets)
        found = _bit_strided(linear, tile)
        if found is not None:
            mode_shape, strides = found
            return SharedLayout(tile, mode_shape, strides, swizzle)
    raise LayoutError(
        f"linear layout: no shared layout (power-of-two strides and one swizzle below bit "
        f"{MAX_SWIZZLE_SEARCH_BIT}) has the offset bases {checked}"
    )


def _swizzle_candidates(width: int):
    """None, then every swizzle reading and writing bits below `width`, fewest bits first."""
    yield None
    for bits in range(1, width // 2 + 1):
        for shift in range(bits, width - bits + 1):
            for base in range(0, width - bits - shift + 1):
                yield Swizzle(bits, base, shift)


def _bit_strided(offsets: np.ndarray, tile: tuple[int, ...]) -> tuple[tuple, tuple] | None:
    """Modes of size 2, one per coordinate bit (outermost first), with the offset each bit adds,
    when `offsets` is exactly their sum; else None. Pairs of bits are tried first, so that a
    wrong candidate costs no pass over the whole tile."""
    units = []
    for d, extent in enumerate(tile):
        for bit in reversed(range(extent.bit_length() - 1)):
            unit = [0] * len(tile)
            unit[d] = 1 << bit
            units.append((d, bit, tuple(unit), int(offsets[tuple(unit)])))
    for (_, _, a, stride_a), (_, _, b, stride_b) in itertools.combinations(units, 2):
        both = tuple(x | y for x, y in zip(a, b))
        if int(offsets[both]) != stride_a + stride_b:
            return None
    total = np.zeros(tile, dtype=np.int64)
    grids = np.indices(tile, dtype=np.int64)
    for d, bit, _, stride in units:
        total += ((grids[d] >> bit) & 1) * stride
    if not np.array_equal(total, offsets):
        return None
    return (2,) * len(units), tuple(stride for *_, stride in units)


# -- distributed layouts --------------------------------------------------------------------------


def linear_function_layout(
    bases: Mapping[str, Sequence[Sequence[int]]], shape: Sequence[int]
) -> FunctionLayout:
    """The thread-to-data function of Triton's ``register`` / ``lane`` / ``warp`` bases (XOR
    bases allowed) on a tile of `shape`, as a `FunctionLayout` for `proofs` and pictures: thread
    ``t = lane + 2**len(lane) * warp``, register ``i``; each output bit is the parity of the
    input bits whose bases set it, written with integer ``+ * // %`` only."""
    tile = _check_tile(shape)
    checked = _check_bases(bases, ["register", "lane", "warp"], tile)
    thread_bases = checked["lane"] + checked["warp"]
    register_bases = checked["register"]
    dims = [extent.bit_length() - 1 for extent in tile]

    def coordinate(t: Any, i: Any) -> tuple[Any, ...]:
        inputs = [(t, b, basis) for b, basis in enumerate(thread_bases)]
        inputs += [(i, b, basis) for b, basis in enumerate(register_bases)]
        result = []
        for d, bits in enumerate(dims):
            value: Any = 0
            for out_bit in range(bits):
                parity: Any = 0
                for source, b, basis in inputs:
                    if basis[d] >> out_bit & 1:
                        parity = parity + source // (1 << b) % 2
                value = value + parity % 2 * (1 << out_bit)
            result.append(value)
        return tuple(result)

    names = ", ".join(f"{k}={len(v)}" for k, v in checked.items())
    return FunctionLayout(
        tile,
        1 << len(thread_bases),
        1 << len(register_bases),
        coordinate,
        name=f"linear_layout({names})",
    )

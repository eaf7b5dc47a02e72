"""Interop with CuTe thread-value and memory layouts and Triton linear layouts.

Both systems describe the same thing as a register layout, a map (thread, value) -> element, in
their own notation. This module converts in both directions; the inverse conversions return the
register layout with exactly the given function, or raise `LayoutError` with the reason none
exists.

CuTe: a thread-value layout is the text ``(THR,VAL):(THR_STRIDES,VAL_STRIDES)``. Its codomain is
the column-major index of the tile, ``sum(coord[d] * prod(shape[:d]))``. Each of the two top-level
modes lists its sub-modes fastest first (CuTe's colexicographic order, so the reverse of
`spatial_modes` / `local_modes`); replication is stride 0. A mode with one sub-mode prints as a
bare integer, several as a parenthesised tuple, none (one thread, or one value) as ``1`` with
stride ``0``. For example the mma m16n8 accumulator ``local(2,1).spatial(8,4).local(1,2)`` is
``((4,8),(2,2)):((32,1),(16,8))`` (CUTLASS's SM80_16x8_Row), ``spatial(4,8)`` is
``((8,4),1):((4,1),0)`` and ``local(4,4)`` is ``(1,(4,4)):(0,(4,1))``.

CuTe memory layouts (shared and global) are the same text read the other way round: one
top-level mode per tile dimension, mapping the tile coordinate to an element offset, the
sub-modes of a dimension fastest first (so the reverse of `SharedLayout.mode_shape`'s order
within the dimension), optionally composed with a swizzle as CuTe prints a `ComposedLayout`:
``Sw<B,M,S> o 0 o SHAPE:STRIDE`` (the swizzle, the offset 0, the layout; ``o 0`` may be left
out). `to_cute` writes a `SharedLayout` or a concrete `GlobalLayout` that way, and
`from_cute_memory(text, shape)` reads one into a `SharedLayout`:
``shared_row_major_swizzle(8, 64, element_bits=16)`` is ``Sw<3,3,3> o 0 o (8,64):(64,1)``.
The two readings of a text are told apart by the caller's tile: a memory layout's top-level
modes are the tile's dimensions, so `from_cute` refuses a text whose two modes hold exactly the
tile's extents (or that has a swizzle) unless told ``thread_value=True``, and
`from_cute_memory` refuses modes that do not hold the tile's extents.

Linear layouts (Triton): ``{"register": [...], "lane": [...], "warp": [...]}`` where each list
holds one basis per input bit, least significant bit first, and a basis is the tuple of
coordinates (dimension 0 first) that the bit alone maps to; the image of (t, i) is the XOR of the
bases of the set bits. Lane bases are thread bits 0-4, warp bases thread bits 5 and up (a layout
of fewer than 32 threads has log2(num_threads) lane bases and no warp bases); a replicated thread
bit has the zero basis. The mma m16n8 accumulator above is ``{"register": [(0, 1), (8, 0)],
"lane": [(0, 2), (0, 4), (1, 0), (2, 0), (4, 0)], "warp": []}``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from layout_algebra.errors import LayoutError
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.infer import layout_from_table
from layout_algebra.register import RegisterLayout, register_layout
from layout_algebra.shared import SharedLayout, Swizzle
from layout_algebra.validation import check_int_tuple, check_table_entries

NestedInt = int | tuple["NestedInt", ...]

LANE_BITS = 5
"""Thread bits that index the lanes of a warp (32 lanes); higher bits index warps."""


# --------------------------------------------------------------------------------------------
# CuTe
# --------------------------------------------------------------------------------------------


def _mode_text(values: list[int]) -> str:
    """One top-level CuTe mode: a bare integer for one sub-mode, else a parenthesised tuple."""
    if len(values) == 1:
        return str(values[0])
    return f"({','.join(str(v) for v in values)})"


def _coordinate_strides(layout: RegisterLayout) -> list[int]:
    """Per mode: its step in the column-major index of the tile."""
    dims = layout.mode_dims
    dim_strides = [math.prod(layout.shape[:d]) for d in range(layout.rank)]
    strides = []
    for m, dim in enumerate(dims):
        inner = math.prod(layout.mode_shape[k] for k in range(m + 1, len(dims)) if dims[k] == dim)
        strides.append(inner * dim_strides[dim])
    return strides


def to_cute(layout: RegisterLayout | SharedLayout | GlobalLayout) -> str:
    """The CuTe text of `layout`: a thread-value layout ``(THR,VAL):(THR_STRIDES,VAL_STRIDES)``
    for a `RegisterLayout`, a memory layout (`to_cute_memory`) for a `SharedLayout` or a
    `GlobalLayout`.

    Thread-value layouts: sub-modes are listed fastest first (the reverse of `spatial_modes` /
    `local_modes`); each stride is the mode's step in the column-major tile index; a
    replication sub-mode has stride 0. A top-level mode with one sub-mode prints bare, with
    several as a tuple, with none as ``1`` with stride ``0``. Example:
    ``to_cute(local(2,1).spatial(8,4).local(1,2))`` is ``((4,8),(2,2)):((32,1),(16,8))``.
    """
    if isinstance(layout, (SharedLayout, GlobalLayout)):
        return to_cute_memory(layout)
    if not isinstance(layout, RegisterLayout):
        raise LayoutError(
            f"to_cute expects a RegisterLayout, SharedLayout or GlobalLayout, got {layout!r}"
        )
    strides = _coordinate_strides(layout)
    shapes_text, strides_text = [], []
    for entries in (layout.spatial_modes, layout.local_modes):
        sizes = [-e if e < 0 else layout.mode_shape[e] for e in reversed(entries)]
        steps = [0 if e < 0 else strides[e] for e in reversed(entries)]
        shapes_text.append(_mode_text(sizes or [1]))
        strides_text.append(_mode_text(steps or [0]))
    if (layout.num_threads, layout.local_size) == layout.shape and "(" not in shapes_text[0]:
        # Two bare modes of the tile's extents read as a memory layout (from_cute refuses
        # them): the thread mode is written as a 1-tuple, which CuTe reads the same way.
        shapes_text[0], strides_text[0] = f"({shapes_text[0]})", f"({strides_text[0]})"
    return f"({shapes_text[0]},{shapes_text[1]}):({strides_text[0]},{strides_text[1]})"


_TOKEN = re.compile(r"\s*(?:(\()|(\))|(,)|(_?-?\d+))")


MAX_CUTE_NESTING = 32
"""The deepest nesting of parentheses a CuTe layout text may have (CuTe layouts use a few)."""


def _parse_int_tuple(text: str, position: int, full: str, depth: int = 0) -> tuple[NestedInt, int]:
    """Parse the nested int tuple at `position` of `text`; return it and the index after it.

    `text` is the shape or the stride half of the layout text `full` (named in error messages);
    `depth` counts the parentheses open around `position` (at most `MAX_CUTE_NESTING`).
    """
    if depth > MAX_CUTE_NESTING:
        raise LayoutError(
            f"CuTe layout {full[:40]!r}...: parentheses nested deeper than {MAX_CUTE_NESTING}"
        )
    match = _TOKEN.match(text, position)
    if not match:
        raise LayoutError(
            f"CuTe layout {full!r}: expected an integer or '(' at position {position} of {text!r}"
        )
    if match.group(4) is not None:
        return int(match.group(4).replace("_", "")), match.end()
    if match.group(1) is None:
        raise LayoutError(
            f"CuTe layout {full!r}: expected an integer or '(' at position {match.start()} "
            f"of {text!r}"
        )
    items: list[NestedInt] = []
    position = match.end()
    while True:
        item, position = _parse_int_tuple(text, position, full, depth + 1)
        items.append(item)
        match = _TOKEN.match(text, position)
        if match and match.group(3) is not None:
            position = match.end()
            continue
        if match and match.group(2) is not None:
            return tuple(items), match.end()
        raise LayoutError(
            f"CuTe layout {full!r}: expected ',' or ')' at position {position} of {text!r}"
        )


def _parse_cute(text: str) -> tuple[NestedInt, NestedInt]:
    """The (shape, stride) nested int tuples of a CuTe layout text ``SHAPE:STRIDE``.

    Integers may carry CuTe's static-integer underscore (``_4``); whitespace is ignored; raises
    LayoutError for malformed text or when shape and stride do not have the same nesting.
    """
    if not isinstance(text, str):
        raise LayoutError(f"a CuTe layout must be given as text, got {text!r}")
    halves = text.split(":")
    if len(halves) != 2:
        raise LayoutError(
            f"CuTe layout {text!r}: expected exactly one ':' between shape and stride"
        )
    parsed = []
    for half in halves:
        value, end = _parse_int_tuple(half, 0, text)
        if half[end:].strip():
            raise LayoutError(f"CuTe layout {text!r}: unexpected text {half[end:].strip()!r}")
        parsed.append(value)
    shape, stride = parsed
    if not _congruent(shape, stride):
        raise LayoutError(
            f"CuTe layout {text!r}: shape {shape} and stride {stride} have different nesting"
        )
    return shape, stride


def _congruent(a: NestedInt, b: NestedInt) -> bool:
    """Whether two nested int tuples have the same nesting profile."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int)
    return len(a) == len(b) and all(_congruent(x, y) for x, y in zip(a, b))


def _flatten(value: NestedInt) -> list[int]:
    """The integers of a nested tuple, in order."""
    if isinstance(value, int):
        return [value]
    return [x for item in value for x in _flatten(item)]


def _colexicographic_index(index: np.ndarray, sizes: list[int], strides: list[int]) -> np.ndarray:
    """CuTe's layout function of one mode: split `index` colexicographically over `sizes`."""
    result = np.zeros_like(index)
    divisor = 1
    for size, stride in zip(sizes, strides):
        result = result + (index // divisor) % size * stride
        divisor *= size
    return result


def from_cute(text: str, shape: Sequence[int], *, thread_value: bool = False) -> RegisterLayout:
    """The register layout with the function of the CuTe thread-value layout `text`.

    Requires: `text` is ``SHAPE:STRIDE`` with nested int tuples of the same nesting and exactly two
    top-level modes, threads then values (CuTe's ``_N`` static integers are accepted); `shape` is
    the tile, whose column-major index is the layout's codomain. A text that reads as a memory
    layout of the tile - a swizzle composed in front, or two bare modes holding exactly the
    tile's two extents, as ``(8,64):(64,1)`` for an (8, 64) tile - is refused with a pointer to
    `from_cute_memory`, unless `thread_value` says it is a thread-value layout all the same (or
    the thread mode is written as a tuple, ``((8),64):((64),1)``, as `to_cute` writes it).
    Postcondition: ``from_cute(to_cute(L), L.shape) == L``, and the result maps (t, i) to the
    column-major unravel of the CuTe layout's value at (t, i).
    Raises LayoutError when the text is malformed, a size is not positive, an index falls outside
    the tile, or no register layout has that function (the strides are not a mixed-radix split of
    the tile, a thread holds one element twice, a stride steps along two dimensions, ...), and
    when the layout has more (thread, value) pairs, or the tile more elements, than
    `validation.MAX_TABLE_ENTRIES` (it is evaluated at every pair).
    """
    if not isinstance(thread_value, bool):
        raise LayoutError(f"from_cute: thread_value={thread_value!r}; expected True or False")
    swizzle, text_layout = _split_composed(text)
    if swizzle is not None:
        raise LayoutError(
            f"CuTe layout {text!r} composes a swizzle with a layout: a memory layout, which "
            "from_cute_memory reads (from_cute reads thread-value layouts)"
        )
    layout_shape, layout_stride = _parse_cute(text_layout)
    if isinstance(layout_shape, int) or len(layout_shape) != 2:
        raise LayoutError(
            f"CuTe layout {text!r}: expected two top-level modes (threads, values), got "
            f"shape {layout_shape} (a memory layout has one mode per tile dimension: "
            "from_cute_memory reads those)"
        )
    tile = check_int_tuple(shape, "shape")
    extents = tuple(math.prod(_flatten(mode)) for mode in layout_shape)
    if all(isinstance(mode, int) for mode in layout_shape) and extents == tile and not thread_value:
        raise LayoutError(
            f"CuTe layout {text!r}: its two modes hold {extents[0]} and {extents[1]} elements, "
            f"exactly the extents of tile {tile}, as a memory layout's do; from_cute_memory "
            "reads a memory layout, and from_cute(..., thread_value=True) reads it as "
            f"{extents[0]} threads of {extents[1]} values"
        )
    modes = []
    for name, mode_shape, mode_stride in zip(("thread", "value"), layout_shape, layout_stride):
        sizes, strides = _flatten(mode_shape), _flatten(mode_stride)
        if any(s < 1 for s in sizes):
            raise LayoutError(f"CuTe layout {text!r}: {name} mode sizes {sizes} must be positive")
        modes.append((sizes, strides))
    num_threads = math.prod(modes[0][0])
    local_size = math.prod(modes[1][0])
    num_elements = math.prod(tile)
    # from_cute evaluates the layout at every (thread, value) pair.
    check_table_entries(num_threads * local_size, f"CuTe layout {text[:80]!r}")
    check_table_entries(num_elements, f"the tile {tile} of CuTe layout {text[:80]!r}")
    # A size-1 sub-mode's stride never counts; the others must keep indices within int64.
    modes = [
        (sizes, [s if n > 1 else 0 for n, s in zip(sizes, strides)]) for sizes, strides in modes
    ]
    reach = sum((n - 1) * abs(s) for sizes, strides in modes for n, s in zip(sizes, strides))
    if reach >= 1 << 62:
        raise LayoutError(
            f"CuTe layout {text[:80]!r}: its strides reach index {reach}, outside the "
            f"{num_elements} elements of tile {tile}"
        )
    t = np.arange(num_threads, dtype=np.int64)[:, None]
    i = np.arange(local_size, dtype=np.int64)[None, :]
    index = _colexicographic_index(t, *modes[0]) + _colexicographic_index(i, *modes[1])
    outside = (index < 0) | (index >= num_elements)
    if outside.any():
        bad_t, bad_i = (int(x) for x in np.argwhere(outside)[0])
        raise LayoutError(
            f"CuTe layout {text!r} maps thread {bad_t}, value {bad_i} to index "
            f"{int(index[bad_t, bad_i])}, outside the {num_elements} elements of tile {tile}"
        )
    if tile:
        coords = np.unravel_index(index, tile, order="F")
        table = np.stack(coords, axis=-1)
    else:
        table = np.zeros((num_threads, local_size, 0), dtype=np.int64)
    try:
        return layout_from_table(table, tile)
    except LayoutError as err:
        raise LayoutError(
            f"CuTe layout {text!r} is not a register layout of shape {tile}: {err}"
        ) from err


_COMPOSED = re.compile(
    r"\s*Sw\s*<\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*>\s*o\s*(?:(_?-?\d+)\s*o\s*)?"
)


def _split_composed(text: str) -> tuple[tuple[int, int, int, int] | None, str]:
    """``Sw<B,M,S> o OFFSET o LAYOUT`` (``o OFFSET`` optional) -> ((B, M, S, OFFSET), LAYOUT);
    a text without a swizzle -> (None, text). Raises LayoutError for a text that is not a str."""
    if not isinstance(text, str):
        raise LayoutError(f"a CuTe layout must be given as text, got {text!r}"[:200])
    match = _COMPOSED.match(text)
    if match is None:
        return None, text
    bits, base, shift = (int(match.group(k)) for k in (1, 2, 3))
    offset = int(match.group(4).replace("_", "")) if match.group(4) else 0
    return (bits, base, shift, offset), text[match.end() :]


def to_cute_memory(layout: SharedLayout | GlobalLayout) -> str:
    """The CuTe memory layout text of a shared or global layout: ``SHAPE:STRIDE`` with one
    top-level mode per dimension (sub-modes fastest first), preceded by ``Sw<B,M,S> o 0 o``
    when the layout has a swizzle. A rank-1 layout of one sub-mode prints without the outer
    parentheses (``64:1``; with several, ``((8,8)):((8,1))``), a dimension of extent 1 as
    ``1:0``. Raises LayoutError for a global layout with
    symbolic extents or strides, and for anything else."""
    if isinstance(layout, GlobalLayout):
        if layout.is_symbolic:
            raise LayoutError(
                f"to_cute: {layout!r} has symbolic extents or strides; CuTe text needs integers"
            )
        dims = [([int(n)], [int(s)]) for n, s in zip(layout.shape, layout.strides)]
        swizzle = None
    elif isinstance(layout, SharedLayout):
        dims = []
        for d in range(layout.rank):
            modes = [m for m, dim in enumerate(layout.mode_dims) if dim == d]
            sizes = [layout.mode_shape[m] for m in reversed(modes)]
            strides = [layout.mode_strides[m] for m in reversed(modes)]
            dims.append((sizes or [1], strides or [0]))
        swizzle = layout.swizzle
    else:
        raise LayoutError(f"to_cute_memory expects a SharedLayout or GlobalLayout, got {layout!r}")
    shapes = [_mode_text(sizes) for sizes, _ in dims]
    strides = [_mode_text(steps) for _, steps in dims]
    if len(dims) == 1 and len(dims[0][0]) == 1:
        text = f"{shapes[0]}:{strides[0]}"
    else:
        text = f"({','.join(shapes)}):({','.join(strides)})"
    if swizzle is None:
        return text
    return f"Sw<{swizzle.bits},{swizzle.base},{swizzle.shift}> o 0 o {text}"


def from_cute_memory(text: str, shape: Sequence[int]) -> SharedLayout:
    """The shared layout with the function of the CuTe memory layout `text` on the tile `shape`.

    Requires: `text` is ``SHAPE:STRIDE`` (nested int tuples of the same nesting; ``_N``
    accepted), optionally ``Sw<B,M,S> o OFFSET o SHAPE:STRIDE`` or ``Sw<B,M,S> o SHAPE:STRIDE``
    with offset 0, with one top-level mode per dimension of `shape` holding exactly that
    dimension's extent (a rank-1 tile takes a bare mode, ``64:1``), non-negative strides, and a
    swizzle that `Swizzle` accepts (shift >= bits >= 0).
    Postcondition: ``from_cute_memory(to_cute(L), L.shape) == L`` for every shared layout, and
    the result's offset at a coordinate is the CuTe layout's value there (then swizzled).
    Raises LayoutError naming the part of the text that breaks a requirement (a top-level mode
    of another extent than the tile's is what a thread-value layout has: `from_cute`).
    """
    composed, text_layout = _split_composed(text)
    tile = check_int_tuple(shape, "shape")
    layout_shape, layout_stride = _parse_cute(text_layout)
    modes = [layout_shape] if isinstance(layout_shape, int) else list(layout_shape)
    steps = [layout_stride] if isinstance(layout_stride, int) else list(layout_stride)
    if len(modes) != len(tile):
        raise LayoutError(
            f"CuTe memory layout {text!r} has {len(modes)} top-level modes; the tile {tile} has "
            f"{len(tile)} dimensions (one mode per dimension)"
        )
    mode_shape: list[int] = []
    mode_strides: list[int] = []
    for d, (mode, step) in enumerate(zip(modes, steps)):
        sizes, strides = _flatten(mode), _flatten(step)
        if any(n < 1 for n in sizes) or any(s < 0 for s in strides):
            raise LayoutError(
                f"CuTe memory layout {text!r}: mode {d} has sizes {sizes} and strides {strides}; "
                "expected positive sizes and non-negative strides"
            )
        if math.prod(sizes) != tile[d]:
            raise LayoutError(
                f"CuTe memory layout {text!r}: mode {d} holds {math.prod(sizes)} elements, the "
                f"tile's dimension {d} has {tile[d]} (a thread-value layout's modes are threads "
                "and values: from_cute reads those)"
            )
        mode_shape += reversed(sizes)
        mode_strides += reversed(strides)
    swizzle = None
    if composed is not None:
        bits, base, shift, offset = composed
        if offset != 0:
            raise LayoutError(
                f"CuTe memory layout {text!r}: offset {offset}; a shared layout starts at "
                "offset 0 (expected 'o 0 o' or none)"
            )
        if min(bits, base, shift) < 0:
            raise LayoutError(
                f"CuTe memory layout {text!r}: Sw<{bits},{base},{shift}>; expected "
                "non-negative B, M and S (negative shifts are not supported)"
            )
        swizzle = Swizzle(bits, base, shift)
    return SharedLayout(tile, tuple(mode_shape), tuple(mode_strides), swizzle)


# --------------------------------------------------------------------------------------------
# Linear layouts
# --------------------------------------------------------------------------------------------


def _log2_exact(value: int) -> int | None:
    """log2(value) when value is a power of two, else None."""
    return value.bit_length() - 1 if value > 0 and value & (value - 1) == 0 else None


def to_linear_layout(layout: RegisterLayout) -> dict[str, list[tuple[int, ...]]]:
    """The Triton linear layout of `layout`: ``{"register": [...], "lane": [...], "warp": [...]}``.

    Each list has one basis per input bit, least significant first: the coordinates (dimension 0
    first) of ``map(0, 1 << b)`` for register bits and ``map(1 << b, 0)`` for thread bits. Lane
    holds thread bits 0-4 and warp the higher ones (fewer than 32 threads: log2(num_threads) lane
    bases, no warp bases); a replicated thread bit has the zero basis.
    Requires every mode and replication size, hence every extent, to be a power of two
    (LayoutError otherwise). Example: ``local(2,1).spatial(8,4).local(1,2)`` gives register
    ``[(0, 1), (8, 0)]``, lane ``[(0, 2), (0, 4), (1, 0), (2, 0), (4, 0)]``, warp ``[]``.
    """
    if not isinstance(layout, RegisterLayout):
        raise LayoutError(f"to_linear_layout expects a RegisterLayout, got {layout!r}")
    odd = [s for s in layout.shape + layout.spatial_sizes + layout.local_sizes if s & (s - 1)]
    if odd:
        raise LayoutError(
            f"to_linear_layout needs power-of-two sizes, but {layout!r} has sizes "
            f"{sorted(set(odd))} (shape {layout.shape}, spatial sizes {layout.spatial_sizes}, "
            f"local sizes {layout.local_sizes})"
        )
    thread_bits = layout.num_threads.bit_length() - 1
    local_bits = layout.local_size.bit_length() - 1

    def basis(t: int, i: int) -> tuple[int, ...]:
        return tuple(int(c) for c in layout.map(t, i))

    threads = [basis(1 << b, 0) for b in range(thread_bits)]
    return {
        "register": [basis(0, 1 << b) for b in range(local_bits)],
        "lane": threads[:LANE_BITS],
        "warp": threads[LANE_BITS:],
    }


def check_basis_lists(
    bases: Any, names: Sequence[str], rank: int, accepted: Sequence[str] = ()
) -> dict[str, list[tuple[int, ...]]]:
    """A linear layout's bases validated: a mapping of input names among `names` (or
    `accepted`, ignored) to lists of bases, each `rank` non-negative integer coordinates;
    returned as lists of int tuples per name of `names` (missing ones empty). LayoutError
    naming the bad part otherwise."""
    listed = ", ".join(repr(name) for name in names)
    if not isinstance(bases, Mapping):
        raise LayoutError(
            f"a linear layout must be a mapping of {listed} to lists of bases, got {bases!r}"
        )
    unknown = set(bases) - set(names) - set(accepted)
    if unknown:
        raise LayoutError(f"linear layout inputs {sorted(unknown, key=str)} are not among {listed}")
    checked: dict[str, list[tuple[int, ...]]] = {}
    for name in names:
        entries = bases.get(name, [])
        if isinstance(entries, (str, bytes)) or not isinstance(entries, Sequence):
            raise LayoutError(f"linear layout {name} bases must be a list, got {entries!r}")
        checked[name] = []
        for k, entry in enumerate(entries):
            if (
                isinstance(entry, (str, bytes))
                or not isinstance(entry, Sequence)
                or len(entry) != rank
                or any(
                    isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 0
                    for c in entry
                )
            ):
                raise LayoutError(
                    f"linear layout {name}[{k}] = {entry!r}: expected {rank} non-negative "
                    "integer coordinates"
                )
            checked[name].append(tuple(int(c) for c in entry))
    return checked


def _check_bases(bases: Any, rank: int) -> dict[str, list[tuple[int, ...]]]:
    """Validate a register layout's linear-layout bases ("register", "lane", "warp"; an empty
    "block" accepted); return them as lists of int tuples per input."""
    checked = check_basis_lists(bases, ("register", "lane", "warp"), rank, ("block",))
    if bases.get("block"):
        raise LayoutError(
            f"linear layout block bases {bases['block']} span several thread blocks; a register "
            "layout describes one block"
        )
    return checked


def from_linear_layout(
    bases: Mapping[str, Sequence[Sequence[int]]], shape: Sequence[int]
) -> RegisterLayout:
    """The register layout with the function of the linear layout `bases` on a tile of `shape`.

    Requires: `bases` maps "register", "lane" and "warp" (each optional; an empty "block" is
    accepted and ignored) to lists of bases, least significant bit first, each basis a tuple of
    len(shape) coordinates; the thread index is ``lane + 2**len(lane) * warp``; every extent of
    `shape` is a power of two.
    Postcondition: ``from_linear_layout(to_linear_layout(L), L.shape) == L``, and the result maps
    (t, i) to the XOR of the bases of the set bits of i (register) and t (lane, then warp).
    Raises LayoutError when no register layout has that function: a basis that is not a single
    bit of one dimension, two bases setting the same bit, a bit of the tile set by no basis, a
    basis outside the tile, or a zero register basis (a thread holding an element twice).
    """
    tile = check_int_tuple(shape, "shape")
    for d, extent in enumerate(tile):
        if _log2_exact(extent) is None:
            raise LayoutError(f"shape[{d}] = {extent}: a linear layout needs powers of two")
    checked = _check_bases(bases, len(tile))
    thread_bases = checked["lane"] + checked["warp"]
    # Which input bit sets each (dimension, bit) of the tile.
    setter: dict[tuple[int, int], tuple[str, int]] = {}
    for name, entries in (("register", checked["register"]), ("thread", thread_bases)):
        for k, basis in enumerate(entries):
            moved = [(d, c) for d, c in enumerate(basis) if c]
            if not moved:
                if name == "register":
                    raise LayoutError(
                        f"linear layout register[{k}] is zero: a thread would hold one element "
                        "in two registers, which no register layout does"
                    )
                continue
            d, c = moved[0]
            bit = _log2_exact(c)
            if len(moved) > 1 or bit is None:
                raise LayoutError(
                    f"linear layout {name} basis {k} = {basis} is not a single bit of one "
                    "dimension, so it is not a register layout (no mixed-radix permutation of bits)"
                )
            if c >= tile[d]:
                raise LayoutError(
                    f"linear layout {name} basis {k} = {basis} is outside the tile {tile}"
                )
            if (d, bit) in setter:
                other = setter[(d, bit)]
                raise LayoutError(
                    f"linear layout {other[0]} basis {other[1]} and {name} basis {k} both set "
                    f"bit {bit} of dimension {d}: two inputs would hold the same element"
                )
            setter[(d, bit)] = (name, k)
    # One size-2 mode per bit of the tile, dimension 0 first, most significant bit first.
    mode_of: dict[tuple[str, int], int] = {}
    mode_shape: list[int] = []
    for d, extent in enumerate(tile):
        for bit in reversed(range(extent.bit_length() - 1)):
            if (d, bit) not in setter:
                raise LayoutError(
                    f"no linear layout basis sets bit {bit} of dimension {d} (extent {extent}): "
                    "the layout does not cover the tile"
                )
            mode_of[setter[(d, bit)]] = len(mode_shape)
            mode_shape.append(2)
    spatial_modes = [mode_of.get(("thread", k), -2) for k in reversed(range(len(thread_bases)))]
    local_modes = [mode_of[("register", k)] for k in reversed(range(len(checked["register"])))]
    return register_layout(tile, mode_shape, spatial_modes, local_modes)

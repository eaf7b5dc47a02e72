"""CuTe's layout algebra on CuTe layouts: what a CuTe user writes, with the same results.

A `CuteLayout` is CuTe's ``Layout<Shape, Stride>``: a nested tuple of sizes and one of strides
with the same nesting, a function from an index ``0 <= i < size`` to an offset (``i`` split into
the flattened modes fastest first, the digits times the strides added up). The operations are
CuTe's (CUTLASS's ``cute/layout.hpp``), written here from their definitions:

- `coalesce(L)`: the same function with the fewest modes (size-1 modes dropped, a mode merged
  into the one before it when its stride is that one's size times stride);
- `composition(A, B)`: the layout of ``i -> A(B(i))``, shaped like B (B an int, a layout, or a
  tuple of them applied to A's modes one by one);
- `complement(A, cotarget)`: the layout of the offsets in ``[0, cotarget)`` that A leaves out,
  ordered so that ``(A, complement)`` is a bijection onto them;
- `right_inverse(A)`: the layout R with ``A(R(i)) == i`` for i below its size, as large as A
  allows;
- `logical_divide(A, B)`: ``composition(A, (B, complement(B, size(A))))``, by mode for a tuple
  of tilers; `zipped_divide` gathers the tiles' modes first and the rest second;
- `logical_product(A, B)`: ``(A, composition(complement(A, size(A) * cosize(B)), B))``.

The text form is CuTe's (`str`, `parse`): ``(4,(2,2)):(2,(1,8))``. `shared_layout()` views a
layout with non-negative strides as a rank-1 `SharedLayout` over its index, so `proofs`
compares a CuTe layout's function with one of the algebra's (`check_equivalent`). Every
function raises `LayoutError` naming the operand and the requirement it breaks (CuTe's own
divisibility conditions included), never a raw Python error.

    A = parse("(4,8):(8,1)")
    str(logical_divide(A, parse("2:1")))   # '(2,(2,8)):(8,(16,1))'
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from layout_algebra.errors import LayoutError
from layout_algebra.shared import SharedLayout

Nested = int | tuple["Nested", ...]

MAX_SIZE = 1 << 40
"""The largest size and cosize a `CuteLayout` may have."""
MAX_TABLE = 1 << 22
"""The most indices `CuteLayout.table` (and `same_function`) enumerates."""


def _flatten(value: Nested) -> list[int]:
    if isinstance(value, int):
        return [value]
    return [leaf for item in value for leaf in _flatten(item)]


def _same_nesting(a: Nested, b: Nested) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int)
    return len(a) == len(b) and all(_same_nesting(x, y) for x, y in zip(a, b))


def _check_nested(value: object, what: str) -> Nested:
    """`value` as a nested tuple of ints (lists accepted), else LayoutError."""
    if isinstance(value, bool):
        raise LayoutError(f"CuTe layout: {what} {value!r} is a bool; expected an int or a tuple")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (tuple, list)) and value:
        return tuple(_check_nested(item, what) for item in value)
    raise LayoutError(f"CuTe layout: {what} {value!r}; expected an int or a non-empty tuple")


def _text(value: Nested) -> str:
    if isinstance(value, int):
        return str(value)
    return "(" + ",".join(_text(item) for item in value) + ")"


@dataclass(frozen=True)
class CuteLayout:
    """CuTe's ``shape:stride`` layout (see the module docstring). `==` compares the nested
    shape and stride (CuTe's structural equality); `same_function` compares the maps."""

    shape: Nested
    stride: Nested

    def __post_init__(self) -> None:
        shape = _check_nested(self.shape, "shape")
        stride = _check_nested(self.stride, "stride")
        if not _same_nesting(shape, stride):
            raise LayoutError(
                f"CuTe layout {_text(shape)}:{_text(stride)}: shape and stride have different "
                "nesting"
            )
        sizes = _flatten(shape)
        if any(n < 1 for n in sizes):
            raise LayoutError(f"CuTe layout {_text(shape)}:{_text(stride)}: sizes must be >= 1")
        reach = sum((n - 1) * abs(d) for n, d in zip(sizes, _flatten(stride)))
        if math.prod(sizes) > MAX_SIZE or reach >= MAX_SIZE:
            raise LayoutError(
                f"CuTe layout {_text(shape)}:{_text(stride)}: size or offsets past {MAX_SIZE}"
            )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "stride", stride)

    # -- structure ------------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """Top-level modes (1 for an int shape)."""
        return 1 if isinstance(self.shape, int) else len(self.shape)

    def modes(self) -> list[CuteLayout]:
        """The top-level modes as layouts."""
        if isinstance(self.shape, int):
            return [self]
        return [CuteLayout(s, d) for s, d in zip(self.shape, self.stride)]

    def __getitem__(self, index: int) -> CuteLayout:
        modes = self.modes()
        if not isinstance(index, int) or not -len(modes) <= index < len(modes):
            raise LayoutError(f"CuTe layout {self}: no mode {index!r} of {len(modes)}")
        return modes[index]

    def flat(self) -> Iterator[tuple[int, int]]:
        """(size, stride) of every leaf mode, fastest first."""
        return zip(_flatten(self.shape), _flatten(self.stride))

    @property
    def size(self) -> int:
        """The number of indices: the product of the sizes."""
        return math.prod(_flatten(self.shape))

    @property
    def cosize(self) -> int:
        """One past the largest offset (CuTe's cosize; each mode's last index at a positive
        stride)."""
        return sum((n - 1) * max(d, 0) for n, d in self.flat()) + 1

    # -- meaning --------------------------------------------------------------------------------

    def __call__(self, index: int) -> int:
        """The offset of `index` (0 <= index < size)."""
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.size:
            raise LayoutError(f"CuTe layout {self}: index {index!r} outside [0, {self.size})")
        offset = 0
        for size, stride in self.flat():
            offset += index % size * stride
            index //= size
        return offset

    def table(self) -> list[int]:
        """Every offset, index by index; LayoutError past `MAX_TABLE` indices."""
        if self.size > MAX_TABLE:
            raise LayoutError(
                f"CuTe layout {self}: its table would have {self.size} entries, more than "
                f"{MAX_TABLE}"
            )
        index = np.arange(self.size, dtype=np.int64)
        offsets = np.zeros(self.size, dtype=np.int64)
        for size, stride in self.flat():
            offsets += index % size * stride
            index //= size
        return offsets.tolist()

    def same_function(self, other: CuteLayout) -> bool:
        """Whether the two layouts have the same size and the same offset at every index."""
        return self.size == other.size and self.table() == other.table()

    def shared_layout(self) -> SharedLayout:
        """This function as a rank-1 shared layout over its index, for `proofs`; LayoutError for
        negative strides (memory layouts have none)."""
        leaves = list(self.flat())
        if any(d < 0 for _, d in leaves):
            raise LayoutError(f"CuTe layout {self}: negative strides have no shared layout")
        sizes = tuple(n for n, _ in reversed(leaves))
        strides = tuple(d for _, d in reversed(leaves))
        return SharedLayout((self.size,), sizes, strides)

    def __str__(self) -> str:
        return f"{_text(self.shape)}:{_text(self.stride)}"

    def __repr__(self) -> str:
        return f"parse({str(self)!r})"


def parse(text: str) -> CuteLayout:
    """The layout CuTe prints as `text` (``(4,(2,2)):(2,(1,8))``; ``_N`` and spaces allowed)."""
    from layout_algebra.interop import _parse_cute

    shape, stride = _parse_cute(text)
    return CuteLayout(shape, stride)


def make_layout(*layouts: CuteLayout) -> CuteLayout:
    """The layout whose top-level modes are `layouts` (CuTe's ``make_layout(a, b, ...)``; one
    layout gives a rank-1 tuple around it, as in CuTe)."""
    if not layouts:
        raise LayoutError("make_layout: expected at least one layout")
    for layout in layouts:
        _check_layout(layout, "make_layout")
    return CuteLayout(tuple(x.shape for x in layouts), tuple(x.stride for x in layouts))


def _check_layout(value: object, what: str) -> CuteLayout:
    if not isinstance(value, CuteLayout):
        raise LayoutError(f"{what}: {value!r} is not a CuteLayout (layout_algebra.cute.parse)")
    return value


def _per_mode(
    a: CuteLayout, tiler: tuple, operation, what: str
) -> tuple[list[CuteLayout], list[CuteLayout]]:
    """A tuple tiler applied mode by mode: ``operation(mode k of a, entry k)`` for each entry,
    and a's remaining modes; LayoutError naming `what` for a tiler longer than a's modes."""
    modes = a.modes()
    if len(tiler) > len(modes):
        raise LayoutError(f"{what}: the tiler has {len(tiler)} modes, {a} has {len(modes)}")
    return [operation(m, t) for m, t in zip(modes, tiler)], modes[len(tiler) :]


def _as_layout(value: object, what: str) -> CuteLayout:
    """An int n as the layout ``n:1``; a layout as itself; LayoutError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return CuteLayout(value, 1)
    return _check_layout(value, what)


def _from_leaves(leaves: list[tuple[int, int]]) -> CuteLayout:
    """A flat layout of `leaves` (one leaf prints bare; none is ``1:0``)."""
    if not leaves:
        return CuteLayout(1, 0)
    if len(leaves) == 1:
        return CuteLayout(*leaves[0])
    return CuteLayout(tuple(n for n, _ in leaves), tuple(d for _, d in leaves))


# -- coalesce -------------------------------------------------------------------------------------


def coalesce(layout: CuteLayout) -> CuteLayout:
    """The same function with the fewest leaf modes, flat."""
    layout = _check_layout(layout, "coalesce")
    merged: list[tuple[int, int]] = []
    for size, stride in layout.flat():
        if size == 1:
            continue
        if merged and merged[-1][0] * merged[-1][1] == stride:
            merged[-1] = (merged[-1][0] * size, merged[-1][1])
        else:
            merged.append((size, stride))
    return _from_leaves(merged)


# -- composition ----------------------------------------------------------------------------------


def composition(a: CuteLayout, b: CuteLayout | int | tuple) -> CuteLayout:
    """The layout of ``i -> a(b(i))`` with b's shape. `b` may be an int n (the layout ``n:1``),
    a layout, or a tuple of them (a tiler: mode k of `a` composed with entry k, the remaining
    modes of `a` kept). Raises LayoutError when b's strides do not divide a's modes as CuTe
    requires (e.g. taking every 3rd element of a 4 x 4 layout)."""
    a = _check_layout(a, "composition")
    if isinstance(b, tuple):
        parts, rest = _per_mode(a, b, composition, "composition")
        return make_layout(*parts, *rest)
    b = _as_layout(b, "composition")
    if b.rank > 1 or not isinstance(b.shape, int):
        return make_layout(*(composition(a, mode) for mode in b.modes()))
    return _compose_leaf(a, b.shape, b.stride)


def _compose_leaf(a: CuteLayout, size: int, stride: int) -> CuteLayout:
    """a composed with the single mode size:stride."""
    if stride == 0:
        return CuteLayout(size, 0)
    if stride < 0:
        raise LayoutError(f"composition: stride {stride} of the right operand is negative")
    leaves = list(coalesce(a).flat())
    result: list[tuple[int, int]] = []
    rest_size, rest_stride = size, stride
    for mode_size, mode_stride in leaves[:-1]:
        # Skip whole modes while the step is a multiple of their size, then take from the
        # first mode the step lands inside; each needs the one to divide the other.
        if mode_size % rest_stride and rest_stride % mode_size:
            raise LayoutError(
                f"composition: stride {stride} does not divide, nor is divided by, the mode of "
                f"size {mode_size} of {a}"
            )
        taken = min(max(1, mode_size // rest_stride), rest_size)
        if taken != 1:
            result.append((taken, rest_stride * mode_stride))
        if rest_size % taken:
            raise LayoutError(
                f"composition: size {size} is not a product of the sizes that {a} offers at "
                f"stride {stride} ({rest_size} left, a mode of {taken})"
            )
        rest_size //= taken
        rest_stride = -(-rest_stride // mode_size)
    if rest_size != 1 or not result:
        result.append((rest_size, rest_stride * leaves[-1][1]))
    return _from_leaves(result)


# -- complement and inverse -----------------------------------------------------------------------


def complement(layout: CuteLayout, cotarget: int | None = None) -> CuteLayout:
    """The layout of the offsets below `cotarget` (default: cosize) that `layout` does not
    reach, ordered so that ``make_layout(layout, complement)`` covers ``[0, cotarget)`` once
    (for a layout whose modes nest: each stride a multiple of the previous mode's reach)."""
    layout = _check_layout(layout, "complement")
    if cotarget is None:
        cotarget = layout.cosize
    if isinstance(cotarget, bool) or not isinstance(cotarget, int) or cotarget < 1:
        raise LayoutError(f"complement: cotarget {cotarget!r}; expected an int >= 1")
    modes = sorted((d, n) for n, d in layout.flat() if n != 1 and d != 0)
    if any(d < 0 for d, _ in modes):
        raise LayoutError(f"complement: {layout} has negative strides")
    result: list[tuple[int, int]] = []
    reached = 1
    for stride, size in modes:
        if stride < reached:
            raise LayoutError(
                f"complement: {layout}'s mode {size}:{stride} starts inside the span {reached} "
                "of its smaller modes (its modes overlap)"
            )
        result.append((stride // reached, reached))
        reached = size * stride
    result.append((-(-cotarget // reached), reached))
    return coalesce(_from_leaves(result))


def right_inverse(layout: CuteLayout) -> CuteLayout:
    """The largest layout R with ``layout(R(i)) == i`` for every i below R's size (``1:0``
    when offset 1 is not reached)."""
    layout = _check_layout(layout, "right_inverse")
    leaves = list(layout.flat())
    positions = [math.prod(n for n, _ in leaves[:k]) for k in range(len(leaves))]
    result: list[tuple[int, int]] = []
    reached = 1
    # Offsets 0, 1, 2, ... must come from modes of stride 1, then of stride size * stride of
    # the one before, and so on: the inverse reads each such mode's index position.
    for stride, size, position in sorted((d, n, p) for (n, d), p in zip(leaves, positions)):
        if size == 1:
            continue
        if stride != reached:
            break
        result.append((size, position))
        reached = size * stride
    return coalesce(_from_leaves(result))


# -- divide and product ---------------------------------------------------------------------------


def logical_divide(a: CuteLayout, tiler: CuteLayout | int | tuple) -> CuteLayout:
    """`a` split into tiles of `tiler` and the tiles' arrangement: ``composition(a, (tiler,
    complement(tiler, size(a))))``; a tuple tiler divides mode by mode."""
    a = _check_layout(a, "logical_divide")
    if isinstance(tiler, tuple):
        parts, rest = _per_mode(a, tiler, logical_divide, "logical_divide")
        return make_layout(*parts, *rest)
    tiler = _as_layout(tiler, "logical_divide")
    return composition(a, make_layout(tiler, complement(tiler, a.size)))


def zipped_divide(a: CuteLayout, tiler: CuteLayout | int | tuple) -> CuteLayout:
    """`logical_divide` with the tile modes gathered first and the rest second:
    ``((tile modes), (rest modes))``."""
    a = _check_layout(a, "zipped_divide")
    if not isinstance(tiler, tuple):
        return logical_divide(a, tiler)
    split, rest = _per_mode(a, tiler, zipped_divide, "zipped_divide")
    tiles = [part[0] for part in split]
    rests = [part[1] for part in split] + rest
    return make_layout(make_layout(*tiles), make_layout(*rests))


def logical_product(a: CuteLayout, b: CuteLayout) -> CuteLayout:
    """`a` repeated as `b` says: ``(a, composition(complement(a, size(a) * cosize(b)), b))``."""
    a = _check_layout(a, "logical_product")
    b = _check_layout(b, "logical_product")
    return make_layout(a, composition(complement(a, a.size * b.cosize), b))

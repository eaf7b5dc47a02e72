"""Division of register layouts: the inverses of the product on either side.

`divide(a, b)` is the layout c with ``c * b == a`` and `left_divide(a, b)` the layout c with
``b * c == a``. Both work on a *refinement* of a: a mode may be split into an outer and an inner
mode of the same list (which does not change the function), until b's modes can be matched one to
one with the innermost (for `divide`) or outermost (for `left_divide`) modes of each dimension.
The matched modes must then form the tail (or head) of a's spatial and local lists, in b's order,
with b's replication matched by a's; what remains of a is c.

Example: ``spatial(8) / spatial(4)`` splits a's mode of size 8 into (2, 4) and gives
``spatial(2)``; ``local(2).spatial(4) / local(2)`` fails, since a's local list does not end with
a mode of the innermost part of dimension 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from layout_algebra.errors import LayoutError
from layout_algebra.register import RegisterLayout, register_layout


@dataclass
class _Refined:
    """A mutable, non-canonical copy of a layout whose modes can be split.

    `dims[d]` lists the mode ids of dimension d, outermost first; `sizes[id]` is a mode's size;
    `spatial` holds mode ids and replication entries ("rep", r); `local` holds mode ids.
    """

    shape: tuple[int, ...]
    sizes: dict[int, int] = field(default_factory=dict)
    dims: list[list[int]] = field(default_factory=list)
    spatial: list[object] = field(default_factory=list)
    local: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, layout: RegisterLayout, rank: int) -> _Refined:
        pad = rank - layout.rank
        refined = cls(shape=(1,) * pad + layout.shape)
        refined.dims = [[] for _ in range(rank)]
        for m, (size, dim) in enumerate(zip(layout.mode_shape, layout.mode_dims)):
            refined.sizes[m] = size
            refined.dims[dim + pad].append(m)
        refined.spatial = [e if e >= 0 else ("rep", -e) for e in layout.spatial_modes]
        refined.local = list(layout.local_modes)
        return refined

    def split(self, mode: int, outer: int, inner: int) -> tuple[int, int]:
        """Split `mode` into (outer, inner) modes adjacent in its dimension and its list."""
        new = max(self.sizes) + 1
        self.sizes[mode] = outer
        self.sizes[new] = inner
        for modes in self.dims:
            if mode in modes:
                modes.insert(modes.index(mode) + 1, new)
        for entries in (self.spatial, self.local):
            if mode in entries:
                entries.insert(entries.index(mode) + 1, new)
        return mode, new

    def to_layout(self, shape: tuple[int, ...]) -> RegisterLayout:
        order = [m for modes in self.dims for m in modes]
        index = {m: k for k, m in enumerate(order)}
        return register_layout(
            shape,
            [self.sizes[m] for m in order],
            [index[e] if isinstance(e, int) else -e[1] for e in self.spatial],
            [index[e] for e in self.local],
        )


def _split_off(a: RegisterLayout, b: RegisterLayout, inner: bool, op: str) -> RegisterLayout:
    """Shared body of `divide` (inner=True) and `left_divide` (inner=False)."""
    for name, operand in (("dividend", a), ("divisor", b)):
        if not isinstance(operand, RegisterLayout):
            raise LayoutError(f"{op}'s {name} must be a RegisterLayout, got {operand!r}")
    if b.rank > a.rank:
        raise LayoutError(
            f"{op}: divisor {b!r} has rank {b.rank} > dividend rank {a.rank}, and a product with "
            f"it has rank >= {b.rank}, so no layout c satisfies "
            f"{'c * b' if inner else 'b * c'} == a"
        )
    rank = a.rank
    rest_shape = []
    ra, rb = _Refined.of(a, rank), _Refined.of(b, rank)
    for dim in range(rank):
        if ra.shape[dim] % rb.shape[dim]:
            raise LayoutError(
                f"{op}: extent {ra.shape[dim]} of dimension {dim} of {a!r} is not divisible by "
                f"{rb.shape[dim]} of {b!r}"
            )
        rest_shape.append(ra.shape[dim] // rb.shape[dim])

    # Pair each mode of b with a (possibly split) mode of a, dimension by dimension.
    partner: dict[int, int] = {}
    for dim in range(rank):
        a_modes = list(ra.dims[dim])
        b_modes = list(rb.dims[dim])
        if inner:
            a_modes.reverse()
            b_modes.reverse()
        for bm in b_modes:
            if not a_modes:
                raise LayoutError(f"{op}: {b!r} does not divide {a!r} in dimension {dim}")
            am = a_modes.pop(0)
            sa, sb = ra.sizes[am], rb.sizes[bm]
            if sa % sb:
                raise LayoutError(
                    f"{op}: mode of size {sb} of {b!r} does not match the "
                    f"{'innermost' if inner else 'outermost'} part of dimension {dim} of {a!r} "
                    f"(a mode of size {sa})"
                )
            if sa != sb:
                outer_mode, inner_mode = ra.split(
                    am, *((sa // sb, sb) if inner else (sb, sa // sb))
                )
                am, rest = (inner_mode, outer_mode) if inner else (outer_mode, inner_mode)
                a_modes.insert(0, rest)
            partner[bm] = am

    # b's lists must be the tail (divide) or head (left_divide) of a's lists.
    for which in ("spatial", "local"):
        a_list: list[object] = getattr(ra, which)
        b_list: list[object] = list(getattr(rb, which))
        if inner:
            b_list.reverse()
        for step, entry in enumerate(b_list):
            pos = len(a_list) - 1 - step if inner else step
            found = a_list[pos] if 0 <= pos < len(a_list) else None
            if isinstance(entry, int):
                ok = found == partner[entry]
            else:
                r = entry[1]
                ok = isinstance(found, tuple) and found[1] % r == 0
                if ok and found[1] != r:
                    rest = ("rep", found[1] // r)
                    if inner:
                        a_list[pos : pos + 1] = [rest, entry]
                    else:
                        a_list[pos : pos + 1] = [entry, rest]
            if not ok:
                raise LayoutError(
                    f"{op}: the {which} modes of {b!r} are not the "
                    f"{'last' if inner else 'first'} {which} modes of {a!r}, so no layout c "
                    f"satisfies {'c * b' if inner else 'b * c'} == a"
                )
        count = len(b_list)
        rest_list = a_list[: len(a_list) - count] if inner else a_list[count:]
        setattr(ra, which, rest_list)

    matched = set(partner.values())
    ra.dims = [[m for m in modes if m not in matched] for modes in ra.dims]
    for m in matched:
        del ra.sizes[m]
    return ra.to_layout(tuple(rest_shape))


def divide(a: RegisterLayout, b: RegisterLayout) -> RegisterLayout:
    """The layout c with ``c * b == a`` (also written ``a / b``).

    Raises LayoutError when no such c exists, e.g. when b's local modes are not the innermost
    local modes of a.
    """
    return _split_off(a, b, inner=True, op="divide")


def left_divide(a: RegisterLayout, b: RegisterLayout) -> RegisterLayout:
    """The layout c with ``b * c == a``; raises LayoutError when none exists."""
    return _split_off(a, b, inner=False, op="left_divide")

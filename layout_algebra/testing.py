"""Hypothesis strategies for register layouts, for the project's tests and for users' own.

It imports hypothesis (a test dependency), so the package never imports it; the signatures of
its public functions are stable:

- `register_layouts(max_rank=3, max_factors=3, replication=True)`: products of 1 to `max_factors`
  primitive factors (`local`, `spatial`, `column_local`, `column_spatial`, and `replicate` when
  `replication` is true), each of rank 1 to `max_rank`, with small sizes;
- `layout_fields(max_rank=3, replication=True)`: raw, usually non-canonical field tuples
  (shape, mode_shape, spatial_modes, local_modes) that reach every layout, including those that
  are no product of primitives (e.g. a bit reversal);
- `arbitrary_register_layouts(max_rank=3, replication=True)`: `RegisterLayout`s built from
  `layout_fields`;
- `refinements(fields)`: field tuples that denote the same function as `fields` (a mode split in
  two, a size-1 mode inserted, a replication split), for equality tests.

Every strategy keeps `num_threads * local_size` at most `MAX_CELLS`, so brute-force tables stay
cheap.
"""

from __future__ import annotations

import math

from hypothesis import strategies as st

from layout_algebra import (
    RegisterLayout,
    column_local,
    column_spatial,
    local,
    register_layout,
    replicate,
    spatial,
)

MAX_CELLS = 256
Fields = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]

_PRIMITIVES = {
    "local": local,
    "spatial": spatial,
    "column_local": column_local,
    "column_spatial": column_spatial,
}


@st.composite
def register_layouts(
    draw: st.DrawFn, max_rank: int = 3, max_factors: int = 3, replication: bool = True
) -> RegisterLayout:
    """A product of 1 to `max_factors` primitive factors of rank 1 to `max_rank` (sizes 1..4).

    At least one factor is not a `replicate`, so the rank is at least 1.
    """
    kinds = sorted(_PRIMITIVES) + (["replicate"] if replication else [])
    budget = [MAX_CELLS]

    def size() -> int:
        value = draw(st.integers(1, min(4, budget[0])))
        budget[0] //= value
        return value

    def factor(kind: str) -> RegisterLayout:
        if kind == "replicate":
            return replicate(size())
        return _PRIMITIVES[kind](*(size() for _ in range(draw(st.integers(1, max_rank)))))

    layout = factor(draw(st.sampled_from(sorted(_PRIMITIVES))))
    for _ in range(draw(st.integers(0, max_factors - 1))):
        layout = layout * factor(draw(st.sampled_from(kinds)))
    return layout


@st.composite
def layout_fields(draw: st.DrawFn, max_rank: int = 3, replication: bool = True) -> Fields:
    """Raw fields of a valid layout: random shape, mode split, list assignment and order.

    Size-1 modes and modes that canonicalisation merges occur often, so the fields are usually
    not canonical.
    """
    rank = draw(st.integers(1, max_rank))
    budget = MAX_CELLS
    shape: list[int] = []
    mode_shape: list[int] = []
    for _ in range(rank):
        num_modes = draw(st.integers(0, 3))
        extent = 1
        for _ in range(num_modes):
            size = draw(st.integers(1, min(4, budget)))
            budget //= size
            extent *= size
            mode_shape.append(size)
        shape.append(extent)
    modes = draw(st.permutations(range(len(mode_shape))))
    cut = draw(st.integers(0, len(modes)))
    spatial_modes = list(modes[:cut])
    local_modes = list(modes[cut:])
    if replication:
        for _ in range(draw(st.integers(0, 2))):
            if budget < 2:
                break
            r = draw(st.integers(2, min(3, budget)))
            budget //= r
            spatial_modes.insert(draw(st.integers(0, len(spatial_modes))), -r)
    return tuple(shape), tuple(mode_shape), tuple(spatial_modes), tuple(local_modes)


def arbitrary_register_layouts(max_rank: int = 3, replication: bool = True) -> st.SearchStrategy:
    """`RegisterLayout`s built from `layout_fields` (any layout within the size budget)."""
    return layout_fields(max_rank, replication).map(lambda fields: register_layout(*fields))


@st.composite
def refinements(draw: st.DrawFn, fields: Fields) -> Fields:
    """Fields of the same function as `fields`: split a mode, add a size-1 mode, split a
    replication, each applied a random number of times."""
    shape, mode_shape, spatial_modes, local_modes = (list(f) for f in fields)
    for _ in range(draw(st.integers(0, 3))):
        step = draw(st.sampled_from(["split", "unit", "replication"]))
        if step == "split":
            splittable = [m for m, size in enumerate(mode_shape) if _proper_divisors(size)]
            if not splittable:
                continue
            mode = draw(st.sampled_from(splittable))
            outer = draw(st.sampled_from(_proper_divisors(mode_shape[mode])))
            inner = mode_shape[mode] // outer
            mode_shape[mode : mode + 1] = [outer, inner]
            for entries in (spatial_modes, local_modes):
                entries[:] = [e + 1 if e > mode else e for e in entries]
                if mode in entries:
                    entries.insert(entries.index(mode) + 1, mode + 1)
        elif step == "unit":
            position = draw(st.integers(0, len(mode_shape)))
            mode_shape.insert(position, 1)
            for entries in (spatial_modes, local_modes):
                entries[:] = [e + 1 if e >= position else e for e in entries]
            target = draw(st.sampled_from([spatial_modes, local_modes]))
            target.insert(draw(st.integers(0, len(target))), position)
        else:
            replicated = [k for k, e in enumerate(spatial_modes) if e < 0 and _proper_divisors(-e)]
            if not replicated:
                continue
            k = draw(st.sampled_from(replicated))
            outer = draw(st.sampled_from(_proper_divisors(-spatial_modes[k])))
            spatial_modes[k : k + 1] = [-outer, spatial_modes[k] // outer]
    return tuple(shape), tuple(mode_shape), tuple(spatial_modes), tuple(local_modes)


def _proper_divisors(n: int) -> list[int]:
    """Divisors d of n with 1 < d < n."""
    return [d for d in range(2, n) if n % d == 0]


def reference_map(fields: Fields, t: int, i: int) -> tuple[int, ...]:
    """`map` straight from the definition, on raw (possibly non-canonical) fields.

    t and i are written in mixed radix over the spatial and local sizes (first entry most
    significant); each digit is the value of its mode (replication digits dropped); each
    coordinate is the row-major value of its dimension's modes.
    """
    shape, mode_shape, spatial_modes, local_modes = fields
    digits = [0] * len(mode_shape)
    for index, entries in ((t, spatial_modes), (i, local_modes)):
        for entry in reversed(entries):
            size = -entry if entry < 0 else mode_shape[entry]
            if entry >= 0:
                digits[entry] = index % size
            index //= size
    coords = []
    position = 0
    for extent in shape:
        value = 1
        coord = 0
        while value < extent:
            size = mode_shape[position]
            coord = coord * size + digits[position]
            value *= size
            position += 1
        coords.append(coord)
    return tuple(coords)


def reference_sizes(fields: Fields) -> tuple[int, int]:
    """(num_threads, local_size) of raw fields."""
    _, mode_shape, spatial_modes, local_modes = fields
    threads = math.prod(-e if e < 0 else mode_shape[e] for e in spatial_modes)
    return threads, math.prod(mode_shape[e] for e in local_modes)

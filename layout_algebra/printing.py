"""Text forms of register layouts: the rebuilding expression (`repr`) and the `t:i` grid (`str`).

`layout_expression` writes a layout as a chain of primitive factors, e.g.
``spatial(2,4).local(2,1)``, found by dividing primitive factors off the right end; where no chain
exists it falls back to ``register_layout(shape=..., ...)``. Either text rebuilds the layout when
evaluated with the package's public names.
"""

from __future__ import annotations

import functools

import numpy as np

from layout_algebra.divide import divide
from layout_algebra.errors import LayoutError
from layout_algebra.register import (
    RegisterLayout,
    column_local,
    column_spatial,
    local,
    register_layout,
    replicate,
    spatial,
)

_PRIMITIVES = {
    "local": local,
    "spatial": spatial,
    "column_local": column_local,
    "column_spatial": column_spatial,
}


def _call(name: str, sizes: tuple[int, ...]) -> str:
    return f"{name}({','.join(str(s) for s in sizes)})"


def _as_primitive(layout: RegisterLayout) -> str | None:
    """The single primitive call equal to `layout`, if there is one."""
    if layout.rank == 0:
        return _call("replicate", (layout.num_threads,))
    for name, make in _PRIMITIVES.items():
        if make(*layout.shape) == layout:
            return _call(name, layout.shape)
    return None


def _tail_factors(layout: RegisterLayout) -> list[RegisterLayout]:
    """Primitive layouts that may be the last factor of a product equal to `layout`."""
    candidates = []
    spatial_modes = layout.spatial_modes
    if spatial_modes and spatial_modes[-1] < 0:
        candidates.append(replicate(-spatial_modes[-1]))
    dims = layout.mode_dims
    innermost = {dims[m]: m for m in range(len(dims))}
    for entries, row_name, column_name in (
        (layout.local_modes, "local", "column_local"),
        ([e for e in spatial_modes], "spatial", "column_spatial"),
    ):
        for name, step in ((row_name, -1), (column_name, 1)):
            sizes = [1] * layout.rank
            previous_dim = None
            for entry in reversed(entries):
                if entry < 0 or innermost[dims[entry]] != entry:
                    break
                dim = dims[entry]
                if previous_dim is not None and (dim - previous_dim) * step <= 0:
                    break
                sizes[dim] = layout.mode_shape[entry]
                previous_dim = dim
            if previous_dim is not None:
                candidates.append(_PRIMITIVES[name](*sizes))
    return candidates


def _drop_leading_ones(layout: RegisterLayout) -> RegisterLayout:
    """`layout` without its leading size-1 dimensions (a product pads them back)."""
    lead = 0
    while lead < layout.rank and layout.shape[lead] == 1:
        lead += 1
    return register_layout(
        layout.shape[lead:], layout.mode_shape, layout.spatial_modes, layout.local_modes
    )


@functools.lru_cache(maxsize=4096)
def _chain(layout: RegisterLayout) -> tuple[str, ...] | None:
    """The shortest chain of primitive calls whose product is `layout`, or None."""
    direct = _as_primitive(layout)
    if direct is not None:
        return (direct,)
    best: tuple[str, ...] | None = None
    for factor in _tail_factors(layout):
        try:
            rest = divide(layout, factor)
        except LayoutError:
            continue
        if rest == layout:
            continue
        # A full-rank factor pads the head back, so the head may drop its leading unit extents.
        head = _chain(_drop_leading_ones(rest) if factor.rank == layout.rank else rest)
        if head is None:
            continue
        chain = head + (_as_primitive(factor) or "",)
        if best is None or len(".".join(chain)) < len(".".join(best)):
            best = chain
    return best


def layout_expression(layout: RegisterLayout) -> str:
    """An expression that rebuilds `layout` from the package's public names."""
    chain = _chain(layout)
    if chain is not None:
        return ".".join(chain)
    return (
        f"register_layout(shape={layout.shape}, mode_shape={layout.mode_shape}, "
        f"spatial_modes={layout.spatial_modes}, local_modes={layout.local_modes})"
    )


def owner_labels(layout: RegisterLayout) -> np.ndarray:
    """An object array of the tile's shape; each cell the list of `t:i` labels holding it."""
    labels = np.empty(layout.shape, dtype=object)
    for index in np.ndindex(*layout.shape):
        labels[index] = []
    table = layout.table()
    for t in range(layout.num_threads):
        for i in range(layout.local_size):
            labels[tuple(table[t, i])].append(f"{t}:{i}")
    return labels


GRID_LIMIT = 16_384
"""The most thread-register pairs a layout's text grid shows (`str`, the CLI's ``show``)."""
PICTURE_LIMIT = 1 << 18
"""The most thread-register pairs a layout's picture draws (`_repr_html_`, `plot`)."""


def too_large(layout: RegisterLayout, limit: int, what: str) -> str | None:
    """A one-line summary of `layout` when it has more than `limit` thread-register pairs (its
    `what` is then omitted), else None: displaying a layout never enumerates millions of
    elements."""
    pairs = layout.num_threads * layout.local_size
    if pairs <= limit:
        return None
    return (
        f"{layout!r}: shape {layout.shape}, {layout.num_threads} threads x {layout.local_size} "
        f"registers = {pairs} thread-register pairs, more than {limit}: {what} omitted"
    )


def text_grid(layout: RegisterLayout) -> str:
    """The tile as text: one cell per element listing the `t:i` pairs that hold it.

    Rank 1 prints one row, rank 2 a grid, higher ranks one grid per index of the leading
    dimensions; replicated elements list every owner, separated by ``|``.
    """
    if layout.rank == 0:
        return f"[{' | '.join(f'{t}:-' for t in range(layout.num_threads))}]"
    labels = owner_labels(layout)
    cells = np.vectorize(lambda owners: "|".join(owners), otypes=[object])(labels)
    width = max(len(c) for c in cells.flat)
    grid = cells.reshape((1,) + layout.shape) if layout.rank == 1 else cells
    blocks = []
    for lead in np.ndindex(*grid.shape[:-2]):
        rows = [" ".join(c.rjust(width) for c in row) for row in grid[lead]]
        heading = f"[{', '.join(str(k) for k in lead)}, :, :]\n" if layout.rank > 2 else ""
        blocks.append(heading + "\n".join(rows))
    return "\n\n".join(blocks)

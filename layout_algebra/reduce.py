"""The layout of a reduction's result: which thread holds which partial result.

Reducing a register tensor over some dimensions leaves every thread with the reductions of the
rows it held. In layout terms: a reduced *local* mode disappears (the thread folds those registers
into one), a reduced *spatial* mode becomes a replication entry in place (the threads that held
different parts of a row end up holding the same result, once they have exchanged their partial
results), so the numbering of threads is unchanged.

Example: ``reduce(spatial(3, 4), [0])`` has shape (4,) and spatial list ``(-3, 0)``: element j is
held by threads j, j + 4 and j + 8, the three threads of column j of the input.
"""

from __future__ import annotations

from collections.abc import Sequence

from layout_algebra.errors import LayoutError
from layout_algebra.register import RegisterLayout, register_layout
from layout_algebra.transform import normalize_dims


def reduce(
    layout: RegisterLayout, dims: int | Sequence[int], keepdims: bool = False
) -> RegisterLayout:
    """The layout of `layout`'s tile reduced over `dims`.

    Requires: `dims` is a dimension or a sequence of distinct dimensions of `layout` (negative
    ones count from the end). Postcondition: the result has the same `num_threads`; its shape is
    `layout.shape` without the reduced dimensions (kept with extent 1 when `keepdims`); each
    reduced spatial mode of size r becomes a replication entry -r at the same place in the spatial
    list and each reduced local mode is dropped. So thread t holds exactly the projections of the
    elements it held::

        {R.map(t, j) for j} == {drop_dims(layout.map(t, i)) for i}

    Example: ``reduce(local(2,1).spatial(8,4).local(1,2), 1)`` is
    ``local(2).spatial(8).replicate(4)``, the row sums of an mma accumulator, each held by the
    four threads of its row.
    """
    if not isinstance(layout, RegisterLayout):
        raise LayoutError(f"reduce: layout must be a RegisterLayout, got {layout!r}")
    if not isinstance(keepdims, bool):
        raise LayoutError(f"reduce: keepdims must be a bool, got {keepdims!r}")
    reduced = normalize_dims(dims, layout.rank, "reduce")
    mode_dims = layout.mode_dims
    kept_modes = [m for m, dim in enumerate(mode_dims) if dim not in reduced]
    renumber = {m: k for k, m in enumerate(kept_modes)}
    spatial_modes = [
        e if e < 0 else renumber[e] if e in renumber else -layout.mode_shape[e]
        for e in layout.spatial_modes
    ]
    local_modes = [renumber[e] for e in layout.local_modes if e in renumber]
    if keepdims:
        shape = [1 if dim in reduced else extent for dim, extent in enumerate(layout.shape)]
    else:
        shape = [extent for dim, extent in enumerate(layout.shape) if dim not in reduced]
    return register_layout(
        shape, [layout.mode_shape[m] for m in kept_modes], spatial_modes, local_modes
    )

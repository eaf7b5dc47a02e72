"""Register layouts: which thread of a block holds which element of a tile, and where.

A register layout splits every dimension of a tile into *modes* (mixed-radix digits, outermost
first) and deals each mode either to the thread index (a *spatial* mode) or to the per-thread
register index (a *local* mode). A spatial entry ``-r`` is a replication mode: ``r`` threads hold
the same data.

Worked example: ``spatial(2, 4) * local(2, 1)`` has shape (4, 4), two modes in dimension 0 (sizes
2 then 2) and one in dimension 1 (size 4)::

    mode_shape    = (2, 2, 4)      # dim 0: modes 0, 1; dim 1: mode 2
    spatial_modes = (0, 2)         # thread t = 4 * digit(mode 0) + digit(mode 2)
    local_modes   = (1,)           # register i = digit(mode 1)
    map(t, i)     = (2 * (t // 4) + i, t % 4)

The stored form is canonical (size-1 modes dropped, modes that are adjacent both in their dimension
and in their list merged, adjacent replications merged), so two layouts compare equal exactly when
they are the same function of (thread, register).
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from layout_algebra.errors import LayoutError
from layout_algebra.symbolic import Expr, as_expr
from layout_algebra.validation import (
    MAX_LAYOUT_SIZE,
    check_index_tuple,
    check_int,
    check_int_tuple,
    check_table_entries,
    int_text,
    is_int,
)

IntTuple = tuple[int, ...]


def mode_dims(shape: IntTuple, mode_shape: IntTuple) -> IntTuple:
    """The dimension of each mode of a canonical mode list (no size-1 modes).

    Requires: every entry of `mode_shape` is >= 2. Dimension k takes the next modes whose product
    is `shape[k]`; raises LayoutError when the modes do not split that way.
    """
    dims: list[int] = []
    position = 0
    for dim, extent in enumerate(shape):
        product = 1
        while product < extent and position < len(mode_shape):
            product *= mode_shape[position]
            dims.append(dim)
            position += 1
        if product != extent:
            raise LayoutError(
                f"mode_shape {mode_shape} does not split shape {shape}: the modes of dimension "
                f"{dim} multiply to {product}, expected {extent}"
            )
    if position != len(mode_shape):
        raise LayoutError(
            f"mode_shape {mode_shape} has modes {mode_shape[position:]} beyond shape {shape}"
        )
    return tuple(dims)


def _canonicalize(
    shape: IntTuple, mode_shape: IntTuple, spatial: IntTuple, local: IntTuple
) -> tuple[IntTuple, IntTuple, IntTuple]:
    """Validate a layout's fields and return its canonical (mode_shape, spatial, local)."""
    num_modes = len(mode_shape)
    seen: dict[int, str] = {}
    for which, entries in (("spatial_modes", spatial), ("local_modes", local)):
        for entry in entries:
            if entry < 0:
                if which == "local_modes":
                    raise LayoutError(
                        f"local_modes {local} holds {entry}: replication (-r) is only allowed "
                        "among spatial_modes"
                    )
                if entry > -2:
                    raise LayoutError(
                        f"spatial_modes {spatial} holds replication {entry}: "
                        "expected -r with r >= 2"
                    )
                continue
            if entry >= num_modes:
                raise LayoutError(
                    f"{which} {entries} refers to mode {entry}, but mode_shape {mode_shape} has "
                    f"{num_modes} modes"
                )
            if entry in seen:
                raise LayoutError(
                    f"mode {entry} appears twice (in {seen[entry]} and {which}); every mode must "
                    "appear exactly once"
                )
            seen[entry] = which
    missing = [m for m in range(num_modes) if m not in seen]
    if missing:
        raise LayoutError(
            f"modes {missing} of mode_shape {mode_shape} appear in neither spatial_modes nor "
            "local_modes"
        )
    if math.prod(mode_shape) != math.prod(shape):
        raise LayoutError(
            f"mode_shape {mode_shape} multiplies to {math.prod(mode_shape)}, but shape {shape} "
            f"has {math.prod(shape)} elements"
        )

    # Drop size-1 modes, renumbering the others.
    kept = [m for m in range(num_modes) if mode_shape[m] != 1]
    renumber = {m: k for k, m in enumerate(kept)}
    sizes = [mode_shape[m] for m in kept]
    lists = [
        [renumber[e] if e >= 0 else e for e in spatial if e < 0 or mode_shape[e] != 1],
        [renumber[e] for e in local if mode_shape[e] != 1],
    ]
    dims = list(mode_dims(shape, tuple(sizes)))

    # Merge mode k with mode k+1 of the same dimension when k+1 directly follows k in one list.
    merged = True
    while merged:
        merged = False
        for entries in lists:
            for pos in range(len(entries) - 1):
                k, nxt = entries[pos], entries[pos + 1]
                if k >= 0 and nxt == k + 1 and dims[k] == dims[nxt]:
                    sizes[k] *= sizes[nxt]
                    del sizes[nxt], dims[nxt], entries[pos + 1]
                    for other in lists:
                        other[:] = [e - 1 if e > nxt else e for e in other]
                    merged = True
                    break
            if merged:
                break

    # Merge adjacent replication entries.
    replicated: list[int] = []
    for entry in lists[0]:
        if entry < 0 and replicated and replicated[-1] < 0:
            replicated[-1] = -(replicated[-1] * entry)
        else:
            replicated.append(entry)
    return tuple(sizes), tuple(replicated), tuple(lists[1])


@dataclass(frozen=True)
class RegisterLayout:
    """A thread-to-data layout of a tile, stored in canonical form.

    Fields (flat tuples of ints): `shape` (tile extents), `mode_shape` (every mode, dimension 0's
    first, each dimension's outermost first), `spatial_modes` (modes over the thread index, most
    significant first; ``-r`` is an r-fold replication) and `local_modes` (modes over the
    register index, most significant first). Construction validates and canonicalises, so `==`
    and `hash` mean "same function of (thread, register)"; an extent, thread count or local size
    past `validation.MAX_LAYOUT_SIZE` (2**62, so that indices fit int64) is a LayoutError.
    """

    shape: IntTuple
    mode_shape: IntTuple
    spatial_modes: IntTuple
    local_modes: IntTuple

    def __post_init__(self) -> None:
        shape = check_int_tuple(self.shape, "shape")
        mode_shape = check_int_tuple(self.mode_shape, "mode_shape")
        spatial = check_index_tuple(self.spatial_modes, "spatial_modes")
        local = check_index_tuple(self.local_modes, "local_modes")
        mode_shape, spatial, local = _canonicalize(shape, mode_shape, spatial, local)
        num_threads = math.prod(-e if e < 0 else mode_shape[e] for e in spatial)
        local_size = math.prod(mode_shape[e] for e in local)
        for what, size in (
            *((f"shape[{d}]", extent) for d, extent in enumerate(shape)),
            ("num_threads", num_threads),
            ("local_size", local_size),
        ):
            if size > MAX_LAYOUT_SIZE:
                raise LayoutError(
                    f"register layout: {what} = {int_text(size)} exceeds {MAX_LAYOUT_SIZE} "
                    "(2**62), the largest size whose indices fit NumPy's int64"
                )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "mode_shape", mode_shape)
        object.__setattr__(self, "spatial_modes", spatial)
        object.__setattr__(self, "local_modes", local)

    # ----------------------------------------------------------------------------------------
    # Sizes
    # ----------------------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """Number of tile dimensions."""
        return len(self.shape)

    @property
    def mode_dims(self) -> IntTuple:
        """The dimension each mode belongs to."""
        return mode_dims(self.shape, self.mode_shape)

    @property
    def spatial_sizes(self) -> IntTuple:
        """Size of each spatial entry (replication entries included), most significant first."""
        return tuple(-e if e < 0 else self.mode_shape[e] for e in self.spatial_modes)

    @property
    def local_sizes(self) -> IntTuple:
        """Size of each local entry, most significant first."""
        return tuple(self.mode_shape[e] for e in self.local_modes)

    @property
    def num_threads(self) -> int:
        """Number of threads: the product of the spatial sizes, replication included."""
        return math.prod(self.spatial_sizes)

    @property
    def local_size(self) -> int:
        """Number of elements each thread holds: the product of the local sizes."""
        return math.prod(self.local_sizes)

    @property
    def replication(self) -> int:
        """How many threads hold each element (the product of the replication entries)."""
        return math.prod(-e for e in self.spatial_modes if e < 0)

    @property
    def num_elements(self) -> int:
        """Number of elements of the tile."""
        return math.prod(self.shape)

    # ----------------------------------------------------------------------------------------
    # Meaning
    # ----------------------------------------------------------------------------------------

    def _digit_plan(self) -> list[tuple[int, int, int, int, int]]:
        """Per mode: (dim, coordinate stride, 0 for spatial / 1 for local, index divisor, size)."""
        dims = self.mode_dims
        coord_stride = [1] * len(self.mode_shape)
        for m in range(len(self.mode_shape)):
            for later in range(m + 1, len(self.mode_shape)):
                if dims[later] == dims[m]:
                    coord_stride[m] *= self.mode_shape[later]
        plan = []
        for which, entries, sizes in (
            (0, self.spatial_modes, self.spatial_sizes),
            (1, self.local_modes, self.local_sizes),
        ):
            divisor = 1
            for pos in range(len(entries) - 1, -1, -1):
                entry = entries[pos]
                if entry >= 0:
                    plan.append((dims[entry], coord_stride[entry], which, divisor, sizes[pos]))
                divisor *= sizes[pos]
        return plan

    def map(self, t: Any, i: Any) -> tuple[Any, ...]:
        """The coordinates of register `i` of thread `t`.

        Requires 0 <= t < num_threads and 0 <= i < local_size (LayoutError otherwise). Ints give
        a tuple of ints; NumPy integer arrays (broadcast together) give a tuple of int64 arrays;
        symbolic `Expr` indices give `Expr` coordinates (the caller bounds their range).
        """
        if isinstance(t, Expr) or isinstance(i, Expr):
            coords = [as_expr(0)] * self.rank
        elif is_int(t) and is_int(i):
            t, i = int(t), int(i)
            if not 0 <= t < self.num_threads:
                raise LayoutError(f"thread {t} is out of range [0, {self.num_threads})")
            if not 0 <= i < self.local_size:
                raise LayoutError(f"local index {i} is out of range [0, {self.local_size})")
            coords = [0] * self.rank
        else:
            t = np.asarray(t)
            i = np.asarray(i)
            if t.dtype.kind not in "iu" or i.dtype.kind not in "iu":
                raise LayoutError(
                    f"map expects integer threads and local indices, got dtypes {t.dtype} and "
                    f"{i.dtype}"
                )
            if t.size and (t.min() < 0 or t.max() >= self.num_threads):
                raise LayoutError(
                    f"threads out of range [0, {self.num_threads}): min {t.min()}, max {t.max()}"
                )
            if i.size and (i.min() < 0 or i.max() >= self.local_size):
                raise LayoutError(
                    f"local indices out of range [0, {self.local_size}): min {i.min()}, "
                    f"max {i.max()}"
                )
            t, i = np.broadcast_arrays(t.astype(np.int64), i.astype(np.int64))
            coords = [np.zeros(t.shape, dtype=np.int64) for _ in range(self.rank)]
        for dim, stride, which, divisor, size in self._digit_plan():
            index = t if which == 0 else i
            coords[dim] = coords[dim] + (index // divisor) % size * stride
        return tuple(coords)

    def owners(self, coord: Sequence[int]) -> list[tuple[int, int]]:
        """Every (thread, local index) holding the element at `coord`, sorted.

        More than one pair exactly when the layout replicates. Raises LayoutError for a
        coordinate of the wrong rank or out of the shape, or a replication past
        `validation.MAX_TABLE_ENTRIES` owners.
        """
        check_table_entries(self.replication, f"the owner list of an element of {self!r}")
        coord = check_index_tuple(coord, "coord")
        if len(coord) != self.rank:
            raise LayoutError(f"coord {coord} has rank {len(coord)}, expected {self.rank}")
        for dim, (c, extent) in enumerate(zip(coord, self.shape)):
            if not 0 <= c < extent:
                raise LayoutError(f"coord {coord} is outside shape {self.shape} in dimension {dim}")
        dims = self.mode_dims
        digits = [0] * len(self.mode_shape)
        remaining = list(coord)
        for m in range(len(self.mode_shape) - 1, -1, -1):
            digits[m] = remaining[dims[m]] % self.mode_shape[m]
            remaining[dims[m]] //= self.mode_shape[m]
        local = 0
        for entry in self.local_modes:
            local = local * self.mode_shape[entry] + digits[entry]
        threads = [0]
        for entry in self.spatial_modes:
            if entry >= 0:
                threads = [t * self.mode_shape[entry] + digits[entry] for t in threads]
            else:
                threads = [t * -entry + r for t in threads for r in range(-entry)]
        return sorted((t, local) for t in threads)

    def table(self) -> np.ndarray:
        """All coordinates as an int64 array of shape [num_threads, local_size, rank]; LayoutError
        for more than `validation.MAX_TABLE_ENTRIES` thread-register pairs."""
        check_table_entries(self.num_threads * self.local_size, f"the table of {self!r}")
        t = np.arange(self.num_threads, dtype=np.int64)[:, None]
        i = np.arange(self.local_size, dtype=np.int64)[None, :]
        coords = self.map(t, i)
        if self.rank == 0:
            return np.zeros((self.num_threads, self.local_size, 0), dtype=np.int64)
        return np.stack(coords, axis=-1)

    # ----------------------------------------------------------------------------------------
    # Operators and fluent forms (thin sugar over the free functions)
    # ----------------------------------------------------------------------------------------

    def __mul__(self, other: RegisterLayout) -> RegisterLayout:
        if not isinstance(other, RegisterLayout):
            _refuse_operand(other, "*")
        return product(self, other)

    def __rmul__(self, other: object) -> NoReturn:
        _refuse_operand(other, "*")

    def __truediv__(self, other: RegisterLayout) -> RegisterLayout:
        if not isinstance(other, RegisterLayout):
            _refuse_operand(other, "/")
        from layout_algebra.divide import divide

        return divide(self, other)

    def __rtruediv__(self, other: object) -> NoReturn:
        _refuse_operand(other, "/")

    def local(self, *shape: int) -> RegisterLayout:
        """`self * local(*shape)`."""
        return product(self, local(*shape))

    def spatial(self, *shape: int) -> RegisterLayout:
        """`self * spatial(*shape)`."""
        return product(self, spatial(*shape))

    def column_local(self, *shape: int) -> RegisterLayout:
        """`self * column_local(*shape)`."""
        return product(self, column_local(*shape))

    def column_spatial(self, *shape: int) -> RegisterLayout:
        """`self * column_spatial(*shape)`."""
        return product(self, column_spatial(*shape))

    def replicate(self, num_threads: int) -> RegisterLayout:
        """`self * replicate(num_threads)`."""
        return product(self, replicate(num_threads))

    def reduce(self, dims: int | Sequence[int], keepdims: bool = False) -> RegisterLayout:
        """`reduce(self, dims, keepdims)`: the layout of the reduction over `dims`."""
        from layout_algebra.reduce import reduce

        return reduce(self, dims, keepdims)

    def permute(self, *dims: int) -> RegisterLayout:
        """`permute(self, dims)`; takes the dimensions as arguments or as one sequence."""
        from layout_algebra.transform import permute

        return permute(self, _varargs(dims))

    def reshape(self, *shape: int) -> RegisterLayout:
        """`reshape(self, shape)`; takes the extents as arguments or as one sequence."""
        from layout_algebra.transform import reshape

        return reshape(self, _varargs(shape))

    def flatten(self, start: int = 0, end: int = -1) -> RegisterLayout:
        """`flatten(self, start, end)`: dimensions start..end (inclusive) merged into one."""
        from layout_algebra.transform import flatten

        return flatten(self, start, end)

    def squeeze(self, dims: int | Sequence[int] | None = None) -> RegisterLayout:
        """`squeeze(self, dims)`: extent-1 dimensions removed (all of them by default)."""
        from layout_algebra.transform import squeeze

        return squeeze(self, dims)

    def unsqueeze(self, dim: int) -> RegisterLayout:
        """`unsqueeze(self, dim)`: an extent-1 dimension inserted as dimension `dim`."""
        from layout_algebra.transform import unsqueeze

        return unsqueeze(self, dim)

    def concat(self, other: RegisterLayout, dim: int) -> RegisterLayout:
        """`concat(self, other, dim)`: this tile followed by `other`'s along `dim`."""
        from layout_algebra.transform import concat

        return concat(self, other, dim)

    # ----------------------------------------------------------------------------------------
    # Display
    # ----------------------------------------------------------------------------------------

    def __repr__(self) -> str:
        from layout_algebra.printing import layout_expression

        return layout_expression(self)

    def __str__(self) -> str:
        from layout_algebra.printing import GRID_LIMIT, text_grid, too_large

        return too_large(self, GRID_LIMIT, "grid") or text_grid(self)

    def show(self) -> None:
        """Print the grid: each cell lists the `t:i` pairs that hold the element."""
        print(str(self))

    def _repr_html_(self) -> str:
        import html

        from layout_algebra.printing import PICTURE_LIMIT, too_large
        from layout_algebra.render import layout_html

        summary = too_large(self, PICTURE_LIMIT, "picture")
        if summary is not None:
            return f"<pre>{html.escape(summary)}</pre>"
        return layout_html(self)

    def plot(self, **kwargs: Any) -> Any:
        """A matplotlib figure of the layout (threads coloured, warps outlined). Raises
        LayoutError for a layout of more than `printing.PICTURE_LIMIT` thread-register pairs."""
        from layout_algebra.printing import PICTURE_LIMIT, too_large
        from layout_algebra.render import layout_figure

        summary = too_large(self, PICTURE_LIMIT, "picture")
        if summary is not None:
            raise LayoutError(f"cannot draw {summary}")
        return layout_figure(self, **kwargs)


def _refuse_operand(other: object, operator: str) -> NoReturn:
    """Raise LayoutError for anything but a register layout on one side of a layout operator
    (a common slip: ``local(4) * 3`` for ``local(4) * local(3)``; a string or a sequence would
    otherwise reach Python's own repetition and fail with a TypeError)."""
    raise LayoutError(
        f"cannot combine a RegisterLayout with {reprlib.repr(other)} ({type(other).__name__}) "
        f"by {operator}: both operands must be register layouts, e.g. local(4) * local(3)"
    )


def _varargs(values: tuple[Any, ...]) -> Any:
    """The one sequence in `values` when it is a single list or tuple, else `values` itself."""
    if len(values) == 1 and isinstance(values[0], (tuple, list)):
        return values[0]
    return values


def register_layout(
    shape: Sequence[int],
    mode_shape: Sequence[int],
    spatial_modes: Sequence[int],
    local_modes: Sequence[int],
) -> RegisterLayout:
    """Build a register layout from its four fields (validated and canonicalised)."""
    return RegisterLayout(
        shape=tuple(shape),
        mode_shape=tuple(mode_shape),
        spatial_modes=tuple(spatial_modes),
        local_modes=tuple(local_modes),
    )


def _single_modes(shape: Sequence[int], what: str) -> IntTuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return check_int_tuple(tuple(shape), f"{what} shape")


def local(*shape: int) -> RegisterLayout:
    """One thread holds the whole tile, row-major: `map(0, i)` is the row-major unravel of i."""
    sizes = _single_modes(shape, "local")
    return register_layout(sizes, sizes, (), tuple(range(len(sizes))))


def spatial(*shape: int) -> RegisterLayout:
    """One element per thread, row-major: `map(t, 0)` is the row-major unravel of t."""
    sizes = _single_modes(shape, "spatial")
    return register_layout(sizes, sizes, tuple(range(len(sizes))), ())


def column_local(*shape: int) -> RegisterLayout:
    """One thread holds the whole tile, column-major (dimension 0 fastest)."""
    sizes = _single_modes(shape, "column_local")
    return register_layout(sizes, sizes, (), tuple(reversed(range(len(sizes)))))


def column_spatial(*shape: int) -> RegisterLayout:
    """One element per thread, column-major (dimension 0 fastest over threads)."""
    sizes = _single_modes(shape, "column_spatial")
    return register_layout(sizes, sizes, tuple(reversed(range(len(sizes)))), ())


def replicate(num_threads: int) -> RegisterLayout:
    """A rank-0 layout of `num_threads` threads all holding the same (empty) data."""
    n = check_int(num_threads, "replicate num_threads")
    return register_layout((), (), (-n,) if n > 1 else (), ())


def pad_layout(layout: RegisterLayout, rank: int) -> RegisterLayout:
    """`layout` with leading size-1 dimensions up to `rank`: the same function of (t, i), with
    0 as each new leading coordinate (size-1 dimensions have no modes). A layout of `rank` or
    more dimensions is returned as it is."""
    extra = rank - layout.rank
    if extra <= 0:
        return layout
    return register_layout(
        (1,) * extra + layout.shape, layout.mode_shape, layout.spatial_modes, layout.local_modes
    )


def product(a: RegisterLayout, b: RegisterLayout) -> RegisterLayout:
    """The Kronecker product `a * b`.

    Both are padded to the same rank with leading 1s; shapes multiply per dimension; in each
    dimension a's modes come before (outside) b's; the spatial and local lists are a's then b's::

        (a*b).map(t, i) = a.map(t // b.num_threads, i // b.local_size) * b.shape
                          + b.map(t % b.num_threads, i % b.local_size)
    """
    for name, operand in (("left", a), ("right", b)):
        if not isinstance(operand, RegisterLayout):
            raise LayoutError(f"product's {name} operand must be a RegisterLayout, got {operand!r}")
    rank = max(a.rank, b.rank)
    a, b = pad_layout(a, rank), pad_layout(b, rank)
    a_dims, b_dims = a.mode_dims, b.mode_dims
    mode_shape: list[int] = []
    a_index: dict[int, int] = {}
    b_index: dict[int, int] = {}
    for dim in range(rank):
        for source, dims, index in ((a, a_dims, a_index), (b, b_dims, b_index)):
            for m, d in enumerate(dims):
                if d == dim:
                    index[m] = len(mode_shape)
                    mode_shape.append(source.mode_shape[m])

    def renumber(entries: IntTuple, index: dict[int, int]) -> list[int]:
        return [index[e] if e >= 0 else e for e in entries]

    return register_layout(
        tuple(x * y for x, y in zip(a.shape, b.shape)),
        mode_shape,
        renumber(a.spatial_modes, a_index) + renumber(b.spatial_modes, b_index),
        renumber(a.local_modes, a_index) + renumber(b.local_modes, b_index),
    )

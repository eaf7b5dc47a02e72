"""Shape transforms of register layouts: the layout of a tile viewed with other dimensions.

Each transform changes only how a tile's elements are indexed, never which thread holds which
element or in which register, so ``transform(L).map(t, i)`` is ``L.map(t, i)`` with its coordinate
re-indexed:

- `permute(L, dims)`: dimension k of the result is dimension ``dims[k]`` of L (NumPy's
  ``transpose``);
- `reshape(L, shape)`: the row-major flat index is kept (NumPy's ``reshape``);
- `flatten`, `squeeze`, `unsqueeze`: reshapes that merge dimensions, drop extent-1 dimensions or
  insert one (PyTorch's names and conventions);
- `concat(a, b, dim)`: the tile of ``a`` followed by the tile of ``b`` along `dim`, each thread
  holding a's registers, then b's.

Example: ``reshape(local(2, 3), (3, 2))`` is ``local(3, 2)`` (one thread holds all six elements in
row-major order either way), while ``reshape(column_spatial(2, 3), (3, 2))`` raises: thread 1
holds flat element 3, coordinate (1, 1), but from thread 0 to thread 1 a layout moves along at
most one dimension.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from layout_algebra.divide import left_divide
from layout_algebra.errors import LayoutError
from layout_algebra.register import RegisterLayout, local, register_layout
from layout_algebra.validation import is_int


def _check_layout(layout: object, op: str, name: str = "layout") -> RegisterLayout:
    if not isinstance(layout, RegisterLayout):
        raise LayoutError(f"{op}: {name} must be a RegisterLayout, got {layout!r}")
    return layout


def _check_dim(dim: object, rank: int, op: str) -> int:
    """`dim` in [-rank, rank) as a dimension in [0, rank)."""
    if not is_int(dim):
        raise LayoutError(f"{op}: dimension {dim!r} must be an integer")
    if not -rank <= dim < rank:
        raise LayoutError(f"{op}: dimension {dim} is out of range for rank {rank}")
    return int(dim) % rank


def normalize_dims(dims: int | Sequence[int], rank: int, op: str) -> tuple[int, ...]:
    """`dims` (one dimension or a sequence) as a tuple of distinct dimensions in [0, rank).

    Negative dimensions count from the end, as in NumPy. Raises LayoutError, naming `op`, for a
    non-integer, an out-of-range or a repeated dimension.
    """
    if is_int(dims):
        dims = (dims,)
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise LayoutError(f"{op}: dims must be an integer or a sequence of integers, got {dims!r}")
    result: list[int] = []
    for dim in dims:
        dim = _check_dim(dim, rank, op)
        if dim in result:
            raise LayoutError(f"{op}: dimension {dim} appears twice in dims {tuple(dims)}")
        result.append(dim)
    return tuple(result)


def permute(layout: RegisterLayout, dims: Sequence[int]) -> RegisterLayout:
    """The layout of the tile with its dimensions reordered: result dimension k is `dims[k]`.

    Requires: `dims` is a permutation of the dimensions (negative ones count from the end).
    Postcondition: ``permute(L, dims).map(t, i)[k] == L.map(t, i)[dims[k]]``.

    Example: ``permute(spatial(2, 4).local(2, 1), (1, 0))`` is
    ``column_spatial(4, 2).local(1, 2)``: the same threads and registers, rows and columns swapped.
    """
    layout = _check_layout(layout, "permute")
    order = normalize_dims(dims, layout.rank, "permute")
    if len(order) != layout.rank:
        raise LayoutError(
            f"permute: dims {tuple(dims)} must list all {layout.rank} dimensions exactly once"
        )
    mode_dims = layout.mode_dims
    new_order = [m for dim in order for m, d in enumerate(mode_dims) if d == dim]
    renumber = {m: k for k, m in enumerate(new_order)}
    return register_layout(
        [layout.shape[dim] for dim in order],
        [layout.mode_shape[m] for m in new_order],
        [renumber[e] if e >= 0 else e for e in layout.spatial_modes],
        [renumber[e] for e in layout.local_modes],
    )


def _resolve_shape(shape: int | Sequence[int], num_elements: int) -> tuple[int, ...]:
    """`shape` with its one optional -1 entry inferred so that it holds `num_elements`."""
    if is_int(shape):
        shape = (shape,)
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise LayoutError(f"reshape: shape must be a sequence of integers, got {shape!r}")
    for k, extent in enumerate(shape):
        if not is_int(extent) or (extent < 1 and extent != -1):
            raise LayoutError(f"reshape: shape[{k}] = {extent!r} must be a positive integer or -1")
    if list(shape).count(-1) > 1:
        raise LayoutError(f"reshape: shape {tuple(shape)} may hold at most one -1")
    known = math.prod(extent for extent in shape if extent != -1)
    if -1 in shape:
        if num_elements % known:
            raise LayoutError(
                f"reshape: cannot infer the -1 of shape {tuple(shape)}: {num_elements} elements "
                f"are not a multiple of {known}"
            )
        shape = [num_elements // known if extent == -1 else extent for extent in shape]
    elif known != num_elements:
        raise LayoutError(
            f"reshape: shape {tuple(shape)} holds {known} elements, the layout {num_elements}"
        )
    return tuple(int(extent) for extent in shape)


def _suffix_products(sizes: Sequence[int]) -> list[int]:
    """[prod(sizes[k:]) for k in 0..len(sizes)], the last being 1."""
    products = [1]
    for size in reversed(sizes):
        products.append(products[-1] * size)
    return products[::-1]


def reshape(layout: RegisterLayout, shape: int | Sequence[int]) -> RegisterLayout:
    """The layout of the tile reinterpreted as `shape`, keeping the row-major flat index.

    Requires: `shape` holds as many elements as the tile (one entry may be -1, inferred).
    Postcondition: ``ravel(reshape(L, s).map(t, i), s) == ravel(L.map(t, i), L.shape)``.

    Exact condition: read as a flat index, L's modes (dimension 0 outermost) are a mixed-radix
    number; modes adjacent there and adjacent in the same list fuse into one digit (that is the
    flat tile's own canonical form). The result exists exactly when these fused digits and the
    new extents can be split to a common refinement, i.e. when the suffix products of the fused
    sizes together with those of `shape` form a chain under divisibility. Otherwise LayoutError.

    Example: ``reshape(spatial(4, 2).local(1, 2), (16,))`` is ``spatial(8).local(2)``;
    ``reshape(local(2, 3), (3, 2)) == local(3, 2)``.
    """
    layout = _check_layout(layout, "reshape")
    new_shape = _resolve_shape(shape, layout.num_elements)
    lists = (list(layout.spatial_modes), list(layout.local_modes))
    place = {
        e: (which, pos)
        for which, entries in enumerate(lists)
        for pos, e in enumerate(entries)
        if e >= 0
    }

    # Fuse mode m + 1 into mode m's group when it directly follows m in the same list.
    groups: list[list[int]] = []
    for m in range(len(layout.mode_shape)):
        if groups and place[m] == (place[m - 1][0], place[m - 1][1] + 1):
            groups[-1].append(m)
        else:
            groups.append([m])
    group_sizes = [math.prod(layout.mode_shape[m] for m in group) for group in groups]

    boundaries = sorted(set(_suffix_products(group_sizes)) | set(_suffix_products(new_shape)))
    for smaller, larger in zip(boundaries, boundaries[1:]):
        if larger % smaller:
            raise LayoutError(
                f"reshape: {layout!r} cannot be viewed as shape {new_shape}: its flat index "
                f"has mixed-radix digits of sizes {tuple(group_sizes)} (outermost first), and "
                f"no common refinement of them and of {new_shape} exists ({smaller} does not "
                f"divide {larger})"
            )

    # Split each group at the boundaries inside it; its entry in its list becomes the parts.
    mode_shape: list[int] = []
    parts: dict[int, list[int]] = {}
    inner = _suffix_products(group_sizes)
    for g, group in enumerate(groups):
        low, high = inner[g + 1], inner[g]
        cuts = [high] + [b for b in reversed(boundaries) if low < b < high] + [low]
        parts[group[0]] = []
        for outer_cut, inner_cut in zip(cuts, cuts[1:]):
            parts[group[0]].append(len(mode_shape))
            mode_shape.append(outer_cut // inner_cut)
    new_lists: list[list[int]] = [[], []]
    for which, entries in enumerate(lists):
        for entry in entries:
            if entry < 0:
                new_lists[which].append(entry)
            elif entry in parts:
                new_lists[which].extend(parts[entry])
    return register_layout(new_shape, mode_shape, new_lists[0], new_lists[1])


def flatten(layout: RegisterLayout, start: int = 0, end: int = -1) -> RegisterLayout:
    """The layout with dimensions `start` .. `end` (inclusive) merged into one, row-major.

    Requires: start <= end after counting negative dimensions from the end. Always exists (the
    merged dimension's modes are those of the merged dimensions, in order). A rank-0 layout
    flattens to shape (1,), as in PyTorch.

    Example: ``flatten(spatial(2, 4).local(2, 1))`` is ``spatial(2).local(2).spatial(4)``: thread
    t, register i holds flat element ``8 * (t // 4) + 4 * i + t % 4``.
    """
    layout = _check_layout(layout, "flatten")
    if layout.rank == 0:
        return reshape(layout, (1,))
    first = _check_dim(start, layout.rank, "flatten")
    last = _check_dim(end, layout.rank, "flatten")
    if first > last:
        raise LayoutError(
            f"flatten: start dimension {start} comes after end dimension {end} for rank "
            f"{layout.rank}"
        )
    shape = layout.shape
    merged = shape[:first] + (math.prod(shape[first : last + 1]),) + shape[last + 1 :]
    return reshape(layout, merged)


def squeeze(layout: RegisterLayout, dims: int | Sequence[int] | None = None) -> RegisterLayout:
    """The layout with extent-1 dimensions removed: all of them, or those listed in `dims`.

    Requires: every dimension in `dims` has extent 1 (LayoutError otherwise, unlike PyTorch, which
    silently keeps it). Example: ``squeeze(local(1, 4))`` is ``local(4)``.
    """
    layout = _check_layout(layout, "squeeze")
    if dims is None:
        removed = tuple(dim for dim, extent in enumerate(layout.shape) if extent == 1)
    else:
        removed = normalize_dims(dims, layout.rank, "squeeze")
        for dim in removed:
            if layout.shape[dim] != 1:
                raise LayoutError(
                    f"squeeze: dimension {dim} of shape {layout.shape} has extent "
                    f"{layout.shape[dim]}, expected 1"
                )
    shape = [extent for dim, extent in enumerate(layout.shape) if dim not in removed]
    return reshape(layout, shape)


def unsqueeze(layout: RegisterLayout, dim: int) -> RegisterLayout:
    """The layout with a new extent-1 dimension inserted so that it becomes dimension `dim`.

    Requires: -(rank + 1) <= dim <= rank (negative counts from the end of the result, as in
    PyTorch). Example: ``unsqueeze(local(4), 0)`` is ``local(1, 4)``.
    """
    layout = _check_layout(layout, "unsqueeze")
    position = _check_dim(dim, layout.rank + 1, "unsqueeze")
    shape = layout.shape[:position] + (1,) + layout.shape[position:]
    return reshape(layout, shape)


def _local_along(dim: int, rank: int, extent: int) -> RegisterLayout:
    """`local` of rank `rank`, extent `extent` in dimension `dim` and 1 elsewhere."""
    return local(*(extent if d == dim else 1 for d in range(rank)))


def concat(a: RegisterLayout, b: RegisterLayout, dim: int) -> RegisterLayout:
    """The layout of the tile of `a` followed by the tile of `b` along `dim`, held by the same
    threads: each thread keeps a's registers first, then b's.

    Postcondition, with ``n = a.local_size`` and ``e`` the unit vector of `dim`::

        concat(a, b, dim).map(t, i) == a.map(t, i)                        if i < n
                                       b.map(t, i - n) + a.shape[dim] * e  otherwise

    Requires: equal ranks and thread counts, equal extents outside `dim`, and one layout k with
    ``a == local(p along dim) * k`` and ``b == local(q along dim) * k`` (the same threads hold
    the same parts of both tiles, which differ only in how many times k is stacked along `dim`);
    then the result is ``local(p + q along dim) * k``. Otherwise LayoutError.

    Example: two mma m16n8 accumulators side by side,
    ``concat(C, C, 1)`` with ``C = local(2,1).spatial(8,4).local(1,2)``, is
    ``column_local(2,2).spatial(8,4).local(1,2)`` (16 x 16): registers 0..3 hold the left tile,
    registers 4..7 the right one.
    """
    a = _check_layout(a, "concat", "a")
    b = _check_layout(b, "concat", "b")
    if a.rank != b.rank:
        raise LayoutError(f"concat: a has rank {a.rank} but b has rank {b.rank}; expected equal")
    axis = _check_dim(dim, a.rank, "concat")
    for d in range(a.rank):
        if d != axis and a.shape[d] != b.shape[d]:
            raise LayoutError(
                f"concat: shapes {a.shape} and {b.shape} differ in dimension {d}, outside the "
                f"concatenated dimension {axis}"
            )
    if a.num_threads != b.num_threads:
        raise LayoutError(
            f"concat: a has {a.num_threads} threads but b has {b.num_threads}; expected equal"
        )
    common = math.gcd(a.shape[axis], b.shape[axis])
    small = [k for k in range(1, math.isqrt(common) + 1) if common % k == 0]
    for extent in sorted({*small, *(common // k for k in small)}, reverse=True):
        p, q = a.shape[axis] // extent, b.shape[axis] // extent
        try:
            head_a = left_divide(a, _local_along(axis, a.rank, p))
            head_b = left_divide(b, _local_along(axis, a.rank, q))
        except LayoutError:
            continue
        if head_a == head_b:
            return _local_along(axis, a.rank, p + q) * head_a
    raise LayoutError(
        f"concat: {a!r} and {b!r} are not the same layout stacked along dimension {axis}: "
        "expected a == local(p along dim) * k and b == local(q along dim) * k for one layout k"
    )

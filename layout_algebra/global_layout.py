"""Global-memory layouts: strided views of a tensor whose extents and strides may be symbolic.

A global layout maps a coordinate to an element offset from the tensor's base pointer,
``offset(coord) = sum(coord[k] * strides[k])``. Extents and strides are ints or symbolic `Expr`s
(kernel parameters such as ``var("K", 1)``), so one compiled kernel serves every size::

    K = var("K", 1)
    g = global_row_major(64, K)          # shape (64, K), strides (K, 1)
    g.offset((2, 5))                     # 2 * K + 5, an Expr
    g.bind({"K": 32}).offset((2, 5))     # 69

Concrete extents and strides are validated (extents >= 1, strides >= 0); symbolic ones are the
caller's to keep in range, and so are symbolic coordinates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from layout_algebra.errors import LayoutError
from layout_algebra.symbolic import Expr, evaluate, simplify
from layout_algebra.validation import is_int

Extent = int | Expr


def _check_entries(values: Any, what: str, minimum: int) -> tuple[Extent, ...]:
    """`values` as a tuple of ints >= `minimum` and `Expr`s, else LayoutError."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise LayoutError(f"{what} must be a tuple of ints or Exprs, got {values!r}")
    checked: list[Extent] = []
    for k, value in enumerate(values):
        if isinstance(value, Expr) and value.is_const:
            value = value.value
        if is_int(value):
            if value < minimum:
                raise LayoutError(f"{what}[{k}] must be >= {minimum}, got {value}")
            checked.append(int(value))
        elif isinstance(value, Expr):
            checked.append(value)
        else:
            raise LayoutError(f"{what}[{k}] must be an int or an Expr, got {value!r}")
    return tuple(checked)


def _times(a: Any, b: Any) -> Any:
    """a * b, leaving out factors of 1 so symbolic products stay small."""
    if is_int(a) and a == 1:
        return b
    if is_int(b) and b == 1:
        return a
    return a * b


@dataclass(frozen=True)
class GlobalLayout:
    """A strided layout of a tensor in global memory: ``offset(c) = sum(c[k] * strides[k])``.

    Fields: `shape` and `strides`, tuples of equal length whose entries are ints (extents >= 1,
    strides >= 0) or `Expr`s; constant `Expr`s are stored as ints. `==` and `hash` compare the
    entries structurally.
    """

    shape: tuple[Extent, ...]
    strides: tuple[Extent, ...]

    def __post_init__(self) -> None:
        shape = _check_entries(self.shape, "shape", 1)
        strides = _check_entries(self.strides, "strides", 0)
        if len(shape) != len(strides):
            raise LayoutError(
                f"strides {strides!r} has {len(strides)} entries, shape {shape!r} has {len(shape)}"
            )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "strides", strides)

    @property
    def rank(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def is_symbolic(self) -> bool:
        """True when any extent or stride is an `Expr`."""
        return any(isinstance(x, Expr) for x in self.shape + self.strides)

    @property
    def num_elements(self) -> Extent:
        """The product of the extents (an int, or an `Expr` when an extent is symbolic)."""
        total: Any = 1
        for extent in self.shape:
            total = _times(total, extent)
        return total

    @property
    def size(self) -> Extent:
        """Elements from the base to the last one addressed, inclusive: the largest offset plus
        one, ``1 + sum((shape[k] - 1) * strides[k])`` (an int or an `Expr`)."""
        total: Any = 1
        for extent, stride in zip(self.shape, self.strides):
            total = total + _times(extent - 1, stride)
        return simplify(total) if isinstance(total, Expr) else total

    def free_vars(self) -> frozenset[str]:
        """Names of the variables read by the extents and strides."""
        names: frozenset[str] = frozenset()
        for x in self.shape + self.strides:
            if isinstance(x, Expr):
                names |= x.free_vars()
        return names

    def bind(self, env: Mapping[str, int]) -> GlobalLayout:
        """The layout with every variable replaced by its value in `env` (name -> int).

        Raises LayoutError when `env` lacks a variable the layout reads, or when a value makes an
        extent < 1 or a stride < 0.
        """
        missing = self.free_vars() - set(env)
        if missing:
            raise LayoutError(f"bind needs values for {sorted(missing)}, got {sorted(env)}")

        def value(x: Extent) -> int:
            return evaluate(x, env) if isinstance(x, Expr) else x

        return GlobalLayout(
            tuple(value(x) for x in self.shape), tuple(value(x) for x in self.strides)
        )

    def offset(self, coord: Sequence[Any]) -> Any:
        """The element offset ``sum(coord[k] * strides[k])`` of the element at `coord`.

        Entries are ints, NumPy integer arrays or `Expr`s. Ints and arrays are range-checked
        against concrete extents (LayoutError). Arrays need concrete strides and give an int64
        array (broadcast); anything symbolic gives an `Expr`; ints with concrete strides an int.
        """
        if isinstance(coord, (str, bytes)) or not isinstance(coord, Sequence):
            raise LayoutError(f"coord must be a sequence of {self.rank} indices, got {coord!r}")
        if len(coord) != self.rank:
            raise LayoutError(f"coord {tuple(coord)!r} has rank {len(coord)}, expected {self.rank}")
        terms: list[Any] = []
        arrays = False
        for dim, (c, extent, stride) in enumerate(zip(coord, self.shape, self.strides)):
            if is_int(c):
                if c < 0 or (is_int(extent) and c >= extent):
                    raise LayoutError(
                        f"coord {tuple(coord)!r} is outside shape {self.shape!r} in dim {dim}"
                    )
                c = int(c)
            elif isinstance(c, np.ndarray):
                if c.dtype.kind not in "iu":
                    raise LayoutError(f"coord[{dim}] must be an integer array, got {c.dtype}")
                if c.size and (c.min() < 0 or (is_int(extent) and c.max() >= extent)):
                    raise LayoutError(
                        f"coord[{dim}] holds values in [{c.min()}, {c.max()}], outside "
                        f"[0, {extent!r})"
                    )
                if isinstance(stride, Expr):
                    raise LayoutError(
                        f"coord[{dim}] is an array but stride {stride!r} is symbolic; bind the "
                        "layout's variables first"
                    )
                c = c.astype(np.int64)
                arrays = True
            elif not isinstance(c, Expr):
                raise LayoutError(
                    f"coord[{dim}] must be an int, an integer array or an Expr, got {c!r}"
                )
            terms.append(_times(c, stride))
        if arrays and any(isinstance(term, Expr) for term in terms):
            raise LayoutError("coord mixes NumPy arrays and Exprs; evaluate the Exprs first")
        total: Any = 0
        for term in terms:
            total = total + term
        if arrays:
            shape = np.broadcast_shapes(*(np.shape(c) for c in coord))
            return np.broadcast_to(np.asarray(total, dtype=np.int64), shape).copy()
        return total


def global_row_major(*shape: Extent) -> GlobalLayout:
    """The compact row-major layout: ``strides[k] = prod(shape[k+1:])``, symbolic where an
    extent is. ``global_row_major(M, K)`` has strides ``(K, 1)``."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    extents = _check_entries(shape, "shape", 1)
    strides: list[Any] = [1] * len(extents)
    for k in range(len(extents) - 2, -1, -1):
        strides[k] = _times(strides[k + 1], extents[k + 1])
    return GlobalLayout(extents, tuple(strides))

"""Function layouts: register layouts given by a formula instead of modes.

A `FunctionLayout` is a thread-to-data layout written as a formula ``fn(t, i) -> coords`` using
only integer ``+ - * // %`` (no Python ``if`` on its arguments). The same formula then runs on
Python ints, on NumPy arrays (the whole table at once) and on the symbolic integers of
`layout_algebra.symbolic` (which the proofs package hands to the solver). It is how layouts are
written straight from a specification, such as the fragment tables of the PTX ISA::

    # mma.m16n8k16 accumulator: groupID = lane >> 2, threadID_in_group = lane % 4,
    # row = groupID (+ 8 for c2, c3), col = threadID_in_group * 2 + (i & 1)
    accumulator = FunctionLayout(
        (16, 8), 32, 4, lambda t, i: (t // 4 + 8 * (i // 2), t % 4 * 2 + i % 2)
    )
    accumulator.map(5, 3)     # (9, 3)

Unlike a `RegisterLayout`, a formula has no canonical form: two `FunctionLayout`s compare equal
only when they are the same object (`==` and `hash` are by identity). Whether two layouts are the
same function is a question for `proofs.check_equivalent`, which also compares a `FunctionLayout`
with a `RegisterLayout`. Nor is the formula checked at construction: `table()` checks that every
image lies inside the shape, and the proofs package checks it symbolically.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from layout_algebra.errors import LayoutError
from layout_algebra.symbolic import Expr
from layout_algebra.validation import check_int, check_table_entries, is_int

IntTuple = tuple[int, ...]


class FunctionLayout:
    """A register layout of a tile of `shape` over `num_threads` threads of `local_size`
    registers each, whose meaning is the formula `fn`.

    ``fn(t, i)`` returns a sequence of ``len(shape)`` coordinates, built from `t` and `i` with
    integer ``+ - * // %`` only, so that it runs on ints, NumPy integer arrays and symbolic
    `Expr`s alike. Fields: `shape` (a tuple of positive ints), `num_threads`, `local_size`
    (positive ints), `fn` and `name` (a label for `repr`, the formula's ``__name__`` by
    default). Construction checks the sizes (LayoutError) but not the formula: `table` does.

    Equality and hashing are by identity; use `proofs.check_equivalent` to compare meanings.
    """

    __slots__ = ("shape", "num_threads", "local_size", "fn", "name")

    shape: IntTuple
    num_threads: int
    local_size: int
    fn: Callable[[Any, Any], Sequence[Any]]
    name: str

    def __init__(
        self,
        shape: Sequence[int],
        num_threads: int,
        local_size: int,
        fn: Callable[[Any, Any], Sequence[Any]],
        name: str | None = None,
    ) -> None:
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
            raise LayoutError(f"shape must be a tuple of integers, got {shape!r}")
        checked = tuple(check_int(extent, f"shape[{k}]") for k, extent in enumerate(shape))
        if not callable(fn):
            raise LayoutError(f"fn must be a callable fn(t, i) -> coordinates, got {fn!r}")
        if name is not None and not isinstance(name, str):
            raise LayoutError(f"name must be a str or None, got {name!r}")
        object.__setattr__(self, "shape", checked)
        object.__setattr__(self, "num_threads", check_int(num_threads, "num_threads"))
        object.__setattr__(self, "local_size", check_int(local_size, "local_size"))
        object.__setattr__(self, "fn", fn)
        object.__setattr__(self, "name", name or getattr(fn, "__name__", "fn"))

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"FunctionLayout is immutable: cannot set {key!r}")

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        # Pickled through the constructor (the slots are immutable); picklable when `fn` is
        # (a module-level function or a callable object, not a lambda).
        return (FunctionLayout, (self.shape, self.num_threads, self.local_size, self.fn, self.name))

    # ----------------------------------------------------------------------------------------
    # Sizes
    # ----------------------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """Number of tile dimensions."""
        return len(self.shape)

    @property
    def num_elements(self) -> int:
        """Number of elements of the tile."""
        return math.prod(self.shape)

    # ----------------------------------------------------------------------------------------
    # Meaning
    # ----------------------------------------------------------------------------------------

    def _coordinates(self, t: Any, i: Any) -> tuple[Any, ...]:
        """`fn(t, i)` as a tuple of `rank` entries, else LayoutError."""
        coords = self.fn(t, i)
        if isinstance(coords, (str, bytes)) or not isinstance(coords, Sequence):
            raise LayoutError(
                f"{self.name}(t, i) must return a sequence of {self.rank} coordinates, "
                f"got {coords!r}"
            )
        if len(coords) != self.rank:
            raise LayoutError(
                f"{self.name}(t, i) returned {len(coords)} coordinates, expected {self.rank} "
                f"(shape {self.shape})"
            )
        return tuple(coords)

    def map(self, t: Any, i: Any) -> tuple[Any, ...]:
        """The coordinates of register `i` of thread `t`: ``fn(t, i)``.

        Ints (0 <= t < num_threads, 0 <= i < local_size, LayoutError otherwise) give a tuple of
        ints (a constant `Expr` the formula builds, e.g. with `select`, counts as its value);
        NumPy integer arrays (range-checked, broadcast together) give a tuple of int64 arrays of
        the broadcast shape; when either index is an `Expr`, the formula runs on the symbolic
        values unchecked (the caller bounds their range) and gives its results as they come
        (`Expr`s, or ints for constant coordinates). The images are not checked against the
        shape here; `table` checks them.
        """
        if isinstance(t, Expr) or isinstance(i, Expr):
            return self._coordinates(t, i)
        if is_int(t) and is_int(i):
            t, i = int(t), int(i)
            if not 0 <= t < self.num_threads:
                raise LayoutError(f"thread {t} is out of range [0, {self.num_threads})")
            if not 0 <= i < self.local_size:
                raise LayoutError(f"local index {i} is out of range [0, {self.local_size})")
            coords = tuple(
                c.value if isinstance(c, Expr) and c.is_const else c
                for c in self._coordinates(t, i)
            )
            for k, c in enumerate(coords):
                if not is_int(c):
                    raise LayoutError(
                        f"{self.name}({t}, {i}) gave coordinate {k} = {c!r}, expected an int"
                    )
            return tuple(int(c) for c in coords)
        t, i = np.asarray(t), np.asarray(i)
        if t.dtype.kind not in "iu" or i.dtype.kind not in "iu":
            raise LayoutError(f"map expects integer threads and local indices, got {t!r} and {i!r}")
        for what, index, extent in (
            ("threads", t, self.num_threads),
            ("local indices", i, self.local_size),
        ):
            if index.size and (index.min() < 0 or index.max() >= extent):
                raise LayoutError(
                    f"{what} out of range [0, {extent}): min {index.min()}, max {index.max()}"
                )
        # Fresh arrays, not broadcast views: a formula may update its arguments in place.
        t, i = (np.array(x) for x in np.broadcast_arrays(t.astype(np.int64), i.astype(np.int64)))
        coords = self._coordinates(t, i)
        result = []
        for k, c in enumerate(coords):
            array = np.asarray(c)
            if array.dtype.kind not in "iu":
                raise LayoutError(
                    f"{self.name}(t, i) gave coordinate {k} of dtype {array.dtype}, expected "
                    "integers"
                )
            result.append(np.broadcast_to(array.astype(np.int64), t.shape).copy())
        return tuple(result)

    def table(self) -> np.ndarray:
        """All coordinates as an int64 array of shape [num_threads, local_size, rank].

        Raises LayoutError naming the first (t, i), in row-major order, whose image lies
        outside the shape, and for more than `validation.MAX_TABLE_ENTRIES` pairs.
        """
        check_table_entries(self.num_threads * self.local_size, f"the table of {self!r}")
        t = np.arange(self.num_threads, dtype=np.int64)[:, None]
        i = np.arange(self.local_size, dtype=np.int64)[None, :]
        coords = self.map(t, i)
        if self.rank == 0:
            return np.zeros((self.num_threads, self.local_size, 0), dtype=np.int64)
        table = np.stack(coords, axis=-1)
        outside = np.any((table < 0) | (table >= np.asarray(self.shape)), axis=-1)
        if outside.any():
            bad_t, bad_i = (int(k) for k in np.argwhere(outside)[0])
            raise LayoutError(
                f"{self!r} maps thread {bad_t}, register {bad_i} to "
                f"{tuple(int(c) for c in table[bad_t, bad_i])}, outside shape {self.shape}"
            )
        return table

    def owners(self, coord: Sequence[int]) -> list[tuple[int, int]]:
        """Every (thread, local index) whose image is `coord`, sorted (empty when none is).

        Raises LayoutError for a coordinate of the wrong rank or outside the shape, and (from
        `table`) when the formula leaves the shape anywhere.
        """
        if isinstance(coord, (str, bytes)) or not isinstance(coord, Sequence):
            raise LayoutError(f"coord must be a tuple of {self.rank} integers, got {coord!r}")
        if len(coord) != self.rank or not all(is_int(c) for c in coord):
            raise LayoutError(f"coord {coord!r} must be {self.rank} integers")
        for dim, (c, extent) in enumerate(zip(coord, self.shape)):
            if not 0 <= c < extent:
                raise LayoutError(
                    f"coord {tuple(coord)} is outside shape {self.shape} in dim {dim}"
                )
        hits = np.all(self.table() == np.asarray(coord, dtype=np.int64), axis=-1)
        return [(int(t), int(i)) for t, i in np.argwhere(hits)]

    def __repr__(self) -> str:
        return (
            f"FunctionLayout(shape={self.shape}, num_threads={self.num_threads}, "
            f"local_size={self.local_size}, fn={self.name})"
        )

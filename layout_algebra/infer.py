"""Recovering a register layout from its table of coordinates.

`layout_from_table(table, shape)` takes the function of a layout written out in full,
``table[t, i] = coordinates of register i of thread t``, and returns the `RegisterLayout` with
exactly that function, or raises `LayoutError` when no register layout has it. It is how text
forms of other layout systems (CuTe thread-value layouts, linear layouts) are brought back into
the algebra, and it serves anywhere a layout is only known by its values.

How it works. In a register layout, the coordinates are a sum of one term per digit of t and one
per digit of i (mixed radix, least significant digit first), each term ``digit * step`` where the
step is zero (a replication digit, threads only) or a positive stride along one dimension. So:

1. Peel the digits of t off ``table[:, 0]`` least significant first: the step of the lowest digit
   is ``f(1)``, its size the longest run with ``f(j) == j * f(1)``; the higher digits are read
   from ``f(size * q)``. A run never stops inside a digit, and two digits merge into one run
   exactly when the canonical form merges them, so the peeling is unambiguous. The same for i.
2. Check that the steps of each dimension form a mixed-radix split of its extent: sorted by stride,
   each stride is the product of the sizes below it, and all multiply to the extent.
3. Build the layout and compare its table with the input at every (t, i): this catches any
   function that is not a sum of separate thread and register terms.

Worked example: the table of ``spatial(2, 4) * local(2, 1)`` (shape (4, 4)) has ``f(t, 0)`` with
steps (0, 1) for t's digit of size 4 and (2, 0) for the next digit of size 2, and ``f(0, i)`` with
step (1, 0) for i's one digit of size 2; dimension 0's strides are 1 (size 2) and 2 (size 2),
dimension 1's stride is 1 (size 4), a mixed-radix split of (4, 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from layout_algebra.errors import LayoutError
from layout_algebra.register import RegisterLayout, register_layout
from layout_algebra.validation import check_int_tuple


def _check_table(table: Any, shape: tuple[int, ...]) -> np.ndarray:
    """`table` as an int64 array [threads, registers, rank] inside `shape`, else LayoutError."""
    try:
        array = np.asarray(table)
    except (TypeError, ValueError) as err:
        raise LayoutError(f"table must be an integer array, got {table!r}") from err
    if array.dtype.kind not in "iu":
        raise LayoutError(f"table must hold integers, got dtype {array.dtype}")
    if array.ndim != 3 or array.shape[2] != len(shape):
        raise LayoutError(
            f"table must have shape [num_threads, local_size, {len(shape)}] for tile shape "
            f"{shape}, got {array.shape}"
        )
    if array.shape[0] < 1 or array.shape[1] < 1:
        raise LayoutError(f"table needs at least one thread and one register, got {array.shape}")
    array = array.astype(np.int64)
    outside = (array < 0) | (array >= np.asarray(shape, dtype=np.int64))
    if outside.any():
        t, i, _ = np.argwhere(outside)[0]
        raise LayoutError(
            f"table[{t}, {i}] = {tuple(int(c) for c in array[t, i])} is outside the tile "
            f"shape {shape}"
        )
    return array


def _peel_digits(values: np.ndarray, what: str) -> list[tuple[int, np.ndarray]]:
    """Split f(x) = values[x] (f(0) = 0) into mixed-radix digits, least significant first.

    Returns (size, step) per digit such that f(x) = sum(digit_k(x) * step_k) holds on the
    multiples that define each digit; the caller checks the whole function afterwards.
    """
    digits: list[tuple[int, np.ndarray]] = []
    rest = values
    while len(rest) > 1:
        step = rest[1]
        multiples = np.arange(len(rest), dtype=np.int64)[:, None] * step[None, :]
        mismatch = np.flatnonzero((rest != multiples).any(axis=1))
        size = int(mismatch[0]) if mismatch.size else len(rest)
        if len(rest) % size:
            raise LayoutError(
                f"{what} is not a mixed-radix function: a digit of step "
                f"{tuple(int(s) for s in step)} runs for {size} values, which does not divide "
                f"the remaining {len(rest)}"
            )
        digits.append((size, step))
        rest = rest[::size]
    return digits


def layout_from_table(table: Any, shape: Sequence[int]) -> RegisterLayout:
    """The register layout whose `table()` equals `table`, on a tile of `shape`.

    Requires: `table` an integer array of shape [num_threads, local_size, len(shape)] with
    ``table[t, i]`` the coordinates of register i of thread t, all inside `shape`.
    Postcondition: ``layout_from_table(L.table(), L.shape) == L`` for every register layout L.
    Raises LayoutError, with the reason, when no register layout has that table: f(0, 0) is not
    the origin, a register step is zero (a thread holding one element twice), a step moves along
    two dimensions or backwards, the strides of a dimension are not a mixed-radix split of its
    extent (a gap, an overlap, a partial cover), or f(t, i) is not f(t, 0) + f(0, i).
    """
    shape = check_int_tuple(shape, "shape")
    array = _check_table(table, shape)
    rank = array.shape[2]
    if array[0, 0].any():
        raise LayoutError(
            f"table[0, 0] = {tuple(int(c) for c in array[0, 0])}: register 0 of thread 0 must "
            "hold the origin in a register layout"
        )
    thread_digits = _peel_digits(array[:, 0, :], "the thread map table[:, 0]")
    local_digits = _peel_digits(array[0, :, :], "the register map table[0, :]")

    # Per dimension: (stride, size, which, position) of each digit moving along it.
    chains: list[list[tuple[int, int, str, int]]] = [[] for _ in range(rank)]
    for which, digits in (("thread", thread_digits), ("register", local_digits)):
        for position, (size, step) in enumerate(digits):
            moved = np.flatnonzero(step)
            if moved.size == 0:
                if which == "register":
                    raise LayoutError(
                        f"register digit {position} (size {size}) has step zero: a thread would "
                        "hold one element in several registers, which no register layout does"
                    )
                continue
            if moved.size > 1 or step[moved[0]] < 0:
                raise LayoutError(
                    f"{which} digit {position} (size {size}) has step "
                    f"{tuple(int(s) for s in step)}; a register layout steps forward along "
                    "exactly one dimension"
                )
            dim = int(moved[0])
            chains[dim].append((int(step[dim]), size, which, position))

    # The strides of each dimension must be a mixed-radix split of its extent.
    mode_shape: list[int] = []
    mode_of: dict[tuple[str, int], int] = {}
    for dim, chain in enumerate(chains):
        chain.sort()
        expected = 1
        for stride, size, which, position in chain:
            if stride != expected:
                raise LayoutError(
                    f"dimension {dim} of shape {shape}: {which} digit {position} has stride "
                    f"{stride} where the mixed-radix split needs {expected} (the strides "
                    f"{[c[0] for c in chain]} leave a gap or overlap)"
                )
            expected *= size
        if expected != shape[dim]:
            raise LayoutError(
                f"dimension {dim}: the digits cover {expected} of its {shape[dim]} elements"
            )
        for _, size, which, position in reversed(chain):
            mode_of[(which, position)] = len(mode_shape)
            mode_shape.append(size)

    spatial_modes = [
        mode_of.get(("thread", position), -size)
        for position, (size, _) in reversed(list(enumerate(thread_digits)))
    ]
    local_modes = [
        mode_of[("register", position)] for position in reversed(range(len(local_digits)))
    ]
    layout = register_layout(shape, mode_shape, spatial_modes, local_modes)
    rebuilt = layout.table()
    differ = (rebuilt != array).any(axis=2)
    if differ.any():
        t, i = (int(x) for x in np.argwhere(differ)[0])
        raise LayoutError(
            f"table[{t}, {i}] = {tuple(int(c) for c in array[t, i])}, but a register layout "
            f"with the same thread and register digits gives "
            f"{tuple(int(c) for c in rebuilt[t, i])}: the table is not f(t, 0) + f(0, i) "
            "over mixed-radix digits"
        )
    return layout

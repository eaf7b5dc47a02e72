"""Argument checks shared by the layout modules: integers, sizes and tuples of them.

Each check returns the value in canonical Python form (plain ints, tuples) or raises
`LayoutError` naming the argument (`what`), the bad value and what was expected. Booleans are
not integers here, although Python treats them as such.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from layout_algebra.errors import LayoutError

IntTuple = tuple[int, ...]

MAX_LAYOUT_SIZE = 1 << 62
"""The largest extent, thread count or local size of a register layout: coordinates and indices
then fit NumPy's int64, in which `RegisterLayout.map` computes on arrays."""
MAX_TABLE_ENTRIES = 1 << 26
"""The most entries a layout tabulates into one NumPy array (`RegisterLayout.table`,
`SharedLayout.table`, `FunctionLayout.table`, `from_cute`) or lists (`RegisterLayout.owners`):
past it the array would take gigabytes, so the call is refused rather than left to fail in
NumPy or to run for hours."""


def int_text(value: int) -> str:
    """`value` in decimal, or its size in bits when it is too long to print (Python refuses to
    convert ints of more than 4300 digits to text)."""
    if abs(value).bit_length() <= 1024:
        return str(value)
    return f"{'-' if value < 0 else ''}<an integer of {abs(value).bit_length()} bits>"


def is_int(value: Any) -> bool:
    """Whether `value` is a Python or NumPy integer (and not a bool)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_int(value: Any, what: str, minimum: int = 1) -> int:
    """`value` as an int when it is an integer >= `minimum`, else LayoutError."""
    if not is_int(value):
        raise LayoutError(f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise LayoutError(f"{what} must be >= {minimum}, got {int_text(int(value))}")
    return int(value)


def _check_sequence(values: Any, what: str) -> None:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise LayoutError(f"{what} must be a tuple of integers, got {values!r}")


def check_int_tuple(values: Any, what: str, minimum: int = 1) -> IntTuple:
    """`values` as a tuple of ints >= `minimum`, else LayoutError."""
    _check_sequence(values, what)
    return tuple(check_int(v, f"{what}[{k}]", minimum) for k, v in enumerate(values))


def check_index_tuple(values: Any, what: str) -> IntTuple:
    """`values` as a tuple of ints of any sign, else LayoutError."""
    _check_sequence(values, what)
    for k, v in enumerate(values):
        if not is_int(v):
            raise LayoutError(f"{what}[{k}] must be an integer, got {v!r}")
    return tuple(int(v) for v in values)


def check_table_entries(count: int, what: str) -> None:
    """LayoutError unless `count` (the entries `what` would tabulate) is at most
    `MAX_TABLE_ENTRIES`."""
    if count > MAX_TABLE_ENTRIES:
        raise LayoutError(
            f"{what} has {count} entries, more than the {MAX_TABLE_ENTRIES} a layout tabulates"
        )

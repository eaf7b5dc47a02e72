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


def is_int(value: Any) -> bool:
    """Whether `value` is a Python or NumPy integer (and not a bool)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_int(value: Any, what: str, minimum: int = 1) -> int:
    """`value` as an int when it is an integer >= `minimum`, else LayoutError."""
    if not is_int(value):
        raise LayoutError(f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise LayoutError(f"{what} must be >= {minimum}, got {value!r}")
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

"""Which array arguments `backend.arrays.array_view` reads as dense row-major, through
`__cuda_array_interface__` (version 3, byte strides).

Dense row-major strides of shape (d0, ..., dn) with itemsize s are worked out by hand: the last
dimension has stride s, each one before it the next one's stride times the next one's size. A
dimension of size 1 is never stepped over, so its stride does not matter; an array with a
dimension of size 0 holds no element, so no stride matters.
"""

from __future__ import annotations

import pytest

from backend.arrays import array_view

ADDRESS = 0x7F00_0000_0000


class OneDevice:
    """The part of `Device` that `array_view` asks: every pointer is on device 0."""

    def pointer_ordinal(self, address: int) -> int | None:
        return 0


class InterfaceArray:
    """An object exposing only `__cuda_array_interface__` (version 3)."""

    def __init__(self, shape: tuple[int, ...], strides: tuple[int, ...] | None) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": "<f4",
            "data": (ADDRESS, False),
            "strides": strides,
            "version": 3,
        }


@pytest.mark.parametrize(
    ("shape", "strides", "contiguous"),
    [
        ((2, 3), None, True),  # no strides: dense row-major by definition
        ((2, 3), (12, 4), True),  # row-major float32: (3 * 4, 4)
        ((2, 3), (4, 8), False),  # column-major
        ((2, 1, 3), (12, 12, 4), True),  # row-major with a size-1 middle dimension
        ((2, 1, 3), (12, 999, 4), True),  # a size-1 dimension may have any stride
        ((2, 1, 3), (4, 4, 8), False),  # a size-1 dimension does not excuse the others
        ((1, 4), (4, 8), False),  # a leading 1: the last dimension still needs stride 4
        ((0, 3), (4, 8), True),  # empty: no element, so no stride matters
        ((3, 0), (4, 4), True),  # empty in the last dimension
        ((2, 0, 3), (0, 0, 0), True),  # empty, with zero strides
    ],
)
def test_interface_array_contiguity(
    shape: tuple[int, ...], strides: tuple[int, ...] | None, contiguous: bool
) -> None:
    view = array_view("a", InterfaceArray(shape, strides), 0, 0, OneDevice())
    assert view.contiguous is contiguous

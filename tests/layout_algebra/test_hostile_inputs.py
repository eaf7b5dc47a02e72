"""Hostile inputs to the layout algebra get a LayoutError naming the problem, never a raw
Python error: deeply nested CuTe text, swizzles past 64-bit offsets."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layout_algebra.errors import LayoutError
from layout_algebra.interop import MAX_CUTE_NESTING, from_cute
from layout_algebra.shared import MAX_SWIZZLE_BIT, Swizzle


@pytest.mark.parametrize("depth", [MAX_CUTE_NESTING + 2, 10_000])
def test_deeply_nested_cute_text_is_refused(depth: int) -> None:
    text = "(" * depth + "8" + ")" * depth + ":" + "(" * depth + "1" + ")" * depth
    with pytest.raises(LayoutError, match=f"parentheses nested deeper than {MAX_CUTE_NESTING}"):
        from_cute(text, (8,))


def test_nesting_within_the_limit_parses() -> None:
    # (threads, values) with the thread mode nested up to the limit: 8 threads, 1 value each.
    depth = MAX_CUTE_NESTING - 1
    nested = "(" * depth + "{}" + ")" * depth
    text = f"({nested.format(8)},1):({nested.format(1)},0)"
    layout = from_cute(text, (8,))
    assert (layout.num_threads, layout.local_size) == (8, 1)


@pytest.mark.parametrize(
    ("bits", "base", "shift", "last"),
    [(10**6, 0, 10**6, 1_999_999), (3, 57, 4, 63), (31, 0, 32, 62)],
)
def test_a_swizzle_past_64_bit_offsets_is_refused(
    bits: int, base: int, shift: int, last: int
) -> None:
    message = re.escape(f"Swizzle({bits}, {base}, {shift}) reads bits up to {last}")
    with pytest.raises(LayoutError, match=message):
        Swizzle(bits, base, shift)


@settings(max_examples=50, deadline=None)
@given(bits=st.integers(0, 20), base=st.integers(0, 20), extra=st.integers(0, 20))
def test_swizzles_within_the_limit_are_their_own_inverse(bits: int, base: int, extra: int) -> None:
    shift = bits + extra
    if bits + base + shift > MAX_SWIZZLE_BIT:
        with pytest.raises(LayoutError):
            Swizzle(bits, base, shift)
        return
    swizzle = Swizzle(bits, base, shift)
    for x in (0, 1, 12345, (1 << (bits + base + shift)) - 1):
        assert swizzle(swizzle(x)) == x

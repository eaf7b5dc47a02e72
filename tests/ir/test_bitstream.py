"""Scattered bitstream reads and writes against `ir.dtypes.pack` / `unpack`."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ir import bitstream, dtypes


def test_read_straddling_three_bit_elements():
    # 3-bit elements 0..7 packed LSB first: element 2 spans bits 6..8 (two bytes).
    stream = dtypes.pack(np.arange(8), dtypes.u3)
    np.testing.assert_array_equal(bitstream.read(stream, np.array([2, 7, 0]), 3), [2, 7, 0])


def test_write_keeps_neighbouring_nibbles():
    stream = np.array([0x21, 0x43], dtype=np.uint8)  # u4 elements 1, 2, 3, 4
    bitstream.write(stream, np.array([1, 2]), np.array([0xF, 0x0]), 4)
    np.testing.assert_array_equal(stream, [0xF1, 0x40])


def test_fits_checks_the_last_bit():
    assert bitstream.fits(2, np.array([4, 5]), 3).tolist() == [True, False]


widths = st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8, 16, 32])


@given(widths, st.integers(1, 40), st.data())
def test_scattered_writes_equal_packing_the_result(nbits, count, data):
    dtype = {16: dtypes.f16, 32: dtypes.i32}.get(nbits) or dtypes.from_name(f"u{nbits}")
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    before = rng.integers(0, 1 << nbits, count)
    after = before.copy()
    index = rng.permutation(count)[: data.draw(st.integers(0, count))]
    after[index] = rng.integers(0, 1 << nbits, index.size)
    stream = dtypes.pack(before, dtype)
    bitstream.write(stream, index, after[index], nbits)
    np.testing.assert_array_equal(stream, dtypes.pack(after, dtype))
    np.testing.assert_array_equal(bitstream.read(stream, np.arange(count), nbits), after)


@pytest.mark.parametrize("nbits", [8, 16])
def test_read_whole_bytes_from_an_odd_length_stream(nbits):
    stream = np.array([1, 2, 3], dtype=np.uint8)
    expected = [1, 2, 3] if nbits == 8 else [0x0201]
    count = 3 if nbits == 8 else 1
    np.testing.assert_array_equal(bitstream.read(stream, np.arange(count), nbits), expected)

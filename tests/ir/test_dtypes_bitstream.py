"""Dense LSB-first bitstream storage of ir.dtypes: `pack`, `unpack` and `packed_nbytes`.

Literal byte tables, round-trip properties for every bit width, and a differential check against
a brute-force packer built on Python's arbitrary-precision integers.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ir import dtypes
from ir.dtypes import DataType, DtypeError

# One type per storage width: 1..8 bits, 16 and 32.
WIDTHS = [dtypes.u1, dtypes.i2, dtypes.u3, dtypes.f4e2m1, dtypes.i5, dtypes.f6e3m2]
WIDTHS += [dtypes.u7, dtypes.f8e4m3, dtypes.bf16, dtypes.i32]


def brute_force_pack(codes: list[int], nbits: int) -> bytes:
    """The stream as one big integer: element k shifted left by k * nbits, little-endian bytes."""
    stream = sum(code << (k * nbits) for k, code in enumerate(codes))
    return stream.to_bytes((len(codes) * nbits + 7) // 8, "little")


@pytest.mark.parametrize(
    "dtype, codes, expected",
    [
        (dtypes.u4, [1, 2, 3], [0x21, 0x03]),
        (dtypes.u4, [0xA, 0xB, 0xC, 0xD], [0xBA, 0xDC]),
        # u3: 001 | 010 | 011 | 100 | 101 from bit 0 up: 0b11_010_001, 0b0_101_100_0
        (dtypes.u3, [1, 2, 3, 4, 5], [0b1101_0001, 0b0101_1000]),
        (dtypes.u1, [1, 0, 1, 1, 0, 0, 0, 0, 1], [0b0000_1101, 0b0000_0001]),
        (dtypes.u2, [3, 0, 1, 2, 1], [0b1001_0011, 0b0000_0001]),
        # u5: 11111 then 00001 then 10000: bits 0-4, 5-9, 10-14
        (dtypes.u5, [0x1F, 0x01, 0x10], [0b0011_1111, 0b0100_0000]),
        (dtypes.u6, [0x3F, 0x00, 0x15], [0b0011_1111, 0b0101_0000, 0b0000_0001]),
        (dtypes.u7, [0x7F, 0x01], [0xFF, 0x00]),
        (dtypes.u8, [0x12, 0xFF], [0x12, 0xFF]),
        (dtypes.f16, [0x3C00, 0x1234], [0x00, 0x3C, 0x34, 0x12]),
        (dtypes.i32, [0x1234_5678], [0x78, 0x56, 0x34, 0x12]),
        (dtypes.u4, [], []),
    ],
)
def test_pack_table(dtype: DataType, codes: list[int], expected: list[int]) -> None:
    packed = dtypes.pack(np.array(codes, dtype=np.uint64), dtype)
    assert packed.dtype == np.uint8
    assert packed.tolist() == expected
    assert dtypes.unpack(packed, dtype, len(codes)).tolist() == codes


@pytest.mark.parametrize("dtype", WIDTHS, ids=str)
@given(data=st.data())
def test_unpack_of_pack_is_identity(dtype: DataType, data: st.DataObject) -> None:
    codes = data.draw(st.lists(st.integers(0, 2**dtype.nbits - 1), max_size=80))
    packed = dtypes.pack(codes, dtype)
    assert (
        packed.size
        == dtypes.packed_nbytes(len(codes), dtype)
        == (len(codes) * dtype.nbits + 7) // 8
    )
    unpacked = dtypes.unpack(packed, dtype, len(codes))
    assert unpacked.dtype == dtype.code_dtype
    assert unpacked.tolist() == codes


@pytest.mark.parametrize("dtype", WIDTHS, ids=str)
@given(data=st.data())
def test_pack_matches_brute_force(dtype: DataType, data: st.DataObject) -> None:
    codes = data.draw(st.lists(st.integers(0, 2**dtype.nbits - 1), max_size=80))
    assert bytes(dtypes.pack(codes, dtype)) == brute_force_pack(codes, dtype.nbits)


@pytest.mark.parametrize("dtype", WIDTHS, ids=str)
def test_pack_of_unpack_of_random_bytes_is_identity(dtype: DataType) -> None:
    count = 8 * 37  # a whole number of bytes for every width
    stream = np.random.default_rng(dtype.nbits).integers(0, 256, count * dtype.nbits // 8)
    stream = stream.astype(np.uint8)
    codes = dtypes.unpack(stream, dtype, count)
    assert np.array_equal(dtypes.pack(codes, dtype), stream)


def test_pack_takes_codes_in_c_order() -> None:
    grid = np.array([[1, 2], [3, 4]], dtype=np.uint8)
    assert dtypes.pack(grid, dtypes.u4).tolist() == [0x21, 0x43]
    assert dtypes.pack(grid.T, dtypes.u4).tolist() == [0x31, 0x42]


def test_unpack_accepts_bytes_and_ignores_trailing_bytes() -> None:
    assert dtypes.unpack(b"\x21\x03\xff", dtypes.u4, 3).tolist() == [1, 2, 3]
    assert dtypes.unpack(bytearray(b"\xd1\x58"), dtypes.u3, 2).tolist() == [1, 2]
    assert dtypes.unpack(np.array([0x21], dtype=np.uint8), dtypes.u4, 0).tolist() == []


def test_packed_nbytes_table() -> None:
    table = [(dtypes.u4, 3, 2), (dtypes.u3, 5, 2), (dtypes.u3, 8, 3), (dtypes.i1, 9, 2)]
    table += [(dtypes.f6e2m3, 4, 3), (dtypes.f16, 3, 6), (dtypes.f32, 2, 8), (dtypes.u7, 0, 0)]
    for dtype, count, size in table:
        assert dtypes.packed_nbytes(count, dtype) == size


def test_pack_rejects_codes_out_of_range() -> None:
    with pytest.raises(DtypeError, match=r"code 8 is not a bit pattern of u3"):
        dtypes.pack([1, 8], dtypes.u3)
    with pytest.raises(DtypeError, match=r"the element type must be a DataType.*'u3'"):
        dtypes.pack([1], "u3")


def test_unpack_rejects_bad_buffers() -> None:
    with pytest.raises(DtypeError, match=r"5 elements of u3 take 2 bytes, the buffer holds 1"):
        dtypes.unpack(b"\x01", dtypes.u3, 5)
    with pytest.raises(DtypeError, match=r"1-D uint8 array or bytes.*int64"):
        dtypes.unpack(np.array([1, 2]), dtypes.u4, 1)
    with pytest.raises(DtypeError, match=r"1-D uint8 array or bytes.*shape \(1, 2\)"):
        dtypes.unpack(np.zeros((1, 2), dtype=np.uint8), dtypes.u4, 1)
    with pytest.raises(DtypeError, match=r"non-negative int, got -1"):
        dtypes.unpack(b"", dtypes.u4, -1)

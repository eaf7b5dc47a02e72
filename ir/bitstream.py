"""Vectorised reads and writes of elements in a dense LSB-first bitstream held in a byte array.

Element k of a b-bit type occupies bits [k*b, (k+1)*b) of the stream, bit j being bit j % 8 of
byte j // 8 (section 4 of the contract; `ir.dtypes.pack` writes whole streams). The interpreter
reads and writes scattered elements of global and shared memory with these functions; a write
changes only the element's own bits, so elements of different threads sharing a byte keep their
meaning (read-modify-write of bits).
"""

from __future__ import annotations

import numpy as np


def fits(nbytes: int, index: np.ndarray, nbits: int) -> np.ndarray:
    """Which elements `index` of `nbits` bits lie entirely within a stream of `nbytes` bytes."""
    return (index >= 0) & ((index + 1) * nbits <= nbytes * 8)


def read(stream: np.ndarray, index: np.ndarray, nbits: int) -> np.ndarray:
    """The codes (int64) of elements `index` (any shape) of `nbits` bits (1..32) in `stream`.

    Requires every element to fit in the stream (`fits`).
    """
    index = np.asarray(index, dtype=np.int64)
    width = nbits // 8
    if nbits % 8 == 0 and stream.size % width == 0:
        # Case: whole bytes in a stream of whole elements; read them as little-endian words.
        return stream.view(f"<u{width}")[index].astype(np.int64)
    first_bit = index * nbits
    first_byte = first_bit >> 3
    shift = first_bit & 7
    span = (7 + nbits + 7) // 8
    window = np.zeros(index.shape, dtype=np.int64)
    last = stream.size - 1
    for k in range(span):
        byte = np.minimum(first_byte + k, last)
        window |= stream[byte].astype(np.int64) << (8 * k)
    return (window >> shift) & ((1 << nbits) - 1)


def write(stream: np.ndarray, index: np.ndarray, codes: np.ndarray, nbits: int) -> None:
    """Write `codes` of elements `index` (distinct, each fitting in `stream`) in place.

    Only the elements' own bits change, so several elements can share a byte.
    """
    index = np.asarray(index, dtype=np.int64).ravel()
    codes = np.asarray(codes, dtype=np.int64).ravel()
    if nbits % 8 == 0:
        # Case: whole bytes; every byte belongs to one element.
        for k in range(nbits // 8):
            stream[index * (nbits // 8) + k] = (codes >> (8 * k)) & 0xFF
        return
    # Case: sub-byte or byte-straddling elements; clear then set each byte's bits.
    first_bit = index * nbits
    first_byte = first_bit >> 3
    shift = first_bit & 7
    mask = ((1 << nbits) - 1) << shift
    bits = codes << shift
    for k in range((7 + nbits + 7) // 8):
        byte_mask = (mask >> (8 * k)) & 0xFF
        touched = byte_mask != 0
        where = first_byte[touched] + k
        np.bitwise_and.at(stream, where, (~byte_mask[touched] & 0xFF).astype(np.uint8))
        np.bitwise_or.at(stream, where, ((bits[touched] >> (8 * k)) & 0xFF).astype(np.uint8))

"""Shared-memory matrix descriptors of Hopper's ``wgmma``, derived from shared layouts.

A ``wgmma.mma_async`` operand in shared memory (B always, A when it does not come from
registers) is named by a 64-bit *matrix descriptor* (PTX ISA, "Matrix Descriptor" and "Shared
Memory Matrix Layout")::

    bits  0-13  start address >> 4          bits 32-45  stride byte offset (SBO) >> 4
    bits 16-29  leading byte offset (LBO) >> 4   bits 49-51  base offset (0 here)
    bits 62-63  swizzle mode: 0 none (interleaved), 1 128B, 2 64B, 3 32B

One instruction reads a tile of R rows (the operand's M or N side: 64 for A, N for B) by 32
bytes of K: two 16-byte *chunks* of T = 128 / element bits elements (k16 of 16-bit types,
k32 of 8-bit ones, k8 of tf32). With ``esz`` the element's bytes and ``s = 2**B`` the chunks
of a swizzled row (B = 1, 2, 3 for 32B, 64B, 128B), element (r, c) of that tile (r along M or
N, c along K) is read at the byte address (the PTX's canonical CuTe layouts, in bytes)::

    K-major, none:      start + (r % 8) 16 + (r // 8) SBO + (c % T) esz + (c // T) LBO
    K-major, swizzled:  start + (r % 8) 16 s + (r // 8) SBO + (c % T) esz + (c // T) 16
    MN-major, none:     start + (r % T) esz + (r // T) SBO + (c % 8) 16 + (c // 8) LBO
    MN-major, swizzled: start + (r % T) esz + (r // T % s) 16 + (r // (T s)) LBO
                              + (c % 8) 16 s + (c // 8) SBO

and then the mode's XOR of address bits (`swizzle_modes`: CuTe's ``Swizzle<B, 4, 3>`` on
byte addresses). The XOR acts on the absolute address, so it equals the same XOR on offsets
within an allocation that starts at a multiple of its repeat, ``2 ** (7 + B)`` bytes
(`WgmmaDescriptor.alignment`; 16 bytes without a swizzle), which whoever places the allocation
must guarantee.

`derive_descriptor(layout, element_bits, origin, dims, rows)` finds the descriptor of the
tile of `layout` at `origin`: for each major-ness and swizzle mode it reads start, LBO and SBO
off the layout's offsets before its swizzle and keeps the first whose address function equals
the layout's at every element of the tile (the tile is at most 256 rows by 32 bytes), or None.
`WgmmaDescriptor.claim(...)` gives that equality as a proof obligation for
`proofs.check_equivalent` (two memory maps over the tile's (r, c)), as the mma and ldmatrix
plans do: the descriptor is right exactly when the solver finds no differing element.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from layout_algebra.errors import LayoutError
from layout_algebra.shared import SharedLayout
from layout_algebra.swizzle_modes import (
    CHUNK_BYTES,
    SWIZZLE_BITS,
    ByteMap,
    byte_swizzle,
    check_mode,
    check_tile,
    layout_bytes,
    repeat_bytes,
    unswizzled,
)
from layout_algebra.validation import check_int

K_BYTES = 32
"""Bytes of K one wgmma instruction reads per row (two chunks)."""
MODE_CODES = {"128B": 1, "64B": 2, "32B": 3, "none": 0}
"""Swizzle mode name -> its code in bits 62-63 of the descriptor."""
MAJORS = ("k", "mn")
"""Major-ness: K-major (a row's K elements contiguous) or M/N-major (the column's)."""
FIELD_LIMIT = 1 << 18
"""Start, LBO and SBO are 14-bit fields of 16-byte units: every byte value is below this."""
ELEMENT_BITS = (8, 16, 32)
"""Element widths of wgmma's shared-memory operands (8-bit floats and integers, f16/bf16,
tf32)."""
MAX_ROWS = 256
"""The most rows (N of B) one instruction reads."""


@dataclass(frozen=True)
class WgmmaDescriptor:
    """A wgmma matrix descriptor for a tile of `rows` rows by 32 bytes of K of
    `element_bits`-bit elements: `major` ("k" or "mn"), `swizzle` (a key of
    `swizzle_modes.SWIZZLE_BITS`), `start`, `leading_byte_offset` and `stride_byte_offset`
    in bytes, start relative to the allocation (see the module docstring). A field the tile
    never uses (SBO of a K-major tile of 8 rows, LBO of a swizzled K-major one) holds the
    value the PTX assumes for it: LBO 16, SBO 0."""

    major: str
    swizzle: str
    start: int
    leading_byte_offset: int
    stride_byte_offset: int
    element_bits: int
    rows: int

    def __post_init__(self) -> None:
        if self.major not in MAJORS:
            raise LayoutError(f"wgmma descriptor: major={self.major!r}; expected 'k' or 'mn'")
        check_mode(self.swizzle, "wgmma descriptor")
        _check_element_bits(self.element_bits)
        _check_rows(self.rows)
        for name in ("start", "leading_byte_offset", "stride_byte_offset"):
            value = check_int(getattr(self, name), f"wgmma descriptor {name}", 0)
            if value % CHUNK_BYTES or value >= FIELD_LIMIT:
                raise LayoutError(
                    f"wgmma descriptor: {name}={value}; expected a multiple of 16 below "
                    f"{FIELD_LIMIT} (a 14-bit field of 16-byte units)"
                )

    @property
    def chunk_elements(self) -> int:
        """T: elements of a 16-byte chunk."""
        return 128 // self.element_bits

    @property
    def k_elements(self) -> int:
        """Elements of K one instruction reads per row: 32 bytes."""
        return K_BYTES * 8 // self.element_bits

    @property
    def swizzle_bits(self) -> int:
        """B: the swizzle XORs B address bits (0 without a swizzle)."""
        return SWIZZLE_BITS[self.swizzle]

    @property
    def alignment(self) -> int:
        """Bytes the allocation's start must be a multiple of for the hardware's XOR on
        absolute addresses to be the XOR on offsets: the swizzle's repeat (16 without one)."""
        return repeat_bytes(self.swizzle)

    def byte_offset(self, r: Any, c: Any) -> Any:
        """The byte offset the hardware reads element (r, c) of the tile at (ints, NumPy arrays
        or `Expr`s; 0 <= r < rows, 0 <= c < k_elements): the canonical layout of the module
        docstring, then the swizzle."""
        t, esz = self.chunk_elements, self.element_bits // 8
        lbo, sbo = self.leading_byte_offset, self.stride_byte_offset
        chunks = 1 << self.swizzle_bits
        if self.major == "k":
            row_bytes = CHUNK_BYTES * chunks
            chunk_stride = lbo if self.swizzle == "none" else CHUNK_BYTES
            linear = (r % 8) * row_bytes + (r // 8) * sbo + (c % t) * esz + (c // t) * chunk_stride
        elif self.swizzle == "none":
            linear = (r % t) * esz + (r // t) * sbo + (c % 8) * CHUNK_BYTES + (c // 8) * lbo
        else:
            linear = (
                (r % t) * esz
                + (r // t % chunks) * CHUNK_BYTES
                + (r // (t * chunks)) * lbo
                + (c % 8) * CHUNK_BYTES * chunks
                + (c // 8) * sbo
            )
        return byte_swizzle(self.swizzle)(self.start + linear)

    def table(self) -> np.ndarray:
        """Every byte offset as an int64 array of shape (rows, k_elements)."""
        return ByteMap("descriptor", (self.rows, self.k_elements), self.byte_offset).table()

    def encode(self, base_address: int = 0) -> int:
        """The 64-bit descriptor word for an allocation at shared-memory address `base_address`
        (a multiple of `alignment`; the tile starts at ``base_address + start``)."""
        base = check_int(base_address, "wgmma descriptor base_address", 0)
        if base % self.alignment:
            raise LayoutError(
                f"wgmma descriptor: base_address={base} is not a multiple of {self.alignment} "
                f"bytes, the repeat of the {self.swizzle} swizzle"
            )
        address = base + self.start
        if address >= FIELD_LIMIT:
            raise LayoutError(
                f"wgmma descriptor: start address {address} is past the 14-bit field's "
                f"{FIELD_LIMIT} bytes"
            )
        code = MODE_CODES[self.swizzle]
        return (
            (address >> 4)
            | (self.leading_byte_offset >> 4) << 16
            | (self.stride_byte_offset >> 4) << 32
            | code << 62
        )

    def claim(
        self, layout: SharedLayout, origin: Sequence[int], dims: tuple[int, int]
    ) -> tuple[ByteMap, ByteMap]:
        """``(emitted, required)``: the bytes the descriptor makes the hardware read and the
        bytes `layout` holds the tile at, over the tile's (r, c); `proofs.check_equivalent`
        of the two decides whether the descriptor is right (`derive_descriptor`'s arguments)."""
        required = layout_bytes(layout, self.element_bits, origin, dims)
        shape = (self.rows, self.k_elements)
        return ByteMap("emitted", shape, self.byte_offset), ByteMap("required", shape, required)


def _check_element_bits(element_bits: object) -> int:
    if element_bits not in ELEMENT_BITS or isinstance(element_bits, bool):
        raise LayoutError(f"wgmma descriptor: element_bits={element_bits!r}; expected 8, 16 or 32")
    return int(element_bits)


def _check_rows(rows: object) -> int:
    value = check_int(rows, "wgmma descriptor rows", 8)
    if value % 8 or value > MAX_ROWS:
        raise LayoutError(
            f"wgmma descriptor: rows={value}; expected a multiple of 8 from 8 to {MAX_ROWS}"
        )
    return value


def _candidate(
    major: str, swizzle: str, linear: Any, element_bits: int, rows: int
) -> WgmmaDescriptor | None:
    """The descriptor of one major-ness and swizzle mode whose start, LBO and SBO are read off
    `linear` (the tile's byte offsets before the layout's swizzle), or None when they do not
    fit the fields."""
    t = 128 // element_bits
    chunks = 1 << SWIZZLE_BITS[swizzle]
    start = linear(0, 0)

    def step(r: int, c: int) -> int | None:
        """The byte step to (r, c), or None when the tile has no such element (unused field)."""
        if r >= rows or c * element_bits >= K_BYTES * 8:
            return None
        return linear(r, c) - start

    if major == "k":
        sbo = step(8, 0)
        lbo = step(0, t) if swizzle == "none" else CHUNK_BYTES
    elif swizzle == "none":
        sbo, lbo = step(t, 0), step(0, 8)
    else:
        lbo, sbo = step(t * chunks, 0), step(0, 8)
    lbo = CHUNK_BYTES if lbo is None else lbo
    sbo = 0 if sbo is None else sbo
    if any(v < 0 or v % CHUNK_BYTES or v >= FIELD_LIMIT for v in (start, lbo, sbo)):
        return None
    return WgmmaDescriptor(major, swizzle, start, lbo, sbo, element_bits, rows)


def derive_descriptor(
    layout: SharedLayout,
    element_bits: int,
    origin: Sequence[int],
    dims: tuple[int, int],
    rows: int,
) -> WgmmaDescriptor | None:
    """The descriptor of the (`rows`, 32 bytes of K) tile of `layout` at `origin`, or None
    when no major-ness and swizzle mode reads it.

    `dims` = (the layout's dimension along M or N, its dimension along K); `origin` a full
    coordinate of the layout (the tile's first element); `element_bits` 8, 16 or 32; `rows` a
    multiple of 8 up to 256. The result's address function equals the layout's on every
    element of the tile (checked on all of them; `WgmmaDescriptor.claim` states it for the
    solver), with offsets relative to the layout's allocation (aligned to the result's
    `alignment`). Raises LayoutError for arguments outside those requirements.
    """
    element_bits = _check_element_bits(element_bits)
    rows = _check_rows(rows)
    k = K_BYTES * 8 // element_bits
    corner = check_tile(layout, origin, dims, (rows, k), "wgmma descriptor")
    linear = layout_bytes(unswizzled(layout), element_bits, corner, dims)
    wanted = ByteMap("layout", (rows, k), layout_bytes(layout, element_bits, corner, dims)).table()
    for swizzle in SWIZZLE_BITS:
        for major in MAJORS:
            descriptor = _candidate(major, swizzle, linear, element_bits, rows)
            if descriptor is not None and np.array_equal(descriptor.table(), wanted):
                return descriptor
    return None

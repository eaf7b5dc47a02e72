"""Shared-memory layouts: where each element of a tile lives in a shared-memory allocation.

A shared layout maps a tile coordinate to an offset, in elements, from the start of the
allocation. Like a register layout it splits every dimension into *modes* (mixed-radix digits,
outermost first); each mode has a stride, and the offset is the sum of digit * stride, optionally
followed by an XOR *swizzle* of the offset's bits (CuTe's ``Swizzle<B, M, S>``)::

    offset(coord) = swizzle(sum over modes m of digit_m(coord) * mode_strides[m])

Worked example: ``shared_row_major(4, 8)`` has modes (4, 8) with strides (8, 1), so
``offset((2, 3)) == 19``; with ``Swizzle(1, 0, 4)`` (bit 4 of the offset flips bit 0),
``offset((2, 3)) == 19 ^ 1 == 18``.

`Swizzle(bits, base, shift)` flips the `bits` bits starting at bit `base` by the bits `shift`
positions higher: ``x ^ ((x & (((1 << bits) - 1) << (base + shift))) >> shift)``. It only reads and
writes bits below ``bits + base + shift`` (its `width`), so it permutes every aligned block of
``2**width`` offsets. `shared_row_major_swizzle(*shape, element_bits=...)` picks the swizzle that
makes 16-byte accesses to any 8 consecutive rows at one 16-byte column conflict-free, which is
what ``ldmatrix`` and ``cp.async`` tiles want.

The stored form is canonical: size-1 modes are dropped, and a mode merges with the next mode of
its dimension when its stride is that mode's stride times its size (the two digits then read as
one). Without a swizzle, two layouts are equal exactly when they have the same offset at every
coordinate. With a swizzle, equal layouts have equal offsets; different swizzles may still agree on
every offset of a small tile, which `proofs.check_equivalent` decides.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from layout_algebra.errors import LayoutError
from layout_algebra.register import mode_dims
from layout_algebra.symbolic import Expr
from layout_algebra.validation import check_int, check_int_tuple, check_table_entries, is_int

IntTuple = tuple[int, ...]


# ----------------------------------------------------------------------------------------------
# Swizzle
# ----------------------------------------------------------------------------------------------


MAX_SWIZZLE_BIT = 62
"""The bits a swizzle may read or write lie below this (element offsets are int64)."""


@dataclass(frozen=True)
class Swizzle:
    """CuTe's ``Swizzle<B, M, S>`` on element offsets: ``Swizzle(bits, base, shift)``.

    ``swizzle(x) = x ^ ((x & (((1 << bits) - 1) << (base + shift))) >> shift)``: the `bits` bits
    of x starting at bit ``base + shift`` are XORed into the `bits` bits starting at bit `base`.
    Example: ``Swizzle(3, 3, 4)(0x12345678) == 0x12345658``.

    Requires integers ``bits >= 0``, ``base >= 0`` and ``shift >= bits`` (as CuTe requires
    ``|S| >= B``; negative shifts are not supported), so the bits read and the bits written do
    not overlap and the swizzle is its own inverse. `Swizzle(0, base, shift)` is the identity.
    """

    bits: int
    base: int
    shift: int

    def __post_init__(self) -> None:
        bits = check_int(self.bits, "swizzle bits", 0)
        base = check_int(self.base, "swizzle base", 0)
        shift = check_int(self.shift, "swizzle shift", 0)
        if shift < bits:
            raise LayoutError(
                f"swizzle shift {shift} is smaller than its bits {bits}: expected shift >= bits, "
                "so that the bits read and the bits flipped do not overlap"
            )
        if bits + base + shift > MAX_SWIZZLE_BIT:
            raise LayoutError(
                f"Swizzle({bits}, {base}, {shift}) reads bits up to {bits + base + shift - 1}: "
                f"expected bits + base + shift <= {MAX_SWIZZLE_BIT} (offsets are 64-bit ints)"
            )
        object.__setattr__(self, "bits", bits)
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "shift", shift)

    @property
    def width(self) -> int:
        """``bits + base + shift``: the swizzle reads and writes only bits below this one, so it
        permutes each aligned block ``[k * 2**width, (k + 1) * 2**width)``."""
        return self.bits + self.base + self.shift

    @property
    def mask(self) -> int:
        """The bits read: ``((1 << bits) - 1) << (base + shift)``."""
        return ((1 << self.bits) - 1) << (self.base + self.shift)

    @property
    def is_identity(self) -> bool:
        """True when `bits` is 0 (nothing is flipped)."""
        return self.bits == 0

    def __call__(self, x: Any) -> Any:
        """The swizzled offset of `x`: a non-negative int, a NumPy integer array or an `Expr`.

        Ints give an int, arrays an int64 array (elementwise), expressions an expression built
        with ``^``, ``&`` and ``>>``. A negative int or array entry raises LayoutError.
        """
        if is_int(x):
            if x < 0:
                raise LayoutError(f"swizzle offsets must be non-negative, got {x}")
            x = int(x)
            return x ^ ((x & self.mask) >> self.shift)
        if isinstance(x, np.ndarray):
            if x.dtype.kind not in "iu":
                raise LayoutError(f"swizzle expects an integer array, got dtype {x.dtype}")
            x = x.astype(np.int64)
            if x.size and x.min() < 0:
                raise LayoutError(f"swizzle offsets must be non-negative, got minimum {x.min()}")
            return x ^ ((x & self.mask) >> self.shift)
        if isinstance(x, Expr):
            if self.is_identity:
                return x
            return x ^ ((x & self.mask) >> self.shift)
        raise LayoutError(f"swizzle expects an int, an integer array or an Expr, got {x!r}")

    def __repr__(self) -> str:
        return f"Swizzle({self.bits}, {self.base}, {self.shift})"


# ----------------------------------------------------------------------------------------------
# Shared layouts
# ----------------------------------------------------------------------------------------------


def _canonicalize(
    shape: IntTuple, mode_shape: IntTuple, strides: IntTuple
) -> tuple[IntTuple, IntTuple]:
    """Drop size-1 modes and merge each mode into the next one of its dimension when its stride
    equals that mode's stride times that mode's size; returns (mode_shape, mode_strides)."""
    kept = [(size, stride) for size, stride in zip(mode_shape, strides) if size != 1]
    dims = mode_dims(shape, tuple(size for size, _ in kept))
    sizes: list[int] = []
    merged_strides: list[int] = []
    merged_dims: list[int] = []
    for dim, (size, stride) in zip(dims, kept):
        if merged_dims and merged_dims[-1] == dim and merged_strides[-1] == stride * size:
            sizes[-1] *= size
            merged_strides[-1] = stride
        else:
            sizes.append(size)
            merged_strides.append(stride)
            merged_dims.append(dim)
    return tuple(sizes), tuple(merged_strides)


@dataclass(frozen=True)
class SharedLayout:
    """A data-to-address layout of a tile in shared memory, stored in canonical form.

    Fields: `shape` (tile extents), `mode_shape` (every mode, dimension 0's first, each
    dimension's outermost first; the modes of dimension k multiply to ``shape[k]``),
    `mode_strides` (one non-negative stride per mode, in elements) and `swizzle` (a `Swizzle`
    applied to the summed offset, or None). The digit of mode m is read from its dimension's
    coordinate in mixed radix over that dimension's modes, and::

        offset(coord) = swizzle(sum(digit_m * mode_strides[m]))

    Construction validates (LayoutError) and canonicalises (see the module docstring); an
    identity swizzle is stored as None.
    """

    shape: IntTuple
    mode_shape: IntTuple
    mode_strides: IntTuple
    swizzle: Swizzle | None = None

    def __post_init__(self) -> None:
        shape = check_int_tuple(self.shape, "shape", 1)
        mode_shape = check_int_tuple(self.mode_shape, "mode_shape", 1)
        strides = check_int_tuple(self.mode_strides, "mode_strides", 0)
        if len(strides) != len(mode_shape):
            raise LayoutError(
                f"mode_strides {strides} has {len(strides)} entries, but mode_shape {mode_shape} "
                f"has {len(mode_shape)} modes"
            )
        if math.prod(mode_shape) != math.prod(shape):
            raise LayoutError(
                f"mode_shape {mode_shape} multiplies to {math.prod(mode_shape)}, but shape "
                f"{shape} has {math.prod(shape)} elements"
            )
        if self.swizzle is not None and not isinstance(self.swizzle, Swizzle):
            raise LayoutError(f"swizzle must be a Swizzle or None, got {self.swizzle!r}")
        swizzle = None if self.swizzle is None or self.swizzle.is_identity else self.swizzle
        mode_shape, strides = _canonicalize(shape, mode_shape, strides)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "mode_shape", mode_shape)
        object.__setattr__(self, "mode_strides", strides)
        object.__setattr__(self, "swizzle", swizzle)

    # ------------------------------------------------------------------------------------------
    # Sizes
    # ------------------------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """Number of tile dimensions."""
        return len(self.shape)

    @property
    def mode_dims(self) -> IntTuple:
        """The dimension each mode belongs to."""
        return mode_dims(self.shape, self.mode_shape)

    @property
    def num_elements(self) -> int:
        """Number of elements of the tile: the product of the shape."""
        return math.prod(self.shape)

    def __getstate__(self) -> dict[str, Any]:
        """The fields alone: the cached `size` is not part of the layout, so a layout pickles
        to the same bytes before and after it is asked for (`backend.compile`'s memo of
        lowerings keys on a program's pickle)."""
        return {key: value for key, value in self.__dict__.items() if key != "size"}

    @functools.cached_property
    def size(self) -> int:
        """Elements the allocation must hold: the largest offset of any coordinate, plus one
        (CuTe's cosize). Equals `num_elements` exactly when the layout is a bijection onto
        ``[0, num_elements)``."""
        return int(self.table().max()) + 1

    # ------------------------------------------------------------------------------------------
    # Meaning
    # ------------------------------------------------------------------------------------------

    def _digit_plan(self) -> list[tuple[int, int, int, bool, int]]:
        """Per mode with a nonzero stride: (dim, divisor, size, outermost, stride), where the
        digit is ``coord[dim] // divisor % size`` and the outermost mode needs no ``% size``."""
        dims = self.mode_dims
        plan = []
        for m, (size, stride) in enumerate(zip(self.mode_shape, self.mode_strides)):
            later = [k for k in range(m + 1, len(dims)) if dims[k] == dims[m]]
            earlier = [k for k in range(m) if dims[k] == dims[m]]
            divisor = math.prod(self.mode_shape[k] for k in later)
            if stride:
                plan.append((dims[m], divisor, size, not earlier, stride))
        return plan

    def _linear(self, coord: tuple[Any, ...]) -> Any:
        """The offset before the swizzle, from checked coordinates (ints, arrays or Exprs)."""
        total: Any = 0
        for dim, divisor, size, outermost, stride in self._digit_plan():
            digit = coord[dim]
            if divisor != 1:
                digit = digit // divisor
            if not outermost:
                digit = digit % size
            total = total + (digit if stride == 1 else digit * stride)
        return total

    def offset(self, coord: Sequence[Any]) -> Any:
        """The offset, in elements, of the element at `coord` (a sequence of `rank` entries).

        Entries may be ints (range-checked: 0 <= coord[k] < shape[k], else LayoutError; the
        result is an int), NumPy integer arrays (range-checked, broadcast together; an int64
        array) or `Expr`s mixed with ints (not range-checked: the caller's variables must lie
        in the shape; an `Expr`).
        """
        coord = _check_coord(coord, self.shape)
        linear = self._linear(coord)
        if isinstance(linear, np.ndarray):
            shape = np.broadcast_shapes(*(np.shape(c) for c in coord))
            linear = np.broadcast_to(np.asarray(linear, dtype=np.int64), shape).copy()
        elif is_int(linear) and any(isinstance(c, np.ndarray) for c in coord):
            shape = np.broadcast_shapes(*(np.shape(c) for c in coord))
            linear = np.full(shape, linear, dtype=np.int64)
        return linear if self.swizzle is None else self.swizzle(linear)

    def table(self) -> np.ndarray:
        """Every offset as an int64 array of shape `shape`: ``table()[coord] == offset(coord)``;
        LayoutError for more than `validation.MAX_TABLE_ENTRIES` elements."""
        check_table_entries(self.num_elements, f"the table of {self!r}")
        if self.rank == 0:
            return np.array(self.offset(()), dtype=np.int64)
        grids = np.indices(self.shape, dtype=np.int64)
        return self.offset(tuple(grids))

    # ------------------------------------------------------------------------------------------
    # Operators and display
    # ------------------------------------------------------------------------------------------

    def __mul__(self, other: SharedLayout) -> SharedLayout:
        # Anything but a SharedLayout is a LayoutError of shared_product, never a TypeError.
        return shared_product(self, other)

    def __rmul__(self, other: object) -> SharedLayout:
        # Only reached when `other` is no SharedLayout: shared_product refuses it.
        return shared_product(other, self)

    def _repr_html_(self) -> str:
        from layout_algebra.render import shared_html

        return shared_html(self)

    def plot(self, element_bits: int = 16, **kwargs: Any) -> Any:
        """A matplotlib figure: each cell's offset and bank (for `element_bits`-bit elements)."""
        from layout_algebra.render import shared_figure

        return shared_figure(self, element_bits, **kwargs)

    def __repr__(self) -> str:
        for name, make in (
            ("shared_row_major", shared_row_major),
            ("shared_column_major", shared_column_major),
        ):
            if self.rank and make(*self.shape) == self:
                return f"{name}({', '.join(str(s) for s in self.shape)})"
        if self.rank and self.swizzle is not None:
            for bits in _SWIZZLE_ELEMENT_BITS:
                try:
                    candidate = shared_row_major_swizzle(*self.shape, element_bits=bits)
                except LayoutError:
                    continue
                if candidate == self:
                    shape = ", ".join(str(s) for s in self.shape)
                    return f"shared_row_major_swizzle({shape}, element_bits={bits})"
        return (
            f"SharedLayout(shape={self.shape!r}, mode_shape={self.mode_shape!r}, "
            f"mode_strides={self.mode_strides!r}, swizzle={self.swizzle!r})"
        )


def _check_coord(coord: Any, shape: IntTuple) -> tuple[Any, ...]:
    """Validate a coordinate against a concrete shape: ints and arrays range-checked, Exprs
    passed through, arrays converted to int64; mixing arrays with Exprs is refused."""
    if isinstance(coord, (str, bytes)) or not isinstance(coord, Sequence):
        raise LayoutError(f"coord must be a sequence of {len(shape)} indices, got {coord!r}")
    if len(coord) != len(shape):
        raise LayoutError(f"coord {tuple(coord)!r} has rank {len(coord)}, expected {len(shape)}")
    checked: list[Any] = []
    for dim, (c, extent) in enumerate(zip(coord, shape)):
        if is_int(c):
            if not 0 <= c < extent:
                raise LayoutError(f"coord {tuple(coord)!r} is outside shape {shape} in dim {dim}")
            checked.append(int(c))
        elif isinstance(c, np.ndarray):
            if c.dtype.kind not in "iu":
                raise LayoutError(f"coord[{dim}] must be an integer array, got dtype {c.dtype}")
            if c.size and (c.min() < 0 or c.max() >= extent):
                raise LayoutError(
                    f"coord[{dim}] holds values in [{c.min()}, {c.max()}], outside [0, {extent})"
                )
            checked.append(c.astype(np.int64))
        elif isinstance(c, Expr):
            checked.append(c)
        else:
            raise LayoutError(
                f"coord[{dim}] must be an int, an integer array or an Expr, got {c!r}"
            )
    if any(isinstance(c, np.ndarray) for c in checked) and any(
        isinstance(c, Expr) for c in checked
    ):
        raise LayoutError("coord mixes NumPy arrays and Exprs; evaluate the Exprs first")
    return tuple(checked)


# ----------------------------------------------------------------------------------------------
# Constructors
# ----------------------------------------------------------------------------------------------


def _shape_args(shape: Sequence[Any], what: str) -> IntTuple:
    """`*shape` arguments (or one tuple) as a tuple of positive ints."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return check_int_tuple(tuple(shape), f"{what} shape", 1)


def _row_major_strides(shape: IntTuple) -> IntTuple:
    strides = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    return tuple(strides)


def shared_strides(shape: Sequence[int], strides: Sequence[int]) -> SharedLayout:
    """One mode per dimension with the given strides: ``offset(c) = sum(c[k] * strides[k])``."""
    shape = check_int_tuple(shape, "shape", 1)
    strides = check_int_tuple(strides, "strides", 0)
    if len(strides) != len(shape):
        raise LayoutError(
            f"strides {strides} has rank {len(strides)}, shape {shape} has {len(shape)}"
        )
    return SharedLayout(shape, shape, strides)


def shared_row_major(*shape: int) -> SharedLayout:
    """The compact row-major layout (last dimension contiguous): ``shared_row_major(4, 8)``
    maps (r, c) to ``8 * r + c``."""
    sizes = _shape_args(shape, "shared_row_major")
    return SharedLayout(sizes, sizes, _row_major_strides(sizes))


def shared_column_major(*shape: int) -> SharedLayout:
    """The compact column-major layout (first dimension contiguous): ``shared_column_major(4,
    8)`` maps (r, c) to ``r + 4 * c``."""
    sizes = _shape_args(shape, "shared_column_major")
    strides = tuple(reversed(_row_major_strides(tuple(reversed(sizes)))))
    return SharedLayout(sizes, sizes, strides)


_SWIZZLE_ELEMENT_BITS = (1, 2, 4, 8, 16, 32, 64, 128)


def _two_adic_order(n: int) -> int:
    """The exponent of the largest power of two dividing the positive int n."""
    return (n & -n).bit_length() - 1


def row_swizzle(row_elements: int, element_bits: int) -> Swizzle:
    """The swizzle of `shared_row_major_swizzle` for rows of `row_elements` elements.

    Units: a 16-byte *chunk* holds ``E = 128 // element_bits`` elements, so ``base = log2(E)``
    keeps every chunk contiguous. A row holds ``C = row_elements / E = 2**k * q`` chunks (q
    odd); the 32 banks serve 128 bytes, 8 chunks, and chunk a of the allocation sits in bank
    group ``a % 8``. Row r's chunk c is chunk ``a = 2**k * u + (c % 2**k)`` with
    ``u = q*r + (c >> k)``; over any 8 consecutive rows, ``u % 8`` takes all 8 values (q is
    odd). The swizzle makes the bank group a one-to-one function of ``u % 8`` for a fixed c:

    - k >= 3: bits [0, 3) of a are c's, the same in every row (an 8-way conflict without a
      swizzle); ``Swizzle(3, base, k)`` XORs ``u % 8``, bits [k, k + 3) of a, into them.
    - k < 3: bits [k, 3) of a already hold the low 3 - k bits of u; ``Swizzle(k, base, 3)``
      XORs the next k bits of u, bits [3, 3 + k) of a, into bits [0, k). For k = 0 this is the
      identity: no swizzle is needed.

    Either way only bits below bit k of the chunk index flip, and a row is a whole number of
    aligned blocks of 2**k chunks, so the swizzle permutes the chunks of each row. Requires
    `element_bits` a power of two <= 128 and rows of a whole number of 16-byte chunks
    (LayoutError otherwise).
    """
    element_bits = check_int(element_bits, "element_bits", 1)
    row_elements = check_int(row_elements, "row length", 1)
    if element_bits not in _SWIZZLE_ELEMENT_BITS:
        raise LayoutError(
            f"element_bits {element_bits} is not a power of two <= 128, so 16-byte vectors do "
            "not hold a whole number of elements"
        )
    chunk_elements = 128 // element_bits
    if row_elements % chunk_elements:
        raise LayoutError(
            f"a row of {row_elements} elements of {element_bits} bits is "
            f"{row_elements * element_bits / 8:g} bytes, expected a multiple of 16 bytes"
        )
    base = chunk_elements.bit_length() - 1
    k = _two_adic_order(row_elements // chunk_elements)
    if k >= 3:
        return Swizzle(3, base, k)
    return Swizzle(k, base, 3)


def shared_row_major_swizzle(*shape: int, element_bits: int) -> SharedLayout:
    """Row-major with the XOR swizzle that makes 16-byte accesses to rows conflict-free.

    The last dimension is the row; the leading dimensions, flattened row-major, number the rows.
    The swizzle is `row_swizzle(shape[-1], element_bits)`: each 16-byte chunk stays contiguous
    and aligned and stays in its row, and for any 8 consecutive rows, the chunks at one 16-byte
    column lie in 8 distinct bank groups (``(byte_address // 16) % 8``), so 8 threads reading them
    with 16-byte vectors (one ``ldmatrix`` phase) hit every bank once. Example: for f16 (16
    bits) and 64-element (128-byte) rows the swizzle is ``Swizzle(3, 3, 3)``.
    """
    sizes = _shape_args(shape, "shared_row_major_swizzle")
    if not sizes:
        raise LayoutError("shared_row_major_swizzle needs at least one dimension (the row)")
    swizzle = row_swizzle(sizes[-1], element_bits)
    return SharedLayout(sizes, sizes, _row_major_strides(sizes), swizzle)


def _pad(layout: SharedLayout, rank: int) -> SharedLayout:
    """`layout` with leading size-1 dimensions up to `rank` (size-1 dimensions have no modes)."""
    return SharedLayout(
        (1,) * (rank - layout.rank) + layout.shape,
        layout.mode_shape,
        layout.mode_strides,
        layout.swizzle,
    )


def shared_product(a: SharedLayout, b: SharedLayout) -> SharedLayout:
    """The blocked product `a * b`: a tile laid out by `a` whose elements are tiles laid out by
    `b`, each b-tile a contiguous block of ``b.size`` elements.

    Both are padded to the same rank with leading 1s; shapes multiply per dimension, and::

        (a*b).offset(c) = a.offset(c // b.shape) * b.size + b.offset(c % b.shape)

    (per dimension). E.g. ``shared_column_major(2, 2) * shared_row_major(2, 4)`` is a (4, 8)
    tile of four 8-element row-major blocks placed column-major. At most one operand may carry a
    swizzle: b's when ``b.size`` is a multiple of ``2**b.swizzle.width`` (so the swizzle
    commutes with adding whole b-blocks), a's when ``b.size`` is a power of two (a's swizzle then
    moves up by log2(b.size) bits); otherwise LayoutError.
    """
    for name, operand in (("left", a), ("right", b)):
        if not isinstance(operand, SharedLayout):
            raise LayoutError(f"product's {name} operand must be a SharedLayout, got {operand!r}")
    block = b.size
    swizzle: Swizzle | None = None
    if a.swizzle is not None and b.swizzle is not None:
        raise LayoutError(
            f"product of two swizzled layouts ({a.swizzle!r} and {b.swizzle!r}) is no single "
            "swizzled layout; swizzle at most one operand"
        )
    if b.swizzle is not None:
        if block % (1 << b.swizzle.width):
            raise LayoutError(
                f"right operand's size {block} is not a multiple of 2**{b.swizzle.width}, the "
                f"block its {b.swizzle!r} permutes"
            )
        swizzle = b.swizzle
    if a.swizzle is not None:
        if block & (block - 1):
            raise LayoutError(
                f"left operand is swizzled ({a.swizzle!r}) but the right operand's size {block} "
                "is not a power of two"
            )
        lift = block.bit_length() - 1
        swizzle = Swizzle(a.swizzle.bits, a.swizzle.base + lift, a.swizzle.shift)
    rank = max(a.rank, b.rank)
    a, b = _pad(a, rank), _pad(b, rank)
    a_dims, b_dims = a.mode_dims, b.mode_dims
    mode_shape: list[int] = []
    strides: list[int] = []
    for dim in range(rank):
        for source, dims, scale in ((a, a_dims, block), (b, b_dims, 1)):
            for m, d in enumerate(dims):
                if d == dim:
                    mode_shape.append(source.mode_shape[m])
                    strides.append(source.mode_strides[m] * scale)
    shape = tuple(x * y for x, y in zip(a.shape, b.shape))
    return SharedLayout(shape, tuple(mode_shape), tuple(strides), swizzle)

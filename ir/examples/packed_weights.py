"""The packed weight format of the register-dequant matmul: mma B fragments, one lane vector each.

A (K, N) weight matrix of b-bit codes is cut into *units* of k16 x n64: eight m16n8k16 B
fragments side by side. In a unit, lane l of a warp holds the 32 weights of its B fragments
(``local(1, 8) * F_B``, F_B the B fragment layout), which are b 32-bit words of its bitstream
(`unit_word_layout`: ``spatial(1, 32).local(1, b)`` over i32), in the order `LANE_ORDERS` gives
for the width (`unit_element_layout(b)`: the same elements, reordered so that the fast
conversion takes the two codes of each mma register from one 32-bit window). The packed tensor
is i32 of shape (K / 16, N / 64 * 32 * b): row kb holds the units (kb, 0), (kb, 1), ... in
order, each as 32 lane vectors of b words, lane after lane. So a thread that loads its b words
of a unit (16 bytes at 4 bits) holds whole mma B fragments: a `view` as the weight type in the
packed order and a `cast` into the fragment order (`tile_value_layout`) make the dot operand,
with no shared-memory round trip.

Codes are stored as their b-bit patterns, except 8-bit signed codes, which are stored offset
binary (`stored_offset`: the code plus 128, the pattern with its sign bit flipped, as Marlin's
uint8b128): a byte cast then needs no sign flip (`cast_codes`: a PRMT and a subtraction a pair
into f16). Narrower signed codes keep their patterns: their casts flip the sign free, in the
LOP3 that places the field under its magic number.

The format does not depend on a kernel's tile sizes: a kernel tile is a grid of units
(`tile_layouts`), so every configuration of `ir.examples.register_dequant_matmul` reads the same
packed tensor, and its descriptor (`WeightFormat`) carries a version. Packing is the composition
of the two unit layouts: the weight at `unit_element_layout.map(l, j)` goes to element j of lane
l's bitstream. Both are bijections onto their tiles (no replication, every element once;
tests/proofs/test_packed_weights.py proves it with z3 and checks it by enumeration), so packing
then loading is the identity.

The group scales are packed too (`pack_scales`): within each 64-column unit the columns are
permuted (`scale_permutation`) so that the eight scales a lane multiplies its weights by are one
16-byte vector (`unit_scale_layout`), which the kernel `view`s in the weights' scale layout.
The same order serves a kernel that scales the mma accumulators instead of the weights: a C
fragment's sixteen scales are two neighbouring 16-byte vectors (`unit_accumulator_scale_layouts`).

Two implementations of the same weight permutation:
- `pack_weights(codes, dtype)`: on the host or the tensor's device (NumPy or torch), from a (K,
  N) integer array of codes;
- `pack_weights_program(dtype)`: the same as a tile program (load in the unit element layout,
  `view` as i32, store in the unit word layout), for `ir.run_reference` or the GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.program import Program
from ir.values import ArrayParam, GlobalTensor
from layout_algebra.fragments import fragment
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import RegisterLayout, local, replicate, spatial
from layout_algebra.shared import SharedLayout, shared_row_major
from layout_algebra.symbolic import minimum

FORMAT_VERSION = 3
"""The version of the packed layout; bumped whenever the bit placement changes (2: each lane's
codes in the order of `LANE_ORDERS`; 3: 8-bit signed codes stored offset binary)."""
UNIT_K = 16
"""Rows (k) of a unit: one mma k16 step."""
UNIT_N = 64
"""Columns (n) of a unit: eight n8 B fragments."""
UNIT_LANES = 32
"""Threads holding one unit: one warp."""
UNIT_ELEMENTS = UNIT_K * UNIT_N // UNIT_LANES
"""Weights per lane of a unit (32: b words of b-bit codes)."""


@dataclass(frozen=True)
class WeightFormat:
    """The descriptor of a packed weight tensor.

    Fields: `dtype` (the weight type's name), `k`, `n` (the unpacked shape), `version`
    (`FORMAT_VERSION` of the packer) and `unit` (a name for the unit: "k16n64 mma.m16n8k16.b").
    `shape` is the packed i32 tensor's shape.
    """

    dtype: str
    k: int
    n: int
    version: int = FORMAT_VERSION
    unit: str = "k16n64 mma.m16n8k16.b"

    @property
    def words_per_lane(self) -> int:
        """32-bit words each lane holds per unit: the weight type's bit width."""
        return dtypes.from_name(self.dtype).nbits

    @property
    def shape(self) -> tuple[int, int]:
        """(K / 16, N / 64 * 32 * b): the packed i32 tensor's shape."""
        return (self.k // UNIT_K, self.n // UNIT_N * UNIT_LANES * self.words_per_lane)


def check_weight_dtype(dtype: object) -> DataType:
    """`dtype` when it is a weight type of the format (1 to 8 bits), else VerificationError."""
    if not isinstance(dtype, DataType) or not 1 <= dtype.nbits <= 8:
        raise VerificationError(
            f"packed weights: {dtype!r} is not a weight type; expected an ir.dtypes type of 1 to "
            "8 bits (u1..u8, i1..i8, or a float such as f4e2m1)"
        )
    return dtype


LANE_DIGITS = ("f2", "f1", "f0", "khi", "klo")
"""The binary digits of a lane's 32 weights in a unit, most significant first, in the order of
the B fragments (`unit_element_layout()`): f2 f1 f0 the n8 fragment (0-7), khi the k half
(rows 0-7 or 8-15 of the k16 step) and klo the row within a pair of rows (the two f16 halves of
one mma operand register)."""

LANE_ORDERS: dict[int, tuple[str, ...]] = {
    1: ("klo", "f2", "f1", "f0", "khi"),
    2: ("f2", "klo", "f1", "f0", "khi"),
    3: ("f2", "f1", "klo", "f0", "khi"),
    4: ("f2", "f1", "klo", "f0", "khi"),
    5: ("f2", "f1", "klo", "f0", "khi"),
    6: ("f2", "f1", "f0", "klo", "khi"),
    7: ("f2", "f1", "f0", "klo", "khi"),
    8: ("f2", "f1", "f0", "khi", "klo"),
}
"""Per bit width, the order of those digits in a lane's packed bitstream, most significant
first. Putting klo higher than in the fragment order puts the two codes of an mma register
16 bits (or a multiple of b near 16) apart, so that one mask takes both from one 32-bit window
(at 4 bits, Marlin's interleave 0 2 4 6 1 3 5 7): `backend.fast_conversions` then converts a
pair of codes with one LOP3 and one fma. Each order is the cheapest of the 120 for the f16 and
bf16 conversions together (tests/backend/test_fast_conversions.py checks it)."""


def check_activation_options(program: str, activation_dtype: object, zero_points: object) -> None:
    """Check the options every program reading packed weights takes: `activation_dtype` f16 or
    bf16 and `zero_points` a bool; VerificationError naming `program` and the value otherwise."""
    if activation_dtype not in (dtypes.f16, dtypes.bf16):
        raise VerificationError(
            f"{program}: activation_dtype={activation_dtype!r}; expected f16 or bf16"
        )
    if not isinstance(zero_points, bool):
        raise VerificationError(f"{program}: zero_points={zero_points!r}; expected True or False")


def check_int_fields(program: str, config: object, names: tuple[str, ...], least: int) -> None:
    """Check that each field `names` of `config` is an int (not a bool) >= `least`;
    VerificationError naming `program`, the field and its value otherwise."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise VerificationError(f"{program}: {name}={value!r}; expected an int >= {least}")


def check_group_size(program: str, group_size: object, block_k: int) -> None:
    """Check that `group_size` is a positive int and a multiple of the k-tile `block_k` (one
    scale row per k-tile); VerificationError naming `program` and the value otherwise."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise VerificationError(f"{program}: group_size={group_size!r}; expected a positive int")
    if group_size % block_k:
        raise VerificationError(
            f"{program}: group_size={group_size} is not a multiple of the k-tile {block_k} "
            "(16 * units_k); one scale row per k-tile is required"
        )


def checked_arguments(
    program: str,
    config: Any,
    config_type: type,
    check_config: Callable[[Any], None],
    weight_dtype: object,
    activation_dtype: object,
    zero_points: object,
) -> tuple[Any, DataType]:
    """A packed-weight program's `config` (None: ``config_type()``) and weight type, checked:
    the config's type, the weight type (`check_weight_dtype`), the config's fields
    (`check_config(config)`), then the activation options (`check_activation_options`);
    VerificationError naming the first bad one."""
    if config is None:
        config = config_type()
    elif not isinstance(config, config_type):
        raise VerificationError(
            f"{program}: config={config!r}; expected a {config_type.__name__} or None"
        )
    weight_dtype = check_weight_dtype(weight_dtype)
    check_config(config)
    check_activation_options(program, activation_dtype, zero_points)
    return config, weight_dtype


def tile_ahead(
    b: ProgramBuilder, first: Any, d: int, end: Any, copy: Callable[[Any], None]
) -> None:
    """``copy(tile)`` of k-tile first + d where it is before `end` (d = 0 always is), for the
    k loops of the programs reading packed weights. Under the guard the index equals its clamp
    to the last tile of the range; written clamped, its bound shows the access in bounds, so it
    needs no bounds check."""
    if d == 0:
        copy(first)
    else:
        with b.if_(first + d < end):
            copy(minimum(first + d, end - 1))


def packed_operands(
    b: ProgramBuilder, activation_dtype: DataType, zero_points: bool
) -> tuple[ArrayParam, ArrayParam, ArrayParam, ArrayParam | None]:
    """The array parameters a program reading packed weights takes after its ints, in order:
    ``a`` (activation_dtype), ``packed`` (i32 words), ``scales`` and, with `zero_points`,
    ``zeros`` (activation_dtype, `pack_scales` order); the last is None without."""
    a = b.array_param("a", activation_dtype)
    packed = b.array_param("packed", dtypes.i32)
    scales = b.array_param("scales", activation_dtype)
    zeros = b.array_param("zeros", activation_dtype) if zero_points else None
    return a, packed, scales, zeros


def packed_views(
    b: ProgramBuilder,
    operands: tuple[ArrayParam, ArrayParam, ArrayParam, ArrayParam | None],
    nbits: int,
    n: Any,
    k: Any,
    group_size: int,
) -> tuple[GlobalTensor, GlobalTensor, GlobalTensor | None]:
    """Global views of `packed_operands` for a (k, n) weight matrix of `nbits`-bit codes: the
    words as the (K / 16, N / 64 * 32 * b) packed tensor, the scale rows and the zero-point
    rows (None without) as (ceil(k / group_size), n)."""
    _, packed, scales, zeros = operands
    words_per_row = (n // UNIT_N) * UNIT_LANES * nbits
    packed_view = b.global_view(
        packed, dtypes.i32, GlobalLayout((k // UNIT_K, words_per_row), (words_per_row, 1))
    )
    groups = (k + group_size - 1) // group_size
    rows = GlobalLayout((groups, n), (n, 1))
    scale_view = b.global_view(scales, scales.dtype, rows)
    zero_view = None if zeros is None else b.global_view(zeros, zeros.dtype, rows)
    return packed_view, scale_view, zero_view


def program_name(
    program: str, weight_dtype: DataType, activation_dtype: DataType, zero_points: bool
) -> str:
    """A packed-weight program's kernel name: `program`, the weight type, the activation type
    unless f16, and ``zp`` with zero points."""
    name = f"{program}_{weight_dtype.name}"
    name += "" if activation_dtype == dtypes.f16 else f"_{activation_dtype.name}"
    return name + ("_zp" if zero_points else "")


def unit_element_layout(nbits: int | None = None) -> RegisterLayout:
    """The (16, 64) unit of weights over one warp: eight mma B fragments side by side, each
    lane's elements in fragment order, or, given `nbits`, in the packed order of b-bit codes
    (`LANE_ORDERS`): the same elements per lane, reordered."""
    if nbits is None:
        return local(1, UNIT_N // 8) * fragment("mma.m16n8k16.b").layout
    order = LANE_ORDERS[nbits]
    # Modes: k = (khi 2, lanes 4, klo 2), n = (f2 2, f1 2, f0 2, lanes 8).
    mode_of = {"khi": 0, "klo": 2, "f2": 3, "f1": 4, "f0": 5}
    return RegisterLayout(
        (UNIT_K, UNIT_N),
        (2, 4, 2, 2, 2, 2, 8),
        (6, 1),
        tuple(mode_of[digit] for digit in order),
    )


def packed_lane_order(nbits: int) -> list[int]:
    """For each element of a unit lane in fragment order (`unit_element_layout()`), its index
    in the lane's packed bitstream of b-bit codes (`unit_element_layout(nbits)`): the sources
    a cast of the packed codes into fragment order reads."""
    packed, natural = unit_element_layout(nbits), unit_element_layout()
    where = {packed.map(0, j): j for j in range(UNIT_ELEMENTS)}
    return [where[natural.map(0, i)] for i in range(UNIT_ELEMENTS)]


def unit_word_layout(nbits: int) -> RegisterLayout:
    """The (1, 32 * b) i32 words of a unit of b-bit weights: lane l holds words [l*b, l*b + b)."""
    return spatial(1, UNIT_LANES).local(1, nbits)


def tile_layouts(
    nbits: int, warps: int, units_k: int, units_n: int
) -> tuple[RegisterLayout, RegisterLayout]:
    """(weight layout, word layout) of a kernel tile of `units_k` x (`warps` * `units_n`) units.

    Warp w holds the units of columns [w * units_n, (w + 1) * units_n); each thread's local
    order is (unit row, unit column, element in the packed order), so the word layout's tile
    (units_k, warps * units_n * 32 * b) is a block of the packed tensor and the two layouts
    `view` into each other. `tile_value_layout` holds the same elements in fragment order.
    """
    grid = spatial(1, warps).local(units_k, units_n)
    return grid * unit_element_layout(nbits), grid * unit_word_layout(nbits)


def _unit_words_are_a_vector(nbits: int) -> bool:
    """Whether a lane's b words of a unit are one vector (b a power of two: 4 to 16 bytes)."""
    return nbits & (nbits - 1) == 0


def weight_ring_thread_words(nbits: int, units_k: int, units_n: int) -> int:
    """The i32 words a thread's k-tile of b-bit words takes in `weight_ring_layout`'s stage:
    its ``units_k * units_n * b`` words, where b is a power of two; otherwise padded to a
    whole odd number of 16-byte vectors, so that eight neighbouring threads' vectors fall in
    eight different bank groups (a quarter warp's ``LDS.128`` without conflicts)."""
    words = units_k * units_n * nbits
    if _unit_words_are_a_vector(nbits):
        return words
    vectors = -(-words // 4)
    return 4 * (vectors + 1 - vectors % 2)


def weight_ring_layout(
    stages: int, nbits: int, warps: int, units_k: int, units_n: int
) -> SharedLayout:
    """The shared ring of `stages` k-tiles of the (units_k, warps * units_n * 32 * b) packed
    words of `tile_layouts`, as each thread copies and loads its own words.

    Where b is a power of two, row-major: a lane's b words of a unit are a whole vector (up to
    16 bytes) and a warp's lanes read consecutive vectors. At the other widths (3, 5, 6, 7 bits)
    a lane's b words of a unit straddle 16-byte vectors, so row-major they load a word at a
    time (i3: 24 ``LDS`` a k-tile). There, each thread's words of the k-tile lie together in
    its registers' order (k16 step, unit, word) over `weight_ring_thread_words` words, so they
    load as 16-byte vectors (i3: 6 ``LDS.128``)."""
    word_cols = warps * units_n * UNIT_LANES * nbits
    if _unit_words_are_a_vector(nbits):
        return shared_row_major(stages, units_k, word_cols)
    per_thread = weight_ring_thread_words(nbits, units_k, units_n)
    return SharedLayout(
        (stages, units_k, word_cols),
        (stages, units_k, warps, units_n, UNIT_LANES, nbits),
        (
            warps * UNIT_LANES * per_thread,
            units_n * nbits,
            UNIT_LANES * per_thread,
            nbits,
            per_thread,
            1,
        ),
    )


FRAGMENT_WIDTHS = (4, 8)
"""The bit widths whose packed lane order (`LANE_ORDERS`) puts each m16 A fragment's eight codes
in whole 32-bit words of their own: the widths `fragment_tile_layouts` serves."""
FRAGMENT_COLUMNS = 16
"""Columns of W in one m16 A fragment of W^T (two n8 B fragments of a unit)."""


def fragment_tile_layouts(
    nbits: int, warpgroups: int, units_k: int, units_n: int = 1
) -> tuple[RegisterLayout, RegisterLayout, RegisterLayout]:
    """(weight layout, word layout, scale layout) of a tile of `units_k` x (`warpgroups` *
    `units_n`) units in which the four warps of a warpgroup share each of its `units_n`
    neighbouring units: warp w holds, at each k16 step and in each unit u, the eight codes of
    the unit's columns [16 w, 16 w + 16) (its m16 A fragment of W^T), which the packed order
    keeps in b / 4 words of each lane (`FRAGMENT_WIDTHS`). Warpgroup g owns units ``units_n g``
    to ``units_n (g + 1) - 1``, so its fragments are the ``wgmma`` register-A fragments of
    ``units_n`` 64-row blocks of W^T.

    The weight layout (units_k * 16, warpgroups * units_n * 64) names the codes in the packed
    order, so the word layout (units_k, warpgroups * units_n * 32 * b), a block of the packed
    tensor whose lane l of warp w holds words [l b + w b / 4, l b + (w + 1) b / 4) of each of
    its units' rows, `view`s into it (registers by k16 step, then unit). The scale layout
    (1, warpgroups * units_n * 64) is what each thread reads of a block's packed scale row
    (`pack_scales`): in each of its units, its two columns 16 w + l // 4 and 8 above, four
    bytes together. Raises VerificationError for a width outside `FRAGMENT_WIDTHS`.
    """
    if nbits not in FRAGMENT_WIDTHS:
        raise VerificationError(
            f"fragment tile: {nbits}-bit weights; expected one of {FRAGMENT_WIDTHS} bits, whose "
            "packed order keeps each A fragment's codes in whole words"
        )
    order = LANE_ORDERS[nbits]
    # Modes of unit_element_layout: k = (khi, lanes 4, klo), n = (f2, f1, f0, lanes 8). The
    # fragment digits f2 f1 lead the packed order, so they select the warp.
    mode_of = {"khi": 0, "klo": 2, "f0": 5}
    unit = RegisterLayout(
        (UNIT_K, UNIT_N),
        (2, 4, 2, 2, 2, 2, 8),
        (3, 4, 6, 1),
        tuple(mode_of[digit] for digit in order[2:]),
    )
    codes = spatial(1, warpgroups).local(units_k, units_n) * unit
    per_warp = nbits // 4
    words = RegisterLayout(
        (units_k, warpgroups * units_n * UNIT_LANES * nbits),
        (units_k, warpgroups, units_n, UNIT_LANES, UNIT_N // FRAGMENT_COLUMNS, per_warp),
        (1, 4, 3),
        (0, 2, 5),
    )
    # A packed scale column 8 l8 + f holds natural column 8 f + l8 (`scale_permutation`):
    # fragment w's two n8 fragments are f = 2 w and 2 w + 1, neighbours.
    scales = RegisterLayout(
        (1, warpgroups * units_n * UNIT_N),
        (warpgroups, units_n, 8, UNIT_N // FRAGMENT_COLUMNS, 2),
        (0, 3, 2, -4),
        (1, 4),
    )
    return codes, words, scales


def tile_value_layout(warps: int, units_k: int, units_n: int) -> RegisterLayout:
    """The tile of `tile_layouts` with each thread's elements in mma B-fragment order: what a
    `cast` of the packed-order codes produces for `dot`."""
    return spatial(1, warps).local(units_k, units_n) * unit_element_layout()


def unit_scale_layout() -> RegisterLayout:
    """The (1, 64) packed scales of a unit over one warp: lane l holds, contiguous (16 bytes of
    f16), the eight scales of its B-fragment column (column l // 4 of each n8 fragment); the
    four lanes of a column share them."""
    return spatial(1, 8).replicate(4).local(1, UNIT_N // 8)


def unit_accumulator_scale_layouts() -> tuple[RegisterLayout, RegisterLayout]:
    """The (1, 64) packed scales of a unit read for the mma C fragments instead of the B
    fragments: ``(load, view)``. Lane 4r + q of a C fragment holds columns 2q and 2q + 1 of
    each n8 fragment t; in the packed order (`scale_permutation`: packed column 8g + t holds
    column 8t + g) those sixteen are packed columns [16q, 16q + 16), so `load` has lane 4r + q
    read them (two 16-byte vectors, the same for the eight lanes of a q) and `view` names what
    it read: column 8t + 2q + e at register 8e + t. `view` holds in each lane the columns C's
    layout reduced over rows holds there, in another register order."""
    load = replicate(8).spatial(1, 4).local(1, 16)
    # Modes of the column: t (the n8 fragment), q (the lane's pair), e (within the pair).
    view = RegisterLayout((1, UNIT_N), (UNIT_N // 8, 4, 2), (-8, 1), (2, 0))
    return load, view


@cache
def scale_permutation() -> np.ndarray:
    """For each column of a unit's packed scales, the natural column it holds: what
    `unit_scale_layout` and the weights' scale layout (`unit_element_layout` reduced over k)
    put at the same (lane, register)."""
    packed_layout = unit_scale_layout()
    natural_layout = reduce_layout(unit_element_layout(), [0], keepdims=True)
    natural = np.empty(UNIT_N, dtype=np.int64)
    for lane in range(UNIT_LANES):
        for j in range(packed_layout.local_size):
            natural[packed_layout.map(lane, j)[1]] = natural_layout.map(lane, j)[1]
    return natural


def pack_scales(scales: Any) -> Any:
    """The (G, N) group scales with the columns of each 64-column unit permuted as
    `scale_permutation` says, so a lane's eight scales are one 16-byte vector; NumPy or torch in,
    the same kind out. Raises VerificationError for scales that are no NumPy array or torch
    tensor, or of a shape that is not (G, N), N a multiple of 64."""
    _check_array(scales, "packed scales: scales")
    shape = tuple(scales.shape)
    if len(shape) != 2 or shape[1] % UNIT_N or shape[1] == 0:
        raise VerificationError(
            f"packed scales: shape {shape}; expected (groups, N) with N a positive multiple of "
            f"{UNIT_N}"
        )
    groups, n = shape
    units = scales.reshape(groups, n // UNIT_N, UNIT_N)
    index = scale_permutation()
    if type(scales).__module__.startswith("torch"):
        import torch

        index = torch.as_tensor(index, device=scales.device)
        return units[..., index].reshape(groups, n).contiguous()
    return np.ascontiguousarray(units[..., index].reshape(groups, n))


@cache
def unit_permutation(nbits: int) -> np.ndarray:
    """For each element of a unit's packed bitstream of b-bit codes (lane-major, 32 per lane),
    the index r * 64 + c of the weight it holds in the (16, 64) unit: the map of
    ``unit_element_layout(nbits)``."""
    layout = unit_element_layout(nbits)
    index = np.empty(UNIT_LANES * UNIT_ELEMENTS, dtype=np.int64)
    for lane in range(UNIT_LANES):
        for j in range(UNIT_ELEMENTS):
            row, column = layout.map(lane, j)
            index[lane * UNIT_ELEMENTS + j] = row * UNIT_N + column
    return index


def _check_array(value: Any, what: str) -> None:
    """VerificationError unless `value` is a NumPy array or a torch tensor."""
    if not isinstance(value, np.ndarray) and not type(value).__module__.startswith("torch"):
        raise VerificationError(
            f"{what} of type {type(value).__name__}; expected a NumPy array or a torch tensor"
        )


def _check_warps(warps: object, what: str) -> int:
    """`warps` when it is an int from 1 to 32 (a block of at most 1024 threads), else
    VerificationError naming `what`."""
    if isinstance(warps, bool) or not isinstance(warps, int) or not 1 <= warps <= 32:
        raise VerificationError(f"{what}: warps={warps!r}; expected an int from 1 to 32")
    return warps


def _unsigned(nbits: int) -> DataType:
    """The unsigned integer type of `nbits` bits (the codes' bit patterns)."""
    return dtypes.from_name(f"u{nbits}")


def stored_offset(dtype: DataType) -> int:
    """What the packed format adds (modulo 2^b) to each code of `dtype`: 128 for i8 (offset
    binary, so that a byte cast needs no sign flip), 0 for every other weight type."""
    return 1 << 7 if dtype == dtypes.i8 else 0


def cast_codes(
    b: ProgramBuilder,
    words: Any,
    dtype: DataType,
    act: DataType,
    code_layout: RegisterLayout,
    value_layout: RegisterLayout,
    *,
    exponent: int = 0,
    biased: bool = False,
) -> Any:
    """The `dtype` codes of packed `words` (a register tensor of i32 words in a layout that
    views as `code_layout`) cast to `act` in `value_layout`: the values ``cast(view(words,
    dtype, code_layout), act, value_layout, exponent=exponent, biased=biased)`` gives for codes
    stored as their patterns. Codes stored offset binary (`stored_offset`) are viewed as the
    unsigned type and the offset taken out. Into f16: the biased cast (the bytes placed under
    the magic exponent, nothing else), less the magic number and the offset in one subtraction,
    so each pair of bytes costs a PRMT and a subtraction; with `biased` the sum is kept (1152,
    what the biased cast of an i8 code keeps too). Into bf16, which has no biased byte cast:
    the plain cast, less the offset."""
    offset = stored_offset(dtype)
    if not offset:
        codes = b.view(words, dtype, code_layout)
        return b.cast(codes, act, value_layout, exponent=exponent, biased=biased)
    if exponent:
        raise VerificationError(f"cast of packed {dtype} codes: exponent={exponent}; expected 0")
    stored = _unsigned(dtype.nbits)
    codes = b.view(words, stored, code_layout)
    if biased:
        return b.cast(codes, act, value_layout, biased=True)
    if dtypes.magic_bias_error(stored, act) is None:
        kept = b.cast(codes, act, value_layout, biased=True)
        return b.sub(kept, float(dtypes.magic_bias(stored, act, 0) + offset))
    return b.sub(b.cast(codes, act, value_layout), float(offset))


def _check_shape(k: int, n: int) -> None:
    if k <= 0 or n <= 0 or k % UNIT_K or n % UNIT_N:
        raise VerificationError(
            f"packed weights: shape ({k}, {n}); expected K a positive multiple of {UNIT_K} and "
            f"N a positive multiple of {UNIT_N}"
        )


def pack_weights(codes: Any, dtype: DataType) -> tuple[Any, WeightFormat]:
    """Pack a (K, N) array of `dtype` codes; returns (packed i32 array, its `WeightFormat`).

    `codes` is a NumPy array or a torch tensor of integers: the codes' bit patterns, or, for
    signed integer types, the values themselves (only the low b bits are kept). The result has
    the input's kind (a torch tensor stays on its device). Raises VerificationError for a bad
    type or shape, codes that are no NumPy array or torch tensor, or codes that do not fit in b
    bits.
    """
    dtype = check_weight_dtype(dtype)
    _check_array(codes, "packed weights: codes")
    shape = tuple(codes.shape)
    if len(shape) != 2:
        raise VerificationError(f"packed weights: codes of shape {shape}; expected (K, N)")
    k, n = shape
    _check_shape(k, n)
    is_torch = type(codes).__module__.startswith("torch")
    if is_torch:
        import torch

        if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
            raise VerificationError(
                f"packed weights: codes of torch dtype {codes.dtype}; expected an integer tensor"
            )
        xp_codes = codes.to(torch.int64)
        low, high = int(xp_codes.min()), int(xp_codes.max())
    else:
        if not np.issubdtype(np.asarray(codes).dtype, np.integer):
            raise VerificationError(
                f"packed weights: codes of dtype {np.asarray(codes).dtype}; expected integers"
            )
        xp_codes = np.asarray(codes).astype(np.int64)
        low, high = int(xp_codes.min()), int(xp_codes.max())
    lowest = -(1 << (dtype.nbits - 1)) if dtype.is_signed and not dtype.is_float else 0
    if low < lowest or high >= 1 << dtype.nbits:
        raise VerificationError(
            f"packed weights: codes in [{low}, {high}] do not fit {dtype} "
            f"(expected [{lowest}, {(1 << dtype.nbits) - 1}])"
        )
    fmt = WeightFormat(dtype.name, k, n)
    units = xp_codes.reshape(k // UNIT_K, UNIT_K, n // UNIT_N, UNIT_N)
    if is_torch:
        units = units.permute(0, 2, 1, 3).reshape(k // UNIT_K, n // UNIT_N, UNIT_K * UNIT_N)
        index = torch.as_tensor(unit_permutation(dtype.nbits), device=codes.device)
        ordered = ((units[..., index] + stored_offset(dtype)) & ((1 << dtype.nbits) - 1)).to(
            torch.int64
        )
        return _pack_bits_torch(ordered, dtype.nbits).reshape(fmt.shape), fmt
    units = units.transpose(0, 2, 1, 3).reshape(k // UNIT_K, n // UNIT_N, UNIT_K * UNIT_N)
    ordered = (units[..., unit_permutation(dtype.nbits)] + stored_offset(dtype)) & (
        (1 << dtype.nbits) - 1
    )
    packed = dtypes.pack(ordered.reshape(-1), _unsigned(dtype.nbits))
    return np.frombuffer(packed.tobytes(), dtype=np.int32).reshape(fmt.shape).copy(), fmt


def _pack_bits_torch(codes: Any, nbits: int) -> Any:
    """The little-endian bitstream of b-bit `codes` (torch int64, last dim a multiple of 32) as
    int32 words, computed on the codes' device."""
    import torch

    if 32 % nbits == 0:
        # Whole codes per word: shift each into place and add (no bit planes).
        per_word = 32 // nbits
        shifts = torch.arange(per_word, device=codes.device) * nbits
        words = (codes.reshape(*codes.shape[:-1], -1, per_word) << shifts).sum(-1)
        return (words - ((words >> 31) << 32)).to(torch.int32)
    bits = (codes.unsqueeze(-1) >> torch.arange(nbits, device=codes.device)) & 1
    bits = bits.reshape(*codes.shape[:-1], -1, 32)
    weights = torch.ones(32, dtype=torch.int64, device=codes.device) << torch.arange(
        32, device=codes.device
    )
    words = (bits * weights).sum(-1)
    return (words - ((words >> 31) << 32)).to(torch.int32)


def unpack_weights(packed: np.ndarray, fmt: WeightFormat) -> np.ndarray:
    """The (K, N) codes (as unsigned b-bit patterns) of a NumPy packed tensor: the inverse of
    `pack_weights`. Raises VerificationError for a `fmt` that is no `WeightFormat` or of an
    unknown version, or `packed` that is not an integer array of its shape."""
    if not isinstance(fmt, WeightFormat):
        raise VerificationError(f"packed weights: format {fmt!r}; expected a WeightFormat")
    if fmt.version != FORMAT_VERSION:
        raise VerificationError(
            f"packed weights: format version {fmt.version}; this library reads {FORMAT_VERSION}"
        )
    _check_array(packed, "packed weights: packed")
    packed = np.asarray(packed)
    if packed.dtype.kind not in "iu" or packed.dtype.itemsize != 4:
        raise VerificationError(
            f"packed weights: packed of dtype {packed.dtype}; expected int32 (or uint32) words"
        )
    packed = np.ascontiguousarray(packed).view(np.int32)
    if packed.shape != fmt.shape:
        raise VerificationError(f"packed weights: shape {packed.shape}; expected {fmt.shape}")
    nbits = fmt.words_per_lane
    count = packed.size * 32 // nbits
    ordered = dtypes.unpack(packed.view(np.uint8).reshape(-1), _unsigned(nbits), count)
    ordered = ordered.reshape(fmt.k // UNIT_K, fmt.n // UNIT_N, UNIT_K * UNIT_N)
    units = np.empty_like(ordered)
    units[..., unit_permutation(nbits)] = ordered
    units = units.reshape(fmt.k // UNIT_K, fmt.n // UNIT_N, UNIT_K, UNIT_N).transpose(0, 2, 1, 3)
    offset = stored_offset(dtypes.from_name(fmt.dtype))
    return (units.reshape(fmt.k, fmt.n).astype(np.int64) - offset) & ((1 << nbits) - 1)


def pack_weights_program(dtype: DataType, warps: int = 4) -> Program:
    """The packing as a tile program: ``pack(n, k, w, packed)`` with `w` the (k, n) `dtype`
    codes, row-major (declared as the unsigned type of the same width: the codes move as bits,
    i8's with their sign bit flipped, `stored_offset`), and `packed` the i32 tensor of
    `WeightFormat.shape`.

    Each block packs one row of `warps` units: it loads them in `tile_layouts`' weight layout,
    views each thread's bits as i32 words and stores them in the word layout. Launch with
    ``grid = (n // (64 * warps), k // 16)``; `n` must be a multiple of 64 * `warps`. Raises
    VerificationError for a dtype that is no weight type or `warps` not an int from 1 to 32.
    """
    dtype = check_weight_dtype(dtype)
    warps = _check_warps(warps, "pack_weights_program")
    nbits = dtype.nbits
    # Moved as the unsigned type of its width: a pure bit move, so every code (a float NaN with
    # a payload too) arrives as it is.
    codes_dtype = _unsigned(nbits)
    element_layout, word_layout = tile_layouts(nbits, warps, 1, 1)
    row_words = UNIT_LANES * nbits
    with ProgramBuilder(f"pack_{dtype.name}_weights", UNIT_LANES * warps) as builder:
        n = builder.int_param("n", lo=UNIT_N * warps, multiple_of=UNIT_N * warps)
        k = builder.int_param("k", lo=UNIT_K, multiple_of=UNIT_K)
        weights = builder.array_param("w", codes_dtype)
        packed = builder.array_param("packed", dtypes.i32)
        natural = builder.global_view(weights, codes_dtype, GlobalLayout((k, n), (n, 1)))
        columns = (n // UNIT_N) * row_words
        words = builder.global_view(
            packed, dtypes.i32, GlobalLayout((k // UNIT_K, columns), (columns, 1))
        )
        tile = builder.load_global(
            natural,
            [builder.block_y * UNIT_K, builder.block_x * (UNIT_N * warps)],
            element_layout,
        )
        if stored_offset(dtype):  # offset binary: the pattern's sign bit flipped
            tile = builder.xor(tile, stored_offset(dtype))
        builder.store_global(
            words,
            builder.view(tile, dtypes.i32, word_layout),
            [builder.block_y, builder.block_x * (warps * row_words)],
        )
    return builder.program()

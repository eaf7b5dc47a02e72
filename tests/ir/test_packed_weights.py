"""`ir.examples.packed_weights`: the k16 x n64 unit of mma B fragments and its packers.

Exact tables derived here from PTX's m16n8k16 B fragment (not from the module), literal packed
words, round-trip and two's-complement properties for every weight type of 1 to 8 bits, a
differential check of `pack_weights` against a packer written from the fragment formula and of
the tile program `pack_weights_program` (in the interpreter) against `pack_weights`, and the
errors.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.examples.packed_weights import (
    FORMAT_VERSION,
    LANE_ORDERS,
    WeightFormat,
    check_weight_dtype,
    pack_scales,
    pack_weights,
    pack_weights_program,
    packed_operands,
    packed_views,
    program_name,
    scale_permutation,
    stored_offset,
    tile_layouts,
    unit_accumulator_scale_layouts,
    unit_element_layout,
    unit_permutation,
    unit_scale_layout,
    unpack_weights,
    weight_ring_layout,
    weight_ring_thread_words,
)
from layout_algebra.shared import shared_row_major

WEIGHT_DTYPES = [dtype for dtype in dtypes.all_dtypes() if dtype.nbits <= 8]
SIGNED_INTEGERS = [dtype for dtype in WEIGHT_DTYPES if dtype.is_signed and not dtype.is_float]


def b_fragment(lane: int, register: int) -> tuple[int, int]:
    """(k, n) of half `register` (0..3) of `lane` in PTX's mma.m16n8k16 B fragment (16 x 8):
    k = 2 * (lane % 4) + register % 2 + 8 * (register // 2), n = lane // 4."""
    return 2 * (lane % 4) + register % 2 + 8 * (register // 2), lane // 4


def unit_table(nbits: int | None = None) -> list[list[tuple[int, int]]]:
    """For each lane, the (row, column) in the (16, 64) unit of its 32 weights: in fragment
    order (fragment f, columns 8f .. 8f + 7, outer; the fragment's four halves inner), or, given
    `nbits`, in the packed bitstream order, whose position writes the binary digits of (f,
    half) in the order `LANE_ORDERS[nbits]` names them."""
    table = []
    for lane in range(32):
        row = []
        for f in range(8):
            for register in range(4):
                k, n = b_fragment(lane, register)
                row.append((k, 8 * f + n))
        if nbits is not None:
            digits = {}
            packed = [None] * 32
            for i, entry in enumerate(row):
                digits = {"f2": i >> 4 & 1, "f1": i >> 3 & 1, "f0": i >> 2 & 1}
                digits |= {"khi": i >> 1 & 1, "klo": i & 1}
                position = 0
                for digit in LANE_ORDERS[nbits]:
                    position = 2 * position + digits[digit]
                packed[position] = entry
            row = packed
        table.append(row)
    return table


def formula_pack(codes: np.ndarray, dtype: DataType) -> np.ndarray:
    """The packed i32 tensor written from the fragment formula: unit (kb, nb) after unit, lane
    after lane, each lane's 32 codes plus the format's `stored_offset` (modulo 2^b: i8 offset
    binary) as a b-bit little-endian bitstream."""
    k, n = codes.shape
    table = unit_table(dtype.nbits)
    ordered = []
    for kb in range(k // 16):
        for nb in range(n // 64):
            for lane in range(32):
                ordered += [codes[16 * kb + r, 64 * nb + c] for r, c in table[lane]]
    mask = (1 << dtype.nbits) - 1
    stream = dtypes.pack(
        (np.array(ordered, dtype=np.int64) + stored_offset(dtype)) & mask,
        dtypes.from_name(f"u{dtype.nbits}"),
    )
    return stream.view(np.int32).reshape(k // 16, n // 64 * 32 * dtype.nbits)


def random_codes(rng: np.random.Generator, dtype: DataType, k: int, n: int) -> np.ndarray:
    return rng.integers(0, 1 << dtype.nbits, (k, n))


# ------------------------------------------------------------------------------ exact tables


def test_unit_permutation_lane_0_literal() -> None:
    # At 8 bits the packed order is the fragment order: lane 0 holds k = 0, 1, 8, 9 of column 0
    # of each n8 fragment, fragments 0..7 in order.
    expected = [(0, 0), (1, 0), (8, 0), (9, 0), (0, 8), (1, 8), (8, 8), (9, 8), (0, 16)]
    assert [divmod(int(x), 64) for x in unit_permutation(8)[:9]] == expected
    # Lane 1 starts at element 32: k = 2, 3, 10, 11 of column 0.
    lane_1 = [divmod(int(x), 64) for x in unit_permutation(8)[32:36]]
    assert lane_1 == [(2, 0), (3, 0), (10, 0), (11, 0)]
    # At 4 bits each word pairs rows k and k + 1 (one mma register) 16 bits apart: its eight
    # nibbles are k = 0, 8 of fragments 0 and 1, then k = 1, 9 of the same.
    assert [divmod(int(x), 64) for x in unit_permutation(4)[:8]] == [
        (0, 0),
        (8, 0),
        (0, 8),
        (8, 8),
        (1, 0),
        (9, 0),
        (1, 8),
        (9, 8),
    ]
    # Lane 4 is column 1 of each fragment.
    assert [divmod(int(x), 64) for x in unit_permutation(8)[128:133]] == [
        (0, 1),
        (1, 1),
        (8, 1),
        (9, 1),
        (0, 9),
    ]


@pytest.mark.parametrize("nbits", range(1, 9))
def test_unit_permutation_equals_the_b_fragment_formula(nbits: int) -> None:
    expected = [r * 64 + c for row in unit_table(nbits) for r, c in row]
    assert unit_permutation(nbits).tolist() == expected


@pytest.mark.parametrize("nbits", range(1, 9))
def test_unit_permutation_is_a_permutation_of_the_unit(nbits: int) -> None:
    assert sorted(unit_permutation(nbits).tolist()) == list(range(16 * 64))


@pytest.mark.parametrize("nbits", range(1, 9))
def test_packed_order_holds_the_fragment_elements_of_each_lane(nbits: int) -> None:
    packed, natural = unit_element_layout(nbits), unit_element_layout()
    for lane in range(32):
        assert sorted(packed.map(lane, j) for j in range(32)) == sorted(
            natural.map(lane, j) for j in range(32)
        )


def test_unit_element_layout_map_equals_the_b_fragment_formula() -> None:
    layout = unit_element_layout()
    assert (layout.shape, layout.num_threads, layout.local_size) == ((16, 64), 32, 32)
    table = unit_table()
    assert all(layout.map(t, i) == table[t][i] for t in range(32) for i in range(32))


@pytest.mark.parametrize(
    ("dtype", "k", "n", "shape"),
    [
        (dtypes.i4, 16, 64, (1, 128)),  # one unit: 32 lanes x 4 words
        (dtypes.u1, 16, 64, (1, 32)),  # one word per lane
        (dtypes.u3, 32, 128, (2, 192)),  # two unit rows of two units of 32 x 3 words
        (dtypes.f8e4m3, 48, 64, (3, 256)),
        (dtypes.f6e3m2, 16, 192, (1, 576)),
        (dtypes.i4, 4096, 12288, (256, 24576)),  # a decoding layer's weights
    ],
    ids=str,
)
def test_weight_format_shape(dtype: DataType, k: int, n: int, shape: tuple[int, int]) -> None:
    fmt = WeightFormat(dtype.name, k, n)
    assert fmt.shape == shape
    assert fmt.words_per_lane == dtype.nbits


def test_weight_format_version_and_unit() -> None:
    assert FORMAT_VERSION == 3
    fmt = WeightFormat("i4", 16, 64)
    assert (fmt.version, fmt.unit) == (3, "k16n64 mma.m16n8k16.b")
    packed, packed_fmt = pack_weights(np.zeros((32, 128), dtype=np.int64), dtypes.u3)
    assert packed_fmt == WeightFormat("u3", 32, 128, FORMAT_VERSION)
    assert packed.dtype == np.int32 and packed.shape == packed_fmt.shape


def test_pack_weights_u4_literal_words() -> None:
    # codes[r, c] = (r + c // 8) % 16: fragment f of lane 0 holds rows 0, 1, 8, 9 plus f.
    rows, columns = np.indices((16, 64))
    packed, _ = pack_weights((rows + columns // 8) % 16, dtypes.u4)
    words = packed.view(np.uint32)
    # Lane 0, word 0, in the 4-bit lane order (rows 0 and 8 of fragments 0 and 1, then rows 1
    # and 9 of the same): 0, 8, 1, 9 then 1, 9, 2, 10.
    assert words[0, 0] == 0xA291_9180
    # Lane 0, word 3: fragments 6 and 7: 6, 14, 7, 15 then 7, 15, 8, 0.
    assert words[0, 3] == 0x08F7_F7E6
    # Lane 1, word 0 (lane 1 starts at word 4): rows 2, 10 then 3, 11.
    assert words[0, 4] == 0xC4B3_B3A2


def test_pack_weights_u8_literal_bytes() -> None:
    # At 8 bits a word is 4 weights: lane 0's first two words are (k, n) = (0, 0), (1, 0),
    # (8, 0), (9, 0), then (0, 8), (1, 8), (8, 8), (9, 8); codes[r, c] = (64 r + c) % 251.
    codes = np.arange(16 * 64).reshape(16, 64) % 251
    packed, _ = pack_weights(codes, dtypes.u8)
    assert packed.view(np.uint8).reshape(-1)[:8].tolist() == [0, 64, 10, 74, 8, 72, 18, 82]


# ------------------------------------------------------------------------------ properties


@settings(max_examples=25, deadline=None)
@given(
    dtype=st.sampled_from(WEIGHT_DTYPES),
    units_k=st.integers(1, 3),
    units_n=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_unpack_of_pack_is_identity(dtype: DataType, units_k: int, units_n: int, seed: int) -> None:
    codes = random_codes(np.random.default_rng(seed), dtype, 16 * units_k, 64 * units_n)
    packed, fmt = pack_weights(codes, dtype)
    assert packed.shape == fmt.shape == (units_k, units_n * 32 * dtype.nbits)
    np.testing.assert_array_equal(unpack_weights(packed, fmt), codes)


@settings(max_examples=25, deadline=None)
@given(
    dtype=st.sampled_from(WEIGHT_DTYPES),
    units_k=st.integers(1, 2),
    units_n=st.integers(1, 2),
    seed=st.integers(0, 2**32 - 1),
)
def test_pack_weights_equals_the_fragment_formula_packer(
    dtype: DataType, units_k: int, units_n: int, seed: int
) -> None:
    codes = random_codes(np.random.default_rng(seed), dtype, 16 * units_k, 64 * units_n)
    packed, _ = pack_weights(codes, dtype)
    np.testing.assert_array_equal(packed, formula_pack(codes, dtype))


@settings(max_examples=25, deadline=None)
@given(
    dtype=st.sampled_from(SIGNED_INTEGERS),
    units_k=st.integers(1, 2),
    units_n=st.integers(1, 2),
    seed=st.integers(0, 2**32 - 1),
)
def test_signed_values_pack_as_their_twos_complement_codes(
    dtype: DataType, units_k: int, units_n: int, seed: int
) -> None:
    half = 1 << (dtype.nbits - 1)
    rng = np.random.default_rng(seed)
    values = rng.integers(-half, half, (16 * units_k, 64 * units_n))
    codes = values & ((1 << dtype.nbits) - 1)
    packed, fmt = pack_weights(values, dtype)
    np.testing.assert_array_equal(packed, pack_weights(codes, dtype)[0])
    np.testing.assert_array_equal(unpack_weights(packed, fmt), codes)
    np.testing.assert_array_equal(dtype.decode(unpack_weights(packed, fmt)), values)


# ------------------------------------------------------------------------------ differential


def nan_codes(dtype: DataType) -> np.ndarray:
    """The codes of `dtype` that decode to NaN."""
    codes = np.arange(1 << dtype.nbits)
    return codes[np.isnan(dtype.decode(codes))] if dtype.is_float else codes[:0]


# Types with NaN payloads (more than one NaN code per sign): the interpreter's registers hold
# values, so a NaN loaded as such a type comes back as the canonical NaN of its sign.
PAYLOAD_NAN_DTYPES = [dtype for dtype in WEIGHT_DTYPES if nan_codes(dtype).size > 2]


def run_pack_program(dtype: DataType, warps: int, codes: np.ndarray) -> np.ndarray:
    """`pack_weights_program(dtype, warps)` run by the interpreter on `codes`; every output word
    starts as garbage, so a word the program does not write shows."""
    k, n = codes.shape
    shape = WeightFormat(dtype.name, k, n).shape
    packed = np.random.default_rng(k + n).integers(-(2**31), 2**31, shape).astype(np.int32)
    program = pack_weights_program(dtype, warps)
    assert [p.name for p in program.params] == ["n", "k", "w", "packed"]
    grid = (n // (64 * warps), k // 16)
    run_reference(program, n, k, dtypes.pack(codes, dtype), packed, grid=grid)
    return packed


@pytest.mark.parametrize("warps", [1, 2, 4])
@pytest.mark.parametrize("dtype", WEIGHT_DTYPES, ids=str)
def test_pack_weights_program_equals_pack_weights(dtype: DataType, warps: int) -> None:
    rng = np.random.default_rng(dtype.nbits * 10 + warps)
    codes = random_codes(rng, dtype, 32, 64 * warps * 2)
    np.testing.assert_array_equal(
        run_pack_program(dtype, warps, codes), pack_weights(codes, dtype)[0]
    )


def test_only_f8e3m4_and_f8e5m2_have_nan_payloads() -> None:
    assert PAYLOAD_NAN_DTYPES == [dtypes.f8e3m4, dtypes.f8e5m2]


@pytest.mark.parametrize("dtype", PAYLOAD_NAN_DTYPES, ids=str)
def test_pack_weights_program_keeps_nan_payloads(dtype: DataType) -> None:
    codes = np.resize(nan_codes(dtype), (16, 64))
    np.testing.assert_array_equal(run_pack_program(dtype, 1, codes), pack_weights(codes, dtype)[0])


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("dtype", "shown"),
    [(dtypes.f16, "f16"), (dtypes.i32, "i32"), (dtypes.bf16, "bf16"), ("i4", "'i4'")],
    ids=str,
)
def test_bad_weight_dtype_is_refused(dtype: object, shown: str) -> None:
    message = re.escape(f"packed weights: {shown} is not a weight type")
    with pytest.raises(VerificationError, match=message):
        check_weight_dtype(dtype)
    with pytest.raises(VerificationError, match=message):
        pack_weights(np.zeros((16, 64), dtype=np.int64), dtype)
    with pytest.raises(VerificationError, match=message):
        pack_weights_program(dtype)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ((8, 64), r"shape \(8, 64\); expected K a positive multiple of 16 and N"),
        ((24, 64), r"shape \(24, 64\); expected K a positive multiple of 16"),
        ((16, 32), r"shape \(16, 32\); expected K .* N a positive multiple of 64"),
        ((16, 96), r"shape \(16, 96\); expected"),
        ((0, 64), r"shape \(0, 64\); expected"),
        ((16, 64, 1), r"codes of shape \(16, 64, 1\); expected \(K, N\)"),
        ((1024,), r"codes of shape \(1024,\); expected \(K, N\)"),
    ],
    ids=str,
)
def test_bad_shape_is_refused(shape: tuple[int, ...], message: str) -> None:
    with pytest.raises(VerificationError, match=message):
        pack_weights(np.zeros(shape, dtype=np.int64), dtypes.u4)


@pytest.mark.parametrize(
    ("dtype", "bad", "message"),
    [
        (dtypes.u4, 16, r"codes in \[0, 16\] do not fit u4 \(expected \[0, 15\]\)"),
        (dtypes.u4, -1, r"codes in \[-1, 0\] do not fit u4"),
        (dtypes.i4, -9, r"codes in \[-9, 0\] do not fit i4 \(expected \[-8, 15\]\)"),
        (dtypes.i4, 16, r"codes in \[0, 16\] do not fit i4"),
        (dtypes.u1, 2, r"codes in \[0, 2\] do not fit u1"),
        (dtypes.f4e2m1, -1, r"codes in \[-1, 0\] do not fit f4e2m1 \(expected \[0, 15\]\)"),
        (dtypes.f8e4m3, 256, r"codes in \[0, 256\] do not fit f8e4m3"),
    ],
    ids=str,
)
def test_codes_out_of_range_are_refused(dtype: DataType, bad: int, message: str) -> None:
    codes = np.zeros((16, 64), dtype=np.int64)
    codes[3, 5] = bad
    with pytest.raises(VerificationError, match=message):
        pack_weights(codes, dtype)


def test_unpack_refuses_another_version() -> None:
    packed, fmt = pack_weights(np.zeros((16, 64), dtype=np.int64), dtypes.i4)
    newer = WeightFormat(fmt.dtype, fmt.k, fmt.n, version=FORMAT_VERSION + 1)
    with pytest.raises(VerificationError, match="format version 4; this library reads 3"):
        unpack_weights(packed, newer)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ((1, 64), r"shape \(1, 64\); expected \(1, 128\)"),
        ((128, 1), r"shape \(128, 1\); expected \(1, 128\)"),
        ((2, 128), r"shape \(2, 128\); expected \(1, 128\)"),
        ((128,), r"shape \(128,\); expected \(1, 128\)"),
    ],
    ids=str,
)
def test_unpack_refuses_a_wrong_shape(shape: tuple[int, ...], message: str) -> None:
    with pytest.raises(VerificationError, match=message):
        unpack_weights(np.zeros(shape, dtype=np.int32), WeightFormat("i4", 16, 64))


# ------------------------------------------------------------------------------ scales


def test_scale_permutation_table() -> None:
    # Packed column g * 8 + f holds natural column f * 8 + g: lane l (g = l // 4) reads its
    # eight B-fragment columns g, 8 + g, ..., 56 + g as one 16-byte vector.
    expected = [f * 8 + g for g in range(8) for f in range(8)]
    assert scale_permutation().tolist() == expected
    layout = unit_scale_layout()
    for lane in range(32):
        columns = [layout.map(lane, f)[1] for f in range(8)]
        assert columns == list(range(lane // 4 * 8, lane // 4 * 8 + 8))


def test_accumulator_scale_layouts_read_the_c_fragment_columns() -> None:
    load, view = unit_accumulator_scale_layouts()
    for lane in range(32):
        q = lane % 4
        # Lane 4r + q reads packed columns 16q .. 16q + 15 (two 16-byte vectors)...
        assert [load.map(lane, i)[1] for i in range(16)] == list(range(16 * q, 16 * q + 16))
        # ...which hold natural column 8t + 2q + e at register 8e + t: in PTX's m16n8k16 C
        # fragment, lane 4r + q holds columns 2q and 2q + 1 of each n8 fragment t.
        named = [view.map(lane, i)[1] for i in range(16)]
        assert named == [8 * t + 2 * q + e for e in range(2) for t in range(8)]
        assert named == [scale_permutation()[load.map(lane, i)[1]] for i in range(16)]


@settings(max_examples=25, deadline=None)
@given(groups=st.integers(1, 3), units=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
def test_pack_scales_moves_each_scale_to_its_lane(groups: int, units: int, seed: int) -> None:
    scales = np.random.default_rng(seed).random((groups, 64 * units)).astype(np.float16)
    packed = pack_scales(scales)
    assert packed.shape == scales.shape and packed.flags.c_contiguous
    for u in range(units):
        for g in range(8):
            for f in range(8):
                natural = scales[:, u * 64 + f * 8 + g]
                np.testing.assert_array_equal(packed[:, u * 64 + g * 8 + f], natural)


@pytest.mark.parametrize("shape", [(4, 100), (64,), (2, 0)], ids=str)
def test_pack_scales_refuses_a_bad_shape(shape: tuple[int, ...]) -> None:
    with pytest.raises(VerificationError, match=re.escape(f"packed scales: shape {shape}")):
        pack_scales(np.zeros(shape, np.float16))


@pytest.mark.parametrize(
    ("activation", "zero_points", "name"),
    [
        (dtypes.f16, False, "qmm_i4"),
        (dtypes.bf16, False, "qmm_i4_bf16"),
        (dtypes.bf16, True, "qmm_i4_bf16_zp"),
    ],
)
def test_program_name_table(activation, zero_points, name) -> None:
    assert program_name("qmm", dtypes.i4, activation, zero_points) == name


def test_packed_operands_and_views_are_the_format_in_order() -> None:
    """a, packed, scales (and zeros) in that order; the words viewed as the packed tensor of
    `WeightFormat.shape`, the scale and zero-point rows as (groups, n)."""
    with ProgramBuilder("views", 32) as b:
        operands = packed_operands(b, dtypes.bf16, True)
        views = packed_views(b, operands, 3, 256, 160, 64)
    program = b.program()
    assert [p.name for p in program.params] == ["a", "packed", "scales", "zeros"]
    assert [p.dtype for p in program.params] == [dtypes.bf16, dtypes.i32, dtypes.bf16, dtypes.bf16]
    packed, scales, zeros = (view.layout for view in views)
    assert packed.shape == WeightFormat("u3", 160, 256).shape
    assert scales.shape == zeros.shape == (3, 256) and scales.strides == (256, 1)
    with ProgramBuilder("no_zeros", 32) as b:
        operands = packed_operands(b, dtypes.f16, False)
        assert operands[3] is None and packed_views(b, operands, 4, 64, 16, 16)[2] is None


@pytest.mark.parametrize("codes", [np.arange(-128, 128), np.arange(0, 256)], ids=["values", "bits"])
def test_i8_codes_are_stored_offset_binary(codes: np.ndarray) -> None:
    """An i8 code c is stored as the byte c + 128 (its pattern with the sign bit flipped), given
    as a value or as its pattern; unpacking gives the patterns back; no other type moves."""
    assert stored_offset(dtypes.i8) == 128
    assert {stored_offset(d) for d in (dtypes.u8, dtypes.i4, dtypes.i7, dtypes.f8e4m3)} == {0}
    grid = np.resize(codes, (16, 64))
    packed, fmt = pack_weights(grid, dtypes.i8)
    stored = unpack_weights(packed, WeightFormat("u8", 16, 64))
    np.testing.assert_array_equal(stored, (grid + 128) % 256)
    np.testing.assert_array_equal(unpack_weights(packed, fmt), grid % 256)


@pytest.mark.parametrize(
    ("nbits", "units_k", "units_n", "words"),
    [
        (4, 8, 1, 32),
        (2, 8, 1, 16),
        (1, 8, 2, 16),
        (3, 8, 1, 28),
        (5, 8, 1, 44),
        (6, 8, 1, 52),
        (7, 8, 1, 60),
        (3, 2, 1, 12),
        (3, 1, 1, 4),
        (6, 4, 2, 52),
    ],
)
def test_weight_ring_thread_words(nbits: int, units_k: int, units_n: int, words: int) -> None:
    assert weight_ring_thread_words(nbits, units_k, units_n) == words


def test_weight_ring_layout_of_three_bit_words() -> None:
    """Two stages of one warp's k-tile of two k16 steps: each lane's 6 words together, 12
    apart (3 vectors), its k16 steps 3 words apart."""
    layout = weight_ring_layout(2, 3, 1, 2, 1)
    offsets = {
        (0, 0, 0): 0,
        (0, 0, 2): 2,
        (0, 1, 0): 3,
        (0, 0, 3): 12,
        (0, 1, 95): 12 * 31 + 3 + 2,
        (1, 0, 0): 32 * 12,
    }
    assert {coord: layout.offset(coord) for coord in offsets} == offsets
    # The allocation ends at the last word, before the last thread's padding.
    assert layout.size == 32 * 12 + 12 * 31 + 3 + 2 + 1


def test_weight_ring_layout_is_row_major_at_power_of_two_widths() -> None:
    for nbits in (1, 2, 4, 8):
        assert weight_ring_layout(3, nbits, 4, 8, 1) == shared_row_major(3, 8, 4 * 32 * nbits)


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from([3, 5, 6, 7]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([1, 2]),
)
def test_weight_ring_layout_keeps_each_thread_s_words_together(
    nbits: int, warps: int, units_k: int, units_n: int
) -> None:
    """Against the tile's word layout: the stages are disjoint and one-to-one; each thread's
    words lie at consecutive offsets in its registers' order from a 16-byte boundary; and the
    16-byte vectors that eight neighbouring lanes load together fall in eight different bank
    groups (no conflicts)."""
    stages = 2
    layout = weight_ring_layout(stages, nbits, warps, units_k, units_n)
    words = tile_layouts(nbits, warps, units_k, units_n)[1]
    table = layout.table()
    assert len(np.unique(table)) == table.size
    per_thread = weight_ring_thread_words(nbits, units_k, units_n)
    assert table[1, 0, 0] - table[0, 0, 0] == warps * 32 * per_thread
    assert layout.size <= stages * warps * 32 * per_thread
    threads, registers = np.meshgrid(
        np.arange(words.num_threads), np.arange(words.local_size), indexing="ij"
    )
    rows, cols = words.map(threads, registers)
    offsets = table[1, rows, cols] - table[1, 0, 0]
    assert (offsets == offsets[:, :1] + registers).all()
    assert (offsets[:, 0] % 4 == 0).all()
    vectors = offsets[:, : registers.shape[1] // 4 * 4 : 4] // 4
    for quarter in range(words.num_threads // 8):
        groups = vectors[8 * quarter : 8 * quarter + 8] % 8
        assert all(len(set(groups[:, j])) == 8 for j in range(groups.shape[1]))

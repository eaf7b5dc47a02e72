"""The contract's NaN classes in the interpreter: moves keep codes, casts keep the sign,
arithmetic gives the positive quiet NaN.

Every NaN code of every float type with NaNs (all of them for types of up to 16 bits, a spread
of payloads for f32) goes through loads, stores, `view`, shared memory (`store_shared` and
`copy_async`), `assign`, `where`, `neg` and `abs`, and must arrive bit for bit (the codes the
GPU keeps: a load of 0x7C01 viewed as bytes is 01 7C). Casts and arithmetic are checked
against the rule written out here, and a hypothesis property sends random codes of any float
type through a chain of moves. `to_values` / `to_codes` round-trip every code. Then
`ir.testing.codes_match`: computed NaNs match by sign, moved ones only when identical.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.elementwise import to_codes, to_values
from ir.program import Program
from ir.testing import codes_match
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial
from layout_algebra.shared import shared_row_major

NAN_TYPES = [d for d in dtypes.all_dtypes() if d.is_float and d.has_nan]
THREADS = 32
MOVES = ("copy", "bytes", "shared", "copy_async", "assign", "where", "neg", "abs")


def nan_codes(dtype: DataType) -> np.ndarray:
    """Every NaN code of `dtype` (types of up to 16 bits), or a spread of f32's: every sign,
    quiet and signalling, payloads of one bit in each position and all ones."""
    if dtype.nbits <= 16:
        codes = np.arange(1 << dtype.nbits)
        return codes[np.isnan(dtype.decode(codes))]
    payloads = [1 << b for b in range(22)] + [(1 << 22) - 1, 1 << 22, (1 << 23) - 1]
    return np.array([s | 0x7F800000 | p for s in (0, 1 << 31) for p in payloads], dtype=np.int64)


def sign_flipped(dtype: DataType, codes: np.ndarray) -> np.ndarray:
    return codes ^ (1 << (dtype.nbits - 1))


def sign_cleared(dtype: DataType, codes: np.ndarray) -> np.ndarray:
    return codes & ((1 << (dtype.nbits - 1)) - 1)


def move_program(dtype: DataType, count: int) -> Program:
    """``moves(x, out_0, ..., out_7, out_bytes)``: `count` codes of `dtype` (a multiple of 256)
    moved into each output by one of `MOVES` (bytes: viewed as u8 and stored as bytes)."""
    local = count // THREADS
    layout = spatial(THREADS).local(local)
    line = GlobalLayout((count,), (1,))
    with ProgramBuilder(f"moves_{dtype.name}", THREADS) as b:
        x = b.array_param("x", dtype)
        outs = {name: b.array_param(f"out_{name}", dtype) for name in MOVES if name != "bytes"}
        out_bytes = b.array_param("out_bytes", dtypes.u8)
        source = b.global_view(x, dtype, line)
        values = b.load_global(source, [0], layout)

        def store(name, tensor):
            b.store_global(b.global_view(outs[name], dtype, line), tensor, [0])

        store("copy", values)
        byte_count = count * dtype.nbits // 8
        as_bytes = b.view(values, dtypes.u8, spatial(THREADS).local(byte_count // THREADS))
        b.store_global(
            b.global_view(out_bytes, dtypes.u8, GlobalLayout((byte_count,), (1,))), as_bytes, [0]
        )
        staged = b.shared_tensor(dtype, shared_row_major(count))
        b.store_shared(staged, values)
        b.sync()
        store("shared", b.load_shared(staged, layout))
        copied = b.shared_tensor(dtype, shared_row_major(count))
        b.copy_async(copied, source, [0])
        b.copy_async_commit()
        b.copy_async_wait(0)
        b.sync()
        store("copy_async", b.load_shared(copied, layout))
        held = b.register_tensor(dtype, layout, 0)
        b.assign(held, values)
        store("assign", held)
        condition = b.register_tensor(dtypes.u1, layout, 1)
        store("where", b.where(condition, values, held))
        store("neg", b.neg(values))
        store("abs", b.abs(values))
    return b.program()


def run_moves(dtype: DataType, codes: np.ndarray) -> dict[str, np.ndarray]:
    """The codes each move of `move_program` gives for `codes`, padded to a multiple of 256
    (each thread then holds whole bytes of codes of any width, for the view as bytes)."""
    count = -(-len(codes) // 256) * 256
    padded = np.zeros(count, dtype=np.int64)
    padded[: len(codes)] = codes
    x = dtypes.pack(padded, dtype)
    outs = {name: np.zeros_like(x) for name in MOVES if name != "bytes"}
    out_bytes = np.zeros(count * dtype.nbits // 8, dtype=np.uint8)
    run_reference(move_program(dtype, count), x, *outs.values(), out_bytes, grid=1)
    result = {name: dtypes.unpack(out, dtype, count)[: len(codes)] for name, out in outs.items()}
    result["bytes"] = dtypes.unpack(out_bytes, dtype, count)[: len(codes)]
    return result


@pytest.mark.parametrize("dtype", NAN_TYPES, ids=str)
def test_every_nan_code_survives_every_move(dtype: DataType) -> None:
    codes = nan_codes(dtype)
    moved = run_moves(dtype, codes)
    expected = {name: codes for name in MOVES}
    expected["neg"] = sign_flipped(dtype, codes)
    expected["abs"] = sign_cleared(dtype, codes)
    for name in MOVES:
        np.testing.assert_array_equal(moved[name], expected[name], err_msg=f"{dtype} {name}")


def test_a_signalling_f16_nan_viewed_as_bytes_is_its_code() -> None:
    """The report that opened this rule: f16 0x7C01 loaded and viewed as bytes."""
    moved = run_moves(dtypes.f16, np.array([0x7C01, 0xFC01, 0x7DFF]))
    np.testing.assert_array_equal(moved["bytes"], [0x7C01, 0xFC01, 0x7DFF])
    one = move_program(dtypes.f8e5m2, 256)
    x = dtypes.pack(np.full(256, 0x7F), dtypes.f8e5m2)
    outs = [np.zeros_like(x) for _ in range(len(MOVES) - 1)]
    run_reference(one, x, *outs, np.zeros(256, np.uint8), grid=1)
    stored = dict(zip([name for name in MOVES if name != "bytes"], outs))
    assert stored["shared"].tolist() == [0x7F] * 256  # not 0x7E
    assert stored["copy_async"].tolist() == [0x7F] * 256


def cast_program(src: DataType, dst: DataType, count: int) -> Program:
    layout = spatial(THREADS).local(count // THREADS)
    with ProgramBuilder(f"cast_{src.name}_{dst.name}", THREADS) as b:
        x = b.array_param("x", src)
        y = b.array_param("y", dst)
        s = b.array_param("s", src)
        values = b.load_global(b.global_view(x, src, GlobalLayout((count,), (1,))), [0], layout)
        b.store_global(
            b.global_view(y, dst, GlobalLayout((count,), (1,))), b.cast(values, dst), [0]
        )
        total = b.add(values, values)
        b.store_global(b.global_view(s, src, GlobalLayout((count,), (1,))), total, [0])
    return b.program()


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (dtypes.f16, dtypes.f32),
        (dtypes.f16, dtypes.bf16),
        (dtypes.f8e5m2, dtypes.f16),
        (dtypes.f32, dtypes.f16),
        (dtypes.bf16, dtypes.f8e4m3),
        (dtypes.f8e3m4, dtypes.f8e5m2),
    ],
    ids=str,
)
def test_casts_keep_the_sign_and_arithmetic_gives_the_positive_quiet_nan(
    src: DataType, dst: DataType
) -> None:
    codes = nan_codes(src)[:256]
    count = -(-len(codes) // THREADS) * THREADS
    padded = np.zeros(count, dtype=np.int64)
    padded[: len(codes)] = codes
    x = dtypes.pack(padded, src)
    y, s = np.zeros(dtypes.packed_nbytes(count, dst), np.uint8), np.zeros_like(x)
    run_reference(cast_program(src, dst, count), x, y, s, grid=1)
    negative = (codes >> (src.nbits - 1)) & 1
    # The destination's quiet NaN of the source's sign (f8e4m3 has one NaN per sign).
    quiet = {
        sign: int(dst.encode(np.array([np.nan if sign == 0 else -np.nan]))[0]) for sign in (0, 1)
    }
    cast = dtypes.unpack(y, dst, count)[: len(codes)]
    np.testing.assert_array_equal(cast, [quiet[int(n)] for n in negative])
    assert quiet[1] == quiet[0] | (1 << (dst.nbits - 1))
    total = dtypes.unpack(s, src, count)[: len(codes)]
    np.testing.assert_array_equal(total, int(src.encode(np.array([np.nan]))[0]))


@pytest.mark.parametrize("dtype", [d for d in NAN_TYPES if d.nbits <= 16], ids=str)
def test_values_and_codes_round_trip_every_code(dtype: DataType) -> None:
    codes = np.arange(1 << dtype.nbits)
    np.testing.assert_array_equal(to_codes(dtype, to_values(dtype, codes)), codes)
    # Decoded values are unchanged except NaNs, which carry their code.
    values = to_values(dtype, codes)
    finite = ~np.isnan(dtype.decode(codes))
    np.testing.assert_array_equal(values[finite], dtype.decode(codes)[finite])


def test_to_codes_of_an_arithmetic_nan_is_the_quiet_nan_of_its_sign() -> None:
    values = np.array([0x7FC00000, 0xFFC00000, 0x7F800001], dtype=np.uint32).view(np.float32)
    assert to_codes(dtypes.f16, values).tolist() == [0x7E00, 0xFE00, 0x7C00 | 0x200]
    # f8e4m3's one NaN (0x7F) per sign: a payload that is no code of it gives that NaN.
    assert to_codes(dtypes.f8e4m3, values).tolist() == [0x7F, 0xFF, 0x7F]


@settings(max_examples=25, deadline=None)
@given(
    dtype=st.sampled_from([d for d in dtypes.all_dtypes() if d.is_float and d.nbits <= 16]),
    seed=st.integers(0, 2**32 - 1),
)
def test_any_codes_survive_the_moves(dtype: DataType, seed: int) -> None:
    codes = np.random.default_rng(seed).integers(0, 1 << dtype.nbits, 64)
    moved = run_moves(dtype, codes)
    for name in ("copy", "bytes", "shared", "copy_async", "assign", "where"):
        np.testing.assert_array_equal(moved[name], codes, err_msg=name)
    np.testing.assert_array_equal(moved["neg"], sign_flipped(dtype, codes))
    np.testing.assert_array_equal(moved["abs"], sign_cleared(dtype, codes))


def test_codes_match_takes_computed_nans_by_sign_and_moved_ones_exactly() -> None:
    f16 = dtypes.f16
    # Expected 0x7E00 (the interpreter's computed NaN): any positive NaN matches.
    assert codes_match(f16, [0x7FFF, 0x7C01, 0xFFFF], [0x7E00] * 3).tolist() == [True, True, False]
    assert codes_match(f16, [0xFFFF], [0xFE00]).tolist() == [True]
    # Expected 0x7C01 (only a move keeps such a code): nothing else matches.
    assert codes_match(f16, [0x7C01, 0x7E00, 0x7C02], [0x7C01] * 3).tolist() == [True, False, False]
    assert codes_match(dtypes.u8, [1, 2], [1, 3]).tolist() == [True, False]

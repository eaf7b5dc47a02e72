"""Biased casts: `ProgramBuilder.cast(x, dtype, biased=True)` keeps each integer code's
magic-number bias (`ir.dtypes.magic_bias`, `magic_field_period`, `convert_biased`).

Exact: the bias table of a few types and offsets, the periods of every width, the refusals with
their messages (dtypes, builder, verifier), the printed form, the interpreter's codes for a
packed i4 word. Properties: the biased value is the f16 or bf16 number whose bits are the magic
number ``2^(M - p)`` with the code (its sign bit flipped for a signed type) ORed in at bit p,
built bit by bit (an independent construction of what the GPU's LOP3 does); the interpreter's
cast equals `convert_biased` on random words of every width it accepts.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.dtypes import DataType, DtypeError
from ir.errors import VerificationError
from ir.instructions import Cast
from ir.printer import format_instruction
from ir.program import Program
from ir.verifier import verify
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial

INTEGERS = [dtypes.from_name(f"{kind}{bits}") for bits in range(1, 9) for kind in "ui"]
TARGETS = (dtypes.f16, dtypes.bf16)


def test_bias_table() -> None:
    f16, bf16 = dtypes.f16, dtypes.bf16
    table = {
        (dtypes.u4, f16, 0): 1024,
        (dtypes.u4, f16, 4): 64,
        (dtypes.u4, f16, 8): 1024,
        (dtypes.i4, f16, 12): 64 + 8,
        (dtypes.i2, f16, 6): 16 + 2,
        (dtypes.u3, f16, 3): 128,
        (dtypes.u5, f16, 5): 512,
        (dtypes.u8, f16, 24): 1024,
        (dtypes.i8, f16, 8): 1024 + 128,
        (dtypes.u1, bf16, 3): 16,
        (dtypes.i4, bf16, 4): 128 + 8,
    }
    got = {key: dtypes.magic_bias(*key) for key in table}
    assert got == table


def test_field_periods() -> None:
    f16 = {t.nbits: dtypes.magic_field_period(t, dtypes.f16) for t in INTEGERS}
    bf16 = {t.nbits: dtypes.magic_field_period(t, dtypes.bf16) for t in INTEGERS if t.nbits < 8}
    assert f16 == {1: 8, 2: 8, 3: 8, 4: 8, 5: 4, 6: 4, 7: 4, 8: 8}
    assert bf16 == {1: 4, 2: 4, 3: 4, 4: 4, 5: 2, 6: 2, 7: 1}


@pytest.mark.parametrize(
    ("src", "dst", "message"),
    [
        (dtypes.f4e2m1, dtypes.f16, "a biased cast takes integer codes, not f4e2m1"),
        (dtypes.u4, dtypes.f32, "a biased cast gives f16 or bf16, not f32"),
        (dtypes.u8, dtypes.bf16, "u8 has 8 bits, more than bf16's 7 mantissa bits"),
        (dtypes.i32, dtypes.f16, "i32 has 32 bits, more than f16's 10 mantissa bits"),
    ],
)
def test_unavailable_biased_casts_are_named(src: DataType, dst: DataType, message: str) -> None:
    assert message in dtypes.magic_bias_error(src, dst)
    with pytest.raises(DtypeError, match="no biased cast"):
        dtypes.magic_bias(src, dst, 0)


@pytest.mark.parametrize("offset", [-1, 1.5, "4", None])
def test_bad_offsets_are_refused(offset: object) -> None:
    with pytest.raises(DtypeError, match="bit offset"):
        dtypes.magic_bias(dtypes.u4, dtypes.f16, offset)


def _placed(src: DataType, dst: DataType, code: int, offset: int) -> int:
    """The target code built bit by bit: the magic number 2^(M - p)'s exponent field, the
    code's bits (top bit flipped when signed) at bit p of the mantissa."""
    mantissa = dst.mantissa_bits
    p = offset % dtypes.magic_field_period(src, dst)
    exponent_field = mantissa - p + dst.bias
    unsigned = code ^ (1 << (src.nbits - 1)) if src.is_signed else code
    return exponent_field << mantissa | unsigned << p


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(INTEGERS),
    st.sampled_from(TARGETS),
    st.integers(0, 255),
    st.integers(0, 4096),
)
def test_biased_value_is_the_magic_number_with_the_code_ored_in(
    src: DataType, dst: DataType, raw: int, offset_units: int
) -> None:
    if dtypes.magic_bias_error(src, dst) is not None:
        return
    code = raw % (1 << src.nbits)
    offset = offset_units * src.nbits
    got = int(dtypes.convert_biased(np.array([code]), src, dst, np.array([offset]))[0])
    assert got == _placed(src, dst, code, offset)
    value = float(src.decode(np.array([code]))[0])
    assert dst.decode(np.array([got]))[0] == value + dtypes.magic_bias(src, dst, offset)
    # The field lies wholly under the magic number's exponent.
    p = offset % dtypes.magic_field_period(src, dst)
    assert p + src.nbits <= dst.mantissa_bits


def biased_program(src: DataType, dst: DataType, words: int) -> Program:
    """32 threads, each `words` words of `src` codes cast with their biases kept."""
    per = words * 32 // src.nbits
    with ProgramBuilder("biased", 32) as b:
        x = b.array_param("x", dtypes.i32)
        y = b.array_param("y", dst)
        view_x = b.global_view(x, dtypes.i32, GlobalLayout((32 * words,), (1,)))
        view_y = b.global_view(y, dst, GlobalLayout((32 * per,), (1,)))
        loaded = b.load_global(view_x, [0], spatial(32).local(words))
        codes = b.view(loaded, src, spatial(32).local(per))
        b.store_global(view_y, b.cast(codes, dst, biased=True), [0])
    return b.program()


def test_interpreter_codes_of_a_packed_i4_word() -> None:
    """Thread 0's word 0x87654321: codes 1..8 LSB first, biases 1032, 72, 1032, 72, ..."""
    program = biased_program(dtypes.i4, dtypes.f16, 1)
    x = np.zeros(32, np.uint32)
    x[0] = 0x87654321
    y = np.zeros(256, np.uint16)
    run_reference(program, x.view(np.int32), y)
    values = dtypes.f16.decode(y[:8])
    np.testing.assert_array_equal(values, [1033, 74, 1035, 76, 1037, 78, 1039, 64])


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(INTEGERS), st.sampled_from(TARGETS), st.integers(0, 2**32 - 1))
def test_interpreter_equals_convert_biased(src: DataType, dst: DataType, seed: int) -> None:
    if dtypes.magic_bias_error(src, dst) is not None:
        return
    words = src.nbits if 32 % src.nbits else 1
    per = words * 32 // src.nbits
    program = biased_program(src, dst, words)
    x = np.random.default_rng(seed).integers(0, 1 << 32, 32 * words, dtype=np.uint64)
    x = x.astype(np.uint32)
    y = np.zeros(32 * per, np.uint16)
    run_reference(program, x.view(np.int32), y)
    codes = dtypes.unpack(x.view(np.uint8), src, 32 * per).reshape(32, per)
    offsets = np.arange(per) * src.nbits
    expected = dtypes.convert_biased(codes, src, dst, offsets).ravel()
    np.testing.assert_array_equal(y, expected)


def test_printed_form() -> None:
    program = biased_program(dtypes.u2, dtypes.f16, 1)
    (cast,) = [i for i in program.body if isinstance(i, Cast)]
    assert format_instruction(cast).endswith("= cast(r1, biased)")


@pytest.mark.parametrize(
    ("src", "dst", "exponent", "message"),
    [
        (dtypes.f4e2m1, dtypes.f16, 0, "takes integer codes"),
        (dtypes.u4, dtypes.f16, -2, "a biased cast takes no exponent, got -2"),
        (dtypes.u8, dtypes.bf16, 0, "more than bf16's 7 mantissa bits"),
    ],
)
def test_builder_and_verifier_refuse_unavailable_biased_casts(
    src: DataType, dst: DataType, exponent: int, message: str
) -> None:
    with pytest.raises(VerificationError, match=message):
        with ProgramBuilder("bad", 32) as b:
            codes = b.register_tensor(src, spatial(32).local(8), 0)
            b.cast(codes, dst, exponent=exponent, biased=True)
    # The same instruction emitted past the builder's check: the verifier names it.
    program = biased_program(dtypes.u4, dtypes.f16, 1)
    body = list(program.body)
    index = next(i for i, ins in enumerate(body) if isinstance(ins, Cast))
    cast = body[index]
    body[index] = Cast(cast.out, cast.x, 0, "yes")
    with pytest.raises(VerificationError, match="biased must be a bool, got 'yes'"):
        verify(dataclasses.replace(program, body=tuple(body)))

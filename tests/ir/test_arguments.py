"""The argument binder's storage rule (`ir.arguments.storage_dtypes`, `check_storage`) and the
interpreter's block limit: which array dtypes `run_reference` takes for a parameter of each data
type, what it refuses and how it says so."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ir import dtypes, run_reference
from ir.arguments import check_storage, numpy_storage_name, storage_dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.errors import InterpreterError, VerificationError
from ir.examples.vector_add import vector_add
from ir.interpreter import MAX_BLOCKS
from ir.program import Program
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial

COUNT = 64  # elements copied by `copy_program`


def copy_program(dtype: DataType) -> Program:
    """``copy(x, y)``: y[k] = x[k] for the first COUNT elements, 32 threads of 2 elements."""
    with ProgramBuilder("copy", 32) as b:
        x = b.array_param("x", dtype)
        y = b.array_param("y", dtype)
        source, target = (b.global_view(p, dtype, GlobalLayout((COUNT,), (1,))) for p in (x, y))
        b.store_global(target, b.load_global(source, [0], spatial(32).local(2)), [0])
    return b.program()


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a storage name (ml_dtypes' types included)."""
    return np.dtype(getattr(ml_dtypes, name, name))


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (dtypes.f16, ("float16", "uint16", "int16", "uint8", "int8")),
        (dtypes.bf16, ("bfloat16", "uint16", "int16", "uint8", "int8")),
        (dtypes.f32, ("float32", "uint32", "int32", "uint8", "int8")),
        (dtypes.i32, ("int32", "uint32", "uint8", "int8")),
        (dtypes.f8e4m3, ("float8_e4m3fn", "uint8", "int8")),  # e4m3fn, not ml_dtypes' e4m3
        (dtypes.f8e5m2, ("float8_e5m2", "uint8", "int8")),
        (dtypes.f8e3m4, ("float8_e3m4", "uint8", "int8")),
        (dtypes.f8e2m5, ("uint8", "int8")),  # no library names this format
        (dtypes.i8, ("int8", "uint8")),
        (dtypes.u8, ("uint8", "int8")),
        (dtypes.u4, ("uint8", "int8")),  # sub-byte: only the bitstream's bytes
        (dtypes.f4e2m1, ("uint8", "int8")),
        (dtypes.i1, ("uint8", "int8")),
    ],
    ids=str,
)
def test_storage_dtypes_table(dtype: DataType, expected: tuple[str, ...]) -> None:
    assert storage_dtypes(dtype) == expected


@pytest.mark.parametrize(
    "dtype",
    [dtypes.f16, dtypes.bf16, dtypes.f32, dtypes.i32, dtypes.f8e4m3, dtypes.i8, dtypes.u4],
    ids=str,
)
def test_every_accepted_storage_copies_the_same_bytes(dtype: DataType) -> None:
    """Each accepted storage means its raw bytes: a copy through it equals a copy of bytes."""
    nbytes = COUNT * dtype.nbits // 8
    source = np.random.default_rng(dtype.nbits).integers(0, 256, nbytes, dtype=np.uint8)
    expected = np.zeros(nbytes, np.uint8)
    run_reference(copy_program(dtype), source.copy(), expected)
    for name in storage_dtypes(dtype):
        x = source.copy().view(numpy_dtype(name))
        y = np.zeros(nbytes, np.uint8).view(numpy_dtype(name))
        run_reference(copy_program(dtype), x, y)
        assert y.view(np.uint8).tobytes() == expected.tobytes(), name


def test_own_type_arrays_carry_their_values() -> None:
    values = np.array([1.5, -2.0, 65504.0, 2.0**-24] * (COUNT // 4), np.float16)
    out = np.zeros(COUNT, np.float16)
    run_reference(copy_program(dtypes.f16), values, out)
    np.testing.assert_array_equal(out, values)
    bf16 = values.astype(np.float32).astype(ml_dtypes.bfloat16)
    codes = np.zeros(COUNT, np.uint16)
    run_reference(copy_program(dtypes.bf16), bf16, codes)
    np.testing.assert_array_equal(codes, bf16.view(np.uint16))


def _array(dtype: object, count: int = 256) -> np.ndarray:
    return np.zeros(count, dtype)


@pytest.mark.parametrize(
    ("dtype", "array", "given"),
    [
        (dtypes.f16, _array(np.float32), "float32"),
        (dtypes.f16, _array(ml_dtypes.bfloat16), "bfloat16"),
        (dtypes.bf16, _array(np.float16), "float16"),
        (dtypes.f16, _array(np.int32), "int32"),
        (dtypes.f32, _array(np.float64), "float64"),
        (dtypes.i32, np.arange(256), "int64"),
        (dtypes.i32, _array(np.float32), "float32"),
        (dtypes.f8e4m3, _array(ml_dtypes.float8_e4m3fnuz), "float8_e4m3fnuz"),
        (dtypes.f8e4m3, _array(ml_dtypes.float8_e4m3), "float8_e4m3"),
        (dtypes.f8e4m3, _array(ml_dtypes.float8_e5m2), "float8_e5m2"),
        (dtypes.u4, _array(ml_dtypes.uint4), "uint4"),
        (dtypes.f4e2m1, _array(ml_dtypes.float4_e2m1fn), "float4_e2m1fn"),
        (dtypes.u4, _array(np.uint16), "uint16"),
        (dtypes.u8, _array(np.bool_), "bool"),
        (dtypes.u8, _array(np.complex64), "complex64"),
        (dtypes.u8, _array([("a", "<u1")]), "void8"),
        (dtypes.u8, _array("datetime64[s]"), r"datetime64\[s\]"),
        (dtypes.f16, _array(">f2"), "big-endian >f2"),
    ],
    ids=lambda value: value if isinstance(value, str) else str(value)[:12],
)
def test_storage_outside_the_rule_is_refused(
    dtype: DataType, array: np.ndarray, given: str
) -> None:
    expected = ", ".join(storage_dtypes(dtype))
    message = rf"argument 'x' has storage dtype {given}; expected one of {expected} for {dtype} "
    with pytest.raises(InterpreterError, match=message):
        run_reference(copy_program(dtype), array, np.zeros(256, np.uint8))


def test_masked_arrays_are_refused() -> None:
    masked = np.ma.masked_array(np.zeros(64, np.uint8), mask=False)
    with pytest.raises(InterpreterError, match="argument 'x' is a masked array"):
        run_reference(copy_program(dtypes.u8), masked, np.zeros(64, np.uint8))


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_a_numpy_matrix_is_read_and_written_in_place() -> None:
    source = np.matrix(np.arange(COUNT, dtype=np.uint8))
    target = np.matrix(np.zeros(COUNT, np.uint8))
    run_reference(copy_program(dtypes.u8), source, target)
    np.testing.assert_array_equal(np.asarray(target).ravel(), np.arange(COUNT))


def test_an_extent_below_one_is_an_empty_view() -> None:
    """vector_add with n = 0: every element is outside the views, as on the GPU (loads read
    the fill, stores are skipped), not an error about the view's layout."""
    x, y = np.ones(8, np.float16), np.ones(8, np.float16)
    z = np.full(8, 7, np.float16)
    run_reference(vector_add(), 0, x, y, z)
    np.testing.assert_array_equal(z, np.full(8, 7, np.float16))
    run_reference(vector_add(), 3, x, y, z)
    np.testing.assert_array_equal(z, [2, 2, 2, 7, 7, 7, 7, 7])


def test_numpy_storage_name_marks_big_endian_items() -> None:
    assert numpy_storage_name(np.dtype("<f2")) == "float16"
    assert numpy_storage_name(np.dtype(">u1")) == "uint8"  # one byte: no byte order
    assert numpy_storage_name(np.dtype(">i4")) == "big-endian >i4"
    assert numpy_storage_name(np.dtype(ml_dtypes.bfloat16)) == "bfloat16"


def test_check_storage_names_a_width_when_no_type_is_known() -> None:
    check_storage("a", "int16", ("float16", "int16"), 16, ValueError)
    with pytest.raises(
        ValueError,
        match=r"^argument 'a' has storage dtype uint8; expected one of float16, "
        r"int16 for 16-bit elements$",
    ):
        check_storage("a", "uint8", ("float16", "int16"), 16, ValueError)


# ----------------------------------------------------------------------------- block limit


def empty_program() -> Program:
    with ProgramBuilder("empty", 1) as b:
        b.int_param("n")
    return b.program()


@pytest.mark.parametrize(
    ("grid", "blocks"),
    [(10**7, 10**7), (MAX_BLOCKS + 1, MAX_BLOCKS + 1), ((256, 256, 2), 131072)],
    ids=["ten-million", "one-past", "three-dimensions"],
)
def test_a_grid_past_the_block_limit_is_refused_up_front(grid: object, blocks: int) -> None:
    message = (
        rf"grid \(.*\) has {blocks} blocks, more than the interpreter's limit of {MAX_BLOCKS}; "
        rf".*pass max_blocks={blocks}"
    )
    with pytest.raises(InterpreterError, match=message):
        run_reference(empty_program(), 1, grid=grid)


def test_max_blocks_raises_and_lowers_the_limit() -> None:
    run_reference(empty_program(), 1, grid=(3, 2))
    with pytest.raises(InterpreterError, match=r"has 6 blocks, more than .* limit of 5"):
        run_reference(empty_program(), 1, grid=(3, 2), max_blocks=5)
    run_reference(empty_program(), 1, grid=(3, 2), max_blocks=6)


def test_the_block_limit_applies_to_a_declared_grid() -> None:
    with ProgramBuilder("declared", 1) as b:
        n = b.int_param("n")
        b.grid(n)
    with pytest.raises(InterpreterError, match=r"grid \(100, 1, 1\) has 100 blocks"):
        run_reference(b.program(), 100, max_blocks=99)


@pytest.mark.parametrize(
    ("max_blocks", "shown"),
    [(0, "0"), (-1, "-1"), (True, "True"), (2.5, "2.5"), ("10", "'10'"), (None, "None")],
    ids=["zero", "negative", "bool", "float", "string", "none"],
)
def test_max_blocks_must_be_a_positive_int(max_blocks: object, shown: str) -> None:
    with pytest.raises(InterpreterError, match=rf"max_blocks={shown}; expected a positive int"):
        run_reference(empty_program(), 1, max_blocks=max_blocks)


@pytest.mark.parametrize("name", ["grid", "max_blocks"])
def test_the_call_keywords_are_no_parameter_names(name: str) -> None:
    with pytest.raises(VerificationError, match=rf"parameter name '{name}' is reserved: it is a"):
        with ProgramBuilder("keywords", 1) as b:
            b.int_param(name)

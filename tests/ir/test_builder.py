"""The builder and the printer: the instructions a `with` block makes, and their text."""

from __future__ import annotations

import pytest

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.elementwise import BINARY_OPS, UNARY_OPS
from ir.errors import VerificationError
from ir.examples.vector_add import vector_add
from ir.instructions import (
    Binary,
    ForRange,
    If,
    LoadGlobal,
    RegisterTensorInit,
    StoreGlobal,
    Unary,
)
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import local, replicate, spatial

VECTOR_ADD_TEXT = """\
program vector_add(n: int, x: f16*, y: f16*, z: f16*) num_threads=128
  g0 = global_view(x, f16, GlobalLayout(shape=(n,), strides=(1,)))
  g1 = global_view(y, f16, GlobalLayout(shape=(n,), strides=(1,)))
  g2 = global_view(z, f16, GlobalLayout(shape=(n,), strides=(1,)))
  r0: f16[1024] spatial(128).local(8) = load_global(g0, [block_x * 1024])
  r1: f16[1024] spatial(128).local(8) = load_global(g1, [block_x * 1024])
  r2: f16[1024] spatial(128).local(8) = add(r0, r1)
  store_global(g2, r2, [block_x * 1024])"""


def test_vector_add_prints_one_instruction_per_line():
    assert str(vector_add()) == VECTOR_ADD_TEXT


def test_vector_add_instructions_and_operands():
    program = vector_add()
    load_x, load_y, add, store = program.body[3:]
    assert isinstance(load_x, LoadGlobal) and load_x.src.param.name == "x"
    assert (
        isinstance(add, Binary)
        and add.op == "add"
        and (add.lhs, add.rhs)
        == (
            load_x.out,
            load_y.out,
        )
    )
    assert isinstance(store, StoreGlobal) and store.src is add.out
    assert [p.name for p in program.params] == ["n", "x", "y", "z"]


def test_loops_and_ifs_nest_their_bodies():
    with ProgramBuilder("nested", 4) as b:
        n = b.int_param("n")
        acc = b.register_tensor(dtypes.f32, spatial(4), 0.0)
        with b.for_range(0, n, 2) as k:
            with b.if_(k < 3):
                b.assign(acc, b.add(acc, 1.0))
    program = b.program()
    loop = program.body[-1]
    assert isinstance(loop, ForRange) and loop.step == 2 and loop.var.name == "k0"
    assert isinstance(loop.body[0], If)
    assert [type(i).__name__ for i in loop.body[0].body] == [
        "RegisterTensorInit",
        "Binary",
        "Assign",
    ]
    assert str(program).splitlines()[2:] == [
        "  for k0 in range(0, n, 2):",
        "    if k0 < 3:",
        "      r1: f32[] replicate(4) = register_tensor(1.0)",
        "      r2: f32[4] spatial(4) = add(r0, r1)",
        "      r0 = r2",
    ]


def test_python_numbers_become_replicated_rank_zero_constants():
    with ProgramBuilder("constant", 8) as b:
        x = b.register_tensor(dtypes.i8, spatial(8), 1)
        b.mul(3, x)
    constant = b.program().body[1]
    assert isinstance(constant, RegisterTensorInit)
    assert constant.init == 3 and constant.out.layout == replicate(8)
    assert constant.out.dtype == dtypes.i8


def test_the_result_layout_is_the_full_shape_operand():
    with ProgramBuilder("broadcast", 4) as b:
        column = b.register_tensor(dtypes.f16, spatial(4, 1), 0.0)
        tile = b.register_tensor(dtypes.f16, spatial(4, 1).local(1, 3), 0.0)
        assert b.add(column, tile).layout == tile.layout
        assert b.lt(column, tile).dtype == dtypes.u1


def test_reduce_takes_the_layout_algebra_reduction():
    with ProgramBuilder("reduce", 4) as b:
        x = b.register_tensor(dtypes.f32, spatial(2, 2).local(1, 3))
        assert b.reduce(x, -1, "sum").layout.shape == (2,)
        assert b.reduce(x, 0, "max", keepdim=True).layout.shape == (1, 6)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda b: b.add(
                b.register_tensor(dtypes.f16, spatial(4, 1)),
                b.register_tensor(dtypes.f16, spatial(1, 4)),
            ),
            "no operand has the broadcast shape",
        ),
        (
            lambda b: b.add(
                b.register_tensor(dtypes.f16, spatial(4)),
                b.register_tensor(dtypes.f16, spatial(2).local(3).replicate(2)),
            ),
            r"shapes \(4,\), \(6,\) do not broadcast",
        ),
        (lambda b: b.unary("cube", None), "unknown unary op 'cube'"),
        (lambda b: b.binary("pow", None, None), "unknown binary op 'pow'"),
        (lambda b: b.neg(3), "neg's operand must be a RegisterTensor"),
        (lambda b: b.reduce(b.register_tensor(dtypes.f16, spatial(4)), 1, "sum"), "reduce dim 1"),
        (
            lambda b: b.reduce(b.register_tensor(dtypes.f16, spatial(4)), 0, "mean"),
            "unknown reduction 'mean'",
        ),
        (lambda b: b.register_tensor(dtypes.f16, spatial(4), "zero"), "init must be an int"),
        (lambda b: b.register_tensor("f16", spatial(4)), "expected a DataType"),
        (lambda b: b.int_param("int"), "parameter name 'int' is reserved"),
        (lambda b: b.int_param("r3"), "parameter name 'r3' is reserved"),
        (lambda b: b.array_param("block_x", dtypes.u8), "'block_x' is reserved"),
        (lambda b: b.int_param("a b"), "not a C identifier"),
        (lambda b: (b.int_param("n"), b.int_param("n")), "'n' is already used"),
        (lambda b: b.array_param("x", "f16"), "is not a DataType"),
        (lambda b: b.global_view("x", dtypes.u8, None), "global_view needs an ArrayParam"),
        (lambda b: b.for_range(0, 4, 0).__enter__(), "step must be a positive int"),
        (lambda b: b.load_global(None, [0], spatial(4)), "load_global reads a GlobalTensor"),
        (lambda b: b.store_shared(None, None), "store_shared writes a SharedTensor"),
        (
            lambda b: b.load_global(
                b.global_view(b.array_param("x", dtypes.u8), dtypes.u8, GlobalLayout((4,), (1,))),
                "ab",
                spatial(4),
            ),
            "offsets must be a sequence",
        ),
        (
            lambda b: b.copy_async(None, None, [0]),
            "copy_async copies a GlobalTensor into a SharedTensor",
        ),
    ],
)
def test_builder_errors(build, message):
    with ProgramBuilder("bad", 4) as b:
        with pytest.raises(VerificationError, match=message):
            build(b)


def test_checked_builder_reports_verifier_errors_at_once():
    with ProgramBuilder("eager", 4) as b:
        x = b.register_tensor(dtypes.f16, spatial(4))
        with pytest.raises(VerificationError, match="dtype mismatch: lhs is f16, rhs is f32"):
            b.add(x, b.register_tensor(dtypes.f32, spatial(4)))


def test_program_inside_an_open_loop_is_an_error():
    with ProgramBuilder("open", 4) as b, b.for_range(3):
        with pytest.raises(VerificationError, match="inside an open for_range"):
            b.program()


@pytest.mark.parametrize(
    ("name", "threads", "message"),
    [("1x", 4, "not a C identifier"), ("ok", 0, r"\[1, 1024\]"), ("ok", 2.0, "must be an int")],
)
def test_program_builder_arguments(name, threads, message):
    with pytest.raises(VerificationError, match=message):
        ProgramBuilder(name, threads)


def test_int_param_bounds_reach_the_variable():
    with ProgramBuilder("bounds", 1) as b:
        n = b.int_param("n", 1, 64)
    assert (n.lo, n.hi) == (1, 64)


def test_int_param_divisor_is_kept_and_printed():
    with ProgramBuilder("divisors", 1) as b:
        b.int_param("m")
        b.int_param("k", multiple_of=8)
    program = b.program()
    assert [p.multiple_of for p in program.params] == [1, 8]
    assert str(program).splitlines()[0] == (
        "program divisors(m: int, k: int multiple_of=8) num_threads=1"
    )


@pytest.mark.parametrize("multiple_of", [0, -2, 2.0, True])
def test_int_param_divisor_must_be_a_positive_int(multiple_of):
    with (
        ProgramBuilder("divisors", 1) as b,
        pytest.raises(VerificationError, match=rf"multiple_of={multiple_of!r}; expected"),
    ):
        b.int_param("k", multiple_of=multiple_of)


def test_int_param_divisor_needs_a_multiple_within_the_bounds():
    with (
        ProgramBuilder("divisors", 1) as b,
        pytest.raises(VerificationError, match=r"no multiple of 8 lies within its bounds \[1, 7\]"),
    ):
        b.int_param("k", 1, 7, multiple_of=8)


def test_global_views_print_their_layout():
    with ProgramBuilder("views", 1) as b:
        w = b.array_param("w", dtypes.u4)
        b.global_view(w, dtypes.u8, GlobalLayout((4, 2), (2, 1)))
        b.load_global(b.global_view(w, dtypes.u4, GlobalLayout((8,), (1,))), [0], local(8))
    lines = str(b.program()).splitlines()
    assert lines[1] == "  g0 = global_view(w, u8, GlobalLayout(shape=(4, 2), strides=(2, 1)))"
    assert lines[3] == "  r0: u4[8] local(8) = load_global(g1, [0])"


SHORTHAND_NAMES = {"max": "maximum", "min": "minimum", "and": "and_", "or": "or_"}
"""Builder shorthands whose name is not the op's (a Python keyword or builtin)."""


def _emits_one_elementwise_instruction(name: str, dtype, arity: int) -> bool:
    with ProgramBuilder("probe", 1) as b:
        x = b.register_tensor(dtype, local(2), 1)
        try:
            getattr(b, name)(*[x] * arity)
        except (TypeError, ValueError):
            return False
    emitted = b.program().body[1:]
    return len(emitted) == 1 and isinstance(emitted[0], (Unary, Binary))


def _shorthands() -> set[str]:
    """The public builder methods that emit exactly one elementwise instruction from one or
    two register tensors (besides the general `unary` and `binary`)."""
    return {
        name
        for name in dir(ProgramBuilder)
        if not name.startswith("_")
        and name not in ("unary", "binary")
        and any(
            _emits_one_elementwise_instruction(name, dtype, arity)
            for dtype in (dtypes.i8, dtypes.f16)
            for arity in (1, 2)
        )
    }


def test_elementwise_shorthands_mirror_the_op_tables():
    """Every op of `UNARY_OPS` and `BINARY_OPS` has a builder shorthand emitting it, and every
    shorthand emits the op of its name."""
    expected = {SHORTHAND_NAMES.get(op, op) for op in (*UNARY_OPS, *BINARY_OPS)}
    assert _shorthands() == expected
    for op in (*UNARY_OPS, *BINARY_OPS):
        dtype = dtypes.f16 if "int" not in (UNARY_OPS | BINARY_OPS)[op].kinds else dtypes.i8
        with ProgramBuilder("shorthand", 1) as b:
            x = b.register_tensor(dtype, local(2), 1)
            method = getattr(b, SHORTHAND_NAMES.get(op, op))
            method(x) if op in UNARY_OPS else method(x, x)
        (instruction,) = b.program().body[1:]
        assert instruction.op == op

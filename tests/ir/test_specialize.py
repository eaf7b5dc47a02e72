"""`ir.specialize`: a program specialised for the values of its compile-time constant parameters.

Exact: the printed text of a specialised program (literals in views, offsets, loop bounds and
conditions; the loop variable bounded again), each refused constant with its message, and
`Instruction.replace_tensors`, which swaps the views.
Property and differential: on random programs of `ir.testing`, with every int parameter made a
constant, the specialised program reads none of them and computes, in the interpreter, exactly
what the original computes with those arguments.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings

from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.errors import InterpreterError, SpecializationError, VerificationError
from ir.instructions import ForRange, GlobalView, If, LoadGlobal, StoreGlobal
from ir.program import Program
from ir.specialize import check_constants, constant_params, specialize
from ir.testing import ProgramCase, program_cases
from ir.values import IntParam
from ir.verifier import verify
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial


def scale_program() -> Program:
    """x[block_x, 8t:8t+8] += 1 for t < n // 16, over a loop to n // 8; n a constant."""
    with ProgramBuilder("scale", 4) as b:
        n = b.int_param("n", 1, 4096, multiple_of=4, constant=True)
        m = b.int_param("m")
        x = b.array_param("x", dtypes.i32)
        view = b.global_view(x, dtypes.i32, GlobalLayout((m, n), (n, 1)))
        with b.for_range(0, n // 8) as t:
            tile = b.load_global(view, [b.block_x, t * 8], spatial(4).local(2))
            with b.if_(t < n // 16):
                b.store_global(view, b.add(tile, 1), [b.block_x, t * 8])
    return b.program()


SCALE_TEXT = """\
program scale(n: int multiple_of=4 constant, m: int, x: i32*) num_threads=4
  g0 = global_view(x, i32, GlobalLayout(shape=(m, n), strides=(n, 1)))
  for k0 in range(0, n // 8, 1):
    r0: i32[8] spatial(4).local(2) = load_global(g0, [block_x, k0 * 8])
    if k0 < n // 16:
      r1: i32[] replicate(4) = register_tensor(1)
      r2: i32[8] spatial(4).local(2) = add(r0, r1)
      store_global(g0, r2, [block_x, k0 * 8])"""

SCALE_64_TEXT = """\
program scale(n: int multiple_of=4 constant=64, m: int, x: i32*) num_threads=4
  g0 = global_view(x, i32, GlobalLayout(shape=(m, 64), strides=(64, 1)))
  for k0 in range(0, 8, 1):
    r0: i32[8] spatial(4).local(2) = load_global(g0, [block_x, k0 * 8])
    if k0 < 4:
      r1: i32[] replicate(4) = register_tensor(1)
      r2: i32[8] spatial(4).local(2) = add(r0, r1)
      store_global(g0, r2, [block_x, k0 * 8])"""


# ---------------------------------------------------------------------------------- exact


def test_specialize_prints_literals_where_the_program_read_the_constant() -> None:
    program = scale_program()
    assert str(program) == SCALE_TEXT
    assert str(specialize(program, {"n": 64})) == SCALE_64_TEXT


def test_specialize_keeps_the_parameter_in_its_place_with_its_value() -> None:
    program = scale_program()
    fixed = specialize(program, {"n": 64})
    assert [p.name for p in fixed.params] == ["n", "m", "x"]
    n = fixed.params[0]
    assert isinstance(n, IntParam) and (n.constant, n.value, n.multiple_of) == (True, 64, 4)
    assert fixed.params[1:] == program.params[1:]
    assert program.params[0].value is None
    assert constant_params(fixed) == (n,)


def test_specialize_bounds_the_loop_variable_again() -> None:
    fixed = specialize(scale_program(), {"n": 64})
    (loop,) = [i for i in fixed.walk() if isinstance(i, ForRange)]
    assert (loop.var.lo, loop.var.hi) == (0, 7)
    (branch,) = [i for i in fixed.walk() if isinstance(i, If)]
    assert {(v.lo, v.hi) for v in branch.cond.variables()} == {(0, 7)}
    original = next(i for i in scale_program().walk() if isinstance(i, ForRange))
    assert (original.var.lo, original.var.hi) == (0, 4096 // 8 - 1)


def test_specialized_loads_and_stores_use_the_specialized_view() -> None:
    fixed = verify(specialize(scale_program(), {"n": 64}))
    (view,) = [i.out for i in fixed.walk() if isinstance(i, GlobalView)]
    assert view.layout == GlobalLayout((view.layout.shape[0], 64), (64, 1))
    users = [i for i in fixed.walk() if isinstance(i, LoadGlobal | StoreGlobal)]
    assert [i.src if isinstance(i, LoadGlobal) else i.dst for i in users] == [view, view]


def _plain() -> Program:
    with ProgramBuilder("plain", 4) as b:
        b.int_param("n")
    return b.program()


def _fixed() -> Program:
    with ProgramBuilder("fixed", 4) as b:
        b.int_param("k", constant=True)
    return specialize(b.program(), {"k": 7})


@pytest.mark.parametrize(
    ("make", "constants"),
    [
        (_plain, {}),  # no constant parameter
        (_fixed, {}),  # specialised before: its value is recorded
        (_fixed, {"k": 7}),  # specialised before, given the same value again
    ],
)
def test_specialize_without_new_values_returns_the_program_itself(
    make: object, constants: dict
) -> None:
    program = make()  # type: ignore[operator]
    assert specialize(program, constants) is program


def _two_constants() -> Program:
    with ProgramBuilder("sizes", 4) as b:
        b.int_param("k", 1, 64, multiple_of=8, constant=True)
        b.int_param("j", constant=True)
        b.int_param("n")
        b.array_param("x", dtypes.f16)
    return b.program()


@pytest.mark.parametrize(
    ("constants", "match"),
    [
        (
            {"k": 8},
            r"sizes: the compile-time constant parameters j have no value; give one at "
            r"compile time, constants=\{'j': \.\.\.\}",
        ),
        ({}, r"constant parameters k, j have no value"),
        (
            {"k": 8, "j": 1, "kk": 3},
            r"sizes has no parameter 'kk' to give a constant value; its "
            r"compile-time constant parameters are: k, j",
        ),
        (
            {"k": 8, "j": 1, "n": 3},
            r"parameter 'n' of sizes is not a compile-time constant "
            r"\(declare it with int_param\('n', \.\.\., constant=True\)\)",
        ),
        ({"k": 8, "j": 1, "x": 3}, r"parameter 'x' of sizes is not a compile-time constant"),
        ({"k": 0, "j": 1}, r"constant k of sizes = 0 is outside the parameter's bounds \[1, 64\]"),
        ({"k": 72, "j": 1}, r"constant k of sizes = 72 is outside the parameter's bounds"),
        ({"k": 12, "j": 1}, r"constant k of sizes = 12 is not a multiple of 8"),
        ({"k": True, "j": 1}, r"constant k of sizes = True is a bool; expected an int"),
        ({"k": 8.0, "j": 1}, r"constant k of sizes = 8.0 \(float\) is not an int"),
        ({"k": 8, "j": -1}, r"constant j of sizes = -1 is outside the parameter's bounds"),
    ],
)
def test_constants_that_do_not_fit_are_refused(constants: dict, match: str) -> None:
    with pytest.raises(SpecializationError, match=match):
        specialize(_two_constants(), constants)


def test_constants_must_be_a_mapping() -> None:
    with pytest.raises(SpecializationError, match=r"constants must be a mapping .* got \[\('k'"):
        check_constants(_two_constants(), [("k", 8)])  # type: ignore[arg-type]


def test_numpy_integer_constants_are_ints() -> None:
    assert check_constants(_two_constants(), {"k": np.int64(16), "j": 3}) == {"k": 16, "j": 3}


def test_a_specialised_parameter_keeps_its_value() -> None:
    fixed = specialize(_two_constants(), {"k": 8, "j": 1})
    with pytest.raises(
        SpecializationError,
        match=r"constant k = 16: sizes was already specialised for k = 8",
    ):
        specialize(fixed, {"k": 16})


def test_a_value_that_empties_a_view_is_refused() -> None:
    with ProgramBuilder("edge", 4) as b:
        n = b.int_param("n", 1, constant=True)
        x = b.array_param("x", dtypes.u8)
        b.global_view(x, dtypes.u8, GlobalLayout((n - 1,), (1,)))
    with pytest.raises(
        SpecializationError,
        match=r"view g0 of x in edge: with n = 1 its layout .* is invalid: shape\[0\] must be >= 1",
    ):
        specialize(b.program(), {"n": 1})


def test_the_interpreter_refuses_another_value_for_a_specialised_constant() -> None:
    fixed = specialize(scale_program(), {"n": 64})
    x = np.zeros(64, dtype=np.int32)
    run_reference(fixed, 64, 1, x)
    assert x.tolist() == [1] * 32 + [0] * 32
    with pytest.raises(
        InterpreterError,
        match=r"argument n=32 differs from 64, the value of the compile-time constant",
    ):
        run_reference(fixed, 32, 1, x)


def test_the_builder_refuses_a_constant_flag_that_is_not_a_bool() -> None:
    builder = ProgramBuilder("p", 4)
    with pytest.raises(VerificationError, match=r"int parameter 'n': constant=1; expected True"):
        builder.int_param("n", constant=1)  # type: ignore[arg-type]


def test_the_verifier_refuses_a_value_on_a_parameter_not_declared_constant() -> None:
    with ProgramBuilder("p", 4) as b:
        b.int_param("n")
    program = b.program()
    broken = Program("p", 4, (dataclasses.replace(program.params[0], value=3),), ())
    with pytest.raises(
        VerificationError,
        match=r"int parameter n has the value 3 of a specialised constant but is not declared",
    ):
        verify(broken)


def test_replace_tensors_reaches_nested_bodies_and_keeps_the_rest() -> None:
    program = scale_program()
    view_instruction, loop = program.body
    old = view_instruction.out
    new = GlobalView(dataclasses.replace(old, layout=GlobalLayout((1, 64), (64, 1))), old.param)
    replacements = {old: new.out}
    assert view_instruction.replace_tensors(replacements).out is new.out
    replaced = loop.replace_tensors(replacements)
    load, branch = replaced.body
    assert load.src is new.out and load.out is loop.body[0].out
    assert branch.body[-1].dst is new.out
    assert loop.replace_tensors({}) is loop
    assert branch.body[0].replace_tensors(replacements) is branch.body[0]


# ------------------------------------------------------------------------------ properties


def _all_constant(case: ProgramCase) -> tuple[Program, dict[str, int]]:
    """The case's program with every int parameter declared constant, and their arguments."""
    params = tuple(
        dataclasses.replace(p, constant=True) if isinstance(p, IntParam) else p
        for p in case.program.params
    )
    program = dataclasses.replace(case.program, params=params)
    values = {
        p.name: int(argument)
        for p, argument in zip(params, case.arguments)
        if isinstance(p, IntParam)
    }
    return program, values


@settings(max_examples=25)
@given(program_cases())
def test_specialised_programs_read_no_constant(case: ProgramCase) -> None:
    program, values = _all_constant(case)
    fixed = verify(specialize(program, values))
    for instruction in fixed.walk():
        for scalar in instruction.scalars():
            assert not scalar.free_vars() & values.keys(), (instruction, scalar)
    assert all(p.value == values[p.name] for p in constant_params(fixed))


@settings(max_examples=25)
@given(program_cases())
def test_specialising_then_interpreting_equals_interpreting(case: ProgramCase) -> None:
    program, values = _all_constant(case)
    expected = case.fresh_arguments()
    run_reference(program, *expected, grid=case.grid)
    actual = case.fresh_arguments()
    run_reference(specialize(program, values), *actual, grid=case.grid)
    for got, want in zip(actual, expected):
        if isinstance(want, np.ndarray):
            np.testing.assert_array_equal(got, want)
    case.check(actual[case.output])


def test_generated_cases_declare_constants_in_a_fraction_of_programs() -> None:
    """`ProgramCase.constants` names exactly the parameters declared constant, with their
    arguments (tests/backend and tests/proofs compile the cases with them)."""
    seen: list[int] = []

    @settings(max_examples=40, database=None)
    @given(program_cases())
    def collect(case: ProgramCase) -> None:
        declared = {p.name for p in constant_params(case.program)}
        assert set(case.constants) == declared
        names = [p.name for p in case.program.params]
        for name, value in case.constants.items():
            assert case.arguments[names.index(name)] == value
        seen.append(len(declared))

    collect()
    assert 0 < sum(1 for count in seen if count) < len(seen)

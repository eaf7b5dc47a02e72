"""A program's declared launch grid: `ProgramBuilder.grid`, `Program.grid` and its launches.

Exact: the builder's and the verifier's refusals with their messages, the printed text, the
block index bounds a grid implies (`Program.block_indices`) and their substitution by
`ir.specialize`, and `ir.run_reference` with an omitted, matching or mismatched grid.
Property and differential: on random programs of `ir.testing`, declaring the grid a case is
launched on (as constants, or as an expression over an int parameter) changes nothing the
interpreter computes, with the grid given or omitted, before and after specialisation.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings

from ir import run_reference
from ir.builder import ProgramBuilder
from ir.errors import InterpreterError, VerificationError
from ir.program import BLOCK_INDEX_LIMIT, BLOCK_INDICES, Program
from ir.specialize import specialize
from ir.testing import ProgramCase, program_cases
from ir.testing.grid_programs import rows
from ir.values import IntParam
from ir.verifier import verify
from layout_algebra.symbolic import Expr, const, minimum, var


def rows_program(grid: bool = True, constant: bool = False) -> Program:
    """`ir.testing.grid_programs.rows` with m <= 64 and n a runtime parameter by default."""
    return rows(grid=grid, constant=constant, m_max=64)


ROWS_TEXT = """\
program rows(m: int, n: int multiple_of=32, x: i32*, y: i32*) num_threads=32
grid (n // 32, (m + 3) // 4, 1)
  g0 = global_view(x, i32, GlobalLayout(shape=(m, n), strides=(n, 1)))
  g1 = global_view(y, i32, GlobalLayout(shape=(m, n), strides=(n, 1)))
  r0: i32[4, 32] spatial(4,8).local(1,4) = load_global(g0, [block_y * 4, block_x * 32])
  r1: i32[] replicate(32) = register_tensor(1)
  r2: i32[4, 32] spatial(4,8).local(1,4) = add(r0, r1)
  store_global(g1, r2, [block_y * 4, block_x * 32])"""


def _arguments(m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(m * n, dtype=np.int32).reshape(m, n)
    return x, np.zeros_like(x)


def _block_variables(program: Program) -> set[tuple[str, int | None, int | None]]:
    """(name, lo, hi) of every block index variable the program's scalars read."""
    return {
        (variable.name, variable.lo, variable.hi)
        for instruction in program.walk()
        for scalar in instruction.scalars()
        for variable in scalar.variables()
        if variable.name.startswith("block_")
    }


# ---------------------------------------------------------------------------------- builder


def test_grid_is_stored_as_three_expressions() -> None:
    program = rows_program()
    m, n = program.param("m").var, program.param("n").var
    assert program.grid == (n // 32, (m + 3) // 4, const(1))
    assert rows_program(grid=False).grid is None


def _refused(declare: object, match: str) -> None:
    with ProgramBuilder("refused", 32) as b:
        n = b.int_param("n")
        with pytest.raises(VerificationError, match=match):
            declare(b, n)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("declare", "match"),
    [
        # a block index is not known before the launch
        (
            lambda b, n: b.grid(b.block_x + 1),
            r"grid extent x = block_x \+ 1 .* reads \['block_x'\]",
        ),
        # a constant must be a positive block count
        (lambda b, n: b.grid(8, 0), r"grid extent y = 0 of refused is not a block count"),
        (lambda b, n: b.grid(-2), r"grid extent x = -2 of refused is not a block count"),
        # y and z are below 2^16 on the hardware
        (lambda b, n: b.grid(1, 1, 65536), r"grid extent z = 65536 .* 1 <= z <= 65535"),
        # an expression whose upper bound is 0 never launches
        (lambda b, n: b.grid(minimum(n, 0)), r"grid extent x = minimum\(n, 0\) .* at most 0"),
        # only ints and expressions
        (lambda b, n: b.grid(2.0), r"grid extent x = 2\.0 is not an int or an Expr"),
        (lambda b, n: b.grid(4, True), r"grid extent y = True is not an int or an Expr"),
        # a variable that is no int parameter (declared so far)
        (lambda b, n: b.grid(var("k", 1, 8)), r"grid extent x = k .* reads \['k'\]"),
    ],
)
def test_builder_refuses_bad_extents(declare: object, match: str) -> None:
    _refused(declare, match)


def test_builder_refuses_a_loop_variable() -> None:
    with ProgramBuilder("looped", 32) as b:
        n = b.int_param("n")
        with b.for_range(0, n) as k, pytest.raises(VerificationError, match=r"reads \['k0'\]"):
            b.grid(k + 1)


def test_builder_refuses_a_second_grid() -> None:
    with ProgramBuilder("twice", 32) as b:
        n = b.int_param("n")
        b.grid(n // 4)
        with pytest.raises(
            VerificationError,
            match=r"grid declared twice: twice already declares the grid "
            r"\(n // 4, 1, 1\)",
        ):
            b.grid(8)


# ---------------------------------------------------------------------------------- printer


def test_printer_shows_the_grid_after_the_header() -> None:
    assert str(rows_program()) == ROWS_TEXT
    assert "grid" not in str(rows_program(grid=False))


# --------------------------------------------------------------------------------- verifier


@pytest.mark.parametrize(
    ("grid", "match"),
    [
        ((BLOCK_INDICES[0], const(1), const(1)), r"grid extent x = block_x of rows reads"),
        ((const(1), var("q"), const(1)), r"grid extent y = q of rows reads \['q'\]"),
        ((const(1), const(1), const(0)), r"grid extent z = 0 of rows is not a block count"),
        ((const(1), const(1)), r"the grid of rows has 2 extents"),
        ((const(1), 1, const(1)), r"grid extent y of rows is 1; expected an Expr"),
        ([const(1)] * 3, r"the grid of rows is \[1, 1, 1\]; expected a tuple"),
    ],
)
def test_verifier_refuses_a_bad_grid(grid: object, match: str) -> None:
    program = dataclasses.replace(rows_program(grid=False), grid=grid)
    with pytest.raises(VerificationError, match=match):
        verify(program)


def test_verifier_accepts_the_declared_grid() -> None:
    program = rows_program()
    assert verify(program) is program


# ---------------------------------------------------------------------------- block indices

_N = var("n", 32, 4096)


@pytest.mark.parametrize(
    ("grid", "expected"),
    [
        # no grid: the launch limit
        (None, [BLOCK_INDEX_LIMIT - 1] * 3),
        # constants: the extent minus one
        ((const(96), const(1), const(8)), [95, 0, 7]),
        # n // 32 <= 128
        ((_N // 32, const(2), const(1)), [127, 1, 0]),
        # no finite upper bound: unchanged
        ((var("m", 1), const(1), const(1)), [BLOCK_INDEX_LIMIT - 1, 0, 0]),
    ],
)
def test_block_indices_are_bounded_by_the_extents(
    grid: tuple[Expr, Expr, Expr] | None, expected: list[int]
) -> None:
    program = dataclasses.replace(rows_program(grid=False), grid=grid)
    indices = program.block_indices
    assert [index.name for index in indices] == ["block_x", "block_y", "block_z"]
    assert [(index.lo, index.hi) for index in indices] == [(0, hi) for hi in expected]


def test_specialize_bounds_the_block_indices_without_constants() -> None:
    program = rows_program()
    bounded = specialize(program, {})
    assert _block_variables(program) == {
        ("block_x", 0, BLOCK_INDEX_LIMIT - 1),
        ("block_y", 0, BLOCK_INDEX_LIMIT - 1),
    }
    # n <= 4096: block_x <= 127; m <= 64: block_y <= 67 // 4 - 1 = 15
    assert _block_variables(bounded) == {("block_x", 0, 127), ("block_y", 0, 15)}
    assert bounded.grid == program.grid
    assert specialize(bounded, {}) is bounded


def test_specialize_without_a_grid_returns_the_program_itself() -> None:
    program = rows_program(grid=False)
    assert specialize(program, {}) is program


def test_specialize_substitutes_constants_into_the_grid() -> None:
    fixed = specialize(rows_program(constant=True), {"n": 256})
    m = fixed.param("m").var
    assert fixed.grid == (const(8), (m + 3) // 4, const(1))
    assert _block_variables(fixed) == {("block_x", 0, 7), ("block_y", 0, 15)}
    assert str(fixed).splitlines()[1] == "grid (8, (m + 3) // 4, 1)"


# --------------------------------------------------------------------------------- launches


def test_run_reference_computes_an_omitted_grid() -> None:
    x, y = _arguments(10, 64)
    run_reference(rows_program(), 10, 64, x, y)
    np.testing.assert_array_equal(y, x + 1)  # (2, 3, 1) blocks cover every element


@pytest.mark.parametrize("grid", [(2, 3, 1), (2, 3), [2, 3]])
def test_run_reference_accepts_the_declared_grid(grid: object) -> None:
    x, y = _arguments(10, 64)
    run_reference(rows_program(), m=10, n=64, x=x, y=y, grid=grid)
    np.testing.assert_array_equal(y, x + 1)


@pytest.mark.parametrize(
    ("grid", "match"),
    [
        (
            (2, 2),
            r"rows: grid \(2, 2, 1\) differs from the grid it declares, \(n // 32, \(m \+ 3\) "
            r"// 4, 1\) = \(2, 3, 1\) with m=10, n=64",
        ),
        (4, r"rows: grid \(4, 1, 1\) differs from the grid it declares"),
        ((2, 3, 1, 1), r"grid \(2, 3, 1, 1\) has 4 dimensions"),
    ],
)
def test_run_reference_refuses_another_grid(grid: object, match: str) -> None:
    x, y = _arguments(10, 64)
    with pytest.raises(InterpreterError, match=match):
        run_reference(rows_program(), 10, 64, x, y, grid=grid)
    assert not y.any()


def test_run_reference_refuses_a_declared_extent_below_one() -> None:
    x, y = _arguments(0, 64)
    with pytest.raises(
        InterpreterError,
        match=r"rows declares the grid \(n // 32, \(m \+ 3\) // 4, 1\), which is \(2, 0, 1\) "
        r"with m=0, n=64: dimension 1 is 0, expected 1 <= extent <= 65535",
    ):
        run_reference(rows_program(), 0, 64, x, y)


def test_run_reference_without_a_declared_grid_defaults_to_one_block() -> None:
    x, y = _arguments(4, 32)
    run_reference(rows_program(grid=False), 4, 32, x, y)
    np.testing.assert_array_equal(y, x + 1)


# ------------------------------------------------------------------------------- properties


def _declared(case: ProgramCase, symbolic: bool) -> Program:
    """The case's program declaring the grid it is launched on: constants, or (`symbolic`) x
    written ``(min(p, a) - a) * c + x`` over its first int parameter p, whose argument is a,
    with c the cluster's extent along x (1 without clusters), so that the declared extent is
    still known to be a multiple of the cluster's."""
    x, y, z = (const(extent) for extent in (*case.grid, 1, 1)[:3])
    ints = [
        (param, int(argument))
        for param, argument in zip(case.program.params, case.arguments)
        if isinstance(param, IntParam)
    ]
    if symbolic and ints:
        param, argument = ints[0]
        cluster_x = case.program.cluster[0] if case.program.cluster else 1
        x = (minimum(param.var, argument) - argument) * cluster_x + x
    return dataclasses.replace(case.program, grid=(x, y, z))


@settings(max_examples=25)
@given(program_cases())
def test_declaring_the_launch_grid_changes_no_result(case: ProgramCase) -> None:
    expected = case.fresh_arguments()
    run_reference(case.program, *expected, grid=case.grid)
    for symbolic in (False, True):
        declared = _declared(case, symbolic)
        specialised = specialize(declared, case.constants)
        runs = [(declared, case.grid), (declared, None), (specialised, None)]
        for program, grid in runs:
            actual = case.fresh_arguments()
            run_reference(program, *actual, grid=grid)
            for got, want in zip(actual, expected):
                if isinstance(want, np.ndarray):
                    np.testing.assert_array_equal(got, want)

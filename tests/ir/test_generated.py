"""Random valid programs (`ir.testing`) run by the interpreter against their NumPy outputs."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis.errors import NoSuchExample

from ir import dtypes
from ir.instructions import all_instruction_types
from ir.interpreter import run_reference
from ir.program import Program
from ir.testing import (
    ProgramCase,
    dot_cases,
    elementwise_cases,
    loop_cases,
    program_cases,
    reduction_cases,
    shared_round_trip_cases,
    view_cases,
)
from ir.verifier import verify

COVERAGE_EXAMPLES = 1000
"""How many programs `program_cases()` may take to use every instruction: about 270 in a
process that has not imported `backend`, about 450 in one that has, as the whole suite has
(the derandomized draws differ between the two; the last instructions found are the copies
and a ring stage's release, `CopyBulkRelease`)."""


def run_case(case):
    arguments = case.fresh_arguments()
    run_reference(case.program, *arguments, grid=case.grid)
    return arguments[case.output]


@given(program_cases())
def test_generated_programs_compute_their_numpy_outputs(case):
    case.check(run_case(case))


@settings(max_examples=30)
@given(elementwise_cases())
def test_generated_programs_verify_and_print_one_line_per_instruction(case):
    program = verify(case.program)
    assert isinstance(program, Program)
    header = 1 + (program.grid is not None) + (program.min_blocks_per_sm is not None)
    header += program.programmatic_launch  # its own header line
    assert len(str(program).splitlines()) == header + sum(1 for _ in program.walk())


@settings(max_examples=10)
@given(elementwise_cases())
def test_a_corrupted_elementwise_output_fails_the_check(case):
    output = run_case(case)
    output.view(np.uint8)[0] ^= 1
    with pytest.raises(AssertionError, match="output codes differ"):
        case.check(output)


@settings(max_examples=10)
@given(shared_round_trip_cases())
def test_a_corrupted_shared_round_trip_fails_the_check(case):
    output = run_case(case)
    output.view(np.uint8)[0] ^= 1
    with pytest.raises(AssertionError, match="differ"):
        case.check(output)


@settings(max_examples=20)
@given(reduction_cases())
def test_a_far_off_reduction_fails_the_check(case):
    dtype = case.output_dtype
    values = dtype.decode(case.output_codes(run_case(case)))
    extremes = dtype.encode(np.array([dtype.min, dtype.max]))
    wrong = np.where(values > 0, extremes[0], extremes[1])  # far from every expected value
    with pytest.raises(AssertionError, match="output"):
        case.check(dtypes.pack(wrong, dtype))


def test_generated_programs_use_every_instruction():
    wanted = set(all_instruction_types())
    seen: set[type] = set()

    def uses_every_instruction(case: ProgramCase) -> bool:
        seen.update(type(instruction) for instruction in case.program.walk())
        return wanted <= seen

    with contextlib.suppress(NoSuchExample):
        find(
            program_cases(),
            uses_every_instruction,
            settings=settings(
                max_examples=COVERAGE_EXAMPLES,
                database=None,
                derandomize=True,
                deadline=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            ),
        )
    assert seen <= wanted, f"programs use instructions outside the IR: {seen - wanted}"
    missing = sorted(cls.__name__ for cls in wanted - seen)
    assert not missing, (
        f"{COVERAGE_EXAMPLES} programs of ir.testing.program_cases() never use "
        f"{', '.join(missing)}: add them to a strategy of the ir.testing package"
    )


@settings(max_examples=40)
@given(view_cases())
def test_generated_views_compute_their_numpy_outputs(case):
    case.check(run_case(case))


@settings(max_examples=40)
@given(dot_cases())
def test_generated_dots_compute_their_numpy_outputs(case):
    case.check(run_case(case))


@settings(max_examples=40)
@given(loop_cases())
def test_generated_loops_compute_their_numpy_outputs(case):
    case.check(run_case(case))


@settings(max_examples=10)
@given(view_cases())
def test_a_corrupted_view_output_fails_the_check(case):
    output = run_case(case)
    output.view(np.uint8)[0] ^= 1
    with pytest.raises(AssertionError, match="output codes differ"):
        case.check(output)


@settings(max_examples=10)
@given(loop_cases())
def test_a_corrupted_loop_output_fails_the_check(case):
    output = run_case(case)
    output.view(np.uint8)[0] ^= 1
    with pytest.raises(AssertionError, match="output codes differ"):
        case.check(output)


@settings(max_examples=10)
@given(dot_cases())
def test_a_nan_in_a_dot_output_fails_the_check(case):
    output = run_case(case)
    codes = case.output_codes(output)
    codes[0] = dtypes.f32.encode(np.array([np.nan]))[0]  # every expected dot value is finite
    with pytest.raises(AssertionError, match="output"):
        case.check(dtypes.pack(codes, dtypes.f32))

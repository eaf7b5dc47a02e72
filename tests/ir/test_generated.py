"""Random valid programs (`ir.testing`) run by the interpreter against their NumPy outputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from ir import dtypes
from ir.interpreter import run_reference
from ir.program import Program
from ir.testing import (
    elementwise_cases,
    program_cases,
    reduction_cases,
    shared_round_trip_cases,
)
from ir.verifier import verify


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
    assert len(str(program).splitlines()) == 1 + sum(1 for _ in program.walk())


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

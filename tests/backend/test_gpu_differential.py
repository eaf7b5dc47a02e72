"""Generated kernels on the GPU against the reference interpreter (marked `gpu`).

Every example (at sizes that span several blocks and cut tiles at the edges), every feature
program of test_lower_emulated.py, `RANDOM_PROGRAMS` (1,000) random programs of `ir.testing`
(lowered in worker processes and compiled by NVRTC in threads, all before the first runs) and
every data type conversion run through `backend.compile` for the current GPU and must give
bit-identical results to `ir.run_reference` / `ir.dtypes.convert` (within a tolerance for
`exp` and the other inexact operations, and for dots on tensor cores, whose sums are rounded in
the tensor core's own order; a random program whose dot runs on tensor cores is checked against its
`ProgramCase` expectation within the case's tolerance). A NaN that the interpreter computes (by
a cast or arithmetic: its quiet NaN) matches any NaN of the same sign; a NaN code that was only
moved must arrive bit for bit (`ir.testing.codes_match`).

Skipped without a CUDA device, failed with REQUIRE_GPU=1 (tests/conftest.py). Needs torch.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from backend import compile
from backend.compile import CompiledKernel, compile_lowered, lower_all
from backend.device import current_arch
from backend.errors import LaunchError
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.program import Program
from ir.testing import ProgramCase, program_cases
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial

pytestmark = pytest.mark.gpu

_spec = importlib.util.spec_from_file_location(
    "gpu_examples_main", Path(__file__).with_name("gpu_examples_main.py")
)
runner = importlib.util.module_from_spec(_spec)
sys.modules["gpu_examples_main"] = runner
_spec.loader.exec_module(runner)
emulated = runner.load_sibling("lower_emulated", "test_lower_emulated.py")
conversions = runner.load_sibling("conversions_inputs", "test_conversions.py")

EXAMPLES = runner.example_cases(emulated)
RANDOM_PROGRAMS = 1000
RANDOM_GROUPS = 8
COMPILE_THREADS = 8
"""NVRTC compilations at once (it releases the GIL)."""


@pytest.fixture(scope="module", autouse=True)
def _torch() -> Any:
    """torch, which moves the arrays to the GPU; a missing torch fails under REQUIRE_GPU=1."""
    try:
        import torch
    except ImportError:
        if os.environ.get("REQUIRE_GPU") == "1":
            pytest.fail("REQUIRE_GPU=1 but torch is not installed")
        pytest.skip("torch is not installed")
    return torch


def _check(program: Program, arguments: list[Any], grid: tuple[int, ...], exact: bool) -> None:
    kernel = compile(program)
    actual = runner.run_on_gpu(kernel, arguments, grid)
    expected = runner.run_reference_copy(program, arguments, grid)
    if runner.uses_tensor_cores(kernel):
        problems = runner.compare(program, actual, expected, False, runner.MMA_ATOL)
    else:
        problems = runner.compare(program, actual, expected, exact)
    assert not problems, problems


@pytest.mark.parametrize("index", range(len(EXAMPLES)), ids=[case[0] for case in EXAMPLES])
def test_example_matches_reference_on_gpu(index: int) -> None:
    _, program, arguments, grid, exact = EXAMPLES[index]
    _check(program, arguments, grid, exact)


@pytest.mark.parametrize(
    "index", range(len(emulated.FEATURES)), ids=[case.name for case in emulated.FEATURES]
)
def test_feature_program_matches_reference_on_gpu(index: int) -> None:
    case = emulated.FEATURES[index]
    _check(case.program, list(case.arguments), case.grid, case.exact)


@pytest.fixture(scope="module")
def random_cases() -> list[ProgramCase]:
    """RANDOM_PROGRAMS random programs, drawn once and deterministically."""
    drawn: list[ProgramCase] = []

    @settings(
        max_examples=RANDOM_PROGRAMS,
        database=None,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(program_cases())
    def collect(case: ProgramCase) -> None:
        drawn.append(case)

    collect()
    return drawn


@pytest.fixture(scope="module")
def random_kernels(random_cases: list[ProgramCase]) -> list[CompiledKernel]:
    """Every random program compiled for the current GPU: lowered in worker processes, then
    compiled by NVRTC in `COMPILE_THREADS` threads."""
    arch = current_arch()
    lowered = lower_all([(case.program, case.constants) for case in random_cases], arch)

    def build(index: int) -> CompiledKernel:
        result = lowered[index]
        if isinstance(result, Exception):
            raise result
        return compile_lowered(random_cases[index].program, result, arch)

    with ThreadPoolExecutor(COMPILE_THREADS) as pool:
        return list(pool.map(build, range(len(random_cases))))


def test_the_random_programs_are_a_thousand(random_cases: list[ProgramCase]) -> None:
    assert len(random_cases) >= RANDOM_PROGRAMS


@pytest.mark.parametrize("group", range(RANDOM_GROUPS))
def test_random_programs_match_reference_on_gpu(
    random_cases: list[ProgramCase], random_kernels: list[CompiledKernel], group: int
) -> None:
    failures = []
    indices = range(group, len(random_cases), RANDOM_GROUPS)
    cases = [random_cases[index] for index in indices]
    for case, kernel in zip(cases, (random_kernels[index] for index in indices)):
        arguments = case.fresh_arguments()
        actual = runner.run_on_gpu(kernel, arguments, case.grid)
        if runner.uses_tensor_cores(kernel):
            # The tensor core rounds each k step in its own order: check the case's NumPy
            # expectation within its tolerance rather than the interpreter bit for bit.
            try:
                case.check(actual[case.output])
            except AssertionError as error:
                failures.append(str(error))
            continue
        expected = runner.run_reference_copy(case.program, case.fresh_arguments(), case.grid)
        got = case.output_codes(actual[case.output])
        want = case.output_codes(expected[case.output])
        compare = emulated.same_codes if case.exact_on_gpu else emulated.close_codes
        bad = np.flatnonzero(~compare(case.output_dtype, got, want))
        if bad.size:
            failures.append(
                f"{case.description}: {bad.size} codes differ, first at {bad[0]}: "
                f"{got[bad[0]]} != {want[bad[0]]}"
            )
    assert len(cases) >= RANDOM_PROGRAMS // RANDOM_GROUPS - 1
    assert not failures, failures[:5]


@pytest.mark.parametrize(
    "index", range(len(emulated.FEATURES)), ids=[case.name for case in emulated.FEATURES]
)
def test_register_arrays_stay_in_registers(index: int) -> None:
    kernel = compile(emulated.FEATURES[index].program)
    assert kernel.resources.local_bytes == 0


# ------------------------------------------------------------------------------ conversions

CAST_SOURCES = (
    dtypes.f32,
    dtypes.f16,
    dtypes.bf16,
    dtypes.i32,
    dtypes.f8e4m3,
    dtypes.f8e5m2,
    dtypes.f6e3m2,
    dtypes.f4e2m1,
    dtypes.u8,
    dtypes.i4,
)
BLOCK = 1024


def _cast_program(src: DataType) -> Program:
    """Load `count` codes of `src` and store their conversion to every other type."""
    with ProgramBuilder(f"cast_from_{src.name}", 256) as b:
        count = b.int_param("count")
        x = b.array_param("x", src)
        layout = spatial(256).local(BLOCK // 256)
        origin = [b.block_x * BLOCK]
        values = b.load_global(b.global_view(x, src, GlobalLayout((count,), (1,))), origin, layout)
        for dst in dtypes.all_dtypes():
            if dst != src:
                y = b.array_param(f"y_{dst.name}", dst)
                view = b.global_view(y, dst, GlobalLayout((count,), (1,)))
                b.store_global(view, b.cast(values, dst), origin)
    return b.program()


def _source_codes(src: DataType) -> np.ndarray:
    if src == dtypes.f32:
        return conversions.FLOAT32_INPUTS
    if src == dtypes.i32:
        return conversions.INT32_INPUTS
    return np.arange(1 << src.nbits, dtype=np.uint32)


@pytest.mark.parametrize("src", CAST_SOURCES, ids=[t.name for t in CAST_SOURCES])
def test_every_conversion_matches_dtypes_on_gpu(src: DataType) -> None:
    program = _cast_program(src)
    codes = _source_codes(src)
    targets = [t for t in dtypes.all_dtypes() if t != src]
    arguments: list[Any] = [int(codes.size), dtypes.pack(codes, src)]
    arguments += [np.zeros(dtypes.packed_nbytes(codes.size, t), dtype=np.uint8) for t in targets]
    kernel = compile(program)
    results = runner.run_on_gpu(kernel, arguments, (-(-codes.size // BLOCK),))
    failures = []
    for dst, buffer in zip(targets, results[2:]):
        got = dtypes.unpack(buffer, dst, codes.size)
        want = dtypes.convert(codes, src, dst)
        bad = np.flatnonzero(got != want)
        if bad.size:
            k = bad[0]
            failures.append(
                f"{src} -> {dst}: {bad.size} codes differ, first {int(codes[k]):#x} -> "
                f"{int(got[k]):#x} (expected {int(want[k]):#x})"
            )
    assert not failures, failures[:5]


# ---------------------------------------------------------------------------- launch checks


def test_array_too_small_for_its_view_is_refused() -> None:
    _, program, arguments, grid, _ = EXAMPLES[0]
    kernel = compile(program)
    too_many = arguments[0] + 1
    tensors = [runner.to_device(a, 16) for a in arguments[1:]]
    with pytest.raises(LaunchError, match="argument 'x' holds .* bytes; expected at least"):
        kernel(too_many * 64, *tensors, grid=grid)

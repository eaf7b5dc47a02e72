"""A declared launch grid in the backend: what the lowering gains, and what a launch checks.

Exact: with ``b.grid(n // 128)`` and n a compile-time constant, the vector load's bounds check
and its element-by-element fallback disappear from the source (compared with the same program
without the grid); the block indices are bounded by the grid in the source (32-bit arithmetic
where they were 64-bit); the facts ``block_y < (m + 3) // 4`` of extents that are not
constants are assumptions of every access; the kernel carries the specialised grid. Launches,
against the fake device of test_launch.py: an omitted grid is computed from the int arguments,
a mismatched grid or an extent below 1 is refused before anything is launched, and a kernel
without a declared grid still needs one. Differential: the kernels of grid-declaring programs,
run under the CPU emulation of test_lower_emulated.py, equal `ir.run_reference`.
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from backend.compile import CompiledKernel
from backend.errors import LaunchError
from backend.kernel import Kernel, KernelIntParam
from backend.lower import LoweredKernel, lower
from ir import dtypes, run_reference
from ir.arguments import launch_grid
from ir.program import Program
from ir.testing.grid_programs import doubled
from ir.testing.grid_programs import rows as grid_rows
from layout_algebra.symbolic import const, var


def _load(name: str, file: str) -> object:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(file))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


launch_fakes = _load("launch_fakes", "test_launch.py")


def rows() -> Program:
    """`ir.testing.grid_programs.rows` with n constant and grid z = 2: blocks with block_z = 1
    store the same values again."""
    return grid_rows(depth=2)


def _body(source: str, entry: str) -> str:
    """The kernel function's text after its signature, without comments."""
    body = source[source.index(f" {entry}(") :].split("\n", 1)[1]
    return re.sub(r"//[^\n]*", "", body)


# ---------------------------------------------------------------------------------- exact


def test_a_declared_grid_removes_the_bounds_check() -> None:
    without = _body(lower(doubled(grid=False), constants={"n": 1024}).source, "doubled")
    assert "if (la_w_block_x * 128 + la_thread * 4 + 3 < 1024) {" in without
    assert "? (la_u32)" in without  # the element-by-element fallback
    lowered = lower(doubled(grid=True), constants={"n": 1024})
    body = _body(lowered.source, "doubled")
    assert "if (" not in body and "?" not in body
    assert "*(const uint4*)(g0 + (block_x * 512 + la_thread * 16));" in body
    assert [repr(access.mask) for access in lowered.accesses] == ["1", "1"]


def test_the_grid_bounds_the_block_index_in_the_source() -> None:
    """n <= 2^20: block_x <= 8191, so its addresses fit a C int even with n unknown."""
    without = _body(lower(doubled(grid=False, constant=False)).source, "doubled")
    assert "if (la_w_block_x * 128 + la_thread * 4 + 3 < n) {" in without
    body = _body(lower(doubled(grid=True, constant=False)).source, "doubled")
    assert "if (block_x * 128 + la_thread * 4 + 3 < n) {" in body
    assert "la_w_block_x *" not in body


def test_extents_that_are_not_constants_are_facts_of_every_access() -> None:
    lowered = lower(rows(), constants={"n": 256})
    m = var("m", 0, 2**16)
    block_y = var("block_y", 0, (2**16 + 3) // 4 - 1)
    assert lowered.grid == (const(8), (m + 3) // 4, const(2))
    assert lowered.accesses
    for access in lowered.accesses:
        grid_facts = [f for f in access.assumptions if f.free_vars() & {"block_x", "block_y"}]
        assert grid_facts == [block_y < (m + 3) // 4]


def test_a_program_without_a_grid_lowers_without_one() -> None:
    lowered = lower(doubled(grid=False), constants={"n": 1024})
    assert lowered.grid is None
    assert all(
        not (fact.free_vars() & {"block_x", "block_y", "block_z"})
        for access in lowered.accesses
        for fact in access.assumptions
    )


# --------------------------------------------------------------------------------- launches


def _compiled(program: Program, constants: dict[str, int], parameter_types: tuple) -> tuple:
    """The program's `CompiledKernel` on a fake device (no NVRTC, no GPU), and the device."""
    lowered = lower(program, constants=constants)
    device = launch_fakes.FakeDevice(parameter_types=parameter_types)
    kernel = Kernel(
        source=lowered.source,
        cubin=b"\x7fELF fake image",
        arch="sm_90a",
        entry=lowered.entry,
        params=lowered.params,
        block_threads=lowered.block_threads,
        grid=lowered.grid,
        device=device,
    )
    return CompiledKernel(program, lowered, kernel), device


ROWS_TYPES = (ctypes.c_int32, ctypes.c_int32, ctypes.c_uint64, ctypes.c_uint64)


def _rows_kernel() -> tuple:
    kernel, device = _compiled(rows(), {"n": 256}, ROWS_TYPES)
    x, y = (launch_fakes.device_array(device, (10, 256), "<i4") for _ in range(2))
    return kernel, device, x, y


def test_an_omitted_grid_is_computed_from_the_arguments() -> None:
    kernel, device, x, y = _rows_kernel()
    kernel(10, 256, x, y)
    kernel(x=x, y=y, n=256, m=10, grid=(8, 3, 2))
    kernel.kernel(10, 256, x, y)
    assert [launch.grid for launch in device.launches] == [(8, 3, 2)] * 3


@pytest.mark.parametrize(
    ("grid", "match"),
    [
        (
            (8, 3),
            r"kernel 'rows': grid \(8, 3, 1\) differs from the grid it declares, \(8, \(m \+ 3\) "
            r"// 4, 2\) = \(8, 3, 2\) with m=10, n=256",
        ),
        (16, r"grid \(16, 1, 1\) differs from the grid it declares"),
        ((8, 3, 2, 1), r"grid \(8, 3, 2, 1\) has 4 dimensions"),
    ],
)
def test_another_grid_is_refused_before_launch(grid: object, match: str) -> None:
    kernel, device, x, y = _rows_kernel()
    with pytest.raises(LaunchError, match=match):
        kernel(10, 256, x, y, grid=grid)
    assert device.launches == [] and device.loads == []


def test_a_declared_extent_below_one_is_refused_before_launch() -> None:
    kernel, device, x, y = _rows_kernel()
    with pytest.raises(
        LaunchError,
        match=r"kernel 'rows' declares the grid \(8, \(m \+ 3\) // 4, 2\), which is \(8, 0, 2\) "
        r"with m=0, n=256: dimension 1 is 0",
    ):
        kernel(0, 256, x, y)
    assert device.launches == []


def test_a_kernel_without_a_declared_grid_needs_one() -> None:
    kernel, device = _compiled(
        doubled(grid=False), {"n": 256}, (ctypes.c_int32, ctypes.c_uint64, ctypes.c_uint64)
    )
    x, y = (launch_fakes.device_array(device, (256,), "<f4") for _ in range(2))
    with pytest.raises(
        LaunchError, match=r"kernel 'doubled' declares no grid; give the grid to launch on"
    ):
        kernel(256, x, y)
    kernel(256, x, y, grid=2)
    assert [launch.grid for launch in device.launches] == [(2, 1, 1)]


def _raw_kernel(grid: tuple) -> Kernel:
    """A kernel built without a program (as from raw CUDA source), with the declared `grid`."""
    return Kernel(
        source="",
        cubin=b"",
        arch="sm_90a",
        entry="f",
        params=(KernelIntParam("n"),),
        block_threads=32,
        grid=grid,
        device=launch_fakes.FakeDevice(),
    )


def test_a_kernel_grid_is_three_ints_or_expressions_over_int_parameters() -> None:
    assert _raw_kernel((var("n") // 4, 2, 1)).grid == (var("n") // 4, const(2), const(1))
    with pytest.raises(LaunchError, match=r"grid \(k // 4, 1, 1\) reads k, which are not int"):
        _raw_kernel((var("k") // 4, 1, 1))
    with pytest.raises(LaunchError, match=r"grid \(4, 1\) is not three ints or Exprs"):
        _raw_kernel((4, 1))


# ---------------------------------------------------------------------------- differential

emulated = _load("lower_emulated", "test_lower_emulated.py")

CASES = [
    # (program, constants to lower with, int arguments)
    (doubled(grid=True), {"n": 512}, {"n": 512}),
    (doubled(grid=True, constant=False), {}, {"n": 384}),
    (rows(), {"n": 64}, {"m": 10, "n": 64}),
]


def _arguments(program: Program, ints: dict[str, int]) -> list[object]:
    rng = np.random.default_rng(7)
    count = ints.get("m", 1) * ints["n"]
    arguments: list[object] = []
    for param in program.params:
        if param.name in ints:
            arguments.append(ints[param.name])
        elif param.dtype == dtypes.f32:
            arguments.append(rng.standard_normal(count).astype(np.float32))
        else:
            arguments.append(rng.integers(-100, 100, count, dtype=np.int32))
    return arguments


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory, cxx_compiler: str) -> object:
    kernels: list[LoweredKernel] = [lower(p, constants=c) for p, c, _ in CASES]
    return emulated._emulator(kernels, tmp_path_factory, cxx_compiler)


@pytest.mark.parametrize("index", range(len(CASES)), ids=["constant n", "n", "rows"])
def test_grid_kernels_match_the_reference(emulator: object, index: int) -> None:
    program, _, ints = CASES[index]
    expected = _arguments(program, ints)
    run_reference(program, *expected)
    actual = _arguments(program, ints)
    emulator.run(index, actual, launch_grid(program.name, None, program.grid, ints, ValueError))
    for got, want in zip(actual, expected):
        if isinstance(want, np.ndarray):
            np.testing.assert_array_equal(got, want)

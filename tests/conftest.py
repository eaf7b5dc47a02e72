"""Suite-wide pytest configuration: the `gpu` marker, the host compilers, the hypothesis profile
and the number of workers ``pytest -n auto`` starts.

Tests marked `gpu` skip when the CUDA driver reports no device, unless the environment variable
REQUIRE_GPU=1 is set, in which case a missing device fails them.

Tests that compile host code (the CPU emulation of generated kernels, the conversion functions,
the C text of symbolic expressions) take the fixture `c_compiler` (gcc, else cc) or
`cxx_compiler` (g++): the compiler's path; `run_c` compiles a C program with the first and
returns the integers it prints, and `run_c_expressions` so evaluates C expressions, a function
each. Without one they skip, unless the environment
variable REQUIRE_COMPILER=1 is set (CI sets it), in which case a missing compiler fails them.

Kernels the tests compile go to a temporary kernel cache made for the session (removed at its
end), never the user's own, unless LAYOUT_ALGEBRA_CACHE_DIR names one explicitly.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

CACHE_VARIABLE = "LAYOUT_ALGEBRA_CACHE_DIR"
"""The kernel cache's directory variable (`backend.cache.ENVIRONMENT_VARIABLE`)."""

if not os.environ.get(CACHE_VARIABLE):
    # Set before any test module imports the backend; mkdtemp makes it mode 0700, as the cache
    # requires. Subprocesses (the notebooks' kernels) inherit it.
    _session_cache = tempfile.mkdtemp(prefix="layout-algebra-test-cache-")
    os.environ[CACHE_VARIABLE] = _session_cache
    atexit.register(shutil.rmtree, _session_cache, ignore_errors=True)

# derandomize fixes the examples of one tree, not across trees: Hypothesis also draws constants
# from the project's own modules loaded at the time (its "local constants"), so an edit anywhere
# in the code, or which modules a worker has loaded before a test, can change what a property
# is tried on. A property that fails on an unrelated change is a property or a bug found late,
# not noise.
settings.register_profile(
    "suite",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


@functools.cache
def cuda_device_count() -> int:
    """Number of CUDA devices the driver reports (0 without cuda-python or a driver)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return 0
    try:
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return 0
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS:
            return 0
        return int(count)
    except Exception:
        return 0


MAX_TEST_WORKERS = 4
"""The most worker processes ``pytest -n auto`` starts (pytest-xdist): each lowers kernels in a
pool of its own (`backend.compile.lower_all`, up to 16 processes), so a machine of many CPUs
would otherwise hold a worker a CPU, each with its pool."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker for each CPU this process may run on, at most `MAX_TEST_WORKERS`."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux; elsewhere the CPU count
    cpus = len(affinity(0)) if affinity else os.cpu_count() or 1
    return max(1, min(cpus, MAX_TEST_WORKERS))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    require = os.environ.get("REQUIRE_GPU") == "1"
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or cuda_device_count() > 0:
        return
    if require:
        for item in gpu_items:
            item.add_marker(pytest.mark.usefixtures("_require_gpu_failure"))
        return
    skip = pytest.mark.skip(reason="no CUDA device found by the driver")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture
def _require_gpu_failure() -> None:
    pytest.fail("REQUIRE_GPU=1 but the CUDA driver reports no device")


def find_compiler(names: tuple[str, ...], language: str) -> str:
    """The path of the first of `names` on PATH; skips the test without one, or fails it when
    REQUIRE_COMPILER=1."""
    for name in names:
        path = shutil.which(name)
        if path is not None:
            return path
    problem = f"no {language} compiler ({' or '.join(names)}) on PATH"
    if os.environ.get("REQUIRE_COMPILER") == "1":
        pytest.fail(f"REQUIRE_COMPILER=1 but there is {problem}")
    pytest.skip(problem)


@pytest.fixture(scope="session")
def c_compiler() -> str:
    """Path of the host C compiler: gcc, else cc (see the module docstring for a missing one)."""
    return find_compiler(("gcc", "cc"), "C")


@pytest.fixture(scope="session")
def cxx_compiler() -> str:
    """Path of the host C++ compiler g++ (see the module docstring for a missing one)."""
    return find_compiler(("g++",), "C++")


@pytest.fixture
def run_c(tmp_path: Path, c_compiler: str) -> Callable[..., list[int]]:
    """``run_c(program, flags=("-std=c99",))``: compile the C `program` with the host C
    compiler and run it; the integers it prints, one a line. A compiler error fails the test
    with the compiler's message."""

    def run(program: str, flags: Sequence[str] = ("-std=c99",)) -> list[int]:
        source, binary = tmp_path / "program.c", tmp_path / "program"
        source.write_text(program)
        command = [c_compiler, *flags, "-o", str(binary), str(source)]
        built = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if built.returncode != 0:
            pytest.fail(f"{' '.join(command)} failed:\n{built.stderr}")
        output = subprocess.run(
            [str(binary)], check=True, capture_output=True, text=True, timeout=60
        )
        return [int(line) for line in output.stdout.split()]

    return run


C_MIN_MAX = """\
static long long min(long long a, long long b) { return a < b ? a : b; }
static long long max(long long a, long long b) { return a > b ? a : b; }
"""
"""C definitions of the functions `Expr.to_c` prints min and max as (CUDA's, on the device), in
64 bits: any integer operand converts to them in C."""


@pytest.fixture
def c_min_max() -> str:
    """`C_MIN_MAX`, for a test's C program of printed expressions."""
    return C_MIN_MAX


@pytest.fixture
def run_c_expressions(run_c: Callable[..., list[int]]) -> Callable[..., list[int]]:
    """``run_c_expressions(cases, parameters, arguments, prologue="", flags=("-std=c99",),
    header=C_MIN_MAX)``: the value of each C expression of `cases` ((text, environment) pairs),
    each the body of a function ``long long e<i>(<parameters>) { <prologue> return <text>; }``
    (after the `header`'s definitions) called with ``arguments(environment)`` (the C argument
    list) by one program (`run_c`)."""

    def run(
        cases: Sequence[tuple[str, dict[str, int]]],
        parameters: str,
        arguments: Callable[[dict[str, int]], str],
        prologue: str = "",
        flags: Sequence[str] = ("-std=c99",),
        header: str = C_MIN_MAX,
    ) -> list[int]:
        lines = ["#include <stdio.h>", header]
        for index, (text, _) in enumerate(cases):
            lines.append(f"static long long e{index}({parameters}) {{ {prologue} return {text}; }}")
        lines.append("int main(void) {")
        for index, (_, env) in enumerate(cases):
            lines.append(f'  printf("%lld\\n", e{index}({arguments(env)}));')
        lines.append("  return 0;\n}")
        return run_c("\n".join(lines) + "\n", flags)

    return run

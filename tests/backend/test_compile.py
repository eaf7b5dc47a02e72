"""`backend.compile`: every example, feature program and a sample of random programs compile
with NVRTC to CUBINs for sm_80 and sm_90a; the `CompiledKernel` interface; its errors.

No GPU is needed: NVRTC runs on the host. Compiled kernels go through the on-disk cache (the
default one, or LAYOUT_ALGEBRA_CACHE_DIR), so a second run of this module compiles nothing.
"""

from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import backend
from backend import compile
from backend.compile import CompiledKernel
from backend.errors import ArchitectureError, LaunchError, NoDeviceError
from backend.lower import lower
from backend.nvrtc import cubin_kernels
from ir import dtypes
from ir.examples.matmul import matmul
from ir.examples.quantized_matmul import quantized_matmul
from ir.examples.softmax import row_softmax
from ir.examples.vector_add import vector_add
from ir.program import Program
from ir.testing import ProgramCase, program_cases

_spec = importlib.util.spec_from_file_location(
    "lower_emulated", Path(__file__).with_name("test_lower_emulated.py")
)
emulated = importlib.util.module_from_spec(_spec)
sys.modules["lower_emulated"] = emulated
_spec.loader.exec_module(emulated)

ARCHS = ("sm_80", "sm_90a")
EXAMPLES = {
    "vector_add": vector_add(),
    "vector_add_u4": vector_add(dtypes.u4, 64, 256),
    "row_softmax": row_softmax(),
    "matmul": matmul(),
    "matmul_wgmma": matmul(256, 128, 128, 64, wgmma=True, stages=3),
    "quantized_matmul_u4": quantized_matmul(),
    "quantized_matmul_f4e2m1": quantized_matmul(dtypes.f4e2m1),
    "quantized_matmul_f6e3m2": quantized_matmul(dtypes.f6e3m2),
}


def _elf_sm(cubin: bytes) -> int:
    """The SM number in a CUBIN's ELF header (see test_nvrtc.py)."""
    (flags,) = struct.unpack_from("<I", cubin, 0x30)
    return (flags >> 8) & 0xFF if cubin[8] >= 8 else flags & 0xFF


def _check_compiled(kernel: CompiledKernel, program: Program, arch: str) -> None:
    assert cubin_kernels(kernel.cubin) == (program.name,)
    assert _elf_sm(kernel.cubin) == int(arch[3:5])
    assert kernel.arch == arch


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_compiles(name: str, arch: str) -> None:
    program = EXAMPLES[name]
    _check_compiled(compile(program, arch), program, arch)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(
    "index", range(len(emulated.FEATURES)), ids=[case.name for case in emulated.FEATURES]
)
def test_feature_program_compiles(index: int, arch: str) -> None:
    program = emulated.FEATURES[index].program
    _check_compiled(compile(program, arch), program, arch)


@settings(max_examples=12, suppress_health_check=[HealthCheck.too_slow])
@given(program_cases())
def test_random_program_compiles_for_both_architectures(case: ProgramCase) -> None:
    for arch in ARCHS:
        kernel = compile(case.program, arch, constants=case.constants)
        _check_compiled(kernel, case.program, arch)
        assert kernel.constants == case.constants


def test_compiled_kernel_interface() -> None:
    program = vector_add()
    kernel = backend.compile(program, "sm_90a")
    lowered = lower(program, "sm_90a")
    assert kernel.program is program
    assert kernel.source == lowered.source
    assert kernel.accesses == lowered.accesses
    assert kernel.shared_bytes == 0
    assert kernel.kernel.params == lowered.params
    assert kernel.kernel.block_threads == 128
    assert repr(kernel) == (
        "CompiledKernel('vector_add', arch='sm_90a', threads=128, shared_bytes=0)"
    )


def test_compiled_kernel_reports_its_tensor_core_plans() -> None:
    case = next(c for c in emulated.FEATURES if c.name == "tensor_cores")
    kernels = {arch: compile(case.program, arch) for arch in ARCHS}
    for kernel in kernels.values():
        assert [type(plan).__name__ for plan in kernel.plans] == [
            "LdmatrixPlan",
            "LdmatrixPlan",
            "MmaPlan",
        ]


def test_matmul_shared_memory_is_its_two_staged_tiles() -> None:
    kernel = compile(EXAMPLES["matmul"], "sm_80")
    assert kernel.shared_bytes == 2 * (2 * 64 * 32 * 2)


def test_unknown_architecture_is_refused() -> None:
    with pytest.raises(ArchitectureError, match="'sm_9O' is not a real GPU architecture"):
        compile(vector_add(), "sm_9O")


def _has_gpu() -> bool:
    try:
        backend.current_arch()
    except NoDeviceError:
        return False
    return True


def test_default_architecture_needs_a_gpu() -> None:
    if _has_gpu():
        pytest.skip("a GPU is present: the default architecture is its own")
    with pytest.raises(NoDeviceError, match="."):
        compile(vector_add())


def test_int_argument_outside_its_bounds_is_refused_before_launch() -> None:
    kernel = compile(vector_add(), "sm_90a")
    with pytest.raises(LaunchError, match="argument 'n' = -1 is outside the range"):
        kernel(-1, None, None, None, grid=1)


def test_missing_argument_is_refused_before_launch() -> None:
    kernel = compile(vector_add(), "sm_90a")
    with pytest.raises(LaunchError, match="missing arguments z"):
        kernel(4, None, None, grid=1)


def test_lower_all_in_processes_equals_lower_and_returns_errors_in_place() -> None:
    """Worker processes give the same kernels as `lower` in this process; a program that
    cannot be specialised gives its exception at its place; `compile_lowered` of a kernel
    lowered there gives the CUBIN `compile` gives."""
    good = [(vector_add(), None), (row_softmax(), None)]
    bad = (vector_add(), {"n": 4})  # n is no compile-time constant of vector_add
    results = backend.lower_all([good[0], bad, good[1]], "sm_90a", processes=2)
    assert [type(r).__name__ for r in results] == [
        "LoweredKernel",
        "SpecializationError",
        "LoweredKernel",
    ]
    assert results[0].source == lower(vector_add(), "sm_90a").source
    assert results[2].source == lower(row_softmax(), "sm_90a").source
    built = backend.compile_lowered(vector_add(), results[0], "sm_90a")
    assert built.cubin == compile(vector_add(), "sm_90a").cubin
    assert backend.lower_all([], "sm_90a") == []


def test_every_lowered_kernel_pickles() -> None:
    """`lower_all` hands kernels back from worker processes by pickling: every random program's
    kernel (staged SIMT dots among them, whose accesses hold function layouts) round-trips."""
    import pickle

    from ir.testing import program_cases

    drawn = []

    @settings(
        max_examples=40,
        database=None,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(program_cases())
    def collect(case) -> None:
        drawn.append(case)

    collect()
    staged = 0
    for case in drawn:
        lowered = lower(case.program, "sm_90a", constants=case.constants)
        copy = pickle.loads(pickle.dumps(lowered))
        assert copy.source == lowered.source and len(copy.accesses) == len(lowered.accesses)
        staged += "la_sa" in lowered.source
    assert staged >= 1  # the staged dot's scratch operands were among them

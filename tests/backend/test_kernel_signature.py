"""Kernel signatures (parameters, int bounds and divisors, storage dtypes and byte counts, each
invalid one refused with a message before anything reaches the GPU) and building a kernel from
source for an explicit architecture, with no GPU.

The fake device and arrays are those of test_launch.py, loaded from it by path (the tests have
no packages).
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from backend.device import arch_for_compute_capability, current_arch
from backend.errors import CompilationError, LaunchError, NoDeviceError
from backend.kernel import (
    Kernel,
    KernelArrayParam,
    KernelIntParam,
    build_kernel,
    default_storage_dtypes,
)
from backend.nvrtc import cubin_kernels
from layout_algebra.symbolic import var

_spec = importlib.util.spec_from_file_location(
    "launch_tests", Path(__file__).with_name("test_launch.py")
)
launch_tests = importlib.util.module_from_spec(_spec)
sys.modules["launch_tests"] = launch_tests
_spec.loader.exec_module(launch_tests)

FakeDevice = launch_tests.FakeDevice
device_array = launch_tests.device_array
halves = launch_tests.halves
VECTOR_ADD = launch_tests.VECTOR_ADD
vector_add_params = launch_tests.vector_add_params
device = launch_tests.device  # fixtures, found by pytest in this module's namespace
kernel = launch_tests.kernel


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: KernelArrayParam("2a", 16, 8), r"array parameter name '2a' is not a C identifier"),
        (lambda: KernelArrayParam("grid", 16, 8), r"array parameter name 'grid' is reserved"),
        (lambda: KernelArrayParam("a", 0, 8), r"element_bits 0 is not an int from 1 to 64"),
        (lambda: KernelArrayParam("a", 65, 8), r"element_bits 65 is not an int from 1 to 64"),
        (lambda: KernelArrayParam("a", 16, -1), r"num_elements -1 is negative"),
        (lambda: KernelArrayParam("a", 16, 2.5), r"num_elements 2.5 is neither an int nor"),
        (lambda: KernelArrayParam("a", 16, 8, ("half",)), r"unknown storage dtypes \['half'\]"),
        (lambda: KernelArrayParam("a", 16, 8, alignment=12), r"alignment 12 is not a power of two"),
        (lambda: KernelIntParam("n", bits=24), r"bits=24, signed=True; expected bits in"),
        (lambda: KernelIntParam("n", signed=1), r"bits=32, signed=1; expected"),
        (lambda: KernelIntParam("n-1"), r"int parameter name 'n-1' is not a C identifier"),
    ],
)
def test_invalid_parameter_is_refused(make: object, match: str) -> None:
    with pytest.raises(LaunchError, match=match):
        make()


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"entry": "vector add"}, r"kernel entry 'vector add' is not a C identifier"),
        (
            {"params": (KernelIntParam("n"), KernelIntParam("n"))},
            r"parameter names \['n'\] appear twice",
        ),
        ({"params": ("a",)}, r"parameter 'a' is not a KernelArrayParam or KernelIntParam"),
        ({"block_threads": 0}, r"block_threads 0 is not an int from 1 to 1024"),
        ({"block_threads": 2048}, r"block_threads 2048 is not an int from 1 to 1024"),
        ({"shared_bytes": -1}, r"shared_bytes -1 is not a non-negative int"),
    ],
)
def test_invalid_kernel_is_refused(device: FakeDevice, changes: dict, match: str) -> None:
    fields = {
        "source": "",
        "cubin": b"",
        "arch": "sm_80",
        "entry": "vector_add",
        "params": vector_add_params(),
        "block_threads": 128,
        "device": device,
        **changes,
    }
    with pytest.raises(LaunchError, match=match):
        Kernel(**fields)


def test_num_elements_may_read_only_int_parameters(device: FakeDevice) -> None:
    params = (KernelArrayParam("a", 16, var("n") * var("m")), KernelIntParam("n"))
    with pytest.raises(LaunchError, match=r"num_elements n \* m of 'a' reads m, which are not int"):
        Kernel(
            source="",
            cubin=b"",
            arch="sm_80",
            entry="k",
            params=params,
            block_threads=32,
            device=device,
        )


def test_int_divisor_is_enforced() -> None:
    param = KernelIntParam("k", lo=0, multiple_of=8)
    assert param.check(0) == 0 and param.check(4096) == 4096
    with pytest.raises(LaunchError, match=r"argument 'k' = 4100 is not a multiple of 8"):
        param.check(4100)


@pytest.mark.parametrize("multiple_of", [0, -8, 2.0, True])
def test_invalid_int_divisor_is_refused(multiple_of: object) -> None:
    with pytest.raises(LaunchError, match=rf"multiple_of={multiple_of!r}; expected a positive"):
        KernelIntParam("k", multiple_of=multiple_of)


def test_non_multiple_argument_is_refused_before_launch(device: FakeDevice) -> None:
    device.parameter_types = (ctypes.c_uint64, ctypes.c_int32)
    kernel = Kernel(
        source="",
        cubin=b"",
        arch="sm_80",
        entry="k",
        params=(KernelArrayParam("a", 16, var("k")), KernelIntParam("k", multiple_of=8)),
        block_threads=32,
        device=device,
    )
    halves = device_array(device, (16,), "<f2")
    kernel(halves, 16, grid=1)
    with pytest.raises(LaunchError, match=r"argument 'k' = 12 is not a multiple of 8"):
        kernel(halves, 12, grid=1)
    assert len(device.launches) == 1


def test_num_elements_that_cannot_be_evaluated_is_refused(device: FakeDevice) -> None:
    device.parameter_types = (ctypes.c_uint64, ctypes.c_int32, ctypes.c_int32)
    params = (
        KernelArrayParam("a", 8, var("n") // var("m")),
        KernelIntParam("n"),
        KernelIntParam("m"),
    )
    kernel = Kernel(
        source="",
        cubin=b"",
        arch="sm_80",
        entry="k",
        params=params,
        block_threads=32,
        device=device,
    )
    bytes_ = device_array(device, (64,), "|u1")
    kernel(bytes_, 64, 2, grid=1)
    with pytest.raises(LaunchError, match=r"cannot be evaluated with n=64, m=0: division by zero"):
        kernel(bytes_, 64, 0, grid=1)
    assert len(device.launches) == 1


@pytest.mark.parametrize(
    ("param", "accepted", "refused"),
    [
        (KernelIntParam("n", lo=1, hi=4096), (1, 4096), (0, 4097)),
        (KernelIntParam("n", bits=8, signed=False, lo=16), (16, 255), (15, 256)),
        (KernelIntParam("n", bits=64, hi=0), (-(2**63), 0), (1, -(2**63) - 1)),
    ],
)
def test_int_bounds_are_enforced(
    param: KernelIntParam, accepted: tuple[int, int], refused: tuple[int, int]
) -> None:
    for value in accepted:
        assert param.check(value) == value
    for value in refused:
        with pytest.raises(LaunchError, match=rf"argument 'n' = {value} is out"):
            param.check(value)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: KernelIntParam("n", lo=5, hi=4), r"lo=5 > hi=4; expected lo <= hi"),
        (
            lambda: KernelIntParam("n", bits=8, lo=-200),
            r"lo=-200 is not an int in the range of int8_t",
        ),
        (
            lambda: KernelIntParam("n", signed=False, hi=-1),
            r"hi=-1 is not an int in the range of uint32",
        ),
        (lambda: KernelIntParam("n", hi=1.5), r"hi=1.5 is not an int"),
    ],
)
def test_invalid_int_bounds_are_refused(make: object, match: str) -> None:
    with pytest.raises(LaunchError, match=match):
        make()


@pytest.mark.parametrize(
    ("bits", "expected"),
    [
        (16, {"float16", "bfloat16", "int16", "uint16"}),
        (32, {"float32", "int32", "uint32"}),
        (4, {"uint8", "int8"}),
        (1, {"uint8", "int8"}),
        (12, {"uint8", "int8"}),
    ],
)
def test_default_storage_dtypes(bits: int, expected: set[str]) -> None:
    assert set(default_storage_dtypes(bits)) == expected
    assert KernelArrayParam("x", bits, 1).storage_dtypes == default_storage_dtypes(bits)


def test_default_storage_of_bytes_includes_fp8_but_not_bool() -> None:
    storage = default_storage_dtypes(8)
    assert {"int8", "uint8", "float8_e4m3fn", "float8_e5m2"} <= set(storage)
    assert "bool" not in storage


@pytest.mark.parametrize(
    ("bits", "count", "expected"),
    [(4, 1001, 501), (1, 8, 1), (1, 9, 2), (3, 5, 2), (6, 4, 3), (16, 3, 6), (8, 0, 0)],
)
def test_required_bytes_table(bits: int, count: int, expected: int) -> None:
    assert KernelArrayParam("x", bits, count).required_bytes({}) == expected


@given(bits=st.integers(1, 64), count=st.integers(0, 10_000))
def test_required_bytes_cover_the_last_element_bit(bits: int, count: int) -> None:
    last_bit = count * bits - 1  # element count-1 ends at this bit of the bitstream
    brute_force = 0 if count == 0 else last_bit // 8 + 1
    assert KernelArrayParam("x", bits, count).required_bytes({}) == brute_force


@given(
    kind=st.sampled_from(
        [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]
    ),
    value=st.integers(-(2**65), 2**65),
)
def test_int_range_matches_numpy_iinfo(kind: type, value: int) -> None:
    info = np.iinfo(kind)
    param = KernelIntParam("n", bits=info.bits, signed=info.min < 0)
    if info.min <= value <= info.max:
        assert param.check(value) == value
        assert param.check(kind(value)) == value
    else:
        with pytest.raises(LaunchError, match="is out of range of"):
            param.check(value)


# -- building from source (no GPU needed with an explicit arch) ---------------------------------


@pytest.fixture
def private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory):
    monkeypatch.setenv("LAYOUT_ALGEBRA_CACHE_DIR", str(tmp_path_factory.mktemp("k") / "cache"))


@pytest.mark.usefixtures("private_cache")
def test_build_kernel_compiles_for_the_given_arch(device: FakeDevice) -> None:
    kernel = build_kernel(
        VECTOR_ADD, "vector_add", vector_add_params(), 128, arch="sm_90a", device=device
    )
    assert (kernel.arch, kernel.entry, kernel.block_threads, kernel.shared_bytes) == (
        "sm_90a",
        "vector_add",
        128,
        0,
    )
    assert kernel.source == VECTOR_ADD
    assert cubin_kernels(kernel.cubin) == ("vector_add",)
    a, b, c = (halves(device, 4) for _ in range(3))
    kernel(a, b, c, 4, grid=1)
    assert len(device.launches) == 1


@pytest.mark.usefixtures("private_cache")
def test_build_kernel_refuses_an_entry_the_source_does_not_define(device: FakeDevice) -> None:
    with pytest.raises(
        CompilationError, match=r"kernel 'vadd' is not defined .* defines vector_add"
    ):
        build_kernel(VECTOR_ADD, "vadd", vector_add_params(), 128, arch="sm_80", device=device)


@pytest.mark.parametrize(
    ("capability", "arch"),
    [
        ((9, 0), "sm_90a"),
        ((8, 0), "sm_80"),
        ((8, 9), "sm_89"),
        ((10, 0), "sm_100"),
        ((12, 0), "sm_120"),
    ],
)
def test_arch_for_compute_capability(capability: tuple[int, int], arch: str) -> None:
    assert arch_for_compute_capability(*capability) == arch


def test_current_arch_names_the_gpu_or_asks_for_an_explicit_arch() -> None:
    try:
        arch = current_arch()
    except NoDeviceError as error:
        assert "pass arch= explicitly" in str(error)
        with pytest.raises(NoDeviceError, match="pass arch= explicitly"):
            build_kernel(VECTOR_ADD, "vector_add", vector_add_params(), 128)
    else:
        assert re.fullmatch(r"sm_\d{2,3}a?", arch)

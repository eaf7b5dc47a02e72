"""Compile-time constant int parameters in the backend: ``int_param(name, constant=True)`` with
``backend.compile(program, arch, constants={name: value})``.

Exact: the generated source holds the value as a literal, keeps the parameter's place in the
signature unnamed and never reads it; the launch signature records the value; a kernel call with
another value is refused before anything reaches the GPU (a fake device, as in test_launch.py),
naming the parameter and both values; constants that do not fit are refused at compile time.
NVRTC: the kernels compile for sm_80 and sm_90a, and two values are two sources, so two entries
of the source-keyed CUBIN cache. The random programs of `ir.testing` that declare constants are
compiled with them by test_compile.py, test_lower.py, test_lower_emulated.py (run against the
interpreter) and tests/proofs/test_lowering_validation.py.
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from backend import cache_key, compile, nvrtc_version
from backend.errors import LaunchError
from backend.kernel import Kernel, KernelArrayParam, KernelIntParam
from backend.lower import lower
from backend.nvrtc import cubin_kernels
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import SpecializationError
from ir.program import Program
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial

_spec = importlib.util.spec_from_file_location(
    "launch_fakes", Path(__file__).with_name("test_launch.py")
)
launch_fakes = importlib.util.module_from_spec(_spec)
sys.modules["launch_fakes"] = launch_fakes
_spec.loader.exec_module(launch_fakes)

ARCHS = ("sm_80", "sm_90a")
SIGNATURE = (
    "doubled(int /* n = 200, a compile-time constant */, unsigned char* x, unsigned char* y)"
)


def doubled(constant: bool = True) -> Program:
    """y[i] = x[i] + x[i] for i < n, 128 f32 elements per block; n a multiple of 8."""
    with ProgramBuilder("doubled", 32) as b:
        n = b.int_param("n", 1, multiple_of=8, constant=constant)
        x = b.array_param("x", dtypes.f32)
        y = b.array_param("y", dtypes.f32)
        tile = spatial(32).local(4)
        source = b.global_view(x, dtypes.f32, GlobalLayout((n,), (1,)))
        target = b.global_view(y, dtypes.f32, GlobalLayout((n,), (1,)))
        values = b.load_global(source, [b.block_x * 128], tile)
        b.store_global(target, b.add(values, values), [b.block_x * 128])
    return b.program()


def looped(constant: bool = True) -> Program:
    """y[i] = x[i] for i < n, one block looping over n // 64 tiles of 64 i32 elements."""
    with ProgramBuilder("looped", 32) as b:
        n = b.int_param("n", 64, multiple_of=64, constant=constant)
        x = b.array_param("x", dtypes.i32)
        y = b.array_param("y", dtypes.i32)
        source = b.global_view(x, dtypes.i32, GlobalLayout((n,), (1,)))
        target = b.global_view(y, dtypes.i32, GlobalLayout((n,), (1,)))
        with b.for_range(0, n // 64) as t:
            tile = b.load_global(source, [t * 64], spatial(32).local(2))
            b.store_global(target, tile, [t * 64])
    return b.program()


def _body(source: str, entry: str) -> str:
    """The kernel function's text after its signature, without comments."""
    body = source[source.index(f" {entry}(") :].split("\n", 1)[1]
    return re.sub(r"//[^\n]*", "", body)


# ---------------------------------------------------------------------------------- exact


def test_the_source_holds_the_literal_and_never_reads_the_parameter() -> None:
    source = lower(doubled(), constants={"n": 200}).source
    assert SIGNATURE in source
    body = _body(source, "doubled")
    assert "if (la_w_block_x * 128 + la_thread * 4 + 3 < 200) {" in body
    assert re.search(r"\bn\b", body) is None
    assert "la_w_n" not in body


def test_without_the_flag_the_source_reads_the_parameter() -> None:
    source = lower(doubled(constant=False)).source
    assert "doubled(int n, unsigned char* x, unsigned char* y)" in source
    assert "const long long la_w_n = n;" in source
    assert re.search(r"< n\)|< n\)", _body(source, "doubled"))


def test_the_launch_signature_records_the_value() -> None:
    params = lower(doubled(), constants={"n": 200}).params
    assert params == (
        KernelIntParam("n", 32, True, 1, 2**31 - 1, 8, constant=200),
        KernelArrayParam("x", 32, 200, dtype=dtypes.f32),
        KernelArrayParam("y", 32, 200, dtype=dtypes.f32),
    )


def test_a_constant_trip_count_drops_every_mask() -> None:
    constant = lower(looped(), constants={"n": 256})
    assert [repr(access.mask) for access in constant.accesses] == ["1", "1"]  # always inside
    body = _body(constant.source, "looped")
    assert "for (int k0 = 0; k0 < 4; k0 += 1) {" in body
    assert "if (" not in body and "?" not in body
    runtime = lower(looped(constant=False))
    assert not any(access.mask.is_const for access in runtime.accesses)


@pytest.mark.parametrize(
    ("constants", "match"),
    [
        (None, r"doubled: the compile-time constant parameters n have no value"),
        ({"m": 8}, r"doubled has no parameter 'm' to give a constant value"),
        ({"n": 8, "x": 1}, r"parameter 'x' of doubled is not a compile-time constant"),
        ({"n": 12}, r"constant n of doubled = 12 is not a multiple of 8"),
        ({"n": 0}, r"constant n of doubled = 0 is outside the parameter's bounds \[1, "),
    ],
)
def test_constants_that_do_not_fit_are_refused_at_compile_time(
    constants: dict | None, match: str
) -> None:
    with pytest.raises(SpecializationError, match=match):
        compile(doubled(), "sm_90a", constants=constants)


def test_a_plain_parameter_is_not_a_constant() -> None:
    with pytest.raises(SpecializationError, match=r"'n' of doubled is not a compile-time constant"):
        lower(doubled(constant=False), constants={"n": 8})


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: KernelIntParam("n", lo=1, hi=64, constant=0), r"constant=0 is not an int within"),
        (lambda: KernelIntParam("n", multiple_of=8, constant=12), r"a multiple of 8"),
        (lambda: KernelIntParam("n", constant=8.0), r"constant=8.0 is not an int"),
    ],
)
def test_invalid_constant_field_is_refused(make: object, match: str) -> None:
    with pytest.raises(LaunchError, match=match):
        make()  # type: ignore[operator]


def test_the_int_check_accepts_only_the_constant() -> None:
    param = KernelIntParam("n", lo=1, multiple_of=8, constant=200)
    assert param.check(200) == 200
    with pytest.raises(
        LaunchError,
        match=r"argument 'n' = 208 differs from 200, the value of the compile-time constant 'n' "
        r"the kernel was compiled with; compile again with constants=\{'n': 208\}",
    ):
        param.check(208)


def test_a_call_with_another_value_is_refused_before_launch() -> None:
    lowered = lower(doubled(), constants={"n": 200})
    device = launch_fakes.FakeDevice(
        parameter_types=(ctypes.c_int32, ctypes.c_uint64, ctypes.c_uint64)
    )
    kernel = Kernel(
        source=lowered.source,
        cubin=b"\x7fELF fake image",
        arch="sm_90a",
        entry=lowered.entry,
        params=lowered.params,
        block_threads=lowered.block_threads,
        device=device,
    )
    x, y = (launch_fakes.device_array(device, (200,), "<f4") for _ in range(2))
    kernel(200, x, y, grid=2)
    kernel(x=x, y=y, n=200, grid=2)
    assert [launch.arguments[0] for launch in device.launches] == [200, 200]
    for call in (lambda: kernel(192, x, y, grid=2), lambda: kernel(x=x, y=y, n=8, grid=2)):
        with pytest.raises(LaunchError, match=r"argument 'n' = \d+ differs from 200"):
            call()
    assert len(device.launches) == 2


# ---------------------------------------------------------------------------------- NVRTC


@pytest.mark.parametrize("arch", ARCHS)
def test_a_program_with_constants_compiles(arch: str) -> None:
    kernel = compile(looped(), arch, constants={"n": 256})
    assert cubin_kernels(kernel.cubin) == ("looped",)
    assert kernel.constants == {"n": 256}
    assert kernel.program.params[0].value is None
    with pytest.raises(LaunchError, match=r"argument 'n' = 128 differs from 256"):
        kernel(128, None, None, grid=1)


def test_two_values_are_two_sources_and_two_cache_entries() -> None:
    kernels = [compile(doubled(), "sm_80", constants={"n": n}) for n in (200, 4096)]
    sources = [kernel.source for kernel in kernels]
    assert sources[0] != sources[1] and "4096" in sources[1]
    keys = {cache_key(s, kernels[0].lowered.options, "sm_80", nvrtc_version()) for s in sources}
    assert len(keys) == 2

"""Argument checking before launch, and launches on the GPU (marked `gpu`); the signatures'
own checks are in test_kernel_signature.py.

Without a GPU the checks run against a fake `Device` and fake arrays exposing
`__cuda_array_interface__` or DLPack; the fake records what would have been launched, so every
refusal is also checked to have launched (and loaded) nothing. `Kernel.resident_blocks` asks
the device for its count with the kernel's threads and dynamic shared bytes.
"""

from __future__ import annotations

import ctypes
import math
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pytest

from backend.device import (
    LEGACY_STREAM,
    KernelResources,
    LoadedFunction,
    arch_for_compute_capability,
    cuda_driver,
    current_arch,
)
from backend.errors import LaunchError
from backend.kernel import (
    Kernel,
    KernelArrayParam,
    KernelIntParam,
    build_kernel,
    check_grid,
)
from backend.lower import lower
from ir import dtypes
from ir.arguments import storage_dtypes
from ir.examples.vector_add import vector_add
from layout_algebra.symbolic import Expr, var

VECTOR_ADD = """\
#include <cuda_fp16.h>

extern "C" __global__ void vector_add(const __half* a, const __half* b, __half* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = __hadd(a[i], b[i]);
}
"""

# Reverses each block's 32768 floats (128 KiB) through dynamic shared memory.
SHARED_REVERSE = """\
extern "C" __global__ void shared_reverse(const float* in, float* out, int per_block) {
  extern __shared__ float buffer[];
  const float* source = in + blockIdx.x * per_block;
  for (int i = threadIdx.x; i < per_block; i += blockDim.x) buffer[i] = source[i];
  __syncthreads();
  float* target = out + blockIdx.x * per_block;
  for (int i = threadIdx.x; i < per_block; i += blockDim.x) target[i] = buffer[per_block - 1 - i];
}
"""


# -- fakes --------------------------------------------------------------------------------------

BASE_ADDRESS = 0x7F00_0000_0000


@dataclass
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    stream: int
    arguments: list[int]
    wait_streams: list[int]
    programmatic: bool = False


@dataclass
class FakeDevice:
    """A `Device` with allocations it hands out itself; launches decode the argument array;
    it counts `RESIDENT_BLOCKS` blocks an SM for any kernel, recording what it was asked."""

    RESIDENT_BLOCKS: ClassVar[int] = 7
    ordinal: int = 0
    max_threads_per_block: int = 1024
    allocations: dict[int, tuple[int, int]] = field(default_factory=dict)  # start: (end, ordinal)
    loads: list[tuple[int, str, int]] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    parameter_types: Sequence[type] = ()
    next_address: int = BASE_ADDRESS
    counted: list[tuple[int, int]] = field(default_factory=list)  # (threads, shared bytes)

    def allocate(self, nbytes: int, ordinal: int = 0) -> int:
        address = self.next_address
        self.allocations[address] = (address + max(nbytes, 1), ordinal)
        self.next_address += (nbytes // 256 + 2) * 256
        return address

    def current_ordinal(self) -> int:
        return self.ordinal

    def pointer_ordinal(self, address: int) -> int | None:
        for start, (end, ordinal) in self.allocations.items():
            if start <= address < end:
                return ordinal
        return None

    def resident_blocks(self, function: object, block_threads: int, shared_bytes: int) -> int:
        self.counted.append((block_threads, shared_bytes))
        return self.RESIDENT_BLOCKS

    def load(self, ordinal: int, cubin: bytes, entry: str, dynamic_shared_bytes: int):
        self.loads.append((ordinal, entry, dynamic_shared_bytes))
        resources = KernelResources(32, 0, 0, self.max_threads_per_block)
        return LoadedFunction(ordinal, "handle", resources)

    def launch(
        self,
        function: LoadedFunction,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        dynamic_shared_bytes: int,
        stream: int,
        parameters_address: int,
        wait_streams: Sequence[int],
        programmatic: bool = False,
    ) -> None:
        pointers = (ctypes.c_void_p * len(self.parameter_types)).from_address(parameters_address)
        arguments = [
            kind.from_address(pointer).value
            for kind, pointer in zip(self.parameter_types, pointers, strict=True)
        ]
        self.launches.append(
            Launch(
                grid,
                block,
                dynamic_shared_bytes,
                stream,
                arguments,
                list(wait_streams),
                programmatic,
            )
        )


class FakeCudaArray:
    """An object exposing only `__cuda_array_interface__` (version 3)."""

    def __init__(
        self,
        shape: tuple[int, ...],
        typestr: str,
        address: int,
        *,
        strides: tuple[int, ...] | None = None,
        stream: int | None = None,
        mask: object = None,
    ) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (address, False),
            "strides": strides,
            "version": 3,
            "stream": stream,
            "mask": mask,
        }


def device_array(
    device: FakeDevice, shape: tuple[int, ...], typestr: str, ordinal: int = 0, **extra: object
) -> FakeCudaArray:
    nbytes = math.prod(shape) * np.dtype(typestr).itemsize
    return FakeCudaArray(shape, typestr, device.allocate(nbytes, ordinal), **extra)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


_new_capsule = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)(("PyCapsule_New", ctypes.pythonapi))


class FakeDLPackArray:
    """A DLPack producer on a CUDA device, built from the DLPack C structures (dlpack.h)."""

    CAPSULE_NAME = b"dltensor"

    def __init__(
        self,
        device: tuple[int, int],
        address: int,
        shape: tuple[int, ...],
        dtype: tuple[int, int, int],
        *,
        strides: tuple[int, ...] | None = None,
        byte_offset: int = 0,
    ) -> None:
        self.device = device
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        self.tensor = _DLManagedTensor(
            data=address,
            device=_DLDevice(*device),
            ndim=len(shape),
            dtype=_DLDataType(*dtype),
            shape=ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64)),
            strides=(
                ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
                if self.strides is not None
                else None
            ),
            byte_offset=byte_offset,
        )
        self.requested_streams: list[object] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, stream: object = None) -> object:
        self.requested_streams.append(stream)
        return _new_capsule(ctypes.addressof(self.tensor), self.CAPSULE_NAME, None)


N = var("n")


def vector_add_params(count: int | Expr = N) -> tuple:
    return (
        KernelArrayParam("a", 16, count, ("float16", "int16", "uint16")),
        KernelArrayParam("b", 16, count, ("float16", "int16", "uint16")),
        KernelArrayParam("c", 16, count, ("float16", "int16", "uint16")),
        KernelIntParam("n"),
    )


VECTOR_ADD_TYPES = (ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32)


@pytest.fixture
def device() -> FakeDevice:
    return FakeDevice(parameter_types=VECTOR_ADD_TYPES)


def vector_add_kernel(device: FakeDevice, **fields: object) -> Kernel:
    """The vector-add `Kernel` on `device` (128 threads a block unless `fields` say otherwise)."""
    return Kernel(
        source=VECTOR_ADD,
        cubin=b"\x7fELF fake image",
        arch="sm_80",
        entry="vector_add",
        params=vector_add_params(),
        device=device,
        **{"block_threads": 128, **fields},
    )


@pytest.fixture
def kernel(device: FakeDevice) -> Kernel:
    return vector_add_kernel(device)


def halves(device: FakeDevice, count: int, **extra: object) -> FakeCudaArray:
    return device_array(device, (count,), "<f2", **extra)


def address_of(array: FakeCudaArray) -> int:
    return array.__cuda_array_interface__["data"][0]


# -- launches that pass -------------------------------------------------------------------------


def test_launch_packs_arguments_in_signature_order(kernel: Kernel, device: FakeDevice) -> None:
    a, b, c = (halves(device, 1000) for _ in range(3))
    kernel(a, b, c, 1000, grid=8)
    assert device.launches == [
        Launch(
            grid=(8, 1, 1),
            block=(128, 1, 1),
            shared_bytes=0,
            stream=LEGACY_STREAM,
            arguments=[address_of(a), address_of(b), address_of(c), 1000],
            wait_streams=[],
        )
    ]
    assert device.loads == [(0, "vector_add", 0)]


@pytest.mark.parametrize(
    ("arch", "requested", "programmatic"),
    [("sm_90a", True, True), ("sm_100", True, True), ("sm_80", True, False)]
    + [("sm_89", True, False), ("sm_90a", False, False)],
)
def test_a_programmatic_launch_from_sm_90_on(
    device: FakeDevice, arch: str, requested: bool, programmatic: bool
) -> None:
    """A kernel built as a link of a chain is launched with programmatic stream serialization
    where the architecture has it (sm_90 on), as an ordinary launch elsewhere."""
    kernel = Kernel(
        source=VECTOR_ADD,
        cubin=b"\x7fELF fake image",
        arch=arch,
        entry="vector_add",
        params=vector_add_params(),
        block_threads=128,
        device=device,
        programmatic_launch=requested,
    )
    a, b, c = (halves(device, 256) for _ in range(3))
    kernel(a, b, c, 256, grid=2)
    (launch,) = device.launches
    assert launch.programmatic is programmatic and launch.grid == (2, 1, 1)


def test_programmatic_launch_config_allows_the_overlap() -> None:
    """The driver structure of a programmatic launch (built without a GPU): grid, block,
    shared bytes, stream and one attribute, programmatic stream serialization allowed."""
    from cuda.bindings import driver

    from backend.device import programmatic_launch_config

    config = programmatic_launch_config(driver, (3, 2, 1), (128, 1, 1), 4096, driver.CUstream(0))
    assert (config.gridDimX, config.gridDimY, config.gridDimZ) == (3, 2, 1)
    assert (config.blockDimX, config.blockDimY, config.blockDimZ) == (128, 1, 1)
    assert (config.sharedMemBytes, config.numAttrs) == (4096, 1)
    (attribute,) = config.attrs
    serialization = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert attribute.id == serialization
    assert attribute.value.programmaticStreamSerializationAllowed == 1


def test_arguments_by_name_match_positional(kernel: Kernel, device: FakeDevice) -> None:
    a, b, c = (halves(device, 64) for _ in range(3))
    kernel(a, b, c, 64, grid=(1,))
    kernel(a, n=64, c=c, b=b, grid=[1, 1, 1])
    first, second = device.launches
    assert first == second
    assert device.loads == [(0, "vector_add", 0)]  # loaded once


def test_int16_storage_and_larger_arrays_are_accepted(kernel: Kernel, device: FakeDevice) -> None:
    a = device_array(device, (10, 10), "<i2")
    b = device_array(device, (200,), "<u2")
    c = halves(device, 100)
    kernel(a, b, c, 100, grid=(2, 3, 4))
    assert device.launches[0].grid == (2, 3, 4)


def test_size_one_dimensions_may_have_any_stride(kernel: Kernel, device: FakeDevice) -> None:
    a = device_array(device, (1, 64), "<f2", strides=(999, 2))
    b, c = halves(device, 64), halves(device, 64)
    kernel(a, b, c, 64, grid=1)
    assert len(device.launches) == 1


def test_producer_stream_is_waited_for(kernel: Kernel, device: FakeDevice) -> None:
    a = halves(device, 8, stream=0x1234)
    b = halves(device, 8, stream=1)  # the legacy stream: the launch stream itself
    c = halves(device, 8, stream=0x1234)
    kernel(a, b, c, 8, grid=1)
    assert device.launches[0].wait_streams == [0x1234]


def test_packed_subbyte_array_with_expression_size(device: FakeDevice) -> None:
    device.parameter_types = (ctypes.c_uint64, ctypes.c_int32, ctypes.c_int32)
    kernel = Kernel(
        source="",
        cubin=b"",
        arch="sm_80",
        entry="unpack",
        params=(
            KernelArrayParam("w", 4, var("m") * var("k")),
            KernelIntParam("m"),
            KernelIntParam("k"),
        ),
        block_threads=32,
        device=device,
    )
    weights = device_array(device, (3 * 5 // 2 + 1,), "|u1")
    kernel(weights, 3, 5, grid=1)
    assert device.launches[0].arguments == [address_of(weights), 3, 5]
    with pytest.raises(
        LaunchError,
        match=r"'w' holds 8 bytes; expected at least 9 bytes \(18 elements of 4 bits, with m=3, "
        r"k=6\)",
    ):
        kernel(weights, 3, 6, grid=1)
    with pytest.raises(LaunchError, match=r"storage dtype float16; expected one of uint8, int8"):
        kernel(halves(device, 64), 3, 5, grid=1)


def test_dlpack_producer_is_read_and_told_the_stream(device: FakeDevice) -> None:
    device.parameter_types = (ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32)
    params = tuple(KernelArrayParam(name, 16, N) for name in "abc")
    kernel = Kernel(
        source="",
        cubin=b"",
        arch="sm_80",
        entry="vector_add",
        params=(*params, KernelIntParam("n")),
        block_threads=128,
        device=device,
    )
    storage = device.allocate(4096)
    a = FakeDLPackArray((2, 0), storage, (32, 32), (2, 16, 1), byte_offset=256)  # float16
    b = FakeDLPackArray((2, 0), storage, (1024,), (1, 16, 1), strides=(1,))  # uint16
    c = FakeDLPackArray((13, 0), storage, (2, 512), (4, 16, 1))  # managed memory, bfloat16
    kernel(a, b, c, 1024, grid=1)
    assert device.launches[0].arguments == [storage + 256, storage, storage, 1024]
    assert a.requested_streams == [1]  # the legacy default stream, in DLPack's numbering
    with pytest.raises(LaunchError, match="'a' holds 2048 bytes; expected at least 2050"):
        kernel(a, b, c, 1025, grid=1)
    transposed = FakeDLPackArray((2, 0), storage, (32, 32), (2, 16, 1), strides=(1, 32))
    with pytest.raises(LaunchError, match="'b' is not contiguous"):
        kernel(a, transposed, c, 1024, grid=1)
    floats = FakeDLPackArray((2, 0), storage, (1024,), (2, 32, 1))
    with pytest.raises(LaunchError, match="'c' has storage dtype float32"):
        kernel(a, b, floats, 512, grid=1)


def test_torch_tensors_use_torch_device_and_stream(
    monkeypatch: pytest.MonkeyPatch, device: FakeDevice
) -> None:
    fake_torch = _fake_torch(current_device=0, stream=0xBEEF)
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    kernel = Kernel(
        source="",
        cubin=b"",
        arch="sm_80",
        entry="vector_add",
        params=vector_add_params(),
        block_threads=64,
        device=device,
    )
    a, b, c = (fake_torch.Tensor(device, "cuda", 0, "float16", 100) for _ in range(3))
    kernel(a, b, c, 100, grid=2)
    assert device.launches[0].stream == 0xBEEF
    assert device.launches[0].arguments[:3] == [a.data_ptr(), b.data_ptr(), c.data_ptr()]
    cpu = fake_torch.Tensor(device, "cpu", None, "float16", 100)
    with pytest.raises(LaunchError, match=r"'b' is in cpu memory; expected memory of the current"):
        kernel(a, cpu, c, 100, grid=2)
    other = fake_torch.Tensor(device, "cuda", 1, "float16", 100)
    with pytest.raises(LaunchError, match=r"'c' is in cuda:1; expected .* \(cuda:0\)"):
        kernel(a, b, other, 100, grid=2)
    wrong = fake_torch.Tensor(device, "cuda", 0, "float32", 100)
    with pytest.raises(LaunchError, match=r"'a' has storage dtype float32"):
        kernel(wrong, b, c, 100, grid=2)
    assert len(device.launches) == 1


def _fake_torch(current_device: int, stream: int) -> types.ModuleType:
    """A module with just what `Kernel` reads from torch."""

    class Tensor:
        def __init__(
            self, device: FakeDevice, kind: str, index: int | None, dtype: str, count: int
        ) -> None:
            self.device = types.SimpleNamespace(type=kind, index=index)
            self.dtype = f"torch.{dtype}"
            self.count = count
            self.address = device.allocate(count * 4)

        def data_ptr(self) -> int:
            return self.address

        def numel(self) -> int:
            return self.count

        def element_size(self) -> int:
            return {"float16": 2, "float32": 4}[self.dtype.removeprefix("torch.")]

        def is_contiguous(self) -> bool:
            return True

    module = types.ModuleType("torch")
    module.Tensor = Tensor
    module.cuda = types.SimpleNamespace(
        current_device=lambda: current_device,
        current_stream=lambda ordinal: types.SimpleNamespace(cuda_stream=stream),
    )
    return module


def test_resources_load_once_on_the_current_device(kernel: Kernel, device: FakeDevice) -> None:
    assert kernel.resources == KernelResources(32, 0, 0, 1024)
    assert kernel.resources.registers_per_thread == 32
    assert device.loads == [(0, "vector_add", 0)]


# -- refusals before launch ---------------------------------------------------------------------


REFUSALS = {
    "too small": (
        lambda d: ((halves(d, 999), halves(d, 1000), halves(d, 1000), 1000), {}),
        r"argument 'a' holds 1998 bytes; expected at least 2000 bytes \(1000 elements of 16 "
        r"bits, with n=1000\)",
    ),
    "float32 storage": (
        lambda d: ((halves(d, 8), device_array(d, (8,), "<f4"), halves(d, 8), 8), {}),
        r"argument 'b' has storage dtype float32; expected one of float16, int16, uint16 for "
        r"16-bit elements",
    ),
    "not contiguous": (
        lambda d: ((halves(d, 8), halves(d, 8), halves(d, 16, strides=(4,)), 8), {}),
        r"argument 'c' is not contiguous; expected a dense row-major array",
    ),
    "column-major": (
        lambda d: (
            (device_array(d, (4, 4), "<f2", strides=(2, 8)), halves(d, 16), halves(d, 16), 16),
            {},
        ),
        r"argument 'a' is not contiguous",
    ),
    "host memory": (
        lambda d: ((FakeCudaArray((8,), "<f2", 0x1000), halves(d, 8), halves(d, 8), 8), {}),
        r"argument 'a' is in host memory; expected memory of the current CUDA device \(cuda:0\)",
    ),
    "other device": (
        lambda d: ((halves(d, 8), halves(d, 8, ordinal=1), halves(d, 8), 8), {}),
        r"argument 'b' is in cuda:1; expected memory of the current CUDA device \(cuda:0\)",
    ),
    "misaligned": (
        lambda d: (
            (FakeCudaArray((8,), "<f2", d.allocate(64) + 2), halves(d, 8), halves(d, 8), 8),
            {},
        ),
        r"argument 'a' starts at address 0x[0-9a-f]+, not a multiple of 16 bytes",
    ),
    "big-endian": (
        lambda d: ((device_array(d, (8,), ">f2"), halves(d, 8), halves(d, 8), 8), {}),
        r"argument 'a' has storage dtype big-endian >f2",
    ),
    "masked": (
        lambda d: ((halves(d, 8, mask=object()), halves(d, 8), halves(d, 8), 8), {}),
        r"argument 'a' is a masked array",
    ),
    "malformed interface": (
        lambda d: (
            (types.SimpleNamespace(__cuda_array_interface__={"shape": (8,)}),) * 3,
            {"n": 8},
        ),
        r"argument 'a' has a malformed __cuda_array_interface__",
    ),
    "not an array": (
        lambda d: (([0.0] * 8, halves(d, 8), halves(d, 8), 8), {}),
        r"argument 'a' is a list; expected a CUDA array",
    ),
    "numpy on the CPU": (
        lambda d: ((np.zeros(8, np.float16), halves(d, 8), halves(d, 8), 8), {}),
        r"argument 'a' is in the CPU; expected memory of the current CUDA device",
    ),
    "DLPack on another GPU": (
        lambda d: (
            (FakeDLPackArray((2, 3), d.allocate(16), (8,), (2, 16, 1)), halves(d, 8)),
            {"c": halves(d, 8), "n": 8},
        ),
        r"argument 'a' is in cuda:3; expected memory of the current CUDA device \(cuda:0\)",
    ),
    "DLPack vector dtype": (
        lambda d: (
            (FakeDLPackArray((2, 0), d.allocate(16), (8,), (2, 16, 2)), halves(d, 8)),
            {"c": halves(d, 8), "n": 8},
        ),
        r"argument 'a' has DLPack dtype \(code 2, 16 bits, 2 lanes\); expected whole-byte",
    ),
    "n too large": (
        lambda d: ((halves(d, 8), halves(d, 8), halves(d, 8), 2**31), {}),
        r"argument 'n' = 2147483648 is out of range of int32_t; expected -2147483648 <= value "
        r"<= 2147483647",
    ),
    "n a float": (
        lambda d: ((halves(d, 8), halves(d, 8), halves(d, 8), 8.0), {}),
        r"argument 'n' = 8.0 \(float\) is not an integer",
    ),
    "n a bool": (
        lambda d: ((halves(d, 8), halves(d, 8), halves(d, 8), True), {}),
        r"argument 'n' = True is a bool",
    ),
    "n negative": (
        lambda d: ((halves(d, 8), halves(d, 8), halves(d, 8), -1), {}),
        r"num_elements n is -1 with n=-1; expected a non-negative count",
    ),
    "too many": (
        lambda d: ((halves(d, 8),) * 3 + (8, 9), {}),
        r"kernel 'vector_add' takes 4 arguments \(a, b, c, n\); got 5 positional arguments",
    ),
    "unknown name": (
        lambda d: ((halves(d, 8),) * 3, {"m": 8}),
        r"kernel 'vector_add' has no parameter 'm'; its parameters are a, b, c, n",
    ),
    "given twice": (
        lambda d: ((halves(d, 8),) * 3 + (8,), {"a": halves(d, 8)}),
        r"argument 'a' given both by position and by name",
    ),
    "missing": (
        lambda d: ((halves(d, 8),) * 3, {}),
        r"kernel 'vector_add': missing arguments n",
    ),
}


@pytest.mark.parametrize("case", REFUSALS, ids=list(REFUSALS))
def test_refused_before_anything_reaches_the_gpu(
    kernel: Kernel, device: FakeDevice, case: str
) -> None:
    make, match = REFUSALS[case]
    args, kwargs = make(device)
    with pytest.raises(LaunchError, match=match):
        kernel(*args, grid=1, **kwargs)
    assert device.launches == []
    assert device.loads == []


@pytest.fixture
def lowered_kernel(device: FakeDevice) -> Kernel:
    """vector_add(n, x, y, z) of f16, with the signature `backend.lower` gives it."""
    device.parameter_types = (ctypes.c_int32, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64)
    lowered = lower(vector_add())
    return Kernel(
        source=lowered.source,
        cubin=b"",
        arch="sm_80",
        entry=lowered.entry,
        params=lowered.params,
        block_threads=lowered.block_threads,
        device=device,
    )


@pytest.mark.parametrize("typestr", ["<f2", "<u2", "<i2", "|u1", "|i1"])
def test_a_lowered_kernel_takes_the_storage_the_interpreter_takes(
    lowered_kernel: Kernel, device: FakeDevice, typestr: str
) -> None:
    count = 64 // np.dtype(typestr).itemsize  # 32 f16 elements
    x, y, z = (device_array(device, (count,), typestr) for _ in range(3))
    lowered_kernel(32, x, y, z, grid=1)
    assert len(device.launches) == 1
    for param in lowered_kernel.params[1:]:
        assert param.storage_dtypes == storage_dtypes(dtypes.f16)


@pytest.mark.parametrize(
    ("make", "given"),
    [
        (lambda d: device_array(d, (32,), "<f4"), "float32"),
        (lambda d: device_array(d, (32,), "<i4"), "int32"),
        (lambda d: FakeDLPackArray((2, 0), d.allocate(64), (32,), (4, 16, 1)), "bfloat16"),
        (lambda d: device_array(d, (32,), ">f2"), "big-endian >f2"),
    ],
    ids=["float32", "int32", "bfloat16", "big-endian"],
)
def test_a_lowered_kernel_refuses_what_the_interpreter_refuses(
    lowered_kernel: Kernel, device: FakeDevice, make: object, given: str
) -> None:
    x, z = (device_array(device, (32,), "<f2") for _ in range(2))
    message = (
        rf"argument 'y' has storage dtype {given}; expected one of float16, uint16, int16, "
        r"uint8, int8 for f16 elements"
    )
    with pytest.raises(LaunchError, match=message):
        lowered_kernel(32, x, make(device), z, grid=1)
    assert device.launches == []


@pytest.mark.parametrize(
    ("grid", "match"),
    [
        (0, r"grid 0: dimension 0 is 0"),
        (-3, r"grid -3: dimension 0 is -3"),
        ((1, 2, 3, 4), r"grid \(1, 2, 3, 4\) has 4 dimensions"),
        ((), r"grid \(\) has 0 dimensions"),
        ((1, 65536), r"grid \(1, 65536\): dimension 1 is 65536"),
        ((2**31,), r"grid \(2147483648,\): dimension 0 is 2147483648"),
        ("8", r"grid '8': dimension 0 is not an integer"),
        (2.0, r"grid 2.0: dimension 0 is not an integer"),
        (True, r"grid True: dimension 0 is a bool"),
        ((1, None), r"dimension 1 is not an integer"),
    ],
)
def test_bad_grid_is_refused(kernel: Kernel, device: FakeDevice, grid: object, match: str) -> None:
    a, b, c = (halves(device, 8) for _ in range(3))
    with pytest.raises(LaunchError, match=match):
        kernel(a, b, c, 8, grid=grid)
    assert device.launches == []


@pytest.mark.parametrize(
    ("grid", "expected"),
    [
        (5, (5, 1, 1)),
        ((5,), (5, 1, 1)),
        ((5, 6), (5, 6, 1)),
        ([5, 6, 7], (5, 6, 7)),
        (np.int64(9), (9, 1, 1)),
        ((2**31 - 1, 65535, 65535), (2**31 - 1, 65535, 65535)),
    ],
)
def test_check_grid_pads_with_ones(grid: object, expected: tuple[int, int, int]) -> None:
    assert check_grid(grid) == expected


def test_block_larger_than_the_kernel_allows_is_refused(device: FakeDevice) -> None:
    device.max_threads_per_block = 256
    kernel = Kernel(
        source="",
        cubin=b"",
        arch="sm_80",
        entry="vector_add",
        params=vector_add_params(),
        block_threads=512,
        device=device,
    )
    a, b, c = (halves(device, 8) for _ in range(3))
    with pytest.raises(LaunchError, match=r"block_threads 512 exceeds the 256 threads per block"):
        kernel(a, b, c, 8, grid=1)
    assert device.launches == []


# -- on the GPU ---------------------------------------------------------------------------------


@pytest.fixture
def torch_cuda(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("LAYOUT_ALGEBRA_CACHE_DIR", str(tmp_path_factory.mktemp("gpu") / "cache"))
    return torch


@pytest.fixture
def gpu_vector_add(torch_cuda: types.ModuleType) -> Kernel:
    return build_kernel(VECTOR_ADD, "vector_add", vector_add_params(), 128)


@pytest.mark.gpu
def test_current_arch_matches_torch(torch_cuda: types.ModuleType) -> None:
    torch_cuda.zeros(1, device="cuda")
    expected = arch_for_compute_capability(*torch_cuda.cuda.get_device_capability())
    assert current_arch() == expected
    assert cuda_driver().current_ordinal() == torch_cuda.cuda.current_device()


@pytest.mark.gpu
def test_vector_add_on_torch_tensors(torch_cuda: types.ModuleType, gpu_vector_add: Kernel) -> None:
    torch = torch_cuda
    n = 10_000
    generator = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, device="cuda", dtype=torch.float16, generator=generator)
    b = torch.randn(n, device="cuda", dtype=torch.float16, generator=generator)
    c = torch.full((n,), float("nan"), device="cuda", dtype=torch.float16)
    gpu_vector_add(a, b, c, n, grid=(n + 127) // 128)
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)
    resources = gpu_vector_add.resources
    assert resources.registers_per_thread > 0
    assert resources.max_threads_per_block >= 128
    assert resources.local_bytes == 0


@pytest.mark.gpu
def test_vector_add_through_array_interface_and_dlpack(
    torch_cuda: types.ModuleType, gpu_vector_add: Kernel
) -> None:
    torch = torch_cuda
    n = 4096
    a = torch.arange(n, device="cuda").to(torch.float16)
    b = torch.ones(n, device="cuda", dtype=torch.float16)
    c = torch.zeros(n, device="cuda", dtype=torch.float16)
    through_interface = types.SimpleNamespace(__cuda_array_interface__=a.__cuda_array_interface__)

    class OnlyDLPack:
        def __dlpack__(self, stream: object = None) -> object:
            return b.__dlpack__(stream=stream)

        def __dlpack_device__(self) -> tuple[int, int]:
            return b.__dlpack_device__()

    torch.cuda.synchronize()
    gpu_vector_add(through_interface, OnlyDLPack(), c, n, grid=n // 128)
    torch.cuda.synchronize()
    assert torch.equal(c, a + 1)


@pytest.mark.gpu
def test_array_interface_producer_stream_is_waited_for(
    torch_cuda: types.ModuleType, gpu_vector_add: Kernel
) -> None:
    torch = torch_cuda
    n = 1 << 20
    a = torch.zeros(n, device="cuda", dtype=torch.float16)
    b = torch.ones(n, device="cuda", dtype=torch.float16)
    c = torch.zeros(n, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # the fill lands well after the launch is queued
        a.fill_(2)

    def interface(tensor: object, stream: int | None) -> types.SimpleNamespace:
        return types.SimpleNamespace(
            __cuda_array_interface__={**tensor.__cuda_array_interface__, "stream": stream}
        )

    gpu_vector_add(
        interface(a, side.cuda_stream), interface(b, None), interface(c, None), n, grid=n // 128
    )
    torch.cuda.synchronize()
    assert torch.equal(c, torch.full_like(c, 3))


@pytest.mark.gpu
def test_too_small_tensor_is_refused_before_launch(
    torch_cuda: types.ModuleType, gpu_vector_add: Kernel
) -> None:
    torch = torch_cuda
    a = torch.ones(1000, device="cuda", dtype=torch.float16)
    b = torch.ones(1000, device="cuda", dtype=torch.float16)
    c = torch.zeros(999, device="cuda", dtype=torch.float16)
    with pytest.raises(LaunchError, match=r"'c' holds 1998 bytes; expected at least 2000"):
        gpu_vector_add(a, b, c, 1000, grid=8)
    torch.cuda.synchronize()
    assert torch.count_nonzero(c).item() == 0


@pytest.mark.gpu
def test_cpu_and_host_memory_are_refused(
    torch_cuda: types.ModuleType, gpu_vector_add: Kernel
) -> None:
    torch = torch_cuda
    a = torch.ones(64, device="cuda", dtype=torch.float16)
    cpu = torch.ones(64, dtype=torch.float16)
    with pytest.raises(LaunchError, match=r"'b' is in cpu memory; expected memory of the current"):
        gpu_vector_add(a, cpu, a, 64, grid=1)
    pinned = torch.ones(64, dtype=torch.float16).pin_memory()
    host_interface = types.SimpleNamespace(
        __cuda_array_interface__={
            "shape": (64,),
            "typestr": "<f2",
            "data": (pinned.data_ptr(), False),
            "version": 3,
        }
    )
    with pytest.raises(LaunchError, match=r"'b' is in host memory; expected memory of the current"):
        gpu_vector_add(a, host_interface, a, 64, grid=1)


@pytest.mark.gpu
def test_dynamic_shared_memory_over_48_kib(torch_cuda: types.ModuleType) -> None:
    torch = torch_cuda
    per_block = 32768  # floats: 128 KiB of dynamic shared memory per block
    blocks = 4
    params = (
        KernelArrayParam("source", 32, per_block * blocks, ("float32",)),
        KernelArrayParam("target", 32, per_block * blocks, ("float32",)),
        KernelIntParam("per_block"),
    )
    kernel = build_kernel(SHARED_REVERSE, "shared_reverse", params, 256, shared_bytes=per_block * 4)
    source = torch.randn(blocks, per_block, device="cuda")
    target = torch.zeros_like(source)
    kernel(source, target, per_block, grid=blocks)
    torch.cuda.synchronize()
    assert torch.equal(target, source.flip(1))
    assert kernel.resources.static_shared_bytes == 0


def test_resident_blocks_ask_the_device(device: FakeDevice) -> None:
    kernel = vector_add_kernel(device, block_threads=96, shared_bytes=512)
    assert kernel.resident_blocks() == FakeDevice.RESIDENT_BLOCKS
    assert device.counted == [(96, 512)]
    assert [entry for _, entry, _ in device.loads] == ["vector_add"]

"""The CUDA driver, as the backend needs it: the current device, module loading and launch.

Everything here goes through `cuda.bindings.driver` (imported only when first needed, so the
backend imports and compiles on a machine without a GPU). Every driver call's `CUresult` is
checked; a failure raises `DriverError` naming the call and the driver's error name and text.

Kernels run in the primary context of their device, retained once per device for the life of the
process and pushed around each driver call, so the caller's current context is left as it was.
This is the context PyTorch and the CUDA runtime use, so their pointers and streams are valid in
it.

`Device` is the interface `backend.kernel.Kernel` launches through; `CudaDriver` implements it on
the real driver, and tests substitute a fake to check arguments on a machine without a GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from backend.errors import DriverError, LaunchError, NoDeviceError

DEFAULT_SHARED_BYTES = 48 * 1024
"""Shared memory per block (static plus dynamic) a kernel may use without opting in."""

LEGACY_STREAM = 0
"""The handle of the legacy default stream, the launch stream when no tensor says otherwise."""


@dataclass(frozen=True)
class KernelResources:
    """What one loaded kernel uses, as the driver reports it (cuFuncGetAttribute).

    `registers_per_thread`, `static_shared_bytes` (per block, besides the dynamic shared memory
    given at launch), `local_bytes` (per thread: spills and local arrays) and
    `max_threads_per_block` (the largest block this kernel can be launched with on its device).
    """

    registers_per_thread: int
    static_shared_bytes: int
    local_bytes: int
    max_threads_per_block: int


@dataclass(frozen=True)
class LoadedFunction:
    """A kernel loaded on one device: the device `ordinal`, the driver's function `handle` and
    its `resources`."""

    ordinal: int
    handle: object
    resources: KernelResources


class Device(Protocol):
    """The driver operations a kernel launch needs; `CudaDriver` is the real one."""

    def current_ordinal(self) -> int:
        """The ordinal of the device the calling thread works on."""
        ...

    def pointer_ordinal(self, address: int) -> int | None:
        """The ordinal of the device whose memory holds `address`, or None when it is not
        device memory (plain or pinned host memory, or an address CUDA does not know)."""
        ...

    def load(
        self, ordinal: int, cubin: bytes, entry: str, dynamic_shared_bytes: int
    ) -> LoadedFunction:
        """Load `cubin` on device `ordinal`, find kernel `entry`, and let it use
        `dynamic_shared_bytes` of dynamic shared memory per block."""
        ...

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
        """Enqueue `function` on `stream` after the work already queued on each of
        `wait_streams`; `parameters_address` is the address of the array of pointers to the
        argument values (0 for a kernel without parameters); `programmatic`: with programmatic
        stream serialization (the kernel may start before the one before it has finished)."""
        ...

    def resident_blocks(
        self, function: LoadedFunction, block_threads: int, dynamic_shared_bytes: int
    ) -> int:
        """How many of `function`'s blocks, of `block_threads` threads and
        `dynamic_shared_bytes` of dynamic shared memory each, one SM of its device holds at
        once."""
        ...

    def encode_tensor_map(
        self, address: int, element_bits: int, arguments: Mapping[str, Any]
    ) -> list[int]:
        """The 16 words of a tiled tensor map of the device memory at `address`, its elements
        `element_bits` wide, with the dimensions, strides, box and swizzle of `arguments`
        (`layout_algebra.tma_box.TmaBox.tensor_map_arguments`); zeros outside the tensor."""
        ...


def arch_for_compute_capability(major: int, minor: int) -> str:
    """The architecture the backend compiles for on a device of compute capability major.minor.

    `sm_90a` for 9.0 (Hopper's architecture-specific features: wgmma, setmaxnreg, ...), else
    `sm_<major><minor>`, e.g. (8, 0) -> `sm_80`, (8, 9) -> `sm_89`, (12, 0) -> `sm_120`.
    """
    if (major, minor) == (9, 0):
        return "sm_90a"
    return f"sm_{major}{minor}"


def _driver() -> ModuleType:
    """`cuda.bindings.driver`, or `NoDeviceError` saying how to install it."""
    try:
        from cuda.bindings import driver
    except ImportError as error:
        raise NoDeviceError(
            "running kernels needs cuda-bindings: pip install 'layout-algebra[cuda]'"
        ) from error
    return driver


def _describe(driver: ModuleType, error: object) -> str:
    """`NAME: text` for a CUresult."""
    _, name = driver.cuGetErrorName(error)
    _, text = driver.cuGetErrorString(error)
    return f"{name.decode(errors='replace')}: {text.decode(errors='replace')}"


def _checked(driver: ModuleType, call: str, result: tuple[object, ...]) -> object:
    """The value a driver call returned, or `DriverError` naming `call` when it failed."""
    error = result[0]
    if error != driver.CUresult.CUDA_SUCCESS:
        raise DriverError(f"{call} failed: {_describe(driver, error)}")
    return result[1] if len(result) == 2 else None


class CudaDriver:
    """`Device` on the real CUDA driver (one per process: `cuda_driver()`)."""

    def __init__(self) -> None:
        self._initialized = False
        self._contexts: dict[int, object] = {}
        # Programmatic launch configurations by (grid, block, shared bytes, stream): building
        # one through the bindings costs several microseconds, as much as a small launch.
        self._programmatic_configs: dict[tuple[object, ...], object] = {}

    def _initialize(self) -> ModuleType:
        """The driver module after cuInit; `NoDeviceError` without a driver or a device."""
        driver = _driver()
        if self._initialized:
            return driver
        try:
            (error,) = driver.cuInit(0)
        except RuntimeError as failure:
            raise NoDeviceError(
                f"no CUDA driver: {failure}; to compile without a GPU pass arch= "
                "explicitly, e.g. arch='sm_90a'"
            ) from failure
        if error != driver.CUresult.CUDA_SUCCESS:
            raise NoDeviceError(
                f"no usable CUDA device (cuInit failed: {_describe(driver, error)}); to compile "
                "without a GPU pass arch= explicitly, e.g. arch='sm_90a'"
            )
        self._initialized = True
        return driver

    def current_ordinal(self) -> int:
        """The device of the calling thread's current context, or device 0 when none is current.

        Raises `NoDeviceError` when the driver reports no device.
        """
        driver = self._initialize()
        context = _checked(driver, "cuCtxGetCurrent", driver.cuCtxGetCurrent())
        if context is not None and int(context) != 0:
            return int(_checked(driver, "cuCtxGetDevice", driver.cuCtxGetDevice()))
        count = _checked(driver, "cuDeviceGetCount", driver.cuDeviceGetCount())
        if count == 0:
            raise NoDeviceError("the CUDA driver reports no device")
        return 0

    def compute_capability(self, ordinal: int) -> tuple[int, int]:
        """(major, minor) compute capability of device `ordinal`."""
        driver = self._initialize()
        device = _checked(driver, "cuDeviceGet", driver.cuDeviceGet(ordinal))
        attribute = driver.CUdevice_attribute
        major = _checked(
            driver,
            "cuDeviceGetAttribute",
            driver.cuDeviceGetAttribute(
                attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device
            ),
        )
        minor = _checked(
            driver,
            "cuDeviceGetAttribute",
            driver.cuDeviceGetAttribute(
                attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device
            ),
        )
        return int(major), int(minor)

    def pointer_ordinal(self, address: int) -> int | None:
        """See `Device.pointer_ordinal` (asks cuPointerGetAttribute for the memory type and
        device ordinal)."""
        driver = self._initialize()
        if address == 0:
            return None
        attribute = driver.CUpointer_attribute
        pointer = driver.CUdeviceptr(address)
        error, memory_type = driver.cuPointerGetAttribute(
            attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, pointer
        )
        if error != driver.CUresult.CUDA_SUCCESS:
            return None
        if memory_type != driver.CUmemorytype.CU_MEMORYTYPE_DEVICE:
            return None
        ordinal = _checked(
            driver,
            "cuPointerGetAttribute",
            driver.cuPointerGetAttribute(attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, pointer),
        )
        return int(ordinal)

    def _primary_context(self, ordinal: int) -> object:
        """The retained primary context of device `ordinal`."""
        driver = self._initialize()
        if ordinal not in self._contexts:
            device = _checked(driver, "cuDeviceGet", driver.cuDeviceGet(ordinal))
            self._contexts[ordinal] = _checked(
                driver, "cuDevicePrimaryCtxRetain", driver.cuDevicePrimaryCtxRetain(device)
            )
        return self._contexts[ordinal]

    @contextlib.contextmanager
    def _in_context(self, ordinal: int) -> Iterator[ModuleType]:
        """Run the body with device `ordinal`'s primary context pushed; pops it afterwards."""
        driver = self._initialize()
        context = self._primary_context(ordinal)
        _checked(driver, "cuCtxPushCurrent", driver.cuCtxPushCurrent(context))
        try:
            yield driver
        finally:
            _checked(driver, "cuCtxPopCurrent", driver.cuCtxPopCurrent())

    def load(
        self, ordinal: int, cubin: bytes, entry: str, dynamic_shared_bytes: int
    ) -> LoadedFunction:
        """See `Device.load`. The module stays loaded for the life of the process.

        Raises `LaunchError` when the kernel's static plus dynamic shared memory exceeds what
        the device allows per block (cuFuncSetAttribute raises the 48 KiB default limit
        otherwise), `DriverError` when the driver refuses the image or has no such kernel.
        """
        with self._in_context(ordinal) as driver:
            module = _checked(driver, "cuModuleLoadData", driver.cuModuleLoadData(cubin))
            try:
                function = _checked(
                    driver,
                    "cuModuleGetFunction",
                    driver.cuModuleGetFunction(module, entry.encode("utf-8")),
                )
                resources = self._resources(driver, function)
                total = resources.static_shared_bytes + dynamic_shared_bytes
                if total > DEFAULT_SHARED_BYTES:
                    self._allow_shared(
                        driver, ordinal, function, entry, resources, dynamic_shared_bytes
                    )
            except BaseException:
                driver.cuModuleUnload(module)
                raise
        return LoadedFunction(ordinal, function, resources)

    def resident_blocks(
        self, function: LoadedFunction, block_threads: int, dynamic_shared_bytes: int
    ) -> int:
        """See `Device.resident_blocks`: the driver's count
        (cuOccupancyMaxActiveBlocksPerMultiprocessor; `backend.occupancy` computes the same
        without a GPU). Raises `DriverError` when the driver refuses the query."""
        with self._in_context(function.ordinal) as driver:
            return int(
                _checked(
                    driver,
                    "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                    driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                        function.handle, block_threads, dynamic_shared_bytes
                    ),
                )
            )

    @staticmethod
    def _resources(driver: ModuleType, function: object) -> KernelResources:
        """The driver's report of what `function` uses."""
        attribute = driver.CUfunction_attribute

        def get(which: object) -> int:
            return int(
                _checked(driver, "cuFuncGetAttribute", driver.cuFuncGetAttribute(which, function))
            )

        return KernelResources(
            registers_per_thread=get(attribute.CU_FUNC_ATTRIBUTE_NUM_REGS),
            static_shared_bytes=get(attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
            local_bytes=get(attribute.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
            max_threads_per_block=get(attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        )

    def _allow_shared(
        self,
        driver: ModuleType,
        ordinal: int,
        function: object,
        entry: str,
        resources: KernelResources,
        dynamic_shared_bytes: int,
    ) -> None:
        """Opt `function` in to `dynamic_shared_bytes` beyond the 48 KiB default."""
        device = _checked(driver, "cuDeviceGet", driver.cuDeviceGet(ordinal))
        limit = _checked(
            driver,
            "cuDeviceGetAttribute",
            driver.cuDeviceGetAttribute(
                driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                device,
            ),
        )
        if resources.static_shared_bytes + dynamic_shared_bytes > int(limit):
            raise LaunchError(
                f"kernel {entry!r} needs {resources.static_shared_bytes} static + "
                f"{dynamic_shared_bytes} dynamic shared bytes per block; device {ordinal} "
                f"allows at most {int(limit)}"
            )
        _checked(
            driver,
            "cuFuncSetAttribute",
            driver.cuFuncSetAttribute(
                function,
                driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                dynamic_shared_bytes,
            ),
        )

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
        """See `Device.launch` (cuStreamWaitEvent on an event recorded on each wait stream, then
        cuLaunchKernel, or cuLaunchKernelEx with `programmatic_launch_config` when
        `programmatic`). The launch is asynchronous: a fault inside the kernel surfaces at the
        next synchronizing call."""
        with self._in_context(function.ordinal) as driver:
            launch_stream = driver.CUstream(stream)
            for other in wait_streams:
                event = _checked(
                    driver,
                    "cuEventCreate",
                    driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING),
                )
                try:
                    _checked(
                        driver, "cuEventRecord", driver.cuEventRecord(event, driver.CUstream(other))
                    )
                    _checked(
                        driver,
                        "cuStreamWaitEvent",
                        driver.cuStreamWaitEvent(launch_stream, event, 0),
                    )
                finally:
                    _checked(driver, "cuEventDestroy", driver.cuEventDestroy(event))
            if programmatic:
                key = (tuple(grid), tuple(block), dynamic_shared_bytes, int(stream))
                config = self._programmatic_configs.get(key)
                if config is None:
                    config = programmatic_launch_config(
                        driver, grid, block, dynamic_shared_bytes, launch_stream
                    )
                    if len(self._programmatic_configs) >= 1024:
                        self._programmatic_configs.clear()
                    self._programmatic_configs[key] = config
                _checked(
                    driver,
                    "cuLaunchKernelEx",
                    driver.cuLaunchKernelEx(config, function.handle, parameters_address, 0),
                )
                return
            _checked(
                driver,
                "cuLaunchKernel",
                driver.cuLaunchKernel(
                    function.handle,
                    *grid,
                    *block,
                    dynamic_shared_bytes,
                    launch_stream,
                    parameters_address,
                    0,
                ),
            )

    def encode_tensor_map(
        self, address: int, element_bits: int, arguments: Mapping[str, Any]
    ) -> list[int]:
        """See `Device.encode_tensor_map` (``cuTensorMapEncodeTiled``: the elements as unsigned
        integers of their width, moved bit for bit; no interleave; L2 promotion of 128 bytes;
        zeros outside). Raises `DriverError` naming the arguments the driver refused."""
        driver = self._initialize()
        types = driver.CUtensorMapDataType
        data_type = {
            8: types.CU_TENSOR_MAP_DATA_TYPE_UINT8,
            16: types.CU_TENSOR_MAP_DATA_TYPE_UINT16,
            32: types.CU_TENSOR_MAP_DATA_TYPE_UINT32,
            64: types.CU_TENSOR_MAP_DATA_TYPE_UINT64,
        }[element_bits]
        swizzles = driver.CUtensorMapSwizzle
        swizzle = {
            "none": swizzles.CU_TENSOR_MAP_SWIZZLE_NONE,
            "32B": swizzles.CU_TENSOR_MAP_SWIZZLE_32B,
            "64B": swizzles.CU_TENSOR_MAP_SWIZZLE_64B,
            "128B": swizzles.CU_TENSOR_MAP_SWIZZLE_128B,
        }[arguments["swizzle"]]
        wide, narrow = driver.cuuint64_t, driver.cuuint32_t
        result = driver.cuTensorMapEncodeTiled(
            data_type,
            narrow(arguments["rank"]),
            address,
            [wide(extent) for extent in arguments["global_dim"]],
            [wide(stride) for stride in arguments["global_strides"]],
            [narrow(extent) for extent in arguments["box_dim"]],
            [narrow(stride) for stride in arguments["element_strides"]],
            driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
        if result[0] != driver.CUresult.CUDA_SUCCESS:
            raise DriverError(
                f"cuTensorMapEncodeTiled of {dict(arguments)} at {address:#x} failed: "
                f"{_describe(driver, result[0])}"
            )
        return [int(word) for word in result[1].opaque]


def programmatic_launch_config(
    driver: Any,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    dynamic_shared_bytes: int,
    stream: Any,
) -> Any:
    """The `driver` module's ``CUlaunchConfig`` of a launch with programmatic stream
    serialization: the kernel may start before the kernel before it on `stream` has finished
    (its ``griddepcontrol.wait`` then waits for that kernel's memory). Builds the structure
    only; needs no GPU."""
    attribute = driver.CUlaunchAttribute()
    attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attribute.value.programmaticStreamSerializationAllowed = 1
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = dynamic_shared_bytes
    config.hStream = stream
    config.attrs = [attribute]
    config.numAttrs = 1
    return config


_CUDA_DRIVER = CudaDriver()


def cuda_driver() -> CudaDriver:
    """The process-wide `CudaDriver`."""
    return _CUDA_DRIVER


def current_arch() -> str:
    """The architecture of the current CUDA device (`arch_for_compute_capability`).

    The current device is the one of the calling thread's current context, else device 0.
    Raises `NoDeviceError` when there is no driver or no device: pass `arch=` explicitly then.
    """
    driver = cuda_driver()
    return arch_for_compute_capability(*driver.compute_capability(driver.current_ordinal()))

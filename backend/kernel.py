"""A compiled kernel: its parameter signature, the checking of every argument, and its launch.

A `Kernel` holds a CUDA C++ source, its CUBIN for one architecture, the name of its
`extern "C" __global__` entry, and a signature: one `KernelArrayParam` or `KernelIntParam` per
kernel parameter, in the order of the C signature (the `Kernel` prefix tells them from the IR's
`ir.ArrayParam` and `ir.IntParam`, which `backend.lower` turns into these). Arrays travel as
8-byte device pointers, ints as the C integer type of their `KernelIntParam`.

    n = var("n")                           # layout_algebra.symbolic
    halves = [KernelArrayParam(name, 16, n) for name in ("a", "b", "c")]
    params = (*halves, KernelIntParam("n"))
    kernel = build_kernel(source, "vector_add", params, block_threads=128)
    kernel(a, b, c, 1000, grid=8)          # or kernel(a, b, c=c, n=1000, grid=(8, 1, 1))

Every argument is checked before anything reaches the GPU, and each failure raises `LaunchError`
naming the parameter, the value and what was expected:
- ints: an integer (not a bool) in range of the parameter's C type and of its `lo`, `hi` bounds,
  and equal to its `constant` when it is a compile-time constant;
- arrays: a torch tensor, an object with `__cuda_array_interface__` (v2 or v3), or a DLPack
  producer (`__dlpack__` / `__dlpack_device__`); in memory of the current CUDA device; a storage
  dtype the parameter accepts (for a parameter lowered from a program, the rule the interpreter
  applies too, `ir.arguments.storage_dtypes`: the element type's own dtype, integers of its
  width holding codes, or bytes of the bitstream); contiguous (row-major and dense); at least
  ceil(num_elements * element_bits / 8) bytes, with `num_elements` evaluated on the int
  arguments when it is an expression; the start address a multiple of the parameter's
  alignment (16 bytes by default: the generated code may use 16-byte vector accesses);
- grid: a positive int or a tuple of 1 to 3 positive ints, x < 2**31, y and z < 2**16. A
  kernel built with a declared grid (`Kernel(grid=...)`: x, y, z expressions over its int
  parameters, from a program's `ir.Program.grid`) computes it from the int arguments when the
  call gives none, and refuses a call whose grid differs, or a computed extent below 1
  (`ir.arguments.launch_grid`); without one, the grid is required.

The current device is torch's current device when any argument is a torch tensor, else the
device of the calling thread's current CUDA context, else device 0. The launch goes to torch's
current stream of that device when any argument is a torch tensor, else to the legacy default
stream; a DLPack producer is told that stream, and a `__cuda_array_interface__` stream other than
it is waited for with an event. The launch is asynchronous.

The kernel is loaded lazily, on the first launch or `resources` query, once per device.
"""

from __future__ import annotations

import ctypes
import operator
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from backend.arrays import ArrayView, array_view
from backend.cache import CubinCache
from backend.cuda_codegen import PROGRAMMATIC_LAUNCH_ARCH
from backend.device import (
    LEGACY_STREAM,
    Device,
    KernelResources,
    LoadedFunction,
    cuda_driver,
    current_arch,
)
from backend.errors import CompilationError, LaunchError
from backend.nvrtc import compile_cached, cubin_kernels, cubin_registers, cubin_static_shared
from backend.occupancy import SM_90, Residency, SmLimits, resident_blocks
from backend.tensor_core import arch_number
from ir.arguments import (
    STORAGE_DTYPE_BITS,
    bind_arguments,
    check_storage,
    grid_text,
    launch_grid,
)
from ir.arguments import check_grid as check_arguments_grid
from ir.arguments import storage_dtypes as storage_dtypes_of
from ir.dtypes import DataType
from layout_algebra.errors import LayoutError
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.symbolic import Expr, as_expr
from layout_algebra.tma_box import TmaBox

MAX_BLOCK_THREADS = 1024
MAX_ENCODED_MAPS = 1024
"""The most encoded tensor maps a kernel keeps (by address, extents and strides)."""
RESERVED_NAMES = frozenset({"grid"})
"""Names a parameter may not take: they are keywords of `Kernel.__call__`."""


def default_storage_dtypes(element_bits: int) -> tuple[str, ...]:
    """The storage dtypes an array of `element_bits`-bit elements accepts by default.

    Elements of 8, 16, 32 or 64 bits: every storage dtype of that width except bool (so an f16
    array accepts float16, bfloat16, int16 and uint16 storage). Any other width (packed
    sub-byte elements, or odd widths): bytes, `uint8` and `int8`.
    """
    if element_bits in (8, 16, 32, 64):
        return tuple(
            name
            for name, bits in STORAGE_DTYPE_BITS.items()
            if bits == element_bits and name != "bool"
        )
    return ("uint8", "int8")


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise LaunchError(f"{what} name {name!r} is not a C identifier")
    if name in RESERVED_NAMES:
        raise LaunchError(
            f"{what} name {name!r} is reserved (a keyword of the kernel call); choose another"
        )
    return name


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class KernelArrayParam:
    """A pointer parameter: an array of `num_elements` elements of `element_bits` bits each,
    stored as a dense little-endian bitstream (element k in bits [k*b, (k+1)*b)).

    `num_elements`: a non-negative int, or a symbolic `Expr` over the int parameters' names.
    `storage_dtypes`: the dtypes an argument may have; () means `ir.arguments.storage_dtypes`
    of `dtype` when it is given, else `default_storage_dtypes` of the width.
    `alignment`: the byte alignment the start address must have (a power of two).
    `dtype`: the IR data type of the elements when the kernel was lowered from a program (its
    `element_bits` bits), None for a kernel written by hand.
    Construction raises `LaunchError` for an invalid field.
    """

    name: str
    element_bits: int
    num_elements: int | Expr
    storage_dtypes: tuple[str, ...] = ()
    alignment: int = 16
    dtype: DataType | None = None

    def __post_init__(self) -> None:
        _check_name(self.name, "array parameter")
        if not _is_int(self.element_bits) or not 1 <= self.element_bits <= 64:
            raise LaunchError(
                f"array parameter {self.name!r}: element_bits {self.element_bits!r} is not an "
                "int from 1 to 64"
            )
        if _is_int(self.num_elements):
            if self.num_elements < 0:
                raise LaunchError(
                    f"array parameter {self.name!r}: num_elements {self.num_elements} is negative"
                )
        elif not isinstance(self.num_elements, Expr):
            raise LaunchError(
                f"array parameter {self.name!r}: num_elements {self.num_elements!r} is neither "
                "an int nor a layout_algebra.symbolic.Expr"
            )
        if self.dtype is not None and (
            not isinstance(self.dtype, DataType) or self.dtype.nbits != self.element_bits
        ):
            raise LaunchError(
                f"array parameter {self.name!r}: dtype {self.dtype!r} is not an ir.dtypes "
                f"DataType of element_bits={self.element_bits} bits"
            )
        if self.dtype is not None:
            default = storage_dtypes_of(self.dtype)
        else:
            default = default_storage_dtypes(self.element_bits)
        storage = tuple(self.storage_dtypes) or default
        unknown = [dtype for dtype in storage if dtype not in STORAGE_DTYPE_BITS]
        if unknown:
            raise LaunchError(
                f"array parameter {self.name!r}: unknown storage dtypes {unknown}; expected "
                f"names from {sorted(STORAGE_DTYPE_BITS)}"
            )
        object.__setattr__(self, "storage_dtypes", storage)
        if (
            not _is_int(self.alignment)
            or self.alignment < 1
            or self.alignment & (self.alignment - 1)
        ):
            raise LaunchError(
                f"array parameter {self.name!r}: alignment {self.alignment!r} is not a power of two"
            )

    def count(self, ints: Mapping[str, int]) -> int:
        """`num_elements` at the int arguments `ints`; `LaunchError` when it is negative or
        cannot be evaluated (e.g. a division by an int argument that is zero)."""
        if _is_int(self.num_elements):
            return self.num_elements
        try:
            value = operator.index(self.num_elements.evaluate(ints))
        except ArithmeticError as error:
            raise LaunchError(
                f"array parameter {self.name!r}: num_elements {self.num_elements} cannot be "
                f"evaluated with {_format_ints(ints)}: {error}"
            ) from error
        if value < 0:
            raise LaunchError(
                f"array parameter {self.name!r}: num_elements {self.num_elements} is {value} "
                f"with {_format_ints(ints)}; expected a non-negative count"
            )
        return value

    def required_bytes(self, ints: Mapping[str, int]) -> int:
        """ceil(count(ints) * element_bits / 8): the bytes an argument must at least hold."""
        return -(-self.count(ints) * self.element_bits // 8)


_INT_TYPES = {
    (8, True): ctypes.c_int8,
    (8, False): ctypes.c_uint8,
    (16, True): ctypes.c_int16,
    (16, False): ctypes.c_uint16,
    (32, True): ctypes.c_int32,
    (32, False): ctypes.c_uint32,
    (64, True): ctypes.c_int64,
    (64, False): ctypes.c_uint64,
}


@dataclass(frozen=True)
class KernelIntParam:
    """An integer parameter passed by value as the C type `int<bits>_t` (`signed`) or
    `uint<bits>_t`; `bits` is 8, 16, 32 or 64.

    `lo` and `hi` (inclusive, None for the type's own limit) are the values the generated code
    was compiled for, e.g. the bounds of the IR variable that simplification relied on; an
    argument outside them is refused. Likewise an argument that is not a multiple of
    `multiple_of` (a positive int; the code may rely on it for aligned vector accesses).
    `constant`, when not None, is the one value the code was compiled for (a compile-time
    constant, `ir.specialize`): any other argument is refused, naming both values; it must be
    an accepted argument itself. Construction raises `LaunchError` for an invalid field.
    """

    name: str
    bits: int = 32
    signed: bool = True
    lo: int | None = None
    hi: int | None = None
    multiple_of: int = 1
    constant: int | None = None

    def __post_init__(self) -> None:
        _check_name(self.name, "int parameter")
        if (self.bits, self.signed) not in _INT_TYPES or not isinstance(self.signed, bool):
            raise LaunchError(
                f"int parameter {self.name!r}: bits={self.bits!r}, signed={self.signed!r}; "
                "expected bits in (8, 16, 32, 64) and signed a bool"
            )
        for which, bound in (("lo", self.lo), ("hi", self.hi)):
            if bound is not None and not (
                _is_int(bound) and self.min_value <= bound <= self.max_value
            ):
                raise LaunchError(
                    f"int parameter {self.name!r}: {which}={bound!r} is not an int in the range "
                    f"of {self.c_type_name} [{self.min_value}, {self.max_value}]"
                )
        if not _is_int(self.multiple_of) or self.multiple_of < 1:
            raise LaunchError(
                f"int parameter {self.name!r}: multiple_of={self.multiple_of!r}; expected a "
                "positive int"
            )
        if self.least > self.greatest:
            raise LaunchError(
                f"int parameter {self.name!r}: lo={self.lo} > hi={self.hi}; expected lo <= hi"
            )
        if self.constant is not None and not (
            _is_int(self.constant)
            and self.least <= self.constant <= self.greatest
            and self.constant % self.multiple_of == 0
        ):
            raise LaunchError(
                f"int parameter {self.name!r}: constant={self.constant!r} is not an int within "
                f"[{self.least}, {self.greatest}] and a multiple of {self.multiple_of}"
            )

    @property
    def c_type_name(self) -> str:
        """The C type, e.g. `int32_t`."""
        return f"{'' if self.signed else 'u'}int{self.bits}_t"

    @property
    def min_value(self) -> int:
        """The least value of the C type."""
        return -(2 ** (self.bits - 1)) if self.signed else 0

    @property
    def max_value(self) -> int:
        """The greatest value of the C type."""
        return 2 ** (self.bits - 1) - 1 if self.signed else 2**self.bits - 1

    @property
    def least(self) -> int:
        """The least accepted argument: `lo`, else the C type's least value."""
        return self.min_value if self.lo is None else self.lo

    @property
    def greatest(self) -> int:
        """The greatest accepted argument: `hi`, else the C type's greatest value."""
        return self.max_value if self.hi is None else self.hi

    def check(self, value: object) -> int:
        """`value` as an int when it is an integer (not a bool) in range of the C type, equal
        to `constant` when that is set, within [least, greatest] and a multiple of
        `multiple_of`; else `LaunchError`."""
        if isinstance(value, bool | np.bool_):
            raise LaunchError(
                f"argument {self.name!r} = {value!r} is a bool; expected an integer for the "
                f"{self.c_type_name} parameter"
            )
        try:
            integer = operator.index(value)
        except TypeError:
            raise LaunchError(
                f"argument {self.name!r} = {value!r} ({type(value).__name__}) is not an integer; "
                f"expected an int for the {self.c_type_name} parameter"
            ) from None
        if not self.min_value <= integer <= self.max_value:
            raise LaunchError(
                f"argument {self.name!r} = {integer} is out of range of {self.c_type_name}; "
                f"expected {self.min_value} <= value <= {self.max_value}"
            )
        if self.constant is not None and integer != self.constant:
            raise LaunchError(
                f"argument {self.name!r} = {integer} differs from {self.constant}, the value of "
                f"the compile-time constant {self.name!r} the kernel was compiled with; compile "
                f"again with constants={{{self.name!r}: {integer}}} to run with it"
            )
        if not self.least <= integer <= self.greatest:
            raise LaunchError(
                f"argument {self.name!r} = {integer} is outside the range the kernel was "
                f"compiled for; expected {self.least} <= value <= {self.greatest}"
            )
        if integer % self.multiple_of:
            raise LaunchError(
                f"argument {self.name!r} = {integer} is not a multiple of {self.multiple_of}, "
                "which the kernel was compiled for"
            )
        return integer


Param = KernelArrayParam | KernelIntParam


@dataclass(frozen=True)
class KernelTensorMapParam:
    """A tensor map (CUDA's 128-byte ``CUtensorMap``) passed after the signature's parameters,
    which the launch encodes for a kernel's bulk tensor copies (`backend.bulk_copy`): the
    elements of `element_bits` bits of array argument `array` as a tensor of extents `shape`
    and strides `strides` (elements, the view's order; ints or `Expr`s over the int
    parameters), read in boxes of `box` extents (the same order) whose dimensions, outermost
    first, are `order` (None: the identity; the stride along ``order[-1]`` is 1), with the
    swizzle mode `swizzle` ("none", "32B", "64B" or "128B"), zeros outside the tensor. The
    launch raises `LaunchError` where the driver's rules are not met (a stride that is not a
    multiple of 16 bytes, an extent past 2^32)."""

    name: str
    array: str
    element_bits: int
    shape: tuple[int | Expr, ...]
    strides: tuple[int | Expr, ...]
    box: tuple[int, ...]
    swizzle: str
    order: tuple[int, ...] | None = None

    def arguments(self, ints: Mapping[str, int]) -> dict[str, Any]:
        """The ``cuTensorMapEncodeTiled`` arguments (but the address and data type) at the
        int arguments `ints` (`layout_algebra.tma_box.TmaBox.tensor_map_arguments`)."""

        def value(entry: int | Expr) -> int:
            return entry if _is_int(entry) else operator.index(entry.evaluate(ints))

        try:
            layout = GlobalLayout(
                tuple(value(e) for e in self.shape), tuple(value(e) for e in self.strides)
            )
            box = TmaBox(self.box, self.swizzle, self.element_bits, 0, self.order)
            return box.tensor_map_arguments(layout)
        except (LayoutError, ArithmeticError) as error:
            raise LaunchError(
                f"tensor map {self.name} of argument {self.array!r} with "
                f"{_format_ints(ints)}: {error}"
            ) from error


def _format_ints(ints: Mapping[str, int]) -> str:
    return ", ".join(f"{name}={value}" for name, value in ints.items()) or "no int arguments"


def check_grid(grid: object) -> tuple[int, int, int]:
    """`grid` as (x, y, z) by the rules of `ir.arguments.check_grid`; `LaunchError` otherwise."""
    return check_arguments_grid(grid, LaunchError)


class Kernel:
    """A compiled kernel and its signature; calling it checks the arguments and launches it.

    `source`, `cubin`, `arch`, `entry` (the `extern "C" __global__` name), `params` (the
    signature, in C parameter order), `block_threads` (threads per block, a 1-D block),
    `shared_bytes` (dynamic shared memory per block), `grid` (the declared launch grid: x, y, z
    ints or expressions over the int parameters, or None when each call gives it),
    `resources` (registers per thread, static shared bytes, local bytes, max threads per block;
    loading the kernel on the current device the first time) and `compiler_log` (NVRTC's log).
    `device` is the driver interface (the real CUDA driver unless a test substitutes one). With
    `programmatic_launch` (and an sm_90 or newer `arch`) each launch lets the kernel start while
    the kernel before it on the stream finishes (CUDA's programmatic stream serialization; the
    kernel's ``griddepcontrol.wait`` orders its reads). Construction raises `LaunchError` for an
    invalid signature, block or grid.
    """

    def __init__(
        self,
        *,
        source: str,
        cubin: bytes,
        arch: str,
        entry: str,
        params: Sequence[Param],
        block_threads: int,
        shared_bytes: int = 0,
        grid: Sequence[Expr | int] | None = None,
        device: Device | None = None,
        programmatic_launch: bool = False,
        tensor_maps: Sequence[KernelTensorMapParam] = (),
        compiler_log: str = "",
    ) -> None:
        if not isinstance(entry, str) or not entry.isidentifier():
            raise LaunchError(f"kernel entry {entry!r} is not a C identifier")
        params = tuple(params)
        for param in params:
            if not isinstance(param, KernelArrayParam | KernelIntParam):
                raise LaunchError(
                    f"kernel {entry!r}: parameter {param!r} is not a KernelArrayParam or "
                    "KernelIntParam"
                )
        names = [param.name for param in params]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise LaunchError(f"kernel {entry!r}: parameter names {duplicates} appear twice")
        int_names = {param.name for param in params if isinstance(param, KernelIntParam)}
        for param in params:
            if isinstance(param, KernelArrayParam) and isinstance(param.num_elements, Expr):
                unknown = sorted(param.num_elements.free_vars() - int_names)
                if unknown:
                    raise LaunchError(
                        f"kernel {entry!r}: num_elements {param.num_elements!r} of "
                        f"{param.name!r} reads {', '.join(unknown)}, which are not int parameters "
                        f"(the int parameters are {', '.join(sorted(int_names)) or 'none'})"
                    )
        if grid is not None:
            grid = tuple(grid)
            if len(grid) != 3 or not all(
                isinstance(extent, Expr) or _is_int(extent) for extent in grid
            ):
                raise LaunchError(
                    f"kernel {entry!r}: grid {grid!r} is not three ints or Exprs (x, y, z) over "
                    "the int parameters"
                )
            grid = tuple(as_expr(extent) for extent in grid)
            unknown = sorted(set().union(*(extent.free_vars() for extent in grid)) - int_names)
            if unknown:
                raise LaunchError(
                    f"kernel {entry!r}: grid {grid_text(grid)} reads {', '.join(unknown)}, which "
                    f"are not int parameters (the int parameters are "
                    f"{', '.join(sorted(int_names)) or 'none'})"
                )
        if not _is_int(block_threads) or not 1 <= block_threads <= MAX_BLOCK_THREADS:
            raise LaunchError(
                f"kernel {entry!r}: block_threads {block_threads!r} is not an int from 1 to "
                f"{MAX_BLOCK_THREADS}"
            )
        if not _is_int(shared_bytes) or shared_bytes < 0:
            raise LaunchError(
                f"kernel {entry!r}: shared_bytes {shared_bytes!r} is not a non-negative int"
            )
        self._source = source
        self._cubin = bytes(cubin)
        self._compiler_log = str(compiler_log)
        self._arch = arch
        self._entry = entry
        self._params = params
        self._block_threads = block_threads
        self._shared_bytes = shared_bytes
        self._grid = grid
        self._device = cuda_driver() if device is None else device
        # Programmatic dependent launch exists from sm_90 on; elsewhere an ordinary launch.
        self._programmatic = (
            programmatic_launch is True and arch_number(arch) >= PROGRAMMATIC_LAUNCH_ARCH
        )
        self._loaded: dict[int, LoadedFunction] = {}
        arrays = {param.name for param in params if isinstance(param, KernelArrayParam)}
        for tensor_map in tensor_maps:
            if not isinstance(tensor_map, KernelTensorMapParam) or tensor_map.array not in arrays:
                raise LaunchError(
                    f"kernel {entry!r}: tensor map {tensor_map!r} is not a KernelTensorMapParam "
                    "of one of its array parameters"
                )
        self._tensor_maps = tuple(tensor_maps)
        # Encoded maps by (name, address, extents and strides): a launch on the same
        # arguments reuses them.
        self._encoded: dict[tuple[Any, ...], Any] = {}

    @property
    def source(self) -> str:
        """The CUDA C++ source."""
        return self._source

    @property
    def cubin(self) -> bytes:
        """The compiled ELF image."""
        return self._cubin

    @property
    def compiler_log(self) -> str:
        """NVRTC's log of the compile (warnings and ptxas's notes; empty when clean)."""
        return self._compiler_log

    @property
    def arch(self) -> str:
        """The architecture the CUBIN is for, e.g. `sm_90a`."""
        return self._arch

    @property
    def entry(self) -> str:
        """The `extern "C" __global__` function's name."""
        return self._entry

    @property
    def params(self) -> tuple[Param, ...]:
        """The signature, in C parameter order."""
        return self._params

    @property
    def block_threads(self) -> int:
        """Threads per block."""
        return self._block_threads

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory per block, in bytes."""
        return self._shared_bytes

    @property
    def grid(self) -> tuple[Expr, ...] | None:
        """The declared launch grid (x, y, z over the int parameters); None: given per call."""
        return self._grid

    @property
    def resources(self) -> KernelResources:
        """What the kernel uses on the current device (loads it there on first use)."""
        return self._load(self._device.current_ordinal()).resources

    @property
    def static_shared_bytes(self) -> int:
        """Static shared memory per block, in bytes, read from the CUBIN
        (`backend.nvrtc.cubin_static_shared`: what the driver reports, without a GPU)."""
        return cubin_static_shared(self._cubin)[self._entry]

    def residency(self, limits: SmLimits = SM_90) -> Residency:
        """How many of this kernel's blocks one SM of `limits` holds at once, and what allows
        no more (`backend.occupancy.resident_blocks`), read from the CUBIN without a GPU: its
        registers a thread (`cubin_registers`), its `static_shared_bytes` with the dynamic
        ones, and its block's threads. The driver's own count is `resident_blocks`. Raises
        `CompilationError` when the CUBIN records no register count for the kernel."""
        registers = cubin_registers(self._cubin).get(self._entry)
        if registers is None:
            raise CompilationError(
                f"{self._entry}: the CUBIN records no register count for the kernel; expected "
                "one, to count the blocks an SM holds"
            )
        shared = self.static_shared_bytes + self._shared_bytes
        return resident_blocks(registers, self._block_threads, shared, limits)

    def resident_blocks(self) -> int:
        """How many of this kernel's blocks one SM of the current device holds at once, as the
        device counts them (`backend.device.Device.resident_blocks`; loads the kernel there on
        first use). `residency` computes the same from the CUBIN without a GPU."""
        loaded = self._load(self._device.current_ordinal())
        return self._device.resident_blocks(loaded, self._block_threads, self._shared_bytes)

    def __repr__(self) -> str:
        return (
            f"Kernel(entry={self._entry!r}, arch={self._arch!r}, params={self._params!r}, "
            f"block_threads={self._block_threads}, shared_bytes={self._shared_bytes})"
        )

    def _load(self, ordinal: int) -> LoadedFunction:
        if ordinal not in self._loaded:
            self._loaded[ordinal] = self._device.load(
                ordinal, self._cubin, self._entry, self._shared_bytes
            )
        return self._loaded[ordinal]

    def __call__(self, *args: object, grid: object = None, **kwargs: object) -> None:
        """Check every argument (see the module docstring), then launch on `grid` blocks.

        Arguments come positionally in signature order or by name. `grid` may be omitted
        (None) when the kernel declares its grid, which is then computed from the int
        arguments; a given grid must equal it. Raises `LaunchError` before anything reaches the
        GPU when an argument, the grid or the block does not fit, or when no grid is given and
        none is declared.
        """
        bound = self._bind(args, kwargs)
        ints = {
            param.name: param.check(bound[param.name])
            for param in self._params
            if isinstance(param, KernelIntParam)
        }
        grid3 = launch_grid(f"kernel {self._entry!r}", grid, self._grid, ints, LaunchError)
        torch = sys.modules.get("torch")
        uses_torch = torch is not None and any(
            isinstance(value, torch.Tensor) for value in bound.values()
        )
        if uses_torch:
            ordinal = int(torch.cuda.current_device())
            stream = int(torch.cuda.current_stream(ordinal).cuda_stream)
        else:
            ordinal = self._device.current_ordinal()
            stream = LEGACY_STREAM
        views = {
            param.name: self._check_array(param, bound[param.name], ints, ordinal, stream)
            for param in self._params
            if isinstance(param, KernelArrayParam)
        }
        function = self._load(ordinal)
        if self._block_threads > function.resources.max_threads_per_block:
            raise LaunchError(
                f"kernel {self._entry!r}: block_threads {self._block_threads} exceeds the "
                f"{function.resources.max_threads_per_block} threads per block it can run with "
                f"({function.resources.registers_per_thread} registers per thread)"
            )
        values = [
            ctypes.c_uint64(views[param.name].address)
            if isinstance(param, KernelArrayParam)
            else _INT_TYPES[param.bits, param.signed](ints[param.name])
            for param in self._params
        ]
        values += [
            self._tensor_map(tensor_map, views[tensor_map.array].address, ints)
            for tensor_map in self._tensor_maps
        ]
        pointers = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
        wait_streams = sorted(
            {
                view.stream
                for view in views.values()
                if view.stream is not None and not _same_stream(view.stream, stream)
            }
        )
        self._device.launch(
            function,
            grid3,
            (self._block_threads, 1, 1),
            self._shared_bytes,
            stream,
            ctypes.addressof(pointers) if values else 0,
            wait_streams,
            programmatic=self._programmatic,
        )

    def _tensor_map(
        self, tensor_map: KernelTensorMapParam, address: int, ints: Mapping[str, int]
    ) -> Any:
        """The 128 bytes of `tensor_map` for the array at `address` (encoded once per address,
        extents and strides)."""
        arguments = tensor_map.arguments(ints)
        key = (tensor_map.name, address, arguments["global_dim"], arguments["global_strides"])
        if key not in self._encoded:
            if len(self._encoded) >= MAX_ENCODED_MAPS:
                self._encoded.clear()  # arguments that come and go: keep the cache bounded
            words = self._device.encode_tensor_map(address, tensor_map.element_bits, arguments)
            self._encoded[key] = (ctypes.c_uint64 * len(words))(*words)
        return self._encoded[key]

    @property
    def tensor_maps(self) -> tuple[KernelTensorMapParam, ...]:
        """The tensor maps the launch encodes, after the signature's parameters."""
        return self._tensor_maps

    def _bind(self, args: tuple[object, ...], kwargs: Mapping[str, object]) -> dict[str, object]:
        """Map each parameter name to its argument (`ir.arguments.bind_arguments`);
        `LaunchError` for too many, unknown, repeated or missing arguments."""
        names = [param.name for param in self._params]
        return bind_arguments(f"kernel {self._entry!r}", names, args, kwargs, LaunchError)

    def _check_array(
        self,
        param: KernelArrayParam,
        value: object,
        ints: Mapping[str, int],
        ordinal: int,
        stream: int,
    ) -> ArrayView:
        """The view of an array argument that passed every check; `LaunchError` otherwise."""
        view = array_view(param.name, value, ordinal, stream, self._device)
        name = param.name
        if view.ordinal != ordinal:
            raise LaunchError(
                f"argument {name!r} is in {view.location}; expected memory of the current CUDA "
                f"device (cuda:{ordinal})"
            )
        element = param.element_bits if param.dtype is None else param.dtype
        check_storage(name, view.dtype, param.storage_dtypes, element, LaunchError)
        if not view.contiguous:
            raise LaunchError(
                f"argument {name!r} is not contiguous; expected a dense row-major array "
                "(make a contiguous copy first)"
            )
        required = param.required_bytes(ints)
        if view.nbytes < required:
            where = "" if _is_int(param.num_elements) else f", with {_format_ints(ints)}"
            raise LaunchError(
                f"argument {name!r} holds {view.nbytes} bytes; expected at least {required} "
                f"bytes ({param.count(ints)} elements of {param.element_bits} bits{where})"
            )
        if view.address % param.alignment:
            raise LaunchError(
                f"argument {name!r} starts at address {view.address:#x}, not a multiple of "
                f"{param.alignment} bytes; expected a {param.alignment}-byte aligned array "
                "(a view that starts inside a buffer may not be)"
            )
        return view


def _same_stream(first: int, second: int) -> bool:
    """Whether two stream handles name the same stream (0 and 1 are both the legacy stream)."""
    legacy = {LEGACY_STREAM, 1}
    return first == second or (first in legacy and second in legacy)


def build_kernel(
    source: str,
    entry: str,
    params: Sequence[Param],
    block_threads: int,
    shared_bytes: int = 0,
    *,
    arch: str | None = None,
    options: Sequence[str] = (),
    cache: CubinCache | None = None,
    grid: Sequence[Expr | int] | None = None,
    device: Device | None = None,
    programmatic_launch: bool = False,
    tensor_maps: Sequence[KernelTensorMapParam] = (),
) -> Kernel:
    """Compile `source` (through the on-disk cache) and return its `Kernel`.

    `arch=None` means the current GPU's architecture (`current_arch`, which raises
    `NoDeviceError` without one); `options` are extra NVRTC options; `cache` defaults to
    `default_cache()`; `grid` is the declared launch grid, if any (`Kernel`). Raises
    `CompilationError` when NVRTC fails or the CUBIN defines no kernel
    named `entry` (it must be declared `extern "C" __global__`), `LaunchError` for an invalid
    signature. Needs no GPU when `arch` is given.
    """
    chosen = current_arch() if arch is None else arch
    module = compile_cached(source, chosen, options, cache=cache)
    kernels = cubin_kernels(module.cubin)
    if entry not in kernels:
        raise CompilationError(
            f"kernel {entry!r} is not defined in the compiled source; it defines "
            f"{', '.join(kernels) or 'no kernel'} (an entry must be declared "
            'extern "C" __global__)'
        )
    return Kernel(
        source=source,
        cubin=module.cubin,
        arch=chosen,
        entry=entry,
        params=params,
        block_threads=block_threads,
        shared_bytes=shared_bytes,
        grid=grid,
        device=device,
        programmatic_launch=programmatic_launch,
        tensor_maps=tensor_maps,
        compiler_log=module.log,
    )

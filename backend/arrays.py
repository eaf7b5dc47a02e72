"""Reading device arrays for a kernel launch: torch tensors, `__cuda_array_interface__` objects
(v2 or v3) and DLPack producers (`__dlpack__` / `__dlpack_device__`).

`array_view` reads, without copying, what the launch checks of `backend.kernel` need of one
argument: its start address, storage dtype name, byte size, whether it is dense row-major, the
CUDA device it lives on (or where else it is), and the stream its producer names. It
raises `LaunchError` only when an argument cannot be read at all; whether what was read fits a
parameter is for the caller to check.
"""

from __future__ import annotations

import ctypes
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from backend.device import LEGACY_STREAM, Device
from backend.errors import LaunchError


@dataclass(frozen=True)
class ArrayView:
    """What the launch checks need to know of one array argument.

    `address`: the start address; `dtype`: the storage dtype name (NumPy, ml_dtypes and PyTorch
    names); `nbytes`: its size in bytes; `contiguous`: whether it is dense row-major (a DLPack
    producer off the launch's device is not read: address 0, dtype '', nbytes 0, contiguous);
    `ordinal`: the CUDA device it lives on, None when not in CUDA device memory;
    `location`: where it lives, in words; `stream`: the stream its producer named
    (`__cuda_array_interface__` v3), else None; `keepalive`: what must stay alive until the
    launch is enqueued.
    """

    address: int
    dtype: str
    nbytes: int
    contiguous: bool
    ordinal: int | None
    location: str
    stream: int | None
    keepalive: object


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)

_DLPACK_CUDA = 2
_DLPACK_CUDA_MANAGED = 13
_DLPACK_DEVICES = {1: "the CPU", 3: "pinned host memory (DLPack CUDAHost)"}
_DLPACK_NAMED_CODES = {
    4: "bfloat",
    6: "bool",
    7: "float8_e3m4",
    8: "float8_e4m3",
    10: "float8_e4m3fn",
    11: "float8_e4m3fnuz",
    12: "float8_e5m2",
    13: "float8_e5m2fnuz",
    14: "float8_e8m0fnu",
}


def _dlpack_dtype(code: int, bits: int, lanes: int) -> str:
    """A storage dtype name for a DLPack dtype (code, bits, lanes)."""
    if lanes != 1:
        return f"DLPack vector dtype (code {code}, {bits} bits, {lanes} lanes)"
    if code == 0:
        return f"int{bits}"
    if code == 1:
        return f"uint{bits}"
    if code == 2:
        return f"float{bits}"
    if code in _DLPACK_NAMED_CODES:
        name = _DLPACK_NAMED_CODES[code]
        return "bfloat16" if name == "bfloat" and bits == 16 else name
    return f"DLPack dtype (code {code}, {bits} bits)"


def _row_major(shape: Sequence[int], strides: Sequence[int] | None, unit: int) -> bool:
    """Whether `strides` (in multiples of `unit`) are the dense row-major strides of `shape`;
    None means dense row-major. Dimensions of size 1 may have any stride."""
    if strides is None or 0 in shape:
        return True
    expected = unit
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def array_view(name: str, value: object, ordinal: int, stream: int, device: Device) -> ArrayView:
    """Read what the checks need from a torch tensor, a `__cuda_array_interface__` object
    or a DLPack producer.

    `name` is the parameter's name (for messages), `ordinal` the launch's CUDA device, `stream`
    the launch stream (told to a DLPack producer), `device` the driver interface (asked which
    device a `__cuda_array_interface__` pointer belongs to). Raises `LaunchError` when `value`
    is none of the three kinds or cannot be read.
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return _torch_view(value)
    if hasattr(value, "__cuda_array_interface__"):
        return _interface_view(name, value, ordinal, device)
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        return _dlpack_view(name, value, ordinal, stream)
    raise LaunchError(
        f"argument {name!r} is a {type(value).__name__}; expected a CUDA array (a "
        "torch tensor, an object with __cuda_array_interface__, or a DLPack producer)"
    )


def _interface_view(name: str, value: object, ordinal: int, device: Device) -> ArrayView:
    """The view of an object with `__cuda_array_interface__`."""
    interface = value.__cuda_array_interface__
    try:
        shape = tuple(int(size) for size in interface["shape"])
        typestr = interface["typestr"]
        address = int(interface["data"][0])
        strides = interface.get("strides")
        strides = None if strides is None else tuple(int(step) for step in strides)
        stream = interface.get("stream")
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise LaunchError(
            f"argument {name!r} has a malformed __cuda_array_interface__ ({error!r}); "
            "expected shape, typestr and data entries"
        ) from error
    if interface.get("mask") is not None:
        raise LaunchError(f"argument {name!r} is a masked array; expected no mask")
    try:
        dtype = np.dtype(typestr)
    except TypeError as error:
        raise LaunchError(
            f"argument {name!r} has typestr {typestr!r}, which NumPy does not know"
        ) from error
    dtype_name = dtype.name if dtype.byteorder != ">" else f"big-endian {typestr}"
    nbytes = math.prod(shape) * dtype.itemsize
    located = device.pointer_ordinal(address) if nbytes else ordinal
    return ArrayView(
        address=address,
        dtype=dtype_name,
        nbytes=nbytes,
        contiguous=_row_major(shape, strides, dtype.itemsize),
        ordinal=located,
        location="host memory" if located is None else f"cuda:{located}",
        stream=None if stream is None else int(stream),
        keepalive=value,
    )


def _torch_view(tensor: object) -> ArrayView:
    """The view of a torch tensor, read through its own attributes."""
    device = tensor.device
    is_cuda = device.type == "cuda"
    return ArrayView(
        address=int(tensor.data_ptr()),
        dtype=str(tensor.dtype).removeprefix("torch."),
        nbytes=int(tensor.numel()) * int(tensor.element_size()),
        contiguous=bool(tensor.is_contiguous()),
        ordinal=int(device.index) if is_cuda else None,
        location=f"cuda:{device.index}" if is_cuda else f"{device.type} memory",
        stream=None,
        keepalive=tensor,
    )


def _dlpack_view(name: str, value: object, ordinal: int, stream: int) -> ArrayView:
    """The view of a DLPack producer; the capsule is requested only once the device is known
    to be a CUDA device, with the launch stream (1 for the legacy stream)."""
    device_type, device_id = (int(item) for item in value.__dlpack_device__())
    if device_type not in (_DLPACK_CUDA, _DLPACK_CUDA_MANAGED):
        location = _DLPACK_DEVICES.get(device_type, f"DLPack device type {device_type}")
        return ArrayView(0, "", 0, True, None, location, None, value)
    if device_type == _DLPACK_CUDA and device_id != ordinal:
        return ArrayView(0, "", 0, True, device_id, f"cuda:{device_id}", None, value)
    capsule = value.__dlpack__(stream=1 if stream == LEGACY_STREAM else stream)
    if not _capsule_is_valid(capsule, b"dltensor"):
        raise LaunchError(
            f"argument {name!r}: __dlpack__ returned {capsule!r}; expected a 'dltensor' capsule"
        )
    tensor = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    shape = tuple(tensor.shape[axis] for axis in range(tensor.ndim))
    strides = tuple(tensor.strides[axis] for axis in range(tensor.ndim)) if tensor.strides else None
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    if bits % 8 or lanes != 1:
        raise LaunchError(
            f"argument {name!r} has DLPack dtype (code {code}, {bits} bits, {lanes} lanes); "
            "expected whole-byte scalar elements (pass packed data as uint8)"
        )
    return ArrayView(
        address=(tensor.data or 0) + tensor.byte_offset,
        dtype=_dlpack_dtype(code, bits, lanes),
        nbytes=math.prod(shape) * bits // 8,
        contiguous=_row_major(shape, strides, 1),
        ordinal=ordinal,
        location=f"cuda:{ordinal}",
        stream=None,
        keepalive=(value, capsule),
    )

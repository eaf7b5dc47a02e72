"""`CudaDriver.current_ordinal` against a fake `cuda.bindings.driver`: the device of the calling
thread's current context when one is current, else device 0 (and NoDeviceError without one).

A CUcontext of the real bindings converts to its handle with `int()`; the null context is
handle 0, which counts as no context at all.
"""

from __future__ import annotations

import types

import pytest

from backend import device as backend_device
from backend.device import CudaDriver
from backend.errors import NoDeviceError

SUCCESS = 0
INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT


class FakeHandle:
    """A driver handle: `int()` gives its address."""

    def __init__(self, address: int) -> None:
        self.address = address

    def __int__(self) -> int:
        return self.address


def fake_driver(context: FakeHandle | None, context_device: int, device_count: int):
    """A driver whose current context is `context`; cuCtxGetDevice reports `context_device` for
    a non-null context and CUDA_ERROR_INVALID_CONTEXT for the null one, as the real one does."""

    def ctx_get_device() -> tuple[int, int]:
        if context is None or int(context) == 0:
            return (INVALID_CONTEXT, 0)
        return (SUCCESS, context_device)

    return types.SimpleNamespace(
        CUresult=types.SimpleNamespace(CUDA_SUCCESS=SUCCESS),
        cuInit=lambda flags: (SUCCESS,),
        cuCtxGetCurrent=lambda: (SUCCESS, context),
        cuCtxGetDevice=ctx_get_device,
        cuDeviceGetCount=lambda: (SUCCESS, device_count),
        cuGetErrorName=lambda error: (SUCCESS, b"CUDA_ERROR_INVALID_CONTEXT"),
        cuGetErrorString=lambda error: (SUCCESS, b"invalid device context"),
    )


@pytest.mark.parametrize(
    ("context", "context_device", "device_count", "expected"),
    [
        (FakeHandle(0x5A00), 3, 4, 3),  # a current context on device 3: its device
        (FakeHandle(0x5A00), 0, 1, 0),  # a current context on device 0
        (FakeHandle(0), 3, 4, 0),  # the null context: none is current, device 0
        (None, 3, 4, 0),  # no context object at all: device 0
    ],
)
def test_current_ordinal_follows_the_current_context(
    monkeypatch: pytest.MonkeyPatch,
    context: FakeHandle | None,
    context_device: int,
    device_count: int,
    expected: int,
) -> None:
    driver = fake_driver(context, context_device, device_count)
    monkeypatch.setattr(backend_device, "_driver", lambda: driver)
    assert CudaDriver().current_ordinal() == expected


@pytest.mark.parametrize("context", [FakeHandle(0), None])
def test_current_ordinal_without_context_or_device_is_refused(
    monkeypatch: pytest.MonkeyPatch, context: FakeHandle | None
) -> None:
    monkeypatch.setattr(backend_device, "_driver", lambda: fake_driver(context, 0, 0))
    with pytest.raises(NoDeviceError, match="the CUDA driver reports no device"):
        CudaDriver().current_ordinal()

"""The exception types of the backend.

- `CompilationError`: NVRTC refused a source, or could not be run; the message holds NVRTC's log
  and, for the first error, the offending source line quoted with its number.
- `ArchitectureError`: an architecture name that is malformed or that this NVRTC cannot target.
- `LaunchError`: a kernel argument, grid or signature that does not fit; raised before anything
  reaches the GPU, naming the parameter, the value and what was expected.
- `TimingError`: a `LaunchError` of the timing protocol: a measurement refused because the host
  took longer to queue a run than the sleep before it (a busy host); measuring again may succeed.
- `CacheError`: the kernel cache directory cannot be trusted (another owner, not a directory).
- `DriverError`: a CUDA driver call failed; the message names the call and the driver's error.
- `NoDeviceError`: the driver reports no usable GPU (or there is no driver at all).
- `DisassemblyError`: nvdisasm is missing or failed, or a kernel or loop asked of its listing
  is not there (`backend.sass`).
- `PerformanceWarning` (a warning, not an exception): the compiler reports a loss of
  performance it could not avoid in a kernel, such as warpgroup dots run one after another.

The types about a bad value subclass `ValueError`, so callers that only know the standard library
can still catch them.
"""

from __future__ import annotations


class CompilationError(Exception):
    """NVRTC could not compile a source (or could not be run at all).

    Attributes: `log` (NVRTC's full log, empty when NVRTC never ran), `line` (the 1-based source
    line of the first error, or None) and `source_line` (that line's text, or None).
    """

    def __init__(
        self,
        message: str,
        *,
        log: str = "",
        line: int | None = None,
        source_line: str | None = None,
    ) -> None:
        super().__init__(message)
        self.log = log
        self.line = line
        self.source_line = source_line


class ArchitectureError(CompilationError, ValueError):
    """An architecture name such as `sm_9O` that is malformed or unsupported by this NVRTC."""


class LaunchError(ValueError):
    """A kernel argument, grid or signature that does not fit; nothing reached the GPU."""


class TimingError(LaunchError):
    """A time that `backend.timing.median_us` would not give: queuing a run on the host took
    longer than even the longest sleep before it, so the GPU time would include host work. It
    says nothing of the kernel (another process loading the host is the usual cause): the same
    measurement may succeed later."""


class CacheError(ValueError):
    """The kernel cache directory cannot be trusted or created."""


class DriverError(RuntimeError):
    """A CUDA driver call returned an error; the message names the call and the error."""


class NoDeviceError(DriverError):
    """No CUDA driver or no CUDA device is available."""


class PerformanceWarning(UserWarning):
    """ptxas compiled a kernel with a loss of performance it reports (its "Potential Performance
    Loss" notes, `backend.nvrtc.performance_losses`): the kernel is correct, but slower than its
    program asks for, e.g. its ``wgmma`` serialised for want of registers."""


class DisassemblyError(RuntimeError):
    """The disassembler (nvdisasm) is missing or failed, or its listing lacks what was asked."""

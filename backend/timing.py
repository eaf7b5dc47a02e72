"""Timing one GPU operation by the project's benchmark protocol (the GPU notes).

`median_us(run, flush, repeats)` times `run` (a callable that queues one operation: one or more
kernel launches) with CUDA events, after warm-up runs, each timed run preceded by

1. a READ of `flush`, a buffer of at least twice the L2 cache (`flush_buffer`), so the timed
   operation reads its inputs from HBM; a read, not a write, so no dirty lines are written back
   during the timed kernel (that adds 3 to 20 us to a small one);
2. a sleep kernel of `sleep_cycles` (about 200 us at 2 GHz by default), queued so the GPU is
   still busy when the timed launch is queued: the launch's host cost is hidden;

and returns the median in microseconds. The events bracket `run` alone, neither the flush nor
the sleep.

    flush = flush_buffer()                        # cached per device
    us = median_us(lambda: kernel(*args), flush, repeats=30)

torch is imported inside the functions only: this module imports on a machine without torch.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from backend.errors import LaunchError

FLUSH_BYTES = 512 * 2**20
"""The smallest flush buffer `flush_buffer` makes: 512 MiB, more than twice any current L2
(60 MB on an H200)."""
SLEEP_CYCLES = 400_000
"""GPU clock cycles of the sleep kernel before each timed run: about 200 us at 2 GHz, longer
than a checked launch from Python takes."""
WARMUP_RUNS = 2
"""Untimed runs before the timed ones (module loading, first-touch allocations)."""

_FLUSH_BUFFERS: dict[tuple[int, int], Any] = {}


def flush_buffer(device: Any = None, nbytes: int | None = None) -> Any:
    """A float32 CUDA tensor of at least max(`nbytes`, 2 * L2 size, `FLUSH_BYTES`) bytes, of
    ones, on `device` (a torch device, an index, or None for the current one).

    One buffer is kept per (device, size) for the life of the process: tuning many operations
    does not allocate a new 512 MiB each time. Raises `LaunchError` for a negative or
    non-integer `nbytes` or a device that is not a CUDA device.
    """
    import torch

    if nbytes is not None and (
        isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0
    ):
        raise LaunchError(f"flush buffer of nbytes={nbytes!r}; expected an int >= 0 or None")
    chosen = (
        torch.device("cuda", device)
        if isinstance(device, int)
        else torch.device("cuda" if device is None else device)
    )
    if chosen.type != "cuda":
        raise LaunchError(f"flush buffer on device {device!r}; expected a CUDA device")
    ordinal = torch.cuda.current_device() if chosen.index is None else chosen.index
    l2_bytes = int(torch.cuda.get_device_properties(ordinal).L2_cache_size)
    size = max(nbytes or 0, 2 * l2_bytes, FLUSH_BYTES)
    size = -(-size // 4) * 4
    if (ordinal, size) not in _FLUSH_BUFFERS:
        _FLUSH_BUFFERS[ordinal, size] = torch.ones(
            size // 4, dtype=torch.float32, device=torch.device("cuda", ordinal)
        )
    return _FLUSH_BUFFERS[ordinal, size]


def median_us(
    run: Callable[[], object],
    flush: Any,
    repeats: int = 30,
    *,
    warmup: int = WARMUP_RUNS,
    sleep_cycles: int = SLEEP_CYCLES,
) -> float:
    """The median time in microseconds of `run` over `repeats` timed runs after `warmup`
    untimed ones, each timed run preceded by a read of `flush` and a sleep kernel (see the
    module docstring).

    Requires: `run` queues its work on torch's current stream (as `backend` kernels called with
    torch tensors do); `flush` is a CUDA tensor of at least twice the L2 (`flush_buffer`).
    Raises `LaunchError` for `repeats` < 1, `warmup` < 0 or `sleep_cycles` < 0, and for a
    `flush` that is not a CUDA tensor.
    """
    import torch

    for name, value, least in (
        ("repeats", repeats, 1),
        ("warmup", warmup, 0),
        ("sleep_cycles", sleep_cycles, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise LaunchError(f"median_us: {name}={value!r}; expected an int >= {least}")
    if not isinstance(flush, torch.Tensor) or not flush.is_cuda:
        raise LaunchError(
            f"median_us: flush is {type(flush).__name__}; expected a CUDA tensor of at least "
            "twice the L2 (backend.timing.flush_buffer)"
        )
    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        flush.sum()
        torch.cuda._sleep(sleep_cycles)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(1e3 * start.elapsed_time(end))
    return statistics.median(times)

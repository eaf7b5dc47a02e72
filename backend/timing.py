"""Timing one GPU operation by the project's benchmark protocol (the GPU notes).

`median_us(run, flush, repeats)` times `run` (a callable that queues one operation: one or more
kernel launches) with CUDA events, after warm-up runs, each timed run preceded by

1. a READ of `flush`, a buffer of at least twice the L2 cache (`flush_buffer`), so the timed
   operation reads its inputs from HBM; a read, not a write, so no dirty lines are written back
   during the timed kernel (that adds 3 to 20 us to a small one);
2. a sleep kernel of `sleep_cycles` (about 1 ms at 2 GHz by default), queued so the GPU is
   still busy when the timed launch is queued: the launch's host cost is hidden;

and returns the median in microseconds. The events bracket `run` alone, neither the flush nor
the sleep. The sleep hides the host cost only while that cost is shorter than it; past it, the
GPU waits for the launch inside the timed interval and the time includes host work (seen on an
H200: a checked decode-matmul launch from Python takes 140 to 470 us on the host, and behind
a 200 us sleep one point in eight measured 2 to 4 times its kernel time). So `median_us` times
the sleep alone first and the host time of every timed `run`; when one of them outlasts the
sleep, it times them all again behind a sleep `SLEEP_GROWTH` times longer (at most
`SLEEP_ATTEMPTS` times, then it raises `TimingError`, a `LaunchError` that says the host, not
the kernel, was at fault).

    flush = flush_buffer()                        # cached per device
    us = median_us(lambda: kernel(*args), flush, repeats=30)
    ours, peer = medians_in_turns({"ours": ours_run, "peer": peer_run}, flush).values()

`medians_in_turns` times several runs that are to be compared in turns, round by round, so a
slow drift of the GPU's clocks over the measurement does not favour the one timed first.

`steady_in_turns(runs, launches)` is a second figure beside the protocol's, for operations
held by the card's power limit: each run launched `launches` times back to back (no flush, no
sleep), timed as one block and divided, rounds in turns, with the SM clock and board power
read during each block (`backend.gpu_clocks.ClockSampler`). The protocol's runs each follow a
flush read and another run, so the clock a run gets is partly set by the power its neighbours
drew; back to back, the clock settles on the run's own draw, as in a model's layers launched
one after another. The host's queuing must be shorter than the GPU's work (the prefill's
milliseconds), else the figure includes it.

torch is imported inside the functions only: this module imports on a machine without torch.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from backend.errors import LaunchError, TimingError
from backend.gpu_clocks import ClockSampler, ClockSummary, nvidia_smi_id, summarize

FLUSH_BYTES = 512 * 2**20
"""The smallest flush buffer `flush_buffer` makes: 512 MiB, more than twice any current L2
(60 MB on an H200)."""
SLEEP_CYCLES = 2_000_000
"""GPU clock cycles of the sleep kernel before each timed run at first: about 1 ms at 2 GHz."""
SLEEP_GROWTH = 4
"""How much longer the sleep is made when a run's host time outlasted it."""
SLEEP_ATTEMPTS = 4
"""Sleep lengths `median_us` tries before it gives up (the last is 64 times the first)."""
WARMUP_RUNS = 2
"""Untimed runs before the timed ones (module loading, first-touch allocations)."""
STEADY_LAUNCHES = 50
"""Back-to-back launches a block of `steady_in_turns` by default (250 ms of a 5 ms kernel;
`steady_launches` gives the count for another time)."""
STEADY_ROUNDS = 3
"""Blocks of each run `steady_in_turns` times by default, in turns."""
STEADY_BLOCK_US = 250_000.0
"""How long a block of back-to-back launches lasts at least (`steady_launches`): long enough
for the clock to settle on the runs' own power draw."""
MAX_STEADY_LAUNCHES = 2**31
"""The most launches `steady_launches` gives (a time below a nanosecond is no kernel's)."""

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
    Raises `LaunchError` for `repeats` < 1, `warmup` < 0 or `sleep_cycles` < 1 and for a
    `flush` that is not a CUDA tensor; `TimingError` (a `LaunchError`) when `run`'s host time
    outlasts even the longest sleep (the module docstring): a busy host, not a bad kernel.
    """
    return _medians({"run": run}, flush, repeats, warmup, sleep_cycles, "median_us")["run"]


def medians_in_turns(
    runs: Mapping[str, Callable[[], object]],
    flush: Any,
    repeats: int = 30,
    *,
    warmup: int = WARMUP_RUNS,
    sleep_cycles: int = SLEEP_CYCLES,
) -> dict[str, float]:
    """The median time in microseconds of each of `runs` (name -> run), timed in turns: round r
    times every run once, each behind a read of `flush` and a sleep kernel as in `median_us`,
    in the mapping's order rotated by r places. So a drift of the GPU's clocks or temperature
    over the measurement (seconds at the prefill's sizes) falls on all the runs alike, and no
    run always comes first after another. With one run it is `median_us`.

    Raises `LaunchError` for `runs` that is not a mapping or is empty, a name that is not a
    non-empty str, and the arguments `median_us` refuses; `TimingError` when one run's host
    time outlasts even the longest sleep (all are then timed again behind a longer sleep, as
    in `median_us`).
    """
    return _medians(runs, flush, repeats, warmup, sleep_cycles, "medians_in_turns")


def _medians(
    runs: Mapping[str, Callable[[], object]],
    flush: Any,
    repeats: int,
    warmup: int,
    sleep_cycles: int,
    caller: str,
) -> dict[str, float]:
    """`medians_in_turns`, its errors naming `caller`."""
    names = _checked_names(
        caller,
        runs,
        (("repeats", repeats, 1), ("warmup", warmup, 0), ("sleep_cycles", sleep_cycles, 1)),
    )
    import torch

    if not isinstance(flush, torch.Tensor) or not flush.is_cuda:
        raise LaunchError(
            f"{caller}: flush is {type(flush).__name__}; expected a CUDA tensor of at least "
            "twice the L2 (backend.timing.flush_buffer)"
        )
    for name in names:
        for _ in range(warmup):
            runs[name]()
    torch.cuda.synchronize()
    for _ in range(SLEEP_ATTEMPTS):
        sleep_us = _elapsed_us(torch, functools.partial(torch.cuda._sleep, sleep_cycles))
        times: dict[str, list[float]] = {name: [] for name in names}
        host_us: list[float] = []
        for turn in range(repeats):
            shift = turn % len(names)
            for name in names[shift:] + names[:shift]:
                flush.sum()
                torch.cuda._sleep(sleep_cycles)
                times[name].append(_elapsed_us(torch, runs[name], host_us))
        if max(host_us) < sleep_us:
            return {name: statistics.median(times[name]) for name in names}
        sleep_cycles *= SLEEP_GROWTH
    raise TimingError(
        f"{caller}: queuing one run took up to {max(host_us):.0f} us on the host, longer than "
        f"the longest sleep before it ({sleep_us:.0f} us): its time would include host work"
    )


@dataclass(frozen=True)
class SteadyTime:
    """A run's time per launch in microseconds when launched back to back (the median over
    its blocks), and the clock and power read during its blocks (None when none was read)."""

    us: float
    clock: ClockSummary | None

    def figures(self) -> dict[str, float | None]:
        """``us``, and the clock's median and least (``clock_mhz``, ``min_clock_mhz``) and the
        median power (``power_w``), None where no clock was read: a record's fields."""
        clock = self.clock
        return {
            "us": self.us,
            "clock_mhz": None if clock is None else clock.median_mhz,
            "min_clock_mhz": None if clock is None else clock.min_mhz,
            "power_w": None if clock is None else clock.median_power_w,
        }


def steady_launches(us: float, block_us: float = STEADY_BLOCK_US) -> int:
    """How many launches of an operation taking `us` microseconds make a back-to-back block of
    at least `block_us` (at least one): the `launches` of `steady_in_turns` for a block of that
    length. Raises LaunchError for a time that is not a positive finite number, or so short
    that the block would take more than `MAX_STEADY_LAUNCHES`."""
    if isinstance(us, bool) or not isinstance(us, (int, float)) or not 0 < us < math.inf:
        raise LaunchError(f"steady_launches: us={us!r}; expected a finite time > 0")
    if not block_us / us <= MAX_STEADY_LAUNCHES:
        raise LaunchError(
            f"steady_launches: us={us!r}; a block of {block_us} us would take more than "
            f"{MAX_STEADY_LAUNCHES} launches"
        )
    launches = max(1, math.ceil(block_us / us))
    # The quotient's rounding may put it a hair past a whole number of launches or short of
    # one: settle on the fewest whose product reaches the block.
    while launches > 1 and (launches - 1) * us >= block_us:
        launches -= 1
    while launches * us < block_us:
        launches += 1
    return launches


def steady_in_turns(
    runs: Mapping[str, Callable[[], object]],
    launches: int = STEADY_LAUNCHES,
    rounds: int = STEADY_ROUNDS,
    *,
    warmup: int = WARMUP_RUNS,
    sampler: Callable[[], ClockSampler] | None = None,
) -> dict[str, SteadyTime]:
    """Each of `runs` (name -> run) launched `launches` times back to back, timed as one block
    with CUDA events, `rounds` blocks each in turns (the mapping's order rotated by a place a
    round), with the clock read during every block by `sampler()` (default: a `ClockSampler`
    of the current GPU). Returns each run's `SteadyTime`: the median over its blocks of the
    block's time over `launches`, and the summary of its blocks' samples. See the module
    docstring for what it measures and when.

    Raises `LaunchError` for `launches`, `rounds` < 1 or `warmup` < 0 and for `runs` that is
    not a mapping of one or more non-empty str names.
    """
    names = _checked_names(
        "steady_in_turns",
        runs,
        (("launches", launches, 1), ("rounds", rounds, 1), ("warmup", warmup, 0)),
    )
    import torch

    if sampler is None:
        index = torch.cuda.current_device()
        gpu = nvidia_smi_id(index, torch.cuda.get_device_properties(index))
        sampler = functools.partial(ClockSampler, gpu)
    for name in names:
        for _ in range(warmup):
            runs[name]()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in names}
    samples: dict[str, list[tuple[float, float | None]]] = {name: [] for name in names}
    for turn in range(rounds):
        shift = turn % len(names)
        for name in names[shift:] + names[:shift]:
            with sampler() as clocks:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(launches):
                    runs[name]()
                end.record()
                end.synchronize()
            times[name].append(1e3 * start.elapsed_time(end) / launches)
            samples[name] += clocks.samples
    return {
        name: SteadyTime(statistics.median(times[name]), summarize(samples[name])) for name in names
    }


def _checked_names(
    caller: str,
    runs: Mapping[str, Callable[[], object]],
    counts: tuple[tuple[str, object, int], ...],
) -> list[str]:
    """The names of `runs`, after checking each (name, value, least) of `counts` is an int of
    at least its least and `runs` a mapping of one or more non-empty str names; LaunchError
    naming `caller` and the bad value otherwise."""
    for name, value, least in counts:
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise LaunchError(f"{caller}: {name}={value!r}; expected an int >= {least}")
    names = list(runs) if isinstance(runs, Mapping) else None
    if not names or not all(isinstance(name, str) and name for name in names):
        raise LaunchError(
            f"{caller}: runs {runs!r}; expected a mapping of one or more non-empty str names "
            "to callables"
        )
    return names


def _elapsed_us(torch: Any, run: Callable[[], object], host_us: list[float] | None = None) -> float:
    """The GPU time in microseconds between events recorded before and after queuing `run`
    (waited for); the host time of queuing it is appended to `host_us`."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    begun = time.perf_counter()
    run()
    queued = time.perf_counter()
    end.record()
    end.synchronize()
    if host_us is not None:
        host_us.append(1e6 * (queued - begun))
    return 1e3 * start.elapsed_time(end)

"""The SM clock and the board power a GPU runs at while something runs, read by nvidia-smi.

A kernel held by the card's power limit (the prefill matmuls at 4096 rows: tensor cores busy,
the SMs below their top clock) is as fast as the clock its own power draw leaves it, so its
time means little without the clock it ran at. `ClockSampler` starts nvidia-smi's query loop
(``--query-gpu=clocks.sm,power.draw -lms PERIOD``) for one GPU in a process of its own,
waits for its first line (nvidia-smi takes a while to start, longer than a block of launches
may run), reads its lines while a block of work runs, and stops it at the end of the block:

    with ClockSampler(gpu) as sampler:
        ...                                   # the launches to watch, synchronized
    summary = sampler.summary()               # None when nothing was read

`ClockSummary` holds the samples' median, least and largest clock (MHz) and median power (W,
None where the board does not report it). nvidia-smi prints a line every period while the
loop runs; a block shorter than one period may get none. A machine without nvidia-smi gives
no samples and `ClockSampler.error` says why; the work inside the block runs all the same.

torch is not needed: the sampler reads the GPU through its own process.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from backend.errors import LaunchError

PERIOD_MS = 20
"""nvidia-smi's sampling period by default: 50 samples a second."""
FIRST_SAMPLE_TIMEOUT_S = 10.0
"""How long entering the block waits for nvidia-smi's first sample by default."""
QUERY = "clocks.sm,power.draw"
"""The fields each sample line holds, in order."""


@dataclass(frozen=True)
class ClockSummary:
    """The samples of one block: the SM clock's median, least and largest (MHz), the median
    board power (W; None when no sample reported one) and how many samples there were."""

    median_mhz: float
    min_mhz: float
    max_mhz: float
    median_power_w: float | None
    samples: int


def parse_sample(line: str) -> tuple[float, float | None] | None:
    """(clock MHz, power W or None) of one line of nvidia-smi's query (``"1440, 698.12"``;
    ``"[N/A]"`` or ``"N/A"`` for a value the board does not report); None for a line that is
    not such a sample (a blank line, a message)."""
    parts = [part.strip() for part in line.split(",")]
    if len(parts) != 2:
        return None
    try:
        clock = float(parts[0])
    except ValueError:
        return None
    try:
        power: float | None = float(parts[1])
    except ValueError:
        power = None
    return clock, power


def summarize(samples: Sequence[tuple[float, float | None]]) -> ClockSummary | None:
    """The `ClockSummary` of `samples` ((clock, power) pairs); None for none."""
    if not samples:
        return None
    clocks = [clock for clock, _ in samples]
    powers = [power for _, power in samples if power is not None]
    return ClockSummary(
        median_mhz=statistics.median(clocks),
        min_mhz=min(clocks),
        max_mhz=max(clocks),
        median_power_w=statistics.median(powers) if powers else None,
        samples=len(samples),
    )


def nvidia_smi_id(index: int, properties: object) -> int | str:
    """How nvidia-smi names CUDA device `index` whose device properties (torch's) are
    `properties`: its PCI bus id where they give one (``"00000000:19:00.0"``; CUDA's device
    numbering need not be nvidia-smi's), else `index`."""
    bus = getattr(properties, "pci_bus_id", None)
    if isinstance(bus, int):
        domain = getattr(properties, "pci_domain_id", 0)
        device = getattr(properties, "pci_device_id", 0)
        return f"{domain:08x}:{bus:02x}:{device:02x}.0"
    return index


class ClockSampler:
    """A context manager sampling the SM clock and board power of one GPU every `period_ms`
    milliseconds while its block runs. `gpu` names it as nvidia-smi's ``--id`` does: an index
    in nvidia-smi's numbering (CUDA's may differ) or a PCI bus id (``"00000000:19:00.0"``).
    `command` replaces the nvidia-smi command line (for tests); `samples` are the (clock,
    power) pairs read, `error` the reason none could be (no nvidia-smi, or it ended with an
    error). Entering the block waits up to `first_sample_timeout_s` seconds for the first
    sample (or for the process to end), so the block's work runs while samples are read."""

    def __init__(
        self,
        gpu: int | str = 0,
        period_ms: int = PERIOD_MS,
        command: Sequence[str] | None = None,
        first_sample_timeout_s: float = FIRST_SAMPLE_TIMEOUT_S,
    ):
        if isinstance(gpu, bool) or not (
            (isinstance(gpu, int) and gpu >= 0) or (isinstance(gpu, str) and gpu.strip())
        ):
            raise LaunchError(f"ClockSampler: gpu={gpu!r}; expected an index >= 0 or a PCI bus id")
        if isinstance(period_ms, bool) or not isinstance(period_ms, int) or period_ms < 1:
            raise LaunchError(f"ClockSampler: period_ms={period_ms!r}; expected an int >= 1")
        timeout = first_sample_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
            raise LaunchError(
                f"ClockSampler: first_sample_timeout_s={timeout!r}; expected a number >= 0"
            )
        self.first_sample_timeout_s = float(timeout)
        self.command = list(command) if command is not None else self._nvidia_smi(gpu, period_ms)
        self.samples: list[tuple[float, float | None]] = []
        self.error: str | None = None
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._first = threading.Event()

    @staticmethod
    def _nvidia_smi(gpu: int | str, period_ms: int) -> list[str]:
        tool = shutil.which("nvidia-smi") or "nvidia-smi"
        return [
            tool,
            f"--query-gpu={QUERY}",
            "--format=csv,noheader,nounits",
            f"-lms={period_ms}",
            f"--id={gpu}",
        ]

    def __enter__(self) -> ClockSampler:
        try:
            self._process = subprocess.Popen(
                self.command,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        except OSError as error:
            self.error = f"{self.command[0]} could not be started: {error}"
            return self
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._first.wait(self.first_sample_timeout_s)
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        try:
            for line in self._process.stdout:
                sample = parse_sample(line)
                if sample is not None:
                    self.samples.append(sample)
                    self._first.set()
        finally:
            self._first.set()

    def __exit__(self, *exc: object) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)
        stderr = process.stderr.read() if process.stderr is not None else ""
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
        if not self.samples and process.returncode not in (0, -15):
            self.error = (
                f"{self.command[0]} ended with status {process.returncode}: {stderr.strip()[:200]}"
            )

    def summary(self) -> ClockSummary | None:
        """The `ClockSummary` of the samples read (None when there were none)."""
        return summarize(self.samples)

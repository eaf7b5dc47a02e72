"""The clock sampler (`backend.gpu_clocks`) on any machine: nvidia-smi's sample lines read into
exact values, summaries against their definition (hypothesis), the sampler's process driven by
a stand-in command (a Python process printing lines, one that fails, one that is missing), its
arguments refused by name, and a GPU named as nvidia-smi names it. On the GPU the sampler
reads the real nvidia-smi (`test_gpu_autotune.py`, through `backend.timing.steady_in_turns`)."""

from __future__ import annotations

import statistics
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.errors import LaunchError
from backend.gpu_clocks import (
    ClockSampler,
    ClockSummary,
    nvidia_smi_id,
    parse_sample,
    summarize,
)


@pytest.mark.parametrize(
    ("line", "sample"),
    [
        ("1440, 698.12\n", (1440.0, 698.12)),
        ("1980, [N/A]", (1980.0, None)),
        ("345,N/A", (345.0, None)),
        ("", None),
        ("No devices were found", None),
        ("[N/A], 120.5", None),
        ("1, 2, 3", None),
    ],
)
def test_a_sample_line_reads_exactly(line: str, sample: tuple | None) -> None:
    assert parse_sample(line) == sample


def test_a_summary_of_samples() -> None:
    assert summarize([(1400.0, 600.0), (1500.0, None), (1600.0, 700.0)]) == ClockSummary(
        median_mhz=1500.0, min_mhz=1400.0, max_mhz=1600.0, median_power_w=650.0, samples=3
    )
    assert summarize([(1980.0, None)]) == ClockSummary(1980.0, 1980.0, 1980.0, None, 1)
    assert summarize([]) is None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(200, 2500).map(float),
            st.none() | st.floats(50, 1000, allow_nan=False),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_a_summary_matches_its_definition(samples) -> None:
    summary = summarize(samples)
    clocks = [clock for clock, _ in samples]
    powers = [power for _, power in samples if power is not None]
    assert summary is not None and summary.samples == len(samples)
    assert summary.min_mhz <= summary.median_mhz <= summary.max_mhz
    assert (summary.min_mhz, summary.max_mhz) == (min(clocks), max(clocks))
    assert summary.median_mhz == statistics.median(clocks)
    assert summary.median_power_w == (statistics.median(powers) if powers else None)
    # Each line nvidia-smi would print reads back as its sample.
    for clock, power in samples:
        text = f"{clock:.0f}, {'[N/A]' if power is None else repr(power)}"
        assert parse_sample(text) == (clock, power)


def _printer(lines: list[str], then_sleep: float = 30.0, first_sleep: float = 0.0) -> list[str]:
    """A command waiting `first_sleep` s (nvidia-smi's start), printing `lines` (flushed), then
    waiting as nvidia-smi's loop does."""
    program = (
        f"import sys, time\ntime.sleep({first_sleep})\nfor line in {lines!r}:\n"
        f"    print(line, flush=True)\ntime.sleep({then_sleep})"
    )
    return [sys.executable, "-c", program]


def test_the_sampler_reads_every_line_of_its_process_while_the_block_runs() -> None:
    lines = ["1500, 650.5", "1410, [N/A]", "", "a message", "1620, 700"]
    started = time.perf_counter()
    with ClockSampler(command=_printer(lines)) as sampler:
        deadline = time.perf_counter() + 20
        while len(sampler.samples) < 3 and time.perf_counter() < deadline:
            time.sleep(0.01)
    # The block's end stops the process (it would have slept 30 s).
    assert time.perf_counter() - started < 15
    assert sampler.samples == [(1500.0, 650.5), (1410.0, None), (1620.0, 700.0)]
    assert sampler.error is None
    assert sampler.summary() == ClockSummary(1500.0, 1410.0, 1620.0, 675.25, 3)


def test_entering_the_block_waits_for_the_first_sample() -> None:
    """A block shorter than nvidia-smi's start would otherwise run before any sample."""
    with ClockSampler(command=_printer(["1700, 500"], first_sleep=1.0)) as sampler:
        assert sampler.samples == [(1700.0, 500.0)]
    # A process that never prints holds the block back only `first_sample_timeout_s`.
    started = time.perf_counter()
    with ClockSampler(command=_printer([], first_sleep=30.0), first_sample_timeout_s=0.2) as quiet:
        waited = time.perf_counter() - started
    assert 0.2 <= waited < 10 and quiet.samples == []


def test_a_failing_or_missing_command_gives_no_samples_and_says_why() -> None:
    failing = [sys.executable, "-c", "import sys; sys.stderr.write('No devices'); sys.exit(6)"]
    with ClockSampler(command=failing) as sampler:
        time.sleep(0.5)
    assert (sampler.samples, sampler.summary()) == ([], None)
    assert sampler.error is not None and "ended with status 6: No devices" in sampler.error
    with ClockSampler(command=["/no/such/nvidia-smi"]) as missing:
        pass
    assert missing.summary() is None
    assert missing.error is not None and "/no/such/nvidia-smi could not be started" in missing.error


def test_the_nvidia_smi_command_names_the_gpu_and_period() -> None:
    command = ClockSampler("00000000:19:00.0", 50).command
    assert command[1:] == [
        "--query-gpu=clocks.sm,power.draw",
        "--format=csv,noheader,nounits",
        "-lms=50",
        "--id=00000000:19:00.0",
    ]
    assert ClockSampler(2).command[-1] == "--id=2"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"gpu": -1}, r"gpu=-1; expected an index >= 0 or a PCI bus id"),
        ({"gpu": True}, r"gpu=True; expected an index"),
        ({"gpu": " "}, r"gpu=' '; expected an index"),
        ({"gpu": 1.0}, r"gpu=1.0; expected an index"),
        ({"period_ms": 0}, r"period_ms=0; expected an int >= 1"),
        ({"period_ms": False}, r"period_ms=False; expected an int >= 1"),
        ({"first_sample_timeout_s": -1}, r"first_sample_timeout_s=-1; expected a number >= 0"),
        ({"first_sample_timeout_s": "1"}, r"first_sample_timeout_s='1'; expected a number"),
    ],
)
def test_bad_arguments_are_refused_by_name(arguments: dict, message: str) -> None:
    with pytest.raises(LaunchError, match="^ClockSampler: " + message):
        ClockSampler(**arguments)


def test_a_gpu_is_named_by_its_pci_bus_id_where_torch_gives_one() -> None:
    """The two numberings of GPUs (CUDA's and nvidia-smi's) may differ; the bus id does not."""
    from types import SimpleNamespace

    with_bus = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x19, pci_device_id=0)
    assert nvidia_smi_id(1, with_bus) == "00000000:19:00.0"
    other = SimpleNamespace(pci_domain_id=1, pci_bus_id=0xAB, pci_device_id=3)
    assert nvidia_smi_id(0, other) == "00000001:ab:03.0"
    assert nvidia_smi_id(1, SimpleNamespace(name="H200")) == 1

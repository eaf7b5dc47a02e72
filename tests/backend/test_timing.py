"""The timing protocol's argument checks, on any machine (`backend.timing`).

`median_us`, `medians_in_turns` and `steady_in_turns` refuse what they cannot time with a
`LaunchError` naming the function, the bad value and what was expected, before they import
torch or touch a GPU. What they measure is tested on the GPU (`test_gpu_autotune.py`).
`steady_launches` (the launches of a back-to-back block) against exact tables and its
definition, and `SteadyTime.figures` exactly.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.errors import LaunchError
from backend.gpu_clocks import ClockSummary
from backend.timing import SteadyTime, median_us, medians_in_turns, steady_in_turns, steady_launches


def _run() -> None:
    return None


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        ({}, r"runs \{\}; expected a mapping of one or more non-empty str names to callables"),
        ([_run], r"runs \[<function _run at .*>\]; expected a mapping"),
        ({"": _run}, r"runs \{'': <function _run at .*>\}; expected a mapping"),
        ({1: _run}, r"runs \{1: <function _run at .*>\}; expected a mapping"),
        ({"ours": _run, None: _run}, r"runs \{'ours': .*, None: .*\}; expected a mapping"),
    ],
)
def test_medians_in_turns_refuses_runs_it_cannot_name(runs: object, message: str) -> None:
    with pytest.raises(LaunchError, match="^medians_in_turns: " + message):
        medians_in_turns(runs, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"repeats": 0}, r"repeats=0; expected an int >= 1"),
        ({"repeats": True}, r"repeats=True; expected an int >= 1"),
        ({"repeats": 2.0}, r"repeats=2.0; expected an int >= 1"),
        ({"warmup": -1}, r"warmup=-1; expected an int >= 0"),
        ({"sleep_cycles": 0}, r"sleep_cycles=0; expected an int >= 1"),
    ],
)
def test_both_refuse_counts_out_of_range(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(LaunchError, match="^medians_in_turns: " + message):
        medians_in_turns({"ours": _run}, None, **arguments)  # type: ignore[arg-type]
    with pytest.raises(LaunchError, match="^median_us: " + message):
        median_us(_run, None, **arguments)  # type: ignore[arg-type]


def test_a_flush_that_is_not_a_cuda_tensor_is_refused() -> None:
    pytest.importorskip("torch")
    with pytest.raises(LaunchError, match=r"^medians_in_turns: flush is NoneType; expected a CUDA"):
        medians_in_turns({"ours": _run}, None)
    with pytest.raises(LaunchError, match=r"^median_us: flush is list; expected a CUDA tensor"):
        median_us(_run, [])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"launches": 0}, r"launches=0; expected an int >= 1"),
        ({"launches": True}, r"launches=True; expected an int >= 1"),
        ({"rounds": 0}, r"rounds=0; expected an int >= 1"),
        ({"rounds": 1.5}, r"rounds=1.5; expected an int >= 1"),
        ({"warmup": -1}, r"warmup=-1; expected an int >= 0"),
    ],
)
def test_steady_timing_refuses_counts_out_of_range(arguments: dict[str, object], message: str):
    with pytest.raises(LaunchError, match="^steady_in_turns: " + message):
        steady_in_turns({"ours": _run}, **arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize("runs", [{}, [_run], {"": _run}, {2: _run}])
def test_steady_timing_refuses_runs_it_cannot_name(runs: object) -> None:
    with pytest.raises(LaunchError, match=r"^steady_in_turns: runs .*; expected a mapping"):
        steady_in_turns(runs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("us", "launches"),
    [
        (5000.0, 50),
        (5001.0, 50),
        (4999.0, 51),
        (1000, 250),
        (250_000.0, 1),
        (1e9, 1),
        (0.5, 500000),
    ],
)
def test_a_back_to_back_block_lasts_a_quarter_second(us: float, launches: int) -> None:
    assert steady_launches(us) == launches


@settings(max_examples=80, deadline=None)
@given(
    st.floats(1e-3, 1e7, allow_nan=False),
    st.floats(1.0, 1e6, allow_nan=False),
    st.none() | st.integers(1, 1000),
)
def test_a_block_is_the_fewest_launches_that_last_it(
    us: float, block_us: float, whole: int | None
) -> None:
    """Also at blocks of a whole number of launches (`whole`), where the quotient's rounding
    could otherwise ask for one launch more."""
    if whole is not None:
        block_us = whole * us
    launches = steady_launches(us, block_us)
    assert launches >= 1 and launches * us >= block_us
    assert launches == 1 or (launches - 1) * us < block_us


@pytest.mark.parametrize("us", [0, -1.0, float("nan"), float("inf"), True, "5"])
def test_a_block_refuses_a_time_that_is_not_positive(us: object) -> None:
    with pytest.raises(LaunchError, match=r"steady_launches: us=.*; expected a finite time > 0"):
        steady_launches(us)  # type: ignore[arg-type]


@pytest.mark.parametrize("us", [5e-324, 1e-300, 1e-5])
def test_a_block_refuses_a_time_too_short_for_a_kernel(us: float) -> None:
    with pytest.raises(LaunchError, match=r"would take more than 2147483648 launches"):
        steady_launches(us)


def test_a_steady_time_s_figures() -> None:
    clock = ClockSummary(1335.0, 1080.0, 1500.0, 690.0, 40)
    assert SteadyTime(5000.0, clock).figures() == {
        "us": 5000.0,
        "clock_mhz": 1335.0,
        "min_clock_mhz": 1080.0,
        "power_w": 690.0,
    }
    assert SteadyTime(12.5, None).figures() == {
        "us": 12.5,
        "clock_mhz": None,
        "min_clock_mhz": None,
        "power_w": None,
    }

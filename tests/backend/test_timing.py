"""The timing protocol's argument checks, on any machine (`backend.timing`).

`median_us`, `medians_in_turns` and `steady_in_turns` refuse what they cannot time with a
`LaunchError` naming the function, the bad value and what was expected, before they import
torch or touch a GPU. What they measure is tested on the GPU (`test_gpu_autotune.py`).
"""

from __future__ import annotations

import pytest

from backend.errors import LaunchError
from backend.timing import median_us, medians_in_turns, steady_in_turns


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

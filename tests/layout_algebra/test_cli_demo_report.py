"""The JSON report of `layout-algebra demo --json` and its ok flag, without a GPU.

The demo's slowest step, the validation of the printed addresses (about 2 s; run for real by
tests/test_demo.py), is replaced by one whose verdicts each test chooses, and the GPU is
reported absent; the program is still built, its layouts proved, compiled and run in the
interpreter. The interpreter's output is compared, row by row, with a float64 dequantize-then-
matmul written here from the inputs the demo drew.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import backend.device
import ir
import proofs.lowering_validation
from backend.errors import NoDeviceError
from ir import dtypes
from layout_algebra import cli
from proofs.lowering_validation import LoweringValidation
from proofs.result import ProofResult

GROUP_SIZE = 128
"""The demo's quantization group along k."""


@pytest.fixture
def demo(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """A function running the demo with the given lowering verdicts; it returns the exit code,
    the JSON report and the interpreter's runs (inputs, output and grid of each)."""
    runs: list[dict[str, Any]] = []
    drawn: list[dict[str, Any]] = []
    run_reference, demo_inputs = ir.run_reference, cli._demo_inputs

    def no_device() -> str:
        raise NoDeviceError("no device in this test")

    def recording_inputs(*args: Any) -> dict[str, Any]:
        drawn.append(demo_inputs(*args))
        return drawn[-1]

    def recording_run(program: Any, *args: Any, grid: Any = 1, **kwargs: Any) -> Any:
        result = run_reference(program, *args, grid=grid, **kwargs)
        runs.append({"inputs": drawn[-1], "output": args[-1].copy(), "grid": grid})
        return result

    monkeypatch.setattr(backend.device, "current_arch", no_device)
    monkeypatch.setattr(cli, "_demo_inputs", recording_inputs)
    monkeypatch.setattr(ir, "run_reference", recording_run)

    def run(verdicts: list[bool | None], *args: str) -> tuple[int, dict, list[dict[str, Any]]]:
        def validate_lowering(kernel: Any, **limits: Any) -> LoweringValidation:
            return LoweringValidation(
                tuple(
                    (f"access {k}", ProofResult(verdict, None, "chosen by the test", 0.0))
                    for k, verdict in enumerate(verdicts)
                )
            )

        monkeypatch.setattr(proofs.lowering_validation, "validate_lowering", validate_lowering)
        code = cli.main(["demo", "--json", *args])
        printed = capsys.readouterr()
        assert printed.out, f"no report; exit code {code}, stderr: {printed.err}"
        return code, json.loads(printed.out), runs

    return run


def dequantized_matmul(inputs: dict[str, Any], weights: str) -> np.ndarray:
    """a @ (w * s) in float64: w the decoded weight codes, s each group's scale repeated over
    its GROUP_SIZE rows of k."""
    a = inputs["a"].astype(np.float64)
    w = dtypes.from_name(weights).decode(inputs["codes"]).astype(np.float64)
    s = np.repeat(inputs["scales"].astype(np.float64), GROUP_SIZE, axis=0)[: w.shape[0]]
    return a @ (w * s)


def row_errors(output: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """The relative error of each row of `output` against `reference`."""
    difference = np.linalg.norm(output.astype(np.float64) - reference, axis=1)
    return difference / np.linalg.norm(reference, axis=1)


def test_demo_report_without_a_gpu(demo) -> None:
    code, report, runs = demo([True, True])
    assert code == cli.EXIT_OK
    assert report["ok"] is True
    assert report["weights"] == "u4"
    assert report["gpu"] is None
    assert report["compile"]["arch"] == "sm_90a"
    assert report["lowering_proofs"] == {"proved": 2, "total": 2, "holds": True}
    assert report["layout_proofs"]["proved"] == report["layout_proofs"]["total"] > 0
    # The shape the report names is the problem the interpreter ran: two k-groups of 128 and
    # m = 96, a partial second tile of 64 rows.
    (run,) = runs
    m, n, k = (report["shape"][axis] for axis in "mnk")
    assert (k, m % 64) == (2 * GROUP_SIZE, 32)
    assert run["inputs"]["a"].shape == (m, k) and run["output"].shape == (m, n)
    reference = dequantized_matmul(run["inputs"], "u4")
    assert row_errors(run["output"], reference).max() < 1e-2
    whole = np.linalg.norm(run["output"] - reference) / np.linalg.norm(reference)
    assert report["interpreter"]["relative_error"] == pytest.approx(whole, rel=1e-9)


@pytest.mark.parametrize(
    ("verdicts", "proved", "holds"),
    [
        ([True, False], 1, False),  # an address refuted
        ([None, True], 1, None),  # an address the solver could not decide
    ],
    ids=["refuted", "unknown"],
)
def test_demo_is_not_ok_unless_the_lowering_is_proved(
    demo, verdicts: list[bool | None], proved: int, holds: bool | None
) -> None:
    code, report, _ = demo(verdicts)
    assert report["lowering_proofs"] == {"proved": proved, "total": 2, "holds": holds}
    assert report["interpreter"]["relative_error"] < 1e-2
    assert report["ok"] is False
    assert code == cli.EXIT_REFUTED


def test_demo_grid_covers_a_partial_last_tile(demo, monkeypatch: pytest.MonkeyPatch) -> None:
    # m = 65: one row beyond the first 64-row tile; the grid needs 2 tiles along m.
    monkeypatch.setitem(cli.DEMO_SHAPE, "m", 65)
    code, report, runs = demo([True])
    (run,) = runs
    assert run["output"].shape == (65, 128)
    errors = row_errors(run["output"], dequantized_matmul(run["inputs"], "u4"))
    assert errors.max() < 1e-2, f"rows off: {np.nonzero(errors >= 1e-2)[0].tolist()}"
    assert report["ok"] is True and code == cli.EXIT_OK


def test_the_steps_go_to_stdout_and_no_bar_to_a_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --json the step report is the command's output (``demo > out`` keeps it), and
    progress bars, which redraw a line with ``\\r``, are drawn only on a terminal."""

    def no_device() -> str:
        raise NoDeviceError("no device in this test")

    def validate_lowering(kernel: Any, **limits: Any) -> LoweringValidation:
        return LoweringValidation((("access", ProofResult(True, None, "stub", 0.0)),))

    monkeypatch.setattr(backend.device, "current_arch", no_device)
    monkeypatch.setattr(proofs.lowering_validation, "validate_lowering", validate_lowering)
    assert cli.main(["demo"]) == 0
    printed = capsys.readouterr()
    assert printed.out.startswith("1. built ")
    assert "5. no GPU found" in printed.out
    assert "\r" not in printed.err and "\r" not in printed.out

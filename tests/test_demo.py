"""The `layout-algebra demo` command end to end (no GPU: build, prove, interpret, compile).

NVRTC comes with the `dev` extra, so a missing one fails these tests instead of skipping them.
"""

from __future__ import annotations

import json

import pytest

from layout_algebra.cli import EXIT_OK, main


def _demo_report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["demo", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_demo_proves_interprets_and_compiles(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _demo_report(capsys)
    assert code == EXIT_OK
    assert report["ok"] is True
    assert report["program"]["name"] == "quantized_matmul"
    assert report["layout_proofs"]["proved"] == report["layout_proofs"]["total"] > 0
    lowering = report["lowering_proofs"]
    assert lowering["holds"] is True
    assert lowering["proved"] == lowering["total"] > 0
    assert report["interpreter"]["relative_error"] < 1e-2
    assert report["compile"]["cubin_bytes"] > 0


@pytest.mark.parametrize("weights", ["i3", "f4e2m1"])
def test_demo_other_weight_types(capsys: pytest.CaptureFixture[str], weights: str) -> None:
    code, report = _demo_report(capsys, "--weights", weights)
    assert code == EXIT_OK
    assert report["weights"] == weights
    assert report["interpreter"]["relative_error"] < 1e-2


def test_demo_rejects_an_unknown_weight_type(capsys: pytest.CaptureFixture[str]) -> None:
    # A usage error (exit 2), with the type's problem and the weight types.
    assert main(["demo", "--weights", "float8_e4m3"]) == 2
    err = capsys.readouterr().err
    assert "ambiguous" in err and "u1..u8, i1..i8" in err


@pytest.mark.parametrize(
    ("weights", "message"),
    [("bogus", "bogus"), ("f16", "'f16' has 16 bits: not a weight type"), ("i32", "32 bits")],
)
def test_demo_refuses_other_weight_types_as_usage_errors(
    capsys: pytest.CaptureFixture[str], weights: str, message: str
) -> None:
    assert main(["demo", "--weights", weights]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_demo_help_lists_the_weight_types(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--help"]) == 0
    assert "u1..u8, i1..i8, or a float of at most 8 bits" in " ".join(
        capsys.readouterr().out.split()
    )

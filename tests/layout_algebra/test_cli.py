"""Tests of the restricted expression grammar and of the `layout-algebra` command line.

The command line runs in-process through `main([...])`, plus one run of `python -m
layout_algebra` in a subprocess. `equiv` is checked against a stand-in `proofs` module (its
output and exit codes for each verdict) and end to end with the real one (a hard dependency of
these tests: a missing `proofs` package fails them, never skips them).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import layout_algebra
import proofs
from layout_algebra import (
    ExpressionError,
    LayoutError,
    RegisterLayout,
    local,
    parse_layout,
    reduce,
    replicate,
    reshape,
    spatial,
)
from layout_algebra.cli import main
from layout_algebra.expression_parser import FUNCTIONS, METHODS
from layout_algebra.render import CONFLICT_COLOUR

REPOSITORY = Path(__file__).resolve().parents[2]
MMA_C = local(2, 1).spatial(8, 4).local(1, 2)
GRID = "0:0 1:0 2:0 3:0\n0:1 1:1 2:1 3:1\n4:0 5:0 6:0 7:0\n4:1 5:1 6:1 7:1"


# --------------------------------------------------------------------------------------------
# The grammar
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("local(2,1).spatial(8,4).local(1,2)", MMA_C),
        ("spatial(2,4) * local(2,1)", spatial(2, 4).local(2, 1)),
        ("reduce(spatial(3,4), [0])", reduce(spatial(3, 4), [0])),
        ("  (local(2,1) * spatial(8,4)) * local(1,2)  ", MMA_C),
        ("local(2,1).spatial(8,4).local(1,2) / local(1,2)", local(2, 1).spatial(8, 4)),
        ("reduce(spatial(3,4), (0,), keepdims=True)", reduce(spatial(3, 4), [0], keepdims=True)),
        ("reshape(local(2, 3), [-1])", local(6)),
        ("local(2,3).reshape(3, 2)", reshape(local(2, 3), (3, 2))),
        ("spatial(4).replicate(2).reduce(0)", replicate(8)),
        ("auto_local_spatial(128, [64, 32])", local(16, 1).spatial(4, 32)),
        ("concat(spatial(4), spatial(4), 0)", local(2).spatial(4)),
        (
            "register_layout(shape=(4,), mode_shape=(2, 2), spatial_modes=(1, 0), local_modes=())",
            layout_algebra.register_layout((4,), (2, 2), (1, 0), ()),
        ),
        ("left_divide(local(2).spatial(4), local(2))", spatial(4)),
    ],
)
def test_parse_layout_table(text: str, expected: RegisterLayout) -> None:
    assert parse_layout(text) == expected


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("__import__('os')", "'__import__' at column 1: unknown function"),
        ("__import__('os').system('true')", "system.? at column 1: unknown method"),
        ("spatial(2) + local(2)", "only '\\*' \\(product\\) and '/' \\(divide\\)"),
        ("spatial(2).shape", "expected a layout function call"),
        ("spatial(2).__class__(2)", "unknown method"),
        ("spatial('2')", "'2'.*expected a layout function call"),
        ("spatial(2.0)", "'2.0' at column 9"),
        ("local(*[2])", "'\\*' unpacking is not allowed"),
        ("local(**{})", "'\\*\\*' unpacking is not allowed"),
        ("spatial(x=2)", "bad arguments for spatial"),
        ("reduce(spatial(2))", "bad arguments for reduce.*dims"),
        ("spatial(2", "invalid syntax"),
        ("local(2)\x00", "invalid syntax"),
        ("[1, 2]", "denotes \\(1, 2\\), expected a layout"),
        ("2 * local(2)", "need a layout on both sides"),
        ("(2).local(2)", "needs a layout before the dot"),
        ("reshape(local(4), [local(2)])", "lists and tuples may only hold integers"),
        ("local(--2)", "expected a layout function call"),
        ("lambda: local(2)", "expected a layout function call"),
        ("spatial(2)[0]", "expected a layout function call"),
        ("x", "expected a layout function call"),
        ("local(2)(3)", "only named functions and layout methods can be called"),
        ("local(" + "1," * 6000 + "1)", "longer than"),
    ],
)
def test_parse_layout_rejects_text_outside_the_grammar(text: str, match: str) -> None:
    with pytest.raises(ExpressionError, match=match):
        parse_layout(text)


def test_parse_layout_reports_invalid_operations_as_layout_errors() -> None:
    with pytest.raises(LayoutError, match="must be >= 1") as caught:
        parse_layout("spatial(0)")
    assert not isinstance(caught.value, ExpressionError)


def test_parse_layout_never_evaluates_python(tmp_path: Path) -> None:
    marker = tmp_path / "touched"
    with pytest.raises(ExpressionError, match="unknown function"):
        parse_layout(f"open({str(marker)!r}, 'w')")
    assert not marker.exists()


# --------------------------------------------------------------------------------------------
# show
# --------------------------------------------------------------------------------------------


def test_show_prints_the_numbers_and_the_grid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "spatial(2,4).local(2,1)"]) == 0
    out = capsys.readouterr().out
    assert out == (
        "layout       spatial(2,4).local(2,1)\n"
        "shape        (4, 4)\n"
        "num_threads  8\n"
        "local_size   2\n"
        "replication  1\n"
        "\n" + GRID + "\n"
    )


def test_show_a_reduction(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "reduce(spatial(3,4), [0])"]) == 0
    out = capsys.readouterr().out
    assert "layout       replicate(3).spatial(4)\n" in out
    assert "replication  3\n" in out
    assert out.endswith(" 0:0|4:0|8:0  1:0|5:0|9:0 2:0|6:0|10:0 3:0|7:0|11:0\n")


def test_show_omits_a_huge_grid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "local(1000, 1000)"]) == 0
    assert "grid omitted: 1000000 thread-register pairs" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["show", "spatial(2) + local(2)"], 2, "only '*' (product) and '/' (divide)"),
        (["show", "spatial(2"], 2, "invalid syntax"),
        (["show"], 2, "the following arguments are required: expr"),
        ([], 2, "the following arguments are required: COMMAND"),
        (["draw", "local(2)"], 2, "invalid choice: 'draw'"),
        (["equiv", "local(2)", "local(2)", "--timeout", "0"], 2, "expected a positive number"),
        (["equiv", "local(2)", "local(2)", "--timeout", "1e308"], 2, "up to 4294967"),
        (["equiv", "local(2)", "local(2)", "--timeout", "inf"], 2, "up to 4294967"),
        (["equiv", "local(2)", "local(2)", "--timeout", "nan"], 2, "up to 4294967"),
        (["show", "spatial(0)"], 4, "LayoutError: spatial shape[0] must be >= 1, got 0"),
        (["show", "local(2).spatial(4) / local(2)"], 4, "are not the last local modes"),
    ],
)
def test_exit_codes_of_errors(
    argv: list[str], code: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == code
    captured = capsys.readouterr()
    assert message in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "show" in out and "equiv" in out and "Exit codes" in out


def test_show_writes_html_and_png_pictures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html, png = tmp_path / "layout.html", tmp_path / "layout"
    assert main(["show", "spatial(2,4).local(2,1)", "--html", str(html), "--png", str(png)]) == 0
    text = html.read_text(encoding="utf-8")
    assert "<table" in text and "7:1" in text
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    out = capsys.readouterr().out
    assert f"wrote {html}\n" in out and f"wrote {png}\n" in out


def test_show_reports_an_unwritable_file_as_exit_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "missing" / "layout.html"
    assert main(["show", "local(2)", "--html", str(target)]) == 4
    captured = capsys.readouterr()
    assert "FileNotFoundError" in captured.err
    assert "Traceback" not in captured.err


# --------------------------------------------------------------------------------------------
# equiv
# --------------------------------------------------------------------------------------------


def install_fake_proofs(monkeypatch: pytest.MonkeyPatch, result: types.SimpleNamespace) -> list:
    """A stand-in `proofs` module whose check_equivalent returns `result`; returns its calls."""
    calls: list = []
    proofs = types.ModuleType("proofs")

    def check_equivalent(a: RegisterLayout, b: RegisterLayout, timeout: float):
        calls.append((a, b, timeout))
        return result

    proofs.check_equivalent = check_equivalent
    monkeypatch.setitem(sys.modules, "proofs", proofs)
    return calls


@pytest.mark.parametrize(
    ("result", "code", "expected"),
    [
        (
            types.SimpleNamespace(holds=True, counterexample=None, reason="", seconds=0.0123),
            0,
            "equivalent (proved in 12 ms)\n",
        ),
        (
            types.SimpleNamespace(
                holds=False,
                counterexample={"t": 1, "i": 0, "a": (0, 1), "b": [1, 0]},
                reason="the images differ",
                seconds=0.01,
            ),
            1,
            "not equivalent: thread 1, register 0 maps to (0, 1) under A but (1, 0) under B\n",
        ),
        (
            types.SimpleNamespace(
                holds=False, counterexample=None, reason="shapes (4,) and (2,) differ", seconds=0
            ),
            1,
            "not equivalent: shapes (4,) and (2,) differ\n",
        ),
        (
            types.SimpleNamespace(holds=None, counterexample=None, reason="timeout", seconds=5.0),
            3,
            "unknown: timeout\n",
        ),
    ],
    ids=["proved", "refuted", "different-domains", "unknown"],
)
def test_equiv_reports_each_verdict(
    result: types.SimpleNamespace,
    code: int,
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls = install_fake_proofs(monkeypatch, result)
    argv = ["equiv", "spatial(2,2)", "column_spatial(2,2)", "--timeout", "2.5"]
    assert main(argv) == code
    assert capsys.readouterr().out == expected
    assert calls == [(spatial(2, 2), layout_algebra.column_spatial(2, 2), 2.5)]


def test_equiv_rejects_a_bad_expression_before_calling_the_solver(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = install_fake_proofs(monkeypatch, types.SimpleNamespace(holds=True))
    assert main(["equiv", "local(2)", "open('x')"]) == 2
    assert "unknown function" in capsys.readouterr().err
    assert calls == []


def test_equiv_end_to_end_with_the_solver(capsys: pytest.CaptureFixture[str]) -> None:
    assert sys.modules["proofs"] is proofs  # the real package, not a stand-in
    assert (
        main(["equiv", "local(2,1).spatial(8,4).local(1,2)", "local(2,1)*spatial(8,4)*local(1,2)"])
        == 0
    )
    assert capsys.readouterr().out.startswith("equivalent (proved in ")
    assert main(["equiv", "spatial(8,4).local(2,2)", "local(2,1).spatial(8,4).local(1,2)"]) == 1
    out = capsys.readouterr().out
    words = out.replace(",", " ").split()
    t, i = int(words[words.index("thread") + 1]), int(words[words.index("register") + 1])
    a, b = spatial(8, 4).local(2, 2).map(t, i), MMA_C.map(t, i)
    assert a != b
    assert f"maps to {a} under A but {b} under B" in out


def test_equiv_writes_the_difference_pictures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html, png = tmp_path / "difference.html", tmp_path / "difference.png"
    argv = ["equiv", "local(2,2)", "column_local(2,2)", "--html", str(html), "--png", str(png)]
    assert main(argv) == 1
    text = html.read_text(encoding="utf-8")
    assert text.count(f"box-shadow:inset 0 0 0 3px {CONFLICT_COLOUR}") == 2
    assert "a 0:1<br>b 0:2" in text and "2 of 4 elements differ" in text
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    out = capsys.readouterr().out
    assert out.startswith("not equivalent: thread 0, register ")
    assert out.endswith(f"wrote {html}\nwrote {png}\n")


def test_equiv_of_equal_layouts_draws_no_mark(tmp_path: Path) -> None:
    html = tmp_path / "same.html"
    argv = ["equiv", "local(2,1).spatial(8,4).local(1,2)", "local(2,1)*spatial(8,4)*local(1,2)"]
    assert main([*argv, "--html", str(html)]) == 0
    text = html.read_text(encoding="utf-8")
    assert "0 of 128 elements differ" in text and "box-shadow" not in text


def test_equiv_pictures_of_different_shapes_fail_before_the_solver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = install_fake_proofs(monkeypatch, types.SimpleNamespace(holds=False))
    html = tmp_path / "difference.html"
    assert main(["equiv", "local(4)", "local(2,2)", "--html", str(html)]) == 4
    captured = capsys.readouterr()
    assert "LayoutError: cannot draw the difference of local(4) (shape (4,), 1 threads)" in (
        captured.err
    )
    assert captured.out == "" and calls == [] and not html.exists()


@pytest.mark.parametrize("command", ["show", "equiv"])
def test_help_of_expression_commands_states_the_grammar(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "EXPR := FUNCTION(ARGS) | EXPR.METHOD(ARGS) | EXPR * EXPR | EXPR / EXPR | (EXPR)" in out
    assert "'*' is product(a, b), '/' is divide(a, b)" in out
    words = set(re.findall(r"[a-z_]+", out))
    assert set(FUNCTIONS) <= words and METHODS <= words
    assert "NAME=ARG keywords" in out


# --------------------------------------------------------------------------------------------
# python -m layout_algebra
# --------------------------------------------------------------------------------------------


def test_python_dash_m_runs_the_command_line() -> None:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(REPOSITORY)] + ([environment["PYTHONPATH"]] if environment.get("PYTHONPATH") else [])
    )
    completed = subprocess.run(
        [sys.executable, "-m", "layout_algebra", "show", "spatial(2,4).local(2,1)"],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        env=environment,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.endswith(GRID + "\n")
    assert completed.stderr == ""

"""The stall-sample reader (`benchmarks/stall_samples.py`): a small source page of two kernels
read into exact counts and tables, the mnemonic of SASS lines, a property (every sample counted
once, under its mnemonic and its reason), and pages that are not source pages refused."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

_spec = importlib.util.spec_from_file_location(
    "stall_samples_benchmark", Path(__file__).parents[1] / "benchmarks" / "stall_samples.py"
)
stalls = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = stalls
_spec.loader.exec_module(stalls)

HEADER = [
    "Address",
    "Source",
    "# Samples",
    "stall_long_sb",
    "stall_wait",
    "stall_math",
    "stall_long_sb (Not Issued)",
    "stall_wait (Not Issued)",
]


def page(*kernels: tuple[str, list[tuple[str, int, int, int]]]) -> str:
    """A source page of `kernels`: (name, [(source, long_sb, wait, math), ...])."""
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL)
    for name, lines in kernels:
        writer.writerow(["Kernel Name", name])
        writer.writerow(HEADER)
        for n, (source, long_sb, wait, math) in enumerate(lines):
            total = long_sb + wait + math
            # The not-issued columns repeat a subset of the samples: never counted.
            writer.writerow([hex(16 * n), source, total, long_sb, wait, math, long_sb, wait])
    return out.getvalue()


PAGE = page(
    (
        "decode_i2",
        [
            ("      LDG.E.128 R44, desc[UR6][R44.64]", 0, 3, 0),
            ("      HADD2.F32 R29, -RZ, R45.H0_H0", 733, 2, 0),
            ("      HMMA.16816.F32 R56, R60.reuse, R36, RZ", 0, 40, 25),
            ("@!P0  HMMA.16816.F32 R60, R60, R38, R60", 0, 10, 30),
            ("      HADD2.F32 R45, -RZ, R45.H1_H1", 5, 0, 0),
        ],
    ),
    ("prefill_i4", [("@P1   BRA 0x7ff7", 0, 7, 0), ("      LOP3.LUT R1, R2, 0xf, RZ", 0, 0, 0)]),
)


def test_a_page_of_two_kernels_is_counted_exactly() -> None:
    decode, prefill = stalls.read_page(PAGE)
    assert (decode.kernel, decode.samples) == ("decode_i2", 848)
    assert decode.by_reason == {"long_sb": 738, "wait": 55, "math": 55}
    assert decode.by_mnemonic == {
        "LDG": {"wait": 3},
        "HADD2": {"long_sb": 738, "wait": 2},
        "HMMA": {"wait": 50, "math": 55},
    }
    assert (prefill.kernel, prefill.samples, prefill.by_mnemonic) == (
        "prefill_i4",
        7,
        {"BRA": {"wait": 7}},
    )
    assert stalls.table(decode, top=2, reasons=1) == (
        "decode_i2: 848 samples\n\n"
        "| mnemonic | samples | share | reasons |\n"
        "|---|---:|---:|---|\n"
        "| HADD2 | 740 | 87.3 % | long_sb 738 |\n"
        "| HMMA | 105 | 12.4 % | math 55 |\n\n"
        "by reason: long_sb 738, math 55, wait 55\n"
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("      LDG.E.128 R44, desc[UR6][R44.64]", "LDG"),
        ("@!P0  LDGSTS.E.BYPASS.128 [R45], desc[UR12][R36.64], !PT", "LDGSTS"),
        ("@P1   BRA 0x7ff77fe351f0", "BRA"),
        ("@!UP0 UIADD3 UR8, UR5, 0x1, URZ", "UIADD3"),
        ("@PT LDS RZ, [RZ]", "LDS"),
        ("ERRBAR", "ERRBAR"),
    ],
)
def test_the_mnemonic_of_a_sass_line(source: str, expected: str) -> None:
    assert stalls.mnemonic(source) == expected


@pytest.mark.parametrize("source", ["", "   ", "@P0 ", "0x7ff7 R1"])
def test_a_line_without_an_instruction_is_refused(source: str) -> None:
    with pytest.raises(ValueError, match="expected a SASS instruction"):
        stalls.mnemonic(source)


LINES = st.lists(
    st.tuples(
        st.sampled_from(["HMMA.16816.F32 R1, R2, R3, R4", "@P0 LDG.E R1, [R2]", "LOP3.LUT R1"]),
        st.integers(0, 50),
        st.integers(0, 50),
        st.integers(0, 50),
    ),
    max_size=12,
)


@settings(max_examples=50, deadline=None)
@given(kernels=st.lists(LINES, min_size=1, max_size=3))
def test_every_sample_is_counted_once_under_its_mnemonic_and_reason(kernels) -> None:
    read = stalls.read_page(page(*[(f"k{i}", lines) for i, lines in enumerate(kernels)]))
    assert [k.kernel for k in read] == [f"k{i}" for i in range(len(kernels))]
    for lines, counted in zip(kernels, read):
        assert counted.samples == sum(a + b + c for _, a, b, c in lines)
        for index, reason in enumerate(("long_sb", "wait", "math")):
            assert counted.by_reason[reason] == sum(line[1 + index] for line in lines)
        by_mnemonic = sum((c for c in counted.by_mnemonic.values()), start=stalls.Counter())
        assert +by_mnemonic == +counted.by_reason
        assert all(sum(c.values()) > 0 for c in counted.by_mnemonic.values())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no 'Kernel Name' row"),
        ('"Address","Source"\n"0x0","LDG"\n', "before any 'Kernel Name' row"),
        ('"Kernel Name","k"\n"Address","Source","# Samples"\n', "without a 'Source' column and"),
        ('"Kernel Name","k"\n"Address","stall_wait"\n', "without a 'Source' column and"),
        (
            '"Kernel Name","k"\n"Source","stall_wait"\n"LDG.E R1","2.5"\n',
            r"stall_wait='2.5'; expected a whole number",
        ),
    ],
)
def test_a_page_that_is_not_a_source_page_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        stalls.read_page(text)


def test_the_command_line_writes_table_and_json(tmp_path: Path, capsys) -> None:
    source = tmp_path / "page.csv"
    source.write_text(PAGE)
    assert stalls.main([str(source), "--top", "1", "--output", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "| HADD2 | 740 | 87.3 % | long_sb 738, wait 2 |" in printed
    assert "| HMMA |" not in printed and "prefill_i4: 7 samples" in printed
    record = json.loads((tmp_path / "out" / "stall_samples.json").read_text())
    assert [(k["kernel"], k["samples"]) for k in record] == [("decode_i2", 848), ("prefill_i4", 7)]
    assert (tmp_path / "out" / "stall_samples.md").read_text() == printed.rstrip("\n") + "\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--top", "0"], "--top 0 and --reasons 3"), ([], "page.csv: source page line 1")],
)
def test_bad_command_lines_are_refused(tmp_path: Path, capsys, args, message) -> None:
    source = tmp_path / "page.csv"
    source.write_text('"Address","Source"\n')
    with pytest.raises(SystemExit):
        stalls.main([str(source), *args])
    assert message in capsys.readouterr().err

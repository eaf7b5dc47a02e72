"""The stall-sample reader (`benchmarks/stall_samples.py`): a small source page of two kernels
read into exact counts and tables, the mnemonic of SASS lines, a property (every sample counted
once, under its mnemonic and its reason), and pages that are not source pages refused; the
split by region with the kernel's SASS (a warp-specialised kernel's exact regions and tables,
a property that the regions share out every sample once, the CUBIN of another kernel refused,
and the command line's ``--cubin``)."""

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

from backend import sass

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


# A warp-specialised kernel's SASS (as nvdisasm lists it, offsets 16 bytes apart): the
# consumers' k loop of tensor-core instructions (lines 1 to 4) with its barrier's retry stub
# (9 to 11, back into the loop), the producer's loop (5 to 7), then the padding after the last
# instruction (12 and 13, which the page may leave out).
SPECIALISED = [
    (None, "MOV", "R1,c[0x0][0x28]"),  # 0: outside any loop
    (None, "PRMT", "R2,R3,0x4140,R4"),  # 1: the k loop's header
    (None, "HGMMA.64x256x16.F32", "R24,R152,gdesc[UR20],R24"),  # 2
    ("@!P2", "BRA", "0x90"),  # 3: to the retry stub
    ("@!P0", "BRA", "0x10"),  # 4: the k loop's back edge
    (None, "SYNCS.PHASECHK.TRANS64.TRYWAIT", "P0,[UR10],R22"),  # 5: the producer's loop
    (None, "UTMALDG.2D", "[UR8],[UR4]"),  # 6
    ("@!P1", "BRA", "0x50"),  # 7: its back edge
    (None, "EXIT", ""),  # 8
    (None, "SYNCS.PHASECHK.TRANS64.TRYWAIT", "P0,[UR14],R20"),  # 9: the retry stub
    ("@!P0", "BRA", "0x90"),  # 10
    (None, "BRA", "0x40"),  # 11: back into the k loop
    (None, "BRA", "0xc0"),  # 12: padding
    (None, "NOP", ""),  # 13: padding
]
SPECIALISED_SAMPLES = [
    # (source as the page prints it, long_sb, wait, math): lines 0 to 11 of SPECIALISED.
    ("      MOV R1, c[0x0][0x28]", 0, 4, 0),
    ("      PRMT R2, R3, 0x4140, R4", 0, 30, 0),
    ("      HGMMA.64x256x16.F32 R24, R152, gdesc[UR20], R24", 0, 9, 0),
    ("@!P2  BRA 0x7ff7000090", 0, 0, 0),
    ("@!P0  BRA 0x7ff7000010", 0, 2, 0),
    ("      SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR10], R22", 3, 0, 0),
    ("      UTMALDG.2D [UR8], [UR4]", 0, 0, 0),
    ("@!P1  BRA 0x7ff7000050", 40, 0, 0),
    ("      EXIT", 0, 0, 0),
    ("      SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR14], R20", 7, 0, 0),
    ("@!P0  BRA 0x7ff7000090", 11, 0, 0),
    ("      BRA 0x7ff7000040", 0, 0, 0),
]
K_LOOP_LINES = {1, 2, 3, 4, 9, 10, 11}


def specialised() -> sass.Function:
    """SPECIALISED as `backend.sass` reads it from a CUBIN."""
    instructions = tuple(
        sass.Instruction(16 * index, opcode, tuple(operands.split(",")) if operands else (), guard)
        for index, (guard, opcode, operands) in enumerate(SPECIALISED)
    )
    return sass.Function("consumer_producer", 0, instructions)


def test_a_warp_specialised_kernel_s_samples_split_by_region_exactly() -> None:
    [kernel] = stalls.read_page(page(("consumer_producer", SPECIALISED_SAMPLES)))
    regions = stalls.line_regions(kernel, specialised())
    assert (
        regions
        == ["outside loops"]
        + ["k loop"] * 4
        + ["other loops"] * 3
        + ["outside loops"]
        + ["k loop"] * 3
    )
    split = stalls.by_region(kernel, regions)
    assert split == {
        "k loop": {"wait": 41, "long_sb": 18},
        "other loops": {"long_sb": 43},
        "outside loops": {"wait": 4},
    }
    assert stalls.region_table(kernel, split, reasons=1) == (
        "consumer_producer: samples by region\n\n"
        "| region | samples | share | reasons |\n"
        "|---|---:|---:|---|\n"
        "| k loop | 59 | 55.7 % | wait 41 |\n"
        "| other loops | 43 | 40.6 % | long_sb 43 |\n"
        "| outside loops | 4 | 3.8 % | wait 4 |\n"
    )
    loop = kernel.restricted(K_LOOP_LINES, "the k loop")
    assert (loop.kernel, loop.samples) == ("the k loop", 59)
    assert loop.by_mnemonic == {
        "PRMT": {"wait": 30},
        "HGMMA": {"wait": 9},
        "BRA": {"wait": 2, "long_sb": 11},
        "SYNCS": {"long_sb": 7},
    }


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        # A line whose instruction is not the CUBIN's there: another kernel's page.
        (
            [*SPECIALISED_SAMPLES[:2], ("      HMMA.16816.F32 R1, R2, R3, R4", 0, 1, 0)],
            r"line 2 of the page is 'HMMA.16816.F32 R1, R2, R3, R4', the CUBIN's instruction "
            r"there is /\*0020\*/ HGMMA",
        ),
        # More lines than instructions.
        (
            [
                *SPECIALISED_SAMPLES,
                ("      BRA 0x7ff70000c0", 0, 0, 0),
                *[("      NOP", 0, 0, 0)] * 2,
            ],
            "the page has 15 lines, the CUBIN's consumer_producer 14",
        ),
        # Fewer, where the rest is not padding.
        (SPECIALISED_SAMPLES[:9], "the page has 9 lines, the CUBIN's consumer_producer 14"),
    ],
)
def test_a_cubin_of_another_kernel_is_refused(lines, message: str) -> None:
    [kernel] = stalls.read_page(page(("consumer_producer", lines)))
    with pytest.raises(ValueError, match=message):
        stalls.line_regions(kernel, specialised())


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(
        st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(0, 30)),
        min_size=len(SPECIALISED_SAMPLES),
        max_size=len(SPECIALISED_SAMPLES),
    )
)
def test_the_regions_share_out_every_sample_once(counts) -> None:
    lines = [(source, *c) for (source, *_), c in zip(SPECIALISED_SAMPLES, counts)]
    [kernel] = stalls.read_page(page(("consumer_producer", lines)))
    split = stalls.by_region(kernel, stalls.line_regions(kernel, specialised()))
    assert list(split) == list(stalls.REGIONS)
    assert sum(split.values(), start=stalls.Counter()) == +kernel.by_reason
    in_loop = sum(sum(counts[line]) for line in K_LOOP_LINES)
    assert sum(split["k loop"].values()) == in_loop


def test_the_command_line_splits_the_samples_of_a_cubin_s_kernel(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "page.csv"
    source.write_text(page(("consumer_producer", SPECIALISED_SAMPLES)) + PAGE)
    cubin = tmp_path / "kernel0.cubin"
    cubin.write_bytes(b"\x7fELF stand-in")
    disassembled = []

    def disassemble(data: bytes) -> dict[str, sass.Function]:
        disassembled.append(data)
        return {"consumer_producer": specialised()}

    monkeypatch.setattr(stalls, "disassemble", disassemble)
    output = tmp_path / "out"
    assert stalls.main([str(source), "--cubin", str(cubin), "--output", str(output)]) == 0
    captured = capsys.readouterr()
    assert disassembled == [b"\x7fELF stand-in"]
    assert "| k loop | 59 | 55.7 % | wait 41, long_sb 18 |" in captured.out
    assert "consumer_producer, its k loop: 59 samples" in captured.out
    assert "| PRMT | 30 | 50.8 % | wait 30 |" in captured.out
    # The page's other kernels, which no CUBIN holds, are counted whole and named.
    assert "no CUBIN given holds 'decode_i2'" in captured.err
    record = json.loads((output / "stall_samples.json").read_text())
    assert record[0]["by_region"]["other loops"] == {"long_sb": 43}
    assert record[0]["k_loop_by_mnemonic"]["HGMMA"] == {"wait": 9}
    assert "by_region" not in record[1]


def test_the_top_lines_name_their_place_and_the_wait_a_branch_enters() -> None:
    [kernel] = stalls.read_page(page(("consumer_producer", SPECIALISED_SAMPLES)))
    function = specialised()
    regions = stalls.line_regions(kernel, function)
    rows = stalls.top_lines(kernel, function, regions, top=3, reasons=1)
    assert rows == [
        {
            "offset": 0x70,
            "region": "other loops",
            "source": "@!P1  BRA 0x7ff7000050",
            "branch_to": "SYNCS.PHASECHK.TRANS64.TRYWAIT",
            "samples": 40,
            "reasons": {"long_sb": 40},
        },
        {
            "offset": 0x10,
            "region": "k loop",
            "source": "PRMT R2, R3, 0x4140, R4",
            "branch_to": None,
            "samples": 30,
            "reasons": {"wait": 30},
        },
        {
            "offset": 0xA0,
            "region": "k loop",
            "source": "@!P0  BRA 0x7ff7000090",
            "branch_to": "SYNCS.PHASECHK.TRANS64.TRYWAIT",
            "samples": 11,
            "reasons": {"long_sb": 11},
        },
    ]
    assert stalls.lines_table(kernel, rows[:1]) == (
        "consumer_producer: the lines that took the most samples\n\n"
        "| offset | region | line | branch to | samples | share | reasons |\n"
        "|---:|---|---|---|---:|---:|---|\n"
        "| 0x70 | other loops | `@!P1  BRA 0x7ff7000050` | SYNCS.PHASECHK.TRANS64.TRYWAIT "
        "| 40 | 37.7 % | long_sb 40 |\n"
    )
    # Without the CUBIN: the same lines, with neither region nor target; lines without samples
    # are never listed.
    bare = stalls.top_lines(kernel, top=20)
    assert [row["offset"] for row in bare] == [0x70, 0x10, 0xA0, 0x20, 0x90, 0x0, 0x50, 0x40]
    assert all(row["region"] is None and row["branch_to"] is None for row in bare)

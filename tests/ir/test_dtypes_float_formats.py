"""The generated float-format tables: docs/float_formats.md is `float_formats_markdown()`'s text,
its rows are the formats' values, and a few rows are checked literally."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pytest

from ir import dtypes
from ir.dtypes import DataType

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "float_formats.md"
SUB_BYTE_FLOATS = [dtype for dtype in dtypes.all_dtypes() if dtype.is_float and dtype.nbits < 8]


def section_rows(text: str, dtype: DataType) -> list[list[str]]:
    """The cells of the code table under the heading of `dtype`."""
    section = text.split(f"## {dtype.name} ({dtype.long_name})\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_document_is_up_to_date() -> None:
    assert DOCUMENT.read_text(encoding="utf-8") == dtypes.float_formats_markdown()


def test_f4e2m1_rows_table() -> None:
    rows = section_rows(dtypes.float_formats_markdown(), dtypes.f4e2m1)
    assert rows == [
        ["`0 00 0`", "0x00", "0", "0"],
        ["`0 00 1`", "0x01", "0.5", "2^-1"],
        ["`0 01 0`", "0x02", "1", "2^0"],
        ["`0 01 1`", "0x03", "1.5", "3 × 2^-1"],
        ["`0 10 0`", "0x04", "2", "2^1"],
        ["`0 10 1`", "0x05", "3", "3 × 2^0"],
        ["`0 11 0`", "0x06", "4", "2^2"],
        ["`0 11 1`", "0x07", "6", "3 × 2^1"],
    ]


@pytest.mark.parametrize(
    "row",
    [
        "| f8e4m3 | float8_e4m3fn | 8 | 4 | 3 | 7 | 448 | 7 × 2^6 | 2^-6 | 2^-9 | no | yes |",
        "| f8e5m2 | float8_e5m2 | 8 | 5 | 2 | 15 | 57344 | 7 × 2^13 | 2^-14 | 2^-16 | yes | yes |",
        "| f6e3m2 | float6_e3m2fn | 6 | 3 | 2 | 3 | 28 | 7 × 2^2 | 2^-2 | 2^-4 | no | no |",
        "| bf16 | bfloat16 | 16 | 8 | 7 | 127 | ≈ 3.3895313892515355e+38 | 255 × 2^120 | 2^-126 "
        "| 2^-133 | yes | yes |",
    ],
)
def test_summary_rows_table(row: str) -> None:
    assert row in dtypes.float_formats_markdown().splitlines()


@pytest.mark.parametrize("dtype", SUB_BYTE_FLOATS, ids=str)
def test_every_non_negative_code_is_listed_with_its_value(dtype: DataType) -> None:
    rows = section_rows(dtypes.float_formats_markdown(), dtype)
    assert [int(row[1], 16) for row in rows] == list(range(2 ** (dtype.nbits - 1)))
    for code, (fields, _, decimal, exact) in enumerate(rows):
        assert int(fields.strip("`").replace(" ", ""), 2) == code
        match = re.fullmatch(r"(?:(\d+) × )?2\^(-?\d+)|0", exact)
        assert match is not None, exact
        significand, exponent = match.groups()
        value = Fraction(int(significand or 1)) * Fraction(2) ** int(exponent) if exponent else 0
        assert value == Fraction(float(dtype.decode(code)))
        if not decimal.startswith("≈"):
            assert Fraction(decimal) == value

"""The README's Python examples run and print what the README says (doctest)."""

from __future__ import annotations

import doctest
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_examples_print_what_they_claim() -> None:
    result = doctest.testfile(
        str(README), module_relative=False, optionflags=doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 10
    assert result.failed == 0


def test_readme_keeps_the_two_setup_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert 'pip install -e ".[dev]" && layout-algebra demo' in text
    assert "\npytest\n" in text

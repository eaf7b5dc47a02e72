"""The README's Python examples run and print what the README says (doctest); the README
keeps its set-up commands; the LICENSE file is the license `pyproject.toml` declares."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def test_readme_examples_print_what_they_claim() -> None:
    result = doctest.testfile(
        str(README), module_relative=False, optionflags=doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 10
    assert result.failed == 0


def test_readme_keeps_the_two_setup_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert 'pip install -e ".[dev]" && layout-algebra demo' in text
    assert "\npytest -n auto --dist loadfile\n" in text
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "\npython -m pytest -q -n auto --dist loadfile\n" in ci


def test_license_file_is_the_declared_license() -> None:
    declared = re.search(
        r'^license = \{ text = "([^"]+)" \}$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE
    )
    assert declared is not None and declared.group(1) == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) > 150

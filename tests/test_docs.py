"""The documentation in `docs/`: the README links the contract, and every function the contract
names as a call (```name(...)```) exists: in a package, as a builder instruction or as a
layout's method."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs" / "contract.md"
PACKAGES = ("layout_algebra", "layout_algebra.cute", "ir", "ir.dtypes", "backend", "proofs")
CLASSES = (
    ("ir.builder", "ProgramBuilder"),  # the instructions: dot, load_global, ...
    ("layout_algebra.shared", "SharedLayout"),  # offset, table, ...
)


def _resolve(name: str) -> object | None:
    """The object `name` (``compose`` or ``backend.compile``) names in the packages, or None."""
    if "." in name:
        module_name, _, attribute = name.rpartition(".")
        module = importlib.import_module(module_name)
        return getattr(module, attribute, None)
    for package in PACKAGES:
        found = getattr(importlib.import_module(package), name, None)
        if found is not None:
            return found
    for module_name, class_name in CLASSES:
        found = getattr(getattr(importlib.import_module(module_name), class_name), name, None)
        if found is not None:
            return found
    return None


def test_the_readme_links_the_contract() -> None:
    assert "(docs/contract.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert CONTRACT.read_text(encoding="utf-8").startswith("# What the library promises")


def test_every_call_the_contract_names_exists() -> None:
    text = CONTRACT.read_text(encoding="utf-8")
    calls = set(re.findall(r"`([A-Za-z_][\w.]*)\(", text))
    # Methods written on an instance (L.map, L.owners, ...) are checked on a layout below.
    methods = {name for name in calls if name.split(".")[0] in {"L", "A", "x"}}
    missing = [name for name in sorted(calls - methods) if _resolve(name) is None]
    assert not missing and len(calls) >= 15
    from layout_algebra import spatial

    layout = spatial(2, 4)
    assert all(hasattr(layout, name.split(".")[1]) for name in methods)

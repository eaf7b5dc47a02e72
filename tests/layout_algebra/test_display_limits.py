"""Displaying a layout never enumerates millions of elements, and a number is no layout operand.

`str` shows the grid up to `printing.GRID_LIMIT` thread-register pairs and a one-line summary
past it; `_repr_html_` (what Jupyter shows) and `plot` draw up to `printing.PICTURE_LIMIT`,
then show the summary or refuse with LayoutError. ``local(4) * 3`` and the like are
LayoutErrors naming the number, not Python TypeErrors.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layout_algebra.errors import LayoutError
from layout_algebra.printing import GRID_LIMIT, PICTURE_LIMIT, text_grid
from layout_algebra.register import local, spatial

HUGE = local(2**40)


def test_huge_layout_str_is_a_summary() -> None:
    assert str(HUGE) == (
        "local(1099511627776): shape (1099511627776,), 1 threads x 1099511627776 registers = "
        "1099511627776 thread-register pairs, more than 16384: grid omitted"
    )


def test_huge_layout_html_is_the_summary_escaped() -> None:
    page = spatial(1024).local(1024)._repr_html_()
    assert page == (
        "<pre>spatial(1024).local(1024): shape (1048576,), 1024 threads x 1024 registers = "
        "1048576 thread-register pairs, more than 262144: picture omitted</pre>"
    )


def test_huge_layout_plot_is_refused() -> None:
    with pytest.raises(LayoutError, match=r"cannot draw local\(1099511627776\).* 262144"):
        HUGE.plot()


@pytest.mark.parametrize(
    ("combine", "shown"),
    [
        (lambda: local(4) * 3, "3 (int) by *"),
        (lambda: 3 * local(4), "3 (int) by *"),
        (lambda: local(4) / 2.0, "2.0 (float) by /"),
        (lambda: spatial(2) * True, "True (bool) by *"),
    ],
    ids=["layout*int", "int*layout", "layout/float", "layout*bool"],
)
def test_a_number_is_no_layout_operand(combine, shown: str) -> None:
    with pytest.raises(
        LayoutError, match=re.escape(f"cannot combine a RegisterLayout with {shown}")
    ):
        combine()


def test_limits_are_ordered() -> None:
    assert 0 < GRID_LIMIT < PICTURE_LIMIT


@settings(max_examples=25, deadline=None)
@given(threads=st.sampled_from([1, 2, 4, 32]), registers=st.integers(1, 64))
def test_small_layouts_print_their_grid(threads: int, registers: int) -> None:
    layout = spatial(threads).local(registers)
    assert str(layout) == text_grid(layout)
    assert "omitted" not in layout._repr_html_()


def test_a_missing_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(LayoutError, match=re.escape("pip install 'layout-algebra[notebooks]'")):
        spatial(4).local(2).plot()
    # The CLI: one line on stderr, exit code 4, never a traceback.
    from layout_algebra.cli import main

    assert main(["show", "spatial(4)", "--png", "/nonexistent/never-written.png"]) == 4

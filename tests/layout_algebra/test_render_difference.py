"""Tests of the difference pictures of `layout_algebra.render` and of the Jupyter picture of
`proofs.check_equivalent`'s result.

The HTML is read back cell by cell with the standard library's parser; the marked cells are
compared with literal expected elements and, in a property, with the elements whose owner sets
(`RegisterLayout.owners`) differ. Two register layouts of one shape, thread count and local size
differ in at least two elements (an owner that moves leaves one element and joins another), so
the smallest tables have two marked cells.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layout_algebra import (
    LayoutError,
    RegisterLayout,
    column_local,
    column_spatial,
    local,
    register_layout,
    replicate,
    spatial,
)
from layout_algebra.render import (
    CONFLICT_COLOUR,
    difference_figure,
    difference_html,
    lane_colour,
)
from layout_algebra.testing import layout_fields
from proofs import ProofResult, check_equivalent

matplotlib = pytest.importorskip("matplotlib")

MARK = f"box-shadow:inset 0 0 0 3px {CONFLICT_COLOUR}"
MMA = local(2, 1).spatial(8, 4).local(1, 2)
RANK_3 = spatial(2, 1, 2).local(1, 3, 2)


class _Cells(HTMLParser):
    """The data cells of a picture table, row-major: (style, title, text lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[tuple[str, str, list[str]]] = []
        self._cell: tuple[str, str, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "td":
            self._cell = (values.get("style") or "", values.get("title") or "", [""])
        elif tag == "br" and self._cell is not None:
            self._cell[2].append("")

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell[2][-1] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.cells.append(self._cell)
            self._cell = None


def cells(text: str, shape: tuple[int, ...]) -> dict[tuple[int, ...], tuple[str, str, list[str]]]:
    """Every data cell of the picture, by the coordinate of its element."""
    parser = _Cells()
    parser.feed(text)
    coords = list(np.ndindex(*shape))
    assert len(parser.cells) == len(coords)
    return dict(zip(coords, parser.cells))


def marked(text: str, shape: tuple[int, ...]) -> set[tuple[int, ...]]:
    """The elements whose cells carry the red frame."""
    return {coord for coord, (style, _, _) in cells(text, shape).items() if MARK in style}


def differing(a: RegisterLayout, b: RegisterLayout) -> set[tuple[int, ...]]:
    """The elements whose owner sets differ, from the layouts' own `owners`."""
    return {coord for coord in np.ndindex(*a.shape) if set(a.owners(coord)) != set(b.owners(coord))}


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected", "legend"),
    [
        # one thread, row-major vs column-major registers: (0,1) and (1,0) swap registers 1 and 2
        (
            local(2, 2),
            column_local(2, 2),
            {(0, 1): ["a 0:1", "b 0:2"], (1, 0): ["a 0:2", "b 0:1"]},
            "2 of 4 elements differ; first: element (0, 1), held by 0:1 under a and by 0:2 under b",
        ),
        # four threads, row-major vs column-major threads: threads 1 and 2 swap
        (
            spatial(2, 2),
            column_spatial(2, 2),
            {(0, 1): ["a 1:0", "b 2:0"], (1, 0): ["a 2:0", "b 1:0"]},
            "2 of 4 elements differ; first: element (0, 1), held by 1:0 under a and by 2:0 under b",
        ),
        # replicated pairs: under a threads 0,1 hold element 0; under b threads 0,2 do
        (
            spatial(2).replicate(2),
            replicate(2).spatial(2),
            {(0,): ["a 0:0 1:0", "b 0:0 2:0"], (1,): ["a 2:0 3:0", "b 1:0 3:0"]},
            "2 of 2 elements differ; first: element (0,), held by 0:0 1:0 under a and by "
            "0:0 2:0 under b",
        ),
        # the same function written two ways: nothing marked
        (MMA, local(2, 1) * spatial(8, 4) * local(1, 2), {}, "0 of 128 elements differ."),
        # rank 0 and rank 3, equal
        (replicate(4), replicate(4), {}, "0 of 1 elements differ."),
        (RANK_3, RANK_3, {}, "0 of 24 elements differ."),
    ],
    ids=["local", "spatial", "replicated", "equal-mma", "rank-0", "rank-3"],
)
def test_difference_html_table(
    a: RegisterLayout, b: RegisterLayout, expected: dict, legend: str
) -> None:
    text = difference_html(a, b)
    by_coord = cells(text, a.shape)
    assert marked(text, a.shape) == set(expected)
    for coord, lines in expected.items():
        assert by_coord[coord][2] == lines
    assert legend in text
    assert f"a = {a!r} vs b = {b!r}" in text


def test_difference_html_lists_agreeing_owners_once_in_their_lane_colours() -> None:
    by_coord = cells(difference_html(spatial(2, 2), column_spatial(2, 2)), (2, 2))
    style, title, lines = by_coord[(1, 1)]
    assert lines == ["3:0"] and title == "(1, 1): 3:0 under both"
    assert f"background:{lane_colour(3)}" in style and MARK not in style
    style, title, _ = by_coord[(0, 1)]
    assert title == "(0, 1): 1:0 under a, 2:0 under b (differ)"
    assert lane_colour(1) in style and lane_colour(2) in style


def test_difference_html_outlines_the_differing_region() -> None:
    by_coord = cells(difference_html(local(2, 2), column_local(2, 2)), (2, 2))
    # (0, 0) agrees, its right neighbour (0, 1) differs: a thick line between them
    assert "border-right:2px solid" in by_coord[(0, 0)][0]
    equal = cells(difference_html(local(2, 2), local(2, 2)), (2, 2))
    assert "border-right:1px solid" in equal[(0, 0)][0]


def test_difference_html_past_max_cells_is_a_summary() -> None:
    text = difference_html(local(2, 2), column_local(2, 2), max_cells=3)
    assert "data:image/png;base64," in text and "<td" not in text
    assert "2 of 4 elements differ; first: element (0, 1)" in text


def test_difference_html_of_a_large_tile_is_a_summary() -> None:
    a = spatial(4, 1).spatial(8, 4).local(4, 16)
    text = difference_html(a, spatial(4, 1).spatial(8, 4).local(4, 16))
    assert "data:image/png;base64," in text and "<td" not in text
    assert "0 of 8192 elements differ." in text


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        (local(4), local(2, 2), r"local\(4\) \(shape \(4,\), 1 threads\) and .* \(shape \(2, 2\)"),
        (local(4), spatial(4), r"\(shape \(4,\), 1 threads\) and .* \(shape \(4,\), 4 threads\)"),
        (local(4), "local(4)", "expected a RegisterLayout, got 'local"),
    ],
    ids=["shapes", "threads", "not-a-layout"],
)
def test_difference_pictures_reject_incomparable_layouts(a, b, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        difference_html(a, b)
    with pytest.raises(LayoutError, match=match):
        difference_figure(a, b)


@st.composite
def comparable_pairs(draw: st.DrawFn) -> tuple[RegisterLayout, RegisterLayout]:
    """Two layouts over the same modes, their spatial and local lists each reordered: one
    shape, one thread count, one local size, usually different owners."""
    shape, mode_shape, spatial_modes, local_modes = draw(layout_fields(max_rank=3))
    other_spatial = draw(st.permutations(spatial_modes))
    other_local = draw(st.permutations(local_modes))
    return (
        register_layout(shape, mode_shape, spatial_modes, local_modes),
        register_layout(shape, mode_shape, tuple(other_spatial), tuple(other_local)),
    )


@settings(max_examples=40, deadline=None)
@given(pair=comparable_pairs())
def test_marked_cells_are_the_elements_whose_owners_differ(
    pair: tuple[RegisterLayout, RegisterLayout],
) -> None:
    a, b = pair
    text = difference_html(a, b)
    expected = differing(a, b)
    assert marked(text, a.shape) == expected
    total = int(np.prod(a.shape))
    assert f"{len(expected)} of {total} elements differ" in text


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def red_frames(figure) -> int:
    (axes,) = [axes for axes in figure.axes if axes.patches]
    return sum(
        1
        for patch in axes.patches
        if not patch.get_fill()
        and matplotlib.colors.to_hex(patch.get_edgecolor()) == CONFLICT_COLOUR
    )


def test_difference_figure_frames_the_differing_cells() -> None:
    figure = difference_figure(local(2, 2), column_local(2, 2))
    assert red_frames(figure) == 2
    texts = {text.get_text() for text in figure.axes[0].texts}
    assert {"a 0:1\nb 0:2", "a 0:2\nb 0:1", "0:0", "0:3"} == texts
    assert "2 of 4 elements differ" in figure.axes[0].get_xlabel().replace("\n", " ")
    assert red_frames(difference_figure(MMA, MMA)) == 0


def test_difference_figure_past_max_cells_is_a_two_colour_map() -> None:
    figure = difference_figure(local(2, 2), column_local(2, 2), max_cells=3)
    axes = figure.axes[0]
    (image,) = axes.images
    assert np.array_equal(image.get_array(), [[0, 1], [1, 0]])
    labels = [text.get_text() for text in axes.get_legend().get_texts()]
    assert labels == ["same owners", "different owners"]


# --------------------------------------------------------------------------------------------
# The Jupyter picture of check_equivalent's result
# --------------------------------------------------------------------------------------------


def test_refuted_equivalence_shows_its_difference() -> None:
    a, b = local(2, 2), column_local(2, 2)
    result = check_equivalent(a, b)
    assert result.holds is False and result.compared == (a, b)
    text = result._repr_html_()
    assert text.startswith('<div style="font-family:monospace;font-size:12px;margin-bottom:4px">')
    assert "<b>refuted</b>: the register layouts differ at" in text
    assert text.endswith(difference_html(a, b))


def test_proved_equivalence_shows_only_its_verdict() -> None:
    result = check_equivalent(MMA, local(2, 1) * spatial(8, 4) * local(1, 2))
    text = result._repr_html_()
    assert "<b>proved</b>" in text and "<table" not in text


def test_refuted_domains_show_the_reason_without_a_picture() -> None:
    result = check_equivalent(local(4), local(2, 2))
    text = result._repr_html_()
    assert "<b>refuted</b>: not the same domain" in text and "<table" not in text


def test_compared_takes_no_part_in_equality_or_repr() -> None:
    plain = ProofResult(False, None, "differ", 0.0)
    kept = ProofResult(False, None, "differ", 0.0, compared=(local(2), spatial(2)))
    assert plain == kept and repr(plain) == repr(kept) and plain.compared == ()
    assert re.fullmatch(r"ProofResult\(holds=False, .*seconds=0\.0\)", repr(kept))

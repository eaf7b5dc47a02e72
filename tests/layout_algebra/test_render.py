"""Tests of the pictures in `layout_algebra.render`: their content, not only their form.

The HTML is read back with the standard library's parser, cell by cell, and compared with the
layouts' own `owners`, `offset` and `bank_conflicts`; the figures are checked through their
matplotlib artists (texts, patches, images).
"""

from __future__ import annotations

import io
import re
from html.parser import HTMLParser

import numpy as np
import pytest

from layout_algebra import (
    LayoutError,
    RegisterLayout,
    column_spatial,
    local,
    replicate,
    spatial,
)
from layout_algebra.access import compose
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.render import (
    CONFLICT_COLOUR,
    IDLE_COLOUR,
    access_figure,
    access_html,
    lane_colour,
    layout_figure,
    layout_html,
    shared_figure,
    shared_html,
)
from layout_algebra.shared import shared_row_major, shared_row_major_swizzle

matplotlib = pytest.importorskip("matplotlib")


class _Tables(HTMLParser):
    """Collects every table of an HTML text as rows of cells: (tag, style, title, text lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[tuple[str, str, str, list[str]]]]] = []
        self._cell: tuple[str, str, str, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = (tag, values.get("style") or "", values.get("title") or "", [""])
        elif tag == "br" and self._cell is not None:
            self._cell[3].append("")

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell[3][-1] += data

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(self._cell)
            self._cell = None


def tables(text: str) -> list[list[list[tuple[str, str, str, list[str]]]]]:
    parser = _Tables()
    parser.feed(text)
    return parser.tables


def body_cells(table: list[list[tuple[str, str, str, list[str]]]]) -> list[list[tuple]]:
    """The data cells of a picture table: header row and row-label column dropped."""
    return [[cell for cell in row if cell[0] == "td"] for row in table[1:]]


def stripes(style: str) -> list[str]:
    """The distinct fill colours of a cell's background, in stripe order."""
    (background,) = re.findall(r"background:[^;]*", style)
    return list(dict.fromkeys(re.findall(r"#[0-9a-f]{6}", background)))


def grid_coords(shape: tuple[int, ...]) -> list[list[tuple[int, ...]]]:
    """The coordinate of each cell of the 2-D view (leading dimensions flattened into rows)."""
    coords = list(np.ndindex(*shape))
    cols = shape[-1] if shape else 1
    return [coords[k : k + cols] for k in range(0, len(coords), cols)]


MMA = local(2, 1).spatial(8, 4).local(1, 2)
TWO_WARPS = spatial(2, 1).spatial(8, 4).local(1, 2)

REGISTER_CASES = [
    MMA,
    TWO_WARPS,
    # replication: every element held by two threads of different warps
    replicate(2).spatial(4, 8),
    # replication inside a warp
    spatial(4).replicate(2).local(1, 2),
    # rank 0, 1 and 3
    replicate(4),
    spatial(8).local(2),
    spatial(2, 1, 2).local(1, 3, 2),
]


# --------------------------------------------------------------------------------------------
# Register layouts
# --------------------------------------------------------------------------------------------


def test_lane_colours_are_distinct_within_a_warp() -> None:
    palette = [lane_colour(lane) for lane in range(32)]
    assert len(set(palette)) == 32
    assert all(re.fullmatch(r"#[0-9a-f]{6}", colour) for colour in palette)
    assert lane_colour(35) == lane_colour(3)


@pytest.mark.parametrize("layout", REGISTER_CASES, ids=repr)
def test_layout_html_lists_every_owner(layout: RegisterLayout) -> None:
    (table,) = tables(layout_html(layout))
    cells = body_cells(table)
    for row, coords in zip(cells, grid_coords(layout.shape)):
        assert len(row) == len(coords)
        for (_, style, title, lines), coord in zip(row, coords):
            owners = layout.owners(coord)
            assert lines == [f"{t}:{i}" for t, i in owners]
            assert stripes(style) == list(dict.fromkeys(lane_colour(t) for t, _ in owners))
            assert title.startswith(str(coord))


def test_layout_html_colours_threads_distinctly() -> None:
    (table,) = tables(layout_html(MMA))
    by_thread: dict[int, set[str]] = {}
    for row in body_cells(table):
        for _, style, _, lines in row:
            thread = int(lines[0].split(":")[0])
            by_thread.setdefault(thread, set()).update(stripes(style))
    assert all(len(fill) == 1 for fill in by_thread.values())
    assert len({fill.pop() for fill in by_thread.values()}) == 32


def test_layout_html_outlines_warps() -> None:
    # TWO_WARPS: rows 0-7 belong to warp 0, rows 8-15 to warp 1.
    (table,) = tables(layout_html(TWO_WARPS))
    cells = body_cells(table)
    assert "border-bottom:2px solid" in cells[7][0][1]
    assert "border-top:2px solid" in cells[8][0][1]
    assert "border-bottom:1px solid" in cells[6][0][1]
    assert "border-right:1px solid" in cells[0][0][1]
    assert "border-left:2px solid" in cells[0][0][1]


def test_layout_html_stripes_replicated_elements() -> None:
    layout = spatial(4).replicate(2).local(1, 2)
    (table,) = tables(layout_html(layout))
    _, style, _, lines = body_cells(table)[0][0]
    assert lines == ["0:0", "1:0"]
    assert "linear-gradient" in style
    assert stripes(style) == [lane_colour(0), lane_colour(1)]


def test_layout_html_large_tile_is_a_colour_map() -> None:
    layout = spatial(4, 1).spatial(8, 4).local(4, 16)
    text = layout_html(layout)
    assert "data:image/png;base64," in text
    assert "<td" not in text
    assert repr(layout) in text


def test_repr_html_and_plot_use_the_pictures() -> None:
    assert MMA._repr_html_() == layout_html(MMA)
    figure = MMA.plot()
    assert isinstance(figure, matplotlib.figure.Figure)


def test_layout_figure_labels_every_owner() -> None:
    layout = spatial(4).replicate(2).local(2, 2)
    figure = layout_figure(layout)
    (axes,) = figure.axes
    labels = " ".join(text.get_text() for text in axes.texts).split()
    expected = [f"{t}:{i}" for t in range(layout.num_threads) for i in range(layout.local_size)]
    assert sorted(labels) == sorted(expected)
    fills = {matplotlib.colors.to_hex(p.get_facecolor()) for p in axes.patches if p.get_fill()}
    assert fills == {lane_colour(t) for t in range(layout.num_threads)}
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=30)
    assert buffer.getvalue().startswith(b"\x89PNG")


def test_layout_figure_large_tile_has_colour_bar() -> None:
    layout = spatial(2, 1).spatial(16, 2).local(4, 32)
    figure = layout_figure(layout, max_cells=1024)
    axes = figure.axes[0]
    (image,) = axes.images
    values = image.get_array()
    assert values.shape == (128, 64)
    # The colour map shows the lowest owning thread of each element.
    assert values[0, 0] == 0 and values[127, 63] == layout.num_threads - 1
    assert len(figure.axes) == 2  # the colour bar


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: layout_html("spatial(4)"), "expected a RegisterLayout"),
        (lambda: layout_figure(None), "expected a RegisterLayout"),
        (lambda: shared_html(spatial(4)), "expected a SharedLayout"),
        (lambda: shared_html(shared_row_major(4), element_bits=0), "element_bits must be"),
        (lambda: access_html(MMA, 16), "expected an AccessMap"),
        (
            lambda: access_html(compose(GlobalLayout((16, 8), (8, 1)), MMA), 16),
            "shared-memory banks",
        ),
        (lambda: access_html(compose(shared_row_major(16, 8), MMA), 16, warp=1), "warp 1"),
    ],
)
def test_pictures_reject_bad_arguments(call, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        call()


# --------------------------------------------------------------------------------------------
# Shared layouts
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "element_bits"),
    [
        (shared_row_major(8, 16), 16),
        (shared_row_major_swizzle(8, 64, element_bits=16), 16),
        (shared_row_major(4, 8), 4),
    ],
    ids=["row_major_f16", "swizzled_f16", "row_major_u4"],
)
def test_shared_html_shows_offset_and_bank(layout, element_bits: int) -> None:
    (table,) = tables(shared_html(layout, element_bits))
    for row, coords in zip(body_cells(table), grid_coords(layout.shape)):
        for (_, style, _, lines), coord in zip(row, coords):
            offset = layout.offset(coord)
            bank = offset * element_bits // 32 % 32
            assert lines == [f"@{offset}", f"b{bank}"]
            assert stripes(style) == [lane_colour(bank)]


def test_shared_html_swizzle_spreads_a_column_over_banks() -> None:
    # Column 0 of 8 rows of 128 bytes: all in banks 0-3 without a swizzle, 8 bank groups with.
    def column_banks(layout) -> set[str]:
        (table,) = tables(shared_html(layout, 16))
        return {row[0][3][1] for row in body_cells(table)}

    assert column_banks(shared_row_major(8, 64)) == {"b0"}
    banks = column_banks(shared_row_major_swizzle(8, 64, element_bits=16))
    assert banks == {f"b{4 * k}" for k in range(8)}


def test_shared_figure_labels_offsets() -> None:
    layout = shared_row_major_swizzle(4, 8, element_bits=32)
    (axes,) = shared_figure(layout, 32).axes
    texts = {text.get_text() for text in axes.texts}
    expected = {f"@{layout.offset(c)}\nb{layout.offset(c) % 32}" for c in np.ndindex(4, 8)}
    assert texts == expected


def test_shared_figure_large_tile_is_a_bank_map() -> None:
    layout = shared_row_major(128, 64)
    figure = shared_figure(layout, 16)
    (image,) = figure.axes[0].images
    np.testing.assert_array_equal(image.get_array(), layout.table() * 16 // 32 % 32)


# --------------------------------------------------------------------------------------------
# Access maps
# --------------------------------------------------------------------------------------------

# Each thread loads 16 bytes of one row; threads 0-7 take rows 0-7 of column chunk 0. Rows of
# 32 bytes: rows r and r + 4 share banks, so each phase of 8 threads is 2-way conflicted.
CONFLICTED = compose(shared_row_major(8, 16), column_spatial(8, 2).local(1, 8))
# Rows of 128 bytes with the ldmatrix swizzle: conflict-free.
SWIZZLED = compose(
    shared_row_major_swizzle(8, 64, element_bits=16), column_spatial(8, 8).local(1, 8)
)


def test_access_html_marks_conflicting_banks() -> None:
    conflicts = CONFLICTED.bank_conflicts(0, 16)
    assert conflicts.wavefronts == 4
    text = access_html(CONFLICTED, 16)
    grid, banks = tables(text)
    offsets = CONFLICTED.memory.table()
    marked = 0
    for row, coords in zip(body_cells(grid), grid_coords(CONFLICTED.shape)):
        for (_, style, _, lines), coord in zip(row, coords):
            (owner,) = CONFLICTED.register.owners(coord)
            t = owner[0]
            bank = int(offsets[coord]) * 16 // 32 % 32
            conflict = bank in conflicts.conflicting_banks[conflicts.phases[t]]
            assert lines == [f"{t}:{owner[1]}", f"@{offsets[coord]}", f"b{bank}" + "!" * conflict]
            assert (CONFLICT_COLOUR in style) == conflict
            marked += conflict
    assert marked == 128
    # Bank table: per phase, the threads each bank serves; the conflicting ones red, 2 words.
    rows = body_cells(banks)
    assert len(rows) == 2
    for phase, row in enumerate(rows):
        for bank, (_, style, _, lines) in enumerate(row):
            users = [
                t
                for t, p, thread_banks in zip(conflicts.threads, conflicts.phases, conflicts.banks)
                if p == phase and bank in thread_banks
            ]
            conflicted = bank in conflicts.conflicting_banks[phase]
            expected = " ".join(f"t{t}" for t in users) + (" (2 words)" if conflicted else "")
            assert lines == [expected]
            assert (CONFLICT_COLOUR in style) == conflicted
            assert conflicted == bool(users)


def test_access_html_conflict_free_has_no_marks() -> None:
    assert SWIZZLED.wavefronts(0, 16) == 4
    text = access_html(SWIZZLED, 16)
    assert CONFLICT_COLOUR not in text
    assert "4 wavefronts" in text


def test_access_html_greys_cells_outside_the_access() -> None:
    # Two accesses of 8 bytes per thread: access 1 moves columns 4-7 of each 8-column row.
    access_map = compose(shared_row_major(4, 8), spatial(4, 1).local(1, 8))
    assert access_map.vector_width(32, base_alignment=16) == 4
    (grid, _) = tables(access_html(access_map, 32, access=1))
    for row in body_cells(grid):
        for column, (_, style, _, lines) in enumerate(row):
            assert (IDLE_COLOUR in style) == (column < 4)
            assert bool(lines[0]) == (column >= 4)


def test_access_figure_marks_conflicts() -> None:
    (axes,) = access_figure(CONFLICTED, 16).axes
    frames = [
        p for p in axes.patches if matplotlib.colors.to_hex(p.get_edgecolor()) == CONFLICT_COLOUR
    ]
    assert len(frames) == 128
    (axes,) = access_figure(SWIZZLED, 16).axes
    assert not [
        p for p in axes.patches if matplotlib.colors.to_hex(p.get_edgecolor()) == CONFLICT_COLOUR
    ]


def test_access_figure_large_tile_is_a_role_map() -> None:
    access_map = compose(shared_row_major(128, 64), column_spatial(128, 1).local(1, 64))
    figure = access_figure(access_map, 16)
    (image,) = figure.axes[0].images
    roles = image.get_array()
    # Access 0 of warp 0: threads 0-31 move columns 0-7 of rows 0-31, all 32 rows in banks 0-3.
    assert set(np.unique(roles)) == {0, 2}
    assert (roles[:32, :8] == 2).all() and (roles[32:, :] == 0).all()


def test_shared_layout_draws_itself_in_jupyter_and_matplotlib():
    layout = shared_row_major_swizzle(8, 64, element_bits=16)
    assert layout._repr_html_() == shared_html(layout)
    figure = layout.plot()
    texts = [text.get_text() for axes in figure.axes for text in axes.texts]
    assert any(str(layout.offset((1, 0))) in text for text in texts)

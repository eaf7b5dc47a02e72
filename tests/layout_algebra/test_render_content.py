"""What the pictures of `layout_algebra.render` say, cell by cell and line by line.

The HTML bank table is compared with tables worked out by hand from the shared layout's offsets;
the lines of a matplotlib figure are read back from its `LineCollection`s and compared with the
edges derived from the layout (cells of different warp sets, the tile's border, the blocks of a
rank-3 tile); the switch to a colour map is checked at the `max_cells` boundary.
"""

from __future__ import annotations

from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

import numpy as np
import pytest

from layout_algebra import RegisterLayout, column_spatial, replicate, spatial
from layout_algebra.access import compose
from layout_algebra.render import (
    CONFLICT_COLOUR,
    access_figure,
    access_html,
    layout_figure,
    layout_html,
    shared_figure,
    shared_html,
)
from layout_algebra.shared import shared_row_major

pytest.importorskip("matplotlib")


class _Tables(HTMLParser):
    """Every table of an HTML text as rows of (tag, style, text) cells, ``<br>`` as a newline."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[tuple[str, str, str]]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = [tag, dict(attrs).get("style") or "", ""]
        elif tag == "br" and self._cell is not None:
            self._cell[2] += "\n"

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell[2] += data

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(tuple(self._cell))
            self._cell = None


def tables(text: str) -> list[list[list[tuple[str, str, str]]]]:
    parser = _Tables()
    parser.feed(text)
    return parser.tables


# --------------------------------------------------------------------------------------------
# The bank table of access_html
# --------------------------------------------------------------------------------------------


def bank_table(text: str) -> list[list[tuple[str, bool]]]:
    """The bank table (the last table) as rows: the phase label, then per bank (text, red)."""
    *_, table = tables(text)
    header, *rows = table
    assert [cell[2] for cell in header] == ["phase"] + [f"b{bank}" for bank in range(32)]
    result = []
    for phase, row in enumerate(rows):
        label, *cells = row
        assert label[:1] == ("th",) and label[2] == str(phase)
        assert all(cell[0] == "td" for cell in cells)
        result.append([(cell[2], CONFLICT_COLOUR in cell[1]) for cell in cells])
    return result


def banks_of_four(groups: list[str]) -> list[tuple[str, bool]]:
    """32 bank cells from 8 groups of 4 banks sharing a text; conflicted where it counts words."""
    return [(text, "words" in text) for text in groups for _ in range(4)]


# 16 threads; thread t loads the 16 bytes of row t % 8, columns 8 * (t // 8) ... + 7 of an
# 8 x 16 f16 tile of 32-byte rows: words 8r + 4 * (t // 8) ... + 3, so banks 8r % 32 ... + 3 for
# t < 8 and (8r + 4) % 32 ... + 7 for t >= 8. 128-bit accesses go in phases of 8 threads; in each,
# rows r and r + 4 hit the same four banks with different words.
CONFLICTED = compose(shared_row_major(8, 16), column_spatial(8, 2).local(1, 8))
CONFLICTED_BANKS = [
    banks_of_four(
        ["t0 t4 (2 words)", "", "t1 t5 (2 words)", "", "t2 t6 (2 words)", "", "t3 t7 (2 words)", ""]
    ),
    banks_of_four(
        [
            "",
            "t8 t12 (2 words)",
            "",
            "t9 t13 (2 words)",
            "",
            "t10 t14 (2 words)",
            "",
            "t11 t15 (2 words)",
        ]
    ),
]

# 32 threads of 2 f16 each over 32 elements, threads t and t + 16 holding the same two: each of
# words 0-15 is read by two threads (a broadcast, one word per bank: no conflict), banks 16-31
# are idle. 32-bit accesses: one phase of the whole warp.
BROADCAST = compose(shared_row_major(32), replicate(2).spatial(16).local(2))
BROADCAST_BANKS = [[(f"t{b} t{b + 16}", False) for b in range(16)] + [("", False)] * 16]

# Thread t reads word t: every bank serves one thread.
ONE_PER_BANK = compose(shared_row_major(64), spatial(32).local(2))
ONE_PER_BANK_BANKS = [[(f"t{b}", False) for b in range(32)]]


@pytest.mark.parametrize(
    ("access_map", "expected"),
    [
        (CONFLICTED, CONFLICTED_BANKS),
        (BROADCAST, BROADCAST_BANKS),
        (ONE_PER_BANK, ONE_PER_BANK_BANKS),
    ],
    ids=["conflicted", "broadcast", "one_per_bank"],
)
def test_access_html_bank_table(access_map, expected: list[list[tuple[str, bool]]]) -> None:
    assert bank_table(access_html(access_map, 16)) == expected


# --------------------------------------------------------------------------------------------
# Lines of the figures
# --------------------------------------------------------------------------------------------

Point = tuple[float, float]


def unit_edges(polylines: list[np.ndarray]) -> set[frozenset[Point]]:
    """The unit cell edges a set of axis-parallel polylines covers (a diagonal piece fails)."""
    edges: set[frozenset[Point]] = set()
    for polyline in polylines:
        for (x0, y0), (x1, y1) in zip(polyline[:-1], polyline[1:]):
            assert x0 == x1 or y0 == y1, f"a diagonal line from {(x0, y0)} to {(x1, y1)}"
            steps = int(round(abs(x1 - x0) + abs(y1 - y0)))
            dx, dy = np.sign(x1 - x0), np.sign(y1 - y0)
            for k in range(steps):
                start = (float(x0 + k * dx), float(y0 + k * dy))
                end = (float(x0 + (k + 1) * dx), float(y0 + (k + 1) * dy))
                edges.add(frozenset((start, end)))
    return edges


def cell_edge(r: int, c: int, side: str) -> frozenset[Point]:
    """The edge of cell (r, c) on `side`: cell centres are at (c, r), the y axis points down."""
    left, right, top, bottom = c - 0.5, c + 0.5, r - 0.5, r + 0.5
    corners = {
        "top": ((left, top), (right, top)),
        "bottom": ((left, bottom), (right, bottom)),
        "left": ((left, top), (left, bottom)),
        "right": ((right, top), (right, bottom)),
    }
    return frozenset(corners[side])


def line_collections(figure: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The segments of the solid and of the dashed line collections of the tile's axes."""
    from matplotlib.collections import LineCollection

    solid: list[np.ndarray] = []
    dashed: list[np.ndarray] = []
    for collection in figure.axes[0].collections:
        if isinstance(collection, LineCollection):
            (_, dashes), *_ = collection.get_linestyle()
            (solid if dashes is None else dashed).extend(collection.get_segments())
    return solid, dashed


def warp_sets(layout: RegisterLayout) -> np.ndarray:
    """Per cell of the 2-D view (leading dimensions flattened), the set of warps holding it."""
    coords = list(np.ndindex(*layout.shape))
    sets = np.empty(len(coords), dtype=object)
    for k, coord in enumerate(coords):
        sets[k] = frozenset(t // 32 for t, _ in layout.owners(coord))
    return sets.reshape(-1, layout.shape[-1])


def expected_outline(groups: np.ndarray) -> set[frozenset[Point]]:
    """The tile's border and every edge between cells of different groups."""
    rows, cols = groups.shape
    edges = {cell_edge(0, c, "top") for c in range(cols)}
    edges |= {cell_edge(rows - 1, c, "bottom") for c in range(cols)}
    edges |= {cell_edge(r, 0, "left") for r in range(rows)}
    edges |= {cell_edge(r, cols - 1, "right") for r in range(rows)}
    edges |= {
        cell_edge(r, c, "bottom")
        for r in range(rows - 1)
        for c in range(cols)
        if groups[r, c] != groups[r + 1, c]
    }
    edges |= {
        cell_edge(r, c, "right")
        for r in range(rows)
        for c in range(cols - 1)
        if groups[r, c] != groups[r, c + 1]
    }
    return edges


REGISTER_FIGURE_CASES = [
    # columns 0-3 warp 0, 4-7 warp 1: one vertical boundary
    spatial(1, 2).spatial(8, 4),
    # every element held by warps 0 and 1 alike: only the border
    replicate(2).spatial(4, 8),
    # rank 3: (2, 4, 8) drawn as 8 rows in blocks of 4, warps 0 and 1 one block each
    spatial(2, 1, 1).spatial(1, 4, 8),
]


@pytest.mark.parametrize("layout", REGISTER_FIGURE_CASES, ids=repr)
def test_layout_figure_outlines_warp_sets(layout: RegisterLayout) -> None:
    solid, _ = line_collections(layout_figure(layout))
    assert unit_edges(solid) == expected_outline(warp_sets(layout))


def test_layout_figure_outline_of_two_warps_by_hand() -> None:
    # 8 x 8, warp 0 on rows 0-3: the border and the line y = 3.5 across the 8 columns.
    solid, dashed = line_collections(layout_figure(spatial(2, 1).spatial(4, 8)))
    border = {frozenset(((x - 0.5, y), (x + 0.5, y))) for x in range(8) for y in (-0.5, 7.5)} | {
        frozenset(((x, y - 0.5), (x, y + 0.5))) for x in (-0.5, 7.5) for y in range(8)
    }
    middle = {frozenset(((x - 0.5, 3.5), (x + 0.5, 3.5))) for x in range(8)}
    assert unit_edges(solid) == border | middle
    assert dashed == []


def block_lines(figure: Any) -> set[tuple[Point, Point]]:
    _, dashed = line_collections(figure)
    return {tuple((float(x), float(y)) for x, y in segment) for segment in dashed}


# Rank-3 tiles are drawn as rows in blocks of shape[-2] rows, separated by dashed lines that run
# from the left edge (x = -0.5) to the right edge (x = cols - 0.5) between the blocks.
@pytest.mark.parametrize(
    ("picture", "expected"),
    [
        # (3, 2, 4): 6 rows of 4 columns in blocks of 2: lines above rows 2 and 4
        (
            lambda: shared_figure(shared_row_major(3, 2, 4), 16),
            {((-0.5, 1.5), (3.5, 1.5)), ((-0.5, 3.5), (3.5, 3.5))},
        ),
        # the same tile as a bank colour map
        (
            lambda: shared_figure(shared_row_major(3, 2, 4), 16, max_cells=4),
            {((-0.5, 1.5), (3.5, 1.5)), ((-0.5, 3.5), (3.5, 3.5))},
        ),
        # (2, 4, 8): 8 rows of 8 columns in blocks of 4: one line above row 4
        (lambda: layout_figure(spatial(2, 1, 1).spatial(1, 4, 8)), {((-0.5, 3.5), (7.5, 3.5))}),
        (
            lambda: layout_figure(spatial(2, 1, 1).spatial(1, 4, 8), max_cells=8),
            {((-0.5, 3.5), (7.5, 3.5))},
        ),
        # rank 2: one block, no line
        (lambda: shared_figure(shared_row_major(8, 4), 16), set()),
    ],
    ids=["shared", "shared_colour_map", "register", "register_colour_map", "rank_2"],
)
def test_figures_separate_the_blocks_of_rank_3_tiles(
    picture: Callable[[], Any], expected: set[tuple[Point, Point]]
) -> None:
    assert block_lines(picture()) == expected


# --------------------------------------------------------------------------------------------
# The cell limit
# --------------------------------------------------------------------------------------------

SMALL_REGISTER = spatial(2, 2)  # 4 cells
SMALL_SHARED = shared_row_major(2, 2)
SMALL_ACCESS = compose(shared_row_major(2, 2), spatial(2, 2))


def is_colour_map(picture: Any) -> bool:
    """Whether a picture is the colour map (an image) rather than labelled cells."""
    if isinstance(picture, str):
        return "data:image/png;base64," in picture
    return len(picture.axes[0].images) == 1 and not picture.axes[0].texts


PICTURES = [
    lambda limit: layout_html(SMALL_REGISTER, max_cells=limit),
    lambda limit: layout_figure(SMALL_REGISTER, max_cells=limit),
    lambda limit: shared_html(SMALL_SHARED, 16, max_cells=limit),
    lambda limit: shared_figure(SMALL_SHARED, 16, max_cells=limit),
    lambda limit: access_html(SMALL_ACCESS, 16, max_cells=limit),
    lambda limit: access_figure(SMALL_ACCESS, 16, max_cells=limit),
]


@pytest.mark.parametrize(
    "picture",
    PICTURES,
    ids=[
        "layout_html",
        "layout_figure",
        "shared_html",
        "shared_figure",
        "access_html",
        "access_figure",
    ],
)
def test_tiles_of_exactly_max_cells_keep_their_labelled_cells(
    picture: Callable[[int], Any],
) -> None:
    # Every small tile has 2 x 2 cells: "more than max_cells" starts at max_cells = 3.
    assert not is_colour_map(picture(4))
    assert is_colour_map(picture(3))

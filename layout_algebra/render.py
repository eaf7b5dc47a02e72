"""Pictures of layouts: HTML tables for Jupyter and matplotlib figures.

Four kinds of picture, each as HTML (``*_html``, self-contained, inline styles only) and as a
matplotlib `Figure` (``*_figure``, built on `matplotlib.figure.Figure` directly, so no pyplot
state leaks between figures; save it with ``figure.savefig(path)``):

- register layouts (`layout_html`, `layout_figure`): one cell per element listing every
  ``t:i`` (thread:register) that holds it; each thread has a colour, distinct for the 32 lanes of
  a warp; a replicated element is striped with the colours of all its owners; warps are outlined
  (a thick line runs between cells whose owners lie in different sets of warps).
- shared layouts (`shared_html`, `shared_figure`): each cell shows the element's offset and the
  bank of its first 4-byte word (``offset * element_bits // 32 % 32``), coloured by bank; each
  128-byte row of banks is outlined.
- access maps (`access_html`, `access_figure`): one access of one warp (each thread moving its
  ``access``-th vector of `vector_width` registers): the cells it touches are coloured by thread
  and show ``t:i``, the offset and the bank; cells on a conflicting bank of their phase are marked
  red. The HTML adds the bank table: per phase, which threads each bank serves, conflicting banks
  in red.
- differences of two register layouts of one shape and thread count (`difference_html`,
  `difference_figure`; what a refuted `proofs.check_equivalent` looks like): the tile drawn once,
  each cell listing its owners ``t:i``; a cell whose set of owners differs between the layouts
  lists both (``a ...`` and ``b ...``) and gets a red frame, and a thick line runs around the
  differing cells; the legend counts the differing elements and names the first.

Layouts of rank 0 draw one cell, rank 1 one row; from rank 3 on, the leading dimensions are
flattened into rows labelled with their indices. Tiles of more than `MAX_CELLS` cells (64 x 64)
fall back to a colour map with a legend: thread (register layouts), bank (shared layouts),
access role (access maps) or same/different owners (differences); their HTML embeds that
figure as a PNG, so it needs matplotlib.
"""

from __future__ import annotations

import base64
import colorsys
import html
import io
import math
import textwrap
from dataclasses import dataclass
from typing import Any

import numpy as np

from layout_algebra.access import AccessMap
from layout_algebra.errors import LayoutError
from layout_algebra.hardware import NUM_BANKS, WARP_SIZE
from layout_algebra.register import RegisterLayout
from layout_algebra.shared import SharedLayout

MAX_CELLS = 64 * 64
"""Tiles with more cells than this are drawn as a colour map instead of labelled cells."""

CONFLICT_COLOUR = "#d62728"
"""The red that marks bank conflicts."""

IDLE_COLOUR = "#eeeeee"
"""The fill of cells an access does not touch."""

_OUTLINE = "#111"
_THIN = "#bbb"
_BLOCK = "#777"


def lane_colour(lane: int) -> str:
    """The colour (``#rrggbb``) of a lane, or of a bank: 32 distinct colours for 0..31, repeating.

    Sixteen hues five sixteenths of a turn apart, so neighbouring lanes differ strongly, light
    for 0..15 and darker for 16..31.
    """
    lane %= WARP_SIZE
    hue = (lane % 16) * 5 % 16 / 16
    lightness = 0.84 if lane < 16 else 0.68
    red, green, blue = colorsys.hls_to_rgb(hue, lightness, 0.75)
    return "#" + "".join(f"{round(255 * c):02x}" for c in (red, green, blue))


# --------------------------------------------------------------------------------------------
# The grid every picture is drawn on
# --------------------------------------------------------------------------------------------


@dataclass
class _Grid:
    """A picture as a 2-D grid of cells (the tile's leading dimensions flattened into rows).

    Per cell, as [rows, cols] arrays: `lines` (text lines, object), `fills` (tuple of colours,
    object; several colours draw stripes), `groups` (int; thick outlines run between different
    groups), `marked` (bool; a red frame), `tips` (tooltip text, object).
    """

    title: str
    row_labels: list[str]
    col_labels: list[str]
    lines: np.ndarray
    fills: np.ndarray
    groups: np.ndarray
    marked: np.ndarray
    tips: np.ndarray
    block_rows: int
    legend: str


def _grid_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """(rows, cols) of the 2-D view of a tile of `shape`."""
    if not shape:
        return 1, 1
    return math.prod(shape[:-1]), shape[-1]


def _row_labels(shape: tuple[int, ...]) -> list[str]:
    """The label of each row: the leading indices, comma-separated."""
    if len(shape) <= 1:
        return [""]
    return [",".join(str(k) for k in index) for index in np.ndindex(*shape[:-1])]


def _empty_grid(shape: tuple[int, ...], title: str, legend: str) -> _Grid:
    rows, cols = _grid_shape(shape)

    def objects() -> np.ndarray:
        return np.empty((rows, cols), dtype=object)

    return _Grid(
        title=title,
        row_labels=_row_labels(shape),
        col_labels=[str(c) for c in range(cols)] if shape else [""],
        lines=objects(),
        fills=objects(),
        groups=np.zeros((rows, cols), dtype=np.int64),
        marked=np.zeros((rows, cols), dtype=bool),
        tips=objects(),
        block_rows=shape[-2] if len(shape) >= 3 else rows,
        legend=legend,
    )


def _flat_cells(shape: tuple[int, ...]) -> list[tuple[tuple[int, ...], tuple[int, int]]]:
    """Every (coordinate, (row, col)) of a tile, in row-major order."""
    _, cols = _grid_shape(shape)
    return [(coord, divmod(k, cols)) for k, coord in enumerate(np.ndindex(*shape))]


def _group_ids(keys: dict[tuple[int, int], Any], rows: int, cols: int) -> np.ndarray:
    """Number the distinct keys of the cells: an int array [rows, cols]."""
    ids: dict[Any, int] = {}
    groups = np.zeros((rows, cols), dtype=np.int64)
    for (r, c), key in keys.items():
        groups[r, c] = ids.setdefault(key, len(ids))
    return groups


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------


def _cell_style(grid: _Grid, r: int, c: int) -> str:
    """Inline CSS of one cell: fill (stripes for several colours) and thick group borders."""
    rows, cols = grid.groups.shape
    fills = grid.fills[r, c]
    if len(fills) == 1:
        background = f"background:{fills[0]}"
    else:
        width = 100 / len(fills)
        stops = ",".join(
            f"{colour} {k * width:.2f}% {(k + 1) * width:.2f}%" for k, colour in enumerate(fills)
        )
        background = f"background:linear-gradient(90deg,{stops})"

    def edge(side: str, r2: int, c2: int) -> str:
        outside = not (0 <= r2 < rows and 0 <= c2 < cols)
        if outside or grid.groups[r, c] != grid.groups[r2, c2]:
            return f"border-{side}:2px solid {_OUTLINE}"
        if side == "bottom" and (r + 1) % grid.block_rows == 0:
            return f"border-{side}:2px dashed {_BLOCK}"
        return f"border-{side}:1px solid {_THIN}"

    parts = [
        background,
        edge("top", r - 1, c),
        edge("bottom", r + 1, c),
        edge("left", r, c - 1),
        edge("right", r, c + 1),
        "padding:2px 4px",
    ]
    if grid.marked[r, c]:
        parts += [f"box-shadow:inset 0 0 0 3px {CONFLICT_COLOUR}", "font-weight:bold"]
    return ";".join(parts)


def _grid_html(grid: _Grid) -> str:
    """The grid as a self-contained HTML table with a caption and a legend."""
    rows, cols = grid.groups.shape
    out = [
        '<div style="font-family:monospace;font-size:11px;line-height:1.25">',
        f'<div style="font-weight:bold;margin-bottom:4px">{html.escape(grid.title)}</div>',
        '<table style="border-collapse:collapse;text-align:center;color:#000000">',
        "<tr><th></th>"
        + "".join(f'<th style="padding:0 4px">{html.escape(c)}</th>' for c in grid.col_labels)
        + "</tr>",
    ]
    for r in range(rows):
        cells = [
            f'<th style="padding:0 4px;text-align:right">{html.escape(grid.row_labels[r])}</th>'
        ]
        for c in range(cols):
            text = "<br>".join(html.escape(line) for line in grid.lines[r, c])
            tip = html.escape(grid.tips[r, c], quote=True)
            cells.append(f'<td style="{_cell_style(grid, r, c)}" title="{tip}">{text}</td>')
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    out.append(f'<div style="margin-top:4px">{html.escape(grid.legend)}</div>')
    out.append("</div>")
    return "\n".join(out)


def _figure_html(figure: Any, title: str, legend: str) -> str:
    """HTML embedding a figure as a PNG, for tiles too large for labelled cells."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return (
        '<div style="font-family:monospace;font-size:11px">'
        f'<div style="font-weight:bold">{html.escape(title)}</div>'
        f'<img src="data:image/png;base64,{data}" alt="{html.escape(title, quote=True)}"/>'
        f"<div>{html.escape(legend)}</div></div>"
    )


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


MAX_FIGURE_INCHES = 40.0
"""The largest width or height of a figure; cells shrink below `cell_size` to stay within it."""


def require_matplotlib() -> None:
    """Raise LayoutError saying which extra to install when matplotlib is missing (every
    figure, and the HTML pictures that embed one, need it)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as error:
        raise LayoutError(
            "drawing layouts needs matplotlib: pip install 'layout-algebra[notebooks]'"
        ) from error


def _new_figure(rows: int, cols: int, cell_size: float) -> tuple[Any, Any, float]:
    """A figure sized for a grid of cells, its one axes (y axis pointing down) and the cell size
    actually used (inches)."""
    require_matplotlib()
    from matplotlib.figure import Figure

    cell_size = min(cell_size, (MAX_FIGURE_INCHES - 1.5) / max(rows, cols))
    figure = Figure(
        figsize=(max(cols * cell_size + 1.5, 3.0), max(rows * cell_size + 1.5, 2.0)),
        layout="constrained",
    )
    axes = figure.add_subplot(1, 1, 1)
    axes.set_xlim(-0.5, cols - 0.5)
    axes.set_ylim(rows - 0.5, -0.5)
    axes.set_aspect("equal")
    axes.xaxis.tick_top()
    axes.xaxis.set_label_position("bottom")
    return figure, axes, cell_size


def _label_axes(axes: Any, grid: _Grid) -> None:
    rows, cols = grid.groups.shape
    step_c = max(1, cols // 32)
    step_r = max(1, rows // 32)
    axes.set_xticks(range(0, cols, step_c), grid.col_labels[::step_c], fontsize=7)
    axes.set_yticks(range(0, rows, step_r), grid.row_labels[::step_r], fontsize=7)
    axes.tick_params(length=0)
    for spine in axes.spines.values():
        spine.set_visible(False)


def _outline_segments(groups: np.ndarray, block_rows: int) -> tuple[list, list]:
    """Line segments between cells of different groups (and the border), and block separators."""
    rows, cols = groups.shape
    segments = []
    r, c = np.nonzero(groups[1:, :] != groups[:-1, :])
    segments += [[(x - 0.5, y + 0.5), (x + 0.5, y + 0.5)] for y, x in zip(r, c)]
    r, c = np.nonzero(groups[:, 1:] != groups[:, :-1])
    segments += [[(x + 0.5, y - 0.5), (x + 0.5, y + 0.5)] for y, x in zip(r, c)]
    segments.append([(-0.5, -0.5), (cols - 0.5, -0.5), (cols - 0.5, rows - 0.5)])
    segments.append([(cols - 0.5, rows - 0.5), (-0.5, rows - 0.5), (-0.5, -0.5)])
    blocks = [[(-0.5, y - 0.5), (cols - 0.5, y - 0.5)] for y in range(block_rows, rows, block_rows)]
    return segments, blocks


def _draw_outlines(axes: Any, grid: _Grid) -> None:
    require_matplotlib()
    from matplotlib.collections import LineCollection

    segments, blocks = _outline_segments(grid.groups, grid.block_rows)
    axes.add_collection(LineCollection(segments, colors=_OUTLINE, linewidths=1.8, zorder=3))
    if blocks:
        axes.add_collection(
            LineCollection(blocks, colors=_BLOCK, linewidths=1.5, linestyles="--", zorder=3)
        )


def _grid_figure(grid: _Grid, cell_size: float) -> Any:
    """The grid as a matplotlib figure: filled cells, their text, outlines and red marks."""
    require_matplotlib()
    from matplotlib.patches import Rectangle

    rows, cols = grid.groups.shape
    figure, axes, cell_size = _new_figure(rows, cols, cell_size)
    for r in range(rows):
        for c in range(cols):
            fills = grid.fills[r, c]
            width = 1 / len(fills)
            for k, colour in enumerate(fills):
                axes.add_patch(
                    Rectangle(
                        (c - 0.5 + k * width, r - 0.5),
                        width,
                        1,
                        facecolor=colour,
                        edgecolor="none",
                    )
                )
            axes.add_patch(
                Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor=_THIN, linewidth=0.5)
            )
            if grid.marked[r, c]:
                axes.add_patch(
                    Rectangle(
                        (c - 0.42, r - 0.42),
                        0.84,
                        0.84,
                        fill=False,
                        edgecolor=CONFLICT_COLOUR,
                        linewidth=2.0,
                        zorder=4,
                    )
                )
            lines = grid.lines[r, c]
            if lines:
                text, size = _fit_text(lines, cell_size)
                axes.text(c, r, text, ha="center", va="center", fontsize=size, family="monospace")
    _draw_outlines(axes, grid)
    _label_axes(axes, grid)
    _caption(figure, axes, grid.title, grid.legend)
    return figure


def _caption(figure: Any, axes: Any, title: str, legend: str) -> None:
    """Title above and legend below the axes, wrapped to the figure's width (at least 3 inches,
    `_new_figure`: 40 characters of the title, 51 of the legend)."""
    width = figure.get_figwidth()
    axes.set_title(textwrap.fill(title, int(width * 72 / (0.6 * 9))), fontsize=9)
    axes.set_xlabel(textwrap.fill(legend, int(width * 72 / (0.6 * 7))), fontsize=7)


def _fit_text(lines: list[str], cell_size: float) -> tuple[str, float]:
    """Cell text wrapped into a near-square block, and a font size (points) that fits a cell."""
    words = [word for line in lines for word in line.split(" ")] if len(lines) > 3 else lines
    per_line = max(1, math.ceil(math.sqrt(len(words)))) if len(lines) > 3 else 1
    wrapped = [" ".join(words[k : k + per_line]) for k in range(0, len(words), per_line)]
    widest = max(len(line) for line in wrapped)
    points = cell_size * 72
    size = min(9.0, points / (0.62 * widest + 0.8), points / (1.3 * len(wrapped) + 0.4))
    return "\n".join(wrapped), max(size, 1.0)


def _colour_map_figure(
    values: np.ndarray,
    groups: np.ndarray,
    block_rows: int,
    title: str,
    legend: str,
    colour_map: Any,
    colour_label: str,
    cell_size: float,
    categories: list[tuple[str, str]] | None = None,
) -> Any:
    """A large tile as an image of `values` with a colour bar (or a legend of `categories`)."""
    require_matplotlib()
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Patch

    rows, cols = values.shape
    figure, axes, _ = _new_figure(rows, cols, cell_size)
    image = axes.imshow(values, cmap=colour_map, interpolation="nearest", aspect="equal")
    segments, blocks = _outline_segments(groups, block_rows)
    axes.add_collection(LineCollection(segments, colors=_OUTLINE, linewidths=0.8))
    if blocks:
        axes.add_collection(LineCollection(blocks, colors=_BLOCK, linestyles="--"))
    if categories is None:
        bar = figure.colorbar(image, ax=axes, fraction=0.04, pad=0.02)
        bar.set_label(colour_label)
    else:
        handles = [Patch(facecolor=colour, label=name) for name, colour in categories]
        axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7)
    _caption(figure, axes, title, legend)
    return figure


# --------------------------------------------------------------------------------------------
# Register layouts
# --------------------------------------------------------------------------------------------


def _check_register(layout: Any) -> RegisterLayout:
    if not isinstance(layout, RegisterLayout):
        raise LayoutError(f"expected a RegisterLayout, got {layout!r}")
    return layout


def _register_title(layout: RegisterLayout) -> str:
    return (
        f"{layout!r}: shape {layout.shape}, {layout.num_threads} threads, "
        f"{layout.local_size} registers each, replication {layout.replication}"
    )


_REGISTER_LEGEND = (
    "cell: t:i = thread t, register i (every owner listed); colour: thread's lane; "
    "thick lines: warp boundaries"
)


def _owners(layout: RegisterLayout) -> dict[tuple[int, ...], list[tuple[int, int]]]:
    """Every element's owners (t, i), in ascending order."""
    owners: dict[tuple[int, ...], list[tuple[int, int]]] = {
        coord: [] for coord in np.ndindex(*layout.shape)
    }
    table = layout.table()
    for t in range(layout.num_threads):
        for i in range(layout.local_size):
            owners[tuple(int(x) for x in table[t, i])].append((t, i))
    return owners


def _register_grid(layout: RegisterLayout) -> _Grid:
    grid = _empty_grid(layout.shape, _register_title(layout), _REGISTER_LEGEND)
    owners = _owners(layout)
    warps: dict[tuple[int, int], Any] = {}
    for coord, (r, c) in _flat_cells(layout.shape):
        held = owners[coord]
        threads = sorted({t for t, _ in held})
        grid.lines[r, c] = [f"{t}:{i}" for t, i in held]
        grid.fills[r, c] = tuple(lane_colour(t) for t in threads)
        grid.tips[r, c] = f"{coord}: " + ", ".join(f"{t}:{i}" for t, i in held)
        warps[(r, c)] = frozenset(t // WARP_SIZE for t in threads)
    grid.groups = _group_ids(warps, *grid.groups.shape)
    return grid


def _flat_elements(layout: RegisterLayout) -> np.ndarray:
    """The row-major index of the element each (t, i) holds, in the order of `table`."""
    table = layout.table().reshape(layout.num_threads * layout.local_size, layout.rank)
    if not layout.rank:
        return np.zeros(len(table), dtype=np.int64)
    return np.ravel_multi_index(tuple(table.T), layout.shape)


def _first_owner_and_warps(layout: RegisterLayout) -> tuple[np.ndarray, np.ndarray]:
    """Per cell of the 2-D view: the lowest owning thread, and a warp-set group id."""
    rows, cols = _grid_shape(layout.shape)
    flat = _flat_elements(layout)
    threads = np.repeat(np.arange(layout.num_threads), layout.local_size)
    first = np.full(rows * cols, layout.num_threads, dtype=np.int64)
    np.minimum.at(first, flat, threads)
    num_warps = -(-layout.num_threads // WARP_SIZE)
    membership = np.zeros((rows * cols, num_warps), dtype=bool)
    membership[flat, threads // WARP_SIZE] = True
    _, groups = np.unique(membership, axis=0, return_inverse=True)
    return first.reshape(rows, cols), groups.reshape(rows, cols)


def _register_colour_map(layout: RegisterLayout, cell_size: float) -> Any:
    first, groups = _first_owner_and_warps(layout)
    block_rows = layout.shape[-2] if layout.rank >= 3 else first.shape[0]
    return _colour_map_figure(
        first,
        groups,
        block_rows,
        _register_title(layout),
        "colour: lowest thread holding the element; thick lines: warp boundaries",
        "turbo",
        "thread",
        cell_size,
    )


def layout_html(layout: RegisterLayout, *, max_cells: int = MAX_CELLS) -> str:
    """HTML picture of a register layout (what `RegisterLayout._repr_html_` shows).

    A table with one cell per element listing every ``t:i`` that holds it, filled with the
    colour of its thread (`lane_colour`; stripes for replicated elements), thick borders between
    cells held by different sets of warps. Tiles of more than `max_cells` cells embed the
    colour-map figure of `layout_figure` as a PNG instead.
    """
    layout = _check_register(layout)
    if math.prod(layout.shape) > max_cells:
        return _figure_html(
            _register_colour_map(layout, 0.12), _register_title(layout), _REGISTER_LEGEND
        )
    return _grid_html(_register_grid(layout))


def layout_figure(
    layout: RegisterLayout, *, cell_size: float = 0.6, max_cells: int = MAX_CELLS
) -> Any:
    """A matplotlib `Figure` of a register layout (what `RegisterLayout.plot` returns).

    The same picture as `layout_html`, `cell_size` inches per cell; tiles of more than
    `max_cells` cells are drawn as a colour map of the lowest owning thread, with a colour bar
    and the warp boundaries.
    """
    layout = _check_register(layout)
    if math.prod(layout.shape) > max_cells:
        return _register_colour_map(layout, min(cell_size, 0.12))
    return _grid_figure(_register_grid(layout), cell_size)


# --------------------------------------------------------------------------------------------
# Differences of two register layouts
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Difference:
    """Two comparable register layouts and, per cell of the 2-D view, whether the sets of
    (t, i) owning the element differ between them."""

    a: RegisterLayout
    b: RegisterLayout
    differ: np.ndarray

    @property
    def title(self) -> str:
        return (
            f"a = {self.a!r} vs b = {self.b!r}: shape {self.a.shape}, {self.a.num_threads} threads"
        )

    @property
    def legend(self) -> str:
        count, total = int(self.differ.sum()), self.differ.size
        text = f"{count} of {total} elements differ"
        if count:
            first = int(np.flatnonzero(self.differ)[0])
            coord = tuple(int(x) for x in np.unravel_index(first, self.a.shape))
            text += (
                f"; first: element {coord}, held by {_owner_text(self.a.owners(coord))} under a "
                f"and by {_owner_text(self.b.owners(coord))} under b"
            )
        return text + _DIFFERENCE_LEGEND


_DIFFERENCE_LEGEND = (
    ". cell: t:i = thread t, register i (every owner listed); red frame, 'a ...' and 'b ...': "
    "an element whose owners differ, with its owners under each layout; colour: the owners' "
    "lanes; thick lines: around the differing elements"
)


def _owner_text(owners: list[tuple[int, int]]) -> str:
    """Owners as ``t:i`` labels separated by spaces, or ``none``."""
    return " ".join(f"{t}:{i}" for t, i in owners) or "none"


def _compare(a: Any, b: Any) -> _Difference:
    """The cells where `a` and `b` disagree; LayoutError unless both are register layouts of
    one shape and one thread count."""
    a, b = _check_register(a), _check_register(b)
    if a.shape != b.shape or a.num_threads != b.num_threads:
        raise LayoutError(
            f"cannot draw the difference of {a!r} (shape {a.shape}, {a.num_threads} threads) "
            f"and {b!r} (shape {b.shape}, {b.num_threads} threads): expected the same shape "
            "and the same number of threads"
        )
    # Each (element, t, i) of a layout as one integer; the elements whose owners differ are
    # those of the keys that only one layout has.
    width = max(a.local_size, b.local_size)
    pairs = a.num_threads * width

    def keys(layout: RegisterLayout) -> np.ndarray:
        threads = np.repeat(np.arange(layout.num_threads), layout.local_size)
        registers = np.tile(np.arange(layout.local_size), layout.num_threads)
        return _flat_elements(layout) * pairs + threads * width + registers

    rows, cols = _grid_shape(a.shape)
    differ = np.zeros(rows * cols, dtype=bool)
    differ[np.setxor1d(keys(a), keys(b)) // pairs] = True
    return _Difference(a, b, differ.reshape(rows, cols))


def _difference_grid(difference: _Difference) -> _Grid:
    grid = _empty_grid(difference.a.shape, difference.title, difference.legend)
    owners_a, owners_b = _owners(difference.a), _owners(difference.b)
    for coord, (r, c) in _flat_cells(difference.a.shape):
        held_a, held_b = owners_a[coord], owners_b[coord]
        if difference.differ[r, c]:
            grid.lines[r, c] = [f"a {_owner_text(held_a)}", f"b {_owner_text(held_b)}"]
            grid.tips[r, c] = (
                f"{coord}: {_owner_text(held_a)} under a, {_owner_text(held_b)} under b (differ)"
            )
        else:
            grid.lines[r, c] = [f"{t}:{i}" for t, i in held_a]
            grid.tips[r, c] = f"{coord}: {_owner_text(held_a)} under both"
        threads = sorted({t for t, _ in held_a + held_b})
        grid.fills[r, c] = tuple(lane_colour(t) for t in threads) or (IDLE_COLOUR,)
    grid.marked = difference.differ.copy()
    grid.groups = difference.differ.astype(np.int64)
    return grid


def _difference_colour_map(difference: _Difference, cell_size: float) -> Any:
    require_matplotlib()
    from matplotlib.colors import ListedColormap

    categories = [("same owners", IDLE_COLOUR), ("different owners", CONFLICT_COLOUR)]
    roles = difference.differ.astype(np.int64)
    shape = difference.a.shape
    figure = _colour_map_figure(
        roles,
        roles,
        shape[-2] if len(shape) >= 3 else roles.shape[0],
        difference.title,
        difference.legend,
        ListedColormap([colour for _, colour in categories]),
        "",
        cell_size,
        categories=categories,
    )
    figure.axes[0].images[0].set_clim(0, 1)
    return figure


def difference_html(a: RegisterLayout, b: RegisterLayout, *, max_cells: int = MAX_CELLS) -> str:
    """HTML picture of where register layouts `a` and `b` (one shape, one thread count) differ.

    The tile is drawn once, one cell per element. An element held by the same set of (t, i)
    under both layouts lists its ``t:i`` once; one whose owner sets differ lists
    ``a <owners>`` and ``b <owners>`` and gets a red frame, and a thick line runs around the
    differing elements. Cells take the colours of their owners' lanes. The legend reads
    ``"<k> of <n> elements differ"`` and names the first differing element (row-major) with its
    owners under each layout. Tiles of more than `max_cells` cells embed the same/different
    colour map of `difference_figure` as a PNG. LayoutError when `a` or `b` is not a register
    layout, or their shapes or thread counts differ.
    Example: ``difference_html(spatial(4), column_spatial(4))`` marks no cell (they are equal).
    """
    difference = _compare(a, b)
    if difference.differ.size > max_cells:
        return _figure_html(
            _difference_colour_map(difference, 0.12), difference.title, difference.legend
        )
    return _grid_html(_difference_grid(difference))


def difference_figure(
    a: RegisterLayout, b: RegisterLayout, *, cell_size: float = 0.6, max_cells: int = MAX_CELLS
) -> Any:
    """A matplotlib `Figure` of where register layouts `a` and `b` differ: the picture of
    `difference_html` (red frames on the differing cells), or for tiles of more than `max_cells`
    cells a colour map of same and different owners with a legend. LayoutError as for
    `difference_html`."""
    difference = _compare(a, b)
    if difference.differ.size > max_cells:
        return _difference_colour_map(difference, min(cell_size, 0.12))
    return _grid_figure(_difference_grid(difference), cell_size)


# --------------------------------------------------------------------------------------------
# Shared layouts
# --------------------------------------------------------------------------------------------


def _check_element_bits(element_bits: Any) -> int:
    if isinstance(element_bits, bool) or not isinstance(element_bits, (int, np.integer)):
        raise LayoutError(f"element_bits must be a positive integer, got {element_bits!r}")
    if element_bits < 1:
        raise LayoutError(f"element_bits must be a positive integer, got {element_bits!r}")
    return int(element_bits)


def _words(offsets: np.ndarray, element_bits: int) -> np.ndarray:
    """The 4-byte word holding the first bit of each element offset."""
    return offsets * element_bits // 32


def _shared_title(layout: SharedLayout, element_bits: int) -> str:
    return f"{layout!r}: shape {layout.shape}, {element_bits}-bit elements"


_SHARED_LEGEND = (
    "cell: @offset (elements) and bank b (of the element's first 4-byte word); colour: bank; "
    "thick lines: 128-byte rows of the 32 banks"
)


def _shared_grid(layout: SharedLayout, element_bits: int) -> _Grid:
    grid = _empty_grid(layout.shape, _shared_title(layout, element_bits), _SHARED_LEGEND)
    offsets = np.asarray(layout.table()).reshape(grid.groups.shape)
    words = _words(offsets, element_bits)
    grid.groups = words // NUM_BANKS
    for coord, (r, c) in _flat_cells(layout.shape):
        offset, bank = int(offsets[r, c]), int(words[r, c] % NUM_BANKS)
        grid.lines[r, c] = [f"@{offset}", f"b{bank}"]
        grid.fills[r, c] = (lane_colour(bank),)
        grid.tips[r, c] = f"{coord}: offset {offset}, word {int(words[r, c])}, bank {bank}"
    return grid


def _check_shared(layout: Any) -> SharedLayout:
    if not isinstance(layout, SharedLayout):
        raise LayoutError(f"expected a SharedLayout, got {layout!r}")
    return layout


def _shared_colour_map(layout: SharedLayout, element_bits: int, cell_size: float) -> Any:
    rows, cols = _grid_shape(layout.shape)
    words = _words(np.asarray(layout.table()).reshape(rows, cols), element_bits)
    return _colour_map_figure(
        words % NUM_BANKS,
        words // NUM_BANKS,
        layout.shape[-2] if layout.rank >= 3 else rows,
        _shared_title(layout, element_bits),
        "colour: bank of the element's first 4-byte word; thick lines: 128-byte rows",
        "twilight",
        "bank",
        cell_size,
    )


def shared_html(layout: SharedLayout, element_bits: int = 16, *, max_cells: int = MAX_CELLS) -> str:
    """HTML picture of a shared layout of `element_bits`-bit elements.

    One cell per element showing ``@offset`` (in elements) and ``b<bank>``, the bank of the
    4-byte word holding the element's first bit (``offset * element_bits // 32 % 32``), filled
    with the bank's colour; thick borders outline each 128-byte row of banks. Tiles of more than
    `max_cells` cells embed the colour map of `shared_figure` as a PNG.
    """
    layout = _check_shared(layout)
    element_bits = _check_element_bits(element_bits)
    if math.prod(layout.shape) > max_cells:
        return _figure_html(
            _shared_colour_map(layout, element_bits, 0.12),
            _shared_title(layout, element_bits),
            _SHARED_LEGEND,
        )
    return _grid_html(_shared_grid(layout, element_bits))


def shared_figure(
    layout: SharedLayout,
    element_bits: int = 16,
    *,
    cell_size: float = 0.6,
    max_cells: int = MAX_CELLS,
) -> Any:
    """A matplotlib `Figure` of a shared layout: the picture of `shared_html`, or for tiles of
    more than `max_cells` cells a colour map of the banks with a colour bar."""
    layout = _check_shared(layout)
    element_bits = _check_element_bits(element_bits)
    if math.prod(layout.shape) > max_cells:
        return _shared_colour_map(layout, element_bits, min(cell_size, 0.12))
    return _grid_figure(_shared_grid(layout, element_bits), cell_size)


# --------------------------------------------------------------------------------------------
# Access maps
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Access:
    """One access of one warp, resolved to cells: per touched (t, i) its coordinate, offset,
    bank, phase and whether the bank conflicts in that phase."""

    summary: str
    touched: dict[tuple[int, ...], list[tuple[int, int, int, int, bool]]]
    phase_banks: list[dict[int, list[tuple[int, int]]]]
    conflicting: list[set[int]]


def _resolve_access(access_map: AccessMap, element_bits: int, warp: int, access: int) -> _Access:
    """The cells touched by access `access` of warp `warp` and their bank traffic."""
    conflicts = access_map.bank_conflicts(warp, element_bits, access=access)
    width = access_map.vector_width(element_bits)
    offsets = access_map.table()
    touched: dict[tuple[int, ...], list[tuple[int, int, int, int, bool]]] = {}
    conflicting = [set(banks) for banks in conflicts.conflicting_banks]
    phase_banks: list[dict[int, list[tuple[int, int]]]] = [{} for _ in conflicting]
    for t, phase, words in zip(conflicts.threads, conflicts.phases, conflicts.words):
        for word in words:
            phase_banks[phase].setdefault(word % NUM_BANKS, []).append((t, word))
        for i in range(access * width, (access + 1) * width):
            coord = tuple(int(x) for x in access_map.register.map(t, i))
            offset = int(offsets[t, i])
            bank = int(offset * element_bits // 32 % NUM_BANKS)
            touched.setdefault(coord, []).append((t, i, offset, bank, bank in conflicting[phase]))
    summary = (
        f"warp {warp}, access {access} of {access_map.local_size // width}: vectors of {width} "
        f"x {element_bits}-bit elements, {len(conflicting)} phase(s), "
        f"{conflicts.wavefronts} wavefronts"
    )
    return _Access(summary, touched, phase_banks, conflicting)


def _access_title(access_map: AccessMap) -> str:
    return f"compose({access_map.memory!r}, {access_map.register!r})"


_ACCESS_LEGEND = (
    "cell: t:i @offset b<bank> for the registers this access moves (grey: not moved); colour: "
    "thread's lane; red frame and '!': a bank with more than one distinct word in that phase; "
    "thick lines: 128-byte rows"
)


def _access_grid(access_map: AccessMap, resolved: _Access, element_bits: int) -> _Grid:
    grid = _empty_grid(
        access_map.shape, f"{_access_title(access_map)}: {resolved.summary}", _ACCESS_LEGEND
    )
    memory = access_map.memory
    rows_shape = grid.groups.shape
    words = _words(np.asarray(memory.table()).reshape(rows_shape), element_bits)
    grid.groups = words // NUM_BANKS
    for coord, (r, c) in _flat_cells(access_map.shape):
        entries = resolved.touched.get(coord, [])
        if not entries:
            grid.lines[r, c] = []
            grid.fills[r, c] = (IDLE_COLOUR,)
            grid.tips[r, c] = f"{coord}: not moved by this access"
            continue
        conflict = any(e[4] for e in entries)
        grid.lines[r, c] = [f"{t}:{i}" for t, i, *_ in entries] + [
            f"@{entries[0][2]}",
            f"b{entries[0][3]}" + ("!" if conflict else ""),
        ]
        grid.fills[r, c] = tuple(lane_colour(t) for t in sorted({e[0] for e in entries}))
        grid.marked[r, c] = conflict
        grid.tips[r, c] = f"{coord}: " + ", ".join(
            f"{t}:{i} offset {offset} bank {bank}" + (" (conflict)" if bad else "")
            for t, i, offset, bank, bad in entries
        )
    return grid


def _bank_table_html(resolved: _Access) -> str:
    """Per phase, the threads each bank serves (distinct words counted), conflicts in red."""
    out = [
        '<table style="border-collapse:collapse;margin-top:6px;font-family:monospace;'
        'font-size:10px">',
        "<tr><th>phase</th>"
        + "".join(f'<th style="padding:0 2px">b{b}</th>' for b in range(NUM_BANKS))
        + "</tr>",
    ]
    for phase, banks in enumerate(resolved.phase_banks):
        cells = [f"<th>{phase}</th>"]
        for bank in range(NUM_BANKS):
            users = banks.get(bank, [])
            distinct = len({word for _, word in users})
            threads = sorted({t for t, _ in users})
            style = f"border:1px solid {_THIN};padding:1px 2px;text-align:center"
            if bank in resolved.conflicting[phase]:
                style += f";background:{CONFLICT_COLOUR};color:#ffffff;font-weight:bold"
            text = " ".join(f"t{t}" for t in threads)
            if distinct > 1:
                text += f" ({distinct} words)"
            cells.append(f'<td style="{style}">{html.escape(text)}</td>')
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _check_access(access_map: Any) -> AccessMap:
    if not isinstance(access_map, AccessMap):
        raise LayoutError(f"expected an AccessMap, got {access_map!r}")
    if not isinstance(access_map.memory, SharedLayout):
        raise LayoutError(
            f"access pictures show shared-memory banks, but the memory layout is "
            f"{access_map.memory!r}"
        )
    return access_map


def _access_colour_map(
    access_map: AccessMap, resolved: _Access, element_bits: int, cell_size: float
) -> Any:
    rows, cols = _grid_shape(access_map.shape)
    roles = np.zeros((rows, cols), dtype=np.int64)
    for coord, (r, c) in _flat_cells(access_map.shape):
        entries = resolved.touched.get(coord)
        if entries:
            roles[r, c] = 2 if any(e[4] for e in entries) else 1
    require_matplotlib()
    from matplotlib.colors import ListedColormap

    categories = [
        ("not moved", IDLE_COLOUR),
        ("moved", "#4c9be8"),
        ("bank conflict", CONFLICT_COLOUR),
    ]
    words = _words(np.asarray(access_map.memory.table()).reshape(rows, cols), element_bits)
    figure = _colour_map_figure(
        roles,
        words // NUM_BANKS,
        access_map.shape[-2] if len(access_map.shape) >= 3 else rows,
        f"{_access_title(access_map)}: {resolved.summary}",
        "colour: role of each element in this access; thick lines: 128-byte rows",
        ListedColormap([colour for _, colour in categories]),
        "",
        cell_size,
        categories=categories,
    )
    figure.axes[0].images[0].set_clim(0, 2)
    return figure


def access_html(
    access_map: AccessMap,
    element_bits: int,
    *,
    warp: int = 0,
    access: int = 0,
    max_cells: int = MAX_CELLS,
) -> str:
    """HTML picture of access `access` of warp `warp` of a shared-memory access map.

    Every thread of the warp moves its `access`-th vector of `vector_width(element_bits)`
    registers. Cells it moves show ``t:i``, ``@offset`` and ``b<bank>`` and take the thread's
    colour; cells on a bank that delivers more than one distinct word in that thread's phase
    (`AccessMap.bank_conflicts`) get a red frame and ``!``; other cells are grey. Below, the bank
    table lists per phase the threads each bank serves, conflicting banks in red. Tiles of more
    than `max_cells` cells embed the colour map of `access_figure` as a PNG.
    LayoutError for a non-shared memory layout or an out-of-range warp or access.
    """
    access_map = _check_access(access_map)
    element_bits = _check_element_bits(element_bits)
    resolved = _resolve_access(access_map, element_bits, warp, access)
    if math.prod(access_map.shape) > max_cells:
        picture = _figure_html(
            _access_colour_map(access_map, resolved, element_bits, 0.12),
            f"{_access_title(access_map)}: {resolved.summary}",
            _ACCESS_LEGEND,
        )
    else:
        picture = _grid_html(_access_grid(access_map, resolved, element_bits))
    return picture + "\n" + _bank_table_html(resolved)


def access_figure(
    access_map: AccessMap,
    element_bits: int,
    *,
    warp: int = 0,
    access: int = 0,
    cell_size: float = 0.6,
    max_cells: int = MAX_CELLS,
) -> Any:
    """A matplotlib `Figure` of one access of one warp: the tile picture of `access_html`
    (without the bank table), or for tiles of more than `max_cells` cells a colour map of each
    element's role (not moved, moved, on a conflicting bank) with a legend."""
    access_map = _check_access(access_map)
    element_bits = _check_element_bits(element_bits)
    resolved = _resolve_access(access_map, element_bits, warp, access)
    if math.prod(access_map.shape) > max_cells:
        return _access_colour_map(access_map, resolved, element_bits, min(cell_size, 0.12))
    return _grid_figure(_access_grid(access_map, resolved, element_bits), cell_size)

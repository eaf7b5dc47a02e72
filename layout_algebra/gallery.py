"""The picture gallery: a fixed set of layouts drawn into PNG files, for the documentation.

`PICTURES` names each picture, says what it shows and how to draw it; `write_gallery(directory)`
draws them all (matplotlib, the `plot` extra) into `directory` with an index, ``index.md``, of
their captions, and returns the paths. ``layout-algebra gallery`` runs it; the repository keeps
the result in ``docs/gallery`` and the README shows some of it.

    write_gallery("docs/gallery")      # -> [Path("docs/gallery/mma_a_fragment.png"), ...]

The PNG files carry no creation date or software version, so drawing them again with the same
matplotlib gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layout_algebra.access import compose
from layout_algebra.errors import LayoutError
from layout_algebra.fragments import fragment
from layout_algebra.register import column_spatial, local, spatial
from layout_algebra.render import (
    access_figure,
    difference_figure,
    layout_figure,
    require_matplotlib,
    shared_figure,
)
from layout_algebra.shared import shared_row_major, shared_row_major_swizzle


@dataclass(frozen=True)
class Picture:
    """One picture of the gallery: its file stem, its caption and a function drawing it (a
    matplotlib `Figure`)."""

    name: str
    caption: str
    draw: Callable[[], Any]


def _ldmatrix_pattern() -> Any:
    """A warp reading an 8 x 32 f16 tile in 16-byte chunks, lane after lane down each column
    of chunks (eight rows of one chunk column per phase, as `ldmatrix` does)."""
    return column_spatial(8, 4).local(1, 8)


PICTURES: tuple[Picture, ...] = (
    Picture(
        "register_layout",
        "A register layout, `spatial(4, 2).local(2, 4)`: eight threads, each holding a 2 x 4 "
        "block; each cell shows the thread and register (t:i) holding that element, and "
        "colours follow the thread.",
        lambda: layout_figure(spatial(4, 2).local(2, 4)),
    ),
    Picture(
        "mma_a_fragment",
        'PTX\'s `mma.m16n8k16` A fragment (16 x 16 f16), as `fragment("mma.m16n8k16.a")` holds it.',
        lambda: layout_figure(fragment("mma.m16n8k16.a").layout),
    ),
    Picture(
        "mma_c_fragment",
        "The `mma.m16n8k16` accumulator (C) fragment, 16 x 8 f32.",
        lambda: layout_figure(fragment("mma.m16n8k16.c").layout),
    ),
    Picture(
        "shared_swizzled",
        "An 8 x 32 f16 shared tile with the 64-byte swizzle "
        "(`shared_row_major_swizzle(8, 32, element_bits=16)`): each cell's offset and the bank "
        "of its word.",
        lambda: shared_figure(shared_row_major_swizzle(8, 32, element_bits=16), 16),
    ),
    Picture(
        "access_row_major",
        "Warp 0 reading a row-major 8 x 32 f16 tile in 16-byte chunks, eight rows of one chunk "
        "column at a time (as `ldmatrix` does): the eight chunks of a column share four banks, "
        "a 4-way conflict (16 wavefronts); cells on conflicting banks are framed.",
        lambda: access_figure(compose(shared_row_major(8, 32), _ldmatrix_pattern()), 16),
    ),
    Picture(
        "access_swizzled",
        "The same access from the swizzled tile: a column's chunks fall in different banks, "
        "no conflict (4 wavefronts).",
        lambda: access_figure(
            compose(shared_row_major_swizzle(8, 32, element_bits=16), _ldmatrix_pattern()), 16
        ),
    ),
    Picture(
        "counterexample",
        "What a refuted equivalence shows: `spatial(2, 4).local(2, 1)` against "
        "`local(2, 1).spatial(2, 4)`, the cells whose owners differ framed.",
        lambda: difference_figure(spatial(2, 4).local(2, 1), local(2, 1).spatial(2, 4)),
    ),
)
"""Every picture of the gallery, in the order of its index."""


DPI = 72
"""Resolution of the PNG files (the figures' cells are 0.6 inch: about 43 pixels)."""


def write_gallery(directory: str | Path) -> list[Path]:
    """Draw every picture of `PICTURES` into `directory` (created if missing) as ``NAME.png``
    and write ``index.md`` listing them with their captions; return the paths written, the
    index last. Raises `LayoutError` when matplotlib is missing (naming the extra) or when
    `directory` exists and is not a directory."""
    require_matplotlib()
    import matplotlib.pyplot as plt

    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise LayoutError(f"gallery: {str(target)!r} exists and is not a directory")
    target.mkdir(parents=True, exist_ok=True)
    written = []
    lines = [
        "# Gallery",
        "",
        "Drawn by `layout-algebra gallery` (`layout_algebra.gallery`); do not edit by hand.",
        "",
    ]
    for picture in PICTURES:
        figure = picture.draw()
        path = target / f"{picture.name}.png"
        figure.savefig(path, format="png", dpi=DPI, metadata={"Software": None})
        plt.close(figure)
        written.append(path)
        lines += [
            f"## {picture.name}",
            "",
            picture.caption,
            "",
            f"![{picture.name}]({path.name})",
            "",
        ]
    index = target / "index.md"
    index.write_text("\n".join(lines), encoding="utf-8")
    written.append(index)
    return written

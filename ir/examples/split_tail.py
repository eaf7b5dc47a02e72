"""A split of the last partial wave: the output tiles that fill whole waves of blocks computed
one block a tile, the tiles past them (the *tail*) split along k, so that the last wave's
blocks are many and short rather than few and long. For the packed-weight prefill programs.

A launch of T output tiles on waves of S blocks (the GPU's block slots) leaves R = T mod S
tiles to a last wave that keeps R of its S slots busy. With a split of at most P, each tail
tile is split into ``p = min(P, S // max(R, 1))`` parts (1 where the tail is more than half a
wave: its parts would spill into another wave), its K_T k-tiles shared in equal runs of
`granule` k-tiles. The launch is ``D + p R`` blocks, D = T - R: block x < D computes tile x
whole, as a launch of one block a tile would; block D + i computes part ``i mod p`` of tail
tile ``i // p``, and the last of a tail tile's blocks to finish adds its parts in slot order,
which is k order (`ir.examples.split_sum`). Unlike stream-K (`ir.examples.stream_k`), every
block computes one run of one tile's k-tiles: no block crosses a tile boundary, so none pays
for two tiles' prologues and epilogues, and a block of a whole tile stores it as an unsplit
launch does.

The functions take ints (the host's launch) or expressions (the program's), and give the same
values for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layout_algebra.symbolic import Expr, maximum, minimum


def tail_tiles(tiles: Any, wave: int) -> Any:
    """R, the tiles past the last whole wave of `wave` blocks: ``T mod S``."""
    return tiles % wave


def tail_parts(tiles: Any, wave: int, split: int) -> Any:
    """p, the parts each tail tile is split into: ``min(P, S // max(R, 1))``, at least 1 (the
    tail's parts fit in one wave)."""
    return minimum(split, wave // maximum(tail_tiles(tiles, wave), 1))


def split_tiles(tiles: Any, wave: int, split: int) -> Any:
    """The tail tiles whose parts the launch sums: R where p > 1, else none (0); the workspace
    holds ``max(this, 1)`` tiles' parts."""
    return minimum(tail_parts(tiles, wave, split) - 1, 1) * tail_tiles(tiles, wave)


def split_tail_blocks(tiles: Any, wave: int, split: int) -> Any:
    """The launch's blocks: ``D + p R = T + (p - 1) R``."""
    return tiles + (tail_parts(tiles, wave, split) - 1) * tail_tiles(tiles, wave)


@dataclass(frozen=True)
class SplitTailPart:
    """Block x's part of the launch: output `tile` (row-major over the tile grid, written
    clamped below T so that its bound shows), its index `shared` among the tail tiles (where
    its parts and counter are; 0 for a whole tile), the block's `slot` among the tile's
    `count` parts (1: the block computes the tile whole), and the tile's k-tiles ``[first,
    end)`` it owns."""

    tile: Expr
    shared: Expr
    slot: Expr
    count: Expr
    first: Expr
    end: Expr


def split_tail_part(
    block: Any, tiles: Any, wave: int, split: int, k_tiles: Any, granule: int = 1
) -> SplitTailPart:
    """The part block `block` computes of a launch of `tiles` output tiles of `k_tiles` k-tiles
    each (a multiple of ``split * granule``, so that every part owns at least one run), on
    waves of `wave` blocks with tail tiles split into at most `split` parts, counted in runs of
    `granule` k-tiles."""
    rest = tail_tiles(tiles, wave)
    whole = tiles - rest
    parts = tail_parts(tiles, wave, split)
    # i, the block's index among the tail's blocks (0 for a block of a whole tile), and its
    # tile's part count: 1 below D, p past it.
    index = maximum(block - whole, 0)
    in_tail = minimum(maximum(block - whole + 1, 0), 1)
    count = 1 + (parts - 1) * in_tail
    slot = minimum(index % count, split - 1)
    shared = minimum(index // count, maximum(split_tiles(tiles, wave, split), 1) - 1)
    tile = minimum(minimum(block, whole) + index // count, tiles - 1)
    runs = k_tiles // granule
    return SplitTailPart(
        tile=tile,
        shared=shared,
        slot=slot,
        count=count,
        # Written clamped to the tile's k-tiles (which they are), so that their bounds show it.
        first=minimum(slot * runs // count, runs - 1) * granule,
        end=maximum(minimum((slot + 1) * runs // count, runs), 1) * granule,
    )

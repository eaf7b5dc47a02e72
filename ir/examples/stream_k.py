"""Stream-K: a schedule of persistent blocks that share the k-tile iterations of every output
tile evenly, for the packed-weight matmul programs.

A launch of T output tiles, each K_T k-tiles deep, has W = T K_T iterations. With G <= W
blocks, block g takes the iterations ``[g W // G, (g + 1) W // G)`` in tile order (tile t's
are ``t K_T .. (t + 1) K_T - 1``): every block has at least one, and however the tiles fall
into waves, no SM waits on a partial wave. A block's range crosses tiles, so it works on
*segments*: the part of one tile's k-tiles it owns. Iteration i lies in block ``((i + 1) G -
1) // W``, so a tile's first block and the number of blocks sharing it follow from its first
and last iteration. A tile one block covers whole is that block's to store; the blocks of a
shared tile each store their f32 partial sums in their slot (the block's index minus the
tile's first block) and the last to finish adds them in slot order, which is k order
(`ir.examples.split_sum`).

`register_dequant_matmul` (decode) and `wgmma_dequant_matmul` (prefill) run their k loop per
segment inside `stream_k_segments`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ir.builder import ProgramBuilder
from layout_algebra.symbolic import Expr, maximum, minimum


def stream_k_blocks(stream_k: int, work: Any, granule: int = 1) -> Any:
    """G, the blocks of a launch asking for `stream_k` blocks for `work` iterations (an int
    or an expression of the program's parameters) shared in runs of `granule`:
    ``min(stream_k, W / u)``."""
    return minimum(stream_k, work // granule)


def stream_k_slots(k_tiles: Any, work: Any, blocks: Any, granule: int = 1) -> Any:
    """The partial-sum slots a launch needs: the most blocks one tile's `k_tiles` iterations
    can span when `blocks` blocks share `work` iterations in runs of `granule`, ``(K_T / u -
    1) // (W / u // G) + 2``."""
    k_tiles, work = k_tiles // granule, work // granule
    return (k_tiles - 1) // (work // blocks) + 2


@dataclass(frozen=True)
class StreamKSegment:
    """One tile's part of a block's iterations: `tile` the output tile (row-major over the
    tile grid, written clamped below the tile count so that its bound shows it), the tile's
    k-tiles ``[first, end)`` the block owns (at least one, within ``[0, K_T]`` by their
    bounds), the block's `slot` among the tile's parts and `count`, the blocks sharing the
    tile (1: the block owns it whole)."""

    tile: Expr
    first: Expr
    end: Expr
    slot: Expr
    count: Expr


@contextmanager
def stream_k_segments(
    b: ProgramBuilder, *, tiles: Any, k_tiles: Any, work: Any, blocks: Any, granule: int = 1
) -> Iterator[StreamKSegment]:
    """In a program launched on a grid of `blocks` (G) blocks along x: a loop over the tiles
    block x's iterations touch, its body (the with statement's) run once per segment with the
    segment's `StreamKSegment`. `tiles`, `k_tiles` and `work` (their product) as the program
    computes them; `granule` (dividing `k_tiles`) the run of k-tiles the shares are counted
    in, so that each segment's `first` and `end` are its multiples."""
    g = b.block_x
    k_tiles, work = k_tiles // granule, work // granule
    start, stop = g * work // blocks, (g + 1) * work // blocks
    with b.for_range(start // k_tiles, (stop - 1) // k_tiles + 1) as t:
        base = t * k_tiles
        first_block = ((base + 1) * blocks - 1) // work
        yield StreamKSegment(
            tile=minimum(t, tiles - 1),
            first=minimum(maximum(start - base, 0), k_tiles - 1) * granule,
            end=maximum(minimum(stop - base, k_tiles), 1) * granule,
            slot=g - first_block,
            count=((base + k_tiles) * blocks - 1) // work - first_block + 1,
        )

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

With a *prefix* of D tiles (`stream_k_prefix`: all but the last one to two waves' worth of
tiles), the launch is D + G blocks: block g < D computes tile g whole, as a launch of one block
a tile would, and the other G blocks share the iterations of tiles D .. T - 1 as above (the
data-parallel and stream-K hybrid): the full waves pay nothing at tile boundaries, and only the
tail is balanced. The shared tiles' parts and counters are numbered from tile D
(`StreamKSegment.shared`).

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


def stream_k_prefix(tiles: Any, stream_k: int) -> Any:
    """D, the tiles a hybrid launch computes whole before its stream-K tail: all but the last
    one to two waves of `stream_k` tiles, ``max(T // S - 1, 0) S`` (0 below two waves; written
    at most T - 1, which it is, so that the shared tiles' count shows it is at least one)."""
    return minimum(maximum(tiles // stream_k - 1, 0) * stream_k, tiles - 1)


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
    tile (1: the block owns it whole), and the tile's `shared` index."""

    tile: Expr
    first: Expr
    end: Expr
    slot: Expr
    count: Expr
    shared: Expr
    """The tile's index among the shared tiles (``tile - D`` with a prefix of D tiles, else the
    tile's): where its parts and its counter are."""


@contextmanager
def stream_k_segments(
    b: ProgramBuilder,
    *,
    tiles: Any,
    k_tiles: Any,
    work: Any,
    blocks: Any,
    granule: int = 1,
    prefix: Any = 0,
    slots: Any = None,
) -> Iterator[StreamKSegment]:
    """In a program launched on a grid of `prefix` + `blocks` (D + G) blocks along x: a loop
    over the tiles block x's iterations touch, its body (the with statement's) run once per
    segment with the segment's `StreamKSegment`. `tiles`, `k_tiles` and `work` (the shared
    tiles' iterations, ``(tiles - D) k_tiles``) as the program computes them; `granule`
    (dividing `k_tiles`) the run of k-tiles the shares are counted in, so that each segment's
    `first` and `end` are its multiples; `prefix` the tiles computed whole first, one a block
    (`stream_k_prefix`; 0: none), and with one `slots`, the count of the workspace's slots
    (`stream_k_slots`), below which the segments' slots are written clamped."""
    g = b.block_x
    k_tiles, work = k_tiles // granule, work // granule
    hybrid = not (isinstance(prefix, int) and prefix == 0)
    if not hybrid:
        start, stop = g * work // blocks, (g + 1) * work // blocks
    else:
        # Blocks below D own their tile's k_tiles iterations; the others share the rest. (The
        # shared tiles are at least one: the divisors, written at least 1, show it.)
        work, blocks = maximum(work, 1), maximum(blocks, 1)
        start = minimum(g, prefix) * k_tiles + maximum(g - prefix, 0) * work // blocks
        stop = minimum(g + 1, prefix) * k_tiles + maximum(g + 1 - prefix, 0) * work // blocks
    with b.for_range(start // k_tiles, (stop - 1) // k_tiles + 1) as t:
        base, tile = t * k_tiles, minimum(t, tiles - 1)
        if not hybrid:
            shared, first_block = tile, ((base + 1) * blocks - 1) // work
            count = ((base + k_tiles) * blocks - 1) // work - first_block + 1
        else:
            # A tile below D is block t's alone; tile D + s is shared tile s. (t >= 0 needs
            # products of non-negative terms: written clamped, so that its bound shows.)
            tile = minimum(maximum(t, 0), tiles - 1)
            shared = maximum(tile - prefix, 0)
            tail = maximum(t - prefix, 0) * k_tiles
            first_tail = ((tail + 1) * blocks - 1) // work
            first_block = minimum(t, prefix) + first_tail
            # A whole tile (t < D) counts one block: tail is 0 there, and the shared work is at
            # least S tiles' iterations when D > 0, so its first k_tiles end within one share.
            spans = ((tail + k_tiles) * blocks - 1) // work - first_tail
            count = spans + 1
        slot = g - first_block
        if slots is not None:
            slot = minimum(maximum(slot, 0), slots - 1)
        yield StreamKSegment(
            tile=tile,
            first=minimum(maximum(start - base, 0), k_tiles - 1) * granule,
            end=maximum(minimum(stop - base, k_tiles), 1) * granule,
            slot=slot,
            count=count,
            shared=shared,
        )

"""`ir.examples.split_tail`: the split of the last partial wave, evaluated block by block from
the expressions a program is built with (block x a variable) and from ints as the host
computes its launch - every tile's k-tiles owned once, in slot order, by as many blocks as
its count says; the whole tiles one block each, first; the tail's parts filling at most one
wave. The programs' results are checked bit for bit in the interpreter by the prefill
tests."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir.examples.split_tail import (
    split_tail_blocks,
    split_tail_part,
    tail_parts,
    tail_tiles,
)
from ir.program import BLOCK_INDICES
from layout_algebra.symbolic import evaluate

FIELDS = ("tile", "shared", "slot", "count", "first", "end")


def parts_by_block(
    tiles: int, wave: int, split: int, k_tiles: int, granule: int
) -> list[dict[str, int]]:
    """Each block's evaluated `SplitTailPart`, in block order."""
    blocks = int(evaluate(split_tail_blocks(tiles, wave, split), {}))
    block_x = BLOCK_INDICES[0]
    part = split_tail_part(block_x, tiles, wave, split, k_tiles, granule)
    return [
        {field: int(evaluate(getattr(part, field), {block_x.name: g})) for field in FIELDS}
        for g in range(blocks)
    ]


@pytest.mark.parametrize(
    ("tiles", "wave", "split", "rest", "parts", "blocks"),
    [
        (448, 132, 2, 52, 2, 500),  # 8192 x 57344 at 256 rows: 396 whole, 52 in halves
        (7168, 132, 2, 40, 2, 7208),  # the same at 4096 rows: the last 40 in halves
        (96, 132, 2, 96, 1, 96),  # 4096 x 12288 at 256 rows: more than half a wave, whole
        (64, 132, 2, 64, 2, 128),  # 8192 x 8192 at 256 rows: every tile in halves
        (64, 132, 4, 64, 2, 128),  # a wider split: the wave still takes only halves
        (10, 132, 4, 10, 4, 40),  # a small tail: four parts each
        (264, 132, 2, 0, 2, 264),  # whole waves: no tail
    ],
)
def test_the_launch_at_the_benchmark_s_layers(
    tiles: int, wave: int, split: int, rest: int, parts: int, blocks: int
) -> None:
    assert tail_tiles(tiles, wave) == rest
    assert int(evaluate(tail_parts(tiles, wave, split), {})) == parts
    assert int(evaluate(split_tail_blocks(tiles, wave, split), {})) == blocks


def test_a_tail_tile_s_halves_follow_the_whole_tiles() -> None:
    """6 tiles of 4 k-tiles on waves of 4: tiles 0-3 whole, 4 and 5 in two halves each."""
    found = parts_by_block(6, 4, 2, 4, 1)
    assert [(p["tile"], p["slot"], p["count"], p["first"], p["end"]) for p in found] == [
        (0, 0, 1, 0, 4),
        (1, 0, 1, 0, 4),
        (2, 0, 1, 0, 4),
        (3, 0, 1, 0, 4),
        (4, 0, 2, 0, 2),
        (4, 1, 2, 2, 4),
        (5, 0, 2, 0, 2),
        (5, 1, 2, 2, 4),
    ]
    assert [p["shared"] for p in found[4:]] == [0, 0, 1, 1]


@settings(max_examples=150, deadline=None)
@given(
    tiles=st.integers(1, 60),
    wave=st.integers(1, 16),
    split=st.integers(2, 4),
    runs=st.integers(1, 6),
    granule=st.sampled_from([1, 2, 3]),
)
def test_every_tile_is_owned_once_in_slot_order(tiles, wave, split, runs, granule) -> None:
    k_tiles = split * runs * granule  # what the program requires of k
    found = parts_by_block(tiles, wave, split, k_tiles, granule)
    rest = tiles % wave
    parts = min(split, wave // max(rest, 1))
    assert len(found) == tiles - rest + parts * rest
    by_tile: dict[int, list[dict[str, int]]] = {}
    for p in found:
        by_tile.setdefault(p["tile"], []).append(p)
    assert sorted(by_tile) == list(range(tiles))
    for tile, owned in by_tile.items():
        whole = tile < tiles - rest
        # A whole tile is one block's; a tail tile's parts are consecutive blocks in slot
        # order, tiling its k-tiles in runs of the granule.
        assert len(owned) == (1 if whole else parts)
        assert [p["slot"] for p in owned] == list(range(len(owned)))
        assert all(p["count"] == len(owned) for p in owned)
        assert owned[0]["first"] == 0 and owned[-1]["end"] == k_tiles
        for before, after in zip(owned, owned[1:]):
            assert before["end"] == after["first"]
        assert all(p["first"] % granule == 0 < p["end"] - p["first"] for p in owned)
        if not whole and parts > 1:  # where its parts and counter are
            assert all(p["shared"] == tile - (tiles - rest) for p in owned)
    # The tail's blocks fit in one wave (or are its tiles, whole), and whole tiles come first,
    # one block each.
    assert len(found) - (tiles - rest) <= max(wave, rest)
    assert [p["tile"] for p in found[: tiles - rest]] == list(range(tiles - rest))

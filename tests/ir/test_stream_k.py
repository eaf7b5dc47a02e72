"""`ir.examples.stream_k`: the stream-K schedule and its data-parallel + stream-K hybrid,
evaluated block by block from the expressions a program is built with - every tile's k-tiles
owned once, in slot order, by as many blocks as its count says, its slot and shared index in
range. The programs' results are checked bit for bit in the interpreter by the decode and
prefill tests."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import instructions
from ir.builder import ProgramBuilder
from ir.examples.stream_k import (
    stream_k_blocks,
    stream_k_prefix,
    stream_k_segments,
    stream_k_slots,
)
from ir.program import BLOCK_INDICES
from layout_algebra.symbolic import evaluate

FIELDS = ("tile", "first", "end", "slot", "count", "shared")


def schedule(
    tiles: int, stream_k: int, k_tiles: int, granule: int, tail: bool
) -> tuple[int, int, dict[int, list[dict[str, int]]]]:
    """(D, slots, segments): the hybrid's prefix D (0 without `tail`), the workspace's slots,
    and per tile the segments of every block that touches it, in block order, each the
    evaluated `StreamKSegment` fields and the block ("block")."""
    prefix = int(evaluate(stream_k_prefix(tiles, stream_k), {})) if tail else 0
    work = (tiles - prefix) * k_tiles
    blocks = int(evaluate(stream_k_blocks(stream_k, work, granule), {}))
    slots = int(evaluate(stream_k_slots(k_tiles, work, blocks, granule), {}))
    captured = []
    with ProgramBuilder("schedule", 32) as b:
        segments = stream_k_segments(
            b,
            tiles=tiles,
            k_tiles=k_tiles,
            work=work,
            blocks=blocks,
            granule=granule,
            prefix=prefix,
            slots=slots if tail else None,
        )
        with segments as segment:
            captured.append(segment)
            b.sync()
    (loop,) = [i for i in b.program().body if isinstance(i, instructions.ForRange)]
    block_x = BLOCK_INDICES[0].name
    found: dict[int, list[dict[str, int]]] = {}
    for g in range(prefix + blocks):
        env = {block_x: g}
        for t in range(int(evaluate(loop.start, env)), int(evaluate(loop.stop, env))):
            values = {
                f: int(evaluate(getattr(captured[0], f), {**env, loop.var.name: t})) for f in FIELDS
            }
            found.setdefault(values["tile"], []).append({**values, "block": g})
    return prefix, slots, found


@settings(max_examples=150, deadline=None)
@given(
    tiles=st.integers(1, 40),
    stream_k=st.integers(1, 12),
    k_tiles=st.integers(1, 9),
    granule=st.sampled_from([1, 2, 3]),
    tail=st.booleans(),
)
def test_every_tile_is_owned_once_in_slot_order(tiles, stream_k, k_tiles, granule, tail) -> None:
    k_tiles *= granule
    prefix, slots, found = schedule(tiles, stream_k, k_tiles, granule, tail)
    assert sorted(found) == list(range(tiles))
    for tile, parts in found.items():
        # The parts tile k in order, one slot each, as many as the count says.
        assert [p["slot"] for p in parts] == list(range(len(parts)))
        assert parts[0]["first"] == 0 and parts[-1]["end"] == k_tiles
        for before, after in zip(parts, parts[1:]):
            assert before["end"] == after["first"] and before["block"] < after["block"]
        assert all(p["first"] < p["end"] and p["first"] % granule == 0 for p in parts)
        assert {p["count"] for p in parts} == {len(parts)}
        assert len(parts) <= slots
        if tile < prefix:
            # A whole tile, its block's own: block t, nothing shared.
            assert [p["block"] for p in parts] == [tile]
        else:
            assert {p["shared"] for p in parts} == {tile - prefix}
            assert all(p["block"] >= prefix for p in parts)


@pytest.mark.parametrize(
    ("tiles", "stream_k", "prefix"),
    [(448, 132, 264), (1536, 132, 1320), (96, 132, 0), (264, 132, 132), (263, 132, 0), (8, 3, 3)],
)
def test_the_prefix_leaves_one_to_two_waves_shared(tiles: int, stream_k: int, prefix: int) -> None:
    """D = max(T // S - 1, 0) S: 448 tiles on 132 leave 184 (1.4 waves) shared, 1536 leave
    216, fewer than two waves leave all of them."""
    assert int(evaluate(stream_k_prefix(tiles, stream_k), {})) == prefix


def test_the_hybrid_at_8192_x_57344_and_256_rows() -> None:
    """448 tiles of 64 k-tiles (in runs of 2) on 132: blocks 0 .. 263 one whole tile each,
    blocks 264 .. 395 about 1.4 tiles' k-tiles each, every shared tile in at most 2 parts."""
    prefix, slots, found = schedule(448, 132, 64, 2, True)
    assert prefix == 264 and slots == 2
    assert max(p["block"] for parts in found.values() for p in parts) == 395
    shared = [len(found[t]) for t in range(264, 448)]
    # Each of the 131 boundaries between shares that falls inside a tile adds a part.
    inside = sum(1 for g in range(1, 132) if g * (184 * 32) // 132 % 32)
    assert set(shared) == {1, 2} and sum(shared) == 184 + inside

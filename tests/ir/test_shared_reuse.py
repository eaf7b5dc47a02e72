"""`ir.shared_reuse`: a shared tensor that takes the memory of earlier ones - the rule the
verifier holds it to, the footprint it counts, how it prints, and the builder's checks; the
matmul example's staged store and the prefill tile's are the programs that use it (test_examples.py
and test_wgmma_dequant_matmul.py run them)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.batch_matmul import FRAGMENT_TILE
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import VerificationError
from ir.examples.matmul import matmul
from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig, wgmma_dequant_matmul
from ir.printer import format_program
from ir.program import Program
from ir.shared_reuse import check_reuse, shared_footprint
from ir.verifier import verify
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial
from layout_algebra.shared import shared_row_major

F32 = dtypes.f32
LAYOUT = spatial(32, 1).local(1, 32)


def staged(order: str = "use sync alloc use", nested: bool = False, names=None):
    """A 32-thread program with a ring `s0` of 32 x 32 f32 and a tile `s1` of 32 x 64 f32
    that reuses it; `order` lists, in the top-level body, the ring's use ("use": a store and a
    load), a block barrier ("sync"), and the tile's use ("alloc" allocates it, "tile" uses
    it)."""
    with ProgramBuilder("staged", 32) as b:
        ring = b.shared_tensor(F32, shared_row_major(32, 32))
        values = b.register_tensor(F32, LAYOUT, 1.0)
        tile = None
        for step in order.split():
            if step == "use":
                b.store_shared(ring, values)
                b.load_shared(ring, LAYOUT)
            elif step == "sync":
                b.sync()
            elif step == "alloc":
                reuse = [ring] if names is None else names(ring)
                if nested:
                    with b.if_(b.block_x.eq(0)):
                        tile = b.shared_tensor(F32, shared_row_major(32, 64), reuse)
                else:
                    tile = b.shared_tensor(F32, shared_row_major(32, 64), reuse)
            elif step == "tile":
                b.store_shared(tile, values, [0, 0])
    return b.program()


def test_a_tile_after_a_barrier_reuses_the_ring_and_counts_only_what_it_adds():
    program = staged("use sync alloc tile")
    check_reuse(program)
    # 4 KB of ring, 8 KB of tile: the tile adds 4 KB to the ring it reuses.
    assert shared_footprint(program) == 8192
    line = next(line for line in format_program(program).splitlines() if "reuse" in line)
    assert line.strip().endswith("= shared_tensor(reuse=[s0])")


@pytest.mark.parametrize(
    ("order", "message"),
    [
        ("use alloc tile", "no sync of the whole block in the top-level body stands between"),
        ("alloc tile sync use", "no sync of the whole block"),
        ("use sync alloc tile use", "no sync of the whole block"),
    ],
    ids=["no-barrier", "used-after", "used-again"],
)
def test_a_tile_not_separated_by_a_barrier_is_refused(order, message):
    with pytest.raises(VerificationError, match=message):
        verify(staged(order))


@pytest.mark.parametrize("order", ["use alloc", "alloc tile", "alloc"])
def test_a_reuse_with_one_side_unused_needs_no_barrier(order):
    check_reuse(staged(order))


def test_a_tile_allocated_in_a_nested_body_is_refused():
    with pytest.raises(VerificationError, match="allocated inside a loop, if or thread group"):
        verify(staged("use sync alloc", nested=True))


def test_a_reuse_of_itself_or_of_no_tensor_is_refused():
    with pytest.raises(VerificationError, match="shared_tensor reuses a SharedTensor, got 3"):
        staged("use sync alloc", names=lambda ring: [3])
    with pytest.raises(VerificationError, match="must be a sequence of SharedTensors"):
        staged("use sync alloc", names=lambda ring: ring)


def test_the_matmul_staged_store_reuses_the_ring_with_one_tile_a_block():
    options = {"num_threads": 256, "block_m": 128, "block_n": 256, "block_k": 64}
    options |= {"stages": 4, "wgmma": True, "overlap_dot": True, "bulk": True}
    plain = shared_footprint(matmul(tensor_cores=True, **options))
    staged_program = matmul(tensor_cores=True, staged_store=True, **options)
    assert shared_footprint(staged_program) == plain == 4 * (128 + 256) * 64 * 2
    # Persistent blocks keep the ring across tiles: the tile then has memory of its own.
    persistent = matmul(tensor_cores=True, staged_store=True, persistent=8, **options)
    assert shared_footprint(persistent) == plain + 128 * 256 * 2
    with pytest.raises(VerificationError, match="shared memory past the limit"):
        verify(persistent)


PRODUCER, CONSUMER = 32, 0
"""The first threads of the producer and the consumer warp of `producer_consumer`."""


def producer_consumer(
    *regions: tuple[int, str],
) -> Program:
    """A 64-thread program: a producer warp (threads 32-63) bulk-copies a 32 x 32 f32 ring
    `s0` that a consumer warp (threads 0-31) waits for and loads; a tile `s1` of 32 x 32 f32
    reuses the ring. `regions` are thread-group bodies in order, each (its first thread, its
    steps): "copy" (a bulk copy into the ring), "wait" (a wait for it), "load" (a load of the
    ring), "sync" (a barrier of the group), "tile" (a store into the tile). The default is the
    warp-specialised order: the producer copies, the consumer waits, reads the ring, passes
    its own barrier and writes the tile."""
    regions = regions or ((PRODUCER, "copy"), (CONSUMER, "wait load sync tile"))
    with ProgramBuilder("producer_consumer", 64) as b:
        source = b.array_param("a", F32)
        view = b.global_view(source, F32, GlobalLayout((32, 32), (32, 1)))
        ring = b.shared_tensor(F32, shared_row_major(32, 32))
        tile = b.shared_tensor(F32, shared_row_major(32, 32), [ring])
        for start, steps in regions:
            with b.thread_group(start, 32):
                for step in steps.split():
                    if step == "copy":
                        b.copy_bulk(ring, view, [0, 0], [0, 0], shape=(32, 32))
                    elif step == "wait":
                        b.copy_bulk_wait(ring, [0, 0], shape=(32, 32))
                    elif step == "load":
                        b.load_shared(ring, LAYOUT)
                    elif step == "sync":
                        b.sync()
                    elif step == "tile":
                        b.store_shared(tile, b.register_tensor(F32, LAYOUT, 1.0))
    return b.program()


def test_a_barrier_of_the_group_that_alone_uses_the_tile_separates_a_producers_copies():
    program = producer_consumer()
    check_reuse(program)
    assert shared_footprint(program) == 32 * 32 * 4


@pytest.mark.parametrize(
    "regions",
    [
        ((PRODUCER, "copy"), (CONSUMER, "wait load tile")),
        ((PRODUCER, "copy"), (CONSUMER, "wait load tile sync")),
        ((PRODUCER, "copy load"), (CONSUMER, "wait load sync tile")),
        ((PRODUCER, "copy tile"), (CONSUMER, "wait load sync tile")),
        ((PRODUCER, "copy"), (CONSUMER, "wait load"), (PRODUCER, "sync"), (CONSUMER, "tile")),
        ((PRODUCER, "copy"), (CONSUMER, "wait sync tile"), (CONSUMER, "load")),
    ],
    ids=[
        "no-barrier",
        "barrier-after",
        "producer-reads",
        "producer-tile",
        "other-group-barrier",
        "read-after",
    ],
)
def test_a_group_barrier_is_refused_unless_it_separates_all_other_touches(regions):
    with pytest.raises(VerificationError, match="nor a sync of the one thread group"):
        check_reuse(producer_consumer(*regions))


def test_the_prefill_tile_stages_c_in_the_ring_with_one_tile_a_block():
    """The 128 x 256 prefill tile with 128-deep k-tiles: three 64 KiB stages leave no room for
    a 64 KiB staging tile of its own; with one tile a block it takes the ring's memory (a
    barrier of the consumers after the loop), with stream-K it needs its own and is refused."""
    config = WgmmaDequantConfig(**FRAGMENT_TILE, units_k=8, stages=3, depth=2)
    plain = shared_footprint(wgmma_dequant_matmul(dtypes.i4, 128, config))
    staged_config = replace(config, staged_store=True)
    staged_program = wgmma_dequant_matmul(dtypes.i4, 128, staged_config)
    verify(staged_program)
    assert shared_footprint(staged_program) == plain == 3 * 128 * 256 * 2
    split = wgmma_dequant_matmul(dtypes.i4, 128, replace(staged_config, split=2))
    assert shared_footprint(split) == plain
    stream = wgmma_dequant_matmul(dtypes.i4, 128, replace(staged_config, stream_k=132))
    assert shared_footprint(stream) == plain + 256 * 128 * 2
    with pytest.raises(VerificationError, match="shared memory past the limit"):
        verify(stream)


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.sampled_from(["use", "sync", "tile"]), max_size=7))
def test_the_rule_accepts_exactly_the_orders_a_barrier_separates(steps):
    """Against the rule read off the step sequence: the tile is allocated first thing after
    the ring; the program passes when the ring or the tile goes unused, or when a sync stands
    after the ring's last use and before the tile's first."""
    program = staged(" ".join(["alloc", *steps]))
    ring = [i for i, step in enumerate(steps) if step == "use"]
    tile = [i for i, step in enumerate(steps) if step == "tile"]
    separated = not ring or not tile or "sync" in steps[max(ring) + 1 : min(tile)]
    if separated:
        check_reuse(program)
    else:
        with pytest.raises(VerificationError, match="no sync of the whole block"):
            check_reuse(program)

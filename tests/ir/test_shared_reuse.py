"""`ir.shared_reuse`: a shared tensor that takes the memory of earlier ones - the rule the
verifier holds it to, the footprint it counts, how it prints, and the builder's checks; the
matmul example's staged store is the program that uses it (test_examples.py runs it)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import VerificationError
from ir.examples.matmul import matmul
from ir.printer import format_program
from ir.shared_reuse import check_reuse, shared_footprint
from ir.verifier import verify
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

"""`thread_group`: a body run by whole warps of the block alone (a producer warp beside
consumer warps), in the builder, the verifier, the printer, the interpreter and the lowering.

The tables are worked by hand: what a group computes, which accesses the program order makes
safe on the GPU (a block `sync` between groups, the bulk-copy protocol) and which it does not
(a group's own barrier orders its threads only; a group waits for its own `copy_async`s; a
bulk-copied tile is seen by the group that waited for it). The property splits a block at a
random warp into two groups that hand a tile over, with or without the block barrier that
makes it safe, and checks the interpreter against NumPy or its refusal. The lowering is checked
for its text (named barriers, the free barriers' arrival counts, a warpgroup plan only on a
hardware warpgroup) and its refusals; test_lower_emulated.py runs a feature program with
nested groups under the CPU emulation, bit for bit against the interpreter.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import backend
from backend.errors import CompilationError
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import InterpreterError, VerificationError
from ir.instructions import ThreadGroup
from ir.interpreter import run_reference
from ir.printer import format_program
from ir.verifier import verify
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import local, spatial
from layout_algebra.shared import shared_row_major

F32, F16 = dtypes.f32, dtypes.f16


def handoff(
    block: int, producer: tuple[int, int], consumer: tuple[int, int], barrier: str = "block"
):
    """`producer` = (start, threads) stores 2 * x (64 f32) to shared memory, then `barrier`
    ("block": a sync of the block; "producer": a sync inside the producer group; "none"), and
    `consumer` reads it reversed across its threads and stores x' + sum(x')."""
    with ProgramBuilder("handoff", block) as b:
        x = b.global_view(b.array_param("x", F32), F32, GlobalLayout((64,), (1,)))
        y = b.global_view(b.array_param("y", F32), F32, GlobalLayout((64,), (1,)))
        tile = b.shared_tensor(F32, shared_row_major(64))
        with b.thread_group(*producer):
            assert b.threads == producer[1]
            values = b.load_global(x, [0], spatial(producer[1]).local(64 // producer[1]))
            b.store_shared(tile, b.mul(values, 2.0), [0])
            if barrier == "producer":
                b.sync()
        if barrier == "block":
            b.sync()
        with b.thread_group(*consumer):
            count = consumer[1]
            mine = b.load_shared(tile, local(64 // count).spatial(count), [0])
            total = b.reduce(mine, 0, "sum")
            b.store_global(y, b.add(mine, total), [0])
        assert b.threads == block
    return verify(b.program())


def run(program) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(64, dtype=np.float32) - 20.0
    y = np.zeros(64, dtype=np.float32)
    run_reference(program, x, y)
    return x, y


def test_a_tile_handed_over_through_a_block_barrier() -> None:
    x, y = run(handoff(128, (0, 32), (64, 64)))
    np.testing.assert_array_equal(y, 2 * x + np.float32((2 * x).sum()))


def test_nested_groups_count_from_their_enclosing_group() -> None:
    with ProgramBuilder("nested", 128) as b:
        y = b.global_view(b.array_param("y", F32), F32, GlobalLayout((32,), (1,)))
        with b.thread_group(64, 64):
            with b.thread_group(32, 32):  # block threads 96 .. 127
                assert b.threads == 32
                b.store_global(y, b.register_tensor(F32, spatial(32), 5.0), [0])
            assert b.threads == 64
    program = verify(b.program())
    group = program.body[1]
    assert isinstance(group, ThreadGroup) and (group.start, group.threads) == (64, 64)
    inner = group.body[0]
    assert isinstance(inner, ThreadGroup) and (inner.start, inner.threads) == (32, 32)
    y = np.zeros(32, dtype=np.float32)
    run_reference(program, y)
    np.testing.assert_array_equal(y, 5.0)


def test_the_printed_program_shows_the_groups_and_their_bodies() -> None:
    lines = format_program(handoff(96, (0, 32), (32, 64))).splitlines()
    first = lines.index("  thread_group(0, 32):")
    assert lines[first + 1].startswith("    r0: f32[64] spatial(32).local(2) = load_global")
    assert "  sync()" in lines
    assert "  thread_group(32, 64):" in lines
    assert "    r4: f32[] replicate(64) = reduce_sum(r3, dim=0)" in lines


@pytest.mark.parametrize(
    ("barrier", "message"),
    [
        ("none", "read without a sync: thread 0 reads element 0 of s0, written by thread 64"),
        # The producer's own barrier orders its threads, not the consumer's.
        ("producer", "read without a sync: thread 0 reads element 0 of s0, written by thread 64"),
    ],
)
def test_a_handover_without_a_block_barrier_is_refused(barrier: str, message: str) -> None:
    with pytest.raises(InterpreterError, match=message):
        run(handoff(128, (64, 64), (0, 64), barrier))


def test_a_group_barrier_orders_the_group_s_own_threads() -> None:
    """Inside one group of two warps: written one element a thread, read whole by every
    thread after the group's barrier (a named barrier of 64 threads on the GPU); without the
    barrier, refused."""
    for barrier in (True, False):
        with ProgramBuilder("group_sync", 128) as b:
            y = b.global_view(b.array_param("y", F32), F32, GlobalLayout((64,), (1,)))
            tile = b.shared_tensor(F32, shared_row_major(64))
            with b.thread_group(64, 64):
                b.store_shared(tile, b.register_tensor(F32, spatial(64), 3.0), [0])
                if barrier:
                    b.sync()
                whole = b.load_shared(tile, local(64).replicate(64), [0])
                b.store_global(y, whole, [0])
        program = verify(b.program())
        y = np.zeros(64, dtype=np.float32)
        if barrier:
            run_reference(program, y)
            np.testing.assert_array_equal(y, 3.0)
        else:
            with pytest.raises(
                InterpreterError, match="several threads read element 0 of s0, written by thread 64"
            ):
                run_reference(program, y)


def async_handoff(waiter: str):
    """Group (0, 32) copies x into shared memory with copy_async and commits; `waiter` ("own"
    or "other") group waits; then group (32, 32) reads after a block barrier."""
    with ProgramBuilder("async_handoff", 64) as b:
        x = b.global_view(b.array_param("x", F32), F32, GlobalLayout((64,), (1,)))
        y = b.global_view(b.array_param("y", F32), F32, GlobalLayout((64,), (1,)))
        tile = b.shared_tensor(F32, shared_row_major(64))
        with b.thread_group(0, 32):
            b.copy_async(tile, x, [0], layout=spatial(32).local(2))
            b.copy_async_commit()
            if waiter == "own":
                b.copy_async_wait(0)
        with b.thread_group(32, 32):
            if waiter == "other":
                b.copy_async_wait(0)
        b.sync()
        with b.thread_group(32, 32):
            b.store_global(y, b.load_shared(tile, spatial(32).local(2), [0]), [0])
    return verify(b.program())


def test_a_group_waits_for_its_own_async_copies_only() -> None:
    x, y = run(async_handoff("own"))
    np.testing.assert_array_equal(y, x)
    with pytest.raises(InterpreterError, match="read before its copy was waited for"):
        run(async_handoff("other"))


STAGES, TILES, ROWS = 2, 5, 8


def producer_consumer(third_reader: bool = False, skip_release: bool = False):
    """A producer warp bulk-copies the k-th (8, 16) u8 tile of x into a ring of 2 stages, two
    consumer warps wait for it, add it into their sum and release the stage; the producer runs
    one tile ahead (its copy of tile k + 1 in iteration k). With `third_reader`, the producer
    also reads a stage the consumers waited for and have not released; with `skip_release`,
    the consumers never release stage 1."""
    u8 = dtypes.u8
    tile_layout = spatial(ROWS, 8).local(1, 2)
    with ProgramBuilder("producer_consumer", 96) as b:
        x = b.global_view(b.array_param("x", u8), u8, GlobalLayout((ROWS * TILES, 16), (16, 1)))
        y = b.global_view(b.array_param("y", u8), u8, GlobalLayout((ROWS, 16), (16, 1)))
        ring = b.shared_tensor(u8, shared_row_major(STAGES, ROWS, 16))
        with b.thread_group(0, 32):
            b.copy_bulk(ring, x, [0, 0], [0, 0, 0])
        with b.thread_group(32, 64):
            total = b.register_tensor(u8, tile_layout, 0)
        with b.for_range(TILES) as k:
            stage = k % STAGES
            with b.thread_group(0, 32):
                with b.if_(k + 1 < TILES):
                    b.copy_bulk(ring, x, [(k + 1) * ROWS, 0], [(k + 1) % STAGES, 0, 0])
            with b.thread_group(32, 64):
                b.copy_bulk_wait(ring, [stage, 0, 0], shape=(ROWS, 16))
                tile = b.load_shared(ring, tile_layout, [stage, 0, 0])
                b.assign(total, b.add(total, tile))
            if third_reader:
                with b.thread_group(0, 32):
                    b.load_shared(ring, spatial(ROWS, 4).local(1, 4), [stage, 0, 0])
            with b.thread_group(32, 64):
                if skip_release:
                    with b.if_(stage.eq(0)):
                        b.copy_bulk_release(ring, [stage, 0, 0], shape=(ROWS, 16))
                else:
                    b.copy_bulk_release(ring, [stage, 0, 0], shape=(ROWS, 16))
        with b.thread_group(32, 64):
            b.store_global(y, total, [0, 0])
    return b.program()


def test_a_producer_warp_runs_a_tile_ahead_of_its_consumers() -> None:
    x = (np.arange(ROWS * TILES * 16) % 37).astype(np.uint8).reshape(ROWS * TILES, 16)
    y = np.zeros((ROWS, 16), dtype=np.uint8)
    run_reference(producer_consumer(), x, y)
    expected = x.reshape(TILES, ROWS, 16).astype(np.int64).sum(axis=0) % 256
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"third_reader": True},
            "read by thread 0, which did not wait for its bulk copy: element 0 of s0 is seen "
            "by the threads that waited, 32 .. 95",
        ),
        ({"skip_release": True}, "bulk copy into a tile not released since its last bulk copy"),
    ],
)
def test_the_bulk_copy_protocol_between_groups_is_checked(options: dict, message: str) -> None:
    x = np.zeros((ROWS * TILES, 16), dtype=np.uint8)
    with pytest.raises(InterpreterError, match=message):
        run_reference(producer_consumer(**options), x, np.zeros((ROWS, 16), dtype=np.uint8))


# ------------------------------------------------------------------------------ verifier


def _group_program(build) -> None:
    with ProgramBuilder("bad", 128, check=False) as b:
        build(b)
    verify(b.program())


def test_registers_stay_with_the_threads_that_define_them() -> None:
    def outside_in(b: ProgramBuilder) -> None:
        tile = b.register_tensor(F32, spatial(32), 1.0)
        with b.thread_group(0, 32):
            b.add(tile, tile)

    def other_group(b: ProgramBuilder) -> None:
        with b.thread_group(0, 32):
            tile = b.register_tensor(F32, spatial(32), 1.0)
        with b.thread_group(32, 32):
            b.add(tile, tile)

    def inside_out(b: ProgramBuilder) -> None:
        with b.thread_group(0, 32):
            tile = b.register_tensor(F32, spatial(32), 1.0)
        b.add(tile, tile)

    cases = [
        # A layout of the block's 128 threads cannot be a group's, and the other way round.
        (outside_in, "result r0 has a layout of 32 threads, the program has 128"),
        (other_group, "r0 is held by threads 0 .. 31 and used by threads 32 .. 63"),
        (inside_out, "lhs r0 has a layout of 32 threads, the program has 128"),
    ]
    for build, message in cases:
        with pytest.raises(VerificationError, match=message):
            _group_program(build)


@pytest.mark.parametrize("trailing_sync", [False, True])
def test_a_group_s_registers_live_across_its_bodies(trailing_sync: bool) -> None:
    """Defined in one body of a group, used in its later bodies (inside a loop too): in a
    warp-specialised tail (the groups' bodies to the end) and in a kernel written as one path
    (a block `sync` after them)."""
    with ProgramBuilder("carried", 64) as b:
        y = b.global_view(b.array_param("y", F32), F32, GlobalLayout((32,), (1,)))
        with b.thread_group(32, 32):
            total = b.register_tensor(F32, spatial(32), 0.0)
        with b.for_range(3):
            with b.thread_group(32, 32):
                b.assign(total, b.add(total, 2.0))
        with b.thread_group(32, 32):
            b.store_global(y, total, [0])
        if trailing_sync:
            b.sync()
    program = verify(b.program())
    y = np.zeros(32, dtype=np.float32)
    run_reference(program, y)
    np.testing.assert_array_equal(y, 6.0)
    source = backend.compile(program, arch="sm_80").source
    # Declared once, before the first body's block and before the loop, so the later bodies
    # see it: at the kernel's level, or in the branch of the group's warps.
    declaration = source.index("unsigned int r0[1];")
    assert source.count("unsigned int r0[1];") == 1
    assert declaration < source.index("for (")
    specialised = "warp-specialised" in source
    assert specialised is not trailing_sync
    branch = source.index("if ((unsigned)(")
    assert (branch < declaration) is specialised


@pytest.mark.parametrize("trailing_sync", [False, True])
def test_a_group_body_in_an_unrolled_loop_declares_its_registers_in_each_copy(
    trailing_sync: bool,
) -> None:
    """A tensor a group's body defines inside a loop unrolled twice (and its peeled last
    iteration) lives in that copy's C block: each copy declares it again, so NVRTC takes the
    kernel (the second copy once used the first copy's declaration, out of its scope)."""
    with ProgramBuilder("unrolled", 64) as b:
        y = b.global_view(b.array_param("y", F32), F32, GlobalLayout((5, 32), (32, 1)))
        with b.for_range(5, unroll=2) as step:
            with b.thread_group(32, 32):
                value = b.register_tensor(F32, spatial(1, 32), 1.0)
                b.store_global(y, b.add(value, 2.0), [step, 0])
        if trailing_sync:
            b.sync()
    program = verify(b.program())
    y = np.zeros((5, 32), dtype=np.float32)
    run_reference(program, y)
    np.testing.assert_array_equal(y, 3.0)
    source = backend.compile(program, arch="sm_80").source
    assert source.count("unsigned int r0[1];") == 3  # two copies and the peeled iteration


def test_a_group_s_registers_have_its_thread_count() -> None:
    def block_layout(b: ProgramBuilder) -> None:
        with b.thread_group(0, 64):
            b.register_tensor(F32, spatial(128), 1.0)

    with pytest.raises(VerificationError, match="128 threads"):
        _group_program(block_layout)


@pytest.mark.parametrize(
    ("start", "threads", "message"),
    [
        (16, 32, r"start=16; expected a multiple of 32 \(whole warps\)"),
        (0, 48, r"threads=48; expected a multiple of 32"),
        (0, 0, r"threads=0; expected a multiple of 32 \(whole warps\) of at least 32"),
        (96, 64, r"threads 96 .. 159 are not all among the enclosing 128 threads"),
    ],
)
def test_groups_are_whole_warps_inside_the_enclosing_threads(
    start: int, threads: int, message: str
) -> None:
    """The verifier's check of a group built by hand, and the builder's own refusal."""
    with ProgramBuilder("bad", 128) as b:
        pass
    program = dataclasses.replace(b.program(), body=(ThreadGroup(start, threads, ()),))
    with pytest.raises(VerificationError, match=message):
        verify(program)
    with pytest.raises(VerificationError, match="thread_group"):
        with ProgramBuilder("bad", 128) as b:
            with b.thread_group(start, threads):
                pass


def test_bulk_copies_into_a_tensor_from_two_groups_are_refused() -> None:
    def two_producers(b: ProgramBuilder) -> None:
        x = b.global_view(b.array_param("x", F16), F16, GlobalLayout((8, 16), (16, 1)))
        ring = b.shared_tensor(F16, shared_row_major(2, 8, 16))
        with b.thread_group(0, 32):
            b.copy_bulk(ring, x, [0, 0], [0, 0, 0])
        with b.thread_group(32, 32):
            b.copy_bulk(ring, x, [0, 0], [1, 0, 0])

    with pytest.raises(VerificationError, match="the bulk copies of s0 are in two thread groups"):
        _group_program(two_producers)


def test_a_chain_link_stays_at_the_top_level() -> None:
    def grid_wait(b: ProgramBuilder) -> None:
        b.programmatic_launch()
        with b.thread_group(0, 32):
            b.wait_prior_grid()

    with pytest.raises(VerificationError, match="belongs to the program's top level"):
        _group_program(grid_wait)


# -------------------------------------------------------------------------------- property


@settings(max_examples=25, deadline=None)
@given(
    low_warps=st.sampled_from([1, 2]),
    high_warps=st.sampled_from([1, 2]),
    producer_first=st.booleans(),
    barrier=st.sampled_from(["block", "producer", "none"]),
)
def test_a_handover_between_two_groups_of_a_split_block(
    low_warps: int, high_warps: int, producer_first: bool, barrier: str
) -> None:
    """A block split into two groups of whole warps (each dividing the 64 elements): one side
    stores, the other reads; the interpreter agrees with NumPy exactly when a block barrier
    separates them, and refuses the read otherwise."""
    low, high = (0, 32 * low_warps), (32 * low_warps, 32 * high_warps)
    producer, consumer = (low, high) if producer_first else (high, low)
    program = handoff(32 * (low_warps + high_warps), producer, consumer, barrier)
    if barrier == "block":
        x, y = run(program)
        np.testing.assert_array_equal(y, 2 * x + np.float32((2 * x).sum()))
    else:
        with pytest.raises(InterpreterError, match="read without a sync"):
            run(program)


# -------------------------------------------------------------------------------- lowering


def test_a_group_is_lowered_under_a_warp_condition_with_named_barriers() -> None:
    source = backend.compile(handoff(128, (0, 32), (64, 64)), arch="sm_90a").source
    assert "__shfl_sync(la_warp_mask, la_thread / 32, 0)" in source
    assert re.search(r"if \(\(unsigned\)\(la_warp\d+ - 2\) < 2u\)", source)  # warps 2, 3
    # The consumer's reduction across its two warps: its own named barrier and scratch.
    assert "la_group_barrier(1, 64);" in source
    assert "la_scratch_offset_" not in source
    assert source.count("__syncthreads();") == 1  # the block's sync between the groups


def test_the_free_barriers_count_the_releasing_group_s_warps() -> None:
    kernel = backend.compile(producer_consumer(), arch="sm_90a")
    assert "la_mbarrier_init(&la_free_s0[la_i], 2u);" in kernel.source  # two consumer warps
    assert "la_tma_load_2d" in kernel.source


def test_a_bulk_copy_between_groups_needs_tma() -> None:
    with pytest.raises(CompilationError, match="only a copy written as TMA allows"):
        backend.compile(producer_consumer(), arch="sm_80")


def ticket_program(use_after: bool = False):
    """Two groups each take a ticket (adding 5) on their own counter and store their number
    plus one where it is the expected old value (7, then 9); with `use_after`, the block reads
    the first group's ticket after that group's body."""
    with ProgramBuilder("ticket", 64, check=False) as b:
        counters = b.global_view(
            b.array_param("c", dtypes.i32), dtypes.i32, GlobalLayout((2,), (1,))
        )
        y = b.global_view(b.array_param("y", dtypes.i32), dtypes.i32, GlobalLayout((64,), (1,)))
        tickets = []
        for group in range(2):
            with b.thread_group(32 * group, 32):
                ticket = b.atomic_add(counters, [group], 5)
                tickets.append(ticket)
                with b.if_(ticket.eq(7 + 2 * group)):
                    b.store_global(
                        y, b.register_tensor(dtypes.i32, spatial(32), group + 1), [32 * group]
                    )
        if use_after:
            with b.if_(tickets[0].eq(7)):
                b.store_global(y, b.register_tensor(dtypes.i32, spatial(64), 3), [0])
    return b.program()


def test_atomic_add_inside_a_group_is_the_group_s() -> None:
    """Once for the group, under its own barrier and through its own slot (two groups take
    tickets at the same time); the old value is the group's."""
    program = verify(ticket_program())
    counters = np.array([7, 9], dtype=np.int32)
    y = np.zeros(64, dtype=np.int32)
    run_reference(program, counters, y)
    np.testing.assert_array_equal(counters, [12, 14])
    np.testing.assert_array_equal(y, np.repeat([1, 2], 32))
    body = backend.compile(program, arch="sm_80").source.split('extern "C"')[1]
    assert body.count("la_ticket_add(&") == 2
    assert "__syncthreads" not in body
    assert body.count("la_group_barrier(1, 32);") == 2
    assert body.count("la_group_barrier(2, 32);") == 2
    slots = set(re.findall(r"\*\(int\*\)\(la_smem \+ (\d+)\) = ", body))
    assert len(slots) == 2  # one slot per group


def test_a_group_s_ticket_is_read_in_its_body_only() -> None:
    with pytest.raises(VerificationError, match="reads"):
        verify(ticket_program(use_after=True))

"""`copy_bulk`, `copy_bulk_wait` and `copy_bulk_release`: the interpreter's semantics and
refusals, the verifier and the builder.

A bulk copy is the block's, not a thread's: its tile is visible to every thread after the wait
on it, with no sync, and a tile may not be copied into again after a wait until a sync, or, in
a shared tensor the program releases, until a release of the tile (and then only that). The
tables are worked by hand; the property runs random sequences of copies, waits, releases,
syncs and loads against a model of those rules written with Python sets, and the matmul
example with bulk copies is compared with NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import InterpreterError, VerificationError
from ir.examples.matmul import matmul
from ir.interpreter import run_reference
from ir.printer import format_program
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import local, spatial
from layout_algebra.shared import shared_row_major, shared_row_major_swizzle

U8 = dtypes.u8
ROWS, COLUMNS, STAGES = 4, 16, 2
# Thread t of 4 holds row t of a stage; thread t of the other layout holds row 3 - t.
OWN_ROW = spatial(ROWS, 1).local(1, COLUMNS)
OTHER_ROW = spatial(ROWS, 1).local(1, COLUMNS).permute(0, 1)


def bulk_program(steps, m: int = 2 * ROWS):
    """Four threads; a u8 (m, 16) global `x` copied by stages of 4 rows into a (2, 4, 16)
    shared ring; each step is ("copy", stage, row0), ("wait", stage), ("sync",),
    ("load", stage, out_row0) (stage -> out at out_row0), ("async", stage) (a copy_async of
    rows 0..3 into the stage, committed and waited for), ("release", stage) or
    ("store", stage)."""
    with ProgramBuilder("bulk_steps", ROWS) as b:
        x = b.global_view(b.array_param("x", U8), U8, GlobalLayout((m, COLUMNS), (COLUMNS, 1)))
        out = b.global_view(
            b.array_param("out", U8), U8, GlobalLayout((4 * ROWS, COLUMNS), (COLUMNS, 1))
        )
        ring = b.shared_tensor(U8, shared_row_major(STAGES, ROWS, COLUMNS))
        for step in steps:
            kind = step[0]
            if kind == "copy":
                b.copy_bulk(ring, x, [step[2], 0], [step[1], 0, 0])
            elif kind == "wait":
                b.copy_bulk_wait(ring, [step[1], 0, 0], shape=(ROWS, COLUMNS))
            elif kind == "sync":
                b.sync()
            elif kind == "release":
                b.copy_bulk_release(ring, [step[1], 0, 0], shape=(ROWS, COLUMNS))
            elif kind == "load":
                tile = b.load_shared(ring, OWN_ROW, [step[1], 0, 0])
                b.store_global(out, tile, [step[2], 0])
            elif kind == "async":
                b.copy_async(ring, x, [0, 0], [step[1], 0, 0])
                b.copy_async_commit()
                b.copy_async_wait(0)
            else:
                b.store_shared(ring, b.register_tensor(U8, OWN_ROW, 9), [step[1], 0, 0])
    return b.program()


def run_steps(steps, m: int = 2 * ROWS):
    x = (np.arange(m * COLUMNS) % 251 + 1).astype(np.uint8).reshape(m, COLUMNS)
    out = np.zeros((4 * ROWS, COLUMNS), dtype=np.uint8)
    run_reference(bulk_program(steps, m), x, out)
    return x, out


def test_a_waited_copy_is_read_by_every_thread_without_a_sync() -> None:
    x, out = run_steps(
        [("copy", 0, 0), ("copy", 1, 4), ("wait", 1), ("wait", 0)]
        + [
            ("load", 0, 0),
            ("load", 1, 4),
        ]
    )
    np.testing.assert_array_equal(out[:8], x[:8])


def test_rows_outside_the_source_arrive_as_zeros() -> None:
    x, out = run_steps([("copy", 0, 3), ("wait", 0), ("load", 0, 0)], m=5)
    np.testing.assert_array_equal(out[:2], x[3:5])
    np.testing.assert_array_equal(out[2:4], 0)


def test_the_ring_reused_after_a_sync() -> None:
    steps = [("copy", 0, 0), ("wait", 0), ("load", 0, 0), ("sync",)]
    steps += [("copy", 0, 4), ("wait", 0), ("load", 0, 4)]
    x, out = run_steps(steps)
    np.testing.assert_array_equal(out[:8], x[:8])


def test_the_ring_reused_after_a_release() -> None:
    steps = [("copy", 0, 0), ("copy", 1, 4), ("wait", 0), ("load", 0, 0), ("release", 0)]
    steps += [("copy", 0, 4), ("wait", 1), ("load", 1, 4), ("release", 1), ("copy", 1, 0)]
    steps += [("wait", 0), ("load", 0, 8), ("wait", 1), ("load", 1, 12)]
    x, out = run_steps(steps)
    np.testing.assert_array_equal(out[:8], x[:8])
    np.testing.assert_array_equal(out[8:12], x[4:8])
    np.testing.assert_array_equal(out[12:16], x[:4])


REFUSALS = [
    # (steps, message)
    ([("copy", 0, 0), ("load", 0, 0)], "read while a bulk copy into it is in flight"),
    ([("copy", 0, 0), ("sync",), ("load", 0, 0)], "read while a bulk copy into it is in flight"),
    ([("copy", 0, 0), ("async", 1), ("load", 0, 0)], "read while a bulk copy"),
    ([("wait", 0)], "copy_bulk_wait on a tile with no bulk copy in flight"),
    ([("copy", 0, 0), ("wait", 0), ("wait", 0)], "no bulk copy in flight"),
    ([("copy", 0, 0), ("wait", 0), ("copy", 0, 4)], "waited for since the last sync"),
    ([("copy", 0, 0), ("copy", 0, 4)], "written while a bulk copy into it is in flight"),
    ([("copy", 0, 0), ("store", 0)], "written while a bulk copy into it is in flight"),
    ([("copy", 1, 0), ("async", 1)], "written while a bulk copy into it is in flight"),
    # Another thread read the stage since the last sync: the copy may not overwrite it.
    (
        [("copy", 0, 0), ("wait", 0), ("load", 0, 0), ("sync",), ("store", 0), ("copy", 0, 4)],
        "overwritten without a sync",
    ),
    # A tensor with releases: a sync does not stand in for a release.
    (
        [("copy", 0, 0), ("wait", 0), ("sync",), ("copy", 0, 4), ("wait", 0), ("release", 0)],
        "not released since its last bulk copy",
    ),
    ([("release", 0)], "release of a tile not bulk-copied into since its last release"),
    ([("copy", 0, 0), ("release", 0)], "released while a bulk copy into it is in flight"),
    (
        [("copy", 0, 0), ("wait", 0), ("release", 0), ("release", 0)],
        "not bulk-copied into since its last release",
    ),
    ([("copy", 0, 0), ("wait", 0), ("release", 0), ("load", 0, 0)], "read after its release"),
    ([("copy", 1, 0), ("wait", 1), ("release", 1), ("store", 1)], "written after its release"),
    # A release ends reads, not a thread's stores: the copy still needs a sync after those.
    (
        [("copy", 0, 0), ("wait", 0), ("sync",), ("store", 0), ("release", 0), ("copy", 0, 4)],
        "overwritten without a sync",
    ),
]


@pytest.mark.parametrize(("steps", "message"), REFUSALS, ids=[str(i) for i in range(len(REFUSALS))])
def test_hazards_are_refused(steps, message: str) -> None:
    with pytest.raises(InterpreterError, match=message):
        run_steps(steps)


def model(steps) -> str | None:
    """The first rule a step sequence breaks ("in flight", "no copy", "waited", "sync",
    "unreleased", "no release", "released"), or None: per stage, whether a copy is in flight,
    waited for since the last sync, read or written by the threads since the last sync, and,
    where the sequence has a release, whether it was ever copied into and is released."""
    flight, waited, loaded, written = set(), set(), set(), set()
    releases = any(step[0] == "release" for step in steps)
    copied, released = set(), set()
    for step in steps:
        kind, stage = step[0], step[1] if len(step) > 1 else None
        if kind == "copy":
            if stage in flight:
                return "in flight"
            if releases and stage in copied - released:
                return "unreleased"
            if stage in waited:
                return "waited"
            if stage in loaded | written:
                return "sync"
            flight.add(stage)
            copied.add(stage)
            released.discard(stage)
        elif kind == "wait":
            if stage not in flight:
                return "no copy"
            flight.discard(stage)
            waited.add(stage)
        elif kind == "release":
            if stage in flight:
                return "in flight"
            if stage not in copied - released:
                return "no release"
            released.add(stage)
            loaded.discard(stage)
            waited.discard(stage)
        elif kind == "sync":
            waited, loaded, written = set(), set(), set()
        elif kind == "load":
            if stage in flight:
                return "in flight"
            if stage in released:
                return "released"
            loaded.add(stage)  # each thread its own row: OWN_ROW stores and loads the same rows
        else:  # a store of each thread's own row
            if stage in flight:
                return "in flight"
            if stage in released:
                return "released"
            written.add(stage)
    return None


MESSAGES = {
    "in flight": "while a bulk copy into it is in flight",
    "no copy": "no bulk copy in flight",
    "waited": "waited for since the last sync",
    "sync": "without a sync",
    "unreleased": "not released since its last bulk copy",
    "no release": "not bulk-copied into since its last release",
    "released": "after its release",
}

STEPS = st.one_of(
    st.tuples(st.just("copy"), st.integers(0, 1), st.sampled_from([0, 4])),
    st.tuples(st.just("wait"), st.integers(0, 1)),
    st.tuples(st.just("sync")),
    st.tuples(st.just("release"), st.integers(0, 1)),
    st.tuples(st.just("load"), st.integers(0, 1), st.sampled_from([0, 4])),
    st.tuples(st.just("store"), st.integers(0, 1)),
)


@settings(max_examples=120, deadline=None)
@given(steps=st.lists(STEPS, max_size=10))
def test_random_step_sequences_follow_the_model(steps) -> None:
    broken = model(steps)
    if broken is None:
        run_steps(steps)
    else:
        with pytest.raises(InterpreterError, match=MESSAGES[broken]):
            run_steps(steps)


def test_copy_bulk_prints_and_verifies() -> None:
    text = format_program(bulk_program([("copy", 1, 4), ("wait", 1)]))
    assert "copy_bulk(s0, g0, src=[4, 0], dst=[1, 0, 0], shape=(4, 16))" in text
    assert "copy_bulk_wait(s0, [1, 0, 0], shape=(4, 16))" in text
    text = format_program(bulk_program([("copy", 1, 4), ("wait", 1), ("release", 1)]))
    assert "copy_bulk_release(s0, [1, 0, 0], shape=(4, 16))" in text


def test_refusals_of_the_builder_and_verifier() -> None:
    with ProgramBuilder("bad", 32) as b:
        x = b.global_view(b.array_param("x", U8), U8, GlobalLayout((8, 16), (16, 1)))
        h = b.global_view(b.array_param("h", dtypes.f16), dtypes.f16, GlobalLayout((8,), (1,)))
        ring = b.shared_tensor(U8, shared_row_major(2, 4, 16))
        with pytest.raises(VerificationError, match="no copy_bulk into s0 before it"):
            b.copy_bulk_wait(ring, [0, 0, 0])
        with pytest.raises(VerificationError, match="copies a GlobalTensor into a SharedTensor"):
            b.copy_bulk(x, ring, [0, 0])  # type: ignore[arg-type]
        with pytest.raises(VerificationError, match="dtype"):
            b.copy_bulk(ring, h, [0])
        with pytest.raises(VerificationError, match="overruns shared tensor"):
            b.copy_bulk(ring, x, [0, 0], [0, 2, 0], shape=(4, 16))
        with pytest.raises(VerificationError, match="rank mismatch"):
            b.copy_bulk(ring, x, [0, 0], [0, 0, 0], shape=(16,))
        with pytest.raises(VerificationError, match="tile shape"):
            b.copy_bulk_wait(ring, [0, 0, 0], shape=(0, 16))


@pytest.mark.parametrize(
    "options",
    [
        {"wgmma": True, "num_threads": 256, "block_m": 128, "block_n": 128, "block_k": 64},
        {
            "wgmma": True,
            "num_threads": 256,
            "block_m": 128,
            "block_n": 256,
            "block_k": 64,
            "overlap_dot": True,
        },
        {"tensor_cores": True, "swizzle": True, "block_k": 32, "stages": 3},
        {"stages": 2},
    ],
    ids=["wgmma", "wgmma-in-flight-256", "mma", "simt"],
)
def test_matmul_with_bulk_copies_equals_numpy(options) -> None:
    options = {"stages": 4, **options}
    program = matmul(**options, bulk=True)
    block_m, block_n = options.get("block_m", 64), options.get("block_n", 64)
    m, n, k = 70, 2 * block_n, 200
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    c = np.zeros((m, n), dtype=np.float16)
    run_reference(program, m, n, k, a, b, c, grid=(n // block_n, -(-m // block_m)))
    expected = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(c.astype(np.float32), expected, atol=2e-2, rtol=2e-2)


def test_matmul_bulk_must_be_a_bool() -> None:
    with pytest.raises(VerificationError, match="bulk=1; expected True or False"):
        matmul(bulk=1)  # type: ignore[arg-type]


def test_a_swizzled_ring_round_trips_through_bulk_copies() -> None:
    """Stages of a 128-byte swizzled f16 ring, each read back by another thread's layout."""
    with ProgramBuilder("swizzled", 128) as b:
        m = b.int_param("m")
        x = b.global_view(
            b.array_param("x", dtypes.f16), dtypes.f16, GlobalLayout((m, 64), (64, 1))
        )
        y = b.global_view(
            b.array_param("y", dtypes.f16), dtypes.f16, GlobalLayout((m, 64), (64, 1))
        )
        ring = b.shared_tensor(dtypes.f16, shared_row_major_swizzle(3, 32, 64, element_bits=16))
        for stage in range(3):
            b.copy_bulk(ring, x, [32 * stage, 0], [stage, 0, 0])
        for stage in (2, 0, 1):
            b.copy_bulk_wait(ring, [stage, 0, 0])
            tile = b.load_shared(ring, local(1, 16).spatial(32, 4), [stage, 0, 0])
            b.store_global(y, tile, [32 * stage, 0])
        program = b.program()
    rows = 80
    x = np.random.default_rng(3).standard_normal((rows, 64)).astype(np.float16)
    y = np.zeros((rows, 64), dtype=np.float16)
    run_reference(program, rows, x, y)
    np.testing.assert_array_equal(y.view(np.uint16), x.view(np.uint16))

"""Barrier hazards through a shared layout that maps several coordinates to one element.

`BROADCAST_ROWS` (shape (2, 4), strides (0, 1)) maps (r, c) to element c: a tile that covers
both rows touches each element twice, through two tile positions, and the interpreter must
find per element which threads touched it (one thread twice, or two threads). The tables
below are worked by hand; the property checks every short sequence of accesses against a
brute-force model of the module docstring's rules, written here with Python sets.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import InterpreterError
from ir.interpreter import run_reference
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import local, spatial
from layout_algebra.shared import shared_row_major, shared_strides

U8 = dtypes.u8
BROADCAST_ROWS = shared_strides((2, 4), (0, 1))

# Tiles of the two threads, and the elements of BROADCAST_ROWS each thread touches at origin 0.
COLUMNS = local(2, 1).spatial(1, 2)  # thread t holds (0, t), (1, t): element t, twice
ROWS = spatial(2, 1).local(1, 2)  # thread t holds (t, 0), (t, 1): elements 0, 1
ROW = spatial(2)  # thread t holds (t,), i.e. (0, t): element t
COLUMN = spatial(2, 1)  # thread t holds (t, 0): element 0, both threads
REPLICATED = local(1, 2).replicate(2)  # both threads hold (0, 0), (0, 1): several threads

LAYOUTS = {"COLUMNS": COLUMNS, "ROWS": ROWS, "ROW": ROW, "COLUMN": COLUMN, "REPLICATED": REPLICATED}


def hazard_program(steps, shared_layout=BROADCAST_ROWS):
    """Two threads, one u8 shared tensor s0; each step is ("sync",), ("store", layout, column)
    storing the constant 7, or ("load", layout, column) copying the tile to out at (0, 0)."""
    with ProgramBuilder("hazards", 2) as b:
        out = b.global_view(b.array_param("out", U8), U8, GlobalLayout((2, 2), (2, 1)))
        shared = b.shared_tensor(U8, shared_layout)
        for step in steps:
            if step[0] == "sync":
                b.sync()
            elif step[0] == "store":
                _, layout, column = step
                b.store_shared(shared, b.register_tensor(U8, layout, 7), [0, column])
            else:
                _, layout, column = step
                b.store_global(out, b.load_shared(shared, layout, [0, column]), [0, 0])
    return b.program()


def run_hazards(steps, shared_layout=BROADCAST_ROWS):
    out = np.zeros(4, dtype=np.uint8)
    run_reference(hazard_program(steps, shared_layout), out)
    return out.reshape(2, 2)


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        # each thread wrote its element through two positions and reads it back itself
        ([("store", COLUMNS, 0), ("load", ROW, 0)], [[7, 7], [0, 0]]),
        # both threads wrote elements 0 and 1; after a sync anyone may read them
        ([("store", ROWS, 0), ("sync",), ("load", COLUMN, 0)], [[7, 0], [7, 0]]),
        # elements 2 and 3 lie outside the tile stored at column 0: still untouched, no hazard
        ([("store", COLUMNS, 0), ("load", ROW, 2)], [[0, 0], [0, 0]]),
        ([("store", ROWS, 0), ("load", ROW, 2)], [[0, 0], [0, 0]]),
        # each thread read its element twice, then overwrites it itself
        ([("load", COLUMNS, 0), ("store", ROW, 0)], [[0, 0], [0, 0]]),
    ],
)
def test_hazard_free_accesses_through_a_broadcast_layout(steps, expected):
    np.testing.assert_array_equal(run_hazards(steps), expected)


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        # element 0 written by thread 0 alone (twice), read by thread 1 (and thread 0)
        (
            [("store", COLUMNS, 0), ("load", COLUMN, 0)],
            "read without a sync: thread 1 reads element 0 of s0, written by thread 0 since",
        ),
        # element 0 written by threads 0 and 1 in one store: even thread 0 may not read it
        (
            [("store", ROWS, 0), ("load", ROW, 0)],
            "read without a sync: thread 0 reads element 0 of s0, written by several threads",
        ),
        # element 1 written by thread 1 alone; the tile at column 1 gives it to thread 0
        (
            [("store", COLUMNS, 0), ("load", ROW, 1)],
            "read without a sync: thread 0 reads element 1 of s0, written by thread 1 since",
        ),
        # element 0 read by threads 0 and 1 in one load, then overwritten by thread 0
        (
            [("load", COLUMN, 0), ("store", ROW, 0)],
            "overwritten without a sync: thread 0 writes element 0 of s0, read by several",
        ),
        # element 1 read by thread 1 alone (twice), then overwritten by thread 0
        (
            [("load", COLUMNS, 0), ("store", ROW, 1)],
            "overwritten without a sync: thread 0 writes element 1 of s0, read by thread 1",
        ),
    ],
)
def test_hazards_through_a_broadcast_layout(steps, message):
    with pytest.raises(InterpreterError, match=message):
        run_hazards(steps)


# ------------------------------------------------------------------------ brute-force model

SEVERAL = "several"


def _text(threads, one="", several=""):
    """The interpreter's wording for a set of threads (with the verb in agreement)."""
    if len(threads) == 1 and SEVERAL not in threads:
        return f"thread {next(iter(threads))} {one}".rstrip()
    return f"several threads {several}".rstrip()


def model_error(steps, shared_layout):
    """The first hazard of `steps` by the module docstring's rules, or None.

    Per element: the threads that wrote it and that read it since the last sync (a replicated
    tile counts as several threads). A thread may read an element only if nobody, or itself
    alone, wrote it; it may write an element only if nobody, or itself alone, read it.
    """
    writers = {e: set() for e in range(shared_layout.size)}
    readers = {e: set() for e in range(shared_layout.size)}
    for step in steps:
        if step[0] == "sync":
            for seen in (*writers.values(), *readers.values()):
                seen.clear()
            continue
        kind, layout, column = step
        touches = []
        for t in range(layout.num_threads):
            for i in range(layout.local_size):
                coord = layout.map(t, i)
                row, col = (0, *coord)[-2:]
                element = shared_layout.offset((row, col + column))
                touches.append((element, SEVERAL if layout.replication > 1 else t))
        before, after = (writers, readers) if kind == "load" else (readers, writers)
        for element, who in touches:
            seen = before[element]
            if seen and (seen != {who} or who == SEVERAL):
                if kind == "load":
                    return (
                        "shared memory read without a sync: "
                        f"{_text({who}, 'reads', 'read')} element {element} of s0, written by "
                        f"{_text(seen)} since the last sync"
                    )
                return (
                    "shared memory overwritten without a sync: "
                    f"{_text({who}, 'writes', 'write')} element {element} of s0, read by "
                    f"{_text(seen)} since the last sync"
                )
        for element, who in touches:
            after[element].add(who)
    return None


@st.composite
def access_step(draw):
    """("sync",) one time in six, else a load or store of a tile that fits at its column."""
    if draw(st.integers(0, 5)) == 0:
        return ("sync",)
    layout = LAYOUTS[draw(st.sampled_from(sorted(LAYOUTS)))]
    column = draw(st.integers(0, 4 - layout.shape[-1]))
    return (draw(st.sampled_from(["load", "store"])), layout, column)


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(access_step(), min_size=2, max_size=6),
    shared_layout=st.sampled_from([BROADCAST_ROWS, shared_row_major(2, 4)]),
)
def test_hazards_match_a_brute_force_model(steps, shared_layout):
    expected = model_error(steps, shared_layout)
    program = hazard_program(steps, shared_layout)
    if expected is None:
        run_reference(program, np.zeros(4, dtype=np.uint8))
    else:
        with pytest.raises(InterpreterError, match=f"^block \\(0, 0, 0\\): {expected}\n"):
            run_reference(program, np.zeros(4, dtype=np.uint8))

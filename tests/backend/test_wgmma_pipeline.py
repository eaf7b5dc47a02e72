"""A loop's wgmma dot kept in flight (`backend.wgmma_pipeline`): the periods of tile origins,
the instances in flight at a write (against a brute-force happens-before model), the tiles'
disjointness, which loops qualify, and the code the lowering writes for them."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.lower.driver import lower, unrolled_copy
from backend.wgmma import PROXY_FENCE, operand_uses, plan_wgmma, shared_operand_dots
from backend.wgmma_pipeline import (
    dot_chains,
    in_flight_copies,
    in_flight_dot,
    in_flight_offsets,
    period,
    released_in_flight,
    tiles_disjoint,
)
from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.examples.matmul import matmul, wgmma_b_buffer, wgmma_dot_layouts
from ir.examples.quantized_matmul import quantized_matmul
from ir.instructions import ForRange
from ir.program import Program
from layout_algebra import GlobalLayout, shared_row_major_swizzle
from layout_algebra.symbolic import const, evaluate, var

K = var("kt", 0, None)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (K % 4, 4),
        ((K + 2) % 4, 4),
        ((2 * K) % 4, 2),
        ((3 * K + 1) % 4, 4),
        (((K % 3) + 1) % 3, 3),
        ((K % 4) * 8192 + 3, 4),
        (K % 2 + K % 3, 6),
        (var("x", 0, 5) + 7, 1),
        (K, None),
        (K // 2, None),
        (K % 4 + K, None),
    ],
    ids=str,
)
def test_period_table(expr, expected):
    assert period(expr, "kt") == expected


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(-5, 5),
    st.integers(1, 8),
    st.integers(0, 3),
    st.integers(1, 5),
)
def test_period_holds_by_brute_force(scale, shift, modulus, outer, second):
    """Whatever period is found, the expression repeats with it at every point checked."""
    expr = ((scale * K + shift) % modulus) * outer + (K + 1) % second
    found = period(expr, "kt")
    assert found is not None
    for value in range(-20, 40):
        assert evaluate(expr, {"kt": value}) == evaluate(expr, {"kt": value + found})


def _brute_force_offsets(length: int, dot: int, barriers: tuple[int, ...], write: int) -> set[int]:
    """Iterations back whose dot instance some warpgroup may still run when a thread of
    another (or the same) warpgroup writes at `write` of iteration 10: a dot of iteration i is
    retired by its warpgroup's ``wait_group 1`` right after the dot of i + 1, and an event
    happens before another when the same warpgroup reaches it first, or a barrier instance lies
    between them. Enumerated instance by instance."""

    def before(first: tuple[int, int], second: tuple[int, int]) -> bool:
        return first < second

    found = set()
    now = (10, write)
    for issued in range(0, 11):
        issue = (issued, dot)
        retire = (issued + 1, dot)
        for same_group in (True, False):
            if same_group:
                running = before(issue, now) and not before(retire, now)
            else:
                barrier_after = lambda event: any(  # noqa: E731
                    before(event, (c, z)) and before((c, z), now)
                    for c in range(0, 11)
                    for z in barriers
                )
                # Issued before the write (else a barrier orders the write first, or the same
                # iteration's dot may come after it: both count only when issue precedes it).
                running = before(issue, now) and not barrier_after(retire)
            if running:
                found.add(10 - issued)
    return found


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_in_flight_offsets_match_the_happens_before_model(data):
    length = data.draw(st.integers(2, 7))
    dot = data.draw(st.integers(0, length - 1))
    others = [p for p in range(length) if p != dot]
    barriers = tuple(sorted(data.draw(st.sets(st.sampled_from(others), min_size=1))))
    write = data.draw(st.sampled_from([p for p in others if p not in barriers] or [dot]))
    if write in barriers or write == dot:
        return
    expected = _brute_force_offsets(length, dot, barriers, write)
    positions = tuple((b,) for b in barriers)
    assert set(in_flight_offsets((dot,), (write,), positions)) == expected


def _brute_force_released(length: int, dot: int, release: int) -> set[int]:
    """Iterations back whose dot instance may still run when the tile a release at `release`
    of iteration 10 frees is free: every warp of every warpgroup arrives there, each after
    its own warpgroup retired the dot of i at the dot of i + 1 (``wait_group 1``); the tile
    is free after the last arrival, so an instance runs then when some warpgroup issued it
    before its arrival and retires it after."""
    now = (10, release)
    return {10 - issued for issued in range(0, 11) if (issued, dot) < now < (issued + 1, dot)}


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 7).flatmap(lambda n: st.tuples(st.just(n), st.permutations(range(n)))))
def test_released_in_flight_matches_the_happens_before_model(drawn):
    length, order = drawn
    dot, release = order[0], order[1]
    expected = _brute_force_released(length, dot, release)
    assert set(released_in_flight((dot,), (release,))) == expected
    assert released_in_flight((2, 0), (2, 1)) == [0]  # nested: after the dot
    assert released_in_flight((2, 1), (2, 0, 3)) == [1]


def test_in_flight_offsets_order_nested_positions():
    """A write after the dot in the same inner body comes after it (this iteration's dot may
    still run); a barrier of the body orders everything before and after it."""
    assert in_flight_offsets((2, 0), (2, 1), [(1,)]) == [0, 1]
    assert in_flight_offsets((2, 1), (2, 0), [(1,)]) == [1]
    assert in_flight_offsets((2, 0), (4, 3, 0), [(3,)]) == [0]


def test_tiles_disjoint_on_a_ring():
    stage_read = [(K % 4, 1), (const(0), 64)]
    written = [((K + 2) % 4, 1), (const(0), 64)]
    assert tiles_disjoint(written, stage_read, "kt", 0)
    assert tiles_disjoint(written, stage_read, "kt", 1)
    assert not tiles_disjoint(written, stage_read, "kt", 2)
    # A dimension that depends on another variable cannot separate the tiles.
    moving = [(K % 4 + var("b", 0, 3), 1)]
    assert not tiles_disjoint(moving, [(K % 4, 1)], "kt", 1)


@pytest.mark.parametrize(
    ("write", "read", "back", "trips", "expected"),
    [
        (K, K, 1, None, False),  # no period, no range: unusable
        (K, K, 1, range(4), True),  # k % 4 simplified to k in a loop of 4: every value apart
        (3 - K, K, 1, range(4), False),  # k = 2 writes the tile k = 1 read
        (3 - K, K, 1, range(2), True),  # ... which a loop of two never reaches
        (K % 3, K % 3, 3, range(9), False),  # periodic dimensions keep their meaning
    ],
    ids=str,
)
def test_tiles_disjoint_over_a_known_range(write, read, back, trips, expected):
    assert tiles_disjoint([(write, 1)], [(read, 1)], "kt", back, trips) is expected


def _loops(program: Program) -> list[ForRange]:
    return [i for i in program.walk() if isinstance(i, ForRange)]


def _ring_program(
    stages: int, ahead: int, barrier: bool = True, unroll: int = 1, inside: bool = False
) -> Program:
    """A one-warpgroup k loop over a ring: wait, sync, the dot of stage kt % S, then the copies
    of k-tile kt + `ahead` into its stage (`inside`: in a one-trip loop with the dot)."""
    f16, f32 = dtypes.f16, dtypes.f32
    a_layout, b_layout, c_layout = wgmma_dot_layouts(128, 64, 64, 64)
    with ProgramBuilder("ring", 128) as bld:
        k = bld.int_param("k", multiple_of=8)
        a, b, c = (bld.array_param(name, f16) for name in ("a", "b", "c"))
        a_view = bld.global_view(a, f16, GlobalLayout((64, k), (k, 1)))
        b_view = bld.global_view(b, f16, GlobalLayout((k, 64), (64, 1)))
        c_view = bld.global_view(c, f16, GlobalLayout((64, 64), (64, 1)))
        a_ring = bld.shared_tensor(f16, shared_row_major_swizzle(stages, 64, 64, element_bits=16))
        b_ring = bld.shared_tensor(f16, wgmma_b_buffer(64, 64, stages))
        acc = bld.register_tensor(f32, c_layout, 0.0)
        tiles = (k + 63) // 64
        for first in range(ahead):
            with bld.if_(first < tiles):
                bld.copy_async(a_ring, a_view, [0, first * 64], [first % stages, 0, 0])
                bld.copy_async(b_ring, b_view, [first * 64, 0], [first % stages, 0, 0])
            bld.copy_async_commit()
        with bld.for_range(tiles, unroll=unroll) as kt:
            bld.copy_async_wait(ahead - 1)
            if barrier:
                bld.sync()

            def copies() -> None:
                with bld.if_(kt + ahead < tiles):
                    stage = (kt + ahead) % stages
                    bld.copy_async(a_ring, a_view, [0, (kt + ahead) * 64], [stage, 0, 0])
                    bld.copy_async(b_ring, b_view, [(kt + ahead) * 64, 0], [stage, 0, 0])

            with bld.for_range(0, 64, 64) as kk:
                a_tile = bld.load_shared(a_ring, a_layout, [kt % stages, 0, kk])
                b_tile = bld.load_shared(b_ring, b_layout, [kt % stages, kk, 0])
                bld.assign(acc, bld.dot(a_tile, b_tile, acc))
                if inside:
                    copies()
            if not inside:
                copies()
            bld.copy_async_commit()
        bld.store_global(c_view, bld.cast(acc, f16), [0, 0])
    return bld.program()


@pytest.mark.parametrize(
    ("stages", "ahead", "barrier", "unroll", "expected"),
    [
        (3, 1, True, 1, True),
        (4, 2, True, 1, True),
        (4, 1, True, 1, True),
        (3, 2, True, 1, False),  # writes the stage the dot of kt - 1 may still read
        (4, 3, True, 1, False),
        (4, 4, True, 1, False),  # this iteration's own stage
        (4, 2, False, 1, False),  # no barrier at all
        (4, 2, True, 2, False),  # unrolled loops stay synchronous
    ],
)
def test_which_ring_loops_keep_the_dot_in_flight(stages, ahead, barrier, unroll, expected):
    program = _ring_program(stages, ahead, barrier, unroll)
    candidates = shared_operand_dots(program)
    found = [in_flight_dot(loop, candidates) for loop in _loops(program)]
    assert (found[0] is not None) == expected


@pytest.mark.parametrize(("ahead", "expected"), [(2, True), (4, False), (3, False)])
def test_copies_after_the_dot_in_its_inner_loop_are_ordered_after_it(ahead, expected):
    """Copies in the dot's one-trip loop, after it: into the stage 2 ahead still qualifies;
    into the dot's own stage (4 ahead of 4) or the previous dot's does not."""
    program = _ring_program(4, ahead, inside=True)
    candidates = shared_operand_dots(program)
    assert (in_flight_dot(_loops(program)[0], candidates) is not None) == expected


@pytest.mark.parametrize("stages", [3, 4, 5])
def test_the_examples_ordered_for_a_dot_in_flight_qualify(stages):
    for overlap in (False, True):
        programs = [
            matmul(256, 128, 128, 64, wgmma=True, stages=stages, overlap_dot=overlap),
            quantized_matmul(
                dtypes.i4, 128, 256, 128, 128, 64, stages=stages, wgmma=True, overlap_dot=overlap
            ),
        ]
        for program in programs:
            candidates = shared_operand_dots(program)
            outer = _loops(program)[0]
            assert (in_flight_dot(outer, candidates) is not None) == overlap


def test_a_loop_that_reads_the_accumulator_stays_synchronous():
    f16, f32 = dtypes.f16, dtypes.f32
    a_layout, b_layout, c_layout = wgmma_dot_layouts(128, 64, 64, 64)
    with ProgramBuilder("reads_accumulator", 128) as bld:
        c = bld.array_param("c", f32)
        c_view = bld.global_view(c, f32, GlobalLayout((64, 64), (64, 1)))
        a_ring = bld.shared_tensor(f16, shared_row_major_swizzle(3, 64, 64, element_bits=16))
        b_ring = bld.shared_tensor(f16, wgmma_b_buffer(64, 64, 3))
        acc = bld.register_tensor(f32, c_layout, 0.0)
        with bld.for_range(4) as kt:
            bld.sync()
            a_tile = bld.load_shared(a_ring, a_layout, [kt % 3, 0, 0])
            b_tile = bld.load_shared(b_ring, b_layout, [kt % 3, 0, 0])
            bld.assign(acc, bld.dot(a_tile, b_tile, acc))
            bld.store_global(c_view, acc, [0, 0])
    program = bld.program()
    candidates = shared_operand_dots(program)
    assert in_flight_dot(_loops(program)[0], candidates) is None


def _register_a_program(
    reassigned: bool,
    unroll: int = 1,
    overwrite: bool = False,
    links: int = 1,
    read_c: bool = False,
) -> Program:
    """A one-warpgroup k loop whose dot takes A from registers (a fresh load each iteration,
    or, `reassigned`, one tensor written over by `assign` each iteration) and B from a ring
    of 3 stages, one barrier before the dot. With `links`, the k-tile's dot is written as a
    chain of that many dots (each A fresh); `read_c` stores the accumulator inside the loop."""
    f16, f32 = dtypes.f16, dtypes.f32
    step = 64 // links
    a_layout, b_layout, c_layout = wgmma_dot_layouts(128, 64, 64, step)
    with ProgramBuilder("register_a", 128) as bld:
        a = bld.array_param("a", f16)
        c = bld.array_param("c", f32)
        a_view = bld.global_view(a, f16, GlobalLayout((64, 256), (256, 1)))
        c_view = bld.global_view(c, f32, GlobalLayout((64, 64), (64, 1)))
        b_ring = bld.shared_tensor(f16, wgmma_b_buffer(64, 64, 3))
        held = bld.register_tensor(f16, a_layout, 0.0)
        acc = bld.register_tensor(f32, c_layout, 0.0)
        with bld.for_range(0, 4, 1, unroll) as kt:
            if overwrite:  # into the stage the dot of kt - 1 reads
                tile = bld.register_tensor(f16, b_layout, 0.0)
                bld.store_shared(b_ring, tile, [(kt + 2) % 3, 0, 0])
            fresh = [
                bld.load_global(a_view, [0, kt * 64 + step * j], a_layout) for j in range(links)
            ]
            if reassigned:
                bld.assign(held, fresh[0])
            bld.sync()
            for j in range(links):
                b_tile = bld.load_shared(b_ring, b_layout, [kt % 3, step * j, 0])
                bld.assign(acc, bld.dot(held if reassigned else fresh[j], b_tile, acc))
            if read_c:
                bld.store_global(c_view, acc, [0, 0])
        bld.store_global(c_view, acc, [0, 0])
    return bld.program()


@pytest.mark.parametrize("reassigned", [False, True])
def test_a_register_a_operand_keeps_the_dot_synchronous(reassigned):
    """A from registers, fresh each iteration or written over by `assign`: the dot waits for
    itself (see the module docstring for what the GPU did when it did not)."""
    program = _register_a_program(reassigned)
    candidates = shared_operand_dots(program)
    assert candidates and all(a is None for a, _ in candidates.values())
    assert in_flight_dot(_loops(program)[0], candidates) is None


@pytest.mark.parametrize(
    ("reassigned", "unroll", "overwrite", "expected"),
    [
        (False, 2, False, True),
        (True, 2, False, False),
        (False, 4, False, True),
        (False, 2, True, False),
    ],
)
def test_unrolled_copies_keep_a_register_a_dot_in_flight(reassigned, unroll, overwrite, expected):
    """In a loop unrolled into whole groups, each copy's dot with A from registers stays in
    flight (its own registers), unless A is one tensor written over in every iteration, or a
    store reaches the stage the dot of the iteration before reads. The copies keep the body's
    own dot and assign (they have no scalars), which the flight names."""
    program = _register_a_program(reassigned, unroll, overwrite)
    (loop,) = _loops(program)
    copies = [unrolled_copy(loop, j) for j in range(unroll)]
    candidates = shared_operand_dots(program)
    flights = in_flight_copies(loop, copies, candidates)
    assert (flights is not None) is expected
    for flight in flights or []:
        assert flight.waits
        for body in copies:  # each copy holds the dot and its assign
            assert any(flight.dot is item for item in body)
            assert any(flight.assign is item for item in body)
    assert in_flight_copies(loop, copies[:1], candidates) is None


@pytest.mark.parametrize(
    ("read_c", "with_uses", "expected"),
    [(False, True, [True, False]), (False, False, None), (True, True, None)],
)
def test_a_chain_of_register_a_dots_stays_in_flight_as_one(read_c, with_uses, expected):
    """Two chained dots per copy: both stay in flight, the first link completing the chain of
    the copy before (it waits), the second waiting for nothing; not without the chains'
    operand uses, nor when the loop reads the accumulator."""
    program = _register_a_program(False, unroll=2, links=2, read_c=read_c)
    (loop,) = _loops(program)
    copies = [unrolled_copy(loop, j) for j in range(2)]
    candidates = shared_operand_dots(program)
    uses = operand_uses(program) if with_uses else None
    flights = in_flight_copies(loop, copies, candidates, uses)
    if expected is None:
        assert flights is None
    else:
        assert flights is not None and [flight.waits for flight in flights] == expected


def test_the_unrolled_register_a_loop_waits_once_after_it():
    kernel = lower(_register_a_program(False, 2), "sm_90a")
    lines = _lines(kernel.source)
    assert lines.count("la_wgmma_wait_prior();") == 2
    assert lines.count("la_wgmma_wait();") == 1
    assert lines.index("la_wgmma_wait();") > max(
        i for i, line in enumerate(lines) if line == "la_wgmma_wait_prior();"
    )


def _lines(source: str) -> list[str]:
    return [line.strip() for line in source.split('extern "C"')[1].splitlines()]


def test_the_lowering_leaves_the_dot_running_and_waits_after_the_loop():
    program = matmul(256, 128, 128, 64, wgmma=True, stages=4, overlap_dot=True)
    kernel = lower(program, "sm_90a")
    lines = _lines(kernel.source)
    assert lines.count("la_wgmma_wait_prior();") == 1
    assert lines.count("la_wgmma_wait();") == 1
    prior, drain = lines.index("la_wgmma_wait_prior();"), lines.index("la_wgmma_wait();")
    loop = next(i for i, line in enumerate(lines) if line.startswith("for (") and "k0" in line)
    assert loop < prior < drain
    # The accumulation is in place: no copy into the dot's result, which nothing reads.
    assert "// done in place by the wgmma dot above, still in flight" in lines
    # The wgmma calls name the accumulator's own words; no float copies of them are made.
    assert '"+r"(r0[0])' in kernel.source
    assert "acc0 = __uint_as_float(" not in kernel.source
    assert any("wgmma dot kept in flight" in str(step) for step in kernel.report.steps)
    # The same program without the in-flight order waits for each dot.
    plain = lower(matmul(256, 128, 128, 64, wgmma=True, stages=4), "sm_90a")
    assert "la_wgmma_wait_prior();" not in _lines(plain.source)
    # mma.sync lowering of the same program: nothing of wgmma.
    forced = lower(program, "sm_90a", wgmma=False)
    assert "la_wgmma" not in forced.source.split('extern "C"')[1]


@pytest.mark.parametrize(("stages", "ahead"), [(3, 1), (4, 2), (3, 2)])
def test_ring_programs_compute_the_matmul_in_the_interpreter(stages, ahead):
    """The hand-made rings are correct programs (the one that keeps no dot in flight, 3 stages
    2 ahead, too: with a synchronous dot its copies wait for nothing)."""
    rng = np.random.default_rng(stages)
    k = 64 * 5
    a = rng.standard_normal((64, k)).astype(np.float16)
    b = rng.standard_normal((k, 64)).astype(np.float16)
    c = np.zeros((64, 64), dtype=np.float16)
    run_reference(_ring_program(stages, ahead), k, a, b, c, grid=(1, 1))
    reference = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), reference, rtol=2e-3, atol=5e-2)


# ------------------------------------------------------------------------------ chains of dots


def _chain_program(between: str = "", links: int = 3) -> Program:
    """One warpgroup, no loop: `links` k16 dots into one accumulator, A fresh from global
    memory for each, B from one shared tile; `between` puts an instruction between the first
    link and the second: "read_c" (reads the accumulator), "write_a" (assigns over the first
    link's A), "store" (into the tile the links read), "loop" (a loop of one trip, empty of
    all that), "other_c" (a dot into another accumulator), "second_tile" (a store of B into a
    second tile and a barrier, the links after the first reading that tile instead)."""
    f16, f32 = dtypes.f16, dtypes.f32
    a_layout, b_layout, c_layout = wgmma_dot_layouts(128, 64, 64, 16)
    k = 16 * links
    with ProgramBuilder("chain", 128) as bld:
        a = bld.array_param("a", f16)
        b = bld.array_param("b", f16)
        c = bld.array_param("c", f32)
        a_view = bld.global_view(a, f16, GlobalLayout((64, k), (k, 1)))
        b_view = bld.global_view(b, f16, GlobalLayout((k, 64), (64, 1)))
        c_view = bld.global_view(c, f32, GlobalLayout((64, 64), (64, 1)))
        tile = bld.shared_tensor(f16, wgmma_b_buffer(k, 64, 1))
        second = bld.shared_tensor(f16, wgmma_b_buffer(k, 64, 1))
        whole = bld.load_global(b_view, [0, 0], wgmma_dot_layouts(128, 64, 64, k)[1])
        bld.store_shared(tile, whole, [0, 0, 0])
        bld.sync()
        acc = bld.register_tensor(f32, c_layout, 0.0)
        other = bld.register_tensor(f32, c_layout, 0.0)
        firsts = []
        for j in range(links):
            weights = bld.load_global(a_view, [0, 16 * j], a_layout)
            firsts.append(weights)
            source = second if j and between == "second_tile" else tile
            operand = bld.load_shared(source, b_layout, [0, 16 * j, 0])
            bld.assign(acc, bld.dot(weights, operand, acc))
            if j == 0 and between == "read_c":
                bld.store_global(c_view, acc, [0, 0])
            elif j == 0 and between == "write_a":
                bld.assign(weights, bld.load_global(a_view, [0, 0], a_layout))
            elif j == 0 and between == "store":
                bld.store_shared(tile, bld.register_tensor(f16, b_layout, 0.0), [0, 16, 0])
            elif j == 0 and between == "loop":
                with bld.for_range(0, 1):
                    pass
            elif j == 0 and between == "other_c":
                again = bld.load_shared(tile, b_layout, [0, 0, 0])
                bld.assign(other, bld.dot(weights, again, other))
            elif j == 0 and between == "second_tile":
                bld.store_shared(second, whole, [0, 0, 0])
                bld.sync()  # every thread's part of it stored before the links read it
        bld.store_global(c_view, bld.add(acc, other), [0, 0])
    return bld.program()


@pytest.mark.parametrize(
    ("between", "chained"),
    [
        ("", [0, 1, 2]),
        ("read_c", [1, 2]),  # the first link must finish before c is read
        ("write_a", [1, 2]),  # or before its A registers are written over
        ("store", [1, 2]),  # or before the tile it reads changes
        ("loop", [1, 2]),  # a body is not looked into
        ("other_c", [1, 2]),  # a dot into another accumulator ends the chain
        ("second_tile", [0, 1, 2]),  # a store into a tile no link before reads does not
    ],
    ids=lambda value: str(value) or "plain",
)
def test_which_dots_chain(between, chained):
    program = _chain_program(between)
    candidates = shared_operand_dots(program)
    chains = dot_chains(program.body, candidates, operand_uses(program))
    dots = [item for item in program.body if item.op == "dot"]
    links = [dot for dot in dots if dot.c is dots[0].c]
    assert sorted(id(dot) for dot in chains.values() for dot in [dot.dot]) == sorted(
        id(links[j]) for j in chained
    )
    assert [chains[id(links[j])].last for j in chained] == [False] * (len(chained) - 1) + [True]
    for link in chains.values():  # each link's accumulation is its assign, in place
        assert link.assign.dst is link.dot.c and link.assign.src is link.dot.out


@pytest.mark.parametrize("between", ["", "second_tile"], ids=["one_tile", "second_tile"])
def test_a_chain_s_links_are_fenced_only_where_a_write_is_pending(between):
    """No link of a chain has a proxy fence of its own where each store before it is
    followed by a barrier whose fence orders it (`backend.proxy_fences`), the second tile,
    stored between the first two links, included: one fence a barrier."""
    program = _chain_program(between)
    chains = dot_chains(program.body, shared_operand_dots(program), operand_uses(program))
    dots = [item for item in program.body if item.op == "dot"]
    assert all(id(dot) in chains for dot in dots if dot.c is dots[0].c)
    source = lower(program, "sm_90a").source.split('extern "C"')[1]
    barriers = sum(item.op == "sync" for item in program.body)
    assert source.count("fence.proxy.async") == barriers
    assert barriers == (2 if between else 1)


def test_a_dot_after_a_store_with_no_barrier_between_keeps_its_fence():
    """The store into the tile between the first two dots (which breaks the chain) is
    followed by the second dot, with no barrier between: that dot keeps its proxy fence,
    the first (after the barrier's fence) and the third (nothing stored since) have none."""
    lines = _lines(lower(_chain_program("store"), "sm_90a").source)
    fenced = [
        lines[i - 1] == PROXY_FENCE for i, line in enumerate(lines) if line == "la_wgmma_fence();"
    ]
    assert fenced == [False, True, False]
    barriers = [i for i, line in enumerate(lines) if line == "__syncthreads();"]
    assert [lines[i - 1] == PROXY_FENCE for i in barriers] == [True]


def test_a_chain_is_issued_in_place_and_waited_for_once():
    """Three links: three commits, one ``wait_group 0`` after the last, no copy of c."""
    lines = _lines(lower(_chain_program(), "sm_90a").source)
    assert lines.count("la_wgmma_commit();") == 3
    assert lines.count("la_wgmma_wait();") == 1
    assert lines.index("la_wgmma_wait();") > max(
        i for i, line in enumerate(lines) if line == "la_wgmma_commit();"
    )
    assert sum("done in place by the wgmma dot" in line for line in lines) == 3


def test_a_broken_chain_waits_before_what_breaks_it():
    """The accumulator read after the first link: that link waits for itself."""
    lines = _lines(lower(_chain_program("read_c"), "sm_90a").source)
    assert lines.count("la_wgmma_commit();") == 3
    assert lines.count("la_wgmma_wait();") == 2


def test_a_link_without_a_plan_waits_for_the_links_before_it(monkeypatch):
    """Should the second link find no wgmma plan (it then runs on mma.sync, reading c), it
    first waits for the first, which was left running."""
    compute = importlib.import_module("backend.lower.compute")
    calls = []

    def all_but_the_second(*args, **kwargs):
        calls.append(1)
        return None if len(calls) == 2 else plan_wgmma(*args, **kwargs)

    monkeypatch.setattr(compute, "plan_wgmma", all_but_the_second)
    lines = _lines(lower(_chain_program(), "sm_90a").source)
    assert lines.count("la_wgmma_commit();") == 2
    first_commit = lines.index("la_wgmma_commit();")
    assert lines.index("la_wgmma_wait();") > first_commit  # the drain before the fallback
    assert lines.count("la_wgmma_wait();") == 2  # the drain, and the last link's own wait


@pytest.mark.parametrize("between", ["", "read_c", "other_c", "second_tile"])
def test_chain_programs_compute_the_matmul_in_the_interpreter(between):
    """The program means the sequential sums, chained or not: against NumPy's."""
    rng = np.random.default_rng(len(between))
    links = 3
    a = rng.integers(-4, 4, (64, 16 * links)).astype(np.float16)
    b = rng.integers(-4, 4, (16 * links, 64)).astype(np.float16)
    c = np.zeros(64 * 64, dtype=np.float32)
    run_reference(_chain_program(between, links), a, b, c)
    want = a.astype(np.float32) @ b.astype(np.float32)
    if between == "other_c":
        want += a[:, :16].astype(np.float32) @ b[:16].astype(np.float32)
    np.testing.assert_array_equal(c.reshape(64, 64), want)

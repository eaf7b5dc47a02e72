"""`for_range(..., unroll=S)`: the builder, the verifier, the printer, `Instruction.map_scalars`
and the interpreter (an unrolled loop means exactly what the plain loop means), and the random
programs of `ir.testing` that draw it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.errors import VerificationError
from ir.instructions import ForRange, GlobalView, If, LoadGlobal, StoreShared
from ir.program import Program
from ir.testing import dot_cases, loop_cases
from ir.verifier import verify
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial
from layout_algebra.shared import shared_row_major
from layout_algebra.symbolic import Expr, const, var

THREADS = 4
WIDTH = 4
"""Every program here is 4 threads holding one i32 each of a row of 4."""


def staged_sum(
    start: int, stop: int | None, step: int, unroll: int, *, rows: int = 12, rolled: bool = False
) -> Program:
    """``acc = 0; for k in range(start, stop, step, unroll): buffer[k % 2] = x[k]; acc += buffer[k
    % 2]; if (k - start) % 3 == 0: acc = acc * 3`` then ``y = acc``: a stage index of a double
    buffer and a condition on the stage. `stop` None: the runtime int parameter ``n``; `rolled`
    asks the compiler to keep the loop rolled."""
    layout = spatial(WIDTH)
    with ProgramBuilder("staged_sum", THREADS) as b:
        n = b.int_param("n", 0, rows)
        x, y = b.array_param("x", dtypes.i32), b.array_param("y", dtypes.i32)
        source = b.global_view(x, dtypes.i32, GlobalLayout((rows, WIDTH), (WIDTH, 1)))
        target = b.global_view(y, dtypes.i32, GlobalLayout((WIDTH,), (1,)))
        buffer = b.shared_tensor(dtypes.i32, shared_row_major(2, WIDTH))
        total = b.register_tensor(dtypes.i32, layout, 0)
        stop_value = n if stop is None else stop
        with b.for_range(start, stop_value, step, unroll=unroll, rolled=rolled) as k:
            row = b.load_global(source, [k, 0], spatial(1, WIDTH))
            b.store_shared(buffer, row, [k % 2, 0])
            b.sync()
            b.assign(total, b.add(total, b.load_shared(buffer, layout, [k % 2, 0])))
            b.sync()
            with b.if_(((k - start) % 3).eq(0)):
                b.assign(total, b.mul(total, 3))
        b.store_global(target, total, [0])
    return b.program()


def expected_sum(x: np.ndarray, start: int, stop: int, step: int) -> np.ndarray:
    """`staged_sum`'s output, in NumPy (i32 arithmetic wraps)."""
    total = np.zeros(WIDTH, dtype=np.int32)
    for k in range(start, stop, step):
        total = total + x[k]
        if (k - start) % 3 == 0:
            total = total * np.int32(3)
    return total


def run(program: Program, x: np.ndarray, n: int) -> np.ndarray:
    y = np.zeros(WIDTH, dtype=np.int32)
    run_reference(program, n, x.copy(), y)
    return y


# ------------------------------------------------------------------------------------ builder


def test_for_range_unroll_defaults_to_1():
    with ProgramBuilder("plain", 4) as b, b.for_range(4):
        pass
    (loop,) = b.program().body
    assert isinstance(loop, ForRange) and loop.unroll == 1


def test_for_range_records_unroll():
    with ProgramBuilder("unrolled", 4) as b, b.for_range(1, 9, 2, unroll=3) as k:
        pass
    (loop,) = b.program().body
    assert (loop.start, loop.stop, loop.step, loop.unroll, loop.var) == (
        const(1),
        const(9),
        2,
        3,
        k,
    )


@pytest.mark.parametrize(
    ("unroll", "message"),
    [
        (0, "for_range unroll must be a positive int, got 0"),
        (-2, "for_range unroll must be a positive int, got -2"),
        (2.0, "for_range unroll must be a positive int, got 2.0"),
        (True, "for_range unroll must be a positive int, got True"),
        ("4", "for_range unroll must be a positive int, got '4'"),
    ],
)
def test_for_range_refuses_a_bad_unroll(unroll, message):
    with ProgramBuilder("bad", 4) as b:
        with pytest.raises(VerificationError, match=message):
            b.for_range(0, 4, 1, unroll=unroll).__enter__()


def test_for_range_records_rolled_which_defaults_to_false():
    with ProgramBuilder("rolled", 4) as b:
        with b.for_range(4):
            pass
        with b.for_range(0, 8, 2, unroll=2, rolled=True):
            pass
    plain, rolled = b.program().body
    assert (plain.rolled, rolled.rolled, rolled.unroll) == (False, True, 2)


@pytest.mark.parametrize("rolled", [1, 0, "yes", None])
def test_for_range_refuses_a_rolled_that_is_no_bool(rolled):
    with ProgramBuilder("bad", 4) as b:
        with pytest.raises(
            VerificationError, match=f"for_range rolled must be True or False, got {rolled!r}"
        ):
            b.for_range(0, 4, rolled=rolled).__enter__()


# ----------------------------------------------------------------------------------- verifier


def test_verifier_refuses_a_rolled_that_is_no_bool():
    loop = ForRange(var("i", 0, 3), const(0), const(4), 1, (), 1, 1)
    with pytest.raises(VerificationError, match="for_range.*rolled must be True or False, got 1"):
        verify(Program("bad", 4, (), (loop,)))


@pytest.mark.parametrize(
    ("unroll", "message"),
    [
        (0, "unroll must be a positive int, got 0"),
        (-1, "unroll must be a positive int, got -1"),
        (1.5, "unroll must be a positive int, got 1.5"),
        (False, "unroll must be a positive int, got False"),
        (None, "unroll must be a positive int, got None"),
    ],
)
def test_verifier_refuses_a_bad_unroll(unroll, message):
    loop = ForRange(var("i", 0, 3), const(0), const(4), 1, (), unroll)
    with pytest.raises(VerificationError, match=f"for_range.*{message}"):
        verify(Program("bad", 4, (), (loop,)))


@pytest.mark.parametrize("unroll", [1, 2, 7])
def test_verifier_accepts_a_positive_unroll(unroll):
    program = Program("good", 4, (), (ForRange(var("i", 0, 3), const(0), const(4), 1, (), unroll),))
    assert verify(program) is program


# ------------------------------------------------------------------------------------ printer

STAGED_SUM_TEXT = """\
program staged_sum(n: int, x: i32*, y: i32*) num_threads=4
  g0 = global_view(x, i32, GlobalLayout(shape=(12, 4), strides=(4, 1)))
  g1 = global_view(y, i32, GlobalLayout(shape=(4,), strides=(1,)))
  s0: i32 shared_row_major(2, 4) = shared_tensor()
  r0: i32[4] spatial(4) = register_tensor(0)
  for k0 in range(1, n, 2, unroll=3):
    r1: i32[1, 4] spatial(1,4) = load_global(g0, [k0, 0])
    store_shared(s0, r1, [k0 % 2, 0])
    sync()
    r2: i32[4] spatial(4) = load_shared(s0, [k0 % 2, 0])
    r3: i32[4] spatial(4) = add(r0, r2)
    r0 = r3
    sync()
    if ((k0 - 1) % 3).eq(0):
      r4: i32[] replicate(4) = register_tensor(3)
      r5: i32[4] spatial(4) = mul(r0, r4)
      r0 = r5
  store_global(g1, r0, [0])"""


def test_printer_shows_unroll_above_1():
    assert str(staged_sum(1, None, 2, 3)) == STAGED_SUM_TEXT


def test_printer_shows_a_rolled_loop():
    rolled = STAGED_SUM_TEXT.replace("unroll=3)", "unroll=3, rolled=True)")
    assert str(staged_sum(1, None, 2, 3, rolled=True)) == rolled


def test_printer_shows_a_plain_loop_as_before():
    plain = STAGED_SUM_TEXT.replace("range(1, n, 2, unroll=3)", "range(1, n, 2)")
    assert str(staged_sum(1, None, 2, 1)) == plain


# ---------------------------------------------------------------------------- map_scalars


def test_map_scalars_rewrites_offsets_bounds_and_nested_bodies():
    program = staged_sum(0, None, 1, 2)
    loop = program.body[-2]
    k = loop.var
    shifted = loop.map_scalars(lambda e: e.substitute({k.name: k + 1}))
    assert isinstance(shifted, ForRange) and shifted is not loop
    assert (shifted.var, shifted.start, shifted.stop, shifted.unroll) == (k, const(0), loop.stop, 2)
    load, store = shifted.body[0], shifted.body[1]
    assert isinstance(load, LoadGlobal) and load.offsets == (k + 1, const(0))
    assert isinstance(store, StoreShared) and store.offsets == ((k + 1) % 2, const(0))
    inner = shifted.body[-1]
    assert isinstance(inner, If) and inner.cond == ((k + 1) % 3).eq(0)
    assert load.out is loop.body[0].out  # the tensors are kept
    assert loop.body[0].offsets == (k, const(0))  # the original is untouched


def test_map_scalars_returns_the_instruction_itself_when_nothing_changes():
    program = staged_sum(0, None, 1, 2)
    loop = program.body[-2]
    assert loop.map_scalars(lambda e: e) is loop
    unrelated = loop.map_scalars(lambda e: e.substitute({"m": 5}))
    assert unrelated is loop


def test_map_scalars_keeps_a_global_views_extents():
    with ProgramBuilder("view", 4) as b:
        n = b.int_param("n")
        b.global_view(b.array_param("x", dtypes.u8), dtypes.u8, GlobalLayout((n,), (1,)))
    (view,) = b.program().body
    assert isinstance(view, GlobalView) and view.scalars() == (n,)
    assert view.map_scalars(lambda e: e.substitute({"n": 8})) is view


# -------------------------------------------------------------------------------- interpreter


@settings(max_examples=40, deadline=None)
@given(
    start=st.integers(0, 2),
    trips=st.integers(0, 9),
    step=st.integers(1, 2),
    unroll=st.integers(2, 4),
    runtime=st.booleans(),
    rolled=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_unrolled_loop_computes_what_the_plain_loop_computes(
    start, trips, step, unroll, runtime, rolled, seed
):
    stop = start + trips * step
    rows = max(stop, 1)
    x = np.random.default_rng(seed).integers(-50, 50, (rows, WIDTH)).astype(np.int32)
    program_stop = None if runtime else stop
    unrolled = staged_sum(start, program_stop, step, unroll, rows=rows, rolled=rolled)
    plain = staged_sum(start, None if runtime else stop, step, 1, rows=rows)
    got = run(unrolled, x, stop)
    np.testing.assert_array_equal(got, run(plain, x, stop))
    np.testing.assert_array_equal(got, expected_sum(x, start, stop, step))


def test_unrolled_loop_table():
    x = np.arange(40, dtype=np.int32).reshape(10, WIDTH)
    # k = 1, 3, 5, 7, 9: rows summed, tripled after k = 1 and k = 7
    got = run(staged_sum(1, 10, 2, 4, rows=10), x, 0)
    np.testing.assert_array_equal(got, ((x[1] * 3 + x[3] + x[5] + x[7]) * 3 + x[9]))


# --------------------------------------------------------------------------- random programs

_FIND = settings(
    max_examples=400, database=None, deadline=None, suppress_health_check=list(HealthCheck)
)


def _unrolled_loop(program: Program) -> ForRange | None:
    return next(
        (i for i in program.walk() if isinstance(i, ForRange) and i.unroll > 1),
        None,
    )


def _constant_trips(loop: ForRange) -> int | None:
    if loop.start.is_const and loop.stop.is_const:
        return len(range(loop.start.value, loop.stop.value, loop.step))
    return None


@pytest.mark.parametrize("multiple", [True, False])
def test_loop_cases_unroll_with_trip_counts_that_are_and_are_not_multiples(multiple):
    def fits(case) -> bool:
        loop = _unrolled_loop(case.program)
        if loop is None:
            return False
        trips = _constant_trips(loop)
        return trips is not None and trips >= loop.unroll and (trips % loop.unroll == 0) == multiple

    case = find(loop_cases(), fits, settings=_FIND)
    args = case.fresh_arguments()
    run_reference(case.program, *args, grid=case.grid)
    case.check(args[case.output])


def test_loop_cases_unroll_a_runtime_trip_count():
    def fits(case) -> bool:
        loop = _unrolled_loop(case.program)
        return loop is not None and not loop.stop.is_const

    case = find(loop_cases(), fits, settings=_FIND)
    assert "unroll=" in case.description


def test_dot_cases_unroll_a_double_buffered_k_loop():
    def fits(case) -> bool:
        loop = _unrolled_loop(case.program)
        return loop is not None and any(
            isinstance(i, StoreShared) and isinstance(i.offsets[0], Expr) and "%" in repr(i.offsets)
            for i in loop.body
        )

    case = find(dot_cases(), fits, settings=_FIND)
    args = case.fresh_arguments()
    run_reference(case.program, *args, grid=case.grid)
    case.check(args[case.output])

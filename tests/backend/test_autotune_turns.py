"""The autotuner's finalists timed again in turns (`backend.autotune`, no GPU).

A measure that drifts (each call a little slower than the one before, as a GPU's clocks may
over a tuning) ranks candidates by when they ran. With `measure_in_turns` the candidates
within `FINALIST_MARGIN` of the fastest (at most `FINALISTS`) are timed again together and the
fastest in turns wins. Tests: a drifting measure whose sequential pick is wrong and the turns
mend it; which candidates are finalists (a table and a hypothesis property against a direct
computation); the record and the summary line; a turns measure that never succeeds (the
sequential pick, a warning, nothing stored; a transient error retried) or that gives malformed
times (`TuningError`); one
finalist alone is not timed again; and the decode measure's `in_turns` refusing an operation of
another problem.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.autotune import FINALIST_MARGIN, FINALISTS, TuningError, autotune
from backend.cache import RecordStore
from backend.decode_matmul import DecodeMeasure, DecodeProblem
from backend.errors import LaunchError, TimingError
from ir import dtypes

KEY = {"gpu": "Fake GPU", "arch": "sm_90a", "k": 4096}


class Drifting:
    """Candidates {"c": i} whose true time is `true[i]` us; `measure` returns it times
    (1 + `drift` * calls so far), `measure_in_turns` the true times of the builds it is given
    (or what `turns` returns, when set)."""

    def __init__(self, true: list[float], drift: float = 0.0) -> None:
        self.true, self.drift, self.calls = true, drift, 0
        self.turns_given: list[list[int]] = []
        self.turns = None

    def space(self) -> list[dict]:
        return [{"c": i} for i in range(len(self.true))]

    def measure(self, built: int) -> float:
        us = self.true[built] * (1 + self.drift * self.calls)
        self.calls += 1
        return us

    def measure_in_turns(self, builts: list[int]) -> list[float]:
        self.turns_given.append(list(builts))
        if self.turns is not None:
            return self.turns(builts)
        return [self.true[b] for b in builts]

    def tune(self, store: RecordStore, turns: bool = True, progress: object = False):
        return autotune(
            "drift/1",
            KEY,
            self.space(),
            construct=lambda candidate: candidate["c"],
            build=lambda candidate, constructed: constructed,
            measure=self.measure,
            measure_in_turns=self.measure_in_turns if turns else None,
            store=store,
            workers=1,
            progress=progress,
        )


def test_a_drifting_measure_picks_the_first_and_the_turns_mend_it(tmp_path: Path) -> None:
    # True times 10.0, 9.9, 9.8: each call 2 % slower, so one after another the first wins.
    fake = Drifting([10.0, 9.9, 9.8], drift=0.02)
    alone = fake.tune(RecordStore(tmp_path / "alone"), turns=False)
    assert alone.choice == {"c": 0}
    fake = Drifting([10.0, 9.9, 9.8], drift=0.02)
    stream = io.StringIO()
    store = RecordStore(tmp_path / "turns")
    result = fake.tune(store, progress=stream)
    assert result.choice == {"c": 2}
    assert fake.turns_given == [[0, 1, 2]]
    assert result.us == 9.8
    assert [t.us for t in result.trials] == pytest.approx([10.0, 9.9 * 1.02, 9.8 * 1.04])
    assert [t.turns_us for t in result.trials] == [10.0, 9.9, 9.8]
    assert "best 9.80 us with c=2, the fastest of 3 in turns" in stream.getvalue()
    # Stored with each finalist's time in turns; a second tuning measures nothing.
    again = Drifting([1.0, 1.0, 1.0])
    warm = again.tune(store)
    assert warm.from_cache and warm.choice == {"c": 2} and warm.us == 9.8
    assert again.calls == 0 and again.turns_given == []


@pytest.mark.parametrize(
    ("true", "finalists"),
    [
        # Within 8 % of 100 (<= 108): all but 109 and 120; the fastest seven of them.
        (
            [100.0, 104.0, 109.0, 101.0, 107.0, 103.0, 102.0, 120.0, 105.5, 106.0],
            [0, 1, 3, 5, 6, 8, 9],
        ),
        ([100.0, 108.0, 108.1], [0, 1]),
        ([50.0, 10.0, 10.7, 10.9, 30.0], [1, 2]),
        # The fastest comes last: candidates kept before it leave when it lowers the limit.
        ([20.0, 10.5, 10.3, 10.0], [1, 2, 3]),
        ([20.0, 10.9, 10.3, 10.0], [2, 3]),
        ([10.0] * 9, [0, 1, 2, 3, 4, 5, 6]),
    ],
)
def test_the_finalists_table(tmp_path: Path, true: list[float], finalists: list[int]) -> None:
    fake = Drifting(true)
    result = fake.tune(RecordStore(tmp_path))
    assert fake.turns_given == [finalists]
    assert [i for i, t in enumerate(result.trials) if t.turns_us is not None] == finalists
    fastest = min(finalists, key=lambda i: (true[i], i))
    assert result.choice == {"c": fastest}


def _expected_finalists(times: list[float]) -> list[int]:
    """Finalists computed directly: within the margin of the final fastest, the fastest
    `FINALISTS` of them (by time, then by position), in search-space order."""
    best = min(times)
    near = [i for i, t in enumerate(times) if t <= best * (1 + FINALIST_MARGIN)]
    return sorted(sorted(near, key=lambda i: (times[i], i))[:FINALISTS])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(1.0, 2.0, allow_nan=False), min_size=1, max_size=9),
    st.lists(st.floats(1.0, 2.0, allow_nan=False), min_size=9, max_size=9),
)
def test_finalists_and_choice_property(times: list[float], turns: list[float]) -> None:
    """Whatever the order of the times, the finalists are those of `_expected_finalists` (a
    candidate dropped while an earlier fastest stood is never needed again) and the choice is
    the fastest of them in turns, the earliest of equal times."""
    import tempfile

    fake = Drifting(times)
    fake.turns = lambda builts: [turns[b] for b in builts]
    with tempfile.TemporaryDirectory() as directory:
        result = fake.tune(RecordStore(Path(directory)))
    expected = _expected_finalists(times)
    if len(expected) == 1:
        assert fake.turns_given == []
        assert result.choice == {"c": expected[0]}
    else:
        assert fake.turns_given == [expected]
        assert result.choice == {"c": min(expected, key=lambda i: (turns[i], i))}
        assert result.us == turns[result.choice["c"]]


def test_a_single_finalist_is_not_timed_again(tmp_path: Path) -> None:
    fake = Drifting([10.0, 20.0, 30.0])
    result = fake.tune(RecordStore(tmp_path))
    assert fake.turns_given == [] and result.choice == {"c": 0} and result.us == 10.0
    assert all(t.turns_us is None for t in result.trials)
    assert "turns_us" not in result.trials[0].as_record()


@pytest.mark.parametrize(
    ("error", "attempts"),
    [
        # Transient: tried as often as a measure is.
        (TimingError("medians_in_turns: queuing one run took up to 152239 us on the host"), 3),
        (LaunchError("BatchMatmul: a of torch.float32; expected torch.float16"), 1),
    ],
)
def test_turns_that_never_succeed_keep_the_sequential_pick_unstored(
    tmp_path: Path, error: Exception, attempts: int
) -> None:
    fake = Drifting([10.0, 10.1, 10.2])

    def failing(builts: list[int]) -> list[float]:
        raise error

    fake.turns = failing
    store = RecordStore(tmp_path)
    with pytest.warns(RuntimeWarning, match=r"the 3 finalists could not be timed in turns"):
        result = fake.tune(store)
    assert result.choice == {"c": 0} and result.us == 10.0
    assert len(fake.turns_given) == attempts
    later = Drifting([10.0, 10.1, 9.0])
    assert not later.tune(store).from_cache  # nothing was stored
    assert later.tune(store).from_cache


@pytest.mark.parametrize(
    "given_back",
    [[1.0], [1.0, 2.0, 3.0, 4.0], [1.0, float("nan")], [1.0, -2.0], [True, 1.0], "12", None],
)
def test_malformed_times_in_turns_are_refused(tmp_path: Path, given_back: object) -> None:
    fake = Drifting([10.0, 10.1])
    fake.turns = lambda builts: given_back
    with pytest.raises(TuningError, match=r"measure_in_turns gave .* for 2 finalists; expected"):
        fake.tune(RecordStore(tmp_path))


def test_the_decode_measure_refuses_another_problems_operation() -> None:
    class Other:
        problem = DecodeProblem(dtypes.i8, 128, 1024, 2048)

    measure = DecodeMeasure(DecodeProblem(dtypes.i4, 128, 1024, 2048), 1)
    measure._inputs = {"a": None, "packed": None, "scales": None, "zeros": None}
    with pytest.raises(TuningError, match=r"given an operation for .*expected the same problem"):
        measure.in_turns([Other()])


def test_no_warning_when_the_turns_succeed(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Drifting([10.0, 10.2, 10.1], drift=0.01).tune(RecordStore(tmp_path))


def test_the_decode_measure_times_its_operations_in_turns_in_order(monkeypatch) -> None:
    """`DecodeMeasure.in_turns` without a GPU: the timing functions stood in for, each operation
    runs once to make its output, then is timed writing into it, the times in the given order."""
    import backend.timing

    problem = DecodeProblem(dtypes.i4, 128, 1024, 2048)
    calls: list[tuple[str, object]] = []

    class Out:
        device = "cuda:0"

    class Operation:
        def __init__(self, name: str) -> None:
            self.name, self.problem, self.out = name, problem, Out()

        def __call__(self, a, packed, scales, zeros, out=None):
            assert (a, packed, scales, zeros) == ("a", "packed", "scales", None)
            calls.append((self.name, out))
            return self.out if out is None else out

    def medians(runs, flush, repeats):
        assert flush == "flush of cuda:0" and repeats == 30
        for run in runs.values():
            run()
        return {name: 10.0 + float(name) for name in reversed(list(runs))}

    monkeypatch.setattr(backend.timing, "flush_buffer", lambda device: f"flush of {device}")
    monkeypatch.setattr(backend.timing, "medians_in_turns", medians)
    measure = DecodeMeasure(problem, 1)
    measure._inputs = {"a": "a", "packed": "packed", "scales": "scales", "zeros": None}
    operations = [Operation("x"), Operation("y"), Operation("z")]
    assert measure.in_turns(operations) == [10.0, 11.0, 12.0]
    made = [(name, None) for name in "xyz"]
    timed = [(op.name, op.out) for op in operations]
    assert calls == made + timed


def _stand_in_measure(monkeypatch, protocol: dict[str, float], steady_from_us, steady_calls):
    """A `DecodeMeasure` of three stand-in operations whose timing functions are stood in for:
    the protocol's times `protocol`, and back to back each run's protocol time less 1 us."""
    import backend.timing
    from backend.timing import SteadyTime

    problem = DecodeProblem(dtypes.i4, 128, 1024, 2048)

    class Operation:
        def __init__(self) -> None:
            self.problem = problem

        def __call__(self, a, packed, scales, zeros, out=None):
            return out

    def steady(runs, launches):
        steady_calls.append((list(runs), launches))
        return {name: SteadyTime(protocol[name] - 1.0, None) for name in runs}

    monkeypatch.setattr(backend.timing, "medians_in_turns", lambda runs, f, r: dict(protocol))
    monkeypatch.setattr(backend.timing, "steady_in_turns", steady)
    measure = DecodeMeasure(problem, 1, steady_from_us=steady_from_us)
    measure._inputs = {"a": "a", "packed": "p", "scales": "s", "zeros": None}
    measure._flush = "flush"
    return measure, [Operation() for _ in protocol]


@pytest.mark.parametrize(
    ("protocol", "steady_from_us", "expected", "launches"),
    [
        # Short finalists keep the protocol's times.
        ({"0": 300.0, "1": 290.0, "2": 310.0}, 1000.0, [300.0, 290.0, 310.0], None),
        # The fastest at the threshold: back to back, blocks of 250 ms.
        ({"0": 5000.0, "1": 1000.0, "2": 5100.0}, 1000.0, [4999.0, 999.0, 5099.0], 250),
        ({"0": 5000.0, "1": 5247.0, "2": 5117.0}, 1000.0, [4999.0, 5246.0, 5116.0], 50),
        # None: never back to back; 0: always.
        ({"0": 5000.0, "1": 6000.0, "2": 7000.0}, None, [5000.0, 6000.0, 7000.0], None),
        ({"0": 3.0, "1": 4.0, "2": 5.0}, 0, [2.0, 3.0, 4.0], 83334),
    ],
)
def test_long_finalists_are_decided_back_to_back(
    monkeypatch, protocol, steady_from_us, expected, launches
) -> None:
    calls: list = []
    measure, operations = _stand_in_measure(monkeypatch, protocol, steady_from_us, calls)
    assert measure.in_turns(operations) == expected
    assert calls == ([] if launches is None else [(["0", "1", "2"], launches)])


@pytest.mark.parametrize("bad", [-1.0, float("nan"), True, "1000"])
def test_the_measure_refuses_a_bad_steady_threshold(bad: object) -> None:
    with pytest.raises(TuningError, match=r"DecodeMeasure: steady_from_us=.*; expected a number"):
        DecodeMeasure(DecodeProblem(dtypes.i4, 128, 1024, 2048), 1, steady_from_us=bad)

"""A general autotuner: the fastest of a search space of parameter sets, tuned once per key and
remembered on disk.

It knows nothing of any one kernel. A *candidate* is a parameter set, a mapping of str to JSON
scalars (e.g. the fields of a `DequantConfig`); the *key* names what the choice is for, a
mapping of str to JSON scalars (the GPU, the data types, the shape, an M bucket, ...). The
caller gives three functions:

- `construct(candidate)`: the cheap, serial step (building and verifying a tile program);
  raising `ir.errors.VerificationError` or `SpecializationError` prunes the candidate;
- `build(candidate, constructed)`: the expensive step (NVRTC), run for every candidate left in a
  thread pool: NVRTC needs no GPU and releases the interpreter while it compiles;
- `measure(built)`: the candidate's time in microseconds, run in the calling thread, one
  candidate after another in search-space order (on a GPU: `backend.timing.median_us`); it
  starts as soon as the first candidate is built, while the others still compile.

Optionally `measure_in_turns(builts)`: the times of several built candidates measured in turns
(on a GPU: `backend.timing.medians_in_turns`; `DecodeMeasure.in_turns` times finalists of a
millisecond or longer back to back as well and gives those times, since the card's power limit
ranks them there), in the order given. Measured one after another,
candidates whose times differ by less than the GPU's clocks drift over the tuning's seconds
are ranked by when they ran (on an H100, one prefill kernel timed three times in one process
gave times 7 % apart). So the *finalists*, the measured candidates within `FINALIST_MARGIN` of
the fastest (at most `FINALISTS` of them, the fastest first), are timed again in turns, and the
fastest in turns wins; each finalist's trial keeps both times (`Trial.turns_us`). The builds
of candidates that may still be finalists are kept until then.

A build or measure may also find, once the candidate is built, that it cannot gain over
another candidate (e.g. its compiled kernel's grid takes more waves than that of the
candidate it is a twin of): it raises `CandidatePruned`, and the candidate is pruned as
construct's refusals are, unmeasured and without a warning.

A construct or build that raises one of `CANDIDATE_ERRORS` (the project's "this candidate does
not fit or does not work" types) or a measure that raises one, or returns anything but a finite
number >= 0, is a failed trial: recorded, reported in one `RuntimeWarning`, never chosen. Any
other exception is a bug and propagates. A measure that raises one of `TRANSIENT_ERRORS` (the
timing protocol's refusal on a busy host) is tried again, up to `MEASURE_ATTEMPTS` times; if it
never succeeds, the trial fails and the choice is returned but not stored, so that a later
process tunes again rather than keep a choice that left a candidate unmeasured; so does a
`measure_in_turns` that raises one of `CANDIDATE_ERRORS` (retried as `measure` is when
transient): the fastest one after another is then the choice, with a warning. The
fastest measured candidate wins; equal times go to the one earlier in the search space, so the
choice is a function of the times alone.

Storage: the record store of the kernel cache (`backend.cache.RecordStore`, same directory, same
ownership, permission, hash and atomic-replace rules as the CUBINs), under
``record_key(namespace, {"key": key, "space": space_digest(candidates)})``: a new search space
is a new record. The record holds the namespace, the key, the space digest, the choice, its
time and every trial. A lookup that finds a usable record (the store accepts the file, and it
names this namespace, key and space and a choice among the candidates) constructs and builds
that choice alone and measures nothing: a warm tuning is deterministic. Anything else (no
record, a corrupt, foreign or symlinked file, a stale choice, a choice that no longer builds)
is tuned again and the record replaced.

A cold tuning shows its progress on stderr (or the stream given): tqdm's bar when tqdm can be
imported, else one line rewritten in place on a terminal; a summary line at the end either way.

M buckets (`m_bucket`): two per octave, with boundaries at 2^j and 3 * 2^(j-1), so a bucket's
largest M is less than 1.5 times its smallest (the smallest is what a tuning measures):

    M        1    2    3    4-5   6-7   8-11   12-15   16-23   24-31   32-47  ...
    bucket   1    2    3    4     6     8      12      16      24      32     ...

    result = autotune("matmul/1", {"gpu": "NVIDIA H200", "k": 4096}, candidates,
                      construct=make_program, build=compile_program, measure=time_on_gpu)
    result.choice, result.built, result.from_cache, result.trials
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Generic, TextIO, TypeVar

from backend.cache import RecordStore, default_record_store, record_key
from backend.errors import CompilationError, LaunchError, TimingError
from ir.errors import SpecializationError, VerificationError

Scalar = str | int | float | bool | None
"""A JSON scalar: what key fields and candidate parameters may hold."""

Constructed = TypeVar("Constructed")
Built = TypeVar("Built")


class TuningError(ValueError):
    """A search space, key or tuning that cannot give a choice: an empty or malformed search
    space, a malformed key, no candidate that could be measured, a candidate whose result is
    wrong; the message names the value and what was expected."""


class CandidatePruned(TuningError):
    """Raised by a tuning's `build` or `measure` for a candidate that, once built, is found not
    worth measuring; the message says why. The trial is "pruned", with no warning."""


PRUNING_ERRORS: tuple[type[Exception], ...] = (VerificationError, SpecializationError)
"""What `construct` raises for a candidate whose program is ill-formed or does not fit the
problem: the candidate is pruned."""

CANDIDATE_ERRORS: tuple[type[Exception], ...] = (
    VerificationError,
    SpecializationError,
    CompilationError,
    LaunchError,
    TuningError,
)
"""What `build` or `measure` raises for a candidate that fails (does not compile, cannot
launch, computes a wrong result): a failed trial, not a failed tuning."""

TRANSIENT_ERRORS: tuple[type[Exception], ...] = (TimingError,)
"""What `measure` raises when the measurement, not the candidate, failed (a busy host): the
measure is tried again, up to `MEASURE_ATTEMPTS` times in all; a candidate that still fails so
is a failed trial, and the tuning's choice is then not stored (a later process tunes again),
since the candidate it left out may have been the fastest."""
MEASURE_ATTEMPTS = 3
"""Times `measure` is tried on a candidate whose measurement raises a `TRANSIENT_ERRORS`."""

FINALIST_MARGIN = 0.08
"""How far above the fastest one-after-another time a candidate may be and still be timed again
in turns: 8 %, above the spread of one kernel's times over a process on an H100 at the
prefill's sizes (4985.9 to 5326.3 us, 6.8 %: `benchmarks/results/quantized_matmul_notes.md`,
"Prefill timed in turns"), so that such a drift cannot keep the fastest kernel out."""
FINALISTS = 7
"""At most this many finalists are timed in turns, the fastest one after another first: at 4096
rows of 8192 x 57344, the five prefill paths timed in turns there came within 2.8 % (i4) and
5.0 % (i8) of each other (`quantized_matmul_prefill_paths_in_turns_h100.*`), and the batch
tuner's space holds fourteen, so four finalists could leave the fastest of such a group out;
seven leave room for the forms that rank lower by the protocol than back to back (the
clustered grouped tile: 2.8 % slower by the one, 3.9 % faster by the other)."""

RECORD_FORMAT = 1
"""Version of the record's fields; a record of another version is tuned again."""


@dataclass(frozen=True)
class MBucket:
    """The batches [lo, hi) that share one tuning; `lo` is the M a tuning measures. Holds the
    ints (not bools, as `m_bucket` refuses them) from `lo` up to, not including, `hi`."""

    lo: int
    hi: int

    def __contains__(self, m: object) -> bool:
        return isinstance(m, int) and not isinstance(m, bool) and self.lo <= m < self.hi


def m_bucket(m: int) -> MBucket:
    """The bucket of batch `m` (two per octave; see the module docstring's table).

    For 2^j <= m < 2^(j+1): [2^j, 3 * 2^(j-1)) or [3 * 2^(j-1), 2^(j+1)) (j >= 1), and [1, 2)
    for m = 1. Raises `TuningError` for anything but an int >= 1.
    """
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise TuningError(f"batch m={m!r}; expected an int >= 1")
    octave = 1 << (m.bit_length() - 1)
    if octave == 1:
        return MBucket(1, 2)
    middle = octave + octave // 2
    return MBucket(octave, middle) if m < middle else MBucket(middle, 2 * octave)


@dataclass(frozen=True)
class Trial:
    """One candidate's fate in a cold tuning: `status` "pruned" (construct refused it, or
    build or measure raised `CandidatePruned`),
    "failed" (build or measure raised, or measure gave no time) or "measured"; `us` its time
    when measured; `turns_us` its time by `measure_in_turns` when it was a finalist (in
    turns, or back to back for long ones; the module docstring);
    `detail` the reason otherwise."""

    candidate: dict[str, Scalar]
    status: str
    us: float | None = None
    detail: str = ""
    turns_us: float | None = None

    def as_record(self) -> dict[str, Any]:
        record = {
            "candidate": self.candidate,
            "status": self.status,
            "us": self.us,
            "detail": self.detail,
        }
        if self.turns_us is not None:
            record["turns_us"] = self.turns_us
        return record


@dataclass(frozen=True)
class TuningResult(Generic[Built]):
    """What `autotune` returns: the `choice` (a candidate), what `build` made of it, whether it
    came `from_cache` (then nothing was measured and `trials` is empty), its time `us` (as
    measured when it was tuned: in turns when finalists were timed so) and the `trials` of a
    cold tuning, in search-space order."""

    choice: dict[str, Scalar]
    built: Built
    from_cache: bool
    us: float
    trials: tuple[Trial, ...] = ()


def space_digest(candidates: Sequence[Mapping[str, Scalar]]) -> str:
    """The sha256 of the search space: its candidates in order, as canonical JSON."""
    return hashlib.sha256(_canonical([dict(c) for c in candidates]).encode("ascii")).hexdigest()


def autotune(
    namespace: str,
    key: Mapping[str, Scalar],
    candidates: Sequence[Mapping[str, Scalar]],
    *,
    construct: Callable[[dict[str, Scalar]], Constructed],
    build: Callable[[dict[str, Scalar], Constructed], Built],
    measure: Callable[[Built], float],
    measure_in_turns: Callable[[list[Built]], Sequence[float]] | None = None,
    prepare: Callable[[list[Constructed]], None] | None = None,
    store: RecordStore | None = None,
    workers: int | None = None,
    progress: bool | TextIO = True,
) -> TuningResult[Built]:
    """The fastest of `candidates` for `key` (see the module docstring for every step).

    `namespace` names the tuned operation and its version (e.g. ``"register_dequant_matmul/1"``);
    `measure_in_turns`, when given, times the finalists again in turns;
    `prepare`, when given, gets every constructed candidate of a cold tuning at once, before
    the builds (e.g. to lower them all in worker processes);
    `store` defaults to `backend.cache.default_record_store()`; `workers` is the size of the
    build pool (default: the CPU count); `progress` True shows the cold tuning's progress on
    stderr, a stream shows it there, False shows nothing.

    Raises `TuningError` for an empty or malformed search space (a candidate that is not a
    mapping of str to JSON scalars, ints of at most 64 bits, or two equal candidates), a
    malformed key, when no candidate could be measured (the message lists every trial), or
    for a `measure_in_turns` that gives other than one finite time >= 0 per finalist;
    `CacheError` when the cache directory cannot be trusted.
    """
    space = _checked_candidates(candidates)
    key = _checked_mapping(key, "tuning key")
    if not isinstance(namespace, str) or not namespace:
        raise TuningError(f"tuning namespace {namespace!r}; expected a non-empty string")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)):
        raise TuningError(f"workers={workers!r}; expected an int >= 1 or None")
    if workers is not None and workers < 1:
        raise TuningError(f"workers={workers}; expected an int >= 1 or None")
    store = default_record_store() if store is None else store
    digest = space_digest(space)
    entry = record_key(namespace, {"key": key, "space": digest})
    warm = _usable_record(store.load(entry), namespace, key, digest, space)
    if warm is not None:
        choice, us = warm
        try:
            built = build(choice, construct(choice))
        except CANDIDATE_ERRORS:
            pass  # the recorded choice no longer builds: tune again
        else:
            return TuningResult(choice, built, True, us)
    return _tune(
        namespace,
        key,
        space,
        digest,
        entry,
        store,
        construct,
        build,
        measure,
        measure_in_turns,
        prepare,
        workers,
        progress,
    )


def _tune(
    namespace: str,
    key: dict[str, Scalar],
    space: list[dict[str, Scalar]],
    digest: str,
    entry: str,
    store: RecordStore,
    construct: Callable[[dict[str, Scalar]], Any],
    build: Callable[[dict[str, Scalar], Any], Any],
    measure: Callable[[Any], float],
    measure_in_turns: Callable[[list[Any]], Sequence[float]] | None,
    prepare: Callable[[list[Any]], None] | None,
    workers: int | None,
    progress: bool | TextIO,
) -> TuningResult[Any]:
    """The cold tuning: prune, prepare, build in parallel, measure in order, time the finalists
    in turns, record the winner."""
    started = time.monotonic()
    trials: list[Trial | None] = [None] * len(space)
    constructed: dict[int, Any] = {}
    for index, candidate in enumerate(space):
        try:
            constructed[index] = construct(candidate)
        except PRUNING_ERRORS as error:
            trials[index] = Trial(candidate, "pruned", detail=str(error))
    if prepare is not None and constructed:
        prepare(list(constructed.values()))
    label = f"{namespace} {_describe(key)}"
    display = _Progress(label, len(constructed), progress)
    best: int | None = None
    # Only the builds that may still be finalists are kept: the others' modules can go.
    kept: dict[int, Any] = {}
    unmeasured = 0  # candidates failed for want of a measurement (`TRANSIENT_ERRORS`)
    pool = ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1)
    try:
        futures = {i: pool.submit(build, space[i], constructed[i]) for i in constructed}
        for index, future in futures.items():
            candidate = space[index]
            try:
                built = future.result()
                us = _measure_retrying(measure, built)
            except CandidatePruned as error:
                trials[index] = Trial(candidate, "pruned", detail=str(error))
                display.advance(None if best is None else trials[best].us)
                continue
            except CANDIDATE_ERRORS as error:
                trials[index] = Trial(
                    candidate, "failed", detail=f"{type(error).__name__}: {error}"
                )
                unmeasured += isinstance(error, TRANSIENT_ERRORS)
                display.advance(None if best is None else trials[best].us)
                continue
            if (
                isinstance(us, bool)
                or not isinstance(us, int | float)
                or not math.isfinite(us)
                or us < 0
            ):
                trials[index] = Trial(
                    candidate,
                    "failed",
                    detail=f"measure gave {us!r}; expected a finite time >= 0 in us",
                )
            else:
                trials[index] = Trial(candidate, "measured", us=float(us))
                if best is None or trials[index].us < trials[best].us:
                    best = index
                kept[index] = built
                kept = _finalists(kept, trials, best, measure_in_turns is not None)
            display.advance(None if best is None else trials[best].us)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    turns, turns_error = "", ""
    if measure_in_turns is not None and len(kept) > 1:
        try:
            times = _measure_retrying(measure_in_turns, list(kept.values()))  # type: ignore[arg-type]
        except CANDIDATE_ERRORS as error:
            turns_error = f"{type(error).__name__}: {error}"
            turns = ", not timed in turns"
        else:
            best = _fastest_in_turns(times, list(kept), trials)
            turns = f", the fastest of {len(kept)} in turns"
    best_built = None if best is None else kept[best]
    finished = tuple(trial for trial in trials if trial is not None)
    failed = [trial for trial in finished if trial.status == "failed"]
    pruned = sum(trial.status == "pruned" for trial in finished)
    if best is None:
        display.close(f"tuning {label}: no candidate could be measured")
        reasons = "; ".join(f"{_canonical(t.candidate)}: {t.status}: {t.detail}" for t in finished)
        raise TuningError(
            f"tuning {label}: none of the {len(space)} candidates could be measured ({reasons}); "
            "expected at least one that builds and runs"
        )
    choice = space[best]
    us = trials[best].turns_us if trials[best].turns_us is not None else trials[best].us
    display.close(
        f"tuned {label}: {len(space)} candidates, {pruned} pruned, "
        f"{len(failed)} failed; best {us:.2f} us with {_describe(choice)}{turns} "
        f"({time.monotonic() - started:.1f} s)"
    )
    if turns_error:
        warnings.warn(
            f"tuning {label}: the {len(kept)} finalists could not be timed in turns "
            f"({turns_error}); the choice is the fastest one after another, not stored",
            RuntimeWarning,
            stacklevel=3,
        )
    if failed:
        warnings.warn(
            f"tuning {label}: {len(failed)} candidates failed: "
            + "; ".join(f"{_describe(t.candidate)}: {t.detail}" for t in failed)
            + (
                f"; the choice is not stored: {unmeasured} could not be measured "
                f"({MEASURE_ATTEMPTS} attempts each), which says nothing of the candidate"
                if unmeasured
                else ""
            ),
            RuntimeWarning,
            stacklevel=3,
        )
    if unmeasured or turns_error:
        return TuningResult(choice, best_built, False, us, finished)
    record = {
        "format": RECORD_FORMAT,
        "namespace": namespace,
        "key": key,
        "space": digest,
        "choice": choice,
        "us": us,
        "trials": [trial.as_record() for trial in finished],
    }
    try:
        store.store(entry, record)
    except OSError as error:
        warnings.warn(
            f"could not store the tuning of {label} in {str(store.directory)!r}: {error}",
            RuntimeWarning,
            stacklevel=3,
        )
    return TuningResult(choice, best_built, False, us, finished)


def _finalists(
    kept: dict[int, Any], trials: list[Trial | None], best: int, in_turns: bool
) -> dict[int, Any]:
    """The builds of `kept` that may still be finalists (in search-space order): those within
    `FINALIST_MARGIN` of the fastest time so far, at most `FINALISTS`, the fastest first; the
    fastest alone when nothing is timed in turns."""
    if not in_turns:
        return {best: kept[best]}
    limit = trials[best].us * (1 + FINALIST_MARGIN)  # type: ignore[union-attr]
    near = [i for i in kept if trials[i].us <= limit]  # type: ignore[union-attr,operator]
    near = sorted(near, key=lambda i: (trials[i].us, i))[:FINALISTS]  # type: ignore[union-attr]
    return {i: kept[i] for i in sorted(near)}


def _fastest_in_turns(times: object, order: list[int], trials: list[Trial | None]) -> int:
    """Record the finalists' `times` in turns (in the order of their indices `order`) in their
    trials and return the index of the fastest (the earliest of equal times); `TuningError`
    unless `times` holds one finite time >= 0 for each."""
    if (
        isinstance(times, str | bytes)
        or not isinstance(times, Sequence)
        or len(times) != len(order)
        or any(
            isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0
            for t in times
        )
    ):
        raise TuningError(
            f"measure_in_turns gave {times!r} for {len(order)} finalists; expected one finite "
            "time >= 0 in us for each"
        )
    for index, us in zip(order, times, strict=True):
        trials[index] = replace(trials[index], turns_us=float(us))  # type: ignore[arg-type]
    return min(zip(order, times, strict=True), key=lambda pair: (float(pair[1]), pair[0]))[0]


def _measure_retrying(measure: Callable[[Any], float], built: Any) -> float:
    """`measure(built)`, tried again (up to `MEASURE_ATTEMPTS` times in all) while it raises one
    of `TRANSIENT_ERRORS`; the last attempt's error propagates."""
    for _ in range(MEASURE_ATTEMPTS - 1):
        try:
            return measure(built)
        except TRANSIENT_ERRORS:
            pass
    return measure(built)


def _usable_record(
    record: dict[str, Any] | None,
    namespace: str,
    key: dict[str, Scalar],
    digest: str,
    space: list[dict[str, Scalar]],
) -> tuple[dict[str, Scalar], float] | None:
    """(choice, time) of a record that answers this tuning, else None."""
    if record is None:
        return None
    expected = {"format": RECORD_FORMAT, "namespace": namespace, "key": key, "space": digest}
    if any(record.get(name) != value for name, value in expected.items()):
        return None
    choice, us = record.get("choice"), record.get("us")
    if not isinstance(choice, dict) or choice not in space:
        return None
    if isinstance(us, bool) or not isinstance(us, int | float):
        return None
    try:
        us = float(us)  # an int of hundreds of digits is past every float
    except OverflowError:
        return None
    if not math.isfinite(us):  # 1e400 in the JSON text reads as inf
        return None
    return space[space.index(choice)], us


def _checked_mapping(value: object, what: str) -> dict[str, Scalar]:
    """`value` as a dict of str to JSON scalars, else `TuningError`."""
    if not isinstance(value, Mapping):
        raise TuningError(f"{what} {value!r}; expected a mapping of str to JSON scalars")
    for name, item in value.items():
        if not isinstance(name, str):
            raise TuningError(f"{what} {value!r}: key {name!r} is not a str")
        if isinstance(item, int) and not -(2**63) <= item < 2**63:
            # Checked first: JSON (and repr) cannot write an int past 4300 digits.
            raise TuningError(
                f"{what}: {name} is an int of {item.bit_length()} bits; expected a str, int "
                "(of at most 64 bits), bool, finite float or None"
            )
        scalar = item is None or isinstance(item, str | int | bool)
        scalar = scalar or (isinstance(item, float) and math.isfinite(item))
        if not scalar:
            raise TuningError(
                f"{what} {value!r}: {name}={item!r}; expected a str, int, bool, finite float "
                "or None"
            )
    return dict(value)


def _checked_candidates(candidates: object) -> list[dict[str, Scalar]]:
    """The search space as a list of dicts, else `TuningError` (empty, malformed, repeated)."""
    if isinstance(candidates, Mapping | str) or not isinstance(candidates, Sequence):
        raise TuningError(f"search space {candidates!r}; expected a sequence of candidates")
    space = [_checked_mapping(candidate, "candidate") for candidate in candidates]
    if not space:
        raise TuningError("an empty search space; expected at least one candidate")
    texts = [_canonical(candidate) for candidate in space]
    repeated = sorted({text for text in texts if texts.count(text) > 1})
    if repeated:
        raise TuningError(f"candidates {', '.join(repeated)} appear twice; expected distinct ones")
    return space


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _describe(fields: Mapping[str, Scalar]) -> str:
    return " ".join(f"{name}={value}" for name, value in fields.items())


class _Progress:
    """The progress display of a cold tuning: tqdm when importable, else one line rewritten in
    place on a terminal (nothing but the summary on another stream)."""

    def __init__(self, label: str, total: int, progress: bool | TextIO) -> None:
        self._stream: TextIO | None = sys.stderr if progress is True else progress or None
        self._label, self._total, self._done = label, total, 0
        self._bar: Any = None
        self._width = 0
        if self._stream is None:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self._bar = tqdm(total=total, desc=f"tuning {label}", unit="candidate", file=self._stream)

    def advance(self, best_us: float | None) -> None:
        """One more candidate built and measured (or failed); `best_us` the best so far."""
        self._done += 1
        best = "" if best_us is None else f", best {best_us:.2f} us"
        if self._bar is not None:
            self._bar.set_postfix_str(best.lstrip(", "), refresh=False)
            self._bar.update(1)
        elif self._stream is not None and self._stream.isatty():
            line = f"tuning {self._label}: {self._done}/{self._total} measured{best}"
            self._stream.write("\r" + line.ljust(self._width))
            self._stream.flush()
            self._width = len(line)

    def close(self, summary: str) -> None:
        """End the display with the `summary` line."""
        if self._stream is None:
            return
        if self._bar is not None:
            self._bar.close()
        elif self._width:
            self._stream.write("\r" + " " * self._width + "\r")
        self._stream.write(summary + "\n")
        self._stream.flush()

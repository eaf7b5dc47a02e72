"""The verdict of a proof, and the one place where the Z3 solver is configured and run.

Every check of this package answers with a `ProofResult`: `holds` is True when the solver proved
the claim, False when a counterexample was found *and confirmed by evaluating both sides on
ints*, None when neither happened (resource limit, timeout, an unconfirmed model, an expression
outside the translation). An unknown is never reported as proven.

The solver is bounded twice: by Z3's resource limit `rlimit` (a count of solver steps, the same
on every machine whatever its load, so tests stay deterministic) and by a wall-clock `timeout`
in seconds.

In Jupyter a result shows its verdict line; a refuted `check_equivalent` of two register layouts
of one shape and thread count also shows the picture of where they differ
(`layout_algebra.render.difference_html`).
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import z3

from proofs.errors import ProofError

DEFAULT_TIMEOUT = 10.0
"""Seconds the solver may run for one query when the caller gives no timeout."""
MAX_TIMEOUT = 4_294_967
"""The longest timeout, in seconds: Z3 counts it in milliseconds in an unsigned 32-bit int."""


@dataclass(frozen=True)
class ProofResult:
    """The outcome of one check.

    `holds`: True (proved), False (refuted) or None (unknown). `counterexample`: for a
    refutation, a dict naming the domain point(s) and the images that break the claim (each
    check documents its keys); None otherwise, and also for refutations that need no solver
    (e.g. layouts whose domains already differ). `reason`: one sentence saying what was shown
    or why not. `seconds`: wall-clock time of the whole check. `compared`: the two objects
    `check_equivalent` compared, ``()`` for every other check; it takes no part in equality or
    the repr.
    """

    holds: bool | None
    counterexample: dict[str, Any] | None
    reason: str
    seconds: float
    compared: tuple[Any, ...] = field(default=(), compare=False, repr=False)

    def _repr_html_(self) -> str:
        """The verdict line and, for a refuted equivalence of two register layouts of one shape
        and thread count, the picture of where they differ (a one-line summary instead when a
        layout has more than `printing.PICTURE_LIMIT` thread-register pairs)."""
        verdict = {True: "proved", False: "refuted", None: "unknown"}[self.holds]
        out = [
            '<div style="font-family:monospace;font-size:12px;margin-bottom:4px">'
            f"<b>{verdict}</b>: {html.escape(self.reason)} "
            f"({round(self.seconds * 1000)} ms)</div>"
        ]
        if self.holds is False and len(self.compared) == 2:
            out.append(_difference_picture(*self.compared))
        return "\n".join(out)


def _difference_picture(a: Any, b: Any) -> str:
    """HTML of where `a` and `b` differ, or "" when they are not two register layouts of one
    shape and thread count (their verdict's reason already says how their domains differ)."""
    from layout_algebra.printing import PICTURE_LIMIT, too_large
    from layout_algebra.register import RegisterLayout
    from layout_algebra.render import difference_html

    if not (isinstance(a, RegisterLayout) and isinstance(b, RegisterLayout)):
        return ""
    if a.shape != b.shape or a.num_threads != b.num_threads:
        return ""
    summary = too_large(a, PICTURE_LIMIT, "picture") or too_large(b, PICTURE_LIMIT, "picture")
    if summary is not None:
        return f"<pre>{html.escape(summary)}</pre>"
    return difference_html(a, b)


def check_limits(timeout: float, rlimit: int | None) -> None:
    """Raise ProofError unless `timeout` is a positive number of seconds up to `MAX_TIMEOUT` and
    `rlimit` is None or a positive int."""
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not 0 < timeout <= MAX_TIMEOUT
    ):
        raise ProofError(
            f"timeout must be a positive number of seconds, got {timeout!r} (at most "
            f"{MAX_TIMEOUT}: Z3 counts milliseconds in an unsigned 32-bit int)"
        )
    if rlimit is not None and (isinstance(rlimit, bool) or not isinstance(rlimit, int)):
        raise ProofError(f"rlimit must be a positive int or None, got {rlimit!r}")
    if rlimit is not None and rlimit < 1:
        raise ProofError(f"rlimit must be a positive int or None, got {rlimit!r}")


@dataclass(frozen=True)
class Search:
    """What one solver query found: `verdict` (z3.sat, z3.unsat or z3.unknown), the `model` when
    sat, and the solver's `reason_unknown` when unknown."""

    verdict: Any
    model: Any
    reason_unknown: str


def search(
    constraints: Sequence[Any], violation: Any, timeout: float, rlimit: int | None
) -> Search:
    """Ask Z3 for a model of `constraints` and `violation` (terms of one Z3 context, the
    solver's) within `timeout` seconds and `rlimit` resource units (no bound when None)."""
    solver = z3.Solver(ctx=violation.ctx)
    solver.set("timeout", max(1, int(timeout * 1000)))
    if rlimit is not None:
        solver.set("rlimit", rlimit)
    solver.add(*constraints)
    solver.add(violation)
    verdict = solver.check()
    if verdict == z3.sat:
        return Search(verdict, solver.model(), "")
    if verdict == z3.unknown:
        return Search(verdict, None, solver.reason_unknown())
    return Search(verdict, None, "")


def conjunction(results: Iterable[ProofResult]) -> bool | None:
    """The verdict of several claims together: False when one is refuted, else True when every
    one is proved (also for none), else None."""
    verdicts = [result.holds for result in results]
    if False in verdicts:
        return False
    return True if all(verdicts) else None


def unknown(reason: str, started: float) -> ProofResult:
    """A result with `holds` None."""
    return ProofResult(None, None, reason, elapsed(started))


def elapsed(started: float) -> float:
    """Seconds since `started` (a `time.perf_counter()` reading)."""
    return time.perf_counter() - started

"""Validation of the backend's lowering: every printed address equals its layouts' meaning.

The backend records each address expression it prints into a kernel (`backend.lower.Access`:
the expression `expr` in units of `unit_bits`, and the layouts it stands for). This module proves,
with Z3, for every thread 0 <= t < num_threads and every value of the scalar variables within
their declared bounds and under the access's `assumptions` (loop ranges and strides, if
conditions), the three claims an access makes:

- address: ``expr * unit_bits == (spec(local_index + j) - j) * element_bits`` for every
  j < width, where the specification ``spec(i) = memory.offset(origin + register.map(t, i))``
  is built here from the layouts (the register layout's own `map` and the memory layout's own
  `offset`, unsimplified), not from the printed text: the vector's registers sit at consecutive
  elements starting at the printed address;
- alignment (vectors): ``expr * unit_bits`` is a multiple of ``width * element_bits``, the
  vector's size;
- mask (global accesses): the printed guard is true exactly when every element
  ``origin + register.map(t, local_index + j)`` lies inside the memory tensor's shape.

A counterexample from the solver is confirmed by evaluating both sides on ints before it is
reported (holds False); an unconfirmed model, the resource limit or the timeout give holds None.

    report = validate_lowering(backend.compile(program, "sm_90a"))
    report.holds          # True when every access is proved
    report.failures       # (access, ProofResult) pairs refuted, with the point and both values
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import z3

from backend.lower import Access
from layout_algebra.symbolic import Expr, as_expr, evaluate, logical_and
from proofs.encode import Encoder
from proofs.errors import EncodingError
from proofs.result import (
    DEFAULT_TIMEOUT,
    ProofResult,
    check_limits,
    elapsed,
    search,
    unknown,
)

DEFAULT_RLIMIT = 2_000_000
"""Z3 resource units one access may use when the caller gives no limit (a few seconds at most;
the backend's accesses take a tiny fraction of it)."""


def specification(access: Access, local_index: int) -> Expr:
    """The element offset register `local_index` of thread `access.thread` must address:
    ``memory.offset(origin + register.map(t, local_index))``."""
    coords = access.register.map(access.thread, local_index)
    return as_expr(access.memory.offset([o + c for o, c in zip(access.origin, coords)]))


def inside(access: Access, local_index: int) -> Expr:
    """The condition that register `local_index` of the thread lies inside the memory shape."""
    coords = access.register.map(access.thread, local_index)
    condition: Expr = as_expr(1)
    for origin, coord, extent in zip(access.origin, coords, access.memory.shape):
        condition = logical_and(condition, origin + coord >= 0)
        condition = logical_and(condition, origin + coord < extent)
    return condition


@dataclass(frozen=True)
class _Claim:
    """One claim of an access, as Z3 and as something to evaluate on ints."""

    name: str
    local_index: int
    formula: Any
    printed: Expr
    expected: Expr


def _claims(access: Access, encoder: Encoder) -> list[_Claim]:
    claims = []
    printed_bits = as_expr(access.expr) * access.unit_bits
    for j in range(access.width):
        i = access.local_index + j
        expected_bits = (specification(access, i) - j) * access.element_bits
        formula = encoder.term(printed_bits) == encoder.term(expected_bits)
        claims.append(_Claim("address", i, formula, printed_bits, expected_bits))
    if access.width > 1:
        size = access.width * access.element_bits
        remainder = printed_bits % size
        formula = encoder.term(remainder) == 0
        claims.append(_Claim("alignment", access.local_index, formula, remainder, as_expr(0)))
    if access.mask is not None:
        everything: Expr = as_expr(1)
        for j in range(access.width):
            everything = logical_and(everything, inside(access, access.local_index + j))
        formula = encoder.truth(access.mask) == encoder.truth(everything)
        claims.append(
            _Claim("mask", access.local_index, formula, access.mask.ne(0), everything.ne(0))
        )
    return claims


def _model_values(model: Any, encoder: Encoder) -> dict[str, int]:
    return {
        name: model.eval(term, model_completion=True).as_long()
        for name, term in encoder.variables.items()
    }


def validate_access(
    access: Access, *, timeout: float = DEFAULT_TIMEOUT, rlimit: int | None = DEFAULT_RLIMIT
) -> ProofResult:
    """Prove the claims of one access (see the module docstring).

    The counterexample of a refutation is ``{"claim": "address" | "alignment" | "mask",
    "t": thread, "i": local index, "variables": {name: value}, "printed": value,
    "expected": value}`` (for an address: both sides in bits from the tensor's base; for a mask:
    the printed guard and the truth of "all inside"). Raises ProofError for a bad `timeout` or
    `rlimit`.
    """
    check_limits(timeout, rlimit)
    started = time.perf_counter()
    encoder = Encoder()
    try:
        thread = encoder.term(access.thread)
        claims = _claims(access, encoder)
        facts = [encoder.truth(fact) for fact in access.assumptions]
        defined = [encoder.defined(claim.expected) for claim in claims]
        printed_defined = [encoder.defined(claim.printed) for claim in claims]
    except EncodingError as error:
        return unknown(f"an expression is outside the Z3 translation: {error}", started)
    constraints = [
        thread >= 0,
        thread < access.register.num_threads,
        *encoder.bounds(),
        *facts,
        *defined,
    ]
    violation = z3.Or(*(z3.Not(c.formula) for c in claims), *(z3.Not(d) for d in printed_defined))
    found = search(constraints, violation, timeout, rlimit)
    if found.verdict == z3.unsat:
        return ProofResult(
            True,
            None,
            f"proved {len(claims)} claims for every thread and every value of the variables",
            elapsed(started),
        )
    if found.verdict != z3.sat:
        return unknown(f"the solver gave up: {found.reason_unknown}", started)
    values = _model_values(found.model, encoder)
    thread_value = values[access.thread.name]
    variables = {k: v for k, v in values.items() if k != access.thread.name}
    for claim in claims:
        try:
            expected = int(evaluate(claim.expected, values))
        except ArithmeticError as error:
            return unknown(f"the solver's point does not evaluate: {error}", started)
        try:
            printed: int | None = int(evaluate(claim.printed, values))
        except ArithmeticError:
            printed = None
        if printed != expected:
            what = claim.name if printed is not None else f"{claim.name} (printed: undefined)"
            return ProofResult(
                False,
                {
                    "claim": claim.name,
                    "t": thread_value,
                    "i": claim.local_index,
                    "variables": variables,
                    "printed": printed,
                    "expected": expected,
                },
                f"the {what} claim of register {claim.local_index} fails at thread {thread_value}",
                elapsed(started),
            )
    return unknown("the solver's counterexample did not confirm on ints", started)


@dataclass(frozen=True)
class LoweringValidation:
    """The validation of every access of a kernel: `results`, pairs (access, ProofResult) in
    the order the accesses were printed."""

    results: tuple[tuple[Access, ProofResult], ...]

    @property
    def holds(self) -> bool | None:
        """True when every access is proved, False when one is refuted, else None."""
        verdicts = [result.holds for _, result in self.results]
        if False in verdicts:
            return False
        return True if all(verdicts) else None

    @property
    def failures(self) -> list[tuple[Access, ProofResult]]:
        """The refuted accesses with their results."""
        return [(access, result) for access, result in self.results if result.holds is False]

    @property
    def unknown(self) -> list[tuple[Access, ProofResult]]:
        """The accesses neither proved nor refuted."""
        return [(access, result) for access, result in self.results if result.holds is None]


def validate_lowering(
    kernel: Any,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    rlimit: int | None = DEFAULT_RLIMIT,
) -> LoweringValidation:
    """Validate every access of `kernel`: a `backend.CompiledKernel`, a
    `backend.lower.LoweredKernel` (anything with `accesses`) or an iterable of `Access`.

    Each access is one solver query bounded by `timeout` seconds and `rlimit` resource units.
    """
    accesses: Iterable[Access] = getattr(kernel, "accesses", kernel)
    return LoweringValidation(
        tuple(
            (access, validate_access(access, timeout=timeout, rlimit=rlimit)) for access in accesses
        )
    )

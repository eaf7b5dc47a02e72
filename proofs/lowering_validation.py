"""Validation of the backend's lowering: every printed address equals its layouts' meaning.

The backend records each address expression it prints into a kernel (`backend.lower.Access`:
the expression `expr` in units of `unit_bits`, and the layouts it stands for). This module proves,
with Z3, for every thread 0 <= t < num_threads and every value of the scalar variables within
their declared bounds and under the access's `assumptions` (loop ranges and strides, if
conditions, and each int parameter's declared divisor: ``k % m == 0`` for
``int_param("k", multiple_of=m)``, which the launch check enforces), the three claims an access
makes:

- address: ``expr * unit_bits + j * element_bits == spec(local_index + j) * element_bits``
  for every j < width, where the specification
  ``spec(i) = memory.offset(origin + register.map(t, i))`` is built here from the layouts (the
  register layout's own `map` and the memory layout's own `offset`, unsimplified), not from the
  printed text: the vector's registers sit at consecutive elements from the printed address;
- alignment (vectors): ``expr * unit_bits`` is a multiple of ``width * element_bits``, the
  vector's size;
- mask (global accesses): the printed guard is true exactly when every element
  ``origin + register.map(t, local_index + j)`` lies inside the memory tensor's shape;
- count (zero-filling copies): register ``local_index + j`` lies inside the shape exactly when
  j is below the printed count of registers read.

Encodings. The expressions are translated by the shared encoder `proofs.encode.Encoder`: in
Z3's integer theory, except for accesses whose expressions use XOR, AND or OR (swizzled shared
memory), which are proved in its whole-query bit-vector mode, where the bitwise operators are
native. That form is exact because `proofs.encode.bitvector_width` admits it only when every
sub-expression of the access has finite, non-negative bounds (`Expr.bounds`, from the
variables' declared bounds) and every divisor is at least 1, so a width two bits above the
largest bound holds every value; an access with a possibly negative or unbounded part, or a
possibly zero divisor, stays in integers.

A counterexample from the solver is confirmed by evaluating both sides on ints before it is
reported (holds False); an unconfirmed model, the resource limit or the timeout give holds None.

The claims of the tensor-core plans a kernel uses (`backend.tensor_core`: the fragments an
``mma.sync`` computes, the addresses an ``ldmatrix`` reads) are proved too, each by
`proofs.check_equivalent` of what the printed code computes and what the IR asks.

    report = validate_lowering(backend.compile(program, "sm_90a"))
    report.holds          # True when every access and plan claim is proved
    report.failures       # (access or claim, ProofResult) pairs refuted, with the point
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import z3

from backend.lower import Access
from backend.tensor_core import Claim
from layout_algebra.symbolic import Expr, as_expr, evaluate, logical_and
from proofs.checks import check_equivalent
from proofs.encode import Encoder, bitvector_width, has_bitwise
from proofs.errors import EncodingError
from proofs.result import (
    DEFAULT_TIMEOUT,
    ProofResult,
    check_limits,
    conjunction,
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
    """One claim of an access: ``printed == expected`` (numbers), or, when `truth`, both are
    conditions that must hold together (``printed != 0`` exactly when ``expected != 0``)."""

    name: str
    local_index: int
    printed: Expr
    expected: Expr
    truth: bool = False


def _claims(access: Access) -> list[_Claim]:
    claims = []
    printed_bits = as_expr(access.expr) * access.unit_bits
    for j in range(access.width):
        i = access.local_index + j
        printed_element = printed_bits + j * access.element_bits
        expected_bits = specification(access, i) * access.element_bits
        claims.append(_Claim("address", i, printed_element, expected_bits))
    if access.width > 1:
        remainder = printed_bits % (access.width * access.element_bits)
        claims.append(_Claim("alignment", access.local_index, remainder, as_expr(0)))
    if access.mask is not None:
        everything: Expr = as_expr(1)
        for j in range(access.width):
            everything = logical_and(everything, inside(access, access.local_index + j))
        claims.append(_Claim("mask", access.local_index, access.mask, everything, truth=True))
    if access.count is not None:
        for j in range(access.width):
            i = access.local_index + j
            claims.append(_Claim("count", i, access.count > j, inside(access, i), truth=True))
    return claims


# ---------------------------------------------------------------------------------- encodings

Query = tuple[list[Any], Any, Encoder]
"""(constraints, violation, the encoder of its terms and variables) of one solver query."""


def _integer_fact(encoder: Encoder, fact: Expr, number: int) -> Any:
    """The Z3 form of assumption number `number`: a divisibility fact ``v % m == 0`` (v a
    variable, m a positive constant) as ``v == m * q`` with a fresh integer q, which the solver
    reasons with far better in products such as ``row * v``; any other fact as is."""
    if fact.op == "==" and fact.args[1].is_const and fact.args[1].value == 0:
        remainder = fact.args[0]
        if remainder.op == "%" and remainder.args[0].op == "var":
            divisor = remainder.args[1]
            if divisor.is_const and divisor.value > 0:
                term = encoder.term(remainder.args[0])
                quotient = z3.Int(f"la_quotient_{number}", ctx=term.ctx)
                return term == divisor.value * quotient
    return encoder.truth(fact)


def _query(access: Access, claims: list[_Claim]) -> Query:
    """The query "some thread and values of the variables, within their bounds and under the
    assumptions, break a claim", translated by the shared `proofs.encode.Encoder`.

    In whole-query bit-vectors when an expression has a bitwise operator and
    `proofs.encode.bitvector_width` admits them all (every node non-negative and bounded, every
    divisor at least 1, so every expression is defined); otherwise in integers, where a point
    at which the printed side cannot be evaluated (a zero divisor) also breaks its claim and
    the specification is assumed to evaluate.
    """
    num_threads = access.register.num_threads
    in_block = logical_and(access.thread >= 0, access.thread < num_threads)
    exprs = [in_block, *access.assumptions]
    exprs += [claim.printed for claim in claims] + [claim.expected for claim in claims]
    width = bitvector_width(exprs) if has_bitwise(exprs) else None
    encoder = Encoder(width=width)
    encoder.term(access.thread)  # a variable of every query: the counterexample's thread
    constraints = [encoder.truth(in_block)]
    violations = []
    for claim in claims:
        if claim.truth:
            violations.append(encoder.truth(claim.printed) != encoder.truth(claim.expected))
        else:
            violations.append(encoder.term(claim.printed) != encoder.term(claim.expected))
        if width is None:
            violations.append(z3.Not(encoder.defined(claim.printed)))
    if width is None:
        constraints += [
            _integer_fact(encoder, fact, number) for number, fact in enumerate(access.assumptions)
        ]
        constraints += [encoder.defined(claim.expected) for claim in claims]
    else:
        constraints += [encoder.truth(fact) for fact in access.assumptions]
    constraints += encoder.bounds()
    return constraints, z3.Or(*violations), encoder


# ---------------------------------------------------------------------------------- checking


def validate_access(
    access: Access, *, timeout: float = DEFAULT_TIMEOUT, rlimit: int | None = DEFAULT_RLIMIT
) -> ProofResult:
    """Prove the claims of one access (see the module docstring).

    The counterexample of a refutation is ``{"claim": "address" | "alignment" | "mask" | "count",
    "t": thread, "i": local index, "variables": {name: value}, "printed": value,
    "expected": value}``: for an address, the bit address of register i from the tensor's
    base by the printed expression (``expr * unit_bits + j * element_bits``; None where it
    cannot be evaluated) and by the specification; for a mask, 1 or 0 for the printed guard and
    for "every element inside"; for a count, 1 or 0 for "j < count" and for "register i is
    inside". Raises ProofError for a bad `timeout` or `rlimit`.
    """
    check_limits(timeout, rlimit)
    started = time.perf_counter()
    claims = _claims(access)
    try:
        query = _query(access, claims)
    except EncodingError as error:
        return unknown(f"an expression is outside the Z3 translation: {error}", started)
    constraints, violation, encoder = query
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
    return _confirmed(access, claims, encoder.values(found.model), started)


def _confirmed(
    access: Access, claims: list[_Claim], values: dict[str, int], started: float
) -> ProofResult:
    """The refutation at the solver's point `values` when a claim fails there on ints, else an
    unknown."""
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
        if claim.truth and printed is not None:
            printed, expected = int(printed != 0), int(expected != 0)
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
    """The validation of a kernel: `results`, pairs (access, ProofResult) in the order the
    accesses were printed, and `plan_results`, pairs (claim, ProofResult) for the claims of its
    tensor-core plans (`backend.tensor_core`: ``mma.sync`` fragments, ``ldmatrix`` addresses)."""

    results: tuple[tuple[Access, ProofResult], ...]
    plan_results: tuple[tuple[Claim, ProofResult], ...] = ()

    @property
    def holds(self) -> bool | None:
        """True when every access and plan claim is proved, False when one is refuted, else
        None."""
        return conjunction(result for _, result in self.results + self.plan_results)

    @property
    def failures(self) -> list[tuple[Access | Claim, ProofResult]]:
        """The refuted accesses and plan claims with their results."""
        pairs = self.results + self.plan_results
        return [(item, result) for item, result in pairs if result.holds is False]

    @property
    def unknown(self) -> list[tuple[Access | Claim, ProofResult]]:
        """The accesses and plan claims neither proved nor refuted."""
        pairs = self.results + self.plan_results
        return [(item, result) for item, result in pairs if result.holds is None]


def validate_lowering(
    kernel: Any,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    rlimit: int | None = DEFAULT_RLIMIT,
) -> LoweringValidation:
    """Validate every access of `kernel` (`validate_access`) and every claim of its
    tensor-core plans (`proofs.check_equivalent` of the claim's emitted and required maps).

    `kernel` is a `backend.CompiledKernel` or a `backend.lower.LoweredKernel` (anything with
    `accesses` and `plans`), or an iterable of `Access`. Each access and each claim is one
    solver query bounded by `timeout` seconds and `rlimit` resource units.
    """
    accesses: Iterable[Access] = getattr(kernel, "accesses", kernel)
    plans = getattr(kernel, "plans", ())
    return LoweringValidation(
        tuple(
            (access, validate_access(access, timeout=timeout, rlimit=rlimit)) for access in accesses
        ),
        tuple(
            (claim, check_equivalent(claim.emitted, claim.required, timeout, rlimit))
            for plan in plans
            for claim in plan.claims()
        ),
    )

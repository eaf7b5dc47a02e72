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

Encodings. Accesses are proved in Z3's integer theory (`proofs.encode`), except those whose
expressions use XOR, AND or OR (swizzled shared memory): those are proved in bit-vectors, where
the bitwise operators are native. The bit-vector form is exact because every sub-expression of
such an access has finite, non-negative bounds (`Expr.bounds`, from the variables' declared
bounds), so a width two bits above the largest bound holds every value and every comparison is
an unsigned one; an access with a possibly negative or unbounded part stays in integers.

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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import z3

from backend.lower import Access
from backend.tensor_core import Claim
from layout_algebra.symbolic import Expr, as_expr, evaluate, logical_and
from proofs.checks import check_equivalent
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

_BITWISE = frozenset({"&", "|", "^"})
_BITVECTOR_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": z3.UDiv,
    "%": z3.URem,
    "&": lambda a, b: a & b,
    "|": lambda a, b: a | b,
    "^": lambda a, b: a ^ b,
    "<<": lambda a, b: a << b,
    ">>": z3.LShR,
    "min": lambda a, b: z3.If(z3.ULE(a, b), a, b),
    "max": lambda a, b: z3.If(z3.ULE(a, b), b, a),
}
_BITVECTOR_COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "<": z3.ULT,
    "<=": z3.ULE,
    ">": z3.UGT,
    ">=": z3.UGE,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}
_BITVECTOR_LEAVES_AND_LOGIC = frozenset({"var", "const", "select", "and", "or", "not"})

Query = tuple[list[Any], Any, dict[str, Any]]
"""(constraints, violation, variables by name) of one solver query."""


def _nodes(exprs: Sequence[Expr]) -> list[Expr]:
    """Every distinct node of `exprs`."""
    seen: dict[int, Expr] = {}
    stack = list(exprs)
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            stack.extend(node.args)
    return list(seen.values())


class _BitVectors:
    """Bit-vector terms of expressions whose nodes all have non-negative bounds below
    2**(width - 1): exactly their integer values."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.variables: dict[str, Any] = {}
        self.bounds: list[Any] = []
        self._terms: dict[int, Any] = {}

    def number(self, node: Expr) -> Any:
        done = self._terms.get(id(node))
        if done is not None:
            return done
        if node.op == "var":
            result = self.variables.get(node.name)
            if result is None:
                result = z3.BitVec(node.name, self.width)
                self.variables[node.name] = result
                self.bounds += [z3.UGE(result, node.lo), z3.ULE(result, node.hi)]
        elif node.op == "const":
            result = z3.BitVecVal(node.value, self.width)
        elif node.op == "select":
            cond, if_true, if_false = node.args
            result = z3.If(self.truth(cond), self.number(if_true), self.number(if_false))
        elif node.is_boolean:
            one, zero = z3.BitVecVal(1, self.width), z3.BitVecVal(0, self.width)
            result = z3.If(self.truth(node), one, zero)
        else:
            result = _BITVECTOR_OPS[node.op](*(self.number(arg) for arg in node.args))
        self._terms[id(node)] = result
        return result

    def truth(self, node: Expr) -> Any:
        if node.op in _BITVECTOR_COMPARISONS:
            a, b = (self.number(arg) for arg in node.args)
            return _BITVECTOR_COMPARISONS[node.op](a, b)
        if node.op in ("and", "or"):
            combine = z3.And if node.op == "and" else z3.Or
            return combine(self.truth(node.args[0]), self.truth(node.args[1]))
        if node.op == "not":
            return z3.Not(self.truth(node.args[0]))
        return self.number(node) != 0


def _bitvector_query(access: Access, claims: list[_Claim]) -> Query | None:
    """The query in bit-vectors, or None unless some expression uses a bitwise operator and
    every node is in the fragment with finite, non-negative bounds."""
    exprs = [access.thread, *access.assumptions]
    exprs += [claim.printed for claim in claims] + [claim.expected for claim in claims]
    nodes = _nodes(exprs)
    if not any(node.op in _BITWISE for node in nodes):
        return None
    largest = 1
    for node in nodes:
        known = node.op in _BITVECTOR_OPS or node.op in _BITVECTOR_COMPARISONS
        if not known and node.op not in _BITVECTOR_LEAVES_AND_LOGIC:
            return None
        low, high = node.bounds()
        if low is None or high is None or low < 0:
            return None
        largest = max(largest, high)
    terms = _BitVectors(largest.bit_length() + 2)
    violations = [
        terms.truth(c.printed) != terms.truth(c.expected)
        if c.truth
        else terms.number(c.printed) != terms.number(c.expected)
        for c in claims
    ]
    thread = terms.number(access.thread)
    facts = [terms.truth(fact) for fact in access.assumptions]
    constraints = [z3.ULT(thread, access.register.num_threads), *facts, *terms.bounds]
    return constraints, z3.Or(*violations), terms.variables


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


def _integer_query(access: Access, claims: list[_Claim]) -> Query:
    """The query in Z3's integer theory (`proofs.encode`); a point where the printed side
    cannot be evaluated (a zero divisor) also violates."""
    encoder = Encoder()
    thread = encoder.term(access.thread)
    violations = []
    for claim in claims:
        if claim.truth:
            violations.append(encoder.truth(claim.printed) != encoder.truth(claim.expected))
        else:
            violations.append(encoder.term(claim.printed) != encoder.term(claim.expected))
        violations.append(z3.Not(encoder.defined(claim.printed)))
    constraints = [thread >= 0, thread < access.register.num_threads]
    constraints += [
        _integer_fact(encoder, fact, number) for number, fact in enumerate(access.assumptions)
    ]
    constraints += [encoder.defined(claim.expected) for claim in claims]
    constraints += encoder.bounds()
    return constraints, z3.Or(*violations), encoder.variables


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
        query = _bitvector_query(access, claims) or _integer_query(access, claims)
    except EncodingError as error:
        return unknown(f"an expression is outside the Z3 translation: {error}", started)
    constraints, violation, variables = query
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
    values = {
        name: found.model.eval(term, model_completion=True).as_long()
        for name, term in variables.items()
    }
    return _confirmed(access, claims, values, started)


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
    def _verdicts(self) -> list[bool | None]:
        return [result.holds for _, result in self.results + self.plan_results]

    @property
    def holds(self) -> bool | None:
        """True when every access and plan claim is proved, False when one is refuted, else
        None."""
        verdicts = self._verdicts
        if False in verdicts:
            return False
        return True if all(verdicts) else None

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

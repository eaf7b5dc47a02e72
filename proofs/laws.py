"""Laws of the register-layout algebra over symbolic sizes, each decided by one Z3 query.

A law here holds for *every* size in a range, not for a list of examples: thread counts, local
sizes and extents are bounded integer variables (``1 <= n <= max_size``, 64 by default) and the
factor layouts are uninterpreted functions, so the one query covers every layout of every size in
the range at once. Each function returns a `ProofResult`; a refutation's counterexample gives the
sizes, the indices, the two sides ``"left"`` and ``"right"``, and ``"functions"``: the value of
every uninterpreted function the two sides read (e.g. ``{"B(1, 0)": 3}``); it is confirmed by
evaluating both sides on ints with those values.

The model. A factor is a function ``F(t, i)`` of the thread t < n and the register i < l with
images in ``[0, s)``: one coordinate of a layout of extent s. One coordinate suffices: the
product acts on every dimension separately by the same formula, the closed form of
`layout_algebra.product`, written once here and used by every law::

    (A * B)(t, i) = A(t // nB, i // lB) * sB + B(t % nB, i % lB)
    over nA * nB threads, lA * lB registers, extent sA * sB

Each ``x // n``, ``x % n`` by a symbolic n is given to Z3 as fresh q, r with ``x == q*n + r`` and
``0 <= r < n`` (exactly its definition, which Z3's nonlinear arithmetic handles better than its
built-in division by a variable). Every query runs in a fresh Z3 context, so its resource count
does not depend on the queries before it.

Laws (and the condition each needs, whose absence the solver refutes when the flag is off):

- `prove_product_associative`: ``(A * B) * C == A * (B * C)``.
- `prove_divide_product`: ``(A * B) / B == A``, the quotient read as
  ``Q(t, i) = (A * B)(t * nB, i * lB) // sB``; needs B's images inside B's extent.
- `prove_reduce_product`: ``reduce(A * B) == reduce(A) * reduce(B)``; needs each reduced
  register to come from a register of its own factor (see the function).
- `prove_merge_modes`: the canonical form's merge of two modes of one dimension that follow each
  other in one list keeps the meaning; a pair listed in the other order (a transposition) must
  not merge.
- `prove_replicate_commutes`: ``replicate(r) * B == B * replicate(r)``; needs B to have one
  thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3

from proofs.errors import ProofError
from proofs.result import DEFAULT_TIMEOUT, ProofResult, check_limits, elapsed, search, unknown

DEFAULT_MAX_SIZE = 64
"""The default upper bound of every symbolic size (thread count, local size, extent)."""


# ----------------------------------------------------------------------------------------------
# Two readings of one statement: Z3 terms, and ints under a model
# ----------------------------------------------------------------------------------------------


class _SolverSide:
    """Builds a statement as Z3 terms, collecting the definitions and assumptions it needs."""

    def __init__(self, ctx: z3.Context) -> None:
        self.context = ctx
        self.constraints: list[Any] = []

    def divmod(self, x: Any, n: Any) -> tuple[Any, Any]:
        q, r = z3.FreshInt("q", self.context), z3.FreshInt("r", self.context)
        self.constraints += [x == q * n + r, r >= 0, r < n]
        return q, r

    def function(self, name: str, arity: int, extent: Any = None) -> Callable[..., Any]:
        declaration = z3.Function(name, *([z3.IntSort(self.context)] * (arity + 1)))

        def apply(*args: Any) -> Any:
            value = declaration(*args)
            if extent is not None:
                self.constraints += [value >= 0, value < extent]
            return value

        return apply

    def require(self, condition: Any) -> None:
        self.constraints.append(condition)


class _IntSide:
    """Evaluates a statement on ints, reading uninterpreted functions from a Z3 model; records
    whether every assumption holds and each function value read (``"B(0, 1)": 5``)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.assumptions_hold = True
        self.calls: dict[str, int] = {}

    def divmod(self, x: int, n: int) -> tuple[int, int]:
        return divmod(x, n)

    def function(self, name: str, arity: int, extent: int | None = None) -> Callable[..., int]:
        context = self.model.ctx
        declaration = z3.Function(name, *([z3.IntSort(context)] * (arity + 1)))

        def apply(*args: int) -> int:
            term = declaration(*(z3.IntVal(a, context) for a in args))
            value = self.model.eval(term, model_completion=True).as_long()
            self.calls[f"{name}({', '.join(str(a) for a in args)})"] = value
            if extent is not None:
                self.require(0 <= value < extent)
            return value

        return apply

    def require(self, condition: bool) -> None:
        self.assumptions_hold = self.assumptions_hold and bool(condition)


Side = _SolverSide | _IntSide


@dataclass(frozen=True)
class _Factor:
    """One coordinate of a layout: `fn(t, i)`, over `num_threads` threads and `local_size`
    registers, with images in ``[0, extent)``."""

    fn: Callable[[Any, Any], Any]
    num_threads: Any
    local_size: Any
    extent: Any


def _product(side: Side, a: _Factor, b: _Factor) -> _Factor:
    """The closed form of the product ``a * b`` (see the module docstring)."""

    def fn(t: Any, i: Any) -> Any:
        t_outer, t_inner = side.divmod(t, b.num_threads)
        i_outer, i_inner = side.divmod(i, b.local_size)
        return a.fn(t_outer, i_outer) * b.extent + b.fn(t_inner, i_inner)

    return _Factor(
        fn, a.num_threads * b.num_threads, a.local_size * b.local_size, a.extent * b.extent
    )


def _factor(side: Side, sizes: dict[str, Any], name: str, in_shape: bool = True) -> _Factor:
    """The uninterpreted factor `name` with sizes n<name>, l<name>, s<name>; its images are
    assumed inside its extent when `in_shape`."""
    extent = sizes[f"s{name}"]
    fn = side.function(name, 2, extent if in_shape else None)
    return _Factor(fn, sizes[f"n{name}"], sizes[f"l{name}"], extent)


Statement = Callable[[Side, dict[str, Any], dict[str, Any]], tuple[Any, Any]]
"""A law's two sides from its sizes and indices: single values, or equally long tuples that
must agree entry by entry."""


def _entries(side_value: Any) -> tuple[Any, ...]:
    return side_value if isinstance(side_value, tuple) else (side_value,)


def _prove(
    claim: str,
    size_names: tuple[str, ...],
    index_limits: Callable[[dict[str, Any]], dict[str, Any]],
    statement: Statement,
    max_size: int,
    timeout: float,
    rlimit: int | None,
) -> ProofResult:
    """One query: sizes in [1, max_size], indices in [0, limit), a point where the two sides of
    `statement` differ. A model is confirmed on ints before it is reported."""
    started = time.perf_counter()
    check_limits(timeout, rlimit)
    if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:
        raise ProofError(f"max_size must be a positive int, got {max_size!r}")
    side = _SolverSide(z3.Context())
    sizes = {name: z3.Int(name, side.context) for name in size_names}
    limits = index_limits(sizes)
    indices = {name: z3.Int(name, side.context) for name in limits}
    constraints = [z3.And(size >= 1, size <= max_size) for size in sizes.values()]
    constraints += [z3.And(indices[name] >= 0, indices[name] < limits[name]) for name in limits]
    left, right = statement(side, sizes, indices)
    differ = z3.Or(*[x != y for x, y in zip(_entries(left), _entries(right))])
    found = search(constraints + side.constraints, differ, timeout, rlimit)
    where = f"for every size in [1, {max_size}]"
    if found.verdict == z3.unsat:
        return ProofResult(True, None, f"{claim} {where}", elapsed(started))
    if found.verdict != z3.sat:
        return unknown(f"the solver gave up: {found.reason_unknown}", started)
    model = found.model
    values = {
        name: model.eval(term, model_completion=True).as_long()
        for name, term in {**sizes, **indices}.items()
    }
    int_side = _IntSide(model)
    int_sizes = {name: values[name] for name in sizes}
    int_limits = index_limits(int_sizes)
    in_domain = all(0 <= values[name] < int_limits[name] for name in limits)
    in_range = all(1 <= value <= max_size for value in int_sizes.values())
    left_value, right_value = statement(int_side, int_sizes, {n: values[n] for n in limits})
    if not (in_domain and in_range and int_side.assumptions_hold and left_value != right_value):
        return unknown(
            f"the solver's counterexample {values} did not confirm on ints "
            f"(left {left_value}, right {right_value})",
            started,
        )
    example = {**values, "left": left_value, "right": right_value, "functions": int_side.calls}
    return ProofResult(
        False,
        example,
        f"refuted: {claim} fails at {values}: left {left_value}, right {right_value}",
        elapsed(started),
    )


# ----------------------------------------------------------------------------------------------
# The laws
# ----------------------------------------------------------------------------------------------


def prove_product_associative(
    *,
    max_size: int = DEFAULT_MAX_SIZE,
    timeout: float = DEFAULT_TIMEOUT,
    rlimit: int | None = None,
) -> ProofResult:
    """``(A * B) * C == A * (B * C)`` for all layouts A, B, C whose thread counts, local sizes
    and extents lie in ``[1, max_size]``, at every thread ``t < nA*nB*nC`` and register
    ``i < lA*lB*lC``. Counterexample keys: the nine sizes, t, i, left, right."""

    def statement(side: Side, sizes: dict[str, Any], indices: dict[str, Any]) -> tuple[Any, Any]:
        a, b, c = (_factor(side, sizes, name) for name in "ABC")
        left = _product(side, _product(side, a, b), c)
        right = _product(side, a, _product(side, b, c))
        return left.fn(indices["t"], indices["i"]), right.fn(indices["t"], indices["i"])

    return _prove(
        "(A * B) * C == A * (B * C)",
        ("nA", "lA", "sA", "nB", "lB", "sB", "nC", "lC", "sC"),
        lambda s: {
            "t": s["nA"] * s["nB"] * s["nC"],
            "i": s["lA"] * s["lB"] * s["lC"],
        },
        statement,
        max_size,
        timeout,
        rlimit,
    )


def prove_divide_product(
    *,
    max_size: int = DEFAULT_MAX_SIZE,
    divisor_in_shape: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
    rlimit: int | None = None,
) -> ProofResult:
    """``(A * B) / B == A``: the quotient of P = A * B by B, read off P at the first thread and
    register of each block of B, ``Q(t, i) = P(t * nB, i * lB) // sB``, equals A at every
    ``t < nA``, ``i < lA``.

    Condition (`divisor_in_shape`): B's images lie in ``[0, sB)``, as every layout's do; with
    it off, B is any function and the solver finds a B(0, 0) outside that breaks the law.
    Counterexample keys: the six sizes, t, i, left (Q), right (A).
    """

    def statement(side: Side, sizes: dict[str, Any], indices: dict[str, Any]) -> tuple[Any, Any]:
        a = _factor(side, sizes, "A")
        b = _factor(side, sizes, "B", in_shape=divisor_in_shape)
        whole = _product(side, a, b)
        t, i = indices["t"], indices["i"]
        quotient, _ = side.divmod(whole.fn(t * b.num_threads, i * b.local_size), b.extent)
        return quotient, a.fn(t, i)

    return _prove(
        "(A * B) / B == A" + ("" if divisor_in_shape else " (B unconstrained)"),
        ("nA", "lA", "sA", "nB", "lB", "sB"),
        lambda s: {"t": s["nA"], "i": s["lA"]},
        statement,
        max_size,
        timeout,
        rlimit,
    )


def prove_reduce_product(
    *,
    max_size: int = DEFAULT_MAX_SIZE,
    lift_in_registers: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
    rlimit: int | None = None,
) -> ProofResult:
    """``reduce(A * B, d) == reduce(A, d) * reduce(B, d)``, on the coordinate of a dimension
    that is kept.

    Reducing a layout X over dimension d keeps its threads and drops the local modes of d: the
    result's register j < kX is X's register ``liftX(j) < lX`` whose digits of the dropped modes
    are 0, so ``reduce(X)(t, j) = X(t, liftX(j))`` on every kept coordinate. In A * B the local
    modes are A's then B's, so the surviving digits are A's then B's and
    ``lift(j) = liftA(j // kB) * lB + liftB(j % kB)``. The lifts are uninterpreted functions; the
    law holds for every t < nA*nB and j < kA*kB.

    Condition (`lift_in_registers`): B's lift lands in B's registers (``liftB(j) < lB``), as it
    does for every reduction; with it off the solver finds a lift that breaks the law.
    Counterexample keys: the eight sizes (kA, kB the reduced local sizes), t, j, left, right.
    """

    def statement(side: Side, sizes: dict[str, Any], indices: dict[str, Any]) -> tuple[Any, Any]:
        a, b = _factor(side, sizes, "A"), _factor(side, sizes, "B")
        lift_a = side.function("liftA", 1, a.local_size)
        lift_b = side.function("liftB", 1, b.local_size if lift_in_registers else None)
        reduced_a = _Factor(lambda t, j: a.fn(t, lift_a(j)), a.num_threads, sizes["kA"], a.extent)
        reduced_b = _Factor(lambda t, j: b.fn(t, lift_b(j)), b.num_threads, sizes["kB"], b.extent)
        t, j = indices["t"], indices["j"]
        j_outer, j_inner = side.divmod(j, sizes["kB"])
        left = _product(side, a, b).fn(t, lift_a(j_outer) * b.local_size + lift_b(j_inner))
        right = _product(side, reduced_a, reduced_b).fn(t, j)
        return left, right

    return _prove(
        "reduce(A * B) == reduce(A) * reduce(B)"
        + ("" if lift_in_registers else " (B's lift unconstrained)"),
        ("nA", "lA", "kA", "sA", "nB", "lB", "kB", "sB"),
        lambda s: {"t": s["nA"] * s["nB"], "j": s["kA"] * s["kB"]},
        statement,
        max_size,
        timeout,
        rlimit,
    )


def prove_merge_modes(
    *,
    max_size: int = DEFAULT_MAX_SIZE,
    adjacent: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
    rlimit: int | None = None,
) -> ProofResult:
    """Merging two modes keeps a layout's meaning when they follow each other both in their
    dimension and in their list.

    Modes p (outer) and q (inner) of one dimension have coordinate strides q*S and S; in their
    list (spatial or local: the same formula on t or i) p comes right before q, so their digits
    of the index x are ``x // (q*D) % p`` and ``x // D % q`` (D: the sizes after them in the
    list). The merged mode p*q has digit ``x // D % (p*q)`` and stride S. The law: both give the
    same coordinate for every x < O*p*q*D (O: the sizes before them). The query reads p's digit
    as ``x // D // q % p``, sharing ``x // D`` with the other digits, and proves in the same
    query that ``x // (q*D) == x // D // q``: each side is the pair (coordinate, that quotient).

    Condition (`adjacent`): with it off, the list holds q right before p (the pair transposed):
    digits ``x // D % p`` and ``x // (p*D) % q``, which must not merge; the solver finds an x
    where the two readings differ. Counterexample keys: p, q, D, S, O, x, left, right.
    """

    def statement(side: Side, sizes: dict[str, Any], indices: dict[str, Any]) -> tuple[Any, Any]:
        p, q, d, s, x = sizes["p"], sizes["q"], sizes["D"], sizes["S"], indices["x"]
        earlier, later = (p, q) if adjacent else (q, p)
        shifted, _ = side.divmod(x, d)
        upper, later_digit = side.divmod(shifted, later)
        _, earlier_digit = side.divmod(upper, earlier)
        direct, _ = side.divmod(x, later * d)
        _, merged_digit = side.divmod(shifted, p * q)
        p_digit, q_digit = (
            (earlier_digit, later_digit) if adjacent else (later_digit, earlier_digit)
        )
        return (p_digit * (q * s) + q_digit * s, direct), (merged_digit * s, upper)

    return _prove(
        "merging modes adjacent in their dimension and list keeps the meaning"
        if adjacent
        else "merging a transposed pair of modes keeps the meaning",
        ("p", "q", "D", "S", "O"),
        lambda s: {"x": s["O"] * s["p"] * s["q"] * s["D"]},
        statement,
        max_size,
        timeout,
        rlimit,
    )


def prove_replicate_commutes(
    *,
    max_size: int = DEFAULT_MAX_SIZE,
    single_thread: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
    rlimit: int | None = None,
) -> ProofResult:
    """``replicate(r) * B == B * replicate(r)`` when B has one thread.

    ``replicate(r)`` has r threads, one register and extent 1 (its coordinate is 0), so by the
    product's closed form ``(replicate(r) * B)(t, i) = B(t % nB, i)`` and
    ``(B * replicate(r))(t, i) = B(t // r, i)`` over r*nB threads. Condition (`single_thread`):
    nB == 1; with it off the solver finds r, nB >= 2 and a B where the two differ (replicating
    the outermost or the innermost thread digit is not the same). Counterexample keys: r, nB,
    lB, sB, t, i, left, right.
    """

    def statement(side: Side, sizes: dict[str, Any], indices: dict[str, Any]) -> tuple[Any, Any]:
        b = _factor(side, sizes, "B")
        if single_thread:
            side.require(b.num_threads == 1)
        replicated = _Factor(lambda t, i: 0, sizes["r"], 1, 1)
        left = _product(side, replicated, b).fn(indices["t"], indices["i"])
        right = _product(side, b, replicated).fn(indices["t"], indices["i"])
        return left, right

    return _prove(
        "replicate(r) * B == B * replicate(r)" + (" for B of one thread" if single_thread else ""),
        ("r", "nB", "lB", "sB"),
        lambda s: {"t": s["r"] * s["nB"], "i": s["lB"]},
        statement,
        max_size,
        timeout,
        rlimit,
    )

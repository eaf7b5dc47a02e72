"""Soundness of every proof's verdict: an unknown is never a proof, an unconfirmed model never a
refutation, a point where a formula raises never either.

Each test takes the solver's help away in one way and checks that the verdict says so:

- A starved solver: Z3's resource limit at 1 (``rlimit=1``) on a query that needs work, so Z3
  answers unknown. The verdict is ``holds is None`` with the reason "the solver gave up: ...",
  never True. Each case is also proved with a generous limit, so only the limit makes the
  difference.
- A bogus model: every check asks Z3 through the one function `proofs.result.search`, which
  `proofs.checks`, `proofs.swizzle` and `proofs.laws` import by name. The tests replace it there
  (and only in the test) by a stand-in that asks the real solver something weaker than the
  check's violation, or wraps the model it returns, so that the model names a point where the
  claim holds. The re-check on ints must catch it: ``holds is None`` with the reason "... did not
  confirm on ints ...", never False.
- A point where a formula raises (a zero divisor): the solver finds it, evaluating it on ints
  raises, and the verdict is ``holds is None`` naming the error: neither a proof nor an exception.

Every solver call is bounded by `RLIMIT`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection
from typing import Any

import pytest
import z3

import proofs.checks
import proofs.laws
import proofs.result
import proofs.swizzle
from layout_algebra import (
    GlobalLayout,
    Swizzle,
    compose,
    global_row_major,
    local,
    shared_row_major,
    shared_row_major_swizzle,
    shared_strides,
    spatial,
    var,
)
from layout_algebra.function_layout import FunctionLayout
from proofs import (
    ProofResult,
    check_bijective,
    check_covers,
    check_equivalent,
    check_in_bounds,
    check_injective,
)
from proofs.laws import (
    prove_divide_product,
    prove_merge_modes,
    prove_product_associative,
    prove_reduce_product,
    prove_replicate_commutes,
)
from proofs.result import Search
from proofs.swizzle import check_permutation, check_rows_conflict_free, check_swizzle_bijective

RLIMIT = 50_000_000
TIMEOUT = 60.0
STARVED = 1
"""The resource limit that starves the solver: Z3 gives up on any query that needs work."""

MMA_C = local(2, 1).spatial(8, 4).local(1, 2)
MMA_C_PTX = FunctionLayout(
    (16, 8), 32, 4, lambda t, i: (t // 4 + 8 * (i // 2), t % 4 * 2 + i % 2), name="mma_c"
)
SWIZZLED = shared_row_major_swizzle(64, 64, element_bits=16)
K = var("K", 1, 4096)
X = var("x", 0, 15)
RISKY = FunctionLayout((8,), 8, 1, lambda t, i: ((t + t // (t - 3) * 8) % 8,), name="risky")
"""t -> t wherever it is defined; at t = 3 its formula divides by zero."""

REAL_SEARCH = proofs.result.search
MODULES = (proofs.checks, proofs.swizzle, proofs.laws)
"""Every module that asks Z3 through `search`."""

Check = Callable[[int], ProofResult]
"""A check of a claim that holds, run with the resource limit it is given."""

EQUIVALENCES: dict[str, Check] = {
    "register": lambda rlimit: check_equivalent(MMA_C, MMA_C, TIMEOUT, rlimit),
    "function": lambda rlimit: check_equivalent(MMA_C, MMA_C_PTX, TIMEOUT, rlimit),
    "memory_swizzled": lambda rlimit: check_equivalent(SWIZZLED, SWIZZLED, TIMEOUT, rlimit),
    "memory_symbolic": lambda rlimit: check_equivalent(
        global_row_major(64, K), GlobalLayout((64, K), (K, 1)), TIMEOUT, rlimit
    ),
    "access": lambda rlimit: check_equivalent(
        compose(shared_row_major(16, 8), MMA_C),
        compose(shared_strides((16, 8), (8, 1)), MMA_C),
        TIMEOUT,
        rlimit,
    ),
}
"""Each kind of layout the equivalence check accepts, compared with an equal one."""

LAYOUT_CHECKS: dict[str, Check] = {
    **{f"equivalent_{name}": check for name, check in EQUIVALENCES.items()},
    "in_bounds_function": lambda rlimit: check_in_bounds(MMA_C_PTX, TIMEOUT, rlimit),
    "in_bounds_memory": lambda rlimit: check_in_bounds(SWIZZLED, TIMEOUT, rlimit),
    "injective_function": lambda rlimit: check_injective(MMA_C_PTX, TIMEOUT, rlimit),
    "injective_memory": lambda rlimit: check_injective(SWIZZLED, TIMEOUT, rlimit),
    "bijective_function": lambda rlimit: check_bijective(MMA_C_PTX, TIMEOUT, rlimit),
    "bijective_memory": lambda rlimit: check_bijective(SWIZZLED, TIMEOUT, rlimit),
    "covers_register": lambda rlimit: check_covers(MMA_C, MMA_C_PTX, TIMEOUT, rlimit),
    "covers_function": lambda rlimit: check_covers(MMA_C_PTX, MMA_C, TIMEOUT, rlimit),
}
"""Every check of `proofs.checks`, on claims that hold."""

SWIZZLE_CHECKS: dict[str, Check] = {
    "swizzle_bijective": lambda rlimit: check_swizzle_bijective(
        Swizzle(3, 3, 4), timeout=TIMEOUT, rlimit=rlimit
    ),
    "permutation": lambda rlimit: check_permutation(
        X ^ (X >> 1), "x", 4, timeout=TIMEOUT, rlimit=rlimit
    ),
    "rows_conflict_free": lambda rlimit: check_rows_conflict_free(
        SWIZZLED, 16, timeout=TIMEOUT, rlimit=rlimit
    ),
}
"""Every check of `proofs.swizzle`, on claims that hold."""

LAWS: dict[str, Check] = {
    law.__name__: (lambda rlimit, law=law: law(timeout=TIMEOUT, rlimit=rlimit))
    for law in (
        prove_product_associative,
        prove_divide_product,
        prove_reduce_product,
        prove_merge_modes,
        prove_replicate_commutes,
    )
}
"""Every law of `proofs.laws`, with its condition on."""

ALL_CHECKS = {**LAYOUT_CHECKS, **SWIZZLE_CHECKS, **LAWS}


# ----------------------------------------------------------------------------------------------
# Stand-ins for `search`
# ----------------------------------------------------------------------------------------------


def constants(*terms: Any) -> dict[str, Any]:
    """The uninterpreted constants (the variables) that `terms` read, by name."""
    found: dict[str, Any] = {}
    seen: set[int] = set()
    pending = list(terms)
    while pending:
        term = pending.pop()
        if term.get_id() in seen:
            continue
        seen.add(term.get_id())
        if z3.is_const(term) and term.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            found[str(term)] = term
        pending.extend(term.children())
    return found


Question = Callable[[Any, dict[str, Any]], Any]
"""What a stand-in asks Z3 instead of a check's violation: a Z3 Bool built from that violation
and the query's variables by name."""


def anywhere(violation: Any, variables: dict[str, Any]) -> Any:
    """Any point of the domain: for a claim that holds, one where it holds."""
    return z3.BoolVal(True, violation.ctx)


def stand_in(
    question: Question | None = None,
    calls: Collection[int] | None = None,
    rlimit: int | None = None,
    model: Callable[[Any], Any] | None = None,
) -> Callable[..., Search]:
    """A replacement for `search` that changes the queries numbered in `calls` (from 0; every
    query when None) and passes the others on unchanged: it asks the real `search` for
    `question` instead of the violation (when given), under resource limit `rlimit` instead of
    the check's (when given), and returns the model through `model` (when given)."""
    numbers = itertools.count()

    def search(constraints: list[Any], violation: Any, timeout: float, limit: Any) -> Search:
        if calls is not None and next(numbers) not in calls:
            return REAL_SEARCH(constraints, violation, timeout, limit)
        if question is not None:
            violation = question(violation, constants(*constraints, violation))
        found = REAL_SEARCH(constraints, violation, timeout, limit if rlimit is None else rlimit)
        if model is not None and found.verdict == z3.sat:
            return Search(found.verdict, model(found.model), found.reason_unknown)
        return found

    return search


def replace_search(monkeypatch: pytest.MonkeyPatch, replacement: Callable[..., Search]) -> None:
    """Make every check of the proofs package ask Z3 through `replacement`."""
    for module in MODULES:
        monkeypatch.setattr(module, "search", replacement)


def assert_unconfirmed(result: ProofResult) -> None:
    """The verdict of a check whose solver returned a bogus model: unknown, saying why."""
    assert result.holds is None, result.reason
    assert result.counterexample is None
    assert "did not confirm on ints" in result.reason


def assert_gave_up(result: ProofResult) -> None:
    """The verdict of a check whose solver ran out of resources: unknown, saying why."""
    assert result.holds is None, result.reason
    assert result.counterexample is None
    assert result.reason == "the solver gave up: max. resource limit exceeded"


# ----------------------------------------------------------------------------------------------
# An unknown is never a proof
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("check", ALL_CHECKS.values(), ids=ALL_CHECKS.keys())
def test_each_check_proves_its_claim_with_enough_resources(check: Check) -> None:
    result = check(RLIMIT)
    assert result.holds is True, result.reason


@pytest.mark.parametrize("check", ALL_CHECKS.values(), ids=ALL_CHECKS.keys())
def test_each_check_starved_of_resources_is_unknown(check: Check) -> None:
    assert_gave_up(check(STARVED))


@pytest.mark.parametrize("starved_query", [0, 1], ids=["in_bounds_query", "injective_query"])
@pytest.mark.parametrize("layout", [MMA_C_PTX, SWIZZLED], ids=["function", "memory"])
def test_bijective_with_either_query_starved_is_unknown(
    layout: Any, starved_query: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    replace_search(monkeypatch, stand_in(calls={starved_query}, rlimit=STARVED))
    assert_gave_up(check_bijective(layout, TIMEOUT, RLIMIT))


@pytest.mark.parametrize("starved_query", [0, 1], ids=["chunk_query", "bank_group_query"])
def test_rows_conflict_free_with_either_query_starved_is_unknown(
    starved_query: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    replace_search(monkeypatch, stand_in(calls={starved_query}, rlimit=STARVED))
    assert_gave_up(check_rows_conflict_free(SWIZZLED, 16, timeout=TIMEOUT, rlimit=RLIMIT))


# ----------------------------------------------------------------------------------------------
# A model that is no counterexample is never a refutation
# ----------------------------------------------------------------------------------------------


UNCONFIRMED = {
    "equivalent": "both give",
    "in_bounds": "is inside the codomain",
    "injective": " give ",
    "bijective": "is inside the codomain",
    "covers": "does hold",
}
"""What each check of `proofs.checks` says of a model where its claim holds (for bijective:
of the first of its two queries)."""


@pytest.mark.parametrize("name", LAYOUT_CHECKS)
def test_a_model_where_the_claim_holds_is_not_a_refutation(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    replace_search(monkeypatch, stand_in(anywhere))
    result = LAYOUT_CHECKS[name](RLIMIT)
    assert_unconfirmed(result)
    check = next(check for check in UNCONFIRMED if name.startswith(check))
    assert UNCONFIRMED[check] in result.reason


def same_point(violation: Any, variables: dict[str, Any]) -> Any:
    """The two points of an injectivity query are one (index ``n`` and ``n2`` equal)."""
    return z3.And(
        *[
            variables[name] == variables[f"{name}2"]
            for name in ("t", "i", "c0", "c1")
            if name in variables
        ]
    )


def distinct_images(violation: Any, variables: dict[str, Any]) -> Any:
    """Two points of an injectivity query, the first before the second, that do not break the
    claim: their images differ."""
    first = "t" if "t" in variables else "c0"
    return z3.And(z3.Not(violation), variables[first] < variables[f"{first}2"])


@pytest.mark.parametrize("question", [same_point, distinct_images], ids=lambda q: q.__name__)
@pytest.mark.parametrize("layout", [MMA_C_PTX, SWIZZLED], ids=["function", "memory"])
def test_points_that_do_not_collide_are_no_collision(
    layout: Any, question: Question, monkeypatch: pytest.MonkeyPatch
) -> None:
    replace_search(monkeypatch, stand_in(question))
    result = check_injective(layout, TIMEOUT, RLIMIT)
    assert_unconfirmed(result)
    assert " give " in result.reason


@pytest.mark.parametrize("bogus_query", [0, 1], ids=["in_bounds_query", "injective_query"])
def test_bijective_with_either_model_bogus_is_unknown(
    bogus_query: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    replace_search(monkeypatch, stand_in(anywhere, calls={bogus_query}))
    assert_unconfirmed(check_bijective(MMA_C_PTX, TIMEOUT, RLIMIT))


# ----------------------------------------------------------------------------------------------
# ... of a swizzle
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question",
    [
        anywhere,
        lambda violation, v: v["x"] == v["y"],
        lambda violation, v: v["x"] != v["y"],
    ],
    ids=["anywhere", "same_x_and_y", "different_x_and_y"],
)
@pytest.mark.parametrize("name", ["swizzle_bijective", "permutation"])
def test_a_model_where_the_permutation_holds_is_not_a_refutation(
    name: str, question: Question, monkeypatch: pytest.MonkeyPatch
) -> None:
    replace_search(monkeypatch, stand_in(question))
    assert_unconfirmed(SWIZZLE_CHECKS[name](RLIMIT))


@pytest.mark.parametrize(
    ("bogus_query", "question"),
    [
        (0, anywhere),
        (1, anywhere),
        # rows 8 apart share their bank groups, as they may: they are not in one window of 8
        (1, lambda violation, v: v["other_row"] == v["row"] + 8),
    ],
    ids=["chunk_query", "bank_group_query", "rows_8_apart"],
)
def test_a_model_where_the_rows_are_conflict_free_is_not_a_refutation(
    bogus_query: int, question: Question, monkeypatch: pytest.MonkeyPatch
) -> None:
    replace_search(monkeypatch, stand_in(question, calls={bogus_query}))
    assert_unconfirmed(check_rows_conflict_free(SWIZZLED, 16, timeout=TIMEOUT, rlimit=RLIMIT))


# ----------------------------------------------------------------------------------------------
# ... of a law
# ----------------------------------------------------------------------------------------------


class OverriddenModel:
    """A Z3 model whose values of some variables (`values`, by name) and uninterpreted
    functions (`functions`, by name: ints to int) are replaced; every other term reads the
    wrapped `model`."""

    def __init__(
        self, model: Any, values: dict[str, int], functions: dict[str, Callable[..., int]]
    ) -> None:
        self.model = model
        self.values = values
        self.functions = functions

    @property
    def ctx(self) -> Any:
        return self.model.ctx

    def eval(self, term: Any, model_completion: bool = False) -> Any:
        name = term.decl().name()
        if term.num_args() == 0 and name in self.values:
            return z3.IntVal(self.values[name], self.ctx)
        if name in self.functions:
            args = [self.model.eval(a, model_completion=True).as_long() for a in term.children()]
            return z3.IntVal(self.functions[name](*args), self.ctx)
        return self.model.eval(term, model_completion=model_completion)


@pytest.mark.parametrize("law", LAWS.values(), ids=LAWS.keys())
def test_a_model_where_both_sides_agree_does_not_refute_a_law(
    law: Check, monkeypatch: pytest.MonkeyPatch
) -> None:
    replace_search(monkeypatch, stand_in(anywhere))
    assert_unconfirmed(law(RLIMIT))


def test_sides_that_differ_only_outside_the_assumptions_do_not_refute_a_law(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # B(0, 0) = sB lies outside B's extent, so the quotient reads A(0, 0) + 1: the two sides
    # differ, but only because B breaks the assumption that its images lie in [0, sB).
    sizes = {"nA": 1, "lA": 1, "sA": 1, "nB": 1, "lB": 1, "sB": 2, "t": 0, "i": 0}
    functions = {"A": lambda t, i: 0, "B": lambda t, i: 2}
    model = stand_in(anywhere, model=lambda m: OverriddenModel(m, sizes, functions))
    replace_search(monkeypatch, model)
    result = prove_divide_product(timeout=TIMEOUT, rlimit=RLIMIT)
    assert_unconfirmed(result)
    assert "(left 1, right 0)" in result.reason


def test_sides_that_differ_only_outside_the_domain_do_not_refute_a_law(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # t = 1 is one past the last of r * nB = 1 threads; there replicate(r) * B reads B(0, 0) = 0
    # and B * replicate(r) reads B(1, 0) = 1.
    sizes = {"r": 1, "nB": 1, "lB": 1, "sB": 2, "t": 1, "i": 0}
    functions = {"B": lambda t, i: t}
    model = stand_in(anywhere, model=lambda m: OverriddenModel(m, sizes, functions))
    replace_search(monkeypatch, model)
    result = prove_replicate_commutes(timeout=TIMEOUT, rlimit=RLIMIT)
    assert_unconfirmed(result)
    assert "(left 0, right 1)" in result.reason


# ----------------------------------------------------------------------------------------------
# A point where a formula raises is neither a proof nor a refutation
# ----------------------------------------------------------------------------------------------

RISKY_CHECKS: dict[str, Check] = {
    "equivalent": lambda rlimit: check_equivalent(spatial(8), RISKY, TIMEOUT, rlimit),
    "in_bounds": lambda rlimit: check_in_bounds(RISKY, TIMEOUT, rlimit),
    "injective": lambda rlimit: check_injective(RISKY, TIMEOUT, rlimit),
    "bijective": lambda rlimit: check_bijective(RISKY, TIMEOUT, rlimit),
    "covers_risky_a": lambda rlimit: check_covers(RISKY, spatial(8), TIMEOUT, rlimit),
    "covers_risky_b": lambda rlimit: check_covers(spatial(8), RISKY, TIMEOUT, rlimit),
}
"""Every check of `proofs.checks` on claims about `RISKY` that hold wherever it is defined."""


@pytest.mark.parametrize("check", RISKY_CHECKS.values(), ids=RISKY_CHECKS.keys())
def test_a_formula_that_divides_by_zero_is_neither_proved_nor_refuted(check: Check) -> None:
    result = check(RLIMIT)
    assert result.holds is None, result.reason
    assert result.counterexample is None
    assert "did not confirm on ints" in result.reason
    assert "raised ZeroDivisionError" in result.reason

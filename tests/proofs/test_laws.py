"""Tests of the laws over symbolic sizes (`proofs.laws`), and of the library against them.

Each law is proved by one solver query (sizes in [1, 64]); each law's condition, dropped, gives
a counterexample that is re-evaluated here from its reported function values with the product's
closed form. The concrete operations of `layout_algebra` (product, divide, reduce, the canonical
form, replicate) are then checked against the same laws on random small layouts, by the solver
and by brute force.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layout_algebra import (
    RegisterLayout,
    divide,
    local,
    reduce,
    register_layout,
    replicate,
    spatial,
)
from layout_algebra import testing as strategies
from layout_algebra.function_layout import FunctionLayout
from proofs import ProofError, check_equivalent
from proofs.laws import (
    prove_divide_product,
    prove_merge_modes,
    prove_product_associative,
    prove_reduce_product,
    prove_replicate_commutes,
)

RLIMIT = 50_000_000
TIMEOUT = 120.0
LIMITS = {"timeout": TIMEOUT, "rlimit": RLIMIT}


def reader(functions: dict[str, int], name: str) -> Callable[..., int]:
    """An uninterpreted function of a counterexample, read from its reported values."""
    return lambda *args: functions[f"{name}({', '.join(str(a) for a in args)})"]


# --------------------------------------------------------------------------------------------
# The laws, proved
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("law", "claim"),
    [
        (prove_product_associative, "(A * B) * C == A * (B * C)"),
        (prove_divide_product, "(A * B) / B == A"),
        (prove_reduce_product, "reduce(A * B) == reduce(A) * reduce(B)"),
        (prove_merge_modes, "merging modes adjacent in their dimension and list keeps the meaning"),
        (prove_replicate_commutes, "replicate(r) * B == B * replicate(r) for B of one thread"),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_law_is_proved_for_every_size_up_to_64(law: Callable, claim: str) -> None:
    result = law(**LIMITS)
    assert result.holds is True, result.reason
    assert result.reason == f"{claim} for every size in [1, 64]"
    assert result.counterexample is None


def test_max_size_is_stated_and_checked() -> None:
    assert prove_replicate_commutes(max_size=8, **LIMITS).reason.endswith("in [1, 8]")
    with pytest.raises(ProofError, match=r"max_size must be a positive int, got 0"):
        prove_replicate_commutes(max_size=0)


def test_a_tiny_resource_limit_gives_unknown() -> None:
    result = prove_product_associative(timeout=TIMEOUT, rlimit=10_000)
    assert result.holds is None
    assert result.reason.startswith("the solver gave up")


# --------------------------------------------------------------------------------------------
# Each condition, dropped: a counterexample, re-evaluated here
# --------------------------------------------------------------------------------------------


def test_divide_needs_the_divisor_inside_its_shape() -> None:
    result = prove_divide_product(divisor_in_shape=False, **LIMITS)
    assert result.holds is False
    e = result.counterexample
    a, b = reader(e["functions"], "A"), reader(e["functions"], "B")
    t, i = e["t"], e["i"]
    # (A * B)(t * nB, i * lB) = A(t, i) * sB + B(0, 0); its floor by sB is A(t, i) only when
    # 0 <= B(0, 0) < sB.
    whole = a(t, i) * e["sB"] + b(0, 0)
    assert (e["left"], e["right"]) == (whole // e["sB"], a(t, i))
    assert e["left"] != e["right"]
    assert not 0 <= b(0, 0) < e["sB"]


def test_reduce_needs_the_lift_inside_the_factors_registers() -> None:
    result = prove_reduce_product(lift_in_registers=False, **LIMITS)
    assert result.holds is False
    e = result.counterexample
    f = e["functions"]
    a, b = reader(f, "A"), reader(f, "B")
    lift_a, lift_b = reader(f, "liftA"), reader(f, "liftB")
    t, j = e["t"], e["j"]
    j_outer, j_inner = divmod(j, e["kB"])
    i = lift_a(j_outer) * e["lB"] + lift_b(j_inner)
    left = a(t // e["nB"], i // e["lB"]) * e["sB"] + b(t % e["nB"], i % e["lB"])
    right = a(t // e["nB"], lift_a(j_outer)) * e["sB"] + b(t % e["nB"], lift_b(j_inner))
    assert (e["left"], e["right"]) == (left, right)
    assert left != right
    assert not 0 <= lift_b(j_inner) < e["lB"]


def test_a_transposed_pair_of_modes_must_not_merge() -> None:
    result = prove_merge_modes(adjacent=False, **LIMITS)
    assert result.holds is False
    e = result.counterexample
    p, q, d, s, x = e["p"], e["q"], e["D"], e["S"], e["x"]
    assert 0 <= x < e["O"] * p * q * d
    # q listed right before p: p's digit is the inner one.
    transposed = (x // d % p) * (q * s) + (x // (p * d) % q) * s
    merged = (x // d % (p * q)) * s
    assert (e["left"][0], e["right"][0]) == (transposed, merged)
    assert transposed != merged


def test_replicate_commutes_only_with_single_thread_layouts() -> None:
    result = prove_replicate_commutes(single_thread=False, **LIMITS)
    assert result.holds is False
    e = result.counterexample
    b = reader(e["functions"], "B")
    t, i = e["t"], e["i"]
    assert (e["left"], e["right"]) == (b(t % e["nB"], i), b(t // e["r"], i))
    assert e["left"] != e["right"]
    assert e["nB"] >= 2 and e["r"] >= 2


# --------------------------------------------------------------------------------------------
# The library's operations against the laws, on random concrete layouts
# --------------------------------------------------------------------------------------------

SMALL = strategies.register_layouts(max_rank=2, max_factors=2)


def brute_equal(a: RegisterLayout | FunctionLayout, b: RegisterLayout | FunctionLayout) -> bool:
    same_domain = (a.shape, a.num_threads, a.local_size) == (b.shape, b.num_threads, b.local_size)
    return same_domain and np.array_equal(a.table(), b.table())


@settings(max_examples=30)
@given(SMALL, SMALL, SMALL)
def test_library_product_is_associative(
    a: RegisterLayout, b: RegisterLayout, c: RegisterLayout
) -> None:
    left, right = (a * b) * c, a * (b * c)
    assert left == right
    assert check_equivalent(left, right, **LIMITS).holds is True


@settings(max_examples=30)
@given(SMALL, SMALL)
def test_library_divide_undoes_the_product(a: RegisterLayout, b: RegisterLayout) -> None:
    quotient = divide(a * b, b)
    padded = _padded(a, quotient.rank)  # the product pads a to b's rank
    assert check_equivalent(quotient, padded, **LIMITS).holds is brute_equal(quotient, padded)
    assert brute_equal(quotient, padded)


@settings(max_examples=30)
@given(
    strategies.register_layouts(max_rank=2, max_factors=2),
    strategies.register_layouts(max_rank=2, max_factors=2),
    st.booleans(),
)
def test_library_reduce_of_a_product(a: RegisterLayout, b: RegisterLayout, keep: bool) -> None:
    rank = max(a.rank, b.rank)
    left = reduce(a * b, rank - 1, keepdims=keep)
    right = reduce(_padded(a, rank), rank - 1, keepdims=keep) * reduce(
        _padded(b, rank), rank - 1, keepdims=keep
    )
    assert check_equivalent(left, right, **LIMITS).holds is brute_equal(left, right) is True


def _padded(layout: RegisterLayout, rank: int) -> RegisterLayout:
    """`layout` with leading extent-1 dimensions up to `rank`."""
    extra = rank - layout.rank
    return register_layout(
        (1,) * extra + layout.shape, layout.mode_shape, layout.spatial_modes, layout.local_modes
    )


@settings(max_examples=30)
@given(
    strategies.layout_fields().flatmap(lambda f: st.tuples(st.just(f), strategies.refinements(f)))
)
def test_canonical_form_keeps_the_meaning(pair: tuple) -> None:
    fields, refined = pair
    canonical = register_layout(*fields)
    threads, registers = strategies.reference_sizes(refined)
    by_definition = FunctionLayout(
        refined[0], threads, registers, lambda t, i: strategies.reference_map(refined, t, i)
    )
    assert register_layout(*refined) == canonical
    assert check_equivalent(canonical, by_definition, **LIMITS).holds is True
    assert brute_equal(canonical, by_definition)


@pytest.mark.parametrize(
    ("b", "commutes"),
    [
        (local(2, 3), True),
        (local(4), True),
        (spatial(2), False),
        (spatial(2, 2).local(1, 2), False),
    ],
)
def test_library_replicate_commutes_with_single_thread_layouts(
    b: RegisterLayout, commutes: bool
) -> None:
    left, right = replicate(3) * b, b * replicate(3)
    assert check_equivalent(left, right, **LIMITS).holds is commutes
    assert brute_equal(left, right) is commutes
    assert (left == right) is commutes

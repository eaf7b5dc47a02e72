"""Tests of proved rewriting (`proofs.rewriting`) and of the lowering validation's retry that
rests on it (`proofs.lowering_validation`).

An exact table shows which subterms are rewritten and which stay (the bitwise skeleton); a
property evaluates random trees before and after rewriting at every point of their variables'
ranges (brute force against the rewritten form); and a kernel whose stream-K schedule the
solver cannot prove directly is proved through the retry, while a wrong address in it is still
refuted with a confirmed counterexample.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from backend import lower
from ir import dtypes
from ir.examples.register_dequant_matmul import DequantConfig, register_dequant_matmul
from ir.examples.vector_add import vector_add
from ir.instructions import CopyAsync
from layout_algebra import Expr, const, evaluate, maximum, minimum, var
from proofs import lowering_validation
from proofs.errors import ProofError
from proofs.lowering_validation import validate_access, validate_lowering
from proofs.rewriting import simplified_arithmetic

u = var("u", 0, 15)
w = var("w", 0, 15)


def test_arithmetic_subterms_are_rewritten_and_the_bitwise_skeleton_kept() -> None:
    exprs = [((u * 4) // 2 + w * 2) ^ ((w * 6) // 3), (u * 8 + w) // 8 < 2, u ^ w]
    rewritten, pairs = simplified_arithmetic(exprs)
    assert rewritten == [(u * 2 + w * 2) ^ (w * 2), u + w // 8 < 2, u ^ w]
    assert pairs == [
        ((u * 4) // 2 + w * 2, u * 2 + w * 2),
        ((w * 6) // 3, w * 2),
        ((u * 8 + w) // 8 < 2, u + w // 8 < 2),
    ]


def test_a_repeated_subterm_is_one_pair_and_a_simplified_tree_none() -> None:
    share = (u * 6) // 3
    rewritten, pairs = simplified_arithmetic([share ^ w, w & share, u * 2 ^ w])
    assert rewritten == [(u * 2) ^ w, w & (u * 2), (u * 2) ^ w]
    assert pairs == [(share, u * 2)]


def _combine(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    binary = st.sampled_from(
        [
            lambda a, b: a ^ b,
            lambda a, b: a & b,
            lambda a, b: a + b,
            lambda a, b: a - b,
            lambda a, b: a * b,
            lambda a, b: a // (b % 4 + 1),
            lambda a, b: a % (b % 4 + 1),
            minimum,
            maximum,
        ]
    )
    return st.builds(lambda f, a, b: f(a, b), binary, children, children)


TREES = st.recursive(
    st.one_of(st.sampled_from([u, w]), st.integers(0, 9).map(const)), _combine, max_leaves=7
)


@settings(max_examples=60, deadline=None)
@given(TREES)
def test_rewriting_keeps_every_value(expr: Expr) -> None:
    """At all 256 points of u and w the rewritten tree and every pair's sides evaluate alike."""
    (rewritten,), pairs = simplified_arithmetic([expr])
    for a, b in itertools.product(range(16), repeat=2):
        env = {"u": a, "w": b}
        assert evaluate(rewritten, env) == evaluate(expr, env)
        for original, simplified in pairs:
            assert evaluate(simplified, env) == evaluate(original, env)


# ----------------------------------------------------------------------------- the retry

STREAM_K = DequantConfig(units_k=8, late_scale=True, weights_as_a=True, stream_k=132)
"""The decode kernel in 8-row blocks with stream-K over 132 blocks: a block's share of the
iterations divides ``48 * ceil(m / 8) * 32`` by ``min(132, ...)``, which the lowering prints
as ``... * 128 // 11``."""

RLIMIT = 20_000_000


def _direct_verdict(access: object) -> object:
    """Z3's verdict on the access's query as first asked (no rewriting)."""
    claims = lowering_validation._claims(access)
    constraints, violation, _ = lowering_validation._query(access, claims)
    return lowering_validation.search(constraints, violation, 60.0, RLIMIT).verdict


def _swizzled_activation_copy() -> object:
    """The first access of `STREAM_K`'s kernel writing the activations' swizzled ring at a
    stage counted from the segment's first k-tile, ``(k1 - min(max(... // 11 - 32 k0, 0),
    31)) % 2``: a query the solver gives up on as first asked (at 20 million resource units
    and at 400 million)."""
    kernel = lower(
        register_dequant_matmul(dtypes.i4, 128, STREAM_K),
        "sm_90a",
        constants={"n": 12288, "k": 4096},
    )
    copies = (
        access
        for access in kernel.accesses
        if isinstance(access.instruction, CopyAsync) and access.role == "dst"
    )
    return next(access for access in copies if "% 2" in repr(access.expr))


def test_the_retry_proves_what_the_direct_query_gives_up_on() -> None:
    access = _swizzled_activation_copy()
    assert _direct_verdict(access) == z3.unknown
    result = validate_access(access, timeout=60.0, rlimit=RLIMIT)
    assert result.holds is True, result.reason


def test_a_wrong_address_is_refuted_through_the_retry() -> None:
    """The same access printed one 16-byte vector off: refuted, with a point confirmed on the
    original claims, not proved by the rewritten query."""
    access = _swizzled_activation_copy()
    wrong = replace(access, expr=access.expr + 16)
    assert _direct_verdict(wrong) == z3.unknown
    result = validate_access(wrong, timeout=60.0, rlimit=RLIMIT)
    assert result.holds is False
    example = result.counterexample
    assert example["claim"] in ("address", "alignment")
    assert example["printed"] != example["expected"]


def test_a_bad_plan_rlimit_is_named() -> None:
    kernel = lower(vector_add(), "sm_90a")
    expected = r"plan_rlimit: rlimit must be a positive int or None, got 0"
    with pytest.raises(ProofError, match=expected):
        validate_lowering(kernel, plan_rlimit=0)


def test_a_rewrite_of_a_term_that_may_divide_by_zero_is_no_lemma() -> None:
    """The lemmas need both sides defined: ``u // (w - 3) - u // (w - 3)`` simplifies to 0,
    which would hide a printed division by zero at w = 3."""
    access = _swizzled_activation_copy()
    may_fail = u // (w - 3)
    (rewritten,), pairs = simplified_arithmetic([may_fail - may_fail])
    assert rewritten == const(0)
    violations = [original.ne(simplified) for original, simplified in pairs]
    assert not lowering_validation._lemmas_hold(access, [], violations, 60.0, RLIMIT)
    safe = u // (w + 3)
    (rewritten,), pairs = simplified_arithmetic([safe - safe])
    violations = [original.ne(simplified) for original, simplified in pairs]
    assert lowering_validation._lemmas_hold(access, [], violations, 60.0, RLIMIT)

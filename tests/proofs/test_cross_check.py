"""Differential tests: every solver verdict on a small domain against brute force.

Random small layouts (hypothesis) are compared in pairs that are equal (a canonical layout and
the definition's formula on a refinement of its fields), often unequal (the mode lists
reordered) and unequal at a single point (a formula changed at one (t, i)); over 200 pairs in
all. Injectivity, bijectivity and coverage verdicts, and memory layouts with swizzles, are
checked the same way. Every counterexample is re-evaluated here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from layout_algebra import SharedLayout, Swizzle, register_layout
from layout_algebra import testing as strategies
from layout_algebra.function_layout import FunctionLayout
from proofs import (
    check_bijective,
    check_covers,
    check_equivalent,
    check_injective,
)

LIMITS = {"timeout": 60.0, "rlimit": 20_000_000}


def by_definition(fields: tuple) -> FunctionLayout:
    """The layout of raw (possibly non-canonical) fields, as the definition's formula."""
    threads, registers = strategies.reference_sizes(fields)
    return FunctionLayout(
        fields[0], threads, registers, lambda t, i: strategies.reference_map(fields, t, i)
    )


def brute_equal(a: Any, b: Any) -> bool:
    return np.array_equal(a.table(), b.table())


def assert_confirmed(result: Any, a: Any, b: Any) -> None:
    """A refutation's point really separates a and b."""
    t, i = result.counterexample["t"], result.counterexample["i"]
    assert result.counterexample["a"] == a.map(t, i)
    assert result.counterexample["b"] == b.map(t, i)
    assert a.map(t, i) != b.map(t, i)


@st.composite
def reordered(draw: st.DrawFn) -> tuple[tuple, tuple]:
    """Fields, and the same fields with the spatial and local lists each reordered."""
    fields = draw(strategies.layout_fields(max_rank=2))
    shape, mode_shape, spatial_modes, local_modes = fields
    new_spatial = tuple(draw(st.permutations(spatial_modes)))
    new_local = tuple(draw(st.permutations(local_modes)))
    return fields, (shape, mode_shape, new_spatial, new_local)


def one_point_changed(layout: FunctionLayout, thread: int, register: int) -> FunctionLayout:
    """`layout` with coordinate 0 moved by one (cyclically) at (thread, register) only.

    The indicator of ``t == thread`` is ``(n - (t - thread) % n) // n`` (1 at thread, else 0),
    pure arithmetic that runs on ints, arrays and Exprs alike.
    """
    n, m = layout.num_threads, layout.local_size

    def fn(t: Any, i: Any) -> tuple[Any, ...]:
        coords = layout.map(t, i)
        hit = (n - (t - thread) % n) // n * ((m - (i - register) % m) // m)
        return ((coords[0] + hit) % layout.shape[0], *coords[1:])

    return FunctionLayout(layout.shape, n, m, fn)


# --------------------------------------------------------------------------------------------
# check_equivalent on pairs
# --------------------------------------------------------------------------------------------


@settings(max_examples=70)
@given(
    strategies.layout_fields().flatmap(lambda f: st.tuples(st.just(f), strategies.refinements(f)))
)
def test_equal_pairs_are_proved(pair: tuple) -> None:
    fields, refined = pair
    canonical, formula = register_layout(*fields), by_definition(refined)
    assert brute_equal(canonical, formula)
    result = check_equivalent(canonical, formula, **LIMITS)
    assert result.holds is True, result.reason


@settings(max_examples=80)
@given(reordered())
def test_reordered_pairs_agree_with_brute_force(pair: tuple) -> None:
    fields, other = pair
    a, b = by_definition(fields), by_definition(other)
    result = check_equivalent(a, b, **LIMITS)
    assert result.holds is brute_equal(a, b)
    assert result.holds is (register_layout(*fields) == register_layout(*other))
    if not result.holds:
        assert_confirmed(result, a, b)


@settings(max_examples=70)
@given(strategies.arbitrary_register_layouts(max_rank=2), st.data())
def test_a_single_changed_point_is_found(layout: Any, data: st.DataObject) -> None:
    thread = data.draw(st.integers(0, layout.num_threads - 1))
    register = data.draw(st.integers(0, layout.local_size - 1))
    wrapped = FunctionLayout(layout.shape, layout.num_threads, layout.local_size, layout.map)
    changed = one_point_changed(wrapped, thread, register)
    result = check_equivalent(layout, changed, **LIMITS)
    assert result.holds is brute_equal(layout, changed)
    assert result.holds is (layout.shape[0] == 1)
    if not result.holds:
        assert_confirmed(result, layout, changed)
        assert (result.counterexample["t"], result.counterexample["i"]) == (thread, register)


# --------------------------------------------------------------------------------------------
# Injectivity, bijectivity, coverage
# --------------------------------------------------------------------------------------------


def brute_injective(layout: Any) -> bool:
    flat = layout.table().reshape(-1, layout.rank)
    return len({tuple(row) for row in flat}) == len(flat)


@settings(max_examples=40)
@given(reordered())
def test_injective_and_bijective_agree_with_brute_force(pair: tuple) -> None:
    _, fields = pair
    layout = by_definition(fields)
    injective = brute_injective(layout)
    assert check_injective(layout, **LIMITS).holds is injective
    bijective = injective and layout.num_threads * layout.local_size == layout.num_elements
    assert check_bijective(layout, **LIMITS).holds is bijective


def brute_covers(a: Any, b: Any) -> bool:
    held = [{tuple(c) for c in a.table()[t]} for t in range(a.num_threads)]
    return all(
        tuple(b.map(t, i)) in held[t] for t in range(b.num_threads) for i in range(b.local_size)
    )


@settings(max_examples=40)
@given(reordered(), st.booleans())
def test_covers_agrees_with_brute_force(pair: tuple, as_register_layout: bool) -> None:
    fields, other = pair
    a = register_layout(*fields) if as_register_layout else by_definition(fields)
    b = by_definition(other)
    result = check_covers(a, b, **LIMITS)
    assert result.holds is brute_covers(a, b)
    if not result.holds:
        t = result.counterexample["t"]
        assert result.counterexample["b"] == b.map(t, result.counterexample["i"])
        assert result.counterexample["b"] not in result.counterexample["a"]


# --------------------------------------------------------------------------------------------
# Memory layouts
# --------------------------------------------------------------------------------------------


@st.composite
def shared_layouts(draw: st.DrawFn, shape: tuple[int, int]) -> SharedLayout:
    """A shared layout of `shape` with random strides (one mode per dimension) and swizzle."""
    strides = tuple(draw(st.integers(0, 9)) for _ in shape)
    swizzle = None
    if draw(st.booleans()):
        bits = draw(st.integers(1, 2))
        swizzle = Swizzle(bits, draw(st.integers(0, 2)), draw(st.integers(bits, 3)))
    return SharedLayout(shape, shape, strides, swizzle)


@settings(max_examples=40)
@given(
    st.tuples(st.integers(1, 8), st.integers(1, 8)).flatmap(
        lambda s: st.tuples(shared_layouts(s), shared_layouts(s))
    )
)
def test_memory_layouts_agree_with_brute_force(pair: tuple) -> None:
    a, b = pair
    result = check_equivalent(a, b, **LIMITS)
    assert result.holds is np.array_equal(a.table(), b.table())
    if not result.holds:
        coord = result.counterexample["coord"]
        assert result.counterexample["a"] == a.offset(coord) != b.offset(coord)
    offsets = a.table().ravel()
    compact = sorted(offsets.tolist()) == list(range(offsets.size))
    assert check_bijective(a, **LIMITS).holds is compact

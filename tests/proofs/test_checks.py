"""Tests of the Z3 checks: equivalence, injectivity, bounds, bijectivity and coverage.

Literal cases over every kind of layout (register, function, access map, shared and global
memory layouts), each verdict compared with brute force over the domain, every counterexample
re-evaluated here; refusals without the solver, unknowns that are never reported as proofs, and
the errors of invalid arguments.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest

import proofs.checks
from layout_algebra import (
    GlobalLayout,
    SharedLayout,
    Swizzle,
    compose,
    global_row_major,
    local,
    replicate,
    shared_column_major,
    shared_row_major,
    shared_row_major_swizzle,
    shared_strides,
    spatial,
    var,
)
from layout_algebra.function_layout import FunctionLayout
from proofs import (
    ProofError,
    check_bijective,
    check_covers,
    check_equivalent,
    check_in_bounds,
    check_injective,
)

RLIMIT = 20_000_000
TIMEOUT = 60.0
LIMITS = {"timeout": TIMEOUT, "rlimit": RLIMIT}

MMA_C = local(2, 1).spatial(8, 4).local(1, 2)
MMA_C_PTX = FunctionLayout(
    (16, 8), 32, 4, lambda t, i: (t // 4 + 8 * (i // 2), t % 4 * 2 + i % 2), name="mma_c"
)
K = var("K", 1, 4096)


@pytest.fixture
def no_solver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a check calls the solver."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        pytest.fail("the solver was called")

    monkeypatch.setattr(proofs.checks, "search", refuse)


def table(layout: Any) -> np.ndarray:
    """Every image of a thread layout as [num_threads, local_size, ...] by brute force."""
    return np.array(
        [[layout.map(t, i) for i in range(layout.local_size)] for t in range(layout.num_threads)]
    )


# --------------------------------------------------------------------------------------------
# check_equivalent
# --------------------------------------------------------------------------------------------


def test_fragment_formula_equals_its_algebraic_form() -> None:
    result = check_equivalent(MMA_C, MMA_C_PTX, **LIMITS)
    assert result.holds is True
    assert result.counterexample is None
    assert (
        result.reason == "the two register layouts agree at every point of the domain (128 points)"
    )
    assert np.array_equal(table(MMA_C), table(MMA_C_PTX))


def test_different_register_layouts_are_refuted_with_a_confirmed_point() -> None:
    a = spatial(8, 4).local(2, 2)
    result = check_equivalent(a, MMA_C, **LIMITS)
    assert result.holds is False
    example = result.counterexample
    assert set(example) == {"t", "i", "a", "b"}
    assert example["a"] == a.map(example["t"], example["i"])
    assert example["b"] == MMA_C.map(example["t"], example["i"])
    assert example["a"] != example["b"]
    assert result.reason.startswith(f"the register layouts differ at t={example['t']}, ")


def test_a_deliberately_wrong_fragment_is_refuted() -> None:
    # The PTX formula with the register halves swapped (c0, c1 <-> c2, c3).
    wrong = FunctionLayout(
        (16, 8), 32, 4, lambda t, i: (t // 4 + 8 * (1 - i // 2), t % 4 * 2 + i % 2)
    )
    result = check_equivalent(MMA_C, wrong, **LIMITS)
    assert result.holds is False
    t, i = result.counterexample["t"], result.counterexample["i"]
    assert result.counterexample["a"] == MMA_C.map(t, i) != wrong.map(t, i)


@pytest.mark.parametrize(
    ("a", "b", "reason"),
    [
        (spatial(4, 8), spatial(8, 4), r"shape differs: \(4, 8\) and \(8, 4\)"),
        (
            spatial(8).local(2),
            spatial(8).replicate(2).local(2),
            r"num_threads differs: 8 and 16",
        ),
        (spatial(2).local(4), FunctionLayout((8,), 2, 8, lambda t, i: (i,)), r"local_size differs"),
        (spatial(4, 4), shared_row_major(4, 4), r"a is a register layout and b is a memory layout"),
        (
            compose(shared_row_major(16, 8), MMA_C),
            MMA_C,
            r"a is an access map and b is a register layout",
        ),
        (shared_row_major(4, 8), shared_row_major(8, 4), r"extent 0 differs: 4 and 8"),
        (
            shared_row_major(4, 8),
            shared_row_major(4, 8, 1),
            r"shape differs: \(4, 8\) and \(4, 8, 1\)",
        ),
        (
            global_row_major(64, K),
            global_row_major(64, var("N", 1)),
            r"extent 1 differs: K and N",
        ),
    ],
)
def test_different_domains_are_refuted_without_the_solver(
    a: Any, b: Any, reason: str, no_solver: None
) -> None:
    result = check_equivalent(a, b, **LIMITS)
    assert result.holds is False
    assert result.counterexample is None
    assert result.reason.startswith("not the same domain: ")
    assert re.search(reason, result.reason)


def test_swizzles_that_agree_on_a_small_tile_are_equivalent() -> None:
    # Swizzle(1, 0, 4) reads bit 4 of the offset, which a 4 x 4 tile never sets.
    swizzled = SharedLayout((4, 4), (4, 4), (4, 1), Swizzle(1, 0, 4))
    assert swizzled != shared_row_major(4, 4)
    assert check_equivalent(swizzled, shared_row_major(4, 4), **LIMITS).holds is True
    assert np.array_equal(swizzled.table(), shared_row_major(4, 4).table())


def test_swizzled_and_plain_shared_layouts_differ_at_a_coordinate() -> None:
    swizzled = shared_row_major_swizzle(8, 64, element_bits=16)
    plain = shared_row_major(8, 64)
    result = check_equivalent(swizzled, plain, **LIMITS)
    assert result.holds is False
    coord = result.counterexample["coord"]
    assert set(result.counterexample) == {"coord", "a", "b"}
    assert result.counterexample["a"] == swizzled.offset(coord) != plain.offset(coord)
    assert result.counterexample["b"] == plain.offset(coord)


def test_equal_strided_shared_layouts() -> None:
    assert check_equivalent(shared_row_major(4, 8), shared_strides((4, 8), (8, 1)), **LIMITS).holds


def test_access_maps() -> None:
    row_major = compose(shared_row_major(16, 8), MMA_C)
    same = compose(shared_strides((16, 8), (8, 1)), MMA_C)
    assert check_equivalent(row_major, same, **LIMITS).holds is True
    column_major = compose(shared_column_major(16, 8), MMA_C)
    result = check_equivalent(row_major, column_major, **LIMITS)
    assert result.holds is False
    t, i = result.counterexample["t"], result.counterexample["i"]
    assert result.counterexample["a"] == row_major.offset(t, i)
    assert result.counterexample["b"] == column_major.offset(t, i)
    assert result.counterexample["a"] != result.counterexample["b"]


def test_symbolic_global_layouts() -> None:
    assert check_equivalent(global_row_major(64, K), GlobalLayout((64, K), (K, 1)), **LIMITS).holds
    padded = GlobalLayout((64, K), (K + 1, 1))
    result = check_equivalent(global_row_major(64, K), padded, **LIMITS)
    assert result.holds is False
    example = result.counterexample
    bound = {"K": example["params"]["K"]}
    assert 1 <= bound["K"] <= 4096
    assert example["a"] == global_row_major(64, K).bind(bound).offset(example["coord"])
    assert example["b"] == padded.bind(bound).offset(example["coord"])
    assert example["a"] != example["b"]


def test_access_maps_with_a_symbolic_stride() -> None:
    register = spatial(16, 4).local(1, 2)
    a = compose(GlobalLayout((16, 8), (K, 1)), register)
    b = compose(GlobalLayout((16, 8), (K, 1)), register)
    assert check_equivalent(a, b, **LIMITS).holds is True
    result = check_equivalent(compose(global_row_major(16, 8), register), a, **LIMITS)
    assert result.holds is False
    assert result.counterexample["params"]["K"] != 8


def test_a_formula_that_divides_by_zero_is_never_proven() -> None:
    # (t + 8 * (t // (t - 3))) % 8 is t, except at t = 3, where it divides by zero.
    risky = FunctionLayout((8,), 8, 1, lambda t, i: ((t + t // (t - 3) * 8) % 8,))
    result = check_equivalent(spatial(8), risky, **LIMITS)
    assert result.holds is None
    assert "ZeroDivisionError" in result.reason


def test_an_untranslatable_formula_gives_unknown() -> None:
    n = var("n")
    xor = FunctionLayout((8,), 8, 1, lambda t, i: (t ^ n,))
    result = check_equivalent(spatial(8), xor, **LIMITS)
    assert result.holds is None
    assert result.reason.startswith("not translated to Z3: operand n of '^'")


@pytest.mark.parametrize(
    "formula",
    [
        lambda t, i: (t ^ 1,),  # bounded and non-negative: whole-query bit-vectors
        lambda t, i: ((t ^ 1) - 8 + 8,),  # a negative intermediate: integers with Int2BV
    ],
    ids=["bitvectors", "integers"],
)
def test_xor_formulas_are_proved_in_either_translation(formula: Any) -> None:
    pairs = FunctionLayout((8,), 8, 1, formula)
    swapped = FunctionLayout((8,), 8, 1, lambda t, i: (t + 1 - t % 2 * 2,))
    assert check_equivalent(pairs, swapped, **LIMITS).holds is True
    result = check_equivalent(pairs, spatial(8), **LIMITS)
    assert result.holds is False
    assert result.counterexample["a"] == pairs.map(result.counterexample["t"], 0)


def test_resource_limit_gives_unknown() -> None:
    swizzled = shared_row_major_swizzle(64, 64, element_bits=16)
    result = check_bijective(swizzled, timeout=TIMEOUT, rlimit=1000)
    assert result.holds is None
    assert result.reason.startswith("the solver gave up")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout": 0}, r"timeout must be a positive number of seconds, got 0"),
        ({"timeout": "1"}, r"timeout must be a positive number of seconds, got '1'"),
        ({"rlimit": 0}, r"rlimit must be a positive int or None, got 0"),
        ({"rlimit": 1.5}, r"rlimit must be a positive int or None, got 1.5"),
    ],
)
def test_bad_limits_raise(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ProofError, match=message):
        check_equivalent(MMA_C, MMA_C, **kwargs)


def test_objects_that_are_no_layout_raise() -> None:
    with pytest.raises(ProofError, match=r"'ab' is not a layout the proofs understand"):
        check_equivalent(MMA_C, "ab")


# --------------------------------------------------------------------------------------------
# check_injective, check_in_bounds, check_bijective
# --------------------------------------------------------------------------------------------


def brute_injective(layout: Any) -> bool:
    images = [tuple(np.atleast_1d(v)) for v in table(layout).reshape(-1, layout.rank)]
    return len(set(images)) == len(images)


@pytest.mark.parametrize(
    ("layout", "injective"),
    [
        (MMA_C, True),
        (MMA_C_PTX, True),
        (spatial(4).replicate(2), False),  # two threads per element
        (FunctionLayout((8,), 8, 1, lambda t, i: (t * 3 % 8,)), True),
        (FunctionLayout((8,), 8, 1, lambda t, i: (t * 2 % 8,)), False),
    ],
)
def test_injective_register_layouts(layout: Any, injective: bool) -> None:
    result = check_injective(layout, **LIMITS)
    assert result.holds is injective
    assert brute_injective(layout) is injective
    if not injective:
        first, second = result.counterexample["first"], result.counterexample["second"]
        assert (first["t"], first["i"]) < (second["t"], second["i"])
        image = result.counterexample["image"]
        assert layout.map(first["t"], first["i"]) == image == layout.map(second["t"], second["i"])


def test_injective_memory_layouts() -> None:
    assert check_injective(shared_row_major_swizzle(8, 64, element_bits=16), **LIMITS).holds
    overlapping = shared_strides((4, 4), (2, 1))
    result = check_injective(overlapping, **LIMITS)
    assert result.holds is False
    first, second = (
        result.counterexample["first"]["coord"],
        result.counterexample["second"]["coord"],
    )
    assert overlapping.offset(first) == overlapping.offset(second) == result.counterexample["image"]
    assert first != second


@pytest.mark.parametrize(
    ("layout", "in_bounds"),
    [
        (MMA_C_PTX, True),
        (FunctionLayout((4,), 4, 1, lambda t, i: (t + 1,)), False),
        (FunctionLayout((4, 4), 4, 4, lambda t, i: (t, i - 1)), False),
        (shared_row_major(4, 4), True),
        (shared_strides((4, 4), (5, 1)), False),  # padded rows: offsets beyond 16
    ],
)
def test_in_bounds(layout: Any, in_bounds: bool) -> None:
    result = check_in_bounds(layout, **LIMITS)
    assert result.holds is in_bounds
    if not in_bounds:
        point, image = result.counterexample["first"], result.counterexample["image"]
        if "coord" in point:
            assert layout.offset(point["coord"]) == image >= math.prod(layout.shape)
        else:
            assert layout.map(point["t"], point["i"]) == image
            assert any(not 0 <= c < e for c, e in zip(image, layout.shape))


@pytest.mark.parametrize(
    ("layout", "bijective"),
    [
        (MMA_C, True),
        (MMA_C_PTX, True),
        (FunctionLayout((8,), 8, 1, lambda t, i: (t * 3 % 8,)), True),
        (FunctionLayout((8,), 8, 1, lambda t, i: (t * 2 % 8,)), False),
        (FunctionLayout((8,), 8, 1, lambda t, i: (t + 1,)), False),
        (shared_row_major_swizzle(8, 64, element_bits=16), True),
        (shared_strides((4, 4), (5, 1)), False),
        (compose(shared_row_major(16, 8), MMA_C), True),
    ],
)
def test_bijective(layout: Any, bijective: bool) -> None:
    result = check_bijective(layout, **LIMITS)
    assert result.holds is bijective
    if not bijective:
        assert "first" in result.counterexample


def test_bijective_counts_without_the_solver(no_solver: None) -> None:
    result = check_bijective(spatial(4).replicate(2), **LIMITS)
    assert result.holds is False
    assert result.counterexample is None
    assert result.reason == "8 (thread, register) pairs cannot map one-to-one onto 4 elements"


# --------------------------------------------------------------------------------------------
# check_covers
# --------------------------------------------------------------------------------------------


def brute_covers(a: Any, b: Any) -> bool:
    held_a = [set(map(tuple, table(a)[t])) for t in range(a.num_threads)]
    return all(
        tuple(b.map(t, i)) in held_a[t] for t in range(b.num_threads) for i in range(b.local_size)
    )


REVERSED_REGISTERS = FunctionLayout((16, 8), 32, 4, lambda t, i: MMA_C.map(t, 3 - i))
SHIFTED = FunctionLayout((8,), 4, 1, lambda t, i: (t + 4,))


@pytest.mark.parametrize(
    ("a", "b", "covers"),
    [
        (MMA_C, REVERSED_REGISTERS, True),  # same elements per thread, other registers
        (REVERSED_REGISTERS, MMA_C, True),  # the same through register expansion
        (MMA_C, spatial(8, 4).local(2, 2), False),
        (MMA_C_PTX, spatial(8, 4).local(2, 2), False),
        (local(2).spatial(4), SHIFTED, True),  # thread t holds t and t + 4; b needs t + 4
        (spatial(4).local(2), SHIFTED, False),
        (spatial(4).replicate(2), replicate(2).spatial(4), False),
        (spatial(4).replicate(2), spatial(4).replicate(2), True),
    ],
)
def test_covers(a: Any, b: Any, covers: bool) -> None:
    result = check_covers(a, b, **LIMITS)
    assert result.holds is covers
    assert brute_covers(a, b) is covers
    if not covers:
        t, i = result.counterexample["t"], result.counterexample["i"]
        assert result.counterexample["b"] == b.map(t, i)
        assert result.counterexample["b"] not in result.counterexample["a"]
        assert set(result.counterexample["a"]) == set(map(tuple, table(a)[t]))


def test_covers_needs_the_same_tile_and_threads(no_solver: None) -> None:
    result = check_covers(spatial(4, 8), spatial(8, 4), **LIMITS)
    assert result.holds is False
    assert result.counterexample is None
    assert result.reason.startswith("not the same tile and threads: shape (4, 8) over 32")


def test_covers_rejects_memory_layouts() -> None:
    with pytest.raises(ProofError, match=r"check_covers needs register layouts, but b is a memory"):
        check_covers(spatial(4, 4), shared_row_major(4, 4))

"""Soundness of the whole-query bit-vector translation: its width, and divisors that may be zero.

A query whose formulas have XOR, AND or OR is translated to bit-vectors of the width
`proofs.encode.bitvector_width` gives (`proofs.checks`, `proofs.swizzle`). A width too small
would wrap large addresses around: a swizzled shared layout and the same layout shifted by
``2**k`` would then read as one function, and a proof would follow. These tests pin the width
on such addresses (k from 13 to 23, offsets of 8 KiB to 8 MiB elements): with it the shift is
refuted with a confirmed counterexample, in the checks and in the swizzle proofs; with a width
too small for the shift, the encoder refuses the translation and the verdict is unknown.

A divisor that may be zero makes `bitvector_width` answer None (the query stays in integers),
and `Encoder.defined` is false exactly where the divisor is zero, in either translation; an
address that divides by zero for one thread is then never proved, by any check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import z3

import proofs.checks
from layout_algebra import Expr, Swizzle, evaluate, shared_row_major_swizzle, var
from layout_algebra.shared import SharedLayout
from proofs import (
    Encoder,
    EncodingError,
    check_bijective,
    check_equivalent,
    check_in_bounds,
    check_injective,
)
from proofs.encode import bitvector_width
from proofs.swizzle import check_permutation

RLIMIT = 5_000_000
TIMEOUT = 60.0

SWIZZLED = shared_row_major_swizzle(8, 64, element_bits=16)
"""Offsets 0 .. 511, swizzled by Swizzle(3, 3, 3)."""
SHIFTS = range(13, 24)
"""Exponents k of the shifts ``2**k`` tried: far above the swizzled offsets."""

ROW = var("c0", 0, 7)
COLUMN = var("c1", 0, 63)
T = var("t", 0, 7)


@dataclass(frozen=True)
class Shifted:
    """A memory layout: `layout`'s offsets plus `by`."""

    layout: SharedLayout
    by: int

    @property
    def shape(self) -> tuple[int, ...]:
        return self.layout.shape

    def offset(self, coord: Any) -> Any:
        return self.layout.offset(coord) + self.by


@dataclass(frozen=True)
class Address:
    """An access map of 8 threads with one register each, whose offset is `formula(t)`."""

    formula: Callable[[Any], Any]
    num_threads: int = 8
    local_size: int = 1

    def offset(self, t: Any, i: Any) -> Any:
        return self.formula(t)


def record_widths(monkeypatch: pytest.MonkeyPatch, change: int = 0) -> list[int | None]:
    """Spy on the width `proofs.checks` takes for its bit-vector queries: returns the list of
    widths given, each `change` away from `bitvector_width`'s."""
    widths: list[int | None] = []

    def width(exprs: Any) -> int | None:
        true_width = bitvector_width(exprs)
        widths.append(None if true_width is None else true_width + change)
        return widths[-1]

    monkeypatch.setattr(proofs.checks, "bitvector_width", width)
    return widths


# ----------------------------------------------------------------------------------------------
# The width
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", SHIFTS)
def test_width_of_a_shifted_swizzled_address(k: int) -> None:
    # The largest bound, 2**k + 511, has k + 1 bits; a spare bit for signed comparisons and one
    # for a limit + 1 make k + 3.
    address = SWIZZLED.offset((ROW, COLUMN)) + (1 << k)
    assert address.bounds() == (1 << k, (1 << k) + 511)
    assert bitvector_width([address]) == k + 3


@pytest.mark.parametrize("k", SHIFTS)
def test_a_swizzled_layout_shifted_by_2_to_the_k_is_refuted(
    k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    widths = record_widths(monkeypatch)
    result = check_equivalent(SWIZZLED, Shifted(SWIZZLED, 1 << k), TIMEOUT, RLIMIT)
    assert result.holds is False, result.reason
    example = result.counterexample
    assert set(example) == {"coord", "a", "b"}
    assert example["a"] == SWIZZLED.offset(example["coord"])
    assert example["b"] == example["a"] + (1 << k)
    assert widths == [k + 3]  # one query, in bit-vectors


@pytest.mark.parametrize("k", SHIFTS)
def test_a_width_that_wraps_the_shift_to_zero_is_never_a_proof(
    k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three bits short, the width is k: 2**k would be 0 in it, and the two layouts one function.
    widths = record_widths(monkeypatch, change=-3)
    result = check_equivalent(SWIZZLED, Shifted(SWIZZLED, 1 << k), TIMEOUT, RLIMIT)
    assert widths == [k]
    assert result.holds is None
    assert result.reason.endswith(
        f"has bounds ({1 << k}, {(1 << k) + 511}), outside [0, 2**{k - 1}) of the {k}-bit "
        "translation"
    )


@pytest.mark.parametrize("k", SHIFTS)
def test_the_encoder_refuses_a_node_outside_its_width(k: int) -> None:
    address = SWIZZLED.offset((ROW, COLUMN)) + (1 << k)
    with pytest.raises(EncodingError, match=rf"outside \[0, 2\*\*{k}\) of the {k + 1}-bit"):
        Encoder(ctx=z3.Context(), width=k + 1).term(address)
    term = Encoder(ctx=z3.Context(), width=k + 2).term(address)
    for row, column in [(0, 0), (3, 17), (7, 63)]:
        value = z3.simplify(
            z3.substitute(
                term,
                (z3.BitVec("c0", k + 2, term.ctx), z3.BitVecVal(row, k + 2, term.ctx)),
                (z3.BitVec("c1", k + 2, term.ctx), z3.BitVecVal(column, k + 2, term.ctx)),
            )
        )
        assert value.as_long() == evaluate(address, {"c0": row, "c1": column})


@pytest.mark.parametrize("k", SHIFTS)
def test_a_swizzle_shifted_by_2_to_the_k_is_no_permutation(k: int) -> None:
    swizzle = Swizzle(3, 3, 4)
    x = var("x", 0, (1 << swizzle.width) - 1)
    result = check_permutation(swizzle(x) + (1 << k), "x", swizzle.width, rlimit=RLIMIT)
    assert result.holds is False, result.reason
    example = result.counterexample
    assert example["image_x"] == swizzle(example["x"]) + (1 << k)
    assert example["image_x"] >= 1 << swizzle.width


# ----------------------------------------------------------------------------------------------
# Divisors that may be zero
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "width"),
    [
        ((T ^ 1) + T // (T % 4), None),  # T % 4 is 0 for t = 0, 4
        ((T ^ 1) + T % (T & 3), None),
        ((T ^ 1) + T // (T % 4 + 1), 6),  # divisor in [1, 4]; nodes in [0, 14]: 4 bits + 2
    ],
    ids=["floor_division", "modulo", "nonzero_divisor"],
)
def test_a_divisor_that_may_be_zero_keeps_the_query_in_integers(
    expr: Expr, width: int | None
) -> None:
    assert bitvector_width([expr]) == width


@pytest.mark.parametrize("op", ["//", "%"])
@pytest.mark.parametrize("width", [None, 5], ids=["integers", "bitvectors"])
def test_a_quotient_is_defined_exactly_where_its_divisor_is_nonzero(
    width: int | None, op: str
) -> None:
    divisor = var("d", 0, 3)
    expr = T // divisor if op == "//" else T % divisor
    encoder = Encoder(ctx=z3.Context(), width=width)
    defined = encoder.defined(expr)
    encoder.term(expr)
    solver = z3.Solver(ctx=encoder.context)
    solver.set("rlimit", RLIMIT)
    solver.add(*encoder.bounds())
    solver.add(defined != (encoder.variables["d"] != 0))
    assert solver.check() == z3.unsat


RISKY = Address(lambda t: ((t ^ 1) + t // (t % 4) * 8) % 8)
"""``t ^ 1`` wherever it is defined; threads 0 and 4 divide by zero."""
SAFE = Address(lambda t: ((t ^ 1) + t // (t % 4 + 1) * 8) % 8)
"""``t ^ 1`` for every thread."""
PAIRS = Address(lambda t: t ^ 1)


@pytest.mark.parametrize(
    "check",
    [
        lambda address: check_equivalent(PAIRS, address, TIMEOUT, RLIMIT),
        lambda address: check_in_bounds(address, TIMEOUT, RLIMIT),
        lambda address: check_injective(address, TIMEOUT, RLIMIT),
        lambda address: check_bijective(address, TIMEOUT, RLIMIT),
    ],
    ids=["equivalent", "in_bounds", "injective", "bijective"],
)
def test_an_address_that_divides_by_zero_for_some_thread_is_never_proved(
    check: Callable[[Address], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    widths = record_widths(monkeypatch)
    assert check(SAFE).holds is True
    assert widths and all(width is not None for width in widths)  # bit-vectors
    widths.clear()
    result = check(RISKY)
    assert widths and all(width is None for width in widths)  # integers
    assert result.holds is None, result.reason
    assert result.counterexample is None
    assert "raised ZeroDivisionError" in result.reason

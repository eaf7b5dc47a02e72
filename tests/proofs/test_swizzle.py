"""Tests of the bit-vector swizzle proofs: every verdict cross-checked by brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from layout_algebra import (
    Expr,
    LayoutError,
    SharedLayout,
    Swizzle,
    evaluate,
    shared_row_major,
    shared_row_major_swizzle,
    shared_strides,
    var,
)
from proofs.swizzle import (
    check_permutation,
    check_rows_conflict_free,
    check_swizzle_bijective,
)

RLIMIT = 5_000_000
TIMEOUT = 60.0

x = var("x", 0, 15)


def brute_permutes(expr: Expr, width: int) -> bool:
    images = [evaluate(expr, {"x": value}) for value in range(1 << width)]
    return sorted(images) == list(range(1 << width))


# ----------------------------------------------------------------------------------------------
# Permutations
# ----------------------------------------------------------------------------------------------

ALL_SWIZZLES = [
    Swizzle(bits, base, shift)
    for bits in range(4)
    for base in range(4)
    for shift in range(max(bits, 1), bits + 3)
]


@pytest.mark.parametrize("swizzle", ALL_SWIZZLES, ids=repr)
def test_every_swizzle_is_proved_a_bijection(swizzle: Swizzle) -> None:
    result = check_swizzle_bijective(swizzle, rlimit=RLIMIT, timeout=TIMEOUT)
    assert result.holds is True, result.reason
    assert result.counterexample is None
    block = np.arange(1 << swizzle.width)
    assert sorted(swizzle(block).tolist()) == block.tolist()


def test_cute_swizzle_proof_reason() -> None:
    result = check_swizzle_bijective(Swizzle(3, 3, 4), rlimit=RLIMIT, timeout=TIMEOUT)
    assert result.holds is True
    assert result.reason == "x ^ (x & 896) >> 4 permutes [0, 2**10)"
    assert result.seconds >= 0


@pytest.mark.parametrize(
    ("expr", "permutes"),
    [
        (x // 2, False),  # two values per image
        (x * 2, False),  # leaves the range
        (x & 6, False),
        (x | 1, False),
        (x ^ 5, True),
        (x ^ (x >> 1), True),  # the Gray code
        ((x * 3) % 16, True),
        ((x * 2) % 16, False),
        (x ^ ((x & 3) << 2), True),  # low bits into high bits
        (15 - x, True),
    ],
    ids=repr,
)
def test_permutation_verdicts_match_brute_force(expr: Expr, permutes: bool) -> None:
    result = check_permutation(expr, "x", 4, rlimit=RLIMIT, timeout=TIMEOUT)
    assert result.holds is permutes is brute_permutes(expr, 4)
    if not permutes:
        example = result.counterexample
        image_x = evaluate(expr, {"x": example["x"]})
        image_y = evaluate(expr, {"x": example["y"]})
        assert (example["image_x"], example["image_y"]) == (image_x, image_y)
        collision = example["x"] != example["y"] and image_x == image_y
        assert collision or image_x >= 16


def test_permutation_of_another_variable_name() -> None:
    z = var("z", 0, 3)
    assert check_permutation(z ^ 1, "z", 3, rlimit=RLIMIT, timeout=TIMEOUT).holds is True


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        (x - 8, "may be negative"),
        (x // (x % 4), "divisor of '//' may be zero"),
        (x < 3, "operator '<' is outside the bit-vector fragment"),
    ],
    ids=repr,
)
def test_untranslatable_expressions_are_unknown(expr: Expr, reason: str) -> None:
    result = check_permutation(expr, "x", 4, rlimit=RLIMIT, timeout=TIMEOUT)
    assert result.holds is None
    assert result.counterexample is None
    assert reason in result.reason


def test_exhausted_resource_limit_is_unknown() -> None:
    wide = var("x", 0, (1 << 24) - 1)
    expr = (wide * 3 + (wide >> 5) * 7) % (1 << 24)
    result = check_permutation(expr, "x", 24, rlimit=1, timeout=TIMEOUT)
    assert result.holds is None
    assert result.reason.startswith("the solver gave up")


def test_permutation_argument_errors() -> None:
    with pytest.raises(LayoutError, match=r"reads variables \['n'\] besides 'x'"):
        check_permutation(x ^ var("n", 0), "x", 4)
    with pytest.raises(LayoutError, match="expects an Expr, got 3"):
        check_permutation(3, "x", 4)
    with pytest.raises(LayoutError, match="width must be a non-negative int, got -1"):
        check_permutation(x, "x", -1)
    with pytest.raises(LayoutError, match="rlimit must be a positive integer, got 0"):
        check_permutation(x, "x", 4, rlimit=0)
    with pytest.raises(LayoutError, match="timeout must be a positive number of seconds"):
        check_permutation(x, "x", 4, timeout=0)
    with pytest.raises(LayoutError, match=r"expects a Swizzle, got \(3, 3, 3\)"):
        check_swizzle_bijective((3, 3, 3))


# ----------------------------------------------------------------------------------------------
# Conflict-free rows
# ----------------------------------------------------------------------------------------------


def brute_rows_conflict_free(layout: SharedLayout, element_bits: int) -> bool:
    """The claim of `check_rows_conflict_free`, enumerated over every row, chunk and lane."""
    lanes = 128 // element_bits
    table = layout.table().reshape(-1, layout.shape[-1])
    rows, chunks = table.shape[0], layout.shape[-1] // lanes
    for r, v in itertools.product(range(rows), range(chunks)):
        start = int(table[r, v * lanes])
        if start % lanes or table[r, v * lanes : (v + 1) * lanes].tolist() != list(
            range(start, start + lanes)
        ):
            return False
    for first, v in itertools.product(range(rows), range(chunks)):
        window = range(first, min(first + 8, rows))
        groups = [int(table[r, v * lanes]) * element_bits // 128 % 8 for r in window]
        if len(set(groups)) != len(groups):
            return False
    return True


SWIZZLED_CASES = [
    (shape, element_bits)
    for element_bits in (8, 16, 32)
    for shape in [(16, 16 * 128 // element_bits // 8 * chunks) for chunks in (1, 2, 4, 8, 16)]
] + [((2, 12, 96), 16), ((24, 48), 16), ((9, 256), 4), ((40, 8), 128)]


@pytest.mark.parametrize(("shape", "element_bits"), SWIZZLED_CASES)
def test_row_major_swizzle_is_proved_conflict_free(shape: tuple, element_bits: int) -> None:
    layout = shared_row_major_swizzle(*shape, element_bits=element_bits)
    result = check_rows_conflict_free(layout, element_bits, rlimit=RLIMIT, timeout=TIMEOUT)
    assert result.holds is True, result.reason
    assert brute_rows_conflict_free(layout, element_bits)


@pytest.mark.parametrize(
    ("layout", "element_bits", "holds"),
    [
        # 128-byte rows without a swizzle: rows r and r + 1 share their bank groups
        (shared_row_major(16, 64), 16, False),
        # padding each row by 16 bytes also makes 8 rows conflict-free
        (shared_strides((16, 64), (72, 1)), 16, True),
        # padding by 8 bytes breaks the 16-byte alignment of odd rows
        (shared_strides((16, 64), (68, 1)), 16, False),
        # a swizzle of single elements tears chunks apart
        (SharedLayout((8, 64), (8, 64), (64, 1), Swizzle(1, 0, 6)), 16, False),
        # the f16 swizzle used for 8-bit elements: chunks of 16 elements torn
        (SharedLayout((8, 128), (8, 128), (128, 1), Swizzle(3, 3, 4)), 8, False),
        # 16-byte rows need no swizzle
        (shared_row_major(32, 8), 16, True),
    ],
    ids=["row_major", "padded_16", "padded_8", "element_swizzle", "wrong_base", "narrow"],
)
def test_conflict_verdicts_match_brute_force(
    layout: SharedLayout, element_bits: int, holds: bool
) -> None:
    result = check_rows_conflict_free(layout, element_bits, rlimit=RLIMIT, timeout=TIMEOUT)
    assert result.holds is holds is brute_rows_conflict_free(layout, element_bits)
    if holds:
        return
    example = result.counterexample
    lanes = 128 // element_bits
    rows = math.prod(layout.shape[:-1])

    def offset(row: int, column: int) -> int:
        coord = np.unravel_index(row, layout.shape[:-1]) if rows > 1 else ()
        return layout.offset((*(int(c) for c in coord), column))

    if "other_row" in example:
        first, second = example["row"], example["other_row"]
        assert 0 < second - first < 8
        a, b = offset(first, example["column"]), offset(second, example["column"])
        assert (example["offset"], example["other_offset"]) == (a, b)
        assert a * element_bits // 128 % 8 == b * element_bits // 128 % 8
    else:
        column = example["column"]
        start = offset(example["row"], column - column % lanes)
        assert (example["offset"], example["chunk_start"]) == (
            offset(example["row"], column),
            start,
        )
        assert start % lanes or example["offset"] != start + column % lanes


def test_conflict_argument_errors() -> None:
    with pytest.raises(LayoutError, match="element_bits must be a power of two <= 128, got 6"):
        check_rows_conflict_free(shared_row_major(8, 64), 6)
    with pytest.raises(LayoutError, match="rows of 60 elements of 16 bits are not a whole"):
        check_rows_conflict_free(shared_row_major(8, 60), 16)
    with pytest.raises(LayoutError, match="expected a SharedLayout of rank >= 1"):
        check_rows_conflict_free(SharedLayout((), (), ()), 16)

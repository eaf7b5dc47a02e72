"""Bit-vector proofs about XOR-swizzled shared-memory layouts.

Two claims, each decided by Z3 over bit-vectors (the theory in which XOR, AND and shifts are
native) on the very expressions the library builds: `Swizzle.__call__` and `SharedLayout.offset`
applied to symbolic variables, translated by the shared `proofs.encode.Encoder` in its
whole-query bit-vector mode (width from `proofs.encode.bitvector_width`).

- `check_swizzle_bijective(swizzle)`: the swizzle permutes ``[0, 2**swizzle.width)``.
  `check_permutation(expr, name, width)` is the general form, for any expression in one variable.
- `check_rows_conflict_free(layout, element_bits)`: the claim `shared_row_major_swizzle` makes:
  every 16-byte chunk of a row stays contiguous and 16-byte aligned, and for any 8 consecutive
  rows, the chunks at one 16-byte column lie in 8 distinct bank groups
  (``(byte_address // 16) % 8``), so 8 threads reading them with 16-byte vectors (one phase) hit
  every bank once.

The checked expressions may use ``+ - * // % & | ^ << >>``, min and max, with every
sub-expression's interval non-negative and every divisor at least 1; then the bit-vector
translation is exact. Anything else is not translated: the result is unknown (`holds` None),
never proven.

Results are `proofs.result.ProofResult`s. A model the solver finds is confirmed by evaluating
the expressions on ints before it is reported as a counterexample (`holds` False); a model that
does not confirm gives `holds` None. The solver is bounded by Z3's resource limit (`rlimit`,
independent of machine load) and by a wall-clock `timeout` in seconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from itertools import chain

import z3

from layout_algebra.errors import LayoutError
from layout_algebra.shared import SharedLayout, Swizzle
from layout_algebra.symbolic import Expr, const, evaluate, var
from proofs.encode import Encoder, bitvector_width
from proofs.result import MAX_TIMEOUT, ProofResult, elapsed, search, unknown

DEFAULT_RLIMIT = 20_000_000
DEFAULT_TIMEOUT = 30.0

_FRAGMENT = frozenset(
    {"var", "const", "+", "-", "*", "//", "%", "&", "|", "^", "<<", ">>", "min", "max"}
)
_EVALUATION_ERRORS = (ArithmeticError, ValueError, TypeError)


def _untranslatable(expressions: list[Expr]) -> str | None:
    """Why the exact bit-vector translation does not cover `expressions`, or None if it does."""
    for node in chain.from_iterable(expression.nodes() for expression in expressions):
        if node.op not in _FRAGMENT:
            return f"operator {node.op!r} is outside the bit-vector fragment"
        lo, hi = node.bounds()
        if lo is None or hi is None or lo < 0:
            return f"{node!r} may be negative or unbounded (bounds {(lo, hi)})"
        if node.op in ("//", "%") and node.args[1].bounds()[0] < 1:
            return f"divisor of {node.op!r} may be zero (bounds {node.args[1].bounds()})"
    return None


def _encoder(expressions: list[Expr]) -> Encoder:
    """A bit-vector Encoder, in a fresh Z3 context, wide enough for every one of `expressions`."""
    return Encoder(ctx=z3.Context(), width=bitvector_width(expressions))


def _check_limits(timeout: float, rlimit: int) -> None:
    if (
        not isinstance(timeout, (int, float))
        or isinstance(timeout, bool)
        or not 0 < timeout <= MAX_TIMEOUT
    ):
        raise LayoutError(
            f"timeout must be a positive number of seconds, got {timeout!r} (at most {MAX_TIMEOUT})"
        )
    if not isinstance(rlimit, int) or isinstance(rlimit, bool) or rlimit < 1:
        raise LayoutError(f"rlimit must be a positive integer, got {rlimit!r}")


def _decide(
    encoder: Encoder,
    violation: z3.BoolRef,
    report: dict[str, Expr],
    violated: Callable[[dict[str, int]], bool],
    proven: str,
    refuted: str,
    limits: tuple[float, int],
    started: float,
) -> ProofResult:
    """Search for a model of `violation` under the variables' bounds. Unsat proves the claim
    (`proven`); a model is evaluated on ints at the keys of `report` and refutes it (`refuted`)
    only when `violated` holds of those values; otherwise the result is unknown."""
    found = search(encoder.bounds(), violation, *limits)
    if found.verdict == z3.unsat:
        return ProofResult(True, None, proven, elapsed(started))
    if found.verdict != z3.sat:
        return unknown(f"the solver gave up: {found.reason_unknown}", started)
    point = encoder.values(found.model)
    try:
        example = {key: evaluate(expression, point) for key, expression in report.items()}
    except _EVALUATION_ERRORS as error:
        return unknown(
            f"the solver's point {point} did not confirm on ints: evaluating raised {error!r}",
            started,
        )
    if not violated(example):
        return unknown(f"the solver's point did not confirm on ints: {example}", started)
    return ProofResult(False, example, refuted, elapsed(started))


def check_permutation(
    expr: Expr,
    name: str,
    width: int,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    rlimit: int = DEFAULT_RLIMIT,
) -> ProofResult:
    """Whether x -> `expr` (x the variable `name`) maps ``[0, 2**width)`` one-to-one onto itself.

    Searches for x != y in the range with equal images, or an x whose image leaves the range;
    a counterexample has keys "x", "y", "image_x", "image_y" (y == x when the image leaves the
    range). `expr` may read only the variable `name`; its bounds are replaced by the range.
    """
    started = time.perf_counter()
    _check_limits(timeout, rlimit)
    if not isinstance(expr, Expr):
        raise LayoutError(f"check_permutation expects an Expr, got {expr!r}")
    if isinstance(width, bool) or not isinstance(width, int) or width < 0:
        raise LayoutError(f"width must be a non-negative int, got {width!r}")
    if expr.free_vars() - {name}:
        raise LayoutError(
            f"{expr!r} reads variables {sorted(expr.free_vars() - {name})} besides {name!r}"
        )
    top = (1 << width) - 1
    x = var("x", 0, top)
    y = var("y", 0, top)
    image_x, image_y = expr.substitute({name: x}), expr.substitute({name: y})
    why = _untranslatable([image_x, image_y])
    if why is not None:
        return unknown(f"not translated to bit-vectors: {why}", started)
    encoder = _encoder([image_x, image_y, x, y, const(top)])
    bx, by = encoder.term(x), encoder.term(y)
    fx, fy = encoder.term(image_x), encoder.term(image_y)
    violation = z3.Or(
        z3.And(bx != by, fx == fy),
        z3.And(bx == by, fx > encoder.term(const(top))),
    )

    def violated(e: dict[str, int]) -> bool:
        return (e["x"] != e["y"] and e["image_x"] == e["image_y"]) or e["image_x"] > top

    return _decide(
        encoder,
        violation,
        {"x": x, "y": y, "image_x": image_x, "image_y": image_y},
        violated,
        f"{expr!r} permutes [0, 2**{width})",
        f"{expr!r} does not permute [0, 2**{width})",
        (timeout, rlimit),
        started,
    )


def check_swizzle_bijective(
    swizzle: Swizzle, *, timeout: float = DEFAULT_TIMEOUT, rlimit: int = DEFAULT_RLIMIT
) -> ProofResult:
    """Prove that `swizzle` permutes ``[0, 2**swizzle.width)``: `check_permutation` of the
    expression ``swizzle(x)`` that the library builds (and the backend prints)."""
    if not isinstance(swizzle, Swizzle):
        raise LayoutError(f"check_swizzle_bijective expects a Swizzle, got {swizzle!r}")
    x = var("x", 0, (1 << swizzle.width) - 1)
    return check_permutation(swizzle(x), "x", swizzle.width, timeout=timeout, rlimit=rlimit)


def _row_coordinates(shape: tuple[int, ...], row: Expr, column: Expr) -> tuple[Expr, ...]:
    """The coordinate of element `column` of flattened row `row` (leading dims row-major)."""
    leading = shape[:-1]
    coords = []
    for k, extent in enumerate(leading):
        inner = math.prod(leading[k + 1 :])
        digit = row // inner
        coords.append(digit if k == 0 else digit % extent)
    return (*coords, column)


def check_rows_conflict_free(
    layout: SharedLayout,
    element_bits: int,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    rlimit: int = DEFAULT_RLIMIT,
) -> ProofResult:
    """Prove the row-access claim of `shared_row_major_swizzle` for `layout`.

    The last dimension is the row; the leading dimensions, flattened row-major, number the rows.
    With ``E = 128 // element_bits`` elements per 16-byte chunk, the claim is, for every row r,
    chunk v and lane j < E: ``offset(r, v*E + j) == offset(r, v*E) + j`` and ``offset(r, v*E)``
    is a multiple of E (chunks stay whole and aligned); and for rows r1 < r2 < r1 + 8, the bank
    groups ``((offset * element_bits) >> 7) & 7`` of ``(r1, v*E)`` and ``(r2, v*E)`` differ.
    A counterexample has keys "row", "column", "offset", "chunk_start" (a broken chunk) or
    "row", "other_row", "column", "offset", "other_offset" (a shared bank group).

    Requires `element_bits` a power of two <= 128 and rows of a whole number of chunks
    (LayoutError otherwise).
    """
    started = time.perf_counter()
    _check_limits(timeout, rlimit)
    if not isinstance(layout, SharedLayout) or layout.rank < 1:
        raise LayoutError(f"expected a SharedLayout of rank >= 1, got {layout!r}")
    if isinstance(element_bits, bool) or element_bits not in (1, 2, 4, 8, 16, 32, 64, 128):
        raise LayoutError(f"element_bits must be a power of two <= 128, got {element_bits!r}")
    lanes = 128 // element_bits
    row_length = layout.shape[-1]
    if row_length % lanes:
        raise LayoutError(
            f"rows of {row_length} elements of {element_bits} bits are not a whole number of "
            "16-byte chunks"
        )
    rows = math.prod(layout.shape[:-1])
    row = var("row", 0, rows - 1)
    other_row = var("other_row", 0, rows - 1)
    chunk = var("chunk", 0, row_length // lanes - 1)
    lane = var("lane", 0, lanes - 1)
    start = chunk * lanes
    column = start + lane
    offset = layout.offset(_row_coordinates(layout.shape, row, column))
    chunk_start = layout.offset(_row_coordinates(layout.shape, row, start))
    other_offset = layout.offset(_row_coordinates(layout.shape, other_row, start))
    why = _untranslatable([offset, chunk_start, other_offset])
    if why is not None:
        return unknown(f"not translated to bit-vectors: {why}", started)
    group, other_group = ((o * element_bits) >> 7 & 7 for o in (chunk_start, other_offset))
    misalignment, row_window = chunk_start % lanes, row + 8
    encoder = _encoder(
        [offset, chunk_start, column, lane, misalignment, group, other_group, row_window]
    )
    term = encoder.term
    broken_chunk = z3.Or(term(offset) != term(chunk_start) + term(lane), term(misalignment) != 0)

    def chunk_broken(e: dict[str, int]) -> bool:
        return (
            e["offset"] != e["chunk_start"] + e["column"] % lanes or e["chunk_start"] % lanes != 0
        )

    result = _decide(
        encoder,
        broken_chunk,
        {"row": row, "column": column, "offset": offset, "chunk_start": chunk_start},
        chunk_broken,
        "",
        "a 16-byte chunk of a row is not contiguous and aligned",
        (timeout, rlimit),
        started,
    )
    if result.holds is not True:
        return result
    shared_group = z3.And(
        term(row) < term(other_row),
        term(other_row) < term(row_window),
        term(group) == term(other_group),
    )

    def group_shared(e: dict[str, int]) -> bool:
        def bank_group(value: int) -> int:
            return (value * element_bits) >> 7 & 7

        return 0 < e["other_row"] - e["row"] < 8 and bank_group(e["offset"]) == bank_group(
            e["other_offset"]
        )

    return _decide(
        encoder,
        shared_group,
        {
            "row": row,
            "other_row": other_row,
            "column": start,
            "offset": chunk_start,
            "other_offset": other_offset,
        },
        group_shared,
        f"16-byte chunks of {layout!r} stay whole and aligned, and any 8 consecutive rows put "
        f"one chunk column in 8 distinct bank groups ({element_bits}-bit elements)",
        "two of 8 consecutive rows put a chunk column in the same bank group",
        (timeout, rlimit),
        started,
    )

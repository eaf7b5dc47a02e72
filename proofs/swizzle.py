"""Bit-vector proofs about XOR-swizzled shared-memory layouts.

Two claims, each decided by Z3 over bit-vectors (the theory in which XOR, AND and shifts are
native) on the very expressions the library builds: `Swizzle.__call__` and `SharedLayout.offset`
applied to symbolic variables, translated node by node.

- `check_swizzle_bijective(swizzle)`: the swizzle permutes ``[0, 2**swizzle.width)``.
  `check_permutation(expr, name, width)` is the general form, for any expression in one variable.
- `check_rows_conflict_free(layout, element_bits)`: the claim `shared_row_major_swizzle` makes:
  every 16-byte chunk of a row stays contiguous and 16-byte aligned, and for any 8 consecutive
  rows, the chunks at one 16-byte column lie in 8 distinct bank groups
  (``(byte_address // 16) % 8``), so 8 threads reading them with 16-byte vectors (one phase) hit
  every bank once.

Translation. Every sub-expression is bounded by interval arithmetic from the variables' bounds;
when all bounds are non-negative, a bit-vector one bit wider than the largest bound holds every
intermediate value exactly, so the unsigned bit-vector operations (``+ - * UDiv URem & | ^ <<
LShR``) compute exactly the integer values. An expression with a possibly negative part, or an
operator outside that list, is not translated: the result is unknown (`holds` None), never proven.

Results carry `holds` (True proven, False refuted, None unknown), a `counterexample` dict when
refuted, a `reason` and the `seconds` spent. The solver is bounded by Z3's resource limit
(`rlimit`, independent of machine load) and by a wall-clock `timeout` in seconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3

from layout_algebra.errors import LayoutError
from layout_algebra.shared import SharedLayout, Swizzle
from layout_algebra.symbolic import Expr, const, var

DEFAULT_RLIMIT = 20_000_000
DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True)
class SwizzleProof:
    """The verdict of one swizzle claim.

    `holds`: True when proven, False when refuted, None when unknown (resource limit, timeout,
    or an expression outside the translatable fragment). `counterexample`: for a refutation, the
    variable values and images that break the claim (keys named by each check), else None.
    `reason`: a sentence saying what was shown or why not. `seconds`: wall-clock time spent.
    """

    holds: bool | None
    counterexample: dict[str, int] | None
    reason: str
    seconds: float


class _Untranslatable(Exception):
    """An expression the exact bit-vector translation does not cover."""


Interval = tuple[int, int]


def _interval(node: Expr, memo: dict[int, Interval]) -> Interval:
    """Inclusive bounds of a node's value from its variables' (finite) bounds; raises
    _Untranslatable for a possibly negative value or an operator outside the fragment."""
    done = memo.get(id(node))
    if done is not None:
        return done
    op = node.op
    if op == "var":
        result = (node.lo, node.hi)
    elif op == "const":
        result = (node.value, node.value)
    else:
        parts = [_interval(arg, memo) for arg in node.args]
        result = _combine(op, parts)
    if result[0] < 0:
        raise _Untranslatable(f"{node!r} may be negative (bounds {result})")
    memo[id(node)] = result
    return result


def _combine(op: str, parts: list[Interval]) -> Interval:
    """Bounds of `op` on operands with non-negative bounds `parts`."""
    if op in ("min", "max"):
        pick = min if op == "min" else max
        return pick(parts[0][0], parts[1][0]), pick(parts[0][1], parts[1][1])
    (a_lo, a_hi), (b_lo, b_hi) = parts
    if op == "+":
        return a_lo + b_lo, a_hi + b_hi
    if op == "-":
        return a_lo - b_hi, a_hi - b_lo
    if op == "*":
        return a_lo * b_lo, a_hi * b_hi
    if op in ("//", "%") and b_lo < 1:
        raise _Untranslatable(f"divisor of {op!r} may be zero (bounds {(b_lo, b_hi)})")
    if op == "//":
        return a_lo // b_hi, a_hi // b_lo
    if op == "%":
        return 0, min(a_hi, b_hi - 1)
    if op == "&":
        return 0, min(a_hi, b_hi)
    if op in ("|", "^"):
        return 0, (1 << max(a_hi, b_hi).bit_length()) - 1
    if op == "<<":
        return a_lo << b_lo, a_hi << b_hi
    if op == ">>":
        return a_lo >> b_hi, a_hi >> b_lo
    raise _Untranslatable(f"operator {op!r} is outside the bit-vector fragment")


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


class _Translation:
    """Exact bit-vector forms of non-negative expressions sharing one width and variables."""

    def __init__(self, expressions: list[Expr], headroom: int = 0) -> None:
        """Bound every sub-expression; the width leaves `headroom` spare bits above the largest
        bound, for products the caller forms on the translated values."""
        memo: dict[int, Interval] = {}
        largest = max(_interval(e, memo)[1] for e in expressions)
        self.width = largest.bit_length() + 1 + headroom
        self.variables: dict[str, Any] = {}
        self.constraints: list[Any] = []
        self._memo: dict[int, Any] = {}

    def __call__(self, node: Expr) -> Any:
        done = self._memo.get(id(node))
        if done is not None:
            return done
        if node.op == "var":
            result = self.variables.get(node.name)
            if result is None:
                result = z3.BitVec(node.name, self.width)
                self.variables[node.name] = result
                self.constraints += [z3.UGE(result, node.lo), z3.ULE(result, node.hi)]
        elif node.op == "const":
            result = z3.BitVecVal(node.value, self.width)
        else:
            result = _BITVECTOR_OPS[node.op](*(self(arg) for arg in node.args))
        self._memo[id(node)] = result
        return result


def _check_limits(timeout: float, rlimit: int) -> None:
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise LayoutError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not isinstance(rlimit, int) or isinstance(rlimit, bool) or rlimit < 1:
        raise LayoutError(f"rlimit must be a positive integer, got {rlimit!r}")


def _search(
    translation: _Translation,
    violation: Any,
    report: dict[str, Expr],
    proven: str,
    refuted: str,
    timeout: float,
    rlimit: int,
) -> tuple[bool | None, dict[str, int] | None, str]:
    """Look for a model of `violation`: (holds, counterexample, reason)."""
    solver = z3.Solver()
    solver.set("timeout", max(1, int(timeout * 1000)))
    solver.set("rlimit", rlimit)
    solver.add(*translation.constraints, violation)
    verdict = solver.check()
    if verdict == z3.unsat:
        return True, None, proven
    if verdict == z3.sat:
        model = solver.model()
        example = {
            key: model.eval(translation(expression), model_completion=True).as_long()
            for key, expression in report.items()
        }
        return False, example, refuted
    return None, None, f"the solver gave up: {solver.reason_unknown()}"


def _unknown(error: _Untranslatable, started: float) -> SwizzleProof:
    return SwizzleProof(None, None, f"not translated to bit-vectors: {error}", _since(started))


def _since(started: float) -> float:
    return time.perf_counter() - started


def check_permutation(
    expr: Expr,
    name: str,
    width: int,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    rlimit: int = DEFAULT_RLIMIT,
) -> SwizzleProof:
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
    try:
        translation = _Translation([image_x, image_y, x, y, const(top)])
    except _Untranslatable as error:
        return _unknown(error, started)
    bx, by = translation(x), translation(y)
    fx, fy = translation(image_x), translation(image_y)
    limit = z3.BitVecVal(top, translation.width)
    violation = z3.Or(
        z3.And(bx != by, fx == fy),
        z3.And(bx == by, z3.UGT(fx, limit)),
    )
    holds, example, reason = _search(
        translation,
        violation,
        {"x": x, "y": y, "image_x": image_x, "image_y": image_y},
        f"{expr!r} permutes [0, 2**{width})",
        f"{expr!r} does not permute [0, 2**{width})",
        timeout,
        rlimit,
    )
    return SwizzleProof(holds, example, reason, _since(started))


def check_swizzle_bijective(
    swizzle: Swizzle, *, timeout: float = DEFAULT_TIMEOUT, rlimit: int = DEFAULT_RLIMIT
) -> SwizzleProof:
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
) -> SwizzleProof:
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
    offset = layout.offset(_row_coordinates(layout.shape, row, start + lane))
    chunk_start = layout.offset(_row_coordinates(layout.shape, row, start))
    other_offset = layout.offset(_row_coordinates(layout.shape, other_row, start))
    try:
        translation = _Translation(
            [offset, chunk_start, other_offset, row, other_row, chunk, lane, const(128)],
            headroom=element_bits.bit_length(),
        )
    except _Untranslatable as error:
        return _unknown(error, started)
    bits = z3.BitVecVal(element_bits, translation.width)

    def bank_group(expression: Expr) -> Any:
        return z3.LShR(translation(expression) * bits, 7) & 7

    broken_chunk = z3.Or(
        translation(offset) != translation(chunk_start) + translation(lane),
        z3.URem(translation(chunk_start), lanes) != 0,
    )
    holds, example, reason = _search(
        translation,
        broken_chunk,
        {"row": row, "column": start + lane, "offset": offset, "chunk_start": chunk_start},
        "",
        "a 16-byte chunk of a row is not contiguous and aligned",
        timeout,
        rlimit,
    )
    if holds is not True:
        return SwizzleProof(holds, example, reason, _since(started))
    r1, r2 = translation(row), translation(other_row)
    shared_group = z3.And(
        z3.ULT(r1, r2),
        z3.ULT(r2 - r1, 8),
        bank_group(chunk_start) == bank_group(other_offset),
    )
    holds, example, reason = _search(
        translation,
        shared_group,
        {
            "row": row,
            "other_row": other_row,
            "column": start,
            "offset": chunk_start,
            "other_offset": other_offset,
        },
        f"16-byte chunks of {layout!r} stay whole and aligned, and any 8 consecutive rows put "
        f"one chunk column in 8 distinct bank groups ({element_bits}-bit elements)",
        "two of 8 consecutive rows put a chunk column in the same bank group",
        timeout,
        rlimit,
    )
    return SwizzleProof(holds, example, reason, _since(started))

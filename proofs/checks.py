"""Equivalence, injectivity, bijectivity, bounds and coverage of layouts, decided by Z3.

Each check translates the layouts' images on symbolic indices (see `proofs.symbolic_map`) with
`proofs.encode`, in a fresh Z3 context per query (integer terms; bit-vectors throughout when the
formulas have bitwise operators, such as XOR swizzles, and are bounded), and asks Z3 for a point
of the domain that breaks the claim:

- `check_equivalent(a, b)`: a and b are the same function (a point where they differ);
- `check_injective(layout)`: no two points share an image (two such points);
- `check_in_bounds(layout)`: every image lies in the codomain: inside the shape for a register
  layout, in ``[0, number of domain points)`` for an access map or a memory layout (a point
  outside);
- `check_bijective(layout)`: a bijection onto that codomain (in bounds, injective, and as many
  domain points as codomain elements);
- `check_covers(a, b)`: every element a thread holds under b, it also holds under a (a thread
  and register of b whose element that thread does not hold under a).

A point where a formula would raise (a zero divisor) also counts as breaking the claim. Every
model is confirmed by evaluating the layouts on ints through their own methods before it is
reported: a confirmed model gives `holds=False` and the counterexample; a model that does not
confirm (or an evaluation that raises) gives `holds=None`, like a timeout or the resource limit.
Comparisons whose domains already differ answer `holds=False` at once, without the solver and
without a counterexample.

Example::

    check_equivalent(local(2, 1).spatial(8, 4).local(1, 2),
                     fragment("mma.m16n8k16.c").ptx).holds               # True
    check_equivalent(spatial(8, 4).local(2, 2),
                     local(2, 1).spatial(8, 4).local(1, 2)).counterexample
    # {"t": 0, "i": 2, "a": (1, 0), "b": (8, 0)}   (one such point)
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import z3

from layout_algebra.register import RegisterLayout
from layout_algebra.symbolic import Expr, as_expr, evaluate, logical_and
from proofs.encode import Encoder, bitvector_width, has_bitwise
from proofs.errors import EncodingError, ProofError
from proofs.result import (
    DEFAULT_TIMEOUT,
    ProofResult,
    check_limits,
    elapsed,
    search,
    unknown,
)
from proofs.symbolic_map import SymbolicMap, describe, symbolic_map, with_article

MAX_EXPANDED_REGISTERS = 1024
"""`check_covers` against a layout other than a `RegisterLayout` tries each of its registers; it
gives up (holds None) above this many."""

_EVALUATION_ERRORS = (ArithmeticError, ValueError, TypeError)


# ----------------------------------------------------------------------------------------------
# Shared machinery
# ----------------------------------------------------------------------------------------------


class _Query:
    """The index variables, parameters and domain constraints of one solver query.

    The query runs in a fresh Z3 context. When its expressions (the maps' and `extra`) have a
    bitwise operator and admit an exact bit-vector translation, every term is a bit-vector of
    `proofs.encode.bitvector_width`; otherwise the terms are integers.
    """

    def __init__(self, maps: Sequence[SymbolicMap], extra: Sequence[Expr] = ()) -> None:
        exprs = [*extra]
        for m in maps:
            exprs += [*m.indices, *m.constraints, *m.image, *(as_expr(c) for c in m.codomain)]
        width = bitvector_width(exprs) if has_bitwise(exprs) else None
        self.encoder = Encoder(ctx=z3.Context(), width=width)
        self.index_names: list[str] = []
        self._constraints: list[Any] = []
        for m in maps:
            for index in m.indices:
                if index.name not in self.index_names:
                    self.index_names.append(index.name)
                    self.encoder.term(index)
            self._constraints += [self.encoder.truth(c) for c in m.constraints]

    def images(self, m: SymbolicMap) -> tuple[list[Any], Any]:
        """The Z3 image terms of `m` and the condition that evaluating them raises nothing."""
        terms = [self.encoder.term(e) for e in m.image]
        return terms, self.all([self.encoder.defined(e) for e in m.image])

    def all(self, terms: Sequence[Any]) -> Any:
        """Z3 Bool: every one of `terms` holds (True for none)."""
        return z3.And(*terms) if terms else z3.BoolVal(True, self.encoder.context)

    def any(self, terms: Sequence[Any]) -> Any:
        """Z3 Bool: some one of `terms` holds (False for none)."""
        return z3.Or(*terms) if terms else z3.BoolVal(False, self.encoder.context)

    def constraints(self) -> list[Any]:
        """Declared bounds of every variable met, and the maps' extra domain constraints."""
        return self.encoder.bounds() + self._constraints

    def values(self, model: Any, m: SymbolicMap) -> tuple[int, ...]:
        """The model's values of `m`'s index variables."""
        return tuple(self._value(model, name) for name in m.index_names)

    def parameters(self, model: Any) -> dict[str, int]:
        """The model's values of every variable that is not an index variable."""
        names = sorted(set(self.encoder.variables) - set(self.index_names))
        return {name: self._value(model, name) for name in names}

    def _value(self, model: Any, name: str) -> int:
        return model.eval(self.encoder.variables[name], model_completion=True).as_long()


def _where(point: dict[str, Any]) -> str:
    """A domain point as text: ``t=3, i=1`` or ``coord=(2, 5)``."""
    return ", ".join(f"{key}={value}" for key, value in point.items())


def _with_params(example: dict[str, Any], params: dict[str, int]) -> dict[str, Any]:
    if params:
        example["params"] = params
    return example


def _unconfirmed(what: str, detail: str, started: float) -> ProofResult:
    return unknown(f"the solver's {what} did not confirm on ints: {detail}", started)


def _solver_gave_up(reason: str, started: float) -> ProofResult:
    return unknown(f"the solver gave up: {reason}", started)


def _count(value: Any) -> int | None:
    """An int for a constant count, None for a symbolic one."""
    if isinstance(value, Expr):
        return value.value if value.is_const else None
    return int(value)


def _domain_mismatch(a: SymbolicMap, b: SymbolicMap) -> str | None:
    """Why the two maps cannot be the same function, or None when their domains agree."""
    if a.kind != b.kind:
        return f"a is {with_article(a.kind)} and b is {with_article(b.kind)}"
    names = {
        "layout": ("shape", "num_threads", "local_size"),
        "access": ("num_threads", "local_size"),
        "memory": tuple(f"extent {k}" for k in range(len(a.domain))),
    }[a.kind]
    if a.kind == "memory" and len(a.domain) != len(b.domain):
        return f"shape differs: {a.domain} and {b.domain}"
    for name, x, y in zip(names, a.domain, b.domain):
        if x != y:
            return f"{name} differs: {x!r} and {y!r}"
    return None


def _lexicographically_less(first: Sequence[Any], second: Sequence[Any], query: _Query) -> Any:
    """Z3 Bool: the tuple `first` comes before `second` in lexicographic order."""
    result = query.any([])
    for x, y in reversed(list(zip(first, second))):
        result = z3.Or(x < y, z3.And(x == y, result))
    return result


# ----------------------------------------------------------------------------------------------
# Equivalence
# ----------------------------------------------------------------------------------------------


def check_equivalent(
    a: Any, b: Any, timeout: float = DEFAULT_TIMEOUT, rlimit: int | None = None
) -> ProofResult:
    """Whether `a` and `b` are the same function on the same domain.

    Accepts register layouts, function layouts, access maps and memory layouts (any object of
    the protocols of `proofs.symbolic_map`). Different kinds, shapes, thread counts or local
    sizes give `holds=False` with `counterexample=None` at once. Otherwise Z3 looks for a domain
    point where the images differ; a confirmed one is the counterexample ``{"t", "i", "a", "b"}``
    (register layouts and access maps: the images are coordinate tuples or offsets) or
    ``{"coord", "a", "b"}`` (memory layouts), plus ``"params"`` (name -> value) when the
    layouts have free parameters. `timeout` is in seconds; `rlimit` bounds Z3's resource count.
    The result keeps ``(a, b)`` as `compared` (its Jupyter picture draws their difference).
    """
    return replace(_equivalence(a, b, timeout, rlimit), compared=(a, b))


def _equivalence(a: Any, b: Any, timeout: float, rlimit: int | None) -> ProofResult:
    """`check_equivalent` without `compared`."""
    started = time.perf_counter()
    check_limits(timeout, rlimit)
    map_a, map_b = symbolic_map(a), symbolic_map(b)
    mismatch = _domain_mismatch(map_a, map_b)
    if mismatch is not None:
        return ProofResult(False, None, f"not the same domain: {mismatch}", elapsed(started))
    query = _Query([map_a, map_b])
    try:
        image_a, defined_a = query.images(map_a)
        image_b, defined_b = query.images(map_b)
    except EncodingError as error:
        return unknown(f"not translated to Z3: {error}", started)
    differ = query.any([x != y for x, y in zip(image_a, image_b)])
    violation = z3.Or(z3.Not(defined_a), z3.Not(defined_b), differ)
    found = search(query.constraints(), violation, timeout, rlimit)
    kind = describe(map_a.kind)
    if found.verdict == z3.unsat:
        return ProofResult(
            True,
            None,
            f"the two {kind}s agree at every point of the domain ({map_a.num_points!r} points)",
            elapsed(started),
        )
    if found.verdict != z3.sat:
        return _solver_gave_up(found.reason_unknown, started)
    point = query.values(found.model, map_a)
    params = query.parameters(found.model)
    try:
        value_a = map_a.evaluate(point, params)
        value_b = map_b.evaluate(point, params)
    except _EVALUATION_ERRORS as error:
        return _unconfirmed("point", f"evaluating at {point} raised {error!r}", started)
    if value_a == value_b:
        return _unconfirmed("point", f"both give {value_a} at {point}", started)
    example = _with_params({**map_a.point(point), "a": value_a, "b": value_b}, params)
    return ProofResult(
        False,
        example,
        f"the {kind}s differ at {_where(map_a.point(point))}: {value_a} under a, {value_b} under b",
        elapsed(started),
    )


# ----------------------------------------------------------------------------------------------
# Injectivity, bounds, bijectivity
# ----------------------------------------------------------------------------------------------


def _outside(terms: Sequence[Any], codomain: Sequence[Any], query: _Query) -> Any:
    """Z3 Bool: some image entry lies outside [0, codomain entry)."""
    return query.any(
        [z3.Or(x < 0, x >= query.encoder.term(limit)) for x, limit in zip(terms, codomain)]
    )


def _inside(value: Any, codomain: Sequence[Any], params: dict[str, int]) -> bool:
    """Whether a concrete image lies inside the codomain (limits evaluated with `params`)."""
    values = value if isinstance(value, tuple) else (value,)
    limits = [evaluate(limit, params) if isinstance(limit, Expr) else limit for limit in codomain]
    return all(0 <= v < limit for v, limit in zip(values, limits))


def _bounds_query(layout: Any, timeout: float, rlimit: int | None, started: float) -> ProofResult:
    """Look for a domain point whose image leaves the codomain (or raises)."""
    first = symbolic_map(layout)
    query = _Query([first])
    try:
        image, defined = query.images(first)
        outside = _outside(image, first.codomain, query)
    except EncodingError as error:
        return unknown(f"not translated to Z3: {error}", started)
    found = search(query.constraints(), z3.Or(z3.Not(defined), outside), timeout, rlimit)
    if found.verdict == z3.unsat:
        return ProofResult(True, None, "every image lies in the codomain", elapsed(started))
    if found.verdict != z3.sat:
        return _solver_gave_up(found.reason_unknown, started)
    params = query.parameters(found.model)
    point = query.values(found.model, first)
    try:
        value = first.evaluate(point, params)
    except _EVALUATION_ERRORS as error:
        return _unconfirmed("point", f"evaluating at {point} raised {error!r}", started)
    if _inside(value, first.codomain, params):
        return _unconfirmed("point", f"{value} at {point} is inside the codomain", started)
    example = _with_params({"first": first.point(point), "image": value}, params)
    reason = f"{_where(first.point(point))} maps to {value}, outside the codomain"
    return ProofResult(False, example, reason, elapsed(started))


def _collision_query(
    layout: Any, timeout: float, rlimit: int | None, started: float
) -> ProofResult:
    """Look for two domain points with one image (or a point where the formula raises)."""
    first = symbolic_map(layout)
    second = symbolic_map(layout, suffix="2")
    query = _Query([first, second])
    try:
        image_1, defined_1 = query.images(first)
        image_2, defined_2 = query.images(second)
    except EncodingError as error:
        return unknown(f"not translated to Z3: {error}", started)
    indices_1 = [query.encoder.term(index) for index in first.indices]
    indices_2 = [query.encoder.term(index) for index in second.indices]
    same_image = query.all([x == y for x, y in zip(image_1, image_2)])
    ordered = _lexicographically_less(indices_1, indices_2, query)
    violation = z3.Or(z3.Not(defined_1), z3.Not(defined_2), z3.And(ordered, same_image))
    found = search(query.constraints(), violation, timeout, rlimit)
    if found.verdict == z3.unsat:
        return ProofResult(
            True, None, "no two points of the domain share an image", elapsed(started)
        )
    if found.verdict != z3.sat:
        return _solver_gave_up(found.reason_unknown, started)
    params = query.parameters(found.model)
    point_1, point_2 = query.values(found.model, first), query.values(found.model, second)
    try:
        value_1 = first.evaluate(point_1, params)
        value_2 = second.evaluate(point_2, params)
    except _EVALUATION_ERRORS as error:
        return _unconfirmed("points", f"evaluating raised {error!r}", started)
    if point_1 == point_2 or value_1 != value_2:
        return _unconfirmed(
            "points", f"{point_1} and {point_2} give {value_1} and {value_2}", started
        )
    where_1, where_2 = first.point(point_1), second.point(point_2)
    example = _with_params({"first": where_1, "second": where_2, "image": value_1}, params)
    reason = f"{_where(where_1)} and {_where(where_2)} both map to {value_1}"
    return ProofResult(False, example, reason, elapsed(started))


def check_injective(
    layout: Any, timeout: float = DEFAULT_TIMEOUT, rlimit: int | None = None
) -> ProofResult:
    """Whether no two domain points of `layout` have the same image.

    A counterexample is ``{"first": point, "second": point, "image": value}``, each point
    ``{"t", "i"}`` or ``{"coord"}`` (the first before the second in lexicographic order). A
    replicated register layout is not injective.
    """
    started = time.perf_counter()
    check_limits(timeout, rlimit)
    return _collision_query(layout, timeout, rlimit, started)


def check_in_bounds(
    layout: Any, timeout: float = DEFAULT_TIMEOUT, rlimit: int | None = None
) -> ProofResult:
    """Whether every image of `layout` lies in its codomain: inside the shape for a register
    layout (what a `FunctionLayout` formula must satisfy), in ``[0, number of domain points)``
    for an access map or a memory layout (a compact layout).

    A counterexample is ``{"first": point, "image": value}``.
    """
    started = time.perf_counter()
    check_limits(timeout, rlimit)
    return _bounds_query(layout, timeout, rlimit, started)


def check_bijective(
    layout: Any, timeout: float = DEFAULT_TIMEOUT, rlimit: int | None = None
) -> ProofResult:
    """Whether `layout` is a bijection from its domain onto its codomain (see
    `check_in_bounds`): every element of the tile held by exactly one (thread, register), or
    every offset of ``[0, n)`` used by exactly one point.

    A register layout with a different number of domain points (``num_threads * local_size``)
    than elements gives `holds=False` without the solver and without a counterexample.
    Otherwise two queries, each within `timeout` and `rlimit`: `check_in_bounds`, then
    `check_injective`; with as many points as codomain elements, the two make a bijection. A
    counterexample is that of the failing query.
    """
    started = time.perf_counter()
    check_limits(timeout, rlimit)
    m = symbolic_map(layout)
    if m.kind == "layout":
        points, elements = _count(m.num_points), math.prod(m.codomain)
        if points != elements:
            return ProofResult(
                False,
                None,
                f"{points} (thread, register) pairs cannot map one-to-one onto {elements} elements",
                elapsed(started),
            )
    in_bounds = _bounds_query(layout, timeout, rlimit, started)
    if in_bounds.holds is not True:
        return in_bounds
    injective = _collision_query(layout, timeout, rlimit, started)
    if injective.holds is not True:
        return injective
    return ProofResult(
        True,
        None,
        "every image lies in the codomain and no two points share one: a bijection",
        elapsed(started),
    )


# ----------------------------------------------------------------------------------------------
# Coverage
# ----------------------------------------------------------------------------------------------


def _tuple_of(values: Any) -> tuple[Expr, ...]:
    """Coordinates as a tuple of Exprs."""
    if isinstance(values, (tuple, list)):
        return tuple(as_expr(v) for v in values)
    return (as_expr(values),)


def _register_owns(layout: RegisterLayout, t: Expr, coord: Sequence[Expr]) -> Expr:
    """Truth Expr: thread `t` holds the element at `coord` under `layout`.

    The element is inside the shape and, for every non-replicated spatial mode, the digit of t
    for that mode equals the digit of the coordinate for it (local digits can always be matched
    by some register).
    """
    owns = as_expr(1)
    for c, extent in zip(coord, layout.shape):
        owns = logical_and(owns, logical_and(c >= 0, c < extent))
    dims = layout.mode_dims
    sizes = layout.spatial_sizes
    for position, entry in enumerate(layout.spatial_modes):
        if entry < 0:
            continue
        size = layout.mode_shape[entry]
        thread_divisor = math.prod(sizes[position + 1 :])
        coord_divisor = math.prod(
            layout.mode_shape[m] for m in range(entry + 1, len(dims)) if dims[m] == dims[entry]
        )
        thread_digit = t // thread_divisor % size
        coord_digit = coord[dims[entry]] // coord_divisor % size
        owns = logical_and(owns, thread_digit.eq(coord_digit))
    return owns


def check_covers(
    a: Any, b: Any, timeout: float = DEFAULT_TIMEOUT, rlimit: int | None = None
) -> ProofResult:
    """Whether every owner of an element under `b` also owns it under `a`: for every thread t
    and register i of b, thread t holds ``b.map(t, i)`` in some register of a.

    This is what converting a tensor from layout a to layout b without communication needs.
    Both must be register layouts (or function layouts) of one shape and thread count, else
    `holds=False` at once; their local sizes may differ. When `a` is a `RegisterLayout`, "t holds
    x" is decided from a's modes; otherwise each of a's registers is tried (at most
    `MAX_EXPANDED_REGISTERS`). A counterexample is ``{"t", "i", "b": b's element, "a": the
    sorted elements thread t holds under a}``.
    """
    started = time.perf_counter()
    check_limits(timeout, rlimit)
    map_a, map_b = symbolic_map(a), symbolic_map(b)
    for m, name in ((map_a, "a"), (map_b, "b")):
        if m.kind != "layout":
            raise ProofError(
                f"check_covers needs register layouts, but {name} is {with_article(m.kind)}"
            )
    (shape_a, threads_a, _), (shape_b, threads_b, _) = map_a.domain, map_b.domain
    if (shape_a, threads_a) != (shape_b, threads_b):
        return ProofResult(
            False,
            None,
            f"not the same tile and threads: shape {shape_a} over {threads_a} threads and shape "
            f"{shape_b} over {threads_b} threads",
            elapsed(started),
        )
    if not isinstance(a, RegisterLayout) and map_a.domain[2] > MAX_EXPANDED_REGISTERS:
        return unknown(
            f"a has {map_a.domain[2]} registers, more than the {MAX_EXPANDED_REGISTERS} tried one "
            "by one for a layout without modes",
            started,
        )
    t = map_b.indices[0]
    owner = _register_owns(a, t, map_b.image) if isinstance(a, RegisterLayout) else None
    registers = [] if owner is not None else [_tuple_of(a.map(t, k)) for k in range(a.local_size)]
    extra = [owner] if owner is not None else [c for coords in registers for c in coords]
    query = _Query([map_b], extra)
    try:
        element, defined_b = query.images(map_b)
        if owner is not None:
            held = query.encoder.truth(owner)
        else:
            options = []
            for coords in registers:
                terms = [query.encoder.term(c) for c in coords]
                defined = query.all([query.encoder.defined(c) for c in coords])
                options.append(z3.And(defined, *[x == y for x, y in zip(terms, element)]))
            held = query.any(options)
    except EncodingError as error:
        return unknown(f"not translated to Z3: {error}", started)
    found = search(query.constraints(), z3.Or(z3.Not(defined_b), z3.Not(held)), timeout, rlimit)
    if found.verdict == z3.unsat:
        return ProofResult(
            True,
            None,
            "every element a thread holds under b, the same thread holds under a",
            elapsed(started),
        )
    if found.verdict != z3.sat:
        return _solver_gave_up(found.reason_unknown, started)
    point = query.values(found.model, map_b)
    try:
        element_b = map_b.evaluate(point, {})
        thread = point[0]
        held_a = tuple(
            sorted({tuple(int(c) for c in a.map(thread, k)) for k in range(a.local_size)})
        )
    except _EVALUATION_ERRORS as error:
        return _unconfirmed("point", f"evaluating at {point} raised {error!r}", started)
    if element_b in held_a:
        return _unconfirmed("point", f"thread {thread} does hold {element_b} under a", started)
    return ProofResult(
        False,
        {"t": point[0], "i": point[1], "b": element_b, "a": held_a},
        f"thread {point[0]} holds {element_b} in register {point[1]} under b but not under a",
        elapsed(started),
    )

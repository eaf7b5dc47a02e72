"""How a layout presents itself to the solver: a box of index variables and its image there.

The checks of this package accept any object that follows one of three duck-typed protocols,
recognised by its attributes, so that new layout kinds need no change here:

    kind        attributes                                   index variables    image
    "layout"    shape, num_threads, local_size, map(t, i)    t, i               map(t, i): coords
    "access"    num_threads, local_size, offset(t, i)        t, i               offset(t, i)
    "memory"    shape, offset(coord)  (no num_threads)       c0, c1, ...        offset(coord)

`RegisterLayout` and `FunctionLayout` are "layout"s, `AccessMap` an "access", `SharedLayout` and
`GlobalLayout` "memory"s. The methods must accept symbolic `Expr` indices and return `Expr`s (or
ints) built from them: the checks call them once on the bounded variables
``t = var("t", 0, num_threads - 1)``, ``i = var("i", 0, local_size - 1)`` and ``c_k = var("c<k>",
0, shape[k] - 1)`` (a symbolic extent bounds ``c_k`` by a constraint instead). Any other variable
in an image is a *parameter* (e.g. a global layout's extent ``K``), free within its own declared
bounds; it must not be named like an index variable. The same methods called on ints are the
reference that every counterexample is confirmed with; with parameters, the object's
``bind(env)`` (as `GlobalLayout` and `AccessMap` have) gives the concrete object first.

Two maps are comparable when their kinds agree and so do their domains: shape, num_threads and
local_size for "layout"; num_threads and local_size for "access" (the function (t, i) -> offset
does not depend on the tile shape); shape for "memory" (entries compared structurally).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from layout_algebra.symbolic import Expr, ExprLike, as_expr, var
from proofs.errors import ProofError

KIND_NAMES = {"layout": "register layout", "access": "access map", "memory": "memory layout"}


@dataclass(frozen=True)
class SymbolicMap:
    """A layout as the solver sees it.

    `kind` ("layout", "access" or "memory"), `domain` (the sizes that must match for two maps
    to be comparable), `indices` (the index variables, in order: (t, i) or (c0, c1, ...)),
    `constraints` (truth-valued Exprs bounding indices beyond their declared bounds, for
    symbolic extents), `image` (the image Exprs: rank coordinates, or one offset), `codomain`
    (an exclusive upper bound per image entry: the shape for coordinates, the number of domain
    points for offsets; every lower bound is 0) and `evaluate` (the object's own evaluation on
    ints, from an index tuple and a parameter dict; raises what the object raises).
    """

    kind: str
    domain: tuple[Any, ...]
    indices: tuple[Expr, ...]
    constraints: tuple[Expr, ...]
    image: tuple[Expr, ...]
    codomain: tuple[ExprLike, ...]
    evaluate: Callable[[tuple[int, ...], Mapping[str, int]], Any]

    @property
    def num_points(self) -> Expr:
        """Number of points of the domain (a constant Expr unless an extent is symbolic)."""
        return _product(self.domain_extents)

    @property
    def domain_extents(self) -> tuple[ExprLike, ...]:
        """The extent of each index variable."""
        if self.kind == "memory":
            return tuple(self.domain)
        return self.domain[-2:]

    @property
    def index_names(self) -> tuple[str, ...]:
        """Names of the index variables."""
        return tuple(index.name for index in self.indices)

    def point(self, values: Sequence[int]) -> dict[str, Any]:
        """A domain point as reported in counterexamples: {"t": .., "i": ..} or {"coord": (..)}."""
        if self.kind == "memory":
            return {"coord": tuple(values)}
        return {"t": values[0], "i": values[1]}


def describe(kind: str) -> str:
    """The words for a kind in reasons ("register layout", "access map", "memory layout")."""
    return KIND_NAMES[kind]


def with_article(kind: str) -> str:
    """The words for a kind with its indefinite article ("an access map")."""
    noun = KIND_NAMES[kind]
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _has(obj: object, *names: str) -> bool:
    return all(hasattr(obj, name) for name in names)


def _plain(value: Any) -> Any:
    """An int, or a tuple of ints, from an object's int evaluation."""
    if isinstance(value, (tuple, list)):
        return tuple(int(v) for v in value)
    return int(value)


def _bound(obj: Any, params: Mapping[str, int]) -> Any:
    """`obj` with its parameters bound, when it has any."""
    if not params:
        return obj
    if not hasattr(obj, "bind"):
        raise ProofError(f"{obj!r} has parameters {sorted(params)} but no bind(env) method")
    return obj.bind(dict(params))


def _size(value: Any, what: str, obj: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ProofError(f"{what} of {obj!r} must be a positive int, got {value!r}")
    return int(value)


def _tuple(values: Any) -> tuple[Expr, ...]:
    """An image as a tuple of Exprs (one entry for a scalar)."""
    if isinstance(values, (tuple, list)):
        return tuple(as_expr(v) for v in values)
    return (as_expr(values),)


def _thread_indices(num_threads: int, local_size: int, suffix: str) -> tuple[Expr, Expr]:
    return var(f"t{suffix}", 0, num_threads - 1), var(f"i{suffix}", 0, local_size - 1)


def symbolic_map(obj: Any, suffix: str = "") -> SymbolicMap:
    """The `SymbolicMap` of `obj` (see the module docstring), its index variables named with
    `suffix` appended (``t2``, ``i2`` for a second copy). Raises ProofError for an object that
    follows none of the protocols."""
    if _has(obj, "num_threads", "local_size", "shape", "map"):
        num_threads = _size(obj.num_threads, "num_threads", obj)
        local_size = _size(obj.local_size, "local_size", obj)
        shape = tuple(_size(extent, "shape entry", obj) for extent in obj.shape)
        t, i = _thread_indices(num_threads, local_size, suffix)
        return SymbolicMap(
            kind="layout",
            domain=(shape, num_threads, local_size),
            indices=(t, i),
            constraints=(),
            image=_tuple(obj.map(t, i)),
            codomain=shape,
            evaluate=lambda point, params: _plain(_bound(obj, params).map(*point)),
        )
    if _has(obj, "num_threads", "local_size", "offset"):
        num_threads = _size(obj.num_threads, "num_threads", obj)
        local_size = _size(obj.local_size, "local_size", obj)
        t, i = _thread_indices(num_threads, local_size, suffix)
        return SymbolicMap(
            kind="access",
            domain=(num_threads, local_size),
            indices=(t, i),
            constraints=(),
            image=_tuple(obj.offset(t, i)),
            codomain=(num_threads * local_size,),
            evaluate=lambda point, params: _plain(_bound(obj, params).offset(*point)),
        )
    if _has(obj, "shape", "offset"):
        shape = tuple(obj.shape)
        indices = []
        constraints = []
        for k, extent in enumerate(shape):
            if isinstance(extent, Expr):
                index = var(f"c{k}{suffix}", 0)
                constraints.append(index < extent)
            else:
                index = var(f"c{k}{suffix}", 0, _size(extent, "shape entry", obj) - 1)
            indices.append(index)
        return SymbolicMap(
            kind="memory",
            domain=shape,
            indices=tuple(indices),
            constraints=tuple(constraints),
            image=_tuple(obj.offset(tuple(indices))),
            codomain=(_product(shape),),
            evaluate=lambda point, params: _plain(_bound(obj, params).offset(tuple(point))),
        )
    raise ProofError(
        f"{obj!r} is not a layout the proofs understand: expected shape, num_threads, "
        "local_size and map(t, i) (a register layout), num_threads, local_size and offset(t, i) "
        "(an access map), or shape and offset(coord) (a memory layout)"
    )


def _product(values: Sequence[ExprLike]) -> Expr:
    total = as_expr(1)
    for value in values:
        total = total * value
    return total

"""Proved rewriting: the arithmetic of a query replaced by its simplified form.

A lowering prints its addresses simplified (`layout_algebra.symbolic.simplify`), while the
specification a proof compares them with is built unsimplified from the program. Where the two
spell one value differently through divisions by products of variables (a stream-K block's
share of ``48 * ceil(m / 8) * 32`` iterations among ``min(132, ...)`` blocks, printed as
``... * 128 // 11``), the solver must rediscover the simplifier's algebra inside a query full
of bit-vector swizzles, and gives up. `simplified_arithmetic` rewrites every maximal subterm
free of bitwise operators to its simplified form, so that the two sides share their terms, and
returns each rewrite as a pair to prove. A caller proves the pairs equal in Z3's integer
theory (where such arithmetic is easy) under the query's own assumptions before it trusts an
answer of the rewritten query: at every point of the original query each rewritten term then
has the original's value, so the rewritten query holds exactly where the original does.
"""

from __future__ import annotations

from collections.abc import Iterable

from layout_algebra.symbolic import Expr, simplify
from layout_algebra.symbolic.folding import build
from proofs.encode import has_bitwise


def simplified_arithmetic(exprs: Iterable[Expr]) -> tuple[list[Expr], list[tuple[Expr, Expr]]]:
    """`exprs` with each maximal subterm that has no ``&``, ``|`` or ``^`` replaced by its
    `simplify` form, and the rewrites made, as (original, simplified) pairs without repeats
    (none where the simplified form is the same tree)."""
    pairs: dict[Expr, Expr] = {}
    memo: dict[int, Expr] = {}

    def rewrite(node: Expr) -> Expr:
        if not node.args:
            return node
        done = memo.get(id(node))
        if done is not None:
            return done
        if not has_bitwise([node]):
            done = simplify(node)
            if done != node:
                pairs.setdefault(node, done)
            else:
                done = node
        else:
            args = tuple(rewrite(arg) for arg in node.args)
            unchanged = all(new is old for new, old in zip(args, node.args))
            done = node if unchanged else build(node.op, args)
        memo[id(node)] = done
        return done

    return [rewrite(expr) for expr in exprs], list(pairs.items())

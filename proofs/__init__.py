"""Z3 encodings of layouts, memory layouts, access maps and the backend's expressions.

Equivalence with counterexamples, injectivity and coverage checks, algebraic laws over symbolic
sizes, and validation of the backend's lowering. Nothing outside this package imports z3.
"""

from proofs.swizzle import (
    SwizzleProof,
    check_permutation,
    check_rows_conflict_free,
    check_swizzle_bijective,
)

__all__ = [
    "SwizzleProof",
    "check_permutation",
    "check_rows_conflict_free",
    "check_swizzle_bijective",
]

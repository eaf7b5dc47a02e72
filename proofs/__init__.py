"""Z3 encodings of layouts, memory layouts, access maps and the backend's expressions.

Equivalence with counterexamples, injectivity and coverage checks, algebraic laws over symbolic
sizes, the layout claims of a tile program, and validation of the backend's lowering. Nothing
outside this package imports z3.
"""

from proofs.checks import (
    check_bijective,
    check_covers,
    check_equivalent,
    check_in_bounds,
    check_injective,
)
from proofs.encode import Encoder, to_z3
from proofs.errors import EncodingError, ProofError
from proofs.laws import (
    prove_divide_product,
    prove_merge_modes,
    prove_product_associative,
    prove_reduce_product,
    prove_replicate_commutes,
)
from proofs.program_layouts import LayoutClaim, ProgramLayoutReport, check_program_layouts
from proofs.result import ProofResult
from proofs.swizzle import (
    check_permutation,
    check_rows_conflict_free,
    check_swizzle_bijective,
)

__all__ = [
    "Encoder",
    "EncodingError",
    "LayoutClaim",
    "ProgramLayoutReport",
    "ProofError",
    "ProofResult",
    "check_bijective",
    "check_covers",
    "check_equivalent",
    "check_in_bounds",
    "check_injective",
    "check_program_layouts",
    "prove_divide_product",
    "prove_merge_modes",
    "prove_product_associative",
    "prove_reduce_product",
    "prove_replicate_commutes",
    "to_z3",
    "check_permutation",
    "check_rows_conflict_free",
    "check_swizzle_bijective",
]

"""The exception types of the proofs package.

`ProofError` is raised for an invalid argument to a check (an object that is no layout, a
non-positive timeout); `EncodingError` for an expression outside what the Z3 translation covers
exactly. Both subclass `ValueError`. A question the solver cannot settle is not an error: the
checks answer it with `holds=None`.
"""

from __future__ import annotations


class ProofError(ValueError):
    """An invalid argument to a proof: not a layout, a bad limit, mismatched operands."""


class EncodingError(ProofError):
    """An expression the exact Z3 translation does not cover (e.g. a bitwise operand that may be
    negative or is unbounded)."""

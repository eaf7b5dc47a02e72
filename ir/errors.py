"""The exception types of the tile IR (besides `ir.dtypes.DtypeError`).

- `VerificationError`: an ill-formed program, found by the builder while it computes a result
  type or by `ir.verify`; the message names the instruction (its printed line) and the mismatch.
- `InterpreterError`: what the reference interpreter refuses to run because the hardware would get
  it wrong or because the arguments do not fit: replicas that disagree, shared memory read before
  its copy was waited for or before a barrier, two threads storing different values to one
  element, out-of-range shared or global accesses, integer division by zero, bad arguments.
- `SpecializationError`: compile-time constants that do not fit a program (`ir.specialize`): a
  constant parameter without a value, a value outside the parameter's bounds or not a multiple of
  its `multiple_of`, a name that is not a constant parameter of the program.

- `VisitorError`: an instruction visitor that lacks the method of an instruction (raised when
  the visitor class is created), or an instruction given to a visitor that does not handle it.

The first three subclass `ValueError`: they are about a bad value (a program, its arguments or
its constants).
`VisitorError` is a `TypeError`: it is about code that does not handle an instruction type.
"""

from __future__ import annotations


class VerificationError(ValueError):
    """An ill-formed program; the message names the instruction and what does not match."""


class InterpreterError(ValueError):
    """The reference interpreter refuses a program run: a race, a bad access or a bad argument."""


class SpecializationError(ValueError):
    """Constants that do not fit a program's compile-time constant parameters; the message names
    the parameter, the value given and what was expected."""


class VisitorError(TypeError):
    """A visitor lacks the method of an instruction class, or was given one it does not handle."""

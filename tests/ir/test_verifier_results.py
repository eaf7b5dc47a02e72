"""The verifier refuses a result register tensor whose layout has the wrong thread count.

Each instruction's result is checked on its own, not only through its operands: a result of
8 (or 2) threads in a program of 4 threads is refused with a message naming the result, even
when its shape and its operands are right.
"""

from __future__ import annotations

import pytest

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import VerificationError
from ir.instructions import Binary, Cast, Unary, View, Where
from ir.values import RegisterTensor
from ir.verifier import verify
from layout_algebra.register import spatial

F16, F32 = dtypes.f16, dtypes.f32
EIGHT_THREADS = spatial(4).replicate(2)  # shape (4,), each element held by two threads
TWO_THREADS = spatial(2).local(2)  # shape (4,), two elements per thread


def emit_with_result(make, layout):
    """A 4-thread program: x = f16[4] over spatial(4), cond = u1[4] over spatial(4), then the
    instruction make(x, cond, layout), whose result r9 has `layout`."""
    b = ProgramBuilder("bad", 4, check=False)
    x = b.register_tensor(F16, spatial(4))
    cond = b.register_tensor(dtypes.u1, spatial(4))
    b._emit(make(x, cond, layout))
    return b.program()


INSTRUCTIONS = {
    "add": lambda x, cond, layout: Binary("add", RegisterTensor("r9", F16, layout), x, x),
    "lt": lambda x, cond, layout: Binary("lt", RegisterTensor("r9", dtypes.u1, layout), x, x),
    "exp": lambda x, cond, layout: Unary("exp", RegisterTensor("r9", F16, layout), x),
    "where": lambda x, cond, layout: Where(RegisterTensor("r9", F16, layout), cond, x, x),
    "cast": lambda x, cond, layout: Cast(RegisterTensor("r9", F32, layout), x),
    "view": lambda x, cond, layout: View(RegisterTensor("r9", dtypes.bf16, layout), x),
}


@pytest.mark.parametrize("op", sorted(INSTRUCTIONS))
@pytest.mark.parametrize(("layout", "threads"), [(EIGHT_THREADS, 8), (TWO_THREADS, 2)])
def test_result_with_the_wrong_thread_count(op, layout, threads):
    program = emit_with_result(INSTRUCTIONS[op], layout)
    with pytest.raises(
        VerificationError,
        match=(
            f"^{op}: thread count mismatch: result r9 has a layout of {threads} threads, "
            "the program has 4\n    in: r9: "
        ),
    ):
        verify(program)


@pytest.mark.parametrize("op", sorted(INSTRUCTIONS))
def test_result_with_the_program_thread_count_is_accepted(op):
    program = emit_with_result(INSTRUCTIONS[op], spatial(4))
    assert verify(program) is program

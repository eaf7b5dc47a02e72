"""Hypothesis strategies for random valid tile programs, with their inputs and expected outputs.

Importable by any test suite (the backend's GPU differential tests use them): each drawn
`ProgramCase` holds a verified program, its arguments (fresh copies on demand), the grid, and the
expected contents of its output array computed with NumPy directly on the global arrays, so a
run of the program (by `ir.run_reference` or on the GPU) can be checked against it.

Strategies:
- `register_layouts(num_threads, rank)`: random register layouts (spatial, local and
  replication modes in random orders, extents that need not be powers of two).
- `elementwise_cases()`: masked loads (each maybe after a `prefetch_global` of its tile, in its
  layout or another) of tiles that do not divide the tensor, a chain of
  elementwise operations (same-layout operands, a broadcast column, Python constants, a
  comparison feeding `where`), an optional cast, and a masked store into a row-padded output
  whose padding must stay untouched.
- `reduction_cases()`: a masked load, `reduce` over one dimension with sum, max or min.
- `shared_round_trip_cases()`: global -> registers -> shared (optionally by `copy_async`, by
  `copy_bulk`, released and copied again, maybe by two blocks of a cluster, or through a
  second shared tensor that reuses the first's memory) -> registers in another layout ->
  global, with the barriers and waits it needs.
- `view_cases()`: a `view` re-splitting each thread's register bits into another type (every
  pair of case types whose widths have a common multiple of at most 32 bits).
- `dot_cases()`: `dot` over a k loop (`for_range` + `assign`, unroll 1 to 4, or written out in
  Python), operands straight from global memory or staged through shared memory (one buffer,
  or two chosen by a stage index), in SIMT layouts, in tensor-core layouts (then `tolerance` is
  set) or in random warp-collective layouts.
- `loop_cases()`: a `register_tensor` accumulator updated with `assign` in a `for_range` whose
  stop may be a runtime parameter and whose unroll is 1 to 4 (trip counts that are and are not
  multiples of it), an `if_` on the loop variable inside, and an `if_` on the block index
  around the store.
- `dequant_cases()`: low-bit codes (optionally loaded as i32 words and `view`-ed) cast to f16 or
  bf16 and combined by add, sub or mul with a half tile or a broadcast scale row, in layouts
  whose threads hold whole words of codes (fast conversions, paired half instructions).
- `ticket_cases()`: blocks store partial column sums, take an `atomic_add` ticket, and the last
  block (maybe after prefetching the others' partials, one `prefetch_global` a block in a loop)
  adds every block's partial in block order and resets the counter.
- `thread_group_cases()`: the block's warps split into two `thread_group`s, one handing a
  masked tile to the other through shared memory (stored, or bulk-copied and waited for) and a
  `sync` of the block.
- `program_cases()`: any of the above; together they use every instruction of `ir.instructions`
  (tests/ir/test_generated.py checks it).

`ir.testing.grid_programs` holds two fixed programs that declare their grid (`doubled`, `rows`),
shared by the grid tests of the IR, the lowering and its proofs.

In about one program of three, some int parameters (sizes, a loop's runtime stop) are
compile-time constants (``int_param(name, constant=True)``); `ProgramCase.constants` gives their
values, to compile with: ``backend.compile(case.program, arch, constants=case.constants)``.

All arrays are uint8 buffers holding the dense bitstream of their elements. Values are what the
interpreter's registers hold (`ir.elementwise.to_values`), so float NaN payloads narrower than
f32 are not kept: expected outputs of moves hold the canonical NaN of the loaded code, and
inputs whose bits are reinterpreted (`view`) hold no other NaN codes.
"""

from __future__ import annotations

from hypothesis import strategies as st

from ir.testing.cases import CASE_DTYPES, ProgramCase, codes_match, register_layouts
from ir.testing.compute_cases import dot_cases, loop_cases, view_cases
from ir.testing.dequant_cases import dequant_cases
from ir.testing.memory_cases import (
    elementwise_cases,
    reduction_cases,
    shared_round_trip_cases,
    thread_group_cases,
    ticket_cases,
)


def program_cases() -> st.SearchStrategy[ProgramCase]:
    """Any of the strategies of this module."""
    return st.one_of(
        elementwise_cases(),
        reduction_cases(),
        shared_round_trip_cases(),
        view_cases(),
        dequant_cases(),
        dot_cases(),
        loop_cases(),
        ticket_cases(),
        thread_group_cases(),
    )


__all__ = [
    "CASE_DTYPES",
    "ProgramCase",
    "codes_match",
    "dequant_cases",
    "dot_cases",
    "elementwise_cases",
    "loop_cases",
    "program_cases",
    "reduction_cases",
    "register_layouts",
    "shared_round_trip_cases",
    "thread_group_cases",
    "ticket_cases",
    "view_cases",
]

"""`prefetch_global`: the builder, the verifier's refusals, the printer and the interpreter (a
hint that changes no value, its addresses checked as a load's)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.errors import InterpreterError, VerificationError
from ir.instructions import PrefetchGlobal
from ir.printer import format_instruction
from ir.verifier import verify
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import local, spatial

F32 = dtypes.f32


def _copy_program(
    prefetch_layout, *, rows: int = 6, cols: int = 16, threads: int = 8, level: str = "L1"
):
    """y = x over a (rows, cols) f32 tensor in (4, 8) tiles of `spatial(4, 2).local(1, 4)`,
    each tile first prefetched into `level` with `prefetch_layout` (None: no prefetch)."""
    with ProgramBuilder("copy", threads) as b:
        x, y = b.array_param("x", F32), b.array_param("y", F32)
        b.grid(-(-rows // 4), cols // 8)
        view = GlobalLayout((rows, cols), (cols, 1))
        origin = [b.block_x * 4, b.block_y * 8]
        source = b.global_view(x, F32, view)
        if prefetch_layout is not None:
            b.prefetch_global(source, origin, prefetch_layout, level=level)
        tile = b.load_global(source, origin, spatial(4, 2).local(1, 4))
        b.store_global(b.global_view(y, F32, view), tile, origin)
    return b.program()


def test_the_printed_instruction() -> None:
    program = _copy_program(spatial(4, 2).local(1, 4))
    prefetch = next(i for i in program.body if isinstance(i, PrefetchGlobal))
    assert format_instruction(prefetch) == (
        "prefetch_global(g0, [block_x * 4, block_y * 8], layout=spatial(4,2).local(1,4))"
    )


def test_the_printed_l2_instruction_names_its_level() -> None:
    with ProgramBuilder("copy", 8) as b:
        x = b.array_param("x", F32)
        view = b.global_view(x, F32, GlobalLayout((4, 8), (8, 1)))
        b.prefetch_global(view, [0, 0], spatial(4, 2).local(1, 4), level="L2")
    prefetch = next(i for i in b.program().body if isinstance(i, PrefetchGlobal))
    assert prefetch.level == "L2"
    assert format_instruction(prefetch) == (
        "prefetch_global(g0, [0, 0], layout=spatial(4,2).local(1,4), level='L2')"
    )


def test_the_instruction_reads_its_tensor_and_offsets() -> None:
    program = _copy_program(spatial(4, 2).local(1, 4))
    prefetch = next(i for i in program.body if isinstance(i, PrefetchGlobal))
    assert prefetch.results() == ()
    assert [t.name for t in prefetch.operands()] == ["g0"]
    assert [str(s) for s in prefetch.scalars()] == ["block_x * 4", "block_y * 8"]


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 9),
    layout=st.sampled_from(
        [spatial(4, 2).local(1, 4), local(1, 8).spatial(4, 2), local(4, 2).spatial(1, 8)]
    ),
    seed=st.integers(0, 2**16),
)
def test_a_prefetch_changes_no_value(rows: int, layout, seed: int) -> None:
    """The same copy with and without a prefetch of each tile (in the load's layout or
    another; tiles that overhang the tensor's rows) writes the same output."""
    x = np.random.default_rng(seed).normal(size=rows * 16).astype(np.float32)
    outputs = []
    for prefetch, level in ((None, "L1"), (layout, "L1"), (layout, "L2")):
        y = np.full(rows * 16, -1.0, dtype=np.float32)
        run_reference(_copy_program(prefetch, rows=rows, level=level), x.copy(), y)
        outputs.append(y)
    for output in outputs:
        np.testing.assert_array_equal(output, x)


def test_a_prefetch_past_the_end_of_the_argument_is_an_error() -> None:
    """Its addresses are checked as a load's are: a view longer than its argument is refused
    at the prefetch, before any load."""
    with ProgramBuilder("overhang", 4) as b:
        x = b.array_param("x", F32)
        b.prefetch_global(b.global_view(x, F32, GlobalLayout((8,), (1,))), [0], spatial(4).local(2))
    with pytest.raises(InterpreterError, match=r"element 7 of g0 \(f32\) lies past the end of "):
        run_reference(b.program(), np.zeros(7, dtype=np.float32))


def _unchecked(threads: int = 4) -> ProgramBuilder:
    return ProgramBuilder("bad", threads, check=False)


@pytest.mark.parametrize(
    ("layout", "offsets", "message"),
    [
        (spatial(8), [0], "thread count mismatch: the prefetch layout has 8 threads, the program "),
        (spatial(4, 1, 1), [0], r"rank mismatch: the prefetch layout \(4, 1, 1\) has more "),
        ("rows", [0], "layout must be a RegisterLayout, got 'rows'"),
        (spatial(4), [0, 0], "offsets has 2 entries, the memory tensor has rank 1"),
    ],
)
def test_the_verifier_refuses(layout, offsets, message: str) -> None:
    b = _unchecked()
    x = b.array_param("x", F32)
    b.prefetch_global(b.global_view(x, F32, GlobalLayout((8,), (1,))), offsets, layout)
    with pytest.raises(VerificationError, match=message):
        verify(b.program())


@pytest.mark.parametrize("level", ["L3", "l2", None, 2])
def test_the_verifier_refuses_a_level_it_does_not_know(level) -> None:
    b = _unchecked()
    x = b.array_param("x", F32)
    b.prefetch_global(b.global_view(x, F32, GlobalLayout((8,), (1,))), [0], spatial(4), level=level)
    with pytest.raises(
        VerificationError, match=rf"level={level!r}; expected one of \('L1', 'L2'\)"
    ):
        verify(b.program())


def test_the_builder_refuses_a_register_tensor_as_the_source() -> None:
    b = ProgramBuilder("bad", 4)
    tile = b.register_tensor(F32, spatial(4), 0)
    with pytest.raises(VerificationError, match="prefetch_global reads a GlobalTensor, got"):
        b.prefetch_global(tile, [0], spatial(4))


def test_the_builder_refuses_offsets_that_are_not_a_sequence() -> None:
    b = ProgramBuilder("bad", 4)
    view = b.global_view(b.array_param("x", F32), F32, GlobalLayout((8,), (1,)))
    with pytest.raises(VerificationError, match="prefetch_global offsets must be a sequence"):
        b.prefetch_global(view, 0, spatial(4))

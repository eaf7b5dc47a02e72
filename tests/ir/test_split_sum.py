"""The fused split-k sums (`ir.examples.split_sum`): the decode program's sum in C's order
(`add_parts_last`: its parts added in slot order in a loop, bit for bit in the interpreter) and
the prefill programs' sum in the accumulator's register order (the order of a part in memory,
the pieces a tile's sum is taken in, and the workspace view; those sums are checked bit for bit
in the interpreter by the prefill programs' tests)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import VerificationError
from ir.examples.matmul import wgmma_dot_layouts
from ir.examples.register_dequant_matmul import transposed_accumulator_layout
from ir.examples.split_sum import (
    PIECE_REGISTERS,
    SUM_VECTOR,
    add_parts_last,
    part_order,
    part_pieces,
    sum_layout,
)
from ir.instructions import Binary, ForRange, If, LoadGlobal, PrefetchGlobal
from ir.interpreter import run_reference
from ir.program import Program
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import local


def test_part_order_table() -> None:
    """Thread t's register r at [r // 4, t, r % 4]: a warp's vectors of one r // 4 are
    consecutive."""
    order = part_order(8, 3)
    assert order.shape == (2, 3, 4)
    assert order.num_threads == 3 and order.local_size == 8
    for thread in range(3):
        for register in range(8):
            assert order.map(thread, register) == (register // 4, thread, register % 4)


@pytest.mark.parametrize("registers", [0, 6, -4])
def test_part_order_refuses_partial_vectors(registers: int) -> None:
    with pytest.raises(VerificationError, match=f"{registers} registers a thread"):
        part_order(registers, 128)


@pytest.mark.parametrize(
    ("threads", "block_n", "block_m", "pieces"),
    [
        (256, 128, 256, 4),  # the 128 x 256 tile: 128 registers, four pieces of 32
        (256, 128, 128, 2),
        (128, 64, 128, 2),
        (128, 64, 64, 1),  # 32 registers: one piece
        (128, 64, 8, 1),
    ],
)
def test_accumulator_pieces_table(threads: int, block_n: int, block_m: int, pieces: int) -> None:
    """The wgmma accumulator splits along its N side (C's rows) into runs of registers."""
    layout = wgmma_dot_layouts(threads, block_n, block_m, 16)[2]
    count, piece = part_pieces(layout)
    assert count == pieces
    assert local(1, count) * piece == layout
    assert piece.shape == (block_n, block_m // pieces)


def test_a_layout_that_does_not_split_is_one_piece() -> None:
    """The mma.sync accumulator of the 64-column warps has rows outermost: one piece."""
    layout = transposed_accumulator_layout(4, 1, 8)
    assert part_pieces(layout) == (1, layout)


@given(
    groups=st.sampled_from([1, 2]),
    block_m=st.sampled_from([8, 16, 32, 64, 128, 256]),
)
@settings(max_examples=30, deadline=None)
def test_pieces_are_runs_of_registers(groups: int, block_m: int) -> None:
    """Piece i's registers are the layout's registers [i R / p, (i + 1) R / p) of each thread,
    and hold columns [i c, (i + 1) c): the same elements, element by element."""
    layout = wgmma_dot_layouts(128 * groups, 64 * groups, block_m, 16)[2]
    count, piece = part_pieces(layout)
    registers = layout.local_size
    per_piece = registers // count
    # The accumulator always splits along its N side: pieces of 32 registers where it has more.
    assert per_piece == min(registers, PIECE_REGISTERS)
    assert per_piece % SUM_VECTOR == 0
    columns = piece.shape[1]
    for thread in range(0, layout.num_threads, 37):
        for register in range(registers):
            i, inner = divmod(register, per_piece)
            row, column = piece.map(thread, inner)
            assert layout.map(thread, register) == (row, column + i * columns)


def _sum_program(
    count: int,
    block_m: int,
    block_n: int,
    threads: int,
    dynamic: bool,
    prefetch: bool = False,
    batch: int = 1,
) -> Program:
    """One block adding `count` f32 parts of a (block_m, block_n) tile with `add_parts_last`
    (its counter starts at count - 1, so the block's ticket is the last); `dynamic` passes
    the count as an int parameter instead of a Python int; `prefetch` and `batch` as the
    function's."""
    layout = sum_layout(block_m, block_n, threads)
    with ProgramBuilder("sum_parts", threads) as b:
        parts = b.array_param("parts", dtypes.f32)
        out = b.array_param("out", dtypes.f16)
        counters = b.array_param("counters", dtypes.i32)
        parts_count = b.int_param("count", lo=2, hi=16) if dynamic else count
        add_parts_last(
            b,
            parts=b.global_view(
                parts,
                dtypes.f32,
                GlobalLayout((parts_count, block_m, block_n), (block_m * block_n, block_n, 1)),
            ),
            out=b.global_view(out, dtypes.f16, GlobalLayout((block_m, block_n), (block_n, 1))),
            counters=b.global_view(counters, dtypes.i32, GlobalLayout((1,), (1,))),
            tile=0,
            origin=(0, 0),
            count=parts_count,
            layout=layout,
            out_dtype=dtypes.f16,
            prefetch=prefetch,
            batch=batch,
        )
    return b.program()


def _loaded_parts(program: Program) -> list[object]:
    """What the sum's branch does, in program order: the part index of each load, "+" for
    each add, "loop" for a loop, "rolled loop" for a rolled one and "prefetch loop" for a loop
    of prefetches."""
    (branch,) = [i for i in program.body if isinstance(i, If)]
    order: list[object] = []
    for instruction in branch.body:
        if isinstance(instruction, LoadGlobal):
            order.append(instruction.offsets[0])
        elif isinstance(instruction, Binary) and instruction.op == "add":
            order.append("+")
        elif isinstance(instruction, ForRange):
            prefetches = all(isinstance(i, PrefetchGlobal) for i in instruction.body)
            kind = "rolled loop" if instruction.rolled else "loop"
            order.append("prefetch loop" if prefetches else kind)
    return order


@pytest.mark.parametrize("dynamic", [False, True])
def test_the_parts_after_the_first_are_added_in_a_loop(dynamic: bool) -> None:
    """The first part is loaded, the others are added in a loop, a part an iteration, whether
    the count is known when the program is built (split k) or only at run time (stream-K).
    Written out straight, the parts' loads are all hoisted by ptxas ahead of the adds, which
    holds every part in registers at once (the recorded i3 decode kernel at 4096 x 12288 and
    M = 16: 255 registers a thread against 168), so fewer blocks fit an SM."""
    assert _loaded_parts(_sum_program(8, 16, 256, 128, dynamic=dynamic)) == [0, "loop"]


@pytest.mark.parametrize("dynamic", [False, True])
def test_with_prefetch_the_other_parts_are_prefetched_first(dynamic: bool) -> None:
    """With `prefetch`, a loop prefetching parts 1 to count - 1 (the same tiles the adding loop
    loads, a part an iteration) comes before the first load; the rest is unchanged."""
    program = _sum_program(8, 16, 256, 128, dynamic=dynamic, prefetch=True)
    assert _loaded_parts(program) == ["prefetch loop", 0, "loop"]
    (branch,) = [i for i in program.body if isinstance(i, If)]
    prefetch_loop, _, add_loop = [i for i in branch.body if isinstance(i, (ForRange, LoadGlobal))]
    (prefetch,) = prefetch_loop.body
    load = next(i for i in add_loop.body if isinstance(i, LoadGlobal))
    assert prefetch.src is load.src and prefetch.layout == load.out.layout
    assert [str(o) for o in prefetch.offsets[1:]] == ["0", "0"]
    assert (str(prefetch_loop.start), str(prefetch_loop.stop)) == ("1", str(add_loop.stop))


@pytest.mark.parametrize(
    ("count", "batch", "dynamic", "order"),
    [
        (8, 3, False, [0, "rolled loop", "loop"]),  # slots 1-6 three a step, then 7
        (7, 3, False, [0, "rolled loop", "loop"]),  # slots 1-6, none after (an empty loop)
        (3, 4, False, [0, "loop"]),  # no whole batch: one at a time
        (8, 2, True, [0, "rolled loop", "loop"]),
    ],
)
def test_batches_of_parts_are_loaded_in_a_rolled_loop(
    count: int, batch: int, dynamic: bool, order: list[object]
) -> None:
    """With `batch` B, a rolled loop whose step loads B parts and then adds them in slot order,
    then a loop for the parts left one at a time."""
    program = _sum_program(count, 16, 256, 128, dynamic=dynamic, batch=batch)
    assert _loaded_parts(program) == order
    (branch,) = [i for i in program.body if isinstance(i, If)]
    for loop in (i for i in branch.body if isinstance(i, ForRange) and i.rolled):
        kinds = ["load" if isinstance(i, LoadGlobal) else i.op for i in loop.body]
        assert [kind for kind in kinds if kind != "assign"] == ["load"] * batch + ["add"] * batch


@pytest.mark.parametrize("batch", [0, -1, True, 2.0])
def test_a_bad_batch_is_refused(batch: object) -> None:
    with pytest.raises(VerificationError, match=f"add_parts_last: batch={batch!r}; expected an"):
        _sum_program(4, 16, 256, 128, dynamic=False, batch=batch)


@given(
    count=st.integers(2, 9),
    block_m=st.sampled_from([2, 8, 16]),
    dynamic=st.booleans(),
    prefetch=st.booleans(),
    batch=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=25, deadline=None)
def test_the_sum_is_the_parts_added_in_slot_order(
    count: int, block_m: int, dynamic: bool, prefetch: bool, batch: int, seed: int
) -> None:
    """With the count a Python int or a parameter, with or without the prefetch, loaded one
    or several at a time, the tile's sum is the f32 parts added from slot 0 in order (the
    same bits as a sequential NumPy sum), stored as f16, and the counter is reset."""
    block_n, threads = 64, 32
    rng = np.random.default_rng(seed)
    parts = (rng.standard_normal((count, block_m, block_n)) * 2.0 ** rng.integers(-8, 8)).astype(
        np.float32
    )
    out = np.zeros((block_m, block_n), dtype=np.float16)
    counters = np.array([count - 1], dtype=np.int32)
    arguments = [parts, out, counters] + ([count] if dynamic else [])
    program = _sum_program(count, block_m, block_n, threads, dynamic, prefetch, batch)
    run_reference(program, *arguments, grid=1)
    expected = parts[0].copy()
    for part in parts[1:]:
        expected = expected + part
    assert np.array_equal(out.view(np.uint16), expected.astype(np.float16).view(np.uint16))
    assert counters[0] == 0

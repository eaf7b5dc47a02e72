"""The prefill programs' fused sum in the accumulator's register order (`ir.examples.split_sum`):
the order of a part in memory, the pieces a tile's sum is taken in, and the workspace view.
The sums themselves are checked bit for bit in the interpreter by the prefill programs' tests."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir.errors import VerificationError
from ir.examples.matmul import wgmma_dot_layouts
from ir.examples.register_dequant_matmul import transposed_accumulator_layout
from ir.examples.split_sum import PIECE_REGISTERS, SUM_VECTOR, part_order, part_pieces
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

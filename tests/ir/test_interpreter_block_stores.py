"""Stores of several blocks to one global element: the first block to store it owns it.

Block x of the program below copies src[4x : 4x + 4] to out[0:4], so blocks clash exactly on
the elements where their slices of src differ. The error names the first clashing element (the
lowest), the code its owner stored and the code of the block that clashes.
"""

from __future__ import annotations

import numpy as np
import pytest

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import InterpreterError
from ir.interpreter import run_reference
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial

U8 = dtypes.u8


def copy_slice_per_block(blocks):
    """out[0:4] = src[4 * block_x : 4 * block_x + 4], four threads, one element each."""
    with ProgramBuilder("slices", 4) as b:
        src = b.global_view(b.array_param("src", U8), U8, GlobalLayout((4 * blocks,), (1,)))
        out = b.global_view(b.array_param("out", U8), U8, GlobalLayout((4,), (1,)))
        b.store_global(out, b.load_global(src, [b.block_x * 4], spatial(4)), [0])
    return b.program()


def run_slices(src):
    blocks = len(src) // 4
    out = np.zeros(4, dtype=np.uint8)
    run_reference(copy_slice_per_block(blocks), np.array(src, dtype=np.uint8), out, grid=blocks)
    return out


@pytest.mark.parametrize(
    ("src", "message"),
    [
        # clashes at elements 1 (2 vs 9) and 3 (4 vs 8): the first one is named
        (
            [1, 2, 3, 4, 1, 9, 3, 8],
            r"block \(1, 0, 0\): two blocks store different values to one element: element 1 "
            r"of out got code 2 from block number 0 and 9 from this block",
        ),
        # a single clash, at the last element
        (
            [1, 2, 3, 4, 1, 2, 3, 8],
            r"block \(1, 0, 0\): two blocks store different values to one element: element 3 "
            r"of out got code 4 from block number 0 and 8 from this block",
        ),
        # block 1 agrees with the owner, block 2 clashes at elements 2 (3 vs 5) and 3 (4 vs 6)
        (
            [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 6],
            r"block \(2, 0, 0\): two blocks store different values to one element: element 2 "
            r"of out got code 3 from block number 0 and 5 from this block",
        ),
    ],
)
def test_two_blocks_clash_names_the_first_element(src, message):
    with pytest.raises(InterpreterError, match=f"^{message}\n"):
        run_slices(src)


def test_blocks_storing_equal_codes_agree():
    np.testing.assert_array_equal(run_slices([1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]), [1, 2, 3, 4])

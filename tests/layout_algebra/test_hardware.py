"""`layout_algebra.hardware`: the register cap a kernel's launch bounds give, and the shared
memory a block may use.

- Exact tables: `register_cap` for the block shapes and occupancies the kernels ask for (the
  values ptxas gives those launch bounds: 65536 registers over the threads, in units of 8, at
  most 255, and where the warps do not divide evenly over the four processing blocks, the
  fullest block's share; `tests/backend/test_occupancy.py` checks them against NVRTC), and
  `shared_memory_limit` by architecture.
- A property (hypothesis): the cap is the largest multiple of 8 (at most 255) at which every
  processing block holds its warps, and it never grows with threads or blocks.
- Bad values raise `LayoutError` naming them.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layout_algebra.errors import LayoutError
from layout_algebra.hardware import (
    LARGEST_SHARED_MEMORY_LIMIT,
    REGISTERS_PER_PARTITION,
    WARP_SIZE,
    register_cap,
    shared_memory_limit,
)

CAPS = [
    # threads, min_blocks -> registers a thread
    (128, None, 255),
    (128, 0, 255),
    (128, 1, 255),
    (128, 2, 255),
    (128, 3, 168),
    (128, 4, 128),
    (256, 1, 255),
    (256, 2, 128),
    (384, 1, 168),
    (160, 2, 168),  # 10 warps: 3 on two of the processing blocks
    (96, 3, 168),
    (64, 5, 168),  # 10 warps
    (64, 8, 128),
    (32, 1, 255),
    (1, None, 255),  # one thread is one warp
    (33, 1, 255),
    (33, 4, 255),  # 8 warps: 2 a processing block, 256 registers, capped at 255
    (33, 5, 168),  # 10 warps
    (512, 1, 128),
    (512, 2, 64),
    (1024, 1, 64),
    (1024, 2, 32),
]


@pytest.mark.parametrize(("threads", "min_blocks", "cap"), CAPS)
def test_register_cap_table(threads, min_blocks, cap):
    assert register_cap(threads, min_blocks) == cap


@given(st.integers(1, 1024), st.integers(0, 32))
@settings(max_examples=200, deadline=None)
def test_register_cap_is_the_largest_that_fits_every_processing_block(threads, min_blocks):
    cap = register_cap(threads, min_blocks)
    warps = -(-threads // WARP_SIZE) * max(1, min_blocks)
    fullest = -(-warps // 4)  # warps are dealt to the four processing blocks in turn
    assert cap % 8 == 0 or cap == 255
    assert 0 <= cap <= 255
    assert fullest * WARP_SIZE * cap <= REGISTERS_PER_PARTITION
    if cap < 248:
        assert fullest * WARP_SIZE * (cap + 8) > REGISTERS_PER_PARTITION
    assert register_cap(threads + 32, min_blocks) <= cap
    assert register_cap(threads, min_blocks + 1) <= cap


@pytest.mark.parametrize(
    ("threads", "min_blocks", "message"),
    [
        (0, 1, r"threads=0; expected an int >= 1"),
        (-32, 1, r"threads=-32; expected an int >= 1"),
        (128.0, 1, r"threads=128.0; expected an int >= 1"),
        (True, 1, r"threads=True; expected an int >= 1"),
        (128, -1, r"min_blocks=-1; expected None or an int >= 0"),
        (128, 2.0, r"min_blocks=2.0; expected None or an int >= 0"),
        (128, False, r"min_blocks=False; expected None or an int >= 0"),
        (128, "2", r"min_blocks='2'; expected None or an int >= 0"),
    ],
)
def test_register_cap_refuses_what_is_no_block(threads, min_blocks, message):
    with pytest.raises(LayoutError, match=message):
        register_cap(threads, min_blocks)


@pytest.mark.parametrize(
    ("capability", "kib"), [(80, 163), (86, 99), (89, 99), (90, 227), (100, 227), (120, 99)]
)
def test_shared_memory_limit_table(capability, kib):
    assert shared_memory_limit(capability) == kib * 1024


def test_an_unknown_architecture_has_the_largest_limit_or_is_refused():
    assert shared_memory_limit(None) == LARGEST_SHARED_MEMORY_LIMIT == 227 * 1024
    with pytest.raises(LayoutError, match=r"compute capability 91; expected one of \[70, "):
        shared_memory_limit(91)

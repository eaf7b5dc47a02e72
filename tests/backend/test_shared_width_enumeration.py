"""The vector width of a shared-memory tile whose origin depends on loop variables.

`MemoryLowering.origin_values` enumerates every value of the origin while there are at most
`ENUMERATION_LIMIT` of them, and the width is the widest that every enumerated origin allows.
Past the limit the width comes from strides alone, which for a swizzled tensor is 1.

The tensor is `shared_row_major_swizzle(R, 64, element_bits=16)`: its swizzle permutes whole
16-byte chunks (8 halves) within each row, so a tile of one row, 8 consecutive halves per
thread starting at a multiple of 8, moves in 16-byte vectors (width 8) at every row.
"""

from __future__ import annotations

import pytest

from backend.lower import lower
from backend.lower.memory import ENUMERATION_LIMIT
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.instructions import LoadShared, StoreShared
from ir.program import Program
from layout_algebra import spatial
from layout_algebra.shared import shared_row_major_swizzle

INNER = 16


def row_copy(outer: int) -> Program:
    """Load and store one row (8 threads x 8 halves) of a swizzled (16 * outer, 64) tensor at
    row ``r + 16 * s`` for r < 16, s < `outer`: 16 * outer origins."""
    rows = INNER * outer
    with ProgramBuilder("rows", 8) as b:
        buffer = b.shared_tensor(dtypes.f16, shared_row_major_swizzle(rows, 64, element_bits=16))
        with b.for_range(INNER) as r, b.for_range(outer) as s:
            tile = b.load_shared(buffer, spatial(1, 8).local(1, 8), [r + INNER * s, 0])
            b.store_shared(buffer, tile, [r + INNER * s, 0])
    return b.program()


def test_the_limit_is_256_origins() -> None:
    assert ENUMERATION_LIMIT == 256


@pytest.mark.parametrize(
    ("outer", "width"),
    [
        (1, 8),  # 16 origins: enumerated
        (ENUMERATION_LIMIT // INNER, 8),  # exactly the limit (16 x 16): still enumerated
        (ENUMERATION_LIMIT // INNER + 1, 1),  # 272 origins: past the limit, strides only
    ],
)
def test_swizzled_row_width_up_to_the_enumeration_limit(outer: int, width: int) -> None:
    kernel = lower(row_copy(outer))
    widths = {
        (type(access.instruction), access.width)
        for access in kernel.accesses
        if isinstance(access.instruction, (LoadShared, StoreShared))
    }
    assert widths == {(LoadShared, width), (StoreShared, width)}


def parameter_rows(count: int) -> Program:
    """The row copy at row ``r + 16 * s`` with r < 16 and s < `count` int parameters, not loop
    variables: their values are enumerated from their bounds, with step 1."""
    with ProgramBuilder("parameter_rows", 8) as b:
        r = b.int_param("r", lo=0, hi=INNER - 1)
        s = b.int_param("s", lo=0, hi=count - 1)
        buffer = b.shared_tensor(
            dtypes.f16, shared_row_major_swizzle(INNER * count, 64, element_bits=16)
        )
        tile = b.load_shared(buffer, spatial(1, 8).local(1, 8), [r + INNER * s, 0])
        b.store_shared(buffer, tile, [r + INNER * s, 0])
    return b.program()


@pytest.mark.parametrize(("count", "width"), [(1, 8), (16, 8), (17, 1)])
def test_origins_of_int_parameters_are_enumerated_by_their_bounds(count: int, width: int) -> None:
    """An origin of int parameters is enumerated like one of loop variables (every value of
    each parameter's bounds); this used to fail with an unbound step."""
    kernel = lower(parameter_rows(count))
    widths = {
        (type(access.instruction), access.width)
        for access in kernel.accesses
        if isinstance(access.instruction, (LoadShared, StoreShared))
    }
    assert widths == {(LoadShared, width), (StoreShared, width)}

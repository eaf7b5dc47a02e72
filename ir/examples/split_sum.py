"""The fused split-k sum of the packed-weight matmul programs, in the launch that computes the
parts.

When several blocks compute parts of one output tile (k split over grid z, or a stream-K
block's share of a tile), each block stores its f32 partial sums of the tile in a slot of a
(slots, m, n) workspace and takes a ticket on the tile's i32 counter (`ProgramBuilder.
atomic_add`: the stores before it are visible to the block whose later ticket counts them).
The block whose ticket comes last adds the tile's parts in slot order, f32 adds from slot 0, so
the result is the same bits whichever block finished last, casts the sum to C's type, stores
it, and sets the counter back to zero, ready for the next launch.

`register_dequant_matmul` (split-k and stream-K) and `wgmma_dequant_matmul` (split-k) add up
their parts with `add_parts_last`; `sum_layout` is the tile's layout for those adds.
"""

from __future__ import annotations

from typing import Any

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.values import GlobalTensor, RegisterTensor
from layout_algebra.register import RegisterLayout, local, replicate

SUM_VECTOR = 4
"""f32 values a thread adds as one 16-byte vector."""


def sum_layout(block_m: int, block_n: int, threads: int) -> RegisterLayout:
    """The (block_m, block_n) tile of C in which `threads` threads add the parts: half of them
    on even rows, half on odd ones, each 16-byte vectors of consecutive columns. Requires an
    even `block_m` and `block_n` a multiple of 2 * `threads`."""
    columns = 2 * block_n // threads
    return local(block_m // 2, 1).spatial(2, threads // 2).local(1, columns)


def add_parts_last(
    b: ProgramBuilder,
    *,
    parts: GlobalTensor,
    out: GlobalTensor,
    counters: GlobalTensor,
    tile: Any,
    origin: tuple[Any, Any],
    count: Any,
    layout: RegisterLayout,
    out_dtype: DataType,
) -> None:
    """After this block stored its part of the tile at `origin` (row, column of C) in its slot
    of `parts` (the (slots, m, n) f32 view): take a ticket on ``counters[tile]``; the block
    whose ticket is ``count - 1`` (the tile has `count` parts, slots 0 to count - 1) adds the
    parts in slot order in `layout`, stores their sum as `out_dtype` into `out` (C, (m, n))
    and zeroes the counter."""
    ticket = b.atomic_add(counters, [tile])
    with b.if_(ticket.eq(count - 1)):
        total: RegisterTensor = b.load_global(parts, [0, *origin], layout.unsqueeze(0))
        with b.for_range(1, count) as part:
            term = b.load_global(parts, [part, *origin], layout.unsqueeze(0))
            b.assign(total, b.add(total, term))
        total = b.view(total, dtypes.f32, layout)
        b.store_global(out, b.cast(total, out_dtype), list(origin))
        zero = b.register_tensor(dtypes.i32, replicate(b.threads).reshape(1), 0)
        b.store_global(counters, zero, [tile])

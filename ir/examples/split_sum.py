"""The fused split-k sum of the packed-weight matmul programs, in the launch that computes the
parts.

When several blocks compute parts of one output tile (k split over grid z, or a stream-K
block's share of a tile), each block stores its f32 partial sums of the tile in a slot of a
workspace and takes a ticket on the tile's i32 counter (`ProgramBuilder.
atomic_add`: the stores before it are visible to the block whose later ticket counts them).
The block whose ticket comes last adds the tile's parts in slot order, f32 adds from slot 0, so
the result is the same bits whichever block finished last, casts the sum to C's type, stores
it, and sets the counter back to zero, ready for the next launch.

`register_dequant_matmul` (split-k and stream-K) adds up its parts with `add_parts_last`, in C's
(m, n) order (`sum_layout` is the tile's layout for those adds), or, with
`DequantConfig.combine_parts`, has each block add its part into one f32 sum by a combining store
(``store_global(..., combine="add")``) and the last block read that sum once
(`add_parts_combined`: one (m, n) workspace, its adds in no fixed order). The prefill programs
(`ir.examples.packed_prefill`: split-k and stream-K) keep each part in the order of the
accumulator registers instead (`add_parts_in_fragments`): a tile's part is one run of memory in
which each thread's registers sit four by four beside its neighbours' (`part_order`), so every
store and load is a 16-byte vector of whole warps' 512-byte runs, with no bounds to check (the
workspace holds whole tiles), and the last block sums the parts straight into the
accumulator's layout, a piece of its registers at a time (`part_pieces`), and stores C from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.values import GlobalTensor, RegisterTensor
from layout_algebra.divide import left_divide
from layout_algebra.errors import LayoutError
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import RegisterLayout, local, replicate

SUM_VECTOR = 4
"""f32 values a thread adds as one 16-byte vector."""
PIECE_REGISTERS = 32
"""The most f32 registers a thread sums at a time in `add_parts_in_fragments` (the sum and
one part's term live together beside whatever else the thread holds)."""


def sum_layout(block_m: int, block_n: int, threads: int) -> RegisterLayout:
    """The (block_m, block_n) tile of C in which `threads` threads add the parts: half of them
    on even rows, half on odd ones, each 16-byte vectors of consecutive columns. Requires an
    even `block_m` and `block_n` a multiple of 2 * `threads`."""
    columns = 2 * block_n // threads
    return local(block_m // 2, 1).spatial(2, threads // 2).local(1, columns)


@contextmanager
def last_of_tile(
    b: ProgramBuilder, counters: GlobalTensor, tile: Any, count: Any
) -> Iterator[None]:
    """Take a ticket on ``counters[tile]`` (`ProgramBuilder.atomic_add`: the stores before it
    are visible to the blocks whose tickets come later); the body runs in the block whose
    ticket is ``count - 1``, the last of the tile's `count` parts, which then zeroes the
    counter, ready for the next launch."""
    ticket = b.atomic_add(counters, [tile])
    with b.if_(ticket.eq(count - 1)):
        yield
        zero = b.register_tensor(dtypes.i32, replicate(b.threads).reshape(1), 0)
        b.store_global(counters, zero, [tile])


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
    prefetch: bool = False,
    batch: int = 1,
) -> None:
    """After this block stored its part of the tile at `origin` (row, column of C) in its slot
    of `parts` (the (slots, m, n) f32 view): take a ticket on ``counters[tile]``; the block
    whose ticket is ``count - 1`` (the tile has `count` parts, slots 0 to count - 1) adds the
    parts in slot order in `layout`, stores their sum as `out_dtype` into `out` (C, (m, n))
    and zeroes the counter. With `prefetch`, that block first prefetches parts 1 to count - 1
    into L1 (`prefetch_global`), all at once, meant to spare the loop adding them one at a
    time a round trip to L2 per part (measured slower in the decode kernel:
    `DequantConfig.prefetch_parts`).

    `batch` B > 1: the parts after slot 0 are loaded B at a time, in a loop kept rolled
    (`ForRange.rolled`) whose step issues its B loads and then adds them in slot order, the
    last ``(count - 1) % B`` one at a time after it: the same adds in the same order, so the
    same bits, with about (count - 1) / B round trips to L2 instead of count - 1, for B parts'
    registers (the rolled loop keeps the compiler from hoisting every part's loads at once)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise VerificationError(f"add_parts_last: batch={batch!r}; expected an int >= 1")
    part_layout = layout.unsqueeze(0)
    with last_of_tile(b, counters, tile, count):
        if prefetch:
            with b.for_range(1, count) as part:
                b.prefetch_global(parts, [part, *origin], part_layout)
        total: RegisterTensor = b.load_global(parts, [0, *origin], part_layout)
        rest, steps = 1, (count - 1) // batch
        if batch > 1 and not (isinstance(steps, int) and steps == 0):
            with b.for_range(0, steps, rolled=True) as step:
                first = 1 + step * batch
                terms = [
                    b.load_global(parts, [first + j, *origin], part_layout) for j in range(batch)
                ]
                for term in terms:
                    b.assign(total, b.add(total, term))
            rest = 1 + steps * batch
        with b.for_range(rest, count) as part:
            term = b.load_global(parts, [part, *origin], part_layout)
            b.assign(total, b.add(total, term))
        total = b.view(total, dtypes.f32, layout)
        b.store_global(out, b.cast(total, out_dtype), list(origin))


def add_parts_combined(
    b: ProgramBuilder,
    *,
    total: GlobalTensor,
    out: GlobalTensor,
    counters: GlobalTensor,
    tile: Any,
    origin: tuple[Any, Any],
    count: Any,
    layout: RegisterLayout,
    out_dtype: DataType,
) -> None:
    """After this block added its part of the tile at `origin` (row, column of C) into `total`
    (the (m, n) f32 sum, zero before the tile's first part) by a combining store: take a
    ticket on ``counters[tile]``; the block whose ticket is ``count - 1`` loads the tile's sum
    in `layout`, stores it as `out_dtype` into `out` (C, (m, n)), stores zeros back into the
    sum and zeroes the counter, both ready for the next launch. The parts' adds land in no
    fixed order, so the sum is not the same bits launch to launch (`add_parts_last` is the
    deterministic form)."""
    with last_of_tile(b, counters, tile, count):
        summed = b.load_global(total, list(origin), layout)
        b.store_global(out, b.cast(summed, out_dtype), list(origin))
        b.store_global(total, b.register_tensor(dtypes.f32, layout, 0.0), list(origin))


def part_order(registers: int, threads: int) -> RegisterLayout:
    """The (registers / 4, threads, 4) order of a part in memory: thread t's register r at
    ``[r // 4, t, r % 4]``, so a warp's 16-byte vectors of one ``r // 4`` are 512 consecutive
    bytes. Requires `registers` a positive multiple of `SUM_VECTOR`."""
    if registers <= 0 or registers % SUM_VECTOR:
        raise VerificationError(
            f"part_order: {registers} registers a thread; expected a positive multiple of "
            f"{SUM_VECTOR}"
        )
    vectors = registers // SUM_VECTOR
    return local(vectors, 1, 1).spatial(1, threads, 1).local(1, 1, SUM_VECTOR)


def part_pieces(layout: RegisterLayout) -> tuple[int, RegisterLayout]:
    """(p, piece): the most pieces p (a power of two, down to 1) into which `layout`'s dim 1
    splits as ``local(1, p) * piece == layout``, with at least `PIECE_REGISTERS` registers a
    thread in each piece while more remain, and whole 16-byte vectors. So registers ``[i R / p,
    (i + 1) R / p)`` of a thread are its registers of piece i, the columns ``[i c, (i + 1) c)``
    of the tile (c = dim 1 / p), in `piece`'s order."""
    registers = layout.local_size
    pieces = max(1, registers // PIECE_REGISTERS)
    while pieces > 1:
        if (registers // pieces) % SUM_VECTOR == 0 and layout.shape[1] % pieces == 0:
            try:
                return pieces, left_divide(layout, local(1, pieces))
            except LayoutError:
                pass
        pieces //= 2
    return 1, layout


def fragment_parts_view(
    b: ProgramBuilder, partial: Any, slots: Any, tiles: Any, registers: int, threads: int
) -> GlobalTensor:
    """The (slots, tiles, R / 4, T, 4) f32 view of the workspace array parameter `partial` in
    which each of `tiles` output tiles held by T = `threads` threads in R = `registers`
    registers each keeps `slots` parts in `part_order`: ``slots * tiles * R * T`` values."""
    vectors, _, _ = part_order(registers, threads).shape
    tile_size = registers * threads
    shape = (slots, tiles, vectors, threads, SUM_VECTOR)
    strides = (tiles * tile_size, tile_size, threads * SUM_VECTOR, SUM_VECTOR, 1)
    return b.global_view(partial, dtypes.f32, GlobalLayout(shape, strides))


def add_parts_in_fragments(
    b: ProgramBuilder,
    *,
    parts: GlobalTensor,
    counters: GlobalTensor,
    tile: Any,
    slot: Any,
    count: Any,
    value: RegisterTensor,
    store: Callable[[RegisterTensor, int], None],
) -> None:
    """Store `value`, this block's f32 part of output tile `tile` (any layout of R registers
    a thread), in its `slot` of `parts` (`fragment_parts_view`) in `part_order`, then take a
    ticket on ``counters[tile]``: the block whose ticket is ``count - 1`` adds the tile's
    parts in slot order (f32, from slot 0: the same bits whichever block finished last) a
    piece at a time (`part_pieces`), calling ``store(piece_sum, i)`` with the sum of piece i
    in the piece's layout (columns ``[i c, (i + 1) c)`` of the tile), and zeroes the
    counter."""
    layout = value.layout
    if layout.replication != 1:
        raise VerificationError(
            f"add_parts_in_fragments: a part of layout {layout} held by {layout.replication} "
            "threads each; expected each element in one thread"
        )
    registers, threads = layout.local_size, layout.num_threads
    whole = part_order(registers, threads)
    b.store_global(
        parts, b.view(value, dtypes.f32, whole.unsqueeze(0).unsqueeze(0)), [slot, tile, 0, 0, 0]
    )
    pieces, piece = part_pieces(layout)
    vectors = registers // pieces // SUM_VECTOR
    order = part_order(registers // pieces, threads).unsqueeze(0).unsqueeze(0)
    with last_of_tile(b, counters, tile, count):
        for i in range(pieces):
            total = b.load_global(parts, [0, tile, i * vectors, 0, 0], order)
            with b.for_range(1, count) as part:
                term = b.load_global(parts, [part, tile, i * vectors, 0, 0], order)
                b.assign(total, b.add(total, term))
            store(b.view(total, dtypes.f32, piece), i)

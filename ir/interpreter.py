"""The NumPy reference interpreter: what every tile program means.

`run_reference(program, *args, grid=..., **kwargs)` verifies the program, then executes every
block of the grid in turn (block x fastest, then y, then z). Within a block every instruction is
executed for all threads at once:

- a register tensor is an array [num_threads, local_size] of *values* (float32 for float types,
  holding values exactly representable in the type; int64 for integer types), see
  `ir.elementwise`;
- global memory is the arguments' own bytes (a C-contiguous NumPy array whose raw bytes hold
  the dense bitstream, of a dtype that says so: `ir.arguments.storage_dtypes`), mutated in
  place like a kernel would; a global view whose extent is below 1 at the int arguments (``n``
  with n = 0) is empty, so its loads read the fill and its stores are skipped;
- shared memory is one byte array per shared tensor, holding the bitstream of `layout.size`
  elements; its initial contents are zero here (undefined on the GPU).
- `dot` is warp-collective: each c element's a[m, k] and b[k, n] are read from the first thread
  of its warp that holds them (`ir.placement.dot_warp_gather`; replicas agree, so the choice of
  holder does not change the result), then summed over k in order in float32
  (`ir.instructions.Dot`).

What the hardware would get wrong is an `InterpreterError`, never a silent result:

- replicas that disagree (a `view` is the one instruction that can make the threads holding
  one element hold different bits; the interpreter checks after each view);
- two threads storing different values to one global or shared element, and two blocks storing
  different values to one global element in one launch (the first block to store an element
  owns it; another block may only store the same code there); a combining store
  (``combine="add"``) adds instead, its replicas once (they must agree), and takes no ownership:
  its adds to one element may come from any threads and blocks;
- shared memory read (or written) while a `copy_async` into it is still pending, i.e. not yet
  covered by a `copy_async_wait`, or while a `copy_bulk` into it is in flight (not yet covered
  by a `copy_bulk_wait` on its tile, after which every thread sees it); a `copy_bulk_wait` on a
  tile with no bulk copy in flight; a `copy_bulk` into a tile waited for, or written by a
  thread, since the last `sync`; in a shared tensor the program releases
  (`copy_bulk_release`), a `copy_bulk` into a tile copied before and not released since (a
  `sync` does not stand in for the release there), a release of a tile not copied and waited
  for since its last release, and any access to a released tile before its next copy;
- shared memory read by a thread other than the one that wrote it with no `sync` in between, and
  shared memory overwritten after another thread read it with no `sync` in between (a copy
  issued without a layout, and any access through a replicated layout, count as made by several
  threads, so the data they touch needs a `sync` before another access);
- with `thread_group`s (whose threads alone run a group's body, register tensors [group
  threads, local_size]), threads are the block's: a group's `sync` orders the accesses its own
  threads made before every thread of the group and before no other thread; a
  `copy_async_wait` waits for its group's own copies; a tile a `copy_bulk_wait` waited for is
  seen by the waiting group's threads alone until a `sync` of the block; a release covers the
  releasing group's reads;
- out-of-range shared accesses (a tile that leaves the shared tensor's shape), global elements
  inside the view's shape but past the end of the argument's bytes;
- integer division by zero and out-of-range shifts; bad arguments or grid, and a grid of more
  than `MAX_BLOCKS` blocks unless `run_reference` is given a larger `max_blocks`.

Registers hold values (`ir.elementwise`), and a NaN's value carries its code, so loads,
stores, copies, views, `assign`, `where`, `neg` and `abs` keep every code bit for bit, as the
GPU does; casts keep a NaN's sign and arithmetic gives the positive quiet NaN (the contract's
three NaN classes).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ir import bitstream, dtypes, instructions
from ir.arguments import (
    bind_arguments,
    check_storage,
    launch_grid,
    numpy_storage_name,
    storage_dtypes,
)
from ir.dtypes import DataType
from ir.elementwise import (
    apply_binary,
    apply_unary,
    arithmetic_nan,
    cast_nan,
    fused_multiply_add,
    round_values,
    to_codes,
    to_values,
    value_dtype,
)
from ir.errors import InterpreterError
from ir.instructions import Instruction
from ir.placement import (
    broadcast_gather,
    dot_warp_gather,
    first_owner,
    layout_table,
    reduce_plan,
)
from ir.printer import format_instruction
from ir.program import BLOCK_INDICES, Program
from ir.values import ArrayParam, GlobalTensor, IntParam, RegisterTensor, SharedTensor
from ir.verifier import verify
from ir.visitor import InstructionVisitor
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import RegisterLayout
from layout_algebra.shared import SharedLayout
from layout_algebra.symbolic import Expr, evaluate

MAX_BLOCKS = 65536
"""The most blocks `run_reference` runs unless told otherwise (`max_blocks=`): it runs them one
by one in Python, so a larger grid is more likely a mistake than a wish to wait."""

_CLEAN = -1
"""Tracker value: no thread wrote / read the element since the last barrier."""
_MANY = -2
"""A tile position's thread when several (or unknown) threads of the group touch it."""


def _padded(coords: np.ndarray, rank: int) -> np.ndarray:
    """Coordinates [..., r] padded with leading zero columns to [..., rank]."""
    extra = rank - coords.shape[-1]
    if extra == 0:
        return coords
    zeros = np.zeros((*coords.shape[:-1], extra), dtype=np.int64)
    return np.concatenate([zeros, coords], axis=-1)


@functools.cache
def _shared_offsets(layout: SharedLayout) -> np.ndarray:
    """Element offsets of every coordinate of a shared layout, as an array of its shape."""
    table = np.asarray(layout.table(), dtype=np.int64)
    table.setflags(write=False)
    return table


TileKey = RegisterLayout | tuple[int, ...]
"""What places a tile: a register layout, or a plain shape (a copy with no layout)."""


@functools.cache
def _tile_coords(key: TileKey) -> np.ndarray:
    """Tile coordinates [threads, local, rank] of a layout, or [1, size, rank] of a plain shape."""
    if isinstance(key, RegisterLayout):
        return layout_table(key)
    grids = np.indices(key, dtype=np.int64).reshape(len(key), -1)
    coords = grids.T[None].copy()
    coords.setflags(write=False)
    return coords


@functools.cache
def _tile_threads(key: TileKey) -> np.ndarray:
    """Who touches each tile position: its thread when the layout does not replicate, else
    _MANY (several threads, or unknown ones for a copy with no layout)."""
    coords = _tile_coords(key)
    shape = coords.shape[:-1]
    if isinstance(key, RegisterLayout) and key.replication == 1:
        threads = np.broadcast_to(np.arange(shape[0], dtype=np.int64)[:, None], shape).copy()
    else:
        threads = np.full(shape, _MANY, dtype=np.int64)
    threads.setflags(write=False)
    return threads


@functools.cache
def _tile_extent(key: TileKey, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(smallest, largest) tile coordinate per dimension, padded to `rank` dimensions."""
    coords = _tile_coords(key)
    flat = _padded(coords.reshape(-1, coords.shape[-1]), rank)
    return flat.min(axis=0), flat.max(axis=0)


@functools.cache
def _tile_offsets(key: TileKey, strides: tuple[int, ...]) -> np.ndarray:
    """Dot products of the (padded) tile coordinates with `strides`: offsets from the origin."""
    coords = _padded(_tile_coords(key), len(strides))
    offsets = coords @ np.array(strides, dtype=np.int64)
    offsets.setflags(write=False)
    return offsets


@functools.cache
def _row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = [1] * len(shape)
    for dim in range(len(shape) - 2, -1, -1):
        strides[dim] = strides[dim + 1] * shape[dim + 1]
    return tuple(strides)


@functools.cache
def _is_injective(layout: SharedLayout) -> bool:
    """Whether distinct coordinates of the shared layout have distinct offsets."""
    table = _shared_offsets(layout)
    return np.unique(table).size == table.size


@functools.cache
def _flat_gather(result: RegisterLayout, operand: RegisterLayout) -> np.ndarray:
    """`broadcast_gather` as indices into the operand's flattened [threads * local] values."""
    gather = broadcast_gather(result, operand)
    rows = np.arange(result.num_threads, dtype=np.int64)[:, None] * operand.local_size
    flat = gather + rows
    flat.setflags(write=False)
    return flat


def _same_bits(dtype: DataType, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise equality of values as bit patterns (NaN equals NaN of the same code)."""
    if dtype.is_float:
        return a.view(np.uint32) == b.view(np.uint32)
    return a == b


def _first(elements: np.ndarray, marked: np.ndarray) -> int | None:
    """The first of `elements` where the mask `marked` (one flag per element) is set, or
    None."""
    return int(elements[marked][0]) if marked.any() else None


class _SharedState:
    """One shared tensor of one block: bytes, pending copy groups and barrier trackers.

    A tracker (`writer`, `reader`) holds per element the smallest and the largest block thread
    that touched it since a barrier of the block (`_CLEAN` when none: one thread when both are
    equal, several otherwise), and the first and last thread of the thread group whose barrier
    has ordered those accesses before all of its threads since (`_CLEAN` when none): the same
    one thread, or a thread of that group, may then access the element."""

    def __init__(self, tensor: SharedTensor, block_threads: int) -> None:
        from ir.dtypes import packed_nbytes

        size = tensor.layout.size
        self.tensor = tensor
        self.stream = np.zeros(packed_nbytes(size, tensor.dtype), dtype=np.uint8)
        self.pending = np.full(size, -1, dtype=np.int64)
        self.pending_group = np.zeros(size, dtype=np.int64)  # the issuing group's number
        self.writer = np.full((4, size), _CLEAN, dtype=np.int64)
        self.reader = np.full((4, size), _CLEAN, dtype=np.int64)
        # Bulk copies: elements in flight, and elements waited for since the last sync.
        self.bulk = np.zeros(size, dtype=bool)
        self.bulk_waited = np.zeros(size, dtype=bool)
        # The block threads that see each element (a bulk copy's tile: its waiting group's).
        self.visible = np.array([[0], [block_threads - 1]], dtype=np.int64).repeat(size, axis=1)
        # Releases (`copy_bulk_release`): elements bulk-copied at least once, and elements
        # released since their last bulk copy.
        self.copied = np.zeros(size, dtype=bool)
        self.released = np.zeros(size, dtype=bool)

    def mark(
        self, tracker: np.ndarray, elements: np.ndarray, threads: np.ndarray, distinct: bool
    ) -> None:
        """Record the (smallest, largest) `threads` [2, ...] (one pair per entry of `elements`)
        as having touched `elements` since the last barrier.

        `distinct`: no element appears twice in `elements` (then no scatter is needed).
        """
        elements = elements.ravel()
        low, high = threads[0].ravel(), threads[1].ravel()
        if not distinct:
            # Case: one element touched through several tile positions; merge them first.
            elements, position = np.unique(elements, return_inverse=True)
            merged_low = np.full(elements.size, np.iinfo(np.int64).max, dtype=np.int64)
            merged_high = np.full(elements.size, _CLEAN, dtype=np.int64)
            np.minimum.at(merged_low, position, low)
            np.maximum.at(merged_high, position, high)
            low, high = merged_low, merged_high
        old_low, old_high = tracker[0, elements], tracker[1, elements]
        tracker[0, elements] = np.where(old_low == _CLEAN, low, np.minimum(old_low, low))
        tracker[1, elements] = np.maximum(old_high, high)  # _CLEAN is below every thread
        tracker[2:, elements] = _CLEAN  # not ordered by any barrier yet

    def conflict(
        self, tracker: np.ndarray, elements: np.ndarray, threads: np.ndarray
    ) -> tuple[int, tuple[int, int], tuple[int, int]] | None:
        """The first (element, its threads, the accessing threads) where a thread other than
        the accessing one touched the element."""
        elements = elements.ravel()
        low, high = threads[0].ravel(), threads[1].ravel()
        other = tracker[:, elements]
        same_thread = (other[0] == low) & (other[1] == high) & (low == high)
        ordered = (other[2] != _CLEAN) & (other[2] <= low) & (high <= other[3])
        bad = (other[0] != _CLEAN) & ~same_thread & ~ordered
        if not bad.any():
            return None
        k = int(np.flatnonzero(bad)[0])
        return (
            int(elements[k]),
            (int(other[0, k]), int(other[1, k])),
            (int(low[k]), int(high[k])),
        )

    def clear(self, tracker: np.ndarray, first: int, last: int, elements: np.ndarray) -> None:
        """Forget the accesses to `elements` made by threads `first` .. `last` alone."""
        done = np.zeros(tracker.shape[1], dtype=bool)
        done[elements] = True
        done &= (tracker[0] >= first) & (tracker[1] <= last)
        tracker[:, done] = _CLEAN

    def order(self, tracker: np.ndarray, first: int, last: int, keep: np.ndarray) -> None:
        """A barrier of threads `first` .. `last`: the accesses made by them alone (but those
        of `keep`) are ordered before every one of them."""
        inside = (tracker[0] >= first) & (tracker[1] <= last) & ~keep
        tracker[2, inside], tracker[3, inside] = first, last


def _thread_text(threads: tuple[int, int], one: str = "", several: str = "") -> str:
    """Who touched an element (the (first, last) block threads), with the verb in agreement."""
    first, last = threads
    text = f"thread {first} {one}" if first == last else f"several threads {several}"
    return text.rstrip()


class BlockInterpreter(InstructionVisitor[None]):
    """The state of one block while it runs."""

    def __init__(self, run: _Run, block: tuple[int, int, int]) -> None:
        self.run = run
        # The threads the instructions run on: the block's, or inside a thread group the
        # group's (`threads` of them from block thread `thread_base`), numbered by `group`.
        self.block_threads = self.threads = run.program.num_threads
        self.thread_base = 0
        self.groups: dict[tuple[int, int], int] = {(0, self.threads): 0}
        self.group = 0
        self.block = block
        self.block_number = block[0] + run.grid[0] * (block[1] + run.grid[1] * block[2])
        self.env: dict[str, int] = dict(run.scalars)
        for index_var, value in zip(BLOCK_INDICES, block):
            self.env[index_var.name] = value
        self.registers: dict[str, np.ndarray] = {}
        self.shared: dict[str, _SharedState] = {}
        self.committed = [0]  # commits of copy_async groups, per thread group
        self.current: Instruction | None = None

    # -------------------------------------------------------------------------------- helpers

    @property
    def thread_last(self) -> int:
        """The last block thread of the threads running now."""
        return self.thread_base + self.threads - 1

    def tile_threads(self, key: TileKey) -> np.ndarray:
        """[2, ...] the (smallest, largest) block thread touching each tile position: its own
        thread, or all the running threads where several (or unknown ones) do."""
        relative = _tile_threads(key)
        several = relative == _MANY
        return np.stack(
            [
                np.where(several, self.thread_base, relative + self.thread_base),
                np.where(several, self.thread_last, relative + self.thread_base),
            ]
        )

    def error(self, problem: str) -> InterpreterError:
        where = "" if self.current is None else f"\n    in: {format_instruction(self.current)}"
        return InterpreterError(f"block {self.block}: {problem}{where}")

    def scalar(self, expr: Expr) -> int:
        try:
            return int(evaluate(expr, self.env))
        except ZeroDivisionError as error:
            raise self.error(f"division by zero in scalar {expr!r}") from error

    def values(self, tensor: RegisterTensor) -> np.ndarray:
        return self.registers[tensor.name]

    def gathered(self, out: RegisterTensor, operand: RegisterTensor) -> np.ndarray:
        """The operand values each result element reads, [num_threads, out.local_size]."""
        values = self.values(operand)
        if operand.layout == out.layout:
            return values
        return values.ravel()[_flat_gather(out.layout, operand.layout)]

    def check_replicas(self, tensor: RegisterTensor, values: np.ndarray) -> None:
        layout = tensor.layout
        if layout.replication == 1:
            return
        reference = values.ravel()[first_owner(layout)]
        bad = ~_same_bits(tensor.dtype, values, reference)
        if bad.any():
            t, i = (int(v) for v in np.argwhere(bad)[0])
            coord = tuple(int(c) for c in layout_table(layout)[t, i])
            raise self.error(
                f"replicas disagree: thread {t} holds {values[t, i].item()!r} for element {coord} "
                f"of {tensor.name}, its first owner holds {reference[t, i].item()!r}"
            )

    def global_layout(self, tensor: GlobalTensor) -> GlobalLayout | BoundView:
        layout = tensor.layout
        if not layout.is_symbolic:
            return layout
        try:
            bound = self.run.bound_layout(layout, self.env)
        except ZeroDivisionError as error:
            raise self.error(
                f"the layout of {tensor.name}, {layout!r}, divides by zero with "
                f"{_format_env(layout, self.env)}"
            ) from error
        negative = [stride for stride in bound.strides if stride < 0]
        if negative:
            raise self.error(
                f"the layout of {tensor.name}, {layout!r}, has strides {bound.strides} with "
                f"{_format_env(layout, self.env)}; expected strides >= 0"
            )
        return bound

    def global_access(
        self, tensor: GlobalTensor, offsets: Sequence[Expr], key: TileKey
    ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        """(in-bounds mask or None when all are in bounds, element numbers of the in-bounds
        tile positions, the argument's byte stream) of a tile placed by `key` at `offsets`."""
        layout = self.global_layout(tensor)
        origin = np.array([self.scalar(o) for o in offsets], dtype=np.int64)
        shape = np.array(layout.shape, dtype=np.int64)
        strides = np.array(layout.strides, dtype=np.int64)
        low, high = _tile_extent(key, layout.rank)
        if np.all(origin + low >= 0) and np.all(origin + high < shape):
            # Case: the whole tile is inside the view; offsets are a fixed table plus the origin.
            inside = None
            elements = _tile_offsets(key, layout.strides) + int(origin @ strides)
        else:
            # Case: a partial tile; mask the positions outside the view.
            full = _padded(_tile_coords(key), layout.rank) + origin
            inside = np.all((full >= 0) & (full < shape), axis=-1)
            elements = full[inside] @ strides
        stream = self.run.streams[tensor.param.name]
        nbits = tensor.dtype.nbits
        if elements.size and (int(elements.max()) + 1) * nbits > stream.size * 8:
            bad = int(elements.max())
            raise self.error(
                f"element {bad} of {tensor.name} ({tensor.dtype}) lies past the end of argument "
                f"{tensor.param.name} ({stream.size} bytes)"
            )
        return inside, elements, stream

    def shared_access(
        self, tensor: SharedTensor, offsets: Sequence[Expr], key: TileKey
    ) -> np.ndarray:
        """Element offsets in `tensor` of a tile placed by `key` at `offsets` (range-checked)."""
        origin = np.array([self.scalar(o) for o in offsets], dtype=np.int64)
        shape = np.array(tensor.shape, dtype=np.int64)
        low, high = _tile_extent(key, len(tensor.shape))
        if not (np.all(origin + low >= 0) and np.all(origin + high < shape)):
            full = _padded(_tile_coords(key), len(tensor.shape)) + origin
            outside = np.any((full < 0) | (full >= shape), axis=-1)
            bad = tuple(int(c) for c in full[outside][0])
            raise self.error(
                f"out-of-range shared access: coordinate {bad} of shared tensor {tensor.name} "
                f"with shape {tensor.shape}"
            )
        strides = _row_major_strides(tensor.shape)
        flat = _tile_offsets(key, strides) + int(origin @ np.array(strides, dtype=np.int64))
        return _shared_offsets(tensor.layout).ravel()[flat]

    def check_store_conflicts(
        self,
        elements: np.ndarray,
        codes: np.ndarray,
        coords: np.ndarray,
        threads: np.ndarray,
        where: str,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Distinct (elements, codes) of a store, after checking writers of one element agree."""
        if elements.size == 0:
            return elements, codes
        order = np.argsort(elements, kind="stable")
        elements, codes = elements[order], codes[order]
        repeated = elements[1:] == elements[:-1]
        clash = repeated & (codes[1:] != codes[:-1])
        if clash.any():
            k = int(np.flatnonzero(clash)[0])
            first, second = order[k], order[k + 1]
            raise self.error(
                f"two threads store different values to one element: threads "
                f"{int(threads[first])} and {int(threads[second])} store codes {int(codes[k])} "
                f"and {int(codes[k + 1])} (tile elements {tuple(int(c) for c in coords[first])} "
                f"and {tuple(int(c) for c in coords[second])}) to element {int(elements[k])} "
                f"of {where}"
            )
        keep = np.concatenate([[True], ~repeated])
        return elements[keep], codes[keep]

    # ---------------------------------------------------------------------------- execution

    def execute(self, body: Sequence[Instruction]) -> None:
        for instruction in body:
            self.current = instruction
            self.visit(instruction)

    def visit_register_tensor_init(self, instruction: instructions.RegisterTensorInit) -> None:
        out = instruction.out
        codes = out.dtype.encode(np.array([instruction.init]))
        value = to_values(out.dtype, codes)[0]
        self.registers[out.name] = np.full(
            (self.threads, out.layout.local_size), value, dtype=value_dtype(out.dtype)
        )

    def visit_global_view(self, instruction: instructions.GlobalView) -> None:
        pass  # a view only names memory; its accesses do the work

    def visit_shared_tensor_alloc(self, instruction: instructions.SharedTensorAlloc) -> None:
        self.shared[instruction.out.name] = _SharedState(instruction.out, self.block_threads)

    def visit_load_global(self, instruction: instructions.LoadGlobal) -> None:
        out, src = instruction.out, instruction.src
        inside, elements, stream = self.global_access(src, instruction.offsets, out.layout)
        if inside is None:
            codes = bitstream.read(stream, elements, src.dtype.nbits)
        else:
            fill = int(src.dtype.encode(np.array([instruction.fill]))[0])
            codes = np.full(inside.shape, fill, dtype=np.int64)
            codes[inside] = bitstream.read(stream, elements, src.dtype.nbits)
        self.registers[out.name] = to_values(out.dtype, codes)

    def visit_prefetch_global(self, instruction: instructions.PrefetchGlobal) -> None:
        # No value changes; the addresses are checked as a load's are (inside the argument).
        self.global_access(instruction.src, instruction.offsets, instruction.layout)

    def visit_store_global(self, instruction: instructions.StoreGlobal) -> None:
        dst, src = instruction.dst, instruction.src
        inside, elements, stream = self.global_access(dst, instruction.offsets, src.layout)
        codes = to_codes(src.dtype, self.values(src))
        coords = layout_table(src.layout)
        threads = np.broadcast_to(self.thread_base + np.arange(self.threads)[:, None], codes.shape)
        if inside is None:
            inside = np.ones(codes.shape, dtype=bool)
            elements = elements.ravel()
        if instruction.combine is not None:
            self.combine_global(dst, stream, elements, codes[inside], coords[inside])
            return
        elements, unique_codes = self.check_store_conflicts(
            elements, codes[inside], coords[inside], threads[inside], dst.name
        )
        self.run.record_global_store(self, dst, elements, unique_codes)
        bitstream.write(stream, elements, unique_codes, dst.dtype.nbits)

    def combine_global(
        self,
        dst: GlobalTensor,
        stream: np.ndarray,
        elements: np.ndarray,
        codes: np.ndarray,
        coords: np.ndarray,
    ) -> None:
        """A combining store's adds (`ir.instructions.StoreGlobal`): each tile element once
        (replicas agree: the interpreter checks after every view), in thread order, each add
        rounded into `dst`'s type; f32 adds flush subnormal inputs and results to zero of their
        sign."""
        dtype = dst.dtype
        primary = np.sort(np.unique(coords, axis=0, return_index=True)[1])
        elements, codes = elements[primary], codes[primary]
        # Adds to one element run in turns: each turn adds the first contribution left to
        # each element.
        left = np.arange(elements.size)
        while left.size:
            first = np.unique(elements[left], return_index=True)[1]
            pick, left = left[first], np.delete(left, first)
            targets = elements[pick]
            current = to_values(dtype, bitstream.read(stream, targets, dtype.nbits))
            addends = to_values(dtype, codes[pick])
            if dtype == dtypes.f32:
                current, addends = _flush_subnormals(current), _flush_subnormals(addends)
            total = apply_binary("add", dtype, current, addends)
            if dtype == dtypes.f32:
                total = _flush_subnormals(total)
            bitstream.write(stream, targets, to_codes(dtype, total), dtype.nbits)

    def visit_atomic_add(self, instruction: instructions.AtomicAdd) -> None:
        dst = instruction.dst
        layout = self.global_layout(dst)
        origin = [self.scalar(o) for o in instruction.offsets]
        old = 0
        if all(0 <= c < extent for c, extent in zip(origin, layout.shape)):
            element = sum(c * stride for c, stride in zip(origin, layout.strides))
            stream = self.run.streams[dst.param.name]
            if (element + 1) * 4 > stream.size:
                raise self.error(
                    f"element {element} of {dst.name} (i32) lies past the end of argument "
                    f"{dst.param.name} ({stream.size} bytes)"
                )
            word = stream[4 * element : 4 * element + 4].view("<i4")
            old = int(word[0])
            total = (old + self.scalar(instruction.value) + 2**31) % 2**32 - 2**31
            word[0] = total
        self.env[instruction.var.name] = old

    def check_no_bulk(self, state: _SharedState, elements: np.ndarray, verb: str) -> None:
        """A bulk copy into any of `elements` still in flight is an error."""
        bad = _first(elements, state.bulk[elements])
        if bad is not None:
            raise self.error(
                f"shared memory {verb} while a bulk copy into it is in flight: element {bad} of "
                f"{state.tensor.name} (copy_bulk_wait on its tile first)"
            )

    def check_not_released(self, state: _SharedState, elements: np.ndarray, verb: str) -> None:
        """Any of `elements` released and not bulk-copied into since is an error."""
        bad = _first(elements, state.released[elements])
        if bad is not None:
            raise self.error(
                f"shared memory {verb} after its release: element {bad} of "
                f"{state.tensor.name} belongs to the next bulk copy into it"
            )

    def read_shared(self, state: _SharedState, elements: np.ndarray, key: TileKey) -> None:
        """Check that the tile's threads may read `elements` now; record them as readers."""
        self.check_no_bulk(state, elements, "read")
        self.check_not_released(state, elements, "read")
        bad = _first(elements, state.pending[elements] >= 0)
        if bad is not None:
            raise self.error(
                f"shared memory read before its copy was waited for: element {bad} of "
                f"{state.tensor.name} belongs to copy group {int(state.pending[bad])} "
                f"({self.committed[self.group]} committed; copy_async_wait waits for committed "
                "groups)"
            )
        threads = self.tile_threads(key)
        unseen = (threads[0] < state.visible[0, elements]) | (
            threads[1] > state.visible[1, elements]
        )
        if unseen.any():
            k = np.unravel_index(int(np.flatnonzero(unseen.ravel())[0]), unseen.shape)
            element = int(elements[k])
            raise self.error(
                f"shared memory read by {_thread_text((int(threads[0][k]), int(threads[1][k])))}"
                f", which did not wait for its bulk copy: element {element} of "
                f"{state.tensor.name} is seen by the threads that waited, "
                f"{int(state.visible[0, element])} .. {int(state.visible[1, element])}, until a "
                "sync of the block"
            )
        conflict = state.conflict(state.writer, elements, threads)
        if conflict is not None:
            element, writer, reader = conflict
            raise self.error(
                "shared memory read without a sync: "
                f"{_thread_text(reader, 'reads', 'read')} element {element} of "
                f"{state.tensor.name}, written by {_thread_text(writer)} since the last sync"
            )
        state.mark(state.reader, elements, threads, _is_injective(state.tensor.layout))

    def write_shared(self, state: _SharedState, elements: np.ndarray, key: TileKey) -> None:
        """Check that the tile's threads may overwrite `elements` now; record them as writers."""
        self.check_no_bulk(state, elements, "written")
        self.check_not_released(state, elements, "written")
        bad = _first(elements, state.pending[elements] >= 0)
        if bad is not None:
            raise self.error(
                f"shared memory written while a copy into it is pending: element {bad} of "
                f"{state.tensor.name}"
            )
        threads = self.tile_threads(key)
        conflict = state.conflict(state.reader, elements, threads)
        if conflict is not None:
            element, reader, writer = conflict
            raise self.error(
                "shared memory overwritten without a sync: "
                f"{_thread_text(writer, 'writes', 'write')} element {element} of "
                f"{state.tensor.name}, read by {_thread_text(reader)} since the last sync"
            )
        state.mark(state.writer, elements, threads, _is_injective(state.tensor.layout))

    def visit_load_shared(self, instruction: instructions.LoadShared) -> None:
        out, src = instruction.out, instruction.src
        state = self.shared[src.name]
        elements = self.shared_access(src, instruction.offsets, out.layout)
        self.read_shared(state, elements, out.layout)
        codes = bitstream.read(state.stream, elements, src.dtype.nbits)
        self.registers[out.name] = to_values(out.dtype, codes)

    def visit_store_shared(self, instruction: instructions.StoreShared) -> None:
        dst, src = instruction.dst, instruction.src
        state = self.shared[dst.name]
        elements = self.shared_access(dst, instruction.offsets, src.layout)
        self.write_shared(state, elements, src.layout)
        codes = to_codes(src.dtype, self.values(src))
        if src.layout.replication == 1 and _is_injective(dst.layout):
            # Case: every element is written by exactly one (thread, local index).
            elements, codes = elements.ravel(), codes.ravel()
        else:
            coords = layout_table(src.layout)
            threads = np.broadcast_to(
                self.thread_base + np.arange(self.threads)[:, None], codes.shape
            )
            elements, codes = self.check_store_conflicts(
                elements.ravel(),
                codes.ravel(),
                coords.reshape(-1, coords.shape[-1]),
                threads.ravel(),
                dst.name,
            )
        bitstream.write(state.stream, elements, codes, dst.dtype.nbits)

    def copy_source(self, src: GlobalTensor, offsets: Sequence[Expr], key: TileKey) -> np.ndarray:
        """The codes a copy reads: the tile of `src` at `offsets` placed by `key`, 0 outside."""
        inside, elements, stream = self.global_access(src, offsets, key)
        if inside is None:
            return bitstream.read(stream, elements, src.dtype.nbits)
        codes = np.zeros(inside.shape, dtype=np.int64)
        codes[inside] = bitstream.read(stream, elements, src.dtype.nbits)
        return codes

    @staticmethod
    def copy_into(state: _SharedState, targets: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """Write a copy's `codes` at shared `targets`; the distinct targets written."""
        targets, unique = np.unique(targets.ravel(), return_index=True)
        bitstream.write(state.stream, targets, codes.ravel()[unique], state.tensor.dtype.nbits)
        return targets

    def visit_copy_async(self, instruction: instructions.CopyAsync) -> None:
        dst = instruction.dst
        key = instruction.shape if instruction.layout is None else instruction.layout
        codes = self.copy_source(instruction.src, instruction.src_offsets, key)
        state = self.shared[dst.name]
        targets = self.shared_access(dst, instruction.dst_offsets, key)
        self.write_shared(state, targets, key)
        copied = self.copy_into(state, targets, codes)
        state.pending[copied] = self.committed[self.group]
        state.pending_group[copied] = self.group

    def visit_copy_bulk(self, instruction: instructions.CopyBulk) -> None:
        dst, shape = instruction.dst, instruction.shape
        codes = self.copy_source(instruction.src, instruction.src_offsets, shape)
        state = self.shared[dst.name]
        targets = self.shared_access(dst, instruction.dst_offsets, shape)
        self.check_no_bulk(state, targets, "written")
        if dst.name in self.run.released_tensors:
            bad = _first(targets, state.copied[targets] & ~state.released[targets])
            if bad is not None:
                raise self.error(
                    f"bulk copy into a tile not released since its last bulk copy: element "
                    f"{bad} of {dst.name}; in a shared tensor with releases, copy_bulk_release "
                    "must come between a tile's uses and the next copy_bulk into it (a sync "
                    "does not stand in for it)"
                )
            state.released[targets] = False
            state.copied[targets] = True
        bad = _first(targets, state.bulk_waited[targets])
        if bad is not None:
            raise self.error(
                f"bulk copy into a tile waited for since the last sync: element {bad} of "
                f"{dst.name}; a sync must come between a copy_bulk_wait and the next copy_bulk "
                "into the tile"
            )
        bad = _first(targets, state.writer[0, targets] != _CLEAN)
        if bad is not None:
            writer = _thread_text((int(state.writer[0, bad]), int(state.writer[1, bad])))
            raise self.error(
                f"shared memory overwritten without a sync: a bulk copy writes element {bad} of "
                f"{dst.name}, written by {writer} since the last sync"
            )
        self.write_shared(state, targets, shape)
        state.bulk[self.copy_into(state, targets, codes)] = True

    def visit_copy_bulk_wait(self, instruction: instructions.CopyBulkWait) -> None:
        dst = instruction.dst
        state = self.shared[dst.name]
        elements = self.shared_access(dst, instruction.offsets, instruction.shape).ravel()
        bad = _first(elements, ~state.bulk[elements])
        if bad is not None:
            raise self.error(
                f"copy_bulk_wait on a tile with no bulk copy in flight: element {bad} of {dst.name}"
            )
        state.bulk[elements] = False
        state.bulk_waited[elements] = True
        # Seen by the waiting threads with no sync (by every thread after a sync of the block).
        state.writer[:, elements] = _CLEAN
        state.visible[:, elements] = np.array([[self.thread_base], [self.thread_last]])

    def visit_copy_bulk_release(self, instruction: instructions.CopyBulkRelease) -> None:
        dst = instruction.dst
        state = self.shared[dst.name]
        elements = self.shared_access(dst, instruction.offsets, instruction.shape).ravel()
        self.check_no_bulk(state, elements, "released")
        bad = _first(elements, ~state.copied[elements] | state.released[elements])
        if bad is not None:
            raise self.error(
                f"release of a tile not bulk-copied into since its last release: element {bad} "
                f"of {dst.name}"
            )
        # Every thread of the group is past its reads: the next copy may overwrite the tile.
        state.clear(state.reader, self.thread_base, self.thread_last, elements)
        state.bulk_waited[elements] = False
        state.released[elements] = True

    def visit_copy_async_commit(self, instruction: instructions.CopyAsyncCommit) -> None:
        self.committed[self.group] += 1

    def visit_copy_async_wait(self, instruction: instructions.CopyAsyncWait) -> None:
        # A thread waits for the copies it issued: here, those of its group.
        complete_below = self.committed[self.group] - instruction.pending
        for state in self.shared.values():
            done = (
                (state.pending >= 0)
                & (state.pending < complete_below)
                & (state.pending_group == self.group)
            )
            state.pending[done] = -1

    def visit_wait_prior_grid(self, instruction: instructions.WaitPriorGrid) -> None:
        pass  # a launch run alone: no kernel before it to wait for

    def visit_launch_dependents(self, instruction: instructions.LaunchDependents) -> None:
        pass  # a launch run alone: no kernel after it to start

    def visit_sync(self, instruction: instructions.Sync) -> None:
        first, last = self.thread_base, self.thread_last
        for state in self.shared.values():
            in_flight = (state.pending >= 0) | state.bulk
            if self.threads < self.block_threads:
                # A group's barrier orders its threads' accesses before its threads alone.
                state.order(state.writer, first, last, in_flight)
                state.order(state.reader, first, last, np.zeros_like(in_flight))
                continue
            state.writer[:, ~in_flight] = _CLEAN
            state.reader[:] = _CLEAN
            state.bulk_waited[:] = False
            state.visible[0], state.visible[1] = 0, self.block_threads - 1

    def visit_unary(self, instruction: instructions.Unary) -> None:
        x = instruction.x
        self.registers[instruction.out.name] = apply_unary(instruction.op, x.dtype, self.values(x))

    def visit_binary(self, instruction: instructions.Binary) -> None:
        out, lhs, rhs = instruction.out, instruction.lhs, instruction.rhs
        try:
            result = apply_binary(
                instruction.op, lhs.dtype, self.gathered(out, lhs), self.gathered(out, rhs)
            )
        except InterpreterError as error:
            raise self.error(str(error)) from error
        self.registers[out.name] = result

    def visit_where(self, instruction: instructions.Where) -> None:
        out = instruction.out
        cond = self.gathered(out, instruction.cond)
        x, y = self.gathered(out, instruction.x), self.gathered(out, instruction.y)
        self.registers[out.name] = np.where(cond != 0, x, y)

    def visit_fma(self, instruction: instructions.Fma) -> None:
        out = instruction.out
        a, b = self.gathered(out, instruction.a), self.gathered(out, instruction.b)
        self.registers[out.name] = fused_multiply_add(a, b, self.gathered(out, instruction.c))

    def visit_cast(self, instruction: instructions.Cast) -> None:
        out, x = instruction.out, instruction.x
        # The values are x's decoded codes, so encoding them is `dtypes.convert` of the codes
        # (a NaN code's value carries the code: the cast keeps only its sign).
        values = self.gathered(out, x)
        if x.dtype.is_float:
            values = cast_nan(values)
        if instruction.exponent:
            # Exact (the verifier checked every code): NaNs and infinities stay what they are.
            values = np.asarray(values, dtype=np.float64) * 2.0**instruction.exponent
        if instruction.biased:
            # Each code's bias from its bit offset in its thread's bitstream of x.
            if out.layout == x.layout:
                local = np.broadcast_to(np.arange(out.layout.local_size), values.shape)
            else:
                local = broadcast_gather(out.layout, x.layout)
            offsets = np.asarray(local, dtype=np.int64) * x.dtype.nbits
            bias = dtypes.magic_biases(x.dtype, out.dtype, offsets)
            values = np.asarray(values, dtype=np.float64) + bias
        self.registers[out.name] = to_values(out.dtype, out.dtype.encode(values))

    def visit_view(self, instruction: instructions.View) -> None:
        out, x = instruction.out, instruction.x
        codes = to_codes(x.dtype, self.values(x))
        bits_in = np.arange(x.dtype.nbits, dtype=np.int64)
        bits = ((codes[..., None] >> bits_in) & 1).reshape(self.threads, -1)
        bits = bits.reshape(self.threads, out.layout.local_size, out.dtype.nbits)
        new_codes = (bits << np.arange(out.dtype.nbits, dtype=np.int64)).sum(axis=-1)
        values = to_values(out.dtype, new_codes)
        self.check_replicas(out, values)
        self.registers[out.name] = values

    def visit_reduce(self, instruction: instructions.Reduce) -> None:
        out, x = instruction.out, instruction.x
        local, steps = reduce_plan(x.layout, instruction.dim, out.layout)
        parts = np.take_along_axis(self.values(x), local.reshape(self.threads, -1), axis=1).reshape(
            local.shape
        )
        combine = _combiner(instruction.reduction, x.dtype)
        accumulator = parts[..., 0]
        # A NaN operand that carries a signalling NaN code raises NumPy's invalid flag; the
        # result is NaN either way and made the arithmetic NaN below.
        with np.errstate(invalid="ignore"):
            for j in range(1, parts.shape[-1]):
                accumulator = combine(accumulator, parts[..., j])
            for divisor, size in steps:
                grouped = accumulator.reshape(-1, size, divisor, accumulator.shape[-1])
                total = grouped[:, 0]
                for digit in range(1, size):
                    total = combine(total, grouped[:, digit])
                shape = accumulator.shape
                accumulator = np.broadcast_to(total[:, None], grouped.shape).reshape(shape)
        if out.dtype.is_float:
            accumulator = arithmetic_nan(accumulator)
        self.registers[out.name] = round_values(out.dtype, accumulator)

    def visit_dot(self, instruction: instructions.Dot) -> None:
        out, a, b, c = instruction.out, instruction.a, instruction.b, instruction.c
        flat_a, flat_b = dot_warp_gather(c.layout, a.layout, b.layout)
        rows = self.values(a).ravel()[flat_a]
        cols = self.values(b).ravel()[flat_b]
        accumulator = self.values(c)
        with np.errstate(invalid="ignore"):  # signalling NaN codes, as in visit_reduce
            for k in range(flat_a.shape[-1]):
                accumulator = accumulator + rows[..., k] * cols[..., k]
        if out.dtype.is_float:
            accumulator = arithmetic_nan(accumulator)
        self.registers[out.name] = accumulator

    def visit_assign(self, instruction: instructions.Assign) -> None:
        self.registers[instruction.dst.name] = self.values(instruction.src)

    def visit_for_range(self, instruction: instructions.ForRange) -> None:
        start, stop = self.scalar(instruction.start), self.scalar(instruction.stop)
        name = instruction.var.name
        for value in range(start, stop, instruction.step):
            self.env[name] = value
            self.execute(instruction.body)
        self.env.pop(name, None)

    def visit_if(self, instruction: instructions.If) -> None:
        if self.scalar(instruction.cond):
            self.execute(instruction.body)

    def visit_thread_group(self, instruction: instructions.ThreadGroup) -> None:
        outer = (self.threads, self.thread_base, self.group)
        self.thread_base += instruction.start
        self.threads = instruction.threads
        key = (self.thread_base, self.threads)
        if key not in self.groups:
            self.groups[key] = len(self.groups)
            self.committed.append(0)
        self.group = self.groups[key]
        try:
            self.execute(instruction.body)
        finally:
            self.threads, self.thread_base, self.group = outer


def _combiner(reduction: str, dtype: DataType) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The pairwise step of a reduction on interpreter values (float32 sums stay float32)."""
    if reduction == "sum":
        return np.add
    op = "max" if reduction == "max" else "min"
    if dtype.is_float:
        return lambda a, b: apply_binary(op, dtype, a, b)
    return np.maximum if op == "max" else np.minimum


class BoundView(NamedTuple):
    """A symbolic global layout at the int arguments of a launch: its extents and strides. An
    extent below 1 (``n`` with n = 0, ``n - 8`` with n = 5) is an empty view: every element of
    a tile is outside it, so loads read the fill and stores are skipped, as on the GPU."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)


def _format_env(layout: GlobalLayout, env: Mapping[str, int]) -> str:
    """The values of the variables `layout` reads, e.g. ``n=0, m=4``."""
    return ", ".join(f"{name}={env[name]}" for name in sorted(layout.free_vars()))


class _Run:
    """One launch: the program, its bound arguments, the grid and cross-block store records."""

    def __init__(
        self, program: Program, arguments: dict[str, Any], grid: tuple[int, int, int]
    ) -> None:
        self.program = program
        self.grid = grid
        self.scalars = {
            p.name: int(arguments[p.name]) for p in program.params if isinstance(p, IntParam)
        }
        self.streams: dict[str, np.ndarray] = {}
        for param in program.params:
            if isinstance(param, ArrayParam):
                # The bytes of a plain ndarray view: a subclass (np.matrix) keeps its own shape.
                array = arguments[param.name].view(np.ndarray)
                self.streams[param.name] = array.reshape(-1).view(np.uint8)
        self.stores: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        self.layouts: dict[tuple[GlobalLayout, tuple[int, ...]], BoundView] = {}
        # Shared tensors with releases: their bulk copies follow the release rules.
        self.released_tensors = {
            instruction.dst.name
            for instruction in program.walk()
            if isinstance(instruction, instructions.CopyBulkRelease)
        }

    def bound_layout(self, layout: GlobalLayout, env: Mapping[str, int]) -> BoundView:
        """`layout`'s extents and strides at the values of `env` (ZeroDivisionError when one
        divides by zero)."""
        names = sorted(layout.free_vars())
        key = (layout, tuple(env[name] for name in names))
        bound = self.layouts.get(key)
        if bound is None:
            values = {name: env[name] for name in names}
            bound = BoundView(
                tuple(int(evaluate(extent, values)) for extent in layout.shape),
                tuple(int(evaluate(stride, values)) for stride in layout.strides),
            )
            self.layouts[key] = bound
        return bound

    def record_global_store(
        self, block: BlockInterpreter, tensor: GlobalTensor, elements: np.ndarray, codes: np.ndarray
    ) -> None:
        """Check no other block stored different codes to these elements; record this store."""
        key = (tensor.param.name, tensor.dtype.nbits)
        if key not in self.stores:
            count = self.streams[tensor.param.name].size * 8 // tensor.dtype.nbits
            self.stores[key] = (np.full(count, -1, dtype=np.int64), np.zeros(count, np.int64))
        owners, written = self.stores[key]
        previous = owners[elements]
        clash = (previous >= 0) & (previous != block.block_number) & (written[elements] != codes)
        if clash.any():
            k = int(np.flatnonzero(clash)[0])
            raise block.error(
                f"two blocks store different values to one element: element {int(elements[k])} "
                f"of {tensor.param.name} got code {int(written[elements[k]])} from block number "
                f"{int(previous[k])} and {int(codes[k])} from this block"
            )
        # The first block to store an element stays its owner; the owner may overwrite it.
        update = (previous < 0) | (previous == block.block_number)
        owners[elements[update]] = block.block_number
        written[elements[update]] = codes[update]


def _flush_subnormals(values: np.ndarray) -> np.ndarray:
    """float32 `values` with every subnormal replaced by a zero of its sign."""
    values = np.asarray(values, dtype=np.float32)
    tiny = (values != 0) & (np.abs(values) < np.finfo(np.float32).tiny)
    return np.where(tiny, np.copysign(np.float32(0), values), values).astype(np.float32)


def _bind_arguments(
    program: Program, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """Match positional and keyword arguments to parameters and check each one."""
    names = [param.name for param in program.params]
    bound = bind_arguments(program.name, names, args, kwargs, InterpreterError)
    for param in program.params:
        value = bound[param.name]
        if isinstance(param, IntParam):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise InterpreterError(
                    f"argument {param.name!r} must be an int, got {type(value).__name__}"
                )
            lo, hi = param.var.lo, param.var.hi
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                raise InterpreterError(
                    f"argument {param.name}={value} is outside its bounds [{lo}, {hi}]"
                )
            if value % param.multiple_of:
                raise InterpreterError(
                    f"argument {param.name}={value} is not a multiple of {param.multiple_of}, "
                    "as the parameter requires"
                )
            if param.value is not None and value != param.value:
                raise InterpreterError(
                    f"argument {param.name}={value} differs from {param.value}, the value of the "
                    "compile-time constant the program was specialised for"
                )
        else:
            if not isinstance(value, np.ndarray):
                raise InterpreterError(
                    f"argument {param.name!r} must be a NumPy array, got {type(value).__name__}"
                )
            if isinstance(value, np.ma.MaskedArray):
                raise InterpreterError(
                    f"argument {param.name!r} is a masked array; expected a plain NumPy array "
                    "(the mask would be ignored)"
                )
            if value.dtype.kind in "OU":
                raise InterpreterError(
                    f"argument {param.name!r} is an array of {value.dtype} elements; expected "
                    "an array of plain data (its bytes are the bitstream of the parameter)"
                )
            check_storage(
                param.name,
                numpy_storage_name(value.dtype),
                storage_dtypes(param.dtype),
                param.dtype,
                InterpreterError,
            )
            if not value.flags.c_contiguous or not value.flags.writeable:
                raise InterpreterError(
                    f"argument {param.name!r} must be a C-contiguous, writeable array"
                )
    return bound


def run_reference(
    program: Program,
    *args: Any,
    grid: int | Sequence[int] | None = None,
    max_blocks: int = MAX_BLOCKS,
    **kwargs: Any,
) -> tuple[np.ndarray, ...]:
    """Run `program` over `grid` on NumPy arguments; mutate the arrays in place and return them.

    Arguments are given positionally in parameter order or by name: NumPy arrays for array
    parameters, C-contiguous and writeable, whose raw bytes are the bitstream and whose dtype
    says so (`ir.arguments.storage_dtypes`: the parameter type's own NumPy or ml_dtypes type,
    unsigned or signed integers of its width holding codes, or uint8 / int8 bytes of the dense
    bitstream), ints (within the parameter's bounds; the value itself for a constant of a
    specialised program, `ir.specialize`) for int parameters. `grid` is 1 to 3 positive ints
    (x, y, z) within the hardware's limits (`ir.arguments.check_grid`). When the program
    declares its grid (`Program.grid`), `grid` may be omitted (the declared grid evaluated on
    the int arguments) and must equal it when given; otherwise it defaults to 1
    (`ir.arguments.launch_grid`). The interpreter runs blocks one by one, so a grid of more than
    `max_blocks` blocks (a positive int, `MAX_BLOCKS` by default) is refused up front.
    Returns the array arguments in parameter order. Raises VerificationError for an ill-formed
    program and InterpreterError for bad arguments, a grid that differs from the declared one,
    a declared grid with an extent below 1, a grid past `max_blocks`, and for everything the
    module docstring lists.
    """
    verify(program)
    if isinstance(max_blocks, bool) or not isinstance(max_blocks, int | np.integer):
        raise InterpreterError(f"max_blocks={max_blocks!r}; expected a positive int")
    if max_blocks < 1:
        raise InterpreterError(f"max_blocks={max_blocks}; expected a positive int")
    arguments = _bind_arguments(program, args, kwargs)
    ints = {p.name: int(arguments[p.name]) for p in program.params if isinstance(p, IntParam)}
    given = 1 if grid is None and program.grid is None else grid
    sizes = launch_grid(program.name, given, program.grid, ints, InterpreterError)
    blocks = sizes[0] * sizes[1] * sizes[2]
    if blocks > max_blocks:
        raise InterpreterError(
            f"{program.name}: grid {sizes} has {blocks} blocks, more than the interpreter's "
            f"limit of {max_blocks}; it runs blocks one by one in Python, so pass "
            f"max_blocks={blocks} (or more) to run_reference to run it anyway"
        )
    run = _Run(program, arguments, sizes)
    for z, y, x in itertools.product(range(sizes[2]), range(sizes[1]), range(sizes[0])):
        BlockInterpreter(run, (x, y, z)).execute(program.body)
    return tuple(arguments[p.name] for p in program.params if isinstance(p, ArrayParam))

"""Where the elements an instruction reads live in each thread's registers.

The verifier and the interpreter (and the backend, to pick register indices) share these tables,
all NumPy int64 arrays indexed by thread first. -1 marks "this thread (for `dot`: this thread's
warp) does not hold that element", which the verifier reports as combining data not held.

- `inverse_table(L)`: [num_threads, num_elements], the local index at which thread t holds the
  element of row-major number e, or -1.
- `broadcast_gather(R, O)`: [num_threads, R.local_size], for a result layout R and an operand
  layout O whose shape broadcasts to R's (NumPy rules: O's shape padded with leading 1s, size-1
  dimensions stretched): the local index at which thread t holds, in O, the operand element that
  R's element (t, i) reads.
- `dot_gather(C, A, B)`: two [num_threads, C.local_size, K] tables: where thread t holds a[m, k]
  and b[k, n] for its element (t, i) = (m, n) of c (in its own registers).
- `dot_warp_gather(C, A, B)`: the same, but from any thread of t's warp (`dot` is
  warp-collective): flat positions t' * local_size + i' of a holder in t's warp.
- `dot_is_thread_local(dot)`: whether every thread holds all it combines itself (what a SIMT
  lowering needs; a tensor-core lowering shares fragments across a warp instead).
- `reduce_plan(L, dim, R)`: how `reduce` combines (see `ir.instructions.Reduce` for the order).

Warps: warp w is threads 32w .. 32w + 31 (`WARP_SIZE`), the last one possibly partial; a block of
fewer than 32 threads is one warp.

Every table is cached on its (hashable, immutable) layout arguments.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ir.instructions import Dot
from layout_algebra.hardware import WARP_SIZE
from layout_algebra.register import RegisterLayout


def _flat_index(coords: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Row-major element numbers of coordinates [..., rank] in `shape` (0 for rank 0)."""
    flat = np.zeros(coords.shape[:-1], dtype=np.int64)
    for dim, extent in enumerate(shape):
        flat = flat * extent + coords[..., dim]
    return flat


@functools.cache
def layout_table(layout: RegisterLayout) -> np.ndarray:
    """`layout.table()` (coordinates [num_threads, local_size, rank]), read-only and cached."""
    table = layout.table()
    table.setflags(write=False)
    return table


@functools.cache
def flat_table(layout: RegisterLayout) -> np.ndarray:
    """Row-major element numbers [num_threads, local_size] of every (thread, local index)."""
    flat = _flat_index(layout_table(layout), layout.shape)
    flat.setflags(write=False)
    return flat


@functools.cache
def inverse_table(layout: RegisterLayout) -> np.ndarray:
    """[num_threads, num_elements]: the local index holding element e in thread t, or -1."""
    threads, size = layout.num_threads, layout.local_size
    inverse = np.full((threads, math.prod(layout.shape)), -1, dtype=np.int64)
    rows = np.repeat(np.arange(threads, dtype=np.int64), size)
    inverse[rows, flat_table(layout).ravel()] = np.tile(np.arange(size, dtype=np.int64), threads)
    inverse.setflags(write=False)
    return inverse


@functools.cache
def first_owner(layout: RegisterLayout) -> np.ndarray:
    """[num_threads, local_size]: the flat position t' * local_size + i' of the first owner.

    The first owner of an element is its (thread, local index) with the smallest thread; replicas
    must hold the same value as it.
    """
    inverse = inverse_table(layout)
    held = inverse >= 0
    first_thread = np.argmax(held, axis=0)
    first_local = inverse[first_thread, np.arange(inverse.shape[1])]
    owner = first_thread * layout.local_size + first_local
    result = owner[flat_table(layout)]
    result.setflags(write=False)
    return result


def broadcast_coords(coords: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Coordinates [..., rank] of a result mapped to an operand of `shape` (NumPy broadcasting).

    The operand's dimensions align with the last ones of the result; a size-1 operand dimension
    reads coordinate 0.
    """
    rank = len(shape)
    tail = coords[..., coords.shape[-1] - rank :]
    return np.where(np.asarray(shape) == 1, 0, tail)


@functools.cache
def broadcast_gather(result: RegisterLayout, operand: RegisterLayout) -> np.ndarray:
    """[num_threads, result.local_size]: local index in `operand` of each result element's input.

    Requires: operand.shape broadcasts to result.shape and equal thread counts. -1 where thread
    t does not hold (in `operand`) the element that its result element (t, i) reads.
    """
    coords = broadcast_coords(layout_table(result), operand.shape)
    flat = _flat_index(coords, operand.shape)
    threads = np.arange(result.num_threads, dtype=np.int64)[:, None]
    gather = inverse_table(operand)[threads, flat]
    gather.setflags(write=False)
    return gather


@functools.cache
def dot_gather(
    c: RegisterLayout, a: RegisterLayout, b: RegisterLayout
) -> tuple[np.ndarray, np.ndarray]:
    """Where each thread holds the a and b elements that its c elements combine.

    Requires: c (M, N), a (M, K), b (K, N), equal thread counts. Returns (ga, gb), each
    [num_threads, c.local_size, K]: ga[t, i, k] is the local index of a[m, k] in thread t and
    gb[t, i, k] that of b[k, n], where (m, n) = c.map(t, i); -1 where the thread lacks it.
    """
    coords = layout_table(c)
    k_extent = a.shape[1]
    k = np.arange(k_extent, dtype=np.int64)
    rows = coords[..., 0, None]
    cols = coords[..., 1, None]
    threads = np.arange(c.num_threads, dtype=np.int64)[:, None, None]
    ga = inverse_table(a)[threads, rows * k_extent + k]
    gb = inverse_table(b)[threads, k * b.shape[1] + cols]
    ga.setflags(write=False)
    gb.setflags(write=False)
    return ga, gb


@functools.cache
def warp_inverse_table(layout: RegisterLayout) -> np.ndarray:
    """[num_warps, num_elements]: where the first holder of element e in warp w keeps it, or -1.

    num_warps = ceil(num_threads / 32). The entry is the flat position t * local_size + i of the
    (thread, local index) with the smallest t (then i) among warp w's threads t that hold element
    e (row-major number) at local index i; -1 when no thread of the warp holds it.
    """
    threads, size = layout.num_threads, layout.local_size
    warps = -(-threads // WARP_SIZE)
    elements = math.prod(layout.shape)
    unset = threads * size
    first = np.full((warps, elements), unset, dtype=np.int64)
    positions = np.arange(threads * size, dtype=np.int64)
    np.minimum.at(first, (positions // size // WARP_SIZE, flat_table(layout).ravel()), positions)
    first[first == unset] = -1
    first.setflags(write=False)
    return first


@functools.cache
def dot_warp_gather(
    c: RegisterLayout, a: RegisterLayout, b: RegisterLayout
) -> tuple[np.ndarray, np.ndarray]:
    """Where, within each thread's warp, the a and b elements its c elements combine are held.

    Requires: c (M, N), a (M, K), b (K, N), equal thread counts. Returns (ga, gb), each
    [num_threads, c.local_size, K]: ga[t, i, k] is the flat position t' * a.local_size + i' of
    a[m, k] in the first thread t' of t's warp that holds it (`warp_inverse_table`), and gb[t, i,
    k] that of b[k, n] (t' * b.local_size + i'), where (m, n) = c.map(t, i); -1 where no thread
    of t's warp holds it. The thread t' may differ from t: `dot` gathers within a warp.
    """
    coords = layout_table(c)
    k_extent = a.shape[1]
    k = np.arange(k_extent, dtype=np.int64)
    rows = coords[..., 0, None]
    cols = coords[..., 1, None]
    warps = (np.arange(c.num_threads, dtype=np.int64) // WARP_SIZE)[:, None, None]
    ga = warp_inverse_table(a)[warps, rows * k_extent + k]
    gb = warp_inverse_table(b)[warps, k * b.shape[1] + cols]
    ga.setflags(write=False)
    gb.setflags(write=False)
    return ga, gb


@functools.cache
def _is_thread_local(c: RegisterLayout, a: RegisterLayout, b: RegisterLayout) -> bool:
    ga, gb = dot_gather(c, a, b)
    return bool(np.all(ga >= 0) and np.all(gb >= 0))


def dot_is_thread_local(dot: Dot) -> bool:
    """Whether every thread of `dot` holds, itself, each a[m, k] and b[k, n] its c elements need.

    Requires: a well-formed `dot` (shapes (M, K), (K, N), (M, N), equal thread counts). True
    exactly when `dot_gather` has no -1: the dot then runs with no data moving between threads
    (a SIMT dot). False when some operand element lives only in other threads of the warp (as in
    tensor-core fragment layouts), which the IR allows but a SIMT lowering cannot do.
    """
    return _is_thread_local(dot.c.layout, dot.a.layout, dot.b.layout)


@functools.cache
def reduce_plan(
    layout: RegisterLayout, dim: int, result: RegisterLayout
) -> tuple[np.ndarray, tuple[tuple[int, int], ...]]:
    """The order of a reduction of `layout` over `dim` into `result` (its `reduce` layout).

    Returns (local, steps). `local` is [num_threads, result.local_size, n]: for thread t and
    result local index j, the n local indices of `layout` whose elements thread t combines into
    j, in increasing order. `steps` lists, for each reduced spatial mode from the least
    significant spatial entry to the most significant, (divisor, size): the threads t that
    differ only in the digit (t // divisor) % size combine their partial results in digit order.
    """
    threads, size = layout.num_threads, layout.local_size
    coords = layout_table(layout)
    keep = [d for d in range(layout.rank) if d != dim]
    projected = coords[..., keep]
    if result.rank == layout.rank:
        projected = np.insert(projected, dim, 0, axis=-1)
    flat = _flat_index(projected, result.shape)
    rows = np.arange(threads, dtype=np.int64)[:, None]
    target = inverse_table(result)[rows, flat]
    order = np.argsort(target, axis=1, kind="stable")
    local = order.reshape(threads, result.local_size, size // result.local_size)
    local.setflags(write=False)
    steps: list[tuple[int, int]] = []
    divisor = 1
    mode_dims = layout.mode_dims
    for entry, extent in zip(reversed(layout.spatial_modes), reversed(layout.spatial_sizes)):
        if entry >= 0 and mode_dims[entry] == dim:
            steps.append((divisor, extent))
        divisor *= extent
    return local, tuple(steps)

"""The verifier: rejects ill-formed tile programs before anything runs or compiles them.

`verify(program, shared_memory_limit=...)` raises `VerificationError` whose message names the
instruction (its op and printed line) and the mismatch. It checks:

- types: operand dtypes that must agree (binary operands, stores, copies, assign), operation
  kinds (bit operations on integers only, transcendental functions on floats only), `where`'s
  `u1` condition, `dot`'s f16/bf16 operands and f32 accumulator;
- shapes: broadcasting, dot's (M, K) @ (K, N) + (M, N), memory ranks and tile extents, reduce
  dims, the reduce layout (`layout_algebra.reduce`);
- layouts: every register tensor has the program's thread count (inside a `thread_group`, the
  group's); results have the layout their instruction implies (unary ops, casts, dot, assign);
- data placement: no thread combines data it does not hold (each operand element a binary op
  or `where` reads must be in the reading thread's registers; `ir.placement`); `dot` is
  warp-collective: each a[m, k] and b[k, n] that a warp's c elements combine must be held by
  some thread of that warp (threads 32w .. 32w + 31, all threads when fewer than 32), not
  necessarily the thread holding c[m, n];
- view: equal bits per thread;
- scopes: every tensor used is defined before, in the same or an enclosing body (a tensor
  defined in a loop or if body is not visible after it); every scalar reads only parameters,
  block indices and enclosing loop variables; names are unique;
- thread groups (`ir.instructions.ThreadGroup`): whole warps inside the enclosing threads; a
  register tensor is used only by the threads that define it (the block's, or one group's:
  a group's body opens no scope of its own, so a tensor a group defines is visible to the
  group's later bodies, as a consumer's accumulator is across the k loop); the bulk copies
  into one shared tensor are issued by one group (or the block), and likewise its waits and
  its releases, so that each barrier's phases are kept by one set of threads; the old value
  of an `atomic_add` in a group is read in the rest of that body only; a register
  budget (`ThreadGroup.registers`) is asked for by whole warpgroups of the block's own body,
  a multiple of 8 from 24 to 256, one per warp, and then by every warp of the block;
- shared memory: the sum of the shared tensors' sizes, each rounded up to 16 bytes (less what
  the tensors that one reuses free, `ir.shared_reuse.shared_footprint`), is at most
  `shared_memory_limit` (default 227 KiB, the sm_90 opt-in maximum per block); a tensor that
  reuses others keeps `ir.shared_reuse`'s rule (a top-level `sync` between their uses);
- the declared grid (`Program.grid`, `check_grid_extents`): three extents over the int
  parameters only, each with an upper bound of at least 1, a constant one within the
  hardware's limits;
- the occupancy asked for (`Program.min_blocks_per_sm`, `check_min_blocks_per_sm`): an int
  whose blocks fit one SM's threads;
- a programmatic launch (`Program.programmatic_launch`): exactly one `WaitPriorGrid` and at
  most one `LaunchDependents`, in the top-level body; without it, neither.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

import numpy as np

from ir import dtypes, instructions
from ir.arguments import MAX_GRID
from ir.dtypes import DataType
from ir.elementwise import (
    BINARY_OPS,
    REDUCTIONS,
    UNARY_OPS,
    broadcast_shapes,
    kind_of,
    result_dtype,
)
from ir.errors import VerificationError
from ir.instructions import Instruction
from ir.placement import broadcast_gather, dot_warp_gather, layout_table
from ir.printer import format_instruction
from ir.program import BLOCK_INDICES, Program
from ir.shared_reuse import check_reuse, shared_footprint
from ir.values import ArrayParam, GlobalTensor, IntParam, RegisterTensor, SharedTensor
from ir.visitor import InstructionVisitor
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.hardware import (
    LARGEST_SHARED_MEMORY_LIMIT,
    MAX_REGISTER_BUDGET,
    MIN_REGISTER_BUDGET,
    WARP_SIZE,
    WARPGROUP_SIZE,
)
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import RegisterLayout
from layout_algebra.shared import SharedLayout
from layout_algebra.symbolic import Expr, var
from layout_algebra.symbolic.divisors import known_divisor

DEFAULT_SHARED_MEMORY_LIMIT = LARGEST_SHARED_MEMORY_LIMIT
"""Bytes of shared memory a block may use on the largest architecture (sm_90: 227 KiB); the
lowering checks the limit of the architecture it compiles for
(`layout_algebra.hardware.shared_memory_limit`)."""

DOT_OPERAND_DTYPES = (dtypes.f16, dtypes.bf16)


def _fail(instruction: Instruction, problem: str) -> VerificationError:
    try:
        line = format_instruction(instruction)
    except Exception:  # noqa: BLE001 - a malformed instruction may not print; name its type
        line = type(instruction).__name__
    return VerificationError(f"{getattr(instruction, 'op', '?')}: {problem}\n    in: {line}")


def _check_register(instruction: Instruction, tensor: object, role: str, threads: int) -> None:
    if not isinstance(tensor, RegisterTensor):
        raise _fail(instruction, f"{role} must be a RegisterTensor, got {tensor!r}")
    if not isinstance(tensor.dtype, DataType):
        raise _fail(instruction, f"{role} {tensor.name} has dtype {tensor.dtype!r}, not a DataType")
    if not isinstance(tensor.layout, RegisterLayout):
        raise _fail(instruction, f"{role} {tensor.name} has layout {tensor.layout!r}")
    if tensor.layout.num_threads != threads:
        raise _fail(
            instruction,
            f"thread count mismatch: {role} {tensor.name} has a layout of "
            f"{tensor.layout.num_threads} threads, the program has {threads}",
        )


def _check_same_dtype(instruction: Instruction, pairs: Sequence[tuple[str, DataType]]) -> None:
    (first_role, first), *rest = pairs
    for role, dtype in rest:
        if dtype != first:
            raise _fail(instruction, f"dtype mismatch: {first_role} is {first}, {role} is {dtype}")


def _check_held(
    instruction: Instruction,
    result: RegisterTensor,
    operand: RegisterTensor,
    role: str,
) -> None:
    """Every thread holds, in `operand`, each element its result elements read."""
    gather = broadcast_gather(result.layout, operand.layout)
    missing = np.argwhere(gather < 0)
    if missing.size:
        t, i = (int(v) for v in missing[0])
        coord = tuple(int(c) for c in layout_table(result.layout)[t, i])
        rank = len(operand.shape)
        read = tuple(
            0 if extent == 1 else c for c, extent in zip(coord[len(coord) - rank :], operand.shape)
        )
        raise _fail(
            instruction,
            f"thread {t} combines {role} {operand.name} element {read} (for result element "
            f"{coord}) that it does not hold",
        )


def _check_elementwise(
    instruction: Instruction, out: RegisterTensor, operands: Sequence[tuple[str, RegisterTensor]]
) -> None:
    shape = broadcast_shapes(*(x.shape for _, x in operands))
    if shape is None:
        shapes = ", ".join(f"{role} {x.shape}" for role, x in operands)
        raise _fail(instruction, f"shape mismatch: {shapes} do not broadcast")
    if out.shape != shape:
        raise _fail(
            instruction, f"shape mismatch: result shape {out.shape}, broadcast shape {shape}"
        )
    for role, operand in operands:
        _check_held(instruction, out, operand, role)


def _check_offsets(instruction: Instruction, offsets: object, rank: int, role: str) -> None:
    if not isinstance(offsets, tuple) or not all(isinstance(o, Expr) for o in offsets):
        raise _fail(instruction, f"{role} must be a tuple of Exprs, got {offsets!r}")
    if len(offsets) != rank:
        raise _fail(
            instruction, f"{role} has {len(offsets)} entries, the memory tensor has rank {rank}"
        )


def _check_tile_fits(
    instruction: Instruction,
    tile: Sequence[int],
    offsets: Sequence[Expr],
    shared: SharedTensor,
) -> None:
    """A tile of shape `tile` (rank <= shared rank) at `offsets` stays in the shared tensor."""
    if len(tile) > len(shared.shape):
        raise _fail(
            instruction,
            f"rank mismatch: the tile {tuple(tile)} has more dimensions than shared tensor "
            f"{shared.name} {shared.shape}",
        )
    padded = (1,) * (len(shared.shape) - len(tile)) + tuple(tile)
    for dim, (extent, offset, limit) in enumerate(zip(padded, offsets, shared.shape)):
        low = offset.value if offset.is_const else 0
        if extent + low > limit:
            raise _fail(
                instruction,
                f"shape mismatch: the tile {padded} at offset {offset!r} overruns shared tensor "
                f"{shared.name} {shared.shape} in dimension {dim}",
            )


def _check_shared(instruction: Instruction, tensor: object, role: str) -> SharedTensor:
    if not isinstance(tensor, SharedTensor) or not isinstance(tensor.layout, SharedLayout):
        raise _fail(
            instruction, f"{role} must be a SharedTensor with a SharedLayout, got {tensor!r}"
        )
    return tensor


def _check_global(instruction: Instruction, tensor: object, role: str) -> GlobalTensor:
    if not isinstance(tensor, GlobalTensor) or not isinstance(tensor.layout, GlobalLayout):
        raise _fail(
            instruction, f"{role} must be a GlobalTensor with a GlobalLayout, got {tensor!r}"
        )
    return tensor


def _check_memory_tile(
    instruction: Instruction, register: RegisterTensor, memory_rank: int, memory: str
) -> None:
    if register.layout.rank > memory_rank:
        raise _fail(
            instruction,
            f"rank mismatch: register tile {register.name} {register.shape} has more dimensions "
            f"than {memory} (rank {memory_rank})",
        )


class _InstructionChecker(InstructionVisitor[None]):
    """The context-free checks of one instruction (see `check_instruction`)."""

    def __init__(self, num_threads: int) -> None:
        self.threads = num_threads

    def visit_register_tensor_init(self, instruction: instructions.RegisterTensorInit) -> None:
        _check_register(instruction, instruction.out, "result", self.threads)
        init = instruction.init
        if isinstance(init, bool) or not isinstance(init, (int, float)):
            raise _fail(instruction, f"init must be an int or a float, got {init!r}")

    def visit_shared_tensor_alloc(self, instruction: instructions.SharedTensorAlloc) -> None:
        out = _check_shared(instruction, instruction.out, "result")
        if not isinstance(out.dtype, DataType):
            raise _fail(instruction, f"dtype {out.dtype!r} is not a DataType")

    def visit_global_view(self, instruction: instructions.GlobalView) -> None:
        out = _check_global(instruction, instruction.out, "result")
        param = instruction.param
        if not isinstance(param, ArrayParam) or out.param is not param:
            raise _fail(instruction, f"{param!r} is not the view's array parameter")
        if not isinstance(out.dtype, DataType):
            raise _fail(instruction, f"dtype {out.dtype!r} is not a DataType")

    def visit_load_global(self, instruction: instructions.LoadGlobal) -> None:
        out = instruction.out
        _check_register(instruction, out, "result", self.threads)
        src = _check_global(instruction, instruction.src, "source")
        _check_same_dtype(instruction, [("source", src.dtype), ("result", out.dtype)])
        _check_offsets(instruction, instruction.offsets, src.rank, "offsets")
        _check_memory_tile(instruction, out, src.rank, f"global tensor {src.name}")

    def visit_prefetch_global(self, instruction: instructions.PrefetchGlobal) -> None:
        src = _check_global(instruction, instruction.src, "source")
        _check_offsets(instruction, instruction.offsets, src.rank, "offsets")
        layout = instruction.layout
        if not isinstance(layout, RegisterLayout):
            raise _fail(instruction, f"layout must be a RegisterLayout, got {layout!r}")
        if layout.num_threads != self.threads:
            raise _fail(
                instruction,
                f"thread count mismatch: the prefetch layout has {layout.num_threads} threads, "
                f"the program has {self.threads}",
            )
        if layout.rank > src.rank:
            raise _fail(
                instruction,
                f"rank mismatch: the prefetch layout {layout.shape} has more dimensions than "
                f"global tensor {src.name} (rank {src.rank})",
            )
        if instruction.level not in instructions.PREFETCH_LEVELS:
            raise _fail(
                instruction,
                f"level={instruction.level!r}; expected one of {instructions.PREFETCH_LEVELS}",
            )

    def visit_store_global(self, instruction: instructions.StoreGlobal) -> None:
        src = instruction.src
        _check_register(instruction, src, "source", self.threads)
        dst = _check_global(instruction, instruction.dst, "destination")
        _check_same_dtype(instruction, [("destination", dst.dtype), ("source", src.dtype)])
        _check_offsets(instruction, instruction.offsets, dst.rank, "offsets")
        _check_memory_tile(instruction, src, dst.rank, f"global tensor {dst.name}")
        combine = instruction.combine
        if combine is None:
            return
        if combine not in instructions.COMBINE_OPS:
            raise _fail(
                instruction,
                f"combine={combine!r}; expected None (a plain store) or one of "
                f"{instructions.COMBINE_OPS}",
            )
        if dst.dtype.name not in instructions.COMBINE_DTYPES:
            raise _fail(
                instruction,
                f"combine={combine!r} into {dst.name} of dtype {dst.dtype}; expected one of "
                f"{', '.join(instructions.COMBINE_DTYPES)} (the types added in memory)",
            )

    def visit_atomic_add(self, instruction: instructions.AtomicAdd) -> None:
        dst = _check_global(instruction, instruction.dst, "destination")
        if dst.dtype != dtypes.i32:
            raise _fail(instruction, f"dtype mismatch: {dst.name} is {dst.dtype}, expected i32")
        _check_offsets(instruction, instruction.offsets, dst.rank, "offsets")
        if not isinstance(instruction.value, Expr):
            raise _fail(instruction, f"value {instruction.value!r} is not an Expr")

    def visit_load_shared(self, instruction: instructions.LoadShared) -> None:
        out, offsets = instruction.out, instruction.offsets
        _check_register(instruction, out, "result", self.threads)
        src = _check_shared(instruction, instruction.src, "source")
        _check_same_dtype(instruction, [("source", src.dtype), ("result", out.dtype)])
        _check_offsets(instruction, offsets, len(src.shape), "offsets")
        _check_tile_fits(instruction, out.shape, offsets, src)

    def visit_store_shared(self, instruction: instructions.StoreShared) -> None:
        src, offsets = instruction.src, instruction.offsets
        _check_register(instruction, src, "source", self.threads)
        dst = _check_shared(instruction, instruction.dst, "destination")
        _check_same_dtype(instruction, [("destination", dst.dtype), ("source", src.dtype)])
        _check_offsets(instruction, offsets, len(dst.shape), "offsets")
        _check_tile_fits(instruction, src.shape, offsets, dst)

    def visit_copy_async(self, instruction: instructions.CopyAsync) -> None:
        _check_copy_async(instruction, self.threads)

    def visit_copy_bulk(self, instruction: instructions.CopyBulk) -> None:
        _check_copy_bulk(instruction)

    def visit_copy_bulk_wait(self, instruction: instructions.CopyBulkWait) -> None:
        _check_bulk_tile(instruction)

    def visit_copy_bulk_release(self, instruction: instructions.CopyBulkRelease) -> None:
        _check_bulk_tile(instruction)

    def visit_copy_async_commit(self, instruction: instructions.CopyAsyncCommit) -> None:
        pass

    def visit_copy_async_wait(self, instruction: instructions.CopyAsyncWait) -> None:
        pending = instruction.pending
        if isinstance(pending, bool) or not isinstance(pending, int) or pending < 0:
            raise _fail(instruction, f"pending must be an int >= 0, got {pending!r}")

    def visit_sync(self, instruction: instructions.Sync) -> None:
        pass

    def visit_unary(self, instruction: instructions.Unary) -> None:
        op, out, x = instruction.op, instruction.out, instruction.x
        _check_register(instruction, x, "operand", self.threads)
        _check_register(instruction, out, "result", self.threads)
        if op not in UNARY_OPS:
            raise _fail(instruction, f"unknown unary op {op!r}")
        if kind_of(x.dtype) not in UNARY_OPS[op].kinds:
            raise _fail(instruction, f"dtype mismatch: {op} does not apply to {x.dtype}")
        _check_same_dtype(instruction, [("operand", x.dtype), ("result", out.dtype)])
        if out.layout != x.layout:
            raise _fail(instruction, "layout mismatch: the result layout differs from x's")

    def visit_binary(self, instruction: instructions.Binary) -> None:
        op, out, lhs, rhs = instruction.op, instruction.out, instruction.lhs, instruction.rhs
        _check_register(instruction, lhs, "lhs", self.threads)
        _check_register(instruction, rhs, "rhs", self.threads)
        _check_register(instruction, out, "result", self.threads)
        if op not in BINARY_OPS:
            raise _fail(instruction, f"unknown binary op {op!r}")
        _check_same_dtype(instruction, [("lhs", lhs.dtype), ("rhs", rhs.dtype)])
        if kind_of(lhs.dtype) not in BINARY_OPS[op].kinds:
            raise _fail(instruction, f"dtype mismatch: {op} does not apply to {lhs.dtype}")
        expected = result_dtype(op, lhs.dtype)
        _check_same_dtype(instruction, [("expected result", expected), ("result", out.dtype)])
        _check_elementwise(instruction, out, [("lhs", lhs), ("rhs", rhs)])

    def visit_where(self, instruction: instructions.Where) -> None:
        out, cond, x, y = instruction.out, instruction.cond, instruction.x, instruction.y
        for role, tensor in (("cond", cond), ("x", x), ("y", y), ("result", out)):
            _check_register(instruction, tensor, role, self.threads)
        if cond.dtype != dtypes.u1:
            raise _fail(instruction, f"dtype mismatch: cond is {cond.dtype}, expected u1")
        _check_same_dtype(instruction, [("x", x.dtype), ("y", y.dtype), ("result", out.dtype)])
        _check_elementwise(instruction, out, [("cond", cond), ("x", x), ("y", y)])

    def visit_fma(self, instruction: instructions.Fma) -> None:
        out, a, b, c = instruction.out, instruction.a, instruction.b, instruction.c
        for role, tensor in (("a", a), ("b", b), ("c", c), ("result", out)):
            _check_register(instruction, tensor, role, self.threads)
        roles = [("a", a.dtype), ("b", b.dtype), ("c", c.dtype), ("result", out.dtype)]
        _check_same_dtype(instruction, roles)
        if a.dtype != dtypes.f32:
            raise _fail(instruction, f"dtype mismatch: fma applies to f32, not {a.dtype}")
        _check_elementwise(instruction, out, [("a", a), ("b", b), ("c", c)])

    def visit_cast(self, instruction: instructions.Cast) -> None:
        out, x = instruction.out, instruction.x
        _check_register(instruction, x, "operand", self.threads)
        _check_register(instruction, out, "result", self.threads)
        if out.shape != x.shape:
            raise _fail(
                instruction, f"shape mismatch: operand shape {x.shape}, result shape {out.shape}"
            )
        if out.layout != x.layout:
            _check_held(instruction, out, x, "operand")
        error = dtypes.scaled_conversion_error(x.dtype, out.dtype, instruction.exponent)
        if error is not None:
            raise _fail(instruction, f"scaled cast: {error}")
        error = biased_cast_error(x.dtype, out.dtype, instruction.exponent, instruction.biased)
        if error is not None:
            raise _fail(instruction, f"biased cast: {error}")
        if instruction.biased:
            _check_biased_locals(instruction, out, x)

    def visit_view(self, instruction: instructions.View) -> None:
        out, x = instruction.out, instruction.x
        _check_register(instruction, x, "operand", self.threads)
        _check_register(instruction, out, "result", self.threads)
        bits_in = x.layout.local_size * x.dtype.nbits
        bits_out = out.layout.local_size * out.dtype.nbits
        if bits_in != bits_out:
            raise _fail(
                instruction,
                f"unequal bits per thread: {x.name} holds {x.layout.local_size} x "
                f"{x.dtype.nbits} = {bits_in} bits per thread, the result "
                f"{out.layout.local_size} x {out.dtype.nbits} = {bits_out}",
            )

    def visit_reduce(self, instruction: instructions.Reduce) -> None:
        _check_reduce(instruction, self.threads)

    def visit_dot(self, instruction: instructions.Dot) -> None:
        _check_dot(instruction, self.threads)

    def visit_assign(self, instruction: instructions.Assign) -> None:
        dst, src = instruction.dst, instruction.src
        _check_register(instruction, dst, "destination", self.threads)
        _check_register(instruction, src, "source", self.threads)
        _check_same_dtype(instruction, [("destination", dst.dtype), ("source", src.dtype)])
        if dst.layout != src.layout:
            raise _fail(
                instruction,
                f"layout mismatch: destination {dst.layout!r}, source {src.layout!r}",
            )

    def visit_for_range(self, instruction: instructions.ForRange) -> None:
        loop_var, start, stop, step = (
            instruction.var,
            instruction.start,
            instruction.stop,
            instruction.step,
        )
        if not all(isinstance(e, Expr) for e in (loop_var, start, stop)):
            raise _fail(instruction, "the loop variable and bounds must be Exprs")
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise _fail(instruction, f"step must be a positive int, got {step!r}")
        unroll = instruction.unroll
        if isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1:
            raise _fail(instruction, f"unroll must be a positive int, got {unroll!r}")
        if not isinstance(instruction.rolled, bool):
            raise _fail(instruction, f"rolled must be True or False, got {instruction.rolled!r}")

    def visit_other(self, instruction: Instruction) -> None:
        """An instruction without checks of its own: its register tensors have the program's
        thread count, its other tensors are tensors, its scalars are expressions."""
        for tensor in (*instruction.results(), *instruction.operands()):
            if isinstance(tensor, RegisterTensor):
                _check_register(instruction, tensor, "tensor", self.threads)
            elif not isinstance(tensor, (SharedTensor, GlobalTensor)):
                raise _fail(instruction, f"{tensor!r} is not a tensor")
        for scalar in instruction.scalars():
            if not isinstance(scalar, Expr):
                raise _fail(instruction, f"scalar {scalar!r} is not an Expr")

    def visit_if(self, instruction: instructions.If) -> None:
        if not isinstance(instruction.cond, Expr):
            raise _fail(instruction, f"the condition must be an Expr, got {instruction.cond!r}")

    def visit_thread_group(self, instruction: instructions.ThreadGroup) -> None:
        start, threads = instruction.start, instruction.threads
        for name, value, low in (("start", start, 0), ("threads", threads, WARP_SIZE)):
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or value < low
                or value % WARP_SIZE
            ):
                raise _fail(
                    instruction,
                    f"{name}={value!r}; expected a multiple of {WARP_SIZE} (whole warps) of at "
                    f"least {low}",
                )
        if start + threads > self.threads:
            raise _fail(
                instruction,
                f"threads {start} .. {start + threads - 1} are not all among the enclosing "
                f"{self.threads} threads",
            )


def check_instruction(instruction: Instruction, num_threads: int) -> None:
    """The checks of one instruction that need no context (types, shapes, layouts, placement).

    Raises VerificationError naming the instruction and the mismatch. Bodies of loops and ifs
    are not entered (`verify` walks them).
    """
    if not isinstance(instruction, Instruction):
        raise VerificationError(f"not an instruction of the tile IR: {instruction!r}")
    _InstructionChecker(num_threads).visit(instruction)


def _check_copy_tile(instruction: instructions.CopyAsync | instructions.CopyBulk) -> None:
    """The checks a tile copy global -> shared shares (`copy_async`, `copy_bulk`)."""
    dst = _check_shared(instruction, instruction.dst, "destination")
    src = _check_global(instruction, instruction.src, "source")
    _check_same_dtype(instruction, [("destination", dst.dtype), ("source", src.dtype)])
    _check_offsets(instruction, instruction.src_offsets, src.rank, "src_offsets")
    _check_offsets(instruction, instruction.dst_offsets, len(dst.shape), "dst_offsets")
    shape = instruction.shape
    if len(shape) != src.rank:
        raise _fail(
            instruction,
            f"rank mismatch: the tile {shape} has rank {len(shape)}, the source {src.rank}",
        )
    _check_tile_fits(instruction, shape, instruction.dst_offsets, dst)


def _check_copy_async(instruction: instructions.CopyAsync, threads: int) -> None:
    _check_copy_tile(instruction)
    shape = instruction.shape
    layout = instruction.layout
    if layout is not None:
        if not isinstance(layout, RegisterLayout):
            raise _fail(instruction, f"layout must be a RegisterLayout or None, got {layout!r}")
        if layout.shape != tuple(shape):
            raise _fail(instruction, f"shape mismatch: layout {layout.shape}, tile {shape}")
        if layout.num_threads != threads:
            raise _fail(
                instruction,
                f"thread count mismatch: the copy layout has {layout.num_threads} threads, the "
                f"program has {threads}",
            )


def _check_tile_shape(instruction: Instruction, shape: object) -> None:
    if (
        not isinstance(shape, tuple)
        or not shape
        or not all(isinstance(e, int) and not isinstance(e, bool) and e >= 1 for e in shape)
    ):
        raise _fail(instruction, f"tile shape {shape!r}; expected a tuple of positive ints")


def _check_bulk_tile(instruction: instructions.CopyBulkWait | instructions.CopyBulkRelease) -> None:
    """The checks of a tile a bulk copy wait or release names."""
    dst = _check_shared(instruction, instruction.dst, "destination")
    _check_offsets(instruction, instruction.offsets, len(dst.shape), "offsets")
    _check_tile_shape(instruction, instruction.shape)
    _check_tile_fits(instruction, instruction.shape, instruction.offsets, dst)


def _check_copy_bulk(instruction: instructions.CopyBulk) -> None:
    _check_tile_shape(instruction, instruction.shape)
    _check_copy_tile(instruction)


def _check_reduce(instruction: instructions.Reduce, threads: int) -> None:
    out, x = instruction.out, instruction.x
    _check_register(instruction, x, "operand", threads)
    _check_register(instruction, out, "result", threads)
    if instruction.reduction not in REDUCTIONS:
        raise _fail(instruction, f"unknown reduction {instruction.reduction!r}")
    dim = instruction.dim
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim < x.layout.rank:
        raise _fail(instruction, f"dim {dim!r} is not a dimension of {x.name} {x.shape}")
    _check_same_dtype(instruction, [("operand", x.dtype), ("result", out.dtype)])
    expected = reduce_layout(x.layout, [dim], keepdims=instruction.keepdim)
    if out.layout != expected:
        raise _fail(
            instruction,
            f"layout mismatch: result layout {out.layout!r}, the reduction of {x.name} over "
            f"dim {dim} has {expected!r}",
        )


def _check_dot(instruction: instructions.Dot, threads: int) -> None:
    out, a, b, c = instruction.out, instruction.a, instruction.b, instruction.c
    for role, tensor in (("a", a), ("b", b), ("c", c), ("result", out)):
        _check_register(instruction, tensor, role, threads)
    if a.dtype not in DOT_OPERAND_DTYPES:
        raise _fail(instruction, f"dtype mismatch: a is {a.dtype}, expected f16 or bf16")
    _check_same_dtype(instruction, [("a", a.dtype), ("b", b.dtype)])
    _check_same_dtype(instruction, [("c", c.dtype), ("f32 accumulator", dtypes.f32)])
    _check_same_dtype(instruction, [("c", c.dtype), ("result", out.dtype)])
    if len(a.shape) != 2 or len(b.shape) != 2 or len(c.shape) != 2:
        raise _fail(instruction, f"rank mismatch: a {a.shape}, b {b.shape}, c {c.shape}")
    (m, k), (k_b, n) = a.shape, b.shape
    if k != k_b or c.shape != (m, n):
        raise _fail(
            instruction,
            f"shape mismatch: a {a.shape} @ b {b.shape} + c {c.shape} (expected (M, K), (K, N), "
            "(M, N))",
        )
    if out.layout != c.layout:
        raise _fail(instruction, "layout mismatch: the result layout differs from c's")
    ga, gb = dot_warp_gather(c.layout, a.layout, b.layout)
    for role, gather, tensor in (("a", ga, a), ("b", gb, b)):
        missing = np.argwhere(gather < 0)
        if missing.size:
            t, i, kk = (int(v) for v in missing[0])
            row, col = (int(v) for v in layout_table(c.layout)[t, i])
            element = (row, kk) if role == "a" else (kk, col)
            warp = t // WARP_SIZE
            first = warp * WARP_SIZE
            last = min(first + WARP_SIZE, threads) - 1
            raise _fail(
                instruction,
                f"warp {warp} (threads {first}..{last}) combines {role} {tensor.name} element "
                f"{element} (for c element {(row, col)}) that none of its threads holds",
            )


SM_THREADS = 2048
"""Threads resident on one SM at most (sm_80 to sm_90): the bound of `check_min_blocks_per_sm`."""


def _check_biased_locals(instruction: Instruction, out: RegisterTensor, x: RegisterTensor) -> None:
    """A bias is a function of the operand's local index (replicas of an element share it):
    each local element of the result must read the same local element of the operand in every
    thread."""
    if out.layout == x.layout:
        return
    gather = broadcast_gather(out.layout, x.layout)
    uneven = np.flatnonzero((gather != gather[:1]).any(axis=0))
    if uneven.size:
        raise _fail(
            instruction,
            f"biased cast: the result's local element {int(uneven[0])} reads different "
            "local elements of the operand in different threads; a bias needs the same "
            "one in every thread",
        )


def biased_cast_error(src: DataType, dst: DataType, exponent: int, biased: object) -> str | None:
    """Why a cast from `src` to `dst` cannot have `biased` as given (a bool; when true, an
    exponent of 0 and `ir.dtypes.magic_bias_error` None), or None."""
    if not isinstance(biased, bool):
        return f"biased must be a bool, got {biased!r}"
    if not biased:
        return None
    if exponent:
        return f"a biased cast takes no exponent, got {exponent}"
    return dtypes.magic_bias_error(src, dst)


def check_min_blocks_per_sm(program: str, blocks: object, num_threads: int) -> None:
    """Check the occupancy program `program` asks for: an int `blocks` >= 1 with `blocks`
    blocks of `num_threads` threads within `SM_THREADS`. Raises VerificationError naming the
    value and the range expected."""
    most = max(1, SM_THREADS // num_threads)
    if isinstance(blocks, bool) or not isinstance(blocks, int) or not 1 <= blocks <= most:
        raise VerificationError(
            f"min_blocks_per_sm of {program} is {blocks!r}; expected an int from 1 to {most} "
            f"({SM_THREADS} threads per SM, {num_threads} per block)"
        )


MAX_WGMMA_GROUPS = 8
"""The most wgmma groups `wgmma.wait_group` can leave pending (its count is 0 to 7)."""


def check_wgmma_chain_window(program: str, links: object) -> None:
    """Check the chain window program `program` declares (`Program.wgmma_chain_window`): an
    int from 1 to `MAX_WGMMA_GROUPS`. Raises VerificationError naming the value and the range
    expected."""
    if isinstance(links, bool) or not isinstance(links, int) or not 1 <= links <= MAX_WGMMA_GROUPS:
        raise VerificationError(
            f"wgmma_chain_window of {program} is {links!r}; expected an int from 1 to "
            f"{MAX_WGMMA_GROUPS} (the links of a chain of warpgroup dots running at once)"
        )


MAX_CLUSTER_BLOCKS = 8
"""The most blocks of a cluster every sm_90 GPU launches (CUDA's portable cluster size)."""


def check_cluster_extents(program: str, cluster: object) -> tuple[int, int, int]:
    """Check the extents of the cluster of program `program` (`Program.cluster`): three ints
    of at least 1 (x, y, z) whose product is at most `MAX_CLUSTER_BLOCKS`; return them. Raises
    VerificationError naming the value and what was expected."""
    if (
        not isinstance(cluster, tuple)
        or len(cluster) != 3
        or not all(isinstance(e, int) and not isinstance(e, bool) and e >= 1 for e in cluster)
    ):
        raise VerificationError(
            f"the cluster of {program} is {cluster!r}; expected three ints of at least 1 (x, y, z)"
        )
    if math.prod(cluster) > MAX_CLUSTER_BLOCKS:
        raise VerificationError(
            f"the cluster {cluster} of {program} has {math.prod(cluster)} blocks; expected at "
            f"most {MAX_CLUSTER_BLOCKS}"
        )
    return cluster


def check_cluster(
    program: str,
    cluster: object,
    grid: Sequence[Expr] | None,
    params: Sequence[object] = (),
) -> None:
    """Check the cluster of program `program` (`Program.cluster`): its extents
    (`check_cluster_extents`) and a declared grid each of whose extents is known to be a
    multiple of the cluster's (`known_divisor`, with each int parameter of `params` declared
    a multiple of m read as m times a variable: a launch of a grid that is not fails). Raises
    VerificationError naming the value and what was expected."""
    extents = check_cluster_extents(program, cluster)
    multiples = {
        p.name: var(f"{p.name}_quotient") * p.multiple_of
        for p in params
        if isinstance(p, IntParam) and p.multiple_of > 1
    }
    if grid is None:
        raise VerificationError(
            f"{program} declares the cluster {extents} but no grid; a cluster needs a declared "
            "grid that is a multiple of it"
        )
    for name, extent, size in zip("xyz", grid, extents):
        divisor = known_divisor(extent.substitute(multiples))
        if size > 1 and (divisor == 0 or divisor % size):
            raise VerificationError(
                f"grid extent {name} = {extent} of {program} is not known to be a multiple of "
                f"the cluster's extent {size} along {name}"
            )


def _check_chain_link(program: Program) -> None:
    """A program with `programmatic_launch` waits for the prior grid exactly once and launches
    its dependents at most once, at its top level; one without it does neither."""
    waits = [i for i in program.walk() if isinstance(i, instructions.WaitPriorGrid)]
    top = [i for i in program.body if isinstance(i, instructions.WaitPriorGrid)]
    if program.programmatic_launch is not True and program.programmatic_launch is not False:
        raise VerificationError(
            f"programmatic_launch of {program.name} is {program.programmatic_launch!r}; "
            "expected True or False"
        )
    if not program.programmatic_launch and waits:
        raise VerificationError(
            f"{program.name} waits for the prior grid but does not declare programmatic_launch"
        )
    if program.programmatic_launch and (len(waits) != 1 or len(top) != 1):
        raise VerificationError(
            f"{program.name} declares programmatic_launch and waits for the prior grid "
            f"{len(waits)} times ({len(top)} at its top level); expected once, at its top level"
        )
    signals = [i for i in program.walk() if isinstance(i, instructions.LaunchDependents)]
    top_signals = [i for i in program.body if isinstance(i, instructions.LaunchDependents)]
    if signals and not program.programmatic_launch:
        raise VerificationError(
            f"{program.name} launches dependents but does not declare programmatic_launch"
        )
    if len(signals) > 1 or len(top_signals) != len(signals):
        raise VerificationError(
            f"{program.name} launches dependents {len(signals)} times ({len(top_signals)} at "
            "its top level); expected at most once, at its top level"
        )


def check_grid_extents(program: str, extents: Sequence[object], int_names: Collection[str]) -> None:
    """Check a declared grid of program `program`: three `Expr` extents (x, y, z) reading only
    the int parameters `int_names`; a constant one within [1, `MAX_GRID`], an expression one
    with an upper bound (`Expr.bounds`) of at least 1. Raises VerificationError naming the
    extent and what is wrong with it."""
    if len(extents) != 3:
        raise VerificationError(
            f"the grid of {program} has {len(extents)} extents {extents!r}; expected 3 (x, y, z)"
        )
    for axis, (name, extent) in enumerate(zip("xyz", extents)):
        if not isinstance(extent, Expr):
            raise VerificationError(
                f"grid extent {name} of {program} is {extent!r}; expected an Expr over the int "
                "parameters"
            )
        unknown = extent.free_vars() - set(int_names)
        if unknown:
            raise VerificationError(
                f"grid extent {name} = {extent!r} of {program} reads {sorted(unknown)}, which "
                "are not its int parameters; a grid extent is an expression over the int "
                "parameters (not block indices or loop variables)"
            )
        if extent.is_const and not 1 <= extent.value <= MAX_GRID[axis]:
            raise VerificationError(
                f"grid extent {name} = {extent.value} of {program} is not a block count; "
                f"expected 1 <= {name} <= {MAX_GRID[axis]}"
            )
        high = extent.bounds()[1]
        if high is not None and high < 1:
            raise VerificationError(
                f"grid extent {name} = {extent!r} of {program} is at most {high}: it is never a "
                "positive block count"
            )


class _Scope:
    """What is visible at a point of the program: tensors and scalar variable names."""

    def __init__(self, tensors: set[int], names: set[str]) -> None:
        self.tensors = tensors
        self.names = names

    def child(self) -> _Scope:
        return _Scope(set(self.tensors), set(self.names))


_BULK_ROLES = {
    instructions.CopyBulk: "bulk copies",
    instructions.CopyBulkWait: "bulk copy waits",
    instructions.CopyBulkRelease: "bulk copy releases",
}
"""The bulk-copy instructions whose uses of one shared tensor must all be in one thread group."""


def _threads(group: tuple[int, int]) -> str:
    return f"{group[0]} .. {group[0] + group[1] - 1}"


class _Walker:
    """Walks a program once: per-instruction checks, scopes, names, shared memory."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.names: set[str] = set()
        self.params = {id(p) for p in program.params if isinstance(p, ArrayParam)}
        # Register tensors by id: the threads (first block thread, count) that hold them.
        self.owners: dict[int, tuple[int, int]] = {}
        # (shared tensor, role) -> the thread group (first block thread, threads) of its first use.
        self.bulk_groups: dict[tuple[str, str], tuple[int, int]] = {}
        # Register budgets (`ThreadGroup.registers`) by the block threads they are asked for.
        self.budgets: dict[tuple[int, int], int] = {}
        # Thread groups around the instruction being walked.
        self.group_depth = 0

    def body(
        self, body: Sequence[Instruction], scope: _Scope, group: tuple[int, int] | None = None
    ) -> None:
        """Walk `body`, run by the threads ``group`` = (first block thread, count) (the
        block's by default)."""
        group = (0, self.program.num_threads) if group is None else group
        for instruction in body:
            self.instruction(instruction, scope, group)

    def instruction(self, instruction: Instruction, scope: _Scope, group: tuple[int, int]) -> None:
        check_instruction(instruction, group[1])
        for operand in instruction.operands():
            if id(operand) not in scope.tensors:
                raise _fail(
                    instruction,
                    f"{operand.name} is used outside the scope that defines it (or before it)",
                )
            owner = self.owners.get(id(operand), group)
            if owner != group:
                raise _fail(
                    instruction,
                    f"{operand.name} is held by threads {_threads(owner)} and used by threads "
                    f"{_threads(group)}: a register tensor stays with the threads (the block's "
                    "or a thread group's) that define it",
                )
        for scalar in instruction.scalars():
            unknown = scalar.free_vars() - scope.names
            if unknown:
                raise _fail(
                    instruction,
                    f"scalar {scalar!r} reads {sorted(unknown)}, which are not parameters, block "
                    "indices, enclosing loop variables or earlier atomic_add results",
                )
        if (
            isinstance(instruction, instructions.GlobalView)
            and id(instruction.param) not in self.params
        ):
            raise _fail(instruction, f"{instruction.param.name} is not a parameter of the program")
        role = _BULK_ROLES.get(type(instruction))
        if role is not None:
            self.bulk_group(instruction, role, group)
        for out in instruction.results():
            self.define(instruction, out.name)
            scope.tensors.add(id(out))
            if isinstance(out, RegisterTensor):
                self.owners[id(out)] = group
        if isinstance(instruction, instructions.ForRange):
            self.define(instruction, instruction.var.name)
        if isinstance(instruction, instructions.AtomicAdd):
            # Its old value is a scalar for the rest of the enclosing body.
            self.define(instruction, instruction.var.name)
            scope.names.add(instruction.var.name)
        if isinstance(instruction, instructions.ThreadGroup):
            # No scope of its own: what the group defines stays visible to its later bodies.
            inner_group = (group[0] + instruction.start, instruction.threads)
            if instruction.registers is not None:
                self.budget(instruction, inner_group, group)
            self.group_depth += 1
            names = set(scope.names)
            self.body(instruction.body, scope, inner_group)
            # An atomic_add's old value in a group is the group's, for the rest of this body.
            scope.names &= names
            self.group_depth -= 1
            return
        for body in instruction.bodies():
            inner = scope.child()
            if isinstance(instruction, instructions.ForRange):
                inner.names.add(instruction.var.name)
            self.body(body, inner, group)

    def bulk_group(self, instruction: Instruction, role: str, group: tuple[int, int]) -> None:
        """The bulk copies (or waits, or releases) of one shared tensor in one thread group."""
        tensor = instruction.dst  # type: ignore[attr-defined]
        first = self.bulk_groups.setdefault((tensor.name, role), group)
        if first != group:
            raise _fail(
                instruction,
                f"the {role} of {tensor.name} are in two thread groups: threads "
                f"{_threads(first)} and {_threads(group)}; "
                "each barrier's phases are kept by the threads of one group",
            )

    def budget(
        self,
        instruction: instructions.ThreadGroup,
        threads: tuple[int, int],
        enclosing: tuple[int, int],
    ) -> None:
        """A group's register budget: whole warpgroups of the block's own body, a multiple of
        8 from 24 to 256, the same for every group of those threads and disjoint from the
        others' (`coverage` checks that they cover the block)."""
        registers = instruction.registers
        if self.group_depth:
            raise _fail(
                instruction,
                f"registers={registers!r} in a group nested in threads {_threads(enclosing)}; "
                "a register budget is asked for by a group of the block's own body",
            )
        if threads[0] % WARPGROUP_SIZE or threads[1] % WARPGROUP_SIZE:
            raise _fail(
                instruction,
                f"registers={registers!r} for threads {_threads(threads)}; a register budget "
                f"is asked for by whole warpgroups (start and threads multiples of "
                f"{WARPGROUP_SIZE})",
            )
        if (
            isinstance(registers, bool)
            or not isinstance(registers, int)
            or not MIN_REGISTER_BUDGET <= registers <= MAX_REGISTER_BUDGET
            or registers % 8
        ):
            raise _fail(
                instruction,
                f"registers={registers!r}; expected a multiple of 8 from {MIN_REGISTER_BUDGET} "
                f"to {MAX_REGISTER_BUDGET}",
            )
        for other, budget in self.budgets.items():
            overlap = other[0] < threads[0] + threads[1] and threads[0] < other[0] + other[1]
            if other == threads and budget != registers:
                raise _fail(
                    instruction,
                    f"registers={registers} for threads {_threads(threads)}, which an earlier "
                    f"group gave registers={budget}; a warp has one budget",
                )
            if overlap and other != threads:
                raise _fail(
                    instruction,
                    f"registers={registers} for threads {_threads(threads)}, which overlap the "
                    f"budget of threads {_threads(other)}; a warp has one budget",
                )
        self.budgets[threads] = registers

    def coverage(self) -> None:
        """When any group asks for a register budget, every warp of the block is in one."""
        if not self.budgets:
            return
        covered = sum(threads for _, threads in self.budgets)
        if covered != self.program.num_threads:
            ranges = ", ".join(_threads(t) for t in sorted(self.budgets))
            raise VerificationError(
                f"{self.program.name}: register budgets for threads {ranges} only; when a "
                f"group asks for one, every warp of the block's {self.program.num_threads} "
                "threads must be in a group that asks"
            )

    def define(self, instruction: Instruction, name: str) -> None:
        if name in self.names:
            raise _fail(instruction, f"the name {name} is defined twice")
        self.names.add(name)


def verify(program: Program, shared_memory_limit: int = DEFAULT_SHARED_MEMORY_LIMIT) -> Program:
    """Check `program` (see the module docstring); return it unchanged when well formed.

    Raises VerificationError naming the first ill-formed instruction and the mismatch.
    """
    if not isinstance(program, Program):
        raise VerificationError(f"verify expects a Program, got {program!r}")
    walker = _Walker(program)
    names: set[str] = {index.name for index in BLOCK_INDICES}
    for param in program.params:
        if not isinstance(param, (IntParam, ArrayParam)):
            raise VerificationError(f"parameter {param!r} is not an IntParam or ArrayParam")
        if param.name in names:
            raise VerificationError(f"parameter name {param.name} is used twice")
        if isinstance(param, IntParam) and param.value is not None and not param.constant:
            raise VerificationError(
                f"int parameter {param.name} has the value {param.value} of a specialised "
                "constant but is not declared constant"
            )
        names.add(param.name)
    if program.grid is not None:
        if not isinstance(program.grid, tuple):
            raise VerificationError(
                f"the grid of {program.name} is {program.grid!r}; expected a tuple of 3 Exprs"
            )
        int_params = {p.name for p in program.params if isinstance(p, IntParam)}
        check_grid_extents(program.name, program.grid, int_params)
    if program.min_blocks_per_sm is not None:
        check_min_blocks_per_sm(program.name, program.min_blocks_per_sm, program.num_threads)
    if program.cluster is not None:
        check_cluster(program.name, program.cluster, program.grid, program.params)
    walker.names |= names
    walker.body(program.body, _Scope(set(), names))
    walker.coverage()
    _check_chain_link(program)  # after the walk: every instruction is one
    if program.wgmma_chain_window != 0:
        check_wgmma_chain_window(program.name, program.wgmma_chain_window)
    if program.hoist_invariants is not True and program.hoist_invariants is not False:
        raise VerificationError(
            f"hoist_invariants of {program.name} is {program.hoist_invariants!r}; expected "
            "True or False"
        )
    check_reuse(program)
    footprint = shared_footprint(program)
    if footprint > shared_memory_limit:
        raise VerificationError(
            f"shared memory past the limit: the program's shared tensors take "
            f"{footprint} bytes, the limit is {shared_memory_limit}"
        )
    return program

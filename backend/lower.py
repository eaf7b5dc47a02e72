"""Lowering of a tile program to one CUDA C++ kernel, with every address it prints recorded.

`lower(program)` verifies the program and returns a `LoweredKernel`: the source of one
``extern "C" __global__`` function named after the program, with ``__launch_bounds__`` of its
thread count, its launch signature (`backend.kernel` parameters, in the program's order), the
dynamic shared memory it needs, and one `Access` per address expression printed into the source.

How each part of the IR becomes C++:

- Register tensors are per-thread arrays of codes (`cuda_codegen.storage_type`), indexed only by
  compile-time constants: every loop over local indices is unrolled here, in Python.
- Scalars (parameters, block indices, loop variables) are C ints; an expression whose value or
  intermediate values may leave the int range (by the bounds of its variables) is printed over
  64-bit copies of the variables (``la_w_<name>``).
- Addresses come from the layouts: element i of thread t of a tile at `origin` of a memory
  tensor lives at ``memory.offset(origin + register.map(t, i))``, built with t the symbolic
  thread index, simplified (`layout_algebra.symbolic.simplify`) and printed with `to_c`.
- Vector accesses of up to 16 bytes move `w` consecutive registers at once when the access map
  allows it: for global memory `AccessMap.vector_width` (which counts symbolic strides only with
  their known divisibility) narrowed until the tile origin's offset is a known multiple of w
  (loop variables counted as ``start + step * q``, and an int parameter declared a multiple of
  m, ``ProgramBuilder.int_param(..., multiple_of=m)``, as ``m * q``: the launch check refuses
  any other argument, and every `Access` assumes it); for shared memory the offsets of every value
  the origin can take (by enumeration), or the same analysis for unswizzled strided layouts.
  Global base addresses are 16-byte aligned by the launch check (`ArrayParam.alignment`), and
  every shared tensor starts at a multiple of 16 bytes of the one dynamic allocation.
- Out-of-bounds masking (global memory): a vector is moved whole when all its elements are
  inside the tensor's shape, else element by element, each element guarded by its own bounds
  check; out-of-bounds loads give 0 and out-of-bounds stores are skipped.
- Sub-byte elements that do not fill whole bytes move element by element: loads read the one or
  two bytes holding the element, stores change only its own bits with atomic AND/OR on the
  containing 32-bit words (`la_store_bits`), so threads sharing a byte keep their meaning.
- Replication: every replica loads and computes; only the *primary* replica stores (or copies),
  the one whose replication digits of the thread index are all 0, which is the element's owner
  with the smallest thread index.
- `copy_async` moves 4, 8 or 16-byte vectors with ``cp.async`` (``.cg`` for 16 bytes, ``.ca``
  otherwise), grouped by ``cp.async.commit_group`` and ``cp.async.wait_group``. A vector that
  runs past the end of the source along one dimension reads its first elements and zero-fills
  the rest (``cp.async``'s src-size); anything else (other partial vectors, narrower accesses)
  is copied synchronously, which is allowed because a copy's data may land any time before the
  wait that covers it. Without a layout the copy is spread by `default_copy_layout`.
- `reduce` combines in exactly the interpreter's order (`ir.instructions.Reduce`): each thread's
  own elements in increasing local index, then each reduced spatial mode in digit order, with
  warp shuffles when every group of threads lies in one warp, else through a shared-memory
  scratch area placed after the program's shared tensors.
- `dot` is a SIMT dot: ``acc = c; acc = acc + a[m, k] * b[k, n]`` for k in order, each step
  rounded in float32 (``la_fadd(acc, la_fmul(a, b))``), as the interpreter does. When a thread
  needs operand elements that only other threads of its warp hold (the IR's dot is
  warp-collective), the operands are first staged through a shared-memory scratch copy. Given an
  architecture of sm_80 or newer, a dot whose layouts divide by the ``mma.m16n8k16`` fragments
  runs on tensor cores instead (`backend.tensor_core.plan_mma`): the tensor core adds the 16
  products of a k step in its own order, so such a dot equals the interpreter's within rounding,
  not bit for bit. Likewise a `load_shared` of 16-bit elements that ``ldmatrix`` can do uses it
  (`plan_ldmatrix`; a load, so exact).
- Elementwise operations, `where`, `cast` and `view` work on each thread's codes
  (`cuda_codegen`, `conversions`). With an architecture of sm_80 or newer, a cast of u2, i2,
  u4, i4, u8, i8 or f4e2m1 to f16 or bf16 converts whole 32-bit words of codes with the bit
  tricks of `backend.fast_conversions` (exact, like the generic path). When an operand
  element's register depends on the thread (e.g. a fully replicated operand), the index is
  computed and selected among the candidates.

`Access` records let `proofs.lowering_validation` prove, for every thread and every value of the
variables, that each printed expression equals the specification of its layouts, that vector
addresses are aligned, that each printed mask holds exactly when its elements are in bounds and
that each zero-fill count is the number of its elements in bounds.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from backend.conversions import (
    CONVERSION_SOURCE,
    convert_expression,
    decode_expression,
    encode_expression,
    value_type,
)
from backend.cuda_codegen import (
    ASYNC_COPY_SOURCE,
    OPERATION_SOURCE,
    VECTOR_TYPES,
    CodeWriter,
    binary_value,
    pack_expression,
    register_declaration,
    unary_value,
    unpack_expressions,
    wrap_expression,
)
from backend.errors import CompilationError
from backend.fast_conversions import FAST_CONVERSION_PRIMITIVES, FAST_CONVERSIONS, fast_conversion
from backend.kernel import ArrayParam as KernelArrayParam
from backend.kernel import IntParam as KernelIntParam
from backend.tensor_core import (
    MAX_OFFSET_POINTS,
    MINIMUM_MMA_ARCH,
    TENSOR_CORE_SOURCE,
    LdmatrixPlan,
    MmaPlan,
    arch_number,
    emit_ldmatrix,
    emit_mma,
    plan_ldmatrix,
    plan_mma,
)
from ir import dtypes
from ir.dtypes import DataType
from ir.elementwise import BINARY_OPS
from ir.instructions import (
    Assign,
    Binary,
    Cast,
    CopyAsync,
    CopyAsyncCommit,
    CopyAsyncWait,
    Dot,
    ForRange,
    GlobalView,
    If,
    Instruction,
    LoadGlobal,
    LoadShared,
    Reduce,
    RegisterTensorInit,
    SharedTensorAlloc,
    StoreGlobal,
    StoreShared,
    Sync,
    Unary,
    View,
    Where,
)
from ir.placement import broadcast_gather, dot_gather, dot_is_thread_local, reduce_plan
from ir.printer import format_instruction
from ir.program import BLOCK_INDICES, Program
from ir.values import ArrayParam, GlobalTensor, IntParam, RegisterTensor
from ir.verifier import SHARED_ALIGNMENT, verify
from layout_algebra.access import compose
from layout_algebra.auto import auto_local_spatial
from layout_algebra.errors import LayoutError
from layout_algebra.function_layout import FunctionLayout
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import RegisterLayout, local, register_layout, replicate
from layout_algebra.shared import SharedLayout, shared_row_major, shared_strides
from layout_algebra.symbolic import (
    Expr,
    as_expr,
    evaluate,
    known_divisor,
    logical_and,
    maximum,
    minimum,
    select,
    simplify,
    var,
)

THREAD_NAME = "la_thread"
"""The C variable (and symbolic variable) of the thread index, threadIdx.x."""

WIDE_PREFIX = "la_w_"
"""Prefix of the 64-bit copies of the scalar variables."""

RESERVED_PREFIX = "la_"
"""Names the generated code uses for itself; parameters and programs may not start with it."""

NVRTC_OPTIONS = ("--fmad=false", "--diag-suppress=177")
"""Options every lowered kernel is compiled with: no contraction of a * b + c into an FMA, and
no warning for the helpers and variables a kernel does not use."""

WARP_SIZE = 32
SHARED_MEMORY_LIMIT = 227 * 1024
"""Dynamic shared memory a block may use (sm_90; sm_80 allows 163 KiB)."""
REDUCE_SCRATCH_WORDS = 2048
"""Target size, in 4-byte words, of the scratch area of a cross-warp reduction."""
ENUMERATION_LIMIT = 256
"""Largest number of origin values enumerated to decide a shared-memory vector width."""

_INT_MIN = -(2**31)
_INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class Access:
    """One address expression printed into a kernel, with what it must mean.

    The instruction `instruction` moves `width` consecutive registers ``local_index ..
    local_index + width - 1`` of thread `thread` (the symbolic thread index, 0 <= t <
    `register.num_threads`) of a tile placed by `register` (padded with leading size-1
    dimensions to the memory's rank) at `origin` of a memory tensor addressed by `memory` (a
    `SharedLayout` or `GlobalLayout`), whose elements have `element_bits` bits. A dot staged
    through shared memory records its scratch copies as row-major shared tensors of float32:
    the writes with the operand's layout, the reads with a `FunctionLayout` (register i of
    thread t reads row ``c.map(t, i)[0]`` of a, or column ``c.map(t, i)[1]`` of b, at one k).
    The source holds `expr`, an address in units of `unit_bits` bits from the tensor's base: a
    typed index (`unit_bits` = `element_bits`), a byte offset (8) or a bit offset (1).

    Claims (checked by `proofs.lowering_validation`), for every thread, every value of the
    variables within their bounds and under `assumptions` (facts that hold where the access
    sits: loop ranges and strides, if conditions, and ``p % m == 0`` for each int parameter p
    declared a multiple of m > 1):

    - ``expr * unit_bits == (memory.offset(origin + register.map(t, local_index + j)) - j) *
      element_bits`` for every j < width: the registers sit at consecutive elements from expr;
    - when width > 1, ``expr * unit_bits`` is a multiple of ``width * element_bits`` (the vector
      is aligned to its size);
    - `mask`, when not None (global memory), is true exactly when every element
      ``origin + register.map(t, local_index + j)`` lies inside the tensor's shape;
    - `count`, when not None (a ``cp.async`` that zero-fills), is the number of leading
      registers the access reads from memory: register local_index + j lies inside the tensor's
      shape exactly when j < count.
    """

    instruction: Instruction
    memory: SharedLayout | GlobalLayout
    register: RegisterLayout | FunctionLayout
    origin: tuple[Expr, ...]
    local_index: int
    width: int
    element_bits: int
    expr: Expr
    unit_bits: int
    mask: Expr | None
    thread: Expr
    assumptions: tuple[Expr, ...]
    count: Expr | None = None


@dataclass(frozen=True)
class LoweredKernel:
    """The result of `lower`: what `backend.kernel.build_kernel` needs, and the accesses.

    Fields: `source` (CUDA C++), `entry` (the kernel's name: the program's), `params` (the
    launch signature, `backend.kernel.ArrayParam` / `IntParam` in the program's parameter
    order), `block_threads`, `shared_bytes` (dynamic shared memory per block), `options`
    (NVRTC options the source is meant for), `accesses` (every printed address, in source
    order) and `plans` (the tensor-core plans used: `backend.tensor_core.MmaPlan` for a dot on
    ``mma.sync``, `LdmatrixPlan` for a load by ``ldmatrix``; their `claims()` are the proof
    obligations of what they print).
    """

    source: str
    entry: str
    params: tuple[KernelArrayParam | KernelIntParam, ...]
    block_threads: int
    shared_bytes: int
    options: tuple[str, ...]
    accesses: tuple[Access, ...]
    plans: tuple[MmaPlan | LdmatrixPlan, ...] = ()


# ---------------------------------------------------------------------------------- layouts


def pad_layout(layout: RegisterLayout, rank: int) -> RegisterLayout:
    """`layout` with leading size-1 dimensions up to `rank` (the same function of (t, i))."""
    extra = rank - layout.rank
    if extra <= 0:
        return layout
    return register_layout(
        (1,) * extra + layout.shape, layout.mode_shape, layout.spatial_modes, layout.local_modes
    )


def default_copy_layout(
    shape: Sequence[int], element_bits: int, num_threads: int
) -> RegisterLayout:
    """The layout a `copy_async` without one is spread by.

    Each thread copies runs of v consecutive elements of the last dimension, v the widest count
    of at most 16 bytes that divides the last extent (1 for elements that do not divide 128
    bits); the runs are dealt by ``auto_local_spatial(num_threads, shape with the last extent
    divided by v)``, whose leftover threads replicate (replicas do not copy twice).
    """
    shape = tuple(shape)
    if not shape:
        return replicate(num_threads)
    run = 128 // element_bits if 128 % element_bits == 0 else 1
    while run > 1 and shape[-1] % run:
        run //= 2
    grid = shape[:-1] + (shape[-1] // run,)
    return auto_local_spatial(num_threads, grid) * local(*((1,) * (len(shape) - 1)), run)


def local_index_expression(layout: RegisterLayout, coords: Sequence[Expr | int]) -> Expr:
    """The local index at which `layout` holds the element at `coords` (an `Expr`).

    Each local mode's digit is read from its dimension's coordinate, ``coord // stride % size``
    (stride: the product of the later modes of that dimension); the index is the mixed-radix
    number of the digits, most significant mode first. Requires the coordinate to be held by
    the thread asking (the verifier's placement check).
    """
    dims = layout.mode_dims
    index: Expr = as_expr(0)
    for entry in layout.local_modes:
        size = layout.mode_shape[entry]
        stride = math.prod(
            layout.mode_shape[k] for k in range(entry + 1, len(dims)) if dims[k] == dims[entry]
        )
        index = index * size + as_expr(coords[dims[entry]]) // stride % size
    return index


def primary_condition(layout: RegisterLayout, thread: Expr) -> Expr | None:
    """The condition on `thread` of being the primary replica (all replication digits 0), or
    None when the layout does not replicate."""
    if layout.replication == 1:
        return None
    condition: Expr = as_expr(1)
    divisor = 1
    for entry, size in zip(reversed(layout.spatial_modes), reversed(layout.spatial_sizes)):
        if entry < 0:
            condition = logical_and(condition, (thread // divisor % size).eq(0))
        divisor *= size
    return simplify(condition)


def _nodes(expr: Expr) -> list[Expr]:
    seen: dict[int, Expr] = {}
    stack = [expr]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            stack.extend(node.args)
    return list(seen.values())


def is_wide(expr: Expr) -> bool:
    """Whether `expr` or any of its sub-expressions may leave the C int range (by bounds)."""
    for node in _nodes(expr):
        low, high = node.bounds()
        if low is None or high is None or low < _INT_MIN or high > _INT_MAX:
            return True
    return False


def _runs_ok(offsets: np.ndarray, width: int) -> bool:
    """Every run of `width` registers (starting at a multiple of width) sits at consecutive
    offsets starting at a multiple of width."""
    threads, size = offsets.shape
    runs = offsets.reshape(threads, size // width, width)
    steps = np.arange(width, dtype=np.int64)
    if not np.array_equal(runs - runs[..., :1], np.broadcast_to(steps, runs.shape)):
        return False
    return not np.any(runs[..., 0] % width)


def _vector_widths(element_bits: int, local_size: int) -> list[int]:
    """Candidate vector widths, widest first: whole-byte power-of-two accesses of at most 16
    bytes whose width divides `local_size`."""
    widths = []
    for vector_bytes in (16, 8, 4, 2, 1):
        bits = vector_bytes * 8
        if bits % element_bits == 0:
            width = bits // element_bits
            if width > 1 and local_size % width == 0:
                widths.append(width)
    return widths


def _narrow(width: int, divisor: int, element_bits: int) -> int:
    """The widest of width, width/2, ... whose vector of whole bytes starts aligned at an
    offset known to be a multiple of `divisor` (0: any multiple); 1 when none does."""
    while width > 1:
        if (divisor % width == 0) and (width * element_bits) % 8 == 0:
            return width
        width //= 2
    return 1


# ----------------------------------------------------------------------------------- tiles


@dataclass(frozen=True)
class _Tile:
    """A register tile placed at `origin` of a memory tensor (`memory`, `element_bits`)."""

    memory: SharedLayout | GlobalLayout
    register: RegisterLayout
    origin: tuple[Expr, ...]
    element_bits: int

    def coords(self, thread: Expr, i: int) -> list[Expr]:
        """The memory coordinates of register i of `thread`."""
        return [o + c for o, c in zip(self.origin, self.register.map(thread, i))]

    def offset(self, thread: Expr, i: int) -> Expr:
        """The element offset of register i of `thread`, simplified."""
        return simplify(as_expr(self.memory.offset(self.coords(thread, i))))

    def inside(self, thread: Expr, first: int, width: int) -> Expr:
        """The condition that registers first .. first + width - 1 are all inside the shape.

        Coordinates split as ``map(t, i) = map(t, 0) + map(0, i)``, so the run's box per
        dimension is the thread's part plus the least and greatest register part.
        """
        base = self.register.map(thread, 0)
        parts = [self.register.map(0, first + j) for j in range(width)]
        condition: Expr = as_expr(1)
        for dim, (origin, start, extent) in enumerate(zip(self.origin, base, self.memory.shape)):
            low = min(part[dim] for part in parts)
            high = max(part[dim] for part in parts)
            condition = logical_and(condition, origin + start + low >= 0)
            condition = logical_and(condition, origin + start + high < extent)
        return simplify(condition)

    def prefix(self, thread: Expr, first: int, width: int) -> tuple[Expr, Expr] | None:
        """(condition, count) when registers first .. first + width - 1 run along one dimension
        with consecutive coordinates: under `condition` (the run does not start below 0), the
        registers inside the shape are exactly the first `count`. None for any other run."""
        parts = [self.register.map(0, first + j) for j in range(width)]
        varying = [d for d in range(self.register.rank) if parts[0][d] != parts[-1][d]]
        if len(varying) != 1:
            return None
        (dim,) = varying
        if [part[dim] for part in parts] != list(range(parts[0][dim], parts[0][dim] + width)):
            return None
        base = self.register.map(thread, 0)
        starts = [o + b + p for o, b, p in zip(self.origin, base, parts[0])]
        others: Expr = as_expr(1)
        for d, (start, extent) in enumerate(zip(starts, self.memory.shape)):
            if d != dim:
                others = logical_and(others, logical_and(start >= 0, start < extent))
        inside = maximum(0, minimum(width, self.memory.shape[dim] - starts[dim]))
        count = select(others, inside, 0)
        return simplify(starts[dim] >= 0), simplify(count)


# -------------------------------------------------------------------------------- lowerer


class _Lowerer:
    """Emits one program's kernel; see the module docstring."""

    def __init__(self, program: Program, arch: str | None) -> None:
        self.program = program
        self.tensor_cores = arch is not None and arch_number(arch) >= MINIMUM_MMA_ARCH
        self.arch = arch
        self.plans: list[MmaPlan | LdmatrixPlan] = []
        self.threads = program.num_threads
        self.thread = var(THREAD_NAME, 0, self.threads - 1)
        self.out = CodeWriter()
        self.accesses: list[Access] = []
        self.facts: list[Expr] = [
            (p.var % p.multiple_of).eq(0)
            for p in program.params
            if isinstance(p, IntParam) and p.multiple_of > 1
        ]
        self.multiples = {
            p.name: p.multiple_of * _quotient(p)
            for p in program.params
            if isinstance(p, IntParam) and p.multiple_of > 1
        }
        self.loops: dict[str, tuple[Expr, Expr, int, Expr]] = {}
        self.current: Instruction | None = None
        self.temporaries = 0
        self.shared_base: dict[str, int] = {}
        self.user_shared_bytes = self._allocate_shared()
        self.scratch_bytes = 0
        self.handlers: dict[type, Callable[[object], None]] = {
            RegisterTensorInit: self.register_tensor,
            SharedTensorAlloc: self.shared_tensor,
            GlobalView: self.global_view,
            LoadGlobal: self.load_global,
            StoreGlobal: self.store_global,
            LoadShared: self.load_shared,
            StoreShared: self.store_shared,
            CopyAsync: self.copy_async,
            CopyAsyncCommit: self.copy_async_commit,
            CopyAsyncWait: self.copy_async_wait,
            Sync: self.sync,
            Unary: self.unary,
            Binary: self.binary,
            Where: self.where,
            Cast: self.cast,
            View: self.view,
            Reduce: self.reduce,
            Dot: self.dot,
            Assign: self.assign,
            ForRange: self.for_range,
            If: self.if_,
        }

    # -------------------------------------------------------------------------- helpers

    def fail(self, problem: str) -> CompilationError:
        where = "" if self.current is None else f" in: {format_instruction(self.current)}"
        return CompilationError(f"cannot lower {self.program.name}: {problem}{where}")

    def temporary(self, stem: str) -> str:
        self.temporaries += 1
        return f"la_{stem}{self.temporaries}"

    def c(self, expr: Expr | int) -> str:
        """C text of a scalar expression, over 64-bit variables when it may leave int range."""
        expr = as_expr(expr)
        if is_wide(expr):
            expr = expr.substitute(
                {
                    node.name: var(WIDE_PREFIX + node.name, node.lo, node.hi)
                    for node in expr.variables()
                }
            )
        return expr.to_c()

    def _allocate_shared(self) -> int:
        """Give every shared tensor its byte offset in the dynamic allocation; the total."""
        total = 0
        for instruction in self.program.walk():
            if isinstance(instruction, SharedTensorAlloc):
                tensor = instruction.out
                self.shared_base[tensor.name] = total
                size = dtypes.packed_nbytes(tensor.layout.size, tensor.dtype)
                total += -(-size // SHARED_ALIGNMENT) * SHARED_ALIGNMENT
        return total

    def declare(self, tensor: RegisterTensor) -> None:
        self.out.line(register_declaration(tensor.name, tensor.dtype, tensor.layout.local_size))

    def record(
        self,
        tile: _Tile,
        first: int,
        width: int,
        expr: Expr,
        unit_bits: int,
        mask: Expr | None,
        count: Expr | None = None,
    ) -> None:
        assert self.current is not None
        self.accesses.append(
            Access(
                instruction=self.current,
                memory=tile.memory,
                register=tile.register,
                origin=tile.origin,
                local_index=first,
                width=width,
                element_bits=tile.element_bits,
                expr=expr,
                unit_bits=unit_bits,
                mask=mask,
                thread=self.thread,
                assumptions=tuple(self.facts),
                count=count,
            )
        )

    def read(
        self,
        tensor: RegisterTensor,
        table: np.ndarray,
        coords: Callable[[], Sequence[Expr | int]],
    ) -> str:
        """The C code of `tensor`'s register that each thread t reads at `table[t]`.

        A constant index is used as is; a thread-dependent one is computed from `coords()` (the
        element's coordinates in the tensor), checked against the table, and selected among its
        possible values.
        """
        values = np.unique(table)
        if values.size == 1:
            return f"{tensor.name}[{int(values[0])}]"
        index = simplify(local_index_expression(tensor.layout, coords()))
        threads = np.arange(self.threads, dtype=np.int64)
        computed = np.broadcast_to(evaluate(index, {THREAD_NAME: threads}), threads.shape)
        if not np.array_equal(computed, table):
            raise self.fail(f"the register index of {tensor.name} cannot be computed")
        name = self.temporary("j")
        self.out.line(f"const int {name} = {self.c(index)};")
        chain = f"{tensor.name}[{int(values[-1])}]"
        for value in reversed(values[:-1].tolist()):
            chain = f"({name} == {value} ? {tensor.name}[{value}] : {chain})"
        return chain

    def broadcast_read(self, out: RegisterTensor, operand: RegisterTensor, i: int) -> str:
        """The code of `operand`'s element that `out`'s element i reads (NumPy broadcasting)."""
        gather = broadcast_gather(out.layout, operand.layout)

        def coords() -> list[Expr | int]:
            full = out.layout.map(self.thread, i)
            tail = full[len(full) - operand.layout.rank :]
            return [0 if extent == 1 else c for c, extent in zip(tail, operand.shape)]

        return self.read(operand, gather[:, i], coords)

    # -------------------------------------------------------------------------- program

    def lower(self) -> LoweredKernel:
        program = self.program
        if program.name.startswith(RESERVED_PREFIX):
            raise CompilationError(
                f"program name {program.name!r} starts with {RESERVED_PREFIX!r}, which the "
                "generated code reserves for itself"
            )
        for param in program.params:
            if param.name.startswith(RESERVED_PREFIX):
                raise CompilationError(
                    f"parameter name {param.name!r} of {program.name} starts with "
                    f"{RESERVED_PREFIX!r}, which the generated code reserves for itself"
                )
        out = self.out
        out.line(f"// Kernel of the tile program {program.name}, generated by layout-algebra.")
        out.line("#include <cuda_fp16.h>")
        out.line("#include <cuda_bf16.h>")
        out.lines(CONVERSION_SOURCE)
        out.lines(OPERATION_SOURCE)
        out.lines(ASYNC_COPY_SOURCE)
        if self.tensor_cores:
            out.lines(TENSOR_CORE_SOURCE)
            out.lines(FAST_CONVERSION_PRIMITIVES)
            for conversion in FAST_CONVERSIONS.values():
                out.lines(conversion.source)
        out.line()
        signature = ", ".join(
            f"unsigned char* {p.name}" if isinstance(p, ArrayParam) else f"int {p.name}"
            for p in program.params
        )
        header = (
            f'extern "C" __global__ void __launch_bounds__({self.threads}) '
            f"{program.name}({signature})"
        )
        with out.block(header):
            out.line("extern __shared__ __align__(16) unsigned char la_smem[];")
            out.line(f"const int {THREAD_NAME} = (int)threadIdx.x;")
            for index, axis in zip(BLOCK_INDICES, "xyz"):
                out.line(f"const int {index.name} = (int)blockIdx.{axis};")
            names = [THREAD_NAME, *(index.name for index in BLOCK_INDICES)]
            names += [p.name for p in program.params if isinstance(p, IntParam)]
            for name in names:
                out.line(f"const long long {WIDE_PREFIX}{name} = {name};")
            out.line(f"const unsigned la_warp_mask = {self.warp_mask()};")
            self.execute(program.body)
        shared_bytes = self.user_shared_bytes + self.scratch_bytes
        if shared_bytes > SHARED_MEMORY_LIMIT:
            raise CompilationError(
                f"{program.name} needs {shared_bytes} bytes of shared memory "
                f"({self.scratch_bytes} of them for reductions); at most {SHARED_MEMORY_LIMIT} "
                "fit in a block"
            )
        return LoweredKernel(
            source=out.text(),
            entry=program.name,
            params=self.kernel_params(),
            block_threads=self.threads,
            shared_bytes=shared_bytes,
            options=NVRTC_OPTIONS,
            accesses=tuple(self.accesses),
            plans=tuple(self.plans),
        )

    def warp_mask(self) -> str:
        """The C value of the mask of the lanes of the calling thread's warp that exist."""
        rest = self.threads % WARP_SIZE
        if rest == 0:
            return "0xFFFFFFFFu"
        last = self.threads // WARP_SIZE
        return f"({THREAD_NAME} / {WARP_SIZE} == {last} ? 0x{(1 << rest) - 1:X}u : 0xFFFFFFFFu)"

    def kernel_params(self) -> tuple[KernelArrayParam | KernelIntParam, ...]:
        """The launch signature: int bounds from the variables, array sizes from the views."""
        int_names = {p.name for p in self.program.params if isinstance(p, IntParam)}
        needed: dict[str, list[Expr | int]] = {}
        for instruction in self.program.walk():
            if isinstance(instruction, GlobalView):
                view = instruction.out
                bits = as_expr(view.layout.size) * view.dtype.nbits
                unknown = bits.free_vars() - int_names
                if unknown:
                    self.current = instruction
                    raise self.fail(
                        f"the extents and strides of view {view.name} read {sorted(unknown)}; a "
                        "view's size must depend on int parameters only (it is checked at launch)"
                    )
                needed.setdefault(view.param.name, []).append(bits)
        params: list[KernelArrayParam | KernelIntParam] = []
        for param in self.program.params:
            if isinstance(param, IntParam):
                low, high = param.var.lo, param.var.hi
                if (low is not None and low < _INT_MIN) or (high is not None and high > _INT_MAX):
                    raise CompilationError(
                        f"int parameter {param.name} has bounds [{low}, {high}]; the kernel "
                        f"passes it as a C int, expected bounds within [{_INT_MIN}, {_INT_MAX}]"
                    )
                params.append(KernelIntParam(param.name, 32, True, low, high, param.multiple_of))
                continue
            total: Expr | int = 0
            for bits in needed.get(param.name, []):
                total = maximum(total, bits)
            nbits = param.dtype.nbits
            count = simplify((maximum(as_expr(total), 0) + nbits - 1) // nbits)
            params.append(
                KernelArrayParam(param.name, nbits, count.value if count.is_const else count)
            )
        return tuple(params)

    def execute(self, body: Sequence[Instruction]) -> None:
        for instruction in body:
            self.current = instruction
            self.out.comment(format_instruction(instruction))
            self.handlers[type(instruction)](instruction)

    # -------------------------------------------------------------------------- tensors

    def register_tensor(self, instruction: RegisterTensorInit) -> None:
        out = instruction.out
        code = int(out.dtype.encode(np.array([instruction.init]))[0])
        self.declare(out)
        for i in range(out.layout.local_size):
            self.out.line(f"{out.name}[{i}] = {code}u;")

    def shared_tensor(self, instruction: SharedTensorAlloc) -> None:
        tensor = instruction.out
        self.out.line(
            f"unsigned char* const {tensor.name} = la_smem + {self.shared_base[tensor.name]};"
        )

    def global_view(self, instruction: GlobalView) -> None:
        view = instruction.out
        self.out.line(f"unsigned char* const {view.name} = {view.param.name};")

    def assign(self, instruction: Assign) -> None:
        for i in range(instruction.dst.layout.local_size):
            self.out.line(f"{instruction.dst.name}[{i}] = {instruction.src.name}[{i}];")

    # ------------------------------------------------------------------ vector widths

    def with_multiples(self, expr: Expr | int) -> Expr | int:
        """`expr` with each int parameter declared a multiple of m > 1 written as ``m * q``
        (q >= 0), simplified, so that `known_divisor` sees the divisibility."""
        if not isinstance(expr, Expr):
            return expr
        return simplify(expr.substitute(self.multiples))

    def loop_divisor(self, expr: Expr | int) -> int:
        """`known_divisor` of `expr` with each enclosing loop variable written as
        ``start + step * q`` (q >= 0), then each int parameter declared a multiple of m as
        ``m * q``."""
        if not isinstance(expr, Expr):
            return abs(int(expr))
        mapping = {
            name: start + step * var(f"{RESERVED_PREFIX}q_{name}", 0, None)
            for name, (_, start, step, _) in self.loops.items()
            if step > 1
        }
        return known_divisor(self.with_multiples(expr.substitute(mapping)))

    def global_width(self, tile: _Tile, view: GlobalTensor) -> int:
        """The vector width of a tile of a global view (see the module docstring)."""
        strides = tuple(self.with_multiples(stride) for stride in view.layout.strides)
        tile_layout = GlobalLayout(tile.register.shape, strides)
        width = compose(tile_layout, tile.register).vector_width(tile.element_bits)
        base = view.layout.offset(list(tile.origin))
        return _narrow(width, self.loop_divisor(base), tile.element_bits)

    def origin_values(self, origin: Sequence[Expr]) -> list[dict[str, int]] | None:
        """Every valuation of the variables of `origin`, or None when there are too many."""
        names = sorted(set().union(*(o.free_vars() for o in origin)))
        domains = []
        for name in names:
            if name in self.loops:
                loop_var, start, step, _ = self.loops[name]
                low, high = loop_var.lo, loop_var.hi
                if not start.is_const:
                    step = 1
            else:
                low, high = None, None
                for scalar in (*BLOCK_INDICES, *self.scalar_params()):
                    if scalar.name == name:
                        low, high = scalar.lo, scalar.hi
            if low is None or high is None or high - low + 1 > ENUMERATION_LIMIT:
                return None
            domains.append(range(low, high + 1, step))
        if math.prod(len(domain) for domain in domains) > ENUMERATION_LIMIT:
            return None
        return [dict(zip(names, values)) for values in itertools.product(*domains)]

    def scalar_params(self) -> list[Expr]:
        return [p.var for p in self.program.params if isinstance(p, IntParam)]

    def shared_width(self, tile: _Tile) -> int:
        """The vector width of a tile of a shared tensor (see the module docstring)."""
        memory = tile.memory
        assert isinstance(memory, SharedLayout)
        register = tile.register
        widths = _vector_widths(tile.element_bits, register.local_size)
        if not widths:
            return 1
        valuations = self.origin_values(tile.origin)
        if valuations is not None:
            table = register.table()
            tables = []
            for env in valuations:
                origin = [int(evaluate(o, env)) for o in tile.origin]
                coords = tuple(table[..., d] + origin[d] for d in range(register.rank))
                try:
                    tables.append(np.asarray(memory.offset(coords), dtype=np.int64))
                except LayoutError:
                    continue
            for width in widths:
                if all(_runs_ok(offsets, width) for offsets in tables):
                    return width
            return 1
        dims = memory.mode_dims
        if memory.swizzle is not None or len(set(dims)) != len(dims):
            return 1
        strides = [0] * memory.rank
        for dim, stride in zip(dims, memory.mode_strides):
            strides[dim] = stride
        tile_layout = shared_strides(register.shape, strides)
        width = compose(tile_layout, register).vector_width(tile.element_bits)
        base = sum((o * s for o, s in zip(tile.origin, strides)), as_expr(0))
        return _narrow(width, self.loop_divisor(base), tile.element_bits)

    # ------------------------------------------------------------------ memory accesses

    def register_tile(
        self,
        memory: SharedLayout | GlobalLayout,
        layout: RegisterLayout,
        origin: Sequence[Expr],
        dtype: DataType,
    ) -> _Tile:
        return _Tile(memory, pad_layout(layout, memory.rank), tuple(origin), dtype.nbits)

    def element_address(self, tile: _Tile, i: int) -> tuple[Expr, int]:
        """(printed address, unit bits) of one element: a typed index for whole-byte elements,
        a bit offset for the others."""
        offset = tile.offset(self.thread, i)
        if tile.element_bits % 8 == 0:
            return offset, tile.element_bits
        return simplify(offset * tile.element_bits), 1

    def vector_address(self, tile: _Tile, first: int) -> Expr:
        """The printed byte offset of the vector starting at register `first`."""
        offset = tile.offset(self.thread, first)
        if tile.element_bits % 8 == 0:
            return simplify(offset * (tile.element_bits // 8))
        return simplify(offset * tile.element_bits // 8)

    def load_element(self, pointer: str, tile: _Tile, i: int, mask: Expr | None) -> str:
        """C code of register i's element loaded from `pointer` (0 where `mask` is false)."""
        address, unit = self.element_address(tile, i)
        self.record(tile, i, 1, address, unit, mask)
        bits = tile.element_bits
        if bits % 8 == 0:
            load = f"((const {_unsigned(bits)}*){pointer})[{self.c(address)}]"
        else:
            load = f"la_load_bits({pointer}, {self.c(address)}, {bits})"
        if mask is None or _is_true(mask):
            return load
        return f"({self.c(mask)} ? (la_u32){load} : 0u)"

    def store_element(
        self, pointer: str, tile: _Tile, i: int, code: str, mask: Expr | None
    ) -> None:
        """Write `code` as register i's element at `pointer` (skipped where `mask` is false)."""
        address, unit = self.element_address(tile, i)
        self.record(tile, i, 1, address, unit, mask)
        bits = tile.element_bits
        if bits % 8 == 0:
            statement = f"(({_unsigned(bits)}*){pointer})[{self.c(address)}] = {code};"
        else:
            statement = f"la_store_bits({pointer}, {self.c(address)}, {code}, {bits});"
        if mask is None or _is_true(mask):
            self.out.line(statement)
        else:
            with self.out.block(f"if ({self.c(mask)})"):
                self.out.line(statement)

    def load_vector(
        self,
        out: RegisterTensor,
        pointer: str,
        tile: _Tile,
        first: int,
        width: int,
        mask: Expr | None,
    ) -> None:
        """Load registers first .. first + width - 1 of `out` with one vector access."""
        bits = tile.element_bits
        vector_bytes = width * bits // 8
        address = self.vector_address(tile, first)
        self.record(tile, first, width, address, 8, mask)
        kind = VECTOR_TYPES[vector_bytes]
        vector = self.temporary("v")
        with self.out.block():
            self.out.line(
                f"const {kind} {vector} = *(const {kind}*)({pointer} + ({self.c(address)}));"
            )
            for j, code in enumerate(unpack_expressions(vector, vector_bytes, bits)):
                self.out.line(f"{out.name}[{first + j}] = {code};")

    def load_elements(
        self,
        out: RegisterTensor,
        pointer: str,
        tile: _Tile,
        first: int,
        width: int,
        masked: bool,
    ) -> None:
        """Load registers first .. first + width - 1 of `out` one by one (0 out of bounds)."""
        for i in range(first, first + width):
            mask = tile.inside(self.thread, i, 1) if masked else None
            if mask is not None and _is_false(mask):
                self.out.line(f"{out.name}[{i}] = 0u;")
            else:
                self.out.line(f"{out.name}[{i}] = {self.load_element(pointer, tile, i, mask)};")

    def load_tile(
        self, out: RegisterTensor, pointer: str, tile: _Tile, width: int, masked: bool
    ) -> None:
        """Load every register of `out` from a tile, `width` registers a vector; with `masked`,
        a vector not wholly inside the tensor's shape goes element by element."""
        for first in range(0, out.layout.local_size, width):
            mask = tile.inside(self.thread, first, width) if masked else None
            if width == 1 or (mask is not None and _is_false(mask)):
                self.load_elements(out, pointer, tile, first, width, masked)
            elif mask is None or _is_true(mask):
                self.load_vector(out, pointer, tile, first, width, mask)
            else:
                with self.out.block(f"if ({self.c(mask)})"):
                    self.load_vector(out, pointer, tile, first, width, mask)
                with self.out.block("else"):
                    self.load_elements(out, pointer, tile, first, width, masked)

    def store_vector(
        self,
        src: RegisterTensor,
        pointer: str,
        tile: _Tile,
        first: int,
        width: int,
        mask: Expr | None,
    ) -> None:
        """Store registers first .. first + width - 1 of `src` with one vector access."""
        bits = tile.element_bits
        vector_bytes = width * bits // 8
        address = self.vector_address(tile, first)
        self.record(tile, first, width, address, 8, mask)
        kind = VECTOR_TYPES[vector_bytes]
        codes = [f"{src.name}[{first + j}]" for j in range(width)]
        self.out.line(
            f"*({kind}*)({pointer} + ({self.c(address)})) = "
            f"{pack_expression(codes, vector_bytes, bits)};"
        )

    def store_elements(
        self,
        src: RegisterTensor,
        pointer: str,
        tile: _Tile,
        first: int,
        width: int,
        masked: bool,
    ) -> None:
        """Store registers first .. first + width - 1 of `src` one by one (skipped out of
        bounds)."""
        for i in range(first, first + width):
            mask = tile.inside(self.thread, i, 1) if masked else None
            if mask is None or not _is_false(mask):
                self.store_element(pointer, tile, i, f"{src.name}[{i}]", mask)

    def store_tile(
        self, src: RegisterTensor, pointer: str, tile: _Tile, width: int, masked: bool
    ) -> None:
        """Store every register of `src` into a tile, as `load_tile` loads; only the primary
        replica stores."""
        primary = primary_condition(src.layout, self.thread)
        with self.out.block("" if primary is None else f"if ({self.c(primary)})"):
            for first in range(0, src.layout.local_size, width):
                mask = tile.inside(self.thread, first, width) if masked else None
                if width == 1 or (mask is not None and _is_false(mask)):
                    self.store_elements(src, pointer, tile, first, width, masked)
                elif mask is None or _is_true(mask):
                    self.store_vector(src, pointer, tile, first, width, mask)
                else:
                    with self.out.block(f"if ({self.c(mask)})"):
                        self.store_vector(src, pointer, tile, first, width, mask)
                    with self.out.block("else"):
                        self.store_elements(src, pointer, tile, first, width, masked)

    def load_global(self, instruction: LoadGlobal) -> None:
        out, src = instruction.out, instruction.src
        tile = self.register_tile(src.layout, out.layout, instruction.offsets, src.dtype)
        self.declare(out)
        self.load_tile(out, src.name, tile, self.global_width(tile, src), masked=True)

    def store_global(self, instruction: StoreGlobal) -> None:
        dst, src = instruction.dst, instruction.src
        tile = self.register_tile(dst.layout, src.layout, instruction.offsets, dst.dtype)
        self.store_tile(src, dst.name, tile, self.global_width(tile, dst), masked=True)

    def load_shared(self, instruction: LoadShared) -> None:
        out, src = instruction.out, instruction.src
        self.declare(out)
        plan = None
        if self.tensor_cores and src.dtype.nbits == 16:
            ranges = self.loop_ranges(instruction.offsets)
            if self.few_offset_values(instruction.offsets, ranges):
                plan = plan_ldmatrix(src.layout, out.layout, src.dtype, instruction.offsets, ranges)
        if plan is not None:
            self.plans.append(plan)
            self.out.lines(
                emit_ldmatrix(plan, f"((unsigned short*){src.name})", out.name, THREAD_NAME)
            )
            return
        tile = self.register_tile(src.layout, out.layout, instruction.offsets, src.dtype)
        self.load_tile(out, src.name, tile, self.shared_width(tile), masked=False)

    @staticmethod
    def few_offset_values(offsets: Sequence[Expr], ranges: dict[str, range]) -> bool:
        """Whether the offsets' variables take at most `MAX_OFFSET_POINTS` values together (the
        ones of `ranges`, the others over their bounds), so `plan_ldmatrix` can check each."""
        total = 1
        seen: set[str] = set()
        for offset in offsets:
            for node in offset.variables():
                if node.name in seen:
                    continue
                seen.add(node.name)
                if node.name in ranges:
                    total *= len(ranges[node.name])
                elif node.lo is None or node.hi is None:
                    return False
                else:
                    total *= node.hi - node.lo + 1
                if total > MAX_OFFSET_POINTS:
                    return False
        return True

    def loop_ranges(self, offsets: Sequence[Expr]) -> dict[str, range]:
        """The values each enclosing loop variable of `offsets` with constant bounds takes."""
        names = set().union(*(o.free_vars() for o in offsets))
        ranges = {}
        for name in names & set(self.loops):
            _, start, step, stop = self.loops[name]
            if start.is_const and stop.is_const:
                ranges[name] = range(start.value, stop.value, step)
        return {name: values for name, values in ranges.items() if len(values)}

    def store_shared(self, instruction: StoreShared) -> None:
        dst, src = instruction.dst, instruction.src
        tile = self.register_tile(dst.layout, src.layout, instruction.offsets, dst.dtype)
        self.store_tile(src, dst.name, tile, self.shared_width(tile), masked=False)

    def copy_async(self, instruction: CopyAsync) -> None:
        dst, src = instruction.dst, instruction.src
        bits = src.dtype.nbits
        layout = instruction.layout
        if layout is None:
            layout = default_copy_layout(instruction.shape, bits, self.threads)
        source = self.register_tile(src.layout, layout, instruction.src_offsets, src.dtype)
        target = self.register_tile(dst.layout, layout, instruction.dst_offsets, dst.dtype)
        width = min(self.global_width(source, src), self.shared_width(target))
        primary = primary_condition(layout, self.thread)
        with self.out.block("" if primary is None else f"if ({self.c(primary)})"):
            for first in range(0, layout.local_size, width):
                mask = source.inside(self.thread, first, width)
                if width == 1 or _is_false(mask):
                    self.copy_elements(source, src.name, target, dst.name, first, width)
                elif _is_true(mask):
                    self.copy_vector(source, src.name, target, dst.name, first, width, mask)
                else:
                    with self.out.block(f"if ({self.c(mask)})"):
                        self.copy_vector(source, src.name, target, dst.name, first, width, mask)
                    with self.out.block("else"):
                        self.copy_edge(source, src.name, target, dst.name, first, width)

    def copy_edge(
        self, source: _Tile, src: str, target: _Tile, dst: str, first: int, width: int
    ) -> None:
        """Copy a vector not wholly inside the source: when its registers inside are a prefix,
        one ``cp.async`` reads them and zero-fills the rest; else element by element."""
        vector_bytes = width * source.element_bits // 8
        prefix = source.prefix(self.thread, first, width)
        if prefix is None or vector_bytes < 4:
            self.copy_elements(source, src, target, dst, first, width)
            return
        condition, count = prefix
        with self.out.block("" if _is_true(condition) else f"if ({self.c(condition)})"):
            self.facts.append(condition)
            src_address = self.vector_address(source, first)
            dst_address = self.vector_address(target, first)
            self.record(source, first, width, src_address, 8, None, count)
            self.record(target, first, width, dst_address, 8, None)
            self.facts.pop()
            elements = self.temporary("count")
            self.out.line(f"const int {elements} = {self.c(count)};")
            # With nothing to read, point at the tensor's base: no byte is read, and no address
            # outside the tensor is formed.
            frm = f"({elements} > 0 ? {src} + ({self.c(src_address)}) : {src})"
            to = f"{dst} + ({self.c(dst_address)})"
            bytes_read = f"{elements} * {source.element_bits // 8}"
            if source.element_bits % 8:
                bytes_read = f"{elements} * {source.element_bits} / 8"
            self.out.line(f"la_cp_async_zfill_{vector_bytes}({to}, {frm}, {bytes_read});")
        if not _is_true(condition):
            with self.out.block("else"):
                self.copy_elements(source, src, target, dst, first, width)

    def copy_vector(
        self,
        source: _Tile,
        src: str,
        target: _Tile,
        dst: str,
        first: int,
        width: int,
        mask: Expr,
    ) -> None:
        """Copy registers first .. first + width - 1 as one vector: ``cp.async`` for 4, 8 or 16
        bytes, a synchronous vector load and store for 1 or 2."""
        vector_bytes = width * source.element_bits // 8
        src_address = self.vector_address(source, first)
        dst_address = self.vector_address(target, first)
        self.record(source, first, width, src_address, 8, mask)
        self.record(target, first, width, dst_address, 8, None)
        to = f"{dst} + ({self.c(dst_address)})"
        frm = f"{src} + ({self.c(src_address)})"
        if vector_bytes >= 4:
            self.out.line(f"la_cp_async_{vector_bytes}({to}, {frm});")
        else:
            kind = VECTOR_TYPES[vector_bytes]
            self.out.line(f"*({kind}*)({to}) = *(const {kind}*)({frm});")

    def copy_elements(
        self, source: _Tile, src: str, target: _Tile, dst: str, first: int, width: int
    ) -> None:
        """Copy registers first .. first + width - 1 element by element, synchronously (0 for
        elements outside the source's shape)."""
        for i in range(first, first + width):
            mask = source.inside(self.thread, i, 1)
            code = "0u" if _is_false(mask) else self.load_element(src, source, i, mask)
            self.store_element(dst, target, i, code, None)

    def copy_async_commit(self, instruction: CopyAsyncCommit) -> None:
        self.out.line("la_cp_async_commit();")

    def copy_async_wait(self, instruction: CopyAsyncWait) -> None:
        self.out.line(f"la_cp_async_wait<{instruction.pending}>();")

    def sync(self, instruction: Sync) -> None:
        self.out.line("__syncthreads();")

    # ---------------------------------------------------------------------- computation

    def elementwise(
        self,
        out: RegisterTensor,
        operands: Sequence[RegisterTensor],
        formula: Callable[[list[str]], str],
    ) -> None:
        self.declare(out)
        for i in range(out.layout.local_size):
            codes = [self.broadcast_read(out, operand, i) for operand in operands]
            self.out.line(f"{out.name}[{i}] = {formula(codes)};")

    def unary(self, instruction: Unary) -> None:
        dtype = instruction.x.dtype

        def formula(codes: list[str]) -> str:
            value = unary_value(instruction.op, dtype, decode_expression(dtype, codes[0]))
            if dtype.is_float:
                return encode_expression(dtype, value)
            return wrap_expression(dtype, value)

        self.elementwise(instruction.out, [instruction.x], formula)

    def binary(self, instruction: Binary) -> None:
        dtype = instruction.lhs.dtype
        op = instruction.op

        def formula(codes: list[str]) -> str:
            x, y = (decode_expression(dtype, code) for code in codes)
            value = binary_value(op, dtype, x, y)
            if BINARY_OPS[op].is_comparison:
                return wrap_expression(dtypes.u1, value)
            if dtype.is_float:
                return encode_expression(dtype, value)
            return wrap_expression(dtype, value)

        self.elementwise(instruction.out, [instruction.lhs, instruction.rhs], formula)

    def where(self, instruction: Where) -> None:
        operands = [instruction.cond, instruction.x, instruction.y]
        self.elementwise(
            instruction.out, operands, lambda codes: f"({codes[0]} != 0 ? {codes[1]} : {codes[2]})"
        )

    def cast(self, instruction: Cast) -> None:
        out, x = instruction.out, instruction.x
        self.declare(out)
        fast = fast_conversion(x.dtype, out.dtype) if self.tensor_cores else None
        size = out.layout.local_size
        if fast is not None and size % fast.elements_per_word == 0:
            # Whole 32-bit words of codes: the bit-trick conversion, a word at a time.
            count = fast.elements_per_word
            for first in range(0, size, count):
                codes = [f"{x.name}[{first + j}]" for j in range(count)]
                word, halves = self.temporary("word"), self.temporary("halves")
                with self.out.block():
                    self.out.line(
                        f"const unsigned int {word} = {pack_expression(codes, 4, x.dtype.nbits)};"
                    )
                    self.out.line(f"unsigned int {halves}[{fast.output_words}];")
                    self.out.line(fast.call(word, halves))
                    for j in range(count):
                        shift = " >> 16" if j % 2 else " & 0xFFFFu"
                        self.out.line(f"{out.name}[{first + j}] = {halves}[{j // 2}]{shift};")
            return
        for i in range(size):
            code = convert_expression(x.dtype, out.dtype, f"{x.name}[{i}]")
            self.out.line(f"{out.name}[{i}] = {code};")

    def view(self, instruction: View) -> None:
        out, x = instruction.out, instruction.x
        bits_in, bits_out = x.dtype.nbits, out.dtype.nbits
        self.declare(out)
        for j in range(out.layout.local_size):
            start, end = j * bits_out, (j + 1) * bits_out
            parts = []
            for k in range(start // bits_in, (end - 1) // bits_in + 1):
                low = k * bits_in
                part = f"(la_u32){x.name}[{k}]"
                if start > low:
                    part = f"({part} >> {start - low})"
                if low > start:
                    part = f"({part} << {low - start})"
                parts.append(part)
            self.out.line(f"{out.name}[{j}] = {wrap_expression(out.dtype, ' | '.join(parts))};")

    def reduce(self, instruction: Reduce) -> None:
        out, x = instruction.out, instruction.x
        dtype = x.dtype
        local_order, steps = reduce_plan(x.layout, instruction.dim, out.layout)
        if not np.all(local_order == local_order[:1]):
            raise self.fail("the order of a thread's own elements depends on the thread")
        kind = value_type(dtype)
        combine = _combiner(instruction.reduction, dtype)
        partial = self.temporary("p")
        size = out.layout.local_size
        self.declare(out)
        with self.out.block():
            self.out.line(f"{kind} {partial}[{size}];")
            for j in range(size):
                terms = [decode_expression(dtype, f"{x.name}[{int(k)}]") for k in local_order[0, j]]
                self.out.line(f"{partial}[{j}] = {terms[0]};")
                for term in terms[1:]:
                    self.out.line(f"{partial}[{j}] = {combine(f'{partial}[{j}]', term)};")
            for divisor, count in steps:
                if self.within_warps(divisor, count):
                    self.reduce_by_shuffles(partial, size, kind, combine, divisor, count)
                else:
                    self.reduce_through_shared(partial, size, kind, combine, divisor, count)
            for j in range(size):
                value = f"{partial}[{j}]"
                if dtype.is_float:
                    code = encode_expression(dtype, value)
                else:
                    code = wrap_expression(dtype, value)
                self.out.line(f"{out.name}[{j}] = {code};")

    def within_warps(self, divisor: int, count: int) -> bool:
        """Whether every group of threads differing only in the digit (t // divisor) % count
        lies in one warp."""
        threads = np.arange(self.threads)
        base = threads - (threads // divisor % count) * divisor
        last = base + (count - 1) * divisor
        return bool(np.all(base // WARP_SIZE == last // WARP_SIZE))

    def group_base(self, divisor: int, count: int, lane: bool) -> str:
        """C text of the first thread (or, with `lane`, its lane) of the calling thread's group
        of threads differing only in the digit (t // divisor) % count."""
        thread = self.thread % WARP_SIZE if lane else self.thread
        return self.c(simplify(thread - self.thread // divisor % count * divisor))

    def reduce_by_shuffles(
        self,
        partial: str,
        size: int,
        kind: str,
        combine: Callable[[str, str], str],
        divisor: int,
        count: int,
    ) -> None:
        base = self.temporary("lane")
        total = self.temporary("s")
        with self.out.block():
            self.out.line(f"const int {base} = {self.group_base(divisor, count, lane=True)};")
            for j in range(size):
                # Every lane runs every shuffle unconditionally, in digit order.
                values = [f"{total}_{j}_{digit}" for digit in range(count)]
                for digit, value in enumerate(values):
                    lane = f"{base} + {digit * divisor}" if digit else base
                    self.out.line(
                        f"const {kind} {value} = __shfl_sync(la_warp_mask, {partial}[{j}], {lane});"
                    )
                accumulated = values[0]
                for value in values[1:]:
                    accumulated = combine(accumulated, value)
                self.out.line(f"{partial}[{j}] = {accumulated};")

    def reduce_through_shared(
        self,
        partial: str,
        size: int,
        kind: str,
        combine: Callable[[str, str], str],
        divisor: int,
        count: int,
    ) -> None:
        chunk = max(1, min(size, REDUCE_SCRATCH_WORDS // self.threads))
        self.scratch_bytes = max(self.scratch_bytes, 4 * chunk * self.threads)
        scratch = self.temporary("scratch")
        base = self.temporary("base")
        with self.out.block():
            self.out.line(
                f"{kind}* const {scratch} = ({kind}*)(la_smem + {self.user_shared_bytes});"
            )
            self.out.line(f"const int {base} = {self.group_base(divisor, count, lane=False)};")
            for start in range(0, size, chunk):
                members = range(start, min(size, start + chunk))
                for j in members:
                    row = (j - start) * self.threads
                    self.out.line(f"{scratch}[{row} + {THREAD_NAME}] = {partial}[{j}];")
                self.out.line("__syncthreads();")
                for j in members:
                    row = (j - start) * self.threads
                    self.out.line(f"{partial}[{j}] = {scratch}[{row} + {base}];")
                    for digit in range(1, count):
                        other = f"{scratch}[{row} + {base} + {digit * divisor}]"
                        self.out.line(f"{partial}[{j}] = {combine(f'{partial}[{j}]', other)};")
                self.out.line("__syncthreads();")

    def dot(self, instruction: Dot) -> None:
        out, a, b, c = instruction.out, instruction.a, instruction.b, instruction.c
        self.declare(out)
        plan = plan_mma(instruction, self.arch) if self.tensor_cores else None
        if plan is not None:
            self.plans.append(plan)
            self.out.lines(emit_mma(plan, a.name, b.name, c.name, out.name))
            return
        if not dot_is_thread_local(instruction):
            self.staged_dot(instruction)
            return
        gather_a, gather_b = dot_gather(c.layout, a.layout, b.layout)
        values_a, values_b = self.temporary("a"), self.temporary("b")
        with self.out.block():
            for name, tensor in ((values_a, a), (values_b, b)):
                self.out.line(f"float {name}[{tensor.layout.local_size}];")
                for i in range(tensor.layout.local_size):
                    value = decode_expression(tensor.dtype, f"{tensor.name}[{i}]")
                    self.out.line(f"{name}[{i}] = {value};")
            shadow_a = RegisterTensor(values_a, a.dtype, a.layout)
            shadow_b = RegisterTensor(values_b, b.dtype, b.layout)
            for i in range(out.layout.local_size):
                accumulator = self.temporary("acc")
                self.out.line(f"float {accumulator} = la_bits_to_float({c.name}[{i}]);")
                for k in range(a.shape[1]):

                    def row(k: int = k, i: int = i) -> list[Expr | int]:
                        return [c.layout.map(self.thread, i)[0], k]

                    def column(k: int = k, i: int = i) -> list[Expr | int]:
                        return [k, c.layout.map(self.thread, i)[1]]

                    x = self.read(shadow_a, gather_a[:, i, k], row)
                    y = self.read(shadow_b, gather_b[:, i, k], column)
                    self.out.line(f"{accumulator} = la_fadd({accumulator}, la_fmul({x}, {y}));")
                self.out.line(f"{out.name}[{i}] = la_float_to_bits({accumulator});")

    def staged_dot(self, instruction: Dot) -> None:
        """A dot whose threads need operand elements held by other threads of their warp: every
        a and b element goes, as a float32, to a row-major scratch copy in shared memory (by its
        primary replica), then each thread reads what its c elements combine, in k order."""
        out, a, b, c = instruction.out, instruction.a, instruction.b, instruction.c
        (m, k_extent), n = a.shape, b.shape[1]
        a_scratch, b_scratch = shared_row_major(m, k_extent), shared_row_major(k_extent, n)
        a_bytes = 4 * m * k_extent
        self.scratch_bytes = max(self.scratch_bytes, a_bytes + 4 * k_extent * n)
        names = self.temporary("sa"), self.temporary("sb")
        with self.out.block():
            for name, start in zip(names, (0, a_bytes)):
                offset = self.user_shared_bytes + start
                self.out.line(f"float* const {name} = (float*)(la_smem + {offset});")
            for name, tensor, scratch in zip(names, (a, b), (a_scratch, b_scratch)):
                tile = _Tile(scratch, tensor.layout, (as_expr(0), as_expr(0)), 32)
                primary = primary_condition(tensor.layout, self.thread)
                with self.out.block("" if primary is None else f"if ({self.c(primary)})"):
                    for i in range(tensor.layout.local_size):
                        address = tile.offset(self.thread, i)
                        self.record(tile, i, 1, address, 32, None)
                        value = decode_expression(tensor.dtype, f"{tensor.name}[{i}]")
                        self.out.line(f"{name}[{self.c(address)}] = {value};")
            self.out.line("__syncthreads();")
            threads, size = self.threads, c.layout.local_size
            for i in range(size):
                accumulator = self.temporary("acc")
                self.out.line(f"float {accumulator} = la_bits_to_float({c.name}[{i}]);")
                for k in range(k_extent):
                    rows = FunctionLayout(
                        (m, k_extent), threads, size, lambda t, j, k=k: (c.layout.map(t, j)[0], k)
                    )
                    columns = FunctionLayout(
                        (k_extent, n), threads, size, lambda t, j, k=k: (k, c.layout.map(t, j)[1])
                    )
                    reads = []
                    for name, scratch, layout in zip(
                        names, (a_scratch, b_scratch), (rows, columns)
                    ):
                        tile = _Tile(scratch, layout, (as_expr(0), as_expr(0)), 32)
                        address = tile.offset(self.thread, i)
                        self.record(tile, i, 1, address, 32, None)
                        reads.append(f"{name}[{self.c(address)}]")
                    self.out.line(
                        f"{accumulator} = la_fadd({accumulator}, la_fmul({reads[0]}, {reads[1]}));"
                    )
                self.out.line(f"{out.name}[{i}] = la_float_to_bits({accumulator});")
            self.out.line("__syncthreads();")

    # -------------------------------------------------------------------------- control

    def for_range(self, instruction: ForRange) -> None:
        loop_var = instruction.var
        name = loop_var.name
        wide = is_wide(loop_var) or is_wide(instruction.start) or is_wide(instruction.stop)
        kind = "long long" if wide else "int"
        header = (
            f"for ({kind} {name} = {self.c(instruction.start)}; {name} < "
            f"{self.c(instruction.stop)}; {name} += {instruction.step})"
        )
        facts = [instruction.start <= loop_var, loop_var < instruction.stop]
        if instruction.step > 1:
            facts.append(((loop_var - instruction.start) % instruction.step).eq(0))
        with self.out.block(header):
            self.out.line(f"const long long {WIDE_PREFIX}{name} = {name};")
            self.facts.extend(facts)
            self.loops[name] = (loop_var, instruction.start, instruction.step, instruction.stop)
            self.execute(instruction.body)
            del self.loops[name]
            del self.facts[len(self.facts) - len(facts) :]
        self.current = instruction

    def if_(self, instruction: If) -> None:
        with self.out.block(f"if ({self.c(instruction.cond)})"):
            self.facts.append(instruction.cond.ne(0))
            self.execute(instruction.body)
            self.facts.pop()
        self.current = instruction


def _quotient(param: IntParam) -> Expr:
    """The variable q of ``param = multiple_of * q``, bounded so that the product stays within
    the parameter's bounds."""
    low, high, divisor = param.var.lo, param.var.hi, param.multiple_of
    return var(
        f"{RESERVED_PREFIX}q_{param.name}",
        None if low is None else -(-low // divisor),
        None if high is None else high // divisor,
    )


def _unsigned(bits: int) -> str:
    return {8: "unsigned char", 16: "unsigned short", 32: "unsigned int"}[bits]


def _is_true(expr: Expr) -> bool:
    return expr.is_const and expr.value != 0


def _is_false(expr: Expr) -> bool:
    return expr.is_const and expr.value == 0


def _combiner(reduction: str, dtype: DataType) -> Callable[[str, str], str]:
    """The C text of one step of a reduction on values of `dtype` (float sums in float32)."""
    if reduction == "sum":
        if dtype.is_float:
            return lambda a, b: f"la_fadd({a}, {b})"
        return lambda a, b: f"(int)((la_u32)({a}) + (la_u32)({b}))"
    op = "max" if reduction == "max" else "min"
    return lambda a, b: binary_value(op, dtype, a, b)


def lower(program: Program, arch: str | None = None) -> LoweredKernel:
    """Lower `program` to a CUDA C++ kernel (see the module docstring).

    `arch` (e.g. ``"sm_90a"``) lets the lowering use what that architecture has: with sm_80 or
    newer, ``mma.sync`` for dots and ``ldmatrix`` for loads where a plan exists. Without it the
    kernel uses neither (it then runs on any architecture NVRTC targets, bit-exact with the
    interpreter). Verifies the program first (`ir.verify`, `VerificationError`). Raises
    `CompilationError` when the program cannot be lowered: a parameter or program name starting
    with ``la_``, an int parameter wider than a C int, a view whose size depends on anything but
    int parameters, more shared memory than a block has; `ArchitectureError` for a malformed
    `arch`.
    """
    verify(program)
    return _Lowerer(program, arch).lower()

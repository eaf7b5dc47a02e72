"""The state of one kernel being lowered and the helpers every part of the lowering uses.

`LoweringContext` holds the C text being written, the temporaries, the facts that hold at the
current point (loop ranges and strides, if conditions, declared divisors of int parameters, the
block indices below the declared grid's extents), the
shared-memory placement, and the recorded accesses and plans; `Access` and `LoweredKernel` are
what the lowering produces. `Tile` places a register tile at an origin of a memory tensor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from backend.bulk_copy import BulkCopies, BulkTensorPlan, plan_bulk_copies
from backend.cuda_codegen import (
    CodeWriter,
)
from backend.errors import CompilationError
from backend.kernel import KernelArrayParam, KernelIntParam, KernelTensorMapParam
from backend.lower import registers
from backend.lower.report import LoweringReport, PathRecorder
from backend.lower.warp_classes import BudgetChange
from backend.proxy_fences import ProxyWrites
from backend.tensor_core import (
    MINIMUM_MMA_ARCH,
    LdmatrixPlan,
    MmaPlan,
    arch_number,
)
from backend.wgmma import (
    SWIZZLED_ALIGNMENT,
    WGMMA_ARCH,
    ChainDescriptor,
    WgmmaPlan,
    operand_uses,
    shared_operand_dots,
    shared_operand_dots_in,
)
from backend.wgmma_pipeline import (
    ChainedDot,
    InFlightDot,
    dot_chains,
    in_flight_copies,
    in_flight_dot,
)
from ir import dtypes, instructions
from ir.instructions import Instruction
from ir.placement import broadcast_gather
from ir.printer import format_instruction
from ir.program import BLOCK_INDICES, Program
from ir.shared_reuse import SHARED_ALIGNMENT
from ir.values import IntParam, RegisterTensor
from layout_algebra.function_layout import FunctionLayout
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.hardware import register_cap
from layout_algebra.register import RegisterLayout
from layout_algebra.shared import SharedLayout
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
from layout_algebra.symbolic.expr import is_negation
from layout_algebra.symbolic.printing import to_c

THREAD_NAME = "la_thread"
"""The C variable (and symbolic variable) of the thread index, threadIdx.x."""

WIDE_PREFIX = "la_w_"
"""Prefix of the 64-bit copies of the scalar variables."""

RESERVED_PREFIX = "la_"
"""Names the generated code uses for itself; parameters and programs may not start with it."""

CONSTANT_TABLE = "la_constants"
"""The kernel's table of 32-bit constants in constant memory (`LoweringContext.constant_word`)."""

NVRTC_OPTIONS = ("--fmad=false", "--diag-suppress=177")
"""Options every lowered kernel is compiled with: no contraction of a * b + c into an FMA, and
no warning for the helpers and variables a kernel does not use."""

C_INT_MIN = -(2**31)
C_INT_MAX = 2**31 - 1
"""The range of a C int, in which scalars are printed unless they may leave it."""


SCRATCH_MARK = "la_scratch_offset_"
"""Placeholder of a thread group's scratch offset in the text until every size is known."""
MAX_GROUP_BARRIERS = 15
"""Named barriers a block has besides barrier 0 (``__syncthreads``)."""


def thread_groups(program: Program) -> dict[int, tuple[int, int]]:
    """The thread group (first block thread, threads) that runs each instruction inside one,
    by id(instruction); instructions of the block's own body are not keys."""
    found: dict[int, tuple[int, int]] = {}

    def walk(body: Sequence[Instruction], group: tuple[int, int] | None) -> None:
        for instruction in body:
            if group is not None:
                found[id(instruction)] = group
            inner = group
            if isinstance(instruction, instructions.ThreadGroup):
                first = (0 if group is None else group[0]) + instruction.start
                inner = (first, instruction.threads)
            for nested in instruction.bodies():
                walk(nested, inner)

    walk(program.body, None)
    return found


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
    sits: loop ranges and strides, if conditions, ``p % m == 0`` for each int parameter p
    declared a multiple of m > 1, and ``block_x < x`` for each extent x of a declared grid that
    is not a constant):

    - ``expr * unit_bits == (memory.offset(origin + register.map(t, local_index + j)) - j) *
      element_bits`` for every j < width: the registers sit at consecutive elements from expr;
    - when width > 1, ``expr * unit_bits`` is a multiple of ``width * element_bits`` (the vector
      is aligned to its size);
    - `mask`, when not None (global memory), is true exactly when every element
      ``origin + register.map(t, local_index + j)`` lies inside the tensor's shape;
    - `count`, when not None (a ``cp.async`` that zero-fills), is the number of leading
      registers the access reads from memory: register local_index + j lies inside the tensor's
      shape exactly when j < count.

    What ties the record to the IR and to the text, so that `proofs.lowering_validation` can
    check it independently of the lowering's own bookkeeping: `role` names the memory tensor of
    `instruction` the access touches (``"src"`` or ``"dst"``; ``"scratch a"`` / ``"scratch b"``
    for a staged dot's scratch copies, with `step` the k of a scratch read); `pointer` is the C
    name the address is added to in the source; `guard` is the condition on the thread under
    which the access runs (the primary replica of a store or copy), None for every thread.
    `base`, for an element printed through a base pointer (`MemoryLowering.element_base`):
    (its C name, the expression it adds to `pointer`, the constant index printed from it),
    whose sum is `expr`.
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
    role: str
    pointer: str
    count: Expr | None = None
    guard: Expr | None = None
    step: int | None = None
    base: tuple[str, Expr, int] | None = None


@dataclass(frozen=True)
class LoweredKernel:
    """The result of `lower`: what `backend.kernel.build_kernel` needs, and the accesses.

    Fields: `source` (CUDA C++), `entry` (the kernel's name: the program's), `params` (the
    launch signature, `backend.kernel.ArrayParam` / `IntParam` in the program's parameter
    order), `block_threads`, `shared_bytes` (dynamic shared memory per block), `options`
    (NVRTC options the source is meant for), `accesses` (every printed address, in source
    order) and `plans` (the tensor-core plans used: `backend.tensor_core.MmaPlan` for a dot on
    ``mma.sync``, `LdmatrixPlan` for a load by ``ldmatrix``; their `claims()` are the proof
    obligations of what they print), `report` (the path each written instruction took,
    `backend.lower.report.LoweringReport`), `grid` (the program's declared grid, its
    constants as literals, which every launch must equal; None when the program declares none),
    `programmatic_launch` (`ir.Program.programmatic_launch`: launch it as a link of a
    chain), `tensor_maps` (the tensor maps of its bulk tensor copies, encoded at launch and
    passed after the parameters; `backend.bulk_copy`, whose `BulkTensorPlan`s are in `plans`)
    `register_budget` (None, or the per-thread registers that the warpgroups' register
    budgets divide: those the launch bounds give, `layout_algebra.hardware.register_cap`) and
    `register_changes` (the ``setmaxnreg`` the kernel runs, `backend.lower.warp_classes.
    BudgetChange`; `backend.compile` checks them against the compiled kernel's registers,
    which ptxas may leave below the launch bounds') and `invariants` (each value computed once
    at the kernel's start, as (definition, variable), `lower(..., hoist_invariants=True)`:
    the source prints the recorded expressions through them, `replace_invariants`).
    """

    source: str
    entry: str
    params: tuple[KernelArrayParam | KernelIntParam, ...]
    block_threads: int
    shared_bytes: int
    options: tuple[str, ...]
    accesses: tuple[Access, ...]
    plans: tuple[MmaPlan | LdmatrixPlan | WgmmaPlan | BulkTensorPlan, ...] = ()
    report: LoweringReport = LoweringReport(())
    grid: tuple[Expr, Expr, Expr] | None = None
    programmatic_launch: bool = False
    tensor_maps: tuple[KernelTensorMapParam, ...] = ()
    register_budget: int | None = None
    register_changes: tuple[BudgetChange, ...] = ()
    invariants: tuple[tuple[Expr, Expr], ...] = ()


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


def fits_int(expr: Expr) -> bool:
    """Whether the value of `expr` stays within the C int range (by its bounds), and for a
    `//` or `%` that `Expr.to_c` prints with Python's floor semantics (an operand of unknown
    sign) the values its formula computes on the way, which exceed the operands by up to twice
    the divisor."""
    low, high = expr.bounds()
    if low is None or high is None or low < C_INT_MIN or high > C_INT_MAX:
        return False
    if expr.op not in ("//", "%"):
        return True
    (x_low, x_high), (y_low, y_high) = (arg.bounds() for arg in expr.args)
    if x_low is not None and x_low >= 0 and y_low is not None and y_low >= 1:
        return True
    if None in (x_low, x_high, y_low, y_high):
        return False
    reach = max(-x_low, x_high) + 2 * max(-y_low, y_high) + 1
    return reach <= C_INT_MAX


def is_wide(expr: Expr) -> bool:
    """Whether `expr` or any of its sub-expressions may leave the C int range (by bounds)."""
    return not all(fits_int(node) for node in expr.nodes())


def loop_counter_type(*values: Expr) -> str:
    """The C type of a loop's counter given its variable and the expressions of its bounds:
    ``int`` when all their values fit one (`fits_int`; `c_text` then prints the bounds as
    ints, however they are computed), else ``long long``."""
    return "int" if all(fits_int(value) for value in values) else "long long"


def is_true(expr: Expr) -> bool:
    return expr.is_const and expr.value != 0


def is_false(expr: Expr) -> bool:
    return expr.is_const and expr.value == 0


NAN_BLIND_OPS = frozenset({"add", "sub", "mul", "div"})
"""Binary operations whose result is the same positive NaN whatever NaN an operand holds
(class 3 of the contract's NaN rules)."""


def nan_blind_tensors(program: Program) -> frozenset[str]:
    """The names of the register tensors that only `NAN_BLIND_OPS` and fma read: no one can
    tell one of their NaN codes from another, so the instruction that defines them may give any
    NaN where the contract names one (e.g. a cast to f32 that only feeds a multiply need not
    restore a NaN's sign). A tensor read by anything else, assigned, or stored is not."""
    blind: dict[str, bool] = {}
    for instruction in program.walk():
        reads = isinstance(instruction, instructions.Fma) or (
            isinstance(instruction, instructions.Binary) and instruction.op in NAN_BLIND_OPS
        )
        for operand in instruction.operands():
            blind[operand.name] = blind.get(operand.name, True) and reads
    return frozenset(name for name, only in blind.items() if only)


def declared_multiple_params(program: Program) -> list[IntParam]:
    """The int parameters of `program` declared a multiple of m > 1 and not given a value."""
    return [
        p
        for p in program.params
        if isinstance(p, IntParam) and p.multiple_of > 1 and p.value is None
    ]


def declared_multiples(program: Program) -> dict[str, Expr]:
    """Each of `declared_multiple_params`, by name: ``m * q`` over its `quotient` q, what the
    lowering substitutes so that `known_divisor` sees the divisibility."""
    return {p.name: p.multiple_of * quotient(p) for p in declared_multiple_params(program)}


def with_declared_multiples(expr: Expr | int, multiples: Mapping[str, Expr]) -> Expr | int:
    """`expr` with each int parameter of `multiples` (`declared_multiples`) substituted,
    simplified; an int as it is."""
    if not isinstance(expr, Expr):
        return expr
    return simplify(expr.substitute(multiples))


def lowering_bulk_copies(program: Program, arch: str | None) -> BulkCopies:
    """The bulk copies the lowering of `program` writes as TMA on `arch`
    (`backend.bulk_copy.plan_bulk_copies`), each source stride's divisor read with the int
    parameters declared multiples (`with_declared_multiples`)."""
    multiples = declared_multiples(program)
    return plan_bulk_copies(
        program, arch, lambda stride: known_divisor(with_declared_multiples(stride, multiples))
    )


def quotient(param: IntParam) -> Expr:
    """The variable q of ``param = multiple_of * q``, bounded so that the product stays within
    the parameter's bounds."""
    low, high, divisor = param.var.lo, param.var.hi, param.multiple_of
    return var(
        f"{RESERVED_PREFIX}q_{param.name}",
        None if low is None else -(-low // divisor),
        None if high is None else high // divisor,
    )


@dataclass(frozen=True)
class Tile:
    """A register tile placed at `origin` of a memory tensor (`memory`, `element_bits`), the
    tensor `role` of its instruction, whose C name in the source is `pointer` (`step`: the k of a
    staged dot's scratch read)."""

    memory: SharedLayout | GlobalLayout
    register: RegisterLayout | FunctionLayout
    origin: tuple[Expr, ...]
    element_bits: int
    role: str
    pointer: str
    step: int | None = None

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


def c_text(expr: Expr | int) -> str:
    """C text of a scalar expression, with the value of `Expr.evaluate` wherever its variables
    lie within their bounds.

    An expression all of whose sub-expressions stay in the C int range (`is_wide`) prints as
    itself, in int. In any other, each operation whose value may leave that range is computed
    in 64 bits: one of its operands is 64-bit, where none is the first (a variable as its
    64-bit copy ``la_w_<name>``, any other operand as ``(long long)(...)``). An
    operation whose value fits but which reads a 64-bit operand is cast back, ``(int)(...)``:
    a value that fits is an int however it was computed, so C keeps what stays the same
    across a loop in a 32-bit register.
    """
    expr = as_expr(expr)
    if not is_wide(expr):
        return expr.to_c()
    atoms: dict[Expr, str] = {}
    wide: dict[Expr, bool] = {}

    def visit(node: Expr) -> None:
        if node in wide:
            return
        for arg in node.args:
            visit(arg)
        if not node.args:
            wide[node] = not fits_int(node)
            if wide[node] and node.op == "var":
                atoms[node] = WIDE_PREFIX + node.name
        elif not fits_int(node):
            if not any(wide[arg] for arg in node.args):
                widened = node.args[1 if node.op == "select" or is_negation(node) else 0]
                atoms[widened] = (
                    WIDE_PREFIX + widened.name
                    if widened.op == "var"
                    else f"(long long)({to_c(widened, atoms)})"
                )
            wide[node] = True
        elif any(wide[arg] for arg in node.args) and not node.is_boolean:
            atoms[node] = f"(int)({to_c(node, atoms)})"
            wide[node] = False
        else:
            wide[node] = False

    visit(expr)
    return to_c(expr, atoms)


def replace_invariants(expr: Expr, variables: Mapping[Expr, Expr]) -> Expr:
    """`expr` with each largest sub-expression that is a key of `variables` (a hoisted
    block-invariant value's definition, `LoweringContext.hoist_invariants`) replaced by its
    variable: what the kernel prints for `expr`."""
    found = variables.get(expr)
    if found is not None:
        return found
    if not expr.args:
        return expr
    args = tuple(replace_invariants(arg, variables) for arg in expr.args)
    if all(new is old for new, old in zip(args, expr.args)):
        return expr
    return Expr(expr.op, args)


def invariant_declaration(variable: Expr, definition: Expr) -> str:
    """The kernel's line computing a hoisted value once: an int, or a 64-bit value (read as its
    copy ``la_w_<name>``) where the variable's bounds leave the int range."""
    declared = (
        f"int {variable.name}" if fits_int(variable) else f"long long {WIDE_PREFIX}{variable.name}"
    )
    return f"const {declared} = {c_text(definition)};"


def reused_base(
    reuse: tuple[str, ...],
    bases: Mapping[str, int],
    ends: Mapping[str, int],
    alignment: int,
    size: int,
) -> int | None:
    """Where a shared tensor of `size` bytes and `alignment` that may reuse the shared tensors
    named in `reuse` (`ir.shared_reuse`) goes: at the first aligned byte of the span they take
    when no other tensor lies in that span and the tensor fits in it or the span ends the
    allocation so far (`bases` and `ends`: every tensor placed so far); else None (its own
    memory, after the others)."""
    if not reuse:
        return None
    low = min(bases[name] for name in reuse)
    high = max(ends[name] for name in reuse)
    others = [name for name in bases if name not in reuse]
    if any(bases[name] < high and ends[name] > low for name in others):
        return None
    base = -(-low // alignment) * alignment
    last = max(ends.values())
    if base + size > high and high != last:
        return None
    return base


class LoweringContext:
    """The state of one kernel being lowered, and the helpers every part of the lowering uses."""

    def __init__(
        self,
        program: Program,
        arch: str | None,
        wgmma: bool = True,
        tma: bool = True,
        hoist_invariants: bool = False,
    ) -> None:
        self.program = program
        # Values the same for the whole block, computed once at the kernel's start where
        # `hoist` (`hoist_invariants`): the names they may read, what each expression seen is
        # printed as, and the hoisted (definition, variable) pairs in order.
        self.hoist = hoist_invariants
        self.block_invariants = frozenset(
            [index.name for index in BLOCK_INDICES]
            + [param.name for param in program.params if isinstance(param, IntParam)]
        )
        self.hoisted: dict[Expr, Expr] = {}
        self.invariants: list[tuple[Expr, Expr]] = []
        self.tensor_cores = arch is not None and arch_number(arch) >= MINIMUM_MMA_ARCH
        self.arch = arch
        self.plans: list[MmaPlan | LdmatrixPlan | WgmmaPlan | BulkTensorPlan] = []
        # Dots that may run as wgmma (`backend.wgmma`): their loads are deferred to the dot.
        uses_wgmma = wgmma and arch is not None and arch_number(arch) == WGMMA_ARCH
        uses_wgmma = uses_wgmma and arch.endswith("a")
        self.operand_uses = operand_uses(program) if uses_wgmma else {}
        self.wgmma_dots = shared_operand_dots(program) if uses_wgmma else {}
        self.deferred_loads = {
            id(load) for pair in self.wgmma_dots.values() for load in pair if load is not None
        }
        self.pending_loads: dict[int, instructions.LoadShared] = {}
        # The shared tensors some load was written from as the threads' own reads (ldmatrix
        # or plain), not as wgmma descriptors: the generic proxy touches them.
        self.generic_reads: set[str] = set()
        # Dots kept in flight across their loop's iterations (`backend.wgmma_pipeline`), by
        # id(dot); the assigns their in-place accumulation replaces; and, by id(loop), the
        # accumulator words to wait for after a loop whose dot was issued that way.
        self.in_flight: dict[int, InFlightDot] = {}
        self.elided_assigns: set[int] = set()
        self.drains: dict[int, tuple[str, int]] = {}
        # Chains of dots into one accumulator (`backend.wgmma_pipeline.dot_chains`), by
        # id(dot), and the accumulator words a written link left running, until a wait.
        self.chains: dict[int, ChainedDot] = {}
        self.chain_running: tuple[str, int] | None = None
        # The running chain's B descriptor, which its later links advance.
        self.chain_b: ChainDescriptor | None = None
        self.threads = program.num_threads
        self.thread = var(THREAD_NAME, 0, self.threads - 1)
        self.out = CodeWriter()
        self.accesses: list[Access] = []
        self.paths = PathRecorder()
        self.facts: list[Expr] = [
            (p.var % p.multiple_of).eq(0) for p in declared_multiple_params(program)
        ]
        # A declared grid: block_x < x (and y, z) where the extent is not a constant (a
        # constant one already bounds the index variable, `Program.block_indices`).
        if program.grid is not None:
            self.facts += [
                index < extent
                for index, extent in zip(program.block_indices, program.grid)
                if not extent.is_const
            ]
        self.multiples = declared_multiples(program)
        # For each enclosing C loop, by its variable's name: (variable, start, step, stop), the
        # variable taking the values start, start + step, ... below stop (for an unrolled loop:
        # its group step and the stop of the whole groups; `driver.KernelLowering.loop_scope`).
        self.loops: dict[str, tuple[Expr, Expr, int, Expr]] = {}
        self.current: Instruction | None = None
        self.guard: Expr | None = None
        self.temporaries = 0
        # 32-bit words the kernel reads from its constant-memory table, by value: their index.
        self.constant_words: dict[int, int] = {}
        self.shared_base: dict[str, int] = {}
        self.nan_blind = nan_blind_tensors(program)
        # Bulk copies written as TMA (`backend.bulk_copy`), by destination tensor.
        self.bulk = lowering_bulk_copies(program, arch if tma else None)
        # Whether a thread's generic write to shared memory may wait for an async-proxy fence
        # (`backend.proxy_fences`): the barriers' and dots' fence marks are kept only then.
        self.proxy = ProxyWrites.of(program, frozenset(self.bulk.tensors))
        self.instruction_groups = thread_groups(program)
        self.user_shared_bytes = self._allocate_shared()
        # The thread group being written (first block thread, threads; None: the block), the
        # named barrier of each group, and the scratch bytes of each (`scratch_offset`).
        self.group: tuple[int, int] | None = None
        self.group_barriers: dict[tuple[int, int], int] = {}
        self.scratch_sizes: dict[tuple[int, int] | None, int] = {}
        self.predeclared: set[str] = set()
        # The warps of the class of a warp-specialised tail being written (`warp_classes`), and
        # the per-thread registers the launch bounds give (what register budgets divide).
        self.known_warps: tuple[int, int] | None = None
        self.launch_registers = register_cap(program.num_threads, program.min_blocks_per_sm)
        # Whether the kernel may set register budgets: some group asks for one
        # (`ThreadGroup.registers`; the verifier then has every warp in such a group) and the
        # architecture has ``setmaxnreg`` (sm_90a and later ``a`` targets). They are set in
        # the classes of a warp-specialised tail (`driver.KernelLowering.execute_block_body`);
        # elsewhere, and in a kernel without such a tail, a budget is a request it does
        # without. `budget_changes`: the ``setmaxnreg`` the classes wrote.
        self.budgets_apply = (
            arch is not None
            and arch.endswith("a")
            and arch_number(arch) >= WGMMA_ARCH
            and any(
                isinstance(instruction, instructions.ThreadGroup) and instruction.registers
                for instruction in program.walk()
            )
        )
        self.budget_changes: list[BudgetChange] = []

    def find_wgmma_dots(self, body: Sequence[Instruction]) -> None:
        """Add the wgmma candidates of an instruction list about to be written (the copies of
        an unrolled loop's body are new instructions the first search never saw)."""
        if not self.wgmma_dots:
            return
        found = shared_operand_dots_in(body, self.operand_uses)
        self.wgmma_dots.update(found)
        self.deferred_loads.update(
            id(load) for pair in found.values() for load in pair if load is not None
        )

    def find_dot_chains(self, body: Sequence[Instruction]) -> None:
        """Note the chains of dots of an instruction list about to be written (after its
        wgmma candidates: `find_wgmma_dots`)."""
        if self.wgmma_dots:
            self.chains.update(dot_chains(body, self.wgmma_dots, self.operand_uses))

    def find_in_flight_dot(self, loop: instructions.ForRange) -> None:
        """Note the dot of `loop` that may stay in flight into its next iteration, if any."""
        if self.wgmma_dots:
            found = in_flight_dot(self.inlined_groups(loop), self.wgmma_dots)
            if found is not None:
                self.in_flight[id(found.dot)] = dataclasses.replace(found, loop=loop)

    def find_in_flight_copies(
        self, loop: instructions.ForRange, copies: Sequence[Sequence[Instruction]]
    ) -> None:
        """Note the dots of the `copies` of an unrolled loop's body (whole groups of them)
        that may each stay in flight into the next copy (`in_flight_copies`), if any."""
        if not self.wgmma_dots:
            return
        # Checked against the loads of the body as written (those of the candidates now):
        # the copies' loads hold k + j in place of k.
        inlined = [self.inlined_groups(loop, copy).body for copy in copies]
        flights = in_flight_copies(
            self.inlined_groups(loop), inlined, self.wgmma_dots, self.operand_uses
        )
        for found in flights or ():
            self.in_flight[id(found.dot)] = dataclasses.replace(found, loop=loop)

    def inlined_groups(
        self, loop: instructions.ForRange, body: Sequence[Instruction] | None = None
    ) -> instructions.ForRange:
        """`loop` (with `body` in place of its own), for the analyses of dots kept in flight:
        in a class of a warp-specialised tail, each thread group of the body that the class's
        warps run is written there as a block with no condition, so its instructions stand in
        the body in its place (the same objects); elsewhere a group is a branch."""
        items = loop.body if body is None else body
        known = self.known_warps
        if known is None or self.group is not None:
            return loop if body is None else dataclasses.replace(loop, body=tuple(items))
        inlined: list[Instruction] = []
        for item in items:
            if isinstance(item, instructions.ThreadGroup) and (
                item.start <= known[0] and known[0] + known[1] <= item.start + item.threads
            ):
                inlined.extend(item.body)
            else:
                inlined.append(item)
        return dataclasses.replace(loop, body=tuple(inlined))

    def threads_write_wgmma_tensors(self) -> bool:
        """Whether some instruction has the threads (the generic proxy) write a shared tensor
        a dot may read through wgmma descriptors: a store, a ``cp.async`` copy, or a bulk copy
        not written as TMA. Only then do the dots need proxy fences (`backend.wgmma`)."""
        read = self.wgmma_tensors()
        for instruction in self.program.walk():
            if isinstance(instruction, (instructions.StoreShared, instructions.CopyAsync)):
                if instruction.dst.name in read:
                    return True
            elif isinstance(instruction, instructions.CopyBulk):
                if instruction.dst.name in read and instruction.dst.name not in self.bulk.tensors:
                    return True
        return False

    def wgmma_tensors(self) -> set[str]:
        """The shared tensors a dot may read through wgmma descriptors."""
        return {
            load.src.name for pair in self.wgmma_dots.values() for load in pair if load is not None
        }

    def fail(self, problem: str) -> CompilationError:
        where = "" if self.current is None else f" in: {format_instruction(self.current)}"
        return CompilationError(f"cannot lower {self.program.name}: {problem}{where}")

    def note(self, path: str, count: int = 1, generic: bool = False) -> None:
        """Record that the instruction being written took `path` for `count` elements or
        calls (`backend.lower.report`)."""
        self.paths.note(path, count, generic)

    def temporary(self, stem: str) -> str:
        self.temporaries += 1
        return f"la_{stem}{self.temporaries}"

    @property
    def scratch_bytes(self) -> int:
        """The shared bytes of the scratch areas (after the program's shared tensors): the
        block's, then each thread group's, each but the last rounded up to 16 bytes."""
        sizes = [self.scratch_sizes.get(None, 0)]
        sizes += [size for key, size in self.scratch_sizes.items() if key is not None]
        rounded = [-(-size // SHARED_ALIGNMENT) * SHARED_ALIGNMENT for size in sizes[:-1]]
        return sum(rounded) + sizes[-1]

    def scratch_offset(self, size: int, within: int = 0) -> str:
        """C text of the byte offset (from the start of shared memory) of byte `within` of a
        scratch area of `size` bytes for the threads being written: the block's scratch
        follows the program's shared tensors, and each thread group has its own after it
        (groups run concurrently), placed by `scratch_source` once every size is known."""
        key = self.group
        self.scratch_sizes[key] = max(self.scratch_sizes.get(key, 0), size)
        if key is None:
            return str(self.user_shared_bytes + within)
        return f"{SCRATCH_MARK}{key[0]}_{key[1]} + {within}"

    def scratch_source(self, source: str) -> str:
        """`source` with each group's scratch mark replaced by its offset."""
        block = self.scratch_sizes.get(None, 0)
        offset = self.user_shared_bytes + -(-block // SHARED_ALIGNMENT) * SHARED_ALIGNMENT
        for key, size in self.scratch_sizes.items():
            if key is not None:
                source = source.replace(f"{SCRATCH_MARK}{key[0]}_{key[1]}", str(offset))
                offset += -(-size // SHARED_ALIGNMENT) * SHARED_ALIGNMENT
        return source

    def bulk_group(
        self, name: str, kind: type[instructions.CopyBulk | instructions.CopyBulkRelease]
    ) -> tuple[int, int] | None:
        """The thread group (None: the block) of the `kind` instructions (bulk copies, or
        releases) on shared tensor `name`: one for all of them (the verifier's rule)."""
        for instruction in self.program.walk():
            if isinstance(instruction, kind) and instruction.dst.name == name:
                return self.instruction_groups.get(id(instruction))
        return None

    def barrier(self) -> str:
        """The statement of a barrier of the threads being written: ``__syncthreads()``, or
        inside a thread group the group's named barrier."""
        if self.group is None:
            return "__syncthreads();"
        number = self.group_barriers.setdefault(self.group, len(self.group_barriers) + 1)
        if number > MAX_GROUP_BARRIERS:
            raise self.fail(
                f"{number} thread groups with barriers; the GPU has {MAX_GROUP_BARRIERS} named "
                "barriers besides the block's"
            )
        return f"la_group_barrier({number}, {self.group[1]});"

    def constant_word(self, value: int) -> str:
        """The C operand of the 32-bit `value` read from the kernel's constant table
        (`CONSTANT_TABLE`, declared before the kernel): an instruction that takes one
        immediate, such as a LOP3, can then take another operand as the immediate and this
        one from a register the compiler loads once."""
        index = self.constant_words.setdefault(value, len(self.constant_words))
        return f"{CONSTANT_TABLE}[{index}]"

    def c(self, expr: Expr | int) -> str:
        """C text of a scalar expression (`c_text`); where the kernel hoists invariants, each
        block-invariant part that divides by a value known only at run time read from its
        variable (`hoist_invariants`)."""
        return c_text(self.hoist_invariants(as_expr(expr)) if self.hoist else expr)

    def hoist_invariants(self, expr: Expr) -> Expr:
        """`expr` with a variable in place of each largest sub-expression that is the same
        for the whole block (it reads only the block's indices and the int parameters) and
        divides by a value known only at run time (a `//` or `%` by a non-constant, e.g. a
        tile count of a runtime size). Each variable is computed once at the kernel's start,
        an int or, where its bounds leave the int range, a 64-bit value (`invariants` pairs it
        with its definition; `invariant_declaration` is written when the kernel is finished).
        Printed at every use, such a value is computed again wherever the compiler does not
        see that it is the same, inside loops too."""
        if expr in self.hoisted:
            return self.hoisted[expr]
        found = expr
        if expr.args:
            if self._hoistable(expr):
                low, high = expr.bounds()
                name = f"la_inv{len(self.invariants)}"
                found = Expr("var", name=name, lo=low, hi=high)
                self.invariants.append((expr, found))
            else:
                args = tuple(self.hoist_invariants(arg) for arg in expr.args)
                if any(new is not old for new, old in zip(args, expr.args)):
                    found = Expr(expr.op, args)
        self.hoisted[expr] = found
        return found

    def _hoistable(self, expr: Expr) -> bool:
        """Whether `expr` is a value (not a condition) of the block's indices and int
        parameters alone that divides by a non-constant somewhere."""
        if expr.is_boolean or not expr.free_vars() <= self.block_invariants:
            return False
        return any(node.op in ("//", "%") and node.args[1].op != "const" for node in expr.nodes())

    @contextlib.contextmanager
    def primary_replica(self, layout: RegisterLayout) -> Iterator[None]:
        """A block run only by the primary replica of `layout` (no condition without
        replication); the accesses recorded inside carry the condition as their guard."""
        primary = primary_condition(layout, self.thread)
        outer = self.guard
        self.guard = primary
        try:
            with self.out.block("" if primary is None else f"if ({self.c(primary)})"):
                yield
        finally:
            self.guard = outer

    def _allocate_shared(self) -> int:
        """Give every shared tensor its byte offset in the dynamic allocation (one that reuses
        others where they lie, `reused_base`), and the slot
        through which atomic_add hands its old value to the threads that run it its offset,
        `ticket_slots`, keyed by thread group (None: the block): one for the block and one for
        each group with an atomic_add, since each atomic_add runs between two barriers of its
        own threads and groups run at the same time; the total."""
        total = 0
        self.ticket_slots: dict[tuple[int, int] | None, int] = {}
        wgmma_tensors = self.wgmma_tensors()
        ends: dict[str, int] = {}
        for instruction in self.program.walk():
            if isinstance(instruction, instructions.SharedTensorAlloc):
                tensor = instruction.out
                alignment = SHARED_ALIGNMENT
                if tensor.layout.swizzle is not None and tensor.name in wgmma_tensors:
                    alignment = SWIZZLED_ALIGNMENT
                if tensor.name in self.bulk.tensors:
                    alignment = max(alignment, self.bulk.tensors[tensor.name].box.alignment)
                size = dtypes.packed_nbytes(tensor.layout.size, tensor.dtype)
                size = -(-size // SHARED_ALIGNMENT) * SHARED_ALIGNMENT
                base = reused_base(instruction.reuse, self.shared_base, ends, alignment, size)
                if base is None:
                    base = -(-total // alignment) * alignment
                self.shared_base[tensor.name] = base
                ends[tensor.name] = base + size
                total = max(total, base + size)
            elif isinstance(instruction, instructions.AtomicAdd):
                self.ticket_slots.setdefault(self.instruction_groups.get(id(instruction)), -1)
        for key in self.ticket_slots:
            self.ticket_slots[key] = total
            total += SHARED_ALIGNMENT
        return total

    def declare(self, tensor: RegisterTensor) -> None:
        """Declare `tensor`'s word array (`backend.lower.registers`), unless a thread group
        declared it before its body (`predeclare`)."""
        if tensor.name in self.predeclared:
            return
        self.out.line(
            registers.declaration(tensor.name, tensor.dtype.nbits, tensor.layout.local_size)
        )

    def predeclare(self, group: instructions.ThreadGroup) -> None:
        """Declare, before a thread group's body, the register tensors it defines at its top
        level (and in the groups nested there): later bodies of the group use them, so their
        arrays outlive the C block of this one."""
        for instruction in group.body:
            if isinstance(instruction, instructions.ThreadGroup):
                self.predeclare(instruction)
                continue
            for tensor in instruction.results():
                if isinstance(tensor, RegisterTensor) and tensor.name not in self.predeclared:
                    self.declare(tensor)
                    self.predeclared.add(tensor.name)

    def element(self, tensor: RegisterTensor, index: int) -> str:
        """The C code (unsigned, b bits) of `tensor`'s element `index` in this thread."""
        return registers.element_code(tensor.name, tensor.dtype.nbits, index)

    def word(self, tensor: RegisterTensor, index: int) -> str:
        """The C text of `tensor`'s 32-bit word `index`."""
        return f"{tensor.name}[{index}]"

    def write_element(self, tensor: RegisterTensor, index: int, code: str) -> None:
        """Write `code` (fitting in b bits) as element `index`, keeping the other elements."""
        for line in registers.element_update(tensor.name, tensor.dtype.nbits, index, code):
            self.out.line(line)

    def write_elements(self, tensor: RegisterTensor, codes: Sequence[str]) -> None:
        """Write every element of `tensor` (`codes[k]` the code of element k, fitting in b
        bits), a whole word at a time."""
        nbits = tensor.dtype.nbits
        if nbits == registers.WORD_BITS:
            for index, code in enumerate(codes):
                self.out.line(f"{tensor.name}[{index}] = {code};")
            return
        with self.out.block():
            names = []
            for code in codes:
                name = self.temporary("e")
                self.out.line(f"const la_u32 {name} = {code};")
                names.append(name)
            for line in registers.word_assignments(tensor.name, nbits, names):
                self.out.line(line)

    def record(
        self,
        tile: Tile,
        first: int,
        width: int,
        expr: Expr,
        unit_bits: int,
        mask: Expr | None,
        count: Expr | None = None,
        base: tuple[str, Expr, int] | None = None,
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
                role=tile.role,
                pointer=tile.pointer,
                guard=self.guard,
                step=tile.step,
                base=base,
            )
        )

    def read(
        self,
        tensor: RegisterTensor,
        table: np.ndarray,
        coords: Callable[[], Sequence[Expr | int]],
        plain: bool = False,
    ) -> str:
        """The C code of `tensor`'s register that each thread t reads at `table[t]`.

        A constant index is used as is; a thread-dependent one is computed from `coords()` (the
        element's coordinates in the tensor), checked against the table, and selected among its
        possible values. With `plain`, `tensor.name` is an ordinary C array of one value per
        element (not a register tensor's words).
        """

        def element(index: int) -> str:
            return f"{tensor.name}[{index}]" if plain else self.element(tensor, index)

        values = np.unique(table)
        if values.size == 1:
            return element(int(values[0]))
        index = simplify(local_index_expression(tensor.layout, coords()))
        threads = np.arange(self.threads, dtype=np.int64)
        computed = np.broadcast_to(evaluate(index, {THREAD_NAME: threads}), threads.shape)
        if not np.array_equal(computed, table):
            raise self.fail(f"the register index of {tensor.name} cannot be computed")
        name = self.temporary("j")
        self.out.line(f"const int {name} = {self.c(index)};")
        chain = element(int(values[-1]))
        for value in reversed(values[:-1].tolist()):
            chain = f"({name} == {value} ? {element(value)} : {chain})"
        return chain

    def broadcast_index(self, out: RegisterTensor, operand: RegisterTensor, i: int) -> int | None:
        """The local index of `operand`'s element that `out`'s element i reads, when it is the
        same in every thread; None when it depends on the thread."""
        column = broadcast_gather(out.layout, operand.layout)[:, i]
        return int(column[0]) if np.all(column == column[0]) else None

    def broadcast_read(self, out: RegisterTensor, operand: RegisterTensor, i: int) -> str:
        """The code of `operand`'s element that `out`'s element i reads (NumPy broadcasting)."""
        gather = broadcast_gather(out.layout, operand.layout)

        def coords() -> list[Expr | int]:
            full = out.layout.map(self.thread, i)
            tail = full[len(full) - operand.layout.rank :]
            return [0 if extent == 1 else c for c, extent in zip(tail, operand.shape)]

        return self.read(operand, gather[:, i], coords)

    def with_multiples(self, expr: Expr | int) -> Expr | int:
        """`expr` with each int parameter declared a multiple of m > 1 written as ``m * q``
        (q >= 0), simplified, so that `known_divisor` sees the divisibility."""
        return with_declared_multiples(expr, self.multiples)

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

    def scalar_params(self) -> list[Expr]:
        return [p.var for p in self.program.params if isinstance(p, IntParam) and p.value is None]

"""Hopper's warpgroup tensor cores for `dot`: ``wgmma.mma_async`` reading B, and A too or A
from registers, from shared memory through matrix descriptors (sm_90a).

A `dot(a, b, c)` whose b is the result of a `load_shared` that nothing else reads can skip
that load: the warpgroup's tensor core reads the tile where it lies. If a is such a load too,
both are read from shared memory ("SS"); otherwise a's registers are the instruction's register
operand ("RS": the dequantized weights of a quantized matmul, for example). The lowering asks
`shared_operand_dots(program)` which dots are of that kind before it writes anything (it
defers their loads), and `plan_wgmma(...)` at the dot whether the layouts and the shared
tiles fit; without a plan it writes the deferred loads and lowers the dot as before. The
copies of an unrolled loop's body are new instructions made while lowering: the lowering asks
again for each instruction list it writes (`shared_operand_dots_in`).

**When a dot qualifies.** Inputs f16 or bf16, c f32; a (M, K), b (K, N) with M a multiple of
64 and K of 16; the block a whole number of warpgroups (128 threads); c divides as
``c = R * F_D`` by the ``m64nNk16`` accumulator fragment F_D of `layout_algebra.fragments`
(`wgmma_fragment("d", N')`, the largest N' that divides): R has one thread per warpgroup and
one register per 64 x N' block, and the corner of block r of warpgroup g (register ``r N'/2``
of its thread 128 g) moves by the same step from one warpgroup to the next. The a tile sits at
the `load_shared` origin of a's shared tensor, the b tile at b's; each (block, k step) tile
of A (64 rows, 16 k) and of B (N' rows, 16 k) must have a descriptor
(`layout_algebra.wgmma_descriptor.derive_descriptor`) at every value its origin takes (over the
enclosing loops, as `backend.lower.memory.offset_values` finds them, and every warpgroup), all
with one major-ness, swizzle mode, leading and stride byte offset, and a start address equal to
the printed one: the unswizzled layout's byte offset of the tile's corner, which the printed
code adds to the tensor's shared-memory address. With A in registers, a must divide as
``a = R_A * F_A`` by the register-A fragment (`wgmma_fragment("a")`), and for every k step and
accumulator block R_A must hold that block's 64 rows at that k step at one register index in
every warpgroup (its four words are the operand).

**The code.** For one dot: the accumulators copied to float registers (``out = c`` first),
``wgmma.fence``, one ``wgmma.mma_async`` per (k step, block) in k order, ``commit_group`` and
``wait_group 0``, and the registers copied back: the IR's `dot` stays synchronous. The first
call's descriptor is built from its tile's address once; a later call whose tile starts a
constant multiple of 16 bytes away advances it (`la_wgmma_advance`, one add on the start
field), which is the same descriptor while the addresses stay below 2^18, as shared ones do.
The float registers are pinned before and after (an empty ``asm`` that reads and writes each) so the
compiler neither reads them while the tensor core writes them nor moves the copies across the
wait. Shared memory written by threads (stores, ``cp.async``) reaches the tensor core through
the async proxy, so a kernel whose threads write a tensor such a dot reads issues
``fence.proxy.async.shared::cta`` (`PROXY_FENCE`) before each barrier and each dot reached
where a write of the thread may not be fenced yet (`backend.proxy_fences`); where only TMA
copies (themselves async-proxy writes, seen after their barrier's wait) fill those tensors,
it issues none. A swizzled descriptor XORs absolute address bits, so a swizzled tensor such
a dot reads starts at a multiple of its swizzle's repeat (1024 bytes; `SWIZZLED_ALIGNMENT`)
of a 1024-byte aligned allocation.

**Proofs.** `WgmmaPlan.claims()` gives, for every tile origin checked, the descriptor's address
function against the shared layout's (`WgmmaDescriptor.claim`); the accumulator claim:
register i of thread t receives the F_D element of the block whose corner R gives, which must
be c's layout; and with A in registers, the register claim: the registers each call passes
hold the F_A elements of its tile (`proofs.check_equivalent` decides each).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from backend.tensor_core import Claim, arch_number, divide_or_none, find_block, table_lookup
from ir import dtypes, instructions
from ir.dtypes import DataType
from ir.instructions import Dot, Instruction, LoadShared
from ir.program import Program
from ir.values import SharedTensor
from layout_algebra.errors import LayoutError
from layout_algebra.fragments import wgmma_fragment
from layout_algebra.function_layout import FunctionLayout
from layout_algebra.register import RegisterLayout
from layout_algebra.swizzle_modes import unswizzled
from layout_algebra.symbolic import Expr, as_expr, evaluate, simplify
from layout_algebra.symbolic.expr import is_constant
from layout_algebra.wgmma_descriptor import MODE_CODES, WgmmaDescriptor, derive_descriptor

WGMMA_ARCH = 90
"""The architecture number of ``wgmma`` (its instructions need the sm_90a target)."""
WARPGROUP_SIZE = 128
WGMMA_M, WGMMA_K = 64, 16
MAX_N = 256
SWIZZLED_ALIGNMENT = 1024
"""Start of a swizzled shared tensor (and of the allocation) read by wgmma: the 128-byte mode's
repeat, a multiple of the other modes' (`WgmmaDescriptor.alignment`)."""
MAX_ORIGINS = 64
"""The most (origin values x warpgroups) points a plan checks per operand."""
PROXY_FENCE = 'asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");'
"""Makes a thread's shared-memory writes visible to the async proxy (wgmma's reads)."""
PROXY_FENCE_MARK = "// la: async-proxy fence"
"""Where a barrier or a dot of a kernel with wgmma candidates gets `PROXY_FENCE`, once some dot
of the kernel has a plan and the kernel's threads write a tensor the dots read (the lowering
knows only at the end; otherwise the marks are dropped). A barrier or dot reached with no
write of the thread pending since its last mark gets none (`backend.proxy_fences`)."""
WAIT_ALL = 'asm volatile("wgmma.wait_group.sync.aligned 0;\\n" ::: "memory");'
"""Waits for every wgmma of the warpgroup still in flight (needs no helper of `WGMMA_SOURCE`)."""
ISSUES = ("sync", "in_flight", "chain", "chain_end")
"""How `emit_wgmma` ends a dot: waiting for it, or left running in one of three ways."""
SHARED_DECLARATION = "extern __shared__ __align__({alignment}) unsigned char la_smem[];"
"""The kernel's dynamic shared allocation, aligned to 16 bytes, or to `SWIZZLED_ALIGNMENT` when
a dot runs as wgmma."""

_KINDS = {dtypes.f16: "f16", dtypes.bf16: "bf16"}
A_WORDS = 4
"""32-bit registers of one A fragment from registers (eight 16-bit elements)."""

WGMMA_SOURCE = r"""
// wgmma (sm_90a): a shared-memory matrix descriptor from a shared address and its constant
// fields (leading and stride byte offsets, swizzle mode), and the warpgroup's ordering points.
__device__ __forceinline__ unsigned long long la_wgmma_descriptor(
    unsigned int address, unsigned long long fields)
{
    return fields | (unsigned long long)((address & 0x3FFFFu) >> 4);
}
// The descriptor of a tile `sixteenths` * 16 bytes after the one `base` describes: only its
// start field (bits 0-13, the address / 16) moves, by an add on the low word; a shared address
// stays below 2^18 and a tile's start is a multiple of 16, so the field neither wraps nor
// carries into the leading byte offset above it.
__device__ __forceinline__ unsigned long long la_wgmma_advance(
    unsigned long long base, int sixteenths)
{
    const unsigned int low = (unsigned int)base + (unsigned int)sixteenths;
    return (base & 0xFFFFFFFF00000000ull) | low;
}
__device__ __forceinline__ void la_wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void la_wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void la_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
__device__ __forceinline__ void la_wgmma_wait_prior() {
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
}
"""


@dataclass(frozen=True)
class SharedOperand:
    """Where a dot operand lies: the `load_shared` that made it (its tensor and origin) and the
    tensor dimensions of the operand's (rows, k) sides (`dims`, as `derive_descriptor` takes
    them: M or N first, K second)."""

    load: LoadShared
    dims: tuple[int, int]

    @property
    def tensor(self) -> SharedTensor:
        return self.load.src


@dataclass(frozen=True)
class OperandDescriptors:
    """The constant part of one operand's descriptors (`descriptor`: major-ness, swizzle, LBO,
    SBO; its start is that of the first checked tile) and the start byte offset of each
    (block, k step) tile as an `Expr` over the warpgroup index and the load's offsets
    (`starts[block][k_step]`), with `checked`, every distinct tile origin verified and its
    descriptor."""

    descriptor: WgmmaDescriptor
    starts: tuple[tuple[Expr, ...], ...]
    checked: tuple[tuple[tuple[int, ...], WgmmaDescriptor], ...]

    @property
    def fields(self) -> int:
        """The descriptor's bits other than the start address."""
        d = self.descriptor
        return (
            (d.leading_byte_offset >> 4) << 16
            | (d.stride_byte_offset >> 4) << 32
            | MODE_CODES[d.swizzle] << 62
        )

    @property
    def transposed(self) -> int:
        """The instruction's transpose immediate: 1 for an M/N-major tile."""
        return int(self.descriptor.major == "mn")


@dataclass(frozen=True)
class WgmmaPlan:
    """How a `dot` runs as ``wgmma.mma_async`` (see the module docstring): `dtype`, the
    instruction width `n`, the accumulator layout `c_layout` and its repeats `c_repeats`
    (``c_layout == c_repeats * F_D``), the operands' shared tiles `a` and `b` and their
    descriptors `a_descriptors`, `b_descriptors`; one call per (k step, block). With A in
    registers `a`, `a_descriptors` are None and `a_layout` is a's layout, `a_blocks[k][r]` the
    block of its repeats (``a_layout == a_repeats * F_A``) that call (k, r) reads."""

    dtype: DataType
    n: int
    c_layout: RegisterLayout
    c_repeats: RegisterLayout
    a: SharedOperand | None
    b: SharedOperand
    a_descriptors: OperandDescriptors | None
    b_descriptors: OperandDescriptors
    k_steps: int
    a_layout: RegisterLayout | None = None
    a_blocks: tuple[tuple[int, ...], ...] | None = None

    @property
    def instruction(self) -> str:
        kind = _KINDS[self.dtype]
        return f"wgmma.mma_async.sync.aligned.m64n{self.n}k16.f32.{kind}.{kind}"

    @property
    def registers(self) -> int:
        """Accumulator registers per thread of one call (N' / 2)."""
        return self.n // 2

    @property
    def blocks(self) -> int:
        return self.c_repeats.local_size

    def claims(self) -> tuple[Claim, ...]:
        """Each checked tile's descriptor against its shared layout, and the accumulator
        mapping against c's layout (see the module docstring)."""
        claims = []
        for name, operand, found in (
            ("a", self.a, self.a_descriptors),
            ("b", self.b, self.b_descriptors),
        ):
            if operand is None or found is None:
                continue
            for origin, descriptor in found.checked:
                emitted, required = descriptor.claim(operand.tensor.layout, origin, operand.dims)
                claims.append(Claim(f"wgmma descriptor {name} at {origin}", emitted, required))
        fragment = wgmma_fragment("d", self.n)
        size = self.registers
        c_layout = self.c_layout

        def emitted_c(t: Any, i: Any) -> tuple[Any, Any]:
            row, col = fragment.ptx.map(t % WARPGROUP_SIZE, i % size)
            corner_row, corner_col = c_layout.map(
                WARPGROUP_SIZE * (t // WARPGROUP_SIZE), size * (i // size)
            )
            return corner_row + row, corner_col + col

        threads, local = c_layout.num_threads, c_layout.local_size
        if self.a_layout is not None and self.a_blocks is not None:
            claims.append(self._register_a_claim())
        claims.append(
            Claim(
                "wgmma accumulator c",
                FunctionLayout(c_layout.shape, threads, local, emitted_c, "c"),
                c_layout,
            )
        )
        return tuple(claims)

    def _register_a_claim(self) -> Claim:
        """A in registers: over the calls q = k step * blocks + block, register ``8 a_block(q)
        + j`` of thread t (emitted: what a's layout puts there) must be the F_A element (t, j)
        of the call's A tile: rows from its accumulator block's corner, columns 16 k."""
        a_layout, c_layout = self.a_layout, self.c_layout
        assert a_layout is not None and self.a_blocks is not None
        fragment = wgmma_fragment("a")
        per = fragment.layout.local_size
        blocks = [block for _ in range(self.k_steps) for block in range(self.blocks)]
        steps = [k for k in range(self.k_steps) for _ in range(self.blocks)]
        a_blocks = [self.a_blocks[k][r] for k, r in zip(steps, blocks)]
        size = self.registers

        def emitted_a(t: Any, p: Any) -> tuple[Any, ...]:
            return a_layout.map(t, per * table_lookup(a_blocks, p // per) + p % per)

        def required_a(t: Any, p: Any) -> tuple[Any, Any]:
            q, j = p // per, p % per
            row, col = fragment.ptx.map(t % WARPGROUP_SIZE, j)
            corner = c_layout.map(
                WARPGROUP_SIZE * (t // WARPGROUP_SIZE), size * table_lookup(blocks, q)
            )
            return corner[0] + row, WGMMA_K * table_lookup(steps, q) + col

        count = per * len(a_blocks)
        threads = a_layout.num_threads
        return Claim(
            "wgmma operand a in registers",
            FunctionLayout(a_layout.shape, threads, count, emitted_a, "emitted_a"),
            FunctionLayout(a_layout.shape, threads, count, required_a, "required_a"),
        )


def _walk_lists(body: Sequence[Instruction]) -> Iterator[Sequence[Instruction]]:
    yield body
    for instruction in body:
        for inner in instruction.bodies():
            yield from _walk_lists(inner)


def operand_uses(program: Program) -> dict[int, int]:
    """How many instruction operands read each tensor, by ``id`` (all bodies included)."""
    uses: dict[int, int] = {}
    for instruction in program.walk():
        for operand in instruction.operands():
            uses[id(operand)] = uses.get(id(operand), 0) + 1
    return uses


def shared_operand_dots(program: Program) -> dict[int, tuple[LoadShared | None, LoadShared]]:
    """The dots whose b (and maybe a) comes straight from shared memory, in every instruction
    list of `program`: `shared_operand_dots_in` of each."""
    uses = operand_uses(program)
    found = {}
    for body in _walk_lists(program.body):
        found.update(shared_operand_dots_in(body, uses))
    return found


def shared_operand_dots_in(
    body: Sequence[Instruction], uses: Mapping[int, int]
) -> dict[int, tuple[LoadShared | None, LoadShared]]:
    """The dots of one instruction list whose b (and maybe a) comes straight from shared
    memory: ``id(dot) -> (load of a or None, load of b)``, where each load is in the list
    before the dot, its result is read by that dot alone (`uses`, from `operand_uses`), and
    what stands between the load and the dot has no body (no loop or branch), no barrier of
    the block, and neither stores nor copies into the load's tensor nor releases a tile of it
    (so its tile is unchanged when the dot runs: after a barrier or a release, another
    thread's next write may land before a load written at the dot).
    The lowering asks again for the copies of an unrolled loop's body, which are new
    instructions over the same tensors."""
    found = {}
    for position, instruction in enumerate(body):
        if not isinstance(instruction, Dot) or instruction.a is instruction.b:
            continue
        loads: list[LoadShared | None] = []
        for operand in (instruction.a, instruction.b):
            loads.append(None)
            written: set[str] = set()
            for earlier in range(position - 1, -1, -1):
                candidate = body[earlier]
                if candidate.bodies() or isinstance(candidate, instructions.Sync):
                    break
                if isinstance(candidate, LoadShared) and candidate.out is operand:
                    if uses.get(id(operand)) == 1 and candidate.src.name not in written:
                        loads[-1] = candidate
                    break
                if isinstance(
                    candidate,
                    (
                        instructions.StoreShared,
                        instructions.CopyAsync,
                        instructions.CopyBulk,
                        instructions.CopyBulkRelease,
                    ),
                ):
                    written.add(candidate.dst.name)
        b_load = loads[1]
        if b_load is not None:
            found[id(instruction)] = (loads[0], b_load)
    return found


def _corners(
    c_layout: RegisterLayout, size: int, groups: int
) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
    """Per block r: (corner of warpgroup 0, step per warpgroup), or None when some block's
    corner is not warpgroup 0's plus g times one step."""
    corners = []
    for block in range(c_layout.local_size // size):
        points = [c_layout.map(WARPGROUP_SIZE * g, size * block) for g in range(groups)]
        first = tuple(int(x) for x in points[0])
        step = (0, 0) if groups == 1 else tuple(int(x) - y for x, y in zip(points[1], first))
        for g, point in enumerate(points):
            if tuple(int(x) for x in point) != (first[0] + g * step[0], first[1] + g * step[1]):
                return None
        corners.append((first, step))
    return corners


def _operand_descriptors(
    operand: SharedOperand,
    offsets: Sequence[Expr],
    values: Mapping[str, range],
    rows: int,
    tile_corners: Sequence[Sequence[Expr]],
    group: Expr,
    groups: int,
    k_steps: int,
) -> OperandDescriptors | None:
    """The descriptors of every (block, k step) tile of one operand (see `WgmmaPlan`), or None.

    `tile_corners[block]` is the tile's (rows side, k side) corner in the operand's own
    coordinates as `Expr`s over `group` (the warpgroup index); each k step moves the second by
    16. `offsets` are the load's (abstract) offsets over the variables of `values`."""
    tensor = operand.tensor
    layout = tensor.layout
    element_bits = tensor.dtype.nbits
    linear = unswizzled(layout)
    names = sorted(values)
    points = 1
    for name in names:
        points *= len(values[name])
    if points * groups > MAX_ORIGINS:
        return None

    def origin(corner: Sequence[Expr], k_step: int) -> list[Expr]:
        coord = [as_expr(o) for o in offsets]
        side = (corner[0], corner[1] + WGMMA_K * k_step)
        for dim, x in zip(operand.dims, side):
            coord[dim] = coord[dim] + x
        return coord

    starts = []
    for corner in tile_corners:
        per_step = []
        for k_step in range(k_steps):
            coord = origin(corner, k_step)
            per_step.append(simplify(as_expr(linear.offset(tuple(coord))) * (element_bits // 8)))
        starts.append(tuple(per_step))
    reference = None
    checked: dict[tuple[int, ...], WgmmaDescriptor] = {}
    for choice in itertools.product(*(values[name] for name in names)):
        env = dict(zip(names, choice))
        for g in range(groups):
            env[group.name] = g
            for block, corner in enumerate(tile_corners):
                for k_step in range(k_steps):
                    point = tuple(int(evaluate(x, env)) for x in origin(corner, k_step))
                    if any(not 0 <= p < s for p, s in zip(point, layout.shape)):
                        return None
                    try:
                        found = derive_descriptor(layout, element_bits, point, operand.dims, rows)
                    except LayoutError:  # a tile the layout cannot hold: no descriptor
                        return None
                    if found is None or found.start != int(evaluate(starts[block][k_step], env)):
                        return None
                    shape = (found.major, found.swizzle, found.leading_byte_offset)
                    shape += (found.stride_byte_offset,)
                    if reference is None:
                        reference = (shape, found)
                    elif reference[0] != shape:
                        return None
                    checked.setdefault(point, found)
    if reference is None:
        return None
    return OperandDescriptors(reference[1], tuple(starts), tuple(checked.items()))


def plan_wgmma(
    dot: Dot,
    loads: tuple[LoadShared | None, LoadShared],
    arch: str,
    group: Expr,
    abstract: tuple[
        tuple[Sequence[Expr], Mapping[str, range]] | None,
        tuple[Sequence[Expr], Mapping[str, range]],
    ],
) -> WgmmaPlan | None:
    """The `WgmmaPlan` of `dot`, whose b (and a, unless it is None) the `loads` made
    (`shared_operand_dots`), on `arch`, or None (see the module docstring). `group` is the
    warpgroup index variable (over 0 .. groups - 1); `abstract` holds each load's offsets over
    fresh variables and their values (`backend.lower.memory.offset_values`)."""
    if arch_number(arch) != WGMMA_ARCH or not arch.endswith("a"):
        return None
    dtype = dot.a.dtype
    if dtype not in _KINDS or dot.b.dtype != dtype or dot.c.dtype != dtypes.f32:
        return None
    if not (dot.a.layout.rank == dot.b.layout.rank == dot.c.layout.rank == 2):
        return None
    (m, k), (_, n) = dot.a.layout.shape, dot.b.layout.shape
    threads = dot.c.layout.num_threads
    if m % WGMMA_M or k % WGMMA_K or n % 8 or threads % WARPGROUP_SIZE:
        return None
    groups = threads // WARPGROUP_SIZE
    c_layout = dot.c.layout
    for width in range(min(n, MAX_N) // 8 * 8, 0, -8):
        repeats = divide_or_none(c_layout, wgmma_fragment("d", width).layout)
        if repeats is not None and n % width == 0:
            break
    else:
        return None
    size = width // 2
    corners = _corners(c_layout, size, groups)
    if corners is None:
        return None
    a_load, b_load = loads
    k_steps = k // WGMMA_K
    b = SharedOperand(b_load, (b_load.src.layout.rank - 1, b_load.src.layout.rank - 2))
    b_corners = [(first[1] + group * step[1], as_expr(0)) for first, step in corners]
    b_offsets, b_values = abstract[1]
    b_found = _operand_descriptors(b, b_offsets, b_values, width, b_corners, group, groups, k_steps)
    if b_found is None:
        return None
    if a_load is None:
        a_blocks = _register_a_blocks(dot.a.layout, repeats, k_steps)
        if a_blocks is None:
            return None
        return WgmmaPlan(
            dtype, width, c_layout, repeats, None, b, None, b_found, k_steps, dot.a.layout, a_blocks
        )
    a = SharedOperand(a_load, (a_load.src.layout.rank - 2, a_load.src.layout.rank - 1))
    a_corners = [(first[0] + group * step[0], as_expr(0)) for first, step in corners]
    a_abstract = abstract[0]
    if a_abstract is None:
        return None
    a_found = _operand_descriptors(
        a, a_abstract[0], a_abstract[1], WGMMA_M, a_corners, group, groups, k_steps
    )
    if a_found is None:
        return None
    return WgmmaPlan(dtype, width, c_layout, repeats, a, b, a_found, b_found, k_steps)


def _register_a_blocks(
    a_layout: RegisterLayout, c_repeats: RegisterLayout, k_steps: int
) -> tuple[tuple[int, ...], ...] | None:
    """For A in registers: per k step and accumulator block, the block of a's repeats (``a =
    R_A * F_A``) holding that block's 64 rows at that k step at the same register in every
    warpgroup, or None when a does not divide by F_A or some block is missing."""
    a_repeats = divide_or_none(a_layout, wgmma_fragment("a").layout)
    if a_repeats is None:
        return None
    a_table, c_table = a_repeats.table(), c_repeats.table()
    found = []
    for k_step in range(k_steps):
        step = np.full(c_table.shape[0], k_step, dtype=np.int64)
        row = []
        for block in range(c_repeats.local_size):
            a_block = find_block(a_table, np.stack([c_table[:, block, 0], step], axis=-1))
            if a_block is None:
                return None
            row.append(a_block)
        found.append(tuple(row))
    return tuple(found)


def pin_words(words: str, count: int) -> str:
    """An empty ``asm`` that reads and writes each of the 32-bit words ``words[0..count)``: the
    compiler neither moves their reads and writes across it nor keeps copies over it."""
    return "".join(f'asm volatile("" : "+r"({words}[{i}]) :: "memory");' for i in range(count))


@dataclass(frozen=True)
class ChainDescriptor:
    """The B descriptor a chain's first link declares where its later links can read it:
    `name`, the C variable; `pointer`, the shared tensor's byte pointer; `start`, the byte
    offset of its tile (the substituted start expression); `fields`, its constant fields. A
    later link reading B of the same tensor, fields and a start a constant multiple of 16
    bytes away advances it (one add) instead of building its own."""

    name: str
    pointer: str
    start: Expr
    fields: int


def chain_descriptor(
    plan: WgmmaPlan, b: str, substitutions: Mapping[str, Expr], prefix: str
) -> ChainDescriptor:
    """The `ChainDescriptor` that `emit_wgmma` with ``export_b`` declares for `plan`'s first
    B call (`b` the shared byte pointer, `prefix` the dot's local names)."""
    start = simplify(plan.b_descriptors.starts[0][0].substitute(substitutions))
    return ChainDescriptor(f"{prefix}bd", b, start, plan.b_descriptors.fields)


def emit_wgmma(
    plan: WgmmaPlan,
    a: str,
    b: str,
    c: str,
    out: str,
    substitutions: tuple[Mapping[str, Expr], Mapping[str, Expr]],
    prefix: str,
    issue: str = "sync",
    window: int = 0,
    fence: bool = True,
    b_chain: ChainDescriptor | None = None,
    export_b: bool = False,
) -> str:
    """C++ statements computing ``out = a @ b + c`` by the plan's wgmma calls. `a` names the
    shared tensor's byte pointer of A, or a's word array when A is in registers; `b` the shared
    byte pointer of B; `c` and `out` the accumulator word arrays (f32 bits); `substitutions`
    give each operand's original offsets for the fresh variables of its starts; `prefix` makes
    the local names unique. Requires `WGMMA_SOURCE`.

    `issue` (one of `ISSUES`) says how the dot ends. "sync": it waits for its calls and
    writes `out`. The others accumulate into c's words in place and leave `out` unwritten
    (`backend.wgmma_pipeline`): "in_flight", a loop's dot left running, ``wait_group 1``
    completing the previous iteration's (the loop's end waits: `emit_wgmma_drain`); "chain", a
    link of a chain left running: with a `window` W (`ir.program.Program.wgmma_chain_window`)
    it waits until at most W groups run (``wait_group W - 1``: the links before it but the
    last W - 1 are complete, so their A registers are free), with none (0) it does not wait;
    "chain_end", the chain's last link, which waits for every call of the chain. Without
    `fence`, the dot has no proxy-fence mark of its own (no generic write of the thread is
    pending since its last fence: `backend.proxy_fences`). With
    `export_b` (a chain's first link) B's address and first descriptor are declared before
    the dot's block, so that the chain's later links see them (`chain_descriptor` names
    them); given `b_chain`, a later link advances that descriptor where it can."""
    if issue not in ISSUES:
        raise ValueError(f"emit_wgmma: issue={issue!r}; expected one of {ISSUES}")
    local = plan.c_layout.local_size
    if issue != "sync":
        acc = [f"{c}[{i}]" for i in range(local)]
        constraint = "+r"
        lines = ["{", pin_words(c, local)]
    else:
        acc = [f"{prefix}acc{i}" for i in range(local)]
        constraint = "+f"
        lines = ["{"]
        lines += [f"float {name} = __uint_as_float({c}[{i}]);" for i, name in enumerate(acc)]
        pin = "".join(f'asm volatile("" : "+f"({name}) :: "memory");' for name in acc)
        lines.append(pin)
    if fence:
        lines.append(PROXY_FENCE_MARK)
    if plan.a_descriptors is not None:
        lines.append(f"const unsigned int {prefix}a = (unsigned int)__cvta_generic_to_shared({a});")
    # B's declarations: before the block for a chain's first link, else in it.
    declared = [f"const unsigned int {prefix}b = (unsigned int)__cvta_generic_to_shared({b});"]
    b_descriptor = _descriptor_calls(
        plan.b_descriptors, substitutions[1], f"{prefix}b", declared, _chain_base(b_chain, b)
    )
    if export_b:
        lines = [*declared, *lines]
    else:
        lines += declared
    lines.append("la_wgmma_fence();")
    size = plan.registers
    registers = ", ".join(f"%{j}" for j in range(size))
    b_major = plan.b_descriptors.transposed
    if plan.a_descriptors is None:
        words = ", ".join(f"%{size + j}" for j in range(A_WORDS))
        operands = f"{{{words}}}, %{size + A_WORDS}, p, 1, 1, {b_major}"
    else:
        operands = f"%{size}, %{size + 1}, p, 1, 1, {plan.a_descriptors.transposed}, {b_major}"
    text = (
        "{ .reg .pred p; setp.ne.b32 p, 1, 0; "
        f"{plan.instruction} {{{registers}}}, {operands}; }}\\n"
    )
    if plan.a_descriptors is not None:
        a_descriptor = _descriptor_calls(plan.a_descriptors, substitutions[0], f"{prefix}a", lines)
    for k_step in range(plan.k_steps):
        for block in range(plan.blocks):
            if plan.a_descriptors is None:
                assert plan.a_blocks is not None
                first = A_WORDS * plan.a_blocks[k_step][block]
                inputs = [f'"r"({a}[{first + j}])' for j in range(A_WORDS)]
            else:
                inputs = [f'"l"({a_descriptor(block, k_step)})']
            inputs.append(f'"l"({b_descriptor(block, k_step)})')
            outputs = ", ".join(f'"{constraint}"({acc[size * block + j]})' for j in range(size))
            lines.append(f'asm volatile("{text}" : {outputs} : {", ".join(inputs)});')
    lines.append("la_wgmma_commit();")
    if issue != "sync":
        in_chain = (
            f'asm volatile("wgmma.wait_group.sync.aligned {window - 1};\\n" ::: "memory");'
            if window
            else ""
        )
        wait = {
            "in_flight": "la_wgmma_wait_prior();",
            "chain": in_chain,
            "chain_end": "la_wgmma_wait();",
        }
        lines += [wait[issue], pin_words(c, local), "}"]
        return "\n".join(lines) + "\n"
    lines.append("la_wgmma_wait();")
    lines.append(pin)
    lines += [f"{out}[{i}] = __float_as_uint({name});" for i, name in enumerate(acc)]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _chain_base(chain: ChainDescriptor | None, pointer: str) -> ChainDescriptor | None:
    """`chain` where a link reading B through `pointer` may advance its descriptor."""
    return chain if chain is not None and chain.pointer == pointer else None


def _descriptor_calls(
    descriptors: OperandDescriptors,
    substitutions: Mapping[str, Expr],
    address: str,
    lines: list[str],
    base: ChainDescriptor | None = None,
) -> Callable[[int, int], str]:
    """The C expression of each (block, k step) call's descriptor of one operand, as a
    function: the first call's descriptor is computed once (appended to `lines` as
    ``<address>d``, from the shared address variable `address`), and a call whose start lies a
    constant multiple of 16 bytes from the first's advances it (`la_wgmma_advance`: one add on
    the low word, where the full form masks, shifts and ORs again); any other call computes its
    own."""
    fields = f"0x{descriptors.fields:016X}ull"
    starts = [[simplify(x.substitute(substitutions)) for x in row] for row in descriptors.starts]
    first = starts[0][0]
    shift = None if base is None else simplify(first - base.start)
    if (
        base is not None
        and base.fields == descriptors.fields
        and is_constant(shift)
        and shift.value % 16 == 0
    ):
        # A later link of a chain: the first link's descriptor, advanced.
        lines.append(
            f"const unsigned long long {address}d = "
            f"la_wgmma_advance({base.name}, {shift.value // 16});"
        )
    else:
        lines.append(
            f"const unsigned long long {address}d = "
            f"la_wgmma_descriptor({address} + (unsigned int)({first.to_c()}), {fields});"
        )

    def call(block: int, k_step: int) -> str:
        start = starts[block][k_step]
        offset = simplify(start - first)
        if is_constant(offset) and offset.value % 16 == 0:
            return f"la_wgmma_advance({address}d, {offset.value // 16})"
        return f"la_wgmma_descriptor({address} + (unsigned int)({start.to_c()}), {fields})"

    return call


def emit_wgmma_drain(c: str, count: int) -> str:
    """After a loop whose dot stayed in flight: wait for it, then the accumulator words
    ``c[0..count)`` hold its result."""
    return f"la_wgmma_wait();\n{pin_words(c, count)}\n"

"""Bulk copies (`ir.instructions.CopyBulk`) as Hopper's bulk tensor copies (TMA), and their
tensor maps.

A `copy_bulk` moves a tile of a global view into a shared tensor for the whole block. On sm_90
and newer, where every bulk copy into a shared tensor qualifies, the lowering issues each as one
``cp.async.bulk.tensor`` from one thread, completed on an mbarrier of the tile's slot in its
stage, and `copy_bulk_wait` waits on that barrier's phase; elsewhere it falls back to
``cp.async`` by every thread, the wait to waiting for all of the thread's copies and a barrier.

A shared tensor's bulk copies qualify (`plan_bulk_copies`) when
- its element type is 8, 16, 32 or 64 bits wide and every copy into it has the same tile, over
  its trailing dimensions (the copy's rank, 1 to 5), at constant trailing offsets: the
  *slots* (e.g. the 64-column panels of a wgmma B buffer), not overlapping; the leading
  coordinates name a *stage* (none: the tensor is one stage);
- `layout_algebra.tma_box.derive_box` finds the box, with one swizzle mode, that writes every
  slot of every stage as the tensor's layout places it, the stages lying `stage_bytes` apart
  (then a slot's address is the tensor's base plus its start plus the linear stage index times
  that);
- every wait on the tensor names a tile at constant trailing offsets that is a union of whole
  slots (it waits on each of their barriers);
- every source view has a dimension of stride exactly 1, the same one for all: the box's
  innermost, the others keep their order (`unit_stride_order`, the box's `order`), so A^T of a
  row-major A, ``GlobalLayout((k, m), (1, k))``, is copied k innermost; the view's other
  strides are known multiples of 16 bytes (the int parameters they read declared multiples,
  `int_param(multiple_of=...)`); its extents and strides are read at launch, where
  `tensor_map_arguments` checks the driver's other rules.

The barriers: one ``mbarrier`` (8 bytes of static shared memory) per slot of each stage,
initialised with an arrival count of 1 when the kernel starts; or, where every wait and release
of the tensor names whole stages (`BulkTensorPlan.per_stage`: a wgmma B stage of four panels),
one per stage, counting an arrival per slot, so that a k-tile costs one wait however many boxes
fill it. A copy into slot j of stage s (barrier i = s * slots + j, or s): thread 0 fences the
async proxy (shared memory the block wrote or read before the barrier that precedes the copy is
done with), arrives on barrier i expecting the tile's bytes, and issues the copy, which
completes the phase. The fence is left out where no thread touches the tensor through the
generic proxy (`async_only`): its only writes are these copies and its only reads wgmma
descriptors, so every access to it is the async proxy's, ordered by the barriers alone (on
sm_90a the fence is a full memory barrier of the issuing thread). A wait: every thread waits,
for each barrier i of the tile, for its phase of parity ``(phases >> i) & 1`` and flips that
bit (a per-thread 32-bit mask of the tensor: at most 32 barriers). The IR's rule that a `sync`
separates a wait on a tile from the next bulk copy into it keeps every thread's parity one
phase behind at most.

Releases (`ir.instructions.CopyBulkRelease`): a tensor the program releases has a second
barrier beside each barrier, its *free* barrier, initialised with an arrival count of its warps
(of its threads where the block is not whole warps). A release of a tile: each warp
synchronises its lanes (``__syncwarp``: their reads of the slot are done) and its lane 0
arrives on the free barrier of each slot of the tile (of its stage, once, where the stage
shares one), with release semantics; where the thread count is not a multiple of 32, every
thread arrives. A copy into slot j of stage s: the copying warp first waits on the slot's (or
stage's) free barrier for the phase of parity ``(free_phases >> b) & 1`` (acquire), b = s *
slots + j whichever barrier it is, and flips that bit: each copy of a stage then waits for the
release of its own last copy, in whatever order a stage's copies are issued. The mask starts at
all ones: a fresh barrier counts its phase before the first as complete, so each slot's first
copy does not wait. The IR's release rule (one release between two copies into a slot, nothing
but a release standing in for it) keeps the phases in step. Where the tensor's copies fall back
to ``cp.async``, a release is a barrier of the block.

Copies shared by a cluster (`ir.Program.cluster`, sm_90 and newer): where no block index
the cluster spans reaches a released tensor's copies, waits and releases or the control flow
around them (`shared_copies`), every block of a cluster copies the same tiles into the same
stages in step, so block r of the C issues only part r of each copy (the box cut along its
outermost dimension into C parts, each found by `derive_box` and proved like a whole box;
`BulkTensorPlan.parts`) with ``.multicast::cluster`` into every block's shared memory. Each
block's own thread still arrives on its barrier expecting the whole tile's bytes, and the
parts of the other blocks complete it. A free barrier counts the releasing warps of all C
blocks, each release arriving on the barrier of every block (``mapa`` and a remote arrival),
so the thread issuing the next copy into a stage waits until no block of the cluster still
reads it. The cluster synchronises once the barriers are initialised (no part or arrival
reaches a barrier before it is) and before the kernel exits (no block leaves while another may
still arrive on its barriers). Tensors that do not qualify are copied whole, as without a
cluster.

A tensor map is one 128-byte kernel parameter per (source view, box): the launch encodes it with
``cuTensorMapEncodeTiled`` from the argument's address and the view's extents and strides at the
launch's int arguments, in the box's order (`backend.kernel.KernelTensorMapParam`), cached per
those values; a copy passes its coordinates in that order too, innermost first.
`BulkTensorPlan.claims` states, per stage and slot, that the box writes each element where the
layout holds it, for `proofs.lowering_validation.validate_lowering`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from backend.tensor_core import Claim, arch_number
from ir import instructions
from ir.program import BLOCK_INDICES, Program
from ir.values import GlobalTensor, SharedTensor
from layout_algebra.errors import LayoutError
from layout_algebra.hardware import WARP_SIZE
from layout_algebra.swizzle_modes import SWIZZLE_BITS
from layout_algebra.symbolic import Expr, as_expr
from layout_algebra.symbolic.divisors import known_divisor
from layout_algebra.tma_box import ELEMENT_BITS, MAX_RANK, TmaBox, derive_box
from layout_algebra.validation import is_int

BULK_COPY_ARCH = 90
"""The first architecture with bulk tensor copies (sm_90)."""
MAX_BARRIERS = 32
"""The most barriers (slots of stages) of one shared tensor: a wait's parity is a bit of a
32-bit mask."""
TENSOR_MAP_PREFIX = "la_tmap"
"""Names of the tensor-map kernel parameters (``la_tmap0``, ...)."""

BULK_COPY_SOURCE = r"""
struct __align__(64) la_tensor_map { unsigned long long words[16]; };

static __device__ __forceinline__ void la_mbarrier_init(unsigned long long* barrier, unsigned count)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(barrier);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(address), "r"(count) : "memory");
}

static __device__ __forceinline__ void la_mbarrier_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

static __device__ __forceinline__ void la_proxy_fence_shared()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

static __device__ __forceinline__ void la_mbarrier_expect(unsigned long long* barrier,
                                                          unsigned bytes)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(barrier);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 ::"r"(address), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void la_mbarrier_arrive(unsigned long long* barrier)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(barrier);
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(address) : "memory");
}

static __device__ __forceinline__ bool la_mbarrier_try_wait(unsigned long long* barrier,
                                                            unsigned parity)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(barrier);
    unsigned done;
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(address), "r"(parity) : "memory");
    return done != 0;
}

static __device__ __forceinline__ void la_mbarrier_wait(unsigned long long* barrier,
                                                        unsigned parity)
{
    while (!la_mbarrier_try_wait(barrier, parity)) {
    }
}
"""
"""The device helpers of bulk copies (after the includes)."""

CLUSTER_COPY_SOURCE = r"""
static __device__ __forceinline__ unsigned la_cluster_rank()
{
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}

static __device__ __forceinline__ void la_cluster_sync_aligned()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void la_cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release;\n"
                 "barrier.cluster.wait.acquire;\n" ::: "memory");
}

static __device__ __forceinline__ void la_proxy_fence_cluster()
{
    asm volatile("fence.proxy.async.shared::cluster;\n" ::: "memory");
}

static __device__ __forceinline__ void la_mbarrier_arrive_remote(unsigned long long* barrier,
                                                                 unsigned rank)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(barrier);
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(address), "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n"
                 ::"r"(remote) : "memory");
}
"""
"""The device helpers of bulk copies shared by the blocks of a cluster (after
`BULK_COPY_SOURCE`): the block's rank in its cluster, the cluster's barrier (the aligned form
where every thread of a warp runs it together), the async proxy's fence over the cluster's
shared memory, and an arrival on the barrier at the same address in another block of the
cluster. The arrival keeps the default semantics (a release at the CTA's scope), as CUTLASS's
cluster pipelines do: what it orders are the warp's reads of a stage, which the wait on its
copy's barrier and, for wgmma, the wait on its group completed before it; at the cluster's
scope it would fence every load the warp has in flight (a ``MEMBAR`` in each k-tile, measured
26 to 71 % slower on an H100 at the prefill points measured)."""


def _bulk_tensor_helper(rank: int, multicast: bool) -> str:
    """The device helper issuing a bulk tensor copy of a rank-`rank` box (coordinates innermost
    first); with `multicast`, into every block of the cluster its 16-bit mask names."""
    name, mask, suffix, operand, extra = "load", "", "", "", ""
    if multicast:
        name, mask = "multicast", "unsigned short mask, "
        suffix, operand, extra = ".multicast::cluster", ", %3", '"h"(mask), '
    first = 4 if multicast else 3
    coords = ", ".join(f"int c{i}" for i in range(rank))
    operands = ", ".join(f"%{i + first}" for i in range(rank))
    inputs = ", ".join(f'"r"(c{i})' for i in range(rank))
    return (
        f"static __device__ __forceinline__ void la_tma_{name}_{rank}d(void* shared, "
        f"const la_tensor_map* map, unsigned long long* barrier, {mask}{coords})\n"
        "{\n"
        "    const unsigned address = (unsigned)__cvta_generic_to_shared(shared);\n"
        "    const unsigned bar = (unsigned)__cvta_generic_to_shared(barrier);\n"
        f'    asm volatile("cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile'
        f".mbarrier::complete_tx::bytes{suffix}"
        f' [%0], [%1, {{{operands}}}], [%2]{operand};\\n"\n'
        f'                 ::"r"(address), "l"(map), "r"(bar), {extra}{inputs} : "memory");\n'
        "}\n"
    )


def tma_load_helper(rank: int) -> str:
    """The device helper issuing a bulk tensor copy of a rank-`rank` box (coordinates innermost
    first, as the tensor map's dimensions)."""
    return _bulk_tensor_helper(rank, False)


def tma_multicast_helper(rank: int) -> str:
    """The device helper issuing a bulk tensor copy of a rank-`rank` box that lands at the same
    shared address in every block of the cluster named in the 16-bit `mask`, each completing
    its own barrier at the same address."""
    return _bulk_tensor_helper(rank, True)


@dataclass(frozen=True)
class TensorMapUse:
    """One tensor-map kernel parameter: the `source` view's tile of `box` (see
    `backend.kernel.KernelTensorMapParam`, which the launch builds from it)."""

    name: str
    source: GlobalTensor
    box: TmaBox


@dataclass(frozen=True)
class BulkTensorPlan:
    """How the bulk copies into one shared tensor are written.

    Every copy has the tile of `box` (extents over the tensor's trailing dimensions), placed at
    one of the constant trailing origins `slots`, in a stage named by the leading coordinates
    (`stages`: the leading extents, () for one stage). Slot j of stage s is written at byte
    ``slot_starts[j] + s * stage_bytes`` of the tensor, with the box's swizzle; its barrier is
    ``s * len(slots) + j``, or ``s`` where `per_stage`. `checked`: the (origin, box) of every
    stage's every slot, each found by `derive_box`. `released`: the program releases the
    tensor's tiles (`ir.instructions.CopyBulkRelease`), so each barrier has a free barrier as
    well. `per_stage`: every wait and release of the tensor names whole stages, so a stage's
    slots share one barrier (each copy arrives on it expecting its bytes) and one free barrier
    (each warp arrives once a release). `multicast`: the blocks of a cluster that share each
    copy (1: none, `shared_copies`): block r of the C issues part r of the tile, cut along the
    box's outermost dimension (`split_dim`), which lands in every block's shared memory and
    completes each one's barrier, so every barrier still waits for the whole tile's bytes;
    `parts` holds the (origin, box) of each part of each stage's each slot (`checked`'s order,
    C parts each), each found by `derive_box` and lying `part_bytes` after the one before."""

    tensor: SharedTensor
    box: TmaBox
    stages: tuple[int, ...]
    stage_bytes: int
    slots: tuple[tuple[int, ...], ...]
    slot_starts: tuple[int, ...]
    checked: tuple[tuple[tuple[int, ...], TmaBox], ...]
    released: bool = False
    per_stage: bool = False
    multicast: int = 1
    parts: tuple[tuple[tuple[int, ...], TmaBox], ...] = ()

    @property
    def split_dim(self) -> int:
        """The tile dimension a shared copy is cut along: the box's outermost."""
        return self.box.order[0]

    @property
    def part_extent(self) -> int:
        """The extent along `split_dim` of the part of a copy one block issues (the box's own
        without multicast)."""
        return self.box.extents[self.split_dim] // self.multicast

    @property
    def part_bytes(self) -> int:
        """Bytes of the part of a copy one block issues: part r lands ``r * part_bytes`` past
        the slot's start."""
        return self.box.nbytes // self.multicast

    @property
    def copy_box(self) -> TmaBox:
        """The box each block's copy names in its tensor map: a part's where the copies are
        multicast, else `box`."""
        return self.parts[0][1] if self.multicast > 1 else self.box

    @property
    def count(self) -> int:
        """Barriers: one per stage where `per_stage`, else one per slot of each stage."""
        return math.prod(self.stages) * (1 if self.per_stage else len(self.slots))

    @property
    def arrivals(self) -> int:
        """Arrivals that complete a phase of a (full) barrier: one per copy it counts, the
        stage's slots where `per_stage`."""
        return len(self.slots) if self.per_stage else 1

    def barrier(self, stage: str, slot: int) -> str:
        """The index (C text) of the barrier of slot `slot` of the stage whose linear index is
        the C text `stage`."""
        return f"({stage})" if self.per_stage else f"({stage}) * {len(self.slots)} + {slot}"

    def phase_bit(self, stage: str, slot: int) -> str:
        """The bit (C text) of a copy's parity of its free barrier in the mask of its thread:
        one per slot of each stage, so that each of a stage's copies waits for the release
        of its own last copy, in whatever order they are issued."""
        return f"({stage}) * {len(self.slots)} + {slot}"

    @property
    def dims(self) -> tuple[int, ...]:
        """The tensor's dimensions a copy spans (its trailing ones)."""
        rank = len(self.tensor.shape)
        return tuple(range(rank - len(self.box.extents), rank))

    def stage_index(self, offsets: tuple[Expr, ...]) -> Expr | int:
        """The linear stage index of a tile whose leading coordinates are `offsets`."""
        index: Expr | int = 0
        for offset, extent in zip(offsets, self.stages):
            index = index * extent + offset
        return index

    def slot(self, origin: tuple[int, ...]) -> int:
        """The slot of a copy's trailing origin."""
        return self.slots.index(origin)

    def covered(self, origin: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
        """The slots inside the tile `shape` at trailing `origin` (a wait's tile)."""
        return tuple(
            j
            for j, slot in enumerate(self.slots)
            if all(
                o <= x and x + e <= o + w
                for o, x, e, w in zip(origin, slot, self.box.extents, shape)
            )
        )

    def tile_slots(
        self, offsets: Sequence[Expr], shape: tuple[int, ...]
    ) -> tuple[Expr | int, tuple[int, ...]]:
        """(linear stage index, slots) of the tile `shape` at `offsets` that a wait or a
        release names (its trailing origin constant): the barriers ``stage * len(slots) + j``
        for each j of the slots."""
        lead = len(self.stages)
        origin = tuple(o.value for o in offsets[lead:])
        return self.stage_index(tuple(offsets[:lead])), self.covered(origin, shape)

    def claims(self) -> tuple[Claim, ...]:
        """Per stage and slot: the box writes each element where the layout holds it; with
        `multicast`, each part of it as well."""
        layout = self.tensor.layout
        whole = tuple(
            Claim(
                f"bulk copy of {self.tensor.name} at {origin}",
                *box.claim(layout, origin, self.dims),
            )
            for origin, box in self.checked
        )
        parts = tuple(
            Claim(
                f"shared bulk copy part of {self.tensor.name} at {origin}",
                *box.claim(layout, origin, self.dims),
            )
            for origin, box in self.parts
        )
        return whole + parts


@dataclass(frozen=True)
class BulkCopies:
    """The bulk copies of a kernel written as TMA: `tensors` (shared tensor name -> plan) and
    `maps` (the tensor-map parameters)."""

    tensors: dict[str, BulkTensorPlan]
    maps: tuple[TensorMapUse, ...]

    def map_name(self, copy: instructions.CopyBulk) -> str:
        """The tensor-map parameter of a copy into a planned tensor."""
        box = self.tensors[copy.dst.name].copy_box
        for use in self.maps:
            if use.source.name == copy.src.name and use.box == box:
                return use.name
        raise KeyError(f"no tensor map for {copy.src.name} -> {copy.dst.name}")

    @property
    def ranks(self) -> tuple[int, ...]:
        """The box ranks the kernel issues (one helper each)."""
        return tuple(sorted({len(use.box.extents) for use in self.maps}))

    @property
    def multicast_ranks(self) -> tuple[int, ...]:
        """The box ranks of the copies shared by a cluster's blocks (one helper each)."""
        return tuple(sorted({len(p.box.extents) for p in self.tensors.values() if p.multicast > 1}))

    @property
    def shared(self) -> bool:
        """Whether some tensor's copies are shared by a cluster's blocks: the kernel then
        synchronises the cluster once its barriers are initialised and before it exits."""
        return any(plan.multicast > 1 for plan in self.tensors.values())


NO_BULK_COPIES = BulkCopies({}, ())


def arrives_per_warp(threads: int) -> bool:
    """Whether a release arrives on a free barrier once per warp (the block is whole warps)
    rather than once per thread: the lowering's arrivals and the barrier's count both follow
    it."""
    return threads % WARP_SIZE == 0


def unit_stride_order(strides: Sequence[Expr | int]) -> tuple[int, ...] | None:
    """The dimensions of a view of `strides`, outermost first, in the order its tiles are
    copied: the last one whose stride is exactly 1 innermost, the others in their order; None
    when no stride is 1. ``(k, 1)`` gives (0, 1), ``(1, k)`` (A^T of a row-major A) (1, 0)."""
    units = [d for d, stride in enumerate(strides) if is_int(stride) and stride == 1]
    if not units:
        return None
    return (*(d for d in range(len(strides)) if d != units[-1]), units[-1])


def _constant_origin(offsets: tuple[Expr, ...]) -> tuple[int, ...] | None:
    """The values of `offsets` when all are constants, else None."""
    if not all(o.is_const for o in offsets):
        return None
    return tuple(o.value for o in offsets)


def _boxes(
    tensor: SharedTensor,
    stages: tuple[int, ...],
    slots: list[tuple[int, ...]],
    dims: tuple[int, ...],
    shape: tuple[int, ...],
    order: tuple[int, ...],
    mode: str,
) -> list[tuple[tuple[int, ...], TmaBox]] | None:
    """(origin, box) of every slot of every stage of `tensor` (stages in row-major order, the
    order of their linear index, `BulkTensorPlan.stage_index`) in swizzle `mode`, or None
    where one has no such box."""
    checked = []
    for stage in itertools.product(*(range(extent) for extent in stages)):
        for slot in slots:
            full = (*stage, *slot)
            try:
                box = derive_box(
                    tensor.layout, tensor.dtype.nbits, full, dims, shape, order, [mode]
                )
            except LayoutError:
                return None
            if box is None:
                return None
            checked.append((full, box))
    return checked


def _guarded(
    body: Sequence[instructions.Instruction], guards: tuple[Expr, ...] = ()
) -> Iterator[tuple[instructions.Instruction, tuple[Expr, ...]]]:
    """Every instruction of `body` in program order with the expressions its execution depends
    on: the conditions of the ifs and the bounds of the loops around it."""
    for instruction in body:
        yield instruction, guards
        inner = guards
        if isinstance(instruction, instructions.ForRange):
            inner = (*guards, as_expr(instruction.start), as_expr(instruction.stop))
        elif isinstance(instruction, instructions.If):
            inner = (*guards, as_expr(instruction.cond))
        for nested in instruction.bodies():
            yield from _guarded(nested, inner)


def shared_copies(program: Program) -> frozenset[str]:
    """The shared tensors of `program` whose bulk copies every block of a cluster
    (`ir.Program.cluster`) issues alike: no copy's source or destination offsets, nor any wait
    or release's offsets, nor the condition or bounds of an if or loop around one of them,
    reads a block index the cluster spans (an extent above 1). Such a tensor's blocks copy the
    same tiles into the same stages in the same order, and wait for and release them in step,
    so one block may issue a part of each copy for all of them. Empty without a cluster."""
    if program.cluster_blocks == 1 or program.cluster is None:
        return frozenset()
    spanned = {index.name for index, extent in zip(BLOCK_INDICES, program.cluster) if extent > 1}
    touched: set[str] = set()
    varying: set[str] = set()
    bulk = (instructions.CopyBulk, instructions.CopyBulkWait, instructions.CopyBulkRelease)
    for instruction, guards in _guarded(program.body):
        if not isinstance(instruction, bulk):
            continue
        touched.add(instruction.dst.name)
        if isinstance(instruction, instructions.CopyBulk):
            read = (*instruction.src_offsets, *instruction.dst_offsets)
        else:
            read = tuple(instruction.offsets)
        if any(as_expr(e).free_vars() & spanned for e in (*guards, *read)):
            varying.add(instruction.dst.name)
    return frozenset(touched - varying)


def _with_parts(plan: BulkTensorPlan, order: tuple[int, ...], blocks: int) -> BulkTensorPlan:
    """`plan` with its copies shared by the `blocks` blocks of a cluster (`BulkTensorPlan.parts`),
    or `plan` as it is where a part breaks a rule: the box's outermost extent is not a multiple
    of `blocks`, or a part has no box of the plan's swizzle lying `part_bytes` after the part
    before (its start aligned as the swizzle needs)."""
    if plan.box.extents[plan.split_dim] % blocks:
        return plan
    shared = dataclasses.replace(plan, multicast=blocks)
    split, part_bytes = shared.split_dim, shared.part_bytes
    part_shape = tuple(
        shared.part_extent if d == split else e for d, e in enumerate(plan.box.extents)
    )
    lead = len(plan.stages)
    parts = []
    for origin, box in plan.checked:
        for r in range(blocks):
            start = list(origin)
            start[lead + split] += r * shared.part_extent
            try:
                part = derive_box(
                    plan.tensor.layout,
                    plan.tensor.dtype.nbits,
                    tuple(start),
                    plan.dims,
                    part_shape,
                    order,
                    [box.swizzle],
                )
            except LayoutError:
                return plan
            if part is None or part.start != box.start + r * part_bytes:
                return plan
            parts.append((tuple(start), part))
    return dataclasses.replace(shared, parts=tuple(parts))


def _tensor_plan(
    tensor: SharedTensor,
    copies: list[instructions.CopyBulk],
    waits: list[instructions.CopyBulkWait | instructions.CopyBulkRelease],
    divisor: Callable[[Expr | int], int],
    blocks: int = 1,
) -> BulkTensorPlan | None:
    """The plan of `tensor`'s bulk copies, or None where one of them does not qualify
    (`divisor` as `plan_bulk_copies`'s); `waits`: its waits and releases, each a union of
    whole slots. `blocks` > 1: the blocks of a cluster that copy the tensor's tiles alike
    (`shared_copies`); a released tensor's copies are then shared among them where the tile
    cuts into parts (`_with_parts`)."""
    bits = tensor.dtype.nbits
    shapes = {copy.shape for copy in copies}
    orders = {unit_stride_order(copy.src.layout.strides) for copy in copies}
    if bits not in ELEMENT_BITS or len(shapes) != 1 or len(orders) != 1 or None in orders:
        return None
    (shape,), (order,) = shapes, orders
    for copy in copies:
        # Every stride but the unit one: a multiple of 16 bytes for every argument.
        strides = copy.src.layout.strides
        if any(divisor(strides[d]) * (bits // 8) % 16 for d in order[:-1]):
            return None
    rank, lead = len(shape), len(tensor.shape) - len(shape)
    if not 1 <= rank <= MAX_RANK or lead < 0:
        return None
    slots: list[tuple[int, ...]] = []
    for copy in copies:
        origin = _constant_origin(copy.dst_offsets[lead:])
        if origin is None:
            return None
        if origin not in slots:
            slots.append(origin)
    slots.sort()
    for slot in slots:
        others = [other for other in slots if other != slot]
        if any(all(abs(a - b) < e for a, b, e in zip(slot, o, shape)) for o in others):
            return None  # overlapping slots
    stages = tuple(tensor.shape[:lead])
    if math.prod(stages) * len(slots) > MAX_BARRIERS:
        return None
    dims = tuple(range(lead, len(tensor.shape)))
    # The first swizzle mode (widest first) that writes every stage's every slot: a small tile
    # may match several modes, and its stages need one.
    for mode in SWIZZLE_BITS:
        checked = _boxes(tensor, stages, slots, dims, shape, order, mode)
        if checked is not None:
            break
    else:
        return None
    first = checked[0][1]
    slot_starts = tuple(box.start for _, box in checked[: len(slots)])
    stage_bytes = checked[len(slots)][1].start - first.start if len(checked) > len(slots) else 0
    for index, (_, box) in enumerate(checked):
        stage, slot = divmod(index, len(slots))
        if (box.extents, box.swizzle) != (first.extents, first.swizzle):
            return None
        if box.start != slot_starts[slot] + stage * stage_bytes:
            return None
    released = any(isinstance(wait, instructions.CopyBulkRelease) for wait in waits)
    plan = BulkTensorPlan(
        tensor, first, stages, stage_bytes, tuple(slots), slot_starts, tuple(checked), released
    )
    whole_stages = True
    for wait in waits:
        origin = _constant_origin(wait.offsets[lead:])
        if origin is None or len(wait.shape) != rank:
            return None
        inside = plan.covered(origin, wait.shape)
        if len(inside) * math.prod(shape) != math.prod(wait.shape):
            return None  # the wait's tile is not a union of whole slots
        whole_stages = whole_stages and len(inside) == len(slots)
    if whole_stages and len(slots) > 1:
        plan = dataclasses.replace(plan, per_stage=True)
    if blocks > 1 and released:
        # Without releases nothing tells a block that the others are past a stage.
        plan = _with_parts(plan, order, blocks)
    return plan


def plan_bulk_copies(
    program: Program, arch: str | None, divisor: Callable[[Expr | int], int] = known_divisor
) -> BulkCopies:
    """The bulk copies of `program` written as TMA on `arch` (see the module docstring): none
    before sm_90 or without an architecture. `divisor(stride)` is a number every value of a
    source stride is a multiple of (the lowering's, which knows the int parameters declared
    multiples): each stride but the unit one (the box's innermost) must be a multiple of 16
    bytes for every argument, as a tensor map requires."""
    if arch is None or arch_number(arch) < BULK_COPY_ARCH:
        return NO_BULK_COPIES
    copies: dict[str, list[instructions.CopyBulk]] = {}
    waits: dict[str, list[instructions.CopyBulkWait | instructions.CopyBulkRelease]] = {}
    tensors: dict[str, SharedTensor] = {}
    for instruction in program.walk():
        if isinstance(instruction, instructions.CopyBulk):
            copies.setdefault(instruction.dst.name, []).append(instruction)
            tensors[instruction.dst.name] = instruction.dst
        elif isinstance(instruction, (instructions.CopyBulkWait, instructions.CopyBulkRelease)):
            waits.setdefault(instruction.dst.name, []).append(instruction)
    plans = {}
    shared = shared_copies(program)
    for name, tensor in tensors.items():
        blocks = program.cluster_blocks if name in shared else 1
        plan = _tensor_plan(tensor, copies[name], waits.get(name, []), divisor, blocks)
        if plan is not None:
            plans[name] = plan
    maps: dict[tuple[str, TmaBox], TensorMapUse] = {}
    for name, plan in plans.items():
        for copy in copies[name]:
            key = (copy.src.name, plan.copy_box)
            if key not in maps:
                maps[key] = TensorMapUse(f"{TENSOR_MAP_PREFIX}{len(maps)}", copy.src, plan.copy_box)
    return BulkCopies(plans, tuple(maps.values()))


TMA_FENCE_MARK = "// la: proxy fence before a bulk copy into "
"""Where a bulk tensor copy into a tensor (its name follows) gets `TMA_FENCE`, unless the
lowering finds at the end that the tensor is `async_only`."""
TMA_FENCE = "la_proxy_fence_shared();"
"""The async-proxy fence before a bulk tensor copy."""
CLUSTER_TMA_FENCE = "la_proxy_fence_cluster();"
"""The async-proxy fence before a bulk tensor copy shared by a cluster's blocks (over the
cluster's shared memory)."""


def async_only(program: Program, name: str, generic_reads: set[str]) -> bool:
    """Whether shared tensor `name` is touched by the async proxy alone: no instruction of
    `program` but its allocation, bulk copies, their waits and releases and loads names it, and no
    load from it was written through the generic proxy (`generic_reads`: the tensors some load
    was written from as threads' reads, ldmatrix or plain; the others' loads are wgmma
    descriptors)."""
    if name in generic_reads:
        return False
    kept = (
        instructions.SharedTensorAlloc,
        instructions.CopyBulk,
        instructions.CopyBulkWait,
        instructions.CopyBulkRelease,
        instructions.LoadShared,
    )
    for instruction in program.walk():
        if isinstance(instruction, kept):
            continue
        for field in dataclasses.fields(instruction):
            value = getattr(instruction, field.name)
            if isinstance(value, SharedTensor) and value.name == name:
                return False
    return True

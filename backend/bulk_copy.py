"""Bulk copies (`ir.instructions.CopyBulk`) as Hopper's bulk tensor copies (TMA), and their
tensor maps.

A `copy_bulk` moves a tile of a global view into a shared tensor for the whole block. On sm_90
and newer, where every bulk copy into a shared tensor qualifies, the lowering issues each as one
``cp.async.bulk.tensor`` from one thread, completed on an mbarrier of the destination's stage,
and `copy_bulk_wait` waits on that barrier's phase; elsewhere it falls back to ``cp.async`` by
every thread, the wait to waiting for all of the thread's copies and a barrier.

A shared tensor's bulk copies qualify (`plan_bulk_copies`) when
- its element type is 8, 16, 32 or 64 bits wide and every copy into it has the same tile: its
  trailing dimensions whole (the copy's rank, 1 to 5), at offset 0 in each of them, so a copy
  names a *stage* by its leading coordinates (none: the tensor is one stage);
- `layout_algebra.tma_box.derive_box` finds the box, with one swizzle mode, that writes every
  stage as the tensor's layout places it, the stages lying `stage_bytes` apart (then the stage's
  address is the tensor's base plus the linear stage index times that);
- every wait on the tensor names such a whole stage;
- each source view has a unit innermost stride (its other extents and strides are read at
  launch, where `tensor_map_arguments` checks the driver's rules).

The barriers: one ``mbarrier`` (8 bytes of static shared memory) per stage, initialised with
an arrival count of 1 when the kernel starts. A copy into stage s: thread 0 fences the async
proxy (shared memory the block wrote or read before the barrier that precedes the copy is done
with), arrives on barrier s expecting the tile's bytes, and issues the copy, which completes
the phase. A wait on stage s: every thread waits for barrier s's phase of parity
``(phases >> s) & 1`` and flips that bit (a per-thread 32-bit mask of the tensor: at most 32
stages). The IR's rule that a `sync` separates a wait on a tile from the next bulk copy into it
keeps every thread's parity one phase behind at most.

A tensor map is one 128-byte kernel parameter per (source view, box): the launch encodes it with
``cuTensorMapEncodeTiled`` from the argument's address and the view's extents and strides at the
launch's int arguments (`backend.kernel.KernelTensorMapParam`), cached per those values.
`BulkTensorPlan.claims` states, per stage, that the box writes each element where the layout
holds it, for `proofs.validate_lowering`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from backend.tensor_core import Claim, arch_number
from ir import instructions
from ir.program import Program
from ir.values import GlobalTensor, SharedTensor
from layout_algebra.errors import LayoutError
from layout_algebra.symbolic import Expr
from layout_algebra.tma_box import ELEMENT_BITS, MAX_RANK, TmaBox, derive_box

BULK_COPY_ARCH = 90
"""The first architecture with bulk tensor copies (sm_90)."""
MAX_STAGES = 32
"""The most stages (barriers) of one shared tensor: a wait's parity is a bit of a 32-bit mask."""
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


def tma_load_helper(rank: int) -> str:
    """The device helper issuing a bulk tensor copy of a rank-`rank` box (coordinates innermost
    first, as the tensor map's dimensions)."""
    coords = ", ".join(f"int c{i}" for i in range(rank))
    operands = ", ".join(f"%{i + 3}" for i in range(rank))
    inputs = ", ".join(f'"r"(c{i})' for i in range(rank))
    return (
        f"static __device__ __forceinline__ void la_tma_load_{rank}d(void* shared, "
        f"const la_tensor_map* map, unsigned long long* barrier, {coords})\n"
        "{\n"
        "    const unsigned address = (unsigned)__cvta_generic_to_shared(shared);\n"
        "    const unsigned bar = (unsigned)__cvta_generic_to_shared(barrier);\n"
        f'    asm volatile("cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile'
        f'.mbarrier::complete_tx::bytes [%0], [%1, {{{operands}}}], [%2];\\n"\n'
        f'                 ::"r"(address), "l"(map), "r"(bar), {inputs} : "memory");\n'
        "}\n"
    )


@dataclass(frozen=True)
class TensorMapUse:
    """One tensor-map kernel parameter: the `source` view's tile of `box` (see
    `backend.kernel.KernelTensorMapParam`, which the launch builds from it)."""

    name: str
    source: GlobalTensor
    box: TmaBox


@dataclass(frozen=True)
class BulkTensorPlan:
    """How the bulk copies into one shared tensor are written: `box` (stage 0's), `stages`
    (the leading extents, () for one stage), `stage_bytes` (the byte distance of consecutive
    stages, 0 for one stage) and the stage boxes checked (`checked`: origin, box)."""

    tensor: SharedTensor
    box: TmaBox
    stages: tuple[int, ...]
    stage_bytes: int
    checked: tuple[tuple[tuple[int, ...], TmaBox], ...]

    @property
    def count(self) -> int:
        """Stages, hence barriers."""
        return math.prod(self.stages)

    @property
    def dims(self) -> tuple[int, ...]:
        """The tensor's dimensions a copy spans (its trailing ones)."""
        rank = len(self.tensor.shape)
        return tuple(range(rank - len(self.box.extents), rank))

    def stage_index(self, offsets: tuple[Expr, ...]) -> Expr | int:
        """The linear stage index of a tile at `offsets` (row-major over the stages)."""
        index: Expr | int = 0
        for offset, extent in zip(offsets, self.stages):
            index = index * extent + offset
        return index

    def claims(self) -> tuple[Claim, ...]:
        """Per stage checked: the box writes each element where the layout holds it."""
        layout = self.tensor.layout
        return tuple(
            Claim(
                f"bulk copy box of {self.tensor.name} at {origin}",
                *box.claim(layout, origin, self.dims),
            )
            for origin, box in self.checked
        )


@dataclass(frozen=True)
class BulkCopies:
    """The bulk copies of a kernel written as TMA: `tensors` (shared tensor name -> plan) and
    `maps` (the tensor-map parameters)."""

    tensors: dict[str, BulkTensorPlan]
    maps: tuple[TensorMapUse, ...]

    def map_name(self, copy: instructions.CopyBulk) -> str:
        """The tensor-map parameter of a copy into a planned tensor."""
        box = self.tensors[copy.dst.name].box
        for use in self.maps:
            if use.source.name == copy.src.name and use.box == box:
                return use.name
        raise KeyError(f"no tensor map for {copy.src.name} -> {copy.dst.name}")

    @property
    def ranks(self) -> tuple[int, ...]:
        """The box ranks the kernel issues (one helper each)."""
        return tuple(sorted({len(use.box.extents) for use in self.maps}))


NO_BULK_COPIES = BulkCopies({}, ())


def _tensor_plan(
    tensor: SharedTensor,
    copies: list[instructions.CopyBulk],
    waits: list[instructions.CopyBulkWait],
) -> BulkTensorPlan | None:
    """The plan of `tensor`'s bulk copies, or None where one of them does not qualify."""
    bits = tensor.dtype.nbits
    if bits not in ELEMENT_BITS:
        return None
    shapes = {copy.shape for copy in copies} | {wait.shape for wait in waits}
    if len(shapes) != 1:
        return None
    (shape,) = shapes
    rank, lead = len(shape), len(tensor.shape) - len(shape)
    if not 1 <= rank <= MAX_RANK or lead < 0 or tuple(tensor.shape[lead:]) != shape:
        return None
    for offsets in [copy.dst_offsets for copy in copies] + [wait.offsets for wait in waits]:
        if not all(o.is_const and o.value == 0 for o in offsets[lead:]):
            return None
    for copy in copies:
        strides = copy.src.layout.strides
        if not (isinstance(strides[-1], int) and strides[-1] == 1):
            return None
    stages = tuple(tensor.shape[:lead])
    count = math.prod(stages)
    if count > MAX_STAGES:
        return None
    dims = tuple(range(lead, len(tensor.shape)))
    checked = []
    for index in range(count):
        origin: list[int] = []
        rest = index
        for extent in reversed(stages):
            origin.insert(0, rest % extent)
            rest //= extent
        full = (*origin, *(0,) * rank)
        try:
            box = derive_box(tensor.layout, bits, full, dims)
        except LayoutError:
            return None
        if box is None:
            return None
        checked.append((full, box))
    first = checked[0][1]
    stage_bytes = checked[1][1].start - first.start if count > 1 else 0
    for index, (_, box) in enumerate(checked):
        same = (box.extents, box.swizzle) == (first.extents, first.swizzle)
        if not same or box.start != first.start + index * stage_bytes:
            return None
    return BulkTensorPlan(tensor, first, stages, stage_bytes, tuple(checked))


def plan_bulk_copies(program: Program, arch: str | None) -> BulkCopies:
    """The bulk copies of `program` written as TMA on `arch` (see the module docstring): none
    before sm_90 or without an architecture."""
    if arch is None or arch_number(arch) < BULK_COPY_ARCH:
        return NO_BULK_COPIES
    copies: dict[str, list[instructions.CopyBulk]] = {}
    waits: dict[str, list[instructions.CopyBulkWait]] = {}
    tensors: dict[str, SharedTensor] = {}
    for instruction in program.walk():
        if isinstance(instruction, instructions.CopyBulk):
            copies.setdefault(instruction.dst.name, []).append(instruction)
            tensors[instruction.dst.name] = instruction.dst
        elif isinstance(instruction, instructions.CopyBulkWait):
            waits.setdefault(instruction.dst.name, []).append(instruction)
    plans = {}
    for name, tensor in tensors.items():
        plan = _tensor_plan(tensor, copies[name], waits.get(name, []))
        if plan is not None:
            plans[name] = plan
    maps: dict[tuple[str, TmaBox], TensorMapUse] = {}
    for name, plan in plans.items():
        for copy in copies[name]:
            key = (copy.src.name, plan.box)
            if key not in maps:
                maps[key] = TensorMapUse(f"{TENSOR_MAP_PREFIX}{len(maps)}", copy.src, plan.box)
    return BulkCopies(plans, tuple(maps.values()))

"""The instructions of the tile IR: one frozen dataclass per instruction, operands as fields.

Every instruction is collective: all `num_threads` threads of the block execute it together, or,
inside a `ThreadGroup`, all the threads of that group.
Data moves between threads only through memory, except in `Reduce` (over its reduced modes) and
`Dot` (within each warp of 32 threads).
Each class has a class attribute `op` (its name in the printed text) except `Unary` and `Binary`,
whose `op` field names the elementwise operation (see `ir.elementwise`). Results are the fields
named `out`; `Assign` and the stores write into an existing tensor instead. Scalars (offsets,
bounds, conditions) are `layout_algebra.symbolic.Expr`; tile origins (`offsets`) have one entry
per dimension of the memory tensor.

Tensors:
    RegisterTensorInit  out = register_tensor(dtype, layout, init)  every element = init
    SharedTensorAlloc   out = shared_tensor(dtype, shared_layout)   (contents undefined)
    GlobalView          out = global_view(param, dtype, global_layout)
Memory (tile shape = the register layout's shape, padded with leading 1s to the memory rank):
    LoadGlobal     out[c] = src[offsets + c], 0 where offsets + c is outside src's shape
    StoreGlobal    dst[offsets + c] = src[c] where offsets + c is inside dst's shape; with
                   combine="add", dst[offsets + c] += src[c] atomically, in no fixed order
    LoadShared     out[c] = src[offsets + c] (must be inside src's shape)
    StoreShared    dst[offsets + c] = src[c] (must be inside dst's shape)
    CopyAsync      dst[dst_offsets + c] = src[src_offsets + c] (0 outside src's shape), for c in
                   the tile `shape`, asynchronously; `layout` (optional, a register layout of
                   that shape) says which thread copies which element
    CopyAsyncCommit     close the group of copies issued since the last commit
    CopyAsyncWait       wait until at most `pending` committed groups are still in flight
    CopyBulk       dst[dst_offsets + c] = src[src_offsets + c] (0 outside src's shape), for c in
                   the tile `shape`, asynchronously, by the block as a whole (Hopper's tensor
                   memory accelerator where the lowering can use it)
    CopyBulkWait   wait for the bulk copy into a tile; every thread then sees its elements
    CopyBulkRelease     every thread is done with a bulk-copied tile: the next bulk copy into
                   it may start without a block barrier
    Sync                block-wide barrier (also makes completed copies visible to all threads)
    WaitPriorGrid       wait for the kernels launched before this one (programmatic launch)
    LaunchDependents    let the kernels launched after this one start (programmatic launch)
Computation:
    Unary, Binary, Where   elementwise with NumPy broadcasting over tile shapes
    Fma                    out = a * b + c rounded once (f32), elementwise with broadcasting
    Cast                   out = convert(x) to another type (the contract's conversion rules)
    View                   reinterpret each thread's register bits as another type and layout
    Reduce                 out = reduction of x over dimension `dim` (sum, max, min)
    Dot                    out = a @ b + c (f16/bf16 operands, f32 accumulator, k summed in
                           order); warp-collective: a warp's threads together hold the operands
                           (SIMT lowering bit-exact, tensor-core lowering within a tolerance)
    Assign                 dst = src (overwrite a tensor defined earlier: loop-carried values)
Control:
    ForRange   for var in range(start, stop, step): body   (step a positive int; `unroll`, a
               positive int, only asks the lowering to write the body that many times)
    If         if cond: body   (cond a scalar Expr, nonzero is true)
    ThreadGroup     body run by whole warps of the enclosing threads alone, collective over
               them (a producer warp beside consumer warpgroups)

The base class `Instruction` gives every instruction the same generic view of its fields, derived
once per class from the field types, so that no consumer needs to know an instruction's field
names:

- `results()`: the tensors it defines (fields declared with `result()`);
- `operands()`: the tensors it reads, or writes into in place (the other tensor fields);
- `scalars()`: the scalar expressions it reads (`Expr` and offset-tuple fields, and the extents
  and strides of a global view it defines), not the loop variable a `ForRange` binds;
- `bodies()`: its nested instruction sequences (`ForRange`, `If` and `ThreadGroup`);
- `map_scalars(function)`: the same instruction with `function` applied to every scalar of its
  own fields and, recursively, of its bodies (how a lowering writes an unrolled body once per
  copy, with the loop variable replaced);
- `replace_tensors(replacements)`: the same instruction with some tensors replaced, in its own
  fields and its bodies (how `ir.specialize` swaps a global view for one with literal extents).

`all_instruction_types()` lists every concrete instruction class, in definition order; the
visitors of `ir.visitor` check, when they are created, that they handle each of them.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ir.values import ArrayParam, GlobalTensor, RegisterTensor, SharedTensor
from layout_algebra.register import RegisterLayout
from layout_algebra.symbolic import Expr

Offsets = tuple[Expr, ...]
"""A tile origin: one scalar per dimension of the memory tensor."""

Tensor = RegisterTensor | SharedTensor | GlobalTensor
"""Any tensor an instruction defines or uses."""

_TENSOR_TYPES = (RegisterTensor, SharedTensor, GlobalTensor)
_ROLE = "role"
_RESULT = "result"
_BINDING = "binding"


def result() -> Any:
    """Declare an instruction field as a result: a tensor the instruction defines."""
    return dataclasses.field(metadata={_ROLE: _RESULT})


def binding() -> Any:
    """Declare an instruction field as a scalar variable the instruction binds (a loop index)."""
    return dataclasses.field(metadata={_ROLE: _BINDING})


@dataclass(frozen=True)
class _FieldKinds:
    """The names of an instruction class's fields, by what they hold."""

    results: tuple[str, ...]
    operands: tuple[str, ...]
    scalars: tuple[str, ...]
    scalar_tuples: tuple[str, ...]
    bodies: tuple[str, ...]


_REGISTRY: list[type[Instruction]] = []


@dataclass(frozen=True, eq=False)
class Instruction:
    """The base of every instruction: a frozen dataclass, compared by identity.

    Subclasses are dataclasses too; each one is registered when it is defined (see
    `all_instruction_types`). The generic accessors below read the fields by their declared
    types: a tensor field is a result when declared with `result()`, else an operand; an `Expr`
    field is a scalar unless declared with `binding()`; an `Offsets` field holds scalars; a
    `tuple[Instruction, ...]` field is a body.
    """

    op: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY.append(cls)

    @classmethod
    def _kinds(cls) -> _FieldKinds:
        return _field_kinds(cls)

    def results(self) -> tuple[Tensor, ...]:
        """The tensors this instruction defines."""
        return tuple(getattr(self, name) for name in self._kinds().results)

    def operands(self) -> tuple[Tensor, ...]:
        """The tensors this instruction reads, or writes into in place (stores, `Assign`)."""
        return tuple(getattr(self, name) for name in self._kinds().operands)

    def scalars(self) -> tuple[Expr, ...]:
        """The scalar expressions this instruction reads: its scalar and offset fields, and the
        symbolic extents and strides of a global view it defines."""
        kinds = self._kinds()
        found: list[Expr] = [getattr(self, name) for name in kinds.scalars]
        for name in kinds.scalar_tuples:
            found.extend(getattr(self, name))
        for tensor in self.results():
            if isinstance(tensor, GlobalTensor):
                layout = tensor.layout
                found.extend(e for e in (*layout.shape, *layout.strides) if isinstance(e, Expr))
        return tuple(found)

    def bodies(self) -> tuple[tuple[Instruction, ...], ...]:
        """The instruction sequences nested in this one (empty for all but loops, ifs and thread
        groups)."""
        return tuple(getattr(self, name) for name in self._kinds().bodies)

    def map_scalars(self, function: Callable[[Expr], Expr]) -> Instruction:
        """This instruction with `function` applied to each scalar of its fields: every `Expr`
        field (not a binding: a loop keeps its variable), every entry of an offset field, and,
        recursively, every instruction of its bodies.

        The tensors are kept as they are, since other instructions refer to them: the extents
        and strides of a global view that the instruction defines, which `scalars()` lists, are
        not rewritten. Returns `self` when `function` returns every scalar itself, else a new
        instruction of the same class (a new object: instructions compare by identity).
        Example: ``load.map_scalars(lambda e: e.substitute({"k": k + 1}))`` is the load of the
        next k tile.
        """
        kinds = self._kinds()
        changes: dict[str, Any] = {}
        for name in kinds.scalars:
            old = getattr(self, name)
            new = function(old)
            if new is not old:
                changes[name] = new
        for name in kinds.scalar_tuples:
            old_tuple = getattr(self, name)
            new_tuple = tuple(function(scalar) for scalar in old_tuple)
            if any(new is not old for new, old in zip(new_tuple, old_tuple)):
                changes[name] = new_tuple
        for name in kinds.bodies:
            old_body = getattr(self, name)
            new_body = tuple(instruction.map_scalars(function) for instruction in old_body)
            if any(new is not old for new, old in zip(new_body, old_body)):
                changes[name] = new_body
        return dataclasses.replace(self, **changes) if changes else self

    def replace_tensors(self, replacements: Mapping[Tensor, Tensor]) -> Instruction:
        """This instruction with each tensor of its fields (results and operands) that is a key
        of `replacements` replaced by its value, and, recursively, every instruction of its
        bodies. Tensors compare by identity, so `replacements` maps tensor objects.

        Returns `self` when no tensor is replaced, else a new instruction of the same class.
        The caller keeps the program consistent: a tensor replaced where it is defined (a
        result) must be replaced where it is used too.
        """
        kinds = self._kinds()
        changes: dict[str, Any] = {}
        for name in (*kinds.results, *kinds.operands):
            old = getattr(self, name)
            new = replacements.get(old, old)
            if new is not old:
                changes[name] = new
        for name in kinds.bodies:
            old_body = getattr(self, name)
            new_body = tuple(instruction.replace_tensors(replacements) for instruction in old_body)
            if any(new is not old for new, old in zip(new_body, old_body)):
                changes[name] = new_body
        return dataclasses.replace(self, **changes) if changes else self


@functools.cache
def _field_kinds(cls: type[Instruction]) -> _FieldKinds:
    """Classify the fields of `cls` by their declared types (resolved once per class)."""
    hints = typing.get_type_hints(cls)
    kinds: dict[str, list[str]] = {
        "results": [],
        "operands": [],
        "scalars": [],
        "scalar_tuples": [],
        "bodies": [],
    }
    for field in dataclasses.fields(cls):
        declared = hints[field.name]
        role = field.metadata.get(_ROLE)
        members = typing.get_args(declared) or (declared,)
        if any(isinstance(m, type) and issubclass(m, _TENSOR_TYPES) for m in members):
            kinds["results" if role == _RESULT else "operands"].append(field.name)
        elif declared is Expr and role != _BINDING:
            kinds["scalars"].append(field.name)
        elif declared == Offsets:
            kinds["scalar_tuples"].append(field.name)
        elif declared == tuple[Instruction, ...]:
            kinds["bodies"].append(field.name)
    return _FieldKinds(**{key: tuple(names) for key, names in kinds.items()})


def all_instruction_types() -> tuple[type[Instruction], ...]:
    """Every concrete instruction class defined so far (this module's, then any defined
    elsewhere), in definition order."""
    return tuple(_REGISTRY)


@dataclass(frozen=True, eq=False)
class RegisterTensorInit(Instruction):
    """`out = register_tensor(out.dtype, out.layout, init)`: every element set to `init`.

    `init` is a Python int or float, converted to `out.dtype` (rounded or saturated).
    """

    op: ClassVar[str] = "register_tensor"
    out: RegisterTensor = result()
    init: int | float


@dataclass(frozen=True, eq=False)
class SharedTensorAlloc(Instruction):
    """`out = shared_tensor(out.dtype, out.layout)`: a statically allocated shared buffer.

    `reuse` names earlier shared tensors whose memory `out` may take: the program uses none of
    them once it uses `out`, a barrier of the whole block between (`ir.shared_reuse`)."""

    op: ClassVar[str] = "shared_tensor"
    out: SharedTensor = result()
    reuse: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class GlobalView(Instruction):
    """`out = global_view(param, out.dtype, out.layout)`: view an array parameter."""

    op: ClassVar[str] = "global_view"
    out: GlobalTensor = result()
    param: ArrayParam


@dataclass(frozen=True, eq=False)
class LoadGlobal(Instruction):
    """`out[c] = src[offsets + c]` for every tile coordinate c; `fill` (a Python number, in
    `out.dtype`, default 0) where offsets + c is out of src's shape."""

    op: ClassVar[str] = "load_global"
    out: RegisterTensor = result()
    src: GlobalTensor
    offsets: Offsets
    fill: int | float = 0


@dataclass(frozen=True, eq=False)
class PrefetchGlobal(Instruction):
    """A hint that changes no value: each thread asks for the cache lines holding the elements
    it holds in `layout`, of the tile at `offsets` of `src`, to be brought into a cache nearer
    than DRAM, so that a later `load_global` or `copy_async` of them waits for less: `level`
    "L1" (`PREFETCH_LEVELS`), its SM's L1 and the L2 on the way, or "L2", the GPU's L2 alone
    (shared by every SM, so the lines serve whichever block reads them). Elements outside
    src's shape are not touched. A later load reads what it would read without the prefetch:
    the memory order of an `atomic_add` applies to prefetched lines as to the lines a load
    caches."""

    op: ClassVar[str] = "prefetch_global"
    src: GlobalTensor
    offsets: Offsets
    layout: RegisterLayout
    level: str = "L1"


PREFETCH_LEVELS = ("L1", "L2")
"""The caches a `PrefetchGlobal` may name."""


@dataclass(frozen=True, eq=False)
class StoreGlobal(Instruction):
    """`dst[offsets + c] = src[c]` where offsets + c is inside dst's shape (skipped elsewhere).

    With `combine` "add" (`COMBINE_OPS`), a combining store: ``dst[offsets + c] += src[c]``,
    each element's add atomic with respect to every other thread and block, for the types the
    hardware adds in memory (`COMBINE_DTYPES`). Replicas of an element add it once; elements of
    the tile that a view maps to one address each add to it. The adds to one element happen in
    no fixed order: the result is exact for i32 (wrapping) and for floats whose partial sums
    are all exact, and otherwise depends on the order by the roundings (each add rounds to
    nearest even, a NaN result is the positive quiet NaN; f32 adds flush subnormal inputs and
    results to zero of their sign, as the GPU's f32 add to global memory does; f16 and bf16
    keep them). The memory order of `AtomicAdd` covers combining stores as it covers stores:
    a block that takes a later ticket of the same counter reads the sums."""

    op: ClassVar[str] = "store_global"
    dst: GlobalTensor
    src: RegisterTensor
    offsets: Offsets
    combine: str | None = None


COMBINE_OPS = ("add",)
"""The operations a combining `StoreGlobal` may name."""

COMBINE_DTYPES = ("i32", "f16", "bf16", "f32")
"""The names of the types a combining `StoreGlobal` may add to (``red.global.add``)."""


@dataclass(frozen=True, eq=False)
class AtomicAdd(Instruction):
    """`var = dst[offsets]; dst[offsets] += value` once for the whole block (inside a
    `ThreadGroup`, once for the group), atomically with respect to every other block (i32,
    wrapping); `var`, the old value, is the same in every thread and is in scope for the rest
    of the enclosing body (in a group, of that body of the group). An element outside dst's
    shape is left alone and `var` is 0.

    Memory order: the global stores (combining stores among them) the block (the group) made
    before it are visible to any block whose atomic_add on the same element comes later, and
    that block's global loads after it see them (release and acquire). So the last of several
    blocks to add to a counter may read what the others stored before adding, e.g. to sum
    split-k partial results in a fixed order, in the same launch.
    """

    op: ClassVar[str] = "atomic_add"
    var: Expr = binding()
    dst: GlobalTensor
    offsets: Offsets
    value: Expr


@dataclass(frozen=True, eq=False)
class LoadShared(Instruction):
    """`out[c] = src[offsets + c]`; every accessed coordinate must be inside src's shape."""

    op: ClassVar[str] = "load_shared"
    out: RegisterTensor = result()
    src: SharedTensor
    offsets: Offsets


@dataclass(frozen=True, eq=False)
class StoreShared(Instruction):
    """`dst[offsets + c] = src[c]`; every accessed coordinate must be inside dst's shape."""

    op: ClassVar[str] = "store_shared"
    dst: SharedTensor
    src: RegisterTensor
    offsets: Offsets


@dataclass(frozen=True, eq=False)
class CopyAsync(Instruction):
    """Asynchronous tile copy global -> shared of the tile `shape` (global rank).

    `dst[dst_offsets + pad(c)] = src[src_offsets + c]`, 0 where `src_offsets + c` is outside
    src's shape; `pad` adds leading zeros up to dst's rank. `layout`, when given, is a register
    layout of `shape` saying which thread copies which element (None: the backend chooses). The
    written elements stay pending until a `CopyAsyncWait` covers their group.
    """

    op: ClassVar[str] = "copy_async"
    dst: SharedTensor
    src: GlobalTensor
    src_offsets: Offsets
    dst_offsets: Offsets
    shape: tuple[int, ...]
    layout: RegisterLayout | None


@dataclass(frozen=True, eq=False)
class CopyAsyncCommit(Instruction):
    """Close the group of `CopyAsync` issued since the previous commit (possibly empty)."""

    op: ClassVar[str] = "copy_async_commit"


@dataclass(frozen=True, eq=False)
class CopyAsyncWait(Instruction):
    """Wait until at most `pending` committed copy groups are in flight (the newest ones).

    A copy's elements are then visible to the thread that copied them; a `Sync` makes them
    visible to every thread.
    """

    op: ClassVar[str] = "copy_async_wait"
    pending: int


@dataclass(frozen=True, eq=False)
class CopyBulk(Instruction):
    """Bulk tile copy global -> shared of the tile `shape` (global rank), by the block as one.

    `dst[dst_offsets + pad(c)] = src[src_offsets + c]`, 0 where `src_offsets + c` is outside
    src's shape, as `CopyAsync`. The copy is not split among the threads: on sm_90a the
    lowering issues it as one bulk tensor copy (TMA) where the tile is a box of a tensor map,
    completed on an mbarrier. The written elements stay pending until a `CopyBulkWait` on the
    same tile; copy groups (`CopyAsyncCommit`, `CopyAsyncWait`) do not cover it. A tile may not
    be bulk-copied into again after a wait on it until a `Sync` has passed (the phase of the
    barrier the next copy completes must not overtake a thread still waiting on the last), or,
    in a shared tensor the program releases (`CopyBulkRelease`), until a release of the tile.
    """

    op: ClassVar[str] = "copy_bulk"
    dst: SharedTensor
    src: GlobalTensor
    src_offsets: Offsets
    dst_offsets: Offsets
    shape: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class CopyBulkWait(Instruction):
    """Wait until the `CopyBulk` into the tile `shape` at `offsets` of `dst` has arrived; its
    elements are then visible to every thread, with no `Sync`."""

    op: ClassVar[str] = "copy_bulk_wait"
    dst: SharedTensor
    offsets: Offsets
    shape: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class CopyBulkRelease(Instruction):
    """Every thread is past its reads of the tile `shape` at `offsets` of `dst`, waited for by
    a `CopyBulkWait`: the next `CopyBulk` into it may be issued with no `Sync` in between, and
    no thread touches the tile until that copy's wait.

    In a shared tensor that has releases, every bulk copy into a tile but the first needs one
    release since the copy before it (a `Sync` does not stand in for it): on sm_90a the
    lowering gives each barrier slot of the tensor a second mbarrier that every warp arrives
    on at a release and that the thread issuing the next copy into the slot waits on, so a
    warp waits for no other warp but that one thread, and only for the warps still reading
    the slot.
    """

    op: ClassVar[str] = "copy_bulk_release"
    dst: SharedTensor
    offsets: Offsets
    shape: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class Sync(Instruction):
    """A barrier of all the block's threads; shared-memory writes before it are visible after."""

    op: ClassVar[str] = "sync"


@dataclass(frozen=True, eq=False)
class WaitPriorGrid(Instruction):
    """Wait until the kernels launched before this one on its stream have completed and their
    memory writes are visible (``griddepcontrol.wait``).

    Only a program with `Program.programmatic_launch` has it, once, in its top-level body: such
    a kernel may start while the kernel before it is finishing, and before this instruction it
    may read only memory that no earlier kernel writes (its weights, say), which is how a
    chain of kernels overlaps each one's prefetch with the tail of the one before. A launch of
    one program alone has nothing to wait for: in the interpreter it does nothing.
    """

    op: ClassVar[str] = "wait_prior_grid"


@dataclass(frozen=True, eq=False)
class LaunchDependents(Instruction):
    """Let the kernel launched after this one on its stream start once every block of this one
    has passed here or exited (``griddepcontrol.launch_dependents``).

    Only a program with `Program.programmatic_launch` has it, at most once, in its top-level
    body; without it the lowering places the signal at the kernel's entry. Where it stands
    changes when the next kernel starts, never what it reads: that kernel's `WaitPriorGrid`
    still waits for all of this one. In the interpreter it does nothing.
    """

    op: ClassVar[str] = "launch_dependents"


@dataclass(frozen=True, eq=False)
class Unary(Instruction):
    """`out = op(x)` elementwise; `op` is a key of `ir.elementwise.UNARY_OPS`."""

    op: str
    out: RegisterTensor = result()
    x: RegisterTensor


@dataclass(frozen=True, eq=False)
class Binary(Instruction):
    """`out = op(lhs, rhs)` elementwise with broadcasting; `op` is in `BINARY_OPS`.

    lhs and rhs have one dtype; out has it too, or `u1` for a comparison. out's shape is the
    NumPy broadcast of the operand shapes, and out's layout must let every thread find, in its
    own registers, the operand elements its result elements read: a size-1 operand dimension
    is read at coordinate 0, so e.g. a (M, 1) operand laid out as `reduce(x.layout, [1],
    keepdims=True)` combines with x (M, N) (`ir.placement.broadcast_gather` gives the register
    index; the verifier rejects a thread combining data it does not hold). No data moves
    between threads.
    """

    op: str
    out: RegisterTensor = result()
    lhs: RegisterTensor
    rhs: RegisterTensor


@dataclass(frozen=True, eq=False)
class Where(Instruction):
    """`out = x if cond else y` elementwise with broadcasting (layouts as for `Binary`).

    `cond` is `u1` (nonzero is true); x, y and out share one dtype.
    """

    op: ClassVar[str] = "where"
    out: RegisterTensor = result()
    cond: RegisterTensor
    x: RegisterTensor
    y: RegisterTensor


@dataclass(frozen=True, eq=False)
class Fma(Instruction):
    """`out = a * b + c` elementwise with broadcasting (layouts as for `Binary`), the exact
    value rounded once to nearest even: a fused multiply-add. a, b, c and out are f32; a NaN
    result is the positive quiet NaN (the contract's third NaN class)."""

    op: ClassVar[str] = "fma"
    out: RegisterTensor = result()
    a: RegisterTensor
    b: RegisterTensor
    c: RegisterTensor


@dataclass(frozen=True, eq=False)
class Cast(Instruction):
    """`out = convert(x)` from x.dtype to out.dtype (`ir.dtypes.convert`), elementwise over the
    tile; out's layout may differ from x's when each thread holds in x what it holds in out.

    With a nonzero `exponent` the values are also multiplied by ``2**exponent``
    (`ir.dtypes.convert_scaled`), which must be exact for every code of x's type (checked by the
    verifier): a float conversion that needs a power-of-two correction (a sub-byte float's
    bias, say) can leave it to a later multiply that needs one anyway.

    With `biased` (integer codes to f16 or bf16, exponent 0) each value keeps the bias of the
    magic number it is built on: ``value + ir.dtypes.magic_bias(x.dtype, out.dtype, o)``, o the
    bit offset of the element's code in its thread's bitstream of x (local index times the
    code's bits). Exact; a matmul takes the bias out once per row of activations instead of
    once per weight.
    """

    op: ClassVar[str] = "cast"
    out: RegisterTensor = result()
    x: RegisterTensor
    exponent: int = 0
    biased: bool = False


@dataclass(frozen=True, eq=False)
class View(Instruction):
    """Reinterpret each thread's register bits: x's codes in local order, LSB first, re-split.

    Thread t's bits are the codes of its local elements 0, 1, ... concatenated, element 0 in the
    lowest bits; out's local element j is bits [j*b, (j+1)*b) of them, b = out.dtype.nbits.
    Requires equal thread counts and equal bits per thread.
    """

    op: ClassVar[str] = "view"
    out: RegisterTensor = result()
    x: RegisterTensor


@dataclass(frozen=True, eq=False)
class Reduce(Instruction):
    """`out = reduction(x, dim)` with `reduction` in sum, max, min; `keepdim` keeps a size-1 dim.

    out's layout is `layout_algebra.reduce(x.layout, [dim], keepdim)`. Order (fixed, so the GPU
    reproduces float sums bit-exactly): each thread first combines its own local elements of one
    output element in increasing local index (acc = v0, then acc = acc op v1, ...); then, for each
    reduced spatial mode from the least significant spatial entry to the most significant, the
    partial results of the r threads differing only in that digit are combined in digit order
    (acc = p0 op p1 op ... op p_{r-1}), so all of them end with the same value. Float sums are
    accumulated in float32 and rounded to the type once at the end; integer sums wrap.
    """

    op: ClassVar[str] = "reduce"
    out: RegisterTensor = result()
    x: RegisterTensor
    dim: int
    reduction: str
    keepdim: bool


@dataclass(frozen=True, eq=False)
class Dot(Instruction):
    """`out = a @ b + c`: a (M, K), b (K, N) f16 or bf16 (the same), c and out (M, N) f32.

    Arithmetic: for every (m, n): acc = c[m, n]; for k = 0 .. K-1 in order: acc = f32(acc +
    a[m, k] * b[k, n]) (each product is exact in f32); out[m, n] = acc. out's layout is c's.

    Placement (warp-collective): for every warp (threads 32w .. 32w + 31, or all threads when
    the block has fewer than 32), the threads of that warp together must hold every a[m, k] and
    b[k, n] (all k) needed by the c elements the warp holds; the thread holding c[m, n] need
    not hold them itself (`ir.placement.dot_warp_gather`). Tensor-core fragment layouts are of
    that kind: a warp grid times repeats times the PTX m16n8k16 fragments (`mma_dot_layouts`
    in `ir.examples.matmul`). The special case where every thread holds all it combines
    (`ir.placement.dot_is_thread_local`; e.g. `simt_dot_layouts` there) is what a SIMT
    lowering needs.

    Lowerings: a SIMT lowering reproduces the sequential order above bit for bit; a tensor-core
    (mma) lowering adds each 16-wide k step's products in the hardware's own order and
    precision, so its results are compared with this definition within a tolerance.
    """

    op: ClassVar[str] = "dot"
    out: RegisterTensor = result()
    a: RegisterTensor
    b: RegisterTensor
    c: RegisterTensor


@dataclass(frozen=True, eq=False)
class Assign(Instruction):
    """`dst = src`: overwrite register tensor `dst` (defined in an enclosing scope) in place."""

    op: ClassVar[str] = "assign"
    dst: RegisterTensor
    src: RegisterTensor


@dataclass(frozen=True, eq=False)
class ForRange(Instruction):
    """`for var in range(start, stop, step): body` with `step` a positive int.

    `unroll` (a positive int, default 1) does not change the meaning: the body runs once per
    value of var, in order. It asks the lowering to write the body `unroll` times per iteration
    of the generated loop (var stepping by ``unroll * step``, copy j reading ``var + j * step``),
    so that what depends on var modulo ``unroll * step`` (a stage index ``(var - start) % 2``
    of a double buffer) is a constant in each copy; iterations that do not fill a whole group
    run after it, one by one. Printed as ``range(start, stop, step, unroll=S)`` when S > 1.

    `rolled` (default False) does not change the meaning either: it asks the compiler to keep
    the generated loop a loop (``#pragma unroll 1``) rather than unroll it further, so that
    what one iteration loads is not hoisted into the iterations before it (a batch of loads
    a step, each batch's registers reused). Printed as ``rolled=True``.
    """

    op: ClassVar[str] = "for_range"
    var: Expr = binding()
    start: Expr
    stop: Expr
    step: int
    body: tuple[Instruction, ...]
    unroll: int = 1
    rolled: bool = False


@dataclass(frozen=True, eq=False)
class If(Instruction):
    """`if cond: body`, `cond` a scalar Expr (true when nonzero)."""

    op: ClassVar[str] = "if"
    cond: Expr
    body: tuple[Instruction, ...]


@dataclass(frozen=True, eq=False)
class ThreadGroup(Instruction):
    """`body` run by the `threads` threads ``start .. start + threads - 1`` of the enclosing
    threads (the block's at the top level, else the enclosing group's) and by no other thread.

    Inside, every instruction is collective over the group: its register tensors have layouts
    of `threads` threads, thread t of a layout being the group's thread t; a `Sync` is a
    barrier of the group's threads alone. Groups are whole warps (`start` and `threads`
    multiples of 32), so warp-collective instructions (`Dot`, reductions over lanes) keep
    their warps. A register tensor stays with the threads that define it: `body` uses none of
    the enclosing threads', and what `body` defines is used by later bodies of the same group
    alone (a group's body opens no scope of its own, so a consumer's accumulator lives across
    the loop around its bodies); scalars, shared tensors and global views are the block's.

    Threads of different groups run concurrently on the GPU, so data passes between groups
    only through shared memory ordered by a barrier of every thread they share (a `Sync`
    outside the groups) or by the bulk-copy protocol: a `CopyBulk` issued in one group and
    waited for (`CopyBulkWait`) and released (`CopyBulkRelease`) in another, whose waits let
    the waiting group see the tile and whose releases let the issuing group copy into it again
    (a producer warp running stages ahead of its consumers). The interpreter runs the program
    in its order and rejects an access that this order would not make safe on the GPU.

    `registers` (None: no budget) is the per-thread register budget of the group's warps for
    the rest of the kernel, a performance request with no meaning for the interpreter: a
    group of the block's own body made of whole warpgroups (`start` and `threads` multiples of
    128) may ask for a multiple of 8 from 24 to 256, so that a producer gives up registers its
    consumers take (on sm_90a, ``setmaxnreg``; `backend.lower` says when it applies). When one
    group asks, every warp of the block is in a group that asks, and the groups of one range
    ask for the same budget.
    """

    op: ClassVar[str] = "thread_group"
    start: int
    threads: int
    body: tuple[Instruction, ...]
    registers: int | None = None

"""The Python builder of tile programs: a `with` block that reads like a kernel.

Example, a vector add of `n` f16 elements, 1024 per block::

    with ProgramBuilder("vector_add", num_threads=128) as b:
        n = b.int_param("n")
        x, y, z = (b.array_param(name, dtypes.f16) for name in "xyz")
        views = [b.global_view(p, dtypes.f16, GlobalLayout((n,), (1,))) for p in (x, y, z)]
        tile = spatial(128).local(8)
        origin = [b.block_x * 1024]
        total = b.add(b.load_global(views[0], origin, tile), b.load_global(views[1], origin, tile))
        b.store_global(views[2], total, origin)
    program = b.program()

Each method appends one instruction to the innermost open body and returns the tensor it
defines. `for_range` and `if_` are context managers whose `with` body becomes the loop or if body;
loop-carried values are register tensors defined before the loop and overwritten with `assign`.
``with b.thread_group(start, threads):`` opens a body that those threads of the enclosing ones
run alone (`ir.instructions.ThreadGroup`); inside it `b.threads` is the group's thread count, the
thread count of the register layouts made there; ``registers=N`` asks for a register budget of
its warps (whole warpgroups of the block's own body).
Scalars are `layout_algebra.symbolic.Expr` (ints are accepted wherever an Expr is).
``int_param(name, constant=True)`` declares a compile-time constant, whose value is given when
the program is compiled (``backend.compile(program, arch, constants={name: value})``,
`ir.specialize`). ``grid(n // 1024)`` declares the launch grid as expressions over the int
parameters: a launch may then omit the grid, and one that differs is refused, so the lowering
may bound the block indices by it (`Program.block_indices`).

The builder computes each result's type (dtype, shape, layout) and raises `VerificationError`
when it cannot; with `check=True` (the default) it also runs the verifier's per-instruction
checks at once, so a mistake is reported at the line that made it. `check=False` builds
ill-formed programs on purpose (for testing the verifier). `program()` returns the `Program`
without running the whole-program checks of `ir.verify` (scopes, shared-memory size).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ir import dtypes
from ir.arguments import grid_text
from ir.dtypes import DataType
from ir.elementwise import BINARY_OPS, REDUCTIONS, UNARY_OPS, broadcast_shapes, result_dtype
from ir.errors import VerificationError
from ir.instructions import (
    Assign,
    AtomicAdd,
    Binary,
    Cast,
    CopyAsync,
    CopyAsyncCommit,
    CopyAsyncWait,
    CopyBulk,
    CopyBulkRelease,
    CopyBulkWait,
    Dot,
    Fma,
    ForRange,
    GlobalView,
    If,
    Instruction,
    LaunchDependents,
    LoadGlobal,
    LoadShared,
    PrefetchGlobal,
    Reduce,
    RegisterTensorInit,
    SharedTensorAlloc,
    StoreGlobal,
    StoreShared,
    Sync,
    ThreadGroup,
    Unary,
    View,
    WaitPriorGrid,
    Where,
)
from ir.program import BLOCK_INDICES, Program
from ir.values import (
    ArrayParam,
    GlobalTensor,
    IntParam,
    Param,
    RegisterTensor,
    SharedTensor,
)
from ir.verifier import (
    biased_cast_error,
    check_cluster_extents,
    check_grid_extents,
    check_instruction,
    check_min_blocks_per_sm,
    check_wgmma_chain_window,
)
from layout_algebra.errors import LayoutError
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import RegisterLayout, replicate
from layout_algebra.shared import SharedLayout
from layout_algebra.symbolic import Expr, ExprLike, as_expr, var

INT_PARAM_LIMIT = 2**31 - 1
"""Default upper bound of integer parameters (they are C ints in the kernel)."""

_C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if "
    "inline int long register restrict return short signed sizeof static struct switch typedef "
    "union unsigned void volatile while bool true false half threadIdx blockIdx blockDim "
    "gridDim".split()
)
_CALL_KEYWORDS = frozenset({"grid", "max_blocks"})
"""Keywords of `run_reference` and of a kernel call: a parameter so named could not be passed by
name."""
_GENERATED_PREFIXES = ("r", "s", "g", "k", "t")


def _is_generated_name(name: str) -> bool:
    return name[:1] in _GENERATED_PREFIXES and name[1:].isdigit()


def loop_variable(name: str, start: Expr, stop: Expr) -> Expr:
    """The variable `name` of a loop from `start` to `stop`, bounded by their bounds: from the
    least value of `start` to the greatest value of `stop` minus one (at least the lower bound,
    so that a loop that never runs still has a valid variable)."""
    lo = start.bounds()[0]
    hi = stop.bounds()[1]
    if hi is not None:
        hi = hi - 1 if lo is None else max(hi - 1, lo)
    return var(name, lo, hi)


def check_constant(value: int | float, dtype: DataType, subject: str) -> None:
    """Raise VerificationError when the Python number `value` does not fit `dtype`; the message
    starts with `subject`, which names the value and where it was given.

    An integer type takes integral values (ints, or floats such as 2.0) within
    ``dtype.min..dtype.max``. A float type takes finite values whose magnitude is at most
    ``dtype.max`` (they round to the nearest code), and inf or NaN only when it has them.
    """
    if not dtype.is_float:
        if isinstance(value, float) and not value.is_integer():
            raise VerificationError(
                f"{subject} is not an integer; {dtype} holds the integers {dtype.min}..{dtype.max}"
            )
        if not dtype.min <= value <= dtype.max:
            raise VerificationError(
                f"{subject} is outside the range of {dtype}; expected an integer in "
                f"{dtype.min}..{dtype.max}"
            )
        return
    if isinstance(value, float) and not math.isfinite(value):
        name, has = ("NaN", dtype.has_nan) if math.isnan(value) else ("infinity", dtype.has_inf)
        if not has:
            raise VerificationError(
                f"{subject}: {dtype} has no {name}; expected a finite value in "
                f"{dtype.min!r}..{dtype.max!r}"
            )
        return
    if abs(value) > dtype.max:
        raise VerificationError(
            f"{subject} is beyond the largest finite value of {dtype}; expected a value in "
            f"{dtype.min!r}..{dtype.max!r}"
        )


class _LoopContext:
    """What `ProgramBuilder.for_range` returns: a context manager (``with ... as k:``) that
    refuses to be iterated, since ``for k in b.for_range(...)`` would not build a loop."""

    def __init__(self, manager: contextlib.AbstractContextManager[Expr], call: str) -> None:
        self._manager = manager
        self._call = call

    def __enter__(self) -> Expr:
        return self._manager.__enter__()

    def __exit__(self, *exc_info: Any) -> bool | None:
        return self._manager.__exit__(*exc_info)

    def __iter__(self) -> Iterator[Expr]:
        raise VerificationError(
            f"{self._call} is a context manager, not an iterable: write "
            f"`with b.{self._call} as k:` and put the loop body inside the with block"
        )


class ProgramBuilder:
    """Builds one `Program` named `name` for blocks of `num_threads` threads.

    Use as ``with ProgramBuilder(name, num_threads) as b: ...`` then ``b.program()``. With
    `check` (default True) every instruction is checked by the verifier as it is added.
    """

    def __init__(self, name: str, num_threads: int, *, check: bool = True) -> None:
        if not isinstance(name, str) or not (name.isascii() and name.isidentifier()):
            raise VerificationError(f"program name {name!r} is not a C identifier")
        if isinstance(num_threads, bool) or not isinstance(num_threads, int):
            raise VerificationError(f"num_threads must be an int, got {num_threads!r}")
        if not 1 <= num_threads <= 1024:
            raise VerificationError(f"num_threads must be in [1, 1024], got {num_threads}")
        self.name = name
        self.num_threads = num_threads
        self.threads = num_threads
        """The threads the next instruction is collective over: the block's, or the innermost
        open `thread_group`'s."""
        self.check = check
        self._params: list[Param] = []
        self._bodies: list[list[Instruction]] = [[]]
        self._counters = dict.fromkeys(_GENERATED_PREFIXES, 0)
        self._grid: tuple[Expr, Expr, Expr] | None = None
        self._min_blocks_per_sm: int | None = None
        self._programmatic_launch = False
        self._hoist_invariants = False
        self._wgmma_chain_window = 0
        self._cluster: tuple[int, int, int] | None = None
        self._bulk_shapes: dict[str, tuple[int, ...]] = {}

    def __enter__(self) -> ProgramBuilder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    # ----------------------------------------------------------------------------------------
    # Internals
    # ----------------------------------------------------------------------------------------

    def _fresh(self, prefix: str) -> str:
        number = self._counters[prefix]
        self._counters[prefix] = number + 1
        return f"{prefix}{number}"

    def _emit(self, instruction: Instruction) -> None:
        if self.check:
            check_instruction(instruction, self.threads)
        self._bodies[-1].append(instruction)

    def _register(self, dtype: DataType, layout: RegisterLayout) -> RegisterTensor:
        if not isinstance(dtype, DataType):
            raise VerificationError(f"expected a DataType such as dtypes.f16, got {dtype!r}")
        if not isinstance(layout, RegisterLayout):
            raise VerificationError(f"expected a RegisterLayout, got {layout!r}")
        return RegisterTensor(self._fresh("r"), dtype, layout)

    def _tensor(self, value: Any, what: str) -> RegisterTensor:
        if not isinstance(value, RegisterTensor):
            raise VerificationError(f"{what} must be a RegisterTensor, got {value!r}")
        return value

    def _constant(self, value: int | float, dtype: DataType, what: str) -> RegisterTensor:
        """A rank-0 tensor held by every thread, for a Python number operand."""
        check_constant(value, dtype, f"the constant {value!r} ({what})")
        return self.register_tensor(dtype, replicate(self.threads), value)

    def _operands(self, values: Sequence[Any], what: str) -> list[RegisterTensor]:
        """Register tensors for elementwise operands; Python numbers take the tensors' dtype."""
        tensors = [v for v in values if isinstance(v, RegisterTensor)]
        if not tensors:
            raise VerificationError(f"{what} needs at least one RegisterTensor operand")
        dtype = tensors[-1].dtype
        result = []
        for k, value in enumerate(values):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                result.append(self._constant(value, dtype, f"operand {k} of {what}"))
            else:
                result.append(self._tensor(value, f"operand {k} of {what}"))
        return result

    def _result_layout(
        self, operands: Sequence[RegisterTensor], layout: RegisterLayout | None, what: str
    ) -> RegisterLayout:
        shape = broadcast_shapes(*(x.shape for x in operands))
        if shape is None:
            shapes = ", ".join(str(x.shape) for x in operands)
            raise VerificationError(f"{what}: the operand shapes {shapes} do not broadcast")
        if layout is not None:
            return layout
        for operand in operands:
            if operand.shape == shape:
                return operand.layout
        raise VerificationError(
            f"{what}: no operand has the broadcast shape {shape}; pass layout= for the result"
        )

    @staticmethod
    def _memory(tensor: Any, kind: type, what: str) -> None:
        if not isinstance(tensor, kind):
            raise VerificationError(f"{what} a {kind.__name__}, got {tensor!r}")

    @staticmethod
    def _scalars(values: Sequence[ExprLike], what: str) -> tuple[Expr, ...]:
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise VerificationError(f"{what} must be a sequence of ints or Exprs, got {values!r}")
        try:
            return tuple(as_expr(v) for v in values)
        except TypeError as error:
            raise VerificationError(f"{what}: {error}") from error

    # ----------------------------------------------------------------------------------------
    # Parameters and scalars
    # ----------------------------------------------------------------------------------------

    def _check_param_name(self, name: str) -> None:
        if not isinstance(name, str) or not (name.isascii() and name.isidentifier()):
            raise VerificationError(f"parameter name {name!r} is not a C identifier")
        if name in _C_KEYWORDS or name.startswith("block_") or _is_generated_name(name):
            raise VerificationError(
                f"parameter name {name!r} is reserved (C keywords, block_*, and the generated "
                "names r<n>, s<n>, g<n>, k<n>)"
            )
        if name in _CALL_KEYWORDS:
            raise VerificationError(
                f"parameter name {name!r} is reserved: it is a keyword of run_reference and of "
                "the kernel call"
            )
        if any(p.name == name for p in self._params):
            raise VerificationError(f"parameter name {name!r} is already used")

    def int_param(
        self,
        name: str,
        lo: int = 0,
        hi: int = INT_PARAM_LIMIT,
        multiple_of: int = 1,
        *,
        constant: bool = False,
    ) -> Expr:
        """Add an integer parameter; returns its variable, with bounds lo <= value <= hi.

        Every argument must also be a multiple of `multiple_of` (a positive int), e.g. 8 for a
        row length that keeps rows of 16-bit elements 16-byte aligned; the backend uses it to
        pick vector accesses. With `constant=True` the parameter is a compile-time constant:
        its value is given at compile time (``backend.compile(program, arch, constants={name:
        4096})``, see `ir.specialize`), the kernel is generated with that literal value, and a
        call with another value is refused; the parameter keeps its place in the argument
        list. Raises VerificationError for bounds that are not ints (or None) or have lo > hi,
        a `multiple_of` that is not a positive int or has no multiple within [lo, hi], or a
        `constant` that is not a bool.
        """
        self._check_param_name(name)
        if isinstance(multiple_of, bool) or not isinstance(multiple_of, int) or multiple_of < 1:
            raise VerificationError(
                f"int parameter {name!r}: multiple_of={multiple_of!r}; expected a positive int"
            )
        if not isinstance(constant, bool):
            raise VerificationError(
                f"int parameter {name!r}: constant={constant!r}; expected True or False"
            )
        try:
            variable = var(name, lo, hi)
        except (TypeError, LayoutError) as error:
            raise VerificationError(f"int parameter {name!r}: {error}") from None
        bounded = lo is not None and hi is not None
        if bounded and multiple_of > 1 and -(-lo // multiple_of) * multiple_of > hi:
            raise VerificationError(
                f"int parameter {name!r}: no multiple of {multiple_of} lies within its bounds "
                f"[{lo}, {hi}]"
            )
        param = IntParam(name, variable, multiple_of, constant)
        self._params.append(param)
        return param.var

    def array_param(self, name: str, dtype: DataType) -> ArrayParam:
        """Add a pointer parameter to a dense bitstream of `dtype` elements."""
        self._check_param_name(name)
        if not isinstance(dtype, DataType):
            raise VerificationError(f"array parameter {name!r}: {dtype!r} is not a DataType")
        param = ArrayParam(name, dtype)
        self._params.append(param)
        return param

    @property
    def block_x(self) -> Expr:
        """The block's x index in the grid (blockIdx.x)."""
        return BLOCK_INDICES[0]

    @property
    def block_y(self) -> Expr:
        """The block's y index in the grid (blockIdx.y)."""
        return BLOCK_INDICES[1]

    @property
    def block_z(self) -> Expr:
        """The block's z index in the grid (blockIdx.z)."""
        return BLOCK_INDICES[2]

    def min_blocks_per_sm(self, blocks: int) -> None:
        """Ask the compiler for an occupancy: `blocks` blocks of this program resident on one SM
        at once (CUDA's ``__launch_bounds__`` minimum), so it keeps each thread within
        65536 / (blocks * num_threads) registers, spilling to local memory if it must. The
        program computes the same either way; a memory-bound kernel uses it to keep enough
        warps, and so enough loads, in flight. Raises VerificationError for a second
        declaration and what `ir.verifier.check_min_blocks_per_sm` refuses.
        """
        if self._min_blocks_per_sm is not None:
            raise VerificationError(
                f"min_blocks_per_sm declared twice: {self.name} already asks for "
                f"{self._min_blocks_per_sm}; a program declares it at most once"
            )
        check_min_blocks_per_sm(self.name, blocks, self.num_threads)
        self._min_blocks_per_sm = blocks

    def programmatic_launch(self) -> None:
        """Launch this program as a link of a chain (programmatic dependent launch, sm_90 and
        newer; elsewhere the launch is an ordinary one): it may start while the kernel before
        it on the stream is finishing, and lets the next one start likewise. The program must
        then call `wait_prior_grid` once, at its top level, and read before it only memory that
        no earlier kernel writes. Raises VerificationError for a second declaration."""
        if self._programmatic_launch:
            raise VerificationError(
                f"programmatic_launch declared twice: {self.name} already declares it"
            )
        self._programmatic_launch = True

    def cluster(self, x: int, y: int = 1, z: int = 1) -> None:
        """Launch the grid in clusters of x by y by z blocks (sm_90 and newer; elsewhere an
        ordinary launch): blocks of a cluster run at once on one GPU processing cluster, and
        a tile that every block of a cluster bulk-copies alike into the same shared tensor
        (its source and stage read no block index the cluster spans, nor does the control flow
        around its copies, waits and releases) may be copied once for all of them, each block
        issuing a part that lands in every block's shared memory (`backend.bulk_copy`). It
        changes nothing the program computes. The declared grid must be a multiple of the
        cluster (checked with the program, `ir.verifier.check_cluster`). Raises
        VerificationError for a second declaration or extents that are not ints of at least 1
        with at most `ir.verifier.MAX_CLUSTER_BLOCKS` blocks in all."""
        if self._cluster is not None:
            raise VerificationError(
                f"cluster declared twice: {self.name} already declares the cluster {self._cluster}"
            )
        cluster = (x, y, z)
        # The grid may come later: its divisibility is checked with the whole program.
        check_cluster_extents(self.name, cluster)
        self._cluster = cluster

    def hoist_invariants(self) -> None:
        """Have the lowering compute each value the same for the whole block that divides by a
        runtime value once, at the kernel's start, however it is lowered
        (`backend.lower.lower`'s ``hoist_invariants``): for a schedule of block indices whose
        expressions ptxas would otherwise recompute in the k loop. Raises VerificationError
        for a second declaration."""
        if self._hoist_invariants:
            raise VerificationError(
                f"hoist_invariants declared twice: {self.name} already declares it"
            )
        self._hoist_invariants = True

    def wgmma_chain_window(self, links: int) -> None:
        """Let at most `links` links of a chain of warpgroup dots run at once
        (`Program.wgmma_chain_window`): each link, once issued, waits for the links before it
        but the last ``links - 1``, so that a chain whose A operands are registers (dequantized
        weights, say) holds at most `links` links' A registers, not the whole chain's, and
        still runs the next link's preparation beside the tensor cores when `links` >= 2.
        Raises VerificationError for a count that is not an int >= 1 or a second
        declaration."""
        if self._wgmma_chain_window:
            raise VerificationError(
                f"wgmma_chain_window declared twice: {self.name} already lets "
                f"{self._wgmma_chain_window} links run"
            )
        check_wgmma_chain_window(self.name, links)
        self._wgmma_chain_window = links

    def wait_prior_grid(self) -> None:
        """Wait for the kernels launched before this one (`ir.instructions.WaitPriorGrid`).
        Raises VerificationError unless the program declared `programmatic_launch`, inside a
        loop or if body, and for a second wait."""
        self._emit_link_instruction(WaitPriorGrid())

    def launch_dependents(self) -> None:
        """Let the next kernel of the chain start once every block of this one has passed here
        (`ir.instructions.LaunchDependents`); without it a link signals at its entry. Raises
        VerificationError unless the program declared `programmatic_launch`, inside a loop or
        if body, and for a second signal."""
        self._emit_link_instruction(LaunchDependents())

    def _emit_link_instruction(self, instruction: WaitPriorGrid | LaunchDependents) -> None:
        """Emit an instruction of a chain's link: once, at the top level of a program that
        declared `programmatic_launch` (VerificationError otherwise)."""
        op = instruction.op
        if not self._programmatic_launch:
            raise VerificationError(
                f"{op} in {self.name}, which does not declare programmatic_launch; "
                "call programmatic_launch() first"
            )
        if len(self._bodies) != 1:
            raise VerificationError(
                f"{op} inside a for_range, if_ or thread_group body of {self.name}; it belongs "
                "to the program's top level"
            )
        if any(isinstance(i, type(instruction)) for i in self._bodies[0]):
            raise VerificationError(f"{op} called twice in {self.name}; once is enough")
        self._emit(instruction)

    def grid(self, x: ExprLike, y: ExprLike = 1, z: ExprLike = 1) -> None:
        """Declare the launch grid: x, y and z block counts, each an int or an expression over
        the int parameters declared so far (``b.grid(n // 256, (m + 15) // 16, 8)``).

        Every launch (`ir.run_reference`, a compiled kernel) then runs on this grid evaluated on
        its int arguments: the grid may be omitted there, a different one is refused, and so is
        an extent below 1. In return the lowering knows ``block_x < x`` (and y, z) and bounds
        the block indices by the extents' upper bounds (`Program.block_indices`). Raises
        VerificationError for a second declaration, an extent that is not an int or Expr, and
        what `ir.verifier.check_grid_extents` refuses (an int outside [1,
        `ir.arguments.MAX_GRID`], an expression that reads anything but the int parameters
        declared so far, such as a block index or a loop variable, or is never positive).
        """
        if self._grid is not None:
            raise VerificationError(
                f"grid declared twice: {self.name} already declares the grid "
                f"{grid_text(self._grid)}; a program declares its grid at most once"
            )
        extents = []
        for name, value in zip("xyz", (x, y, z)):
            if isinstance(value, bool) or not isinstance(value, (int, Expr)):
                raise VerificationError(
                    f"grid extent {name} = {value!r} is not an int or an Expr over the int "
                    "parameters"
                )
            extents.append(as_expr(value))
        int_names = {p.name for p in self._params if isinstance(p, IntParam)}
        check_grid_extents(self.name, extents, int_names)
        self._grid = (extents[0], extents[1], extents[2])

    # ----------------------------------------------------------------------------------------
    # Tensors and memory
    # ----------------------------------------------------------------------------------------

    def register_tensor(
        self, dtype: DataType, layout: RegisterLayout, init: int | float = 0
    ) -> RegisterTensor:
        """A register tensor with every element `init` (converted to `dtype`).

        `init` must fit `dtype` (`check_constant`): an integral value within the range of an
        integer type; for a float type, a finite value of magnitude at most `dtype.max` (or inf or
        NaN when the type has them).
        """
        if isinstance(init, bool) or not isinstance(init, (int, float)):
            raise VerificationError(f"register_tensor init must be an int or float, got {init!r}")
        out = self._register(dtype, layout)
        check_constant(init, dtype, f"register_tensor init {init!r}")
        self._emit(RegisterTensorInit(out, init))
        return out

    def shared_tensor(
        self, dtype: DataType, layout: SharedLayout, reuse: Sequence[SharedTensor] = ()
    ) -> SharedTensor:
        """A shared-memory tensor of `dtype` addressed by the `SharedLayout` `layout`.

        `reuse`: earlier shared tensors whose memory it may take, which the program no longer
        uses once it uses this one (a `sync` of the whole block between; `ir.shared_reuse`),
        e.g. an output tile staged through the k loop's ring."""
        if isinstance(reuse, (SharedTensor, str, bytes)) or not isinstance(reuse, Sequence):
            raise VerificationError(
                f"shared_tensor's reuse must be a sequence of SharedTensors, got {reuse!r}"
            )
        for tensor in reuse:
            self._memory(tensor, SharedTensor, "shared_tensor reuses")
        out = SharedTensor(self._fresh("s"), dtype, layout)
        self._emit(SharedTensorAlloc(out, tuple(tensor.name for tensor in reuse)))
        return out

    def global_view(self, param: ArrayParam, dtype: DataType, layout: GlobalLayout) -> GlobalTensor:
        """View array parameter `param` as `dtype` elements placed by the `GlobalLayout`."""
        if not isinstance(param, ArrayParam):
            raise VerificationError(f"global_view needs an ArrayParam, got {param!r}")
        out = GlobalTensor(self._fresh("g"), dtype, layout, param)
        self._emit(GlobalView(out, param))
        return out

    def load_global(
        self,
        src: GlobalTensor,
        offsets: Sequence[ExprLike],
        layout: RegisterLayout,
        fill: int | float = 0,
    ) -> RegisterTensor:
        """Load the tile at `offsets` of `src` into registers placed by `layout`; `fill`
        (default 0; it must fit the type, `check_constant`) outside `src`'s shape, e.g.
        ``-inf`` for a row maximum over a partial tile."""
        self._memory(src, GlobalTensor, "load_global reads")
        if isinstance(fill, bool) or not isinstance(fill, (int, float)):
            raise VerificationError(f"load_global fill must be an int or float, got {fill!r}")
        check_constant(fill, src.dtype, f"load_global fill {fill!r}")
        out = self._register(src.dtype, layout)
        offsets_expr = self._scalars(offsets, "load_global offsets")
        self._emit(LoadGlobal(out, src, offsets_expr, fill))
        return out

    def prefetch_global(
        self,
        src: GlobalTensor,
        offsets: Sequence[ExprLike],
        layout: RegisterLayout,
        *,
        level: str = "L1",
    ) -> None:
        """Ask for the cache lines of the tile at `offsets` of `src` that each thread holds in
        `layout` to be brought into `level` ("L1", or "L2": the cache every SM shares) ahead
        of a `load_global` or `copy_async` of them (a hint: no value changes; elements
        outside `src`'s shape are not touched)."""
        self._memory(src, GlobalTensor, "prefetch_global reads")
        offsets_expr = self._scalars(offsets, "prefetch_global offsets")
        self._emit(PrefetchGlobal(src, offsets_expr, layout, level))

    def store_global(
        self,
        dst: GlobalTensor,
        src: RegisterTensor,
        offsets: Sequence[ExprLike],
        combine: str | None = None,
    ) -> None:
        """Store register tile `src` at `offsets` of `dst`; elements outside dst are skipped.

        ``combine="add"`` adds `src` to the elements instead, atomically and in no fixed order
        (`ir.instructions.StoreGlobal`; i32, f16, bf16 and f32): many blocks may add into one
        tile, e.g. the parts of a split-k sum, whose last ticket holder then reads the total."""
        self._memory(dst, GlobalTensor, "store_global writes")
        src = self._tensor(src, "store_global's source")
        offsets_expr = self._scalars(offsets, "store_global offsets")
        self._emit(StoreGlobal(dst, src, offsets_expr, combine))

    def atomic_add(
        self, dst: GlobalTensor, offsets: Sequence[ExprLike], value: ExprLike = 1
    ) -> Expr:
        """Add `value` to the i32 element at `offsets` of `dst`, once for the block and
        atomically; returns the element's old value, a scalar the same in every thread (0
        when the element is outside `dst`). Stores before it are visible to the block whose
        later atomic_add on the element returns their sum (`ir.instructions.AtomicAdd`):

            ticket = b.atomic_add(counters, [tile])
            with b.if_(ticket.eq(split - 1)):   # the last of `split` blocks
                ...  # read every block's partial results
        """
        self._memory(dst, GlobalTensor, "atomic_add updates")
        if dst.dtype != dtypes.i32:
            raise VerificationError(
                f"atomic_add updates {dst.name} of dtype {dst.dtype}; expected an i32 tensor"
            )
        offsets_expr = self._scalars(offsets, "atomic_add offsets")
        (value_expr,) = self._scalars([value], "atomic_add value")
        old = var(self._fresh("t"), -(2**31), 2**31 - 1)
        self._emit(AtomicAdd(old, dst, offsets_expr, value_expr))
        return old

    def _shared_offsets(
        self, tensor: SharedTensor, offsets: Sequence[ExprLike] | None, what: str
    ) -> tuple[Expr, ...]:
        if offsets is None:
            return (as_expr(0),) * len(tensor.shape)
        return self._scalars(offsets, what)

    def load_shared(
        self,
        src: SharedTensor,
        layout: RegisterLayout,
        offsets: Sequence[ExprLike] | None = None,
    ) -> RegisterTensor:
        """Load the tile at `offsets` (default 0) of `src` into registers placed by `layout`."""
        self._memory(src, SharedTensor, "load_shared reads")
        out = self._register(src.dtype, layout)
        self._emit(LoadShared(out, src, self._shared_offsets(src, offsets, "load_shared offsets")))
        return out

    def store_shared(
        self, dst: SharedTensor, src: RegisterTensor, offsets: Sequence[ExprLike] | None = None
    ) -> None:
        """Store register tile `src` at `offsets` (default 0) of shared tensor `dst`."""
        self._memory(dst, SharedTensor, "store_shared writes")
        src = self._tensor(src, "store_shared's source")
        self._emit(
            StoreShared(dst, src, self._shared_offsets(dst, offsets, "store_shared offsets"))
        )

    def copy_async(
        self,
        dst: SharedTensor,
        src: GlobalTensor,
        src_offsets: Sequence[ExprLike],
        dst_offsets: Sequence[ExprLike] | None = None,
        layout: RegisterLayout | None = None,
    ) -> None:
        """Start copying a tile global -> shared (`ir.instructions.CopyAsync`).

        The tile shape is `layout.shape` when a layout is given, else the last `src.rank`
        extents of dst's shape; `dst_offsets` defaults to 0. Elements outside `src` arrive as
        zeros: ``cp.async`` can only zero-fill, so unlike `load_global` there is no fill value.
        """
        if not isinstance(src, GlobalTensor) or not isinstance(dst, SharedTensor):
            raise VerificationError(
                f"copy_async copies a GlobalTensor into a SharedTensor, got {src!r} -> {dst!r}"
            )
        if layout is not None:
            shape = tuple(getattr(layout, "shape", ()))
        else:
            shape = dst.shape[max(0, len(dst.shape) - src.rank) :]
        self._emit(
            CopyAsync(
                dst,
                src,
                self._scalars(src_offsets, "copy_async src_offsets"),
                self._shared_offsets(dst, dst_offsets, "copy_async dst_offsets"),
                shape,
                layout,
            )
        )

    def copy_async_commit(self) -> None:
        """Close the group of copies issued since the last commit."""
        self._emit(CopyAsyncCommit())

    def copy_async_wait(self, pending: int = 0) -> None:
        """Wait until at most `pending` committed copy groups are still in flight."""
        self._emit(CopyAsyncWait(pending))

    def copy_bulk(
        self,
        dst: SharedTensor,
        src: GlobalTensor,
        src_offsets: Sequence[ExprLike],
        dst_offsets: Sequence[ExprLike] | None = None,
        shape: Sequence[int] | None = None,
    ) -> None:
        """Start copying a tile global -> shared by the block as one (`ir.instructions.CopyBulk`;
        a bulk tensor copy on sm_90 where the tile is a box of a tensor map). The tile is
        `shape` (src's rank), by default the last `src.rank` extents of dst's shape;
        `dst_offsets` defaults to 0. Elements outside `src` arrive as zeros. `copy_bulk_wait` on
        the tile (or a tile made of such tiles) makes them visible to every thread."""
        if not isinstance(src, GlobalTensor) or not isinstance(dst, SharedTensor):
            raise VerificationError(
                f"copy_bulk copies a GlobalTensor into a SharedTensor, got {src!r} -> {dst!r}"
            )
        if shape is None:
            shape = dst.shape[max(0, len(dst.shape) - src.rank) :]
        shape = tuple(shape)
        self._bulk_shapes[dst.name] = shape
        self._emit(
            CopyBulk(
                dst,
                src,
                self._scalars(src_offsets, "copy_bulk src_offsets"),
                self._shared_offsets(dst, dst_offsets, "copy_bulk dst_offsets"),
                shape,
            )
        )

    def copy_bulk_wait(
        self,
        dst: SharedTensor,
        offsets: Sequence[ExprLike] | None = None,
        shape: Sequence[int] | None = None,
    ) -> None:
        """Wait for the bulk copy into the tile `shape` at `offsets` (default 0) of `dst`
        (`ir.instructions.CopyBulkWait`); `shape` defaults to the tile of the last `copy_bulk`
        into `dst` built so far."""
        self._emit(CopyBulkWait(dst, *self._bulk_tile("copy_bulk_wait", dst, offsets, shape)))

    def _bulk_tile(
        self,
        op: str,
        dst: SharedTensor,
        offsets: Sequence[ExprLike] | None,
        shape: Sequence[int] | None,
    ) -> tuple[tuple[Expr, ...], tuple[int, ...]]:
        """The (offsets, shape) of the tile of `dst` a wait or release names; `shape` defaults
        to the tile of the last `copy_bulk` into `dst`."""
        if not isinstance(dst, SharedTensor):
            raise VerificationError(f"{op} names a tile of a SharedTensor, got {dst!r}")
        if shape is None:
            if dst.name not in self._bulk_shapes:
                raise VerificationError(
                    f"{op}({dst.name}): no copy_bulk into {dst.name} before it; give the "
                    "tile's shape"
                )
            shape = self._bulk_shapes[dst.name]
        return self._shared_offsets(dst, offsets, f"{op} offsets"), tuple(shape)

    def copy_bulk_release(
        self,
        dst: SharedTensor,
        offsets: Sequence[ExprLike] | None = None,
        shape: Sequence[int] | None = None,
    ) -> None:
        """Release the tile `shape` at `offsets` (default 0) of `dst` to the next bulk copy
        into it (`ir.instructions.CopyBulkRelease`); `shape` defaults to the tile of the last
        `copy_bulk` into `dst` built so far."""
        self._emit(CopyBulkRelease(dst, *self._bulk_tile("copy_bulk_release", dst, offsets, shape)))

    def sync(self) -> None:
        """A barrier of all the block's threads."""
        self._emit(Sync())

    # ----------------------------------------------------------------------------------------
    # Computation
    # ----------------------------------------------------------------------------------------

    def cast(
        self,
        x: RegisterTensor,
        dtype: DataType,
        layout: RegisterLayout | None = None,
        *,
        exponent: int = 0,
        biased: bool = False,
    ) -> RegisterTensor:
        """`x` converted to `dtype` (the contract's conversion rules), in `x`'s layout or in
        `layout`, a layout of the same shape in which every thread holds only elements it holds
        in `x` (e.g. the same elements in another local order). With `exponent`, the values
        times ``2**exponent``, which must be exact for every code of x's type
        (`ir.dtypes.scaled_conversion_error`; VerificationError otherwise). With `biased`
        (integer codes to f16 or bf16), each value plus its magic number's bias
        (`ir.dtypes.magic_bias` at the code's bit offset in its thread's bitstream): the cast
        is then bit placement alone on the GPU (`ir.instructions.Cast`)."""
        x = self._tensor(x, "cast's operand")
        error = dtypes.scaled_conversion_error(x.dtype, dtype, exponent)
        if error is not None:
            raise VerificationError(f"cast of {x.name} to {dtype} with exponent: {error}")
        error = biased_cast_error(x.dtype, dtype, exponent, biased)
        if error is not None:
            raise VerificationError(f"biased cast of {x.name} to {dtype}: {error}")
        out = self._register(dtype, x.layout if layout is None else layout)
        self._emit(Cast(out, x, exponent, biased))
        return out

    def view(self, x: RegisterTensor, dtype: DataType, layout: RegisterLayout) -> RegisterTensor:
        """`x`'s register bits reinterpreted as `dtype` elements placed by `layout`."""
        x = self._tensor(x, "view's operand")
        out = self._register(dtype, layout)
        self._emit(View(out, x))
        return out

    def unary(self, op: str, x: RegisterTensor) -> RegisterTensor:
        """Elementwise `op` (a key of `ir.elementwise.UNARY_OPS`) of `x`."""
        if op not in UNARY_OPS:
            raise VerificationError(f"unknown unary op {op!r}; expected one of {list(UNARY_OPS)}")
        x = self._tensor(x, f"{op}'s operand")
        out = self._register(x.dtype, x.layout)
        self._emit(Unary(op, out, x))
        return out

    def binary(
        self,
        op: str,
        lhs: RegisterTensor | int | float,
        rhs: RegisterTensor | int | float,
        layout: RegisterLayout | None = None,
    ) -> RegisterTensor:
        """Elementwise `op` (a key of `BINARY_OPS`) with NumPy broadcasting.

        A Python number operand becomes a constant of the other operand's dtype. The result
        layout is `layout` when given, else that of the first operand with the broadcast shape.
        """
        if op not in BINARY_OPS:
            raise VerificationError(f"unknown binary op {op!r}; expected one of {list(BINARY_OPS)}")
        lhs, rhs = self._operands([lhs, rhs], op)
        out_layout = self._result_layout([lhs, rhs], layout, op)
        out = self._register(result_dtype(op, lhs.dtype), out_layout)
        self._emit(Binary(op, out, lhs, rhs))
        return out

    def where(
        self,
        cond: RegisterTensor,
        x: RegisterTensor | int | float,
        y: RegisterTensor | int | float,
        layout: RegisterLayout | None = None,
    ) -> RegisterTensor:
        """`x` where `cond` (u1) is 1, else `y`, with broadcasting (layout as in `binary`)."""
        cond = self._tensor(cond, "where's condition")
        x, y = self._operands([x, y], "where")
        out_layout = self._result_layout([cond, x, y], layout, "where")
        out = self._register(x.dtype, out_layout)
        self._emit(Where(out, cond, x, y))
        return out

    def fma(
        self,
        a: RegisterTensor | int | float,
        b: RegisterTensor | int | float,
        c: RegisterTensor | int | float,
        layout: RegisterLayout | None = None,
    ) -> RegisterTensor:
        """``a * b + c`` rounded once (f32 operands; `ir.instructions.Fma`), with broadcasting
        (layout as in `binary`)."""
        a, b, c = self._operands([a, b, c], "fma")
        out_layout = self._result_layout([a, b, c], layout, "fma")
        out = self._register(a.dtype, out_layout)
        self._emit(Fma(out, a, b, c))
        return out

    def reduce(self, x: RegisterTensor, dim: int, op: str, keepdim: bool = False) -> RegisterTensor:
        """Reduce `x` over dimension `dim` with `op` in sum, max, min (`ir.instructions.Reduce`).

        The result layout is `layout_algebra.reduce(x.layout, [dim], keepdim)`.
        """
        x = self._tensor(x, "reduce's operand")
        if op not in REDUCTIONS:
            raise VerificationError(f"unknown reduction {op!r}; expected one of {REDUCTIONS}")
        if (
            isinstance(dim, bool)
            or not isinstance(dim, int)
            or not -x.layout.rank <= dim < max(x.layout.rank, 1)
        ):
            raise VerificationError(
                f"reduce dim {dim!r} is not a dimension of a rank-{x.layout.rank} tensor"
            )
        dim %= x.layout.rank
        try:
            layout = reduce_layout(x.layout, [dim], keepdims=bool(keepdim))
        except LayoutError as error:
            raise VerificationError(f"reduce of {x.name}: {error}") from error
        out = self._register(x.dtype, layout)
        self._emit(Reduce(out, x, dim, op, bool(keepdim)))
        return out

    def dot(self, a: RegisterTensor, b: RegisterTensor, c: RegisterTensor) -> RegisterTensor:
        """`a @ b + c` (`ir.instructions.Dot`); the result has c's dtype and layout."""
        a = self._tensor(a, "dot's a")
        b = self._tensor(b, "dot's b")
        c = self._tensor(c, "dot's c")
        out = self._register(c.dtype, c.layout)
        self._emit(Dot(out, a, b, c))
        return out

    def assign(self, dst: RegisterTensor, src: RegisterTensor) -> RegisterTensor:
        """Overwrite `dst` with `src` (same dtype and layout); returns `dst`."""
        dst = self._tensor(dst, "assign's destination")
        src = self._tensor(src, "assign's source")
        self._emit(Assign(dst, src))
        return dst

    # Elementwise shorthands -----------------------------------------------------------------

    def neg(self, x: RegisterTensor) -> RegisterTensor:
        """-x."""
        return self.unary("neg", x)

    def abs(self, x: RegisterTensor) -> RegisterTensor:
        """|x|."""
        return self.unary("abs", x)

    def invert(self, x: RegisterTensor) -> RegisterTensor:
        """~x (integers)."""
        return self.unary("invert", x)

    def exp(self, x: RegisterTensor) -> RegisterTensor:
        """e^x (not bit-exact on the GPU)."""
        return self.unary("exp", x)

    def exp2(self, x: RegisterTensor) -> RegisterTensor:
        """2^x (not bit-exact on the GPU)."""
        return self.unary("exp2", x)

    def log(self, x: RegisterTensor) -> RegisterTensor:
        """ln x (not bit-exact on the GPU)."""
        return self.unary("log", x)

    def log2(self, x: RegisterTensor) -> RegisterTensor:
        """log2 x (not bit-exact on the GPU)."""
        return self.unary("log2", x)

    def sqrt(self, x: RegisterTensor) -> RegisterTensor:
        """sqrt x, correctly rounded."""
        return self.unary("sqrt", x)

    def rsqrt(self, x: RegisterTensor) -> RegisterTensor:
        """1 / sqrt x (not bit-exact on the GPU)."""
        return self.unary("rsqrt", x)

    def sigmoid(self, x: RegisterTensor) -> RegisterTensor:
        """1 / (1 + e^-x) (not bit-exact on the GPU)."""
        return self.unary("sigmoid", x)

    def tanh(self, x: RegisterTensor) -> RegisterTensor:
        """tanh x (not bit-exact on the GPU)."""
        return self.unary("tanh", x)

    def add(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x + y."""
        return self.binary("add", x, y, layout)

    def sub(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x - y."""
        return self.binary("sub", x, y, layout)

    def mul(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x * y."""
        return self.binary("mul", x, y, layout)

    def div(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x / y (floats: IEEE f32 division, then rounding; integers: floor division)."""
        return self.binary("div", x, y, layout)

    def mod(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x mod y (integers, floor: the result has y's sign)."""
        return self.binary("mod", x, y, layout)

    def maximum(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """max(x, y) (`ir.elementwise`: a NaN operand loses)."""
        return self.binary("max", x, y, layout)

    def minimum(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """min(x, y) (`ir.elementwise`: a NaN operand loses)."""
        return self.binary("min", x, y, layout)

    def and_(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x & y (integers)."""
        return self.binary("and", x, y, layout)

    def or_(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x | y (integers)."""
        return self.binary("or", x, y, layout)

    def xor(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x ^ y (integers)."""
        return self.binary("xor", x, y, layout)

    def shl(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x << y (integers, 0 <= y < nbits)."""
        return self.binary("shl", x, y, layout)

    def shr(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x >> y (integers, 0 <= y < nbits; arithmetic when signed)."""
        return self.binary("shr", x, y, layout)

    def lt(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x < y as u1."""
        return self.binary("lt", x, y, layout)

    def le(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x <= y as u1."""
        return self.binary("le", x, y, layout)

    def gt(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x > y as u1."""
        return self.binary("gt", x, y, layout)

    def ge(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x >= y as u1."""
        return self.binary("ge", x, y, layout)

    def eq(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x == y as u1."""
        return self.binary("eq", x, y, layout)

    def ne(self, x: Any, y: Any, layout: RegisterLayout | None = None) -> RegisterTensor:
        """x != y as u1."""
        return self.binary("ne", x, y, layout)

    # ----------------------------------------------------------------------------------------
    # Control flow
    # ----------------------------------------------------------------------------------------

    def for_range(
        self,
        start: ExprLike,
        stop: ExprLike | None = None,
        step: int = 1,
        unroll: int = 1,
        *,
        rolled: bool = False,
    ) -> contextlib.AbstractContextManager[Expr]:
        """``with b.for_range(start, stop, step, unroll=S) as k:`` a loop; `k` is the loop
        variable.

        Like Python's `range`: one argument is the stop (start 0). `step` is a positive int.
        `unroll` (a positive int) leaves the meaning unchanged and asks the lowering to write
        the body S times per generated iteration; `rolled` (a bool) leaves it unchanged too
        and asks the compiler not to unroll the generated loop any further
        (`ir.instructions.ForRange`). Iterating it (``for k in b.for_range(...)``) raises
        VerificationError.
        """
        args = ", ".join(repr(v) for v in (start, stop) if v is not None)
        loop = self._for_range(start, stop, step, unroll, rolled)
        return _LoopContext(loop, f"for_range({args})")

    @contextlib.contextmanager
    def _for_range(
        self, start: ExprLike, stop: ExprLike | None, step: int, unroll: int, rolled: bool
    ) -> Iterator[Expr]:
        if stop is None:
            start, stop = 0, start
        start_expr, stop_expr = self._scalars([start, stop], "for_range bounds")
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise VerificationError(f"for_range step must be a positive int, got {step!r}")
        if isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1:
            raise VerificationError(f"for_range unroll must be a positive int, got {unroll!r}")
        if not isinstance(rolled, bool):
            raise VerificationError(f"for_range rolled must be True or False, got {rolled!r}")
        loop_var = loop_variable(self._fresh("k"), start_expr, stop_expr)
        self._bodies.append([])
        try:
            yield loop_var
        finally:
            body = tuple(self._bodies.pop())
        loop = ForRange(loop_var, start_expr, stop_expr, step, body, unroll, rolled)
        self._bodies[-1].append(loop)

    @contextlib.contextmanager
    def if_(self, cond: ExprLike) -> Iterator[None]:
        """``with b.if_(cond):`` a body run when the scalar `cond` is nonzero.

        `cond` is an Expr or an int. A Python bool is refused: ``k == 2`` on scalar expressions
        compares them structurally (it is not the comparison); write ``k.eq(2)``.
        """
        if isinstance(cond, (bool, np.bool_)):
            kind = "Python" if isinstance(cond, bool) else "NumPy"
            raise VerificationError(
                f"if_ condition is the {kind} bool {cond!r} (== and != on scalar expressions "
                "compare them structurally); write k.eq(2) or k.ne(2) for the comparison"
            )
        if not isinstance(cond, (Expr, int, np.integer)):
            raise VerificationError(
                f"if_ condition must be a scalar Expr (such as k < n or k.eq(2)) or an int, "
                f"got {cond!r} of type {type(cond).__name__}"
            )
        (cond_expr,) = self._scalars([cond], "if_ condition")
        self._bodies.append([])
        try:
            yield None
        finally:
            body = tuple(self._bodies.pop())
        self._bodies[-1].append(If(cond_expr, body))

    @contextlib.contextmanager
    def thread_group(
        self, start: int, threads: int, registers: int | None = None
    ) -> Iterator[None]:
        """``with b.thread_group(start, threads):`` a body run by the threads ``start .. start +
        threads - 1`` of the enclosing ones alone, collective over them
        (`ir.instructions.ThreadGroup`); whole warps: `start` and `threads` multiples of 32.

        Inside, `threads` is the group's thread count (the layouts of the register tensors made
        there have it) and `sync` a barrier of the group's threads. `registers` asks for a
        per-thread register budget of the group's warps (whole warpgroups of the block's own
        body; the verifier checks the rules of `ThreadGroup.registers`).
        """
        for name, value in (("start", start), ("threads", threads)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise VerificationError(f"thread_group {name} must be an int, got {value!r}")
        outer = self.threads
        if not (0 <= start and 32 <= threads and start % 32 == 0 and threads % 32 == 0) or (
            start + threads > outer
        ):
            raise VerificationError(
                f"thread_group({start}, {threads}): expected whole warps (multiples of 32, at "
                f"least one) among the enclosing {outer} threads"
            )
        self._bodies.append([])
        self.threads = threads
        try:
            yield None
        finally:
            self.threads = outer
            body = tuple(self._bodies.pop())
        self._bodies[-1].append(ThreadGroup(start, threads, body, registers))

    # ----------------------------------------------------------------------------------------
    # Result
    # ----------------------------------------------------------------------------------------

    def program(self) -> Program:
        """The program built so far (every loop and if closed)."""
        if len(self._bodies) != 1:
            raise VerificationError(
                "program() called inside an open for_range, if_ or thread_group body"
            )
        return Program(
            self.name,
            self.num_threads,
            tuple(self._params),
            tuple(self._bodies[0]),
            self._grid,
            self._min_blocks_per_sm,
            self._programmatic_launch,
            self._hoist_invariants,
            self._cluster,
            self._wgmma_chain_window,
        )

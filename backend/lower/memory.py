"""Lowering of memory instructions: global and shared loads and stores, ``cp.async`` copies and
barriers.

Every access of a tile goes through one skeleton (`MemoryLowering.vector_runs`): runs of
`width` registers move as one vector where the access map allows it, and a run that may leave
the tensor's shape is guarded by its mask, with an element-by-element (or zero-filling) path
for the runs that do. Stores to global memory element by element address their elements from
one base pointer per thread where the layout allows (`MemoryLowering.element_base`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from backend.bulk_copy import TMA_FENCE_MARK, arrives_per_warp, unit_stride_order
from backend.cuda_codegen import (
    VECTOR_COMBINE_DTYPES,
    VECTOR_TYPES,
    combine_helper,
    pack_expression,
    unpack_expressions,
)
from backend.lower.context import (
    RESERVED_PREFIX,
    THREAD_NAME,
    WIDE_PREFIX,
    LoweringContext,
    Tile,
    is_false,
    is_true,
    primary_condition,
)
from backend.tensor_core import (
    MAX_OFFSET_POINTS,
    MINIMUM_STMATRIX_ARCH,
    LdmatrixPlan,
    arch_number,
    emit_ldmatrix,
    emit_stmatrix,
    plan_ldmatrix,
    plan_stmatrix,
)
from backend.wgmma import PROXY_FENCE_MARK
from ir import instructions
from ir.values import GlobalTensor, RegisterTensor, SharedTensor
from layout_algebra.access import compose
from layout_algebra.auto import auto_local_spatial
from layout_algebra.errors import LayoutError
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.hardware import WARP_SIZE
from layout_algebra.register import RegisterLayout, local, pad_layout, replicate
from layout_algebra.shared import SharedLayout, shared_strides
from layout_algebra.symbolic import (
    Expr,
    as_expr,
    evaluate,
    simplify,
    var,
)

ENUMERATION_LIMIT = 256
"""Largest number of origin values enumerated to decide a shared-memory vector width."""


def default_copy_layout(
    shape: Sequence[int],
    element_bits: int,
    num_threads: int,
    order: Sequence[int] | None = None,
) -> RegisterLayout:
    """The layout a `copy_async` without one is spread by.

    Each thread copies runs of v consecutive elements of the last dimension, v the widest count
    of at most 16 bytes that divides the last extent (1 for elements that do not divide 128
    bits); the runs are dealt by ``auto_local_spatial(num_threads, shape with the last extent
    divided by v)``, whose leftover threads replicate (replicas do not copy twice).
    With `order` (a permutation of the dimensions) the runs go along dimension ``order[-1]``
    instead: the layout of the tile with its dimensions in `order`, permuted back (a bulk copy
    from a view whose unit stride is not the last, `backend.bulk_copy.unit_stride_order`).
    """
    shape = tuple(shape)
    if order is not None and tuple(order) != tuple(range(len(shape))):
        permuted = default_copy_layout([shape[d] for d in order], element_bits, num_threads)
        return permuted.permute([list(order).index(d) for d in range(len(shape))])
    if not shape:
        return replicate(num_threads)
    run = 128 // element_bits if 128 % element_bits == 0 else 1
    while run > 1 and shape[-1] % run:
        run //= 2
    grid = shape[:-1] + (shape[-1] // run,)
    return auto_local_spatial(num_threads, grid) * local(*((1,) * (len(shape) - 1)), run)


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


ElementBase = tuple[str, Expr, list[int]]
"""A thread's base pointer of a tile stored element by element (`MemoryLowering.element_base`):
its C name, the element offset it adds to the tensor's pointer, and each register's constant
index from it."""


def _unsigned(bits: int) -> str:
    return {8: "unsigned char", 16: "unsigned short", 32: "unsigned int"}[bits]


def offset_ranges(
    offsets: Sequence[Expr], limit: int, loops: Mapping[str, range] | None = None
) -> list[range] | None:
    """For each offset, the values it takes: with every variable of it a loop variable of
    `loops` (name -> the values it takes), the values it has at those, when they step evenly
    (``kk`` of ``range(0, 32, 16)`` takes 0 and 16, not all of 0 .. 31); else the values its
    bounds allow (one value for a constant). None when one is unbounded or their combinations
    exceed `limit`."""
    ranges = []
    for offset in offsets:
        offset = as_expr(offset)
        taken = _values_over_loops(offset, loops or {}, limit)
        if taken is None:
            low, high = offset.bounds()
            if low is None or high is None:
                return None
            taken = range(low, high + 1)
        ranges.append(taken)
    return ranges if math.prod(len(r) for r in ranges) <= limit else None


def _values_over_loops(offset: Expr, loops: Mapping[str, range], limit: int) -> range | None:
    """The values `offset` takes over the loop values `loops` gives its variables, as a range,
    or None: a variable not in `loops`, more than `limit` points, or values that do not step
    evenly."""
    names = sorted(offset.free_vars())
    if not names or any(name not in loops for name in names):
        return None
    if math.prod(len(loops[name]) for name in names) > limit:
        return None
    values = sorted(
        {
            int(evaluate(offset, dict(zip(names, point))))
            for point in itertools.product(*(loops[name] for name in names))
        }
    )
    step = values[1] - values[0] if len(values) > 1 else 1
    if any(b - a != step for a, b in zip(values, values[1:])):
        return None
    return range(values[0], values[-1] + 1, step)


def offset_values(
    offsets: Sequence[Expr], loops: Mapping[str, range] | None = None
) -> tuple[list[Expr], dict[str, range], dict[str, Expr]] | None:
    """The offsets of a tile with each variable one replaced by a fresh variable over the values
    it takes (`offset_ranges` with the enclosing loops' values `loops`: e.g. a stage index
    ``(k - k0) % 2`` by one over 0 and 1, a k slice ``kk`` of ``range(0, 32, 16)`` by one over
    0 and 16): (those offsets, the fresh variables' ranges, each fresh name's original offset);
    None when an offset is unbounded or the points exceed `MAX_OFFSET_POINTS`.

    `plan_ldmatrix` then checks the load at every value the offsets can take, whatever the
    loop variables behind them, and its claims hold for all of them, so the original offsets
    can be printed in the fresh variables' place (`emit_ldmatrix`'s `substitutions`)."""
    ranges = offset_ranges(offsets, MAX_OFFSET_POINTS, loops)
    if ranges is None:
        return None
    abstract, values, originals = [], {}, {}
    for dimension, (offset, choices) in enumerate(zip(offsets, ranges)):
        offset = as_expr(offset)
        if offset.is_const:
            abstract.append(offset)
            continue
        name = f"{RESERVED_PREFIX}offset{dimension}"
        abstract.append(var(name, choices.start, choices[-1]))
        values[name] = choices
        originals[name] = offset
    return abstract, values, originals


class MemoryLowering(LoweringContext):
    """Tensors in memory: vector widths, loads, stores, asynchronous copies and barriers."""

    def global_width(self, tile: Tile, view: GlobalTensor) -> int:
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
                low, high, step = None, None, 1
                for scalar in (*self.program.block_indices, *self.scalar_params()):
                    if scalar.name == name:
                        low, high = scalar.lo, scalar.hi
            if low is None or high is None or high - low + 1 > ENUMERATION_LIMIT:
                return None
            domains.append(range(low, high + 1, step))
        if math.prod(len(domain) for domain in domains) > ENUMERATION_LIMIT:
            return None
        return [dict(zip(names, values)) for values in itertools.product(*domains)]

    def origin_points(self, origin: Sequence[Expr]) -> list[tuple[int, ...]] | None:
        """Origins covering every value `origin` can take, or None when there are too many:
        each component over the values its bounds allow (a stage index ``(k - k0) % 2``: 0 and
        1, whatever k), else every valuation of the variables behind it (`origin_values`)."""
        ranges = offset_ranges(origin, ENUMERATION_LIMIT)
        if ranges is not None:
            return list(itertools.product(*ranges))
        valuations = self.origin_values(origin)
        if valuations is None:
            return None
        return [tuple(int(evaluate(o, env)) for o in origin) for env in valuations]

    def shared_width(self, tile: Tile) -> int:
        """The vector width of a tile of a shared tensor (see the module docstring)."""
        memory = tile.memory
        assert isinstance(memory, SharedLayout)
        register = tile.register
        widths = _vector_widths(tile.element_bits, register.local_size)
        if not widths:
            return 1
        origins = self.origin_points(tile.origin)
        if origins is not None:
            table = register.table()
            tables = []
            for origin in origins:
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

    def register_tile(
        self,
        tensor: SharedTensor | GlobalTensor,
        layout: RegisterLayout,
        origin: Sequence[Expr],
        role: str,
    ) -> Tile:
        """The tile of `layout` at `origin` of `tensor`, the `role` operand of its instruction."""
        memory = tensor.layout
        padded = pad_layout(layout, memory.rank)
        return Tile(memory, padded, tuple(origin), tensor.dtype.nbits, role, tensor.name)

    def element_address(self, tile: Tile, i: int) -> tuple[Expr, int]:
        """(printed address, unit bits) of one element: a typed index for whole-byte elements,
        a bit offset for the others."""
        offset = tile.offset(self.thread, i)
        if tile.element_bits % 8 == 0:
            return offset, tile.element_bits
        return simplify(offset * tile.element_bits), 1

    def vector_address(self, tile: Tile, first: int) -> Expr:
        """The printed byte offset of the vector starting at register `first`."""
        offset = tile.offset(self.thread, first)
        if tile.element_bits % 8 == 0:
            return simplify(offset * (tile.element_bits // 8))
        return simplify(offset * tile.element_bits // 8)

    def load_element(
        self, pointer: str, tile: Tile, i: int, mask: Expr | None, fill: str = "0u"
    ) -> str:
        """C code of register i's element loaded from `pointer` (`fill` where `mask` is
        false)."""
        address, unit = self.element_address(tile, i)
        self.record(tile, i, 1, address, unit, mask)
        bits = tile.element_bits
        if bits % 8 == 0:
            load = f"((const {_unsigned(bits)}*){pointer})[{self.c(address)}]"
        else:
            load = f"la_load_bits({pointer}, {self.c(address)}, {bits})"
        if mask is None or is_true(mask):
            return load
        return f"({self.c(mask)} ? (la_u32){load} : {fill})"

    def store_element(
        self,
        pointer: str,
        tile: Tile,
        i: int,
        code: str,
        mask: Expr | None,
        base: ElementBase | None = None,
        combine: str | None = None,
    ) -> None:
        """Write `code` as register i's element at `pointer` (skipped where `mask` is false;
        through `base`, the thread's base pointer of the tile, when given), or, with
        `combine` (the C helper of a combining store, whole-byte elements), add it there."""
        address, unit = self.element_address(tile, i)
        bits = tile.element_bits
        if base is not None:
            name, offset, steps = base
            self.record(tile, i, 1, address, unit, mask, base=(name, offset, steps[i]))
            element = f"{name}[{steps[i]}]"
        else:
            self.record(tile, i, 1, address, unit, mask)
            element = None
            if bits % 8 == 0:
                element = f"(({_unsigned(bits)}*){pointer})[{self.c(address)}]"
        if element is None:
            statement = f"la_store_bits({pointer}, {self.c(address)}, {code}, {bits});"
        elif combine is not None:
            statement = f"{combine}(&{element}, {code});"
        else:
            statement = f"{element} = {code};"
        self.guarded_line(statement, mask)

    def guarded_line(self, statement: str, mask: Expr | None) -> None:
        """Write `statement`, under ``if (mask)`` unless `mask` is None or known true."""
        if mask is None or is_true(mask):
            self.out.line(statement)
        else:
            with self.out.block(f"if ({self.c(mask)})"):
                self.out.line(statement)

    def recorded_vector(
        self, tile: Tile, first: int, width: int, mask: Expr | None
    ) -> tuple[str, int]:
        """Record the vector access of registers first .. first + width - 1 of `tile` (guarded
        by `mask`); (the C text of its byte offset, its size in bytes)."""
        address = self.vector_address(tile, first)
        self.record(tile, first, width, address, 8, mask)
        return self.c(address), width * tile.element_bits // 8

    def load_vector(
        self,
        out: RegisterTensor,
        pointer: str,
        tile: Tile,
        first: int,
        width: int,
        mask: Expr | None,
    ) -> None:
        """Load registers first .. first + width - 1 of `out` with one vector access."""
        address, vector_bytes = self.recorded_vector(tile, first, width, mask)
        self.note(f"load {vector_bytes} B")
        kind = VECTOR_TYPES[vector_bytes]
        vector = self.temporary("v")
        with self.out.block():
            self.out.line(f"const {kind} {vector} = *(const {kind}*)({pointer} + ({address}));")
            bit = first * tile.element_bits
            if vector_bytes >= 4 and bit % 32 == 0:
                # Whole words of the register tensor: the vector's words as they are.
                for q, word in enumerate(unpack_expressions(vector, vector_bytes, 32)):
                    self.out.line(f"{self.word(out, bit // 32 + q)} = {word};")
                return
            for j, code in enumerate(unpack_expressions(vector, vector_bytes, tile.element_bits)):
                self.write_element(out, first + j, code)

    def load_elements(
        self,
        out: RegisterTensor,
        pointer: str,
        tile: Tile,
        first: int,
        width: int,
        masked: bool,
        fill: str = "0u",
    ) -> None:
        """Load registers first .. first + width - 1 of `out` one by one (the code `fill` out
        of bounds)."""
        masks = [
            tile.inside(self.thread, i, 1) if masked else None for i in range(first, first + width)
        ]
        self.note_elements("load", tile, width, masks)
        for i, mask in zip(range(first, first + width), masks):
            if mask is not None and is_false(mask):
                self.write_element(out, i, fill)
            else:
                self.write_element(out, i, self.load_element(pointer, tile, i, mask, fill))

    def store_vector(
        self,
        src: RegisterTensor,
        pointer: str,
        tile: Tile,
        first: int,
        width: int,
        mask: Expr | None,
        combine: bool = False,
    ) -> None:
        """Store registers first .. first + width - 1 of `src` with one vector access; with
        `combine`, add them with one vector add (`combine_helper`, `COMBINE_SOURCE`), its
        32-bit words in order."""
        address, vector_bytes = self.recorded_vector(tile, first, width, mask)
        bit = first * tile.element_bits
        if combine:
            self.note(f"combine {vector_bytes} B")
            words = ", ".join(self.word(src, bit // 32 + q) for q in range(vector_bytes // 4))
            helper = combine_helper(src.dtype.name, width)
            self.out.line(f"{helper}({pointer} + ({address}), {words});")
            return
        self.note(f"store {vector_bytes} B")
        kind = VECTOR_TYPES[vector_bytes]
        if vector_bytes >= 4 and bit % 32 == 0:
            # Whole words of the register tensor: stored as they are.
            words = [self.word(src, bit // 32 + q) for q in range(vector_bytes // 4)]
            packed = pack_expression(words, vector_bytes, 32)
        else:
            codes = [self.element(src, first + j) for j in range(width)]
            packed = pack_expression(codes, vector_bytes, tile.element_bits)
        self.out.line(f"*({kind}*)({pointer} + ({address})) = {packed};")

    def store_elements(
        self,
        src: RegisterTensor,
        pointer: str,
        tile: Tile,
        first: int,
        width: int,
        masked: bool,
        base: ElementBase | None = None,
        combine: bool = False,
    ) -> None:
        """Store registers first .. first + width - 1 of `src` one by one (skipped out of
        bounds), through `base` when given; with `combine`, add them (`store_element`)."""
        masks = [
            tile.inside(self.thread, i, 1) if masked else None for i in range(first, first + width)
        ]
        self.note_elements("combine" if combine else "store", tile, width, masks)
        helper = combine_helper(src.dtype.name) if combine else None
        for i, mask in zip(range(first, first + width), masks):
            if mask is None or not is_false(mask):
                code = self.element(src, i)
                self.store_element(pointer, tile, i, code, mask, base, helper)

    def note_elements(self, verb: str, tile: Tile, width: int, masks: list[Expr | None]) -> None:
        """Note `width` element moves: native ones (whole 1-, 2- or 4-byte elements, each
        without a bounds check or with one known true) as "{verb} N B", the others as
        generic."""
        bits = tile.element_bits
        checked = any(m is not None and not is_true(m) for m in masks)
        if bits in (8, 16, 32) and not checked:
            self.note(f"{verb} {bits // 8} B", width)
        else:
            self.note(f"{verb} element by element", width, generic=True)

    def vector_runs(
        self,
        tile: Tile,
        width: int,
        masked: bool,
        vector: Callable[[int, Expr | None], None],
        elements: Callable[[int], None],
        edge: Callable[[int], None] | None = None,
        outside: Callable[[int], None] | None = None,
    ) -> None:
        """Emit every run of `width` registers of `tile` (registers first .. first + width - 1,
        first a multiple of width): the skeleton of every load, store and copy.

        With `masked`, each run's mask says whether it lies wholly inside the tensor's shape. A
        run moves as one vector (`vector(first, mask)`) when width > 1 and its mask is known
        true (or there is none), element by element (`elements(first)`) when width is 1 or its
        mask is known false, and otherwise under ``if (mask)`` as a vector, with `edge(first)`
        (default: `elements`) in the ``else``. When the masks of the run's first and last
        elements are the run's own mask (it does not depend on the position along the run,
        e.g. only a row bound), the run is wholly inside or wholly outside: the ``else`` is
        `outside(first)` (for a load, the fill; for a store, nothing) when given.
        """
        for first in range(0, tile.register.local_size, width):
            mask = tile.inside(self.thread, first, width) if masked else None
            if width == 1 or (mask is not None and is_false(mask)):
                elements(first)
            elif mask is None or is_true(mask):
                vector(first, mask)
            else:
                with self.out.block(f"if ({self.c(mask)})"):
                    vector(first, mask)
                uniform = outside is not None and all(
                    tile.inside(self.thread, i, 1) == mask for i in (first, first + width - 1)
                )
                if uniform:
                    self.note("bounds checked per vector", width)
                    outside(first)
                    continue
                with self.out.block("else"):
                    (edge or elements)(first)

    def load_tile(
        self,
        out: RegisterTensor,
        pointer: str,
        tile: Tile,
        width: int,
        masked: bool,
        fill: str = "0u",
    ) -> None:
        """Load every register of `out` from a tile, `width` registers a vector; with `masked`,
        a vector not wholly inside the tensor's shape goes element by element, an element
        outside it taking the code `fill`."""

        def fill_run(first: int) -> None:
            with self.out.block("else"):
                for i in range(first, first + width):
                    self.write_element(out, i, fill)

        self.vector_runs(
            tile,
            width,
            masked,
            lambda first, mask: self.load_vector(out, pointer, tile, first, width, mask),
            lambda first: self.load_elements(out, pointer, tile, first, width, masked, fill),
            outside=fill_run,
        )

    def store_tile(
        self,
        src: RegisterTensor,
        pointer: str,
        tile: Tile,
        width: int,
        masked: bool,
        combine: bool = False,
    ) -> None:
        """Store every register of `src` into a tile, as `load_tile` loads; only the primary
        replica stores. Element by element in global memory, through one base pointer of the
        thread's tile (`element_base`). With `combine`, add instead (a combining store)."""
        with self.primary_replica(src.layout):
            base = self.element_base(pointer, tile) if width == 1 else None
            self.vector_runs(
                tile,
                width,
                masked,
                lambda first, mask: self.store_vector(
                    src, pointer, tile, first, width, mask, combine
                ),
                lambda first: self.store_elements(
                    src, pointer, tile, first, width, masked, base, combine
                ),
                outside=lambda first: None,
            )

    def element_base(self, pointer: str, tile: Tile) -> ElementBase | None:
        """Where `tile` lies in global memory in whole-byte elements and each register's
        element offset is the first register's plus a constant (an affine layout, register
        coordinates ``map(t, 0) + map(0, i)``): declare a pointer to the thread's first element
        once, so that each element's access is that pointer and a constant index, not its own
        (64-bit) address arithmetic; `store_element` then writes through it. None (nothing
        declared) for any other tile."""
        bits = tile.element_bits
        if not isinstance(tile.memory, GlobalLayout) or bits not in (8, 16, 32):
            return None
        first = tile.offset(self.thread, 0)
        steps = []
        for i in range(tile.register.local_size):
            step = simplify(tile.offset(self.thread, i) - first)
            if step.op != "const":
                return None
            steps.append(step.value)
        name = self.temporary("base")
        kind = _unsigned(bits)
        self.out.line(f"{kind}* const {name} = (({kind}*){pointer}) + ({self.c(first)});")
        return name, first, steps

    def visit_load_global(self, instruction: instructions.LoadGlobal) -> None:
        out, src = instruction.out, instruction.src
        tile = self.register_tile(src, out.layout, instruction.offsets, "src")
        self.declare(out)
        fill = int(src.dtype.encode(np.array([instruction.fill]))[0])
        self.load_tile(out, src.name, tile, self.global_width(tile, src), True, f"{fill}u")

    def visit_prefetch_global(self, instruction: instructions.PrefetchGlobal) -> None:
        """One ``prefetch.global.L1`` (``.L2`` at level L2) per vector a `load_global` of the
        tile would read (per element where it would read element by element), under the same
        bounds checks; every address is recorded for `proofs.validate_lowering` as a load's
        is."""
        src = instruction.src
        tile = self.register_tile(src, instruction.layout, instruction.offsets, "src")
        width = self.global_width(tile, src)
        helper = f"la_prefetch_{instruction.level.lower()}"
        self.vector_runs(
            tile,
            width,
            True,
            lambda first, mask: self.prefetch_vector(helper, src.name, tile, first, width, mask),
            lambda first: self.prefetch_elements(helper, src.name, tile, first, width),
            outside=lambda first: None,
        )

    def prefetch_vector(
        self, helper: str, pointer: str, tile: Tile, first: int, width: int, mask: Expr | None
    ) -> None:
        """Prefetch the line of registers first .. first + width - 1 with one address, by the
        C function `helper` (`PREFETCH_SOURCE`: one per cache level)."""
        address, vector_bytes = self.recorded_vector(tile, first, width, mask)
        self.note(f"prefetch {vector_bytes} B")
        self.out.line(f"{helper}({pointer} + ({address}));")

    def prefetch_elements(
        self, helper: str, pointer: str, tile: Tile, first: int, width: int
    ) -> None:
        """Prefetch the lines of registers first .. first + width - 1 one by one (none for an
        element known to be out of bounds); sub-byte elements by `helper`'s ``_bits`` twin."""
        masks = [tile.inside(self.thread, i, 1) for i in range(first, first + width)]
        self.note_elements("prefetch", tile, width, masks)
        bits = tile.element_bits
        for i, mask in zip(range(first, first + width), masks):
            if mask is not None and is_false(mask):
                continue
            address, unit = self.element_address(tile, i)
            self.record(tile, i, 1, address, unit, mask)
            if bits % 8 == 0:
                where = f"&((const {_unsigned(bits)}*){pointer})[{self.c(address)}]"
                self.guarded_line(f"{helper}({where});", mask)
            else:
                self.guarded_line(f"{helper}_bits({pointer}, {self.c(address)});", mask)

    def visit_store_global(self, instruction: instructions.StoreGlobal) -> None:
        dst, src = instruction.dst, instruction.src
        tile = self.register_tile(dst, src.layout, instruction.offsets, "dst")
        width = self.global_width(tile, dst)
        if instruction.combine is not None:
            self.combine_tile(src, dst.name, tile, width)
            return
        self.store_tile(src, dst.name, tile, width, masked=True)

    def combine_tile(self, src: RegisterTensor, pointer: str, tile: Tile, width: int) -> None:
        """A combining store (``combine="add"``): the primary replica of each element adds it,
        atomically, through `COMBINE_SOURCE`'s helpers for the type. f32, f16 and bf16 add runs
        of `width` registers (the store's vector width, at most 16 bytes) with one vector
        ``red.global.add`` each where a run lies inside the tensor; i32, which has no vector
        form, and the runs at an edge add element by element, through the thread's base
        pointer where the layout allows, each under its bounds check. Every address is
        recorded as a store's."""
        if src.dtype.name not in VECTOR_COMBINE_DTYPES:
            width = 1
        self.store_tile(src, pointer, tile, width, True, combine=True)

    def visit_atomic_add(self, instruction: instructions.AtomicAdd) -> None:
        """The block (in a thread group, the group) syncs; the primary thread (0) adds with
        release and acquire at GPU scope (`cuda_codegen.TICKET_SOURCE`, which says why that
        orders every thread's stores before and loads after); the threads sync again and every
        thread reads the old value from shared memory (the block's slot, or its group's). Out
        of bounds: no access, the value 0."""
        dst, name = instruction.dst, instruction.var.name
        layout = replicate(self.threads).reshape(*([1] * dst.rank))
        tile = self.register_tile(dst, layout, instruction.offsets, "dst")
        slot = f"*(int*)(la_smem + {self.ticket_slots[self.group]})"
        barrier = self.barrier()
        self.out.line(barrier)
        self.note("atomic add")
        with self.primary_replica(layout):
            address, unit = self.element_address(tile, 0)
            mask = tile.inside(self.thread, 0, 1)
            self.record(tile, 0, 1, address, unit, mask)
            value = self.c(instruction.value)
            add = f"la_ticket_add(&((int*){dst.name})[{self.c(address)}], (int)({value}))"
            if mask is not None and not is_true(mask):
                add = f"({self.c(mask)} ? {add} : 0)"
            self.out.line(f"{slot} = {add};")
        self.out.line(barrier)
        self.out.line(f"const int {name} = {slot};")
        self.out.line(f"const long long {WIDE_PREFIX}{name} = {name};")

    def visit_load_shared(self, instruction: instructions.LoadShared) -> None:
        if id(instruction) in self.deferred_loads:
            # Its dot may read the tile through wgmma; it writes the load if not.
            self.pending_loads[id(instruction)] = instruction
            return
        self.lower_load_shared(instruction)

    def lower_load_shared(self, instruction: instructions.LoadShared) -> None:
        """A `load_shared`: ldmatrix where a plan exists, else the generic tile load."""
        out, src = instruction.out, instruction.src
        self.generic_reads.add(src.name)
        self.declare(out)
        plan, originals = None, {}
        if self.tensor_cores and src.dtype.nbits == 16:
            plan, originals = self.matrix_plan(plan_ldmatrix, src, out.layout, instruction.offsets)
        if plan is not None:
            self.plans.append(plan)
            self.note("ldmatrix", len(plan.instructions))
            pointer = f"((unsigned short*){src.name})"
            self.out.lines(emit_ldmatrix(plan, pointer, out.name, THREAD_NAME, originals))
            return
        tile = self.register_tile(src, out.layout, instruction.offsets, "src")
        self.load_tile(out, src.name, tile, self.shared_width(tile), masked=False)

    def matrix_plan(
        self,
        planner: Callable[..., LdmatrixPlan | None],
        shared: SharedTensor,
        layout: RegisterLayout,
        offsets: Sequence[Expr],
    ) -> tuple[LdmatrixPlan | None, dict[str, Expr]]:
        """The ldmatrix or stmatrix plan (`planner`: `plan_ldmatrix` or `plan_stmatrix`) of
        moving the tile of `layout` at `offsets` of `shared`, and the original offsets of its
        fresh variables (for the emitter's substitutions); (None, {}) when there is none."""
        # First over the values the offsets take (few, and claims that z3 settles fast),
        # then over the values of the variables behind them.
        ranges = self.loop_ranges(offsets)
        abstract = offset_values(offsets, ranges)
        if abstract is not None:
            fresh, values, originals = abstract
            plan = planner(shared.layout, layout, shared.dtype, fresh, values)
            if plan is not None:
                return plan, originals
        if self.few_offset_values(offsets, ranges):
            return planner(shared.layout, layout, shared.dtype, offsets, ranges), {}
        return None, {}

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

    def visit_store_shared(self, instruction: instructions.StoreShared) -> None:
        """A `store_shared`: stmatrix where a plan exists and takes fewer instructions than
        the generic store's vectors, and no two threads hold one element (sm_90 and newer);
        else the generic tile store (by the primary replica)."""
        dst, src = instruction.dst, instruction.src
        tile = self.register_tile(dst, src.layout, instruction.offsets, "dst")
        width = self.shared_width(tile)
        if (
            self.arch is not None
            and arch_number(self.arch) >= MINIMUM_STMATRIX_ARCH
            and dst.dtype.nbits == 16
            and primary_condition(src.layout, self.thread) is None
        ):
            plan, originals = self.matrix_plan(plan_stmatrix, dst, src.layout, instruction.offsets)
            if plan is not None and len(plan.instructions) < src.layout.local_size // width:
                self.plans.append(plan)
                self.note("stmatrix", len(plan.instructions))
                pointer = f"((unsigned short*){dst.name})"
                self.out.lines(emit_stmatrix(plan, pointer, src.name, THREAD_NAME, originals))
                return
        self.store_tile(src, dst.name, tile, width, masked=False)

    def visit_copy_async(self, instruction: instructions.CopyAsync) -> None:
        dst, src = instruction.dst, instruction.src
        bits = src.dtype.nbits
        layout = instruction.layout
        if layout is None:
            layout = default_copy_layout(instruction.shape, bits, self.threads)
        source = self.register_tile(src, layout, instruction.src_offsets, "src")
        target = self.register_tile(dst, layout, instruction.dst_offsets, "dst")
        width = min(self.global_width(source, src), self.shared_width(target))

        def elements(first: int) -> None:
            # A lone element of 4 bytes or more is still one cp.async (zero-filled where it may
            # lie outside the source); smaller ones, and those known outside, are copied.
            mask = source.inside(self.thread, first, 1)
            if width > 1 or bits < 32 or is_false(mask):
                self.copy_elements(source, src.name, target, dst.name, first, width)
            elif is_true(mask):
                self.copy_vector(source, src.name, target, dst.name, first, 1, mask)
            else:
                self.copy_edge(source, src.name, target, dst.name, first, 1)

        with self.primary_replica(layout):
            self.vector_runs(
                source,
                width,
                True,
                lambda first, mask: self.copy_vector(
                    source, src.name, target, dst.name, first, width, mask
                ),
                elements,
                lambda first: self.copy_edge(source, src.name, target, dst.name, first, width),
            )

    def copy_edge(
        self, source: Tile, src: str, target: Tile, dst: str, first: int, width: int
    ) -> None:
        """Copy a vector not wholly inside the source: when its registers inside are a prefix,
        one ``cp.async`` reads them and zero-fills the rest; else element by element."""
        vector_bytes = width * source.element_bits // 8
        prefix = source.prefix(self.thread, first, width)
        if prefix is None or vector_bytes < 4:
            self.copy_elements(source, src, target, dst, first, width)
            return
        condition, count = prefix
        with self.out.block("" if is_true(condition) else f"if ({self.c(condition)})"):
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
            bits = source.element_bits
            if bits % 8 == 0:
                bytes_read = f"{elements} * {bits // 8}"
                self.out.line(f"la_cp_async_zfill_{vector_bytes}({to}, {frm}, {bytes_read});")
            else:
                # cp.async reads and zero-fills whole bytes: a prefix ending inside a byte
                # would lose its last elements (or read the ones after it), so it is copied
                # element by element instead.
                with self.out.block(f"if ({elements} * {bits} % 8 == 0)"):
                    bytes_read = f"{elements} * {bits} / 8"
                    self.out.line(f"la_cp_async_zfill_{vector_bytes}({to}, {frm}, {bytes_read});")
                with self.out.block("else"):
                    self.copy_elements(source, src, target, dst, first, width)
            self.note(f"cp.async {vector_bytes} B, zero-filled")
        if not is_true(condition):
            with self.out.block("else"):
                self.copy_elements(source, src, target, dst, first, width)

    def copy_vector(
        self,
        source: Tile,
        src: str,
        target: Tile,
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
            self.note(f"cp.async {vector_bytes} B")
        else:
            self.note(f"copy {vector_bytes} B")
            kind = VECTOR_TYPES[vector_bytes]
            self.out.line(f"*({kind}*)({to}) = *(const {kind}*)({frm});")

    def copy_elements(
        self, source: Tile, src: str, target: Tile, dst: str, first: int, width: int
    ) -> None:
        """Copy registers first .. first + width - 1 element by element, synchronously (0 for
        elements outside the source's shape)."""
        self.note("copy element by element", width, generic=True)
        for i in range(first, first + width):
            mask = source.inside(self.thread, i, 1)
            code = "0u" if is_false(mask) else self.load_element(src, source, i, mask)
            self.store_element(dst, target, i, code, None)

    def visit_copy_async_commit(self, instruction: instructions.CopyAsyncCommit) -> None:
        self.out.line("la_cp_async_commit();")

    def visit_copy_async_wait(self, instruction: instructions.CopyAsyncWait) -> None:
        self.out.line(f"la_cp_async_wait<{instruction.pending}>();")

    def visit_copy_bulk(self, instruction: instructions.CopyBulk) -> None:
        """One bulk tensor copy from thread 0 on the stage's barrier where the destination's
        bulk copies are planned as TMA (`backend.bulk_copy`), else ``cp.async`` by every
        thread."""
        dst, src = instruction.dst, instruction.src
        plan = self.bulk.tensors.get(dst.name)
        if plan is None:
            # Runs along the source's unit-stride dimension, 16-byte vectors where it allows.
            order = unit_stride_order(src.layout.strides)
            layout = default_copy_layout(instruction.shape, src.dtype.nbits, self.threads, order)
            copy = instructions.CopyAsync(
                dst,
                src,
                instruction.src_offsets,
                instruction.dst_offsets,
                instruction.shape,
                layout,
            )
            self.visit_copy_async(copy)
            return
        lead = len(plan.stages)
        slot = plan.slot(tuple(o.value for o in instruction.dst_offsets[lead:]))
        stage = self.c(as_expr(plan.stage_index(instruction.dst_offsets[:lead])))
        barrier = f"&la_bar_{dst.name}[{plan.barrier(stage, slot)}]"
        address = f"{dst.name} + ({plan.slot_starts[slot]} + ({stage}) * {plan.stage_bytes})"

        def coordinates(part: str | None) -> str:
            """The tensor map's coordinates: the box's innermost dimension first, 32-bit
            (outside the tensor: zeros); with `part` (a block's rank in its cluster), that
            part's along the dimension a shared copy is cut along."""
            return ", ".join(
                f"(int)({self.c(as_expr(instruction.src_offsets[d]))})"
                + (f" + (int){part} * {plan.part_extent}" if part and d == plan.split_dim else "")
                for d in reversed(plan.box.order)
            )

        rank = len(instruction.shape)
        map_name = self.bulk.map_name(instruction)
        if plan.released:
            self.wait_until_free(dst.name, plan.barrier(stage, slot), plan.phase_bit(stage, slot))
        with self.out.block(f"if ({THREAD_NAME} == 0)"):
            # Shared memory the block touched before the barrier (or release) preceding this
            # copy is done with before the async proxy writes it (a mark: no fence where only
            # the async proxy touches the tensor, `backend.bulk_copy.async_only`).
            self.out.line(f"{TMA_FENCE_MARK}{dst.name}")
            # Every block's barrier waits for the whole tile, whoever issues its parts.
            self.out.line(f"la_mbarrier_expect({barrier}, {plan.box.nbytes}u);")
            if plan.multicast == 1:
                coords = coordinates(None)
                self.out.line(f"la_tma_load_{rank}d({address}, &{map_name}, {barrier}, {coords});")
            else:
                # This block's part of the tile, into every block of the cluster.
                part = self.temporary("part")
                self.out.line(f"const unsigned {part} = la_cluster_rank();")
                mask = (1 << plan.multicast) - 1
                self.out.line(
                    f"la_tma_multicast_{rank}d({address} + {part} * {plan.part_bytes}u, "
                    f"&{map_name}, {barrier}, (unsigned short){mask}u, {coordinates(part)});"
                )
        if not any(p is plan for p in self.plans):
            self.plans.append(plan)
        if plan.multicast == 1:
            self.note(f"bulk tensor copy {plan.box.nbytes} B")
        else:
            self.note(f"bulk tensor copy {plan.box.nbytes} B shared by {plan.multicast} blocks")

    def wait_until_free(self, name: str, barrier_text: str, bit_text: str) -> None:
        """Wait until every warp has released the slot's last copy (the first copy passes):
        on free barrier `barrier_text` of shared tensor `name`, for the parity of bit
        `bit_text` of the mask, then flip that bit (C texts; `BulkTensorPlan.barrier` and
        `phase_bit`). A copy shared by a cluster's blocks waits alike: every block's warps
        arrive on the barrier (`backend.bulk_copy.BulkTensorPlan.multicast`).

        Where the block is whole warps, warp 0's lanes all wait, on a condition read through
        a shuffle so that the compiler sees it is the same across the warp: a spin loop under
        a branch of one thread makes ptxas move the loop's scalar arithmetic out of the
        uniform datapath into vector registers. Every thread keeps the mask of parities."""
        index, bit = self.temporary("barrier"), self.temporary("bit")
        free = f"la_free_phases_{name}"
        self.out.line(f"const unsigned {index} = (unsigned)({barrier_text});")
        self.out.line(f"const unsigned {bit} = (unsigned)({bit_text});")
        if arrives_per_warp(self.threads):
            waiter = f"__shfl_sync(0xffffffffu, {THREAD_NAME} / {WARP_SIZE}, 0) == 0"
        else:
            waiter = f"{THREAD_NAME} == 0"
        with self.out.block(f"if ({waiter})"):
            self.out.line(f"la_mbarrier_wait(&la_free_{name}[{index}], ({free} >> {bit}) & 1u);")
        self.out.line(f"{free} ^= 1u << {bit};")

    def visit_copy_bulk_wait(self, instruction: instructions.CopyBulkWait) -> None:
        """Wait on the stage's barrier for the phase the next copy completes, or, where the
        copies fell back to ``cp.async``, for every copy of the thread and a barrier."""
        dst = instruction.dst
        plan = self.bulk.tensors.get(dst.name)
        if plan is None:
            self.check_copied_here(dst.name, "wait for")
            self.out.line("la_cp_async_commit();")
            self.out.line("la_cp_async_wait<0>();")
            self.proxy.pending = True  # the copies' writes complete here; the barrier fences
            self.visit_sync(instructions.Sync())
            self.note("bulk copy wait: every cp.async and a barrier")
            return
        stage_index, slots = plan.tile_slots(instruction.offsets, instruction.shape)
        stage = self.c(as_expr(stage_index))
        phases = f"la_phases_{dst.name}"
        # One wait per barrier: the stage's, where its slots share one.
        for slot in slots[:1] if plan.per_stage else slots:
            with self.out.block(""):
                index = self.temporary("barrier")
                self.out.line(f"const unsigned {index} = (unsigned)({plan.barrier(stage, slot)});")
                self.out.line(
                    f"la_mbarrier_wait(&la_bar_{dst.name}[{index}], ({phases} >> {index}) & 1u);"
                )
                self.out.line(f"{phases} ^= 1u << {index};")
        self.note("bulk copy wait on its barrier")

    def check_copied_here(self, name: str, verb: str) -> None:
        """Where the bulk copies into shared tensor `name` fell back to ``cp.async``: refuse
        a wait or a release (`verb`) by other threads than the copies', which only TMA's
        barriers order."""
        if self.bulk_group(name, instructions.CopyBulk) != self.group:
            raise self.fail(
                f"the bulk copies into {name} are issued by other threads than {verb} them, "
                "which only a copy written as TMA allows (sm_90a, a box the shared layout gives)"
            )

    def visit_copy_bulk_release(self, instruction: instructions.CopyBulkRelease) -> None:
        """Each warp's lane 0, once its lanes are past their reads, arrives on the free barrier
        of each slot of the tile (every thread where the block is not whole warps); where the
        copies fell back to ``cp.async``, a barrier of the block (`backend.bulk_copy`)."""
        dst = instruction.dst
        plan = self.bulk.tensors.get(dst.name)
        if plan is None:
            self.check_copied_here(dst.name, "release")
            self.visit_sync(instructions.Sync())
            self.note("bulk copy release: a barrier")
            return
        stage_index, slots = plan.tile_slots(instruction.offsets, instruction.shape)
        stage = self.c(as_expr(stage_index))
        per_warp = arrives_per_warp(self.threads)
        if per_warp:
            self.out.line("__syncwarp();")
        arrive = f"if (({THREAD_NAME} & {WARP_SIZE - 1}) == 0) " if per_warp else ""
        for slot in slots[:1] if plan.per_stage else slots:
            index = plan.barrier(stage, slot)
            if plan.multicast == 1:
                self.out.line(f"{arrive}la_mbarrier_arrive(&la_free_{dst.name}[{index}]);")
                continue
            # The next copy into the slot writes every block of the cluster: each block's
            # copying thread waits for the releases of all of them.
            with self.out.block(arrive.removesuffix(" ")):
                with self.out.block(
                    f"for (unsigned la_rank = 0; la_rank < {plan.multicast}u; ++la_rank)"
                ):
                    self.out.line(
                        f"la_mbarrier_arrive_remote(&la_free_{dst.name}[{index}], la_rank);"
                    )
        if plan.multicast == 1:
            self.note("bulk copy release: an arrival per warp on its free barriers")
        else:
            self.note("bulk copy release: an arrival per warp on the free barriers of each block")

    def visit_sync(self, instruction: instructions.Sync) -> None:
        if self.wgmma_dots and self.proxy.fence():
            # Shared memory written before the barrier, and not fenced since, may next be read
            # by wgmma: a mark that becomes a proxy fence if some dot gets a wgmma plan
            # (`finished_source`).
            self.out.line(PROXY_FENCE_MARK)
        self.out.line(self.barrier())

    def visit_wait_prior_grid(self, instruction: instructions.WaitPriorGrid) -> None:
        self.out.line("la_wait_prior_grid();")

    def visit_launch_dependents(self, instruction: instructions.LaunchDependents) -> None:
        self.out.line("la_launch_dependents();")

    def visit_shared_tensor_alloc(self, instruction: instructions.SharedTensorAlloc) -> None:
        tensor = instruction.out
        self.out.line(
            f"unsigned char* const {tensor.name} = la_smem + {self.shared_base[tensor.name]};"
        )

    def visit_global_view(self, instruction: instructions.GlobalView) -> None:
        view = instruction.out
        self.out.line(f"unsigned char* const {view.name} = {view.param.name};")

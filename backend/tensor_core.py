"""Tensor cores for `dot`: the choice of ``mma.sync`` m16n8k16, ``ldmatrix`` and ``stmatrix``, and
their C++.

The lowering asks two questions and gets a plan (or None, then it uses its generic code):

- `plan_mma(dot, arch)`: can this `Dot` run as warp-wide ``mma.sync.aligned.m16n8k16.row.col``
  (f16 or bf16 inputs, f32 accumulators) instructions? `emit_mma` prints them.
- `plan_ldmatrix(shared_layout, register_layout, dtype, offsets, values)`: can this
  `load_shared` of 16-bit elements run as ``ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans]``?
  `emit_ldmatrix` prints it.
- `plan_stmatrix(...)`, the same for a `store_shared` of 16-bit elements by
  ``stmatrix.sync.aligned.m8n8.x{1,2,4}[.trans]`` (sm_90 and newer); `emit_stmatrix` prints it.

`TENSOR_CORE_SOURCE` defines the device functions the printed code calls; the lowering includes
it once per kernel. Register arrays follow `backend.cuda_codegen`: one array element per tile
element holding its code (``unsigned short`` for f16 and bf16, ``unsigned int`` float32 bits for
f32), every index a compile-time constant.

**mma.** With the PTX fragments F_A (16 x 16), F_B (16 x 8) and F_C (16 x 8) of
`layout_algebra.fragments`, a dot qualifies when its layouts divide as ``a = R_A * F_A``,
``b = R_B * F_B``, ``c = R_C * F_C``. The quotients ("repeat layouts") have one thread per warp
and one register per 16 x 16, 16 x 8 or 16 x 8 block: R_C says which (M, N) blocks each warp
accumulates. For every such block and every k step the warp must hold the matching A block
(M block, k step) and B block (k step, N block) in the *same* registers in every warp (the code is
the same for all threads). Example, 4 warps as 2 x 2 over a 64 x 64 tile with k = 32::

    c = spatial(2, 2).local(2, 4) * F_C                  # warp (wm, wn): 2 x 4 blocks of 16 x 8
    a = spatial(2, 1).replicate(2).local(2, 2) * F_A     # its 2 M blocks x 2 k steps
    b = replicate(2).spatial(1, 2).local(2, 4) * F_B     # 2 k steps x its 4 N blocks

`mma_operand_layouts` builds such layouts. A plan lists its calls, k step outermost, so every
accumulator block sees k = 0, 16, 32, ... in order; the tensor core still adds the 16 products
of one step in its own order and precision, so results differ from the IR's sequential f32 sum
(`ir.instructions.Dot`) by rounding: compare mma results within a tolerance, never bit for bit.

**ldmatrix.** One instruction moves up to four 8 x 8 matrices of 16-bit elements from shared
memory: lane ``8m + r`` gives the address of row r of matrix m, eight consecutive elements (16
bytes, 16-byte aligned), and 32-bit register m of lane l receives two elements of matrix m: row
``l // 4``, columns ``2 (l % 4)`` and ``+ 1`` (``.trans``: rows ``2 (l % 4)`` and ``+ 1`` of column
``l // 4``). A load qualifies when every pair of registers (elements 2p, 2p + 1) of every warp is
such a matrix: its 64 elements form 8 rows of 8 consecutive, 16-byte aligned shared offsets.

**stmatrix** (sm_90) moves the same matrices the other way: lane ``8m + r`` gives the address of
row r of matrix m, and 32-bit register m of lane l is written to the elements ldmatrix would
have filled it from. So a store qualifies exactly when the load of the same tile would, and its
plan is the load's with the direction reversed (`StmatrixPlan`). The lowering takes it only where
it needs fewer instructions than the generic store and no two threads hold the same element.

**Proofs.** Every choice has a symbolic form for `proofs.check_equivalent`: `MmaPlan.claims()` and
`LdmatrixPlan.claims()` (`StmatrixPlan`'s alike) return pairs (`Claim`) of the function the emitted
code computes, built from the printed register indices and row addresses composed with the PTX
semantics of the instruction (`layout_algebra.fragments`' ``ptx`` formulas), and the function the IR
asks for (the operand layouts, the shared layout). A plan is right exactly when each pair is
equivalent.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from backend.errors import ArchitectureError
from ir import dtypes
from ir.dtypes import DataType
from ir.instructions import Dot
from layout_algebra.errors import LayoutError
from layout_algebra.fragments import fragment
from layout_algebra.function_layout import FunctionLayout
from layout_algebra.hardware import WARP_SIZE
from layout_algebra.register import RegisterLayout, local, replicate, spatial
from layout_algebra.shared import SharedLayout
from layout_algebra.symbolic import Expr, ExprLike, as_expr, evaluate, simplify, var

MMA_M, MMA_N, MMA_K = 16, 8, 16
"""The tile of one ``mma.sync`` m16n8k16: (M, N, K)."""
MINIMUM_MMA_ARCH = 80
"""``mma.sync`` m16n8k16 with f16 or bf16 inputs needs sm_80 or newer."""
MINIMUM_STMATRIX_ARCH = 90
"""``stmatrix`` needs sm_90 or newer."""
MAX_OFFSET_POINTS = 4096
"""`plan_ldmatrix` checks alignment at every combination of the offsets' values; it declines
(returns None) above this many combinations."""

_FRAGMENT_A = fragment("mma.m16n8k16.a")
_FRAGMENT_B = fragment("mma.m16n8k16.b")
_FRAGMENT_C = fragment("mma.m16n8k16.c")
_A_REGISTERS = _FRAGMENT_A.ptx.local_size
_B_REGISTERS = _FRAGMENT_B.ptx.local_size
_C_REGISTERS = _FRAGMENT_C.ptx.local_size
_ARCH_PATTERN = re.compile(r"sm_(?P<number>[1-9][0-9]{1,2})[af]?")
_MMA_FUNCTIONS = {dtypes.f16: "la_mma_m16n8k16_f16", dtypes.bf16: "la_mma_m16n8k16_bf16"}
_ROW_ELEMENTS = 8
"""Elements of one ldmatrix row: 16 bytes of 16-bit elements."""


def _mma_function(name: str, input_type: str) -> str:
    return f"""
__device__ __forceinline__ void {name}(
    unsigned int& d0, unsigned int& d1, unsigned int& d2, unsigned int& d3, unsigned int a0,
    unsigned int a1, unsigned int a2, unsigned int a3, unsigned int b0, unsigned int b1)
{{
    float c0 = __uint_as_float(d0), c1 = __uint_as_float(d1);
    float c2 = __uint_as_float(d2), c3 = __uint_as_float(d3);
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.{input_type}.{input_type}.f32 "
        "{{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\\n"
        : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    d0 = __float_as_uint(c0);
    d1 = __float_as_uint(c1);
    d2 = __float_as_uint(c2);
    d3 = __float_as_uint(c3);
}}
"""


def _matrix_function(count: int, transpose: bool, store: bool) -> str:
    """The device function of one ``ldmatrix`` (registers out) or, with `store`, one
    ``stmatrix`` (registers in) of `count` matrices, plain or `transpose`d."""
    name = _matrix_name(count, transpose, store)
    suffix = ".trans" if transpose else ""
    if store:
        parameters = "void* row, " + ", ".join(f"unsigned int r{k}" for k in range(count))
        operands = "[%0], {" + ", ".join(f"%{k + 1}" for k in range(count)) + "}"
        outputs, inputs = "", '"r"(address), ' + ", ".join(f'"r"(r{k})' for k in range(count))
    else:
        parameters = ", ".join(f"unsigned int& r{k}" for k in range(count)) + ", const void* row"
        operands = "{" + ", ".join(f"%{k}" for k in range(count)) + f"}}, [%{count}]"
        outputs, inputs = " " + ", ".join(f'"=r"(r{k})' for k in range(count)), '"r"(address)'
    mnemonic = "stmatrix" if store else "ldmatrix"
    return f"""
__device__ __forceinline__ void {name}({parameters})
{{
    const unsigned int address = (unsigned int)__cvta_generic_to_shared(row);
    asm volatile("{mnemonic}.sync.aligned.m8n8.x{count}{suffix}.shared.b16 "
                 "{operands};\\n"
                 :{outputs}
                 : {inputs}
                 : "memory");
}}
"""


def _matrix_name(count: int, transpose: bool, store: bool) -> str:
    return f"la_{'st' if store else 'ld'}matrix_x{count}{'_trans' if transpose else ''}"


TENSOR_CORE_SOURCE = (
    "\n/* ---- tensor-core helpers (see backend/tensor_core.py) ---- */\n"
    + """
/* Two 16-bit codes as one 32-bit register, `low` in bits 0-15 (the order of mma operands). */
__device__ __forceinline__ unsigned int la_pack_b16x2(unsigned short low, unsigned short high)
{
    return (unsigned int)low | ((unsigned int)high << 16);
}
"""
    + _mma_function(_MMA_FUNCTIONS[dtypes.f16], "f16")
    + _mma_function(_MMA_FUNCTIONS[dtypes.bf16], "bf16")
    + "".join(
        _matrix_function(count, transpose, False)
        for count in (1, 2, 4)
        for transpose in (False, True)
    )
)
"""Device functions called by `emit_mma` and `emit_ldmatrix` (sm_80 and newer).

``la_mma_m16n8k16_f16`` / ``_bf16(d0..d3, a0..a3, b0, b1)``: d += A B on one 16 x 8 x 16 block,
d as float32 bits, a and b as pairs of 16-bit codes (`la_pack_b16x2`), fragments as in the PTX
ISA. ``la_ldmatrix_x{1,2,4}[_trans](r0.., row)``: one ``ldmatrix``; `row` is the generic
address of this lane's 16-byte row in shared memory.
"""

STMATRIX_SOURCE = (
    "\n/* ---- stmatrix helpers, sm_90 and newer (see backend/tensor_core.py) ---- */\n"
    + "".join(
        _matrix_function(count, transpose, True)
        for count in (1, 2, 4)
        for transpose in (False, True)
    )
)
"""Device functions called by `emit_stmatrix` (sm_90 and newer, so apart from
`TENSOR_CORE_SOURCE`). ``la_stmatrix_x{1,2,4}[_trans](row, r0..)``: one ``stmatrix``; `row` is
the generic address of this lane's 16-byte row in shared memory, r0.. the 32-bit registers
stored (two 16-bit codes each, `la_pack_b16x2`'s order)."""


def arch_number(arch: str) -> int:
    """The compute capability of an architecture name: ``"sm_90a"`` gives 90.

    Raises ArchitectureError for a name that is not ``sm_<number>`` with an optional ``a`` or
    ``f`` suffix.
    """
    match = _ARCH_PATTERN.fullmatch(arch) if isinstance(arch, str) else None
    if match is None:
        raise ArchitectureError(f"architecture {arch!r} is not of the form sm_XX, e.g. 'sm_90a'")
    return int(match.group("number"))


# ------------------------------------------------------------------------------------------------
# Claims: what the emitted code computes against what the IR asks
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """One proof obligation of a plan: `emitted` and `required` must be the same function.

    `name` says what is claimed; `emitted` is what the printed code computes (its constants and
    expressions composed with the instruction's PTX semantics), `required` what the IR's layouts
    ask for. Both are `FunctionLayout`s (mma) or `AddressMap`s (ldmatrix), so
    ``proofs.check_equivalent(claim.emitted, claim.required)`` decides the claim, and comparing
    their ``table()``s checks it by brute force.
    """

    name: str
    emitted: Any
    required: Any


@dataclass(frozen=True)
class AddressMap:
    """An access map (t, i) -> element offset given by one `Expr` `formula` in the variables
    ``t`` and ``i`` and, optionally, parameters (the offsets of a load: loop variables).

    It follows the "access" protocol of the proofs package: `num_threads`, `local_size`,
    ``offset(t, i)`` on ints, NumPy arrays or `Expr`s, and ``bind(env)`` fixing parameters.
    """

    name: str
    num_threads: int
    local_size: int
    formula: Expr

    def offset(self, t: Any, i: Any) -> Any:
        """The offset of register `i` of thread `t`: `formula` with t and i substituted
        (`Expr`s) or evaluated (ints or NumPy arrays; every parameter must be bound first,
        LayoutError otherwise)."""
        if isinstance(t, Expr) or isinstance(i, Expr):
            return self.formula.substitute({"t": t, "i": i})
        return evaluate(self.formula, {"t": t, "i": i})

    def bind(self, env: Mapping[str, int]) -> AddressMap:
        """The map with the parameters named in `env` replaced by their ints."""
        return AddressMap(
            self.name, self.num_threads, self.local_size, self.formula.substitute(env)
        )

    def table(self) -> np.ndarray:
        """Every offset as an int64 array [num_threads, local_size] (parameters bound first)."""
        t = np.arange(self.num_threads, dtype=np.int64)[:, None]
        i = np.arange(self.local_size, dtype=np.int64)[None, :]
        return np.broadcast_to(self.offset(t, i), (self.num_threads, self.local_size)).copy()


def _indicator(index: Any, value: int, size: int) -> Any:
    """1 where ``index == value``, else 0, for 0 <= index, value < size, with ``+ - // %``
    only: ``(index - value) % size`` is 0 exactly at the value, and ``(x + size - 1) // size``
    is 0 for x = 0 and 1 for 0 < x < size."""
    return 1 - ((index - value) % size + size - 1) // size


def table_lookup(table: Sequence[int], index: Any) -> Any:
    """``table[index]`` as integer arithmetic on `index` (an int, array or `Expr`), so that the
    formula of a claim runs on every kind of index: the closed form ``a (index // d) + b (index
    % d) + c`` when one fits the whole table (cheap for the solver), else a sum of indicators."""
    size = len(table)
    for d in range(1, size + 1):
        c = table[0]
        b = table[1] - c if 1 < d else 0
        a = table[d] - c if d < size else 0
        if all(a * (q // d) + b * (q % d) + c == value for q, value in enumerate(table)):
            return a * (index // d) + b * (index % d) + c
    total: Any = 0
    for position, value in enumerate(table):
        if value:
            total = total + value * _indicator(index, position, size)
    return total


# ------------------------------------------------------------------------------------------------
# mma.sync m16n8k16
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MmaCall:
    """One ``mma.sync``: accumulator block `c_block` (registers ``4 c_block .. + 3`` of c) +=
    A block `a_block` (registers ``8 a_block .. + 7`` of a) times B block `b_block` (registers
    ``4 b_block .. + 3`` of b), at k step `k_step` (columns ``16 k_step ..`` of a)."""

    a_block: int
    b_block: int
    c_block: int
    k_step: int


@dataclass(frozen=True)
class MmaPlan:
    """How a `dot` runs on tensor cores (see the module docstring).

    Fields: `dtype` (f16 or bf16, the inputs' type), the operand layouts `a_layout`,
    `b_layout`, `c_layout` (the result's layout is c's), their repeat layouts `a_repeats`,
    `b_repeats`, `c_repeats` (``a_layout == a_repeats * F_A`` ...: one thread per warp, one
    register per fragment) and `calls`, the ``mma.sync`` instructions in emission order: k step
    outer, accumulator block inner (call ``q = k_step * c_blocks + c_block``).
    """

    dtype: DataType
    a_layout: RegisterLayout
    b_layout: RegisterLayout
    c_layout: RegisterLayout
    a_repeats: RegisterLayout
    b_repeats: RegisterLayout
    c_repeats: RegisterLayout
    calls: tuple[MmaCall, ...]

    @property
    def instruction(self) -> str:
        """The PTX instruction every call issues."""
        kind = "f16" if self.dtype == dtypes.f16 else "bf16"
        return f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32"

    @property
    def k_steps(self) -> int:
        """K // 16: mma calls per accumulator block."""
        return self.a_layout.shape[1] // MMA_K

    @property
    def c_blocks(self) -> int:
        """Accumulator blocks (16 x 8) per warp: `c_repeats.local_size`."""
        return self.c_repeats.local_size

    def claims(self) -> tuple[Claim, Claim, Claim]:
        """The three proof obligations that make the emitted calls compute ``a @ b + c``.

        Over the calls q (local index ``p = 8 q + j`` for A's eight fragment registers j, ``4 q
        + j`` for B), with ``w = t // 32`` and lane ``l = t % 32``:

        - ``a``: emitted ``a_layout.map(t, 8 a_block(q) + j)``, the element the printed index
          reads; required: the PTX A fragment's element (l, j) of the block (M block of the
          accumulator block c_block(q) the call updates, k step of q), ``(16 mi + row_A(l, j),
          16 k_step(q) + col_A(l, j))``, where ``mi = c_layout.map(32 w, 4 c_block(q))[0] //
          16`` (lane 0, register 0 of an accumulator fragment holds its block's corner);
        - ``b``: the same for B: ``(16 k_step(q) + row_B(l, j), 8 ni + col_B(l, j))``;
        - ``c``: emitted: register ``4 r + j`` of thread t receives the PTX accumulator
          fragment's element (l, j) of the block whose corner lane 0 of its warp holds in
          register 4 r; required: ``c_layout``.

        a_block, b_block and c_block are the indices printed into the calls; k_step is each
        call's k step. With every accumulator block meeting each k step exactly once (`calls`
        does, in increasing order) they say each result element is c plus the sum over k of
        a b.
        """
        calls = self.calls
        a_blocks = [call.a_block for call in calls]
        b_blocks = [call.b_block for call in calls]
        c_blocks = [call.c_block for call in calls]
        k_steps = [call.k_step for call in calls]
        c_layout = self.c_layout
        threads = c_layout.num_threads

        def corner(t: Any, block: Any) -> tuple[Any, Any]:
            row, col = c_layout.map(WARP_SIZE * (t // WARP_SIZE), _C_REGISTERS * block)
            return row // MMA_M, col // MMA_N

        def emitted_a(t: Any, p: Any) -> tuple[Any, ...]:
            q, j = p // _A_REGISTERS, p % _A_REGISTERS
            return self.a_layout.map(t, _A_REGISTERS * table_lookup(a_blocks, q) + j)

        def required_a(t: Any, p: Any) -> tuple[Any, Any]:
            q, j = p // _A_REGISTERS, p % _A_REGISTERS
            row, col = _FRAGMENT_A.ptx.map(t % WARP_SIZE, j)
            block_row = corner(t, table_lookup(c_blocks, q))[0]
            return MMA_M * block_row + row, MMA_K * table_lookup(k_steps, q) + col

        def emitted_b(t: Any, p: Any) -> tuple[Any, ...]:
            q, j = p // _B_REGISTERS, p % _B_REGISTERS
            return self.b_layout.map(t, _B_REGISTERS * table_lookup(b_blocks, q) + j)

        def required_b(t: Any, p: Any) -> tuple[Any, Any]:
            q, j = p // _B_REGISTERS, p % _B_REGISTERS
            row, col = _FRAGMENT_B.ptx.map(t % WARP_SIZE, j)
            block_col = corner(t, table_lookup(c_blocks, q))[1]
            return MMA_K * table_lookup(k_steps, q) + row, MMA_N * block_col + col

        def emitted_c(t: Any, i: Any) -> tuple[Any, Any]:
            row, col = _FRAGMENT_C.ptx.map(t % WARP_SIZE, i % _C_REGISTERS)
            block_row, block_col = corner(t, i // _C_REGISTERS)
            return MMA_M * block_row + row, MMA_N * block_col + col

        count = len(calls)
        a_shape, b_shape = self.a_layout.shape, self.b_layout.shape
        return (
            Claim(
                "mma operand a",
                FunctionLayout(a_shape, threads, _A_REGISTERS * count, emitted_a, "emitted_a"),
                FunctionLayout(a_shape, threads, _A_REGISTERS * count, required_a, "required_a"),
            ),
            Claim(
                "mma operand b",
                FunctionLayout(b_shape, threads, _B_REGISTERS * count, emitted_b, "emitted_b"),
                FunctionLayout(b_shape, threads, _B_REGISTERS * count, required_b, "required_b"),
            ),
            Claim(
                "mma accumulator c",
                FunctionLayout(c_layout.shape, threads, c_layout.local_size, emitted_c, "c"),
                c_layout,
            ),
        )


def divide_or_none(layout: RegisterLayout, divisor: RegisterLayout) -> RegisterLayout | None:
    """``layout / divisor`` (the repeats of a fragment), or None when it does not divide."""
    try:
        return layout / divisor
    except LayoutError:
        return None


def find_block(table: np.ndarray, target: np.ndarray) -> int | None:
    """The first register r with ``table[w, r] == target[w]`` for every warp w, or None.

    `table` is [warps, registers, 2] (a repeat layout's table), `target` [warps, 2]."""
    hits = np.all(table == target[:, None, :], axis=(0, 2))
    found = np.flatnonzero(hits)
    return int(found[0]) if found.size else None


def plan_mma_layouts(
    dtype: DataType,
    a_layout: RegisterLayout,
    b_layout: RegisterLayout,
    c_layout: RegisterLayout,
    arch: str,
) -> MmaPlan | None:
    """The `MmaPlan` of ``a @ b + c`` with these layouts on `arch`, or None when none exists.

    None when: `arch` is older than sm_80; `dtype` is not f16 or bf16; the shapes are not (M,
    K), (K, N), (M, N) with M, K multiples of 16 and N of 8; a layout does not divide by its
    fragment; or some warp lacks, in registers at the same index in every warp, an A or B block
    that one of its accumulator blocks needs. Raises ArchitectureError for a malformed `arch`.
    """
    if arch_number(arch) < MINIMUM_MMA_ARCH or dtype not in _MMA_FUNCTIONS:
        return None
    if not (a_layout.rank == b_layout.rank == c_layout.rank == 2):
        return None
    (m, k), (k_b, n) = a_layout.shape, b_layout.shape
    if k != k_b or c_layout.shape != (m, n) or m % MMA_M or n % MMA_N or k % MMA_K:
        return None
    a_repeats = divide_or_none(a_layout, _FRAGMENT_A.layout)
    b_repeats = divide_or_none(b_layout, _FRAGMENT_B.layout)
    c_repeats = divide_or_none(c_layout, _FRAGMENT_C.layout)
    if a_repeats is None or b_repeats is None or c_repeats is None:
        return None
    a_table, b_table, c_table = a_repeats.table(), b_repeats.table(), c_repeats.table()
    calls = []
    for k_step in range(k // MMA_K):
        step = np.full(c_table.shape[0], k_step, dtype=np.int64)
        for c_block in range(c_repeats.local_size):
            rows, cols = c_table[:, c_block, 0], c_table[:, c_block, 1]
            a_block = find_block(a_table, np.stack([rows, step], axis=-1))
            b_block = find_block(b_table, np.stack([step, cols], axis=-1))
            if a_block is None or b_block is None:
                return None
            calls.append(MmaCall(a_block, b_block, c_block, k_step))
    return MmaPlan(
        dtype, a_layout, b_layout, c_layout, a_repeats, b_repeats, c_repeats, tuple(calls)
    )


def plan_mma(dot: Dot, arch: str) -> MmaPlan | None:
    """The `MmaPlan` of a `Dot` instruction on `arch` (`plan_mma_layouts` of its operands'
    dtype and layouts), or None when it must run as a SIMT dot."""
    return plan_mma_layouts(dot.a.dtype, dot.a.layout, dot.b.layout, dot.c.layout, arch)


def emit_mma(plan: MmaPlan, a: str, b: str, c: str, out: str) -> str:
    """C++ statements computing ``out = a @ b + c`` by the plan's ``mma.sync`` calls.

    `a`, `b`, `c`, `out` name the register tensors' word arrays of the operands and the result
    (two 16-bit codes per word for a and b, float32 bits for c and out). When `out` differs
    from `c`, c is copied into out first; each call then updates four registers of out in
    place. Requires `TENSOR_CORE_SOURCE`.
    """
    lines = []
    if out != c:
        lines += [f"{out}[{i}] = {c}[{i}];" for i in range(plan.c_layout.local_size)]
    function = _MMA_FUNCTIONS[plan.dtype]
    for call in plan.calls:
        accumulators = [f"{out}[{_C_REGISTERS * call.c_block + j}]" for j in range(_C_REGISTERS)]
        a_words = _packed_words(a, _A_REGISTERS * call.a_block, _A_REGISTERS)
        b_words = _packed_words(b, _B_REGISTERS * call.b_block, _B_REGISTERS)
        lines.append(f"{function}({', '.join(accumulators + a_words + b_words)});")
    return "\n".join(lines) + "\n"


def _packed_words(array: str, first: int, count: int) -> list[str]:
    """The operand registers of `count` 16-bit elements from element `first` (even): the
    register tensor's own words (`backend.lower.registers`)."""
    return [f"{array}[{first // 2 + j}]" for j in range(count // 2)]


def mma_operand_layouts(
    warps_m: int, warps_n: int, block_m: int, block_n: int, block_k: int
) -> tuple[RegisterLayout, RegisterLayout, RegisterLayout]:
    """(a, b, c) layouts of a (block_m, block_k) @ (block_k, block_n) dot that `plan_mma` takes.

    ``warps_m * warps_n`` warps as a grid, warp ``w = wm * warps_n + wn`` accumulating rows
    ``[wm * block_m / warps_m, ...)`` and columns ``[wn * block_n / warps_n, ...)``: with RM =
    block_m / (16 warps_m), RN = block_n / (8 warps_n) and KS = block_k / 16,
    ``c = spatial(warps_m, warps_n).local(RM, RN) * F_C``,
    ``a = spatial(warps_m, 1).replicate(warps_n).local(RM, KS) * F_A`` and
    ``b = replicate(warps_m).spatial(1, warps_n).local(KS, RN) * F_B``. Raises LayoutError
    when the sizes do not divide that way.
    """
    sizes = {"warps_m": warps_m, "warps_n": warps_n, "block_m": block_m}
    sizes.update(block_n=block_n, block_k=block_k)
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LayoutError(f"{name} must be a positive int, got {value!r}")
    if block_m % (MMA_M * warps_m) or block_n % (MMA_N * warps_n) or block_k % MMA_K:
        raise LayoutError(
            f"block ({block_m}, {block_n}, {block_k}) must split into {warps_m} x {warps_n} "
            f"warps of whole {MMA_M} x {MMA_N} x {MMA_K} mma tiles"
        )
    rows, cols = block_m // (MMA_M * warps_m), block_n // (MMA_N * warps_n)
    steps = block_k // MMA_K
    c = (spatial(warps_m, warps_n) * local(rows, cols)) * _FRAGMENT_C.layout
    a = (spatial(warps_m, 1) * replicate(warps_n) * local(rows, steps)) * _FRAGMENT_A.layout
    b = (replicate(warps_m) * spatial(1, warps_n) * local(steps, cols)) * _FRAGMENT_B.layout
    return a, b, c


# ------------------------------------------------------------------------------------------------
# ldmatrix
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ldmatrix:
    """One ``ldmatrix`` of a load: `count` matrices (1, 2 or 4) into the 32-bit registers
    ``first_pair .. first_pair + count - 1`` (register pair p = elements 2p, 2p + 1 of the
    load's array), plain or `transpose`d, and `row_address`: the element offset, from the
    start of the shared tensor, of the row that thread ``t`` gives (an `Expr` in the variable
    ``t`` and the load's offset variables, simplified: the text `emit_ldmatrix` prints). With
    `store`, one ``stmatrix`` of a store: the same matrices, from those registers."""

    first_pair: int
    count: int
    transpose: bool
    row_address: Expr
    store: bool = False

    @property
    def mnemonic(self) -> str:
        """``ldmatrix`` or ``stmatrix``: also the prefix of its fragment's name
        (`layout_algebra.fragments`)."""
        return "stmatrix" if self.store else "ldmatrix"

    @property
    def name(self) -> str:
        """The PTX instruction."""
        suffix = ".trans" if self.transpose else ""
        return f"{self.mnemonic}.sync.aligned.m8n8.x{self.count}{suffix}.shared.b16"


@dataclass(frozen=True)
class LdmatrixPlan:
    """How a `load_shared` runs as ``ldmatrix`` instructions (see the module docstring).

    Fields: `shared_layout`, `register_layout` (the load's result layout), `offsets` (the tile
    origin in the shared tensor, one `Expr` per shared dimension), `values` (the ranges of the
    offsets' variables the plan was checked on; the others range over their bounds) and
    `instructions`, which together fill every register of the result.
    """

    shared_layout: SharedLayout
    register_layout: RegisterLayout
    offsets: tuple[Expr, ...]
    values: Mapping[str, range]
    instructions: tuple[Ldmatrix, ...]

    def claims(self) -> tuple[Claim, ...]:
        """One proof obligation per instruction: the element offsets its lanes receive (for a
        store: write) equal those of the generic load (store).

        emitted (t, i): with lane ``l = t % 32``, matrix ``m = i // 2`` and ``(8 m + r, col) =
        ldmatrix.x{count}[.trans](l, i)`` (the PTX formula of `layout_algebra.fragments`;
        ``stmatrix`` for a store),
        the printed row address at thread ``32 (t // 32) + 8 m + r``, plus col.
        required (t, i): ``shared_layout.offset(offsets + register_layout.map(t, 2 first_pair
        + i))``. The offsets' variables stay parameters of both maps, each variable v of
        `values` written ``start + step * v_index`` with ``0 <= v_index < len(range)``, so the
        claims cover exactly the values the plan was checked on.
        """
        t, i = var("t", 0, self.register_layout.num_threads - 1), var("i")
        steps = {
            name: r.start + r.step * var(f"{name}_index", 0, len(r) - 1)
            for name, r in self.values.items()
        }
        return tuple(self._claim(instruction, t, i, steps) for instruction in self.instructions)

    def _claim(self, instruction: Ldmatrix, t: Expr, i: Expr, steps: Mapping[str, Expr]) -> Claim:
        layout = self.register_layout
        suffix = ".trans" if instruction.transpose else ""
        hardware = fragment(f"{instruction.mnemonic}.x{instruction.count}{suffix}").ptx
        stacked_row, col = hardware.map(t % WARP_SIZE, i)
        supplier = WARP_SIZE * (t // WARP_SIZE) + stacked_row
        emitted = instruction.row_address.substitute({"t": supplier}) + col
        coords = _padded(layout.map(t, 2 * instruction.first_pair + i), self.shared_layout.rank)
        required = self.shared_layout.offset(
            tuple(origin + c for origin, c in zip(self.offsets, coords))
        )
        registers = 2 * instruction.count
        return Claim(
            f"{instruction.name} into register pairs {instruction.first_pair}.."
            f"{instruction.first_pair + instruction.count - 1}",
            AddressMap("emitted", layout.num_threads, registers, emitted.substitute(steps)),
            AddressMap(
                "required", layout.num_threads, registers, as_expr(required).substitute(steps)
            ),
        )


@dataclass(frozen=True)
class StmatrixPlan(LdmatrixPlan):
    """How a `store_shared` runs as ``stmatrix`` instructions: an `LdmatrixPlan` of the same
    tile whose `instructions` store (`Ldmatrix.store`), each from the registers the load would
    have filled; `register_layout` is the stored tensor's layout."""


def _padded(coords: Sequence[Any], rank: int) -> tuple[Any, ...]:
    """Tile coordinates padded with leading zeros to the shared layout's rank."""
    return (0,) * (rank - len(coords)) + tuple(coords)


def _offset_points(
    offsets: Sequence[Expr], values: Mapping[str, range]
) -> list[dict[str, int]] | None:
    """Every assignment of the offsets' variables (from `values`, else their bounds), or None
    when a variable is unbounded or there are more than `MAX_OFFSET_POINTS`."""
    variables: dict[str, Expr] = {}
    for offset in offsets:
        for node in offset.variables():
            variables.setdefault(node.name, node)
    choices = []
    for name, node in variables.items():
        if name in values:
            choices.append(list(values[name]))
        elif node.lo is None or node.hi is None:
            return None
        else:
            choices.append(list(range(node.lo, node.hi + 1)))
    if math.prod(len(c) for c in choices) > MAX_OFFSET_POINTS:
        return None
    return [dict(zip(variables, point)) for point in itertools.product(*choices)]


def _element_offsets(
    shared: SharedLayout, layout: RegisterLayout, origins: Sequence[Sequence[int]]
) -> np.ndarray | None:
    """Offsets [origins, threads, registers] of the load at each origin; None when some
    origin puts the tile outside the shared tensor."""
    table = layout.table()
    coords = _padded([table[..., d] for d in range(layout.rank)], shared.rank)
    result = []
    for origin in origins:
        try:
            result.append(shared.offset(tuple(o + c for o, c in zip(origin, coords))))
        except LayoutError:
            return None
    return np.stack([np.broadcast_to(r, table.shape[:2]) for r in result])


def _row_lanes(transpose: bool) -> tuple[np.ndarray, np.ndarray]:
    """(lane, element) [8, 8] holding row r, column c of a matrix, by the PTX rule."""
    rows, cols = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
    if transpose:
        return 4 * cols + rows // 2, rows % 2
    return 4 * rows + cols // 2, cols % 2


def _pair_is_matrix(offsets: np.ndarray, pair: int, transpose: bool) -> bool:
    """Whether register pair `pair` of every warp, at every origin, is an ldmatrix matrix:
    8 rows of 8 consecutive offsets, each row starting at a multiple of 8 elements."""
    lanes, elements = _row_lanes(transpose)
    warps = offsets.shape[1] // WARP_SIZE
    threads = WARP_SIZE * np.arange(warps)[:, None, None] + lanes
    rows = offsets[:, threads, 2 * pair + elements]
    starts = rows[..., :1]
    return bool(np.all(rows == starts + np.arange(8)) and np.all(starts % _ROW_ELEMENTS == 0))


def _row_address(
    shared: SharedLayout,
    layout: RegisterLayout,
    offsets: Sequence[Expr],
    first_pair: int,
    count: int,
    transpose: bool,
) -> Expr:
    """The element offset of the row thread t gives: row ``t % 8`` of matrix ``(t % 32) // 8``
    (modulo `count`), whose first element a lane of the same warp holds by the PTX rule."""
    t = var("t", 0, layout.num_threads - 1)
    row, matrix = t % 8, t % WARP_SIZE // 8 % count
    lane, element = (row // 2, row % 2) if transpose else (4 * row, 0)
    coords = layout.map(WARP_SIZE * (t // WARP_SIZE) + lane, 2 * (first_pair + matrix) + element)
    padded = _padded(coords, shared.rank)
    return simplify(as_expr(shared.offset(tuple(o + c for o, c in zip(offsets, padded)))))


def plan_ldmatrix(
    shared_layout: SharedLayout,
    register_layout: RegisterLayout,
    dtype: DataType,
    offsets: Sequence[ExprLike] | None = None,
    values: Mapping[str, range] | None = None,
) -> LdmatrixPlan | None:
    """The `LdmatrixPlan` of loading the tile at `offsets` of a shared tensor into
    `register_layout`, or None when ``ldmatrix`` cannot do it.

    `offsets` (default all 0) has one entry per shared dimension; the register tile is padded
    with leading 1s to that rank. The conditions are checked at every value of the offsets'
    variables: those in `values` (name -> the values it takes, e.g. ``range(0, 32, 8)`` for a
    loop ``for kk in range(0, 32, 8)``), the others over their bounds; a name of `values` that
    is no variable of `offsets` raises LayoutError. None when: `dtype` is
    not 16 bits wide; the thread count is not a multiple of 32 or the registers per thread are
    odd; a variable is unbounded or the points exceed `MAX_OFFSET_POINTS`; the tile leaves the
    shared tensor at some point; or some register pair is no ldmatrix matrix (plain or
    transposed) at some point. The shared tensor's base address must be 16-byte aligned.
    """
    if dtype.nbits != 16:
        return None
    if register_layout.num_threads % WARP_SIZE or register_layout.local_size % 2:
        return None
    if register_layout.rank > shared_layout.rank:
        return None
    origin = tuple(as_expr(o) for o in (offsets or (0,) * shared_layout.rank))
    if len(origin) != shared_layout.rank:
        raise LayoutError(
            f"offsets {origin} must have one entry per dimension of {shared_layout!r}"
        )
    values = dict(values or {})
    names = set().union(*(o.free_vars() for o in origin))
    for name, choices in values.items():
        if name not in names or not isinstance(choices, range) or len(choices) == 0:
            raise LayoutError(
                f"values[{name!r}] = {choices!r}: expected a non-empty range of a variable of "
                f"the offsets {origin}"
            )
    points = _offset_points(origin, values)
    if points is None:
        return None
    origins = [[int(evaluate(o, point)) for o in origin] for point in points]
    element_offsets = _element_offsets(shared_layout, register_layout, origins)
    if element_offsets is None:
        return None
    modes = []
    for pair in range(register_layout.local_size // 2):
        mode = next((t for t in (False, True) if _pair_is_matrix(element_offsets, pair, t)), None)
        if mode is None:
            return None
        modes.append(mode)
    instructions = []
    pair = 0
    while pair < len(modes):
        run = 1
        while pair + run < len(modes) and modes[pair + run] == modes[pair] and run < 4:
            run += 1
        count = 4 if run == 4 else (2 if run >= 2 else 1)
        address = _row_address(shared_layout, register_layout, origin, pair, count, modes[pair])
        instructions.append(Ldmatrix(pair, count, modes[pair], address))
        pair += count
    return LdmatrixPlan(shared_layout, register_layout, origin, values, tuple(instructions))


def plan_stmatrix(
    shared_layout: SharedLayout,
    register_layout: RegisterLayout,
    dtype: DataType,
    offsets: Sequence[ExprLike] | None = None,
    values: Mapping[str, range] | None = None,
) -> StmatrixPlan | None:
    """The `StmatrixPlan` of storing a register tensor of `register_layout` into the tile at
    `offsets` of a shared tensor, or None when ``stmatrix`` cannot do it: exactly when
    `plan_ldmatrix` cannot load that tile (same arguments, same conditions, same LayoutError),
    since both instructions move the same matrices. Needs sm_90 (`MINIMUM_STMATRIX_ARCH`)."""
    load = plan_ldmatrix(shared_layout, register_layout, dtype, offsets, values)
    if load is None:
        return None
    return StmatrixPlan(
        load.shared_layout,
        load.register_layout,
        load.offsets,
        load.values,
        tuple(dataclasses.replace(instruction, store=True) for instruction in load.instructions),
    )


def emit_ldmatrix(
    plan: LdmatrixPlan,
    shared: str,
    out: str,
    thread: str,
    substitutions: Mapping[str, Expr] | None = None,
) -> str:
    """C++ statements filling the register tensor `out` (16-bit codes, two per word) by the
    plan.

    `shared` is a C expression of a pointer to the first element of the shared tensor (16-bit
    elements, 16-byte aligned), `thread` the C identifier of a variable holding the thread index
    (``threadIdx.x``) in the kernel; the offsets' variables print under their own names, or as
    the expressions `substitutions` gives for them (a plan made over an offset's values,
    `backend.lower.memory.offset_values`, prints the offset itself). Each
    instruction is one block declaring its 32-bit results, each one word (register pair) of
    `out`. Requires `TENSOR_CORE_SOURCE`.
    """
    lines = []
    thread_index = var(thread, 0, plan.register_layout.num_threads - 1)
    for instruction in plan.instructions:
        replace = {"t": thread_index, **(substitutions or {})}
        address = instruction.row_address.substitute(replace).to_c()
        registers = [f"la_r{k}" for k in range(instruction.count)]
        function = _matrix_name(instruction.count, instruction.transpose, False)
        lines.append("{")
        lines.append(f"    unsigned int {', '.join(registers)};")
        lines.append(f"    {function}({', '.join(registers)}, {shared} + ({address}));")
        for k, register in enumerate(registers):
            lines.append(f"    {out}[{instruction.first_pair + k}] = {register};")
        lines.append("}")
    return "\n".join(lines) + "\n"


def emit_stmatrix(
    plan: StmatrixPlan,
    shared: str,
    src: str,
    thread: str,
    substitutions: Mapping[str, Expr] | None = None,
) -> str:
    """C++ statements storing the register tensor `src` (16-bit codes, two per word) by the
    plan: one ``stmatrix`` call per instruction, on the words (register pairs) it stores.
    `shared`, `thread` and `substitutions` as `emit_ldmatrix`'s. Requires `STMATRIX_SOURCE`.
    """
    lines = []
    thread_index = var(thread, 0, plan.register_layout.num_threads - 1)
    for instruction in plan.instructions:
        replace = {"t": thread_index, **(substitutions or {})}
        address = instruction.row_address.substitute(replace).to_c()
        words = [f"{src}[{instruction.first_pair + k}]" for k in range(instruction.count)]
        function = _matrix_name(instruction.count, instruction.transpose, True)
        lines.append(f"{function}({shared} + ({address}), {', '.join(words)});")
    return "\n".join(lines) + "\n"

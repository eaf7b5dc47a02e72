"""Lowering of computation on registers: initialisation, assignment, elementwise operations,
`where`, casts, views, reductions (in the interpreter's order) and dots (SIMT, staged through
shared memory, or on tensor cores).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from backend.conversions import (
    convert_expression,
    decode_expression,
    encode_expression,
    value_type,
)
from backend.cuda_codegen import (
    binary_value,
    half_binary_code,
    half_pair_code,
    sign_code,
    unary_value,
    wrap_expression,
)
from backend.fast_conversions import plan_conversion
from backend.lower import registers
from backend.lower.context import THREAD_NAME, LoweringContext, Tile
from backend.lower.memory import offset_values
from backend.tensor_core import (
    emit_mma,
    plan_mma,
)
from backend.wgmma import (
    WAIT_ALL,
    WARPGROUP_SIZE,
    chain_descriptor,
    emit_wgmma,
    emit_wgmma_drain,
    plan_wgmma,
)
from ir import dtypes, instructions
from ir.dtypes import DataType, magic_bias
from ir.elementwise import BINARY_OPS
from ir.placement import dot_gather, dot_is_thread_local, reduce_plan
from ir.printer import format_instruction
from ir.values import RegisterTensor
from layout_algebra.function_layout import FunctionLayout
from layout_algebra.hardware import WARP_SIZE
from layout_algebra.register import RegisterLayout
from layout_algebra.shared import shared_row_major
from layout_algebra.symbolic import (
    Expr,
    as_expr,
    simplify,
    var,
)

REDUCE_SCRATCH_WORDS = 2048
"""Target size, in 4-byte words, of the scratch area of a cross-warp reduction."""


@dataclass(frozen=True)
class ScratchOperand:
    """The staged dot's read of k-step `k` by C's element (t, j) of `layout`: its row of A
    (``side`` 0: ``(row, k)``) or its column of B (``side`` 1: ``(k, column)``). A class, not a
    closure, so that lowered kernels (whose recorded accesses hold it) pickle."""

    layout: RegisterLayout
    k: int
    side: int

    def __call__(self, t: Any, j: Any) -> tuple[Any, Any]:
        coordinate = self.layout.map(t, j)
        return (coordinate[0], self.k) if self.side == 0 else (self.k, coordinate[1])


def _combiner(reduction: str, dtype: DataType) -> Callable[[str, str], str]:
    """The C text of one step of a reduction on values of `dtype` (float sums in float32)."""
    if reduction == "sum":
        if dtype.is_float:
            return lambda a, b: f"la_fadd({a}, {b})"
        return lambda a, b: f"(int)((la_u32)({a}) + (la_u32)({b}))"
    op = "max" if reduction == "max" else "min"
    return lambda a, b: binary_value(op, dtype, a, b)


def unary_code(op: str, dtype: DataType, x: str) -> str:
    """The C code (of `dtype`) of elementwise `op` on the `dtype` code `x`: float `neg` and `abs`
    on the sign bit, other operations on the decoded value, rounded or wrapped back."""
    on_code = sign_code(op, dtype, x)
    if on_code is not None:
        return on_code
    value = unary_value(op, dtype, decode_expression(dtype, x))
    if dtype.is_float:
        return encode_expression(dtype, value)
    return wrap_expression(dtype, value)


def binary_code(op: str, dtype: DataType, x: str, y: str) -> str:
    """The C code of elementwise `op` on the `dtype` codes `x`, `y` (a `u1` code for
    comparisons): f16 and bf16 add, subtract and multiply by the native instructions, the rest
    on decoded values, rounded or wrapped back."""
    native = half_binary_code(op, dtype, x, y)
    if native is not None:
        return native
    value = binary_value(op, dtype, decode_expression(dtype, x), decode_expression(dtype, y))
    if BINARY_OPS[op].is_comparison:
        return wrap_expression(dtypes.u1, value)
    if dtype.is_float:
        return encode_expression(dtype, value)
    return wrap_expression(dtype, value)


class ComputeLowering(LoweringContext):
    """Computation on registers: elementwise operations, casts, views, reductions and dots."""

    def visit_register_tensor_init(self, instruction: instructions.RegisterTensorInit) -> None:
        out = instruction.out
        code = int(out.dtype.encode(np.array([instruction.init]))[0])
        self.declare(out)
        self.note("constant", out.layout.local_size)
        self.write_elements(out, [f"{code}u"] * out.layout.local_size)

    def visit_assign(self, instruction: instructions.Assign) -> None:
        dst, src = instruction.dst, instruction.src
        words = registers.word_count(dst.dtype.nbits, dst.layout.local_size)
        self.note("words", words)
        for w in range(words):
            self.out.line(f"{self.word(dst, w)} = {self.word(src, w)};")

    def elementwise(
        self,
        out: RegisterTensor,
        operands: Sequence[RegisterTensor],
        formula: Callable[[list[str]], str],
        path: str,
    ) -> None:
        self.declare(out)
        codes = []
        for i in range(out.layout.local_size):
            codes.append(formula([self.broadcast_read(out, operand, i) for operand in operands]))
        self.note_codes(path, codes)
        self.write_elements(out, codes)

    def note_codes(self, path: str, codes: Sequence[str]) -> None:
        """Note `path` for element `codes`, generic when they go through the software float
        codec (`la_decode_float`, `la_encode_float`)."""
        generic = any("la_decode_float(" in c or "la_encode_float(" in c for c in codes)
        self.note(f"{path} via the float codec" if generic else path, len(codes), generic)

    def pair_word(self, out: RegisterTensor, operand: RegisterTensor, word: int) -> str | None:
        """The C word of the two 16-bit `operand` elements that `out`'s elements 2 word and
        2 word + 1 read: the operand's own word when they are its pair, else the two codes
        joined; None when an index depends on the thread."""
        first = self.broadcast_index(out, operand, 2 * word)
        second = self.broadcast_index(out, operand, 2 * word + 1)
        if first is None or second is None:
            return None
        if first % 2 == 0 and second == first + 1:
            return self.word(operand, first // 2)
        low, high = self.element(operand, first), self.element(operand, second)
        return f"({low} | ({high} << 16))"

    def paired_half_binary(self, instruction: instructions.Binary) -> bool:
        """Lower an f16 or bf16 add, sub or mul two elements per instruction (the paired
        `_rn` forms on whole words); False, writing nothing, when some pair has a
        thread-dependent operand index or the element count is odd."""
        out, op, dtype = instruction.out, instruction.op, instruction.lhs.dtype
        size = out.layout.local_size
        if half_pair_code(op, dtype, "x", "y") is None or size % 2:
            return False
        pairs = []
        for w in range(size // 2):
            words = [self.pair_word(out, x, w) for x in (instruction.lhs, instruction.rhs)]
            if None in words:
                return False
            pairs.append(words)
        self.declare(out)
        self.note(f"paired {dtype.name} {op}", len(pairs))
        for w, (x, y) in enumerate(pairs):
            self.out.line(f"{self.word(out, w)} = {half_pair_code(op, dtype, x, y)};")
        return True

    def visit_unary(self, instruction: instructions.Unary) -> None:
        dtype, op = instruction.x.dtype, instruction.op
        self.elementwise(
            instruction.out,
            [instruction.x],
            lambda codes: unary_code(op, dtype, codes[0]),
            f"{dtype.name} {op}",
        )

    def visit_binary(self, instruction: instructions.Binary) -> None:
        if self.paired_half_binary(instruction):
            return
        dtype, op = instruction.lhs.dtype, instruction.op
        self.elementwise(
            instruction.out,
            [instruction.lhs, instruction.rhs],
            lambda codes: binary_code(op, dtype, codes[0], codes[1]),
            f"{dtype.name} {op}",
        )

    def visit_where(self, instruction: instructions.Where) -> None:
        operands = [instruction.cond, instruction.x, instruction.y]
        self.elementwise(
            instruction.out,
            operands,
            lambda codes: f"({codes[0]} != 0 ? {codes[1]} : {codes[2]})",
            "select",
        )

    def visit_fma(self, instruction: instructions.Fma) -> None:
        operands = [instruction.a, instruction.b, instruction.c]

        def fused(codes: list[str]) -> str:
            a, b, c = (decode_expression(dtypes.f32, code) for code in codes)
            return encode_expression(dtypes.f32, f"la_ffma({a}, {b}, {c})")

        self.elementwise(instruction.out, operands, fused, "f32 fma")

    def visit_cast(self, instruction: instructions.Cast) -> None:
        out, x = instruction.out, instruction.x
        self.declare(out)
        size = out.layout.local_size
        sources = [self.broadcast_index(out, x, i) for i in range(size)]
        plan = None
        exponent, biased = instruction.exponent, instruction.biased
        if self.tensor_cores and None not in sources:
            plan = plan_conversion(
                x.dtype, out.dtype, sources, x.layout.local_size, exponent, biased
            )
        if plan is not None:
            # Output words of two 16-bit codes straight from the input's words.
            self.note(f"fast {x.dtype.name} -> {out.dtype.name}", size)
            self.note(f"fast {x.dtype.name} -> {out.dtype.name} instructions", plan.instructions)
            with self.out.block():
                lines = plan.render(
                    lambda w: self.word(x, w),
                    lambda j: self.word(out, j),
                    self.temporary("cv"),
                    self.constant_word,
                )
                for line in lines:
                    self.out.line(line)
            return
        if biased:
            # The value plus its bias, from the code's bit offset (the same local index of x
            # in every thread: the verifier's rule), through an int: exact.
            codes = []
            for i, source in enumerate(sources):
                bias = magic_bias(x.dtype, out.dtype, source * x.dtype.nbits)
                value = decode_expression(x.dtype, self.broadcast_read(out, x, i))
                codes.append(encode_expression(out.dtype, f"({value} + {bias})", False))
            self.note_codes(f"convert {x.dtype.name} -> {out.dtype.name} biased", codes)
            self.write_elements(out, codes)
            return
        if x.dtype == dtypes.f32 and out.dtype == dtypes.f16 and not exponent and size % 2 == 0:
            # A word of two f16 codes from two f32 values, one paired conversion.
            self.note("convert f32 -> f16 in pairs", size)
            for j in range(size // 2):
                low, high = (self.broadcast_read(out, x, i) for i in (2 * j, 2 * j + 1))
                self.out.line(f"{self.word(out, j)} = la_encode_f16x2({low}, {high});")
            return
        blind = out.name in self.nan_blind
        codes = [
            convert_expression(x.dtype, out.dtype, self.broadcast_read(out, x, i), blind, exponent)
            for i in range(size)
        ]
        self.note_codes(f"convert {x.dtype.name} -> {out.dtype.name}", codes)
        self.write_elements(out, codes)

    def visit_view(self, instruction: instructions.View) -> None:
        # Both tensors hold each thread's bitstream in words: the same words.
        out, x = instruction.out, instruction.x
        self.declare(out)
        words = registers.word_count(out.dtype.nbits, out.layout.local_size)
        self.note("words", words)
        for w in range(words):
            self.out.line(f"{self.word(out, w)} = {self.word(x, w)};")

    def visit_reduce(self, instruction: instructions.Reduce) -> None:
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
                terms = [
                    decode_expression(dtype, self.element(x, int(k))) for k in local_order[0, j]
                ]
                first = terms[0]
                if dtype.is_float and len(terms) == 1 and not steps:
                    # Nothing to combine (a dimension of one): the reduction is still an
                    # arithmetic operation, whose NaN is the positive quiet one.
                    first = f"la_arithmetic_nan({first})"
                self.out.line(f"{partial}[{j}] = {first};")
                for term in terms[1:]:
                    self.out.line(f"{partial}[{j}] = {combine(f'{partial}[{j}]', term)};")
            for divisor, count in steps:
                if self.within_warps(divisor, count):
                    self.note("reduce by shuffles", size)
                    self.reduce_by_shuffles(partial, size, kind, combine, divisor, count)
                else:
                    self.note("reduce through shared memory", size)
                    self.reduce_through_shared(partial, size, kind, combine, divisor, count)
            codes = []
            for j in range(size):
                value = f"{partial}[{j}]"
                if dtype.is_float:
                    codes.append(encode_expression(dtype, value))
                else:
                    codes.append(wrap_expression(dtype, value))
            self.write_elements(out, codes)

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
        offset = self.scratch_offset(4 * chunk * self.threads)
        scratch = self.temporary("scratch")
        base = self.temporary("base")
        with self.out.block():
            self.out.line(f"{kind}* const {scratch} = ({kind}*)(la_smem + {offset});")
            self.out.line(f"const int {base} = {self.group_base(divisor, count, lane=False)};")
            for start in range(0, size, chunk):
                members = range(start, min(size, start + chunk))
                for j in members:
                    row = (j - start) * self.threads
                    self.out.line(f"{scratch}[{row} + {THREAD_NAME}] = {partial}[{j}];")
                self.out.line(self.barrier())
                for j in members:
                    row = (j - start) * self.threads
                    self.out.line(f"{partial}[{j}] = {scratch}[{row} + {base}];")
                    for digit in range(1, count):
                        other = f"{scratch}[{row} + {base} + {digit * divisor}]"
                        self.out.line(f"{partial}[{j}] = {combine(f'{partial}[{j}]', other)};")
                self.out.line(self.barrier())

    def visit_dot(self, instruction: instructions.Dot) -> None:
        out, a, b, c = instruction.out, instruction.a, instruction.b, instruction.c
        self.declare(out)
        if self.shared_operand_dot(instruction):
            return
        plan = plan_mma(instruction, self.arch) if self.tensor_cores else None
        if plan is not None:
            self.plans.append(plan)
            self.note("mma.m16n8k16", len(plan.calls))
            self.out.lines(emit_mma(plan, a.name, b.name, c.name, out.name))
            return
        if not dot_is_thread_local(instruction):
            self.note("SIMT dot through shared memory", out.layout.local_size)
            self.staged_dot(instruction)
            return
        self.note("SIMT dot", out.layout.local_size)
        gather_a, gather_b = dot_gather(c.layout, a.layout, b.layout)
        values_a, values_b = self.temporary("a"), self.temporary("b")
        with self.out.block():
            for name, tensor in ((values_a, a), (values_b, b)):
                self.out.line(f"float {name}[{tensor.layout.local_size}];")
                for i in range(tensor.layout.local_size):
                    value = decode_expression(tensor.dtype, self.element(tensor, i))
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

                    x = self.read(shadow_a, gather_a[:, i, k], row, plain=True)
                    y = self.read(shadow_b, gather_b[:, i, k], column, plain=True)
                    self.out.line(f"{accumulator} = la_fadd({accumulator}, la_fmul({x}, {y}));")
                self.out.line(f"{out.name}[{i}] = la_float_to_bits({accumulator});")

    def shared_operand_dot(self, instruction: instructions.Dot) -> bool:
        """Run a dot whose operands' loads were deferred (`backend.wgmma`) as wgmma and say
        True; else write the deferred loads and say False."""
        pair = self.wgmma_dots.get(id(instruction))
        if pair is None:
            return False
        a_deferred, b_deferred = pair
        b_load = self.pending_loads.pop(id(b_deferred), None)
        a_load = None if a_deferred is None else self.pending_loads.pop(id(a_deferred), None)
        if b_load is None or (a_deferred is not None and a_load is None):
            # Every list's candidates are found before it is written (`find_wgmma_dots`).
            raise self.fail("a dot's deferred shared load was never reached")
        loads = [load for load in (a_load, b_load) if load is not None]
        abstract: list[tuple[Any, Any] | None] = []
        substitutions: list[dict[str, Expr]] = []
        for load in (a_load, b_load):
            found = (
                None
                if load is None
                else offset_values(load.offsets, self.loop_ranges(load.offsets))
            )
            abstract.append(None if found is None else (found[0], found[1]))
            substitutions.append({} if found is None else dict(found[2]))
        plan = None
        # The threads' warpgroups must be the hardware's: a thread group's first thread at one.
        aligned = self.group is None or self.group[0] % WARPGROUP_SIZE == 0
        if abstract[1] is not None and self.threads % WARPGROUP_SIZE == 0 and aligned:
            group = var(f"{THREAD_NAME}_group", 0, self.threads // WARPGROUP_SIZE - 1)
            plan = plan_wgmma(
                instruction, (a_load, b_load), self.arch, group, (abstract[0], abstract[1])
            )
        if plan is None:
            flight = self.in_flight.get(id(instruction))
            if flight is not None and flight.loop.unroll > 1:
                # A copy of an unrolled body whose dot was to stay in flight, but no plan:
                # the copies before it may have left theirs running, and their registers are
                # written again only after a wait this copy would have made.
                self.out.line(WAIT_ALL)
            if self.chain_running is not None:
                # A link of a chain without a plan: the links before it are still running
                # into c, which this dot reads.
                self.out.lines(emit_wgmma_drain(*self.chain_running))
                self.chain_running = self.chain_b = None
            for load in loads:
                self.write_deferred_load(load)
            return False
        self.plans.append(plan)
        for load in loads:
            self.paths.begin()
            self.paths.note("read by wgmma descriptors")
            self.paths.end(load, len(self.loops))
        self.note(f"wgmma.m64n{plan.n}k16", plan.k_steps * plan.blocks)
        group_index = self.thread // WARPGROUP_SIZE
        for originals in substitutions:
            originals[group.name] = group_index
        flight = self.in_flight.get(id(instruction))
        link = self.chains.get(id(instruction))
        export_b = False
        b_chain = None
        issue = "sync"
        if flight is not None:
            self.elided_assigns.add(id(flight.assign))
            self.drains[id(flight.loop)] = (instruction.c.name, plan.c_layout.local_size)
            self.note("wgmma dot kept in flight", 1)
            issue = "in_flight" if flight.waits else "chain"
        elif link is not None:
            # A later link advances the first link's B descriptor.
            first = self.chain_running is None
            b_chain = None if first else self.chain_b
            export_b = first and not link.last
            self.elided_assigns.add(id(link.assign))
            self.note("wgmma chain's last dot" if link.last else "wgmma dot left running")
            issue = "chain_end" if link.last else "chain"
            running = (instruction.c.name, plan.c_layout.local_size)
            self.chain_running = None if link.last else running
        # A proxy fence only where a generic write may be pending since the thread's last
        # fence (`backend.proxy_fences`).
        fence = self.proxy.fence()
        prefix = self.temporary("wg")
        self.out.lines(
            emit_wgmma(
                plan,
                instruction.a.name if a_load is None else a_load.src.name,
                b_load.src.name,
                instruction.c.name,
                instruction.out.name,
                (substitutions[0], substitutions[1]),
                prefix,
                issue,
                self.program.wgmma_chain_window,
                fence,
                b_chain,
                export_b=export_b,
            )
        )
        if export_b:
            self.chain_b = chain_descriptor(plan, b_load.src.name, substitutions[1], prefix)
        elif self.chain_running is None:
            self.chain_b = None
        return True

    def write_deferred_load(self, load: instructions.LoadShared) -> None:
        """Write a deferred `load_shared` at its dot, as its own step of the report and with
        its accesses recorded as the load's."""
        dot = self.current
        self.current = load
        self.out.comment(format_instruction(load))
        self.paths.begin()
        self.lower_load_shared(load)
        self.paths.end(load, len(self.loops))
        self.current = dot

    def staged_dot(self, instruction: instructions.Dot) -> None:
        """A dot whose threads need operand elements held by other threads of their warp: every
        a and b element goes, as a float32, to a row-major scratch copy in shared memory (by its
        primary replica), then each thread reads what its c elements combine, in k order."""
        out, a, b, c = instruction.out, instruction.a, instruction.b, instruction.c
        (m, k_extent), n = a.shape, b.shape[1]
        a_scratch, b_scratch = shared_row_major(m, k_extent), shared_row_major(k_extent, n)
        a_bytes = 4 * m * k_extent
        names = self.temporary("sa"), self.temporary("sb")
        with self.out.block():
            for name, start in zip(names, (0, a_bytes)):
                offset = self.scratch_offset(a_bytes + 4 * k_extent * n, start)
                self.out.line(f"float* const {name} = (float*)(la_smem + {offset});")
            roles = ("scratch a", "scratch b")
            for name, tensor, scratch, role in zip(names, (a, b), (a_scratch, b_scratch), roles):
                tile = Tile(scratch, tensor.layout, (as_expr(0), as_expr(0)), 32, role, name)
                with self.primary_replica(tensor.layout):
                    for i in range(tensor.layout.local_size):
                        address = tile.offset(self.thread, i)
                        self.record(tile, i, 1, address, 32, None)
                        value = decode_expression(tensor.dtype, self.element(tensor, i))
                        self.out.line(f"{name}[{self.c(address)}] = {value};")
            self.out.line(self.barrier())
            threads, size = self.threads, c.layout.local_size
            for i in range(size):
                accumulator = self.temporary("acc")
                self.out.line(f"float {accumulator} = la_bits_to_float({c.name}[{i}]);")
                for k in range(k_extent):
                    rows = FunctionLayout(
                        (m, k_extent), threads, size, ScratchOperand(c.layout, k, 0), "rows"
                    )
                    columns = FunctionLayout(
                        (k_extent, n), threads, size, ScratchOperand(c.layout, k, 1), "columns"
                    )
                    reads = []
                    for name, scratch, layout, role in zip(
                        names, (a_scratch, b_scratch), (rows, columns), roles
                    ):
                        origin = (as_expr(0), as_expr(0))
                        tile = Tile(scratch, layout, origin, 32, role, name, step=k)
                        address = tile.offset(self.thread, i)
                        self.record(tile, i, 1, address, 32, None)
                        reads.append(f"{name}[{self.c(address)}]")
                    self.out.line(
                        f"{accumulator} = la_fadd({accumulator}, la_fmul({reads[0]}, {reads[1]}));"
                    )
                self.out.line(f"{out.name}[{i}] = la_float_to_bits({accumulator});")
            self.out.line(self.barrier())

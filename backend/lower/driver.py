"""The driver of the lowering: the kernel frame, its launch parameters and control flow.

`lower(program, arch, constants=...)` verifies the program, specialises it for the values of its
compile-time constant parameters (`ir.specialize`, which also bounds the block indices by a
declared grid) and lowers it with `KernelLowering`, the instruction visitor made of the memory
and compute parts. A specialised constant keeps its place in the C signature, unnamed
(`c_parameter`), and the body never reads it. A declared grid travels with the kernel
(`LoweredKernel.grid`), whose launch refuses any other grid.

A loop with ``unroll=S`` (S > 1) becomes a C loop stepping by ``S * step`` whose body is the IR
body written S times, copy j reading ``k + j * step`` with its stage indices folded to
constants (`unrolled_copy`), then a remainder loop for the iterations that do not fill a group
of S (none when the trip count is known to be a multiple of S). An unrolled loop of constant
trip count below S, and every loop with S = 1, is written as a plain loop. A `rolled` loop's C
loop follows ``#pragma unroll 1``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence

from backend.bulk_copy import (
    BULK_COPY_SOURCE,
    CLUSTER_COPY_SOURCE,
    CLUSTER_TMA_FENCE,
    TMA_FENCE,
    TMA_FENCE_MARK,
    arrives_per_warp,
    async_only,
    tma_load_helper,
    tma_multicast_helper,
)
from backend.conversions import (
    CONVERSION_SOURCE,
)
from backend.cuda_codegen import (
    ASYNC_COPY_SOURCE,
    CLUSTER_ARCH,
    COMBINE_SOURCE,
    GROUP_BARRIER_SOURCE,
    OPERATION_SOURCE,
    PLAIN_LAUNCH_SOURCE,
    PREFETCH_SOURCE,
    PROGRAMMATIC_LAUNCH_ARCH,
    PROGRAMMATIC_LAUNCH_SOURCE,
    REGISTER_BUDGET_SOURCE,
    TICKET_SOURCE,
)
from backend.errors import CompilationError
from backend.fast_conversions import FAST_CONVERSION_PRIMITIVES
from backend.kernel import KernelArrayParam, KernelIntParam, KernelTensorMapParam
from backend.lower.compute import ComputeLowering
from backend.lower.context import (
    C_INT_MAX,
    C_INT_MIN,
    CONSTANT_TABLE,
    NVRTC_OPTIONS,
    RESERVED_PREFIX,
    THREAD_NAME,
    WIDE_PREFIX,
    LoweredKernel,
    invariant_declaration,
    loop_counter_type,
)
from backend.lower.memory import MemoryLowering
from backend.lower.warp_classes import (
    BudgetChange,
    budget_problem,
    class_budget,
    class_instructions,
    specialised_tail,
    warp_classes,
)
from backend.tensor_core import (
    STMATRIX_SOURCE,
    TENSOR_CORE_SOURCE,
    StmatrixPlan,
    arch_number,
)
from backend.wgmma import (
    PROXY_FENCE,
    PROXY_FENCE_MARK,
    SHARED_DECLARATION,
    SWIZZLED_ALIGNMENT,
    WGMMA_SOURCE,
    WgmmaPlan,
    emit_wgmma_drain,
)
from ir import instructions
from ir.instructions import Instruction
from ir.printer import format_instruction
from ir.program import BLOCK_INDICES, Program
from ir.specialize import specialize
from ir.values import ArrayParam, IntParam, Param
from ir.verifier import verify
from ir.visitor import InstructionVisitor
from layout_algebra.hardware import WARP_SIZE, WARPGROUP_SIZE, shared_memory_limit
from layout_algebra.symbolic import (
    Expr,
    as_expr,
    maximum,
    simplify,
    var,
)
from layout_algebra.symbolic.folding import build


class KernelLowering(MemoryLowering, ComputeLowering, InstructionVisitor[None]):
    """Lowers one program: the kernel frame, its parameters and control flow (see the package
    docstring); the instructions are lowered by the methods of the memory and compute parts."""

    def finished_source(self, includes_end: int) -> str:
        """The kernel's text, with the stmatrix helpers (`STMATRIX_SOURCE`, inserted at
        `includes_end`) when a store got a `StmatrixPlan`, and what its wgmma dots need when
        any dot got a `WgmmaPlan`: the helper functions (inserted at `includes_end`), the
        async-proxy fences at the marks of the barriers and dots where threads write what the
        dots read (`threads_write_wgmma_tensors`), and an allocation aligned to the swizzle
        repeat; else without the marks. With bulk copies written as TMA, the allocation is
        aligned to their boxes' alignment too. The prefetch, combining-store and ticket helpers
        go in where an instruction needs them."""
        alignment = max([16] + [plan.box.alignment for plan in self.bulk.tensors.values()])
        if any(isinstance(plan, StmatrixPlan) for plan in self.plans):
            self.out.insert(includes_end, STMATRIX_SOURCE)
        if any(isinstance(i, instructions.PrefetchGlobal) for i in self.program.walk()):
            self.out.insert(includes_end, PREFETCH_SOURCE)
        if any(isinstance(i, instructions.AtomicAdd) for i in self.program.walk()):
            self.out.insert(includes_end, TICKET_SOURCE)
        if any(
            isinstance(i, instructions.StoreGlobal) and i.combine is not None
            for i in self.program.walk()
        ):
            self.out.insert(includes_end, COMBINE_SOURCE)
        if not any(isinstance(plan, WgmmaPlan) for plan in self.plans):
            source = _drop_marks(self.scratch_source(self.out.text()))
        else:
            self.out.insert(includes_end, WGMMA_SOURCE)
            source = self.scratch_source(self.out.text())
            if self.threads_write_wgmma_tensors():
                source = source.replace(PROXY_FENCE_MARK, PROXY_FENCE)
            else:
                source = _drop_marks(source)
            alignment = max(alignment, SWIZZLED_ALIGNMENT)
        for name, plan in self.bulk.tensors.items():
            needed = not async_only(self.program, name, self.generic_reads)
            # A copy shared by a cluster writes the other blocks' shared memory too.
            fence = TMA_FENCE if plan.multicast == 1 else CLUSTER_TMA_FENCE
            source = source.replace(f"{TMA_FENCE_MARK}{name}\n", fence + "\n" if needed else "")
        return source.replace(
            SHARED_DECLARATION.format(alignment=16),
            SHARED_DECLARATION.format(alignment=alignment),
        )

    def kernel(self) -> LoweredKernel:
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
        if program.programmatic_launch:
            chained = self.arch is not None and arch_number(self.arch) >= PROGRAMMATIC_LAUNCH_ARCH
            out.lines(PROGRAMMATIC_LAUNCH_SOURCE if chained else PLAIN_LAUNCH_SOURCE)
        if self.instruction_groups:
            out.lines(GROUP_BARRIER_SOURCE)
        if self.budgets_apply:
            out.lines(REGISTER_BUDGET_SOURCE)
        if self.bulk.tensors:
            out.lines(BULK_COPY_SOURCE)
            for rank in self.bulk.ranks:
                out.lines(tma_load_helper(rank))
        if self.bulk.shared:
            out.lines(CLUSTER_COPY_SOURCE)
            for rank in self.bulk.multicast_ranks:
                out.lines(tma_multicast_helper(rank))
        out.line()
        table_position = out.position()
        declarations = [c_parameter(p) for p in program.params]
        declarations += [
            f"const __grid_constant__ la_tensor_map {use.name}" for use in self.bulk.maps
        ]
        signature = ", ".join(declarations)
        bounds = str(self.threads)
        if program.min_blocks_per_sm is not None:
            bounds += f", {program.min_blocks_per_sm}"
        elif self.budgets_apply:
            # Without a block count ptxas cannot tell the registers a warp has at entry, and
            # ignores every setmaxnreg (its note C7508): ask for one block an SM.
            bounds += ", 1"
        attributes = f"__launch_bounds__({bounds})"
        if program.cluster is not None and self.arch and arch_number(self.arch) >= CLUSTER_ARCH:
            attributes = "__cluster_dims__({}, {}, {}) ".format(*program.cluster) + attributes
        header = f'extern "C" __global__ void {attributes} {program.name}({signature})'
        with out.block(header):
            out.line(SHARED_DECLARATION.format(alignment=16))
            out.line(f"const int {THREAD_NAME} = (int)threadIdx.x;")
            for index, axis in zip(BLOCK_INDICES, "xyz"):
                out.line(f"const int {index.name} = (int)blockIdx.{axis};")
            names = [THREAD_NAME, *(index.name for index in BLOCK_INDICES)]
            names += [p.name for p in program.params if isinstance(p, IntParam) and p.value is None]
            for name in names:
                out.line(f"const long long {WIDE_PREFIX}{name} = {name};")
            out.line(f"const unsigned la_warp_mask = {self.warp_mask()};")
            invariant_position = out.position()
            self.bulk_prologue()
            if program.programmatic_launch and not any(
                isinstance(i, instructions.LaunchDependents) for i in program.body
            ):
                # The next kernel of the chain may start now: it waits for this one's memory.
                out.line("la_launch_dependents();")
            self.execute_block_body(program.body)
            if self.bulk.shared:
                # No block exits while another may still arrive on its barriers.
                out.line("la_cluster_sync();")
        if self.invariants:
            declarations = (invariant_declaration(v, d) for d, v in self.invariants)
            # The kernel body's indentation: `insert` takes the lines as they are.
            out.insert(invariant_position, "\n".join("    " + line for line in declarations))
        if self.constant_words:
            words = ", ".join(f"0x{value:08X}u" for value in self.constant_words)
            size = len(self.constant_words)
            table = f"__constant__ unsigned int {CONSTANT_TABLE}[{size}] = {{{words}}};"
            out.insert(table_position, table)
        shared_bytes = self.user_shared_bytes + self.scratch_bytes
        limit = shared_memory_limit(None if self.arch is None else arch_number(self.arch))
        if shared_bytes > limit:
            where = "any architecture" if self.arch is None else self.arch
            raise CompilationError(
                f"{program.name} needs {shared_bytes} bytes of shared memory "
                f"({self.scratch_bytes} of them for reductions); at most {limit} fit in a "
                f"block on {where}"
            )
        return LoweredKernel(
            source=self.finished_source(table_position),
            entry=program.name,
            params=self.kernel_params(),
            block_threads=self.threads,
            shared_bytes=shared_bytes,
            options=NVRTC_OPTIONS,
            accesses=tuple(self.accesses),
            plans=tuple(self.plans),
            report=self.paths.report(),
            grid=program.grid,
            programmatic_launch=program.programmatic_launch,
            tensor_maps=self.tensor_map_params(),
            register_budget=self.launch_registers if self.budget_changes else None,
            register_changes=tuple(self.budget_changes),
            invariants=tuple(self.invariants),
        )

    def execute_block_body(self, body: Sequence[Instruction]) -> None:
        """The block's body: as one path, or, where it ends with a tail that only thread
        groups run, that tail written once per class of warps (`backend.lower.warp_classes`),
        each class first setting its register budget where the kernel sets them."""
        start = specialised_tail(body)
        if start is None:
            self.execute(body)
            return
        self.execute(body[:start])
        tail = body[start:]
        classes = warp_classes(tail)
        budgets = self.budgets_apply
        launch = self.launch_registers
        changes = {
            warps: BudgetChange(warps[1], budget, budget > launch)
            for warps in classes
            if budgets and (budget := class_budget(tail, warps)) not in (None, launch)
        }
        # Warps of no class, or of a class without a budget, keep the launch's registers.
        problem = budget_problem(launch, tuple(changes.values()))
        if problem:
            raise CompilationError(
                f"{self.program.name}: the thread groups' register budgets do not fit the "
                f"{self.threads} threads' {launch} registers each that the launch bounds give "
                f"the block: {problem}"
            )
        warp = self.temporary("warp")
        self.out.comment(f"warp-specialised: {len(classes)} classes of warps, each its own path")
        self.out.line(
            f"const int {warp} = __shfl_sync(la_warp_mask, {THREAD_NAME} / {WARP_SIZE}, 0);"
        )
        for number, warps in enumerate(classes):
            keyword = "if" if number == 0 else "else if"
            first, count = warps[0] // WARP_SIZE, warps[1] // WARP_SIZE
            with self.out.block(f"{keyword} ((unsigned)({warp} - {first}) < {count}u)"):
                change = changes.get(warps)
                if change is not None:
                    if warps[0] % WARPGROUP_SIZE or warps[1] % WARPGROUP_SIZE:
                        # setmaxnreg is one instruction for all the warps of a warpgroup.
                        raise CompilationError(
                            f"{self.program.name}: the thread groups of the warp-specialised "
                            f"tail split the warps of threads {warps[0]} .. "
                            f"{warps[0] + warps[1] - 1}, whose register budget is "
                            f"{change.budget}, from the rest of their warpgroup; a class of "
                            "warps that sets a budget must be whole warpgroups "
                            f"({WARPGROUP_SIZE} threads)"
                        )
                    action = "increase" if change.increase else "decrease"
                    self.out.line(f"la_registers_{action}<{change.budget}>();")
                    self.budget_changes.append(change)
                declared, self.predeclared = self.predeclared, set(self.predeclared)
                self.known_warps = warps
                try:
                    self.execute(class_instructions(tail, warps))
                finally:
                    self.predeclared, self.known_warps = declared, None

    def bulk_prologue(self) -> None:
        """The barriers of the bulk copies written as TMA (one per slot of each stage of each
        destination, arrival count 1, or one per stage counting an arrival per slot;
        initialised by thread 0 and fenced before any thread uses them) and each destination's
        mask of wait parities (`backend.bulk_copy`)."""
        if not self.bulk.tensors:
            return
        out = self.out
        for name, plan in self.bulk.tensors.items():
            out.line(f"__shared__ unsigned long long la_bar_{name}[{plan.count}];")
            out.line(f"unsigned la_phases_{name} = 0u;")
            if plan.released:
                out.line(f"__shared__ unsigned long long la_free_{name}[{plan.count}];")
                out.line(f"unsigned la_free_phases_{name} = ~0u;")
        with out.block(f"if ({THREAD_NAME} == 0)"):
            for name, plan in self.bulk.tensors.items():
                with out.block(f"for (int la_i = 0; la_i < {plan.count}; ++la_i)"):
                    out.line(f"la_mbarrier_init(&la_bar_{name}[la_i], {plan.arrivals}u);")
                    if plan.released:
                        arrivals = self.release_arrivals(name)
                        out.line(f"la_mbarrier_init(&la_free_{name}[la_i], {arrivals}u);")
            out.line("la_mbarrier_init_fence();")
        out.line("__syncthreads();")
        if self.bulk.shared:
            # Every block's barriers are initialised before any copy or arrival reaches them.
            out.line("la_cluster_sync_aligned();")

    def release_arrivals(self, name: str) -> int:
        """Arrivals a free barrier of shared tensor `name` counts: one per warp of the threads
        that release it (its thread group's, else the block's; one per thread where the block
        is not whole warps)."""
        group = self.bulk_group(name, instructions.CopyBulkRelease)
        threads = self.threads if group is None else group[1]
        per_block = threads // WARP_SIZE if arrives_per_warp(threads) else threads
        # A copy shared by a cluster waits for the releases of every block it writes.
        return per_block * self.bulk.tensors[name].multicast

    def tensor_map_params(self) -> tuple[KernelTensorMapParam, ...]:
        """The tensor maps of the bulk copies written as TMA, for the launch to encode."""
        return tuple(
            KernelTensorMapParam(
                use.name,
                use.source.param.name,
                use.source.dtype.nbits,
                tuple(use.source.layout.shape),
                tuple(use.source.layout.strides),
                use.box.extents,
                use.box.swizzle,
                use.box.order,
            )
            for use in self.bulk.maps
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
            if isinstance(instruction, instructions.GlobalView):
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
                if (low is not None and low < C_INT_MIN) or (high is not None and high > C_INT_MAX):
                    raise CompilationError(
                        f"int parameter {param.name} has bounds [{low}, {high}]; the kernel "
                        f"passes it as a C int, expected bounds within [{C_INT_MIN}, {C_INT_MAX}]"
                    )
                params.append(
                    KernelIntParam(param.name, 32, True, low, high, param.multiple_of, param.value)
                )
                continue
            total: Expr | int = 0
            for bits in needed.get(param.name, []):
                total = maximum(total, bits)
            nbits = param.dtype.nbits
            count = simplify((maximum(as_expr(total), 0) + nbits - 1) // nbits)
            params.append(
                KernelArrayParam(
                    param.name, nbits, count.value if count.is_const else count, dtype=param.dtype
                )
            )
        return tuple(params)

    def execute(self, body: Sequence[Instruction]) -> None:
        self.find_wgmma_dots(body)
        self.find_dot_chains(body)
        for instruction in body:
            self.current = instruction
            self.out.comment(format_instruction(instruction))
            if id(instruction) in self.elided_assigns:
                self.out.comment("done in place by the wgmma dot above, still in flight")
                continue
            self.paths.begin()
            self.visit(instruction)
            self.proxy.note(instruction)
            if id(instruction) in self.pending_loads:
                self.paths.discard()  # deferred to its dot, which writes its step
            else:
                self.paths.end(instruction, len(self.loops))

    def visit_for_range(self, instruction: instructions.ForRange) -> None:
        whole = self.whole_groups(instruction)
        if whole is None:
            self.plain_loop(instruction)
        else:
            self.unrolled_loop(instruction, whole)
        self.current = instruction

    def plain_loop(self, instruction: instructions.ForRange) -> None:
        """``for (k = start; k < stop; k += step)`` around the body written once."""
        loop_var = instruction.var
        name = loop_var.name
        kind = loop_counter_type(loop_var, instruction.start, instruction.stop)
        header = (
            f"for ({kind} {name} = {self.c(instruction.start)}; {name} < "
            f"{self.c(instruction.stop)}; {name} += {instruction.step})"
        )
        self.find_in_flight_dot(instruction)
        self.keep_rolled(instruction)
        with (
            self.out.block(header),
            self.loop_scope(instruction, instruction.start, instruction.step, instruction.stop),
        ):
            self.execute_scoped(instruction.body)
        self.drain(instruction)

    def keep_rolled(self, instruction: instructions.ForRange) -> None:
        """Before the C loop of a `rolled` loop: ``#pragma unroll 1``, so that the compiler
        keeps it a loop (`ir.instructions.ForRange.rolled`)."""
        if instruction.rolled:
            self.out.line("#pragma unroll 1")

    def execute_scoped(self, body: Sequence[Instruction]) -> None:
        """`body` in a C block of its own (a loop's, a copy of it, an if's): what a thread
        group declares there before its body (`predeclare`) ends with the block, so a later
        copy of the same body declares it again."""
        declared = set(self.predeclared)
        try:
            self.execute(body)
        finally:
            self.predeclared = declared

    def drain(self, loop: instructions.ForRange) -> None:
        """After `loop`: wait for its last wgmma dot where one was left in flight."""
        drain = self.drains.pop(id(loop), None)
        if drain is not None:
            self.out.comment("the loop's last wgmma dot, still in flight")
            self.out.lines(emit_wgmma_drain(*drain))

    @contextlib.contextmanager
    def loop_scope(
        self,
        instruction: instructions.ForRange,
        start: Expr,
        step: int,
        stop: Expr,
        reach: int = 0,
    ) -> Iterator[None]:
        """The inside of a C loop over `instruction`'s variable k whose values run from `start`
        by `step` while ``k + reach < stop``: writes k's 64-bit copy, and keeps, for what is
        lowered in it, the loop's facts (start <= k, k + reach < stop, k - start a multiple of
        `step`) and its entry in `loops` (k = start + step * q for the divisor analysis, the
        values below ``stop - reach``). The facts keep the operands of the loop's own
        comparison, so they stay non-negative where its bounds are (what lets
        `proofs.lowering_validation` prove swizzled addresses in bit-vectors)."""
        loop_var = instruction.var
        name = loop_var.name
        added = [start <= loop_var, loop_var + reach < stop]
        if step > 1:
            added.append(((loop_var - start) % step).eq(0))
        self.out.line(f"const long long {WIDE_PREFIX}{name} = {name};")
        self.facts.extend(added)
        self.loops[name] = (loop_var, start, step, simplify(stop - reach) if reach else stop)
        head = self.proxy.enter_loop(instruction)
        try:
            yield
        finally:
            # After the loop, what may be pending is what may be at its head.
            self.proxy.pending = head
            del self.loops[name]
            del self.facts[len(self.facts) - len(added) :]

    def whole_groups(self, instruction: instructions.ForRange) -> bool | None:
        """How a loop is unrolled: None when it is written as a plain loop (unroll 1, or a
        constant trip count below the unroll count), True when its trip count is known to be a
        multiple of the unroll count S (a constant one, or ``stop - start`` a known multiple of
        ``S * step`` by `loop_divisor`: no solver), False when a remainder loop must follow."""
        unroll, step = instruction.unroll, instruction.step
        if unroll == 1:
            return None
        start, stop = instruction.start, instruction.stop
        if start.is_const and stop.is_const:
            trips = len(range(start.value, stop.value, step))
            if trips % unroll == 0:
                return True
            return None if trips < unroll else False
        return self.loop_divisor(simplify(stop - start)) % (unroll * step) == 0

    def unrolled_loop(self, instruction: instructions.ForRange, whole: bool) -> None:
        """The loop with its body written S = unroll times per iteration, k stepping by
        ``S * step`` while ``k + (S - 1) * step < stop`` (just ``k < stop`` when `whole`),
        copy j in a block of its own with k replaced by ``k + j * step`` (`unrolled_copy`).
        Unless `whole`, the iterations left (fewer than S) follow: peeled, one copy of the body
        per iteration with k a constant (`peeled_copy`), when the bounds are constants; else a
        remainder loop with the body written once, continuing from the same k.

        In the unrolled loop, k = start + S * step * q (q >= 0), which the divisor analysis
        reads from `loops`, and ``k + (S - 1) * step < stop``: both are facts of every access
        recorded in a copy, whose instruction is the copy's own (substituted) one.
        """
        loop_var, start, stop = instruction.var, instruction.start, instruction.stop
        unroll, step = instruction.unroll, instruction.step
        name, group = loop_var.name, unroll * step
        reach = (unroll - 1) * step
        last = simplify(stop - reach)
        kind = loop_counter_type(loop_var, start, stop, last)
        copies = [unrolled_copy(instruction, j) for j in range(unroll)]
        if whole:
            self.find_in_flight_copies(instruction, copies)
        with contextlib.ExitStack() as outer:
            if whole:
                init = f"{kind} {name} = {self.c(start)}"
                bound = stop
            else:
                outer.enter_context(self.out.block())
                self.out.line(f"{kind} {name} = {self.c(start)};")
                init = ""
                bound = last
            header = f"for ({init}; {name} < {self.c(bound)}; {name} += {group})"
            self.keep_rolled(instruction)
            with self.out.block(header), self.loop_scope(instruction, start, group, stop, reach):
                for j, body in enumerate(copies):
                    self.out.comment(f"copy {j} of {unroll}: {name} + {j * step}")
                    with self.out.block():
                        self.execute_scoped(body)
            if not whole and start.is_const and stop.is_const:
                # A known trip count: the iterations left are peeled, each a copy of the body
                # for its own constant k.
                trips = len(range(start.value, stop.value, step))
                first = start.value + trips // unroll * group
                self.out.comment(f"remainder, peeled: the last {trips % unroll} iterations")
                for value in range(first, stop.value, step):
                    self.out.comment(f"{name} = {value}")
                    with self.out.block():
                        self.execute_scoped(peeled_copy(instruction, value))
            elif not whole:
                self.out.comment(f"remainder: the last iterations, fewer than {unroll}")
                header = f"for (; {name} < {self.c(stop)}; {name} += {step})"
                with self.out.block(header), self.loop_scope(instruction, start, step, stop):
                    self.execute_scoped(instruction.body)
        self.drain(instruction)

    def visit_if(self, instruction: instructions.If) -> None:
        entry = self.proxy.pending
        with self.out.block(f"if ({self.c(instruction.cond)})"):
            self.facts.append(instruction.cond.ne(0))
            self.execute_scoped(instruction.body)
            self.facts.pop()
        self.proxy.pending = entry or self.proxy.pending
        self.current = instruction

    def visit_thread_group(self, instruction: instructions.ThreadGroup) -> None:
        """The body under a condition on the thread's warp, read through a shuffle so that
        the compiler sees it is the same across the warp (groups are whole warps), or, in a
        class of a warp-specialised tail, whose warps the group holds, with no condition;
        inside, `la_thread` is the thread's number in the group, so the body is written as a
        block of the group's threads."""
        start, threads = instruction.start, instruction.threads
        self.predeclare(instruction)
        outer = (self.group, self.threads, self.thread)
        first = (0 if self.group is None else self.group[0]) + start
        if self.group is None and self.known_warps is not None:
            # In a class of a warp-specialised tail: its warps are the group's.
            header = ""
        else:
            warp = self.temporary("warp")
            self.out.line(
                f"const int {warp} = __shfl_sync(la_warp_mask, {THREAD_NAME} / {WARP_SIZE}, 0);"
            )
            header = f"if ((unsigned)({warp} - {start // WARP_SIZE}) < {threads // WARP_SIZE}u)"
        with self.out.block(header):
            relative = self.temporary("group_thread")
            self.out.line(f"const int {relative} = {THREAD_NAME} - {start};")
            self.out.line(f"const int {THREAD_NAME} = {relative};")
            self.out.line(f"const long long {WIDE_PREFIX}{THREAD_NAME} = {THREAD_NAME};")
            self.group, self.threads = (first, threads), threads
            self.thread = var(THREAD_NAME, 0, threads - 1)
            entry = self.proxy.pending
            try:
                self.execute(instruction.body)
            finally:
                self.group, self.threads, self.thread = outer
            self.proxy.pending = entry or self.proxy.pending
        self.current = instruction


def unrolled_copy(instruction: instructions.ForRange, copy: int) -> tuple[Instruction, ...]:
    """Copy `copy` (j) of the body of an unrolled loop over k: each scalar with k replaced by
    ``k + j * step`` (`Instruction.map_scalars`), then each largest sub-expression that is the
    same for every k of the unrolled loop, k = start + S * step * q (q >= 0), replaced by that
    value (`fold_stage`), so a stage index ``(k - start) % S`` becomes the constant j."""
    loop_var, step = instruction.var, instruction.step
    name = loop_var.name
    quotient = var(f"{RESERVED_PREFIX}q_{name}", 0, None)
    base = instruction.start + instruction.unroll * step * quotient
    shift = {name: loop_var + copy * step}

    def rewrite(scalar: Expr) -> Expr:
        return fold_stage(scalar.substitute(shift), name, base)

    return tuple(inner.map_scalars(rewrite) for inner in instruction.body)


def peeled_copy(instruction: instructions.ForRange, value: int) -> tuple[Instruction, ...]:
    """The body of a loop over k for one known iteration: every scalar with k replaced by the
    constant `value`, simplified."""
    name = instruction.var.name

    def rewrite(scalar: Expr) -> Expr:
        return simplify(scalar.substitute({name: as_expr(value)}))

    return tuple(inner.map_scalars(rewrite) for inner in instruction.body)


def fold_stage(expr: Expr, name: str, base: Expr) -> Expr:
    """`expr` with each largest sub-expression that reads the variable `name` and, once `name`
    is replaced by `base`, simplifies (`simplify`) to an expression of its other variables
    only, replaced by that expression. `base` holds a variable of its own (the q of
    ``start + group * q``) that the result may not keep, so a replaced sub-expression has the
    same value for every value of q. Example: with base ``k0 + 2 * q``, ``(k - k0 + 1) % 2``
    becomes 1, while ``k % 2`` stays (its value depends on k0, which it did not read)."""
    if name not in expr.free_vars() or not expr.args:
        return expr
    folded = simplify(expr.substitute({name: base}))
    if folded.free_vars() <= expr.free_vars() - {name}:
        return folded
    args = tuple(fold_stage(arg, name, base) for arg in expr.args)
    if all(new is old for new, old in zip(args, expr.args)):
        return expr
    return build(expr.op, args)


def c_parameter(param: Param) -> str:
    """The C declaration of a kernel parameter. A constant of a specialised program keeps its
    place, unnamed (the comment gives its value), so the body cannot read it."""
    if isinstance(param, ArrayParam):
        return f"unsigned char* {param.name}"
    if param.value is not None:
        return f"int /* {param.name} = {param.value}, a compile-time constant */"
    return f"int {param.name}"


def _drop_marks(source: str) -> str:
    """`source` without its proxy-fence marks (no dot of the kernel runs as wgmma)."""
    return re.sub(rf"^[ \t]*{re.escape(PROXY_FENCE_MARK)}\n", "", source, flags=re.MULTILINE)


def lower(
    program: Program,
    arch: str | None = None,
    *,
    constants: Mapping[str, int] | None = None,
    wgmma: bool = True,
    tma: bool = True,
    hoist_invariants: bool = False,
) -> LoweredKernel:
    """Lower `program` to a CUDA C++ kernel (see the module docstring).

    `arch` (e.g. ``"sm_90a"``) lets the lowering use what that architecture has: with sm_80 or
    newer, ``mma.sync`` for dots and ``ldmatrix`` for loads where a plan exists; with sm_90a,
    ``wgmma.mma_async`` for dots whose operands come from shared memory where a plan exists
    (`backend.wgmma`; ``wgmma=False`` keeps such dots on ``mma.sync``); with sm_90 or newer,
    bulk tensor copies (TMA) for the `copy_bulk`s whose tiles are boxes of tensor maps
    (`backend.bulk_copy`; ``tma=False`` keeps them on ``cp.async``). Without it the
    kernel uses neither (it then runs on any architecture NVRTC targets, bit-exact with the
    interpreter). With `hoist_invariants`, each value the same for the whole block that
    divides by a value known only at run time (a grouped tile order's origin, say) is computed
    once at the kernel's start (`LoweringContext.hoist_invariants`) instead of at every use:
    ptxas serialises the wgmma of a grouped f16 matmul otherwise, but a kernel near its
    register limit (stream-K's) spills more with it; a program may ask for it itself
    (`Program.hoist_invariants`). `constants` gives the values of the
    program's compile-time constant
    parameters (``int_param(name, constant=True)``): the program lowered is
    `ir.specialize.specialize(program, constants)`, whose scalars hold the values as literals,
    and the kernel refuses a call with another value (`backend.kernel.KernelIntParam.constant`);
    the accesses recorded are those of the specialised instructions. A program that declares
    its grid (`ProgramBuilder.grid`) is lowered with its block indices bounded by it
    (`Program.block_indices`) and the facts ``block_x < x`` for extents that are not constants,
    and its kernel refuses any other grid. Verifies the program first
    (`ir.verify`, `VerificationError`). Raises `SpecializationError` for constants that do not
    fit (a constant parameter without a value, a value out of its bounds, a name that is not a
    constant parameter); `CompilationError` when the program cannot be lowered: a parameter or
    program name starting with ``la_``, an int parameter wider than a C int, a view whose size
    depends on anything but int parameters, more shared memory than a block has;
    `ArchitectureError` for a malformed `arch`.
    """
    verify(program)
    specialised = specialize(program, {} if constants is None else constants)
    if specialised is not program:
        verify(specialised)
    hoist = hoist_invariants or specialised.hoist_invariants
    return KernelLowering(specialised, arch, wgmma, tma, hoist).kernel()

"""Warp specialisation (`backend.lower.warp_classes`) and the register budgets of thread groups
(`ThreadGroup.registers`): the verifier's rules, the printer, where a kernel's tail starts and
how its warps split into classes (tables worked by hand, and a property over random groups
against a warp-by-warp count), what the lowering writes and refuses, and the compile-time check
of the budgets against the compiled kernel's registers. test_lower_emulated.py runs the
`register_budgets` feature program under the CPU emulation, bit for bit against the
interpreter; test_gpu_differential.py runs it on the GPU.
"""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import backend
from backend.errors import CompilationError, PerformanceWarning
from backend.lower import lower
from backend.lower.warp_classes import (
    BudgetChange,
    budget_problem,
    class_budget,
    class_instructions,
    specialised_tail,
    warp_classes,
)
from backend.nvrtc import cubin_registers
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import VerificationError
from ir.examples.matmul import matmul
from ir.instructions import ForRange, Instruction, ThreadGroup
from ir.interpreter import run_reference
from ir.printer import format_program
from ir.verifier import verify
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.hardware import register_cap
from layout_algebra.register import spatial

F32 = dtypes.f32


def budget_program(
    threads: int = 256,
    budgets: tuple[tuple[int, int, int | None], ...] = ((0, 128, 232), (128, 128, 24)),
    min_blocks: int | None = 2,
    trailing_sync: bool = False,
):
    """Each group (start, threads, registers) adds 1 to its part of y (one f32 a thread) in a
    loop of two steps, then stores it; a block `sync` at the end with `trailing_sync`."""
    with ProgramBuilder("budgets", threads, check=False) as b:
        if min_blocks is not None:
            b.min_blocks_per_sm(min_blocks)
        y = b.global_view(b.array_param("y", F32), F32, GlobalLayout((threads,), (1,)))
        values = {}
        for start, count, registers in budgets:
            with b.thread_group(start, count, registers):
                values[start] = b.register_tensor(F32, spatial(count), float(start))
        with b.for_range(2):
            for start, count, registers in budgets:
                with b.thread_group(start, count, registers):
                    b.assign(values[start], b.add(values[start], 1.0))
        for start, count, registers in budgets:
            with b.thread_group(start, count, registers):
                b.store_global(y, values[start], [start])
        if trailing_sync:
            b.sync()
    return b.program()


# ------------------------------------------------------------------ the IR's register budgets


def test_a_budget_program_runs_in_the_interpreter_as_without_budgets() -> None:
    """A budget asks for registers and changes no value."""
    for budgets in (((0, 128, 232), (128, 128, 24)), ((0, 128, None), (128, 128, None))):
        y = np.zeros(256, dtype=np.float32)
        run_reference(verify(budget_program(budgets=budgets)), y)
        np.testing.assert_array_equal(y, np.repeat([2.0, 130.0], 128))


def test_the_printer_shows_a_budget() -> None:
    text = format_program(budget_program())
    assert "thread_group(0, 128, registers=232):" in text
    assert "thread_group(128, 128, registers=24):" in text


@pytest.mark.parametrize(
    ("threads", "budgets", "message"),
    [
        # Not whole warpgroups.
        (256, ((0, 64, 232), (64, 192, 24)), "registers=232 for threads 0 .. 63; a register"),
        (160, ((0, 128, 232), (128, 32, 24)), "registers=24 for threads 128 .. 159"),
        # Out of range or not a multiple of 8.
        (256, ((0, 128, 20), (128, 128, 24)), "registers=20; expected a multiple of 8 from 24"),
        (256, ((0, 128, 260), (128, 128, 24)), "registers=260; expected a multiple of 8"),
        (256, ((0, 128, 230), (128, 128, 24)), "registers=230; expected a multiple of 8"),
        (256, ((0, 128, True), (128, 128, 24)), "registers=True; expected a multiple of 8"),
        # Two budgets for one warp.
        (256, ((0, 128, 232), (0, 128, 224), (128, 128, 24)), "which an earlier group gave"),
        (256, ((0, 256, 128), (128, 128, 24)), "overlap the budget of threads 0 .. 255"),
        # Warps without a budget beside warps with one.
        (256, ((0, 128, 232), (128, 128, None)), r"register budgets for threads 0 \.\. 127 only"),
        (384, ((0, 128, 232), (128, 128, 24)), "every warp of the block's 384 threads"),
    ],
)
def test_the_verifier_refuses_a_budget_out_of_its_rules(threads, budgets, message) -> None:
    with pytest.raises(VerificationError, match=message):
        verify(budget_program(threads, budgets))


def test_a_budget_is_asked_for_by_a_group_of_the_block_s_own_body() -> None:
    with ProgramBuilder("nested", 256, check=False) as b:
        with b.thread_group(0, 256):
            with b.thread_group(0, 128, registers=232):
                b.register_tensor(F32, spatial(128), 0.0)
    with pytest.raises(VerificationError, match="in a group nested in threads 0 .. 255"):
        verify(b.program())


# --------------------------------------------------------------- the tail and its warp classes


def _groups(*ranges: tuple[int, int]) -> tuple[Instruction, ...]:
    return tuple(ThreadGroup(start, threads, ()) for start, threads in ranges)


@pytest.mark.parametrize(
    ("ranges", "classes"),
    [
        ([(0, 128), (128, 32)], [(0, 128), (128, 32)]),
        ([(128, 32), (0, 128), (0, 128)], [(0, 128), (128, 32)]),
        # A group over both: each class runs it; warps 160 .. 191 run no group.
        ([(0, 256), (0, 128)], [(0, 128), (128, 128)]),
        ([(0, 64), (160, 32)], [(0, 64), (160, 32)]),
        ([(32, 96), (64, 64)], [(32, 32), (64, 64)]),
    ],
)
def test_warp_classes_table(ranges, classes) -> None:
    assert warp_classes(_groups(*ranges)) == classes


@given(
    st.lists(
        st.tuples(st.integers(0, 7), st.integers(1, 8)).map(
            lambda pair: (32 * pair[0], 32 * min(pair[1], 8 - pair[0]) or 32)
        ),
        min_size=1,
        max_size=5,
    )
)
@settings(max_examples=60, deadline=None, database=None)
def test_warp_classes_partition_the_warps_of_the_groups(ranges) -> None:
    """Against a warp-by-warp count: the classes are disjoint whole warps, cover exactly the
    warps in some group, and the warps of a class are held by the same groups."""
    ranges = [(start, threads) for start, threads in ranges if start + threads <= 256]
    if not ranges:
        return
    classes = warp_classes(_groups(*ranges))

    def holders(warp: int) -> frozenset[int]:
        return frozenset(
            i for i, (start, threads) in enumerate(ranges) if start <= 32 * warp < start + threads
        )

    owner = {}
    for number, (start, threads) in enumerate(classes):
        assert start % 32 == 0 and threads % 32 == 0 and threads > 0
        for warp in range(start // 32, (start + threads) // 32):
            assert warp not in owner
            owner[warp] = number
    for warp in range(8):
        assert (warp in owner) == bool(holders(warp))
    # Each class is held by the same groups throughout (so each group is a union of classes).
    for start, threads in classes:
        assert len({holders(warp) for warp in range(start // 32, (start + threads) // 32)}) == 1


def test_the_tail_starts_after_the_last_instruction_of_the_block() -> None:
    program = budget_program()
    body = program.body
    start = specialised_tail(body)
    assert start is not None
    assert all(isinstance(instruction, (ThreadGroup, ForRange)) for instruction in body[start:])
    assert not isinstance(body[start - 1], (ThreadGroup, ForRange))
    # A block sync at the end: no tail; no group: no tail.
    assert specialised_tail(budget_program(trailing_sync=True).body) is None
    assert specialised_tail(body[:start]) is None


def test_a_class_keeps_its_own_groups_and_the_loops_around_them() -> None:
    tail = budget_program().body[specialised_tail(budget_program().body) :]
    for warps, budget in (((0, 128), 232), ((128, 128), 24)):
        kept = class_instructions(tail, warps)
        groups = [i for i in kept if isinstance(i, ThreadGroup)]
        loops = [i for i in kept if isinstance(i, ForRange)]
        assert {(g.start, g.threads) for g in groups} == {warps}
        assert len(groups) == 2 and len(loops) == 1
        assert [(g.start, g.threads) for g in loops[0].body] == [warps]
        assert class_budget(tail, warps) == budget
    assert class_instructions(tail, (256, 32)) == ()


# ------------------------------------------------------------------------------- the lowering


def test_the_lowering_writes_each_class_with_its_budget_first() -> None:
    kernel = lower(budget_program(), "sm_90a")
    source = kernel.source
    assert kernel.register_budget == register_cap(256, 2) == 128
    assert "warp-specialised: 2 classes of warps" in source
    body = source[source.index('extern "C"') :]
    first = body.index("la_registers_increase<232>();")
    second = body.index("la_registers_decrease<24>();")
    assert body.index("if ((unsigned)(la_warp") < first < body.index("else if") < second
    # Each class's loop holds its own group's body only; no other warp condition inside.
    assert body.count("for (") == 2
    assert body.count("__shfl_sync(la_warp_mask") == 1


def test_budgets_apply_on_a_target_with_setmaxnreg_only() -> None:
    for arch in (None, "sm_80", "sm_90"):
        kernel = lower(budget_program(), arch)
        assert kernel.register_budget is None
        assert "la_registers_" not in kernel.source
        assert "warp-specialised" in kernel.source


def test_budgets_apply_in_a_warp_specialised_tail_only() -> None:
    """With a block `sync` at the end the kernel is one path: no class sets a budget, and the
    compiled kernel is not held to the launch's registers."""
    kernel = lower(budget_program(trailing_sync=True), "sm_90a")
    assert kernel.register_budget is None
    assert "warp-specialised" not in kernel.source
    assert "la_registers_increase<" not in kernel.source.split('extern "C"')[1]
    assert backend.compile(budget_program(trailing_sync=True), arch="sm_90a").kernel


def test_a_budget_equal_to_the_launch_share_changes_nothing() -> None:
    kernel = lower(budget_program(budgets=((0, 128, 128), (128, 128, 128))), "sm_90a")
    body = kernel.source[kernel.source.index('extern "C"') :]
    assert "la_registers_increase<" not in body and "la_registers_decrease<" not in body
    assert kernel.register_budget is None


def test_a_class_that_sets_a_budget_is_whole_warpgroups() -> None:
    """A group of one warp inside a budget warpgroup splits it into classes of 1 and 3 warps,
    each of which would run its own setmaxnreg: refused."""
    with ProgramBuilder("split_warpgroup", 256) as b:
        b.min_blocks_per_sm(2)
        y = b.global_view(b.array_param("y", F32), F32, GlobalLayout((256,), (1,)))
        with b.thread_group(0, 128, registers=232):
            b.store_global(y, b.register_tensor(F32, spatial(128), 1.0), [0])
        with b.thread_group(0, 32):
            b.store_global(y, b.register_tensor(F32, spatial(32), 2.0), [0])
        with b.thread_group(128, 128, registers=24):
            b.store_global(y, b.register_tensor(F32, spatial(128), 3.0), [128])
    with pytest.raises(CompilationError, match="threads 0 .. 31, whose register budget is 232"):
        lower(b.program(), "sm_90a")
    assert lower(b.program(), "sm_90").register_budget is None  # no budgets: no refusal


def test_the_lowering_refuses_budgets_past_the_block_s_registers() -> None:
    """256 threads at two blocks an SM have 128 registers each: 232 + 40 do not fit."""
    program = budget_program(budgets=((0, 128, 232), (128, 128, 40)))
    with pytest.raises(CompilationError, match="the increases take 2048 registers more than"):
        lower(program, "sm_90a")


def test_the_compiled_kernel_has_the_registers_its_budgets_divide(monkeypatch) -> None:
    """NVRTC gives the kernel its launch bounds' registers (checked from the CUBIN); were it
    to give fewer, so that an increase would wait for registers the block does not have, the
    compile refuses the kernel instead of launching it; fewer registers that still fit (two
    releases from 255, of which ptxas once used 254) are accepted. Without a block count in
    the launch bounds ptxas cannot tell the registers at entry and ignores every budget (its
    note C7508), so a kernel with budgets asks for one block an SM."""
    compiled = backend.compile(budget_program(), arch="sm_90a")
    assert compiled.kernel is not None
    releases = budget_program(budgets=((0, 128, 232), (128, 128, 24)), min_blocks=None)
    lowered = lower(releases, "sm_90a")
    assert lowered.register_budget == 255
    assert "__launch_bounds__(256, 1)" in lowered.source
    assert [change.increase for change in lowered.register_changes] == [False, False]
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        real = backend.compile(releases, arch="sm_90a")
    assert cubin_registers(real.cubin) == {"budgets": 255}
    compile_module = importlib.import_module("backend.compile")  # not the function it exports
    monkeypatch.setattr(compile_module, "cubin_registers", lambda cubin: {"budgets": 96})
    with pytest.raises(CompilationError, match="has 96 registers a thread .* increases take"):
        backend.compile(budget_program(), arch="sm_90a", cache=None)
    monkeypatch.setattr(compile_module, "cubin_registers", lambda cubin: {"budgets": 254})
    assert backend.compile(releases, arch="sm_90a", cache=None).kernel is not None
    monkeypatch.setattr(compile_module, "cubin_registers", lambda cubin: {"budgets": 224})
    with pytest.raises(CompilationError, match="release of 128 threads to 232 .* from 224"):
        backend.compile(releases, arch="sm_90a", cache=None)
    monkeypatch.setattr(compile_module, "cubin_registers", lambda cubin: {})
    with pytest.raises(CompilationError, match="records no register count for the kernel"):
        backend.compile(releases, arch="sm_90a", cache=None)


@pytest.mark.parametrize(
    ("registers", "changes", "problem"),
    [
        (128, ((128, 232, True), (128, 24, False)), None),
        (96, ((128, 232, True), (128, 24, False)), "increases take 8192 registers more"),
        (255, ((128, 232, False), (128, 24, False)), None),
        (254, ((128, 256, True), (128, 24, False)), None),
        (200, ((128, 232, False),), "release of 128 threads to 232 registers each"),
        (240, ((128, 232, True),), "increase of 128 threads to 232 registers each"),
        (168, ((256, 168, True), (128, 168, False)), None),
        (168, ((256, 176, True), (128, 152, False)), None),
        (168, ((256, 184, True), (128, 152, False)), "increases take 2048 registers more"),
    ],
)
def test_budget_problem_table(registers, changes, problem) -> None:
    found = budget_problem(registers, [BudgetChange(*change) for change in changes])
    if problem is None:
        assert found is None
    else:
        assert problem in found


def _pool_simulation(registers: int, changes: list[BudgetChange], order: list[int]) -> bool:
    """Brute force: warpgroups reach their ``setmaxnreg`` in `order` (the rest wait); a release
    returns registers to the block's pool at once, an increase blocks until the pool holds
    what it asks. True when every class finishes with a valid instruction."""
    pool, waiting = 0, []
    for index in order:
        change = changes[index]
        if change.increase != (change.budget >= registers) and change.budget != registers:
            return False
        waiting.append(change)
        progressed = True
        while progressed:
            progressed = False
            for pending in list(waiting):
                need = pending.threads * (pending.budget - registers)
                if need <= pool:
                    pool -= need
                    waiting.remove(pending)
                    progressed = True
    return not waiting


@settings(max_examples=60, deadline=None)
@given(
    registers=st.sampled_from([96, 128, 168, 232, 240, 255]),
    budgets=st.lists(
        st.tuples(st.sampled_from([128, 256]), st.integers(3, 32), st.booleans()),
        min_size=1,
        max_size=3,
    ),
    data=st.data(),
)
def test_budget_problem_agrees_with_a_pool_simulation(registers, budgets, data) -> None:
    changes = [BudgetChange(threads, 8 * eighths, up) for threads, eighths, up in budgets]
    order = data.draw(st.permutations(range(len(changes))))
    assert (budget_problem(registers, changes) is None) == _pool_simulation(
        registers, changes, order
    )


@pytest.mark.parametrize("persistent", [0, 132])
def test_the_matmul_producer_warp_runs_the_copies_alone(persistent: int) -> None:
    """The f16 matmul with a producer warp (`ir.examples.matmul.matmul`'s `producer`), one tile
    a block or persistent: two classes of warps, the consumers' path with every wait, dot and
    release and no bulk copy, the producer's with every bulk copy, and no block barrier past
    the barriers' set-up."""
    program = matmul(
        256, 128, 256, 64, stages=4, wgmma=True, overlap_dot=True, bulk=True, producer=True,
        persistent=persistent,
    )  # fmt: skip
    assert program.num_threads == 256 + 32
    source = lower(program, "sm_90a").source
    body = source[source.index("warp-specialised: 2 classes of warps") :]
    consumers, producer = body.split("else if ((unsigned)(la_warp1 - 8) < 1u)")
    assert "la_tma_load_2d(" not in consumers and "la_tma_load_2d(" in producer
    assert "wgmma.mma_async" in consumers and "wgmma.mma_async" not in producer
    assert "la_mbarrier_arrive(&la_free_s" in consumers
    assert "__syncthreads()" not in body
    assert ("for (long long" in body) == bool(persistent)

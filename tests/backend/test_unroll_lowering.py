"""The lowering of `for_range(..., unroll=S)`: the body written S times with the stage index a
constant in each copy, the remainder loop, the divisor analysis of the unrolled variable, the
validation of every printed address, and kernels run under the CPU emulation of
test_lower_emulated.py bit-identical to the interpreter.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from backend.lower import LoweredKernel, lower
from backend.lower.driver import KernelLowering, fold_stage, unrolled_copy
from backend.nvrtc import compile_cuda
from backend.tensor_core import LdmatrixPlan, mma_operand_layouts
from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.instructions import ForRange, LoadGlobal
from ir.program import Program
from layout_algebra import GlobalLayout, evaluate, spatial, var
from layout_algebra.shared import shared_row_major, shared_row_major_swizzle
from proofs.lowering_validation import LoweringValidation, validate_lowering


def _emulation() -> ModuleType:
    """test_lower_emulated.py, imported once under the name its other users give it."""
    module = sys.modules.get("lower_emulated")
    if module is None:
        spec = importlib.util.spec_from_file_location(
            "lower_emulated", Path(__file__).with_name("test_lower_emulated.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["lower_emulated"] = module
        spec.loader.exec_module(module)
    return module


emulated = _emulation()

F16, F32 = dtypes.f16, dtypes.f32
RLIMIT = 2_000_000
ROWS = 20
"""Rows of `staged_loop`'s input: enough for every loop of this file (k < 4 * 4 + 3)."""


def staged_loop(
    unroll: int,
    start: int = 0,
    stop: int | None = None,
    step: int = 1,
    *,
    stages: int | None = None,
    multiple_of: int = 1,
    rolled: bool = False,
) -> Program:
    """A loop over k in range(start, stop, step, unroll) whose iteration i = (k - start) //
    step goes through buffer ``stage = i % stages`` (default: `unroll` stages) of a shared
    tensor: row k of x stored there, read back by other threads, ``acc = acc * 0.5 + row``,
    and ``acc += 1`` when the stage is 0; then y = acc. `stop` None: the runtime int parameter
    n (declared a multiple of `multiple_of`); `rolled` asks the compiler to keep it a loop."""
    stages = stages or unroll
    with ProgramBuilder("staged", 4) as b:
        n = b.int_param("n", 0, ROWS, multiple_of)
        x, y = b.array_param("x", F32), b.array_param("y", F32)
        source = b.global_view(x, F32, GlobalLayout((ROWS, 4), (4, 1)))
        target = b.global_view(y, F32, GlobalLayout((4,), (1,)))
        buffer = b.shared_tensor(F32, shared_row_major(stages, 4))
        total = b.register_tensor(F32, spatial(4), 0.5)
        loop = b.for_range(start, n if stop is None else stop, step, unroll=unroll, rolled=rolled)
        with loop as k:
            stage = (k - start) // step % stages
            b.store_shared(buffer, b.load_global(source, [k, 0], spatial(1, 4)), [stage, 0])
            b.sync()
            back = b.load_shared(buffer, spatial(4), [stage, 0])
            b.assign(total, b.add(b.mul(total, 0.5), back))
            b.sync()
            with b.if_(stage.eq(0)):
                b.assign(total, b.add(total, 1.0))
        b.store_global(target, total, [0])
    return b.program()


def nested_loops(outer: int, inner: int) -> Program:
    """``for i in range(n, unroll=outer): for j in range(3, unroll=inner)``: row i + j of x
    through stage ``(i + j) % 2`` of a shared buffer into ``acc = acc * 0.5 + row``."""
    with ProgramBuilder("nested", 4) as b:
        n = b.int_param("n", 0, ROWS - 3)
        x, y = b.array_param("x", F32), b.array_param("y", F32)
        source = b.global_view(x, F32, GlobalLayout((ROWS, 4), (4, 1)))
        target = b.global_view(y, F32, GlobalLayout((4,), (1,)))
        buffer = b.shared_tensor(F32, shared_row_major(2, 4))
        total = b.register_tensor(F32, spatial(4), 0.5)
        with b.for_range(0, n, 1, unroll=outer) as i, b.for_range(0, 3, 1, unroll=inner) as j:
            stage = (i + j) % 2
            b.store_shared(buffer, b.load_global(source, [i + j, 0], spatial(1, 4)), [stage, 0])
            b.sync()
            back = b.load_shared(buffer, spatial(4), [stage, 0])
            b.assign(total, b.add(b.mul(total, 0.5), back))
            b.sync()
        b.store_global(target, total, [0])
    return b.program()


def loop_text(kernel: LoweredKernel) -> str:
    """The source from the loop's comment to the store after it."""
    source = kernel.source
    return source[source.index("    // for k0") : source.index("    // store_global(g1")]


def assert_proved(report: LoweringValidation) -> None:
    assert report.holds is True, (report.failures[:1], report.unknown[:1])
    assert report.results


# ---------------------------------------------------------------------------- generated text

UNROLLED_HEADER = """\
    // for k0 in range(0, 4, 1, unroll=2):
    for (int k0 = 0; k0 < 4; k0 += 2) {
        const long long la_w_k0 = k0;
        // copy 0 of 2: k0 + 0
        {
            // r1: f32[1, 4] spatial(1,4) = load_global(g0, [k0, 0])
            unsigned int r1[1];
            r1[0] = ((const unsigned int*)g0)[k0 * 4 + la_thread];
            // store_shared(s0, r1, [0, 0])
            {
                ((unsigned int*)s0)[la_thread] = r1[0];
            }
"""

SECOND_COPY = """\
        // copy 1 of 2: k0 + 1
        {
            // r1: f32[1, 4] spatial(1,4) = load_global(g0, [k0 + 1, 0])
            unsigned int r1[1];
            r1[0] = ((const unsigned int*)g0)[k0 * 4 + la_thread + 4];
            // store_shared(s0, r1, [1, 0])
            {
                ((unsigned int*)s0)[la_thread + 4] = r1[0];
            }
            // sync()
            __syncthreads();
            // r2: f32[4] spatial(4) = load_shared(s0, [1, 0])
            unsigned int r2[1];
            r2[0] = ((const unsigned int*)s0)[la_thread + 4];
"""


def test_unrolled_loop_literal_excerpt():
    text = loop_text(lower(staged_loop(2, 0, 4)))
    assert text.startswith(UNROLLED_HEADER)
    assert SECOND_COPY in text
    assert "// if 1:" in text and "// if 0:" in text  # the stage condition, per copy
    assert "remainder" not in text


@pytest.mark.parametrize("unroll", [2, 3, 4])
def test_body_written_unroll_times_with_constant_stages(unroll):
    text = loop_text(lower(staged_loop(unroll, 1, 1 + 4 * unroll, 2)))
    assert f"for (int k0 = 1; k0 < {1 + 4 * unroll}; k0 += {2 * unroll}) {{" in text
    for copy in range(unroll):
        assert text.count(f"// copy {copy} of {unroll}: k0 + {2 * copy}\n") == 1
        shift = f"k0 + {2 * copy}" if copy else "k0"
        assert text.count(f"= load_global(g0, [{shift}, 0])") == 1
        assert text.count(f"// store_shared(s0, r1, [{copy}, 0])") == 1
        assert text.count(f"= load_shared(s0, [{copy}, 0])") == 1
    assert text.count("__syncthreads();") == 2 * unroll
    assert text.count("// if 1:") == 1 and text.count("// if 0:") == unroll - 1
    assert "%" not in text and "for (;" not in text


def test_runtime_trip_count_runs_a_remainder_loop():
    text = loop_text(lower(staged_loop(3)))
    assert (
        "    {\n"
        "        int k0 = 0;\n"
        "        for (; k0 < n - 2; k0 += 3) {\n"
        "            const long long la_w_k0 = k0;\n"
        "            // copy 0 of 3: k0 + 0\n"
    ) in text
    remainder = text[text.index("// remainder: the last iterations, fewer than 3") :]
    assert remainder.startswith(
        "// remainder: the last iterations, fewer than 3\n"
        "        for (; k0 < n; k0 += 1) {\n"
        "            const long long la_w_k0 = k0;\n"
        "            // r1: f32[1, 4] spatial(1,4) = load_global(g0, [k0, 0])\n"
    )
    assert "// store_shared(s0, r1, [k0 % 3, 0])" in remainder  # a runtime stage there


@pytest.mark.parametrize(
    ("unroll", "stop", "header"),
    [
        (1, None, "for (int k0 = 0; k0 < n; k0 += 1) {"),
        (1, 7, "for (int k0 = 0; k0 < 7; k0 += 1) {"),
        (3, None, "for (; k0 < n - 2; k0 += 3) {"),  # not its remainder loop
        (2, 8, "for (int k0 = 0; k0 < 8; k0 += 2) {"),
    ],
)
def test_a_rolled_loop_is_kept_rolled_by_a_pragma(unroll: int, stop: int | None, header: str):
    """A `rolled` loop's C loop follows ``#pragma unroll 1``; the same loop not rolled has no
    pragma and is otherwise the same text (but the loop's comment, the IR's text)."""
    rolled = lower(staged_loop(unroll, stop=stop, rolled=True)).source.splitlines()
    rolled = [line.replace(", rolled=True)", ")") for line in rolled]
    plain = lower(staged_loop(unroll, stop=stop)).source.splitlines()
    [at] = [i for i, line in enumerate(rolled) if "#pragma" in line]
    assert (rolled[at].strip(), rolled[at + 1].strip()) == ("#pragma unroll 1", header)
    assert rolled[:at] + rolled[at + 1 :] == plain


@pytest.mark.parametrize(
    ("unroll", "start", "step", "multiple_of", "whole"),
    [
        (2, 0, 1, 2, True),  # n - 0 is a multiple of 2 * 1
        (4, 0, 1, 8, True),
        (2, 0, 2, 4, True),  # n a multiple of 2 * 2
        (2, 0, 2, 2, False),  # n even, but n / 2 need not be
        (2, 1, 1, 2, False),  # n - 1 is odd
        (3, 0, 1, 1, False),
    ],
)
def test_a_known_multiple_of_the_group_needs_no_remainder(unroll, start, step, multiple_of, whole):
    program = staged_loop(
        unroll, start, None, step, stages=2 if unroll % 2 == 0 else unroll, multiple_of=multiple_of
    )
    text = loop_text(lower(program))
    group = unroll * step
    if whole:
        assert f"for (int k0 = {start}; k0 < n; k0 += {group}) {{" in text
        assert "remainder" not in text
    else:
        assert f"for (; k0 < n; k0 += {step}) {{" in text
        assert "// remainder: the last iterations" in text


@pytest.mark.parametrize("stop", [1, 2, 3])
def test_constant_trip_count_below_unroll_is_a_plain_loop(stop):
    unrolled = lower(staged_loop(4, 0, stop, stages=2)).source
    plain = lower(staged_loop(1, 0, stop, stages=2)).source
    header = f"range(0, {stop}, 1, unroll=4)"
    assert unrolled.replace(header, f"range(0, {stop}, 1)") == plain


def test_unroll_1_prints_exactly_the_plain_loop():
    kernel = lower(staged_loop(1, 0, None, stages=2))
    assert "copy 0" not in kernel.source
    assert "    for (int k0 = 0; k0 < n; k0 += 1) {\n" in kernel.source


# ------------------------------------------------------------------------ the copies' scalars

K = var("k", 0, 100)
K0 = var("k0", 0, 50)
Q = var("q", 0, None)


@pytest.mark.parametrize(
    ("expr", "base", "folded"),
    [
        ((K - K0) % 2, K0 + 2 * Q, "0"),  # the stage of copy 0
        ((K + 1 - K0) % 2, K0 + 2 * Q, "1"),  # of copy 1
        (K % 2, K0 + 2 * Q, "k % 2"),  # depends on k0, which it does not read
        (K % 2, 2 * Q + 1, "1"),
        ((K - 1) // 2 % 3, 6 * Q + 5, "2"),  # iteration (k - 1) / 2 of a loop by 2, unroll 3
        (K // 2, 2 * Q, "k // 2"),  # q itself: no constant
        (K * 64 + (K - K0) % 4 * 32, K0 + 4 * Q + 3, "k * 64 + 96"),  # the stage part only
        ((K % 2).eq(0), 2 * Q, "1"),
        (K < 4, 2 * Q, "k < 4"),
    ],
)
def test_fold_stage_table(expr, base, folded):
    assert repr(fold_stage(expr, "k", base)) == folded


@pytest.mark.parametrize("name", ["remainder", "runtime stride", "nested", "pipelined"])
def test_each_copy_reads_its_iteration(name):
    """Copy j's scalars equal the body's at k + j * step for every k the unrolled loop takes
    (k = start + S * step * q, q >= 0, for the runtime stop's largest value), at every value
    0, 1, 2 of an inner loop's variable."""
    program = pipelined(2) if name == "pipelined" else VALIDATED[name]
    loop = next(i for i in program.walk() if isinstance(i, ForRange))
    start = int(loop.start.value)
    for copy in range(loop.unroll):
        body = unrolled_copy(loop, copy)
        pairs = list(zip(_walk(body), _walk(loop.body)))
        assert len(pairs) == len(list(_walk(loop.body)))
        inner = [i.var.name for i in _walk(loop.body) if isinstance(i, ForRange)]
        for k, j in itertools.product(range(start, 40, loop.unroll * loop.step), range(3)):
            env = {loop.var.name: k, "n": 40, "tiles": 40, **dict.fromkeys(inner, j)}
            shifted = {**env, loop.var.name: k + copy * loop.step}
            for new, old in pairs:
                assert type(new) is type(old)
                for a, b in zip(new.scalars(), old.scalars()):
                    assert evaluate(a, env) == evaluate(b, shifted)


def _walk(body):
    for instruction in body:
        yield instruction
        for inner in instruction.bodies():
            yield from _walk(inner)


# ------------------------------------------------------------------- facts and the analysis


def vector_tiles(unroll: int) -> Program:
    """f16 tiles of 8 elements per thread at column ``k * 4``: only an even k makes the
    origin a multiple of 8."""
    with ProgramBuilder("vector_tiles", 4) as b:
        x, y = b.array_param("x", F16), b.array_param("y", F32)
        source = b.global_view(x, F16, GlobalLayout((4, 64), (64, 1)))
        layout = spatial(4, 1).local(1, 8)
        total = b.register_tensor(F32, layout, 0.0)
        with b.for_range(0, 8, 1, unroll=unroll) as k:
            tile = b.cast(b.load_global(source, [0, k * 4], layout), F32)
            b.assign(total, b.add(total, tile))
        b.store_global(b.global_view(y, F32, GlobalLayout((4, 8), (8, 1))), total, [0, 0])
    return b.program()


def test_unrolled_variable_is_start_plus_group_times_q_for_alignment():
    plain = loop_text(lower(vector_tiles(1)))
    unrolled = lower(vector_tiles(2))
    text = loop_text(unrolled)
    assert "uint4" not in plain and plain.count("const uint2 la_v") == 2
    copy1 = text.index("// copy 1 of 2")
    assert text[:copy1].count("const uint4 la_v") == 1  # k = 2q: k * 4 is a multiple of 8
    assert text[copy1:].count("const uint2 la_v") == 2  # k * 4 + 4 only of 4
    assert "uint2" not in text[:copy1] and "uint4" not in text[copy1:]
    assert_proved(validate_lowering(unrolled, rlimit=RLIMIT))


class _RecordingLowering(KernelLowering):
    """The lowering, noting the source line at which each access is recorded."""

    def __init__(self, program: Program, arch: str | None = None) -> None:
        super().__init__(program, arch)
        self.record_lines: list[int] = []

    def record(self, *args: Any, **kwargs: Any) -> None:
        super().record(*args, **kwargs)
        self.record_lines.append(len(self.out.text().splitlines()))


def test_facts_of_each_access_hold_where_it_sits():
    # k = 1, 3, ..., 13: the unrolled loop runs k = 1 and k = 7 (copies k, k + 2, k + 4), the
    # remainder k = 13, peeled (the bounds are constants).
    program = staged_loop(3, 1, 15, 2)
    lowering = _RecordingLowering(program)
    kernel = lowering.kernel()
    lines = kernel.source.splitlines()
    main = lines.index("        for (; k0 < 11; k0 += 6) {")
    rest = lines.index("        // k0 = 13")
    placed = {"main": [], "rest": []}
    for access, line in zip(kernel.accesses, lowering.record_lines):
        assert line > main
        placed["rest" if line > rest else "main"].append(access)
    values = {"main": [1, 7], "rest": [13]}
    for where, accesses in placed.items():
        assert accesses
        for access in accesses:
            for value in values[where]:
                assert all(evaluate(fact, {"k0": value}) for fact in access.assumptions)
    for access in placed["main"]:
        assert not all(evaluate(fact, {"k0": 13}) for fact in access.assumptions)
    origins = {a.origin for a in placed["main"] if isinstance(a.instruction, LoadGlobal)}
    k0 = next(i for i in program.walk() if isinstance(i, ForRange)).var
    assert origins == {(k0, 0), (k0 + 2, 0), (k0 + 4, 0)}  # each copy's own instruction
    peeled = {a.origin for a in placed["rest"] if isinstance(a.instruction, LoadGlobal)}
    assert peeled == {(13, 0)}


# ---------------------------------------------------------------------------- validation

VALIDATED = {
    "whole": staged_loop(2, 0, 8),
    "remainder": staged_loop(3, 1, 15, 2),
    "runtime": staged_loop(4),
    "runtime stride": staged_loop(2, 1, None, 2),
    "declared multiple": staged_loop(2, 0, None, 1, multiple_of=4),
    "nested": nested_loops(2, 2),
}


@pytest.mark.parametrize("name", list(VALIDATED))
def test_unrolled_lowering_validates(name):
    assert_proved(validate_lowering(lower(VALIDATED[name]), rlimit=RLIMIT))


def pipelined(unroll: int) -> Program:
    """A double-buffered tensor-core k loop over a runtime number of tiles: copies into stage
    ``k % 2`` of swizzled buffers, ``ldmatrix``-shaped loads from it, a dot."""
    a_layout, b_layout, c_layout = mma_operand_layouts(2, 2, 64, 64, 16)
    with ProgramBuilder("pipelined", 128) as b:
        tiles = b.int_param("tiles")
        x, w = b.array_param("x", F16), b.array_param("w", F16)
        y = b.array_param("y", F32)
        x_view = b.global_view(x, F16, GlobalLayout((64, tiles * 16), (tiles * 16, 1)))
        w_view = b.global_view(w, F16, GlobalLayout((tiles * 16, 64), (64, 1)))
        x_shared = b.shared_tensor(F16, shared_row_major_swizzle(2, 64, 16, element_bits=16))
        w_shared = b.shared_tensor(F16, shared_row_major_swizzle(2, 16, 64, element_bits=16))
        total = b.register_tensor(F32, c_layout, 0.0)
        with b.for_range(0, tiles, 1, unroll=unroll) as k:
            stage = k % 2
            b.copy_async(x_shared, x_view, [0, k * 16], [stage, 0, 0])
            b.copy_async(w_shared, w_view, [k * 16, 0], [stage, 0, 0])
            b.copy_async_commit()
            b.copy_async_wait(0)
            b.sync()
            a_tile = b.load_shared(x_shared, a_layout, [stage, 0, 0])
            b_tile = b.load_shared(w_shared, b_layout, [stage, 0, 0])
            b.assign(total, b.dot(a_tile, b_tile, total))
            b.sync()
        b.store_global(b.global_view(y, F32, GlobalLayout((64, 64), (64, 1))), total, [0, 0])
    return b.program()


def test_constant_stages_let_ldmatrix_read_a_runtime_loop():
    plain = lower(pipelined(1), "sm_90a")
    unrolled = lower(pipelined(2), "sm_90a")
    # Without unrolling the stage k % 2 is symbolic: ldmatrix is planned over the values the
    # offset takes (0 and 1), the stage printed in the address, and every claim proved.
    symbolic = [plan for plan in plain.plans if isinstance(plan, LdmatrixPlan)]
    assert [str(plan.offsets[0]) for plan in symbolic] == ["la_offset0", "la_offset0"]
    assert all(dict(plan.values) == {"la_offset0": range(2)} for plan in symbolic)
    assert "la_offset0" not in plain.source and "(k0 & 1)" in plain.source
    assert_proved(validate_lowering(plain, rlimit=RLIMIT))
    loads = [plan for plan in unrolled.plans if isinstance(plan, LdmatrixPlan)]
    # Copies 0 and 1 with constant stages; the remainder loop's copy over the stage's values.
    assert [str(plan.offsets[0]) for plan in loads] == ["0", "0", "1", "1", *["la_offset0"] * 2]
    assert_proved(validate_lowering(unrolled, rlimit=RLIMIT))
    assert compile_cuda(unrolled.source, "sm_90a", unrolled.options).cubin


# ----------------------------------------------------------------------------- emulation


def _trip_counts(unroll: int) -> list[int]:
    return sorted({0, 1, unroll - 1, unroll, 2 * unroll + 1})


EMULATED: list[tuple[str, Program, list[int]]] = []
"""(name, program, the values of n to run it with)."""
for _unroll in (2, 3, 4):
    EMULATED.append((f"S{_unroll}-runtime", staged_loop(_unroll), _trip_counts(_unroll)))
    EMULATED.append(
        (
            f"S{_unroll}-runtime-from-1-by-2",
            staged_loop(_unroll, 1, None, 2),
            [1 + 2 * trips for trips in _trip_counts(_unroll)],
        )
    )
    for _trips in _trip_counts(_unroll):
        EMULATED.append((f"S{_unroll}-trips{_trips}", staged_loop(_unroll, 0, _trips), [0]))
EMULATED.append(("nested-S2-in-S2", nested_loops(2, 2), [0, 1, 2, 3, 5]))
EMULATED.append(("nested-S3-in-S2", nested_loops(2, 3), [0, 1, 2, 3, 5]))


@pytest.fixture(scope="module")
def unroll_emulator(tmp_path_factory: pytest.TempPathFactory, cxx_compiler: str) -> Any:
    return emulated._emulator(
        [lower(program) for _, program, _ in EMULATED], tmp_path_factory, cxx_compiler
    )


@pytest.mark.parametrize("index", range(len(EMULATED)), ids=[name for name, _, _ in EMULATED])
def test_emulated_unrolled_kernel_matches_the_interpreter(unroll_emulator: Any, index: int):
    _, program, counts = EMULATED[index]
    rng = np.random.default_rng(index)
    x = rng.normal(0.0, 2.0, (ROWS, 4)).astype(np.float32).view(np.uint8).ravel()
    for n in counts:
        y = rng.normal(0.0, 2.0, 4).astype(np.float32).view(np.uint8)
        expected = [n, x.copy(), y.copy()]
        run_reference(program, *expected, grid=(1,))
        actual = [n, x.copy(), y.copy()]
        unroll_emulator.run(index, actual, (1,))
        assert np.array_equal(actual[2], expected[2]), f"n = {n}"


def test_known_trip_count_peels_the_remainder():
    """A constant trip count that is not a multiple of the unroll count: the iterations left
    are written out with k a constant, no remainder loop."""
    with ProgramBuilder("peeled", 32) as b:
        n = b.int_param("n", constant=True)
        x = b.array_param("x", F32)
        view = b.global_view(x, F32, GlobalLayout((n * 32,), (1,)))
        total = b.register_tensor(F32, spatial(32), 0.0)
        with b.for_range(0, n, unroll=4) as k:
            b.assign(total, b.add(total, b.load_global(view, [k * 32], spatial(32))))
        b.store_global(view, total, [0])
    kernel = lower(b.program(), constants={"n": 7})
    source = kernel.source
    assert "// remainder, peeled: the last 3 iterations" in source
    assert [
        line.strip() for line in source.splitlines() if line.strip().startswith("// k0 = ")
    ] == [
        "// k0 = 4",
        "// k0 = 5",
        "// k0 = 6",
    ]
    assert source.count("for (") == 1  # the unrolled loop only
    assert_proved(validate_lowering(kernel, rlimit=RLIMIT))

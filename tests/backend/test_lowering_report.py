"""The lowering report: the path each written instruction took (`backend.lower.report`).

Exact reports of small programs (a vector load with its bounds-check tail, a sub-byte float
operation through the software codec, a paired half multiply, an unrolled loop's copies), the
table's text, and a property over random programs: every memory instruction the lowering wrote
names at least one path, and a path is generic exactly when it is an element-by-element move or
goes through the software float codec.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from backend.lower import lower
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.examples.vector_add import vector_add
from ir.instructions import (
    Binary,
    CopyAsync,
    LoadGlobal,
    LoadShared,
    StoreGlobal,
    StoreShared,
)
from ir.testing import ProgramCase, program_cases
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial


def _paths(step) -> dict[str, tuple[int, bool]]:
    return {path.name: (path.count, path.generic) for path in step.paths}


def test_vector_add_report() -> None:
    report = lower(vector_add()).report
    loads = [s for s in report if isinstance(s.instruction, LoadGlobal)]
    assert len(loads) == 2
    # Each thread's 8 f16 elements: one 16-byte vector, and the masked tail element by element.
    assert _paths(loads[0]) == {"load 16 B": (1, False), "load element by element": (8, True)}
    (add,) = [s for s in report if isinstance(s.instruction, Binary)]
    assert _paths(add) == {"paired f16 add": (4, False)}
    assert report.generic_in_loops() == []  # vector_add has no loop
    assert report.path_counts()["load 16 B"] == 2


def _single_op_program(dtype, op: str):
    with ProgramBuilder("one_op", 32) as b:
        x = b.array_param("x", dtype)
        view = b.global_view(x, dtype, GlobalLayout((32 * 4,), (1,)))
        tile = b.load_global(view, [0], spatial(32).local(4))
        with b.for_range(0, 2, unroll=2):
            b.store_global(view, b.binary(op, tile, tile), [0])
    return b.program()


def test_sub_byte_float_arithmetic_is_generic_and_reported_in_the_loop() -> None:
    report = lower(_single_op_program(dtypes.f4e2m1, "mul")).report
    generic = report.generic_in_loops()
    # The loop body is written twice (unroll 2): two mul steps through the codec.
    muls = [s for s in generic if isinstance(s.instruction, Binary)]
    assert len(muls) == 2
    assert _paths(muls[0]) == {"f4e2m1 mul via the float codec": (4, True)}
    assert all(s.loop_depth == 1 for s in muls)


def test_half_arithmetic_is_not_generic() -> None:
    report = lower(_single_op_program(dtypes.f16, "mul"), "sm_90a").report
    muls = [s for s in report if isinstance(s.instruction, Binary)]
    assert [_paths(s) for s in muls] == [{"paired f16 mul": (2, False)}] * 2
    assert not any(s.generic for s in muls)


def test_table_lists_every_step() -> None:
    report = lower(vector_add()).report
    table = report.table()
    assert table.startswith("| loops | instruction | paths |\n|---:|---|---|\n")
    assert len(table.splitlines()) == 2 + len(report.steps)
    assert "load 16 B x 1, load element by element x 8 (generic)" in table


MEMORY = (LoadGlobal, StoreGlobal, LoadShared, StoreShared, CopyAsync)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(program_cases())
def test_every_memory_instruction_reports_a_path(case: ProgramCase) -> None:
    report = lower(case.program, constants=case.constants).report
    for step in report:
        if isinstance(step.instruction, MEMORY):
            assert step.paths, step.instruction
        for path in step.paths:
            by_elements = "element by element" in path.name
            assert path.generic == (by_elements or "via the float codec" in path.name)

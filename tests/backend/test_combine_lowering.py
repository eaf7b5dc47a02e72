"""The lowering of a combining store (``store_global(..., combine="add")``): one
``la_red_add_<type>`` (``red.global.add``) per element, run by the primary replica alone, under
the element's bounds check, its helpers only in a kernel that combines, and every address and
guard proved as a store's (a wrong one refused)."""

from __future__ import annotations

import pytest

from backend.cuda_codegen import COMBINE_SOURCE
from backend.lower import lower
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import replicate, spatial
from proofs.lowering_validation import validate_access, validate_lowering

RLIMIT = 2_000_000


def _rows_program(dtype: DataType, combine: str | None = "add"):
    """Block x adds row x of src (its first n columns) into out, through 8 threads holding
    4 elements, each replicated twice."""
    with ProgramBuilder("rows", 8) as b:
        n = b.int_param("n")
        src = b.global_view(b.array_param("src", dtype), dtype, GlobalLayout((4, n), (n, 1)))
        out = b.global_view(b.array_param("out", dtype), dtype, GlobalLayout((1, n), (n, 1)))
        tile = b.load_global(src, [b.block_x, 0], spatial(1, 4) * replicate(2))
        b.store_global(out, tile, [0, 0], combine=combine)
    return b.program()


def _store_text(source: str) -> str:
    start = source.index("    // store_global(")
    return source[start : source.index("\n}", start)]


def test_the_combining_store_text() -> None:
    assert _store_text(lower(_rows_program(dtypes.f32)).source) == (
        "    // store_global(g1, r0, [0, 0], combine='add')\n"
        "    if ((la_thread & 1) == 0) {\n"
        "        unsigned int* const la_base1 = ((unsigned int*)g1) + (la_thread >> 1);\n"
        "        if (la_thread >> 1 < n) {\n"
        "            la_red_add_f32(&la_base1[0], r0[0]);\n"
        "        }\n"
        "    }"
    )


@pytest.mark.parametrize("dtype", [dtypes.i32, dtypes.f16, dtypes.bf16, dtypes.f32])
def test_each_type_takes_its_helper(dtype: DataType) -> None:
    source = lower(_rows_program(dtype), "sm_90a").source
    assert COMBINE_SOURCE.strip() in source
    assert f"la_red_add_{dtype.name}(&la_base1[0], " in source


def test_the_helpers_come_only_with_a_combining_store() -> None:
    plain = lower(_rows_program(dtypes.f32, combine=None)).source
    assert "la_red_add" not in plain and "red.global.add" not in plain


def test_the_helpers_add_in_memory() -> None:
    """The PTX of each type's add: f32 without .noftz (subnormals flushed, as the interpreter
    does), f16 and bf16 with it; bf16 before sm_90 by a compare-and-swap loop."""
    assert "red.global.add.u32 [%0], %1;" in COMBINE_SOURCE
    assert "red.global.add.f32 [%0], %1;" in COMBINE_SOURCE
    assert "red.global.add.noftz.f16 [%0], %1;" in COMBINE_SOURCE
    bf16 = COMBINE_SOURCE[COMBINE_SOURCE.index("la_red_add_bf16") :]
    assert bf16.index("#if __CUDA_ARCH__ >= 900") < bf16.index("red.global.add.noftz.bf16")
    assert "atomicCAS(element, expected, (unsigned short)la_hadd_bf16(expected, code))" in bf16


def test_the_combining_store_is_proved() -> None:
    report = validate_lowering(lower(_rows_program(dtypes.f16)), rlimit=RLIMIT)
    stores = [r for a, r in report.results if a.instruction.op == "store_global"]
    assert len(stores) == 1 and all(r.holds is True for r in stores)


def test_an_add_run_by_both_replicas_is_refused() -> None:
    """Without the replica guard both copies of each element would add it: the guard check
    finds the access outside its guard."""
    kernel = lower(_rows_program(dtypes.f32))
    access = [a for a in kernel.accesses if a.instruction.op == "store_global"][0]
    source = kernel.source.replace("    if ((la_thread & 1) == 0) {", "    if (1) {")
    result = validate_access(access, source, rlimit=RLIMIT)
    assert result.holds is False and result.counterexample["claim"] == "guard"

"""The lowering of a combining store (``store_global(..., combine="add")``): one
``la_red_add_<type>`` (``red.global.add``) per element, or per run of consecutive f32, f16 or
bf16 elements a vector ``la_red_add_<type>_v<width>`` (one vector ``red`` from sm_90), run by the
primary replica alone, under the bounds check, its helpers only in a kernel that combines, and
every address, guard and vector's words proved as a store's (a wrong one refused)."""

from __future__ import annotations

import re

import pytest

from backend import sass
from backend.cuda_codegen import COMBINE_SOURCE, VECTOR_COMBINE_WIDTHS, combine_helper
from backend.lower import lower
from backend.nvrtc import compile_cuda
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import RegisterLayout, replicate, spatial
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


def _runs_program(dtype: DataType, run: int, replicas: int = 1):
    """Block x adds row x of src into out, 8 threads (times `replicas`) each holding `run`
    consecutive elements."""
    layout: RegisterLayout = (spatial(1, 8) * replicate(replicas)).local(1, run)
    with ProgramBuilder("runs", 8 * replicas) as b:
        n = b.int_param("n")
        src = b.global_view(b.array_param("src", dtype), dtype, GlobalLayout((4, n), (n, 1)))
        out = b.global_view(b.array_param("out", dtype), dtype, GlobalLayout((1, n), (n, 1)))
        tile = b.load_global(src, [b.block_x, 0], layout)
        b.store_global(out, tile, [0, 0], combine="add")
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


def test_a_run_adds_with_one_vector() -> None:
    """Four consecutive f32 elements: one vector add where the run lies inside the row, its
    elements one by one, each under its own bounds check, where it may not."""
    assert _store_text(lower(_runs_program(dtypes.f32, 4)).source) == (
        "    // store_global(g1, r0, [0, 0], combine='add')\n"
        "    {\n"
        "        if (la_thread * 4 + 3 < n) {\n"
        "            la_red_add_f32_v4(g1 + (la_thread * 16), r0[0], r0[1], r0[2], r0[3]);\n"
        "        }\n"
        "        else {\n"
        + "".join(
            f"            if (la_thread * 4{f' + {j}' if j else ''} < n) {{\n"
            f"                la_red_add_f32(&((unsigned int*)g1)[la_thread * 4"
            f"{f' + {j}' if j else ''}], r0[{j}]);\n"
            "            }\n"
            for j in range(4)
        )
        + "        }\n"
        "    }"
    )


@pytest.mark.parametrize(
    ("dtype", "run"),
    [(dtypes.from_name(d), w) for d, widths in VECTOR_COMBINE_WIDTHS.items() for w in widths],
)
def test_each_run_takes_its_vector_helper(dtype: DataType, run: int) -> None:
    """A run of `run` elements (at most 16 bytes) passes its words, in order, to the helper
    of its type and length; a longer run of elements splits into 16-byte vectors."""
    words = run * dtype.nbits // 32
    source = lower(_runs_program(dtype, run), "sm_90a").source
    arguments = ", ".join(f"r0[{q}]" for q in range(words))
    helper = combine_helper(dtype.name, run)
    assert f"{helper}(g1 + (la_thread * {run * dtype.nbits // 8}), {arguments});" in source
    doubled = lower(_runs_program(dtype, 2 * run), "sm_90a").source
    if 2 * run * dtype.nbits > 128:
        assert doubled.count(f"{helper}(g1 + ") == 2


def test_i32_adds_element_by_element() -> None:
    """The 32-bit integers have no vector red: a run of four adds element by element."""
    source = lower(_runs_program(dtypes.i32, 4)).source
    assert "la_red_add_i32_v" not in source
    assert source.count("la_red_add_i32(&la_base1[") == 4


def test_a_vector_add_runs_in_the_primary_replica_alone() -> None:
    source = lower(_runs_program(dtypes.f32, 4, replicas=2)).source
    store = _store_text(source)
    assert store.index("if ((la_thread & 1) == 0) {") < store.index("la_red_add_f32_v4(")


def test_the_vector_helpers_add_in_memory() -> None:
    """The PTX of the vector adds: from sm_90 one red with a vector operand of the run's words
    (a packed pair for one pair of halves); f16's packed pair from sm_60, so before sm_90 the
    f16 runs go pair by pair, the others element by element."""
    for width in (2, 4):
        assert f"red.global.add.v{width}.f32 [%0], {{" in COMBINE_SOURCE
    assert "red.global.add.noftz.f16x2 [%0], %1;" in COMBINE_SOURCE
    assert "red.global.add.noftz.bf16x2 [%0], %1;" in COMBINE_SOURCE
    for dtype in ("f16", "bf16"):
        assert f"red.global.add.noftz.v2.{dtype}x2 [%0], {{%1, %2}};" in COMBINE_SOURCE
        assert f"red.global.add.noftz.v4.{dtype}x2 [%0], {{%1, %2, %3, %4}};" in COMBINE_SOURCE
    f16_pair = COMBINE_SOURCE[COMBINE_SOURCE.index("void la_red_add_f16_v2(") :]
    assert f16_pair.index("red.global.add.noftz.f16x2") < f16_pair.index("}")
    assert "#if" not in f16_pair[: f16_pair.index("}")]
    f16_run = COMBINE_SOURCE[COMBINE_SOURCE.index("void la_red_add_f16_v8(") :]
    assert "la_red_add_f16_v2((la_u32*)address + 3, w3);" in f16_run[: f16_run.index("\n}")]
    bf16_run = COMBINE_SOURCE[COMBINE_SOURCE.index("void la_red_add_bf16_v4(") :]
    assert "la_red_add_bf16((unsigned short*)address + 3, w1 >> 16);" in bf16_run
    with pytest.raises(ValueError, match="no combining add of 4 i32 elements"):
        combine_helper("i32", 4)
    with pytest.raises(ValueError, match="no combining add of 1 u8 elements"):
        combine_helper("u8")
    assert [combine_helper(d) for d in ("i32", "f16")] == ["la_red_add_i32", "la_red_add_f16"]


def _all_runs_program():
    """Every vector helper's run, each type into a tensor of its own."""
    with ProgramBuilder("all_runs", 8) as b:
        n = b.int_param("n", multiple_of=8)
        for name, widths in VECTOR_COMBINE_WIDTHS.items():
            dtype = dtypes.from_name(name)
            for width in widths:
                layout = GlobalLayout((4, n), (n, 1))
                src = b.global_view(b.array_param(f"src_{name}_{width}", dtype), dtype, layout)
                out = b.global_view(b.array_param(f"out_{name}_{width}", dtype), dtype, layout)
                tile = b.load_global(src, [b.block_x, 0], spatial(1, 8).local(1, width))
                b.store_global(out, tile, [b.block_x, 0], combine="add")
    return b.program()


def test_the_vector_helpers_compile_to_one_red_a_run() -> None:
    """NVRTC compiles every helper for sm_80 and sm_90a; on sm_90a each run inside the row is
    one vector REDG (f32x2, f32x4, and the halves' x2, x4, x8), flushing f32 (.FTZ) and not the
    halves, as the interpreter rounds. (A single half's red is a compare-and-swap loop in the
    machine code, ATOMG.E.CAS: the vector forms are the halves' native adds.)"""
    kernel = lower(_all_runs_program(), "sm_90a")
    compile_cuda(lower(_all_runs_program(), "sm_80").source, "sm_80")
    cubin = compile_cuda(kernel.source, "sm_90a").cubin
    try:
        functions = sass.disassemble(cubin)
    except sass.DisassemblyError as error:
        pytest.skip(str(error))
    reds = [str(i) for f in functions.values() for i in f.instructions if "REDG" in str(i)]
    forms = {form for red in reds for form in re.findall(r"ADD\.(B?F\d+x\d)\.", red)}
    assert forms == {"F32x2", "F32x4", "F16x2", "F16x4", "F16x8", "BF16x2", "BF16x4", "BF16x8"}
    assert all(".FTZ" in red for red in reds if ".F32" in red)
    assert not any(".FTZ" in red for red in reds if "F16" in red)
    # The single halves at the row's end: no half REDG of one element, a CAS loop instead.
    assert not any(re.search(r"ADD\.B?F16\.", red) for red in reds)
    assert any("ATOMG.E.CAS" in str(i) for f in functions.values() for i in f.instructions)


def test_a_vector_combine_is_proved() -> None:
    for dtype, run in ((dtypes.f32, 4), (dtypes.bf16, 8), (dtypes.f16, 2)):
        report = validate_lowering(lower(_runs_program(dtype, run, replicas=2)), rlimit=RLIMIT)
        stores = [r for a, r in report.results if a.instruction.op == "store_global"]
        assert len(stores) == 1 + run and all(r.holds is True for r in stores)


@pytest.mark.parametrize(
    ("dtype", "run", "printed", "altered"),
    [
        # two words swapped
        (dtypes.f32, 4, "r0[0], r0[1], r0[2], r0[3]);", "r0[1], r0[0], r0[2], r0[3]);"),
        # the words in order, but to bf16's add where the tile is f16
        (dtypes.f16, 8, "    la_red_add_f16_v8(g1 + ", "    la_red_add_bf16_v8(g1 + "),
    ],
)
def test_a_wrong_vector_add_is_refused(
    dtype: DataType, run: int, printed: str, altered: str
) -> None:
    kernel = lower(_runs_program(dtype, run))
    access = [a for a in kernel.accesses if a.instruction.op == "store_global" and a.width == run]
    source = kernel.source.replace(printed, altered)
    assert source != kernel.source
    result = validate_access(access[0], source, rlimit=RLIMIT)
    assert result.holds is False and result.counterexample["claim"] == "lanes"

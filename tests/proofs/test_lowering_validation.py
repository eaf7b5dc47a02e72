"""Validation of the backend's printed addresses against their layouts, with Z3.

Every example, every feature program of the backend's tests and a sample of random programs
validate; mutated expressions, masks and misaligned vectors are refuted with confirmed
counterexamples; the specification is pinned by literal values and by brute force; a starved
solver answers unknown, never proved.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from backend.cuda_codegen import unpack_expressions
from backend.lower import Access, lower
from backend.lower import context as backend_context
from backend.lower import memory as backend_memory
from backend.lower.context import c_text
from backend.lower.memory import MemoryLowering
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.examples.matmul import matmul
from ir.examples.quantized_matmul import quantized_matmul
from ir.examples.softmax import row_softmax
from ir.examples.vector_add import vector_add
from ir.instructions import LoadGlobal
from ir.testing import ProgramCase, program_cases
from layout_algebra import GlobalLayout, as_expr, evaluate, local, spatial, var
from proofs.lowering_validation import (
    LoweringValidation,
    inside,
    specification,
    validate_access,
    validate_lowering,
)
from proofs.printed_source import INDENT, PrintedSource

_spec = importlib.util.spec_from_file_location(
    "lower_emulated",
    Path(__file__).parents[1] / "backend" / "test_lower_emulated.py",
)
emulated = importlib.util.module_from_spec(_spec)
sys.modules["lower_emulated"] = emulated
_spec.loader.exec_module(emulated)

RLIMIT = 2_000_000
EXAMPLES = {
    "vector_add": vector_add(),
    "row_softmax": row_softmax(),
    "matmul": matmul(),
    "quantized_matmul_u4": quantized_matmul(),
    "quantized_matmul_i3": quantized_matmul(dtypes.i3),
}


def _assert_proved(report: LoweringValidation) -> None:
    assert report.holds is True, (report.failures[:1], report.unknown[:1])
    assert report.results


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_lowering_validates(name: str) -> None:
    _assert_proved(validate_lowering(lower(EXAMPLES[name]), rlimit=RLIMIT))


@pytest.mark.parametrize(
    "index", range(len(emulated.FEATURES)), ids=[case.name for case in emulated.FEATURES]
)
def test_feature_program_lowering_validates(index: int) -> None:
    _assert_proved(validate_lowering(lower(emulated.FEATURES[index].program), rlimit=RLIMIT))


def test_tensor_core_plans_are_proved_with_the_accesses() -> None:
    case = next(c for c in emulated.FEATURES if c.name == "tensor_cores")
    report = validate_lowering(lower(case.program, "sm_90a"), rlimit=RLIMIT)
    _assert_proved(report)
    names = [claim.name for claim, _ in report.plan_results]
    assert names[-3:] == ["mma operand a", "mma operand b", "mma accumulator c"]
    assert all(name.startswith("ldmatrix") for name in names[:-3])


def test_tensor_core_matmul_ring_is_proved_with_its_ldmatrix_plans() -> None:
    """The f16 matmul on tensor cores with three swizzled stages: its ldmatrix plans, made over
    the values its stage and k slice take, are proved with every access."""
    kernel = lower(matmul(tensor_cores=True, stages=3, swizzle=True), "sm_90a")
    report = validate_lowering(kernel, rlimit=RLIMIT)
    _assert_proved(report)
    assert sum(claim.name.startswith("ldmatrix") for claim, _ in report.plan_results) == 4


RANDOM_ACCESSES = 1000
"""The most accesses a random program's kernel may have in `test_random_program_lowering_
validates`. The draws past it, dots written out over a few thousand registers (cheap queries,
but thousands), took ten seconds apiece, over half of the test's time, and add no form of access
the smaller draws lack; the examples and feature programs carry the large kernels. The time they
took goes to twice as many draws."""


@settings(max_examples=30)
@given(program_cases())
def test_random_program_lowering_validates(case: ProgramCase) -> None:
    kernel = lower(case.program, constants=case.constants)
    assume(len(kernel.accesses) <= RANDOM_ACCESSES)
    report = validate_lowering(kernel, rlimit=RLIMIT)
    assert report.holds is not False, report.failures[:1]
    assert report.holds is True, report.unknown[:1]


@pytest.mark.parametrize("arch", [None, "sm_90a"])
def test_program_with_constants_lowering_validates(arch: str | None) -> None:
    """A program compiled with constants is validated against its specialised instructions:
    matmul with k a constant 96, so its k loop has a constant trip count."""
    program = matmul()
    params = tuple(
        dataclasses.replace(p, constant=True) if p.name == "k" else p for p in program.params
    )
    lowered = lower(dataclasses.replace(program, params=params), arch, constants={"k": 96})
    for access in lowered.accesses:
        scalars = (access.expr, *access.instruction.scalars())
        assert all("k" not in scalar.free_vars() for scalar in scalars)
    _assert_proved(validate_lowering(lowered, rlimit=RLIMIT))


@pytest.mark.parametrize("dtype", [dtypes.u1, dtypes.u8])
def test_a_bounds_check_on_the_thread_alone_is_not_a_replica_guard(dtype) -> None:
    """32 threads store a (32, 1) tile into a tensor of one element: each store's bounds check,
    ``if (la_thread < 1)``, tests the thread index alone, like a replica guard, but it is the
    access's mask, so the store (which has no replica guard) is proved. A random program
    found the false refusal."""
    with ProgramBuilder("one_element", 32) as b:
        x = b.global_view(b.array_param("x", dtype), dtype, GlobalLayout((32, 1), (1, 1)))
        y = b.global_view(b.array_param("y", dtype), dtype, GlobalLayout((1, 1), (1, 1)))
        b.store_global(y, b.load_global(x, [0, 0], spatial(32, 1)), [0, 0])
    kernel = lower(b.program())
    assert "if (la_thread < 1) {" in kernel.source
    _assert_proved(validate_lowering(kernel, rlimit=RLIMIT))


# -------------------------------------------------------------------------------- mutations


def _vector_add_accesses() -> tuple[Access, ...]:
    return lower(vector_add()).accesses


def test_shifted_address_is_refused() -> None:
    vector = _vector_add_accesses()[0]
    result = validate_access(dataclasses.replace(vector, expr=vector.expr + 16), rlimit=RLIMIT)
    assert result.holds is False
    example = result.counterexample
    assert example["claim"] == "address"
    assert example["printed"] - example["expected"] == 16 * 8  # bits


def test_address_of_another_thread_is_refused() -> None:
    element = _vector_add_accesses()[3]
    thread = element.thread
    wrong = element.expr.substitute({thread.name: (thread + 1) % 128})
    result = validate_access(dataclasses.replace(element, expr=wrong), rlimit=RLIMIT)
    assert result.holds is False
    assert result.counterexample["claim"] == "address"
    t = result.counterexample["t"]
    assert 0 <= t < 128


def test_mask_that_ignores_the_bound_is_refused() -> None:
    vector = _vector_add_accesses()[0]
    result = validate_access(dataclasses.replace(vector, mask=as_expr(1)), rlimit=RLIMIT)
    assert result.holds is False
    example = result.counterexample
    assert example["claim"] == "mask"
    assert (example["printed"], example["expected"]) == (1, 0)
    n = example["variables"]["n"]
    block = example["variables"]["block_x"]
    assert block * 1024 + example["t"] * 8 + 7 >= n


def test_mask_off_by_one_is_refused() -> None:
    vector = _vector_add_accesses()[0]
    n = var("n", 0, 2**31 - 1)
    weaker = vector.mask.args[0] + 6 < n
    result = validate_access(dataclasses.replace(vector, mask=weaker), rlimit=RLIMIT)
    assert result.holds is False
    assert result.counterexample["claim"] == "mask"


def test_zero_fill_count_off_by_one_is_refused() -> None:
    case = next(c for c in emulated.FEATURES if c.name == "copy_tiles")
    filled = next(a for a in lower(case.program).accesses if a.count is not None)
    assert validate_access(filled, rlimit=RLIMIT).holds is True
    result = validate_access(dataclasses.replace(filled, count=filled.count + 1), rlimit=RLIMIT)
    assert result.holds is False
    assert result.counterexample["claim"] == "count"
    assert (result.counterexample["printed"], result.counterexample["expected"]) == (1, 0)


def _misaligned_pair() -> Access:
    """Two f16 registers at elements 1 and 2: consecutive, but not 4-byte aligned."""
    with ProgramBuilder("pair", 1) as b:
        x = b.array_param("x", dtypes.f16)
        b.load_global(b.global_view(x, dtypes.f16, GlobalLayout((8,), (1,))), [1], local(2))
    (instruction,) = [i for i in b.program().body if isinstance(i, LoadGlobal)]
    return Access(
        instruction=instruction,
        memory=instruction.src.layout,
        register=instruction.out.layout,
        origin=instruction.offsets,
        local_index=0,
        width=2,
        element_bits=16,
        expr=as_expr(2),
        unit_bits=8,
        mask=None,
        thread=var("la_thread", 0, 0),
        assumptions=(),
        role="src",
        pointer=instruction.src.name,
    )


def test_misaligned_vector_is_refused() -> None:
    result = validate_access(_misaligned_pair(), rlimit=RLIMIT)
    assert result.holds is False
    assert result.counterexample["claim"] == "alignment"
    assert result.counterexample["printed"] == 16  # bit 16 of a 32-bit vector


def test_same_pair_as_elements_is_proved() -> None:
    pair = _misaligned_pair()
    for j in range(2):
        element = dataclasses.replace(
            pair, local_index=j, width=1, expr=as_expr(1 + j), unit_bits=16
        )
        assert validate_access(element, rlimit=RLIMIT).holds is True


def test_vector_alignment_rests_on_the_declared_divisor() -> None:
    k = var("k", 0, 2**31 - 1)
    (access,) = [
        a
        for a in lower(matmul()).accesses
        if a.width == 8 and isinstance(a.memory, GlobalLayout) and "k" in a.expr.free_vars()
    ][:1]
    assert (k % 8).eq(0) in access.assumptions
    assert validate_access(access, rlimit=RLIMIT).holds is True
    without = dataclasses.replace(
        access, assumptions=tuple(f for f in access.assumptions if f != (k % 8).eq(0))
    )
    result = validate_access(without, rlimit=RLIMIT)
    assert result.holds is False
    assert result.counterexample["claim"] == "alignment"
    assert result.counterexample["variables"]["k"] % 8 != 0


def test_starved_solver_is_unknown_never_proved() -> None:
    accesses = lower(matmul()).accesses
    results = [validate_access(a, rlimit=1).holds for a in accesses[:5]]
    assert all(holds is None for holds in results)


def test_report_collects_failures_and_unknowns() -> None:
    good, bad = _vector_add_accesses()[:2]
    report = validate_lowering([good, dataclasses.replace(bad, expr=bad.expr + 1)], rlimit=RLIMIT)
    assert report.holds is False
    assert [access for access, _ in report.failures] == [report.results[1][0]]
    assert report.unknown == []


# ---------------------------------------------------------------------------- specification


def test_specification_table() -> None:
    access = _vector_add_accesses()[0]
    assert repr(specification(access, 3)) == "block_x * 1024 + ((la_thread % 128) * 8 + 3)"
    assert evaluate(specification(access, 3), {"block_x": 2, "la_thread": 5}) == 2048 + 43
    assert evaluate(inside(access, 3), {"block_x": 0, "la_thread": 5, "n": 43}) == 0
    assert evaluate(inside(access, 3), {"block_x": 0, "la_thread": 5, "n": 44}) == 1


def test_proved_addresses_agree_with_brute_force() -> None:
    """For every access of a small kernel, the printed address equals the specification at
    every thread and a grid of parameter values (the Z3 verdict is True for all of them)."""
    with ProgramBuilder("small", 8) as b:
        n = b.int_param("n", 1, 64)
        x = b.array_param("x", dtypes.u4)
        y = b.array_param("y", dtypes.u4)
        layout = spatial(4, 2).local(2, 4)
        view = GlobalLayout((n, 8), (8, 1))
        tile = b.load_global(b.global_view(x, dtypes.u4, view), [b.block_x * 8, 0], layout)
        b.store_global(b.global_view(y, dtypes.u4, view), tile, [b.block_x * 8, 0])
    accesses = lower(b.program()).accesses
    assert validate_lowering(accesses, rlimit=RLIMIT).holds is True
    for access in accesses:
        for t in range(8):
            for values in ({"n": 5, "block_x": 0}, {"n": 64, "block_x": 3}):
                env = {"la_thread": t, **values}
                for j in range(access.width):
                    printed = evaluate(access.expr, env) * access.unit_bits
                    expected = evaluate(specification(access, access.local_index + j), env)
                    assert printed + j * access.element_bits == expected * access.element_bits
                everything = np.all(
                    [
                        evaluate(inside(access, access.local_index + j), env)
                        for j in range(access.width)
                    ]
                )
                assert bool(evaluate(access.mask, env)) == bool(everything)


# ------------------------------------------------------------------ wrong kernels are refused
# Each test below breaks the lowering in one way a real bug could, so that the kernel it prints
# and the accesses it records agree with each other but not with the program. The validation
# derives what each access must do from the IR instruction and reads the source, so it refutes
# every one.


def _first_failure(kernel) -> dict:
    report = validate_lowering(kernel, rlimit=RLIMIT)
    assert report.holds is False
    return report.failures[0][1].counterexample


def test_tiles_shifted_by_one_element_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    original = MemoryLowering.register_tile

    def shifted(self, tensor, layout, origin, role):
        *outer, last = origin
        return original(self, tensor, layout, (*outer, last + 1), role)

    monkeypatch.setattr(MemoryLowering, "register_tile", shifted)
    failure = _first_failure(lower(vector_add()))
    assert failure["claim"] == "address"
    assert failure["printed"] - failure["expected"] == 16  # one f16 element, in bits


def _replicated_store_program():
    """A row sum over 8 threads per row: the result is held by 8 replicas; one must store."""
    with ProgramBuilder("row_sums", 32) as b:
        x, y = b.array_param("x", dtypes.f32), b.array_param("y", dtypes.f32)
        tile = b.load_global(
            b.global_view(x, dtypes.f32, GlobalLayout((4, 8), (8, 1))), [0, 0], spatial(4, 8)
        )
        sums = b.reduce(tile, 1, "sum")
        b.store_global(b.global_view(y, dtypes.f32, GlobalLayout((4,), (1,))), sums, [0])
    return b.program()


@pytest.mark.parametrize(
    ("guard", "problem"),
    [
        (lambda layout, thread: None, "written 8 times"),
        (lambda layout, thread: (thread % 8).eq(1) if layout.replication > 1 else None, None),
        (
            lambda layout, thread: (thread % 2).eq(0) if layout.replication > 1 else None,
            "written 4",
        ),
    ],
)
def test_a_wrong_replica_guard_is_refused(monkeypatch, guard, problem) -> None:
    """No guard (every replica stores) and a guard selecting 4 of 8 replicas are refused; a
    guard selecting exactly one other replica (thread % 8 == 1) is a correct kernel."""
    monkeypatch.setattr(backend_context, "primary_condition", guard)
    kernel = lower(_replicated_store_program())
    if problem is None:
        _assert_proved(validate_lowering(kernel, rlimit=RLIMIT))
        return
    failure = _first_failure(kernel)
    assert failure["claim"] == "guard" and problem in failure["reason"]


def test_a_printed_guard_other_than_the_recorded_one_is_refused() -> None:
    kernel = lower(_replicated_store_program())
    (store,) = [a for a in kernel.accesses if a.role == "dst"]
    header = f"if ({c_text(store.guard)}) {{"
    assert header in kernel.source
    edited = dataclasses.replace(kernel, source=kernel.source.replace(header, "if (1) {"))
    failure = _first_failure(edited)
    assert failure["claim"] == "guard" and "no line printing the access runs" in failure["reason"]


def test_vector_lanes_in_reversed_registers_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def reversed_lanes(vector, vector_bytes, element_bits):
        return unpack_expressions(vector, vector_bytes, element_bits)[::-1]

    monkeypatch.setattr(backend_memory, "unpack_expressions", reversed_lanes)
    failure = _first_failure(lower(vector_add()))
    assert failure["claim"] == "lanes"
    assert "unpacks its lanes into registers r0[0] .. r0[7]" in failure["reason"]


def test_source_printing_address_plus_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    original = MemoryLowering.recorded_vector

    def off_by_one(self, tile, first, width, mask):
        text, vector_bytes = original(self, tile, first, width, mask)
        return f"{text} + 1", vector_bytes

    monkeypatch.setattr(MemoryLowering, "recorded_vector", off_by_one)
    failure = _first_failure(lower(vector_add()))
    assert failure["claim"] == "text"
    assert "no line of the source uses g0 at the proved address" in failure["reason"]


def test_an_access_naming_another_tensor_is_refused() -> None:
    kernel = lower(vector_add())
    load = kernel.accesses[0]
    wrong = dataclasses.replace(load, pointer="g1")
    result = validate_access(wrong, kernel.source, rlimit=RLIMIT)
    assert result.holds is False and result.counterexample["claim"] == "pointer"


def _column_store_kernel():
    """A kernel storing an f16 tile into a column-major view of constant stride 48: its
    elements go through one base pointer (`MemoryLowering.element_base`)."""
    with ProgramBuilder("column_store", 128) as b:
        x, y = b.array_param("x", dtypes.f16), b.array_param("y", dtypes.f16)
        values = b.load_global(
            b.global_view(x, dtypes.f16, GlobalLayout((16, 32), (32, 1))),
            [0, 0],
            spatial(8, 16).local(2, 2),
        )
        b.store_global(
            b.global_view(y, dtypes.f16, GlobalLayout((16, 32), (1, 48))), values, [0, 0]
        )
    return lower(b.program())


def test_elements_stored_through_a_base_pointer_are_proved() -> None:
    kernel = _column_store_kernel()
    based = [a for a in kernel.accesses if a.base is not None]
    assert [a.base[2] for a in based] == [0, 48, 1, 49]
    report = validate_lowering(kernel, rlimit=RLIMIT)
    assert all(result.holds is True for _, result in report.results)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("index", "no line of the source uses la_base"),
        ("declaration", "no line declares la_base"),
        ("record", "plus 48 is not the proved address"),
    ],
)
def test_a_base_pointer_printed_wrong_is_refused(edit: str, message: str) -> None:
    """An index off by one, a base pointer declared at another offset, or a record whose base
    and index do not add up to its proved address: each is refused."""
    kernel = _column_store_kernel()
    access = next(a for a in kernel.accesses if a.base is not None and a.base[2] == 48)
    name, offset, _ = access.base
    source = kernel.source
    if edit == "index":
        source = source.replace(f"{name}[48]", f"{name}[47]")
    elif edit == "declaration":
        source = source.replace(f"+ ({c_text(offset)});", f"+ ({c_text(offset)} + 1);")
    else:
        access = dataclasses.replace(access, expr=access.expr + 1)
    result = validate_access(access, source, rlimit=RLIMIT)
    assert result.holds is False and result.counterexample["claim"] == "text"
    assert message in result.counterexample["reason"]


# ------------------------------------------------------------------------- the source's lines


def _headers_by_scanning(lines: list[str], index: int) -> list[str]:
    """The enclosing headers of line `index` found by walking back from it: the nearest line
    indented less that opens a block, then the nearest indented less than that one, ..."""
    depth = (len(lines[index]) - len(lines[index].lstrip(" "))) // len(INDENT)
    found = []
    for n in range(index - 1, -1, -1):
        level = (len(lines[n]) - len(lines[n].lstrip(" "))) // len(INDENT)
        if level < depth and lines[n].rstrip().endswith("{"):
            found.append(lines[n].strip()[:-1].rstrip())
            depth = level
    return found


SOURCE_LINES = st.lists(
    st.tuples(
        st.integers(0, 4),
        st.sampled_from(["if (t < 4) {", "for (k) {", "x = 1;", "}", "", "  {", "y[i] = 2;"]),
    ),
    max_size=40,
).map(lambda drawn: [INDENT * level + text if text else "" for level, text in drawn])


@given(SOURCE_LINES)
def test_each_line_s_headers_are_those_walking_back_finds(lines: list[str]) -> None:
    """`PrintedSource.headers` (one pass over the lines, then the chain of enclosing headers)
    against the walk back from each line, on sources of any indentation, closed or not."""
    source = PrintedSource.of("\n".join(lines))
    for index in range(len(source.lines)):
        assert source.headers(index) == _headers_by_scanning(list(source.lines), index)


def test_the_lines_an_address_matches_are_found_through_its_text() -> None:
    """`PrintedSource.matching` tries the pattern on the lines holding the needle alone: the
    same lines as trying it on all of them, where every match holds the needle."""
    source = PrintedSource.of(
        "    if (t < 4) {\n        y[t + 1] = x[t];\n        y[t + 10] = 0;\n    }\n    y[(t + 1)];"
    )
    pattern = re.compile(r"(?<![\w.])y\)?\[t \+ 1\]")
    assert source.matching(pattern, "t + 1") == [1]
    assert [n for n, line in enumerate(source.lines) if pattern.search(line)] == [1]
    assert source.headers(1) == ["if (t < 4)"] and source.headers(4) == []

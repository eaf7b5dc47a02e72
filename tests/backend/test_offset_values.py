"""The values a load's offsets take, for the ldmatrix planner (`backend.lower.memory`).

Exact: `offset_ranges` over enclosing loops (a k slice of ``range(0, 32, 16)`` takes 0 and 16; a
stage ``kt % 3`` of an unbounded loop takes 0, 1, 2 by its bounds; values that do not step
evenly fall back to the bounds; an unbounded offset gives None), and the f16 and quantized
matmul examples on tensor cores read both operands with ldmatrix in every ring and swizzle.
Property: the ranges hold exactly the values the offsets take, by enumeration of the loops.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.lower import lower
from backend.lower.memory import offset_ranges, offset_values
from ir.examples.matmul import matmul
from ir.examples.quantized_matmul import quantized_matmul
from layout_algebra.symbolic import evaluate, var


def test_a_k_slice_takes_the_loop_values_and_a_stage_its_bounds() -> None:
    kk, kt = var("kk", 0, 31), var("kt", 0, None)
    ranges = offset_ranges([kt % 3, kk, 4], 256, {"kk": range(0, 32, 16)})
    assert ranges == [range(0, 3), range(0, 17, 16), range(4, 5)]
    # Without the loop's values, kk takes every value its bounds allow.
    assert offset_ranges([kk], 256) == [range(0, 32)]
    assert offset_ranges([kk * kk], 256, {"kk": range(0, 5, 4)}) == [range(0, 17, 16)]
    # kk // 2 over 0, 3, 6 takes 0, 1, 3, which do not step evenly: the bounds.
    assert offset_ranges([kk // 2], 256, {"kk": range(0, 7, 3)}) == [range(0, 16)]
    assert offset_ranges([kt], 256) is None
    assert offset_ranges([kk, kk + 1], 256) is None  # 32 * 32 points: past the limit


def test_offset_values_name_each_variable_offset_once() -> None:
    kk = var("kk", 0, 31)
    abstract, values, originals = offset_values([0, kk], {"kk": range(0, 32, 16)})
    (name,) = values
    assert values[name] == range(0, 17, 16) and originals[name] is kk
    assert abstract[0].is_const and abstract[1].bounds() == (0, 16)


@settings(max_examples=40, deadline=None)
@given(
    start=st.integers(0, 8),
    step=st.integers(1, 8),
    count=st.integers(1, 6),
    scale=st.integers(1, 4),
    shift=st.integers(0, 16),
)
def test_ranges_hold_the_values_taken(
    start: int, step: int, count: int, scale: int, shift: int
) -> None:
    loop = range(start, start + step * count, step)
    kk = var("kk", loop[0], loop[-1])
    offset = kk * scale + shift
    (taken,) = offset_ranges([offset], 256, {"kk": loop})
    values = {evaluate(offset, {"kk": v}) for v in loop}
    assert set(taken) == values


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"stages": 3},
        {"stages": 4, "swizzle": True, "inner_k": 32},
        {"num_threads": 256, "block_m": 128, "block_n": 128, "stages": 3, "swizzle": True},
    ],
    ids=str,
)
@pytest.mark.parametrize("quantized", [False, True], ids=["f16", "u4"])
def test_the_matmul_examples_read_both_operands_with_ldmatrix(
    options: dict, quantized: bool
) -> None:
    if quantized:
        program = quantized_matmul(tensor_cores=True, **{"stages": 2, **options})
    else:
        program = matmul(tensor_cores=True, **options)
    kernel = lower(program, "sm_90a")
    loads = [
        [path.name for path in step.paths]
        for step in kernel.report.steps
        if type(step.instruction).__name__ == "LoadShared"
    ]
    assert loads and all(paths == ["ldmatrix"] for paths in loads)
    # Both orders of the operands' register pairs: ldmatrix and ldmatrix.trans.
    names = {claim.name.split(" into")[0] for plan in kernel.plans for claim in plan.claims()}
    assert {name for name in names if name.startswith("ldmatrix")} == {
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
    }

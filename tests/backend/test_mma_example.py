"""The tensor-core examples of `ir.examples` against the backend's mma planner.

`ir` may not import `backend`, so the examples write their mma operand layouts themselves
(`ir.examples.matmul.mma_dot_layouts`); here they are checked equal to the backend's
`mma_operand_layouts`, and `plan_mma` is checked to plan the examples' dots (and to decline the
SIMT ones, which `ir.placement.dot_is_thread_local` accepts instead).
"""

from __future__ import annotations

import pytest

from backend.tensor_core import mma_operand_layouts, plan_mma
from ir import dtypes
from ir.examples.matmul import matmul, mma_dot_layouts
from ir.examples.quantized_matmul import quantized_matmul
from ir.instructions import Dot, ForRange, If, Instruction
from ir.placement import dot_is_thread_local
from ir.program import Program


def _dots(body: tuple[Instruction, ...]) -> list[Dot]:
    found = []
    for instruction in body:
        if isinstance(instruction, Dot):
            found.append(instruction)
        elif isinstance(instruction, (ForRange, If)):
            found += _dots(instruction.body)
    return found


def _only_dot(program: Program) -> Dot:
    (dot,) = _dots(program.body)
    return dot


@pytest.mark.parametrize(
    ("num_threads", "block_m", "block_n", "inner_k", "warps"),
    [
        (32, 16, 8, 16, (1, 1)),
        (64, 32, 64, 32, (1, 2)),
        (128, 64, 64, 16, (2, 2)),
        (128, 64, 64, 32, (2, 2)),
        (256, 128, 128, 32, (2, 4)),
    ],
)
def test_mma_dot_layouts_equal_the_backend_mma_operand_layouts(
    num_threads: int, block_m: int, block_n: int, inner_k: int, warps: tuple[int, int]
) -> None:
    expected = mma_operand_layouts(*warps, block_m, block_n, inner_k)
    assert mma_dot_layouts(num_threads, block_m, block_n, inner_k) == expected


@pytest.mark.parametrize(
    "program",
    [
        matmul(tensor_cores=True),
        matmul(tensor_cores=True, inner_k=32),
        quantized_matmul(dtypes.u4, tensor_cores=True),
        quantized_matmul(dtypes.f6e3m2, group_size=32, tensor_cores=True),
    ],
    ids=["matmul", "matmul_k32", "quantized_u4", "quantized_f6e3m2"],
)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_plan_mma_plans_the_tensor_core_examples(program: Program, arch: str) -> None:
    dot = _only_dot(program)
    plan = plan_mma(dot, arch)
    assert plan is not None
    # 2 x 2 warps, each 2 x 4 accumulator tiles of 16 x 8, one mma per tile and k step of 16.
    assert plan.c_blocks == 8
    assert plan.k_steps == dot.a.shape[1] // 16
    assert len(plan.calls) == plan.c_blocks * plan.k_steps
    assert not dot_is_thread_local(dot)


@pytest.mark.parametrize("program", [matmul(), quantized_matmul()], ids=["matmul", "quantized"])
def test_plan_mma_declines_the_simt_examples(program: Program) -> None:
    dot = _only_dot(program)
    assert plan_mma(dot, "sm_80") is None
    assert dot_is_thread_local(dot)

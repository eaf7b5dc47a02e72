"""The quantized matmul on the GPU against the reference interpreter and against torch.

- Every weight type of the issue (u1..u8, i1..i8, f4e2m1, f6e3m2), on small shapes with partial
  tiles, through `backend.compile` (the SIMT dot): bit for bit equal to `ir.run_reference`.
- One anchor shape (u4, group 128) within f16 accumulation tolerance of dequantize-then-matmul
  in torch (cuBLAS).
- The tensor-core path: a matmul whose dot has mma operand layouts (`mma_operand_layouts`) and
  whose operands come from shared memory through ldmatrix-shaped loads, within the tensor core's
  rounding of the interpreter (whose dot sums k sequentially in float32); the IR's dot is
  warp-collective, so the fragments a warp holds together are valid operands.

All tests need torch and a CUDA device (marked `gpu`).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import backend
from backend.tensor_core import mma_operand_layouts
from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.examples.quantized_matmul import quantized_matmul
from ir.program import Program
from layout_algebra import GlobalLayout, shared_row_major, shared_row_major_swizzle

pytestmark = pytest.mark.gpu

WEIGHT_TYPES = [
    *(dtypes.from_name(f"u{bits}") for bits in range(1, 9)),
    *(dtypes.from_name(f"i{bits}") for bits in range(1, 9)),
    dtypes.f4e2m1,
    dtypes.f6e3m2,
]
BLOCK = 64


def _torch():
    return pytest.importorskip("torch")


def _to_device(array: np.ndarray):
    """A CUDA tensor holding the bytes of `array` (uint16 codes as int16)."""
    torch = _torch()
    if array.dtype == np.uint16:
        array = array.view(np.int16)
    return torch.from_numpy(np.ascontiguousarray(array)).cuda()


def _inputs(
    weight: DataType, m: int, n: int, k: int, group_size: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(a f16 (m, k), packed weight codes, scales f16 (groups, n), the codes (k, n))."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    codes = rng.integers(0, 1 << weight.nbits, (k, n))
    scales = rng.uniform(0.5, 1.5, (math.ceil(k / group_size), n)) / 2 ** (weight.nbits - 1)
    return a, dtypes.pack(codes.ravel(), weight), scales.astype(np.float16), codes


def _run_both(
    program: Program, weight: DataType, m: int, n: int, k: int, group_size: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(GPU result, interpreter result) of the quantized matmul, both f16 (m, n)."""
    torch = _torch()
    a, packed, scales, _ = _inputs(weight, m, n, k, group_size, seed)
    grid = (math.ceil(n / BLOCK), math.ceil(m / BLOCK))
    expected = np.zeros((m, n), dtype=np.float16)
    run_reference(program, m, n, k, a, packed, scales, expected, grid=grid)
    kernel = backend.compile(program)
    out = torch.zeros((m, n), dtype=torch.float16, device="cuda")
    kernel(m, n, k, _to_device(a), _to_device(packed), _to_device(scales), out, grid=grid)
    torch.cuda.synchronize()
    return out.cpu().numpy(), expected


@pytest.mark.parametrize("weight", WEIGHT_TYPES, ids=str)
def test_gpu_quantized_matmul_equals_interpreter(weight: DataType) -> None:
    program = quantized_matmul(weight, group_size=32)
    # 80 rows and 136 columns leave partial tiles in both directions; k = 96 is 3 k-tiles and
    # 3 scale groups.
    actual, expected = _run_both(program, weight, 80, 136, 96, 32, seed=weight.nbits)
    mismatch = np.argwhere(actual.view(np.uint16) != expected.view(np.uint16))
    assert mismatch.size == 0, f"first mismatch at {tuple(mismatch[0])} of {len(mismatch)}"


def test_gpu_quantized_matmul_anchor_against_torch() -> None:
    torch = _torch()
    weight, m, n, k, group_size = dtypes.u4, 64, 256, 512, 128
    program = quantized_matmul(weight, group_size=group_size)
    actual, _ = _run_both(program, weight, m, n, k, group_size, seed=11)
    a, _, scales, codes = _inputs(weight, m, n, k, group_size, seed=11)
    values = weight.decode(codes.ravel()).reshape(k, n).astype(np.float32)
    dequantized = (values * np.repeat(scales.astype(np.float32), group_size, 0)).astype(np.float16)
    reference = torch.matmul(_to_device(a), _to_device(dequantized))
    reference = reference.cpu().numpy().astype(np.float64)
    scale = np.abs(a.astype(np.float64)) @ np.abs(dequantized.astype(np.float64))
    # Both round each product's sum in f32 and the result to f16: within an f16 ulp or two of
    # the magnitude.
    error = np.abs(actual.astype(np.float64) - reference)
    assert np.all(error <= 2.0**-9 * (scale + np.abs(reference)))


def _mma_matmul(dtype: DataType) -> Program:
    """c (f32) = a @ b of f16 or bf16 row-major inputs, 64 x 64 tiles by 4 warps, k-tiles of
    32 through shared memory (a swizzled), the dot on mma operand layouts."""
    a_layout, b_layout, c_layout = mma_operand_layouts(2, 2, BLOCK, BLOCK, 32)
    with ProgramBuilder("mma_matmul", 128) as bld:
        m, n, k = bld.int_param("m"), bld.int_param("n"), bld.int_param("k")
        a, b = bld.array_param("a", dtype), bld.array_param("b", dtype)
        c = bld.array_param("c", dtypes.f32)
        a_view = bld.global_view(a, dtype, GlobalLayout((m, k), (k, 1)))
        b_view = bld.global_view(b, dtype, GlobalLayout((k, n), (n, 1)))
        c_view = bld.global_view(c, dtypes.f32, GlobalLayout((m, n), (n, 1)))
        a_shared = bld.shared_tensor(dtype, shared_row_major_swizzle(BLOCK, 32, element_bits=16))
        b_shared = bld.shared_tensor(dtype, shared_row_major(32, BLOCK))
        row0, col0 = bld.block_y * BLOCK, bld.block_x * BLOCK
        accumulator = bld.register_tensor(dtypes.f32, c_layout, 0.0)
        with bld.for_range((k + 31) // 32) as kt:
            bld.copy_async(a_shared, a_view, [row0, kt * 32])
            bld.copy_async(b_shared, b_view, [kt * 32, col0])
            bld.copy_async_commit()
            bld.copy_async_wait(0)
            bld.sync()
            a_tile = bld.load_shared(a_shared, a_layout)
            b_tile = bld.load_shared(b_shared, b_layout)
            bld.assign(accumulator, bld.dot(a_tile, b_tile, accumulator))
            bld.sync()
        bld.store_global(c_view, accumulator, [row0, col0])
    return bld.program()


@pytest.mark.parametrize("dtype", [dtypes.f16, dtypes.bf16], ids=str)
def test_gpu_mma_matmul_within_tolerance_of_interpreter(dtype: DataType) -> None:
    torch = _torch()
    program = _mma_matmul(dtype)
    m, n, k = 80, 128, 96
    rng = np.random.default_rng(5)
    a = dtype.encode(rng.uniform(-2, 2, m * k).astype(np.float32)).astype(np.uint16)
    b = dtype.encode(rng.uniform(-2, 2, k * n).astype(np.float32)).astype(np.uint16)
    grid = (math.ceil(n / BLOCK), math.ceil(m / BLOCK))
    expected = np.zeros((m, n), dtype=np.float32)
    run_reference(program, m, n, k, a, b, expected, grid=grid)
    kernel = backend.compile(program)
    assert "mma.sync.aligned.m16n8k16" in kernel.source and "ldmatrix" in kernel.source
    out = torch.zeros((m, n), dtype=torch.float32, device="cuda")
    kernel(m, n, k, _to_device(a), _to_device(b), out, grid=grid)
    torch.cuda.synchronize()
    # The tensor core adds 16 exact products per step in its own order: a few float32 ulps of
    # the largest partial sum (|a b| <= 4, k = 96).
    np.testing.assert_allclose(out.cpu().numpy(), expected, rtol=0, atol=4e-3)

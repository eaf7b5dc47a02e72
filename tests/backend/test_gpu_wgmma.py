"""wgmma against mma.sync on the same programs, on an sm_90a GPU (marked `gpu`).

The f16 matmul example's warpgroup forms (`ir.examples.matmul(wgmma=True)`), compiled twice for
the GPU: as `backend.wgmma` plans them (``wgmma.mma_async`` reading both operands from shared
memory) and with ``wgmma=False`` (``mma.sync`` with ldmatrix loads). At a whole tile and at a
shape with partial tiles in m, n and k, each result is within f32-accumulation rounding of a
float32 matmul of the same f16 inputs, and the two paths within that rounding of each other.
The forms whose ring is ordered for a dot in flight (``overlap_dot``) run each k-tile's wgmma on
into the next (`backend.wgmma_pipeline`). The register-A form (a dot whose a is in registers and
b in a shared tile) is compared the same way. Skipped on GPUs other than sm_90.
"""

from __future__ import annotations

import numpy as np
import pytest

import backend
from backend.wgmma import WgmmaPlan
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.examples.matmul import matmul, wgmma_dot_layouts
from ir.program import Program
from layout_algebra import GlobalLayout, shared_row_major_swizzle

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

FORMS = {
    "1 warpgroup 64x64x64": {"block_k": 64, "stages": 2},
    "2 warpgroups 128x128x64": {
        "num_threads": 256,
        "block_m": 128,
        "block_n": 128,
        "block_k": 64,
        "stages": 3,
    },
    "1 warpgroup 128x256x64": {"block_m": 128, "block_n": 256, "block_k": 64, "stages": 2},
    # The ring ordered for a dot in flight: each k-tile's wgmma runs on into the next.
    "2 warpgroups 128x128x64 in flight": {
        "num_threads": 256,
        "block_m": 128,
        "block_n": 128,
        "block_k": 64,
        "stages": 4,
        "overlap_dot": True,
    },
    "1 warpgroup 64x64x64 in flight": {"block_k": 64, "stages": 3, "overlap_dot": True},
}
TOLERANCE = 2e-2
"""Largest absolute difference for sums of up to 328 products of numbers below 1 in magnitude,
rounded to f16 at the end (both paths accumulate in f32, in different orders)."""


def _require_sm90() -> None:
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        pytest.skip(f"wgmma needs sm_90a; this GPU is sm_{major}{minor}")


def _plan_kinds(kernel: backend.CompiledKernel) -> list[str]:
    return [type(plan).__name__ for plan in kernel.plans]


@pytest.mark.parametrize("shape", ["whole tile", "partial tiles"])
@pytest.mark.parametrize("form", FORMS)
def test_wgmma_and_mma_sync_agree_on_the_matmul_example(form: str, shape: str) -> None:
    _require_sm90()
    options = FORMS[form]
    block_m, block_n = options.get("block_m", 64), options.get("block_n", 64)
    m, n, k = (block_m, block_n, 64) if shape == "whole tile" else (200, 264, 328)
    generator = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = (torch.rand((m, k), device="cuda", generator=generator) * 2 - 1).half()
    b = (torch.rand((k, n), device="cuda", generator=generator) * 2 - 1).half()
    reference = a.float() @ b.float()
    grid = (-(-n // block_n), -(-m // block_m))
    results = {}
    for wgmma in (True, False):
        kernel = backend.compile(matmul(wgmma=True, **options), wgmma=wgmma)
        assert _plan_kinds(kernel)[-1] == ("WgmmaPlan" if wgmma else "MmaPlan")
        c = torch.zeros((m, n), device="cuda", dtype=torch.float16)
        kernel(m, n, k, a, b, c, grid=grid)
        torch.cuda.synchronize()
        results[wgmma] = c.float()
        error = float((results[wgmma] - reference).abs().max())
        assert error < TOLERANCE, f"{form} {shape} wgmma={wgmma}: max error {error:.3g}"
    between = float((results[True] - results[False]).abs().max())
    assert between < TOLERANCE, f"{form} {shape}: the two paths differ by {between:.3g}"


def _register_a_dot() -> Program:
    """One warpgroup: c (64 x 64, f32) = a @ b, a (64 x 64) read from global memory straight
    into the wgmma register-A fragment, b copied into a swizzled shared tile and read from it."""
    f16, f32 = dtypes.f16, dtypes.f32
    a_layout, b_layout, c_layout = wgmma_dot_layouts(128, 64, 64, 64)
    with ProgramBuilder("register_a_dot", 128) as bld:
        a, b, c = (bld.array_param(name, t) for name, t in (("a", f16), ("b", f16), ("c", f32)))
        a_view = bld.global_view(a, f16, GlobalLayout((64, 64), (64, 1)))
        b_view = bld.global_view(b, f16, GlobalLayout((64, 64), (64, 1)))
        c_view = bld.global_view(c, f32, GlobalLayout((64, 64), (64, 1)))
        b_shared = bld.shared_tensor(f16, shared_row_major_swizzle(64, 64, element_bits=16))
        bld.copy_async(b_shared, b_view, [0, 0])
        bld.copy_async_commit()
        a_tile = bld.load_global(a_view, [0, 0], a_layout)
        bld.copy_async_wait(0)
        bld.sync()
        b_tile = bld.load_shared(b_shared, b_layout, [0, 0])
        acc = bld.register_tensor(f32, c_layout, 0.0)
        bld.store_global(c_view, bld.dot(a_tile, b_tile, acc), [0, 0])
    return bld.program()


def test_wgmma_with_a_in_registers_agrees_with_mma_sync() -> None:
    _require_sm90()
    generator = torch.Generator(device="cuda").manual_seed(5)
    a = (torch.rand((64, 64), device="cuda", generator=generator) * 2 - 1).half()
    b = (torch.rand((64, 64), device="cuda", generator=generator) * 2 - 1).half()
    reference = a.float() @ b.float()
    results = {}
    for wgmma in (True, False):
        kernel = backend.compile(_register_a_dot(), wgmma=wgmma)
        plans = [plan for plan in kernel.plans if isinstance(plan, WgmmaPlan)]
        assert len(plans) == int(wgmma) and all(plan.a is None for plan in plans)
        c = torch.zeros((64, 64), device="cuda", dtype=torch.float32)
        kernel(a, b, c, grid=1)
        torch.cuda.synchronize()
        results[wgmma] = c
        error = float((c - reference).abs().max())
        assert error < 1e-3, f"wgmma={wgmma}: max error {error:.3g}"
    assert float((results[True] - results[False]).abs().max()) < 1e-3
    assert np.isfinite(results[True].cpu().numpy()).all()

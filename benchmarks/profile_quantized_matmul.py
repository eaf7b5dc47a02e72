"""Launch our quantized matmul once per kernel variant, for a profiler such as Nsight Compute.

    ncu --kernel-name regex:quantized --section SpeedOfLight --section Occupancy \
        --section WarpStateStats python benchmarks/profile_quantized_matmul.py --m 1

Random inputs of one (M, K, N) point of `benchmarks/quantized_matmul.py`; each variant (SIMT dot,
mma.sync) is launched once after a warm-up launch and checked against torch.matmul.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch

import backend
from ir import dtypes
from ir.examples.quantized_matmul import quantized_matmul

BLOCK_M = BLOCK_N = 64
GROUP_SIZE = 128


def main(argv: list[str] | None = None) -> int:
    """Run each variant on one random problem; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=1)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--n", type=int, default=12288)
    parser.add_argument("--kernels", default="simt,mma")
    options = parser.parse_args(argv)
    m, k, n = options.m, options.k, options.n
    device = torch.device("cuda")
    weight = dtypes.i4
    codes = torch.randint(0, 16, (k * n,), device=device, dtype=torch.int32)
    shifts = (torch.arange(k * n, device=device) % 2) * 4
    packed = (codes << shifts).reshape(-1, 2).sum(dim=1).to(torch.uint8)
    scales = (torch.rand((math.ceil(k / GROUP_SIZE), n), device=device) * 0.1).half()
    values = torch.tensor(weight.decode(torch.arange(16).numpy()), device=device)[codes.long()]
    dequantized = (
        values.reshape(k, n) * scales.float().repeat_interleave(GROUP_SIZE, 0)[:k]
    ).half()
    a = (torch.rand((m, k), device=device) * 2 - 1).half()
    expected = a.float() @ dequantized.float()
    grid = (math.ceil(n / BLOCK_N), math.ceil(m / BLOCK_M))
    for variant in options.kernels.split(","):
        program = quantized_matmul(weight, group_size=GROUP_SIZE, tensor_cores=variant == "mma")
        kernel = backend.compile(program)
        out = torch.zeros((m, n), device=device, dtype=torch.float16)
        for _ in range(2):
            kernel(m, n, k, a, packed, scales, out, grid=grid)
        torch.cuda.synchronize()
        error = float((out.float() - expected).norm() / expected.norm())
        print(
            f"{variant}: registers {kernel.resources.registers_per_thread}, "
            f"shared {kernel.shared_bytes} B, relative error {error:.2e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How fast the reference interpreter runs the quantized matmul tile program on the CPU.

Runs `ir.examples.quantized_matmul` (u4 weights, group size 128, 64 x 64 x 32 tiles, 128
threads) at 256 x 256 x 512 once to warm the layout caches, then times `--repeat` runs and checks
the result against dequantize-then-matmul in float64. The interpreter is meant to take under two
seconds per run at this size; the script exits with status 1 when the best run is slower than
`--limit` seconds or the result is wrong.

Usage: ``python benchmarks/interpreter_speed.py [--repeat N] [--limit SECONDS]``
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from ir import dtypes, run_reference
from ir.examples.quantized_matmul import quantized_matmul

M, N, K = 256, 256, 512
GROUP_SIZE = 128


def main(argv: list[str] | None = None) -> int:
    """Time the runs, print one line per run and a summary; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs (default 3)")
    parser.add_argument("--limit", type=float, default=2.0, help="seconds allowed (default 2)")
    options = parser.parse_args(argv)

    weight_dtype = dtypes.u4
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(np.float16)
    codes = rng.integers(0, 1 << weight_dtype.nbits, (K, N))
    weights = dtypes.pack(codes, weight_dtype)
    scales = (rng.random((K // GROUP_SIZE, N)) * 0.1).astype(np.float16)
    program = quantized_matmul(weight_dtype, group_size=GROUP_SIZE)
    grid = (N // 64, M // 64)

    c = np.zeros((M, N), dtype=np.float16)
    run_reference(program, M, N, K, a, weights, scales, c, grid=grid)
    timings = []
    for run in range(options.repeat):
        c = np.zeros((M, N), dtype=np.float16)
        start = time.perf_counter()
        run_reference(program, M, N, K, a, weights, scales, c, grid=grid)
        timings.append(time.perf_counter() - start)
        print(f"run {run}: {timings[-1]:.3f} s")

    dequantized = codes.astype(np.float64) * np.repeat(scales.astype(np.float64), GROUP_SIZE, 0)
    reference = a.astype(np.float64) @ dequantized
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(dequantized)
    error = np.abs(c.astype(np.float64) - reference)
    correct = bool(np.all(error <= 2.0**-10 * (magnitude + np.abs(reference))))
    best = min(timings)
    print(
        f"quantized matmul {M}x{N}x{K} (u4, group {GROUP_SIZE}): best {best:.3f} s, "
        f"limit {options.limit:.1f} s, result {'correct' if correct else 'WRONG'}"
    )
    return 0 if correct and best <= options.limit else 1


if __name__ == "__main__":
    sys.exit(main())

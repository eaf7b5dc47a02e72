"""Launch the decode matmul once per configuration, for a profiler such as Nsight Compute.

    ncu --clock-control none --kernel-name regex:register_dequant \
        --section SpeedOfLight --section Occupancy --section WarpStateStats \
        python benchmarks/profile_quantized_matmul.py --weights i2 --k 8192 --n 57344 \
        --config warps=4,units_k=8,split=4 --config warps=4,units_k=8,split=4,depth=2

Random inputs of one (weight type, K, N, M) point of `benchmarks/quantized_matmul.py`; each
`--config` (fields of `ir.examples.register_dequant_matmul.DequantConfig`, the rest default; none
given: the autotuner's choice, tuned here if no record exists) is compiled, checked against
torch (`backend.decode_matmul.DecodeMeasure`'s tolerance) and launched `--launches` times. It
prints each configuration's registers per thread, shared bytes and relative error.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import torch

from backend.decode_matmul import DecodeMatmul, DecodeProblem, decode_inputs, relative_error
from ir import dtypes
from ir.examples.register_dequant_matmul import DequantConfig


def parse_config(text: str) -> DequantConfig:
    """``"warps=4,units_k=8"`` -> DequantConfig(warps=4, units_k=8); the bool fields
    (``fused_sum``, ``late_scale``, ``weights_as_a``) take 0/1."""
    fields: dict[str, object] = {}
    known = {f.name: f for f in dataclasses.fields(DequantConfig)}
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        if name not in known or not value.isdigit():
            raise SystemExit(f"--config {text!r}: {item!r} is not a DequantConfig field=int")
        fields[name] = bool(int(value)) if known[name].type == "bool" else int(value)
    return DequantConfig(**fields)


def main(argv: list[str] | None = None) -> int:
    """Run each configuration on one random problem; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default="i4")
    parser.add_argument("--m", type=int, default=1)
    parser.add_argument("--k", type=int, default=8192)
    parser.add_argument("--n", type=int, default=57344)
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--config", action="append", default=[])
    parser.add_argument("--launches", type=int, default=1)
    options = parser.parse_args(argv)
    problem = DecodeProblem(
        dtypes.from_name(options.weights), options.group_size, k=options.k, n=options.n
    )
    inputs = decode_inputs(problem, options.m)
    operations = [DecodeMatmul(problem, parse_config(text)) for text in options.config]
    if not operations:
        operations = [DecodeMatmul.tuned(problem, options.m)]
    for operation in operations:
        arguments = (inputs["a"], inputs["packed"], inputs["scales"], inputs["zeros"])
        out = operation(*arguments)
        torch.cuda.synchronize()
        error = relative_error(out, inputs["expected"])
        for _ in range(options.launches - 1):
            operation(*arguments, out)
        torch.cuda.synchronize()
        kernel = operation.matmul_kernel
        print(
            f"{options.weights} {options.k}x{options.n} m={options.m} {operation.config}: "
            f"registers {kernel.resources.registers_per_thread}, shared {kernel.shared_bytes} B, "
            f"relative error {error:.2e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Launch the quantized matmul once per configuration, for a profiler such as Nsight Compute.

    ncu --clock-control none --kernel-name regex:register_dequant \
        --section SpeedOfLight --section Occupancy --section WarpStateStats \
        python benchmarks/profile_quantized_matmul.py --weights i2 --k 8192 --n 57344 \
        --config warps=4,units_k=8,split=4 --config warps=4,units_k=8,split=4,depth=2

    ncu --clock-control none --kernel-name regex:wgmma_dequant --section SpeedOfLight \
        python benchmarks/profile_quantized_matmul.py --m 256 --k 8192 --n 8192 \
        --prefill split=2 --prefill block_m=128

With ``--section SourceCounters -o REPORT``, ``benchmarks/stall_samples.py`` reads the report's
source page (warp stall samples by instruction and reason); ``--cubins DIR`` writes each
configuration's CUBIN there (``kernel<i>.cubin``), from which it also splits the samples by
where they fall: the k loop, other loops (a producer's), or outside any loop.

Random inputs of one (weight type, K, N, M) point of `benchmarks/quantized_matmul.py`; each
`--config` (fields of `ir.examples.register_dequant_matmul.DequantConfig`, the rest default; none
given: the autotuner's choice, tuned here if no record exists) is compiled, checked against
torch (`backend.decode_matmul.DecodeMeasure`'s tolerance) and launched `--launches` times. Each
`--prefill` (fields of `ir.examples.wgmma_dequant_matmul.WgmmaDequantConfig` over the prefill
kernel's 128 x 256 tile, `backend.batch_matmul.BATCH_PATHS[3]`; an empty one is that tile)
does the same for the prefill kernel (`backend.batch_matmul.BatchMatmul`); given alone, no
decode configuration runs. It prints each configuration's registers per thread, shared bytes
and relative error.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

from backend.batch_matmul import BATCH_PATHS, BatchMatmul
from backend.decode_matmul import DecodeMatmul, DecodeProblem, decode_inputs, relative_error
from ir import dtypes
from ir.examples.register_dequant_matmul import DequantConfig
from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig

PREFILL_PATH = BATCH_PATHS[3]
"""The batch path that `--prefill` fields override: the 128 x 256 tile, 128-deep k-tiles."""


def parse_fields(text: str, config_type: type, option: str) -> dict[str, object]:
    """``"warps=4,units_k=8"`` -> {"warps": 4, "units_k": 8} for the dataclass `config_type`
    (`option` names the command-line option in errors); its bool fields take 0/1 or true/false,
    as the timed benchmark's ``--options`` do."""
    fields: dict[str, object] = {}
    known = {f.name: f for f in dataclasses.fields(config_type)}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        flag = name in known and known[name].type == "bool"
        if flag and value.lower() in ("true", "false"):
            fields[name] = value.lower() == "true"
            continue
        if name not in known or not value.isdigit() or (flag and value not in ("0", "1")):
            raise SystemExit(
                f"{option} {text!r}: {item!r} is not a {config_type.__name__} field=int "
                "(a bool field: 0, 1, true or false)"
            )
        fields[name] = bool(int(value)) if flag else int(value)
    return fields


def parse_config(text: str) -> DequantConfig:
    """``"warps=4,units_k=8"`` -> DequantConfig(warps=4, units_k=8); the bool fields
    (``fused_sum``, ``late_scale``, ``weights_as_a``, ...) take 0/1 or true/false."""
    return DequantConfig(**parse_fields(text, DequantConfig, "--config"))  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    """Run each configuration on one random problem; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default="i4")
    parser.add_argument("--m", type=int, default=1)
    parser.add_argument("--k", type=int, default=8192)
    parser.add_argument("--n", type=int, default=57344)
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--config", action="append", default=[])
    parser.add_argument("--prefill", action="append", default=[])
    parser.add_argument("--launches", type=int, default=1)
    parser.add_argument("--cubins", type=Path, help="a folder for each kernel's CUBIN")
    options = parser.parse_args(argv)
    problem = DecodeProblem(
        dtypes.from_name(options.weights), options.group_size, k=options.k, n=options.n
    )
    inputs = decode_inputs(problem, options.m)
    operations: list[DecodeMatmul | BatchMatmul]
    operations = [DecodeMatmul(problem, parse_config(text)) for text in options.config]
    for text in options.prefill:
        fields = parse_fields(text, WgmmaDequantConfig, "--prefill")
        operations.append(BatchMatmul(problem, {**PREFILL_PATH, **fields}))
    if not operations:
        operations = [DecodeMatmul.tuned(problem, options.m)]
    for index, operation in enumerate(operations):
        arguments = (inputs["a"], inputs["packed"], inputs["scales"], inputs["zeros"])
        out = operation(*arguments)
        torch.cuda.synchronize()
        error = relative_error(out, inputs["expected"])
        for _ in range(options.launches - 1):
            operation(*arguments, out=out)
        torch.cuda.synchronize()
        if isinstance(operation, BatchMatmul):
            kernel, described = operation.kernel, operation.prefill
        else:
            kernel, described = operation.matmul_kernel, operation.config
        if options.cubins is not None:
            options.cubins.mkdir(parents=True, exist_ok=True)
            (options.cubins / f"kernel{index}.cubin").write_bytes(kernel.cubin)
        print(
            f"{options.weights} {options.k}x{options.n} m={options.m} {described}: "
            f"registers {kernel.resources.registers_per_thread}, shared {kernel.shared_bytes} B, "
            f"relative error {error:.2e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A chain of quantized layers at M = 1, with and without programmatic dependent launch.

Decoding runs layer after layer: each kernel's activations are the previous kernel's output,
so every launch waits for the one before it, and a small layer pays its launch and its ramp-up
again and again. With `DequantConfig.programmatic_launch` each decode kernel is a link of a
chain (`ProgramBuilder.programmatic_launch`): it starts while the kernel before it finishes,
loads its first weights, and waits (``griddepcontrol.wait``) only before reading activations.

For each weight type, `--layers` square (`--size` x `--size`) layers with group size 128 run
as one chain at M = 1, timed whole (the protocol of ``benchmarks/quantized_matmul.py``:
`backend.timing.median_us`, a 512 MiB read-flush and a sleep kernel before each timed run,
CUDA events, the median of `--repeats`):

- ours: `DecodeMatmul` with the autotuner's configuration for M = 1, as ordinary launches, as
  a programmatic chain whose kernels let the next start at entry, and as one whose kernels let
  it start after their k loop (`DequantConfig.late_trigger`); the same kernel otherwise: the
  chains' outputs must be equal bit for bit, and close to cuBLAS's on the same dequantized
  weights. The first two also as one layer alone, behind the sleep kernel, where nothing can
  overlap: what the link's code and launch cost by themselves;
- cuBLAS: ``torch.matmul`` on the dequantized f16 weights, layer after layer;
- Humming (``humming-kernels``) for the signed integer and float types it names, layer after
  layer.

Each layer's scales are divided by the power of two nearest its gain (the root mean square of
its output in float32 on activations of order one), so that activations stay of order one along
the chain: signed weights of few bits have a mean far from zero, and a fixed divisor lets the
chain overflow. Results go
to ``<output>/quantized_matmul_chain.json`` and ``.md``.

    python benchmarks/quantized_matmul_chain.py [--weights i4,i2] [--layers 8] [--size 8192]
        [--repeats 30] [--output benchmarks/results]
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from quantized_matmul import humming_layer  # the sibling script
from records import write_record  # a sibling module of the benchmarks

from backend.decode_matmul import (
    DecodeMatmul,
    DecodeMeasure,
    DecodeProblem,
    decode_inputs,
    relative_error,
)
from backend.timing import flush_buffer, median_us
from ir import dtypes

GROUP_SIZE = 128


@dataclass
class ChainPoint:
    """One chain: its weight type, layers and size, each variant's median microseconds (None
    when it did not run, with the reason in `notes`) and our configuration."""

    weight: str
    layers: int
    size: int
    ours_us: float
    ours_chained_us: float
    ours_late_trigger_us: float
    ours_single_us: float
    ours_chained_single_us: float
    cublas_us: float
    humming_us: float | None
    config: dict[str, object]
    notes: str


def run_chain(operations: list[DecodeMatmul], layers: list[dict], a: torch.Tensor):
    """A callable running the chain of decode `operations` on `a` (outputs kept per layer)."""
    outputs = [
        torch.empty((1, op.problem.n), dtype=torch.float16, device=a.device) for op in operations
    ]

    def run() -> torch.Tensor:
        x = a
        for operation, layer, out in zip(operations, layers, outputs):
            x = operation(x, layer["packed"], layer["scales"], None, out)
        return x

    return run


def measure_weight(weight_name: str, count: int, size: int, repeats: int, flush) -> ChainPoint:
    weight = dtypes.from_name(weight_name)
    problem = DecodeProblem(weight, GROUP_SIZE, size, size)
    layers = []
    x = None
    for index in range(count):
        inputs = decode_inputs(problem, 1, seed=index)
        x = inputs["a"].float() if x is None else x
        y = x @ inputs["dequantized"].float()
        divisor = 2.0 ** round(math.log2(max(y.pow(2).mean().sqrt().item(), 2.0**-10)))
        inputs["scales"] = inputs["scales"] / divisor  # a power of two
        inputs["dequantized"] = inputs["dequantized"] / divisor
        x = y / divisor
        layers.append(inputs)
    measure = DecodeMeasure(problem, 1, repeats=repeats, flush=flush)
    plain = DecodeMatmul.tuned(problem, 1, measure=measure)
    chained = DecodeMatmul(problem, replace(plain.config, programmatic_launch=True))
    late = DecodeMatmul(problem, replace(chained.config, late_trigger=True))
    a = layers[0]["a"]
    ours = run_chain([plain] * count, layers, a)
    ours_chained = run_chain([chained] * count, layers, a)
    ours_late = run_chain([late] * count, layers, a)
    first = ours()
    for name, other in (("programmatic", ours_chained()), ("late-trigger", ours_late())):
        torch.cuda.synchronize()
        if not torch.equal(first.view(torch.int16), other.view(torch.int16)):
            raise RuntimeError(f"{weight_name}: the {name} chain's output differs")

    def cublas() -> torch.Tensor:
        x = a
        for layer in layers:
            x = torch.matmul(x, layer["dequantized"])
        return x

    error = relative_error(first, cublas())
    if not error < 2e-2:
        raise RuntimeError(f"{weight_name}: the chain differs from cuBLAS's by {error:.2e}")
    point = ChainPoint(
        weight=weight_name,
        layers=count,
        size=size,
        ours_us=median_us(ours, flush, repeats),
        ours_chained_us=median_us(ours_chained, flush, repeats),
        ours_late_trigger_us=median_us(ours_late, flush, repeats),
        ours_single_us=median_us(run_chain([plain], layers[:1], a), flush, repeats),
        ours_chained_single_us=median_us(run_chain([chained], layers[:1], a), flush, repeats),
        cublas_us=median_us(cublas, flush, repeats),
        humming_us=None,
        config=asdict(plain.config),
        notes="",
    )
    humming = humming_chain(weight, layers)
    if isinstance(humming, str):
        point.notes = humming
    else:

        def peer() -> torch.Tensor:
            x = a
            for layer in humming:
                x = layer(x)
            return x

        point.humming_us = median_us(peer, flush, repeats)
    return point


def humming_chain(weight, layers: list[dict]):
    """Humming layers of the same dequantized weights (made as `quantized_matmul.py` makes
    them), or the reason there are none."""
    chain = []
    for layer in layers:
        made, note = humming_layer(weight, layer["dequantized"].to(torch.float16))
        if made is None:
            return note
        chain.append(made)
    return chain


def table(points: list[ChainPoint]) -> str:
    lines = [
        "| weight | layers | K = N | ours us | ours, chained us | gain "
        "| chained, late trigger us | gain | one layer us | one layer, chained us | cuBLAS us "
        "| Humming us | config |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for p in points:
        humming = "n/a" if p.humming_us is None else f"{p.humming_us:.1f}"
        config = " ".join(f"{k}={v}" for k, v in p.config.items())
        lines.append(
            f"| {p.weight} | {p.layers} | {p.size} | {p.ours_us:.1f} | {p.ours_chained_us:.1f} "
            f"| {p.ours_us / p.ours_chained_us:.2f}x | {p.ours_late_trigger_us:.1f} "
            f"| {p.ours_us / p.ours_late_trigger_us:.2f}x | {p.ours_single_us:.1f} "
            f"| {p.ours_chained_single_us:.1f} | {p.cublas_us:.1f} | {humming} | {config} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (see the module docstring); return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default="i4", help="weight types, comma-separated")
    parser.add_argument("--layers", type=int, default=8, help="layers in the chain")
    parser.add_argument("--size", type=int, default=8192, help="K = N of every layer")
    parser.add_argument("--repeats", type=int, default=30, help="timed runs (>= 30)")
    parser.add_argument("--output", default="benchmarks/results", help="directory of results")
    options = parser.parse_args(argv)
    if options.repeats < 30 or options.layers < 1:
        parser.error("--repeats must be at least 30 and --layers at least 1")
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    flush = flush_buffer(torch.device("cuda"))
    points = [
        measure_weight(name.strip(), options.layers, options.size, options.repeats, flush)
        for name in options.weights.split(",")
    ]
    output = Path(options.output)
    write_record(output, "quantized_matmul_chain", points, table(points), repeats=options.repeats)
    print(table(points), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

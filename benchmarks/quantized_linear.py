"""`QuantizedLinear.forward` on the GPU at every batch, against the paths it must never lose to.

For each weight type, each (K, N) of `quantized_matmul.SHAPES` and each batch M, one
`backend.quantized_linear.QuantizedLinear` (group size 128, random codes and scales made on the
GPU, packed once by `from_quantized`) runs its whole `forward` on M rows of f16 activations,
beside, on the same weights and rows:

- dequantize-then-matmul: ``x @ layer.dequantize()``, the weights expanded to f16 at every
  call (by the `ir.examples.dequantize_weights` kernel) and multiplied by cuBLAS (what
  `forward` must never be slower than), and the same with the weights expanded by torch
  operations (`dequantize_with_torch`, what `forward` did above 16 rows before the kernel);
- cuBLAS fp16: ``x @ W`` with W the dequantized f16 weights made once beforehand (the speed of
  an unquantized layer, and the reference of every result);
- Humming (``humming-kernels``) on the same dequantized weights, for the types it names;
- for M <= `DECODE_KERNEL_ROWS`, the register-dequant decode kernel itself
  (`DecodeMatmul.tuned` for M), also above `DECODE_MAX_ROWS`, where `forward` does not take it
  yet: whether it should is what this column says.

`forward` takes the register-dequant decode kernel for M <= `DECODE_MAX_ROWS`, up to
`BATCH_MAX_ROWS` the path `backend.batch_matmul` measures fastest, dequantize-then-matmul or the
prefill kernel (each tuned per M bucket on its first call, then read from the kernel cache
directory), and dequantize-then-matmul above; the `path` column names what it took. Every
result is checked against cuBLAS fp16 before it is timed. Timing is the protocol of
``benchmarks/quantized_matmul.py`` (a 512 MiB read flush and a sleep kernel before each timed
run, CUDA events, the median of `--repeats`), with the runs of a point timed in turns
(`backend.timing.medians_in_turns`: each round times every run once, its order rotated round
by round), so a drift of the GPU's clocks over a point's seconds of timing falls on them all.
Results go to ``<output>/quantized_linear.json`` and ``.md``, the table printed last; the JSON
also keeps, for each point whose operation a cold tuning chose here, that tuning's finalists:
the candidates it timed again in turns, with both times (`tuning_finalists`).

With ``--steady``, the points whose `forward` takes `STEADY_FROM_US` or longer (held by the
card's power at 4096 rows) are also timed back to back: `forward`, cuBLAS fp16 and Humming
launched in blocks of a quarter second (`backend.timing.steady_launches`), in turns,
with the SM clock and board power read during each block (`backend.timing.steady_in_turns`:
the figure of layers run one after another, which the tuner decides such points by). Each
point keeps them in ``steady``, and the Markdown has a second table of them.

    python benchmarks/quantized_linear.py [--weights i4,i8] [--batches 1,16,256,4096]
        [--shapes 8192x57344,4096x12288] [--quick] [--repeats 30] [--steady]
        [--output benchmarks/results]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from quantized_matmul import SHAPES, humming_layer, parse_shapes  # the sibling script
from records import write_record  # a sibling module of the benchmarks

from backend.autotune import m_bucket
from backend.decode_matmul import STEADY_FROM_US, DecodeMatmul, relative_error
from backend.errors import LaunchError
from backend.quantized_linear import BATCH_MAX_ROWS, DECODE_MAX_ROWS, QuantizedLinear
from backend.timing import flush_buffer, medians_in_turns, steady_in_turns, steady_launches
from ir import dtypes
from ir.dtypes import DataType

GROUP_SIZE = 128
BATCHES = [1, 16, 32, 64, 256, 4096]
DECODE_KERNEL_ROWS = 64
"""Batches up to which the decode kernel is timed beside `forward` (its row tilings hold 64)."""
QUICK_BATCHES = [1, 256]
TOLERANCE = 2e-2
"""Largest relative error (Frobenius) of a result against cuBLAS fp16 on the same weights."""


@dataclass
class Point:
    """One (weight type, K, N, M): microseconds of `forward`, of dequantize-then-matmul, of
    cuBLAS fp16 and of Humming (None, with the reason in `notes`, where it did not run), the
    path `forward` took, and `forward`'s ratio to each (their time / ours: above 1 it is
    faster)."""

    weight: str
    k: int
    n: int
    m: int
    path: str
    forward_us: float
    dequantize_matmul_us: float
    torch_dequantize_matmul_us: float
    cublas_us: float
    humming_us: float | None
    decode_kernel_us: float | None
    vs_dequantize_matmul: float
    vs_cublas: float
    vs_humming: float | None
    notes: str
    finalists: list[dict[str, Any]] = field(default_factory=list)
    """The tuning's finalists behind the operation `forward` took (`tuning_finalists`)."""
    steady: dict[str, dict[str, float | None]] = field(default_factory=dict)
    """With ``--steady``, for a long point: each of `STEADY_RUNS`' time a launch back to back
    (``us``), the launches a block, and the SM clock (median and least, MHz) and board power
    (W) read meanwhile (None where none was read)."""


STEADY_RUNS = ("forward", "cuBLAS fp16", "Humming")
"""The runs a long point times back to back with ``--steady`` (those it has)."""


def steady_figures(runs: dict[str, Any], times: dict[str, float]) -> dict[str, dict[str, Any]]:
    """`STEADY_RUNS` of `runs` timed back to back (`steady_in_turns`, blocks of
    `steady_launches` of the fastest's protocol time in `times`): name -> `Point.steady`'s
    figures."""
    chosen = {name: runs[name] for name in STEADY_RUNS if name in runs}
    launches = steady_launches(min(times[name] for name in chosen))
    return {
        name: {**timed.figures(), "launches": launches}
        for name, timed in steady_in_turns(chosen, launches).items()
    }


def tuning_finalists(operation: Any) -> list[dict[str, Any]]:
    """The finalists of the cold tuning that chose `operation` (a `DecodeMatmul` or
    `BatchMatmul`): the record (`Trial.as_record`: its fields, its time one after another and
    its time in turns, back to back where the finalists took a millisecond or more) of each
    candidate timed again in turns, in search-space order. Empty
    when its choice came from a stored record, when one candidate alone was near the fastest,
    or for an operation no tuning made."""
    tuning = getattr(operation, "tuning", None)
    if tuning is None:
        return []
    return [trial.as_record() for trial in tuning.trials if trial.turns_us is not None]


def make_layer(weight: DataType, k: int, n: int, seed: int) -> QuantizedLinear:
    """A `QuantizedLinear` of random codes and scales in [0.5, 1.5) / 2^(b-1), made on the GPU."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    codes = torch.randint(0, 1 << weight.nbits, (k, n), device="cuda", generator=generator)
    scales = torch.rand((k // GROUP_SIZE, n), device="cuda", generator=generator) + 0.5
    scales = scales / 2 ** (weight.nbits - 1)
    return QuantizedLinear.from_quantized(codes, scales, weight, GROUP_SIZE)


def measure(
    layer: QuantizedLinear,
    weight: DataType,
    m: int,
    flush: torch.Tensor,
    repeats: int,
    peer,
    steady: bool = False,
) -> Point:
    """Check every result against cuBLAS fp16, then time each (see the module docstring);
    with `steady`, a point whose `forward` takes `STEADY_FROM_US` or longer back to back too."""
    k, n = layer.in_features, layer.out_features
    generator = torch.Generator(device="cuda").manual_seed(m)
    x = (torch.rand((m, k), device="cuda", generator=generator) * 2 - 1).half()
    dense = layer.dequantize(torch.float16).contiguous()
    reference = torch.matmul(x, dense)
    runs = {
        "forward": lambda: layer(x),
        "dequantize-then-matmul": lambda: torch.matmul(x, layer.dequantize(torch.float16)),
        "torch dequantize-then-matmul": lambda: torch.matmul(
            x, layer.dequantize_with_torch(torch.float16)
        ),
        "cuBLAS fp16": lambda: torch.matmul(x, dense),
    }
    if peer is not None:
        runs["Humming"] = lambda: peer(x)
    if m <= DECODE_KERNEL_ROWS:
        operation = DecodeMatmul.tuned(layer.decode_problem(torch.float16), m, progress=False)
        scales = layer.packed_scales.half()
        zeros = None if layer.packed_zeros is None else layer.packed_zeros.half()
        runs["decode kernel"] = lambda: operation(x, layer.packed_weight, scales, zeros)[:, :n]
    for name, run in runs.items():
        error = relative_error(run(), reference)
        # Humming quantizes the dequantized weights again: its own error comes on top.
        if not error < (5 * TOLERANCE if name == "Humming" else TOLERANCE):
            raise RuntimeError(f"{weight} {k}x{n} M={m}: {name} differs by {error:.2e}")
    try:
        times = medians_in_turns(runs, flush, repeats)
    except LaunchError as error:
        raise RuntimeError(f"{weight} {k}x{n} M={m}: timing: {error}") from error
    humming = times.get("Humming")
    ours = times["forward"]
    figures = steady_figures(runs, times) if steady and ours >= STEADY_FROM_US else {}
    path, finalists = "decode kernel", []
    if m > BATCH_MAX_ROWS:
        path = "dequantize-then-matmul"
    elif m > DECODE_MAX_ROWS:
        batch = layer.batch_ops[m_bucket(m).lo, torch.float16, x.device]
        taken, finalists = batch.path, tuning_finalists(batch)
        path = " ".join(f"{name}={value}" for name, value in taken.items() if name != "path")
        path = taken["path"] + (f" ({path})" if path else "")
    else:
        finalists = tuning_finalists(layer.decode_ops.get((m, torch.float16, x.device)))
    return Point(
        weight=weight.name,
        k=k,
        n=n,
        m=m,
        path=path,
        forward_us=ours,
        dequantize_matmul_us=times["dequantize-then-matmul"],
        torch_dequantize_matmul_us=times["torch dequantize-then-matmul"],
        cublas_us=times["cuBLAS fp16"],
        humming_us=humming,
        decode_kernel_us=times.get("decode kernel"),
        vs_dequantize_matmul=times["dequantize-then-matmul"] / ours,
        vs_cublas=times["cuBLAS fp16"] / ours,
        vs_humming=None if humming is None else humming / ours,
        notes="",
        finalists=finalists,
        steady=figures,
    )


def table(points: list[Point]) -> str:
    lines = [
        "| weight | K | N | M | path | forward us | dequantize + matmul us "
        "| torch dequantize + matmul us | cuBLAS fp16 us | Humming us | decode kernel us "
        "| vs dequantize + matmul | vs cuBLAS | vs Humming | notes |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for p in points:
        humming = "n/a" if p.humming_us is None else f"{p.humming_us:.1f}"
        decode = "n/a" if p.decode_kernel_us is None else f"{p.decode_kernel_us:.1f}"
        versus = "n/a" if p.vs_humming is None else f"{p.vs_humming:.2f}x"
        lines.append(
            f"| {p.weight} | {p.k} | {p.n} | {p.m} | {p.path} | {p.forward_us:.1f} "
            f"| {p.dequantize_matmul_us:.1f} | {p.torch_dequantize_matmul_us:.1f} "
            f"| {p.cublas_us:.1f} | {humming} | {decode} "
            f"| {p.vs_dequantize_matmul:.2f}x | {p.vs_cublas:.2f}x | {versus} | {p.notes} |"
        )
    return "\n".join(lines) + "\n"


def steady_table(points: list[Point]) -> str:
    """The back-to-back figures of the points that have them as a Markdown table ("" when
    none has): each run's time a launch and its clock, and `forward`'s ratios."""
    lines = [
        "| weight | K | N | M | path | launches | forward us (MHz) | cuBLAS fp16 us (MHz) "
        "| Humming us (MHz) | vs cuBLAS | vs Humming |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        if not p.steady:
            continue
        cells = []
        for name in STEADY_RUNS:
            run = p.steady.get(name)
            clock = "" if run is None or run["clock_mhz"] is None else f" ({run['clock_mhz']:.0f})"
            cells.append("n/a" if run is None else f"{run['us']:.1f}{clock}")
        ours = p.steady["forward"]["us"]
        ratios = [
            "n/a" if name not in p.steady else f"{p.steady[name]['us'] / ours:.2f}x"
            for name in STEADY_RUNS[1:]
        ]
        lines.append(
            f"| {p.weight} | {p.k} | {p.n} | {p.m} | {p.path} "
            f"| {p.steady['forward']['launches']} | {' | '.join(cells)} | {' | '.join(ratios)} |"
        )
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def tables(points: list[Point]) -> str:
    """The protocol's table, then the back-to-back one where any point has it."""
    steady = steady_table(points)
    return table(points) + (f"\nBack to back (``--steady``):\n\n{steady}" if steady else "")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (see the module docstring); return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default="i4,i8", help="weight types, comma-separated")
    parser.add_argument("--batches", default=None, help="batches M (default: BATCHES)")
    parser.add_argument("--quick", action="store_true", help="one shape, M in {1, 256}")
    parser.add_argument(
        "--shapes", default=None, help="(K, N) shapes written KxN, comma-separated (default: all)"
    )
    parser.add_argument("--repeats", type=int, default=30, help="timed runs (>= 30)")
    parser.add_argument(
        "--steady",
        action="store_true",
        help="also time the points of STEADY_FROM_US or longer back to back, with the clock",
    )
    parser.add_argument("--output", default="benchmarks/results", help="directory of results")
    options = parser.parse_args(argv)
    if options.repeats < 30:
        parser.error(f"--repeats must be at least 30, got {options.repeats}")
    weights = [dtypes.from_name(name.strip()) for name in options.weights.split(",")]
    batches = QUICK_BATCHES if options.quick else BATCHES
    if options.batches:
        batches = [int(m) for m in options.batches.split(",")]
    try:
        shapes = parse_shapes(options.shapes, options.quick)
    except ValueError as error:
        parser.error(str(error))
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    flush = flush_buffer(torch.device("cuda"))
    points: list[Point] = []
    for weight in weights:
        for index, (k, n) in enumerate(shapes):
            # The same weights for a shape whether or not --shapes picked it out.
            seed = SHAPES.index((k, n)) if (k, n) in SHAPES else len(SHAPES) + index
            layer = make_layer(weight, k, n, seed=seed)
            peer, note = humming_layer(weight, layer.dequantize(torch.float16))
            for m in batches:
                point = measure(layer, weight, m, flush, options.repeats, peer, options.steady)
                point.notes = note
                points.append(point)
                print(f"  {weight} K={k} N={n} M={m}: forward {point.forward_us:.1f} us")
            # Written after every shape, so that a run cut short keeps what it measured.
            write_record(
                Path(options.output),
                "quantized_linear",
                points,
                tables(points),
                repeats=options.repeats,
                timing="in turns",
                group_size=GROUP_SIZE,
            )
            del layer, peer
            torch.cuda.empty_cache()
    print(tables(points), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

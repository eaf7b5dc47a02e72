"""W-A16 quantized matmul on the GPU: our tile program against cuBLAS fp16 and Humming.

For each weight type, each (K, N) of large language models and each batch M, three kernels run
in this one process on the same random inputs:

- ours, C = A (M, K) @ (W * S) with S the (K / 128, N) f16 scales:
  - ``register_dequant``: ``ir.examples.register_dequant_matmul`` on the weights and scales
    packed by ``ir.examples.packed_weights`` (mma B fragments per 16-byte lane vector),
    with the small configuration sweep `DEQUANT_CONFIGS` run at M = 1 and M = 16 for each
    shape (the best at 16 serves every larger M; recorded in `config`); a split-k
    configuration is timed with its ``split_k_sum`` launch (`launches` 2);
  - ``mma`` / ``simt``: ``ir.examples.quantized_matmul(weight, group_size=128,
    tensor_cores=...)`` on the dense (K, N) bitstream of codes (mma.sync or the CUDA-core dot);
- cuBLAS: ``torch.matmul`` of A and the dequantized f16 weights (K, N), ``f16(f32(W) * f32(S))``;
- Humming (``humming-kernels``, ``humming.layer.HummingLayer``) for the signed integer types it
  names ``int<b>``, with group size 128, quantizing the same dequantized weights itself.

Protocol (the project's GPU notes): every result is checked before it is timed (ours against
cuBLAS on the same dequantized weights, within f16 rounding; Humming against the unquantized
product within its quantization error); each timed run is preceded by a read of a 512 MiB buffer
(more than twice the 60 MB L2, so weights come from HBM; a read, not a write, so no dirty lines
are written back during the timed kernel) and by a short sleep kernel that hides the launch;
CUDA events time the kernel alone; the median of `--repeats` (at least 30) runs after warm-up is
reported. The roofline time is the larger of the bytes that must move (packed weights, scales,
activations, output) over 4.4 TB/s and the FLOPs over 800 TFLOP/s; a single cold kernel also
pays about 3 us of fixed cost, which the roofline leaves out.

Per point: microseconds of each kernel, our speedup over cuBLAS (cuBLAS time / ours), our ratio
to the best peer (best peer time / ours: above 1 we are faster) and the fraction of the roofline
we reach (roofline time / ours). Results go to ``<output>/quantized_matmul.json`` and
``<output>/quantized_matmul.md``; the short table is printed last.

Usage (on a GPU machine, with the checkout on PYTHONPATH)::

    python benchmarks/quantized_matmul.py [--quick] [--weights i4,i8] [--repeats 30]
        [--kernels register_dequant,mma] [--output benchmarks/results]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import backend
from ir import dtypes
from ir.dtypes import DataType
from ir.examples.packed_weights import pack_scales, pack_weights
from ir.examples.quantized_matmul import quantized_matmul
from ir.examples.register_dequant_matmul import (
    DequantConfig,
    register_dequant_matmul,
    split_k_sum,
)

SHAPES = [(4096, 12288), (8192, 8192), (8192, 57344), (28672, 8192)]
"""(K, N) of the weight matrices."""
BATCHES = [1, 16, 256, 4096]
QUICK_SHAPES = [(4096, 12288)]
QUICK_BATCHES = [1, 256]
GROUP_SIZE = 128
BLOCK_M = BLOCK_N = 64
BANDWIDTH = 4.4e12
"""Bytes per second: what cuBLAS's own GEMV reaches reading on an H200."""
FLOP_RATE = 800e12
"""FLOP per second of the tensor cores in f16 / bf16 on an H200."""
FLUSH_BYTES = 512 * 2**20
SLEEP_CYCLES = 400_000
"""About 200 us at 2 GHz: longer than a checked launch from Python takes."""
DEQUANT_CONFIGS = [
    DequantConfig(warps=4, units_n=1, units_k=4, depth=1, split=4),
    DequantConfig(warps=4, units_n=1, units_k=4, depth=1, split=8),
    DequantConfig(warps=4, units_n=1, units_k=4, depth=2, split=8),
    DequantConfig(warps=4, units_n=1, units_k=4, depth=1, split=16),
    DequantConfig(warps=2, units_n=1, units_k=8, depth=1, split=8),
    DequantConfig(warps=2, units_n=1, units_k=4, depth=1, split=16),
    DequantConfig(warps=4, units_n=1, units_k=8, depth=1, split=8),
]
"""The configurations of `register_dequant_matmul` tried at M = 1 for each shape."""


@dataclass
class Point:
    """One measurement: the problem, each kernel's median microseconds (None when it did not
    run, with the reason in `notes`), and the ratios of the module docstring."""

    weight: str
    kernel: str
    k: int
    n: int
    m: int
    ours_us: float
    cublas_us: float
    humming_us: float | None
    roofline_us: float
    speedup_over_cublas: float
    ratio_to_best_peer: float
    roofline_fraction: float
    launches: int
    config: dict[str, Any]
    notes: str


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """The dense LSB-first bitstream (uint8) of a flat tensor of codes, on the codes' device:
    element j at bits ``[j b, (j + 1) b)``. Requires a length that is a multiple of 8."""
    groups = codes.reshape(-1, 8).to(torch.int64)
    shifts = torch.arange(8, device=codes.device, dtype=torch.int64) * bits
    words = (groups << shifts).sum(dim=1)
    byte_shifts = torch.arange(bits, device=codes.device, dtype=torch.int64) * 8
    return ((words[:, None] >> byte_shifts) & 0xFF).to(torch.uint8).reshape(-1)


def decode_table(dtype: DataType, device: torch.device) -> torch.Tensor:
    """The float32 value of every code of `dtype`, indexed by code."""
    codes = np.arange(1 << dtype.nbits)
    return torch.tensor(dtype.decode(codes).astype(np.float32), device=device)


def roofline_us(weight: DataType, k: int, n: int, m: int) -> float:
    """The larger of the byte time and the FLOP time of one matmul, in microseconds."""
    weight_bytes = k * n * weight.nbits / 8
    scale_bytes = math.ceil(k / GROUP_SIZE) * n * 2
    moved = weight_bytes + scale_bytes + 2 * m * k + 2 * m * n
    return 1e6 * max(moved / BANDWIDTH, 2 * m * n * k / FLOP_RATE)


def median_us(run: Callable[[], Any], flush: torch.Tensor, repeats: int) -> float:
    """The median time of `run` (one kernel launch) over `repeats` timed runs after two
    warm-up runs, each preceded by reading `flush` and a sleep kernel."""
    for _ in range(2):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush.sum()
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(1e3 * start.elapsed_time(end))
    return statistics.median(times)


def humming_layer(weight: DataType, dequantized: torch.Tensor) -> tuple[Any | None, str]:
    """A transformed `HummingLayer` for the (K, N) weights, or None and the reason."""
    if weight.is_float or not weight.is_signed:
        return None, f"Humming: no symmetric scaled format for {weight}"
    try:
        from humming.layer import HummingLayer
    except ImportError as error:
        return None, f"Humming not importable: {error}"
    k, n = dequantized.shape
    layer = HummingLayer(
        shape_n=n,
        shape_k=k,
        weight_config={"dtype": f"int{weight.nbits}", "group_size": GROUP_SIZE},
        torch_dtype=torch.float16,
    ).cuda()
    layer.load_from_unquantized(dequantized.t().contiguous())
    layer.transform()
    return layer, ""


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """``|actual - expected| / |expected|`` in the Frobenius norm, in float64."""
    difference = (actual.double() - expected.double()).norm()
    return float(difference / expected.double().norm().clamp_min(1e-30))


@dataclass
class Problem:
    """The inputs of one (weight, K, N) on the GPU, shared by every kernel and batch."""

    weight: DataType
    k: int
    n: int
    codes: torch.Tensor
    scales: torch.Tensor
    dequantized: torch.Tensor
    generator: torch.Generator

    def packed_units(self) -> torch.Tensor:
        """The weights in the packed format of `ir.examples.packed_weights` (packed once, on
        the device; every configuration reads the same tensor)."""
        if not hasattr(self, "_packed_units"):
            self._packed_units, _ = pack_weights(self.codes, self.weight)
        return self._packed_units

    def packed_scales(self) -> torch.Tensor:
        """The scales in the packed order of `ir.examples.packed_weights.pack_scales`."""
        if not hasattr(self, "_packed_scales"):
            self._packed_scales = pack_scales(self.scales)
        return self._packed_scales

    @classmethod
    def make(cls, weight: DataType, k: int, n: int, device: torch.device) -> Problem:
        generator = torch.Generator(device=device).manual_seed(k * 131 + n)
        codes = torch.randint(0, 1 << weight.nbits, (k, n), device=device, generator=generator)
        groups = math.ceil(k / GROUP_SIZE)
        scales = (torch.rand((groups, n), device=device, generator=generator) + 0.5) / (
            2 ** (weight.nbits - 1)
        )
        scales = scales.to(torch.float16)
        values = decode_table(weight, device)[codes]
        group_scales = scales.float().repeat_interleave(GROUP_SIZE, dim=0)[:k]
        dequantized = (values * group_scales).to(torch.float16)
        return cls(weight, k, n, codes, scales, dequantized, generator)


class Operation:
    """One of our kernels prepared for a problem: `prepare(m)` returns (a run callable that
    computes C into `output`, the output); `launches` and `config` describe it."""

    def __init__(self, variant: str, problem: Problem, config: DequantConfig | None = None):
        self.variant, self.problem, self.config = variant, problem, config
        weight = problem.weight
        if variant == "register_dequant":
            assert config is not None
            self.packed = problem.packed_units()
            program = register_dequant_matmul(weight, GROUP_SIZE, config)
            constants = {"n": problem.n, "k": problem.k}
            self.kernel = backend.compile(program, constants=constants)
            self.reduce = backend.compile(split_k_sum(config.split)) if config.split > 1 else None
            self.launches = 2 if config.split > 1 else 1
        else:
            self.packed = pack_codes(problem.codes.reshape(-1), weight.nbits)
            program = quantized_matmul(weight, group_size=GROUP_SIZE, tensor_cores=variant == "mma")
            self.kernel = backend.compile(program)
            self.reduce = None
            self.launches = 1

    @property
    def config_record(self) -> dict[str, Any]:
        if self.config is None:
            return {"block_m": BLOCK_M, "block_n": BLOCK_N}
        return asdict(self.config)

    def prepare(self, a: torch.Tensor) -> tuple[Callable[[], Any], torch.Tensor]:
        p = self.problem
        m = a.shape[0]
        out = torch.zeros((m, p.n), device=a.device, dtype=torch.float16)
        scales = p.scales if self.config is None else p.packed_scales()
        args = (m, p.n, p.k, a, self.packed, scales)
        if self.config is None:
            grid = (math.ceil(p.n / BLOCK_N), math.ceil(m / BLOCK_M))
            return functools.partial(self.kernel, *args, out, grid=grid), out
        grid = self.config.grid(m, p.n)
        if self.reduce is None:
            return functools.partial(self.kernel, *args, out, grid=grid), out
        split = self.config.split
        partial = torch.empty((split, m, p.n), device=a.device, dtype=torch.float32)
        reduce_grid = math.ceil(m * p.n / 512)

        def run() -> None:
            self.kernel(*args, partial, grid=grid)
            self.reduce(m * p.n, partial, out, grid=reduce_grid)

        return run, out


def checked_us(operation: Operation, a: torch.Tensor, flush: torch.Tensor, repeats: int) -> float:
    """The median time of `operation` on `a`, after checking its result against cuBLAS."""
    run, out = operation.prepare(a)
    run()
    torch.cuda.synchronize()
    error = relative_error(out, torch.matmul(a, operation.problem.dequantized))
    if not error < 2e-3:
        p = operation.problem
        raise RuntimeError(
            f"{p.weight} {operation.variant} {operation.config_record} K={p.k} N={p.n} "
            f"M={a.shape[0]}: our result differs from cuBLAS by {error:.2e}"
        )
    return median_us(run, flush, repeats)


TUNING_BATCHES = (1, 16)
"""The batches the configuration sweep runs at; a larger M uses the configuration of the
largest of them that is not larger."""


def tuned(problem: Problem, flush: torch.Tensor, repeats: int) -> dict[int, Operation]:
    """For each of `TUNING_BATCHES`, the `DEQUANT_CONFIGS` entry that is fastest at that M on
    `problem` (each result checked)."""
    problem.packed_units()
    configs = [
        config
        for config in DEQUANT_CONFIGS
        if (problem.k // (16 * config.units_k)) % config.split == 0
        and problem.n % config.block_n == 0
    ]
    # NVRTC needs no GPU: compile every candidate at once on the host's cores.
    with ThreadPoolExecutor(16) as pool:
        operations = list(
            pool.map(lambda config: Operation("register_dequant", problem, config), configs)
        )
    assert operations, "no configuration fits the shape"
    chosen = {}
    for m in TUNING_BATCHES:
        a = (torch.rand((m, problem.k), device=flush.device) * 2 - 1).to(torch.float16)
        best, best_us = operations[0], math.inf
        for config, operation in zip(configs, operations):
            us = checked_us(operation, a, flush, repeats)
            print(
                f"    tune {problem.weight} K={problem.k} N={problem.n} M={m} {config}: {us:.1f} us"
            )
            if us < best_us:
                best, best_us = operation, us
        chosen[m] = best
    return chosen


def for_batch(operations: dict[int, Operation], m: int) -> Operation:
    """The tuned operation for batch `m`: that of the largest tuning batch not above it."""
    return operations[max(b for b in operations if b <= m)]


def run_point(
    operations: dict[int, Operation],
    batches: list[int],
    flush: torch.Tensor,
    repeats: int,
    peers: dict[int, tuple[float, float | None, str]],
) -> list[Point]:
    """Measure every batch of one kernel on one problem (`operations`: the kernel to use from
    each batch on, `for_batch`); `peers` caches the peers' times."""
    p = next(iter(operations.values())).problem
    weight, k, n = p.weight, p.k, p.n
    layer, humming_note = (None, "")
    if any(m not in peers for m in batches):
        layer, humming_note = humming_layer(weight, p.dequantized)
    points = []
    for m in batches:
        a = (torch.rand((m, k), device=flush.device, generator=p.generator) * 2 - 1).to(
            torch.float16
        )
        operation = for_batch(operations, m)
        ours_us = checked_us(operation, a, flush, repeats)
        if m not in peers:
            cublas_us = median_us(functools.partial(torch.matmul, a, p.dequantized), flush, repeats)
            humming_us, note = None, humming_note
            if layer is not None:
                humming_error = relative_error(layer(a), a.float() @ p.dequantized.float())
                if humming_error < 0.25:
                    humming_us = median_us(functools.partial(layer, a), flush, repeats)
                else:
                    note = f"Humming result off by {humming_error:.2e}: not timed"
            peers[m] = (cublas_us, humming_us, note)
        cublas_us, humming_us, note = peers[m]
        best_peer = min(t for t in (cublas_us, humming_us) if t is not None)
        roofline = roofline_us(weight, k, n, m)
        points.append(
            Point(
                weight=weight.name,
                kernel=operation.variant,
                k=k,
                n=n,
                m=m,
                ours_us=ours_us,
                cublas_us=cublas_us,
                humming_us=humming_us,
                roofline_us=roofline,
                speedup_over_cublas=cublas_us / ours_us,
                ratio_to_best_peer=best_peer / ours_us,
                roofline_fraction=roofline / ours_us,
                launches=operation.launches,
                config=operation.config_record,
                notes=note,
            )
        )
        print(
            f"  {weight} {operation.variant} K={k} N={n} M={m}: ours {ours_us:.1f} us", flush=True
        )
    return points


def table(points: list[Point]) -> str:
    """The results as a Markdown table."""
    lines = [
        "| weight | kernel | K | N | M | ours us | cuBLAS us | Humming us | vs cuBLAS "
        "| vs best peer | roofline | launches | config |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for p in points:
        humming = "n/a" if p.humming_us is None else f"{p.humming_us:.1f}"
        lines.append(
            f"| {p.weight} | {p.kernel} | {p.k} | {p.n} | {p.m} | {p.ours_us:.1f} "
            f"| {p.cublas_us:.1f} "
            f"| {humming} | {p.speedup_over_cublas:.2f}x | {p.ratio_to_best_peer:.2f}x "
            f"| {100 * p.roofline_fraction:.1f}% | {p.launches} "
            f"| {' '.join(f'{key}={value}' for key, value in p.config.items())} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (see the module docstring); return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one shape, M in {1, 256}")
    parser.add_argument("--weights", default="i4", help="weight types, comma-separated")
    parser.add_argument("--repeats", type=int, default=30, help="timed runs per kernel (>= 30)")
    parser.add_argument("--output", default="benchmarks/results", help="directory of results")
    parser.add_argument(
        "--kernels",
        default="register_dequant,mma",
        help="our kernels, comma-separated: register_dequant (packed weights dequantized in "
        "registers), mma (mma.sync tensor cores), simt (CUDA-core dot)",
    )
    options = parser.parse_args(argv)
    if options.repeats < 30:
        parser.error(f"--repeats must be at least 30, got {options.repeats}")
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    weights = [dtypes.from_name(name.strip()) for name in options.weights.split(",")]
    shapes = QUICK_SHAPES if options.quick else SHAPES
    batches = QUICK_BATCHES if options.quick else BATCHES
    device = torch.device("cuda")
    flush = torch.ones(FLUSH_BYTES // 4, device=device, dtype=torch.float32)
    points: list[Point] = []
    variants = [name.strip() for name in options.kernels.split(",")]
    unknown = sorted(set(variants) - {"simt", "mma", "register_dequant"})
    if unknown:
        parser.error(f"--kernels takes register_dequant, mma and simt, got {unknown}")
    for weight in weights:
        for k, n in shapes:
            problem = Problem.make(weight, k, n, device)
            peers: dict[int, tuple[float, float | None, str]] = {}
            for variant in variants:
                if variant == "register_dequant":
                    operations = tuned(problem, flush, options.repeats)
                else:
                    operations = {1: Operation(variant, problem)}
                points += run_point(operations, batches, flush, options.repeats, peers)
    output = Path(options.output)
    output.mkdir(parents=True, exist_ok=True)
    record = {
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "repeats": options.repeats,
        "group_size": GROUP_SIZE,
        "points": [asdict(p) for p in points],
    }
    (output / "quantized_matmul.json").write_text(json.dumps(record, indent=2) + "\n")
    text = table(points)
    (output / "quantized_matmul.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

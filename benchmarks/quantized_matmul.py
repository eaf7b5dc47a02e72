"""W-A16 quantized matmul on the GPU: our tile program against cuBLAS fp16 and Humming.

For each weight type, each (K, N) of large language models and each batch M, three kernels run
in this one process on the same random inputs:

- ours, C = A (M, K) @ (W * S) with S the (K / 128, N) f16 scales:
  - ``register_dequant``: ``backend.decode_matmul.DecodeMatmul``, the compiled
    ``ir.examples.register_dequant_matmul`` on the weights and scales packed by
    ``ir.examples.packed_weights`` (mma B fragments per 16-byte lane vector), with the
    configuration the autotuner (``DecodeMatmul.tuned``, ``backend.autotune``) picks for each
    shape and M bucket from ``decode_search_space`` (recorded in `config`; tuned once, then
    read from the kernel cache directory; ``--space combining`` adds the ``combine_parts``
    twins of the split and stream-K points, the space of ``deterministic=False``); a split-k
    configuration is timed with its ``split_k_sum`` launch (`launches` 2);
  - ``mma`` / ``simt``: ``ir.examples.quantized_matmul(weight, group_size=128,
    tensor_cores=...)`` on the dense (K, N) bitstream of codes (mma.sync or the CUDA-core dot);
    ``mma_ring``: the same on tensor cores with `RING_OPTIONS` (128 x 128 tiles, a ring of
    three swizzled stages, the next k-tile's weights loaded ahead); ``wgmma``: its warpgroup
    form (`WGMMA_OPTIONS`: two warpgroups, 64-deep k-tiles, the dot as ``wgmma.mma_async``
    reading activations and dequantized weights from shared memory on sm_90a);
    ``wgmma_in_flight``: the same with each k-tile's wgmma left running into the next
    (`IN_FLIGHT_OPTIONS`);
  - ``wgmma_dequant``: ``ir.examples.wgmma_dequant_matmul`` on the packed weights and scales
    (the prefill form: the dequantized weights as ``wgmma``'s register A operand, the
    activations bulk-copied into a transposed ring), compiled for each (K, N) with the
    `PREFILL_CONFIG` fields (``--options`` overrides them);
  - ``staged_dequant``: ``ir.examples.staged_dequant_matmul`` on the same packed weights (every
    warp dequantizes a share of the k-tile into shared W^T tiles, which each warpgroup's
    ``wgmma`` reads beside the activations), with the `STAGED_CONFIG` fields;
- cuBLAS: ``torch.matmul`` of A and the dequantized f16 weights (K, N), ``f16(f32(W) * f32(S))``;
- Humming (``humming-kernels``, ``humming.layer.HummingLayer``) for the signed integer types it
  names ``int<b>``, with group size 128, quantizing the same dequantized weights itself.

Protocol (the project's GPU notes, ``backend.timing.median_us``): every result is checked
before it is timed (ours against cuBLAS on the same dequantized weights, within f16 rounding;
Humming against the unquantized product within its quantization error); each timed run is
preceded by a read of a 512 MiB buffer (more than twice the 60 MB L2, so weights come from HBM;
a read, not a write, so no dirty lines are written back during the timed kernel) and by a
sleep kernel that hides the launch (made longer until it outlasts every launch's host time);
CUDA events time the kernel alone; the median of
`--repeats` (at least 30) runs after warm-up is reported. The roofline time is the larger of
the bytes that must move (packed weights, scales, activations, output) over 4.4 TB/s and the
FLOPs over 800 TFLOP/s; a single cold kernel also pays about 3 us of fixed cost, which the
roofline leaves out.

Per point: microseconds of each kernel, our speedup over cuBLAS (cuBLAS time / ours), our ratio
to the best peer (best peer time / ours: above 1 we are faster) and the fraction of the roofline
we reach (roofline time / ours). Results go to ``<output>/quantized_matmul.json`` and
``<output>/quantized_matmul.md``; the short table is printed last.

To compare configurations of the register-dequant kernel in one run, beside the same peers:
``--configs-from FILES`` takes each point's configuration from earlier runs' JSON files (their
``register_dequant`` points, the fastest where several record one; a point they lack is
tuned), and ``--variants`` measures each configuration again with fields overridden
(``"stages=3,depth=1;stages=4,depth=1"``: two variants), recorded as further
``register_dequant`` points with their configurations. ``--batched-parts`` first gives each
recorded configuration the search space's rule for its split sum's parts
(`backend.decode_matmul.with_batched_parts`: recorded before that rule, the same bits). For
the other kernels with options,
``--options`` may likewise hold several sets separated by ``;`` (``"units_k=2;block_m=32"``),
each compiled and measured in the same run. Those kernels are timed in turns with the peers
(`backend.timing.medians_in_turns`: at each batch, every round times each option set's kernel,
cuBLAS and Humming once, the order rotated a place a round), so that a drift of the clocks over
a large point's seconds falls on all of them alike; the register-dequant kernel's points, which
take microseconds, are timed apart. Each point's ``timing`` says which (``"in turns"`` or
``"apart"``). With ``--steady N`` those kernels and the peers are also timed back to back,
N launches a block (`backend.timing.steady_in_turns`), with the SM clock and board power read
during each block: a second figure for kernels held by the card's power limit, in
``<output>/quantized_matmul_steady.json`` and ``.md``, beside the protocol's.

Usage (on a GPU machine, with the checkout on PYTHONPATH)::

    python benchmarks/quantized_matmul.py [--quick] [--weights i4,i8] [--repeats 30]
        [--batches 1,16,256,4096] [--shapes 4096x12288,8192x8192] [--tune-batches 1,16]
        [--kernels register_dequant,mma]
        [--space full|compact|combining] [--configs-from FILES] [--batched-parts]
        [--variants "stages=3,depth=1"] [--steady 50] [--output benchmarks/results]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matmul import CONFIGS as MATMUL_CONFIGS  # the sibling f16 matmul benchmark
from records import write_record  # a sibling module of the benchmarks

import backend
from backend.autotune import m_bucket
from backend.batch_matmul import BATCH_PATHS, split_workspace
from backend.decode_matmul import (
    DecodeMatmul,
    DecodeMeasure,
    DecodeProblem,
    TileCounters,
    decode_programs,
    prepare_all,
    relative_error,
    with_batched_parts,
)
from backend.device import current_arch
from backend.timing import SteadyTime, flush_buffer, median_us, medians_in_turns, steady_in_turns
from ir import dtypes
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.examples.packed_weights import pack_scales, pack_weights
from ir.examples.quantized_matmul import quantized_matmul
from ir.examples.register_dequant_matmul import DequantConfig, register_dequant_matmul
from ir.examples.staged_dequant_matmul import StagedDequantConfig, staged_dequant_matmul
from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig, wgmma_dequant_matmul

SHAPES = [(4096, 12288), (8192, 8192), (8192, 57344), (28672, 8192)]
"""(K, N) of the weight matrices."""
BATCHES = [1, 16, 256, 4096]
QUICK_SHAPES = [(4096, 12288)]
QUICK_BATCHES = [1, 256]
GROUP_SIZE = 128
SPACES = ("full", "compact", "combining")
"""The register-dequant kernel's search spaces ``--space`` names (see its help)."""
BLOCK_M = BLOCK_N = 64
RING_OPTIONS = {"num_threads": 256, "block_m": 128, "block_n": 128, "stages": 3, "swizzle": True}
"""The ``mma_ring`` variant: ``quantized_matmul`` on tensor cores with a ring of swizzled
stages and the next k-tile's weight bytes loaded ahead."""
WGMMA_OPTIONS = MATMUL_CONFIGS["128x128x64 2 warpgroups 3 stages wgmma"]
"""The ``wgmma`` variant: ``quantized_matmul``'s warpgroup form (`backend.wgmma`), in the f16
matmul benchmark's best warpgroup configuration."""
IN_FLIGHT_OPTIONS = MATMUL_CONFIGS["128x128x64 2 warpgroups 4 stages wgmma in flight"]
"""The ``wgmma_in_flight`` variant: the warpgroup form with its ring ordered for a dot in
flight (``overlap_dot``: activations 2 k-tiles ahead, the next k-tile's weights and scales
loaded ahead), so that on sm_90a each k-tile's wgmma runs on into the next
(`backend.wgmma_pipeline`)."""
PREFILL_CONFIG = {name: value for name, value in BATCH_PATHS[3].items() if name != "path"}
"""The ``wgmma_dequant`` variant's `WgmmaDequantConfig` fields: QuantizedLinear's 128 x 256
tile with 128-deep k-tiles (`backend.batch_matmul.BATCH_PATHS`; each warp one A fragment, two
consumer warpgroups, a producer warpgroup, the dot in flight), the fastest at 4096 rows."""
STAGED_CONFIG = {"warpgroups": 4, "units_n": 4, "block_m": 128, "stages": 4}
"""The ``staged_dequant`` variant's `StagedDequantConfig` fields: four warpgroups sharing the
dequantization of 256 columns by 64 k (the other fields' defaults), 128 rows of A, four
activation stages (160 KiB of shared memory, one block per SM)."""
VARIANT_OPTIONS = {
    "mma_ring": RING_OPTIONS,
    "wgmma": WGMMA_OPTIONS,
    "wgmma_in_flight": IN_FLIGHT_OPTIONS,
    "wgmma_dequant": PREFILL_CONFIG,
    "staged_dequant": STAGED_CONFIG,
}
"""The ``quantized_matmul`` options of each variant that has some."""
KERNELS = (
    "register_dequant",
    "mma",
    "mma_ring",
    "wgmma",
    "wgmma_in_flight",
    "wgmma_dequant",
    "staged_dequant",
    "simt",
)
"""The kernels of ours that `--kernels` names."""
BANDWIDTH = 4.4e12
"""Bytes per second: what cuBLAS's own GEMV reaches reading on an H200."""
FLOP_RATE = 800e12
"""FLOP per second of the tensor cores in f16 / bf16 on an H200."""


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
    timing: str = "apart"
    """``"apart"``: each kernel's runs timed back to back (`median_us`); ``"in turns"``: this
    point's kernels and peers timed round by round (`medians_in_turns`)."""


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


def humming_layer(weight: DataType, dequantized: torch.Tensor) -> tuple[Any | None, str]:
    """A transformed `HummingLayer` for the (K, N) weights, or None and the reason: signed
    integers as Humming's ``int<b>``, the sub-byte floats as ``float<b>e<e>m<m>``."""
    if weight.is_float:
        name = f"float{weight.nbits}e{weight.exponent_bits}m{weight.mantissa_bits}"
    elif weight.is_signed:
        name = f"int{weight.nbits}"
    else:
        return None, f"Humming: no symmetric scaled format for {weight}"
    try:
        from humming.layer import HummingLayer
    except ImportError as error:
        return None, f"Humming not importable: {error}"
    k, n = dequantized.shape
    try:
        layer = _humming(HummingLayer, name, k, n, dequantized)
    except Exception as error:  # a format or shape Humming refuses: no peer time, a note
        return None, f"Humming refused {name}: {type(error).__name__}: {error}"
    return layer, ""


def _humming(humming_layer: Any, name: str, k: int, n: int, dequantized: torch.Tensor) -> Any:
    layer = humming_layer(
        shape_n=n,
        shape_k=k,
        weight_config={"dtype": name, "group_size": GROUP_SIZE},
        torch_dtype=torch.float16,
    ).cuda()
    layer.load_from_unquantized(dequantized.t().contiguous())
    layer.transform()
    return layer


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
    """One of our kernels prepared for a problem: `prepare(a)` returns (a run callable that
    computes C into its output, the output); `launches` and `config_record` describe it.
    ``register_dequant`` runs the given `DecodeMatmul`; ``mma`` and ``simt`` compile
    ``quantized_matmul`` on the dense bitstream of codes."""

    def __init__(
        self,
        variant: str,
        problem: Problem,
        decode: DecodeMatmul | None = None,
        overrides: dict[str, int | bool] | None = None,
    ):
        self.variant, self.problem, self.decode = variant, problem, decode
        self.prefill: WgmmaDequantConfig | StagedDequantConfig | None = None
        self.counters = TileCounters()  # of a split prefill kernel's sums
        if variant == "register_dequant":
            if decode is None:
                raise ValueError("the register_dequant kernel needs its DecodeMatmul")
            self.launches = decode.launches
            return
        self.options = dict(VARIANT_OPTIONS.get(variant, {}))
        if self.options and overrides:
            self.options.update(overrides)
        self.launches = 1
        if variant in ("wgmma_dequant", "staged_dequant"):
            if variant == "wgmma_dequant":
                self.prefill = WgmmaDequantConfig(**self.options)
                program = wgmma_dequant_matmul(problem.weight, GROUP_SIZE, self.prefill)
            else:
                self.prefill = StagedDequantConfig(**self.options)
                program = staged_dequant_matmul(problem.weight, GROUP_SIZE, self.prefill)
            self.kernel = backend.compile(program, constants={"n": problem.n, "k": problem.k})
            return
        self.packed = pack_codes(problem.codes.reshape(-1), problem.weight.nbits)
        program = quantized_matmul(
            problem.weight,
            group_size=GROUP_SIZE,
            tensor_cores=variant in ("mma", "mma_ring", "wgmma", "wgmma_in_flight"),
            **self.options,
        )
        self.kernel = backend.compile(program)

    @property
    def block(self) -> tuple[int, int]:
        """(block_m, block_n) of a ``quantized_matmul`` or ``wgmma_dequant`` variant."""
        if self.prefill is not None:
            return self.prefill.block_m, self.prefill.block_n
        return self.options.get("block_m", BLOCK_M), self.options.get("block_n", BLOCK_N)

    @property
    def config_record(self) -> dict[str, Any]:
        if self.decode is None:
            return {"block_m": self.block[0], "block_n": self.block[1], **self.options}
        return asdict(self.decode.config)

    def prepare(self, a: torch.Tensor) -> tuple[Callable[[], Any], torch.Tensor]:
        p = self.problem
        m = a.shape[0]
        out = torch.zeros((m, p.n), device=a.device, dtype=torch.float16)
        if self.decode is not None:
            run = functools.partial(self.decode, a, p.packed_units(), p.packed_scales(), out=out)
            return run, out
        block_m, block_n = self.block
        grid = (math.ceil(p.n / block_n), math.ceil(m / block_m))
        if self.prefill is not None:
            workspace = split_workspace(self.prefill, m, p.n, p.k, a.device, self.counters)
            args = (m, p.n, p.k, a, p.packed_units(), p.packed_scales(), *workspace)
            grid = self.prefill.grid(m, p.n, p.k)
            return functools.partial(self.kernel, *args, out, grid=grid), out
        args = (m, p.n, p.k, a, self.packed, p.scales)
        return functools.partial(self.kernel, *args, out, grid=grid), out


def checked_run(operation: Operation, a: torch.Tensor) -> Callable[[], Any]:
    """`operation`'s run on `a`, after checking its result against cuBLAS (within f16
    rounding)."""
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
    return run


def checked_us(operation: Operation, a: torch.Tensor, flush: torch.Tensor, repeats: int) -> float:
    """The median time of `operation` on `a`, after checking its result against cuBLAS."""
    return median_us(checked_run(operation, a), flush, repeats)


def tuned(
    problem: Problem,
    batches: list[int],
    flush: torch.Tensor,
    repeats: int,
    space: str = "full",
) -> dict[int, Operation]:
    """For each of `batches` (the tuning batches), the register-dequant operation with the
    configuration the autotuner picks for its M bucket (`DecodeMatmul.tuned`: measured on this
    GPU the first time, each candidate checked; read from the record store after) from the
    search space `space` names (`SPACES`); a larger M uses the operation of the largest tuning
    batch not above it (`for_batch`)."""
    decode_problem = DecodeProblem(problem.weight, GROUP_SIZE, problem.k, problem.n)
    operations = {}
    for m in batches:
        measure = DecodeMeasure(decode_problem, m_bucket(m).lo, repeats=repeats, flush=flush)
        decode = DecodeMatmul.tuned(
            decode_problem,
            m,
            measure=measure,
            compact=space == "compact",
            deterministic=space != "combining",
        )
        operations[m] = Operation("register_dequant", problem, decode)
    return operations


def recorded_configs(paths: list[Path]) -> dict[tuple[str, int, int, int], DequantConfig]:
    """The register-dequant configuration of each (weight, K, N, M) point of earlier runs'
    JSON files (`write_results`): where several record a point, that of the fastest. Raises
    ValueError naming a file that holds no list of points (not such a record) and a point whose
    config is not a DequantConfig's fields."""
    fastest: dict[tuple[str, int, int, int], tuple[float, DequantConfig]] = {}
    for path in paths:
        record = json.loads(path.read_text())
        points = record.get("points") if isinstance(record, dict) else None
        if not isinstance(points, list):
            raise ValueError(f"{path}: no 'points' list; expected a quantized_matmul record")
        for point in points:
            if point.get("kernel") != "register_dequant":
                continue
            key = (point["weight"], point["k"], point["n"], point["m"])
            try:
                config = DequantConfig(**point["config"])
            except TypeError as error:
                raise ValueError(f"{path}: point {key}: {point['config']}: {error}") from None
            if key not in fastest or point["ours_us"] < fastest[key][0]:
                fastest[key] = (point["ours_us"], config)
    return {key: config for key, (_, config) in fastest.items()}


def configs_option(
    parser: argparse.ArgumentParser, text: str
) -> dict[tuple[str, int, int, int], DequantConfig]:
    """`recorded_configs` of a ``--configs-from`` option (comma-separated JSON files); a file
    that cannot be read or is no record ends the command line with `parser`'s error."""
    try:
        return recorded_configs([Path(path) for path in text.split(",")])
    except (OSError, ValueError) as error:
        parser.error(f"--configs-from: {error}")


def compiled(problem: Problem, configs: list[DequantConfig]) -> list[Operation]:
    """The register-dequant operations of `configs` on `problem`, lowered in worker processes
    and compiled in threads (NVRTC needs no GPU), as the autotuner builds its candidates."""
    decode_problem = DecodeProblem(problem.weight, GROUP_SIZE, problem.k, problem.n)
    arch = current_arch()
    programs = prepare_all([decode_programs(decode_problem, c) for c in configs], arch)
    with ThreadPoolExecutor() as pool:
        decodes = list(pool.map(lambda item: DecodeMatmul.from_programs(item, arch=arch), programs))
    return [Operation("register_dequant", problem, decode) for decode in decodes]


def register_dequant_operations(
    problem: Problem,
    batches: list[int],
    recorded: dict[tuple[str, int, int, int], DequantConfig] | None,
    variants: list[dict[str, int | bool]],
    flush: torch.Tensor,
    repeats: int,
    space: str = "full",
) -> list[dict[int, Operation]]:
    """The register-dequant kernel's operations by batch: first those of the tuned
    configurations (`recorded` None: tuned at `batches`, a larger M using the largest tuning
    batch not above it) or of the `recorded` ones (a point they lack tuned at its own batch),
    then for each of `variants` the same configurations with its fields replaced (a
    configuration the replaced fields make invalid, `VerificationError`, left out: e.g.
    ``refill_in_place`` for one with a shared ring)."""
    if recorded is None:
        base = tuned(problem, batches, flush, repeats, space)
    else:
        known = {
            m: recorded[key]
            for m in batches
            if (key := (problem.weight.name, problem.k, problem.n, m)) in recorded
        }
        base = dict(zip(known, compiled(problem, list(known.values()))))
        for m in batches:
            if m not in known:
                base.update(tuned(problem, [m], flush, repeats, space))
        base = dict(sorted(base.items()))
    keys, configs = [], []
    for index in range(len(variants)):
        for m in base:
            config = replace(base[m].decode.config, **variants[index])
            try:
                register_dequant_matmul(problem.weight, GROUP_SIZE, config)
            except VerificationError:
                continue
            keys.append((index, m))
            configs.append(config)
    results = [base] + [{} for _ in variants]
    for (index, m), operation in zip(keys, compiled(problem, configs)):
        results[index + 1][m] = operation
    return results


def for_batch(operations: dict[int, Operation], m: int) -> Operation:
    """The operation for batch `m`: that of the largest batch of `operations` not above it."""
    return operations[max(b for b in operations if b <= m)]


def variant_batches(
    base: dict[int, Operation], variant: dict[int, Operation], batches: list[int]
) -> list[int]:
    """The batches a variant of the `base` operations measures: those whose base operation
    (`for_batch`) the variant has a counterpart of (all, for the base itself)."""
    return [m for m in batches if max(b for b in base if b <= m) in variant]


def batch_activations(problem: Problem, m: int, device: torch.device) -> torch.Tensor:
    """The (m, K) f16 activations of one batch, uniform in [-1, 1), from the problem's
    generator."""
    a = torch.rand((m, problem.k), device=device, generator=problem.generator) * 2 - 1
    return a.to(torch.float16)


def humming_run(
    layer: Any | None, note: str, a: torch.Tensor, dequantized: torch.Tensor
) -> tuple[Callable[[], Any] | None, str]:
    """(Humming's run on `a`, `note`) when `layer` exists and its result is within its
    quantization error of the unquantized product; else (None, the reason)."""
    if layer is None:
        return None, note
    error = relative_error(layer(a), a.float() @ dequantized.float())
    if not error < 0.25:
        return None, f"Humming result off by {error:.2e}: not timed"
    return functools.partial(layer, a), note


def measured_point(
    operation: Operation,
    m: int,
    ours_us: float,
    peers: tuple[float, float | None, str],
    timing: str,
) -> Point:
    """The `Point` of `operation` at batch `m`, from its time and the peers' (cuBLAS, Humming
    or None, a note)."""
    p = operation.problem
    cublas_us, humming_us, note = peers
    best_peer = min(t for t in (cublas_us, humming_us) if t is not None)
    roofline = roofline_us(p.weight, p.k, p.n, m)
    print(
        f"  {p.weight} {operation.variant} K={p.k} N={p.n} M={m}: ours {ours_us:.1f} us", flush=True
    )
    return Point(
        weight=p.weight.name,
        kernel=operation.variant,
        k=p.k,
        n=p.n,
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
        timing=timing,
    )


def run_point(
    operations: dict[int, Operation],
    batches: list[int],
    flush: torch.Tensor,
    repeats: int,
    peers: dict[int, tuple[float, float | None, str]],
) -> list[Point]:
    """Measure every batch of one kernel on one problem (`operations`: the kernel to use from
    each batch on, `for_batch`), each run timed apart; `peers` caches the peers' times."""
    p = next(iter(operations.values())).problem
    layer, humming_note = (None, "")
    if any(m not in peers for m in batches):
        layer, humming_note = humming_layer(p.weight, p.dequantized)
    points = []
    for m in batches:
        a = batch_activations(p, m, flush.device)
        operation = for_batch(operations, m)
        ours_us = checked_us(operation, a, flush, repeats)
        if m not in peers:
            cublas_us = median_us(functools.partial(torch.matmul, a, p.dequantized), flush, repeats)
            humming, note = humming_run(layer, humming_note, a, p.dequantized)
            humming_us = None if humming is None else median_us(humming, flush, repeats)
            peers[m] = (cublas_us, humming_us, note)
        points.append(measured_point(operation, m, ours_us, peers[m], "apart"))
    return points


@dataclass
class SteadyPoint:
    """One run of a point timed back to back (`steady_in_turns`): the problem, the run (``ours
    <i>`` with its `config`, ``cuBLAS`` or ``Humming``), microseconds a launch, and the SM
    clock (MHz) and board power (W) read meanwhile (None where none was read)."""

    weight: str
    kernel: str
    k: int
    n: int
    m: int
    run: str
    us: float
    launches: int
    clock_mhz: float | None
    min_clock_mhz: float | None
    power_w: float | None
    config: dict[str, object]


def steady_points(
    operations: list[Operation], m: int, times: dict[str, SteadyTime], launches: int
) -> list[SteadyPoint]:
    """The `SteadyPoint` of each run of `times` (``ours <i>`` the i-th of `operations`)."""
    p = operations[0].problem
    points = []
    for name, timed in times.items():
        ours = name.startswith("ours ")
        operation = operations[int(name.split()[1])] if ours else None
        points.append(
            SteadyPoint(
                weight=p.weight.name,
                kernel=operation.variant if operation is not None else name,
                k=p.k,
                n=p.n,
                m=m,
                run=name,
                launches=launches,
                config=operation.config_record if operation is not None else {},
                **timed.figures(),
            )
        )
    return points


def steady_table(points: list[SteadyPoint]) -> str:
    """The back-to-back results as a Markdown table."""
    lines = [
        "| weight | K | N | M | run | us a launch | SM clock MHz (least) | power W | config |",
        "|---|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for p in points:
        clock = "n/a" if p.clock_mhz is None else f"{p.clock_mhz:.0f} ({p.min_clock_mhz:.0f})"
        power = "n/a" if p.power_w is None else f"{p.power_w:.0f}"
        config = " ".join(f"{key}={value}" for key, value in p.config.items())
        lines.append(
            f"| {p.weight} | {p.k} | {p.n} | {p.m} | {p.run} | {p.us:.1f} | {clock} | {power} "
            f"| {config} |"
        )
    return "\n".join(lines) + "\n"


def run_in_turns(
    operations: list[Operation],
    batches: list[int],
    flush: torch.Tensor,
    repeats: int,
    steady: int = 0,
    steady_out: list[SteadyPoint] | None = None,
) -> list[Point]:
    """Measure several of our kernels on one problem (the option sets of one variant) and the
    peers at every batch, all of a batch's runs timed in turns (`medians_in_turns`), so that a
    drift of the clocks over the seconds a large point takes falls on all of them alike. With
    `steady` N > 0, the same runs are also timed N launches back to back
    (`steady_in_turns`), their `SteadyPoint`s appended to `steady_out`."""
    p = operations[0].problem
    layer, humming_note = humming_layer(p.weight, p.dequantized)
    points = []
    for m in batches:
        a = batch_activations(p, m, flush.device)
        runs = {f"ours {i}": checked_run(op, a) for i, op in enumerate(operations)}
        runs["cuBLAS"] = functools.partial(torch.matmul, a, p.dequantized)
        humming, note = humming_run(layer, humming_note, a, p.dequantized)
        if humming is not None:
            runs["Humming"] = humming
        times = medians_in_turns(runs, flush, repeats)
        peers = (times["cuBLAS"], times.get("Humming"), note)
        for i, operation in enumerate(operations):
            points.append(measured_point(operation, m, times[f"ours {i}"], peers, "in turns"))
        if steady and steady_out is not None:
            steady_out += steady_points(operations, m, steady_in_turns(runs, steady), steady)
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


def write_results(
    output: Path, device: torch.device, repeats: int, points: list[Point], space: str = "full"
) -> None:
    """``quantized_matmul.json`` and ``quantized_matmul.md`` of `points` in `output`; `space`
    is the register-dequant kernel's search space."""
    with torch.cuda.device(device):
        write_record(
            output,
            "quantized_matmul",
            points,
            table(points),
            repeats=repeats,
            search_space=space,
            group_size=GROUP_SIZE,
        )


def parse_overrides(text: str) -> dict[str, int | bool]:
    """``"stages=3,overlap_dot=true"`` -> ``{"stages": 3, "overlap_dot": True}``; raises
    ValueError naming an entry that is not ``name=integer`` or ``name=true|false``."""
    overrides: dict[str, int | bool] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = entry.partition("=")
        if not name.isidentifier() or not value:
            raise ValueError(f"--options entry {entry!r}: expected name=value")
        if value.lower() in ("true", "false"):
            overrides[name] = value.lower() == "true"
        else:
            try:
                overrides[name] = int(value)
            except ValueError:
                raise ValueError(
                    f"--options entry {entry!r}: expected an integer, true or false"
                ) from None
    return overrides


def parse_shape(text: str) -> tuple[int, int]:
    """(K, N) of a ``--shapes`` entry written ``KxN`` (``4096x12288``)."""
    parts = text.strip().lower().split("x")
    if len(parts) != 2 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise ValueError(f"--shapes entry {text!r}: expected KxN with positive integers")
    return int(parts[0]), int(parts[1])


def parse_shapes(text: str | None, quick: bool = False) -> list[tuple[int, int]]:
    """The (K, N) shapes of a ``--shapes`` option (comma-separated `parse_shape` entries; a bad
    one raises ValueError naming it); without it, QUICK_SHAPES with ``--quick``, else SHAPES."""
    if text:
        return [parse_shape(entry) for entry in text.split(",")]
    return list(QUICK_SHAPES if quick else SHAPES)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (see the module docstring); return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one shape, M in {1, 256}")
    parser.add_argument("--weights", default="i4", help="weight types, comma-separated")
    parser.add_argument("--repeats", type=int, default=30, help="timed runs per kernel (>= 30)")
    parser.add_argument(
        "--batches", default=None, help="batches M, comma-separated (default: 1,16,256,4096)"
    )
    parser.add_argument(
        "--shapes",
        default=None,
        help="weight shapes KxN, comma-separated (default: the four layers of SHAPES)",
    )
    parser.add_argument(
        "--tune-batches",
        default="1,16",
        help="the batches the register-dequant kernel is tuned at (each M uses the tuning of "
        "the largest of them not above it; default 1,16: the decode regime)",
    )
    parser.add_argument(
        "--space",
        choices=SPACES,
        default="full",
        help="the register-dequant kernel's search space (decode_search_space): full; compact "
        "(4 warps, depth 1, the late scale: k-tile sizes and splits only) for surveys of many "
        "weight types; or combining (full with the combine_parts twins of the split and "
        "stream-K points: deterministic=False, results not the same bits launch to launch)",
    )
    parser.add_argument("--output", default="benchmarks/results", help="directory of results")
    parser.add_argument(
        "--kernels",
        default="register_dequant,mma",
        help="our kernels, comma-separated: register_dequant (packed weights dequantized in "
        "registers), mma (mma.sync tensor cores), mma_ring (the same with a ring of swizzled "
        "stages, RING_OPTIONS), wgmma (its warpgroup form, WGMMA_OPTIONS), wgmma_in_flight (the "
        "same with its dot kept in flight, IN_FLIGHT_OPTIONS), wgmma_dequant (the prefill form "
        "on the packed weights, PREFILL_CONFIG), staged_dequant (its form with the weights "
        "dequantized into shared memory, STAGED_CONFIG), simt (CUDA-core dot)",
    )
    parser.add_argument(
        "--options",
        default="",
        help="option overrides for the variants that have options (mma_ring, wgmma, "
        "wgmma_in_flight, wgmma_dequant, staged_dequant), e.g. stages=3,block_n=256: integers, "
        "or true / false; several sets separated by ';' are timed in turns with the peers",
    )
    parser.add_argument(
        "--configs-from",
        default=None,
        help="earlier runs' JSON files, comma-separated: the register-dequant kernel takes "
        "each point's recorded configuration (the fastest's) instead of tuning (points they "
        "lack are tuned)",
    )
    parser.add_argument(
        "--batched-parts",
        action="store_true",
        help="with --configs-from: each recorded configuration's split sum loads its parts as "
        "the search space now does (backend.decode_matmul.with_batched_parts)",
    )
    parser.add_argument(
        "--variants",
        default="",
        help="register-dequant configurations also measured with these fields overridden, "
        "variants separated by ';', e.g. stages=3,depth=1;stages=4,depth=1",
    )
    parser.add_argument(
        "--steady",
        type=int,
        default=0,
        help="also time the in-turns kernels and the peers N launches back to back, with the "
        "SM clock read meanwhile (backend.timing.steady_in_turns; 0: not)",
    )
    options = parser.parse_args(argv)
    if options.steady < 0:
        parser.error(f"--steady must be 0 or more, got {options.steady}")
    try:
        option_sets = [parse_overrides(part) for part in options.options.split(";")]
        variant_overrides = [parse_overrides(part) for part in options.variants.split(";")]
    except ValueError as error:
        parser.error(str(error))
    variant_overrides = [override for override in variant_overrides if override]
    unknown_fields = sorted(
        {name for override in variant_overrides for name in override}
        - set(DequantConfig.__dataclass_fields__)
    )
    if unknown_fields:
        parser.error(f"--variants: {unknown_fields} are not DequantConfig fields")
    recorded = None
    space = options.space
    if options.batched_parts and not options.configs_from:
        parser.error("--batched-parts needs --configs-from (tuned configurations have it)")
    if options.configs_from:
        recorded = configs_option(parser, options.configs_from)
        space = f"recorded configurations ({options.space} where tuned)"
        if options.batched_parts:
            recorded = {key: with_batched_parts(config) for key, config in recorded.items()}
            space = f"recorded configurations, parts batched ({options.space} where tuned)"
    try:
        shapes = parse_shapes(options.shapes, options.quick)
    except ValueError as error:
        parser.error(str(error))
    if options.repeats < 30:
        parser.error(f"--repeats must be at least 30, got {options.repeats}")
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    weights = [dtypes.from_name(name.strip()) for name in options.weights.split(",")]
    batches = QUICK_BATCHES if options.quick else BATCHES
    if options.batches:
        batches = [int(m) for m in options.batches.split(",")]
    tune_batches = [int(m) for m in options.tune_batches.split(",")]
    if min(tune_batches) > min(batches):
        parser.error(f"--tune-batches {tune_batches} must include a batch <= {min(batches)}")
    device = torch.device("cuda")
    flush = flush_buffer(device)
    points: list[Point] = []
    steady: list[SteadyPoint] = []
    variants = [name.strip() for name in options.kernels.split(",")]
    unknown = sorted(set(variants) - set(KERNELS))
    if unknown:
        parser.error(f"--kernels takes {', '.join(KERNELS)}, got {unknown}")
    output = Path(options.output)
    for weight in weights:
        for k, n in shapes:
            problem = Problem.make(weight, k, n, device)
            peers: dict[int, tuple[float, float | None, str]] = {}
            for variant in variants:
                if variant == "register_dequant":
                    kernels = register_dequant_operations(
                        problem,
                        tune_batches if recorded is None else batches,
                        recorded,
                        variant_overrides,
                        flush,
                        options.repeats,
                        options.space,
                    )
                    for operations in kernels:
                        covered = variant_batches(kernels[0], operations, batches)
                        if covered:
                            points += run_point(operations, covered, flush, options.repeats, peers)
                else:
                    # Each option set's kernel compiled in a thread (NVRTC needs no GPU).
                    with ThreadPoolExecutor() as pool:
                        built = list(
                            pool.map(
                                functools.partial(Operation, variant, problem),
                                [None] * len(option_sets),
                                option_sets,
                            )
                        )
                    points += run_in_turns(
                        built, batches, flush, options.repeats, options.steady, steady
                    )
            # Written after every shape, so that a run cut short keeps what it measured.
            write_results(output, device, options.repeats, points, space)
            if steady:
                with torch.cuda.device(device):
                    write_record(
                        output,
                        "quantized_matmul_steady",
                        steady,
                        steady_table(steady),
                        launches=options.steady,
                        group_size=GROUP_SIZE,
                    )
    print(table(points), end="")
    if steady:
        print(steady_table(steady), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

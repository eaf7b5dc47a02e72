"""Compile and run every example and feature program once on the GPU; compare with the
interpreter.

    python tests/backend/gpu_examples_main.py            # a table, exit status 1 on a mismatch
    compute-sanitizer --tool memcheck python tests/backend/gpu_examples_main.py
    compute-sanitizer --tool racecheck python tests/backend/gpu_examples_main.py
    compute-sanitizer --tool synccheck python tests/backend/gpu_examples_main.py release
                                                          # only the cases naming "release"

Each program runs on torch CUDA tensors through `backend.compile` (for the current GPU's
architecture) and on NumPy copies of the same arguments through `ir.run_reference`; every array
argument must come back with the same bytes (within a tolerance for programs with inexact
operations: `exp` and friends). The table also shows each kernel's registers per thread, its
local memory per thread (spills: 0 when the register arrays stayed in registers) and the
number of ptxas's notes of lost performance (`CompiledKernel.performance_losses`, each also
printed as a `PerformanceWarning`). The functions
here are also what test_gpu_differential.py uses to run programs on the GPU. Needs torch and a
CUDA device.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from backend import compile
from backend.compile import CompiledKernel
from backend.tensor_core import MmaPlan
from backend.wgmma import WgmmaPlan
from ir import dtypes, run_reference
from ir.dtypes import DataType
from ir.program import Program
from ir.specialize import specialize
from ir.testing import codes_match
from ir.values import ArrayParam

_STORAGE = {16: np.int16, 32: np.int32}


def load_sibling(name: str, filename: str) -> Any:
    """Import a module of this directory by file name (the tests have no packages)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(filename))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def to_device(array: np.ndarray, element_bits: int) -> Any:
    """A CUDA torch tensor holding the bytes of `array`, of the storage dtype the kernel
    accepts for `element_bits`-bit elements (int16 / int32 for 16 / 32 bits, else uint8),
    padded with zero bytes to a whole number of items."""
    import torch

    data = np.ascontiguousarray(array).view(np.uint8).ravel()
    storage = _STORAGE.get(element_bits, np.uint8)
    item = np.dtype(storage).itemsize
    padded = np.zeros(-(-max(data.size, 1) // item) * item, dtype=np.uint8)
    padded[: data.size] = data
    return torch.from_numpy(padded.view(storage)).cuda()


def from_device(tensor: Any, nbytes: int) -> np.ndarray:
    """The first `nbytes` bytes of a CUDA tensor, as a uint8 NumPy array."""
    return tensor.cpu().numpy().view(np.uint8)[:nbytes].copy()


def run_on_gpu(kernel: CompiledKernel, arguments: Sequence[Any], grid: Sequence[int]) -> list[Any]:
    """Launch `kernel` on copies of `arguments` (NumPy arrays become CUDA tensors) and return
    the arguments afterwards (arrays as uint8 NumPy arrays of their original byte size)."""
    import torch

    params = kernel.program.params
    launched = []
    for param, value in zip(params, arguments):
        if isinstance(param, ArrayParam):
            launched.append(to_device(value, param.dtype.nbits))
        else:
            launched.append(value)
    kernel(*launched, grid=tuple(grid))
    torch.cuda.synchronize()
    results = []
    for param, value, device in zip(params, arguments, launched):
        if isinstance(param, ArrayParam):
            results.append(from_device(device, np.asarray(value).view(np.uint8).size))
        else:
            results.append(value)
    return results


def run_reference_copy(
    program: Program, arguments: Sequence[Any], grid: Sequence[int]
) -> list[Any]:
    """`ir.run_reference` on copies of `arguments`; the arguments afterwards (arrays as uint8)."""
    copies = [
        np.ascontiguousarray(a).view(np.uint8).ravel().copy() if isinstance(a, np.ndarray) else a
        for a in arguments
    ]
    run_reference(program, *copies, grid=tuple(grid))
    return copies


def compare(
    program: Program,
    actual: Sequence[Any],
    expected: Sequence[Any],
    exact: bool,
    atol: float = 1e-6,
) -> list[str]:
    """Descriptions of the array arguments that differ (empty when all match).

    Arrays must hold identical bytes, except that in arrays of a float type a NaN the
    interpreter computed matches any NaN of its sign (`ir.testing.codes_match`: a computed
    NaN's payload is not specified; a moved one must be identical), and, for
    programs with inexact operations (`exact` False), values within a relative 2e-3 (absolute
    `atol`) match.
    """
    problems = []
    for param, got, want in zip(program.params, actual, expected):
        if not isinstance(param, ArrayParam) or np.array_equal(got, want):
            continue
        dtype = param.dtype
        if not dtype.is_float:
            bad = np.flatnonzero(got != want)
            problems.append(
                f"{param.name}: {bad.size} of {got.size} bytes differ, first at byte {bad[0]}: "
                f"{got[bad[0]]:#04x} != {want[bad[0]]:#04x}"
            )
            continue
        count = got.size * 8 // dtype.nbits
        got_codes = dtypes.unpack(got, dtype, count)
        want_codes = dtypes.unpack(want, dtype, count)
        got_values = dtype.decode(got_codes).astype(np.float64)
        want_values = dtype.decode(want_codes).astype(np.float64)
        ok = codes_match(dtype, got_codes, want_codes)
        if not exact:
            with np.errstate(invalid="ignore"):
                ok |= np.abs(got_values - want_values) <= atol + 2e-3 * np.abs(want_values)
        if not ok.all():
            bad = np.flatnonzero(~ok)
            problems.append(
                f"{param.name}: {bad.size} of {count} elements differ, first at {bad[0]}: "
                f"{got_values[bad[0]]} != {want_values[bad[0]]}"
            )
    return problems


def uses_tensor_cores(kernel: CompiledKernel) -> bool:
    """Whether a dot of the kernel runs on ``mma.sync`` or ``wgmma`` (then it equals the
    interpreter within rounding only: the tensor core adds the products of a k step in its own
    order)."""
    return any(isinstance(plan, (MmaPlan, WgmmaPlan)) for plan in kernel.plans)


MMA_ATOL = 1e-2
"""Absolute tolerance for results of tensor-core dots (sums of a few dozen products of order 1)."""


def example_cases(emulated: Any) -> list[tuple[str, Program, list[Any], tuple[int, ...], bool]]:
    """The examples at sizes that span several blocks and cut tiles at the edges."""
    from ir.examples.matmul import matmul
    from ir.examples.quantized_matmul import quantized_matmul
    from ir.examples.softmax import row_softmax
    from ir.examples.vector_add import vector_add

    rng = np.random.default_rng(23)

    def packed(dtype: DataType, count: int) -> np.ndarray:
        return emulated.packed_codes(rng, dtype, count)

    cases = []
    n = 100_003
    cases.append(
        (
            "vector_add f16",
            vector_add(),
            [n, *(packed(dtypes.f16, n) for _ in range(3))],
            (98,),
            True,
        )
    )
    for dtype in (dtypes.bf16, dtypes.u4, dtypes.f8e4m3):
        program = vector_add(dtype, 128, 1024)
        cases.append(
            (
                f"vector_add {dtype}",
                program,
                [5001, *(packed(dtype, 5001) for _ in range(3))],
                (5,),
                True,
            )
        )
    rows = 301
    cases.append(
        (
            "row_softmax",
            row_softmax(),
            [rows, packed(dtypes.f16, rows * 128), packed(dtypes.f16, rows * 128)],
            (76,),
            False,
        )
    )
    m, n, k = 130, 200, 96
    cases.append(
        (
            "matmul",
            matmul(),
            [
                m,
                n,
                k,
                packed(dtypes.f16, m * k),
                packed(dtypes.f16, k * n),
                packed(dtypes.f16, m * n),
            ],
            (4, 3),
            True,
        )
    )
    for weight in (
        dtypes.u4,
        dtypes.i4,
        dtypes.f4e2m1,
        dtypes.f6e3m2,
        dtypes.i3,
        dtypes.u8,
        dtypes.f8e5m2,
        dtypes.u1,
    ):
        m, n, k = 70, 136, 256
        scales = packed(dtypes.f16, -(-k // 128) * n)
        arguments = [
            m,
            n,
            k,
            packed(dtypes.f16, m * k),
            packed(weight, k * n),
            scales,
            packed(dtypes.f16, m * n),
        ]
        cases.append(
            (f"quantized_matmul {weight}", quantized_matmul(weight), arguments, (3, 2), True)
        )
    return cases + decode_cases(rng)


RINGED_STREAM_K = {
    "units_k": 8,
    "late_scale": True,
    "weights_as_a": True,
    "units_m": 2,
    "stream_k": 3,
}
"""The options of the decode space's ringed stream-K form at 16 rows, less its ring."""

DECODE_CASES = [
    # (weight type, activation type, zero points, configuration): the decode kernel's paths -
    # late scales, the fused split-k sum (atomic tickets), partial sums for a second launch,
    # zero points with bf16 activations, a deep register ring, stream-K (persistent blocks
    # sharing the tiles' k-tiles, tickets per tile).
    (dtypes.i2, dtypes.f16, False, {"units_k": 8, "late_scale": True, "warps": 2}),
    (dtypes.u4, dtypes.bf16, True, {"split": 2, "depth": 2}),
    (dtypes.i3, dtypes.f16, False, {"split": 4, "units_k": 2, "fused_sum": False}),
    (dtypes.f4e2m1, dtypes.f16, False, {"units_k": 2, "depth": 3, "unroll": 3}),
    (dtypes.i8, dtypes.bf16, False, {"warps": 1, "units_k": 8, "split": 4}),
    (dtypes.i2, dtypes.f16, False, {"units_k": 8, "late_scale": True, "weights_as_a": True}),
    (dtypes.u4, dtypes.bf16, True, {"split": 2, "weights_as_a": True}),
    (dtypes.i4, dtypes.f16, False, {"units_k": 4, "units_m": 2}),
    (dtypes.i2, dtypes.f16, False, {"units_k": 8, "late_scale": True, "stream_k": 3}),
    (
        dtypes.u4,
        dtypes.bf16,
        True,
        {
            "warps": 1,
            "weights_as_a": True,
            "stream_k": 5,
            "programmatic_launch": True,
            "late_trigger": True,
        },
    ),
    (dtypes.i3, dtypes.f16, False, {"split": 2, "programmatic_launch": True}),
    # A shared ring of weights and activations, S - 1 k-tiles ahead; each thread reads back
    # the weight words it copied itself, with no barrier (racecheck checks that claim).
    (dtypes.i4, dtypes.f16, False, {"units_k": 8, "late_scale": True, "stages": 3, "split": 2}),
    (dtypes.u2, dtypes.bf16, True, {"units_k": 4, "weights_as_a": True, "stages": 4}),
    # ... of 3- and 6-bit words, each thread's words of a k-tile together in the stage,
    # padded to an odd number of 16-byte vectors (`weight_ring_layout`).
    (dtypes.i3, dtypes.f16, False, {"units_k": 8, "late_scale": True, "stages": 3, "split": 2}),
    (dtypes.u6, dtypes.bf16, True, {"units_k": 2, "weights_as_a": True, "stages": 2}),
    (dtypes.i8, dtypes.f16, False, {"warps": 2, "units_k": 2, "stages": 2, "stream_k": 3}),
    # ... the search space's ringed stream-K forms at 16 rows (two 8-row blocks, unrolled
    # twice): 4 k-tiles on 3 blocks, the first tile's two k-tiles on two blocks; two stages,
    # and three (the stage numbered by the k-tile's own index, not a constant of the unrolled
    # copy: the ring deep enough for three blocks an SM).
    *(
        (dtypes.i4, dtypes.f16, False, {**RINGED_STREAM_K, "stages": stages, "unroll": 2})
        for stages in (2, 3)
    ),
    # ... its activations bulk-copied and released (no block barrier), the weights too.
    (
        dtypes.i4,
        dtypes.f16,
        False,
        {"units_k": 8, "weights_as_a": True, "stages": 3, "release": True},
    ),
    (
        dtypes.u2,
        dtypes.bf16,
        True,
        {"units_k": 4, "stages": 4, "split": 2, "release": True, "bulk_weights": True},
    ),
    # A float's bias moved to the late scale: its cast places bits with no fma.
    (dtypes.f4e2m1, dtypes.f16, False, {"units_k": 8, "late_scale": True, "weights_as_a": True}),
    (dtypes.f6e3m2, dtypes.f16, False, {"warps": 2, "units_k": 8, "late_scale": True}),
    (
        dtypes.i4,
        dtypes.f16,
        False,
        {
            "units_k": 8,
            "late_scale": True,
            "split": 2,
            "programmatic_launch": True,
            "late_trigger": True,
        },
    ),
    # The parts added into one f32 sum by combining stores (red.global.add), split and
    # stream-K: the GPU adds them in its own order, within the tensor-core tolerance.
    (
        dtypes.i4,
        dtypes.f16,
        False,
        {"units_k": 8, "late_scale": True, "weights_as_a": True, "split": 4, "combine_parts": True},
    ),
    (
        dtypes.u3,
        dtypes.bf16,
        True,
        {"warps": 2, "units_k": 2, "stream_k": 3, "combine_parts": True},
    ),
    # The slots' parts loaded in batches by the last block (same bits as one at a time):
    # three a step at split 8 (slots 1-6, then 7 alone), two a step of stream-K's parts.
    (
        dtypes.i4,
        dtypes.f16,
        False,
        {
            "warps": 2,
            "units_k": 8,
            "late_scale": True,
            "weights_as_a": True,
            "split": 8,
            "parts_batch": 3,
        },
    ),
    (dtypes.u3, dtypes.bf16, True, {"warps": 2, "units_k": 2, "stream_k": 3, "parts_batch": 2}),
    # Two a step in the search space's M = 16 form: two 8-row blocks, a shared ring, split 8.
    (
        dtypes.i4,
        dtypes.f16,
        False,
        {
            "units_k": 8,
            "late_scale": True,
            "weights_as_a": True,
            "units_m": 2,
            "stages": 4,
            "unroll": 4,
            "split": 8,
            "parts_batch": 2,
        },
    ),
    # The magic numbers' biases kept by the cast and taken out by a dot of their negation.
    (dtypes.i4, dtypes.f16, False, {"units_k": 8, "late_scale": True, "magic_bias": True}),
    (
        dtypes.i2,
        dtypes.f16,
        False,
        {"units_k": 8, "late_scale": True, "magic_bias": True, "weights_as_a": True, "units_m": 2},
    ),
    (
        dtypes.u4,
        dtypes.bf16,
        False,
        {"units_k": 8, "late_scale": True, "magic_bias": True, "stages": 3, "split": 2},
    ),
    (
        dtypes.i8,
        dtypes.f16,
        False,
        {"warps": 2, "units_k": 8, "late_scale": True, "magic_bias": True},
    ),
    (
        dtypes.u3,
        dtypes.f16,
        False,
        {"units_k": 8, "late_scale": True, "magic_bias": True, "weights_as_a": True},
    ),
    # Each k16 step's words refilled in place with the next k-tile's: the weights as A with
    # the late scale and a split, two row blocks, zero points with bf16.
    (
        dtypes.i4,
        dtypes.f16,
        False,
        {
            "units_k": 8,
            "split": 2,
            "late_scale": True,
            "weights_as_a": True,
            "refill_in_place": True,
        },
    ),
    (
        dtypes.i2,
        dtypes.f16,
        False,
        {
            "units_k": 8,
            "late_scale": True,
            "weights_as_a": True,
            "units_m": 2,
            "refill_in_place": True,
        },
    ),
    (dtypes.u4, dtypes.bf16, True, {"warps": 2, "units_k": 4, "refill_in_place": True}),
    # The 16-row tiling with the late scale (the search space's M = 16 twins), 8-bit words.
    (
        dtypes.i8,
        dtypes.f16,
        False,
        {"warps": 2, "units_k": 8, "late_scale": True, "refill_in_place": True},
    ),
    # Refilled in place with the biases kept (a dot of a step's negated biases a step): the
    # weights as A in one 8-row block, and the 16-row tiling.
    (
        dtypes.i2,
        dtypes.f16,
        False,
        {
            "warps": 2,
            "units_k": 8,
            "late_scale": True,
            "weights_as_a": True,
            "magic_bias": True,
            "refill_in_place": True,
        },
    ),
    (
        dtypes.i4,
        dtypes.f16,
        False,
        {"units_k": 8, "late_scale": True, "magic_bias": True, "refill_in_place": True},
    ),
    # The weights prefetched into L2 four k-tiles ahead (three past the register ring), with
    # zero points, two row blocks and a split.
    (
        dtypes.u3,
        dtypes.f16,
        True,
        {"units_k": 4, "units_m": 2, "split": 2, "prefetch_distance": 4},
    ),
    # The scale and zero-point rows two k-tiles ahead in a ring of their own, with the weights'
    # scales and a split.
    (dtypes.u4, dtypes.bf16, True, {"units_k": 2, "split": 2, "rows_ahead": 2}),
]


def decode_cases(
    rng: np.random.Generator,
) -> list[tuple[str, Program, list[Any], tuple[int, ...], bool]]:
    """The register-dequant decode kernel (`ir.examples.register_dequant_matmul`) in the
    configurations of `DECODE_CASES`, its split-k sum and its packing program, at sizes of a
    few tiles with m not a multiple of the mma's 16 rows; then the other tensor-core and
    packed-weight programs (`dequantize_cases`, `matmul_cases`)."""
    from ir.examples.packed_weights import pack_scales, pack_weights, pack_weights_program
    from ir.examples.register_dequant_matmul import (
        DequantConfig,
        register_dequant_matmul,
        split_k_sum,
    )

    group = 128
    cases = []
    for weight, activation, zero_points, options in DECODE_CASES:
        config = DequantConfig(**options)
        text = " ".join(f"{key}={value}" for key, value in options.items())
        m, n = 5, config.block_n * 2
        k = max(group, config.block_k * config.split * 2)
        k = math.lcm(k, config.block_k * config.split)
        codes = rng.integers(0, 1 << weight.nbits, (k, n))
        weights, _ = pack_weights(codes, weight)
        groups = -(-k // group)
        scales = rng.uniform(0.5, 1.5, (groups, n)) / 2 ** (weight.nbits - 1)
        scale_codes = activation.encode(scales.astype(np.float32)).astype(np.uint16)
        # Activations small enough that each output is below 2, where one ulp of bf16 is
        # within the comparison's absolute tolerance (the tensor core sums in its own order).
        a = activation.encode(rng.uniform(-1, 1, m * k).astype(np.float32) / 32)
        arguments = [m, n, k, dtypes.pack(a, activation), weights, pack_scales(scale_codes)]
        if zero_points:
            zeros = rng.integers(0, 1 << weight.nbits, (groups, n)).astype(np.float32)
            arguments.append(pack_scales(activation.encode(zeros).astype(np.uint16)))
        fused = (config.split > 1 or config.stream_k > 0) and config.fused_sum
        if fused:
            parts = config.stream_k_slots(m, n, k) if config.stream_k else config.split
            arguments += [
                np.zeros(parts * m * n, np.float32),
                np.zeros(config.tiles(m, n), np.int32),
            ]
        partial_sums = config.split > 1 and not config.fused_sum
        out_dtype = np.float32 if partial_sums else np.uint16
        arguments.append(np.zeros((config.split if partial_sums else 1) * m * n, out_dtype))
        program = register_dequant_matmul(
            weight, group, config, activation_dtype=activation, zero_points=zero_points
        )
        program = specialize(program, {"n": n, "k": k})  # n and k are compile-time constants
        name = f"decode {weight} {activation} {text}"
        cases.append((name, program, arguments, config.grid(m, n, k), True))
        if partial_sums:
            parts = rng.uniform(-4, 4, config.split * m * n).astype(np.float32)
            sums = [m * n, parts, np.zeros(m * n, np.uint16)]
            grid = (-(-m * n // 512),)
            cases.append(
                (f"split_k_sum {config.split}", split_k_sum(config.split), sums, grid, True)
            )
    cases += prefill_cases(rng)
    k, n = 48, 256
    codes = rng.integers(0, 1 << 4, (k, n))
    source = dtypes.pack(codes.ravel(), dtypes.i4)
    target = np.zeros(pack_weights(codes, dtypes.i4)[0].size, np.int32)
    cases.append(
        (
            "pack_weights_program i4",
            pack_weights_program(dtypes.i4, 2),
            [n, k, source, target],
            (n // 128, k // 16),
            True,
        )
    )
    return cases + dequantize_cases(rng) + matmul_cases(rng)


FRAGMENT_TILE = {
    "block_m": 256,
    "stages": 4,
    "unroll": 2,
    "min_blocks_per_sm": 1,
    "overlap_dot": True,
    "release": True,
    "producer": True,
    "producer_registers": 24,
    "warp_columns": 16,
}
"""The prefill cases' 256-row tile of fragments: each warp one A fragment of its warpgroup's
unit, a producer warpgroup, the dot in flight."""

STAGED_BATCH_TILE = {
    **FRAGMENT_TILE,
    "warpgroups": 2,
    "units_k": 8,
    "stages": 3,
    "depth": 2,
    "staged_store": True,
}
"""QuantizedLinear's staged 128 x 256 tile: two consumer warpgroups over 256 rows, 128-deep
k-tiles in three stages, C staged in the ring's memory."""

WIDE_FRAGMENT_TILE = {
    **FRAGMENT_TILE,
    "warpgroups": 2,
    "units_n": 2,
    "block_m": 128,
    "units_k": 4,
    "stages": 4,
    "depth": 1,
    "refill_in_place": True,
    "staged_store": True,
}
"""The fragment tile two units a warpgroup wide: 256 columns by 128 rows, 64-deep k-tiles in
four stages, the weights refilled in place, C staged."""

IN_FLIGHT_K128 = {"block_m": 16, "units_k": 8, "stages": 3, "unroll": 2, "overlap_dot": True}
"""A 16-row tile of 128-deep k-tiles, unrolled twice with each k-tile's dot in flight and no
producer (so the CPU emulation runs its variants)."""

PREFILL_CASES = [
    # (weight type, activation type, zero points, program, its config fields, k-tiles);
    # "register": `wgmma_dequant_matmul`, "staged": `staged_dequant_matmul`.
    (dtypes.i4, dtypes.f16, False, "register", {"stages": 3}, 6),
    (dtypes.u4, dtypes.bf16, True, "register", {"block_m": 24, "units_k": 2, "depth": 2}, 5),
    # Unrolled twice in the overlapped order: each copy's wgmma left in flight.
    (dtypes.i4, dtypes.f16, False, "register", {"units_k": 2, "unroll": 2, "overlap_dot": True}, 8),
    # The k-tile's dot as a chain of k16 steps, waited for once.
    (dtypes.i4, dtypes.f16, False, "register", {"split_dot": True}, 6),
    # ... each copy's chain in flight into the next copy.
    (
        dtypes.i4,
        dtypes.f16,
        False,
        "register",
        {"units_k": 2, "unroll": 2, "overlap_dot": True, "split_dot": True},
        8,
    ),
    # k split over grid z: each block's f32 part, the tile's last block adding them up.
    (dtypes.i4, dtypes.f16, False, "register", {"block_m": 24, "units_k": 2, "split": 3}, 6),
    (
        dtypes.u4,
        dtypes.bf16,
        True,
        "register",
        {"units_k": 2, "unroll": 2, "overlap_dot": True, "split_dot": True, "split": 2},
        8,
    ),
    # Stream-K: persistent blocks sharing both tiles' k-tiles, parts added in k order.
    (dtypes.i4, dtypes.f16, False, "register", {"block_m": 24, "units_k": 2, "stream_k": 5}, 6),
    (
        dtypes.u4,
        dtypes.bf16,
        True,
        "register",
        {"units_k": 2, "unroll": 2, "overlap_dot": True, "split_dot": True, "stream_k": 3},
        8,
    ),
    # C staged through a shared tile and stored in 16-byte runs along its rows: alone (a
    # partial last tile of rows), with a producer warpgroup, and in stream-K's whole tiles.
    (dtypes.i4, dtypes.f16, False, "register", {"stages": 3, "staged_store": True}, 6),
    (
        dtypes.u4,
        dtypes.bf16,
        True,
        "register",
        {
            "stages": 4,
            "release": True,
            "producer": True,
            "producer_registers": 24,
            "staged_store": True,
        },
        7,
    ),
    (
        dtypes.i4,
        dtypes.f16,
        False,
        "register",
        {"block_m": 24, "units_k": 2, "stream_k": 5, "staged_store": True},
        6,
    ),
    # The data-parallel and stream-K hybrid: the first row tile whole, the second the
    # stream-K block's.
    (
        dtypes.i4,
        dtypes.f16,
        False,
        "register",
        {"block_m": 16, "units_k": 2, "stages": 3, "stream_k": 1, "stream_k_tail": True},
        6,
    ),
    # The last partial wave's tiles split along k (`tail_wave`), three row tiles on waves of
    # two: the first two whole (C staged in the ring's memory, the dot in flight), the third
    # in halves; with zero points and bf16, in two of at most three parts.
    (
        dtypes.i4,
        dtypes.f16,
        False,
        "register",
        {
            "block_m": 16,
            "units_k": 2,
            "stages": 3,
            "unroll": 2,
            "overlap_dot": True,
            "staged_store": True,
            "split": 2,
            "tail_wave": 2,
            "row_tiles": 3,
        },
        8,
    ),
    (
        dtypes.u4,
        dtypes.bf16,
        True,
        "register",
        {"block_m": 24, "units_k": 2, "split": 3, "tail_wave": 2, "row_tiles": 3},
        6,
    ),
    # Tile rows launched in groups (block (x, y, z) computes tile (z * group_m + x, y)),
    # more rows to a group than the two tile rows: the grid's x clamped to them.
    (
        dtypes.i8,
        dtypes.f16,
        False,
        "register",
        {
            "warpgroups": 2,
            "block_m": 16,
            "units_k": 2,
            "warp_columns": 16,
            "staged_store": True,
            "group_m": 4,
        },
        4,
    ),
    # The 128 x 256 tile with 128-deep k-tiles, C staged in the ring's memory once the
    # consumers' barrier has passed their last reads of it.
    (
        dtypes.i4,
        dtypes.f16,
        False,
        "register",
        STAGED_BATCH_TILE,
        6,
    ),
    # The same tile in clusters of two column tiles: each block issues half of every
    # activation copy into both blocks' rings (TMA multicast), two row tiles by two columns.
    (
        dtypes.i4,
        dtypes.f16,
        False,
        "register",
        {**STAGED_BATCH_TILE, "cluster_n": 2, "row_tiles": 2, "column_tiles": 2},
        6,
    ),
    # Each warp one A fragment of its warpgroup's unit: 256 rows with a producer warpgroup and
    # the dot in flight; two warpgroups and a split with zero points.
    (
        dtypes.i4,
        dtypes.f16,
        False,
        "register",
        FRAGMENT_TILE,
        6,
    ),
    (
        dtypes.u8,
        dtypes.bf16,
        True,
        "register",
        {"warpgroups": 2, "block_m": 32, "units_k": 2, "split": 2, "warp_columns": 16},
        6,
    ),
    # Each k-tile's ring stage released by the warps' arrivals, not a block barrier: one
    # warpgroup, two, and k split over grid z.
    (dtypes.i4, dtypes.f16, False, "register", {"stages": 3, "release": True}, 8),
    (
        dtypes.u4,
        dtypes.bf16,
        True,
        "register",
        {"warpgroups": 2, "block_m": 24, "units_k": 2, "release": True},
        7,
    ),
    (dtypes.i4, dtypes.f16, False, "register", {"split": 2, "stages": 2, "release": True}, 8),
    # The copies from a producer warp (thread groups), released by the consumer warpgroups.
    (dtypes.i4, dtypes.f16, False, "register", {"stages": 3, "release": True, "producer": True}, 8),
    (
        dtypes.u4,
        dtypes.bf16,
        True,
        "register",
        {"warpgroups": 2, "block_m": 24, "units_k": 2, "release": True, "producer": True},
        7,
    ),
    # A producer warpgroup keeping 24 registers a thread, the consumers the rest; and with k
    # split in three, the consumers adding the parts.
    (
        dtypes.i4,
        dtypes.f16,
        False,
        "register",
        {"stages": 3, "release": True, "producer": True, "producer_registers": 24},
        8,
    ),
    (
        dtypes.u4,
        dtypes.f16,
        True,
        "register",
        {"split": 3, "release": True, "producer": True, "producer_registers": 24},
        9,
    ),
    # The release of the k-tile before, the dot kept running (with the producer warpgroup).
    (
        dtypes.i4,
        dtypes.f16,
        False,
        "register",
        {
            "unroll": 2,
            "release": True,
            "overlap_dot": True,
            "producer": True,
            "producer_registers": 24,
        },
        10,
    ),
    # Stream-K with the producer warpgroup: the loop over segments warp-specialised, each
    # segment's copies waiting for the consumers' releases of the one before; and with the
    # dot in flight, each segment releasing its last stage.
    (
        dtypes.u4,
        dtypes.bf16,
        True,
        "register",
        {"stream_k": 3, "release": True, "producer": True, "producer_registers": 24},
        7,
    ),
    (
        dtypes.i4,
        dtypes.f16,
        False,
        "register",
        {
            "units_k": 2,
            "unroll": 2,
            "stream_k": 5,
            "release": True,
            "overlap_dot": True,
            "producer": True,
            "producer_registers": 24,
        },
        10,  # whole runs of two k-tiles (unrolled twice, the stream-K granule)
    ),
    # One persistent block for the tiles of both row blocks in turn, C staged (the second
    # tile partial).
    (
        dtypes.u4,
        dtypes.f16,
        False,
        "register",
        {"block_m": 16, "units_k": 2, "stages": 3, "persistent": 1, "staged_store": True},
        4,
    ),
    # The weights dequantized into shared tiles by every warp, the dot in flight.
    (dtypes.i4, dtypes.f16, False, "staged", {"block_m": 64}, 7),
    (dtypes.u3, dtypes.bf16, True, "staged", {"warpgroups": 2, "k_warps": 2, "block_m": 40}, 5),
    # Each 64-deep activation panel waited for alone before its own dot: a 128-deep k-tile in
    # two dots, unrolled and in flight without a producer (the CPU emulation runs it), with the
    # fragment tile's producer and C staged.
    (
        dtypes.i8,
        dtypes.f16,
        False,
        "register",
        {**IN_FLIGHT_K128, "release": True, "panel_waits": True},
        4,
    ),
    (
        dtypes.i4,
        dtypes.f16,
        False,
        "register",
        {**STAGED_BATCH_TILE, "panel_waits": True},
        6,
    ),
    # Three consumer warpgroups of fragment columns, C staged: 192 x 128 with a producer
    # warpgroup, the dot in flight and the weights refilled in place (QuantizedLinear's tile),
    # and 192 x 32 without (the CPU emulation runs it).
    (
        dtypes.i8,
        dtypes.f16,
        False,
        "register",
        {
            **STAGED_BATCH_TILE,
            "warpgroups": 3,
            "block_m": 128,
            "stages": 4,
            "depth": 1,
            "refill_in_place": True,
        },
        6,
    ),
    (
        dtypes.i8,
        dtypes.f16,
        False,
        "register",
        {
            "warpgroups": 3,
            "warp_columns": 16,
            "block_m": 32,
            "units_k": 2,
            "stages": 3,
            "staged_store": True,
        },
        4,
    ),
    # The next k-tile's words loaded into the registers of the one just dequantized, the dot
    # in flight (the CPU emulation runs it).
    (dtypes.u4, dtypes.f16, False, "register", {**IN_FLIGHT_K128, "refill_in_place": True}, 5),
    # The fragment tile two units a warpgroup wide (256 columns by 128 rows, 64-deep k-tiles),
    # refilled in place, C staged: alone (a partial second row tile), and in clusters of two
    # column tiles with the activations multicast.
    *(
        (
            weight,
            dtypes.f16,
            False,
            "register",
            {**WIDE_FRAGMENT_TILE, "row_tiles": 2, **fields},
            6,
        )
        for weight, fields in (
            (dtypes.i8, {}),
            (dtypes.i4, {"cluster_n": 2, "column_tiles": 2}),
        )
    ),
]


def prefill_cases(
    rng: np.random.Generator,
) -> list[tuple[str, Program, list[Any], tuple[int, ...], bool]]:
    """The prefill forms of the packed-weight matmul (`ir.examples.wgmma_dequant_matmul`: wgmma
    with A from registers, activations by TMA into a transposed ring;
    `ir.examples.staged_dequant_matmul`: the weights dequantized into shared tiles, both
    operands by descriptors) in the configurations of `PREFILL_CASES`, with m past one row
    block (or the case's ``row_tiles``), one column block (or ``column_tiles``) and the rings
    wrapping."""
    from ir.examples.packed_weights import pack_scales, pack_weights
    from ir.examples.staged_dequant_matmul import StagedDequantConfig, staged_dequant_matmul
    from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig, wgmma_dequant_matmul
    from ir.testing.quantized_problems import launch_workspace

    forms = {
        "register": (WgmmaDequantConfig, wgmma_dequant_matmul),
        "staged": (StagedDequantConfig, staged_dequant_matmul),
    }
    cases = []
    for weight, activation, zero_points, form, options, tiles in PREFILL_CASES:
        config_type, build = forms[form]
        # m past one row tile, or past `row_tiles` of them where the case says.
        shape = ("row_tiles", "column_tiles")
        fields = {key: value for key, value in options.items() if key not in shape}
        config = config_type(**fields)
        m = config.block_m * options.get("row_tiles", 1) + 3
        n, k = config.block_n * options.get("column_tiles", 1), config.block_k * tiles
        group = config.block_k
        weights, _ = pack_weights(rng.integers(0, 1 << weight.nbits, (k, n)), weight)
        scales = rng.uniform(0.5, 1.5, (k // group, n)) / 2 ** (weight.nbits - 1)
        rows = [scales] + (
            [rng.integers(0, 1 << weight.nbits, (k // group, n))] if zero_points else []
        )
        rows = [
            pack_scales(activation.encode(row.astype(np.float32)).astype(np.uint16)) for row in rows
        ]
        a = activation.encode(rng.uniform(-1, 1, m * k).astype(np.float32) / 32)
        program = build(weight, group, config, activation_dtype=activation, zero_points=zero_points)
        # With a split or stream-K: the f32 parts and the zeroed tile counters.
        workspace = launch_workspace(program, config, m, n, k)
        arguments = [
            m,
            n,
            k,
            dtypes.pack(a, activation),
            weights,
            *rows,
            *workspace,
            np.zeros(m * n, np.uint16),
        ]
        program = specialize(program, {"n": n, "k": k})
        text = " ".join(f"{key}={value}" for key, value in options.items())
        cases.append(
            (
                f"prefill {form} {weight} {activation} {text}",
                program,
                arguments,
                config.grid(m, n, k),
                True,
            )
        )
    return cases


WARPGROUP_TILE = {"num_threads": 256, "block_m": 128, "block_n": 128, "block_k": 64, "stages": 4}
"""The warpgroup cases' tile: two warpgroups, 128 x 128 x 64, four stages."""

MATMUL_CASES = [
    # Options of `ir.examples.matmul` on tensor cores: a ring of 3 and of 4 swizzled stages.
    {"num_threads": 256, "block_m": 128, "block_n": 128, "stages": 3, "swizzle": True},
    {"stages": 4, "swizzle": True, "inner_k": 32},
    # The warpgroup form: wgmma reading both operands from shared memory on sm_90a.
    {**WARPGROUP_TILE, "stages": 3, "wgmma": True},
    {"block_k": 64, "wgmma": True},
    # Its ring ordered for a dot in flight: each k-tile's wgmma runs on into the next.
    {**WARPGROUP_TILE, "wgmma": True, "overlap_dot": True},
    # Bulk copies: on sm_90a a TMA copy per tile (per 64-column panel of the wgmma B) on a
    # barrier per stage, partial tiles filled with zeros by the tensor map; the last also takes
    # its tiles in groups of two tile rows.
    {"stages": 3, "swizzle": True, "bulk": True},
    {**WARPGROUP_TILE, "wgmma": True, "bulk": True},
    {
        **WARPGROUP_TILE,
        "block_n": 256,
        "wgmma": True,
        "overlap_dot": True,
        "bulk": True,
        "group_m": 2,
    },
    # A producer warp issuing the bulk copies against the consumers' releases (warp-specialised
    # on sm_90a); then persistent blocks, fewer than the tiles, so that a block's producer
    # copies its next tile while its consumers store the last, and persistent blocks with no
    # producer (a barrier between tiles).
    {
        **WARPGROUP_TILE,
        "block_n": 256,
        "wgmma": True,
        "overlap_dot": True,
        "bulk": True,
        "producer": True,
    },
    {
        **WARPGROUP_TILE,
        "wgmma": True,
        "overlap_dot": True,
        "bulk": True,
        "producer": True,
        "persistent": 3,
        "group_m": 2,
    },
    {"stages": 3, "swizzle": True, "bulk": True, "persistent": 3},
    # C's tile staged through shared memory and stored in whole rows: in the ring's memory
    # (one tile a block), in memory of its own (a producer warp), and with SIMT stages.
    {
        **WARPGROUP_TILE,
        "block_n": 256,
        "wgmma": True,
        "overlap_dot": True,
        "bulk": True,
        "staged_store": True,
    },
    {
        **WARPGROUP_TILE,
        "stages": 3,
        "wgmma": True,
        "overlap_dot": True,
        "bulk": True,
        "producer": True,
        "staged_store": True,
    },
    {"stages": 3, "swizzle": True, "staged_store": True},
    # Four warpgroups stacked along M: 256 x 128 tiles, three boxes a k-tile.
    {
        **WARPGROUP_TILE,
        "num_threads": 512,
        "block_m": 256,
        "wgmma": True,
        "overlap_dot": True,
        "bulk": True,
    },
]


QUANTIZED_RING_CASES = [
    # (weight type, options of `ir.examples.quantized_matmul` on tensor cores)
    (dtypes.u4, {"stages": 3, "swizzle": True}),
    (dtypes.i3, {"num_threads": 256, "block_m": 128, "block_n": 128, "stages": 2}),
    # The warpgroup form: wgmma reading the activations and the dequantized weights from
    # shared memory on sm_90a.
    (dtypes.i4, {"num_threads": 256, "block_m": 128, "block_n": 128, "stages": 3, "wgmma": True}),
    (
        dtypes.i4,
        {
            "num_threads": 256,
            "block_m": 128,
            "block_n": 128,
            "stages": 4,
            "wgmma": True,
            "overlap_dot": True,
        },
    ),
]


def matmul_cases(
    rng: np.random.Generator,
) -> list[tuple[str, Program, list[Any], tuple[int, ...], bool]]:
    """The f16 matmul example on tensor cores with a ring of shared stages (`MATMUL_CASES`), at
    sizes that leave partial tiles in m, n and k and fewer k-tiles than stages in flight; the
    quantized matmul with its ring (`QUANTIZED_RING_CASES`, group size 32)."""
    from ir.examples.matmul import matmul
    from ir.examples.quantized_matmul import quantized_matmul

    cases = []
    for options in MATMUL_CASES:
        block_m, block_n = options.get("block_m", 64), options.get("block_n", 64)
        for m, n, k in ((block_m + 6, block_n + 8, 136), (block_m - 6, block_n, 32)):
            a, b = (
                dtypes.f16.encode(rng.uniform(-1, 1, size).astype(np.float32)).astype(np.uint16)
                for size in (m * k, k * n)
            )
            arguments = [m, n, k, a, b, np.zeros(m * n, np.uint16)]
            grid = (-(-n // block_n), -(-m // block_m))
            if options.get("persistent"):  # the grid it declares
                grid = (min(grid[0] * grid[1], options["persistent"]), 1)
            text = " ".join(f"{key}={value}" for key, value in options.items())
            program = matmul(tensor_cores=True, **options)
            cases.append((f"matmul {text} m={m} n={n} k={k}", program, arguments, grid, True))
    for weight, options in QUANTIZED_RING_CASES:
        block_m, block_n = options.get("block_m", 64), options.get("block_n", 64)
        m, n, k = block_m + 6, block_n + 8, 160
        a = dtypes.f16.encode(rng.uniform(-1, 1, m * k).astype(np.float32)).astype(np.uint16)
        codes = rng.integers(0, 1 << weight.nbits, k * n)
        scales = rng.uniform(0.5, 1.5, (k // 32) * n) / 2 ** (weight.nbits - 1)
        scale_codes = dtypes.f16.encode(scales.astype(np.float32)).astype(np.uint16)
        arguments = [
            m,
            n,
            k,
            a,
            dtypes.pack(codes, weight),
            scale_codes,
            np.zeros(m * n, np.uint16),
        ]
        program = quantized_matmul(weight, group_size=32, tensor_cores=True, **options)
        text = " ".join(f"{key}={value}" for key, value in options.items())
        grid = (-(-n // block_n), -(-m // block_m))
        cases.append((f"quantized_matmul {weight} {text}", program, arguments, grid, True))
    return cases


DEQUANTIZE_CASES = [
    # (weight type, activation type, zero points, group size, warps, units_k)
    (dtypes.i4, dtypes.f16, False, 128, 4, 1),
    (dtypes.u4, dtypes.bf16, True, 64, 2, 2),
    (dtypes.f4e2m1, dtypes.f16, False, 32, 1, 2),
    (dtypes.i3, dtypes.f16, False, 128, 4, 2),
    (dtypes.u8, dtypes.f16, True, 64, 4, 1),
]


def dequantize_cases(
    rng: np.random.Generator,
) -> list[tuple[str, Program, list[Any], tuple[int, ...], bool]]:
    """`ir.examples.dequantize_weights` (packed codes and scales to the dequantized weights)
    in the configurations of `DEQUANTIZE_CASES`, two column blocks by two groups."""
    from ir.examples.dequantize_weights import dequantize_weights_program
    from ir.examples.packed_weights import pack_scales, pack_weights

    cases = []
    for weight, activation, zero_points, group, warps, units_k in DEQUANTIZE_CASES:
        k, n = 2 * group, 2 * 64 * warps
        codes = rng.integers(0, 1 << weight.nbits, (k, n))
        scales = rng.uniform(0.5, 1.5, (k // group, n)) / 2 ** (weight.nbits - 1)
        scale_codes = activation.encode(scales.astype(np.float32)).astype(np.uint16)
        arguments = [n, k, pack_weights(codes, weight)[0], pack_scales(scale_codes)]
        if zero_points:
            zeros = rng.integers(0, 1 << weight.nbits, (k // group, n)).astype(np.float32)
            arguments.append(pack_scales(activation.encode(zeros).astype(np.uint16)))
        arguments.append(np.zeros(k * n, np.uint16))
        program = dequantize_weights_program(
            weight, group, activation, zero_points=zero_points, warps=warps, units_k=units_k
        )
        program = specialize(program, {"n": n, "k": k})  # n and k are compile-time constants
        name = f"dequantize {weight} {activation} zp={zero_points} g{group} w{warps} u{units_k}"
        cases.append((name, program, arguments, (n // (64 * warps), k // (16 * units_k)), True))
    return cases


def main(argv: Sequence[str] = ()) -> int:
    """Run every case, or those whose name holds one of the strings of `argv` (a sanitizer
    run on a few kernels); print one line each and a summary; 0 when all match, else 1."""
    emulated = load_sibling("lower_emulated", "test_lower_emulated.py")
    cases = example_cases(emulated)
    cases += [
        (f"feature {c.name}", c.program, list(c.arguments), c.grid, c.exact)
        for c in emulated.FEATURES
    ]
    if argv:
        cases = [case for case in cases if any(part in case[0] for part in argv)]
    failures = 0
    print(
        f"{'program':<32} {'compile s':>9} {'run s':>7} {'regs':>5} {'local B':>7} "
        f"{'ptxas':>5}  result"
    )
    for name, program, arguments, grid, exact in cases:
        started = time.perf_counter()
        kernel = compile(program)
        compiled = time.perf_counter() - started
        started = time.perf_counter()
        actual = run_on_gpu(kernel, arguments, grid)
        ran = time.perf_counter() - started
        expected = run_reference_copy(program, arguments, grid)
        if uses_tensor_cores(kernel):
            problems = compare(program, actual, expected, False, MMA_ATOL)
        else:
            problems = compare(program, actual, expected, exact)
        failures += bool(problems)
        resources = kernel.resources
        print(
            f"{name:<32} {compiled:>9.2f} {ran:>7.3f} {resources.registers_per_thread:>5} "
            f"{resources.local_bytes:>7} {len(kernel.performance_losses):>5}  "
            f"{'ok' if not problems else problems[0]}"
        )
    print(f"{len(cases) - failures} of {len(cases)} programs match the interpreter")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

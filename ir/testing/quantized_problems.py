"""Quantized-matmul problems for tests: random activations, weight codes and scales, and the
NumPy references of the kernels' arithmetic.

`make_problem(...)` draws a `Problem` (activations, codes, group scales, the dequantized f16
weights); `sequential_partials` is the f32 sum in k order that the interpreter's `dot` defines
(per split of k), `late_scaled_partials` the same for a kernel that scales each group's product,
`ordered_sum` adds partial sums in order and rounds once. `with_tail` makes an output buffer
followed by `TAIL` sentinel elements that no kernel may write. `check_prefill_program` runs a
prefill program of the packed weights in the interpreter against the sequential sum, and
`check_zero_point_program` does so with zero points and f16 or bf16 activations, both with
k split over the grid's z blocks where the program has a split-k sum (`launch_workspace`: a
launch's from its configuration, stream-K's too).
`stream_k_parts` lists the k ranges a stream-K launch computes each output tile in, and
`check_stream_k_program` runs a stream-K program (decode or prefill) against them.
`zero_point_problem(...)` draws the inputs of a kernel with f16 or bf16 activations and
optional zero points (`ZeroPointProblem`), with its arguments in the packed format.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ir import dtypes, run_reference
from ir.dtypes import DataType
from ir.elementwise import fused_multiply_add
from ir.examples.packed_prefill import PrefillTile
from ir.examples.packed_weights import pack_scales, pack_weights
from ir.program import Program
from ir.testing.cases import code_bit_offsets, flush_f32_subnormals


def exact_in_f16(dtype: DataType) -> bool:
    """Whether every finite value of `dtype` is an f16 value: then the kernel's
    ``f16(f16(w) * s)`` is the reference's ``f16(f32(w) * f32(s))``."""
    values = dtype.decode(np.arange(1 << dtype.nbits)).astype(np.float64)
    values = values[np.isfinite(values)]
    with np.errstate(over="ignore"):
        return bool(np.array_equal(values.astype(np.float16).astype(np.float64), values))


F16_WEIGHT_DTYPES = [d for d in dtypes.all_dtypes() if d.nbits <= 8 and exact_in_f16(d)]
SENTINEL = -7.0
TAIL = 8
"""Elements past the end of each output, holding `SENTINEL`: nothing may write them."""


@dataclass
class Problem:
    """One run's inputs: a (m, k) f16, the (k, n) weight codes and their dequantized f16 values."""

    a: np.ndarray
    codes: np.ndarray
    scales: np.ndarray
    dequantized: np.ndarray


def make_problem(dtype: DataType, group_size: int, m: int, n: int, k: int, seed: int) -> Problem:
    """Random activations and finite weight codes; scales in [2, 4] / max |weight| so every
    dequantized weight is of order 1 and nothing overflows f16."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 1 << dtype.nbits, (k, n))
    codes = np.where(np.isfinite(dtype.decode(codes).astype(np.float64)), codes, 0)
    values = dtype.decode(codes).astype(np.float32)
    largest = float(np.abs(values).max()) or 1.0
    groups = -(-k // group_size)
    scales = ((2 + 2 * rng.random((groups, n))) / largest).astype(np.float16)
    per_row = np.repeat(scales.astype(np.float32), group_size, axis=0)[:k]
    dequantized = (values * per_row).astype(np.float16)
    a = rng.standard_normal((m, k)).astype(np.float16)
    return Problem(a, codes, scales, dequantized)


def sequential_partials(a: np.ndarray, w: np.ndarray, split: int) -> list[np.ndarray]:
    """For each of `split` equal k ranges: acc = f32(acc + a[:, k] * w[k, :]) for k in order."""
    size = a.shape[1] // split
    partials = []
    for s in range(split):
        accumulator = np.zeros((a.shape[0], w.shape[1]), dtype=np.float32)
        for kk in range(s * size, (s + 1) * size):
            accumulator = accumulator + a[:, kk : kk + 1].astype(np.float32) * w[kk].astype(
                np.float32
            )
        partials.append(accumulator)
    return partials


def magic_bias_tile(dtype: DataType, activation: DataType, code_layout: Any) -> np.ndarray:
    """The bias each code of a tile keeps in a biased cast (`ir.dtypes.magic_bias`), from its
    local index in `code_layout` (the layout of the codes as viewed from their words)."""
    return dtypes.magic_biases(dtype, activation, code_bit_offsets(code_layout, dtype.nbits))


def late_scaled_partials(
    a: np.ndarray,
    values: np.ndarray,
    scales: np.ndarray,
    group_size: int,
    split: int,
    biases: np.ndarray | None = None,
) -> list[np.ndarray]:
    """`sequential_partials` of a `late_scale` kernel (one k-tile per group): per group, the
    f32 sum in k order of a * f16(w) from zero, times the group's f32 scale and added to the
    split's sum in one rounding (`fused_multiply_add`). With `biases` (k, n) (`magic_bias`),
    each group's sum is of a * (w + bias), plus (one f32 addition) the sum of a * -bias, both
    in k order from zero."""
    size = a.shape[1] // split
    partials = []
    for s in range(split):
        accumulator = np.zeros((a.shape[0], values.shape[1]), dtype=np.float32)
        for start in range(s * size, (s + 1) * size, group_size):
            group_a, group_w = a[:, start : start + group_size], values[start : start + group_size]
            if biases is None:
                (product,) = sequential_partials(group_a, group_w, 1)
            else:
                group_b = biases[start : start + group_size]
                (biased,) = sequential_partials(group_a, group_w.astype(np.float64) + group_b, 1)
                (correction,) = sequential_partials(group_a, -group_b, 1)
                product = biased + correction
            scale = np.broadcast_to(scales[start // group_size].astype(np.float32), product.shape)
            accumulator = fused_multiply_add(product, scale, accumulator)
        partials.append(accumulator)
    return partials


def ordered_sum(partials: list[np.ndarray]) -> np.ndarray:
    """f16(p0 + p1 + ...), the f32 additions in order."""
    total = partials[0]
    for partial in partials[1:]:
        total = total + partial
    return total.astype(np.float16)


def combined_sum(partials: list[np.ndarray]) -> np.ndarray:
    """f16 of the parts added into a zero f32 sum one after another as a combining store adds
    them (``red.global.add.f32``: subnormal operands and results flushed to zero of their
    sign), in the interpreter's order, the parts' order."""
    total = np.zeros_like(partials[0], dtype=np.float32)
    for partial in partials:
        addend = flush_f32_subnormals(partial.astype(np.float32))
        total = flush_f32_subnormals(flush_f32_subnormals(total) + addend)
    return total.astype(np.float16)


def with_tail(size: int, dtype: type) -> np.ndarray:
    """A flat output buffer of `size` elements and `TAIL` more, all `SENTINEL`."""
    return np.full(size + TAIL, SENTINEL, dtype=dtype)


def check_prefill_program(
    program: Program,
    config: Any,
    dtype: DataType,
    group_size: int,
    shape: tuple[int, int, int],
    seed: int,
) -> None:
    """Run `program`, a prefill program of the packed weights of `config` (a ``PrefillTile``;
    ``qmm(m, n, k, a, packed, scales, [partial, counters,] c)``), on a random (m, n, k) `shape`
    of `dtype` codes in the interpreter over the configuration's grid (``config.split``
    parts of k): C must be, bit for bit, the f32 sums in k order of each part of k, added in order
    and rounded once, nothing past C or the workspace written, and the tile counters left
    zero."""
    m, n, k = shape
    problem = make_problem(dtype, group_size, m, n, k, seed)
    packed, _ = pack_weights(problem.codes, dtype)
    grid = config.grid(m, n)
    split, workspace = config.split, launch_workspace(program, config, m, n, k)
    if workspace:
        workspace[0] = with_tail(workspace[0].size, np.float32)
    c = with_tail(m * n, np.float16)
    scales = pack_scales(problem.scales)
    run_reference(program, m, n, k, problem.a, packed, scales, *workspace, c, grid=grid)
    if workspace:
        np.testing.assert_array_equal(workspace[0][-TAIL:], SENTINEL)
    np.testing.assert_array_equal(c[m * n :], SENTINEL)
    for counters in workspace[1:]:
        np.testing.assert_array_equal(counters, 0)
    want = ordered_sum(sequential_partials(problem.a, problem.dequantized, split))
    np.testing.assert_array_equal(c[: m * n].reshape(m, n).view(np.uint16), want.view(np.uint16))


def stream_k_parts(config: Any, m: int, n: int, k: int) -> list[list[range]]:
    """Per output tile of a `stream_k` (or split-tail, ``tail_wave`` S with ``split`` P) launch
    of `config` (row-major over the tile grid), the k-tile ranges of its parts in block order:
    with a split tail, the first T - R tiles whole (R = T mod S), the R others each in p =
    min(P, S // R) equal runs of the granule; with ``stream_k_tail`` (where the configuration
    has it), the first D = max(T // S - 1, 0) S tiles whole, one part each (S = stream_k);
    of the rest, block g of G = min(stream_k, W / u) takes the iterations [u (g W' // G), u
    ((g + 1) W' // G)) of their W = (T - D) K_T (tile D + s's from s K_T), with u the
    configuration's granule (1 where it has none) and W' = W / u."""
    k_tiles, tiles = k // config.block_k, config.tiles(m, n)
    wave = getattr(config, "tail_wave", 0)
    if wave:
        # A split tail: the tiles past the last whole wave in p equal runs of granules each.
        rest, runs, granule = tiles % wave, k_tiles // config.granule, config.granule
        p = min(config.split, wave // max(rest, 1))
        whole = [[range(0, k_tiles)] for _ in range(tiles - rest)]
        return whole + [
            [range(i * runs // p * granule, (i + 1) * runs // p * granule) for i in range(p)]
            for _ in range(rest)
        ]
    prefix = 0
    if getattr(config, "stream_k_tail", False):
        prefix = max(tiles // config.stream_k - 1, 0) * config.stream_k
    work = (tiles - prefix) * k_tiles
    granule = getattr(config, "granule", 1)
    blocks = min(config.stream_k, work // granule)
    parts: list[list[range]] = [[range(0, k_tiles)] for _ in range(prefix)]
    parts += [[] for _ in range(tiles - prefix)]
    for g in range(blocks):
        start = prefix * k_tiles + g * (work // granule) // blocks * granule
        stop = prefix * k_tiles + (g + 1) * (work // granule) // blocks * granule
        for i in range(start, stop):
            tile, local_tile = divmod(i, k_tiles)
            if not parts[tile] or parts[tile][-1].stop != local_tile or i == start:
                parts[tile].append(range(local_tile, local_tile + 1))
            else:
                last = parts[tile][-1]
                parts[tile][-1] = range(last.start, local_tile + 1)
    return parts


def check_stream_k_program(
    program: Program,
    config: Any,
    dtype: DataType,
    group_size: int,
    shape: tuple[int, int, int],
    seed: int,
    slots: int,
) -> None:
    """Run `program`, a packed-weight program with `config`'s ``stream_k`` (``qmm(m, n, k, a,
    packed, scales, partial, counters, c)``, `slots` partial-sum slots), on a random (m, n, k)
    `shape` of `dtype` codes in the interpreter: each (block_m, block_n) tile of C must be, bit
    for bit, the f32 sums in k order of its parts (`stream_k_parts`; each scaled per group
    with the configuration's ``late_scale``, where it has one), added in order and rounded
    once (with ``combine_parts``, added into one zero sum as `combined_sum` adds them, which
    is then stored back as zeros); nothing past C or past the workspace's slots written, the
    counters left zero."""
    m, n, k = shape
    problem = make_problem(dtype, group_size, m, n, k, seed)
    packed, _ = pack_weights(problem.codes, dtype)
    assert [p.name for p in program.params][-3:] == ["partial", "counters", "c"]
    # The prefill programs keep whole tiles' parts (`PrefillTile.partial_shape`), the decode
    # program (slots, m, n).
    combined = getattr(config, "combine_parts", False)
    size = (1 if combined else slots) * m * n
    if isinstance(config, PrefillTile):
        assert config.partial_slots(m, n, k) == slots
        size = math.prod(config.partial_shape(m, n, k))
    partial = with_tail(size, np.float32)
    if combined:  # one sum, zero before the launch
        partial[:size] = 0
    counters = np.zeros(config.tiles(m, n) + TAIL, dtype=np.int32)
    c = with_tail(m * n, np.float16)
    arguments = [problem.a, packed, pack_scales(problem.scales), partial, counters, c]
    run_reference(program, m, n, k, *arguments, grid=config.grid(m, n, k))
    np.testing.assert_array_equal(partial[size:], SENTINEL)
    np.testing.assert_array_equal(counters, 0)
    np.testing.assert_array_equal(c[m * n :], SENTINEL)
    if combined:  # left zero for the next launch
        np.testing.assert_array_equal(partial[:size].view(np.uint32), 0)
    out = c[: m * n].reshape(m, n)
    values = dtype.decode(problem.codes).astype(np.float16)
    tiles_n, bm, bn, bk = n // config.block_n, config.block_m, config.block_n, config.block_k
    for tile, ranges in enumerate(stream_k_parts(config, m, n, k)):
        assert ranges and ranges[0].start == 0 and ranges[-1].stop == k // bk
        assert len(ranges) <= slots
        rows = slice((tile // tiles_n) * bm, (tile // tiles_n + 1) * bm)
        cols = slice((tile % tiles_n) * bn, (tile % tiles_n + 1) * bn)
        parts = []
        for span in ranges:
            ks = slice(span.start * bk, span.stop * bk)
            a = problem.a[rows, ks]
            if getattr(config, "late_scale", False):
                scales = problem.scales[span.start * bk // group_size :, cols]
                (part,) = late_scaled_partials(a, values[ks, cols], scales, group_size, 1)
            else:
                (part,) = sequential_partials(a, problem.dequantized[ks, cols], 1)
            parts.append(part)
        total = combined_sum(parts) if combined and len(parts) > 1 else ordered_sum(parts)
        np.testing.assert_array_equal(
            out[rows, cols].view(np.uint16), total.view(np.uint16), err_msg=f"tile {tile}"
        )


def launch_workspace(program: Program, config: Any, m: int, n: int, k: int) -> list[np.ndarray]:
    """The workspace a launch of `program`, a prefill program of `config` (a
    ``PrefillTile``), takes for C (m, n) and K = `k`: none without; else the f32 partial sums
    of ``config.partial_shape`` (a split's or stream-K's slots of whole tiles) and the zeroed
    i32 counters of its ``config.tiles``."""
    if not has_workspace(program):
        return []
    size = math.prod(config.partial_shape(m, n, k))
    return [np.zeros(size, np.float32), np.zeros(config.tiles(m, n), np.int32)]


def has_workspace(program: Program) -> bool:
    """Whether a prefill program's parameters end in ``partial, counters, c`` (a fused sum)
    rather than in ``c`` alone."""
    names = [p.name for p in program.params]
    if names[-3:] == ["partial", "counters", "c"]:
        return True
    assert names[-1] == "c" and "partial" not in names, names
    return False


@dataclass
class ZeroPointProblem:
    """The inputs of a packed-weight kernel with `activation` values and optional zero points,
    as codes: `codes` (k, n) weight codes, `scales` and `zeros` (groups, n) codes of the
    activation type (zeros all 0 without zero points), `a_codes` (m, k); and as values: `a`
    (f32), `shifted` = W - Z (f32, exact: small integers) and `dequantized` = act((W - Z) *
    S) rounded once (f32)."""

    weight: DataType
    zero_points: bool
    codes: np.ndarray
    scales: np.ndarray
    zeros: np.ndarray
    a_codes: np.ndarray
    a: np.ndarray
    shifted: np.ndarray
    dequantized: np.ndarray

    def arguments(self) -> list[np.ndarray]:
        """a, the packed weights, the packed scales and (with zero points) the packed zeros."""
        packed, _ = pack_weights(self.codes, self.weight)
        rows = [self.scales] + ([self.zeros] if self.zero_points else [])
        return [self.a_codes, packed, *(pack_scales(row) for row in rows)]


def zero_point_problem(
    weight: DataType,
    activation: DataType,
    zero_points: bool,
    shape: tuple[int, int, int],
    group_size: int,
    rng: np.random.Generator,
) -> ZeroPointProblem:
    """Random inputs of shape (m, n, k): codes anywhere in the weight type, scales in [0.5, 1.5]
    / 2^b, integer zero points below 2^b (b the weight bits), activations in [-1, 1]."""
    m, n, k = shape
    codes = rng.integers(0, 1 << weight.nbits, (k, n))
    groups = k // group_size
    scales = activation.encode(rng.uniform(0.5, 1.5, (groups, n)) / 2**weight.nbits)
    zeros = activation.encode(
        rng.integers(0, 1 << weight.nbits, (groups, n)).astype(np.float64)
        if zero_points
        else np.zeros((groups, n))
    )
    per_row = np.repeat(np.arange(groups), group_size)
    values = weight.decode(codes).astype(np.float64)
    scale_values = activation.decode(scales).astype(np.float64)[per_row]
    zero_values = activation.decode(zeros).astype(np.float64)[per_row]
    # W - Z is exact; the product is rounded once to the activation type.
    dequantized = activation.decode(activation.encode((values - zero_values) * scale_values))
    a_codes = activation.encode(rng.uniform(-1, 1, (m, k)))
    return ZeroPointProblem(
        weight,
        zero_points,
        codes,
        scales,
        zeros,
        a_codes,
        activation.decode(a_codes).astype(np.float32),
        (values - zero_values).astype(np.float32),
        dequantized.astype(np.float32),
    )


def check_zero_point_program(
    program: Program,
    config: Any,
    weight: DataType,
    activation: DataType,
    zero_points: bool,
    shape: tuple[int, int, int],
    group_size: int,
    seed: int,
) -> None:
    """Run `program`, a prefill program of `config` (``qmm(m, n, k, a, packed, scales,
    [zeros,] [partial, counters,] c)`` with `activation` operands), on a `zero_point_problem`
    of (m, n, k) `shape` in the interpreter over the configuration's grid: C = A @ act((W - Z)
    * S), every output the f32 sums in k order of each part of k (`launch_workspace`), added
    in order and rounded once; the tile counters left zero."""
    m, n, k = shape
    rng = np.random.default_rng(seed)
    problem = zero_point_problem(weight, activation, zero_points, shape, group_size, rng)
    grid = config.grid(m, n)
    split, workspace = config.split, launch_workspace(program, config, m, n, k)
    c = np.zeros(m * n, dtype=np.uint16)
    run_reference(program, m, n, k, *problem.arguments(), *workspace, c, grid=grid)
    for counters in workspace[1:]:
        np.testing.assert_array_equal(counters, 0)
    total = functools.reduce(np.add, sequential_partials(problem.a, problem.dequantized, split))
    np.testing.assert_array_equal(c.reshape(m, n), activation.encode(total))

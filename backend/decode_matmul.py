"""The register-dequant quantized matmul for decoding, as one compiled operation, and its tuning.

`DecodeProblem` is what a layer fixes: the weight type, the group size, K, N, the activation
type (f16 or bf16) and whether the weights have zero points. `DecodeMatmul(problem, config)`
compiles `ir.examples.register_dequant_matmul` for it with ``constants={"n": N, "k": K}`` (and
`split_k_sum` when ``config.split > 1`` without `fused_sum`); calling it computes

    out (m, N) = a (m, K) @ dequantized,   dequantized = (W - Z) * S   (W * S without zero points)

from the packed weights (`ir.examples.packed_weights.pack_weights`) and the packed scales and
zero points (`pack_scales` of (groups, N) tensors), every launch included: the matmul, and for
split-k the f32 partial sums, added up in the same launch by the last block of each output tile
(`fused_sum`, the default: one launch; the operation keeps the tile counters, zeroed once and
left zero by every launch, per device, so calls on one device must not run concurrently on
several streams) or by the `split_k_sum` launch (`launches`). With `combine_parts` the parts are
added into one f32 sum by combining stores, a workspace kept like the counters (`ZeroedBuffer`),
in no fixed order.

`DecodeMatmul.tuned(problem, m)` builds it with the configuration the autotuner
(`backend.autotune`) picks for the M bucket of `m` on the current GPU, from
`decode_search_space`; the choice is remembered in the kernel cache directory, so a second
call (in this process or another) measures nothing. The measure is `DecodeMeasure`: random
inputs, each candidate's result checked against torch, then timed by `backend.timing`; the
finalists, the candidates within a few per cent of the fastest, are timed again in turns
(`DecodeMeasure.in_turns`, `backend.autotune`).

The search space sizes tiles in bytes. A memory-bound decode kernel wants 32 to 64 KiB of
weight loads in flight per SM (`IN_FLIGHT_BYTES`: HBM's bandwidth-latency product, 4.4 TB/s
times about a microsecond, spread over 132 SMs). A warp's k-tile of weights is 16 * units_k rows
by 64 columns of b bits, 128 * units_k * b bytes, and an SM holds about `RESIDENT_WARPS` = 16
warps of such a kernel (64K registers at about 128 per thread), so:
- units_k: the powers of two with 16 * 128 * units_k * b in the window, i.e. units_k * b in
  [16, 32] (b = 8: 2, 4; b = 4: 4, 8; b = 2: 8, 16; b = 1: 16, 32), as far as the group size
  allows (a k-tile never spans two groups: at group size 128, units_k <= 8); and the k-tile
  of the group itself (the late scale's) up to twice the window's top (b = 5, 6, 7, 8:
  units_k 8 at group size 128), since the late scale saves a multiply per weight pair;
- depth (k-tiles loaded ahead in the register ring): 1, and 2 where twice the bytes stay in
  the window;
- warps in {2, 4, 8} (1 only when N fits no other), one unit of 64 columns each;
- split-k: powers of two that make the grid cover the SMs at least once and at most
  `MAX_WAVES` full waves (every SM holding 16 warps), with at least `MIN_TILES_PER_SPLIT`
  k-tiles per block;
- where the k-tile is the group, each point with and without `late_scale` (the scales
  applied to the mma products instead of the weights: fewer instructions, more registers),
  with it alone where that k-tile is past the window's top;
- in the 8-row tiling of one row block (batches below 12), each point with the late scale
  also with `magic_bias` where the biased cast is the cheaper one (`biased_cast_saves`):
  measured beside the recorded configurations, 7 to 14 % faster for i2 at three of the four
  layers at M = 1 and 10 % slower at the fourth, level for i4 (whose wide layers already stream
  at the bandwidth), so the tuner decides;
- no point with `refill_in_place` (each k16 step's words loaded again with the next k-tile's
  once cast: no register copies in the k loop; SASS of the recorded configurations,
  `benchmarks/sass_census.py`: 8 to 37 % fewer loop instructions, with the biases kept too):
  measured on the H200 at the two short layers (i4, i8, M = 1 and 16) beside the recorded
  points, it was level or 2 to 10 % slower everywhere, so it is a field to try by hand
  (`benchmarks/quantized_matmul.py --variants`);
- the fused sums of the points that split more than `PARTS_BATCH_BY_ROWS` ways load their
  parts that many at a time (`DequantConfig.parts_batch`: a loop kept rolled, the same adds
  in the same order, so the same bits): 4 in blocks of 8 rows (16 registers a part), 2 in
  blocks of 16 rows (32 registers a part; 4 would take most of those kernels to 184 to 255
  registers, 2 keeps their counts), blocks of more rows one at a time. Measured on an H100
  beside the recorded configurations: at M = 1 with 4, 0.9 to 1.9 us faster at all four
  points tried (i2 and i3 at 8192 x 8192 and 28672 x 8192, split 8 and 16); at M = 16 with
  2, 0.3 to 1.0 us faster at 10 of 12 points (i2, i3, i4, i8 at the three layers that split
  4 or 8 ways), level at the other two (3 a step lost 1.9 us at one point);
- in blocks of 16 rows, each point that loads two parts a step over a split of 8
  (`PARTS_TWIN_MAX_SPLIT`), without the group rows' ring, also with four a step
  (`PARTS_BATCH_TWINS`, `with_parts_batch_twin`), which the tuner measures only where the
  compiled twin's grid takes no more waves than its base's (`DecodeMatmul.whole_waves`, the
  blocks an SM read from the CUBIN by `backend.occupancy`; else the twin is pruned). Measured
  on an H100 at M = 16 beside the recorded configurations: four a step 0.3 to 0.6 us faster
  at the four points of 8192 x 8192 and 1.4 us at i8 28672 x 8192, whose grids stay within one
  wave, and 2.7 to 4 us slower at the four of 4096 x 12288, where the parts' registers (i3
  168 -> 255) leave fewer blocks an SM and the grid goes from 0.97 to 1.46 waves. Tuned over
  the twins there: 31 of 70 pruned at 4096 x 12288 (i4, i8), none at 8192 x 8192 or 28672 x
  8192; the tuner picked a twin at 4 of 12 points, against its base 4.5 % faster for i4 at
  8192 x 8192 and 9 and 13 % for i2 at 8192 x 8192 and 28672 x 8192 (a shorter k loop in
  the machine code);
- where the tiles leave a partial wave, stream-K points per (row tiling, warps, units_k):
  one wave of persistent blocks (`stream_k` = SMs * blocks an SM, that occupancy asked of the
  compiler by `min_blocks_per_sm`) sharing every tile's k-tiles evenly, depth 1, with the late
  scale where it applies, at each occupancy of `stream_k_residencies`: the byte model's
  (`RESIDENT_WARPS` / warps), and for blocks of 16 rows or more also three quarters of it.
  Those blocks take more than 128 registers a thread (158 to 175 in the recorded M = 16
  configurations on 8192 x 57344); at the byte model's occupancy the compiler caps them at 128
  and they spill. Measured on an H100 at M = 16 on 8192 x 57344, whose 224
  column tiles leave two blocks on 92 SMs and one on 40: three blocks an SM (396, 167 registers,
  no spills) took i3 from 92.5 to 82.2 us (91.6 to 82.5 in a second run), and the tuner over
  this space picks that point there (82.7). Level for i2; slower for i4 and i8 (whose recorded
  kernels there move 2.7 to 3.0 TB/s, near the H100's bandwidth) and at the three layers whose
  tiles already fill their waves. f4e2m1 went from 116.7 to 98.6, but there the tuner picks
  split 1 without stream-K (97.3): its recorded split 4, tuned on an H200, is what was slow;
- for blocks of 16 rows or more, each stream-K point also with the weights and activations in
  shared rings unrolled `STREAM_RING_STAGES` times (`stream_ring_depths`): one of
  `STREAM_RING_STAGES` stages, and one of the most stages up to `RING_STAGES` that the
  resident blocks' rings fit, where that is more, within the shared memory of two
  `RING_SHARED_BYTES` blocks. The shared ring of
  `RING_STAGES` stages unrolled as often, which the tuner picks for i4 at M = 16 on
  8192 x 57344, takes 254 registers a thread there (NVRTC 13.0, the device's) and so two
  blocks an SM, with the 224 column tiles on 132 SMs in 0.85 of a wave (two blocks on 92
  SMs, one on the other 40). With two stages unrolled twice the same kernel takes 127
  registers and no spills at four blocks an SM (`sass_census.py`, NVRTC 13.0 and 13.5), so
  stream-K can spread the k-tiles evenly over 16 warps an SM instead of at most 8, at a loop
  11 % longer (1071 instructions for two k-tiles, against 964). Measured on an H100 it was
  8 % slower (94.6 against 87.5 us): with one stage of two loading a block, its four blocks
  hold 64 KB of weights in flight an SM, where the recorded kernel's two blocks of four
  stages hold 96 KB (three stages loading each). At three blocks an SM a ring of three
  stages keeps those 96 KB in one even wave of 12 warps (161 registers, no spills, a loop
  of 617 instructions a k-tile against 482: its stage index is no longer a constant of the
  unrolled copy); not measured yet. For i3 the ring of two at three blocks an SM was 3 %
  faster than the recorded kernel (86.8 against 89.5 us);
- for blocks of 16 rows, each point with the late scale (of the register ring or the shared
  one; not stream-K, whose blocks the compiler caps) also with the group's scale row loaded
  `ROWS_AHEAD` k-tile ahead (`DequantConfig.rows_ahead`): profiled on an H100 (i2, 8192 x
  57344), 10 % of the M = 16 kernel's warp stall samples were the scale's conversion waiting
  for its load, issued in the same k-tile. Measured beside the recorded configurations on an
  H100: i3 at M = 16 on 8192 x 57344 8 to 10 % faster in three runs (91.5, 91.8 and 90.9 us
  to 83.4, 82.7 and 83.5), 1 to 4 % faster at three other points (i3 and i2 on 28672 x 8192,
  the latter a shared ring, i3 on 8192 x 8192), level for i4, slower where the compiler's cap
  of 128 registers makes it spill (i2 on 8192 x 57344, 3 %) and, not explained (168
  registers either way, no spills), i3 on 4096 x 12288 (18.5 to 23.1 us): so the tuner
  decides. Not offered in 8-row blocks: at M = 1 the same stall took 28 % of the samples, but
  the ring was level (within 3 %) or slower at all 16 points (i4 on the two wide layers 19
  and 20 % slower, its registers from 126-128 to 155-156: a block fewer an SM), so there the
  warps wait on the memory, not on that load;
- for blocks of 16 rows or more, each (warps, units_k, split) point also with the weights and
  activations in a shared ring of `RING_STAGES` stages (unrolled as often, depth 1, the late
  scale where it applies) where it takes at most `RING_SHARED_BYTES`: measured on the H200 it
  is up to 1.5x slower at M = 1 but 4 to 7 % faster on the wide layers at M = 16, where each
  k-tile does twice the mma work;
- the rows of a block (`row_tilings`), sized for the batch a tuning measures (the bucket's
  smallest, `autotune.m_bucket`): where every batch of the bucket ([1, 2) ... [6, 8)) is at
  most 8 rows, `weights_as_a` alone (the weights as the mma's A operand, 8 rows of A per
  row block): half the mma instructions and accumulators of the 16-row form, whose other
  rows would be padding. From the bucket [8, 12) on, the 16-row form with `units_m` row
  blocks covering the bucket's smallest batch, and while that batch is at most
  8 * `MAX_UNITS_M` rows also `weights_as_a` with `units_m` 8-row blocks covering it: each
  dequantized weight fragment feeds `units_m` mma instructions, so the block decodes its
  weights once for all its rows. A larger batch of the bucket takes a second row of blocks.
For the benchmark's shapes and batches that is 14 to 332 candidates at 1 to 8 bits (15 to 332 at
M = 1 and 16). With ``deterministic=False`` (`decode_search_space`, `DecodeMatmul.tuned`), each
point whose parts a fused sum adds (split or stream-K) is also offered with `combine_parts` (the
parts added into one sum by combining stores, in no fixed order): measured on an H100 (i2, i3,
i8 at the three layers that split 4 to 16) it was 0.4 to 2.7 us faster at the split-8 and
split-16 points at M = 1, and at M = 16, where the 16-row tiling adds pairs of columns with
vector adds, faster at 6 of 7 points; by default every candidate gives the same bits launch to
launch.

    problem = DecodeProblem(dtypes.i4, 128, k=4096, n=12288)
    matmul = DecodeMatmul.tuned(problem, m=1)           # or DecodeMatmul(problem, config)
    out = matmul(a, packed, scales)                     # a: (m, 4096) f16 on the GPU
    matmul.config, matmul.launches

torch is imported inside the functions that launch or measure: the module imports, builds its
search space and compiles without torch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TextIO

from backend.autotune import (
    CandidatePruned,
    Scalar,
    TuningError,
    TuningResult,
    autotune,
    m_bucket,
)
from backend.cache import CubinCache, RecordStore
from backend.compile import CompiledKernel, compile, compile_lowered, lower_all
from backend.device import current_arch
from backend.errors import LaunchError
from backend.fast_conversions import plan_conversion
from backend.lower import LoweredKernel
from backend.occupancy import whole_waves
from ir import dtypes
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.examples.packed_weights import (
    UNIT_ELEMENTS,
    UNIT_K,
    UNIT_LANES,
    UNIT_N,
    WeightFormat,
    check_weight_dtype,
    pack_scales,
    pack_weights,
    packed_lane_order,
    weight_ring_thread_words,
)
from ir.examples.register_dequant_matmul import (
    BLOCK_M,
    BLOCK_M_WEIGHTS_AS_A,
    DequantConfig,
    register_dequant_matmul,
    split_k_sum,
)
from ir.program import Program
from ir.specialize import check_constants

NAMESPACE = "register_dequant_matmul/8"
"""The autotuner's namespace of `DecodeMatmul.tuned`: bump the version when the kernel changes
enough that old choices should be tuned again."""
ACTIVATION_DTYPES = (dtypes.f16, dtypes.bf16)
"""The activation (and scale, zero point and output) types the program supports."""
IN_FLIGHT_BYTES = (32 * 1024, 64 * 1024)
"""The window of weight bytes in flight per SM the search space aims for (see the docstring)."""
RESIDENT_WARPS = 16
"""Warps of a decode kernel resident on one SM, in the search space's byte model."""
WARP_CHOICES = (2, 4, 8)
"""Warps per block in the search space (1 only when N fits no other)."""
DEPTH_CHOICES = (1, 2)
"""Register ring depths (k-tiles of weights loaded ahead) in the search space; 2 only where the
bytes in flight stay in the window (`depth_choices`)."""
MAX_WAVES = 8
"""The most full waves (every SM holding `RESIDENT_WARPS` warps) a split-k grid may make."""
MIN_TILES_PER_SPLIT = 4
"""The fewest k-tiles a block of a split-k grid loops over."""
MAX_EXTENT = 2**31 - 1
"""The largest K, N and group size: the kernels take them as C ints."""
DEFAULT_SM_COUNT = 132
"""SMs of the H200, the search space's default when no GPU is asked."""
MAX_UNITS_M = 4
"""The most row blocks per block in the search space (64 rows, or 32 with `weights_as_a`):
past it the accumulators no longer fit the registers beside the weight ring."""
RING_STAGES = 4
"""Stages (and unroll) of the shared ring (`DequantConfig.stages`) the search space offers for
blocks of 16 rows or more."""
RING_SHARED_BYTES = 112 * 1024
"""The most shared bytes a block's ring may take in the search space: two blocks an SM."""
STREAM_RING_STAGES = 2
"""Stages (and the unroll of every ring) of the shallowest shared ring of the search space's
stream-K points in blocks of 16 rows or more (see the module docstring)."""
ROWS_AHEAD = 1
"""The depth of the group rows' own ring (`DequantConfig.rows_ahead`) of the search space's
twins of its late-scale points in blocks of 16 rows (see the module docstring)."""
PARTS_BATCH_BY_ROWS = {8: 4, 16: 2}
"""Parts the fused sum of a split point loads at a time in the search space
(`DequantConfig.parts_batch`), by the rows of its block; blocks of other row counts load one
at a time (see the module docstring and `with_batched_parts`)."""
PARTS_BATCH_TWINS = {16: 4}
"""By the rows of a block: the parts a step of the twins that the search space adds to its
split points that load their parts `PARTS_BATCH_BY_ROWS` at a time and split more ways than
this, up to `PARTS_TWIN_MAX_SPLIT` (without the group rows' ring); the tuner measures a twin
only where its kernel's grid takes no more waves than its base's (`parts_twin_base`,
`DecodeMatmul.whole_waves`; see the module docstring)."""
PARTS_TWIN_MAX_SPLIT = 8
"""The deepest split given a `PARTS_BATCH_TWINS` twin: at 16 rows a split of 16 was slower
than the split of 8 at all ten points measured (by 3.7 to 8.4 us, on an H100), so deeper
splits' twins would only lengthen the tuning."""


def with_rows_ahead_twin(config: DequantConfig) -> list[DequantConfig]:
    """`config`, then, where it has the late scale in blocks of 16 rows, the same with the
    group rows `ROWS_AHEAD` k-tiles ahead: the search space's points and their twins (see the
    module docstring)."""
    if config.late_scale and config.block_m == BLOCK_M:
        return [config, replace(config, rows_ahead=ROWS_AHEAD)]
    return [config]


def with_parts_batch_twin(config: DequantConfig) -> list[DequantConfig]:
    """`config`, then, where its block's rows have a `PARTS_BATCH_TWINS` batch B and it loads
    its fused sum's parts `PARTS_BATCH_BY_ROWS` at a time over a split of more than B and at
    most `PARTS_TWIN_MAX_SPLIT` parts, without the group rows' ring, the same with its parts
    B at a time: the search space's points and their twins."""
    batch = PARTS_BATCH_TWINS.get(config.block_m)
    based = config.parts_batch == PARTS_BATCH_BY_ROWS.get(config.block_m, 1) > 1
    if based and _parts_twin_fits(config, batch):
        return [config, replace(config, parts_batch=batch)]
    return [config]


def _parts_twin_fits(config: DequantConfig, batch: int | None) -> bool:
    """Whether a point of `config`'s split and group rows has a parts twin of `batch`."""
    return (
        batch is not None and batch < config.split <= PARTS_TWIN_MAX_SPLIT and not config.rows_ahead
    )


def parts_twin_base(config: DequantConfig) -> DequantConfig | None:
    """The point whose `with_parts_batch_twin` twin `config` is (the same with its parts
    `PARTS_BATCH_BY_ROWS` at a time), or None when `config` is no such twin."""
    batch = PARTS_BATCH_TWINS.get(config.block_m)
    if config.parts_batch != batch or not _parts_twin_fits(config, batch):
        return None
    return replace(config, parts_batch=PARTS_BATCH_BY_ROWS[config.block_m])


def with_batched_parts(config: DequantConfig) -> DequantConfig:
    """`config` with its fused sum's parts loaded as the search space loads them:
    `PARTS_BATCH_BY_ROWS` of its block's rows at a time where it splits k more ways than that
    into a fused sum of ordered slots (not `combine_parts`, not stream-K), else one at a
    time; a `with_parts_batch_twin` twin is left as it is. The same adds in the same order
    either way, so the same results bit for bit. The search space applies it to every point;
    ``benchmarks/quantized_matmul.py --batched-parts`` to configurations recorded before the
    rule. Raises `TuningError` for a `config` that is not a `DequantConfig`."""
    if not isinstance(config, DequantConfig):
        raise TuningError(
            f"with_batched_parts: config is {type(config).__name__}; expected a DequantConfig"
        )
    if parts_twin_base(config) is not None:
        return config  # the search space's twin, of the parts a step it names
    batch = PARTS_BATCH_BY_ROWS.get(config.block_m, 1)
    slotted = config.fused_sum and not config.combine_parts and not config.stream_k
    return replace(config, parts_batch=batch if slotted and config.split > batch else 1)


@dataclass(frozen=True)
class DecodeProblem:
    """What one layer fixes: `weight_dtype` (1 to 8 bits), `group_size` (rows of W per scale),
    `k`, `n`, `activation_dtype` (f16 or bf16: A, scales, zero points and the output) and
    `zero_points` (dequantized weight (W - Z) * S instead of W * S).

    Requires: k a positive multiple of 16, n of 64, group_size of 16, each at most
    `MAX_EXTENT`. Construction raises `VerificationError` naming the bad field otherwise.
    """

    weight_dtype: DataType
    group_size: int
    k: int
    n: int
    activation_dtype: DataType = dtypes.f16
    zero_points: bool = False

    def __post_init__(self) -> None:
        check_weight_dtype(self.weight_dtype)
        for name, multiple in (("group_size", UNIT_K), ("k", UNIT_K), ("n", UNIT_N)):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 1 <= value <= MAX_EXTENT
                or value % multiple
            ):
                raise VerificationError(
                    f"decode matmul: {name}={value!r}; expected a positive multiple of {multiple} "
                    f"up to {MAX_EXTENT}"
                )
        if self.activation_dtype not in ACTIVATION_DTYPES:
            raise VerificationError(
                f"decode matmul: activation_dtype={self.activation_dtype!r}; expected f16 or bf16"
            )
        if not isinstance(self.zero_points, bool):
            raise VerificationError(
                f"decode matmul: zero_points={self.zero_points!r}; expected True or False"
            )

    @property
    def groups(self) -> int:
        """Rows of the scales (and zero points): ceil(k / group_size)."""
        return -(-self.k // self.group_size)

    @property
    def packed_shape(self) -> tuple[int, int]:
        """The shape of the packed i32 weights (`WeightFormat.shape`)."""
        return WeightFormat(self.weight_dtype.name, self.k, self.n).shape


@dataclass(frozen=True)
class DecodePrograms:
    """The tile programs of one (problem, config): `matmul` and, for split-k, `reduce`."""

    problem: DecodeProblem
    config: DequantConfig
    matmul: Program
    reduce: Program | None
    lowered: dict[str, LoweredKernel] = field(default_factory=dict, compare=False)
    """Kernels lowered ahead (`prepare_all`), by "matmul" / "reduce" for `arch_lowered`."""
    arch_lowered: str | None = None

    def prepare(self, arch: str, lowered: dict[str, LoweredKernel]) -> DecodePrograms:
        """These programs with their kernels lowered for `arch` ahead of the build."""
        return replace(self, lowered=lowered, arch_lowered=arch)


def prepare_all(programs: list[DecodePrograms], arch: str) -> list[DecodePrograms]:
    """Every candidate's programs with their kernels lowered for `arch` at once, in worker
    processes (`backend.compile.lower_all`); a program whose lowering fails is left to fail
    again in its build."""
    jobs, owners = [], []
    for index, item in enumerate(programs):
        constants = {"n": item.problem.n, "k": item.problem.k}
        jobs.append((item.matmul, constants))
        owners.append((index, "matmul"))
        if item.reduce is not None:
            jobs.append((item.reduce, None))
            owners.append((index, "reduce"))
    results = lower_all(jobs, arch)
    lowered: list[dict[str, LoweredKernel]] = [{} for _ in programs]
    for (index, role), result in zip(owners, results):
        if isinstance(result, LoweredKernel):
            lowered[index][role] = result
    return [item.prepare(arch, kernels) for item, kernels in zip(programs, lowered)]


def decode_programs(problem: DecodeProblem, config: DequantConfig) -> DecodePrograms:
    """Build (and check against the problem's constants) the programs of `config`.

    Raises `VerificationError` for a configuration the program refuses (e.g. a k-tile that does
    not divide the group size), `SpecializationError` for one whose tile does not divide K or N.
    """
    matmul = register_dequant_matmul(
        problem.weight_dtype,
        problem.group_size,
        config,
        activation_dtype=problem.activation_dtype,
        zero_points=problem.zero_points,
    )
    check_constants(matmul, {"n": problem.n, "k": problem.k})
    reduce = None
    if config.split > 1 and not config.fused_sum:
        reduce = split_k_sum(config.split, out_dtype=problem.activation_dtype)
    return DecodePrograms(problem, config, matmul, reduce)


def _torch_dtype(dtype: DataType) -> Any:
    import torch

    return {dtypes.f16: torch.float16, dtypes.bf16: torch.bfloat16}[dtype]


class ZeroedBuffer:
    """A workspace that every launch leaves zero, as it found it: one zeroed torch buffer of
    `dtype` (a torch dtype's name, "int32" or "float32") per device, grown when a launch needs
    more elements, so a buffer is zeroed once, when it is made."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype
        self._held: dict[Any, Any] = {}

    def __call__(self, count: int, device: Any) -> Any:
        """`count` zeroed elements on `device` (a view of the held buffer)."""
        import torch

        held = self._held.get(device)
        if held is None or held.numel() < count:
            held = torch.zeros(count, dtype=getattr(torch, self.dtype), device=device)
            self._held[device] = held
        return held[:count]


class TileCounters(ZeroedBuffer):
    """The i32 tile counters of an operation's fused split-k sums (`ir.examples.split_sum`),
    a `ZeroedBuffer`: every launch leaves its counters zero."""

    def __init__(self) -> None:
        super().__init__("int32")


class DecodeMatmul:
    """The compiled decode matmul of one problem and configuration (see the module docstring).

    `DecodeMatmul(problem, config, arch=None, cache=None)` compiles for `arch` (default: the
    current GPU) through the CUBIN `cache` (default: `backend.default_cache()`); it raises what
    `decode_programs` and `backend.compile` raise. Attributes: `problem`, `config`,
    `launches` (2 with a split-k sum in a second launch, else 1), `matmul_kernel`,
    `reduce_kernel` (None unless that second launch is used), and `tuning` (the
    `TuningResult` when built by `tuned`, else None).
    """

    def __init__(
        self,
        problem: DecodeProblem,
        config: DequantConfig,
        *,
        arch: str | None = None,
        cache: CubinCache | None = None,
    ) -> None:
        self._setup(decode_programs(problem, config), arch, cache)

    @classmethod
    def from_programs(
        cls, programs: DecodePrograms, *, arch: str | None = None, cache: CubinCache | None = None
    ) -> DecodeMatmul:
        """Compile programs already made by `decode_programs` (the autotuner's build step)."""
        operation = cls.__new__(cls)
        operation._setup(programs, arch, cache)
        return operation

    def _setup(self, programs: DecodePrograms, arch: str | None, cache: CubinCache | None) -> None:
        problem = programs.problem
        self.problem = problem
        self.config = programs.config
        self.tuning: TuningResult[DecodeMatmul] | None = None
        constants = {"n": problem.n, "k": problem.k}
        chosen = current_arch() if arch is None else arch
        ahead = programs.lowered if programs.arch_lowered == chosen else {}

        def build(role: str, program: Program, values: dict[str, int] | None) -> CompiledKernel:
            if role in ahead:
                return compile_lowered(program, ahead[role], chosen, cache=cache)
            return compile(program, chosen, constants=values, cache=cache)

        self.matmul_kernel: CompiledKernel = build("matmul", programs.matmul, constants)
        self.reduce_kernel: CompiledKernel | None = None
        if programs.reduce is not None:
            self.reduce_kernel = build("reduce", programs.reduce, None)
        self._counters = TileCounters()
        self._sums = ZeroedBuffer("float32")

    @property
    def launches(self) -> int:
        """Kernel launches per call: 2 with the split-k sum in a second launch, else 1."""
        return 1 if self.reduce_kernel is None else 2

    def whole_waves(self, m: int, sm_count: int) -> int:
        """The waves (a partial one counted whole, `backend.occupancy.whole_waves`) that the
        matmul launch's grid at batch `m` runs in on `sm_count` SMs, with the blocks an SM
        holds as the CUBIN gives them (`backend.kernel.Kernel.residency`: no GPU needed).
        Raises `LaunchError` for m or sm_count not ints >= 1, or a kernel no SM holds."""
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise LaunchError(f"whole_waves: m={m!r}; expected an int >= 1")
        grid = math.prod(self.config.grid(m, self.problem.n, self.problem.k))
        resident = self.matmul_kernel.kernel.residency().blocks
        return whole_waves(grid, resident, sm_count)

    def counters(self, m: int, device: Any) -> Any:
        """The zeroed i32 tile counters of a fused split-k sum for `m` rows on `device`."""
        return self._counters(self.config.tiles(m, self.problem.n), device)

    @property
    def arch(self) -> str:
        """The architecture the kernels are compiled for."""
        return self.matmul_kernel.arch

    def __repr__(self) -> str:
        p = self.problem
        return (
            f"DecodeMatmul({p.weight_dtype} g{p.group_size} K={p.k} N={p.n} "
            f"{p.activation_dtype}{' zero points' if p.zero_points else ''}, {self.config}, "
            f"arch={self.arch!r})"
        )

    @classmethod
    def tuned(
        cls,
        problem: DecodeProblem,
        m: int,
        *,
        measure: Callable[[DecodeMatmul], float] | None = None,
        store: RecordStore | None = None,
        cache: CubinCache | None = None,
        arch: str | None = None,
        gpu_name: str | None = None,
        sm_count: int | None = None,
        workers: int | None = None,
        progress: bool | TextIO = True,
        compact: bool = False,
        deterministic: bool = True,
    ) -> DecodeMatmul:
        """The operation with the configuration the autotuner picks for `m`'s bucket (tuned at
        the bucket's smallest batch), fitted to `m` by `fit_rows`.

        `measure(operation) -> microseconds` defaults to ``DecodeMeasure(problem, bucket.lo)``
        on the current GPU; a measure with an `in_turns` method, as that one has, also times
        the tuner's finalists in turns. `gpu_name` and `sm_count` default to the current GPU's
        (through torch), `arch` to its architecture; give all three (and a `measure`) to tune
        without torch or a GPU. `store` is the record store (default: the kernel cache directory's),
        `cache` the CUBIN cache, `workers` the compile pool size, `progress` as
        `backend.autotune.autotune`, `compact` and `deterministic` as `decode_search_space`
        (a space of its own, so a record of its own). A parts twin (`with_parts_batch_twin`)
        whose compiled grid takes more waves on `sm_count` SMs than its base's
        (`whole_waves`) is pruned unmeasured. Raises `TuningError` when no candidate can be
        measured.
        """
        bucket = m_bucket(m)
        if gpu_name is None or sm_count is None:
            import torch

            properties = torch.cuda.get_device_properties(torch.cuda.current_device())
            gpu_name = properties.name if gpu_name is None else gpu_name
            sm_count = properties.multi_processor_count if sm_count is None else sm_count
        arch = current_arch() if arch is None else arch
        space = decode_search_space(
            problem.weight_dtype,
            problem.k,
            problem.n,
            bucket.lo,
            group_size=problem.group_size,
            sm_count=sm_count,
            activation_dtype=problem.activation_dtype,
            zero_points=problem.zero_points,
            compact=compact,
            deterministic=deterministic,
        )

        def construct(params: dict[str, Scalar]) -> DecodePrograms:
            return decode_programs(problem, DequantConfig(**params))

        prepared: dict[int, DecodePrograms] = {}

        def prepare(candidates: list[DecodePrograms]) -> None:
            for item, ready in zip(candidates, prepare_all(candidates, arch)):
                prepared[id(item)] = ready

        def build(params: dict[str, Scalar], programs: DecodePrograms) -> DecodeMatmul:
            ready = prepared.get(id(programs), programs)
            return cls.from_programs(ready, arch=arch, cache=cache)

        timed = DecodeMeasure(problem, bucket.lo) if measure is None else measure
        waves_of: dict[DequantConfig, int] = {}

        def measure_kept(operation: DecodeMatmul) -> float:
            # A parts twin whose grid takes more waves than its base's (measured before it,
            # earlier in the space) is not measured: its registers cost more than it saves.
            waves = operation.whole_waves(bucket.lo, sm_count)
            waves_of[operation.config] = waves
            base = parts_twin_base(operation.config)
            if base is not None and waves > waves_of.get(base, waves):
                raise CandidatePruned(
                    f"its grid takes {waves} waves on {sm_count} SMs, its base's "
                    f"(parts_batch={base.parts_batch}) {waves_of[base]}"
                )
            return timed(operation)

        result = autotune(
            NAMESPACE,
            decode_tuning_key(problem, bucket.lo, gpu_name=gpu_name, arch=arch),
            [asdict(config) for config in space],
            construct=construct,
            build=build,
            prepare=prepare,
            measure=measure_kept,
            measure_in_turns=getattr(timed, "in_turns", None),
            store=store,
            workers=workers,
            progress=progress,
        )
        operation = result.built
        fitted = fit_rows(operation.config, m)
        if fitted != operation.config:
            operation = cls(problem, fitted, arch=arch, cache=cache)
        operation.tuning = result
        return operation

    def __call__(self, a: Any, packed: Any, scales: Any, zeros: Any = None, out: Any = None) -> Any:
        """``out (m, N) = a @ dequantized`` (see the module docstring); returns `out`.

        `a`: (m, K) torch tensor of the activation type on a CUDA device; `packed`: the i32
        packed weights (`DecodeProblem.packed_shape`); `scales` and, with zero points, `zeros`:
        (groups, N) of the activation type, packed by `pack_scales`; `out`: (m, N) of the
        activation type, allocated when None. Every tensor contiguous and on `a`'s device.
        Raises `LaunchError` naming the argument, its value and what was expected, before
        anything is launched.
        """
        import torch

        p = self.problem
        act = _torch_dtype(p.activation_dtype)
        if not isinstance(a, torch.Tensor) or a.dim() != 2:
            shape = tuple(a.shape) if isinstance(a, torch.Tensor) else type(a).__name__
            raise LaunchError(f"argument 'a' is {shape}; expected a 2-D torch tensor (m, {p.k})")
        m = int(a.shape[0])
        if m < 1:
            raise LaunchError(f"argument 'a' has shape {tuple(a.shape)}; expected m >= 1 rows")
        if a.device.type != "cuda":
            raise LaunchError(f"argument 'a' is on {a.device}; expected a CUDA device")
        expected = {
            "a": (a, (m, p.k), act),
            "packed": (packed, p.packed_shape, torch.int32),
            "scales": (scales, (p.groups, p.n), act),
        }
        if p.zero_points:
            if zeros is None:
                raise LaunchError(
                    "argument 'zeros' is None; expected the packed (groups, N) zero points of an "
                    "operation built with zero_points=True"
                )
            expected["zeros"] = (zeros, (p.groups, p.n), act)
        elif zeros is not None:
            raise LaunchError(
                "argument 'zeros' is given; expected None for an operation built with "
                "zero_points=False"
            )
        if out is None:
            out = torch.empty((m, p.n), dtype=act, device=a.device)
        expected["out"] = (out, (m, p.n), act)
        for name, (value, shape, dtype) in expected.items():
            _check_tensor(torch, name, value, shape, dtype, a.device)
        arguments = {"m": m, "n": p.n, "k": p.k, "a": a, "packed": packed, "scales": scales}
        if p.zero_points:
            arguments["zeros"] = zeros
        grid = self.config.grid(m, p.n, p.k)
        if self.config.split == 1 and not self.config.stream_k:
            self.matmul_kernel(**arguments, c=out, grid=grid)
            return out
        slots = self.config.stream_k_slots(m, p.n, p.k) if self.config.stream_k else None
        parts = self.config.split if slots is None else slots
        if self.config.combine_parts:  # one sum, left zero by every launch
            partial = self._sums(m * p.n, a.device)
        else:
            partial = torch.empty((parts, m, p.n), dtype=torch.float32, device=a.device)
        if self.reduce_kernel is None:
            counters = self.counters(m, a.device)
            self.matmul_kernel(**arguments, partial=partial, counters=counters, c=out, grid=grid)
            return out
        self.matmul_kernel(**arguments, c=partial, grid=grid)
        self.reduce_kernel(mn=m * p.n, partial=partial, c=out)
        return out


def _check_tensor(
    torch: Any, name: str, value: Any, shape: tuple[int, ...], dtype: Any, device: Any
) -> None:
    """`LaunchError` unless `value` is a contiguous torch tensor of `shape` and `dtype` on
    `device`."""
    if not isinstance(value, torch.Tensor):
        raise LaunchError(
            f"argument {name!r} is a {type(value).__name__}; expected a torch tensor {shape} of "
            f"{dtype}"
        )
    if tuple(value.shape) != shape:
        raise LaunchError(f"argument {name!r} has shape {tuple(value.shape)}; expected {shape}")
    if value.dtype != dtype:
        raise LaunchError(f"argument {name!r} has dtype {value.dtype}; expected {dtype}")
    if value.device != device:
        raise LaunchError(f"argument {name!r} is on {value.device}; expected {device}, as 'a'")
    if not value.is_contiguous():
        raise LaunchError(
            f"argument {name!r} is not contiguous (strides {value.stride()}); expected a dense "
            "row-major tensor"
        )


def decode_tuning_key(
    problem: DecodeProblem, m: int, *, gpu_name: str, arch: str
) -> dict[str, Scalar]:
    """The autotuner's key of `problem` at batch `m` on a GPU: the GPU's name and architecture,
    the weight and activation types, zero points, group size, K, N and the first M of `m`'s
    bucket (`backend.autotune.m_bucket`)."""
    return {
        "gpu": gpu_name,
        "arch": arch,
        "weight_dtype": problem.weight_dtype.name,
        "activation_dtype": problem.activation_dtype.name,
        "zero_points": problem.zero_points,
        "group_size": problem.group_size,
        "k": problem.k,
        "n": problem.n,
        "m_bucket": m_bucket(m).lo,
    }


def _warp_tile_bytes(nbits: int) -> int:
    """Weight bytes in flight per SM per k16 step of a warp's k-tile, in the byte model: a
    warp's k16 x 64 unit is 128 * b bytes, and `RESIDENT_WARPS` warps share the SM."""
    return RESIDENT_WARPS * UNIT_K * UNIT_N * nbits // 8


def units_k_choices(nbits: int, k: int, group_size: int) -> tuple[int, ...]:
    """The k16 steps per k-tile tried at `nbits`-bit weights: the powers of two u with
    16 * 128 * u * b bytes in `IN_FLIGHT_BYTES` (u * b in [16, 32]) whose k-tile divides K and
    the group size; when the group size or K allows none, the largest power of two below the
    window that fits; and the group's own k-tile (group_size / 16, where the late scale
    applies) when it divides K and its bytes are at most twice the window's top.
    Requires: K and the group size multiples of 16.
    """

    def fits(units: int) -> bool:
        return group_size % (UNIT_K * units) == 0 and k % (UNIT_K * units) == 0

    low = -(-IN_FLIGHT_BYTES[0] // _warp_tile_bytes(nbits))
    high = IN_FLIGHT_BYTES[1] // _warp_tile_bytes(nbits)
    powers = [1 << e for e in range(7)]
    window = tuple(u for u in powers if low <= u <= high and fits(u))
    # u = 1 always fits (K and the group size are multiples of 16): never empty.
    choices = window or (max(u for u in powers if u < low and fits(u)),)
    group_units = group_size // UNIT_K
    late = group_units in powers and group_units > max(choices)
    if late and group_units <= 2 * high and fits(group_units):
        choices += (group_units,)
    return choices


def depth_choices(nbits: int, units_k: int) -> tuple[int, ...]:
    """The register ring depths tried with `units_k`: those of `DEPTH_CHOICES` that keep the
    depth k-tiles in flight within the top of `IN_FLIGHT_BYTES` (depth 2 doubles the bytes in
    flight as doubling units_k does); at least depth 1."""
    tile = _warp_tile_bytes(nbits) * units_k
    return tuple(d for d in DEPTH_CHOICES if d == 1 or d * tile <= IN_FLIGHT_BYTES[1])


def split_choices(
    blocks: int, k: int, block_k: int, warps: int, sm_count: int = DEFAULT_SM_COUNT
) -> tuple[int, ...]:
    """The split-k factors tried for a grid of `blocks` blocks (of `warps` warps) without split.

    The powers of two s with K a multiple of `block_k` * s and at least
    `MIN_TILES_PER_SPLIT` k-tiles per split (s = 1 always qualifies), whose grid of blocks * s
    covers the `sm_count` SMs at least once and is at most `MAX_WAVES` full waves (a full wave:
    sm_count * `RESIDENT_WARPS` / warps blocks); when none covers the SMs, the largest such s
    within `MAX_WAVES` waves (1 when even the unsplit grid is larger).
    """
    full_wave = sm_count * max(1, RESIDENT_WARPS // warps)
    tiles = k // block_k
    valid = [
        s
        for s in (1 << e for e in range(16))
        if tiles % s == 0 and (s == 1 or tiles // s >= MIN_TILES_PER_SPLIT)
    ]
    within = [s for s in valid if blocks * s <= MAX_WAVES * full_wave]
    covering = tuple(s for s in within if blocks * s >= sm_count)
    return covering or ((max(within),) if within else (1,))


def row_tilings(m: int) -> tuple[tuple[bool, int], ...]:
    """The (weights_as_a, units_m) row tilings of the search space for batch `m`'s bucket (see
    the module docstring), in order: the 8-row form first where it is offered. Raises
    `TuningError` for anything but an int >= 1."""
    bucket = m_bucket(m)
    if bucket.hi - 1 <= BLOCK_M_WEIGHTS_AS_A:
        return ((True, 1),)
    tilings = []
    if bucket.lo <= BLOCK_M_WEIGHTS_AS_A * MAX_UNITS_M:
        tilings.append((True, -(-bucket.lo // BLOCK_M_WEIGHTS_AS_A)))
    tilings.append((False, min(MAX_UNITS_M, -(-bucket.lo // BLOCK_M))))
    return tuple(tilings)


def fit_rows(config: DequantConfig, m: int) -> DequantConfig:
    """`config` with `units_m` raised so that one row of blocks holds the `m` rows, where that
    takes at most `MAX_UNITS_M` row blocks (else `config` unchanged): a bucket's choice, made
    at its smallest batch, then decodes the weights once for every batch of the bucket instead
    of once per row of blocks. Raises `TuningError` for anything but an int m >= 1."""
    m_bucket(m)  # TuningError for anything but an int >= 1
    needed = -(-m // (config.block_m // config.units_m))
    if config.units_m < needed <= MAX_UNITS_M:
        return replace(config, units_m=needed)
    return config


def stream_k_residencies(warps: int, block_m: int) -> tuple[int, ...]:
    """The blocks an SM that the search space's stream-K points of `warps`-warp blocks of
    `block_m` rows are sized for (a wave of that many blocks on every SM, asked of the compiler
    by `min_blocks_per_sm`), most first: the byte model's (`RESIDENT_WARPS` / warps, at least
    1), and for blocks of at least 16 rows (`BLOCK_M`) also three quarters of it, where their
    registers fit without spilling (see the module docstring). Raises `TuningError` for warps
    or block_m that are not ints >= 1."""
    for name, value in (("warps", warps), ("block_m", block_m)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TuningError(f"stream_k_residencies: {name}={value!r}; expected an int >= 1")
    full = max(1, RESIDENT_WARPS // warps)
    if block_m < BLOCK_M:
        return (full,)
    return tuple(sorted({full, max(1, full * 3 // 4)}, reverse=True))


def biased_cast_saves(weight_dtype: DataType, activation_dtype: DataType) -> bool:
    """Whether a biased cast (`ir.dtypes.magic_bias`) of `weight_dtype` codes in the packed
    order costs fewer instructions than the plain cast (`backend.fast_conversions`): 1, 2, 4
    and 8 bits to f16; not where none is available (floats, bytes to bf16); not 3, 5, 6 and 7
    bits, whose fixed field positions join fields of two windows under the magic number (SASS
    of the decode kernel with the weights as A, `backend.sass`: 971 -> 1164 loop instructions
    at 3 bits, 1224 -> 1426 at 7; 1, 2, 4 and 8 bits 19 to 32 % shorter)."""
    if dtypes.magic_bias_error(weight_dtype, activation_dtype) is not None:
        return False
    sources = packed_lane_order(weight_dtype.nbits)
    plans = [
        plan_conversion(weight_dtype, activation_dtype, sources, UNIT_ELEMENTS, 0, biased)
        for biased in (False, True)
    ]
    if None in plans:
        return False
    return plans[1].instructions < plans[0].instructions


def decode_search_space(
    weight_dtype: DataType,
    k: int,
    n: int,
    m: int,
    *,
    group_size: int = 128,
    sm_count: int = DEFAULT_SM_COUNT,
    compact: bool = False,
    activation_dtype: DataType = dtypes.f16,
    zero_points: bool = False,
    deterministic: bool = True,
) -> list[DequantConfig]:
    """The `DequantConfig` candidates for a (K, N) weight of `weight_dtype` at batch `m`, in a
    fixed order (row tiling, warps, units_k, split, depth, late_scale); see the module
    docstring for the byte model. ``deterministic=False`` adds the `combine_parts` twins of
    the split and stream-K points (results then vary in their last bits from launch to
    launch).

    `compact` keeps, of those, the points of the last row tiling with 4 warps (or the warp
    count N allows), depth 1 and the late scale where the k-tile is the group: the k-tile
    sizes and splits of the byte model alone (2 to 10 candidates at the benchmark's points),
    for surveys of many weight types (a tuning in its own record: its space differs).
    `activation_dtype` and `zero_points` are the problem's (`DecodeProblem`): they decide
    whether the `magic_bias` points are offered (not with zero points).

    Every candidate satisfies the program's requirements: group_size a multiple of 16 * units_k,
    K of 16 * units_k * split, N of 64 * warps * units_n. Raises `VerificationError` for a
    problem no configuration fits (K, N or the group size not multiples of 16, 64, 16) and
    `TuningError` for m < 1 or sm_count < 1.
    """
    problem = DecodeProblem(weight_dtype, group_size, k, n, activation_dtype, zero_points)
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise TuningError(f"decode search space: m={m!r}; expected an int >= 1")
    if isinstance(sm_count, bool) or not isinstance(sm_count, int) or sm_count < 1:
        raise TuningError(f"decode search space: sm_count={sm_count!r}; expected an int >= 1")
    warp_choices = [w for w in WARP_CHOICES if n % (UNIT_N * w) == 0] or [1]
    biased = not zero_points and biased_cast_saves(problem.weight_dtype, activation_dtype)
    tilings = row_tilings(m)
    if compact:
        warp_choices = [4] if 4 in warp_choices else warp_choices[:1]
        tilings = tilings[-1:]
    space = []
    for weights_as_a, units_m in tilings:
        block_m = (BLOCK_M_WEIGHTS_AS_A if weights_as_a else BLOCK_M) * units_m
        # The late-scale points' twins with the biases kept: one 8-row block.
        one_block = biased and weights_as_a and units_m == 1
        combined = not deterministic and not compact
        for warps in warp_choices:
            for units_k in units_k_choices(problem.weight_dtype.nbits, k, group_size):
                blocks = (n // (UNIT_N * warps)) * math.ceil(m / block_m)
                # Scaling the products instead of the weights needs the k-tile to be the group;
                # a k-tile past the window's top is there for the late scale alone.
                lates = (False, True) if UNIT_K * units_k == group_size else (False,)
                if _warp_tile_bytes(problem.weight_dtype.nbits) * units_k > IN_FLIGHT_BYTES[1]:
                    lates = lates[-1:]
                depths = depth_choices(problem.weight_dtype.nbits, units_k)
                if compact:
                    lates, depths = lates[-1:], (1,)
                stage_bytes = ring_stage_bytes(problem, warps, units_k, block_m)
                ring = (
                    not compact
                    and block_m >= BLOCK_M
                    and RING_STAGES * stage_bytes <= RING_SHARED_BYTES
                )
                for split in split_choices(blocks, k, UNIT_K * units_k, warps, sm_count):
                    for depth in depths:
                        for late in lates:
                            point = DequantConfig(
                                warps=warps,
                                units_n=1,
                                units_k=units_k,
                                depth=depth,
                                split=split,
                                late_scale=late,
                                weights_as_a=weights_as_a,
                                units_m=units_m,
                            )
                            point = with_batched_parts(point)
                            twins = [point]
                            if late and not compact and one_block:
                                twins.append(replace(point, magic_bias=True))
                            if not compact:
                                twins = [t for c in twins for t in with_rows_ahead_twin(c)]
                                twins += with_parts_batch_twin(point)[1:]
                            space += twins
                            if combined and split > 1:
                                space += [
                                    replace(t, combine_parts=True, parts_batch=1)
                                    for t in twins
                                    if parts_twin_base(t) is None
                                ]
                    if ring:
                        ringed = DequantConfig(
                            warps=warps,
                            units_n=1,
                            units_k=units_k,
                            split=split,
                            unroll=RING_STAGES,
                            late_scale=lates[-1],
                            weights_as_a=weights_as_a,
                            units_m=units_m,
                            stages=RING_STAGES,
                        )
                        ringed = with_batched_parts(ringed)
                        rings = with_rows_ahead_twin(ringed) + with_parts_batch_twin(ringed)[1:]
                        space += rings
                        if combined and split > 1:
                            space += [
                                replace(r, combine_parts=True, parts_batch=1)
                                for r in rings
                                if parts_twin_base(r) is None
                            ]
                # Stream-K where the tiles leave a partial wave: one wave of persistent blocks
                # at each occupancy (asked of the compiler), sharing all the tiles' k-tiles
                # evenly.
                for resident in stream_k_residencies(warps, block_m):
                    wave = sm_count * resident
                    if compact or not blocks % wave or k // (UNIT_K * units_k) < 2:
                        continue
                    streamed = DequantConfig(
                        warps=warps,
                        units_n=1,
                        units_k=units_k,
                        late_scale=lates[-1],
                        weights_as_a=weights_as_a,
                        units_m=units_m,
                        min_blocks_per_sm=resident,
                        stream_k=wave,
                    )
                    streams = [streamed]
                    # The same with shared rings, where `resident` blocks' rings fit what two
                    # blocks' rings of `RING_SHARED_BYTES` may take.
                    if block_m >= BLOCK_M:
                        streams += [
                            replace(streamed, stages=stages, unroll=STREAM_RING_STAGES)
                            for stages in stream_ring_depths(resident, stage_bytes)
                        ]
                    for point in streams:
                        space.append(point)
                        if combined:
                            space.append(replace(point, combine_parts=True))
    return space


def stream_ring_depths(resident: int, stage_bytes: int) -> tuple[int, ...]:
    """The stages of the shared rings the search space offers a stream-K point whose
    `resident` blocks an SM each take `stage_bytes` a stage: `STREAM_RING_STAGES`, and the
    most up to `RING_STAGES` where that is more, as far as the rings of all `resident` blocks
    fit two blocks' `RING_SHARED_BYTES` (none where not even the first does). A ring of S
    stages has S - 1 k-tiles loading, so the deeper one keeps more weight bytes in flight at
    the same occupancy."""
    deepest = min(RING_STAGES, 2 * RING_SHARED_BYTES // (resident * stage_bytes))
    if deepest < STREAM_RING_STAGES:
        return ()
    return (STREAM_RING_STAGES,) if deepest == STREAM_RING_STAGES else (STREAM_RING_STAGES, deepest)


def ring_stage_bytes(problem: DecodeProblem, warps: int, units_k: int, block_m: int) -> int:
    """The shared bytes of one stage of the shared ring (`DequantConfig.stages`) of a block of
    `warps` warps, `units_k` k16 steps a k-tile and `block_m` rows for `problem`: the k-tile's
    packed weights of the block's columns (`weight_ring_thread_words` a thread, padded at the
    widths that are not powers of two) and its activations."""
    thread_words = weight_ring_thread_words(problem.weight_dtype.nbits, units_k, 1)
    return (
        warps * UNIT_LANES * thread_words * 4
        + block_m * UNIT_K * units_k * problem.activation_dtype.nbits // 8
    )


STEADY_FROM_US = 1000.0
"""`DecodeMeasure` times finalists back to back where the fastest takes at least this long
(1 ms: the prefill's launches at 4096 rows, not the decode's)."""


class DecodeMeasure:
    """The GPU measure of `DecodeMatmul.tuned`: ``measure(operation)`` runs `operation` on
    random inputs of `problem` at batch `m` (made on the current device at the first call),
    checks its result against torch (``a.float() @ dequantized.float()``, the dequantized weight
    rounded to the activation type as the kernel rounds it) within `tolerance` in the relative
    Frobenius norm (default 2e-3 for f16, 1e-2 for bf16: `TuningError` beyond), then returns
    `backend.timing.median_us` of it over `repeats` runs, with `flush` (default
    `backend.timing.flush_buffer()`); ``in_turns(operations)`` times several in turns, and
    where the fastest of them takes `steady_from_us` or longer (None: never), back to back as
    well, and gives those times (see `in_turns`).
    """

    def __init__(
        self,
        problem: DecodeProblem,
        m: int,
        *,
        repeats: int = 30,
        flush: Any = None,
        seed: int = 0,
        tolerance: float | None = None,
        steady_from_us: float | None = STEADY_FROM_US,
    ) -> None:
        m_bucket(m)  # TuningError for anything but an int >= 1
        if steady_from_us is not None and (
            isinstance(steady_from_us, bool)
            or not isinstance(steady_from_us, (int, float))
            or not steady_from_us >= 0
        ):
            raise TuningError(
                f"DecodeMeasure: steady_from_us={steady_from_us!r}; expected a number >= 0 or None"
            )
        self.problem, self.m, self.repeats, self.seed = problem, m, repeats, seed
        self.steady_from_us = steady_from_us
        if tolerance is None:
            tolerance = 2e-3 if problem.activation_dtype == dtypes.f16 else 1e-2
        self.tolerance = tolerance
        self._flush = flush
        self._inputs: Mapping[str, Any] | None = None

    def inputs(self) -> Mapping[str, Any]:
        """The random inputs (made at the first call): `a`, `packed`, `scales`, `zeros` (None
        without zero points) and `expected`, the f32 reference result."""
        if self._inputs is None:
            self._inputs = decode_inputs(self.problem, self.m, seed=self.seed)
        return self._inputs

    def _check_problem(self, operation: Any) -> None:
        """`TuningError` unless `operation` computes this measure's problem."""
        if operation.problem != self.problem:
            raise TuningError(
                f"measure of {self.problem} given an operation for {operation.problem}; expected "
                "the same problem"
            )

    def __call__(self, operation: DecodeMatmul) -> float:
        from backend.timing import flush_buffer, median_us

        self._check_problem(operation)
        inputs = self.inputs()
        out = operation(inputs["a"], inputs["packed"], inputs["scales"], inputs["zeros"])
        error = relative_error(out, inputs["expected"])
        if not error <= self.tolerance:
            raise TuningError(
                f"{operation!r} at m={self.m}: relative error {error:.2e} against torch; "
                f"expected at most {self.tolerance:.1e}"
            )
        if self._flush is None:
            self._flush = flush_buffer(out.device)

        def run() -> None:
            operation(inputs["a"], inputs["packed"], inputs["scales"], inputs["zeros"], out)

        return median_us(run, self._flush, self.repeats)

    def in_turns(self, operations: Sequence[Any]) -> list[float]:
        """The times of `operations` (each measured by this measure before: its result
        checked) timed in turns on the same inputs (`backend.timing.medians_in_turns`, `repeats`
        rounds), in their order: the tuner's finalists (`backend.autotune`).

        Where the fastest of them takes `steady_from_us` or longer, the card's power limit
        sets their clocks, and the protocol's turns (a flush read and another run before each)
        blur what each one's own draw costs: at 4096 rows on 8192 x 57344, the tile in groups of
        4 tile rows, level to 2.5 % faster than the plain one in turns, ran 3 to 6 % faster
        back to back, at a higher clock (`quantized_matmul_prefill_steady_h100.*`). So those
        finalists are then timed back to back as well (`backend.timing.steady_in_turns`,
        `steady_launches` a block), as a model's layers run, and those times are given."""
        from backend.timing import flush_buffer, medians_in_turns, steady_in_turns, steady_launches

        inputs = self.inputs()
        runs = {}
        for index, operation in enumerate(operations):
            self._check_problem(operation)
            out = operation(inputs["a"], inputs["packed"], inputs["scales"], inputs["zeros"])
            runs[f"{index}"] = functools.partial(
                operation, inputs["a"], inputs["packed"], inputs["scales"], inputs["zeros"], out
            )
            if self._flush is None:
                self._flush = flush_buffer(out.device)
        times = medians_in_turns(runs, self._flush, self.repeats)
        fastest = min(times.values())
        if self.steady_from_us is not None and fastest >= self.steady_from_us:
            steady = steady_in_turns(runs, steady_launches(fastest))
            return [steady[f"{index}"].us for index in range(len(operations))]
        return [times[f"{index}"] for index in range(len(operations))]


def relative_error(actual: Any, expected: Any) -> float:
    """``|actual - expected| / |expected|`` in the Frobenius norm, computed in float64."""
    difference = (actual.double() - expected.double()).norm()
    return float(difference / expected.double().norm().clamp_min(1e-30))


def decode_inputs(problem: DecodeProblem, m: int, *, seed: int = 0) -> dict[str, Any]:
    """Random inputs of `problem` at batch `m` on the current CUDA device, seeded by `seed`.

    `a` (m, K) uniform in [-1, 1); `codes` (K, N) uniform over the weight type's codes;
    `packed` their packed form; `scales` the packed (groups, N) scales, uniform in [0.5, 1.5)
    / 2^(b-1); `zeros` the packed zero points, the values of random codes (None without zero
    points); `dequantized` (K, N) = (W - Z) * S in f32 rounded once to the activation type;
    `expected` = a @ dequantized in f32. Tensors of the activation type are of its torch dtype.
    """
    import numpy as np
    import torch

    p = problem
    act = _torch_dtype(p.activation_dtype)
    device = torch.device("cuda", torch.cuda.current_device())
    generator = torch.Generator(device=device).manual_seed(seed)
    nbits = p.weight_dtype.nbits
    table = torch.tensor(
        p.weight_dtype.decode(np.arange(1 << nbits)).astype(np.float32), device=device
    )
    codes = torch.randint(0, 1 << nbits, (p.k, p.n), device=device, generator=generator)
    scales = (torch.rand((p.groups, p.n), device=device, generator=generator) + 0.5) / 2 ** (
        nbits - 1
    )
    scales = scales.to(act)
    weights = table[codes]
    zeros = None
    if p.zero_points:
        zero_codes = torch.randint(
            0, 1 << nbits, (p.groups, p.n), device=device, generator=generator
        )
        zeros = table[zero_codes].to(act)
        weights = weights - zeros.float().repeat_interleave(p.group_size, dim=0)[: p.k]
    dequantized = (weights * scales.float().repeat_interleave(p.group_size, dim=0)[: p.k]).to(act)
    a = (torch.rand((m, p.k), device=device, generator=generator) * 2 - 1).to(act)
    packed, _ = pack_weights(codes, p.weight_dtype)
    return {
        "a": a,
        "codes": codes,
        "packed": packed,
        "scales": pack_scales(scales),
        "zeros": None if zeros is None else pack_scales(zeros),
        "dequantized": dequantized,
        "expected": a.float() @ dequantized.float(),
    }

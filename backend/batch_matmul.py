"""A quantized layer's matmul above the decode rows, as the fastest of dequantize-then-matmul and
the prefill kernels on the packed weights, chosen by measurement.

`BatchMatmul(problem, path)` compiles one way of computing, for a `DecodeProblem` (the layer's
weight type, group size, K, N, activation type and zero points),

    out (m, N) = a (m, K) @ dequantized,   dequantized = (W - Z) * S   (W * S without zero points)

from the packed weights, scales and zero points (`ir.examples.packed_weights`), every launch
included. A *path* is a mapping: ``{"path": "dequantize"}`` expands the weights to the
activation type with `ir.examples.dequantize_weights` and multiplies with ``torch.matmul``
(cuBLAS: two launches); ``{"path": "prefill", **fields}`` runs
`ir.examples.wgmma_dequant_matmul` with those `WgmmaDequantConfig` fields (one launch: the
weights dequantized in registers into the tensor cores; with ``split``, k split over blocks,
the launch also takes an f32 workspace and the operation's tile counters, `split_workspace`;
likewise with ``stream_k``).
Both compute the same dequantized weights; the results differ by the order of the f32 sums.

`BatchMatmul.tuned(problem, m)` builds the path the autotuner (`backend.autotune`) picks for the
M bucket of `m` on the current GPU from `BATCH_PATHS`, each checked and timed on random inputs
by `backend.decode_matmul.DecodeMeasure`; the choice is remembered in the kernel cache
directory, so a second call (in this process or another) measures nothing. A path that does not
fit the problem (a group size of 32 for the prefill kernel's 64-deep k-tiles, say) is pruned.
Since dequantize-then-matmul is always among the candidates, the chosen path is never slower
than it, up to the timing's noise. `backend.quantized_linear.QuantizedLinear` uses it on CUDA
from `DECODE_MAX_ROWS` to `BATCH_MAX_ROWS` rows.

torch is imported inside the functions that launch or measure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TextIO

from backend.autotune import Scalar, TuningResult, autotune, m_bucket
from backend.cache import CubinCache, RecordStore
from backend.compile import CompiledKernel, compile, lower_all
from backend.decode_matmul import (
    DEFAULT_SM_COUNT,
    DecodeMeasure,
    DecodeProblem,
    TileCounters,
    decode_tuning_key,
)
from backend.device import current_arch
from backend.errors import LaunchError
from ir import dtypes
from ir.errors import VerificationError
from ir.examples.dequantize_weights import dequantize_weights_program
from ir.examples.packed_prefill import PrefillTile
from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig, wgmma_dequant_matmul
from ir.program import Program
from ir.specialize import specialize

NAMESPACE = "batch_matmul/10"
"""The autotuner's namespace of the path choice (a new version is a new set of records: 10 since
the candidates include the grouped staged tile in clusters of two)."""
DEQUANTIZE = {"path": "dequantize"}
"""Dequantize-then-matmul: the weights expanded to the activation type, then cuBLAS."""
PRODUCER = {"release": True, "producer": True, "producer_registers": 24}
"""The fields of a prefill path whose producer warpgroup issues the activation copies, keeping
24 registers a thread and giving the rest to the consumers."""
FRAGMENT_TILE = {
    "warp_columns": 16,
    "warpgroups": 2,
    "block_m": 256,
    "min_blocks_per_sm": 1,
    "unroll": 2,
    "overlap_dot": True,
    **PRODUCER,
}
"""The fields of the 128 x 256 prefill tile: each warp one A fragment of its warpgroup's unit
(`WgmmaDequantConfig.warp_columns`), two consumer warpgroups, 256 rows, each copy's dot in
flight into the next."""
ROW_TILE_128 = {"block_m": 128, "units_k": 8, "stages": 4, "staged_store": True}
"""The fields the 128-row tiles share: 128 rows, 128-deep k-tiles in four stages (32 KB
each), C staged in the ring's memory."""
REFILLED = {"depth": 1, "refill_in_place": True}
"""The fields of a tile whose weights are loaded into the registers of the k-tile just
dequantized (one k-tile of registers, no register copies in the k loop)."""
STAGED_REFILLED = {"units_k": 8, "stages": 3, "staged_store": True, **REFILLED}
"""The fields of the staged 128 x 256 tile refilled in place: 128-deep k-tiles in three
stages, C staged in the ring's memory."""
SM_WAVE = DEFAULT_SM_COUNT
"""The wave of a split-tail path in `BATCH_PATHS` (one 128 x 256 block an SM): the H200's SMs;
`batch_paths` gives the current GPU's."""
BATCH_PATHS: tuple[Mapping[str, Scalar], ...] = (
    DEQUANTIZE,
    {"path": "prefill", "block_m": 64, "stages": 4, "min_blocks_per_sm": 2, **PRODUCER},
    {"path": "prefill", "block_m": 64, "stages": 4, "min_blocks_per_sm": 2, "split": 2, **PRODUCER},
    {"path": "prefill", **FRAGMENT_TILE, "units_k": 8, "stages": 3, "depth": 2},
    {"path": "prefill", **FRAGMENT_TILE, "units_k": 8, "stages": 3, "depth": 2, "split": 2},
    {
        "path": "prefill",
        **FRAGMENT_TILE,
        "units_k": 8,
        "stages": 3,
        "depth": 2,
        "staged_store": True,
    },
    {"path": "prefill", **FRAGMENT_TILE, **ROW_TILE_128, "depth": 2},
    {
        "path": "prefill",
        **FRAGMENT_TILE,
        **ROW_TILE_128,
        "warpgroups": 3,
        "depth": 1,
        "refill_in_place": True,
    },
    {"path": "prefill", **FRAGMENT_TILE, **STAGED_REFILLED},
    {"path": "prefill", **FRAGMENT_TILE, **ROW_TILE_128, "depth": 1, "refill_in_place": True},
    {"path": "prefill", **FRAGMENT_TILE, "units_k": 8, "stages": 3, **REFILLED, "split": 2},
    {"path": "prefill", **FRAGMENT_TILE, **STAGED_REFILLED, "group_m": 4},
    {"path": "prefill", **FRAGMENT_TILE, **STAGED_REFILLED, "split": 2, "tail_wave": SM_WAVE},
    {"path": "prefill", **FRAGMENT_TILE, **STAGED_REFILLED, "group_m": 4, "cluster_n": 2},
)
"""The candidates, in order (equal times go to the earlier): dequantize-then-matmul, and the
prefill kernel in the forms measured best on the H200 (benchmarks/results/
quantized_matmul_notes.md, "a 128 x 256 tile"): 64 rows a block with a producer
warpgroup, alone and with k split in two (the fastest forms of 64-row tiles, for batches a
256-row tile would mostly leave empty); the 128 x 256 tile of `FRAGMENT_TILE` with 128-deep
k-tiles (the fastest at 4096 rows), alone and with k split in two (for layers with fewer
tiles than SMs at 256 rows, such as 8192 x 8192 and 28672 x 8192: with the parts summed in
the accumulator's register order, level with Humming there or faster); and the unsplit
tile with C staged through the ring's memory and stored in 16-byte runs (up to 4 % faster
than the plain tile at 4096 rows; it replaced the 64-deep staged form, which it matched or beat
at 15 of the 16 points measured, i4 and i8 at 256 and 4096 rows, the plain tile beating both
at the sixteenth); then tiles of 128 rows (`ROW_TILE_128`), for batches whose 256-row tiles
leave SMs idle: 128 x 128 (at 256 rows, 8192 x 8192 has 128 such tiles for 132 SMs where it
has 64 of 128 x 256, and 8192 x 57344 seven waves of them nearly full where it has 3.4 waves
of the larger tile) and 192 x 128 with three consumer warpgroups (4096 x 12288 at 256 rows:
128 tiles where 128 x 256 gives 96), whose consumers' register budget of 160 holds the
weights of one k-tile, the next loaded into its registers once it is dequantized
(`refill_in_place`; with a ring of registers, 8-bit weights spill); and the staged 128 x 256
tile with its weights refilled in place (no register copies in its k loop). The 128-deep
k-tiles need group sizes of 128 (others prune them); the fragment tiles need 4- or 8-bit
weights, and N a multiple of their columns. Then three forms measured better than an earlier
path at some layers (`quantized_matmul_prefill_refilled_m256.*`,
`quantized_matmul_prefill_grid_groups_wide.*`): the 128 x 128 tile refilled in place (i4 8192 x
8192 at 256 rows: 55.7 us, Humming 57.7), the split in two refilled in place (faster than the
split with a ring of registers at all four points measured, 256 rows, 8192 x 8192 and 8192 x
57344), and the staged tile refilled in place with the launch grid in groups of 4 tile rows
(`group_m`: a wave reads the weights of a quarter of the column tiles; at 4096 rows 1-2 % faster
at i8, 8192 x 57344 and 4096 x 12288, and level or up to 1 % slower at i4). Last, the staged
refilled tile with the tiles of its last partial wave split in two along k (`tail_wave`,
`ir.examples.split_tail`): at 8192 x 57344 and 256 rows, 448 tiles leave 52 to a fourth wave
of 132 SMs, which took 82.7 us alone and 54.4 split in two (i4; three full waves 270.2).
And the grouped staged tile launched in clusters of two column tiles that share each
activation copy by multicast (`cluster_n`): at 4096 rows of 8192 x 57344, run back to back
as a model's layers are, it was the fastest form of the tile, 3.9 % (i4) and 7.4 % (i8) faster
than the staged tile alone and level with Humming, where by the protocol it was 2.8 % (i4)
slower (`quantized_matmul_prefill_steady_h100*`: its lighter traffic keeps a higher clock at
the card's power limit)."""


def batch_paths(sm_count: int = DEFAULT_SM_COUNT) -> tuple[Mapping[str, Scalar], ...]:
    """`BATCH_PATHS` for a GPU of `sm_count` SMs: the split-tail path's wave that many blocks."""
    if isinstance(sm_count, bool) or not isinstance(sm_count, int) or sm_count < 1:
        raise VerificationError(f"batch paths: sm_count={sm_count!r}; expected an int >= 1")
    return tuple(
        {**path, "tail_wave": sm_count} if path.get("tail_wave") else path for path in BATCH_PATHS
    )


DEQUANTIZE_WARPS = 4
"""Warps of the dequantization kernel: one 64-column unit each, 256 columns a block."""


def _torch_dtype(dtype: Any) -> Any:
    import torch

    return {dtypes.f16: torch.float16, dtypes.bf16: torch.bfloat16}[dtype]


def prefill_config(path: Mapping[str, Scalar]) -> WgmmaDequantConfig | None:
    """The `WgmmaDequantConfig` of a prefill path, None for dequantize-then-matmul. Raises
    VerificationError for a path of another kind or a field no configuration has."""
    fields = dict(path)
    kind = fields.pop("path", None)
    if kind == "dequantize" and not fields:
        return None
    if kind == "prefill":
        try:
            return WgmmaDequantConfig(**fields)  # type: ignore[arg-type]
        except TypeError as error:
            raise VerificationError(f"batch path {dict(path)!r}: {error}") from None
    raise VerificationError(
        f"batch path {dict(path)!r}; expected {{'path': 'dequantize'}} or {{'path': "
        "'prefill', ...WgmmaDequantConfig fields}"
    )


def split_workspace(
    config: PrefillTile, m: int, n: int, k: int, device: Any, counters: TileCounters
) -> tuple[Any, ...]:
    """The arguments a prefill launch of `config` for C of shape (m, n) and K = `k` takes
    between the weights and C: none without a split or stream-K; else a new f32 partial-sum
    workspace of `PrefillTile.partial_shape` and the zeroed tile counters from `counters` (on
    `device`)."""
    shape = config.partial_shape(m, n, k)
    if not shape[0]:
        return ()
    import torch

    partial = torch.empty(shape, dtype=torch.float32, device=device)
    return partial, counters(config.tiles(m, n), device)


def batch_program(problem: DecodeProblem, path: Mapping[str, Scalar]) -> Program:
    """The tile program of `path` for `problem`, specialized to its N and K: the dequantization
    kernel, or the prefill matmul. Raises VerificationError (or the specialization's error)
    when the path does not fit the problem, and for a path of another kind."""
    config = prefill_config(path)
    if config is None:
        program = dequantize_weights_program(
            problem.weight_dtype,
            problem.group_size,
            problem.activation_dtype,
            zero_points=problem.zero_points,
            warps=DEQUANTIZE_WARPS,
        )
    else:
        program = wgmma_dequant_matmul(
            problem.weight_dtype,
            problem.group_size,
            config,
            activation_dtype=problem.activation_dtype,
            zero_points=problem.zero_points,
        )
    constants = {"n": problem.n, "k": problem.k}
    return specialize(program, constants)


class BatchMatmul:
    """One compiled path of a problem's matmul (see the module docstring).

    `BatchMatmul(problem, path, arch=None, cache=None)` compiles for `arch` (default: the
    current GPU) through the CUBIN `cache`. Attributes: `problem`, `path`, `launches` (2 for
    dequantize-then-matmul, 1 for the prefill kernel), `kernel`, and `tuning` (the
    `TuningResult` when built by `tuned`, else None).
    """

    def __init__(
        self,
        problem: DecodeProblem,
        path: Mapping[str, Scalar],
        *,
        arch: str | None = None,
        cache: CubinCache | None = None,
    ) -> None:
        self._setup(problem, path, batch_program(problem, path), arch, cache)

    def _setup(
        self,
        problem: DecodeProblem,
        path: Mapping[str, Scalar],
        program: Program,
        arch: str | None,
        cache: CubinCache | None,
    ) -> None:
        self.problem, self.path = problem, dict(path)
        self.tuning: TuningResult[BatchMatmul] | None = None
        chosen = current_arch() if arch is None else arch
        self.kernel: CompiledKernel = compile(program, chosen, cache=cache)
        self.prefill = prefill_config(path)
        self._counters = TileCounters()

    @property
    def launches(self) -> int:
        """Kernel launches per call: the dequantization and cuBLAS, or the prefill kernel."""
        return 1 if self.prefill is not None else 2

    @classmethod
    def tuned(
        cls,
        problem: DecodeProblem,
        m: int,
        *,
        measure: Callable[[BatchMatmul], float] | None = None,
        store: RecordStore | None = None,
        cache: CubinCache | None = None,
        arch: str | None = None,
        gpu_name: str | None = None,
        workers: int | None = None,
        progress: bool | TextIO = True,
        sm_count: int | None = None,
    ) -> BatchMatmul:
        """The path the autotuner picks for `m`'s bucket (measured at the bucket's smallest
        batch) among `batch_paths` (`sm_count`). `measure(operation) -> microseconds` defaults
        to ``DecodeMeasure(problem, bucket.lo)`` on the current GPU (whose `in_turns` times
        the tuner's finalists again in turns, and back to back where they take a millisecond or
        longer); `gpu_name` defaults to the
        current GPU's name, `sm_count` to its SMs (`DEFAULT_SM_COUNT` where `gpu_name` is
        given) and `arch` to its architecture (give both and a `measure` to tune without a
        GPU); `store`, `cache`, `workers` and `progress` as `DecodeMatmul.tuned`. Raises
        `TuningError` when no path can be measured."""
        bucket = m_bucket(m)
        if gpu_name is None:
            import torch

            properties = torch.cuda.get_device_properties(torch.cuda.current_device())
            gpu_name = properties.name
            if sm_count is None:
                sm_count = properties.multi_processor_count
        paths = batch_paths(DEFAULT_SM_COUNT if sm_count is None else sm_count)
        arch = current_arch() if arch is None else arch

        timed = DecodeMeasure(problem, bucket.lo) if measure is None else measure

        def build(path: dict[str, Scalar], program: Program) -> BatchMatmul:
            operation = cls.__new__(cls)
            operation._setup(problem, path, program, arch, cache)
            return operation

        result = autotune(
            NAMESPACE,
            decode_tuning_key(problem, bucket.lo, gpu_name=gpu_name, arch=arch),
            [dict(path) for path in paths],
            construct=lambda path: batch_program(problem, path),
            build=build,
            # Every candidate lowered at once in worker processes, into compile's memo, so
            # that the builds' threads (one GIL) only compile.
            prepare=lambda programs: lower_all([(p, None) for p in programs], arch),
            measure=timed,
            measure_in_turns=getattr(timed, "in_turns", None),
            store=store,
            workers=workers,
            progress=progress,
        )
        operation = result.built
        operation.tuning = result
        return operation

    def __call__(self, a: Any, packed: Any, scales: Any, zeros: Any = None, out: Any = None) -> Any:
        """``a @ dequantized`` as an (m, N) tensor of a's dtype, written into `out` when given
        (contiguous, (m, N), a's dtype and device), else new. `a` is (m, K), f16 or bf16 as the
        problem's activations; `packed`, `scales` and `zeros` (with zero points only) as
        `DecodeMatmul` takes them. Raises LaunchError for a wrong argument."""
        import torch

        p = self.problem
        act = _torch_dtype(p.activation_dtype)
        if not isinstance(a, torch.Tensor) or a.ndim != 2 or a.shape[1] != p.k or a.dtype != act:
            raise LaunchError(
                f"BatchMatmul: a of {getattr(a, 'dtype', type(a).__name__)} and shape "
                f"{tuple(getattr(a, 'shape', ()))}; expected {act} of shape (m, {p.k})"
            )
        if (zeros is None) == p.zero_points:
            raise LaunchError(
                f"BatchMatmul: zeros {'missing' if zeros is None else 'given'}; the problem "
                f"{'has' if p.zero_points else 'has no'} zero points"
            )
        m = a.shape[0]
        if out is None:
            out = torch.empty((m, p.n), dtype=act, device=a.device)
        elif tuple(out.shape) != (m, p.n) or out.dtype != act or not out.is_contiguous():
            raise LaunchError(
                f"BatchMatmul: out of {out.dtype} and shape {tuple(out.shape)}; expected a "
                f"contiguous {act} tensor of shape ({m}, {p.n})"
            )
        extra = () if zeros is None else (zeros,)
        with torch.cuda.device(a.device):
            if self.prefill is None:
                weights = torch.empty((p.k, p.n), dtype=act, device=a.device)
                self.kernel(p.n, p.k, packed, scales, *extra, weights)
                torch.matmul(a, weights, out=out)
            else:
                config = self.prefill
                workspace = split_workspace(config, m, p.n, p.k, a.device, self._counters)
                self.kernel(
                    m,
                    p.n,
                    p.k,
                    a.contiguous(),
                    packed,
                    scales,
                    *extra,
                    *workspace,
                    out,
                    grid=config.grid(m, p.n, p.k),
                )
        return out

    def __repr__(self) -> str:
        p = self.problem
        return (
            f"BatchMatmul({p.weight_dtype} g{p.group_size} K={p.k} N={p.n} "
            f"{p.activation_dtype}{' zero points' if p.zero_points else ''}, {self.path}, "
            f"arch={self.kernel.arch!r})"
        )

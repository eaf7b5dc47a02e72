"""The f16 matmul example on the GPU against cuBLAS, for the prefill regime's baseline.

For each square size (4096 and 8192 by default), C = A @ B with A, B and C row-major f16 and
f32 accumulation: `ir.examples.matmul` on tensor cores (mma.sync) in each configuration of
`CONFIGS` (block tile, warps, k-tile, shared stages, swizzle), compiled for the current GPU,
beside cuBLAS (``torch.matmul``) on the same inputs. Each result is checked against cuBLAS's
first (relative error below `TOLERANCE`), then timed by the protocol of
``benchmarks/quantized_matmul.py`` (a 512 MiB read flush and a sleep kernel before each run,
CUDA events, the median of `--repeats`), ours and cuBLAS in turns
(`backend.timing.medians_in_turns`). Per point: microseconds,
TFLOP/s and the ratio to cuBLAS (cuBLAS time / ours: above 1 we are faster). Results go to
``<output>/matmul.json`` and ``.md``, the table printed last.

    python benchmarks/matmul.py [--sizes 4096,8192] [--repeats 30] [--output benchmarks/results]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from records import write_record  # a sibling module of the benchmarks

import backend
from backend.decode_matmul import relative_error
from backend.timing import flush_buffer, medians_in_turns
from ir.examples.matmul import matmul


def warpgroup_config(
    block_n: int,
    stages: int,
    warpgroups: int = 2,
    in_flight: bool = False,
    bulk: bool = False,
    group_m: int = 1,
    block_m: int = 128,
    hoist: bool = False,
    producer: bool = False,
    persistent: int = 0,
    staged: bool = False,
) -> tuple[str, dict[str, int | bool]]:
    """(name, options) of a warpgroup form: `block_m` x `block_n` x 64 tiles, `warpgroups`
    stacked along M, `stages` ring stages; `in_flight` orders the ring for a dot in flight; `bulk`
    copies the tiles by `copy_bulk` (TMA on sm_90a, `backend.bulk_copy`); `group_m` takes the
    tiles in groups of that many tile rows (`matmul`'s L2-friendly order); `hoist` compiles it
    with its block-invariant values computed once (`backend.compile(...,
    hoist_invariants=True)`: the grouped order's tile origin); `producer` gives the copies to a
    producer warp of their own; `persistent` launches that many blocks, each looping over
    tiles; `staged` stores C's tile through shared memory in whole rows (`staged_store`)."""
    plural = "s" if warpgroups > 1 else ""
    name = f"{block_m}x{block_n}x64 {warpgroups} warpgroup{plural} {stages} stages wgmma"
    options: dict[str, int | bool] = {
        "num_threads": 128 * warpgroups,
        "block_m": block_m,
        "block_n": block_n,
        "block_k": 64,
        "stages": stages,
        "wgmma": True,
    }
    if in_flight:
        name, options["overlap_dot"] = f"{name} in flight", True
    if bulk:
        name, options["bulk"] = f"{name} tma", True
    if producer:
        name, options["producer"] = f"{name} producer", True
    if persistent:
        name, options["persistent"] = f"{name} persistent {persistent}", persistent
    if group_m > 1:
        name, options["group_m"] = f"{name} group {group_m}", group_m
    if hoist:
        name, options["hoist_invariants"] = f"{name} hoisted", True
    if staged:
        name, options["staged_store"] = f"{name} staged store", True
    return name, options


WARPGROUP_CONFIGS = dict(
    [
        warpgroup_config(128, 3),
        warpgroup_config(256, 3),
        warpgroup_config(128, 3, in_flight=True),
        warpgroup_config(256, 3, in_flight=True),
        warpgroup_config(128, 4, in_flight=True),
        warpgroup_config(256, 4, in_flight=True),
        warpgroup_config(128, 5, in_flight=True),
        warpgroup_config(128, 4, warpgroups=1),
        warpgroup_config(128, 3, bulk=True),
        warpgroup_config(256, 3, bulk=True),
        warpgroup_config(128, 4, in_flight=True, bulk=True),
        warpgroup_config(256, 4, in_flight=True, bulk=True),
        warpgroup_config(256, 4, bulk=True),
        warpgroup_config(256, 4, in_flight=True, bulk=True, group_m=8),
        warpgroup_config(256, 4, in_flight=True, bulk=True, group_m=16),
        warpgroup_config(256, 4, in_flight=True, bulk=True, group_m=8, hoist=True),
        warpgroup_config(256, 4, in_flight=True, bulk=True, group_m=16, hoist=True),
        warpgroup_config(128, 3, bulk=True, group_m=8),
        warpgroup_config(128, 4, warpgroups=4, in_flight=True, bulk=True, block_m=256),
        warpgroup_config(
            128, 4, warpgroups=4, in_flight=True, bulk=True, block_m=256, group_m=8, hoist=True
        ),
        warpgroup_config(256, 4, in_flight=True, bulk=True, producer=True),
        warpgroup_config(256, 4, in_flight=True, bulk=True, producer=True, persistent=132),
        warpgroup_config(
            256, 4, in_flight=True, bulk=True, producer=True, persistent=132, group_m=8, hoist=True
        ),
        warpgroup_config(
            256, 4, in_flight=True, bulk=True, producer=True, persistent=132, group_m=16, hoist=True
        ),
        warpgroup_config(256, 4, warpgroups=3, in_flight=True, bulk=True, block_m=192),
        warpgroup_config(256, 3, warpgroups=3, in_flight=True, bulk=True, block_m=192),
        warpgroup_config(256, 4, in_flight=True, bulk=True, staged=True),
        warpgroup_config(256, 4, in_flight=True, bulk=True, group_m=8, hoist=True, staged=True),
        warpgroup_config(256, 4, in_flight=True, bulk=True, group_m=16, hoist=True, staged=True),
    ]
)
"""The warpgroup forms measured (`warpgroup_config`)."""

CONFIGS = {
    "64x64x32 4 warps 2 stages": {"num_threads": 128},
    "128x128x32 8 warps 3 stages swizzled": {
        "num_threads": 256,
        "block_m": 128,
        "block_n": 128,
        "stages": 3,
        "swizzle": True,
    },
    "128x128x32 8 warps 4 stages swizzled": {
        "num_threads": 256,
        "block_m": 128,
        "block_n": 128,
        "stages": 4,
        "swizzle": True,
    },
    "128x128x64 8 warps 3 stages swizzled": {
        "num_threads": 256,
        "block_m": 128,
        "block_n": 128,
        "block_k": 64,
        "stages": 3,
        "swizzle": True,
    },
    "128x256x32 8 warps 3 stages swizzled": {
        "num_threads": 256,
        "block_m": 128,
        "block_n": 256,
        "stages": 3,
        "swizzle": True,
    },
    **WARPGROUP_CONFIGS,
}
"""Name -> options of `ir.examples.matmul` (always with ``tensor_cores=True``; the wgmma ones
run as ``wgmma.mma_async`` on sm_90a, `backend.wgmma`; "in flight" ones order the ring for a
dot that runs on into the next k-tile, ``overlap_dot``, `backend.wgmma_pipeline`; "tma" ones
copy the tiles by ``copy_bulk``, bulk tensor copies on sm_90a, `backend.bulk_copy`; "producer"
ones issue them from a warp of their own, ``producer``; "persistent N" ones launch N blocks
that loop over the tiles, ``persistent``; "staged store" ones store C's tile through shared
memory in whole rows, ``staged_store``)."""
TOLERANCE = 1e-2
"""Largest relative error (Frobenius) against cuBLAS: both accumulate in f32, in other orders."""


@dataclass
class Point:
    """One (size, configuration): our and cuBLAS's microseconds, our TFLOP/s, the ratio."""

    size: int
    config: str
    ours_us: float
    cublas_us: float
    tflops: float
    vs_cublas: float


def measure(size: int, name: str, flush: torch.Tensor, repeats: int) -> Point:
    options = CONFIGS[name]
    generator = torch.Generator(device="cuda").manual_seed(size)
    a, b = (
        (torch.rand((size, size), device="cuda", generator=generator) * 2 - 1).half()
        for _ in range(2)
    )
    c = torch.empty((size, size), device="cuda", dtype=torch.float16)
    program_options = {key: value for key, value in options.items() if key != "hoist_invariants"}
    kernel = backend.compile(
        matmul(tensor_cores=True, **program_options),
        hoist_invariants=bool(options.get("hoist_invariants", False)),
    )
    # A persistent form declares its grid.
    grid = None
    if not options.get("persistent"):
        grid = (-(-size // options.get("block_n", 64)), -(-size // options.get("block_m", 64)))

    def ours() -> torch.Tensor:
        kernel(size, size, size, a, b, c, grid=grid)
        return c

    def cublas() -> torch.Tensor:
        return torch.matmul(a, b)

    error = relative_error(ours(), cublas())
    if not error < TOLERANCE:
        raise RuntimeError(f"matmul {size} {name}: differs from cuBLAS by {error:.2e}")
    times = medians_in_turns({"ours": ours, "cuBLAS": cublas}, flush, repeats)
    ours_us, cublas_us = times["ours"], times["cuBLAS"]
    return Point(size, name, ours_us, cublas_us, 2 * size**3 / ours_us / 1e6, cublas_us / ours_us)


def table(points: list[Point]) -> str:
    lines = [
        "| size | config | ours us | cuBLAS us | ours TFLOP/s | vs cuBLAS |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for p in points:
        lines.append(
            f"| {p.size} | {p.config} | {p.ours_us:.1f} | {p.cublas_us:.1f} | {p.tflops:.0f} "
            f"| {p.vs_cublas:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def chosen(name: str, wanted: str) -> bool:
    """Whether configuration `name` is one `--configs` `wanted` names: it contains one of the
    '|'-separated parts, or ends with one that ends in '$' (without it)."""
    return any(
        name.endswith(part[:-1]) if part.endswith("$") else part in name
        for part in wanted.split("|")
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (see the module docstring); return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4096,8192", help="square sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=30, help="timed runs (>= 30)")
    parser.add_argument("--output", default="benchmarks/results", help="directory of results")
    parser.add_argument(
        "--configs",
        default="",
        help="measure only the configurations whose name contains one of these '|'-separated "
        "parts (a part ending in '$': whose name ends with it)",
    )
    options = parser.parse_args(argv)
    if options.repeats < 30:
        parser.error(f"--repeats must be at least 30, got {options.repeats}")
    sizes = [int(size) for size in options.sizes.split(",")]
    names = [name for name in CONFIGS if chosen(name, options.configs)]
    if not names:
        parser.error(f"--configs {options.configs!r} names none of: {', '.join(CONFIGS)}")
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    flush = flush_buffer(torch.device("cuda"))
    points, failures = [], []
    output = Path(options.output)
    for size in sizes:
        for name in names:
            try:
                points.append(measure(size, name, flush, options.repeats))
            except RuntimeError as error:  # a wrong result: say so, measure the others
                failures.append(str(error))
                print(f"  FAILED {error}")
                continue
            print(f"  {size} {name}: {points[-1].ours_us:.1f} us")
            write_record(
                output, "matmul", points, table(points), repeats=options.repeats, timing="in turns"
            )
    print(table(points), end="")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""What the quantized matmuls' k loops issue, from their machine code (no GPU needed).

Each kernel is built as the timed benchmark builds it (`quantized_matmul.py`), compiled with
NVRTC for `--arch` (default sm_90a), disassembled with nvdisasm, and its main loop (the
innermost loop issuing tensor-core instructions, `backend.sass.Function.main_loop`) counted:

- ``register_dequant``: the decode kernel at each (weight, K, N, M) point whose configuration
  earlier runs recorded (``--configs-from``, the fastest's, as the timed benchmark's option of
  that name), then each with the ``--variants`` overrides (a configuration an override makes
  invalid is left out);
- ``wgmma_dequant``: the prefill kernel with `quantized_matmul.PREFILL_CONFIG` and each
  ``--options`` set (``;``-separated) at every (weight, K, N);
- ``batch_paths``: every prefill path of ``QuantizedLinear`` (`backend.batch_matmul.BATCH_PATHS`).

Per kernel: a thread's registers, the blocks an SM holds (`backend.occupancy`, from the
registers, the block's threads and its static and dynamic shared memory) and, for the decode
kernels, the waves their grid at the point's M makes on `--sms` SMs (above 1.0: a second wave),
the spill instructions in the whole kernel, the loop's
instructions and tensor-core instructions among them, instructions per tensor-core instruction,
the register copies of words a global load of the loop wrote (each waits for its load), and
the loop's instructions by mnemonic. These are static counts of one pass through the loop as
compiled (a loop may be unrolled), not what a profiler counts executed; they are what a
lowering change is checked by before it reaches a GPU. Results go to
``<output>/<stem>.json`` and ``<output>/<stem>.md`` (default stem ``sass_census``).

Usage::

    python benchmarks/sass_census.py --kernels register_dequant --weights i8,i4
        --configs-from benchmarks/results/quantized_matmul_decode_epilogue.json
        --variants refill_in_place=true [--batches 1] [--output benchmarks/results]
    python benchmarks/sass_census.py --kernels wgmma_dequant --weights i8
        --shapes 4096x12288 --options 'depth=1,refill_in_place=true'
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from quantized_matmul import (  # the sibling timed benchmark: its configurations and parsing
    GROUP_SIZE,
    PREFILL_CONFIG,
    configs_option,
    parse_overrides,
    parse_shapes,
)

from backend.batch_matmul import BATCH_PATHS, prefill_config
from backend.compile import compile_lowered, lower_all
from backend.decode_matmul import DEFAULT_SM_COUNT
from backend.nvrtc import nvrtc_version
from backend.occupancy import waves
from backend.sass import LoopReport, loop_report
from ir import dtypes
from ir.errors import VerificationError
from ir.examples.register_dequant_matmul import DequantConfig, register_dequant_matmul
from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig, wgmma_dequant_matmul
from ir.program import Program

KERNELS = ("register_dequant", "wgmma_dequant", "batch_paths")
"""The kernels `--kernels` names."""
CENSUS_COLUMNS = ("LOP3", "SHF", "PRMT", "HFMA2", "HMUL2", "FFMA", "IMAD", "LDG", "LDS", "BAR")
"""The mnemonics the table shows a column of (the JSON has every mnemonic)."""


@dataclass
class CensusPoint:
    """One kernel's row: what it is and its `backend.sass.LoopReport` fields."""

    weight: str
    kernel: str
    k: int
    n: int
    m: int | None
    config: dict[str, object]
    registers: int
    shared_bytes: int
    blocks_per_sm: int
    waves: float | None
    kernel_spills: int
    loop_instructions: int
    tensor_core: int
    copies_of_loads: int
    census: dict[str, int]


@dataclass(frozen=True)
class Build:
    """A program to compile, its row's first fields (`CensusPoint`'s weight, kernel, k, n,
    m and config) and the blocks of its launch grid (None where the census does not know it)."""

    row: dict[str, object]
    program: Program
    grid_blocks: int | None = None

    @classmethod
    def of(
        cls,
        weight: str,
        kernel: str,
        k: int,
        n: int,
        m: int | None,
        config: DequantConfig | WgmmaDequantConfig,
        program: Program,
        grid_blocks: int | None = None,
    ) -> Build:
        """The build of `program`, a kernel of `config` at (`k`, `n`) (`m` its recorded batch,
        None for the prefill kernels) launched on `grid_blocks` blocks (None: not known)."""
        return cls(
            {"weight": weight, "kernel": kernel, "k": k, "n": n, "m": m, "config": asdict(config)},
            program,
            grid_blocks,
        )


def decode_builds(
    weight: dtypes.DataType,
    shapes: list[tuple[int, int]],
    batches: list[int] | None,
    recorded: dict[tuple[str, int, int, int], DequantConfig],
    variants: list[dict[str, int | bool]],
) -> list[Build]:
    """The decode kernel of each recorded point of `weight` at `shapes` (and `batches`, when
    given), then of each of its `variants` that the program accepts."""
    builds = []
    for (name, k, n, m), config in sorted(recorded.items()):
        if name != weight.name or (k, n) not in shapes or (batches and m not in batches):
            continue
        for override in [{}, *variants]:
            candidate = replace(config, **override)
            try:
                program = register_dequant_matmul(weight, GROUP_SIZE, candidate)
            except VerificationError:
                continue
            blocks = math.prod(candidate.grid(m, n, k))
            builds.append(
                Build.of(weight.name, "register_dequant", k, n, m, candidate, program, blocks)
            )
    return builds


def prefill_builds(
    weight: dtypes.DataType, shapes: list[tuple[int, int]], option_sets: list[dict[str, object]]
) -> list[Build]:
    """The prefill kernel with `PREFILL_CONFIG` and each of `option_sets` at every shape."""
    builds = []
    for k, n in shapes:
        for options in option_sets:
            config = WgmmaDequantConfig(**{**PREFILL_CONFIG, **options})
            program = wgmma_dequant_matmul(weight, GROUP_SIZE, config)
            builds.append(Build.of(weight.name, "wgmma_dequant", k, n, None, config, program))
    return builds


def batch_path_builds(weight: dtypes.DataType, shapes: list[tuple[int, int]]) -> list[Build]:
    """Every prefill path of `BATCH_PATHS` at every shape (the dequantization path has no
    tensor-core loop)."""
    builds = []
    for k, n in shapes:
        for path in BATCH_PATHS:
            config = prefill_config(path)
            if config is None:
                continue
            program = wgmma_dequant_matmul(weight, GROUP_SIZE, config)
            builds.append(Build.of(weight.name, "batch_path", k, n, None, config, program))
    return builds


def census(builds: list[Build], arch: str, sm_count: int = DEFAULT_SM_COUNT) -> list[CensusPoint]:
    """Lower every build (in worker processes), compile them (in threads) and count their
    loops, their blocks an SM and their grids' waves on `sm_count` SMs; a build that fails to
    lower or compile is reported on stderr and left out."""
    lowered = lower_all([(b.program, {"n": b.row["n"], "k": b.row["k"]}) for b in builds], arch)

    def count(item: tuple[Build, object]) -> CensusPoint | None:
        build, kernel = item
        try:
            if isinstance(kernel, Exception):
                raise kernel
            compiled = compile_lowered(build.program, kernel, arch).kernel
            report: LoopReport = loop_report(compiled.cubin)
            shared = compiled.shared_bytes + compiled.static_shared_bytes
            resident = compiled.residency().blocks
        except Exception as error:  # noqa: BLE001 - one bad build must not stop the census
            row = build.row
            print(
                f"{row['kernel']} {row['weight']} {row['k']}x{row['n']}: {error}", file=sys.stderr
            )
            return None
        return CensusPoint(
            **build.row,
            registers=report.registers,
            shared_bytes=shared,
            blocks_per_sm=resident,
            waves=(
                None
                if build.grid_blocks is None or resident == 0
                else round(waves(build.grid_blocks, resident, sm_count), 3)
            ),
            kernel_spills=report.kernel_spills,
            loop_instructions=report.instructions,
            tensor_core=report.tensor_core,
            copies_of_loads=report.copies_of_loads,
            census=dict(report.census),
        )

    with ThreadPoolExecutor() as pool:
        return [point for point in pool.map(count, zip(builds, lowered)) if point is not None]


def differing_fields(points: list[CensusPoint]) -> list[str]:
    """The configuration fields whose values differ between points (the table's config column
    shows only those)."""
    names = sorted({name for point in points for name in point.config})
    return [n for n in names if len({repr(p.config.get(n)) for p in points}) > 1]


def table(points: list[CensusPoint]) -> str:
    """The Markdown table of `points`."""
    shown = differing_fields(points)
    header = [
        "weight",
        "kernel",
        "K",
        "N",
        "M",
        "registers",
        "blocks an SM",
        "waves",
        "spills",
        "loop",
        "tensor core",
        "per tensor core",
        "copies of loads",
        *CENSUS_COLUMNS,
        "config",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for p in points:
        ratio = f"{p.loop_instructions / p.tensor_core:.1f}" if p.tensor_core else "-"
        config = " ".join(f"{name}={p.config[name]}" for name in shown if name in p.config)
        cells = [
            p.weight,
            p.kernel,
            str(p.k),
            str(p.n),
            "-" if p.m is None else str(p.m),
            str(p.registers),
            str(p.blocks_per_sm),
            "-" if p.waves is None else f"{p.waves:.2f}",
            str(p.kernel_spills),
            str(p.loop_instructions),
            str(p.tensor_core),
            ratio,
            str(p.copies_of_loads),
            *(str(p.census.get(name, 0)) for name in CENSUS_COLUMNS),
            config,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the census (see the module docstring); return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="register_dequant", help=", ".join(KERNELS))
    parser.add_argument("--weights", default="i4", help="weight types, comma-separated")
    parser.add_argument("--shapes", default=None, help="KxN, comma-separated (default: SHAPES)")
    parser.add_argument("--batches", default=None, help="recorded decode batches M to keep")
    parser.add_argument("--configs-from", default=None, help="earlier runs' JSON files")
    parser.add_argument("--variants", default="", help="decode overrides, ';'-separated sets")
    parser.add_argument("--options", default="", help="prefill overrides, ';'-separated sets")
    parser.add_argument("--arch", default="sm_90a", help="the architecture compiled for")
    parser.add_argument(
        "--sms", type=int, default=DEFAULT_SM_COUNT, help="SMs the waves are counted on"
    )
    parser.add_argument("--output", default=None, help="directory of results (none: print)")
    parser.add_argument("--stem", default="sass_census", help="the results' file name stem")
    options = parser.parse_args(argv)
    if options.sms < 1:
        parser.error(f"--sms {options.sms}: expected at least 1")
    kernels = [name.strip() for name in options.kernels.split(",")]
    unknown = sorted(set(kernels) - set(KERNELS))
    if unknown:
        parser.error(f"--kernels takes {', '.join(KERNELS)}, got {unknown}")
    try:
        shapes = parse_shapes(options.shapes)
        variants = [o for o in map(parse_overrides, options.variants.split(";")) if o]
        option_sets = [parse_overrides(part) for part in options.options.split(";")]
        weights = [dtypes.from_name(name.strip()) for name in options.weights.split(",")]
    except (ValueError, KeyError) as error:
        parser.error(str(error))
    unknown_fields = sorted(
        {name for override in variants for name in override}
        - set(DequantConfig.__dataclass_fields__)
    )
    if unknown_fields:
        parser.error(f"--variants: {unknown_fields} are not DequantConfig fields")
    if "register_dequant" in kernels and not options.configs_from:
        parser.error("register_dequant takes its configurations from --configs-from")
    batches = [int(m) for m in options.batches.split(",")] if options.batches else None
    recorded = {}
    if options.configs_from:
        recorded = configs_option(parser, options.configs_from)
    builds: list[Build] = []
    for weight in weights:
        if "register_dequant" in kernels:
            builds += decode_builds(weight, shapes, batches, recorded, variants)
        if "wgmma_dequant" in kernels:
            builds += prefill_builds(weight, shapes, option_sets)
        if "batch_paths" in kernels:
            builds += batch_path_builds(weight, shapes)
    if not builds:
        print("no kernel to count (no recorded point matches?)", file=sys.stderr)
        return 1
    points = census(builds, options.arch, options.sms)
    text = table(points)
    if options.output:
        output = Path(options.output)
        output.mkdir(parents=True, exist_ok=True)
        record = {
            "device": "none (compiled and disassembled only)",
            "arch": options.arch,
            "nvrtc": ".".join(map(str, nvrtc_version())),
            "group_size": GROUP_SIZE,
            "sms": options.sms,
            "points": [asdict(point) for point in points],
        }
        (output / f"{options.stem}.json").write_text(json.dumps(record, indent=2) + "\n")
        (output / f"{options.stem}.md").write_text(text)
    print(text)
    return 0 if len(points) == len(builds) else 1


if __name__ == "__main__":
    sys.exit(main())

"""How long the compiler's Python side takes: lowering a tuning's candidates, and proving them.

What a user waits for before NVRTC starts: a cold tuning of the decode kernel lowers every
candidate of `backend.decode_search_space` (with the layer's K and N as constants, as
`DecodeMatmul` compiles them), and one of the batch paths lowers each prefill kernel of
`backend.batch_paths`. The script times, in one fresh process, on one core:

- lowering: each problem's whole search space, one kernel after the other, in the order a tuning
  lowers them (so what one lowering leaves cached, the next may use, as in a tuning);
- validation: `proofs.validate_lowering` of a few of those kernels (every access against its
  layouts in Z3, and the printed source's text).

Run it as a script: ``python benchmarks/lowering_speed.py [--output DIR] [--label TEXT]``; it
prints a table and writes ``lowering_speed.json`` and ``.md`` into DIR (default
benchmarks/results). Run it on two trees (``PYTHONPATH=<other tree>``) to compare them: the
record keeps the label. The tests do not run it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from backend.autotune import PRUNING_ERRORS
from backend.batch_matmul import batch_paths, batch_program
from backend.decode_matmul import DecodeProblem, decode_programs, decode_search_space
from backend.lower import lower
from ir import dtypes
from proofs.lowering_validation import validate_lowering

ARCH = "sm_90a"
DECODE_PROBLEMS = [
    (dtypes.i4, 4096, 12288, 1),
    (dtypes.i2, 8192, 8192, 16),
    (dtypes.i8, 28672, 8192, 1),
]
"""(weight, K, N, M) of the decode tunings lowered."""
BATCH_PROBLEM = (dtypes.i4, 4096, 12288)
"""(weight, K, N) of the batch paths lowered."""
VALIDATED = 3
"""How many kernels of each space (its first ones) `validate_lowering` checks."""


def _decode_kernels(weight, k, n, m):
    """The decode tuning's candidates as (label, program, constants)."""
    problem = DecodeProblem(weight, 128, k, n)
    for config in decode_search_space(weight, k, n, m):
        programs = decode_programs(problem, config)
        yield str(config), programs.matmul, {"n": n, "k": k}


def _batch_kernels(weight, k, n):
    """The batch paths' prefill kernels as (label, program, constants)."""
    problem = DecodeProblem(weight, 128, k, n)
    for path in batch_paths():
        try:
            program = batch_program(problem, path)
        except PRUNING_ERRORS:
            continue
        yield str(dict(path)), program, None


def _time_space(name: str, kernels) -> dict:
    """Lower every kernel of one space; validate the first `VALIDATED`."""
    lowering, validation, count, accesses = 0.0, 0.0, 0, 0
    for label, program, constants in kernels:
        started = time.perf_counter()
        kernel = lower(program, ARCH, constants=constants)
        lowering += time.perf_counter() - started
        if count < VALIDATED:
            started = time.perf_counter()
            report = validate_lowering(kernel)
            validation += time.perf_counter() - started
            accesses += len(report.results)
            if report.failures:
                raise SystemExit(f"{name}: {label} has a refuted access: {report.failures[0]}")
        count += 1
    print(
        f"{name}: {count} kernels lowered in {lowering:.1f} s; {VALIDATED} validated "
        f"({accesses} accesses) in {validation:.1f} s",
        flush=True,
    )
    return {
        "space": name,
        "kernels": count,
        "lowering_s": lowering,
        "lowering_per_kernel_s": lowering / max(1, count),
        "validated_kernels": min(count, VALIDATED),
        "validated_accesses": accesses,
        "validation_s": validation,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--label", default="", help="the tree measured, kept in the record")
    options = parser.parse_args(argv)
    points = []
    for weight, k, n, m in DECODE_PROBLEMS:
        name = f"decode {weight.name} {k}x{n} M={m}"
        points.append(_time_space(name, _decode_kernels(weight, k, n, m)))
    weight, k, n = BATCH_PROBLEM
    points.append(_time_space(f"batch paths {weight.name} {k}x{n}", _batch_kernels(weight, k, n)))
    rows = [
        "| space | kernels | lowering (s) | per kernel (s) | validated accesses | validation (s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    rows += [
        f"| {p['space']} | {p['kernels']} | {p['lowering_s']:.1f} | "
        f"{p['lowering_per_kernel_s']:.2f} | {p['validated_accesses']} | {p['validation_s']:.1f} |"
        for p in points
    ]
    total = sum(p["lowering_s"] + p["validation_s"] for p in points)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    rows.append(f"\nTotal: {total:.1f} s ({options.label or 'this tree'}; {machine})")
    table = "\n".join(rows) + "\n"
    print(table)
    stem = "lowering_speed" + (f"_{options.label}" if options.label else "")
    options.output.mkdir(parents=True, exist_ok=True)
    record = {"label": options.label, "machine": machine, "points": points}
    (options.output / f"{stem}.json").write_text(json.dumps(record, indent=2) + "\n")
    (options.output / f"{stem}.md").write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Print a digest of the generated CUDA source of every example program, for every architecture.

    python tests/backend/example_sources_main.py              # one line per kernel: digest, name
    python tests/backend/example_sources_main.py --write DIR  # also write each source to DIR

A refactor of the lowering that must not change what it emits is checked by running this
before and after it and comparing the outputs (`diff`); with `--write`, `diff -r` on the two
folders shows where a source changed. The programs: the vector add in four types, the row
softmax, the matmul and the quantized matmul in every weight type of at most 8 bits, each with
and without tensor-core layouts, lowered without an architecture, for sm_80 and for sm_90a.
No GPU is needed.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path

from backend.lower import lower
from ir import dtypes
from ir.examples.matmul import matmul
from ir.examples.quantized_matmul import quantized_matmul
from ir.examples.softmax import row_softmax
from ir.examples.vector_add import vector_add
from ir.program import Program

ARCHITECTURES = (None, "sm_80", "sm_90a")

WEIGHT_TYPES = (
    *(dtypes.from_name(f"u{bits}") for bits in range(1, 9)),
    *(dtypes.from_name(f"i{bits}") for bits in range(1, 9)),
    dtypes.f4e2m1,
    dtypes.f6e3m2,
)
"""Every weight type the quantized matmul example supports."""


def example_programs() -> Iterator[tuple[str, Program]]:
    """(label, program) for every example program this script lowers."""
    for dtype in (dtypes.f16, dtypes.bf16, dtypes.u4, dtypes.f8e4m3):
        yield f"vector_add-{dtype}", vector_add(dtype, 128, 1024)
    yield "row_softmax", row_softmax()
    for tensor_cores in (False, True):
        suffix = "-mma" if tensor_cores else "-simt"
        yield f"matmul{suffix}", matmul(tensor_cores=tensor_cores)
        for dtype in WEIGHT_TYPES:
            yield (
                f"quantized_matmul-{dtype}{suffix}",
                quantized_matmul(dtype, tensor_cores=tensor_cores),
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="write each source to this folder")
    args = parser.parse_args(argv)
    if args.write is not None:
        args.write.mkdir(parents=True, exist_ok=True)
    for label, program in example_programs():
        for arch in ARCHITECTURES:
            name = f"{label}-{arch or 'generic'}"
            source = lower(program, arch).source
            digest = hashlib.sha256(source.encode()).hexdigest()[:16]
            print(f"{digest}  {name}")
            if args.write is not None:
                (args.write / f"{name}.cu").write_text(source)
    return 0


if __name__ == "__main__":
    sys.exit(main())

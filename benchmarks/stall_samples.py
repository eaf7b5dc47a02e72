"""What a profiled kernel's warps wait on, instruction by instruction (from Nsight Compute).

Nsight Compute's source page lists every SASS instruction of a profiled kernel with the warp
stall samples taken at it, one column a reason (``stall_wait``, ``stall_long_sb``, ...). This
reads that page (CSV), groups the samples by mnemonic (the opcode before its first modifier,
without the predicate: ``@!P0 LDG.E.128`` is ``LDG``) and prints, per kernel of the page, a
Markdown table of the mnemonics that took the most samples with the reasons that took most of
theirs, then the kernel's samples by reason. The JSON (``--output``) has every count.

It is how the decode kernels' stalls in ``benchmarks/results/quantized_matmul_notes.md`` were
read ("Decode: where the warps wait")::

    ncu --clock-control none --kernel-name regex:register_dequant --section SourceCounters \\
        --section WarpStateStats --import-source no -o decode \\
        python benchmarks/profile_quantized_matmul.py --weights i2 --m 16 \\
        --config warps=4,units_k=8,split=4,late_scale=1,weights_as_a=1,units_m=2
    ncu -i decode.ncu-rep --page source --csv --print-source sass > decode.csv
    python benchmarks/stall_samples.py decode.csv [--top 14] [--reasons 3] [--output DIR]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

KERNEL_ROW = "Kernel Name"
"""The first cell of the row that opens a kernel's part of the page (its name second)."""
SOURCE_COLUMN = "Source"
REASON_PREFIX = "stall_"
NOT_ISSUED = "(Not Issued)"
"""The suffix of the columns that repeat each reason for the samples of warps not issuing
(a subset of the reason's samples): left out, so each sample counts once."""
PREDICATE = re.compile(r"^@!?U?P[T0-9]+\s+")


@dataclass
class KernelStalls:
    """One kernel's stall samples: by reason, and by mnemonic then reason."""

    kernel: str
    by_reason: Counter[str] = field(default_factory=Counter)
    by_mnemonic: dict[str, Counter[str]] = field(default_factory=dict)

    @property
    def samples(self) -> int:
        return sum(self.by_reason.values())

    def add(self, mnemonic: str, reason: str, count: int) -> None:
        self.by_reason[reason] += count
        self.by_mnemonic.setdefault(mnemonic, Counter())[reason] += count


def mnemonic(source: str) -> str:
    """The mnemonic of a SASS line as the source page prints it: ``"@!P0 LDG.E.128 R4, ..."``
    -> ``"LDG"``. Raises ValueError for a line with no instruction."""
    text = PREDICATE.sub("", source.strip())
    opcode = text.split(maxsplit=1)[0] if text else ""
    name = opcode.split(".", 1)[0]
    if not name or not name[0].isalpha():
        raise ValueError(f"source line {source!r}: expected a SASS instruction")
    return name


def read_page(text: str) -> list[KernelStalls]:
    """The kernels of a source page (``ncu --page source --csv --print-source sass``), each
    with its samples. Raises ValueError naming what is missing where the text is not such a
    page: no kernel row, no header with a Source column and stall columns, or a count that
    is not a whole number."""
    rows = list(csv.reader(io.StringIO(text)))
    kernels: list[KernelStalls] = []
    header: list[str] | None = None
    for number, row in enumerate(rows, 1):
        if not row or not any(cell.strip() for cell in row):
            continue
        if row[0] == KERNEL_ROW:
            kernels.append(KernelStalls(row[1] if len(row) > 1 else ""))
            header = None
            continue
        if not kernels:
            raise ValueError(
                f"source page line {number}: {row[0]!r} before any {KERNEL_ROW!r} row; "
                "expected the CSV of ncu --page source"
            )
        if header is None:
            header = row
            reasons = [
                (i, name[len(REASON_PREFIX) :])
                for i, name in enumerate(header)
                if name.startswith(REASON_PREFIX) and not name.endswith(NOT_ISSUED)
            ]
            if SOURCE_COLUMN not in header or not reasons:
                raise ValueError(
                    f"source page line {number}: a header without a {SOURCE_COLUMN!r} column "
                    f"and {REASON_PREFIX}* columns; expected ncu's source page with the "
                    "SourceCounters section's samples"
                )
            source = header.index(SOURCE_COLUMN)
            continue
        for i, reason in reasons:
            cell = row[i].strip() if i < len(row) else ""
            if not cell:
                continue
            if not cell.isdigit():
                raise ValueError(
                    f"source page line {number}: {header[i]}={cell!r}; expected a whole number"
                )
            if int(cell):
                kernels[-1].add(mnemonic(row[source]), reason, int(cell))
    if not kernels:
        raise ValueError(f"source page: no {KERNEL_ROW!r} row; expected ncu --page source CSV")
    return kernels


def table(stalls: KernelStalls, top: int = 14, reasons: int = 3) -> str:
    """The Markdown table of `stalls`: its `top` mnemonics by samples, each with its share of
    the kernel's samples and its `reasons` largest reasons, then a line of the kernel's
    samples by reason."""
    total = stalls.samples
    lines = [
        f"{stalls.kernel}: {total} samples",
        "",
        "| mnemonic | samples | share | reasons |",
        "|---|---:|---:|---|",
    ]
    ranked = sorted(stalls.by_mnemonic.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    for name, counts in ranked[:top]:
        samples = sum(counts.values())
        main = ", ".join(f"{r} {c}" for r, c in sorted(counts.items(), key=_largest)[:reasons])
        lines.append(f"| {name} | {samples} | {100 * samples / total:.1f} % | {main} |")
    by_reason = ", ".join(f"{r} {c}" for r, c in sorted(stalls.by_reason.items(), key=_largest))
    lines += ["", f"by reason: {by_reason}", ""]
    return "\n".join(lines)


def _largest(item: tuple[str, int]) -> tuple[int, str]:
    return (-item[1], item[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="the CSV of ncu --page source --print-source sass")
    parser.add_argument("--top", type=int, default=14, help="mnemonics shown (default 14)")
    parser.add_argument("--reasons", type=int, default=3, help="reasons a mnemonic (default 3)")
    parser.add_argument("--output", type=Path, help="a folder for stall_samples.json and .md")
    args = parser.parse_args(argv)
    if args.top < 1 or args.reasons < 1:
        parser.error(f"--top {args.top} and --reasons {args.reasons}: expected at least 1 each")
    try:
        kernels = read_page(args.page.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        parser.error(f"{args.page}: {error}")
    text = "\n".join(table(k, args.top, args.reasons) for k in kernels)
    print(text)
    if args.output is not None:
        args.output.mkdir(parents=True, exist_ok=True)
        record = [
            {
                "kernel": k.kernel,
                "samples": k.samples,
                "by_reason": dict(k.by_reason),
                "by_mnemonic": {name: dict(c) for name, c in k.by_mnemonic.items()},
            }
            for k in kernels
        ]
        (args.output / "stall_samples.json").write_text(json.dumps(record, indent=2) + "\n")
        (args.output / "stall_samples.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

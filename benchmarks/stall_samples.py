"""What a profiled kernel's warps wait on, instruction by instruction (from Nsight Compute).

Nsight Compute's source page lists every SASS instruction of a profiled kernel with the warp
stall samples taken at it, one column a reason (``stall_wait``, ``stall_long_sb``, ...). This
reads that page (CSV), groups the samples by mnemonic (the opcode before its first modifier,
without the predicate: ``@!P0 LDG.E.128`` is ``LDG``) and prints, per kernel of the page, a
Markdown table of the mnemonics that took the most samples with the reasons that took most of
theirs, then the kernel's samples by reason. The JSON (``--output``) has every count.

With the profiled kernel's CUBIN (``--cubin``; `benchmarks/profile_quantized_matmul.py
--cubins` writes them), the page's lines are matched one to one, mnemonic by mnemonic, with
the CUBIN's instructions (`backend.sass`), and the samples are also split by region: the k
loop (`backend.sass.Function.main_loop`, the innermost loop issuing tensor-core instructions),
other loops (a producer warp's loop, a barrier's retry loop) and the code outside any loop;
the k loop's mnemonics get a table of their own. In a warp-specialised kernel that tells the
consumers' waits from the producer's. Last, per kernel, the lines that took the most samples,
each with its offset and, with the CUBIN, its region and for a branch the instruction at its
target (a branch's samples are often a wait whose retry loop it enters, a barrier's
try-wait).

It is how the decode kernels' stalls in ``benchmarks/results/quantized_matmul_notes.md`` were
read ("Decode: where the warps wait")::

    ncu --clock-control none --kernel-name regex:register_dequant --section SourceCounters \\
        --section WarpStateStats --import-source no -o decode \\
        python benchmarks/profile_quantized_matmul.py --weights i2 --m 16 \\
        --config warps=4,units_k=8,split=4,late_scale=1,weights_as_a=1,units_m=2
    ncu -i decode.ncu-rep --page source --csv --print-source sass > decode.csv
    python benchmarks/stall_samples.py decode.csv [--top 14] [--reasons 3] [--output DIR] \\
        [--cubin CUBIN ...]
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

from backend.errors import DisassemblyError
from backend.sass import Function, disassemble

KERNEL_ROW = "Kernel Name"
"""The first cell of the row that opens a kernel's part of the page (its name second)."""
SOURCE_COLUMN = "Source"
REASON_PREFIX = "stall_"
NOT_ISSUED = "(Not Issued)"
"""The suffix of the columns that repeat each reason for the samples of warps not issuing
(a subset of the reason's samples): left out, so each sample counts once."""
PREDICATE = re.compile(r"^@!?U?P[T0-9]+\s+")
REGIONS = ("k loop", "other loops", "outside loops")
"""The regions `by_region` splits a kernel's samples into, in its order."""
PADDING = frozenset({"NOP", "BRA"})
"""The mnemonics of the padding after a kernel's last instruction, which a CUBIN's listing may
have past the page's lines."""


@dataclass
class KernelStalls:
    """One kernel's stall samples: `lines` holds each line of the page in order, its source
    text and its samples by reason; the totals by reason, and by mnemonic then reason, are
    read from them."""

    kernel: str
    lines: list[tuple[str, Counter[str]]] = field(default_factory=list)

    @property
    def by_reason(self) -> Counter[str]:
        return sum((counts for _, counts in self.lines), start=Counter())

    @property
    def by_mnemonic(self) -> dict[str, Counter[str]]:
        split: dict[str, Counter[str]] = {}
        for source, counts in self.lines:
            if counts:
                split.setdefault(mnemonic(source), Counter()).update(counts)
        return split

    @property
    def samples(self) -> int:
        return sum(self.by_reason.values())

    def restricted(self, indices: set[int], title: str) -> KernelStalls:
        """The samples of the lines at `indices` alone, as a `KernelStalls` named `title`."""
        return KernelStalls(title, [line for i, line in enumerate(self.lines) if i in indices])


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
        counts: Counter[str] = Counter()
        for i, reason in reasons:
            cell = row[i].strip() if i < len(row) else ""
            if not cell:
                continue
            if not cell.isdigit():
                raise ValueError(
                    f"source page line {number}: {header[i]}={cell!r}; expected a whole number"
                )
            if int(cell):
                counts[reason] += int(cell)
        text = row[source] if source < len(row) else ""
        if counts:
            mnemonic(text)  # a line with samples names its instruction (ValueError otherwise)
        kernels[-1].lines.append((text, counts))
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


def line_regions(stalls: KernelStalls, function: Function) -> list[str]:
    """The region (`REGIONS`) of each of `stalls`' lines, from `function`, the same kernel's
    SASS. Raises ValueError naming the first line whose mnemonic is not the instruction's at
    its place, else the counts when the page has more lines than the function instructions
    (or fewer, but for trailing padding): then the CUBIN is not the profiled kernel's."""
    instructions = function.instructions
    for index, ((source, _), instruction) in enumerate(zip(stalls.lines, instructions)):
        try:
            name = mnemonic(source)
        except ValueError:
            name = None
        if name != instruction.mnemonic:
            raise ValueError(
                f"{stalls.kernel}: line {index} of the page is {source.strip()!r}, the "
                f"CUBIN's instruction there is {instruction!r}; expected the same kernel"
            )
    extra = instructions[len(stalls.lines) :]
    if len(stalls.lines) > len(instructions) or any(i.mnemonic not in PADDING for i in extra):
        raise ValueError(
            f"{stalls.kernel}: the page has {len(stalls.lines)} lines, the CUBIN's "
            f"{function.name} {len(instructions)} instructions; expected the same kernel"
        )
    k_loop = function.main_loop().body
    looped = set().union(*(loop.body for loop in function.loops()))
    return [
        REGIONS[0] if index in k_loop else REGIONS[1] if index in looped else REGIONS[2]
        for index in range(len(stalls.lines))
    ]


def by_region(stalls: KernelStalls, regions: list[str]) -> dict[str, Counter[str]]:
    """`stalls`' samples by region (`line_regions`) and reason, every region of `REGIONS`."""
    split: dict[str, Counter[str]] = {region: Counter() for region in REGIONS}
    for region, (_, counts) in zip(regions, stalls.lines):
        split[region].update(counts)
    return split


def region_table(stalls: KernelStalls, split: dict[str, Counter[str]], reasons: int = 3) -> str:
    """The Markdown table of `split` (`by_region`): each region's samples, share of the
    kernel's and `reasons` largest reasons."""
    total = stalls.samples or 1
    lines = [
        f"{stalls.kernel}: samples by region",
        "",
        "| region | samples | share | reasons |",
        "|---|---:|---:|---|",
    ]
    for region, counts in split.items():
        samples = sum(counts.values())
        main = ", ".join(f"{r} {c}" for r, c in sorted(counts.items(), key=_largest)[:reasons])
        lines.append(f"| {region} | {samples} | {100 * samples / total:.1f} % | {main} |")
    return "\n".join([*lines, ""])


def top_lines(
    stalls: KernelStalls,
    function: Function | None = None,
    regions: list[str] | None = None,
    top: int = 8,
    reasons: int = 2,
) -> list[dict[str, object]]:
    """The `top` lines of `stalls` by samples (those with any), in that order: each line's
    offset from the kernel's first instruction (16 bytes an instruction), its region (None
    without `regions`), its source, for a branch the opcode at its target in `function` (the
    kernel's SASS, `line_regions`-matched; None without it: a branch's samples are often a
    wait whose retry loop it enters, a barrier's try-wait), its samples and its `reasons`
    largest reasons."""
    ranked = sorted(range(len(stalls.lines)), key=lambda i: (-sum(stalls.lines[i][1].values()), i))
    rows = []
    for index in ranked[:top]:
        source, counts = stalls.lines[index]
        if not counts:
            break
        target = None
        if function is not None:
            offset = function.instructions[index].branch_target
            if offset is not None:
                target = function.instructions[function.index_of(offset)].opcode
        rows.append(
            {
                "offset": 16 * index,
                "region": None if regions is None else regions[index],
                "source": source.strip(),
                "branch_to": target,
                "samples": sum(counts.values()),
                "reasons": dict(sorted(counts.items(), key=_largest)[:reasons]),
            }
        )
    return rows


def lines_table(stalls: KernelStalls, rows: list[dict[str, object]]) -> str:
    """The Markdown table of `top_lines`' rows, with each line's share of the kernel's
    samples."""
    total = stalls.samples or 1
    lines = [
        f"{stalls.kernel}: the lines that took the most samples",
        "",
        "| offset | region | line | branch to | samples | share | reasons |",
        "|---:|---|---|---|---:|---:|---|",
    ]
    for row in rows:
        counts: dict[str, int] = row["reasons"]  # type: ignore[assignment]
        samples: int = row["samples"]  # type: ignore[assignment]
        named = ", ".join(f"{r} {c}" for r, c in counts.items())
        lines.append(
            f"| {row['offset']:#x} | {row['region'] or '-'} | `{row['source']}` "
            f"| {row['branch_to'] or '-'} | {samples} | {100 * samples / total:.1f} % | {named} |"
        )
    return "\n".join([*lines, ""])


def functions_of(cubins: list[Path]) -> dict[str, Function]:
    """The kernels of the CUBIN files `cubins`, by name (`backend.sass.disassemble`)."""
    functions: dict[str, Function] = {}
    for path in cubins:
        functions.update(disassemble(path.read_bytes()))
    return functions


def function_of(kernel: str, functions: dict[str, Function]) -> Function | None:
    """The function the page's kernel name `kernel` names: the same name, or the name with its
    parameter list (``name(int, ...)``); None when none does."""
    return functions.get(kernel) or functions.get(kernel.split("(", 1)[0].strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="the CSV of ncu --page source --print-source sass")
    parser.add_argument("--top", type=int, default=14, help="mnemonics shown (default 14)")
    parser.add_argument("--reasons", type=int, default=3, help="reasons a mnemonic (default 3)")
    parser.add_argument("--output", type=Path, help="a folder for stall_samples.json and .md")
    parser.add_argument(
        "--cubin",
        type=Path,
        action="append",
        default=[],
        help="a CUBIN holding a profiled kernel (repeatable): its samples are split by region",
    )
    args = parser.parse_args(argv)
    if args.top < 1 or args.reasons < 1:
        parser.error(f"--top {args.top} and --reasons {args.reasons}: expected at least 1 each")
    try:
        kernels = read_page(args.page.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        parser.error(f"{args.page}: {error}")
    try:
        functions = functions_of(args.cubin)
    except (OSError, DisassemblyError) as error:
        parser.error(f"--cubin: {error}")
    parts, record = [], []
    for k in kernels:
        parts.append(table(k, args.top, args.reasons))
        entry: dict[str, object] = {
            "kernel": k.kernel,
            "samples": k.samples,
            "by_reason": dict(k.by_reason),
            "by_mnemonic": {name: dict(c) for name, c in k.by_mnemonic.items()},
        }
        function = function_of(k.kernel, functions)
        regions = None
        if function is not None:
            try:
                regions = line_regions(k, function)
            except (ValueError, DisassemblyError) as error:
                parser.error(f"--cubin: {error}")
            split = by_region(k, regions)
            in_loop = {i for i, region in enumerate(regions) if region == REGIONS[0]}
            loop = k.restricted(in_loop, f"{k.kernel}, its k loop")
            parts += [region_table(k, split, args.reasons), table(loop, args.top, args.reasons)]
            entry["by_region"] = {region: dict(c) for region, c in split.items()}
            entry["k_loop_by_mnemonic"] = {n: dict(c) for n, c in loop.by_mnemonic.items()}
        elif args.cubin:
            print(f"no CUBIN given holds {k.kernel!r}: its samples are not split", file=sys.stderr)
        rows = top_lines(k, function if regions else None, regions, args.top, args.reasons)
        parts.append(lines_table(k, rows))
        entry["top_lines"] = rows
        record.append(entry)
    text = "\n".join(parts)
    print(text)
    if args.output is not None:
        args.output.mkdir(parents=True, exist_ok=True)
        (args.output / "stall_samples.json").write_text(json.dumps(record, indent=2) + "\n")
        (args.output / "stall_samples.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The lowering report: for each instruction the lowering wrote, which path it took.

Every time the lowering writes an instruction (once, or once per copy of an unrolled loop body)
it records a `LoweringStep`: the instruction, how many loops enclose it, and the paths it took
with how many elements or calls each covered, e.g. ``vector 16 B`` x 4, ``elements`` x 2,
``fast i4 -> f16`` x 16, ``paired half mul`` x 32, ``mma.m16n8k16`` x 16. A path is *generic*
when it is the slow, always-correct fallback: memory moved element by element (a bounds-check
fallback, a sub-byte element, a layout that gives no vector), or a conversion or operation that
goes through the software float codec. `LoweringReport.generic_in_loops()` lists the steps in
loops that took one, which is what a fast kernel should not have; `table()` prints it all.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ir.instructions import Instruction
from ir.printer import format_instruction


@dataclass(frozen=True)
class LoweringPath:
    """One way part of an instruction was lowered: `name`, how many elements or calls it
    covered (`count`) and whether it is the generic fallback (`generic`)."""

    name: str
    count: int
    generic: bool


@dataclass(frozen=True)
class LoweringStep:
    """One writing of `instruction`, inside `loop_depth` loops, by `paths`."""

    instruction: Instruction
    loop_depth: int
    paths: tuple[LoweringPath, ...]

    @property
    def generic(self) -> bool:
        """Whether some path of the step is a generic fallback."""
        return any(path.generic for path in self.paths)

    def describe(self) -> str:
        """``name x count`` of each path, generic ones marked ``(generic)``."""
        parts = []
        for path in self.paths:
            mark = " (generic)" if path.generic else ""
            parts.append(f"{path.name} x {path.count}{mark}")
        return ", ".join(parts) or "-"


@dataclass(frozen=True)
class LoweringReport:
    """Every `LoweringStep` of a kernel, in the order the lowering wrote them."""

    steps: tuple[LoweringStep, ...]

    def __iter__(self) -> Iterator[LoweringStep]:
        return iter(self.steps)

    def generic_in_loops(self) -> list[LoweringStep]:
        """The steps inside a loop that took a generic path."""
        return [step for step in self.steps if step.loop_depth > 0 and step.generic]

    def path_counts(self) -> dict[str, int]:
        """Total count of each path name over the kernel."""
        totals: dict[str, int] = {}
        for step in self.steps:
            for path in step.paths:
                totals[path.name] = totals.get(path.name, 0) + path.count
        return totals

    def table(self) -> str:
        """A Markdown table: loop depth, instruction, paths."""
        lines = ["| loops | instruction | paths |", "|---:|---|---|"]
        for step in self.steps:
            text = format_instruction(step.instruction).replace("|", "\\|")
            lines.append(f"| {step.loop_depth} | {text} | {step.describe()} |")
        return "\n".join(lines) + "\n"


class PathRecorder:
    """Collects the paths of the instruction being written (`note`) and closes each into a
    `LoweringStep` (`begin`, `end`); nested bodies (loops, ifs) get their own steps."""

    def __init__(self) -> None:
        self.steps: list[LoweringStep] = []
        self._open: list[dict[tuple[str, bool], int]] = []

    def begin(self) -> None:
        self._open.append({})

    def note(self, name: str, count: int = 1, generic: bool = False) -> None:
        if not self._open:
            return
        key = (name, generic)
        self._open[-1][key] = self._open[-1].get(key, 0) + count

    def discard(self) -> None:
        """Close the open step without recording it (an instruction written later, elsewhere)."""
        self._open.pop()

    def end(self, instruction: Instruction, loop_depth: int) -> None:
        paths = self._open.pop()
        recorded = tuple(
            LoweringPath(name, count, generic) for (name, generic), count in paths.items()
        )
        self.steps.append(LoweringStep(instruction, loop_depth, recorded))

    def report(self) -> LoweringReport:
        return LoweringReport(tuple(self.steps))

"""The machine code of a compiled kernel (SASS), read without a GPU: its loops and what they issue.

`backend.compile` leaves a CUBIN for an exact architecture; NVIDIA's disassembler ``nvdisasm``
(the `nvidia-cuda-nvdisasm` package of the ``cuda`` extra, or one on PATH) prints its SASS as
JSON, which `disassemble` reads into one `Function` per kernel, a tuple of `Instruction`s.
What a tuning or a lowering change does to a kernel's inner loop is then a fact to test and
quote, not a guess. `Function.loops()` finds the natural loops of its control-flow graph
(`Function.blocks`, `Function.successors`; a back edge is a branch to a block that dominates
it, so a wait's out-of-line retry stub makes a small loop of its own, not a span of the
kernel); `Function.main_loop()` is the innermost one that issues tensor-core instructions (a
matmul's k loop); a `Loop` counts its instructions by mnemonic (`census`), its spills to local
memory, its register copies and, among them, the copies of registers a global load of the
loop wrote (each of which waits for that load).

    function = disassemble(kernel.cubin)["register_dequant_matmul_i4"]
    loop = function.main_loop()
    loop.census()["HMMA"], len(loop), loop.spills, loop.copies_of_loads()

`loop_report` gathers those facts, with the kernel's registers, into a `LoopReport` (the
rows of `benchmarks/sass_census.py`). A missing or failing disassembler raises
`DisassemblyError`; `parse_listing` reads nvdisasm's JSON text alone (no tool needed).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from backend.errors import DisassemblyError

INSTRUCTION_BYTES = 16
"""Bytes of one SASS instruction from Volta on (sm_70 and later)."""

TENSOR_CORE_MNEMONICS = frozenset({"HMMA", "HGMMA", "IMMA", "IGMMA", "QGMMA", "BGMMA"})
"""The mnemonics of warp (mma.sync) and warpgroup (wgmma) tensor-core instructions."""

GLOBAL_LOADS = frozenset({"LDG"})
"""Loads from global memory into registers (`LDGSTS`, cp.async, writes shared memory)."""

_REGISTER = re.compile(r"^R(?P<number>\d+)(?:\.reuse)?$")
_WIDTHS = {"64": 2, "128": 4}
_TIMEOUT_S = 300


@dataclass(frozen=True, slots=True, repr=False)
class Instruction:
    """One SASS instruction: `offset` (bytes from the start of its code section, as branch
    targets count), `opcode` with its modifiers (``LDG.E.128``), `operands` (nvdisasm's text,
    split at the top-level commas) and `predicate` (``@P0``, ``@!P1``, or None when always
    executed)."""

    offset: int
    opcode: str
    operands: tuple[str, ...] = ()
    predicate: str | None = None

    def __repr__(self) -> str:
        guard = f"{self.predicate} " if self.predicate else ""
        return f"/*{self.offset:04x}*/ {guard}{self.opcode} {','.join(self.operands)}".rstrip()

    @property
    def mnemonic(self) -> str:
        """The opcode without its modifiers: ``LDG`` of ``LDG.E.128``."""
        return self.opcode.split(".", 1)[0]

    @property
    def branch_target(self) -> int | None:
        """The offset a ``BRA`` jumps to; None for any other instruction (and an indirect one)."""
        if self.mnemonic != "BRA" or not self.operands:
            return None
        try:
            return int(self.operands[-1], 16)
        except ValueError:
            return None

    def register_copy_source(self) -> int | None:
        """The register a plain copy reads (``MOV R1, R2`` or ``IMAD.MOV.U32 R1, RZ, RZ, R2``:
        2), None for anything else."""
        if self.opcode == "MOV" and len(self.operands) == 2:
            return _register_number(self.operands[1])
        if self.opcode == "IMAD.MOV.U32" and len(self.operands) == 4:
            if self.operands[1:3] == ("RZ", "RZ"):
                return _register_number(self.operands[3])
        return None

    def loaded_registers(self) -> tuple[int, ...]:
        """The registers a global load writes (``LDG.E.128 R36, ...``: 36 to 39); () for any
        other instruction."""
        if self.mnemonic not in GLOBAL_LOADS or not self.operands:
            return ()
        first = _register_number(self.operands[0])
        if first is None:
            return ()
        modifiers = self.opcode.split(".")[1:]
        width = next((_WIDTHS[part] for part in modifiers if part in _WIDTHS), 1)
        return tuple(range(first, first + width))


def _register_number(operand: str) -> int | None:
    match = _REGISTER.match(operand)
    return int(match.group("number")) if match else None


def _split_operands(text: str) -> tuple[str, ...]:
    """nvdisasm's operand text split at its commas outside brackets."""
    parts, depth, start = [], 0, 0
    for position, character in enumerate(text):
        if character in "[(":
            depth += 1
        elif character in "])":
            depth -= 1
        elif character == "," and depth == 0:
            parts.append(text[start:position].strip())
            start = position + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return tuple(parts)


@dataclass(frozen=True)
class Loop:
    """A natural loop of `function`: its `header` (the index of the instruction every
    iteration enters by) and the indices of its instructions, `body` (the header's block and
    every block that reaches a back edge to it without passing the header). Loops compare by
    header and body."""

    function: Function = field(compare=False, repr=False)
    header: int
    body: frozenset[int]

    @property
    def instructions(self) -> tuple[Instruction, ...]:
        """The loop's instructions in address order."""
        return tuple(self.function.instructions[index] for index in sorted(self.body))

    def __len__(self) -> int:
        return len(self.body)

    def contains(self, other: Loop) -> bool:
        """Whether `other` lies inside this loop (a loop contains itself)."""
        return other.body <= self.body

    def census(self) -> Counter[str]:
        """The loop's instructions counted by mnemonic."""
        return Counter(instruction.mnemonic for instruction in self.instructions)

    def opcodes(self) -> Counter[str]:
        """The loop's instructions counted by opcode with modifiers (``HMMA.16816.F32``)."""
        return Counter(instruction.opcode for instruction in self.instructions)

    @property
    def spills(self) -> int:
        """Local-memory loads and stores in the loop (``LDL``, ``STL``): a kernel's spills."""
        return sum(1 for i in self.instructions if i.mnemonic in ("LDL", "STL"))

    def register_copies(self) -> int:
        """Plain register-to-register copies in the loop (`Instruction.register_copy_source`)."""
        return sum(1 for i in self.instructions if i.register_copy_source() is not None)

    def copies_of_loads(self) -> int:
        """Copies whose source register a global load of the loop writes: each waits for its
        load (the register ring's moves of just-loaded words)."""
        loaded = {r for instruction in self.instructions for r in instruction.loaded_registers()}
        return sum(1 for i in self.instructions if i.register_copy_source() in loaded)


@dataclass(frozen=True, eq=False)
class Function:
    """One kernel's SASS: its `name`, the offset of its first instruction in its code section
    (`start`) and its `instructions` in address order."""

    name: str
    start: int
    instructions: tuple[Instruction, ...]

    def index_of(self, offset: int) -> int:
        """The index of the instruction at section offset `offset`; DisassemblyError when
        none of the function's is there."""
        index, rest = divmod(offset - self.start, INSTRUCTION_BYTES)
        if rest or not 0 <= index < len(self.instructions):
            end = self.start + len(self.instructions) * INSTRUCTION_BYTES
            raise DisassemblyError(
                f"{self.name}: no instruction at offset {offset:#x}; expected a multiple of "
                f"{INSTRUCTION_BYTES} from {self.start:#x} below {end:#x}"
            )
        return index

    @functools.cached_property
    def blocks(self) -> tuple[tuple[int, int], ...]:
        """The basic blocks as (first, last) instruction indices, in address order: a block
        starts at the entry, at a branch target and after a branch or an exit."""
        count = len(self.instructions)
        leaders = {0} if count else set()
        for index, instruction in enumerate(self.instructions):
            if instruction.mnemonic in _ENDS_BLOCK:
                leaders.add(index + 1)
            target = instruction.branch_target
            if target is not None:
                leaders.add(self.index_of(target))
        starts = sorted(leader for leader in leaders if leader < count)
        return tuple(zip(starts, [*(start - 1 for start in starts[1:]), count - 1]))

    @functools.cached_property
    def successors(self) -> tuple[tuple[int, ...], ...]:
        """Each block's successor blocks (indices into `blocks`): a branch's target, and the
        next block unless the block ends in an unconditional branch or exit."""
        block_of = {first: number for number, (first, _) in enumerate(self.blocks)}
        edges = []
        for number, (_, last) in enumerate(self.blocks):
            end = self.instructions[last]
            following: list[int] = []
            if end.branch_target is not None:
                following.append(block_of[self.index_of(end.branch_target)])
            stops = end.mnemonic in _ENDS_BLOCK and not _may_skip(end)
            if not stops and number + 1 < len(self.blocks):
                following.append(number + 1)
            edges.append(tuple(dict.fromkeys(following)))
        return tuple(edges)

    @functools.cached_property
    def _loops(self) -> tuple[Loop, ...]:
        successors = self.successors
        dominators = _dominators(successors)
        predecessors: list[list[int]] = [[] for _ in successors]
        for block, targets in enumerate(successors):
            for target in targets:
                predecessors[target].append(block)
        bodies: dict[int, set[int]] = {}
        for block, targets in enumerate(successors):
            for header in targets:
                if dominators[block] >> header & 1:  # a back edge: its target dominates it
                    body = bodies.setdefault(header, {header})
                    work = [block]
                    while work:
                        node = work.pop()
                        if node not in body:
                            body.add(node)
                            work.extend(predecessors[node])
        loops = []
        for header, body in bodies.items():
            indices = frozenset(
                index
                for number in body
                for index in range(self.blocks[number][0], self.blocks[number][1] + 1)
            )
            loops.append(Loop(self, self.blocks[header][0], indices))
        return tuple(sorted(loops, key=lambda loop: (loop.header, len(loop))))

    def loops(self) -> tuple[Loop, ...]:
        """The natural loops (one per header, its back edges merged), ordered by header."""
        return self._loops

    def innermost_loops(
        self, where: Callable[[Loop], bool] = lambda loop: True
    ) -> tuple[Loop, ...]:
        """The loops satisfying `where` that contain no other loop satisfying it."""
        chosen = [loop for loop in self.loops() if where(loop)]
        return tuple(
            loop
            for loop in chosen
            if not any(other != loop and loop.contains(other) for other in chosen)
        )

    def main_loop(self) -> Loop:
        """The innermost loop that issues tensor-core instructions, the longest if several are
        (a k loop and its peeled copy). DisassemblyError when no loop issues any."""
        loops = self.innermost_loops(
            lambda loop: any(i.mnemonic in TENSOR_CORE_MNEMONICS for i in loop.instructions)
        )
        if not loops:
            raise DisassemblyError(f"{self.name}: no loop issues a tensor-core instruction")
        return max(loops, key=lambda loop: (len(loop), -loop.header))


_ENDS_BLOCK = frozenset({"BRA", "BRX", "JMP", "JMX", "EXIT", "RET", "KILL"})
"""The mnemonics after which a basic block ends (a transfer of control)."""


def _may_skip(instruction: Instruction) -> bool:
    """Whether a transfer of control may not happen (it has a predicate other than the
    always-true ``@PT``), so that the next instruction may follow it."""
    return instruction.predicate not in (None, "@PT")


def _dominators(successors: tuple[tuple[int, ...], ...]) -> list[int]:
    """Each block's dominators as a bit set (bit d: block d dominates it), block 0 the entry;
    a block the entry does not reach has none (0), so it closes no loop. The iterative
    data-flow solution."""
    count = len(successors)
    every = (1 << count) - 1
    predecessors: list[list[int]] = [[] for _ in range(count)]
    for block, targets in enumerate(successors):
        for target in targets:
            predecessors[target].append(block)
    dominators = [every] * count
    if count:
        dominators[0] = 1
    changed = True
    while changed:
        changed = False
        for block in range(1, count):
            meet = every
            for predecessor in predecessors[block]:
                meet &= dominators[predecessor]
            value = meet | (1 << block)
            if value != dominators[block]:
                dominators[block] = value
                changed = True
    reached, work = set(), [0] if count else []
    while work:
        block = work.pop()
        if block not in reached:
            reached.add(block)
            work.extend(successors[block])
    return [d if block in reached else 0 for block, d in enumerate(dominators)]


def parse_listing(text: str) -> dict[str, Function]:
    """The kernels of nvdisasm's JSON listing (``nvdisasm -c -json``), by name."""
    try:
        document = json.loads(text)
        sections = document[1]
        functions = {}
        for section in sections:
            start = int(section.get("start", 0))
            instructions = tuple(
                Instruction(
                    offset=start + position * INSTRUCTION_BYTES,
                    opcode=entry["opcode"],
                    operands=_split_operands(entry.get("operands", "")),
                    predicate=entry.get("predicate"),
                )
                for position, entry in enumerate(section["sass-instructions"])
            )
            name = section["function-name"]
            functions[name] = Function(name, start, instructions)
    except (ValueError, LookupError, TypeError, AttributeError) as error:
        raise DisassemblyError(
            f"nvdisasm's listing is not the JSON expected ([header, [functions...]] with "
            f"'function-name' and 'sass-instructions'): {error}"
        ) from None
    return functions


def disassembler_path() -> Path:
    """The nvdisasm to run: the `nvidia-cuda-nvdisasm` package's (``nvidia/cu*/bin``), else
    one on PATH; DisassemblyError naming both places when there is none."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidates = sorted(Path(root).glob("cu*/bin/nvdisasm"), reverse=True)
        for candidate in candidates:
            if os.access(candidate, os.X_OK):
                return candidate
    found = shutil.which("nvdisasm")
    if found:
        return Path(found)
    raise DisassemblyError(
        "no nvdisasm: install the nvidia-cuda-nvdisasm package (the project's 'cuda' extra) or "
        "put a CUDA toolkit's nvdisasm on PATH"
    )


def disassemble(cubin: bytes, disassembler: Path | None = None) -> dict[str, Function]:
    """The kernels of a CUBIN by name, disassembled by `disassembler` (default
    `disassembler_path()`); DisassemblyError when it fails or prints no kernel."""
    if not isinstance(cubin, (bytes, bytearray)) or not cubin.startswith(b"\x7fELF"):
        raise DisassemblyError(
            f"expected a CUBIN (ELF bytes), got {type(cubin).__name__} of "
            f"{len(cubin) if isinstance(cubin, (bytes, bytearray)) else 'no'} bytes"
        )
    tool = disassembler or disassembler_path()
    with tempfile.TemporaryDirectory(prefix="layout-algebra-sass-") as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(bytes(cubin))
        try:
            run = subprocess.run(
                [str(tool), "-c", "-json", str(path)],
                capture_output=True,
                text=True,
                timeout=_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise DisassemblyError(f"{tool} could not be run: {error}") from None
    if run.returncode != 0:
        raise DisassemblyError(f"{tool} failed ({run.returncode}): {run.stderr.strip()}")
    functions = parse_listing(run.stdout)
    if not functions:
        raise DisassemblyError(f"{tool} printed no kernel for a CUBIN of {len(cubin)} bytes")
    return functions


@dataclass(frozen=True)
class LoopReport:
    """What one kernel's main loop issues: `instructions` (the loop's length), `tensor_core`
    (its tensor-core instructions), `copies_of_loads`, `spills` (in the loop) and
    `kernel_spills` (in the whole kernel), `registers` (a thread's, from the CUBIN) and
    `census` (mnemonic -> count, the most frequent first)."""

    kernel: str
    registers: int
    instructions: int
    tensor_core: int
    copies_of_loads: int
    spills: int
    kernel_spills: int
    census: Mapping[str, int]


def loop_report(cubin: bytes, kernel: str | None = None) -> LoopReport:
    """The `LoopReport` of `kernel`'s main loop (`Function.main_loop`) in `cubin`; `kernel`
    may be left out when the CUBIN holds one."""
    from backend.nvrtc import cubin_registers

    functions = disassemble(cubin)
    if kernel is None:
        if len(functions) != 1:
            raise DisassemblyError(f"the CUBIN holds {sorted(functions)}; name the kernel")
        kernel = next(iter(functions))
    if kernel not in functions:
        raise DisassemblyError(f"no kernel {kernel!r} in the CUBIN; it holds {sorted(functions)}")
    function = functions[kernel]
    loop = function.main_loop()
    census = loop.census()
    whole = Loop(function, 0, frozenset(range(len(function.instructions))))
    return LoopReport(
        kernel=kernel,
        registers=cubin_registers(cubin).get(kernel, 0),
        instructions=len(loop),
        tensor_core=sum(census[m] for m in TENSOR_CORE_MNEMONICS),
        copies_of_loads=loop.copies_of_loads(),
        spills=loop.spills,
        kernel_spills=whole.spills,
        census=dict(census.most_common()),
    )

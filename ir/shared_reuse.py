"""Shared tensors that take the memory of earlier ones (`ProgramBuilder.shared_tensor(...,
reuse=...)`): the rule that makes it safe, and the shared memory a program then needs.

A shared tensor X may reuse shared tensors R (`ir.instructions.SharedTensorAlloc.reuse`) when,
in the program's top-level body, a `sync` of the whole block stands after every instruction
that uses one of R (in its own fields or anywhere in its bodies) and before every instruction
that uses X. Then no thread touches R once any thread touches X, and the lowering may place X
where R lie (`backend.lower.context`); the interpreter keeps them apart, as the program means.
What the rule cannot see is the program's to keep: each bulk or asynchronous copy into one of R
has landed (was waited for) before that barrier.

X's own memory counts towards the program's shared memory only as far as it is larger than the
tensors it reuses (`shared_footprint`, what the verifier holds to the limit).
"""

from __future__ import annotations

from ir import dtypes, instructions
from ir.errors import VerificationError
from ir.instructions import Instruction
from ir.program import Program
from ir.values import SharedTensor

SHARED_ALIGNMENT = 16
"""Each shared tensor starts at a multiple of this many bytes, its size rounded up to one."""


def _names_used(instruction: Instruction) -> set[str]:
    """The shared tensors `instruction` uses, in its own fields or in its bodies."""
    names = {t.name for t in instruction.operands() if isinstance(t, SharedTensor)}
    for body in instruction.bodies():
        for inner in body:
            names |= _names_used(inner)
    return names


def _allocations(program: Program) -> dict[str, instructions.SharedTensorAlloc]:
    return {
        instruction.out.name: instruction
        for instruction in program.walk()
        if isinstance(instruction, instructions.SharedTensorAlloc)
    }


def check_reuse(program: Program) -> None:
    """Raise VerificationError unless every shared tensor that reuses others keeps the rule of
    the module docstring: it names earlier shared tensors (not itself), is allocated in the
    top-level body, and a top-level `sync` separates their last use from its first."""
    body = program.body
    seen: set[str] = set()
    uses = [_names_used(instruction) for instruction in body]
    for instruction in body:
        for inner in [instruction, *_nested(instruction)]:
            if not isinstance(inner, instructions.SharedTensorAlloc) or not inner.reuse:
                continue
            name = inner.out.name
            if inner is not instruction:
                raise VerificationError(
                    f"{name} reuses {list(inner.reuse)} but is allocated inside a loop, if or "
                    "thread group; a shared tensor that reuses others is allocated in the "
                    "program's top-level body"
                )
            unknown = [other for other in inner.reuse if other not in seen or other == name]
            if unknown:
                raise VerificationError(
                    f"{name} reuses {unknown}, which are not shared tensors allocated before it "
                    "in the top-level body"
                )
            reused = set(inner.reuse)
            last = max((i for i, used in enumerate(uses) if used & reused), default=None)
            first = next((i for i, used in enumerate(uses) if name in used), None)
            if last is None or first is None:
                continue  # one side never used: nothing to separate
            if first < last or not any(
                isinstance(body[j], instructions.Sync) for j in range(last + 1, first)
            ):
                raise VerificationError(
                    f"{name} reuses the memory of {sorted(reused)}, but no sync of the whole "
                    f"block in the top-level body stands between their last use (top-level "
                    f"instruction {last}) and its first (instruction {first})"
                )
        if isinstance(instruction, instructions.SharedTensorAlloc):
            seen.add(instruction.out.name)


def _nested(instruction: Instruction) -> list[Instruction]:
    """Every instruction inside `instruction`'s bodies, at any depth."""
    found: list[Instruction] = []
    for body in instruction.bodies():
        for inner in body:
            found.append(inner)
            found.extend(_nested(inner))
    return found


def tensor_bytes(alloc: instructions.SharedTensorAlloc) -> int:
    """The bytes a shared tensor takes: its packed size rounded up to `SHARED_ALIGNMENT`."""
    size = dtypes.packed_nbytes(alloc.out.layout.size, alloc.out.dtype)
    return -(-size // SHARED_ALIGNMENT) * SHARED_ALIGNMENT


def shared_footprint(program: Program) -> int:
    """The bytes of shared memory the program's shared tensors take: each tensor's, less, for
    one that reuses others, what they free (at most its own size)."""
    allocations = _allocations(program)
    total = 0
    for alloc in allocations.values():
        own = tensor_bytes(alloc)
        freed = sum(tensor_bytes(allocations[name]) for name in alloc.reuse if name in allocations)
        total += max(own - freed, 0)
    return total

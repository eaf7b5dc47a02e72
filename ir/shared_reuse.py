"""Shared tensors that take the memory of earlier ones (`ProgramBuilder.shared_tensor(...,
reuse=...)`): the rule that makes it safe, and the shared memory a program then needs.

A shared tensor X may reuse shared tensors R (`ir.instructions.SharedTensorAlloc.reuse`) when,
in the program's top-level body, a `sync` of the whole block stands after every instruction
that uses one of R (in its own fields or anywhere in its bodies) and before every instruction
that uses X. Then no thread touches R once any thread touches X, and the lowering may place X
where R lie (`backend.lower.context`); the interpreter keeps them apart, as the program means.

A barrier of one thread group does as well where that group alone touches X and the other
threads touch R only by bulk-copying into it (a producer warp filling the consumers' ring):
in the top-level body with the bodies of its thread groups opened, a `sync` in a body of the
group G (start and threads of a top-level `thread_group`) stands after every use of R and
before every use of X, every use of X is G's, and every use of R outside G is a `copy_bulk`
into it. The copies have landed once G waited for them, so after G's barrier no thread
touches R again (a warp-specialised kernel has no barrier of the whole block after its loop).

What the rule cannot see is the program's to keep: each bulk or asynchronous copy into one of R
has landed (was waited for) before that barrier.

X's own memory counts towards the program's shared memory only as far as it is larger than the
tensors it reuses (`shared_footprint`, what the verifier holds to the limit).
"""

from __future__ import annotations

from collections.abc import Iterator

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
            if first < last or not (
                any(isinstance(body[j], instructions.Sync) for j in range(last + 1, first))
                or _group_barrier_separates(body, reused, name)
            ):
                raise VerificationError(
                    f"{name} reuses the memory of {sorted(reused)}, but no sync of the whole "
                    f"block in the top-level body stands between their last use (top-level "
                    f"instruction {last}) and its first (instruction {first}), nor a sync of "
                    "the one thread group that uses it where the other threads only "
                    "bulk-copy into them"
                )
        if isinstance(instruction, instructions.SharedTensorAlloc):
            seen.add(instruction.out.name)


Group = tuple[int, int] | None
"""A top-level thread group's (start, threads), or None outside every thread group."""


def _opened(body: tuple[Instruction, ...]) -> list[tuple[Instruction, Group]]:
    """The top-level body with the bodies of its thread groups opened: each instruction with
    the top-level thread group it belongs to."""
    opened: list[tuple[Instruction, Group]] = []
    for instruction in body:
        if isinstance(instruction, instructions.ThreadGroup):
            group = (instruction.start, instruction.threads)
            opened.extend((inner, group) for inner in instruction.body)
        else:
            opened.append((instruction, None))
    return opened


def _direct_uses(
    instruction: Instruction, names: set[str], group: Group
) -> Iterator[tuple[Instruction, Group]]:
    """Every instruction at any depth inside `instruction` (itself included) that names one of
    `names` in its own fields, with the outermost thread group around it (else `group`)."""
    if any(isinstance(t, SharedTensor) and t.name in names for t in instruction.operands()):
        yield instruction, group
    if isinstance(instruction, instructions.ThreadGroup) and group is None:
        group = (instruction.start, instruction.threads)
    for body in instruction.bodies():
        for inner in body:
            yield from _direct_uses(inner, names, group)


def _group_barrier_separates(body: tuple[Instruction, ...], reused: set[str], name: str) -> bool:
    """Whether a barrier of one top-level thread group G separates the uses of `reused` from
    those of `name` as the module docstring says: G alone uses `name`, the others only bulk-copy
    into `reused`, and a sync in G's body stands after every use of `reused` and before every
    use of `name`."""
    opened = _opened(body)
    tile_groups = {
        group for entry in opened for _, group in _direct_uses(entry[0], {name}, entry[1])
    }
    if len(tile_groups) != 1 or None in tile_groups:
        return False
    (group,) = tile_groups
    for instruction, owner in (u for e in opened for u in _direct_uses(e[0], reused, e[1])):
        copy = isinstance(instruction, instructions.CopyBulk) and instruction.dst.name in reused
        if owner != group and not copy:
            return False
    uses = [_names_used(instruction) for instruction, _ in opened]
    last = max(i for i, used in enumerate(uses) if used & reused)
    first = next(i for i, used in enumerate(uses) if name in used)
    return any(
        isinstance(opened[j][0], instructions.Sync) and opened[j][1] == group
        for j in range(last + 1, first)
    )


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

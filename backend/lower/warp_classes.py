"""Warp specialisation: the tail of a kernel that only thread groups run, written once per class
of warps.

A program whose block body ends with instructions that are all thread groups
(`ir.instructions.ThreadGroup`), or loops and ifs made of those, lets each warp run its own
path through that tail: a warp runs the bodies of the groups holding it, in program order, and
nothing else, and no instruction there is collective over the whole block. So the lowering
writes the tail once for each *warp class* (the warps that the tail's groups do not tell apart),
under one condition on the warp, with the loops and ifs around the class's own bodies only.
A producer warp then runs a loop of its copies alone, and the consumers a loop of their work,
instead of every warp stepping through both bodies and testing which is its own; each
group's barrier still counts the group's warps, and a group that spans several classes has its
body written in each of them.

Written this way, each class may also change its warps' register budget first
(`ThreadGroup.registers`, PTX ``setmaxnreg`` on sm_90a): the compiler allocates each class's
code within its own budget, so a producer can give registers back that the consumers' code
takes.

`specialised_tail(body)` finds where the tail starts, `warp_classes(tail)` the classes,
`class_instructions(tail, warps)` a class's instructions and `class_budget(tail, warps)` its
budget; `budget_problem(registers, changes)` says whether the budgets' ``setmaxnreg`` are valid
for warps that start with `registers` a thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

from ir import instructions
from ir.instructions import Instruction


def _group_only(instruction: Instruction) -> bool:
    """A thread group, or a loop or an if whose body holds only those (recursively)."""
    if isinstance(instruction, instructions.ThreadGroup):
        return True
    if isinstance(instruction, (instructions.ForRange, instructions.If)):
        return all(_group_only(inner) for inner in instruction.body)
    return False


def _top_groups(body: Sequence[Instruction]) -> Iterator[instructions.ThreadGroup]:
    """The thread groups of `body` that are not inside another group, in program order."""
    for instruction in body:
        if isinstance(instruction, instructions.ThreadGroup):
            yield instruction
        elif isinstance(instruction, (instructions.ForRange, instructions.If)):
            yield from _top_groups(instruction.body)


def specialised_tail(body: Sequence[Instruction]) -> int | None:
    """The index of the first instruction of the block's `body` from which on every
    instruction is a thread group or a loop or if made of them, when that tail holds a group;
    else None (the kernel is written as one path)."""
    start = len(body)
    while start > 0 and _group_only(body[start - 1]):
        start -= 1
    if next(_top_groups(body[start:]), None) is None:
        return None
    return start


def warp_classes(tail: Sequence[Instruction]) -> list[tuple[int, int]]:
    """The warp classes of a specialised tail as (first thread, threads), in thread order: the
    ranges cut by the first and last threads of every group of the tail, of those ranges the
    ones inside some group (warps in no group run none of the tail)."""
    groups = [(group.start, group.threads) for group in _top_groups(tail)]
    cuts = sorted({edge for start, threads in groups for edge in (start, start + threads)})
    return [
        (low, high - low)
        for low, high in zip(cuts, cuts[1:])
        if any(start <= low and high <= start + threads for start, threads in groups)
    ]


def _holds(group: instructions.ThreadGroup, warps: tuple[int, int]) -> bool:
    return group.start <= warps[0] and warps[0] + warps[1] <= group.start + group.threads


def class_instructions(
    tail: Sequence[Instruction], warps: tuple[int, int]
) -> tuple[Instruction, ...]:
    """The instructions that the class `warps` runs of a specialised tail: the groups holding
    it, the loops and ifs around them (new objects, their bodies specialised; dropped where
    nothing of the class is left), and nothing else. The groups are the tail's own objects."""
    kept: list[Instruction] = []
    for instruction in tail:
        if isinstance(instruction, instructions.ThreadGroup):
            if _holds(instruction, warps):
                kept.append(instruction)
        elif isinstance(instruction, (instructions.ForRange, instructions.If)):
            body = class_instructions(instruction.body, warps)
            if body:
                kept.append(dataclasses.replace(instruction, body=body))
    return tuple(kept)


def class_budget(tail: Sequence[Instruction], warps: tuple[int, int]) -> int | None:
    """The register budget of the class `warps`: that of the groups holding it that ask for
    one (the verifier makes it one per warp), else None."""
    for group in _top_groups(tail):
        if group.registers is not None and _holds(group, warps):
            return group.registers
    return None


@dataclasses.dataclass(frozen=True)
class BudgetChange:
    """One class's ``setmaxnreg``: its `threads` threads go to `budget` registers each, by an
    increase (`increase`) or a release, chosen against the registers the launch bounds give."""

    threads: int
    budget: int
    increase: bool


def budget_problem(registers: int, changes: Sequence[BudgetChange]) -> str | None:
    """Why the `changes` are not valid for warps that start with `registers` registers a
    thread (None when they are): an increase must not lower a warp's registers, nor a release
    raise them, and the increases take no more registers than the releases free, or they
    would wait forever for the block's pool. The lowering asks it with the launch bounds'
    registers, the compile again with those of the compiled kernel, which may be fewer."""
    for change in changes:
        lowered = change.budget < registers
        if (change.increase and lowered) or (not change.increase and change.budget > registers):
            action = "increase" if change.increase else "release"
            return (
                f"the {action} of {change.threads} threads to {change.budget} registers each "
                f"cannot start from {registers}"
            )
    asked = sum(change.threads * (change.budget - registers) for change in changes)
    if asked > 0:
        return (
            f"the increases take {asked} registers more than the releases free, from "
            f"{registers} a thread"
        )
    return None

"""A tile program: the body of one thread block, its parameters and its thread count.

A `Program` is run over a grid of up to three dimensions (given at launch, not stored). Inside,
the scalars `block_x`, `block_y`, `block_z` (`BLOCK_INDICES`) are the block's index in the grid;
every instruction is executed collectively by the block's `num_threads` threads. Parameters come
in a fixed order: `run_reference(program, *args, grid=...)` and a compiled kernel take the
arguments positionally in that order, or by name.

`str(program)` is the printed text (`ir.printer`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ir.instructions import Instruction
from ir.values import Param
from layout_algebra.symbolic import Expr, var

BLOCK_INDEX_LIMIT = 2**31 - 1
"""The largest block index (CUDA's grid x limit; y and z are smaller on the GPU)."""

BLOCK_INDICES: tuple[Expr, Expr, Expr] = (
    var("block_x", 0, BLOCK_INDEX_LIMIT - 1),
    var("block_y", 0, BLOCK_INDEX_LIMIT - 1),
    var("block_z", 0, BLOCK_INDEX_LIMIT - 1),
)
"""The block index variables, x then y then z (blockIdx.x/.y/.z)."""


@dataclass(frozen=True, eq=False)
class Program:
    """One tile program.

    Fields: `name` (a C identifier: the kernel's name), `num_threads` (threads per block; every
    register tensor's layout has this many threads), `params` (the parameters in order, each an
    `IntParam` or an `ArrayParam`) and `body` (the instructions).
    """

    name: str
    num_threads: int
    params: tuple[Param, ...]
    body: tuple[Instruction, ...]

    def param(self, name: str) -> Param:
        """The parameter called `name` (KeyError when there is none)."""
        for param in self.params:
            if param.name == name:
                return param
        raise KeyError(name)

    def walk(self) -> Iterator[Instruction]:
        """Every instruction in program order, entering loop and if bodies (pre-order)."""
        return walk(self.body)

    def __str__(self) -> str:
        from ir.printer import format_program

        return format_program(self)


def walk(body: tuple[Instruction, ...]) -> Iterator[Instruction]:
    """Every instruction of `body` in order, each followed by the instructions of its body."""
    for instruction in body:
        yield instruction
        for inner in instruction.bodies():
            yield from walk(inner)

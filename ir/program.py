"""A tile program: the body of one thread block, its parameters and its thread count.

A `Program` is run over a grid of up to three dimensions, given at launch or declared by the
program (`grid`: one extent per dimension, an expression over its int parameters, which a launch
then computes and checks). Inside, the scalars `block_x`, `block_y`, `block_z` (`BLOCK_INDICES`)
are the block's index in the grid; every instruction is executed collectively by the block's
`num_threads` threads. Parameters come in a fixed order: `run_reference(program, *args,
grid=...)` and a compiled kernel take the arguments positionally in that order, or by name.

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
    `IntParam` or an `ArrayParam`), `body` (the instructions) and `grid` (the declared launch
    grid: the x, y and z block counts as expressions over the int parameters, which every launch
    must equal; None when the grid is given at launch only) and `min_blocks_per_sm` (the
    occupancy the compiler must allow: blocks of the program resident on one SM at once, which
    caps the registers per thread; None leaves the registers to the compiler) and
    `programmatic_launch` (the kernel is launched so that it may start while the kernel before
    it on the stream finishes, and lets the kernel after it start likewise; its body then holds
    one `WaitPriorGrid`, before which it reads only memory no earlier kernel writes) and
    `hoist_invariants` (the lowering computes each block-invariant value that divides by a
    runtime value once, at the kernel's start: `backend.lower.lower`'s option of that name,
    asked for by the program) and `cluster` (None, or the (x, y, z) extents of the clusters
    the grid is launched in: blocks scheduled together on one GPU processing cluster from
    sm_90 on, whose bulk copies of a tile that every block of a cluster copies alike the
    lowering may issue once for all of them, `backend.bulk_copy`; the declared grid is a
    multiple of it) and `wgmma_chain_window` (0, or the links of a chain of warpgroup dots,
    `backend.wgmma_pipeline.dot_chains`, that may run at once: each link, once issued, waits
    until at most that many run, itself among them, so that the A registers of the links
    before them are free; 0: every link runs until the chain's last). None of them changes
    what the program computes.
    """

    name: str
    num_threads: int
    params: tuple[Param, ...]
    body: tuple[Instruction, ...]
    grid: tuple[Expr, Expr, Expr] | None = None
    min_blocks_per_sm: int | None = None
    programmatic_launch: bool = False
    hoist_invariants: bool = False
    cluster: tuple[int, int, int] | None = None
    wgmma_chain_window: int = 0

    @property
    def cluster_blocks(self) -> int:
        """Blocks of a cluster: the product of `cluster`'s extents (1 without one)."""
        if self.cluster is None:
            return 1
        x, y, z = self.cluster
        return x * y * z

    @property
    def block_indices(self) -> tuple[Expr, Expr, Expr]:
        """The block index variables as the declared grid bounds them: `BLOCK_INDICES`, except
        that an index whose extent has a finite upper bound hi (`Expr.bounds`) below
        `BLOCK_INDEX_LIMIT` lies in [0, hi - 1], since a launch runs only grids equal to the
        declared one. ``grid(n // 256)`` with n <= 4096 bounds block_x by 15; a grid of 8
        blocks, by 7."""
        if self.grid is None:
            return BLOCK_INDICES
        x, y, z = (_bounded_index(index, extent) for index, extent in zip(BLOCK_INDICES, self.grid))
        return x, y, z

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


def _bounded_index(index: Expr, extent: Expr) -> Expr:
    """`index` bounded by [0, hi - 1] where `extent`'s upper bound hi narrows it (hi >= 1)."""
    high = extent.bounds()[1]
    if high is None or not 1 <= high < BLOCK_INDEX_LIMIT:
        return index
    return var(index.name, 0, high - 1)


def walk(body: tuple[Instruction, ...]) -> Iterator[Instruction]:
    """Every instruction of `body` in order, each followed by the instructions of its body."""
    for instruction in body:
        yield instruction
        for inner in instruction.bodies():
            yield from walk(inner)

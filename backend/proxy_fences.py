"""Where a kernel with wgmma dots needs its async-proxy fences: a dataflow of each thread's
generic writes to shared memory since its last fence.

A wgmma reads shared memory through its descriptors, in the async proxy. What the threads
wrote there in the generic proxy (a store, a ``cp.async`` copy, a bulk copy not written as
TMA) reaches it only through ``fence.proxy.async``, issued by the writing thread once its
writes are complete and before the barrier (or the dot) that orders them with the read. The
lowering marks every barrier and every dot of such a kernel (`backend.wgmma.PROXY_FENCE_MARK`);
a fence orders all the thread's earlier writes, so a mark reached where the thread cannot have
written anything since its last fence would order nothing new and is left out. The reverse
order needs no proxy fence: a wgmma's reads are over once its ``wait_group`` returns, and a
barrier then orders them before any thread's next write into that memory.

`ProxyWrites` is the state the lowering carries along the program as it writes it: whether a
generic write may be pending (`pending`). Each instruction that writes shared memory in the
generic proxy sets it, and so does each ``cp.async`` wait, which completes such writes (a fence
issued between a copy's issue and its wait does not order it). A fence clears it, and so does
the wait for bulk copies the threads make themselves (where TMA is not used): it waits for
every copy of the thread and ends in a fenced barrier. A loop's body starts from its head's
state, the entry's joined with that of the body's end (`loop_head`, the least fixed point of
one iteration), which is also the state after the loop; an ``if`` joins its entry with its
body's end. Marks reached with nothing pending are dropped. In a program with thread groups
every mark is kept: data passes between groups through barriers of other threads and
bulk-copy protocols this per-thread account does not follow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ir import instructions
from ir.instructions import Instruction
from ir.program import Program


@dataclass
class ProxyWrites:
    """Whether a generic write to shared memory may be pending, not yet ordered by an
    async-proxy fence, at the point of the program being written.

    `tma`: the shared tensors whose bulk copies are written as TMA (async-proxy writes, which
    need no fence). `every_mark`: keep every fence (a program with thread groups).
    """

    tma: frozenset[str] = frozenset()
    every_mark: bool = False
    pending: bool = True

    @classmethod
    def of(cls, program: Program, tma: frozenset[str]) -> ProxyWrites:
        """The account for `program` at its start (a pending write assumed, so the first mark
        is kept)."""
        grouped = any(isinstance(item, instructions.ThreadGroup) for item in program.walk())
        return cls(tma, every_mark=grouped)

    def writes(self, instruction: Instruction) -> bool:
        """Whether `instruction` itself writes shared memory in the generic proxy, or completes
        such writes (its control-flow bodies aside): a bulk copy not written as TMA is the
        threads' ``cp.async`` copies (its wait, which ends in a barrier: `barrier`, is not)."""
        if isinstance(
            instruction,
            (instructions.StoreShared, instructions.CopyAsync, instructions.CopyAsyncWait),
        ):
            return True
        if isinstance(instruction, instructions.CopyBulk):
            return instruction.dst.name not in self.tma
        return False

    def barrier(self, instruction: Instruction) -> bool:
        """Whether `instruction` is written as a block barrier, fenced where a write is
        pending: a `Sync`, or the wait for a bulk copy not written as TMA (every ``cp.async``
        of the thread waited for, then a barrier)."""
        if isinstance(instruction, instructions.CopyBulkWait):
            return instruction.dst.name not in self.tma
        return isinstance(instruction, instructions.Sync)

    def after(self, body: Sequence[Instruction], pending: bool) -> bool:
        """The state after `body` run from `pending`, where only a barrier is counted as a
        fence (a dot's fence may be left out of the kernel, so it is not relied on here)."""
        for instruction in body:
            if self.barrier(instruction):
                pending = False
            elif isinstance(instruction, instructions.ForRange):
                pending = self.loop_head(instruction, pending)
            elif isinstance(instruction, (instructions.If, instructions.ThreadGroup)):
                pending = pending or self.after(instruction.body, pending)
            elif self.writes(instruction):
                pending = True
        return pending

    def loop_head(self, loop: instructions.ForRange, pending: bool) -> bool:
        """The state at the head of `loop` entered with `pending`: pending if it is at the
        entry or at the end of a body run from a head with nothing pending."""
        return pending or self.after(loop.body, False)

    def note(self, instruction: Instruction) -> None:
        """After `instruction` (not a loop, an ``if`` or a group: the lowering sets a loop's
        head by `enter_loop`, and joins an ``if``'s or a group's end with its entry)."""
        if self.writes(instruction):
            self.pending = True

    def enter_loop(self, loop: instructions.ForRange) -> bool:
        """The state at the head of a C loop over `loop` (set, and returned: it is the state
        after the loop as well)."""
        self.pending = self.loop_head(loop, self.pending)
        return self.pending

    def fence(self) -> bool:
        """Whether a mark reached now is kept: a generic write may be pending (or every mark
        is kept). A kept mark is a fence, so nothing is pending after it."""
        kept = self.every_mark or self.pending
        self.pending = False
        return kept

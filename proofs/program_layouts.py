"""The layout claims of a tile program, proved with Z3.

Every register tensor of a tile program (`ir.Program`) is placed by a `RegisterLayout`, and every
store writes a register tile through a memory layout. `check_program_layouts(program)` lists the
program's layout claims and proves each one with one query of `proofs.checks`:

- "in_bounds": for each distinct register layout of a register tensor that an instruction
  defines or uses (loop and if bodies included, in program order, equal layouts once), every
  thread ``t < num_threads`` and register ``i < local_size`` map to a coordinate inside the
  layout's shape (`check_in_bounds` of the layout);
- "injective": for each `store_global` and `store_shared` whose register layout has no
  replication and whose memory layout has constant extents and strides and the tile's shape, no
  two (thread, register) pairs write the same element: the access map
  ``compose(memory, register)``, ``(t, i) -> memory.offset(register.map(t, i))`` (offsets from
  the tile origin), is injective (`check_injective` of the access map).

No claim is made for the other stores: replicas of a replicated layout write the same element by
design; a combining store (``combine="add"``) adds every element it holds, wherever two meet; a
memory layout with symbolic extents or strides, or of another shape than the tile (a
tile stored into part of a larger tensor), has no access map of the tile (`compose`).

    report = check_program_layouts(quantized_matmul(dtypes.u4), timeout=30)
    len(report.results)   # 7: six register layouts in bounds, one store_shared injective
    report.holds          # True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ir.instructions import Instruction, StoreGlobal, StoreShared
from ir.program import Program
from ir.values import RegisterTensor
from layout_algebra.access import AccessMap, compose
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import RegisterLayout
from proofs.checks import check_in_bounds, check_injective
from proofs.errors import ProofError
from proofs.result import DEFAULT_TIMEOUT, ProofResult, check_limits, conjunction

_CHECKS: dict[str, Callable[..., ProofResult]] = {
    "in_bounds": check_in_bounds,
    "injective": check_injective,
}


@dataclass(frozen=True)
class LayoutClaim:
    """One layout claim of a program.

    `kind`: "in_bounds" or "injective" (see the module docstring). `description`: the claim in
    one sentence, e.g. ``"spatial(16,8).local(4,8) stays inside (64, 64)"`` or
    ``"store_shared of local(2,1).spatial(16,8).local(1,8) writes each address once"``.
    `subject`: what the check reads, the `RegisterLayout` (in_bounds) or the store's
    `AccessMap` (injective). `instruction`: the store of an injective claim, else None.
    """

    kind: str
    description: str
    subject: RegisterLayout | AccessMap
    instruction: Instruction | None = None


@dataclass(frozen=True)
class ProgramLayoutReport:
    """The checked layout claims of a program: `results`, pairs (LayoutClaim, ProofResult) in
    the order of the module docstring (every in_bounds claim, then every injective claim, each
    in program order)."""

    results: tuple[tuple[LayoutClaim, ProofResult], ...]

    @property
    def holds(self) -> bool | None:
        """True when every claim is proved (also when there is none), False when one is
        refuted, else None."""
        return conjunction(result for _, result in self.results)

    @property
    def proved(self) -> int:
        """How many claims are proved."""
        return sum(result.holds is True for _, result in self.results)

    @property
    def failures(self) -> list[tuple[LayoutClaim, ProofResult]]:
        """The refuted claims with their results (the counterexample of `check_in_bounds` or
        `check_injective`)."""
        return [(claim, result) for claim, result in self.results if result.holds is False]

    @property
    def unknown(self) -> list[tuple[LayoutClaim, ProofResult]]:
        """The claims neither proved nor refuted."""
        return [(claim, result) for claim, result in self.results if result.holds is None]


def _claims(program: Program) -> list[LayoutClaim]:
    """The layout claims of `program` (see the module docstring), not yet checked."""
    layouts: list[RegisterLayout] = []
    stores: list[StoreGlobal | StoreShared] = []
    for instruction in program.walk():
        for tensor in (*instruction.results(), *instruction.operands()):
            if isinstance(tensor, RegisterTensor) and tensor.layout not in layouts:
                layouts.append(tensor.layout)
        # A combining store adds every element it holds, so two of them may meet at an address.
        if isinstance(instruction, StoreShared) or (
            isinstance(instruction, StoreGlobal) and instruction.combine is None
        ):
            stores.append(instruction)
    claims = [
        LayoutClaim("in_bounds", f"{layout!r} stays inside {layout.shape}", layout)
        for layout in layouts
    ]
    for store in stores:
        memory, register = store.dst.layout, store.src.layout
        if isinstance(memory, GlobalLayout) and memory.is_symbolic:
            continue
        if register.replication != 1 or tuple(memory.shape) != register.shape:
            continue
        claims.append(
            LayoutClaim(
                "injective",
                f"{store.op} of {register!r} writes each address once",
                compose(memory, register),
                store,
            )
        )
    return claims


def check_program_layouts(
    program: Program,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    rlimit: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ProgramLayoutReport:
    """Prove the layout claims of `program`: each register layout in bounds, each store of an
    unreplicated tile through a concrete memory layout of its shape injective (exactly the
    claims listed in the module docstring).

    Each claim is one solver query bounded by `timeout` seconds and `rlimit` Z3 resource units
    (no bound when None). `progress`, when given, is called as ``progress(done, total)`` after
    each claim is checked. Raises ProofError for a `program` that is no `ir.Program` or for a
    bad `timeout` or `rlimit`.
    """
    check_limits(timeout, rlimit)
    if not isinstance(program, Program):
        raise ProofError(f"check_program_layouts expects an ir.Program, got {program!r}")
    claims = _claims(program)
    results = []
    for done, claim in enumerate(claims, start=1):
        results.append((claim, _CHECKS[claim.kind](claim.subject, timeout, rlimit)))
        if progress is not None:
            progress(done, len(claims))
    return ProgramLayoutReport(tuple(results))

"""Validation of the backend's lowering: every printed address means what the program says.

The backend records each address expression it prints into a kernel (`backend.lower.Access`:
the expression `expr` in units of `unit_bits`, the instruction it belongs to, which of the
instruction's tensors it touches, the pointer it is printed with, and the replica guard it runs
under). What an access must do is not taken from the record: it is derived here from the IR
instruction itself (`placement`): the memory layout of the instruction's tensor, the tile
origin written in the program (its `offsets`), the register layout of the instruction's
register tensor (a copy's own layout, or for a copy without one the layout the backend chose,
which must tile the copy's shape), so a lowering that places tiles wrongly is refuted even
where its text and its record agree. For a kernel compiled with compile-time constants, the
instructions are those of the specialised program (`ir.specialize`: the values as literals, loop
variables bounded by them), which the accesses are proved against. Checked per access:

- placement and pointer: the access touches a tensor of its instruction, printed by its name;
- guard (writes): the threads its guard lets through write each element of the tile exactly
  once, by the instruction's register layout (one replica stores; computed for every thread);
- text (with the kernel's source, `proofs.printed_source`): the proved expression is the one
  printed, as a whole operand of the tensor's pointer, under its guard and its mask, and a
  vector's lanes move the registers ``local_index ..`` in order;

and proved with Z3, for every thread 0 <= t < num_threads and every value of the scalar
variables within their declared bounds and under the access's `assumptions` (loop ranges and
strides, if conditions, and each int parameter's declared divisor: ``k % m == 0`` for
``int_param("k", multiple_of=m)``, which the launch check enforces):

- address: ``expr * unit_bits + j * element_bits == spec(local_index + j) * element_bits``
  for every j < width, where the specification
  ``spec(i) = memory.offset(origin + register.map(t, i))`` is built here from the IR's
  placement (the register layout's own `map` and the memory layout's own `offset`,
  unsimplified): the vector's registers sit at consecutive elements from the printed address;
- alignment (vectors): ``expr * unit_bits`` is a multiple of ``width * element_bits``, the
  vector's size;
- mask (global accesses): the printed guard is true exactly when every element
  ``origin + register.map(t, local_index + j)`` lies inside the memory tensor's shape;
- count (zero-filling copies): register ``local_index + j`` lies inside the shape exactly when
  j is below the printed count of registers read.

Encodings. The expressions are translated by the shared encoder `proofs.encode.Encoder`: in
Z3's integer theory, except for accesses whose expressions use XOR, AND or OR (swizzled shared
memory), which are proved in its whole-query bit-vector mode, where the bitwise operators are
native. That form is exact because `proofs.encode.bitvector_width` admits it only when every
sub-expression of the access has finite, non-negative bounds (`Expr.bounds`, from the
variables' declared bounds) and every divisor is at least 1, so a width two bits above the
largest bound holds every value; an access with a possibly negative or unbounded part, or a
possibly zero divisor, stays in integers.

A query the solver gives up on is asked again over its simplified arithmetic
(`_rewritten_search`, `proofs.rewriting`): each subterm without bitwise operators replaced by
its `simplify` form, each replacement first proved equal to its original in integers, and the
bitwise query then translated by a `proofs.encode.ModularPlan`, whose negative intermediate
values wrap harmlessly once the operands its unsigned operators read are proved non-negative.
That is what proves a stream-K decode kernel: its specification divides a block's share by
``min(132, 48 * ceil(m / 8) * 32)`` where its printed code divides by 11, and only in
integers is that quick to prove.

A counterexample from the solver is confirmed by evaluating both sides on ints before it is
reported (holds False); an unconfirmed model, the resource limit or the timeout give holds None.
Each access's query runs in a fresh Z3 context, so what it costs does not depend on the terms
earlier queries left in a shared one: there, one query of a prefill kernel took under 5 million
resource units or over 20 million depending on the process's hash seed (2 of 6 seeds failed a
test at 20 million). Some dependence on the process's history remains (Z3 keeps its symbols
for the whole process), so tests give their heaviest kernels a margin over what a query takes in
a fresh process.

The claims of the tensor-core plans a kernel uses (`backend.tensor_core`: the fragments an
``mma.sync`` computes, the addresses an ``ldmatrix`` reads) are proved too, each by
`proofs.check_equivalent` of what the printed code computes and what the IR asks.

    report = validate_lowering(backend.compile(program, "sm_90a"))
    report.holds          # True when every access and plan claim is proved
    report.failures       # (access or claim, ProofResult) pairs refuted, with the point
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import z3

from backend.cuda_codegen import combine_helper
from backend.lower import Access
from backend.tensor_core import Claim
from ir.instructions import (
    AtomicAdd,
    CopyAsync,
    CopyBulk,
    Dot,
    LoadGlobal,
    LoadShared,
    PrefetchGlobal,
    StoreGlobal,
    StoreShared,
)
from layout_algebra.function_layout import FunctionLayout
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import RegisterLayout, pad_layout, replicate
from layout_algebra.shared import SharedLayout, shared_row_major
from layout_algebra.symbolic import Expr, as_expr, evaluate, logical_and
from proofs.checks import check_equivalent
from proofs.encode import (
    Encoder,
    ModularPlan,
    bitvector_width,
    has_bitwise,
    modular_bitvector_plan,
)
from proofs.errors import EncodingError, ProofError
from proofs.printed_source import (
    PrintedSource,
    check_lanes,
    check_mask,
    check_text,
)
from proofs.printed_source import check_guard as check_guard_text
from proofs.result import (
    DEFAULT_TIMEOUT,
    ProofResult,
    check_limits,
    conjunction,
    elapsed,
    search,
    unknown,
)
from proofs.rewriting import simplified_arithmetic

DEFAULT_RLIMIT = 2_000_000
"""Z3 resource units one access may use when the caller gives no limit (a few seconds at most;
the backend's accesses take a tiny fraction of it)."""


@dataclass(frozen=True)
class Placement:
    """Where an access's registers must go, derived from its IR instruction alone: the memory
    layout of the tensor it touches, the register layout of the tile (padded to the memory's
    rank) and the tile origin written in the program."""

    memory: SharedLayout | GlobalLayout
    register: RegisterLayout | FunctionLayout
    origin: tuple[Expr, ...]
    pointer: str | None = None
    """The C name of the tensor in the source (None for a scratch copy, named by the backend)."""


def placement(access: Access) -> Placement:
    """The placement the IR instruction of `access` asks for (see `Placement`).

    A load reads its source at its offsets with its result's layout (a prefetch, with its
    layout); a store writes its
    destination at its offsets with its source's layout; an atomic_add updates the one element
    at its offsets; a copy reads (role "src") and writes
    (role "dst") with its layout, or, for a copy the program gives no layout, with the layout
    the backend chose (recorded), which must be a register layout of the copy's tile. A staged
    dot's scratch copies are row-major float32 copies of a and b: written with the operand's
    layout, read at step k with the rows (of a) or columns (of b) of the dot's c elements.
    Raises ProofError for a role the instruction has no tensor for.
    """
    instruction, role = access.instruction, access.role
    match instruction:
        case LoadGlobal() | LoadShared() if role == "src":
            tensor, origin, layout = instruction.src, instruction.offsets, instruction.out.layout
        case PrefetchGlobal() if role == "src":
            tensor, origin, layout = instruction.src, instruction.offsets, instruction.layout
        case StoreGlobal() | StoreShared() if role == "dst":
            tensor, origin, layout = instruction.dst, instruction.offsets, instruction.src.layout
        case CopyAsync() | CopyBulk() if role in ("src", "dst"):
            # A bulk copy lowered by every thread (no tensor map) is a copy with no layout.
            tensor = instruction.src if role == "src" else instruction.dst
            origin = instruction.src_offsets if role == "src" else instruction.dst_offsets
            layout = getattr(instruction, "layout", None)
            if layout is None:
                chosen = access.register
                if not isinstance(chosen, RegisterLayout) or chosen.shape[
                    len(chosen.shape) - len(instruction.shape) :
                ] != tuple(instruction.shape):
                    raise ProofError(
                        f"the copy's recorded layout {chosen!r} is not a register layout of "
                        f"its tile {instruction.shape}"
                    )
                layout = chosen
        case Dot() if role in ("scratch a", "scratch b"):
            return _scratch_placement(instruction, role, access.step)
        case AtomicAdd() if role == "dst":
            # One element at the offsets, every thread's tile (the primary thread adds).
            tensor, origin = instruction.dst, instruction.offsets
            ones = [1] * instruction.dst.rank
            layout = replicate(access.register.num_threads).reshape(*ones)
        case _:
            raise ProofError(
                f"an access with role {role!r} of {type(instruction).__name__}: the instruction "
                "has no such tensor"
            )
    memory = tensor.layout
    return Placement(memory, pad_layout(layout, memory.rank), tuple(origin), tensor.name)


def _scratch_placement(dot: Dot, role: str, step: int | None) -> Placement:
    (m, k_extent), n = dot.a.shape, dot.b.shape[1]
    c = dot.c.layout
    zero = (as_expr(0), as_expr(0))
    if role == "scratch a":
        memory = shared_row_major(m, k_extent)
        if step is None:
            return Placement(memory, dot.a.layout, zero)
        rows = FunctionLayout(
            (m, k_extent), c.num_threads, c.local_size, lambda t, i: (c.map(t, i)[0], step)
        )
        return Placement(memory, rows, zero)
    memory = shared_row_major(k_extent, n)
    if step is None:
        return Placement(memory, dot.b.layout, zero)
    columns = FunctionLayout(
        (k_extent, n), c.num_threads, c.local_size, lambda t, i: (step, c.map(t, i)[1])
    )
    return Placement(memory, columns, zero)


def specification(access: Access, local_index: int) -> Expr:
    """The element offset register `local_index` of thread `access.thread` must address:
    ``memory.offset(origin + register.map(t, local_index))`` of the IR's `placement`."""
    where = placement(access)
    coords = where.register.map(access.thread, local_index)
    return as_expr(where.memory.offset([o + c for o, c in zip(where.origin, coords)]))


def inside(access: Access, local_index: int) -> Expr:
    """The condition that register `local_index` of the thread lies inside the memory shape
    (of the IR's `placement`)."""
    where = placement(access)
    coords = where.register.map(access.thread, local_index)
    condition: Expr = as_expr(1)
    for origin, coord, extent in zip(where.origin, coords, where.memory.shape):
        condition = logical_and(condition, origin + coord >= 0)
        condition = logical_and(condition, origin + coord < extent)
    return condition


def writes_memory(access: Access) -> bool:
    """Whether the access writes memory (a store, a copy's destination, a scratch write)."""
    if access.role in ("scratch a", "scratch b"):
        return access.step is None
    return access.role == "dst"


def check_guard_owners(access: Access) -> str | None:
    """None when the threads the access's guard lets through write every element of the tile
    exactly once (the IR's register layout: one replica of each element stores); else what
    goes wrong. Loads may run on every thread: only accesses that write memory are checked."""
    if not writes_memory(access):
        return None
    layout = placement(access).register
    threads = np.arange(layout.num_threads, dtype=np.int64)
    if access.guard is None:
        running = np.ones(threads.shape, dtype=bool)
    else:
        values = evaluate(access.guard, {access.thread.name: threads})
        running = np.broadcast_to(np.asarray(values) != 0, threads.shape)
    table = np.asarray(layout.table(), dtype=np.int64)
    flat = np.ravel_multi_index(tuple(np.moveaxis(table, -1, 0)), layout.shape)
    counts = np.bincount(flat[running].ravel(), minlength=math.prod(layout.shape))
    if np.all(counts == 1):
        return None
    element = int(np.flatnonzero(counts != 1)[0])
    coord = np.unravel_index(element, layout.shape)
    return (
        f"element {tuple(int(c) for c in coord)} of the tile is written {int(counts[element])} "
        f"times by the threads the guard {access.guard!r} lets through (expected once)"
    )


@dataclass(frozen=True)
class _Claim:
    """One claim of an access: ``printed == expected`` (numbers), or, when `truth`, both are
    conditions that must hold together (``printed != 0`` exactly when ``expected != 0``)."""

    name: str
    local_index: int
    printed: Expr
    expected: Expr
    truth: bool = False


def _claims(access: Access) -> list[_Claim]:
    claims = []
    printed_bits = as_expr(access.expr) * access.unit_bits
    for j in range(access.width):
        i = access.local_index + j
        printed_element = printed_bits + j * access.element_bits
        expected_bits = specification(access, i) * access.element_bits
        claims.append(_Claim("address", i, printed_element, expected_bits))
    if access.width > 1:
        remainder = printed_bits % (access.width * access.element_bits)
        claims.append(_Claim("alignment", access.local_index, remainder, as_expr(0)))
    if access.mask is not None:
        everything: Expr = as_expr(1)
        for j in range(access.width):
            everything = logical_and(everything, inside(access, access.local_index + j))
        claims.append(_Claim("mask", access.local_index, access.mask, everything, truth=True))
    if access.count is not None:
        for j in range(access.width):
            i = access.local_index + j
            claims.append(_Claim("count", i, access.count > j, inside(access, i), truth=True))
    return claims


# ---------------------------------------------------------------------------------- encodings

Query = tuple[list[Any], Any, Encoder]
"""(constraints, violation, the encoder of its terms and variables) of one solver query."""


def _integer_fact(encoder: Encoder, fact: Expr, number: int) -> Any:
    """The Z3 form of assumption number `number`: a divisibility fact ``v % m == 0`` (v a
    variable, m a positive constant) as ``v == m * q`` with a fresh integer q, which the solver
    reasons with far better in products such as ``row * v``; any other fact as is."""
    if fact.op == "==" and fact.args[1].is_const and fact.args[1].value == 0:
        remainder = fact.args[0]
        if remainder.op == "%" and remainder.args[0].op == "var":
            divisor = remainder.args[1]
            if divisor.is_const and divisor.value > 0:
                term = encoder.term(remainder.args[0])
                quotient = z3.Int(f"la_quotient_{number}", ctx=term.ctx)
                return term == divisor.value * quotient
    return encoder.truth(fact)


def _relevant_assumptions(access: Access, claims: list[_Claim]) -> list[Expr]:
    """The assumptions that share a variable with the claims, directly or through other
    assumptions. The rest constrain only variables no claim mentions (another loop's counter,
    say), so leaving them out proves a stronger statement, and a counterexample of the claims
    extends to them whenever they can hold at all (otherwise the access is dead code)."""
    names = set(access.thread.free_vars())
    for claim in claims:
        names |= claim.printed.free_vars() | claim.expected.free_vars()
    remaining = list(access.assumptions)
    chosen: list[Expr] = []
    changed = True
    while changed:
        changed = False
        for fact in list(remaining):
            if fact.free_vars() & names:
                names |= fact.free_vars()
                chosen.append(fact)
                remaining.remove(fact)
                changed = True
    return [fact for fact in access.assumptions if any(fact is kept for kept in chosen)]


def _query(
    access: Access,
    claims: list[_Claim],
    assumptions: list[Expr] | None = None,
    plan: ModularPlan | None = None,
) -> Query:
    """The query "some thread and values of the variables, within their bounds and under the
    assumptions, break a claim", translated by the shared `proofs.encode.Encoder`.

    In whole-query bit-vectors when an expression has a bitwise operator and
    `proofs.encode.bitvector_width` admits them all (every node non-negative and bounded, every
    divisor at least 1, so every expression is defined); otherwise in integers, where a point
    at which the printed side cannot be evaluated (a zero divisor) also breaks its claim and
    the specification is assumed to evaluate. `assumptions` default to the access's relevant
    ones; with `plan`, in that plan's modular bit-vectors (`_rewritten_search`).
    """
    num_threads = access.register.num_threads
    in_block = logical_and(access.thread >= 0, access.thread < num_threads)
    if assumptions is None:
        assumptions = _relevant_assumptions(access, claims)
    exprs = [in_block, *assumptions]
    exprs += [claim.printed for claim in claims] + [claim.expected for claim in claims]
    if plan is not None:
        width: int | None = plan.width
    else:
        width = bitvector_width(exprs) if has_bitwise(exprs) else None
    encoder = Encoder(ctx=z3.Context(), width=width, modular=plan is not None)
    encoder.term(access.thread)  # a variable of every query: the counterexample's thread
    constraints = [encoder.truth(in_block)]
    violations = []
    for claim in claims:
        if claim.truth:
            violations.append(encoder.truth(claim.printed) != encoder.truth(claim.expected))
        else:
            violations.append(encoder.term(claim.printed) != encoder.term(claim.expected))
        if width is None:
            violations.append(z3.Not(encoder.defined(claim.printed)))
    if width is None:
        constraints += [
            _integer_fact(encoder, fact, number) for number, fact in enumerate(assumptions)
        ]
        constraints += [encoder.defined(claim.expected) for claim in claims]
    else:
        constraints += [encoder.truth(fact) for fact in assumptions]
    constraints += encoder.bounds()
    return constraints, z3.Or(*violations), encoder


def _lemmas_hold(
    access: Access,
    assumptions: list[Expr],
    violations: list[Expr],
    timeout: float,
    rlimit: int | None,
) -> bool:
    """Whether no thread and values of the variables within their bounds, under
    `assumptions`, make a truth value of `violations` hold, or one of them fail to evaluate:
    one query in Z3's integer theory."""
    encoder = Encoder(ctx=z3.Context())
    in_block = logical_and(access.thread >= 0, access.thread < access.register.num_threads)
    constraints = [encoder.truth(in_block)]
    constraints += [_integer_fact(encoder, fact, number) for number, fact in enumerate(assumptions)]
    broken = []
    for violation in violations:
        broken += [encoder.truth(violation), z3.Not(encoder.defined(violation))]
    constraints += encoder.bounds()
    return search(constraints, z3.Or(*broken), timeout, rlimit).verdict == z3.unsat


def _rewritten_search(
    access: Access, claims: list[_Claim], timeout: float, rlimit: int | None
) -> tuple[Any, Encoder] | None:
    """The search of an access's query over its simplified arithmetic (`proofs.rewriting`),
    for a query the solver gave up on; None where a lemma it rests on is not proved.

    1. Every maximal subterm without bitwise operators of the claims and the assumptions is
       rewritten to its `simplify` form; each rewrite is proved equal to its original, both
       defined, under the original assumptions, in integers (so a printed division by zero
       that the simplified form would hide is no proof).
    2. With a bitwise operator, the rewritten query is translated by a
       `proofs.encode.ModularPlan`, whose negative intermediate values wrap harmlessly; the
       operands of its unsigned operators whose intervals reach below zero are proved
       non-negative under the assumptions (original and rewritten), in integers.
    3. The rewritten query, in those bit-vectors or else in integers.

    Each of the three queries is bounded by `timeout` and `rlimit`. By 1 and 2, at every
    point of the original query the rewritten terms have the original values and the
    translation is exact, so an unsat third query proves the claims; a model of it is still
    confirmed on the original claims by the caller.
    """
    assumptions = _relevant_assumptions(access, claims)
    roots = [*assumptions] + [c.printed for c in claims] + [c.expected for c in claims]
    rewritten, pairs = simplified_arithmetic(roots)
    if not pairs:
        return None
    rewrites = [original.ne(simplified) for original, simplified in pairs]
    if not _lemmas_hold(access, assumptions, rewrites, timeout, rlimit):
        return None
    count = len(assumptions)
    new_assumptions = rewritten[:count]
    new_claims = [
        _Claim(claim.name, claim.local_index, printed, expected, claim.truth)
        for claim, printed, expected in zip(
            claims, rewritten[count : count + len(claims)], rewritten[count + len(claims) :]
        )
    ]
    plan = None
    if has_bitwise(rewritten):
        in_block = logical_and(access.thread >= 0, access.thread < access.register.num_threads)
        plan = modular_bitvector_plan([in_block, *rewritten])
    if plan is not None and plan.signed:
        negative = [node < 0 for node in plan.signed]
        both = [*assumptions, *new_assumptions]
        if not _lemmas_hold(access, both, negative, timeout, rlimit):
            return None
    constraints, violation, encoder = _query(access, new_claims, new_assumptions, plan)
    return search(constraints, violation, timeout, rlimit), encoder


# ---------------------------------------------------------------------------------- checking


def validate_access(
    access: Access,
    source: PrintedSource | str | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    rlimit: int | None = DEFAULT_RLIMIT,
) -> ProofResult:
    """Check one access against its IR instruction and, given the kernel's `source`, against
    the text (see the module docstring).

    First the checks that need no solver: the access must belong to a tensor of its instruction
    (`placement`), a write must be made by exactly one replica of each element (its guard), and
    in `source` the proved address must be printed with the tensor's pointer, under its guard
    and mask, with the vector lanes in register order (`proofs.printed_source`). Then the
    address, alignment, mask and count claims against the IR's placement, in Z3.

    The counterexample of a refutation is ``{"claim": "address" | "alignment" | "mask" | "count",
    "t": thread, "i": local index, "variables": {name: value}, "printed": value,
    "expected": value}``: for an address, the bit address of register i from the tensor's
    base by the printed expression (``expr * unit_bits + j * element_bits``; None where it
    cannot be evaluated) and by the specification; for a mask, 1 or 0 for the printed guard and
    for "every element inside"; for a count, 1 or 0 for "j < count" and for "register i is
    inside". A refutation without a solver has ``{"claim": "placement" | "pointer" | "guard" |
    "text" | "lanes" | "mask text", "reason": ...}``. Raises ProofError for a bad `timeout` or
    `rlimit`.
    """
    check_limits(timeout, rlimit)
    started = time.perf_counter()
    problem = _unproved_text(access, source)
    if problem is not None:
        claim, reason = problem
        return ProofResult(False, {"claim": claim, "reason": reason}, reason, elapsed(started))
    claims = _claims(access)
    try:
        query = _query(access, claims)
    except EncodingError as error:
        return unknown(f"an expression is outside the Z3 translation: {error}", started)
    constraints, violation, encoder = query
    found = search(constraints, violation, timeout, rlimit)
    if found.verdict == z3.unknown:
        retried = _rewritten_search(access, claims, timeout, rlimit)
        if retried is not None:
            found, encoder = retried
    if found.verdict == z3.unsat:
        checked = "" if source is None else ", and its text"
        return ProofResult(
            True,
            None,
            f"proved {len(claims)} claims for every thread and every value of the variables"
            f"{checked}",
            elapsed(started),
        )
    if found.verdict != z3.sat:
        return unknown(f"the solver gave up: {found.reason_unknown}", started)
    return _confirmed(access, claims, encoder.values(found.model), started)


def _unproved_text(access: Access, source: PrintedSource | str | None) -> tuple[str, str] | None:
    """(claim, reason) of the first check without a solver that fails, or None."""
    try:
        where = placement(access)
    except ProofError as error:
        return "placement", str(error)
    if where.pointer is not None and access.pointer != where.pointer:
        return "pointer", (
            f"the access is printed with pointer {access.pointer}, its tensor is {where.pointer}"
        )
    owners = check_guard_owners(access)
    if owners is not None:
        return "guard", owners
    if source is None:
        return None
    printed = PrintedSource.of(source) if isinstance(source, str) else source
    lines, missing = check_text(access, printed)
    if missing is not None:
        return "text", missing
    guard = check_guard_text(access, printed, lines)
    if guard is not None:
        return "guard", guard
    mask = check_mask(access, printed, lines)
    if mask is not None:
        return "mask text", mask
    instruction = access.instruction
    if isinstance(instruction, (LoadGlobal, LoadShared)):
        lanes = check_lanes(access, printed, lines, instruction.out.name, loads=True)
    elif isinstance(instruction, StoreGlobal) and instruction.combine is not None:
        lanes = _combined_lanes(access, printed, lines, instruction)
    elif isinstance(instruction, (StoreGlobal, StoreShared)):
        lanes = check_lanes(access, printed, lines, instruction.src.name, loads=False)
    else:
        lanes = None
    if lanes is not None:
        return "lanes", lanes
    return None


def _combined_lanes(
    access: Access, printed: PrintedSource, lines: list[int], instruction: StoreGlobal
) -> str | None:
    """`check_lanes` of a combining store's access: a vector one must call the vector add of
    its type and width."""
    try:
        helper = combine_helper(instruction.src.dtype.name, access.width)
    except ValueError as error:
        return str(error)
    return check_lanes(access, printed, lines, instruction.src.name, False, helper)


def _confirmed(
    access: Access, claims: list[_Claim], values: dict[str, int], started: float
) -> ProofResult:
    """The refutation at the solver's point `values` when a claim fails there on ints, else an
    unknown."""
    thread_value = values[access.thread.name]
    variables = {k: v for k, v in values.items() if k != access.thread.name}
    for claim in claims:
        try:
            expected = int(evaluate(claim.expected, values))
        except ArithmeticError as error:
            return unknown(f"the solver's point does not evaluate: {error}", started)
        try:
            printed: int | None = int(evaluate(claim.printed, values))
        except ArithmeticError:
            printed = None
        if claim.truth and printed is not None:
            printed, expected = int(printed != 0), int(expected != 0)
        if printed != expected:
            what = claim.name if printed is not None else f"{claim.name} (printed: undefined)"
            return ProofResult(
                False,
                {
                    "claim": claim.name,
                    "t": thread_value,
                    "i": claim.local_index,
                    "variables": variables,
                    "printed": printed,
                    "expected": expected,
                },
                f"the {what} claim of register {claim.local_index} fails at thread {thread_value}",
                elapsed(started),
            )
    return unknown("the solver's counterexample did not confirm on ints", started)


@dataclass(frozen=True)
class LoweringValidation:
    """The validation of a kernel: `results`, pairs (access, ProofResult) in the order the
    accesses were printed, and `plan_results`, pairs (claim, ProofResult) for the claims of its
    tensor-core plans (`backend.tensor_core`: ``mma.sync`` fragments, ``ldmatrix`` addresses)."""

    results: tuple[tuple[Access, ProofResult], ...]
    plan_results: tuple[tuple[Claim, ProofResult], ...] = ()

    @property
    def holds(self) -> bool | None:
        """True when every access and plan claim is proved, False when one is refuted, else
        None."""
        return conjunction(result for _, result in self.results + self.plan_results)

    @property
    def failures(self) -> list[tuple[Access | Claim, ProofResult]]:
        """The refuted accesses and plan claims with their results."""
        pairs = self.results + self.plan_results
        return [(item, result) for item, result in pairs if result.holds is False]

    @property
    def unknown(self) -> list[tuple[Access | Claim, ProofResult]]:
        """The accesses and plan claims neither proved nor refuted."""
        pairs = self.results + self.plan_results
        return [(item, result) for item, result in pairs if result.holds is None]


def validate_lowering(
    kernel: Any,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    rlimit: int | None = DEFAULT_RLIMIT,
    plan_rlimit: int | None = None,
) -> LoweringValidation:
    """Validate every access of `kernel` (`validate_access`, against its source) and every
    claim of its tensor-core plans (`proofs.check_equivalent` of the claim's emitted and
    required maps).

    `kernel` is a `backend.CompiledKernel` or a `backend.lower.LoweredKernel` (anything with
    `source`, `accesses` and `plans`), or an iterable of `Access` (then the text is not
    checked: there is none). Each access and each claim is one solver query bounded by
    `timeout` seconds and `rlimit` resource units (a plan's claims by `plan_rlimit` when
    given: they are finite maps, of up to 128 threads times 512 registers for the 16-row
    decode tiles, whose proofs cost more than an access's but always end).
    Raises ProofError for a bad `plan_rlimit` (the other limits are checked per query).
    """
    try:
        check_limits(DEFAULT_TIMEOUT, plan_rlimit)  # the timeout is checked by each query
    except ProofError as error:
        raise ProofError(f"plan_rlimit: {error}") from None
    accesses: Iterable[Access] = getattr(kernel, "accesses", kernel)
    plans = getattr(kernel, "plans", ())
    text = getattr(kernel, "source", None)
    invariants = getattr(kernel, "invariants", ())
    source = None if text is None else PrintedSource.of(text, invariants)
    return LoweringValidation(
        tuple(
            (access, validate_access(access, source, timeout=timeout, rlimit=rlimit))
            for access in accesses
        ),
        tuple(
            (
                claim,
                check_equivalent(
                    claim.emitted,
                    claim.required,
                    timeout,
                    rlimit if plan_rlimit is None else plan_rlimit,
                ),
            )
            for plan in plans
            for claim in plan.claims()
        ),
    )

"""A loop's wgmma dot kept in flight into the next iteration: where the lowering may skip
``wgmma.wait_group 0`` and still give the IR's synchronous `dot`.

A dot that runs as ``wgmma.mma_async`` (`backend.wgmma`) normally waits for its own result.
In a k loop that costs the overlap the tensor cores were built for: each k-tile's
multiplication ends before the next one's loads and barrier begin. `in_flight_dot` finds the
dots whose wait can move, and the lowering then writes, for such a dot in iteration kt: the
wgmma calls accumulating in place into c's registers, ``commit_group`` and
``wait_group 1`` (the dot of iteration kt - 1 is complete in this warpgroup), and
``wait_group 0`` once after the loop. Which results a program can observe is unchanged when
nothing reads or overwrites what a dot still in flight uses:

- **Registers.** The dot is ``assign(c, dot(a, b, c))`` with c defined before the loop, and no
  other instruction of the loop reads or writes c or the dot's result (the assign is then
  the in-place accumulation itself). Both operands come from shared memory: with A from
  registers (the dequantized weights of `ir.examples.wgmma_dequant_matmul`) a dot left in
  flight gave NaNs on the H200 once its loop ran 64 trips (correct at 4 and 8 trips, which
  the compiler may unroll), ptxas warning of nothing. The PTX shows why: A's words are
  registers of the loop body, so the next iteration's dequantization writes them (the same
  PTX registers) before its ``wait_group 1``, while the wgmma may still read them, which the
  PTX ISA leaves undefined. Such a dot stays in flight only in a loop unrolled into whole
  groups of at least two copies (`in_flight_copies`): each copy's A is a set of registers of
  its own, written again only after the wait of the iteration after it.
- **Shared memory.** Every store or copy into a tensor the dot reads, anywhere in the loop
  body, must miss the tiles of every dot instance that can still be in flight there, in any
  warpgroup. Counted in iterations back from the writer's (j = 0 is this iteration's dot, if
  the write comes after it), with d the dot's position in the body, p the write's, and the
  barriers (`sync`) of the body:

  - j = 0 when p > d;
  - j = 1 unless a barrier lies between d and p (every warpgroup has then passed its
    ``wait_group 1`` of this iteration);
  - j = 2 unless a barrier follows d or precedes p;
  - nothing older when the body has a barrier at all (otherwise no dot is kept in flight).

  A release (`CopyBulkRelease`) is checked like a write, at j = 0 when it follows the dot
  (the releasing warp has passed its ``wait_group 1``) and j = 1 when it precedes it; a bulk
  copy into a tensor the body releases then needs no check of its own (it waits for the
  release of the tile's previous contents), and a body whose only writes into the dot's
  tensors are such copies needs no barrier.

  The check is exact, not sampled: a tile origin along one dimension is an integer expression
  of the loop variable alone (other variables make that dimension unusable), periodic in it
  (`period`), so the footprints of the write at kt and of the read at kt - j are compared at
  every residue of one common period.

**Chains.** Within one instruction list, consecutive dots into one accumulator (a k-tile's dot
written as one dot per k16 step, each step's A dequantized just before it) need no wait
between them: `dot_chains` finds them, and the lowering leaves each link running and waits
once after the last, so the instructions between the links run beside the tensor cores.

Dots under a branch or in a loop of more than one trip inside the k loop and bodies with a
second candidate dot are not kept in flight across iterations; neither are
the dots of loops the lowering unrolls, but for one case (`in_flight_copies`): a dot with A
from registers in a loop unrolled into whole groups of copies, each copy's A a set of
registers of its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ir.instructions import (
    Assign,
    CopyAsync,
    CopyBulk,
    CopyBulkRelease,
    Dot,
    ForRange,
    Instruction,
    LoadShared,
    StoreShared,
    Sync,
)
from layout_algebra.symbolic import Expr, as_expr, evaluate, simplify

MAX_PERIOD = 4096
"""The longest period of a tile origin in the loop variable that the check enumerates."""


@dataclass(frozen=True)
class InFlightDot:
    """A dot kept in flight across iterations of `loop`: the dot, the ``assign(c, dot)``
    after it that the in-place accumulation replaces, and the loop. `waits`: the dot's issue
    completes the previous iteration's dots (``wait_group 1``); False for the later links of
    a chain kept in flight (`in_flight_copies`), which wait for nothing."""

    dot: Dot
    assign: Assign
    loop: ForRange
    waits: bool = True


def period(expr: Expr, name: str) -> int | None:
    """A P such that `expr` takes the same value at ``name = v`` and ``name = v + P`` for every
    integer v, or None when none is found (e.g. the variable occurs outside a remainder).
    Exact: ``x % m`` where ``x(v + 1) - x(v)`` simplifies to a constant a has the period
    ``m / gcd(a, m)``; otherwise that of x; any other node the lcm of its operands'."""
    if name not in expr.free_vars():
        return 1
    if expr.op == "var":
        return None
    if expr.op == "%" and expr.args[1].is_const and expr.args[1].value > 0:
        x, modulus = expr.args[0], expr.args[1].value
        step = simplify(x.substitute({name: _named(x, name) + 1}) - x)
        if step.is_const:
            # x moves by a constant a per step: x % m repeats after m / gcd(a, m) steps.
            return modulus // math.gcd(step.value, modulus)
        return period(x, name)
    found = 1
    for arg in expr.args:
        part = period(arg, name)
        if part is None:
            return None
        found = math.lcm(found, part)
        if found > MAX_PERIOD:
            return None
    return found


def _named(expr: Expr, name: str) -> Expr:
    return next(node for node in expr.variables() if node.name == name)


def _single_trip(loop: ForRange) -> bool:
    start, stop = loop.start, loop.stop
    return start.is_const and stop.is_const and 0 < stop.value - start.value <= loop.step


Position = tuple[int, ...]
"""Where an instruction is in a loop body: its index in the body, then in each nested body
down to it. Positions compare in program order within one iteration."""


def _find_dot(
    body: Sequence[Instruction], candidates: Mapping[int, tuple[LoadShared | None, LoadShared]]
) -> tuple[Position, Sequence[Instruction], int, dict[str, Expr]] | None:
    """The loop body's only candidate dot: (its position, the list holding it, its index
    there, the values of the single-trip loops around it), or None when there is not exactly
    one or it sits under a branch or a loop of more than one trip."""
    found: list[tuple[Position, Sequence[Instruction], int, dict[str, Expr]] | None] = []

    def walk(items: Sequence[Instruction], path: Position, values: dict[str, Expr] | None) -> None:
        for index, instruction in enumerate(items):
            position = (*path, index)
            if isinstance(instruction, Dot) and id(instruction) in candidates:
                found.append(None if values is None else (position, items, index, values))
            inner = None
            if isinstance(instruction, ForRange) and values is not None:
                if _single_trip(instruction):
                    inner = {**values, instruction.var.name: instruction.start}
            for nested in instruction.bodies():
                walk(nested, position, inner)

    walk(body, (), {})
    if len(found) != 1:
        return None
    return found[0]


def _lists(body: Sequence[Instruction]) -> list[Sequence[Instruction]]:
    lists = [body]
    for instruction in body:
        for inner in instruction.bodies():
            lists.extend(_lists(inner))
    return lists


def _all(body: Sequence[Instruction], path: Position = ()) -> list[tuple[Position, Instruction]]:
    """Every instruction of a loop body, nested ones too, with its position."""
    found: list[tuple[Position, Instruction]] = []
    for index, instruction in enumerate(body):
        position = (*path, index)
        found.append((position, instruction))
        for nested in instruction.bodies():
            found.extend(_all(nested, position))
    return found


def in_flight_offsets(
    dot_position: Position, write_position: Position, barriers: Sequence[Position]
) -> list[int]:
    """The iterations back (0: this one) whose dot instances may still be in flight, in some
    warpgroup, at a write at `write_position` of the body; `barriers` are the positions of
    the body's own barriers (see the module docstring)."""
    offsets = []
    if write_position > dot_position:
        offsets.append(0)
    if not any(dot_position < b < write_position for b in barriers):
        offsets.append(1)
    if not any(b > dot_position or b < write_position for b in barriers):
        offsets.append(2)
    return offsets


def _footprint(origin: Sequence[Expr], shape: Sequence[int], rank: int) -> list[tuple[Expr, int]]:
    """(origin, extent) per dimension of a tile of a rank-`rank` tensor; a tile of lower rank
    covers the trailing dimensions."""
    extents = (1,) * (rank - len(shape)) + tuple(shape)
    return [(as_expr(o), extent) for o, extent in zip(origin, extents)]


def tiles_disjoint(
    write: Sequence[tuple[Expr, int]],
    read: Sequence[tuple[Expr, int]],
    loop_var: str,
    back: int,
    trips: range | None = None,
) -> bool:
    """Whether the written tile at iteration value v and the read tile at v - `back` (on the
    loop variable's values, the step included in `back`) are disjoint for every integer v:
    at each residue of a common period, some dimension whose origins depend on the loop
    variable alone separates their intervals. With `trips`, the loop's values when known
    (a constant range, at most `MAX_PERIOD` of them), a dimension without a period counts
    too, compared at each value v of the range whose v - `back` is one as well (the origins
    of a short loop may be simplified by its range, ``k % 4`` to ``k`` for k below 4)."""
    usable = []
    aperiodic = []
    for (w, w_extent), (r, r_extent) in zip(write, read):
        if not (w.free_vars() | r.free_vars()) <= {loop_var}:
            continue
        shifted = r
        if back and loop_var in r.free_vars():
            shifted = r.substitute({loop_var: _named(r, loop_var) - back})
        periods = [period(w, loop_var), period(shifted, loop_var)]
        if None in periods:
            aperiodic.append((w, w_extent, shifted, r_extent))
            continue
        usable.append((w, w_extent, shifted, r_extent, math.lcm(*periods)))  # type: ignore[arg-type]
    if trips is not None and len(trips) <= MAX_PERIOD and aperiodic:
        dimensions = [entry[:4] for entry in usable] + aperiodic
        return all(
            any(
                _apart(evaluate(w, {loop_var: v}), we, evaluate(r, {loop_var: v}), re)
                for w, we, r, re in dimensions
            )
            for v in trips
            if v - back in trips
        )
    if not usable:
        return False
    common = math.lcm(*(entry[4] for entry in usable))
    if common > MAX_PERIOD:
        return False
    for value in range(common):
        env = {loop_var: value}
        if not any(
            _apart(evaluate(w, env), w_extent, evaluate(r, env), r_extent)
            for w, w_extent, r, r_extent, _ in usable
        ):
            return False
    return True


def _apart(a: int, a_extent: int, b: int, b_extent: int) -> bool:
    return a + a_extent <= b or b + b_extent <= a


def released_in_flight(dot_position: Position, release_position: Position) -> list[int]:
    """The iterations back whose dot instances may still be in flight at a release at
    `release_position` of the body: a warp releases after its own ``wait_group 1`` of this
    iteration when the release follows the dot (so only this iteration's dot, j = 0, may
    run), before it otherwise (j = 1); the tile is free once every releasing warp has
    arrived, so what each warp waited for is complete in every warpgroup."""
    return [0] if release_position > dot_position else [1]


def in_flight_dot(
    loop: ForRange, candidates: Mapping[int, tuple[LoadShared | None, LoadShared]]
) -> InFlightDot | None:
    """The dot of `loop`, written as a loop with its body once, that may stay in flight into
    the next iteration (see the module docstring), or None. `candidates` are the wgmma
    candidates (`shared_operand_dots`)."""
    if loop.unroll != 1:
        return None
    return _qualifying_dot(loop, candidates, register_a=False)


def in_flight_copies(
    loop: ForRange,
    copies: Sequence[Sequence[Instruction]],
    candidates: Mapping[int, tuple[LoadShared | None, LoadShared]],
    uses: Mapping[int, int] | None = None,
) -> list[InFlightDot] | None:
    """For a loop written with its body unrolled into `copies` (each an iteration, the loop
    running whole groups of them: no remainder), whose dot takes A from registers: the
    `InFlightDot` of each dot of a copy when the loop's dot may stay in flight into the next
    iteration (the module docstring's rules, on the body of one iteration), else None. Each
    copy's A is its own set of registers, so the next iteration never writes the registers a
    dot in flight reads: those of the copy before it are written again only after the wait of
    the iteration between. `candidates` are those of the body as written (its loads, not the
    copies', whose offsets hold k + j in place of k); a copy's dot is found by its id there
    (a dot has no scalars, so a copy keeps the body's own).

    With `uses` (`backend.wgmma.operand_uses`), the body's dot may also be a chain of dots
    (`dot_chains`) at the top of the body, all with A from registers: the chain stays in
    flight as one, from its first link to the first link of the next iteration, whose
    ``wait_group 1`` completes it (every group but that link's own); the later links wait for
    nothing. The rules then take the first link's position and every link's reads."""
    if len(copies) < 2:
        return None
    flights = _qualifying_links(loop, candidates, uses)
    if flights is None or any(candidates[id(f.dot)][0] is not None for f in flights):
        return None
    for body in copies:
        for flight in flights:
            index = next((i for i, item in enumerate(body) if item is flight.dot), None)
            if index is None or index + 1 >= len(body) or body[index + 1] is not flight.assign:
                return None
    return flights


def _qualifying_dot(
    loop: ForRange,
    candidates: Mapping[int, tuple[LoadShared | None, LoadShared]],
    register_a: bool,
) -> InFlightDot | None:
    """The checks of `in_flight_dot` on one iteration's body; a dot with A from registers
    qualifies only with `register_a` (and an A that no `assign` of the loop writes over)."""
    located = _find_dot(loop.body, candidates)
    if located is None:
        return None
    a_load = candidates[id(located[1][located[2]])][0]
    if a_load is None and not register_a:
        return None
    flights = _checked_links(loop, candidates, [located])
    return None if flights is None else flights[0]


def _qualifying_links(
    loop: ForRange,
    candidates: Mapping[int, tuple[LoadShared | None, LoadShared]],
    uses: Mapping[int, int] | None,
) -> list[InFlightDot] | None:
    """The body's one candidate dot, or with `uses` its one chain of dots covering every
    candidate of the body, checked by the rules (`_checked_links`)."""
    body = loop.body
    located = _find_dot(body, candidates)
    if located is not None:
        return _checked_links(loop, candidates, [located])
    if uses is None:
        return None
    links = dot_chains(body, candidates, uses)
    dots = [item for _, item in _all(body) if isinstance(item, Dot) and id(item) in candidates]
    if not links or {id(dot) for dot in dots} != set(links):
        return None
    chained = [((i,), body, i, {}) for i, item in enumerate(body) if id(item) in links]
    return _checked_links(loop, candidates, chained)


def _checked_links(
    loop: ForRange,
    candidates: Mapping[int, tuple[LoadShared | None, LoadShared]],
    links: list[tuple[Position, Sequence[Instruction], int, dict[str, Expr]]],
) -> list[InFlightDot] | None:
    """`InFlightDot`s of the located dots `links` (one dot, or the links of a chain in order)
    when they may stay in flight into the next iteration, from the first's position (see the
    module docstring), else None: each followed by its ``assign(c, dot)``, nothing else in
    the body touching c or a result, no ``assign`` over an A from registers, the body with a
    barrier of its own or a release (`CopyBulkRelease`), and every store, copy or release of
    a tensor a link reads missing the tiles of the instances that may still run (a bulk copy
    into a released tensor waits for its release instead)."""
    body = loop.body
    dots: list[Dot] = []
    assigns: list[Assign] = []
    for _, items, index, _ in links:
        dot = items[index]
        assert isinstance(dot, Dot)
        if index + 1 >= len(items):
            return None
        assign = items[index + 1]
        if not (isinstance(assign, Assign) and assign.dst is dot.c and assign.src is dot.out):
            return None
        dots.append(dot)
        assigns.append(assign)
    accumulator = dots[0].c
    if any(dot.c is not accumulator for dot in dots):
        return None
    mine = {id(item) for item in (*dots, *assigns)}
    results = {id(dot.out) for dot in dots}
    register_as = {id(dot.a) for dot in dots if candidates[id(dot)][0] is None}
    everything = _all(body)
    # Tensors whose tiles the body releases (`CopyBulkRelease`): a bulk copy into one waits
    # for the release of the tile's previous contents, which the rule for releases places
    # after the dots that read them are complete.
    released = {
        instruction.dst.name
        for _, instruction in everything
        if isinstance(instruction, CopyBulkRelease)
    }
    for _, instruction in everything:
        if id(instruction) in mine:
            continue
        touched = (*instruction.operands(), *instruction.results())
        if any(tensor is accumulator or id(tensor) in results for tensor in touched):
            return None
        if isinstance(instruction, Assign) and id(instruction.dst) in register_as:
            return None  # A written over in place: one set of registers for every iteration
    # Barriers of the body itself: one under a branch or in an inner loop may not run.
    barriers = [(index,) for index, instruction in enumerate(body) if isinstance(instruction, Sync)]
    if not barriers and not released:
        return None
    name = loop.var.name
    trips = None
    if loop.start.is_const and loop.stop.is_const:
        trips = range(loop.start.value, loop.stop.value, loop.step)
    reads: dict[str, list[list[tuple[Expr, int]]]] = {}
    for dot, (_, _, _, values) in zip(dots, links):
        a_load, b_load = candidates[id(dot)]
        for load in (b_load,) if a_load is None else (a_load, b_load):
            origin = [simplify(as_expr(o).substitute(values)) for o in load.offsets]
            reads.setdefault(load.src.name, []).append(
                _footprint(origin, load.out.layout.shape, len(load.src.layout.shape))
            )
    dot_position = links[0][0]
    for position, instruction in everything:
        if isinstance(instruction, StoreShared):
            tensor, origin, shape = (
                instruction.dst,
                instruction.offsets,
                instruction.src.layout.shape,
            )
        elif isinstance(instruction, (CopyAsync, CopyBulk)):
            tensor, origin, shape = instruction.dst, instruction.dst_offsets, instruction.shape
        elif isinstance(instruction, CopyBulkRelease):
            tensor, origin, shape = instruction.dst, instruction.offsets, instruction.shape
        else:
            continue
        if tensor.name not in reads:
            continue
        if isinstance(instruction, CopyBulk) and tensor.name in released:
            continue  # it waits for the release of the tile's previous contents
        if any(name_ in as_expr(o).free_vars() for o in origin for name_ in _inner_vars(body)):
            return None
        if isinstance(instruction, CopyBulkRelease):
            offsets = released_in_flight(dot_position, position)
        elif barriers:
            offsets = in_flight_offsets(dot_position, position, barriers)
        else:
            return None  # a write ordered by no barrier of the body
        write = _footprint(origin, shape, len(tensor.layout.shape))
        # A chain's instances complete at the first link of the next iteration: as a dot at
        # that position (a write between the links meets the earlier links' reads at j = 0).
        for back in offsets:
            for read in reads[tensor.name]:
                if not tiles_disjoint(write, read, name, back * loop.step, trips):
                    return None
    return [
        InFlightDot(dot, assign, loop, index == 0)
        for index, (dot, assign) in enumerate(zip(dots, assigns))
    ]


def _inner_vars(body: Sequence[Instruction]) -> set[str]:
    """The variables of loops nested in the body (a write whose tile moves with one is not
    checked per inner iteration: no dot stays in flight)."""
    return {
        instruction.var.name
        for items in _lists(body)
        for instruction in items
        if isinstance(instruction, ForRange)
    }


@dataclass(frozen=True)
class ChainedDot:
    """A dot of a chain (`dot_chains`): the dot, the ``assign(c, dot)`` its in-place
    accumulation replaces, and whether it is the chain's last (the one that waits)."""

    dot: Dot
    assign: Assign
    last: bool


def dot_chains(
    body: Sequence[Instruction],
    candidates: Mapping[int, tuple[LoadShared | None, LoadShared]],
    uses: Mapping[int, int],
) -> dict[int, ChainedDot]:
    """The dots of one instruction list that run as one chain of wgmma groups: ``id(dot) ->
    ChainedDot``. A chain is two or more candidate dots (`candidates`) of the list, each
    ``assign(c, dot(a_i, b_i, c))`` into the same c, its result read by that assign alone
    (`uses`, from `backend.wgmma.operand_uses`). Between one link's assign and the next dot,
    no instruction may have a body (a loop or a branch), read or write c, write (``assign``)
    the A registers of an earlier link, or store or copy into a shared tensor an earlier
    link reads. The lowering then issues each link's wgmma calls accumulating into c's
    registers in place and waits only after the last (``wait_group 0``): the instructions
    between two links (the next k step's dequantization, say) run while the tensor cores
    work on the links before. That keeps the IR's synchronous `dot`: the ``m64nNk16`` calls
    of one shape accumulate in issue order into the same registers without a wait (the PTX
    ISA's one exception to waiting before reusing them), nothing reads c or the elided
    results before the wait, and no operand an unfinished call reads changes. Each link's A
    are registers of their own: the list is written once, so no later link writes them."""
    found: dict[int, ChainedDot] = {}
    chain: list[tuple[Dot, Assign]] = []
    # What the open chain's links read, which the instructions after them must leave alone:
    # A registers (not to be written) and shared tensors (not to be stored into).
    a_registers: set[int] = set()
    shared: set[str] = set()

    def close() -> None:
        if len(chain) >= 2:
            for index, (dot, assign) in enumerate(chain):
                found[id(dot)] = ChainedDot(dot, assign, index == len(chain) - 1)
        chain.clear()
        a_registers.clear()
        shared.clear()

    index = 0
    while index < len(body):
        instruction = body[index]
        link = _chain_link(body, index, candidates, uses)
        if link is not None and (not chain or chain[0][0].c is link[0].c):
            dot, assign = link
            chain.append(link)
            a_registers.add(id(dot.a))
            shared.update(load.src.name for load in candidates[id(dot)] if load is not None)
            index += 2
            continue
        if link is not None:
            close()
            continue  # the dot opens a chain of its own c
        if chain and _breaks_chain(instruction, chain[0][0].c, a_registers, shared):
            close()
        index += 1
    close()
    return found


def _chain_link(
    body: Sequence[Instruction],
    index: int,
    candidates: Mapping[int, tuple[LoadShared | None, LoadShared]],
    uses: Mapping[int, int],
) -> tuple[Dot, Assign] | None:
    """``(dot, assign)`` when `body[index]` is a candidate dot followed by ``assign(c, dot)``
    whose result nothing else reads."""
    dot = body[index]
    if not isinstance(dot, Dot) or id(dot) not in candidates or index + 1 >= len(body):
        return None
    assign = body[index + 1]
    if not (isinstance(assign, Assign) and assign.dst is dot.c and assign.src is dot.out):
        return None
    if uses.get(id(dot.out), 0) != 1:
        return None
    return dot, assign


def _breaks_chain(
    instruction: Instruction, c: object, a_registers: set[int], shared: set[str]
) -> bool:
    """Whether `instruction`, after a chain's links, touches what an unfinished link uses: c
    at all, an A operand by writing it, a shared operand by storing or copying into it."""
    if instruction.bodies():
        return True
    if any(tensor is c for tensor in (*instruction.operands(), *instruction.results())):
        return True
    if isinstance(instruction, Assign) and id(instruction.dst) in a_registers:
        return True
    if isinstance(instruction, (StoreShared, CopyAsync, CopyBulk, CopyBulkRelease)):
        return instruction.dst.name in shared
    return False

"""The dataflow that places the async-proxy fences of a kernel with wgmma dots
(`backend.proxy_fences`): exact states of small bodies, the loop head's fixed point against
every run of the loops and branches (brute force), the kernels' fences, and the kernels' C
text read path by path for an unfenced write before a wgmma."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.lower.driver import lower
from backend.proxy_fences import ProxyWrites
from backend.wgmma import PROXY_FENCE
from ir import dtypes, instructions
from ir.builder import ProgramBuilder
from ir.examples.matmul import matmul
from ir.examples.register_dequant_matmul import DequantConfig, register_dequant_matmul
from ir.examples.staged_dequant_matmul import StagedDequantConfig, staged_dequant_matmul
from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig, wgmma_dequant_matmul
from ir.instructions import Instruction
from layout_algebra import GlobalLayout, shared_row_major
from layout_algebra.symbolic import const, var

WRITE = instructions.CopyAsyncWait(0)  # completes the thread's cp.async writes
QUIET = instructions.CopyAsyncCommit()  # writes nothing
BARRIER = instructions.Sync()


def _loop(body: Sequence[Instruction]) -> instructions.ForRange:
    return instructions.ForRange(var("k", 0, None), const(0), const(4), 1, tuple(body))


def _branch(body: Sequence[Instruction]) -> instructions.If:
    return instructions.If(var("p", 0, 1), tuple(body))


@pytest.mark.parametrize(
    ("body", "entry", "after"),
    [
        ([], True, True),
        ([], False, False),
        ([WRITE], False, True),
        ([WRITE, BARRIER], False, False),
        ([BARRIER, QUIET], True, False),
        ([_loop([WRITE])], False, True),  # the body may run
        ([_loop([BARRIER])], True, True),  # or not at all
        ([_loop([BARRIER, WRITE, BARRIER])], False, False),
        ([_loop([WRITE, BARRIER, QUIET])], False, False),
        ([_branch([WRITE])], False, True),
        ([_branch([BARRIER])], True, True),
        ([WRITE, _branch([BARRIER]), BARRIER], False, False),
    ],
)
def test_the_state_after_a_body(body, entry, after) -> None:
    assert ProxyWrites().after(body, entry) is after


def test_a_loop_s_head_joins_its_entry_with_its_body_s_end() -> None:
    """The decode ring's k-tile: its copies' wait, the fenced barrier, the dots, the closing
    barrier, then the next copies issued: pending at the head (the copies issued at the end
    are waited for at the top)."""
    ring = _loop([WRITE, BARRIER, QUIET, BARRIER, WRITE])
    assert ProxyWrites().loop_head(ring, False) is True
    closed = _loop([WRITE, BARRIER, QUIET, BARRIER])
    assert ProxyWrites().loop_head(closed, False) is False
    assert ProxyWrites().loop_head(closed, True) is True


def test_bulk_copies_written_as_tma_write_nothing_generic() -> None:
    """A bulk copy into a tensor whose copies are TMA's is an async-proxy write, and its
    wait neither writes nor fences; into any other tensor, the copy is the threads' own and
    its wait a barrier."""
    with ProgramBuilder("bulk", 128) as b:
        a = b.array_param("a", dtypes.f16)
        view = b.global_view(a, dtypes.f16, GlobalLayout((64, 64), (64, 1)))
        tile = b.shared_tensor(dtypes.f16, shared_row_major(64, 64))
        b.copy_bulk(tile, view, [0, 0], [0, 0], (64, 64))
        b.copy_bulk_wait(tile, [0, 0], (64, 64))
    copy, wait = [i for i in b.program().walk() if i.op.startswith("copy_bulk")]
    threads, tma = ProxyWrites(), ProxyWrites(frozenset({tile.name}))
    assert threads.writes(copy) and not tma.writes(copy)
    assert not threads.writes(wait) and not tma.writes(wait)
    assert threads.barrier(wait) and not tma.barrier(wait)
    assert threads.after([copy, wait], False) is False and tma.after([copy, wait], False) is False
    assert threads.after([copy], False) is True and tma.after([copy], False) is False


def test_a_mark_is_kept_only_with_a_write_pending() -> None:
    account = ProxyWrites(pending=False)
    assert not account.fence()
    account.note(WRITE)
    assert account.fence() and not account.pending
    account.note(QUIET)
    assert not account.fence()
    every = ProxyWrites(every_mark=True, pending=False)
    assert every.fence() and every.fence()


def test_a_program_with_thread_groups_keeps_every_mark() -> None:
    with ProgramBuilder("grouped", 256) as b:
        with b.thread_group(0, 128):
            b.sync()
    assert ProxyWrites.of(b.program(), frozenset()).every_mark
    assert not ProxyWrites.of(matmul(), frozenset()).every_mark


# A body of a small language: each item a write, a barrier, a quiet instruction, a loop or an
# if around a body of its own.
_bodies = st.recursive(
    st.lists(st.sampled_from([WRITE, BARRIER, QUIET]), max_size=4),
    lambda inner: st.lists(
        st.one_of(
            st.sampled_from([WRITE, BARRIER, QUIET]),
            inner.map(_loop),
            inner.map(_branch),
        ),
        max_size=4,
    ),
    max_leaves=12,
)


def _runs(body: Sequence[Instruction], pending: bool) -> Iterator[bool]:
    """The state at the end of each run of `body` from `pending`: every loop run 0 to 2
    times, every if taken or not (a state that is one bit settles after one iteration)."""
    if not body:
        yield pending
        return
    first, rest = body[0], body[1:]
    if isinstance(first, instructions.ForRange):
        starts = {pending}
        for _ in range(2):
            starts |= {end for start in starts for end in _runs(first.body, start)}
    elif isinstance(first, instructions.If):
        starts = {pending} | set(_runs(first.body, pending))
    elif first is BARRIER:
        starts = {False}
    else:
        starts = {True if first is WRITE else pending}
    for start in starts:
        yield from _runs(rest, start)


@settings(max_examples=150, deadline=None)
@given(_bodies, st.booleans())
def test_the_state_after_a_body_is_the_join_of_its_runs(body, entry) -> None:
    """Differential: the dataflow's state equals the join (any pending) over every run."""
    assert ProxyWrites().after(body, entry) is any(_runs(body, entry))


def _fences_before(lines: list[str], statement: str) -> list[bool]:
    return [lines[i - 1] == PROXY_FENCE for i, line in enumerate(lines) if line == statement]


def test_the_decode_ring_fences_once_a_k_tile() -> None:
    """The warpgroup dot over the barrier ring (cp.async into the stage): each copy of the
    k-tile fences before the barrier after its copies' wait, and nowhere else (not the
    closing barrier, not the chain's first link)."""
    config = DequantConfig(
        warps=4, units_k=8, unroll=2, late_scale=True, weights_as_a=True, units_m=2,
        stages=2, split=2, warpgroup_dot=True, depth=1, magic_bias=False,
    )  # fmt: skip
    program = register_dequant_matmul(dtypes.i4, 128, config)
    source = lower(program, "sm_90a", constants={"n": 57344, "k": 8192}).source
    lines = [line.strip() for line in source.split('extern "C"')[1].splitlines()]
    loop = [line for line in itertools.dropwhile(lambda x: not x.startswith("for ("), lines)]
    fences = [i for i, line in enumerate(loop) if line == PROXY_FENCE]
    assert len(fences) == config.unroll
    for i in fences:  # after the wait (and the barrier's comment), before the barrier
        assert loop[i - 2].startswith("la_cp_async_wait<") and loop[i + 1] == "__syncthreads();"
    assert not any(_fences_before(loop, "la_wgmma_fence();"))


# A check of the emitted code, independent of the dataflow: the kernel's C text read as
# blocks (a loop runs its body any number of times, an if its branch or not), each thread in
# a state (pending: it wrote shared memory generically since its last proxy fence; exposed: a
# barrier passed while it was pending, so other threads may read that write unfenced), and
# every wgmma issue (`la_wgmma_fence`) required to find neither in every state that reaches it.
_WRITES = ("la_cp_async_16(", "la_cp_async_zfill", "la_cp_async_wait<", "// store_shared(")
_FENCES = (PROXY_FENCE, "la_proxy_fence_shared();")


def _blocks(lines: list[str]) -> list[object]:
    """The kernel body's lines as a tree: a line, or (kind, children) for a block, kind one
    of "plain", "loop", "if", or ("if", then, else) for an if with an else."""
    root: list[object] = []
    stack: list[list[object]] = [root]
    for line in lines:
        if line == "}":
            stack.pop()
        elif line == "} else {":
            stack.pop()
            _, then = stack[-1].pop()
            branch: list[object] = []
            stack[-1].append(("else", then, branch))
            stack.append(branch)
        elif line.endswith("{"):
            kind = "plain"
            if line.startswith(("for (", "while (", "do ")):
                kind = "loop"
            elif line.startswith("if ("):
                kind = "if"
            children: list[object] = []
            stack[-1].append((kind, children))
            stack.append(children)
        else:
            stack[-1].append(line)
    return root


def _run(tree: list[object], states: frozenset, dots: list[bool]) -> frozenset:
    for item in tree:
        if isinstance(item, str):
            if item.startswith(_WRITES):
                states = frozenset((True, exposed) for _, exposed in states)
            elif item in _FENCES:
                states = frozenset((False, exposed) for _, exposed in states)
            elif item == "__syncthreads();":
                states = frozenset((pending, pending) for pending, _ in states)
            elif item == "la_wgmma_fence();":
                dots.append(all(not (p or e) for p, e in states))
        elif item[0] == "else":
            states = _run(item[1], states, dots) | _run(item[2], states, dots)
        elif item[0] == "if":
            states = states | _run(item[1], states, dots)
        elif item[0] == "loop":
            while True:
                grown = states | _run(item[1], states, dots)
                if grown == states:
                    break
                states = grown
        else:
            states = _run(item[1], states, dots)
    return states


def _dots_safe(source: str) -> list[bool]:
    """For each wgmma issue of `source`'s kernel, in order of the text (loops visited until
    their states settle, so a dot may be listed more than once): whether every state that
    reaches it has its writes fenced."""
    body = source.split('extern "C"')[1]
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    dots: list[bool] = []
    _run(_blocks(lines[1:]), frozenset({(False, False)}), dots)
    return dots


def _fenced_kernels() -> Iterator[tuple[str, str]]:
    base = DequantConfig(
        warps=4, units_k=8, unroll=2, late_scale=True, weights_as_a=True, units_m=2,
        warpgroup_dot=True, depth=1, magic_bias=False,
    )  # fmt: skip
    wide = {"n": 57344, "k": 8192}
    for weight, extra in [
        (dtypes.i4, {"stages": 2, "split": 2}),
        (dtypes.i4, {"stages": 3, "stream_k": 396, "min_blocks_per_sm": 3}),
        (dtypes.i2, {"stages": 4, "unroll": 4}),
    ]:
        config = replace(base, **extra)
        program = register_dequant_matmul(weight, 128, config)
        yield f"decode {weight} {extra}", lower(program, "sm_90a", constants=wide).source
    tile = {"num_threads": 256, "block_m": 128, "block_n": 128, "block_k": 64, "stages": 3}
    yield "matmul, 2 warpgroups", lower(matmul(wgmma=True, **tile), "sm_90a").source
    layer = {"n": 12288, "k": 4096}
    staged = staged_dequant_matmul(dtypes.i4, 128, StagedDequantConfig())
    yield "staged", lower(staged, "sm_90a", constants=layer).source
    prefill = wgmma_dequant_matmul(dtypes.i4, 128, WgmmaDequantConfig())
    yield "prefill, no TMA", lower(prefill, "sm_90a", constants=layer, tma=False).source


def test_every_wgmma_of_the_kernels_reads_fenced_writes() -> None:
    """Differential: in each kernel whose threads write what its wgmma dots read, the C text
    read path by path finds every write fenced before each dot (and before the barrier that
    hands it to other threads); with the kernel's first fence taken out, it does not."""
    for name, source in _fenced_kernels():
        dots = _dots_safe(source)
        assert dots and all(dots), name
        lines = source.splitlines()
        kernel = next(i for i, line in enumerate(lines) if line.startswith('extern "C"'))
        first = next(
            i for i, line in enumerate(lines) if i > kernel and line.strip() == PROXY_FENCE
        )
        assert not all(_dots_safe("\n".join(lines[:first] + lines[first + 1 :]))), name

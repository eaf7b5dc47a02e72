"""A program as a link of a chain of kernels: `ProgramBuilder.programmatic_launch`,
`wait_prior_grid` (`ir.instructions.WaitPriorGrid`) and `launch_dependents`
(`ir.instructions.LaunchDependents`).

Exact: the builder's and the verifier's refusals with their messages, the printed header line
and instructions, `ir.specialize` keeping the attribute, the lowered source per architecture
(``griddepcontrol`` from sm_90 on, empty helpers before, the trigger at the kernel's entry or
where the program signals, never both) and the launch flag of the compiled kernel. Property:
waiting for the prior grid and signalling the next change nothing `ir.run_reference` computes
(a launch run alone has nothing to wait for and nothing to start), on random inputs.
Launch records of a fake driver are in tests/backend/test_launch.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend import compile
from backend.lower import lower
from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.errors import VerificationError
from ir.instructions import LaunchDependents, WaitPriorGrid
from ir.program import Program
from ir.specialize import specialize
from ir.verifier import verify
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial


def chain_link(chained: bool = True, wait: bool = True, signal: bool = False) -> Program:
    """y = 2 x over 32 elements a block; with `chained`, x is read before the wait; with
    `signal`, the next link may start after the add."""
    with ProgramBuilder("link", 32) as b:
        if chained:
            b.programmatic_launch()
        n = b.int_param("n", constant=True)
        x = b.array_param("x", dtypes.f32)
        y = b.array_param("y", dtypes.f32)
        view = GlobalLayout((n,), (1,))
        loaded = b.load_global(b.global_view(x, dtypes.f32, view), [b.block_x * 32], spatial(32))
        if chained and wait:
            b.wait_prior_grid()
        out = b.global_view(y, dtypes.f32, view)
        doubled = b.add(loaded, loaded)
        if signal:
            b.launch_dependents()
        b.store_global(out, doubled, [b.block_x * 32])
    return b.program()


LINK_TEXT = """\
program link(n: int constant, x: f32*, y: f32*) num_threads=32
programmatic_launch
  g0 = global_view(x, f32, GlobalLayout(shape=(n,), strides=(1,)))
  r0: f32[32] spatial(32) = load_global(g0, [block_x * 32])
  wait_prior_grid()
  g1 = global_view(y, f32, GlobalLayout(shape=(n,), strides=(1,)))
  r1: f32[32] spatial(32) = add(r0, r0)
  store_global(g1, r1, [block_x * 32])"""


def test_a_link_verifies_and_prints_its_header_line_and_wait() -> None:
    program = chain_link()
    assert verify(program) is program and program.programmatic_launch
    assert str(program) == LINK_TEXT
    assert "programmatic_launch" not in str(chain_link(chained=False))


@pytest.mark.parametrize("op", ["wait_prior_grid", "launch_dependents"])
def test_builder_refuses_a_link_instruction_outside_a_link_twice_or_nested(op: str) -> None:
    with ProgramBuilder("plain", 32) as b:
        with pytest.raises(
            VerificationError,
            match=rf"{op} in plain, which does not declare programmatic_launch; "
            r"call programmatic_launch\(\) first",
        ):
            getattr(b, op)()
    with ProgramBuilder("twice", 32) as b:
        b.programmatic_launch()
        with pytest.raises(VerificationError, match="programmatic_launch declared twice: twice"):
            b.programmatic_launch()
        getattr(b, op)()
        with pytest.raises(VerificationError, match=f"{op} called twice in twice"):
            getattr(b, op)()
    with ProgramBuilder("nested", 32) as b:
        b.programmatic_launch()
        with (
            b.if_(b.block_x.eq(0)),
            pytest.raises(
                VerificationError,
                match=f"{op} inside a for_range, if_ or thread_group body of nested",
            ),
        ):
            getattr(b, op)()


def test_verifier_refuses_a_link_without_its_one_wait_and_a_wait_without_a_link() -> None:
    link = chain_link()
    waitless = chain_link(wait=False)
    with pytest.raises(
        VerificationError,
        match=r"link declares programmatic_launch and waits for the prior grid 0 times "
        r"\(0 at its top level\); expected once, at its top level",
    ):
        verify(waitless)
    with pytest.raises(
        VerificationError,
        match="link waits for the prior grid but does not declare programmatic_launch",
    ):
        verify(dataclasses.replace(link, programmatic_launch=False))
    doubled = dataclasses.replace(link, body=(*link.body, WaitPriorGrid()))
    with pytest.raises(VerificationError, match="waits for the prior grid 2 times"):
        verify(doubled)
    with pytest.raises(VerificationError, match="programmatic_launch of link is 1; expected"):
        verify(dataclasses.replace(link, programmatic_launch=1))


def test_a_signalling_link_prints_its_signal_and_the_verifier_checks_it() -> None:
    link = chain_link(signal=True)
    assert verify(link) is link
    assert str(link) == LINK_TEXT.replace(
        "  r1: f32[32] spatial(32) = add(r0, r0)\n",
        "  r1: f32[32] spatial(32) = add(r0, r0)\n  launch_dependents()\n",
    )
    with pytest.raises(
        VerificationError,
        match="link launches dependents but does not declare programmatic_launch",
    ):
        verify(
            dataclasses.replace(
                link,
                programmatic_launch=False,
                body=tuple(i for i in link.body if not isinstance(i, WaitPriorGrid)),
            )
        )
    with pytest.raises(
        VerificationError,
        match=r"link launches dependents 2 times \(2 at its top level\); expected at most once",
    ):
        verify(dataclasses.replace(link, body=(*link.body, LaunchDependents())))


def test_specialize_keeps_the_link() -> None:
    special = specialize(chain_link(), {"n": 64})
    assert special.programmatic_launch
    assert sum(isinstance(i, WaitPriorGrid) for i in special.body) == 1


@pytest.mark.parametrize(
    ("arch", "griddepcontrol"),
    [("sm_90a", True), ("sm_100", True), ("sm_80", False), (None, False)],
)
def test_lowering_triggers_at_entry_and_waits_where_the_program_does(
    arch: str | None, griddepcontrol: bool
) -> None:
    source = lower(chain_link(), arch, constants={"n": 64}).source
    assert ("griddepcontrol.wait;" in source) is griddepcontrol
    assert ("griddepcontrol.launch_dependents;" in source) is griddepcontrol
    body = source[source.index('extern "C" __global__') :]
    trigger, wait = body.index("la_launch_dependents();"), body.index("la_wait_prior_grid();")
    first_load, store = body.index("load_global(g0"), body.index("store_global(g1")
    assert trigger < first_load < wait < store
    plain = lower(chain_link(chained=False), arch, constants={"n": 64})
    assert "la_wait_prior_grid" not in plain.source and not plain.programmatic_launch


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_lowering_signals_where_the_program_does_and_not_at_entry(arch: str) -> None:
    source = lower(chain_link(signal=True), arch, constants={"n": 64}).source
    body = source[source.index('extern "C" __global__') :]
    assert body.count("la_launch_dependents();") == 1
    wait, trigger = body.index("la_wait_prior_grid();"), body.index("la_launch_dependents();")
    assert body.index("load_global(g0") < wait < trigger < body.index("store_global(g1")
    assert ("griddepcontrol.launch_dependents;" in source) is (arch == "sm_90a")


@pytest.mark.parametrize(("arch", "programmatic"), [("sm_90a", True), ("sm_80", False)])
def test_compiled_link_launches_programmatically_from_sm_90_on(
    arch: str, programmatic: bool
) -> None:
    kernel = compile(chain_link(), arch, constants={"n": 64})
    assert kernel.lowered.programmatic_launch
    assert kernel.kernel._programmatic is programmatic


@settings(max_examples=20, deadline=None)
@given(n_blocks=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_the_wait_changes_nothing_the_interpreter_computes(n_blocks: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 32 * n_blocks
    x = rng.standard_normal(n).astype(np.float32)
    outputs = []
    for chained, signal in ((True, False), (True, True), (False, False)):
        y = np.full(n, np.nan, np.float32)
        run_reference(chain_link(chained, signal=signal), n, x, y, grid=(n_blocks,))
        outputs.append(y)
    for other in outputs[1:]:
        assert np.array_equal(outputs[0].view(np.uint32), other.view(np.uint32))
    assert np.array_equal(outputs[0], x + x)

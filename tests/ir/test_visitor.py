"""Instructions' generic fields and the visitors: every consumer handles every instruction."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ir import dtypes, instructions
from ir.builder import ProgramBuilder
from ir.errors import VisitorError
from ir.instructions import all_instruction_types
from ir.visitor import InstructionVisitor, method_name
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial
from layout_algebra.shared import shared_row_major
from layout_algebra.symbolic import var

INSTRUCTION_NAMES = (
    "RegisterTensorInit",
    "SharedTensorAlloc",
    "GlobalView",
    "LoadGlobal",
    "PrefetchGlobal",
    "StoreGlobal",
    "AtomicAdd",
    "LoadShared",
    "StoreShared",
    "CopyAsync",
    "CopyAsyncCommit",
    "CopyAsyncWait",
    "CopyBulk",
    "CopyBulkWait",
    "CopyBulkRelease",
    "Sync",
    "WaitPriorGrid",
    "LaunchDependents",
    "Unary",
    "Binary",
    "Where",
    "Fma",
    "Cast",
    "View",
    "Reduce",
    "Dot",
    "Assign",
    "ForRange",
    "If",
    "ThreadGroup",
)


def test_all_instruction_types_lists_the_ir_in_definition_order():
    assert tuple(t.__name__ for t in all_instruction_types()) == INSTRUCTION_NAMES
    assert all(t.__module__ == "ir.instructions" for t in all_instruction_types())


@pytest.mark.parametrize(
    ("instruction_type", "method"),
    [
        (instructions.LoadGlobal, "visit_load_global"),
        (instructions.RegisterTensorInit, "visit_register_tensor_init"),
        (instructions.If, "visit_if"),
        (instructions.CopyAsyncWait, "visit_copy_async_wait"),
    ],
)
def test_method_name_is_the_snake_case_class_name(instruction_type, method):
    assert method_name(instruction_type) == method


def _copy_program():
    """A program using memory, a loop, an if and computation, for the field tables below."""
    with ProgramBuilder("fields", 32) as b:
        n = b.int_param("n")
        x = b.array_param("x", dtypes.f16)
        view = b.global_view(x, dtypes.f16, GlobalLayout((n, 64), (64, 1)))
        shared = b.shared_tensor(dtypes.f16, shared_row_major(2, 64))
        with b.for_range(0, n, 2) as k:
            b.copy_async(shared, view, [k, 0])
            b.copy_async_commit()
            b.copy_async_wait(0)
            b.sync()
            with b.if_(k < n - 1):
                tile = b.load_shared(shared, spatial(2, 16).local(1, 4), [0, 0])
                doubled = b.add(tile, tile)
                b.store_global(view, doubled, [k, 0])
    return b.program()


def test_generic_fields_of_each_instruction():
    program = _copy_program()
    by_op = {}
    for instruction in program.walk():
        by_op.setdefault(type(instruction).__name__, instruction)
    view, loop = by_op["GlobalView"], by_op["ForRange"]
    copy, store = by_op["CopyAsync"], by_op["StoreGlobal"]
    load, add, branch = by_op["LoadShared"], by_op["Binary"], by_op["If"]
    shared = by_op["SharedTensorAlloc"].out
    n = program.param("n").var
    # Results, operands and bodies by the declared roles of the fields.
    assert view.results() == (view.out,) and view.operands() == ()
    assert view.scalars() == (n,)
    assert copy.results() == () and copy.operands() == (shared, view.out)
    assert [repr(s) for s in copy.scalars()] == ["k0", "0", "0", "0"]
    assert store.operands() == (view.out, add.out) and store.results() == ()
    assert load.results() == (load.out,) and load.operands() == (shared,)
    assert add.operands() == (add.lhs, add.rhs) and add.results() == (add.out,)
    # A loop binds its variable (not a scalar it reads) and has one body; an if has one body.
    assert [repr(s) for s in loop.scalars()] == ["0", "n"]
    assert loop.bodies() == (loop.body,) and branch.bodies() == (branch.body,)
    assert [repr(s) for s in branch.scalars()] == [repr(branch.cond)]
    assert add.bodies() == () and by_op["Sync"].results() == by_op["Sync"].operands() == ()


def test_program_walk_enters_every_body_in_order():
    names = [type(i).__name__ for i in _copy_program().walk()]
    assert names == [
        "GlobalView",
        "SharedTensorAlloc",
        "ForRange",
        "CopyAsync",
        "CopyAsyncCommit",
        "CopyAsyncWait",
        "Sync",
        "If",
        "LoadShared",
        "Binary",
        "StoreGlobal",
    ]


def test_a_visitor_lacking_a_method_fails_when_created():
    methods = {
        method_name(t): lambda self, instruction: None
        for t in all_instruction_types()
        if t not in (instructions.Sync, instructions.Dot)
    }
    with pytest.raises(VisitorError, match=r"handles no instruction Sync \(visit_sync\), Dot"):
        type("Incomplete", (InstructionVisitor,), methods)


def test_unhandled_instructions_are_said_and_refused_when_visited():
    methods = {
        method_name(t): lambda self, instruction: "seen"
        for t in all_instruction_types()
        if t is not instructions.Sync
    }
    visitor_type = type(
        "NoSync", (InstructionVisitor,), {**methods, "unhandled": (instructions.Sync,)}
    )
    visitor = visitor_type()
    assert visitor.visit(instructions.CopyAsyncCommit()) == "seen"
    with pytest.raises(VisitorError, match="visitor NoSync does not handle Sync"):
        visitor.visit(instructions.Sync())


NEW_INSTRUCTION = """
import json
from dataclasses import dataclass

from backend.lower.driver import KernelLowering
from ir import dtypes
from ir.errors import VerificationError, VisitorError
from ir.instructions import Instruction, result
from ir.interpreter import BlockInterpreter
from ir.printer import format_instruction
from ir.values import RegisterTensor
from ir.verifier import check_instruction
from layout_algebra.register import spatial


@dataclass(frozen=True, eq=False)
class Toy(Instruction):
    op = "toy"
    out: RegisterTensor = result()
    x: RegisterTensor


def error_of(call):
    try:
        call()
    except (VerificationError, VisitorError) as error:
        return f"{type(error).__name__}: {error}"
    return None


x = RegisterTensor("r0", dtypes.f16, spatial(32).local(2))
toy = Toy(RegisterTensor("r1", dtypes.f16, spatial(32).local(2)), x)
report = {
    "interpreter class": error_of(lambda: type("Interpreter", (BlockInterpreter,), {})),
    "lowering class": error_of(lambda: type("Lowering", (KernelLowering,), {})),
    "interpreter visit": error_of(lambda: object.__new__(BlockInterpreter).visit(toy)),
    "printed": format_instruction(toy),
    "verified": error_of(lambda: check_instruction(toy, 32)),
    "wrong threads": error_of(lambda: check_instruction(toy, 64)),
}
print(json.dumps(report))
"""


def test_a_new_instruction_needs_the_interpreter_and_the_lowering_and_nothing_else():
    """In a fresh process (instruction classes register globally): after a new instruction is
    defined, a visitor class of the interpreter or the lowering fails when it is created,
    naming it; the printer and the verifier treat it by its generic fields."""
    run = subprocess.run(
        [sys.executable, "-c", NEW_INSTRUCTION], capture_output=True, text=True, check=True
    )
    report = json.loads(run.stdout)
    assert report["interpreter class"] == (
        "VisitorError: visitor Interpreter handles no instruction Toy (visit_toy); define the "
        "method or list the instruction in its `unhandled` attribute (see `ir.visitor`)"
    )
    assert report["lowering class"].startswith(
        "VisitorError: visitor Lowering handles no instruction Toy (visit_toy)"
    )
    assert report["interpreter visit"].startswith(
        "VisitorError: visitor BlockInterpreter does not handle Toy"
    )
    assert report["printed"] == "r1: f16[64] spatial(32).local(2) = toy(r0)"
    assert report["verified"] is None
    assert report["wrong threads"].startswith(
        "VerificationError: toy: thread count mismatch: tensor r1 has a layout of 32 threads, "
        "the program has 64"
    )


def test_scalar_fields_exclude_the_loop_variable():
    loop = instructions.ForRange(var("i", 0, 9), var("s"), var("e"), 1, ())
    assert [repr(s) for s in loop.scalars()] == ["s", "e"]

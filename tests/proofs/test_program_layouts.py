"""Tests of `proofs.check_program_layouts`: the layout claims of a tile program.

The claims of the u4 quantized matmul are a literal table, each verdict cross-checked by brute
force over its (thread, register) domain; a store through an overlapping global layout is
refuted and its counterexample re-evaluated here; stores without an access map of their tile,
and combining stores, make no claim; the progress callback and the errors of invalid arguments.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.examples.quantized_matmul import quantized_matmul
from ir.program import Program
from layout_algebra import GlobalLayout, shared_row_major, spatial
from proofs import LayoutClaim, ProofError, check_program_layouts

RLIMIT = 2_000_000
TIMEOUT = 60.0
LIMITS = {"timeout": TIMEOUT, "rlimit": RLIMIT}


def _holds_by_brute_force(claim: LayoutClaim) -> bool:
    """The claim decided over every (thread, register) of its subject."""
    threads = np.arange(claim.subject.num_threads)[:, None]
    registers = np.arange(claim.subject.local_size)[None, :]
    if claim.kind == "in_bounds":
        coords = claim.subject.map(threads, registers)
        return all(np.all((0 <= c) & (c < n)) for c, n in zip(coords, claim.subject.shape))
    offsets = np.asarray(claim.subject.offset(threads, registers)).reshape(-1)
    return len(np.unique(offsets)) == offsets.size


def _store_program(store_layout: GlobalLayout, combine: str | None = None) -> Program:
    """Load an 8 x 8 f16 tile with `spatial(8, 4).local(1, 2)` and store it (or, with
    `combine`, add it) through `store_layout`."""
    with ProgramBuilder("store_tile", 32) as b:
        x = b.array_param("x", dtypes.f16)
        y = b.array_param("y", dtypes.f16)
        source = b.global_view(x, dtypes.f16, GlobalLayout((8, 8), (8, 1)))
        tile = b.load_global(source, [0, 0], spatial(8, 4).local(1, 2))
        b.store_global(b.global_view(y, dtypes.f16, store_layout), tile, [0, 0], combine)
    return b.program()


# ---------------------------------------------------------------------------------- proved


def test_quantized_matmul_u4_claims_table() -> None:
    report = check_program_layouts(quantized_matmul(dtypes.u4), **LIMITS)
    claims = [(claim.kind, claim.description) for claim, _ in report.results]
    assert claims == [
        ("in_bounds", "spatial(16,8).local(4,8) stays inside (64, 64)"),  # accumulator
        ("in_bounds", "local(2,1).spatial(16,8).local(1,4) stays inside (32, 32)"),  # u4 bytes
        ("in_bounds", "local(2,1).spatial(16,8).local(1,8) stays inside (32, 64)"),  # weights
        ("in_bounds", "replicate(16).spatial(8).local(1,8) stays inside (1, 64)"),  # scale row
        ("in_bounds", "spatial(16,1).local(4,8).replicate(8) stays inside (64, 8)"),  # dot a
        ("in_bounds", "replicate(16).spatial(8).local(8,8) stays inside (8, 64)"),  # dot b
        # the dequantized weights into shared memory; the store of C is through a symbolic
        # global layout and makes no claim
        (
            "injective",
            "store_shared of local(2,1).spatial(16,8).local(1,8) writes each address once",
        ),
    ]
    assert report.holds is True
    assert report.proved == 7
    assert report.failures == [] and report.unknown == []
    store = report.results[-1][0].instruction
    assert store is not None and store.op == "store_shared"
    assert all(_holds_by_brute_force(claim) for claim, _ in report.results)


def test_progress_is_called_after_each_claim() -> None:
    calls: list[tuple[int, int]] = []
    check_program_layouts(
        quantized_matmul(dtypes.u4), progress=lambda *c: calls.append(c), **LIMITS
    )
    assert calls == [(done, 7) for done in range(1, 8)]


# ---------------------------------------------------------------------------------- refuted


def test_store_through_overlapping_layout_is_refuted() -> None:
    # rows 4 elements apart in a layout 8 wide: row r + 1 overwrites half of row r
    report = check_program_layouts(_store_program(GlobalLayout((8, 8), (4, 1))), **LIMITS)
    assert [claim.kind for claim, _ in report.results] == ["in_bounds", "injective"]
    assert report.holds is False
    ((claim, result),) = report.failures
    assert claim.description == "store_global of spatial(8,4).local(1,2) writes each address once"
    assert _holds_by_brute_force(claim) is False
    example = result.counterexample
    first, second = example["first"], example["second"]
    assert (first["t"], first["i"]) != (second["t"], second["i"])
    assert claim.subject.offset(first["t"], first["i"]) == example["image"]
    assert claim.subject.offset(second["t"], second["i"]) == example["image"]


def test_same_store_through_row_major_layout_is_proved() -> None:
    report = check_program_layouts(_store_program(GlobalLayout((8, 8), (8, 1))), **LIMITS)
    assert [result.holds for _, result in report.results] == [True, True]


# ------------------------------------------------------------------------------ no claim made


def test_a_combining_store_through_overlapping_layout_makes_no_claim() -> None:
    """Adding through the overlapping layout refuted above is what a combining store is for
    (each element added once, wherever two meet): no injectivity claim."""
    program = _store_program(GlobalLayout((8, 8), (4, 1)), combine="add")
    report = check_program_layouts(program, **LIMITS)
    assert [claim.kind for claim, _ in report.results] == ["in_bounds"]
    assert report.holds is True


def test_store_of_part_of_a_shared_tensor_makes_no_claim() -> None:
    with ProgramBuilder("half_tile", 32) as b:
        x = b.array_param("x", dtypes.f16)
        source = b.global_view(x, dtypes.f16, GlobalLayout((4, 16), (16, 1)))
        tile = b.load_global(source, [0, 0], spatial(4, 8).local(1, 2))
        b.store_shared(b.shared_tensor(dtypes.f16, shared_row_major(8, 16)), tile, [4, 0])
    report = check_program_layouts(b.program(), **LIMITS)
    assert [claim.kind for claim, _ in report.results] == ["in_bounds"]
    assert report.holds is True


# ---------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("program", "limits", "message"),
    [
        ("matmul", LIMITS, "check_program_layouts expects an ir.Program, got 'matmul'"),
        (None, {"timeout": 0}, "timeout must be a positive number of seconds, got 0"),
        (None, {"rlimit": -1}, "rlimit must be a positive int or None, got -1"),
    ],
)
def test_invalid_arguments_raise(program: object, limits: dict, message: str) -> None:
    with pytest.raises(ProofError, match=re.escape(message)):
        check_program_layouts(program or quantized_matmul(dtypes.u4), **limits)

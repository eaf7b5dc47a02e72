"""`ProgramBuilder.hoist_invariants`: a program that asks the lowering to compute its
block-invariant divisions by runtime values once (`Program.hoist_invariants`), as the split-tail
prefill kernel does: the attribute, its refusals, and that the lowering then prints what
``lower(..., hoist_invariants=True)`` prints, without the switch. What hoisting computes is
checked in tests/backend/test_hoist_invariants.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from backend.lower import lower
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import VerificationError
from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig, wgmma_dequant_matmul
from ir.verifier import verify
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial

SPLIT_TAIL = WgmmaDequantConfig(block_m=8, units_k=2, stages=3, split=2, tail_wave=6)


def tile_copy(hoist: bool):
    """A copy of row (x // m) of an (m, 32) array, m a runtime size: the row index divides by
    it."""
    with ProgramBuilder("tile_copy", 32) as b:
        if hoist:
            b.hoist_invariants()
        m = b.int_param("m", lo=1, hi=1024)
        a = b.array_param("a", dtypes.f32)
        c = b.array_param("c", dtypes.f32)
        view_a = b.global_view(a, dtypes.f32, GlobalLayout((m, 32), (32, 1)))
        view_c = b.global_view(c, dtypes.f32, GlobalLayout((m, 32), (32, 1)))
        row = b.block_x % m
        b.store_global(view_c, b.load_global(view_a, [row, 0], spatial(1, 32)), [row, 0])
    return b.program()


def test_the_program_carries_the_request() -> None:
    assert tile_copy(True).hoist_invariants and not tile_copy(False).hoist_invariants
    assert wgmma_dequant_matmul(dtypes.i4, 64, SPLIT_TAIL).hoist_invariants
    unsplit = replace(SPLIT_TAIL, tail_wave=0)
    assert not wgmma_dequant_matmul(dtypes.i4, 64, unsplit).hoist_invariants


def test_the_lowering_hoists_as_its_switch_does() -> None:
    asked = lower(tile_copy(True), "sm_90a").source
    assert "const int la_inv0 = " in asked
    assert asked == lower(tile_copy(False), "sm_90a", hoist_invariants=True).source
    assert "la_inv0" not in lower(tile_copy(False), "sm_90a").source


def test_a_second_request_and_a_non_bool_are_refused() -> None:
    with ProgramBuilder("twice", 32) as b:
        b.hoist_invariants()
        with pytest.raises(VerificationError, match="hoist_invariants declared twice: twice"):
            b.hoist_invariants()
    with pytest.raises(VerificationError, match="hoist_invariants of tile_copy is 1; expected"):
        verify(replace(tile_copy(False), hoist_invariants=1))

"""`ProgramBuilder.wgmma_chain_window`: how many links of a chain of warpgroup dots may run at
once (`Program.wgmma_chain_window`), as the decode kernel's warpgroup dot asks (two): the
attribute, its refusals, its line in the printed program, and the waits the lowering then
writes after each link (``wait_group W - 1``), against a chain with no window, whose links
run until its last."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from backend.lower import lower
from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import VerificationError
from ir.examples.register_dequant_matmul import DequantConfig, register_dequant_matmul
from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig, wgmma_dequant_matmul
from ir.printer import format_program
from ir.verifier import verify

DECODE = DequantConfig(
    units_k=8, late_scale=True, weights_as_a=True, stages=3, release=True, warpgroup_dot=True
)
"""The decode kernel with the warpgroups' dot: a chain of eight links a k-tile."""

SPLIT_DOT = WgmmaDequantConfig(block_m=64, units_k=4, stages=3, split_dot=True)
"""The prefill kernel whose k-tile is a chain of four links, with no window."""

LAYER = {"n": 1024, "k": 1024}


def _waits(source: str) -> list[str]:
    return re.findall(r"wgmma\.wait_group\.sync\.aligned (\d)", source)


def test_the_decode_kernel_asks_for_two_links_and_the_prefill_for_none() -> None:
    decode = register_dequant_matmul(dtypes.i4, 128, DECODE)
    assert decode.wgmma_chain_window == 2
    assert "wgmma_chain_window 2" in format_program(decode).splitlines()[:4]
    plain = register_dequant_matmul(dtypes.i4, 128, replace(DECODE, warpgroup_dot=False))
    assert plain.wgmma_chain_window == 0
    assert "wgmma_chain_window" not in format_program(plain)
    assert wgmma_dequant_matmul(dtypes.i4, 128, SPLIT_DOT).wgmma_chain_window == 0


def test_each_link_waits_for_all_but_the_window_s_last() -> None:
    """The decode kernel's chain of eight links (unrolled twice): seven links each leave one
    group running (``wait_group 1``), the last waits for all. The prefill's chain with no
    window waits only after its last link."""
    source = lower(
        register_dequant_matmul(dtypes.i4, 128, DECODE), "sm_90a", constants=LAYER
    ).source
    body = source.split('extern "C"')[1]
    assert _waits(body) == ["1"] * 7 * DECODE.unroll
    assert body.count("la_wgmma_wait();") == DECODE.unroll
    prefill = lower(
        wgmma_dequant_matmul(dtypes.i4, 128, SPLIT_DOT), "sm_90a", constants=LAYER
    ).source
    assert not _waits(prefill.split('extern "C"')[1])


@pytest.mark.parametrize("links", [0, 9, True, 2.0, "2"])
def test_a_count_off_its_range_is_refused(links: object) -> None:
    with ProgramBuilder("window", 128) as b:
        with pytest.raises(VerificationError, match=f"wgmma_chain_window of window is {links!r}"):
            b.wgmma_chain_window(links)  # type: ignore[arg-type]


def test_a_second_declaration_and_a_bad_field_are_refused() -> None:
    with ProgramBuilder("twice", 128) as b:
        b.wgmma_chain_window(2)
        with pytest.raises(VerificationError, match="wgmma_chain_window declared twice: twice"):
            b.wgmma_chain_window(3)
    program = register_dequant_matmul(dtypes.i4, 128, DECODE)
    with pytest.raises(VerificationError, match="expected an int from 1 to 8"):
        verify(replace(program, wgmma_chain_window=-1))


def test_a_chain_s_later_links_advance_its_first_descriptor_without_fences() -> None:
    """Each k-tile's chain builds one B descriptor, at its first link, and its seven later
    links advance it by their steps' offsets (16 values of k a step, 32 bytes: two
    sixteenths; the panel after, 64 k of 8 rows, 1024 bytes on) instead of building their
    own. Behind barriers (cp.async into the stage), a k-tile has one proxy fence, before the
    barrier after its copies' wait; none at its closing barrier or at any link, as no thread
    writes shared memory after that fence (`backend.proxy_fences`; released, the stage is
    TMA's alone: none)."""
    for release in (True, False):
        program = register_dequant_matmul(dtypes.i4, 128, replace(DECODE, release=release))
        body = lower(program, "sm_90a", constants=LAYER).source.split('extern "C"')[1]
        advances = re.findall(r"= la_wgmma_advance\(la_wg\d+bd, (\d+)\);", body)
        assert advances == ["2", "4", "6", "64", "66", "68", "70"] * DECODE.unroll
        assert len(re.findall(r"bd = la_wgmma_descriptor\(", body)) == DECODE.unroll
        fences = body.count("fence.proxy.async")
        assert fences == (0 if release else DECODE.unroll)

"""The SASS reader: nvdisasm's JSON listing parsed, natural loops found, a loop's census.

Exact tables on a hand-written listing (no tool needed), the loops and dominators of random
control-flow graphs against their definitions by brute force, and kernels compiled by NVRTC
and disassembled by nvdisasm: the tensor-core instructions in the decode kernel's k loop
against the count its configuration implies, the refill's loop without copies, the rule that
offers the biased cast against the loops it compiles to, the i8 cast without sign flips,
the batch paths' tile of three warpgroups without spills, and the split sum's one fence.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backend import sass
from backend.batch_matmul import BATCH_PATHS, prefill_config
from backend.compile import compile as compile_program
from backend.decode_matmul import biased_cast_saves
from backend.errors import DisassemblyError
from ir import dtypes
from ir.examples.register_dequant_matmul import DequantConfig, register_dequant_matmul
from ir.examples.wgmma_dequant_matmul import wgmma_dequant_matmul


def listing(functions: dict[str, list[tuple[str | None, str, str]]]) -> str:
    """nvdisasm's JSON form of `functions`: name -> (predicate, opcode, operands) each."""
    sections = []
    for name, rows in functions.items():
        entries = []
        for predicate, opcode, operands in rows:
            entry: dict[str, object] = {"opcode": opcode}
            if operands:
                entry["operands"] = operands
            if predicate:
                entry["predicate"] = predicate
            entries.append(entry)
        sections.append({"function-name": name, "start": 0, "sass-instructions": entries})
    return json.dumps([{"SM": {"version": {"major": 9, "minor": 0}}}, sections])


NESTED = [
    (None, "MOV", "R1,c[0x0][0x28]"),  # 0
    (None, "LDG.E.128", "R4,desc[UR4][R2.64]"),  # 1: the outer loop's header
    (None, "HMMA.16816.F32", "R12,R4,R8,R12"),  # 2: the inner loop's header
    (None, "IMAD.MOV.U32", "R8,RZ,RZ,R5"),  # 3: a copy of a loaded word
    ("@P0", "BRA", "0x20"),  # 4: the inner back edge
    ("@!P1", "BRA", "0x90"),  # 5: a wait: to its retry stub
    (None, "STL", "[R1],R12"),  # 6: a spill
    ("@P2", "BRA", "0x10"),  # 7: the outer back edge
    (None, "EXIT", ""),  # 8
    (None, "BRA", "0x50"),  # 9: the retry stub, back to the wait
]


def nested() -> sass.Function:
    return sass.parse_listing(listing({"kernel": NESTED}))["kernel"]


def test_a_listing_reads_into_instructions() -> None:
    function = nested()
    assert function.name == "kernel" and len(function.instructions) == 10
    load = function.instructions[1]
    assert (load.offset, load.opcode, load.mnemonic, load.predicate) == (
        0x10,
        "LDG.E.128",
        "LDG",
        None,
    )
    assert load.operands == ("R4", "desc[UR4][R2.64]")
    assert load.loaded_registers() == (4, 5, 6, 7)
    assert function.instructions[3].register_copy_source() == 5
    assert function.instructions[4].branch_target == 0x20
    assert function.instructions[4].predicate == "@P0"
    assert repr(function.instructions[4]) == "/*0040*/ @P0 BRA 0x20"


def test_blocks_and_edges_of_a_listing() -> None:
    function = nested()
    assert function.blocks == ((0, 0), (1, 1), (2, 4), (5, 5), (6, 7), (8, 8), (9, 9))
    assert function.successors == ((1,), (2,), (2, 3), (6, 4), (1, 5), (), (3,))


def test_natural_loops_of_a_listing() -> None:
    """The outer loop holds the inner loop and the wait's retry loop; the retry stub at the
    end is a loop of two instructions, not a span from the wait to the end."""
    function = nested()
    loops = {loop.header: sorted(loop.body) for loop in function.loops()}
    assert loops == {1: [1, 2, 3, 4, 5, 6, 7, 9], 2: [2, 3, 4], 5: [5, 9]}
    assert [loop.header for loop in function.innermost_loops()] == [2, 5]
    outer, inner, retry = function.loops()
    assert outer.contains(inner) and outer.contains(retry) and not inner.contains(retry)
    assert function.main_loop() == inner
    assert outer.census() == {"LDG": 1, "HMMA": 1, "IMAD": 1, "BRA": 4, "STL": 1}
    assert outer.opcodes()["HMMA.16816.F32"] == 1
    assert (outer.spills, outer.register_copies(), outer.copies_of_loads()) == (1, 1, 1)
    # The inner loop copies a word loaded outside it: not a copy of one of its own loads.
    assert (inner.spills, inner.register_copies(), inner.copies_of_loads()) == (0, 1, 0)


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("R1,c[0x0][0x28]", ("R1", "c[0x0][0x28]")),
        ("PT,R2,desc[UR10][R2.64],R5", ("PT", "R2", "desc[UR10][R2.64]", "R5")),
        ("[R13],desc[UR10][R2.64],!PT", ("[R13]", "desc[UR10][R2.64]", "!PT")),
        ("R113,R113,R138.reuse.H0_H0,-72,-72", ("R113", "R113", "R138.reuse.H0_H0", "-72", "-72")),
        ("", ()),
    ],
)
def test_operands_split_at_top_level_commas(text: str, parts: tuple[str, ...]) -> None:
    function = sass.parse_listing(listing({"k": [(None, "OP", text)]}))["k"]
    assert function.instructions[0].operands == parts


@pytest.mark.parametrize(
    ("opcode", "operands", "copied"),
    [
        ("MOV", "R3,R7", 7),
        ("IMAD.MOV.U32", "R3,RZ,RZ,R7.reuse", 7),
        ("IMAD.MOV.U32", "R3,RZ,RZ,0x1", None),
        ("IMAD.MOV.U32", "R3,R2,RZ,R7", None),
        ("MOV", "R3,UR4", None),
        ("IADD3", "R3,R7,RZ,RZ", None),
    ],
)
def test_register_copies(opcode: str, operands: str, copied: int | None) -> None:
    function = sass.parse_listing(listing({"k": [(None, opcode, operands)]}))["k"]
    assert function.instructions[0].register_copy_source() == copied


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps({"functions": []}),
        json.dumps([{}, [{"function-name": "k"}]]),
        json.dumps([{}, [{"function-name": "k", "sass-instructions": [{"operands": "R1"}]}]]),
    ],
)
def test_a_listing_of_another_shape_is_refused(text: str) -> None:
    with pytest.raises(DisassemblyError, match="not the JSON expected"):
        sass.parse_listing(text)


def test_a_branch_into_no_instruction_is_refused_by_offset() -> None:
    function = sass.parse_listing(listing({"k": [(None, "BRA", "0x18"), (None, "EXIT", "")]}))["k"]
    with pytest.raises(DisassemblyError, match="no instruction at offset 0x18"):
        function.loops()


def test_a_function_without_a_tensor_core_loop_has_no_main_loop() -> None:
    function = sass.parse_listing(listing({"k": [(None, "NOP", ""), (None, "BRA", "0x0")]}))["k"]
    assert [sorted(loop.body) for loop in function.loops()] == [[0, 1]]
    with pytest.raises(DisassemblyError, match="k: no loop issues a tensor-core instruction"):
        function.main_loop()


@st.composite
def control_flow(draw: st.DrawFn) -> list[tuple[str | None, str, str]]:
    """A listing of up to 24 instructions: plain ones, exits, and branches (predicated or not)
    to anywhere, backward more often than forward (loops, nested or not)."""
    count = draw(st.integers(1, 24))
    rows: list[tuple[str | None, str, str]] = []
    for index in range(count):
        kind = draw(st.sampled_from(["op", "op", "branch", "branch", "back", "exit"]))
        predicate = draw(st.sampled_from([None, "@P0", "@!P1", "@P0"]))
        if kind in ("branch", "back"):
            lowest = 0 if kind == "branch" else max(0, index - 8)
            highest = count - 1 if kind == "branch" else index
            rows.append((predicate, "BRA", hex(draw(st.integers(lowest, highest)) * 16)))
        elif kind == "exit":
            rows.append((predicate, "EXIT", ""))
        else:
            rows.append((None, "IADD3", "R1,R1,0x1,RZ"))
    return rows


def reachable(successors: tuple[tuple[int, ...], ...], removed: int | None = None) -> set[int]:
    """The blocks reached from block 0, never entering `removed`."""
    seen: set[int] = set()
    work = [0] if removed != 0 else []
    while work:
        block = work.pop()
        if block not in seen:
            seen.add(block)
            work.extend(t for t in successors[block] if t != removed)
    return seen


@given(control_flow())
def test_dominators_and_loops_match_their_definitions(rows) -> None:
    """A block d dominates a reachable block b iff b is unreachable with d removed; a loop's
    body is its header and the blocks that reach a back edge's source without the header."""
    function = sass.parse_listing(listing({"k": rows}))["k"]
    successors = function.successors
    dominators = sass._dominators(successors)
    live = reachable(successors)
    for d in range(len(successors)):
        cut = reachable(successors, removed=d)
        for b in live:
            assert bool(dominators[b] >> d & 1) == (b == d or b not in cut)
    block_at = {first: number for number, (first, _) in enumerate(function.blocks)}
    expected: dict[int, set[int]] = {}
    for source, targets in enumerate(successors):
        for header in targets:
            if (
                source in live
                and header in live
                and (header == source or source not in reachable(successors, removed=header))
            ):
                body = expected.setdefault(header, {header})
                # The blocks that reach `source` without passing the header.
                for block in range(len(successors)):
                    if block == header:
                        continue
                    seen, work = set(), [block]
                    while work:
                        node = work.pop()
                        if node in seen or node == header:
                            continue
                        seen.add(node)
                        work.extend(successors[node])
                    if source in seen:
                        body.add(block)
    found = {
        block_at[loop.header]: {
            number for number, (first, last) in enumerate(function.blocks) if first in loop.body
        }
        for loop in function.loops()
    }
    assert found == expected


@pytest.fixture(scope="module")
def disassembler() -> None:
    """nvdisasm is there (the 'cuda' extra's package); skips without it, or fails when
    REQUIRE_COMPILER=1."""
    try:
        sass.disassembler_path()
    except DisassemblyError as error:
        if os.environ.get("REQUIRE_COMPILER") == "1":
            pytest.fail(f"REQUIRE_COMPILER=1 but {error}")
        pytest.skip(str(error))


def test_no_disassembler_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sass.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv("PATH", "")
    with pytest.raises(DisassemblyError, match="install the nvidia-cuda-nvdisasm package"):
        sass.disassembler_path()


@pytest.mark.parametrize("cubin", [b"", b"not an elf", "text"])
def test_only_a_cubin_is_disassembled(cubin: object) -> None:
    with pytest.raises(DisassemblyError, match="expected a CUBIN"):
        sass.disassemble(cubin)  # type: ignore[arg-type]


DECODE_POINTS = [
    DequantConfig(warps=2, units_k=8, unroll=2, late_scale=True),
    DequantConfig(warps=2, units_k=8, unroll=2, late_scale=True, weights_as_a=True),
    DequantConfig(warps=2, units_k=4, unroll=2, weights_as_a=True, units_m=2),
]


@pytest.mark.parametrize("config", DECODE_POINTS, ids=["16 rows", "8 rows as A", "2 x 8 rows"])
def test_the_decode_k_loop_issues_the_mma_its_configuration_implies(
    disassembler: None, config: DequantConfig
) -> None:
    """Each warp's 64 columns by one k-tile of 16 * units_k: 8 mma of n8 a k16 step with 16
    rows of activations as A, 4 of m16 a row block with the weights as A; the loop is one
    pass of `unroll` k-tiles (k and n constant)."""
    kernel = compile_program(
        register_dequant_matmul(dtypes.i4, 128, config), "sm_90a", constants={"n": 1024, "k": 2048}
    )
    report = sass.loop_report(kernel.cubin)
    per_step = 4 * config.units_m if config.weights_as_a else 8
    assert report.census["HMMA"] == report.tensor_core == config.unroll * config.units_k * per_step
    assert report.kernel_spills == 0 and report.registers > 0
    # The ring of registers copies each k-tile's words one place along; in place, none.
    assert report.copies_of_loads > 0
    if config.late_scale:
        refilled = compile_program(
            register_dequant_matmul(dtypes.i4, 128, replace(config, refill_in_place=True)),
            "sm_90a",
            constants={"n": 1024, "k": 2048},
        )
        again = sass.loop_report(refilled.cubin)
        assert again.copies_of_loads == 0 and again.instructions < report.instructions
        assert again.tensor_core == report.tensor_core


def test_the_ringed_stream_k_loop_divides_nothing(disassembler: None) -> None:
    """A stream-K block's range starts at a division by the grid (m is a launch argument). A
    ring of three stages unrolled twice numbers its stages by the k-tile's own index, so the k
    loop computes no division (no MUFU, I2F or F2I; counted from the range's start, it did, at
    1201 instructions for two k-tiles at 8192 x 57344 against the ring of two's 1030) and is
    no longer than the ring of two's, whose unrolled copies make the stage a constant."""
    base = DequantConfig(
        warps=4, units_k=8, unroll=2, late_scale=True, weights_as_a=True, units_m=2,
        min_blocks_per_sm=3, stream_k=396,
    )  # fmt: skip
    reports = {}
    for stages in (2, 3):
        program = register_dequant_matmul(dtypes.i4, 128, replace(base, stages=stages))
        kernel = compile_program(program, "sm_90a", constants={"n": 57344, "k": 8192})
        reports[stages] = sass.loop_report(kernel.cubin)
    census = reports[3].census
    assert not {"MUFU", "I2F", "F2I"} & set(census)
    assert census["HMMA"] == reports[2].census["HMMA"] == 2 * 8 * 4 * 2
    assert reports[3].kernel_spills == 0
    assert reports[3].instructions <= reports[2].instructions


def test_the_three_bit_ring_loads_each_thread_s_words_as_vectors(disassembler: None) -> None:
    """In the shared ring of 3-bit words (`weight_ring_layout`), a thread's 24 words of a
    k-tile lie together: its k loop loads them as six 16-byte vectors a k-tile. Row-major, a
    lane's 3 words of a unit straddled vectors and the loop loaded them a word at a time (54
    LDS for two k-tiles, the scales' among them, against 6 now)."""
    config = DequantConfig(
        warps=4, units_k=8, unroll=2, late_scale=True, weights_as_a=True, units_m=2,
        min_blocks_per_sm=3, stream_k=396, stages=2,
    )  # fmt: skip
    program = register_dequant_matmul(dtypes.i3, 128, config)
    kernel = compile_program(program, "sm_90a", constants={"n": 57344, "k": 8192})
    function = next(iter(sass.disassemble(kernel.cubin).values()))
    opcodes = Counter(i.opcode for i in function.main_loop().instructions)
    assert opcodes["LDS.128"] == config.unroll * 24 // 4
    assert opcodes["LDS"] <= config.unroll * 3


def test_the_decode_loop_s_warpgroup_dot_is_wgmma(disassembler: None) -> None:
    """With `warpgroup_dot`, the 16-row decode loop multiplies by wgmma reading the released
    stage (one HGMMA a warp per 64 x 16 x 16, half the mma.sync form's HMMA count, none of its
    ldmatrix loads of the activations) and no mma.sync at all. Two links of its chain run at
    once (`wgmma_chain_window`), so it holds two steps' weights, not the k-tile's: 128
    registers, no spills (with every link running until the k-tile's last, 230)."""
    config = DequantConfig(
        warps=4, units_k=8, unroll=2, late_scale=True, weights_as_a=True, units_m=2,
        stages=3, release=True,
    )  # fmt: skip
    reports = {}
    for warpgroup in (False, True):
        program = register_dequant_matmul(dtypes.i4, 128, replace(config, warpgroup_dot=warpgroup))
        kernel = compile_program(program, "sm_90a", constants={"n": 57344, "k": 8192})
        function = next(iter(sass.disassemble(kernel.cubin).values()))
        reports[warpgroup] = Counter(
            i.opcode.split(".")[0] for i in function.main_loop().instructions
        )
        if warpgroup:
            report = sass.loop_report(kernel.cubin)
            assert report.registers <= 128 and report.kernel_spills == 0
    mma, warpgroup = reports[False], reports[True]
    assert mma["HMMA"] == 2 * 8 * 4 * 2 and "HGMMA" not in mma
    assert warpgroup["HGMMA"] == mma["HMMA"] // 2 and "HMMA" not in warpgroup
    assert "LDSM" in mma and "LDSM" not in warpgroup


def test_the_three_warpgroup_batch_tile_spills_nothing(disassembler: None) -> None:
    """The 192 x 128 batch tile (three consumer warpgroups at 160 registers, refilled in
    place): no local memory in the kernel, 8 wgmma a k-tile of 128 a consumer warpgroup."""
    path = BATCH_PATHS[7]
    config = prefill_config(path)
    assert config is not None and config.warpgroups == 3 and config.refill_in_place
    kernel = compile_program(
        wgmma_dequant_matmul(dtypes.i8, 128, config), "sm_90a", constants={"n": 1536, "k": 1024}
    )
    report = sass.loop_report(kernel.cubin)
    assert report.kernel_spills == 0
    assert report.census["HGMMA"] == config.unroll * 8
    assert report.copies_of_loads == 0


@pytest.mark.parametrize("weight", ["i3", "i4"])
def test_the_biased_cast_rule_agrees_with_the_compiled_loop(
    disassembler: None, weight: str
) -> None:
    """`biased_cast_saves` offers the biases kept where the decode kernel's compiled k loop
    is shorter with them: at 4 bits, not at 3 (whose plan counts fewer instructions)."""
    dtype = dtypes.from_name(weight)
    config = DequantConfig(warps=4, units_k=8, split=8, late_scale=True, weights_as_a=True)
    lengths = []
    for biased in (False, True):
        program = register_dequant_matmul(dtype, 128, replace(config, magic_bias=biased))
        kernel = compile_program(program, "sm_90a", constants={"n": 1024, "k": 8192})
        lengths.append(sass.loop_report(kernel.cubin).instructions)
    assert biased_cast_saves(dtype, dtypes.f16) is (lengths[1] < lengths[0])


def test_the_i8_cast_in_the_decode_loop_flips_no_sign_bits(disassembler: None) -> None:
    """i8 codes are stored offset binary (`stored_offset`), so the refilled decode loop casts
    them with PRMTs alone: one a pair of weights (512 weights a thread a pass: 256), no LOP3."""
    config = DequantConfig(
        warps=2, units_k=8, split=4, late_scale=True, weights_as_a=True, refill_in_place=True
    )
    kernel = compile_program(
        register_dequant_matmul(dtypes.i8, 128, config), "sm_90a", constants={"n": 1024, "k": 8192}
    )
    census = sass.loop_report(kernel.cubin).census
    assert census.get("LOP3", 0) == 0 and census["PRMT"] == 256


def test_the_clustered_batch_tile_s_k_loop_has_no_fence(disassembler: None) -> None:
    """The staged 128 x 256 tile in clusters of two (`cluster_n`, its activations shared by
    TMA multicast): the consumers' k loop issues the same 16 wgmma as the tile alone, with no
    memory fence (each release's remote arrivals keep the CTA's scope; at the cluster's they
    were a ``MEMBAR`` a release, which waited for the weights' loads in flight), no spills."""
    path = {name: value for name, value in BATCH_PATHS[8].items() if name != "path"}
    reports = []
    for cluster_n in (1, 2):
        config = replace(prefill_config({"path": "prefill", **path}), cluster_n=cluster_n)
        kernel = compile_program(
            wgmma_dequant_matmul(dtypes.i4, 128, config),
            "sm_90a",
            constants={"n": 12288, "k": 4096},
        )
        reports.append(sass.loop_report(kernel.cubin))
    alone, clustered = reports
    assert clustered.tensor_core == alone.tensor_core == 16
    assert not {"MEMBAR", "ERRBAR", "CGAERRBAR"} & set(clustered.census)
    assert clustered.kernel_spills == 0 and clustered.registers == alone.registers
    assert clustered.instructions < alone.instructions + 8


def test_the_split_sum_s_ticket_fences_in_one_thread_only(disassembler: None) -> None:
    """The fused split-k sum's ticket (`atomic_add`): one acquire-release add at GPU scope,
    so the whole kernel holds one memory fence (before the add) and one L1 invalidation
    (after it), none of them sequentially consistent, where a ``__threadfence`` in every
    thread before and after the add made three ``MEMBAR.SC.GPU``."""
    config = DequantConfig(warps=4, units_k=8, split=8, late_scale=True, weights_as_a=True)
    kernel = compile_program(
        register_dequant_matmul(dtypes.i2, 128, config), "sm_90a", constants={"n": 8192, "k": 8192}
    )
    [function] = sass.disassemble(kernel.cubin).values()
    opcodes = [instruction.opcode for instruction in function.instructions]
    fences = [opcode for opcode in opcodes if opcode.startswith("MEMBAR")]
    assert len(fences) == 1 and ".SC" not in fences[0]
    assert sum(opcode.startswith("ATOMG") for opcode in opcodes) == 1
    assert opcodes.count("CCTL.IVALL") == 1

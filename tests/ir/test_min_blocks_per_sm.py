"""A program's asked-for occupancy: `ProgramBuilder.min_blocks_per_sm`, `Program.min_blocks_per_sm`.

Exact: the builder's and the verifier's refusals with their messages (a second declaration, a
value that is no int from 1 to 2048 // num_threads), the printed header line, `ir.specialize`
keeping the attribute, the lowered ``__launch_bounds__`` (the only line of the source it
changes), and `DequantConfig.min_blocks_per_sm` refused by `register_dequant_matmul`.
Property: on a small program and on random programs of `ir.testing`, declaring an occupancy
changes nothing `ir.run_reference` computes, bit for bit.
Differential against NVRTC (no GPU): `backend.nvrtc.cubin_registers` reads the register
counts ptxas reports in NVRTC's log (``--ptxas-options=-v``) for each kernel of a CUBIN; the
decoding kernel `register_dequant_matmul` (i2, split 4, 128 threads) uses more than 80 registers
a thread without an occupancy and at most 80 with six blocks an SM (65536 registers /
(6 * 128 threads), rounded down to the allocation unit of 8); bytes that are no CUBIN raise
`CompilationError`.
"""

from __future__ import annotations

import dataclasses
import re
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend import compile
from backend.errors import CompilationError
from backend.lower import lower
from backend.nvrtc import compile_cuda, cubin_registers
from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.errors import VerificationError
from ir.examples.register_dequant_matmul import DequantConfig, register_dequant_matmul
from ir.examples.vector_add import vector_add
from ir.program import Program
from ir.specialize import specialize
from ir.testing import ProgramCase, program_cases
from ir.verifier import SM_THREADS, verify
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial

SM_REGISTERS = 65536
"""Registers of one SM (sm_80 to sm_90)."""
REGISTER_UNIT = 8
"""ptxas allocates registers per thread in multiples of this."""


def square_add(blocks: int | None = None, grid: bool = True) -> Program:
    """``y = x * x + y`` over n f16 elements, 128 a block of 32 threads; n a compile-time
    constant. Declares the occupancy `blocks` (when given) before anything else, so the
    printed order of the header lines is not the order of the declarations."""
    with ProgramBuilder("square_add", 32) as b:
        if blocks is not None:
            b.min_blocks_per_sm(blocks)
        n = b.int_param("n", lo=1, multiple_of=128, constant=True)
        if grid:
            b.grid(n // 128)
        x, y = b.array_param("x", dtypes.f16), b.array_param("y", dtypes.f16)
        gx, gy = (b.global_view(p, dtypes.f16, GlobalLayout((n,), (1,))) for p in (x, y))
        layout = spatial(32).local(4)
        origin = [b.block_x * 128]
        r = b.load_global(gx, origin, layout)
        s = b.load_global(gy, origin, layout)
        b.store_global(gy, b.add(b.mul(r, r), s), origin)
    return b.program()


SQUARE_ADD_TEXT = """\
program square_add(n: int multiple_of=128 constant, x: f16*, y: f16*) num_threads=32
grid (n // 128, 1, 1)
min_blocks_per_sm 4
  g0 = global_view(x, f16, GlobalLayout(shape=(n,), strides=(1,)))
  g1 = global_view(y, f16, GlobalLayout(shape=(n,), strides=(1,)))
  r0: f16[128] spatial(32).local(4) = load_global(g0, [block_x * 128])
  r1: f16[128] spatial(32).local(4) = load_global(g1, [block_x * 128])
  r2: f16[128] spatial(32).local(4) = mul(r0, r0)
  r3: f16[128] spatial(32).local(4) = add(r2, r1)
  store_global(g1, r3, [block_x * 128])"""


def _range_message(program: str, value: object, num_threads: int) -> str:
    """The regex of `check_min_blocks_per_sm`'s message, whole."""
    most = SM_THREADS // num_threads
    return re.escape(
        f"min_blocks_per_sm of {program} is {value!r}; expected an int from 1 to {most} "
        f"(2048 threads per SM, {num_threads} per block)"
    )


# ---------------------------------------------------------------------------------- builder


def test_builder_stores_the_occupancy_on_the_program() -> None:
    assert square_add(4).min_blocks_per_sm == 4
    assert square_add().min_blocks_per_sm is None
    # everything else is the program without it (printed: each build has its own variables)
    assert str(dataclasses.replace(square_add(4), min_blocks_per_sm=None)) == str(square_add())


@pytest.mark.parametrize(("num_threads", "most"), [(32, 64), (96, 21), (128, 16), (1024, 2)])
def test_builder_accepts_one_to_the_blocks_an_sm_holds(num_threads: int, most: int) -> None:
    assert SM_THREADS // num_threads == most
    for blocks in (1, most):
        with ProgramBuilder("bounds", num_threads) as b:
            b.min_blocks_per_sm(blocks)
        assert b.program().min_blocks_per_sm == blocks


def test_builder_refuses_a_second_declaration() -> None:
    with ProgramBuilder("twice", 128) as b:
        b.min_blocks_per_sm(4)
        with pytest.raises(
            VerificationError,
            match=r"^min_blocks_per_sm declared twice: twice already asks for 4; "
            r"a program declares it at most once$",
        ):
            b.min_blocks_per_sm(2)
        # the same value again, or a bad one, is a second declaration too
        with pytest.raises(VerificationError, match=r"declared twice: twice already asks for 4"):
            b.min_blocks_per_sm(4)
        with pytest.raises(VerificationError, match=r"declared twice: twice already asks for 4"):
            b.min_blocks_per_sm(0)
    assert b.program().min_blocks_per_sm == 4


@pytest.mark.parametrize("num_threads", [32, 128, 1024])
@pytest.mark.parametrize("kind", ["0", "-1", "True", "2.0", "'4'", "most + 1"])
def test_builder_refuses_bad_values(num_threads: int, kind: str) -> None:
    value = {"0": 0, "-1": -1, "True": True, "2.0": 2.0, "'4'": "4"}.get(
        kind, SM_THREADS // num_threads + 1
    )
    with ProgramBuilder("refused", num_threads) as b:
        with pytest.raises(VerificationError, match=_range_message("refused", value, num_threads)):
            b.min_blocks_per_sm(value)  # type: ignore[arg-type]
        # a refused value records nothing: a good declaration still follows
        b.min_blocks_per_sm(1)
    assert b.program().min_blocks_per_sm == 1


# --------------------------------------------------------------------------------- verifier


@pytest.mark.parametrize("value", [0, -3, 17, True, False, 2.0, "4", 4.5])
def test_verifier_refuses_a_bad_occupancy(value: object) -> None:
    program = dataclasses.replace(vector_add(), min_blocks_per_sm=value)  # 128 threads
    with pytest.raises(VerificationError, match=_range_message("vector_add", value, 128)):
        verify(program)


@pytest.mark.parametrize("value", [None, 1, 16])
def test_verifier_accepts_a_good_occupancy(value: int | None) -> None:
    program = dataclasses.replace(vector_add(), min_blocks_per_sm=value)
    assert verify(program) is program


# ---------------------------------------------------------------------------------- printer


def test_printer_shows_the_occupancy_after_the_grid() -> None:
    assert str(square_add(4)) == SQUARE_ADD_TEXT
    lines = str(square_add(4, grid=False)).splitlines()
    assert lines[:2] == [SQUARE_ADD_TEXT.splitlines()[0], "min_blocks_per_sm 4"]
    assert "min_blocks_per_sm" not in str(square_add())
    assert "min_blocks_per_sm" not in str(vector_add())


# ------------------------------------------------------------------------------- specialize


def test_specialize_keeps_the_occupancy() -> None:
    fixed = specialize(square_add(4), {"n": 256})
    assert fixed.min_blocks_per_sm == 4
    assert str(fixed).splitlines()[:3] == [
        "program square_add(n: int multiple_of=128 constant=256, x: f16*, y: f16*) num_threads=32",
        "grid (2, 1, 1)",
        "min_blocks_per_sm 4",
    ]
    assert specialize(square_add(), {"n": 256}).min_blocks_per_sm is None
    # without constants: the block indices bounded by the grid (a new program), or none at all
    assert specialize(specialize(square_add(4), {"n": 256}), {}).min_blocks_per_sm == 4
    program = dataclasses.replace(vector_add(), min_blocks_per_sm=2)
    assert specialize(program, {}) is program


# -------------------------------------------------------------------------------- lowering


def _launch_bounds(source: str) -> list[str]:
    return re.findall(r"__launch_bounds__\(([^)]*)\)", source)


@pytest.mark.parametrize("arch", [None, "sm_80", "sm_90a"])
def test_lowering_passes_the_occupancy_to_launch_bounds(arch: str | None) -> None:
    constants = {"n": 256}
    with_bounds = lower(square_add(4), arch, constants=constants).source
    without = lower(square_add(), arch, constants=constants).source
    assert _launch_bounds(with_bounds) == ["32, 4"]
    assert _launch_bounds(without) == ["32"]
    # the only difference in the whole source
    assert with_bounds.replace("__launch_bounds__(32, 4)", "__launch_bounds__(32)") == without
    vector = lower(dataclasses.replace(vector_add(), min_blocks_per_sm=16), arch).source
    assert _launch_bounds(vector) == ["128, 16"]
    assert _launch_bounds(lower(vector_add(), arch).source) == ["128"]


# ------------------------------------------------------------------------------ interpreter


@settings(max_examples=10)
@given(blocks=st.integers(1, 64), seed=st.integers(0, 2**32 - 1))
def test_occupancy_changes_nothing_the_interpreter_computes(blocks: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 1 << 16, 256, dtype=np.uint16)  # every f16 code, NaNs included
    y = rng.integers(0, 1 << 16, 256, dtype=np.uint16)
    results = []
    for program in (square_add(), square_add(blocks), specialize(square_add(blocks), {"n": 256})):
        out = y.copy()
        run_reference(program, 256, x, out)
        results.append(out)
    np.testing.assert_array_equal(results[1], results[0])
    np.testing.assert_array_equal(results[2], results[0])


@settings(max_examples=10)
@given(program_cases(), st.data())
def test_occupancy_changes_no_random_program(case: ProgramCase, data: st.DataObject) -> None:
    blocks = data.draw(st.integers(1, SM_THREADS // case.program.num_threads), label="blocks")
    declared = dataclasses.replace(case.program, min_blocks_per_sm=blocks)
    assert verify(declared) is declared
    expected = case.fresh_arguments()
    run_reference(case.program, *expected, grid=case.grid)
    for program in (declared, specialize(declared, case.constants)):
        actual = case.fresh_arguments()
        run_reference(program, *actual, grid=case.grid)
        for got, want in zip(actual, expected):
            if isinstance(want, np.ndarray):
                np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------- register_dequant_matmul


@pytest.mark.parametrize("value", [-1, "2", True, 2.0])
def test_dequant_config_refuses_a_bad_occupancy(value: object) -> None:
    config = DequantConfig(min_blocks_per_sm=value)  # type: ignore[arg-type]
    message = f"register_dequant_matmul: min_blocks_per_sm={value!r}; expected an int >= 0"
    with pytest.raises(VerificationError, match=f"^{re.escape(message)}$"):
        register_dequant_matmul(dtypes.i4, 128, config)


def test_dequant_config_passes_the_occupancy_to_the_builder() -> None:
    assert register_dequant_matmul(dtypes.i4, 128, DequantConfig()).min_blocks_per_sm is None
    config = DequantConfig(warps=4, min_blocks_per_sm=16)
    assert register_dequant_matmul(dtypes.i4, 128, config).min_blocks_per_sm == 16
    # past what an SM holds of 128-thread blocks: the builder's refusal
    with pytest.raises(
        VerificationError, match=_range_message("register_dequant_matmul_i4", 17, 128)
    ):
        register_dequant_matmul(dtypes.i4, 128, DequantConfig(warps=4, min_blocks_per_sm=17))


# --------------------------------------------------------------------- registers (NVRTC)

DECODE_CONSTANTS = {"n": 57344, "k": 8192}
"""A decoding layer's weight: the constants the register-bound kernel is compiled for."""


def _decode_program(blocks: int) -> Program:
    config = DequantConfig(
        warps=4, units_k=8, split=4, late_scale=True, weights_as_a=True, min_blocks_per_sm=blocks
    )
    return register_dequant_matmul(dtypes.i2, 128, config)


def _ptxas_registers(source: str, arch: str, options: tuple[str, ...] = ()) -> tuple[dict, bytes]:
    """Compile `source` with ptxas's report: ({kernel: registers the log reports}, CUBIN)."""
    module = compile_cuda(source, arch, (*options, "--ptxas-options=-v"))
    reported = dict(
        re.findall(
            r"Compiling entry function '(\w+)'.*?Used (\d+) registers", module.log, re.DOTALL
        )
    )
    return {name: int(count) for name, count in reported.items()}, module.cubin


def test_occupancy_caps_the_registers_of_the_decoding_kernel() -> None:
    registers = {}
    for blocks in (0, 6):
        kernel = compile(_decode_program(blocks), "sm_90a", constants=DECODE_CONSTANTS)
        name = kernel.program.name
        assert name == "register_dequant_matmul_i2"
        bounds = "128" if blocks == 0 else "128, 6"
        assert _launch_bounds(kernel.source) == [bounds]
        counts = cubin_registers(kernel.cubin)
        reported, cubin = _ptxas_registers(kernel.source, "sm_90a", kernel.lowered.options)
        assert reported == counts == cubin_registers(cubin)
        assert list(counts) == [name]
        registers[blocks] = counts[name]
    cap = SM_REGISTERS // (6 * 128) // REGISTER_UNIT * REGISTER_UNIT
    assert cap == 80
    assert registers[0] > cap
    assert registers[6] <= cap


def test_cubin_registers_of_a_compiled_vector_add() -> None:
    kernel = compile(vector_add(), "sm_90a")
    counts = cubin_registers(kernel.cubin)
    assert list(counts) == ["vector_add"]
    assert 1 <= counts["vector_add"] <= 255
    reported, _ = _ptxas_registers(kernel.source, "sm_90a", kernel.lowered.options)
    assert reported == counts


TWO_KERNELS = """\
extern "C" __global__ void light(float* x) { x[threadIdx.x] += 1.0f; }

extern "C" __global__ void __launch_bounds__(64) heavy(const float* __restrict__ a, float* c) {
  float acc[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = a[threadIdx.x * 32 + i];
#pragma unroll
  for (int j = 0; j < 32; ++j)
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] = acc[i] * acc[(i + j) % 32] + a[j];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) sum += acc[i];
  c[threadIdx.x] = sum;
}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cubin_registers_names_each_kernel_of_a_cubin(arch: str) -> None:
    reported, cubin = _ptxas_registers(TWO_KERNELS, arch)
    counts = cubin_registers(cubin)
    assert counts == reported
    assert sorted(counts) == ["heavy", "light"]
    assert counts["light"] < counts["heavy"]


def test_cubin_registers_refuses_what_is_no_cubin() -> None:
    with pytest.raises(
        CompilationError, match=r"^not a CUBIN: expected a 64-bit little-endian ELF image$"
    ):
        cubin_registers(b"not an elf")
    cubin = compile(vector_add(), "sm_90a").cubin
    x86 = bytearray(cubin)
    struct.pack_into("<H", x86, 18, 62)  # EM_X86_64
    with pytest.raises(CompilationError, match=r"^not a CUBIN: ELF machine 62, expected 190"):
        cubin_registers(bytes(x86))
    with pytest.raises(CompilationError, match=r"^malformed CUBIN: "):
        cubin_registers(cubin[:0x40])  # the header only: the section headers are past its end


def _nv_info_offset(cubin: bytes) -> int:
    """The file offset of the ``.nv.info`` section of a CUBIN (read with the ELF header)."""
    (sections,) = struct.unpack_from("<Q", cubin, 0x28)
    entry_size, count, names = struct.unpack_from("<HHH", cubin, 0x3A)
    header = struct.Struct("<IIQQQQIIQQ")
    table = [header.unpack_from(cubin, sections + i * entry_size) for i in range(count)]
    strings = table[names][4]
    for name, *_, offset, _, _, _, _, _ in table:
        if cubin[strings + name : cubin.index(b"\0", strings + name)] == b".nv.info":
            return offset
    raise AssertionError("no .nv.info section")


def test_cubin_registers_refuses_an_unknown_attribute_form() -> None:
    cubin = bytearray(compile(vector_add(), "sm_90a").cubin)
    offset = _nv_info_offset(bytes(cubin))
    cubin[offset] = 9
    with pytest.raises(
        CompilationError,
        match=rf"^malformed CUBIN: \.nv\.info attribute form 9 at byte {offset}; expected one of",
    ):
        cubin_registers(bytes(cubin))

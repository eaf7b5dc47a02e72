"""Generated kernels run on the CPU under a CUDA emulation, against the reference interpreter.

No GPU is needed: the kernel source of `backend.lower` is compiled as C++ by g++ together with
a small shim that plays the CUDA runtime: every CUDA thread of a block is an OS thread,
``__syncthreads`` a `std::barrier` of the block, ``__shfl_sync`` an exchange through a barrier of
the warp, atomics GCC's atomic builtins, shared memory one static buffer per kernel, and the
``cp.async`` helpers (inline PTX, `cuda_codegen.ASYNC_COPY_SOURCE`) synchronous copies, and the
four primitives of the fast conversions (`backend.fast_conversions`, inline PTX too) exact host
functions. The float intrinsics (``__fadd_rn`` ...) are the host's IEEE float32 operations, as
NumPy's. Tensor-core instructions (``mma.sync``, ``ldmatrix``) are not emulated: programs run
here are lowered without an architecture (SIMT dots, plain loads) or have no tensor-core plan.

This checks the logic of the generated code (addresses, vectors and their packing, masks,
sub-byte atomics, replica stores, reductions in the interpreter's order, the SIMT dot, casts and
views) bit for bit against `ir.run_reference` on every example and on random programs of
`ir.testing`. It cannot check the PTX of ``cp.async``, the device-only f16/bf16 conversion
intrinsics or anything about timing; the GPU differential tests do.
"""

from __future__ import annotations

import ctypes
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from backend.cuda_codegen import ASYNC_COPY_SOURCE
from backend.fast_conversions import FAST_CONVERSION_PRIMITIVES
from backend.kernel import KernelArrayParam
from backend.lower import LoweredKernel, lower
from backend.tensor_core import TENSOR_CORE_SOURCE, mma_operand_layouts
from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.examples.matmul import matmul
from ir.examples.quantized_matmul import quantized_matmul
from ir.examples.softmax import row_softmax
from ir.examples.vector_add import vector_add
from ir.program import Program
from ir.testing import ProgramCase, program_cases
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import local, replicate, spatial
from layout_algebra.shared import shared_row_major, shared_row_major_swizzle

SHIM = r"""
#include <math.h>
#include <string.h>
#include <barrier>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(threads)
#define __shared__
#define __align__(bytes)

struct la_dim3 { unsigned x, y, z; };
static thread_local la_dim3 threadIdx;
static thread_local la_dim3 blockIdx;

struct la_block {
    std::barrier<>* block;
    std::vector<std::barrier<>*> warps;
    unsigned lanes[1024];
};
static thread_local la_block* la_current;

static inline void __syncthreads() { la_current->block->arrive_and_wait(); }

template <typename T>
static inline T __shfl_sync(unsigned, T value, int lane)
{
    const unsigned thread = threadIdx.x;
    const unsigned warp = thread / 32;
    unsigned bits;
    memcpy(&bits, &value, 4);
    la_current->lanes[thread] = bits;
    la_current->warps[warp]->arrive_and_wait();
    bits = la_current->lanes[warp * 32 + (lane & 31)];
    la_current->warps[warp]->arrive_and_wait();
    memcpy(&value, &bits, 4);
    return value;
}

static inline unsigned atomicAnd(unsigned* word, unsigned value)
{
    return __atomic_fetch_and(word, value, __ATOMIC_SEQ_CST);
}

static inline unsigned atomicOr(unsigned* word, unsigned value)
{
    return __atomic_fetch_or(word, value, __ATOMIC_SEQ_CST);
}

static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }

struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w)
{
    return uint4{x, y, z, w};
}
"""

ASYNC_EMULATION = r"""
static inline void la_cp_async_16(void* shared, const void* global) { memcpy(shared, global, 16); }
static inline void la_cp_async_8(void* shared, const void* global) { memcpy(shared, global, 8); }
static inline void la_cp_async_4(void* shared, const void* global) { memcpy(shared, global, 4); }
static inline void la_zfill(void* shared, const void* global, int size, int bytes)
{
    memset(shared, 0, size);
    memcpy(shared, global, bytes);
}
static inline void la_cp_async_zfill_16(void* s, const void* g, int n) { la_zfill(s, g, 16, n); }
static inline void la_cp_async_zfill_8(void* s, const void* g, int n) { la_zfill(s, g, 8, n); }
static inline void la_cp_async_zfill_4(void* s, const void* g, int n) { la_zfill(s, g, 4, n); }
static inline void la_cp_async_commit() {}
template <int pending>
static inline void la_cp_async_wait() {}
"""

FAST_CONVERSION_EMULATION = r"""
#define LA_FAST_FN inline

static inline unsigned int la_prmt(unsigned int a, unsigned int b, unsigned int selector)
{
    const unsigned long long bytes = ((unsigned long long)b << 32) | a;
    unsigned int result = 0;
    for (int n = 0; n < 4; ++n) {
        const unsigned int pick = (selector >> (4 * n)) & 7u;
        result |= (unsigned int)((bytes >> (8 * pick)) & 0xFFu) << (8 * n);
    }
    return result;
}

/* a * b + c on two 16-bit float lanes; every step of the fast conversions is exact. */
static inline unsigned int la_fma_lanes(unsigned int a, unsigned int b, unsigned int c, int e_bits,
                                        int m_bits)
{
    unsigned int result = 0;
    for (int lane = 0; lane < 2; ++lane) {
        const int shift = 16 * lane;
        const double x = la_decode_float((a >> shift) & 0xFFFFu, e_bits, m_bits, LA_IEEE_LIKE);
        const double y = la_decode_float((b >> shift) & 0xFFFFu, e_bits, m_bits, LA_IEEE_LIKE);
        const double z = la_decode_float((c >> shift) & 0xFFFFu, e_bits, m_bits, LA_IEEE_LIKE);
        const float value = (float)(x * y + z);
        result |= la_encode_float(value, e_bits, m_bits, LA_IEEE_LIKE) << shift;
    }
    return result;
}

inline unsigned int la_fma_f16x2(unsigned int a, unsigned int b, unsigned int c)
{
    return la_fma_lanes(a, b, c, 5, 10);
}

inline unsigned int la_fma_bf16x2(unsigned int a, unsigned int b, unsigned int c)
{
    return la_fma_lanes(a, b, c, 8, 7);
}

inline unsigned int la_sub_f32(unsigned int a, unsigned int b)
{
    return la_float_to_bits(la_bits_to_float(a) - la_bits_to_float(b));
}
"""

SHARED_BYTES = 232448
EMULATED_ARCH = "sm_90a"
"""The architecture the examples and the fast-conversion feature are lowered for."""


def _launcher(index: int, lowered: LoweredKernel) -> str:
    """The C entry ``la_launch_<index>(gx, gy, gz, args)`` running every block in turn."""
    arguments = ", ".join(
        f"(unsigned char*)args[{k}]" if isinstance(p, KernelArrayParam) else f"*(int*)args[{k}]"
        for k, p in enumerate(lowered.params)
    )
    threads = lowered.block_threads
    warps = ", ".join(str(min(32, threads - 32 * w)) for w in range(-(-threads // 32)))
    return f"""
extern "C" void la_launch_{index}(unsigned gx, unsigned gy, unsigned gz, void** args)
{{
    std::barrier<> block({threads});
    la_block state;
    state.block = &block;
    const int lanes[] = {{{warps}}};
    for (int count : lanes) state.warps.push_back(new std::barrier<>(count));
    for (unsigned z = 0; z < gz; ++z)
        for (unsigned y = 0; y < gy; ++y)
            for (unsigned x = 0; x < gx; ++x) {{
                std::vector<std::thread> threads;
                for (unsigned t = 0; t < {threads}; ++t)
                    threads.emplace_back([&, t] {{
                        la_current = &state;
                        threadIdx = la_dim3{{t, 0, 0}};
                        blockIdx = la_dim3{{x, y, z}};
                        kernel_{index}::la_entry_{index}({arguments});
                    }});
                for (std::thread& thread : threads) thread.join();
            }}
    for (std::barrier<>* warp : state.warps) delete warp;
}}
"""


def _translation_unit(kernels: Sequence[LoweredKernel]) -> str:
    parts = [SHIM]
    for index, lowered in enumerate(kernels):
        assert lowered.plans == (), "tensor-core plans need a GPU"
        source = lowered.source.replace(ASYNC_COPY_SOURCE.strip("\n"), ASYNC_EMULATION)
        source = source.replace(TENSOR_CORE_SOURCE.strip("\n"), "")
        source = source.replace(FAST_CONVERSION_PRIMITIVES.strip("\n"), FAST_CONVERSION_EMULATION)
        assert "asm" not in source
        source = source.replace(f" {lowered.entry}(", f" la_entry_{index}(", 1)
        parts.append(f"namespace kernel_{index} {{")
        parts.append(f"alignas(16) unsigned char la_smem[{SHARED_BYTES}];")
        parts.append(source)
        parts.append("}")
        parts.append(_launcher(index, lowered))
    return "\n".join(parts)


class Emulator:
    """Kernels compiled together into one shared library; `run(k, args, grid)` launches the
    k-th on NumPy arrays (mutated in place) and ints in parameter order."""

    def __init__(self, kernels: Sequence[LoweredKernel], directory: Path, compiler: str) -> None:
        self.kernels = list(kernels)
        source = directory / "kernels.cpp"
        library = directory / "kernels.so"
        source.write_text(_translation_unit(self.kernels))
        build = subprocess.run(
            [
                compiler,
                "-std=c++20",
                "-O0",
                "-ffp-contract=off",
                "-shared",
                "-fPIC",
                "-pthread",
                "-w",
                f"-I{directory}",
                "-o",
                str(library),
                str(source),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert build.returncode == 0, build.stderr[:4000]
        self.library = ctypes.CDLL(str(library))

    def run(self, index: int, arguments: Sequence[Any], grid: Sequence[int]) -> None:
        keep = []
        pointers = []
        for value in arguments:
            if isinstance(value, np.ndarray):
                pointers.append(value.ctypes.data_as(ctypes.c_void_p))
            else:
                boxed = ctypes.c_int(int(value))
                keep.append(boxed)
                pointers.append(ctypes.cast(ctypes.pointer(boxed), ctypes.c_void_p))
        array = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
        sizes = (tuple(grid) + (1, 1, 1))[:3]
        getattr(self.library, f"la_launch_{index}")(*(ctypes.c_uint(s) for s in sizes), array)


def _emulator(
    kernels: Sequence[LoweredKernel], factory: pytest.TempPathFactory, compiler: str
) -> Emulator:
    directory = factory.mktemp("emulation")
    for header in ("cuda_fp16.h", "cuda_bf16.h"):
        (directory / header).write_text("")
    return Emulator(kernels, directory, compiler)


def _random_codes(rng: np.random.Generator, dtype: DataType, count: int) -> np.ndarray:
    if dtype.is_float:
        values = rng.normal(0.0, 2.0, count).astype(np.float32)
        return dtype.encode(values)
    return rng.integers(0, 1 << dtype.nbits, count).astype(np.int64)


def packed_codes(rng: np.random.Generator, dtype: DataType, count: int) -> np.ndarray:
    """A 16-byte aligned uint8 buffer holding `count` random codes of `dtype`, padded to a
    multiple of 16 bytes."""
    stream = dtypes.pack(_random_codes(rng, dtype, count), dtype)
    padded = np.zeros(-(-max(stream.size, 1) // 16) * 16, dtype=np.uint8)
    padded[: stream.size] = stream
    return padded


@dataclass(frozen=True)
class FeatureCase:
    """A program written to exercise one part of the lowering, with inputs and a grid.

    `exact`: every operation is bit-exact on the GPU (else compare within a tolerance).
    `emulated_arch`: the architecture to lower for when emulated (None: none).
    """

    name: str
    program: Program
    arguments: tuple[Any, ...]
    grid: tuple[int, ...]
    exact: bool = True
    emulated_arch: str | None = None

    def fresh_arguments(self) -> list[Any]:
        """Copies of the arguments (arrays copied)."""
        return [a.copy() if isinstance(a, np.ndarray) else a for a in self.arguments]


def _copy_tiles(rng: np.random.Generator) -> FeatureCase:
    """copy_async of 16-byte vectors (row stride k8 * 8) into swizzled two-stage shared memory,
    rows and columns partly out of bounds, read back in another layout."""
    with ProgramBuilder("copy_tiles", 128) as b:
        m, n, k8 = b.int_param("m"), b.int_param("n"), b.int_param("chunks")
        x, y = b.array_param("x", dtypes.f16), b.array_param("y", dtypes.f16)
        layout = GlobalLayout((m, n), (k8 * 8, 1))
        source, target = b.global_view(x, dtypes.f16, layout), b.global_view(y, dtypes.f16, layout)
        buffer = b.shared_tensor(dtypes.f16, shared_row_major_swizzle(2, 32, 64, element_bits=16))
        with b.for_range(2) as stage:
            origin = [b.block_y * 64 + stage * 32, b.block_x * 64]
            b.copy_async(buffer, source, origin, [stage, 0, 0])
        b.copy_async_commit()
        b.copy_async_wait(0)
        b.sync()
        with b.for_range(2) as stage:
            tile = b.load_shared(buffer, spatial(32, 4).local(1, 16), [stage, 0, 0])
            b.store_global(target, tile, [b.block_y * 64 + stage * 32, b.block_x * 64])
    m, n, k8 = 100, 100, 13
    x_codes = packed_codes(rng, dtypes.f16, m * k8 * 8)
    y_codes = packed_codes(rng, dtypes.f16, m * k8 * 8)
    return FeatureCase("copy_tiles", b.program(), (m, n, k8, x_codes, y_codes), (2, 2))


def _swizzle_slices(rng: np.random.Generator) -> FeatureCase:
    """Slices of a swizzled shared tile at loop offsets, 8-byte vectors, a loop-carried sum."""
    with ProgramBuilder("swizzle_slices", 128) as b:
        x, y = b.array_param("x", dtypes.f16), b.array_param("y", dtypes.f32)
        source = b.global_view(x, dtypes.f16, GlobalLayout((32, 64), (64, 1)))
        target = b.global_view(y, dtypes.f32, GlobalLayout((32, 16), (16, 1)))
        buffer = b.shared_tensor(dtypes.f16, shared_row_major_swizzle(32, 64, element_bits=16))
        b.store_shared(buffer, b.load_global(source, [0, 0], spatial(32, 4).local(1, 16)))
        b.sync()
        slice_layout = spatial(32, 4).local(1, 4)
        total = b.register_tensor(dtypes.f32, slice_layout, 0.0)
        with b.for_range(0, 64, 16) as column:
            part = b.cast(b.load_shared(buffer, slice_layout, [0, column]), dtypes.f32)
            b.assign(total, b.add(total, part))
        b.store_global(target, total, [0, 0])
    arguments = (packed_codes(rng, dtypes.f16, 32 * 64), packed_codes(rng, dtypes.f32, 32 * 16))
    return FeatureCase("swizzle_slices", b.program(), arguments, (1,))


def _reductions(rng: np.random.Generator) -> FeatureCase:
    """Reductions over lanes (shuffles) and across warps (shared scratch), several dtypes."""
    layout = spatial(2, 64).local(2, 2)
    outputs = []
    with ProgramBuilder("reductions", 128) as b:
        for dtype, reduction, dim in (
            (dtypes.f32, "sum", 1),
            (dtypes.f32, "sum", 0),
            (dtypes.f16, "max", 1),
            (dtypes.i8, "min", 0),
            (dtypes.u4, "sum", 1),
            (dtypes.bf16, "min", 1),
        ):
            x = b.array_param(f"x{len(outputs)}", dtype)
            y = b.array_param(f"y{len(outputs)}", dtype)
            tile = b.load_global(
                b.global_view(x, dtype, GlobalLayout((4, 128), (128, 1))), [0, 0], layout
            )
            result = b.reduce(tile, dim, reduction, keepdim=True)
            shape = (1, 128) if dim == 0 else (4, 1)
            b.store_global(
                b.global_view(y, dtype, GlobalLayout(shape, (shape[1], 1))), result, [0, 0]
            )
            outputs.append((dtype, shape))
        warp_tile = spatial(4, 32).local(1, 3)
        z = b.array_param("z", dtypes.f32)
        w = b.array_param("w", dtypes.f32)
        tile = b.load_global(
            b.global_view(z, dtypes.f32, GlobalLayout((4, 96), (96, 1))), [0, 0], warp_tile
        )
        row_sum = b.reduce(tile, 1, "sum")
        b.store_global(b.global_view(w, dtypes.f32, GlobalLayout((4,), (1,))), row_sum, [0])
    arguments: list[Any] = []
    for dtype, shape in outputs:
        arguments += [
            packed_codes(rng, dtype, 4 * 128),
            packed_codes(rng, dtype, shape[0] * shape[1]),
        ]
    arguments += [packed_codes(rng, dtypes.f32, 4 * 96), packed_codes(rng, dtypes.f32, 4)]
    return FeatureCase("reductions", b.program(), tuple(arguments), (1,))


def _replicated_operands(rng: np.random.Generator) -> FeatureCase:
    """A dot and a broadcast whose operands every thread holds whole: register indices that
    depend on the thread."""
    with ProgramBuilder("replicated_operands", 32) as b:
        a, w, r, y = (
            b.array_param(name, dtype)
            for name, dtype in (
                ("a", dtypes.bf16),
                ("w", dtypes.bf16),
                ("r", dtypes.f32),
                ("y", dtypes.f32),
            )
        )
        a_tile = b.load_global(
            b.global_view(a, dtypes.bf16, GlobalLayout((8, 4), (4, 1))),
            [0, 0],
            replicate(32) * local(8, 4),
        )
        w_tile = b.load_global(
            b.global_view(w, dtypes.bf16, GlobalLayout((4, 16), (16, 1))),
            [0, 0],
            replicate(32) * local(4, 16),
        )
        row = b.load_global(
            b.global_view(r, dtypes.f32, GlobalLayout((1, 16), (16, 1))),
            [0, 0],
            replicate(32) * local(1, 16),
        )
        accumulator = b.register_tensor(dtypes.f32, spatial(8, 4).local(1, 4), 0.5)
        product = b.dot(a_tile, w_tile, accumulator)
        result = b.add(product, row)
        b.store_global(b.global_view(y, dtypes.f32, GlobalLayout((8, 16), (16, 1))), result, [0, 0])
    arguments = (
        packed_codes(rng, dtypes.bf16, 32),
        packed_codes(rng, dtypes.bf16, 64),
        packed_codes(rng, dtypes.f32, 16),
        packed_codes(rng, dtypes.f32, 128),
    )
    return FeatureCase("replicated_operands", b.program(), arguments, (1,))


def _views(rng: np.random.Generator) -> FeatureCase:
    """Register views: bytes as f4e2m1 pairs, f16 as bytes, i32 as f32 bits, f6e3m2 from
    three bytes."""
    with ProgramBuilder("views", 32) as b:
        p, q, r, s = (
            b.array_param(name, dtype)
            for name, dtype in (
                ("p", dtypes.u8),
                ("q", dtypes.f16),
                ("r", dtypes.i32),
                ("s", dtypes.u8),
            )
        )
        o1, o2, o3, o4 = (
            b.array_param(name, dtype)
            for name, dtype in (
                ("o1", dtypes.f32),
                ("o2", dtypes.u8),
                ("o3", dtypes.f32),
                ("o4", dtypes.f16),
            )
        )
        raw = b.load_global(
            b.global_view(p, dtypes.u8, GlobalLayout((64,), (1,))), [0], spatial(32).local(2)
        )
        pairs = b.view(raw, dtypes.f4e2m1, spatial(32).local(4))
        b.store_global(
            b.global_view(o1, dtypes.f32, GlobalLayout((128,), (1,))),
            b.cast(pairs, dtypes.f32),
            [0],
        )
        halves = b.load_global(
            b.global_view(q, dtypes.f16, GlobalLayout((32, 4), (4, 1))),
            [0, 0],
            spatial(32, 1).local(1, 4),
        )
        as_bytes = b.view(halves, dtypes.u8, spatial(32, 1).local(1, 8))
        b.store_global(
            b.global_view(o2, dtypes.u8, GlobalLayout((32, 8), (8, 1))), as_bytes, [0, 0]
        )
        ints = b.load_global(
            b.global_view(r, dtypes.i32, GlobalLayout((32,), (1,))), [0], spatial(32)
        )
        b.store_global(
            b.global_view(o3, dtypes.f32, GlobalLayout((32,), (1,))),
            b.view(ints, dtypes.f32, spatial(32)),
            [0],
        )
        triple = b.load_global(
            b.global_view(s, dtypes.u8, GlobalLayout((96,), (1,))), [0], spatial(32).local(3)
        )
        sixes = b.view(triple, dtypes.f6e3m2, spatial(32).local(4))
        b.store_global(
            b.global_view(o4, dtypes.f16, GlobalLayout((128,), (1,))),
            b.cast(sixes, dtypes.f16),
            [0],
        )
    ints = rng.integers(-(2**31), 2**31, 32).astype(np.int32).view(np.uint8).copy()
    arguments = (
        packed_codes(rng, dtypes.u8, 64),
        packed_codes(rng, dtypes.f16, 128),
        ints,
        packed_codes(rng, dtypes.u8, 96),
        packed_codes(rng, dtypes.f32, 128),
        packed_codes(rng, dtypes.u8, 256),
        packed_codes(rng, dtypes.f32, 32),
        packed_codes(rng, dtypes.f16, 128),
    )
    return FeatureCase("views", b.program(), arguments, (1,))


def _integer_ops(rng: np.random.Generator) -> FeatureCase:
    """Floor division and modulo (divisors made odd, so nonzero), shifts by in-range amounts,
    negation, absolute value and inversion on i8, u4 and i32."""
    with ProgramBuilder("integer_ops", 32) as b:
        layout = spatial(8, 4).local(1, 2)
        results = []
        for index, dtype in enumerate((dtypes.i8, dtypes.u4, dtypes.i32, dtypes.i3)):
            x = b.array_param(f"x{index}", dtype)
            y = b.array_param(f"y{index}", dtype)
            out = b.array_param(f"out{index}", dtypes.i32)
            shape = GlobalLayout((8, 8), (8, 1))
            a = b.load_global(b.global_view(x, dtype, shape), [0, 0], layout)
            d = b.or_(b.load_global(b.global_view(y, dtype, shape), [0, 0], layout), 1)
            shift = b.and_(d, min(dtype.nbits, 32) - 1 if dtype.nbits in (8, 32) else 1)
            terms = [
                b.div(a, d),
                b.mod(a, d),
                b.shl(a, shift),
                b.shr(a, shift),
                b.neg(a),
                b.abs(a),
                b.invert(a),
                b.mul(a, d),
                b.sub(a, d),
            ]
            total = b.cast(terms[0], dtypes.i32)
            for term in terms[1:]:
                total = b.xor(b.mul(total, 3), b.cast(term, dtypes.i32))
            b.store_global(b.global_view(out, dtypes.i32, shape), total, [0, 0])
            results.append(dtype)
    arguments: list[Any] = []
    for dtype in results:
        arguments += [
            packed_codes(rng, dtype, 64),
            packed_codes(rng, dtype, 64),
            packed_codes(rng, dtypes.i32, 64),
        ]
    return FeatureCase("integer_ops", b.program(), tuple(arguments), (1,))


def _shared_bytes(rng: np.random.Generator) -> FeatureCase:
    """Sub-byte elements of neighbouring threads in one byte (u4, u2) or across bytes
    (f6e3m2), stored to global and shared memory, with replicas that must not double-store."""
    with ProgramBuilder("shared_bytes", 64) as b:
        n = b.int_param("n")
        arrays = [
            (b.array_param(f"x{k}", t), b.array_param(f"y{k}", t), t)
            for k, t in enumerate((dtypes.u4, dtypes.f6e3m2, dtypes.u2))
        ]
        for x, y, dtype in arrays:
            view_x = b.global_view(x, dtype, GlobalLayout((n,), (1,)))
            view_y = b.global_view(y, dtype, GlobalLayout((n,), (1,)))
            values = b.load_global(view_x, [b.block_x * 32], replicate(2) * spatial(32))
            buffer = b.shared_tensor(dtype, shared_row_major(32))
            b.store_shared(buffer, values)
            b.sync()
            back = b.load_shared(buffer, spatial(32) * replicate(2))
            b.store_global(view_y, back, [b.block_x * 32])
            b.sync()
    n = 75
    arguments: list[Any] = [n]
    for _, _, dtype in arrays:
        arguments += [packed_codes(rng, dtype, n), packed_codes(rng, dtype, n)]
    return FeatureCase("shared_bytes", b.program(), tuple(arguments), (3,))


def _control_flow(rng: np.random.Generator) -> FeatureCase:
    """A runtime loop with a loop-carried accumulator and an if on the loop variable."""
    with ProgramBuilder("control_flow", 64) as b:
        steps = b.int_param("steps", 0, 16)
        x, y = b.array_param("x", dtypes.f8e4m3), b.array_param("y", dtypes.f32)
        source = b.global_view(x, dtypes.f8e4m3, GlobalLayout((steps, 256), (256, 1)))
        layout = spatial(64).local(4)
        total = b.register_tensor(dtypes.f32, layout, 1.0)
        with b.for_range(steps) as step:
            values = b.cast(b.load_global(source, [step, 0], layout), dtypes.f32)
            b.assign(total, b.add(total, values))
            with b.if_((step % 3).eq(1)):
                b.assign(total, b.mul(total, 0.5))
        b.store_global(b.global_view(y, dtypes.f32, GlobalLayout((256,), (1,))), total, [0])
    arguments = (7, packed_codes(rng, dtypes.f8e4m3, 7 * 256), packed_codes(rng, dtypes.f32, 256))
    return FeatureCase("control_flow", b.program(), arguments, (1,))


def _transcendentals(rng: np.random.Generator) -> FeatureCase:
    """Every unary float operation on f32, the inexact ones compared within a tolerance."""
    with ProgramBuilder("transcendentals", 32) as b:
        x = b.array_param("x", dtypes.f32)
        source = b.global_view(x, dtypes.f32, GlobalLayout((128,), (1,)))
        value = b.abs(b.load_global(source, [0], spatial(32).local(4)))
        for index, op in enumerate(
            ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "tanh", "neg")
        ):
            y = b.array_param(f"y{index}", dtypes.f32)
            b.store_global(
                b.global_view(y, dtypes.f32, GlobalLayout((128,), (1,))), b.unary(op, value), [0]
            )
    arguments = (
        packed_codes(rng, dtypes.f32, 128),
        *(packed_codes(rng, dtypes.f32, 128) for _ in range(9)),
    )
    return FeatureCase("transcendentals", b.program(), arguments, (1,), exact=False)


def _tensor_cores(rng: np.random.Generator) -> FeatureCase:
    """A dot in the layouts of ``mma.m16n8k16`` fed by loads ``ldmatrix`` can do: with an
    architecture the lowering uses tensor cores (equal within rounding), without one the SIMT
    dot and plain loads (bit-exact)."""
    a_layout, b_layout, c_layout = mma_operand_layouts(2, 2, 64, 64, 16)
    with ProgramBuilder("tensor_cores", 128) as b:
        x, w = b.array_param("x", dtypes.f16), b.array_param("w", dtypes.f16)
        y = b.array_param("y", dtypes.f32)
        x_shared = b.shared_tensor(dtypes.f16, shared_row_major_swizzle(64, 32, element_bits=16))
        w_shared = b.shared_tensor(dtypes.f16, shared_row_major_swizzle(32, 64, element_bits=16))
        x_view = b.global_view(x, dtypes.f16, GlobalLayout((64, 32), (32, 1)))
        w_view = b.global_view(w, dtypes.f16, GlobalLayout((32, 64), (64, 1)))
        b.store_shared(x_shared, b.load_global(x_view, [0, 0], spatial(32, 4).local(2, 8)))
        b.store_shared(w_shared, b.load_global(w_view, [0, 0], spatial(16, 8).local(2, 8)))
        b.sync()
        total = b.register_tensor(dtypes.f32, c_layout, 0.25)
        with b.for_range(0, 32, 16) as k:
            a_tile = b.load_shared(x_shared, a_layout, [0, k])
            b_tile = b.load_shared(w_shared, b_layout, [k, 0])
            b.assign(total, b.dot(a_tile, b_tile, total))
        b.store_global(b.global_view(y, dtypes.f32, GlobalLayout((64, 64), (64, 1))), total, [0, 0])
    arguments = (
        packed_codes(rng, dtypes.f16, 64 * 32),
        packed_codes(rng, dtypes.f16, 32 * 64),
        packed_codes(rng, dtypes.f32, 64 * 64),
    )
    return FeatureCase("tensor_cores", b.program(), arguments, (1,))


def _fast_casts(rng: np.random.Generator) -> FeatureCase:
    """Every source type of `backend.fast_conversions` cast to f16 and bf16, in whole words."""
    sources = (dtypes.u2, dtypes.i2, dtypes.u4, dtypes.i4, dtypes.u8, dtypes.i8, dtypes.f4e2m1)
    arguments: list[Any] = []
    with ProgramBuilder("fast_casts", 32) as b:
        layout = spatial(32, 1).local(1, 16)
        view = GlobalLayout((32, 16), (16, 1))
        for src in sources:
            x = b.array_param(f"x_{src.name}", src)
            codes = b.load_global(b.global_view(x, src, view), [0, 0], layout)
            arguments.append(packed_codes(rng, src, 32 * 16))
            for dst in (dtypes.f16, dtypes.bf16):
                y = b.array_param(f"y_{src.name}_{dst.name}", dst)
                b.store_global(b.global_view(y, dst, view), b.cast(codes, dst), [0, 0])
                arguments.append(packed_codes(rng, dst, 32 * 16))
    return FeatureCase(
        "fast_casts", b.program(), tuple(arguments), (1,), emulated_arch=EMULATED_ARCH
    )


def feature_cases() -> list[FeatureCase]:
    """Every feature program with fixed random inputs."""
    rng = np.random.default_rng(17)
    makers = (
        _copy_tiles,
        _swizzle_slices,
        _reductions,
        _replicated_operands,
        _views,
        _integer_ops,
        _shared_bytes,
        _control_flow,
        _transcendentals,
        _tensor_cores,
        _fast_casts,
    )
    return [make(rng) for make in makers]


def _example_cases() -> list[tuple[str, Program, list[Any], tuple[int, ...]]]:
    rng = np.random.default_rng(5)
    cases = []
    n = 1003
    cases.append(
        (
            "vector_add f16",
            vector_add(),
            [n, *(packed_codes(rng, dtypes.f16, n) for _ in range(3))],
            (1,),
        )
    )
    cases.append(
        (
            "vector_add u4",
            vector_add(dtypes.u4, 64, 256),
            [301, *(packed_codes(rng, dtypes.u4, 301) for _ in range(3))],
            (2,),
        )
    )
    rows = 9
    cases.append(
        (
            "row_softmax",
            row_softmax(64, dtypes.f16, 128),
            [
                rows,
                packed_codes(rng, dtypes.f16, rows * 64),
                packed_codes(rng, dtypes.f16, rows * 64),
            ],
            (3,),
        )
    )
    m, n, k = 70, 72, 40
    cases.append(
        (
            "matmul",
            matmul(),
            [m, n, k, *(packed_codes(rng, dtypes.f16, size) for size in (m * k, k * n, m * n))],
            (2, 2),
        )
    )
    for weight in (dtypes.u4, dtypes.f4e2m1, dtypes.i3, dtypes.f6e3m2):
        m, n, k = 20, 72, 48
        program = quantized_matmul(weight, group_size=32)
        scales = packed_codes(rng, dtypes.f16, -(-k // 32) * n)
        arguments = [
            m,
            n,
            k,
            packed_codes(rng, dtypes.f16, m * k),
            packed_codes(rng, weight, k * n),
            scales,
            packed_codes(rng, dtypes.f16, m * n),
        ]
        cases.append((f"quantized_matmul {weight}", program, arguments, (2, 1)))
    return cases


EXAMPLES = _example_cases()


@pytest.fixture(scope="module")
def example_emulator(tmp_path_factory: pytest.TempPathFactory, cxx_compiler: str) -> Emulator:
    """The examples lowered for sm_90a (none uses tensor cores; the quantized ones use the fast
    conversions, whose device primitives the emulation replaces)."""
    kernels = [lower(program, EMULATED_ARCH) for _, program, _, _ in EXAMPLES]
    return _emulator(kernels, tmp_path_factory, cxx_compiler)


@pytest.mark.parametrize("index", range(len(EXAMPLES)), ids=[c[0] for c in EXAMPLES])
def test_example_matches_reference(example_emulator: Emulator, index: int) -> None:
    name, program, arguments, grid = EXAMPLES[index]
    expected = [a.copy() if isinstance(a, np.ndarray) else a for a in arguments]
    run_reference(program, *expected, grid=grid)
    actual = [a.copy() if isinstance(a, np.ndarray) else a for a in arguments]
    example_emulator.run(index, actual, grid)
    exact = name != "row_softmax"
    for got, want in zip(actual, expected):
        if not isinstance(got, np.ndarray):
            continue
        if exact:
            np.testing.assert_array_equal(got, want)
        else:
            values = dtypes.f16.decode(got.view(np.uint16)).astype(np.float64)
            reference = dtypes.f16.decode(want.view(np.uint16)).astype(np.float64)
            np.testing.assert_allclose(values, reference, rtol=2e-3, atol=1e-6)


RANDOM_CASES = 80


@pytest.fixture(scope="module")
def random_cases() -> list[ProgramCase]:
    """A fixed sample of random programs (drawn once, deterministically)."""
    drawn: list[ProgramCase] = []

    @settings(
        max_examples=RANDOM_CASES,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(program_cases())
    def collect(case: ProgramCase) -> None:
        drawn.append(case)

    collect()
    return drawn


@pytest.fixture(scope="module")
def random_emulator(
    random_cases: list[ProgramCase], tmp_path_factory: pytest.TempPathFactory, cxx_compiler: str
) -> Emulator:
    kernels = [lower(case.program) for case in random_cases]
    return _emulator(kernels, tmp_path_factory, cxx_compiler)


def same_codes(dtype: DataType, actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Per element: the codes are equal, or both are NaN (the sign and payload of a NaN that
    arithmetic creates are not specified: NumPy's come from the host CPU)."""
    same = actual == expected
    if dtype.has_nan:
        same |= np.isnan(dtype.decode(actual)) & np.isnan(dtype.decode(expected))
    return same


def close_codes(dtype: DataType, actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Per element, for results of inexact operations (exp, log, ...): `same_codes`, or values
    within 4 units in the last place of the result type (1 for integers)."""
    got = dtype.decode(actual).astype(np.float64)
    want = dtype.decode(expected).astype(np.float64)
    close = same_codes(dtype, actual, expected)
    with np.errstate(invalid="ignore", over="ignore"):
        if not dtype.is_float:
            return close | (np.abs(got - want) <= 1)
        scale = np.maximum(np.abs(want), dtype.smallest_normal)
        unit = np.exp2(np.floor(np.log2(scale)) - dtype.mantissa_bits)
        return close | (np.abs(got - want) <= 4 * unit)


def test_random_programs_match_reference(
    random_cases: list[ProgramCase], random_emulator: Emulator
) -> None:
    for index, case in enumerate(random_cases):
        expected_arguments = case.fresh_arguments()
        run_reference(case.program, *expected_arguments, grid=case.grid)
        arguments = case.fresh_arguments()
        random_emulator.run(index, arguments, case.grid)
        actual = case.output_codes(arguments[case.output])
        expected = case.output_codes(expected_arguments[case.output])
        compare = same_codes if case.exact_on_gpu else close_codes
        bad = np.flatnonzero(~compare(case.output_dtype, actual, expected))
        assert not bad.size, (
            f"case {index} ({case.description}): {bad.size} codes differ, first at "
            f"{bad[0]}: {actual[bad[0]]} != {expected[bad[0]]}\n{case.program}"
        )


FEATURES = feature_cases()


@pytest.fixture(scope="module")
def feature_emulator(tmp_path_factory: pytest.TempPathFactory, cxx_compiler: str) -> Emulator:
    kernels = [lower(case.program, case.emulated_arch) for case in FEATURES]
    return _emulator(kernels, tmp_path_factory, cxx_compiler)


@pytest.mark.parametrize("index", range(len(FEATURES)), ids=[case.name for case in FEATURES])
def test_feature_program_matches_reference(feature_emulator: Emulator, index: int) -> None:
    case = FEATURES[index]
    expected = case.fresh_arguments()
    run_reference(case.program, *expected, grid=case.grid)
    actual = case.fresh_arguments()
    feature_emulator.run(index, actual, case.grid)
    for k, (got, want) in enumerate(zip(actual, expected)):
        if not isinstance(got, np.ndarray):
            continue
        if case.exact:
            assert np.array_equal(got, want), f"argument {k} differs"
        else:
            np.testing.assert_allclose(got.view(np.float32), want.view(np.float32), rtol=1e-5)

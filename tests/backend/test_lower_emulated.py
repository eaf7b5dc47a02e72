"""Generated kernels run on the CPU under a CUDA emulation, against the reference interpreter.

No GPU is needed: the kernel source of `backend.lower` is compiled as C++ by g++ together with a
small shim that plays the CUDA runtime: every CUDA thread of a block is an OS thread,
``__syncthreads`` a `std::barrier` of the block (a thread group's named barrier one of the group's
threads), ``__shfl_sync`` an exchange through a barrier of the warp, atomics GCC's atomic builtins,
shared memory one static buffer per kernel, and the ``cp.async`` helpers (inline PTX,
`cuda_codegen.ASYNC_COPY_SOURCE`) synchronous copies, a prefetch (`cuda_codegen.PREFETCH_SOURCE`) a
read of the byte it names, a combining store's add (`cuda_codegen.COMBINE_SOURCE`) a
compare-and-swap loop that rounds as the device does, a ticket (`cuda_codegen.TICKET_SOURCE`) an
acquire-release fetch-and-add, and the four primitives of the fast
conversions (`backend.fast_conversions`, inline PTX too) exact host functions. The float intrinsics
(``__fadd_rn`` ...) are the host's IEEE float32 operations, as NumPy's. The tensor-core helpers are
warp-collective host functions (exchanging operands through the warp's barrier): ``ldmatrix`` and
``stmatrix`` as the PTX ISA defines them, ``mma.sync`` m16n8k16 as the IR's `dot` (products added
in k order in float32), so a tensor-core kernel - the decode kernels of the GPU differential run -
matches the interpreter bit for bit here, where the GPU's tensor core matches it within its own
rounding.

This checks the logic of the generated code (addresses, vectors and their packing, masks,
sub-byte atomics, replica stores, reductions in the interpreter's order, the SIMT dot, casts and
views, fragment registers) bit for bit against `ir.run_reference` on every example, on the
decode kernels and on random programs of `ir.testing`. It cannot check the PTX of ``cp.async``,
``mma``, ``ldmatrix`` or ``stmatrix``, the device-only f16/bf16 conversion intrinsics or
anything about timing; the GPU differential tests do.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from backend.compile import lower_memoised
from backend.cuda_codegen import (
    ASYNC_COPY_SOURCE,
    COMBINE_SOURCE,
    GROUP_BARRIER_SOURCE,
    PLAIN_LAUNCH_SOURCE,
    PREFETCH_SOURCE,
    PROGRAMMATIC_LAUNCH_SOURCE,
    REGISTER_BUDGET_SOURCE,
    TICKET_SOURCE,
    VECTOR_COMBINE_WIDTHS,
    combine_helper,
)
from backend.fast_conversions import FAST_CONVERSION_PRIMITIVES
from backend.kernel import KernelArrayParam
from backend.lower import LoweredKernel, lower
from backend.tensor_core import STMATRIX_SOURCE, TENSOR_CORE_SOURCE, StmatrixPlan
from ir import dtypes, run_reference
from ir.dtypes import DataType
from ir.examples.matmul import matmul
from ir.examples.quantized_matmul import quantized_matmul
from ir.examples.softmax import row_softmax
from ir.examples.vector_add import vector_add
from ir.instructions import ThreadGroup
from ir.program import Program
from ir.testing import ProgramCase, codes_match, dot_cases, program_cases

SHIM = r"""
#include <math.h>
#include <string.h>
#include <barrier>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __constant__ static const
#define __align__(bytes)

/* CUDA's integer min and max, of one operand type (the kernel adds the mixed int and 64-bit
   ones). */
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }

struct la_dim3 { unsigned x, y, z; };
static thread_local la_dim3 threadIdx;
static thread_local la_dim3 blockIdx;

struct la_block {
    std::barrier<>* block;
    std::vector<std::barrier<>*> warps;
    std::mutex named_lock;
    std::barrier<>* named[16]; /* the thread groups' barriers, made at their first use */
    unsigned lanes[1024];
    unsigned fragments[1024][10]; /* an mma's operands per thread: a0-a3, b0-b1, c0-c3 */
    const void* rows[1024];       /* an ldmatrix's row address per thread */
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
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }

struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w)
{
    return uint4{x, y, z, w};
}
"""

GROUP_BARRIER_EMULATION = r"""
static inline void la_group_barrier(int id, int threads)
{
    std::barrier<>* named;
    {
        std::lock_guard<std::mutex> hold(la_current->named_lock);
        if (la_current->named[id] == nullptr) la_current->named[id] = new std::barrier<>(threads);
        named = la_current->named[id];
    }
    named->arrive_and_wait();
}
"""

REGISTER_BUDGET_EMULATION = r"""
template <unsigned N> static inline void la_registers_increase() {}
template <unsigned N> static inline void la_registers_decrease() {}
"""
"""A register budget changes no value: nothing to emulate."""

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

static inline unsigned int la_shf_r(unsigned int low, unsigned int high, unsigned int shift)
{
    return (unsigned int)((((unsigned long long)high << 32) | low) >> (shift & 31u));
}

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

TENSOR_CORE_EMULATION = r"""
/* ---- tensor-core helpers on the host: warp-collective through the warp's barrier ---- */
static inline unsigned int la_pack_b16x2(unsigned short low, unsigned short high)
{
    return (unsigned int)low | ((unsigned int)high << 16);
}

static inline float la_b16_value(unsigned int code, int bf16)
{
    return bf16 ? la_bits_to_float(code << 16) : (float)la_decode_float(code, 5, 10, LA_IEEE_LIKE);
}

/* The 16-bit element i (0-7 of A, 0-3 of B) of the thread's fragment registers. */
static inline unsigned int la_b16_element(const unsigned* registers, int i)
{
    return (registers[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
}

/* d += A B on one m16n8k16 block, the products added in k order in float32 from c: the IR's
   `dot` (ir.interpreter), which the tensor core matches up to its own summation order. */
static inline void la_mma_emulated(unsigned int& d0, unsigned int& d1, unsigned int& d2,
                                   unsigned int& d3, const unsigned int operands[6], int bf16)
{
    const unsigned thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
    unsigned* mine = la_current->fragments[thread];
    for (int r = 0; r < 6; ++r) mine[r] = operands[r];
    mine[6] = d0, mine[7] = d1, mine[8] = d2, mine[9] = d3;
    la_current->warps[warp]->arrive_and_wait();
    float a[16][16], b[16][8];
    for (unsigned t = 0; t < 32; ++t) {
        const unsigned* theirs = la_current->fragments[warp * 32 + t];
        for (int i = 0; i < 8; ++i)  /* PTX: A row groupID (+ 8), column 2 tig + (i & 1) (+ 8) */
            a[t / 4 + 8 * (i / 2 % 2)][2 * (t % 4) + i % 2 + 8 * (i / 4)] =
                la_b16_value(la_b16_element(theirs, i), bf16);
        for (int i = 0; i < 4; ++i)  /* B row 2 tig + (i & 1) (+ 8), column groupID */
            b[2 * (t % 4) + i % 2 + 8 * (i / 2)][t / 4] =
                la_b16_value(la_b16_element(theirs + 4, i), bf16);
    }
    unsigned int* outputs[4] = {&d0, &d1, &d2, &d3};
    for (int i = 0; i < 4; ++i) {  /* C row groupID (+ 8 for c2, c3), column 2 tig + (i & 1) */
        const int row = lane / 4 + 8 * (i / 2), col = 2 * (lane % 4) + i % 2;
        float sum = la_bits_to_float(mine[6 + i]);
        for (int k = 0; k < 16; ++k) sum = sum + a[row][k] * b[k][col];
        *outputs[i] = la_float_to_bits(sum);
    }
    la_current->warps[warp]->arrive_and_wait();
}

static inline void la_mma_m16n8k16_f16(unsigned int& d0, unsigned int& d1, unsigned int& d2,
    unsigned int& d3, unsigned int a0, unsigned int a1, unsigned int a2, unsigned int a3,
    unsigned int b0, unsigned int b1)
{
    const unsigned int operands[6] = {a0, a1, a2, a3, b0, b1};
    la_mma_emulated(d0, d1, d2, d3, operands, 0);
}

static inline void la_mma_m16n8k16_bf16(unsigned int& d0, unsigned int& d1, unsigned int& d2,
    unsigned int& d3, unsigned int a0, unsigned int a1, unsigned int a2, unsigned int a3,
    unsigned int b0, unsigned int b1)
{
    const unsigned int operands[6] = {a0, a1, a2, a3, b0, b1};
    la_mma_emulated(d0, d1, d2, d3, operands, 1);
}

/* ldmatrix: lane 8m + r gives row r of matrix m; register m of lane l gets row l / 4, columns
   2 (l % 4) and + 1 (.trans: rows 2 (l % 4) and + 1 of column l / 4). */
static inline void la_ldmatrix_emulated(unsigned int* out, int count, int trans, const void* row)
{
    const unsigned thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
    la_current->rows[thread] = row;
    la_current->warps[warp]->arrive_and_wait();
    for (int m = 0; m < count; ++m) {
        unsigned short halves[2];
        for (int h = 0; h < 2; ++h) {
            const unsigned short* source;
            if (trans) {
                source = (const unsigned short*)la_current->rows[warp * 32 + 8 * m +
                                                                  2 * (lane % 4) + h];
                halves[h] = source[lane / 4];
            } else {
                source = (const unsigned short*)la_current->rows[warp * 32 + 8 * m + lane / 4];
                halves[h] = source[2 * (lane % 4) + h];
            }
        }
        out[m] = la_pack_b16x2(halves[0], halves[1]);
    }
    la_current->warps[warp]->arrive_and_wait();
}

static inline void la_ldmatrix_x1(unsigned int& r0, const void* row)
{
    la_ldmatrix_emulated(&r0, 1, 0, row);
}
static inline void la_ldmatrix_x1_trans(unsigned int& r0, const void* row)
{
    la_ldmatrix_emulated(&r0, 1, 1, row);
}
static inline void la_ldmatrix_x2(unsigned int& r0, unsigned int& r1, const void* row)
{
    unsigned int out[2];
    la_ldmatrix_emulated(out, 2, 0, row);
    r0 = out[0], r1 = out[1];
}
static inline void la_ldmatrix_x2_trans(unsigned int& r0, unsigned int& r1, const void* row)
{
    unsigned int out[2];
    la_ldmatrix_emulated(out, 2, 1, row);
    r0 = out[0], r1 = out[1];
}
static inline void la_ldmatrix_x4(unsigned int& r0, unsigned int& r1, unsigned int& r2,
                                  unsigned int& r3, const void* row)
{
    unsigned int out[4];
    la_ldmatrix_emulated(out, 4, 0, row);
    r0 = out[0], r1 = out[1], r2 = out[2], r3 = out[3];
}
static inline void la_ldmatrix_x4_trans(unsigned int& r0, unsigned int& r1, unsigned int& r2,
                                        unsigned int& r3, const void* row)
{
    unsigned int out[4];
    la_ldmatrix_emulated(out, 4, 1, row);
    r0 = out[0], r1 = out[1], r2 = out[2], r3 = out[3];
}
"""

SHARED_BYTES = 232448


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
    for (std::barrier<>*& named : state.named) named = nullptr;
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
    for (std::barrier<>* named : state.named) delete named;
}}
"""


PREFETCH_EMULATION = r"""
/* A prefetch reads the byte it names (the address must be one the kernel may read). */
static inline void la_prefetch_l1(const void* global)
{
    (void)*(const volatile unsigned char*)global;
}
static inline void la_prefetch_l2(const void* global)
{
    (void)*(const volatile unsigned char*)global;
}
static inline void la_prefetch_l1_bits(const unsigned char* base, long long bit)
{
    la_prefetch_l1(base + (bit >> 3));
}
static inline void la_prefetch_l2_bits(const unsigned char* base, long long bit)
{
    la_prefetch_l2(base + (bit >> 3));
}
"""

TICKET_EMULATION = r"""
/* A ticket's add: acquire and release, as the device's atom.acq_rel.gpu (the barriers around it
   order the other threads' accesses, as std::barrier's completion does here). */
static inline int la_ticket_add(int* word, int value)
{
    return __atomic_fetch_add(word, value, __ATOMIC_ACQ_REL);
}
"""

COMBINE_EMULATION = r"""
/* A combining store's add: a compare-and-swap loop on the element, rounding as the device's
   red.global.add does (f32 flushing subnormal inputs and results to zero of their sign; f16
   and bf16 through the kernel's own correctly rounded adds). */
static inline float la_flush_subnormal(float value)
{
    return fabsf(value) < 1.17549435e-38f ? copysignf(0.0f, value) : value;
}
static inline void la_red_add_i32(la_u32* element, la_u32 code)
{
    __atomic_fetch_add(element, code, __ATOMIC_SEQ_CST);
}
static inline void la_red_add_f32(la_u32* element, la_u32 code)
{
    la_u32 seen = __atomic_load_n(element, __ATOMIC_SEQ_CST), next;
    do {
        const float sum = la_flush_subnormal(la_bits_to_float(seen))
                          + la_flush_subnormal(la_bits_to_float(code));
        next = la_float_to_bits(la_arithmetic_nan(la_flush_subnormal(sum)));
    } while (!__atomic_compare_exchange_n(element, &seen, next, false, __ATOMIC_SEQ_CST,
                                          __ATOMIC_SEQ_CST));
}
static inline void la_red_add_half(unsigned short* element, la_u32 code,
                                   la_u32 (*add)(la_u32, la_u32))
{
    unsigned short seen = __atomic_load_n(element, __ATOMIC_SEQ_CST), next;
    do {
        next = (unsigned short)add(seen, code);
    } while (!__atomic_compare_exchange_n(element, &seen, next, false, __ATOMIC_SEQ_CST,
                                          __ATOMIC_SEQ_CST));
}
static inline void la_red_add_f16(unsigned short* element, la_u32 code)
{
    la_red_add_half(element, code, la_hadd_f16);
}
static inline void la_red_add_bf16(unsigned short* element, la_u32 code)
{
    la_red_add_half(element, code, la_hadd_bf16);
}
/* A vector add is its elements' adds, in order, each atomic on its own. */
template <typename... Words>
static inline void la_red_add_f32_run(void* address, Words... words)
{
    const la_u32 codes[] = {words...};
    for (unsigned q = 0; q < sizeof...(words); ++q) la_red_add_f32((la_u32*)address + q, codes[q]);
}
template <typename... Words>
static inline void la_red_add_half_run(void* address, void (*add)(unsigned short*, la_u32),
                                       Words... words)
{
    const la_u32 pairs[] = {words...};
    for (unsigned q = 0; q < sizeof...(words); ++q) {
        add((unsigned short*)address + 2 * q, pairs[q] & 0xffffu);
        add((unsigned short*)address + 2 * q + 1, pairs[q] >> 16);
    }
}
"""


def _vector_combine_emulation() -> str:
    """The host's `combine_helper` of each type and width, by the runs above."""
    functions = []
    for dtype, widths in VECTOR_COMBINE_WIDTHS.items():
        for width in widths:
            words = width if dtype == "f32" else width // 2
            parameters = ", ".join(f"la_u32 w{q}" for q in range(words))
            arguments = ", ".join(f"w{q}" for q in range(words))
            run = (
                f"la_red_add_f32_run(address, {arguments})"
                if dtype == "f32"
                else f"la_red_add_half_run(address, la_red_add_{dtype}, {arguments})"
            )
            functions.append(
                f"static inline void {combine_helper(dtype, width)}(void* address, "
                f"{parameters})\n{{\n    {run};\n}}"
            )
    return "\n".join(functions) + "\n"


COMBINE_EMULATION += _vector_combine_emulation()

STMATRIX_EMULATION = r"""
/* ---- stmatrix on the host: lane 8m + r gives row r of matrix m; register m of lane l goes
   to row l / 4, columns 2 (l % 4) and + 1 (.trans: rows 2 (l % 4) and + 1 of column l / 4) ---- */
static inline void la_stmatrix_emulated(const unsigned int* in, int count, int trans, void* row)
{
    const unsigned thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
    la_current->rows[thread] = row;
    la_current->warps[warp]->arrive_and_wait();
    for (int m = 0; m < count; ++m) {
        for (int h = 0; h < 2; ++h) {
            const unsigned short half = (unsigned short)(in[m] >> (16 * h));
            if (trans) {
                unsigned short* target =
                    (unsigned short*)la_current->rows[warp * 32 + 8 * m + 2 * (lane % 4) + h];
                target[lane / 4] = half;
            } else {
                unsigned short* target =
                    (unsigned short*)la_current->rows[warp * 32 + 8 * m + lane / 4];
                target[2 * (lane % 4) + h] = half;
            }
        }
    }
    la_current->warps[warp]->arrive_and_wait();
}

static inline void la_stmatrix_x1(void* row, unsigned int r0)
{
    la_stmatrix_emulated(&r0, 1, 0, row);
}
static inline void la_stmatrix_x1_trans(void* row, unsigned int r0)
{
    la_stmatrix_emulated(&r0, 1, 1, row);
}
static inline void la_stmatrix_x2(void* row, unsigned int r0, unsigned int r1)
{
    const unsigned int in[2] = {r0, r1};
    la_stmatrix_emulated(in, 2, 0, row);
}
static inline void la_stmatrix_x2_trans(void* row, unsigned int r0, unsigned int r1)
{
    const unsigned int in[2] = {r0, r1};
    la_stmatrix_emulated(in, 2, 1, row);
}
static inline void la_stmatrix_x4(void* row, unsigned int r0, unsigned int r1, unsigned int r2,
                                  unsigned int r3)
{
    const unsigned int in[4] = {r0, r1, r2, r3};
    la_stmatrix_emulated(in, 4, 0, row);
}
static inline void la_stmatrix_x4_trans(void* row, unsigned int r0, unsigned int r1,
                                        unsigned int r2, unsigned int r3)
{
    const unsigned int in[4] = {r0, r1, r2, r3};
    la_stmatrix_emulated(in, 4, 1, row);
}
"""


def _translation_unit(kernels: Sequence[tuple[int, LoweredKernel]]) -> str:
    """One C++ file of the kernels given with their indices, each launched by
    ``la_launch_<index>``."""
    parts = [SHIM]
    for index, lowered in kernels:
        source = lowered.source.replace(ASYNC_COPY_SOURCE.strip("\n"), ASYNC_EMULATION)
        source = source.replace(GROUP_BARRIER_SOURCE.strip("\n"), GROUP_BARRIER_EMULATION)
        source = source.replace(REGISTER_BUDGET_SOURCE.strip("\n"), REGISTER_BUDGET_EMULATION)
        source = source.replace(TENSOR_CORE_SOURCE.strip("\n"), TENSOR_CORE_EMULATION)
        source = source.replace(STMATRIX_SOURCE.strip("\n"), STMATRIX_EMULATION)
        source = source.replace(PREFETCH_SOURCE.strip("\n"), PREFETCH_EMULATION)
        source = source.replace(COMBINE_SOURCE.strip("\n"), COMBINE_EMULATION)
        source = source.replace(TICKET_SOURCE.strip("\n"), TICKET_EMULATION)
        # One launch at a time: a link of a chain has nothing to wait for.
        source = source.replace(PROGRAMMATIC_LAUNCH_SOURCE.strip("\n"), PLAIN_LAUNCH_SOURCE)
        source = source.replace(FAST_CONVERSION_PRIMITIVES.strip("\n"), FAST_CONVERSION_EMULATION)
        assert "asm" not in source
        source = source.replace(f" {lowered.entry}(", f" la_entry_{index}(", 1)
        parts.append(f"namespace kernel_{index} {{")
        # The kernel's own (mixed-width) min and max would hide the shim's in the namespace.
        parts.append("using ::max;\nusing ::min;")
        parts.append(f"alignas(16) unsigned char la_smem[{SHARED_BYTES}];")
        parts.append(source)
        parts.append("}")
        parts.append(_launcher(index, lowered))
    return "\n".join(parts)


def _balanced_parts(
    kernels: Sequence[tuple[int, LoweredKernel]], count: int
) -> list[list[tuple[int, LoweredKernel]]]:
    """The kernels (with their indices) dealt into at most `count` non-empty parts of about the
    same source length (longest first, each to the lightest part)."""
    parts: list[list[tuple[int, LoweredKernel]]] = [[] for _ in range(max(1, count))]
    weights = [0] * len(parts)
    for index, kernel in sorted(kernels, key=lambda pair: -len(pair[1].source)):
        lightest = weights.index(min(weights))
        parts[lightest].append((index, kernel))
        weights[lightest] += len(kernel.source)
    return [part for part in parts if part]


COMPILE_FLAGS = ["-std=c++20", "-O0", "-ffp-contract=off", "-shared", "-fPIC", "-pthread", "-w"]

LARGE_SOURCE = 1_000_000
"""A kernel of a longer source (the f16 matmul of grouped tiles, its tile origin written out at
every use: 5 MB of lines of 10,000 characters) is compiled alone, at ``-Og``: g++ takes 18 s on
it at ``-O0`` and 8 s at ``-Og`` (on the usual kernels ``-Og`` takes twice ``-O0``'s time).
Neither changes a value: no fast-math, ``-ffp-contract=off`` (no fused multiply-adds), and
``-fwrapv -fno-strict-aliasing`` keep the two assumptions ``-Og`` could otherwise draw from the
source (signed overflow, type-based aliasing) out of the code, as at ``-O0``."""
LARGE_FLAGS = ["-Og", "-fwrapv", "-fno-strict-aliasing"]

CHUNK_SOURCE = 1_500_000
"""Kernels are compiled in parts while the later ones are still being lowered (the lowering
is Python on one core, g++ runs on another): a part starts once its sources reach this many
characters (a few seconds of g++) and a core is free."""


class Emulator:
    """Kernels compiled into shared libraries (a few, built at the same time, one per core;
    while `kernels`, an iterable, is still being drawn - lowered - the parts drawn so far are
    compiled on the cores the lowering leaves); `run(k, args, grid)` launches the k-th on NumPy
    arrays (mutated in place) and ints in parameter order. A kernel object given again (the
    same lowering of the same program, for other arguments) is compiled once."""

    def __init__(self, kernels: Iterable[LoweredKernel], directory: Path, compiler: str) -> None:
        self.kernels: list[LoweredKernel] = []
        self.directory, self.compiler = directory, compiler
        cores = len(os.sched_getaffinity(0))
        self._builds: list[tuple[list[tuple[int, LoweredKernel]], Path, subprocess.Popen]] = []
        self._targets: dict[int, int] = {}  # a kernel's index -> the index it is compiled as
        first: dict[int, int] = {}  # id(kernel) -> the index it is compiled as
        pending: list[tuple[int, LoweredKernel]] = []
        try:
            for index, kernel in enumerate(kernels):
                self.kernels.append(kernel)
                if id(kernel) in first:
                    self._targets[index] = first[id(kernel)]
                    continue
                first[id(kernel)] = self._targets[index] = index
                if len(kernel.source) > LARGE_SOURCE:
                    self._start([(index, kernel)], LARGE_FLAGS)
                    continue
                pending.append((index, kernel))
                size = sum(len(k.source) for _, k in pending)
                if size >= CHUNK_SOURCE and self._running() < max(1, cores - 1):
                    self._start(pending)
                    pending = []
        except BaseException:  # a lowering failed: no compiler left running behind the test
            for _, _, build in self._builds:
                build.kill()
                build.communicate()
            raise
        for part in _balanced_parts(pending, max(1, cores - self._running())):
            self._start(part)
        self.libraries: dict[int, ctypes.CDLL] = {}
        for part, library, build in self._builds:
            _, errors = build.communicate()
            assert build.returncode == 0, errors.decode()[:4000]
            loaded = ctypes.CDLL(str(library))
            self.libraries.update((index, loaded) for index, _ in part)

    def _running(self) -> int:
        return sum(build.poll() is None for _, _, build in self._builds)

    def _start(self, part: list[tuple[int, LoweredKernel]], flags: Sequence[str] = ()) -> None:
        """g++ on `part` in the background."""
        number = len(self._builds)
        source = self.directory / f"kernels_{number}.cpp"
        library = self.directory / f"kernels_{number}.so"
        source.write_text(_translation_unit(part))
        command = [self.compiler, *COMPILE_FLAGS, *flags, f"-I{self.directory}"]
        command += ["-o", str(library), str(source)]
        self._builds.append((part, library, subprocess.Popen(command, stderr=subprocess.PIPE)))

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
        target = self._targets[index]
        launch = getattr(self.libraries[target], f"la_launch_{target}")
        launch(*(ctypes.c_uint(s) for s in sizes), array)


def _emulator(
    kernels: Iterable[LoweredKernel], factory: pytest.TempPathFactory, compiler: str
) -> Emulator:
    directory = factory.mktemp("emulation")
    for header in ("cuda_fp16.h", "cuda_bf16.h"):
        (directory / header).write_text("")
    return Emulator(kernels, directory, compiler)


_features_spec = importlib.util.spec_from_file_location(
    "feature_programs", Path(__file__).with_name("feature_programs.py")
)
feature_programs = importlib.util.module_from_spec(_features_spec)
sys.modules["feature_programs"] = feature_programs
_features_spec.loader.exec_module(feature_programs)
FeatureCase = feature_programs.FeatureCase
feature_cases = feature_programs.feature_cases
packed_codes = feature_programs.packed_codes
EMULATED_ARCH = feature_programs.EMULATED_ARCH
"""The architecture the examples and the fast-conversion feature are lowered for."""


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
    for name, program in (("matmul", matmul()), ("matmul staged", matmul(staged_store=True))):
        # The staged store's C tile takes the ring's memory (`ir.shared_reuse`).
        codes = (packed_codes(rng, dtypes.f16, size) for size in (m * k, k * n, m * n))
        cases.append((name, program, [m, n, k, *codes], (2, 2)))
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
    kernels = [lower(program, EMULATED_ARCH, wgmma=False) for _, program, _, _ in EXAMPLES]
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
    return _sample(program_cases(), RANDOM_CASES)


def _sample(strategy: Any, count: int) -> list[ProgramCase]:
    """`count` cases of a hypothesis strategy, drawn deterministically."""
    drawn: list[ProgramCase] = []

    @settings(
        max_examples=count,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(strategy)
    def collect(case: ProgramCase) -> None:
        drawn.append(case)

    collect()
    return drawn


@pytest.fixture(scope="module")
def random_emulator(
    random_cases: list[ProgramCase], tmp_path_factory: pytest.TempPathFactory, cxx_compiler: str
) -> Emulator:
    kernels = (lower(case.program, constants=case.constants) for case in random_cases)
    return _emulator(kernels, tmp_path_factory, cxx_compiler)


def same_codes(dtype: DataType, actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Per element: the codes are equal, or the expected one is a computed NaN and the actual
    one a NaN of its sign (the contract's rule, `ir.testing.codes_match`)."""
    return codes_match(dtype, actual, expected)


def close_codes(dtype: DataType, actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Per element, for results of inexact operations (exp, log, ...): `same_codes`, or values
    within 4 units in the last place of the result type (1 for integers)."""
    close = same_codes(dtype, actual, expected)
    with np.errstate(invalid="ignore", over="ignore"):
        got = dtype.decode(actual).astype(np.float64)
        want = dtype.decode(expected).astype(np.float64)
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
    kernels = [lower(case.program, case.emulated_arch, wgmma=False) for case in FEATURES]
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


# ------------------------------------------------------------------ tensor cores, emulated

_examples_spec = importlib.util.spec_from_file_location(
    "gpu_examples_main", Path(__file__).with_name("gpu_examples_main.py")
)
gpu_examples_main = sys.modules.get("gpu_examples_main") or importlib.util.module_from_spec(
    _examples_spec
)
if "gpu_examples_main" not in sys.modules:
    sys.modules["gpu_examples_main"] = gpu_examples_main
    _examples_spec.loader.exec_module(gpu_examples_main)
# Not the producer-warp forms: their bulk copies pass between thread groups, which takes TMA
# (not emulated here); the GPU runs them.
DECODE = [
    case
    for case in gpu_examples_main.decode_cases(np.random.default_rng(11))
    if not any(isinstance(i, ThreadGroup) for i in case[1].walk())
]
"""The decode kernel in the configurations of the GPU differential run (late scales, the fused
split-k sum with tickets, partial sums, zero points with bf16, a deep ring, the weights as A,
several row blocks), its split-k sum, its packing program, the dequantizing program and the
f16 matmul with a ring of swizzled stages, lowered for sm_90a: mma.sync, ldmatrix and stmatrix (the
staged stores of C, the dequantizing program's tiles) included. wgmma and TMA have no host
emulation, so every sm_90a lowering here keeps mma.sync (``wgmma=False``: the warpgroup matmul forms
run their mma.sync fallback, their loads written at the dot) and ``cp.async`` for bulk copies
(``tma=False``); the GPU differential run covers wgmma and TMA."""


def _lowered_once(programs: Iterable[Program], **options: Any) -> Iterator[LoweredKernel]:
    """``lower(program, "sm_90a", **options)`` of each program, in turn (for `Emulator` to
    compile the first while the others are lowered), through `backend.compile`'s memo of
    lowerings: a program equal to one before (the decode cases build each f16 matmul twice, one
    after the other, once for each problem size) gives that one's kernel, compiled once."""
    for program in programs:
        yield lower_memoised(program, "sm_90a", **options)


@pytest.fixture(scope="module")
def decode_emulator(tmp_path_factory: pytest.TempPathFactory, cxx_compiler: str) -> Emulator:
    programs = (program for _, program, _, _, _ in DECODE)
    emulator = _emulator(
        _lowered_once(programs, wgmma=False, tma=False), tmp_path_factory, cxx_compiler
    )
    kernels = emulator.kernels
    assert len(kernels) == len(DECODE)
    assert any(kernel.plans for kernel in kernels)
    assert any(isinstance(plan, StmatrixPlan) for kernel in kernels for plan in kernel.plans)
    return emulator


@pytest.mark.parametrize("index", range(len(DECODE)), ids=[case[0] for case in DECODE])
def test_tensor_core_kernel_matches_reference_bit_for_bit(
    decode_emulator: Emulator, index: int
) -> None:
    """With mma.sync emulated as the IR's dot (products added in k order in float32) and
    ldmatrix as its PTX definition, the generated code of the tensor-core kernels - addresses,
    fragment registers, the fast conversions, late scales, tickets and partial sums - gives
    the interpreter's results bit for bit (on the GPU they agree within the tensor core's
    rounding)."""
    _, program, arguments, grid, _ = DECODE[index]
    expected = [a.copy() if isinstance(a, np.ndarray) else a for a in arguments]
    run_reference(program, *expected, grid=grid)
    actual = [a.copy() if isinstance(a, np.ndarray) else a for a in arguments]
    decode_emulator.run(index, actual, grid)
    for k, (got, want) in enumerate(zip(actual, expected)):
        if isinstance(got, np.ndarray):
            assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), f"argument {k}"


HOISTED = [
    case
    for case in DECODE
    if "stream_k" in case[0] or ("group_m" in case[0] and case[0].startswith("matmul"))
]
"""The kernels above whose block-invariant values divide by runtime values (stream-K's
segment bounds, the f16 matmul's grouped tile order's origin; the prefill kernel's groups are
the launch grid's, with no division), lowered again with those values computed once at the
kernel's start (``hoist_invariants=True``)."""


@pytest.fixture(scope="module")
def hoisted_emulator(tmp_path_factory: pytest.TempPathFactory, cxx_compiler: str) -> Emulator:
    programs = (program for _, program, _, _, _ in HOISTED)
    options = {"wgmma": False, "tma": False, "hoist_invariants": True}
    emulator = _emulator(_lowered_once(programs, **options), tmp_path_factory, cxx_compiler)
    kernels = emulator.kernels
    assert len(kernels) == len(HOISTED)
    assert all("const int la_inv0 = " in kernel.source or "la_w_la_inv0 = " in kernel.source
               for kernel in kernels)  # fmt: skip
    return emulator


@pytest.mark.parametrize("index", range(len(HOISTED)), ids=[case[0] for case in HOISTED])
def test_hoisted_invariants_keep_the_results_bit_for_bit(
    hoisted_emulator: Emulator, index: int
) -> None:
    """Computed once at the kernel's start, the hoisted values give the interpreter's results
    bit for bit, as the kernels that compute them at every use do."""
    _, program, arguments, grid, _ = HOISTED[index]
    expected = [a.copy() if isinstance(a, np.ndarray) else a for a in arguments]
    run_reference(program, *expected, grid=grid)
    actual = [a.copy() if isinstance(a, np.ndarray) else a for a in arguments]
    hoisted_emulator.run(index, actual, grid)
    for k, (got, want) in enumerate(zip(actual, expected)):
        if isinstance(got, np.ndarray):
            assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), f"argument {k}"


RANDOM_DOT_CASES = 40


@pytest.fixture(scope="module")
def tensor_core_cases() -> list[tuple[ProgramCase, LoweredKernel]]:
    """Of a fixed sample of random dot programs (`ir.testing.dot_cases`, drawn once), those
    whose lowering for sm_90a plans mma or ldmatrix, with that lowering."""
    drawn = _sample(dot_cases(), RANDOM_DOT_CASES)
    lowered = [
        (case, lower(case.program, "sm_90a", constants=case.constants, wgmma=False))
        for case in drawn
    ]
    return [(case, kernel) for case, kernel in lowered if kernel.plans]


def test_random_tensor_core_programs_match_reference_bit_for_bit(
    tensor_core_cases: list[tuple[ProgramCase, LoweredKernel]],
    tmp_path_factory: pytest.TempPathFactory,
    cxx_compiler: str,
) -> None:
    """The random dot programs with a tensor-core plan, lowered for sm_90a and emulated: every
    output code equals the interpreter's (the dot's k-order sum is exact here)."""
    assert len(tensor_core_cases) >= 5, "too few programs of the sample have a tensor-core plan"
    kernels = [kernel for _, kernel in tensor_core_cases]
    emulator = _emulator(kernels, tmp_path_factory, cxx_compiler)
    for index, (case, _) in enumerate(tensor_core_cases):
        expected_arguments = case.fresh_arguments()
        run_reference(case.program, *expected_arguments, grid=case.grid)
        arguments = case.fresh_arguments()
        emulator.run(index, arguments, case.grid)
        actual = case.output_codes(arguments[case.output])
        expected = case.output_codes(expected_arguments[case.output])
        bad = np.flatnonzero(~same_codes(case.output_dtype, actual, expected))
        assert not bad.size, (
            f"case {index} ({case.description}): {bad.size} codes differ, first at "
            f"{bad[0]}: {actual[bad[0]]} != {expected[bad[0]]}\n{case.program}"
        )

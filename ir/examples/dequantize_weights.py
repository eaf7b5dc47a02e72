"""Packed low-bit weights expanded to f16 or bf16: the inverse of `pack_weights_program`, scaled.

``dequantize(n, k, packed, scales[, zeros], w)`` writes the (k, n) dequantized weights ``w =
act((W - Z) * S)`` row-major, from the packed codes (`ir.examples.packed_weights`, i32 of
`WeightFormat.shape`) and the packed per-group scales (and zero points) of `pack_scales`, each
group `group_size` rows of k: what `QuantizedLinear.dequantize_with_torch` computes, bit for
bit (the cast is exact; ``W - Z`` and the product each round once in the activation type, as f32
arithmetic rounded to it does for these operands; a NaN code gives a NaN, positive by the
contract's arithmetic rule), for a matmul of many rows (dequantize-then-matmul) to read.

Each block expands a tile of `units_k` x `warps` units (`tile_layouts`): it loads its packed
words, `view`s them as the weight type in the packed order, casts them into the mma B-fragment
order (`tile_value_layout`; the fast conversions on a GPU), subtracts the zero-point row and
multiplies by the scale row of the tile's group (loaded as 16-byte vectors of packed scales and
viewed in the weights' scale layout, as the decode kernel does), and stores the tile through
shared memory as rows of 16-byte vectors. The program declares its grid, ``(n // (64 *
warps), k // (16 * units_k))``; `n` and `k` are compile-time constants (a kernel per weight
shape, so every access is shown in bounds), `n` a multiple of 64 * warps, `k` of
`group_size`, and `group_size` of 16 * units_k.
"""

from __future__ import annotations

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.examples.packed_weights import (
    UNIT_K,
    UNIT_LANES,
    UNIT_N,
    cast_codes,
    check_activation_options,
    check_weight_dtype,
    tile_layouts,
    tile_value_layout,
    unit_scale_layout,
)
from ir.program import Program
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import local, spatial
from layout_algebra.shared import shared_row_major_swizzle

VECTOR = 8
"""Halves per thread per store: one 16-byte vector."""


def dequantize_weights_program(
    weight_dtype: DataType,
    group_size: int,
    activation_dtype: DataType = dtypes.f16,
    *,
    zero_points: bool = False,
    warps: int = 4,
    units_k: int = 1,
) -> Program:
    """The dequantizing program of the module docstring for `weight_dtype` codes (a weight type
    of `check_weight_dtype`), `group_size` rows per scale group, `activation_dtype` f16 or
    bf16, with or without `zero_points`, blocks of `warps` warps and `units_k` units along k.
    Raises VerificationError for anything else."""
    weight_dtype = check_weight_dtype(weight_dtype)
    act = activation_dtype
    check_activation_options("dequantize_weights_program", act, zero_points)
    for name, value, most in (("warps", warps, 32), ("units_k", units_k, 64)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
            raise VerificationError(
                f"dequantize_weights_program: {name}={value!r}; expected an int from 1 to {most}"
            )
    block_n, block_k = UNIT_N * warps, UNIT_K * units_k
    valid_group = isinstance(group_size, int) and not isinstance(group_size, bool)
    if not valid_group or group_size < block_k or group_size % block_k:
        raise VerificationError(
            f"dequantize_weights_program: group_size={group_size!r}; expected a positive "
            f"multiple of the tile's {block_k} rows (16 * units_k)"
        )
    nbits = weight_dtype.nbits
    code_layout, word_layout = tile_layouts(nbits, warps, units_k, 1)
    value_layout = tile_value_layout(warps, units_k, 1)
    row_load = spatial(1, warps) * unit_scale_layout()
    row_view = reduce_layout(value_layout, [0], keepdims=True)
    row_words = UNIT_LANES * nbits
    threads = UNIT_LANES * warps
    vectors_per_row = block_n // VECTOR
    rows_per_pass = threads // vectors_per_row if threads >= vectors_per_row else 1
    store_layout = (
        local(block_k // rows_per_pass, 1).spatial(rows_per_pass, vectors_per_row)
        if threads >= vectors_per_row
        else local(block_k, vectors_per_row // threads).spatial(1, threads)
    ) * local(1, VECTOR)
    name = f"dequantize_{weight_dtype.name}_weights"
    name += ("" if act == dtypes.f16 else f"_{act.name}") + ("_zp" if zero_points else "")
    with ProgramBuilder(name, UNIT_LANES * warps) as b:
        n = b.int_param("n", lo=block_n, multiple_of=block_n, constant=True)
        k = b.int_param("k", lo=group_size, multiple_of=group_size, constant=True)
        packed = b.array_param("packed", dtypes.i32)
        scales = b.array_param("scales", act)
        zeros = b.array_param("zeros", act) if zero_points else None
        w = b.array_param("w", act)
        b.grid(n // block_n, k // block_k)
        columns = (n // UNIT_N) * row_words
        packed_view = b.global_view(
            packed, dtypes.i32, GlobalLayout((k // UNIT_K, columns), (columns, 1))
        )
        groups = GlobalLayout((k // group_size, n), (n, 1))
        row0, col0 = b.block_y * block_k, b.block_x * block_n
        words = b.load_global(
            packed_view, [b.block_y * units_k, b.block_x * (warps * row_words)], word_layout
        )
        weights = cast_codes(b, words, weight_dtype, act, code_layout, value_layout)
        group = row0 // group_size

        def group_row(param):
            loaded = b.load_global(b.global_view(param, act, groups), [group, col0], row_load)
            return b.view(loaded, act, row_view)

        if zeros is not None:
            weights = b.sub(weights, group_row(zeros))
        weights = b.mul(weights, group_row(scales))
        # Through shared memory into rows of 16-byte vectors: a thread's B fragments hold
        # pairs along k, which row-major w would take as 2-byte stores.
        staged = b.shared_tensor(act, shared_row_major_swizzle(block_k, block_n, element_bits=16))
        b.store_shared(staged, weights)
        b.sync()
        out = b.global_view(w, act, GlobalLayout((k, n), (n, 1)))
        b.store_global(out, b.load_shared(staged, store_layout), [row0, col0])
    return b.program()

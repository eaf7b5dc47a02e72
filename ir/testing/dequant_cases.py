"""Random programs of the dequantizing kind: low-bit codes cast to f16 or bf16 and combined in
pairs, the register work of a quantized matmul.

`dequant_cases()`: a tile of u2, i2, u4, i4, u8, i8 or f4e2m1 codes is loaded in a layout whose
threads hold whole 32-bit words of codes (``L * local(1, c)``, c a multiple of the codes per
word), optionally loaded as i32 words and `view`-ed as the codes (the packed-weight path), cast
to f16 or bf16 (the word-at-a-time fast conversions on a GPU), possibly scaled by a power of two
(a scaled cast: by 2^-3, or for a float by its bias, which leaves the conversion no fma) or with
its magic numbers' biases kept (a biased cast of integers, `ir.dtypes.magic_bias`), combined
by add, sub or mul with
a same-layout half tile or a broadcast row of scales (the paired ``*2_rn`` instructions, two
elements per word), and stored. The expected output is computed with NumPy from the codes
(`dtypes.convert_scaled` or `dtypes.convert_biased`, at each code's local index in the tile's
layout, for the cast; `ir.elementwise.apply_binary` for the operation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.elementwise import apply_binary, to_values
from ir.testing.cases import (
    ProgramCase,
    code_bit_offsets,
    draw_constants,
    random_codes,
    register_layouts,
)
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.reduce import reduce as reduce_layout
from layout_algebra.register import local

CODE_TYPES = (dtypes.u2, dtypes.i2, dtypes.u4, dtypes.i4, dtypes.u8, dtypes.i8, dtypes.f4e2m1)
"""Code types with a fast conversion to f16 and bf16 (`backend.fast_conversions`)."""
HALF_TYPES = (dtypes.f16, dtypes.bf16)
PAIRED_OPS = ("add", "sub", "mul")


@st.composite
def dequant_cases(draw: Callable[..., Any]) -> ProgramCase:
    """Codes -> (optional i32 words and `view`) -> cast to a half type -> op with a half tile or
    a broadcast scale row -> store (see the module docstring)."""
    code_dtype = draw(st.sampled_from(CODE_TYPES))
    half = draw(st.sampled_from(HALF_TYPES))
    op = draw(st.sampled_from(PAIRED_OPS))
    per_word = 32 // code_dtype.nbits
    num_threads = draw(st.sampled_from((32, 64)))
    base = draw(register_layouts(num_threads, 2, max_local=2))
    words = draw(st.integers(1, 2))
    layout = base * local(1, per_word * words)
    word_layout = base * local(1, words)
    rows, cols = layout.shape
    grid = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    m, n = grid[1] * rows, grid[0] * cols
    target_bias = 15 if half == dtypes.f16 else 127
    exponents = [0, -3] + ([code_dtype.bias - target_bias] if code_dtype.is_float else [])
    exponent = draw(
        st.sampled_from(
            [e for e in exponents if dtypes.scaled_conversion_error(code_dtype, half, e) is None]
        )
    )
    biased = (
        exponent == 0 and dtypes.magic_bias_error(code_dtype, half) is None and draw(st.booleans())
    )
    as_words = draw(st.booleans())
    broadcast = draw(st.booleans())
    codes = random_codes(draw, code_dtype, m * n).reshape(m, n)
    other_shape = (1, n) if broadcast else (m, n)
    other = random_codes(draw, half, other_shape[0] * other_shape[1]).reshape(other_shape)
    out_initial = random_codes(draw, half, m * n)
    constant_names = draw_constants(draw, ("m", "n"))
    with ProgramBuilder("dequant", num_threads) as b:
        m_var, n_var = (b.int_param(name, constant=name in constant_names) for name in ("m", "n"))
        x = b.array_param("x", code_dtype)
        y = b.array_param("y", half)
        out = b.array_param("out", half)
        origin = [b.block_y * rows, b.block_x * cols]
        if as_words:
            word_view = b.global_view(
                x, dtypes.i32, GlobalLayout((m_var, n_var // per_word), (n_var // per_word, 1))
            )
            loaded = b.load_global(
                word_view, [origin[0], b.block_x * (cols // per_word)], word_layout
            )
            tile = b.view(loaded, code_dtype, layout)
        else:
            code_view = b.global_view(x, code_dtype, GlobalLayout((m_var, n_var), (n_var, 1)))
            tile = b.load_global(code_view, origin, layout)
        halves = b.cast(tile, half, exponent=exponent, biased=biased)
        if broadcast:
            y_view = b.global_view(y, half, GlobalLayout((1, n_var), (n_var, 1)))
            y_layout = reduce_layout(layout, [0], keepdims=True)
            operand = b.load_global(y_view, [0, origin[1]], y_layout)
        else:
            y_view = b.global_view(y, half, GlobalLayout((m_var, n_var), (n_var, 1)))
            operand = b.load_global(y_view, origin, layout)
        result = b.binary(op, halves, operand)
        out_view = b.global_view(out, half, GlobalLayout((m_var, n_var), (n_var, 1)))
        b.store_global(out_view, result, origin)
    if biased:
        offsets = np.tile(code_bit_offsets(layout, code_dtype.nbits), (grid[1], grid[0]))
        converted = dtypes.convert_biased(codes, code_dtype, half, offsets)
    else:
        converted = dtypes.convert_scaled(codes.reshape(-1), code_dtype, half, exponent)
        converted = converted.reshape(m, n)
    values = apply_binary(
        op, half, to_values(half, converted), to_values(half, np.broadcast_to(other, (m, n)))
    )
    expected = half.encode(values).astype(np.int64).reshape(-1)
    return ProgramCase(
        program=b.program(),
        arguments=(
            m,
            n,
            dtypes.pack(codes.reshape(-1), code_dtype),
            dtypes.pack(other.reshape(-1), half),
            dtypes.pack(out_initial, half),
        ),
        grid=grid,
        output=4,
        output_dtype=half,
        output_count=m * n,
        expected=expected,
        description=(
            f"dequant {code_dtype} -> {half}{f' x 2^{exponent}' if exponent else ''}"
            f"{' biased' if biased else ''} {op} "
            f"{'row' if broadcast else 'tile'}"
            f"{' via i32 words' if as_words else ''}, layout {layout}"
        ),
    )

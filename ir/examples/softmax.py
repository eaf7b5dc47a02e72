"""Row softmax: y[r, :] = softmax(x[r, :]) for rows of a compile-time length.

Each warp (32 threads) owns one row of the tile and each thread `ceil(n_cols / 32)` consecutive
elements of it; a row length that is not a multiple of 32 leaves the tile's last columns
outside the tensor, which the load fills with -inf (the type's most negative value when it has
no infinity), so they change neither the row max nor, as exp(-inf) = 0, the row sum, and the
store skips them. The row max and the row sum are reductions over one local mode and one
32-thread spatial mode (warp shuffles on the GPU), whose results are replicated over the warp
and broadcast back against the row. The arithmetic is in f32; `exp` is not bit-exact on the GPU, so
GPU runs compare within a tolerance. Launch with ``grid = ceil(m / (num_threads // 32))``.
"""

from __future__ import annotations

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.program import Program
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial

WARP = 32


def row_softmax(n_cols: int = 128, dtype: DataType = dtypes.f16, num_threads: int = 128) -> Program:
    """The program ``row_softmax(m, x, y)`` over an (m, n_cols) row-major tensor.

    y[r, c] = exp(x[r, c] - max_r) / sum_c' exp(x[r, c'] - max_r), computed in f32 and rounded
    to `dtype`; block b handles rows [b * R, (b + 1) * R) with R = num_threads // 32 (rows past m
    are not stored). Raises VerificationError unless `n_cols` is positive and `num_threads` a
    multiple of 32.
    """
    if isinstance(n_cols, bool) or not isinstance(n_cols, int) or n_cols < 1:
        raise VerificationError(f"n_cols {n_cols!r} must be a positive int")
    if num_threads % WARP:
        raise VerificationError(f"num_threads {num_threads} must be a multiple of {WARP}")
    rows = num_threads // WARP
    layout = spatial(rows, WARP).local(1, -(-n_cols // WARP))
    fill = float("-inf") if dtype.has_inf else float(dtype.min)
    with ProgramBuilder("row_softmax", num_threads) as b:
        m = b.int_param("m")
        x = b.array_param("x", dtype)
        y = b.array_param("y", dtype)
        x_view = b.global_view(x, dtype, GlobalLayout((m, n_cols), (n_cols, 1)))
        y_view = b.global_view(y, dtype, GlobalLayout((m, n_cols), (n_cols, 1)))
        origin = [b.block_x * rows, 0]
        values = b.cast(b.load_global(x_view, origin, layout, fill=fill), dtypes.f32)
        row_max = b.reduce(values, 1, "max", keepdim=True)
        exponentials = b.exp(b.sub(values, row_max))
        row_sum = b.reduce(exponentials, 1, "sum", keepdim=True)
        result = b.div(exponentials, row_sum)
        b.store_global(y_view, b.cast(result, dtype), origin)
    return b.program()

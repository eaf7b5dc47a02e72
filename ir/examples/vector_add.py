"""Vector add: z = x + y over n elements, one tile of `tile_size` elements per block.

The smallest complete tile program: three views of the array parameters, two masked loads, one
elementwise add (rounded to the element type) and a masked store. With the default layout each
thread holds `tile_size // num_threads` consecutive elements, so a 16-bit type gives 16-byte
accesses. Launch with ``grid = ceil(n / tile_size)``.
"""

from __future__ import annotations

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.program import Program
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial


def vector_add(
    dtype: DataType = dtypes.f16, num_threads: int = 128, tile_size: int = 1024
) -> Program:
    """The program ``vector_add(n, x, y, z)``: z[k] = x[k] + y[k] for 0 <= k < n.

    Block b handles elements [b * tile_size, (b + 1) * tile_size); thread t holds the
    `tile_size // num_threads` consecutive elements starting at b * tile_size + t * that count.
    Raises VerificationError when `tile_size` is not a multiple of `num_threads`.
    """
    if tile_size % num_threads:
        raise VerificationError(
            f"tile_size {tile_size} must be a multiple of num_threads {num_threads}"
        )
    layout = spatial(num_threads).local(tile_size // num_threads)
    with ProgramBuilder("vector_add", num_threads) as b:
        n = b.int_param("n")
        x, y, z = (b.array_param(name, dtype) for name in ("x", "y", "z"))
        x_view, y_view, z_view = (
            b.global_view(p, dtype, GlobalLayout((n,), (1,))) for p in (x, y, z)
        )
        origin = [b.block_x * tile_size]
        total = b.add(b.load_global(x_view, origin, layout), b.load_global(y_view, origin, layout))
        b.store_global(z_view, total, origin)
    return b.program()

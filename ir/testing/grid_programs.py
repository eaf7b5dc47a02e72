"""Two small tile programs that declare their launch grid, shared by the tests of the grid (the
IR and interpreter, the lowering, the lowering's proofs).

- `doubled`: y[i] = x[i] + x[i] over n f32 elements, 128 a block, n a multiple of 128 (a
  compile-time constant or not), the grid ``n // 128`` declared when `grid`.
- `rows`: y = x + 1 over an (m, n) i32 matrix, a (4, 32) tile a block, m at most `m_max`, n a
  multiple of 32 up to 4096 (a compile-time constant or not), the grid ``(n // 32, (m + 3) // 4,
  depth)`` declared when `grid`; with depth > 1 the blocks of block_z > 0 store the same values
  again.
"""

from __future__ import annotations

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.program import Program
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import spatial


def doubled(grid: bool = True, constant: bool = True) -> Program:
    """The program ``doubled(n, x, y)`` (see the module docstring)."""
    with ProgramBuilder("doubled", 32) as b:
        n = b.int_param("n", 128, 2**20, multiple_of=128, constant=constant)
        x = b.array_param("x", dtypes.f32)
        y = b.array_param("y", dtypes.f32)
        if grid:
            b.grid(n // 128)
        tile = spatial(32).local(4)
        source = b.global_view(x, dtypes.f32, GlobalLayout((n,), (1,)))
        target = b.global_view(y, dtypes.f32, GlobalLayout((n,), (1,)))
        values = b.load_global(source, [b.block_x * 128], tile)
        b.store_global(target, b.add(values, values), [b.block_x * 128])
    return b.program()


def rows(grid: bool = True, constant: bool = True, m_max: int = 2**16, depth: int = 1) -> Program:
    """The program ``rows(m, n, x, y)`` (see the module docstring)."""
    with ProgramBuilder("rows", 32) as b:
        m = b.int_param("m", 0, m_max)
        n = b.int_param("n", 32, 4096, multiple_of=32, constant=constant)
        x = b.array_param("x", dtypes.i32)
        y = b.array_param("y", dtypes.i32)
        if grid:
            b.grid(n // 32, (m + 3) // 4, depth)
        layout = GlobalLayout((m, n), (n, 1))
        source = b.global_view(x, dtypes.i32, layout)
        target = b.global_view(y, dtypes.i32, layout)
        origin = [b.block_y * 4, b.block_x * 32]
        tile = b.load_global(source, origin, spatial(4, 8).local(1, 4))
        b.store_global(target, b.add(tile, 1), origin)
    return b.program()

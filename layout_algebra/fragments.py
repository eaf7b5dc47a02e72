"""Hardware fragment layouts of the tensor-core instructions, from the PTX ISA and as algebra.

Each `Fragment` pairs two descriptions of one warp-level register layout:

- `ptx`: a `FunctionLayout` whose formula transcribes the PTX ISA's "row and column of a matrix
  fragment" text, with ``groupID = laneid >> 2`` written ``t // 4``, ``threadID_in_group =
  laneid % 4`` written ``t % 4``, ``i & 1`` written ``i % 2`` and every case split ("groupID for
  a0, a1, a4, a5, groupID + 8 otherwise") written as arithmetic on the digits of ``i``;
- `layout`: the same function as a product of primitives, the form the algebra (division by a
  fragment, composition with shared layouts) works with.

The proofs package proves each pair equal (`proofs.check_equivalent`), so the algebraic forms are
as trustworthy as the transcription. Registers are numbered as the ISA numbers the elements (a0,
a1, ...: two 16-bit elements per 32-bit register, the lower-numbered one in the low half).

Fragments (16-bit inputs; the accumulator layout is the one of f32 and f16 accumulators):

    name                 tile (rows x cols)   registers   layout
    mma.m16n8k16.a       16 x 16 (M x K)      8           column_local(2,2).spatial(8,4).local(1,2)
    mma.m16n8k16.b       16 x 8  (K x N)      4           local(2,1).column_spatial(4,8).local(2,1)
    mma.m16n8k16.c       16 x 8  (M x N)      4           local(2,1).spatial(8,4).local(1,2)
    mma.m16n8k8.a        16 x 8  (M x K)      4           local(2,1).spatial(8,4).local(1,2)
    mma.m16n8k8.b        8 x 8   (K x N)      2           column_spatial(4,8).local(2,1)
    mma.m16n8k8.c        16 x 8  (M x N)      4           local(2,1).spatial(8,4).local(1,2)
    ldmatrix.xN          8N x 8               2N          local(N,1).spatial(8,4).local(1,2)
    ldmatrix.xN.trans    8N x 8               2N          local(N,1).column_spatial(4,8).local(2,1)
    stmatrix.xN(.trans)  as ldmatrix.xN(.trans): the registers a store takes the elements from

Warpgroup fragments of `wgmma.mma_async` (sm_90a; 128 threads, warp w = t // 32 of the group):

    name                 tile       registers   layout (C: the mma.m16n8k16.c layout)
    wgmma.m64nNk16.a     64 x 16    8           spatial(4,1) * <mma.m16n8k16.a>
    wgmma.m64nNk16.d     64 x N     N / 2       spatial(4,1).local(1,N/8) * C

(A from registers, 16-bit; D the f32 accumulator.) Warp w holds rows 16w .. 16w + 15, and within
them the layout of the mma.sync fragment: for D, registers d(4j) .. d(4j+3) are the m16n8 C
fragment of columns 8j .. 8j + 7. `wgmma_fragment(kind, n)` builds them for any N of 8 to 256
in steps of 8; `FRAGMENTS` holds N = 8, 16, 64 and 256.

`ldmatrix.sync.aligned.m8n8.xN.b16` loads N 8x8 matrices of 16-bit elements; here matrix j is
rows ``8j .. 8j+7`` of the tile (the matrices stacked along dimension 0), and register j of every
thread holds two elements of matrix j: row ``laneid >> 2``, columns ``(laneid % 4) * 2`` and
``+ 1``; with ``.trans`` each matrix is read transposed, so the two elements are rows
``(laneid % 4) * 2`` and ``+ 1`` of column ``laneid >> 2``. Which 8x8 block of a larger tile is
matrix j depends on the row addresses the program gives (threads 8j .. 8j+7 address the rows of
matrix j); placing the blocks is a permutation of this stacked tile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from layout_algebra.errors import LayoutError
from layout_algebra.function_layout import FunctionLayout
from layout_algebra.hardware import WARP_SIZE, WARPGROUP_SIZE
from layout_algebra.register import RegisterLayout, column_local, column_spatial, local, spatial


@dataclass(frozen=True, eq=False)
class Fragment:
    """One hardware fragment layout: `name` (e.g. ``"mma.m16n8k16.a"``), `ptx` (the PTX ISA's
    formula as a `FunctionLayout` of 32 threads, 128 for a warpgroup's wgmma fragments) and
    `layout` (the same function as a product of primitives)."""

    name: str
    ptx: FunctionLayout
    layout: RegisterLayout


# ------------------------------------------------------------------------------------------------
# mma.m16n8k16 with .f16 / .bf16 inputs
# ------------------------------------------------------------------------------------------------


def _mma_m16n8k16_a(t: Any, i: Any) -> tuple[Any, Any]:
    """A (16 x 16): row = groupID for a0, a1, a4, a5, groupID + 8 otherwise; col =
    threadID_in_group * 2 + (i & 1), plus 8 for a4..a7."""
    row = t // 4 + 8 * (i // 2 % 2)
    col = t % 4 * 2 + i % 2 + 8 * (i // 4)
    return row, col


def _mma_m16n8k16_b(t: Any, i: Any) -> tuple[Any, Any]:
    """B (16 x 8): row = threadID_in_group * 2 + (i & 1), plus 8 for b2, b3; col = groupID."""
    return t % 4 * 2 + i % 2 + 8 * (i // 2), t // 4


def _mma_m16n8_c(t: Any, i: Any) -> tuple[Any, Any]:
    """C / D (16 x 8): row = groupID for c0, c1, groupID + 8 for c2, c3; col =
    threadID_in_group * 2 + (i & 1). Also mma.m16n8k8's A (16 x 8)."""
    return t // 4 + 8 * (i // 2), t % 4 * 2 + i % 2


def _mma_m16n8k8_b(t: Any, i: Any) -> tuple[Any, Any]:
    """B (8 x 8): row = threadID_in_group * 2 + (i & 1); col = groupID."""
    return t % 4 * 2 + i, t // 4


def _ldmatrix(t: Any, i: Any) -> tuple[Any, Any]:
    """Register i // 2 holds matrix i // 2 (rows 8 * (i // 2) ...): row laneid >> 2, column
    (laneid % 4) * 2 + (i & 1)."""
    return 8 * (i // 2) + t // 4, t % 4 * 2 + i % 2


def _ldmatrix_trans(t: Any, i: Any) -> tuple[Any, Any]:
    """Matrix i // 2 read transposed: row (laneid % 4) * 2 + (i & 1), column laneid >> 2."""
    return 8 * (i // 2) + t % 4 * 2 + i % 2, t // 4


def _wgmma_a(t: Any, i: Any) -> tuple[Any, Any]:
    """wgmma A from registers (64 x 16): warp w = t // 32 of the warpgroup holds rows 16w ..
    16w + 15; within them row = groupID for a0, a1, a4, a5, groupID + 8 otherwise, col =
    threadID_in_group * 2 + (i & 1), plus 8 for a4..a7."""
    row = 16 * (t // 32) + t % 32 // 4 + 8 * (i // 2 % 2)
    col = t % 4 * 2 + i % 2 + 8 * (i // 4)
    return row, col


def _wgmma_d(t: Any, i: Any) -> tuple[Any, Any]:
    """wgmma accumulator D (64 x N): warp w holds rows 16w .. 16w + 15; row = groupID for
    d(4j), d(4j+1), groupID + 8 for d(4j+2), d(4j+3); col = 8j + threadID_in_group * 2 +
    (i & 1)."""
    row = 16 * (t // 32) + t % 32 // 4 + 8 * (i // 2 % 2)
    col = 8 * (i // 4) + t % 4 * 2 + i % 2
    return row, col


def _fragment(
    name: str,
    shape: tuple[int, int],
    local_size: int,
    formula: Callable[[Any, Any], tuple[Any, Any]],
    layout: RegisterLayout,
    threads: int = WARP_SIZE,
) -> Fragment:
    return Fragment(name, FunctionLayout(shape, threads, local_size, formula, name), layout)


def wgmma_fragment(kind: str, n: int = 8) -> Fragment:
    """The warpgroup fragment of ``wgmma.mma_async.m64nNk16`` for 16-bit inputs: `kind` "a"
    (A from registers, 64 x 16; `n` does not matter) or "d" (the f32 accumulator, 64 x `n`),
    `n` a multiple of 8 from 8 to 256. LayoutError for anything else."""
    if kind not in ("a", "d"):
        raise LayoutError(f"wgmma fragment kind {kind!r}; expected 'a' or 'd'")
    if isinstance(n, bool) or not isinstance(n, int) or not (8 <= n <= 256 and n % 8 == 0):
        raise LayoutError(f"wgmma fragment n={n!r}; expected a multiple of 8 from 8 to 256")
    warps = spatial(4, 1)
    if kind == "a":
        layout = warps * column_local(2, 2).spatial(8, 4).local(1, 2)
        return _fragment("wgmma.m64nNk16.a", (64, 16), 8, _wgmma_a, layout, WARPGROUP_SIZE)
    layout = warps.local(1, n // 8) * local(2, 1).spatial(8, 4).local(1, 2)
    return _fragment(f"wgmma.m64n{n}k16.d", (64, n), n // 2, _wgmma_d, layout, WARPGROUP_SIZE)


def _build_fragments() -> dict[str, Fragment]:
    accumulator = local(2, 1).spatial(8, 4).local(1, 2)
    fragments = [
        _fragment(
            "mma.m16n8k16.a",
            (16, 16),
            8,
            _mma_m16n8k16_a,
            column_local(2, 2).spatial(8, 4).local(1, 2),
        ),
        _fragment(
            "mma.m16n8k16.b",
            (16, 8),
            4,
            _mma_m16n8k16_b,
            local(2, 1).column_spatial(4, 8).local(2, 1),
        ),
        _fragment("mma.m16n8k16.c", (16, 8), 4, _mma_m16n8_c, accumulator),
        _fragment("mma.m16n8k8.a", (16, 8), 4, _mma_m16n8_c, accumulator),
        _fragment("mma.m16n8k8.b", (8, 8), 2, _mma_m16n8k8_b, column_spatial(4, 8).local(2, 1)),
        _fragment("mma.m16n8k8.c", (16, 8), 4, _mma_m16n8_c, accumulator),
    ]
    for count in (1, 2, 4):
        fragments.append(
            _fragment(
                f"ldmatrix.x{count}",
                (8 * count, 8),
                2 * count,
                _ldmatrix,
                local(count, 1) * spatial(8, 4).local(1, 2),
            )
        )
        fragments.append(
            _fragment(
                f"ldmatrix.x{count}.trans",
                (8 * count, 8),
                2 * count,
                _ldmatrix_trans,
                local(count, 1) * column_spatial(4, 8).local(2, 1),
            )
        )
    # stmatrix.sync.aligned.m8n8.xN(.trans).b16 stores N 8x8 matrices from the registers that
    # ldmatrix loads them into: register j of lane l holds row l >> 2, columns (l % 4) * 2 and
    # + 1 of matrix j (transposed with .trans).
    for count in (1, 2, 4):
        for suffix, formula, inner in (
            ("", _ldmatrix, spatial(8, 4).local(1, 2)),
            (".trans", _ldmatrix_trans, column_spatial(4, 8).local(2, 1)),
        ):
            fragments.append(
                _fragment(
                    f"stmatrix.x{count}{suffix}",
                    (8 * count, 8),
                    2 * count,
                    formula,
                    local(count, 1) * inner,
                )
            )
    fragments.append(wgmma_fragment("a"))
    fragments += [wgmma_fragment("d", n) for n in (8, 16, 64, 256)]
    return {fragment.name: fragment for fragment in fragments}


FRAGMENTS: dict[str, Fragment] = _build_fragments()
"""Every fragment of this module by name: the mma fragments, ldmatrix and stmatrix x1, x2, x4,
and the wgmma A and D fragments (D for N = 8, 16, 64, 256; `wgmma_fragment` for any N)."""


def fragment(name: str) -> Fragment:
    """The fragment called `name` (a key of `FRAGMENTS`, e.g. ``"ldmatrix.x4.trans"``);
    LayoutError naming the known fragments otherwise."""
    if name not in FRAGMENTS:
        raise LayoutError(f"unknown fragment {name!r}; expected one of {sorted(FRAGMENTS)}")
    return FRAGMENTS[name]

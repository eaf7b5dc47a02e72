"""Facts about NVIDIA GPUs that layouts, the IR and the backend all rely on, in one place.

- `WARP_SIZE`: threads per warp; warp w of a block is threads 32w .. 32w + 31.
- `WARPGROUP_SIZE`: threads of a warpgroup (four consecutive warps, the first a multiple of 4).
- `MIN_REGISTER_BUDGET`, `MAX_REGISTER_BUDGET`, `register_cap(threads, min_blocks)`: the
  per-thread registers a warpgroup may ask for, and those a kernel gets from its launch bounds.
- `NUM_BANKS`, `BANK_BYTES`: shared memory has 32 banks of 4-byte words.
- `shared_memory_limit(compute_capability)`: the most shared memory one block may use (the
  opt-in maximum, in bytes) on an architecture, e.g. 227 KiB on sm_90 and 163 KiB on sm_80.
"""

from __future__ import annotations

from layout_algebra.errors import LayoutError

WARP_SIZE = 32
"""Threads per warp."""

WARPGROUP_SIZE = 4 * WARP_SIZE
"""Threads of a warpgroup: the four warps that run a Hopper `wgmma` or a `setmaxnreg` together."""

MIN_REGISTER_BUDGET = 24
"""The fewest per-thread registers a warpgroup may keep (``setmaxnreg``)."""

MAX_REGISTER_BUDGET = 256
"""The most per-thread registers a warpgroup may ask for (``setmaxnreg``)."""

REGISTERS_PER_PARTITION = 16384
"""32-bit registers of each of an SM's four processing blocks (sm_70 to sm_120): a warp's
registers all come from the block it is placed on, warps being dealt to the four in turn."""


def register_cap(threads: int, min_blocks: int | None) -> int:
    """The per-thread registers a kernel of `threads` threads a block gets from ptxas when its
    launch bounds ask for `min_blocks` blocks an SM (None or 0: one): the most a thread may
    have when each processing block holds its share of the warps (rounded up), in the units
    of 8 registers the hardware allocates, and at most 255. Example: 160 threads, 2 blocks
    (10 warps, 3 on some processing block): 168. Raises LayoutError for `threads` that is not
    an int >= 1 or `min_blocks` that is neither None nor an int >= 0."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise LayoutError(f"register cap of threads={threads!r}; expected an int >= 1")
    if min_blocks is not None and (
        isinstance(min_blocks, bool) or not isinstance(min_blocks, int) or min_blocks < 0
    ):
        raise LayoutError(
            f"register cap of min_blocks={min_blocks!r}; expected None or an int >= 0"
        )
    warps = -(-threads // WARP_SIZE) * max(1, min_blocks or 1)
    per_partition = -(-warps // 4)
    return min(255, REGISTERS_PER_PARTITION // (per_partition * WARP_SIZE) // 8 * 8)


NUM_BANKS = 32
"""Shared-memory banks."""

BANK_BYTES = 4
"""Bytes of one shared-memory bank word."""

SHARED_MEMORY_LIMITS = {
    70: 96,
    72: 96,
    75: 64,
    80: 163,
    86: 99,
    87: 163,
    89: 99,
    90: 227,
    100: 227,
    103: 227,
    110: 227,
    120: 99,
    121: 99,
}
"""KiB of shared memory a block may use (opt-in maximum), by compute capability."""

LARGEST_SHARED_MEMORY_LIMIT = max(SHARED_MEMORY_LIMITS.values()) * 1024
"""Bytes: the limit when the architecture is not known yet (any program that can run anywhere
fits this; the launch on an actual device checks its own limit)."""


def shared_memory_limit(compute_capability: int | None) -> int:
    """Bytes of shared memory one block may use on `compute_capability` (e.g. 90 for sm_90a;
    None when unknown gives `LARGEST_SHARED_MEMORY_LIMIT`).

    Raises LayoutError for a compute capability this table does not know.
    """
    if compute_capability is None:
        return LARGEST_SHARED_MEMORY_LIMIT
    if compute_capability not in SHARED_MEMORY_LIMITS:
        raise LayoutError(
            f"no shared-memory limit is known for compute capability {compute_capability!r}; "
            f"expected one of {sorted(SHARED_MEMORY_LIMITS)}"
        )
    return SHARED_MEMORY_LIMITS[compute_capability] * 1024

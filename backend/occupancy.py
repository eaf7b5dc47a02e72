"""How many blocks of a compiled kernel one SM holds at once, and how many waves a grid makes.

A block stays on its SM from its start to its exit, and an SM starts a block only when the
registers, shared memory, warp slots and block slots it needs are free. So a kernel's resources
fix how many of its blocks an SM holds (`resident_blocks`), and a grid's size divided by that
count times the SMs is the number of waves it runs in (`waves`). A grid one block over a whole
wave pays for a second wave; that is how a few registers more can cost a kernel far more time
than they save (`benchmarks/results/quantized_matmul_notes.md` has such a case).

The rules are those of CUDA's occupancy calculator, for the SM of `SmLimits` (its defaults are
sm_90's, the H100 and H200):

- registers: each warp takes its threads' registers rounded up to `register_unit`, out of one of
  the SM's `sub_partitions` register files (`registers` / `sub_partitions` each), so the warps an
  SM holds are `sub_partitions` times the warps one file holds;
- shared memory: each block takes its static and dynamic bytes plus `reserved_shared_bytes`,
  rounded up to `shared_unit`, out of `shared_bytes`;
- warps: at most `warps` an SM, each block's threads rounded up to whole warps;
- blocks: at most `blocks` an SM.

The SM's shared memory is taken to be all of it (a kernel's carveout preference, which the
backend does not set, can make the driver count less). `tests/backend/test_occupancy.py`
checks these rules against the driver's own `cuOccupancyMaxActiveBlocksPerMultiprocessor` on
the GPU (`backend.kernel.Kernel.resident_blocks`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from backend.errors import LaunchError

WARP_THREADS = 32


@dataclass(frozen=True)
class SmLimits:
    """What one SM has for resident blocks; the defaults are sm_90's (H100, H200)."""

    registers: int = 65536
    """32-bit registers of the SM."""
    sub_partitions: int = 4
    """Register files the SM's registers are split into, one a warp scheduler."""
    register_unit: int = 256
    """Registers a warp is given in multiples of."""
    max_registers_per_thread: int = 255
    shared_bytes: int = 228 * 1024
    """Shared memory of the SM."""
    max_shared_per_block: int = 227 * 1024
    """The most shared memory (static and dynamic) one block may have."""
    reserved_shared_bytes: int = 1024
    """Shared memory the system keeps for each resident block."""
    shared_unit: int = 128
    """Bytes a block's shared memory is given in multiples of."""
    warps: int = 64
    """Resident warps of the SM."""
    blocks: int = 32
    """Resident blocks of the SM."""
    max_threads_per_block: int = 1024


SM_90 = SmLimits()
"""sm_90's limits (the H100's and H200's SMs)."""


@dataclass(frozen=True)
class Residency:
    """`blocks` of a kernel one SM holds at once, and `limited_by`: the resources that allow
    no more (some of "registers", "shared memory", "warps", "blocks"; every resource that
    would be exceeded by one block more)."""

    blocks: int
    limited_by: tuple[str, ...]


def _checked(name: str, value: object, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise LaunchError(f"occupancy: {name}={value!r}; expected an int >= {least}")
    return value


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def resident_blocks(
    registers_per_thread: int,
    block_threads: int,
    shared_bytes: int = 0,
    limits: SmLimits = SM_90,
) -> Residency:
    """How many blocks of `block_threads` threads, each thread taking `registers_per_thread`
    registers and each block `shared_bytes` of shared memory (static and dynamic together),
    one SM of `limits` holds at once. Raises `LaunchError` for a value that is not an int in
    range (registers 0 to the SM's per-thread maximum, threads 1 to its per-block maximum,
    shared bytes 0 to its per-block maximum)."""
    _checked("registers_per_thread", registers_per_thread, 0)
    _checked("block_threads", block_threads, 1)
    _checked("shared_bytes", shared_bytes, 0)
    if registers_per_thread > limits.max_registers_per_thread:
        raise LaunchError(
            f"occupancy: registers_per_thread={registers_per_thread}; expected at most "
            f"{limits.max_registers_per_thread}"
        )
    if block_threads > limits.max_threads_per_block:
        raise LaunchError(
            f"occupancy: block_threads={block_threads}; expected at most "
            f"{limits.max_threads_per_block}"
        )
    if shared_bytes > limits.max_shared_per_block:
        raise LaunchError(
            f"occupancy: shared_bytes={shared_bytes}; expected at most "
            f"{limits.max_shared_per_block} a block"
        )
    warps = math.ceil(block_threads / WARP_THREADS)
    bounds = {"warps": limits.warps // warps, "blocks": limits.blocks}
    if registers_per_thread:
        warp_registers = _round_up(registers_per_thread * WARP_THREADS, limits.register_unit)
        file_warps = (limits.registers // limits.sub_partitions) // warp_registers
        bounds["registers"] = (file_warps * limits.sub_partitions) // warps
    block_shared = _round_up(shared_bytes + limits.reserved_shared_bytes, limits.shared_unit)
    bounds["shared memory"] = limits.shared_bytes // block_shared
    blocks = min(bounds.values())
    order = ("registers", "shared memory", "warps", "blocks")
    return Residency(blocks, tuple(name for name in order if bounds.get(name) == blocks))


def waves(grid_blocks: int, blocks_per_sm: int, sm_count: int) -> float:
    """The waves a grid of `grid_blocks` blocks runs in on `sm_count` SMs that hold
    `blocks_per_sm` of them each: its blocks over one wave's, so 1.0 is exactly one full wave
    and anything above it starts a second. Raises `LaunchError` for a value that is not an
    int >= 1 (a kernel whose blocks no SM holds never runs)."""
    _checked("grid_blocks", grid_blocks, 1)
    _checked("blocks_per_sm", blocks_per_sm, 1)
    _checked("sm_count", sm_count, 1)
    return grid_blocks / (blocks_per_sm * sm_count)


def whole_waves(grid_blocks: int, blocks_per_sm: int, sm_count: int) -> int:
    """The waves of `waves` with a partial wave counted whole: how many times the SMs start
    blocks anew, which a grid pays for in time however few blocks its last wave has. Raises
    `LaunchError` as `waves` does."""
    waves(grid_blocks, blocks_per_sm, sm_count)  # the checks
    return -(-grid_blocks // (blocks_per_sm * sm_count))

"""`backend.compile`: from a tile program to a launchable, checked CUDA kernel.

    kernel = compile(vector_add(), arch="sm_90a")     # verify, lower, NVRTC (cached)
    kernel.source, kernel.cubin, kernel.accesses      # what was generated, and its addresses
    kernel(n, x, y, z, grid=blocks)                   # torch tensors or CUDA arrays, and ints
    kernel(x=x, y=y, z=z, n=n, grid=blocks)           # by name, as `ir.run_reference` takes them
    compile(program, "sm_90a", constants={"k": 64})   # k: int_param("k", constant=True)
    kernel(n, x, y, z)                                # a program that declares its grid

`compile` remembers the last `LOWERED_MEMO` lowerings of this process (its own and
`lower_all`'s), keyed by the pickled program (equal bytes: an equal program, however it was
built) with the architecture, the constants and the switches: a tuner that lowers its
candidates in worker processes first, then builds them, or builds the same candidates for a
second batch bucket, lowers each once.

The arguments are those of the program, in its parameter order or by name: arrays as torch
tensors (or anything with ``__cuda_array_interface__`` or DLPack) whose raw bytes hold the dense
bitstream of the parameter's elements, ints within the parameter's bounds. Every argument is
checked before the launch (`backend.kernel.Kernel`): an array must be contiguous, on the current
device, 16-byte aligned, of a storage dtype the interpreter accepts too
(`ir.arguments.storage_dtypes`: the element type's own dtype, integers of its width holding
codes, or bytes of the bitstream) and at least as large as every global view of it reaches for
the given ints.

A compile-time constant parameter (``int_param("k", constant=True)``) gets its value from
`constants` at compile time: the kernel is generated for that value, as literals in its source
(`ir.specialize`), so the value is part of the source hash that keys the CUBIN cache. The
parameter keeps its place in the argument list, and a call with another value raises
`LaunchError` naming the parameter, the value given and the value compiled.

A program that declares its launch grid (``b.grid(n // 256)``, `ProgramBuilder.grid`) is
compiled with its block indices bounded by it, and its kernel computes the grid from the int
arguments: a call may omit `grid`, and one whose grid differs raises `LaunchError` naming both.
"""

from __future__ import annotations

import atexit
import hashlib
import multiprocessing
import os
import pickle
import threading
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor

from backend.cache import CubinCache
from backend.device import KernelResources, current_arch
from backend.errors import CompilationError, PerformanceWarning
from backend.kernel import Kernel, KernelIntParam, build_kernel
from backend.lower import Access, LoweredKernel, lower
from backend.lower.warp_classes import budget_problem
from backend.nvrtc import check_arch, cubin_registers, performance_losses
from backend.tensor_core import LdmatrixPlan, MmaPlan
from ir.program import Program


class CompiledKernel:
    """A tile program compiled for one architecture (see the module docstring).

    Attributes: `program` (as given, before specialisation), `lowered` (the
    `backend.lower.LoweredKernel`, of the specialised program), `kernel` (the
    `backend.kernel.Kernel` that launches it); properties `source`, `cubin`, `arch`,
    `constants`, `accesses`, `plans`, `shared_bytes`, `resources`, `performance_losses`.
    """

    def __init__(self, program: Program, lowered: LoweredKernel, kernel: Kernel) -> None:
        self.program = program
        self.lowered = lowered
        self.kernel = kernel

    @property
    def source(self) -> str:
        """The generated CUDA C++ source."""
        return self.lowered.source

    @property
    def cubin(self) -> bytes:
        """The compiled ELF image for `arch`."""
        return self.kernel.cubin

    @property
    def arch(self) -> str:
        """The architecture the CUBIN is for, e.g. ``sm_90a``."""
        return self.kernel.arch

    @property
    def constants(self) -> dict[str, int]:
        """The values of the compile-time constant parameters the kernel was compiled for."""
        return {
            param.name: param.constant
            for param in self.kernel.params
            if isinstance(param, KernelIntParam) and param.constant is not None
        }

    @property
    def accesses(self) -> tuple[Access, ...]:
        """Every address expression printed into the source (`backend.lower.Access`)."""
        return self.lowered.accesses

    @property
    def plans(self) -> tuple[MmaPlan | LdmatrixPlan, ...]:
        """The tensor-core plans the kernel uses (`backend.tensor_core`)."""
        return self.lowered.plans

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory per block, in bytes."""
        return self.lowered.shared_bytes

    @property
    def performance_losses(self) -> tuple[str, ...]:
        """ptxas's notes of the losses of performance it could not avoid in this kernel
        (`backend.nvrtc.performance_losses`; empty for most kernels), also issued as a
        `PerformanceWarning` when the kernel is compiled."""
        return performance_losses(self.kernel.compiler_log)

    @property
    def resources(self) -> KernelResources:
        """Registers, shared and local memory the kernel uses (loads it on the current GPU)."""
        return self.kernel.resources

    def __call__(
        self, *args: object, grid: int | Sequence[int] | None = None, **kwargs: object
    ) -> None:
        """Launch over `grid` (an int or 1 to 3 ints) with the program's arguments.

        `grid` None (the default) means the grid the program declares, computed from the int
        arguments; a given grid must equal it. Raises `LaunchError` before anything reaches
        the GPU when an argument or the grid does not fit (see `backend.kernel`), when the grid
        differs from the declared one, or when it is omitted and the program declares none.
        The launch is asynchronous on torch's current stream when an argument is a torch
        tensor, else on the legacy default stream.
        """
        self.kernel(*args, grid=grid, **kwargs)

    def __repr__(self) -> str:
        return (
            f"CompiledKernel({self.program.name!r}, arch={self.arch!r}, "
            f"threads={self.lowered.block_threads}, shared_bytes={self.shared_bytes})"
        )


def compile(
    program: Program,
    arch: str | None = None,
    *,
    constants: Mapping[str, int] | None = None,
    cache: CubinCache | None = None,
    wgmma: bool = True,
    tma: bool = True,
    hoist_invariants: bool = False,
) -> CompiledKernel:
    """Verify, lower and compile `program` for `arch` (``"sm_80"``, ``"sm_90a"``, ...).

    `arch` defaults to the current GPU's architecture and is required on a machine without one
    (`NoDeviceError`). `constants` maps the name of each compile-time constant parameter to its
    value (see the module docstring). The lowering uses the architecture's tensor cores where
    it can (`backend.lower.lower`: such dots match the interpreter within rounding; on sm_90a
    ``wgmma`` where a dot reads its operands from shared memory, and ``wgmma=False`` forces
    ``mma.sync`` there, so that the two paths can be compared; likewise bulk copies run as TMA
    bulk tensor copies on sm_90 where they can, and ``tma=False`` keeps them on ``cp.async``;
    ``hoist_invariants=True`` computes block-invariant values that divide by runtime values
    once, at the kernel's start, `backend.lower.lower`). The CUBIN
    comes from the on-disk cache (`cache`, default `backend.default_cache()`) when the same
    source and options were compiled before. Raises `VerificationError` for an ill-formed
    program, `SpecializationError` for constants that do not fit it (a constant parameter
    without a value, a value out of its bounds or not a multiple of its `multiple_of`, a name
    that is not a constant parameter), `CompilationError` when it cannot be lowered or NVRTC
    rejects the source, `ArchitectureError` for an unknown architecture.
    """
    chosen = check_arch(current_arch() if arch is None else arch)
    options = {"wgmma": wgmma, "tma": tma, "hoist_invariants": hoist_invariants}
    lowered = lower_memoised(program, chosen, constants, **options)
    return compile_lowered(program, lowered, chosen, cache=cache)


LOWERED_MEMO = 16
"""Lowerings `compile` keeps in memory, the least recently used going first: a tuning's batch
paths (13) at most, since a 128 x 256 prefill kernel's lowering holds about 5 MB."""
_LOWERED: OrderedDict[tuple[object, ...], LoweredKernel] = OrderedDict()
_LOWERED_LOCK = threading.Lock()


def lower_memoised(
    program: Program,
    arch: str,
    constants: Mapping[str, int] | None = None,
    **options: bool,
) -> LoweredKernel:
    """``lower(program, arch, constants=constants, **options)``, or the kernel an earlier call
    made of a program that pickles to the same bytes with the same arguments (a program that
    does not pickle is lowered every time). Errors are raised every time, never remembered."""
    key = _memo_key(program, arch, constants, options)
    if key is None:
        return lower(program, arch, constants=constants, **options)
    with _LOWERED_LOCK:
        if key in _LOWERED:
            _LOWERED.move_to_end(key)
            return _LOWERED[key]
    lowered = lower(program, arch, constants=constants, **options)
    _remember(key, lowered)
    return lowered


LOWER_DEFAULTS = {"wgmma": True, "tma": True, "hoist_invariants": False}
"""The switches `lower_all` lowers with (and `compile` by default)."""


def _memo_key(
    program: Program, arch: str, constants: Mapping[str, int] | None, options: Mapping[str, bool]
) -> tuple[object, ...] | None:
    """The memo's key of a lowering; None (no memo: `lower` then judges the arguments) for a
    program that does not pickle or constants that are not a mapping of sortable, hashable
    items."""
    if constants is not None and not isinstance(constants, Mapping):
        return None
    try:
        digest = hashlib.sha256(pickle.dumps(program, pickle.HIGHEST_PROTOCOL)).hexdigest()
        switches = tuple(sorted({**LOWER_DEFAULTS, **options}.items()))
        key = (digest, arch, tuple(sorted((constants or {}).items())), switches)
        hash(key)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None
    return key


def _remember(key: tuple[object, ...] | None, lowered: LoweredKernel) -> None:
    if key is None:
        return
    with _LOWERED_LOCK:
        _LOWERED[key] = lowered
        _LOWERED.move_to_end(key)
        while len(_LOWERED) > LOWERED_MEMO:
            _LOWERED.popitem(last=False)


def compile_lowered(
    program: Program, lowered: LoweredKernel, arch: str, *, cache: CubinCache | None = None
) -> CompiledKernel:
    """The second half of `compile`: NVRTC (through the CUBIN `cache`) on the kernel that
    `lower` (or `lower_all`) made of `program` for `arch`."""
    kernel = build_kernel(
        lowered.source,
        lowered.entry,
        lowered.params,
        lowered.block_threads,
        lowered.shared_bytes,
        arch=check_arch(arch),
        options=lowered.options,
        cache=cache,
        grid=lowered.grid,
        programmatic_launch=lowered.programmatic_launch,
        tensor_maps=lowered.tensor_maps,
    )
    if lowered.register_changes:
        registers = cubin_registers(kernel.cubin).get(lowered.entry)
        if registers is None:
            raise CompilationError(
                f"{lowered.entry}: the CUBIN records no register count for the kernel, so its "
                "warpgroups' register budgets cannot be checked"
            )
        problem = budget_problem(registers, lowered.register_changes)
        if problem:
            # An increase would wait for registers the block was never given.
            raise CompilationError(
                f"{lowered.entry}: the compiled kernel has {registers} registers a thread "
                f"(the launch bounds allow {lowered.register_budget}), and its warpgroups' "
                f"register budgets do not fit them: {problem}"
            )
    compiled = CompiledKernel(program, lowered, kernel)
    for loss in compiled.performance_losses:
        warnings.warn(f"{lowered.entry}: {loss}", PerformanceWarning, stacklevel=3)
    return compiled


def _lower_job(job: tuple[Program, str, Mapping[str, int] | None]) -> LoweredKernel | Exception:
    program, arch, constants = job
    try:
        return lower(program, arch, constants=constants)
    except Exception as error:  # returned, so that one bad program does not stop the others
        return error


def lower_all(
    jobs: Sequence[tuple[Program, Mapping[str, int] | None]],
    arch: str,
    *,
    processes: int | None = None,
) -> list[LoweredKernel | Exception]:
    """Lower every (program, constants) of `jobs` for `arch`, each result or the exception it
    raised in place.

    The lowering is pure Python, so threads would take turns on one core: with more than one
    job it runs in `processes` worker processes (default: the CPU count, at most
    `LOWERING_PROCESSES`; spawned, not forked, so a process that holds a CUDA context can call
    it; one pool of that size, kept for later calls whatever their job count), and the kernels
    come back pickled. Then
    `compile_lowered` each (NVRTC releases the GIL: threads suffice there), or `compile` the
    programs: the kernels lowered here are in its memo (`lower_memoised`).
    """
    chosen = check_arch(arch)
    keys = [_memo_key(program, chosen, constants, {}) for program, constants in jobs]
    with _LOWERED_LOCK:
        known = [_LOWERED.get(key) if key is not None else None for key in keys]
    # The jobs the memo does not hold, lowered here.
    work = [(job[0], chosen, job[1]) for job, kernel in zip(jobs, known) if kernel is None]
    size = processes or min(os.cpu_count() or 1, LOWERING_PROCESSES)
    if len(work) <= 1 or size <= 1:
        fresh = iter([_lower_job(job) for job in work])
    else:
        fresh = iter(list(_lowering_pool(size).map(_lower_job, work)))
    results: list[LoweredKernel | Exception] = []
    for key, kernel in zip(keys, known):
        if kernel is None:
            result = next(fresh)
            if isinstance(result, LoweredKernel):
                _remember(key, result)
            results.append(result)
        else:
            results.append(kernel)
    return results


LOWERING_PROCESSES = 16
"""The most worker processes `lower_all` starts by default: each costs its imports (about a
second) and their memory, and a tuning lowers a few dozen candidates."""
_POOLS: dict[int, ProcessPoolExecutor] = {}


def _lowering_pool(processes: int) -> ProcessPoolExecutor:
    """The worker pool of `processes` processes, started once per process of ours (starting
    one costs about a second of imports) and shut down at exit."""
    if processes not in _POOLS:
        context = multiprocessing.get_context("spawn")
        _POOLS[processes] = ProcessPoolExecutor(max_workers=processes, mp_context=context)
        if len(_POOLS) == 1:
            atexit.register(_shutdown_pools)
    return _POOLS[processes]


def _shutdown_pools() -> None:
    for pool in _POOLS.values():
        pool.shutdown(wait=True, cancel_futures=True)
    _POOLS.clear()

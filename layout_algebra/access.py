"""Access maps: which memory offset each thread's register reads or writes, and what it costs.

``compose(memory_layout, register_layout)`` is the function (t, i) -> ``memory_layout.offset(
register_layout.map(t, i))``: register i of thread t lives at that element offset of a shared
or global buffer. The analyses answer what a lowering needs to know about one load or store:

- `vector_width`: how many consecutive registers every thread can move with one vector access
  (whole bytes, at most 16, aligned);
- `sectors` / `coalesced_transactions`: the 32-byte sectors one access of a warp touches;
- `bank_conflicts` / `wavefronts`: the shared-memory wavefronts of one access of a warp.

*One access* of a warp: the vector width w is `vector_width(element_bits)`, each thread's
registers split into ``local_size // w`` vectors ``[k*w, (k+1)*w)``, and access k has every
thread of the warp move its k-th vector. Shared memory serves a 16-byte access per phase of 8
threads, an 8-byte access per phase of 16 threads, and anything smaller for the whole warp at
once; in a phase each of the 32 banks (4-byte words, bank = word % 32) delivers one word per
wavefront, threads reading one word share it, so a phase costs the largest number of distinct
words any bank must deliver, and the access costs the sum over its phases.

Worked example: ``compose(shared_row_major(32, 32), spatial(32, 1).local(1, 32))`` gives thread t
the row t; with f32 elements the widest vector is 4 elements (16 bytes), and access 0 has the 32
threads read column 0..3 of 32 rows 128 bytes apart: every phase of 8 threads reads 8 distinct
words from each of banks 0..3, so the access costs 4 phases * 8 = 32 wavefronts (the ideal is 4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from layout_algebra.errors import LayoutError
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.hardware import BANK_BYTES, NUM_BANKS, WARP_SIZE
from layout_algebra.register import RegisterLayout
from layout_algebra.shared import SharedLayout
from layout_algebra.symbolic import Expr, known_divisor

MemoryLayout = SharedLayout | GlobalLayout

SECTOR_BYTES = 32
MAX_VECTOR_BYTES = 16


def _check_positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise LayoutError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def _check_alignment(value: Any) -> int:
    value = _check_positive(value, "base_alignment")
    if value & (value - 1):
        raise LayoutError(f"base_alignment must be a power of two (in bytes), got {value}")
    return value


@dataclass(frozen=True)
class BankConflicts:
    """The shared-memory bank traffic of one access of one warp (see the module docstring).

    Per thread of the warp, in ascending thread order: `threads` (thread ids), `phases` (the
    phase serving it), `words` (the 4-byte words it touches, ascending: ``byte_address // 4``)
    and `banks` (their banks, ``word % 32``, in the same order). Per phase: `phase_wavefronts`
    (its cost: the largest number of distinct words one bank delivers) and `conflicting_banks`
    (ascending banks that deliver more than one distinct word in that phase).
    """

    threads: tuple[int, ...]
    phases: tuple[int, ...]
    words: tuple[tuple[int, ...], ...]
    banks: tuple[tuple[int, ...], ...]
    phase_wavefronts: tuple[int, ...]
    conflicting_banks: tuple[tuple[int, ...], ...]

    @property
    def wavefronts(self) -> int:
        """Total cost of the access: the sum of `phase_wavefronts`."""
        return sum(self.phase_wavefronts)

    @property
    def conflicted_threads(self) -> tuple[int, ...]:
        """Threads that touch a conflicting bank of their phase."""
        return tuple(
            t
            for t, phase, banks in zip(self.threads, self.phases, self.banks)
            if set(banks) & set(self.conflicting_banks[phase])
        )


@dataclass(frozen=True)
class AccessMap:
    """The function (t, i) -> ``memory.offset(register.map(t, i))`` of a register tile stored
    in a memory layout of the same shape, with the analyses a lowering needs.

    Fields: `memory` (a `SharedLayout` or `GlobalLayout`) and `register` (a `RegisterLayout`).
    Built by `compose`, which checks that the shapes are equal.
    """

    memory: MemoryLayout
    register: RegisterLayout

    def __post_init__(self) -> None:
        if not isinstance(self.memory, (SharedLayout, GlobalLayout)):
            raise LayoutError(
                f"memory layout must be a SharedLayout or GlobalLayout, got {self.memory!r}"
            )
        if not isinstance(self.register, RegisterLayout):
            raise LayoutError(f"register layout must be a RegisterLayout, got {self.register!r}")
        if tuple(self.memory.shape) != self.register.shape:
            raise LayoutError(
                f"memory layout shape {self.memory.shape!r} differs from register layout shape "
                f"{self.register.shape}; compose needs equal concrete shapes"
            )

    # ------------------------------------------------------------------------------------------
    # Sizes and meaning
    # ------------------------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The tile shape (shared by both layouts)."""
        return self.register.shape

    @property
    def num_threads(self) -> int:
        """Number of threads of the register layout."""
        return self.register.num_threads

    @property
    def local_size(self) -> int:
        """Registers per thread of the register layout."""
        return self.register.local_size

    @property
    def num_warps(self) -> int:
        """Number of warps: ``ceil(num_threads / 32)`` (the last one may be partial)."""
        return -(-self.num_threads // WARP_SIZE)

    def offset(self, t: Any, i: Any) -> Any:
        """The element offset of register `i` of thread `t`: ``memory.offset(register.map(t,
        i))``. Ints give an int (or an `Expr` when the memory layout is symbolic), NumPy arrays an
        int64 array, `Expr`s an `Expr`; out-of-range ints and arrays raise LayoutError."""
        return self.memory.offset(self.register.map(t, i))

    def bind(self, env: Mapping[str, int]) -> AccessMap:
        """The access map with a global layout's variables bound to the ints of `env` (see
        `GlobalLayout.bind`); a shared layout has none, and the map is returned as is."""
        if isinstance(self.memory, GlobalLayout):
            return AccessMap(self.memory.bind(env), self.register)
        return self

    def _coordinates(self) -> list[np.ndarray]:
        """Per dimension, the coordinate of every (t, i) as an int64 [num_threads, local_size]."""
        table = self.register.table()
        return [table[..., k] for k in range(self.register.rank)]

    def _offset_parts(self) -> tuple[np.ndarray, list[tuple[np.ndarray, int]]]:
        """(concrete part, symbolic parts) of every offset, over [num_threads, local_size].

        The offset is the concrete int64 part plus, per symbolic stride s, ``coordinate * s``;
        each symbolic part is (that coordinate table, the known divisor of s).
        """
        full = (self.num_threads, self.local_size)
        coords = self._coordinates()
        if isinstance(self.memory, SharedLayout):
            offsets = self.memory.offset(tuple(coords))
            return np.broadcast_to(np.asarray(offsets, dtype=np.int64), full), []
        concrete = np.zeros(full, dtype=np.int64)
        symbolic: list[tuple[np.ndarray, int]] = []
        for coord, stride in zip(coords, self.memory.strides):
            if isinstance(stride, Expr):
                symbolic.append((coord, known_divisor(stride)))
            else:
                concrete = concrete + coord * stride
        return concrete, symbolic

    def table(self) -> np.ndarray:
        """Every offset as an int64 array of shape [num_threads, local_size]; LayoutError when
        the memory layout is symbolic (bind it first)."""
        concrete, symbolic = self._offset_parts()
        if symbolic:
            raise LayoutError(
                f"the offsets of {self.memory!r} are symbolic; bind its variables first"
            )
        return np.array(concrete)

    # ------------------------------------------------------------------------------------------
    # Vectorisation
    # ------------------------------------------------------------------------------------------

    def vector_width(self, element_bits: int, base_alignment: int = 16) -> int:
        """The widest vector, in elements, that every thread can use for all its registers.

        The largest w such that, for every thread t and every k < local_size / w, registers
        ``k*w .. k*w + w - 1`` of t sit at consecutive offsets, the w elements make a whole
        access of V = w * element_bits / 8 bytes with V in {1, 2, 4, 8, 16} and V dividing
        `base_alignment` (the alignment in bytes of the buffer's base address), and the first
        element's byte address is a multiple of V; w divides local_size. A symbolic global
        layout's strides count only with the divisibility they are known to have
        (`var("K") * 8` is a multiple of 8, `var("K")` of nothing), so the answer holds for
        every value of the variables; registers whose coordinates differ along a symbolic stride
        are never consecutive. When no w qualifies (elements that do not fill whole bytes in any
        such access, e.g. 3-bit or 6-bit ones), the result is 1: element by element.
        """
        element_bits = _check_positive(element_bits, "element_bits")
        base_alignment = _check_alignment(base_alignment)
        concrete, symbolic = self._offset_parts()
        vector_bytes = min(MAX_VECTOR_BYTES, base_alignment)
        while vector_bytes >= 1:
            vector_bits = 8 * vector_bytes
            if vector_bits % element_bits == 0:
                width = vector_bits // element_bits
                if self.local_size % width == 0 and _is_vector(
                    concrete, symbolic, width, element_bits, vector_bits
                ):
                    return width
            vector_bytes //= 2
        return 1

    def num_accesses(self, element_bits: int, base_alignment: int = 16) -> int:
        """Vector accesses per thread: ``local_size // vector_width(element_bits, ...)``."""
        return self.local_size // self.vector_width(element_bits, base_alignment)

    def _access_bytes(
        self, warp: int, element_bits: int, access: int, base_alignment: int
    ) -> tuple[tuple[int, ...], np.ndarray, np.ndarray, int]:
        """(threads of the warp, first byte, end byte (exclusive), access bytes) of one access.

        The access bytes are w * element_bits / 8 for a whole-byte vector, and 0 for the
        element-by-element fallback of sub-byte elements.
        """
        element_bits = _check_positive(element_bits, "element_bits")
        if isinstance(warp, bool) or not isinstance(warp, (int, np.integer)):
            raise LayoutError(f"warp must be an integer, got {warp!r}")
        if not 0 <= warp < self.num_warps:
            raise LayoutError(f"warp {warp} is out of range [0, {self.num_warps})")
        width = self.vector_width(element_bits, base_alignment)
        count = self.local_size // width
        if isinstance(access, bool) or not isinstance(access, (int, np.integer)):
            raise LayoutError(f"access must be an integer, got {access!r}")
        if not 0 <= access < count:
            raise LayoutError(
                f"access {access} is out of range [0, {count}): {self.local_size} registers in "
                f"vectors of {width}"
            )
        offsets = self.table()
        first_thread = WARP_SIZE * int(warp)
        threads = tuple(range(first_thread, min(first_thread + WARP_SIZE, self.num_threads)))
        start = offsets[list(threads), int(access) * width]
        first_byte = start * element_bits // 8
        end_byte = -(-(start + width) * element_bits // 8)
        whole = (width * element_bits) % 8 == 0
        return threads, first_byte, end_byte, width * element_bits // 8 if whole else 0

    # ------------------------------------------------------------------------------------------
    # Global memory: sectors
    # ------------------------------------------------------------------------------------------

    def sectors(
        self, warp: int, element_bits: int, *, access: int = 0, base_alignment: int = 16
    ) -> tuple[int, ...]:
        """The 32-byte sectors (``byte_address // 32`` from a 32-byte aligned base, ascending)
        that access `access` of warp `warp` touches, each thread moving its `access`-th vector
        of `vector_width(element_bits, base_alignment)` elements.

        `warp` covers threads ``32*warp .. 32*warp + 31`` that exist. LayoutError for an
        out-of-range warp or access, or a symbolic memory layout (bind it first).
        """
        base_alignment = _check_alignment(base_alignment)
        _, first_byte, end_byte, _ = self._access_bytes(warp, element_bits, access, base_alignment)
        touched: set[int] = set()
        for first, end in zip(first_byte.tolist(), end_byte.tolist()):
            touched.update(range(first // SECTOR_BYTES, (end - 1) // SECTOR_BYTES + 1))
        return tuple(sorted(touched))

    def coalesced_transactions(
        self, warp: int, element_bits: int, *, access: int = 0, base_alignment: int = 16
    ) -> int:
        """The number of 32-byte sectors one access of a warp touches: ``len(sectors(...))``.

        A warp of 32 threads each moving 8 consecutive f16 of one contiguous row touches 512
        bytes: 16 sectors.
        """
        return len(self.sectors(warp, element_bits, access=access, base_alignment=base_alignment))

    # ------------------------------------------------------------------------------------------
    # Shared memory: banks and wavefronts
    # ------------------------------------------------------------------------------------------

    def bank_conflicts(
        self, warp: int, element_bits: int, *, access: int = 0, base_alignment: int = 16
    ) -> BankConflicts:
        """The bank traffic of access `access` of warp `warp` (see `BankConflicts` and the module
        docstring for the phases and their cost). Requires a shared memory layout."""
        if not isinstance(self.memory, SharedLayout):
            raise LayoutError(
                f"bank conflicts are a shared-memory notion, but the memory layout is "
                f"{self.memory!r}"
            )
        base_alignment = _check_alignment(base_alignment)
        threads, first_byte, end_byte, access_bytes = self._access_bytes(
            warp, element_bits, access, base_alignment
        )
        phase_threads = {16: 8, 8: 16}.get(access_bytes, WARP_SIZE)
        phases = tuple((t - threads[0]) // phase_threads for t in threads)
        words = tuple(
            tuple(range(first // BANK_BYTES, (end - 1) // BANK_BYTES + 1))
            for first, end in zip(first_byte.tolist(), end_byte.tolist())
        )
        banks = tuple(tuple(word % NUM_BANKS for word in thread_words) for thread_words in words)
        num_phases = phases[-1] + 1
        per_bank: list[dict[int, set[int]]] = [{} for _ in range(num_phases)]
        for phase, thread_words in zip(phases, words):
            for word in thread_words:
                per_bank[phase].setdefault(word % NUM_BANKS, set()).add(word)
        return BankConflicts(
            threads=threads,
            phases=phases,
            words=words,
            banks=banks,
            phase_wavefronts=tuple(
                max(len(distinct) for distinct in bank_words.values()) for bank_words in per_bank
            ),
            conflicting_banks=tuple(
                tuple(sorted(bank for bank, distinct in bank_words.items() if len(distinct) > 1))
                for bank_words in per_bank
            ),
        )

    def wavefronts(
        self, warp: int, element_bits: int, *, access: int = 0, base_alignment: int = 16
    ) -> int:
        """Shared-memory wavefronts of access `access` of warp `warp`:
        ``bank_conflicts(...).wavefronts``. A conflict-free full warp costs 4 with 16-byte
        vectors, 2 with 8-byte ones and 1 with 4-byte or smaller ones."""
        return self.bank_conflicts(
            warp, element_bits, access=access, base_alignment=base_alignment
        ).wavefronts


def _is_vector(
    concrete: np.ndarray,
    symbolic: list[tuple[np.ndarray, int]],
    width: int,
    element_bits: int,
    vector_bits: int,
) -> bool:
    """True when every run of `width` registers starting at a multiple of `width` is at
    consecutive offsets and its first element's bit address is a multiple of `vector_bits`,
    for every value of the symbolic strides allowed by their known divisors."""
    num_threads, local_size = concrete.shape
    runs = concrete.reshape(num_threads, local_size // width, width)
    steps = np.arange(width, dtype=np.int64)
    if not np.array_equal(runs - runs[..., :1], np.broadcast_to(steps, runs.shape)):
        return False
    if np.any(runs[..., 0] * element_bits % vector_bits):
        return False
    for coordinate, divisor in symbolic:
        coordinate_runs = coordinate.reshape(num_threads, local_size // width, width)
        if np.any(coordinate_runs != coordinate_runs[..., :1]):
            return False
        if np.any(coordinate_runs[..., 0] * divisor * element_bits % vector_bits):
            return False
    return True


def compose(memory_layout: MemoryLayout, register_layout: RegisterLayout) -> AccessMap:
    """The access map (t, i) -> ``memory_layout.offset(register_layout.map(t, i))``.

    Requires a `SharedLayout` or `GlobalLayout` whose shape equals the register layout's
    (concrete) shape; LayoutError otherwise. Example: ``compose(shared_row_major(4, 4),
    spatial(4, 1).local(1, 4)).offset(2, 3) == 11``.
    """
    return AccessMap(memory_layout, register_layout)

"""Tests of access maps: `compose`, offsets, vector width, sectors, banks and wavefronts.

The analyses are checked three ways: literal values of well-known access patterns (ldmatrix
rows, coalesced rows, column walks), a brute force written here from the definitions (every
element's bits, bytes, words and sectors enumerated one by one), and errors.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from layout_algebra import (
    AccessMap,
    GlobalLayout,
    LayoutError,
    RegisterLayout,
    SharedLayout,
    Swizzle,
    column_spatial,
    compose,
    evaluate,
    global_row_major,
    local,
    register_layout,
    replicate,
    shared_row_major,
    shared_row_major_swizzle,
    shared_strides,
    spatial,
    var,
)

# ----------------------------------------------------------------------------------------------
# Brute force from the definitions
# ----------------------------------------------------------------------------------------------


def offsets_of(access: AccessMap) -> list[list[int]]:
    """offsets[t][i], one scalar call at a time."""
    return [
        [access.offset(t, i) for i in range(access.local_size)] for t in range(access.num_threads)
    ]


def brute_vector_width(
    offsets: list[list[int]], element_bits: int, base_alignment: int = 16
) -> int:
    """The largest w whose runs are consecutive and aligned in every thread (1 if none)."""
    best = 1
    for vector_bytes in (1, 2, 4, 8, 16):
        if base_alignment % vector_bytes or (8 * vector_bytes) % element_bits:
            continue
        width = 8 * vector_bytes // element_bits
        local_size = len(offsets[0])
        if local_size % width:
            continue
        valid = all(
            row[k + j] == row[k] + j and row[k] * element_bits % (8 * vector_bytes) == 0
            for row in offsets
            for k in range(0, local_size, width)
            for j in range(width)
        )
        if valid:
            best = max(best, width)
    return best


def element_bytes(offset: int, element_bits: int) -> set[int]:
    """The bytes holding the bits of the element at `offset`."""
    return {bit // 8 for bit in range(offset * element_bits, (offset + 1) * element_bits)}


def access_bytes(
    offsets: list[list[int]], warp: int, element_bits: int, access: int
) -> dict[int, set[int]]:
    """Per thread of the warp, the bytes its `access`-th vector touches."""
    width = brute_vector_width(offsets, element_bits)
    threads = [t for t in range(32 * warp, 32 * warp + 32) if t < len(offsets)]
    touched = {}
    for t in threads:
        touched[t] = set()
        for j in range(width):
            touched[t] |= element_bytes(offsets[t][access * width + j], element_bits)
    return touched


def brute_sectors(offsets: list[list[int]], warp: int, element_bits: int, access: int) -> list:
    touched = access_bytes(offsets, warp, element_bits, access)
    return sorted({byte // 32 for thread_bytes in touched.values() for byte in thread_bytes})


def brute_wavefronts(offsets: list[list[int]], warp: int, element_bits: int, access: int) -> int:
    width = brute_vector_width(offsets, element_bits)
    vector_bits = width * element_bits
    phase_size = {128: 8, 64: 16}.get(vector_bits, 32)
    touched = access_bytes(offsets, warp, element_bits, access)
    phases: dict[int, dict[int, set[int]]] = {}
    for t, thread_bytes in touched.items():
        phase = (t - 32 * warp) // phase_size
        for byte in thread_bytes:
            word = byte // 4
            phases.setdefault(phase, {}).setdefault(word % 32, set()).add(word)
    return sum(max(len(words) for words in banks.values()) for banks in phases.values())


# ----------------------------------------------------------------------------------------------
# compose and offset
# ----------------------------------------------------------------------------------------------


def test_compose_offset_literal() -> None:
    access = compose(shared_row_major(4, 4), spatial(4, 1).local(1, 4))
    assert access.offset(2, 3) == 11
    assert access.table().tolist() == np.arange(16).reshape(4, 4).tolist()
    assert (access.num_threads, access.local_size, access.num_warps) == (4, 4, 1)
    assert access.shape == (4, 4)


def test_compose_mma_accumulator_into_row_major() -> None:
    # thread 0 holds (0,0), (0,1), (8,0), (8,1) of the m16n8 accumulator
    access = compose(shared_row_major(16, 8), local(2, 1).spatial(8, 4).local(1, 2))
    assert [access.offset(0, i) for i in range(4)] == [0, 1, 64, 65]
    assert [access.offset(5, i) for i in range(4)] == [10, 11, 74, 75]


def test_offset_on_arrays_and_expressions() -> None:
    access = compose(shared_row_major(8, 8), spatial(8, 1).local(1, 8))
    t, i = np.arange(8)[:, None], np.arange(8)[None, :]
    assert access.offset(t, i).tolist() == np.arange(64).reshape(8, 8).tolist()
    K = var("K", 8)
    symbolic = compose(GlobalLayout((8, 8), (K, 1)), spatial(8, 1).local(1, 8))
    assert symbolic.offset(3, 5) == 3 * K + 5


def test_offset_on_symbolic_thread_and_register() -> None:
    access = compose(shared_row_major_swizzle(8, 64, element_bits=16), spatial(8, 8).local(1, 8))
    t, i = var("t", 0, 63), var("i", 0, 7)
    expression = access.offset(t, i)
    threads, registers = np.meshgrid(np.arange(64), np.arange(8), indexing="ij")
    assert evaluate(expression, {"t": threads, "i": registers}).tolist() == access.table().tolist()


def test_bind() -> None:
    K = var("K", 1)
    access = compose(GlobalLayout((4, 8), (K, 1)), spatial(4, 1).local(1, 8))
    assert access.bind({"K": 100}).offset(3, 2) == 302
    shared = compose(shared_row_major(4, 8), spatial(4, 1).local(1, 8))
    assert shared.bind({"K": 100}) is shared


@pytest.mark.parametrize(
    ("memory", "register", "match"),
    [
        (shared_row_major(4, 4), spatial(4), r"shape \(4, 4\) differs from register layout shape"),
        (global_row_major(var("M", 1), 4), spatial(4, 4), "compose needs equal concrete shapes"),
        ((4, 4), spatial(4, 4), "must be a SharedLayout or GlobalLayout"),
        (shared_row_major(4, 4), (4, 4), "register layout must be a RegisterLayout"),
    ],
)
def test_compose_invalid(memory: object, register: object, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        compose(memory, register)


# ----------------------------------------------------------------------------------------------
# vector_width: literal values
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("memory", "register", "element_bits", "base_alignment", "expected"),
    [
        # 8 consecutive f16 per thread: one 16-byte vector
        (shared_row_major(32, 8), spatial(32, 1).local(1, 8), 16, 16, 8),
        # the same with f32: 4 elements (16 bytes), twice
        (shared_row_major(32, 8), spatial(32, 1).local(1, 8), 32, 16, 4),
        # a 4-byte aligned base allows 4 bytes only
        (shared_row_major(32, 8), spatial(32, 1).local(1, 8), 16, 4, 2),
        # mma accumulator, f32: pairs of columns, 8 bytes
        (shared_row_major(16, 8), local(2, 1).spatial(8, 4).local(1, 2), 32, 16, 2),
        # rows of 6 f16 (12 bytes): runs of 2 stay 4-byte aligned, runs of 4 do not
        (shared_row_major(4, 6), spatial(4, 1).local(1, 6), 16, 16, 2),
        # one element per thread
        (shared_row_major(32, 32), spatial(32, 32), 32, 16, 1),
        # registers down a column: never consecutive
        (shared_row_major(8, 8), spatial(1, 8).local(8, 1), 16, 16, 1),
        # column-major memory makes the column consecutive
        (shared_strides((8, 8), (1, 8)), spatial(1, 8).local(8, 1), 16, 16, 8),
        # 32 u4 in 16 bytes
        (shared_row_major(4, 32), spatial(4, 1).local(1, 32), 4, 16, 32),
        # one u4 per thread is half a byte: element by element
        (shared_row_major(1, 32), spatial(1, 32), 4, 16, 1),
        # 3-bit elements never fill a power-of-two number of bytes
        (shared_row_major(1, 64), local(1, 64), 3, 16, 1),
        # 6-bit elements likewise
        (shared_row_major(1, 64), local(1, 64), 6, 16, 1),
        # a swizzle keeps 16-byte chunks whole
        (shared_row_major_swizzle(8, 64, element_bits=16), spatial(8, 1).local(1, 64), 16, 16, 8),
        # a swizzle that moves single elements breaks runs of 2
        (SharedLayout((1, 8), (8,), (1,), Swizzle(1, 0, 1)), local(1, 8), 32, 16, 1),
    ],
)
def test_vector_width_table(
    memory: SharedLayout,
    register: RegisterLayout,
    element_bits: int,
    base_alignment: int,
    expected: int,
) -> None:
    access = compose(memory, register)
    assert access.vector_width(element_bits, base_alignment) == expected
    assert access.num_accesses(element_bits, base_alignment) == access.local_size // expected


def test_vector_width_on_symbolic_strides() -> None:
    K = var("K", 1)
    register = spatial(32, 1).local(1, 8)
    # the row stride's known divisor decides the alignment of every row but row 0
    for stride, expected in [(K, 1), (K * 2, 2), (K * 4, 4), (K * 8, 8), (K * 8 + 4, 4), (64, 8)]:
        access = compose(GlobalLayout((32, 8), (stride, 1)), register)
        assert access.vector_width(16) == expected, stride
    # registers that move along a symbolic stride are never consecutive
    access = compose(GlobalLayout((8, 1), (K, 1)), local(8, 1))
    assert access.vector_width(16) == 1
    assert access.bind({"K": 1}).vector_width(16) == 8


# ----------------------------------------------------------------------------------------------
# Sectors: literal values
# ----------------------------------------------------------------------------------------------


def test_coalesced_f16_row() -> None:
    # 32 threads x 8 f16 of one contiguous row: 512 bytes, 16 sectors
    access = compose(global_row_major(1, 256), spatial(1, 32).local(1, 8))
    assert access.vector_width(16) == 8
    assert access.coalesced_transactions(0, 16) == 16
    assert access.sectors(0, 16) == tuple(range(16))


def test_column_walk_touches_one_sector_per_thread() -> None:
    # each thread reads one f32 of its own 128-byte row
    access = compose(global_row_major(32, 32), spatial(32, 1).local(1, 32))
    assert access.coalesced_transactions(0, 32, base_alignment=4, access=0) == 32
    assert access.sectors(0, 32, base_alignment=4, access=5) == tuple(range(0, 128, 4))


def test_mma_accumulator_store_sectors() -> None:
    # each access writes 8 rows of 8 f32 (32 bytes each): 8 sectors
    access = compose(global_row_major(16, 8), local(2, 1).spatial(8, 4).local(1, 2))
    assert access.vector_width(32) == 2
    assert access.sectors(0, 32, access=0) == tuple(range(8))
    assert access.sectors(0, 32, access=1) == tuple(range(8, 16))


def test_sub_byte_sectors() -> None:
    # 64 threads each holding one u4: warp 1 reads bytes 16..31, one sector
    access = compose(global_row_major(1, 64), spatial(1, 64))
    assert access.sectors(1, 4) == (0,)
    # 3-bit elements: warp 2 reads bits 192..287, bytes 24..35, across a sector boundary
    access = compose(global_row_major(1, 96), spatial(1, 96))
    assert access.sectors(2, 3) == (0, 1)
    assert access.sectors(2, 3) == tuple(brute_sectors(offsets_of(access), 2, 3, 0))


# ----------------------------------------------------------------------------------------------
# Banks and wavefronts: literal values
# ----------------------------------------------------------------------------------------------


def test_row_major_column_access_is_a_32_way_conflict() -> None:
    # a 4-byte base alignment forces one f32 per access: thread t reads (t, k), all in bank k
    access = compose(shared_row_major(32, 32), spatial(32, 1).local(1, 32))
    for k in (0, 5, 31):
        conflicts = access.bank_conflicts(0, 32, access=k, base_alignment=4)
        assert conflicts.wavefronts == 32
        assert conflicts.conflicting_banks == ((k,),)
        assert conflicts.banks == ((k,),) * 32
        assert conflicts.conflicted_threads == tuple(range(32))


def test_whole_rows_of_f32_conflict_8_ways_per_phase() -> None:
    # thread t owns row t; each access reads 4 f32 (16 bytes) of 32 rows 128 bytes apart
    access = compose(shared_row_major(32, 32), spatial(32, 1).local(1, 32))
    assert access.vector_width(32) == 4
    conflicts = access.bank_conflicts(0, 32)
    assert conflicts.phase_wavefronts == (8, 8, 8, 8)
    assert conflicts.wavefronts == 32
    assert conflicts.conflicting_banks == ((0, 1, 2, 3),) * 4


def test_row_access_is_one_wavefront() -> None:
    access = compose(shared_row_major(32, 32), spatial(32, 32))
    conflicts = access.bank_conflicts(3, 32)
    assert conflicts.threads == tuple(range(96, 128))
    assert conflicts.words == tuple((w,) for w in range(96, 128))
    assert (conflicts.wavefronts, conflicts.conflicting_banks) == (1, ((),))
    assert conflicts.conflicted_threads == ()


def test_16_byte_rows_of_a_row_major_tile_conflict_8_ways() -> None:
    # thread t reads 8 f16 of row t; rows are 128 bytes: every phase hits banks 4v..4v+3 8 times
    access = compose(shared_row_major(32, 64), spatial(32, 1).local(1, 64))
    assert access.vector_width(16) == 8
    conflicts = access.bank_conflicts(0, 16, access=2)
    assert conflicts.phases == tuple(t // 8 for t in range(32))
    assert conflicts.phase_wavefronts == (8, 8, 8, 8)
    assert conflicts.conflicting_banks == ((8, 9, 10, 11),) * 4
    assert conflicts.words[1] == (40, 41, 42, 43)


def test_swizzled_rows_are_conflict_free() -> None:
    # the same pattern on the ldmatrix swizzle: 4 wavefronts, the minimum for 512 bytes
    access = compose(shared_row_major_swizzle(32, 64, element_bits=16), spatial(32, 1).local(1, 64))
    for k in range(8):
        assert access.wavefronts(0, 16, access=k) == 4


def test_ldmatrix_x4_addresses() -> None:
    # ldmatrix.x4 on a 16x16 f16 tile: threads 0-15 give rows 0-15 at column 0, threads 16-31
    # rows 0-15 at column 8 (thread t: row t % 16, columns 8 * (t // 16) .. + 7)
    register = column_spatial(16, 2).local(1, 8)
    assert register.map(17, 3) == (1, 11)
    plain = compose(shared_row_major(16, 16), register)
    # 32-byte rows: 8 consecutive rows cover bank groups 0, 2, 4, 6 twice each
    assert plain.bank_conflicts(0, 16).phase_wavefronts == (2, 2, 2, 2)
    swizzled = compose(shared_row_major_swizzle(16, 16, element_bits=16), register)
    assert swizzled.memory.swizzle == Swizzle(1, 3, 3)
    assert swizzled.bank_conflicts(0, 16).phase_wavefronts == (1, 1, 1, 1)


def test_8_byte_accesses_use_half_warp_phases() -> None:
    # thread t reads 2 f32 at row t of rows of 64 bytes: a half-warp covers 1024 bytes
    access = compose(shared_row_major(32, 16), spatial(32, 1).local(1, 16))
    assert access.vector_width(32, base_alignment=8) == 2
    conflicts = access.bank_conflicts(0, 32, base_alignment=8)
    assert conflicts.phases == tuple(t // 16 for t in range(32))
    # words 16t, 16t+1: banks 0,1 for even t and 16,17 for odd t, 8 distinct words each
    assert conflicts.phase_wavefronts == (8, 8)
    assert conflicts.conflicting_banks == ((0, 1, 16, 17),) * 2


def test_replicated_threads_share_words() -> None:
    # 4 copies of 8 f32: each bank delivers one word to 4 threads
    access = compose(shared_row_major(8), replicate(4).spatial(8))
    assert access.wavefronts(0, 32) == 1


def test_partial_warps() -> None:
    # 8 threads read 16 bytes each of rows of 128 bytes: one phase, 8-way
    access = compose(shared_row_major(8, 64), spatial(8, 1).local(1, 64))
    assert access.wavefronts(0, 16) == 8
    swizzled = compose(shared_row_major_swizzle(8, 64, element_bits=16), spatial(8, 1).local(1, 64))
    assert swizzled.wavefronts(0, 16) == 1
    # 40 threads: warp 1 has 8 of them
    access = compose(shared_row_major(40), spatial(40))
    assert access.num_warps == 2
    assert access.bank_conflicts(1, 32).threads == tuple(range(32, 40))


def test_sub_word_accesses_share_words() -> None:
    # 32 threads each read one f16 of a contiguous row: 16 words, no conflict
    access = compose(shared_row_major(1, 32), spatial(1, 32))
    conflicts = access.bank_conflicts(0, 16)
    assert conflicts.wavefronts == 1
    assert conflicts.words[:4] == ((0,), (0,), (1,), (1,))
    # one f16 per thread at a stride of 64 bytes: banks 0 and 16, 16 words each
    access = compose(shared_strides((1, 32), (1, 32)), spatial(1, 32))
    assert access.wavefronts(0, 16) == 16


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------


def test_analysis_errors() -> None:
    access = compose(shared_row_major(32, 8), spatial(32, 1).local(1, 8))
    with pytest.raises(LayoutError, match=r"warp 1 is out of range \[0, 1\)"):
        access.wavefronts(1, 16)
    with pytest.raises(LayoutError, match="warp must be an integer"):
        access.wavefronts(0.0, 16)
    with pytest.raises(LayoutError, match=r"access 1 is out of range \[0, 1\): 8 registers"):
        access.wavefronts(0, 16, access=1)
    with pytest.raises(LayoutError, match="access must be an integer"):
        access.sectors(0, 16, access="0")
    with pytest.raises(LayoutError, match="element_bits must be a positive integer, got 0"):
        access.vector_width(0)
    with pytest.raises(LayoutError, match="base_alignment must be a power of two"):
        access.vector_width(16, base_alignment=12)
    with pytest.raises(LayoutError, match="base_alignment must be a positive integer"):
        access.sectors(0, 16, base_alignment=0)
    on_global = compose(global_row_major(32, 8), spatial(32, 1).local(1, 8))
    with pytest.raises(LayoutError, match="bank conflicts are a shared-memory notion"):
        on_global.wavefronts(0, 16)
    symbolic = compose(GlobalLayout((32, 8), (var("K", 1), 1)), spatial(32, 1).local(1, 8))
    with pytest.raises(LayoutError, match="symbolic; bind its variables first"):
        symbolic.sectors(0, 16)
    with pytest.raises(LayoutError, match="symbolic; bind its variables first"):
        symbolic.table()


# ----------------------------------------------------------------------------------------------
# Differential: the analyses against the brute force
# ----------------------------------------------------------------------------------------------


@st.composite
def access_maps(draw: st.DrawFn) -> AccessMap:
    """A rank-2 register layout of at most 512 cells (modes of size 2, 4 or 8 in random order
    over threads and registers, maybe a replication) composed with a shared layout of its
    shape: a random permutation of compact modes, maybe padded, maybe swizzled."""
    budget = 512
    mode_shape: list[int] = []
    shape = []
    for _ in range(2):
        extent = 1
        for _ in range(draw(st.integers(1, 3))):
            size = draw(st.sampled_from([s for s in (2, 4, 8) if s <= budget] or [1]))
            budget //= size
            extent *= size
            mode_shape.append(size)
        shape.append(extent)
    order = list(draw(st.permutations(range(len(mode_shape)))))
    cut = draw(st.integers(0, len(order)))
    spatial_modes: list[int] = order[:cut]
    if budget >= 2 and draw(st.booleans()):
        spatial_modes.insert(draw(st.integers(0, len(spatial_modes))), -2)
    register = register_layout(shape, mode_shape, spatial_modes, order[cut:])

    memory_modes = list(draw(st.permutations(range(len(mode_shape)))))
    strides = [0] * len(mode_shape)
    step = 1
    for m in reversed(memory_modes):
        strides[m] = step
        step *= mode_shape[m]
    padding = draw(st.sampled_from([0, 0, 1, 2, 4, 8]))
    if padding:
        outermost = memory_modes[0]
        strides[outermost] += padding
    swizzle = draw(
        st.none() | st.sampled_from([Swizzle(1, 2, 3), Swizzle(2, 1, 4), Swizzle(3, 3, 3)])
    )
    return compose(SharedLayout(tuple(shape), tuple(mode_shape), tuple(strides), swizzle), register)


element_bits_choices = st.sampled_from([4, 8, 16, 32, 3])


@given(access_maps(), element_bits_choices, st.sampled_from([1, 4, 16]))
def test_vector_width_is_the_widest_valid(
    access: AccessMap, element_bits: int, base_alignment: int
) -> None:
    offsets = offsets_of(access)
    width = access.vector_width(element_bits, base_alignment)
    assert width == brute_vector_width(offsets, element_bits, base_alignment)
    assert access.table().tolist() == offsets


@given(access_maps(), element_bits_choices, st.data())
def test_sectors_match_brute_force(
    access: AccessMap, element_bits: int, data: st.DataObject
) -> None:
    offsets = offsets_of(access)
    warp = data.draw(st.integers(0, access.num_warps - 1))
    k = data.draw(st.integers(0, access.num_accesses(element_bits) - 1))
    expected = brute_sectors(offsets, warp, element_bits, k)
    assert list(access.sectors(warp, element_bits, access=k)) == expected
    assert access.coalesced_transactions(warp, element_bits, access=k) == len(expected)


@given(access_maps(), element_bits_choices, st.data())
def test_wavefronts_match_brute_force(
    access: AccessMap, element_bits: int, data: st.DataObject
) -> None:
    offsets = offsets_of(access)
    warp = data.draw(st.integers(0, access.num_warps - 1))
    k = data.draw(st.integers(0, access.num_accesses(element_bits) - 1))
    conflicts = access.bank_conflicts(warp, element_bits, access=k)
    assert conflicts.wavefronts == brute_wavefronts(offsets, warp, element_bits, k)
    assert access.wavefronts(warp, element_bits, access=k) == conflicts.wavefronts
    # a bank is conflicting exactly when its phase needs more than one wavefront for it
    for phase, cost in enumerate(conflicts.phase_wavefronts):
        assert (cost > 1) == bool(conflicts.conflicting_banks[phase])


@given(access_maps(), st.sampled_from([8, 16, 32]))
def test_wavefronts_are_at_least_the_bytes_over_128(access: AccessMap, element_bits: int) -> None:
    # the banks deliver at most 128 bytes per wavefront
    conflicts = access.bank_conflicts(0, element_bits)
    words = set(itertools.chain.from_iterable(conflicts.words))
    assert conflicts.wavefronts >= -(-len(words) // 32)

"""Where the lowering places a shared tensor that reuses earlier ones
(`backend.lower.context.reused_base`): a table, a property against a byte-by-byte check of
overlaps, and the matmul's staged tile at the base of its ring."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.lower import lower
from backend.lower.context import reused_base
from ir.examples.matmul import matmul


@pytest.mark.parametrize(
    ("reuse", "alignment", "size", "expected"),
    [
        (("a", "b"), 16, 3072, 0),  # the span of a and b, exactly
        (("b",), 1024, 512, 1024),  # b's base, aligned
        (("b",), 16, 4096, None),  # larger than b, and c lies after it
        (("c",), 16, 8192, 3072),  # the last tensor: it may grow past the end
        (("a", "c"), 16, 512, None),  # b lies between a and c
        ((), 16, 16, None),  # no reuse: memory of its own
    ],
)
def test_reused_base_table(reuse, alignment, size, expected):
    # a: [0, 1024), b: [1024, 3072), c: [3072, 4096)
    bases = {"a": 0, "b": 1024, "c": 3072}
    ends = {"a": 1024, "b": 3072, "c": 4096}
    assert reused_base(reuse, bases, ends, alignment, size) == expected


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 64).map(lambda x: 16 * x), min_size=1, max_size=5),
    picks=st.lists(st.booleans(), min_size=5, max_size=5),
    size=st.integers(1, 128).map(lambda x: 16 * x),
    alignment=st.sampled_from([16, 128, 1024]),
)
def test_a_reusing_tensor_overlaps_only_the_tensors_it_reuses(sizes, picks, size, alignment):
    """Tensors laid out one after another; a new one that may reuse some of them is placed
    aligned, and byte by byte it overlaps none of the others."""
    bases, ends, total = {}, {}, 0
    for index, bytes_ in enumerate(sizes):
        bases[f"t{index}"], ends[f"t{index}"] = total, total + bytes_
        total += bytes_
    reuse = tuple(name for name, pick in zip(bases, picks) if pick)
    base = reused_base(reuse, bases, ends, alignment, size)
    if base is None:
        return
    assert base % alignment == 0
    taken = set(range(base, base + size))
    for name in bases:
        if name not in reuse:
            assert not taken & set(range(bases[name], ends[name])), name


def test_the_staged_tile_lies_at_the_base_of_the_ring():
    options = {"num_threads": 256, "block_m": 128, "block_n": 256, "block_k": 64}
    options |= {"stages": 4, "wgmma": True, "overlap_dot": True, "bulk": True}
    kernel = lower(matmul(tensor_cores=True, staged_store=True, **options), "sm_90a")
    source = kernel.source
    assert kernel.shared_bytes == 4 * (128 + 256) * 64 * 2
    assert "unsigned char* const s0 = la_smem + 0;" in source
    assert "unsigned char* const s2 = la_smem + 0;" in source
    # The barrier between the ring's last use and the tile's first, and the 16-byte stores.
    body = source[source.index("the loop's last wgmma dot") :]
    assert body.index("__syncthreads();") < body.index("store_shared(s2")
    assert body.count("*(uint4*)(g2 + ") == 16

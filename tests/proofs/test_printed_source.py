"""The text check's address patterns (`proofs.printed_source.address_pattern`): which printed
operands name an access's pointer at its proved address, and which do not."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proofs.printed_source import address_pattern


def access(width: int, unit_bits: int, pointer: str = "g0") -> SimpleNamespace:
    """The fields of `backend.lower.Access` that the pattern reads."""
    return SimpleNamespace(pointer=pointer, width=width, unit_bits=unit_bits)


# (width, unit bits, proved address as printed, a line of source, whether it uses the address)
CASES = [
    # a vector: a byte offset added to the pointer, as a whole operand
    (4, 8, "t * 16", "la_cp_async_16(s0 + (t * 16), g0 + (t * 16));", True),
    (4, 8, "t * 16", "la_cp_async_16(s0 + (t * 16), g0 + (t * 16 + 16));", False),
    (4, 8, "t * 16", "la_cp_async_16(s0 + (t * 16), g0 + (t * 16) + 16);", False),
    (4, 8, "t * 16", "v = *(uint4*)(g0 + (t * 16));", True),
    (4, 8, "t * 16", "v = ((uint4*)g0)[t * 16];", False),
    (2, 8, "0", "x = (c ? g0 + (0) : g0);", True),
    # one element of 4 bytes copied by cp.async: the same operand form, in bytes
    (1, 8, "0", "la_cp_async_4(s0 + (0), g0 + (0));", True),
    (1, 8, "t * 4", "la_cp_async_4(s0 + (t * 4), g0 + (t * 4));", True),
    (1, 8, "t * 4", "la_cp_async_4(s0 + (t * 4), g0 + (t * 4 + 4));", False),
    (1, 8, "0", "la_cp_async_4(s0 + (0), xg0 + (0));", False),
    (1, 8, "0", "la_cp_async_4(s0 + (0), a.g0 + (0));", False),
    # one element as a typed index, or a scratch copy's plain index
    (1, 32, "t", "((float*)g0)[t] = r0;", True),
    (1, 32, "t", "s[t] = g0[t];", True),
    (1, 32, "t", "((float*)g0)[t + 1] = r0;", False),
    (1, 32, "t", "((float*)g1)[t] = r0;", False),
    # one element of under a byte: a bit offset read or written by the bit helpers
    (1, 1, "t * 4", "r0 = la_load_bits(g0, t * 4, 4);", True),
    (1, 1, "t * 4", "la_store_bits(g0, t * 4, 4, r0);", True),
    (1, 1, "t * 4", "la_cp_async_4(s0 + (0), g0 + (t * 4));", False),
    (1, 1, "t * 4", "r0 = la_load_bits(g0, t * 4 + 4, 4);", False),
]


@pytest.mark.parametrize(("width", "unit_bits", "address", "line", "uses"), CASES)
def test_which_lines_use_the_address(
    width: int, unit_bits: int, address: str, line: str, uses: bool
) -> None:
    assert bool(address_pattern(access(width, unit_bits), address).search(line)) is uses


TERMS = st.one_of(
    st.integers(0, 4096).map(str), st.sampled_from(["t", "block_x", "la_inv0", "k * 128"])
)
ADDRESSES = st.lists(TERMS, min_size=1, max_size=4).map(" + ".join)


@given(width=st.sampled_from([1, 2, 4]), proved=ADDRESSES, printed=ADDRESSES)
def test_an_operand_matches_only_its_own_address(width: int, proved: str, printed: str) -> None:
    """A copy's operands printed at one address match the pattern of exactly that address."""
    line = f"la_cp_async_16(s0 + ({printed}), g0 + ({printed}));"
    found = address_pattern(access(width, 8), proved).search(line)
    assert bool(found) is (proved == printed)

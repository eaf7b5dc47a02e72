"""How a register tensor lives in the generated C: 32-bit words holding each thread's bitstream.

A register tensor of `size` elements of b bits is, in every thread, the array ``unsigned int
name[ceil(size * b / 32)]``; element k is bits [k*b, (k+1)*b) of the array read as one
little-endian bitstream (word k*b // 32, from bit k*b % 32; an element of 3, 5, 6 or 7 bits may
continue into the next word). That is the contract's storage rule and exactly what `view` means,
so a `view` copies words, a 16-byte load fills four words, a fast conversion takes a word of
codes, and a pair of f16 elements is one mma operand register, without unpacking anything.
Every index is a compile-time constant, so NVCC keeps the words in registers and folds the
shifts and masks of single-element access.

The functions print C text: `declaration`, `element_code` (read one element's code),
`element_update` (change one element, leaving the others), `word_assignments` (write every
element at once, word by word) and `word_codes` (the element codes one word holds).
"""

from __future__ import annotations

from collections.abc import Sequence

WORD_BITS = 32


def word_count(nbits: int, size: int) -> int:
    """Words holding `size` elements of `nbits` bits."""
    return -(-size * nbits // WORD_BITS)


def declaration(name: str, nbits: int, size: int) -> str:
    """The declaration of the word array of a register tensor."""
    return f"unsigned int {name}[{word_count(nbits, size)}];"


def _mask(nbits: int) -> str:
    return f"0x{(1 << nbits) - 1:X}u"


def element_code(name: str, nbits: int, index: int) -> str:
    """The C code (an unsigned int holding the b-bit code) of element `index`."""
    if nbits == WORD_BITS:
        return f"{name}[{index}]"
    bit = index * nbits
    word, shift = divmod(bit, WORD_BITS)
    low = f"({name}[{word}] >> {shift})" if shift else f"{name}[{word}]"
    if shift + nbits > WORD_BITS:
        high = f"({name}[{word + 1}] << {WORD_BITS - shift})"
        return f"(({low} | {high}) & {_mask(nbits)})"
    if shift + nbits == WORD_BITS:
        return low
    return f"({low} & {_mask(nbits)})"


def element_update(name: str, nbits: int, index: int, code: str) -> list[str]:
    """Statements writing `code` (which fits in b bits) as element `index`, keeping the rest."""
    if nbits == WORD_BITS:
        return [f"{name}[{index}] = {code};"]
    bit = index * nbits
    word, shift = divmod(bit, WORD_BITS)
    mask = (1 << nbits) - 1
    low_mask = (mask << shift) & 0xFFFFFFFF
    placed = f"((la_u32)({code}) << {shift})" if shift else f"(la_u32)({code})"
    lines = [f"{name}[{word}] = ({name}[{word}] & 0x{~low_mask & 0xFFFFFFFF:X}u) | {placed};"]
    if shift + nbits > WORD_BITS:
        high_mask = mask >> (WORD_BITS - shift)
        lines.append(
            f"{name}[{word + 1}] = ({name}[{word + 1}] & 0x{~high_mask & 0xFFFFFFFF:X}u) | "
            f"((la_u32)({code}) >> {WORD_BITS - shift});"
        )
    return lines


def word_codes(nbits: int, size: int, word: int) -> list[tuple[int, int]]:
    """(element index, bit offset of its code's bit 0 relative to the word's bit 0) of every
    element overlapping word `word`; the offset is negative for an element that began in the
    previous word."""
    first = word * WORD_BITS // nbits
    pieces = []
    for index in range(first, size):
        offset = index * nbits - word * WORD_BITS
        if offset >= WORD_BITS:
            break
        if offset + nbits > 0:
            pieces.append((index, offset))
    return pieces


def word_value(nbits: int, size: int, word: int, codes: Sequence[str]) -> str:
    """The C value of word `word` when element k holds ``codes[k]`` (each fits in b bits)."""
    parts = []
    for index, offset in word_codes(nbits, size, word):
        code = f"(la_u32)({codes[index]})"
        if offset > 0:
            code = f"({code} << {offset})"
        elif offset < 0:
            code = f"({code} >> {-offset})"
        parts.append(code)
    return " | ".join(parts)


def word_assignments(name: str, nbits: int, codes: Sequence[str]) -> list[str]:
    """Statements setting every word of the array from the element `codes` (one per element,
    each fitting in b bits; repeated in two words when an element straddles them, so pass
    variables or constants)."""
    size = len(codes)
    return [
        f"{name}[{word}] = {word_value(nbits, size, word, codes)};"
        for word in range(word_count(nbits, size))
    ]

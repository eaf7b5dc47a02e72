"""What the generated source must say for each recorded access, checked on the source text.

The lowering records every address it prints (`backend.lower.Access`); `proofs.lowering_validation`
proves the recorded expression against the layouts of the IR instruction. This module closes the
gap between the record and the kernel: it reads the kernel's CUDA source and checks that the
proved expression is the one printed, where it is used, and that the statements around it move
the registers and run on the threads the IR asks for. The checks, per access:

- "text": a line of the source uses `pointer` at the printed address, the C text of the proved
  expression (`backend.lower.context.c_text`) as a whole operand: for a vector (a byte
  offset), ``pointer + (ADDR)`` followed by ``)``, ``,`` or `` :``; for one element,
  ``pointer)[ADDR]`` (a typed index; ``pointer[ADDR]`` for a scratch copy), the same
  ``pointer + (ADDR)`` (a byte offset: a ``cp.async`` of one element of 4 bytes or more) or
  ``la_load_bits(pointer, ADDR, `` / ``la_store_bits(pointer, ADDR, `` (a bit offset). A printed
  ``ADDR + 1`` or another tensor's pointer matches no line. An element printed through a base
  pointer (`Access.base`: name, offset, index) needs the pointer's declaration, ``NAME =
  ((T*)pointer) + (OFFSET);``, a use ``NAME[INDEX]``, and the offset plus the index
  simplifying to the proved expression;
- "lanes": a vector load unpacks lane j of the loaded vector into register ``local_index + j``
  of the instruction's result, and a vector store packs registers ``local_index ..`` in lane
  order (the lane expressions of `backend.cuda_codegen` and the register words of
  `backend.lower.registers`, whose bit layout the emulation and GPU tests pin);
- "guard": the access sits inside ``if (GUARD) {`` with the recorded guard, or under no guard
  when the access has none (its own mask's ``if`` is not a guard, even where it tests the
  thread index alone);
- "mask": a masked access sits inside ``if (MASK) {`` or uses ``(MASK ? `` on its line.

A kernel lowered with ``hoist_invariants`` prints some block-invariant values as variables
computed once at its start (`LoweredKernel.invariants`): each expression above is then looked
for as printed through those variables (`backend.lower.context.replace_invariants`), and an
address that reads one needs its declaration, ``const int la_inv0 = DEFINITION;``, in the
source (`backend.lower.context.invariant_declaration`).

Each function returns None when the check holds and a sentence saying what is missing otherwise.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from backend.cuda_codegen import VECTOR_TYPES, pack_expression, unpack_expressions
from backend.lower import Access, registers
from backend.lower.context import c_text, invariant_declaration, replace_invariants
from layout_algebra.symbolic import Expr, as_expr, simplify

INDENT = "    "
"""One level of indentation of the generated source (`backend.cuda_codegen.CodeWriter`)."""


@dataclass(frozen=True)
class PrintedSource:
    """A kernel's source split into lines, with the enclosing block headers of each line, and
    the values it computes once at its start (`LoweredKernel.invariants`)."""

    lines: tuple[str, ...]
    invariants: tuple[tuple[Expr, Expr], ...] = ()

    @classmethod
    def of(cls, source: str, invariants: Sequence[tuple[Expr, Expr]] = ()) -> PrintedSource:
        """The lines of `source`, whose kernel hoisted `invariants` (definition, variable)."""
        return cls(tuple(source.split("\n")), tuple(invariants))

    def c(self, expr: Expr | int) -> str:
        """The C text the kernel prints for `expr`: through its hoisted variables."""
        if not self.invariants:
            return c_text(expr)
        return c_text(replace_invariants(as_expr(expr), dict(self.invariants)))

    def undeclared(self, expr: Expr | int) -> str | None:
        """The first hoisted variable that `expr` is printed with whose declaration no line of
        the source holds, as the declaration wanted; None when all are declared."""
        if not self.invariants:
            return None
        used = replace_invariants(as_expr(expr), dict(self.invariants)).free_vars()
        stripped = {line.strip() for line in self.lines}
        for definition, variable in self.invariants:
            wanted = invariant_declaration(variable, definition)
            if variable.name in used and wanted not in stripped:
                return wanted
        return None

    def matching(self, pattern: re.Pattern[str], needle: str) -> list[int]:
        """The indices of the lines where `pattern` matches; `needle` is a text every match
        holds, so the pattern is tried on the lines holding it alone (a kernel of thousands of
        accesses reads its source once per access)."""
        return [n for n, line in enumerate(self.lines) if needle in line and pattern.search(line)]

    @functools.cached_property
    def _enclosing(self) -> tuple[int, ...]:
        """For each line, the index of the header line of the block it sits in (the nearest
        line before it, indented less, that opens a block with `` {``), or -1 at the top."""
        last_opener: list[int] = []  # by indentation level: the last line opening a block
        enclosing = []
        for n, text in enumerate(self.lines):
            level = (len(text) - len(text.lstrip(" "))) // len(INDENT)
            enclosing.append(max(last_opener[:level], default=-1))
            if text.rstrip().endswith("{"):
                last_opener.extend([-1] * (level + 1 - len(last_opener)))
                last_opener[level] = n
        return tuple(enclosing)

    def headers(self, index: int) -> list[str]:
        """The headers (without `` {``) of the blocks enclosing line `index`, innermost first."""
        found = []
        n = self._enclosing[index]
        while n >= 0:
            found.append(self.lines[n].strip()[:-1].rstrip())
            n = self._enclosing[n]
        return found


def address_pattern(access: Access, printed: str) -> re.Pattern[str]:
    """The pattern of the access's pointer and its address, as `printed` (C text), as a whole
    operand: ``pointer + (address)`` (a vector, or an asynchronous copy's operand, which may
    move a single element) or, for one element, ``pointer[address]``."""
    pointer = re.escape(access.pointer)
    address = re.escape(printed)
    operand = rf"(?<![\w.]){pointer} \+ \({address}\)(?=\)|,| :)"
    if access.width > 1:
        return re.compile(operand)
    if access.unit_bits == 1:
        return re.compile(
            rf"la_(?:load|store|prefetch_l1|prefetch_l2)_bits\({pointer}, {address}(?:, |\))"
        )
    return re.compile(rf"{operand}|(?<![\w.]){pointer}\)?\[{address}\]")


def check_text(access: Access, source: PrintedSource) -> tuple[list[int], str | None]:
    """(the lines using the access's address, None) or ([], what is missing)."""
    if access.base is not None:
        return _check_base(access, source)
    address = source.c(access.expr)
    lines = source.matching(address_pattern(access, address), address)
    if not lines:
        return [], (
            f"no line of the source uses {access.pointer} at the proved address "
            f"{address} (units of {access.unit_bits} bits)"
        )
    for what, expr in (("address", access.expr), ("guard", access.guard), ("mask", access.mask)):
        missing = None if expr is None else source.undeclared(expr)
        if missing is not None:
            return [], f"the {what} reads a value the kernel never computes: no line {missing}"
    return lines, None


def _check_base(access: Access, source: PrintedSource) -> tuple[list[int], str | None]:
    """`check_text` of an element printed through a base pointer."""
    assert access.base is not None
    name, offset, index = access.base
    difference = simplify(as_expr(offset) + index - access.expr)
    if difference.op != "const" or difference.value != 0:
        return [], (
            f"the base pointer {name}'s offset {source.c(offset)} plus {index} is not the "
            f"proved address {source.c(access.expr)}"
        )
    declaration = re.compile(
        rf"\* const {re.escape(name)} = \(\(\w[\w ]*\*\){re.escape(access.pointer)}\) "
        rf"\+ \({re.escape(source.c(offset))}\);"
    )
    if not source.matching(declaration, f"{name} = "):
        return [], (
            f"no line declares {name} as {access.pointer} plus the offset {source.c(offset)}"
        )
    missing = source.undeclared(offset)
    if missing is not None:
        return [], f"the offset reads a value the kernel never computes: no line {missing}"
    lines = source.matching(re.compile(rf"(?<![\w.]){re.escape(name)}\[{index}\]"), name)
    if lines:
        return lines, None
    return [], f"no line of the source uses {name}[{index}]"


def check_guard(access: Access, source: PrintedSource, lines: Sequence[int]) -> str | None:
    """None when some line of the access runs under exactly its recorded guard. The access's
    own bounds check (its mask, which `check_mask` checks) is not a guard, even where it tests
    the thread index alone (a tensor of constant shape)."""
    wanted = None if access.guard is None else f"if ({source.c(access.guard)})"
    mask = None if access.mask is None else f"if ({source.c(access.mask)})"
    for index in lines:
        guards = [
            h for h in source.headers(index) if h == wanted or (h != mask and _is_replica_guard(h))
        ]
        if (wanted is None and not guards) or (wanted is not None and wanted in guards):
            return None
    where = "under no replica guard" if wanted is None else f"inside `{wanted}`"
    return f"no line printing the access runs {where}"


def _is_replica_guard(header: str) -> bool:
    """Whether a block header tests only the thread index (a replica guard)."""
    if not header.startswith("if (") or "la_thread" not in header:
        return False
    rest = re.sub(r"la_w_la_thread|la_thread", "", header)
    return re.search(r"\b(?!la_u32\b)[A-Za-z_]\w*\b", rest[len("if") :]) is None


def check_mask(access: Access, source: PrintedSource, lines: Sequence[int]) -> str | None:
    """None when the access has no mask, or some line of it is guarded by the printed mask."""
    if access.mask is None or (access.mask.is_const and access.mask.value != 0):
        return None
    mask = source.c(access.mask)
    for index in lines:
        if f"({mask} ? " in source.lines[index] or f"if ({mask})" in source.headers(index):
            return None
    return f"no line printing the access is guarded by its mask {mask}"


def check_lanes(
    access: Access,
    source: PrintedSource,
    lines: Sequence[int],
    register: str,
    loads: bool,
    combine_helper: str | None = None,
) -> str | None:
    """None when the vector's lanes move registers ``local_index ..`` of `register` in order.

    `loads`: a vector load into `register` (else a store from it; with `combine_helper`, a
    combining store's vector add: a call of that helper, `backend.cuda_codegen.
    combine_helper` of the type and width, with the words as the arguments after the
    address). A register tensor holds its thread's bitstream in 32-bit words
    (`backend.lower.registers`): a vector that starts on a word moves whole words (word
    ``local_index * b / 32 + q`` is the vector's word q), any other one writes or reads each
    element's bits.
    """
    if access.width == 1:
        return None
    bits = access.element_bits
    vector_bytes = access.width * bits // 8
    kind = VECTOR_TYPES[vector_bytes]
    first_bit = access.local_index * bits
    whole_words = vector_bytes >= 4 and first_bit % 32 == 0
    first, last = access.local_index, access.local_index + access.width - 1
    for index in lines:
        line = source.lines[index].strip()
        if loads:
            found = re.fullmatch(rf"const {re.escape(kind)} (la_v\d+) = \*\(const .*", line)
            if found is None:
                continue
            if whole_words:
                lanes = unpack_expressions(found.group(1), vector_bytes, 32)
                wanted = {f"{register}[{first_bit // 32 + q}] = {w};" for q, w in enumerate(lanes)}
            else:
                lanes = unpack_expressions(found.group(1), vector_bytes, bits)
                wanted = {
                    text
                    for j, lane in enumerate(lanes)
                    for text in registers.element_update(register, bits, first + j, lane)
                }
            nearby = {text.strip() for text in source.lines[index + 1 : index + 1 + len(wanted)]}
            if wanted <= nearby:
                return None
            continue
        if combine_helper is not None:
            words = [f"{register}[{first_bit // 32 + q}]" for q in range(vector_bytes // 4)]
            if whole_words and line.startswith(f"{combine_helper}("):
                if line.endswith(f", {', '.join(words)});"):
                    return None
            continue
        if whole_words:
            words = [f"{register}[{first_bit // 32 + q}]" for q in range(vector_bytes // 4)]
            packed = pack_expression(words, vector_bytes, 32)
        else:
            codes = [registers.element_code(register, bits, first + j) for j in range(access.width)]
            packed = pack_expression(codes, vector_bytes, bits)
        if line.endswith(f" = {packed};"):
            return None
    what = "unpacks its lanes into" if loads else "packs in lane order"
    if combine_helper is not None:
        what = f"is a {combine_helper} of the words of"
    return f"no vector access {what} registers {register}[{first}] .. {register}[{last}]"

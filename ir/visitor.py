"""Instruction visitors: one method per instruction, checked complete when the class is created.

Every consumer of the tile IR that treats instructions one by one (the interpreter, the
printer, the verifier's per-instruction checks, the CUDA lowering) is an `InstructionVisitor`:
it defines ``visit_<name>`` for each instruction class, `<name>` being the class name in
snake case (`LoadGlobal` -> ``visit_load_global``, `If` -> ``visit_if``), and `visit` calls
the one for the instruction's class.

When a subclass is created, it is checked against `ir.instructions.all_instruction_types()`:
each instruction needs its method, or must be listed in the class attribute `unhandled`
(instructions the visitor says it does not handle; visiting one raises `VisitorError`), or the
visitor declares that it treats every other instruction generically by defining
``visit_other`` (the printer and the verifier do: they work from an instruction's generic
fields, `Instruction.results()`, `operands()`, `scalars()`). A missing method is a
`VisitorError` at class creation naming the instructions, not a failure deep inside a run. The
interpreter and the lowering have no ``visit_other``, so a new instruction needs their methods.
A part of a visitor kept in another module (the lowering's memory and compute parts) is a plain
class that the visitor derives from, so only the whole visitor is checked.

    class Counter(InstructionVisitor):
        unhandled = ()
        def visit_load_global(self, instruction): ...
        ...   # one method per instruction
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

from ir.errors import VisitorError
from ir.instructions import Instruction, all_instruction_types

Result = TypeVar("Result")


def method_name(instruction_type: type[Instruction]) -> str:
    """The visitor method of an instruction class: ``visit_`` and the class name in snake case."""
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", instruction_type.__name__).lower()
    return f"visit_{snake}"


class InstructionVisitor(Generic[Result]):
    """Dispatches each instruction to the method for its class (see the module docstring)."""

    unhandled: ClassVar[tuple[type[Instruction], ...]] = ()
    """Instruction classes this visitor says it does not handle."""

    _methods: ClassVar[dict[type[Instruction], Callable[[Any, Any], Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        methods: dict[type[Instruction], Callable[[Any, Any], Any]] = {}
        missing = []
        other = getattr(cls, "visit_other", None)
        for instruction_type in all_instruction_types():
            method = getattr(cls, method_name(instruction_type), other)
            if method is not None:
                methods[instruction_type] = method
            elif instruction_type not in cls.unhandled:
                missing.append(instruction_type)
        if missing:
            names = ", ".join(f"{t.__name__} ({method_name(t)})" for t in missing)
            raise VisitorError(
                f"visitor {cls.__qualname__} handles no instruction {names}; define the method "
                "or list the instruction in its `unhandled` attribute (see `ir.visitor`)"
            )
        cls._methods = methods

    def visit(self, instruction: Instruction) -> Result:
        """Call the method for `instruction`'s class (``visit_other`` for a class defined after
        this visitor, where the visitor has one); `VisitorError` when there is none."""
        method = self._methods.get(type(instruction), getattr(type(self), "visit_other", None))
        if method is None:
            raise VisitorError(
                f"visitor {type(self).__qualname__} does not handle {type(instruction).__name__}"
                f": {instruction!r}"
            )
        return method(self, instruction)

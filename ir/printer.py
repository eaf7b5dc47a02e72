"""The text form of tile programs: one instruction per line, SSA-like names, indented bodies.

Example (the vector add of `ir.examples.vector_add`)::

    program vector_add(n: int, x: f16*, y: f16*, z: f16*) num_threads=128
      g0 = global_view(x, f16, GlobalLayout(...))
      ...
      r0: f16[1024] spatial(128).local(8) = load_global(g0, [block_x * 1024])
      r2: f16[1024] spatial(128).local(8) = add(r0, r1)
      store_global(g2, r2, [block_x * 1024])

An int parameter that must be a multiple of m prints as ``k: int multiple_of=m``. Register
tensors show their type, shape and layout where they are defined; scalars print as
Python-like expressions (`layout_algebra.symbolic`), layouts as their rebuilding `repr`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ir.errors import VerificationError
from ir.instructions import (
    Assign,
    Binary,
    Cast,
    CopyAsync,
    CopyAsyncCommit,
    CopyAsyncWait,
    Dot,
    ForRange,
    GlobalView,
    If,
    Instruction,
    LoadGlobal,
    LoadShared,
    Reduce,
    RegisterTensorInit,
    SharedTensorAlloc,
    StoreGlobal,
    StoreShared,
    Sync,
    Unary,
    View,
    Where,
)
from ir.values import ArrayParam, Param, RegisterTensor

if TYPE_CHECKING:
    from ir.program import Program
    from layout_algebra.symbolic import Expr

INDENT = "  "


def _offsets(offsets: Sequence[Expr]) -> str:
    return "[" + ", ".join(repr(offset) for offset in offsets) + "]"


def _register(tensor: RegisterTensor) -> str:
    """`name: dtype[shape] layout`, how a register tensor is shown where it is defined."""
    shape = ", ".join(str(extent) for extent in tensor.shape)
    return f"{tensor.name}: {tensor.dtype}[{shape}] {tensor.layout!r}"


def format_instruction(instruction: Instruction) -> str:
    """One line of text for `instruction` (for a loop or if: its header, without the body)."""
    match instruction:
        case RegisterTensorInit(out=out, init=init):
            return f"{_register(out)} = register_tensor({init!r})"
        case SharedTensorAlloc(out=out):
            return f"{out.name}: {out.dtype} {out.layout!r} = shared_tensor()"
        case GlobalView(out=out, param=param):
            return f"{out.name} = global_view({param.name}, {out.dtype}, {out.layout!r})"
        case LoadGlobal(out=out, src=src, offsets=offsets):
            return f"{_register(out)} = load_global({src.name}, {_offsets(offsets)})"
        case StoreGlobal(dst=dst, src=src, offsets=offsets):
            return f"store_global({dst.name}, {src.name}, {_offsets(offsets)})"
        case LoadShared(out=out, src=src, offsets=offsets):
            return f"{_register(out)} = load_shared({src.name}, {_offsets(offsets)})"
        case StoreShared(dst=dst, src=src, offsets=offsets):
            return f"store_shared({dst.name}, {src.name}, {_offsets(offsets)})"
        case CopyAsync():
            layout = "" if instruction.layout is None else f", layout={instruction.layout!r}"
            return (
                f"copy_async({instruction.dst.name}, {instruction.src.name}, "
                f"src={_offsets(instruction.src_offsets)}, "
                f"dst={_offsets(instruction.dst_offsets)}, shape={instruction.shape}{layout})"
            )
        case CopyAsyncCommit() | Sync():
            return f"{instruction.op}()"
        case CopyAsyncWait(pending=pending):
            return f"copy_async_wait({pending})"
        case Unary(op=op, out=out, x=x):
            return f"{_register(out)} = {op}({x.name})"
        case Binary(op=op, out=out, lhs=lhs, rhs=rhs):
            return f"{_register(out)} = {op}({lhs.name}, {rhs.name})"
        case Where(out=out, cond=cond, x=x, y=y):
            return f"{_register(out)} = where({cond.name}, {x.name}, {y.name})"
        case Cast(out=out, x=x):
            return f"{_register(out)} = cast({x.name})"
        case View(out=out, x=x):
            return f"{_register(out)} = view({x.name})"
        case Reduce(out=out, x=x, dim=dim, reduction=reduction, keepdim=keepdim):
            keep = ", keepdim=True" if keepdim else ""
            return f"{_register(out)} = reduce_{reduction}({x.name}, dim={dim}{keep})"
        case Dot(out=out, a=a, b=b, c=c):
            return f"{_register(out)} = dot({a.name}, {b.name}, {c.name})"
        case Assign(dst=dst, src=src):
            return f"{dst.name} = {src.name}"
        case ForRange(var=var, start=start, stop=stop, step=step):
            return f"for {var.name} in range({start!r}, {stop!r}, {step}):"
        case If(cond=cond):
            return f"if {cond!r}:"
    raise VerificationError(f"not an instruction of the tile IR: {instruction!r}")


def format_body(body: Sequence[Instruction], depth: int = 1) -> list[str]:
    """The lines of `body` indented `depth` levels, loop and if bodies one level deeper."""
    lines = []
    for instruction in body:
        lines.append(INDENT * depth + format_instruction(instruction))
        if isinstance(instruction, (ForRange, If)):
            lines.extend(format_body(instruction.body, depth + 1))
    return lines


def _format_param(param: Param) -> str:
    if isinstance(param, ArrayParam):
        return f"{param.name}: {param.dtype}*"
    if param.multiple_of > 1:
        return f"{param.name}: int multiple_of={param.multiple_of}"
    return f"{param.name}: int"


def format_program(program: Program) -> str:
    """The whole program: a header line with the parameters, then the body."""
    params = ", ".join(_format_param(p) for p in program.params)
    header = f"program {program.name}({params}) num_threads={program.num_threads}"
    return "\n".join([header, *format_body(program.body)])

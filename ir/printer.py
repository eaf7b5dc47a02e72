"""The text form of tile programs: one instruction per line, SSA-like names, indented bodies.

Example (the vector add of `ir.examples.vector_add`)::

    program vector_add(n: int, x: f16*, y: f16*, z: f16*) num_threads=128
      g0 = global_view(x, f16, GlobalLayout(...))
      ...
      r0: f16[1024] spatial(128).local(8) = load_global(g0, [block_x * 1024])
      r2: f16[1024] spatial(128).local(8) = add(r0, r1)
      store_global(g2, r2, [block_x * 1024])

An int parameter that must be a multiple of m prints as ``k: int multiple_of=m``; a
compile-time constant adds ``constant``, or ``constant=4096`` once specialised for 4096. A
declared grid (`ProgramBuilder.grid`) is a header line of its own after the parameters, e.g.
``grid (n // 256, (m + 15) // 16, 8)``, and an occupancy asked for
(`ProgramBuilder.min_blocks_per_sm`) one more, ``min_blocks_per_sm 4``. Register
tensors show their type, shape and layout where they are defined; scalars print as
Python-like expressions (`layout_algebra.symbolic`), layouts as their rebuilding `repr`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ir import instructions
from ir.arguments import grid_text
from ir.errors import VerificationError
from ir.instructions import Instruction
from ir.values import ArrayParam, Param, RegisterTensor
from ir.visitor import InstructionVisitor

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


class _LinePrinter(InstructionVisitor[str]):
    """The one-line text of each instruction (a loop or if: its header, without the body)."""

    def visit_register_tensor_init(self, instruction: instructions.RegisterTensorInit) -> str:
        return f"{_register(instruction.out)} = register_tensor({instruction.init!r})"

    def visit_shared_tensor_alloc(self, instruction: instructions.SharedTensorAlloc) -> str:
        out = instruction.out
        reuse = f"reuse=[{', '.join(instruction.reuse)}]" if instruction.reuse else ""
        return f"{out.name}: {out.dtype} {out.layout!r} = shared_tensor({reuse})"

    def visit_global_view(self, instruction: instructions.GlobalView) -> str:
        out = instruction.out
        return f"{out.name} = global_view({instruction.param.name}, {out.dtype}, {out.layout!r})"

    def visit_load_global(self, instruction: instructions.LoadGlobal) -> str:
        i = instruction
        fill = "" if i.fill == 0 else f", fill={i.fill!r}"
        return f"{_register(i.out)} = load_global({i.src.name}, {_offsets(i.offsets)}{fill})"

    def visit_prefetch_global(self, instruction: instructions.PrefetchGlobal) -> str:
        i = instruction
        level = "" if i.level == "L1" else f", level={i.level!r}"
        return f"prefetch_global({i.src.name}, {_offsets(i.offsets)}, layout={i.layout!r}{level})"

    def visit_store_global(self, instruction: instructions.StoreGlobal) -> str:
        i = instruction
        combine = "" if i.combine is None else f", combine={i.combine!r}"
        return f"store_global({i.dst.name}, {i.src.name}, {_offsets(i.offsets)}{combine})"

    def visit_atomic_add(self, instruction: instructions.AtomicAdd) -> str:
        i = instruction
        return f"{i.var.name} = atomic_add({i.dst.name}, {_offsets(i.offsets)}, {i.value!r})"

    def visit_load_shared(self, instruction: instructions.LoadShared) -> str:
        i = instruction
        return f"{_register(i.out)} = load_shared({i.src.name}, {_offsets(i.offsets)})"

    def visit_store_shared(self, instruction: instructions.StoreShared) -> str:
        i = instruction
        return f"store_shared({i.dst.name}, {i.src.name}, {_offsets(i.offsets)})"

    def visit_copy_async(self, instruction: instructions.CopyAsync) -> str:
        layout = "" if instruction.layout is None else f", layout={instruction.layout!r}"
        return (
            f"copy_async({instruction.dst.name}, {instruction.src.name}, "
            f"src={_offsets(instruction.src_offsets)}, "
            f"dst={_offsets(instruction.dst_offsets)}, shape={instruction.shape}{layout})"
        )

    def visit_copy_bulk(self, instruction: instructions.CopyBulk) -> str:
        return (
            f"copy_bulk({instruction.dst.name}, {instruction.src.name}, "
            f"src={_offsets(instruction.src_offsets)}, "
            f"dst={_offsets(instruction.dst_offsets)}, shape={instruction.shape})"
        )

    def visit_copy_bulk_wait(self, instruction: instructions.CopyBulkWait) -> str:
        return (
            f"copy_bulk_wait({instruction.dst.name}, {_offsets(instruction.offsets)}, "
            f"shape={instruction.shape})"
        )

    def visit_copy_bulk_release(self, instruction: instructions.CopyBulkRelease) -> str:
        return (
            f"copy_bulk_release({instruction.dst.name}, {_offsets(instruction.offsets)}, "
            f"shape={instruction.shape})"
        )

    def visit_copy_async_commit(self, instruction: instructions.CopyAsyncCommit) -> str:
        return f"{instruction.op}()"

    def visit_copy_async_wait(self, instruction: instructions.CopyAsyncWait) -> str:
        return f"copy_async_wait({instruction.pending})"

    def visit_sync(self, instruction: instructions.Sync) -> str:
        return f"{instruction.op}()"

    def visit_unary(self, instruction: instructions.Unary) -> str:
        return f"{_register(instruction.out)} = {instruction.op}({instruction.x.name})"

    def visit_binary(self, instruction: instructions.Binary) -> str:
        i = instruction
        return f"{_register(i.out)} = {i.op}({i.lhs.name}, {i.rhs.name})"

    def visit_where(self, instruction: instructions.Where) -> str:
        i = instruction
        return f"{_register(i.out)} = where({i.cond.name}, {i.x.name}, {i.y.name})"

    def visit_fma(self, instruction: instructions.Fma) -> str:
        i = instruction
        return f"{_register(i.out)} = fma({i.a.name}, {i.b.name}, {i.c.name})"

    def visit_cast(self, instruction: instructions.Cast) -> str:
        i = instruction
        exponent = f", exponent={i.exponent}" if i.exponent else ""
        biased = ", biased" if i.biased else ""
        return f"{_register(i.out)} = cast({i.x.name}{exponent}{biased})"

    def visit_view(self, instruction: instructions.View) -> str:
        return f"{_register(instruction.out)} = view({instruction.x.name})"

    def visit_reduce(self, instruction: instructions.Reduce) -> str:
        i = instruction
        keep = ", keepdim=True" if i.keepdim else ""
        return f"{_register(i.out)} = reduce_{i.reduction}({i.x.name}, dim={i.dim}{keep})"

    def visit_dot(self, instruction: instructions.Dot) -> str:
        i = instruction
        return f"{_register(i.out)} = dot({i.a.name}, {i.b.name}, {i.c.name})"

    def visit_assign(self, instruction: instructions.Assign) -> str:
        return f"{instruction.dst.name} = {instruction.src.name}"

    def visit_for_range(self, instruction: instructions.ForRange) -> str:
        i = instruction
        unroll = f", unroll={i.unroll}" if i.unroll != 1 else ""
        rolled = ", rolled=True" if i.rolled else ""
        return f"for {i.var.name} in range({i.start!r}, {i.stop!r}, {i.step}{unroll}{rolled}):"

    def visit_if(self, instruction: instructions.If) -> str:
        return f"if {instruction.cond!r}:"

    def visit_thread_group(self, instruction: instructions.ThreadGroup) -> str:
        budget = "" if instruction.registers is None else f", registers={instruction.registers}"
        return f"thread_group({instruction.start}, {instruction.threads}{budget}):"

    def visit_other(self, instruction: Instruction) -> str:
        """An instruction without a line of its own: its results, op, operands and scalars."""
        results = ", ".join(
            _register(t) if isinstance(t, RegisterTensor) else t.name for t in instruction.results()
        )
        arguments = [t.name for t in instruction.operands()]
        arguments += [repr(scalar) for scalar in instruction.scalars()]
        call = f"{instruction.op}({', '.join(arguments)})"
        return f"{results} = {call}" if results else call


_LINE_PRINTER = _LinePrinter()


def format_instruction(instruction: Instruction) -> str:
    """One line of text for `instruction` (for a loop or if: its header, without the body).

    Raises VerificationError for an object that is not an instruction of the tile IR.
    """
    if not isinstance(instruction, Instruction):
        raise VerificationError(f"not an instruction of the tile IR: {instruction!r}")
    return _LINE_PRINTER.visit(instruction)


def format_body(body: Sequence[Instruction], depth: int = 1) -> list[str]:
    """The lines of `body` indented `depth` levels, loop and if bodies one level deeper."""
    lines = []
    for instruction in body:
        lines.append(INDENT * depth + format_instruction(instruction))
        for inner in instruction.bodies():
            lines.extend(format_body(inner, depth + 1))
    return lines


def _format_param(param: Param) -> str:
    if isinstance(param, ArrayParam):
        return f"{param.name}: {param.dtype}*"
    text = f"{param.name}: int"
    if param.multiple_of > 1:
        text += f" multiple_of={param.multiple_of}"
    if param.value is not None:
        text += f" constant={param.value}"
    elif param.constant:
        text += " constant"
    return text


def format_program(program: Program) -> str:
    """The whole program: a header line with the parameters, the declared grid's line, the
    occupancy's, the programmatic launch's, the cluster's and the chain window's (when the
    program declares them), then the body."""
    params = ", ".join(_format_param(p) for p in program.params)
    header = [f"program {program.name}({params}) num_threads={program.num_threads}"]
    if program.grid is not None:
        header.append(f"grid {grid_text(program.grid)}")
    if program.min_blocks_per_sm is not None:
        header.append(f"min_blocks_per_sm {program.min_blocks_per_sm}")
    if program.programmatic_launch:
        header.append("programmatic_launch")
    if program.cluster is not None:
        header.append("cluster {} x {} x {}".format(*program.cluster))
    if program.wgmma_chain_window:
        header.append(f"wgmma_chain_window {program.wgmma_chain_window}")
    return "\n".join([*header, *format_body(program.body)])

"""Specialisation of a program for the values of its compile-time constant parameters.

An int parameter declared ``int_param("k", constant=True)`` gets its value when the program is
compiled (``backend.compile(program, arch, constants={"k": 4096})``), not at each call.
`specialize(program, {"k": 4096})` is the program for that value:

- every scalar of every instruction, at any depth (offsets, loop bounds, if conditions), and
  every extent and stride of every global view has the variable k replaced by the literal 4096,
  folded (`Expr.substitute`), so a lowering prints numbers and its simplifier works with them;
- every loop variable is bounded again from its loop's specialised start and stop, as the
  builder bounds it (`ir.builder.loop_variable`), where that narrows its bounds:
  ``for t in range(0, k // 64)`` gets t <= 63;
- the parameter keeps its place in `params`, recorded with its value (`IntParam.value`): a run
  or a kernel call still takes an argument for it, which must equal the value;
- a declared grid (`Program.grid`) gets the values too, and each block index whose extent then
  has a finite upper bound hi is bounded by [0, hi - 1] (`Program.block_indices`) in every
  scalar and view, as loop variables are: with ``grid(n // 512)`` and n = 24576, block_x <= 47,
  so a bounds check such as ``block_x * 512 + t * 4 + 3 < n`` simplifies away. This needs no
  constant: ``specialize(program, {})`` bounds the block indices of a program that declares
  its grid (the lowering always calls it); a launch refuses any other grid, which makes the
  bounds hold.

    with ProgramBuilder("scale", 128) as b:
        k = b.int_param("k", constant=True)
        ...                                   # k in views, offsets, loop bounds
    fixed = specialize(b.program(), {"k": 4096})
    str(fixed)                                # "program scale(k: int constant=4096, ...)", and
                                              # 4096 wherever the program read k

Meaning: running the specialised program on arguments whose k is the value gives what the
original gives on the same arguments (tests/ir/test_specialize.py checks it on random programs).

The constants are checked first (`check_constants`, raising `SpecializationError`): every
constant parameter without a value needs one; a value is an int within the parameter's bounds
and a multiple of its `multiple_of`; every name given is a constant parameter of the program
(a misspelt name or an ordinary parameter is refused, not ignored); a parameter specialised
before may be given again only with the same value.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Mapping

from ir.builder import loop_variable
from ir.errors import SpecializationError
from ir.instructions import ForRange, GlobalView, If, Instruction
from ir.program import Program
from ir.values import GlobalTensor, IntParam
from layout_algebra.errors import LayoutError
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.symbolic import Expr, const


def constant_params(program: Program) -> tuple[IntParam, ...]:
    """The compile-time constant parameters of `program`, in parameter order."""
    return tuple(p for p in program.params if isinstance(p, IntParam) and p.constant)


def check_constants(program: Program, constants: Mapping[str, object]) -> dict[str, int]:
    """The values `constants` gives the constant parameters of `program` not specialised yet.

    Raises `SpecializationError` naming the parameter for: a name that is no parameter, or not
    a constant one; a value that is not an int (a bool is not), lies outside the parameter's
    bounds, is not a multiple of its `multiple_of`, or differs from the value the parameter was
    already specialised for; a constant parameter with no value, given or recorded.
    """
    if not isinstance(constants, Mapping):
        raise SpecializationError(
            f"constants must be a mapping from parameter names to ints, got {constants!r}"
        )
    declared = constant_params(program)
    listing = ", ".join(p.name for p in declared) or "none"
    for name in constants:
        try:
            param = program.param(name) if isinstance(name, str) else None
        except KeyError:
            param = None
        if param is None:
            raise SpecializationError(
                f"{program.name} has no parameter {name!r} to give a constant value; its "
                f"compile-time constant parameters are: {listing}"
            )
        if not (isinstance(param, IntParam) and param.constant):
            raise SpecializationError(
                f"parameter {name!r} of {program.name} is not a compile-time constant (declare "
                f"it with int_param({name!r}, ..., constant=True)); its compile-time constant "
                f"parameters are: {listing}"
            )
    values: dict[str, int] = {}
    missing: list[str] = []
    for param in declared:
        if param.name not in constants:
            if param.value is None:
                missing.append(param.name)
            continue
        value = _checked_value(program, param, constants[param.name])
        if param.value is None:
            values[param.name] = value
        elif value != param.value:
            raise SpecializationError(
                f"constant {param.name} = {value}: {program.name} was already specialised for "
                f"{param.name} = {param.value}"
            )
    if missing:
        wanted = ", ".join(f"{name!r}: ..." for name in missing)
        raise SpecializationError(
            f"{program.name}: the compile-time constant parameters {', '.join(missing)} have no "
            f"value; give one at compile time, constants={{{wanted}}}"
        )
    return values


def _checked_value(program: Program, param: IntParam, value: object) -> int:
    """`value` as an int when it fits `param`, else `SpecializationError`."""
    if isinstance(value, bool):
        raise SpecializationError(
            f"constant {param.name} of {program.name} = {value!r} is a bool; expected an int"
        )
    try:
        number = operator.index(value)
    except TypeError:
        raise SpecializationError(
            f"constant {param.name} of {program.name} = {value!r} ({type(value).__name__}) is "
            "not an int"
        ) from None
    lo, hi = param.var.lo, param.var.hi
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        raise SpecializationError(
            f"constant {param.name} of {program.name} = {number} is outside the parameter's "
            f"bounds [{lo}, {hi}]"
        )
    if number % param.multiple_of:
        raise SpecializationError(
            f"constant {param.name} of {program.name} = {number} is not a multiple of "
            f"{param.multiple_of}, as the parameter requires"
        )
    return number


def specialize(program: Program, constants: Mapping[str, object]) -> Program:
    """`program` for the values `constants` of its constant parameters, its block indices
    bounded by its declared grid (see the module docstring); `program` itself when there is
    nothing to do (no constant parameter without a value, no block index to bound).

    Requires a program whose views, loops, scalars and grid are well formed (`ir.verify`).
    Raises `SpecializationError` for constants that do not fit (`check_constants`), or a value
    that makes an extent of a global view less than 1 or a stride negative.
    """
    values = check_constants(program, constants)
    literals = {name: const(value) for name, value in values.items()}
    grid = program.grid
    if grid is not None and literals:
        x, y, z = (extent.substitute(literals) for extent in grid)
        grid = (x, y, z)
    indices = {
        index.name: index
        for index in dataclasses.replace(program, grid=grid).block_indices
        if _reads_otherwise(program, index)
    }
    replacements: dict[str, Expr] = {**literals, **indices}
    if not replacements:
        return program

    def substitute(scalar: Expr) -> Expr:
        if scalar.free_vars() & replacements.keys():
            return scalar.substitute(replacements)
        return scalar

    given = [f"{name} = {value}" for name, value in values.items()]
    given += [f"{index.name} in [{index.lo}, {index.hi}]" for index in indices.values()]
    views: dict[GlobalTensor, GlobalTensor] = {}
    for instruction in program.walk():
        if isinstance(instruction, GlobalView):
            view = instruction.out
            layout = _specialised_layout(program, view, substitute, ", ".join(given))
            if layout != view.layout:
                views[view] = GlobalTensor(view.name, view.dtype, layout, view.param)
    body = tuple(
        _rebound_loops(instruction.map_scalars(substitute).replace_tensors(views))
        for instruction in program.body
    )
    params = tuple(
        dataclasses.replace(p, value=values[p.name]) if p.name in values else p
        for p in program.params
    )
    return dataclasses.replace(program, params=params, body=body, grid=grid)


def _reads_otherwise(program: Program, index: Expr) -> bool:
    """Whether a scalar of `program` reads the variable named like `index` with other bounds."""
    return any(
        variable.name == index.name and (variable.lo, variable.hi) != (index.lo, index.hi)
        for instruction in program.walk()
        for scalar in instruction.scalars()
        for variable in scalar.variables()
    )


def _specialised_layout(
    program: Program,
    view: GlobalTensor,
    substitute: Callable[[Expr], Expr],
    given: str,
) -> GlobalLayout:
    """The layout of `view` with every extent and stride passed through `substitute`."""
    layout = view.layout

    def entry(x: int | Expr) -> int | Expr:
        return substitute(x) if isinstance(x, Expr) else x

    try:
        return GlobalLayout(
            tuple(entry(x) for x in layout.shape), tuple(entry(x) for x in layout.strides)
        )
    except LayoutError as error:
        raise SpecializationError(
            f"global view {view.name} of {view.param.name} in {program.name}: with {given} its "
            f"layout {layout!r} is invalid: {error}"
        ) from error


def _narrower(new: Expr, old: Expr) -> bool:
    """Whether the bounds of variable `new` lie within those of `old` (None: unbounded)."""
    low = old.lo is None or (new.lo is not None and new.lo >= old.lo)
    high = old.hi is None or (new.hi is not None and new.hi <= old.hi)
    return low and high


def _rebound_loops(instruction: Instruction) -> Instruction:
    """`instruction` with the variable of each loop in it, at any depth, bounded again from its
    loop's start and stop (`ir.builder.loop_variable`) where that narrows its bounds, and every
    scalar of the loop's body reading the new variable."""
    match instruction:
        case ForRange():
            old = instruction.var
            new = loop_variable(old.name, instruction.start, instruction.stop)
            body = instruction.body
            if (new.lo, new.hi) != (old.lo, old.hi) and _narrower(new, old):
                renamed = {old.name: new}
                body = tuple(
                    inner.map_scalars(
                        lambda e: e.substitute(renamed) if old.name in e.free_vars() else e
                    )
                    for inner in body
                )
            else:
                new = old
            body = tuple(_rebound_loops(inner) for inner in body)
            if new is old and all(a is b for a, b in zip(body, instruction.body)):
                return instruction
            return dataclasses.replace(instruction, var=new, body=body)
        case If():
            body = tuple(_rebound_loops(inner) for inner in instruction.body)
            if all(a is b for a, b in zip(body, instruction.body)):
                return instruction
            return dataclasses.replace(instruction, body=body)
        case _:
            return instruction

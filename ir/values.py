"""The values a tile program computes with: parameters and tensors.

- `IntParam`: an integer kernel parameter; its `var` is the symbolic variable that scalar
  expressions use (`layout_algebra.symbolic`), and every argument is a multiple of its
  `multiple_of` (a promise the backend relies on for vector widths, checked at launch). A
  `constant` one is a compile-time constant: its value is given when the program is compiled
  (`ir.specialize`), which records it as the parameter's `value`.
- `ArrayParam`: a pointer parameter; its `dtype` is the element type, and the argument is any
  array whose raw bytes hold the dense bitstream of such elements (section 4 of the contract).
- `RegisterTensor`: a tile held in the threads' registers, placed by a `RegisterLayout`.
- `SharedTensor`: a tile in the block's shared memory, addressed by a `SharedLayout`.
- `GlobalTensor`: a view of an array parameter as a (possibly symbolic) `GlobalLayout` of elements.

Scalars (block indices, loop variables, integer parameters and integer expressions on them) are
plain `layout_algebra.symbolic.Expr` values, uniform over the block.

Every value is immutable and compared by identity; its `name` is unique within a program and is a
valid C identifier, so the printer and the backend can use it as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ir.dtypes import DataType
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import RegisterLayout
from layout_algebra.shared import SharedLayout

if TYPE_CHECKING:
    from layout_algebra.symbolic import Expr


@dataclass(frozen=True, eq=False)
class IntParam:
    """An integer parameter `name`; `var` is its symbolic variable (same name).

    Every argument must be a multiple of `multiple_of` (a positive int; 1, the default, allows
    any value): the interpreter and the launch check refuse any other. `constant` declares a
    compile-time constant (``int_param(name, constant=True)``): the program is compiled for one
    value of it. `value` is None, except in a program specialised for that value
    (`ir.specialize.specialize`), whose scalars no longer read `var`; every argument must then
    equal it.
    """

    name: str
    var: Expr
    multiple_of: int = 1
    constant: bool = False
    value: int | None = None


@dataclass(frozen=True, eq=False)
class ArrayParam:
    """A pointer parameter `name` to a dense bitstream of `dtype` elements."""

    name: str
    dtype: DataType


Param = IntParam | ArrayParam
"""Any parameter."""


@dataclass(frozen=True, eq=False)
class RegisterTensor:
    """A register tile of `dtype` elements; thread t holds element `layout.map(t, i)` at i."""

    name: str
    dtype: DataType
    layout: RegisterLayout

    @property
    def shape(self) -> tuple[int, ...]:
        """The tile shape, `layout.shape`."""
        return self.layout.shape


@dataclass(frozen=True, eq=False)
class SharedTensor:
    """A shared-memory tile of `dtype` elements; element c is at element offset `layout.offset(c)`.

    The buffer takes `packed_nbytes(layout.size, dtype)` bytes (the dense bitstream of
    `layout.size` elements).
    """

    name: str
    dtype: DataType
    layout: SharedLayout

    @property
    def shape(self) -> tuple[int, ...]:
        """The tile shape, `layout.shape`."""
        return self.layout.shape


@dataclass(frozen=True, eq=False)
class GlobalTensor:
    """Array parameter `param` seen as `dtype` elements placed by the `GlobalLayout` `layout`.

    Element c (0 <= c < shape in every dimension) is element number `sum(c[k] * strides[k])` of
    the parameter's bitstream read as `dtype`, i.e. its bits start at that number times
    `dtype.nbits`. `dtype` may differ from `param.dtype` (e.g. packed 4-bit weights read as bytes).
    """

    name: str
    dtype: DataType
    layout: GlobalLayout
    param: ArrayParam

    @property
    def rank(self) -> int:
        """Number of dimensions of the view."""
        return len(self.layout.shape)

"""Thread-to-data and data-to-address layouts of GPU tiles, and their algebra.

This module only re-exports the public names; each concept lives in its own module.
"""

from layout_algebra.divide import divide, left_divide
from layout_algebra.errors import LayoutError
from layout_algebra.register import (
    RegisterLayout,
    column_local,
    column_spatial,
    local,
    product,
    register_layout,
    replicate,
    spatial,
)
from layout_algebra.symbolic import (
    Expr,
    as_expr,
    const,
    evaluate,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    select,
    simplify,
    var,
)

__all__ = [
    "Expr",
    "as_expr",
    "const",
    "evaluate",
    "logical_and",
    "logical_not",
    "logical_or",
    "maximum",
    "minimum",
    "select",
    "simplify",
    "var",
    "LayoutError",
    "RegisterLayout",
    "column_local",
    "column_spatial",
    "divide",
    "left_divide",
    "local",
    "product",
    "register_layout",
    "replicate",
    "spatial",
]

"""Thread-to-data and data-to-address layouts of GPU tiles, and their algebra.

This module only re-exports the public names; each concept lives in its own module.
"""

from layout_algebra.access import AccessMap, BankConflicts, compose
from layout_algebra.auto import auto_local_spatial
from layout_algebra.divide import divide, left_divide
from layout_algebra.errors import LayoutError
from layout_algebra.expression_parser import ExpressionError, parse_layout
from layout_algebra.fragments import FRAGMENTS, Fragment, fragment
from layout_algebra.function_layout import FunctionLayout
from layout_algebra.global_layout import GlobalLayout, global_row_major
from layout_algebra.infer import layout_from_table
from layout_algebra.interop import (
    from_cute,
    from_cute_memory,
    from_linear_layout,
    to_cute,
    to_cute_memory,
    to_linear_layout,
)
from layout_algebra.reduce import reduce
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
from layout_algebra.shared import (
    SharedLayout,
    Swizzle,
    row_swizzle,
    shared_column_major,
    shared_product,
    shared_row_major,
    shared_row_major_swizzle,
    shared_strides,
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
from layout_algebra.tma_box import TmaBox, derive_box
from layout_algebra.transform import concat, flatten, permute, reshape, squeeze, unsqueeze
from layout_algebra.wgmma_descriptor import WgmmaDescriptor, derive_descriptor

__all__ = [
    "AccessMap",
    "BankConflicts",
    "FRAGMENTS",
    "Fragment",
    "FunctionLayout",
    "fragment",
    "GlobalLayout",
    "SharedLayout",
    "Swizzle",
    "compose",
    "global_row_major",
    "row_swizzle",
    "shared_column_major",
    "shared_product",
    "shared_row_major",
    "shared_row_major_swizzle",
    "shared_strides",
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
    "ExpressionError",
    "LayoutError",
    "RegisterLayout",
    "auto_local_spatial",
    "column_local",
    "column_spatial",
    "concat",
    "divide",
    "flatten",
    "from_cute",
    "from_cute_memory",
    "from_linear_layout",
    "layout_from_table",
    "left_divide",
    "local",
    "parse_layout",
    "permute",
    "product",
    "reduce",
    "register_layout",
    "replicate",
    "reshape",
    "spatial",
    "squeeze",
    "to_cute",
    "to_cute_memory",
    "to_linear_layout",
    "unsqueeze",
    "TmaBox",
    "derive_box",
    "WgmmaDescriptor",
    "derive_descriptor",
]

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

__all__ = [
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

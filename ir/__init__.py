"""The tile IR: low-precision data types, programs, builder, verifier and NumPy interpreter."""

from ir import dtypes as dtypes
from ir.dtypes import DataType as DataType
from ir.dtypes import DtypeError as DtypeError

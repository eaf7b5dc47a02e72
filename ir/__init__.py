"""The tile IR: low-precision data types, programs, builder, verifier and NumPy interpreter."""

from ir import dtypes as dtypes
from ir.builder import ProgramBuilder as ProgramBuilder
from ir.dtypes import DataType as DataType
from ir.dtypes import DtypeError as DtypeError
from ir.elementwise import BINARY_OPS as BINARY_OPS
from ir.elementwise import REDUCTIONS as REDUCTIONS
from ir.elementwise import UNARY_OPS as UNARY_OPS
from ir.elementwise import ElementwiseOp as ElementwiseOp
from ir.errors import InterpreterError as InterpreterError
from ir.errors import SpecializationError as SpecializationError
from ir.errors import VerificationError as VerificationError
from ir.interpreter import run_reference as run_reference
from ir.printer import format_program as format_program
from ir.program import BLOCK_INDICES as BLOCK_INDICES
from ir.program import Program as Program
from ir.specialize import specialize as specialize
from ir.values import ArrayParam as ArrayParam
from ir.values import GlobalTensor as GlobalTensor
from ir.values import IntParam as IntParam
from ir.values import RegisterTensor as RegisterTensor
from ir.values import SharedTensor as SharedTensor
from ir.verifier import DEFAULT_SHARED_MEMORY_LIMIT as DEFAULT_SHARED_MEMORY_LIMIT
from ir.verifier import check_instruction as check_instruction
from ir.verifier import verify as verify

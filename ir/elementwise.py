"""The elementwise operations of the tile IR: their table and their exact NumPy meaning.

Values in the reference interpreter are float32 arrays for float types (each element exactly
representable in its type) and int64 arrays for integer types. An operation computes on those and
then brings the result back into the result type:

- Floats: compute in float32 with NumPy's float32 operations, then round to the result type
  through its codec (`dtype.decode(dtype.encode(v))`: round to nearest even, with the type's
  overflow, inf and NaN rules). For f16 and bf16 this equals the GPU's native correctly rounded
  f16/bf16 operation for + - * / and sqrt, because float32 has at least 2p + 2 significand bits
  (double rounding is innocuous), which is what lets the backend use the native instructions.
  Operations marked ``exact=False`` (the transcendental ones) are not bit-exact on the GPU; GPU
  differential tests compare them with a tolerance.
- NaN (the contract's three classes): moves keep codes bit for bit. A NaN code's value carries
  its sign and payload (`to_values`: the code's mantissa at the top of the float32 mantissa)
  and `to_codes` gives the code back, so a load, store, copy, `view`, `assign` or `where` never
  changes a NaN; `neg` and `abs` are moves that flip or clear the sign bit. A `cast` encodes
  through the codec, which keeps a NaN's sign and drops its payload; every other float
  operation whose result is NaN gives the positive quiet NaN (`arithmetic_nan`), whatever the
  operands' NaNs and the host's CPU (x86 would give the first operand's payload or the negative
  default NaN). Its payload is unspecified by the contract: the GPU gives its own canonical
  NaN, and differential tests compare such NaNs by sign.
- Integers: compute exactly in int64, then wrap to the type's bit width (two's complement for
  signed types; modulo 2^nbits for unsigned ones). Integer `div` and `mod` use Python's *floor*
  semantics (``-7 div 2 == -4``, ``-7 mod 2 == 1``), not C's truncation; the backend emits
  floor-correct code. Division by zero, and shifts by an amount outside [0, nbits), are errors
  (`InterpreterError`). `shr` on a signed type is arithmetic.
- `max` and `min` on floats are written as case splits so that NaN and signed zeros are fixed:
  ``max(a, b) = b if (a < b or a is NaN) else a`` and ``min(a, b) = b if (b < a or a is NaN) else
  a`` (a NaN operand loses to a number, as in C's fmaxf; ``max(-0, +0) == -0``).
- Comparisons (`lt`, `le`, `gt`, `ge`, `eq`, `ne`) give `u1` (1 for true); IEEE rules for NaN
  (every comparison with NaN is false, except `ne`). `where(cond, x, y)` takes a `u1` condition.

Binary operations require both operands of one type (casts are explicit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ir import dtypes
from ir.dtypes import DataType
from ir.errors import InterpreterError

FLOAT = "float"
INT = "int"


@dataclass(frozen=True)
class ElementwiseOp:
    """One elementwise operation of the IR.

    Fields: `name` (the instruction's `op`), `arity` (1 or 2), `kinds` (the operand type kinds
    it accepts: ``"float"``, ``"int"``), `exact` (bit-exact on the GPU; False for transcendental
    functions), `is_comparison` (the result type is `u1` instead of the operand type) and
    `formula` (the meaning in C-like notation, for documentation and the backend).
    """

    name: str
    arity: int
    kinds: frozenset[str]
    exact: bool
    is_comparison: bool
    formula: str


def _op(
    name: str, arity: int, kinds: str, exact: bool, formula: str, comparison: bool = False
) -> ElementwiseOp:
    return ElementwiseOp(name, arity, frozenset(kinds.split(",")), exact, comparison, formula)


UNARY_OPS: dict[str, ElementwiseOp] = {
    op.name: op
    for op in (
        _op("neg", 1, "float,int", True, "-x"),
        _op("abs", 1, "float,int", True, "|x|"),
        _op("invert", 1, "int", True, "~x (bitwise not)"),
        _op("exp", 1, "float", False, "e^x"),
        _op("exp2", 1, "float", False, "2^x"),
        _op("log", 1, "float", False, "ln x"),
        _op("log2", 1, "float", False, "log2 x"),
        _op("sqrt", 1, "float", True, "sqrt(x), correctly rounded"),
        _op("rsqrt", 1, "float", False, "1 / sqrt(x)"),
        _op("sigmoid", 1, "float", False, "1 / (1 + e^-x)"),
        _op("tanh", 1, "float", False, "tanh x"),
    )
}

BINARY_OPS: dict[str, ElementwiseOp] = {
    op.name: op
    for op in (
        _op("add", 2, "float,int", True, "x + y"),
        _op("sub", 2, "float,int", True, "x - y"),
        _op("mul", 2, "float,int", True, "x * y"),
        _op("div", 2, "float,int", True, "x / y (float: IEEE f32 division; int: floor)"),
        _op("mod", 2, "int", True, "x mod y (floor: the sign of y)"),
        _op("max", 2, "float,int", True, "y if (x < y or x is NaN) else x"),
        _op("min", 2, "float,int", True, "y if (y < x or x is NaN) else x"),
        _op("and", 2, "int", True, "x & y"),
        _op("or", 2, "int", True, "x | y"),
        _op("xor", 2, "int", True, "x ^ y"),
        _op("shl", 2, "int", True, "x << y, 0 <= y < nbits"),
        _op("shr", 2, "int", True, "x >> y, 0 <= y < nbits (arithmetic when signed)"),
        _op("lt", 2, "float,int", True, "x < y", comparison=True),
        _op("le", 2, "float,int", True, "x <= y", comparison=True),
        _op("gt", 2, "float,int", True, "x > y", comparison=True),
        _op("ge", 2, "float,int", True, "x >= y", comparison=True),
        _op("eq", 2, "float,int", True, "x == y", comparison=True),
        _op("ne", 2, "float,int", True, "x != y", comparison=True),
    )
}

REDUCTIONS = ("sum", "max", "min")
"""The reductions of the `reduce` instruction."""


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """The NumPy broadcast of tile shapes, or None when they do not broadcast."""
    rank = max(len(shape) for shape in shapes)
    result = []
    for dim in range(rank):
        extents = {shape[dim - rank + len(shape)] for shape in shapes if dim >= rank - len(shape)}
        extents.discard(1)
        if len(extents) > 1:
            return None
        result.append(extents.pop() if extents else 1)
    return tuple(result)


def kind_of(dtype: DataType) -> str:
    """``"float"`` for float types, ``"int"`` for integer types."""
    return FLOAT if dtype.is_float else INT


def value_dtype(dtype: DataType) -> type[np.generic]:
    """The NumPy type of the interpreter's values of `dtype`: float32 or int64."""
    return np.float32 if dtype.is_float else np.int64


def round_values(dtype: DataType, values: np.ndarray) -> np.ndarray:
    """Bring float32 (float types) or int64 (integer types) results into `dtype`.

    Floats round through the codec (`f32` keeps float32 values as they are); integers wrap to the
    type's width, two's complement when signed.
    """
    if dtype.is_float:
        values = np.asarray(values, dtype=np.float32)
        if dtype == dtypes.f32:
            return values
        return dtype.decode(dtype.encode(values))
    bits = np.asarray(values, dtype=np.int64) & ((1 << dtype.nbits) - 1)
    if dtype.is_signed:
        bits = bits - ((bits >> (dtype.nbits - 1)) << dtype.nbits)
    return bits


def arithmetic_nan(values: np.ndarray) -> np.ndarray:
    """float32 `values` with every NaN replaced by the positive quiet NaN (0x7FC00000): the result
    of a float operation of the contract's arithmetic class."""
    values = np.asarray(values, dtype=np.float32)
    return np.where(np.isnan(values), np.float32(np.nan), values)


def cast_nan(values: np.ndarray) -> np.ndarray:
    """float32 `values` with every NaN replaced by the quiet NaN of its sign (0x7FC00000 or
    0xFFC00000): what a `cast` of the contract's second class makes of a NaN, whatever code it
    carried."""
    values = np.asarray(values, dtype=np.float32)
    return np.where(np.isnan(values), np.copysign(np.float32(np.nan), values), values)


F32_OVERFLOW = 2.0**128
"""The float32 value past the largest finite one: the upper neighbour rounding overflows to."""


def fused_multiply_add(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` of float32 arrays rounded once to float32 (nearest even), the contract's
    `fma`; a NaN result is the positive quiet NaN.

    The product is exact in float64 (24 + 24 significand bits); the float64 sum s is rounded
    once, and its error e is exact (Knuth's two-sum). Rounding s to float32 is then right
    except where s lies exactly halfway between two float32 values and e is not zero: the
    exact sum lies on e's side of that midpoint, so it rounds to that side's neighbour.
    """
    with np.errstate(all="ignore"):
        product = a.astype(np.float64) * b.astype(np.float64)
        addend = c.astype(np.float64)
        total = product + addend
        virtual = total - product
        error = (product - (total - virtual)) + (addend - virtual)
        rounded = total.astype(np.float32)
        wide = rounded.astype(np.float64)
        above = wide > total
        other = np.nextafter(rounded, np.where(above, -np.inf, np.inf).astype(np.float32))
        other_wide = other.astype(np.float64)
        # A float32 overflow's neighbour beyond the largest finite value is 2^128.
        wide = np.where(np.isinf(wide), np.copysign(F32_OVERFLOW, wide), wide)
        other_wide = np.where(
            np.isinf(other_wide), np.copysign(F32_OVERFLOW, other_wide), other_wide
        )
        # The midpoint of two neighbouring float32 values is exact in float64.
        tie = np.isfinite(total) & (error != 0) & (total == (wide + other_wide) / 2)
        # On a tie, the neighbour on the side of the error: `rounded` or `other`.
        toward_rounded = (error > 0) == above
        result = np.where(tie & ~toward_rounded, other, rounded)
    return arithmetic_nan(result)


MOVE_UNARY_OPS = frozenset({"neg", "abs"})
"""Float unary operations that act on the sign bit alone (a NaN keeps its sign)."""


def _keeps_nan_codes(dtype: DataType) -> bool:
    """Whether `dtype`'s NaN codes need carrying in their float32 values: a float type with NaNs
    narrower than f32 (f32's values are its codes' bits)."""
    return dtype.is_float and dtype.has_nan and dtype.nbits < 32


def to_values(dtype: DataType, codes: np.ndarray) -> np.ndarray:
    """The interpreter values (float32 or int64) of `codes` of `dtype`: `dtype.decode`, except
    that a NaN code's float32 value carries the code (its sign, and its mantissa as the top of
    the float32 mantissa), so that `to_codes` gives it back."""
    values = np.asarray(dtype.decode(codes), dtype=value_dtype(dtype))
    if not _keeps_nan_codes(dtype):
        return values
    nan = np.isnan(values)
    if not nan.any():
        return values
    codes = np.asarray(codes, dtype=np.int64)
    sign = (codes >> (dtype.nbits - 1)) & 1
    mantissa = codes & ((1 << dtype.mantissa_bits) - 1)
    bits = (sign << 31) | 0x7F800000 | (mantissa << (23 - dtype.mantissa_bits))
    return np.where(nan, bits.astype(np.uint32).view(np.float32), values)


def to_codes(dtype: DataType, values: np.ndarray) -> np.ndarray:
    """The codes (int64) of interpreter `values` of `dtype`, the inverse of `to_values`: a NaN
    that carries a NaN code of `dtype` gives that code; any other value is encoded by the
    codec (a NaN from arithmetic: the type's NaN with its sign)."""
    codes = np.asarray(dtype.encode(values), dtype=np.int64)
    if not _keeps_nan_codes(dtype):
        return codes
    values = np.asarray(values, dtype=np.float32)
    nan = np.isnan(values)
    if not nan.any():
        return codes
    bits = values.view(np.uint32).astype(np.int64)
    exponent = ((1 << dtype.exponent_bits) - 1) << dtype.mantissa_bits
    carried = (
        ((bits >> 31) << (dtype.nbits - 1))
        | exponent
        | ((bits & 0x7FFFFF) >> (23 - dtype.mantissa_bits))
    )
    return np.where(nan & np.isnan(dtype.decode(carried)), carried, codes)


def _float_max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where((a < b) | np.isnan(a), b, a)


def _float_min(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where((b < a) | np.isnan(a), b, a)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    one = np.float32(1)
    return one / (one + np.exp(-x))


_FLOAT_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": np.negative,
    "abs": np.abs,
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log2": np.log2,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: np.float32(1) / np.sqrt(x),
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
}

_INT_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": np.negative,
    "abs": np.abs,
    "invert": np.invert,
}

_FLOAT_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": _float_max,
    "min": _float_min,
}

_INT_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.floor_divide,
    "mod": np.mod,
    "max": np.maximum,
    "min": np.minimum,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "shl": np.left_shift,
    "shr": np.right_shift,
}

_COMPARISONS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
}


def result_dtype(op: str, dtype: DataType) -> DataType:
    """The result type of elementwise `op` on operands of `dtype`: `u1` for comparisons."""
    if op in BINARY_OPS and BINARY_OPS[op].is_comparison:
        return dtypes.u1
    return dtype


def apply_unary(op: str, dtype: DataType, x: np.ndarray) -> np.ndarray:
    """Values of unary `op` on values `x` of `dtype`, rounded or wrapped into `dtype`."""
    if dtype.is_float:
        with np.errstate(all="ignore"):
            result = _FLOAT_UNARY[op](np.asarray(x, dtype=np.float32))
        if op in MOVE_UNARY_OPS:
            return result  # a sign-bit change of a value of the type: exact, NaNs kept
        return round_values(dtype, arithmetic_nan(result))
    return round_values(dtype, _INT_UNARY[op](np.asarray(x, dtype=np.int64)))


def apply_binary(op: str, dtype: DataType, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Values of binary `op` on values `x`, `y` of `dtype` (NumPy broadcasting).

    The result is in `result_dtype(op, dtype)`. Raises InterpreterError on integer division or
    modulo by zero and on a shift amount outside [0, nbits).
    """
    if op in _COMPARISONS:
        with np.errstate(invalid="ignore"):
            return _COMPARISONS[op](x, y).astype(np.int64)
    if dtype.is_float:
        with np.errstate(all="ignore"):
            result = _FLOAT_BINARY[op](np.asarray(x, np.float32), np.asarray(y, np.float32))
        return round_values(dtype, arithmetic_nan(result))
    x = np.asarray(x, dtype=np.int64)
    y = np.asarray(y, dtype=np.int64)
    if op in ("div", "mod") and np.any(y == 0):
        raise InterpreterError(f"integer {op} by zero in {dtype} operands")
    if op in ("shl", "shr") and (np.any(y < 0) or np.any(y >= dtype.nbits)):
        bad = int(y[(y < 0) | (y >= dtype.nbits)].flat[0])
        raise InterpreterError(
            f"{op} by {bad}: the shift amount of a {dtype} value must be in [0, {dtype.nbits})"
        )
    return round_values(dtype, _INT_BINARY[op](x, y))

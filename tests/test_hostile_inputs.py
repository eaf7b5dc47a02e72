"""Hostile inputs across the project: every one is refused with the project's own exception,
whose message names the bad value, never a raw Python or NumPy error, a hang or a crash.

Each row of `CASES` is (a call, the exact exception type, a fragment of its message). The
layouts, the layout text (expressions, CuTe, linear layouts), the IR builder, the data types,
the interpreter's arguments, compile and launch checks that need no GPU, the packed-weight and
quantized-matmul APIs, the torch layer, the autotuner and the proofs' limits are covered here;
the command line's usage errors (exit code 2) are in `CLI_CASES`.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import backend
from backend.autotune import TuningError, autotune
from backend.decode_matmul import DecodeProblem
from backend.errors import ArchitectureError, LaunchError
from backend.kernel import KernelArrayParam
from ir import dtypes, run_reference
from ir.builder import ProgramBuilder
from ir.dtypes import DtypeError
from ir.errors import InterpreterError, SpecializationError, VerificationError
from ir.examples.packed_weights import (
    WeightFormat,
    pack_scales,
    pack_weights,
    pack_weights_program,
    unpack_weights,
)
from ir.examples.register_dequant_matmul import (
    DequantConfig,
    register_dequant_matmul,
    split_k_sum,
)
from ir.examples.vector_add import vector_add
from ir.program import Program
from layout_algebra import (
    FunctionLayout,
    GlobalLayout,
    LayoutError,
    Swizzle,
    auto_local_spatial,
    compose,
    concat,
    divide,
    flatten,
    fragment,
    from_cute,
    from_linear_layout,
    global_row_major,
    layout_from_table,
    left_divide,
    local,
    permute,
    reduce,
    register_layout,
    replicate,
    reshape,
    row_swizzle,
    shared_row_major,
    shared_row_major_swizzle,
    shared_strides,
    spatial,
    squeeze,
    to_cute,
    to_linear_layout,
    unsqueeze,
    var,
)
from layout_algebra.cli import main
from layout_algebra.expression_parser import ExpressionError, parse_layout
from layout_algebra.validation import MAX_LAYOUT_SIZE
from proofs import check_equivalent
from proofs.errors import ProofError

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")


# ------------------------------------------------------------------------------------ helpers


def program(body: Callable[[ProgramBuilder], Any], threads: int = 32) -> Callable[[], Program]:
    """A call that builds a program of `threads` threads whose body is `body(builder)`."""

    def build() -> Program:
        with ProgramBuilder("hostile", threads) as b:
            body(b)
        return b.program()

    return build


def halves(b: ProgramBuilder, layout: Any = None) -> Any:
    """An f16 register tensor of 32 elements, one per thread (or in `layout`)."""
    return b.register_tensor(dtypes.f16, layout or spatial(32))


def view(b: ProgramBuilder, dtype: Any = dtypes.f16) -> Any:
    """A 64-element view of a new array parameter `x` of `dtype`."""
    return b.global_view(b.array_param("x", dtype), dtype, GlobalLayout((64,), (1,)))


def vector_args(n: object = 8, *x: object, **kwargs: object) -> Callable[[], Any]:
    """``run_reference(vector_add(), n, x, y, z, **kwargs)``: `x` when given, else f16 arrays
    of 8 elements."""

    def run() -> Any:
        arrays = [np.zeros(8, np.float16) for _ in range(3)]
        return run_reference(vector_add(), n, *x, *arrays[len(x) :], **kwargs)

    return run


def divided_view_program() -> Program:
    """copy(n, m, x): a view of x whose extent n // m divides by zero when m is 0."""
    with ProgramBuilder("divided", 32) as b:
        n, m = b.int_param("n"), b.int_param("m")
        x = b.array_param("x", dtypes.u8)
        source = b.global_view(x, dtypes.u8, GlobalLayout((n // m,), (1,)))
        b.load_global(source, [0], spatial(32))
    return b.program()


def negative_stride_program() -> Program:
    """copy(n, x): a view of x whose stride n - 4 is negative when n < 4."""
    with ProgramBuilder("strided", 32) as b:
        n = b.int_param("n")
        x = b.array_param("x", dtypes.u8)
        source = b.global_view(x, dtypes.u8, GlobalLayout((32,), (n - 4,)))
        b.load_global(source, [0], spatial(32))
    return b.program()


def constant_program() -> Program:
    """A program with one compile-time constant k in [1, 1024], a multiple of 4."""
    with ProgramBuilder("constants", 32) as b:
        b.int_param("k", 1, 1024, multiple_of=4, constant=True)
    return b.program()


@functools.cache
def compiled_vector_add() -> Any:
    """vector_add compiled for sm_80 (NVRTC; no GPU needed), once."""
    return backend.compile(vector_add(), "sm_80")


def launch(*args: object, **kwargs: object) -> Callable[[], None]:
    """A call of the compiled vector_add with `args` (refused before the GPU is touched)."""
    return lambda: compiled_vector_add()(*args, **kwargs)


def compile_with(make: Callable[[], Program], arch: object, **kwargs: object) -> Callable[[], Any]:
    """A call of ``backend.compile(make(), arch, **kwargs)``."""
    return lambda: backend.compile(make(), arch, **kwargs)


def tune(
    candidates: object, key: object = None, namespace: object = "hostile/1", **kw: Any
) -> Callable[[], Any]:
    """An autotuning of `candidates` whose every step is trivial; its input checks come before
    any record is read (the session's temporary kernel cache, tests/conftest.py)."""

    def run() -> Any:
        return autotune(
            namespace,
            {"m": 1} if key is None else key,
            candidates,
            construct=lambda candidate: candidate,
            build=lambda candidate, built: built,
            measure=lambda built: 1.0,
            progress=False,
            **kw,
        )

    return run


def torch_call(make: Callable[[Any, Any], Any]) -> Callable[[], Any]:
    """A call of `make(torch, QuantizedLinear)`, importing torch only when it runs."""

    def run() -> Any:
        import torch

        from backend.quantized_linear import QuantizedLinear

        return make(torch, QuantizedLinear)

    return run


def case(name: str, make: Callable[[], Any], error: type[Exception], fragment: str, *marks: Any):
    """One row of `CASES`, shown as `name`."""
    return pytest.param(make, error, fragment, id=name, marks=marks)


# -------------------------------------------------------------------------------------- cases

LAYOUT_CASES = [
    # Constructors: sizes that are not positive ints.
    case(
        "local-float", lambda: local(2.5), LayoutError, "local shape[0] must be an integer, got 2.5"
    ),
    case("local-zero", lambda: local(0), LayoutError, "local shape[0] must be >= 1, got 0"),
    case("local-negative", lambda: local(4, -4), LayoutError, "shape[1] must be >= 1, got -4"),
    case("local-none", lambda: local(None), LayoutError, "must be an integer, got None"),
    case("spatial-nan", lambda: spatial(float("nan")), LayoutError, "got nan"),
    case("spatial-string", lambda: spatial("4"), LayoutError, "must be an integer, got '4'"),
    case("spatial-bool", lambda: spatial(True), LayoutError, "must be an integer, got True"),
    case("spatial-numpy-float", lambda: spatial(np.float64(4)), LayoutError, "np.float64(4.0)"),
    case("replicate-zero", lambda: replicate(0), LayoutError, "num_threads must be >= 1, got 0"),
    case("replicate-float", lambda: replicate(1.5), LayoutError, "must be an integer, got 1.5"),
    # Huge sizes: past 2**62 a layout's indices leave int64 (Python ints far past it too).
    case(
        "spatial-2**63", lambda: spatial(2**63), LayoutError, f"= {2**63} exceeds {MAX_LAYOUT_SIZE}"
    ),
    case("local-2**20000", lambda: local(2**20000), LayoutError, "<an integer of 20001 bits>"),
    case("local-minus-2**20000", lambda: local(-(2**20000)), LayoutError, "got -<an integer"),
    case(
        "product-past-2**62",
        lambda: spatial(2**40) * spatial(2**40),
        LayoutError,
        f"shape[0] = {2**80} exceeds",
    ),
    case(
        "replication-past-2**62",
        lambda: replicate(2**61) * replicate(4),
        LayoutError,
        f"num_threads = {2**63} exceeds",
    ),
    case(
        "table-of-2**40-threads",
        lambda: spatial(2**40).table(),
        LayoutError,
        f"the table of spatial({2**40}) has {2**40} entries",
    ),
    case(
        "owners-of-2**40-replicas",
        lambda: replicate(2**40).owners(()),
        LayoutError,
        f"owner list of an element of replicate({2**40}) has {2**40} entries",
    ),
    case(
        "vector-width-of-2**40-pairs",
        lambda: compose(shared_row_major(2**40), spatial(2**40)).vector_width(16),
        LayoutError,
        f"has {2**40} entries",
    ),
    case(
        "shared-size-of-2**40-elements",
        lambda: shared_row_major(2**20, 2**20).size,
        LayoutError,
        f"the table of shared_row_major({2**20}, {2**20}) has {2**40} entries",
    ),
    # Malformed direct construction.
    case(
        "mode-twice",
        lambda: register_layout((4,), (2, 2), (0,), (0,)),
        LayoutError,
        "mode 0 appears twice",
    ),
    case(
        "modes-do-not-multiply",
        lambda: register_layout((4,), (3,), (0,), ()),
        LayoutError,
        "mode_shape (3,) multiplies to 3, but shape (4,) has 4 elements",
    ),
    case(
        "mode-out-of-range",
        lambda: register_layout((4,), (4,), (5,), ()),
        LayoutError,
        "spatial_modes (5,) refers to mode 5",
    ),
    case(
        "replication-minus-one",
        lambda: register_layout((4,), (4,), (0, -1), ()),
        LayoutError,
        "holds replication -1",
    ),
    case("shape-string", lambda: register_layout("4", (4,), (0,), ()), LayoutError, "got '4'"),
    case("shape-nested", lambda: register_layout(((4,),), (4,), (0,), ()), LayoutError, "(4,)"),
    # Operators with operands that are no layouts, and impossible divides.
    case("layout-times-string", lambda: spatial(2) * "x", LayoutError, "with 'x' (str) by *"),
    case("list-times-layout", lambda: [1] * spatial(2), LayoutError, "with [1] (list) by *"),
    case("layout-times-none", lambda: spatial(2) * None, LayoutError, "with None (NoneType)"),
    case("number-over-layout", lambda: 2 / spatial(4), LayoutError, "with 2 (int) by /"),
    case("layout-over-zero", lambda: spatial(4) / 0, LayoutError, "with 0 (int) by /"),
    case(
        "shared-times-int",
        lambda: shared_row_major(4) * 2,
        LayoutError,
        "product's right operand must be a SharedLayout, got 2",
    ),
    case(
        "int-times-shared",
        lambda: 2 * shared_row_major(4),
        LayoutError,
        "product's left operand must be a SharedLayout, got 2",
    ),
    case(
        "divide-mismatched-extent",
        lambda: spatial(4) / spatial(3),
        LayoutError,
        "extent 4 of dimension 0 of spatial(4) is not divisible by 3",
    ),
    case(
        "divide-higher-rank",
        lambda: divide(spatial(4), spatial(2, 2, 2)),
        LayoutError,
        "divisor spatial(2,2,2) has rank 3 > dividend rank 1",
    ),
    case(
        "left-divide-no-prefix",
        lambda: left_divide(local(4), spatial(4)),
        LayoutError,
        "the spatial modes of spatial(4) are not the first spatial modes of local(4)",
    ),
    # Queries and transforms out of range.
    case("map-thread-past", lambda: spatial(4).map(4, 0), LayoutError, "thread 4 is out of range"),
    case("map-float", lambda: spatial(4).map(1.5, 0), LayoutError, "got dtypes float64 and int64"),
    case("owners-rank", lambda: spatial(4).owners((1, 2)), LayoutError, "has rank 2, expected 1"),
    case("reduce-dim", lambda: reduce(spatial(4), [3]), LayoutError, "dimension 3 is out of range"),
    case("reduce-dims-text", lambda: reduce(spatial(4), "0"), LayoutError, "got '0'"),
    case("permute-twice", lambda: permute(spatial(2, 3), [0, 0]), LayoutError, "appears twice"),
    case("reshape-size", lambda: reshape(spatial(2, 3), (4,)), LayoutError, "holds 4 elements"),
    case("reshape-float", lambda: reshape(spatial(2, 3), (6.0,)), LayoutError, "= 6.0 must be"),
    case("flatten-dim", lambda: flatten(spatial(2, 3), 3, 1), LayoutError, "dimension 3 is out"),
    case("squeeze-extent", lambda: squeeze(spatial(2, 3), 0), LayoutError, "has extent 2"),
    case("unsqueeze-dim", lambda: unsqueeze(spatial(2, 3), 7), LayoutError, "dimension 7 is out"),
    case(
        "concat-shapes",
        lambda: concat(spatial(2, 3), spatial(2, 4), 0),
        LayoutError,
        "shapes (2, 3) and (2, 4) differ in dimension 1",
    ),
    case("auto-threads", lambda: auto_local_spatial(0, [4]), LayoutError, "got 0"),
    case("auto-shape", lambda: auto_local_spatial(128, "44"), LayoutError, "got '44'"),
    case(
        "table-floats", lambda: layout_from_table(np.zeros((1, 1, 1)), (1,)), LayoutError, "float64"
    ),
    case(
        "function-layout-rank",
        lambda: FunctionLayout((4,), 4, 1, lambda t, i: (t, i)).table(),
        LayoutError,
        "returned 2 coordinates, expected 1",
    ),
    case(
        "function-layout-floats",
        lambda: FunctionLayout((4,), 4, 1, lambda t, i: (t * 0.5,)).map(1, 0),
        LayoutError,
        "gave coordinate 0 = 0.5, expected an int",
    ),
    case(
        "function-layout-2**40-table",
        lambda: FunctionLayout((2**40,), 2**40, 1, lambda t, i: (t,)).table(),
        LayoutError,
        f"has {2**40} entries",
    ),
    case(
        "fragment-unknown", lambda: fragment("mma.m99"), LayoutError, "unknown fragment 'mma.m99'"
    ),
    # Memory layouts.
    case("swizzle-negative", lambda: Swizzle(-1, 0, 0), LayoutError, "bits must be >= 0, got -1"),
    case("swizzle-overlap", lambda: Swizzle(3, 0, 1), LayoutError, "swizzle shift 1 is smaller"),
    case("swizzle-float", lambda: Swizzle(3.0, 3, 3), LayoutError, "must be an integer, got 3.0"),
    case(
        "shared-zero", lambda: shared_row_major(0, 4), LayoutError, "shape[0] must be >= 1, got 0"
    ),
    case("shared-strides-rank", lambda: shared_strides((4, 4), (1,)), LayoutError, "rank 1"),
    case("shared-stride-negative", lambda: shared_strides((4,), (-1,)), LayoutError, "got -1"),
    case(
        "swizzle-element-bits",
        lambda: shared_row_major_swizzle(8, 64, element_bits=3),
        LayoutError,
        "element_bits 3 is not a power of two",
    ),
    case("row-swizzle-zero", lambda: row_swizzle(0, 16), LayoutError, "row length must be >= 1"),
    case("global-strides", lambda: GlobalLayout((4,), (1, 1)), LayoutError, "strides (1, 1) has 2"),
    case("global-float", lambda: GlobalLayout((4.0,), (1,)), LayoutError, "got 4.0"),
    case("global-zero", lambda: global_row_major(0), LayoutError, "shape[0] must be >= 1, got 0"),
    case(
        "compose-shapes",
        lambda: compose(shared_row_major(4, 4), spatial(4, 2)),
        LayoutError,
        "memory layout shape (4, 4) differs from register layout shape (4, 2)",
    ),
    case(
        "compose-swapped",
        lambda: compose(spatial(4), shared_row_major(4)),
        LayoutError,
        "must be a SharedLayout or GlobalLayout, got spatial(4)",
    ),
    case(
        "vector-width-bits",
        lambda: compose(shared_row_major(4), spatial(4)).vector_width(0),
        LayoutError,
        "element_bits must be a positive integer, got 0",
    ),
    case(
        "wavefronts-warp",
        lambda: compose(shared_row_major(4), spatial(4)).wavefronts(5, 16),
        LayoutError,
        "warp 5 is out of range [0, 1)",
    ),
    case(
        "variable-name-injection", lambda: var('x); system("rm"'), LayoutError, "not a C identifier"
    ),
    case("variable-empty-bounds", lambda: var("x", 5, 1), LayoutError, "lo=5 > hi=1"),
]

TEXT_CASES = [
    # Layout expressions: the restricted grammar, never eval.
    case("expr-empty", lambda: parse_layout(""), ExpressionError, "invalid syntax in ''"),
    case(
        "expr-import",
        lambda: parse_layout("__import__('os').system('true')"),
        ExpressionError,
        "\"__import__('os').system\" at column 1: unknown method",
    ),
    case("expr-open", lambda: parse_layout("open('x')"), ExpressionError, "'open' at column 1"),
    case("expr-lambda", lambda: parse_layout("(lambda: 1)()"), ExpressionError, "'lambda: 1'"),
    case("expr-dunder", lambda: parse_layout("spatial(2).__class__"), ExpressionError, "__class__"),
    case("expr-float", lambda: parse_layout("spatial(2.5)"), ExpressionError, "'2.5' at column 9"),
    case("expr-power", lambda: parse_layout("spatial(2**64)"), ExpressionError, "'2**64'"),
    case("expr-string", lambda: parse_layout("spatial('2')"), ExpressionError, "\"'2'\" at column"),
    case("expr-star-args", lambda: parse_layout("spatial(*[2])"), ExpressionError, "'*[2]'"),
    case("expr-keyword", lambda: parse_layout("spatial(2, foo=3)"), ExpressionError, "'foo'"),
    case("expr-subscript", lambda: parse_layout("spatial(2)[0]"), ExpressionError, "[0]'"),
    case("expr-times-number", lambda: parse_layout("spatial(2) * 3"), ExpressionError, "* 3'"),
    case("expr-nul", lambda: parse_layout("spatial(2)\x00"), ExpressionError, "null bytes"),
    case(
        "expr-5000-digits",
        lambda: parse_layout("local(" + "9" * 5000 + ")"),
        ExpressionError,
        "4300",
    ),
    case(
        "expr-deep-nesting",
        lambda: parse_layout("(" * 4990 + "spatial(2)" + ")" * 4990),
        ExpressionError,
        "too many nested parentheses",
    ),
    case("expr-too-long", lambda: parse_layout(" " * 20000), ExpressionError, "20000 characters"),
    case("expr-none", lambda: parse_layout(None), ExpressionError, "must be a string, got None"),
    case("expr-zero-extent", lambda: parse_layout("local(0)"), LayoutError, "got 0"),
    case(
        "expr-past-2**62",
        lambda: parse_layout(f"spatial({2**62}) * spatial(4)"),
        LayoutError,
        f"= {2**64} exceeds",
    ),
    # CuTe text.
    case(
        "cute-no-colon", lambda: from_cute("hello", (4,)), LayoutError, "'hello': expected exactly"
    ),
    case(
        "cute-injection",
        lambda: from_cute("(4,1):(1,0); __import__('os')", (4,)),
        LayoutError,
        "unexpected text",
    ),
    case("cute-nesting", lambda: from_cute("((4,2),1):(1,0)", (8,)), LayoutError, "nesting"),
    case("cute-negative", lambda: from_cute("(-4,1):(1,0)", (4,)), LayoutError, "sizes [-4]"),
    case("cute-three-modes", lambda: from_cute("(4,1,1):(1,0,0)", (4,)), LayoutError, "two top"),
    case("cute-bytes", lambda: from_cute(b"(4,1):(1,0)", (4,)), LayoutError, "got b'(4,1):(1,0)'"),
    case(
        "cute-2**80-threads",
        lambda: from_cute(f"({2**80},1):(1,0)", (4,)),
        LayoutError,
        f"has {2**80} entries",
    ),
    case(
        "cute-2**80-stride",
        lambda: from_cute(f"(4,1):({2**80},0)", (4,)),
        LayoutError,
        f"its strides reach index {3 * 2**80}, outside the 4 elements",
    ),
    case(
        "cute-2**30-tile",
        lambda: from_cute("(4,1):(1,0)", (2**30,)),
        LayoutError,
        f"the tile ({2**30},) of CuTe layout '(4,1):(1,0)' has {2**30} entries",
    ),
    case(
        "cute-2**27-pairs",
        lambda: from_cute(f"({2**14},{2**13}):(1,0)", (4,)),
        LayoutError,
        f"has {2**27} entries",
    ),
    case("cute-deep", lambda: from_cute("(" * 40 + "8" + ")" * 40 + ":1", (8,)), LayoutError, "32"),
    case(
        "cute-to-none",
        lambda: to_cute(None),
        LayoutError,
        "expects a RegisterLayout, SharedLayout or GlobalLayout, got None",
    ),
    # Linear layouts.
    case("linear-none", lambda: from_linear_layout(None, (4,)), LayoutError, "got None"),
    case(
        "linear-unknown-input",
        lambda: from_linear_layout({"register": [], "thread": []}, (1,)),
        LayoutError,
        "inputs ['thread'] are not among",
    ),
    case(
        "linear-not-a-bit",
        lambda: from_linear_layout({"register": [(3,)], "lane": [], "warp": []}, (4,)),
        LayoutError,
        "basis 0 = (3,) is not a single bit",
    ),
    case(
        "linear-shape-float",
        lambda: from_linear_layout({"register": [(1,)]}, (2.0,)),
        LayoutError,
        "shape[0] must be an integer, got 2.0",
    ),
    case(
        "linear-100000-replicas",
        lambda: from_linear_layout({"lane": [(0,)] * 100_000}, (1,)),
        LayoutError,
        "num_threads = <an integer of 100001 bits> exceeds",
    ),
    case(
        "linear-non-power-of-two",
        lambda: to_linear_layout(spatial(3)),
        LayoutError,
        "needs power-of-two sizes, but spatial(3)",
    ),
]

IR_CASES = [
    # The builder: names, dtypes, shapes, layouts, constants, operand types.
    case(
        "program-name", lambda: ProgramBuilder("x; system()", 32), VerificationError, "x; system()"
    ),
    case("threads-zero", lambda: ProgramBuilder("p", 0), VerificationError, "[1, 1024], got 0"),
    case("threads-float", lambda: ProgramBuilder("p", 32.0), VerificationError, "got 32.0"),
    case(
        "param-dtype-text",
        program(lambda b: b.array_param("x", "f16")),
        VerificationError,
        "'f16' is not a DataType",
    ),
    case(
        "param-unicode",
        program(lambda b: b.array_param("é", dtypes.u8)),
        VerificationError,
        "'é' is not a C identifier",
    ),
    case(
        "param-grid",
        program(lambda b: b.int_param("grid")),
        VerificationError,
        "'grid' is reserved",
    ),
    case(
        "param-max-blocks",
        program(lambda b: b.array_param("max_blocks", dtypes.u8)),
        VerificationError,
        "'max_blocks' is reserved",
    ),
    case(
        "param-twice",
        program(lambda b: (b.int_param("n"), b.int_param("n"))),
        VerificationError,
        "'n' is already used",
    ),
    case(
        "bound-float",
        program(lambda b: b.int_param("n", 0.5)),
        VerificationError,
        "bound lo=0.5 of variable 'n'",
    ),
    case(
        "bound-text", program(lambda b: b.int_param("n", 0, "9")), VerificationError, "bound hi='9'"
    ),
    case(
        "bounds-empty",
        program(lambda b: b.int_param("n", 5, 1)),
        VerificationError,
        "int parameter 'n': variable 'n' has empty bounds",
    ),
    case(
        "multiple-zero",
        program(lambda b: b.int_param("n", multiple_of=0)),
        VerificationError,
        "multiple_of=0",
    ),
    case(
        "constant-text",
        program(lambda b: b.int_param("n", constant="yes")),
        VerificationError,
        "constant='yes'",
    ),
    case(
        "tensor-dtype-text",
        program(lambda b: b.register_tensor("f16", spatial(32))),
        VerificationError,
        "got 'f16'",
    ),
    case(
        "tensor-shared-layout",
        program(lambda b: b.register_tensor(dtypes.f16, shared_row_major(32))),
        VerificationError,
        "got shared_row_major(32)",
    ),
    case(
        "tensor-threads",
        program(lambda b: halves(b, spatial(64))),
        VerificationError,
        "layout of 64 threads, the program has 32",
    ),
    case(
        "init-u4-16",
        program(lambda b: b.register_tensor(dtypes.u4, spatial(32), 16)),
        VerificationError,
        "init 16 is outside the range of u4",
    ),
    case(
        "init-f16-1e6",
        program(lambda b: b.register_tensor(dtypes.f16, spatial(32), 1e6)),
        VerificationError,
        "1000000.0 is beyond the largest finite value of f16",
    ),
    case(
        "init-nan-f4e2m1",
        program(lambda b: b.register_tensor(dtypes.f4e2m1, spatial(32), float("nan"))),
        VerificationError,
        "f4e2m1 has no NaN",
    ),
    case(
        "init-text",
        program(lambda b: b.register_tensor(dtypes.f16, spatial(32), "0")),
        VerificationError,
        "got '0'",
    ),
    case(
        "init-i8-fraction",
        program(lambda b: b.register_tensor(dtypes.i8, spatial(32), 1.5)),
        VerificationError,
        "init 1.5 is not an integer",
    ),
    case(
        "view-register-layout",
        program(lambda b: b.global_view(b.array_param("x", dtypes.u8), dtypes.u8, spatial(4))),
        VerificationError,
        "result must be a GlobalTensor with a GlobalLayout",
    ),
    case(
        "offsets-text",
        program(lambda b: b.load_global(view(b), "0", spatial(32).local(2))),
        VerificationError,
        "got '0'",
    ),
    case(
        "offsets-float",
        program(lambda b: b.load_global(view(b), [0.5], spatial(32).local(2))),
        VerificationError,
        "got 0.5 of type float",
    ),
    case(
        "offsets-rank",
        program(lambda b: b.load_global(view(b), [0, 0], spatial(32).local(2))),
        VerificationError,
        "offsets has 2 entries, the memory tensor has rank 1",
    ),
    case(
        "fill-u4-99",
        program(lambda b: b.load_global(view(b, dtypes.u4), [0], spatial(32).local(2), fill=99)),
        VerificationError,
        "fill 99 is outside the range of u4",
    ),
    case(
        "load-from-register",
        program(lambda b: b.load_global(halves(b), [0], spatial(32))),
        VerificationError,
        "load_global reads a GlobalTensor, got RegisterTensor",
    ),
    case(
        "store-an-int",
        program(lambda b: b.store_global(view(b), 3, [0])),
        VerificationError,
        "source must be a RegisterTensor, got 3",
    ),
    case(
        "add-text",
        program(lambda b: b.add(halves(b), "1")),
        VerificationError,
        "operand 1 of add must be a RegisterTensor, got '1'",
    ),
    case("add-bool", program(lambda b: b.add(halves(b), True)), VerificationError, "got True"),
    case(
        "add-u4-16",
        program(lambda b: b.add(b.register_tensor(dtypes.u4, spatial(32)), 16)),
        VerificationError,
        "the constant 16 (operand 1 of add) is outside the range of u4",
    ),
    case(
        "add-dtypes",
        program(lambda b: b.add(halves(b), b.register_tensor(dtypes.f32, spatial(32)))),
        VerificationError,
        "lhs is f16, rhs is f32",
    ),
    case(
        "add-two-numbers",
        program(lambda b: b.add(1, 2)),
        VerificationError,
        "add needs at least one RegisterTensor",
    ),
    case(
        "binary-pow",
        program(lambda b: b.binary("pow", halves(b), halves(b))),
        VerificationError,
        "unknown binary op 'pow'",
    ),
    case(
        "unary-sin",
        program(lambda b: b.unary("sin", halves(b))),
        VerificationError,
        "unknown unary op 'sin'",
    ),
    case(
        "exp-of-int",
        program(lambda b: b.exp(b.register_tensor(dtypes.i8, spatial(32)))),
        VerificationError,
        "exp does not apply to i8",
    ),
    case(
        "view-bits",
        program(lambda b: b.view(halves(b), dtypes.f32, spatial(32))),
        VerificationError,
        "16 bits per thread, the result 1 x 32 = 32",
    ),
    case(
        "reduce-dim-text",
        program(lambda b: b.reduce(halves(b), "0", "sum")),
        VerificationError,
        "reduce dim '0'",
    ),
    case(
        "reduce-prod",
        program(lambda b: b.reduce(halves(b), 0, "prod")),
        VerificationError,
        "unknown reduction 'prod'",
    ),
    case(
        "where-f16-condition",
        program(lambda b: b.where(halves(b), halves(b), halves(b))),
        VerificationError,
        "cond is f16, expected u1",
    ),
    case(
        "dot-numbers",
        program(lambda b: b.dot(1, 2, 3)),
        VerificationError,
        "dot's a must be a RegisterTensor, got 1",
    ),
    case(
        "if-python-bool",
        program(lambda b: b.if_(True).__enter__()),
        VerificationError,
        "the Python bool True",
    ),
    case(
        "if-numpy-bool",
        program(lambda b: b.if_(np.True_).__enter__()),
        VerificationError,
        "the NumPy bool",
    ),
    case(
        "if-float",
        program(lambda b: b.if_(1.5).__enter__()),
        VerificationError,
        "got 1.5 of type float",
    ),
    case(
        "for-step-zero",
        program(lambda b: b.for_range(0, 4, 0).__enter__()),
        VerificationError,
        "step must be a positive int, got 0",
    ),
    case(
        "for-iterated",
        program(lambda b: list(b.for_range(4))),
        VerificationError,
        "for_range(4) is a context manager",
    ),
    case(
        "wait-negative",
        program(lambda b: b.copy_async_wait(-1)),
        VerificationError,
        "pending must be an int >= 0, got -1",
    ),
    case("grid-float", program(lambda b: b.grid(2.5)), VerificationError, "grid extent x = 2.5"),
    case("grid-2**31", program(lambda b: b.grid(2**31)), VerificationError, "x = 2147483648"),
    case(
        "grid-block-index",
        program(lambda b: b.grid(b.block_x)),
        VerificationError,
        "reads ['block_x']",
    ),
    case(
        "atomic-add-f16",
        program(lambda b: b.atomic_add(view(b), [0])),
        VerificationError,
        "g0 of dtype f16; expected an i32 tensor",
    ),
    # Data types.
    case("dtype-f9e4m4", lambda: dtypes.from_name("f9e4m4"), DtypeError, "'f9e4m4'"),
    case(
        "dtype-injection", lambda: dtypes.from_name("f16; rm -rf /"), DtypeError, "'f16; rm -rf /'"
    ),
    case("dtype-ambiguous", lambda: dtypes.from_name("float8_e4m3"), DtypeError, "is ambiguous"),
    case(
        "decode-u4-16",
        lambda: dtypes.u4.decode(np.array([16])),
        DtypeError,
        "code 16 is not a bit pattern of u4",
    ),
    case("encode-objects", lambda: dtypes.f16.encode(np.array([None])), DtypeError, "dtype object"),
    case(
        "unpack-negative-count",
        lambda: dtypes.unpack(np.zeros(1, np.uint8), dtypes.u4, -1),
        DtypeError,
        "got -1",
    ),
]

INTERPRETER_CASES = [
    case(
        "no-arguments",
        lambda: run_reference(vector_add()),
        InterpreterError,
        "missing arguments n, x, y, z",
    ),
    case(
        "five-arguments",
        lambda: run_reference(vector_add(), 8, *[np.zeros(8, np.float16)] * 3, 5),
        InterpreterError,
        "got 5 positional arguments",
    ),
    case("unknown-keyword", vector_args(w=1), InterpreterError, "has no parameter 'w'"),
    case(
        "keyword-twice",
        lambda: run_reference(vector_add(), 8, *[np.zeros(8, np.float16)] * 3, n=8),
        InterpreterError,
        "argument 'n' given both by position and by name",
    ),
    case("n-float", vector_args(8.0), InterpreterError, "'n' must be an int, got float"),
    case("n-text", vector_args("8"), InterpreterError, "'n' must be an int, got str"),
    case("n-bool", vector_args(True), InterpreterError, "'n' must be an int, got bool"),
    case("n-2**80", vector_args(2**80), InterpreterError, f"n={2**80} is outside its bounds"),
    case(
        "n-uint64",
        vector_args(np.uint64(2**63)),
        InterpreterError,
        f"n={2**63} is outside its bounds",
    ),
    case(
        "array-list",
        vector_args(8, [0.0] * 8),
        InterpreterError,
        "'x' must be a NumPy array, got list",
    ),
    case(
        "array-none",
        vector_args(8, None),
        InterpreterError,
        "'x' must be a NumPy array, got NoneType",
    ),
    case(
        "array-objects",
        vector_args(8, np.array([None] * 8)),
        InterpreterError,
        "array of object elements",
    ),
    case(
        "array-strings",
        vector_args(8, np.array(["a"] * 8)),
        InterpreterError,
        "array of <U1 elements",
    ),
    case(
        "array-float32-for-f16",
        vector_args(8, np.zeros(8, np.float32)),
        InterpreterError,
        "'x' has storage dtype float32; expected one of float16, uint16, int16, uint8, int8",
    ),
    case(
        "array-float64-for-f16",
        vector_args(8, np.zeros(8)),
        InterpreterError,
        "storage dtype float64",
    ),
    case(
        "array-int32-for-f16",
        vector_args(8, np.zeros(8, np.int32)),
        InterpreterError,
        "storage dtype int32",
    ),
    case(
        "array-bool", vector_args(8, np.zeros(16, np.bool_)), InterpreterError, "storage dtype bool"
    ),
    case(
        "array-big-endian",
        vector_args(8, np.zeros(8, ">f2")),
        InterpreterError,
        "storage dtype big-endian >f2",
    ),
    case(
        "array-complex",
        vector_args(8, np.zeros(8, np.complex64)),
        InterpreterError,
        "storage dtype complex64",
    ),
    case(
        "array-masked",
        vector_args(8, np.ma.masked_array(np.zeros(8, np.float16))),
        InterpreterError,
        "'x' is a masked array",
    ),
    case(
        "array-strided",
        vector_args(8, np.zeros(16, np.float16)[::2]),
        InterpreterError,
        "'x' must be a C-contiguous, writeable array",
    ),
    case(
        "array-too-small",
        vector_args(1024),
        InterpreterError,
        "element 1023 of g0 (f16) lies past the end of argument x (16 bytes)",
    ),
    case(
        "grid-text",
        vector_args(grid="1"),
        InterpreterError,
        "grid '1': dimension 0 is not an integer",
    ),
    case(
        "grid-float",
        vector_args(grid=1.0),
        InterpreterError,
        "grid 1.0: dimension 0 is not an integer",
    ),
    case("grid-empty", vector_args(grid=[]), InterpreterError, "grid [] has 0 dimensions"),
    case("grid-negative", vector_args(grid=(1, -1)), InterpreterError, "dimension 1 is -1"),
    case(
        "grid-dict",
        vector_args(grid={1: 1}),
        InterpreterError,
        "grid {1: 1}: dimension 0 is not an integer",
    ),
    case("grid-10**100", vector_args(grid=10**100), InterpreterError, f"dimension 0 is {10**100}"),
    case(
        "grid-10**7",
        vector_args(grid=10**7),
        InterpreterError,
        "grid (10000000, 1, 1) has 10000000 blocks, more than the interpreter's limit of 65536",
    ),
    case(
        "grid-past-max-blocks",
        vector_args(grid=(4, 4), max_blocks=15),
        InterpreterError,
        "has 16 blocks, more than the interpreter's limit of 15",
    ),
    case(
        "max-blocks-zero",
        vector_args(max_blocks=0),
        InterpreterError,
        "max_blocks=0; expected a positive int",
    ),
    case(
        "max-blocks-float", vector_args(max_blocks=1e9), InterpreterError, "max_blocks=1000000000.0"
    ),
    case(
        "not-a-program",
        lambda: run_reference("vector_add", 8),
        VerificationError,
        "verify expects a Program, got 'vector_add'",
    ),
    case(
        "view-divides-by-zero",
        lambda: run_reference(divided_view_program(), 8, 0, np.zeros(32, np.uint8)),
        InterpreterError,
        "divides by zero with m=0, n=8",
    ),
    case(
        "view-negative-stride",
        lambda: run_reference(negative_stride_program(), 2, np.zeros(32, np.uint8)),
        InterpreterError,
        "has strides (-2,) with n=2; expected strides >= 0",
    ),
]

BACKEND_CASES = [
    # Compilation and launch checks that need no GPU.
    case(
        "arch-sm_1000",
        compile_with(vector_add, "sm_1000"),
        ArchitectureError,
        "'sm_1000' is not a real GPU architecture",
    ),
    case(
        "arch-injection",
        compile_with(vector_add, "sm_80; rm -rf"),
        ArchitectureError,
        "'sm_80; rm -rf'",
    ),
    case(
        "arch-int",
        compile_with(vector_add, 80),
        ArchitectureError,
        "architecture 80 is not a string",
    ),
    case("arch-compute", compile_with(vector_add, "compute_80"), ArchitectureError, "'compute_80'"),
    case(
        "constant-unknown",
        compile_with(vector_add, "sm_80", constants={"q": 1}),
        SpecializationError,
        "no parameter 'q'",
    ),
    case(
        "constant-not-constant",
        compile_with(vector_add, "sm_80", constants={"n": 4}),
        SpecializationError,
        "parameter 'n' of vector_add is not a compile-time constant",
    ),
    case(
        "constant-missing",
        compile_with(constant_program, "sm_80"),
        SpecializationError,
        "parameters k have no value",
    ),
    case(
        "constant-float",
        compile_with(constant_program, "sm_80", constants={"k": 4.0}),
        SpecializationError,
        "k of constants = 4.0 (float) is not an int",
    ),
    case(
        "constant-bool",
        compile_with(constant_program, "sm_80", constants={"k": True}),
        SpecializationError,
        "k of constants = True is a bool",
    ),
    case(
        "constant-2**100",
        compile_with(constant_program, "sm_80", constants={"k": 2**100}),
        SpecializationError,
        f"= {2**100} is outside the parameter's bounds [1, 1024]",
    ),
    case(
        "constant-multiple",
        compile_with(constant_program, "sm_80", constants={"k": 6}),
        SpecializationError,
        "= 6 is not a multiple of 4",
    ),
    case(
        "constants-pairs",
        compile_with(constant_program, "sm_80", constants=[("k", 4)]),
        SpecializationError,
        "got [('k', 4)]",
    ),
    case("launch-no-grid", launch(8, 0, 0, 0), LaunchError, "declares no grid"),
    case(
        "launch-n-float",
        launch(1.5, 0, 0, 0, grid=1),
        LaunchError,
        "argument 'n' = 1.5 (float) is not an integer",
    ),
    case(
        "launch-n-2**40",
        launch(2**40, 0, 0, 0, grid=1),
        LaunchError,
        f"'n' = {2**40} is out of range of int32_t",
    ),
    case("launch-grid-y", launch(8, 0, 0, 0, grid=(1, 2**16)), LaunchError, "dimension 1 is 65536"),
    case(
        "launch-keyword",
        launch(8, 0, 0, 0, grid=1, max_blocks=3),
        LaunchError,
        "has no parameter 'max_blocks'",
    ),
    case(
        "kernel-param-dtype-width",
        lambda: KernelArrayParam("a", 8, 4, dtype=dtypes.f16),
        LaunchError,
        "dtype f16 is not an ir.dtypes DataType of element_bits=8 bits",
    ),
    case(
        "kernel-param-dtype-text",
        lambda: KernelArrayParam("a", 16, 4, dtype="f16"),
        LaunchError,
        "dtype 'f16' is not an ir.dtypes DataType",
    ),
    # Packed weights and the quantized matmul.
    case(
        "pack-f16",
        lambda: pack_weights(np.zeros((16, 64), np.int64), dtypes.f16),
        VerificationError,
        "f16 is not a weight type",
    ),
    case(
        "pack-dtype-text",
        lambda: pack_weights(np.zeros((16, 64), np.int64), "u4"),
        VerificationError,
        "'u4' is not a weight type",
    ),
    case(
        "pack-shape",
        lambda: pack_weights(np.zeros((15, 64), np.int64), dtypes.u4),
        VerificationError,
        "shape (15, 64)",
    ),
    case(
        "pack-floats",
        lambda: pack_weights(np.zeros((16, 64)), dtypes.u4),
        VerificationError,
        "codes of dtype float64",
    ),
    case(
        "pack-u4-16",
        lambda: pack_weights(np.full((16, 64), 16), dtypes.u4),
        VerificationError,
        "codes in [16, 16] do not fit u4",
    ),
    case(
        "pack-list",
        lambda: pack_weights([[0] * 64] * 16, dtypes.u4),
        VerificationError,
        "codes of type list",
    ),
    case(
        "pack-none",
        lambda: pack_weights(None, dtypes.u4),
        VerificationError,
        "codes of type NoneType",
    ),
    case(
        "scales-shape", lambda: pack_scales(np.zeros((1, 63))), VerificationError, "shape (1, 63)"
    ),
    case("scales-none", lambda: pack_scales(None), VerificationError, "scales of type NoneType"),
    case(
        "unpack-version",
        lambda: unpack_weights(np.zeros((1, 128), np.int32), WeightFormat("u4", 16, 64, version=1)),
        VerificationError,
        "format version 1",
    ),
    case(
        "unpack-floats",
        lambda: unpack_weights(np.full((1, 128), 0.5), WeightFormat("u4", 16, 64)),
        VerificationError,
        "packed of dtype float64",
    ),
    case(
        "unpack-text",
        lambda: unpack_weights("x", WeightFormat("u4", 16, 64)),
        VerificationError,
        "packed of type str",
    ),
    case(
        "unpack-no-format",
        lambda: unpack_weights(np.zeros((1, 128), np.int32), None),
        VerificationError,
        "format None; expected a WeightFormat",
    ),
    case(
        "pack-program-warps-zero",
        lambda: pack_weights_program(dtypes.u4, 0),
        VerificationError,
        "warps=0; expected an int from 1 to 32",
    ),
    case(
        "pack-program-warps-text",
        lambda: pack_weights_program(dtypes.u4, "4"),
        VerificationError,
        "warps='4'",
    ),
    case(
        "matmul-config-dict",
        lambda: register_dequant_matmul(dtypes.u4, 128, {"warps": 4}),
        VerificationError,
        "config={'warps': 4}; expected a DequantConfig",
    ),
    case(
        "matmul-config-zero",
        lambda: register_dequant_matmul(dtypes.u4, 128, 0),
        VerificationError,
        "config=0",
    ),
    case(
        "matmul-warps-64",
        lambda: register_dequant_matmul(dtypes.u4, 128, DequantConfig(warps=64)),
        VerificationError,
        "warps=64; a block has at most 32 warps",
    ),
    case(
        "matmul-split-float",
        lambda: register_dequant_matmul(dtypes.u4, 128, DequantConfig(split=2.0)),
        VerificationError,
        "split=2.0",
    ),
    case(
        "matmul-group-48",
        lambda: register_dequant_matmul(dtypes.u4, 48),
        VerificationError,
        "group_size=48 is not a multiple of the k-tile 64",
    ),
    case(
        "matmul-activation-f32",
        lambda: register_dequant_matmul(dtypes.u4, activation_dtype=dtypes.f32),
        VerificationError,
        "activation_dtype=f32",
    ),
    case(
        "split-sum-threads-zero",
        lambda: split_k_sum(2, 0),
        VerificationError,
        "threads=0; expected an int from 1 to 1024",
    ),
    case(
        "split-sum-threads-float", lambda: split_k_sum(2, 12.5), VerificationError, "threads=12.5"
    ),
    case(
        "split-sum-one", lambda: split_k_sum(1), VerificationError, "split=1; expected an int >= 2"
    ),
    case(
        "problem-f16",
        lambda: DecodeProblem(dtypes.f16, 128, 256, 64),
        VerificationError,
        "f16 is not a weight type",
    ),
    case(
        "problem-k-250",
        lambda: DecodeProblem(dtypes.u4, 128, 250, 64),
        VerificationError,
        "k=250; expected a positive multiple of 16",
    ),
    case(
        "problem-group-float",
        lambda: DecodeProblem(dtypes.u4, 128.0, 256, 64),
        VerificationError,
        "group_size=128.0",
    ),
    case(
        "problem-k-bool",
        lambda: DecodeProblem(dtypes.u4, 128, True, 64),
        VerificationError,
        "k=True",
    ),
    case(
        "problem-k-2**70",
        lambda: DecodeProblem(dtypes.u4, 128, 2**70, 64),
        VerificationError,
        f"k={2**70}; expected a positive multiple of 16 up to 2147483647",
    ),
    case(
        "problem-zero-points-int",
        lambda: DecodeProblem(dtypes.u4, 128, 256, 64, zero_points=1),
        VerificationError,
        "zero_points=1",
    ),
]

TORCH_CASES = [
    case(
        "linear-weight-f16",
        torch_call(lambda torch, QL: QL(128, 64, dtypes.f16)),
        VerificationError,
        "f16 is not a weight type",
        needs_torch,
    ),
    case(
        "linear-in-zero",
        torch_call(lambda torch, QL: QL(0, 64, dtypes.u4)),
        VerificationError,
        "in_features=0",
        needs_torch,
    ),
    case(
        "linear-in-float",
        torch_call(lambda torch, QL: QL(128.0, 64, dtypes.u4)),
        VerificationError,
        "in_features=128.0",
        needs_torch,
    ),
    case(
        "linear-out-2**40",
        torch_call(lambda torch, QL: QL(128, 2**40, dtypes.u4)),
        VerificationError,
        f"out_features={2**40}; expected a positive int up to 2147483647",
        needs_torch,
    ),
    case(
        "linear-group-100",
        torch_call(lambda torch, QL: QL(128, 64, dtypes.u4, 100)),
        VerificationError,
        "group_size=100",
        needs_torch,
    ),
    case(
        "linear-dtype-f32",
        torch_call(lambda torch, QL: QL(128, 64, dtypes.u4, dtype=torch.float32)),
        VerificationError,
        "dtype torch.float32",
        needs_torch,
    ),
    case(
        "linear-bias-text",
        torch_call(lambda torch, QL: QL(128, 64, dtypes.u4, bias="yes")),
        VerificationError,
        "bias='yes'",
        needs_torch,
    ),
    case(
        "linear-device-nope",
        torch_call(lambda torch, QL: QL(128, 64, dtypes.u4, device="nope")),
        VerificationError,
        "device='nope'",
        needs_torch,
    ),
    case(
        "linear-from-conv",
        torch_call(lambda torch, QL: QL.from_linear(torch.nn.Conv1d(1, 1, 1), dtypes.u4)),
        VerificationError,
        "Conv1d; expected torch.nn.Linear",
        needs_torch,
    ),
    case(
        "linear-weight-nan",
        torch_call(
            lambda torch, QL: QL.from_weight(
                torch.full((64, 128), float("nan"), dtype=torch.float16), dtypes.u4
            )
        ),
        VerificationError,
        "the weight holds NaN or inf",
        needs_torch,
    ),
    case(
        "linear-codes-text",
        torch_call(lambda torch, QL: QL.from_quantized("x", torch.ones(1, 64), dtypes.u4, 128)),
        VerificationError,
        "codes of type str is not an array of numbers",
        needs_torch,
    ),
    case(
        "linear-codes-objects",
        torch_call(
            lambda torch, QL: QL.from_quantized(
                np.full((128, 64), None), torch.ones(1, 64), dtypes.u4, 128
            )
        ),
        VerificationError,
        "codes of type ndarray is not an array of numbers",
        needs_torch,
    ),
    case(
        "linear-scales-text",
        torch_call(
            lambda torch, QL: QL.from_quantized(
                torch.zeros(128, 64, dtype=torch.int32), "x", dtypes.u4, 128
            )
        ),
        VerificationError,
        "scales of type str",
        needs_torch,
    ),
    case(
        "linear-codes-u4-16",
        torch_call(
            lambda torch, QL: QL.from_quantized(
                torch.full((128, 64), 16), torch.ones(1, 64), dtypes.u4, 128
            )
        ),
        VerificationError,
        "codes in [0, 16] do not fit u4",
        needs_torch,
    ),
    case(
        "linear-state-none",
        torch_call(lambda torch, QL: QL.from_state_dict(None)),
        VerificationError,
        "from_state_dict: NoneType",
        needs_torch,
    ),
    case(
        "linear-state-empty",
        torch_call(lambda torch, QL: QL.from_state_dict({})),
        VerificationError,
        "metadata NoneType lacks",
        needs_torch,
    ),
    case(
        "linear-input-f32",
        torch_call(lambda torch, QL: QL(128, 64, dtypes.u4)(torch.zeros(1, 128))),
        LaunchError,
        "input of dtype torch.float32",
        needs_torch,
    ),
]

TUNING_CASES = [
    case("space-empty", tune([]), TuningError, "an empty search space"),
    case("space-mapping", tune({"a": 1}), TuningError, "search space {'a': 1}"),
    case("space-text", tune("abc"), TuningError, "search space 'abc'"),
    case("space-none", tune(None), TuningError, "search space None"),
    case("candidate-int", tune([1, 2]), TuningError, "candidate 1; expected a mapping"),
    case("candidate-int-key", tune([{1: 2}]), TuningError, "key 1 is not a str"),
    case("candidate-nan", tune([{"a": float("nan")}]), TuningError, "a=nan"),
    case("candidate-list", tune([{"a": [1]}]), TuningError, "a=[1]"),
    case(
        "candidate-twice",
        tune([{"a": 1}, {"a": 1}]),
        TuningError,
        'candidates {"a":1} appear twice',
    ),
    case(
        "candidate-5000-digits", tune([{"a": 10**5000}]), TuningError, "a is an int of 16610 bits"
    ),
    case("key-list", tune([{"a": 1}], key={"m": [1]}), TuningError, "tuning key {'m': [1]}"),
    case("namespace-empty", tune([{"a": 1}], namespace=""), TuningError, "tuning namespace ''"),
    case("workers-zero", tune([{"a": 1}], workers=0), TuningError, "workers=0"),
    case("workers-bool", tune([{"a": 1}], workers=True), TuningError, "workers=True"),
    # Proof limits (a timeout Z3 cannot take).
    case(
        "proof-timeout-inf",
        lambda: check_equivalent(spatial(4), local(4), timeout=float("inf")),
        ProofError,
        "got inf",
    ),
    case(
        "proof-timeout-nan",
        lambda: check_equivalent(spatial(4), local(4), timeout=float("nan")),
        ProofError,
        "got nan",
    ),
    case(
        "proof-rlimit-float",
        lambda: check_equivalent(spatial(4), local(4), rlimit=1.5),
        ProofError,
        "got 1.5",
    ),
    case(
        "proof-not-a-layout",
        lambda: check_equivalent(spatial(4), "x"),
        ProofError,
        "'x' is not a layout",
    ),
]

CASES = LAYOUT_CASES + TEXT_CASES + IR_CASES + INTERPRETER_CASES + BACKEND_CASES + TORCH_CASES
CASES += TUNING_CASES


@pytest.mark.parametrize(("make", "error", "fragment"), CASES)
def test_hostile_input_raises_the_project_error(
    make: Callable[[], Any], error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error, match=re.escape(fragment)) as raised:
        make()
    assert type(raised.value) is error, f"{type(raised.value).__name__}: {raised.value}"
    assert isinstance(raised.value, ValueError)


def cli_case(fragment: str, *argv: str) -> Any:
    return pytest.param(list(argv), fragment, id=" ".join(argv)[:40] or "no-arguments")


CLI_CASES = [
    cli_case("invalid choice: 'bogus'", "bogus"),
    cli_case("the following arguments are required: COMMAND"),
    cli_case("the following arguments are required: expr", "show"),
    cli_case("'2.5' at column 9", "show", "spatial(2.5)"),
    cli_case("\"__import__('os').system\" at column 1", "show", "__import__('os').system('true')"),
    cli_case("unrecognized arguments: ; rm -rf /", "show", "spatial(2)", "; rm -rf /"),
    cli_case("layout expression of 20000 characters is longer than 10000", "show", "x" * 20000),
    cli_case("the following arguments are required: B", "equiv", "spatial(2)"),
    cli_case("got '1e308'", "equiv", "spatial(2)", "spatial(2)", "--timeout", "1e308"),
    cli_case("got 'nan'", "equiv", "spatial(2)", "spatial(2)", "--timeout", "nan"),
    cli_case("got '-1'", "equiv", "spatial(2)", "spatial(2)", "--timeout", "-1"),
    cli_case("'(' was never closed", "equiv", "spatial(2)", "bad("),
    cli_case("'f16' has 16 bits: not a weight type", "demo", "--weights", "f16"),
    cli_case('unknown data type name "\'; rm -rf /"', "demo", "--weights", "'; rm -rf /"),
    cli_case("'float8_e4m3' is ambiguous", "demo", "--weights", "float8_e4m3"),
    cli_case("--seed: expected a non-negative integer, got '-1'", "demo", "--seed", "-1"),
    cli_case("--seed: expected a non-negative integer, got '1.5'", "demo", "--seed", "1.5"),
    cli_case("got 'inf'", "demo", "--timeout", "inf"),
]


@pytest.mark.parametrize(("argv", "fragment"), CLI_CASES)
def test_cli_usage_error_exits_2(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert fragment in error
    assert "Traceback" not in error

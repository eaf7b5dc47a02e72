"""Layout expressions as text: a restricted grammar, parsed without `eval`.

The command line and notebooks take layouts as text such as ``local(2,1).spatial(8,4).local(1,2)``
or ``reduce(spatial(3,4), [0])``. The text is parsed by Python's `ast` module and the tree is
walked against a whitelist, so that no other code can run::

    expr     := NAME "(" args ")"              NAME one of FUNCTIONS
              | expr "." METHOD "(" args ")"   METHOD one of METHODS
              | expr "*" expr                  product
              | expr "/" expr                  divide
              | "(" expr ")"
    args     := [arg ("," arg)*] ["," NAME "=" arg ...]
    arg      := expr | int | "-" int | True | False | "[" ints "]" | "(" ints ")"

Anything else (names, attributes, strings, floats, other operators, ``*args``, unknown keywords)
raises `ExpressionError`, whose message gives the offending text, its column and what was
expected. A well-formed expression whose operation is invalid (``spatial(0)``, an impossible
divide) raises the operation's own `LayoutError`.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from typing import Any

from layout_algebra.auto import auto_local_spatial
from layout_algebra.divide import divide, left_divide
from layout_algebra.errors import LayoutError
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
from layout_algebra.transform import concat, flatten, permute, reshape, squeeze, unsqueeze

FUNCTIONS: dict[str, Callable[..., RegisterLayout]] = {
    function.__name__: function
    for function in (
        local,
        spatial,
        column_local,
        column_spatial,
        replicate,
        register_layout,
        product,
        divide,
        left_divide,
        reduce,
        permute,
        reshape,
        flatten,
        squeeze,
        unsqueeze,
        concat,
        auto_local_spatial,
    )
}

METHODS: frozenset[str] = frozenset(
    {
        "local",
        "spatial",
        "column_local",
        "column_spatial",
        "replicate",
        "reduce",
        "permute",
        "reshape",
        "flatten",
        "squeeze",
        "unsqueeze",
        "concat",
    }
)

MAX_LENGTH = 10_000

_OPERATORS: dict[type[ast.operator], Callable[[RegisterLayout, RegisterLayout], RegisterLayout]] = {
    ast.Mult: product,
    ast.Div: divide,
}


class ExpressionError(LayoutError):
    """A text that is not a layout expression of the restricted grammar."""


def _excerpt(text: str, limit: int = 60) -> str:
    """`text` quoted, cut to `limit` characters with an ellipsis."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def parse_layout(text: str) -> RegisterLayout:
    """The register layout that the expression `text` denotes.

    Raises ExpressionError when `text` is not in the grammar of this module (or longer than
    MAX_LENGTH characters), and the operation's LayoutError when a call in it is invalid.
    Example: ``parse_layout("spatial(2,4) * local(2,1)") == spatial(2, 4).local(2, 1)``.
    """
    if not isinstance(text, str):
        raise ExpressionError(f"a layout expression must be a string, got {text!r}")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(
            f"layout expression of {len(text)} characters is longer than {MAX_LENGTH}"
        )
    source = text.strip()
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as error:
        where = f" at column {error.offset}" if error.offset else ""
        raise ExpressionError(f"invalid syntax in {_excerpt(source)}{where}: {error.msg}") from None
    except ValueError as error:
        raise ExpressionError(f"invalid text {_excerpt(source)}: {error}") from None
    except (RecursionError, MemoryError):
        raise ExpressionError(
            f"layout expression {_excerpt(source)} is nested too deeply"
        ) from None
    try:
        value = _Evaluator(source).value(tree.body)
    except RecursionError:
        raise ExpressionError(
            f"layout expression {_excerpt(source)} is nested too deeply"
        ) from None
    if not isinstance(value, RegisterLayout):
        raise ExpressionError(f"{_excerpt(source)} denotes {value!r}, expected a layout")
    return value


class _Evaluator:
    """Walks an expression tree, accepting only the nodes of the grammar."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, node: ast.AST, what: str) -> ExpressionError:
        snippet = ast.get_source_segment(self.source, node) or type(node).__name__
        column = getattr(node, "col_offset", 0) + 1
        return ExpressionError(f"{_excerpt(snippet)} at column {column}: {what}")

    def value(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.BinOp):
            operator = _OPERATORS.get(type(node.op))
            if operator is None:
                raise self.error(node, "only '*' (product) and '/' (divide) combine layouts")
            left, right = self.value(node.left), self.value(node.right)
            for operand in (left, right):
                if not isinstance(operand, RegisterLayout):
                    raise self.error(node, "'*' and '/' need a layout on both sides")
            return operator(left, right)
        if isinstance(node, ast.Constant) and type(node.value) in (int, bool):
            return node.value
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and type(node.operand.value) is int
        ):
            return -node.operand.value
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self.value(item) for item in node.elts]
            for item, element in zip(items, node.elts):
                if type(item) is not int:
                    raise self.error(element, "lists and tuples may only hold integers")
            return tuple(items)
        raise self.error(
            node,
            "expected a layout function call, a method call, '*', '/', an integer, True, False "
            "or a list of integers",
        )

    def call(self, node: ast.Call) -> Any:
        if isinstance(node.func, ast.Name):
            name = node.func.id
            if name not in FUNCTIONS:
                raise self.error(
                    node.func, f"unknown function; expected one of {', '.join(sorted(FUNCTIONS))}"
                )
            function: Callable[..., Any] = FUNCTIONS[name]
        elif isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name not in METHODS:
                raise self.error(
                    node.func, f"unknown method; expected one of {', '.join(sorted(METHODS))}"
                )
            receiver = self.value(node.func.value)
            if not isinstance(receiver, RegisterLayout):
                raise self.error(node.func, f"method {name!r} needs a layout before the dot")
            function = getattr(receiver, name)
        else:
            raise self.error(node.func, "only named functions and layout methods can be called")
        arguments = []
        for argument in node.args:
            if isinstance(argument, ast.Starred):
                raise self.error(argument, "'*' unpacking is not allowed in arguments")
            arguments.append(self.value(argument))
        keywords = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                raise self.error(keyword.value, "'**' unpacking is not allowed in arguments")
            keywords[keyword.arg] = self.value(keyword.value)
        try:
            inspect.signature(function).bind(*arguments, **keywords)
        except TypeError as error:
            raise self.error(node, f"bad arguments for {name}: {error}") from None
        return function(*arguments, **keywords)

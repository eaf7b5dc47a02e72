"""The `layout-algebra` command line (also `python -m layout_algebra`).

Subcommands:

- ``show EXPR [--html FILE] [--png FILE]``: print the layout's repr, its numbers (shape,
  num_threads, local_size, replication) and its ``t:i`` grid; optionally draw it as HTML or PNG;
- ``equiv EXPR EXPR [--timeout S]``: prove the two layouts equal with the solver, or print a
  counterexample.

EXPR is a layout expression in the restricted grammar of `layout_algebra.expression_parser`
(never evaluated by Python). Exit codes: 0 success (for ``equiv``: proved equivalent), 1 refuted,
3 unknown (the solver gave up), 2 a usage or expression error, 4 any other error; errors are one
line on stderr, never a traceback.

Every subcommand is one ``_add_<name>_command(subparsers)`` function in `SUBCOMMANDS` that adds
its parser and sets ``handler`` to a function of the parsed arguments returning the exit code.
Packages other than `layout_algebra` are imported inside the handler that needs them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from layout_algebra.expression_parser import ExpressionError, parse_layout
from layout_algebra.printing import text_grid
from layout_algebra.register import RegisterLayout

EXIT_OK = 0
EXIT_REFUTED = 1
EXIT_USAGE = 2
EXIT_UNKNOWN = 3
EXIT_ERROR = 4

MAX_GRID_CELLS = 16_384


def _positive_seconds(text: str) -> float:
    """argparse type: a positive number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return seconds


def _describe(layout: RegisterLayout) -> str:
    """The repr, the numbers and (up to MAX_GRID_CELLS cells) the grid of `layout`."""
    cells = layout.num_threads * layout.local_size
    if cells <= MAX_GRID_CELLS:
        grid = text_grid(layout)
    else:
        grid = f"(grid omitted: {cells} thread-register pairs, more than {MAX_GRID_CELLS})"
    return "\n".join(
        [
            f"layout       {layout!r}",
            f"shape        {layout.shape}",
            f"num_threads  {layout.num_threads}",
            f"local_size   {layout.local_size}",
            f"replication  {layout.replication}",
            "",
            grid,
        ]
    )


def _run_show(args: argparse.Namespace) -> int:
    layout = parse_layout(args.expr)
    print(_describe(layout))
    if args.html is not None:
        from layout_algebra.render import layout_html

        Path(args.html).write_text(layout_html(layout), encoding="utf-8")
        print(f"wrote {args.html}")
    if args.png is not None:
        from layout_algebra.render import layout_figure

        layout_figure(layout).savefig(args.png, format="png")
        print(f"wrote {args.png}")
    return EXIT_OK


def _add_show_command(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "show",
        help="print a layout's numbers and its t:i grid",
        description="Print the layout's repr, shape, num_threads, local_size, replication and "
        "its grid, each cell listing the thread:register pairs that hold the element.",
    )
    parser.add_argument("expr", help='a layout expression, e.g. "spatial(2,4).local(2,1)"')
    parser.add_argument("--html", metavar="FILE", help="also write the picture as HTML")
    parser.add_argument("--png", metavar="FILE", help="also write the picture as PNG")
    parser.set_defaults(handler=_run_show)


def _as_text(value: object) -> str:
    """A counterexample value as text: sequences as tuples, anything else as itself."""
    if isinstance(value, (list, tuple)):
        return str(tuple(value))
    return str(value)


def _run_equiv(args: argparse.Namespace) -> int:
    first = parse_layout(args.a)
    second = parse_layout(args.b)
    from proofs import check_equivalent

    result = check_equivalent(first, second, timeout=args.timeout)
    if result.holds is True:
        print(f"equivalent (proved in {round(result.seconds * 1000)} ms)")
        return EXIT_OK
    if result.holds is False:
        example = result.counterexample
        if example is None:
            print(f"not equivalent: {result.reason}")
        else:
            print(
                f"not equivalent: thread {example['t']}, register {example['i']} maps to "
                f"{_as_text(example['a'])} under A but {_as_text(example['b'])} under B"
            )
        return EXIT_REFUTED
    print(f"unknown: {result.reason}")
    return EXIT_UNKNOWN


def _add_equiv_command(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "equiv",
        help="prove two layouts equal or find a counterexample",
        description="Ask the solver whether layouts A and B are the same function of "
        "(thread, register). Exit code 0 proved, 1 refuted, 3 unknown.",
    )
    parser.add_argument("a", metavar="A", help="the first layout expression")
    parser.add_argument("b", metavar="B", help="the second layout expression")
    parser.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=30.0,
        metavar="S",
        help="give up after S seconds (default 30)",
    )
    parser.set_defaults(handler=_run_equiv)


SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    _add_show_command,
    _add_equiv_command,
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the command line, one subparser per entry of SUBCOMMANDS."""
    parser = argparse.ArgumentParser(
        prog="layout-algebra",
        description="Register layouts of GPU tiles: show them, prove them equal.",
        epilog="Exit codes: 0 success or proved, 1 refuted, 2 usage or expression error, "
        "3 unknown, 4 any other error.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add_command in SUBCOMMANDS:
        add_command(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on `argv` (default: the process's arguments); return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_request:
        # argparse exits by itself after --help (0) and after printing a usage error (2).
        return EXIT_USAGE if exit_request.code not in (0, None) else EXIT_OK
    try:
        return args.handler(args)
    except ExpressionError as error:
        print(f"layout-algebra: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:  # the command line promises an exit code, never a traceback
        print(f"layout-algebra: error: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_ERROR

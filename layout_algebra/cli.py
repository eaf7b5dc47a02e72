"""The `layout-algebra` command line (also `python -m layout_algebra`).

Subcommands:

- ``show EXPR [--html FILE] [--png FILE]``: print the layout's repr, its numbers (shape,
  num_threads, local_size, replication) and its ``t:i`` grid; optionally draw it as HTML or PNG;
- ``equiv EXPR EXPR [--timeout S] [--html FILE] [--png FILE]``: prove the two layouts equal
  with the solver, or print a counterexample; optionally draw where they differ as HTML or PNG
  (no cell marked when they are equal);
- ``demo [--weights DTYPE] [--json]``: build the quantized matmul tile program, prove its
  layouts and its lowering, run it in the reference interpreter, compile it, and run and compare
  it on the GPU when there is one;
- ``gallery [--output DIR]``: draw the picture gallery (`layout_algebra.gallery`) into DIR
  (default ``docs/gallery``).

EXPR is a layout expression in the restricted grammar of `layout_algebra.expression_parser`
(never evaluated by Python); ``show --help`` and ``equiv --help`` state it (`GRAMMAR_HELP`).
Exit codes: 0 success (for ``equiv``: proved equivalent), 1 refuted, 3 unknown (the solver gave
up), 2 a usage or expression error, 4 any other error (``equiv --html/--png`` of layouts of
different shapes or thread counts among them); errors are one line on stderr, never a traceback.

Every subcommand is one ``_add_<name>_command(subparsers)`` function in `SUBCOMMANDS` that adds
its parser and sets ``handler`` to a function of the parsed arguments returning the exit code.
Packages other than `layout_algebra` are imported inside the handler that needs them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from layout_algebra.expression_parser import FUNCTIONS, METHODS, ExpressionError, parse_layout
from layout_algebra.printing import GRID_LIMIT, text_grid
from layout_algebra.register import RegisterLayout

EXIT_OK = 0
EXIT_REFUTED = 1
EXIT_USAGE = 2
EXIT_UNKNOWN = 3
EXIT_ERROR = 4

MAX_GRID_CELLS = GRID_LIMIT


MAX_TIMEOUT_SECONDS = 4_294_967
"""The longest solver timeout: z3 counts it in milliseconds in an unsigned 32-bit int."""

WEIGHT_TYPES_HELP = "u1..u8, i1..i8, or a float of at most 8 bits (f4e2m1, f6e3m2, f8e4m3, ...)"


def _grammar_help() -> str:
    """The expression grammar of `layout_algebra.expression_parser`, for the epilog of the
    subcommands that take expressions."""

    def names(label: str, values: list[str]) -> str:
        return textwrap.fill(
            ", ".join(values), width=96, initial_indent=f"  {label}", subsequent_indent=" " * 12
        )

    return "\n".join(
        [
            "EXPR grammar (parsed, never run as Python):",
            "  EXPR := FUNCTION(ARGS) | EXPR.METHOD(ARGS) | EXPR * EXPR | EXPR / EXPR | (EXPR)",
            "  '*' is product(a, b), '/' is divide(a, b); ARGS are comma-separated: integers",
            "  (also negative), True, False, [ints] or (ints), layouts, and NAME=ARG keywords.",
            names("FUNCTION: ", sorted(FUNCTIONS)),
            names("METHOD:   ", sorted(METHODS)),
            '  examples: "local(2,1).spatial(8,4).local(1,2)", "spatial(2,4) * local(2,1)",',
            '            "reduce(spatial(3,4), [0])", "spatial(4).replicate(2)"',
        ]
    )


GRAMMAR_HELP = _grammar_help()
"""The epilog of ``show`` and ``equiv``: what their EXPR arguments may be."""


def _positive_seconds(text: str) -> float:
    """argparse type: a positive, finite number of seconds up to `MAX_TIMEOUT_SECONDS`."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < seconds <= MAX_TIMEOUT_SECONDS:
        raise argparse.ArgumentTypeError(
            f"expected a positive number of seconds up to {MAX_TIMEOUT_SECONDS}, got {text!r}"
        )
    return seconds


def _seed(text: str) -> int:
    """argparse type: a non-negative integer seed (NumPy's random generators take no other)."""
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if seed < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return seed


def _weight_type(text: str) -> str:
    """argparse type: the name of a data type of at most 8 bits (a weight type of the demo)."""
    from ir import dtypes

    try:
        dtype = dtypes.from_name(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error}; expected {WEIGHT_TYPES_HELP}") from None
    if dtype.nbits > 8:
        raise argparse.ArgumentTypeError(
            f"{text!r} has {dtype.nbits} bits: not a weight type; expected {WEIGHT_TYPES_HELP}"
        )
    return text


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
        epilog=GRAMMAR_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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


def _difference_pictures(
    first: RegisterLayout, second: RegisterLayout, args: argparse.Namespace
) -> list[tuple[str, Callable[[str], None]]]:
    """The pictures of where `first` and `second` differ that `args` asks for, as (path, writer)
    pairs; drawn before the solver runs, so that layouts that cannot be compared cell by cell
    fail at once (LayoutError)."""
    pictures: list[tuple[str, Callable[[str], None]]] = []
    if args.html is not None:
        from layout_algebra.render import difference_html

        text = difference_html(first, second)
        pictures.append((args.html, lambda path: Path(path).write_text(text, encoding="utf-8")))
    if args.png is not None:
        from layout_algebra.render import difference_figure

        figure = difference_figure(first, second)
        pictures.append((args.png, lambda path: figure.savefig(path, format="png")))
    return pictures


def _run_equiv(args: argparse.Namespace) -> int:
    first = parse_layout(args.a)
    second = parse_layout(args.b)
    pictures = _difference_pictures(first, second, args)
    from proofs import check_equivalent

    result = check_equivalent(first, second, timeout=args.timeout)
    code = _report_verdict(result)
    for path, write in pictures:
        write(path)
        print(f"wrote {path}")
    return code


def _report_verdict(result: object) -> int:
    """Print the verdict of `check_equivalent`; return its exit code."""
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
        "(thread, register). Exit code 0 proved, 1 refuted, 3 unknown. --html and --png draw "
        "the tile once, marking in red the elements whose owners differ (A and B must have the "
        "same shape and number of threads).",
        epilog=GRAMMAR_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    parser.add_argument("--html", metavar="FILE", help="also write where they differ as HTML")
    parser.add_argument("--png", metavar="FILE", help="also write where they differ as PNG")
    parser.set_defaults(handler=_run_equiv)


DEMO_SHAPE = {"m": 96, "n": 128, "k": 256}
"""The demo's problem size: partial tiles along m, two k-groups of 128."""


class _Progress:
    """The demo's step reports on stdout (none with --json, which prints the report instead),
    and one-line progress bars on stderr when it is a terminal (nothing is redrawn in a file)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def step(self, text: str) -> None:
        if not self.quiet:
            print(text, flush=True)

    def bar(self, label: str, done: int, total: int) -> None:
        if self.quiet or total == 0 or not sys.stderr.isatty():
            return
        width = 30
        filled = width * done // total
        end = "\n" if done == total else ""
        print(
            f"\r  {label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}",
            end=end,
            file=sys.stderr,
            flush=True,
        )


def _demo_inputs(weight_dtype: object, group_size: int, seed: int) -> dict[str, object]:
    """Random activations, weight codes (packed) and scales for the demo's shape."""
    import numpy as np

    from ir import dtypes

    rng = np.random.default_rng(seed)
    m, n, k = DEMO_SHAPE["m"], DEMO_SHAPE["n"], DEMO_SHAPE["k"]
    codes = rng.integers(0, 1 << weight_dtype.nbits, size=(k, n), dtype=np.int64)
    weights = weight_dtype.decode(codes.astype(weight_dtype.code_dtype))
    finite = np.isfinite(weights)
    codes = np.where(finite, codes, 0).astype(weight_dtype.code_dtype)
    groups = math.ceil(k / group_size)
    return {
        "a": rng.standard_normal((m, k)).astype(np.float16),
        "codes": codes,
        "w": dtypes.pack(codes.reshape(-1), weight_dtype),
        "scales": (rng.random((groups, n)) * 0.1 + 0.01).astype(np.float16),
    }


def _demo_reference(inputs: dict[str, object], weight_dtype: object, group_size: int) -> object:
    """Dequantize-then-matmul in float64: the formula the tile program computes."""
    import numpy as np

    weights = weight_dtype.decode(inputs["codes"]).astype(np.float64)
    scales = np.repeat(inputs["scales"].astype(np.float64), group_size, axis=0)
    return inputs["a"].astype(np.float64) @ (weights * scales[: weights.shape[0]])


def _relative_error(value: object, reference: object) -> float:
    import numpy as np

    return float(np.linalg.norm(value - reference) / np.linalg.norm(reference))


def _run_demo(args: argparse.Namespace) -> int:
    import numpy as np

    from backend import compile as compile_program
    from backend.device import current_arch
    from backend.errors import NoDeviceError
    from ir import dtypes, run_reference
    from ir.examples.quantized_matmul import quantized_matmul
    from proofs import check_program_layouts
    from proofs.lowering_validation import validate_lowering

    progress = _Progress(quiet=args.json)
    report: dict[str, object] = {"shape": DEMO_SHAPE, "weights": args.weights}
    weight_dtype = dtypes.from_name(args.weights)
    group_size = 128

    started = time.perf_counter()
    program = quantized_matmul(weight_dtype, group_size=group_size)
    instructions = sum(1 for _ in program.walk())
    report["program"] = {
        "name": program.name,
        "threads": program.num_threads,
        "instructions": instructions,
    }
    progress.step(
        f"1. built {program.name} for {weight_dtype} weights: {instructions} instructions, "
        f"{program.num_threads} threads"
    )

    layouts = check_program_layouts(
        program,
        timeout=args.timeout,
        progress=lambda done, total: progress.bar("layout proofs", done, total),
    )
    report["layout_proofs"] = {
        "proved": layouts.proved,
        "total": len(layouts.results),
        "claims": [
            {"claim": claim.description, "holds": result.holds, "seconds": result.seconds}
            for claim, result in layouts.results
        ],
    }
    progress.step(
        f"2. proved {layouts.proved}/{len(layouts.results)} layout claims "
        "(in bounds, stores injective)"
    )

    try:
        arch = current_arch()
        on_gpu = True
    except NoDeviceError:
        arch, on_gpu = "sm_90a", False
    compiled = compile_program(program, arch)
    validation = validate_lowering(compiled, timeout=args.timeout)
    proved = sum(result.holds is True for _, result in validation.results)
    report["compile"] = {
        "arch": arch,
        "source_lines": compiled.source.count("\n"),
        "cubin_bytes": len(compiled.cubin),
    }
    report["lowering_proofs"] = {
        "proved": proved,
        "total": len(validation.results),
        "holds": validation.holds,
    }
    progress.step(
        f"3. compiled for {arch} with NVRTC ({len(compiled.cubin)} bytes of CUBIN); proved "
        f"{proved}/{len(validation.results)} printed addresses equal to what the program's "
        "layouts and offsets ask, printed as proved, under their replica guards and masks"
    )

    inputs = _demo_inputs(weight_dtype, group_size, args.seed)
    m, n, k = DEMO_SHAPE["m"], DEMO_SHAPE["n"], DEMO_SHAPE["k"]
    grid = (math.ceil(n / 64), math.ceil(m / 64))
    output = np.zeros((m, n), dtype=np.float16)
    tick = time.perf_counter()
    run_reference(program, m, n, k, inputs["a"], inputs["w"], inputs["scales"], output, grid=grid)
    reference = _demo_reference(inputs, weight_dtype, group_size)
    error = _relative_error(output.astype(np.float64), reference)
    report["interpreter"] = {"seconds": time.perf_counter() - tick, "relative_error": error}
    progress.step(
        f"4. interpreter: {m}x{n}x{k} in {report['interpreter']['seconds']:.2f} s, "
        f"relative error {error:.2e} against float64"
    )

    if on_gpu:
        import torch

        device = torch.device("cuda")
        c = torch.zeros((m, n), dtype=torch.float16, device=device)
        compiled(
            m,
            n,
            k,
            torch.from_numpy(inputs["a"]).to(device),
            torch.from_numpy(inputs["w"]).to(device),
            torch.from_numpy(inputs["scales"]).to(device),
            c,
            grid=grid,
        )
        torch.cuda.synchronize()
        gpu_output = c.cpu().numpy()
        identical = bool(np.array_equal(gpu_output.view(np.uint16), output.view(np.uint16)))
        report["gpu"] = {"identical_to_interpreter": identical}
        progress.step(
            f"5. GPU run: {'bit-identical to' if identical else 'DIFFERS from'} the interpreter"
        )
        ok = identical
    else:
        report["gpu"] = None
        progress.step(
            "5. no GPU found: compiled only (run on a machine with an NVIDIA GPU to compare)"
        )
        ok = True
    ok = ok and error < 1e-2 and validation.holds is True
    report["ok"] = ok
    report["seconds"] = time.perf_counter() - started
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    return EXIT_OK if ok else EXIT_REFUTED


def _add_demo_command(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="build, prove, interpret, compile and run the quantized matmul tile program",
        description="Build the W-A16 quantized matmul tile program, prove its layouts and its "
        "lowering, run it in the NumPy reference interpreter, compile it with NVRTC, and run and "
        "compare it on the GPU when there is one. Exit code 0 when every step agrees.",
    )
    parser.add_argument(
        "--weights",
        type=_weight_type,
        default="u4",
        metavar="DTYPE",
        help=f"weight type: {WEIGHT_TYPES_HELP} (default u4)",
    )
    parser.add_argument(
        "--seed", type=_seed, default=0, help="random seed of the inputs (a non-negative integer)"
    )
    parser.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=30.0,
        metavar="S",
        help="per proof (default 30)",
    )
    parser.add_argument("--json", action="store_true", help="print a machine-readable report")
    parser.set_defaults(handler=_run_demo)


def _run_gallery(args: argparse.Namespace) -> int:
    from layout_algebra.gallery import write_gallery

    for path in write_gallery(args.output):
        print(f"wrote {path}")
    return EXIT_OK


def _add_gallery_command(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "gallery",
        help="draw the picture gallery (PNG files and an index) into a directory",
        description="Draw the gallery of layout pictures (register layouts, the mma fragments, "
        "a swizzled shared tile, bank conflicts of an access, a counterexample) as PNG files "
        "with an index.md of captions. Needs matplotlib (the plot extra).",
    )
    parser.add_argument(
        "--output", default="docs/gallery", metavar="DIR", help="directory (default docs/gallery)"
    )
    parser.set_defaults(handler=_run_gallery)


SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    _add_show_command,
    _add_equiv_command,
    _add_demo_command,
    _add_gallery_command,
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

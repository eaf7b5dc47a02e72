"""Mutation testing: does the test suite fail when the code is wrong?

One operator set is applied to every package (`layout_algebra`, `ir`, `backend`, `proofs`):

- ``compare``: a comparison flipped at its boundary or negated (``<`` / ``<=``, ``>`` / ``>=``,
  ``==`` / ``!=``, ``is`` / ``is not``, ``in`` / ``not in``);
- ``arith``: a binary arithmetic operator replaced (``+`` / ``-``, ``*`` / ``+``, ``//`` / ``*``,
  ``%`` / ``//``, ``<<`` / ``>>``, ``&`` / ``|``, ``^`` / ``|``);
- ``constant``: an integer constant n replaced by n + 1;
- ``boolean``: ``and`` / ``or`` swapped, or a ``not`` removed;
- ``statement``: a statement deleted (a ``raise``, an assignment to a field or an element, a
  call whose result is not used, a ``return`` inside a condition replaced by ``pass``).

    python tests/mutation/mutation_main.py generate --per-package 30 --seed 13
    python tests/mutation/mutation_main.py run [--package proofs] [--jobs 2]
    python tests/mutation/mutation_main.py report

Type annotations and type unions (``int | None``) are not mutated, nor the test-support modules
(`ir.testing`, `layout_algebra.testing`).

`generate` lists every place each operator applies in the package sources, draws a fixed number
per package with a fixed seed (so the list is the same on every machine) and writes
`mutants.json` beside this file, keeping any "equivalent" notes already there (a mutant that
cannot change any observable result, with a one-line reason; it is left out of the score).

A mutant's line is found by its text, nearest to its recorded line, so edits elsewhere in a
module keep the list valid; a mutant whose line is gone is reported stale.

`run` copies the working tree's tracked files to a temporary folder (so the mutants never touch
the checkout other processes import from), then for each mutant writes the mutated module, runs
the package's tests (``pytest -x tests/<package>``, plus the tests listed for it in
`EXTRA_TESTS`) there, and restores the module. A mutant is killed when the tests fail or time
out. It prints the score per package (killed / non-equivalent mutants) and writes
`results.json` beside this file, keeping the earlier results of the mutants it did not run.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PACKAGES = ("layout_algebra", "ir", "backend", "proofs")
EXTRA_TESTS = {
    "layout_algebra": ["tests/test_readme.py"],
    "ir": ["tests/backend/test_lower_emulated.py"],
    "backend": ["tests/proofs/test_lowering_validation.py"],
    "proofs": ["tests/layout_algebra/test_cli.py", "tests/test_demo.py"],
}
"""Test files beyond tests/<package> that exercise a package (its direct users)."""

TIMEOUT_SECONDS = 900
"""A mutant whose tests run longer than this counts as killed (it made something hang)."""

_COMPARE_FLIPS = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_ARITH_SWAPS = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Add,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitOr,
}


@dataclass(frozen=True)
class Mutant:
    """One change: in `path`, the source text of lines `line` .. `end_line` (1-based, whole
    lines) is replaced by `replacement`."""

    identifier: str
    package: str
    path: str
    line: int
    end_line: int
    operator: str
    original: str
    replacement: str
    equivalent: str | None = None


def _unparse_lines(lines: list[str], node: ast.AST, new_node: ast.AST) -> str | None:
    """The text of the lines of `node` with `node` replaced by `new_node` (None when the node
    spans lines in a way a whole-line replacement cannot express)."""
    start, end = node.lineno - 1, node.end_lineno - 1
    first, last = lines[start], lines[end]
    prefix, suffix = first[: node.col_offset], last[node.end_col_offset :]
    text = ast.unparse(new_node)
    if "\n" in text:
        return None
    return prefix + text + suffix


_TYPE_NAMES = frozenset({"int", "float", "str", "bool", "bytes", "object", "complex"})


def _annotations(node: ast.AST) -> list[ast.AST]:
    """The type annotations `node` carries (of arguments, returns, annotated assignments)."""
    if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
        return [node.annotation]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
        return [node.returns]
    return []


def _is_type(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is None
    if isinstance(node, ast.Name):
        return node.id in _TYPE_NAMES or node.id[:1].isupper()
    if isinstance(node, ast.Attribute | ast.Subscript):
        return _is_type(node.value) if isinstance(node, ast.Subscript) else node.attr[:1].isupper()
    return isinstance(node, ast.BinOp) and _is_type_union(node)


def _is_type_union(node: ast.AST) -> bool:
    """Whether `node` is ``A | B`` of types (a type alias, not arithmetic)."""
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.BitOr)
        and _is_type(node.left)
        and _is_type(node.right)
    )


def _candidates(path: Path, package: str) -> list[Mutant]:
    source = path.read_text()
    lines = source.split("\n")
    tree = ast.parse(source)
    relative = str(path.relative_to(ROOT))
    found: list[Mutant] = []

    def add(node: ast.AST, operator: str, new_node: ast.AST) -> None:
        if node.lineno != node.end_lineno:
            return
        replaced = _unparse_lines(lines, node, new_node)
        if replaced is None:
            return
        original = lines[node.lineno - 1]
        if replaced == original:
            return
        mutated = lines[: node.lineno - 1] + [replaced] + lines[node.lineno :]
        try:
            ast.parse("\n".join(mutated))
        except SyntaxError:
            return
        identifier = f"{relative}:{node.lineno}:{node.col_offset}:{operator}"
        found.append(
            Mutant(
                identifier,
                package,
                relative,
                node.lineno,
                node.lineno,
                operator,
                original,
                replaced,
            )
        )

    docstrings = {
        id(body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        for body in [node.body]
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    }
    annotations = {
        id(inner)
        for node in ast.walk(tree)
        for annotation in _annotations(node)
        for inner in ast.walk(annotation)
    }
    for node in ast.walk(tree):
        if id(node) in annotations or _is_type_union(node):
            continue
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            flip = _COMPARE_FLIPS.get(type(node.ops[0]))
            if flip is not None:
                add(node, "compare", ast.Compare(node.left, [flip()], node.comparators))
        elif isinstance(node, ast.BinOp):
            swap = _ARITH_SWAPS.get(type(node.op))
            if swap is not None and not isinstance(node.left, ast.Constant | ast.JoinedStr):
                add(node, "arith", ast.BinOp(node.left, swap(), node.right))
        elif (
            isinstance(node, ast.Constant)
            and type(node.value) is int
            and id(node) not in docstrings
            and hasattr(node, "lineno")
        ):
            add(node, "constant", ast.Constant(node.value + 1))
        elif isinstance(node, ast.BoolOp):
            other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            add(node, "boolean", ast.BoolOp(other, node.values))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            add(node, "boolean", node.operand)
    for parent in ast.walk(tree):
        for body in (getattr(parent, "body", None), getattr(parent, "orelse", None)):
            if not isinstance(body, list) or len(body) < 2:
                continue
            for statement in body:
                deletable = (
                    isinstance(statement, ast.Raise)
                    or (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call))
                    or (
                        isinstance(statement, ast.Assign | ast.AugAssign)
                        and any(
                            isinstance(target, ast.Attribute | ast.Subscript)
                            for target in (
                                statement.targets
                                if isinstance(statement, ast.Assign)
                                else [statement.target]
                            )
                        )
                    )
                    or (isinstance(statement, ast.Return) and isinstance(parent, ast.If))
                )
                if deletable:
                    add(statement, "statement", ast.Pass())
    return found


def generate(per_package: int, seed: int) -> list[Mutant]:
    """A fixed sample of `per_package` mutants of each package (see the module docstring)."""
    notes = {m.identifier: m.equivalent for m in load() if m.equivalent} if _LIST.exists() else {}
    chosen: list[Mutant] = []
    for package in PACKAGES:
        candidates = []
        for path in _tracked_sources(package):
            candidates.extend(_candidates(path, package))
        rng = random.Random(f"{seed}:{package}")
        rng.shuffle(candidates)
        for mutant in candidates[:per_package]:
            note = notes.get(mutant.identifier)
            chosen.append(Mutant(**{**asdict(mutant), "equivalent": note}))
    return chosen


_LIST = HERE / "mutants.json"
_RESULTS = HERE / "results.json"


def _tracked_sources(package: str) -> list[Path]:
    """The Python files of `package` that git tracks, sorted, less the test-support modules
    (`*/testing.py`, `*/testing/`: strategies for the tests, not the product under test)."""
    names = subprocess.run(
        ["git", "ls-files", "--", f"{package}/*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    product = [n for n in names if "/testing/" not in n and not n.endswith("/testing.py")]
    return [ROOT / name for name in sorted(product)]


def load() -> list[Mutant]:
    """The committed list of mutants."""
    return [Mutant(**entry) for entry in json.loads(_LIST.read_text())]


def _tracked_copy() -> Path:
    """A temporary copy of the files git tracks (as they are in the working tree)."""
    target = Path(tempfile.mkdtemp(prefix="mutants-"))
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, names):
        source = ROOT / name.decode()
        if source.is_file():
            destination = target / name.decode()
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    return target


def _locate(lines: list[str], mutant: Mutant) -> int | None:
    """The index of the mutant's line in `lines`: the line with its original text nearest to
    where it was when the list was made (edits elsewhere in the module shift it), or None when
    the text is gone (the mutant is stale: regenerate the list)."""
    matches = [n for n, line in enumerate(lines) if line == mutant.original]
    if not matches:
        return None
    return min(matches, key=lambda n: abs(n - (mutant.line - 1)))


def _run_one(mutant: Mutant, copy: Path) -> dict[str, object]:
    """Apply `mutant` in `copy`, run its package's tests there, restore; the outcome."""
    module = copy / mutant.path
    original = module.read_text()
    lines = original.split("\n")
    index = _locate(lines, mutant)
    if index is None:
        return {"identifier": mutant.identifier, "outcome": "stale", "seconds": 0.0}
    lines[index] = mutant.replacement
    module.write_text("\n".join(lines))
    tests = [f"tests/{mutant.package}", *EXTRA_TESTS.get(mutant.package, [])]
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    environment = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.perf_counter()
    try:
        run = subprocess.run(
            command, cwd=copy, env=environment, capture_output=True, timeout=TIMEOUT_SECONDS
        )
        outcome = "survived" if run.returncode == 0 else "killed"
    except subprocess.TimeoutExpired:
        outcome = "killed"
    finally:
        module.write_text(original)
    return {
        "identifier": mutant.identifier,
        "outcome": outcome,
        "seconds": round(time.perf_counter() - started, 1),
    }


def run(mutants: list[Mutant], jobs: int) -> list[dict[str, object]]:
    """Run every mutant (at most `jobs` at once, each in its own copy of the tree)."""
    copies = [_tracked_copy() for _ in range(jobs)]
    try:
        results: list[dict[str, object]] = []
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            batches = [mutants[k::jobs] for k in range(jobs)]

            def run_batch(index: int) -> list[dict[str, object]]:
                done = []
                for mutant in batches[index]:
                    result = _run_one(mutant, copies[index])
                    print(f"{result['outcome']:8} {result['seconds']:6}s {mutant.identifier}")
                    sys.stdout.flush()
                    done.append(result)
                return done

            for batch in pool.map(run_batch, range(jobs)):
                results.extend(batch)
        return results
    finally:
        for copy in copies:
            shutil.rmtree(copy, ignore_errors=True)


def scores(mutants: list[Mutant], results: list[dict[str, object]]) -> dict[str, dict]:
    """Per package: the mutants listed, those noted equivalent or dead (left out of the score),
    killed, and the identifiers of the others that survived or have not been run yet."""
    outcome = {r["identifier"]: r["outcome"] for r in results}
    table: dict[str, dict] = {}
    for package in PACKAGES:
        own = [m for m in mutants if m.package == package]
        counted = [m for m in own if not m.equivalent]
        killed = [m for m in counted if outcome.get(m.identifier) == "killed"]
        table[package] = {
            "mutants": len(own),
            "equivalent": len(own) - len(counted),
            "killed": len(killed),
            "survived": [m.identifier for m in counted if outcome.get(m.identifier) == "survived"],
            "not_run": [m.identifier for m in counted if m.identifier not in outcome],
            "score": round(len(killed) / len(counted), 3) if counted else None,
        }
    return table


def _print_scores(table: dict[str, dict]) -> None:
    for package, row in table.items():
        print(
            f"{package:15} {row['killed']}/{row['mutants'] - row['equivalent']} killed "
            f"({row['equivalent']} equivalent or dead), score {row['score']}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("generate", help="write the list of mutants")
    make.add_argument("--per-package", type=int, default=30)
    make.add_argument("--seed", type=int, default=13)
    execute = commands.add_parser("run", help="run the listed mutants against the tests")
    execute.add_argument("--package", choices=PACKAGES, action="append")
    execute.add_argument("--only", action="append", help="run only these mutant identifiers")
    execute.add_argument("--jobs", type=int, default=2)
    commands.add_parser("report", help="score results.json against the list, print and save it")
    args = parser.parse_args(argv)
    if args.command == "generate":
        mutants = generate(args.per_package, args.seed)
        _LIST.write_text(json.dumps([asdict(m) for m in mutants], indent=1) + "\n")
        print(f"{len(mutants)} mutants written to {_LIST.relative_to(ROOT)}")
        return 0
    if args.command == "report":
        results = json.loads(_RESULTS.read_text())["results"]
        table = scores(load(), results)
        _RESULTS.write_text(json.dumps({"scores": table, "results": results}, indent=1) + "\n")
        _print_scores(table)
        return 0
    mutants = load()
    if args.package:
        mutants = [m for m in mutants if m.package in args.package]
    if args.only:
        mutants = [m for m in mutants if m.identifier in args.only]
    fresh = run([m for m in mutants if not m.equivalent], args.jobs)
    # Results of listed mutants not run now are kept from earlier runs, so runs by package add
    # up to one table.
    earlier = json.loads(_RESULTS.read_text())["results"] if _RESULTS.exists() else []
    ran = {r["identifier"] for r in fresh}
    listed = load()
    known = {m.identifier for m in listed}
    results = [r for r in earlier if r["identifier"] not in ran and r["identifier"] in known]
    results += fresh
    table = scores(listed, results)
    _RESULTS.write_text(json.dumps({"scores": table, "results": results}, indent=1) + "\n")
    _print_scores(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Tests of the operator records (`layout_algebra.symbolic.OPERATORS`) and of `Expr.nodes()`.

An exact table pins each record's facts down; a differential test applies every operator to
random operands and compares its record's Python function, its NumPy function and its C spelling
(the C text compiled by gcc) with one another and with folding; a literal list pins the order of
`Expr.nodes()` on a tree with a shared subtree.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest

from layout_algebra.symbolic import (
    OPERATORS,
    Expr,
    Operator,
    const,
    evaluate,
    printing,
    select,
    var,
)
from layout_algebra.symbolic.folding import build
from layout_algebra.symbolic.printing import CONDITIONAL_EXTREMUM_LIMIT

# ------------------------------------------------------------------------------------ records

# symbol: (arity, kind, C text, Python text, negation)
RECORD_TABLE = {
    "var": (0, "leaf", None, None, None),
    "const": (0, "leaf", None, None, None),
    "+": (2, "arithmetic", "+", "+", None),
    "-": (2, "arithmetic", "-", "-", None),
    "*": (2, "arithmetic", "*", "*", None),
    "//": (2, "division", "/", "//", None),  # C's `/`, guarded where it would truncate
    "%": (2, "division", "%", "%", None),
    "min": (2, "extremum", "min", "minimum", None),  # C: CUDA's function min(a, b)
    "max": (2, "extremum", "max", "maximum", None),
    "&": (2, "bitwise", "&", "&", None),
    "|": (2, "bitwise", "|", "|", None),
    "^": (2, "bitwise", "^", "^", None),
    "<<": (2, "shift", "<<", "<<", None),
    ">>": (2, "shift", ">>", ">>", None),
    "<": (2, "comparison", "<", "<", ">="),
    "<=": (2, "comparison", "<=", "<=", ">"),
    ">": (2, "comparison", ">", ">", "<="),
    ">=": (2, "comparison", ">=", ">=", "<"),
    "==": (2, "comparison", "==", "eq", "!="),  # Python: the method a.eq(b)
    "!=": (2, "comparison", "!=", "ne", "=="),
    "and": (2, "logical", "&&", "logical_and", None),
    "or": (2, "logical", "||", "logical_or", None),
    "not": (1, "logical", "!", "logical_not", None),
    "select": (3, "select", None, "select", None),
}


def test_every_operator_has_one_record_keyed_by_its_symbol() -> None:
    assert set(OPERATORS) == set(RECORD_TABLE)
    for symbol, record in OPERATORS.items():
        assert isinstance(record, Operator)
        assert record.symbol == symbol


@pytest.mark.parametrize("symbol", tuple(RECORD_TABLE))
def test_record_table(symbol: str) -> None:
    record = OPERATORS[symbol]
    facts = (record.arity, record.kind, record.c_text, record.python_text, record.negation)
    assert facts == RECORD_TABLE[symbol]
    assert record.is_comparison == (record.kind == "comparison")
    assert record.is_boolean == (record.kind in ("comparison", "logical"))


def test_records_are_frozen_and_the_table_is_read_only() -> None:
    with pytest.raises(AttributeError, match="cannot assign to field 'c_text'"):
        OPERATORS["+"].c_text = "plus"
    with pytest.raises(TypeError, match="does not support item assignment"):
        OPERATORS["pow"] = OPERATORS["*"]


@pytest.mark.parametrize("symbol", [s for s, record in OPERATORS.items() if record.negation])
def test_negation_of_a_comparison_is_its_complement(symbol: str) -> None:
    record = OPERATORS[symbol]
    negation = OPERATORS[record.negation]
    assert negation.negation == symbol
    for a in range(-2, 3):
        for b in range(-2, 3):
            assert negation.integer(a, b) == (not record.integer(a, b))


# ----------------------------------------------------- differential: Python, NumPy, C, folding

# Operands, each drawn within its bounds: signed (x, y), positive (w), negative (v), non-negative
# (p, q) and a shift count (k), so that every printed form of `//` and `%` occurs.
LEAF_RANGES = {
    "x": (-50, 50),
    "y": (-50, 50),
    "w": (1, 50),
    "v": (-50, -1),
    "p": (0, 255),
    "q": (0, 255),
    "k": (0, 20),
}
LEAVES = {name: var(name, lo, hi) for name, (lo, hi) in LEAF_RANGES.items()}
SIGNED_LEAVES = (*(LEAVES[name] for name in "xywvp"), *map(const, (-7, -1, 0, 1, 3, 8)))
NONNEGATIVE_LEAVES = (LEAVES["p"], LEAVES["q"], *map(const, (0, 1, 5, 12, 255)))
COUNT_LEAVES = (LEAVES["k"], *map(const, (0, 3)))
# Operators whose operands may be any integers (the bitwise ones and shifts need non-negative
# operands and counts, where every evaluation agrees).
SIGNED_SYMBOLS = tuple(
    symbol
    for symbol, record in OPERATORS.items()
    if record.kind not in ("leaf", "bitwise", "shift")
)


def random_operand(generator: random.Random, leaves: tuple[Expr, ...], depth: int) -> Expr:
    """A leaf, or (when depth > 0, half of the time) an unfolded node of a signed operator."""
    if depth == 0 or generator.random() < 0.5:
        return generator.choice(leaves)
    record = OPERATORS[generator.choice(SIGNED_SYMBOLS)]
    args = tuple(random_operand(generator, SIGNED_LEAVES, depth - 1) for _ in range(record.arity))
    return Expr(record.symbol, args)


def random_node(generator: random.Random, symbol: str) -> Expr:
    """An unfolded node of `symbol` over random operands within the operator's domain."""
    record = OPERATORS[symbol]
    if record.kind == "bitwise":
        args = (generator.choice(NONNEGATIVE_LEAVES), generator.choice(NONNEGATIVE_LEAVES))
    elif record.kind == "shift":
        args = (generator.choice(NONNEGATIVE_LEAVES), generator.choice(COUNT_LEAVES))
    else:
        args = tuple(random_operand(generator, SIGNED_LEAVES, 1) for _ in range(record.arity))
    return Expr(symbol, args)


def random_env(generator: random.Random) -> dict[str, int]:
    """A value for every leaf variable, within its bounds."""
    return {name: generator.randint(lo, hi) for name, (lo, hi) in LEAF_RANGES.items()}


def c_program(cases: list[tuple[str, dict[str, int]]], header: str) -> str:
    """One C program whose `main` prints the value of each C expression from a block that
    declares the case's variables with their values (after the `header`'s definitions)."""
    blocks = []
    for text, env in cases:
        declarations = ", ".join(f"{name} = {value}" for name, value in env.items())
        blocks.append(f'  {{ long long {declarations}; printf("%lld\\n", (long long)({text})); }}')
    lines = ["#include <stdio.h>", header, "int main(void) {", *blocks, "  return 0;", "}"]
    return "\n".join(lines) + "\n"


def differential_cases(generator: random.Random) -> list[tuple[Expr, dict[str, int], int]]:
    """(expression, environment, value on ints) for random nodes of every operator; divisions
    by zero are left out (ints raise, arrays give 0, C traps)."""
    cases = []
    for symbol, record in OPERATORS.items():
        count = 0
        while record.kind != "leaf" and count < 60:
            expression, env = random_node(generator, symbol), random_env(generator)
            try:
                value = int(evaluate(expression, env))
            except ZeroDivisionError:
                continue
            cases.append((expression, env, value))
            count += 1
    return cases


def test_every_operator_agrees_on_ints_arrays_and_folding() -> None:
    generator = random.Random(20261201)
    for expression, env, value in differential_cases(generator):
        arrays = {name: np.array([env[name], env[name]]) for name in LEAF_RANGES}
        assert evaluate(expression, arrays).tolist() == [value, value], expression
        try:
            operands = [int(evaluate(arg, env)) for arg in expression.args]
        except ZeroDivisionError:
            continue  # an operand that select, and, or do not read divides by zero
        # The record's own functions, and folding, on the operands' values.
        record = OPERATORS[expression.op]
        if record.integer is not None:
            assert int(record.integer(*operands)) == value, expression
        array_result = record.array(*(np.array([operand]) for operand in operands))
        assert array_result.tolist() == [value], expression
        assert build(expression.op, tuple(map(const, operands))) == const(value), expression


@pytest.mark.parametrize("limit", [CONDITIONAL_EXTREMUM_LIMIT, 0], ids=["as-printed", "calls"])
def test_every_operator_agrees_with_its_c_text(
    run_c: Callable[..., list[int]], c_min_max: str, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    """(With min and max as conditionals, and, limit 0, as calls.)"""
    monkeypatch.setattr(printing, "CONDITIONAL_EXTREMUM_LIMIT", limit)
    cases = differential_cases(random.Random(20261202))
    printed = [(expression.to_c(), env) for expression, env, _ in cases]
    assert run_c(c_program(printed, c_min_max)) == [value for _, _, value in cases]


# -------------------------------------------------------------------------------------- nodes


def test_nodes_visits_each_node_once_parents_first() -> None:
    t, i = var("t", 0, 127), var("i", 0, 3)
    shared = t // 4  # one node object, an operand twice
    tree = select(shared < i, shared * 2, i)
    assert [repr(node) for node in tree.nodes()] == [
        "select(t // 4 < i, (t // 4) * 2, i)",
        "t // 4 < i",
        "t // 4",
        "t",
        "4",
        "i",
        "(t // 4) * 2",
        "2",
    ]


def test_nodes_tells_shared_nodes_from_equal_ones() -> None:
    t = var("t", 0, 127)
    tree = Expr("+", (t // 4, t // 4))  # two equal subtrees, two node objects; t is one node
    assert [repr(node) for node in tree.nodes()] == [
        "t // 4 + t // 4",
        "t // 4",
        "t",
        "4",
        "t // 4",
        "4",
    ]
    assert len({id(node) for node in tree.nodes()}) == 6

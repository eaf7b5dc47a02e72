"""How long the solver takes to decide layout questions, against brute force over the domain.

For register layouts of 32 to 64K elements it times, best of a few runs:

- proof: `check_equivalent` of a layout and the definition's formula on a refinement of its
  modes (every mode split in two where it can be): the same function, written differently;
- refutation: `check_equivalent` of the layout and the same formula changed at one (t, i);
- brute force: both tables evaluated with NumPy and compared.

A second table times `check_bijective` on swizzled shared layouts (the XOR swizzle goes through
bit-vectors) against sorting every offset. Run it as a script: ``python benchmarks/proof_speed.py``;
the tests do not run it.

What to expect: on concrete layouts, NumPy brute force is faster at every size here (well under
10 ms at 64K elements); the solver takes tens of milliseconds, growing slowly with the size,
mostly in building the query. The solver earns its keep where brute force cannot go: sizes that
are symbolic (`proofs.laws`, global layouts with a parameter extent) and counterexamples named
by the point, not by a diff of two tables.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from layout_algebra import (
    RegisterLayout,
    local,
    register_layout,
    shared_row_major_swizzle,
    spatial,
)
from layout_algebra.function_layout import FunctionLayout
from proofs import check_bijective, check_equivalent

ELEMENTS = [32, 128, 512, 2048, 8192, 32768, 65536]
REPEATS = 3
TIMEOUT = 60.0

Fields = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def layout_of(elements: int) -> RegisterLayout:
    """A register layout of `elements` elements in the style of an mma tile: up to 128
    threads in 8 x 4 groups of lanes, the rest in registers on both sides."""
    threads = min(elements, 128)
    registers = elements // threads
    inner = min(registers, 4)
    return local(registers // inner, 1) * spatial(threads // 4, 4) * local(1, inner)


def refined_fields(layout: RegisterLayout) -> Fields:
    """The layout's fields with every even mode of size > 2 split into (2, size // 2): a
    non-canonical description of the same function."""
    mode_shape: list[int] = []
    index: dict[int, list[int]] = {}
    for m, size in enumerate(layout.mode_shape):
        parts = [2, size // 2] if size > 2 and size % 2 == 0 else [size]
        index[m] = list(range(len(mode_shape), len(mode_shape) + len(parts)))
        mode_shape += parts

    def renumber(entries: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(k for e in entries for k in (index[e] if e >= 0 else [e]))

    return (
        layout.shape,
        tuple(mode_shape),
        renumber(layout.spatial_modes),
        renumber(layout.local_modes),
    )


def definition_formula(fields: Fields) -> Callable[[Any, Any], tuple[Any, ...]]:
    """The map of raw fields, as `RegisterLayout` defines it, as a formula: digits of t and i in
    mixed radix, each the value of its mode, each coordinate the row-major value of its
    dimension's modes."""
    shape, mode_shape, spatial_modes, local_modes = fields

    def formula(t: Any, i: Any) -> tuple[Any, ...]:
        digits: list[Any] = [0] * len(mode_shape)
        for index, entries in ((t, spatial_modes), (i, local_modes)):
            divisor = 1
            for entry in reversed(entries):
                size = -entry if entry < 0 else mode_shape[entry]
                if entry >= 0:
                    digits[entry] = index // divisor % size
                divisor *= size
        coords = []
        position = 0
        for extent in shape:
            coord: Any = 0
            covered = 1
            while covered < extent:
                coord = coord * mode_shape[position] + digits[position]
                covered *= mode_shape[position]
                position += 1
            coords.append(coord)
        return tuple(coords)

    return formula


def changed_at(layout: FunctionLayout, thread: int, register: int) -> FunctionLayout:
    """`layout` with coordinate 0 moved by one (cyclically) at one (thread, register)."""
    n, m = layout.num_threads, layout.local_size

    def formula(t: Any, i: Any) -> tuple[Any, ...]:
        coords = layout.map(t, i)
        hit = (n - (t - thread) % n) // n * ((m - (i - register) % m) // m)
        return ((coords[0] + hit) % layout.shape[0], *coords[1:])

    return FunctionLayout(layout.shape, n, m, formula)


def best_seconds(action: Callable[[], Any]) -> tuple[float, Any]:
    """The fastest of `REPEATS` runs of `action`, and its last result."""
    best = math.inf
    result = None
    for _ in range(REPEATS):
        started = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - started)
    return best, result


def register_row(elements: int) -> tuple[Any, ...]:
    """(elements, threads, registers, proof, refutation, brute force seconds, layout text)."""
    layout = layout_of(elements)
    fields = refined_fields(layout)
    assert register_layout(*fields) == layout
    formula = FunctionLayout(
        layout.shape, layout.num_threads, layout.local_size, definition_formula(fields)
    )
    wrong = changed_at(formula, layout.num_threads - 1, layout.local_size - 1)
    proof, proved = best_seconds(lambda: check_equivalent(layout, formula, timeout=TIMEOUT))
    refutation, refuted = best_seconds(lambda: check_equivalent(layout, wrong, timeout=TIMEOUT))
    brute, same = best_seconds(lambda: np.array_equal(layout.table(), formula.table()))
    assert proved.holds is True and refuted.holds is False and same
    return elements, layout.num_threads, layout.local_size, proof, refutation, brute, repr(layout)


def shared_row(elements: int) -> tuple[Any, ...]:
    """(elements, shape, proof seconds, verdict, brute force seconds) for a swizzled layout."""
    shared = shared_row_major_swizzle(elements // 64, 64, element_bits=16)
    proof, proved = best_seconds(lambda: check_bijective(shared, timeout=TIMEOUT))
    brute, bijective = best_seconds(
        lambda: np.array_equal(np.sort(shared.table().ravel()), np.arange(elements))
    )
    assert bijective
    return elements, shared.shape, proof, proved.holds, brute


def main() -> None:
    print("check_equivalent on register layouts (times in ms, best of 3)")
    header = ("elements", "threads", "regs", "proof", "refute", "brute")
    print("{:>9} {:>8} {:>5} {:>8} {:>8} {:>8}  layout".format(*header))
    for elements in ELEMENTS:
        _, threads, registers, proof, refutation, brute, text = register_row(elements)
        print(
            f"{elements:>9} {threads:>8} {registers:>5} {proof * 1e3:>8.1f} "
            f"{refutation * 1e3:>8.1f} {brute * 1e3:>8.2f}  {text}"
        )
    print()
    print("check_bijective on shared_row_major_swizzle(rows, 64, element_bits=16) (ms)")
    print(f"{'elements':>9} {'shape':>10} {'proof':>9} {'holds':>6} {'brute':>8}")
    for elements in ELEMENTS[2:]:
        _, shape, proof, holds, brute = shared_row(elements)
        print(
            f"{elements:>9} {str(shape):>10} {proof * 1e3:>9.1f} {holds!s:>6} {brute * 1e3:>8.2f}"
        )


if __name__ == "__main__":
    main()

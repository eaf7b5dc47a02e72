"""Every invalid construction or argument of the register-layout algebra raises `LayoutError`,
whose message names the offending value and what was expected."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from layout_algebra import (
    LayoutError,
    RegisterLayout,
    auto_local_spatial,
    concat,
    divide,
    flatten,
    left_divide,
    local,
    permute,
    product,
    reduce,
    register_layout,
    replicate,
    reshape,
    spatial,
    squeeze,
    unsqueeze,
)

MMA_C = local(2, 1).spatial(8, 4).local(1, 2)

MALFORMED: list[tuple[str, Callable[[], object], str]] = [
    # --- primitives
    ("zero extent", lambda: spatial(0), r"spatial shape\[0\] must be >= 1, got 0"),
    ("negative extent", lambda: local(2, -3), r"local shape\[1\] must be >= 1, got -3"),
    ("float extent", lambda: local(2.5), r"local shape\[0\] must be an integer, got 2.5"),
    ("bool extent", lambda: spatial(True), r"spatial shape\[0\] must be an integer, got True"),
    ("string extent", lambda: local("4"), r"local shape\[0\] must be an integer, got '4'"),
    ("zero replication", lambda: replicate(0), "replicate num_threads must be >= 1, got 0"),
    # --- direct construction of the four fields
    (
        "shape not a tuple",
        lambda: RegisterLayout(shape=4, mode_shape=(4,), spatial_modes=(0,), local_modes=()),
        "shape must be a tuple of integers, got 4",
    ),
    (
        "mode in no list",
        lambda: register_layout((4,), (2, 2), (0,), ()),
        r"modes \[1\] of mode_shape \(2, 2\) appear in neither",
    ),
    (
        "mode in both lists",
        lambda: register_layout((4,), (2, 2), (0, 1), (0,)),
        "mode 0 appears twice",
    ),
    (
        "mode out of range",
        lambda: register_layout((4,), (4,), (1,), ()),
        r"refers to mode 1, but mode_shape \(4,\) has 1 modes",
    ),
    (
        "replication among local modes",
        lambda: register_layout((4,), (4,), (0,), (-2,)),
        "replication \\(-r\\) is only allowed among spatial_modes",
    ),
    (
        "replication of one",
        lambda: register_layout((4,), (4,), (0, -1), ()),
        "replication -1: expected -r with r >= 2",
    ),
    (
        "modes do not multiply to the shape",
        lambda: register_layout((4,), (2, 3), (0, 1), ()),
        r"mode_shape \(2, 3\) multiplies to 6, but shape \(4,\) has 4 elements",
    ),
    (
        "modes do not split the dimensions",
        lambda: register_layout((2, 3), (3, 2), (0, 1), ()),
        r"mode_shape \(3, 2\) does not split shape \(2, 3\)",
    ),
    (
        "zero mode size",
        lambda: register_layout((4,), (0,), (0,), ()),
        r"mode_shape\[0\] must be >= 1, got 0",
    ),
    # --- map and owners
    ("thread out of range", lambda: MMA_C.map(32, 0), r"thread 32 is out of range \[0, 32\)"),
    ("negative thread", lambda: MMA_C.map(-1, 0), r"thread -1 is out of range"),
    ("register out of range", lambda: MMA_C.map(0, 4), r"local index 4 is out of range \[0, 4\)"),
    (
        "threads out of range in an array",
        lambda: MMA_C.map(np.arange(33), 0),
        r"threads out of range \[0, 32\): min 0, max 32",
    ),
    (
        "float index array",
        lambda: MMA_C.map(np.zeros(2), 0),
        "map expects integer threads and local indices",
    ),
    ("owner outside the shape", lambda: MMA_C.owners((16, 0)), "outside shape"),
    ("owner of the wrong rank", lambda: MMA_C.owners((1,)), "has rank 1, expected 2"),
    # --- product and divide
    ("product with a non-layout", lambda: product(MMA_C, 2), "right operand must be a Register"),
    ("divide by a non-layout", lambda: divide(MMA_C, "local(2)"), "divisor must be a Register"),
    ("extents do not divide", lambda: spatial(6) / spatial(4), "is not divisible by 4"),
    ("divisor not innermost", lambda: local(2).spatial(4) / local(2), "are not the last local"),
    ("left divisor not outermost", lambda: left_divide(MMA_C, local(1, 2)), "not the first local"),
    # --- reduce
    ("reduce a dimension twice", lambda: reduce(MMA_C, [1, -1]), "dimension 1 appears twice"),
    ("reduce a missing dimension", lambda: reduce(MMA_C, [2]), "2 is out of range for rank 2"),
    ("reduce a non-layout", lambda: reduce("MMA_C", [0]), "layout must be a RegisterLayout"),
    # --- transforms
    ("permute too few dims", lambda: permute(MMA_C, [0]), "must list all 2 dimensions"),
    ("permute a repeated dim", lambda: permute(MMA_C, [0, 0]), "dimension 0 appears twice"),
    (
        "reshape to the wrong size",
        lambda: reshape(MMA_C, (4, 4)),
        "holds 16 elements, the layout 128",
    ),
    ("reshape with two -1", lambda: reshape(MMA_C, (-1, -1)), "at most one -1"),
    ("reshape with -1 not fitting", lambda: reshape(MMA_C, (-1, 3)), "not a multiple of 3"),
    ("reshape with a zero extent", lambda: reshape(MMA_C, (0, 128)), r"shape\[0\] = 0 must be"),
    (
        "reshape that splits a thread step",
        lambda: reshape(spatial(2).replicate(2).spatial(3), (3, 2)),
        "no common refinement",
    ),
    ("flatten backwards", lambda: flatten(local(2, 3, 4), 2, 1), "start dimension 2 comes after"),
    ("squeeze a full dim", lambda: squeeze(local(1, 4), 1), "has extent 4, expected 1"),
    ("unsqueeze too far", lambda: unsqueeze(local(4), 2), "dimension 2 is out of range for rank 2"),
    ("concat other thread counts", lambda: concat(spatial(4), spatial(2), 0), "4 threads but b"),
    (
        "concat of unrelated layouts",
        lambda: concat(local(2).spatial(4), spatial(4).local(2), 0),
        "not the same layout stacked along dimension 0",
    ),
    # --- auto_local_spatial
    ("auto with no threads", lambda: auto_local_spatial(0, [4]), "num_threads must be a positive"),
    ("auto with a zero extent", lambda: auto_local_spatial(4, [0]), r"shape\[0\] = 0 must be"),
]


@pytest.mark.parametrize(
    ("construct", "match"),
    [(construct, match) for _, construct, match in MALFORMED],
    ids=[name for name, _, _ in MALFORMED],
)
def test_malformed_construction_raises_layout_error(
    construct: Callable[[], object], match: str
) -> None:
    with pytest.raises(LayoutError, match=match):
        construct()


def test_layout_error_is_a_value_error() -> None:
    assert issubclass(LayoutError, ValueError)
    with pytest.raises(ValueError, match="must be >= 1"):
        local(0)

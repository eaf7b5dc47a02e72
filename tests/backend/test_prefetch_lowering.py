"""The lowering of `prefetch_global`: one ``prefetch.global.L1`` (``.L2`` at level L2) per vector
the load of the tile would read, under the load's bounds checks, its helpers only in a kernel
that prefetches, and every address proved as a load's is (a wrong one refused)."""

from __future__ import annotations

from backend.cuda_codegen import PREFETCH_SOURCE
from backend.lower import lower
from ir import dtypes
from ir.builder import ProgramBuilder
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import local
from proofs.lowering_validation import validate_access, validate_lowering

RLIMIT = 2_000_000


def _rows_program(prefetch: bool, level: str = "L1"):
    """64 threads copy (4, 128) f32 tiles of an (m, 128) tensor, each tile maybe prefetched
    first, into `level`, in the load's layout (two 16-byte vectors a thread, a row bound
    each)."""
    with ProgramBuilder("rows", 64) as b:
        x, y = b.array_param("x", dtypes.f32), b.array_param("y", dtypes.f32)
        m = b.int_param("m")
        view = GlobalLayout((m, 128), (128, 1))
        layout = local(2, 1).spatial(2, 32).local(1, 4)
        if prefetch:  # through a view of its own, so that its lines are its alone
            source = b.global_view(x, dtypes.f32, view)
            b.prefetch_global(source, [b.block_x * 4, 0], layout, level=level)
        tile = b.load_global(b.global_view(x, dtypes.f32, view), [b.block_x * 4, 0], layout)
        b.store_global(b.global_view(y, dtypes.f32, view), tile, [b.block_x * 4, 0])
    return b.program()


def test_the_prefetch_text() -> None:
    source = lower(_rows_program(prefetch=True)).source
    start = source.index("    // prefetch_global(")
    end = source.index("    // g1 = global_view(", start)
    assert source[start:end] == (
        "    // prefetch_global(g0, [block_x * 4, 0], layout=local(2,1).spatial(2,32).local(1,4))\n"
        "    if (la_w_block_x * 4 + (la_thread >> 5) < m) {\n"
        "        la_prefetch_l1(g0 + (la_w_block_x * 2048 + la_thread * 16));\n"
        "    }\n"
        "    if (la_w_block_x * 4 + (la_thread >> 5) + 2 < m) {\n"
        "        la_prefetch_l1(g0 + (la_w_block_x * 2048 + la_thread * 16 + 1024));\n"
        "    }\n"
    )


def test_an_l2_prefetch_takes_the_l2_helper_at_the_same_addresses() -> None:
    l1 = lower(_rows_program(prefetch=True)).source
    l2 = lower(_rows_program(prefetch=True, level="L2")).source
    assert "layout=local(2,1).spatial(2,32).local(1,4), level='L2')" in l2
    assert l2.count("        la_prefetch_l2(g0 + (") == 2
    assert "        la_prefetch_l1(g0" not in l2
    body = l1[l1.index("    // prefetch_global(") : l1.index("    // g1 = global_view(")]
    assert (
        body.replace("la_prefetch_l1", "la_prefetch_l2").replace("))\n", "), level='L2')\n", 1)
        in l2
    )


def test_sub_byte_l2_prefetches_are_proved() -> None:
    """u4 codes read element by element: one ``la_prefetch_l2_bits`` per code, each address
    proved against its text."""
    with ProgramBuilder("codes", 64) as b:
        x, y = b.array_param("x", dtypes.u4), b.array_param("y", dtypes.u4)
        m = b.int_param("m")
        view = GlobalLayout((m, 40), (40, 1))
        layout = local(1, 1).spatial(4, 16).local(1, 3)
        source = b.global_view(x, dtypes.u4, view)
        b.prefetch_global(source, [b.block_x * 4, 0], layout, level="L2")
        tile = b.load_global(b.global_view(x, dtypes.u4, view), [b.block_x * 4, 0], layout)
        b.store_global(b.global_view(y, dtypes.u4, view), tile, [b.block_x * 4, 0])
    kernel = lower(b.program())
    assert kernel.source.count("la_prefetch_l2_bits(g0, ") == 3
    report = validate_lowering(kernel, rlimit=RLIMIT)
    prefetches = [r for a, r in report.results if a.instruction.op == "prefetch_global"]
    assert len(prefetches) == 3 and all(r.holds is True for r in prefetches)


def test_the_helpers_come_only_with_a_prefetch() -> None:
    assert PREFETCH_SOURCE.strip() in lower(_rows_program(prefetch=True)).source
    plain = lower(_rows_program(prefetch=False)).source
    assert "la_prefetch" not in plain and "prefetch.global" not in plain


def test_the_prefetch_addresses_are_proved() -> None:
    kernel = lower(_rows_program(prefetch=True))
    report = validate_lowering(kernel, rlimit=RLIMIT)
    prefetches = [r for a, r in report.results if a.instruction.op == "prefetch_global"]
    assert len(prefetches) == 2 and all(r.holds is True for r in prefetches)


def test_a_prefetch_printed_at_another_address_is_refused() -> None:
    """The second vector's prefetch moved by one vector: its access has no line any more."""
    kernel = lower(_rows_program(prefetch=True))
    access = [a for a in kernel.accesses if a.instruction.op == "prefetch_global"][1]
    source = kernel.source.replace(
        "la_prefetch_l1(g0 + (la_w_block_x * 2048 + la_thread * 16 + 1024));",
        "la_prefetch_l1(g0 + (la_w_block_x * 2048 + la_thread * 16 + 1040));",
    )
    result = validate_access(access, source, rlimit=RLIMIT)
    assert result.holds is False and result.counterexample["claim"] == "text"
    assert "no line of the source uses g0 at the proved address" in result.counterexample["reason"]

"""The reference interpreter: literal results of each instruction, and every error it raises."""

from __future__ import annotations

import numpy as np
import pytest

from ir import dtypes
from ir.builder import ProgramBuilder
from ir.errors import InterpreterError, VerificationError
from ir.interpreter import run_reference
from layout_algebra.fragments import fragment
from layout_algebra.global_layout import GlobalLayout
from layout_algebra.register import local, register_layout, replicate, spatial
from layout_algebra.shared import shared_row_major

F16, F32 = dtypes.f16, dtypes.f32


def one_array_program(dtype, shape, strides, body, threads=4, name="x"):
    """A program of one array parameter `x` viewed as `shape`/`strides`; body(b, view)."""
    with ProgramBuilder("test", threads) as b:
        x = b.array_param(name, dtype)
        body(b, b.global_view(x, dtype, GlobalLayout(shape, strides)))
    return b.program()


# ------------------------------------------------------------------------------ global memory


def test_masked_load_reads_zero_and_masked_store_skips():
    def body(b, view):
        tile = b.load_global(view, [1, 2], spatial(2, 2).local(1, 2))  # rows 1-2, cols 2-5
        b.store_global(view, b.add(tile, 100), [0, 0])

    # A (3, 4) view of rows padded to 6: columns 4, 5 of each row are never touched.
    program = one_array_program(dtypes.i8, (3, 4), (6, 1), body)
    x = np.arange(18, dtype=np.int8)
    run_reference(program, x)
    expected = np.arange(18).reshape(3, 6)
    expected[0, 0:2] = [108, 109]  # x[1, 2], x[1, 3] + 100
    expected[0, 2:4] = [100, 100]  # x[1, 4], x[1, 5] are outside the view: read as 0
    expected[1, 0:2] = [114, 115]
    expected[1, 2:4] = [100, 100]
    np.testing.assert_array_equal(x.reshape(3, 6), expected)


def test_store_entirely_outside_the_view_changes_nothing():
    def body(b, view):
        b.store_global(view, b.add(b.load_global(view, [0, 0], spatial(2, 2)), 1), [3, 0])

    program = one_array_program(dtypes.i8, (3, 4), (4, 1), body)
    x = np.arange(12, dtype=np.int8)
    run_reference(program, x)
    np.testing.assert_array_equal(x, np.arange(12))


def test_sub_byte_elements_of_two_threads_share_a_byte():
    def body(b, view):
        b.store_global(view, b.add(b.load_global(view, [0], spatial(4)), 1), [0])

    program = one_array_program(dtypes.u4, (4,), (1,), body)
    x = np.array([0x21, 0x43], dtype=np.uint8)  # u4 elements 1, 2, 3, 4
    run_reference(program, x)
    np.testing.assert_array_equal(x, [0x32, 0x54])


def test_three_bit_elements_straddling_bytes():
    def body(b, view):
        b.store_global(view, b.load_global(view, [1], spatial(4).local(2)), [0])

    program = one_array_program(dtypes.u3, (9,), (1,), body)
    x = dtypes.pack(np.arange(9) % 8, dtypes.u3)
    run_reference(program, x)
    np.testing.assert_array_equal(dtypes.unpack(x, dtypes.u3, 9), [1, 2, 3, 4, 5, 6, 7, 0, 0])


def test_element_past_the_end_of_the_argument():
    program = one_array_program(
        F16, (8,), (1,), lambda b, v: b.load_global(v, [0], spatial(4).local(2))
    )
    with pytest.raises(InterpreterError, match=r"element 7 of g0 \(f16\) lies past the end of "):
        run_reference(program, np.zeros(7, dtype=np.float16))


def test_two_threads_storing_different_values_to_one_element():
    def body(b, view):
        tile = b.load_global(view, [0], spatial(4))
        collapsed = GlobalLayout((4,), (0,))  # stride 0: the four elements are one
        b.store_global(b.global_view(view.param, dtypes.u8, collapsed), tile, [0])

    program = one_array_program(dtypes.u8, (4,), (1,), body)
    with pytest.raises(InterpreterError, match=r"two threads store different values to one elem"):
        run_reference(program, np.array([7, 8, 9, 10], dtype=np.uint8))


def test_replicated_stores_of_equal_values_are_fine():
    def body(b, view):
        b.store_global(view, b.load_global(view, [0], spatial(2) * replicate(2)), [0])

    x = np.array([3, 4], dtype=np.uint8)
    run_reference(one_array_program(dtypes.u8, (2,), (1,), body), x)
    np.testing.assert_array_equal(x, [3, 4])


def test_two_blocks_storing_different_values_to_one_element():
    def body(b, view):
        b.store_global(view, b.register_tensor(dtypes.u8, spatial(4), 1), [0])

    with ProgramBuilder("blocks", 4) as b:
        out = b.array_param("out", dtypes.u8)
        view = b.global_view(out, dtypes.u8, GlobalLayout((4,), (1,)))
        b.store_global(view, b.register_tensor(dtypes.u8, spatial(4), 1), [0])
        value = b.register_tensor(dtypes.u8, spatial(4), 2)
        with b.if_(b.block_x > 0):
            b.store_global(view, value, [0])
    with pytest.raises(InterpreterError, match="two blocks store different values to one element"):
        run_reference(b.program(), np.zeros(4, np.uint8), grid=2)
    run_reference(b.program(), np.zeros(4, np.uint8), grid=1)


# ------------------------------------------------------------------------------- computation


def test_register_tensor_init_rounds_to_the_dtype():
    def body(b, view):
        b.store_global(view, b.register_tensor(dtypes.f4e2m1, spatial(4), 5.0), [0])

    x = np.zeros(2, dtype=np.uint8)
    run_reference(one_array_program(dtypes.f4e2m1, (4,), (1,), body), x)
    np.testing.assert_array_equal(dtypes.unpack(x, dtypes.f4e2m1, 4), [6, 6, 6, 6])  # 4.0


def test_view_bytes_as_nibbles_and_f16_as_bytes():
    with ProgramBuilder("views", 2) as b:
        x = b.array_param("x", dtypes.u8)
        y = b.array_param("y", dtypes.u8)
        bytes_view = b.global_view(x, dtypes.u8, GlobalLayout((4,), (1,)))
        nibbles = b.view(
            b.load_global(bytes_view, [0], spatial(2).local(2)), dtypes.u4, spatial(2).local(4)
        )
        halves = b.view(b.cast(nibbles, F16), dtypes.u8, spatial(2).local(8))
        b.store_global(b.global_view(y, dtypes.u8, GlobalLayout((16,), (1,))), halves, [0])
    x = np.array([0x21, 0x43, 0x65, 0x87], dtype=np.uint8)
    y = np.zeros(16, dtype=np.uint8)
    run_reference(b.program(), x, y)
    expected = np.array([1, 2, 3, 4, 5, 6, 7, 8], dtype=np.float16).view(np.uint8)
    np.testing.assert_array_equal(y, expected)


def test_view_that_makes_replicas_disagree():
    with ProgramBuilder("replicas", 2) as b:
        x = b.array_param("x", dtypes.u8)
        tile = b.load_global(b.global_view(x, dtypes.u8, GlobalLayout((2,), (1,))), [0], spatial(2))
        b.view(tile, dtypes.u8, replicate(2).local(1))
    with pytest.raises(
        InterpreterError,
        match=r"replicas disagree: thread 1 holds 2 for element \(0,\) of r1, its first owner",
    ):
        run_reference(b.program(), np.array([1, 2], dtype=np.uint8))


B = 1e8  # exact in f32, whose spacing there is 8: B + 1 and B + 2 round to B, -B + 2 to -B


def reduced_sum(layout, dim, x):
    """x (f32, row-major of layout's shape) loaded with `layout`, summed over `dim` (keepdim)."""
    x = np.array(x, dtype=np.float32)
    out = np.zeros(x.sum(axis=dim, keepdims=True).shape, dtype=np.float32)
    row_major = tuple(int(np.prod(x.shape[k + 1 :])) for k in range(x.ndim))
    with ProgramBuilder("sum_order", layout.num_threads) as b:
        src = b.array_param("x", F32)
        dst = b.array_param("out", F32)
        tile = b.load_global(
            b.global_view(src, F32, GlobalLayout(x.shape, row_major)), [0] * x.ndim, layout
        )
        total = b.reduce(tile, dim, "sum", keepdim=True)
        out_strides = tuple(int(np.prod(out.shape[k + 1 :])) for k in range(out.ndim))
        b.store_global(
            b.global_view(dst, F32, GlobalLayout(out.shape, out_strides)), total, [0] * x.ndim
        )
    run_reference(b.program(), x.ravel(), out.ravel())
    return out.ravel().tolist()


@pytest.mark.parametrize(
    ("layout", "dim", "x", "expected"),
    [
        # One thread, registers in increasing local index: (x0 + x1) + x2 = (1 + B) - B = 0;
        # decreasing order would give (-B + B) + 1 = 1.
        (local(3), 0, [1, B, -B], [0]),
        # Local modes listed transposed: local index i = 2 * (x % 2) + x // 2, so the order is
        # x0, x2, x1, x3: ((B - B) + 1) + 1 = 2; element order would give ((B + 1) - B) + 1 = 1.
        (register_layout((4,), (2, 2), (), (1, 0)), 0, [B, 1, -B, 1], [2]),
        # Registers first, then threads: (x0 + x1) + (x2 + x3) = (B + 1) + (-B + 1) = B - B = 0;
        # threads first would give (x0 + x2) + (x1 + x3) = 0 + 2 = 2.
        (spatial(2).local(2), 0, [B, 1, -B, 1], [0]),
        # Thread t holds x[t] and x[t + 2]: (x0 + x2) + (x1 + x3) = (B - B) + (1 + 1) = 2.
        (local(2).spatial(2), 0, [B, 1, -B, 1], [2]),
        # One mode of 4 threads in digit order: ((2^24 + 1) + 1) + 1 = 2^24 (each +1 is a tie to
        # even); reversed, 3 + 2^24 would round to 2^24 + 4, pairwise 2^24 + 2.
        (spatial(4), 0, [2.0**24, 1, 1, 1], [2.0**24]),
        # Two reduced modes with a replication between: t = 4 * (x // 2) + 2r + x % 2. The least
        # significant mode first: (x0 + x1) + (x2 + x3) = (B + 1) + (-B + 1) = 0; the most
        # significant first would give (x0 + x2) + (x1 + x3) = 2.
        (spatial(2).replicate(2).spatial(2), 0, [B, 1, -B, 1], [0]),
        # Thread modes listed transposed: t = 2 * (x % 2) + x // 2, so the least significant
        # thread digit is x // 2: (x0 + x2) + (x1 + x3) = (B - B) + (1 + 1) = 2.
        (register_layout((4,), (2, 2), (1, 0), ()), 0, [B, 1, -B, 1], [2]),
        # spatial(2, 2) * spatial(2, 1): t = 4 * (r // 2) + 2c + r % 2 for element (r, c); per
        # column, (x[0] + x[1]) + (x[2] + x[3]): column 0 (B + 1) + (-B + 1) = 0, column 1
        # (1 + 1) + (B - B) = 2 (the most significant mode first: 2 and 0).
        (spatial(2, 2) * spatial(2, 1), 0, [[B, 1], [1, 1], [-B, B], [1, -B]], [0, 2]),
        # Dimension 1 of local(2, 3), each row in local order: row 0 (1 + B) - B = 0, row 1
        # (B - B) + 1 = 1; reversed, the rows would give 1 and 0.
        (local(2, 3), 1, [[1, B, -B], [B, -B, 1]], [0, 1]),
    ],
)
def test_float_sum_follows_the_documented_order(layout, dim, x, expected):
    """`Reduce`'s order: own registers in local-index order, then each reduced spatial mode from
    the least significant, each mode's partials in digit order, in f32 (ir.instructions)."""
    assert reduced_sum(layout, dim, x) == expected


def test_f16_sum_accumulates_in_f32_and_rounds_once():
    with ProgramBuilder("sum16", 4) as b:
        x = b.array_param("x", F16)
        out = b.array_param("out", F16)
        tile = b.load_global(
            b.global_view(x, F16, GlobalLayout((4,), (1,))), [0], local(4).replicate(4)
        )
        total = b.reduce(tile, 0, "sum", keepdim=True)
        b.store_global(b.global_view(out, F16, GlobalLayout((1,), (1,))), total, [0])
    x = np.array([2048, 1, 1, 0], dtype=np.float16)  # f16 ulp at 2048 is 2
    out = np.zeros(1, dtype=np.float16)
    run_reference(b.program(), x, out)
    assert out[0] == 2050  # f32 sum 2050 is exact in f16; f16 steps would give 2048


def test_dot_accumulates_in_k_order_in_f32():
    with ProgramBuilder("dot", 1) as b:
        a = b.array_param("a", F16)
        w = b.array_param("w", F16)
        c = b.array_param("c", F32)
        a_tile = b.load_global(
            b.global_view(a, F16, GlobalLayout((1, 3), (3, 1))), [0, 0], local(1, 3)
        )
        w_tile = b.load_global(
            b.global_view(w, F16, GlobalLayout((3, 1), (1, 1))), [0, 0], local(3, 1)
        )
        c_view = b.global_view(c, F32, GlobalLayout((1, 1), (1, 1)))
        c_tile = b.load_global(c_view, [0, 0], local(1, 1))
        b.store_global(c_view, b.dot(a_tile, w_tile, c_tile), [0, 0])
    a = np.array([1, 1, 4096], dtype=np.float16)
    w = np.array([1, 1, 4096], dtype=np.float16)
    c = np.array([2.0**24], dtype=np.float32)
    run_reference(b.program(), a, w, c)
    assert c[0] == 2.0**24 + 2.0**24  # 2^24 + 1 + 1 stays 2^24, then + 4096^2 is exact


def dot_program(threads, a_layout, b_layout, c_layout, dtype=F16):
    """``c = a @ b + c`` on one tile: a (M, K), b (K, N) of `dtype`, c (M, N) f32, row-major."""
    (m, k), n = a_layout.shape, b_layout.shape[1]
    with ProgramBuilder("dot", threads) as b:
        a = b.array_param("a", dtype)
        w = b.array_param("w", dtype)
        c = b.array_param("c", F32)
        a_tile = b.load_global(
            b.global_view(a, dtype, GlobalLayout((m, k), (k, 1))), [0, 0], a_layout
        )
        w_tile = b.load_global(
            b.global_view(w, dtype, GlobalLayout((k, n), (n, 1))), [0, 0], b_layout
        )
        c_view = b.global_view(c, F32, GlobalLayout((m, n), (n, 1)))
        c_tile = b.load_global(c_view, [0, 0], c_layout)
        b.store_global(c_view, b.dot(a_tile, w_tile, c_tile), [0, 0])
    return b.program()


def sequential_dot(a, w, c):
    """acc = c; for k in order: acc = f32(acc + f32(a[:, k]) * f32(w[k, :])), in NumPy."""
    accumulator = c.astype(np.float32)
    for k in range(a.shape[1]):
        accumulator = accumulator + a[:, k : k + 1].astype(np.float32) * w[k].astype(np.float32)
    return accumulator


def test_dot_gathers_operands_across_the_warp():
    # Every thread holds one element of each of a, b, c (spatial(2, 2)): c[m, n] reads a[m, :]
    # and b[:, n] from the other threads of its warp.
    layout = spatial(2, 2)
    a = np.array([1, 2, 3, 4], dtype=np.float16)
    w = np.array([5, 6, 7, 8], dtype=np.float16)
    c = np.array([0.5, 0.25, -1, 2], dtype=np.float32)
    run_reference(dot_program(4, layout, layout, layout), a, w, c)
    np.testing.assert_array_equal(c, [19.5, 22.25, 42, 52])  # [[19, 22], [43, 50]] + c


def test_dot_of_two_warps_gathers_within_each_warp():
    # 64 threads: warp w holds rows 4w .. 4w + 3 of c and of a (each a element in 2 threads),
    # and all of b; each thread holds one element of each.
    a_layout = spatial(2, 1) * spatial(4, 4).replicate(2)
    b_layout = replicate(2) * spatial(4, 8)
    c_layout = spatial(2, 1) * spatial(4, 8)
    rng = np.random.default_rng(8)
    a = rng.standard_normal((8, 4)).astype(np.float16)
    w = rng.standard_normal((4, 8)).astype(np.float16)
    c = rng.standard_normal((8, 8)).astype(np.float32)
    expected = sequential_dot(a, w, c)
    run_reference(dot_program(64, a_layout, b_layout, c_layout), a, w, c)
    np.testing.assert_array_equal(c.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("dtype", [F16, dtypes.bf16], ids=str)
def test_dot_on_mma_fragments_equals_the_sequential_formula(dtype):
    # One warp, one m16n8k16 tile in the PTX fragment layouts. Magnitudes spread over 2^-8 ..
    # 2^8 so that the order of the f32 additions shows in the low bits.
    a_layout, b_layout, c_layout = (fragment(f"mma.m16n8k16.{x}").layout for x in "abc")
    rng = np.random.default_rng(9)

    def values(shape):
        spread = 2.0 ** rng.integers(-8, 9, shape)
        return (rng.uniform(-1, 1, shape) * spread).astype(np.float32)

    a, w = values((16, 16)), values((16, 8))
    a_codes = dtype.encode(a.ravel()).astype(np.uint16)
    w_codes = dtype.encode(w.ravel()).astype(np.uint16)
    a_exact = dtype.decode(a_codes).reshape(16, 16)
    w_exact = dtype.decode(w_codes).reshape(16, 8)
    c = values((16, 8))
    expected = sequential_dot(a_exact, w_exact, c)
    program = dot_program(32, a_layout, b_layout, c_layout, dtype)
    run_reference(program, a_codes, w_codes, c)
    np.testing.assert_array_equal(c.view(np.uint32), expected.view(np.uint32))


def test_integer_division_by_zero_in_a_program():
    def body(b, view):
        tile = b.load_global(view, [0], spatial(4))
        b.div(tile, tile)

    with pytest.raises(InterpreterError, match=r"block \(0, 0, 0\): integer div by zero"):
        run_reference(one_array_program(dtypes.i8, (4,), (1,), body), np.zeros(4, np.int8))


def test_loops_and_ifs():
    with ProgramBuilder("loop", 4) as b:
        n = b.int_param("n")
        x = b.array_param("x", dtypes.i32)
        view = b.global_view(x, dtypes.i32, GlobalLayout((4,), (1,)))
        acc = b.register_tensor(dtypes.i32, spatial(4), 0)
        with b.for_range(1, n, 2) as k:
            with b.if_(k.ne(3)):
                b.assign(acc, b.add(acc, b.load_global(view, [0], spatial(4))))
        b.store_global(view, acc, [0])
    x = np.array([1, 2, 3, 4], dtype=np.int32)
    run_reference(b.program(), x=x, n=8)  # k = 1, 5, 7 add; k = 3 skips
    np.testing.assert_array_equal(x, [3, 6, 9, 12])


# ------------------------------------------------------------------------------ shared memory


def shared_program(steps, threads=4, layout=None):
    """x (8 x f16) -> shared (8,) -> registers -> x, with `steps` choosing the instructions."""
    layout = layout or spatial(4).local(2)
    with ProgramBuilder("shared", threads) as b:
        x = b.array_param("x", F16)
        view = b.global_view(x, F16, GlobalLayout((8,), (1,)))
        buffer = b.shared_tensor(F16, shared_row_major(8))
        for step in steps:
            if step == "store":
                b.store_shared(buffer, b.load_global(view, [0], layout))
            elif step == "copy":
                b.copy_async(buffer, view, [0])
            elif step == "copy_layout":
                b.copy_async(buffer, view, [0], layout=layout)
            elif step == "commit":
                b.copy_async_commit()
            elif step.startswith("wait"):
                b.copy_async_wait(int(step[4:]))
            elif step == "sync":
                b.sync()
            elif step == "load":
                b.store_global(view, b.load_shared(buffer, local(8).replicate(threads)), [0])
            elif step == "load_own":
                b.store_global(view, b.load_shared(buffer, layout), [0])
    return b.program()


def run_shared(steps, **options):
    x = np.arange(8, dtype=np.float16)
    run_reference(shared_program(steps, **options), x)
    return x


@pytest.mark.parametrize(
    "steps",
    [
        ["store", "sync", "load"],
        ["store", "load_own"],  # each thread reads back what it wrote: no barrier needed
        ["copy", "commit", "wait0", "sync", "load"],
        ["copy_layout", "commit", "wait0", "load_own"],
        # a sync before the wait orders nothing, but each thread may read its own copied elements
        ["copy_layout", "commit", "sync", "wait0", "load_own"],
        ["copy", "commit", "wait0", "sync", "copy_layout", "commit", "wait0", "sync", "load"],
    ],
)
def test_correct_shared_memory_programs(steps):
    np.testing.assert_array_equal(run_shared(steps), np.arange(8))


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        (["copy", "commit", "sync", "load"], "shared memory read before its copy was waited for"),
        (["copy", "wait0", "sync", "load"], r"copy group 0 \(0 committed"),  # not committed
        (
            ["copy", "commit", "wait0", "sync", "copy_layout", "commit", "wait1", "sync", "load"],
            "belongs to copy group 1",
        ),
        (["store", "load"], "shared memory read without a sync: several threads read"),
        (["copy", "commit", "wait0", "load_own"], "written by several threads since the last"),
        # the wait makes the copy visible to the copying threads only; the sync before it does
        # not publish it to the others
        (["copy", "commit", "sync", "wait0", "load"], "read without a sync: .* written by several"),
        (["copy_layout", "commit", "sync", "wait0", "load"], "read without a sync: .* by thread 0"),
        (["store", "sync", "load", "store"], "shared memory overwritten without a sync"),
        (["copy", "copy"], "shared memory written while a copy into it is pending"),
    ],
)
def test_shared_memory_hazards(steps, message):
    with pytest.raises(InterpreterError, match=message):
        run_shared(steps)


def test_out_of_range_shared_access():
    with ProgramBuilder("range", 4) as b:
        offset = b.int_param("offset")
        buffer = b.shared_tensor(F16, shared_row_major(2, 4))
        b.store_shared(buffer, b.register_tensor(F16, spatial(4)), [offset, 0])
    program = b.program()
    run_reference(program, 1)
    with pytest.raises(InterpreterError, match=r"out-of-range shared access: coordinate \(2, 0\)"):
        run_reference(program, 2)


# ---------------------------------------------------------------------------------- arguments


def arguments_program():
    with ProgramBuilder("args", 1) as b:
        b.int_param("n", 1, 10)
        x = b.array_param("x", dtypes.u8)
        b.store_global(
            b.global_view(x, dtypes.u8, GlobalLayout((1,), (1,))),
            b.register_tensor(dtypes.u8, local(1), 9),
            [0],
        )
    return b.program()


def test_arguments_by_position_or_name_and_the_result():
    x = np.zeros(1, dtype=np.uint8)
    result = run_reference(arguments_program(), x=x, n=3)
    assert result[0] is x and x[0] == 9
    y = np.zeros(1, dtype=np.uint8)
    assert run_reference(arguments_program(), 3, y)[0][0] == 9


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((3,), {}, "missing arguments x"),
        ((3, np.zeros(1, np.uint8), 5), {}, "takes 2 arguments"),
        ((3, np.zeros(1, np.uint8)), {"y": 1}, "has no parameter 'y'"),
        ((3, np.zeros(1, np.uint8)), {"n": 1}, "given both by position and by name"),
        ((11, np.zeros(1, np.uint8)), {}, r"n=11 is outside its bounds \[1, 10\]"),
        ((2.0, np.zeros(1, np.uint8)), {}, "'n' must be an int, got float"),
        ((3, [0]), {}, "'x' must be a NumPy array, got list"),
        ((3, np.zeros((2, 2), np.uint8)[:, 0]), {}, "C-contiguous, writeable"),
    ],
)
def test_argument_errors(args, kwargs, message):
    with pytest.raises(InterpreterError, match=message):
        run_reference(arguments_program(), *args, **kwargs)


def test_argument_not_a_declared_multiple_is_refused():
    with ProgramBuilder("aligned", 4) as b:
        b.int_param("k", multiple_of=8)
    program = b.program()
    run_reference(program, 16)
    with pytest.raises(InterpreterError, match=r"argument k=12 is not a multiple of 8"):
        run_reference(program, 12)


@pytest.mark.parametrize(
    ("grid", "problem"),
    [
        (0, "dimension 0 is 0"),
        ((1, 1, 1, 1), "has 4 dimensions"),
        ((2, -1), "dimension 1 is -1"),
        ("2", "dimension 0 is not an integer"),
        ((True,), "dimension 0 is a bool"),
        ((1, 65536), "dimension 1 is 65536"),
        ((1, 1, 65536), "dimension 2 is 65536"),
        (2**31, "dimension 0 is 2147483648"),
    ],
)
def test_grid_errors(grid, problem):
    """The interpreter refuses every grid the GPU launch refuses (`ir.arguments.check_grid`)."""
    with pytest.raises(InterpreterError, match=rf"{problem}; expected a positive int or a tuple"):
        run_reference(arguments_program(), 3, np.zeros(1, np.uint8), grid=grid)


def test_run_reference_verifies_first():
    with ProgramBuilder("unverified", 4, check=False) as b:
        b.register_tensor(F16, spatial(2))
    with pytest.raises(VerificationError, match="thread count mismatch"):
        run_reference(b.program())


def test_scalar_division_by_zero():
    with ProgramBuilder("scalar", 1) as b:
        n = b.int_param("n")
        x = b.array_param("x", dtypes.u8)
        b.load_global(b.global_view(x, dtypes.u8, GlobalLayout((4,), (1,))), [4 // n], local(1))
    with pytest.raises(InterpreterError, match="division by zero in scalar 4 // n"):
        run_reference(b.program(), 0, np.zeros(4, np.uint8))

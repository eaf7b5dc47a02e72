"""`backend.quantized_linear` on the CPU: quantization, packing, dequantization, forward, saving.

- Exact tables: `quantize` of small hand-made weights (i4 symmetric, u4 with a zero point, f4e2m1,
  an i8 scale in bf16, all-zero groups), and `dequantize` of known codes, scales and zero points.
- Properties (hypothesis): codes and scales in range; for integer types |dequantized - w| <= scale
  / 2 plus the activation dtype's rounding; `unpack_weights` of the packed buffer gives the codes
  back; a state dict (through `torch.save`) rebuilds a module with identical outputs; leading
  batch shapes are rows of one product.
- Differential: `dequantize` against a NumPy reference written from the contract's codecs for
  every weight type, with and without zero points, in f16 and bf16; `forward` against ``x @
  dequantize() + bias`` and an f64 product; `forward` against the decode kernel's program
  (`register_dequant_matmul`) run in the reference interpreter on the module's own buffers.
- Errors: bad weight types, group sizes, K not a multiple of the group size, activation dtypes,
  shapes, codes and zero points, and state dicts of another shape, type or version.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import dtypes, run_reference
from ir.dtypes import DataType
from ir.errors import VerificationError

torch = pytest.importorskip("torch")

from backend.errors import LaunchError  # noqa: E402
from backend.quantized_linear import (  # noqa: E402
    COLUMN_TILE,
    EXTRA_STATE_KEY,
    QuantizedLinear,
    quantize,
    unpack_codes,
    unpack_scales,
)
from ir.examples.packed_weights import (  # noqa: E402
    FORMAT_VERSION,
    WeightFormat,
    pack_scales,
    scale_permutation,
    unpack_weights,
)
from ir.examples.register_dequant_matmul import (  # noqa: E402
    DequantConfig,
    register_dequant_matmul,
)

ACT = {torch.float16: dtypes.f16, torch.bfloat16: dtypes.bf16}
INTEGER_TYPES = [dtypes.from_name(f"{s}{b}") for s in "ui" for b in range(1, 9)]
FLOAT_TYPES = [dtypes.f3e1m1, dtypes.f4e2m1, dtypes.f6e3m2, dtypes.f6e2m3, dtypes.f8e4m3]
ALL_TYPES = INTEGER_TYPES + FLOAT_TYPES + [dtypes.f8e5m2]
QUANTIZABLE = [t for t in INTEGER_TYPES + FLOAT_TYPES if t != dtypes.i1]


def act_round(values: np.ndarray, act: DataType) -> np.ndarray:
    """`values` (f32) rounded to the activation type by the contract's codec, as f32."""
    return act.decode(act.encode(np.asarray(values, dtype=np.float32))).astype(np.float32)


def reference_dequantize(
    codes: np.ndarray,
    scales: np.ndarray,
    zeros: np.ndarray | None,
    weight_dtype: DataType,
    group_size: int,
    act: DataType,
) -> np.ndarray:
    """The module docstring's formula in NumPy: act(f32(W) * f32(S)), or with zero points
    act((act(W) - act(Z)) * S), every operation in f32 and rounded by the contract's codec."""
    values = weight_dtype.decode(codes & ((1 << weight_dtype.nbits) - 1)).astype(np.float32)
    per_row_scales = act_round(np.repeat(scales, group_size, axis=0), act)
    with np.errstate(invalid="ignore"):
        if zeros is not None:
            per_row_zeros = act_round(np.repeat(zeros, group_size, axis=0), act)
            values = act_round(act_round(values, act) - per_row_zeros, act)
        return act_round(values * per_row_scales, act)


def natural_scales(packed: torch.Tensor) -> np.ndarray:
    """The (G, N) scales of `pack_scales`' output: packed column j of a unit holds natural
    column `scale_permutation()[j]`."""
    groups, n = packed.shape
    natural = np.empty((groups, n // 64, 64), dtype=np.float32)
    natural[..., scale_permutation()] = as_numpy(packed).reshape(groups, n // 64, 64)
    return natural.reshape(groups, n)


def as_numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().float().numpy()


def random_weight(rng: np.random.Generator, k: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """An (n, k) weight of order 0.1 in `dtype`, with an offset per row (so unsigned ranges are
    lopsided) and some all-zero groups of 32."""
    weight = rng.standard_normal((n, k)) * 0.1 + rng.uniform(-0.05, 0.05, (n, 1))
    silent = rng.random((n, k // 32)) < 0.1
    weight = np.where(np.repeat(silent, 32, axis=1), 0.0, weight)
    return torch.from_numpy(weight.astype(np.float32)).to(dtype)


def unit_codes(rows: list[list[int]], k: int = 32) -> np.ndarray:
    """A (k, len(rows[0])) code array whose first rows are `rows`, the rest 0."""
    codes = np.zeros((k, len(rows[0])), dtype=np.int64)
    codes[: len(rows)] = rows
    return codes


def column_weights(columns: list[list[float]], k: int = 32) -> np.ndarray:
    """A (k, len(columns)) f32 weight whose column j starts with `columns[j]`, the rest 0."""
    weight = np.zeros((k, len(columns)), dtype=np.float32)
    for j, values in enumerate(columns):
        weight[: len(values), j] = values
    return weight


# ------------------------------------------------------------------------------ exact tables


def test_quantize_i4_symmetric_table() -> None:
    weight = column_weights([[7, -7, 3.4, -2.5, 2.5, 1.5], [0.7, -0.35, 0.1], []])
    codes, scales, zeros = quantize(weight, dtypes.i4, 32)
    assert zeros is None
    # Column 0: max |w| = 7 = qmax, scale 1; -2.5 and 2.5 round half to even; -7 is 0b1001.
    # Column 1: 0.7 / 7 rounds up to the f16 0.10003662109375 (f16(0.1) = 0.0999755859375 is
    # below it). Column 2: an all-zero group gets the smallest normal f16, 2^-14.
    assert scales.dtype == torch.float16
    assert scales.tolist() == [[1.0, 0.10003662109375, 2.0**-14]]
    assert codes[:6, 0].tolist() == [7, 9, 3, 14, 2, 2]
    assert codes[:3, 1].tolist() == [7, 13, 1]
    assert not codes[6:, 0].any() and not codes[3:, 1].any() and not codes[:, 2].any()


def test_quantize_u4_zero_point_table() -> None:
    weight = column_weights([[-1.5, 6, 0.25, 0.75, 1.0], [-1, 2, 0.5], [], [1.0, 2.0]])
    codes, scales, zeros = quantize(weight, dtypes.u4, 32)
    # Column 0: range [-1.5, 6] / 15 = 0.5 exactly, zero round(1.5 / 0.5) = 3; 0.25 / 0.5 = 0.5
    # rounds to 0 (half to even), 0.75 / 0.5 = 1.5 to 2. Column 1: 3 / 15 rounds up to the f16
    # 0.2000732421875 and the zero point is round(4.998) = 5. Column 2: all zero. Column 3: all
    # positive, the range widened to [0, 2]: 2 / 15 = 1092.27 f16 ulps of 2^-13, so the scale is
    # 1093 * 2^-13, and the zero point 0.
    assert scales.tolist() == [[0.5, 0.2000732421875, 2.0**-14, 1093 * 2.0**-13]]
    assert zeros.dtype == torch.float16
    assert zeros.tolist() == [[3.0, 5.0, 0.0, 0.0]]
    assert codes[:5, 0].tolist() == [0, 15, 3, 5, 5]
    assert codes[:3, 1].tolist() == [0, 15, 7]
    assert codes[5:, 0].tolist() == [3] * 27 and codes[3:, 1].tolist() == [5] * 29
    assert codes[:2, 3].tolist() == [7, 15]
    assert not codes[:, 2].any()


def test_quantize_f4e2m1_table() -> None:
    weight = column_weights([[3, -0.75, 0.3, 1.25, 0.125, -3]])
    codes, scales, zeros = quantize(weight, dtypes.f4e2m1, 32)
    # max |w| = 3 over f4e2m1's max 6: scale 0.5. w / 0.5 = 6 (0b0111), -1.5 (0b1011), 0.6 ->
    # 0.5 (0b0001), 2.5 -> 2 (tie between codes 4 and 5: the even one), 0.25 -> +0 (tie), -6.
    assert zeros is None and scales.tolist() == [[0.5]]
    assert codes[:6, 0].tolist() == [0b0111, 0b1011, 0b0001, 0b0100, 0b0000, 0b1111]


def test_quantize_i8_bf16_scale_rounds_up() -> None:
    weight = column_weights([[1.0, -1.0, 0.5]])
    codes, scales, _ = quantize(weight, dtypes.i8, 32, torch.bfloat16)
    # 1 / 127 = 0.0078740...; the bf16 neighbours are 0.00787353515625 and 0.0079345703125.
    assert scales.dtype == torch.bfloat16 and scales.tolist() == [[0.0079345703125]]
    assert codes[:3, 0].tolist() == [126, 256 - 126, 63]


def test_dequantize_i4_table() -> None:
    codes = unit_codes([[-8, 7], [1, -1]])
    module = QuantizedLinear.from_quantized(codes, [[0.5, 0.25]], dtypes.i4, 32)
    dequantized = module.dequantize()
    assert dequantized.shape == (32, 2) and dequantized.dtype == torch.float16
    assert dequantized[:2].tolist() == [[-4.0, 1.75], [0.5, -0.25]]
    assert not dequantized[2:].any()


def test_dequantize_u4_zero_point_table() -> None:
    codes = unit_codes([[0, 15], [8, 9]])
    module = QuantizedLinear.from_quantized(
        codes, [[0.25, 2.0]], dtypes.u4, 32, zeros=[[8, 3]], bias=[1.0, -1.0]
    )
    dequantized = module.dequantize()
    # (W - Z) * S: (0 - 8) * 0.25, (15 - 3) * 2, (8 - 8) * 0.25, (9 - 3) * 2; code 0 below.
    assert dequantized[:3].tolist() == [[-2.0, 24.0], [0.0, 12.0], [-2.0, -6.0]]
    x = torch.zeros(1, 32, dtype=torch.float16)
    x[0, 1] = 1.0
    assert module(x).tolist() == [[1.0, 11.0]]


def test_dequantize_f4e2m1_table() -> None:
    codes = unit_codes([[0b0111, 0b1001], [0b0011, 0b1111]])
    module = QuantizedLinear.from_quantized(codes, [[0.5, 3.0]], dtypes.f4e2m1, 32)
    # Codes 6, -0.5, 1.5, -6 times the scales.
    assert module.dequantize()[:2].tolist() == [[3.0, -1.5], [0.75, -18.0]]


def test_out_features_are_padded_to_the_column_tile() -> None:
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 16, (64, 300))
    module = QuantizedLinear.from_quantized(
        codes, rng.uniform(1, 2, (2, 300)), dtypes.u4, 32, zeros=np.full((2, 300), 8)
    )
    assert COLUMN_TILE == 256 and module.padded_out_features == 512
    assert module.weight_format == WeightFormat("u4", 64, 512)
    natural_codes = unpack_weights(module.packed_weight.numpy(), module.weight_format)
    assert not natural_codes[:, 300:].any()
    assert (natural_scales(module.packed_scales)[:, 300:] == 1).all()
    assert not natural_scales(module.packed_zeros)[:, 300:].any()
    assert module.dequantize().shape == (64, 300)
    assert module(torch.ones(5, 64, dtype=torch.float16)).shape == (5, 300)
    assert module.decode_ops == {}  # the CPU never builds a decode kernel


@pytest.mark.parametrize("act", [torch.float16, torch.bfloat16], ids=str)
def test_decode_problem_fits_the_buffers(act: torch.dtype) -> None:
    from backend.decode_matmul import DecodeProblem, decode_search_space

    codes = np.zeros((256, 300), dtype=np.int64)
    module = QuantizedLinear.from_quantized(
        codes, np.ones((2, 300)), dtypes.u4, 128, zeros=np.zeros((2, 300))
    )
    problem = module.decode_problem(act)
    assert problem == DecodeProblem(
        dtypes.u4, 128, 256, 512, activation_dtype=ACT[act], zero_points=True
    )
    assert problem.packed_shape == tuple(module.packed_weight.shape)
    assert (problem.groups, problem.n) == tuple(module.packed_scales.shape)
    for m in (1, 16):
        assert decode_search_space(dtypes.u4, 256, 512, m, group_size=128)


def test_module_keeps_only_packed_buffers() -> None:
    linear = torch.nn.Linear(128, 64).half()
    module = QuantizedLinear.from_linear(linear, dtypes.u4, 64)
    assert [name for name, _ in module.named_buffers()] == [
        "packed_weight",
        "packed_scales",
        "packed_zeros",
        "bias",
    ]
    assert list(module.parameters()) == []
    assert module.packed_weight.dtype == torch.int32
    assert module.packed_weight.shape == (128 // 16, 256 // 64 * 32 * 4)
    assert torch.equal(module.bias, linear.bias.detach())


# ------------------------------------------------------------------------------ properties


@settings(max_examples=30, deadline=None)
@given(
    weight_dtype=st.sampled_from(QUANTIZABLE),
    act=st.sampled_from([torch.float16, torch.bfloat16]),
    groups=st.integers(1, 3),
    n=st.integers(1, 70),
    magnitude=st.sampled_from([0.0, 1e-6, 1.0, 300.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_codes_scales_and_zero_points_are_in_range(
    weight_dtype: DataType, act: torch.dtype, groups: int, n: int, magnitude: float, seed: int
) -> None:
    weight = random_weight(np.random.default_rng(seed), 32 * groups, n, act).float() * magnitude
    codes, scales, zeros = quantize(weight.t(), weight_dtype, 32, act)
    assert codes.shape == (32 * groups, n) and scales.shape == (groups, n)
    assert int(codes.min()) >= 0 and int(codes.max()) < 1 << weight_dtype.nbits
    assert np.isfinite(weight_dtype.decode(codes.numpy()).astype(np.float64)).all()
    assert scales.dtype == act and bool((scales > 0).all()) and bool(scales.isfinite().all())
    if weight_dtype.is_float or weight_dtype.is_signed:
        assert zeros is None
    else:
        assert zeros.dtype == act and bool((zeros == zeros.round()).all())
        assert 0 <= float(zeros.min()) and float(zeros.max()) <= (1 << weight_dtype.nbits) - 1


@settings(max_examples=30, deadline=None)
@given(
    weight_dtype=st.sampled_from([t for t in INTEGER_TYPES if t != dtypes.i1]),
    act=st.sampled_from([torch.float16, torch.bfloat16]),
    group_size=st.sampled_from([32, 64, 128]),
    n=st.integers(1, 70),
    seed=st.integers(0, 2**32 - 1),
)
def test_dequantized_integer_weights_are_within_half_a_scale(
    weight_dtype: DataType, act: torch.dtype, group_size: int, n: int, seed: int
) -> None:
    weight = random_weight(np.random.default_rng(seed), group_size, n, act)
    module = QuantizedLinear.from_weight(weight, weight_dtype, group_size)
    dequantized = as_numpy(module.dequantize())
    w = as_numpy(weight).T
    scale = np.repeat(natural_scales(module.packed_scales)[:, :n], group_size, axis=0)
    # Half a scale from rounding to a code, plus the rounding of (code - zero) * scale to act
    # (half an ulp: relative 2^-11 in f16, 2^-8 in bf16) and of the f32 quotient.
    precision = 11 if act == torch.float16 else 8
    bound = scale / 2 * (1 + 2.0**-20) + np.abs(dequantized) * 2.0**-precision
    assert (np.abs(dequantized - w) <= bound).all()


@settings(max_examples=25, deadline=None)
@given(
    weight_dtype=st.sampled_from(ALL_TYPES),
    groups=st.integers(1, 2),
    n=st.integers(1, 300),
    seed=st.integers(0, 2**32 - 1),
)
def test_unpacking_the_packed_weight_gives_the_codes(
    weight_dtype: DataType, groups: int, n: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 1 << weight_dtype.nbits, (32 * groups, n))
    module = QuantizedLinear.from_quantized(codes, np.ones((groups, n)), weight_dtype, 32)
    natural = unpack_weights(module.packed_weight.numpy(), module.weight_format)
    np.testing.assert_array_equal(natural[:, :n], codes)
    assert not natural[:, n:].any()
    torch_codes = unpack_codes(module.packed_weight, module.weight_format)
    np.testing.assert_array_equal(torch_codes.numpy(), natural)


@settings(max_examples=15, deadline=None)
@given(groups=st.integers(1, 4), units=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_unpack_scales_inverts_pack_scales(groups: int, units: int, seed: int) -> None:
    scales = np.random.default_rng(seed).standard_normal((groups, 64 * units))
    packed = pack_scales(torch.from_numpy(scales))
    assert torch.equal(unpack_scales(packed), torch.from_numpy(scales))
    np.testing.assert_array_equal(natural_scales(packed), scales.astype(np.float32))


@settings(max_examples=15, deadline=None)
@given(
    weight_dtype=st.sampled_from(QUANTIZABLE),
    act=st.sampled_from([torch.float16, torch.bfloat16]),
    bias=st.booleans(),
    n=st.integers(1, 300),
    seed=st.integers(0, 2**32 - 1),
)
def test_state_dict_round_trip_gives_identical_outputs(
    weight_dtype: DataType, act: torch.dtype, bias: bool, n: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    linear = torch.nn.Linear(64, n, bias=bias).to(act)
    with torch.no_grad():
        linear.weight.copy_(random_weight(rng, 64, n, act))
    module = QuantizedLinear.from_linear(linear, weight_dtype, 32)
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    fresh = QuantizedLinear(
        64, n, weight_dtype, 32, zero_points=module.zero_points, bias=bias, dtype=act
    )
    fresh.load_state_dict(state)
    rebuilt = QuantizedLinear.from_state_dict(state)
    x = torch.from_numpy(rng.standard_normal((3, 64)).astype(np.float32)).to(act)
    expected = module(x)
    assert torch.equal(fresh(x), expected) and torch.equal(rebuilt(x), expected)
    for name, saved in module.state_dict().items():
        if isinstance(saved, torch.Tensor):
            assert torch.equal(rebuilt.state_dict()[name], saved), name


@settings(max_examples=15, deadline=None)
@given(
    leading=st.lists(st.integers(1, 4), min_size=0, max_size=3),
    act=st.sampled_from([torch.float16, torch.bfloat16]),
    seed=st.integers(0, 2**32 - 1),
)
def test_leading_batch_shapes_are_rows_of_one_product(
    leading: list[int], act: torch.dtype, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    module = QuantizedLinear.from_weight(random_weight(rng, 64, 40, act), dtypes.i4, 32)
    x = torch.from_numpy(rng.standard_normal((*leading, 64)).astype(np.float32)).to(act)
    out = module(x)
    assert out.shape == (*leading, 40) and out.dtype == act
    rows = module(x.reshape(-1, 64))
    assert torch.equal(out.reshape(-1, 40), rows)


# ------------------------------------------------------------------------------ differential


@pytest.mark.parametrize("act", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("zero_points", [False, True], ids=["no-zeros", "zeros"])
@pytest.mark.parametrize("weight_dtype", ALL_TYPES, ids=str)
def test_dequantize_equals_the_numpy_reference(
    weight_dtype: DataType, zero_points: bool, act: torch.dtype
) -> None:
    rng = np.random.default_rng(weight_dtype.nbits * 7 + zero_points)
    k, n, group_size = 64, 70, 32
    codes = rng.integers(0, 1 << weight_dtype.nbits, (k, n))  # NaN and inf codes too
    scales = rng.uniform(-2, 2, (k // group_size, n)).astype(np.float32)
    zeros = None
    if zero_points:
        low, high = int(weight_dtype.min), int(weight_dtype.max)
        zeros = rng.integers(max(low, -8), min(high, 8) + 1, scales.shape).astype(np.float32)
    module = QuantizedLinear.from_quantized(
        codes, scales, weight_dtype, group_size, zeros=zeros, dtype=act
    )
    expected = reference_dequantize(codes, scales, zeros, weight_dtype, group_size, ACT[act])
    np.testing.assert_array_equal(as_numpy(module.dequantize()), expected)


def test_dequantize_in_the_other_activation_dtype_converts_the_scales() -> None:
    rng = np.random.default_rng(5)
    codes = rng.integers(0, 16, (64, 80))
    scales = rng.uniform(0.01, 0.02, (2, 80)).astype(np.float32)
    module = QuantizedLinear.from_quantized(codes, scales, dtypes.u4, 32, zeros=np.full((2, 80), 7))
    f16_scales = act_round(scales, dtypes.f16)
    expected = reference_dequantize(
        codes, f16_scales, np.full((2, 80), 7.0), dtypes.u4, 32, dtypes.bf16
    )
    np.testing.assert_array_equal(as_numpy(module.dequantize(torch.bfloat16)), expected)


@pytest.mark.parametrize("act", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("weight_dtype", [dtypes.i4, dtypes.u4, dtypes.f4e2m1, dtypes.u3], ids=str)
def test_forward_equals_x_at_dequantize_plus_bias(weight_dtype: DataType, act: torch.dtype) -> None:
    rng = np.random.default_rng(weight_dtype.nbits)
    linear = torch.nn.Linear(128, 100).to(act)
    module = QuantizedLinear.from_linear(linear, weight_dtype, 64)
    x = torch.from_numpy(rng.standard_normal((2, 5, 128)).astype(np.float32)).to(act)
    out = module(x)
    assert torch.equal(out, torch.matmul(x, module.dequantize()) + module.bias)
    exact = as_numpy(x).astype(np.float64) @ as_numpy(module.dequantize()).astype(np.float64)
    exact += as_numpy(linear.bias).astype(np.float64)
    error = np.abs(as_numpy(out) - exact).max() / np.abs(exact).max()
    assert error < 2e-2 if act == torch.bfloat16 else error < 2e-3


@pytest.mark.parametrize("act", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "weight_dtype", [dtypes.i4, dtypes.u4, dtypes.i8, dtypes.f4e2m1, dtypes.u3], ids=str
)
def test_forward_equals_the_decode_program_in_the_interpreter(
    weight_dtype: DataType, act: torch.dtype
) -> None:
    """The module's buffers run through `register_dequant_matmul` (what the decode kernel is
    compiled from) in the reference interpreter: the module's meaning is the kernel's."""
    rng = np.random.default_rng(11)
    k, n, m = 128, 200, 3
    weight = random_weight(rng, k, n, act)
    module = QuantizedLinear.from_weight(weight, weight_dtype, 64)
    x = torch.from_numpy(rng.standard_normal((m, k)).astype(np.float32)).to(act)
    config = DequantConfig(warps=1, units_k=4)
    program = register_dequant_matmul(
        weight_dtype, 64, config, activation_dtype=ACT[act], zero_points=module.zero_points
    )

    def codes(tensor: torch.Tensor) -> np.ndarray:
        return tensor.contiguous().view(torch.int16).numpy().view(np.uint16)

    padded = module.padded_out_features
    buffers = [codes(module.packed_scales)]
    if module.zero_points:
        buffers.append(codes(module.packed_zeros))
    out = np.zeros((m, padded), dtype=np.uint16)
    grid = config.grid(m, padded)
    run_reference(
        program, m, padded, k, codes(x), module.packed_weight.numpy(), *buffers, out, grid=grid
    )
    kernel = ACT[act].decode(out).astype(np.float64)[:, :n]
    ours = as_numpy(module(x)).astype(np.float64)
    assert np.abs(kernel - ours).max() <= 2e-3 * np.abs(ours).max()


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("weight_dtype", "shown"),
    [(dtypes.f16, "f16"), ("i4", "'i4'"), (dtypes.i32, "i32")],
    ids=str,
)
def test_bad_weight_dtype_is_refused(weight_dtype: object, shown: str) -> None:
    with pytest.raises(VerificationError, match=f"{shown} is not a weight type"):
        QuantizedLinear(128, 64, weight_dtype)
    with pytest.raises(VerificationError, match=f"{shown} is not a weight type"):
        QuantizedLinear.from_weight(torch.zeros(64, 128, dtype=torch.float16), weight_dtype)


@pytest.mark.parametrize("group_size", [16, 96, 256, True, 128.0])
def test_bad_group_size_is_refused(group_size: object) -> None:
    message = rf"group_size={group_size!r}; expected one of \(32, 64, 128\)"
    with pytest.raises(VerificationError, match=message):
        QuantizedLinear.from_weight(
            torch.zeros(64, 256, dtype=torch.float16), dtypes.i4, group_size
        )
    with pytest.raises(VerificationError, match=message):
        QuantizedLinear.from_quantized(
            np.zeros((256, 64), int), np.ones((2, 64)), dtypes.i4, group_size
        )


@pytest.mark.parametrize(("k", "group_size"), [(96, 64), (160, 128), (48, 32)])
def test_k_not_a_multiple_of_the_group_size_is_refused(k: int, group_size: int) -> None:
    message = f"in_features K={k} is not a multiple of group_size={group_size}"
    with pytest.raises(VerificationError, match=message):
        QuantizedLinear.from_linear(torch.nn.Linear(k, 64).half(), dtypes.i4, group_size)
    with pytest.raises(VerificationError, match=message):
        QuantizedLinear(k, 64, dtypes.i4, group_size)


def test_i1_quantization_is_refused() -> None:
    with pytest.raises(VerificationError, match="i1 holds only -1 and 0"):
        QuantizedLinear.from_weight(torch.ones(64, 32, dtype=torch.float16), dtypes.i1, 32)


def test_non_finite_weight_is_refused() -> None:
    weight = torch.zeros(64, 32, dtype=torch.float16)
    weight[3, 4] = float("inf")
    with pytest.raises(VerificationError, match="NaN or inf; expected finite values"):
        QuantizedLinear.from_weight(weight, dtypes.i4, 32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int8], ids=str)
def test_bad_module_dtype_is_refused(dtype: torch.dtype) -> None:
    message = rf"dtype {dtype}; expected torch.float16 or torch.bfloat16"
    with pytest.raises(VerificationError, match=message):
        QuantizedLinear(64, 64, dtypes.i4, 32, dtype=dtype)
    if dtype.is_floating_point:
        with pytest.raises(VerificationError, match=message):
            QuantizedLinear.from_linear(torch.nn.Linear(64, 64).to(dtype), dtypes.i4, 32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32], ids=str)
def test_wrong_activation_dtype_is_refused(dtype: torch.dtype) -> None:
    module = QuantizedLinear(64, 64, dtypes.i4, 32)
    message = rf"input of dtype {dtype}; expected torch.float16 or torch.bfloat16"
    with pytest.raises(LaunchError, match=message):
        module(torch.zeros(2, 64, dtype=dtype))


@pytest.mark.parametrize("shape", [(2, 63), (64, 2), ()], ids=str)
def test_wrong_input_shape_is_refused(shape: tuple[int, ...]) -> None:
    module = QuantizedLinear(64, 64, dtypes.i4, 32)
    with pytest.raises(LaunchError, match=r"expected \(\.\.\., 64\)"):
        module(torch.zeros(shape, dtype=torch.float16))


def test_the_deterministic_switch_is_checked_and_forgets_the_decode_ops() -> None:
    module = QuantizedLinear(128, 128, dtypes.i4)
    assert module.deterministic is True
    with pytest.raises(VerificationError, match="deterministic=1; expected True or False"):
        module.set_deterministic(1)
    module._decode_ops[(1, None, None)] = object()  # as a built operation would be kept
    module.set_deterministic(False)
    assert module.deterministic is False and module.decode_ops == {}


@pytest.mark.parametrize("deterministic", [True, False])
def test_the_decode_tuning_takes_the_switch(monkeypatch, deterministic: bool) -> None:
    """The decode path tunes with the module's switch (the tuning and the kernel stood in
    for: no GPU needed) and keeps the operation per (M, dtype, device)."""
    import contextlib

    from backend import decode_matmul

    asked = []

    def tuned(problem, m, **options):
        asked.append((m, options))
        return lambda rows, *rest: torch.zeros((rows.shape[0], problem.n), dtype=rows.dtype)

    monkeypatch.setattr(decode_matmul.DecodeMatmul, "tuned", staticmethod(tuned))
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    module = QuantizedLinear(128, 128, dtypes.i4)
    module.set_deterministic(deterministic)
    rows = torch.zeros((3, 128), dtype=torch.float16)
    module._decode(rows)
    module._decode(rows)
    assert asked == [(3, {"progress": False, "deterministic": deterministic})]


def test_bad_decode_config_is_refused() -> None:
    module = QuantizedLinear(64, 64, dtypes.i4, 32)
    message = r"decode config \{'warps': 4\}; expected a DequantConfig or None"
    with pytest.raises(VerificationError, match=message):
        module.set_decode_config({"warps": 4})
    module.set_decode_config(DequantConfig(warps=1))
    assert module.decode_config == DequantConfig(warps=1) and module.decode_ops == {}


def test_bad_quantized_inputs_are_refused() -> None:
    codes = np.zeros((64, 10), dtype=np.int64)
    with pytest.raises(VerificationError, match=r"scales of shape \(1, 10\); expected \(2, 10\)"):
        QuantizedLinear.from_quantized(codes, np.ones((1, 10)), dtypes.u4, 32)
    with pytest.raises(VerificationError, match="scales hold NaN or inf"):
        QuantizedLinear.from_quantized(codes, np.full((2, 10), np.inf), dtypes.u4, 32)
    with pytest.raises(VerificationError, match="codes of dtype torch.float64; expected integers"):
        QuantizedLinear.from_quantized(codes.astype(float), np.ones((2, 10)), dtypes.u4, 32)
    with pytest.raises(VerificationError, match=r"codes in \[0, 16\] do not fit u4"):
        QuantizedLinear.from_quantized(
            codes + 16 * (codes == 0) * (np.arange(10) == 3), np.ones((2, 10)), dtypes.u4, 32
        )
    with pytest.raises(
        VerificationError, match=r"zero point 16\.0; expected integers in \[0, 15\]"
    ):
        QuantizedLinear.from_quantized(
            codes, np.ones((2, 10)), dtypes.u4, 32, zeros=np.full((2, 10), 16)
        )
    with pytest.raises(VerificationError, match=r"zero point 2\.5; expected integers"):
        QuantizedLinear.from_quantized(
            codes, np.ones((2, 10)), dtypes.u4, 32, zeros=np.full((2, 10), 2.5)
        )
    with pytest.raises(VerificationError, match=r"bias of shape \(9,\); expected \(10,\)"):
        QuantizedLinear.from_quantized(codes, np.ones((2, 10)), dtypes.u4, 32, bias=np.ones(9))


def saved_module(out_features: int = 100, weight_dtype: DataType = dtypes.i4) -> QuantizedLinear:
    rng = np.random.default_rng(out_features)
    return QuantizedLinear.from_weight(
        random_weight(rng, 64, out_features, torch.float16), weight_dtype, 32
    )


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            lambda: QuantizedLinear(64, 300, dtypes.i4, 32),
            "out_features=100; this module has out_features=300",
        ),
        (
            lambda: QuantizedLinear(128, 100, dtypes.i4, 32),
            "in_features=64; this module has in_features=128",
        ),
        (
            lambda: QuantizedLinear(64, 100, dtypes.f4e2m1, 32),
            "weight_dtype='i4'; this module has weight_dtype='f4e2m1'",
        ),
        (
            lambda: QuantizedLinear(64, 100, dtypes.i4, 64),
            "group_size=32; this module has group_size=64",
        ),
        (
            lambda: QuantizedLinear(64, 100, dtypes.i4, 32, dtype=torch.bfloat16),
            "dtype='float16'; this module has dtype='bfloat16'",
        ),
        (
            lambda: QuantizedLinear(64, 100, dtypes.i4, 32, zero_points=True),
            "zero_points=False; this module has zero_points=True",
        ),
    ],
    ids=["out-features", "in-features", "weight-dtype", "group-size", "dtype", "zero-points"],
)
def test_state_dict_of_another_configuration_is_refused(target, message: str) -> None:
    module = target()
    before = {
        name: tensor.clone()
        for name, tensor in module.state_dict().items()
        if isinstance(tensor, torch.Tensor)
    }
    with pytest.raises(VerificationError, match=message):
        module.load_state_dict(saved_module().state_dict())
    for name, tensor in before.items():
        assert torch.equal(module.state_dict()[name], tensor), f"{name} changed by a refused load"


@pytest.mark.parametrize(
    ("field", "message"),
    [
        (
            "format_version",
            f"packed-format version {FORMAT_VERSION + 1}; this library reads version "
            f"{FORMAT_VERSION}",
        ),
        ("state_version", "state version 2; this library reads version 1"),
    ],
)
def test_state_dict_of_another_version_is_refused(field: str, message: str) -> None:
    state = saved_module().state_dict()
    state[EXTRA_STATE_KEY] = {**state[EXTRA_STATE_KEY], field: state[EXTRA_STATE_KEY][field] + 1}
    with pytest.raises(VerificationError, match=message):
        saved_module().load_state_dict(state)
    with pytest.raises(VerificationError, match=message):
        QuantizedLinear.from_state_dict(state)


def test_state_dict_without_metadata_or_with_a_bad_buffer_is_refused() -> None:
    state = saved_module().state_dict()
    without = {name: value for name, value in state.items() if name != EXTRA_STATE_KEY}
    with pytest.raises(VerificationError, match="no metadata entry '_extra_state'"):
        saved_module().load_state_dict(without)
    with pytest.raises(VerificationError, match="lacks"):
        QuantizedLinear.from_state_dict(without)
    state["packed_scales"] = state["packed_scales"][:1]
    message = (
        r"'packed_scales' is torch.float16 of shape \(1, 256\); expected torch.float16 of "
        r"shape \(2, 256\)"
    )
    with pytest.raises(VerificationError, match=message):
        saved_module().load_state_dict(state)

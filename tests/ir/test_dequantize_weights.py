"""`ir.examples.dequantize_weights`: packed codes and scales expanded to f16 or bf16 weights.

Exact: the refusals with their messages, the grid the program declares. Differential: in the
interpreter, the program's output equals `QuantizedLinear.dequantize_with_torch` (torch on the
CPU) bit for bit (a NaN code, f8e4m3's, gives a NaN in both), for random weight types, group
sizes, zero points, activation types, block shapes and weights (the CPU emulation of the
lowered kernel is compared with the interpreter in tests/backend/test_lower_emulated.py, and on
the GPU by the differential run).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.quantized_linear import QuantizedLinear
from ir import dtypes, run_reference
from ir.errors import VerificationError
from ir.examples.dequantize_weights import dequantize_weights_program

WEIGHT_TYPES = [dtypes.from_name(name) for name in ("u1", "i2", "u3", "i4", "u4", "i6", "u8")] + [
    dtypes.f4e2m1,
    dtypes.f6e3m2,
    dtypes.f8e4m3,
]
ACTIVATIONS = {dtypes.f16: torch.float16, dtypes.bf16: torch.bfloat16}


@st.composite
def layers(draw):
    weight = draw(st.sampled_from(WEIGHT_TYPES))
    activation = draw(st.sampled_from(list(ACTIVATIONS)))
    group = draw(st.sampled_from((32, 64, 128)))
    warps = draw(st.sampled_from((1, 2, 4)))
    units_k = draw(st.sampled_from([u for u in (1, 2) if group % (16 * u) == 0]))
    zero_points = not weight.is_float and not weight.is_signed and draw(st.booleans())
    k = group * draw(st.integers(1, 2))
    n = 256 * draw(st.integers(1, 2))
    seed = draw(st.integers(0, 2**31 - 1))
    return weight, activation, group, warps, units_k, zero_points, k, n, seed


def _bits(tensor: torch.Tensor) -> np.ndarray:
    return tensor.contiguous().view(torch.int16).numpy().view(np.uint16)


@settings(max_examples=12, deadline=None)
@given(layers())
def test_the_program_dequantizes_as_quantized_linear_does(case) -> None:
    weight, activation, group, warps, units_k, zero_points, k, n, seed = case
    rng = np.random.default_rng(seed)
    codes = torch.as_tensor(rng.integers(0, 1 << weight.nbits, (k, n)))
    scales = torch.as_tensor(rng.uniform(0.5, 1.5, (k // group, n)) / 2 ** (weight.nbits - 1))
    zeros = None
    if zero_points:
        zero_codes = rng.integers(0, 1 << weight.nbits, (k // group, n))
        zeros = torch.as_tensor(weight.decode(zero_codes).astype(np.float32))
    dtype = ACTIVATIONS[activation]
    layer = QuantizedLinear.from_quantized(codes, scales, weight, group, zeros=zeros, dtype=dtype)
    program = dequantize_weights_program(
        weight, group, activation, zero_points=zero_points, warps=warps, units_k=units_k
    )
    padded = layer.padded_out_features
    arguments = [padded, k, layer.packed_weight.numpy(), _bits(layer.packed_scales)]
    if zero_points:
        arguments.append(_bits(layer.packed_zeros))
    out = np.zeros(k * padded, np.uint16)
    run_reference(program, *arguments, out, grid=(padded // (64 * warps), k // (16 * units_k)))
    expected = layer.dequantize_with_torch(dtype)
    actual = out.reshape(k, padded)[:, :n]
    # A NaN code (f8e4m3's) gives a NaN; its sign follows the contract's class-3 rule here
    # (the product's NaN is positive) and the hardware's in torch.
    nan = torch.isnan(expected).numpy()
    np.testing.assert_array_equal(actual[~nan], _bits(expected)[~nan])
    assert np.all(activation.decode(actual[nan]) != activation.decode(actual[nan]))


def test_the_program_declares_its_grid() -> None:
    program = dequantize_weights_program(dtypes.i4, 128, warps=2, units_k=2)
    assert str(program.grid) == "(n // 128, k // 32, 1)"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((dtypes.i4, 128, dtypes.f32), "activation_dtype=f32; expected f16 or bf16"),
        ((dtypes.i32, 128), "i32"),
        ((dtypes.i4, 24), "group_size=24; expected a positive multiple of the tile's 16 rows"),
        ((dtypes.i4, 16, dtypes.f16, False, 4, 2), "group_size=16; expected a positive multiple"),
    ],
)
def test_bad_configurations_are_refused(arguments, message: str) -> None:
    weight, group, *rest = arguments
    options = dict(zip(("activation_dtype", "zero_points", "warps", "units_k"), rest))
    with pytest.raises(VerificationError, match=message):
        dequantize_weights_program(weight, group, **options)


@pytest.mark.parametrize(("name", "value"), [("warps", 0), ("warps", 33), ("units_k", True)])
def test_bad_block_shapes_are_refused(name: str, value: object) -> None:
    with pytest.raises(VerificationError, match=f"{name}={value!r}; expected an int from 1"):
        dequantize_weights_program(dtypes.i4, 128, **{name: value})

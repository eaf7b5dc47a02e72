"""`backend.quantized_linear.QuantizedLinear` on the GPU (marked `gpu`).

- `forward` at M = 1, 16, 40 and 64 (the decode kernel, `backend.decode_matmul.DecodeMatmul`;
  40 rows end inside a row block) and M = 256 (up to `BATCH_MAX_ROWS`: the path
  `backend.batch_matmul` tunes, dequantize-then-matmul or the prefill kernel) for i4, i8 and
  u4 with zero points, in f16 and bf16 (bf16 where `register_dequant_matmul` takes an
  activation dtype), against ``x @ dequantize() + bias``; and every path of
  `backend.batch_matmul.BATCH_PATHS` on its own.
- `forward` with the decode kernel's split parts added into one sum by combining stores, over
  calls of growing and shrinking batches.
- `dequantize` on the GPU (the `ir.examples.dequantize_weights` kernel) equals `dequantize` on
  the CPU and torch's on the GPU (`dequantize_with_torch`) bit for bit, in f16 and bf16.
- Which path runs: decode operations are built once per (M bucket, dtype, device) for M <= 64
  (`DECODE_MAX_ROWS`) and never for larger M, which get batch operations instead, here through
  the autotuner (whose timing is its own; the test times nothing).

The layer is (K, N) = (1024, 1500): N is padded to 1536 at packing and the output sliced (a
multiple of every batch path's columns: 128, 192 and 256). The
forward tests pin one decode configuration per weight type (`set_decode_config`; a cold tuning
per case would measure a dozen candidates each), covering split-k, a register ring of depth 2
and two warps.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np
import pytest

from ir import dtypes
from ir.dtypes import DataType
from ir.examples.register_dequant_matmul import DequantConfig, register_dequant_matmul

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from backend.batch_matmul import BATCH_PATHS, BatchMatmul  # noqa: E402
from backend.quantized_linear import DECODE_MAX_ROWS, QuantizedLinear  # noqa: E402

IN_FEATURES, OUT_FEATURES, GROUP_SIZE = 1024, 1500, 128
WEIGHT_TYPES = [dtypes.i4, dtypes.i8, dtypes.u4]
CONFIGS = {
    dtypes.i4: DequantConfig(),
    dtypes.i8: DequantConfig(units_k=2, depth=2, split=2),
    dtypes.u4: DequantConfig(warps=2, units_k=8),
}
ACTIVATIONS = [torch.float16, torch.bfloat16]
BF16_DECODE = "activation_dtype" in inspect.signature(register_dequant_matmul).parameters
TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 2.0**-7}
"""Largest error relative to max |x @ dequantize() + bias|, that computed in f32: our one
rounding against none (a reference rounded to the activation type after the product and again
after the bias carries two roundings of its own; it differed from ours by two bf16 ulps at 4 of
30 points on the H200). f16: 2e-3. bf16: one bf16 ulp (2^-7) at that maximum; bf16's half ulp
(2^-8 = 3.9e-3) is already above 2e-3."""


def _skip_without_bf16(act: torch.dtype) -> None:
    if act == torch.bfloat16 and not BF16_DECODE:
        pytest.skip(
            "register_dequant_matmul takes no activation_dtype: the decode kernel is f16 only"
        )


def _layer(weight_dtype: DataType, act: torch.dtype) -> QuantizedLinear:
    """A quantized random layer with a bias, on the GPU."""
    generator = torch.Generator().manual_seed(weight_dtype.nbits * 10 + (act == torch.bfloat16))
    linear = torch.nn.Linear(IN_FEATURES, OUT_FEATURES)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) * 0.05)
        linear.bias.copy_(torch.randn(linear.bias.shape, generator=generator) * 0.1)
    return QuantizedLinear.from_linear(linear.to("cuda", act), weight_dtype, GROUP_SIZE)


_cached_layer = functools.cache(_layer)


def _activations(shape: tuple[int, ...], act: torch.dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator).to("cuda", act)


@pytest.mark.parametrize("m", [1, 16, 40, 64, 256])
@pytest.mark.parametrize("act", ACTIVATIONS, ids=str)
@pytest.mark.parametrize("weight_dtype", WEIGHT_TYPES, ids=str)
def test_forward_matches_x_at_dequantize(weight_dtype: DataType, act: torch.dtype, m: int) -> None:
    _skip_without_bf16(act)
    module = _cached_layer(weight_dtype, act)
    module.set_decode_config(CONFIGS[weight_dtype])
    assert module.zero_points == (weight_dtype == dtypes.u4)
    x = _activations((m, IN_FEATURES), act, seed=m)
    out = module(x)
    torch.cuda.synchronize()
    assert out.shape == (m, OUT_FEATURES) and out.dtype == act and out.is_cuda
    weights = module.dequantize(act).float()
    expected = torch.matmul(x.float(), weights) + module.bias.float()
    error = float((out.float() - expected).abs().max()) / float(expected.abs().max())
    assert error < TOLERANCE[act], f"{weight_dtype} {act} m={m}: relative error {error:.2e}"


@pytest.mark.parametrize("m", [1, 6, 3])
def test_forward_with_the_combined_split_sum_matches_x_at_dequantize(m: int) -> None:
    """The decode kernel pinned to a split whose parts are added into one sum by combining
    stores (`DequantConfig.combine_parts`), called with growing and shrinking batches: each
    call reuses the sum the call before left zero."""
    module = _cached_layer(dtypes.i4, torch.float16)
    module.set_decode_config(
        DequantConfig(
            warps=2, units_k=8, split=4, late_scale=True, weights_as_a=True, combine_parts=True
        )
    )
    for rows in (m, 2 * m, m):
        x = _activations((rows, IN_FEATURES), torch.float16, seed=rows)
        out = module(x)
        torch.cuda.synchronize()
        weights = module.dequantize(torch.float16).float()
        expected = torch.matmul(x.float(), weights) + module.bias.float()
        error = float((out.float() - expected).abs().max()) / float(expected.abs().max())
        assert error < TOLERANCE[torch.float16], f"m={rows}: relative error {error:.2e}"


@pytest.mark.parametrize("act", ACTIVATIONS, ids=str)
@pytest.mark.parametrize("weight_dtype", WEIGHT_TYPES, ids=str)
def test_dequantize_on_the_gpu_equals_the_cpu(weight_dtype: DataType, act: torch.dtype) -> None:
    module = _cached_layer(weight_dtype, torch.float16)
    on_gpu = module.dequantize(act).cpu()
    assert (act, module.packed_weight.device) in module._dequantize_kernels
    state = {
        name: value.cpu() if isinstance(value, torch.Tensor) else value
        for name, value in module.state_dict().items()
    }
    on_cpu = QuantizedLinear.from_state_dict(state).dequantize(act)
    with_torch = module.dequantize_with_torch(act).cpu()
    for other in (on_cpu, with_torch):
        assert np.array_equal(on_gpu.view(torch.int16).numpy(), other.view(torch.int16).numpy())


def test_decode_kernels_are_built_for_small_m_only() -> None:
    module = _layer(dtypes.i4, torch.float16)
    device = module.packed_weight.device
    assert module.decode_ops == {}
    module(_activations((1, IN_FEATURES), torch.float16, seed=1))
    assert set(module.decode_ops) == {(1, torch.float16, device)}
    first = module.decode_ops[1, torch.float16, device]
    module(_activations((2, 8, IN_FEATURES), torch.float16, seed=2))  # M = 16
    assert set(module.decode_ops) == {(1, torch.float16, device), (16, torch.float16, device)}
    x = _activations((11, IN_FEATURES), torch.float16, seed=6)  # the bucket [8, 12)
    expected = (torch.matmul(x, module.dequantize()) + module.bias).float()
    error = float((module(x).float() - expected).abs().max()) / float(expected.abs().max())
    assert error < TOLERANCE[torch.float16]
    # The bucket's choice (tuned at 8 rows) holds the 11 rows in one row of blocks.
    assert module.decode_ops[11, torch.float16, device].config.block_m >= 11
    module(_activations((DECODE_MAX_ROWS, IN_FEATURES), torch.float16, seed=7))
    assert (DECODE_MAX_ROWS, torch.float16, device) in module.decode_ops
    module(_activations((DECODE_MAX_ROWS + 1, IN_FEATURES), torch.float16, seed=3))
    module(_activations((256, IN_FEATURES), torch.float16, seed=3))
    module(_activations((0, IN_FEATURES), torch.float16, seed=4))
    assert len(module.decode_ops) == 4
    assert set(module.batch_ops) == {(64, torch.float16, device), (256, torch.float16, device)}
    module(_activations((1, 1, IN_FEATURES), torch.float16, seed=5))
    assert module.decode_ops[1, torch.float16, device] is first
    torch.cuda.synchronize()


@pytest.mark.parametrize("path", range(len(BATCH_PATHS)), ids=lambda i: str(BATCH_PATHS[i]))
@pytest.mark.parametrize("weight_dtype", [dtypes.i4, dtypes.u4], ids=str)
def test_every_batch_path_matches_x_at_dequantize(weight_dtype: DataType, path: int) -> None:
    """Each path above the decode rows, built on its own (not tuned), with zero points for u4,
    at 200 rows (the prefill kernel's last row block partial): ``x @ dequantize()``."""
    module = _cached_layer(weight_dtype, torch.float16)
    operation = BatchMatmul(module.decode_problem(torch.float16), BATCH_PATHS[path])
    x = _activations((200, IN_FEATURES), torch.float16, seed=path)
    zeros = None if module.packed_zeros is None else module.packed_zeros
    out = operation(x, module.packed_weight, module.packed_scales, zeros)[:, :OUT_FEATURES]
    torch.cuda.synchronize()
    expected = torch.matmul(x, module.dequantize(torch.float16)).float()
    error = float((out.float() - expected).abs().max()) / float(expected.abs().max())
    assert error < TOLERANCE[torch.float16], f"{weight_dtype} {operation}: error {error:.2e}"

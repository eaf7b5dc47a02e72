"""The packed weight format and the register-dequant matmul on the GPU (marked `gpu`).

- `pack_weights` on a CUDA tensor (torch, on the device) equals the NumPy packer bit for bit.
- `pack_weights_program` compiled for the GPU equals `pack_weights` bit for bit, for every weight
  type (u1..u8, i1..i8, f4e2m1, f6e3m2).
- `register_dequant_matmul` for every weight type, in a rotation of configurations (split-k,
  register ring depth, unroll, warps, units), against `ir.run_reference` within the tensor
  core's rounding (its dot sums k in its own order); `split_k_sum` bit for bit.

Kernels compile in a thread pool first (NVRTC needs no GPU), then run.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import backend
from ir import dtypes, run_reference
from ir.dtypes import DataType
from ir.examples.packed_weights import pack_scales, pack_weights, pack_weights_program
from ir.examples.register_dequant_matmul import (
    DequantConfig,
    register_dequant_matmul,
    split_k_sum,
)

pytestmark = pytest.mark.gpu

WEIGHT_TYPES = [
    *(dtypes.from_name(f"u{bits}") for bits in range(1, 9)),
    *(dtypes.from_name(f"i{bits}") for bits in range(1, 9)),
    dtypes.f4e2m1,
    dtypes.f6e3m2,
]
CONFIGS = [
    DequantConfig(),
    DequantConfig(split=2, depth=2),
    DequantConfig(warps=2, units_n=2, units_k=2, unroll=1),
    DequantConfig(warps=1, units_k=8, split=4),
    DequantConfig(warps=4, units_k=2, depth=3, unroll=3),
    DequantConfig(warps=8, units_k=1, split=2),
]
GROUP_SIZE = 128


def _torch():
    return pytest.importorskip("torch")


def _device(array: np.ndarray):
    torch = _torch()
    if array.dtype == np.uint16:
        array = array.view(np.int16)
    return torch.from_numpy(np.ascontiguousarray(array)).cuda()


def test_torch_packer_on_the_device_matches_numpy() -> None:
    torch = _torch()
    rng = np.random.default_rng(3)
    for weight in (dtypes.i4, dtypes.u3, dtypes.i8, dtypes.u1, dtypes.f6e3m2):
        codes = rng.integers(0, 1 << weight.nbits, (64, 256))
        expected, fmt = pack_weights(codes, weight)
        packed, fmt_device = pack_weights(torch.tensor(codes, device="cuda"), weight)
        assert fmt_device == fmt
        assert packed.device.type == "cuda" and packed.dtype == torch.int32
        np.testing.assert_array_equal(packed.cpu().numpy(), expected)


def test_packing_program_matches_the_packer_for_every_type() -> None:
    torch = _torch()
    warps = 2
    with ThreadPoolExecutor(8) as pool:
        kernels = list(
            pool.map(lambda w: backend.compile(pack_weights_program(w, warps)), WEIGHT_TYPES)
        )
    rng = np.random.default_rng(4)
    k, n = 48, 384
    for weight, kernel in zip(WEIGHT_TYPES, kernels):
        codes = rng.integers(0, 1 << weight.nbits, (k, n))
        expected, fmt = pack_weights(codes, weight)
        out = torch.zeros(fmt.shape, dtype=torch.int32, device="cuda")
        source = _device(dtypes.pack(codes.ravel(), weight))
        kernel(n, k, source, out, grid=(n // (64 * warps), k // 16))
        torch.cuda.synchronize()
        np.testing.assert_array_equal(out.cpu().numpy(), expected, err_msg=str(weight))


def _case(weight: DataType, config: DequantConfig, seed: int):
    """(m, n, k, a, packed weights, packed scales) for one weight type and configuration."""
    rng = np.random.default_rng(seed)
    m = 1 + seed % 19
    n = config.block_n * 2
    k = max(GROUP_SIZE, config.block_k * config.split * 3)
    k = math.lcm(k, config.block_k * config.split)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    codes = rng.integers(0, 1 << weight.nbits, (k, n))
    packed, _ = pack_weights(codes, weight)
    scales = rng.uniform(0.5, 1.5, (math.ceil(k / GROUP_SIZE), n)) / 2 ** (weight.nbits - 1)
    return m, n, k, a, packed, pack_scales(scales.astype(np.float16))


def test_register_dequant_matmul_matches_the_interpreter_for_every_type() -> None:
    torch = _torch()
    jobs = [(w, CONFIGS[i % len(CONFIGS)], i) for i, w in enumerate(WEIGHT_TYPES)]
    cases = [_case(w, config, seed) for w, config, seed in jobs]

    def build(index: int):
        weight, config, _ = jobs[index]
        m, n, k = cases[index][:3]
        program = register_dequant_matmul(weight, GROUP_SIZE, config)
        return backend.compile(program, constants={"n": n, "k": k})

    with ThreadPoolExecutor(8) as pool:
        kernels = list(pool.map(build, range(len(jobs))))
        sums = dict(zip((2, 4), pool.map(lambda s: backend.compile(split_k_sum(s)), (2, 4))))
    failures = []
    for (weight, config, _), (m, n, k, a, packed, scales), kernel in zip(jobs, cases, kernels):
        program = register_dequant_matmul(weight, GROUP_SIZE, config)
        shape = (config.split, m, n) if config.split > 1 else (m, n)
        out_dtype = np.float32 if config.split > 1 else np.float16
        expected = np.zeros(shape, dtype=out_dtype)
        args = (m, n, k, a, packed.view(np.uint8).reshape(-1), scales)
        run_reference(program, *args, expected, grid=config.grid(m, n))
        out = torch.zeros(shape, dtype=getattr(torch, np.dtype(out_dtype).name), device="cuda")
        device_args = (m, n, k, _device(a), _device(packed), _device(scales))
        kernel(*device_args, out, grid=config.grid(m, n))
        torch.cuda.synchronize()
        got = out.cpu().numpy().astype(np.float64)
        want = expected.astype(np.float64)
        scale = max(1.0, float(np.abs(want).max()))
        error = float(np.abs(got - want).max()) / scale
        if not error < 2e-3:
            failures.append(f"{weight} {config}: relative error {error:.2e}")
            continue
        if config.split > 1:
            # The second launch on the GPU's own partial sums: bit for bit.
            reduced = np.zeros((m, n), dtype=np.float16)
            run_reference(
                split_k_sum(config.split),
                m * n,
                out.cpu().numpy(),
                reduced,
                grid=math.ceil(m * n / 512),
            )
            final = torch.zeros((m, n), dtype=torch.float16, device="cuda")
            sums[config.split](m * n, out, final, grid=math.ceil(m * n / 512))
            torch.cuda.synchronize()
            if not np.array_equal(final.cpu().numpy().view(np.uint16), reduced.view(np.uint16)):
                failures.append(f"{weight} {config}: split_k_sum differs from the interpreter")
    assert not failures, failures

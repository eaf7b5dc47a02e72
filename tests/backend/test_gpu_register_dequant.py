"""The packed weight format and the register-dequant matmul on the GPU (marked `gpu`).

- `pack_weights` on a CUDA tensor (torch, on the device) equals the NumPy packer bit for bit.
- `pack_weights_program` compiled for the GPU equals `pack_weights` bit for bit, for every weight
  type (u1..u8, i1..i8, f4e2m1, f6e3m2).
- `register_dequant_matmul` for every weight type, in a rotation of configurations (split-k,
  register ring depth, unroll, warps, units), against `ir.run_reference` within the tensor
  core's rounding (its dot sums k in its own order); the split-k sum (fused in the kernel by an
  atomic ticket, or `split_k_sum` in a second launch) of the GPU's own partial sums bit for
  bit, and the fused form's counters reset for the next launch.
- bf16 activations and per-group zero points, the same way.

Kernels compile in a thread pool first (NVRTC needs no GPU), then run.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

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
    DequantConfig(split=4, units_k=2, fused_sum=False),
    DequantConfig(warps=2, units_n=2, units_k=2, unroll=1),
    DequantConfig(warps=1, units_k=8, split=4),
    DequantConfig(warps=4, units_k=2, depth=3, unroll=3),
    DequantConfig(warps=8, units_k=1, split=2),
    DequantConfig(units_k=8, late_scale=True),
    DequantConfig(warps=2, units_k=8, split=2, depth=2, late_scale=True),
    DequantConfig(units_k=8, late_scale=True, weights_as_a=True),
    DequantConfig(warps=2, units_k=2, split=4, fused_sum=False, weights_as_a=True),
    DequantConfig(warps=8, units_k=4, split=2, depth=2, weights_as_a=True),
    DequantConfig(units_k=4, units_m=4),
    DequantConfig(warps=2, units_k=8, units_m=2, split=2, late_scale=True),
    DequantConfig(units_k=2, units_m=3, weights_as_a=True),
    # Stream-K: a few persistent blocks over the tiles' k-tile iterations.
    DequantConfig(warps=1, units_k=8, late_scale=True, weights_as_a=True, stream_k=5),
    DequantConfig(warps=2, units_k=2, depth=2, stream_k=3, min_blocks_per_sm=4),
    # The search space's ringed stream-K forms at 16 rows: two stages at four blocks an SM,
    # three (unrolled twice, so the stage index is computed) at three.
    DequantConfig(
        units_k=8,
        late_scale=True,
        weights_as_a=True,
        units_m=2,
        stages=2,
        unroll=2,
        stream_k=5,
        min_blocks_per_sm=4,
    ),
    replace(
        DequantConfig(units_k=8, late_scale=True, weights_as_a=True, units_m=2),
        stages=3,
        stream_k=5,
        min_blocks_per_sm=3,
    ),
    # A link of a chain: launched with programmatic stream serialization on sm_90.
    DequantConfig(units_k=8, late_scale=True, weights_as_a=True, programmatic_launch=True),
    DequantConfig(units_k=8, split=2, programmatic_launch=True, late_trigger=True),
    # A shared ring of S stages for the weights (each thread's own words) and activations.
    DequantConfig(units_k=8, late_scale=True, weights_as_a=True, split=2, stages=4, unroll=4),
    DequantConfig(warps=2, units_k=2, stages=3),
    DequantConfig(units_k=4, units_m=2, stages=2, split=4, fused_sum=False),
    # The ring's activations bulk-copied and released (no block barrier in the k loop), and
    # the weights' words too.
    DequantConfig(
        units_k=8, late_scale=True, weights_as_a=True, units_m=2, stages=4, unroll=4, release=True
    ),
    DequantConfig(units_k=8, late_scale=True, split=2, stages=4, release=True, bulk_weights=True),
    DequantConfig(warps=2, units_k=2, stages=3, stream_k=5, release=True, bulk_weights=True),
    # The weights prefetched into L2 a distance past the register ring, and the shared ring.
    DequantConfig(units_k=8, late_scale=True, weights_as_a=True, split=2, prefetch_distance=3),
    DequantConfig(warps=2, units_k=2, stages=3, prefetch_distance=4),
    # The parts added into one f32 sum by combining stores, in the GPU's order.
    DequantConfig(units_k=8, late_scale=True, weights_as_a=True, split=4, combine_parts=True),
    DequantConfig(warps=2, units_k=2, depth=2, stream_k=3, combine_parts=True),
    # The group rows a ring of their own ahead: the late scale of a split, two k-tiles ahead
    # beside the shared ring, stream-K.
    DequantConfig(units_k=8, late_scale=True, weights_as_a=True, split=4, rows_ahead=1),
    DequantConfig(warps=2, units_k=2, stages=3, rows_ahead=2),
    DequantConfig(warps=1, units_k=8, late_scale=True, weights_as_a=True, stream_k=5, rows_ahead=1),
    # The warpgroups' dot (wgmma, the weights as A from registers, the stage read where it
    # lies): late scale at 16 rows, released; the plain dot of a split with the barrier ring
    # (cp.async); stream-K, released.
    DequantConfig(
        units_k=8,
        late_scale=True,
        weights_as_a=True,
        units_m=2,
        stages=3,
        unroll=2,
        release=True,
        warpgroup_dot=True,
    ),
    DequantConfig(units_k=4, weights_as_a=True, split=2, stages=2, warpgroup_dot=True),
    DequantConfig(
        warps=8,
        units_k=8,
        late_scale=True,
        weights_as_a=True,
        stages=3,
        stream_k=5,
        release=True,
        warpgroup_dot=True,
    ),
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


def _relaunch_failures(label, kernel, device_args, out, counters, grid) -> list[str]:
    """What is wrong with a fused sum's counters after a launch that gave `out`: each must be
    reset to 0, and a second launch on them must give the same bits."""
    torch = _torch()
    failures = [f"{label}: counters not reset"] if counters.count_nonzero().item() else []
    again = torch.zeros_like(out)
    kernel(*device_args, again, grid=grid)
    torch.cuda.synchronize()
    if not torch.equal(again.view(torch.int16), out.view(torch.int16)):
        failures.append(f"{label}: a second launch differs")
    return failures


def _combined_failures(label, kernel, device_args, out, partial, counters, grid) -> list[str]:
    """What is wrong after a launch whose parts were added into one sum by combining stores:
    the sum and the counters must be reset to 0, and a second launch (adding in its own
    order) must give C within an f16 ulp or two of the first."""
    torch = _torch()
    failures = [f"{label}: counters not reset"] if counters.count_nonzero().item() else []
    if partial.count_nonzero().item():
        failures.append(f"{label}: the combined sum not reset")
    again = torch.zeros_like(out)
    kernel(*device_args, again, grid=grid)
    torch.cuda.synchronize()
    if not torch.allclose(again.float(), out.float(), rtol=2e-3, atol=1e-3):
        failures.append(f"{label}: a second launch differs beyond the adds' order")
    return failures


def test_register_dequant_matmul_matches_the_interpreter_for_every_type() -> None:
    torch = _torch()
    count = max(len(WEIGHT_TYPES), len(CONFIGS))
    jobs = [
        (WEIGHT_TYPES[i % len(WEIGHT_TYPES)], CONFIGS[i % len(CONFIGS)], i) for i in range(count)
    ]
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
        split, grid, stream = config.split, config.grid(m, n, k), config.stream_k > 0
        fused = (split > 1 or stream) and config.fused_sum
        parts = config.stream_k_slots(m, n, k) if stream else split
        args = [m, n, k, a, packed.view(np.uint8).reshape(-1), scales]
        device_args = [m, n, k, _device(a), _device(packed), _device(scales)]
        if fused:
            args += [np.zeros(parts * m * n, np.float32), np.zeros(config.tiles(m, n), np.int32)]
            partial = torch.zeros((parts, m, n), dtype=torch.float32, device="cuda")
            counters = torch.zeros(config.tiles(m, n), dtype=torch.int32, device="cuda")
            device_args += [partial, counters]
        shape = (split, m, n) if split > 1 and not fused else (m, n)
        out_dtype = np.float32 if split > 1 and not fused else np.float16
        expected = np.zeros(shape, dtype=out_dtype)
        run_reference(program, *args, expected, grid=grid)
        out = torch.zeros(shape, dtype=getattr(torch, np.dtype(out_dtype).name), device="cuda")
        kernel(*device_args, out, grid=grid)
        torch.cuda.synchronize()
        got = out.cpu().numpy().astype(np.float64)
        want = expected.astype(np.float64)
        scale = max(1.0, float(np.abs(want).max()))
        error = float(np.abs(got - want).max()) / scale
        if not error < 2e-3:
            failures.append(f"{weight} {config}: relative error {error:.2e}")
            continue
        if split == 1 and not stream:
            continue
        if config.combine_parts:
            failures += _combined_failures(
                f"{weight} {config}", kernel, device_args, out, partial, counters, grid
            )
            continue
        if stream:
            failures += _relaunch_failures(
                f"{weight} {config}", kernel, device_args, out, counters, grid
            )
            continue
        # The sum of the GPU's own partial sums, in split order: bit for bit.
        parts = (partial if fused else out).cpu().numpy()
        reduced = np.zeros((m, n), dtype=np.float16)
        run_reference(split_k_sum(split), m * n, parts, reduced, grid=math.ceil(m * n / 512))
        if fused:
            final = out
            failures += _relaunch_failures(
                f"{weight} {config}", kernel, device_args, out, counters, grid
            )
        else:
            final = torch.zeros((m, n), dtype=torch.float16, device="cuda")
            sums[split](m * n, out, final, grid=math.ceil(m * n / 512))
            torch.cuda.synchronize()
        if not np.array_equal(final.cpu().numpy().view(np.uint16), reduced.view(np.uint16)):
            failures.append(f"{weight} {config}: the split-k sum differs from the interpreter")
    assert not failures, failures


ACTIVATION_CASES = [
    # (weight type, activation type, zero points, config)
    (dtypes.u4, dtypes.f16, True, DequantConfig(split=2, fused_sum=False)),
    (dtypes.u4, dtypes.bf16, True, DequantConfig()),
    (dtypes.u2, dtypes.bf16, True, DequantConfig(units_k=8, depth=2)),
    (dtypes.i8, dtypes.bf16, False, DequantConfig(units_k=2, split=2, fused_sum=False)),
    (dtypes.f4e2m1, dtypes.bf16, False, DequantConfig(warps=2)),
    (dtypes.u3, dtypes.f16, True, DequantConfig(units_k=8)),
    (dtypes.i1, dtypes.bf16, False, DequantConfig(units_k=8)),
    (dtypes.u7, dtypes.bf16, True, DequantConfig(units_k=2)),
    (dtypes.u4, dtypes.bf16, True, DequantConfig(units_k=8, late_scale=True)),
    (dtypes.i2, dtypes.f16, False, DequantConfig(warps=2, units_k=8, late_scale=True)),
    (dtypes.u4, dtypes.bf16, True, DequantConfig(units_k=8, late_scale=True, weights_as_a=True)),
    (
        dtypes.u3,
        dtypes.f16,
        True,
        DequantConfig(units_k=2, split=2, fused_sum=False, weights_as_a=True),
    ),
]


def _device_codes(codes: np.ndarray, dtype: DataType):
    """A uint16 array of f16 / bf16 codes as a CUDA tensor of that dtype."""
    torch = _torch()
    tensor = torch.from_numpy(np.ascontiguousarray(codes.view(np.int16))).cuda()
    return tensor.view(torch.float16 if dtype == dtypes.f16 else torch.bfloat16)


def test_activation_types_and_zero_points_match_the_interpreter() -> None:
    """bf16 activations and per-group zero points, against `ir.run_reference` within the
    tensor core's rounding; the bf16 split-k sum bit for bit."""
    torch = _torch()
    group_size = 128

    def build(case):
        weight, activation, zero_points, config = case
        program = register_dequant_matmul(
            weight, group_size, config, activation_dtype=activation, zero_points=zero_points
        )
        k = math.lcm(group_size, config.block_k * config.split) * 2
        return program, k, backend.compile(program, constants={"n": config.block_n * 2, "k": k})

    with ThreadPoolExecutor(8) as pool:
        built = list(pool.map(build, ACTIVATION_CASES))
    failures = []
    for index, ((weight, activation, zero_points, config), (program, k, kernel)) in enumerate(
        zip(ACTIVATION_CASES, built)
    ):
        rng = np.random.default_rng(100 + index)
        m, n, groups = 1 + 5 * index % 17, config.block_n * 2, k // group_size
        a = activation.encode(rng.uniform(-1, 1, (m, k)))
        packed, _ = pack_weights(rng.integers(0, 1 << weight.nbits, (k, n)), weight)
        scales = pack_scales(
            activation.encode(rng.uniform(0.5, 1.5, (groups, n)) / 2**weight.nbits)
        )
        zeros = rng.integers(0, 1 << weight.nbits, (groups, n)).astype(np.float64)
        extra = [pack_scales(activation.encode(zeros))] if zero_points else []
        split = config.split
        shape = (split, m, n) if split > 1 else (m, n)
        expected = np.zeros(shape, dtype=np.float32 if split > 1 else np.uint16)
        args = [m, n, k, a, packed.view(np.uint8).reshape(-1), scales, *extra]
        run_reference(program, *args, expected, grid=config.grid(m, n))
        if split > 1:
            out = torch.zeros(shape, dtype=torch.float32, device="cuda")
        else:
            out = _device_codes(np.zeros(shape, dtype=np.uint16), activation)
        device_args = [m, n, k, _device_codes(a, activation), _device(packed)]
        device_args += [_device_codes(x, activation) for x in [scales, *extra]]
        kernel(*device_args, out, grid=config.grid(m, n))
        torch.cuda.synchronize()
        got = out.float().cpu().numpy().astype(np.float64)
        want = expected if split > 1 else activation.decode(expected)
        want = np.asarray(want, dtype=np.float64)
        error = float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))
        tolerance = 2e-3 if activation == dtypes.f16 else 1.6e-2
        if not error < tolerance:
            failures.append(f"{weight} {activation} zp={zero_points}: error {error:.2e}")
            continue
        if split > 1:
            reduced = np.zeros((m, n), dtype=np.uint16)
            reduce = split_k_sum(split, out_dtype=activation)
            run_reference(reduce, m * n, out.cpu().numpy(), reduced, grid=math.ceil(m * n / 512))
            final = _device_codes(np.zeros((m, n), dtype=np.uint16), activation)
            backend.compile(reduce)(m * n, out, final, grid=math.ceil(m * n / 512))
            torch.cuda.synchronize()
            if not np.array_equal(final.view(torch.int16).cpu().numpy().view(np.uint16), reduced):
                failures.append(f"{weight} {activation}: split_k_sum differs")
    assert not failures, failures


RELEASED_CASES = [
    # (weight type, m, released configuration): the ring laps many times (K = 8192: 64 k-tiles).
    (
        dtypes.i4,
        1,
        DequantConfig(
            units_k=8, late_scale=True, weights_as_a=True, split=2, stages=4, release=True
        ),
    ),
    (
        dtypes.i4,
        16,
        DequantConfig(
            units_k=8,
            late_scale=True,
            weights_as_a=True,
            units_m=2,
            stages=4,
            unroll=4,
            release=True,
            bulk_weights=True,
        ),
    ),
    (
        dtypes.i2,
        5,
        DequantConfig(warps=2, units_k=8, stages=3, stream_k=7, release=True, bulk_weights=True),
    ),
]


def _launch(kernel, config: DequantConfig, m: int, n: int, k: int, inputs) -> np.ndarray:
    """C of one launch of a compiled decode kernel on `inputs` (device a, packed, scales)."""
    torch = _torch()
    arguments = [m, n, k, *inputs]
    if config.split > 1 or config.stream_k:
        parts = config.stream_k_slots(m, n, k) if config.stream_k else config.split
        arguments.append(torch.zeros((parts, m, n), dtype=torch.float32, device="cuda"))
        arguments.append(torch.zeros(config.tiles(m, n), dtype=torch.int32, device="cuda"))
    out = torch.zeros((m, n), dtype=torch.float16, device="cuda")
    kernel(*arguments, out, grid=config.grid(m, n, k))
    torch.cuda.synchronize()
    return out.cpu().numpy()


def _launch_both(weight: DataType, shape, first: DequantConfig, second: DequantConfig, seed=11):
    """C of a launch of each of two decode kernels on the same random inputs of `shape` (m,
    n, k)."""
    m, n, k = shape
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    codes = rng.integers(0, 1 << weight.nbits, (k, n))
    packed, _ = pack_weights(codes, weight)
    scales = rng.uniform(0.5, 1.5, (k // GROUP_SIZE, n)) / 2 ** (weight.nbits - 1)
    inputs = [_device(a), _device(packed), _device(pack_scales(scales.astype(np.float16)))]
    outputs = []
    for config in (first, second):
        program = register_dequant_matmul(weight, GROUP_SIZE, config)
        kernel = backend.compile(program, constants={"n": n, "k": k})
        outputs.append(_launch(kernel, config, m, n, k, inputs))
    return outputs


@pytest.mark.parametrize(
    ("weight", "m", "config"), RELEASED_CASES, ids=[f"{c[0]}-m{c[1]}" for c in RELEASED_CASES]
)
def test_a_released_ring_gives_the_bits_of_the_barrier_ring(weight, m, config) -> None:
    """The ring handed back by releases (no block barrier; warps apart by up to S - 2
    k-tiles) computes what the ring handed back by barriers computes, bit for bit, over many
    laps of the ring and many blocks: a stage overwritten before a warp read it would show."""
    k, n = 8192, config.block_n * 32
    barrier = replace(config, release=False, bulk_weights=False)
    released, reference = _launch_both(weight, (m, n, k), config, barrier, seed=7)
    assert np.abs(reference.astype(np.float64)).max() > 0
    assert np.array_equal(released.view(np.uint16), reference.view(np.uint16))


WARPGROUP_CASES = [
    # (weight type, m, configuration with the warpgroups' dot): K = 8192, the ring laps often.
    (
        dtypes.i4,
        16,
        DequantConfig(
            units_k=8,
            late_scale=True,
            weights_as_a=True,
            units_m=2,
            stages=3,
            unroll=2,
            release=True,
            warpgroup_dot=True,
        ),
    ),
    (
        dtypes.i2,
        9,
        DequantConfig(
            units_k=8,
            late_scale=True,
            weights_as_a=True,
            units_m=2,
            stages=2,
            unroll=2,
            split=2,
            warpgroup_dot=True,
        ),
    ),
]


@pytest.mark.parametrize(
    ("weight", "m", "config"), WARPGROUP_CASES, ids=[f"{c[0]}-m{c[1]}" for c in WARPGROUP_CASES]
)
def test_the_warpgroup_dot_computes_the_mma_form_s_product(weight, m, config) -> None:
    """The warpgroups' dot (wgmma reading the stage, released or behind barriers, the
    weights' rows renamed) gives the products of the same kernel with mma.sync, over many laps
    of the ring and many blocks: f32 sums of the same terms, equal within the tensor cores'
    rounding."""
    shape = (m, config.block_n * 16, 8192)
    mma_form = replace(config, warpgroup_dot=False)
    warpgroup, mma = (x.astype(np.float64) for x in _launch_both(weight, shape, config, mma_form))
    scale = np.abs(mma).max()
    assert scale > 0
    assert np.abs(warpgroup - mma).max() / scale < 2e-3

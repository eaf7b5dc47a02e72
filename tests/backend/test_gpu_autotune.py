"""The decode matmul operation, its autotuning and the timing protocol on the GPU (marked `gpu`).

- `DecodeMatmul.tuned` on a small problem (i4, K=1024, N=2048, M=1) with the real measure
  (`DecodeMeasure`: checked against torch, then timed by `backend.timing`): the chosen
  operation's result against torch ``a @ dequantized``; a second tuning from the warm record
  store gives the same configuration and times nothing; with the default measure, the
  finalists timed again in turns (`DecodeMeasure.in_turns`) and the choice the fastest of them,
  and with `steady_from_us` 0 timed back to back as well;
- `DecodeMatmul` with split-k and without, for i4 and i8 in f16, and with bf16 activations and
  zero points, against torch (the split's parts added into one sum by combining stores too,
  over calls of growing and shrinking batches, which reuse the sum every launch leaves zero);
- its argument checks (`LaunchError` naming the argument) and `out=`;
- `backend.timing`: the flush buffer's size and reuse, a median that grows with the work, and
  several runs timed in turns (the order of each round, each run's median).
"""

from __future__ import annotations

import functools
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from backend.autotune import TuningError
from backend.cache import RecordStore
from backend.decode_matmul import (
    DecodeMatmul,
    DecodeMeasure,
    DecodeProblem,
    decode_inputs,
    decode_search_space,
    relative_error,
)
from backend.errors import LaunchError, TimingError
from ir import dtypes
from ir.examples.register_dequant_matmul import DequantConfig

pytestmark = pytest.mark.gpu

SMALL = DecodeProblem(dtypes.i4, 128, 1024, 2048)


def _torch():
    return pytest.importorskip("torch")


def _check_against_torch(operation: DecodeMatmul, m: int, seed: int, tolerance: float) -> None:
    inputs = decode_inputs(operation.problem, m, seed=seed)
    out = operation(inputs["a"], inputs["packed"], inputs["scales"], inputs["zeros"])
    _torch().cuda.synchronize()
    assert tuple(out.shape) == (m, operation.problem.n)
    error = relative_error(out, inputs["expected"])
    assert error < tolerance, f"{operation!r} at m={m}: relative error {error:.2e}"


def test_tuned_operation_matches_torch_and_warm_tuning_times_nothing(tmp_path: Path) -> None:
    _torch()
    calls: list[DequantConfig] = []
    real = DecodeMeasure(SMALL, 1, repeats=30)

    def measure(operation: DecodeMatmul) -> float:
        calls.append(operation.config)
        return real(operation)

    store = RecordStore(tmp_path / "records")
    cold = DecodeMatmul.tuned(SMALL, 1, measure=measure, store=store, progress=False)
    space = decode_search_space(dtypes.i4, SMALL.k, SMALL.n, 1, sm_count=_sm_count())
    assert calls == space
    assert cold.config in space and not cold.tuning.from_cache
    measured = [trial for trial in cold.tuning.trials if trial.status == "measured"]
    assert len(measured) == len(space), cold.tuning.trials
    assert cold.tuning.us == min(trial.us for trial in measured) > 0
    _check_against_torch(cold, 1, seed=11, tolerance=2e-3)
    _check_against_torch(cold, 5, seed=12, tolerance=2e-3)  # another M of the same kernels

    warm = DecodeMatmul.tuned(SMALL, 1, measure=measure, store=store, progress=False)
    assert len(calls) == len(space)  # nothing timed
    assert warm.config == cold.config and warm.tuning.from_cache
    _check_against_torch(warm, 1, seed=13, tolerance=2e-3)


def test_the_default_measure_times_the_finalists_in_turns(tmp_path: Path) -> None:
    from backend.autotune import FINALIST_MARGIN, FINALISTS

    store = RecordStore(tmp_path / "records")
    tuned = DecodeMatmul.tuned(SMALL, 1, store=store, progress=False)
    measured = [t for t in tuned.tuning.trials if t.status == "measured"]
    fastest = min(t.us for t in measured)
    finalists = [t for t in measured if t.turns_us is not None]
    assert len(finalists) <= FINALISTS
    assert all(t.us <= fastest * (1 + FINALIST_MARGIN) for t in finalists)
    if len(finalists) > 1:
        chosen = next(t for t in finalists if t.candidate == asdict(tuned.config))
        assert tuned.tuning.us == chosen.turns_us == min(t.turns_us for t in finalists) > 0
    _check_against_torch(tuned, 1, seed=14, tolerance=2e-3)
    # The measure's own turns: two operations on the same inputs, each a positive time.
    measure = DecodeMeasure(SMALL, 1)
    pair = [DecodeMatmul(SMALL, DequantConfig(warps=4, units_k=4, split=s)) for s in (1, 4)]
    assert [measure(operation) > 0 for operation in pair] == [True, True]
    times = measure.in_turns(pair)
    assert len(times) == 2 and all(0 < us < 1000 for us in times)


def _sm_count() -> int:
    torch = _torch()
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


@pytest.mark.parametrize("weight", ["i4", "i8"])
@pytest.mark.parametrize(
    "config",
    [
        DequantConfig(warps=4, units_k=4, split=1),
        DequantConfig(warps=4, units_k=4, split=4, depth=2),
        DequantConfig(warps=2, units_k=2, split=2),
        DequantConfig(warps=2, units_k=2, split=2, fused_sum=False),
        DequantConfig(warps=4, units_k=4, split=4, combine_parts=True),
        DequantConfig(
            warps=2, units_k=8, split=2, late_scale=True, weights_as_a=True, combine_parts=True
        ),
    ],
    ids=[
        "split1",
        "split4",
        "split2",
        "split2-two-launches",
        "split4-combined",
        "split2-combined-as-a",
    ],
)
def test_decode_matmul_matches_torch(weight: str, config: DequantConfig) -> None:
    _torch()
    problem = DecodeProblem(dtypes.from_name(weight), 128, 1024, 2048)
    operation = DecodeMatmul(problem, config)
    assert operation.launches == (1 if config.split == 1 or config.fused_sum else 2)
    for m, seed in ((1, 1), (16, 2), (37, 3), (1, 4)):
        _check_against_torch(operation, m, seed, tolerance=2e-3)


@pytest.mark.parametrize("split", [1, 2])
@pytest.mark.parametrize("activation", ["f16", "bf16"])
def test_decode_matmul_with_zero_points_matches_torch(split: int, activation: str) -> None:
    _torch()
    problem = DecodeProblem(dtypes.u4, 128, 1024, 2048, dtypes.from_name(activation), True)
    operation = DecodeMatmul(problem, DequantConfig(warps=4, units_k=4, split=split))
    tolerance = 2e-3 if activation == "f16" else 1e-2
    for m, seed in ((1, 4), (20, 5)):
        _check_against_torch(operation, m, seed, tolerance)


def test_out_is_written_and_returned() -> None:
    torch = _torch()
    operation = DecodeMatmul(SMALL, DequantConfig(split=2))
    inputs = decode_inputs(SMALL, 3, seed=6)
    out = torch.full((3, SMALL.n), float("nan"), dtype=torch.float16, device="cuda")
    returned = operation(inputs["a"], inputs["packed"], inputs["scales"], out=out)
    torch.cuda.synchronize()
    assert returned is out
    assert relative_error(out, inputs["expected"]) < 2e-3


def test_arguments_are_checked_before_launch() -> None:
    torch = _torch()
    operation = DecodeMatmul(SMALL, DequantConfig(split=2))
    inputs = decode_inputs(SMALL, 2, seed=7)
    a, packed, scales = inputs["a"], inputs["packed"], inputs["scales"]
    cases = [
        ((a.cpu(), packed, scales), {}, r"argument 'a' is on cpu; expected a CUDA device"),
        ((a[0], packed, scales), {}, r"argument 'a' is \(1024,\); expected a 2-D torch tensor"),
        ((a.float(), packed, scales), {}, r"'a' has dtype torch.float32; expected torch.float16"),
        ((a[:, :512], packed, scales), {}, r"'a' has shape \(2, 512\); expected \(2, 1024\)"),
        ((a, packed[:-1], scales), {}, r"'packed' has shape \(63, 4096\); expected \(64, 4096\)"),
        ((a, packed.view(torch.float32), scales), {}, r"'packed' has dtype torch.float32"),
        ((a, packed, scales.cpu()), {}, r"'scales' is on cpu; expected cuda:0, as 'a'"),
        ((a, packed, scales.t().contiguous().t()), {}, r"'scales' is not contiguous"),
        ((a, packed, scales, scales), {}, r"'zeros' is given; expected None"),
        ((a, packed, scales), {"out": torch.empty(2, 2048, device="cuda")}, r"'out' has dtype"),
        ((a, packed, [1, 2]), {}, r"'scales' is a list; expected a torch tensor"),
    ]
    for args, kwargs, message in cases:
        with pytest.raises(LaunchError, match=message):
            operation(*args, **kwargs)
    zero_points = DecodeMatmul(
        DecodeProblem(dtypes.u4, 128, 1024, 2048, zero_points=True), DequantConfig()
    )
    with pytest.raises(LaunchError, match=r"argument 'zeros' is None; expected the packed"):
        zero_points(a, packed, scales)


def test_measure_refuses_a_wrong_result_and_another_problem() -> None:
    _torch()
    operation = DecodeMatmul(SMALL, DequantConfig())
    measure = DecodeMeasure(SMALL, 1, repeats=30)
    measure.inputs()["expected"].mul_(1.01)  # a reference 1% off: the result no longer fits
    with pytest.raises(TuningError, match=r"relative error 9\.\d+e-03 against torch"):
        measure(operation)
    other = DecodeMatmul(DecodeProblem(dtypes.u4, 128, 1024, 2048), DequantConfig())
    with pytest.raises(TuningError, match=r"measure of .* given an operation for"):
        DecodeMeasure(SMALL, 1)(other)


def test_flush_buffer_is_large_and_reused() -> None:
    torch = _torch()
    from backend.timing import FLUSH_BYTES, flush_buffer

    flush = flush_buffer()
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    nbytes = flush.numel() * flush.element_size()
    assert nbytes >= max(2 * l2, FLUSH_BYTES) and flush.is_cuda
    assert flush_buffer() is flush
    assert flush_buffer(nbytes=nbytes + 4 * 2**20) is not flush


def test_median_grows_with_the_work_and_checks_its_arguments() -> None:
    torch = _torch()
    from backend.timing import flush_buffer, median_us

    flush = flush_buffer()
    small = torch.ones(1 << 10, device="cuda")
    large = torch.ones(1 << 28, device="cuda")  # 1 GiB: reading it takes >= 200 us
    small_us = median_us(lambda: small.sum(), flush, 30)
    large_us = median_us(lambda: large.sum(), flush, 30)
    assert 0 < small_us < 100 and large_us > 150 and large_us > 5 * small_us

    # A run that spends 3 ms on the host before queuing its kernel: the first sleep (about
    # 1 ms) would let that into the time; the sleep grows until it covers it.
    def slow_to_queue() -> None:
        time.sleep(0.003)
        small.sum()

    assert 0 < median_us(slow_to_queue, flush, 5) < 100
    # Never covered: a TimingError, the LaunchError that blames the host, not the kernel.
    with pytest.raises(TimingError, match=r"took up to \d+ us on the host, longer than the"):
        median_us(lambda: time.sleep(0.1), flush, 1)
    with pytest.raises(LaunchError, match=r"repeats=0; expected an int >= 1"):
        median_us(lambda: None, flush, 0)
    with pytest.raises(LaunchError, match=r"flush is Tensor; expected a CUDA tensor"):
        median_us(lambda: None, torch.ones(16), 30)


def test_medians_in_turns_rotate_the_order_and_time_each_run() -> None:
    torch = _torch()
    from backend.timing import flush_buffer, median_us, medians_in_turns

    flush = flush_buffer()
    tensors = {
        "small": torch.ones(1 << 10, device="cuda"),
        "large": torch.ones(1 << 28, device="cuda"),
        "middle": torch.ones(1 << 24, device="cuda"),
    }
    calls: list[str] = []

    def run(name: str) -> None:
        calls.append(name)
        tensors[name].sum()

    runs = {name: functools.partial(run, name) for name in tensors}
    times = medians_in_turns(runs, flush, 4, warmup=1)
    assert list(times) == ["small", "large", "middle"]
    # One warm-up run each in the mapping's order, then four rounds, each rotated by one more
    # place (the last 12 calls: a sleep that had to grow repeats the rounds, not the warm-up).
    assert calls[:3] == ["small", "large", "middle"]
    assert calls[-12:] == (
        ["small", "large", "middle"]
        + ["large", "middle", "small"]
        + ["middle", "small", "large"]
        + ["small", "large", "middle"]
    )
    assert 0 < times["small"] < 100
    assert times["large"] > 150 and times["large"] > 5 * times["middle"] > 5 * times["small"]
    # One run in turns is `median_us`: the same work, the same protocol.
    alone = medians_in_turns({"large": runs["large"]}, flush, 30)["large"]
    assert 0.8 < alone / median_us(runs["large"], flush, 30) < 1.25


def test_steady_timing_launches_back_to_back_and_reads_the_clock() -> None:
    """`steady_in_turns`: each run's blocks in turns, the time a launch growing with the work,
    and the SM clock read by nvidia-smi during the blocks (the device has it)."""
    torch = _torch()
    from backend.timing import steady_in_turns

    tensors = {
        "small": torch.ones(1 << 20, device="cuda"),
        "large": torch.ones(1 << 28, device="cuda"),
    }
    calls: list[str] = []

    def run(name: str) -> None:
        calls.append(name)
        tensors[name].sum()

    runs = {name: functools.partial(run, name) for name in tensors}
    times = steady_in_turns(runs, launches=20, rounds=2, warmup=1)
    # One warm-up each, then round 0: 20 small, 20 large; round 1 rotated: 20 large, 20 small.
    assert calls == ["small", "large"] + ["small"] * 20 + ["large"] * 40 + ["small"] * 20
    assert list(times) == ["small", "large"]
    # 1 GiB summed from HBM at a few TB/s: 200 to 2000 us a launch; 4 MiB from L2 takes a
    # launch's host time at most (back to back, the host queues each).
    assert 200 < times["large"].us < 2000 and times["large"].us > 5 * times["small"].us
    clock = times["large"].clock
    assert clock is not None and clock.samples > 0
    assert 100 < clock.min_mhz <= clock.median_mhz <= clock.max_mhz < 3000


def test_the_measure_times_long_finalists_back_to_back() -> None:
    """`DecodeMeasure.in_turns` with `steady_from_us` 0: every set of finalists is timed back
    to back too, and those times given, one finite time a finalist. A small problem's launches
    back to back are bound by the host's queuing (140 to 470 us a checked call from Python on
    an H200), not the kernel's 10 us, so the figure lies between the kernel's time without a
    flush and the host's."""
    _torch()
    from backend.timing import medians_in_turns

    operations = [DecodeMatmul(SMALL, DequantConfig(split=split)) for split in (1, 2)]
    measure = DecodeMeasure(SMALL, 1, repeats=30, steady_from_us=0)
    for operation in operations:
        measure(operation)  # checked against torch, as the tuner's first pass does
    steady = measure.in_turns(operations)
    assert len(steady) == 2 and all(0 < us < 2000 for us in steady)
    inputs = measure.inputs()
    runs = {
        str(i): functools.partial(
            op, inputs["a"], inputs["packed"], inputs["scales"], inputs["zeros"]
        )
        for i, op in enumerate(operations)
    }
    protocol = medians_in_turns(runs, measure._flush, 30)
    for index, us in enumerate(steady):
        assert us > 0.1 * protocol[str(index)]

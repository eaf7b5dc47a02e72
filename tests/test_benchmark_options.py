"""The quantized-matmul benchmarks' command lines, on the CPU: ``--shapes`` and ``--options``
are parsed, and bad entries are refused before any GPU is looked for; the profiling script's
``--prefill`` fields take bools as 0/1 or true/false (skipped without torch, which the
benchmarks import)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the benchmark imports torch")

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


def _load(name: str, script: str):
    """The benchmark script `script` as the module `name`."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    # The benchmarks import their sibling modules (matmul, records, ...) by their names.
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


benchmark = _load("quantized_matmul_benchmark", "quantized_matmul.py")
layer_benchmark = _load("quantized_linear_benchmark", "quantized_linear.py")


@pytest.mark.parametrize(
    ("text", "shape"),
    [("4096x12288", (4096, 12288)), (" 8192X57344 ", (8192, 57344)), ("1x1", (1, 1))],
)
def test_parse_shape(text: str, shape: tuple[int, int]) -> None:
    assert benchmark.parse_shape(text) == shape


def test_parse_shapes_takes_the_option_else_the_quick_or_full_list() -> None:
    assert benchmark.parse_shapes("8192x57344, 4096x12288") == [(8192, 57344), (4096, 12288)]
    assert benchmark.parse_shapes(None, quick=True) == [(4096, 12288)]
    assert benchmark.parse_shapes(None) == [
        (4096, 12288),
        (8192, 8192),
        (8192, 57344),
        (28672, 8192),
    ]
    with pytest.raises(ValueError, match="--shapes entry '12x'"):
        benchmark.parse_shapes("4096x12288,12x")


@pytest.mark.parametrize("text", ["4096", "12x", "x8", "0x8", "-4x8", "4x8x2", "ax b"])
def test_a_bad_shape_is_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match=f"--shapes entry {text!r}: expected KxN"):
        benchmark.parse_shape(text)


@pytest.mark.parametrize("script", ["quantized_matmul", "quantized_linear"])
def test_the_command_line_refuses_a_bad_shape_before_looking_for_a_gpu(capsys, script) -> None:
    main = (benchmark if script == "quantized_matmul" else layer_benchmark).main
    with pytest.raises(SystemExit) as exit_info:
        main(["--shapes", "4096x12288,12x"])
    assert exit_info.value.code == 2
    assert "--shapes entry '12x'" in capsys.readouterr().err


def test_option_sets_parse_integers_and_booleans() -> None:
    assert benchmark.parse_overrides("block_m=56,split_dot=true,stream_k=0") == {
        "block_m": 56,
        "split_dot": True,
        "stream_k": 0,
    }
    with pytest.raises(ValueError, match="expected an integer, true or false"):
        benchmark.parse_overrides("block_m=wide")


def _record(path: Path, points: object) -> Path:
    path.write_text(json.dumps({"device": "NVIDIA H200", "points": points}))
    return path


def _point(kernel: str, m: int, ours_us: float, split: int) -> dict:
    return {
        "weight": "i4",
        "k": 4096,
        "n": 12288,
        "m": m,
        "kernel": kernel,
        "ours_us": ours_us,
        "config": {"warps": 4, "split": split},
    }


def test_recorded_configs_take_the_fastest_register_dequant_point(tmp_path: Path) -> None:
    first = _record(
        tmp_path / "a.json",
        [_point("register_dequant", 1, 20.0, 2), _point("mma", 1, 5.0, 16)],
    )
    second = _record(
        tmp_path / "b.json",
        [_point("register_dequant", 1, 18.5, 4), _point("register_dequant", 16, 30.0, 8)],
    )
    recorded = benchmark.recorded_configs([first, second])
    assert recorded == {
        ("i4", 4096, 12288, 1): benchmark.DequantConfig(warps=4, split=4),
        ("i4", 4096, 12288, 16): benchmark.DequantConfig(warps=4, split=8),
    }


@pytest.mark.parametrize("content", [{"device": "NVIDIA H200", "runs": []}, [1, 2], {"points": 3}])
def test_a_file_that_is_no_record_is_refused_by_name(tmp_path: Path, content: object) -> None:
    path = tmp_path / "not_a_record.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError, match="not_a_record.json: no 'points' list"):
        benchmark.recorded_configs([path])


def test_the_command_line_refuses_configs_that_are_no_record(capsys, tmp_path) -> None:
    path = tmp_path / "runs_only.json"
    path.write_text(json.dumps({"runs": []}))
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main(["--configs-from", str(path)])
    assert exit_info.value.code == 2
    assert "--configs-from" in capsys.readouterr().err


def test_batched_parts_need_recorded_configurations(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main(["--batched-parts"])
    assert exit_info.value.code == 2
    assert "--batched-parts needs --configs-from" in capsys.readouterr().err


def test_a_variant_measures_the_batches_whose_configuration_it_has() -> None:
    """Tuned at 1 and 16, the base operations serve every batch from the largest tuned batch
    not above it; a variant that could not change the configuration of 16 (left out) measures
    the batches served by 1 alone."""
    base = {1: "config of 1", 16: "config of 16"}
    batches = [1, 4, 16, 256]
    assert benchmark.variant_batches(base, base, batches) == batches
    assert benchmark.variant_batches(base, {1: "variant of 1"}, batches) == [1, 4]
    assert benchmark.variant_batches(base, {16: "variant of 16"}, batches) == [16, 256]
    assert benchmark.variant_batches(base, {}, batches) == []


@pytest.mark.parametrize(
    ("space", "compact", "deterministic"),
    [("full", False, True), ("compact", True, True), ("combining", False, False)],
)
def test_the_space_option_reaches_the_tuner(monkeypatch, space, compact, deterministic) -> None:
    """``--space`` picks `decode_search_space`'s arguments for every tuned batch, each tuned
    at its own bucket's measure."""
    calls = []

    class FakeDecode:
        launches = 1

    def fake_tuned(problem, m, **options):
        calls.append((problem.k, problem.n, m, options["compact"], options["deterministic"]))
        return FakeDecode()

    monkeypatch.setattr(benchmark.DecodeMatmul, "tuned", fake_tuned)
    monkeypatch.setattr(benchmark, "DecodeMeasure", lambda *args, **kwargs: None)
    problem = benchmark.Problem(benchmark.dtypes.i2, 8192, 8192, None, None, None, None)
    operations = benchmark.tuned(problem, [1, 16], flush=None, repeats=30, space=space)
    assert sorted(operations) == [1, 16]
    assert calls == [(8192, 8192, m, compact, deterministic) for m in (1, 16)]


def test_the_command_line_refuses_an_unknown_space(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main(["--space", "nondeterministic"])
    assert exit_info.value.code == 2
    assert "combining" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("wanted", "count"),
    [
        ("in flight tma$", 5),  # the five tile shapes, none with more after "tma"
        ("in flight tma$|staged store", 8),
        ("tma group 8 hoisted staged store$", 1),
        ("no such configuration", 0),
    ],
)
def test_the_f16_benchmark_chooses_configurations_by_parts(wanted: str, count: int) -> None:
    matmul_benchmark = _load("matmul_benchmark", "matmul.py")
    names = [name for name in matmul_benchmark.CONFIGS if matmul_benchmark.chosen(name, wanted)]
    assert len(names) == count, names


profile = _load("profile_quantized_matmul_benchmark", "profile_quantized_matmul.py")


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("units_k=8,stages=3", {"units_k": 8, "stages": 3}),
        (
            "depth=1,refill_in_place=true,staged_store=1",
            {"depth": 1, "refill_in_place": True, "staged_store": True},
        ),
        (
            " refill_in_place=False , staged_store=0",
            {"refill_in_place": False, "staged_store": False},
        ),
        ("", {}),
    ],
)
def test_the_profile_script_takes_bool_fields_as_numbers_or_words(text: str, fields: dict) -> None:
    from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig

    assert profile.parse_fields(text, WgmmaDequantConfig, "--prefill") == fields


@pytest.mark.parametrize(
    "text", ["stages=true", "refill_in_place=2", "refill_in_place=yes", "no_such_field=1", "stages"]
)
def test_the_profile_script_refuses_a_bad_field_by_name(text: str) -> None:
    from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig

    with pytest.raises(SystemExit, match=r"--prefill .* is not a WgmmaDequantConfig field=int"):
        profile.parse_fields(text, WgmmaDequantConfig, "--prefill")


class _Kernel:
    """An option set's compiled kernel, as `run_in_turns` reads it."""

    variant = "wgmma_dequant"
    launches = 1

    def __init__(self, problem, block_m: int) -> None:
        self.problem, self.config_record = problem, {"block_m": block_m}


@pytest.mark.parametrize("humming", [True, False])
def test_option_sets_and_peers_are_timed_in_turns(monkeypatch, humming: bool) -> None:
    """At each batch, every option set's kernel (each checked first), cuBLAS and Humming go
    to one `medians_in_turns` call, and each point takes its own kernel's median with the
    peers' medians of the same call; without Humming, the point says why."""
    import torch

    problem = benchmark.Problem.make(benchmark.dtypes.from_name("i4"), 128, 64, torch.device("cpu"))
    kernels = [_Kernel(problem, 128), _Kernel(problem, 256)]
    checked, calls = [], []

    def checked_run(operation, a):
        checked.append((operation.config_record["block_m"], tuple(a.shape)))
        return lambda: None

    def medians(runs, flush, repeats):
        calls.append((list(runs), repeats))
        base = 100.0 * len(calls)
        return {name: base + index for index, name in enumerate(runs)}

    peer = (lambda: None, "") if humming else (None, "Humming: no layer")
    monkeypatch.setattr(benchmark, "checked_run", checked_run)
    monkeypatch.setattr(benchmark, "humming_layer", lambda weight, w: (None, "unused"))
    monkeypatch.setattr(benchmark, "humming_run", lambda layer, note, a, w: peer)
    monkeypatch.setattr(benchmark, "medians_in_turns", medians)
    points = benchmark.run_in_turns(kernels, [16, 32], torch.zeros(4), 31)

    names = ["ours 0", "ours 1", "cuBLAS"] + (["Humming"] if humming else [])
    assert calls == [(names, 31), (names, 31)]
    assert checked == [(128, (16, 128)), (256, (16, 128)), (128, (32, 128)), (256, (32, 128))]
    assert [(p.m, p.config["block_m"], p.ours_us) for p in points] == [
        (16, 128, 100.0),
        (16, 256, 101.0),
        (32, 128, 200.0),
        (32, 256, 201.0),
    ]
    for p in points:
        base = 100.0 * (1 + (p.m == 32))
        assert (p.cublas_us, p.timing) == (base + 2, "in turns")
        assert p.speedup_over_cublas == pytest.approx(p.cublas_us / p.ours_us)
        if humming:
            assert (p.humming_us, p.notes) == (base + 3, "")
            assert p.ratio_to_best_peer == pytest.approx(p.cublas_us / p.ours_us)
        else:
            assert (p.humming_us, p.notes) == (None, "Humming: no layer")


def test_the_layer_benchmark_keeps_the_tuning_finalists() -> None:
    """The finalists are the trials timed again in turns, in search-space order, with both
    times; an operation from a stored record, or none at all, has none."""
    from types import SimpleNamespace

    from backend.autotune import Trial, TuningResult

    trials = (
        Trial({"c": 0}, "measured", us=10.4, turns_us=10.1),
        Trial({"c": 1}, "pruned", detail="too many waves"),
        Trial({"c": 2}, "measured", us=12.0),
        Trial({"c": 3}, "measured", us=10.0, turns_us=10.3),
    )
    tuned = SimpleNamespace(tuning=TuningResult({"c": 0}, None, False, 10.1, trials))
    assert layer_benchmark.tuning_finalists(tuned) == [
        {"candidate": {"c": 0}, "status": "measured", "us": 10.4, "detail": "", "turns_us": 10.1},
        {"candidate": {"c": 3}, "status": "measured", "us": 10.0, "detail": "", "turns_us": 10.3},
    ]
    stored = SimpleNamespace(tuning=TuningResult({"c": 0}, None, True, 10.1))
    assert layer_benchmark.tuning_finalists(stored) == []
    assert layer_benchmark.tuning_finalists(SimpleNamespace(tuning=None)) == []
    assert layer_benchmark.tuning_finalists(None) == []


def test_with_steady_the_same_runs_are_timed_back_to_back(monkeypatch) -> None:
    """``--steady N``: after each batch's medians, the same runs (our option sets and the
    peers) go to one `steady_in_turns` call with N launches a block, and each run becomes a
    `SteadyPoint` with its clock and power; none without it."""
    import torch

    from backend.gpu_clocks import ClockSummary
    from backend.timing import SteadyTime

    problem = benchmark.Problem.make(benchmark.dtypes.from_name("i8"), 128, 64, torch.device("cpu"))
    kernels = [_Kernel(problem, 128), _Kernel(problem, 256)]
    calls = []

    def steady(runs, launches):
        calls.append((list(runs), launches))
        clock = ClockSummary(1500.0 + len(calls), 1400.0, 1600.0, 690.0, 12)
        return {
            name: SteadyTime(10.0 * (index + 1), None if name == "cuBLAS" else clock)
            for index, name in enumerate(runs)
        }

    monkeypatch.setattr(benchmark, "checked_run", lambda operation, a: lambda: None)
    monkeypatch.setattr(benchmark, "humming_layer", lambda weight, w: (None, "unused"))
    monkeypatch.setattr(benchmark, "humming_run", lambda layer, note, a, w: (None, "none"))
    monkeypatch.setattr(benchmark, "medians_in_turns", lambda runs, f, r: dict.fromkeys(runs, 1.0))
    monkeypatch.setattr(benchmark, "steady_in_turns", steady)
    out: list = []
    benchmark.run_in_turns(kernels, [16, 32], torch.zeros(4), 30, 7, out)
    assert calls == [(["ours 0", "ours 1", "cuBLAS"], 7)] * 2
    assert [(p.m, p.run, p.kernel, p.us, p.clock_mhz, p.config) for p in out] == [
        (16, "ours 0", "wgmma_dequant", 10.0, 1501.0, {"block_m": 128}),
        (16, "ours 1", "wgmma_dequant", 20.0, 1501.0, {"block_m": 256}),
        (16, "cuBLAS", "cuBLAS", 30.0, None, {}),
        (32, "ours 0", "wgmma_dequant", 10.0, 1502.0, {"block_m": 128}),
        (32, "ours 1", "wgmma_dequant", 20.0, 1502.0, {"block_m": 256}),
        (32, "cuBLAS", "cuBLAS", 30.0, None, {}),
    ]
    assert all(p.launches == 7 and (p.weight, p.k, p.n) == ("i8", 128, 64) for p in out)
    table = benchmark.steady_table(out)
    assert "| i8 | 128 | 64 | 16 | ours 1 | 20.0 | 1501 (1400) | 690 | block_m=256 |" in table
    assert "| i8 | 128 | 64 | 16 | cuBLAS | 30.0 | n/a | n/a |  |" in table
    # Without --steady, no back-to-back timing at all.
    calls.clear()
    benchmark.run_in_turns(kernels, [16], torch.zeros(4), 30)
    assert calls == []


def test_the_command_line_refuses_a_negative_steady(capsys) -> None:
    with pytest.raises(SystemExit):
        benchmark.main(["--steady", "-1"])
    assert "--steady must be 0 or more, got -1" in capsys.readouterr().err


def test_a_long_layer_point_is_timed_back_to_back_with_its_peers(monkeypatch) -> None:
    """`quantized_linear.py --steady`: `forward`, cuBLAS and Humming (not the dequantizing
    runs) in one `steady_in_turns` call, blocks a quarter second long of the fastest's protocol
    time; their figures and the second table exactly; none for a point without them."""
    from types import SimpleNamespace

    from backend.gpu_clocks import ClockSummary
    from backend.timing import SteadyTime

    calls = []

    def steady(runs, launches):
        calls.append((list(runs), launches))
        clock = ClockSummary(1335.0, 1080.0, 1500.0, 690.0, 40)
        return {
            name: SteadyTime(5000.0 + 100 * i, None if name == "Humming" else clock)
            for i, name in enumerate(runs)
        }

    monkeypatch.setattr(layer_benchmark, "steady_in_turns", steady)
    runs = dict.fromkeys(
        ["forward", "dequantize-then-matmul", "cuBLAS fp16", "Humming"], lambda: None
    )
    times = {"forward": 5117.0, "dequantize-then-matmul": 5600.0, "cuBLAS fp16": 5080.8}
    times["Humming"] = 5398.3
    figures = layer_benchmark.steady_figures(runs, times)
    assert calls == [(["forward", "cuBLAS fp16", "Humming"], 50)]
    assert figures == {
        "forward": {
            "us": 5000.0,
            "launches": 50,
            "clock_mhz": 1335.0,
            "min_clock_mhz": 1080.0,
            "power_w": 690.0,
        },
        "cuBLAS fp16": {
            "us": 5100.0,
            "launches": 50,
            "clock_mhz": 1335.0,
            "min_clock_mhz": 1080.0,
            "power_w": 690.0,
        },
        "Humming": {
            "us": 5200.0,
            "launches": 50,
            "clock_mhz": None,
            "min_clock_mhz": None,
            "power_w": None,
        },
    }
    long = SimpleNamespace(weight="i8", k=8192, n=57344, m=4096, path="prefill", steady=figures)
    short = SimpleNamespace(weight="i8", k=4096, n=12288, m=256, path="prefill", steady={})
    assert layer_benchmark.steady_table([short, long]).splitlines()[2:] == [
        "| i8 | 8192 | 57344 | 4096 | prefill | 50 | 5000.0 (1335) | 5100.0 (1335) | 5200.0 "
        "| 1.02x | 1.04x |"
    ]
    assert layer_benchmark.steady_table([short]) == ""

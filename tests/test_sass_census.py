"""The SASS census benchmark (`benchmarks/sass_census.py`) on the CPU: a recorded decode
configuration and its refilled variant compiled, disassembled and written as table and JSON;
bad command lines refused (skipped without torch, which the timed benchmark it reads imports)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from backend.occupancy import resident_blocks

pytest.importorskip("torch", reason="the census reads the timed benchmark, which imports torch")

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"
_spec = importlib.util.spec_from_file_location(
    "sass_census_benchmark", BENCHMARKS / "sass_census.py"
)
census = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = census
sys.path.insert(0, str(BENCHMARKS))
try:
    _spec.loader.exec_module(census)
finally:
    sys.path.remove(str(BENCHMARKS))

RECORDED = {
    "weight": "i4",
    "kernel": "register_dequant",
    "k": 2048,
    "n": 1024,
    "m": 16,
    "ours_us": 10.0,
    "config": {"warps": 2, "units_k": 8, "split": 2, "late_scale": True},
}


def test_a_recorded_configuration_and_its_variant_are_counted(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "run.json"
    runs.write_text(json.dumps({"points": [RECORDED, {**RECORDED, "kernel": "mma"}]}))
    status = census.main(
        [
            "--kernels=register_dequant",
            "--weights=i4",
            "--shapes=2048x1024",
            f"--configs-from={runs}",
            # The second variant is invalid (a refill needs depth 1): left out.
            "--variants=refill_in_place=true;refill_in_place=true,depth=2",
            f"--output={tmp_path}",
        ]
    )
    assert status == 0
    record = json.loads((tmp_path / "sass_census.json").read_text())
    assert record["arch"] == "sm_90a" and record["nvrtc"].startswith("13.")
    ring, refilled = record["points"]
    assert [p["config"]["refill_in_place"] for p in record["points"]] == [False, True]
    assert (ring["k"], ring["n"], ring["m"], ring["kernel"]) == (2048, 1024, 16, "register_dequant")
    # 2 warps x 64 columns x a k-tile of 128, unrolled twice: 8 x 8 x 2 mma of n8 k16.
    assert ring["tensor_core"] == refilled["tensor_core"] == ring["census"]["HMMA"] == 128
    assert ring["copies_of_loads"] > 0 == refilled["copies_of_loads"]
    assert refilled["loop_instructions"] < ring["loop_instructions"]
    # Blocks an SM from the kernel's resources; its grid: 1024 / 128 columns, one 16-row block,
    # split 2, so 16 blocks on the default 132 SMs.
    for point in record["points"]:
        resident = resident_blocks(point["registers"], 64, point["shared_bytes"]).blocks
        assert point["blocks_per_sm"] == resident > 0
        assert point["waves"] == round(16 / (resident * 132), 3)
    assert record["sms"] == 132
    table = (tmp_path / "sass_census.md").read_text()
    assert table.splitlines()[0].startswith(
        "| weight | kernel | K | N | M | registers | blocks an SM | waves |"
    )
    assert "refill_in_place=True" in table and table in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kernels=simt"], "--kernels takes register_dequant, wgmma_dequant, batch_paths"),
        (["--kernels=register_dequant"], "register_dequant takes its configurations from"),
        (["--kernels=wgmma_dequant", "--shapes=12x"], "--shapes entry '12x'"),
        (["--variants=colour=1", "--configs-from=x"], "['colour'] are not DequantConfig fields"),
        (["--configs-from=no_such_record.json"], "--configs-from: [Errno 2]"),
        (["--sms=0"], "--sms 0: expected at least 1"),
    ],
)
def test_a_bad_command_line_is_refused(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        census.main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err

"""`backend.compile`'s memo of lowerings (`lower_memoised`, filled by `lower_all` too): an equal
program, built again, is lowered once for the same architecture, constants and switches, and
again for any other; the memo keeps its size; an error is raised every time."""

from __future__ import annotations

import importlib

import pytest

from backend import compile
from backend.compile import lower_all, lower_memoised
from ir import dtypes
from ir.errors import SpecializationError
from ir.examples.matmul import matmul
from ir.examples.vector_add import vector_add
from ir.examples.wgmma_dequant_matmul import WgmmaDequantConfig, wgmma_dequant_matmul

compile_module = importlib.import_module("backend.compile")  # the module, not the function
SPLIT_TAIL = WgmmaDequantConfig(block_m=8, units_k=2, stages=3, split=2, tail_wave=6)


@pytest.fixture(autouse=True)
def empty_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from an empty memo (and leaves the module's as it found it)."""
    monkeypatch.setattr(compile_module, "_LOWERED", type(compile_module._LOWERED)())


def test_an_equal_program_built_again_is_lowered_once() -> None:
    first = wgmma_dequant_matmul(dtypes.i4, 64, SPLIT_TAIL)
    again = wgmma_dequant_matmul(dtypes.i4, 64, SPLIT_TAIL)
    assert first is not again
    constants = {"n": 256, "k": 512}
    kernel = lower_memoised(first, "sm_90a", constants)
    assert lower_memoised(again, "sm_90a", dict(constants)) is kernel
    assert len(compile_module._LOWERED) == 1


@pytest.mark.parametrize(
    "other",
    [
        {"arch": "sm_80"},
        {"constants": {"n": 256, "k": 1024}},
        {"options": {"wgmma": False}},
        {"program": wgmma_dequant_matmul(dtypes.i8, 64, SPLIT_TAIL)},
    ],
    ids=["arch", "constants", "switch", "program"],
)
def test_anything_else_is_lowered_anew(other: dict) -> None:
    base = {
        "program": wgmma_dequant_matmul(dtypes.i4, 64, SPLIT_TAIL),
        "arch": "sm_90a",
        "constants": {"n": 256, "k": 512},
        "options": {},
    }
    changed = {**base, **other}
    kernel = lower_memoised(base["program"], base["arch"], base["constants"], **base["options"])
    made = lower_memoised(
        changed["program"], changed["arch"], changed["constants"], **changed["options"]
    )
    assert made is not kernel and made.source != kernel.source
    assert len(compile_module._LOWERED) == 2


def test_the_memo_keeps_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_module, "LOWERED_MEMO", 2)
    programs = [matmul(64, 64, 64, block) for block in (16, 32, 64)]
    kernels = [lower_memoised(program, "sm_80") for program in programs]
    assert len(compile_module._LOWERED) == 2
    # The oldest went first; the two later ones are still there.
    assert lower_memoised(programs[2], "sm_80") is kernels[2]
    assert lower_memoised(programs[1], "sm_80") is kernels[1]
    assert lower_memoised(programs[0], "sm_80") is not kernels[0]


def test_an_error_is_raised_every_time_and_compile_uses_the_memo() -> None:
    program = wgmma_dequant_matmul(dtypes.i4, 64, SPLIT_TAIL)
    for _ in range(2):
        with pytest.raises(SpecializationError, match="constant k"):
            lower_memoised(program, "sm_90a", {"n": 256, "k": 100})
    assert not compile_module._LOWERED
    one, two = (compile(vector_add(), "sm_80") for _ in range(2))
    assert one.lowered is two.lowered and one.source == two.source


def test_lower_all_fills_the_memo_and_lowers_only_what_it_lacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kernels `lower_all` made are `compile`'s (a tuner lowers its candidates in worker
    processes, then builds them in threads); a second call lowers nothing it holds, and a
    program that fails is an exception in its place, not remembered."""
    programs = [matmul(64, 64, 64, block) for block in (16, 32)]
    bad = wgmma_dequant_matmul(dtypes.i4, 64, SPLIT_TAIL)
    first = lower_all([(programs[0], None), (bad, {"n": 256, "k": 100})], "sm_80", processes=1)
    assert isinstance(first[1], SpecializationError)
    assert lower_memoised(programs[0], "sm_80") is first[0]
    lowered: list[object] = []
    real = compile_module._lower_job
    monkeypatch.setattr(compile_module, "_lower_job", lambda job: lowered.append(job) or real(job))
    again = lower_all([(programs[0], None), (programs[1], None)], "sm_80", processes=1)
    assert again[0] is first[0] and [job[0] for job in lowered] == [programs[1]]
    assert lower_memoised(programs[1], "sm_80") is again[1]
    assert len(compile_module._LOWERED) == 2


def test_lower_all_keeps_one_pool_whatever_its_job_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls of different job counts share one pool of the default size (the CPU count, at most
    `LOWERING_PROCESSES`), not one pool each."""
    sizes: list[int] = []

    class Pool:
        def map(self, function, jobs):
            return [function(job) for job in jobs]

    monkeypatch.setattr(compile_module.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(compile_module, "_lowering_pool", lambda size: sizes.append(size) or Pool())
    programs = [matmul(64, 64, 64, block) for block in (16, 32, 64)]
    lower_all([(programs[0], None), (programs[1], None)], "sm_80")
    lower_all([(programs[2], None), (vector_add(), None)], "sm_80")
    lower_all([(matmul(64, 64, 64, 8), None)], "sm_80")  # one job: lowered here
    assert sizes == [compile_module.LOWERING_PROCESSES] * 2


@pytest.mark.parametrize(
    "constants", [[("k", 512), ("n", 256)], {"n": 256, "k": [512]}, {"n": 256, 3: 512}]
)
def test_bad_constants_are_judged_by_the_lowering(constants: object) -> None:
    """Constants the memo cannot key (not a mapping, an unhashable value, keys that do not sort)
    reach `lower`, which refuses them with the project's error; nothing is remembered."""
    program = wgmma_dequant_matmul(dtypes.i4, 64, SPLIT_TAIL)
    with pytest.raises(SpecializationError):
        lower_memoised(program, "sm_90a", constants)  # type: ignore[arg-type]
    assert not compile_module._LOWERED

"""How a rank computes on CPU: one thread, denormals flushed, one core per rank, and the setting put back
after a measurement.

Run: `pytest tests/executor/test_cpu.py`.
"""

from __future__ import annotations

import os

import pytest
import torch

from adaptis_plan.executor import cpu

pytestmark = pytest.mark.unit


def _denormal() -> float:
    return float(torch.tensor([1e-30]) * torch.tensor([1e-10]))  # 1e-40: a float32 denormal


def test_a_cpu_rank_flushes_denormals_and_a_measurement_puts_the_settings_back() -> None:
    threads = torch.get_num_threads()
    assert _denormal() > 0.0  # torch's default keeps them
    with cpu.cpu_rank():
        assert _denormal() == 0.0
        assert torch.get_num_threads() == 1
    assert _denormal() > 0.0
    assert torch.get_num_threads() == threads


def test_a_measurement_inside_a_rank_leaves_the_rank_as_it_was() -> None:
    # the CPU bench profiles layers inside its ranks between steps: the steps after must still flush
    threads = torch.get_num_threads()
    try:
        cpu.enter_cpu_rank()
        with cpu.cpu_rank():
            pass
        assert _denormal() == 0.0
        assert torch.get_num_threads() == 1
    finally:
        cpu._flush_denormals(False)
        torch.set_num_threads(threads)
    assert _denormal() > 0.0


@pytest.fixture
def affinity():  # noqa: ANN201 - put this process's cores back after a test pins it
    before = os.sched_getaffinity(0)
    yield sorted(before)
    os.sched_setaffinity(0, before)


def test_ranks_that_fit_one_per_core_are_pinned_to_one_each(affinity: list[int], monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.delenv(cpu.PIN_ENV, raising=False)
    if len(affinity) < 2:
        pytest.skip("needs two usable cores")
    assert cpu.pin_core(1, 2) == affinity[1]
    assert os.sched_getaffinity(0) == {affinity[1]}
    assert cpu.pinned_core() == affinity[1]


def test_a_lone_process_too_many_ranks_or_the_opt_out_stay_unpinned(affinity: list[int], monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.delenv(cpu.PIN_ENV, raising=False)
    assert cpu.pin_core(0, 1) is None  # the profiler, a reference step: no neighbour to keep apart
    assert cpu.pin_core(0, len(affinity) + 1) is None  # more ranks than cores: let the kernel share them
    monkeypatch.setenv(cpu.PIN_ENV, "0")
    assert cpu.pin_core(0, 2) is None
    assert sorted(os.sched_getaffinity(0)) == affinity
    assert cpu.pinned_core() == (affinity[0] if len(affinity) == 1 else None)


def test_local_position_is_torchruns(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert cpu.local_position() == (0, 1)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert cpu.local_position() == (1, 2)

"""How a rank computes on CPU: one thread, denormals flushed, and the setting put back after a measurement.

Run: `pytest tests/executor/test_cpu.py`.
"""

from __future__ import annotations

import torch

from adaptis_plan.executor import cpu


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

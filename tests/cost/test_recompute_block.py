"""Megatron's full recomputation by block (`--recompute-method block --recompute-num-layers N`,
adaptis_plan/cost/recompute.py `block_method_modes`): the first N decoder blocks of each stage
recompute in full, the rest keep everything; memory and time follow per layer."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_common import llama_like, one_f_one_b
from helpers_common import train_config as _train

from adaptis_plan.core import Layout
from adaptis_plan.cost.recompute import block_method_modes
from adaptis_plan.cost.table import build_cost_table
from adaptis_plan.inputs.hardware import load_hardware
from adaptis_plan.judge.simulate import simulate

H200 = load_hardware("h200")
KINDS = ["embedding"] + ["decoder"] * 8 + ["head"]
BOUNDS = (0, 5, 10)  # stage 0: the embedding and 4 blocks; stage 1: 4 blocks and the head


def test_the_first_n_blocks_of_each_stage_recompute_in_full() -> None:
    assert block_method_modes(BOUNDS, KINDS, [2, 1]) == (
        ["none", "full", "full", "none", "none", "full", "none", "none", "none", "none"]
    )
    assert block_method_modes(BOUNDS, KINDS, [0, 0]) == ["none"] * 10
    # more than the stage holds: every block (the embedding and the head never recompute)
    assert block_method_modes(BOUNDS, KINDS, [9, 4]) == ["none"] + ["full"] * 8 + ["none"]
    with pytest.raises(ValueError, match="1 counts for 2 stages"):
        block_method_modes(BOUNDS, KINDS, [1])


def test_memory_falls_and_time_grows_with_the_count() -> None:
    model, training = llama_like(8), _train(pp=2)
    layout = Layout(bounds=BOUNDS, stage_device=(0, 1), num_devices=2)
    plain = build_cost_table(model, H200, training)
    peaks, steps = [], []
    for n in range(5):
        table = build_cost_table(model, H200, training, recompute=block_method_modes(BOUNDS, KINDS, [n, n]))
        rerun = [1 + j for j in range(n)] + [5 + j for j in range(n)]
        others = [j for j in range(10) if j not in rerun]
        # a recomputed block keeps its input and runs its forward again in I; the others are unchanged
        assert np.allclose(table.i_s[:, rerun], plain.i_s[:, rerun] + plain.f_s[:, rerun])
        assert np.array_equal(table.i_s[:, others], plain.i_s[:, others])
        assert np.all(table.act_bytes[rerun] == 4096 * 4096 * 2)
        r = simulate(layout, table, one_f_one_b(2, 8), 8)
        peaks.append(r.peak_memory_bytes[0])
        steps.append(r.step_time_s)
    assert all(a > b for a, b in zip(peaks, peaks[1:], strict=False))
    assert all(a < b for a, b in zip(steps, steps[1:], strict=False))
    full = build_cost_table(model, H200, training.model_copy(update={"recompute": "full"}))
    assert peaks[-1] == pytest.approx(simulate(layout, full, one_f_one_b(2, 8), 8).peak_memory_bytes[0])
    assert peaks[0] == pytest.approx(simulate(layout, plain, one_f_one_b(2, 8), 8).peak_memory_bytes[0])

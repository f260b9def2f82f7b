"""bench.program_replay: each device's program run alone, without communication, against the layer timings."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from adaptis_plan.executor.profile import distinct_layers
from adaptis_plan.inputs.models.load import load_model
from adaptis_plan.planfile.io import plan_layout, plan_programs
from adaptis_plan.usecases import load_plan_and_model
from bench import program_replay


@pytest.mark.slow  # one process per device, each timing the model's layers
def test_every_device_stage_and_op_is_replayed_and_charged(zbv_plan_path: str, tmp_path: Path) -> None:
    rows = program_replay.run(zbv_plan_path, rounds=1, repeats=1, work=tmp_path)
    plan, _ = load_plan_and_model(zbv_plan_path)
    layout, programs = plan_layout(plan), plan_programs(plan)
    want = {(d, a.stage, a.op): 0 for d, prog in enumerate(programs) for a in prog}
    for d, prog in enumerate(programs):
        for a in prog:
            want[(d, a.stage, a.op)] += 1
    assert {(r.device, r.stage, r.op): r.num_actions for r in rows} == want
    for r in rows:
        assert layout.stage_device[r.stage] == r.device
        assert r.replay_s > 0
        assert set(r.charged_s) == set(program_replay.TIMINGS) and min(r.charged_s.values()) > 0
    assert "replay busy" in program_replay.render(rows)


def test_round_robin_times_every_distinct_layer_and_op() -> None:
    model = load_model("tiny-llama")
    got = program_replay.round_robin_times(
        model, seq_len=16, micro_batch_size=1, repeats=1, warmup=0, seed=0, reverse=True
    )
    assert set(got) == {g[0] for g in distinct_layers(model)}
    for times in got.values():
        assert set(times) == {"f", "i", "w", "w_hot", "b"} and min(times.values()) > 0


def test_the_loopback_hands_each_receive_its_boundary_shape() -> None:
    act, grad = ((1, 8, 4), torch.float32), ((1, 8, 6), torch.float32)
    loop = program_replay.Loopback({0: act, 1: grad}, seed=0)
    assert loop.recv(("act", 0, 3)).shape == (1, 8, 4)  # stage 1 receives stage 0's output
    assert loop.recv(("grad", 2, 0)).shape == (1, 8, 6)  # stage 1 receives stage 2's input gradient


def test_the_reading_follows_the_figures() -> None:
    mixed = program_replay._reading([-0.05, 0.03], [-0.12, -0.10])
    assert "within 5%" in mixed and "no common sign" in mixed and "profile timing is the closer" in mixed
    slower = program_replay._reading([0.04, 0.09], [0.01, -0.02])
    assert "Every device ran slower" in slower and "round-robin timing is the closer" in slower
    assert "Every device ran faster" in program_replay._reading([-0.04, -0.01], [-0.2, -0.1])

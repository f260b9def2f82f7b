"""Every adaptive plan exports to a torch CSV that torch's own parser, validator, send/recv
lowering and comms simulator accept (whatever the placement: irregular, uneven stages per
device, V, split heads)."""

from __future__ import annotations

import pytest

from adaptis_plan.planfile.export import to_torch_csv
from adaptis_plan.planfile.io import plan_layout, plan_programs
from adaptis_plan.usecases import PlanRequest, make_plan_for

CASES = [
    ("gemma-s", "h200", 4, 8, 1024, None),
    ("deepseek-s", "h200", 4, 16, 2048, None),
    ("nemotron-h-s", "h200", 4, 8, 4096, None),
    ("llama-2-s", "h200", 4, 12, 1024, None),
    ("gemma-s", "h200", 3, 6, 1024, 3),
    ("tiny-gemma", "cpu", 2, 4, 64, None),
]


@pytest.mark.parametrize(("model", "hw", "pp", "mb", "seq", "chunks"), CASES)
def test_adaptive_plan_csv_passes_torch_validation(model, hw, pp, mb, seq, chunks) -> None:
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    outcome = make_plan_for(
        PlanRequest.of(
            model_arg=model,
            hardware_arg=hw,
            pp=pp,
            num_microbatches=mb,
            seq_len=seq,
            head_chunks=chunks,
            time_limit_s=1.0,
            hard_stop=False,
        )
    )
    layout, programs = plan_layout(outcome.plan), plan_programs(outcome.plan)
    csv = to_torch_csv(programs)
    actions = {
        rank: [schedules._Action.from_str(cell) for cell in row.split(",")]
        for rank, row in enumerate(csv.strip().splitlines())
    }
    num_stages = layout.num_stages
    mapping = schedules._validate_schedule(actions, pp, num_stages, mb)
    assert mapping == dict(enumerate(layout.stage_device))
    with_comms = schedules._add_send_recv(actions, stage_to_rank=mapping.__getitem__, num_stages=num_stages)
    schedules._simulate_comms_compute(with_comms, mapping.__getitem__, num_stages)

"""Interleaved 1F1B (Megatron virtual pipeline, arXiv 2104.04473): 1F1B over several stages per
device, depth first within groups of micro-batches.

Classic builder: pure, `build(stage_device, num_devices, num_microbatches) -> Programs`, loop
placement with any number k >= 1 of stages per device.

Definition (same order as torch's `ScheduleInterleaved1F1B`): micro-batches are cut into
max(1, M // P) consecutive groups (`_common.microbatch_groups`; g = the first group's size).
A device's forward order walks each group through its local stages 0..k-1, its backward
order through k-1..0. Device d runs W = min((k-1)*g + 2*(P-1-d), k*M) warm-up forwards,
then alternates the next forward with the next backward, then drains the backwards.
Beyond torch: M not a multiple of the group count (torch rejects it) gets groups whose sizes
differ by one.
"""

from __future__ import annotations

from adaptis_plan.core import Action, Programs
from adaptis_plan.schedules._common import check_args, interleaved_orders, microbatch_groups

NAME = "Interleaved1F1B"


def build(stage_device: tuple[int, ...], num_devices: int, num_microbatches: int) -> Programs:
    k = check_args(NAME, stage_device, num_devices, num_microbatches, "loop")
    groups = microbatch_groups(num_microbatches, num_devices)
    total = k * num_microbatches
    programs: Programs = []
    for d in range(num_devices):
        forward, backward = interleaved_orders(d, num_devices, k, groups)
        warmup = min((k - 1) * len(groups[0]) + 2 * (num_devices - 1 - d), total)
        program = [Action(s, "F", m) for s, m in forward[:warmup]]
        for j, (stage, mb) in enumerate(backward):
            if warmup + j < total:
                f_stage, f_mb = forward[warmup + j]
                program.append(Action(f_stage, "F", f_mb))
            program.append(Action(stage, "B", mb))
        programs.append(program)
    return programs

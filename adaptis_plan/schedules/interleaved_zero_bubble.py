"""Interleaved zero bubble (ZB1P, arXiv 2401.10241): interleaved 1F1B with the backward split into
I (input gradients, on the critical path) and W (weight gradients, deferred into bubbles).

Classic builder: pure, `build(stage_device, num_devices, num_microbatches) -> Programs`, loop
placement with any number k >= 1 of stages per device.

Definition (same order as torch's `ScheduleInterleavedZeroBubble`, whose idle slots are
dropped): forward and backward orders as Interleaved1F1B (`_common.interleaved_orders`).
Device d runs W = min((k-1)*g + (P-1-d), k*M) warm-up forwards (one per hop from the last
device instead of two: I is short, so the first backward arrives sooner). Then, for the j-th
backward: the next forward (if any), I of that backward, and, once d backwards have run,
the W of backward j - d: each device keeps d weight gradients in hand to fill its cool-down
bubble. The held W's run at the end, oldest first.
"""

from __future__ import annotations

from adaptis_plan.core import Action, Programs
from adaptis_plan.schedules._common import check_args, interleaved_orders, microbatch_groups

NAME = "InterleavedZeroBubble"


def build(stage_device: tuple[int, ...], num_devices: int, num_microbatches: int) -> Programs:
    k = check_args(NAME, stage_device, num_devices, num_microbatches, "loop")
    groups = microbatch_groups(num_microbatches, num_devices)
    total = k * num_microbatches
    programs: Programs = []
    for d in range(num_devices):
        forward, backward = interleaved_orders(d, num_devices, k, groups)
        warmup = min((k - 1) * len(groups[0]) + (num_devices - 1 - d), total)
        held = d  # weight gradients deferred on this device
        program = [Action(s, "F", m) for s, m in forward[:warmup]]
        for j, (stage, mb) in enumerate(backward):
            if warmup + j < total:
                f_stage, f_mb = forward[warmup + j]
                program.append(Action(f_stage, "F", f_mb))
            program.append(Action(stage, "I", mb))
            if j >= held:
                w_stage, w_mb = backward[j - held]
                program.append(Action(w_stage, "W", w_mb))
        program += [Action(s, "W", m) for s, m in backward[max(0, total - held) :]]
        programs.append(program)
    return programs

"""1F1B (PipeDream-flush): warm-up forwards, then one forward / one backward, then cool-down.

Classic builder: pure, `build(stage_device, num_devices, num_microbatches) -> Programs`, one
stage per device (sequential placement). Device d runs min(P-1-d, M) warm-up forwards, then
alternates the next forward with the oldest pending backward, then drains the backwards.
This is the order torch's `Schedule1F1B` executes (its `pipeline_order` IR mis-numbers the
last rank's micro-batches, its runtime does not). Works for any M >= 1; torch itself
rejects M < P, where this degrades gracefully to fill-drain.
"""

from __future__ import annotations

from adaptis_plan.core import Action, Programs
from adaptis_plan.schedules._common import check_args

NAME = "1F1B"


def build(stage_device: tuple[int, ...], num_devices: int, num_microbatches: int) -> Programs:
    check_args(NAME, stage_device, num_devices, num_microbatches, "sequential", (1,))
    programs: Programs = []
    for d in range(num_devices):
        warmup = min(num_devices - 1 - d, num_microbatches)
        program = [Action(d, "F", m) for m in range(warmup)]
        for m in range(num_microbatches):
            if warmup + m < num_microbatches:
                program.append(Action(d, "F", warmup + m))
            program.append(Action(d, "B", m))
        programs.append(program)
    return programs

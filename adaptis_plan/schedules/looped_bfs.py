"""Looped BFS (breadth-first pipeline, arXiv 2211.05953): all forwards stage by stage, then
all backwards in reverse.

Classic builder: pure, `build(stage_device, num_devices, num_microbatches) -> Programs`, loop
placement with any number of stages per device. A device runs every micro-batch through its
first local stage, then its second, ...; then backwards from its last local stage to its
first, each over the micro-batches in reverse (M-1 down to 0), as torch's
`ScheduleLoopedBFS`.
"""

from __future__ import annotations

from adaptis_plan.core import Action, Programs
from adaptis_plan.schedules._common import check_args

NAME = "LoopedBFS"


def build(stage_device: tuple[int, ...], num_devices: int, num_microbatches: int) -> Programs:
    k = check_args(NAME, stage_device, num_devices, num_microbatches, "loop")
    programs: Programs = []
    for d in range(num_devices):
        local = [c * num_devices + d for c in range(k)]
        program = [Action(s, "F", m) for s in local for m in range(num_microbatches)]
        program += [Action(s, "B", m) for s in reversed(local) for m in reversed(range(num_microbatches))]
        programs.append(program)
    return programs

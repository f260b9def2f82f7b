"""GPipe (fill-drain): each device runs every micro-batch's forward, then every backward.

Classic builder: pure, `build(stage_device, num_devices, num_microbatches) -> Programs`, one
stage per device (sequential placement). Same order as torch's `ScheduleGPipe`. Imports only
`core`, `errors` and the schedules helpers.
"""

from __future__ import annotations

from adaptis_plan.core import Action, Programs
from adaptis_plan.schedules._common import check_args

NAME = "GPipe"


def build(stage_device: tuple[int, ...], num_devices: int, num_microbatches: int) -> Programs:
    check_args(NAME, stage_device, num_devices, num_microbatches, "sequential", (1,))
    mbs = range(num_microbatches)
    return [[Action(d, "F", m) for m in mbs] + [Action(d, "B", m) for m in mbs] for d in range(num_devices)]

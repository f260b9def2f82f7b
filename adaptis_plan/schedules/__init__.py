"""Schedules: the classic builders (one pure function per schedule, registered by torch's name)
and the placement / partition presets they run on.

Data flow: (stage_device, num_devices, num_microbatches) -> `core.Programs` (per device, the
F/B/I/W actions in execution order). No IO, no timing, no torch.

    spec = get_spec("interleaved1f1b")
    stage_device = spec.stage_device(num_devices=4)          # loop, 2 stages per device
    programs = spec.build(stage_device, 4, 8)
"""

from adaptis_plan.schedules.placement import (
    PLACEMENT_STYLES,
    ends_as_layers_bounds,
    is_placement,
    placement,
    uniform_bounds,
)
from adaptis_plan.schedules.registry import (
    STRATEGIES,
    Builder,
    ScheduleSpec,
    canonical_name,
    get_builder,
    get_spec,
)

__all__ = [
    "PLACEMENT_STYLES",
    "STRATEGIES",
    "Builder",
    "ScheduleSpec",
    "canonical_name",
    "ends_as_layers_bounds",
    "get_builder",
    "get_spec",
    "is_placement",
    "placement",
    "uniform_bounds",
]

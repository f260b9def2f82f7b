"""Registry of the classic schedules by torch's names (case-insensitive).

Data flow: the planner and the CLI look a strategy up here, build its placement with
`ScheduleSpec.stage_device` and its programs with `ScheduleSpec.build`. Imports only the
builders, `placement` and `errors`; no IO, no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from adaptis_plan.core import Programs
from adaptis_plan.errors import InputError
from adaptis_plan.schedules import (
    dualpipe_v,
    gpipe,
    interleaved_1f1b,
    interleaved_zero_bubble,
    looped_bfs,
    one_f_one_b,
    zbv_zero_bubble,
)
from adaptis_plan.schedules.placement import placement

Builder = Callable[[tuple[int, ...], int, int], Programs]


@dataclass(frozen=True)
class ScheduleSpec:
    """One classic schedule.

    `placement`: the stage -> device preset it is defined for (`sequential`, `loop`, `v`);
    `default_stages_per_device`; `stages_per_device`: the allowed counts (None = any >= 1);
    `split_backward`: its programs use I + W instead of B; `torch_class`: the class name in
    `torch.distributed.pipelining.schedules`.
    """

    name: str
    build: Builder
    placement: str
    default_stages_per_device: int
    stages_per_device: tuple[int, ...] | None
    split_backward: bool
    torch_class: str

    def stage_device(self, num_devices: int, stages_per_device: int | None = None) -> tuple[int, ...]:
        """This schedule's placement for `num_devices` (default stages per device when None)."""
        k = self.default_stages_per_device if stages_per_device is None else stages_per_device
        if self.stages_per_device is not None and k not in self.stages_per_device:
            allowed = " or ".join(str(n) for n in self.stages_per_device)
            raise InputError(
                f"{self.name}: stages per device = {k}: this schedule runs exactly {allowed} stage(s) per device;"
                f" use {allowed} or another strategy"
            )
        return placement(self.placement, num_devices, k)


_SPECS = (
    ScheduleSpec("GPipe", gpipe.build, "sequential", 1, (1,), False, "ScheduleGPipe"),
    ScheduleSpec("1F1B", one_f_one_b.build, "sequential", 1, (1,), False, "Schedule1F1B"),
    ScheduleSpec("Interleaved1F1B", interleaved_1f1b.build, "loop", 2, None, False, "ScheduleInterleaved1F1B"),
    ScheduleSpec("LoopedBFS", looped_bfs.build, "loop", 2, None, False, "ScheduleLoopedBFS"),
    ScheduleSpec(
        "InterleavedZeroBubble",
        interleaved_zero_bubble.build,
        "loop",
        2,
        None,
        True,
        "ScheduleInterleavedZeroBubble",
    ),
    ScheduleSpec("ZBVZeroBubble", zbv_zero_bubble.build, "v", 2, (2,), True, "ScheduleZBVZeroBubble"),
    ScheduleSpec("DualPipeV", dualpipe_v.build, "v", 2, (2,), True, "ScheduleDualPipeV"),
)

STRATEGIES: tuple[str, ...] = tuple(spec.name for spec in _SPECS)
_BY_KEY = {spec.name.lower(): spec for spec in _SPECS}


def get_spec(name: str) -> ScheduleSpec:
    """The classic schedule called `name` (case-insensitive)."""
    spec = _BY_KEY.get(str(name).lower())
    if spec is None:
        raise InputError(f"strategy = {name!r}: not a classic schedule; use one of {', '.join(STRATEGIES)}")
    return spec


def get_builder(name: str) -> Builder:
    """The builder `build(stage_device, num_devices, num_microbatches) -> Programs` of `name`."""
    return get_spec(name).build


def canonical_name(name: str) -> str:
    """torch's spelling of a classic schedule name given in any case ('zbvzerobubble' -> 'ZBVZeroBubble')."""
    return get_spec(name).name

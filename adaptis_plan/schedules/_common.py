"""Helpers shared by the classic builders: argument checks and the interleaved work orders.

Pure functions over ints and `core.Action`; imports only `core`, `errors` and `placement`.
"""

from __future__ import annotations

from adaptis_plan.core import Action
from adaptis_plan.errors import InputError
from adaptis_plan.schedules.placement import is_placement, placement


def check_args(
    name: str,
    stage_device: tuple[int, ...],
    num_devices: int,
    num_microbatches: int,
    style: str,
    stages_per_device: tuple[int, ...] | None = None,
) -> int:
    """Validate a builder's arguments; return the number of stages per device.

    `style` is the placement the schedule is defined for; `stages_per_device` the allowed
    counts (None = any count >= 1).
    """
    for field, value in (("num_devices", num_devices), ("num_microbatches", num_microbatches)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{name}: {field} = {value!r}: must be an integer >= 1; pass a positive count")
    stage_device = tuple(stage_device)
    if not stage_device or any(not isinstance(d, int) or not 0 <= d < num_devices for d in stage_device):
        raise InputError(
            f"{name}: stage_device = {stage_device}: needs at least one stage and devices in 0..{num_devices - 1};"
            " build it with schedules.placement()"
        )
    if len(stage_device) % num_devices:
        raise InputError(
            f"{name}: {len(stage_device)} stages on {num_devices} devices: every device must hold the same number of"
            f" stages; use a multiple of {num_devices} stages"
        )
    k = len(stage_device) // num_devices
    if stages_per_device is not None and k not in stages_per_device:
        allowed = " or ".join(str(n) for n in stages_per_device)
        raise InputError(
            f"{name}: stages per device = {k}: this schedule runs exactly {allowed} stage(s) per device;"
            f" use {allowed} stage(s) per device or another strategy"
        )
    if not is_placement(style, stage_device, num_devices):
        call = f"{style!r}, {num_devices}" + (f", {k}" if style != "sequential" else "")
        raise InputError(
            f"{name}: stage_device = {stage_device}: this schedule needs the {style!r} placement"
            f" {placement(style, num_devices, k)}; build it with schedules.placement({call})"
        )
    return k


def microbatch_groups(num_microbatches: int, num_devices: int) -> list[range]:
    """Consecutive micro-batch groups for the interleaved schedules (torch's "rounds").

    As torch: max(1, M // P) groups. When M is a multiple of the group count all groups have
    M / groups micro-batches (torch's `microbatches_per_round`); otherwise (torch rejects
    this) the first M % groups groups take one micro-batch more.
    """
    num_groups = max(1, num_microbatches // num_devices)
    base, extra = divmod(num_microbatches, num_groups)
    groups, start = [], 0
    for g in range(num_groups):
        size = base + (1 if g < extra else 0)
        groups.append(range(start, start + size))
        start += size
    return groups


def interleaved_orders(
    device: int, num_devices: int, stages_per_device: int, groups: list[range]
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Forward and backward (stage, mb) orders of one device under the loop placement.

    Depth first within a group: forwards run the group's micro-batches through local stage
    0, then local stage 1, ...; backwards through the last local stage first. Groups follow
    one another.
    """
    local = [c * num_devices + device for c in range(stages_per_device)]
    forward = [(stage, mb) for group in groups for stage in local for mb in group]
    backward = [(stage, mb) for group in groups for stage in reversed(local) for mb in group]
    return forward, backward


def actions(op: str, work: list[tuple[int, int]]) -> list[Action]:
    return [Action(stage, op, mb) for stage, mb in work]

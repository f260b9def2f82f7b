"""DualPipeV (DeepSeek's DualPipe folded into a V, arXiv 2412.19437): two stages per device in a
V; in the steady state a forward on one stage is paired with a full backward on the other
so that their communication can overlap.

Classic builder: pure, `build(stage_device, num_devices, num_microbatches) -> Programs`, V
placement with exactly 2 stages per device, M >= 2P micro-batches (as torch).

Definition (same order as torch's `ScheduleDualPipeV`), per device d. `F0`/`F1` are forwards
on the down stage d / up stage 2P-1-d, `B`/`I` full / input backwards; each stage and op takes
its micro-batches in order; every I queues its W and `W?` runs the oldest queued W (if any):
1. 2(P-d-1) x F0;  2. d+1 x (F0, F1);  3. P-d-1 x (I1, W?, F1);
4. M-2P+d+1 x (F0, B1, F1, B0): the overlapped pairs (F0;B1) and (F1;B0);
5. P-d-1 x (B1, F1, B0);
6. d+1 x (x1, x0), where x is B for the first half and I from the middle on (the switch to I
   happens at iteration (d+1)//2, before x1 on odd devices and between x1 and x0 on even ones);
7. P-d-1 x (W?, I0);  8. d+1 x W?.
torch writes the pairs of step 4/5 as one composite `OVERLAP_F_B` action; a program holds
plain actions, so each pair appears as its two sub-actions in order, forward first.
"""

from __future__ import annotations

from collections import Counter, deque

from adaptis_plan.core import Action, Programs
from adaptis_plan.errors import InputError
from adaptis_plan.schedules._common import check_args

NAME = "DualPipeV"


def build(stage_device: tuple[int, ...], num_devices: int, num_microbatches: int) -> Programs:
    check_args(NAME, stage_device, num_devices, num_microbatches, "v", (2,))
    num_stages = len(stage_device)
    if num_microbatches < num_stages:
        raise InputError(
            f"{NAME}: num_microbatches = {num_microbatches}: needs at least as many micro-batches as stages"
            f" ({num_stages}) to fill its V; use --microbatches >= {num_stages} or ZBVZeroBubble"
        )
    return [_device_program(d, num_devices, num_microbatches) for d in range(num_devices)]


def _device_program(d: int, num_devices: int, num_microbatches: int) -> list[Action]:
    p = num_devices
    down, up = d, 2 * p - 1 - d
    forwards: Counter[int] = Counter()
    backwards: Counter[int] = Counter()  # B and I share the count: both end a micro-batch's backward
    queued_w: deque[tuple[int, int]] = deque()
    program: list[Action] = []

    def f(stage: int) -> None:
        program.append(Action(stage, "F", forwards[stage]))
        forwards[stage] += 1

    def b(stage: int, split: bool = False) -> None:
        mb = backwards[stage]
        backwards[stage] += 1
        program.append(Action(stage, "I" if split else "B", mb))
        if split:
            queued_w.append((stage, mb))

    def w() -> None:
        if queued_w:
            stage, mb = queued_w.popleft()
            program.append(Action(stage, "W", mb))

    for _ in range(2 * (p - d - 1)):
        f(down)
    for _ in range(d + 1):
        f(down)
        f(up)
    for _ in range(p - d - 1):
        b(up, split=True)
        w()
        f(up)
    for _ in range(num_microbatches - 2 * p + d + 1):
        f(down)
        b(up)
        f(up)
        b(down)
    for _ in range(p - d - 1):
        b(up)
        f(up)
        b(down)
    split = False
    for i in range(d + 1):
        if i == (d + 1) // 2 and d % 2 == 1:
            split = True
        b(up, split)
        if i == (d + 1) // 2 and d % 2 == 0:
            split = True
        b(down, split)
    for _ in range(p - d - 1):
        w()
        b(down, split=True)
    for _ in range(d + 1):
        w()
    return program

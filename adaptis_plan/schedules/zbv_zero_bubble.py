"""ZB-V (zero bubble, V placement; arXiv 2401.10241 section 6): two stages per device in a V,
backward split into I and W.

Classic builder: pure, `build(stage_device, num_devices, num_microbatches) -> Programs`, V
placement with exactly 2 stages per device: device d holds the down stage d and the up stage
2P-1-d (the up stage of device 0 is the last stage).

Definition (same order as torch's `ScheduleZBVZeroBubble`, idle slots dropped), per device d,
with N = max(2P-1, M) micro-batches (the pattern needs 2P-1 to fill the V; work on
micro-batches >= M is then dropped). `F0`/`F1` are forwards on the down/up stage, `I0`/`W0`
... likewise; each stage and op takes its micro-batches in order:
1. warm-up: 2(P-d)-1 x F0; then d x (F1, F0); then P-d x (F1, I1, W1);
2. steady: while the up stage lags the down stage or the down stage has forwards left:
   (F0 if any left), I0, W0, F1, I1, W1;
3. cool-down: d x (I0, I1); P-d x (I0, W0); then the remaining W1's, then the remaining W0's.
"""

from __future__ import annotations

from collections import Counter

from adaptis_plan.core import Action, Programs
from adaptis_plan.schedules._common import check_args

NAME = "ZBVZeroBubble"


def build(stage_device: tuple[int, ...], num_devices: int, num_microbatches: int) -> Programs:
    check_args(NAME, stage_device, num_devices, num_microbatches, "v", (2,))
    return [_device_program(d, num_devices, num_microbatches) for d in range(num_devices)]


def _device_program(d: int, num_devices: int, num_microbatches: int) -> list[Action]:
    p = num_devices
    n = max(2 * p - 1, num_microbatches)
    down, up = d, 2 * p - 1 - d
    done: Counter[tuple[int, str]] = Counter()
    program: list[Action] = []

    def run(*ops: tuple[int, str]) -> None:
        for stage, op in ops:
            program.append(Action(stage, op, done[stage, op]))
            done[stage, op] += 1

    f0, i0, w0 = (down, "F"), (down, "I"), (down, "W")
    f1, i1, w1 = (up, "F"), (up, "I"), (up, "W")
    run(*[f0] * (2 * (p - d) - 1))
    run(*[f1, f0] * d)
    run(*[f1, i1, w1] * (p - d))
    while done[f1] < done[f0] or done[f0] < n:
        if done[f0] < n:
            run(f0)
        run(i0, w0, f1, i1, w1)
    run(*[i0, i1] * d)
    run(*[i0, w0] * (p - d))
    run(*[w1] * (done[i1] - done[w1]))
    run(*[w0] * (done[i0] - done[w0]))
    return [a for a in program if a.mb < num_microbatches]
